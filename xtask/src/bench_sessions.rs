//! `cargo xtask bench-sessions`: N simulated agents against one real hub (issue 19, the
//! benchmark of "done when").
//!
//! The hub is the real `flotilla-hub` binary (a dev build of this checkout unless
//! `--bin-dir` names a directory of prebuilt ones) in a child process, started by
//! [`Fleet::start`] with no workload cluster: its management cluster is a real local
//! cluster of the harness, the example chart (`examples/charts/hello`, packaged with the real
//! `helm package`) is served by the real nginx Helm repository.
//!
//! The agents are simulated, all in this process as tokio tasks, but their session code is
//! the real one: [`flotilla_agent::session::join`] (the agent's own key, a CSR, the bootstrap
//! token of the real `flotilla token create --auto-accept`, the hub verified against the CA
//! pin) and [`flotilla_agent::session::run`] (mutual TLS with the certificate the hub
//! signed, Hello, resync, plans, acks, reports, pings). What is simulated is what lies
//! behind the client: no Kubernetes (the identity is kept in memory, [`SimCluster`]) and no
//! Helm: the runtime is replaced by an [`ExternalAgent`] that holds each plan it receives and
//! at once reports `Ready=True` for its revision (`UpgradeSucceeded` at the plan's chart
//! version). The simulated agents do not fetch charts (`GetChart`): they install nothing.
//!
//! Phases (each timed from its start; the hub's CPU seconds, its peak RSS (`VmHWM`) and the
//! management cluster's control plane measured per phase):
//! 1. **Connect storm.** The N agents start at once: join (Register with token and CSR,
//!    ManagedCluster created and auto-accepted, certificate signed) then the session. Done
//!    when every ManagedCluster on the hub shows `status.connection.state: Connected` (a
//!    ManagedCluster watch): the hub has admitted the session and written it down.
//! 2. **Rollout.** One HelmRelease per agent (`spec.clusterRef` to it, chart `hello` at
//!    version `*` from one HelmRepository) created; done when every agent's session has
//!    acknowledged its plan and every HelmRelease is Ready on the hub at version 0.1.0 (a
//!    HelmRelease watch).
//! 3. **Chart version bump.** A new version of the chart (0.2.0) is published to the
//!    repository (the real `helm package` and `helm repo index`), then the HelmRepository is
//!    asked to reconcile (`reconcile.fluxcd.io/requestedAt`, as `flotilla reconcile source
//!    helm` does, instead of waiting for its interval). This models a chart release: the
//!    HelmReleases are not touched; each one's HelmChart resolves `*` to the new version, the
//!    hub builds a new plan per HelmRelease and sends it. Two figures: **acknowledged by
//!    all** (the goal's measure: the last agent session's ack of its plan at 0.2.0, taken in
//!    this process when the session hands the ack to the hub-bound stream,
//!    [`SessionOptions::acked`]) and **Ready at 0.2.0 on the hub** (the last HelmRelease seen
//!    Ready at 0.2.0 by a watch: the agent's status report written back by the hub). The
//!    phase ends when both hold.
//!
//! The machine's load average is given at the start and the end; the figures of this
//! process (N agents) are given beside the hub's.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_agent::runtime::{self, ExternalAgent};
use flotilla_agent::session::identity::Stored;
use flotilla_agent::session::{
    self, AgentCluster, CaPin, HubAddress, JoinOptions, PlanAcked, SessionError, SessionOptions,
};
use flotilla_core::agent::{Command, HeldPlan, ObjectKey, Report, StatusReport, status_digest};
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition, reason};
use flotilla_core::plan::ReleasePlan;
use flotilla_core::release::Step;
use flotilla_core::status::{HelmReleaseStatus, ReleaseAction};
use flotilla_tests::bins::{self, Binaries, Progress};
use flotilla_tests::fleet::{EXAMPLE_CHART, Fleet, FleetOptions};
use futures::StreamExt as _;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::bench_common::{
    self, ControlPlane, PlaneDelta, cpu_time, load_average, mib, proc_status_kib,
};

/// Options of `cargo xtask bench-sessions`.
#[derive(Debug, clap::Args)]
pub struct BenchSessions {
    /// How many simulated agents (one ManagedCluster and one HelmRelease each).
    #[arg(long, default_value_t = 1000)]
    agents: usize,
    /// The hub's `--concurrency` (HelmRelease, HelmChart and HelmRepository reconciles at
    /// the same time).
    #[arg(long, default_value_t = 16)]
    hub_concurrency: u16,
    /// Extra flags for the hub (repeatable), e.g. `--hub-arg=--kube-qps=100`.
    #[arg(long = "hub-arg", allow_hyphen_values = true)]
    hub_args: Vec<String>,
    /// `RUST_LOG` of the hub.
    #[arg(long, default_value = "info")]
    hub_log: String,
    /// How long each phase may take, in seconds.
    #[arg(long, default_value_t = 300)]
    timeout_secs: u64,
    /// A directory holding `flotilla-hub`, `flotilla-agent` and `flotilla` (for example a
    /// release build); default: built by cargo, dev profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// The namespace of the HelmReleases and the HelmRepository on the hub.
const NAMESPACE: &str = "bench";
/// The HelmRepository every release's chart comes from.
const REPOSITORY: &str = "bench";
/// The example chart's name and its two versions.
const CHART: &str = "hello";
const FIRST_VERSION: &str = "0.1.0";
const BUMPED_VERSION: &str = "0.2.0";
/// The simulated agents' namespace (where a real agent keeps its identity Secret).
const AGENT_NAMESPACE: &str = "flotilla-system";

/// The ManagedCluster (and HelmRelease) name of agent `i`.
fn cluster_name(i: usize) -> String {
    format!("sim-{i:04}")
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

fn helm_release_resource() -> ApiResource {
    resource("helm.flotilla.dev", "HelmRelease", "helmreleases")
}

fn helm_repository_resource() -> ApiResource {
    resource("source.flotilla.dev", "HelmRepository", "helmrepositories")
}

fn managed_cluster_resource() -> ApiResource {
    resource("fleet.flotilla.dev", "ManagedCluster", "managedclusters")
}

/// The HelmRelease of agent `i`: the example chart at any version, on cluster `i`.
fn helm_release(i: usize) -> serde_json::Value {
    let name = cluster_name(i);
    serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1",
        "kind": "HelmRelease",
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": {
            "clusterRef": { "name": name },
            "interval": "1h",
            "releaseName": "hello",
            "targetNamespace": "default",
            "chart": {
                "spec": {
                    "chart": CHART,
                    "version": "*",
                    "sourceRef": { "kind": "HelmRepository", "name": REPOSITORY },
                    "interval": "1h",
                }
            },
            "values": { "message": format!("hello from {name}") },
        }
    })
}

/// A simulated agent's cluster: its identity kept in memory, a made-up cluster UID.
#[derive(Debug)]
struct SimCluster {
    uid: String,
    stored: Mutex<Stored>,
}

impl SimCluster {
    fn new(i: usize) -> Self {
        Self {
            uid: format!("00000000-0000-4000-8000-{i:012}"),
            stored: Mutex::new(Stored::default()),
        }
    }
}

impl AgentCluster for SimCluster {
    async fn load_identity(&self, _namespace: &str) -> Result<Stored, SessionError> {
        Ok(self
            .stored
            .lock()
            .expect("the identity is not poisoned")
            .clone())
    }

    async fn store_identity(&self, _namespace: &str, stored: &Stored) -> Result<(), SessionError> {
        *self.stored.lock().expect("the identity is not poisoned") = stored.clone();
        Ok(())
    }

    async fn cluster_uid(&self) -> Result<String, SessionError> {
        Ok(self.uid.clone())
    }

    async fn kubernetes_version(&self) -> String {
        "v1.35.0-simulated".to_owned()
    }
}

/// What the simulated agents have done, by agent.
#[derive(Debug, Default)]
struct AgentBoard {
    /// When each agent had its certificate.
    joined: HashMap<usize, Instant>,
    /// When each agent's session first acknowledged a plan at each chart version (the ack
    /// handed to the outgoing stream: [`SessionOptions::acked`]).
    acked: HashMap<(usize, String), Instant>,
    /// Agents whose join failed for good, with the error.
    failed: Vec<(usize, String)>,
}

type SharedAgents = Arc<Mutex<AgentBoard>>;

/// What the watches of the hub's objects have seen.
#[derive(Debug, Default)]
struct HubBoard {
    /// When each ManagedCluster was last seen `Connected` (not before the first time).
    connected: HashMap<String, Instant>,
    /// When each HelmRelease was first seen Ready for its generation at each chart version.
    ready_at_version: HashMap<(String, String), Instant>,
}

type SharedHub = Arc<Mutex<HubBoard>>;

/// The status a simulated agent reports for `plan`: released and ready at its version.
fn simulated_status(plan: &ReleasePlan, previous: Option<&HelmReleaseStatus>) -> HelmReleaseStatus {
    let now = flotilla_agent::reconcile::now();
    let mut status = previous.cloned().unwrap_or_default();
    let (action, why) = if previous.is_some() {
        (ReleaseAction::Upgrade, reason::UPGRADE_SUCCEEDED)
    } else {
        (ReleaseAction::Install, reason::INSTALL_SUCCEEDED)
    };
    let message = format!(
        "Helm {} succeeded for release {} with chart {}@{} (simulated)",
        if previous.is_some() {
            "upgrade"
        } else {
            "install"
        },
        plan.release.qualified(),
        plan.chart.name,
        plan.chart.version
    );
    status.observed_generation = plan.generation;
    status.last_attempted_generation = plan.generation;
    status.last_attempted_revision = plan.chart.version.clone();
    status.last_attempted_config_digest = plan.config_digest.to_string();
    status.last_attempted_release_action = Some(action);
    status.storage_namespace = plan.release.storage_namespace.as_str().to_owned();
    status.conditions.set_condition(
        condition::RELEASED,
        ConditionStatus::True,
        why,
        message.clone(),
        plan.generation,
        &now,
    );
    status.conditions.set_condition(
        condition::READY,
        ConditionStatus::True,
        why,
        message,
        plan.generation,
        &now,
    );
    status
}

/// The simulated runtime: holds each newer plan and reports it ready at once.
async fn simulate_runtime(mut agent: ExternalAgent, stop: CancellationToken) {
    let mut latest: BTreeMap<ObjectKey, StatusReport> = BTreeMap::new();
    let mut seq = 0u64;
    loop {
        let command = tokio::select! {
            command = agent.recv() => command,
            () = stop.cancelled() => None,
        };
        let Some(command) = command else { return };
        match command {
            Command::Upsert(plan) => {
                let key = plan.object.key();
                let previous = latest.get(&key);
                if previous.is_some_and(|p| p.plan_revision >= plan.revision) {
                    continue;
                }
                let status = simulated_status(&plan, previous.map(|p| &p.status));
                seq += 1;
                let report = StatusReport {
                    object: plan.object.clone(),
                    plan_revision: plan.revision,
                    seq,
                    status,
                    step: Step::Done,
                };
                agent.hold(HeldPlan {
                    object: key.clone(),
                    revision: plan.revision,
                    chart: plan.chart.digest.clone(),
                    status_digest: Some(status_digest(&report.status)),
                });
                latest.insert(key, report.clone());
                if agent.report(Report::Status(Box::new(report))).is_err() {
                    return;
                }
            }
            Command::Reconcile(key) => {
                if let Some(report) = latest.get(&key)
                    && agent
                        .report(Report::Status(Box::new(report.clone())))
                        .is_err()
                {
                    return;
                }
            }
            Command::Delete(request) => {
                latest.remove(&request.object);
                agent.forget(&request.object);
                let deleted = Report::Deleted {
                    object: request.object,
                    revision: request.revision,
                    outcome: flotilla_core::agent::DeleteOutcome::Forgotten,
                };
                if agent.report(deleted).is_err() {
                    return;
                }
            }
            Command::Shutdown => return,
        }
    }
}

/// Simulated agent `i`: joins with `token`, then runs the real session client over the
/// simulated runtime until `stop`.
async fn simulated_agent(
    i: usize,
    hub: HubAddress,
    token: String,
    ca_pin: CaPin,
    board: SharedAgents,
    stop: CancellationToken,
) {
    let cluster = SimCluster::new(i);
    let options = JoinOptions {
        hub,
        token: Some(token),
        ca_pin,
        cluster_name: cluster_name(i),
        namespace: AGENT_NAMESPACE.to_owned(),
        poll_interval: Duration::from_secs(1),
    };
    let identity = tokio::select! {
        joined = session::join(&cluster, &options) => joined,
        () = stop.cancelled() => return,
    };
    let identity = match identity {
        Ok(identity) => identity,
        Err(e) => {
            board
                .lock()
                .expect("the agent board is not poisoned")
                .failed
                .push((i, e.to_string()));
            return;
        }
    };
    board
        .lock()
        .expect("the agent board is not poisoned")
        .joined
        .insert(i, Instant::now());
    let (handle, reports, external) = runtime::external();
    let runtime = tokio::spawn(simulate_runtime(external, stop.clone()));
    let (acked, mut acks) = tokio::sync::mpsc::unbounded_channel::<PlanAcked>();
    let recorder = tokio::spawn(async move {
        while let Some(ack) = acks.recv().await {
            board
                .lock()
                .expect("the agent board is not poisoned")
                .acked
                .entry((i, ack.chart_version))
                .or_insert(ack.at);
        }
    });
    session::run(
        cluster,
        identity,
        handle,
        reports,
        SessionOptions {
            namespace: AGENT_NAMESPACE.to_owned(),
            acked: Some(acked),
            ..SessionOptions::default()
        },
        stop,
    )
    .await;
    runtime.abort();
    recorder.abort();
}

/// Watches the ManagedClusters into `board` until aborted.
fn watch_clusters(client: kube::Client, board: SharedHub) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<DynamicObject> = Api::all_with(client, &managed_cluster_resource());
        let mut events = watcher::watcher(api, watcher::Config::default()).boxed();
        while let Some(event) = events.next().await {
            let object = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("bench-sessions: watch of the ManagedClusters: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            let state = object
                .data
                .pointer("/status/connection/state")
                .and_then(serde_json::Value::as_str);
            let name = object.metadata.name.clone().unwrap_or_default();
            let mut board = board.lock().expect("the hub board is not poisoned");
            if state == Some("Connected") {
                board.connected.entry(name).or_insert_with(Instant::now);
            } else {
                board.connected.remove(&name);
            }
        }
    })
}

/// Watches the HelmReleases in [`NAMESPACE`] into `board` until aborted.
fn watch_releases(client: kube::Client, board: SharedHub) -> tokio::task::JoinHandle<()> {
    bench_common::watch_ready_releases(
        client,
        NAMESPACE,
        &helm_release_resource(),
        "bench-sessions",
        move |object, now| {
            let version = object
                .data
                .pointer("/status/lastAttemptedRevision")
                .and_then(serde_json::Value::as_str)
                .unwrap_or_default()
                .to_owned();
            let name = object.metadata.name.clone().unwrap_or_default();
            board
                .lock()
                .expect("the hub board is not poisoned")
                .ready_at_version
                .entry((name, version))
                .or_insert(now);
        },
    )
}

/// Figures of one phase.
#[derive(Debug, Clone, Default)]
struct Phase {
    name: &'static str,
    /// From the phase's start to its end condition.
    took: Duration,
    /// Sorted per-agent (or per-release) times of the phase's own measure, from its start.
    each: Vec<Duration>,
    /// A second measure, sorted (agent side when `each` is the hub's, or the reverse).
    other: Vec<Duration>,
    hub_cpu: Duration,
    own_cpu: Duration,
    /// The hub's `VmHWM` at the end of the phase, KiB.
    hub_peak_kib: u64,
    plane: PlaneDelta,
    load_at_end: String,
}

/// Everything the run measured.
#[derive(Debug, Clone, Default)]
struct Figures {
    agents: usize,
    phases: Vec<Phase>,
    hub_rss_end_kib: u64,
    own_peak_kib: u64,
    load_at_start: String,
    binaries: String,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// Measures a phase: runs `wait` (which returns when the phase is done), with the hub's
/// and this process's CPU and the control plane sampled around it.
struct Meter<'a> {
    hub_pid: u32,
    plane: &'a ControlPlane,
}

struct Started {
    at: Instant,
    hub_cpu: Duration,
    own_cpu: Duration,
    plane: crate::bench_common::PlaneSample,
}

impl Meter<'_> {
    async fn start(&self) -> anyhow::Result<Started> {
        Ok(Started {
            at: Instant::now(),
            hub_cpu: cpu_time(self.hub_pid)?,
            own_cpu: cpu_time(std::process::id())?,
            plane: self.plane.sample().await?,
        })
    }

    async fn finish(
        &self,
        started: &Started,
        name: &'static str,
        took: Duration,
    ) -> anyhow::Result<Phase> {
        let plane = self.plane.sample().await?;
        Ok(Phase {
            name,
            took,
            hub_cpu: cpu_time(self.hub_pid)?.saturating_sub(started.hub_cpu),
            own_cpu: cpu_time(std::process::id())?.saturating_sub(started.own_cpu),
            hub_peak_kib: proc_status_kib(self.hub_pid, "VmHWM:")?,
            plane: plane.delta(&started.plane),
            load_at_end: load_average(),
            ..Phase::default()
        })
    }
}

/// Waits until `done` holds, checking every 100 ms, or fails with `what` and `progress`.
async fn wait_until(
    what: &str,
    timeout: Duration,
    hub_pid: u32,
    mut done: impl FnMut() -> (bool, String),
) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    let mut last_print = Instant::now();
    loop {
        let (ok, progress) = done();
        if ok {
            return Ok(());
        }
        if !Path::new(&format!("/proc/{hub_pid}")).exists() {
            bail!("the hub (pid {hub_pid}) exited while waiting for {what}");
        }
        if Instant::now() > deadline {
            bail!(
                "{what}: not done within {} s ({progress})",
                timeout.as_secs()
            );
        }
        if last_print.elapsed() > Duration::from_secs(5) {
            eprintln!("bench-sessions:   ... {progress}");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn measure(fleet: &Fleet, args: &BenchSessions) -> anyhow::Result<Figures> {
    let n = args.agents;
    let timeout = Duration::from_secs(args.timeout_secs);
    let hub_pid = fleet.hub_pid().context("the hub runs")?;
    let client = fleet.mgmt.client().await?;
    bench_common::ensure_namespace(&client, NAMESPACE).await?;
    let repositories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_repository_resource());
    let repository: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "HelmRepository",
        "metadata": { "name": REPOSITORY, "namespace": NAMESPACE },
        "spec": { "url": fleet.repo.url(), "interval": "1h" }
    }))?;
    repositories
        .create(&PostParams::default(), &repository)
        .await
        .with_context(|| format!("creating the HelmRepository {NAMESPACE}/{REPOSITORY}"))?;
    let printed = fleet.flotilla(&[
        "token",
        "create",
        "--hub-url",
        &fleet.hub_url(),
        "--uses",
        &n.to_string(),
        "--auto-accept",
        "--any-cluster",
        "--ttl",
        "2h",
    ])?;
    let (token, pin) = flotilla_tests::fleet::parse_join_command(&printed)?;
    let hub = HubAddress::parse(&fleet.hub_url()).context("the hub's URL")?;
    let ca_pin = CaPin::parse(&pin).context("the CA pin `flotilla token create` printed")?;

    let plane = ControlPlane {
        pids: fleet.mgmt.pids(),
        client: client.clone(),
    };
    let meter = Meter {
        hub_pid,
        plane: &plane,
    };
    let hub_board = SharedHub::default();
    let agent_board = SharedAgents::default();
    let watches = [
        watch_clusters(client.clone(), hub_board.clone()),
        watch_releases(client.clone(), hub_board.clone()),
    ];
    let stop = CancellationToken::new();
    let load_at_start = load_average();
    let mut phases = Vec::new();

    // 1. The connect storm.
    eprintln!("bench-sessions: phase 1: {n} agents join and connect at once");
    let started = meter.start().await?;
    let t0 = started.at;
    let agents: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(simulated_agent(
                i,
                hub.clone(),
                token.clone(),
                ca_pin.clone(),
                agent_board.clone(),
                stop.clone(),
            ))
        })
        .collect();
    wait_until("every agent connected", timeout, hub_pid, || {
        let agents = agent_board.lock().expect("not poisoned");
        let hub = hub_board.lock().expect("not poisoned");
        let connected = hub.connected.len();
        (
            connected >= n && agents.joined.len() >= n,
            format!(
                "{} joined, {connected} connected, {} failed{}",
                agents.joined.len(),
                agents.failed.len(),
                agents
                    .failed
                    .first()
                    .map(|(i, e)| format!(" (agent {i}: {e})"))
                    .unwrap_or_default()
            ),
        )
    })
    .await?;
    let took = t0.elapsed();
    let mut phase = meter.finish(&started, "connect storm", took).await?;
    {
        let hub = hub_board.lock().expect("not poisoned");
        let agents = agent_board.lock().expect("not poisoned");
        phase.each = sorted(
            hub.connected
                .values()
                .map(|t| t.saturating_duration_since(t0)),
        );
        phase.other = sorted(
            agents
                .joined
                .values()
                .map(|t| t.saturating_duration_since(t0)),
        );
    }
    phases.push(phase);

    // 2. One HelmRelease per agent.
    eprintln!("bench-sessions: phase 2: {n} HelmReleases, one per agent");
    let releases: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_resource());
    let started = meter.start().await?;
    let t0 = started.at;
    let indices: Vec<usize> = (0..n).collect();
    for chunk in indices.chunks(32) {
        let creates = chunk.iter().map(|&i| {
            let releases = releases.clone();
            async move {
                let object: DynamicObject = serde_json::from_value(helm_release(i))?;
                releases
                    .create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("creating HelmRelease {}", cluster_name(i)))?;
                anyhow::Ok(())
            }
        });
        futures::future::try_join_all(creates).await?;
    }
    let version_done = |version: &'static str| {
        let agent_board = agent_board.clone();
        let hub_board = hub_board.clone();
        move || {
            let agents = agent_board.lock().expect("not poisoned");
            let hub = hub_board.lock().expect("not poisoned");
            let acked = agents.acked.keys().filter(|(_, v)| v == version).count();
            let ready = hub
                .ready_at_version
                .keys()
                .filter(|(_, v)| v == version)
                .count();
            (
                acked >= n && ready >= n,
                format!(
                    "{acked} agents acknowledged the plan at {version}, {ready} HelmReleases Ready at it on the hub"
                ),
            )
        }
    };
    wait_until(
        "every HelmRelease installed",
        timeout,
        hub_pid,
        version_done(FIRST_VERSION),
    )
    .await?;
    let took = t0.elapsed();
    let mut phase = meter.finish(&started, "rollout", took).await?;
    fill_version_times(&mut phase, &agent_board, &hub_board, FIRST_VERSION, t0);
    phases.push(phase);

    // 3. A new chart version.
    eprintln!(
        "bench-sessions: phase 3: chart {CHART} {BUMPED_VERSION} published, the HelmRepository asked to reconcile"
    );
    let chart_dir = flotilla_tests::cluster::workspace_root().join(EXAMPLE_CHART);
    let started = meter.start().await?;
    let t0 = started.at;
    fleet.repo.publish_version(&chart_dir, BUMPED_VERSION)?;
    let requested = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().to_string())
        .unwrap_or_default();
    repositories
        .patch(
            REPOSITORY,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": { "annotations": { "reconcile.fluxcd.io/requestedAt": requested } }
            })),
        )
        .await
        .context("asking the HelmRepository to reconcile")?;
    wait_until(
        "every agent acknowledged the new chart version",
        timeout,
        hub_pid,
        version_done(BUMPED_VERSION),
    )
    .await?;
    let took = t0.elapsed();
    let mut phase = meter.finish(&started, "chart version bump", took).await?;
    fill_version_times(&mut phase, &agent_board, &hub_board, BUMPED_VERSION, t0);
    phases.push(phase);

    let hub_rss_end_kib = proc_status_kib(hub_pid, "VmRSS:")?;
    let own_peak_kib = proc_status_kib(std::process::id(), "VmHWM:")?;
    stop.cancel();
    for agent in agents {
        let _ = tokio::time::timeout(Duration::from_secs(5), agent).await;
    }
    for watch in watches {
        watch.abort();
    }
    Ok(Figures {
        agents: n,
        phases,
        hub_rss_end_kib,
        own_peak_kib,
        load_at_start,
        binaries: String::new(),
    })
}

fn sorted(times: impl Iterator<Item = Duration>) -> Vec<Duration> {
    let mut out: Vec<Duration> = times.collect();
    out.sort();
    out
}

/// The per-release times of reaching `version`: Ready on the hub (`each`) and acknowledged
/// by the agents' sessions (`other`), from `t0`.
fn fill_version_times(
    phase: &mut Phase,
    agents: &SharedAgents,
    hub: &SharedHub,
    version: &str,
    t0: Instant,
) {
    let hub = hub.lock().expect("not poisoned");
    let agents = agents.lock().expect("not poisoned");
    phase.each = sorted(
        hub.ready_at_version
            .iter()
            .filter(|((_, v), _)| v == version)
            .map(|(_, t)| t.saturating_duration_since(t0)),
    );
    phase.other = sorted(
        agents
            .acked
            .iter()
            .filter(|((_, v), _)| v == version)
            .map(|(_, t)| t.saturating_duration_since(t0)),
    );
}

fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

fn report(figures: &Figures) -> String {
    let n = figures.agents;
    let mut out = format!(
        "\nbench-sessions: {n} simulated agents (real session client and mTLS, one process), one hub ({})\n",
        figures.binaries
    );
    out.push_str(&format!(
        "load average (1 min): {} at the start\n\n",
        figures.load_at_start
    ));
    out.push_str(
        "| phase | done in | hub view p50 / p99 | agent view p50 / p99 | hub CPU | agents' CPU | hub peak RSS | load after |\n|---|---|---|---|---|---|---|---|\n",
    );
    for p in &figures.phases {
        out.push_str(&format!(
            "| {} | {} | {} / {} | {} / {} | {:.1} s | {:.1} s | {} | {} |\n",
            p.name,
            secs(p.took),
            secs(quantile(&p.each, 0.5)),
            secs(quantile(&p.each, 0.99)),
            secs(quantile(&p.other, 0.5)),
            secs(quantile(&p.other, 0.99)),
            p.hub_cpu.as_secs_f64(),
            p.own_cpu.as_secs_f64(),
            mib(p.hub_peak_kib),
            p.load_at_end,
        ));
    }
    out.push_str(&format!(
        "\nhub RSS at the end {}; this process (the {n} agents) peak RSS {}\n",
        mib(figures.hub_rss_end_kib),
        mib(figures.own_peak_kib)
    ));
    out.push_str(
        "views: connect storm: hub = ManagedCluster Connected seen by a watch, agent = certificate received (join done); rollout and bump: hub = HelmRelease Ready at the version (watch of the hub's cluster), agent = the agent session's ack of the plan at the version\n",
    );
    for p in &figures.phases {
        out.push_str(&format!("{}:\n", p.name));
        out.push_str(&p.plane.report(
            &[("flotilla-hub", p.hub_cpu), ("agents (xtask)", p.own_cpu)],
            p.took,
        ));
        out.push('\n');
    }
    let storm = figures.phases.first().map(|p| p.took).unwrap_or_default();
    let bump_acked = figures
        .phases
        .get(2)
        .and_then(|p| p.other.last().copied())
        .unwrap_or_default();
    let bump_ready = figures
        .phases
        .get(2)
        .and_then(|p| p.each.last().copied())
        .unwrap_or_default();
    out.push_str(&format!(
        "\nchart version bump: acknowledged by every agent {} (p50 {}); Ready at the new version on the hub for every HelmRelease {} (p50 {})\n",
        secs(bump_acked),
        secs(figures.phases.get(2).map(|p| quantile(&p.other, 0.5)).unwrap_or_default()),
        secs(bump_ready),
        secs(figures.phases.get(2).map(|p| quantile(&p.each, 0.5)).unwrap_or_default()),
    ));
    let peak = figures
        .phases
        .iter()
        .map(|p| p.hub_peak_kib)
        .max()
        .unwrap_or_default();
    out.push_str(&format!(
        "\ngoals (N = 1,000): all connected ≤ 30 s: {} ({}); bump acknowledged by all ≤ 10 s: {} ({}); hub ≤ 512 MiB: {} ({})",
        verdict(storm <= Duration::from_secs(30)),
        secs(storm),
        verdict(bump_acked <= Duration::from_secs(10)),
        secs(bump_acked),
        verdict(peak <= 512 * 1024),
        mib(peak),
    ));
    if n != 1000 {
        out.push_str(&format!(" — this run had N = {n}"));
    }
    out.push('\n');
    out
}

/// Runs the benchmark and prints the report.
pub fn run(_root: &Path, args: &BenchSessions) -> anyhow::Result<()> {
    anyhow::ensure!(args.agents >= 1, "--agents must be at least 1");
    let binaries: Binaries = match &args.bin_dir {
        Some(dir) => bins::in_dir(dir)?,
        None => {
            eprintln!("bench-sessions: building flotilla-hub and flotilla (dev profile)");
            bins::build(Progress::Show)?
        }
    };
    let described = format!("hub {}", binaries.hub.display());
    let runtime = tokio::runtime::Runtime::new()?;
    let mut figures = runtime.block_on(async {
        let mut options = FleetOptions::named("sessbench");
        options.workloads = Vec::new();
        options.verbose = true;
        options.log_level = args.hub_log.clone();
        options.hub_args = vec!["--concurrency".into(), args.hub_concurrency.to_string()];
        options.hub_args.extend(args.hub_args.iter().cloned());
        let fleet = Fleet::start(binaries, options).await?;
        let result = measure(&fleet, args).await;
        result.map_err(|e| {
            e.context(format!(
                "the hub's log: {} (kept with FLOTILLA_KEEP_LOGS=1)",
                fleet.hub_log().display()
            ))
        })
    })?;
    figures.binaries = described;
    println!("{}", report(&figures));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_agent_has_its_own_cluster_and_release_of_the_example_chart() {
        let release = helm_release(7);
        assert_eq!(release["metadata"]["name"], "sim-0007");
        assert_eq!(release["spec"]["clusterRef"]["name"], "sim-0007");
        assert_eq!(release["spec"]["chart"]["spec"]["chart"], CHART);
        assert_eq!(release["spec"]["chart"]["spec"]["version"], "*");
        assert_ne!(SimCluster::new(7).uid, SimCluster::new(8).uid);
    }

    #[test]
    fn the_simulated_status_is_ready_at_the_plans_chart_version_and_upgrades_after_installing() {
        let hr = flotilla_core::spec::HelmRelease::from_value(serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": { "name": "sim-0001", "namespace": "bench", "generation": 3 },
            "spec": { "interval": "1h", "chart": { "spec": { "chart": "hello",
                "sourceRef": { "kind": "HelmRepository", "name": "bench" } } } }
        }))
        .unwrap();
        let artifact = |version: &str| flotilla_core::plan::ChartArtifact {
            name: "hello".into(),
            version: version.into(),
            app_version: None,
            digest: flotilla_core::ids::ChartDigest::new(format!("sha256:{}", "a".repeat(64)))
                .unwrap(),
            oci_digest: None,
        };
        let plan = |version| {
            ReleasePlan::from_helm_release(
                &hr,
                flotilla_core::ids::PlanRevision::new(1),
                artifact(version),
                serde_json::Value::Null,
            )
            .unwrap()
        };
        let installed = simulated_status(&plan("0.1.0"), None);
        assert!(installed.conditions.is_true(condition::READY));
        assert_eq!(installed.observed_generation, 3);
        assert_eq!(installed.last_attempted_revision, "0.1.0");
        assert_eq!(
            installed.last_attempted_release_action,
            Some(ReleaseAction::Install)
        );
        let upgraded = simulated_status(&plan("0.2.0"), Some(&installed));
        assert_eq!(upgraded.last_attempted_revision, "0.2.0");
        assert_eq!(
            upgraded.last_attempted_release_action,
            Some(ReleaseAction::Upgrade)
        );
    }

    #[test]
    fn quantiles_of_sorted_durations_pick_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&d, 0.5), Duration::from_millis(51));
        assert_eq!(quantile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
