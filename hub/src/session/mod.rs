//! The hub's end of the hub–agent session: registration with bootstrap tokens, mutual TLS,
//! ManagedCluster admission, resync, and the [`crate::link::Links`] of registered clusters.
//!
//! ```text
//! flotilla token create            -> tokens::create (Secret flotilla-token-<id>)
//! agent: Register(token, CSR)      -> tokens::redeem -> ManagedCluster (pending | accepted)
//!                                  -> pki::HubCa::sign_client (URI SAN spiffe://flotilla/cluster/<name>)
//! agent: Session (mTLS)            -> server::IdentityLayer (certificate -> ClusterIdentity, admission)
//!                                  -> Hello -> Mailbox::resync -> upserts/deletes -> ResyncComplete
//!                                  -> plans down, acks/reports up, pings both ways
//! agent: GetChart(digest, offset)  -> ChartArchives (charts of the cluster's own plans only)
//! controller: Links::link(Cluster) -> mailbox::RemoteLinks -> Mailbox (AgentLink)
//! ```
//!
//! [`SessionHub::start`] loads (or creates) the CA, watches ManagedClusters, and serves the
//! `Hub` gRPC service on a listener. The HelmRelease controller uses
//! [`SessionHub::links`] as the [`crate::link::Links`] of `TargetId::Cluster` targets and
//! reads every cluster's reports from the [`crate::link::ReportSink`] it passed in.
//!
//! Secrets: tokens, keys and plan values never appear in a log line; the token and CA key
//! types redact themselves in Debug output.

pub mod cluster_status;
pub mod enrollment;
pub mod inbound;
pub mod limits;
pub mod mailbox;
pub mod pki;
pub mod registry;
pub mod server;
pub mod tokens;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use flotilla_proto::v1::hub_server::HubServer;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};

pub use mailbox::{Mailbox, RemoteLinks};
pub use pki::{CaPin, ClusterIdentity, HubCa};
pub use registry::Registry;

use crate::link::ReportSink;

/// Where `GetChart` finds chart archives by digest (the hub's artifact store).
pub trait ChartArchives: Send + Sync + std::fmt::Debug {
    /// The archive whose sha256 is `digest`, if the hub has it.
    fn archive<'a>(
        &'a self,
        digest: &'a flotilla_core::ids::ChartDigest,
    ) -> futures::future::BoxFuture<'a, Option<Arc<Vec<u8>>>>;
}

/// No archives: `GetChart` answers `NOT_FOUND`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoArchives;

impl ChartArchives for NoArchives {
    fn archive<'a>(
        &'a self,
        _digest: &'a flotilla_core::ids::ChartDigest,
    ) -> futures::future::BoxFuture<'a, Option<Arc<Vec<u8>>>> {
        Box::pin(async { None })
    }
}

/// Archives held in memory, by their sha256 (tests, and programs embedding the hub that
/// hold their charts themselves).
#[derive(Debug, Clone, Default)]
pub struct MemoryArchives(std::collections::HashMap<flotilla_core::ids::ChartDigest, Arc<Vec<u8>>>);

impl MemoryArchives {
    /// The archives `archives`, each found by its own digest.
    pub fn of(archives: impl IntoIterator<Item = Vec<u8>>) -> Self {
        Self(
            archives
                .into_iter()
                .map(|a| (flotilla_core::ids::ChartDigest::of_bytes(&a), Arc::new(a)))
                .collect(),
        )
    }
}

impl ChartArchives for MemoryArchives {
    fn archive<'a>(
        &'a self,
        digest: &'a flotilla_core::ids::ChartDigest,
    ) -> futures::future::BoxFuture<'a, Option<Arc<Vec<u8>>>> {
        let found = self.0.get(digest).cloned();
        Box::pin(async move { found })
    }
}

/// The archives of the hub's chart store (`<dir>/<hex digest>.tgz`, as
/// `flotilla_agent::charts::CachedCharts` keeps them): what `GetChart` serves in the hub
/// binary. The agent checks the digest of what it receives.
#[derive(Debug, Clone)]
pub struct StoredArchives {
    dir: std::path::PathBuf,
}

impl StoredArchives {
    /// The archives of the store in `dir`.
    pub fn new(dir: impl Into<std::path::PathBuf>) -> Self {
        StoredArchives { dir: dir.into() }
    }
}

impl ChartArchives for StoredArchives {
    fn archive<'a>(
        &'a self,
        digest: &'a flotilla_core::ids::ChartDigest,
    ) -> futures::future::BoxFuture<'a, Option<Arc<Vec<u8>>>> {
        let path = self.dir.join(format!("{}.tgz", digest.hex()));
        Box::pin(async move { tokio::fs::read(path).await.ok().map(Arc::new) })
    }
}

/// How long [`SessionHub::start`] waits for the first list of ManagedClusters.
const REGISTRY_SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// How the session server runs.
#[derive(Debug, Clone)]
pub struct SessionConfig {
    /// The hub's namespace: the CA Secret and bootstrap tokens live here.
    pub namespace: String,
    /// Name of the CA Secret (`kubernetes.io/tls`).
    pub ca_secret: String,
    /// DNS names and IP addresses of the server certificate.
    pub server_sans: Vec<String>,
    /// Lifetime of the client certificates issued.
    pub client_cert_lifetime: Duration,
    /// How often the hub pings an agent.
    pub heartbeat_interval: Duration,
    /// Silence after which a session is ended (also the wait for the Hello).
    pub heartbeat_timeout: Duration,
    /// How often a session looks whether the ManagedCluster's `plansHeld` changed (written
    /// then, with the heartbeat, when it did and the heartbeat budget allows); each session
    /// at its own random phase.
    pub status_interval: Duration,
    /// The longest `status.lastHeartbeatTime` of a connected cluster goes unwritten. The
    /// hub's own view of liveness is the session (held in memory: pings both ways, ended
    /// past `heartbeat_timeout`); the field is for people and tools reading the object, so
    /// it is written seldom: with 1,000 clusters every 5 min that is 3.3 writes/s.
    pub heartbeat_write_interval: Duration,
    /// Heartbeat writes a second across all sessions ([`cluster_status::WriteBudget`]); a
    /// session over budget writes at a later status tick.
    pub heartbeat_writes_per_second: f64,
    /// Where the sessions count (`flotilla_hub_agent_sessions`, chart archives sent,
    /// heartbeat writes): the hub's `/metrics` in the binary.
    pub metrics: crate::telemetry::HubMetrics,
    /// Where the server and its ManagedCluster watch report their end
    /// ([`crate::supervisor`]): the binary's, shared with its controllers.
    pub supervisor: crate::supervisor::Supervisor,
    /// How often the hub deletes the bootstrap token Secrets past their expiration.
    pub token_sweep_interval: Duration,
    /// How many `Register` calls the hub takes ([`limits::RegisterGate`]).
    pub register: limits::RegisterLimits,
}

impl Default for SessionConfig {
    fn default() -> Self {
        Self {
            namespace: "flotilla-system".into(),
            ca_secret: "flotilla-hub-ca".into(),
            server_sans: vec!["localhost".into(), "127.0.0.1".into()],
            client_cert_lifetime: pki::DEFAULT_CLIENT_LIFETIME,
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_timeout: Duration::from_secs(35),
            status_interval: Duration::from_secs(30),
            heartbeat_write_interval: Duration::from_secs(300),
            heartbeat_writes_per_second: 20.0,
            metrics: crate::telemetry::HubMetrics::new(),
            supervisor: Default::default(),
            token_sweep_interval: Duration::from_secs(60),
            register: limits::RegisterLimits::default(),
        }
    }
}

/// Why the session server could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The CA could not be loaded or made.
    #[error("the hub CA")]
    Pki(#[from] pki::PkiError),
    /// The TLS configuration was refused.
    #[error("configuring TLS")]
    Tls(#[source] tonic::transport::Error),
    /// The listener's address could not be read.
    #[error("reading the listener's address")]
    Listener(#[source] std::io::Error),
}

/// The running session server.
#[derive(Debug)]
pub struct SessionHub {
    links: Arc<RemoteLinks>,
    registry: Arc<Registry>,
    ca: Arc<HubCa>,
    addr: SocketAddr,
    stop: Option<oneshot::Sender<()>>,
    stopping: tokio::sync::watch::Sender<bool>,
    server: JoinHandle<()>,
    watch: JoinHandle<()>,
    sweep: JoinHandle<()>,
    metrics: crate::telemetry::HubMetrics,
    supervisor: crate::supervisor::Supervisor,
}

impl SessionHub {
    /// Loads or creates the CA, starts watching ManagedClusters (and waits for their first
    /// list, at most 30 s) and serves on `listener`. Reports of every cluster go into
    /// `reports`; `GetChart` serves from `charts`.
    pub async fn start(
        client: kube::Client,
        config: SessionConfig,
        listener: TcpListener,
        reports: ReportSink,
        charts: Arc<dyn ChartArchives>,
    ) -> Result<Self, StartError> {
        let ca = Arc::new(
            HubCa::load_or_create(client.clone(), &config.namespace, &config.ca_secret).await?,
        );
        let server_cert = ca.server_certificate(&config.server_sans)?;
        reports.count_into(config.metrics.clone());
        let links = Arc::new(RemoteLinks::new(reports));
        let registry = Arc::new(Registry::new(links.clone()));
        let supervisor = config.supervisor.clone();
        let watch = tokio::spawn(
            supervisor.critical("managedcluster-watch", registry.clone().run(client.clone())),
        );
        // The ManagedClusters are known before the controllers start and before an agent
        // is answered: otherwise a restarted hub refuses the agents that reconnect first
        // and marks their HelmReleases "no agent connected".
        if !registry.wait_synced(REGISTRY_SYNC_TIMEOUT).await {
            tracing::warn!(
                timeout = ?REGISTRY_SYNC_TIMEOUT,
                "the ManagedClusters were not listed in time; serving sessions anyway"
            );
        }
        let addr = listener.local_addr().map_err(StartError::Listener)?;
        let (stopping, stopping_rx) = tokio::sync::watch::channel(false);
        let redemptions = Arc::new(tokens::Redemptions::new(
            client.clone(),
            config.namespace.clone(),
        ));
        let heartbeats = Arc::new(cluster_status::WriteBudget::new(
            config.heartbeat_writes_per_second,
        ));
        let metrics = config.metrics.clone();
        let sweep = tokio::spawn(supervisor.critical(
            "bootstrap-token-sweep",
            sweep_tokens(
                client.clone(),
                config.namespace.clone(),
                config.token_sweep_interval,
            ),
        ));
        let renewals = Arc::new(enrollment::RenewLimiter::new(enrollment::renew_interval(
            config.client_cert_lifetime,
        )));
        let register_gate = Arc::new(limits::RegisterGate::new(config.register));
        let service = server::HubService {
            renewals,
            register_gate,
            stopping: stopping_rx,
            charts,
            client,
            config: Arc::new(config),
            ca: ca.clone(),
            registry: registry.clone(),
            links: links.clone(),
            sessions: Arc::new(AtomicU64::new(0)),
            redemptions,
            heartbeats,
            inline: Arc::new(server::InlineArchives::default()),
        };
        let tls = ServerTlsConfig::new()
            .identity(Identity::from_pem(
                &server_cert.cert_pem,
                &server_cert.key_pem,
            ))
            .client_ca_root(Certificate::from_pem(ca.cert_pem()))
            .client_auth_optional(true)
            .timeout(limits::TLS_HANDSHAKE_TIMEOUT);
        // One service, no router: the Hub service answers unknown paths itself. What one
        // peer may cost is bounded here (see `limits`).
        let server = Server::builder()
            .tls_config(tls)
            .map_err(StartError::Tls)?
            .timeout(limits::REQUEST_TIMEOUT)
            .max_concurrent_streams(limits::MAX_STREAMS_PER_CONNECTION)
            .http2_max_header_list_size(limits::MAX_HEADER_LIST_SIZE)
            .http2_keepalive_interval(Some(limits::HTTP2_KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(limits::HTTP2_KEEPALIVE_TIMEOUT))
            .layer(server::IdentityLayer::new(registry.clone()));
        let service = HubServer::new(service)
            .max_decoding_message_size(limits::MAX_AGENT_MESSAGE)
            .max_encoding_message_size(limits::MAX_HUB_MESSAGE);
        let (stop, stopped) = oneshot::channel::<()>();
        let server = tokio::spawn(supervisor.critical("session-server", async move {
            let incoming = TcpListenerStream::new(listener);
            if let Err(e) = server
                .serve_with_incoming_shutdown(service, incoming, async {
                    let _ = stopped.await;
                })
                .await
            {
                tracing::error!(error = %e, "the session server stopped");
            }
        }));
        tracing::info!(%addr, pin = %ca.pin(), "serving agent sessions");
        Ok(Self {
            links,
            registry,
            ca,
            addr,
            stop: Some(stop),
            stopping,
            server,
            watch,
            sweep,
            metrics,
            supervisor,
        })
    }

    /// The metrics the sessions count into ([`SessionConfig::metrics`]).
    pub fn metrics(&self) -> &crate::telemetry::HubMetrics {
        &self.metrics
    }

    /// The links of registered clusters (the controller's `Links` for
    /// `TargetId::Cluster`).
    pub fn links(&self) -> Arc<RemoteLinks> {
        self.links.clone()
    }

    /// The ManagedCluster registry.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.clone()
    }

    /// The CA.
    pub fn ca(&self) -> Arc<HubCa> {
        self.ca.clone()
    }

    /// The address served.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (sessions end) and watching.
    pub async fn stop(mut self) {
        // The process is stopping: the server's end is no failure.
        self.supervisor.stopping();
        self.stopping.send_replace(true);
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.watch.abort();
        self.sweep.abort();
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut self.server).await;
        self.server.abort();
    }
}

impl Drop for SessionHub {
    fn drop(&mut self) {
        self.stopping.send_replace(true);
        self.watch.abort();
        self.sweep.abort();
        self.server.abort();
    }
}

/// Deletes expired bootstrap token Secrets every `interval` (each sweep with a deadline),
/// until aborted.
async fn sweep_tokens(client: kube::Client, namespace: String, interval: Duration) {
    let mut tick = tokio::time::interval(interval.max(Duration::from_secs(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match tokio::time::timeout(
            Duration::from_secs(30),
            tokens::remove_expired(client.clone(), &namespace),
        )
        .await
        {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "removing expired bootstrap tokens"),
            Err(_) => tracing::warn!("removing expired bootstrap tokens: timed out"),
        }
    }
}
