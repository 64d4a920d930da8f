//! The target of a HelmRelease: resolution of `clusterRef` / `kubeConfig` to a
//! [`TargetId`], the Cluster API gate, and retiring push agents no HelmRelease uses.

use super::*;

/// Waits (a requeued `Ready=False`) until Cluster API Cluster `namespace/name` exists
/// and its control plane is initialized.
pub(super) async fn cluster_api_gate(
    ctx: &Context,
    namespace: &str,
    name: &str,
) -> Result<(), Stop> {
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
pub(super) fn target_of(hr: &HelmRelease) -> Result<TargetId, Stop> {
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
pub(super) fn retire_if_unused(ctx: &Context, target: &TargetId) {
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
