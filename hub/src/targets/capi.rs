//! Cluster API targets: a HelmRelease whose `spec.clusterRef` has `kind: Cluster` is
//! released to the Cluster API `Cluster` (`cluster.x-k8s.io`) of that name in the
//! HelmRelease's namespace, in push mode, through the kubeconfig Secret Cluster API writes
//! for it (`<cluster>-kubeconfig`, key `value`): the same target as a
//! `spec.kubeConfig.secretRef` naming that Secret, so both share one in-process agent (or
//! the cluster's own connected agent).
//!
//! Nothing is sent until the Cluster reports its control plane initialized, the signal
//! Cluster API gives for "the API server accepts requests" (it never goes back to false).
//! [`control_plane_initialized`] reads it from every shape Cluster API has written it in:
//!
//! - v1beta2 (the storage version since v1.11): `status.initialization.controlPlaneInitialized`,
//!   and the `ControlPlaneInitialized` condition in `status.conditions`;
//! - v1beta1: `status.controlPlaneReady` (converted to and from the v1beta2 field by Cluster
//!   API's conversion), and the v1beta1 `ControlPlaneInitialized` condition, in
//!   `status.conditions` of a v1beta1 object or `status.deprecated.v1beta1.conditions` of a
//!   v1beta2 one.
//!
//! The Cluster is read as v1beta2, else as v1beta1 (a Cluster API older than v1.11 serves
//! no v1beta2). A Cluster that does not exist (or no Cluster API at all) waits as well, with
//! its own reason. The controller looks again every `--requeue-dependency`, as it does for
//! `dependsOn`; it does not watch Clusters, so a hub runs unchanged where Cluster API is not
//! installed.

use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::Value;

/// The Cluster API group.
pub const GROUP: &str = "cluster.x-k8s.io";
/// The versions read, newest first.
pub const VERSIONS: [&str; 2] = ["v1beta2", "v1beta1"];
/// The condition type (v1beta1 and v1beta2) saying the control plane accepts requests.
pub const CONTROL_PLANE_INITIALIZED: &str = "ControlPlaneInitialized";

/// The Secret Cluster API writes a Cluster's admin kubeconfig to (key `value`).
pub fn kubeconfig_secret_name(cluster: &str) -> String {
    format!("{cluster}-kubeconfig")
}

/// What the hub knows of a Cluster API `Cluster`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClusterState {
    /// No such Cluster (or Cluster API is not installed).
    NotFound,
    /// The Cluster exists; its control plane is not initialized yet. `phase` is its
    /// `status.phase` (empty when unset), for the message.
    NotInitialized {
        /// `status.phase`.
        phase: String,
    },
    /// The control plane accepts requests: the release can go out.
    Initialized,
}

/// Whether the Cluster object `cluster` (any served version, as JSON) reports its control
/// plane initialized (see the module docs for the fields read).
pub fn control_plane_initialized(cluster: &Value) -> bool {
    let status = &cluster["status"];
    let condition_true = |conditions: &Value| {
        conditions.as_array().is_some_and(|list| {
            list.iter().any(|c| {
                c["type"].as_str() == Some(CONTROL_PLANE_INITIALIZED)
                    && c["status"].as_str() == Some("True")
            })
        })
    };
    status["initialization"]["controlPlaneInitialized"].as_bool() == Some(true)
        || status["controlPlaneReady"].as_bool() == Some(true)
        || condition_true(&status["conditions"])
        || condition_true(&status["deprecated"]["v1beta1"]["conditions"])
}

/// The state of Cluster `namespace/name`, read as v1beta2, else v1beta1.
pub async fn cluster_state(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<ClusterState, kube::Error> {
    for version in VERSIONS {
        let resource = ApiResource {
            group: GROUP.into(),
            version: version.into(),
            api_version: format!("{GROUP}/{version}"),
            kind: "Cluster".into(),
            plural: "clusters".into(),
        };
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource);
        // A version that is not served answers 404, as a missing object does.
        let Some(cluster) = api.get_opt(name).await? else {
            continue;
        };
        let doc = serde_json::to_value(&cluster).unwrap_or(Value::Null);
        if control_plane_initialized(&doc) {
            return Ok(ClusterState::Initialized);
        }
        return Ok(ClusterState::NotInitialized {
            phase: doc["status"]["phase"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        });
    }
    Ok(ClusterState::NotFound)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_control_plane_is_initialized_by_any_field_cluster_api_writes_it_in() {
        let initialized = [
            json!({"status": {"initialization": {"controlPlaneInitialized": true}}}),
            json!({"status": {"controlPlaneReady": true}}),
            json!({"status": {"conditions": [
                {"type": "InfrastructureReady", "status": "True"},
                {"type": "ControlPlaneInitialized", "status": "True"},
            ]}}),
            json!({"status": {"deprecated": {"v1beta1": {"conditions": [
                {"type": "ControlPlaneInitialized", "status": "True"},
            ]}}}}),
        ];
        for c in &initialized {
            assert!(control_plane_initialized(c), "{c}");
        }
        let not = [
            json!({}),
            json!({"status": {"phase": "Provisioning"}}),
            json!({"status": {"initialization": {"controlPlaneInitialized": false,
                                                 "infrastructureProvisioned": true}}}),
            json!({"status": {"controlPlaneReady": false}}),
            json!({"status": {"conditions": [
                {"type": "ControlPlaneInitialized", "status": "False", "reason": "NotInitialized"},
                {"type": "ControlPlaneAvailable", "status": "True"},
            ]}}),
        ];
        for c in &not {
            assert!(!control_plane_initialized(c), "{c}");
        }
    }

    #[test]
    fn the_kubeconfig_secret_is_named_as_cluster_api_names_it() {
        assert_eq!(kubeconfig_secret_name("edge"), "edge-kubeconfig");
    }
}
