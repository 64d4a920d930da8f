//! `cargo xtask bench-rollout`: one HelmReleaseSet rolled out in waves to N simulated
//! clusters on one real hub (issue 31, the benchmark of "done when").
//!
//! The hub and its management cluster are those of `bench-sessions` ([`Fleet::start`], no
//! workload cluster, the example chart in the real nginx Helm repository); the N agents are
//! its simulated agents ([`crate::bench_sim`]: the real session client and mutual TLS, no
//! Kubernetes and no Helm behind it; each plan reported `Ready=True` at once, or, on the
//! agents told to fail, reported as a failed upgrade the way the real agent reports one).
//!
//! After the connect storm, the ManagedClusters are labelled for the waves (after their
//! join: the hub creates them; [`RING_LABEL`]): `sim-0000` is the canary, the next 10% are
//! `early`, the others `rest`. The set `bench/fleet` selects every cluster with the label and
//! rolls out Progressive, `onFailure: Pause`, waves `canary` (maxConcurrency 1), `early` and
//! `rest` (`--max-concurrency`, default 100%), each `maxFailures: 0`, gate `Auto` with
//! `minSoakTime` (`--min-soak-time`), so the sum of the gates is three soak times.
//!
//! Phases (the hub's CPU, its peak RSS and the management API server's requests measured
//! per phase, `apiserver_request_total` by verb and resource before and after):
//! 1. **Revision 1**: the set created; done when the set is `Ready` at its revision
//!    (`status.currentRevision` = `updateRevision`, `Ready=True` for its generation, seen by
//!    a watch: what `kubectl wait --for=condition=ready` waits for).
//! 2. **Revision 2**: a change of `valuesTemplate`; done the same way. Its API writes, per
//!    resource, divided by N are the "writes per cluster per revision".
//! 3. **Revision 3, failing**: a change whose values make the agents told to fail (5%,
//!    [`fails`]) report a failed upgrade (`Ready=False UpgradeFailed`, `Stalled=True
//!    RetriesExceeded`). Done when the set says `RolloutPaused=True`; then, after a wait of a
//!    soak time and more, the children are listed: none of a wave after the one that broke
//!    may carry revision 3.
//!
//! Per wave (from the watches of the children and the set): when its first child carried
//! the revision, its last, when its last child was Ready on the hub, and when the wave was
//! through (the next wave's first promotion; for the last wave the set's `Ready`). A wave's
//! span less its soak is the time the rollout took for it beyond its gate: promotion, the
//! children's way to the agents and back (the HelmRelease controller, the sessions, the
//! status writer), and the lag between the end of the soak and the next wave's start.
//!
//! 4. **The API server's ceiling** ([`crate::bench_ceiling`]): with the agents gone and the
//!    hub stopped, the management API server alone takes the writes a wave of a values
//!    change costs (per cluster a child's spec write and its status write, with the hub's
//!    concurrency) for each wave's size. A wave's span less its soak less this ceiling is
//!    the engine's own overhead (goal ≤ 1 s per wave, judged on revision 2).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_core::duration::GoDuration;
use flotilla_core::set::{CLUSTER_LABEL, REVISION_LABEL, SET_LABEL};
use flotilla_tests::fleet::Fleet;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use tokio_util::sync::CancellationToken;

use crate::bench_common::{self, ControlPlane, PlaneDelta, load_average, mib, proc_status_kib};
use crate::bench_sim::{
    self, Connected, FAIL_VALUE_KEY, Join, Meter, Phase, SharedAgents, SimAgent, cluster_name,
    helm_release_resource, helm_release_set_resource, managed_cluster_resource, secs, start_agents,
    verdict, wait_connected, wait_until,
};

/// Options of `cargo xtask bench-rollout`.
#[derive(Debug, clap::Args)]
pub struct BenchRollout {
    /// How many simulated clusters (one agent, one ManagedCluster, one child each).
    #[arg(long, default_value_t = 1000)]
    clusters: usize,
    /// Every wave's `minSoakTime` (Go duration).
    #[arg(long, default_value = "5s")]
    min_soak_time: GoDuration,
    /// `maxConcurrency` of the waves `early` and `rest` (a count or a percentage).
    #[arg(long, default_value = "100%")]
    max_concurrency: String,
    /// The set's `rollout.maxNewPerReconcile` (default: unset, the hub's default of 50).
    #[arg(long)]
    max_new_per_reconcile: Option<u32>,
    /// Percent of the clusters whose agent fails revision 3 (0 to 100).
    #[arg(long, default_value_t = 5)]
    fail_percent: u32,
    /// The hub's `--concurrency` (HelmRelease reconciles at the same time; the set
    /// controller runs half as many sets at once).
    #[arg(long, default_value_t = 16)]
    hub_concurrency: u16,
    /// Extra flags for the hub (repeatable).
    #[arg(long = "hub-arg", allow_hyphen_values = true)]
    hub_args: Vec<String>,
    /// `RUST_LOG` of the hub.
    #[arg(long, default_value = "info")]
    hub_log: String,
    /// How long each phase may take, in seconds.
    #[arg(long, default_value_t = 600)]
    timeout_secs: u64,
    /// A directory holding `flotilla-hub`, `flotilla-agent` and `flotilla` (for example a
    /// release build); default: built by cargo, dev profile.
    #[arg(long)]
    bin_dir: Option<PathBuf>,
}

/// This benchmark's name in its messages.
const BENCH: &str = "bench-rollout";
/// The namespace of the set, its children and the HelmRepository on the hub.
const NAMESPACE: &str = "bench";
/// The HelmRepository of the set's chart.
const REPOSITORY: &str = "bench";
/// The set.
const SET: &str = "fleet";
/// The ManagedCluster label the waves select on.
pub const RING_LABEL: &str = "bench.flotilla.dev/ring";
/// The waves, in order, and the value of [`RING_LABEL`] each selects.
const WAVES: [&str; 3] = ["canary", "early", "rest"];

/// The wave of cluster `i` of `n`: the first is the canary, the next 10% (at least one)
/// `early`, the others `rest`.
fn wave_of(i: usize, n: usize) -> usize {
    let early = (n / 10).max(1);
    match i {
        0 => 0,
        i if i <= early => 1,
        _ => 2,
    }
}

/// Whether the agent of cluster `i` fails revision 3: one cluster in every `100 /
/// percent`, in the middle of each stretch, never the canary (so a breach at 5% falls in
/// the second wave, as a fault the canary did not catch).
fn fails(i: usize, percent: u32) -> bool {
    if percent == 0 || i == 0 {
        return false;
    }
    let stride = (100 / percent.min(100)) as usize;
    i % stride == stride / 2
}

/// `maxConcurrency` as the API takes it: a number or a percentage string.
fn int_or_percent(v: &str) -> serde_json::Value {
    v.parse::<u32>()
        .map_or_else(|_| serde_json::Value::String(v.to_owned()), Into::into)
}

/// The set's `valuesTemplate` at `revision`; with `fail`, the values ask the agents told
/// to fail to fail it.
fn values_template(revision: u32, fail: bool) -> String {
    let mut t = format!("message: \"revision {revision} on {{{{ .ClusterName }}}}\"\n");
    if fail {
        t.push_str(&format!("{FAIL_VALUE_KEY}: true\n"));
    }
    t
}

/// The HelmReleaseSet of the benchmark with `values_template`.
fn set_object(args: &BenchRollout, values_template: &str) -> serde_json::Value {
    let soak = args.min_soak_time.to_string();
    let wave = |name: &str, concurrency: serde_json::Value, select: bool| {
        let mut w = serde_json::json!({
            "name": name,
            "maxConcurrency": concurrency,
            "maxFailures": 0,
            "progressDeadline": "10m",
            "minSoakTime": soak,
            "gate": "Auto",
        });
        if select {
            w["clusterSelector"] = serde_json::json!({ "matchLabels": { RING_LABEL: name } });
        }
        w
    };
    let concurrency = int_or_percent(&args.max_concurrency);
    let mut rollout = serde_json::json!({
        "strategy": "Progressive",
        "onFailure": "Pause",
        "waves": [
            wave(WAVES[0], 1.into(), true),
            wave(WAVES[1], concurrency.clone(), true),
            // The rest: every cluster no earlier wave took.
            wave(WAVES[2], concurrency, false),
        ],
    });
    if let Some(m) = args.max_new_per_reconcile {
        rollout["maxNewPerReconcile"] = m.into();
    }
    serde_json::json!({
        "apiVersion": "helm.flotilla.dev/v1alpha1",
        "kind": "HelmReleaseSet",
        "metadata": { "name": SET, "namespace": NAMESPACE },
        "spec": {
            "clusterSelector": { "matchExpressions": [{ "key": RING_LABEL, "operator": "Exists" }] },
            "template": { "spec": {
                "interval": "1h",
                "releaseName": "hello",
                "targetNamespace": "default",
                "chart": { "spec": {
                    "chart": "hello",
                    "version": "*",
                    "sourceRef": { "kind": "HelmRepository", "name": REPOSITORY },
                    "interval": "1h",
                } },
            } },
            "valuesTemplate": values_template,
            "rollout": rollout,
        }
    })
}

/// The revision the hub computes for `set` (`status.updateRevision`).
fn revision_of(set: &serde_json::Value) -> anyhow::Result<String> {
    let set: flotilla_api::HelmReleaseSet =
        serde_json::from_value(set.clone()).context("the benchmark's HelmReleaseSet")?;
    set.validate()?;
    Ok(set.spec.revision().to_string())
}

/// What the watches of the children and the set have seen.
#[derive(Debug, Default)]
struct Board {
    /// `(cluster, revision)`: when its child was first seen carrying the revision.
    promoted: HashMap<(String, String), Instant>,
    /// `(cluster, revision)`: when its child was first seen Ready for its generation at it.
    ready: HashMap<(String, String), Instant>,
    /// `(cluster, revision)`: when its child was first seen Stalled at it.
    stalled: HashMap<(String, String), Instant>,
    /// Revision: when the set was first seen Ready with it rolled out.
    set_ready: HashMap<String, Instant>,
    /// Revision: when the set was first seen `RolloutPaused=True` at it, and the reason.
    set_paused: HashMap<String, (Instant, String)>,
    /// Revision: when the set was first seen `RolloutDegraded=True` at it.
    set_degraded: HashMap<String, Instant>,
    /// The set's `.status` as last seen.
    status: serde_json::Value,
}

type SharedBoard = Arc<Mutex<Board>>;

fn str_at<'a>(v: &'a serde_json::Value, pointer: &str) -> &'a str {
    v.pointer(pointer)
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default()
}

/// The condition `type_` of an object's status if it is True for the object's generation.
fn true_condition<'a>(object: &'a DynamicObject, type_: &str) -> Option<&'a serde_json::Value> {
    let generation = object.metadata.generation.unwrap_or_default();
    object
        .data
        .pointer("/status/conditions")
        .and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| {
            c["type"] == type_
                && c["status"] == "True"
                && c["observedGeneration"].as_i64() == Some(generation)
        })
}

fn watch_children(client: kube::Client, board: SharedBoard) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client, NAMESPACE, &helm_release_resource());
    let config = watcher::Config::default().labels(&format!("{SET_LABEL}={SET}"));
    bench_sim::watch_objects(api, config, BENCH, "children", move |object, now| {
        let labels = object.metadata.labels.clone().unwrap_or_default();
        let (Some(cluster), Some(revision)) =
            (labels.get(CLUSTER_LABEL), labels.get(REVISION_LABEL))
        else {
            return;
        };
        let key = (cluster.clone(), revision.clone());
        let mut board = board.lock().expect("the board is not poisoned");
        board.promoted.entry(key.clone()).or_insert(now);
        if crate::bench_flux::is_ready(object) {
            board.ready.entry(key.clone()).or_insert(now);
        }
        if crate::bench_flux::is_stalled(object) {
            board.stalled.entry(key).or_insert(now);
        }
    })
}

fn watch_set(client: kube::Client, board: SharedBoard) -> tokio::task::JoinHandle<()> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client, NAMESPACE, &helm_release_set_resource());
    let config = watcher::Config::default().fields(&format!("metadata.name={SET}"));
    bench_sim::watch_objects(api, config, BENCH, "HelmReleaseSet", move |object, now| {
        let status = object.data.get("status").cloned().unwrap_or_default();
        let update = str_at(&status, "/updateRevision").to_owned();
        let mut board = board.lock().expect("the board is not poisoned");
        if !update.is_empty() {
            if true_condition(object, "Ready").is_some()
                && str_at(&status, "/currentRevision") == update
            {
                board.set_ready.entry(update.clone()).or_insert(now);
            }
            if let Some(c) = true_condition(object, "RolloutPaused") {
                let reason = c["reason"].as_str().unwrap_or_default().to_owned();
                board
                    .set_paused
                    .entry(update.clone())
                    .or_insert((now, reason));
            }
            if true_condition(object, "RolloutDegraded").is_some() {
                board.set_degraded.entry(update).or_insert(now);
            }
        }
        board.status = status;
    })
}

/// One wave of one revision's rollout, in times from the revision's start.
#[derive(Debug, Clone, Default, PartialEq)]
struct WaveSpan {
    name: &'static str,
    clusters: usize,
    /// Its first child at the revision.
    first_promoted: Option<Duration>,
    /// Its last child at the revision.
    last_promoted: Option<Duration>,
    /// Its last child Ready at the revision on the hub.
    last_ready: Option<Duration>,
    /// Through: the next wave's first promotion, or (the last wave) the set Ready.
    through: Option<Duration>,
    /// From the previous wave's through (or the start) to this one's.
    span: Option<Duration>,
    /// The span less the soak: the engine's overhead for the wave.
    overhead: Option<Duration>,
    /// From the end of the soak (last Ready + soak) to through.
    gate_lag: Option<Duration>,
}

/// The waves of one revision's rollout: `members[w]` are wave w's clusters, `promoted`
/// and `ready` the times seen per cluster at the revision, `end` the set's Ready (if it came).
fn wave_spans(
    t0: Instant,
    members: &[Vec<String>],
    promoted: &HashMap<String, Instant>,
    ready: &HashMap<String, Instant>,
    end: Option<Instant>,
    soak: Duration,
) -> Vec<WaveSpan> {
    let since = |t: Instant| t.saturating_duration_since(t0);
    let mut out: Vec<WaveSpan> = members
        .iter()
        .enumerate()
        .map(|(w, names)| {
            let p: Vec<Instant> = names
                .iter()
                .filter_map(|n| promoted.get(n))
                .copied()
                .collect();
            let r: Vec<Instant> = names.iter().filter_map(|n| ready.get(n)).copied().collect();
            WaveSpan {
                name: WAVES.get(w).copied().unwrap_or("?"),
                clusters: names.len(),
                first_promoted: p.iter().min().map(|t| since(*t)),
                last_promoted: (p.len() == names.len())
                    .then(|| p.iter().max().map(|t| since(*t)))
                    .flatten(),
                last_ready: (r.len() == names.len())
                    .then(|| r.iter().max().map(|t| since(*t)))
                    .flatten(),
                ..WaveSpan::default()
            }
        })
        .collect();
    // Through: the next non-empty wave's first promotion; the last one's, the set's Ready.
    let mut previous = Some(Duration::ZERO);
    for w in 0..out.len() {
        if out[w].clusters == 0 {
            continue;
        }
        let next = out[w + 1..].iter().find(|s| s.clusters > 0);
        let through = match next {
            Some(s) => s.first_promoted,
            None => end.map(since),
        };
        let s = &mut out[w];
        s.through = through;
        s.span = through.zip(previous).map(|(t, p)| t.saturating_sub(p));
        s.overhead = s.span.map(|d| d.saturating_sub(soak));
        s.gate_lag = through
            .zip(s.last_ready)
            .map(|(t, r)| t.saturating_sub(r + soak));
        previous = through;
    }
    out
}

/// Write requests (POST, PUT, PATCH, APPLY, DELETE) by resource, leader-election Leases
/// left out (the control plane's own and not the rollout's), most first.
fn writes_by_resource(plane: &PlaneDelta) -> Vec<(String, f64)> {
    let mut w: Vec<(String, f64)> = plane
        .by_resource
        .iter()
        .filter(|(k, _)| {
            ["POST ", "PUT ", "PATCH ", "APPLY ", "DELETE "]
                .iter()
                .any(|v| k.starts_with(v))
                && !k.ends_with(" leases")
        })
        .map(|(k, n)| (k.clone(), *n))
        .collect();
    w.sort_by(|a, b| b.1.total_cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    w
}

/// The sessions' ManagedCluster heartbeat writes (each cluster's every 5 minutes, and when
/// the plans it holds change in number): periodic, not made by a revision.
const HEARTBEATS: &str = "PATCH managedclusters/status";

/// [`writes_by_resource`] summed, and summed without [`HEARTBEATS`].
fn write_totals(plane: &PlaneDelta) -> (f64, f64) {
    let w = writes_by_resource(plane);
    let all: f64 = w.iter().map(|(_, n)| n).sum();
    let beats: f64 = w
        .iter()
        .filter(|(k, _)| k == HEARTBEATS)
        .map(|(_, n)| n)
        .sum();
    (all, all - beats)
}

/// One revision's rollout.
#[derive(Debug, Clone, Default)]
struct RevisionRun {
    label: &'static str,
    revision: String,
    /// From the set's write to its end condition.
    took: Duration,
    waves: Vec<WaveSpan>,
    phase: Phase,
    /// The set's `.status`, serialized, at the end.
    status_bytes: usize,
}

/// How the failing revision ended.
#[derive(Debug, Clone, Default)]
struct Breach {
    /// The wave the set reports Failed, and its `currentWave`.
    failed_wave: String,
    current_wave: String,
    paused_reason: String,
    /// From the set's write to `RolloutDegraded=True` and to `RolloutPaused=True`.
    to_degraded: Option<Duration>,
    to_paused: Option<Duration>,
    /// From the first failed child seen on the hub to `RolloutPaused=True`.
    first_failure_to_paused: Option<Duration>,
    /// Children at the failing revision per wave, listed after the pause settled.
    at_revision: Vec<(&'static str, usize, usize)>,
    failing_clusters: usize,
    /// The set's status message (Ready).
    message: String,
}

/// Everything the run measured.
#[derive(Debug, Clone, Default)]
struct Figures {
    clusters: usize,
    soak: Duration,
    max_new_per_reconcile: String,
    max_concurrency: String,
    connect: Phase,
    runs: Vec<RevisionRun>,
    breach: Breach,
    hub_peak_kib: u64,
    own_peak_kib: u64,
    /// The API server's ceiling for each wave's writes, in wave order.
    ceilings: Vec<crate::bench_ceiling::Ceiling>,
    load_at_start: String,
    load_at_end: String,
    binaries: String,
}

/// The clusters of each wave.
fn wave_members(n: usize) -> Vec<Vec<String>> {
    let mut members = vec![Vec::new(); WAVES.len()];
    for i in 0..n {
        members[wave_of(i, n)].push(cluster_name(i));
    }
    members
}

/// The board's times at `revision`, by cluster.
fn times_at(of: &HashMap<(String, String), Instant>, revision: &str) -> HashMap<String, Instant> {
    of.iter()
        .filter(|((_, r), _)| r == revision)
        .map(|((c, _), t)| (c.clone(), *t))
        .collect()
}

async fn measure(fleet: &Fleet, args: &BenchRollout) -> anyhow::Result<Figures> {
    let n = args.clusters;
    let timeout = Duration::from_secs(args.timeout_secs);
    let soak = args.min_soak_time.get();
    let hub_pid = fleet.hub_pid().context("the hub runs")?;
    let client = fleet.mgmt.client().await?;
    bench_common::ensure_namespace(&client, NAMESPACE).await?;
    bench_sim::create_repository(&client, NAMESPACE, REPOSITORY, &fleet.repo.url()).await?;
    let join = Join::create(fleet, n)?;
    let plane = ControlPlane {
        pids: fleet.mgmt.pids(),
        client: client.clone(),
    };
    let meter = Meter {
        hub_pid,
        plane: &plane,
    };
    let board = SharedBoard::default();
    let connected = Connected::default();
    let agent_board = SharedAgents::default();
    let watches = [
        bench_sim::watch_connected(client.clone(), BENCH, connected.clone()),
        watch_children(client.clone(), board.clone()),
        watch_set(client.clone(), board.clone()),
    ];
    let stop = CancellationToken::new();
    let load_at_start = load_average();
    let members = wave_members(n);
    let failing = (0..n).filter(|&i| fails(i, args.fail_percent)).count();

    // The connect storm, then the labels of the waves.
    eprintln!("{BENCH}: {n} agents join and connect ({failing} of them fail revision 3)");
    let started = meter.start().await?;
    let agents = start_agents(
        (0..n).map(|i| SimAgent {
            i,
            faulty: fails(i, args.fail_percent),
        }),
        &join,
        &agent_board,
        &stop,
    );
    wait_connected(BENCH, n, timeout, hub_pid, &agent_board, &connected).await?;
    let connect = meter
        .finish(&started, "connect storm", started.at.elapsed())
        .await?;
    let clusters: Api<DynamicObject> = Api::all_with(client.clone(), &managed_cluster_resource());
    let indices: Vec<usize> = (0..n).collect();
    for chunk in indices.chunks(32) {
        let patches = chunk.iter().map(|&i| {
            let clusters = clusters.clone();
            async move {
                let patch = serde_json::json!({
                    "metadata": { "labels": { RING_LABEL: WAVES[wave_of(i, n)] } }
                });
                clusters
                    .patch(
                        &cluster_name(i),
                        &PatchParams::default(),
                        &Patch::Merge(patch),
                    )
                    .await
                    .with_context(|| format!("labelling ManagedCluster {}", cluster_name(i)))?;
                anyhow::Ok(())
            }
        });
        futures::future::try_join_all(patches).await?;
    }

    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_set_resource());
    let mut runs = Vec::new();
    for (k, label) in [
        (1u32, "revision 1 (set created)"),
        (2, "revision 2 (values change)"),
    ] {
        eprintln!("{BENCH}: {label} to {n} clusters");
        let started = meter.start().await?;
        let t0 = started.at;
        let written = if k == 1 {
            let set: DynamicObject =
                serde_json::from_value(set_object(args, &values_template(k, false)))?;
            sets.create(&PostParams::default(), &set)
                .await
                .context("creating the HelmReleaseSet")?
        } else {
            let patch =
                serde_json::json!({ "spec": { "valuesTemplate": values_template(k, false) } });
            sets.patch(SET, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .context("changing the set's valuesTemplate")?
        };
        // The revision of the set as the API server keeps it (its schema's defaults in).
        let revision = revision_of(&serde_json::to_value(&written)?)?;
        eprintln!("{BENCH}:   revision {revision}");
        wait_until(
            BENCH,
            "the set Ready at the revision",
            timeout,
            hub_pid,
            || {
                let b = board.lock().expect("not poisoned");
                let ready = b.ready.keys().filter(|(_, r)| *r == revision).count();
                let promoted = b.promoted.keys().filter(|(_, r)| *r == revision).count();
                (
                    b.set_ready.contains_key(&revision),
                    format!(
                        "{promoted} children at the revision, {ready} Ready; the set: wave {}, {}",
                        str_at(&b.status, "/currentWave"),
                        b.status
                            .pointer("/conditions")
                            .and_then(serde_json::Value::as_array)
                            .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                            .map(|c| c["message"].as_str().unwrap_or_default().to_owned())
                            .unwrap_or_default()
                    ),
                )
            },
        )
        .await?;
        let took = t0.elapsed();
        let phase = meter.finish(&started, label, took).await?;
        let b = board.lock().expect("not poisoned");
        runs.push(RevisionRun {
            label,
            waves: wave_spans(
                t0,
                &members,
                &times_at(&b.promoted, &revision),
                &times_at(&b.ready, &revision),
                b.set_ready.get(&revision).copied(),
                soak,
            ),
            revision,
            took,
            phase,
            status_bytes: serde_json::to_vec(&b.status).map_or(0, |v| v.len()),
        });
    }

    // Revision 3: fails on `failing` clusters.
    let label = "revision 3 (fails on some clusters)";
    let started = meter.start().await?;
    let t0 = started.at;
    let patch = serde_json::json!({ "spec": { "valuesTemplate": values_template(3, true) } });
    let written = sets
        .patch(SET, &PatchParams::default(), &Patch::Merge(patch))
        .await
        .context("changing the set's valuesTemplate")?;
    let revision = revision_of(&serde_json::to_value(&written)?)?;
    eprintln!("{BENCH}: {label}: revision {revision}, {failing} agents fail it");
    let end =
        |b: &Board| b.set_paused.contains_key(&revision) || b.set_ready.contains_key(&revision);
    wait_until(
        BENCH,
        "the set paused by the breach",
        timeout,
        hub_pid,
        || {
            let b = board.lock().expect("not poisoned");
            let stalled = b.stalled.keys().filter(|(_, r)| *r == revision).count();
            let promoted = b.promoted.keys().filter(|(_, r)| *r == revision).count();
            (
                end(&b),
                format!("{promoted} children at the revision, {stalled} failed"),
            )
        },
    )
    .await?;
    let took = t0.elapsed();
    // Let it settle: what is in flight finishes; a wrongly opened wave would start after a
    // soak.
    tokio::time::sleep(soak + Duration::from_secs(5)).await;
    let phase = meter.finish(&started, label, took).await?;
    let children: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_release_resource());
    let listed = children
        .list(&ListParams::default().labels(&format!("{SET_LABEL}={SET}")))
        .await
        .context("listing the children")?;
    let wave_by_cluster: HashMap<String, usize> =
        (0..n).map(|i| (cluster_name(i), wave_of(i, n))).collect();
    let mut at_revision = vec![0usize; WAVES.len()];
    for child in &listed.items {
        let labels = child.metadata.labels.clone().unwrap_or_default();
        if labels.get(REVISION_LABEL) == Some(&revision)
            && let Some(w) = labels
                .get(CLUSTER_LABEL)
                .and_then(|c| wave_by_cluster.get(c))
        {
            at_revision[*w] += 1;
        }
    }
    let breach = {
        let b = board.lock().expect("not poisoned");
        let since = |t: Instant| t.saturating_duration_since(t0);
        let paused = b.set_paused.get(&revision).cloned();
        let first_failure = b
            .stalled
            .iter()
            .filter(|((_, r), _)| *r == revision)
            .map(|(_, t)| *t)
            .min();
        let waves = b
            .status
            .pointer("/waves")
            .and_then(serde_json::Value::as_array)
            .cloned()
            .unwrap_or_default();
        Breach {
            failed_wave: waves
                .iter()
                .filter(|w| w["state"] == "Failed")
                .map(|w| w["name"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>()
                .join(", "),
            current_wave: str_at(&b.status, "/currentWave").to_owned(),
            paused_reason: paused.as_ref().map(|p| p.1.clone()).unwrap_or_default(),
            to_degraded: b.set_degraded.get(&revision).map(|t| since(*t)),
            to_paused: paused.as_ref().map(|p| since(p.0)),
            first_failure_to_paused: paused
                .as_ref()
                .zip(first_failure)
                .map(|(p, f)| p.0.saturating_duration_since(f)),
            at_revision: WAVES
                .iter()
                .zip(&members)
                .zip(&at_revision)
                .map(|((w, m), a)| (*w, *a, m.len()))
                .collect(),
            failing_clusters: failing,
            message: b
                .status
                .pointer("/conditions")
                .and_then(serde_json::Value::as_array)
                .and_then(|c| c.iter().find(|c| c["type"] == "Ready"))
                .map(|c| c["message"].as_str().unwrap_or_default().to_owned())
                .unwrap_or_default(),
        }
    };
    {
        let b = board.lock().expect("not poisoned");
        runs.push(RevisionRun {
            label,
            waves: wave_spans(
                t0,
                &members,
                &times_at(&b.promoted, &revision),
                &times_at(&b.ready, &revision),
                None,
                soak,
            ),
            revision,
            took,
            phase,
            status_bytes: serde_json::to_vec(&b.status).map_or(0, |v| v.len()),
        });
    }

    let hub_peak_kib = proc_status_kib(hub_pid, "VmHWM:")?;
    let own_peak_kib = proc_status_kib(std::process::id(), "VmHWM:")?;
    stop.cancel();
    for agent in agents {
        let _ = tokio::time::timeout(Duration::from_secs(5), agent).await;
    }
    for watch in watches {
        watch.abort();
    }
    eprintln!("{BENCH}: the API server's ceiling for the waves' writes (the hub stopped)");
    let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
    let ceilings = crate::bench_ceiling::measure(&client, hub_pid, &listed.items, &sizes).await?;
    Ok(Figures {
        clusters: n,
        soak,
        max_new_per_reconcile: args.max_new_per_reconcile.map_or_else(
            || {
                format!(
                    "{} (default)",
                    flotilla_core::set::DEFAULT_MAX_NEW_PER_RECONCILE
                )
            },
            |m| m.to_string(),
        ),
        max_concurrency: args.max_concurrency.clone(),
        connect,
        runs,
        breach,
        hub_peak_kib,
        own_peak_kib,
        ceilings,
        load_at_start,
        load_at_end: load_average(),
        binaries: String::new(),
    })
}

fn opt(d: Option<Duration>) -> String {
    d.map_or_else(|| "—".to_owned(), secs)
}

fn report(f: &Figures) -> String {
    let n = f.clusters;
    let soak = secs(f.soak);
    let gates = f.soak * WAVES.len() as u32;
    let mut out = format!(
        "\n{BENCH}: {n} simulated clusters (real session client and mTLS, one process), one hub ({}), one HelmReleaseSet\n",
        f.binaries
    );
    out.push_str(&format!(
        "waves canary 1 / early {} / rest {}, gates Auto, minSoakTime {soak} each (sum of the gates {}), maxConcurrency 1 / {} / {}, maxNewPerReconcile {}\n",
        wave_members(n)[1].len(),
        wave_members(n)[2].len(),
        secs(gates),
        f.max_concurrency,
        f.max_concurrency,
        f.max_new_per_reconcile,
    ));
    out.push_str(&format!(
        "load average (1 min): {} at the start, {} at the end; connect storm {} (hub CPU {:.1} s)\n\n",
        f.load_at_start,
        f.load_at_end,
        secs(f.connect.took),
        f.connect.hub_cpu.as_secs_f64()
    ));
    out.push_str("| revision | done in | less the gates | hub CPU | hub peak RSS | API writes (no Leases) | per cluster | the same, heartbeats apart | status bytes | load after |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for r in &f.runs {
        let (writes, rollout) = write_totals(&r.phase.plane);
        out.push_str(&format!(
            "| {} {} | {} | {} | {:.1} s | {} | {writes:.0} | {:.2} | {:.2} | {} | {} |\n",
            r.label,
            r.revision,
            secs(r.took),
            secs(r.took.saturating_sub(gates)),
            r.phase.hub_cpu.as_secs_f64(),
            mib(r.phase.hub_peak_kib),
            writes / n as f64,
            rollout / n as f64,
            r.status_bytes,
            r.phase.load_at_end,
        ));
    }
    for r in &f.runs {
        out.push_str(&format!(
            "\n{} — per wave, from the set's write (times on the watches of the children and the set):\n",
            r.label
        ));
        out.push_str("| wave | clusters | first at rev | all at rev | all Ready | through | span | span − soak | soak end → through |\n|---|---|---|---|---|---|---|---|---|\n");
        for w in &r.waves {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                w.name,
                w.clusters,
                opt(w.first_promoted),
                opt(w.last_promoted),
                opt(w.last_ready),
                opt(w.through),
                opt(w.span),
                opt(w.overhead),
                opt(w.gate_lag),
            ));
        }
        out.push_str(&r.phase.plane.report(
            &[
                ("flotilla-hub", r.phase.hub_cpu),
                ("agents (xtask)", r.phase.own_cpu),
            ],
            r.took,
        ));
        out.push('\n');
        let writes = writes_by_resource(&r.phase.plane);
        out.push_str("  writes by resource (Leases left out):");
        for (i, (k, v)) in writes.iter().take(12).enumerate() {
            out.push_str(&format!(
                "{} {k} {v:.0} ({:.2}/cluster)",
                if i == 0 { "" } else { "," },
                v / n as f64
            ));
        }
        out.push('\n');
    }
    if let Some(r) = f.runs.get(1) {
        out.push_str(&format!(
            "\n{} — each wave against the API server's ceiling for its writes (a spec and a status write per cluster, {} and {} in flight, the hub stopped):\n",
            r.label,
            crate::bench_ceiling::SPEC_WRITES_IN_FLIGHT,
            crate::bench_ceiling::STATUS_WRITES_IN_FLIGHT,
        ));
        out.push_str("| wave | clusters | span − soak | the API server alone | the engine's own overhead |\n|---|---|---|---|---|\n");
        for (w, c) in engine_overheads(r, &f.ceilings) {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} |\n",
                w.name,
                w.clusters,
                opt(w.overhead),
                secs(c.took),
                opt(w.overhead.map(|o| o.saturating_sub(c.took))),
            ));
        }
    }
    let b = &f.breach;
    out.push_str(&format!(
        "\nbreach ({} of {n} clusters fail revision 3, maxFailures 0, onFailure Pause): wave {} Failed (currentWave {}), RolloutPaused {} ({}) after {} ({} after the first failed child seen), RolloutDegraded after {}\n  \"{}\"\n  children at revision 3 by wave:",
        b.failing_clusters,
        b.failed_wave,
        b.current_wave,
        if b.to_paused.is_some() { "True" } else { "never" },
        b.paused_reason,
        opt(b.to_paused),
        opt(b.first_failure_to_paused),
        opt(b.to_degraded),
        b.message,
    ));
    for (w, at, of) in &b.at_revision {
        out.push_str(&format!(" {w} {at}/{of}"));
    }
    out.push('\n');
    // Goals.
    let rev2 = f.runs.get(1);
    let worst_span = f
        .runs
        .iter()
        .take(2)
        .flat_map(|r| r.waves.iter().filter_map(|w| w.overhead))
        .max()
        .unwrap_or_default();
    let worst_overhead = rev2
        .map(|r| {
            engine_overheads(r, &f.ceilings)
                .filter_map(|(w, c)| w.overhead.map(|o| o.saturating_sub(c.took)))
                .max()
                .unwrap_or_default()
        })
        .unwrap_or_default();
    let writes2 = rev2
        .map(|r| write_totals(&r.phase.plane).1 / n as f64)
        .unwrap_or_default();
    let failed_wave = WAVES.iter().position(|w| *w == b.failed_wave);
    let later_untouched =
        failed_wave.is_some_and(|fw| b.at_revision.iter().skip(fw + 1).all(|(_, at, _)| *at == 0));
    let status_max = f
        .runs
        .iter()
        .map(|r| r.status_bytes)
        .max()
        .unwrap_or_default();
    out.push_str(&format!(
        "\ngoals (N = 1,000): engine overhead ≤ 1 s per wave: {} (worst {} over the API server's ceiling, revision 2; {} span less soak, revisions 1 and 2); hub ≤ 512 MiB: {} ({}); API writes ≤ 3 per cluster per revision: {} ({writes2:.2}, revision 2, ManagedCluster heartbeats apart); status {status_max} bytes (≤ 64 KiB at 10,000: {}); breach stops in its wave: {} (wave {}, later waves untouched: {later_untouched})",
        verdict(worst_overhead <= Duration::from_secs(1)),
        secs(worst_overhead),
        secs(worst_span),
        verdict(f.hub_peak_kib <= 512 * 1024),
        mib(f.hub_peak_kib),
        verdict(writes2 <= 3.0),
        verdict(status_max <= 64 * 1024),
        verdict(later_untouched && b.to_paused.is_some()),
        b.failed_wave,
    ));
    if n != 1000 {
        out.push_str(&format!(" — this run had N = {n}"));
    }
    out.push_str(&format!(
        "\nthis process (the {n} agents) peak RSS {}\n",
        mib(f.own_peak_kib)
    ));
    out
}

/// The waves of `run` with clusters, each with the ceiling measured for its size.
fn engine_overheads<'a>(
    run: &'a RevisionRun,
    ceilings: &'a [crate::bench_ceiling::Ceiling],
) -> impl Iterator<Item = (&'a WaveSpan, &'a crate::bench_ceiling::Ceiling)> {
    run.waves
        .iter()
        .filter(|w| w.clusters > 0)
        .filter_map(|w| Some((w, ceilings.iter().find(|c| c.objects == w.clusters)?)))
}

/// Runs the benchmark and prints the report.
pub fn run(_root: &Path, args: &BenchRollout) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.clusters >= 3,
        "--clusters must be at least 3 (one per wave)"
    );
    anyhow::ensure!(args.fail_percent <= 100, "--fail-percent is 0 to 100");
    let probe = set_object(args, &values_template(1, false));
    revision_of(&probe).context("the set the flags make")?;
    let hub = crate::bench_sim::BenchHub {
        bench: BENCH,
        fleet_name: "rollbench",
        bin_dir: args.bin_dir.as_deref(),
        log_level: &args.hub_log,
        concurrency: args.hub_concurrency,
        extra_args: &args.hub_args,
    };
    let (mut figures, described) =
        crate::bench_sim::run_on_hub(&hub, args, |fleet, args| Box::pin(measure(fleet, args)))?;
    figures.binaries = described;
    println!("{}", report(&figures));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser as _;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: BenchRollout,
    }

    fn args(extra: &[&str]) -> BenchRollout {
        Cli::parse_from(std::iter::once("bench").chain(extra.iter().copied())).args
    }

    #[test]
    fn the_waves_are_one_canary_ten_percent_and_the_rest() {
        let members = wave_members(1000);
        assert_eq!(members[0], ["sim-0000"]);
        assert_eq!(members[1].len(), 100);
        assert_eq!(members[1].first().map(String::as_str), Some("sim-0001"));
        assert_eq!(members[2].len(), 899);
        let small = wave_members(5);
        assert_eq!((small[0].len(), small[1].len(), small[2].len()), (1, 1, 3));
    }

    #[test]
    fn five_percent_fail_never_the_canary_and_the_first_in_the_early_wave() {
        let failing: Vec<usize> = (0..1000).filter(|&i| fails(i, 5)).collect();
        assert_eq!(failing.len(), 50);
        assert_eq!(failing[0], 10);
        assert_eq!(wave_of(failing[0], 1000), 1);
        assert!(!fails(0, 100));
        assert_eq!((0..1000).filter(|&i| fails(i, 100)).count(), 999);
        assert_eq!((0..1000).filter(|&i| fails(i, 0)).count(), 0);
    }

    #[test]
    fn the_set_is_valid_progressive_with_three_soaked_waves_and_its_revision_follows_the_values() {
        let a = args(&["--min-soak-time", "7s", "--max-new-per-reconcile", "200"]);
        let one = set_object(&a, &values_template(1, false));
        let waves = one["spec"]["rollout"]["waves"].as_array().unwrap();
        assert_eq!(waves.len(), 3);
        assert_eq!(waves[0]["maxConcurrency"], 1);
        assert_eq!(waves[1]["maxConcurrency"], "100%");
        assert_eq!(
            waves[1]["clusterSelector"]["matchLabels"][RING_LABEL],
            "early"
        );
        assert!(waves[2].get("clusterSelector").is_none());
        assert!(
            waves
                .iter()
                .all(|w| w["minSoakTime"] == "7s" && w["maxFailures"] == 0)
        );
        assert_eq!(one["spec"]["rollout"]["maxNewPerReconcile"], 200);
        let r1 = revision_of(&one).unwrap();
        let r2 = revision_of(&set_object(&a, &values_template(2, false))).unwrap();
        let r3 = revision_of(&set_object(&a, &values_template(3, true))).unwrap();
        assert!(r1 != r2 && r2 != r3 && r1 != r3);
        assert!(values_template(3, true).contains("benchFail: true"));
        let counted = args(&["--max-concurrency", "25"]);
        assert_eq!(
            set_object(&counted, "")["spec"]["rollout"]["waves"][2]["maxConcurrency"],
            25
        );
    }

    #[test]
    fn wave_spans_run_from_one_waves_through_to_the_next_and_take_the_soak_off() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let members = vec![
            vec!["a".to_owned()],
            vec!["b".to_owned(), "c".to_owned()],
            vec!["d".to_owned()],
        ];
        let promoted: HashMap<String, Instant> = [
            ("a", at(100)),
            ("b", at(5_600)),
            ("c", at(5_700)),
            ("d", at(11_900)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let ready: HashMap<String, Instant> = [
            ("a", at(300)),
            ("b", at(5_900)),
            ("c", at(6_200)),
            ("d", at(12_000)),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let soak = Duration::from_secs(5);
        let spans = wave_spans(t0, &members, &promoted, &ready, Some(at(17_500)), soak);
        let ms = |d: Option<Duration>| d.map(|d| d.as_millis());
        assert_eq!(ms(spans[0].through), Some(5_600));
        assert_eq!(ms(spans[0].span), Some(5_600));
        assert_eq!(ms(spans[0].overhead), Some(600));
        assert_eq!(ms(spans[0].gate_lag), Some(300));
        assert_eq!(ms(spans[1].last_promoted), Some(5_700));
        assert_eq!(ms(spans[1].last_ready), Some(6_200));
        assert_eq!(ms(spans[1].span), Some(6_300));
        assert_eq!(ms(spans[1].gate_lag), Some(700));
        assert_eq!(ms(spans[2].through), Some(17_500));
        assert_eq!(ms(spans[2].overhead), Some(600));
        // A wave whose clusters are not all Ready has no last Ready; no end, no through.
        let partial = wave_spans(t0, &members, &promoted, &HashMap::new(), None, soak);
        assert_eq!(partial[1].last_ready, None);
        assert_eq!(partial[2].through, None);
        assert_eq!(partial[2].span, None);
    }

    #[test]
    fn writes_are_counted_by_resource_without_leases_or_reads() {
        let plane = PlaneDelta {
            by_resource: [
                ("APPLY helmreleases", 1000.0),
                ("PATCH helmreleases/status", 1000.0),
                ("PUT leases", 40.0),
                ("GET helmreleases", 9.0),
                ("POST events", 6.0),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
            ..PlaneDelta::default()
        };
        let w = writes_by_resource(&plane);
        assert_eq!(
            w,
            [
                ("APPLY helmreleases".to_owned(), 1000.0),
                ("PATCH helmreleases/status".to_owned(), 1000.0),
                ("POST events".to_owned(), 6.0),
            ]
        );
    }

    #[test]
    fn max_concurrency_is_a_number_or_a_percentage() {
        assert_eq!(int_or_percent("3"), serde_json::json!(3));
        assert_eq!(int_or_percent("10%"), serde_json::json!("10%"));
    }

    #[test]
    fn the_report_names_every_goal() {
        let f = Figures {
            clusters: 1000,
            soak: Duration::from_secs(5),
            runs: vec![RevisionRun::default(), RevisionRun::default()],
            ..Figures::default()
        };
        let r = report(&f);
        for goal in [
            "≤ 1 s per wave",
            "≤ 512 MiB",
            "≤ 3 per cluster",
            "64 KiB",
            "breach stops",
        ] {
            assert!(r.contains(goal), "{goal}: {r}");
        }
    }
}
