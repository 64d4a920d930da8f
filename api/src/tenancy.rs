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

use kube::CustomResource;
use kube::core::{Expression, SelectorExt as _};
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
    names.iter().any(|n| n == name) || selector.is_some_and(|s| s.matches(labels))
}

/// A Kubernetes label selector (`matchLabels` and `matchExpressions`, ANDed; empty selects
/// everything), as `metav1.LabelSelector`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LabelSelector {
    /// Labels that must have exactly these values.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub match_labels: BTreeMap<String, String>,
    /// Requirements on labels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub match_expressions: Vec<LabelSelectorRequirement>,
}

/// One requirement of a [`LabelSelector`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "(self.operator in ['In', 'NotIn']) == (has(self.values) && size(self.values) > 0)",
    "message": "values must be non-empty for In and NotIn, and empty for Exists and DoesNotExist",
}]))]
pub struct LabelSelectorRequirement {
    /// The label's key.
    pub key: String,
    /// How the label is compared with `values`.
    pub operator: LabelSelectorOperator,
    /// The values of `In` and `NotIn`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values: Vec<String>,
}

/// The operator of a [`LabelSelectorRequirement`].
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
pub enum LabelSelectorOperator {
    /// The label is one of the values.
    In,
    /// The label is absent or none of the values.
    NotIn,
    /// The label is present.
    Exists,
    /// The label is absent.
    DoesNotExist,
}

impl LabelSelector {
    /// Whether `labels` satisfy every term (kube-core's matching).
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        let equal = self
            .match_labels
            .iter()
            .map(|(k, v)| Expression::Equal(k.clone(), v.clone()));
        let required = self.match_expressions.iter().map(|r| {
            let key = r.key.clone();
            let values = r.values.iter().cloned().collect();
            match r.operator {
                LabelSelectorOperator::In => Expression::In(key, values),
                LabelSelectorOperator::NotIn => Expression::NotIn(key, values),
                LabelSelectorOperator::Exists => Expression::Exists(key),
                LabelSelectorOperator::DoesNotExist => Expression::DoesNotExist(key),
            }
        });
        equal.chain(required).all(|e| e.matches(labels))
    }
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
    fn a_selector_matches_as_kubernetes_label_selectors_do() {
        let req = |key: &str, operator, values: &[&str]| LabelSelectorRequirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| (*v).to_owned()).collect(),
        };
        use LabelSelectorOperator::*;
        let cases: Vec<(LabelSelector, &[(&str, &str)], bool)> = vec![
            (LabelSelector::default(), &[], true),
            (LabelSelector::default(), &[("a", "1")], true),
            (
                LabelSelector {
                    match_labels: labels(&[("a", "1")]),
                    ..Default::default()
                },
                &[("a", "1"), ("b", "2")],
                true,
            ),
            (
                LabelSelector {
                    match_labels: labels(&[("a", "1")]),
                    ..Default::default()
                },
                &[("a", "2")],
                false,
            ),
            (
                LabelSelector {
                    match_expressions: vec![req("a", In, &["1", "2"])],
                    ..Default::default()
                },
                &[("a", "2")],
                true,
            ),
            (
                LabelSelector {
                    match_expressions: vec![req("a", In, &["1"])],
                    ..Default::default()
                },
                &[],
                false,
            ),
            (
                LabelSelector {
                    match_expressions: vec![req("a", NotIn, &["1"])],
                    ..Default::default()
                },
                &[],
                true,
            ),
            (
                LabelSelector {
                    match_expressions: vec![req("a", Exists, &[])],
                    ..Default::default()
                },
                &[("a", "")],
                true,
            ),
            (
                LabelSelector {
                    match_expressions: vec![req("a", DoesNotExist, &[])],
                    ..Default::default()
                },
                &[("a", "x")],
                false,
            ),
            (
                LabelSelector {
                    match_labels: labels(&[("a", "1")]),
                    match_expressions: vec![req("b", Exists, &[])],
                },
                &[("a", "1")],
                false,
            ),
        ];
        for (selector, have, want) in cases {
            assert_eq!(
                selector.matches(&labels(have)),
                want,
                "{selector:?} on {have:?}"
            );
        }
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
