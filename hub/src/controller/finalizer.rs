//! The HelmRelease finalizer (`finalizers.fluxcd.io`), as kube-runtime documents its own
//! `finalizer` helper.
//!
//! Contract:
//! - **Added before anything is sent**: a reconcile adds the finalizer before it plans
//!   ([`decide::entry`]), so no plan reaches an agent for an object that could vanish
//!   without its cleanup.
//! - **Cleanup runs until it succeeds**: while the object has a deletion timestamp, each
//!   reconcile takes the next step of [`decide::finalizer_step`]: ask the target's agent to
//!   uninstall (`Command::Delete` with the uninstall options; requeued every 15 s and
//!   reconciled at once by the agent's `Deleted` report), or, once the agent reported the
//!   deletion of this revision (or when nothing was installed or the object is suspended),
//!   let it go.
//! - **Idempotent**: a step may run more than once (a requeue, a hub restart): the agent
//!   treats a `Delete` of a revision it already handled as done; the HelmChart delete and
//!   the finalizer patch tolerate 404.
//! - **Suspended objects are not uninstalled**: as Flux, the agent forgets the plan
//!   (`Delete` without uninstall options) and the managed HelmChart stays.
//! - **A target going away is not uninstalled from**: a HelmRelease whose target
//!   ManagedCluster is being deleted or gone (its Cluster API Cluster is deleted: the
//!   workload cluster goes with it) is let go at once, with a Normal `TargetDeleted` Event;
//!   its deletion never waits for an agent that will not answer.
//! - **No agent, no wait**: a target without a link (a cluster never connected, an
//!   unreadable kubeconfig) is not waited for: the finalizer is removed and the release,
//!   if any, stays where it is (logged).
//! - **Removed last, guarded**: the finalizer patch carries the read `resourceVersion`, so
//!   a concurrent change makes it fail and the reconcile runs again; then the controller
//!   forgets the object (status entry, references, values cache, revisions, backoff, the
//!   push agent if no other object uses it).

use super::*;

/// The Event reason of a HelmRelease dropped because its target ManagedCluster went.
pub(super) const TARGET_GONE: &str = "TargetDeleted";

/// Whether ManagedCluster `name` is being deleted or does not exist (read now: the
/// finalizer must not mistake a cache not yet filled for a deletion). An error reading it
/// is "no": the normal steps follow, and the next reconcile reads it again.
async fn managed_cluster_gone(ctx: &Context, name: &str) -> bool {
    let api: Api<ManagedCluster> = Api::all(ctx.client.clone());
    match api.get_opt(name).await {
        Ok(None) => true,
        Ok(Some(mc)) => mc.metadata.deletion_timestamp.is_some(),
        Err(e) => {
            tracing::warn!(cluster = name, error = %error_chain(&e), "reading the target ManagedCluster");
            false
        }
    }
}

/// The finalizer: uninstall through the target's agent, then let the object go.
pub(super) async fn finalize(
    hr: &HelmRelease,
    key: &ObjectKey,
    ctx: &Context,
) -> Result<Action, ReconcileError> {
    let finalized = hr.finalizers().iter().any(|f| f == FINALIZER);
    if !finalized {
        // decide::finalizer_step: not ours, whatever else is observed.
        return Ok(Action::await_change());
    }
    let revision = PlanRevision::new(epoch::next_revision(
        recorded_revision(hr, key, ctx),
        ctx.plan_floor,
    ));
    // Without --allow-local-target the hub does not act on its own cluster, not even here.
    let target = target_of(hr).ok().filter(|t| !ctx.tenancy.refuses_local(t));
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
    let helm_chart = hr
        .status
        .as_ref()
        .map(|s| s.helm_chart.clone())
        .unwrap_or_default();
    let target_gone = match &target {
        Some(TargetId::Cluster(id)) => managed_cluster_gone(ctx, id.as_str()).await,
        _ => false,
    };
    let step = decide::finalizer_step(decide::FinalizerObserved {
        finalized,
        suspend: hr.spec.suspend,
        linked: link.is_some(),
        held: link
            .as_ref()
            .is_some_and(|l| l.held().iter().any(|h| h.object == *key)),
        installed: hr
            .status
            .as_ref()
            .is_some_and(|s| !s.storage_namespace.is_empty()),
        deleted: ctx.book.deleted(key).is_some_and(|r| r >= revision),
        helm_chart: !helm_chart.is_empty(),
        target_gone,
    });
    let (forget_plan, delete_chart) = match step {
        decide::FinalizerStep::NotOurs => return Ok(Action::await_change()),
        decide::FinalizerStep::Uninstall => {
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
        decide::FinalizerStep::Release {
            forget_plan,
            delete_helm_chart,
        } => (forget_plan, delete_helm_chart),
        decide::FinalizerStep::Drop {
            forget_plan,
            delete_helm_chart,
        } => {
            let cluster = match &target {
                Some(TargetId::Cluster(id)) => id.as_str().to_owned(),
                _ => String::new(),
            };
            let message = format!(
                "ManagedCluster '{cluster}' (spec.clusterRef) is being deleted or gone: the release is dropped without an uninstall"
            );
            tracing::info!(object = %key, %cluster, "target ManagedCluster deleting or gone; dropped without an uninstall");
            ctx.book.event(hr, false, TARGET_GONE, &message).await;
            (forget_plan, delete_helm_chart)
        }
    };
    if forget_plan && let Some(link) = &link {
        // Suspended or never installed: the agent forgets the plan, nothing is uninstalled.
        let _ = link.send(Command::Delete(DeleteRequest {
            object: key.clone(),
            revision,
            uninstall: None,
        }));
    }
    if delete_chart {
        delete_helm_chart(ctx, hr, &helm_chart).await;
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
