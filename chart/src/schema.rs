//! `values.schema.json` validation with Helm's error text.
//!
//! Helm (v4) validates with `santhosh-tekuri/jsonschema/v6` and prints its error tree:
//! `- at '/path': message`, nested causes indented by two spaces, numbers in
//! `golang.org/x/text` English form (`1,000`, `1×10⁰⁶`). This module walks the schema the way
//! that library does (keyword order, `validation failed` groups, `'allOf' failed`…, `$ref`
//! wrappers that disappear when they hold one cause, draft ≤ 7 ignoring `$ref` siblings) for
//! the standard vocabulary with local `$ref`s. When our walk finds nothing, the `jsonschema`
//! crate checks the values too: if it finds errors (a keyword we do not walk, e.g.
//! `unevaluatedProperties` or `$dynamicRef`), they are printed in the same `- at '…': …`
//! shape with the crate's message. Of `format`, only `email` is asserted here (drafts ≤ 7,
//! as the library does); other formats are left to the crate. Objects are walked in sorted
//! key order (Go's map order is random, so Helm's order varies from run to run). Remote
//! `$ref`s are not fetched: a schema that needs one is an error.

// The walk mirrors the Go library keyword by keyword; nested `if`s keep that shape readable.
#![allow(clippy::collapsible_if)]

use serde_json::{Map, Value};

use crate::chart::Chart;
use crate::gofmt::go_type;
use crate::values::Values;
use flotilla_gotmpl::gofmt::quote as go_quote;

/// Schema validation failed; `Display` is Helm's full message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("values don't meet the specifications of the schema(s) in the following chart(s):\n{0}")]
pub struct SchemaError(pub String);

/// `ValidateAgainstSchema(chart, values)` wrapped as `ToRenderValuesWithSchemaValidation`
/// reports it. `values` are the coalesced values of `chart`; subcharts are checked against
/// `values[<subchart name>]`.
pub fn validate_against_schema(chart: &Chart, values: &Values) -> Result<(), SchemaError> {
    let text = validate_tree(chart, values);
    if text.is_empty() {
        Ok(())
    } else {
        Err(SchemaError(text))
    }
}

fn validate_tree(chart: &Chart, values: &Values) -> String {
    let mut sb = String::new();
    if let Some(schema) = &chart.schema {
        if let Err(e) = validate_single(values, schema) {
            sb.push_str(&format!("{}:\n{e}", chart.name()));
        }
    }
    for sub in &chart.dependencies {
        match values.get(sub.name()) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => sb.push_str(&validate_tree(sub, m)),
            Some(other) => sb.push_str(&format!(
                "{}:\ninvalid type for values: expected object (map), got {}\n",
                sub.name(),
                go_type(other)
            )),
        }
    }
    sb
}

/// `ValidateAgainstSingleSchema`: the causes text (`- at …` lines, final newline) or the
/// schema's own parse error.
pub fn validate_single(values: &Values, schema_json: &[u8]) -> Result<(), String> {
    let schema: Value =
        serde_json::from_slice(schema_json).map_err(|e| go_json_syntax_error(schema_json, &e))?;
    let walker = Walker::new(&schema);
    if let Some(r) = walker.unresolved_local_ref(&schema) {
        return Err(format!(
            "json-pointer in \"file:///values.schema.json{r}\" not found"
        ));
    }
    let instance = Value::Object(values.clone());
    // Our walk decides first (it asserts what the Go library asserts, e.g. `format` for
    // drafts up to 7); the crate covers keywords the walk does not know.
    let ours = walker.validate(&schema, &instance, &mut Vec::new());
    if ours.is_none() && walk_covers(&schema, true) {
        // Every keyword the crate would check, our walk has checked.
        return Ok(());
    }
    let crate_validator = if ours.is_none() {
        let v = jsonschema::validator_for(&schema);
        if let Ok(v) = &v {
            if v.is_valid(&instance) {
                return Ok(());
            }
        }
        Some(v)
    } else {
        None
    };
    let causes = match ours {
        Some(node) => match node.kind {
            Kind::Group => node.causes,
            _ => vec![node],
        },
        None => match crate_validator
            .as_ref()
            .expect("computed when our walk found nothing")
        {
            Ok(v) => v
                .iter_errors(&instance)
                .map(|e| {
                    Node::msg(
                        pointer_tokens(&e.instance_path().to_string()),
                        e.to_string(),
                    )
                })
                .collect(),
            Err(e) => return Err(format!("jsonschema: {e}")),
        },
    };
    if causes.is_empty() {
        return Ok(());
    }
    let mut sb = String::new();
    for c in &causes {
        c.display(&mut sb, 1);
    }
    // Drop the leading newline the root line would have preceded.
    Err(format!("{}\n", sb.trim_start_matches('\n')))
}

fn pointer_tokens(p: &str) -> Vec<String> {
    if p.is_empty() {
        return Vec::new();
    }
    p.trim_start_matches('/')
        .split('/')
        .map(|t| t.replace("~1", "/").replace("~0", "~"))
        .collect()
}

#[derive(Debug, Clone)]
enum Kind {
    Msg(String),
    Group,
    Reference,
    Wrapper(String),
}

#[derive(Debug, Clone)]
struct Node {
    loc: Vec<String>,
    kind: Kind,
    causes: Vec<Node>,
}

impl Node {
    fn msg(loc: Vec<String>, m: String) -> Node {
        Node {
            loc,
            kind: Kind::Msg(m),
            causes: Vec::new(),
        }
    }

    fn skip(&self) -> bool {
        matches!(self.kind, Kind::Reference) && self.causes.len() == 1
    }

    fn display(&self, sb: &mut String, indent: usize) {
        let mut indent = indent;
        if !self.skip() {
            sb.push('\n');
            for _ in 0..indent.saturating_sub(1) {
                sb.push_str("  ");
            }
            sb.push_str("- ");
            indent += 1;
            let text = match &self.kind {
                Kind::Msg(m) | Kind::Wrapper(m) => m.as_str(),
                Kind::Group | Kind::Reference => "validation failed",
            };
            sb.push_str(&format!("at {}: {text}", quote(&json_ptr(&self.loc))));
        }
        for c in &self.causes {
            c.display(sb, indent);
        }
    }
}

fn json_ptr(tokens: &[String]) -> String {
    tokens
        .iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// The library's `quote`: Go `%q` with `'` delimiters.
fn quote(s: &str) -> String {
    let q = go_quote(s);
    let inner = &q[1..q.len() - 1];
    format!("'{}'", inner.replace("\\\"", "\"").replace('\'', "\\'"))
}

fn join_quoted(items: &[String]) -> String {
    items
        .iter()
        .map(|s| quote(s))
        .collect::<Vec<_>>()
        .join(", ")
}

/// `display(v)`: strings quoted, containers `value`, others `%v`.
fn display(v: &Value) -> String {
    match v {
        Value::String(s) => quote(s),
        Value::Array(_) | Value::Object(_) => "value".to_owned(),
        other => crate::gofmt::go_v(other),
    }
}

/// A number as `golang.org/x/text/message` prints `%v`/`%d` in English.
fn localized_number(f: f64) -> String {
    let g = flotilla_yaml::go_format_float_g(f, false);
    if let Some((mant, exp)) = g.split_once('e') {
        let (neg, digits) = match exp.as_bytes().first() {
            Some(b'-') => (true, &exp[1..]),
            Some(b'+') => (false, &exp[1..]),
            _ => (false, exp),
        };
        let sup: String = digits
            .chars()
            .map(|c| match c {
                '0' => '⁰',
                '1' => '¹',
                '2' => '²',
                '3' => '³',
                '4' => '⁴',
                '5' => '⁵',
                '6' => '⁶',
                '7' => '⁷',
                '8' => '⁸',
                _ => '⁹',
            })
            .collect();
        return format!("{mant}×10{}{sup}", if neg { "⁻" } else { "" });
    }
    let (sign, rest) = g.strip_prefix('-').map_or(("", g.as_str()), |r| ("-", r));
    let (int, frac) = rest
        .split_once('.')
        .map_or((rest, None), |(a, b)| (a, Some(b)));
    let mut grouped = String::new();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (int.len() - i) % 3 == 0 {
            grouped.push(',');
        }
        grouped.push(c);
    }
    match frac {
        Some(f) => format!("{sign}{grouped}.{f}"),
        None => format!("{sign}{grouped}"),
    }
}

fn localized_int(n: usize) -> String {
    #[allow(clippy::cast_precision_loss)]
    localized_number(n as f64)
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
}

/// Exact decimal form of a float's shortest representation: (digits, exponent of ten).
fn decimal(f: f64) -> Option<(i128, i32)> {
    let s = format!("{:e}", f);
    let (m, e) = s.split_once('e')?;
    let exp: i32 = e.parse().ok()?;
    let neg = m.starts_with('-');
    let m = m.trim_start_matches('-');
    let (int, frac) = m.split_once('.').map_or((m, ""), |(a, b)| (a, b));
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let scale = exp - i32::try_from(frac.len()).ok()?;
    Some((if neg { -digits } else { digits }, scale))
}

/// `v / m` is an integer (compared exactly on the decimal forms, as big.Rat does).
fn is_multiple(v: f64, m: f64) -> bool {
    if let (Some((a, ea)), Some((b, eb))) = (decimal(v), decimal(m)) {
        if b == 0 {
            return false;
        }
        let e = ea.min(eb);
        let scale = |x: i128, ex: i32| -> Option<i128> {
            10i128
                .checked_pow(u32::try_from(ex - e).ok()?)?
                .checked_mul(x)
        };
        if let (Some(a), Some(b)) = (scale(a, ea), scale(b, eb)) {
            return a % b == 0;
        }
    }
    (v / m).fract() == 0.0
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

struct Walker<'s> {
    root: &'s Value,
    draft: u32,
}

fn draft_of(schema: &Value) -> u32 {
    let s = schema.get("$schema").and_then(Value::as_str).unwrap_or("");
    if s.contains("draft-04") {
        4
    } else if s.contains("draft-06") {
        6
    } else if s.contains("draft-07") {
        7
    } else if s.contains("2019-09") {
        2019
    } else {
        2020
    }
}

impl<'s> Walker<'s> {
    fn new(root: &'s Value) -> Self {
        Walker {
            root,
            draft: draft_of(root),
        }
    }

    fn resolve(&self, r: &str) -> Option<&'s Value> {
        let frag = r.strip_prefix('#')?;
        let mut cur = self.root;
        if frag.is_empty() {
            return Some(cur);
        }
        for tok in frag.strip_prefix('/')?.split('/') {
            let tok = percent_decode(tok).replace("~1", "/").replace("~0", "~");
            cur = match cur {
                Value::Object(m) => m.get(&tok)?,
                Value::Array(a) => a.get(tok.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    fn validate(&self, s: &'s Value, v: &Value, loc: &mut Vec<String>) -> Option<Node> {
        let obj = match s {
            Value::Bool(true) => return None,
            Value::Bool(false) => return Some(Node::msg(loc.clone(), "false schema".into())),
            Value::Object(o) => o,
            _ => return None,
        };
        if let Some(t) = obj.get("type") {
            let mut want: Vec<&str> = match t {
                Value::String(s) => vec![s.as_str()],
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                _ => Vec::new(),
            };
            // The library keeps types as a set and lists them in this order.
            const ORDER: [&str; 7] = [
                "null", "boolean", "number", "integer", "string", "array", "object",
            ];
            want.sort_by_key(|t| ORDER.iter().position(|o| o == t).unwrap_or(ORDER.len()));
            want.dedup();
            if !want.is_empty() {
                let got = type_name(v);
                let int_ok =
                    want.contains(&"integer") && v.as_f64().is_some_and(|f| f.fract() == 0.0);
                if !want.contains(&got) && !int_ok {
                    return Some(Node::msg(
                        loc.clone(),
                        format!("got {got}, want {}", want.join(" or ")),
                    ));
                }
            }
        }
        if let Some(c) = obj.get("const") {
            if !json_equal(v, c) {
                let m = match c {
                    Value::Array(_) | Value::Object(_) => "const failed".to_owned(),
                    other => format!("value must be {}", display(other)),
                };
                return Some(Node::msg(loc.clone(), m));
            }
        }
        if let Some(Value::Array(items)) = obj.get("enum") {
            if !items.iter().any(|i| json_equal(v, i)) {
                let m = if items.iter().any(|i| i.is_array() || i.is_object()) {
                    "enum failed".to_owned()
                } else if items.len() == 1 {
                    format!("value must be {}", display(&items[0]))
                } else {
                    format!(
                        "value must be one of {}",
                        items.iter().map(display).collect::<Vec<_>>().join(", ")
                    )
                };
                return Some(Node::msg(loc.clone(), m));
            }
        }
        if self.draft <= 7 {
            if let (Some(Value::String(f)), Value::String(sv)) = (obj.get("format"), v) {
                if f == "email" && !sv.contains('@') {
                    return Some(Node::msg(
                        loc.clone(),
                        format!("{} is not valid email: missing @", quote(sv)),
                    ));
                }
            }
        }
        let mut errs: Vec<Node> = Vec::new();
        if let Some(Value::String(r)) = obj.get("$ref") {
            let e = self.validate_ref(r, v, loc);
            if self.draft < 2019 {
                return e;
            }
            errs.extend(e);
        }
        match v {
            Value::Object(m) => self.obj_validate(obj, m, loc, &mut errs),
            Value::Array(a) => self.arr_validate(obj, a, loc, &mut errs),
            Value::String(st) => self.str_validate(obj, st, loc, &mut errs),
            Value::Number(_) => self.num_validate(obj, v, loc, &mut errs),
            _ => {}
        }
        self.cond_validate(obj, v, loc, &mut errs);
        match errs.len() {
            0 => None,
            1 => errs.pop(),
            _ => Some(Node {
                loc: loc.clone(),
                kind: Kind::Group,
                causes: errs,
            }),
        }
    }

    fn validate_ref(&self, r: &str, v: &Value, loc: &mut Vec<String>) -> Option<Node> {
        let target = self.resolve(r)?;
        let err = self.validate(target, v, loc)?;
        let causes = match err.kind {
            Kind::Group => err.causes,
            _ => vec![err],
        };
        Some(Node {
            loc: loc.clone(),
            kind: Kind::Reference,
            causes,
        })
    }

    fn validate_val(
        &self,
        s: &'s Value,
        v: &Value,
        loc: &mut Vec<String>,
        tok: String,
    ) -> Option<Node> {
        loc.push(tok);
        let r = self.validate(s, v, loc);
        loc.pop();
        r
    }

    fn obj_validate(
        &self,
        s: &'s Map<String, Value>,
        obj: &Map<String, Value>,
        loc: &mut Vec<String>,
        errs: &mut Vec<Node>,
    ) {
        let usize_of = |k: &str| s.get(k).and_then(Value::as_f64).map(|f| f as usize);
        if let Some(min) = usize_of("minProperties") {
            if obj.len() < min {
                errs.push(Node::msg(
                    loc.clone(),
                    format!(
                        "minProperties: got {}, want {}",
                        localized_int(obj.len()),
                        localized_int(min)
                    ),
                ));
            }
        }
        if let Some(max) = usize_of("maxProperties") {
            if obj.len() > max {
                errs.push(Node::msg(
                    loc.clone(),
                    format!(
                        "maxProperties: got {}, want {}",
                        localized_int(obj.len()),
                        localized_int(max)
                    ),
                ));
            }
        }
        let missing_of = |reqd: &Value| -> Vec<String> {
            reqd.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .filter(|k| !obj.contains_key(*k))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        if let Some(reqd) = s.get("required") {
            let missing = missing_of(reqd);
            if missing.len() == 1 {
                errs.push(Node::msg(
                    loc.clone(),
                    format!("missing property {}", quote(&missing[0])),
                ));
            } else if !missing.is_empty() {
                errs.push(Node::msg(
                    loc.clone(),
                    format!("missing properties {}", join_quoted(&missing)),
                ));
            }
        }
        if let Some(Value::Object(deps)) = s.get("dependencies") {
            for (pname, dep) in deps {
                if !obj.contains_key(pname) {
                    continue;
                }
                match dep {
                    Value::Array(_) => {
                        let missing = missing_of(dep);
                        if !missing.is_empty() {
                            errs.push(Node::msg(
                                loc.clone(),
                                format!(
                                    "properties {} required, if {} exists",
                                    join_quoted(&missing),
                                    quote(pname)
                                ),
                            ));
                        }
                    }
                    other => errs.extend(self.validate(other, &Value::Object(obj.clone()), loc)),
                }
            }
        }
        let props = s.get("properties").and_then(Value::as_object);
        let pattern_props: Vec<(regex::Regex, &'s Value)> = s
            .get("patternProperties")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| regex::Regex::new(k).ok().map(|r| (r, v)))
                    .collect()
            })
            .unwrap_or_default();
        let additional = s.get("additionalProperties");
        let mut additional_names = Vec::new();
        for (pname, pvalue) in obj {
            let mut evaluated = false;
            if let Some(sch) = props.and_then(|p| p.get(pname)) {
                evaluated = true;
                errs.extend(self.validate_val(sch, pvalue, loc, pname.clone()));
            }
            for (re, sch) in &pattern_props {
                if re.is_match(pname) {
                    evaluated = true;
                    errs.extend(self.validate_val(sch, pvalue, loc, pname.clone()));
                }
            }
            if !evaluated {
                match additional {
                    Some(Value::Bool(false)) => additional_names.push(pname.clone()),
                    Some(sch @ Value::Object(_)) => {
                        errs.extend(self.validate_val(sch, pvalue, loc, pname.clone()))
                    }
                    _ => {}
                }
            }
        }
        if !additional_names.is_empty() {
            errs.push(Node::msg(
                loc.clone(),
                format!(
                    "additional properties {} not allowed",
                    join_quoted(&additional_names)
                ),
            ));
        }
        if self.draft == 4 {
            return;
        }
        if let Some(pn) = s.get("propertyNames") {
            for pname in obj.keys() {
                if let Some(e) = self.validate(pn, &Value::String(pname.clone()), &mut Vec::new()) {
                    let causes = match e.kind {
                        Kind::Group => e.causes,
                        _ => vec![e],
                    };
                    errs.push(Node {
                        loc: Vec::new(),
                        kind: Kind::Wrapper(format!("invalid propertyName {}", quote(pname))),
                        causes,
                    });
                }
            }
        }
        if self.draft == 6 {
            return;
        }
        if let Some(Value::Object(ds)) = s.get("dependentSchemas") {
            for (pname, sch) in ds {
                if obj.contains_key(pname) {
                    errs.extend(self.validate(sch, &Value::Object(obj.clone()), loc));
                }
            }
        }
        if let Some(Value::Object(dr)) = s.get("dependentRequired") {
            for (pname, reqd) in dr {
                if obj.contains_key(pname) {
                    let missing = missing_of(reqd);
                    if !missing.is_empty() {
                        errs.push(Node::msg(
                            loc.clone(),
                            format!(
                                "properties {} required, if {} exists",
                                join_quoted(&missing),
                                quote(pname)
                            ),
                        ));
                    }
                }
            }
        }
    }

    fn arr_validate(
        &self,
        s: &'s Map<String, Value>,
        arr: &[Value],
        loc: &mut Vec<String>,
        errs: &mut Vec<Node>,
    ) {
        let usize_of = |k: &str| s.get(k).and_then(Value::as_f64).map(|f| f as usize);
        if let Some(min) = usize_of("minItems") {
            if arr.len() < min {
                errs.push(Node::msg(
                    loc.clone(),
                    format!(
                        "minItems: got {}, want {}",
                        localized_int(arr.len()),
                        localized_int(min)
                    ),
                ));
            }
        }
        if let Some(max) = usize_of("maxItems") {
            if arr.len() > max {
                errs.push(Node::msg(
                    loc.clone(),
                    format!(
                        "maxItems: got {}, want {}",
                        localized_int(arr.len()),
                        localized_int(max)
                    ),
                ));
            }
        }
        if s.get("uniqueItems") == Some(&Value::Bool(true)) && arr.len() > 1 {
            'outer: for i in 1..arr.len() {
                for j in 0..i {
                    if json_equal(&arr[i], &arr[j]) {
                        errs.push(Node::msg(
                            loc.clone(),
                            format!("items at {j} and {i} are equal"),
                        ));
                        break 'outer;
                    }
                }
            }
        }
        if self.draft < 2020 {
            let mut evaluated = 0;
            match s.get("items") {
                Some(Value::Array(items)) => {
                    let n = arr.len().min(items.len());
                    for (i, item) in arr[..n].iter().enumerate() {
                        errs.extend(self.validate_val(&items[i], item, loc, i.to_string()));
                    }
                    evaluated = n;
                }
                Some(sch) => {
                    for (i, item) in arr.iter().enumerate() {
                        errs.extend(self.validate_val(sch, item, loc, i.to_string()));
                    }
                    evaluated = arr.len();
                }
                None => {}
            }
            match s.get("additionalItems") {
                Some(Value::Bool(false)) if evaluated != arr.len() => {
                    errs.push(Node::msg(
                        loc.clone(),
                        format!(
                            "last {} additionalItem(s) not allowed",
                            arr.len() - evaluated
                        ),
                    ));
                }
                Some(sch @ Value::Object(_)) => {
                    for (i, item) in arr[evaluated..].iter().enumerate() {
                        errs.extend(self.validate_val(sch, item, loc, i.to_string()));
                    }
                }
                _ => {}
            }
        } else {
            let prefix = s.get("prefixItems").and_then(Value::as_array);
            let evaluated = prefix.map_or(0, |p| p.len().min(arr.len()));
            if let Some(p) = prefix {
                for (i, item) in arr[..evaluated].iter().enumerate() {
                    errs.extend(self.validate_val(&p[i], item, loc, i.to_string()));
                }
            }
            if let Some(sch) = s.get("items") {
                for (i, item) in arr[evaluated..].iter().enumerate() {
                    errs.extend(self.validate_val(sch, item, loc, i.to_string()));
                }
            }
        }
        if let Some(c) = s.get("contains") {
            let mut cerrs = Vec::new();
            let mut matched = Vec::new();
            for (i, item) in arr.iter().enumerate() {
                match self.validate_val(c, item, loc, i.to_string()) {
                    Some(e) => cerrs.push(e),
                    None => matched.push(i),
                }
            }
            if let Some(min) = usize_of("minContains") {
                if matched.len() < min {
                    let m = if matched.is_empty() {
                        format!(
                            "min {min} items required to match contains schema, but none matched"
                        )
                    } else {
                        let list: Vec<String> = matched.iter().map(usize::to_string).collect();
                        format!(
                            "min {min} items required to match contains schema, but matched {} items at {}",
                            matched.len(),
                            list.join(" ")
                        )
                    };
                    errs.push(Node {
                        loc: loc.clone(),
                        kind: Kind::Wrapper(m),
                        causes: cerrs,
                    });
                }
            } else if matched.is_empty() {
                errs.push(Node {
                    loc: loc.clone(),
                    kind: Kind::Wrapper("no items match contains schema".into()),
                    causes: cerrs,
                });
            }
            if let Some(max) = usize_of("maxContains") {
                if matched.len() > max {
                    let list: Vec<String> = matched.iter().map(usize::to_string).collect();
                    errs.push(Node::msg(
                        loc.clone(),
                        format!(
                            "max {max} items required to match contains schema, but matched {} items at {}",
                            matched.len(),
                            list.join(" ")
                        ),
                    ));
                }
            }
        }
    }

    fn str_validate(
        &self,
        s: &'s Map<String, Value>,
        st: &str,
        loc: &[String],
        errs: &mut Vec<Node>,
    ) {
        let len = st.chars().count();
        let usize_of = |k: &str| s.get(k).and_then(Value::as_f64).map(|f| f as usize);
        if let Some(min) = usize_of("minLength") {
            if len < min {
                errs.push(Node::msg(
                    loc.to_vec(),
                    format!(
                        "minLength: got {}, want {}",
                        localized_int(len),
                        localized_int(min)
                    ),
                ));
            }
        }
        if let Some(max) = usize_of("maxLength") {
            if len > max {
                errs.push(Node::msg(
                    loc.to_vec(),
                    format!(
                        "maxLength: got {}, want {}",
                        localized_int(len),
                        localized_int(max)
                    ),
                ));
            }
        }
        if let Some(Value::String(p)) = s.get("pattern") {
            if let Ok(re) = regex::Regex::new(p) {
                if !re.is_match(st) {
                    errs.push(Node::msg(
                        loc.to_vec(),
                        format!("{} does not match pattern {}", quote(st), quote(p)),
                    ));
                }
            }
        }
    }

    fn num_validate(
        &self,
        s: &'s Map<String, Value>,
        v: &Value,
        loc: &[String],
        errs: &mut Vec<Node>,
    ) {
        let Some(n) = num(v) else { return };
        let mut minimum = s.get("minimum").and_then(num);
        let mut maximum = s.get("maximum").and_then(num);
        let mut ex_min = s.get("exclusiveMinimum").and_then(num);
        let mut ex_max = s.get("exclusiveMaximum").and_then(num);
        if self.draft == 4 {
            if s.get("exclusiveMinimum") == Some(&Value::Bool(true)) {
                ex_min = minimum.take();
            }
            if s.get("exclusiveMaximum") == Some(&Value::Bool(true)) {
                ex_max = maximum.take();
            }
        }
        let both = |name: &str, w: f64| {
            format!(
                "{name}: got {}, want {}",
                localized_number(n),
                localized_number(w)
            )
        };
        if let Some(w) = minimum.filter(|w| n < *w) {
            errs.push(Node::msg(loc.to_vec(), both("minimum", w)));
        }
        if let Some(w) = maximum.filter(|w| n > *w) {
            errs.push(Node::msg(loc.to_vec(), both("maximum", w)));
        }
        if let Some(w) = ex_min.filter(|w| n <= *w) {
            errs.push(Node::msg(loc.to_vec(), both("exclusiveMinimum", w)));
        }
        if let Some(w) = ex_max.filter(|w| n >= *w) {
            errs.push(Node::msg(loc.to_vec(), both("exclusiveMaximum", w)));
        }
        if let Some(m) = s.get("multipleOf").and_then(num) {
            if !is_multiple(n, m) {
                errs.push(Node::msg(loc.to_vec(), both("multipleOf", m)));
            }
        }
    }

    fn cond_validate(
        &self,
        s: &'s Map<String, Value>,
        v: &Value,
        loc: &mut Vec<String>,
        errs: &mut Vec<Node>,
    ) {
        let wrap = |m: &str, causes: Vec<Node>, loc: &Vec<String>| Node {
            loc: loc.clone(),
            kind: Kind::Wrapper(m.to_owned()),
            causes,
        };
        if let Some(n) = s.get("not") {
            if self.validate(n, v, loc).is_none() {
                errs.push(Node::msg(loc.clone(), "'not' failed".into()));
            }
        }
        if let Some(Value::Array(all)) = s.get("allOf") {
            let e: Vec<Node> = all
                .iter()
                .filter_map(|sch| self.validate(sch, v, loc))
                .collect();
            if !e.is_empty() {
                errs.push(wrap("'allOf' failed", e, loc));
            }
        }
        if let Some(Value::Array(any)) = s.get("anyOf") {
            let mut e = Vec::new();
            let mut matched = false;
            for sch in any {
                match self.validate(sch, v, loc) {
                    Some(x) => e.push(x),
                    None => {
                        matched = true;
                        break;
                    }
                }
            }
            if !matched {
                errs.push(wrap("'anyOf' failed", e, loc));
            }
        }
        if let Some(Value::Array(one)) = s.get("oneOf") {
            let mut matched: Option<usize> = None;
            let mut e = Vec::new();
            for (i, sch) in one.iter().enumerate() {
                match self.validate(sch, v, loc) {
                    Some(x) => {
                        if matched.is_none() {
                            e.push(x);
                        }
                    }
                    None => match matched {
                        None => matched = Some(i),
                        Some(first) => {
                            errs.push(Node::msg(
                                loc.clone(),
                                format!("'oneOf' failed, subschemas {first}, {i} matched"),
                            ));
                            break;
                        }
                    },
                }
            }
            if matched.is_none() {
                errs.push(wrap("'oneOf' failed, none matched", e, loc));
            }
        }
        if self.draft >= 7 {
            if let Some(i) = s.get("if") {
                if self.validate(i, v, loc).is_none() {
                    if let Some(t) = s.get("then") {
                        errs.extend(self.validate(t, v, loc));
                    }
                } else if let Some(e) = s.get("else") {
                    errs.extend(self.validate(e, v, loc));
                }
            }
        }
    }
}

/// encoding/json's syntax error text for what serde_json reports.
fn go_json_syntax_error(src: &[u8], e: &serde_json::Error) -> String {
    // The library reads with a json.Decoder: io.EOF / io.ErrUnexpectedEOF.
    if e.is_eof() {
        let empty = src.iter().all(u8::is_ascii_whitespace);
        return if empty { "EOF" } else { "unexpected EOF" }.to_owned();
    }
    // serde_json's line/column (1-based, column in bytes) to the offending byte.
    let mut line = 1;
    let mut offset = src.len();
    let mut line_start = 0;
    for (i, b) in src.iter().enumerate() {
        if line == e.line() {
            offset = (line_start + e.column()).saturating_sub(1).min(src.len());
            break;
        }
        if *b == b'\n' {
            line += 1;
            line_start = i + 1;
        }
    }
    if line == e.line() && offset == src.len() {
        offset = (line_start + e.column()).saturating_sub(1).min(src.len());
    }
    let c = std::str::from_utf8(&src[offset.min(src.len())..])
        .ok()
        .and_then(|s| s.chars().next())
        .unwrap_or('\u{fffd}');
    let quoted = match c {
        '\'' => "'\\''".to_owned(),
        '"' => "'\"'".to_owned(),
        c => {
            let q = flotilla_gotmpl::gofmt::quote(&c.to_string());
            format!("'{}'", &q[1..q.len() - 1])
        }
    };
    let msg = e.to_string();
    let context = if msg.starts_with("expected `:`") {
        "after object key"
    } else if msg.starts_with("expected `,` or `}`") {
        "after object key:value pair"
    } else if msg.starts_with("expected `,` or `]`") {
        "after array element"
    } else if msg.starts_with("key must be a string") {
        "looking for beginning of object key string"
    } else if msg.starts_with("trailing characters") {
        "after top-level value"
    } else {
        "looking for beginning of value"
    };
    format!("invalid character {quoted} {context}")
}

impl Walker<'_> {
    /// The first local `$ref` (`#/...`) that points nowhere, as the library refuses to compile
    /// such a schema.
    fn unresolved_local_ref(&self, v: &Value) -> Option<String> {
        match v {
            Value::Object(m) => {
                if let Some(Value::String(r)) = m.get("$ref") {
                    if r.starts_with("#/") && self.resolve(r).is_none() {
                        return Some(r.clone());
                    }
                }
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "enum" | "const" | "default" | "examples")
                    })
                    .find_map(|(_, v)| self.unresolved_local_ref(v))
            }
            Value::Array(a) => a.iter().find_map(|v| self.unresolved_local_ref(v)),
            _ => None,
        }
    }
}

/// Whether our walk checks everything the `jsonschema` crate would check in schema `s`, so
/// that when the walk finds nothing the crate need not be compiled (it is most of the cost of
/// validating a big schema): only keywords the walk knows or that no validator asserts,
/// local `$ref`s, a known draft, no `format` (the crate asserts more formats, and more
/// strictly) and `pattern`s that compile alike everywhere. Anything else goes to the crate.
fn walk_covers(s: &Value, root: bool) -> bool {
    let o = match s {
        Value::Bool(_) => return true,
        Value::Object(o) => o,
        _ => return false,
    };
    let all = |v: &Value| match v {
        Value::Array(a) => a.iter().all(|x| walk_covers(x, false)),
        _ => false,
    };
    let each = |v: &Value| match v {
        Value::Object(m) => m.values().all(|x| walk_covers(x, false)),
        _ => false,
    };
    o.iter().all(|(k, v)| match k.as_str() {
        "properties" | "definitions" | "$defs" | "dependentSchemas" => each(v),
        "patternProperties" => {
            each(v)
                && v.as_object()
                    .is_some_and(|m| m.keys().all(|p| plain_pattern(p)))
        }
        "dependencies" => v.as_object().is_some_and(|m| {
            m.values().all(|x| match x {
                Value::Array(a) => a.iter().all(Value::is_string),
                other => walk_covers(other, false),
            })
        }),
        "items" => match v {
            Value::Array(_) => all(v),
            other => walk_covers(other, false),
        },
        "additionalItems"
        | "additionalProperties"
        | "propertyNames"
        | "contains"
        | "not"
        | "if"
        | "then"
        | "else" => walk_covers(v, false),
        "prefixItems" | "allOf" | "anyOf" | "oneOf" => all(v),
        "pattern" => v.as_str().is_some_and(plain_pattern),
        "$ref" => v.as_str().is_some_and(|r| r == "#" || r.starts_with("#/")),
        "$id" => root,
        "$schema" => {
            root && v.as_str().is_some_and(|d| {
                ["draft-04", "draft-06", "draft-07", "2019-09", "2020-12"]
                    .iter()
                    .any(|n| d.contains(n))
            })
        }
        "format"
        | "id"
        | "$anchor"
        | "$dynamicRef"
        | "$dynamicAnchor"
        | "$recursiveRef"
        | "$recursiveAnchor"
        | "$vocabulary"
        | "unevaluatedProperties"
        | "unevaluatedItems"
        | "contentEncoding"
        | "contentMediaType"
        | "contentSchema" => false,
        // Assertions on values, annotations, data (`enum`, `const`, `default`) and keywords
        // no validator knows.
        _ => true,
    })
}

/// A regular expression that Go's RE2, ECMA-262 and Rust's `regex` read alike: it compiles
/// with `regex` and uses no flags groups, POSIX classes, Unicode classes or anchors of one
/// syntax only.
fn plain_pattern(p: &str) -> bool {
    !["(?", "[[:", "\\A", "\\z", "\\Z", "\\p", "\\P", "\\Q", "\\C"]
        .iter()
        .any(|x| p.contains(x))
        && regex::Regex::new(p).is_ok()
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(x) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(x);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(schema: &str) -> bool {
        walk_covers(
            &serde_json::from_str(schema).expect("test schema is JSON"),
            true,
        )
    }

    #[test]
    fn the_crate_is_skipped_only_for_keywords_the_walk_checks() {
        for s in [
            r##"{"$schema": "http://json-schema.org/draft-07/schema#", "$id": "x", "type": "object",
                "properties": {"format": {"type": "string", "pattern": "^[a-z]+$"},
                "a": {"$ref": "#/definitions/a"}}, "definitions": {"a": {"enum": [1]}},
                "default": {"format": "email"}, "form": true}"##,
            r##"{"items": [{"type": "string"}], "additionalItems": false,
                "patternProperties": {"^x-": {"oneOf": [true, {"minimum": 1}]}},
                "dependencies": {"a": ["b"], "c": {"required": ["d"]}}}"##,
        ] {
            assert!(covers(s), "{s}");
        }
        for s in [
            r##"{"properties": {"a": {"type": "string", "format": "email"}}}"##,
            r##"{"properties": {"a": {"unevaluatedProperties": false}}}"##,
            r##"{"properties": {"a": {"$ref": "other.json#/a"}}}"##,
            r##"{"properties": {"a": {"$id": "nested"}}}"##,
            r##"{"properties": {"a": {"pattern": "(?i)^abc$"}}}"##,
            r##"{"properties": {"a": {"pattern": "[unclosed"}}}"##,
            r##"{"patternProperties": {"\\p{L}": true}}"##,
            r##"{"$schema": "https://example.com/custom-meta"}"##,
            r##"{"items": 5}"##,
        ] {
            assert!(!covers(s), "{s}");
        }
    }
}
