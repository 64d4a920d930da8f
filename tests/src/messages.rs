//! The message scan (issue 35): every status condition message of the hub's objects and
//! every Event of a cluster must be a sentence, never a Rust `Debug` rendering. End-to-end
//! tests call [`scan`] on their hub cluster at their end, when their failures and refusals
//! have been written.

use flotilla_api::HelmRelease;
use flotilla_api::fleet::ManagedCluster;
use flotilla_api::set::HelmReleaseSet;
use flotilla_api::source::{HelmChart, HelmRepository, OCIRepository};
use k8s_openapi::api::core::v1::Event;
use kube::Resource;
use kube::api::{Api, ApiResource, DynamicObject, ListParams};

/// The `Debug` shape `text` has, if any: `Some(`, a bare `None`, `Status {`, `ApiError`, a
/// struct dump (`Foo { a: `), or a cause said twice in a row (`x: x`).
pub fn debug_shape(text: &str) -> Option<&'static str> {
    if text.contains("Some(") {
        return Some("`Some(`");
    }
    if text.contains("Status {") {
        return Some("`Status {`");
    }
    if text.contains("ApiError") {
        return Some("`ApiError`");
    }
    if bare_none(text) {
        return Some("a bare `None`");
    }
    if struct_dump(text) {
        return Some("a struct dump `Name { field: `");
    }
    if doubled_cause(text) {
        return Some("a cause said twice (`x: x`)");
    }
    None
}

/// `None` as a word followed by what a `Debug` puts after a value (`,`, `)`, `}`, `]`, the end).
fn bare_none(text: &str) -> bool {
    text.match_indices("None").any(|(i, _)| {
        let before = text[..i].chars().next_back();
        let after = text[i + 4..].chars().next();
        !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
            && matches!(after, None | Some(',' | ')' | '}' | ']'))
    })
}

/// `Name { field: ` (a capitalised word, ` { `, a lower-case identifier, `: `).
fn struct_dump(text: &str) -> bool {
    text.match_indices(" { ").any(|(i, _)| {
        let name = text[..i]
            .rsplit(|c: char| !(c.is_alphanumeric() || c == '_'))
            .next()
            .unwrap_or("");
        let field: String = text[i + 3..]
            .chars()
            .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        name.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && !field.is_empty()
            && text[i + 3 + field.len()..].starts_with(": ")
    })
}

/// Two neighbouring `: `-separated parts equal (a cause printed by its error and again as
/// the source).
fn doubled_cause(text: &str) -> bool {
    let parts: Vec<&str> = text.split(": ").map(str::trim).collect();
    parts.windows(2).any(|w| w[0].len() >= 8 && w[0] == w[1])
}

/// One message of the scan that has a `Debug` shape.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `HelmRelease default/web condition Ready`, `Event default/web.1234 (HelmRelease web)`.
    pub object: String,
    /// The message.
    pub message: String,
    /// What shape it has.
    pub shape: &'static str,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} in {:?}", self.object, self.shape, self.message)
    }
}

/// Every condition message of HelmReleases, HelmReleaseSets, ManagedClusters, HelmCharts,
/// HelmRepositories and OCIRepositories, and every Event's message, in all namespaces of
/// the cluster of `client`, with a `Debug` shape. A kind whose CRD is not installed is
/// skipped.
pub async fn findings(client: &kube::Client) -> anyhow::Result<Vec<Finding>> {
    let mut found = Vec::new();
    for resource in [
        ApiResource::erase::<HelmRelease>(&()),
        ApiResource::erase::<HelmReleaseSet>(&()),
        ApiResource::erase::<ManagedCluster>(&()),
        ApiResource::erase::<HelmChart>(&()),
        ApiResource::erase::<HelmRepository>(&()),
        ApiResource::erase::<OCIRepository>(&()),
    ] {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let list = match api.list(&ListParams::default()).await {
            Ok(list) => list,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => anyhow::bail!("listing {}: {e}", resource.plural),
        };
        for object in list.items {
            let name = match object.metadata.namespace.as_deref() {
                Some(ns) => format!("{ns}/{}", object.metadata.name.as_deref().unwrap_or("")),
                None => object.metadata.name.clone().unwrap_or_default(),
            };
            let conditions = object.data["status"]["conditions"].as_array();
            for c in conditions.into_iter().flatten() {
                let message = c["message"].as_str().unwrap_or("");
                if let Some(shape) = debug_shape(message) {
                    found.push(Finding {
                        object: format!(
                            "{} {name} condition {}",
                            resource.kind,
                            c["type"].as_str().unwrap_or("?")
                        ),
                        message: message.to_owned(),
                        shape,
                    });
                }
            }
        }
    }
    let events: Api<Event> = Api::all(client.clone());
    for event in events.list(&ListParams::default()).await?.items {
        let message = event.message.as_deref().unwrap_or("");
        if let Some(shape) = debug_shape(message) {
            let involved = &event.involved_object;
            found.push(Finding {
                object: format!(
                    "Event {}/{} ({} {})",
                    event.meta().namespace.as_deref().unwrap_or(""),
                    event.meta().name.as_deref().unwrap_or(""),
                    involved.kind.as_deref().unwrap_or("?"),
                    involved.name.as_deref().unwrap_or("?"),
                ),
                message: message.to_owned(),
                shape,
            });
        }
    }
    Ok(found)
}

/// Fails naming each object and message with a `Debug` shape ([`findings`]).
pub async fn scan(client: &kube::Client) -> anyhow::Result<()> {
    let found = findings(client).await?;
    if found.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = found.iter().map(|f| format!("  {f}")).collect();
    anyhow::bail!(
        "{} message(s) with a Debug shape:\n{}",
        found.len(),
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_shapes_are_found_and_sentences_pass() {
        let table: &[(&str, Option<&str>)] = &[
            (
                "starting the in-process agent of kubeConfig Secret tenant-x/kc1: ApiError: : Failed to parse error data (Status { status: Some(Failure), code: 404, message: \"\", metadata: None, reason: \"Failed to parse error data\", details: None })",
                Some("`Some(`"),
            ),
            ("the value was Some(3)", Some("`Some(`")),
            ("reading Status { code: 404 }", Some("`Status {`")),
            ("ApiError: forbidden", Some("`ApiError`")),
            ("field is None", Some("a bare `None`")),
            ("(None, 3)", Some("a bare `None`")),
            (
                "bad plan: Plan { revision: 3, name: \"x\" }",
                Some("a struct dump `Name { field: `"),
            ),
            (
                "connecting: connection refused: connection refused",
                Some("a cause said twice (`x: x`)"),
            ),
            // Sentences.
            (
                "getting Namespace flotilla-system: namespaces \"flotilla-system\" not found (HTTP 404)",
                None,
            ),
            ("None of the 3 clusters is selected", None),
            ("Nonesuch failed", None),
            ("values {{ .Values.x }}: template: x", None),
            ("a map { a: 1 } in a sentence", None),
            (
                "Helm install succeeded for release default/web.v1 with chart podinfo@6.5.3",
                None,
            ),
            ("upgrade: upgrade failed", None),
        ];
        for (text, want) in table {
            assert_eq!(debug_shape(text), *want, "{text}");
        }
    }
}
