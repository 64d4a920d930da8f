//! `flotilla-agent`: runs release plans against one workload cluster.
//!
//! `flotilla-agent apply --kubeconfig K PLAN.yaml [--watch]` reconciles a plan file (see
//! `flotilla_agent::reconcile::plan_file`) once, or every `spec.interval` until SIGINT or
//! SIGTERM, and prints the status after each reconcile as YAML.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::reconcile::{Context, ReconcileReport, plan_file, reconcile};
use flotilla_core::release::Step;

#[derive(Parser, Debug)]
#[command(name = "flotilla-agent", version, about = "The Flotilla agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile a plan file (a HelmRelease plus a local chart) against a cluster.
    Apply {
        /// Kubeconfig of the workload cluster.
        #[arg(long)]
        kubeconfig: PathBuf,
        /// Namespace holding the agent's per-release state.
        #[arg(long, default_value = "default")]
        state_namespace: String,
        /// Keep reconciling every spec.interval until SIGINT or SIGTERM.
        #[arg(long)]
        watch: bool,
        /// The plan file.
        plan: PathBuf,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        Command::Apply {
            kubeconfig,
            state_namespace,
            watch,
            plan,
        } => apply(kubeconfig, &state_namespace, watch, plan).await,
    }
}

async fn apply(
    kubeconfig: PathBuf,
    state_namespace: &str,
    watch: bool,
    plan_path: PathBuf,
) -> anyhow::Result<()> {
    let file = plan_file::load(&plan_path)?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)
            .with_context(|| format!("reading kubeconfig {}", kubeconfig.display()))?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await
    .with_context(|| format!("kubeconfig {}", kubeconfig.display()))?;
    let ctx = Context::from_config(config, state_namespace, Arc::new(ChartRenderer::default()))?;
    // Signal handlers first, so a signal during the first reconcile is not lost.
    let mut signals = Signals::new()?;
    let interval = file.helm_release.spec.interval.get();
    let mut backoff = Duration::from_secs(1);
    loop {
        let next = match reconcile(&ctx, &file.plan, &file.chart).await {
            Ok(report) => {
                print_status(&report)?;
                if !watch {
                    return match report.step {
                        Step::Done => Ok(()),
                        other => Err(anyhow::anyhow!("reconcile ended with {other:?}")),
                    };
                }
                let next = report.requeue_after(interval, backoff);
                backoff = if matches!(report.step, Step::Done) {
                    Duration::from_secs(1)
                } else {
                    (backoff * 2).min(Duration::from_secs(900))
                };
                next
            }
            Err(e) if watch && e.is_transient() => {
                eprintln!(
                    "reconcile failed ({}): {:#}",
                    e.kind(),
                    anyhow::Error::new(e)
                );
                backoff = (backoff * 2).min(Duration::from_secs(900));
                Some(backoff)
            }
            Err(e) => return Err(e.into()),
        };
        if !signals.wait(next).await {
            return Ok(());
        }
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

    /// Waits `next` (forever when `None`); false when a signal came first.
    async fn wait(&mut self, next: Option<Duration>) -> bool {
        let sleep = async {
            match next {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = sleep => true,
            _ = self.interrupt.recv() => false,
            _ = self.terminate.recv() => false,
        }
    }
}

fn print_status(report: &ReconcileReport) -> anyhow::Result<()> {
    let json = serde_json::to_string(&report.status)?;
    let yaml = flotilla_yaml::from_str(&json)?;
    print!("---\n{}", flotilla_yaml::sigs::marshal(&yaml)?);
    Ok(())
}
