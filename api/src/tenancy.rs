//! `ManagedClusterBinding` (`fleet.flotilla.dev/v1`, cluster-scoped): which namespaces of
//! the hub may deliver releases to which ManagedClusters.
//!
//! A HelmRelease in namespace `N` whose `spec.clusterRef` names ManagedCluster `C` is planned
//! only when some binding selects both `N` and `C` (the rule: `flotilla_hub::tenancy::permits`).
//! The model is Open Cluster Management's `ManagedClusterSetBinding`, which projects a set
//! of clusters into a namespace; OCM's binding is namespaced and its creation is checked by
//! an admission webhook (the creator needs `managedclustersets/bind`). The hub has no
//! webhook, so the binding is cluster-scoped instead: the RBAC of a cluster-scoped kind
//! (`create` on `managedclusterbindings`, an administrator's) is the gate, and a namespace
//! user cannot bind their own namespace.
//!
//! ```yaml
//! apiVersion: fleet.flotilla.dev/v1
//! kind: ManagedClusterBinding
//! metadata:
//!   name: team-a-edge
//! spec:
//!   namespaces: [team-a]            # by name, and/or
//!   namespaceSelector: {}           # by the Namespace's labels ({} selects every namespace)
//!   clusters: [edge-1]              # by name, and/or
//!   clusterSelector:                # by the ManagedCluster's labels
//!     matchLabels: {region: eu}
//! ```
//!
//! A side without names and without a selector selects nothing. A label selector is only as
//! strong as the RBAC on the labels it reads: whoever may label a Namespace (or a
//! ManagedCluster) may move it into or out of a binding's selection.

use std::collections::BTreeMap;

pub use flotilla_core::selector::{LabelSelector, LabelSelectorOperator, LabelSelectorRequirement};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Namespaces bound to ManagedClusters.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fleet.flotilla.dev",
    version = "v1",
    kind = "ManagedClusterBinding",
    derive = "PartialEq",
    derive = "Default",
    shortname = "mcb",
    category = "flotilla",
    printcolumn = r#"{"name": "Namespaces", "type": "string", "jsonPath": ".spec.namespaces"}"#,
    printcolumn = r#"{"name": "Namespace-Selector", "type": "string", "jsonPath": ".spec.namespaceSelector", "priority": 1}"#,
    printcolumn = r#"{"name": "Clusters", "type": "string", "jsonPath": ".spec.clusters"}"#,
    printcolumn = r#"{"name": "Cluster-Selector", "type": "string", "jsonPath": ".spec.clusterSelector", "priority": 1}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    doc = "Lets the HelmReleases of the selected namespaces deliver to the selected ManagedClusters."
)]
#[serde(rename_all = "camelCase")]
pub struct ManagedClusterBindingSpec {
    /// Namespaces bound, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Namespaces bound, by their labels (`{}` selects every namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// ManagedClusters bound, by name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub clusters: Vec<String>,
    /// ManagedClusters bound, by their labels (`{}` selects every cluster).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_selector: Option<LabelSelector>,
}

impl ManagedClusterBindingSpec {
    /// Whether the binding selects namespace `name` with `labels`.
    pub fn selects_namespace(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        selects(
            &self.namespaces,
            self.namespace_selector.as_ref(),
            name,
            labels,
        )
    }

    /// Whether the binding selects ManagedCluster `name` with `labels`.
    pub fn selects_cluster(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        selects(&self.clusters, self.cluster_selector.as_ref(), name, labels)
    }
}

fn selects(
    names: &[String],
    selector: Option<&LabelSelector>,
    name: &str,
    labels: &BTreeMap<String, String>,
) -> bool {
    // A selector the API server would refuse (an `In` without values, a bad key) selects
    // nothing: a binding grants access only as written.
    names.iter().any(|n| n == name)
        || selector.is_some_and(|s| s.validate().is_ok() && s.matches(labels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_binding_is_cluster_scoped_and_reads_its_yaml_fields() {
        let b: ManagedClusterBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "fleet.flotilla.dev/v1",
            "kind": "ManagedClusterBinding",
            "metadata": {"name": "team-a-edge"},
            "spec": {
                "namespaces": ["team-a"],
                "clusterSelector": {"matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["eu"]}
                ]},
            },
        }))
        .unwrap();
        assert!(b.meta().namespace.is_none());
        assert_eq!(ManagedClusterBinding::plural(&()), "managedclusterbindings");
        assert!(b.spec.selects_namespace("team-a", &labels(&[])));
        assert!(!b.spec.selects_namespace("team-b", &labels(&[])));
        assert!(
            b.spec
                .selects_cluster("edge-1", &labels(&[("region", "eu")]))
        );
        assert!(
            !b.spec
                .selects_cluster("edge-1", &labels(&[("region", "us")]))
        );
    }

    #[test]
    fn a_selector_the_api_server_would_refuse_selects_nothing() {
        let spec = ManagedClusterBindingSpec {
            cluster_selector: Some(LabelSelector {
                match_expressions: vec![LabelSelectorRequirement {
                    key: "region".into(),
                    operator: LabelSelectorOperator::NotIn,
                    values: vec![],
                }],
                ..Default::default()
            }),
            ..Default::default()
        };
        // NotIn without values would hold for every cluster; it is invalid, so none.
        assert!(!spec.selects_cluster("edge-1", &labels(&[("region", "eu")])));
        assert!(!spec.selects_cluster("edge-1", &labels(&[])));
    }

    #[test]
    fn a_side_without_names_or_selector_selects_nothing() {
        let spec = ManagedClusterBindingSpec {
            namespaces: vec!["team-a".into()],
            ..Default::default()
        };
        assert!(!spec.selects_cluster("edge-1", &labels(&[])));
    }
}
