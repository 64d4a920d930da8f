//! What a release change would do to one cluster, object by object: the pure half of the
//! preview (`flotilla diff`, a HelmReleaseSet's `spec.preview`).
//!
//! The agent renders a plan exactly as an upgrade would and asks its API server for a
//! server-side dry-run apply of each object (so defaulting and mutating admission show);
//! this module gets, per object, the live object and the dry-run answer (either may be
//! missing) and says what would happen and how it would look:
//!
//! - [`normalize`]: the object without what the server changes on every write or owns
//!   (`status`, `metadata.managedFields`, `resourceVersion`, `generation`, `uid`,
//!   `creationTimestamp`, `selfLink`), and with every value of a Secret's `data` and
//!   `stringData` replaced by a keyed digest ([`Masker`]): a Secret's content never leaves
//!   the cluster, but a changed key still shows as changed.
//! - [`object_diff`]: [`Change`] (`Create`, `Update`, `Delete`, `Unchanged`) and a unified
//!   diff of the two normalised objects as YAML (keys sorted), 3 lines of context.
//! - [`values_diff`]: the paths of the values that change, never the values themselves
//!   (values may come from Secrets on the hub; the agent cannot tell which).
//! - [`Truncated`]: a text cut at a byte budget on a line boundary, with the SHA-256 of the
//!   whole, so two previews of the same change compare equal however large they are.
//!
//! Nothing here does IO.

use std::collections::BTreeSet;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest as _, Sha256};

/// Metadata fields the API server sets or changes on every write; a diff never shows them.
pub const DROPPED_METADATA: &[&str] = &[
    "managedFields",
    "resourceVersion",
    "generation",
    "uid",
    "creationTimestamp",
    "selfLink",
];

/// Lines of context around each change in a unified diff.
pub const CONTEXT_LINES: usize = 3;

/// What applying the change would do to one object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum Change {
    /// The object does not exist and would be created.
    Create,
    /// The object exists and would change.
    Update,
    /// The object exists, the release holds it, and the new manifest does not: deleted.
    Delete,
    /// The object exists and would stay as it is.
    Unchanged,
}

impl fmt::Display for Change {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Change::Create => "Create",
            Change::Update => "Update",
            Change::Delete => "Delete",
            Change::Unchanged => "Unchanged",
        })
    }
}

/// Which object: its kind and name, the namespace when it has one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectRef {
    /// `apps/v1`, `v1`, ...
    pub api_version: String,
    /// `Deployment`, ...
    pub kind: String,
    /// The namespace; `None` for a cluster-scoped object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The name.
    pub name: String,
}

impl ObjectRef {
    /// The reference of a Kubernetes object (`None` without a kind or a name).
    pub fn of(obj: &Value) -> Option<ObjectRef> {
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_owned);
        let meta = obj.get("metadata");
        Some(ObjectRef {
            api_version: text(obj.get("apiVersion")).unwrap_or_default(),
            kind: text(obj.get("kind"))?,
            namespace: text(meta.and_then(|m| m.get("namespace"))).filter(|n| !n.is_empty()),
            name: text(meta.and_then(|m| m.get("name")))?,
        })
    }
}

impl fmt::Display for ObjectRef {
    /// `Kind/namespace/name`, or `Kind/name` for a cluster-scoped object.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{}/{}/{}", self.kind, ns, self.name),
            None => write!(f, "{}/{}", self.kind, self.name),
        }
    }
}

/// One object of a preview.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "camelCase")]
pub struct ObjectDiff {
    /// Which object.
    pub object: ObjectRef,
    /// What would happen to it.
    pub change: Change,
    /// The unified diff of the normalised objects (`--- live`, `+++ desired`); empty when
    /// unchanged.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub diff: String,
}

/// Replaces Secret values by digests keyed with a secret of the cluster's agent, so a
/// reader of the preview sees which keys change but cannot test guesses of a value
/// against its digest (an unkeyed hash of a short password is a lookup away). The same
/// key is used for both sides of one preview, so equal values have equal digests.
#[derive(Clone)]
pub struct Masker {
    key: [u8; 32],
}

impl fmt::Debug for Masker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Masker(..)")
    }
}

impl Masker {
    /// A masker with `key` (random per agent process: digests are only compared within a
    /// preview).
    pub fn new(key: [u8; 32]) -> Masker {
        Masker { key }
    }

    /// `(secret value, N bytes, hmac-sha256:<first 16 hex digits>)` of `value`.
    pub fn mask(&self, field: &str, value: &str) -> String {
        let mac = hmac_sha256(&self.key, &[field.as_bytes(), b"\0", value.as_bytes()]);
        let hex: String = mac[..8].iter().map(|b| format!("{b:02x}")).collect();
        format!("(secret value, {} bytes, hmac-sha256:{hex})", value.len())
    }
}

/// HMAC-SHA256 of the concatenation of `parts`.
fn hmac_sha256(key: &[u8; 32], parts: &[&[u8]]) -> [u8; 32] {
    use hmac::Mac as _;
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        mac.update(p);
    }
    mac.finalize().into_bytes().into()
}

/// Whether `obj` is a core Secret.
fn is_secret(obj: &Map<String, Value>) -> bool {
    obj.get("kind").and_then(Value::as_str) == Some("Secret")
        && obj.get("apiVersion").and_then(Value::as_str) == Some("v1")
}

/// `obj` as a diff shows it: without [`DROPPED_METADATA`] and `status`, a Secret's values
/// masked. Anything that is not an object is returned as it is.
pub fn normalize(obj: &Value, masker: &Masker) -> Value {
    let Some(map) = obj.as_object() else {
        return obj.clone();
    };
    let mut out = map.clone();
    out.remove("status");
    if let Some(meta) = out.get_mut("metadata").and_then(Value::as_object_mut) {
        for field in DROPPED_METADATA {
            meta.remove(*field);
        }
    }
    if is_secret(map) {
        for field in ["data", "stringData"] {
            if let Some(values) = out.get_mut(field).and_then(Value::as_object_mut) {
                for (key, v) in values.iter_mut() {
                    let text = match &*v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    *v = Value::String(masker.mask(&format!("{field}.{key}"), &text));
                }
            }
        }
    }
    Value::Object(out)
}

/// The YAML a diff shows of `v`: block style, keys sorted.
pub fn to_yaml(v: &Value) -> String {
    flotilla_yaml::sigs::marshal(&json_to_yaml(v)).unwrap_or_else(|_| v.to_string())
}

fn json_to_yaml(v: &Value) -> flotilla_yaml::Value {
    use flotilla_yaml::Value as Y;
    match v {
        Value::Null => Y::Null,
        Value::Bool(b) => Y::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
            (Some(i), _, _) => Y::Int(i),
            (None, Some(u), _) => Y::Uint(u),
            (_, _, Some(f)) => Y::Float(f),
            _ => Y::String(n.to_string()),
        },
        Value::String(s) => Y::String(s.clone()),
        Value::Array(items) => Y::Seq(items.iter().map(json_to_yaml).collect()),
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            let mut m = flotilla_yaml::Mapping::new();
            for k in keys {
                m.insert(Y::String(k.clone()), json_to_yaml(&map[k]));
            }
            Y::Map(m)
        }
    }
}

/// What would happen to an object that is `live` on the cluster and `desired` by the
/// change (the server's dry-run answer, or the rendered object when there is none), and
/// the diff of the two normalised.
pub fn object_diff(
    object: ObjectRef,
    live: Option<&Value>,
    desired: Option<&Value>,
    masker: &Masker,
) -> ObjectDiff {
    let live = live.map(|v| normalize(v, masker));
    let desired = desired.map(|v| normalize(v, masker));
    let change = match (&live, &desired) {
        (None, Some(_)) => Change::Create,
        (Some(_), None) => Change::Delete,
        (Some(a), Some(b)) if a == b => Change::Unchanged,
        (Some(_), Some(_)) => Change::Update,
        (None, None) => Change::Unchanged,
    };
    let diff = if change == Change::Unchanged {
        String::new()
    } else {
        let text = |v: &Option<Value>| v.as_ref().map(to_yaml).unwrap_or_default();
        unified(&text(&live), &text(&desired), "live", "desired")
    };
    ObjectDiff {
        object,
        change,
        diff,
    }
}

/// A unified diff of `old` and `new` by lines, with [`CONTEXT_LINES`] of context, under
/// `--- OLD_LABEL` and `+++ NEW_LABEL` headers; empty when they are equal.
pub fn unified(old: &str, new: &str, old_label: &str, new_label: &str) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(old_label, new_label)
        .to_string()
}

/// How a value path changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub enum PathChange {
    /// Set by the change, unset before.
    Added,
    /// Set before, unset by the change.
    Removed,
    /// Set on both sides, to different values.
    Changed,
}

/// The leaf paths (`image.tag`, `hosts[0]`) whose values differ between `old` and `new`,
/// sorted: what a values diff may say without quoting a value.
pub fn values_diff(old: &Value, new: &Value) -> Vec<(String, PathChange)> {
    let mut out = Vec::new();
    walk(String::new(), Some(old), Some(new), &mut out);
    out.sort();
    out
}

fn walk(
    path: String,
    old: Option<&Value>,
    new: Option<&Value>,
    out: &mut Vec<(String, PathChange)>,
) {
    let child = |k: &str| {
        if path.is_empty() {
            k.to_owned()
        } else {
            format!("{path}.{k}")
        }
    };
    match (old, new) {
        (Some(Value::Object(a)), Some(Value::Object(b))) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for k in keys {
                walk(child(k), a.get(k), b.get(k), out);
            }
        }
        (Some(Value::Array(a)), Some(Value::Array(b))) => {
            for i in 0..a.len().max(b.len()) {
                walk(format!("{path}[{i}]"), a.get(i), b.get(i), out);
            }
        }
        (Some(a), Some(b)) if a == b => {}
        (Some(_), Some(_)) => out.push((path, PathChange::Changed)),
        (None, Some(_)) => out.push((path, PathChange::Added)),
        (Some(_), None) => out.push((path, PathChange::Removed)),
        (None, None) => {}
    }
}

/// A text cut to a byte budget.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Truncated {
    /// The text, whole or its first lines.
    pub text: String,
    /// Whether lines were cut.
    pub truncated: bool,
    /// Bytes of the whole text.
    pub total_bytes: usize,
    /// `sha256:<hex>` of the whole text.
    pub digest: String,
}

impl Truncated {
    /// `text` cut after the last whole line that fits in `max_bytes`.
    pub fn new(text: &str, max_bytes: usize) -> Truncated {
        let digest = format!("sha256:{:x}", Sha256::digest(text.as_bytes()));
        if text.len() <= max_bytes {
            return Truncated {
                text: text.to_owned(),
                truncated: false,
                total_bytes: text.len(),
                digest,
            };
        }
        // After a newline (one byte, never inside a character) within the budget.
        let cut = text.as_bytes()[..max_bytes]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        Truncated {
            text: text[..cut].to_owned(),
            truncated: true,
            total_bytes: text.len(),
            digest,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn masker() -> Masker {
        Masker::new([7; 32])
    }

    fn deployment(image: &str) -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "namespace": "apps", "resourceVersion": "41",
                         "uid": "u-1", "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
                         "managedFields": [{"manager": "helm"}], "labels": {"app": "web"}},
            "spec": {"replicas": 2, "template": {"spec": {"containers": [{"name": "web", "image": image}]}}},
            "status": {"readyReplicas": 2},
        })
    }

    #[test]
    fn the_digest_is_hmac_sha256_keyed_by_the_masker() {
        // RFC 4231, test case 2 ("Jefe"), as a 32-byte key: the key zero-padded to the
        // block is the same HMAC key.
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        let mac = hmac_sha256(&key, &[b"what do ya want ", b"for nothing?"]);
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(
            hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_ne!(
            hmac_sha256(&[1; 32], &[b"x"]),
            hmac_sha256(&[2; 32], &[b"x"])
        );
    }

    #[test]
    fn server_fields_and_status_are_not_part_of_the_diff() {
        let mut live = deployment("web:1");
        live["metadata"]["resourceVersion"] = json!("99");
        live["status"] = json!({"readyReplicas": 0});
        let d = object_diff(
            ObjectRef::of(&live).unwrap(),
            Some(&live),
            Some(&deployment("web:1")),
            &masker(),
        );
        assert_eq!(d.change, Change::Unchanged);
        assert_eq!(d.diff, "");
        let n = normalize(&live, &masker());
        assert!(n.get("status").is_none());
        assert!(n["metadata"].get("managedFields").is_none());
        assert_eq!(n["metadata"]["labels"]["app"], "web");
    }

    #[test]
    fn a_changed_image_is_an_update_with_a_unified_diff_of_that_line() {
        let d = object_diff(
            ObjectRef::of(&deployment("web:1")).unwrap(),
            Some(&deployment("web:1")),
            Some(&deployment("web:2")),
            &masker(),
        );
        assert_eq!(d.change, Change::Update);
        assert_eq!(d.object.to_string(), "Deployment/apps/web");
        assert!(
            d.diff.starts_with("--- live\n+++ desired\n@@ "),
            "{}",
            d.diff
        );
        assert!(
            d.diff
                .contains("\n-      - image: web:1\n+      - image: web:2\n"),
            "{}",
            d.diff
        );
        assert!(!d.diff.contains("resourceVersion"), "{}", d.diff);
    }

    #[test]
    fn create_and_delete_show_the_whole_object_on_one_side() {
        let web = deployment("web:1");
        let created = object_diff(ObjectRef::of(&web).unwrap(), None, Some(&web), &masker());
        assert_eq!(created.change, Change::Create);
        assert!(
            created.diff.lines().skip(3).all(|l| l.starts_with('+')),
            "{}",
            created.diff
        );
        let deleted = object_diff(ObjectRef::of(&web).unwrap(), Some(&web), None, &masker());
        assert_eq!(deleted.change, Change::Delete);
        assert!(
            deleted.diff.lines().skip(3).all(|l| l.starts_with('-')),
            "{}",
            deleted.diff
        );
    }

    #[test]
    fn a_secret_change_names_the_key_and_never_carries_the_value() {
        let secret = |password: &str| {
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "db", "namespace": "apps"},
                   "data": {"password": password, "user": "YWRtaW4="},
                   "stringData": {"token": "plain-text-token"}})
        };
        let d = object_diff(
            ObjectRef::of(&secret("czNjcjN0")).unwrap(),
            Some(&secret("czNjcjN0")),
            Some(&secret("bjN3LXMzY3IzdA==")),
            &masker(),
        );
        assert_eq!(d.change, Change::Update);
        for value in [
            "czNjcjN0",
            "bjN3LXMzY3IzdA==",
            "YWRtaW4=",
            "plain-text-token",
        ] {
            assert!(!d.diff.contains(value), "{value} in {}", d.diff);
        }
        let changed: Vec<&str> = d
            .diff
            .lines()
            .filter(|l| l.starts_with(['-', '+']) && !l.starts_with("---") && !l.starts_with("+++"))
            .collect();
        assert_eq!(changed.len(), 2, "{}", d.diff);
        assert!(
            changed
                .iter()
                .all(|l| l.contains("password: (secret value, ")),
            "{changed:?}"
        );
        // Equal values mask equally within one preview; another key masks otherwise.
        assert_eq!(masker().mask("data.a", "x"), masker().mask("data.a", "x"));
        assert_ne!(
            masker().mask("data.a", "x"),
            Masker::new([8; 32]).mask("data.a", "x")
        );
        // A ConfigMap is not masked.
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"k": "v"}});
        assert_eq!(normalize(&cm, &masker())["data"]["k"], "v");
    }

    #[test]
    fn values_diff_lists_paths_never_values() {
        let old = json!({"image": {"tag": "1.0", "pullPolicy": "IfNotPresent"}, "hosts": ["a", "b"], "legacy": true});
        let new = json!({"image": {"tag": "1.1", "pullPolicy": "IfNotPresent"}, "hosts": ["a"], "replicas": 3});
        assert_eq!(
            values_diff(&old, &new),
            [
                ("hosts[1]".to_owned(), PathChange::Removed),
                ("image.tag".to_owned(), PathChange::Changed),
                ("legacy".to_owned(), PathChange::Removed),
                ("replicas".to_owned(), PathChange::Added),
            ]
        );
        assert!(values_diff(&old, &old).is_empty());
    }

    #[test]
    fn truncation_cuts_on_a_line_and_keeps_the_digest_of_the_whole() {
        let text = "one\ntwo\nthree\n";
        let whole = Truncated::new(text, 100);
        assert_eq!((whole.text.as_str(), whole.truncated), (text, false));
        let cut = Truncated::new(text, 9);
        assert_eq!(
            (cut.text.as_str(), cut.truncated, cut.total_bytes),
            ("one\ntwo\n", true, 14)
        );
        assert_eq!(cut.digest, whole.digest);
        assert_eq!(Truncated::new(text, 2).text, "");
        assert_eq!(Truncated::new("é\n", 1).text, "");
    }
}
