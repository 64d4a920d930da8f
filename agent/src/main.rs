//! `flotilla-agent`: runs release plans against one workload cluster.
//!
//! `flotilla-agent apply --kubeconfig K PLAN... [--watch] [--concurrency N]` reconciles plan
//! files (see `flotilla_agent::reconcile::plan_file`; a directory stands for the `*.yaml`
//! and `*.yml` files in it) once, or each on its own `spec.interval` until SIGINT or
//! SIGTERM, at most N at a time, and prints the status after each reconcile as YAML. Each
//! reconcile is also logged (`RUST_LOG=flotilla_agent=info`) with its duration.
//!
//! One process, one Kubernetes client, a single-threaded runtime: the agent waits on the
//! network far more than it computes, and rendering runs on blocking threads.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::reconcile::{Context, ReconcileError, ReconcileReport, plan_file, reconcile};
use flotilla_core::release::Step;
use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio::time::Instant;

#[derive(Parser, Debug)]
#[command(name = "flotilla-agent", version, about = "The Flotilla agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile plan files (HelmReleases plus local charts) against a cluster.
    Apply {
        /// Kubeconfig of the workload cluster.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Namespace holding the agent's per-release state.
        #[arg(long, default_value = "default")]
        state_namespace: String,
        /// Keep reconciling each plan every spec.interval until SIGINT or SIGTERM.
        #[arg(long)]
        watch: bool,
        /// How many releases are reconciled at the same time.
        #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u16).range(1..))]
        concurrency: u16,
        /// How long the cluster's discovered .Capabilities are reused by renders (a Go
        /// duration; 0s discovers them for every render, as helm does). CRDs and APIServices
        /// the agent applies or deletes, and applies of unserved kinds, refresh them at once.
        #[arg(long, default_value = "5m")]
        capabilities_ttl: flotilla_core::duration::GoDuration,
        /// Plan files, or directories of plan files.
        #[arg(required = true)]
        plans: Vec<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    match cli.command {
        Command::Apply {
            kubeconfig,
            state_namespace,
            watch,
            concurrency,
            capabilities_ttl,
            plans,
        } => runtime.block_on(apply(
            kubeconfig,
            &state_namespace,
            watch,
            usize::from(concurrency),
            capabilities_ttl.get(),
            plans,
        )),
    }
}

/// The plan files `paths` name: files as given, directories by their `*.yaml` and `*.yml`
/// files in name order.
fn plan_paths(paths: Vec<PathBuf>) -> anyhow::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for path in paths {
        if path.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(&path)
                .with_context(|| format!("reading directory {}", path.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.is_file()
                        && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
                })
                .collect();
            found.sort();
            anyhow::ensure!(
                !found.is_empty(),
                "{}: no plan files (*.yaml, *.yml)",
                path.display()
            );
            out.extend(found);
        } else {
            out.push(path);
        }
    }
    Ok(out)
}

/// One plan file.
struct Planned {
    path: PathBuf,
    file: PlanFile,
}

/// When a plan is due.
struct Slot {
    /// `None`: not again (stalled, or a single pass).
    due: Option<Instant>,
    backoff: Duration,
    running: bool,
}

async fn apply(
    kubeconfig: PathBuf,
    state_namespace: &str,
    watch: bool,
    concurrency: usize,
    capabilities_ttl: Duration,
    paths: Vec<PathBuf>,
) -> anyhow::Result<()> {
    let mut plans = Vec::new();
    let mut seen = std::collections::BTreeMap::new();
    for path in plan_paths(paths)? {
        let file = plan_file::load(&path)?;
        let key = object_key(&file);
        if let Some(other) = seen.insert(key.clone(), path.clone()) {
            anyhow::bail!(
                "{} and {} are both HelmRelease {key}",
                other.display(),
                path.display()
            );
        }
        plans.push(Planned { path, file });
    }
    let mut slots: Vec<Slot> = plans
        .iter()
        .map(|_| Slot {
            due: Some(Instant::now()),
            backoff: Duration::from_secs(1),
            running: false,
        })
        .collect();
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
    let mut ctx =
        Context::from_config(config, state_namespace, Arc::new(ChartRenderer::default()))?;
    ctx.cluster = ctx.cluster.with_capabilities_ttl(capabilities_ttl);
    // Signal handlers first, so a signal during the first reconcile is not lost.
    let mut signals = Signals::new()?;

    let ctx = &ctx;
    let plans = &plans;
    let mut running = FuturesUnordered::new();
    let mut failed: Vec<String> = Vec::new();
    let mut done = 0;
    loop {
        // Start what is due, up to the bound.
        let now = Instant::now();
        for (i, slot) in slots.iter_mut().enumerate() {
            if running.len() >= concurrency {
                break;
            }
            if !slot.running && slot.due.is_some_and(|d| d <= now) {
                slot.running = true;
                let file = &plans[i].file;
                running.push(async move {
                    let started = Instant::now();
                    let result = reconcile(ctx, &file.plan, &file.chart).await;
                    (i, started.elapsed(), result)
                });
            }
        }
        if !watch && running.is_empty() {
            break;
        }
        let next_due = slots
            .iter()
            .filter(|s| !s.running)
            .filter_map(|s| s.due)
            .min()
            .filter(|_| running.len() < concurrency);
        let wait = async {
            match next_due {
                Some(d) => tokio::time::sleep_until(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            Some((i, elapsed, result)) = running.next() => {
                let slot = &mut slots[i];
                slot.running = false;
                slot.due = finished(&plans[i], slot, elapsed, result, watch, &mut failed)?
                    .map(|d| Instant::now() + d);
                done += 1;
                if running.is_empty() {
                    // Idle until the next is due: what rendering and applying freed goes
                    // back to the kernel instead of staying in the allocator's arenas.
                    flotilla_agent::memory::release_free_memory();
                }
            }
            () = wait => {}
            stop = signals.recv() => {
                if stop {
                    tracing::info!(reconciles = done, "stopping on a signal");
                    return Ok(());
                }
            }
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        anyhow::bail!(
            "{} of {} releases did not reconcile: {}",
            failed.len(),
            plans.len(),
            failed.join("; ")
        )
    }
}

fn object_key(file: &PlanFile) -> String {
    format!("{}/{}", file.plan.object.namespace, file.plan.object.name)
}

/// Records a finished reconcile; returns when to run it again (`None`: not again).
fn finished(
    r: &Planned,
    slot: &mut Slot,
    elapsed: Duration,
    result: Result<ReconcileReport, ReconcileError>,
    watch: bool,
    failed: &mut Vec<String>,
) -> anyhow::Result<Option<Duration>> {
    let key = object_key(&r.file);
    let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    match result {
        Ok(report) => {
            tracing::info!(
                release = %key,
                elapsed_ms,
                actions = ?report.actions,
                step = ?report.step,
                "reconciled"
            );
            print_status(&report)?;
            if !watch {
                if !matches!(report.step, Step::Done) {
                    failed.push(format!("{key}: reconcile ended with {:?}", report.step));
                }
                return Ok(None);
            }
            let interval = r.file.helm_release.spec.interval.get();
            let next = report.requeue_after(interval, slot.backoff);
            slot.backoff = if matches!(report.step, Step::Done) {
                Duration::from_secs(1)
            } else {
                (slot.backoff * 2).min(Duration::from_secs(900))
            };
            Ok(next)
        }
        Err(e) if watch && e.is_transient() => {
            tracing::warn!(release = %key, elapsed_ms, kind = e.kind(), "reconcile failed");
            eprintln!(
                "{}: reconcile failed ({}): {:#}",
                r.path.display(),
                e.kind(),
                anyhow::Error::new(e)
            );
            slot.backoff = (slot.backoff * 2).min(Duration::from_secs(900));
            Ok(Some(slot.backoff))
        }
        Err(e) if watch => {
            eprintln!("{}: {:#}", r.path.display(), anyhow::Error::new(e));
            Ok(None)
        }
        Err(e) => Err(anyhow::Error::new(e).context(format!("{}", r.path.display()))),
    }
}

/// SIGINT and SIGTERM, registered once.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
}

impl Signals {
    fn new() -> anyhow::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            interrupt: signal(SignalKind::interrupt())?,
            terminate: signal(SignalKind::terminate())?,
        })
    }

    /// Waits for SIGINT or SIGTERM; true when one came.
    async fn recv(&mut self) -> bool {
        tokio::select! {
            s = self.interrupt.recv() => s.is_some(),
            s = self.terminate.recv() => s.is_some(),
        }
    }
}

fn print_status(report: &ReconcileReport) -> anyhow::Result<()> {
    let json = serde_json::to_string(&report.status)?;
    let yaml = flotilla_yaml::from_str(&json)?;
    print!("---\n{}", flotilla_yaml::sigs::marshal(&yaml)?);
    Ok(())
}
