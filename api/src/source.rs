//! Chart sources (`source.flotilla.dev/v1`): `HelmRepository`, `HelmChart` and
//! `OCIRepository`, compatible with Flux's `source.toolkit.fluxcd.io/v1` field names.
//!
//! Each keeps the subset of Flux's spec the hub implements (listed per kind); a field Flux
//! has and Flotilla does not is refused by the API server rather than silently ignored.
//! The status reports the resolved [`Artifact`]: a chart archive the hub caches, addressed
//! by its sha256 digest, which agents fetch by that digest.

use std::collections::BTreeMap;

use flotilla_core::duration::GoDuration;
use flotilla_core::meta::{Condition, Timestamp};
use flotilla_core::spec::{
    HelmChartTemplateVerification, LocalObjectReference, ReconcileStrategy, SourceKind,
};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The timeout pattern of Flux's source kinds: a Go duration without hours.
const TIMEOUT_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$";

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// The desired state of a Helm repository: an HTTP(S) repository serving `index.yaml`, or
/// an OCI registry (`type: oci`, `oci://` URL).
///
/// Flux fields not served: `provider`, `accessFrom`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "source.flotilla.dev",
    version = "v1",
    kind = "HelmRepository",
    plural = "helmrepositories",
    namespaced,
    status = "HelmRepositoryStatus",
    derive = "PartialEq",
    shortname = "helmrepo",
    category = "flotilla",
    category = "flotilla-sources",
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}"#,
    doc = "A Helm chart repository: an HTTP(S) index or an OCI registry."
)]
#[serde(rename_all = "camelCase")]
pub struct HelmRepositorySpec {
    /// URL of the Helm repository: `http://`, `https://` or `oci://`, with at least a host.
    #[schemars(regex(pattern = r"^(http|https|oci)://.*$"))]
    pub url: String,
    /// `default` (an HTTP(S) repository with an `index.yaml`) or `oci`; with `oci` the URL
    /// must start with `oci://`.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<HelmRepositoryType>,
    /// Secret holding the credentials: `username` and `password` for basic auth.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Secret holding a client certificate and key (`tls.crt`, `tls.key`) and/or a CA
    /// certificate (`ca.crt`) for connecting to the repository; it takes precedence over
    /// TLS data in the Secret of `secretRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,
    /// Pass the credentials of `secretRef` to hosts other than the URL's (chart URLs of
    /// the index on another host). Use with caution.
    #[serde(default, skip_serializing_if = "is_false")]
    pub pass_credentials: bool,
    /// How often the repository is checked for updates (approximate, with jitter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
    /// Allow a plain-HTTP OCI registry (only with `type: oci`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure: bool,
    /// Timeout of the index fetch and of OCI operations; defaults to 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = TIMEOUT_PATTERN))]
    pub timeout: Option<GoDuration>,
    /// Stop reconciling this repository.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

/// The kind of a Helm repository.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HelmRepositoryType {
    /// An HTTP(S) repository serving `index.yaml`.
    Default,
    /// An OCI registry.
    Oci,
}

/// The observed state of a HelmRepository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("default" = {"observedGeneration": -1}))]
#[serde(rename_all = "camelCase")]
pub struct HelmRepositoryStatus {
    /// The last generation the controller observed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// Conditions: `Ready`, `Reconciling`, `Stalled`, `FetchFailed`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where the artifact of the last successful reconcile is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The repository index of the last successful reconcile (none for `type: oci`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// The last `reconcile.fluxcd.io/requestedAt` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// The desired state of a Helm chart: a chart of a HelmRepository (by name and semver
/// range), or a chart directory of another source.
///
/// Flux fields not served: `verify.matchOIDCIdentity`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "source.flotilla.dev",
    version = "v1",
    kind = "HelmChart",
    namespaced,
    status = "HelmChartStatus",
    derive = "PartialEq",
    shortname = "hc",
    category = "flotilla",
    category = "flotilla-sources",
    printcolumn = r#"{"name": "Chart", "type": "string", "jsonPath": ".spec.chart"}"#,
    printcolumn = r#"{"name": "Version", "type": "string", "jsonPath": ".spec.version"}"#,
    printcolumn = r#"{"name": "Source Kind", "type": "string", "jsonPath": ".spec.sourceRef.kind"}"#,
    printcolumn = r#"{"name": "Source Name", "type": "string", "jsonPath": ".spec.sourceRef.name"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}"#,
    doc = "A Helm chart resolved from a source into a chart archive."
)]
#[schemars(extend("x-kubernetes-validations" = [{
    "rule": "!has(self.verify) || self.sourceRef.kind == 'HelmRepository'",
    "message": "spec.verify is only supported when spec.sourceRef.kind is 'HelmRepository'",
}]))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartSpec {
    /// Name of the chart in a HelmRepository, or its path in another source.
    pub chart: String,
    /// Semver range of the chart version (HelmRepository only); the latest when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "*"))]
    pub version: Option<String>,
    /// The source holding the chart, in this namespace.
    pub source_ref: LocalHelmChartSourceReference,
    /// How often the source is checked for a new chart (approximate, with jitter).
    pub interval: GoDuration,
    /// What makes a new artifact: `ChartVersion` (a new chart version) or `Revision` (a
    /// new source revision).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("default" = "ChartVersion"))]
    pub reconcile_strategy: Option<ReconcileStrategy>,
    /// Values files of the chart merged, in order, as its default values instead of
    /// `values.yaml`; paths relative to the source.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_files: Vec<String>,
    /// Ignore values files that do not exist instead of failing.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_missing_values_files: bool,
    /// Stop reconciling this chart.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// Signature verification of an OCI chart (HelmRepository of `type: oci` only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<HelmChartTemplateVerification>,
}

/// A reference to the source of a HelmChart, in the HelmChart's namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LocalHelmChartSourceReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent: `HelmRepository`, `GitRepository` or `Bucket`.
    pub kind: SourceKind,
    /// Name of the referent.
    pub name: String,
}

/// The observed state of a HelmChart.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("default" = {"observedGeneration": -1}))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartStatus {
    /// The last generation the controller observed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// The source artifact revision the last artifact was made from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_source_artifact_revision: Option<String>,
    /// The chart name of the last resolved chart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_chart_name: Option<String>,
    /// The values files of the last successful reconcile.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub observed_values_files: Vec<String>,
    /// Conditions: `Ready`, `Reconciling`, `Stalled`, `FetchFailed`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where the artifact of the last successful reconcile is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The chart archive of the last successful reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// The last `reconcile.fluxcd.io/requestedAt` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// The desired state of an OCI artifact source: a chart pushed to an OCI registry.
///
/// Flux fields not served: `provider`, `verify`, `serviceAccountName`, `proxySecretRef`,
/// `ignore`, `ref.semverFilter`.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "source.flotilla.dev",
    version = "v1",
    kind = "OCIRepository",
    plural = "ocirepositories",
    namespaced,
    status = "OCIRepositoryStatus",
    derive = "PartialEq",
    shortname = "ocirepo",
    category = "flotilla",
    category = "flotilla-sources",
    printcolumn = r#"{"name": "URL", "type": "string", "jsonPath": ".spec.url"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}"#,
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    doc = "An OCI artifact (a Helm chart) in a container registry."
)]
#[serde(rename_all = "camelCase")]
pub struct OCIRepositorySpec {
    /// The OCI repository: `oci://<registry>/<path>`.
    #[schemars(regex(pattern = r"^oci://.*$"))]
    pub url: String,
    /// The tag, semver range or digest to pull; the `latest` tag when unset.
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<OCIRepositoryRef>,
    /// The layer of the artifact to take; the first layer when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer_selector: Option<OCILayerSelector>,
    /// Secret of type `kubernetes.io/dockerconfigjson` with the registry credentials.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    /// Secret holding a client certificate and key (`tls.crt`, `tls.key`) and/or a CA
    /// certificate (`ca.crt`) for connecting to the registry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cert_secret_ref: Option<LocalObjectReference>,
    /// How often the repository is checked for updates (approximate, with jitter).
    pub interval: GoDuration,
    /// Timeout of registry operations; defaults to 60s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = TIMEOUT_PATTERN), extend("default" = "60s"))]
    pub timeout: Option<GoDuration>,
    /// Allow a plain-HTTP registry.
    #[serde(default, skip_serializing_if = "is_false")]
    pub insecure: bool,
    /// Stop reconciling this repository.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
}

/// Which version of an OCI artifact to pull. Precedence: digest, then semver, then tag.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OCIRepositoryRef {
    /// The digest to pull, `sha256:<hex>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// A semver range: the highest matching tag is pulled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub semver: Option<String>,
    /// The tag to pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// The layer of an OCI artifact to take, and what to do with it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct OCILayerSelector {
    /// Media type of the layer; the first layer of this type is taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// `extract` (default) the layer's content, or `copy` the compressed layer as it is
    /// (a chart archive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operation: Option<OCILayerOperation>,
}

/// What is done with the selected layer.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum OCILayerOperation {
    /// Extract the compressed content.
    Extract,
    /// Keep the compressed layer as it is.
    Copy,
}

/// The observed state of an OCIRepository.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[schemars(extend("default" = {"observedGeneration": -1}))]
#[serde(rename_all = "camelCase")]
pub struct OCIRepositoryStatus {
    /// The last generation the controller observed.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub observed_generation: i64,
    /// Conditions: `Ready`, `Reconciling`, `Stalled`, `FetchFailed`, ...
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// Where the artifact of the last successful reconcile is served.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The artifact of the last successful reconcile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact: Option<Artifact>,
    /// The layer selector the last artifact was made with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_layer_selector: Option<OCILayerSelector>,
    /// The last `reconcile.fluxcd.io/requestedAt` annotation value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

/// The output of a source: a file the hub stores, addressed by its digest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Artifact {
    /// Path of the file, relative to the hub's storage.
    pub path: String,
    /// URL the file is served at.
    pub url: String,
    /// Human-readable revision: a chart version, an OCI tag and digest, ...
    pub revision: String,
    /// Digest of the file, `<algorithm>:<checksum>` (`sha256:...`).
    #[schemars(regex(pattern = r"^[a-z0-9]+(?:[.+_-][a-z0-9]+)*:[a-zA-Z0-9=_-]+$"))]
    pub digest: String,
    /// When the artifact last changed.
    pub last_update_time: Timestamp,
    /// Size of the file in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// Metadata of the artifact (OCI annotations, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flux_helm_repository_decodes_with_its_field_names() {
        let repo: HelmRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "HelmRepository",
            "metadata": {"name": "podinfo", "namespace": "default"},
            "spec": {
                "url": "oci://ghcr.io/stefanprodan/charts",
                "type": "oci",
                "interval": "5m",
                "timeout": "30s",
                "secretRef": {"name": "creds"},
                "passCredentials": true,
            },
        }))
        .unwrap();
        assert_eq!(repo.spec.type_, Some(HelmRepositoryType::Oci));
        assert_eq!(repo.spec.secret_ref.as_ref().unwrap().name, "creds");
        assert_eq!(
            repo.spec.timeout.unwrap().get(),
            std::time::Duration::from_secs(30)
        );
    }

    #[test]
    fn an_oci_repository_keeps_its_ref_under_the_flux_name() {
        let spec = OCIRepositorySpec {
            url: "oci://ghcr.io/stefanprodan/charts/podinfo".into(),
            reference: Some(OCIRepositoryRef {
                semver: Some(">= 6.0.0".into()),
                ..Default::default()
            }),
            layer_selector: Some(OCILayerSelector {
                media_type: Some("application/vnd.cncf.helm.chart.content.v1.tar+gzip".into()),
                operation: Some(OCILayerOperation::Copy),
            }),
            secret_ref: None,
            cert_secret_ref: None,
            interval: GoDuration::from_mins(10),
            timeout: None,
            insecure: false,
            suspend: false,
        };
        let json = serde_json::to_value(&spec).unwrap();
        assert_eq!(json["ref"]["semver"], ">= 6.0.0");
        assert_eq!(json["layerSelector"]["operation"], "copy");
        assert_eq!(json["interval"], "10m0s");
    }

    #[test]
    fn a_helm_chart_status_reads_the_artifact_flux_writes() {
        let status: HelmChartStatus = serde_json::from_value(serde_json::json!({
            "observedGeneration": 3,
            "observedChartName": "podinfo",
            "artifact": {
                "path": "helmchart/default/podinfo/podinfo-6.5.3.tgz",
                "url": "http://source-controller/helmchart/default/podinfo/podinfo-6.5.3.tgz",
                "revision": "6.5.3",
                "digest": "sha256:e15c415d62760896bd8bec192a44c5716dc224db9e0fc609b9ac14718f8f9e56",
                "lastUpdateTime": "2023-12-04T14:17:35Z",
                "size": 14500,
            },
        }))
        .unwrap();
        let artifact = status.artifact.unwrap();
        assert_eq!(artifact.revision, "6.5.3");
        assert_eq!(artifact.size, Some(14500));
    }
}
