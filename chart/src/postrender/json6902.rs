//! JSON 6902 patches as kustomize applies them (evanphx/json-patch v4 over the object's
//! JSON form): `add`, `remove`, `replace`, `move`, `copy`, `test`; JSON pointers with `~0`
//! and `~1`, `-` to append, negative indexes from the end. Where that library differs from
//! the RFC it is followed: `replace` of a missing key in an existing object adds it, `add`
//! without a `value` adds `null`, a `test` of a missing key against `null` passes.

use flotilla_yaml::{Mapping, Value};
use serde_json::Value as Json;

use super::Resource;

/// A decoded patch: its operations, as JSON objects.
pub(super) type Ops = Vec<serde_json::Map<String, Json>>;

/// Decodes a JSON 6902 patch: JSON when it starts with `[`, YAML otherwise.
pub(super) fn parse(text: &str) -> Result<Ops, String> {
    let v = flotilla_yaml::sigs::yaml_to_json(text).map_err(|e| e.to_string())?;
    let Value::Seq(items) = v else {
        return Err("a JSON 6902 patch is a list of operations".into());
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| match to_json(&item)? {
            Json::Object(m) => Ok(m),
            Json::Null => Ok(serde_json::Map::new()),
            _ => Err(format!("operation {i} is not an object")),
        })
        .collect()
}

/// flotilla's YAML value as JSON (NaN and infinities have no JSON form).
pub(super) fn to_json(v: &Value) -> Result<Json, String> {
    Ok(match v {
        Value::Null => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(i) => Json::from(*i),
        Value::Uint(u) => Json::from(*u),
        Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Json::Number)
            .ok_or_else(|| format!("{f} has no JSON form"))?,
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(String::from_utf8_lossy(b).into_owned()),
        Value::Seq(items) => Json::Array(items.iter().map(to_json).collect::<Result<_, _>>()?),
        Value::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m.iter() {
                out.insert(super::scalar_text(k), to_json(v)?);
            }
            Json::Object(out)
        }
    })
}

/// JSON back to flotilla's YAML value.
pub(super) fn from_json(v: &Json) -> Value {
    match v {
        Json::Null => Value::Null,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::Uint(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(0.0))
            }
        }
        Json::String(s) => Value::String(s.clone()),
        Json::Array(items) => Value::Seq(items.iter().map(from_json).collect()),
        Json::Object(m) => Value::Map(
            m.iter()
                .map(|(k, v)| (Value::String(k.clone()), from_json(v)))
                .collect::<Mapping>(),
        ),
    }
}

/// Applies the operations to one object.
pub(super) fn apply(r: &mut Resource, ops: &Ops) -> Result<(), String> {
    let mut doc = to_json(&Value::Map(r.object.clone()))?;
    for (i, op) in ops.iter().enumerate() {
        apply_op(&mut doc, op).map_err(|e| format!("operation {i} ({}): {e}", describe(op)))?;
    }
    match from_json(&doc) {
        Value::Map(m) => {
            r.object = m;
            Ok(())
        }
        _ => Err("the patched object is not a JSON object".into()),
    }
}

fn describe(op: &serde_json::Map<String, Json>) -> String {
    let kind = op.get("op").and_then(Json::as_str).unwrap_or("?");
    let path = op.get("path").and_then(Json::as_str).unwrap_or("?");
    format!("{kind} {path}")
}

fn string_field(op: &serde_json::Map<String, Json>, field: &str) -> Result<String, String> {
    match op.get(field) {
        Some(Json::String(s)) => Ok(s.clone()),
        Some(Json::Null) | None => Err(format!("the operation has no {field:?}")),
        Some(_) => Err(format!("{field:?} is not a string")),
    }
}

/// evanphx's `decodePatchKey`.
fn unescape(part: &str) -> String {
    part.replace("~1", "/").replace("~0", "~")
}

/// evanphx's `findObject`: the container holding the last token of `path`, and that token.
/// The pointer is split on `/` and its first piece ignored, as that library does.
fn find<'a>(doc: &'a mut Json, path: &str) -> Option<(&'a mut Json, String)> {
    let split: Vec<&str> = path.split('/').collect();
    if split.len() < 2 {
        return None;
    }
    let mut cur = doc;
    for part in &split[1..split.len() - 1] {
        let key = unescape(part);
        let next = match cur {
            Json::Object(m) => m.get_mut(&key)?,
            Json::Array(a) => {
                let idx = index(&key, a.len())?;
                a.get_mut(idx)?
            }
            _ => return None,
        };
        if !matches!(next, Json::Object(_) | Json::Array(_)) {
            return None;
        }
        cur = next;
    }
    Some((cur, unescape(split[split.len() - 1])))
}

/// An existing index (negative counts from the end).
fn index(key: &str, len: usize) -> Option<usize> {
    let i: i64 = key.parse().ok()?;
    let len = i64::try_from(len).ok()?;
    let i = if i < 0 { i + len } else { i };
    (0..len)
        .contains(&i)
        .then(|| usize::try_from(i).ok())
        .flatten()
}

fn get<'a>(con: &'a Json, key: &str) -> Result<Option<&'a Json>, String> {
    match con {
        Json::Object(m) => Ok(m.get(key)),
        Json::Array(a) => match index(key, a.len()) {
            Some(i) => Ok(a.get(i)),
            None => Err(format!("invalid index {key:?} in an array of {}", a.len())),
        },
        _ => Err("not a container".into()),
    }
}

fn add(con: &mut Json, key: &str, value: Json) -> Result<(), String> {
    match con {
        Json::Object(m) => {
            m.insert(key.to_owned(), value);
            Ok(())
        }
        Json::Array(a) => {
            if key == "-" {
                a.push(value);
                return Ok(());
            }
            let i: i64 = key
                .parse()
                .map_err(|_| format!("{key:?} is not an array index"))?;
            let size = i64::try_from(a.len() + 1).map_err(|e| e.to_string())?;
            let at = if i < 0 { i + size } else { i };
            if i >= size || at < 0 {
                return Err(format!(
                    "index {i} is out of range for an array of {}",
                    a.len()
                ));
            }
            a.insert(usize::try_from(at).map_err(|e| e.to_string())?, value);
            Ok(())
        }
        _ => Err("not a container".into()),
    }
}

fn remove(con: &mut Json, key: &str) -> Result<Json, String> {
    match con {
        Json::Object(m) => m
            .remove(key)
            .ok_or_else(|| format!("there is no key {key:?} to remove")),
        Json::Array(a) => {
            let i = index(key, a.len())
                .ok_or_else(|| format!("invalid index {key:?} in an array of {}", a.len()))?;
            Ok(a.remove(i))
        }
        _ => Err("not a container".into()),
    }
}

fn equal(a: &Json, b: &Json) -> bool {
    match (a, b) {
        (Json::Number(x), Json::Number(y)) => x.as_f64() == y.as_f64(),
        (Json::Array(x), Json::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| equal(a, b))
        }
        (Json::Object(x), Json::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| equal(v, w)))
        }
        _ => a == b,
    }
}

fn missing(path: &str) -> String {
    format!("path {path:?} does not exist")
}

fn apply_op(doc: &mut Json, op: &serde_json::Map<String, Json>) -> Result<(), String> {
    let kind = match op.get("op") {
        Some(Json::String(s)) => s.as_str(),
        _ => "unknown",
    };
    let value = op.get("value").cloned().unwrap_or(Json::Null);
    match kind {
        "add" => {
            let path = string_field(op, "path")?;
            let (con, key) = find(doc, &path).ok_or_else(|| missing(&path))?;
            add(con, &key, value)
        }
        "remove" => {
            let path = string_field(op, "path")?;
            let (con, key) = find(doc, &path).ok_or_else(|| missing(&path))?;
            remove(con, &key).map(drop)
        }
        "replace" => {
            let path = string_field(op, "path")?;
            if path.is_empty() {
                if !matches!(value, Json::Object(_) | Json::Array(_)) {
                    return Err("replacing the whole document needs an object or array".into());
                }
                *doc = value;
                return Ok(());
            }
            let (con, key) = find(doc, &path).ok_or_else(|| missing(&path))?;
            get(con, &key)?;
            match con {
                Json::Object(m) => {
                    m.insert(key, value);
                }
                Json::Array(a) => {
                    let i = index(&key, a.len()).ok_or_else(|| missing(&path))?;
                    a[i] = value;
                }
                _ => return Err(missing(&path)),
            }
            Ok(())
        }
        "move" | "copy" => {
            let from = string_field(op, "from")?;
            let (con, key) = find(doc, &from).ok_or_else(|| format!("from {}", missing(&from)))?;
            let val = if kind == "move" {
                get(con, &key)?;
                remove(con, &key)?
            } else {
                get(con, &key)?
                    .cloned()
                    .ok_or_else(|| format!("from {}", missing(&from)))?
            };
            let path = string_field(op, "path")?;
            let (con, key) = find(doc, &path).ok_or_else(|| missing(&path))?;
            add(con, &key, val)
        }
        "test" => {
            let path = string_field(op, "path")?;
            if path.is_empty() {
                return if equal(doc, &value) {
                    Ok(())
                } else {
                    Err("test failed: the document differs".into())
                };
            }
            let (con, key) = find(doc, &path).ok_or_else(|| missing(&path))?;
            let found = get(con, &key)?;
            let ok = match found {
                None => value.is_null(),
                Some(v) => equal(v, &value),
            };
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "test failed: the value at {path:?} is {}, not {}",
                    found.map_or_else(|| "missing".to_owned(), Json::to_string),
                    value
                ))
            }
        }
        other => Err(format!(
            "unknown operation {other:?} (expected add, remove, replace, move, copy or test)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Json, ops: Json) -> Result<Json, String> {
        let mut doc = doc;
        for op in ops.as_array().expect("list") {
            apply_op(&mut doc, op.as_object().expect("object"))?;
        }
        Ok(doc)
    }

    #[test]
    fn pointers_escape_and_arrays_append() {
        let got = run(
            json!({"a": {"b/c": 1, "d~e": [1, 2]}}),
            json!([
                {"op": "add", "path": "/a/b~1c", "value": 2},
                {"op": "add", "path": "/a/d~0e/-", "value": 3},
                {"op": "add", "path": "/a/d~0e/0", "value": 0},
                {"op": "remove", "path": "/a/d~0e/-1"},
            ]),
        )
        .expect("applies");
        assert_eq!(got, json!({"a": {"b/c": 2, "d~e": [0, 1, 2]}}));
    }

    #[test]
    fn library_quirks() {
        // replace of a missing key in an existing object adds it; add without value is null.
        let got = run(
            json!({"a": {}}),
            json!([{"op": "replace", "path": "/a/x", "value": 1}, {"op": "add", "path": "/a/y"}]),
        )
        .expect("applies");
        assert_eq!(got, json!({"a": {"x": 1, "y": null}}));
        assert!(
            run(
                json!({}),
                json!([{"op": "test", "path": "/x", "value": null}])
            )
            .is_ok()
        );
    }

    #[test]
    fn errors() {
        let e = run(
            json!({}),
            json!([{"op": "replace", "path": "/a/b", "value": 1}]),
        )
        .expect_err("missing parent");
        assert_eq!(e, "path \"/a/b\" does not exist");
        let e = run(
            json!({"a": [1]}),
            json!([{"op": "add", "path": "/a/3", "value": 1}]),
        )
        .expect_err("out of range");
        assert_eq!(e, "index 3 is out of range for an array of 1");
        let e = run(json!({}), json!([{"op": "frob", "path": "/a"}])).expect_err("unknown op");
        assert!(e.starts_with("unknown operation \"frob\""));
    }
}
