//! The alert rules of `deploy/monitoring/`, run by the real `promtool` (Debian's `prometheus`
//! package, installed by `tools/install-test-servers`): `promtool check rules` and `promtool
//! test rules` with the test file beside them, one test per alert, firing and not firing.
//! That the series they query are exported is checked against scrapes of the real binaries in
//! `fleet_outage.rs` (the certificate-renewal test, whose hub and agent export them all).

use std::process::Command;

use anyhow::Context as _;
use flotilla_tests::monitoring;

fn promtool(args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(monitoring::dir())
        .output()
        .context("running promtool (install it with tools/install-test-servers)")?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    anyhow::ensure!(out.status.success(), "promtool {args:?} failed:\n{text}");
    Ok(text)
}

#[test]
fn every_alert_rule_passes_promtool_with_a_firing_and_a_quiet_case_each() -> anyhow::Result<()> {
    let checked = promtool(&["check", "rules", "flotilla-alerts.yaml"])?;
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "flotilla-alerts.test.yaml"])?;
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Each alert has a test that expects it to fire (exp_alerts with labels) and a time at
    // which it must not (`exp_alerts: []`).
    let rules = std::fs::read_to_string(monitoring::dir().join("flotilla-alerts.yaml"))?;
    let tests = std::fs::read_to_string(monitoring::dir().join("flotilla-alerts.test.yaml"))?;
    let alerts: Vec<&str> = rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .collect();
    assert_eq!(alerts.len(), 7, "{alerts:?}");
    for alert in alerts {
        let cases: Vec<&str> = tests
            .split("alertname: ")
            .skip(1)
            .filter(|case| case.starts_with(&format!("{alert}\n")))
            .collect();
        assert!(
            cases.iter().any(|c| c.contains("exp_alerts: []")),
            "{alert} has no case where it stays quiet"
        );
        assert!(
            cases.iter().any(|c| c.contains("exp_labels:")),
            "{alert} has no case where it fires"
        );
    }
    Ok(())
}

#[test]
fn the_dashboard_is_grafana_json_whose_panels_all_query_flotilla_series() -> anyhow::Result<()> {
    let text = std::fs::read_to_string(monitoring::dir().join("flotilla-dashboard.json"))?;
    let dashboard: serde_json::Value = serde_json::from_str(&text)?;
    let panels = dashboard["panels"].as_array().context("panels")?;
    assert!(panels.len() >= 10);
    for panel in panels {
        let targets = panel["targets"].as_array().context("targets")?;
        assert!(!targets.is_empty(), "{} has no query", panel["title"]);
        for t in targets {
            let expr = t["expr"].as_str().unwrap_or_default();
            assert!(
                !monitoring::series_in(expr).is_empty(),
                "{}: {expr} names no Flotilla series",
                panel["title"]
            );
        }
    }
    Ok(())
}
