//! The kstatus rules, table-tested from JSON fixtures (`tests/fixtures/kstatus.json`): each
//! case names a sentence, an object, the Job rule, optionally the time, and the expected
//! status (and message).

use flotilla_agent::kube::status::{JobRule, compute_at};
use k8s_openapi::jiff::Timestamp;
use serde_json::Value;

#[test]
fn every_kstatus_fixture_computes_its_expected_status() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/kstatus.json"
    ))?;
    let cases: Vec<Value> = serde_json::from_str(&text)?;
    assert!(cases.len() > 30);
    let mut failures = Vec::new();
    for case in &cases {
        let name = case["name"].as_str().unwrap_or("?");
        let jobs = match case["jobs"].as_str() {
            Some("complete") => JobRule::Complete,
            _ => JobRule::Started,
        };
        let now: Timestamp = case["now"]
            .as_str()
            .unwrap_or("2026-06-01T00:00:00Z")
            .parse()?;
        let got = compute_at(&case["object"], jobs, now);
        let want_status = case["status"].as_str().unwrap_or("?");
        if got.status.to_string() != want_status {
            failures.push(format!(
                "{name}: want {want_status}, got {} ({})",
                got.status, got.message
            ));
        }
        if let Some(want) = case["message"].as_str()
            && got.message != want
        {
            failures.push(format!(
                "{name}: want message {want:?}, got {:?}",
                got.message
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
