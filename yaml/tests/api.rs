//! Table tests of the public API: typing, errors, limits, emission of Go values.

use flotilla_yaml::{
    KeyOrder, Mapping, Value, from_slice, from_str, from_str_all, from_str_strict, sigs, to_string,
    to_string_with,
};

fn map(entries: Vec<(Value, Value)>) -> Value {
    Value::Map(entries.into_iter().collect())
}

fn s(x: &str) -> Value {
    Value::from(x)
}

#[test]
fn from_str_keeps_go_yaml_types() {
    let cases: Vec<(&str, Value)> = vec![
        ("1", Value::Int(1)),
        ("-0x10", Value::Int(-16)),
        (
            "9223372036854775808",
            Value::Uint(9_223_372_036_854_775_808),
        ),
        ("1.0", Value::Float(1.0)),
        ("1e3", Value::Float(1000.0)),
        ("yes", Value::Bool(true)),
        ("Off", Value::Bool(false)),
        ("~", Value::Null),
        ("", Value::Null),
        ("# nothing", Value::Null),
        ("'1'", s("1")),
        ("\"yes\"", s("yes")),
        ("2001-12-14", s("2001-12-14")),
        ("!!str 12", s("12")),
        ("!!float 12", Value::Float(12.0)),
        ("!!binary aGk=", s("hi")),
        ("!!binary /w==", Value::Bytes(vec![0xff])),
        ("!custom 12", s("12")),
        (
            "[1, a, null]",
            Value::Seq(vec![Value::Int(1), s("a"), Value::Null]),
        ),
        (
            "1: a\n1.5: b\ntrue: c\n~: d",
            map(vec![
                (Value::Int(1), s("a")),
                (Value::Float(1.5), s("b")),
                (Value::Bool(true), s("c")),
                (Value::Null, s("d")),
            ]),
        ),
    ];
    for (src, want) in cases {
        assert_eq!(from_str(src).unwrap(), want, "{src:?}");
    }
}

#[test]
fn repeated_keys_last_wins_in_place_unless_strict() {
    let v = from_str("a: 1\nb: 2\na: 3\n").unwrap();
    assert_eq!(
        v,
        map(vec![(s("a"), Value::Int(3)), (s("b"), Value::Int(2))])
    );
    let e = from_str_strict("a: 1\na: 3\n").unwrap_err();
    assert!(e.to_string().contains("already set in map"), "{e}");
}

#[test]
fn merge_keys_follow_go_yaml_v2() {
    // v2 applies a merge where it stands: later merges override earlier keys.
    let v = from_str("a: &a {k: 1, j: 1}\nb:\n  k: 0\n  <<: *a\n  j: 2\n").unwrap();
    assert_eq!(
        v.get("b"),
        Some(&map(vec![(s("k"), Value::Int(1)), (s("j"), Value::Int(2))]))
    );
    // Earlier maps of a merge sequence take precedence.
    let v = from_str("a: &a {x: 1}\nb: &b {x: 2, y: 2}\nc:\n  <<: [*a, *b]\n").unwrap();
    assert_eq!(v.get("c").and_then(|c| c.get("x")), Some(&Value::Int(1)));
    let e = from_str("a:\n  <<: [1]\n").unwrap_err();
    assert_eq!(
        e.to_string(),
        "yaml: map merge requires map or sequence of maps as the value"
    );
}

#[test]
fn multi_document_streams() {
    let docs = from_str_all("a: 1\n---\n- x\n---\n").unwrap();
    assert_eq!(docs.len(), 3);
    assert_eq!(docs[2], Value::Null);
    // Unmarshal reads only the first document.
    assert_eq!(
        from_str("a: 1\n---\nb: [").unwrap(),
        map(vec![(s("a"), Value::Int(1))])
    );
}

#[test]
fn errors_carry_go_yaml_text_and_lines() {
    let cases = [
        (
            "a: b: c\n",
            "yaml: mapping values are not allowed in this context",
        ),
        (
            "a: 1\nb: 2\nc: d: e\n",
            "yaml: line 3: mapping values are not allowed in this context",
        ),
        (
            "a:\n  - b\n  c: d\n",
            "yaml: line 2: did not find expected '-' indicator",
        ),
        (
            "a: 1\nb\nc: 2\n",
            "yaml: line 3: could not find expected ':'",
        ),
        (
            "a:\n\tb: 1\n",
            "yaml: line 2: found character that cannot start any token",
        ),
        ("a: *x\n", "yaml: unknown anchor 'x' referenced"),
        ("a: &x [*x]\n", "yaml: anchor 'x' value contains itself"),
        (
            "a: !!int foo\n",
            "yaml: cannot decode !!str `foo` as a !!int",
        ),
        ("a: \"\\q\"\n", "yaml: found unknown escape character"),
        ("a: \"\u{1}\"\n", "yaml: control characters are not allowed"),
    ];
    for (src, want) in cases {
        assert_eq!(from_str(src).unwrap_err().to_string(), want, "{src:?}");
    }
    let e = sigs::unmarshal("a: b: c").unwrap_err();
    assert_eq!(
        e.to_string(),
        "error converting YAML to JSON: yaml: mapping values are not allowed in this context"
    );
    assert_eq!(
        from_slice(b"a: \xff\n").unwrap_err().to_string(),
        "yaml: invalid leading UTF-8 octet"
    );
}

#[test]
fn sigs_unmarshal_makes_json_values() {
    let v = sigs::unmarshal("1: 2\ntrue: [3]\n1.5: x\n").unwrap();
    assert_eq!(
        v,
        map(vec![
            (s("1"), Value::Float(2.0)),
            (s("true"), Value::Seq(vec![Value::Float(3.0)])),
            (s("1.5"), s("x")),
        ])
    );
    assert_eq!(
        sigs::unmarshal("a: .inf").unwrap_err().to_string(),
        "error converting YAML to JSON: json: unsupported value: +Inf"
    );
    assert_eq!(
        sigs::unmarshal_map("- a").unwrap_err().to_string(),
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type map[string]interface {}"
    );
    assert_eq!(sigs::unmarshal_map("").unwrap(), Mapping::new());
}

#[test]
fn nesting_and_alias_bombs_are_errors_not_crashes() {
    let deep = "[".repeat(100_000);
    assert!(from_str(&deep).is_err());
    let deep_block: String = (0..5000)
        .map(|i| format!("{}- \n", " ".repeat(i * 2)))
        .collect();
    assert!(from_str(&deep_block).is_err());
    let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
    for n in 0..9u8 {
        let prev = char::from(b'a' + n);
        let cur = char::from(b'b' + n);
        bomb.push_str(&format!(
            "{cur}: &{cur} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
        ));
    }
    assert_eq!(
        from_str(&bomb).unwrap_err().to_string(),
        "yaml: document contains excessive aliasing"
    );
    let deep_value = (0..5000).fold(Value::Null, |v, _| Value::Seq(vec![v]));
    assert!(to_string(&deep_value).is_err());
}

#[test]
fn to_string_is_go_yaml_marshal() {
    let v = map(vec![
        (s("b"), Value::Float(1e6)),
        (s("a"), Value::Float(1.0)),
        (Value::Int(2), Value::Bytes(vec![0xff, 0xfe])),
        (Value::Bool(false), Value::Uint(u64::MAX)),
        (s("list"), Value::Seq(vec![s("x"), Value::Seq(vec![])])),
        (s("nan"), Value::Float(f64::NAN)),
    ]);
    assert_eq!(
        to_string(&v).unwrap(),
        "false: 18446744073709551615\n2: !!binary //4=\na: 1\nb: 1e+06\nlist:\n- x\n- []\nnan: .nan\n"
    );
    assert_eq!(
        to_string_with(&v, KeyOrder::Insertion)
            .unwrap()
            .lines()
            .next(),
        Some("b: 1e+06")
    );
    assert_eq!(to_string(&s("x")).unwrap(), "x\n");
    assert_eq!(to_string(&Value::Null).unwrap(), "null\n");
}

#[test]
fn helm_to_yaml_goes_through_json() {
    let v = map(vec![
        (s("f"), Value::Float(3.0)),
        (s("g"), Value::Float(1e21)),
        (s("h"), Value::Float(0.5)),
    ]);
    assert_eq!(sigs::helm_to_yaml(&v).unwrap(), "f: 3\ng: 1e+21\nh: 0.5");
    assert!(sigs::marshal(&Value::Float(f64::NAN)).is_err());
    assert!(sigs::marshal(&map(vec![(Value::Int(1), Value::Null)])).is_err());
    assert!(sigs::marshal(&s("del\u{7f}")).is_err());
}

#[test]
fn many_libyaml_only_constructs_still_read() {
    // A tab after `:` is a separator for libyaml, not for saphyr: each needs a repair.
    let src: String = (0..500).map(|i| format!("k{i}:\tv{i}\n")).collect();
    let v = from_str(&src).unwrap();
    assert_eq!(v.as_map().map(Mapping::len), Some(500));
    assert_eq!(v.get("k499"), Some(&s("v499")));
}

#[test]
fn quoted_continuation_lines_need_no_indentation() {
    // libyaml folds `"a\nb"` even when `b"` starts at column 0; each one is a repair here.
    let src: String = (0..300).map(|i| format!("k{i}: \"a\nb\"\n")).collect();
    let v = from_str(&src).unwrap();
    assert_eq!(v.get("k299"), Some(&s("a b")));
    // Bounded work on input that keeps needing repairs.
    let hostile: String = (0..5000).map(|i| format!("k{i}:\tv\n")).collect();
    let _ = from_str(&hostile);
}
