//! The HelmRelease finalizer.

use super::*;

/// The finalizer: uninstall through the target's agent, then let the object go.
pub(super) async fn finalize(
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
