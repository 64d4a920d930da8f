//! The monitoring files of `deploy/monitoring/` (alert rules and a Grafana dashboard) against
//! what the binaries export: every series a rule or a panel queries must be in a scrape of the
//! real `flotilla-hub` or `flotilla-agent`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use anyhow::Context as _;

/// `deploy/monitoring/` of this repository.
pub fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring")
}

/// The `flotilla_*` series named in `text` (a rule file or a dashboard).
pub fn series_in(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("flotilla_") {
        // A name starts where the previous character cannot continue one.
        let before = rest[..at].chars().next_back();
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    out
}

/// Every series the monitoring files name: the rules' and the dashboard's.
pub fn queried_series() -> anyhow::Result<BTreeSet<String>> {
    let mut all = BTreeSet::new();
    for file in ["flotilla-alerts.yaml", "flotilla-dashboard.json"] {
        let path = dir().join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        all.extend(series_in(&text));
    }
    Ok(all)
}

/// Whether the OpenMetrics `scrape` exports `series`: a sample of that name, or (for a
/// family with no sample yet, e.g. a counter by error kind before the first error) its
/// `# TYPE` line, `series` being the family's name or a sample name of it (`_total`,
/// `_bucket`, `_count`, `_sum`).
pub fn exports(scrape: &str, series: &str) -> bool {
    scrape.lines().any(|line| {
        if let Some(family) = line.strip_prefix("# TYPE ") {
            let family = family.split(' ').next().unwrap_or_default();
            return family == series
                || ["_total", "_bucket", "_count", "_sum"]
                    .iter()
                    .any(|s| series.strip_suffix(s) == Some(family));
        }
        line.strip_prefix(series)
            .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
    })
}

/// The series of `queried` that none of `scrapes` exports.
pub fn missing<'a>(queried: &'a BTreeSet<String>, scrapes: &[&str]) -> Vec<&'a str> {
    queried
        .iter()
        .filter(|s| !scrapes.iter().any(|scrape| exports(scrape, s)))
        .map(String::as_str)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_are_found_in_expressions_and_only_whole_names() {
        let names = series_in(
            r#"sum(rate(flotilla_hub_reconciles_total{result="error"}[5m])) / x_flotilla_not (flotilla_agent_plans_held>0)"#,
        );
        assert_eq!(
            names.into_iter().collect::<Vec<_>>(),
            ["flotilla_agent_plans_held", "flotilla_hub_reconciles_total"]
        );
    }

    #[test]
    fn a_series_is_exported_by_a_sample_or_by_its_familys_type_line() {
        let scrape = "# TYPE flotilla_agent_reconcile_errors counter\n# TYPE flotilla_hub_queue_depth gauge\nflotilla_hub_queue_depth{controller=\"helmrelease\"} 0\nflotilla_agent_plans_held 2\n";
        assert!(exports(scrape, "flotilla_hub_queue_depth"));
        assert!(exports(scrape, "flotilla_agent_plans_held"));
        assert!(exports(scrape, "flotilla_agent_reconcile_errors_total"));
        assert!(!exports(scrape, "flotilla_agent_plans"));
        assert!(!exports(scrape, "flotilla_hub_sessions"));
        let queried: BTreeSet<String> = ["flotilla_agent_plans_held", "flotilla_hub_nothing"]
            .map(str::to_owned)
            .into();
        assert_eq!(missing(&queried, &[scrape]), ["flotilla_hub_nothing"]);
    }
}
