//! What reconciles a HelmRelease: the watches of the HelmRelease controller ([`run`])
//! and the reference index ([`RefIndex`]) mapping a referenced object to its users.

use super::*;

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

/// What of a HelmRelease triggers a reconcile: generation, deletion and request tokens.
pub(super) fn trigger_hash(hr: &HelmRelease) -> Option<u64> {
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

/// What of a ManagedCluster makes its HelmReleases reconcile: acceptance, deletion, pause
/// ([`crate::onboarding::LABEL_PAUSED`]) and the agent's connection state (not heartbeats,
/// versions or plans held).
pub(super) fn managed_cluster_trigger_hash(mc: &ManagedCluster) -> Option<u64> {
    let mut h = DefaultHasher::new();
    mc.spec.accepted.hash(&mut h);
    mc.labels()
        .get(crate::onboarding::LABEL_PAUSED)
        .hash(&mut h);
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
pub(super) fn releases_of_cluster(
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
pub(super) fn sample(
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
