//! The drift differ against the real `wI2L/jsondiff` (the differ Flux's drift detection
//! uses, with `Rationalize`): every case of `fixtures/jsondiff/cases.json` must give the
//! patch recorded in `golden.json` by `fixtures/jsondiff/regenerate.sh`.

use flotilla_agent::drift::jsondiff::{compare, patch_json};
use serde_json::Value;

#[test]
fn patches_match_wi2l_jsondiff_with_rationalize() -> anyhow::Result<()> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/jsondiff");
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("cases.json"))?)?;
    let golden: serde_json::Map<String, Value> =
        serde_json::from_str(&std::fs::read_to_string(dir.join("golden.json"))?)?;
    assert_eq!(cases.len(), golden.len(), "regenerate golden.json");
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or_default();
        let got = patch_json(&compare(&case["source"], &case["target"]));
        let want = &golden[name];
        if &got != want {
            failures.push(format!("{name}:\n  want {want}\n  got  {got}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
