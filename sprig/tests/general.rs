//! Properties of the general families that goldens cannot pin down: the random functions
//! (shape, length, alphabet), the documented choices (`keys`/`values` order), and robustness
//! (no panic on any combination of arguments).

use flotilla_gotmpl::{ExecOptions, FuncMap, TemplateSet, Value};

fn data() -> Value {
    Value::from_json(&serde_json::json!({
        "list": ["b", "a"], "map": {"k": "v", "n": {"x": 1}}, "num": 3, "nothing": null
    }))
}

fn render_with(funcs: &FuncMap, text: &str) -> Result<String, flotilla_gotmpl::Error> {
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, funcs)?;
    set.execute("t", &data(), funcs, &ExecOptions::helm())
}

fn render(text: &str) -> Result<String, flotilla_gotmpl::Error> {
    render_with(&flotilla_sprig::funcs(), text)
}

fn ok(text: &str) -> String {
    render(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn random_strings_have_the_requested_length_and_alphabet() {
    type Allowed = fn(char) -> bool;
    let cases: [(&str, Allowed); 4] = [
        ("randAlphaNum", |c| c.is_ascii_alphanumeric()),
        ("randAlpha", |c| c.is_ascii_alphabetic()),
        ("randNumeric", |c| c.is_ascii_digit()),
        ("randAscii", |c| (' '..='~').contains(&c)),
    ];
    for (name, allowed) in cases {
        for n in [0usize, 1, 7, 64, 1000] {
            let s = ok(&format!("{{{{ {name} {n} }}}}"));
            assert_eq!(s.chars().count(), n, "{name} {n}");
            assert!(s.chars().all(allowed), "{name} {n}: {s:?}");
        }
        assert_eq!(
            ok(&format!("{{{{ {name} -3 }}}}")),
            "",
            "{name} with a negative count"
        );
        // Two long draws are different.
        let (a, b) = (
            ok(&format!("{{{{ {name} 64 }}}}")),
            ok(&format!("{{{{ {name} 64 }}}}")),
        );
        assert_ne!(a, b, "{name} is random");
    }
}

#[test]
fn uuidv4_is_a_random_version_4_uuid() {
    let re =
        regex::Regex::new("^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
            .expect("regex");
    let a = ok("{{ uuidv4 }}");
    let b = ok("{{ uuidv4 }}");
    assert!(re.is_match(&a), "{a}");
    assert!(re.is_match(&b), "{b}");
    assert_ne!(a, b);
    assert_eq!(ok("{{ uuidv4 | typeOf }}"), "string");
}

#[test]
fn shuffle_permutes_runes() {
    let input = "abcdefghijklmnopqrstuvwxyzé⚓";
    let mut sorted_in: Vec<char> = input.chars().collect();
    sorted_in.sort_unstable();
    let mut seen_other = false;
    for _ in 0..5 {
        let out = ok(&format!("{{{{ shuffle \"{input}\" }}}}"));
        let mut sorted_out: Vec<char> = out.chars().collect();
        sorted_out.sort_unstable();
        assert_eq!(sorted_in, sorted_out);
        seen_other |= out != input;
    }
    assert!(seen_other);
    assert_eq!(ok("{{ shuffle \"\" }}"), "");
}

#[test]
fn rand_int_stays_in_range() {
    for _ in 0..50 {
        let n: i64 = ok("{{ randInt 3 7 }}").parse().expect("int");
        assert!((3..7).contains(&n), "{n}");
    }
    assert_eq!(ok("{{ randInt 0 1 }}"), "0");
    assert_eq!(ok("{{ randInt 1 2 | typeOf }}"), "int");
    assert!(render("{{ randInt 5 5 }}").is_err());
}

#[test]
fn keys_and_values_come_in_sorted_key_order() {
    // Go iterates maps randomly; we choose sorted order per map.
    assert_eq!(ok(r#"{{ keys (dict "b" 1 "c" 2 "a" 3) }}"#), "[a b c]");
    assert_eq!(
        ok(r#"{{ keys (dict "z" 1) (dict "b" 1 "a" 2) }}"#),
        "[z a b]"
    );
    assert_eq!(ok(r#"{{ values (dict "b" 1 "c" 2 "a" 3) }}"#), "[3 1 2]");
}

#[test]
fn get_host_by_name_is_disabled_like_helm_without_enable_dns() {
    assert_eq!(ok(r#"[{{ getHostByName "example.com" }}]"#), "[]");
}

#[test]
fn helm_owned_and_os_functions_are_not_registered() {
    let funcs = flotilla_sprig::funcs();
    for name in [
        "env",
        "expandenv",
        "fail",
        "required",
        "include",
        "tpl",
        "toYaml",
        "fromYaml",
        "toJson",
        "fromJson",
        "toToml",
        "lookup",
    ] {
        assert!(
            !funcs.contains(name),
            "{name} must not come from Sprig here"
        );
    }
}

/// Every general function, called with every combination of up to three arguments from a
/// pool of awkward values, returns a result or an error and never panics.
#[test]
fn no_function_panics_on_any_arguments() {
    let names = [
        "hello",
        "abbrev",
        "abbrevboth",
        "trunc",
        "trim",
        "upper",
        "lower",
        "title",
        "untitle",
        "substr",
        "repeat",
        "trimall",
        "trimAll",
        "trimSuffix",
        "trimPrefix",
        "nospace",
        "initials",
        "randAlphaNum",
        "randAlpha",
        "randAscii",
        "randNumeric",
        "swapcase",
        "shuffle",
        "snakecase",
        "camelcase",
        "kebabcase",
        "wrap",
        "wrapWith",
        "contains",
        "hasPrefix",
        "hasSuffix",
        "quote",
        "squote",
        "cat",
        "indent",
        "nindent",
        "replace",
        "plural",
        "toString",
        "atoi",
        "int64",
        "int",
        "float64",
        "seq",
        "toDecimal",
        "split",
        "splitList",
        "splitn",
        "toStrings",
        "until",
        "untilStep",
        "add1",
        "add",
        "sub",
        "div",
        "mod",
        "mul",
        "randInt",
        "add1f",
        "addf",
        "subf",
        "divf",
        "mulf",
        "biggest",
        "max",
        "min",
        "maxf",
        "minf",
        "ceil",
        "floor",
        "round",
        "join",
        "sortAlpha",
        "default",
        "empty",
        "coalesce",
        "all",
        "any",
        "compact",
        "mustCompact",
        "ternary",
        "deepCopy",
        "mustDeepCopy",
        "typeOf",
        "typeIs",
        "typeIsLike",
        "kindOf",
        "kindIs",
        "deepEqual",
        "getHostByName",
        "base",
        "dir",
        "clean",
        "ext",
        "isAbs",
        "osBase",
        "osClean",
        "osDir",
        "osExt",
        "osIsAbs",
        "b64enc",
        "b64dec",
        "b32enc",
        "b32dec",
        "tuple",
        "list",
        "dict",
        "get",
        "set",
        "unset",
        "hasKey",
        "pluck",
        "keys",
        "pick",
        "omit",
        "merge",
        "mergeOverwrite",
        "mustMerge",
        "mustMergeOverwrite",
        "values",
        "append",
        "push",
        "mustAppend",
        "mustPush",
        "prepend",
        "mustPrepend",
        "first",
        "mustFirst",
        "rest",
        "mustRest",
        "last",
        "mustLast",
        "initial",
        "mustInitial",
        "reverse",
        "mustReverse",
        "uniq",
        "mustUniq",
        "without",
        "mustWithout",
        "has",
        "mustHas",
        "slice",
        "mustSlice",
        "concat",
        "dig",
        "chunk",
        "mustChunk",
        "uuidv4",
        "regexMatch",
        "mustRegexMatch",
        "regexFindAll",
        "mustRegexFindAll",
        "regexFind",
        "mustRegexFind",
        "regexReplaceAll",
        "mustRegexReplaceAll",
        "regexReplaceAllLiteral",
        "mustRegexReplaceAllLiteral",
        "regexSplit",
        "mustRegexSplit",
        "regexQuoteMeta",
        "urlParse",
        "urlJoin",
    ];
    let funcs = flotilla_sprig::funcs();
    for name in names {
        assert!(funcs.contains(name), "{name} is registered");
    }
    let pool = [
        "0",
        "-1",
        "3",
        "2.5",
        "\"a:b/c%\"",
        "\"\"",
        "nil",
        ".list",
        ".map",
        "(dict)",
        "true",
        "\"([\"",
    ];
    let mut texts = Vec::new();
    for name in names {
        texts.push(format!("{{{{ {name} }}}}"));
        for a in pool {
            texts.push(format!("{{{{ {name} {a} }}}}"));
            for b in pool {
                texts.push(format!("{{{{ {name} {a} {b} }}}}"));
                for c in ["-1", "\"x\"", ".map"] {
                    texts.push(format!("{{{{ {name} {a} {b} {c} }}}}"));
                }
            }
        }
    }
    let mut rendered = 0;
    for t in &texts {
        if render_with(&funcs, t).is_ok() {
            rendered += 1;
        }
    }
    assert!(rendered > texts.len() / 10, "{rendered} of {}", texts.len());
}

/// `ab`, two bytes that cannot start a UTF-8 sequence, ` cd`, and a truncated sequence.
const LATIN: &[u8] = b"ab\xff\xfe cd\xc3";

/// Renders with `.raw` a Go string holding [`LATIN`] and `.bytes` the same as a `[]byte`;
/// the output as bytes.
fn render_raw(text: &str) -> Vec<u8> {
    let funcs = flotilla_sprig::funcs();
    let m = flotilla_gotmpl::Map::new();
    m.insert("raw", Value::go_string(LATIN));
    m.insert("bytes", Value::Bytes(std::sync::Arc::from(LATIN)));
    let mut set = TemplateSet::new("gotpl");
    set.parse("t", text, &funcs).expect("parses");
    set.execute_bytes("t", &Value::Map(m), &funcs, &ExecOptions::helm())
        .unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn raw_ok(text: &str) -> String {
    String::from_utf8(render_raw(text)).unwrap_or_else(|e| panic!("{text}: not UTF-8: {e}"))
}

#[test]
fn encodings_and_hashes_use_the_bytes_of_strings_that_are_not_utf8() {
    assert_eq!(raw_ok("{{ b64enc .raw }}"), "YWL//iBjZMM=");
    assert_eq!(raw_ok("{{ b32enc .raw }}"), "MFRP77RAMNSMG===");
    assert_eq!(render_raw("{{ b64enc .raw | b64dec }}"), LATIN);
    assert_eq!(render_raw("{{ b32enc .raw | b32dec }}"), LATIN);
    assert_eq!(raw_ok("{{ eq (b64enc .raw | b64dec) .raw }}"), "true");
    assert_eq!(
        raw_ok("{{ sha1sum .raw }}"),
        "9593d4cd4563f79221feecd5bc817cb819d66c8e"
    );
    assert_eq!(
        raw_ok("{{ sha256sum .raw }}"),
        "1784cbb960592316f52e1f8d8aaa9ccf0895aa3ae6bd464b290171a2817af342"
    );
    assert_eq!(
        raw_ok("{{ sha512sum .raw }}"),
        "988a742fd655c49e966bfac524f6fc138859eef0f418365ade979be51ad3a3bfffd73a6d6fd434e368130729ac82fd99543363163e7f1904b45fcdd4747f0a6c"
    );
    assert_eq!(raw_ok("{{ adler32sum .raw }}"), "333579371");
}

#[test]
fn string_conversions_and_quoting_keep_or_escape_the_bytes_as_go_does() {
    assert_eq!(render_raw("{{ toString .raw }}"), LATIN);
    assert_eq!(render_raw("{{ toString .bytes }}"), LATIN);
    assert_eq!(raw_ok("{{ toString .bytes | b64enc }}"), "YWL//iBjZMM=");
    // `%q`: each byte of an invalid sequence as `\xNN`.
    assert_eq!(raw_ok("{{ quote .raw }}"), r#""ab\xff\xfe cd\xc3""#);
    assert_eq!(raw_ok("{{ quote .bytes }}"), r#""ab\xff\xfe cd\xc3""#);
    assert_eq!(
        render_raw("{{ squote .raw }}"),
        [b"'", LATIN, b"'"].concat()
    );
    assert_eq!(
        render_raw("{{ cat .raw 1 .raw }}"),
        [LATIN, b" 1 ", LATIN].concat()
    );
    // encoding/json writes each invalid byte as \ufffd.
    assert_eq!(
        raw_ok("{{ toRawJson (list .raw) }}"),
        r#"["ab\ufffd\ufffd cd\ufffd"]"#
    );
    assert_eq!(
        raw_ok("{{ typeOf .raw }} {{ kindOf .raw }} {{ empty .raw }}"),
        "string string false"
    );
    assert_eq!(render_raw("{{ default \"x\" .raw }}"), LATIN);
    // A function that reads text sees U+FFFD.
    assert_eq!(raw_ok("{{ upper .raw }}"), "AB\u{fffd}\u{fffd} CD\u{fffd}");
}
