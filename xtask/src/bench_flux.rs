//! `cargo xtask bench-flux`: the real Flux controllers on the benchmark `bench-agent` runs,
//! for the side-by-side figures of the fleet benchmark (issue 20).
//!
//! One local cluster of the harness, the podinfo-like chart (`agent/tests/charts/podinfo-like`)
//! served by a real Helm repository (nginx, [`HelmRepoServer`]), one `HelmRepository` and N
//! `HelmRelease`s of Flux's own API groups (`source.toolkit.fluxcd.io/v1`,
//! `helm.toolkit.fluxcd.io/v2`) with the same values as the agent bench's releases; then
//! Flux's source-controller and helm-controller start as host processes (built from their
//! Go modules by `tools/build-flux`; the CRDs come from those modules' `config/crd/bases` in
//! the Go module cache) and the time runs until every HelmRelease is Ready=True.
//!
//! Measured: time to all Ready (from the controllers' start, as `bench-agent` measures from
//! the agent's start with every plan present), installs/s, the first and the median and p99
//! time to Ready, each controller's peak RSS (`VmHWM`), RSS 10 s after all Ready and CPU
//! seconds (`utime + stime` of `/proc/<pid>/stat`), the control plane's CPU and the API
//! server's requests by verb over the same span, and the machine's load average.
//!
//! [`run_flux`] is the reusable core: it takes a running [`Cluster`] and a repository URL
//! that serves the chart, so the fleet benchmark can run it beside its own figures.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_tests::cluster::{Cluster, ClusterOptions};
use flotilla_tests::flux::{self, FluxControllers, FluxOptions, RUNTIME_NAMESPACE};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::watcher;

use crate::bench_common::{
    ControlPlane, PlaneDelta, PlaneSample, cpu_time, load_average, mib, proc_status_kib,
    release_name, release_values, tempfile_dir,
};

/// Options of `cargo xtask bench-flux`.
#[derive(Debug, clap::Args)]
pub struct BenchFlux {
    /// How many HelmReleases.
    #[arg(long, default_value_t = 200)]
    releases: usize,
    /// `--concurrent` of both controllers (the agent bench's `--concurrency`).
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// After the report, leave the cluster, the repository and the controllers running until
    /// Ctrl-C, to inspect them.
    #[arg(long)]
    keep: bool,
    /// The chart every release installs (a directory); default: the repository's
    /// `agent/tests/charts/podinfo-like`, as `bench-agent`.
    #[arg(long)]
    chart: Option<PathBuf>,
}

/// What one Flux run is asked to do.
#[derive(Debug, Clone)]
pub struct FluxRun<'a> {
    /// The Helm repository that serves the chart (`http://127.0.0.1:PORT`).
    pub repo_url: &'a str,
    /// The chart's name and version in that repository.
    pub chart: &'a str,
    pub version: &'a str,
    /// How many HelmReleases.
    pub releases: usize,
    /// `--concurrent` of both controllers.
    pub concurrency: u16,
}

/// Figures of one controller process.
#[derive(Debug, Clone, Copy, Default)]
pub struct ProcessFigures {
    /// `VmHWM` when every release was Ready, KiB.
    pub peak_rss_kib: u64,
    /// `VmRSS` 10 s after every release was Ready, KiB.
    pub settled_rss_kib: u64,
    /// User plus system CPU time from the start to every release Ready.
    pub cpu: Duration,
}

/// What a Flux run measured.
#[derive(Debug, Clone)]
pub struct FluxFigures {
    pub releases: usize,
    pub concurrency: u16,
    /// From the controllers' start to the last HelmRelease Ready=True (or Stalled, when
    /// some stalled: then the time every release had settled).
    pub all_ready: Duration,
    /// HelmReleases that Flux gave up on (`Stalled=True`, e.g. an install failed with no
    /// remediation retries left), with their Ready reason and message; not in the rate.
    pub stalled: Vec<(String, String)>,
    /// Time to Ready of each release from the controllers' start, sorted.
    pub ready_after: Vec<Duration>,
    pub source_controller: ProcessFigures,
    pub helm_controller: ProcessFigures,
    /// The control plane's CPU and the API server's requests from the start to all Ready.
    pub control_plane: PlaneDelta,
    /// The machine's 1-minute load average at the start and when all were Ready.
    pub load_at_start: String,
    pub load_at_end: String,
}

impl FluxFigures {
    /// Releases installed and Ready per second, over [`FluxFigures::all_ready`] (stalled
    /// releases do not count).
    pub fn installs_per_second(&self) -> f64 {
        (self.releases - self.stalled.len()) as f64 / self.all_ready.as_secs_f64()
    }

    /// Peak RSS of both controllers, KiB.
    pub fn peak_rss_kib(&self) -> u64 {
        self.source_controller.peak_rss_kib + self.helm_controller.peak_rss_kib
    }

    /// CPU time of both controllers.
    pub fn cpu(&self) -> Duration {
        self.source_controller.cpu + self.helm_controller.cpu
    }

    /// The time to Ready at quantile `q` (0.0 to 1.0) of the releases.
    pub fn ready_quantile(&self, q: f64) -> Duration {
        quantile(&self.ready_after, q)
    }

    /// The report table.
    pub fn report(&self) -> String {
        let row = |name: &str, f: &ProcessFigures| {
            format!(
                "  {name:<19} {:>12} {:>16} {:>12.1}",
                mib(f.peak_rss_kib),
                mib(f.settled_rss_kib),
                f.cpu.as_secs_f64()
            )
        };
        let both = ProcessFigures {
            peak_rss_kib: self.peak_rss_kib(),
            settled_rss_kib: self.source_controller.settled_rss_kib
                + self.helm_controller.settled_rss_kib,
            cpu: self.cpu(),
        };
        let secs = self.all_ready.as_secs_f64();
        let stalled = if self.stalled.is_empty() {
            String::new()
        } else {
            format!(
                "  STALLED (Flux gave up; not in the rate): {} of {}, e.g. {}: {}\n",
                self.stalled.len(),
                self.releases,
                self.stalled[0].0,
                self.stalled[0].1
            )
        };
        format!(
            "  {n} HelmReleases, --concurrent {c} for both controllers
{stalled}  time to all Ready (controllers' start to the last Ready=True): {secs:.1} s = {rate:.2} installs/s
  time to Ready per release: first {first:.1} s, median {p50:.1} s, p99 {p99:.1} s
  {header:<19} {peak:>12} {settled:>16} {cpu:>12}
{source}
{helm}
{together}
  machine load (1-minute average): {load_start} at the start, {load_end} when all were Ready
{plane}",
            n = self.releases,
            c = self.concurrency,
            rate = self.installs_per_second(),
            first = self.ready_quantile(0.0).as_secs_f64(),
            p50 = self.ready_quantile(0.5).as_secs_f64(),
            p99 = self.ready_quantile(0.99).as_secs_f64(),
            header = "",
            peak = "peak RSS",
            settled = "RSS 10 s later",
            cpu = "CPU s",
            source = row("source-controller", &self.source_controller),
            helm = row("helm-controller", &self.helm_controller),
            together = row("together", &both),
            load_start = self.load_at_start,
            load_end = self.load_at_end,
            plane = self.control_plane.report(
                &[
                    ("source-controller", self.source_controller.cpu),
                    ("helm-controller", self.helm_controller.cpu)
                ],
                self.all_ready
            ),
        )
    }
}

/// The value at quantile `q` of sorted `values` (nearest rank), zero when there is none.
pub fn quantile(values: &[Duration], q: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let i = ((values.len() - 1) as f64 * q.clamp(0.0, 1.0)).round() as usize;
    values[i]
}

/// Where the controllers' binaries are (built by `tools/build-flux` on first use).
pub fn flux_bin_dir() -> anyhow::Result<PathBuf> {
    flux::bin_dir()
}

/// Installs Flux's CRDs into the cluster and waits until they are Established.
pub fn install_crds(cluster: &Cluster) -> anyhow::Result<()> {
    flux::install_crds(cluster)
}

/// The namespace of the benchmark's objects (the agent bench's releases live there too).
const NAMESPACE: &str = "default";
/// The HelmRepository every release's chart comes from.
const REPOSITORY: &str = "bench";

fn helm_release_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.toolkit.fluxcd.io", "v2", "HelmRelease"),
        "helmreleases",
    )
}

fn helm_repository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.toolkit.fluxcd.io", "v1", "HelmRepository"),
        "helmrepositories",
    )
}

/// The `i`th HelmRelease: the agent bench's release `i` (name, values, timeout), its chart
/// from the HelmRepository [`REPOSITORY`].
fn helm_release(i: usize, run: &FluxRun<'_>) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "helm.toolkit.fluxcd.io/v2",
        "kind": "HelmRelease",
        "metadata": { "name": release_name(i), "namespace": NAMESPACE },
        "spec": {
            "interval": "10m",
            "timeout": "5m",
            "chart": {
                "spec": {
                    "chart": run.chart,
                    "version": run.version,
                    "sourceRef": { "kind": "HelmRepository", "name": REPOSITORY },
                    "interval": "10m",
                }
            },
            "values": release_values(i),
        }
    })
}

/// Creates the runtime namespace, the HelmRepository and every HelmRelease.
async fn create_objects(client: &kube::Client, run: &FluxRun<'_>) -> anyhow::Result<()> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": RUNTIME_NAMESPACE }
    }))?;
    match namespaces.create(&PostParams::default(), &namespace).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => return Err(e).context(format!("creating the namespace {RUNTIME_NAMESPACE}")),
    }
    let repositories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_repository_resource());
    let repository: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.toolkit.fluxcd.io/v1",
        "kind": "HelmRepository",
        "metadata": { "name": REPOSITORY, "namespace": NAMESPACE },
        "spec": { "url": run.repo_url, "interval": "10m" }
    }))?;
    repositories
        .create(&PostParams::default(), &repository)
        .await
        .with_context(|| format!("creating the HelmRepository {NAMESPACE}/{REPOSITORY}"))?;
    let releases: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_resource());
    let indices: Vec<usize> = (0..run.releases).collect();
    for chunk in indices.chunks(32) {
        let creates = chunk.iter().map(|&i| {
            let releases = releases.clone();
            let object = helm_release(i, run);
            async move {
                let object: DynamicObject = serde_json::from_value(object)?;
                releases
                    .create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating the HelmRelease {}", release_name(i)))?;
                anyhow::Ok(())
            }
        });
        for result in futures::future::join_all(creates).await {
            result?;
        }
    }
    Ok(())
}

/// Whether a HelmRelease is Ready=True for its current generation.
pub fn is_ready(object: &DynamicObject) -> bool {
    condition_true(object, "Ready")
}

/// Whether Flux gave up on a HelmRelease (`Stalled=True` for its current generation): it
/// will not become Ready without a change, so the run does not wait for it.
pub fn is_stalled(object: &DynamicObject) -> bool {
    condition_true(object, "Stalled")
}

/// Whether the HelmRelease's status is for its current generation and has condition `kind`
/// True.
fn condition_true(object: &DynamicObject, kind: &str) -> bool {
    let status = object.data.get("status");
    let observed = status
        .and_then(|s| s.get("observedGeneration"))
        .and_then(serde_json::Value::as_i64);
    if observed.is_none() || observed != object.metadata.generation {
        return false;
    }
    status
        .and_then(|s| s.get("conditions"))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(serde_json::Value::as_str) == Some(kind)
                && c.get("status").and_then(serde_json::Value::as_str) == Some("True")
        })
}

/// The Ready condition's reason and message of a HelmRelease, for a timeout's error.
fn ready_condition(object: &DynamicObject) -> String {
    object
        .data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(serde_json::Value::as_str) == Some("Ready"))
        .map_or_else(
            || "no Ready condition".to_owned(),
            |c| {
                format!(
                    "{} {}: {}",
                    c.get("status").and_then(|v| v.as_str()).unwrap_or("?"),
                    c.get("reason").and_then(|v| v.as_str()).unwrap_or("?"),
                    c.get("message").and_then(|v| v.as_str()).unwrap_or("")
                )
            },
        )
}

/// Runs Flux on `cluster` for `run` and returns its figures; the controllers are stopped.
///
/// The cluster must not hold the run's objects yet (HelmRepository `bench`, HelmReleases
/// `bench-NNN` in `default`); the repository at `run.repo_url` must serve the chart.
pub async fn run_flux(cluster: &Cluster, run: &FluxRun<'_>) -> anyhow::Result<FluxFigures> {
    let (figures, controllers) = run_flux_kept(cluster, run).await?;
    drop(controllers);
    Ok(figures)
}

/// [`run_flux`], leaving the controllers running (until the returned value is dropped).
pub async fn run_flux_kept(
    cluster: &Cluster,
    run: &FluxRun<'_>,
) -> anyhow::Result<(FluxFigures, FluxControllers)> {
    let bin = flux_bin_dir()?;
    install_crds(cluster)?;
    let client = cluster.client().await?;
    create_objects(&client, run).await?;
    let control_plane = ControlPlane {
        pids: cluster.pids(),
        client: client.clone(),
    };
    let dir = tempfile_dir("flotilla-bench-flux")?;
    let plane_before = control_plane.sample().await?;
    let load_at_start = load_average();
    let started = Instant::now();
    let options = FluxOptions {
        concurrency: Some(run.concurrency),
        ..FluxOptions::default()
    };
    let mut controllers = FluxControllers::start(&bin, cluster, &options, &dir)?;
    let measured = measure(&mut controllers, &client, &control_plane, run, started).await;
    match measured {
        Ok((mut figures, plane_at_end)) => {
            figures.control_plane = plane_at_end.delta(&plane_before);
            figures.load_at_start = load_at_start;
            Ok((figures, controllers))
        }
        Err(e) => Err(e.context(format!(
            "the controllers' logs are in {}",
            controllers.dir().display()
        ))),
    }
}

/// Watches the HelmReleases until all are Ready, then reads the controllers' figures; with
/// the control plane's sample at that moment.
async fn measure(
    controllers: &mut FluxControllers,
    client: &kube::Client,
    control_plane: &ControlPlane,
    run: &FluxRun<'_>,
    started: Instant,
) -> anyhow::Result<(FluxFigures, PlaneSample)> {
    let (source_pid, helm_pid) = controllers.pids()?;
    let timeout = Duration::from_secs(600.max(run.releases as u64 * 3));
    let releases: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_resource());
    let mut events = watcher::watcher(releases, watcher::Config::default()).boxed();
    let mut ready: std::collections::BTreeMap<String, Duration> = Default::default();
    let mut last_seen: std::collections::BTreeMap<String, String> = Default::default();
    let mut stalled: std::collections::BTreeMap<String, String> = Default::default();
    let deadline = tokio::time::Instant::now() + timeout;
    while ready.len() + stalled.len() < run.releases {
        let next = tokio::time::timeout(Duration::from_secs(1), events.next()).await;
        controllers.check_running()?;
        if tokio::time::Instant::now() > deadline {
            let waiting: Vec<String> = last_seen
                .iter()
                .filter(|(name, _)| !ready.contains_key(*name) && !stalled.contains_key(*name))
                .take(5)
                .map(|(name, condition)| format!("{name}: {condition}"))
                .collect();
            bail!(
                "timed out after {timeout:?}: {} of {} HelmReleases Ready; some of the others: {}",
                ready.len(),
                run.releases,
                waiting.join("; ")
            );
        }
        let event = match next {
            Err(_) => continue,
            Ok(None) => bail!("the watch of the HelmReleases ended"),
            Ok(Some(Err(e))) => {
                // The watcher recovers on the next poll; a short pause avoids a busy loop.
                eprintln!("bench-flux: watch of the HelmReleases: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Ok(Some(Ok(event))) => event,
        };
        let object = match event {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => o,
            watcher::Event::Delete(_) | watcher::Event::Init | watcher::Event::InitDone => {
                continue;
            }
        };
        let name = object.metadata.name.clone().unwrap_or_default();
        if is_ready(&object) {
            stalled.remove(&name);
            ready.entry(name).or_insert_with(|| started.elapsed());
        } else if is_stalled(&object) {
            stalled.insert(name, ready_condition(&object));
        } else {
            stalled.remove(&name);
            last_seen.insert(name, ready_condition(&object));
        }
    }
    let all_ready = started.elapsed();
    let plane = control_plane.sample().await?;
    let load_at_end = load_average();
    let read = |pid: u32| -> anyhow::Result<ProcessFigures> {
        Ok(ProcessFigures {
            peak_rss_kib: proc_status_kib(pid, "VmHWM:")?,
            settled_rss_kib: 0,
            cpu: cpu_time(pid)?,
        })
    };
    let mut source_controller = read(source_pid)?;
    let mut helm_controller = read(helm_pid)?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    controllers.check_running()?;
    source_controller.settled_rss_kib = proc_status_kib(source_pid, "VmRSS:")?;
    helm_controller.settled_rss_kib = proc_status_kib(helm_pid, "VmRSS:")?;
    let mut ready_after: Vec<Duration> = ready.into_values().collect();
    ready_after.sort_unstable();
    let figures = FluxFigures {
        releases: run.releases,
        concurrency: run.concurrency,
        all_ready,
        ready_after,
        stalled: stalled.into_iter().collect(),
        source_controller,
        helm_controller,
        control_plane: PlaneDelta::default(),
        load_at_start: String::new(),
        load_at_end,
    };
    Ok((figures, plane))
}

/// A chart directory's name and version, from its `Chart.yaml`.
pub fn chart_name_version(chart: &Path) -> anyhow::Result<(String, String)> {
    let path = chart.join("Chart.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(|v| v.trim().trim_matches('"').to_owned())
            .with_context(|| format!("{}: no top-level {key}", path.display()))
    };
    Ok((field("name:")?, field("version:")?))
}

/// Runs the benchmark and prints the report.
pub fn run(root: &Path, args: &BenchFlux) -> anyhow::Result<()> {
    let chart = args
        .chart
        .clone()
        .unwrap_or_else(|| root.join("agent/tests/charts/podinfo-like"));
    let chart = chart
        .canonicalize()
        .with_context(|| format!("chart {}", chart.display()))?;
    let (name, version) = chart_name_version(&chart)?;
    // Build first (minutes the first time), so the cluster does not idle meanwhile.
    flux_bin_dir()?;
    let versions = flux::MODULES
        .iter()
        .map(|(dir, module)| Ok(format!("{dir} {}", flux::pinned_version(dir, module)?)))
        .collect::<anyhow::Result<Vec<_>>>()?
        .join(", ");
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        let cluster = Cluster::start(ClusterOptions::named("bench-flux")).await?;
        let repo = HelmRepoServer::start(RepoOptions::named("bench-flux")).await?;
        repo.publish(&chart)?;
        let url = repo.url();
        let flux_run = FluxRun {
            repo_url: &url,
            chart: &name,
            version: &version,
            releases: args.releases,
            concurrency: args.concurrency,
        };
        let (figures, controllers) = run_flux_kept(&cluster, &flux_run).await?;
        println!(
            "bench-flux: {n} HelmReleases of {name} {version} from the Helm repository {url} (nginx), {versions}
{report}
  (controllers' logs: {logs})",
            n = args.releases,
            report = figures.report(),
            logs = controllers.dir().display(),
        );
        if args.keep {
            println!(
                "Kept running until Ctrl-C: kubectl --kubeconfig {} get helmreleases -A",
                cluster.kubeconfig().display()
            );
            tokio::signal::ctrl_c().await?;
        }
        drop(controllers);
        anyhow::Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn release(generation: i64, observed: i64, ready: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": { "name": "bench-000", "namespace": "default", "generation": generation },
            "status": {
                "observedGeneration": observed,
                "conditions": [
                    { "type": "Reconciling", "status": "False", "reason": "Succeeded" },
                    { "type": "Ready", "status": ready, "reason": "InstallSucceeded", "message": "done" }
                ]
            }
        }))
        .expect("a HelmRelease")
    }

    #[test]
    fn a_release_is_ready_only_when_ready_is_true_for_its_generation() {
        assert!(is_ready(&release(1, 1, "True")));
        assert!(!is_ready(&release(2, 1, "True")));
        assert!(!is_ready(&release(1, 1, "False")));
        assert_eq!(
            ready_condition(&release(1, 1, "False")),
            "False InstallSucceeded: done"
        );
    }

    #[test]
    fn a_release_is_stalled_only_when_stalled_is_true_for_its_generation() {
        let stalled = |generation: i64, observed: i64, status: &str| {
            let mut r = release(generation, observed, "False");
            r.data["status"]["conditions"]
                .as_array_mut()
                .expect("conditions")
                .push(serde_json::json!({ "type": "Stalled", "status": status, "reason": "RetriesExceeded" }));
            r
        };
        assert!(is_stalled(&stalled(1, 1, "True")));
        assert!(!is_ready(&stalled(1, 1, "True")));
        assert!(!is_stalled(&stalled(2, 1, "True")), "an older generation's");
        assert!(!is_stalled(&stalled(1, 1, "False")));
        assert!(!is_stalled(&release(1, 1, "True")));
    }

    #[test]
    fn a_flux_release_has_the_agent_benchs_name_values_and_chart_from_the_repository() {
        let run = FluxRun {
            repo_url: "http://127.0.0.1:1",
            chart: "podinfo-like",
            version: "6.5.3",
            releases: 1,
            concurrency: 4,
        };
        let object = helm_release(7, &run);
        assert_eq!(object["metadata"]["name"], "bench-007");
        assert_eq!(
            object["spec"]["values"]["podAnnotations"]["bench/index"],
            "7"
        );
        assert_eq!(object["spec"]["chart"]["spec"]["version"], "6.5.3");
        assert_eq!(
            object["spec"]["chart"]["spec"]["sourceRef"]["name"],
            REPOSITORY
        );
    }

    #[test]
    fn quantiles_take_the_nearest_rank() {
        let values: Vec<Duration> = (1..=100).map(Duration::from_secs).collect();
        assert_eq!(quantile(&values, 0.0), Duration::from_secs(1));
        assert_eq!(quantile(&values, 0.5), Duration::from_secs(51));
        assert_eq!(quantile(&values, 0.99), Duration::from_secs(99));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
