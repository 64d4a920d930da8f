//! Defaults and flow control: `default`, `empty`, `coalesce`, `all`, `any`, `ternary`,
//! `compact`/`mustCompact`, `deepCopy`/`mustDeepCopy`.

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, List, Map, Signature, Value};

use super::{add, is_empty, kind_of_or_panic, slice_items};

use ArgType::Any;

pub(crate) fn register(map: &mut FuncMap) {
    add(map, "default", Signature::variadic([Any], Any), |a| {
        Ok(match a.get(1) {
            Some(given) if !is_empty(given) => given.clone(),
            _ => a[0].clone(),
        })
    });
    add(map, "empty", Signature::fixed([Any]), |a| {
        Ok(Value::Bool(is_empty(&a[0])))
    });
    add(map, "coalesce", Signature::variadic([], Any), |a| {
        Ok(a.iter()
            .find(|v| !is_empty(v))
            .cloned()
            .unwrap_or(Value::Nil))
    });
    add(map, "all", Signature::variadic([], Any), |a| {
        Ok(Value::Bool(a.iter().all(|v| !is_empty(v))))
    });
    add(map, "any", Signature::variadic([], Any), |a| {
        Ok(Value::Bool(a.iter().any(|v| !is_empty(v))))
    });
    add(
        map,
        "ternary",
        Signature::fixed([Any, Any, ArgType::Bool]),
        |a| {
            Ok(if matches!(a[2], Value::Bool(true)) {
                a[0].clone()
            } else {
                a[1].clone()
            })
        },
    );
    add(map, "compact", Signature::fixed([Any]), compact);
    add(map, "mustCompact", Signature::fixed([Any]), compact);
    for name in ["deepCopy", "mustDeepCopy"] {
        add(map, name, Signature::fixed([Any]), |a| {
            if a[0].is_nil() {
                // copystructure panics on a nil interface.
                return Err(FuncError::new(
                    "reflect: call of reflect.Value.Type on zero Value",
                ));
            }
            deep_copy(&a[0], 0)
        });
    }
}

fn compact(a: &[Value]) -> Result<Value, FuncError> {
    let kind = kind_of_or_panic(&a[0])?;
    let Some(items) = slice_items(&a[0]) else {
        return Err(FuncError::new(format!("Cannot compact on type {kind}")));
    };
    Ok(Value::list(
        items.into_iter().filter(|v| !is_empty(v)).collect(),
    ))
}

/// copystructure's `Copy`: new maps and slices all the way down, same types.
pub(crate) fn deep_copy(v: &Value, depth: usize) -> Result<Value, FuncError> {
    if depth > flotilla_gotmpl::value::MAX_VALUE_DEPTH {
        return Err(FuncError::new("deepCopy error: value nested too deeply"));
    }
    Ok(match v {
        Value::List(l) => Value::List(List::typed(
            l.items()
                .iter()
                .map(|x| deep_copy(x, depth + 1))
                .collect::<Result<_, _>>()?,
            l.elem(),
        )),
        Value::Map(m) => {
            let mut entries = std::collections::BTreeMap::new();
            for (k, x) in m.entries() {
                entries.insert(k, deep_copy(&x, depth + 1)?);
            }
            Value::Map(Map::typed(entries, m.map_type().clone()))
        }
        other => other.clone(),
    })
}
