//! The patches of Helm's client-side apply: a three-way strategic merge patch for built-in
//! kinds, a JSON merge patch (RFC 7386) for everything else.
//!
//! Helm 4 (`pkg/kube/client.go`, `createPatch`) patches an existing object with
//! `original` = the object in the manifest of the release being replaced, `modified` = the
//! object in the new manifest, and `current` = the live object:
//!
//! - kinds of the Kubernetes API itself (those client-go's scheme knows, CRDs included) get
//!   `strategicpatch.CreateThreeWayMergePatch(original, modified, current)`: what changed
//!   from `current` to `modified` is set, what `original` had and `modified` no longer has
//!   is deleted (`null` for a map key, a `$patch: delete` item for a list merged by key,
//!   `$deleteFromPrimitiveList` for a list of scalars merged as a set), and what another
//!   client added (in `current` only) is left alone;
//! - other kinds (custom resources) get a two-way JSON merge patch from `original` to
//!   `modified`, or, when asked (Helm's install taking ownership), a three-way JSON merge
//!   patch, where lists are replaced whole.
//!
//! How a list is merged comes from the cluster's OpenAPI v2 document
//! (`x-kubernetes-patch-strategy: merge` and `x-kubernetes-patch-merge-key` on the field),
//! which is what the API server merges the patch with: [`PatchSchema`]. A list without a
//! merge strategy is replaced whole. Not done: `$setElementOrder` (the API server keeps the
//! live order and appends new items, where Helm also reorders) and `$retainKeys` (a field
//! dropped from the chart is deleted from the original all the same).

use std::collections::HashMap;

use serde_json::{Map, Value};

/// The merge strategies of the built-in kinds' fields, from the cluster's OpenAPI v2
/// document (`/openapi/v2`).
#[derive(Debug, Default)]
pub struct PatchSchema {
    definitions: Map<String, Value>,
    /// (group, version, kind) to the name of its definition.
    roots: HashMap<(String, String, String), String>,
}

impl PatchSchema {
    /// The schema of an OpenAPI v2 document.
    pub fn from_openapi_v2(mut document: Value) -> PatchSchema {
        let definitions = match document.get_mut("definitions").map(Value::take) {
            Some(Value::Object(m)) => m,
            _ => Map::new(),
        };
        let mut roots = HashMap::new();
        for (name, def) in &definitions {
            let Some(gvks) = def
                .get("x-kubernetes-group-version-kind")
                .and_then(Value::as_array)
            else {
                continue;
            };
            for gvk in gvks {
                let text = |k: &str| {
                    gvk.get(k)
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_owned()
                };
                roots.insert((text("group"), text("version"), text("kind")), name.clone());
            }
        }
        PatchSchema { definitions, roots }
    }

    /// The schema of one kind; `None` when the document does not describe it.
    pub fn kind(&self, group: &str, version: &str, kind: &str) -> Option<Cursor<'_>> {
        let name = self
            .roots
            .get(&(group.to_owned(), version.to_owned(), kind.to_owned()))?;
        Some(Cursor {
            schema: Some(self),
            node: self.definitions.get(name),
        })
    }
}

/// How a list field is merged.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListStrategy {
    /// Replaced whole (no merge strategy: atomic).
    Replace,
    /// Merged by the value of a key of its items (`containers` by `name`).
    MergeByKey(String),
    /// A list of scalars merged as a set (`finalizers`).
    MergeScalars,
}

/// A position in a kind's schema; without a schema every list is replaced whole (a JSON
/// merge patch).
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor<'a> {
    schema: Option<&'a PatchSchema>,
    node: Option<&'a Value>,
}

impl<'a> Cursor<'a> {
    /// No schema: lists are replaced (a JSON merge patch).
    pub fn none() -> Cursor<'a> {
        Cursor::default()
    }

    fn resolve(&self, mut node: Option<&'a Value>) -> Option<&'a Value> {
        let schema = self.schema?;
        // `$ref` chains are short; the bound guards against a cyclic document.
        for _ in 0..16 {
            let reference = node?.get("$ref").and_then(Value::as_str);
            match reference.and_then(|r| r.strip_prefix("#/definitions/")) {
                Some(name) => node = schema.definitions.get(name),
                None => return node,
            }
        }
        None
    }

    fn at(&self, node: Option<&'a Value>) -> Cursor<'a> {
        Cursor {
            schema: self.schema,
            node: self.resolve(node),
        }
    }

    /// The schema of field `name` and how it merges when it is a list.
    pub fn field(&self, name: &str) -> (Cursor<'a>, ListStrategy) {
        let Some(node) = self.resolve(self.node) else {
            return (Cursor::none(), ListStrategy::Replace);
        };
        if let Some(property) = node.get("properties").and_then(|p| p.get(name)) {
            let strategy = property
                .get("x-kubernetes-patch-strategy")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let strategy = if strategy.split(',').any(|s| s == "merge") {
                match property
                    .get("x-kubernetes-patch-merge-key")
                    .and_then(Value::as_str)
                {
                    Some(key) => ListStrategy::MergeByKey(key.to_owned()),
                    None => ListStrategy::MergeScalars,
                }
            } else {
                ListStrategy::Replace
            };
            return (self.at(Some(property)), strategy);
        }
        match node.get("additionalProperties") {
            Some(values @ Value::Object(_)) => (self.at(Some(values)), ListStrategy::Replace),
            _ => (Cursor::none(), ListStrategy::Replace),
        }
    }

    /// The schema of a list's items.
    pub fn items(&self) -> Cursor<'a> {
        let node = self.resolve(self.node);
        self.at(node.and_then(|n| n.get("items")))
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// What differs in `modified` (changed or added); removals are not looked at.
    Changes,
    /// What `modified` no longer has; changes and additions are not looked at.
    Deletions,
}

/// `strategicpatch.CreateThreeWayMergePatch(original, modified, current, overwrite=true)`
/// with the list strategies of `schema` (with [`Cursor::none`], Helm's three-way JSON merge
/// patch). An empty object when there is nothing to change.
pub fn three_way(original: &Value, modified: &Value, current: &Value, schema: Cursor<'_>) -> Value {
    let empty = Map::new();
    let as_map = |v: &'_ Value| -> Map<String, Value> { v.as_object().unwrap_or(&empty).clone() };
    let deletions = diff_maps(
        &as_map(original),
        &as_map(modified),
        schema,
        Mode::Deletions,
    );
    let changes = diff_maps(&as_map(current), &as_map(modified), schema, Mode::Changes);
    Value::Object(merge_patches(deletions, changes, schema))
}

/// `jsonpatch.CreateMergePatch(original, modified)`: the two-way JSON merge patch (RFC 7386)
/// Helm sends for custom resources. An empty object when there is nothing to change.
pub fn two_way_merge(original: &Value, modified: &Value) -> Value {
    three_way(original, modified, original, Cursor::none())
}

fn diff_maps(
    from: &Map<String, Value>,
    to: &Map<String, Value>,
    schema: Cursor<'_>,
    mode: Mode,
) -> Map<String, Value> {
    let mut patch = Map::new();
    if mode == Mode::Deletions {
        for key in from.keys() {
            if !to.contains_key(key) {
                patch.insert(key.clone(), Value::Null);
            }
        }
    }
    for (key, to_value) in to {
        let Some(from_value) = from.get(key) else {
            if mode == Mode::Changes {
                patch.insert(key.clone(), to_value.clone());
            }
            continue;
        };
        if from_value == to_value {
            continue;
        }
        let (child, strategy) = schema.field(key);
        match (from_value, to_value) {
            (Value::Object(a), Value::Object(b)) => {
                let nested = diff_maps(a, b, child, mode);
                if !nested.is_empty() {
                    patch.insert(key.clone(), Value::Object(nested));
                }
            }
            (Value::Array(a), Value::Array(b)) => match &strategy {
                ListStrategy::MergeByKey(merge_key) if all_objects(a) && all_objects(b) => {
                    let items = diff_keyed_lists(a, b, merge_key, child.items(), mode);
                    if !items.is_empty() {
                        patch.insert(key.clone(), Value::Array(items));
                    }
                }
                ListStrategy::MergeScalars => {
                    let missing: Vec<Value> = if mode == Mode::Changes {
                        b.iter().filter(|v| !a.contains(v)).cloned().collect()
                    } else {
                        a.iter().filter(|v| !b.contains(v)).cloned().collect()
                    };
                    if !missing.is_empty() {
                        let name = match mode {
                            Mode::Changes => key.clone(),
                            Mode::Deletions => format!("$deleteFromPrimitiveList/{key}"),
                        };
                        patch.insert(name, Value::Array(missing));
                    }
                }
                _ => {
                    if mode == Mode::Changes {
                        patch.insert(key.clone(), to_value.clone());
                    }
                }
            },
            _ => {
                if mode == Mode::Changes {
                    patch.insert(key.clone(), to_value.clone());
                }
            }
        }
    }
    patch
}

fn all_objects(list: &[Value]) -> bool {
    list.iter().all(Value::is_object)
}

fn find_by_key<'v>(list: &'v [Value], merge_key: &str, value: &Value) -> Option<&'v Value> {
    list.iter().find(|item| item.get(merge_key) == Some(value))
}

fn diff_keyed_lists(
    from: &[Value],
    to: &[Value],
    merge_key: &str,
    items: Cursor<'_>,
    mode: Mode,
) -> Vec<Value> {
    let mut patch = Vec::new();
    if mode == Mode::Deletions {
        for item in from {
            let Some(key) = item.get(merge_key) else {
                continue;
            };
            if find_by_key(to, merge_key, key).is_none() {
                let mut delete = Map::new();
                delete.insert(merge_key.to_owned(), key.clone());
                delete.insert("$patch".to_owned(), Value::String("delete".to_owned()));
                patch.push(Value::Object(delete));
            }
        }
    }
    for item in to {
        let Some(key) = item.get(merge_key) else {
            if mode == Mode::Changes {
                patch.push(item.clone());
            }
            continue;
        };
        match find_by_key(from, merge_key, key) {
            None => {
                if mode == Mode::Changes {
                    patch.push(item.clone());
                }
            }
            Some(before) => {
                let (Some(a), Some(b)) = (before.as_object(), item.as_object()) else {
                    continue;
                };
                let mut nested = diff_maps(a, b, items, mode);
                if !nested.is_empty() {
                    nested.insert(merge_key.to_owned(), key.clone());
                    patch.push(Value::Object(nested));
                }
            }
        }
    }
    patch
}

/// The deletions patch with the changes patch laid over it (Go's `mergeMap` of the two).
fn merge_patches(
    mut into: Map<String, Value>,
    from: Map<String, Value>,
    schema: Cursor<'_>,
) -> Map<String, Value> {
    for (key, value) in from {
        let (child, strategy) = schema.field(&key);
        let merged = match (into.remove(&key), value) {
            (Some(Value::Object(a)), Value::Object(b)) => Value::Object(merge_patches(a, b, child)),
            (Some(Value::Array(a)), Value::Array(b)) => match &strategy {
                ListStrategy::MergeByKey(merge_key) => {
                    Value::Array(merge_keyed_patches(a, b, merge_key, child.items()))
                }
                ListStrategy::MergeScalars => {
                    let mut a = a;
                    a.extend(b);
                    Value::Array(a)
                }
                ListStrategy::Replace => Value::Array(b),
            },
            (_, value) => value,
        };
        into.insert(key, merged);
    }
    into
}

fn merge_keyed_patches(
    mut into: Vec<Value>,
    from: Vec<Value>,
    merge_key: &str,
    items: Cursor<'_>,
) -> Vec<Value> {
    for item in from {
        let key = item.get(merge_key).cloned();
        let position = key
            .as_ref()
            .and_then(|k| into.iter().position(|i| i.get(merge_key) == Some(k)));
        match (position, item) {
            (Some(i), Value::Object(b)) => {
                if let Value::Object(a) = into[i].take() {
                    into[i] = Value::Object(merge_patches(a, b, items));
                } else {
                    into[i] = Value::Object(b);
                }
            }
            (_, item) => into.push(item),
        }
    }
    into
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A tiny OpenAPI v2 document: a Deployment-like kind whose containers merge by name,
    /// env by name, finalizers as a set, and args replaced whole.
    fn schema() -> PatchSchema {
        PatchSchema::from_openapi_v2(json!({
            "definitions": {
                "Thing": {
                    "x-kubernetes-group-version-kind": [{"group": "apps", "version": "v1", "kind": "Thing"}],
                    "properties": {
                        "metadata": {"$ref": "#/definitions/Meta"},
                        "spec": {"$ref": "#/definitions/Spec"},
                    },
                },
                "Meta": {"properties": {
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "finalizers": {"type": "array", "items": {"type": "string"}, "x-kubernetes-patch-strategy": "merge"},
                }},
                "Spec": {"properties": {
                    "containers": {"type": "array", "items": {"$ref": "#/definitions/Container"},
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                }},
                "Container": {"properties": {
                    "env": {"type": "array", "items": {"$ref": "#/definitions/Env"},
                        "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name"},
                    "args": {"type": "array", "items": {"type": "string"}},
                }},
                "Env": {"properties": {"name": {"type": "string"}, "value": {"type": "string"}}},
            }
        }))
    }

    #[test]
    fn a_three_way_strategic_patch_deletes_what_the_chart_dropped_and_keeps_what_others_added() {
        let schema = schema();
        let cursor = schema.kind("apps", "v1", "Thing").expect("described");
        let original = json!({
            "metadata": {"labels": {"app": "a", "tier": "web"}, "finalizers": ["x", "y"]},
            "spec": {"containers": [{"name": "c", "args": ["1", "2"], "env": [
                {"name": "A", "value": "1"}, {"name": "B", "value": "2"}]}]},
        });
        let modified = json!({
            "metadata": {"labels": {"app": "a"}, "finalizers": ["x"]},
            "spec": {"containers": [{"name": "c", "args": ["1"], "env": [
                {"name": "A", "value": "10"}]}]},
        });
        let current = json!({
            "metadata": {"labels": {"app": "a", "tier": "web", "team": "ops"}, "finalizers": ["x", "y", "z"],
                "resourceVersion": "7"},
            "spec": {"containers": [{"name": "c", "args": ["1", "2"], "image": "i", "env": [
                {"name": "A", "value": "1"}, {"name": "B", "value": "2"}, {"name": "C", "value": "3"}]}]},
            "status": {"ready": true},
        });
        let patch = three_way(&original, &modified, &current, cursor);
        assert_eq!(
            patch,
            json!({
                "metadata": {"labels": {"tier": null}, "$deleteFromPrimitiveList/finalizers": ["y"]},
                "spec": {"containers": [{"name": "c", "args": ["1"], "env": [
                    {"name": "B", "$patch": "delete"}, {"name": "A", "value": "10"}]}]},
            })
        );
    }

    #[test]
    fn nothing_to_change_is_an_empty_patch() {
        let schema = schema();
        let cursor = schema.kind("apps", "v1", "Thing").expect("described");
        let object =
            json!({"spec": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}});
        let mut current = object.clone();
        current["spec"]["containers"][0]["image"] = json!("defaulted");
        assert_eq!(three_way(&object, &object, &current, cursor), json!({}));
    }

    #[test]
    fn a_json_merge_patch_replaces_lists_whole_and_nulls_dropped_keys() {
        let original = json!({"spec": {"items": [1, 2], "a": 1, "nested": {"b": 2, "c": 3}}});
        let modified = json!({"spec": {"items": [1], "nested": {"b": 2}}});
        assert_eq!(
            two_way_merge(&original, &modified),
            json!({"spec": {"a": null, "items": [1], "nested": {"c": null}}})
        );
        // A list the schema does not know is replaced whole in a strategic patch too.
        let current = json!({"spec": {"items": [1, 2, 3], "a": 1, "nested": {"b": 2, "c": 3}}});
        assert_eq!(
            three_way(&original, &modified, &current, Cursor::none()),
            json!({"spec": {"a": null, "items": [1], "nested": {"c": null}}})
        );
    }
}
