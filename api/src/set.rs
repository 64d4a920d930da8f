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
        let d = decide(&plan, &[], &flotilla_core::meta::Timestamp::from_unix_seconds(0));
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
}
