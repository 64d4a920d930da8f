//! A HelmRelease's values, composed exactly as Flux's helm-controller composes them
//! (`chartutil.ChartValuesFromReferences`): a pure function of the `valuesFrom` references,
//! what the ConfigMaps and Secrets they name hold, and the inline `spec.values`.
//!
//! Where to start: [`compose`]. The IO edge reads the objects [`referenced_objects`] lists
//! (once each, from the HelmRelease's namespace) and answers [`compose`]'s lookups with
//! [`Source`]s.
//!
//! The rules, in Flux's order:
//! - Each `valuesFrom` entry, in list order, reads `data[valuesKey]` (`values.yaml` when
//!   unset) of its ConfigMap (`.data`, not `.binaryData`) or Secret (`.data`, decoded).
//! - A missing object or key is skipped when the entry is `optional` (see
//!   [`Composed::skipped`]), otherwise it is an error. `optional` covers nothing else: bad
//!   data always fails.
//! - Without `targetPath` the data is a YAML document (`sigs.k8s.io/yaml`, the first
//!   document; empty or `null` is `{}`), merged over what came before with `MergeMaps`:
//!   maps merge key by key, anything else (lists too) is replaced. `literal` is ignored.
//! - With `targetPath` the inline values are first merged into the result, then the data is
//!   set at the path with Helm's `--set` parser: typed (`true`, `null`, `42`, `{a,b}`), or as
//!   a string when the whole value is quoted (all leading and trailing `'` and `"` stripped),
//!   or verbatim with `literal: true` (`\ , [ ] { }` escaped, so only the path is parsed).
//! - The inline values are merged last, over everything.
//!
//! Flux's quirk, reproduced: Go maps and slices are references, and merging the inline values
//! into the result shares their nested maps and lists with it. The `--set` parser changes
//! those in place, so a `targetPath` value lands in the inline values too and survives the
//! final merge: a `targetPath` under a map only the inline values have, or at an index inside
//! an inline list, wins over the inline values. Under a map an earlier reference also has, the
//! merged map is a copy and the inline value wins. This module keeps Go's sharing (nodes are
//! shared handles) and runs the one `--set` parser ([`flotilla_chart::strvals`]) on them.
//!
//! Numbers are Go's: values from YAML and the inline values are float64, `--set` integers
//! int64.
//!
//! Errors never show the data: parser messages that would quote it are cut (see
//! [`ValuesError`]). [`ValuesError`]'s `Display` names the HelmRelease, the entry and the
//! field, for logs and the CLI; [`ValuesError::condition_message`] is Flux's own text, for the
//! `Ready=False` condition (reason `ValuesError`), so tools that read Flux's messages read
//! ours.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::rc::Rc;

use flotilla_chart::Values;
use flotilla_chart::strvals::{self, Node as TreeNode, Tree};
use flotilla_core::agent::ObjectKey;
use flotilla_core::spec::{DEFAULT_VALUES_KEY, ValuesReference, ValuesReferenceKind};
use serde_json::{Number, Value};

/// What the IO edge found for the object a `valuesFrom` entry names.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// The object exists: its data, by key (a ConfigMap's `.data` as bytes, a Secret's
    /// `.data` decoded).
    Found(&'a BTreeMap<String, Vec<u8>>),
    /// The API server answered NotFound.
    NotFound,
}

/// The composed values, and the optional references that were skipped.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    /// The values for the chart.
    pub values: Values,
    /// Optional entries whose object or key was missing, in list order (Flux logs these).
    pub skipped: Vec<Skipped>,
}

/// An optional `valuesFrom` entry that was skipped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skipped {
    /// Which entry.
    pub at: RefAt,
    /// What was missing.
    pub missing: Missing,
}

/// What an optional entry found missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// The object.
    Object,
    /// The key in the object.
    Key,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.missing {
            Missing::Object => write!(
                f,
                "{}: optional {} {:?} not found, skipped",
                self.at, self.at.kind, self.at.name
            ),
            Missing::Key => write!(
                f,
                "{}: optional {} {:?} has no key {:?}, skipped",
                self.at, self.at.kind, self.at.name, self.at.key
            ),
        }
    }
}

/// A `valuesFrom` entry, as errors name it. `Display`: `HelmRelease ns/name: valuesFrom[i]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefAt {
    /// The HelmRelease.
    pub release: ObjectKey,
    /// The entry's index in `valuesFrom`.
    pub index: usize,
    /// `ConfigMap` or `Secret`.
    pub kind: ValuesReferenceKind,
    /// The object's name (in the HelmRelease's namespace).
    pub name: String,
    /// The data key read (`valuesKey`, or `values.yaml`).
    pub key: String,
    /// Whether the entry is optional.
    pub optional: bool,
}

impl fmt::Display for RefAt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "HelmRelease {}: valuesFrom[{}]",
            self.release, self.index
        )
    }
}

/// Why the values could not be composed. `Display` names the HelmRelease, the entry, the
/// object and the key, e.g. `HelmRelease default/podinfo: valuesFrom[1]: Secret "prod-tls"
/// has no key "crt"`; [`ValuesError::condition_message`] gives Flux's text.
///
/// `detail` fields hold the parser's message with any quoted piece of the data cut out.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    /// A required object does not exist.
    #[error("{at}: {} {:?} not found", .at.kind, .at.name)]
    ObjectNotFound {
        /// The entry.
        at: Box<RefAt>,
        /// Whether this is the first entry naming the object (Flux then quotes the API
        /// server's NotFound message; later entries say `resource not found`).
        first: bool,
    },
    /// A required key is not in the object.
    #[error("{at}: {} {:?} has no key {:?}", .at.kind, .at.name, .at.key)]
    KeyNotFound {
        /// The entry.
        at: Box<RefAt>,
    },
    /// The data is not a YAML map.
    #[error("{at}: {} {:?} key {:?}: not valid YAML: {detail}", .at.kind, .at.name, .at.key)]
    InvalidYaml {
        /// The entry.
        at: Box<RefAt>,
        /// The YAML reader's error (Go's text).
        detail: String,
    },
    /// The data could not be set at `targetPath`.
    #[error(
        "{at}: {} {:?} key {:?}: cannot set it at targetPath {path:?}: {detail}",
        .at.kind, .at.name, .at.key
    )]
    TargetPath {
        /// The entry.
        at: Box<RefAt>,
        /// The `targetPath`.
        path: String,
        /// The `--set` parser's error (Helm's text).
        detail: String,
    },
}

impl ValuesError {
    /// The entry the error is about.
    pub fn at(&self) -> &RefAt {
        match self {
            Self::ObjectNotFound { at, .. }
            | Self::KeyNotFound { at }
            | Self::InvalidYaml { at, .. }
            | Self::TargetPath { at, .. } => at,
        }
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::ObjectNotFound { .. } => "values_object_not_found",
            Self::KeyNotFound { .. } => "values_key_not_found",
            Self::InvalidYaml { .. } => "values_invalid_yaml",
            Self::TargetPath { .. } => "values_target_path",
        }
    }

    /// Whether retrying may help: always, as Flux retries a `ValuesError` with backoff (the
    /// object may appear or change; only labelled objects are watched).
    pub fn is_transient(&self) -> bool {
        true
    }

    /// Flux's message (`ErrValuesReference.Error()`), for the `Ready=False` condition with
    /// reason `ValuesError`: `could not resolve[ optional] <Kind> chart values reference
    /// '<ns>/<name>' with key '<key>': <reason>`.
    pub fn condition_message(&self) -> String {
        let at = self.at();
        let reason = match self {
            Self::ObjectNotFound { first: true, .. } => {
                format!("{} {:?} not found", resource_name(at.kind), at.name)
            }
            Self::ObjectNotFound { first: false, .. } => "resource not found".to_owned(),
            Self::KeyNotFound { .. } => "key not found".to_owned(),
            Self::InvalidYaml { detail, .. } | Self::TargetPath { detail, .. } => detail.clone(),
        };
        format!(
            "could not resolve{} {} chart values reference '{}/{}' with key '{}': {reason}",
            if at.optional { " optional" } else { "" },
            at.kind,
            at.release.namespace,
            at.name,
            at.key
        )
    }
}

/// The API resource name in a NotFound message (`secrets "x" not found`).
fn resource_name(kind: ValuesReferenceKind) -> &'static str {
    match kind {
        ValuesReferenceKind::ConfigMap => "configmaps",
        ValuesReferenceKind::Secret => "secrets",
    }
}

/// The objects `refs` name, each once, in the order of first use (the order Flux reads
/// them).
pub fn referenced_objects(refs: &[ValuesReference]) -> Vec<(ValuesReferenceKind, &str)> {
    let mut out: Vec<(ValuesReferenceKind, &str)> = Vec::new();
    for r in refs {
        let key = (r.kind, r.name.as_str());
        if !out.contains(&key) {
            out.push(key);
        }
    }
    out
}

/// The data key an entry reads: `valuesKey`, or `values.yaml` when unset or empty.
pub fn values_key(r: &ValuesReference) -> &str {
    r.values_key
        .as_deref()
        .filter(|k| !k.is_empty())
        .unwrap_or(DEFAULT_VALUES_KEY)
}

/// Composes the values of `release` as Flux does (see the module docs): `refs` in order,
/// each read through `lookup(kind, name)`, then `inline` (`spec.values`; anything but a JSON
/// object counts as none, as Flux ignores what does not decode to a map).
pub fn compose<'a>(
    release: &ObjectKey,
    refs: &[ValuesReference],
    lookup: impl Fn(ValuesReferenceKind, &str) -> Source<'a>,
    inline: Option<&Value>,
) -> Result<Composed, ValuesError> {
    let inline = match inline {
        Some(Value::Object(m)) => Some(shared_map(m)),
        _ => None,
    };
    let mut result = new_map();
    let mut skipped = Vec::new();
    let mut missing_seen: Vec<(ValuesReferenceKind, &str)> = Vec::new();
    for (index, r) in refs.iter().enumerate() {
        let at = || RefAt {
            release: release.clone(),
            index,
            kind: r.kind,
            name: r.name.clone(),
            key: values_key(r).to_owned(),
            optional: r.optional,
        };
        let data = match lookup(r.kind, &r.name) {
            Source::Found(data) => data,
            Source::NotFound => {
                let object = (r.kind, r.name.as_str());
                let first = !missing_seen.contains(&object);
                if first {
                    missing_seen.push(object);
                }
                if r.optional {
                    skipped.push(Skipped {
                        at: at(),
                        missing: Missing::Object,
                    });
                    continue;
                }
                return Err(ValuesError::ObjectNotFound {
                    at: Box::new(at()),
                    first,
                });
            }
        };
        let Some(bytes) = data.get(values_key(r)) else {
            if r.optional {
                skipped.push(Skipped {
                    at: at(),
                    missing: Missing::Key,
                });
                continue;
            }
            return Err(ValuesError::KeyNotFound { at: Box::new(at()) });
        };
        match r.target_path.as_deref().filter(|p| !p.is_empty()) {
            Some(path) => {
                result = merge_maps(&result, inline.as_ref());
                set_at_path(&mut result, path, &go_string(bytes), r.literal).map_err(|detail| {
                    ValuesError::TargetPath {
                        at: Box::new(at()),
                        path: path.to_owned(),
                        detail,
                    }
                })?;
            }
            None => {
                let parsed = read_values(bytes).map_err(|detail| ValuesError::InvalidYaml {
                    at: Box::new(at()),
                    detail,
                })?;
                result = merge_maps(&result, Some(&shared_map(&parsed)));
            }
        }
    }
    let result = merge_maps(&result, inline.as_ref());
    Ok(Composed {
        values: to_json_map(&result),
        skipped,
    })
}

/// `common.ReadValues`: `sigs.k8s.io/yaml.Unmarshal` into `common.Values` (the first
/// document; empty or `null` is an empty map). The error is Go's text, without data.
fn read_values(data: &[u8]) -> Result<Values, String> {
    let parsed = match std::str::from_utf8(data) {
        Ok(text) => flotilla_chart::values::parse_yaml_map(text),
        Err(_) => match flotilla_yaml::sigs::unmarshal_bytes(data) {
            Err(e) => Err(e),
            // Not reached: invalid UTF-8 is go-yaml's reader error.
            Ok(_) => return Err("yaml: invalid UTF-8".to_owned()),
        },
    };
    parsed.map_err(|e| {
        without_data(&e.to_string().replace(
            "Go value of type map[string]interface {}",
            "Go value of type common.Values",
        ))
    })
}

/// Flux's `ReplacePathValue` / `ReplacePathLiteralValue`: `path=value` through Helm's `--set`
/// parser, on `result` in place.
fn set_at_path(result: &mut MapRef, path: &str, value: &str, literal: bool) -> Result<(), String> {
    let (value, as_string) = if literal {
        (escape_literal(value), true)
    } else {
        let quoted = |q: char| value.starts_with(q) && value.ends_with(q);
        if quoted('\'') || quoted('"') {
            (value.trim_matches(['\'', '"']).to_owned(), true)
        } else {
            (value.to_owned(), false)
        }
    };
    strvals::parse_into_tree::<Shared>(&format!("{path}={value}"), result, as_string)
        .map_err(|e| strvals_detail(&e.0))
}

/// Flux's literal escaping: `\ , [ ] { }` get a backslash, so the value is one string.
fn escape_literal(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        if matches!(c, '\\' | ',' | '[' | ']' | '{' | '}') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Go's `string(bytes)` read rune by rune: each byte of an invalid UTF-8 sequence is one
/// U+FFFD.
fn go_string(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for _ in chunk.invalid() {
            out.push(char::REPLACEMENT_CHARACTER);
        }
    }
    out
}

/// A `--set` parser error, kept only when it cannot show the data: the messages that quote
/// a key or a value read from the data are replaced by a description without it.
fn strvals_detail(message: &str) -> String {
    const WITHOUT_DATA: [&str; 5] = [
        "list must terminate with '}'",
        "negative ",
        "index of ",
        "value name nested level",
        "unable to parse key: interface conversion",
    ];
    if WITHOUT_DATA.iter().any(|p| message.starts_with(p)) {
        return message.to_owned();
    }
    let what = if message.starts_with("key ") {
        "a key with no value"
    } else if message.starts_with("error parsing index") {
        "an index that is not a number"
    } else if message.starts_with("unexpected data at end of array index") {
        "unexpected data after an index"
    } else {
        "invalid --set syntax"
    };
    format!(
        "{what} (Helm's message is withheld as it would show the data; in a value, ',' starts \
         another key=value and '{{' a list: set literal: true to take the value verbatim)"
    )
}

/// A YAML reader error with any piece of the data cut out: go-yaml quotes scalars between
/// backquotes and prints invalid map keys.
fn without_data(message: &str) -> String {
    for marker in ["invalid map key: ", "unsupported map key of type: "] {
        if let Some(i) = message.find(marker) {
            return format!("{}(withheld)", &message[..i + marker.len()]);
        }
    }
    let mut out = String::with_capacity(message.len());
    for (i, part) in message.split('`').enumerate() {
        if i % 2 == 1 {
            out.push_str("`(withheld)`");
        } else {
            out.push_str(part);
        }
    }
    out
}

// Go's values graph: maps and lists are shared handles, as Go's maps and slices are
// references.

/// A node of Go's values graph.
#[derive(Debug, Clone)]
enum GoNode {
    Scalar(Value),
    Map(MapRef),
    List(ListRef),
}

type MapRef = Rc<RefCell<BTreeMap<String, GoNode>>>;
type ListRef = Rc<RefCell<Vec<GoNode>>>;

fn new_map() -> MapRef {
    Rc::new(RefCell::new(BTreeMap::new()))
}

/// A JSON map as a fresh graph (numbers as float64, as Go decodes JSON and YAML).
fn shared_map(m: &Values) -> MapRef {
    Rc::new(RefCell::new(
        m.iter().map(|(k, v)| (k.clone(), shared(v))).collect(),
    ))
}

fn shared(v: &Value) -> GoNode {
    match v {
        Value::Object(m) => GoNode::Map(shared_map(m)),
        Value::Array(items) => {
            GoNode::List(Rc::new(RefCell::new(items.iter().map(shared).collect())))
        }
        Value::Number(n) if !n.is_f64() => GoNode::Scalar(
            n.as_f64()
                .and_then(Number::from_f64)
                .map_or(Value::Null, Value::Number),
        ),
        other => GoNode::Scalar(other.clone()),
    }
}

/// A `--set` leaf as a fresh graph (numbers kept: `--set` integers are int64).
fn leaf(v: Value) -> GoNode {
    match v {
        Value::Object(m) => GoNode::Map(Rc::new(RefCell::new(
            m.into_iter().map(|(k, v)| (k, leaf(v))).collect(),
        ))),
        Value::Array(items) => {
            GoNode::List(Rc::new(RefCell::new(items.into_iter().map(leaf).collect())))
        }
        other => GoNode::Scalar(other),
    }
}

fn to_json_map(m: &MapRef) -> Values {
    m.borrow()
        .iter()
        .map(|(k, v)| (k.clone(), to_json(v)))
        .collect()
}

fn to_json(n: &GoNode) -> Value {
    match n {
        GoNode::Scalar(v) => v.clone(),
        GoNode::Map(m) => Value::Object(to_json_map(m)),
        GoNode::List(l) => Value::Array(l.borrow().iter().map(to_json).collect()),
    }
}

/// Flux's `MergeMaps(a, b)`: a new top-level map holding `a`'s entries (the same nested
/// maps and lists), then `b`'s, where two maps merge recursively into a new map and anything
/// else from `b` is put in as it is (shared).
fn merge_maps(a: &MapRef, b: Option<&MapRef>) -> MapRef {
    let mut out = a.borrow().clone();
    if let Some(b) = b {
        for (k, v) in b.borrow().iter() {
            if let (GoNode::Map(bm), Some(GoNode::Map(am))) = (v, out.get(k)) {
                let merged = merge_maps(am, Some(bm));
                out.insert(k.clone(), GoNode::Map(merged));
                continue;
            }
            out.insert(k.clone(), v.clone());
        }
    }
    Rc::new(RefCell::new(out))
}

/// The graph as the `--set` parser's [`Tree`]: it changes shared maps and lists in place.
#[derive(Debug, Clone, Copy)]
enum Shared {}

fn tree_node(n: Option<&GoNode>) -> TreeNode<MapRef, ListRef> {
    match n {
        None => TreeNode::Absent,
        Some(GoNode::Map(m)) => TreeNode::Map(Rc::clone(m)),
        Some(GoNode::List(l)) => TreeNode::List(Rc::clone(l)),
        Some(GoNode::Scalar(v)) => TreeNode::Scalar(v.clone()),
    }
}

impl Tree for Shared {
    type Map = MapRef;
    type List = ListRef;
    type Value = GoNode;

    fn get(map: &MapRef, key: &str) -> TreeNode<MapRef, ListRef> {
        tree_node(map.borrow().get(key))
    }

    fn set(map: &mut MapRef, key: &str, value: GoNode) {
        map.borrow_mut().insert(key.to_owned(), value);
    }

    fn is_empty(map: &MapRef) -> bool {
        map.borrow().is_empty()
    }

    fn new_map() -> MapRef {
        new_map()
    }

    fn new_list() -> ListRef {
        Rc::new(RefCell::new(Vec::new()))
    }

    fn list_get(list: &ListRef, i: usize) -> TreeNode<MapRef, ListRef> {
        tree_node(list.borrow().get(i))
    }

    fn list_set(list: &mut ListRef, i: usize, value: GoNode) {
        let len = list.borrow().len();
        if i < len {
            list.borrow_mut()[i] = value;
            return;
        }
        // Go's `make` and `copy`: a new list holding the same elements.
        let mut grown = list.borrow().clone();
        grown.resize(i + 1, GoNode::Scalar(Value::Null));
        grown[i] = value;
        *list = Rc::new(RefCell::new(grown));
    }

    fn from_map(map: MapRef) -> GoNode {
        GoNode::Map(map)
    }

    fn from_list(list: ListRef) -> GoNode {
        GoNode::List(list)
    }

    fn from_json(value: Value) -> GoNode {
        leaf(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use ValuesReferenceKind::{ConfigMap, Secret};

    type Object = (ValuesReferenceKind, &'static str, BTreeMap<String, Vec<u8>>);

    /// The objects of a test namespace.
    #[derive(Default)]
    struct Objects(Vec<Object>);

    impl Objects {
        fn with(
            mut self,
            kind: ValuesReferenceKind,
            name: &'static str,
            data: &[(&str, &str)],
        ) -> Self {
            let data = data
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect();
            self.0.push((kind, name, data));
            self
        }

        fn lookup<'s>(&'s self) -> impl Fn(ValuesReferenceKind, &str) -> Source<'s> + 's {
            move |kind, name| {
                self.0
                    .iter()
                    .find(|(k, n, _)| *k == kind && *n == name)
                    .map_or(Source::NotFound, |(_, _, data)| Source::Found(data))
            }
        }
    }

    fn r(kind: ValuesReferenceKind, name: &str) -> ValuesReference {
        ValuesReference {
            kind,
            name: name.to_owned(),
            values_key: None,
            target_path: None,
            optional: false,
            literal: false,
        }
    }

    fn key(mut r: ValuesReference, k: &str) -> ValuesReference {
        r.values_key = Some(k.to_owned());
        r
    }

    fn at(mut r: ValuesReference, path: &str) -> ValuesReference {
        r.target_path = Some(path.to_owned());
        r
    }

    fn optional(mut r: ValuesReference) -> ValuesReference {
        r.optional = true;
        r
    }

    fn literal(mut r: ValuesReference) -> ValuesReference {
        r.literal = true;
        r
    }

    fn release() -> ObjectKey {
        ObjectKey {
            namespace: "default".parse().unwrap(),
            name: "podinfo".parse().unwrap(),
        }
    }

    fn run(
        objects: &Objects,
        refs: &[ValuesReference],
        inline: Option<Value>,
    ) -> Result<Composed, ValuesError> {
        compose(&release(), refs, objects.lookup(), inline.as_ref())
    }

    fn values(objects: &Objects, refs: &[ValuesReference], inline: Option<Value>) -> Value {
        Value::Object(run(objects, refs, inline).expect("values compose").values)
    }

    fn error(objects: &Objects, refs: &[ValuesReference], inline: Option<Value>) -> ValuesError {
        run(objects, refs, inline).expect_err("values must not compose")
    }

    /// A secret value that must never reach an error message.
    const SECRET: &str = "s3cr3t";

    #[test]
    fn entries_merge_in_order_and_inline_values_go_on_top() {
        // Flux's "merges" vector.
        let objects = Objects::default()
            .with(
                ConfigMap,
                "values",
                &[(
                    "values.yaml",
                    "flat: value\nnested:\n  configuration: value\n",
                )],
            )
            .with(
                Secret,
                "values",
                &[("values.yaml", "flat:\n  nested: value\nnested: value\n")],
            );
        assert_eq!(
            values(
                &objects,
                &[r(ConfigMap, "values"), r(Secret, "values")],
                Some(json!({"other": "values"}))
            ),
            json!({"flat": {"nested": "value"}, "nested": "value", "other": "values"})
        );
    }

    #[test]
    fn later_entries_override_earlier_ones_and_maps_merge_while_lists_are_replaced() {
        let objects = Objects::default()
            .with(
                ConfigMap,
                "base",
                &[("values.yaml", "a: {x: 1, z: 1}\nl: [1, 2, 3]\ns: base\n")],
            )
            .with(
                ConfigMap,
                "prod",
                &[("values.yaml", "a: {z: 2}\nl: [9]\ns: {now: a map}\n")],
            );
        assert_eq!(
            values(
                &objects,
                &[r(ConfigMap, "base"), r(ConfigMap, "prod")],
                None
            ),
            json!({"a": {"x": 1.0, "z": 2.0}, "l": [9.0], "s": {"now": "a map"}})
        );
        assert_eq!(
            values(
                &objects,
                &[r(ConfigMap, "prod"), r(ConfigMap, "base")],
                None
            ),
            json!({"a": {"x": 1.0, "z": 1.0}, "l": [1.0, 2.0, 3.0], "s": "base"})
        );
    }

    #[test]
    fn inline_values_win_over_every_entry_and_their_numbers_are_float64() {
        let objects = Objects::default().with(
            Secret,
            "s",
            &[("values.yaml", "replicas: 1\nimage: {tag: v1}\n")],
        );
        let got = values(
            &objects,
            &[r(Secret, "s")],
            Some(json!({"replicas": 3, "image": {"repository": "x"}})),
        );
        assert_eq!(
            got,
            json!({"replicas": 3.0, "image": {"tag": "v1", "repository": "x"}})
        );
        assert!(got["replicas"].is_f64());
        // Inline values alone, or nothing at all.
        assert_eq!(
            values(&objects, &[], Some(json!({"a": [1, {"b": 2}]}))),
            json!({"a": [1.0, {"b": 2.0}]})
        );
        assert_eq!(values(&objects, &[], None), json!({}));
        // What is not a JSON object is no values, as Flux's decoding into a map gives nil.
        assert_eq!(values(&objects, &[], Some(json!([1, 2]))), json!({}));
        assert_eq!(values(&objects, &[], Some(Value::Null)), json!({}));
    }

    #[test]
    fn values_key_defaults_to_values_yaml_and_names_another_key() {
        let objects = Objects::default().with(
            ConfigMap,
            "cm",
            &[
                ("values.yaml", "from: default\n"),
                ("prod.yaml", "from: prod\n"),
            ],
        );
        assert_eq!(
            values(&objects, &[r(ConfigMap, "cm")], None),
            json!({"from": "default"})
        );
        assert_eq!(
            values(&objects, &[key(r(ConfigMap, "cm"), "")], None),
            json!({"from": "default"})
        );
        assert_eq!(
            values(&objects, &[key(r(ConfigMap, "cm"), "prod.yaml")], None),
            json!({"from": "prod"})
        );
    }

    #[test]
    fn secrets_and_config_maps_are_read_alike_and_by_kind() {
        let objects = Objects::default()
            .with(ConfigMap, "same", &[("values.yaml", "from: configmap\n")])
            .with(Secret, "same", &[("values.yaml", "from: secret\n")]);
        assert_eq!(
            values(&objects, &[r(ConfigMap, "same")], None),
            json!({"from": "configmap"})
        );
        assert_eq!(
            values(&objects, &[r(Secret, "same")], None),
            json!({"from": "secret"})
        );
    }

    #[test]
    fn empty_or_null_data_is_an_empty_map_and_only_the_first_document_counts() {
        let objects = Objects::default().with(
            ConfigMap,
            "cm",
            &[
                ("empty", ""),
                ("null", "null\n"),
                ("comment", "# nothing\n"),
                ("two", "a: 1\n---\nb: 2\n"),
            ],
        );
        for k in ["empty", "null", "comment"] {
            assert_eq!(
                values(&objects, &[key(r(ConfigMap, "cm"), k)], None),
                json!({}),
                "{k}"
            );
        }
        assert_eq!(
            values(&objects, &[key(r(ConfigMap, "cm"), "two")], None),
            json!({"a": 1.0})
        );
    }

    #[test]
    fn an_optional_entry_skips_a_missing_object_or_key_and_says_so() {
        let objects = Objects::default().with(Secret, "present", &[("values.yaml", "a: 1\n")]);
        let got = run(
            &objects,
            &[
                optional(r(Secret, "missing")),
                optional(r(ConfigMap, "missing")),
                optional(key(r(Secret, "present"), "absent.yaml")),
                r(Secret, "present"),
            ],
            None,
        )
        .unwrap();
        assert_eq!(Value::Object(got.values), json!({"a": 1.0}));
        let skipped: Vec<String> = got.skipped.iter().map(ToString::to_string).collect();
        assert_eq!(
            skipped,
            [
                r#"HelmRelease default/podinfo: valuesFrom[0]: optional Secret "missing" not found, skipped"#,
                r#"HelmRelease default/podinfo: valuesFrom[1]: optional ConfigMap "missing" not found, skipped"#,
                r#"HelmRelease default/podinfo: valuesFrom[2]: optional Secret "present" has no key "absent.yaml", skipped"#,
            ]
        );
        assert_eq!(got.skipped[2].missing, Missing::Key);
    }

    #[test]
    fn a_required_missing_object_fails_with_flux_text_and_a_field_naming_message() {
        let objects = Objects::default();
        let e = error(&objects, &[r(Secret, "missing")], None);
        assert_eq!(
            e.to_string(),
            r#"HelmRelease default/podinfo: valuesFrom[0]: Secret "missing" not found"#
        );
        // The reference's example, word for word.
        assert_eq!(
            e.condition_message(),
            r#"could not resolve Secret chart values reference 'default/missing' with key 'values.yaml': secrets "missing" not found"#
        );
        assert_eq!(e.kind(), "values_object_not_found");
        let e = error(&objects, &[r(ConfigMap, "missing")], None);
        assert_eq!(
            e.condition_message(),
            r#"could not resolve ConfigMap chart values reference 'default/missing' with key 'values.yaml': configmaps "missing" not found"#
        );
        // A second entry naming an object already found missing: Flux's cached answer.
        let e = error(
            &objects,
            &[
                optional(r(Secret, "missing")),
                key(r(Secret, "missing"), "other"),
            ],
            None,
        );
        assert_eq!(e.at().index, 1);
        assert_eq!(
            e.condition_message(),
            "could not resolve Secret chart values reference 'default/missing' with key 'other': resource not found"
        );
    }

    #[test]
    fn a_required_missing_key_fails_naming_the_object_and_key() {
        let objects = Objects::default()
            .with(ConfigMap, "base", &[("values.yaml", "a: 1\n")])
            .with(Secret, "prod-tls", &[("tls.crt", "x")]);
        let e = error(
            &objects,
            &[r(ConfigMap, "base"), key(r(Secret, "prod-tls"), "crt")],
            None,
        );
        assert_eq!(
            e.to_string(),
            r#"HelmRelease default/podinfo: valuesFrom[1]: Secret "prod-tls" has no key "crt""#
        );
        assert_eq!(
            e.condition_message(),
            "could not resolve Secret chart values reference 'default/prod-tls' with key 'crt': key not found"
        );
        let e = error(&objects, &[key(r(ConfigMap, "base"), "nonexisting")], None);
        assert_eq!(e.kind(), "values_key_not_found");
    }

    #[test]
    fn bad_yaml_fails_naming_object_and_key_even_when_optional() {
        let objects = Objects::default()
            .with(ConfigMap, "base", &[("values.yaml", "a: 1\nb: [1, 2\n")])
            .with(ConfigMap, "scalar", &[("values.yaml", "\ninvalid")])
            .with(ConfigMap, "list", &[("values.yaml", "- 1\n")]);
        let e = error(&objects, &[optional(r(ConfigMap, "base"))], None);
        let shown = e.to_string();
        assert!(
            shown.starts_with(
                r#"HelmRelease default/podinfo: valuesFrom[0]: ConfigMap "base" key "values.yaml": not valid YAML: error converting YAML to JSON: yaml: line "#
            ),
            "{shown}"
        );
        assert!(
            e.condition_message().starts_with(
                "could not resolve optional ConfigMap chart values reference 'default/base' with key 'values.yaml': error converting YAML to JSON: yaml: line "
            ),
            "{}",
            e.condition_message()
        );
        // Flux's "invalid values" vector: a scalar document.
        let e = error(&objects, &[r(ConfigMap, "scalar")], None);
        assert_eq!(
            e.condition_message(),
            "could not resolve ConfigMap chart values reference 'default/scalar' with key 'values.yaml': error unmarshaling JSON: while decoding JSON: json: cannot unmarshal string into Go value of type common.Values"
        );
        let e = error(&objects, &[r(ConfigMap, "list")], None);
        assert!(
            e.to_string()
                .ends_with("cannot unmarshal array into Go value of type common.Values")
        );
        assert_eq!(e.kind(), "values_invalid_yaml");
    }

    #[test]
    fn target_path_sets_the_value_with_set_typing() {
        let data: &[(&str, &str)] = &[
            ("str", "value"),
            ("int", "42"),
            ("zero", "0"),
            ("leading-zero", "01"),
            ("negative", "-5"),
            ("float", "1.5"),
            ("bool", "true"),
            ("bool-upper", "FALSE"),
            ("null", "null"),
            ("list", "{a,b,c}"),
            ("typed-list", "{1,true,x}"),
            ("escaped", r"value1\,value2"),
            ("empty", ""),
            ("equals", "a=b"),
        ];
        let objects = Objects::default().with(Secret, "s", data);
        let cases = [
            ("str", json!("value")),
            ("int", json!(42)),
            ("zero", json!(0)),
            ("leading-zero", json!("01")),
            ("negative", json!(-5)),
            ("float", json!("1.5")),
            ("bool", json!(true)),
            ("bool-upper", json!(false)),
            ("null", Value::Null),
            ("list", json!(["a", "b", "c"])),
            ("typed-list", json!([1, true, "x"])),
            ("escaped", json!("value1,value2")),
            ("empty", json!("")),
            ("equals", json!("a=b")),
        ];
        for (k, want) in cases {
            let got = values(
                &objects,
                &[at(key(r(Secret, "s"), k), "merge.at.path")],
                None,
            );
            assert_eq!(got, json!({"merge": {"at": {"path": want}}}), "{k}");
        }
        // `--set` integers are int64, not float64.
        let got = values(&objects, &[at(key(r(Secret, "s"), "int"), "n")], None);
        assert!(got["n"].is_i64());
    }

    #[test]
    fn target_path_indexes_lists_and_escapes_dots() {
        let objects =
            Objects::default().with(Secret, "s", &[("values.yaml", "value"), ("role", "master")]);
        assert_eq!(
            values(&objects, &[at(r(Secret, "s"), "merge.at[2]")], None),
            json!({"merge": {"at": [null, null, "value"]}})
        );
        assert_eq!(
            values(&objects, &[at(r(Secret, "s"), "a[0].b[1]")], None),
            json!({"a": [{"b": [null, "value"]}]})
        );
        assert_eq!(
            values(
                &objects,
                &[at(
                    key(r(Secret, "s"), "role"),
                    r"nodeSelector.kubernetes\.io/role"
                )],
                None
            ),
            json!({"nodeSelector": {"kubernetes.io/role": "master"}})
        );
    }

    #[test]
    fn quoted_target_path_values_stay_strings_with_every_outer_quote_stripped() {
        let objects = Objects::default().with(
            ConfigMap,
            "cm",
            &[
                ("double", r#""true""#),
                ("single", "'42'"),
                ("mixed", r#"'"x"'"#),
                ("one-side", r#""42"#),
                ("inner", r#""a'b""#),
                ("lone", "'"),
            ],
        );
        let cases = [
            ("double", json!("true")),
            ("single", json!("42")),
            ("mixed", json!("x")),
            // Quoted on one side only: not quoted, typed as it is.
            ("one-side", json!("\"42")),
            ("inner", json!("a'b")),
            ("lone", json!("")),
        ];
        for (k, want) in cases {
            assert_eq!(
                values(&objects, &[at(key(r(ConfigMap, "cm"), k), "v")], None),
                json!({"v": want}),
                "{k}"
            );
        }
    }

    #[test]
    fn literal_target_path_values_are_taken_verbatim() {
        let yaml = "server:\n  port: 8080\nmanagement:\n  endpoints:\n    web:\n      exposure:\n        include: [ \"prometheus\", \"health\" ]\n";
        let hocon = "kafka {\n  bootstrap = \"b-1:9098,b-2:9098\"\n  group = \"my.service\"\n}\n";
        let data: &[(&str, &str)] = &[
            ("application.yml", yaml),
            ("application.conf", hocon),
            (
                "brokers",
                "kafka01.net:9092,kafka02.net:9092,kafka03.net:9092",
            ),
            ("braces", "{a,b,c}"),
            ("equals", "foo=bar=baz"),
            ("brackets", "endpoints: [a, b, c]"),
            ("json", r#"["a","b","c"]"#),
            ("bool", "true"),
            ("backslash", r"C:\dir\,x"),
            ("quoted", r#""q""#),
        ];
        let objects = Objects::default().with(ConfigMap, "cm", data);
        for (k, v) in data {
            let got = values(
                &objects,
                &[literal(at(key(r(ConfigMap, "cm"), k), r"config.file\.txt"))],
                None,
            );
            assert_eq!(got, json!({"config": {"file.txt": v}}), "{k}");
        }
        // literal is ignored without a targetPath: the data is a YAML document.
        let objects =
            Objects::default().with(ConfigMap, "values", &[("values.yaml", "flat: value\n")]);
        assert_eq!(
            values(&objects, &[literal(r(ConfigMap, "values"))], None),
            json!({"flat": "value"})
        );
    }

    #[test]
    fn set_syntax_in_a_non_literal_value_fails_without_showing_the_value() {
        // flux2#2625 and Flux's "non-literal target path mangles value with commas".
        let objects = Objects::default().with(
            Secret,
            "kafka",
            &[
                ("brokers", "kafka01.net:9092,kafka02.net:9092"),
                ("application.yml", "endpoints: [a,b,c]"),
            ],
        );
        let e = error(
            &objects,
            &[at(key(r(Secret, "kafka"), "brokers"), "kafka.brokers")],
            None,
        );
        assert_eq!(
            e.to_string(),
            r#"HelmRelease default/podinfo: valuesFrom[0]: Secret "kafka" key "brokers": cannot set it at targetPath "kafka.brokers": a key with no value (Helm's message is withheld as it would show the data; in a value, ',' starts another key=value and '{' a list: set literal: true to take the value verbatim)"#
        );
        assert!(!e.condition_message().contains("9092"));
        assert_eq!(e.kind(), "values_target_path");
        let e = error(
            &objects,
            &[at(
                key(r(Secret, "kafka"), "application.yml"),
                r"externalConfig.application\.yml.content",
            )],
            None,
        );
        assert!(!e.to_string().contains("endpoints"), "{e}");
    }

    #[test]
    fn target_path_errors_about_the_path_keep_helm_text() {
        let objects = Objects::default()
            .with(ConfigMap, "base", &[("values.yaml", "a: scalar\n")])
            .with(Secret, "s", &[("v", "x")]);
        let e = error(
            &objects,
            &[r(ConfigMap, "base"), at(key(r(Secret, "s"), "v"), "a.b")],
            None,
        );
        assert_eq!(
            e.condition_message(),
            "could not resolve Secret chart values reference 'default/s' with key 'v': unable to parse key: interface conversion: interface {} is string, not map[string]interface {}"
        );
        let e = error(&objects, &[at(key(r(Secret, "s"), "v"), "a[70000]")], None);
        assert!(
            e.to_string()
                .ends_with("index of 70000 is greater than maximum supported index of 65536")
        );
    }

    #[test]
    fn no_error_shows_secret_data() {
        let data: &[(&str, &str)] = &[
            ("tag", &format!("a: !!int {SECRET}\n")),
            ("map-key", &format!("? {{{SECRET}: 1}}\n: x\n")),
            ("seq-key", &format!("? [{SECRET}]\n: x\n")),
            ("comma", &format!("a,{SECRET}")),
            ("index", &format!("x,{SECRET}[abc]=1")),
            ("after-index", &format!("x,l[0]{SECRET}=1")),
            ("key-map", &format!("x,{SECRET}.=1")),
        ];
        let objects = Objects::default().with(Secret, "s", data);
        for (k, _) in data {
            for reference in [key(r(Secret, "s"), k), at(key(r(Secret, "s"), k), "p")] {
                if let Err(e) = run(&objects, &[reference], None) {
                    assert!(!e.to_string().contains(SECRET), "{k}: {e}");
                    assert!(
                        !e.condition_message().contains(SECRET),
                        "{k}: {}",
                        e.condition_message()
                    );
                }
            }
        }
        // The tagged scalar is an error (its text is kept, the scalar withheld).
        let e = error(&objects, &[key(r(Secret, "s"), "tag")], None);
        assert!(e.to_string().contains("`(withheld)`"), "{e}");
    }

    // Flux's targetPath precedence quirk: Go's maps and slices are shared references.

    #[test]
    fn target_path_into_an_inline_list_wins_over_the_inline_values() {
        // Flux's "target path precedence over all" vector.
        let objects = Objects::default()
            .with(
                ConfigMap,
                "values",
                &[(
                    "values.yaml",
                    "flat: value\nnested:\n  configuration:\n  - one\n  - two\n  - three\n",
                )],
            )
            .with(Secret, "values", &[("key", "value")]);
        assert_eq!(
            values(
                &objects,
                &[
                    at(key(r(Secret, "values"), "key"), "nested.configuration[0]"),
                    r(ConfigMap, "values")
                ],
                Some(json!({"nested": {"configuration": ["list", "item", "option"]}}))
            ),
            json!({"flat": "value", "nested": {"configuration": ["value", "item", "option"]}})
        );
    }

    #[test]
    fn target_path_into_an_entry_list_is_a_plain_set() {
        // Flux's "target path for string type array item" vector.
        let objects = Objects::default()
            .with(
                ConfigMap,
                "values",
                &[(
                    "values.yaml",
                    "flat: value\nnested:\n  configuration:\n  - list\n  - item\n  - option\n",
                )],
            )
            .with(Secret, "values", &[("values.yaml", "foo")]);
        assert_eq!(
            values(
                &objects,
                &[
                    r(ConfigMap, "values"),
                    at(r(Secret, "values"), "nested.configuration[1]")
                ],
                Some(json!({"other": "values"}))
            ),
            json!({"flat": "value", "nested": {"configuration": ["list", "foo", "option"]}, "other": "values"})
        );
    }

    #[test]
    fn target_path_precedence_follows_go_sharing() {
        let objects = Objects::default()
            .with(
                ConfigMap,
                "base",
                &[("values.yaml", "nested: {key: base}\n")],
            )
            .with(
                Secret,
                "tp",
                &[("values.yaml", "tp"), ("one", "1"), ("two", "2")],
            );
        let inline =
            || Some(json!({"nested": {"key": "inline"}, "top": "inline", "list": ["a", "b"]}));
        let cases: Vec<(&str, Vec<ValuesReference>, Value)> = vec![
            (
                "under a map only the inline values have: the targetPath wins",
                vec![at(r(Secret, "tp"), "nested.key")],
                json!({"nested": {"key": "tp"}, "top": "inline", "list": ["a", "b"]}),
            ),
            (
                "under a map an earlier entry also has: the merged map is a copy, inline wins",
                vec![r(ConfigMap, "base"), at(r(Secret, "tp"), "nested.key")],
                json!({"nested": {"key": "inline"}, "top": "inline", "list": ["a", "b"]}),
            ),
            (
                "a top-level key: the result's own map, inline wins",
                vec![at(r(Secret, "tp"), "top")],
                json!({"nested": {"key": "inline"}, "top": "inline", "list": ["a", "b"]}),
            ),
            (
                "an index inside an inline list: changed in place, the targetPath wins",
                vec![at(r(Secret, "tp"), "list[1]")],
                json!({"nested": {"key": "inline"}, "top": "inline", "list": ["a", "tp"]}),
            ),
            (
                "an index past an inline list's end: a new list, inline wins",
                vec![at(r(Secret, "tp"), "list[2]")],
                json!({"nested": {"key": "inline"}, "top": "inline", "list": ["a", "b"]}),
            ),
            (
                "a new key under an inline map: added in place, kept",
                vec![at(r(Secret, "tp"), "nested.new")],
                json!({"nested": {"key": "inline", "new": "tp"}, "top": "inline", "list": ["a", "b"]}),
            ),
            (
                "a later entry replaces what the targetPath set, but not in the inline values",
                vec![at(r(Secret, "tp"), "nested.key"), r(ConfigMap, "base")],
                json!({"nested": {"key": "tp"}, "top": "inline", "list": ["a", "b"]}),
            ),
        ];
        for (name, refs, want) in cases {
            assert_eq!(values(&objects, &refs, inline()), want, "{name}");
        }
        // Two targetPaths under one inline map: the first changed the inline map itself; the
        // second changed a merged copy, so the inline value wins there.
        assert_eq!(
            values(
                &objects,
                &[
                    at(key(r(Secret, "tp"), "one"), "nested.a"),
                    at(key(r(Secret, "tp"), "two"), "nested.b")
                ],
                Some(json!({"nested": {"a": "inline", "b": "inline"}}))
            ),
            json!({"nested": {"a": 1, "b": "inline"}})
        );
        // Without inline values a targetPath is an ordinary set, in order.
        assert_eq!(
            values(
                &objects,
                &[r(ConfigMap, "base"), at(r(Secret, "tp"), "nested.key")],
                None
            ),
            json!({"nested": {"key": "tp"}})
        );
    }

    #[test]
    fn referenced_objects_are_listed_once_in_first_use_order() {
        let refs = [
            r(Secret, "b"),
            r(ConfigMap, "a"),
            key(r(Secret, "b"), "other"),
            r(ConfigMap, "b"),
        ];
        assert_eq!(
            referenced_objects(&refs),
            [(Secret, "b"), (ConfigMap, "a"), (ConfigMap, "b")]
        );
    }

    #[test]
    fn invalid_utf8_is_replaced_byte_by_byte_in_target_path_values_and_an_error_in_yaml() {
        let mut data = BTreeMap::new();
        data.insert("values.yaml".to_owned(), b"a\xe2\x82b".to_vec());
        let lookup = |_: ValuesReferenceKind, _: &str| Source::Found(&data);
        let got = compose(&release(), &[at(r(Secret, "s"), "v")], lookup, None).unwrap();
        assert_eq!(
            Value::Object(got.values),
            json!({"v": "a\u{fffd}\u{fffd}b"})
        );
        let e = compose(&release(), &[r(Secret, "s")], lookup, None).unwrap_err();
        assert_eq!(e.kind(), "values_invalid_yaml");
    }
}
