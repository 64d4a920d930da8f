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

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use flotilla_tests::fleet::{EXAMPLE_CHART, Fleet};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use tokio_util::sync::CancellationToken;

use crate::bench_common::{self, ControlPlane, load_average, mib, proc_status_kib};
use crate::bench_sim::{
    Connected, Join, Meter, Phase, SharedAgents, SimAgent, cluster_name, helm_release_resource,
    helm_repository_resource, quantile, secs, sorted, start_agents, verdict, wait_connected,
    wait_until,
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
/// This benchmark's name in its messages.
const BENCH: &str = "bench-sessions";

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

/// What the watch of the HelmReleases has seen.
#[derive(Debug, Default)]
struct HubBoard {
    /// When each HelmRelease was first seen Ready for its generation at each chart version.
    ready_at_version: HashMap<(String, String), Instant>,
}

type SharedHub = Arc<Mutex<HubBoard>>;

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

async fn measure(fleet: &Fleet, args: &BenchSessions) -> anyhow::Result<Figures> {
    let n = args.agents;
    let timeout = Duration::from_secs(args.timeout_secs);
    let hub_pid = fleet.hub_pid().context("the hub runs")?;
    let client = fleet.mgmt.client().await?;
    bench_common::ensure_namespace(&client, NAMESPACE).await?;
    let repositories: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), NAMESPACE, &helm_repository_resource());
    crate::bench_sim::create_repository(&client, NAMESPACE, REPOSITORY, &fleet.repo.url()).await?;
    let join = Join::create(fleet, n)?;

    let plane = ControlPlane {
        pids: fleet.mgmt.pids(),
        client: client.clone(),
    };
    let meter = Meter {
        hub_pid,
        plane: &plane,
    };
    let hub_board = SharedHub::default();
    let connected = Connected::default();
    let agent_board = SharedAgents::default();
    let watches = [
        crate::bench_sim::watch_connected(client.clone(), BENCH, connected.clone()),
        watch_releases(client.clone(), hub_board.clone()),
    ];
    let stop = CancellationToken::new();
    let load_at_start = load_average();
    let mut phases = Vec::new();

    // 1. The connect storm.
    eprintln!("bench-sessions: phase 1: {n} agents join and connect at once");
    let started = meter.start().await?;
    let t0 = started.at;
    let agents = start_agents(
        (0..n).map(|i| SimAgent { i, faulty: false }),
        &join,
        &agent_board,
        &stop,
    );
    wait_connected(BENCH, n, timeout, hub_pid, &agent_board, &connected).await?;
    let took = t0.elapsed();
    let mut phase = meter.finish(&started, "connect storm", took).await?;
    {
        let connected = connected.lock().expect("not poisoned");
        let agents = agent_board.lock().expect("not poisoned");
        phase.each = sorted(connected.values().map(|t| t.saturating_duration_since(t0)));
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
        BENCH,
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
        BENCH,
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
    let (peak, _) = crate::bench_sim::peak_of(&figures.phases);
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
    let hub = crate::bench_sim::BenchHub {
        bench: BENCH,
        fleet_name: "sessbench",
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

    #[test]
    fn each_agent_has_its_own_release_of_the_example_chart_on_its_cluster() {
        let release = helm_release(7);
        assert_eq!(release["metadata"]["name"], "sim-0007");
        assert_eq!(release["spec"]["clusterRef"]["name"], "sim-0007");
        assert_eq!(release["spec"]["chart"]["spec"]["chart"], CHART);
        assert_eq!(release["spec"]["chart"]["spec"]["version"], "*");
    }
}
