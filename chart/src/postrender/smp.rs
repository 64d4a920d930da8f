//! kustomize's `patches` entries: telling strategic merge from JSON 6902, finding the
//! targets, and strategic merge itself, as kustomize's kyaml walker merges.
//!
//! The merge, per node, patch over object:
//! - maps merge field by field; a `null` in the patch removes the field; `$patch: delete`
//!   removes the map, `$patch: replace` replaces it, `$patch: merge` is the default (the
//!   directive itself is dropped);
//! - scalars and lists without a merge strategy (custom resources, atomic lists) are
//!   replaced by the patch's;
//! - lists whose schema says `merge` are merged by their keys: elements are matched by the
//!   key values, merged, and ordered with the patch's elements first (kyaml prepends), then
//!   the object's others; with several keys (`ports`: containerPort and protocol) the object's
//!   elements come after the patch-only ones; lists of scalars become the union, the patch's
//!   values first; a `- $patch: delete|replace` element applies to the whole list;
//!   `$patch: replace` on an element the object already has leaves that element unchanged
//!   (kyaml puts the object's own element back);
//! - other `$` keys (`$setElementOrder/…`, `$retainKeys`, `$deleteFromPrimitiveList/…`)
//!   are not directives to kyaml: they stay in the output as ordinary fields.

use flotilla_yaml::{Mapping, Value};

use super::schema::{self, Node};
use super::select::Compiled;
use super::{
    Patch, Resource, effective_namespace, json6902, kind_name, meta_str, scalar_text, str_field,
    without,
};

const DIRECTIVE: &str = "$patch";

/// Applies one `patches` entry to the objects.
pub(super) fn apply_patch(resources: &mut Vec<Resource>, patch: &Patch) -> Result<(), String> {
    let text = patch.patch.trim();
    if text.is_empty() {
        return Err("patch is empty".into());
    }
    let sm = parse_strategic_merge(text);
    let json = json6902::parse(text);
    match (sm, json) {
        (Ok(sm), Ok(ops)) if !sm.is_empty() && !ops.is_empty() => {
            Err("patch is both a strategic merge patch and a JSON 6902 patch".into())
        }
        (Ok(sm), _) => apply_strategic_merge(resources, sm, patch),
        (Err(_), Ok(ops)) => {
            let Some(target) = &patch.target else {
                return Err("a JSON 6902 patch needs a target".into());
            };
            let selector = Compiled::new(target)?;
            for r in resources.iter_mut() {
                if selector.matches(r) {
                    json6902::apply(r, &ops).map_err(|e| format!("{}: {e}", r.describe()))?;
                }
            }
            Ok(())
        }
        (Err(sm_err), Err(json_err)) => Err(format!(
            "not a strategic merge patch ({sm_err}) nor a JSON 6902 patch ({json_err})"
        )),
    }
}

/// The documents of a strategic merge patch; each needs a kind and a name (kustomize's
/// resource factory refuses others).
fn parse_strategic_merge(text: &str) -> Result<Vec<Mapping>, String> {
    let docs = flotilla_yaml::from_str_all(text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Map(m) => {
                let m = super::string_keys(m);
                if str_field(&m, "kind").is_empty() {
                    return Err(format!("document {}: missing kind", i + 1));
                }
                if meta_str(&m, "name").is_empty() {
                    return Err(format!("document {}: missing metadata.name", i + 1));
                }
                out.push(m);
            }
            other => {
                return Err(format!(
                    "document {}: expected a mapping, found a {}",
                    i + 1,
                    kind_name(&other)
                ));
            }
        }
    }
    Ok(out)
}

fn describe_patch(p: &Mapping) -> String {
    let ns = meta_str(p, "namespace");
    let name = meta_str(p, "name");
    let kind = str_field(p, "kind");
    let av = str_field(p, "apiVersion");
    let av = if av.is_empty() { "(no apiVersion)" } else { av };
    if ns.is_empty() {
        format!("{av} {kind} {name}")
    } else {
        format!("{av} {kind} {ns}/{name}")
    }
}

fn apply_strategic_merge(
    resources: &mut Vec<Resource>,
    patches: Vec<Mapping>,
    patch: &Patch,
) -> Result<(), String> {
    if let Some(target) = &patch.target {
        if patches.len() > 1 {
            return Err(
                "a patch with a target must hold one strategic merge document, not several".into(),
            );
        }
        let Some(p) = patches.into_iter().next() else {
            return Ok(());
        };
        let selector = Compiled::new(target)?;
        let mut kept = Vec::with_capacity(resources.len());
        for r in resources.drain(..) {
            if !selector.matches(&r) {
                kept.push(r);
                continue;
            }
            // The patch takes the target's apiVersion (its kind stays its own).
            let mut copy = p.clone();
            copy.insert(
                Value::String("apiVersion".into()),
                Value::String(r.api_version().to_owned()),
            );
            let described = r.describe();
            if let Some(r) = merge_resource(r, &copy).map_err(|e| format!("{described}: {e}"))? {
                kept.push(r);
            }
        }
        *resources = kept;
        return Ok(());
    }
    for p in patches {
        let (av, kind, name) = (
            str_field(&p, "apiVersion"),
            str_field(&p, "kind"),
            meta_str(&p, "name"),
        );
        let ns = effective_namespace(av, kind, meta_str(&p, "namespace"));
        let hits: Vec<usize> = resources
            .iter()
            .enumerate()
            .filter(|(_, r)| {
                r.api_version() == av
                    && r.kind() == kind
                    && (r.name() == name || r.original_name == name)
                    && (effective_namespace(av, kind, r.namespace()) == ns
                        || effective_namespace(av, kind, &r.original_namespace) == ns)
            })
            .map(|(i, _)| i)
            .collect();
        let index = match hits.as_slice() {
            [i] => *i,
            [] => {
                return Err(format!(
                    "no object matches strategic merge patch {} (without a target, the patch's own apiVersion, kind, name and namespace select the object)",
                    describe_patch(&p)
                ));
            }
            _ => {
                return Err(format!(
                    "several objects match strategic merge patch {}",
                    describe_patch(&p)
                ));
            }
        };
        let r = resources.remove(index);
        let described = r.describe();
        if let Some(r) = merge_resource(r, &p).map_err(|e| format!("{described}: {e}"))? {
            resources.insert(index, r);
        }
    }
    Ok(())
}

/// kustomize's `Resource.ApplySmPatch`: merge, then put back the kind, name and namespace.
/// `None` when the patch deletes the object.
fn merge_resource(r: Resource, patch: &Mapping) -> Result<Option<Resource>, String> {
    let (kind, name, namespace) = (
        r.kind().to_owned(),
        r.name().to_owned(),
        r.namespace().to_owned(),
    );
    let schema = schema::for_kind(r.api_version(), r.kind());
    let merged = merge(
        Some(&Value::Map(r.object.clone())),
        Some(&Value::Map(patch.clone())),
        schema,
        "",
    )?;
    let mut object = match merged {
        None => return Ok(None),
        Some(Value::Map(m)) if m.is_empty() => return Ok(None),
        Some(Value::Map(m)) => m,
        Some(other) => {
            return Err(format!(
                "the merge produced a {}, not an object",
                kind_name(&other)
            ));
        }
    };
    object.insert(Value::String("kind".into()), Value::String(kind));
    let mut meta = match object.get_str("metadata") {
        Some(Value::Map(m)) => m.clone(),
        _ => Mapping::new(),
    };
    meta.insert(Value::String("name".into()), Value::String(name));
    if namespace.is_empty() {
        meta = without(meta, "namespace");
    } else {
        meta.insert(Value::String("namespace".into()), Value::String(namespace));
    }
    object.insert(Value::String("metadata".into()), Value::Map(meta));
    Ok(Some(Resource {
        object,
        original_name: r.original_name,
        original_namespace: r.original_namespace,
    }))
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Directive {
    Merge,
    Replace,
    Delete,
}

fn directive_value(v: &Value, at: &str) -> Result<Directive, String> {
    match v.as_str() {
        Some("merge") => Ok(Directive::Merge),
        Some("replace") => Ok(Directive::Replace),
        Some("delete") => Ok(Directive::Delete),
        _ => Err(format!(
            "{}: unknown patch strategy {:?} (expected merge, replace or delete)",
            at_path(at),
            scalar_text(v)
        )),
    }
}

fn at_path(at: &str) -> &str {
    if at.is_empty() { "(root)" } else { at }
}

/// The `$patch` directive of a patch map, and the map without it.
fn map_directive(patch: &Mapping, at: &str) -> Result<(Directive, Mapping), String> {
    match patch.get_str(DIRECTIVE) {
        None => Ok((Directive::Merge, patch.clone())),
        Some(v) => Ok((directive_value(v, at)?, without(patch.clone(), DIRECTIVE))),
    }
}

/// The `- $patch: x` element of a patch list (an element whose only field is `$patch`), and
/// the list without such elements.
fn list_directive(patch: &[Value], at: &str) -> Result<(Directive, Vec<Value>), String> {
    let found = patch.iter().find_map(|e| match e {
        Value::Map(m) if m.get_str(DIRECTIVE).is_some() => Some(m),
        _ => None,
    });
    let Some(m) = found else {
        return Ok((Directive::Merge, patch.to_vec()));
    };
    if m.len() > 1 {
        return Ok((Directive::Merge, patch.to_vec()));
    }
    let value = m.get_str(DIRECTIVE).cloned().unwrap_or(Value::Null);
    let d = directive_value(&value, at)?;
    let rest = patch
        .iter()
        .filter(
            |e| !matches!(e, Value::Map(m) if m.len() == 1 && m.get_str(DIRECTIVE) == Some(&value)),
        )
        .cloned()
        .collect();
    Ok((d, rest))
}

fn is_null(v: Option<&Value>) -> bool {
    matches!(v, None | Some(Value::Null))
}

#[derive(PartialEq, Eq)]
enum Shape {
    Map,
    Seq,
    Scalar,
}

fn shape(v: &Value) -> Shape {
    match v {
        Value::Map(_) => Shape::Map,
        Value::Seq(_) => Shape::Seq,
        _ => Shape::Scalar,
    }
}

/// Merges `patch` into `dest` at `at` (a dotted path, for messages). `None` removes the node.
fn merge(
    dest: Option<&Value>,
    patch: Option<&Value>,
    schema: Option<Node>,
    at: &str,
) -> Result<Option<Value>, String> {
    let first = [dest, patch]
        .into_iter()
        .flatten()
        .find(|v| !matches!(v, Value::Null));
    let Some(first) = first else {
        return merge_map(dest, patch, schema, at);
    };
    let want = shape(first);
    for v in [dest, patch].into_iter().flatten() {
        if !matches!(v, Value::Null) && shape(v) != want {
            let (d, p) = (
                dest.map_or("nothing", kind_name),
                patch.map_or("nothing", kind_name),
            );
            return Err(format!(
                "{}: cannot merge a {p} from the patch with a {d}",
                at_path(at)
            ));
        }
    }
    match want {
        Shape::Map => merge_map(dest, patch, schema, at),
        Shape::Seq => merge_list(dest, patch, schema, at),
        Shape::Scalar => Ok(match patch {
            Some(Value::Null) => None,
            Some(p) => Some(p.clone()),
            None => dest.cloned(),
        }),
    }
}

fn merge_map(
    dest: Option<&Value>,
    patch: Option<&Value>,
    schema: Option<Node>,
    at: &str,
) -> Result<Option<Value>, String> {
    let patch_map = match patch {
        Some(Value::Map(m)) => Some(m),
        _ => None,
    };
    // The patch without its directive: both sources from here on (kyaml elides it in place).
    let (directive, patch_map) = match patch_map {
        Some(m) => {
            let (d, m) = map_directive(m, at)?;
            (d, Some(m))
        }
        None => (Directive::Merge, None),
    };
    let base: Mapping = if is_null(dest) {
        if directive == Directive::Delete {
            return Ok(None);
        }
        match (patch, &patch_map) {
            // A null in the object the patch does not touch stays.
            (None, _) => return Ok(dest.cloned()),
            (Some(Value::Null), _) => return Ok(None),
            (_, Some(m)) => m.clone(),
            (Some(other), None) => return Ok(Some(other.clone())),
        }
    } else {
        if matches!(patch, Some(Value::Null)) {
            return Ok(None);
        }
        match directive {
            Directive::Delete => return Ok(None),
            Directive::Replace => patch_map.clone().unwrap_or_default(),
            Directive::Merge => match dest {
                Some(Value::Map(m)) => m.clone(),
                _ => Mapping::new(),
            },
        }
    };
    // The schema of an object embedded with its own apiVersion and kind.
    let schema = schema.or_else(|| {
        [Some(&base), patch_map.as_ref()]
            .into_iter()
            .flatten()
            .find_map(|m| {
                let (av, k) = (str_field(m, "apiVersion"), str_field(m, "kind"));
                (!av.is_empty() && !k.is_empty())
                    .then(|| schema::for_kind(av, k))
                    .flatten()
            })
    });
    let mut names: Vec<String> = base
        .keys()
        .chain(patch_map.iter().flat_map(|m| m.keys()))
        .filter_map(|k| k.as_str().map(str::to_owned))
        .collect();
    names.sort();
    names.dedup();
    let mut out = base.clone();
    for name in names {
        let child_at = if at.is_empty() {
            name.clone()
        } else {
            format!("{at}.{name}")
        };
        let d = base.get_str(&name);
        let p = patch_map.as_ref().and_then(|m| m.get_str(&name));
        let child = merge(d, p, schema.and_then(|s| s.field(&name)), &child_at)?;
        match child {
            Some(Value::Null) if p.is_some() => out = without(out, &name),
            Some(v) => out.insert(Value::String(name), v),
            None => out = without(out, &name),
        }
    }
    Ok(Some(Value::Map(out)))
}

fn merge_list(
    dest: Option<&Value>,
    patch: Option<&Value>,
    schema: Option<Node>,
    at: &str,
) -> Result<Option<Value>, String> {
    let Some(keys) = schema.and_then(Node::merge_keys) else {
        // Not associative: replaced.
        return Ok(match patch {
            Some(Value::Null) => None,
            Some(p) => Some(p.clone()),
            None => dest.cloned(),
        });
    };
    let patch_items: Option<Vec<Value>>;
    let dest_items: Vec<Value>;
    if is_null(dest) {
        let Some(Value::Seq(p)) = patch else {
            return Ok(patch.cloned());
        };
        // The patch list becomes the object's, and is merged with itself.
        dest_items = p.clone();
        patch_items = Some(p.clone());
    } else {
        if matches!(patch, Some(Value::Null)) {
            return Ok(None);
        }
        let d = match dest {
            Some(Value::Seq(d)) => d.clone(),
            _ => Vec::new(),
        };
        match patch {
            Some(Value::Seq(p)) => {
                let (directive, rest) = list_directive(p, at)?;
                match directive {
                    Directive::Delete => return Ok(None),
                    Directive::Replace => {
                        dest_items = rest.clone();
                        patch_items = Some(rest);
                    }
                    Directive::Merge => {
                        dest_items = d;
                        patch_items = Some(rest);
                    }
                }
            }
            _ => {
                dest_items = d;
                patch_items = None;
            }
        }
    }
    let items = schema.and_then(Node::items);
    let patch_items = patch_items.unwrap_or_default();
    let merged = if keys.is_empty() {
        merge_set(&dest_items, &patch_items)
    } else {
        merge_by_keys(&dest_items, &patch_items, keys, items, at)?
    };
    Ok(Some(Value::Seq(merged)))
}

/// A list of scalars merged as a set: the patch's values, then the object's others.
fn merge_set(dest: &[Value], patch: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    for v in patch.iter().chain(dest) {
        let t = scalar_text(v);
        if !seen.contains(&t) {
            seen.push(t);
            out.push(v.clone());
        }
    }
    out
}

/// The text of each key field of an element ("" when missing or empty).
fn key_values(e: &Value, keys: &[&str]) -> Vec<String> {
    keys.iter()
        .map(|k| match e {
            Value::Map(m) => m.get_str(k).map(scalar_text).unwrap_or_default(),
            _ => String::new(),
        })
        .collect()
}

/// Whether element `e` has every `keys[i]` field with text `values[i]`.
fn element_matches(e: &Value, keys: &[&str], values: &[String]) -> bool {
    let Value::Map(m) = e else { return false };
    keys.iter().zip(values).all(|(k, v)| {
        m.get_str(k)
            .is_some_and(|f| !matches!(f, Value::Map(_) | Value::Seq(_)) && scalar_text(f) == *v)
    })
}

/// kyaml's `validateKeys`: the keys some element sets, and the values for them.
fn valid_keys<'k>(
    all: &[Vec<String>],
    values: &[String],
    keys: &[&'k str],
) -> (Vec<&'k str>, Vec<String>) {
    let used: Vec<bool> = (0..keys.len())
        .map(|i| all.iter().any(|vals| !vals[i].is_empty()))
        .collect();
    if !used.iter().any(|u| *u) {
        return (keys.to_vec(), values.to_vec());
    }
    let k = keys
        .iter()
        .zip(&used)
        .filter(|(_, u)| **u)
        .map(|(k, _)| *k)
        .collect();
    let v = values
        .iter()
        .zip(&used)
        .filter(|(v, u)| !v.is_empty() || **u)
        .map(|(v, _)| v.clone())
        .collect();
    (k, v)
}

/// kyaml's `mergeValues`: with several keys, tuples that agree where both are set and share
/// one value are the same element.
fn merge_key_values(list: &mut [Vec<String>]) {
    for i in 0..list.len() {
        for j in 0..list.len() {
            let (a, b) = (&list[i], &list[j]);
            if a.len() != b.len() {
                continue;
            }
            let mut common = false;
            let mut res = Vec::with_capacity(a.len());
            let mut ok = true;
            for (x, y) in a.iter().zip(b) {
                if x == y {
                    common = true;
                    res.push(x.clone());
                } else if !x.is_empty() && !y.is_empty() {
                    ok = false;
                    break;
                } else if !x.is_empty() {
                    res.push(x.clone());
                } else {
                    res.push(y.clone());
                }
            }
            if ok && common {
                list[i] = res.clone();
                list[j] = res;
            }
        }
    }
}

fn is_empty_map(v: &Value) -> bool {
    matches!(v, Value::Map(m) if m.is_empty())
}

fn merge_by_keys(
    dest: &[Value],
    patch: &[Value],
    keys: &[&str],
    items: Option<Node>,
    at: &str,
) -> Result<Vec<Value>, String> {
    // Key tuples, the patch's first.
    let mut values: Vec<Vec<String>> = Vec::new();
    for e in patch.iter().chain(dest) {
        let v = key_values(e, keys);
        if !values.contains(&v) {
            values.push(v);
        }
    }
    if keys.len() > 1 {
        merge_key_values(&mut values);
    }
    let mut dest: Vec<Value> = dest.to_vec();
    let mut added: Vec<(Vec<String>, Value)> = Vec::new();
    let mut last_keys: Vec<&str> = keys.to_vec();
    for tuple in &values {
        let (vk, vv) = valid_keys(&values, tuple, keys);
        last_keys.clone_from(&vk);
        // Which elements the tuple picks, by the keys it sets.
        let (mk, mv) = valid_keys(std::slice::from_ref(&vv), &vv, &vk);
        let d = dest.iter().find(|e| element_matches(e, &mk, &mv));
        let p = patch.iter().find(|e| element_matches(e, &mk, &mv));
        let label = format!("{at}[{}]", vv.join(","));
        // kyaml merges an element into the object's own node and then puts the object's
        // node back in the list; `$patch: replace` makes a new node, which is then dropped
        // for the object's unchanged one.
        let replaces = matches!(p, Some(Value::Map(m)) if m.get_str(DIRECTIVE).and_then(Value::as_str) == Some("replace"));
        let merged = if let (true, Some(d)) = (replaces, d) {
            Some(d.clone())
        } else {
            merge(d, p, items, &label)?
        };
        let merged = match merged {
            Some(v) if !matches!(v, Value::Null) && !is_empty_map(&v) => v,
            _ => {
                dest.retain(|e| !element_matches(e, &vk, &vv));
                continue;
            }
        };
        let mut merged = merged;
        if let Value::Map(m) = &mut merged {
            for (k, v) in vk.iter().zip(&vv) {
                if m.get_str(k).is_none() && !v.is_empty() {
                    m.insert(Value::String((*k).to_owned()), Value::String(v.clone()));
                }
            }
        }
        match added.iter_mut().find(|(_, e)| element_matches(e, &vk, &vv)) {
            Some(slot) => slot.1 = merged,
            None => added.push((vv, merged)),
        }
    }
    // The object's elements that remain take their place again: in place with one key,
    // moved to the end with several.
    let mut out: Vec<Value> = added.into_iter().map(|(_, v)| v).collect();
    for e in &dest {
        let present: Vec<(&str, String)> = last_keys
            .iter()
            .filter_map(|k| match e {
                Value::Map(m) => m.get_str(k).map(|v| (*k, scalar_text(v))),
                _ => None,
            })
            .collect();
        let (pk, pv): (Vec<&str>, Vec<String>) = present.into_iter().unzip();
        let found = if pk.is_empty() {
            None
        } else {
            out.iter().position(|o| element_matches(o, &pk, &pv))
        };
        match found {
            Some(pos) if last_keys.len() > 1 => {
                let v = out.remove(pos);
                out.push(v);
            }
            Some(_) => {}
            None => out.push(e.clone()),
        }
    }
    Ok(out)
}
