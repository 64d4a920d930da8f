//! `flotilla-agent apply`: plan-file mode, a thin client of the [`crate::runtime`].
//!
//! Every plan file is read first; a malformed one is reported on stderr with its file and
//! field and the others go on. The good plans are handed to the runtime as
//! [`Command::Upsert`]s with their charts in a [`LocalCharts`]; each status the runtime
//! reports is printed on stdout as a YAML document naming its HelmRelease:
//!
//! ```yaml
//! ---
//! apiVersion: helm.flotilla.dev/v1
//! kind: HelmRelease
//! metadata: {name: demo, namespace: default}
//! status: {...}
//! ```
//!
//! Without `--watch` each plan is reconciled once; the command exits 0 when every plan
//! file was good and every release ended ready, else 1 with one line per failure. With
//! `--watch` the runtime keeps reconciling on `spec.interval` (with retries and backoff)
//! until SIGINT or SIGTERM; then reconciles in flight finish their current Helm action
//! (within `--shutdown-grace`) and the command exits 0.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use flotilla_chart::Chart;
use flotilla_core::agent::{ObjectKey, Report, StatusReport};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::release::Step;

use super::ChartCache;
use crate::reconcile::plan_file::{self, PlanFile};
use crate::runtime::{Agent, AgentOptions, step_summary};

/// What `apply` was asked to do.
#[derive(Debug)]
pub struct Apply {
    /// The plan files read.
    pub loaded: Loaded,
    /// Keep reconciling until a signal.
    pub watch: bool,
    /// The runtime's options (`resume` and `requeue` are set here).
    pub options: AgentOptions,
}

/// The plan files read: the good ones by HelmRelease, and one line per bad one (already
/// printed on stderr).
#[derive(Debug, Default)]
pub struct Loaded {
    /// The good plans by HelmRelease, with their files.
    files: BTreeMap<ObjectKey, (PathBuf, ReleasePlan)>,
    /// Each chart the plans name, once, with its archive and the first plan file naming it.
    charts: BTreeMap<ChartDigest, (PathBuf, Vec<u8>, Chart)>,
    /// One line per plan file (or directory) that could not be used.
    pub failures: Vec<String>,
}

impl Loaded {
    /// How many plans are good.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// Whether no plan is good.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// Reads every plan file (before any cluster is contacted): a malformed one is reported
/// with its file and field, and the others are kept.
///
/// A chart is kept once however many plans name it: a plan file comes with its own copy of
/// the chart loaded and packaged, and 200 plans of one chart kept whole held 200 copies at
/// once, scattering the plans (which live as long as the agent) across a heap grown for
/// them, whose pages then stayed resident (`cargo xtask bench-agent`, docs/measurements.md).
pub fn load(plans: &[PathBuf]) -> Loaded {
    let (paths, mut failures) = plan_paths(plans);
    for f in &failures {
        eprintln!("{f}");
    }
    let mut files: BTreeMap<ObjectKey, (PathBuf, ReleasePlan)> = BTreeMap::new();
    let mut charts: BTreeMap<ChartDigest, (PathBuf, Vec<u8>, Chart)> = BTreeMap::new();
    for path in paths {
        let file = match plan_file::load(&path) {
            Ok(file) => file,
            Err(e) => {
                let line = crate::kube::error_chain(&e);
                eprintln!("{line}");
                failures.push(line);
                continue;
            }
        };
        let key = file.plan.object.key();
        if let Some((other, _)) = files.get(&key) {
            let line = format!(
                "{}: HelmRelease {key} is already planned by {}",
                path.display(),
                other.display()
            );
            eprintln!("{line}");
            failures.push(line);
            continue;
        }
        let PlanFile {
            plan,
            chart,
            archive,
            helm_release: _,
        } = file;
        if !charts.contains_key(&plan.chart.digest) {
            charts.insert(plan.chart.digest.clone(), (path.clone(), archive, chart));
        }
        files.insert(key, (path, plan));
    }
    Loaded {
        files,
        charts,
        failures,
    }
}

/// The plan files `paths` name: files as given, directories by their `*.yaml` and `*.yml`
/// files in name order. A directory that cannot be read or holds no plan file is an error
/// of its own, reported with the others.
fn plan_paths(paths: &[PathBuf]) -> (Vec<PathBuf>, Vec<String>) {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for path in paths {
        if !path.is_dir() {
            out.push(path.clone());
            continue;
        }
        let entries = match std::fs::read_dir(path) {
            Ok(entries) => entries,
            Err(e) => {
                errors.push(format!(
                    "{}: cannot read the directory: {e}",
                    path.display()
                ));
                continue;
            }
        };
        let mut found: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| {
                p.is_file()
                    && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
            })
            .collect();
        found.sort();
        if found.is_empty() {
            errors.push(format!("{}: no plan files (*.yaml, *.yml)", path.display()));
        }
        out.extend(found);
    }
    (out, errors)
}

/// Runs plan-file mode until done (or a signal, with `--watch`); returns the failures
/// (those of loading included). The plans' charts go into `charts`, where a restarted agent
/// finds them.
pub async fn apply(
    ctx: crate::reconcile::Context,
    charts: Arc<ChartCache>,
    apply: Apply,
) -> anyhow::Result<Vec<String>> {
    let Loaded {
        files,
        charts: plan_charts,
        mut failures,
    } = apply.loaded;
    if files.is_empty() {
        return Ok(failures);
    }

    let mut options = apply.options;
    options.resume = false;
    options.requeue = apply.watch;
    let (agent, mut reports) = Agent::start(ctx, charts.clone(), options)
        .await
        .context("starting the agent runtime")?;
    // Signal handlers first, so a signal during the first reconcile is not lost.
    let mut signals = Signals::new()?;
    for (path, archive, chart) in plan_charts.into_values() {
        charts
            .insert(archive, chart)
            .await
            .with_context(|| format!("{}: caching its chart", path.display()))?;
    }
    let mut waiting: BTreeMap<ObjectKey, PathBuf> = BTreeMap::new();
    for (key, (path, plan)) in files {
        waiting.insert(key, path);
        agent
            .upsert(plan)
            .context("the agent runtime stopped early")?;
    }
    let paths: BTreeMap<ObjectKey, PathBuf> = waiting.clone();
    let path_of = |key: &ObjectKey| {
        paths
            .get(key)
            .map_or_else(|| key.to_string(), |p| p.display().to_string())
    };
    let mut stopping = false;
    loop {
        tokio::select! {
            report = reports.recv() => {
                let Some(report) = report else { break };
                match report {
                    // The status as an action starts: the reconcile goes on.
                    Report::Status(status) if matches!(status.step, Step::Run { .. }) => {}
                    Report::Status(status) => {
                        print_status(&status)?;
                        let key = status.object.key();
                        if waiting.remove(&key).is_some() && !matches!(status.step, Step::Done) {
                            let ready = status
                                .status
                                .conditions
                                .get_condition(condition::READY)
                                .filter(|c| c.status != ConditionStatus::True)
                                .map(|c| format!(" ({}: {})", c.reason, c.message))
                                .unwrap_or_default();
                            failures.push(format!(
                                "{}: HelmRelease {key}: {}{ready}",
                                path_of(&key),
                                step_summary(&status.step)
                            ));
                        }
                    }
                    Report::Rejected { object, error, .. } => {
                        let line = format!("{}: {error}", path_of(&object));
                        eprintln!("{line}");
                        waiting.remove(&object);
                        failures.push(line);
                    }
                    Report::Event { .. } | Report::Deleted { .. } | Report::Preview(_) => {}
                }
                if !apply.watch && waiting.is_empty() && !stopping {
                    stopping = true;
                    agent.shutdown().context("the agent runtime stopped early")?;
                }
            }
            stop = signals.recv(), if !stopping => {
                if stop {
                    tracing::info!("stopping on a signal");
                    stopping = true;
                    // Whatever was not reconciled yet is not a failure of the plans.
                    waiting.clear();
                    agent.shutdown().context("the agent runtime stopped early")?;
                }
            }
        }
    }
    if apply.watch {
        // Stopped by a signal: a clean stop.
        return Ok(Vec::new());
    }
    Ok(failures)
}

/// Prints a status as a YAML document naming its HelmRelease.
fn print_status(report: &StatusReport) -> anyhow::Result<()> {
    let object = &report.object;
    let mut metadata = serde_json::json!({
        "name": object.name.as_str(),
        "namespace": object.namespace.as_str(),
    });
    if let Some(uid) = &object.uid {
        metadata["uid"] = uid.as_str().into();
    }
    let doc = serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": metadata,
        "status": report.status,
    });
    let json = serde_json::to_string(&doc)?;
    let yaml = flotilla_yaml::from_str(&json)?;
    let mut out = std::io::stdout().lock();
    write!(out, "---\n{}", flotilla_yaml::sigs::marshal(&yaml)?)?;
    out.flush()?;
    Ok(())
}

/// SIGINT and SIGTERM, registered once.
#[derive(Debug)]
pub struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    /// Registers the handlers.
    pub fn new() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for SIGINT or SIGTERM; true when one came.
    pub async fn recv(&mut self) -> bool {
        tokio::select! {
            s = self.interrupt.recv() => s.is_some(),
            s = self.terminate.recv() => s.is_some(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_file(dir: &std::path::Path, name: &str, chart: &str) -> PathBuf {
        let path = dir.join(format!("{name}.yaml"));
        let text = format!(
            "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  interval: 1m\nchart:\n  path: {chart}\n"
        );
        std::fs::write(&path, text).expect("a plan file is written");
        path
    }

    #[test]
    fn plans_naming_one_chart_keep_one_copy_of_it_and_each_plan() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let charts = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/charts");
        let ok = charts.join("ok");
        for name in ["a", "b", "c"] {
            plan_file(dir.path(), name, &ok.display().to_string());
        }
        let other = charts.join("podinfo-like");
        plan_file(dir.path(), "d", &other.display().to_string());

        let loaded = load(&[dir.path().to_owned()]);

        assert!(loaded.failures.is_empty(), "{:?}", loaded.failures);
        assert_eq!(loaded.len(), 4);
        assert_eq!(loaded.charts.len(), 2, "one chart per digest");
        for (digest, (path, archive, chart)) in &loaded.charts {
            assert_eq!(
                &ChartDigest::of_bytes(archive),
                digest,
                "{}",
                chart.metadata.name
            );
            assert!(
                loaded
                    .files
                    .values()
                    .any(|(p, plan)| p == path && &plan.chart.digest == digest),
                "the chart is kept with the plan file that first named it"
            );
        }
        let digests: std::collections::BTreeSet<_> = loaded
            .files
            .values()
            .map(|(_, plan)| plan.chart.digest.clone())
            .collect();
        assert_eq!(digests.len(), 2);
        assert!(digests.iter().all(|d| loaded.charts.contains_key(d)));
    }
}
