//! `cargo xtask bench-hub`: the hub in push mode on one local cluster. The hub runs as its
//! real binary (`flotilla-hub`, a dev build of this checkout unless `--hub-bin` names one) in
//! a child process, with its own cluster as the target of its in-process agent, so that the
//! RSS and CPU figures are the hub's. A real Helm repository (nginx) serves the podinfo-like
//! chart (`agent/tests/charts/podinfo-like`: three Deployments, Services and ConfigMaps; or
//! `--chart DIR`, e.g. the real podinfo chart `../shared/charts/podinfo/chart`) at two
//! versions, 6.5.3 and 6.5.4.
//!
//! Phases:
//! 1. **Installs.** One HelmRepository (`--repo-interval`), then, once it is Ready, N
//!    HelmReleases created at once (`--releases`, concurrent creates), each of
//!    the chart at `6.5.*` with `spec.values` and one `valuesFrom` (a ConfigMap for even
//!    releases, a Secret for odd ones, created beforehand), so that values composition runs
//!    for every release. Measured: time from the first create to every HelmRelease
//!    `Ready=True` for its generation (a HelmRelease watch), installs/s, each release's time
//!    to Ready; the hub's CPU time and peak RSS (`VmHWM`), the control plane's CPU and the API
//!    server's requests by verb over the phase; then the hub's steady RSS with the N plans
//!    and the N HelmChart artifacts held (`VmRSS` over a quiet window, with where the pages
//!    are).
//! 2. **Change latency, one at a time.** `--changes` values changes (`spec.values`), each on a
//!    different HelmRelease, each sent once the previous one's upgrade has started: the time
//!    from sending the patch to the agent starting the upgrade. "Starting the upgrade" is the
//!    agent's `running action action="upgrade"` log line (it is logged just before the Helm
//!    upgrade runs), timed when xtask reads it from the hub's log (stdout); as a second, outside
//!    view, the release's Helm storage Secret with `status=pending-upgrade` appearing in a
//!    Secret watch (the first thing the upgrade writes).
//! 3. **Change latency, in a burst** (`--burst-changes`, 0 to skip): that many values changes
//!    on other HelmReleases sent at once; the same two latencies, which now include the
//!    queueing behind the hub's and the agent's workers, and the time until all are Ready.
//!
//! Over the whole run: `index.yaml` fetches and chart downloads counted in nginx's access
//! log, against what one fetch per `--repo-interval` allows; and the hub's own timings of
//! the plan build per HelmRelease (HelmChart and artifact, chart, values, plan), read from
//! its `/metrics` (`flotilla_hub_plan_build_seconds`).

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead as _, BufReader, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_api::{HelmRelease, HelmRepository};
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_tests::cluster::{Cluster, ClusterOptions};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt as _, watcher};

use crate::bench_common::{
    ControlPlane, cpu_time, load_average, mib, proc_status_kib, tempfile_dir,
};

/// Options of `cargo xtask bench-hub`.
#[derive(Debug, clap::Args)]
pub struct BenchHub {
    /// How many HelmReleases are created at once.
    #[arg(long, default_value_t = 500)]
    releases: usize,
    /// Values changes sent one at a time (each once the previous upgrade has started).
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// Values changes sent at once after those (0: no burst).
    #[arg(long, default_value_t = 100)]
    burst_changes: usize,
    /// The hub's `--concurrency` (HelmRelease, HelmChart and HelmRepository reconciles at
    /// the same time).
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// The hub's `--agent-concurrency` (releases its in-process agent reconciles at once).
    #[arg(long, default_value_t = 8)]
    agent_concurrency: u16,
    /// `spec.interval` of the HelmRepository, in seconds.
    #[arg(long, default_value_t = 60)]
    repo_interval: u64,
    /// The chart every release installs (a directory; published as 6.5.3 and 6.5.4);
    /// default: `agent/tests/charts/podinfo-like`.
    #[arg(long)]
    chart: Option<PathBuf>,
    /// Use this `flotilla-hub` binary as it is (no build); default: `cargo build -p
    /// flotilla-hub` (a dev build).
    #[arg(long)]
    hub_bin: Option<PathBuf>,
    /// Keep the work directory: the hub's log, its stderr, its chart store and the final
    /// `/metrics` (`FLOTILLA_KEEP_CLUSTERS=1` keeps the cluster's directory too).
    #[arg(long)]
    keep: bool,
}

/// The namespace of every object of the bench.
const NAMESPACE: &str = "default";
/// How long one phase may take.
const PHASE_TIMEOUT: Duration = Duration::from_secs(1200);
/// How long one change may take to start its upgrade.
const CHANGE_TIMEOUT: Duration = Duration::from_secs(120);

/// When the agent started each action, by object (`namespace/name`), as read from the hub's
/// log.
type ActionStarts = Arc<Mutex<HashMap<String, Vec<(String, Instant)>>>>;

/// A `running action` line of the hub's log (the in-process agent's): the object and action.
fn parse_action_start(line: &str) -> Option<(String, String)> {
    let line = strip_ansi(line);
    if !line.contains("running action") {
        return None;
    }
    let field = |name: &str| -> Option<String> {
        let at = line.find(&format!("{name}="))? + name.len() + 1;
        let rest = &line[at..];
        let value = if let Some(quoted) = rest.strip_prefix('"') {
            quoted.split('"').next()?
        } else {
            rest.split([' ', '}', ':']).next()?
        };
        Some(value.to_owned())
    };
    Some((field("object")?, field("action")?))
}

/// `line` without ANSI colour sequences (`ESC [ ... m`).
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// A histogram of an OpenMetrics text: cumulative buckets, sum and count.
#[derive(Debug, Default, Clone, PartialEq)]
struct Histogram {
    /// `(le, cumulative count)`, in the order exposed (ascending `le`).
    buckets: Vec<(f64, f64)>,
    sum: f64,
    count: f64,
}

impl Histogram {
    /// The upper bound of the bucket holding quantile `q`.
    fn quantile_bound(&self, q: f64) -> Option<f64> {
        let rank = q * self.count;
        self.buckets
            .iter()
            .find(|(_, cumulative)| *cumulative >= rank)
            .map(|(le, _)| *le)
    }

    fn summary(&self) -> String {
        if self.count == 0.0 {
            return "none".into();
        }
        let bound = |q| {
            self.quantile_bound(q)
                .map_or("?".to_owned(), |b| format_seconds(b).to_string())
        };
        format!(
            "{:>5} observed, mean {:>9}, p50 ≤ {:>8}, p99 ≤ {:>8}",
            self.count,
            format_seconds(self.sum / self.count),
            bound(0.5),
            bound(0.99)
        )
    }
}

fn format_seconds(s: f64) -> String {
    if s.is_infinite() {
        "+Inf".into()
    } else if s < 0.001 {
        format!("{:.0} µs", s * 1e6)
    } else if s < 1.0 {
        format!("{:.1} ms", s * 1e3)
    } else {
        format!("{s:.2} s")
    }
}

/// The value of label `name` in a series' label text (`a="x",b="y"`).
fn label<'a>(labels: &'a str, name: &str) -> Option<&'a str> {
    let start = labels.find(&format!("{name}=\""))? + name.len() + 2;
    labels[start..].split('"').next()
}

/// The histograms of family `name` in an OpenMetrics text, by the value of `key_label`.
fn histograms(metrics: &str, name: &str, key_label: &str) -> BTreeMap<String, Histogram> {
    let mut out: BTreeMap<String, Histogram> = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        let Some((kind, rest)) = rest.split_once('{') else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let Some(key) = label(labels, key_label) else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let h = out.entry(key.to_owned()).or_default();
        match kind {
            "_bucket" => {
                let le = match label(labels, "le") {
                    Some("+Inf") => f64::INFINITY,
                    Some(le) => le.parse().unwrap_or(f64::NAN),
                    None => continue,
                };
                h.buckets.push((le, value));
            }
            "_sum" => h.sum = value,
            "_count" => h.count = value,
            _ => {}
        }
    }
    out
}

/// `GET path` from the hub's probe server at `addr`: the body of a 200 answer.
fn http_get(addr: &str, path: &str) -> anyhow::Result<String> {
    flotilla_tests::http::get(addr, path)
}

fn free_addr() -> anyhow::Result<String> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.to_string())
}

fn build_hub() -> anyhow::Result<PathBuf> {
    let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
        .args([
            "build",
            "-p",
            "flotilla-hub",
            "--bin",
            "flotilla-hub",
            "--locked",
        ])
        .status()
        .context("running cargo build")?;
    if !status.success() {
        bail!("building flotilla-hub failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| flotilla_tests::cluster::workspace_root().join("target"));
    let bin = target.join("debug").join("flotilla-hub");
    anyhow::ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

fn release_name(i: usize) -> String {
    format!("bench-{i:03}")
}

fn values_object_name(i: usize) -> String {
    format!("bench-{i:03}-values")
}

/// HelmRelease `i`: chart `chart` at `6.5.*`, `spec.values` and one `valuesFrom`.
fn helm_release(i: usize, chart: &str) -> anyhow::Result<HelmRelease> {
    let kind = if i.is_multiple_of(2) {
        "ConfigMap"
    } else {
        "Secret"
    };
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": {"name": release_name(i), "namespace": NAMESPACE},
        "spec": {
            "interval": "10m",
            "timeout": "5m",
            "chart": {"spec": {
                "chart": chart,
                "version": "6.5.*",
                "sourceRef": {"kind": "HelmRepository", "name": "bench"},
            }},
            "valuesFrom": [{"kind": kind, "name": values_object_name(i)}],
            "values": {"podAnnotations": {"bench/index": i.to_string()}},
        },
    }))?)
}

/// The `name` of the chart in directory `dir` (its `Chart.yaml`).
fn chart_name(dir: &Path) -> anyhow::Result<String> {
    let path = dir.join("Chart.yaml");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|l| l.strip_prefix("name:"))
        .map(|n| n.trim().trim_matches(['"', '\'']).to_owned())
        .with_context(|| format!("{} has no name", path.display()))
}

/// The values document of release `i`'s valuesFrom object.
fn values_document(i: usize) -> String {
    let from = if i.is_multiple_of(2) {
        "configmap"
    } else {
        "secret"
    };
    format!("replicaCount: 1\npodAnnotations:\n  bench/values-from: {from}\n")
}

/// Whether the HelmRelease is Ready=True for its current generation.
fn is_ready(hr: &HelmRelease) -> bool {
    hr.status.as_ref().is_some_and(|s| {
        s.observed_generation == hr.metadata.generation.unwrap_or_default()
            && s.conditions.is_true(condition::READY)
    })
}

/// What the watches saw: when each HelmRelease was first Ready for each generation, and
/// when each release's `pending-upgrade` storage Secret (by release and version) appeared.
#[derive(Debug, Default)]
struct Seen {
    ready: HashMap<(String, i64), Instant>,
    pending_upgrade: HashMap<(String, u32), Instant>,
}

impl Seen {
    fn ready_at(&self, name: &str, generation: i64) -> Option<Instant> {
        self.ready.get(&(name.to_owned(), generation)).copied()
    }
}

/// Watches HelmReleases and Helm storage Secrets in the background, into `seen`.
fn spawn_watches(runtime: &tokio::runtime::Runtime, client: kube::Client, seen: Arc<Mutex<Seen>>) {
    let hrs: Api<HelmRelease> = Api::namespaced(client.clone(), NAMESPACE);
    let book = seen.clone();
    runtime.spawn(async move {
        let mut stream = watcher(hrs, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(event) = stream.next().await {
            let Ok(hr) = event else { continue };
            if is_ready(&hr) {
                let key = (
                    hr.metadata.name.clone().unwrap_or_default(),
                    hr.metadata.generation.unwrap_or_default(),
                );
                book.lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .ready
                    .entry(key)
                    .or_insert_with(Instant::now);
            }
        }
    });
    let secrets: Api<PartialObjectMeta<Secret>> = Api::namespaced(client, NAMESPACE);
    runtime.spawn(async move {
        let mut stream = watcher(
            secrets,
            watcher::Config::default().labels("owner=helm,status=pending-upgrade"),
        )
        .default_backoff()
        .applied_objects()
        .boxed();
        while let Some(event) = stream.next().await {
            let Ok(meta) = event else { continue };
            let labels = meta.metadata.labels.unwrap_or_default();
            let (Some(name), Some(version)) = (
                labels.get("name"),
                labels.get("version").and_then(|v| v.parse::<u32>().ok()),
            ) else {
                continue;
            };
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .pending_upgrade
                .entry((name.clone(), version))
                .or_insert_with(Instant::now);
        }
    });
}

/// The hub's process, its probe address and its log.
struct HubProcess {
    child: Child,
    pid: u32,
    probes: String,
    log: PathBuf,
    starts: ActionStarts,
}

impl HubProcess {
    fn start(
        bin: &Path,
        kubeconfig: &Path,
        work: &Path,
        args: &BenchHub,
    ) -> anyhow::Result<HubProcess> {
        let probes = free_addr()?;
        let artifacts = work.join("artifacts");
        std::fs::create_dir_all(&artifacts)?;
        let mut child = Command::new(bin)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--artifact-dir")
            .arg(&artifacts)
            .args(["--metrics-addr", &probes])
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--agent-concurrency", &args.agent_concurrency.to_string()])
            .args(["--graceful-shutdown-timeout", "30s"])
            // The bench's releases go to the hub's own cluster.
            .arg("--allow-local-target")
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(work.join("hub.stderr"))?)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let pid = child.id();
        // The hub logs to stdout (tracing-subscriber's default writer).
        let stdout = child.stdout.take().context("the hub's stdout is piped")?;
        let log = work.join("hub.log");
        let mut file = std::fs::File::create(&log)?;
        let starts: ActionStarts = Default::default();
        let book = starts.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let at = Instant::now();
                let _ = writeln!(file, "{line}");
                if let Some((object, action)) = parse_action_start(&line) {
                    book.lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(object)
                        .or_default()
                        .push((action, at));
                }
            }
        });
        Ok(HubProcess {
            child,
            pid,
            probes,
            log,
            starts,
        })
    }

    /// Waits until `/readyz` answers `ok`.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("the hub exited ({status}) before it was ready");
            }
            if http_get(&self.probes, "/readyz").is_ok_and(|b| b == "ok") {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the hub was not ready within 60 s");
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the hub exited ({status})");
        }
        Ok(())
    }

    /// When the agent started `action` on `object` at or after `after`.
    fn action_started(&self, object: &str, action: &str, after: Instant) -> Option<Instant> {
        self.starts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(object)?
            .iter()
            .find(|(a, at)| a == action && *at >= after)
            .map(|(_, at)| *at)
    }

    fn stop(mut self) {
        flotilla_tests::process::terminate(self.pid);
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Percentiles of durations, as the report prints them.
fn duration_stats(mut d: Vec<Duration>) -> String {
    if d.is_empty() {
        return "none".into();
    }
    d.sort_unstable();
    let p = |q: f64| d[((d.len() - 1) as f64 * q).round() as usize];
    let ms = |d: Duration| format!("{:.0} ms", d.as_secs_f64() * 1000.0);
    let mean = d.iter().sum::<Duration>() / d.len() as u32;
    format!(
        "p50 {}, p99 {}, max {} (mean {}, n = {})",
        ms(p(0.5)),
        ms(p(0.99)),
        ms(d[d.len() - 1]),
        ms(mean),
        d.len()
    )
}

/// Runs the benchmark and prints the report.
pub fn run(root: &Path, args: &BenchHub) -> anyhow::Result<()> {
    anyhow::ensure!(args.releases > 0, "--releases must be at least 1");
    // Each change is on a release of its own (a second change of a release in flight would
    // supersede the first, and its upgrade would not start).
    anyhow::ensure!(
        args.changes + args.burst_changes <= args.releases,
        "--changes plus --burst-changes must not exceed --releases"
    );
    let load_start = load_average();
    let bin = match &args.hub_bin {
        Some(bin) => bin.clone(),
        None => build_hub()?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let cluster = runtime.block_on(Cluster::start(ClusterOptions::named("bench-hub")))?;
    let client = runtime.block_on(cluster.client())?;
    runtime.block_on(flotilla_tests::crds::install(
        &client,
        "xtask-bench-hub",
        &flotilla_api::crd::all(),
    ))?;
    let repo = runtime.block_on(HelmRepoServer::start(RepoOptions::named("bench-hub")))?;
    let chart = args
        .chart
        .clone()
        .unwrap_or_else(|| root.join("agent/tests/charts/podinfo-like"));
    let chart_name = chart_name(&chart)?;
    repo.publish_version(&chart, "6.5.3")?;
    repo.publish_version(&chart, "6.5.4")?;
    let work = tempfile_dir("flotilla-bench-hub")?;
    let mut hub = HubProcess::start(&bin, cluster.kubeconfig(), &work, args)?;
    let result = hub.wait_ready().and_then(|()| {
        let control_plane = ControlPlane {
            pids: cluster.pids(),
            client: client.clone(),
        };
        measure(
            &runtime,
            &client,
            &repo,
            &mut hub,
            &control_plane,
            &chart_name,
            args,
        )
    });
    let log = hub.log.clone();
    hub.stop();
    let load_end = load_average();
    drop(cluster);
    match result {
        Ok(report) => {
            println!("{report}");
            println!(
                "  machine load (1-minute average): {load_start} at the start, {load_end} at the end \
                 (other engineers' builds share the 2 cores)"
            );
            println!(
                "  hub binary: {} ({})",
                bin.display(),
                if args.hub_bin.is_some() {
                    "as given"
                } else {
                    "dev build"
                }
            );
            println!("(hub log: {})", log.display());
            if !args.keep {
                let _ = std::fs::remove_dir_all(&work);
            }
            Ok(())
        }
        Err(e) => Err(e.context(format!("hub log: {}", log.display()))),
    }
}

/// Creates the HelmRepository and waits until it is Ready; when it was created.
async fn create_repository(
    client: &kube::Client,
    url: &str,
    interval: u64,
) -> anyhow::Result<Instant> {
    let api: Api<HelmRepository> = Api::namespaced(client.clone(), NAMESPACE);
    let repo: HelmRepository = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "HelmRepository",
        "metadata": {"name": "bench", "namespace": NAMESPACE},
        "spec": {"interval": format!("{interval}s"), "url": url},
    }))?;
    let created = Instant::now();
    api.create(&PostParams::default(), &repo).await?;
    flotilla_tests::wait::until(
        "the HelmRepository to be Ready",
        Duration::from_secs(120),
        || async {
            let r = api.get("bench").await?;
            Ok(r.status
                .is_some_and(|s| s.conditions.is_true(condition::READY))
                .then_some(()))
        },
    )
    .await?;
    Ok(created)
}

/// Creates the valuesFrom ConfigMaps and Secrets of `n` releases.
async fn create_values_objects(client: &kube::Client, n: usize) -> anyhow::Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let creates = (0..n).map(|i| {
        let (cms, secrets) = (cms.clone(), secrets.clone());
        async move {
            let data = BTreeMap::from([("values.yaml".to_owned(), values_document(i))]);
            let meta = kube::api::ObjectMeta {
                name: Some(values_object_name(i)),
                ..Default::default()
            };
            if i.is_multiple_of(2) {
                let cm = ConfigMap {
                    metadata: meta,
                    data: Some(data),
                    ..Default::default()
                };
                cms.create(&PostParams::default(), &cm).await.map(|_| ())
            } else {
                let s = Secret {
                    metadata: meta,
                    string_data: Some(data),
                    ..Default::default()
                };
                secrets.create(&PostParams::default(), &s).await.map(|_| ())
            }
        }
    });
    let results: Vec<_> = futures::stream::iter(creates)
        .buffer_unordered(32)
        .collect()
        .await;
    results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .context("creating the valuesFrom objects")?;
    Ok(())
}

/// Creates HelmReleases `0..n` at once (32 requests in flight).
async fn create_releases(client: &kube::Client, n: usize, chart: &str) -> anyhow::Result<()> {
    let api: Api<HelmRelease> = Api::namespaced(client.clone(), NAMESPACE);
    let mut objects = Vec::with_capacity(n);
    for i in 0..n {
        objects.push(helm_release(i, chart)?);
    }
    let results: Vec<_> = futures::stream::iter(objects.into_iter().map(|hr| {
        let api = api.clone();
        async move { api.create(&PostParams::default(), &hr).await.map(|_| ()) }
    }))
    .buffer_unordered(32)
    .collect()
    .await;
    results
        .into_iter()
        .collect::<Result<Vec<_>, _>>()
        .context("creating the HelmReleases")?;
    Ok(())
}

/// Changes `spec.values` of release `i`; its new generation.
async fn change_values(client: &kube::Client, i: usize, change: usize) -> anyhow::Result<i64> {
    let api: Api<HelmRelease> = Api::namespaced(client.clone(), NAMESPACE);
    let patch = serde_json::json!({"spec": {"values": {"podAnnotations": {
        "bench/change": change.to_string(),
    }}}});
    let hr = api
        .patch(
            &release_name(i),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
        .with_context(|| format!("changing the values of {}", release_name(i)))?;
    Ok(hr.metadata.generation.unwrap_or_default())
}

/// One change's latencies: to the agent's `running action` line, and to the
/// `pending-upgrade` storage Secret in the watch.
#[derive(Debug, Default)]
struct Latencies {
    to_action: Vec<Duration>,
    to_secret: Vec<Duration>,
}

/// Waits until the upgrade of release `i` started after `sent`; records both latencies.
fn await_upgrade_start(
    hub: &mut HubProcess,
    seen: &Mutex<Seen>,
    i: usize,
    version: u32,
    sent: Instant,
    out: &mut Latencies,
) -> anyhow::Result<()> {
    let object = format!("{NAMESPACE}/{}", release_name(i));
    let deadline = sent + CHANGE_TIMEOUT;
    let mut action = None;
    let mut secret = None;
    while action.is_none() || secret.is_none() {
        action = action.or_else(|| hub.action_started(&object, "upgrade", sent));
        secret = secret.or_else(|| {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .pending_upgrade
                .get(&(release_name(i), version))
                .copied()
        });
        if Instant::now() > deadline {
            bail!(
                "{object}: the upgrade did not start within {CHANGE_TIMEOUT:?} of the change \
                 (log line seen: {}, pending-upgrade Secret seen: {})",
                action.is_some(),
                secret.is_some()
            );
        }
        hub.check_running()?;
        std::thread::sleep(Duration::from_millis(2));
    }
    if let Some(a) = action {
        out.to_action.push(a.saturating_duration_since(sent));
    }
    if let Some(s) = secret {
        out.to_secret.push(s.saturating_duration_since(sent));
    }
    Ok(())
}

/// Waits until every `(release, generation)` of `wanted` is Ready; when the last was.
fn await_ready(
    hub: &mut HubProcess,
    seen: &Mutex<Seen>,
    wanted: &[(usize, i64)],
    what: &str,
) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + PHASE_TIMEOUT;
    loop {
        let (done, last) = {
            let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            let times: Vec<Instant> = wanted
                .iter()
                .filter_map(|(i, g)| seen.ready_at(&release_name(*i), *g))
                .collect();
            (times.len(), times.into_iter().max())
        };
        if done == wanted.len() {
            return last.context("at least one release");
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: {done} of {} Ready after {PHASE_TIMEOUT:?}",
                wanted.len()
            );
        }
        hub.check_running()?;
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn measure(
    runtime: &tokio::runtime::Runtime,
    client: &kube::Client,
    repo: &HelmRepoServer,
    hub: &mut HubProcess,
    control_plane: &ControlPlane,
    chart: &str,
    args: &BenchHub,
) -> anyhow::Result<String> {
    let n = args.releases;
    let pid = hub.pid;
    let seen: Arc<Mutex<Seen>> = Default::default();
    spawn_watches(runtime, client.clone(), seen.clone());
    let repo_created =
        runtime.block_on(create_repository(client, &repo.url(), args.repo_interval))?;
    runtime.block_on(create_values_objects(client, n))?;
    let rss_before = proc_status_kib(pid, "VmRSS:")?;

    // Phase 1: N HelmReleases at once.
    let plane_before = runtime.block_on(control_plane.sample())?;
    let cpu_before = cpu_time(pid)?;
    let started = Instant::now();
    runtime.block_on(create_releases(client, n, chart))?;
    let created = started.elapsed();
    let wanted: Vec<(usize, i64)> = (0..n).map(|i| (i, 1)).collect();
    let all_ready = await_ready(hub, &seen, &wanted, "installs")?;
    let install_time = all_ready - started;
    let cpu_install = cpu_time(pid)?.saturating_sub(cpu_before);
    let plane = runtime.block_on(control_plane.sample())?.since(
        &plane_before,
        &[("hub", cpu_install)],
        install_time,
    );
    let peak_install = proc_status_kib(pid, "VmHWM:")?;
    let to_ready: Vec<Duration> = {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        (0..n)
            .filter_map(|i| seen.ready_at(&release_name(i), 1))
            .map(|t| t - started)
            .collect()
    };
    let fetches_install = repo.index_fetches()?;
    // Steady: the plans and artifacts held, nothing to do. The status writes of the last
    // installs settle first.
    std::thread::sleep(Duration::from_secs(5));
    let cpu_quiet_start = cpu_time(pid)?;
    let mut steady = Vec::new();
    for _ in 0..20 {
        steady.push(proc_status_kib(pid, "VmRSS:")?);
        std::thread::sleep(Duration::from_millis(500));
    }
    let cpu_quiet = cpu_time(pid)?.saturating_sub(cpu_quiet_start);
    let steady_rss = steady.iter().copied().max().unwrap_or_default();
    let breakdown = {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
            .with_context(|| format!("reading /proc/{pid}/smaps"))?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("reading /proc/{pid}/exe"))?;
        crate::bench_agent::smaps_breakdown(&smaps, &exe.to_string_lossy())
    };
    let threads = proc_status_kib(pid, "Threads:")?;

    // Phase 2: changes one at a time, each on another release.
    let mut one = Latencies::default();
    let mut upgraded = Vec::new();
    let cpu_changes_start = cpu_time(pid)?;
    // Every release is at Helm version 1 (its install) and changed once: the upgrade
    // writes version 2.
    for i in 0..args.changes {
        let sent = Instant::now();
        let generation = runtime.block_on(change_values(client, i, i))?;
        await_upgrade_start(hub, &seen, i, 2, sent, &mut one)?;
        upgraded.push((i, generation));
    }
    if !upgraded.is_empty() {
        await_ready(hub, &seen, &upgraded, "upgrades one at a time")?;
    }
    let cpu_changes = cpu_time(pid)?.saturating_sub(cpu_changes_start);

    // Phase 3: a burst of changes on other releases.
    let mut burst = Latencies::default();
    let mut burst_all_ready = None;
    if args.burst_changes > 0 {
        let targets: Vec<usize> = (args.changes..args.changes + args.burst_changes).collect();
        let mut sent = Vec::new();
        let results: Vec<anyhow::Result<(usize, Instant, i64)>> = runtime.block_on(async {
            let changes = targets.iter().map(|&i| async move {
                let at = Instant::now();
                let generation = change_values(client, i, i).await?;
                Ok((i, at, generation))
            });
            futures::future::join_all(changes).await
        });
        for r in results {
            sent.push(r?);
        }
        let burst_started = sent.iter().map(|(_, at, _)| *at).min();
        for (i, at, _) in &sent {
            await_upgrade_start(hub, &seen, *i, 2, *at, &mut burst)?;
        }
        let wanted: Vec<(usize, i64)> = sent.iter().map(|(i, _, g)| (*i, *g)).collect();
        let done = await_ready(hub, &seen, &wanted, "the burst of upgrades")?;
        burst_all_ready = burst_started.map(|s| done - s);
    }

    // The whole run.
    let run_time = repo_created.elapsed();
    let fetches = repo.index_fetches()?;
    let chart_downloads = repo
        .requests()?
        .iter()
        .filter(|r| r.method == "GET" && r.target.ends_with(".tgz") && r.status == 200)
        .count();
    let peak = proc_status_kib(pid, "VmHWM:")?;
    let cpu_total = cpu_time(pid)?;
    let metrics = http_get(&hub.probes, "/metrics")?;
    if let Some(dir) = hub.log.parent() {
        std::fs::write(dir.join("metrics.txt"), &metrics)?;
    }
    let steps = histograms(&metrics, "flotilla_hub_plan_build_seconds", "step");
    let reconciles = histograms(
        &metrics,
        "flotilla_hub_reconcile_duration_seconds",
        "result",
    );
    let interval = args.repo_interval as f64;
    let allowed = (run_time.as_secs_f64() / interval).floor() as usize + 1;

    let mut out = format!(
        "bench-hub: {n} HelmReleases of {what} (chart {chart} 6.5.* of one HelmRepository holding \
         6.5.3 and 6.5.4), push mode on one cluster, \
         hub concurrency {c}, agent concurrency {a}
  installs: all {n} created in {created:.1} s; all Ready {install:.1} s after the first create \
         = {rate:.1} installs/s (goal: 500 in ≤ 40 s)
    time to Ready per release (from the first create): {ready_stats}
{plane}
  hub RSS: {before} before the releases, peak (VmHWM) {peak_install} at all Ready \
         (goal ≤ 150 MiB), steady {steady_rss} with {n} plans and {n} HelmChart artifacts held \
         (max VmRSS over 10 s, {quiet_cpu:.2} s CPU in those 10 s), {threads} threads
{breakdown}
  change → agent starts the upgrade, {changes} values changes one at a time (each on another \
         release, the next sent once the previous upgrade started; goal p99 ≤ 1 s):
    to the agent's `running action action=\"upgrade\"` log line: {one_action}
    to the pending-upgrade storage Secret in a watch:            {one_secret}
    hub CPU over these changes and their upgrades: {cpu_changes:.1} s",
        c = args.concurrency,
        a = args.agent_concurrency,
        what = args.chart.as_ref().map_or_else(
            || "podinfo-like: 3 Deployments, 3 Services, 3 ConfigMaps each".to_owned(),
            |c| c.display().to_string()
        ),
        created = created.as_secs_f64(),
        install = install_time.as_secs_f64(),
        rate = n as f64 / install_time.as_secs_f64(),
        ready_stats = duration_stats(to_ready),
        before = mib(rss_before),
        peak_install = mib(peak_install),
        steady_rss = mib(steady_rss),
        quiet_cpu = cpu_quiet.as_secs_f64(),
        changes = args.changes,
        one_action = duration_stats(one.to_action),
        one_secret = duration_stats(one.to_secret),
        cpu_changes = cpu_changes.as_secs_f64(),
    );
    if args.burst_changes > 0 {
        out.push_str(&format!(
            "
  change → agent starts the upgrade, {b} values changes sent at once (on other releases):
    to the `running action` log line: {ba}
    to the pending-upgrade Secret:    {bs}
    all {b} upgraded and Ready {ready:.1} s after the first change",
            b = args.burst_changes,
            ba = duration_stats(burst.to_action),
            bs = duration_stats(burst.to_secret),
            ready = burst_all_ready.unwrap_or_default().as_secs_f64(),
        ));
    }
    out.push_str(&format!(
        "
  repository: index.yaml fetched {fetches} times over {run:.0} s (HelmRepository interval \
         {interval}s: at most {allowed} allowed), {fetches_install} of them by the time all \
         {n} were Ready; chart archives downloaded: {chart_downloads}
  hub: peak RSS (VmHWM) over the run {peak}, CPU {cpu:.1} s over the run
  the hub's own timings (flotilla_hub_plan_build_seconds; bucket bounds):",
        run = run_time.as_secs_f64(),
        interval = args.repo_interval,
        peak = mib(peak),
        cpu = cpu_total.as_secs_f64(),
    ));
    for step in [
        "source",
        "chart",
        "values",
        "plan",
        "total",
        "index_resolve",
    ] {
        let what = match step {
            "source" => "HelmChart applied, artifact read",
            "chart" => "chart metadata from the store",
            "values" => "valuesFrom read and composed",
            "plan" => "plan built and digested",
            "total" => "the plan, from the start",
            _ => "HelmChart: version from the index",
        };
        out.push_str(&format!(
            "\n    {step:<13} {what:<34} {}",
            steps
                .get(step)
                .map_or("not exposed".into(), Histogram::summary)
        ));
    }
    for (result, h) in &reconciles {
        out.push_str(&format!(
            "\n    HelmRelease reconcile, {result:<9}               {}",
            h.summary()
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agents_running_action_line_is_parsed_with_and_without_colours() {
        let plain = r#"2026-11-27T03:00:00.123456Z  INFO reconcile{object=default/bench-007 revision=2}:reconcile{release=default/bench-007 object=default/bench-007}: flotilla_agent::reconcile: running action action="upgrade""#;
        assert_eq!(
            parse_action_start(plain),
            Some(("default/bench-007".into(), "upgrade".into()))
        );
        let coloured = "\u{1b}[2m2026-11-27T03:00:00Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[1mreconcile\u{1b}[0m\u{1b}[1m{\u{1b}[0m\u{1b}[3mobject\u{1b}[0m\u{1b}[2m=\u{1b}[0mdefault/b \u{1b}[3mrevision\u{1b}[0m\u{1b}[2m=\u{1b}[0m1\u{1b}[1m}\u{1b}[0m: running action \u{1b}[3maction\u{1b}[0m\u{1b}[2m=\u{1b}[0m\"install\"";
        assert_eq!(
            parse_action_start(coloured),
            Some(("default/b".into(), "install".into()))
        );
        assert_eq!(
            parse_action_start("INFO plan accepted object=default/b"),
            None
        );
    }

    #[test]
    fn a_histogram_family_is_read_by_label_with_its_quantile_bounds() {
        // The text prometheus-client encodes, trimmed.
        let text = "\
# TYPE flotilla_hub_plan_build_seconds histogram
flotilla_hub_plan_build_seconds_sum{step=\"values\"} 0.02
flotilla_hub_plan_build_seconds_count{step=\"values\"} 100
flotilla_hub_plan_build_seconds_bucket{le=\"0.0001\",step=\"values\"} 10
flotilla_hub_plan_build_seconds_bucket{le=\"0.00025\",step=\"values\"} 90
flotilla_hub_plan_build_seconds_bucket{le=\"0.0005\",step=\"values\"} 99
flotilla_hub_plan_build_seconds_bucket{le=\"+Inf\",step=\"values\"} 100
flotilla_hub_plan_build_seconds_count{step=\"plan\"} 0
flotilla_hub_reconciles_total{controller=\"helmrelease\",result=\"success\"} 3
";
        let h = histograms(text, "flotilla_hub_plan_build_seconds", "step");
        assert_eq!(h.len(), 2);
        let values = &h["values"];
        assert_eq!((values.sum, values.count), (0.02, 100.0));
        assert_eq!(values.quantile_bound(0.5), Some(0.00025));
        assert_eq!(values.quantile_bound(0.99), Some(0.0005));
        assert_eq!(values.quantile_bound(1.0), Some(f64::INFINITY));
        assert_eq!(h["plan"].summary(), "none");
    }

    #[test]
    fn duration_percentiles_are_reported_in_milliseconds() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(
            duration_stats(d),
            "p50 51 ms, p99 99 ms, max 100 ms (mean 50 ms, n = 100)"
        );
        assert_eq!(duration_stats(Vec::new()), "none");
    }
}
