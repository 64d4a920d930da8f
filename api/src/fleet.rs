//! `ManagedCluster` (`fleet.flotilla.dev/v1`, cluster-scoped): one per workload cluster.
//!
//! An agent that registers makes (or finds) the ManagedCluster of its cluster; it gets a
//! certificate, and plans, only once an administrator sets `spec.accepted`. Labels on the
//! object are what HelmReleases target clusters by. The status is the hub's view of the
//! agent: its session, versions, heartbeats and the plans it holds.

use flotilla_core::meta::{Condition, Timestamp};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Condition types of a ManagedCluster.
pub mod condition {
    /// `Accepted`: an administrator accepted the cluster (`spec.accepted`).
    pub const ACCEPTED: &str = "Accepted";
    /// `Joined`: the agent registered and holds a valid certificate.
    pub const JOINED: &str = "Joined";
    /// `Available`: the agent's session is up and its heartbeats are on time.
    pub const AVAILABLE: &str = "Available";
}

/// The desired state of a workload cluster.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.flotilla.dev",
    version = "v1",
    kind = "ManagedCluster",
    status = "ManagedClusterStatus",
    derive = "PartialEq",
    derive = "Default",
    shortname = "mcl",
    category = "flotilla",
    printcolumn = r#"{"name": "Accepted", "type": "boolean", "jsonPath": ".spec.accepted"}"#,
    printcolumn = r#"{"name": "Available", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Available\")].status"}"#,
    printcolumn = r#"{"name": "Kubernetes", "type": "string", "jsonPath": ".status.kubernetesVersion"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    doc = "A workload cluster of the fleet, with the agent that runs in it."
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterSpec {
    /// The acceptance gate: the hub issues the agent's certificate and sends plans only
    /// once this is true. Setting it back to false stops delivery to the cluster.
    #[serde(default)]
    pub accepted: bool,
    /// A key an administrator approved (`flotilla cluster approve`), `sha256:<hex>` of its
    /// SubjectPublicKeyInfo: an agent registering with it gets a certificate although the
    /// cluster's certificates are for another key (a reinstalled agent, a lost identity
    /// Secret). Without it, only the key of the cluster's newest certificate (or, before
    /// any, the key that created the object) registers again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approved_key_fingerprint: Option<String>,
    /// Serials (lower-case hex) of revoked client certificates (`flotilla cluster revoke
    /// --serial`): refused at once, their sessions ended; the cluster stays accepted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked_serials: Vec<String>,
    /// Revoked keys (`flotilla cluster revoke --fingerprint`): every certificate of these
    /// keys is refused, and no new one is issued for them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub revoked_key_fingerprints: Vec<String>,
}

/// Annotations the hub sets on a ManagedCluster it creates.
pub mod annotation {
    /// The id of the bootstrap token that created the object.
    pub const BOOTSTRAP_TOKEN_ID: &str = "fleet.flotilla.dev/bootstrap-token-id";
    /// The fingerprint of the key of the registration that created the object.
    pub const BOOTSTRAP_KEY_FINGERPRINT: &str = "fleet.flotilla.dev/bootstrap-key-fingerprint";
}

/// The hub's view of a workload cluster and its agent.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("default" = {"observedGeneration": -1}))]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterStatus {
    /// The last generation the hub observed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// Conditions: `Accepted`, `Joined`, `Available`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// UID of the cluster's `kube-system` namespace, the cluster's identity: an agent of
    /// another cluster cannot take this object over.
    #[serde(
        default,
        rename = "clusterUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub cluster_uid: Option<String>,
    /// Version of the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_version: Option<String>,
    /// Kubernetes version of the cluster (`v1.35.0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
    /// The agent's session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connection: Option<AgentConnection>,
    /// When the hub last heard from the agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Timestamp>,
    /// When the agent's client certificate expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate_expiry: Option<Timestamp>,
    /// The newest client certificate the hub issued to the cluster: the only one `Renew`
    /// accepts, and the key that may register again without approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<CertificateRecord>,
    /// A registration waiting for an administrator: acceptance, or approval of its key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_registration: Option<PendingRegistration>,
    /// How many release plans the agent holds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub plans_held: Option<i64>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A client certificate the hub issued.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CertificateRecord {
    /// Its serial, lower-case hex.
    pub serial: String,
    /// Its key: `sha256:<hex>` of the SubjectPublicKeyInfo.
    pub key_fingerprint: String,
    /// When it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_after: Option<Timestamp>,
}

/// A registration the hub answered "pending".
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PendingRegistration {
    /// The key it asks a certificate for: what `flotilla cluster approve` approves.
    pub key_fingerprint: String,
    /// The bootstrap token it presented (the id only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_id: Option<String>,
    /// `NotAccepted` or `KeyNotApproved`.
    pub reason: String,
    /// When it last asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_request_time: Option<Timestamp>,
}

/// The state of an agent's session with the hub.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AgentConnection {
    /// `Connected` or `Disconnected`.
    pub state: ConnectionState,
    /// When the state last changed; while `Connected`, when the current session came up (a
    /// session that replaces another moves it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Timestamp>,
}

/// Whether an agent's session is up.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum ConnectionState {
    /// The session is up.
    Connected,
    /// No session.
    Disconnected,
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    #[test]
    fn a_managed_cluster_is_cluster_scoped_and_unaccepted_by_default() {
        let mc: ManagedCluster = serde_json::from_value(serde_json::json!({
            "apiVersion": "fleet.flotilla.dev/v1",
            "kind": "ManagedCluster",
            "metadata": {"name": "edge-1", "labels": {"region": "eu"}},
            "spec": {},
        }))
        .unwrap();
        assert!(!mc.spec.accepted);
        assert_eq!(ManagedCluster::plural(&()), "managedclusters");
        assert!(mc.meta().namespace.is_none());
    }

    #[test]
    fn the_status_names_the_cluster_uid_as_kubernetes_spells_uid() {
        let status = ManagedClusterStatus {
            cluster_uid: Some("7d0e6b1c".into()),
            connection: Some(AgentConnection {
                state: ConnectionState::Connected,
                last_transition_time: None,
            }),
            plans_held: Some(3),
            ..Default::default()
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(json["clusterUID"], "7d0e6b1c");
        assert_eq!(json["connection"]["state"], "Connected");
        assert_eq!(json["plansHeld"], 3);
    }
}
