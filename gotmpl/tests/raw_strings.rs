//! Go strings that are not UTF-8 ([`Value::RawString`]): the builtins, `fmt` and the
//! executor's output keep their bytes as Go does; functions that read text see U+FFFD.

use flotilla_gotmpl::{ArgType, ExecOptions, FuncMap, Function, Signature, TemplateSet, Value};

/// `ab`, two bytes that cannot start a UTF-8 sequence, ` cd`, and a truncated sequence.
const LATIN: &[u8] = b"ab\xff\xfe cd\xc3";

fn data() -> Value {
    let m = flotilla_gotmpl::Map::new();
    m.insert("raw", Value::go_string(LATIN));
    m.insert("same", Value::go_string_owned(LATIN.to_vec()));
    m.insert("other", Value::go_string(b"ab\xff"));
    m.insert("text", Value::string("ab"));
    Value::Map(m)
}

fn funcs() -> FuncMap {
    let mut f = FuncMap::new();
    // A function reading text, and one handling a Go string's bytes.
    f.insert(
        "text",
        Function::new(Signature::fixed([ArgType::String]), |a| {
            Ok(Value::string(format!("{:?}", a[0].as_str())))
        }),
    );
    f.insert(
        "hex",
        Function::new(Signature::fixed([ArgType::GoString]), |a| {
            let b = a[0].as_go_bytes().unwrap_or_default();
            Ok(Value::string(
                b.iter().map(|x| format!("{x:02x}")).collect::<String>(),
            ))
        }),
    );
    f
}

fn render_bytes(text: &str) -> Vec<u8> {
    let funcs = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, &funcs).expect("parses");
    set.execute_bytes("t", &data(), &funcs, &ExecOptions::helm())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn render(text: &str) -> String {
    String::from_utf8(render_bytes(text)).unwrap_or_else(|e| panic!("{text}: not UTF-8: {e}"))
}

#[test]
fn go_string_keeps_utf8_on_the_fast_path_and_bytes_otherwise() {
    assert!(matches!(Value::go_string(b"plain"), Value::String(_)));
    assert!(matches!(
        Value::go_string_owned(b"plain".to_vec()),
        Value::String(_)
    ));
    let raw = Value::go_string(LATIN);
    assert!(matches!(raw, Value::RawString(_)));
    assert_eq!(raw.as_go_bytes(), Some(LATIN));
    assert_eq!(raw.as_str(), None);
    assert_eq!(
        raw.as_lossy_str().as_deref(),
        Some("ab\u{fffd}\u{fffd} cd\u{fffd}")
    );
    assert_eq!(raw.type_name(), "string");
    assert!(raw.is_true());
    assert!(raw.deep_equal(&Value::go_string_owned(LATIN.to_vec())));
    assert!(!raw.deep_equal(&Value::go_string(b"ab\xff")));
}

#[test]
fn printing_a_raw_string_writes_its_bytes() {
    assert_eq!(render_bytes("{{ .raw }}"), LATIN);
    assert_eq!(render_bytes("{{ print .raw }}|{{ printf \"%s\" .raw }}"), {
        let mut want = LATIN.to_vec();
        want.push(b'|');
        want.extend_from_slice(LATIN);
        want
    });
    // `execute` is the text view: each invalid sequence a U+FFFD.
    let funcs = funcs();
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", "{{ .raw }}", &funcs).expect("parses");
    let text = set
        .execute("t", &data(), &funcs, &ExecOptions::helm())
        .expect("renders");
    assert_eq!(text, "ab\u{fffd}\u{fffd} cd\u{fffd}");
}

#[test]
fn printf_verbs_treat_raw_strings_as_go_does() {
    assert_eq!(render("{{ printf \"%x\" .raw | hex }}"), {
        // `%x` of the bytes, then the hex of that text.
        "6162fffe206364c3"
            .bytes()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    });
    assert_eq!(render("{{ printf \"%X\" .raw }}"), "6162FFFE206364C3");
    assert_eq!(render("{{ printf \"%q\" .raw }}"), r#""ab\xff\xfe cd\xc3""#);
    assert_eq!(
        render("{{ printf \"%#v\" .raw }}"),
        r#""ab\xff\xfe cd\xc3""#
    );
    // Width counts runes, each byte of an invalid sequence as one (8 bytes, 8 runes).
    assert_eq!(render_bytes("{{ printf \"%10s\" .raw }}"), {
        let mut want = b"  ".to_vec();
        want.extend_from_slice(LATIN);
        want
    });
    assert_eq!(render_bytes("{{ printf \"%-9s|\" .raw }}"), {
        let mut want = LATIN.to_vec();
        want.extend_from_slice(b" |");
        want
    });
}

#[test]
fn len_index_and_slice_count_bytes() {
    assert_eq!(render("{{ len .raw }}"), "8");
    assert_eq!(render("{{ index .raw 2 }} {{ index .raw 7 }}"), "255 195");
    assert_eq!(render("{{ slice .raw 1 4 | hex }}"), "62fffe");
    // A slice that is valid UTF-8 is an ordinary string again.
    assert_eq!(render("{{ slice .raw 4 7 | text }}"), "Some(\" cd\")");
}

#[test]
fn comparisons_compare_bytes() {
    assert_eq!(render("{{ eq .raw .same }}"), "true");
    assert_eq!(render("{{ eq .raw .other }}"), "false");
    assert_eq!(render("{{ eq .raw .text }}"), "false");
    assert_eq!(render("{{ eq .text .raw }}"), "false");
    assert_eq!(render("{{ ne .raw .other }}"), "true");
    // "ab\xff" < "ab\xff\xfe..." < "ab\xff\xff"; "ab" is a prefix of both.
    assert_eq!(
        render("{{ lt .other .raw }} {{ lt .raw .other }}"),
        "true false"
    );
    assert_eq!(
        render("{{ lt .text .raw }} {{ le .raw .same }}"),
        "true true"
    );
}

#[test]
fn functions_get_bytes_or_text_as_they_declare() {
    assert_eq!(render("{{ hex .raw }}"), "6162fffe206364c3");
    assert_eq!(
        render("{{ text .raw }}"),
        "Some(\"ab\u{fffd}\u{fffd} cd\u{fffd}\")"
    );
    // A GoString parameter still takes string literals and ordinary strings.
    assert_eq!(render("{{ hex \"ab\" }} {{ hex .text }}"), "6162 6162");
}

#[test]
fn truth_and_with_see_a_non_empty_string() {
    assert_eq!(render("{{ if .raw }}yes{{ end }}"), "yes");
    assert_eq!(render("{{ with .raw }}{{ len . }}{{ end }}"), "8");
}
