//! The gRPC service agents dial: `Register`, `Session` and `GetChart`, behind TLS with
//! optional client certificates and the [`IdentityLayer`].
//!
//! - **TLS**: the server certificate is issued by the hub CA; a client certificate, when
//!   presented, must chain to the hub CA or the handshake fails. `Register` needs none.
//! - **[`IdentityLayer`]**: turns the verified peer certificate into a [`ClusterIdentity`]
//!   once per request, puts it in the request's extensions, and refuses every RPC but
//!   `Register` whose certificate names no cluster or a cluster the [`Registry`] does not
//!   admit (unknown, other incarnation, deleting, not accepted).
//! - **Register**: token → ManagedCluster (created pending, or accepted when the token
//!   auto-accepts; an existing one must carry the same cluster UID) → client certificate
//!   once accepted; `STATE_PENDING` until then (the agent polls).
//! - **Session**: Hello first (within the heartbeat timeout), the resync ([`Mailbox::resync`],
//!   then `ResyncComplete`), then plans as they come, pings every heartbeat interval, and
//!   reports forwarded through the mailbox. It ends when the agent goes away or is silent
//!   past the heartbeat timeout, when another session of the cluster replaces it, and within
//!   moments of its ManagedCluster being un-accepted or deleted.
//! - **GetChart**: an archive by digest, in 256 KiB chunks from a given offset (an
//!   interrupted transfer resumes where it stopped); only charts of the cluster's own plans.
//!   A plan whose chart the agent holds no copy of, as far as the hub knows (its Hello's
//!   cached digests, archives sent since), carries the archive when it fits in one chunk:
//!   no round trip for the common small chart ([`InlineArchives`]).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::SystemTime;

use flotilla_api::ManagedCluster;
use flotilla_api::fleet::{ConnectionState, annotation};
use flotilla_core::ids::{ChartDigest, ClusterId};
use flotilla_core::meta::ConditionStatus;
use flotilla_proto::session::key_ref;
use flotilla_proto::v1::hub_server::Hub;
use flotilla_proto::v1::{self, agent_message, hub_message, register_response};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::server::NamedService as _;
use tonic::transport::server::{TcpConnectInfo, TlsConnectInfo};
use tonic::{Request, Response, Status, Streaming};

use super::SessionConfig;
use super::cluster_status::{self, StatusUpdate};
use super::enrollment::{self, Decision};
use super::inbound::{self, Inbound};
use super::mailbox::{Mailbox, Outgoing, RemoteLinks};
use super::pki::{ClusterIdentity, HubCa, KeyFingerprint};
use super::registry::Registry;
use super::tokens::{self, TokenError};
use crate::rate::TokenBucket;
use crate::telemetry::{ChartSent, Dropped};

/// The deadline of the ManagedCluster read of a `Renew`.
const RENEW_API_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// How long after a change of the plans held the session writes them to the ManagedCluster
/// (a burst of acknowledgements is one write).
const PLANS_WRITE_DELAY: std::time::Duration = std::time::Duration::from_secs(1);

/// Capacity of a session's outgoing queue (messages built, not yet written).
const OUTGOING_CAPACITY: usize = 16;

/// Size of a `GetChart` chunk.
const CHART_CHUNK: usize = 256 << 10;

/// The largest chart archive sent with a plan: one `GetChart` chunk.
pub const INLINE_CHART_MAX: usize = CHART_CHUNK;

/// `Renew`s one session may ask at once, then one per [`RENEW_INTERVAL`] (an agent renews
/// once per two thirds of its certificate's lifetime; the rest are dropped and counted).
const RENEW_BURST: f64 = 2.0;
/// See [`RENEW_BURST`].
const RENEW_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// How many archives [`InlineArchives`] keeps.
const INLINE_ARCHIVES: usize = 64;

/// The chart archives sent with plans, kept in memory once read (at most
/// [`INLINE_ARCHIVES`] of at most [`INLINE_CHART_MAX`] bytes: 16 MiB), so a chart version
/// going to a thousand agents is read once and its bytes shared by every message. An
/// archive too large to send with a plan is remembered as such.
#[derive(Debug, Default)]
pub(crate) struct InlineArchives {
    entries:
        std::sync::Mutex<std::collections::VecDeque<(ChartDigest, Option<flotilla_proto::Bytes>)>>,
}

impl InlineArchives {
    /// The archive `digest`, when the hub holds it and it is small enough to go with a plan.
    async fn get(
        &self,
        charts: &dyn super::ChartArchives,
        digest: &ChartDigest,
    ) -> Option<flotilla_proto::Bytes> {
        let hit = self
            .lock()
            .iter()
            .find(|(d, _)| d == digest)
            .map(|(_, bytes)| bytes.clone());
        if let Some(hit) = hit {
            return hit;
        }
        // Not held (yet) by the hub: not remembered, the agent's GetChart will tell.
        let archive = charts.archive(digest).await?;
        let bytes = (archive.len() <= INLINE_CHART_MAX)
            .then(|| flotilla_proto::Bytes::copy_from_slice(&archive));
        let mut entries = self.lock();
        if !entries.iter().any(|(d, _)| d == digest) {
            if entries.len() >= INLINE_ARCHIVES {
                entries.pop_front();
            }
            entries.push_back((digest.clone(), bytes.clone()));
        }
        bytes
    }

    fn lock(
        &self,
    ) -> std::sync::MutexGuard<
        '_,
        std::collections::VecDeque<(ChartDigest, Option<flotilla_proto::Bytes>)>,
    > {
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The `Hub` service.
#[derive(Clone)]
pub struct HubService {
    pub(crate) client: kube::Client,
    pub(crate) config: Arc<SessionConfig>,
    pub(crate) ca: Arc<HubCa>,
    pub(crate) registry: Arc<Registry>,
    pub(crate) links: Arc<RemoteLinks>,
    pub(crate) sessions: Arc<AtomicU64>,
    /// Turns true when the hub stops: every session ends.
    pub(crate) stopping: tokio::sync::watch::Receiver<bool>,
    pub(crate) charts: Arc<dyn super::ChartArchives>,
    /// Token redemptions, written together.
    pub(crate) redemptions: Arc<tokens::Redemptions>,
    /// The heartbeat writes all sessions share.
    pub(crate) heartbeats: Arc<super::cluster_status::WriteBudget>,
    /// Chart archives sent with plans.
    pub(crate) inline: Arc<InlineArchives>,
    /// Renewals, per cluster.
    pub(crate) renewals: Arc<enrollment::RenewLimiter>,
    /// The gate in front of `Register` (rate and concurrency).
    pub(crate) register_gate: Arc<super::limits::RegisterGate>,
}

impl std::fmt::Debug for HubService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubService")
            .field("config", &self.config)
            .field("ca", &self.ca)
            .finish_non_exhaustive()
    }
}

fn token_status(e: TokenError) -> Status {
    match &e {
        TokenError::Malformed | TokenError::Invalid { .. } => {
            Status::unauthenticated(e.to_string())
        }
        TokenError::Expired { .. }
        | TokenError::UsedUp { .. }
        | TokenError::ClusterNotAllowed { .. } => Status::permission_denied(e.to_string()),
        TokenError::BadSecret { .. } => Status::failed_precondition(e.to_string()),
        TokenError::Random | TokenError::Kube { .. } => Status::unavailable(e.to_string()),
    }
}

fn kube_status(what: &str, e: kube::Error) -> Status {
    Status::unavailable(format!("{what}: {e}"))
}

fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl HubService {
    fn clusters(&self) -> Api<ManagedCluster> {
        Api::all(self.client.clone())
    }

    fn renewals_interval(&self) -> std::time::Duration {
        enrollment::renew_interval(self.config.client_cert_lifetime)
    }

    async fn do_register(&self, req: v1::RegisterRequest) -> Result<v1::RegisterResponse, Status> {
        if req.cluster_name.is_empty() {
            return Err(Status::invalid_argument("cluster_name is required"));
        }
        let cluster = ClusterId::new(req.cluster_name.clone())
            .map_err(|e| Status::invalid_argument(format!("cluster_name: {e}")))?;
        if req.cluster_uid.is_empty() {
            return Err(Status::invalid_argument(
                "cluster_uid (the kube-system namespace UID) is required",
            ));
        }
        // The CSR first: a bad one spends no use of the token.
        let csr = std::str::from_utf8(&req.csr_pem)
            .map_err(|_| Status::invalid_argument("csr_pem is not PEM text"))?;
        let key =
            KeyFingerprint::of_csr(csr).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let grant = self
            .redemptions
            .redeem(&req.bootstrap_token, cluster.as_str())
            .await
            .map_err(|e| {
                tracing::info!(cluster = %cluster, reason = e.kind(), "registration refused");
                token_status(e)
            })?;
        let api = self.clusters();
        let mut found = api
            .get_opt(cluster.as_str())
            .await
            .map_err(|e| kube_status("reading the ManagedCluster", e))?;
        let (mc, waiting) = loop {
            if let Some(uid) = found
                .as_ref()
                .and_then(|mc| mc.status.as_ref())
                .and_then(|s| s.cluster_uid.as_ref())
                && *uid != req.cluster_uid
            {
                return Err(Status::already_exists(format!(
                    "ManagedCluster {cluster} belongs to another cluster (its kube-system namespace UID differs)"
                )));
            }
            let existing = found.as_ref().map(enrollment::Existing::of);
            match enrollment::decide(&cluster, existing.as_ref(), &grant, &key) {
                Decision::Create { accepted } => {
                    found = Some(
                        self.create_cluster(&cluster, &grant, &key, accepted)
                            .await?,
                    );
                }
                Decision::Refuse(refusal) => {
                    tracing::info!(cluster = %cluster, token_id = %grant.token_id, reason = refusal.kind(), "registration refused");
                    return Err(match refusal {
                        enrollment::Refusal::Deleted { .. } | enrollment::Refusal::Deleting(_) => {
                            Status::failed_precondition(refusal.to_string())
                        }
                        enrollment::Refusal::OtherToken { .. }
                        | enrollment::Refusal::KeyRevoked { .. } => {
                            Status::permission_denied(refusal.to_string())
                        }
                    });
                }
                Decision::Wait(w) => break (found.take(), Some(w)),
                Decision::Issue => break (found.take(), None),
            }
        };
        let mc = mc.ok_or_else(|| Status::internal("the ManagedCluster vanished"))?;
        self.registry.apply(&mc);
        let known_uid = mc.status.as_ref().and_then(|s| s.cluster_uid.clone());
        let mut update = StatusUpdate {
            cluster_uid: known_uid.is_none().then(|| req.cluster_uid.clone()),
            agent_version: (!req.agent_version.is_empty()).then(|| req.agent_version.clone()),
            ..StatusUpdate::default()
        };
        if let Some(waiting) = waiting {
            let pending = mc
                .status
                .as_ref()
                .and_then(|s| s.pending_registration.as_ref());
            cluster_status::record_pending(
                &api,
                cluster.as_str(),
                pending,
                &key,
                &grant.token_id,
                waiting.reason(),
            )
            .await;
            let approve = format!("flotilla cluster approve {cluster} --fingerprint {key}");
            let message = match waiting {
                enrollment::Waiting::NotAccepted {
                    key_approval: false,
                } => {
                    update.joined = Some((
                        ConditionStatus::False,
                        "Pending",
                        "registered; waiting for the cluster to be accepted".into(),
                    ));
                    cluster_status::write(&api, cluster.as_str(), update).await;
                    format!(
                        "ManagedCluster {cluster} waits for an administrator: flotilla cluster accept {cluster} (or set spec.accepted)"
                    )
                }
                // Another key than the cluster's: nothing of this agent goes in the
                // status but its pending registration (it may be an impostor).
                enrollment::Waiting::NotAccepted { key_approval: true } => format!(
                    "ManagedCluster {cluster} waits for an administrator: flotilla cluster accept {cluster}, and this agent's key {key} is not the one that registered it: {approve}"
                ),
                enrollment::Waiting::KeyNotApproved => {
                    tracing::info!(cluster = %cluster, token_id = %grant.token_id, key = %key, "a registration with another key than the cluster's waits for approval");
                    format!(
                        "ManagedCluster {cluster} holds certificates for another key; this agent's key {key} needs an administrator's approval: {approve}"
                    )
                }
            };
            return Ok(v1::RegisterResponse {
                state: register_response::State::Pending.into(),
                ca_pem: self.ca.cert_pem().as_bytes().to_vec(),
                cluster_id: cluster.to_string(),
                message,
                ..Default::default()
            });
        }
        let uid = mc
            .metadata
            .uid
            .clone()
            .ok_or_else(|| Status::internal("the ManagedCluster has no uid"))?;
        let issued = self
            .ca
            .sign_client(csr, &cluster, &uid, self.config.client_cert_lifetime)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        // Recorded as the newest before the agent holds it.
        cluster_status::record_certificate(&api, cluster.as_str(), &issued)
            .await
            .map_err(|e| kube_status("recording the certificate issued", e))?;
        update.certificate_expiry = Some(cluster_status::at(unix_secs(issued.not_after)));
        update.joined = Some((
            ConditionStatus::True,
            "CertificateIssued",
            "the agent registered and holds a client certificate".into(),
        ));
        cluster_status::write(&api, cluster.as_str(), update).await;
        tracing::info!(cluster = %cluster, serial = %issued.serial, "issued a client certificate");
        Ok(v1::RegisterResponse {
            state: register_response::State::Accepted.into(),
            certificate_pem: issued.pem.into_bytes(),
            ca_pem: self.ca.cert_pem().as_bytes().to_vec(),
            cluster_id: cluster.to_string(),
            message: String::new(),
        })
    }

    /// Creates the ManagedCluster of a first registration, annotated with its token and
    /// key (or returns the one created meanwhile).
    async fn create_cluster(
        &self,
        cluster: &ClusterId,
        grant: &tokens::Grant,
        key: &KeyFingerprint,
        accepted: bool,
    ) -> Result<ManagedCluster, Status> {
        let api = self.clusters();
        let mc = ManagedCluster {
            metadata: ObjectMeta {
                name: Some(cluster.to_string()),
                annotations: Some(
                    [
                        (
                            annotation::BOOTSTRAP_TOKEN_ID.to_owned(),
                            grant.token_id.clone(),
                        ),
                        (
                            annotation::BOOTSTRAP_KEY_FINGERPRINT.to_owned(),
                            key.to_string(),
                        ),
                    ]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            spec: flotilla_api::ManagedClusterSpec {
                accepted,
                ..Default::default()
            },
            status: None,
        };
        match api.create(&PostParams::default(), &mc).await {
            Ok(mc) => {
                tracing::info!(cluster = %cluster, accepted, "created a ManagedCluster");
                Ok(mc)
            }
            Err(kube::Error::Api(s)) if s.code == 409 => api
                .get(cluster.as_str())
                .await
                .map_err(|e| kube_status("reading the ManagedCluster", e)),
            Err(e) => Err(kube_status("creating the ManagedCluster", e)),
        }
    }
}

fn outgoing_message(o: Outgoing, chart_archive: flotilla_proto::Bytes) -> v1::HubMessage {
    let kind = match o {
        Outgoing::Upsert(plan) => hub_message::Kind::PlanUpsert(v1::PlanUpsert {
            plan: Some((*plan).clone().into()),
            chart_archive,
        }),
        Outgoing::Delete(d) => hub_message::Kind::PlanDelete(d.into()),
        Outgoing::Reconcile(key) => hub_message::Kind::Reconcile(v1::ReconcileRequest {
            object: Some(key_ref(&key)),
        }),
        Outgoing::Preview(request) => hub_message::Kind::Preview(request.into()),
    };
    v1::HubMessage { kind: Some(kind) }
}

/// One session: its cluster, mailbox and channels.
struct Session {
    id: u64,
    identity: ClusterIdentity,
    mailbox: Arc<Mailbox>,
    tx: mpsc::Sender<Result<v1::HubMessage, Status>>,
    service: HubService,
    /// The session's `Renew` budget.
    renewals: std::sync::Mutex<TokenBucket>,
}

impl Session {
    async fn send(&self, kind: hub_message::Kind) -> Result<(), ()> {
        self.tx
            .send(Ok(v1::HubMessage { kind: Some(kind) }))
            .await
            .map_err(|_| ())
    }

    async fn end(&self, status: Status) {
        let _ = self.tx.send(Err(status)).await;
    }

    /// The message for `o`: an upsert carries its chart archive when the agent holds no
    /// copy, as far as the hub knows, and it is small enough.
    async fn message(&self, o: Outgoing) -> v1::HubMessage {
        let mut archive = flotilla_proto::Bytes::new();
        if let Outgoing::Upsert(plan) = &o {
            let digest = &plan.chart.digest;
            if !self.mailbox.agent_has_chart(digest)
                && let Some(bytes) = self
                    .service
                    .inline
                    .get(self.service.charts.as_ref(), digest)
                    .await
            {
                archive = bytes;
                self.mailbox.agent_got_chart(digest);
                self.service.config.metrics.chart_sent(ChartSent::WithPlan);
            }
        }
        outgoing_message(o, archive)
    }

    async fn run(self, mut inbound: Streaming<v1::AgentMessage>) {
        let cluster = self.identity.cluster.clone();
        let config = self.service.config.clone();
        let api = self.service.clusters();
        // The Hello.
        let hello = match tokio::time::timeout(config.heartbeat_timeout, inbound.message()).await {
            Ok(Ok(Some(v1::AgentMessage {
                kind: Some(agent_message::Kind::Hello(hello)),
            }))) => hello,
            Ok(Ok(Some(_))) => {
                return self
                    .end(Status::invalid_argument(
                        "the first message of a session must be a Hello",
                    ))
                    .await;
            }
            Ok(Ok(None)) | Ok(Err(_)) => return,
            Err(_) => {
                return self
                    .end(Status::deadline_exceeded(
                        "no Hello within the heartbeat timeout",
                    ))
                    .await;
            }
        };
        // The certificate is used from the cluster it was issued to (an identity Secret
        // restored into another cluster is refused, not mistaken for the original).
        match api.get_opt(cluster.as_str()).await {
            Ok(Some(mc)) => {
                let known = mc.status.and_then(|s| s.cluster_uid);
                if let Some(uid) = known
                    && uid != hello.cluster_uid
                {
                    tracing::info!(cluster = %cluster, "refused a session from another cluster");
                    return self
                        .end(Status::permission_denied(format!(
                            "the certificate of cluster {cluster} is used from another cluster (its kube-system namespace UID differs)"
                        )))
                        .await;
                }
            }
            Ok(None) => {
                return self
                    .end(Status::permission_denied(format!(
                        "ManagedCluster {cluster} does not exist"
                    )))
                    .await;
            }
            Err(e) => {
                return self
                    .end(Status::unavailable(format!(
                        "reading ManagedCluster {cluster}: {e}"
                    )))
                    .await;
            }
        }
        let mut hello = hello;
        let inbound::HelloState { held, cached } = match inbound::hello(&mut hello) {
            Ok(state) => state,
            Err(e) => return self.end(Status::invalid_argument(e.to_string())).await,
        };
        // A peer's list: only the first few short entries are looked at.
        let features: Vec<String> = hello
            .features
            .iter()
            .take(32)
            .filter(|f| f.len() <= 64)
            .cloned()
            .collect();
        self.mailbox.set_features(&features);
        self.mailbox.attach(self.id);
        // Counted down in `finish`, which every path from here on ends with.
        config.metrics.session(true);
        let wanted = self.mailbox.resync(held, cached);
        tracing::info!(cluster = %cluster, session = self.id, held = self.mailbox.held_count(), "session up");
        // The difference, then ResyncComplete, then `Connected` on the ManagedCluster: the
        // agent's plans do not wait for the API server.
        while let Some(o) = self.mailbox.next_outgoing() {
            let message = self.message(o).await;
            if self.tx.send(Ok(message)).await.is_err() {
                return self.finish(&api).await;
            }
        }
        let complete = hub_message::Kind::ResyncComplete(v1::ResyncComplete {
            status_wanted: wanted.iter().map(key_ref).collect(),
        });
        if self.send(complete).await.is_err() {
            return self.finish(&api).await;
        }
        let mut plans_written = i64::try_from(self.mailbox.held_count()).ok();
        cluster_status::write(
            &api,
            cluster.as_str(),
            StatusUpdate {
                agent_version: Some(hello.agent_version.clone()).filter(|v| !v.is_empty()),
                kubernetes_version: Some(hello.kubernetes_version.clone())
                    .filter(|v| !v.is_empty()),
                certificate_expiry: Some(cluster_status::at(unix_secs(self.identity.not_after))),
                plans_held: plans_written,
                heartbeat: true,
                connection: Some(ConnectionState::Connected),
                ..StatusUpdate::default()
            },
        )
        .await;
        let mut heartbeat_written = tokio::time::Instant::now();
        let mut admission = self.service.registry.subscribe();
        let mut stopping = self.service.stopping.clone();
        let mut ping = tokio::time::interval(config.heartbeat_interval);
        ping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Each session ticks at its own phase: sessions started together (a connect
        // storm) do not all look at their plans held, and write, at the same moment.
        let mut status_tick = tokio::time::interval_at(
            tokio::time::Instant::now() + config.status_interval.mul_f64(fastrand::f64()),
            config.status_interval,
        );
        status_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut plans_soon = false;
        let mut last_heard = tokio::time::Instant::now();
        let mut nonce = 0u64;
        // The TLS handshake checked the certificate's dates once: the session ends when it
        // expires (the agent connects again with its renewed one).
        let expiry = tokio::time::sleep_until(
            tokio::time::Instant::now()
                + self
                    .identity
                    .not_after
                    .duration_since(SystemTime::now())
                    .unwrap_or_default(),
        );
        tokio::pin!(expiry);
        loop {
            // Drain what is pending, as far as the queue takes it.
            let mut full = false;
            loop {
                match self.tx.try_reserve() {
                    Ok(permit) => match self.mailbox.next_outgoing() {
                        Some(o) => permit.send(Ok(self.message(o).await)),
                        None => break,
                    },
                    Err(mpsc::error::TrySendError::Full(())) => {
                        full = true;
                        break;
                    }
                    Err(mpsc::error::TrySendError::Closed(())) => {
                        return self.finish(&api).await;
                    }
                }
            }
            if !self.mailbox.is_attached(self.id) {
                self.end(Status::aborted(
                    "another session of this cluster replaced this one",
                ))
                .await;
                break;
            }
            tokio::select! {
                message = inbound.message() => match message {
                    Ok(Some(m)) => {
                        last_heard = tokio::time::Instant::now();
                        if let Err(status) = self.handle(m).await {
                            self.end(status).await;
                            break;
                        }
                        // A change of the plans held (an acknowledgement, a deletion done)
                        // is written soon, not at the next status tick: `flotilla get
                        // clusters` shows what the agent acknowledged (issue 35).
                        if !plans_soon
                            && i64::try_from(self.mailbox.held_count()).ok() != plans_written
                        {
                            status_tick.reset_after(PLANS_WRITE_DELAY);
                            plans_soon = true;
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
                () = self.mailbox.changed(), if !full => {}
                // Room again in a full queue: loop to drain.
                permit = self.tx.reserve(), if full => {
                    if permit.is_err() {
                        break;
                    }
                }
                _ = ping.tick() => {
                    if last_heard.elapsed() > config.heartbeat_timeout {
                        tracing::info!(cluster = %cluster, session = self.id, "agent silent past the heartbeat timeout");
                        self.end(Status::deadline_exceeded("no message from the agent within the heartbeat timeout")).await;
                        break;
                    }
                    nonce += 1;
                    let _ = self.tx.try_send(Ok(v1::HubMessage { kind: Some(hub_message::Kind::Ping(v1::Ping { nonce })) }));
                }
                _ = status_tick.tick() => {
                    plans_soon = false;
                    // Liveness is this session; the object hears of it when the plans held
                    // changed, and otherwise every `heartbeat_write_interval`, as the hub's
                    // heartbeat budget allows (else at a later tick).
                    let plans = i64::try_from(self.mailbox.held_count()).ok();
                    let due = plans != plans_written
                        || heartbeat_written.elapsed() >= config.heartbeat_write_interval;
                    if due {
                        let allowed = self.service.heartbeats.try_take();
                        config.metrics.heartbeat_write(allowed);
                        if allowed {
                            cluster_status::heartbeat(&api, cluster.as_str(), plans).await;
                            plans_written = plans;
                            heartbeat_written = tokio::time::Instant::now();
                        }
                    }
                }
                () = async { let _ = stopping.wait_for(|s| *s).await; } => {
                    self.end(Status::unavailable("the hub is stopping")).await;
                    break;
                }
                changed = admission.changed() => {
                    if changed.is_err() {
                        break;
                    }
                    if let Err(refusal) = self.service.registry.admits(&self.identity) {
                        tracing::info!(cluster = %cluster, session = self.id, %refusal, "ending the session");
                        self.end(Status::permission_denied(refusal.to_string())).await;
                        break;
                    }
                }
                () = &mut expiry => {
                    tracing::info!(cluster = %cluster, session = self.id, serial = %self.identity.serial, "the session's client certificate expired");
                    self.end(Status::unauthenticated(format!(
                        "the client certificate {} of cluster {cluster} expired",
                        self.identity.serial
                    )))
                    .await;
                    break;
                }
                () = self.tx.closed() => break,
            }
        }
        self.finish(&api).await;
    }

    async fn finish(&self, api: &Api<ManagedCluster>) {
        self.service.config.metrics.session(false);
        let was_attached = self.mailbox.is_attached(self.id);
        self.mailbox.detach(self.id);
        tracing::info!(cluster = %self.identity.cluster, session = self.id, "session down");
        if was_attached && self.service.registry.get(&self.identity.cluster).is_some() {
            cluster_status::write(
                api,
                self.identity.cluster.as_str(),
                StatusUpdate {
                    connection: Some(ConnectionState::Disconnected),
                    plans_held: i64::try_from(self.mailbox.held_count()).ok(),
                    ..StatusUpdate::default()
                },
            )
            .await;
        }
    }

    /// A `Renew`: only with the cluster's newest certificate, at most once per
    /// [`enrollment::renew_interval`] per cluster; a refusal ends the session.
    async fn renew(&self, csr: &str) -> Result<(), Status> {
        let cluster = &self.identity.cluster;
        let serial = &self.identity.serial;
        let not_newest = || {
            tracing::info!(cluster = %cluster, %serial, "refused a renewal with a certificate that is not the newest");
            Status::permission_denied(format!(
                "Renew refused: certificate {serial} is not the newest certificate of cluster {cluster}"
            ))
        };
        if let Err(wait) = self
            .service
            .renewals
            .try_take(cluster, std::time::Instant::now())
        {
            tracing::info!(cluster = %cluster, "refused a renewal: too soon after the last one");
            return Err(Status::resource_exhausted(format!(
                "Renew refused: cluster {cluster} renewed its certificate less than {} s ago; ask again in {} s",
                self.service.renewals_interval().as_secs(),
                wait.as_secs() + 1
            )));
        }
        let api = self.service.clusters();
        let mc = tokio::time::timeout(RENEW_API_TIMEOUT, api.get(cluster.as_str()))
            .await
            .map_err(|_| {
                Status::unavailable(format!("reading ManagedCluster {cluster}: timed out"))
            })?
            .map_err(|e| kube_status("reading the ManagedCluster", e))?;
        let newest = mc.status.as_ref().and_then(|s| s.certificate.as_ref());
        if newest.is_some_and(|c| c.serial != *serial) {
            return Err(not_newest());
        }
        let key =
            KeyFingerprint::of_csr(csr).map_err(|e| Status::invalid_argument(e.to_string()))?;
        if mc
            .spec
            .revoked_key_fingerprints
            .iter()
            .any(|k| k == key.as_str())
        {
            return Err(Status::permission_denied(format!(
                "Renew refused: the key {key} is revoked for ManagedCluster {cluster}"
            )));
        }
        let issued = self
            .service
            .ca
            .sign_client(
                csr,
                cluster,
                &self.identity.incarnation,
                self.service.config.client_cert_lifetime,
            )
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        cluster_status::record_certificate(&api, cluster.as_str(), &issued)
            .await
            .map_err(|e| kube_status("recording the certificate issued", e))?;
        tracing::info!(cluster = %cluster, serial = %issued.serial, "renewed the client certificate");
        cluster_status::write(
            &api,
            cluster.as_str(),
            StatusUpdate {
                certificate_expiry: Some(cluster_status::at(unix_secs(issued.not_after))),
                ..StatusUpdate::default()
            },
        )
        .await;
        self.send(hub_message::Kind::Certificate(v1::CertificateRenewed {
            certificate_pem: issued.pem.into_bytes(),
        }))
        .await
        .map_err(|()| Status::cancelled("session closed"))
    }

    async fn handle(&self, message: v1::AgentMessage) -> Result<(), Status> {
        let answer = inbound::accept(&self.mailbox, message)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        match answer {
            Inbound::Done => {}
            Inbound::Pong(nonce) => {
                let _ = self.tx.try_send(Ok(v1::HubMessage {
                    kind: Some(hub_message::Kind::Pong(v1::Pong { nonce })),
                }));
            }
            Inbound::Renew(csr) => {
                let allowed = self
                    .renewals
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take(std::time::Instant::now());
                if !allowed {
                    self.service.config.metrics.dropped(Dropped::RenewRate);
                    tracing::debug!(cluster = %self.identity.cluster, session = self.id, "dropped a Renew over the session's rate");
                    return Ok(());
                }
                self.renew(&csr).await?;
            }
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Hub for HubService {
    async fn register(
        &self,
        request: Request<v1::RegisterRequest>,
    ) -> Result<Response<v1::RegisterResponse>, Status> {
        // Before anything is read: the gate's rate and concurrency (see `limits`).
        let _permit = self.register_gate.enter().await.map_err(|reason| {
            self.config.metrics.dropped(reason);
            Status::resource_exhausted(
                "the hub is taking too many registrations; retry with backoff",
            )
        })?;
        self.do_register(request.into_inner())
            .await
            .map(Response::new)
    }

    type SessionStream = ReceiverStream<Result<v1::HubMessage, Status>>;

    async fn session(
        &self,
        request: Request<Streaming<v1::AgentMessage>>,
    ) -> Result<Response<Self::SessionStream>, Status> {
        let identity = request
            .extensions()
            .get::<ClusterIdentity>()
            .cloned()
            .ok_or_else(|| {
                Status::unauthenticated("a session needs the client certificate the hub issued")
            })?;
        let mailbox = self.links.mailbox(&identity.cluster).ok_or_else(|| {
            Status::permission_denied(format!("ManagedCluster {} is not known", identity.cluster))
        })?;
        let (tx, rx) = mpsc::channel(OUTGOING_CAPACITY);
        let session = Session {
            id: self.sessions.fetch_add(1, Ordering::SeqCst) + 1,
            identity,
            mailbox,
            tx,
            service: self.clone(),
            renewals: std::sync::Mutex::new(TokenBucket::new(
                RENEW_BURST,
                1.0 / RENEW_INTERVAL.as_secs_f64(),
                std::time::Instant::now(),
            )),
        };
        tokio::spawn(session.run(request.into_inner()));
        Ok(Response::new(ReceiverStream::new(rx)))
    }

    type GetChartStream = ReceiverStream<Result<v1::ChartChunk, Status>>;

    async fn get_chart(
        &self,
        request: Request<v1::GetChartRequest>,
    ) -> Result<Response<Self::GetChartStream>, Status> {
        let identity = request
            .extensions()
            .get::<ClusterIdentity>()
            .cloned()
            .ok_or_else(|| {
                Status::unauthenticated("GetChart needs the client certificate the hub issued")
            })?;
        let request = request.into_inner();
        let digest = flotilla_core::ids::ChartDigest::new(request.digest)
            .map_err(|e| Status::invalid_argument(format!("digest: {e}")))?;
        // A cluster gets the charts of its own plans only.
        let mailbox = self
            .links
            .mailbox(&identity.cluster)
            .filter(|m| m.needs_chart(&digest));
        let Some(mailbox) = mailbox else {
            return Err(Status::not_found(format!(
                "chart {digest}: not in a plan of cluster {}",
                identity.cluster
            )));
        };
        let archive = self.charts.archive(&digest).await.ok_or_else(|| {
            Status::not_found(format!("chart {digest}: the hub does not hold it"))
        })?;
        let offset = usize::try_from(request.offset).unwrap_or(usize::MAX);
        if offset > archive.len() {
            return Err(Status::out_of_range(format!(
                "offset {offset} is past the end of chart {digest} ({} bytes)",
                archive.len()
            )));
        }
        let (tx, rx) = mpsc::channel(4);
        let metrics = self.config.metrics.clone();
        tokio::spawn(async move {
            let total_size = archive.len() as u64;
            let mut first = true;
            let mut at = offset;
            loop {
                let end = (at + CHART_CHUNK).min(archive.len());
                let chunk = v1::ChartChunk {
                    data: archive[at..end].to_vec(),
                    total_size: if first { total_size } else { 0 },
                };
                first = false;
                if tx.send(Ok(chunk)).await.is_err() {
                    return;
                }
                at = end;
                if at >= archive.len() {
                    mailbox.agent_got_chart(&digest);
                    metrics.chart_sent(ChartSent::GetChart);
                    return;
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// The tower layer turning a verified client certificate into a [`ClusterIdentity`].
#[derive(Debug, Clone)]
pub struct IdentityLayer {
    registry: Arc<Registry>,
}

impl IdentityLayer {
    /// A layer admitting by `registry`.
    pub fn new(registry: Arc<Registry>) -> Self {
        Self { registry }
    }
}

impl<S> tower::Layer<S> for IdentityLayer {
    type Service = IdentityService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        IdentityService {
            inner,
            registry: self.registry.clone(),
        }
    }
}

/// The service of [`IdentityLayer`].
#[derive(Debug, Clone)]
pub struct IdentityService<S> {
    inner: S,
    registry: Arc<Registry>,
}

type BoxFuture<T> = Pin<Box<dyn std::future::Future<Output = T> + Send>>;

impl<S, B> tower::Service<http::Request<B>> for IdentityService<S>
where
    S: tower::Service<http::Request<B>, Response = http::Response<tonic::body::Body>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Send + 'static,
{
    type Response = http::Response<tonic::body::Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: http::Request<B>) -> Self::Future {
        let register_path = format!(
            "/{}/Register",
            flotilla_proto::v1::hub_server::HubServer::<HubService>::NAME
        );
        let is_register = req.uri().path() == register_path;
        let cert = req
            .extensions()
            .get::<TlsConnectInfo<TcpConnectInfo>>()
            .and_then(|i| i.peer_certs())
            .and_then(|certs| certs.first().map(|c| c.as_ref().to_vec()));
        if let Some(der) = cert {
            match ClusterIdentity::from_der(&der) {
                Ok(identity) => {
                    if !is_register && let Err(refusal) = self.registry.admits(&identity) {
                        tracing::info!(cluster = %identity.cluster, %refusal, "refused a client certificate");
                        let response = Status::permission_denied(refusal.to_string()).into_http();
                        return Box::pin(async move { Ok(response) });
                    }
                    req.extensions_mut().insert(identity);
                }
                Err(e) if !is_register => {
                    let response = Status::unauthenticated(e.to_string()).into_http();
                    return Box::pin(async move { Ok(response) });
                }
                Err(_) => {}
            }
        }
        // The clone is ready only after poll_ready; swap so the ready one serves this call.
        let clone = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, clone);
        Box::pin(async move { inner.call(req).await })
    }
}
