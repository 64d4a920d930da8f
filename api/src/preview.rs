//! `HelmReleasePreview` (`helm.flotilla.dev/v1alpha1`, namespaced): "what would the next
//! reconcile of this HelmRelease do on its cluster?", asked by creating one
//! (`flotilla diff hr` does) and answered in its status by the hub's preview controller.
//!
//! `spec.helmReleaseName` names a HelmRelease of the same namespace; `spec.spec`, when set,
//! is a whole HelmRelease spec previewed instead of the live one (a change checked before it
//! is applied). The status holds `Ready` (True once the answer is in; False with a sentence
//! otherwise, e.g. an agent that does not support previews) and the
//! [`flotilla_core::preview::ReleaseDiff`] (bounded: 256 KiB of diff text). Previews are
//! deleted by the hub 10 minutes after they were created.

use flotilla_core::meta::Condition;
use flotilla_core::preview::ReleaseDiff;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What to preview.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "helm.flotilla.dev",
    version = "v1alpha1",
    kind = "HelmReleasePreview",
    namespaced,
    status = "HelmReleasePreviewStatus",
    derive = "PartialEq",
    shortname = "hrp",
    category = "flotilla",
    printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
    printcolumn = r#"{"name": "Release", "type": "string", "jsonPath": ".spec.helmReleaseName"}"#,
    printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name": "Status", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].message"}"#,
    doc = "A preview of what the next reconcile of a HelmRelease would do on its cluster."
)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleasePreviewSpec {
    /// The HelmRelease (in this namespace) to preview.
    #[schemars(length(min = 1, max = 253))]
    pub helm_release_name: String,
    /// A whole HelmRelease spec to preview instead of the live one's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form_object")]
    pub spec: Option<serde_json::Value>,
}

fn free_form_object(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A HelmRelease spec (helm.flotilla.dev/v1), previewed instead of the live one's.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// The answer.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HelmReleasePreviewStatus {
    /// `Ready`: True once the diff is in, False with a sentence when there is none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The target the preview ran on (`cluster edge-1`, `the hub's cluster`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// What the next reconcile would do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub diff: Option<ReleaseDiff>,
}
