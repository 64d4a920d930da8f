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
//! no schema change, and does not race the status writer. The children of a
//! HelmReleaseSet are the exception: with an epoch, their record goes to `status.plan`
//! through the status writer ([`StatusBook::planned`]), carried by the status write the
//! agent's report causes anyway, so a fleet rollout costs one write per child fewer; a
//! restarted hub reads whichever of the two records is newer.
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

mod decide;
mod finalizer;
pub mod preview;
mod reconcile;
mod revisions;
mod source;
mod target;
mod watches;

use crate::link::{Links as _, TargetId};
use crate::push::{HubLinks, TargetError};
use crate::status::{HubCondition, StatusBook, key_of};
use crate::util::{self, FIELD_MANAGER, error_chain, jitter};
use crate::values::{self, Source};
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
use std::collections::hash_map::DefaultHasher;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

use decide::{Stop, source_ready};
use finalizer::*;
use reconcile::*;
use revisions::*;
use source::*;
use target::*;

pub use watches::{RefIndex, ref_key, run};

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
    /// Bindings, cross-namespace references, the local target ([`crate::tenancy`]).
    pub tenancy: Arc<crate::tenancy::Tenancy>,
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
            tenancy: Default::default(),
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

fn hr_ref(key: &ObjectKey) -> ObjectRef<HelmRelease> {
    ObjectRef::new(key.name.as_str()).within(key.namespace.as_str())
}

#[cfg(test)]
mod tests;
