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
const KNOWN_DIFFERENCES: &[(&str, &str)] = &[(
    "mut24",
    "anchor names: libyaml ends `&type:` at the `:` (its anchors are [0-9A-Za-z_-]); \
     saphyr's YAML 1.2 scanner takes `type:` as the name and fails later",
)];

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
