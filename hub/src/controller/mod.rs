//! The HelmRelease controller: turns each HelmRelease into a release plan and hands it to
//! the agent serving its target, in Flux's reconcile order.
//!
//! ```text
//! deleted?          -> finalizer: Command::Delete through the target's link, wait for its
//!                      Report::Deleted, delete the managed HelmChart, drop the finalizer
//! finalizer missing -> add `finalizers.fluxcd.io`
//! suspend           -> nothing (no requeue)
//! dependsOn         -> each Ready with observedGeneration == generation, else
//!                      Ready=False DependencyNotReady, requeue after --requeue-dependency
//! source            -> spec.chart: server-side apply HelmChart `<ns>-<name>`, wait for its
//!                      artifact; spec.chartRef: the OCIRepository's or HelmChart's artifact;
//!                      not ready -> Ready=False SourceNotReady, requeue with jitter
//! chart             -> from the hub's chart store by digest (ArtifactFailed when missing)
//! values            -> valuesFrom objects read (from the values cache, see
//!                      [`values_cache`], unless the HelmRelease's generation or request
//!                      tokens changed), composed (ValuesError names the field; nothing is
//!                      sent, the deployed release stays as it is)
//! target            -> clusterRef: the remote link ("no agent connected for cluster X"
//!                      until one is); clusterRef kind Cluster: Ready=False
//!                      ClusterNotFound / ClusterNotInitialized until the Cluster API
//!                      Cluster's control plane is initialized, then its
//!                      `<name>-kubeconfig` Secret as a kubeConfig target;
//!                      kubeConfig secretRef / none: a push agent;
//!                      kubeConfig configMapRef: its ConfigMap checked (RESTClientError
//!                      naming the key), then a push agent with a ServiceAccount token
//!                      (`workload_identity`, provider `generic`)
//! plan              -> ReleasePlan with a plan revision that grows when the plan changes
//!                      (persisted on the object, see below), Command::Upsert
//! requeue           -> spec.interval with jitter
//! ```
//!
//! **Plan revisions** are kept in two annotations on the HelmRelease,
//! [`PLAN_REVISION_ANNOTATION`] and [`PLAN_DIGEST_ANNOTATION`] (the sha256 of the plan with
//! its revision zeroed): a plan whose digest differs from the recorded one gets the next
//! revision, so a restarted hub re-sends the same revision for an unchanged plan (a no-op
//! for the agent). Revisions stay monotonic across hub restarts in one of two ways: with a
//! plan epoch ([`epoch`], claimed when the hub starts serving sessions) every revision is
//! at least the epoch's floor, and the annotations are written *after* the plan is sent,
//! in the background (at most [`REVISION_WRITERS`] at once; one superseded by a newer
//! revision before its turn is skipped): a chart bump of N HelmReleases reaches the agents
//! without N annotation writes in its path. Without an epoch, the next revision is
//! written to the object *before* the plan is sent. An annotation rather than a status field: the status is
//! the status writer's (merged from agent reports with server-side apply) and the status
//! type is shared with the agents; an annotation write does not bump the generation, needs
//! no schema change, and does not race the status writer.
//!
//! The release-target change (release name, target namespace, storage namespace, chart
//! name) is carried out by the agent (core's state machine uninstalls the old release
//! first); a change of *cluster* is the hub's: the old target's agent is told to delete.
//! Request tokens (`reconcile.fluxcd.io/requestedAt`, `forceAt`, `resetAt`) travel in the
//! plan; the agent handles them and reports `lastHandled*`.
//!
//! **Triggers**: a generation change, a deletion or a `reconcile.fluxcd.io/*` annotation
//! change of the HelmRelease (not its status); a change of its HelmChart (by the HelmChart's
//! owner labels); a change of a referenced OCIRepository, ConfigMap or Secret (through an
//! index from reference to HelmReleases, [`RefIndex`], filled by each reconcile; the
//! ConfigMap and Secret watches carry metadata only, and drop a changed object from the
//! values cache before they enqueue its users); a `Deleted` report; a ManagedCluster
//! accepted, deleted or whose agent connects or goes (its HelmReleases by `clusterRef`,
//! when the hub serves sessions: a HelmRelease created before its cluster is planned the
//! moment the cluster is accepted, not at its `requeue_dependency`); and `spec.interval`
//! with jitter.

pub mod epoch;
pub mod queue;
pub mod values_cache;

use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use flotilla_agent::charts::{CachedCharts, ChartError, NoFetcher};
use flotilla_agent::runtime::queue::Backoff;
use flotilla_api::fleet::ConnectionState;
use flotilla_api::source::{Artifact, LocalHelmChartSourceReference};
use flotilla_api::{HelmChart, HelmChartSpec, HelmRelease, ManagedCluster, OCIRepository};
use flotilla_core::agent::{Command, DeleteRequest, ObjectKey};
use flotilla_core::ids::{ChartDigest, ClusterId, PlanRevision};
use flotilla_core::meta::{Condition, Conditions as _, condition, reason};
use flotilla_core::plan::{ChartArtifact, ReleasePlan};
use flotilla_core::spec::{
    ChartRefKind, ClusterReferenceKind, RECONCILE_REQUEST_ANNOTATION, ReconcileStrategy,
    ValuesReferenceKind,
};
use futures::{StreamExt as _, TryStreamExt as _};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, Resource as _, ResourceExt as _};
use serde_json::Value;
use tokio::sync::mpsc;

use crate::link::{Links as _, TargetId};
use crate::push::{HubLinks, TargetError};
use crate::status::{HubCondition, StatusBook, key_of};
use crate::util::{self, FIELD_MANAGER, error_chain, jitter};
use crate::values::{self, Source};

/// Flux's finalizer.
pub const FINALIZER: &str = "finalizers.fluxcd.io";
/// The plan revision last sent for the HelmRelease.
pub const PLAN_REVISION_ANNOTATION: &str = "helm.flotilla.dev/plan-revision";
/// The digest of the plan last sent (its revision zeroed).
pub const PLAN_DIGEST_ANNOTATION: &str = "helm.flotilla.dev/plan-digest";
/// The label naming the HelmRelease of a managed HelmChart.
pub const OWNER_NAME_LABEL: &str = "helm.flotilla.dev/name";
/// The label naming the HelmRelease's namespace on a managed HelmChart.
pub const OWNER_NAMESPACE_LABEL: &str = "helm.flotilla.dev/namespace";
/// Reason of a `clusterRef` target without a connected agent.
pub const AGENT_NOT_CONNECTED: &str = "AgentNotConnected";
/// Flux's prefix of the message of a terminal configuration error (`InvalidCELExpression`).
pub const TERMINAL_ERROR_MESSAGE: &str =
    "Reconciliation failed terminally due to configuration error";
/// Reason of a HelmRelease the hub cannot plan (an invalid spec).
pub const INVALID_SPEC: &str = "InvalidSpec";
/// Reason of a `clusterRef` of kind `Cluster` naming no Cluster API Cluster.
pub const CLUSTER_NOT_FOUND: &str = "ClusterNotFound";
/// Reason of a `clusterRef` of kind `Cluster` whose control plane is not initialized yet.
pub const CLUSTER_NOT_INITIALIZED: &str = "ClusterNotInitialized";

/// How the controller behaves.
#[derive(Debug, Clone)]
pub struct ControllerOptions {
    /// Reconciles at the same time.
    pub concurrency: u16,
    /// Requeue of `dependsOn`, source-not-ready and missing artifacts (Flux's
    /// `--requeue-dependency`).
    pub requeue_dependency: Duration,
    /// Interval jitter fraction (Flux's `--interval-jitter-percentage` / 100).
    pub jitter: f64,
    /// Watch ManagedClusters (the hub serves agent sessions): a cluster accepted, or whose
    /// agent connects, reconciles its HelmReleases at once instead of at their
    /// `requeue_dependency`.
    pub watch_managed_clusters: bool,
    /// The retry delays of a HelmRelease whose reconciles fail ([`ReconcileError`]):
    /// exponential per object, capped, with jitter; a success resets its count.
    pub backoff: Backoff,
    /// A test hook run at the start of every reconcile, on the real reconcile path (a
    /// panic it raises is caught as any other: [`ReconcileError::Panicked`]). `None`
    /// outside tests; no flag of the binary sets it.
    pub fault: Option<ReconcileFault>,
}

/// The hook of [`ControllerOptions::fault`].
#[derive(Clone)]
pub struct ReconcileFault(pub Arc<dyn Fn(&HelmRelease) + Send + Sync>);

impl std::fmt::Debug for ReconcileFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReconcileFault")
    }
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            concurrency: 4,
            requeue_dependency: Duration::from_secs(30),
            jitter: 0.05,
            watch_managed_clusters: false,
            backoff: Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(300),
                jitter: 0.1,
            },
            fault: None,
        }
    }
}

/// From referenced objects (`Kind/namespace/name`) to the HelmReleases using them.
#[derive(Debug, Default)]
pub struct RefIndex {
    inner: Mutex<RefIndexInner>,
}

#[derive(Debug, Default)]
struct RefIndexInner {
    users: HashMap<String, HashSet<ObjectKey>>,
    uses: HashMap<ObjectKey, Vec<String>>,
}

impl RefIndex {
    /// Records that `user` references exactly `refs`.
    pub fn set(&self, user: &ObjectKey, refs: Vec<String>) {
        let mut i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(old) = i.uses.remove(user) {
            for r in old {
                if let Some(set) = i.users.get_mut(&r) {
                    set.remove(user);
                    if set.is_empty() {
                        i.users.remove(&r);
                    }
                }
            }
        }
        for r in &refs {
            i.users.entry(r.clone()).or_default().insert(user.clone());
        }
        if !refs.is_empty() {
            i.uses.insert(user.clone(), refs);
        }
    }

    /// The HelmReleases referencing `reference`.
    pub fn users(&self, reference: &str) -> Vec<ObjectKey> {
        let i = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        i.users
            .get(reference)
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The reference key of an object.
pub fn ref_key(kind: &str, namespace: &str, name: &str) -> String {
    format!("{kind}/{namespace}/{name}")
}

/// What a reconcile needs.
pub struct Context {
    /// The hub's cluster.
    pub client: Client,
    /// The agents.
    pub links: Arc<HubLinks>,
    /// The status writer.
    pub book: Arc<StatusBook>,
    /// The hub's chart store.
    pub charts: Arc<CachedCharts<NoFetcher>>,
    /// Options.
    pub options: ControllerOptions,
    /// Reference index for the watches.
    pub refs: RefIndex,
    /// Where reconciles are counted.
    pub metrics: crate::telemetry::HubMetrics,
    /// What waits for a reconcile worker (the queue-depth gauge).
    pub queue: Arc<queue::ReconcileQueue>,
    /// The data of the referenced ConfigMaps and Secrets (see [`values_cache`]).
    pub values_cache: values_cache::ValuesCache,
    /// The target each HelmRelease was last sent to.
    targets: Mutex<HashMap<ObjectKey, TargetId>>,
    /// The newest plan revision and digest per HelmRelease (the annotations may lag in
    /// the cache).
    revisions: Arc<Mutex<HashMap<ObjectKey, (u64, String)>>>,
    /// The lowest revision this hub hands out ([`epoch::floor`]); 0 without an epoch.
    plan_floor: u64,
    /// Background annotation writes (with an epoch).
    revision_writers: Arc<tokio::sync::Semaphore>,
    /// The HelmCharts as the controller's watch last saw them (set by [`run`]).
    helm_charts: std::sync::OnceLock<reflector::Store<HelmChart>>,
    /// Per HelmChart (`ns/name`): a hash of the object last applied and the generation the
    /// apply returned. A reconcile whose HelmChart would be the same, and finds it in the
    /// watch's store at that generation, skips the apply: one API write less per reconcile.
    applied_charts: Mutex<HashMap<String, (u64, i64)>>,
    /// Consecutive failed reconciles per HelmRelease (the backoff of [`error_policy`]).
    failures: Mutex<HashMap<ObjectKey, u32>>,
    /// The background annotation writes ([`record_revision_later`]), owned here and
    /// waited for when the controller stops.
    background: tokio_util::task::TaskTracker,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context.
    pub fn new(
        client: Client,
        links: Arc<HubLinks>,
        book: Arc<StatusBook>,
        charts: Arc<CachedCharts<NoFetcher>>,
        options: ControllerOptions,
    ) -> Context {
        Context {
            client,
            links,
            book,
            charts,
            options,
            refs: RefIndex::default(),
            metrics: Default::default(),
            queue: Default::default(),
            values_cache: Default::default(),
            targets: Mutex::new(HashMap::new()),
            revisions: Arc::new(Mutex::new(HashMap::new())),
            plan_floor: 0,
            revision_writers: Arc::new(tokio::sync::Semaphore::new(REVISION_WRITERS)),
            helm_charts: std::sync::OnceLock::new(),
            applied_charts: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            background: tokio_util::task::TaskTracker::new(),
        }
    }
}

impl Context {
    /// Hands out plan revisions of `epoch` ([`epoch::claim`]): every revision at least its
    /// floor, the annotations recording them written after the plan is sent.
    pub fn set_plan_epoch(&mut self, epoch: u64) {
        self.plan_floor = epoch::floor(epoch);
    }
}

/// Background writes of plan-revision annotations at once (with a plan epoch).
pub const REVISION_WRITERS: usize = 4;

/// Why a reconcile failed (beyond what its conditions say).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The Kubernetes API failed.
    #[error("HelmRelease {object}: {what}")]
    Kube {
        /// The HelmRelease.
        object: String,
        /// What was being done.
        what: &'static str,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The status could not be written.
    #[error(transparent)]
    Status(#[from] crate::status::StatusError),
    /// The reconcile panicked (caught: the controller goes on, the object is retried).
    #[error("HelmRelease {object}: the reconcile panicked: {message}")]
    Panicked {
        /// The HelmRelease.
        object: String,
        /// The panic's message.
        message: String,
    },
    /// The target's link is closed.
    #[error("HelmRelease {object}: {source}")]
    Link {
        /// The HelmRelease.
        object: String,
        /// The closed link.
        #[source]
        source: crate::link::LinkClosed,
    },
}

impl ReconcileError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReconcileError::Kube { .. } => "kube",
            ReconcileError::Status(_) => "status",
            ReconcileError::Link { .. } => "link_closed",
            ReconcileError::Panicked { .. } => "panicked",
        }
    }

    /// Whether a retry may help (always: API and link failures, and a panic, retried with
    /// backoff as the agent retries its own).
    pub fn is_transient(&self) -> bool {
        true
    }
}

fn kube_err(object: &ObjectKey, what: &'static str) -> impl FnOnce(kube::Error) -> ReconcileError {
    let object = object.to_string();
    move |source| ReconcileError::Kube {
        object,
        what,
        source,
    }
}

/// What of a HelmRelease triggers a reconcile: generation, deletion and request tokens.
fn trigger_hash(hr: &HelmRelease) -> Option<u64> {
    let mut h = DefaultHasher::new();
    hr.metadata.generation.hash(&mut h);
    hr.metadata.deletion_timestamp.is_some().hash(&mut h);
    hr.metadata.finalizers.hash(&mut h);
    for (k, v) in hr.annotations() {
        if k.starts_with("reconcile.fluxcd.io/") {
            k.hash(&mut h);
            v.hash(&mut h);
        }
    }
    Some(h.finish())
}

fn hr_ref(key: &ObjectKey) -> ObjectRef<HelmRelease> {
    ObjectRef::new(key.name.as_str()).within(key.namespace.as_str())
}

/// The HelmChart `ns/name` from the watch's store when this controller last applied the
/// same object (`desired`, a hash of it) and the store holds the generation that apply
/// produced: nothing to apply. Anything else (first reconcile after a start, a spec or label
/// change, another writer's change, a deleted HelmChart, a store behind the apply) is `None`.
fn unchanged_helm_chart(
    ctx: &Context,
    want: &str,
    namespace: &str,
    name: &str,
    desired: u64,
) -> Option<HelmChart> {
    let (hash, generation) = *ctx
        .applied_charts
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(want)?;
    if hash != desired {
        return None;
    }
    let cached = ctx
        .helm_charts
        .get()?
        .get(&ObjectRef::new(name).within(namespace))?;
    (cached.metadata.generation == Some(generation) && cached.metadata.deletion_timestamp.is_none())
        .then(|| (*cached).clone())
}

/// What of a ManagedCluster makes its HelmReleases reconcile: acceptance, deletion and the
/// agent's connection state (not heartbeats, versions or plans held).
fn managed_cluster_trigger_hash(mc: &ManagedCluster) -> Option<u64> {
    let mut h = DefaultHasher::new();
    mc.spec.accepted.hash(&mut h);
    mc.metadata.deletion_timestamp.is_some().hash(&mut h);
    mc.metadata.uid.hash(&mut h);
    let connected = mc
        .status
        .as_ref()
        .and_then(|s| s.connection.as_ref())
        .map(|c| c.state == ConnectionState::Connected);
    connected.hash(&mut h);
    Some(h.finish())
}

/// The HelmReleases (of `store`) whose `spec.clusterRef` names ManagedCluster `name`.
fn releases_of_cluster(
    store: &reflector::Store<HelmRelease>,
    name: &str,
) -> Vec<ObjectRef<HelmRelease>> {
    store
        .state()
        .iter()
        .filter(|hr| {
            hr.spec
                .cluster_ref
                .as_ref()
                .is_some_and(|c| c.kind() == ClusterReferenceKind::ManagedCluster && c.name == name)
        })
        .map(|hr| ObjectRef::from_obj(&**hr))
        .collect()
}

/// Runs the HelmRelease controller until `shutdown` resolves. `trigger` takes the
/// HelmReleases to reconcile now (the status writer sends finished deletions there).
pub async fn run(
    ctx: Arc<Context>,
    trigger: mpsc::UnboundedReceiver<ObjectKey>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let api: Api<HelmRelease> = Api::all(client.clone());
    let (reader, writer) = reflector::store();
    {
        let (queue, cache) = (ctx.queue.clone(), reader.clone());
        ctx.metrics.set_sampler(move || sample(&queue, &cache));
    }
    let queue = ctx.queue.clone();
    let stream = watcher(api, watcher::Config::default())
        .default_backoff()
        .reflect(writer)
        .applied_objects()
        .predicate_filter(trigger_hash, Default::default())
        .inspect_ok(move |hr| queue.requested(&ObjectRef::from_obj(hr)));
    let queue = ctx.queue.clone();
    let triggered = futures::stream::unfold(trigger, move |mut rx| {
        let queue = queue.clone();
        async move {
            rx.recv().await.map(|key| {
                tracing::trace!(object = %key, "reconcile requested by the status writer");
                let r = hr_ref(&key);
                queue.requested(&r);
                (r, rx)
            })
        }
    });
    let by_ref = |kind: &'static str, ctx: Arc<Context>| {
        move |ns: Option<String>, name: String| {
            let users = ctx
                .refs
                .users(&ref_key(kind, &ns.unwrap_or_default(), &name));
            if !users.is_empty() {
                tracing::trace!(
                    kind,
                    name,
                    users = users.len(),
                    "a referenced object changed"
                );
            }
            let refs = users.iter().map(hr_ref).collect::<Vec<_>>();
            for r in &refs {
                ctx.queue.requested(r);
            }
            refs
        }
    };
    let owner_queue = ctx.queue.clone();
    let oci = by_ref("OCIRepository", ctx.clone());
    let cms = by_ref("ConfigMap", ctx.clone());
    let secrets = by_ref("Secret", ctx.clone());
    let hc = by_ref("HelmChart", ctx.clone());
    let (cm_cache, secret_cache) = (ctx.clone(), ctx.clone());
    let (charts_reader, charts_writer) = reflector::store();
    let _ = ctx.helm_charts.set(charts_reader);
    // ManagedClusters accepted or connecting: their HelmReleases, at once.
    let clusters = if ctx.options.watch_managed_clusters {
        watcher(
            Api::<ManagedCluster>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .applied_objects()
        .predicate_filter(managed_cluster_trigger_hash, Default::default())
        .boxed()
    } else {
        futures::stream::pending().boxed()
    };
    let (cluster_users, cluster_queue) = (reader.clone(), ctx.queue.clone());
    let background = ctx.background.clone();
    Controller::for_stream(stream, reader)
        .watches_stream(clusters, move |mc: ManagedCluster| {
            let name = mc.name_any();
            let refs = releases_of_cluster(&cluster_users, &name);
            if !refs.is_empty() {
                tracing::debug!(cluster = %name, releases = refs.len(), "a ManagedCluster was accepted or its agent connected");
            }
            for r in &refs {
                cluster_queue.requested(r);
            }
            refs
        })
        .watches_stream(
            watcher(
                Api::<HelmChart>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .reflect(charts_writer)
            .touched_objects(),
            move |c| {
                let labels = c.labels();
                let mut out = hc(c.namespace(), c.name_any());
                if let (Some(name), Some(ns)) = (
                    labels.get(OWNER_NAME_LABEL),
                    labels.get(OWNER_NAMESPACE_LABEL),
                ) {
                    let owner = ObjectRef::new(name).within(ns);
                    owner_queue.requested(&owner);
                    out.push(owner);
                }
                out
            },
        )
        .watches(
            Api::<OCIRepository>::all(client.clone()),
            watcher::Config::default(),
            move |o| oci(o.namespace(), o.name_any()),
        )
        .watches_stream(
            watcher(
                Api::<PartialObjectMeta<ConfigMap>>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            // Into the values cache before the mapper enqueues the users of the object.
            .inspect_ok(move |e| {
                cm_cache
                    .values_cache
                    .observe(ValuesReferenceKind::ConfigMap, e)
            })
            .touched_objects(),
            move |c| cms(c.namespace(), c.name_any()),
        )
        .watches_stream(
            watcher(
                Api::<PartialObjectMeta<Secret>>::all(client.clone()),
                watcher::Config::default(),
            )
            .default_backoff()
            .inspect_ok(move |e| {
                secret_cache
                    .values_cache
                    .observe(ValuesReferenceKind::Secret, e)
            })
            .touched_objects(),
            move |s| secrets(s.namespace(), s.name_any()),
        )
        .reconcile_on(triggered)
        .with_config(
            kube::runtime::controller::Config::default().concurrency(ctx.options.concurrency),
        )
        .graceful_shutdown_on(shutdown)
        .run(measured, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "HelmRelease reconcile");
            }
        })
        .await;
    // The annotation writes under way finish (each is one API call).
    background.close();
    if tokio::time::timeout(Duration::from_secs(10), background.wait())
        .await
        .is_err()
    {
        tracing::warn!("plan-revision annotation writes still running at shutdown");
    }
}

/// The gauges of `/metrics` sampled from the controller: its queue depth and the
/// HelmReleases of its cache by Ready status.
fn sample(
    queue: &queue::ReconcileQueue,
    cache: &reflector::Store<HelmRelease>,
) -> crate::telemetry::Sample {
    let mut sample = crate::telemetry::Sample {
        queue_depth: queue.depth(cache),
        ..Default::default()
    };
    for hr in cache.state() {
        let ready = hr
            .status
            .as_ref()
            .and_then(|s| s.conditions.get_condition(condition::READY))
            .map(|c| c.status);
        match ready {
            Some(flotilla_core::meta::ConditionStatus::True) => sample.ready_true += 1,
            Some(flotilla_core::meta::ConditionStatus::False) => sample.ready_false += 1,
            _ => sample.ready_unknown += 1,
        }
    }
    sample
}

/// [`reconcile`], in its span, timed and counted by result, its panics caught (as the
/// agent's runtime catches its own: a panic becomes [`ReconcileError::Panicked`], retried
/// with backoff, and the controller goes on with the other objects).
async fn measured(hr: Arc<HelmRelease>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    use futures::FutureExt as _;
    use tracing::Instrument as _;
    let object = ObjectRef::from_obj(&*hr);
    ctx.queue.started(&object);
    let started = std::time::Instant::now();
    let span = tracing::info_span!(
        "reconcile",
        object = %format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
        generation = hr.metadata.generation.unwrap_or_default(),
    );
    let key = key_of(&hr);
    let mut label = "success";
    let result = std::panic::AssertUnwindSafe(reconcile(hr.clone(), ctx.clone(), &mut label))
        .catch_unwind()
        .instrument(span)
        .await
        .unwrap_or_else(|panic| {
            Err(ReconcileError::Panicked {
                object: format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
                message: crate::supervisor::panic_message(&*panic),
            })
        });
    match (&result, &key) {
        (Err(_), _) => label = "error",
        (Ok(_), Some(key)) => {
            ctx.failures
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(key);
        }
        (Ok(_), None) => {}
    }
    ctx.metrics
        .observe("helmrelease", label, started.elapsed().as_secs_f64());
    result
}

fn error_policy(hr: Arc<HelmRelease>, e: &ReconcileError, ctx: Arc<Context>) -> Action {
    let failures = match key_of(&hr) {
        Some(key) => {
            let mut failures = ctx.failures.lock().unwrap_or_else(|p| p.into_inner());
            let n = failures.entry(key).or_default();
            *n = n.saturating_add(1);
            *n
        }
        None => 1,
    };
    let after = ctx
        .options
        .backoff
        .delay_jittered(failures, &mut fastrand::Rng::new());
    tracing::warn!(
        object = %format!("{}/{}", hr.namespace().unwrap_or_default(), hr.name_any()),
        kind = e.kind(),
        failures,
        retry_after = ?after,
        error = %error_chain(e),
        "HelmRelease reconcile failed"
    );
    ctx.queue.requeue(&ObjectRef::from_obj(&*hr), after)
}

/// The outcome of a step that stops the reconcile with a hub condition.
struct Stop {
    reason: &'static str,
    message: String,
    stalled: bool,
    requeue: Option<Duration>,
    /// Post an Event: `Some(true)` a Warning, `Some(false)` a Normal one.
    event: Option<bool>,
    /// The Event's message when it is not the condition's.
    event_message: Option<String>,
}

impl Stop {
    fn new(reason: &'static str, message: String) -> Stop {
        Stop {
            reason,
            message,
            stalled: false,
            requeue: None,
            event: None,
            event_message: None,
        }
    }

    /// Flux's terminal `InvalidCELExpression`: `Ready=False` and `Stalled=True` with
    /// "Reconciliation failed terminally due to configuration error: <err>", a Warning
    /// Event with the error alone, no requeue until the object changes.
    fn invalid_cel(error: &flotilla_agent::cel::CelError) -> Stop {
        let mut stop = Stop::new(
            reason::INVALID_CEL_EXPRESSION,
            format!("{TERMINAL_ERROR_MESSAGE}: {error}"),
        )
        .stalled()
        .warning();
        stop.event_message = Some(error.to_string());
        stop
    }

    fn requeue(mut self, d: Duration) -> Stop {
        self.requeue = Some(d);
        self
    }

    fn stalled(mut self) -> Stop {
        self.stalled = true;
        self
    }

    fn warning(mut self) -> Stop {
        self.event = Some(true);
        self
    }

    fn normal_event(mut self) -> Stop {
        self.event = Some(false);
        self
    }
}

async fn reconcile(
    hr: Arc<HelmRelease>,
    ctx: Arc<Context>,
    label: &mut &'static str,
) -> Result<Action, ReconcileError> {
    let Some(key) = key_of(&hr) else {
        return Ok(Action::await_change());
    };
    if let Some(fault) = &ctx.options.fault {
        (fault.0)(&hr);
    }
    if hr.metadata.deletion_timestamp.is_some() {
        return finalize(&hr, &key, &ctx).await;
    }
    if !hr.finalizers().iter().any(|f| f == FINALIZER) {
        let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), key.namespace.as_str());
        let mut finalizers = hr.finalizers().to_vec();
        finalizers.push(FINALIZER.to_owned());
        api.patch(
            key.name.as_str(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": hr.resource_version(),
                }
            })),
        )
        .await
        .map_err(kube_err(&key, "adding the finalizer"))?;
    }
    if hr.spec.suspend {
        // Flux does nothing for a suspended object; here the agent holds the plan and would
        // go on reconciling it (interval, drift), so it is told: the plan goes out with
        // `suspend` set when it can be built, and nothing is reported when it cannot.
        let mut helm_chart = hr
            .status
            .as_ref()
            .map(|s| s.helm_chart.clone())
            .unwrap_or_default();
        match plan_and_send(&hr, &key, &ctx, &mut helm_chart).await {
            Ok(_) => {
                tracing::debug!(object = %key, "suspended; the agent holds the plan suspended")
            }
            Err(Ok(stop)) => {
                tracing::debug!(object = %key, reason = stop.reason, "suspended; plan not built")
            }
            Err(Err(e)) => {
                tracing::debug!(object = %key, error = %error_chain(&e), "suspended; plan not sent")
            }
        }
        // As Flux: a suspended object's generation counts as observed.
        ctx.book.suspended(&hr, &key).await?;
        return Ok(Action::await_change());
    }
    let generation = hr.metadata.generation.unwrap_or_default();
    let helm_chart_before = hr
        .status
        .as_ref()
        .map(|s| s.helm_chart.clone())
        .unwrap_or_default();
    let mut helm_chart = helm_chart_before.clone();
    let outcome = plan_and_send(&hr, &key, &ctx, &mut helm_chart).await;
    let interval = hr.spec.interval.get();
    match outcome {
        Ok(hub) => {
            // Not connected yet: look again soon to clear the condition once it is.
            let after = if hub.is_some() {
                ctx.options.requeue_dependency
            } else {
                jitter(interval, ctx.options.jitter)
            };
            ctx.book.set_hub(&hr, &key, hub, helm_chart).await?;
            Ok(ctx.queue.requeue(&hr_ref(&key), after))
        }
        Err(Err(e)) => {
            if helm_chart != helm_chart_before {
                ctx.book.set_hub(&hr, &key, None, helm_chart).await.ok();
            }
            Err(e)
        }
        Err(Ok(stop)) => {
            *label = "not_ready";
            tracing::info!(object = %key, reason = stop.reason, message = %stop.message, "HelmRelease not ready");
            if let Some(warning) = stop.event {
                let message = stop.event_message.as_deref().unwrap_or(&stop.message);
                ctx.book.event(&hr, warning, stop.reason, message).await;
            }
            ctx.book
                .set_hub(
                    &hr,
                    &key,
                    Some(HubCondition {
                        reason: stop.reason.to_owned(),
                        message: stop.message,
                        stalled: stop.stalled,
                        generation,
                    }),
                    helm_chart,
                )
                .await?;
            Ok(match stop.requeue {
                Some(d) => ctx.queue.requeue(&hr_ref(&key), d),
                None if stop.stalled => Action::await_change(),
                None => ctx
                    .queue
                    .requeue(&hr_ref(&key), jitter(interval, ctx.options.jitter)),
            })
        }
    }
}

/// `Ok(hub condition)` once the plan is sent; `Err(Ok(stop))` for a hub-side condition,
/// `Err(Err(e))` for a failure to retry.
async fn plan_and_send(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    helm_chart: &mut String,
) -> Result<Option<HubCondition>, Result<Stop, ReconcileError>> {
    let started = std::time::Instant::now();
    let core = hr
        .to_core()
        .map_err(|e| Ok(Stop::new(INVALID_SPEC, e.to_string()).stalled()))?;
    let ns = key.namespace.as_str();
    ctx.refs.set(key, references(hr, key));
    let capi_cluster = hr.spec.cluster_ref.as_ref().and_then(|c| c.cluster_api());

    // As Flux, before the dependencies: expressions that do not parse stall the object.
    flotilla_agent::cel::HealthChecks::new(&hr.spec.health_check_exprs)
        .map_err(|e| Ok(Stop::invalid_cel(&e)))?;

    dependencies(hr, key, ctx).await.map_err(Ok)?;

    let step = std::time::Instant::now();
    let artifact = source(hr, key, ctx, helm_chart).await?;
    ctx.metrics.observe_step("source", step.elapsed());
    let step = std::time::Instant::now();
    let chart = load_chart(&artifact, ctx, hr).await?;
    ctx.metrics.observe_step("chart", step.elapsed());

    let step = std::time::Instant::now();
    let values = compose_values(hr, key, ctx).await?;
    ctx.metrics.observe_step("values", step.elapsed());

    if let Some(cluster) = capi_cluster {
        cluster_api_gate(ctx, ns, cluster).await.map_err(Ok)?;
    }
    if hr.spec.cluster_ref.is_none()
        && let Some(cm) = hr
            .spec
            .kube_config
            .as_ref()
            .and_then(|k| k.config_map_ref.as_ref())
    {
        // Checked here (as Flux's REST client getter, after the values) so a bad ConfigMap
        // is a condition naming its key; the push agent reads it again when it starts.
        let data = util::config_map_data(&ctx.client, ns, &cm.name)
            .await
            .map_err(|e| crate::workload_identity::ProviderError::Read {
                namespace: ns.to_owned(),
                name: cm.name.clone(),
                reason: error_chain(&e),
            });
        if let Err(e) = data.and_then(|d| crate::workload_identity::parse(ns, &cm.name, d.as_ref()))
        {
            return Err(Ok(Stop::new(reason::REST_CLIENT_ERROR, e.to_string())
                .requeue(ctx.options.requeue_dependency)));
        }
    }
    let target = target_of(hr).map_err(Ok)?;
    let link = match ctx.links.resolve(&target).await {
        Ok(link) => link,
        Err(TargetError::NotConnected { cluster }) => {
            return Err(Ok(Stop::new(
                AGENT_NOT_CONNECTED,
                format!("no agent connected for cluster {cluster}"),
            )
            .requeue(ctx.options.requeue_dependency)));
        }
        Err(TargetError::Push(e)) => {
            return Err(Ok(Stop::new(reason::REST_CLIENT_ERROR, e.to_string())
                .requeue(ctx.options.requeue_dependency)));
        }
    };

    let step = std::time::Instant::now();
    let mut plan = ReleasePlan::from_helm_release(&core, PlanRevision::new(0), chart, values)
        .map_err(|e| Ok(Stop::new(INVALID_SPEC, e.to_string()).stalled()))?;
    let digest = plan_digest(&plan);
    ctx.metrics.observe_step("plan", step.elapsed());
    ctx.metrics.observe_step("total", started.elapsed());
    let (revision, record_after_send) = plan_revision(hr, key, ctx, &digest).await.map_err(Err)?;
    plan.revision = revision;

    // A change of cluster: the old target's agent uninstalls.
    let previous = ctx
        .targets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), target.clone());
    if let Some(previous) = previous.filter(|p| *p != target)
        && let Some(old) = ctx.links.link(&previous)
    {
        tracing::info!(object = %key, from = %previous, to = %target, "target changed: the old target uninstalls");
        let _ = old.send(Command::Delete(DeleteRequest {
            object: key.clone(),
            revision,
            uninstall: Some(core.spec.uninstall()),
        }));
        retire_if_unused(ctx, &previous);
    }

    tracing::debug!(object = %key, %revision, target = %target, "plan sent");
    link.send(Command::Upsert(Box::new(plan)))
        .map_err(|source| {
            Err(ReconcileError::Link {
                object: key.to_string(),
                source,
            })
        })?;
    if record_after_send {
        record_revision_later(ctx, key, revision.get(), digest);
    }
    if let TargetId::Cluster(id) = &target
        && !link.connected()
    {
        return Ok(Some(HubCondition {
            reason: AGENT_NOT_CONNECTED.into(),
            message: format!("no agent connected for cluster {id}"),
            stalled: false,
            generation: hr.metadata.generation.unwrap_or_default(),
        }));
    }
    Ok(None)
}

/// The namespace and name of the HelmChart the controller manages for `template` of
/// HelmRelease `key`: `<ns>-<name>` in the namespace of the template's source.
fn managed_helm_chart(
    template: &flotilla_core::spec::HelmChartTemplate,
    key: &ObjectKey,
) -> (String, String) {
    let ns = key.namespace.as_str();
    let src_ns = template
        .spec
        .source_ref
        .namespace
        .clone()
        .unwrap_or_else(|| ns.to_owned());
    (src_ns, format!("{ns}-{}", key.name))
}

/// Every object a reconcile of `hr` reads whose change must reconcile it again (the keys
/// of [`RefIndex`]): its `valuesFrom` ConfigMaps and Secrets, its managed HelmChart or its
/// `chartRef`, its `kubeConfig.configMapRef` ConfigMap (workload identity) and the
/// `<cluster>-kubeconfig` Secret of a Cluster API `clusterRef`. One list, set once per
/// reconcile: a later step must not replace it with a part of it.
fn references(hr: &HelmRelease, key: &ObjectKey) -> Vec<String> {
    let ns = key.namespace.as_str();
    let mut refs: Vec<String> = values::referenced_objects(&hr.spec.values_from)
        .into_iter()
        .map(|(kind, name)| ref_key(kind_name(kind), ns, name))
        .collect();
    if let Some(template) = &hr.spec.chart {
        let (src_ns, name) = managed_helm_chart(template, key);
        refs.push(ref_key("HelmChart", &src_ns, &name));
    }
    if let Some(r) = &hr.spec.chart_ref {
        let kind = match r.kind {
            ChartRefKind::OCIRepository => "OCIRepository",
            _ => "HelmChart",
        };
        refs.push(ref_key(kind, r.namespace.as_deref().unwrap_or(ns), &r.name));
    }
    if let Some(cm) = hr
        .spec
        .kube_config
        .as_ref()
        .and_then(|k| k.config_map_ref.as_ref())
    {
        refs.push(ref_key("ConfigMap", ns, &cm.name));
    }
    if let Some(cluster) = hr.spec.cluster_ref.as_ref().and_then(|c| c.cluster_api()) {
        refs.push(ref_key(
            "Secret",
            ns,
            &crate::capi::kubeconfig_secret_name(cluster),
        ));
    }
    refs
}

/// The kind of a chart template's source, as Flux names it in messages.
fn source_kind_name(kind: flotilla_core::spec::SourceKind) -> &'static str {
    use flotilla_core::spec::SourceKind;
    match kind {
        SourceKind::HelmRepository => "HelmRepository",
        SourceKind::GitRepository => "GitRepository",
        SourceKind::Bucket => "Bucket",
    }
}

fn kind_name(kind: ValuesReferenceKind) -> &'static str {
    match kind {
        ValuesReferenceKind::ConfigMap => "ConfigMap",
        ValuesReferenceKind::Secret => "Secret",
    }
}

/// Waits (a requeued `Ready=False`) until Cluster API Cluster `namespace/name` exists
/// and its control plane is initialized.
async fn cluster_api_gate(ctx: &Context, namespace: &str, name: &str) -> Result<(), Stop> {
    use crate::capi::ClusterState;
    let requeue = ctx.options.requeue_dependency;
    match crate::capi::cluster_state(&ctx.client, namespace, name).await {
        Ok(ClusterState::Initialized) => Ok(()),
        Ok(ClusterState::NotFound) => Err(Stop::new(
            CLUSTER_NOT_FOUND,
            format!("Cluster API Cluster '{namespace}/{name}' (spec.clusterRef) not found"),
        )
        .requeue(requeue)),
        Ok(ClusterState::NotInitialized { phase }) => {
            let phase = if phase.is_empty() {
                String::new()
            } else {
                format!(" (phase {phase})")
            };
            Err(Stop::new(
                CLUSTER_NOT_INITIALIZED,
                format!(
                    "waiting for the control plane of Cluster API Cluster '{namespace}/{name}' to be initialized{phase}"
                ),
            )
            .requeue(requeue))
        }
        Err(e) => Err(Stop::new(
            reason::REST_CLIENT_ERROR,
            format!(
                "reading Cluster API Cluster '{namespace}/{name}' (spec.clusterRef): {}",
                error_chain(&e)
            ),
        )
        .requeue(requeue)),
    }
}

/// The target of a HelmRelease.
fn target_of(hr: &HelmRelease) -> Result<TargetId, Stop> {
    if let Some(cluster) = hr.spec.cluster_ref.as_ref().and_then(|c| c.cluster_api()) {
        return Ok(TargetId::KubeConfig {
            namespace: hr.namespace().unwrap_or_default(),
            name: crate::capi::kubeconfig_secret_name(cluster),
            // Cluster API writes the kubeconfig under `value`, the default key.
            key: None,
        });
    }
    if let Some(c) = &hr.spec.cluster_ref {
        let id = ClusterId::new(c.name.clone())
            .map_err(|e| Stop::new(INVALID_SPEC, format!("spec.clusterRef.name: {e}")).stalled())?;
        return Ok(TargetId::Cluster(id));
    }
    if let Some(kc) = &hr.spec.kube_config {
        if let Some(s) = &kc.secret_ref {
            return Ok(TargetId::KubeConfig {
                namespace: hr.namespace().unwrap_or_default(),
                name: s.name.clone(),
                key: s.key.clone().filter(|k| !k.is_empty()),
            });
        }
        if let Some(c) = &kc.config_map_ref {
            return Ok(TargetId::KubeConfigMap {
                namespace: hr.namespace().unwrap_or_default(),
                name: c.name.clone(),
            });
        }
        return Err(Stop::new(
            INVALID_SPEC,
            "exactly one of .spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be set"
                .into(),
        )
        .stalled());
    }
    Ok(TargetId::Local)
}

/// Stops the push agent of `target` when no HelmRelease uses it and it holds no plan (a
/// deletion it was just sent is still a held plan: it must run before the agent stops).
fn retire_if_unused(ctx: &Context, target: &TargetId) {
    if matches!(target, TargetId::Cluster(_)) {
        return;
    }
    let used = ctx
        .targets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .any(|t| t == target);
    let holds = ctx
        .links
        .push
        .link(target)
        .is_some_and(|l| !l.held().is_empty());
    if !used && !holds {
        ctx.links.push.retire(target);
    }
}

async fn dependencies(hr: &HelmRelease, key: &ObjectKey, ctx: &Context) -> Result<(), Stop> {
    for dep in &hr.spec.depends_on {
        let ns = dep
            .namespace
            .clone()
            .unwrap_or_else(|| key.namespace.to_string());
        let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), &ns);
        let not_ready = |message: String| {
            Stop::new(reason::DEPENDENCY_NOT_READY, message)
                .requeue(ctx.options.requeue_dependency)
                .normal_event()
        };
        let d = match api.get(&dep.name).await {
            Ok(d) => d,
            Err(e) => {
                return Err(not_ready(format!(
                    "unable to get '{ns}/{}' dependency: {}",
                    dep.name,
                    error_chain(&e)
                )));
            }
        };
        if let Some(source) = dep.ready_expr.as_deref().filter(|e| !e.is_empty()) {
            if !ready_by_expr(hr, &d, source).map_err(|e| match e {
                ReadyExprError::Terminal(e) => Stop::invalid_cel(&e),
                ReadyExprError::Evaluate(message) => not_ready(message),
            })? {
                return Err(not_ready(format!(
                    "dependency '{ns}/{}' is not ready according to readyExpr eval",
                    dep.name
                )));
            }
            // As Flux without its AdditiveCELDependencyCheck gate: the expression alone
            // decides.
            continue;
        }
        let ready = d.status.as_ref().is_some_and(|s| {
            d.metadata.generation == Some(s.observed_generation)
                && s.conditions.is_true(condition::READY)
        });
        if !ready {
            return Err(not_ready(format!(
                "dependency '{ns}/{}' is not ready",
                dep.name
            )));
        }
    }
    Ok(())
}

/// Why `readyExpr` gave no answer.
enum ReadyExprError {
    /// It does not compile: terminal, the error Flux's.
    Terminal(flotilla_agent::cel::CelError),
    /// Evaluating it failed (the dependency is not ready; Flux's message).
    Evaluate(String),
}

/// `dependsOn[].readyExpr` over `self` (the HelmRelease) and `dep` (the dependency), as
/// Flux's `evalReadyExpr`: compiled with those two variables only, a boolean result.
fn ready_by_expr(
    hr: &HelmRelease,
    dep: &HelmRelease,
    source: &str,
) -> Result<bool, ReadyExprError> {
    use flotilla_agent::cel::{CelError, Expression};
    let name = dep.metadata.name.as_deref().unwrap_or_default();
    let expr = Expression::compile_bool(source, &["self", "dep"]).map_err(|e| {
        // Flux wraps it: "failed to evaluate dependency <name>: <err>".
        ReadyExprError::Terminal(CelError::Dependency {
            name: name.to_owned(),
            source: Box::new(e),
        })
    })?;
    let json = |o: &HelmRelease| serde_json::to_value(o).unwrap_or(Value::Null);
    let (me, it) = (json(hr), json(dep));
    expr.evaluate_bool(&[("self", &me), ("dep", &it)])
        .map_err(|e| ReadyExprError::Evaluate(e.to_string()))
}

/// Whether a source's status says it is ready; the message when not.
fn source_ready(
    generation: Option<i64>,
    observed: i64,
    conditions: &[Condition],
    artifact: Option<&Artifact>,
) -> Result<(), String> {
    let conditions = conditions.to_vec();
    let msg = conditions
        .get_condition(condition::READY)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    // Flux's rule (generation observed, not stalled, an artifact), and not `Ready=False`
    // for that generation: a HelmChart whose version no longer resolves keeps its last
    // artifact, and the HelmRelease says why rather than staying on the old chart silently.
    let failed = conditions
        .get_condition(condition::READY)
        .is_some_and(|c| c.status == flotilla_core::meta::ConditionStatus::False);
    let ready = generation.unwrap_or_default() == observed
        && !conditions.is_true(condition::STALLED)
        && !failed
        && artifact.is_some();
    if ready { Ok(()) } else { Err(msg) }
}

/// The chart artifact of a source.
struct SourceArtifact {
    digest: ChartDigest,
    /// The artifact revision of an `OCIRepository` (`<tag>@<digest>` or `<digest>`): the
    /// chart's version gets its digest ([`chart_artifact`]).
    oci_revision: Option<String>,
    /// `HelmChart 'ns/name'` or `OCIRepository 'ns/name'`, for messages.
    what: String,
}

async fn source(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    helm_chart: &mut String,
) -> Result<SourceArtifact, Result<Stop, ReconcileError>> {
    let ns = key.namespace.as_str();
    let not_ready = |what: String, msg: String| {
        let message = if msg.is_empty() {
            format!("{what} is not ready")
        } else {
            format!("{what} is not ready: {msg}")
        };
        Ok(Stop::new(reason::SOURCE_NOT_READY, message)
            .requeue(jitter(ctx.options.requeue_dependency, ctx.options.jitter)))
    };
    let bad_digest = |what: &str, digest: &str| {
        Ok(Stop::new(
            reason::ARTIFACT_FAILED,
            format!("{what} artifact digest '{digest}' is not a sha256 digest"),
        ))
    };
    if let Some(template) = &hr.spec.chart {
        let (src_ns, name) = managed_helm_chart(template, key);
        let want = format!("{src_ns}/{name}");
        if !helm_chart.is_empty() && *helm_chart != want {
            delete_helm_chart(ctx, hr, helm_chart).await;
        }
        let created = *helm_chart != want;
        let mut labels: BTreeMap<String, String> = template
            .metadata
            .as_ref()
            .map(|m| m.labels.clone())
            .unwrap_or_default();
        labels.insert(OWNER_NAME_LABEL.into(), key.name.to_string());
        labels.insert(OWNER_NAMESPACE_LABEL.into(), ns.to_owned());
        let annotations = template
            .metadata
            .as_ref()
            .map(|m| m.annotations.clone())
            .unwrap_or_default();
        let spec = HelmChartSpec {
            chart: template.spec.chart.clone(),
            version: Some(template.spec.version().to_owned()),
            source_ref: LocalHelmChartSourceReference {
                api_version: template.spec.source_ref.api_version.clone(),
                kind: template.spec.source_ref.kind,
                name: template.spec.source_ref.name.clone(),
            },
            interval: template.spec.interval.unwrap_or(hr.spec.interval),
            reconcile_strategy: Some(
                template
                    .spec
                    .reconcile_strategy
                    .unwrap_or(ReconcileStrategy::ChartVersion),
            ),
            values_files: template.spec.values_files.clone(),
            ignore_missing_values_files: template.spec.ignore_missing_values_files,
            suspend: false,
            verify: template.spec.verify.clone(),
        };
        let mut object = serde_json::json!({
            "apiVersion": HelmChart::api_version(&()),
            "kind": HelmChart::kind(&()),
            "metadata": {"name": name, "namespace": src_ns, "labels": labels},
            "spec": spec,
        });
        // An empty map would make every apply a write (the server drops it when storing,
        // so the applied object never equals the stored one), and every write a watch event.
        if !annotations.is_empty() {
            object["metadata"]["annotations"] = serde_json::json!(annotations);
        }
        let desired = {
            let mut hasher = DefaultHasher::new();
            object.to_string().hash(&mut hasher);
            hasher.finish()
        };
        let hc = match unchanged_helm_chart(ctx, &want, &src_ns, &name, desired) {
            Some(hc) if !created => hc,
            _ => {
                let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), &src_ns);
                let hc = api
                    .patch(
                        &name,
                        &PatchParams::apply(FIELD_MANAGER).force(),
                        &Patch::Apply(&object),
                    )
                    .await
                    .map_err(|e| Err(kube_err(key, "applying the HelmChart")(e)))?;
                tracing::trace!(chart = %want, resource_version = ?hc.metadata.resource_version, "HelmChart applied");
                if let Some(generation) = hc.metadata.generation {
                    ctx.applied_charts
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .insert(want.clone(), (desired, generation));
                }
                hc
            }
        };
        // Flux's `HelmChartCreated` / `HelmChartConfigured` Events (helm-controller's
        // HelmChartTemplate, type Trace, posted as Normal): created when the status named no
        // chart of this HelmRelease yet, configured when a spec change (a generation past
        // the first) is not observed by the source controller yet. Unchanged: no Event. (A
        // reconcile before the source controller caught up repeats the same Event, which
        // counts on the existing one.)
        let observed = hc.status.as_ref().map_or(0, |s| s.observed_generation);
        let generation = hc.metadata.generation.unwrap_or_default();
        let action = if created {
            Some(("HelmChartCreated", "Created"))
        } else if generation > 1 && generation > observed {
            Some(("HelmChartConfigured", "Configured"))
        } else {
            None
        };
        if let Some((reason, verb)) = action {
            let message = format!(
                "{verb} HelmChart/{want} with SourceRef '{}/{src_ns}/{}'",
                source_kind_name(template.spec.source_ref.kind),
                template.spec.source_ref.name
            );
            ctx.book.event(hr, false, reason, &message).await;
        }
        *helm_chart = want.clone();
        let what = format!("HelmChart '{want}'");
        let status = hc.status.clone().unwrap_or_default();
        source_ready(
            hc.metadata.generation,
            status.observed_generation,
            &status.conditions,
            status.artifact.as_ref(),
        )
        .map_err(|m| not_ready(what.clone(), m))?;
        let artifact = status.artifact.expect("checked by source_ready");
        let digest = ChartDigest::new(artifact.digest.clone())
            .map_err(|_| bad_digest(&what, &artifact.digest))?;
        return Ok(SourceArtifact {
            digest,
            oci_revision: None,
            what,
        });
    }
    if !helm_chart.is_empty() {
        delete_helm_chart(ctx, hr, helm_chart).await;
        helm_chart.clear();
    }
    let Some(r) = &hr.spec.chart_ref else {
        return Err(Ok(Stop::new(
            INVALID_SPEC,
            "invalid Chart reference: exactly one of spec.chart and spec.chartRef must be set"
                .into(),
        )
        .stalled()));
    };
    let src_ns = r.namespace.clone().unwrap_or_else(|| ns.to_owned());
    let what_get = |kind: &str, e: kube::Error| {
        Ok(Stop::new(
            reason::ARTIFACT_FAILED,
            format!(
                "could not get Source object: {kind} '{src_ns}/{}': {}",
                r.name,
                error_chain(&e)
            ),
        )
        .requeue(ctx.options.requeue_dependency))
    };
    match r.kind {
        ChartRefKind::OCIRepository => {
            let api: Api<OCIRepository> = Api::namespaced(ctx.client.clone(), &src_ns);
            let o = api
                .get(&r.name)
                .await
                .map_err(|e| what_get("OCIRepository", e))?;
            let what = format!("OCIRepository '{src_ns}/{}'", r.name);
            let status = o.status.clone().unwrap_or_default();
            source_ready(
                o.metadata.generation,
                status.observed_generation,
                &status.conditions,
                status.artifact.as_ref(),
            )
            .map_err(|m| not_ready(what.clone(), m))?;
            let artifact = status.artifact.expect("checked by source_ready");
            let digest = ChartDigest::new(artifact.digest.clone())
                .map_err(|_| bad_digest(&what, &artifact.digest))?;
            Ok(SourceArtifact {
                digest,
                oci_revision: Some(artifact.revision),
                what,
            })
        }
        _ => {
            let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), &src_ns);
            let hc = api
                .get(&r.name)
                .await
                .map_err(|e| what_get("HelmChart", e))?;
            let what = format!("HelmChart '{src_ns}/{}'", r.name);
            let status = hc.status.clone().unwrap_or_default();
            source_ready(
                hc.metadata.generation,
                status.observed_generation,
                &status.conditions,
                status.artifact.as_ref(),
            )
            .map_err(|m| not_ready(what.clone(), m))?;
            let artifact = status.artifact.expect("checked by source_ready");
            let digest = ChartDigest::new(artifact.digest.clone())
                .map_err(|_| bad_digest(&what, &artifact.digest))?;
            Ok(SourceArtifact {
                digest,
                oci_revision: None,
                what,
            })
        }
    }
}

/// Deletes the managed HelmChart `ns/name` of `hr`; Flux's `HelmChartDeleted` Event when
/// it was there.
async fn delete_helm_chart(ctx: &Context, hr: &HelmRelease, namespaced: &str) {
    let Some((ns, name)) = namespaced.split_once('/') else {
        return;
    };
    let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), ns);
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => {
            tracing::info!(chart = namespaced, "managed HelmChart deleted");
            let message = format!("deleted HelmChart '{namespaced}'");
            ctx.book
                .event(hr, false, "HelmChartDeleted", &message)
                .await;
        }
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => {
            tracing::warn!(chart = namespaced, error = %error_chain(&e), "deleting the managed HelmChart failed")
        }
    }
}

/// The chart of the artifact from the store, as the plan names it.
async fn load_chart(
    artifact: &SourceArtifact,
    ctx: &Context,
    hr: &HelmRelease,
) -> Result<ChartArtifact, Result<Stop, ReconcileError>> {
    let chart = match ctx.charts.get(&artifact.digest).await {
        Ok(chart) => chart,
        Err(ChartError::NotFound { .. }) => {
            // The store lost it (a new artifact directory, say): ask the source again.
            if hr.spec.chart.is_some() {
                request_reconcile_of_helm_chart(ctx, hr).await;
            }
            let after = ctx.options.requeue_dependency;
            return Err(Ok(Stop::new(
                reason::ARTIFACT_FAILED,
                format!(
                    "Source not ready: artifact not found. Retrying in {}",
                    flotilla_core::duration::GoDuration::from(after)
                ),
            )
            .requeue(after)));
        }
        Err(e) => {
            return Err(Ok(Stop::new(
                reason::ARTIFACT_FAILED,
                format!(
                    "Could not load chart: {} ({})",
                    error_chain(&e),
                    artifact.what
                ),
            )
            .requeue(ctx.options.requeue_dependency)));
        }
    };
    chart_artifact(
        &chart.metadata.name,
        &chart.metadata.version,
        &chart.metadata.app_version,
        artifact,
    )
}

/// The chart as the plan names it: from an `OCIRepository`, its version with the
/// revision's digest as build metadata, by helm-controller's rule
/// ([`chart_version_with_digest`](crate::sources::oci::chart_version_with_digest), the one
/// copy of it), and `ChartMutateError` when the revision does not fit the chart.
fn chart_artifact(
    name: &str,
    version: &str,
    app_version: &str,
    artifact: &SourceArtifact,
) -> Result<ChartArtifact, Result<Stop, ReconcileError>> {
    let (version, oci_digest) = match &artifact.oci_revision {
        Some(revision) => {
            let (version, digest) =
                crate::sources::oci::chart_version_with_digest(version, revision).map_err(
                    |e| {
                        Ok(Stop::new(
                            reason::CHART_MUTATE_ERROR,
                            format!("{e} ({})", artifact.what),
                        ))
                    },
                )?;
            (version, Some(digest))
        }
        None => (version.to_owned(), None),
    };
    Ok(ChartArtifact {
        name: name.to_owned(),
        version,
        app_version: Some(app_version.to_owned()).filter(|a| !a.is_empty()),
        digest: artifact.digest.clone(),
        oci_digest,
    })
}

async fn request_reconcile_of_helm_chart(ctx: &Context, hr: &HelmRelease) {
    let Some(status) = &hr.status else { return };
    let Some((ns, name)) = status.helm_chart.split_once('/') else {
        return;
    };
    let api: Api<HelmChart> = Api::namespaced(ctx.client.clone(), ns);
    let patch = serde_json::json!({"metadata": {"annotations": {
        RECONCILE_REQUEST_ANNOTATION: util::now().as_str(),
    }}});
    if let Err(e) = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        tracing::debug!(chart = %status.helm_chart, error = %error_chain(&e), "requesting a HelmChart reconcile failed");
    }
}

/// A valuesFrom object read: kind and name, and its data (`None`: not found).
type ReadObject = (
    (ValuesReferenceKind, String),
    Option<Arc<values_cache::Data>>,
);

/// Reads the valuesFrom objects (from [`Context::values_cache`] when it may serve this
/// reconcile, else from the API, refreshing the cache) and composes the values.
async fn compose_values(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
) -> Result<Value, Result<Stop, ReconcileError>> {
    let ns = key.namespace.as_str();
    let cache = &ctx.values_cache;
    let request = values_cache::request_hash(hr);
    let may_use_cache = cache.may_use(key, request);
    let mut found: Vec<ReadObject> = Vec::new();
    let (mut hits, mut reads) = (0u64, 0u64);
    for (kind, name) in values::referenced_objects(&hr.spec.values_from) {
        let cached = if may_use_cache {
            cache.get(kind, ns, name)
        } else {
            None
        };
        let read = match cached {
            Some(read) => {
                hits += 1;
                read
            }
            None => {
                reads += 1;
                let ticket = cache.begin(kind, ns, name);
                let read = values_cache::read(&ctx.client, kind, ns, name)
                    .await
                    .map_err(|e| {
                        Ok(Stop::new(
                            reason::VALUES_ERROR,
                            format!(
                                "could not resolve {} chart values reference '{ns}/{name}': {}",
                                kind_name(kind),
                                error_chain(&e)
                            ),
                        )
                        .warning()
                        .requeue(ctx.options.requeue_dependency))
                    })?;
                cache.finish(ticket, &read);
                read
            }
        };
        found.push(((kind, name.to_owned()), read.map(|(_, data)| data)));
    }
    cache.read_done(key, request);
    ctx.metrics.values_reads(hits, reads);
    let composed = values::compose(
        key,
        &hr.spec.values_from,
        |kind, name| match found.iter().find(|((k, n), _)| *k == kind && n == name) {
            Some((_, Some(data))) => Source::Found(data.as_ref()),
            _ => Source::NotFound,
        },
        hr.spec.values.as_ref(),
    )
    .map_err(|e| {
        tracing::warn!(object = %key, error = %e, "values not composed");
        Ok(Stop::new(
            reason::VALUES_ERROR,
            format!("{}: {}", e.at(), e.condition_message()),
        )
        .warning()
        .requeue(ctx.options.requeue_dependency))
    })?;
    for s in &composed.skipped {
        tracing::info!(object = %key, skipped = %s, "optional values reference skipped");
    }
    Ok(Value::Object(composed.values))
}

/// The revision of the plan of `digest` ([`plan_digest`]): the recorded one when the plan
/// is unchanged, else the next one. Without a plan epoch the next one is recorded on the
/// object first; with one, the second value is true: record it after sending
/// ([`record_revision_later`]).
async fn plan_revision(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
    digest: &str,
) -> Result<(PlanRevision, bool), ReconcileError> {
    let annotations = hr.annotations();
    let recorded_rev = annotations
        .get(PLAN_REVISION_ANNOTATION)
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0);
    let recorded = (
        recorded_rev,
        annotations
            .get(PLAN_DIGEST_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    );
    let known = ctx
        .revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .cloned();
    let (rev, held_digest) = match known {
        Some(k) if k.0 >= recorded.0 => k,
        _ => recorded,
    };
    if rev > 0 && held_digest == digest {
        return Ok((PlanRevision::new(rev), false));
    }
    let next = epoch::next_revision(rev, ctx.plan_floor);
    if ctx.plan_floor > 0 {
        ctx.revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.clone(), (next, digest.to_owned()));
        return Ok((PlanRevision::new(next), true));
    }
    let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), key.namespace.as_str());
    api.patch(
        key.name.as_str(),
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            PLAN_REVISION_ANNOTATION: next.to_string(),
            PLAN_DIGEST_ANNOTATION: digest,
        }}})),
    )
    .await
    .map_err(kube_err(key, "recording the plan revision"))?;
    ctx.revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone(), (next, digest.to_owned()));
    Ok((PlanRevision::new(next), false))
}

/// Writes the plan-revision annotations of `key` in the background (at most
/// [`REVISION_WRITERS`] at once). Skipped when a newer revision was handed out before its
/// turn: that one's write records it. A failed write is logged; monotonicity does not
/// depend on it (the plan epoch does), only a restarted hub's re-use of the revision of
/// an unchanged plan.
fn record_revision_later(ctx: &Context, key: &ObjectKey, revision: u64, digest: String) {
    let (client, revisions, writers, key) = (
        ctx.client.clone(),
        ctx.revisions.clone(),
        ctx.revision_writers.clone(),
        key.clone(),
    );
    ctx.background.spawn(async move {
        let Ok(_permit) = writers.acquire_owned().await else {
            return;
        };
        let current = revisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&key)
            .map(|(r, _)| *r);
        if current != Some(revision) {
            return;
        }
        let api: Api<HelmRelease> = Api::namespaced(client, key.namespace.as_str());
        let result = api
            .patch(
                key.name.as_str(),
                &PatchParams::default(),
                &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                    PLAN_REVISION_ANNOTATION: revision.to_string(),
                    PLAN_DIGEST_ANNOTATION: digest,
                }}})),
            )
            .await;
        match result {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                tracing::warn!(object = %key, revision, error = %error_chain(&e), "recording the plan revision");
            }
        }
    });
}

/// sha256 of the plan's JSON with its revision zeroed.
fn plan_digest(plan: &ReleasePlan) -> String {
    let mut p = plan.clone();
    p.revision = PlanRevision::new(0);
    let json = serde_json::to_vec(&p).unwrap_or_default();
    ChartDigest::of_bytes(&json).as_str().to_owned()
}

/// The recorded plan revision of `hr` (0 when none).
fn recorded_revision(hr: &HelmRelease, key: &ObjectKey, ctx: &Context) -> u64 {
    let recorded = hr
        .annotations()
        .get(PLAN_REVISION_ANNOTATION)
        .and_then(|r| r.parse::<u64>().ok())
        .unwrap_or(0);
    let known = ctx
        .revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(key)
        .map(|k| k.0)
        .unwrap_or(0);
    recorded.max(known)
}

/// The finalizer: uninstall through the target's agent, then let the object go.
async fn finalize(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    if !hr.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(Action::await_change());
    }
    let revision = PlanRevision::new(epoch::next_revision(
        recorded_revision(hr, key, ctx),
        ctx.plan_floor,
    ));
    let target = target_of(hr).ok();
    let link = match &target {
        Some(t) => match ctx.links.resolve(t).await {
            Ok(link) => Some(link),
            Err(e) => {
                tracing::warn!(object = %key, error = %e, "no link to uninstall through");
                None
            }
        },
        None => None,
    };
    let held = link
        .as_ref()
        .is_some_and(|l| l.held().iter().any(|h| h.object == *key));
    let installed = hr
        .status
        .as_ref()
        .is_some_and(|s| !s.storage_namespace.is_empty());
    let wait = !hr.spec.suspend && (held || installed) && link.is_some();
    let done = ctx.book.deleted(key).is_some_and(|r| r >= revision);
    if wait && !done {
        let uninstall = hr
            .to_core()
            .ok()
            .map(|c| c.spec.uninstall())
            .unwrap_or_default();
        if let Some(link) = &link {
            link.send(Command::Delete(DeleteRequest {
                object: key.clone(),
                revision,
                uninstall: Some(uninstall),
            }))
            .map_err(|source| ReconcileError::Link {
                object: key.to_string(),
                source,
            })?;
        }
        tracing::info!(object = %key, %revision, "uninstall requested; waiting for the agent");
        return Ok(ctx.queue.requeue(&hr_ref(key), Duration::from_secs(15)));
    }
    if !wait && let Some(link) = &link {
        // Suspended or never installed: the agent forgets the plan, nothing is uninstalled.
        let _ = link.send(Command::Delete(DeleteRequest {
            object: key.clone(),
            revision,
            uninstall: None,
        }));
    }
    if !hr.spec.suspend
        && let Some(status) = &hr.status
        && !status.helm_chart.is_empty()
    {
        delete_helm_chart(ctx, hr, &status.helm_chart).await;
    }
    let api: Api<HelmRelease> = Api::namespaced(ctx.client.clone(), key.namespace.as_str());
    let finalizers: Vec<String> = hr
        .finalizers()
        .iter()
        .filter(|f| *f != FINALIZER)
        .cloned()
        .collect();
    match api
        .patch(
            key.name.as_str(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"finalizers": finalizers, "resourceVersion": hr.resource_version()}
            })),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(kube_err(key, "removing the finalizer")(e)),
    }
    tracing::info!(object = %key, "finalizer removed");
    ctx.book.forget(key);
    ctx.refs.set(key, Vec::new());
    ctx.values_cache.forget(key);
    ctx.revisions
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    ctx.failures
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    let old = ctx
        .targets
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .remove(key);
    if let Some(t) = old.or(target) {
        retire_if_unused(ctx, &t);
    }
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            namespace: "default".parse().unwrap(),
            name: name.parse().unwrap(),
        }
    }

    fn hr(extra: serde_json::Value) -> HelmRelease {
        let mut doc = serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "default", "generation": 1},
            "spec": {
                "interval": "10m",
                "chart": {"spec": {"chart": "podinfo", "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
            },
        });
        merge(&mut doc, extra);
        serde_json::from_value(doc).unwrap()
    }

    fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
        match (a, b) {
            (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(serde_json::Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn the_reference_index_maps_an_object_to_exactly_the_helm_releases_using_it() {
        let index = RefIndex::default();
        index.set(
            &key("a"),
            vec![
                ref_key("Secret", "default", "s"),
                ref_key("ConfigMap", "default", "c"),
            ],
        );
        index.set(&key("b"), vec![ref_key("Secret", "default", "s")]);
        let mut users = index.users(&ref_key("Secret", "default", "s"));
        users.sort();
        assert_eq!(users, vec![key("a"), key("b")]);
        assert_eq!(
            index.users(&ref_key("ConfigMap", "default", "c")),
            vec![key("a")]
        );
        assert!(index.users(&ref_key("Secret", "other", "s")).is_empty());

        // A new set replaces the old one; an empty set forgets the user.
        index.set(&key("a"), vec![ref_key("ConfigMap", "default", "c")]);
        assert_eq!(
            index.users(&ref_key("Secret", "default", "s")),
            vec![key("b")]
        );
        index.set(&key("b"), Vec::new());
        assert!(index.users(&ref_key("Secret", "default", "s")).is_empty());
    }

    #[test]
    fn a_reconcile_is_triggered_by_generation_deletion_and_request_tokens_not_by_status_or_plan_annotations()
     {
        let base = trigger_hash(&hr(serde_json::json!({})));
        let with_status = hr(serde_json::json!({"status": {"observedGeneration": 1}}));
        assert_eq!(trigger_hash(&with_status), base);
        let with_plan = hr(serde_json::json!({"metadata": {"annotations": {
            PLAN_REVISION_ANNOTATION: "3", PLAN_DIGEST_ANNOTATION: "sha256:00",
        }}}));
        assert_eq!(trigger_hash(&with_plan), base);
        let generation = hr(serde_json::json!({"metadata": {"generation": 2}}));
        assert_ne!(trigger_hash(&generation), base);
        let token = hr(serde_json::json!({"metadata": {"annotations": {
            RECONCILE_REQUEST_ANNOTATION: "now",
        }}}));
        assert_ne!(trigger_hash(&token), base);
        let deleted =
            hr(serde_json::json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}));
        assert_ne!(trigger_hash(&deleted), base);
    }

    #[test]
    fn the_plan_digest_ignores_the_revision_and_sees_the_values() {
        let core = hr(serde_json::json!({})).to_core().unwrap();
        let chart = ChartArtifact {
            name: "podinfo".into(),
            version: "6.5.2".into(),
            app_version: None,
            digest: ChartDigest::of_bytes(b"chart"),
            oci_digest: None,
        };
        let plan = |rev: u64, values: serde_json::Value| {
            ReleasePlan::from_helm_release(&core, PlanRevision::new(rev), chart.clone(), values)
                .unwrap()
        };
        let one = plan_digest(&plan(1, serde_json::json!({"a": 1})));
        assert_eq!(one, plan_digest(&plan(7, serde_json::json!({"a": 1}))));
        assert_ne!(one, plan_digest(&plan(1, serde_json::json!({"a": 2}))));
        assert!(one.starts_with("sha256:"));
    }

    #[test]
    fn the_target_is_the_cluster_ref_or_a_cluster_api_kubeconfig_else_the_kube_config_secret_else_the_hubs_cluster()
     {
        assert_eq!(
            target_of(&hr(serde_json::json!({}))).ok(),
            Some(TargetId::Local)
        );
        let kc = hr(serde_json::json!({"spec": {"kubeConfig": {"secretRef": {"name": "edge"}}}}));
        assert_eq!(
            target_of(&kc).ok(),
            Some(TargetId::KubeConfig {
                namespace: "default".into(),
                name: "edge".into(),
                key: None,
            })
        );
        let keyed = hr(
            serde_json::json!({"spec": {"kubeConfig": {"secretRef": {"name": "edge", "key": "edge.yaml"}}}}),
        );
        assert_eq!(
            target_of(&keyed).ok(),
            Some(TargetId::KubeConfig {
                namespace: "default".into(),
                name: "edge".into(),
                key: Some("edge.yaml".into()),
            })
        );
        let cluster = hr(serde_json::json!({"spec": {"clusterRef": {"name": "edge-1"}}}));
        assert_eq!(
            target_of(&cluster).ok(),
            Some(TargetId::Cluster(
                ClusterId::new("edge-1".to_owned()).unwrap()
            ))
        );
        let capi =
            hr(serde_json::json!({"spec": {"clusterRef": {"kind": "Cluster", "name": "edge"}}}));
        assert_eq!(
            target_of(&capi).ok(),
            Some(TargetId::KubeConfig {
                namespace: "default".into(),
                name: "edge-kubeconfig".into(),
                key: None,
            }),
            "a Cluster API Cluster is reached through its kubeconfig Secret"
        );
        let cm = hr(serde_json::json!({"spec": {"kubeConfig": {"configMapRef": {"name": "wi"}}}}));
        assert_eq!(
            target_of(&cm).ok(),
            Some(TargetId::KubeConfigMap {
                namespace: "default".into(),
                name: "wi".into(),
            }),
            "a configMapRef is served in push mode through its ConfigMap"
        );
    }

    fn oci_artifact(revision: &str) -> SourceArtifact {
        SourceArtifact {
            digest: ChartDigest::of_bytes(b"chart"),
            oci_revision: Some(revision.to_owned()),
            what: "OCIRepository 'default/podinfo'".into(),
        }
    }

    #[test]
    fn an_oci_chart_version_gets_the_revision_digest_printed_canonically_as_helm_controller_does()
    {
        let hex = "9933f58f8bf459eb199d59ebc8a05683f3944e1242d9f5467d99aa2cf08a5370";
        let chart = chart_artifact(
            "podinfo",
            "v1.2",
            "",
            &oci_artifact(&format!("v1.2.0@sha256:{hex}")),
        )
        .ok()
        .expect("a chart");
        assert_eq!(chart.version, "1.2.0+9933f58f8bf4");
        assert_eq!(chart.oci_digest, Some(format!("sha256:{hex}")));
        assert_eq!(chart.app_version, None);
        let plain = chart_artifact(
            "podinfo",
            "6.5.2",
            "6.5.2",
            &SourceArtifact {
                oci_revision: None,
                ..oci_artifact("")
            },
        )
        .ok()
        .expect("a chart");
        assert_eq!(
            (plain.version.as_str(), plain.oci_digest, plain.app_version),
            ("6.5.2", None, Some("6.5.2".to_owned())),
            "a chart that is not from an OCIRepository keeps its version"
        );
    }

    #[test]
    fn an_oci_revision_whose_digest_is_not_ascii_is_a_chart_mutate_error_not_a_panic() {
        // The 12th byte falls inside a two-byte character.
        let revision = "1.2.3@sha256:a\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}\u{e9}";
        let Err(Ok(stop)) = chart_artifact("podinfo", "1.2.3", "", &oci_artifact(revision)) else {
            panic!("a revision with a non-ASCII digest is refused");
        };
        assert_eq!(stop.reason, reason::CHART_MUTATE_ERROR);
        assert!(
            stop.message.starts_with("invalid artifact revision sha256:a")
                && stop.message.ends_with("(OCIRepository 'default/podinfo')"),
            "{}",
            stop.message
        );
        let Err(Ok(stop)) = chart_artifact(
            "podinfo",
            "1.2.3",
            "",
            &oci_artifact("1.2.4@sha256:9933f58f8bf459eb"),
        ) else {
            panic!("a tag that is another version is refused");
        };
        assert_eq!(
            stop.message,
            "artifact revision 1.2.4 does not match chart version 1.2.3 (OCIRepository 'default/podinfo')"
        );
    }

    #[test]
    fn the_references_of_a_helm_release_are_all_it_reads_its_chart_values_config_map_and_cluster_api_secret()
     {
        let all = hr(serde_json::json!({"spec": {
            "valuesFrom": [{"kind": "Secret", "name": "s"}, {"kind": "ConfigMap", "name": "c"}],
            "kubeConfig": {"configMapRef": {"name": "wi"}},
        }}));
        assert_eq!(
            references(&all, &key("podinfo")),
            vec![
                ref_key("Secret", "default", "s"),
                ref_key("ConfigMap", "default", "c"),
                ref_key("HelmChart", "default", "default-podinfo"),
                ref_key("ConfigMap", "default", "wi"),
            ]
        );
        let capi = hr(serde_json::json!({"spec": {
            "chart": null,
            "chartRef": {"kind": "OCIRepository", "name": "oci", "namespace": "flux"},
            "clusterRef": {"kind": "Cluster", "name": "edge"},
        }}));
        assert_eq!(
            references(&capi, &key("podinfo")),
            vec![
                ref_key("OCIRepository", "flux", "oci"),
                ref_key("Secret", "default", "edge-kubeconfig"),
            ]
        );
    }

    #[test]
    fn a_source_is_ready_only_with_an_artifact_for_its_generation_not_failed_nor_stalled() {
        let artifact = Artifact {
            path: "p".into(),
            url: "u".into(),
            revision: "1.0.0".into(),
            digest: ChartDigest::of_bytes(b"x").as_str().into(),
            last_update_time: util::now(),
            size: None,
            metadata: Default::default(),
        };
        let now = util::now();
        let mut conditions = Vec::new();
        conditions.set_condition(
            condition::READY,
            flotilla_core::meta::ConditionStatus::False,
            "ChartPullError",
            "boom".into(),
            2,
            &now,
        );
        assert_eq!(source_ready(Some(2), 2, &[], Some(&artifact)), Ok(()));
        assert_eq!(
            source_ready(Some(2), 2, &conditions, Some(&artifact)),
            Err("boom".to_owned()),
            "Ready=False for the observed generation"
        );
        assert_eq!(
            source_ready(Some(3), 2, &conditions, Some(&artifact)),
            Err("boom".to_owned())
        );
        assert_eq!(
            source_ready(Some(2), 2, &conditions, None),
            Err("boom".to_owned())
        );
        conditions.set_condition(
            condition::STALLED,
            flotilla_core::meta::ConditionStatus::True,
            "x",
            "y".into(),
            2,
            &now,
        );
        assert!(source_ready(Some(2), 2, &conditions, Some(&artifact)).is_err());
    }
}
