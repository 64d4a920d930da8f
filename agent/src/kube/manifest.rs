//! Manifest text to objects: Helm's document splitting, YAML to JSON as `sigs.k8s.io/yaml`
//! does it, and Helm's kind orders.

// Errors name their object (and template) for people; they are built on the failure path
// only, so their size does not matter.
#![allow(clippy::result_large_err)]

use flotilla_chart::render::manifest::{INSTALL_ORDER, UNINSTALL_ORDER, split_manifest_slices};
use flotilla_yaml::Value as YamlValue;
use kube::api::{DynamicObject, GroupVersionKind};
use kube::core::TypeMeta;
use serde_json::Value as JsonValue;

use super::ObjectRef;

/// Errors turning manifest text into objects; each names the document and its template.
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    /// The document is not valid YAML.
    #[error("YAML parse error on {source_name}")]
    Yaml {
        /// The template (or `document N`).
        source_name: String,
        /// The parser's error.
        #[source]
        source: flotilla_yaml::Error,
    },
    /// The document is not a mapping.
    #[error("{source_name}: a Kubernetes object must be a mapping, not {found}")]
    NotAnObject {
        /// The template (or `document N`).
        source_name: String,
        /// What the document is.
        found: &'static str,
    },
    /// `apiVersion` or `kind` is missing or not a string.
    #[error("{source_name}: object {name:?} has no {field} set")]
    MissingType {
        /// The template (or `document N`).
        source_name: String,
        /// The object's name, if any.
        name: String,
        /// `apiVersion` or `kind`.
        field: &'static str,
    },
    /// The document does not decode as a Kubernetes object (e.g. a label that is a map).
    #[error("{object} (from {source_name}): invalid object")]
    Decode {
        /// The object.
        object: ObjectRef,
        /// The template (or `document N`).
        source_name: String,
        /// The decoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// A value YAML allows but JSON does not (infinite float, odd map key).
    #[error("{source_name}: cannot convert YAML to JSON: {reason}")]
    NotJson {
        /// The template (or `document N`).
        source_name: String,
        /// What is wrong.
        reason: String,
    },
}

/// One document of a manifest, before parsing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Document<'a> {
    /// The path from the document's `# Source:` comment, if it has one.
    pub source: Option<&'a str>,
    /// The document text (trimmed).
    pub text: &'a str,
}

/// One object of a manifest: the decoded object, its GVK and the template it came from.
#[derive(Clone, Debug)]
pub struct ManifestObject {
    /// The template path from `# Source:`, when the manifest carries one.
    pub source: Option<String>,
    /// The object's group, version and kind.
    pub gvk: GroupVersionKind,
    /// The object, `types` set; namespace as written (defaulted later, by
    /// [`ClusterApi::resolve`](super::ClusterApi::resolve)).
    pub object: DynamicObject,
}

impl ManifestObject {
    /// The object's identity for messages.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef::from_object(&self.object)
    }

    /// The template the object came from, or `""`.
    pub fn source_name(&self) -> &str {
        self.source.as_deref().unwrap_or("")
    }
}

/// Splits a manifest into documents with the chart crate's `SplitManifests`
/// ([`split_manifest_slices`]), the one splitter rendering also uses: documents split on
/// `---` lines, each trimmed, empty ones dropped.
pub fn split_documents(manifest: &str) -> Vec<Document<'_>> {
    split_manifest_slices(manifest)
        .into_iter()
        .filter(|text| !text.is_empty())
        .map(|text| Document {
            source: source_comment(text),
            text,
        })
        .collect()
}

/// The path of a leading `# Source: <path>` comment.
fn source_comment(doc: &str) -> Option<&str> {
    for line in doc.lines() {
        let line = line.trim();
        if let Some(path) = line.strip_prefix("# Source:") {
            return Some(path.trim());
        }
        if !line.starts_with('#') && !line.is_empty() {
            return None;
        }
    }
    None
}

/// Parses a manifest into objects, in document order. Documents that are empty once comments
/// are removed are skipped, as `kubectl` and Helm skip them.
pub fn parse_manifest(manifest: &str) -> Result<Vec<ManifestObject>, ManifestError> {
    let mut objects = Vec::new();
    for (i, doc) in split_documents(manifest).into_iter().enumerate() {
        let source_name = doc
            .source
            .map_or_else(|| format!("document {}", i + 1), str::to_owned);
        if let Some(obj) = parse_document(doc.text, doc.source, &source_name)? {
            objects.push(obj);
        }
    }
    Ok(objects)
}

/// Parses one document; `None` when it holds no object.
pub fn parse_document(
    text: &str,
    source: Option<&str>,
    source_name: &str,
) -> Result<Option<ManifestObject>, ManifestError> {
    let yaml = flotilla_yaml::from_str(text).map_err(|e| ManifestError::Yaml {
        source_name: source_name.to_owned(),
        source: e,
    })?;
    let json = yaml_to_json(yaml).map_err(|reason| ManifestError::NotJson {
        source_name: source_name.to_owned(),
        reason,
    })?;
    let map = match json {
        JsonValue::Null => return Ok(None),
        JsonValue::Object(map) => map,
        other => {
            return Err(ManifestError::NotAnObject {
                source_name: source_name.to_owned(),
                found: json_kind(&other),
            });
        }
    };
    let name = map
        .get("metadata")
        .and_then(|m| m.get("name"))
        .and_then(JsonValue::as_str)
        .unwrap_or_default()
        .to_owned();
    let string_field = |field: &'static str| match map.get(field).and_then(JsonValue::as_str) {
        Some(s) if !s.is_empty() => Ok(s.to_owned()),
        _ => Err(ManifestError::MissingType {
            source_name: source_name.to_owned(),
            name: name.clone(),
            field,
        }),
    };
    let api_version = string_field("apiVersion")?;
    let kind = string_field("kind")?;
    let types = TypeMeta {
        api_version: api_version.clone(),
        kind: kind.clone(),
    };
    let gvk = GroupVersionKind::try_from(&types).map_err(|_| ManifestError::MissingType {
        source_name: source_name.to_owned(),
        name: name.clone(),
        field: "apiVersion",
    })?;
    let namespace = map
        .get("metadata")
        .and_then(|m| m.get("namespace"))
        .and_then(JsonValue::as_str)
        .map(str::to_owned);
    let object: DynamicObject =
        serde_json::from_value(JsonValue::Object(map)).map_err(|e| ManifestError::Decode {
            object: ObjectRef {
                api_version,
                kind,
                namespace,
                name,
            },
            source_name: source_name.to_owned(),
            source: e,
        })?;
    Ok(Some(ManifestObject {
        source: source.map(str::to_owned),
        gvk,
        object,
    }))
}

fn json_kind(v: &JsonValue) -> &'static str {
    match v {
        JsonValue::Null => "null",
        JsonValue::Bool(_) => "a boolean",
        JsonValue::Number(_) => "a number",
        JsonValue::String(_) => "a string",
        JsonValue::Array(_) => "a list",
        JsonValue::Object(_) => "a mapping",
    }
}

/// YAML (as go-yaml v2 decodes it) to JSON, as `sigs.k8s.io/yaml.YAMLToJSON` followed by the
/// apimachinery JSON decoder: integers stay integers, integral floats become integers as Go
/// prints them, map keys become strings.
///
/// (`flotilla_yaml::sigs::yaml_to_json` turns every number into a float64, which loses
/// integers above 2^53, so the conversion is done here from go-yaml's own values.)
pub fn yaml_to_json(v: YamlValue) -> Result<JsonValue, String> {
    Ok(match v {
        YamlValue::Null => JsonValue::Null,
        YamlValue::Bool(b) => JsonValue::Bool(b),
        YamlValue::Int(i) => JsonValue::from(i),
        YamlValue::Uint(u) => JsonValue::from(u),
        YamlValue::Float(f) => float_to_json(f)?,
        YamlValue::String(s) => JsonValue::String(s),
        YamlValue::Bytes(b) => JsonValue::String(String::from_utf8_lossy(&b).into_owned()),
        YamlValue::Seq(items) => JsonValue::Array(
            items
                .into_iter()
                .map(yaml_to_json)
                .collect::<Result<_, _>>()?,
        ),
        YamlValue::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let key = match k {
                    YamlValue::String(s) => s,
                    YamlValue::Bytes(b) => String::from_utf8_lossy(&b).into_owned(),
                    YamlValue::Int(i) => i.to_string(),
                    YamlValue::Uint(u) => u.to_string(),
                    YamlValue::Float(f) => flotilla_yaml::go_format_float_g(f, true),
                    YamlValue::Bool(b) => b.to_string(),
                    YamlValue::Null => "null".to_owned(),
                    YamlValue::Seq(_) | YamlValue::Map(_) => {
                        return Err("a map key is a list or a map".to_owned());
                    }
                };
                out.insert(key, yaml_to_json(v)?);
            }
            JsonValue::Object(out)
        }
    })
}

fn float_to_json(f: f64) -> Result<JsonValue, String> {
    if !f.is_finite() {
        return Err(format!("unsupported value {f}"));
    }
    // Go's encoder prints integral floats below 1e21 without a fraction; the apimachinery
    // decoder then reads them back as int64.
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    if f.fract() == 0.0 && f.abs() < 1e21 && f >= i64::MIN as f64 && f < i64::MAX as f64 {
        return Ok(JsonValue::from(f as i64));
    }
    serde_json::Number::from_f64(f)
        .map(JsonValue::Number)
        .ok_or_else(|| format!("unsupported value {f}"))
}

/// Which of Helm's kind orders to sort by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KindOrder {
    /// `InstallOrder`: namespaces and CRDs first, webhooks last.
    Install,
    /// `UninstallOrder`: webhooks and workloads first, namespaces last.
    Uninstall,
}

impl KindOrder {
    fn list(self) -> &'static [&'static str] {
        match self {
            KindOrder::Install => INSTALL_ORDER,
            KindOrder::Uninstall => UNINSTALL_ORDER,
        }
    }

    /// Helm's `lessByKind` comparison: known kinds by their place in the list, unknown kinds
    /// after them in alphabetical order.
    pub fn compare(self, a: &str, b: &str) -> std::cmp::Ordering {
        let list = self.list();
        let rank = |k: &str| list.iter().position(|x| *x == k);
        match (rank(a), rank(b)) {
            (Some(x), Some(y)) => x.cmp(&y),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => a.cmp(b),
        }
    }

    /// Stable-sorts items by kind; items of one kind keep their order.
    pub fn sort<T>(self, items: &mut [T], kind: impl Fn(&T) -> &str) {
        items.sort_by(|a, b| self.compare(kind(a), kind(b)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "---\n# Source: web/templates/svc.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\nspec:\n  ports:\n  - port: 80\n---\n# Source: web/templates/deploy.yaml\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: other\nspec:\n  replicas: 2\n";

    #[test]
    fn a_release_manifest_splits_into_documents_with_their_sources() {
        let docs = split_documents(MANIFEST);
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].source, Some("web/templates/svc.yaml"));
        assert_eq!(docs[1].source, Some("web/templates/deploy.yaml"));
        assert!(docs[1].text.starts_with("# Source:"));
    }

    #[test]
    fn separators_with_trailing_text_and_empty_documents_split_as_helm_does() {
        // Helm v4.1's SplitManifests: a separator swallows the blank lines after it, so a
        // second `---` right after one stays in the next document.
        let docs = split_documents("a: 1\n---   \n\nb: 2\n---c: 3\n---\n---\nd: 4\n");
        let texts: Vec<_> = docs.iter().map(|d| d.text).collect();
        assert_eq!(texts, ["a: 1", "b: 2", "c: 3", "---\nd: 4"]);
    }

    #[test]
    fn objects_keep_their_gvk_namespace_and_integer_fields() {
        let objects = parse_manifest(MANIFEST).unwrap();
        assert_eq!(objects.len(), 2);
        assert_eq!(objects[0].gvk.kind, "Service");
        assert_eq!(objects[0].gvk.group, "");
        assert_eq!(objects[1].gvk.group, "apps");
        assert_eq!(
            objects[1].object.metadata.namespace.as_deref(),
            Some("other")
        );
        assert_eq!(
            objects[1].object.data["spec"]["replicas"],
            serde_json::json!(2)
        );
        assert_eq!(objects[1].object_ref().to_string(), "Deployment other/web");
    }

    #[test]
    fn comment_only_documents_are_skipped() {
        let objects = parse_manifest("---\n# Source: x/templates/empty.yaml\n# nothing\n").unwrap();
        assert!(objects.is_empty());
    }

    #[test]
    fn a_document_without_a_kind_is_an_error_naming_its_template() {
        let err = parse_manifest(
            "---\n# Source: x/templates/a.yaml\napiVersion: v1\nmetadata:\n  name: a\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "x/templates/a.yaml: object \"a\" has no kind set"
        );
    }

    #[test]
    fn invalid_yaml_is_an_error_naming_its_template() {
        let err = parse_manifest("---\n# Source: x/templates/a.yaml\na: [\n").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("YAML parse error on x/templates/a.yaml")
        );
    }

    #[test]
    fn a_label_that_is_not_a_string_is_an_error_naming_the_object() {
        let err = parse_manifest(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  labels:\n    a: {b: c}\n",
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("ConfigMap c (from document 1)"),
            "{err}"
        );
    }

    #[test]
    fn yaml_numbers_become_json_numbers_as_go_prints_them() {
        let v = flotilla_yaml::from_str("a: 1.0\nb: 1.5\nc: 9007199254740993\nd: 1e21\n").unwrap();
        let j = yaml_to_json(v).unwrap();
        assert_eq!(j["a"], serde_json::json!(1));
        assert_eq!(j["b"], serde_json::json!(1.5));
        assert_eq!(j["c"], serde_json::json!(9_007_199_254_740_993_i64));
        assert!(j["d"].is_f64());
    }

    #[test]
    fn kinds_sort_in_helm_install_and_uninstall_order() {
        let mut kinds = vec![
            "Deployment",
            "Zeta",
            "Service",
            "Alpha",
            "Namespace",
            "CustomResourceDefinition",
        ];
        KindOrder::Install.sort(&mut kinds, |k| k);
        assert_eq!(
            kinds,
            [
                "Namespace",
                "CustomResourceDefinition",
                "Service",
                "Deployment",
                "Alpha",
                "Zeta"
            ]
        );
        KindOrder::Uninstall.sort(&mut kinds, |k| k);
        assert_eq!(
            kinds,
            [
                "Service",
                "Deployment",
                "CustomResourceDefinition",
                "Namespace",
                "Alpha",
                "Zeta"
            ]
        );
    }
}
