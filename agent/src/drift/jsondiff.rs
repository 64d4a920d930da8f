//! The JSON Patch (RFC 6902) between two JSON documents, computed the way Flux's drift
//! detection computes it (the `wI2L/jsondiff` differ with its `Rationalize` option and
//! nothing else), so the counts in drift summaries match Flux's:
//!
//! - object keys are visited in byte order; a key only in the source is a `remove`, only in
//!   the target an `add`, in both a recursive comparison;
//! - arrays are compared index by index: surplus source items are removed at the first
//!   surplus index (the same path repeated), missing ones appended at `/-`;
//! - values of different JSON types, and differing scalars, are a `replace`;
//! - after comparing an object or array, when the operations found for it would take more
//!   bytes as JSON than one `replace` of the whole value, they become that one `replace`.
//!   The byte counts are the differ's own estimate: the target value's length as Go's
//!   `encoding/json` writes it (HTML characters escaped) for `replace`, and zero for the
//!   value of an `add`.
//!
//! Numbers compare as `f64`, as Go's decoder reads them.

use serde_json::{Map, Value};

/// The kind of a patch operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// `add`.
    Add,
    /// `replace`.
    Replace,
    /// `remove`.
    Remove,
}

impl OpKind {
    /// The operation's name in a JSON Patch.
    pub fn as_str(self) -> &'static str {
        match self {
            OpKind::Add => "add",
            OpKind::Replace => "replace",
            OpKind::Remove => "remove",
        }
    }
}

/// One JSON Patch operation.
#[derive(Clone, Debug, PartialEq)]
pub struct Operation {
    /// `add`, `replace` or `remove`.
    pub op: OpKind,
    /// The JSON pointer it applies to.
    pub path: String,
    /// The new value (`add`, `replace`).
    pub value: Option<Value>,
    /// The value it replaces or removes (not part of the patch; for masking and logs).
    pub old_value: Option<Value>,
    /// The differ's estimate of the value's JSON length.
    value_len: usize,
}

impl Operation {
    /// A `remove` of `path` (ignore rules).
    pub fn remove(path: impl Into<String>) -> Operation {
        Operation {
            op: OpKind::Remove,
            path: path.into(),
            value: None,
            old_value: None,
            value_len: 0,
        }
    }

    /// The operation as JSON Patch JSON (`{"op", "path", "value"}`).
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("op".into(), Value::String(self.op.as_str().into()));
        m.insert("path".into(), Value::String(self.path.clone()));
        if self.op != OpKind::Remove {
            m.insert("value".into(), self.value.clone().unwrap_or(Value::Null));
        }
        Value::Object(m)
    }

    fn json_len(&self) -> usize {
        // {"op":"","path":""} plus ,"value": and the value for add and replace.
        let mut n = 19 + self.op.as_str().len() + self.path.len();
        if self.op != OpKind::Remove {
            n += 9 + self.value_len;
        }
        n
    }
}

/// A patch as JSON (an array of operations).
pub fn patch_json(ops: &[Operation]) -> Value {
    Value::Array(ops.iter().map(Operation::to_json).collect())
}

fn ops_json_len(ops: &[Operation]) -> usize {
    let sum: usize = ops.iter().map(Operation::json_len).sum();
    sum + ops.len().saturating_sub(1)
}

/// The operations turning `source` into `target`.
pub fn compare(source: &Value, target: &Value) -> Vec<Operation> {
    let mut d = Differ::default();
    d.diff(String::new(), source, target, Some(go_json_len(target)));
    d.ops
}

#[derive(Default)]
struct Differ {
    ops: Vec<Operation>,
}

/// The JSON type of a value, as Go's decoder tells them apart.
fn json_type(v: &Value) -> u8 {
    match v {
        Value::Null => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Number(_) => 3,
        Value::Array(_) => 4,
        Value::Object(_) => 5,
    }
}

fn equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

impl Differ {
    /// `doc_len` is the length of the target value's text in the target document, `None`
    /// when the differ could not locate it (a key its text search does not find).
    fn diff(&mut self, ptr: String, src: &Value, tgt: &Value, doc_len: Option<usize>) {
        let doc_len = doc_len.unwrap_or(0);
        if json_type(src) != json_type(tgt) {
            if ptr.is_empty() {
                self.push(OpKind::Add, ptr, None, Some(tgt.clone()), 0);
            } else {
                self.push(
                    OpKind::Replace,
                    ptr,
                    Some(src.clone()),
                    Some(tgt.clone()),
                    doc_len,
                );
            }
            return;
        }
        if equal(src, tgt) {
            return;
        }
        let size = self.ops.len();
        match (src, tgt) {
            (Value::Array(s), Value::Array(t)) => self.arrays(&ptr, s, t, doc_len > 0),
            (Value::Object(s), Value::Object(t)) => self.objects(&ptr, s, t, doc_len > 0),
            _ => {
                self.push(
                    OpKind::Replace,
                    ptr,
                    Some(src.clone()),
                    Some(tgt.clone()),
                    doc_len,
                );
                return;
            }
        }
        if self.ops.len() > size {
            let whole = Operation {
                op: OpKind::Replace,
                path: ptr,
                value: Some(tgt.clone()),
                old_value: Some(src.clone()),
                value_len: doc_len,
            };
            if ops_json_len(&self.ops[size..]) > whole.json_len() {
                self.ops.truncate(size);
                self.ops.push(whole);
            }
        }
    }

    fn push(
        &mut self,
        op: OpKind,
        path: String,
        old_value: Option<Value>,
        value: Option<Value>,
        value_len: usize,
    ) {
        self.ops.push(Operation {
            op,
            path,
            value,
            old_value,
            value_len,
        });
    }

    fn objects(
        &mut self,
        ptr: &str,
        src: &Map<String, Value>,
        tgt: &Map<String, Value>,
        doc: bool,
    ) {
        let mut keys: Vec<&String> = src.keys().chain(tgt.keys()).collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let path = format!("{ptr}/{}", escape_token(k));
            match (src.get(k), tgt.get(k)) {
                (Some(s), Some(t)) => {
                    // The differ finds a key's value by its unescaped text in the target
                    // document: keys Go's encoder escapes are not found (length 0).
                    let len = (doc && !go_escapes(k)).then(|| go_json_len(t));
                    self.diff(path, s, t, len);
                }
                (Some(s), None) => self.push(OpKind::Remove, path, Some(s.clone()), None, 0),
                (None, Some(t)) => self.push(OpKind::Add, path, None, Some(t.clone()), 0),
                (None, None) => {}
            }
        }
    }

    fn arrays(&mut self, ptr: &str, src: &[Value], tgt: &[Value], doc: bool) {
        let common = src.len().min(tgt.len());
        if tgt.len() < src.len() {
            let path = format!("{ptr}/{common}");
            for s in &src[common..] {
                self.push(OpKind::Remove, path.clone(), Some(s.clone()), None, 0);
            }
        }
        for i in 0..common {
            let len = doc.then(|| go_json_len(&tgt[i]));
            self.diff(format!("{ptr}/{i}"), &src[i], &tgt[i], len);
        }
        if tgt.len() > src.len() {
            let path = format!("{ptr}/-");
            for t in &tgt[common..] {
                self.push(OpKind::Add, path.clone(), None, Some(t.clone()), 0);
            }
        }
    }
}

/// A JSON pointer reference token (`~` → `~0`, `/` → `~1`).
pub fn escape_token(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

/// Whether Go's JSON encoder (HTML escaping on) writes `s` differently from its bytes.
fn go_escapes(s: &str) -> bool {
    s.chars().any(|c| go_char_len(c) != c.len_utf8())
}

fn go_char_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The length of a value as Go's `encoding/json` writes it compactly (HTML escaping on).
pub fn go_json_len(v: &Value) -> usize {
    match v {
        Value::Null => 4,
        Value::Bool(true) => 4,
        Value::Bool(false) => 5,
        Value::Number(n) => n.to_string().len(),
        Value::String(s) => 2 + s.chars().map(go_char_len).sum::<usize>(),
        Value::Array(items) => {
            2 + items.iter().map(go_json_len).sum::<usize>() + items.len().saturating_sub(1)
        }
        Value::Object(m) => {
            2 + m
                .iter()
                .map(|(k, v)| 2 + k.chars().map(go_char_len).sum::<usize>() + 1 + go_json_len(v))
                .sum::<usize>()
                + m.len().saturating_sub(1)
        }
    }
}

/// Removes the value at an RFC 6901 pointer, as a JSON Patch `remove` that tolerates a
/// missing path (negative array indices count from the end). The pointer must be valid.
pub fn remove_pointer(doc: &mut Value, pointer: &str) {
    let Some(rest) = pointer.strip_prefix('/') else {
        return;
    };
    let tokens: Vec<String> = rest
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect();
    let (last, parents) = tokens
        .split_last()
        .expect("split yields at least one token");
    let mut cur = doc;
    for t in parents {
        cur = match cur {
            Value::Object(m) => match m.get_mut(t) {
                Some(v) => v,
                None => return,
            },
            Value::Array(a) => match array_index(t, a.len()) {
                Some(i) => &mut a[i],
                None => return,
            },
            _ => return,
        };
    }
    match cur {
        Value::Object(m) => {
            m.remove(last);
        }
        Value::Array(a) => {
            if let Some(i) = array_index(last, a.len()) {
                a.remove(i);
            }
        }
        _ => {}
    }
}

fn array_index(token: &str, len: usize) -> Option<usize> {
    let i: i64 = token.parse().ok()?;
    let i = if i < 0 { len as i64 + i } else { i };
    (0..len as i64).contains(&i).then_some(i as usize)
}

/// Why a string is not an RFC 6901 JSON pointer; `None` when it is one.
pub fn pointer_problem(pointer: &str) -> Option<String> {
    if pointer.is_empty() {
        return None;
    }
    if !pointer.starts_with('/') {
        return Some(format!(
            "{pointer:?} is not a JSON pointer (RFC 6901): it must be empty or start with \"/\""
        ));
    }
    let mut chars = pointer.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' && !matches!(chars.peek(), Some('0' | '1')) {
            return Some(format!(
                "{pointer:?} is not a JSON pointer (RFC 6901): \"~\" must be followed by 0 or 1"
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ops(src: Value, tgt: Value) -> Vec<Value> {
        compare(&src, &tgt).iter().map(Operation::to_json).collect()
    }

    #[test]
    fn a_changed_scalar_is_one_replace() {
        assert_eq!(
            ops(
                json!({"spec": {"replicas": 3}}),
                json!({"spec": {"replicas": 1}})
            ),
            [json!({"op": "replace", "path": "/spec/replicas", "value": 1})]
        );
    }

    #[test]
    fn keys_are_visited_in_byte_order_with_removes_and_adds() {
        let long = "v".repeat(60);
        assert_eq!(
            ops(
                json!({"b": 1, "a": {"x": long, "y": long}}),
                json!({"c": 2, "a": {"x": long, "z": long}})
            ),
            [
                json!({"op": "remove", "path": "/a/y"}),
                json!({"op": "add", "path": "/a/z", "value": long}),
                json!({"op": "remove", "path": "/b"}),
                json!({"op": "add", "path": "/c", "value": 2}),
            ]
        );
    }

    #[test]
    fn many_small_operations_become_one_replace_when_shorter() {
        // Two replaces of /a/0 and /a/1 (81 bytes with the comma) cost more than one
        // replace of /a with the value [1,2] (42 bytes).
        assert_eq!(
            ops(json!({"a": [3, 4]}), json!({"a": [1, 2]})),
            [json!({"op": "replace", "path": "/a", "value": [1, 2]})]
        );
        // A long target value keeps the small operations.
        let long = "x".repeat(80);
        assert_eq!(
            ops(
                json!({"a": {"k": 1, "l": long}}),
                json!({"a": {"k": 2, "l": long}})
            ),
            [json!({"op": "replace", "path": "/a/k", "value": 2})]
        );
    }

    #[test]
    fn surplus_items_are_removed_at_the_first_surplus_index_and_missing_ones_appended() {
        let long = |s: &str| format!("{s}-{}", "y".repeat(60));
        assert_eq!(
            ops(
                json!({"a": [long("p"), long("q"), long("r")]}),
                json!({"a": [long("p")]})
            ),
            [
                json!({"op": "remove", "path": "/a/1"}),
                json!({"op": "remove", "path": "/a/1"}),
            ]
        );
        assert_eq!(
            ops(
                json!({"a": [long("p")]}),
                json!({"a": [long("p"), long("q")]})
            ),
            [json!({"op": "add", "path": "/a/-", "value": long("q")})]
        );
    }

    #[test]
    fn different_types_are_replaced_and_numbers_compare_as_floats() {
        assert_eq!(
            ops(json!({"a": "1"}), json!({"a": 1})),
            [json!({"op": "replace", "path": "/a", "value": 1})]
        );
        assert!(ops(json!({"a": 1}), json!({"a": 1.0})).is_empty());
    }

    #[test]
    fn keys_are_escaped_in_pointers() {
        assert_eq!(
            ops(
                json!({"metadata": {"annotations": {"a/b": "1", "pad": "p".repeat(50)}}}),
                json!({"metadata": {"annotations": {"a/b": "2", "pad": "p".repeat(50)}}})
            ),
            [json!({"op": "replace", "path": "/metadata/annotations/a~1b", "value": "2"})]
        );
    }

    #[test]
    fn go_lengths_escape_html_and_control_characters() {
        assert_eq!(go_json_len(&json!("a<b")), 2 + 1 + 6 + 1);
        assert_eq!(go_json_len(&json!("a\nb\"")), 2 + 1 + 2 + 1 + 2);
        assert_eq!(
            go_json_len(&json!({"k": [1, true, null]})),
            r#"{"k":[1,true,null]}"#.len()
        );
        assert_eq!(go_json_len(&json!("é")), 4);
    }

    #[test]
    fn remove_pointer_tolerates_missing_paths_and_counts_negative_indices_from_the_end() {
        let mut doc = json!({"spec": {"a/b": 1, "list": [1, 2, 3]}});
        remove_pointer(&mut doc, "/spec/a~1b");
        remove_pointer(&mut doc, "/spec/list/-1");
        remove_pointer(&mut doc, "/spec/missing/deeper");
        remove_pointer(&mut doc, "/spec/list/9");
        assert_eq!(doc, json!({"spec": {"list": [1, 2]}}));
    }

    #[test]
    fn pointers_are_checked() {
        assert_eq!(pointer_problem("/spec/replicas"), None);
        assert_eq!(pointer_problem(""), None);
        assert!(
            pointer_problem("spec/replicas")
                .unwrap()
                .contains("must be empty or start")
        );
        assert!(
            pointer_problem("/a~2")
                .unwrap()
                .contains("followed by 0 or 1")
        );
    }
}
