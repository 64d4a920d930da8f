//! The HelmRelease API (`helm.toolkit.fluxcd.io/v2`, served by Flotilla as
//! `helm.flotilla.dev/v1`) as plain serde types, plus Flotilla's `spec.clusterRef`.
//!
//! Field names are the API's camelCase names; optional fields are `Option`s (or empty
//! collections), and the API's defaults are exposed through accessor methods
//! ([`HelmReleaseSpec::timeout`], [`UpgradeRemediation::remediate_last_failure`], ...) so
//! a round trip keeps exactly what the user wrote.
//!
//! Parse with [`HelmRelease::from_json_str`] or [`HelmRelease::from_value`]: a decode
//! error names the field (`spec.install.remediation.retries: invalid type ...`), and the
//! checks the CRD's OpenAPI schema and CEL rules would make are run by
//! [`HelmRelease::validate`], each error naming its field too.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::duration::GoDuration;
use crate::ids::{self, ReleaseName};
use crate::meta::ObjectMeta;
use crate::status::HelmReleaseStatus;

/// The default `spec.timeout` (5m).
pub const DEFAULT_TIMEOUT: GoDuration = GoDuration::from_secs(300);
/// The default `spec.maxHistory`.
pub const DEFAULT_MAX_HISTORY: i32 = 5;
/// The default `retryInterval` of the `RetryOnFailure` strategy (5m).
pub const DEFAULT_RETRY_INTERVAL: GoDuration = GoDuration::from_secs(300);
/// The default `valuesFrom[].valuesKey`.
pub const DEFAULT_VALUES_KEY: &str = "values.yaml";
/// Label or annotation that excludes an object from drift detection when `disabled`.
pub const DRIFT_DETECTION_METADATA_KEY: &str = "helm.toolkit.fluxcd.io/driftDetection";
/// Annotation requesting a reconcile.
pub const RECONCILE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/requestedAt";
/// Annotation requesting a forced install or upgrade.
pub const FORCE_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/forceAt";
/// Annotation requesting a reset of the failure counters.
pub const RESET_REQUEST_ANNOTATION: &str = "reconcile.fluxcd.io/resetAt";

fn is_false(b: &bool) -> bool {
    !*b
}

/// Go's `omitempty` for optional strings: absent and empty are both left out (this keeps
/// the post-renderer digest equal to Flux's).
fn is_none_or_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

/// The schema of `spec.values`: any JSON object, kept as written.
#[cfg(feature = "schema")]
fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Inline values (a JSON object), merged over the values of valuesFrom.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// A HelmRelease object.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HelmRelease {
    /// `helm.flotilla.dev/v1` (or Flux's `helm.toolkit.fluxcd.io/v2`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `HelmRelease`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired state.
    pub spec: HelmReleaseSpec,
    /// Observed state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<HelmReleaseStatus>,
}

/// The desired state of a Helm release.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-validations" = [{
    "rule": "(has(self.chart) && !has(self.chartRef)) || (!has(self.chart) && has(self.chartRef))",
    "message": "either chart or chartRef must be set",
}, {
    "rule": "!has(self.clusterRef) || !has(self.kubeConfig)",
    "message": "clusterRef and kubeConfig are mutually exclusive",
}])))]
#[serde(rename_all = "camelCase")]
pub struct HelmReleaseSpec {
    /// Template of the HelmChart the controller creates for this release.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart: Option<HelmChartTemplate>,
    /// Reference to a source object holding the chart artifact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_ref: Option<CrossNamespaceSourceReference>,
    /// Reconcile interval (required).
    pub interval: GoDuration,
    /// KubeConfig of a remote cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kube_config: Option<KubeConfigReference>,
    /// Stops reconciliation when true.
    #[serde(default, skip_serializing_if = "is_false")]
    pub suspend: bool,
    /// Helm release name; defaults to `[targetNamespace-]name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 53)))]
    pub release_name: Option<String>,
    /// Namespace the release is made in; defaults to the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 63)))]
    pub target_namespace: Option<String>,
    /// Namespace of the Helm storage; defaults to the object's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 63)))]
    pub storage_namespace: Option<String>,
    /// HelmReleases that must be ready first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depends_on: Vec<DependencyReference>,
    /// Timeout of each Helm action; defaults to 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Number of release revisions Helm keeps; 0 is unlimited; defaults to 5.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_history: Option<i32>,
    /// Service account to impersonate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub service_account_name: Option<String>,
    /// Reuse one Kubernetes client for the whole reconcile; defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_client: Option<bool>,
    /// Drift detection configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drift_detection: Option<DriftDetection>,
    /// Install configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<Install>,
    /// Upgrade configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upgrade: Option<Upgrade>,
    /// Test configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test: Option<Test>,
    /// Rollback configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback: Option<Rollback>,
    /// Uninstall configuration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uninstall: Option<Uninstall>,
    /// References to ConfigMaps and Secrets holding values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_from: Vec<ValuesReference>,
    /// Inline values (a JSON object).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(schema_with = "free_form_object"))]
    pub values: Option<Value>,
    /// Labels and annotations added to every rendered object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub common_metadata: Option<CommonMetadata>,
    /// Post renderers, applied in order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_renderers: Option<Vec<PostRenderer>>,
    /// Whether hooks go through the post renderers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_render_strategy: Option<PostRenderStrategy>,
    /// How to wait for applied resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wait_strategy: Option<WaitStrategy>,
    /// CEL health checks for custom resources.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub health_check_exprs: Vec<CustomHealthCheck>,
    /// Flotilla: the cluster to release to: a registered workload cluster
    /// (`ManagedCluster`, served by its agent) or a Cluster API `Cluster` (served in push
    /// mode through its `<name>-kubeconfig` Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_ref: Option<ClusterReference>,
}

/// The kinds `spec.clusterRef` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ClusterReferenceKind {
    /// A registered workload cluster (`fleet.flotilla.dev` `ManagedCluster`,
    /// cluster-scoped), served by its connected agent.
    #[default]
    ManagedCluster,
    /// A Cluster API `Cluster` (`cluster.x-k8s.io`) in the HelmRelease's namespace, served
    /// in push mode through its `<name>-kubeconfig` Secret once its control plane is
    /// initialized.
    Cluster,
}

/// Flotilla's reference to the cluster of a release: a `ManagedCluster` (cluster-scoped,
/// by name; the default kind) or a Cluster API `Cluster` in the HelmRelease's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ClusterReference {
    /// Kind of the cluster object: `ManagedCluster` (default) or `Cluster` (Cluster API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ClusterReferenceKind>,
    /// Name of the ManagedCluster or Cluster.
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(min = 1, max = 253),
            regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
        )
    )]
    pub name: String,
}

impl ClusterReference {
    /// The kind named (`ManagedCluster` when unset).
    pub fn kind(&self) -> ClusterReferenceKind {
        self.kind.unwrap_or_default()
    }

    /// The Cluster API `Cluster` this names, if it names one.
    pub fn cluster_api(&self) -> Option<&str> {
        (self.kind() == ClusterReferenceKind::Cluster).then_some(self.name.as_str())
    }
}

/// Template of the HelmChart made for a HelmRelease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartTemplate {
    /// Labels and annotations of the HelmChart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<HelmChartTemplateObjectMeta>,
    /// HelmChart spec.
    pub spec: HelmChartTemplateSpec,
}

/// Metadata template of the HelmChart.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartTemplateObjectMeta {
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// Spec template of the HelmChart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartTemplateSpec {
    /// Chart name or path in the source.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 2048)))]
    pub chart: String,
    /// Semver expression; defaults to `*`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("default" = "*")))]
    pub version: Option<String>,
    /// Source holding the chart.
    pub source_ref: CrossNamespaceObjectReference,
    /// Source check interval; defaults to `spec.interval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval: Option<GoDuration>,
    /// What makes a new artifact; defaults to `ChartVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("default" = "ChartVersion")))]
    pub reconcile_strategy: Option<ReconcileStrategy>,
    /// Values files merged into the chart's defaults.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub values_files: Vec<String>,
    /// Ignore values files that do not exist.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_missing_values_files: bool,
    /// Signature verification (OCI only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<HelmChartTemplateVerification>,
}

impl HelmChartTemplateSpec {
    /// The version constraint, `*` when unset.
    pub fn version(&self) -> &str {
        self.version.as_deref().unwrap_or("*")
    }
}

/// What triggers a new HelmChart artifact.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ReconcileStrategy {
    /// A new chart version.
    ChartVersion,
    /// A new source revision.
    Revision,
}

/// Signature verification of an OCI chart.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
// Required as in Flux's CRD, though the API server fills in the default first.
#[cfg_attr(feature = "schema", schemars(extend("required" = ["provider"])))]
#[serde(rename_all = "camelCase")]
pub struct HelmChartTemplateVerification {
    /// `cosign` or `notation`.
    #[serde(default = "default_provider")]
    pub provider: VerificationProvider,
    /// Secret with the trusted public keys.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
}

fn default_provider() -> VerificationProvider {
    VerificationProvider::Cosign
}

/// A signature provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum VerificationProvider {
    /// Sigstore cosign.
    Cosign,
    /// Notary notation.
    Notation,
}

/// A reference to a source in any namespace (`spec.chart.spec.sourceRef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CrossNamespaceObjectReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent.
    pub kind: SourceKind,
    /// Name of the referent.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    /// Namespace of the referent; defaults to the HelmRelease's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 63)))]
    pub namespace: Option<String>,
}

/// The kinds of source a chart template can point to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum SourceKind {
    /// A Helm repository (HTTP index or OCI).
    HelmRepository,
    /// A Git repository.
    GitRepository,
    /// An object storage bucket.
    Bucket,
}

/// A reference to a chart source object (`spec.chartRef`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CrossNamespaceSourceReference {
    /// API version of the referent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// Kind of the referent.
    pub kind: ChartRefKind,
    /// Name of the referent.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    /// Namespace of the referent; defaults to the HelmRelease's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 63)))]
    pub namespace: Option<String>,
}

/// The kinds `spec.chartRef` may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ChartRefKind {
    /// An OCI repository holding the chart.
    OCIRepository,
    /// A HelmChart object.
    HelmChart,
    /// An external artifact.
    ExternalArtifact,
}

/// A reference to an object in the same namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct LocalObjectReference {
    /// Name of the referent.
    pub name: String,
}

/// A reference to a key of a Secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyReference {
    /// Name of the Secret.
    pub name: String,
    /// Key in the Secret; defaults to `value`, then `value.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// Where the kubeconfig of a remote cluster comes from.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-validations" = [
    {
        "rule": "has(self.configMapRef) || has(self.secretRef)",
        "message": "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified",
    },
    {
        "rule": "!has(self.configMapRef) || !has(self.secretRef)",
        "message": "exactly one of spec.kubeConfig.configMapRef or spec.kubeConfig.secretRef must be specified",
    },
])))]
#[serde(rename_all = "camelCase")]
pub struct KubeConfigReference {
    /// ConfigMap for provider-based (secret-less) access.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<LocalObjectReference>,
    /// Secret holding a kubeconfig.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<SecretKeyReference>,
}

/// A HelmRelease this one depends on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DependencyReference {
    /// Name of the dependency.
    pub name: String,
    /// Namespace of the dependency; defaults to this HelmRelease's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// CEL expression deciding readiness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready_expr: Option<String>,
}

/// A values source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ValuesReference {
    /// `ConfigMap` or `Secret`.
    pub kind: ValuesReferenceKind,
    /// Name of the object, in the HelmRelease's namespace.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    /// Data key; defaults to `values.yaml`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(length(max = 253), regex(pattern = r"^[\-._a-zA-Z0-9]+$"))
    )]
    pub values_key: Option<String>,
    /// `--set`-style path the value is merged at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(
        feature = "schema",
        schemars(
            length(max = 250),
            regex(pattern = r"^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$")
        )
    )]
    pub target_path: Option<String>,
    /// Ignore a missing object or key.
    #[serde(default, skip_serializing_if = "is_false")]
    pub optional: bool,
    /// Treat the value as a literal string (`--set-literal`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub literal: bool,
}

impl ValuesReference {
    /// The data key, `values.yaml` when unset.
    pub fn values_key(&self) -> &str {
        self.values_key.as_deref().unwrap_or(DEFAULT_VALUES_KEY)
    }
}

/// Kinds a values reference may name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ValuesReferenceKind {
    /// A ConfigMap.
    ConfigMap,
    /// A Secret.
    Secret,
}

impl fmt::Display for ValuesReferenceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ConfigMap => "ConfigMap",
            Self::Secret => "Secret",
        })
    }
}

/// Labels and annotations added to every rendered object.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CommonMetadata {
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
    /// Labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
}

/// A post renderer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct PostRenderer {
    /// Built-in kustomize post renderer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kustomize: Option<Kustomize>,
}

/// Kustomize directives of a post renderer.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Kustomize {
    /// Strategic merge and JSON 6902 patches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub patches: Vec<KustomizePatch>,
    /// Image overrides.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<KustomizeImage>,
}

/// A kustomize patch with an optional target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct KustomizePatch {
    /// The patch (YAML or JSON, strategic merge or RFC 6902).
    pub patch: String,
    /// Objects it applies to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// A kustomize image override.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct KustomizeImage {
    /// Image name to match.
    pub name: String,
    /// Replacement name.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub new_name: Option<String>,
    /// Replacement tag.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub new_tag: Option<String>,
    /// Replacement digest.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub digest: Option<String>,
}

/// A kustomize object selector (regexes and label selectors).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Selector {
    /// API group regex.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub group: Option<String>,
    /// API version regex.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub version: Option<String>,
    /// Kind regex.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub kind: Option<String>,
    /// Namespace regex.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub namespace: Option<String>,
    /// Name regex.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub name: Option<String>,
    /// Annotation selector expression.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub annotation_selector: Option<String>,
    /// Label selector expression.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub label_selector: Option<String>,
}

/// Whether hooks are sent through post renderers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum PostRenderStrategy {
    /// Helm 3: hooks are not post-rendered.
    Nohooks,
    /// Helm 4 default: hooks and templates in one stream.
    Combined,
    /// Hooks and templates in separate streams.
    Separate,
}

/// How to wait for applied resources.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct WaitStrategy {
    /// `poller` (kstatus) or `legacy`.
    pub name: WaitStrategyName,
}

/// Wait strategy names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum WaitStrategyName {
    /// kstatus polling.
    Poller,
    /// Helm 3's wait logic.
    Legacy,
}

/// A CEL health check for a custom resource kind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct CustomHealthCheck {
    /// API version of the resources.
    pub api_version: String,
    /// Kind of the resources.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Expression true when the resource is current.
    pub current: String,
    /// Expression true when the resource is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<String>,
    /// Expression true when the resource failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

/// Drift detection configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct DriftDetection {
    /// `enabled`, `warn` or `disabled` (default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<DriftDetectionMode>,
    /// Rules for ignoring changes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore: Vec<IgnoreRule>,
}

impl DriftDetection {
    /// The mode, `disabled` when unset.
    pub fn mode(&self) -> DriftDetectionMode {
        self.mode.unwrap_or(DriftDetectionMode::Disabled)
    }
}

/// How drift is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum DriftDetectionMode {
    /// Detect and correct.
    Enabled,
    /// Detect and report.
    Warn,
    /// Do nothing.
    Disabled,
}

impl DriftDetectionMode {
    /// True for `enabled` and `warn`.
    pub fn detects(self) -> bool {
        matches!(self, Self::Enabled | Self::Warn)
    }
}

/// Paths to ignore when diffing, optionally for selected objects.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct IgnoreRule {
    /// RFC 6901 JSON pointers.
    pub paths: Vec<String>,
    /// Objects the rule applies to; all when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Selector>,
}

/// CRD lifecycle policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum CrdsPolicy {
    /// Neither create nor update CRDs.
    Skip,
    /// Create missing CRDs only.
    Create,
    /// Create missing and replace existing CRDs.
    CreateReplace,
}

/// Whether a failed action is remediated or retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ActionStrategyName {
    /// Remediate, then retry within the remediation budget (default).
    RemediateOnFailure,
    /// Retry after an interval, never remediate, never stall.
    RetryOnFailure,
}

/// `spec.install.strategy` / `spec.upgrade.strategy`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ActionStrategy {
    /// Strategy name.
    pub name: ActionStrategyName,
    /// Retry interval (only with `RetryOnFailure`); defaults to 5m.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_interval: Option<GoDuration>,
}

fn retry_of(strategy: Option<&ActionStrategy>) -> Option<GoDuration> {
    match strategy {
        Some(s) if s.name == ActionStrategyName::RetryOnFailure => {
            Some(s.retry_interval.unwrap_or(DEFAULT_RETRY_INTERVAL))
        }
        _ => None,
    }
}

/// The remediation strategy of a failed upgrade.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum RemediationStrategy {
    /// Roll back to the previous good release (upgrade default).
    Rollback,
    /// Uninstall the release (always for install).
    Uninstall,
}

/// Install configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Install {
    /// Timeout; defaults to `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Failure strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.retryInterval) || self.name != 'RemediateOnFailure'",
        "message": ".retryInterval cannot be set when .name is 'RemediateOnFailure'",
    }])))]
    pub strategy: Option<ActionStrategy>,
    /// Remediation of a failed install.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<InstallRemediation>,
    /// Do not take ownership of existing resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_take_ownership: bool,
    /// Do not wait for resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait: bool,
    /// Do not wait for Jobs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait_for_jobs: bool,
    /// Do not run hooks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_hooks: bool,
    /// Skip OpenAPI validation.
    #[serde(
        default,
        rename = "disableOpenAPIValidation",
        skip_serializing_if = "is_false"
    )]
    pub disable_openapi_validation: bool,
    /// Skip JSON schema validation of values.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_schema_validation: bool,
    /// Reuse the name of a deleted release kept in history.
    #[serde(default, skip_serializing_if = "is_false")]
    pub replace: bool,
    /// Deprecated: use `crds: Skip`.
    #[serde(default, rename = "skipCRDs", skip_serializing_if = "is_false")]
    pub skip_crds: bool,
    /// CRD policy; defaults to `Create`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crds: Option<CrdsPolicy>,
    /// Create the target namespace.
    #[serde(default, skip_serializing_if = "is_false")]
    pub create_namespace: bool,
    /// Server-side apply; defaults to true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<bool>,
}

impl Install {
    /// Whether to server-side apply: `serverSideApply`, true when unset (Flux's default
    /// under Helm 4).
    pub fn server_side_apply(&self) -> bool {
        self.server_side_apply.unwrap_or(true)
    }

    /// The CRD policy, `Create` when unset (`Skip` when the deprecated `skipCRDs` is set).
    pub fn crds(&self) -> CrdsPolicy {
        match self.crds {
            Some(p) => p,
            None if self.skip_crds => CrdsPolicy::Skip,
            None => CrdsPolicy::Create,
        }
    }

    /// The remediation configuration, defaulted.
    pub fn remediation(&self) -> InstallRemediation {
        self.remediation.clone().unwrap_or_default()
    }

    /// The retry interval when the `RetryOnFailure` strategy is active.
    pub fn retry(&self) -> Option<GoDuration> {
        retry_of(self.strategy.as_ref())
    }
}

/// Install remediation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct InstallRemediation {
    /// Retries before giving up; negative is unlimited; defaults to 0.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero_i64")]
    pub retries: i64,
    /// Do not remediate test failures; defaults to `spec.test.ignoreFailures`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_test_failures: Option<bool>,
    /// Remediate the last failure too; defaults to false.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
}

impl InstallRemediation {
    /// `remediateLastFailure`, false when unset.
    pub fn remediate_last_failure(&self) -> bool {
        self.remediate_last_failure.unwrap_or(false)
    }
}

pub(crate) fn is_zero_i64(v: &i64) -> bool {
    *v == 0
}

/// Upgrade configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Upgrade {
    /// Timeout; defaults to `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Failure strategy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("x-kubernetes-validations" = [{
        "rule": "!has(self.retryInterval) || self.name == 'RetryOnFailure'",
        "message": ".retryInterval can only be set when .name is 'RetryOnFailure'",
    }])))]
    pub strategy: Option<ActionStrategy>,
    /// Remediation of a failed upgrade.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediation: Option<UpgradeRemediation>,
    /// Do not take ownership of existing resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_take_ownership: bool,
    /// Do not wait for resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait: bool,
    /// Do not wait for Jobs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait_for_jobs: bool,
    /// Do not run hooks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_hooks: bool,
    /// Skip OpenAPI validation.
    #[serde(
        default,
        rename = "disableOpenAPIValidation",
        skip_serializing_if = "is_false"
    )]
    pub disable_openapi_validation: bool,
    /// Skip JSON schema validation of values.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_schema_validation: bool,
    /// Replace resources instead of patching (client-side apply only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
    /// Reuse the last release's values (non-declarative).
    #[serde(default, skip_serializing_if = "is_false")]
    pub preserve_values: bool,
    /// Delete new resources when the upgrade fails.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cleanup_on_fail: bool,
    /// CRD policy; `Create` when unset, as Flux does (its API documentation says `Skip`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crds: Option<CrdsPolicy>,
    /// Server-side apply mode; defaults to `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyMode>,
    /// What a chart name change does; defaults to `Reinstall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chart_name_change_strategy: Option<ChartNameChangeStrategy>,
}

impl Upgrade {
    /// The CRD policy: `Create` when unset, as Flux's code does (its docs say `Skip`).
    pub fn crds(&self) -> CrdsPolicy {
        self.crds.unwrap_or(CrdsPolicy::Create)
    }

    /// The remediation configuration, defaulted.
    pub fn remediation(&self) -> UpgradeRemediation {
        self.remediation.clone().unwrap_or_default()
    }

    /// The retry interval when the `RetryOnFailure` strategy is active.
    pub fn retry(&self) -> Option<GoDuration> {
        retry_of(self.strategy.as_ref())
    }

    /// The server-side apply mode, `auto` when unset.
    pub fn server_side_apply(&self) -> ServerSideApplyMode {
        self.server_side_apply.unwrap_or(ServerSideApplyMode::Auto)
    }

    /// The chart name change strategy, `Reinstall` when unset.
    pub fn chart_name_change_strategy(&self) -> ChartNameChangeStrategy {
        self.chart_name_change_strategy
            .unwrap_or(ChartNameChangeStrategy::Reinstall)
    }
}

/// Upgrade remediation.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct UpgradeRemediation {
    /// Retries before giving up; negative is unlimited; defaults to 0.
    #[serde(default, skip_serializing_if = "crate::spec::is_zero_i64")]
    pub retries: i64,
    /// Do not remediate test failures; defaults to `spec.test.ignoreFailures`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ignore_test_failures: Option<bool>,
    /// Remediate the last failure too; defaults to `retries > 0`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remediate_last_failure: Option<bool>,
    /// `rollback` (default) or `uninstall`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strategy: Option<RemediationStrategy>,
}

impl UpgradeRemediation {
    /// `remediateLastFailure`, `retries > 0` when unset.
    pub fn remediate_last_failure(&self) -> bool {
        self.remediate_last_failure.unwrap_or(self.retries > 0)
    }

    /// The strategy, `rollback` when unset.
    pub fn strategy(&self) -> RemediationStrategy {
        self.strategy.unwrap_or(RemediationStrategy::Rollback)
    }
}

/// Server-side apply mode of upgrades and rollbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum ServerSideApplyMode {
    /// Always server-side apply.
    Enabled,
    /// Always client-side apply.
    Disabled,
    /// Follow the apply method of the release being replaced.
    Auto,
}

impl ServerSideApplyMode {
    /// Whether to server-side apply, as Helm 4's `getUpgradeServerSideValue` decides (and
    /// Flux, which resolves it itself to force conflicts): `auto` follows the apply method
    /// recorded in the release the action starts from (the newest record for an upgrade,
    /// the target revision for a rollback): server-side only when it says `ssa`, so a
    /// record without one (Helm 3) is client-side.
    pub fn server_side(self, recorded_apply_method: &str) -> bool {
        match self {
            ServerSideApplyMode::Enabled => true,
            ServerSideApplyMode::Disabled => false,
            ServerSideApplyMode::Auto => recorded_apply_method == "ssa",
        }
    }
}

/// What happens when the chart's name changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum ChartNameChangeStrategy {
    /// Upgrade in place.
    InPlaceUpdate,
    /// Uninstall, then install (default).
    Reinstall,
}

/// Test configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Test {
    /// Run tests after install and upgrade.
    #[serde(default, skip_serializing_if = "is_false")]
    pub enable: bool,
    /// Timeout; defaults to `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Test failures do not count as release failures.
    #[serde(default, skip_serializing_if = "is_false")]
    pub ignore_failures: bool,
    /// Tests to include or exclude.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filters: Option<Vec<TestFilter>>,
}

impl Test {
    /// True when `hook` is selected by the filters: excluded names are dropped and, if
    /// any include filter exists, only included names are kept.
    pub fn selects(&self, hook: &str) -> bool {
        let filters = self.filters.as_deref().unwrap_or_default();
        if filters.iter().any(|f| f.exclude && f.name == hook) {
            return false;
        }
        let mut includes = filters.iter().filter(|f| !f.exclude).peekable();
        if includes.peek().is_none() {
            return true;
        }
        filters.iter().any(|f| !f.exclude && f.name == hook)
    }
}

/// A test filter.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct TestFilter {
    /// Test hook name.
    #[cfg_attr(feature = "schema", schemars(length(min = 1, max = 253)))]
    pub name: String,
    /// Exclude rather than include.
    #[serde(default, skip_serializing_if = "is_false")]
    pub exclude: bool,
}

/// Rollback configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Rollback {
    /// Timeout; defaults to `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Do not wait for resources.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait: bool,
    /// Do not wait for Jobs.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait_for_jobs: bool,
    /// Do not run hooks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_hooks: bool,
    /// Deprecated, no effect under Helm 4.
    #[serde(default, skip_serializing_if = "is_false")]
    pub recreate: bool,
    /// Replace resources instead of patching (client-side apply only).
    #[serde(default, skip_serializing_if = "is_false")]
    pub force: bool,
    /// Delete new resources when the rollback fails.
    #[serde(default, skip_serializing_if = "is_false")]
    pub cleanup_on_fail: bool,
    /// Server-side apply mode; defaults to `auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_side_apply: Option<ServerSideApplyMode>,
}

impl Rollback {
    /// The server-side apply mode, `auto` when unset.
    pub fn server_side_apply(&self) -> ServerSideApplyMode {
        self.server_side_apply.unwrap_or(ServerSideApplyMode::Auto)
    }
}

/// Uninstall configuration.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct Uninstall {
    /// Timeout; defaults to `spec.timeout`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<GoDuration>,
    /// Do not run hooks.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_hooks: bool,
    /// Keep the release history (status `uninstalled`).
    #[serde(default, skip_serializing_if = "is_false")]
    pub keep_history: bool,
    /// Do not wait for deletion.
    #[serde(default, skip_serializing_if = "is_false")]
    pub disable_wait: bool,
    /// Deletion propagation; defaults to `background`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(extend("default" = "background")))]
    pub deletion_propagation: Option<DeletionPropagation>,
}

impl Uninstall {
    /// The deletion propagation, `background` when unset.
    pub fn deletion_propagation(&self) -> DeletionPropagation {
        self.deletion_propagation
            .unwrap_or(DeletionPropagation::Background)
    }
}

/// Deletion propagation policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "lowercase")]
pub enum DeletionPropagation {
    /// Delete dependents in the background.
    Background,
    /// Delete dependents first.
    Foreground,
    /// Leave dependents.
    Orphan,
}

impl HelmReleaseSpec {
    /// `spec.timeout`, 5m when unset.
    pub fn timeout(&self) -> GoDuration {
        self.timeout.unwrap_or(DEFAULT_TIMEOUT)
    }

    /// `spec.maxHistory`, 5 when unset.
    pub fn max_history(&self) -> i32 {
        self.max_history.unwrap_or(DEFAULT_MAX_HISTORY)
    }

    /// `spec.persistentClient`, true when unset.
    pub fn persistent_client(&self) -> bool {
        self.persistent_client.unwrap_or(true)
    }

    /// `spec.install`, defaulted.
    pub fn install(&self) -> Install {
        self.install.clone().unwrap_or_default()
    }

    /// `spec.upgrade`, defaulted.
    pub fn upgrade(&self) -> Upgrade {
        self.upgrade.clone().unwrap_or_default()
    }

    /// `spec.test`, defaulted.
    pub fn test(&self) -> Test {
        self.test.clone().unwrap_or_default()
    }

    /// `spec.rollback`, defaulted.
    pub fn rollback(&self) -> Rollback {
        self.rollback.clone().unwrap_or_default()
    }

    /// `spec.uninstall`, defaulted.
    pub fn uninstall(&self) -> Uninstall {
        self.uninstall.clone().unwrap_or_default()
    }

    /// `spec.driftDetection`, defaulted.
    pub fn drift_detection(&self) -> DriftDetection {
        self.drift_detection.clone().unwrap_or_default()
    }

    /// The post render strategy, `combined` when unset (Helm 4 default).
    pub fn post_render_strategy(&self) -> PostRenderStrategy {
        self.post_render_strategy
            .unwrap_or(PostRenderStrategy::Combined)
    }

    /// The inline values as an object (empty when unset).
    pub fn values_object(&self) -> serde_json::Map<String, Value> {
        match &self.values {
            Some(Value::Object(m)) => m.clone(),
            _ => serde_json::Map::new(),
        }
    }
}

/// One invalid field of a HelmRelease.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct FieldError {
    /// JSON path of the field, e.g. `spec.valuesFrom[1].valuesKey`.
    pub field: String,
    /// What is wrong with it.
    pub message: String,
}

impl FieldError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Why a HelmRelease could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    /// The document does not decode into the API types.
    #[error("HelmRelease {object}: {field}: {message}")]
    Decode {
        /// `namespace/name` of the object, as far as it could be read.
        object: String,
        /// JSON path of the offending field (`.` for the document itself).
        field: String,
        /// The decoder's message.
        message: String,
    },
    /// The document decodes but breaks the API's validation rules.
    #[error("HelmRelease {object}: {}", join_errors(.errors))]
    Invalid {
        /// `namespace/name` of the object.
        object: String,
        /// Every invalid field.
        errors: Vec<FieldError>,
    },
}

fn join_errors(errors: &[FieldError]) -> String {
    errors
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn decode_error<E: fmt::Display>(object: String, err: serde_path_to_error::Error<E>) -> SpecError {
    let field = err.path().to_string();
    SpecError::Decode {
        object,
        field,
        message: err.inner().to_string(),
    }
}

/// `namespace/name` read from an undecoded document, for error messages.
fn object_key(doc: &Value) -> String {
    let meta = &doc["metadata"];
    format!(
        "{}/{}",
        meta["namespace"].as_str().unwrap_or_default(),
        meta["name"].as_str().unwrap_or_default()
    )
}

impl HelmRelease {
    /// Decodes and validates a HelmRelease from JSON text.
    pub fn from_json_str(s: &str) -> Result<Self, SpecError> {
        let doc: Value = serde_json::from_str(s).map_err(|e| SpecError::Decode {
            object: "/".into(),
            field: ".".into(),
            message: e.to_string(),
        })?;
        Self::from_value(doc)
    }

    /// Decodes and validates a HelmRelease from a JSON value (e.g. parsed from YAML).
    pub fn from_value(value: Value) -> Result<Self, SpecError> {
        let object = object_key(&value);
        let hr: HelmRelease =
            serde_path_to_error::deserialize(value).map_err(|e| decode_error(object, e))?;
        hr.validate()?;
        Ok(hr)
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// `metadata.generation`, 0 when unset.
    pub fn generation(&self) -> i64 {
        self.metadata.generation.unwrap_or(0)
    }

    /// The Helm release name (Flux rule, shortened).
    pub fn release_name(&self) -> Result<ReleaseName, ids::IdError> {
        ReleaseName::for_helm_release(
            self.spec.release_name.as_deref(),
            self.spec.target_namespace.as_deref(),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// The namespace the release is made in.
    pub fn release_namespace(&self) -> &str {
        self.spec
            .target_namespace
            .as_deref()
            .or(self.metadata.namespace.as_deref())
            .unwrap_or_default()
    }

    /// The namespace of the Helm storage.
    pub fn storage_namespace(&self) -> &str {
        self.spec
            .storage_namespace
            .as_deref()
            .or(self.metadata.namespace.as_deref())
            .unwrap_or_default()
    }

    /// Name of the HelmChart made from `spec.chart`: `<namespace>-<name>`.
    pub fn helm_chart_name(&self) -> String {
        format!(
            "{}-{}",
            self.metadata.namespace.as_deref().unwrap_or_default(),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// Flux's built-in `dependsOn` readiness: the dependency observed its current
    /// generation and is `Ready=True`.
    pub fn is_ready(&self) -> bool {
        use crate::meta::Conditions as _;
        self.status.as_ref().is_some_and(|st| {
            st.observed_generation == self.generation()
                && st.conditions.is_true(crate::meta::condition::READY)
        })
    }

    /// Runs the checks of the CRD schema and CEL rules, naming every bad field.
    pub fn validate(&self) -> Result<(), SpecError> {
        let mut errors = Vec::new();
        match self.metadata.name.as_deref() {
            None => errors.push(FieldError::new("metadata.name", "required")),
            Some(n) => {
                if let Err(e) = ids::check_dns1123_subdomain("object name", n) {
                    errors.push(FieldError::new("metadata.name", e.to_string()));
                }
            }
        }
        if let Some(ns) = self.metadata.namespace.as_deref()
            && let Err(e) = ids::check_dns1123_label("namespace", ns)
        {
            errors.push(FieldError::new("metadata.namespace", e.to_string()));
        }
        self.spec.validate_into(&mut errors);
        if errors.is_empty()
            && self.metadata.name.is_some()
            && let Err(e) = self.release_name()
        {
            errors.push(FieldError::new(
                if self.spec.release_name.is_some() {
                    "spec.releaseName"
                } else {
                    "metadata.name"
                },
                e.to_string(),
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(SpecError::Invalid {
                object: self.key(),
                errors,
            })
        }
    }
}

fn check_len(errors: &mut Vec<FieldError>, field: &str, value: &str, min: usize, max: usize) {
    if value.len() < min {
        errors.push(FieldError::new(
            field,
            format!("must be at least {min} character(s)"),
        ));
    } else if value.len() > max {
        errors.push(FieldError::new(
            field,
            format!("must be no more than {max} characters"),
        ));
    }
}

fn matches_charset(value: &str, extra: &[u8]) -> bool {
    value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || extra.contains(&b))
}

/// `^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$`
fn is_valid_target_path(p: &str) -> bool {
    let b = p.as_bytes();
    if b.is_empty() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_alphanumeric() || b"_-.\\/".contains(&c) {
            i += 1;
        } else if c == b'[' {
            let start = i + 1;
            let mut j = start;
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            if j == start || j - start > 5 || j >= b.len() || b[j] != b']' {
                return false;
            }
            i = j + 1;
        } else {
            return false;
        }
    }
    true
}

impl HelmReleaseSpec {
    /// Validates the spec alone; field paths start with `spec.`.
    pub fn validate(&self) -> Result<(), Vec<FieldError>> {
        let mut errors = Vec::new();
        self.validate_into(&mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors)
        }
    }

    fn validate_into(&self, errors: &mut Vec<FieldError>) {
        match (&self.chart, &self.chart_ref) {
            (Some(_), Some(_)) | (None, None) => errors.push(FieldError::new(
                "spec",
                "either chart or chartRef must be set",
            )),
            _ => {}
        }
        if let Some(chart) = &self.chart {
            check_len(errors, "spec.chart.spec.chart", &chart.spec.chart, 1, 2048);
            check_len(
                errors,
                "spec.chart.spec.sourceRef.name",
                &chart.spec.source_ref.name,
                1,
                253,
            );
            if let Some(ns) = &chart.spec.source_ref.namespace {
                check_len(errors, "spec.chart.spec.sourceRef.namespace", ns, 1, 63);
            }
        }
        if let Some(r) = &self.chart_ref {
            check_len(errors, "spec.chartRef.name", &r.name, 1, 253);
            if let Some(ns) = &r.namespace {
                check_len(errors, "spec.chartRef.namespace", ns, 1, 63);
            }
        }
        if let Some(k) = &self.kube_config {
            match (&k.secret_ref, &k.config_map_ref) {
                (Some(_), Some(_)) => errors.push(FieldError::new(
                    "spec.kubeConfig",
                    "secretRef and configMapRef are mutually exclusive",
                )),
                (None, None) => errors.push(FieldError::new(
                    "spec.kubeConfig",
                    "one of secretRef or configMapRef must be set",
                )),
                _ => {}
            }
            if self.cluster_ref.is_some() {
                errors.push(FieldError::new(
                    "spec.clusterRef",
                    "clusterRef and kubeConfig are mutually exclusive",
                ));
            }
        }
        if let Some(c) = &self.cluster_ref
            && let Err(e) = ids::check_dns1123_subdomain("cluster name", &c.name)
        {
            errors.push(FieldError::new("spec.clusterRef.name", e.to_string()));
        }
        if let Some(r) = &self.release_name {
            check_len(errors, "spec.releaseName", r, 1, 53);
        }
        for (field, ns) in [
            ("spec.targetNamespace", &self.target_namespace),
            ("spec.storageNamespace", &self.storage_namespace),
        ] {
            if let Some(ns) = ns
                && let Err(e) = ids::check_dns1123_label("namespace", ns)
            {
                errors.push(FieldError::new(field, e.to_string()));
            }
        }
        if let Some(sa) = &self.service_account_name {
            check_len(errors, "spec.serviceAccountName", sa, 1, 253);
        }
        for (i, d) in self.depends_on.iter().enumerate() {
            if d.name.is_empty() {
                errors.push(FieldError::new(
                    format!("spec.dependsOn[{i}].name"),
                    "required",
                ));
            }
        }
        for (i, v) in self.values_from.iter().enumerate() {
            let f = |s: &str| format!("spec.valuesFrom[{i}].{s}");
            check_len(errors, &f("name"), &v.name, 1, 253);
            if let Some(k) = &v.values_key {
                check_len(errors, &f("valuesKey"), k, 1, 253);
                if !matches_charset(k, b"-._") {
                    errors.push(FieldError::new(
                        f("valuesKey"),
                        "must match ^[\\-._a-zA-Z0-9]+$",
                    ));
                }
            }
            if let Some(p) = &v.target_path {
                check_len(errors, &f("targetPath"), p, 1, 250);
                if !p.is_empty() && !is_valid_target_path(p) {
                    errors.push(FieldError::new(
                        f("targetPath"),
                        "must match ^([a-zA-Z0-9_\\-.\\\\\\/]|\\[[0-9]{1,5}\\])+$",
                    ));
                }
            }
        }
        match &self.values {
            None | Some(Value::Object(_)) | Some(Value::Null) => {}
            Some(_) => errors.push(FieldError::new("spec.values", "must be an object")),
        }
        for (field, strategy) in [
            (
                "spec.install.strategy",
                self.install.as_ref().and_then(|i| i.strategy.as_ref()),
            ),
            (
                "spec.upgrade.strategy",
                self.upgrade.as_ref().and_then(|u| u.strategy.as_ref()),
            ),
        ] {
            if let Some(s) = strategy
                && s.retry_interval.is_some()
                && s.name != ActionStrategyName::RetryOnFailure
            {
                errors.push(FieldError::new(
                    format!("{field}.retryInterval"),
                    "can only be set when .name is 'RetryOnFailure'",
                ));
            }
        }
        if let Some(t) = &self.test {
            for (i, filter) in t.filters.iter().flatten().enumerate() {
                check_len(
                    errors,
                    &format!("spec.test.filters[{i}].name"),
                    &filter.name,
                    1,
                    253,
                );
            }
        }
        if let Some(d) = &self.drift_detection {
            for (i, rule) in d.ignore.iter().enumerate() {
                for (j, p) in rule.paths.iter().enumerate() {
                    if !p.is_empty() && !p.starts_with('/') {
                        errors.push(FieldError::new(
                            format!("spec.driftDetection.ignore[{i}].paths[{j}]"),
                            "must be a JSON pointer (RFC 6901): empty or starting with '/'",
                        ));
                    }
                }
            }
        }
        if let Some(prs) = &self.post_renderers {
            for (i, pr) in prs.iter().enumerate() {
                for (j, im) in pr
                    .kustomize
                    .iter()
                    .flat_map(|k| k.images.iter())
                    .enumerate()
                {
                    if im.name.is_empty() {
                        errors.push(FieldError::new(
                            format!("spec.postRenderers[{i}].kustomize.images[{j}].name"),
                            "required",
                        ));
                    }
                }
            }
        }
        for (i, h) in self.health_check_exprs.iter().enumerate() {
            if h.current.is_empty() {
                errors.push(FieldError::new(
                    format!("spec.healthCheckExprs[{i}].current"),
                    "required",
                ));
            }
        }
    }
}

#[cfg(test)]
mod server_side_apply_tests {
    use super::*;

    #[test]
    fn server_side_apply_modes_resolve_against_the_recorded_apply_method_as_helm_4() {
        use ServerSideApplyMode::{Auto, Disabled, Enabled};
        // (mode, recorded apply_method, server-side?) from Helm 4's getUpgradeServerSideValue.
        let table = [
            (Auto, "ssa", true),
            (Auto, "csa", false),
            (Auto, "", false),
            (Enabled, "csa", true),
            (Enabled, "", true),
            (Disabled, "ssa", false),
            (Disabled, "csa", false),
        ];
        for (mode, recorded, want) in table {
            assert_eq!(mode.server_side(recorded), want, "{mode:?} on {recorded:?}");
        }
        assert!(Install::default().server_side_apply());
        assert_eq!(Rollback::default().server_side_apply(), Auto);
    }
}
