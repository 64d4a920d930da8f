//! `cargo xtask bench-fleet`: N podinfo-like HelmReleases across the fleet's two workload
//! clusters through the real hub and agents, and the real Flux controllers on the same
//! number of releases of the same chart in the same run (issue 20, item 4).
//!
//! Flotilla's side: [`Fleet::start`] (a hub cluster, `workload-a` and `workload-b`, the
//! `flotilla-hub` binary with its session server, an nginx Helm repository, two
//! `flotilla-agent join` processes), the podinfo-like chart (`agent/tests/charts/podinfo-like`)
//! published to the fleet's repository, one HelmRepository and N HelmReleases on the hub,
//! release `i` on `workload-a` when `i` is even and on `workload-b` when odd, all in the
//! namespace `bench` (target and storage) with the values of the agent bench's release `i`.
//!
//! Measured:
//! - time to all Ready: from the first HelmRelease's creation (the hub and the agents are
//!   running) to the last HelmRelease Ready=True for its generation on the hub, seen by a
//!   watch; so this includes creating the objects, which Flux's figure does not (its clock
//!   starts with the controllers, every object already present);
//! - installs/s: N over that time;
//! - the hub's and each agent's peak RSS (`VmHWM`), CPU seconds (`utime + stime`) over the
//!   install phase, and idle RSS (`VmRSS` after `--idle-secs` of quiet);
//! - spec-change-to-action latency: `--changes` values patches, one at a time (each waits
//!   for the previous to be Ready), round robin over the releases and so alternately over the
//!   two clusters. The action is seen on the workload cluster as the Helm storage Secret of
//!   the next revision (`sh.helm.release.v1.<name>.v<N+1>`, labels `owner=helm`): the agent
//!   writes it, `pending-upgrade`, before it applies anything, so the latency covers the
//!   hub's reconcile, the plan's trip over the session, and the agent's planning up to the
//!   upgrade's first write; a watch on the workload cluster sees it within milliseconds.
//!   The time to Ready (the upgrade done and reported back on the hub) is given beside it;
//! - each cluster's control plane (CPU seconds by process, the API server's requests by
//!   verb and write rate) over the install phase, and the machine's load average.
//!
//! Flux's side ([`run_flux`]) runs after the fleet is stopped (so the two never share the
//! machine), on a fresh cluster of the same harness with a fresh nginx repository serving
//! the same chart, the same N and `--concurrent` = `--concurrency`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_tests::bins::{self, Binaries, Progress};
use flotilla_tests::cluster::{Cluster, ClusterOptions};
use flotilla_tests::fleet::{Fleet, FleetOptions};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;

use crate::bench_common::{
    self, ControlPlane, PlaneDelta, cpu_time, load_average, mib, proc_status_kib, release_name,
    release_values,
};
use crate::bench_flux::{
    FluxFigures, FluxRun, chart_name_version, flux_bin_dir, quantile, run_flux,
};

/// Options of `cargo xtask bench-fleet`.
#[derive(Debug, clap::Args)]
pub struct BenchFleet {
    /// How many HelmReleases (half on each workload cluster); the figure is 1000.
    #[arg(long, default_value_t = 200)]
    releases: usize,
    /// How many spec changes for the latency, one at a time.
    #[arg(long, default_value_t = 100)]
    changes: usize,
    /// The agents' `--concurrency` and Flux's `--concurrent`.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// The hub's `--concurrency` (HelmRelease reconciles on the hub, for both clusters).
    #[arg(long, default_value_t = 16)]
    hub_concurrency: u16,
    /// A directory holding `flotilla-hub`, `flotilla-agent` and `flotilla` (for example a
    /// release build); default: built by cargo, dev profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
    /// Measure Flotilla only.
    #[arg(long)]
    skip_flux: bool,
    /// Seconds of quiet after all Ready before the idle RSS is read.
    #[arg(long, default_value_t = 20)]
    idle_secs: u64,
    /// The chart every release installs (a directory); default: the repository's
    /// `agent/tests/charts/podinfo-like`, as `bench-agent` and `bench-flux`.
    #[arg(long)]
    chart: Option<PathBuf>,
}

/// The namespace of the benchmark's objects, on the hub and on the workload clusters.
const NAMESPACE: &str = "bench";
/// The hub's HelmRepository every release's chart comes from.
const REPOSITORY: &str = "bench";

fn helm_release_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("helm.flotilla.dev", "v1", "HelmRelease"),
        "helmreleases",
    )
}

fn helm_repository_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("source.flotilla.dev", "v1", "HelmRepository"),
        "helmrepositories",
    )
}

/// The workload cluster of release `i`: even on the first, odd on the second.
fn cluster_of(i: usize, workloads: &[String]) -> &str {
    &workloads[i % workloads.len()]
}

/// The `i`th HelmRelease on the hub: the agent bench's release `i` (name, values), on
/// `cluster`, in [`NAMESPACE`] there, its chart from the HelmRepository [`REPOSITORY`].
fn helm_release(i: usize, cluster: &str, chart: &str, version: &str) -> serde_json::Value {
    let name = release_name(i);
    serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "clusterRef": { "name": cluster },
            "interval": "10m",
            "timeout": "5m",
            "releaseName": name,
            "targetNamespace": NAMESPACE,
            "storageNamespace": NAMESPACE,
            "chart": {
                "spec": {
                    "chart": chart,
                    "version": version,
                    "sourceRef": { "kind": "HelmRepository", "name": REPOSITORY },
                    "interval": "10m",
                }
            },
            "values": release_values(i),
        }
    })
}

/// The values patch of change `k` to release `i`: one more pod annotation.
fn change_patch(i: usize, k: usize) -> serde_json::Value {
    serde_json::json!({
        "spec": { "values": { "podAnnotations": {
            "bench/index": i.to_string(),
            "bench/change": k.to_string(),
        } } }
    })
}

/// Figures of one of Flotilla's processes.
#[derive(Debug, Clone, Default)]
struct Process {
    name: String,
    /// `VmHWM` when all were Ready, KiB.
    peak_kib: u64,
    /// `VmHWM` at the end of the run (after the changes), KiB.
    peak_end_kib: u64,
    /// `VmRSS` after the quiet time, KiB.
    idle_kib: u64,
    /// CPU over the install phase.
    cpu: Duration,
}

/// What Flotilla's side measured.
#[derive(Debug, Clone)]
struct FleetFigures {
    releases: usize,
    all_ready: Duration,
    create_took: Duration,
    ready_after: Vec<Duration>,
    processes: Vec<Process>,
    planes: Vec<(String, PlaneDelta)>,
    /// Patch to the next revision's Secret, sorted.
    to_action: Vec<Duration>,
    /// Patch to Ready=True for the new generation, sorted.
    to_ready: Vec<Duration>,
    load_at_start: String,
    load_at_end: String,
    binaries: String,
}

impl FleetFigures {
    fn installs_per_second(&self) -> f64 {
        self.releases as f64 / self.all_ready.as_secs_f64()
    }

    fn peak_kib(&self) -> u64 {
        self.processes.iter().map(|p| p.peak_kib).sum()
    }

    fn cpu(&self) -> Duration {
        self.processes.iter().map(|p| p.cpu).sum()
    }
}

/// What the watch of the hub's HelmReleases has seen: when each was first Ready, and the
/// latest generation Ready with the moment it was.
#[derive(Debug, Default)]
struct ReadyBoard {
    first_ready: HashMap<String, Instant>,
    ready_generation: HashMap<String, (i64, Instant)>,
}

/// What the watches of the workload clusters' Helm storage Secrets have seen: the highest
/// revision of each release and when it first appeared.
#[derive(Debug, Default)]
struct RevisionBoard {
    latest: HashMap<String, (u64, Instant)>,
    synced: usize,
}

/// Watches the hub's HelmReleases in [`NAMESPACE`] into `board` until the task is aborted.
fn watch_ready(client: kube::Client, board: Arc<Mutex<ReadyBoard>>) -> tokio::task::JoinHandle<()> {
    bench_common::watch_ready_releases(
        client,
        NAMESPACE,
        &helm_release_resource(),
        "bench-fleet",
        move |object, now| {
            let name = object.metadata.name.clone().unwrap_or_default();
            let generation = object.metadata.generation.unwrap_or_default();
            let mut board = board.lock().expect("the ready board is not poisoned");
            board.first_ready.entry(name.clone()).or_insert(now);
            let entry = board.ready_generation.entry(name).or_insert((0, now));
            if generation > entry.0 {
                *entry = (generation, now);
            }
        },
    )
}

/// Watches the Helm storage Secrets in [`NAMESPACE`] of a workload cluster into `board`.
fn watch_revisions(
    client: kube::Client,
    board: Arc<Mutex<RevisionBoard>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Secret> = Api::namespaced(client, NAMESPACE);
        let config = watcher::Config::default().labels("owner=helm");
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            let now = Instant::now();
            let secret = match event {
                Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s)) => s,
                Ok(watcher::Event::InitDone) => {
                    board.lock().expect("not poisoned").synced += 1;
                    continue;
                }
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("bench-fleet: watch of the Helm storage Secrets: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let labels = secret.metadata.labels.unwrap_or_default();
            let (Some(name), Some(version)) = (
                labels.get("name"),
                labels.get("version").and_then(|v| v.parse::<u64>().ok()),
            ) else {
                continue;
            };
            let mut board = board.lock().expect("the revision board is not poisoned");
            let entry = board.latest.entry(name.clone()).or_insert((0, now));
            if version > entry.0 {
                *entry = (version, now);
            }
        }
    })
}

/// Fails when process `pid` (named `name`) has exited.
fn check_alive(name: &str, pid: u32) -> anyhow::Result<()> {
    if !Path::new(&format!("/proc/{pid}")).exists() {
        bail!("{name} (pid {pid}) exited");
    }
    Ok(())
}

/// Runs Flotilla's side and returns its figures; the fleet is stopped when it returns.
async fn run_fleet(
    binaries: Binaries,
    chart: &Path,
    name: &str,
    version: &str,
    args: &BenchFleet,
) -> anyhow::Result<FleetFigures> {
    let described = format!(
        "hub {}, agent {}",
        binaries.hub.display(),
        binaries.agent.display()
    );
    let mut options = FleetOptions::named("fleetbench");
    options.verbose = true;
    options.hub_args = vec!["--concurrency".into(), args.hub_concurrency.to_string()];
    options.agent_args = vec!["--concurrency".into(), args.concurrency.to_string()];
    let fleet = Fleet::start(binaries, options).await?;
    let result = measure_fleet(&fleet, chart, name, version, args).await;
    match result {
        Ok(mut figures) => {
            figures.binaries = described;
            Ok(figures)
        }
        Err(e) => Err(e.context(format!(
            "the hub's log: {}; the agents' logs: {}",
            fleet.hub_log().display(),
            fleet
                .workloads
                .iter()
                .map(|w| w.agent_log().display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

async fn measure_fleet(
    fleet: &Fleet,
    chart: &Path,
    name: &str,
    version: &str,
    args: &BenchFleet,
) -> anyhow::Result<FleetFigures> {
    let n = args.releases;
    fleet.repo.publish(chart)?;
    let hub = fleet.mgmt.client().await?;
    bench_common::ensure_namespace(&hub, NAMESPACE).await?;
    let mut workload_clients = Vec::new();
    for workload in &fleet.workloads {
        let client = workload.cluster.client().await?;
        bench_common::ensure_namespace(&client, NAMESPACE).await?;
        workload_clients.push(client);
    }
    let repositories: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), NAMESPACE, &helm_repository_resource());
    let repository: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "HelmRepository",
        "metadata": { "name": REPOSITORY, "namespace": NAMESPACE },
        "spec": { "url": fleet.repo.url(), "interval": "10m" }
    }))?;
    repositories
        .create(&PostParams::default(), &repository)
        .await
        .with_context(|| format!("creating the HelmRepository {NAMESPACE}/{REPOSITORY}"))?;

    let mut pids = vec![(
        "flotilla-hub".to_owned(),
        fleet.hub_pid().context("the hub runs")?,
    )];
    for workload in &fleet.workloads {
        pids.push((
            format!("agent {}", workload.name),
            workload.agent_pid().context("the agent runs")?,
        ));
    }
    let mut planes = vec![(
        "hub cluster".to_owned(),
        ControlPlane {
            pids: fleet.mgmt.pids(),
            client: hub.clone(),
        },
    )];
    for (workload, client) in fleet.workloads.iter().zip(&workload_clients) {
        planes.push((
            workload.name.clone(),
            ControlPlane {
                pids: workload.cluster.pids(),
                client: client.clone(),
            },
        ));
    }
    let mut planes_before = Vec::new();
    for (_, plane) in &planes {
        planes_before.push(plane.sample().await?);
    }
    let cpu_before = pids
        .iter()
        .map(|(_, pid)| cpu_time(*pid))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let board = Arc::new(Mutex::new(ReadyBoard::default()));
    let ready_watch = watch_ready(hub.clone(), board.clone());
    let workloads: Vec<String> = fleet.workloads.iter().map(|w| w.name.clone()).collect();
    let load_at_start = load_average();
    eprintln!(
        "bench-fleet: creating {n} HelmReleases ({} per workload cluster)",
        n / workloads.len()
    );
    let started = Instant::now();
    let releases: Api<DynamicObject> =
        Api::namespaced_with(hub.clone(), NAMESPACE, &helm_release_resource());
    let indices: Vec<usize> = (0..n).collect();
    for chunk in indices.chunks(32) {
        let creates = chunk.iter().map(|&i| {
            let releases = releases.clone();
            let object = helm_release(i, cluster_of(i, &workloads), name, version);
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
    let create_took = started.elapsed();
    let timeout = Duration::from_secs(600.max(n as u64 * 3));
    let mut last_report = Instant::now();
    loop {
        let ready = board.lock().expect("not poisoned").first_ready.len();
        if ready >= n {
            break;
        }
        for (name, pid) in &pids {
            check_alive(name, *pid)?;
        }
        if started.elapsed() > timeout {
            bail!("timed out after {timeout:?}: {ready} of {n} HelmReleases Ready");
        }
        if last_report.elapsed() > Duration::from_secs(10) {
            eprintln!(
                "bench-fleet: {ready} of {n} Ready after {:.0} s",
                started.elapsed().as_secs_f64()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let all_ready = started.elapsed();
    let load_at_end = load_average();
    let mut processes = Vec::new();
    for ((name, pid), before) in pids.iter().zip(&cpu_before) {
        processes.push(Process {
            name: name.clone(),
            peak_kib: proc_status_kib(*pid, "VmHWM:")?,
            cpu: cpu_time(*pid)?.saturating_sub(*before),
            ..Process::default()
        });
    }
    let mut plane_deltas = Vec::new();
    for ((name, plane), before) in planes.iter().zip(&planes_before) {
        plane_deltas.push((name.clone(), plane.sample().await?.delta(before)));
    }
    let mut ready_after: Vec<Duration> = board
        .lock()
        .expect("not poisoned")
        .first_ready
        .values()
        .map(|at| at.saturating_duration_since(started))
        .collect();
    ready_after.sort_unstable();
    eprintln!(
        "bench-fleet: all {n} Ready in {:.1} s; {} s of quiet for the idle RSS",
        all_ready.as_secs_f64(),
        args.idle_secs
    );
    tokio::time::sleep(Duration::from_secs(args.idle_secs)).await;
    for (process, (name, pid)) in processes.iter_mut().zip(&pids) {
        check_alive(name, *pid)?;
        process.idle_kib = proc_status_kib(*pid, "VmRSS:")?;
    }

    let (to_action, to_ready) =
        measure_changes(&releases, &workload_clients, &board, &workloads, args).await?;
    ready_watch.abort();
    for (process, (_, pid)) in processes.iter_mut().zip(&pids) {
        process.peak_end_kib = proc_status_kib(*pid, "VmHWM:")?;
    }
    Ok(FleetFigures {
        releases: n,
        all_ready,
        create_took,
        ready_after,
        processes,
        planes: plane_deltas,
        to_action,
        to_ready,
        load_at_start,
        load_at_end,
        binaries: String::new(),
    })
}

/// The spec changes, one at a time: for each, the time from the patch to the next revision's
/// Secret on the workload cluster, and to Ready=True for the new generation on the hub.
async fn measure_changes(
    releases: &Api<DynamicObject>,
    workload_clients: &[kube::Client],
    ready: &Arc<Mutex<ReadyBoard>>,
    workloads: &[String],
    args: &BenchFleet,
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let revisions = Arc::new(Mutex::new(RevisionBoard::default()));
    let watches: Vec<_> = workload_clients
        .iter()
        .map(|c| watch_revisions(c.clone(), revisions.clone()))
        .collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    while revisions.lock().expect("not poisoned").synced < workload_clients.len() {
        if Instant::now() > deadline {
            bail!("the watches of the Helm storage Secrets did not list within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    eprintln!(
        "bench-fleet: {} spec changes, one at a time, alternately on {}",
        args.changes,
        workloads.join(" and ")
    );
    let mut to_action = Vec::new();
    let mut to_ready = Vec::new();
    for k in 0..args.changes {
        let i = k % args.releases;
        let name = release_name(i);
        let revision = revisions
            .lock()
            .expect("not poisoned")
            .latest
            .get(&name)
            .map_or(0, |(v, _)| *v);
        let patched_at = Instant::now();
        let patched = releases
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(change_patch(i, k)),
            )
            .await
            .with_context(|| format!("patching the values of the HelmRelease {name}"))?;
        let generation = patched.metadata.generation.unwrap_or_default();
        let deadline = patched_at + Duration::from_secs(120);
        let (mut action, mut done) = (None, None);
        while action.is_none() || done.is_none() {
            if Instant::now() > deadline {
                bail!(
                    "change {k} of {name} (generation {generation}): no {} within 120 s",
                    if action.is_none() {
                        format!("revision {} on {}", revision + 1, cluster_of(i, workloads))
                    } else {
                        "Ready=True".to_owned()
                    }
                );
            }
            if action.is_none()
                && let Some((v, at)) = revisions.lock().expect("not poisoned").latest.get(&name)
                && *v > revision
            {
                action = Some(at.saturating_duration_since(patched_at));
            }
            if done.is_none()
                && let Some((g, at)) = ready
                    .lock()
                    .expect("not poisoned")
                    .ready_generation
                    .get(&name)
                && *g >= generation
            {
                done = Some(at.saturating_duration_since(patched_at));
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        to_action.extend(action);
        to_ready.extend(done);
    }
    for watch in watches {
        watch.abort();
    }
    to_action.sort_unstable();
    to_ready.sort_unstable();
    Ok((to_action, to_ready))
}

/// Runs Flux's side on a fresh cluster and repository.
async fn run_flux_side(
    chart: &Path,
    name: &str,
    version: &str,
    args: &BenchFleet,
) -> anyhow::Result<FluxFigures> {
    eprintln!("bench-fleet: Flux: a fresh cluster and repository");
    let cluster = Cluster::start(ClusterOptions::named("fleetbench-flux")).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("fleetbench-flux")).await?;
    repo.publish(chart)?;
    let url = repo.url();
    eprintln!(
        "bench-fleet: Flux: {} HelmReleases, --concurrent {}",
        args.releases, args.concurrency
    );
    run_flux(
        &cluster,
        &FluxRun {
            repo_url: &url,
            chart: name,
            version,
            releases: args.releases,
            concurrency: args.concurrency,
        },
    )
    .await
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// The report: Flotilla's figures, Flux's, the ratios and the goals.
fn report(ours: &FleetFigures, flux: Option<&FluxFigures>, args: &BenchFleet) -> String {
    let n = ours.releases;
    let mut out = format!(
        "bench-fleet: {n} HelmReleases of the podinfo-like chart (3 Deployments, 3 Services, 3 ConfigMaps each), {} per workload cluster; agents --concurrency {}, hub --concurrency {}
  binaries: {}
Flotilla (hub + 2 agents, 3 clusters):
  time to all Ready (first create to last Ready=True on the hub): {:.1} s = {:.2} installs/s (creating the {n} objects took {:.1} s of it)
  time to Ready per release: first {:.1} s, median {:.1} s, p99 {:.1} s
  {:<22} {:>12} {:>16} {:>16} {:>10}
",
        n / 2,
        args.concurrency,
        args.hub_concurrency,
        ours.binaries,
        ours.all_ready.as_secs_f64(),
        ours.installs_per_second(),
        ours.create_took.as_secs_f64(),
        quantile(&ours.ready_after, 0.0).as_secs_f64(),
        quantile(&ours.ready_after, 0.5).as_secs_f64(),
        quantile(&ours.ready_after, 0.99).as_secs_f64(),
        "",
        "peak RSS",
        "peak RSS at end",
        format!("idle RSS ({} s)", args.idle_secs),
        "CPU s"
    );
    for p in &ours.processes {
        out.push_str(&format!(
            "  {:<22} {:>12} {:>16} {:>16} {:>10.1}\n",
            p.name,
            mib(p.peak_kib),
            mib(p.peak_end_kib),
            mib(p.idle_kib),
            p.cpu.as_secs_f64()
        ));
    }
    out.push_str(&format!(
        "  spec change to action (values patch on the hub to the next revision's Helm Secret on the workload cluster), {} changes: p50 {}, p99 {}, max {}
  spec change to Ready (the upgrade done and reported on the hub): p50 {}, p99 {}, max {}
  machine load (1-minute average): {} at the start, {} when all were Ready
",
        ours.to_action.len(),
        secs(quantile(&ours.to_action, 0.5)),
        secs(quantile(&ours.to_action, 0.99)),
        secs(quantile(&ours.to_action, 1.0)),
        secs(quantile(&ours.to_ready, 0.5)),
        secs(quantile(&ours.to_ready, 0.99)),
        secs(quantile(&ours.to_ready, 1.0)),
        ours.load_at_start,
        ours.load_at_end,
    ));
    for (name, plane) in &ours.planes {
        out.push_str(&format!("  control plane of the {name}:\n"));
        for line in plane.report(&[], ours.all_ready).lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    // The busiest single process of the install phase, to name the bottleneck.
    let mut busiest: Vec<(String, Duration)> = ours
        .processes
        .iter()
        .map(|p| (p.name.clone(), p.cpu))
        .chain(ours.planes.iter().flat_map(|(cluster, plane)| {
            plane
                .cpu
                .iter()
                .map(move |(p, c)| (format!("{p} ({cluster})"), *c))
        }))
        .collect();
    busiest.sort_by_key(|(_, c)| std::cmp::Reverse(*c));
    let total: f64 = busiest.iter().map(|(_, c)| c.as_secs_f64()).sum();
    let wall = ours.all_ready.as_secs_f64();
    out.push_str(&format!(
        "  CPU over the install phase: {:.1} s in all = {:.2} cores on average (the machine has {}); busiest: {}\n",
        total,
        total / wall,
        std::thread::available_parallelism().map_or(0, usize::from),
        busiest
            .iter()
            .take(4)
            .map(|(n, c)| format!("{n} {:.1} s", c.as_secs_f64()))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    let own: f64 = ours.cpu().as_secs_f64();
    let cores = std::thread::available_parallelism().map_or(1, usize::from) as f64;
    out.push_str(&format!(
        "  of that, Flotilla's own processes {:.0}% and the clusters' control planes {:.0}%{}\n",
        100.0 * own / total.max(0.01),
        100.0 * (total - own) / total.max(0.01),
        if total / wall >= 0.8 * cores && own < 0.5 * total {
            ": the machine's CPU was saturated, mostly by the API servers and controller managers of the clusters (the installs' Deployments, ReplicaSets and Pods); the bottleneck is there, not in the hub or the agents"
        } else {
            ""
        }
    ));
    let workload_writes: f64 = ours.planes.iter().skip(1).map(|(_, p)| p.writes()).sum();
    out.push_str(&format!(
        "  the workload API servers took {:.0} writes/s together over the install phase ({:.0} writes per release)\n",
        workload_writes / wall,
        workload_writes / n as f64
    ));
    let hub_peak = ours
        .processes
        .first()
        .map_or(0, |p| p.peak_end_kib.max(p.peak_kib));
    let agent_peak = ours
        .processes
        .iter()
        .skip(1)
        .map(|p| p.peak_end_kib.max(p.peak_kib))
        .max()
        .unwrap_or(0);
    let p99 = quantile(&ours.to_action, 0.99);
    if let Some(flux) = flux {
        out.push_str(&format!(
            "Flux (helm-controller + source-controller, one cluster of the same harness, same chart from nginx):\n{}\n",
            flux.report()
        ));
        let flux_rss = flux.peak_rss_kib();
        let ours_rss = ours.peak_kib();
        out.push_str(&format!(
            "Side by side ({n} releases each):
  {:<28} {:>14} {:>14} {:>22}
  {:<28} {:>14} {:>14} {:>21.1}×
  {:<28} {:>14.2} {:>14.2} {:>21.1}×
  {:<28} {:>14} {:>14} {:>21.2}×
  {:<28} {:>14.1} {:>14.1} {:>21.2}×
",
            "",
            "Flotilla",
            "Flux",
            "Flux / Flotilla",
            "time to all Ready",
            secs(ours.all_ready),
            secs(flux.all_ready),
            flux.all_ready.as_secs_f64() / ours.all_ready.as_secs_f64(),
            "installs/s",
            ours.installs_per_second(),
            flux.installs_per_second(),
            ours.installs_per_second() / flux.installs_per_second(),
            "peak RSS (all processes)",
            mib(ours_rss),
            mib(flux_rss),
            flux_rss as f64 / ours_rss.max(1) as f64,
            "CPU s (install phase)",
            ours.cpu().as_secs_f64(),
            flux.cpu().as_secs_f64(),
            flux.cpu().as_secs_f64() / ours.cpu().as_secs_f64().max(0.01),
        ));
        out.push_str("  (installs/s: the row's ratio is Flotilla / Flux, the speed-up)\n");
        if !flux.stalled.is_empty() {
            out.push_str(&format!(
                "  (Flux: {} of {n} stalled, never Ready: its time is to the last release settled, its rate counts the Ready ones)\n",
                flux.stalled.len()
            ));
        }
    }
    out.push_str(&format!(
        "Goals (issue 20; the throughput goal is 1000 releases):
  1,000 Ready in ≤ 60 s: {} at {n} releases ({:.1} s{})
  ≥ 10× Flux's throughput: {}
  p99 spec-change-to-action ≤ 1 s: {} ({})
  hub ≤ 150 MiB: {} ({} peak)
  each agent ≤ 64 MiB: {} ({} peak, the larger)
",
        if n >= 1000 {
            verdict(ours.all_ready <= Duration::from_secs(60)).to_owned()
        } else {
            format!(
                "{} at this rate",
                verdict(1000.0 / ours.installs_per_second() <= 60.0)
            )
        },
        ours.all_ready.as_secs_f64(),
        if n >= 1000 {
            String::new()
        } else {
            format!(
                "; 1000 at this rate: {:.0} s",
                1000.0 / ours.installs_per_second()
            )
        },
        flux.map_or("not measured".to_owned(), |f| format!(
            "{} ({:.1}×)",
            verdict(ours.installs_per_second() >= 10.0 * f.installs_per_second()),
            ours.installs_per_second() / f.installs_per_second()
        )),
        verdict(p99 <= Duration::from_secs(1)),
        secs(p99),
        verdict(hub_peak <= 150 * 1024),
        mib(hub_peak),
        verdict(agent_peak <= 64 * 1024),
        mib(agent_peak),
    ));
    out
}

/// Runs the benchmark and prints the report.
pub fn run(root: &Path, args: &BenchFleet) -> anyhow::Result<()> {
    anyhow::ensure!(args.releases >= 2, "--releases must be at least 2");
    let chart = args
        .chart
        .clone()
        .unwrap_or_else(|| root.join("agent/tests/charts/podinfo-like"));
    let chart = chart
        .canonicalize()
        .with_context(|| format!("chart {}", chart.display()))?;
    let (name, version) = chart_name_version(&chart)?;
    let binaries = match &args.bin_dir {
        Some(dir) => bins::in_dir(dir)?,
        None => {
            eprintln!(
                "bench-fleet: building flotilla-hub, flotilla-agent and flotilla (dev profile)"
            );
            bins::build(Progress::Show)?
        }
    };
    if !args.skip_flux {
        // Built once and cached; before the clusters, so none idles while it builds.
        flux_bin_dir()?;
    }
    let runtime = tokio::runtime::Runtime::new()?;
    let ours = runtime.block_on(run_fleet(binaries, &chart, &name, &version, args))?;
    eprintln!("bench-fleet: Flotilla's side done; the fleet is stopped");
    if args.skip_flux {
        println!("{}", report(&ours, None, args));
        return Ok(());
    }
    // Flotilla's figures first, so that a Flux side that fails (or is interrupted) after
    // its long run does not take them with it.
    eprintln!(
        "bench-fleet: Flotilla's figures (Flux's follow):\n{}",
        report(&ours, None, args)
    );
    match runtime.block_on(run_flux_side(&chart, &name, &version, args)) {
        Ok(flux) => {
            println!("{}", report(&ours, Some(&flux), args));
            Ok(())
        }
        Err(e) => {
            println!("{}", report(&ours, None, args));
            Err(e.context("bench-fleet: Flux's side failed (Flotilla's figures are above)"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn releases_alternate_between_the_workload_clusters_with_the_agent_benchs_values() {
        let workloads = vec!["workload-a".to_owned(), "workload-b".to_owned()];
        let even = helm_release(4, cluster_of(4, &workloads), "podinfo-like", "6.5.3");
        let odd = helm_release(7, cluster_of(7, &workloads), "podinfo-like", "6.5.3");
        assert_eq!(even["spec"]["clusterRef"]["name"], "workload-a");
        assert_eq!(odd["spec"]["clusterRef"]["name"], "workload-b");
        assert_eq!(odd["metadata"]["name"], "bench-007");
        assert_eq!(odd["spec"]["releaseName"], "bench-007");
        assert_eq!(odd["spec"]["storageNamespace"], NAMESPACE);
        assert_eq!(odd["spec"]["values"], release_values(7));
        assert_eq!(
            odd["spec"]["chart"]["spec"]["sourceRef"]["name"],
            REPOSITORY
        );
    }

    #[test]
    fn a_change_keeps_the_release_index_and_adds_the_change_number() {
        let patch = change_patch(3, 12);
        let annotations = &patch["spec"]["values"]["podAnnotations"];
        assert_eq!(annotations["bench/index"], "3");
        assert_eq!(annotations["bench/change"], "12");
    }
}
