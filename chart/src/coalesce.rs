//! Helm's values coalescing (`pkg/chart/common/util/coalesce.go`, Helm v4.1): chart defaults
//! under user values, subchart scopes, globals, `null` deleting keys. Warnings Helm logs are
//! collected and returned in a deterministic (sorted-key) order.

use serde_json::Value;

use crate::chart::Chart;
use crate::gofmt::{go_t, go_v};
use crate::values::Values;

/// Coalescing can only fail on a subchart section that is not a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("type mismatch on {name}: {shown}")]
pub struct CoalesceError {
    /// Subchart name.
    pub name: String,
    /// The offending value as Go's `%t` shows it.
    pub shown: String,
}

/// Warnings Helm prints to stderr while processing values.
pub type Warnings = Vec<Warning>;

/// A log record Helm writes to stderr (through `log/slog`'s text handler): `Display` is the
/// exact line, e.g. `level=INFO msg="warning: cannot overwrite table with non table for x (map[])"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Warning {
    /// `INFO` (Helm's `log.Printf` messages) or `WARN` (`slog.Warn`).
    pub level: &'static str,
    /// The message.
    pub message: String,
    /// Extra attributes, in order.
    pub attrs: Vec<(&'static str, String)>,
}

impl Warning {
    /// A `log.Printf` message (slog level INFO).
    pub fn info(message: impl Into<String>) -> Self {
        Warning {
            level: "INFO",
            message: message.into(),
            attrs: Vec::new(),
        }
    }

    /// A `slog.Warn` record.
    pub fn warn(message: impl Into<String>, attrs: Vec<(&'static str, String)>) -> Self {
        Warning {
            level: "WARN",
            message: message.into(),
            attrs,
        }
    }
}

fn slog_value(s: &str) -> String {
    let needs = s.is_empty()
        || s.chars()
            .any(|c| c == ' ' || c == '=' || c == '"' || c.is_control() || c.is_whitespace());
    if needs {
        flotilla_gotmpl::gofmt::quote(s)
    } else {
        s.to_owned()
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "level={} msg={}", self.level, slog_value(&self.message))?;
        for (k, v) in &self.attrs {
            write!(f, " {k}={}", slog_value(v))?;
        }
        Ok(())
    }
}

const GLOBAL: &str = "global";

fn concat_prefix(a: &str, b: &str) -> String {
    if a.is_empty() {
        b.to_owned()
    } else {
        format!("{a}.{b}")
    }
}

/// A dotted key path for warnings, built only when one is written: `Key(p, k)` is
/// `concat_prefix(p, k)`.
#[derive(Clone, Copy)]
enum Prefix<'a> {
    Root(&'a str),
    Key(&'a Prefix<'a>, &'a str),
}

impl Prefix<'_> {
    fn text(&self) -> String {
        match self {
            Prefix::Root(s) => (*s).to_owned(),
            Prefix::Key(p, k) => concat_prefix(&p.text(), k),
        }
    }
}

/// `CoalesceValues(chart, vals)`: the values a render sees (user `null` deletes defaults).
pub fn coalesce_values(
    chart: &Chart,
    vals: &Values,
    warnings: &mut Warnings,
) -> Result<Values, CoalesceError> {
    let mut v = vals.clone();
    coalesce(chart, &mut v, "", false, warnings)?;
    Ok(v)
}

/// `MergeValues(chart, vals)`: as [`coalesce_values`] but nulls are kept.
pub fn merge_values(
    chart: &Chart,
    vals: &Values,
    warnings: &mut Warnings,
) -> Result<Values, CoalesceError> {
    let mut v = vals.clone();
    coalesce(chart, &mut v, "", true, warnings)?;
    Ok(v)
}

/// [`coalesce_values`] for a caller that reads only some keys of the result: a top-level
/// default missing from `vals` is copied only if `keep` accepts its key, and a default of a
/// direct subchart missing from that subchart's section only if `keep_sub(subchart, key)`
/// does. `global` and the names of subcharts must be kept at both levels (coalescing itself
/// reads them); the values of kept keys, the warnings and the errors are those of
/// [`coalesce_values`], since a default missing from the values it lands in is never
/// compared with anything there.
pub fn coalesce_values_keeping(
    chart: &Chart,
    vals: &Values,
    keep: &dyn Fn(&str) -> bool,
    keep_sub: &dyn Fn(&str, &str) -> bool,
    warnings: &mut Warnings,
) -> Result<Values, CoalesceError> {
    let mut v = vals.clone();
    coalesce_values_inner(chart, &mut v, "", false, Some(keep), warnings);
    coalesce_deps(chart, &mut v, "", false, Some(keep_sub), warnings)?;
    sync_shared_globals_down(chart, &mut v);
    Ok(v)
}

/// [`coalesce_values`] with the chart's defaults given by value (`chart.values` is not read):
/// what lands in the result is moved, not copied. For callers done with the defaults.
pub fn coalesce_values_with_defaults(
    chart: &Chart,
    defaults: Values,
    vals: &Values,
    warnings: &mut Warnings,
) -> Result<Values, CoalesceError> {
    let mut v = vals.clone();
    coalesce_owned(chart, defaults, &mut v, false, warnings)?;
    Ok(v)
}

/// [`merge_values`] with the chart's defaults given by value, as
/// [`coalesce_values_with_defaults`].
pub fn merge_values_with_defaults(
    chart: &Chart,
    defaults: Values,
    vals: &Values,
    warnings: &mut Warnings,
) -> Result<Values, CoalesceError> {
    let mut v = vals.clone();
    coalesce_owned(chart, defaults, &mut v, true, warnings)?;
    Ok(v)
}

/// `CoalesceTables(dst, src)`: `dst` wins; a `null` in `dst` deletes the key.
pub fn coalesce_tables(dst: &mut Values, src: Values, warnings: &mut Warnings) {
    coalesce_tables_full_key(dst, src, &Prefix::Root(""), false, warnings);
}

/// `MergeTables(dst, src)`: `dst` wins; nulls are kept.
pub fn merge_tables(dst: &mut Values, src: Values, warnings: &mut Warnings) {
    coalesce_tables_full_key(dst, src, &Prefix::Root(""), true, warnings);
}

fn coalesce(
    chart: &Chart,
    dest: &mut Values,
    prefix: &str,
    merge: bool,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    coalesce_inner(chart, dest, prefix, merge, w)?;
    sync_shared_globals_down(chart, dest);
    Ok(())
}

/// [`coalesce`] of the top chart with its defaults given by value.
fn coalesce_owned(
    chart: &Chart,
    defaults: Values,
    dest: &mut Values,
    merge: bool,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    let sub_prefix = chart.name().to_owned();
    for (key, val) in defaults {
        let Some(value) = dest.get_mut(&key) else {
            dest.insert(key, val);
            continue;
        };
        if value.is_null() && !merge {
            dest.remove(&key);
        } else if let Value::Object(d) = value {
            // As in [`coalesce_default`], with the default table moved under `d`.
            match val {
                Value::Object(src) => {
                    let m = merge || chart.dependencies.iter().any(|c| c.name() == key);
                    let root = Prefix::Root(&sub_prefix);
                    coalesce_tables_full_key(d, src, &Prefix::Key(&root, &key), m, w);
                }
                Value::Null => {}
                _ => w.push(Warning::info(format!(
                    "warning: skipped value for {sub_prefix}.{key}: Not a table."
                ))),
            }
        }
    }
    coalesce_deps(chart, dest, "", merge, None, w)?;
    sync_shared_globals_down(chart, dest);
    Ok(())
}

/// One default `val` of `chart` for a `key` that `v` has: a `null` there deletes it (unless
/// merging), a table there takes the default table under it.
fn coalesce_default(
    chart: &Chart,
    v: &mut Values,
    key: &str,
    val: &Value,
    sub_prefix: &str,
    merge: bool,
    w: &mut Warnings,
) {
    let Some(value) = v.get_mut(key) else {
        return;
    };
    if value.is_null() && !merge {
        v.remove(key);
    } else if let Value::Object(dest) = value {
        match val {
            Value::Object(src) => {
                let m = merge || chart.dependencies.iter().any(|d| d.name() == key);
                let root = Prefix::Root(sub_prefix);
                coalesce_tables_ref(dest, src, &Prefix::Key(&root, key), m, w);
            }
            Value::Null => {}
            _ => w.push(Warning::info(format!(
                "warning: skipped value for {sub_prefix}.{key}: Not a table."
            ))),
        }
    }
}

fn coalesce_inner(
    chart: &Chart,
    dest: &mut Values,
    prefix: &str,
    merge: bool,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    coalesce_values_inner(chart, dest, prefix, merge, None, w);
    coalesce_deps(chart, dest, prefix, merge, None, w)
}

/// Go's `coalesceGlobals` copies each parent global table shallowly: the tables nested one
/// level below (`global.<key>.<k2>`) are the parent's own map objects, shared by every
/// subchart scope below it, and merging a subchart's defaults into them writes into that
/// one shared object. Helm's output reflects the final state of those shared tables
/// everywhere. Reproduced in two steps: after each subchart, its (possibly grown) shared
/// tables are copied up to the parent; at the end, the root's final tables are copied down.
fn shared_global_tables(parent: &Values) -> Vec<(String, String)> {
    let mut out = Vec::new();
    if let Some(Value::Object(g)) = parent.get(GLOBAL) {
        for (key, t) in g {
            if let Value::Object(t) = t {
                for (k2, v) in t {
                    if v.is_object() {
                        out.push((key.clone(), k2.clone()));
                    }
                }
            }
        }
    }
    out
}

fn global_table<'a>(vals: &'a Values, key: &str, k2: &str) -> Option<&'a Value> {
    match vals.get(GLOBAL)? {
        Value::Object(g) => match g.get(key)? {
            Value::Object(t) => t.get(k2).filter(|v| v.is_object()),
            _ => None,
        },
        _ => None,
    }
}

fn global_table_mut<'a>(vals: &'a mut Values, key: &str, k2: &str) -> Option<&'a mut Value> {
    match vals.get_mut(GLOBAL)? {
        Value::Object(g) => match g.get_mut(key)? {
            Value::Object(t) => t.get_mut(k2).filter(|v| v.is_object()),
            _ => None,
        },
        _ => None,
    }
}

fn copy_shared_globals(from: &Values, to: &mut Values, pairs: &[(String, String)]) {
    for (key, k2) in pairs {
        if let (Some(src), Some(dst)) = (global_table(from, key, k2), global_table_mut(to, key, k2))
        {
            *dst = src.clone();
        }
    }
}

fn sync_shared_globals_down(chart: &Chart, vals: &mut Values) {
    let pairs = shared_global_tables(vals);
    for sub in &chart.dependencies {
        let Some(Value::Object(mut sv)) = vals.remove(sub.name()) else {
            continue;
        };
        copy_shared_globals(vals, &mut sv, &pairs);
        sync_shared_globals_down(sub, &mut sv);
        vals.insert(sub.name().to_owned(), Value::Object(sv));
    }
}

/// Which defaults of a subchart (first argument) missing from its section are copied, by key.
type KeepSub<'a> = &'a dyn Fn(&str, &str) -> bool;

/// `keep_sub`, when given, says which of a subchart's defaults missing from its section are
/// copied (`keep_sub(subchart, key)`), as `keep` does for the chart's own defaults in
/// [`coalesce_values_inner`]; deeper subcharts copy all of theirs.
fn coalesce_deps(
    chart: &Chart,
    dest: &mut Values,
    prefix: &str,
    merge: bool,
    keep_sub: Option<KeepSub<'_>>,
    w: &mut Warnings,
) -> Result<(), CoalesceError> {
    for sub in &chart.dependencies {
        let name = sub.name().to_owned();
        match dest.get(&name) {
            None => {
                dest.insert(name.clone(), Value::Object(Values::new()));
            }
            Some(Value::Object(_)) => {}
            Some(other) => {
                return Err(CoalesceError {
                    name,
                    shown: go_t(other),
                });
            }
        }
        let sub_prefix = concat_prefix(prefix, chart.name());
        let mut dv = match dest.remove(&name) {
            Some(Value::Object(m)) => m,
            _ => Values::new(),
        };
        let pairs = shared_global_tables(dest);
        coalesce_globals(&mut dv, dest, w);
        let res = match keep_sub {
            None => coalesce_inner(sub, &mut dv, &sub_prefix, merge, w),
            Some(keep) => {
                let keep_here = |k: &str| keep(&name, k);
                coalesce_values_inner(sub, &mut dv, &sub_prefix, merge, Some(&keep_here), w);
                coalesce_deps(sub, &mut dv, &sub_prefix, merge, None, w)
            }
        };
        copy_shared_globals(&dv, dest, &pairs);
        dest.insert(name, Value::Object(dv));
        res?;
    }
    Ok(())
}

/// `coalesceGlobals(dest, src)`: the parent's globals win over the subchart's.
fn coalesce_globals(dest: &mut Values, src: &mut Values, w: &mut Warnings) {
    let mut dg = match dest.get(GLOBAL) {
        None => Values::new(),
        Some(Value::Object(m)) => m.clone(),
        Some(_) => {
            w.push(Warning::info(format!(
                "warning: skipping globals because destination {GLOBAL} is not a table."
            )));
            return;
        }
    };
    let sg = match src.get_mut(GLOBAL) {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => {
            w.push(Warning::info(format!(
                "warning: skipping globals because source {GLOBAL} is not a table."
            )));
            return;
        }
    };
    if let Some(sg) = sg {
        for (key, val) in sg.iter_mut() {
            if let Value::Object(parent_table) = val {
                let mut vv = parent_table.clone();
                match dg.get(key) {
                    None => {
                        dg.insert(key.clone(), Value::Object(vv));
                    }
                    Some(Value::Object(destv)) => {
                        let destv = destv.clone();
                        coalesce_tables_full_key(&mut vv, destv, &Prefix::Root(key), true, w);
                        dg.insert(key.clone(), Value::Object(vv));
                    }
                    Some(_) => w.push(Warning::info(format!(
                        "Conflict: cannot merge map onto non-map for {}. Skipping.",
                        flotilla_gotmpl::gofmt::quote(key)
                    ))),
                }
            } else if dg.get(key).is_some_and(Value::is_object) {
                w.push(Warning::info(format!("key {key} is table. Skipping")));
            } else {
                dg.insert(key.clone(), val.clone());
            }
        }
    }
    dest.insert(GLOBAL.to_owned(), Value::Object(dg));
}

/// `keep`, when given, says which of the chart's defaults missing from `v` are copied into it
/// (the others are left out).
fn coalesce_values_inner(
    chart: &Chart,
    v: &mut Values,
    prefix: &str,
    merge: bool,
    keep: Option<&dyn Fn(&str) -> bool>,
    w: &mut Warnings,
) {
    let sub_prefix = concat_prefix(prefix, chart.name());
    // The chart's defaults are read in place: only what lands in `v` is copied.
    for (key, val) in chart.values() {
        if v.contains_key(key) {
            coalesce_default(chart, v, key, val, &sub_prefix, merge, w);
        } else if keep.is_none_or(|keep| keep(key)) {
            v.insert(key.clone(), val.clone());
        }
    }
}

/// `coalesceTablesFullKey(dst, src, prefix, merge)`. Helm first sets `src[k] = nil` for every
/// `k` whose `dst` value is nil, and deletes a nil `dst[k]` (when not merging) only where the
/// original `src[k]` was not nil; so a nil in `dst` is kept against a nil or missing `src`
/// value, deleted against a non-nil one (when not merging), and otherwise left alone.
fn coalesce_tables_full_key(
    dst: &mut Values,
    src: Values,
    prefix: &Prefix<'_>,
    merge: bool,
    w: &mut Warnings,
) {
    for (key, val) in src {
        match dst.get_mut(&key) {
            None => {
                dst.insert(key, val);
            }
            Some(dv) if dv.is_null() => {
                if !merge && !val.is_null() {
                    dst.remove(&key);
                }
            }
            Some(dv) => match (dv, val) {
                (Value::Object(d), Value::Object(s)) => {
                    coalesce_tables_full_key(d, s, &Prefix::Key(prefix, &key), merge, w)
                }
                (dv, val) => table_mismatch(dv, &val, prefix, &key, w),
            },
        }
    }
}

/// [`coalesce_tables_full_key`] with `src` borrowed: only the values that land in `dst` are
/// copied.
fn coalesce_tables_ref(
    dst: &mut Values,
    src: &Values,
    prefix: &Prefix<'_>,
    merge: bool,
    w: &mut Warnings,
) {
    for (key, val) in src {
        match dst.get_mut(key) {
            None => {
                dst.insert(key.clone(), val.clone());
            }
            Some(dv) if dv.is_null() => {
                if !merge && !val.is_null() {
                    dst.remove(key);
                }
            }
            Some(dv) => match (dv, val) {
                (Value::Object(d), Value::Object(s)) => {
                    coalesce_tables_ref(d, s, &Prefix::Key(prefix, key), merge, w)
                }
                (dv, val) => table_mismatch(dv, val, prefix, key, w),
            },
        }
    }
}

/// The warnings of a `dst` value (not nil) and a `src` value that are not both tables.
fn table_mismatch(dv: &Value, val: &Value, prefix: &Prefix<'_>, key: &str, w: &mut Warnings) {
    match (dv, val) {
        (_, s @ Value::Object(_)) => w.push(Warning::info(format!(
            "warning: cannot overwrite table with non table for {} ({})",
            Prefix::Key(prefix, key).text(),
            go_v(s)
        ))),
        (Value::Object(_), s) if !s.is_null() => w.push(Warning::info(format!(
            "warning: destination for {} is a table. Ignoring non-table value ({})",
            Prefix::Key(prefix, key).text(),
            go_v(s)
        ))),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metadata::Metadata;
    use serde_json::json;

    fn obj(v: Value) -> Values {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    fn chart(name: &str, values: Value, deps: Vec<Chart>) -> Chart {
        let mut c = Chart::new(Metadata {
            name: name.into(),
            api_version: "v2".into(),
            version: "1.0.0".into(),
            ..Metadata::default()
        });
        c.values = Some(obj(values));
        c.dependencies = deps;
        c
    }

    /// A small deterministic generator (xorshift) of value trees over a few keys, so that
    /// tables, nulls, scalars and globals meet in every combination.
    struct Gen(u64);

    impl Gen {
        fn next(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }

        fn value(&mut self, depth: u32) -> Value {
            match self.next(if depth == 0 { 4 } else { 6 }) {
                0 => Value::Null,
                1 => json!(1),
                2 => json!("x"),
                3 => json!([1]),
                _ => Value::Object(self.table(depth - 1)),
            }
        }

        fn table(&mut self, depth: u32) -> Values {
            let mut m = Values::new();
            for key in ["a", "b", "global", "sub", "deep"] {
                if self.next(3) > 0 {
                    m.insert(key.to_owned(), self.value(depth));
                }
            }
            m
        }
    }

    #[test]
    fn moved_defaults_coalesce_as_borrowed_ones() {
        let mut g = Gen(0x9E37_79B9_7F4A_7C15);
        let (mut warned, mut failed) = (0, 0);
        for _ in 0..4000 {
            let leaf = chart("deep", Value::Object(g.table(2)), vec![]);
            let sub = chart("sub", Value::Object(g.table(3)), vec![leaf]);
            let top = chart("top", Value::Object(g.table(3)), vec![sub]);
            let user = g.table(3);
            let defaults = top.values.clone().unwrap_or_default();
            for merge in [false, true] {
                let (mut w1, mut w2) = (Vec::new(), Vec::new());
                let (a, b) = if merge {
                    (
                        merge_values(&top, &user, &mut w1),
                        merge_values_with_defaults(&top, defaults.clone(), &user, &mut w2),
                    )
                } else {
                    (
                        coalesce_values(&top, &user, &mut w1),
                        coalesce_values_with_defaults(&top, defaults.clone(), &user, &mut w2),
                    )
                };
                assert_eq!(a, b, "merge {merge}: {:?} under {user:?}", top.values);
                assert_eq!(w1, w2, "merge {merge}: {:?} under {user:?}", top.values);
                warned += usize::from(!w1.is_empty());
                failed += usize::from(a.is_err());
            }
        }
        // Both kinds of outcome are exercised, not only clean merges.
        assert!(warned > 500 && failed > 100, "{warned} {failed}");
    }

    #[test]
    fn coalescing_for_some_keys_gives_those_keys_warnings_and_errors_unchanged() {
        let mut g = Gen(0x2545_F491_4F6C_DD1D);
        let (mut left_out, mut left_out_sub, mut warned, mut failed) = (0, 0, 0, 0);
        for _ in 0..4000 {
            let leaf = chart("deep", Value::Object(g.table(2)), vec![]);
            let sub = chart("sub", Value::Object(g.table(3)), vec![leaf]);
            let top = chart("top", Value::Object(g.table(3)), vec![sub]);
            let user = g.table(3);
            // `global` and the subchart's section, plus any of the others.
            let mut read = vec!["global", "sub"];
            for k in ["a", "b", "deep", "tags"] {
                if g.next(2) == 0 {
                    read.push(k);
                }
            }
            // In `sub`'s section: `global`, `deep` (its subchart), plus any of the others.
            let mut read_sub = vec!["global", "deep"];
            for k in ["a", "b", "sub"] {
                if g.next(2) == 0 {
                    read_sub.push(k);
                }
            }
            let (mut w1, mut w2) = (Vec::new(), Vec::new());
            let full = coalesce_values(&top, &user, &mut w1);
            let some = coalesce_values_keeping(
                &top,
                &user,
                &|k| read.contains(&k),
                &|s, k| s == "sub" && read_sub.contains(&k),
                &mut w2,
            );
            assert_eq!(w1, w2, "{:?} under {user:?}", top.values);
            let given_sub = |k: &str| match user.get("sub") {
                Some(Value::Object(u)) => u.contains_key(k),
                _ => false,
            };
            match (full, some) {
                (Ok(full), Ok(some)) => {
                    for (k, v) in &full {
                        if k == "sub" {
                            // The kept keys of the section, and what the user gave there.
                            let (Value::Object(fs), Some(Value::Object(ss))) = (v, some.get(k))
                            else {
                                panic!("no section: {some:?}");
                            };
                            for (k2, v2) in fs {
                                if read_sub.contains(&k2.as_str()) || given_sub(k2) {
                                    assert_eq!(ss.get(k2), Some(v2), "sub.{k2}: {:?}", top.values);
                                } else {
                                    left_out_sub += usize::from(!ss.contains_key(k2));
                                }
                            }
                            assert!(ss.keys().all(|k2| fs.contains_key(k2)));
                        } else if read.contains(&k.as_str()) || user.contains_key(k) {
                            assert_eq!(some.get(k), Some(v), "{k}: {:?}", top.values);
                        } else {
                            left_out += usize::from(!some.contains_key(k));
                        }
                    }
                    assert!(some.keys().all(|k| full.contains_key(k)));
                }
                (a, b) => {
                    assert_eq!(a.err(), b.err(), "{:?} under {user:?}", top.values);
                    failed += 1;
                }
            }
            warned += usize::from(!w1.is_empty());
        }
        assert!(
            left_out > 200 && left_out_sub > 200 && warned > 500 && failed > 100,
            "{left_out} {left_out_sub} {warned} {failed}"
        );
    }

    #[test]
    fn user_values_win_and_null_deletes() {
        let c = chart(
            "top",
            json!({"a": 1, "b": {"x": 1, "y": 2}, "c": 3}),
            vec![],
        );
        let mut w = Vec::new();
        let v = coalesce_values(
            &c,
            &obj(json!({"a": 2, "b": {"y": null}, "c": null, "d": null})),
            &mut w,
        )
        .unwrap();
        assert_eq!(Value::Object(v), json!({"a": 2, "b": {"x": 1}, "d": null}));
        assert!(w.is_empty());
    }

    #[test]
    fn list_over_table_warns_like_helm() {
        let c = chart(
            "cluster-autoscaler",
            json!({"serviceMonitor": {"metricRelabelings": {}}}),
            vec![],
        );
        let mut w = Vec::new();
        let v = coalesce_values(
            &c,
            &obj(json!({"serviceMonitor": {"metricRelabelings": [1]}})),
            &mut w,
        )
        .unwrap();
        assert_eq!(v["serviceMonitor"]["metricRelabelings"], json!([1]));
        assert_eq!(
            w[0].to_string(),
            "level=INFO msg=\"warning: cannot overwrite table with non table for cluster-autoscaler.serviceMonitor.metricRelabelings (map[])\""
        );
        assert_eq!(w.len(), 1);
    }

    #[test]
    fn subcharts_and_globals() {
        let sub = chart(
            "sub",
            json!({"x": 1, "global": {"g": "sub", "t": {"a": 1, "b": 1}}}),
            vec![],
        );
        let c = chart(
            "top",
            json!({"global": {"g": "top", "t": {"a": 2}}, "sub": {"x": 2}}),
            vec![sub],
        );
        let mut w = Vec::new();
        let v = coalesce_values(&c, &obj(json!({"sub": {"y": 3}})), &mut w).unwrap();
        assert_eq!(
            Value::Object(v),
            json!({
                "global": {"g": "top", "t": {"a": 2}},
                "sub": {"x": 2, "y": 3, "global": {"g": "top", "t": {"a": 2, "b": 1}}}
            })
        );
    }

    #[test]
    fn user_table_over_chart_scalar_warns_like_helm() {
        // helm v4.1.4 prints exactly this line; a user scalar over a chart table is silent.
        let c = chart("cw", json!({"scalar": "x", "table": {"a": 1}}), vec![]);
        let mut w = Vec::new();
        let v = coalesce_values(&c, &obj(json!({"scalar": {"a": 1}, "table": 5})), &mut w).unwrap();
        assert_eq!(Value::Object(v), json!({"scalar": {"a": 1}, "table": 5}));
        assert_eq!(w.len(), 1);
        assert_eq!(
            w[0].to_string(),
            "level=INFO msg=\"warning: skipped value for cw.scalar: Not a table.\""
        );
    }

    #[test]
    fn merge_keeps_nulls() {
        let c = chart("top", json!({"a": 1, "b": null}), vec![]);
        let mut w = Vec::new();
        let v = merge_values(&c, &obj(json!({"a": null})), &mut w).unwrap();
        assert_eq!(Value::Object(v), json!({"a": null, "b": null}));
    }

    #[test]
    fn subchart_section_must_be_a_map() {
        let sub = chart("sub", json!({}), vec![]);
        let c = chart("top", json!({}), vec![sub]);
        let e = coalesce_values(&c, &obj(json!({"sub": "x"})), &mut Vec::new()).unwrap_err();
        assert_eq!(e.to_string(), "type mismatch on sub: %!t(string=x)");
    }
}
