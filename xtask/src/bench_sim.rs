//! What the simulated-agent benchmarks share (`bench-sessions`, `bench-rollout`): N agents
//! in this process, each running the real session client ([`flotilla_agent::session::join`]
//! then [`flotilla_agent::session::run`], mutual TLS with the certificate the hub signed)
//! over a simulated cluster ([`SimCluster`]: the identity in memory) and a simulated runtime
//! ([`simulate_runtime`]: no Kubernetes, no Helm; each plan held and at once reported
//! `Ready=True`, or, for an agent told to fail, reported as a failed upgrade the way the real
//! agent reports one). Also the pieces of their reports: a phase's figures ([`Meter`],
//! [`Phase`]), quantiles, and the waits and watches of the hub's objects.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
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
use flotilla_tests::fleet::Fleet;
use futures::StreamExt as _;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::bench_common::{ControlPlane, PlaneDelta, PlaneSample, cpu_time, load_average};
use crate::bench_common::{mib, proc_status_kib};

/// The simulated agents' namespace (where a real agent keeps its identity Secret).
pub const AGENT_NAMESPACE: &str = "flotilla-system";

/// The key of a plan's values that makes an agent told to fail ([`SimAgent::faulty`])
/// report that plan's upgrade as failed.
pub const FAIL_VALUE_KEY: &str = "benchFail";

/// The ManagedCluster name of agent `i`.
pub fn cluster_name(i: usize) -> String {
    format!("sim-{i:04}")
}

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// `helm.flotilla.dev/v1` HelmReleases.
pub fn helm_release_resource() -> ApiResource {
    resource("helm.flotilla.dev", "v1", "HelmRelease", "helmreleases")
}

/// `helm.flotilla.dev/v1alpha1` HelmReleaseSets.
pub fn helm_release_set_resource() -> ApiResource {
    resource(
        "helm.flotilla.dev",
        "v1alpha1",
        "HelmReleaseSet",
        "helmreleasesets",
    )
}

/// `source.flotilla.dev/v1` HelmRepositories.
pub fn helm_repository_resource() -> ApiResource {
    resource(
        "source.flotilla.dev",
        "v1",
        "HelmRepository",
        "helmrepositories",
    )
}

/// `fleet.flotilla.dev/v1` ManagedClusters.
pub fn managed_cluster_resource() -> ApiResource {
    resource(
        "fleet.flotilla.dev",
        "v1",
        "ManagedCluster",
        "managedclusters",
    )
}

/// A simulated agent's cluster: its identity kept in memory, a made-up cluster UID.
#[derive(Debug)]
pub struct SimCluster {
    uid: String,
    stored: Mutex<Stored>,
}

impl SimCluster {
    /// The cluster of agent `i`.
    pub fn new(i: usize) -> Self {
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
pub struct AgentBoard {
    /// When each agent had its certificate.
    pub joined: HashMap<usize, Instant>,
    /// When each agent's session first acknowledged a plan at each chart version (the ack
    /// handed to the outgoing stream: [`SessionOptions::acked`]).
    pub acked: HashMap<(usize, String), Instant>,
    /// Agents whose join failed for good, with the error.
    pub failed: Vec<(usize, String)>,
}

/// [`AgentBoard`] shared by the agents' tasks.
pub type SharedAgents = Arc<Mutex<AgentBoard>>;

/// Fields of a status report common to success and failure: the attempt of `plan`.
fn attempted(plan: &ReleasePlan, previous: Option<&HelmReleaseStatus>) -> HelmReleaseStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = plan.generation;
    status.last_attempted_generation = plan.generation;
    status.last_attempted_revision = plan.chart.version.clone();
    status.last_attempted_config_digest = plan.config_digest.to_string();
    status.last_attempted_release_action = Some(if previous.is_some() {
        ReleaseAction::Upgrade
    } else {
        ReleaseAction::Install
    });
    status.storage_namespace = plan.release.storage_namespace.as_str().to_owned();
    // Helm writes a release record for each install or upgrade, failed or not.
    status.last_release_revision += 1;
    status
}

/// The status a simulated agent reports for `plan`: released and ready at its version, in
/// the real agent's words (Helm's release number in the message, so that each upgrade is a
/// new `Ready` transition, as it is for a real agent).
pub fn simulated_status(
    plan: &ReleasePlan,
    previous: Option<&HelmReleaseStatus>,
) -> HelmReleaseStatus {
    let now = flotilla_agent::reconcile::now();
    let mut status = attempted(plan, previous);
    let (verb, why) = if previous.is_some() {
        ("upgrade", reason::UPGRADE_SUCCEEDED)
    } else {
        ("install", reason::INSTALL_SUCCEEDED)
    };
    let message = format!(
        "Helm {verb} succeeded for release {}.v{} with chart {}@{} (simulated)",
        plan.release.qualified(),
        status.last_release_revision,
        plan.chart.name,
        plan.chart.version
    );
    status.conditions.delete_condition(condition::STALLED);
    for type_ in [condition::RELEASED, condition::READY] {
        status.conditions.set_condition(
            type_,
            ConditionStatus::True,
            why,
            message.clone(),
            plan.generation,
            &now,
        );
    }
    status
}

/// The status a simulated agent told to fail reports for `plan`: what the real agent
/// reports for a failed install or upgrade with the default remediation (no retries):
/// `Released=False` and `Ready=False` `UpgradeFailed` (`InstallFailed`), the failure
/// counted, and `Stalled=True` `RetriesExceeded` (`core::release`'s terminal stall).
pub fn simulated_failure(
    plan: &ReleasePlan,
    previous: Option<&HelmReleaseStatus>,
) -> HelmReleaseStatus {
    let now = flotilla_agent::reconcile::now();
    let mut status = attempted(plan, previous);
    let (verb, why, failures) = if previous.is_some() {
        status.upgrade_failures += 1;
        ("upgrade", reason::UPGRADE_FAILED, status.upgrade_failures)
    } else {
        status.install_failures += 1;
        ("install", reason::INSTALL_FAILED, status.install_failures)
    };
    status.failures += 1;
    let message = format!(
        "Helm {verb} failed for release {} with chart {}@{}: simulated failure",
        plan.release.qualified(),
        plan.chart.name,
        plan.chart.version
    );
    for type_ in [condition::RELEASED, condition::READY] {
        status.conditions.set_condition(
            type_,
            ConditionStatus::False,
            why,
            message.clone(),
            plan.generation,
            &now,
        );
    }
    status.conditions.set_condition(
        condition::STALLED,
        ConditionStatus::True,
        reason::RETRIES_EXCEEDED,
        format!("Failed to {verb} after {failures} attempt(s)"),
        plan.generation,
        &now,
    );
    status
}

/// Whether `plan` asks an agent told to fail to fail it (its values have
/// [`FAIL_VALUE_KEY`]` = true`).
pub fn plan_asks_to_fail(plan: &ReleasePlan) -> bool {
    plan.values.get(FAIL_VALUE_KEY) == Some(&serde_json::Value::Bool(true))
}

/// The simulated runtime: holds each newer plan and reports it ready at once; when
/// `faulty`, a plan that [asks to fail](plan_asks_to_fail) is reported failed instead.
pub async fn simulate_runtime(mut agent: ExternalAgent, faulty: bool, stop: CancellationToken) {
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
                let fail = faulty && plan_asks_to_fail(&plan);
                let previous = previous.map(|p| &p.status);
                let (status, step) = if fail {
                    (simulated_failure(&plan, previous), Step::Stalled)
                } else {
                    (simulated_status(&plan, previous), Step::Done)
                };
                seq += 1;
                let report = StatusReport {
                    object: plan.object.clone(),
                    plan_revision: plan.revision,
                    seq,
                    status,
                    step,
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
            // The simulated agent lists no features: the hub answers previews itself.
            Command::Preview(_) => {}
            Command::Shutdown => return,
        }
    }
}

/// Creates HelmRepository `namespace/name` of `url` (interval 1h: the benchmarks ask for
/// its reconciles).
pub async fn create_repository(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    url: &str,
) -> anyhow::Result<()> {
    let repositories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &helm_repository_resource());
    let repository: DynamicObject = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "HelmRepository",
        "metadata": { "name": name, "namespace": namespace },
        "spec": { "url": url, "interval": "1h" }
    }))?;
    repositories
        .create(&kube::api::PostParams::default(), &repository)
        .await
        .with_context(|| format!("creating the HelmRepository {namespace}/{name}"))?;
    Ok(())
}

/// How to reach the hub: its address, a bootstrap token, its CA pin.
#[derive(Debug, Clone)]
pub struct Join {
    pub hub: HubAddress,
    pub token: String,
    pub ca_pin: CaPin,
}

impl Join {
    /// A token for `n` agents from the real `flotilla token create --auto-accept`.
    pub fn create(fleet: &Fleet, n: usize) -> anyhow::Result<Join> {
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
        Ok(Join {
            hub: HubAddress::parse(&fleet.hub_url()).context("the hub's URL")?,
            token,
            ca_pin: CaPin::parse(&pin).context("the CA pin `flotilla token create` printed")?,
        })
    }
}

/// One simulated agent.
#[derive(Debug, Clone)]
pub struct SimAgent {
    /// Its index: its ManagedCluster is [`cluster_name`]`(i)`.
    pub i: usize,
    /// Whether it fails the plans that [ask to fail](plan_asks_to_fail).
    pub faulty: bool,
}

/// Simulated agent `agent`: joins, then runs the real session client over the simulated
/// runtime until `stop`.
pub async fn simulated_agent(
    agent: SimAgent,
    join: Join,
    board: SharedAgents,
    stop: CancellationToken,
) {
    let i = agent.i;
    let cluster = SimCluster::new(i);
    let options = JoinOptions {
        hub: join.hub,
        token: Some(join.token),
        ca_pin: join.ca_pin,
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
    let runtime = tokio::spawn(simulate_runtime(external, agent.faulty, stop.clone()));
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

/// Starts `agents`, all at once.
pub fn start_agents(
    agents: impl IntoIterator<Item = SimAgent>,
    join: &Join,
    board: &SharedAgents,
    stop: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<()>> {
    agents
        .into_iter()
        .map(|a| {
            tokio::spawn(simulated_agent(
                a,
                join.clone(),
                board.clone(),
                stop.clone(),
            ))
        })
        .collect()
}

/// Watches the objects of `api` and calls `seen` with each one applied and the moment it
/// was seen, until the task is aborted. Watch errors are printed under `bench` and the
/// watch goes on.
pub fn watch_objects(
    api: Api<DynamicObject>,
    config: watcher::Config,
    bench: &'static str,
    what: &'static str,
    mut seen: impl FnMut(&DynamicObject, Instant) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut events = watcher::watcher(api, config).boxed();
        while let Some(event) = events.next().await {
            let object = match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                Ok(_) => continue,
                Err(e) => {
                    eprintln!("{bench}: watch of the {what}: {e}");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            seen(&object, Instant::now());
        }
    })
}

/// When each ManagedCluster was last seen `Connected` (not before the first time).
pub type Connected = Arc<Mutex<HashMap<String, Instant>>>;

/// Watches the ManagedClusters into `connected` until aborted.
pub fn watch_connected(
    client: kube::Client,
    bench: &'static str,
    connected: Connected,
) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::all_with(client, &managed_cluster_resource());
    watch_objects(
        api,
        watcher::Config::default(),
        bench,
        "ManagedClusters",
        move |object, now| {
            let state = object
                .data
                .pointer("/status/connection/state")
                .and_then(serde_json::Value::as_str);
            let name = object.metadata.name.clone().unwrap_or_default();
            let mut connected = connected.lock().expect("the board is not poisoned");
            if state == Some("Connected") {
                connected.entry(name).or_insert(now);
            } else {
                connected.remove(&name);
            }
        },
    )
}

/// Figures of one phase.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    pub name: &'static str,
    /// From the phase's start to its end condition.
    pub took: Duration,
    /// Sorted per-agent (or per-release) times of the phase's own measure, from its start.
    pub each: Vec<Duration>,
    /// A second measure, sorted (agent side when `each` is the hub's, or the reverse).
    pub other: Vec<Duration>,
    pub hub_cpu: Duration,
    pub own_cpu: Duration,
    /// The hub's `VmHWM` at the end of the phase, KiB.
    pub hub_peak_kib: u64,
    pub plane: PlaneDelta,
    pub load_at_end: String,
}

/// The nearest-rank quantile `q` of sorted durations (zero when there are none).
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// The durations, sorted.
pub fn sorted(times: impl Iterator<Item = Duration>) -> Vec<Duration> {
    let mut out: Vec<Duration> = times.collect();
    out.sort();
    out
}

/// Measures a phase: the hub's and this process's CPU and the control plane sampled at its
/// start ([`Meter::start`]) and end ([`Meter::finish`]).
pub struct Meter<'a> {
    pub hub_pid: u32,
    pub plane: &'a ControlPlane,
}

/// A phase's start, as [`Meter::start`] sampled it.
pub struct Started {
    pub at: Instant,
    hub_cpu: Duration,
    own_cpu: Duration,
    plane: PlaneSample,
}

impl Meter<'_> {
    pub async fn start(&self) -> anyhow::Result<Started> {
        Ok(Started {
            at: Instant::now(),
            hub_cpu: cpu_time(self.hub_pid)?,
            own_cpu: cpu_time(std::process::id())?,
            plane: self.plane.sample().await?,
        })
    }

    pub async fn finish(
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

/// Waits until `done` holds, checking every 100 ms, or fails with `what` and `progress`;
/// prints the progress under `bench` every 5 s.
pub async fn wait_until(
    bench: &str,
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
            eprintln!("{bench}:   ... {progress}");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until every one of `n` agents joined and its ManagedCluster is `Connected` on the
/// hub (the connect storm's end).
pub async fn wait_connected(
    bench: &str,
    n: usize,
    timeout: Duration,
    hub_pid: u32,
    agents: &SharedAgents,
    connected: &Connected,
) -> anyhow::Result<()> {
    wait_until(bench, "every agent connected", timeout, hub_pid, || {
        let agents = agents.lock().expect("not poisoned");
        let connected = connected.lock().expect("not poisoned").len();
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
    .await
}

/// Seconds with one decimal.
pub fn secs(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// A goal's verdict.
pub fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// The hub's peak RSS over phases, formatted.
pub fn peak_of(phases: &[Phase]) -> (u64, String) {
    let peak = phases
        .iter()
        .map(|p| p.hub_peak_kib)
        .max()
        .unwrap_or_default();
    (peak, mib(peak))
}

/// The hub a simulated-agent bench runs on: its binaries and flags.
pub struct BenchHub<'a> {
    /// The bench's name in progress lines (`bench-sessions`).
    pub bench: &'a str,
    /// Names the fleet's directories.
    pub fleet_name: &'a str,
    /// Prebuilt binaries; `None`: a dev build of this checkout.
    pub bin_dir: Option<&'a Path>,
    /// The hub's `RUST_LOG`.
    pub log_level: &'a str,
    /// The hub's `--concurrency`.
    pub concurrency: u16,
    /// More flags of the hub.
    pub extra_args: &'a [String],
}

/// Starts a fleet of one hub and no workload cluster (the agents are simulated), runs
/// `measure` on it with the bench's `args`, and returns its result with a description of the hub binary; an error
/// names the hub's log.
pub fn run_on_hub<A: Sync + ?Sized, T>(
    hub: &BenchHub<'_>,
    args: &A,
    measure: impl for<'f> FnOnce(&'f Fleet, &'f A) -> futures::future::BoxFuture<'f, anyhow::Result<T>>,
) -> anyhow::Result<(T, String)> {
    let binaries = match hub.bin_dir {
        Some(dir) => flotilla_tests::bins::in_dir(dir)?,
        None => {
            eprintln!(
                "{}: building flotilla-hub and flotilla (dev profile)",
                hub.bench
            );
            flotilla_tests::bins::build(flotilla_tests::bins::Progress::Show)?
        }
    };
    let described = format!("hub {}", binaries.hub.display());
    let runtime = tokio::runtime::Runtime::new()?;
    let result = runtime.block_on(async {
        let mut options = flotilla_tests::fleet::FleetOptions::named(hub.fleet_name);
        options.workloads = Vec::new();
        options.verbose = true;
        options.log_level = hub.log_level.to_owned();
        options.hub_args = vec!["--concurrency".into(), hub.concurrency.to_string()];
        options.hub_args.extend(hub.extra_args.iter().cloned());
        let fleet = Fleet::start(binaries, options).await?;
        let result = measure(&fleet, args).await;
        result.map_err(|e| {
            e.context(format!(
                "the hub's log: {} (kept with FLOTILLA_KEEP_LOGS=1)",
                fleet.hub_log().display()
            ))
        })
    })?;
    Ok((result, described))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(version: &str, values: serde_json::Value) -> ReleasePlan {
        let hr = flotilla_core::spec::HelmRelease::from_value(serde_json::json!({
            "apiVersion": "helm.toolkit.fluxcd.io/v2",
            "kind": "HelmRelease",
            "metadata": { "name": "sim-0001", "namespace": "bench", "generation": 3 },
            "spec": { "interval": "1h", "chart": { "spec": { "chart": "hello",
                "sourceRef": { "kind": "HelmRepository", "name": "bench" } } } }
        }))
        .unwrap();
        let artifact = flotilla_core::plan::ChartArtifact {
            name: "hello".into(),
            version: version.into(),
            app_version: None,
            digest: flotilla_core::ids::ChartDigest::new(format!("sha256:{}", "a".repeat(64)))
                .unwrap(),
            oci_digest: None,
        };
        ReleasePlan::from_helm_release(
            &hr,
            flotilla_core::ids::PlanRevision::new(1),
            artifact,
            values,
        )
        .unwrap()
    }

    #[test]
    fn the_simulated_status_is_ready_at_the_plans_chart_version_and_upgrades_after_installing() {
        let installed = simulated_status(&plan("0.1.0", serde_json::Value::Null), None);
        assert!(installed.conditions.is_true(condition::READY));
        assert_eq!(installed.observed_generation, 3);
        assert_eq!(installed.last_attempted_revision, "0.1.0");
        assert_eq!(
            installed.last_attempted_release_action,
            Some(ReleaseAction::Install)
        );
        let upgraded = simulated_status(&plan("0.2.0", serde_json::Value::Null), Some(&installed));
        assert_eq!(upgraded.last_attempted_revision, "0.2.0");
        assert_eq!(
            upgraded.last_attempted_release_action,
            Some(ReleaseAction::Upgrade)
        );
    }

    #[test]
    fn each_simulated_upgrade_is_a_new_ready_message_as_helms_release_number_grows() {
        let p = plan("0.1.0", serde_json::Value::Null);
        let v1 = simulated_status(&p, None);
        let v2 = simulated_status(&p, Some(&v1));
        let message = |s: &HelmReleaseStatus| s.conditions.message_of(condition::READY).to_owned();
        assert!(message(&v1).contains(".v1 "), "{}", message(&v1));
        assert!(message(&v2).contains(".v2 "), "{}", message(&v2));
        assert_ne!(message(&v1), message(&v2));
    }

    #[test]
    fn a_simulated_failed_upgrade_reads_as_the_real_agents_terminal_stall() {
        let ok = simulated_status(&plan("0.1.0", serde_json::Value::Null), None);
        let failing = plan("0.1.0", serde_json::json!({ FAIL_VALUE_KEY: true }));
        assert!(plan_asks_to_fail(&failing));
        assert!(!plan_asks_to_fail(&plan(
            "0.1.0",
            serde_json::json!({ FAIL_VALUE_KEY: "yes" })
        )));
        let failed = simulated_failure(&failing, Some(&ok));
        let ready = failed.conditions.get_condition(condition::READY).unwrap();
        assert_eq!(ready.status, ConditionStatus::False);
        assert_eq!(ready.reason, reason::UPGRADE_FAILED);
        assert!(
            ready
                .message
                .starts_with("Helm upgrade failed for release ")
        );
        let stalled = failed.conditions.get_condition(condition::STALLED).unwrap();
        assert_eq!(stalled.status, ConditionStatus::True);
        assert_eq!(stalled.reason, reason::RETRIES_EXCEEDED);
        assert_eq!(stalled.message, "Failed to upgrade after 1 attempt(s)");
        assert_eq!(stalled.observed_generation, 3);
        assert_eq!(failed.upgrade_failures, 1);
        // A later success clears the stall.
        let again = simulated_status(&plan("0.1.0", serde_json::Value::Null), Some(&failed));
        assert!(again.conditions.get_condition(condition::STALLED).is_none());
        assert!(again.conditions.is_true(condition::READY));
    }

    #[test]
    fn each_agent_has_its_own_cluster() {
        assert_eq!(cluster_name(7), "sim-0007");
        assert_ne!(SimCluster::new(7).uid, SimCluster::new(8).uid);
    }

    #[test]
    fn quantiles_of_sorted_durations_pick_the_nearest_rank() {
        let d: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(quantile(&d, 0.5), Duration::from_millis(51));
        assert_eq!(quantile(&d, 0.99), Duration::from_millis(99));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
    }
}
