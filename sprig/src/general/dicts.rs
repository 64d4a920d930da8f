//! Dictionary functions. Dicts are Go maps: shared by reference, so `set`, `unset` and the
//! `merge` family mutate their first argument in place. `merge*` follow dario.cat/mergo
//! v1.0.1 (`Merge` fills missing or empty destination values, recursing into maps;
//! `MergeWithOverwrite` lets source values win, nil included); maps copied from a source are
//! shared with it.

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Map, MapType, Signature, Value};

use super::{add, arg_str, is_empty, slice_items, strval};

use ArgType::{Any, String as Str};

/// A `map[string]interface {}` parameter as Go sees it inside the function (a named map type
/// converted to the parameter type); `None` for nil.
fn param_map(v: &Value) -> Option<Map> {
    match v {
        Value::Map(m) => Some(m.with_type(MapType::Interface)),
        _ => None,
    }
}

pub(crate) fn register(map: &mut FuncMap) {
    let m = || ArgType::Map;
    add(map, "dict", Signature::variadic([], Any), |a| {
        let d = Map::new();
        for pair in a.chunks(2) {
            let key = strval(&pair[0]);
            d.insert(key, pair.get(1).cloned().unwrap_or_else(|| Value::from("")));
        }
        Ok(Value::Map(d))
    });
    add(map, "get", Signature::fixed([m(), Str]), |a| {
        Ok(param_map(&a[0])
            .and_then(|d| d.get(arg_str(a, 1)))
            .unwrap_or_else(|| Value::from("")))
    });
    add(map, "set", Signature::fixed([m(), Str, Any]), |a| {
        let Some(d) = param_map(&a[0]) else {
            return Err(FuncError::new("assignment to entry in nil map"));
        };
        d.insert(arg_str(a, 1), a[2].clone());
        Ok(Value::Map(d))
    });
    add(map, "unset", Signature::fixed([m(), Str]), |a| {
        Ok(match param_map(&a[0]) {
            Some(d) => {
                d.remove(arg_str(a, 1));
                Value::Map(d)
            }
            None => Value::Map(Map::new()),
        })
    });
    add(map, "hasKey", Signature::fixed([m(), Str]), |a| {
        Ok(Value::Bool(
            param_map(&a[0]).is_some_and(|d| d.contains_key(arg_str(a, 1))),
        ))
    });
    add(map, "pluck", Signature::variadic([Str], m()), |a| {
        let key = arg_str(a, 0);
        Ok(Value::list(
            a[1..]
                .iter()
                .filter_map(param_map)
                .filter_map(|d| d.get(key))
                .collect(),
        ))
    });
    add(map, "keys", Signature::variadic([], m()), |a| {
        let mut out = Vec::new();
        for d in a.iter().filter_map(param_map) {
            out.extend(d.keys());
        }
        Ok(super::string_list(out))
    });
    add(map, "values", Signature::fixed([m()]), |a| {
        Ok(Value::list(
            param_map(&a[0])
                .map(|d| d.entries().into_iter().map(|(_, v)| v).collect())
                .unwrap_or_default(),
        ))
    });
    add(map, "pick", Signature::variadic([m()], Str), |a| {
        let out = Map::new();
        if let Some(d) = param_map(&a[0]) {
            for k in &a[1..] {
                let k = k.as_str().unwrap_or_default();
                if let Some(v) = d.get(k) {
                    out.insert(k, v);
                }
            }
        }
        Ok(Value::Map(out))
    });
    add(map, "omit", Signature::variadic([m()], Str), |a| {
        let out = Map::new();
        if let Some(d) = param_map(&a[0]) {
            let omit: Vec<&str> = a[1..].iter().filter_map(Value::as_str).collect();
            for (k, v) in d.entries() {
                if !omit.contains(&k.as_str()) {
                    out.insert(k, v);
                }
            }
        }
        Ok(Value::Map(out))
    });
    for (name, overwrite) in [
        ("merge", false),
        ("mustMerge", false),
        ("mergeOverwrite", true),
        ("mustMergeOverwrite", true),
    ] {
        add(map, name, Signature::variadic([m()], m()), move |a| {
            let dst = param_map(&a[0]).unwrap_or_default();
            for src in a[1..].iter().filter_map(param_map) {
                merge_into(&dst, &src, overwrite, 0)?;
            }
            Ok(Value::Map(dst))
        });
    }
    add(map, "dig", Signature::variadic([], Any), dig);
}

/// How deep `merge` follows nested maps before giving up (Go would overflow its stack on a
/// cyclic map).
const MAX_MERGE_DEPTH: usize = 10_000;

fn merge_into(dst: &Map, src: &Map, overwrite: bool, depth: usize) -> Result<(), FuncError> {
    if depth > MAX_MERGE_DEPTH || depth > flotilla_gotmpl::value::MAX_VALUE_DEPTH {
        return Err(FuncError::new(
            "runtime: goroutine stack exceeds 1000000000-byte limit",
        ));
    }
    if dst.ptr_eq(src) && !overwrite {
        // Every key is present with its own value: nothing changes.
        return Ok(());
    }
    for (key, sv) in src.entries() {
        let dv = dst.get(&key);
        if sv.is_nil() {
            if overwrite {
                dst.insert(key, Value::Nil);
            }
            continue;
        }
        if let Value::Map(sm) = &sv {
            if let Some(Value::Map(dm)) = &dv {
                merge_into(dm, sm, overwrite, depth + 1)?;
            }
            if let Some(d @ Value::Map(_)) = &dv
                && !is_empty(d)
            {
                continue;
            }
        }
        if slice_items(&sv).is_some() && overwrite {
            dst.insert(key, sv);
            continue;
        }
        if slice_items(&sv).is_some() && dv.as_ref().is_some_and(|d| !is_empty(d)) {
            continue;
        }
        if overwrite || dv.as_ref().is_none_or(is_empty) {
            dst.insert(key, sv);
        }
    }
    Ok(())
}

fn assertion(v: &Value, want: &str) -> FuncError {
    let got = if v.is_nil() {
        "nil".to_string()
    } else {
        v.type_name()
    };
    FuncError::new(format!(
        "interface conversion: interface {{}} is {got}, not {want}"
    ))
}

fn as_plain_map(v: &Value) -> Result<Map, FuncError> {
    match v {
        Value::Map(m) if *m.map_type() == MapType::Interface => Ok(m.clone()),
        other => Err(assertion(other, "map[string]interface {}")),
    }
}

fn dig(a: &[Value]) -> Result<Value, FuncError> {
    if a.len() < 3 {
        return Err(FuncError::new("dig needs at least three arguments"));
    }
    let mut dict = as_plain_map(&a[a.len() - 1])?;
    let default = &a[a.len() - 2];
    let mut keys = Vec::with_capacity(a.len() - 2);
    for k in &a[..a.len() - 2] {
        match k {
            Value::String(s) => keys.push(s.to_string()),
            other => return Err(assertion(other, "string")),
        }
    }
    for (i, k) in keys.iter().enumerate() {
        let Some(step) = dict.get(k) else {
            return Ok(default.clone());
        };
        if i + 1 == keys.len() {
            return Ok(step);
        }
        dict = as_plain_map(&step)?;
    }
    Ok(default.clone())
}
