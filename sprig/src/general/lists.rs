//! List functions. Sprig accepts any slice (`reflect.Slice`/`reflect.Array`) and returns
//! `[]interface {}` copies; the plain variants panic where the `must*` ones return the same
//! error, so both report `Cannot <verb> on type <kind>`.

use flotilla_gotmpl::{ArgType, FuncError, FuncMap, Signature, Value};

use super::{add, kind_of_or_panic, slice_items, to_int64};

use ArgType::{Any, Int};

/// The items of a slice argument, or Sprig's error naming the kind.
fn items_or(v: &Value, what: &str) -> Result<Vec<Value>, FuncError> {
    let kind = kind_of_or_panic(v)?;
    slice_items(v).ok_or_else(|| FuncError::new(format!("{what} {kind}")))
}

/// Registers `name` and `mustName` with the same implementation.
fn both(
    map: &mut FuncMap,
    name: &str,
    sig: Signature,
    f: impl Fn(&[Value]) -> Result<Value, FuncError> + Send + Sync + Clone + 'static,
) {
    let mut must = String::from("must");
    let mut chars = name.chars();
    if let Some(c) = chars.next() {
        must.push(c.to_ascii_uppercase());
        must.push_str(chars.as_str());
    }
    add(map, name, sig.clone(), f.clone());
    add(map, &must, sig, f);
}

pub(crate) fn register(map: &mut FuncMap) {
    for name in ["list", "tuple"] {
        add(map, name, Signature::variadic([], Any), |a| {
            Ok(Value::list(a.to_vec()))
        });
    }
    for name in ["append", "push"] {
        both(map, name, Signature::fixed([Any, Any]), |a| {
            let mut items = items_or(&a[0], "Cannot push on type")?;
            items.push(a[1].clone());
            Ok(Value::list(items))
        });
    }
    both(map, "prepend", Signature::fixed([Any, Any]), |a| {
        let mut items = items_or(&a[0], "Cannot prepend on type")?;
        items.insert(0, a[1].clone());
        Ok(Value::list(items))
    });
    both(map, "chunk", Signature::fixed([Int, Any]), |a| {
        let size = super::arg_int(a, 0);
        let items = items_or(&a[1], "Cannot chunk type")?;
        chunk(size, items)
    });
    both(map, "first", Signature::fixed([Any]), |a| {
        let items = items_or(&a[0], "Cannot find first on type")?;
        Ok(items.first().cloned().unwrap_or(Value::Nil))
    });
    both(map, "last", Signature::fixed([Any]), |a| {
        let items = items_or(&a[0], "Cannot find last on type")?;
        Ok(items.last().cloned().unwrap_or(Value::Nil))
    });
    both(map, "rest", Signature::fixed([Any]), |a| {
        let items = items_or(&a[0], "Cannot find rest on type")?;
        Ok(if items.is_empty() {
            nil_list()
        } else {
            Value::list(items[1..].to_vec())
        })
    });
    both(map, "initial", Signature::fixed([Any]), |a| {
        let items = items_or(&a[0], "Cannot find initial on type")?;
        Ok(match items.split_last() {
            None => nil_list(),
            Some((_, init)) => Value::list(init.to_vec()),
        })
    });
    both(map, "reverse", Signature::fixed([Any]), |a| {
        let mut items = items_or(&a[0], "Cannot find reverse on type")?;
        items.reverse();
        Ok(Value::list(items))
    });
    both(map, "uniq", Signature::fixed([Any]), |a| {
        let items = items_or(&a[0], "Cannot find uniq on type")?;
        let mut out: Vec<Value> = Vec::new();
        for v in items {
            if !out.iter().any(|x| v.deep_equal(x)) {
                out.push(v);
            }
        }
        Ok(Value::list(out))
    });
    both(map, "without", Signature::variadic([Any], Any), |a| {
        let items = items_or(&a[0], "Cannot find without on type")?;
        let omit = &a[1..];
        Ok(Value::list(
            items
                .into_iter()
                .filter(|v| !omit.iter().any(|o| v.deep_equal(o)))
                .collect(),
        ))
    });
    both(map, "has", Signature::fixed([Any, Any]), |a| {
        if a[1].is_nil() {
            return Ok(Value::Bool(false));
        }
        let items = items_or(&a[1], "Cannot find has on type")?;
        Ok(Value::Bool(items.iter().any(|v| a[0].deep_equal(v))))
    });
    both(map, "slice", Signature::variadic([Any], Any), slice);
    add(map, "concat", Signature::variadic([], Any), |a| {
        let mut out = Vec::new();
        for l in a {
            let kind = kind_of_or_panic(l)?;
            match slice_items(l) {
                Some(items) => out.extend(items),
                None => return Err(FuncError::new(format!("Cannot concat type {kind} as list"))),
            }
        }
        Ok(if out.is_empty() {
            nil_list()
        } else {
            Value::list(out)
        })
    });
}

/// A nil `[]interface {}` (prints `[]`, is empty).
fn nil_list() -> Value {
    Value::list(Vec::new())
}

fn chunk(size: i64, items: Vec<Value>) -> Result<Value, FuncError> {
    let l = items.len() as i64;
    // cs := int(math.Floor(float64(l-1)/float64(size)) + 1)
    let csf = (((l - 1) as f64) / (size as f64)).floor() + 1.0;
    if !csf.is_finite() || csf < 0.0 {
        return Err(FuncError::new("runtime error: makeslice: len out of range"));
    }
    let cs = super::f64_to_i64(csf);
    if cs > l.max(1) {
        return Err(FuncError::new("runtime error: makeslice: len out of range"));
    }
    let mut out = Vec::with_capacity(cs as usize);
    for i in 0..cs {
        let mut clen = size;
        if i == cs - 1 {
            let m = (l as f64) % (size as f64);
            clen = super::f64_to_i64(m.floor());
            if clen == 0 {
                clen = size;
            }
        }
        if clen < 0 {
            return Err(FuncError::new("runtime error: makeslice: len out of range"));
        }
        let mut part = Vec::with_capacity(clen.min(l) as usize);
        for j in 0..clen {
            let ix = i * size + j;
            match usize::try_from(ix).ok().and_then(|ix| items.get(ix)) {
                Some(v) => part.push(v.clone()),
                None => {
                    return Err(FuncError::new("reflect: slice index out of range"));
                }
            }
        }
        out.push(Value::list(part));
    }
    Ok(Value::list(out))
}

fn slice(a: &[Value]) -> Result<Value, FuncError> {
    let kind = kind_of_or_panic(&a[0])?;
    let Some(items) = slice_items(&a[0]) else {
        return Err(FuncError::new(format!(
            "list should be type of slice or array but {kind}"
        )));
    };
    if items.is_empty() {
        return Ok(Value::Nil);
    }
    let l = items.len() as i64;
    let start = a.get(1).map_or(0, to_int64);
    let end = a.get(2).map_or(l, to_int64);
    if start < 0 || end < start || end > l {
        return Err(FuncError::new(
            "reflect.Value.Slice: slice index out of bounds",
        ));
    }
    let part = items[start as usize..end as usize].to_vec();
    Ok(match &a[0] {
        Value::List(orig) => Value::List(flotilla_gotmpl::List::typed(part, orig.elem())),
        Value::Bytes(_) => Value::Bytes(
            part.iter()
                .map(|v| if let Value::Uint8(b) = v { *b } else { 0 })
                .collect::<Vec<u8>>()
                .into(),
        ),
        _ => Value::list(part),
    })
}
