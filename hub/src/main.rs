//! `flotilla-hub`: the hub's controllers in one process (see `flotilla_hub::run`).

use std::path::PathBuf;
use std::time::Duration;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use clap::Parser;
use flotilla_core::duration::GoDuration;
use flotilla_hub::leader::{ElectionTimings, Elector};
use flotilla_hub::run::{Hub, HubConfig, connect};
use flotilla_hub::session::{SessionConfig, SessionHub, StoredArchives};
use flotilla_hub::supervisor::Supervisor;
use flotilla_hub::telemetry::{self, HubMetrics};
use tokio_util::sync::CancellationToken;

/// The Flotilla hub: HelmRelease, HelmRepository and HelmChart controllers, with in-process
/// agents for the targets that have none.
#[derive(Debug, Parser)]
#[command(name = "flotilla-hub", version)]
struct Args {
    /// A kubeconfig for the hub's cluster (default: in-cluster, then KUBECONFIG).
    #[arg(long, env = "KUBECONFIG_PATH")]
    kubeconfig: Option<PathBuf>,
    /// HelmRelease reconciles at the same time.
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// Releases each in-process (push) agent reconciles at the same time.
    #[arg(long, default_value_t = 8)]
    agent_concurrency: u16,
    /// The interval of a HelmRepository that sets none (Go duration).
    #[arg(long, default_value = "10m")]
    default_interval: GoDuration,
    /// Requeue of dependencies and sources not ready (Go duration).
    #[arg(long, default_value = "30s")]
    requeue_dependency: GoDuration,
    /// Interval jitter, percent.
    #[arg(long, default_value_t = 5)]
    interval_jitter_percentage: u8,
    /// Where chart archives are stored.
    #[arg(long, default_value = "/var/lib/flotilla-hub/artifacts")]
    artifact_dir: PathBuf,
    /// The chart store's bound, in MiB.
    #[arg(long, default_value_t = 1024)]
    artifact_max_mib: u64,
    /// Namespace of the in-process agents' state in each target cluster.
    #[arg(long, default_value = "flotilla-system")]
    agent_namespace: String,
    /// How long in-flight Helm actions may take to finish on shutdown (Go duration).
    #[arg(long, default_value = "10m")]
    graceful_shutdown_timeout: GoDuration,
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_addr: std::net::SocketAddr,
    /// Run only while holding the leader-election Lease (for several replicas).
    #[arg(long)]
    leader_elect: bool,
    /// Namespace of the leader-election Lease.
    #[arg(long, env = "POD_NAMESPACE", default_value = "flotilla-system")]
    leader_election_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "flotilla-hub-leader-election")]
    leader_election_id: String,
    /// How long a Lease not renewed stays held (Go duration).
    #[arg(long, default_value = "15s")]
    leader_election_lease_duration: GoDuration,
    /// How long the leader tries to renew before giving up (Go duration).
    #[arg(long, default_value = "10s")]
    leader_election_renew_deadline: GoDuration,
    /// The wait between leader-election tries (Go duration).
    #[arg(long, default_value = "2s")]
    leader_election_retry_period: GoDuration,
    /// Serve the agents' session (gRPC, mutual TLS) on this address; no session server
    /// when unset (push-mode targets only).
    #[arg(long)]
    grpc_addr: Option<std::net::SocketAddr>,
    /// DNS names and IP addresses agents use to reach the session server (its
    /// certificate's SANs); repeatable.
    #[arg(long = "grpc-san")]
    grpc_sans: Vec<String>,
    /// The namespace of the hub's CA Secret and bootstrap tokens.
    #[arg(long, default_value = "flotilla-system")]
    hub_namespace: String,
    /// Lifetime of the client certificates issued to agents (Go duration, at least 30s);
    /// agents renew theirs over the session two thirds into it.
    #[arg(long, default_value = "24h")]
    agent_cert_lifetime: GoDuration,
    /// ManagedCluster heartbeat writes a second, across all agent sessions (at least 1): a
    /// session over this budget writes its heartbeat at a later status tick.
    #[arg(long, default_value_t = 20)]
    heartbeat_writes_per_second: u32,
    /// Allow `users[].user.exec` and `users[].user.auth-provider` in kubeconfig Secrets
    /// (spec.kubeConfig.secretRef, Cluster API kubeconfigs): the hub would run the command
    /// they name. As Flux's flag; restrict the binaries the hub may run (AppArmor, SELinux).
    #[arg(long)]
    insecure_kubeconfig_exec: bool,
    /// Allow `insecure-skip-tls-verify: true` in kubeconfig Secrets (as Flux's flag).
    #[arg(long)]
    insecure_kubeconfig_tls: bool,
    /// Allow file paths in kubeconfig Secrets (`tokenFile`, `client-certificate`,
    /// `client-key`, `certificate-authority`): the hub would read those files of its own
    /// host, its ServiceAccount token included.
    #[arg(long)]
    insecure_kubeconfig_files: bool,
    /// Allow `proxy-url` in kubeconfig Secrets: the hub would send its requests to the
    /// target through the proxy the Secret names.
    #[arg(long)]
    insecure_kubeconfig_proxy: bool,
    /// As Flux: a HelmRelease's chart (spec.chart's sourceRef, spec.chartRef) only from its
    /// own namespace; a reference to another is refused (AccessDenied).
    #[arg(long)]
    no_cross_namespace_refs: bool,
    /// As Flux: the ServiceAccount (in the HelmRelease's namespace) a HelmRelease without
    /// spec.serviceAccountName is applied as, on every target.
    #[arg(long)]
    default_service_account: Option<String>,
    /// HelmReleases with neither spec.clusterRef nor spec.kubeConfig are installed in the
    /// hub's own cluster; without this flag they are refused (AccessDenied).
    #[arg(long)]
    allow_local_target: bool,
    /// Import Cluster API Clusters as ManagedClusters and install their agents through
    /// their kubeconfig Secrets (needs --grpc-addr and --capi-hub-url;
    /// docs/cluster-api.md). A hub without the Cluster API CRDs runs unchanged.
    #[arg(long)]
    capi_import: bool,
    /// The Clusters imported: a label selector (kubectl syntax, `env=prod`); default all.
    #[arg(long, default_value = "")]
    capi_import_selector: String,
    /// The namespaces whose Clusters are imported: a label selector of Namespaces; default
    /// all.
    #[arg(long, default_value = "")]
    capi_import_namespace_selector: String,
    /// The session URL the installed agents dial (https://host:port).
    #[arg(long, default_value = "")]
    capi_hub_url: String,
    /// The image of the installed agents (repository[:tag]).
    #[arg(long, default_value = "localhost:5000/flotilla/flotilla-agent:0.1.0")]
    capi_agent_image: String,
    /// The namespace of the installed agents in each workload cluster.
    #[arg(long, default_value = "flotilla-system")]
    capi_agent_namespace: String,
    /// A values file of the agent chart (e.g. its rbac.workload), under the hub's values.
    #[arg(long)]
    capi_agent_values: Option<PathBuf>,
    /// How long an installed agent has to join before it is installed once more, then
    /// reported (Go duration).
    #[arg(long, default_value = "10m")]
    capi_agent_join_timeout: GoDuration,
    /// How many agent upgrades (a changed --capi-agent-image) are in flight at once: each
    /// waits for its agent to reconnect before the next.
    #[arg(long, default_value_t = 1)]
    capi_agent_upgrade_parallelism: usize,
    /// How long an upgraded agent has to reconnect at the new image; one that does not gets
    /// an AgentUpgrade condition and stops the upgrade rollout (Go duration).
    #[arg(long, default_value = "10m")]
    capi_agent_upgrade_timeout: GoDuration,
    /// How often every imported Cluster is looked at again (Go duration).
    #[arg(long, default_value = "30s")]
    capi_resync_interval: GoDuration,
}

/// The shortest `--agent-cert-lifetime`: an agent must be able to renew (two thirds in)
/// before its certificate ends, with a reconnect or two in between.
const MIN_AGENT_CERT_LIFETIME: Duration = Duration::from_secs(30);

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Logs go to stderr, in colour only on a terminal (a log file or a pod's log gets plain
    // text).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();
    anyhow::ensure!(
        args.interval_jitter_percentage < 100,
        "--interval-jitter-percentage must be below 100"
    );
    anyhow::ensure!(
        args.heartbeat_writes_per_second >= 1,
        "--heartbeat-writes-per-second must be at least 1"
    );
    anyhow::ensure!(
        args.agent_cert_lifetime.get() >= MIN_AGENT_CERT_LIFETIME,
        "--agent-cert-lifetime must be at least {}s",
        MIN_AGENT_CERT_LIFETIME.as_secs()
    );
    let mut config = HubConfig::new(args.kubeconfig.clone(), args.artifact_dir.clone());
    config.concurrency = args.concurrency.max(1);
    config.agent.concurrency = usize::from(args.agent_concurrency.max(1));
    config.default_interval = args.default_interval.get();
    config.requeue_dependency = args.requeue_dependency.get();
    config.jitter = f64::from(args.interval_jitter_percentage) / 100.0;
    config.artifact_max_bytes = args.artifact_max_mib << 20;
    config.agent_namespace = args.agent_namespace;
    config.agent.shutdown_grace = args.graceful_shutdown_timeout.get();
    config.kubeconfig_policy = flotilla_hub::kubeconfig_policy::KubeconfigPolicy {
        allow_exec: args.insecure_kubeconfig_exec,
        allow_insecure_tls: args.insecure_kubeconfig_tls,
        allow_files: args.insecure_kubeconfig_files,
        allow_proxy: args.insecure_kubeconfig_proxy,
    };
    config.tenancy = flotilla_hub::tenancy::TenancyOptions {
        no_cross_namespace_refs: args.no_cross_namespace_refs,
        default_service_account: args.default_service_account.filter(|s| !s.is_empty()),
        local_target: args.allow_local_target,
    };
    if args.capi_import {
        anyhow::ensure!(
            args.grpc_addr.is_some(),
            "--capi-import needs --grpc-addr: imported clusters join over the agents' session"
        );
        anyhow::ensure!(
            !args.capi_hub_url.is_empty(),
            "--capi-import needs --capi-hub-url: the session URL the installed agents dial"
        );
        if let Some(path) = &args.capi_agent_values {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--capi-agent-values {}: {e}", path.display()))?;
            flotilla_hub::onboarding::bootstrap::operator_values(&text)
                .map_err(|e| anyhow::anyhow!("--capi-agent-values {}: {e}", path.display()))?;
        }
        config.capi_import = Some(flotilla_hub::onboarding::ImportOptions {
            cluster_selector: args.capi_import_selector.clone(),
            namespace_selector: args.capi_import_namespace_selector.clone(),
            hub_url: args.capi_hub_url.clone(),
            hub_namespace: args.hub_namespace.clone(),
            agent_image: args.capi_agent_image.clone(),
            agent_namespace: args.capi_agent_namespace.clone(),
            agent_values: args.capi_agent_values.clone(),
            join_timeout: args.capi_agent_join_timeout.get(),
            upgrade_parallelism: args.capi_agent_upgrade_parallelism.max(1),
            upgrade_timeout: args.capi_agent_upgrade_timeout.get(),
            hub_started_at: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(0)),
            resync: args.capi_resync_interval.get(),
            crd_poll: args.capi_resync_interval.get().min(Duration::from_secs(60)),
            kubeconfig_policy: config.kubeconfig_policy,
            ..Default::default()
        });
    }
    let metrics = HubMetrics::new();
    config.metrics = metrics.clone();
    // Every long-lived task reports its end to the supervisor: one ending on its own turns
    // `/readyz` false and ends the process with an error (see `flotilla_hub::supervisor`).
    let supervisor = Supervisor::new(Arc::new(AtomicBool::new(false)));
    config.supervisor = supervisor.clone();
    let probes_stop = CancellationToken::new();
    let probes = tokio::spawn(supervisor.critical("probe-server", {
        let (addr, ready, stop) = (
            args.metrics_addr,
            supervisor.readiness(),
            probes_stop.clone(),
        );
        async move {
            if let Err(e) = telemetry::serve(addr, metrics, ready, stop).await {
                tracing::error!(error = %e, "the probe server failed");
            }
        }
    }));
    let elector = if args.leader_elect {
        let (_, client) = connect(config.kubeconfig.as_deref()).await?;
        let host = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .unwrap_or_else(|_| "flotilla-hub".into());
        let identity = format!("{host}_{}", std::process::id());
        let elector = Elector::new(
            client,
            &args.leader_election_namespace,
            &args.leader_election_id,
            identity,
            ElectionTimings {
                lease_duration: args.leader_election_lease_duration.get(),
                renew_deadline: args.leader_election_renew_deadline.get(),
                retry_period: args.leader_election_retry_period.get(),
            },
        );
        tracing::info!(
            identity = elector.identity(),
            "waiting for the leader-election lease"
        );
        tokio::select! {
            () = elector.acquire() => {}
            () = shutdown_signal() => return Ok(()),
            ended = supervisor.failed() => return Err(ended.into()),
        }
        Some(elector)
    } else {
        None
    };
    // The session server runs on the active replica only: agents' reports go to the hub
    // that acts on them.
    let sessions = match args.grpc_addr {
        Some(addr) => {
            let (_, client) = connect(config.kubeconfig.as_deref()).await?;
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let mut session_config = SessionConfig {
                namespace: args.hub_namespace.clone(),
                client_cert_lifetime: args.agent_cert_lifetime.get(),
                heartbeat_writes_per_second: f64::from(args.heartbeat_writes_per_second),
                metrics: config.metrics.clone(),
                supervisor: supervisor.clone(),
                ..SessionConfig::default()
            };
            if !args.grpc_sans.is_empty() {
                session_config.server_sans = args.grpc_sans.clone();
            }
            let sessions = SessionHub::start(
                client,
                session_config,
                listener,
                config.report_sink(),
                Arc::new(StoredArchives::new(&args.artifact_dir)),
            )
            .await?;
            tracing::info!(address = %addr, "serving agent sessions");
            config.remote = Some(sessions.links());
            if let Some(import) = config.capi_import.as_mut() {
                import.ca_pin = sessions.ca().pin().to_string();
            }
            config.plan_epoch_namespace = Some(args.hub_namespace.clone());
            Some(sessions)
        }
        None => None,
    };
    let hub = Hub::start(config).await?;
    supervisor.set_ready();
    // Holding the lease is a critical task too: its end turns readiness off.
    let lost = supervisor.critical("leader-election", async {
        match &elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    });
    let failed = tokio::select! {
        () = shutdown_signal() => {
            tracing::info!("shutting down");
            None
        }
        ended = supervisor.failed() => Some(ended),
        () = lost => {
            // Another replica may act now: stop at once, as controller-runtime does.
            tracing::error!("leadership lost; exiting");
            std::process::exit(1);
        }
    };
    // What is left stops in order (readiness is off when a task failed); then, after a
    // failure, the process exits non-zero.
    supervisor.stopping();
    // The lease is renewed until the in-process agents have finished their actions.
    let lost = async {
        match &elector {
            Some(e) => e.hold().await,
            None => std::future::pending().await,
        }
    };
    let stopped = tokio::select! {
        stopped = tokio::time::timeout(
            args.graceful_shutdown_timeout.get() + Duration::from_secs(30),
            hub.stop(),
        ) => stopped,
        () = lost => {
            tracing::error!("leadership lost during shutdown; exiting");
            std::process::exit(1);
        }
    };
    if let Some(sessions) = sessions {
        sessions.stop().await;
    }
    if let Some(e) = &elector {
        e.release().await;
    }
    probes_stop.cancel();
    let _ = probes.await;
    stopped.map_err(|_| anyhow::anyhow!("graceful shutdown timed out"))?;
    match failed {
        Some(ended) => Err(ended.into()),
        None => Ok(()),
    }
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("installing a SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
