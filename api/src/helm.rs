//! `HelmRelease` (`helm.flotilla.dev/v1`): Flux's `helm.toolkit.fluxcd.io/v2` HelmRelease,
//! field for field, plus `spec.clusterRef`.
//!
//! The spec and status are flotilla-core's types ([`flotilla_core::spec::HelmReleaseSpec`],
//! [`flotilla_core::status::HelmReleaseStatus`]); their schema, validation included, is
//! derived there (feature `schema`). [`HelmReleaseSpec`] wraps the core spec so the
//! `CustomResource` derive has a local type to stand on; it dereferences to it, so
//! `hr.spec.interval` reads the core field.

use std::ops::{Deref, DerefMut};

use flotilla_core::spec::{self, SpecError};
use flotilla_core::status::HelmReleaseStatus;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The desired state of a Helm release: Flux's HelmRelease v2 spec and `clusterRef`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "helm.flotilla.dev",
    version = "v1",
    kind = "HelmRelease",
    namespaced,
    status = "HelmReleaseStatus",
    derive = "PartialEq",
    shortname = "hr",
    category = "flotilla",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}"#,
    doc = "A Helm release, delivered to the hub's cluster or to a workload cluster."
)]
#[serde(transparent)]
#[schemars(transparent)]
pub struct HelmReleaseSpec(pub spec::HelmReleaseSpec);

impl Deref for HelmReleaseSpec {
    type Target = spec::HelmReleaseSpec;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}

impl DerefMut for HelmReleaseSpec {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl From<spec::HelmReleaseSpec> for HelmReleaseSpec {
    fn from(spec: spec::HelmReleaseSpec) -> Self {
        Self(spec)
    }
}

impl HelmRelease {
    /// The object as flotilla-core's [`spec::HelmRelease`], checked by
    /// [`spec::HelmRelease::validate`] (the rules the CRD's schema and CEL rules enforce,
    /// and Flux's release name rule), each error naming the object and field.
    pub fn to_core(&self) -> Result<spec::HelmRelease, SpecError> {
        let doc = serde_json::to_value(self).map_err(|e| SpecError::Decode {
            object: format!(
                "{}/{}",
                self.metadata.namespace.as_deref().unwrap_or_default(),
                self.metadata.name.as_deref().unwrap_or_default()
            ),
            field: ".".into(),
            message: e.to_string(),
        })?;
        spec::HelmRelease::from_value(doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::Resource as _;

    fn podinfo() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "default", "generation": 2},
            "spec": {
                "interval": "10m",
                "chart": {"spec": {
                    "chart": "podinfo",
                    "version": "6.5.*",
                    "sourceRef": {"kind": "HelmRepository", "name": "podinfo"},
                }},
                "clusterRef": {"name": "edge-1"},
                "values": {"replicaCount": 2},
            },
        })
    }

    #[test]
    fn a_helm_release_decodes_into_the_core_spec_and_back_unchanged() {
        let hr: HelmRelease = serde_json::from_value(podinfo()).unwrap();
        assert_eq!(hr.spec.interval.to_string(), "10m0s");
        assert_eq!(
            hr.spec.cluster_ref.as_ref().map(|c| c.name.as_str()),
            Some("edge-1")
        );
        let back = serde_json::to_value(&hr).unwrap();
        let mut want = podinfo();
        want["spec"]["interval"] = "10m0s".into();
        assert_eq!(back, want);
    }

    #[test]
    fn to_core_validates_and_keeps_the_metadata_the_state_machine_reads() {
        let hr: HelmRelease = serde_json::from_value(podinfo()).unwrap();
        let core = hr.to_core().unwrap();
        assert_eq!(core.key(), "default/podinfo");
        assert_eq!(core.generation(), 2);
        assert_eq!(core.release_name().unwrap().as_str(), "podinfo");

        let mut both = podinfo();
        both["spec"]["chartRef"] = serde_json::json!({"kind": "OCIRepository", "name": "p"});
        let hr: HelmRelease = serde_json::from_value(both).unwrap();
        let err = hr.to_core().unwrap_err().to_string();
        assert!(
            err.contains("HelmRelease default/podinfo") && err.contains("chartRef"),
            "{err}"
        );
    }

    #[test]
    fn the_resource_is_helm_flotilla_dev_v1_helmreleases() {
        assert_eq!(HelmRelease::api_version(&()), "helm.flotilla.dev/v1");
        assert_eq!(HelmRelease::plural(&()), "helmreleases");
    }
}
