//! `flotilla-agent`: runs release plans against one workload cluster.
//!
//! - `flotilla-agent apply [--kubeconfig K] PLAN... [--watch]`: plan-file mode
//!   (`flotilla_agent::cmd::apply`).
//! - `flotilla-agent run [--kubeconfig K] [--namespace NS]`: the long-lived agent
//!   (`flotilla_agent::cmd::run`), with its hub session when it has joined one.
//! - `flotilla-agent join --hub URL --ca-hash H --cluster-name N`: joins a hub
//!   (`flotilla_agent::session::join`) with the bootstrap token of `$FLOTILLA_BOOTSTRAP_TOKEN`
//!   or `--token-file` (never a command-line argument: `ps` shows those), then runs as `run`
//!   does; an agent that has already joined that hub skips registering and needs no token.
//!
//! Logs go to stderr: `RUST_LOG` filters them (default: `info` for Flotilla, `warn` for the
//! rest), `--log-format json` writes one JSON object per line. Colours only on a terminal.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use flotilla_agent::cmd;
use flotilla_agent::runtime::AgentOptions;
use flotilla_agent::session::{self, SessionOptions};
use flotilla_agent::telemetry::{self, Health, LogFormat, Metrics};
use flotilla_core::duration::GoDuration;

#[derive(Parser, Debug)]
#[command(
    name = "flotilla-agent",
    version,
    about = "The Flotilla agent",
    after_help = "Logs go to stderr. RUST_LOG filters them (default: info for Flotilla's crates, \
                  warn for the rest; e.g. RUST_LOG=flotilla_agent=debug); --log-format json \
                  writes one JSON object per line. Colours only on a terminal."
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value = "text")]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

/// What both commands share.
#[derive(Args, Debug)]
struct Common {
    /// Kubeconfig of the workload cluster (default: $KUBECONFIG, ~/.kube/config, or the
    /// in-cluster ServiceAccount).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// How many releases are reconciled at the same time.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..))]
    concurrency: u16,
    /// How long the cluster's discovered .Capabilities are reused by renders (a Go
    /// duration; 0s discovers them for every render, as helm does). CRDs and APIServices
    /// the agent applies or deletes, and applies of unserved kinds, refresh them at once.
    #[arg(long, default_value = "5m")]
    capabilities_ttl: GoDuration,
    /// On SIGTERM, how long the Helm actions in flight may take to finish.
    #[arg(long, default_value = "5m")]
    shutdown_grace: GoDuration,
    /// Where the chart cache lives (archives by sha256).
    #[arg(long, env = "FLOTILLA_CHART_CACHE")]
    chart_cache: Option<PathBuf>,
    /// Serve /metrics, /healthz and /readyz on this address (port 0 picks one; the
    /// address is logged).
    #[arg(long)]
    metrics_addr: Option<SocketAddr>,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Reconcile plan files (HelmReleases plus local charts) against a cluster.
    Apply {
        #[command(flatten)]
        common: Common,
        /// Namespace holding the agent's per-release state.
        #[arg(long, default_value = "default")]
        state_namespace: String,
        /// Keep reconciling each plan every spec.interval until SIGINT or SIGTERM.
        #[arg(long)]
        watch: bool,
        /// Plan files, or directories of plan files.
        #[arg(required = true)]
        plans: Vec<PathBuf>,
    },
    /// Run the agent: resume every plan held in the cluster and keep reconciling.
    Run {
        #[command(flatten)]
        common: Common,
        /// The agent's namespace (its plan store); the downward API sets POD_NAMESPACE.
        #[arg(long, env = "POD_NAMESPACE", default_value = "flotilla-system")]
        namespace: String,
    },
    /// Join a hub with a bootstrap token, then run with the hub session.
    Join {
        #[command(flatten)]
        common: Common,
        /// The agent's namespace (its plan store and identity Secret).
        #[arg(long, env = "POD_NAMESPACE", default_value = "flotilla-system")]
        namespace: String,
        /// The hub's URL: https://host:port.
        #[arg(long)]
        hub: String,
        /// A file holding the bootstrap token `flotilla token create` printed (else
        /// $FLOTILLA_BOOTSTRAP_TOKEN; neither is needed once the agent has joined).
        #[arg(long)]
        token_file: Option<PathBuf>,
        /// The hub's CA pin, sha256:<hex> (as kubeadm's --discovery-token-ca-cert-hash).
        #[arg(long)]
        ca_hash: String,
        /// The ManagedCluster name to register as.
        #[arg(long)]
        cluster_name: String,
        /// How often to ask again while the cluster waits for acceptance.
        #[arg(long, default_value = "5s")]
        poll_interval: GoDuration,
        /// How often the agent pings the hub.
        #[arg(long, default_value = "10s")]
        heartbeat_interval: GoDuration,
    },
}

fn main() -> ExitCode {
    // Before any thread starts (see flotilla_agent::memory).
    flotilla_agent::memory::use_one_arena();
    let cli = Cli::parse();
    if let Err(e) = telemetry::init_logging(cli.log_format) {
        eprintln!("flotilla-agent: {e}");
        return ExitCode::FAILURE;
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flotilla-agent: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.command)) {
        Ok(failures) if failures.is_empty() => ExitCode::SUCCESS,
        Ok(failures) => {
            eprintln!(
                "flotilla-agent: {} plan(s) did not reconcile:",
                failures.len()
            );
            for f in failures {
                eprintln!("  {f}");
            }
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("flotilla-agent: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes joined with `: `, each said once (the library's one chain).
fn error_chain(e: &anyhow::Error) -> String {
    flotilla_agent::kube::error_chain(e.as_ref())
}

/// The bootstrap token of `--token-file` or `$FLOTILLA_BOOTSTRAP_TOKEN` (trimmed); `None`
/// when neither is given. Never printed.
fn bootstrap_token(file: Option<&std::path::Path>) -> anyhow::Result<Option<String>> {
    let text = match file {
        Some(path) => Some(std::fs::read_to_string(path).map_err(|e| {
            anyhow::anyhow!("--token-file {}: cannot read it: {e}", path.display())
        })?),
        None => std::env::var(session::TOKEN_ENV).ok(),
    };
    Ok(text.map(|t| t.trim().to_owned()).filter(|t| !t.is_empty()))
}

async fn run(command: Command) -> anyhow::Result<Vec<String>> {
    // Plan files are read before any cluster is contacted: a bad one is reported even
    // without a cluster, and when none is good there is nothing to connect for.
    let loaded = match &command {
        Command::Apply { plans, .. } => {
            let loaded = cmd::apply::load(plans);
            if loaded.is_empty() {
                anyhow::ensure!(!loaded.failures.is_empty(), "no plan files given");
                return Ok(loaded.failures);
            }
            Some(loaded)
        }
        Command::Run { .. } | Command::Join { .. } => None,
    };
    let (common, namespace) = match &command {
        Command::Apply {
            common,
            state_namespace,
            ..
        } => (common, state_namespace.clone()),
        Command::Run { common, namespace }
        | Command::Join {
            common, namespace, ..
        } => (common, namespace.clone()),
    };
    let config = cmd::kube_config(common.kubeconfig.as_deref()).await?;
    let ctx = cmd::context(config, &namespace, common.capabilities_ttl.get())?;
    let metrics = Metrics::new();
    let health = Health::new();
    let stop_server = tokio_util::sync::CancellationToken::new();
    let server = match common.metrics_addr {
        Some(addr) => Some(
            cmd::serve_telemetry(addr, metrics.clone(), health.clone(), stop_server.clone())
                .await?,
        ),
        None => None,
    };
    let options = AgentOptions {
        concurrency: usize::from(common.concurrency),
        shutdown_grace: common.shutdown_grace.get(),
        metrics: Some(metrics.clone()),
        ..AgentOptions::default()
    };
    let charts = cmd::chart_cache(common.chart_cache.as_deref())?;
    let result = match command {
        Command::Apply { watch, .. } => {
            health.set_ready(true);
            let apply = cmd::apply::Apply {
                loaded: loaded.unwrap_or_default(),
                watch,
                options,
            };
            cmd::apply::apply(ctx, charts, apply).await
        }
        Command::Run { .. } => {
            let client = ctx.cluster.client().clone();
            let stored = session::identity::load(&client, &namespace).await?;
            let with = match session::Identity::from_stored(&stored) {
                Some(identity) => Some(cmd::run::WithSession {
                    identity: identity?,
                    options: SessionOptions {
                        namespace: namespace.clone(),
                        metrics: Some(metrics),
                        ..SessionOptions::default()
                    },
                }),
                None => {
                    tracing::warn!(
                        secret = %format!("{namespace}/{}", session::identity::SECRET_NAME),
                        "not joined to a hub (no identity in the Secret): running on the plans held in the cluster only; to join, run `flotilla-agent join --hub https://HOST:PORT --ca-hash sha256:HEX --cluster-name NAME` once with the bootstrap token of `flotilla token create` in ${} or --token-file, then `flotilla-agent run` resumes from the stored identity",
                        session::TOKEN_ENV
                    );
                    None
                }
            };
            cmd::run::run(ctx, charts, options, health, with)
                .await
                .map(|()| Vec::new())
        }
        Command::Join {
            hub,
            token_file,
            ca_hash,
            cluster_name,
            poll_interval,
            heartbeat_interval,
            ..
        } => {
            let client = ctx.cluster.client().clone();
            let join = session::JoinOptions {
                hub: session::HubAddress::parse(&hub)?,
                token: bootstrap_token(token_file.as_deref())?,
                ca_pin: session::CaPin::parse(&ca_hash)?,
                cluster_name,
                namespace: namespace.clone(),
                poll_interval: poll_interval.get(),
            };
            let identity = session::join(&client, &join).await?;
            let with = cmd::run::WithSession {
                identity,
                options: SessionOptions {
                    namespace: namespace.clone(),
                    heartbeat_interval: heartbeat_interval.get(),
                    heartbeat_timeout: heartbeat_interval.get() * 7 / 2,
                    metrics: Some(metrics),
                    ..SessionOptions::default()
                },
            };
            cmd::run::run(ctx, charts, options, health, Some(with))
                .await
                .map(|()| Vec::new())
        }
    };
    stop_server.cancel();
    if let Some(server) = server {
        let _ = tokio::time::timeout(Duration::from_secs(5), server).await;
    }
    result
}
