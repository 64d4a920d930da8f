//! Differential tests against goldens the real helm binary produced from
//! `tests/fixtures/chart` (see `tests/fixtures/regenerate.sh`).

mod common;

use common::{fixtures, go_json, helm_from_yaml, helm_from_yaml_array, helm_to_yaml, read};
use flotilla_yaml::{Mapping, Value};

fn values() -> Mapping {
    let src = read(&fixtures().join("chart/values.yaml"));
    flotilla_yaml::sigs::unmarshal_map(&src).expect("values.yaml parses")
}

fn section<'a>(values: &'a Mapping, name: &str) -> &'a Mapping {
    values
        .get_str(name)
        .and_then(Value::as_map)
        .unwrap_or_else(|| panic!("values.yaml has no map {name}"))
}

fn golden(category: &str, case: &str) -> String {
    read(
        &fixtures()
            .join("golden")
            .join(category)
            .join(format!("{case}.txt")),
    )
}

/// Cases where this crate is known to differ from helm, with the reason. The test fails if
/// one of them starts to match, so the list stays true.
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[];

/// Compares every case, then fails once with all differences listed.
fn check_all(category: &str, cases: Vec<(String, String)>) {
    let total = cases.len();
    let mut failures = Vec::new();
    for (case, got) in cases {
        let want = golden(category, &case);
        let known = KNOWN_DIFFERENCES.iter().any(|(k, _)| *k == case);
        if known && got == want {
            failures.push(format!(
                "--- {category}/{case} now matches helm: drop it from KNOWN_DIFFERENCES"
            ));
        } else if !known && got != want {
            failures.push(format!(
                "--- {category}/{case}\nwant: {want:?}\ngot:  {got:?}"
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} {category} cases differ from helm:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn parse_cases() -> Vec<(String, String)> {
    let v = values();
    section(&v, "parse")
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap_or_default().to_owned(),
                v.as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

#[test]
fn to_yaml_of_values_matches_helm() {
    let v = values();
    let cases = section(&v, "emit")
        .iter()
        .map(|(k, v)| (k.as_str().unwrap_or_default().to_owned(), helm_to_yaml(v)))
        .collect();
    check_all("emit", cases);
}

/// Helm 4's `toYamlPretty` (go-yaml v3, indent 2) of the same values, as Helm holds them
/// (`sigs.k8s.io/yaml` decoding: string keys, float64 numbers).
#[test]
fn to_yaml_pretty_of_values_matches_helm() {
    let v = values();
    let cases = section(&v, "emit")
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().unwrap_or_default().to_owned(),
                flotilla_yaml::helm::to_yaml_pretty(v),
            )
        })
        .collect();
    check_all("pretty", cases);
}

#[test]
fn from_yaml_then_to_yaml_matches_helm() {
    let cases = parse_cases()
        .into_iter()
        .map(|(name, src)| (name, helm_to_yaml(&helm_from_yaml(&src))))
        .collect();
    check_all("fromyaml", cases);
}

#[test]
fn from_yaml_then_to_json_matches_helm() {
    let cases = parse_cases()
        .into_iter()
        .map(|(name, src)| (name, go_json(&helm_from_yaml(&src)).unwrap_or_default()))
        .collect();
    check_all("fromyaml-json", cases);
}

#[test]
fn from_yaml_array_then_to_json_matches_helm() {
    let cases = parse_cases()
        .into_iter()
        .map(|(name, src)| {
            (
                name,
                go_json(&helm_from_yaml_array(&src)).unwrap_or_default(),
            )
        })
        .collect();
    check_all("fromyamlarray-json", cases);
}

fn map(entries: &[(&str, Value)]) -> Value {
    Value::Map(
        entries
            .iter()
            .map(|(k, v)| (Value::from(*k), v.clone()))
            .collect(),
    )
}

#[test]
fn to_yaml_of_template_literals_matches_helm() {
    let cases: Vec<(&str, Value)> = vec![
        (
            "ints",
            Value::Seq(vec![Value::Int(1), Value::Int(2), Value::Int(3)]),
        ),
        (
            "dict",
            map(&[
                ("b", Value::Int(1)),
                ("a", Value::Float(2.5)),
                ("c", Value::Seq(vec![])),
                ("d", Value::Map(Mapping::new())),
            ]),
        ),
        ("int", Value::Int(3)),
        ("float_integral", Value::Float(1.0)),
        ("float_big", Value::Float(1e6)),
        ("float_frac", Value::Float(0.25)),
        ("string", Value::from("x")),
        ("string_multiline", Value::from("a\nb\n")),
        ("nil", Value::Null),
        ("empty_list", Value::Seq(vec![])),
        ("empty_dict", Value::Map(Mapping::new())),
        ("bool", Value::Bool(true)),
        (
            "nested",
            map(&[
                (
                    "list",
                    Value::Seq(vec![
                        map(&[("k", Value::from("v"))]),
                        Value::Seq(vec![Value::Int(1), Value::from("2")]),
                    ]),
                ),
                ("n", Value::Null),
            ]),
        ),
    ];
    check_all(
        "literal",
        cases
            .into_iter()
            .map(|(n, v)| (n.to_owned(), helm_to_yaml(&v)))
            .collect(),
    );
}

/// Runs every case of `values_path` (a `parse` map of name → YAML text, an optional `emit`
/// map of name → value whose lines are `# <name> <toYaml|b64enc>`) against
/// `rendered_path`: `helm template` output of a template printing, per case, a line
/// `# <name> <fromYaml|toJson|b64enc> <fromYaml|toYaml|b64enc>`. Returns the names that
/// differ, after printing them.
fn differing_cases(
    values_path: &std::path::Path,
    rendered_path: &std::path::Path,
) -> (Vec<String>, usize) {
    let values = flotilla_yaml::sigs::unmarshal_map(&read(values_path)).expect("values parse");
    let parse = section(&values, "parse");
    let emit = values.get_str("emit").and_then(Value::as_map);
    let rendered = read(rendered_path);
    let mut bad = Vec::new();
    let mut total = 0;
    for line in rendered.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        if let [_, name, yaml_b64] = parts[..]
            && let Some(v) = emit.and_then(|e| e.get_str(name))
        {
            // `# <name> <toYaml|b64enc>` for an emit case.
            total += 1;
            let want = String::from_utf8(b64(yaml_b64)).unwrap_or_default();
            let got = helm_to_yaml(v);
            if got != want {
                bad.push(name.to_owned());
                println!("--- {name}\nvalue: {v:?}\nwant: {want:?}\ngot:  {got:?}");
            }
            continue;
        }
        let [_, name, json_b64, yaml_b64] = parts[..] else {
            continue;
        };
        let Some(src) = parse.get_str(name).and_then(Value::as_str) else {
            continue;
        };
        total += 1;
        let want_json = String::from_utf8(b64(json_b64)).unwrap_or_default();
        let want_yaml = String::from_utf8(b64(yaml_b64)).unwrap_or_default();
        let v = helm_from_yaml(src);
        let got_json = go_json(&v).unwrap_or_default();
        let got_yaml = helm_to_yaml(&v);
        if got_json != want_json || got_yaml != want_yaml {
            bad.push(name.to_owned());
            println!("--- {name}\nsrc:  {src:?}\nwant: {want_json}\ngot:  {got_json}");
            if got_json == want_json {
                println!("yaml want: {want_yaml:?}\nyaml got:  {got_yaml:?}");
            }
        }
    }
    println!("{} of {total} differ", bad.len());
    (bad, total)
}

/// Ad-hoc differential run: `FLOTILLA_YAML_ADHOC=values.yaml:rendered.txt` (see
/// [`differing_cases`]). Skipped when unset.
#[test]
fn adhoc_corpus_from_env() {
    let Ok(spec) = std::env::var("FLOTILLA_YAML_ADHOC") else {
        return;
    };
    let (values_path, rendered_path) = spec.split_once(':').expect("values:rendered");
    let (bad, total) = differing_cases(
        std::path::Path::new(values_path),
        std::path::Path::new(rendered_path),
    );
    assert!(bad.is_empty(), "{} of {total} differ", bad.len());
}

/// Mutated documents whose result differs from helm: saphyr's YAML 1.2 scanner and
/// libyaml part ways on these broken inputs before the first error, so the error text or
/// line differs. All of them fail in both, except r5_199 (a tab on the last line after a
/// block scalar), which libyaml refuses and this crate accepts.
const KNOWN_MUTATION_DIFFERENCES: &[&str] = &[
    "r5_186", "r5_199", "r5_203", "r5_219", "r5_234", "r5_253", "r5_277", "r5_280", "r5_293",
];

/// 300 randomly mutated documents (tests/fixtures/mutations) against helm.
#[test]
fn mutated_documents_match_helm_except_known() {
    let dir = fixtures().join("mutations");
    let (bad, total) = differing_cases(&dir.join("chart/values.yaml"), &dir.join("rendered.txt"));
    assert!(total >= 300, "only {total} cases");
    let unexpected: Vec<&String> = bad
        .iter()
        .filter(|n| !KNOWN_MUTATION_DIFFERENCES.contains(&n.as_str()))
        .collect();
    let fixed: Vec<&&str> = KNOWN_MUTATION_DIFFERENCES
        .iter()
        .filter(|n| !bad.iter().any(|b| b == **n))
        .collect();
    assert!(
        unexpected.is_empty() && fixed.is_empty(),
        "new differences: {unexpected:?}; now matching (drop from the list): {fixed:?}"
    );
}

fn b64(s: &str) -> Vec<u8> {
    let val = |c: u8| -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => u32::from(c - b'A'),
            b'a'..=b'z' => u32::from(c - b'a') + 26,
            b'0'..=b'9' => u32::from(c - b'0') + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        })
    };
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in s.bytes() {
        let Some(v) = val(c) else { continue };
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push(((acc >> bits) & 0xff) as u8);
        }
    }
    out
}

/// 400 random documents and 400 random values (tests/fixtures/random) against helm.
#[test]
fn random_documents_and_values_match_helm() {
    let dir = fixtures().join("random");
    let (bad, total) = differing_cases(&dir.join("chart/values.yaml"), &dir.join("rendered.txt"));
    assert!(total >= 800, "only {total} cases");
    assert!(bad.is_empty(), "{} of {total} differ: {bad:?}", bad.len());
}
