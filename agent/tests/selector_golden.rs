//! Label and annotation selectors of ignore-rule targets against Kubernetes' own
//! (`k8s.io/apimachinery/pkg/labels`, what Flux uses): every expression of
//! `fixtures/selectors/cases.json` must be accepted or refused, and match or not, as
//! recorded in `golden.json` by `fixtures/selectors/regenerate.sh`.

use std::collections::BTreeMap;

use flotilla_agent::drift::selector::LabelSelector;

#[test]
fn selectors_parse_and_match_as_kubernetes_does() -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/selectors");
    let cases: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json"))?)?;
    let golden: BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json"))?)?;
    let labels: BTreeMap<String, String> = serde_json::from_value(cases["labels"].clone())?;
    let exprs: Vec<String> = serde_json::from_value(cases["exprs"].clone())?;
    assert_eq!(exprs.len(), golden.len(), "regenerate golden.json");
    let mut failures = Vec::new();
    for e in &exprs {
        let got = match LabelSelector::parse(e) {
            Err(_) => "error",
            Ok(s) if s.matches(&labels) => "match",
            Ok(_) => "no match",
        };
        if got != golden[e] {
            failures.push(format!("{e:?}: want {}, got {got}", golden[e]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
