//! The HelmReleaseSet controller: one child HelmRelease per targeted cluster, rolled out
//! wave by wave by [`flotilla_core::rollout::decide`]. Everything Flux does with a release
//! stays in the HelmRelease controller ([`crate::controller`]); this controller only writes
//! children and the set's status.
//!
//! One reconcile ([`reconcile`]) runs the engine's loop, observe → decide → act:
//!
//! ```text
//! deleting set        -> nothing (children are garbage-collected through their owner
//!                        reference; each child's finalizer uninstalls)
//! validate            -> HelmReleaseSetSpec::validate and the valuesTemplate's parse;
//!                        refused: Ready=False/Stalled=True InvalidSpec naming the field, a
//!                        Warning Event, no child touched, no requeue (a spec edit retries)
//! revision            -> ControllerRevision <set>-<revision> of the update revision
//!                        (created once; the spec's template, valuesTemplate,
//!                        targetCustomizations)
//! observe clusters    -> ManagedClusters (watched): select_clusters, tenancy
//!                        (Tenancy::permits_cluster with the set's namespace: a refused
//!                        cluster is left out and named in the ClustersDenied condition,
//!                        decide::denied_condition), the customization's
//!                        doNotDeploy removed, availability (decide::availability),
//!                        connection; the update revision's values rendered per cluster
//!                        (a render error fails that cluster only, line and column kept)
//! observe children    -> HelmReleases with SET_LABEL = set and the set's owner reference
//!                        (watched): revision label, promoted-at, health (decide::child_health)
//! decide              -> rollout::decide(plan, observations, now)
//! act                 -> abort: status.abortedRevision written first
//!                        promotions: server-side apply of each child (field manager
//!                        flotilla-hub, owner reference, labels, promoted-at = now); the spec
//!                        of a revision other than the update revision comes from its
//!                        ControllerRevision; 50 writes in flight at once, the first
//!                        error returned once they are all done
//! decide again        -> while those writes are in flight, the next decision on the live
//!                        children with this reconcile's promotions counted in flight at
//!                        their revision (each decision bounded by maxNewPerReconcile, and
//!                        seeing every report that arrived before it); until a decision
//!                        promotes nothing new, 64 decisions or 15 s (then requeued at once)
//!                        put back: a child whose spec differs from its revision's
//!                        (decide::spec_differs) is applied again, its promotion time kept
//!                        left: children of clusters no longer targeted (decide::child_fate):
//!                        Uninstall deletes, Orphan removes labels and owner reference, a
//!                        ManagedCluster deleting or gone: suspend, then delete (see below)
//!                        completed: status.currentRevision = updateRevision
//!                        ControllerRevisions trimmed to revisionHistoryLimit
//!                        report.write_to(status); Events (decide::set_events), rate-limited
//! requeue             -> the last decision's requeue_after, else the resync interval
//! ```
//!
//! **A ManagedCluster being deleted**: its child is dropped without an uninstall. The
//! HelmRelease finalizer already has the rule for that: a *suspended* HelmRelease is not
//! uninstalled when deleted (as Flux; the agent forgets the plan, the release stays). So
//! the child is patched `spec.suspend: true`, then deleted; its finalizer then releases it
//! without a `Delete` carrying uninstall options. No finalizer is removed by this
//! controller, and an agent still connected is told to forget the plan.
//!
//! **Triggers**: a set's change (any: the watch of sets is not filtered, its status patches
//! included, which the reconcile makes idempotent); a change of a child's generation,
//! labels, annotations, conditions or observed generation, or its deletion (children are
//! watched by [`SET_LABEL`] and mapped to their owner); a ManagedCluster's labels,
//! annotations, acceptance, deletion or connection changing (every set is reconciled: the
//! selection is the set's); the engine's `requeue_after`; the resync interval.

mod children;
mod decide;
mod reconcile;

use std::collections::HashMap;
use std::hash::{Hash as _, Hasher as _};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use flotilla_api::{HelmRelease, HelmReleaseSet, ManagedCluster};
use flotilla_chart::values_template::Budget;
use flotilla_core::set::SET_LABEL;
use futures::StreamExt as _;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, Resource as _, ResourceExt as _};

use crate::rate::TokenBucket;
use crate::util::{FIELD_MANAGER, error_chain};

pub use decide::{
    ChildFate, ClusterFacts, SetEvent, StoredRevision, availability, child_fate, child_health,
    child_observation, event_reason, invalid_spec_status, next_revision_number, revisions_to_trim,
    set_events, spec_differs,
};

/// Reason of a set whose spec was refused.
pub const INVALID_SPEC: &str = "InvalidSpec";

/// How long a reconcile waits for the watches' first lists before it gives up (and is
/// retried).
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// Events one set may send at once.
pub const EVENT_BURST: f64 = 16.0;
/// Events one set may send a second, past the burst.
pub const EVENTS_PER_SECOND: f64 = 0.5;

/// How the set controller runs.
#[derive(Debug, Clone)]
pub struct SetOptions {
    /// Sets reconciled at the same time.
    pub concurrency: u16,
    /// Reconcile of an unchanged set (children and clusters are watched; this catches
    /// what a watch missed).
    pub resync: Duration,
    /// Retry of a failed reconcile.
    pub retry: Duration,
    /// The budget of one cluster's `valuesTemplate` render.
    pub budget: Budget,
}

impl Default for SetOptions {
    fn default() -> Self {
        SetOptions {
            concurrency: 2,
            resync: Duration::from_secs(300),
            retry: Duration::from_secs(10),
            budget: Budget::default(),
        }
    }
}

/// What a set reconcile needs.
pub struct Context {
    /// The hub's cluster.
    pub client: Client,
    /// Bindings: which namespaces may deliver to which ManagedClusters.
    pub tenancy: Arc<crate::tenancy::Tenancy>,
    /// Options.
    pub options: SetOptions,
    /// The imported Cluster API Clusters (`.Cluster` of a template).
    pub imported: crate::onboarding::ImportedClusters,
    /// Where `flotilla_hub_helmreleasesets` is sampled from the controller's cache.
    pub metrics: Option<crate::telemetry::HubMetrics>,
    recorder: Recorder,
    buckets: Mutex<HashMap<String, TokenBucket>>,
    children: OnceLock<Store<HelmRelease>>,
    clusters: OnceLock<Store<ManagedCluster>>,
}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Context {
    /// A context on the hub's cluster.
    pub fn new(
        client: Client,
        tenancy: Arc<crate::tenancy::Tenancy>,
        imported: crate::onboarding::ImportedClusters,
        options: SetOptions,
    ) -> Context {
        let recorder = Recorder::new(
            client.clone(),
            Reporter {
                controller: FIELD_MANAGER.into(),
                instance: std::env::var("POD_NAME").ok(),
            },
        );
        Context {
            client,
            tenancy,
            options,
            imported,
            metrics: None,
            recorder,
            buckets: Mutex::new(HashMap::new()),
            children: OnceLock::new(),
            clusters: OnceLock::new(),
        }
    }

    /// The children and ManagedClusters as watched, once both watches have listed.
    async fn synced(
        &self,
        object: &str,
    ) -> Result<(&Store<HelmRelease>, &Store<ManagedCluster>), SetError> {
        let not_synced = || SetError::NotSynced {
            object: object.to_owned(),
        };
        let (Some(children), Some(clusters)) = (self.children.get(), self.clusters.get()) else {
            return Err(not_synced());
        };
        let ready = async {
            children.wait_until_ready().await?;
            clusters.wait_until_ready().await
        };
        match tokio::time::timeout(SYNC_WAIT, ready).await {
            Ok(Ok(())) => Ok((children, clusters)),
            _ => Err(not_synced()),
        }
    }

    /// Whether set `key` may send one more Event now.
    fn may_send_event(&self, key: &str) -> bool {
        let now = std::time::Instant::now();
        let mut buckets = self.buckets.lock().unwrap_or_else(|p| p.into_inner());
        if buckets.len() >= 4096 {
            buckets.retain(|_, b| !b.is_full(now));
        }
        buckets
            .entry(key.to_owned())
            .or_insert_with(|| TokenBucket::new(EVENT_BURST, EVENTS_PER_SECOND, now))
            .take(now)
    }
}

/// Why a set reconcile failed (its conditions say the rest).
#[derive(Debug, thiserror::Error)]
pub enum SetError {
    /// The Kubernetes API failed.
    #[error("HelmReleaseSet {object}: {what}")]
    Kube {
        /// `namespace/name`.
        object: String,
        /// What was being done.
        what: String,
        /// The error.
        #[source]
        source: kube::Error,
    },
    /// The hub's view of bindings and clusters is not listed yet.
    #[error("HelmReleaseSet {object}: {source}")]
    Tenancy {
        /// `namespace/name`.
        object: String,
        /// Why.
        #[source]
        source: crate::tenancy::Denied,
    },
    /// The watches of children and ManagedClusters have not listed yet: deciding on an
    /// empty view would take every cluster for gone and every child for missing.
    #[error(
        "HelmReleaseSet {object}: waiting for the hub's view of child HelmReleases and ManagedClusters"
    )]
    NotSynced {
        /// `namespace/name`.
        object: String,
    },
    /// The reconcile panicked (caught: the controller goes on, the set is retried).
    #[error("HelmReleaseSet {object}: the reconcile panicked: {message}")]
    Panicked {
        /// `namespace/name`.
        object: String,
        /// The panic's message.
        message: String,
    },
}

fn kube_err(object: &str, what: impl Into<String>) -> impl FnOnce(kube::Error) -> SetError {
    let (object, what) = (object.to_owned(), what.into());
    move |source| SetError::Kube {
        object,
        what,
        source,
    }
}

/// What of a child makes its set reconcile: generation, labels, annotations, deletion,
/// conditions and observed generation (not its history or inventory).
fn child_trigger_hash(hr: &HelmRelease) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    hr.metadata.generation.hash(&mut h);
    hr.metadata.deletion_timestamp.is_some().hash(&mut h);
    hr.labels().hash(&mut h);
    hr.annotations().hash(&mut h);
    if let Some(s) = &hr.status {
        s.observed_generation.hash(&mut h);
        for c in &s.conditions {
            (&c.type_, c.status, c.observed_generation, &c.reason).hash(&mut h);
        }
    }
    h.finish()
}

/// What of a ManagedCluster makes the sets reconcile: labels, annotations, acceptance,
/// deletion and the agent's connection (not heartbeats).
fn cluster_trigger_hash(mc: &ManagedCluster) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let f = ClusterFacts::of(mc);
    (f.labels, f.annotations, f.accepted, f.deleting, f.connected).hash(&mut h);
    mc.metadata.uid.hash(&mut h);
    h.finish()
}

/// `(namespace, name)` of a watched object.
type ObjectKey = (Option<String>, String);

/// A reflected watch's objects that changed by `hash` (applied, or deleted), once each.
fn changed<K>(
    stream: impl futures::Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    hash: fn(&K) -> u64,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource + Send + 'static,
{
    let seen: Arc<Mutex<HashMap<ObjectKey, u64>>> = Default::default();
    stream.filter_map(move |event| {
        let seen = seen.clone();
        async move {
            let mut seen = seen.lock().unwrap_or_else(|p| p.into_inner());
            let key = |k: &K| {
                (
                    k.meta().namespace.clone(),
                    k.meta().name.clone().unwrap_or_default(),
                )
            };
            match event {
                Ok(watcher::Event::Apply(k) | watcher::Event::InitApply(k)) => {
                    let h = hash(&k);
                    (seen.insert(key(&k), h) != Some(h)).then_some(Ok(k))
                }
                Ok(watcher::Event::Delete(k)) => {
                    seen.remove(&key(&k));
                    Some(Ok(k))
                }
                Ok(_) => None,
                Err(e) => Some(Err(e)),
            }
        }
    })
}

/// Runs the HelmReleaseSet controller until `shutdown` resolves.
pub async fn run(
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let (children, children_w) = reflector::store();
    let (clusters, clusters_w) = reflector::store();
    let _ = ctx.children.set(children);
    let _ = ctx.clusters.set(clusters);
    let child_stream = changed(
        watcher(
            Api::<HelmRelease>::all(client.clone()),
            watcher::Config::default().labels(SET_LABEL),
        )
        .default_backoff()
        .reflect(children_w),
        child_trigger_hash,
    );
    let cluster_stream = changed(
        watcher(
            Api::<ManagedCluster>::all(client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .reflect(clusters_w),
        cluster_trigger_hash,
    );
    let controller = Controller::new(
        Api::<HelmReleaseSet>::all(client),
        watcher::Config::default(),
    );
    let sets = controller.store();
    if let Some(metrics) = &ctx.metrics {
        let sets = sets.clone();
        metrics.set_set_sampler(move || condition_counts(sets.state().iter().map(|s| &**s)));
    }
    controller
        .owns_stream(child_stream)
        .watches_stream(cluster_stream, move |mc: ManagedCluster| {
            let all: Vec<ObjectRef<HelmReleaseSet>> = sets
                .state()
                .iter()
                .map(|s| ObjectRef::from_obj(&**s))
                .collect();
            tracing::debug!(cluster = %mc.name_any(), sets = all.len(), "a ManagedCluster changed");
            all
        })
        .with_config(
            kube::runtime::controller::Config::default().concurrency(ctx.options.concurrency),
        )
        .graceful_shutdown_on(shutdown)
        .run(measured, error_policy, ctx)
        .for_each(|r| async move {
            if let Err(e) = r {
                tracing::debug!(error = %error_chain(&e), "HelmReleaseSet reconcile");
            }
        })
        .await;
}

/// [`reconcile::reconcile`], its panics caught (as the HelmRelease controller's: a panic
/// is a failed reconcile, retried; the controller goes on).
async fn measured(set: Arc<HelmReleaseSet>, ctx: Arc<Context>) -> Result<Action, SetError> {
    use futures::FutureExt as _;
    use tracing::Instrument as _;
    let span = tracing::info_span!(
        "reconcile_set",
        object = %set.key(),
        generation = set.metadata.generation.unwrap_or_default(),
    );
    std::panic::AssertUnwindSafe(reconcile::reconcile(set.clone(), ctx))
        .catch_unwind()
        .instrument(span)
        .await
        .unwrap_or_else(|panic| {
            Err(SetError::Panicked {
                object: set.key(),
                message: crate::supervisor::panic_message(&*panic),
            })
        })
}

fn error_policy(set: Arc<HelmReleaseSet>, e: &SetError, ctx: Arc<Context>) -> Action {
    tracing::warn!(object = %set.key(), error = %error_chain(e), "HelmReleaseSet reconcile failed");
    Action::requeue(crate::util::jitter(ctx.options.retry, 0.1))
}

/// The sets' True conditions, counted by `(type, reason)` (`flotilla_hub_helmreleasesets`).
/// A condition counts only for the generation it was written for: a set whose spec changed
/// since is being looked at again, not yet paused or degraded by the new spec.
pub fn condition_counts<'a>(
    sets: impl Iterator<Item = &'a HelmReleaseSet>,
) -> crate::telemetry::SetConditionCounts {
    let mut counts = crate::telemetry::SetConditionCounts::new();
    for set in sets {
        let generation = set.metadata.generation.unwrap_or_default();
        let conditions = set
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        for c in conditions {
            if c.status == flotilla_core::meta::ConditionStatus::True
                && c.observed_generation == generation
            {
                *counts
                    .entry((c.type_.clone(), c.reason.clone()))
                    .or_default() += 1;
            }
        }
    }
    counts
}

/// The set's owner reference on its children and ControllerRevisions.
fn owner_reference(
    set: &HelmReleaseSet,
) -> Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference> {
    set.controller_owner_ref(&())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_do_not_trigger_the_sets_but_labels_and_connection_do() {
        let mut mc: ManagedCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "fleet.flotilla.dev/v1", "kind": "ManagedCluster",
            "metadata": {"name": "edge-1", "labels": {"ring": "canary"}},
            "spec": {"accepted": true},
            "status": {"connection": {"state": "Connected"}, "lastHeartbeatTime": "2026-01-01T00:00:00Z"},
        }))
        .unwrap();
        let h = cluster_trigger_hash(&mc);
        mc.status.as_mut().unwrap().last_heartbeat_time =
            Some(flotilla_core::meta::Timestamp::from_unix_seconds(99));
        assert_eq!(cluster_trigger_hash(&mc), h);
        mc.labels_mut().insert("ring".into(), "main".into());
        assert_ne!(cluster_trigger_hash(&mc), h);
    }

    #[test]
    fn sets_are_counted_by_their_true_conditions_of_the_current_generation() {
        let set = |name: &str, generation: i64, conditions: serde_json::Value| -> HelmReleaseSet {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "helm.flotilla.dev/v1alpha1", "kind": "HelmReleaseSet",
                "metadata": {"name": name, "namespace": "apps", "generation": generation},
                "spec": {"clusterSelector": {}, "template": {"spec": {"interval": "1m", "chart": {"spec": {"chart": "c", "sourceRef": {"kind": "HelmRepository", "name": "r"}}}}}},
                "status": {"conditions": conditions},
            }))
            .unwrap()
        };
        let c = |type_: &str, status: &str, reason: &str, generation: i64| {
            serde_json::json!({"type": type_, "status": status, "reason": reason, "message": "",
                "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        let sets = [
            set(
                "a",
                2,
                serde_json::json!([
                    c("Ready", "False", "MaxFailuresExceeded", 2),
                    c("RolloutPaused", "True", "MaxFailuresExceeded", 2),
                    c("RolloutDegraded", "True", "ClustersFailed", 2)
                ]),
            ),
            set(
                "b",
                1,
                serde_json::json!([
                    c("Ready", "True", "RolloutComplete", 1),
                    c("RolloutPaused", "False", "NotPaused", 1)
                ]),
            ),
            // Paused at generation 3, but the spec is at 4 now: not counted.
            set(
                "c",
                4,
                serde_json::json!([c("RolloutPaused", "True", "MaxFailuresExceeded", 3)]),
            ),
            set(
                "d",
                1,
                serde_json::json!([c("RolloutPaused", "True", "AwaitingApproval", 1)]),
            ),
        ];
        let counts = condition_counts(sets.iter());
        let get = |t: &str, r: &str| counts.get(&(t.to_owned(), r.to_owned())).copied();
        assert_eq!(get("RolloutPaused", "MaxFailuresExceeded"), Some(1));
        assert_eq!(get("RolloutPaused", "AwaitingApproval"), Some(1));
        assert_eq!(get("RolloutDegraded", "ClustersFailed"), Some(1));
        assert_eq!(get("Ready", "RolloutComplete"), Some(1));
        assert_eq!(get("Ready", "MaxFailuresExceeded"), None);
        assert_eq!(get("RolloutPaused", "NotPaused"), None);
        assert_eq!(counts.values().sum::<usize>(), 4);
    }
}
