//! The agent's end of the hub–agent session.
//!
//! - [`join`]: `flotilla-agent join --hub URL --ca-hash H --cluster-name N`, the token in
//!   `$FLOTILLA_BOOTSTRAP_TOKEN` or `--token-file` (an agent that already joined resumes from
//!   its stored identity without one). Generates the agent's
//!   key (kept in the identity Secret of its own namespace, [`identity`]; it never leaves
//!   the cluster), verifies the hub against the CA pin before sending anything
//!   ([`tls::pinned_config`]), sends the bootstrap token with a CSR and the cluster's
//!   identity (the `kube-system` namespace UID), and polls while the ManagedCluster waits
//!   for acceptance. The certificate and the hub's CA go into the identity Secret.
//! - [`run`]: the session, one client of the agent runtime. Connects with mutual TLS,
//!   reconnects with capped exponential backoff and full jitter (but every second or so
//!   while the hub's address refuses connections: a hub that is down or restarting is
//!   found again within moments of its return; an expired certificate is not tried at all:
//!   an error line says to `join` again), sends a Hello with the
//!   plans held (revisions and status digests), applies what the hub sends (plans become
//!   [`Command::Upsert`], deletions [`Command::Delete`]; each acknowledged, or rejected with
//!   the field at fault), forwards the runtime's reports, answers and sends pings, and
//!   renews its certificate over the session two thirds into its lifetime; the Hello
//!   lists the chart archives in the cache, a plan may come with its chart's archive (put
//!   in the cache once its digest is checked), and the chart cache fetches missing
//!   archives over the same connection ([`charts::HubCharts`], `GetChart`). With the hub
//!   away the runtime goes on reconciling on its own; after reconnecting, the statuses the
//!   hub lacks (by digest) are sent again.
//!
//! Both take the agent's own cluster as an [`AgentCluster`] (its identity Secret and the
//! facts the Hello carries): `kube::Client` in the agent; an in-memory one in simulated
//! agents (`cargo xtask bench-sessions`), which also stand in for the runtime with
//! [`crate::runtime::external`].
//!
//! Secrets: the token, the key and plan values are never logged; [`Identity`] and
//! [`JoinOptions`] redact them in Debug output.

pub mod charts;
pub mod identity;
pub mod tls;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use flotilla_core::agent::{Command, DeleteRequest, ObjectKey, Report, StatusReport};
use flotilla_core::plan::ReleasePlan;
use flotilla_proto::session::{object_key, report_message};
use flotilla_proto::v1::{self, agent_message, hub_message, register_response};
use k8s_openapi::api::core::v1::Namespace;
use kube::Api;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use identity::Identity;
pub use tls::{CaPin, HubAddress};

use crate::runtime::{AgentHandle, Reports};
use crate::telemetry::ChartReceived;

/// Why joining or a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// A command-line setting is wrong.
    #[error("{field}: {message}")]
    Config {
        /// The flag.
        field: &'static str,
        /// What is wrong.
        message: String,
    },
    /// A TLS configuration could not be built.
    #[error("TLS: {message}")]
    Tls {
        /// What failed.
        message: String,
    },
    /// Nothing listens at the hub's address (the connection was refused): the hub is
    /// down or restarting. Retried soon and often ([`SessionOptions::unreachable_retry`]):
    /// a refused connection costs the hub nothing.
    #[error("connecting to the hub {hub}: {message}")]
    Unreachable {
        /// The hub's URL.
        hub: String,
        /// What failed.
        message: String,
    },
    /// The hub could not be reached, or its certificate was refused (wrong CA pin).
    #[error("connecting to the hub {hub}: {message}")]
    Connect {
        /// The hub's URL.
        hub: String,
        /// What failed.
        message: String,
    },
    /// The hub refused the registration (token wrong, expired, used up; cluster taken).
    #[error("the hub refused the registration: {message}")]
    Refused {
        /// The hub's reason.
        message: String,
    },
    /// The hub answered something that breaks the protocol.
    #[error("the hub broke the protocol: {message}")]
    Protocol {
        /// What was wrong.
        message: String,
    },
    /// A gRPC call failed (transient: retried).
    #[error("{what}: {status}")]
    Rpc {
        /// Which call.
        what: &'static str,
        /// gRPC code and message.
        status: String,
    },
    /// The client certificate or key is unusable.
    #[error("{message}")]
    Certificate {
        /// What is wrong.
        message: String,
    },
    /// The workload cluster's API failed.
    #[error("{what}: {}", crate::kube::error_chain(source))]
    Kube {
        /// What was being done.
        what: &'static str,
        /// The API error.
        #[source]
        source: kube::Error,
    },
}

impl SessionError {
    /// A bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Config { .. } => "config",
            Self::Tls { .. } => "tls",
            Self::Unreachable { .. } => "unreachable",
            Self::Connect { .. } => "connect",
            Self::Refused { .. } => "refused",
            Self::Protocol { .. } => "protocol",
            Self::Rpc { .. } => "rpc",
            Self::Certificate { .. } => "certificate",
            Self::Kube { .. } => "kube",
        }
    }

    /// Whether retrying may help without a change of configuration.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            Self::Unreachable { .. }
                | Self::Connect { .. }
                | Self::Rpc { .. }
                | Self::Kube { .. }
                | Self::Protocol { .. }
        )
    }
}

/// What the session needs from the agent's own cluster: where its identity is kept, and
/// the facts the Hello and the registration carry.
pub trait AgentCluster: Send + Sync {
    /// The stored identity (empty when none is stored yet).
    fn load_identity(
        &self,
        namespace: &str,
    ) -> impl Future<Output = Result<identity::Stored, SessionError>> + Send;
    /// Stores the identity.
    fn store_identity(
        &self,
        namespace: &str,
        stored: &identity::Stored,
    ) -> impl Future<Output = Result<(), SessionError>> + Send;
    /// The cluster's identity (the `kube-system` namespace UID).
    fn cluster_uid(&self) -> impl Future<Output = Result<String, SessionError>> + Send;
    /// The Kubernetes version (`gitVersion`); empty when unknown.
    fn kubernetes_version(&self) -> impl Future<Output = String> + Send;
}

/// The agent's cluster through its API: the identity Secret of the agent's namespace.
impl AgentCluster for kube::Client {
    async fn load_identity(&self, namespace: &str) -> Result<identity::Stored, SessionError> {
        identity::load(self, namespace).await
    }

    async fn store_identity(
        &self,
        namespace: &str,
        stored: &identity::Stored,
    ) -> Result<(), SessionError> {
        identity::store(self, namespace, stored).await
    }

    async fn cluster_uid(&self) -> Result<String, SessionError> {
        cluster_uid(self).await
    }

    async fn kubernetes_version(&self) -> String {
        self.apiserver_version()
            .await
            .map(|v| v.git_version)
            .unwrap_or_default()
    }
}

/// The cluster's identity: the UID of its `kube-system` namespace.
pub async fn cluster_uid(client: &kube::Client) -> Result<String, SessionError> {
    let ns = Api::<Namespace>::all(client.clone())
        .get("kube-system")
        .await
        .map_err(|source| SessionError::Kube {
            what: "reading the kube-system namespace",
            source,
        })?;
    ns.metadata.uid.ok_or_else(|| SessionError::Protocol {
        message: "the kube-system namespace has no uid".into(),
    })
}

/// The environment variable `join` reads the bootstrap token from.
pub const TOKEN_ENV: &str = "FLOTILLA_BOOTSTRAP_TOKEN";

/// What `join` needs.
#[derive(Clone)]
pub struct JoinOptions {
    /// The hub.
    pub hub: HubAddress,
    /// The bootstrap token: secret. Not needed by an agent that already joined.
    pub token: Option<String>,
    /// The CA pin.
    pub ca_pin: CaPin,
    /// The ManagedCluster name to ask for.
    pub cluster_name: String,
    /// The agent's namespace (its identity Secret).
    pub namespace: String,
    /// How often to ask again while the ManagedCluster waits for acceptance.
    pub poll_interval: Duration,
}

impl std::fmt::Debug for JoinOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JoinOptions")
            .field("hub", &self.hub)
            .field("token", &"<redacted>")
            .field("ca_pin", &self.ca_pin)
            .field("cluster_name", &self.cluster_name)
            .field("namespace", &self.namespace)
            .finish()
    }
}

fn csr_pem(key_pem: &str, cluster: &str) -> Result<String, SessionError> {
    let key = rcgen::KeyPair::from_pem(key_pem).map_err(|_| SessionError::Certificate {
        message: "the stored agent key is not usable".into(),
    })?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, cluster);
    params
        .serialize_request(&key)
        .and_then(|csr| csr.pem())
        .map_err(|e| SessionError::Certificate {
            message: format!("making a certificate signing request: {e}"),
        })
}

fn rpc(what: &'static str, s: &tonic::Status) -> SessionError {
    SessionError::Rpc {
        what,
        status: format!("{:?}: {}", s.code(), s.message()),
    }
}

/// Joins the hub (or returns the stored identity when this cluster already joined it).
pub async fn join(
    cluster: &impl AgentCluster,
    options: &JoinOptions,
) -> Result<Identity, SessionError> {
    let mut stored = cluster.load_identity(&options.namespace).await?;
    if let Some(identity) = Identity::from_stored(&stored) {
        let identity = identity?;
        let expired = identity.expired()?;
        if let Some(end) = expired {
            tracing::warn!(
                cluster = %identity.cluster,
                expired_at = %identity::rfc3339(end),
                "the stored client certificate has expired: joining again with the token"
            );
        }
        if expired.is_none()
            && identity.hub == options.hub
            && identity.cluster == options.cluster_name
            && CaPin::of_certificate(
                &x509_parser::pem::parse_x509_pem(identity.ca_pem.as_bytes())
                    .map(|(_, b)| b.contents)
                    .unwrap_or_default(),
            )
            .as_ref()
                == Some(&options.ca_pin)
        {
            tracing::info!(cluster = %identity.cluster, "already joined");
            return Ok(identity);
        }
    }
    let Some(token) = options.token.clone() else {
        return Err(SessionError::Config {
            field: "token",
            message: format!(
                "not joined to {} as {} yet (or the stored certificate has expired): give the bootstrap token in ${} or with --token-file",
                options.hub.url(),
                options.cluster_name,
                TOKEN_ENV
            ),
        });
    };
    let uid = cluster.cluster_uid().await?;
    if stored.key_pem.is_none() {
        let key = rcgen::KeyPair::generate().map_err(|e| SessionError::Certificate {
            message: format!("generating the agent key: {e}"),
        })?;
        stored.key_pem = Some(key.serialize_pem());
    }
    stored.hub = Some(options.hub.url());
    stored.cluster = Some(options.cluster_name.clone());
    stored.cert_pem = None;
    stored.ca_pem = None;
    cluster.store_identity(&options.namespace, &stored).await?;
    let key_pem = stored.key_pem.clone().unwrap_or_default();
    let csr = csr_pem(&key_pem, &options.cluster_name)?;
    let mut backoff = Backoff::new(Duration::from_secs(1), Duration::from_secs(30));
    loop {
        let attempt = async {
            let channel = tls::channel(&options.hub, tls::pinned_config(&options.ca_pin)?).await?;
            tls::hub_client(channel)
                .register(v1::RegisterRequest {
                    bootstrap_token: token.clone(),
                    csr_pem: csr.clone().into_bytes(),
                    cluster_uid: uid.clone(),
                    agent_version: env!("CARGO_PKG_VERSION").to_owned(),
                    cluster_name: options.cluster_name.clone(),
                })
                .await
                .map(tonic::Response::into_inner)
                .map_err(|s| match s.code() {
                    // RESOURCE_EXHAUSTED: the hub's registration gate is full; later.
                    tonic::Code::Unavailable
                    | tonic::Code::Internal
                    | tonic::Code::Unknown
                    | tonic::Code::DeadlineExceeded
                    | tonic::Code::ResourceExhausted => rpc("Register", &s),
                    _ => SessionError::Refused {
                        message: s.message().to_owned(),
                    },
                })
        };
        let response = match attempt.await {
            Ok(r) => r,
            Err(e)
                if e.is_transient()
                    && !matches!(e, SessionError::Connect { ref message, .. } if message.contains("CA pin")) =>
            {
                let wait = backoff.next_wait();
                tracing::warn!(error = %e, retry_in = ?wait, "registering with the hub");
                tokio::time::sleep(wait).await;
                continue;
            }
            Err(e) => return Err(e),
        };
        match register_response::State::try_from(response.state) {
            Ok(register_response::State::Accepted) => {
                let ca_pem =
                    String::from_utf8(response.ca_pem).map_err(|_| SessionError::Protocol {
                        message: "the hub's CA is not PEM text".into(),
                    })?;
                let ca_der = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes())
                    .map(|(_, b)| b.contents)
                    .map_err(|_| SessionError::Protocol {
                        message: "the hub's CA is not PEM".into(),
                    })?;
                if CaPin::of_certificate(&ca_der).as_ref() != Some(&options.ca_pin) {
                    return Err(SessionError::Protocol {
                        message: "the CA the hub returned does not match the CA pin".into(),
                    });
                }
                let cert_pem = String::from_utf8(response.certificate_pem).map_err(|_| {
                    SessionError::Protocol {
                        message: "the certificate is not PEM text".into(),
                    }
                })?;
                stored.ca_pem = Some(ca_pem);
                stored.cert_pem = Some(cert_pem);
                cluster.store_identity(&options.namespace, &stored).await?;
                tracing::info!(cluster = %options.cluster_name, "joined the hub");
                return Identity::from_stored(&stored).unwrap_or_else(|| {
                    Err(SessionError::Protocol {
                        message: "the identity is incomplete".into(),
                    })
                });
            }
            Ok(register_response::State::Pending) => {
                tracing::info!(cluster = %options.cluster_name, message = %response.message, "waiting for the hub to accept the cluster");
                tokio::time::sleep(options.poll_interval).await;
            }
            Ok(register_response::State::Rejected) => {
                return Err(SessionError::Refused {
                    message: response.message,
                });
            }
            Ok(register_response::State::Unspecified) | Err(_) => {
                return Err(SessionError::Protocol {
                    message: format!("unknown registration state {}", response.state),
                });
            }
        }
    }
}

/// Capped exponential backoff with full jitter.
#[derive(Debug, Clone)]
pub struct Backoff {
    min: Duration,
    max: Duration,
    attempt: u32,
}

impl Backoff {
    /// Starts at `min`, doubles to at most `max`.
    pub fn new(min: Duration, max: Duration) -> Self {
        Self {
            min,
            max,
            attempt: 0,
        }
    }

    /// The next wait: a random duration in `[ceiling/2, ceiling]`, where the ceiling
    /// doubles each time up to the cap.
    pub fn next_wait(&mut self) -> Duration {
        let ceiling = self
            .min
            .saturating_mul(1u32 << self.attempt.min(16))
            .min(self.max);
        self.attempt = self.attempt.saturating_add(1);
        ceiling / 2 + ceiling.mul_f64(fastrand::f64() / 2.0)
    }

    /// Back to the first wait.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

/// How a session behaves.
#[derive(Debug, Clone)]
pub struct SessionOptions {
    /// The agent's namespace (its identity Secret).
    pub namespace: String,
    /// How often the agent pings the hub.
    pub heartbeat_interval: Duration,
    /// Silence after which the agent drops the session and reconnects.
    pub heartbeat_timeout: Duration,
    /// The first reconnect wait.
    pub backoff_min: Duration,
    /// The longest reconnect wait.
    pub backoff_max: Duration,
    /// The reconnect wait while nothing listens at the hub's address (a refused
    /// connection: the hub is down or restarting), jittered down to half: the backoff is
    /// for a hub that answers and fails, not for one that is away, so that an agent is back
    /// within moments of the hub.
    pub unreachable_retry: Duration,
    /// The chart cache: its digests go in the Hello, archives sent with plans go into it,
    /// and its fetcher is given the session's connection for `GetChart`.
    pub charts: Option<Arc<crate::cmd::ChartCache>>,
    /// Told of every plan this agent acknowledges, when the ack is sent (a benchmark's
    /// measure of "acknowledged by the agent"; `None` in the agent).
    pub acked: Option<mpsc::UnboundedSender<PlanAcked>>,
    /// The agent's metrics: chart archives received with plans are counted there.
    pub metrics: Option<crate::telemetry::Metrics>,
}

/// A plan the session acknowledged to the hub ([`SessionOptions::acked`]).
#[derive(Debug, Clone)]
pub struct PlanAcked {
    /// The HelmRelease.
    pub object: ObjectKey,
    /// The plan's revision.
    pub revision: flotilla_core::ids::PlanRevision,
    /// The plan's chart version.
    pub chart_version: String,
    /// When the ack was handed to the outgoing stream.
    pub at: std::time::Instant,
}

impl Default for SessionOptions {
    fn default() -> Self {
        Self {
            namespace: "flotilla-system".into(),
            heartbeat_interval: Duration::from_secs(10),
            heartbeat_timeout: Duration::from_secs(35),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            unreachable_retry: Duration::from_secs(1),
            charts: None,
            acked: None,
            metrics: None,
        }
    }
}

type Latest = Arc<Mutex<BTreeMap<ObjectKey, StatusReport>>>;

/// The most chart digests a Hello lists (the hub remembers as many).
const MAX_HELLO_CHARTS: usize = 1024;

/// How often an agent whose certificate expired looks for a new one in its identity Secret.
const EXPIRED_RECHECK: Duration = Duration::from_secs(60);

/// Runs the session until `stop` is cancelled or the runtime's reports end (after a
/// [`Command::Shutdown`]). Never gives up on the hub: every failure is logged and retried
/// with backoff ([`SessionOptions::unreachable_retry`] while nothing listens at its
/// address); with an expired certificate it looks for a new one in the identity Secret
/// every minute.
pub async fn run<C: AgentCluster>(
    client: C,
    identity: Identity,
    agent: AgentHandle,
    reports: Reports,
    options: SessionOptions,
    stop: CancellationToken,
) {
    if let Some(charts) = &options.charts {
        charts.fetcher().enable();
    }
    let latest: Latest = Arc::new(Mutex::new(BTreeMap::new()));
    // Unbounded with a reason: it carries this agent's own reports (see `Agent::start`),
    // emptied at every (re)connection (the Hello's status digests cover what happened
    // while away) and drained by the session's writer while connected.
    let (live_tx, mut live_rx) = mpsc::unbounded_channel();
    let reports_done = CancellationToken::new();
    let forwarder = tokio::spawn(forward_reports(
        reports,
        latest.clone(),
        live_tx,
        reports_done.clone(),
    ));
    let mut session = Session {
        client,
        identity,
        agent,
        options,
        latest,
        unreachable_since: None,
    };
    let mut backoff = Backoff::new(session.options.backoff_min, session.options.backoff_max);
    let mut told_expired = false;
    loop {
        session.record_expiry();
        // What happened while away is covered by the Hello's digests.
        while live_rx.try_recv().is_ok() {}
        // An expired certificate is refused by the hub: say so once, and look for a new
        // one in the identity Secret now and then (a `join` run meanwhile).
        if let Some(end) = session.identity.expired().ok().flatten() {
            if let Some(renewed) = session.stored_renewal().await {
                session.identity = renewed;
                continue;
            }
            if !told_expired {
                told_expired = true;
                tracing::error!(
                    cluster = %session.identity.cluster,
                    expired_at = %identity::rfc3339(end),
                    "the client certificate has expired and the hub refuses it: join again with a new bootstrap token \
                     (flotilla-agent join --hub {} --ca-hash <pin> --cluster-name {}; `flotilla token create` prints it). \
                     Until then the agent reconciles the plans it holds without the hub",
                    session.identity.hub.url(),
                    session.identity.cluster,
                );
            }
            tokio::select! {
                () = tokio::time::sleep(EXPIRED_RECHECK) => {}
                () = stop.cancelled() => break,
                () = reports_done.cancelled() => break,
            }
            continue;
        }
        let started = tokio::time::Instant::now();
        let outcome = tokio::select! {
            outcome = session.connect_once(&mut live_rx) => {
                if let Some(charts) = &session.options.charts {
                    charts.fetcher().disconnect();
                }
                outcome
            }
            () = stop.cancelled() => break,
            () = reports_done.cancelled() => break,
        };
        let wait = match outcome {
            Ok(Ended::ReportsEnded) => break,
            Err(e @ SessionError::Unreachable { .. }) => {
                let retry = session.options.unreachable_retry;
                let wait = retry / 2 + retry.mul_f64(fastrand::f64() / 2.0);
                match session.unreachable_since {
                    None => {
                        session.unreachable_since = Some(started);
                        tracing::warn!(error = %e, retry_every = ?retry, "the hub is unreachable; reconciling on without it");
                    }
                    Some(since) => {
                        tracing::debug!(error = %e, unreachable_for = ?since.elapsed(), retry_in = ?wait, "the hub is still unreachable");
                    }
                }
                wait
            }
            other => {
                match other {
                    Ok(Ended::Closed(reason)) => tracing::info!(%reason, "the session ended"),
                    Err(e) => tracing::warn!(error = %e, "session with the hub"),
                    Ok(Ended::ReportsEnded) => {}
                }
                session.unreachable_since = None;
                if started.elapsed() > Duration::from_secs(60) {
                    backoff.reset();
                }
                let wait = backoff.next_wait();
                tracing::info!(retry_in = ?wait, "reconnecting to the hub");
                wait
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            () = stop.cancelled() => break,
            () = reports_done.cancelled() => break,
        }
    }
    forwarder.abort();
}

async fn forward_reports(
    mut reports: Reports,
    latest: Latest,
    live: mpsc::UnboundedSender<Report>,
    done: CancellationToken,
) {
    let _done = done.drop_guard();
    while let Some(report) = reports.recv().await {
        match &report {
            Report::Status(s) => {
                latest
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(s.object.key(), (**s).clone());
            }
            Report::Deleted { object, .. } => {
                latest
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(object);
            }
            Report::Event { .. } | Report::Rejected { .. } | Report::Preview(_) => {}
        }
        if live.send(report).is_err() {
            break;
        }
    }
}

enum Ended {
    ReportsEnded,
    Closed(String),
}

struct Session<C> {
    client: C,
    identity: Identity,
    agent: AgentHandle,
    options: SessionOptions,
    latest: Latest,
    /// Since when the hub's address has refused connections (logged once, not at every
    /// retry).
    unreachable_since: Option<tokio::time::Instant>,
}

fn now_timestamp() -> flotilla_core::meta::Timestamp {
    crate::reconcile::now()
}

impl<C: AgentCluster> Session<C> {
    /// The identity Secret's certificate, when it is not the one in use and has not
    /// expired.
    async fn stored_renewal(&self) -> Option<Identity> {
        let stored = self
            .client
            .load_identity(&self.options.namespace)
            .await
            .ok()?;
        let identity = Identity::from_stored(&stored)?.ok()?;
        (identity.cert_pem != self.identity.cert_pem && identity.expired().ok()?.is_none())
            .then_some(identity)
    }

    async fn hello(&self) -> v1::Hello {
        let kubernetes_version = self.client.kubernetes_version().await;
        v1::Hello {
            cluster_uid: self.client.cluster_uid().await.unwrap_or_default(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            kubernetes_version,
            api_versions: Vec::new(),
            held_plans: self.agent.held().into_iter().map(Into::into).collect(),
            cached_chart_digests: self.cached_chart_digests(),
            features: vec![flotilla_core::preview::FEATURE.to_owned()],
        }
    }

    /// The cache's archives for the Hello: the [`MAX_HELLO_CHARTS`] most recently used.
    fn cached_chart_digests(&self) -> Vec<String> {
        let Some(charts) = &self.options.charts else {
            return Vec::new();
        };
        let digests = charts.cached_digests();
        let skip = digests.len().saturating_sub(MAX_HELLO_CHARTS);
        digests
            .into_iter()
            .skip(skip)
            .map(|d| d.to_string())
            .collect()
    }

    async fn connect_once(
        &mut self,
        live: &mut mpsc::UnboundedReceiver<Report>,
    ) -> Result<Ended, SessionError> {
        let config = tls::session_config(
            &self.identity.ca_pem,
            &self.identity.cert_pem,
            &self.identity.key_pem,
        )?;
        let channel = tls::channel(&self.identity.hub, config).await?;
        if let Some(charts) = &self.options.charts {
            charts.fetcher().connect(channel.clone());
        }
        let (tx, rx) = mpsc::channel::<v1::AgentMessage>(64);
        let hello = self.hello().await;
        tx.send(v1::AgentMessage {
            kind: Some(agent_message::Kind::Hello(hello)),
        })
        .await
        .map_err(|_| SessionError::Protocol {
            message: "the outgoing stream closed".into(),
        })?;
        let mut inbound = tls::hub_client(channel)
            .session(tokio_stream::wrappers::ReceiverStream::new(rx))
            .await
            .map_err(|s| rpc("Session", &s))?
            .into_inner();
        match self.unreachable_since.take() {
            Some(since) => {
                tracing::info!(cluster = %self.identity.cluster, unreachable_for = ?since.elapsed(), "session up")
            }
            None => tracing::info!(cluster = %self.identity.cluster, "session up"),
        }
        let mut ping = tokio::time::interval(self.options.heartbeat_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_heard = tokio::time::Instant::now();
        let mut nonce = 0u64;
        let mut renewing = false;
        loop {
            let renew_in = self
                .identity
                .renew_at()?
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO);
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(m)) => {
                        last_heard = tokio::time::Instant::now();
                        if let Some(kind) = m.kind {
                            self.handle(kind, &tx, &mut renewing).await?;
                        }
                    }
                    Ok(None) => return Ok(Ended::Closed("the hub closed the session".into())),
                    Err(s) => return Err(rpc("Session", &s)),
                },
                report = live.recv() => match report {
                    Some(report) => {
                        let message = report_message(report, &now_timestamp());
                        if tx.send(message).await.is_err() {
                            return Ok(Ended::Closed("the outgoing stream closed".into()));
                        }
                    }
                    None => return Ok(Ended::ReportsEnded),
                },
                _ = ping.tick() => {
                    if last_heard.elapsed() > self.options.heartbeat_timeout {
                        return Ok(Ended::Closed("no message from the hub within the heartbeat timeout".into()));
                    }
                    nonce += 1;
                    let _ = tx.try_send(v1::AgentMessage { kind: Some(agent_message::Kind::Ping(v1::Ping { nonce })) });
                }
                () = tokio::time::sleep(renew_in), if !renewing => {
                    renewing = true;
                    tracing::info!(cluster = %self.identity.cluster, "renewing the client certificate");
                    let csr = csr_pem(&self.identity.key_pem, &self.identity.cluster)?;
                    let _ = tx.send(v1::AgentMessage { kind: Some(agent_message::Kind::Renew(v1::RenewCertificate { csr_pem: csr.into_bytes() })) }).await;
                }
            }
        }
    }

    async fn send(
        tx: &mpsc::Sender<v1::AgentMessage>,
        kind: agent_message::Kind,
    ) -> Result<(), SessionError> {
        tx.send(v1::AgentMessage { kind: Some(kind) })
            .await
            .map_err(|_| SessionError::Protocol {
                message: "the outgoing stream closed".into(),
            })
    }

    /// Sends the latest status of `key` again; when this agent has reported none since it
    /// started, asks the runtime for a reconcile, which reports.
    async fn resend_status(
        &self,
        key: ObjectKey,
        tx: &mpsc::Sender<v1::AgentMessage>,
    ) -> Result<(), SessionError> {
        let status = self
            .latest
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&key)
            .cloned();
        match status {
            Some(s) => {
                let message = report_message(Report::Status(Box::new(s)), &now_timestamp());
                tx.send(message).await.map_err(|_| SessionError::Protocol {
                    message: "the outgoing stream closed".into(),
                })
            }
            // Not reported since this agent started: a reconcile reports it.
            None => self
                .agent
                .send(Command::Reconcile(key))
                .map_err(|_| SessionError::Protocol {
                    message: "the agent runtime has stopped".into(),
                }),
        }
    }

    /// `flotilla_agent_certificate_expiry_timestamp_seconds`: the current certificate's end.
    fn record_expiry(&self) {
        if let (Some(metrics), Ok((_, end))) = (&self.options.metrics, self.identity.validity()) {
            metrics.set_certificate_expiry(end);
        }
    }

    async fn handle(
        &mut self,
        kind: hub_message::Kind,
        tx: &mpsc::Sender<v1::AgentMessage>,
        renewing: &mut bool,
    ) -> Result<(), SessionError> {
        let stopped = || SessionError::Protocol {
            message: "the agent runtime has stopped".into(),
        };
        match kind {
            hub_message::Kind::PlanUpsert(upsert) => {
                let archive = upsert.chart_archive;
                let wire = upsert.plan.unwrap_or_default();
                let object = wire.object.clone();
                let revision = wire.revision;
                match ReleasePlan::try_from(wire) {
                    Ok(plan) => {
                        let key = plan.object.key();
                        tracing::debug!(object = %key, revision, "plan received");
                        // Its chart, when the hub sent it along: cached before the runtime
                        // looks for it. One that fails its check is dropped; the runtime
                        // fetches the chart with GetChart as it would have.
                        if !archive.is_empty()
                            && let Some(charts) = &self.options.charts
                        {
                            let received = match charts
                                .put(&plan.chart.digest, archive.to_vec())
                                .await
                            {
                                Ok(()) => ChartReceived::Cached,
                                Err(e) => {
                                    tracing::warn!(object = %key, revision, error = %e, "the chart sent with a plan was not cached");
                                    ChartReceived::Rejected
                                }
                            };
                            if let Some(metrics) = &self.options.metrics {
                                metrics.chart_received(received);
                            }
                        }
                        // A plan the runtime already holds at this revision is a no-op for
                        // it (no report): a hub that lost track (restarted) still needs the
                        // status, so it is sent again.
                        let already_held = self
                            .agent
                            .held()
                            .iter()
                            .any(|h| h.object == key && h.revision == plan.revision);
                        let acked = self.options.acked.as_ref().map(|observer| {
                            (
                                observer,
                                PlanAcked {
                                    object: key.clone(),
                                    revision: plan.revision,
                                    chart_version: plan.chart.version.clone(),
                                    at: std::time::Instant::now(),
                                },
                            )
                        });
                        self.agent
                            .send(Command::Upsert(Box::new(plan)))
                            .map_err(|_| stopped())?;
                        Self::send(
                            tx,
                            agent_message::Kind::Ack(v1::PlanAck { object, revision }),
                        )
                        .await?;
                        if let Some((observer, mut acked)) = acked {
                            acked.at = std::time::Instant::now();
                            let _ = observer.send(acked);
                        }
                        if already_held {
                            self.resend_status(key, tx).await?;
                        }
                    }
                    Err(e) => {
                        tracing::warn!(field = %e.field, revision, "refused a plan");
                        Self::send(
                            tx,
                            agent_message::Kind::Rejected(v1::PlanRejected {
                                object,
                                revision,
                                error: e.to_string(),
                            }),
                        )
                        .await?;
                    }
                }
            }
            hub_message::Kind::PlanDelete(delete) => {
                let object = delete.object.clone();
                let revision = delete.revision;
                match DeleteRequest::try_from(delete) {
                    Ok(req) => {
                        self.agent
                            .send(Command::Delete(req))
                            .map_err(|_| stopped())?;
                        Self::send(
                            tx,
                            agent_message::Kind::Ack(v1::PlanAck { object, revision }),
                        )
                        .await?;
                    }
                    Err(e) => {
                        Self::send(
                            tx,
                            agent_message::Kind::Rejected(v1::PlanRejected {
                                object,
                                revision,
                                error: e.to_string(),
                            }),
                        )
                        .await?;
                    }
                }
            }
            hub_message::Kind::Reconcile(r) => {
                if let Ok(key) = object_key("reconcile.object", r.object) {
                    self.agent
                        .send(Command::Reconcile(key))
                        .map_err(|_| stopped())?;
                }
            }
            hub_message::Kind::Preview(request) => {
                let id = request.id.clone();
                let object = request.plan.as_ref().and_then(|p| p.object.clone());
                match flotilla_core::preview::PreviewRequest::try_from(request) {
                    Ok(request) => {
                        tracing::debug!(object = %request.plan.object.key(), id = %request.id, "preview requested");
                        self.agent
                            .send(Command::Preview(request))
                            .map_err(|_| stopped())?;
                    }
                    Err(e) => {
                        tracing::warn!(field = %e.field, "refused a preview request");
                        Self::send(
                            tx,
                            agent_message::Kind::Preview(v1::PreviewResult {
                                id,
                                object,
                                result: Some(v1::preview_result::Result::Failed(format!(
                                    "the agent refused the preview request: {e}."
                                ))),
                            }),
                        )
                        .await?;
                    }
                }
            }
            hub_message::Kind::Ping(p) => {
                let _ = tx.try_send(v1::AgentMessage {
                    kind: Some(agent_message::Kind::Pong(v1::Pong { nonce: p.nonce })),
                });
            }
            hub_message::Kind::Pong(_) => {}
            hub_message::Kind::ResyncComplete(complete) => {
                for o in complete.status_wanted {
                    let Ok(key) = object_key("resyncComplete.statusWanted", Some(o)) else {
                        continue;
                    };
                    self.resend_status(key, tx).await?;
                }
                tracing::debug!(cluster = %self.identity.cluster, "resync complete");
            }
            hub_message::Kind::Certificate(c) => {
                let pem =
                    String::from_utf8(c.certificate_pem).map_err(|_| SessionError::Protocol {
                        message: "the renewed certificate is not PEM text".into(),
                    })?;
                identity::certificate_validity(&pem)?;
                let mut stored = self.client.load_identity(&self.options.namespace).await?;
                stored.cert_pem = Some(pem.clone());
                self.client
                    .store_identity(&self.options.namespace, &stored)
                    .await?;
                self.identity.cert_pem = pem;
                self.record_expiry();
                *renewing = false;
                tracing::info!(cluster = %self.identity.cluster, "renewed the client certificate");
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_to_its_cap_with_jitter_and_resets() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(8));
        let waits: Vec<Duration> = (0..8).map(|_| b.next_wait()).collect();
        for (i, w) in waits.iter().enumerate() {
            let ceiling = Duration::from_secs(1 << i.min(3));
            assert!(*w >= ceiling / 2 && *w <= ceiling, "{i}: {w:?}");
        }
        b.reset();
        assert!(b.next_wait() <= Duration::from_secs(1));
    }

    #[test]
    fn the_debug_forms_of_join_options_and_identities_hide_the_token_and_key() {
        let options = JoinOptions {
            hub: HubAddress::parse("https://hub.example").unwrap(),
            token: Some("abcdef.0123456789abcdef".into()),
            ca_pin: CaPin::parse(&format!("sha256:{}", "0".repeat(64))).unwrap(),
            cluster_name: "edge".into(),
            namespace: "flotilla-system".into(),
            poll_interval: Duration::from_secs(5),
        };
        assert!(!format!("{options:?}").contains("0123456789abcdef"));
        let identity = Identity {
            hub: options.hub.clone(),
            cluster: "edge".into(),
            ca_pem: String::new(),
            cert_pem: String::new(),
            key_pem: "-----BEGIN PRIVATE KEY-----\nSECRETKEYMATERIAL\n".into(),
        };
        assert!(!format!("{identity:?}").contains("SECRETKEYMATERIAL"));
    }

    #[test]
    fn a_certificate_is_renewed_two_thirds_into_its_lifetime() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.not_before = rcgen::date_time_ymd(2030, 1, 1);
        params.not_after = rcgen::date_time_ymd(2030, 1, 4);
        let cert = params.self_signed(&key).unwrap();
        let identity = Identity {
            hub: HubAddress::parse("https://hub.example").unwrap(),
            cluster: "edge".into(),
            ca_pem: String::new(),
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        };
        let (from, _) = identity.validity().unwrap();
        assert_eq!(
            identity.renew_at().unwrap().duration_since(from).unwrap(),
            Duration::from_secs(2 * 24 * 3600)
        );
    }
}
