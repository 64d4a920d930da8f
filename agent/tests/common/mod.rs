//! Helpers shared by the agent's cluster tests: HelmRelease plan files for the charts of
//! `agent/tests/charts`, agent contexts, and reading reconcile reports.
// Each test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_agent::reconcile::plan_file::{self, PlanFile};
use flotilla_agent::reconcile::render::Renderer;
use flotilla_agent::reconcile::{Context, ReconcileReport, reconcile};
use flotilla_core::meta::{ConditionStatus, Conditions as _};
use flotilla_tests::{Cluster, ClusterOptions};

/// `agent/tests/charts`, where the test charts live.
pub fn charts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/charts")
}

/// A HelmRelease plan file: `default/<name>`, generation 1, interval 1m, timeout 30s, no
/// other spec, chart `chart` of [`charts`] unless set otherwise.
#[derive(Clone, Debug)]
pub struct Hr {
    name: String,
    namespace: String,
    uid: Option<String>,
    generation: i64,
    interval: String,
    timeout: Option<String>,
    spec: String,
    chart: String,
}

impl Hr {
    pub fn new(name: &str, chart: &str) -> Hr {
        Hr {
            name: name.to_owned(),
            namespace: "default".to_owned(),
            uid: None,
            generation: 1,
            interval: "1m".to_owned(),
            timeout: Some("30s".to_owned()),
            spec: String::new(),
            chart: chart.to_owned(),
        }
    }

    pub fn namespace(mut self, namespace: &str) -> Hr {
        self.namespace = namespace.to_owned();
        self
    }

    pub fn uid(mut self, uid: Option<&str>) -> Hr {
        self.uid = uid.map(str::to_owned);
        self
    }

    pub fn generation(mut self, generation: i64) -> Hr {
        self.generation = generation;
        self
    }

    pub fn interval(mut self, interval: &str) -> Hr {
        self.interval = interval.to_owned();
        self
    }

    /// `spec.timeout`; `None` leaves it out (Flux's default applies).
    pub fn timeout(mut self, timeout: Option<&str>) -> Hr {
        self.timeout = timeout.map(str::to_owned);
        self
    }

    /// More `spec` lines, each indented by two spaces.
    pub fn spec(mut self, lines: &str) -> Hr {
        self.spec = lines.to_owned();
        self
    }

    /// The plan file's text, naming the chart by `chart_path`.
    fn text(&self, chart_path: &str) -> String {
        let Hr {
            name,
            namespace,
            generation,
            interval,
            spec,
            ..
        } = self;
        let uid = self
            .uid
            .as_ref()
            .map(|u| format!("  uid: {u}\n"))
            .unwrap_or_default();
        let timeout = self
            .timeout
            .as_ref()
            .map(|t| format!("  timeout: {t}\n"))
            .unwrap_or_default();
        let spec = if spec.is_empty() || spec.ends_with('\n') {
            spec.clone()
        } else {
            format!("{spec}\n")
        };
        format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: {name}
  namespace: {namespace}
{uid}  generation: {generation}
spec:
  interval: {interval}
{timeout}{spec}chart:
  path: {chart_path}
"
        )
    }

    /// The parsed plan file, its chart resolved in [`charts`].
    pub fn plan(&self) -> PlanFile {
        let text = self.text(&self.chart);
        match plan_file::parse(Path::new("plan.yaml"), &text, &charts()) {
            Ok(p) => p,
            Err(e) => panic!("plan file: {e}\n{text}"),
        }
    }

    /// Writes the plan file to `path`, naming the chart by its absolute path, for
    /// `flotilla-agent apply`.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let chart = charts().join(&self.chart);
        std::fs::write(path, self.text(&chart.display().to_string()))?;
        Ok(())
    }
}

/// A cluster and an agent context on it, keeping state in `default`.
pub async fn start(name: &str, renderer: Arc<dyn Renderer>) -> anyhow::Result<(Cluster, Context)> {
    let cluster = Cluster::start(ClusterOptions::named(name)).await?;
    let ctx = Context::new(cluster.client().await?, "default", renderer);
    Ok((cluster, ctx))
}

/// One reconcile of the plan.
pub async fn run(ctx: &Context, p: &PlanFile) -> anyhow::Result<ReconcileReport> {
    Ok(reconcile(ctx, &p.plan, &p.chart).await?)
}

/// The report's condition `type_` as (reason, status, message).
pub fn condition(
    report: &ReconcileReport,
    type_: &str,
) -> Option<(String, ConditionStatus, String)> {
    report
        .status
        .conditions
        .get_condition(type_)
        .map(|c| (c.reason.clone(), c.status, c.message.clone()))
}

/// The report's condition `type_` as (reason, status, message); panics naming the
/// conditions there are when it is missing.
pub fn expect_condition<'a>(
    report: &'a ReconcileReport,
    type_: &str,
) -> (&'a str, ConditionStatus, &'a str) {
    match report.status.conditions.get_condition(type_) {
        Some(c) => (c.reason.as_str(), c.status, c.message.as_str()),
        None => panic!("no {type_} condition in {:#?}", report.status.conditions),
    }
}

/// The lines a child process writes to `stream`, collected on a thread as they come (a
/// process's log, read by the test while the process runs).
pub fn collect(stream: impl std::io::Read + Send + 'static) -> Arc<std::sync::Mutex<String>> {
    use std::io::BufRead as _;
    let out = Arc::new(std::sync::Mutex::new(String::new()));
    let sink = out.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            let mut s = sink.lock().expect("not poisoned");
            s.push_str(&line);
            s.push('\n');
        }
    });
    out
}
