//! `HelmReleaseSet` (`helm.flotilla.dev/v1alpha1`, namespaced): one declaration, one child
//! HelmRelease per matching ManagedCluster, rolled out in waves.
//!
//! The spec and status are flotilla-core's types ([`flotilla_core::set`]); the rollout
//! decision is [`flotilla_core::rollout::decide`]. `kubectl wait --for=condition=ready
//! helmreleaseset/NAME` returns when the whole rollout is done: `Ready` is True only once
//! every wave is through at the update revision (kstatus: `Reconciling` while promoting,
//! `Stalled` on a breach or an abort).

use std::ops::{Deref, DerefMut};

use flotilla_core::set::{self, HelmReleaseSetStatus, SetSpecError};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a HelmReleaseSet.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "helm.flotilla.dev",
    version = "v1alpha1",
    kind = "HelmReleaseSet",
    namespaced,
    status = "HelmReleaseSetStatus",
    derive = "PartialEq",
    shortname = "hrs",
    category = "flotilla",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Revision", "type": "string", "jsonPath": ".status.updateRevision"}"#,
    printcolumn = r#"{"name": "Wave", "type": "string", "jsonPath": ".status.currentWave"}"#,
    printcolumn = r#"{"name": "Desired", "type": "integer", "jsonPath": ".status.summary.desired"}"#,
    printcolumn = r#"{"name": "Updated", "type": "integer", "jsonPath": ".status.summary.updated"}"#,
    printcolumn = r#"{"name": "Failed", "type": "integer", "jsonPath": ".status.summary.failed"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message", "priority": 1}"#,
    doc = "A Helm release for every matching cluster of the fleet, rolled out in waves."
)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct HelmReleaseSetSpec(pub set::HelmReleaseSetSpec);

impl Deref for HelmReleaseSetSpec {
    type Target = set::HelmReleaseSetSpec;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for HelmReleaseSetSpec {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<set::HelmReleaseSetSpec> for HelmReleaseSetSpec {
    fn from(spec: set::HelmReleaseSetSpec) -> Self {
        Self(spec)
    }
}

impl HelmReleaseSet {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// [`set::HelmReleaseSetSpec::validate`], naming this object.
    pub fn validate(&self) -> Result<(), SetSpecError> {
        self.spec.validate(&self.key())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_core::rollout::{RolloutPlan, decide};
    use flotilla_core::set::WaveState;
    use kube::Resource as _;
    use serde_json::{Value, json};

    fn ingress() -> Value {
        json!({
            "apiVersion": "helm.flotilla.dev/v1alpha1",
            "kind": "HelmReleaseSet",
            "metadata": {"name": "ingress", "namespace": "fleet", "generation": 1},
            "spec": {
                "clusterSelector": {"matchLabels": {"tier": "prod"}},
                "template": {"spec": {
                    "interval": "10m",
                    "chart": {"spec": {"chart": "podinfo",
                        "sourceRef": {"kind": "HelmRepository", "name": "podinfo"}}},
                }},
                "rollout": {"waves": [{"name": "canary", "maxConcurrency": 1,
                    "clusterSelector": {"matchLabels": {"ring": "canary"}}}]},
            },
        })
    }

    #[test]
    fn the_resource_is_helm_flotilla_dev_v1alpha1_helmreleasesets() {
        assert_eq!(
            HelmReleaseSet::api_version(&()),
            "helm.flotilla.dev/v1alpha1"
        );
        assert_eq!(HelmReleaseSet::plural(&()), "helmreleasesets");
        let set: HelmReleaseSet = serde_json::from_value(ingress()).unwrap();
        set.validate().unwrap();
        assert_eq!(set.key(), "fleet/ingress");
        let plan = RolloutPlan::new(&set.spec, &HelmReleaseSetStatus::default());
        let d = decide(
            &plan,
            &[],
            &flotilla_core::meta::Timestamp::from_unix_seconds(0),
        );
        assert!(d.promotions.is_empty());
        assert_eq!(d.report.waves[0].state, WaveState::Complete);
    }

    #[test]
    fn a_bad_wave_is_refused_naming_the_object() {
        let mut json = ingress();
        json["spec"]["rollout"]["waves"][0]["maxConcurrency"] = json!("0%");
        let set: HelmReleaseSet = serde_json::from_value(json).unwrap();
        let err = set.validate().unwrap_err().to_string();
        assert_eq!(
            err,
            "HelmReleaseSet fleet/ingress: spec.rollout.waves[0].maxConcurrency: must be at least 1 or 1%: 0 would never promote"
        );
    }

    fn schema() -> Value {
        let crd = crate::crd::crd_of::<HelmReleaseSet>();
        let validation = crd.spec.versions[0].schema.clone().unwrap();
        serde_json::to_value(validation.open_api_v3_schema.unwrap()).unwrap()
    }

    /// Every node with its path, depth first.
    fn nodes<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((path.clone(), schema));
        if let Some(props) = schema["properties"].as_object() {
            for (name, child) in props {
                nodes(child, format!("{path}.{name}"), out);
            }
        }
        if schema["items"].is_object() {
            nodes(&schema["items"], format!("{path}[]"), out);
        }
        if schema["additionalProperties"].is_object() {
            nodes(&schema["additionalProperties"], format!("{path}{{}}"), out);
        }
    }

    #[test]
    fn the_schema_is_structural_with_int_or_string_counts() {
        let schema = schema();
        let mut all = Vec::new();
        nodes(&schema, String::new(), &mut all);
        let mut int_or_string = Vec::new();
        for (path, node) in all {
            let free_form = node["x-kubernetes-preserve-unknown-fields"] == true;
            let ios = node["x-kubernetes-int-or-string"] == true;
            if ios {
                int_or_string.push(path.clone());
                assert!(node.get("anyOf").is_none(), "{path}");
                assert_eq!(node["pattern"], set::INT_OR_PERCENT_PATTERN, "{path}");
            } else {
                assert!(
                    node["type"].is_string() || free_form,
                    "{path}: no type: {node}"
                );
                assert!(node.get("anyOf").is_none(), "{path}: anyOf");
            }
            for banned in ["oneOf", "allOf", "not", "$ref", "nullable", "const"] {
                assert!(node.get(banned).is_none(), "{path}: has {banned}: {node}");
            }
            if let Some(required) = node["required"].as_array() {
                for name in required {
                    let name = name.as_str().unwrap();
                    assert!(
                        node["properties"].get(name).is_some(),
                        "{path}: requires {name}"
                    );
                }
            }
        }
        assert_eq!(
            int_or_string,
            [
                ".spec.rollout.waves[].maxConcurrency",
                ".spec.rollout.waves[].maxFailures"
            ]
        );
    }

    #[test]
    fn the_schema_validates_as_flux_crds_do() {
        let schema = schema();
        let spec = &schema["properties"]["spec"];
        let template = &spec["properties"]["template"]["properties"]["spec"];
        assert!(template["properties"].get("clusterRef").is_none());
        assert!(template["properties"].get("kubeConfig").is_none());
        assert_eq!(
            template["properties"]["values"]["x-kubernetes-preserve-unknown-fields"],
            true
        );
        assert_eq!(
            template["x-kubernetes-validations"],
            json!([{"rule": "(has(self.chart) && !has(self.chartRef)) || (!has(self.chart) && has(self.chartRef))",
                    "message": "either chart or chartRef must be set"}])
        );
        assert_eq!(template["required"], json!(["interval"]));
        assert_eq!(spec["required"], json!(["template"]));
        let rollout = &spec["properties"]["rollout"]["properties"];
        let wave = &rollout["waves"]["items"]["properties"];
        for (node, values) in [
            (&wave["gate"], json!(["Auto", "Manual"])),
            (&rollout["strategy"], json!(["Progressive", "AllAtOnce"])),
            (&rollout["onFailure"], json!(["Pause", "AbortAndRollback"])),
            (
                &spec["properties"]["stopMatchingPolicy"],
                json!(["Uninstall", "Orphan"]),
            ),
            (
                &spec["properties"]["clusterSelector"]["properties"]["matchExpressions"]["items"]["properties"]
                    ["operator"],
                json!(["In", "NotIn", "Exists", "DoesNotExist"]),
            ),
        ] {
            assert_eq!(node["enum"], values);
        }
        let duration = json!(flotilla_core::duration::DURATION_PATTERN);
        assert_eq!(wave["progressDeadline"]["pattern"], duration);
        assert_eq!(wave["minSoakTime"]["pattern"], duration);
        assert_eq!(wave["name"]["pattern"], "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
        assert_eq!(rollout["waves"]["maxItems"], 64);
        assert_eq!(rollout["waves"]["x-kubernetes-list-type"], "map");
        assert_eq!(
            rollout["waves"]["x-kubernetes-list-map-keys"],
            json!(["name"])
        );
        assert_eq!(rollout["maxNewPerReconcile"]["minimum"].as_f64(), Some(1.0));
        assert_eq!(
            spec["properties"]["clusterNames"]["items"]["maxLength"],
            253
        );
        let status = &schema["properties"]["status"];
        assert_eq!(status["default"], json!({"observedGeneration": -1}));
        assert_eq!(status["properties"]["failedClusters"]["maxItems"], 20);
        assert_eq!(
            status["properties"]["updateRevision"]["pattern"],
            "^[0-9a-f]{10}$"
        );
        assert_eq!(
            status["properties"]["waves"]["items"]["properties"]["state"]["enum"],
            json!([
                "Pending",
                "Progressing",
                "Soaking",
                "AwaitingApproval",
                "Complete",
                "Failed",
                "RollingBack",
                "RolledBack"
            ])
        );
    }

    #[test]
    fn the_crd_prints_the_rollout_and_is_named_as_kubectl_expects() {
        let crd = crate::crd::crd_of::<HelmReleaseSet>();
        assert_eq!(
            crd.metadata.name.as_deref(),
            Some("helmreleasesets.helm.flotilla.dev")
        );
        assert_eq!(crd.spec.scope, "Namespaced");
        assert_eq!(crd.spec.names.short_names, Some(vec!["hrs".to_owned()]));
        let version = &crd.spec.versions[0];
        assert_eq!(version.name, "v1alpha1");
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
        let columns: Vec<&str> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(
            columns,
            [
                "Age", "Ready", "Revision", "Wave", "Desired", "Updated", "Failed", "Status"
            ]
        );
    }
}
