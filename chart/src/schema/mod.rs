//! `values.schema.json` validation with Helm's error text.
//!
//! Helm (v4) validates with `santhosh-tekuri/jsonschema/v6` and prints its error tree:
//! `- at '/path': message`, nested causes indented by two spaces, numbers in
//! `golang.org/x/text` English form (`1,000`, `1×10⁰⁶`). This module walks the schema the way
//! that library does (keyword order, `validation failed` groups, `'allOf' failed`…, `$ref`
//! wrappers that disappear when they hold one cause, draft ≤ 7 ignoring `$ref` siblings) for
//! the standard vocabulary with local `$ref`s.
//!
//! The schema is read once into a borrowed tree ([`tree::J`]) and checked in one pass
//! ([`Walker::prepare`]): every local `$ref` is resolved (and cached), every `pattern` compiled
//! (and cached), and each keyword's value is checked against what the draft's meta-schema
//! allows. When that pass finds only what our walk checks and a schema the meta-schema
//! certainly accepts, our walk alone decides. Otherwise (a keyword we do not walk, e.g.
//! `unevaluatedProperties` or `$dynamicRef`, `format` in drafts ≤ 7, a remote `$ref`, a
//! schema the meta-schema may refuse) the schema is first walked by its draft's meta-schema
//! ([`meta`]), whose refusal is Helm's error word for word; then the `jsonschema` crate
//! decides after our walk found nothing: its errors are printed in the same `- at '…': …`
//! shape with the crate's message.
//! Objects are walked in sorted key order (Go's map order is random, so Helm's order varies
//! from run to run). Remote `$ref`s are resolved from documents the caller fetched
//! ([`remote`]: this crate does no IO); one that is missing fails as Helm's compile does,
//! `failing loading "<url>": <reason>`.

// The walk mirrors the Go library keyword by keyword; nested `if`s keep that shape readable.
#![allow(clippy::collapsible_if)]

mod meta;
pub mod remote;
mod tree;

use std::borrow::Cow;
use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value};

use crate::chart::Chart;
use crate::gofmt::go_type;
use crate::values::Values;
use flotilla_gotmpl::gofmt::quote as go_quote;
use remote::RemoteSchemas;
use tree::{J, obj_get};

/// Schema validation failed; `Display` is Helm's full message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("values don't meet the specifications of the schema(s) in the following chart(s):\n{0}")]
pub struct SchemaError(pub String);

/// `ValidateAgainstSchema(chart, values)` wrapped as `ToRenderValuesWithSchemaValidation`
/// reports it. `values` are the coalesced values of `chart`; subcharts are checked against
/// `values[<subchart name>]`.
pub fn validate_against_schema(chart: &Chart, values: &Values) -> Result<(), SchemaError> {
    validate_against_schema_as(chart, values, false, &RemoteSchemas::new())
}

/// [`validate_against_schema`] (or, with `redact`, [`validate_against_schema_redacted`])
/// with the remote documents the schemas reference ([`remote::chart_remote_refs`]) fetched.
pub fn validate_against_schema_with(
    chart: &Chart,
    values: &Values,
    remote: &RemoteSchemas,
    redact: bool,
) -> Result<(), SchemaError> {
    validate_against_schema_as(chart, values, redact, remote)
}

/// The message of a cause withheld by [`validate_against_schema_redacted`].
pub const WITHHELD: &str = "value does not meet the schema (message withheld: it would quote the value, which may hold Secret data)";

/// [`validate_against_schema`] for messages that reach conditions, Events and logs, where the
/// values may hold Secret data: a cause whose message quotes any scalar of the value it is
/// about (the value itself, or a string or number inside it) reads [`WITHHELD`] instead.
/// Its `- at '/path':` stays, and so do messages that quote nothing of the value (`got
/// string, want integer`, `missing property 'x'`).
pub fn validate_against_schema_redacted(chart: &Chart, values: &Values) -> Result<(), SchemaError> {
    validate_against_schema_as(chart, values, true, &RemoteSchemas::new())
}

fn validate_against_schema_as(
    chart: &Chart,
    values: &Values,
    redact: bool,
    remote: &RemoteSchemas,
) -> Result<(), SchemaError> {
    let text = validate_tree(chart, values, redact, remote);
    if text.is_empty() {
        Ok(())
    } else {
        Err(SchemaError(text))
    }
}

fn validate_tree(chart: &Chart, values: &Values, redact: bool, remote: &RemoteSchemas) -> String {
    let mut sb = String::new();
    if let Some(schema) = &chart.schema {
        if let Err(e) = validate_single_as(values, schema, redact, remote) {
            sb.push_str(&format!("{}:\n{e}", chart.name()));
        }
    }
    for sub in &chart.dependencies {
        match values.get(sub.name()) {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => sb.push_str(&validate_tree(sub, m, redact, remote)),
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
    validate_single_as(values, schema_json, false, &RemoteSchemas::new())
}

fn validate_single_as(
    values: &Values,
    schema_json: &[u8],
    redact: bool,
    remote: &RemoteSchemas,
) -> Result<(), String> {
    let schema = J::parse(schema_json).map_err(|e| go_json_syntax_error(schema_json, &e))?;
    let walker = Walker::new(&schema);
    let prep = walker.prepare();
    let known_draft = match schema.get("$schema") {
        None => true,
        Some(u) => u.as_str().and_then(draft_from_url).is_some(),
    };
    if !prep.covered && known_draft {
        // The library checks the schema against its meta-schema before anything else.
        if let meta::Verdict::Invalid(text) = meta::check(&schema, walker.draft) {
            return Err(text);
        }
    }
    // A schema our walk covers has local references only.
    let value = (!prep.covered).then(|| schema.to_value());
    if let Some(value) = &value
        && let Some(e) = remote::first_unavailable(value, remote::ROOT_URL, remote)
    {
        // The compile fails loading it, before any value is looked at.
        return Err(e);
    }
    if let Some(r) = prep.unresolved {
        return Err(format!(
            "json-pointer in \"file:///values.schema.json{r}\" not found"
        ));
    }
    // Our walk decides first (it asserts what the Go library asserts, e.g. `format` for
    // drafts up to 7); the crate covers what the walk does not know.
    let ours = walker.validate(&schema, Inst::M(values), &mut Vec::new());
    if ours.is_none() && prep.covered {
        // Every keyword the library would check, our walk has checked, and the meta-schema
        // accepts the schema.
        return Ok(());
    }
    let causes = match ours {
        Some(node) => match node.kind {
            Kind::Group => node.causes,
            _ => vec![node],
        },
        None => {
            let schema = value.unwrap_or_else(|| schema.to_value());
            let instance = Value::Object(values.clone());
            let validator = jsonschema::options()
                .with_retriever(remote::MapRetriever(remote.clone()))
                .build(&schema);
            match validator {
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
            }
        }
    };
    if causes.is_empty() {
        return Ok(());
    }
    let mut causes = causes;
    if redact {
        let root = Value::Object(values.clone());
        for c in &mut causes {
            c.redact(&root);
        }
    }
    let mut sb = String::new();
    for c in &causes {
        c.display(&mut sb, 1);
    }
    // Drop the leading newline the root line would have preceded.
    Err(format!("{}\n", sb.trim_start_matches('\n')))
}

/// Whether our walk alone decides for this schema (no `jsonschema` crate): a well-formed
/// schema of the keywords we walk that the draft's meta-schema certainly accepts.
#[doc(hidden)]
pub fn walk_alone_decides(schema_json: &[u8]) -> bool {
    let Ok(schema) = J::parse(schema_json) else {
        return false;
    };
    let walker = Walker::new(&schema);
    let prep = walker.prepare();
    prep.covered && prep.unresolved.is_none()
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

    /// Replaces (here and in every cause) a message quoting a scalar of the instance it is
    /// about (looked up in `root`; an instance not found counts as quoted) by [`WITHHELD`].
    fn redact(&mut self, root: &Value) {
        if let Kind::Msg(m) | Kind::Wrapper(m) = &mut self.kind {
            let quoted = instance_at(root, &self.loc).is_none_or(|v| quotes_scalar_of(m, v));
            if quoted {
                *m = WITHHELD.to_owned();
            }
        }
        for c in &mut self.causes {
            c.redact(root);
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

/// The value at path `tokens` (object keys, array indices) under `root`.
fn instance_at<'v>(root: &'v Value, tokens: &[String]) -> Option<&'v Value> {
    tokens.iter().try_fold(root, |v, t| match v {
        Value::Object(m) => m.get(t),
        Value::Array(a) => t.parse::<usize>().ok().and_then(|i| a.get(i)),
        _ => None,
    })
}

/// Whether `message` holds a string or number of `v` (or inside it) in any form a message
/// prints it: as is, Go-quoted, JSON-quoted, or a number in English form.
fn quotes_scalar_of(message: &str, v: &Value) -> bool {
    match v {
        Value::String(s) => {
            !s.is_empty()
                && (message.contains(s.as_str())
                    || message.contains(&quote(s))
                    || serde_json::to_string(s).is_ok_and(|j| message.contains(&j)))
        }
        Value::Number(n) => {
            message.contains(&n.to_string())
                || n.as_f64()
                    .is_some_and(|f| message.contains(&localized_number(f)))
        }
        Value::Array(a) => a.iter().any(|v| quotes_scalar_of(message, v)),
        Value::Object(m) => m.values().any(|v| quotes_scalar_of(message, v)),
        Value::Bool(_) | Value::Null => false,
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

/// One instance value: a values map is checked in place, never copied into a `Value`.
#[derive(Clone, Copy)]
enum Inst<'v> {
    V(&'v Value),
    M(&'v Map<String, Value>),
    S(&'v str),
}

impl<'v> Inst<'v> {
    fn type_name(self) -> &'static str {
        match self {
            Inst::V(v) => type_name(v),
            Inst::M(_) => "object",
            Inst::S(_) => "string",
        }
    }

    fn as_f64(self) -> Option<f64> {
        match self {
            Inst::V(v) => v.as_f64(),
            _ => None,
        }
    }

    /// The address of the value (the same value at the same place in the values).
    fn addr(self) -> usize {
        match self {
            Inst::V(Value::Object(m)) | Inst::M(m) => std::ptr::from_ref(m) as usize,
            Inst::V(v) => std::ptr::from_ref(v) as usize,
            Inst::S(s) => s.as_ptr() as usize,
        }
    }

    fn equals(self, j: &J<'_>) -> bool {
        match (self, j) {
            (Inst::V(v), j) => value_equals(v, j),
            (Inst::M(m), J::Obj(o)) => map_equals(m, o),
            (Inst::S(s), J::Str(t)) => s == t.as_ref(),
            _ => false,
        }
    }
}

fn map_equals(m: &Map<String, Value>, o: &[(Cow<'_, str>, J<'_>)]) -> bool {
    m.len() == o.len()
        && o.iter()
            .all(|(k, j)| m.get(k.as_ref()).is_some_and(|v| value_equals(v, j)))
}

/// The library's `equals` between an instance value and a schema value (numbers by value).
fn value_equals(v: &Value, j: &J<'_>) -> bool {
    match (v, j) {
        (Value::Null, J::Null) => true,
        (Value::Bool(a), J::Bool(b)) => a == b,
        (Value::Number(x), J::Num(y)) => x.as_f64() == y.as_f64(),
        (Value::String(a), J::Str(b)) => a == b.as_ref(),
        (Value::Array(a), J::Arr(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(p, q)| value_equals(p, q))
        }
        (Value::Object(m), J::Obj(o)) => map_equals(m, o),
        _ => false,
    }
}

/// Equality of two schema values, numbers by value (the meta-schema's `uniqueItems`).
fn j_equals(a: &J<'_>, b: &J<'_>) -> bool {
    match (a, b) {
        (J::Num(x), J::Num(y)) => x.as_f64() == y.as_f64(),
        (J::Arr(x), J::Arr(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| j_equals(p, q))
        }
        (J::Obj(x), J::Obj(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((k, p), (l, q))| k == l && j_equals(p, q))
        }
        _ => a == b,
    }
}

/// `display(v)` of a schema value: strings quoted, containers `value`, others `%v`.
fn display_j(j: &J<'_>) -> String {
    match j {
        J::Str(s) => quote(s),
        J::Arr(_) | J::Obj(_) => "value".to_owned(),
        other => crate::gofmt::go_v(&other.to_value()),
    }
}

/// The draft a `$schema` URL names, as the library's `draftFromURL` reads it (no fragment
/// but an empty one, `http` or `https`); `None` for a URL it would load as a meta-schema.
fn draft_from_url(url: &str) -> Option<u32> {
    let (u, frag) = url.split_once('#').unwrap_or((url, ""));
    if !frag.is_empty() {
        return None;
    }
    let u = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"))
        .unwrap_or(u);
    match u {
        "json-schema.org/schema" | "json-schema.org/draft/2020-12/schema" => Some(2020),
        "json-schema.org/draft/2019-09/schema" => Some(2019),
        "json-schema.org/draft-07/schema" => Some(7),
        "json-schema.org/draft-06/schema" => Some(6),
        "json-schema.org/draft-04/schema" => Some(4),
        _ => None,
    }
}

fn draft_of(schema: &J<'_>) -> u32 {
    let Some(s) = schema.get("$schema").and_then(J::as_str) else {
        return 2020;
    };
    draft_from_url(s).unwrap_or(if s.contains("draft-04") {
        4
    } else if s.contains("draft-06") {
        6
    } else if s.contains("draft-07") {
        7
    } else if s.contains("2019-09") {
        2019
    } else {
        2020
    })
}

/// What [`Walker::prepare`] found.
struct Prep {
    /// Our walk checks everything the library would, and the meta-schema accepts the schema.
    covered: bool,
    /// The first local `$ref` that points nowhere.
    unresolved: Option<String>,
}

/// The keywords of one schema object, gathered in one pass over its keys.
#[derive(Default)]
struct Kw<'s> {
    type_: Option<&'s J<'s>>,
    const_: Option<&'s J<'s>>,
    enum_: Option<&'s J<'s>>,
    format: Option<&'s J<'s>>,
    ref_: Option<&'s J<'s>>,
    min_properties: Option<&'s J<'s>>,
    max_properties: Option<&'s J<'s>>,
    required: Option<&'s J<'s>>,
    dependencies: Option<&'s J<'s>>,
    properties: Option<&'s J<'s>>,
    pattern_properties: Option<&'s J<'s>>,
    additional_properties: Option<&'s J<'s>>,
    property_names: Option<&'s J<'s>>,
    dependent_schemas: Option<&'s J<'s>>,
    dependent_required: Option<&'s J<'s>>,
    min_items: Option<&'s J<'s>>,
    max_items: Option<&'s J<'s>>,
    unique_items: Option<&'s J<'s>>,
    items: Option<&'s J<'s>>,
    additional_items: Option<&'s J<'s>>,
    prefix_items: Option<&'s J<'s>>,
    contains: Option<&'s J<'s>>,
    min_contains: Option<&'s J<'s>>,
    max_contains: Option<&'s J<'s>>,
    min_length: Option<&'s J<'s>>,
    max_length: Option<&'s J<'s>>,
    pattern: Option<&'s J<'s>>,
    minimum: Option<&'s J<'s>>,
    maximum: Option<&'s J<'s>>,
    exclusive_minimum: Option<&'s J<'s>>,
    exclusive_maximum: Option<&'s J<'s>>,
    multiple_of: Option<&'s J<'s>>,
    not: Option<&'s J<'s>>,
    all_of: Option<&'s J<'s>>,
    any_of: Option<&'s J<'s>>,
    one_of: Option<&'s J<'s>>,
    if_: Option<&'s J<'s>>,
    then: Option<&'s J<'s>>,
    else_: Option<&'s J<'s>>,
    dynamic_ref: Option<&'s J<'s>>,
    recursive_ref: Option<&'s J<'s>>,
}

impl<'s> Kw<'s> {
    fn of(obj: &'s [(Cow<'s, str>, J<'s>)]) -> Kw<'s> {
        let mut kw = Kw::default();
        for (k, v) in obj {
            let slot = match k.as_ref() {
                "type" => &mut kw.type_,
                "const" => &mut kw.const_,
                "enum" => &mut kw.enum_,
                "format" => &mut kw.format,
                "$ref" => &mut kw.ref_,
                "minProperties" => &mut kw.min_properties,
                "maxProperties" => &mut kw.max_properties,
                "required" => &mut kw.required,
                "dependencies" => &mut kw.dependencies,
                "properties" => &mut kw.properties,
                "patternProperties" => &mut kw.pattern_properties,
                "additionalProperties" => &mut kw.additional_properties,
                "propertyNames" => &mut kw.property_names,
                "dependentSchemas" => &mut kw.dependent_schemas,
                "dependentRequired" => &mut kw.dependent_required,
                "minItems" => &mut kw.min_items,
                "maxItems" => &mut kw.max_items,
                "uniqueItems" => &mut kw.unique_items,
                "items" => &mut kw.items,
                "additionalItems" => &mut kw.additional_items,
                "prefixItems" => &mut kw.prefix_items,
                "contains" => &mut kw.contains,
                "minContains" => &mut kw.min_contains,
                "maxContains" => &mut kw.max_contains,
                "minLength" => &mut kw.min_length,
                "maxLength" => &mut kw.max_length,
                "pattern" => &mut kw.pattern,
                "minimum" => &mut kw.minimum,
                "maximum" => &mut kw.maximum,
                "exclusiveMinimum" => &mut kw.exclusive_minimum,
                "exclusiveMaximum" => &mut kw.exclusive_maximum,
                "multipleOf" => &mut kw.multiple_of,
                "not" => &mut kw.not,
                "allOf" => &mut kw.all_of,
                "anyOf" => &mut kw.any_of,
                "oneOf" => &mut kw.one_of,
                "if" => &mut kw.if_,
                "then" => &mut kw.then,
                "else" => &mut kw.else_,
                "$dynamicRef" => &mut kw.dynamic_ref,
                "$recursiveRef" => &mut kw.recursive_ref,
                _ => continue,
            };
            *slot = Some(v);
        }
        kw
    }
}

/// `min*`/`max*` of a count (properties, items, characters): each bound that `len` breaks, as
/// Helm's library words it.
fn count_bounds(
    len: usize,
    (min_name, min): (&str, Option<&J<'_>>),
    (max_name, max): (&str, Option<&J<'_>>),
    loc: &[String],
    errs: &mut Vec<Node>,
) {
    let msg = |name: &str, want: usize| {
        format!(
            "{name}: got {}, want {}",
            localized_int(len),
            localized_int(want)
        )
    };
    if let Some(want) = usize_of(min).filter(|w| len < *w) {
        errs.push(Node::msg(loc.to_vec(), msg(min_name, want)));
    }
    if let Some(want) = usize_of(max).filter(|w| len > *w) {
        errs.push(Node::msg(loc.to_vec(), msg(max_name, want)));
    }
}

fn usize_of(v: Option<&J<'_>>) -> Option<usize> {
    v.and_then(J::as_f64).map(|f| f as usize)
}

struct Walker<'s> {
    root: &'s J<'s>,
    draft: u32,
    /// Local `$ref` targets by the address of the reference text in the schema.
    refs: RefCell<HashMap<usize, Option<&'s J<'s>>>>,
    /// Compiled `pattern`s and `patternProperties` names by the address of their text.
    regexes: RefCell<HashMap<usize, Option<flotilla_sprig::Pattern>>>,
    /// When walking a meta-schema over a schema: its documents, and this one's URL.
    meta: Option<&'s meta::MetaDocs>,
    base: &'s str,
    /// The local `$ref` targets being validated, each with the instance value it is
    /// validating (by address): meeting one again is a reference cycle.
    ref_scope: RefCell<Vec<(usize, usize)>>,
}

impl<'s> Walker<'s> {
    fn new(root: &'s J<'s>) -> Self {
        Walker {
            root,
            draft: draft_of(root),
            refs: RefCell::new(HashMap::new()),
            regexes: RefCell::new(HashMap::new()),
            meta: None,
            base: "",
            ref_scope: RefCell::new(Vec::new()),
        }
    }

    /// A walker of meta-schema document `i` (its own draft, formats asserted).
    fn for_meta(m: &'s meta::MetaDocs, i: usize) -> Self {
        let (url, root) = &m.docs[i];
        Walker {
            meta: Some(m),
            base: url,
            ..Walker::new(root)
        }
    }

    /// A format the meta-schemas assert, on a string of the schema document.
    fn meta_format(&self, m: &meta::MetaDocs, f: &str, sv: &str) {
        let ok = match f {
            "regex" => plain_pattern(sv) && self.is_match_owned(sv),
            "uri-reference" | "uriref" => plain_uri_reference(sv),
            "uri" => {
                sv.split_once("://").is_some_and(|(scheme, rest)| {
                    !scheme.is_empty()
                        && scheme.bytes().all(|b| b.is_ascii_alphanumeric())
                        && !rest.is_empty()
                }) && plain_uri_reference(sv)
            }
            _ => false,
        };
        if !ok {
            // Go's parsers' verdicts and messages are not ours to guess.
            m.undecided.set(true);
        }
    }

    fn is_match_owned(&self, p: &str) -> bool {
        go_pattern(p).is_some_and(|g| flotilla_sprig::Pattern::from_translated(&g).is_some())
    }

    fn resolve_uncached(&self, r: &str) -> Option<&'s J<'s>> {
        let frag = r.strip_prefix('#')?;
        let mut cur = self.root;
        if frag.is_empty() {
            return Some(cur);
        }
        for tok in frag.strip_prefix('/')?.split('/') {
            let tok: Cow<'_, str> = if tok.contains(['%', '~']) {
                Cow::Owned(percent_decode(tok).replace("~1", "/").replace("~0", "~"))
            } else {
                Cow::Borrowed(tok)
            };
            cur = match cur {
                J::Obj(m) => obj_get(m, &tok)?,
                J::Arr(a) => a.get(tok.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(cur)
    }

    /// `r` must be text inside the schema tree (its address keys the cache).
    fn resolve(&self, r: &'s str) -> Option<&'s J<'s>> {
        let key = r.as_ptr() as usize;
        if let Some(t) = self.refs.borrow().get(&key) {
            return *t;
        }
        let t = self.resolve_uncached(r);
        self.refs.borrow_mut().insert(key, t);
        t
    }

    /// Whether `text` matches pattern `p` (text inside the schema tree); `None` when `p` does
    /// not compile.
    fn is_match(&self, p: &'s str, text: &str) -> Option<bool> {
        let key = p.as_ptr() as usize;
        if let Some(re) = self.regexes.borrow().get(&key) {
            return re.as_ref().map(|re| re.is_match(text));
        }
        let re = go_pattern(p).and_then(|g| flotilla_sprig::Pattern::from_translated(&g));
        let m = re.as_ref().map(|re| re.is_match(text));
        self.regexes.borrow_mut().insert(key, re);
        m
    }

    fn validate(&self, s: &'s J<'s>, v: Inst<'_>, loc: &mut Vec<String>) -> Option<Node> {
        let obj = match s {
            J::Bool(true) => return None,
            J::Bool(false) => return Some(Node::msg(loc.clone(), "false schema".into())),
            J::Obj(o) => o,
            _ => return None,
        };
        let kw = Kw::of(obj);
        // Drafts before 2019-09 compile nothing but `$ref` (and, from draft 6, `const` and
        // a few applicators it never reaches) beside a `$ref`.
        let ref_only = self.draft < 2019 && matches!(kw.ref_, Some(J::Str(_)));
        if !ref_only {
            if let Some(t) = kw.type_ {
                let mut want: Vec<&str> = match t {
                    J::Str(s) => vec![s.as_ref()],
                    J::Arr(a) => a.iter().filter_map(J::as_str).collect(),
                    _ => Vec::new(),
                };
                // The library keeps types as a set and lists them in this order.
                const ORDER: [&str; 7] = [
                    "null", "boolean", "number", "integer", "string", "array", "object",
                ];
                want.sort_by_key(|t| ORDER.iter().position(|o| o == t).unwrap_or(ORDER.len()));
                want.dedup();
                if !want.is_empty() {
                    let got = v.type_name();
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
        }
        if self.draft >= 6 {
            if let Some(c) = kw.const_ {
                if !v.equals(c) {
                    let m = match c {
                        J::Arr(_) | J::Obj(_) => "const failed".to_owned(),
                        other => format!("value must be {}", display_j(other)),
                    };
                    return Some(Node::msg(loc.clone(), m));
                }
            }
        }
        if !ref_only {
            if let Some(J::Arr(items)) = kw.enum_ {
                if !items.iter().any(|i| v.equals(i)) {
                    let m = if items.iter().any(|i| matches!(i, J::Arr(_) | J::Obj(_))) {
                        "enum failed".to_owned()
                    } else if items.len() == 1 {
                        format!("value must be {}", display_j(&items[0]))
                    } else {
                        format!(
                            "value must be one of {}",
                            items.iter().map(display_j).collect::<Vec<_>>().join(", ")
                        )
                    };
                    return Some(Node::msg(loc.clone(), m));
                }
            }
            if self.draft <= 7 || self.meta.is_some() {
                let sv = match v {
                    Inst::S(s) => Some(s),
                    Inst::V(Value::String(s)) => Some(s.as_str()),
                    _ => None,
                };
                if let (Some(m), Some(J::Str(f)), Some(sv)) = (self.meta, kw.format, sv) {
                    self.meta_format(m, f, sv);
                }
                if let (Some(J::Str(f)), Some(sv), true) = (kw.format, sv, self.draft <= 7) {
                    if f == "email" && !sv.contains('@') {
                        return Some(Node::msg(
                            loc.clone(),
                            format!("{} is not valid email: missing @", quote(sv)),
                        ));
                    }
                }
            }
        }
        let mut errs: Vec<Node> = Vec::new();
        if let Some(J::Str(r)) = kw.ref_ {
            let e = self.validate_ref(r, v, loc);
            if self.draft < 2019 {
                return e;
            }
            errs.extend(e);
        }
        match v {
            Inst::M(m) | Inst::V(Value::Object(m)) => self.obj_validate(&kw, m, loc, &mut errs),
            Inst::V(Value::Array(a)) => self.arr_validate(&kw, a, loc, &mut errs),
            Inst::S(st) => self.str_validate(&kw, st, loc, &mut errs),
            Inst::V(Value::String(st)) => self.str_validate(&kw, st, loc, &mut errs),
            Inst::V(Value::Number(_)) => self.num_validate(&kw, v, loc, &mut errs),
            _ => {}
        }
        if let Some(m) = self.meta {
            // `$recursiveRef: "#"` and `$dynamicRef: "#meta"` of the meta-schemas resolve to
            // the entry meta-schema (outermost in the dynamic scope).
            if kw.recursive_ref.is_some() || kw.dynamic_ref.is_some() {
                let w = Walker::for_meta(m, 0);
                if let Some(e) = w.validate(w.root, v, loc) {
                    errs.push(meta::reference(e, loc));
                }
            }
        }
        self.cond_validate(&kw, v, loc, &mut errs);
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

    fn validate_ref(&self, r: &'s str, v: Inst<'_>, loc: &mut Vec<String>) -> Option<Node> {
        if let Some(m) = self.meta {
            if !r.starts_with('#') {
                let (doc, frag) = r.split_once('#').unwrap_or((r, ""));
                let url = meta::join(self.base, doc);
                let Some(i) = m.docs.iter().position(|(u, _)| *u == url) else {
                    m.undecided.set(true);
                    return None;
                };
                let w = Walker::for_meta(m, i);
                let Some(target) = w.resolve_uncached(&format!("#{frag}")) else {
                    m.undecided.set(true);
                    return None;
                };
                let err = w.validate(target, v, loc)?;
                return Some(meta::reference(err, loc));
            }
        }
        let target = self.resolve(r)?;
        let key = (std::ptr::from_ref(target) as usize, v.addr());
        if self.ref_scope.borrow().contains(&key) {
            // The library reports the two keyword locations; ours names the reference.
            return Some(Node::msg(
                loc.clone(),
                format!(
                    "$ref {} resolves to \"file:///values.schema.json{r}\" causing reference cycle",
                    quote(r)
                ),
            ));
        }
        self.ref_scope.borrow_mut().push(key);
        let err = self.validate(target, v, loc);
        self.ref_scope.borrow_mut().pop();
        let err = err?;
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
        s: &'s J<'s>,
        v: &Value,
        loc: &mut Vec<String>,
        tok: &str,
    ) -> Option<Node> {
        loc.push(tok.to_owned());
        let r = self.validate(s, Inst::V(v), loc);
        loc.pop();
        r
    }

    fn obj_validate(
        &self,
        kw: &Kw<'s>,
        obj: &Map<String, Value>,
        loc: &mut Vec<String>,
        errs: &mut Vec<Node>,
    ) {
        count_bounds(
            obj.len(),
            ("minProperties", kw.min_properties),
            ("maxProperties", kw.max_properties),
            loc,
            errs,
        );
        let missing_of = |reqd: &J<'_>| -> Vec<String> {
            reqd.as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(J::as_str)
                        .filter(|k| !obj.contains_key(*k))
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        if let Some(reqd) = kw.required {
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
        if let Some(J::Obj(deps)) = kw.dependencies {
            for (pname, dep) in deps {
                if !obj.contains_key(pname.as_ref()) {
                    continue;
                }
                match dep {
                    J::Arr(_) => {
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
                    other => errs.extend(self.validate(other, Inst::M(obj), loc)),
                }
            }
        }
        let props = kw.properties.and_then(J::as_object);
        let pattern_props = kw.pattern_properties.and_then(J::as_object);
        let additional = kw.additional_properties;
        let mut additional_names = Vec::new();
        for (pname, pvalue) in obj {
            let mut evaluated = false;
            if let Some(sch) = props.and_then(|p| obj_get(p, pname)) {
                evaluated = true;
                errs.extend(self.validate_val(sch, pvalue, loc, pname));
            }
            for (pat, sch) in pattern_props.unwrap_or_default() {
                if self.is_match(pat, pname) == Some(true) {
                    evaluated = true;
                    errs.extend(self.validate_val(sch, pvalue, loc, pname));
                }
            }
            if !evaluated {
                match additional {
                    Some(J::Bool(false)) => additional_names.push(pname.clone()),
                    Some(sch @ J::Obj(_)) => {
                        errs.extend(self.validate_val(sch, pvalue, loc, pname))
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
        if let Some(pn) = kw.property_names {
            for pname in obj.keys() {
                if let Some(e) = self.validate(pn, Inst::S(pname), &mut Vec::new()) {
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
        if self.draft < 2019 {
            return;
        }
        if let Some(J::Obj(ds)) = kw.dependent_schemas {
            for (pname, sch) in ds {
                if obj.contains_key(pname.as_ref()) {
                    errs.extend(self.validate(sch, Inst::M(obj), loc));
                }
            }
        }
        if let Some(J::Obj(dr)) = kw.dependent_required {
            for (pname, reqd) in dr {
                if obj.contains_key(pname.as_ref()) {
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
        kw: &Kw<'s>,
        arr: &[Value],
        loc: &mut Vec<String>,
        errs: &mut Vec<Node>,
    ) {
        count_bounds(
            arr.len(),
            ("minItems", kw.min_items),
            ("maxItems", kw.max_items),
            loc,
            errs,
        );
        if kw.unique_items == Some(&J::Bool(true)) && arr.len() > 1 {
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
            match kw.items {
                Some(J::Arr(items)) => {
                    let n = arr.len().min(items.len());
                    for (i, item) in arr[..n].iter().enumerate() {
                        errs.extend(self.validate_val(&items[i], item, loc, &i.to_string()));
                    }
                    evaluated = n;
                }
                Some(sch) => {
                    for (i, item) in arr.iter().enumerate() {
                        errs.extend(self.validate_val(sch, item, loc, &i.to_string()));
                    }
                    evaluated = arr.len();
                }
                None => {}
            }
            if matches!(kw.items, Some(J::Arr(_))) {
                match kw.additional_items {
                    Some(J::Bool(false)) if evaluated != arr.len() => {
                        errs.push(Node::msg(
                            loc.clone(),
                            format!(
                                "last {} additionalItem(s) not allowed",
                                arr.len() - evaluated
                            ),
                        ));
                    }
                    Some(sch @ J::Obj(_)) => {
                        for (i, item) in arr[evaluated..].iter().enumerate() {
                            errs.extend(self.validate_val(sch, item, loc, &i.to_string()));
                        }
                    }
                    _ => {}
                }
            }
        } else {
            let prefix = kw.prefix_items.and_then(J::as_array);
            let evaluated = prefix.map_or(0, |p| p.len().min(arr.len()));
            if let Some(p) = prefix {
                for (i, item) in arr[..evaluated].iter().enumerate() {
                    errs.extend(self.validate_val(&p[i], item, loc, &i.to_string()));
                }
            }
            if let Some(sch) = kw.items {
                for (i, item) in arr[evaluated..].iter().enumerate() {
                    errs.extend(self.validate_val(sch, item, loc, &i.to_string()));
                }
            }
        }
        if self.draft == 4 {
            return;
        }
        if let Some(c) = kw.contains {
            let mut cerrs = Vec::new();
            let mut matched = Vec::new();
            for (i, item) in arr.iter().enumerate() {
                match self.validate_val(c, item, loc, &i.to_string()) {
                    Some(e) => cerrs.push(e),
                    None => matched.push(i),
                }
            }
            let (min_c, max_c) = if self.draft >= 2019 {
                (usize_of(kw.min_contains), usize_of(kw.max_contains))
            } else {
                (None, None)
            };
            if let Some(min) = min_c {
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
            if let Some(max) = max_c {
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

    fn str_validate(&self, kw: &Kw<'s>, st: &str, loc: &[String], errs: &mut Vec<Node>) {
        if kw.min_length.is_none() && kw.max_length.is_none() && kw.pattern.is_none() {
            return;
        }
        let len = st.chars().count();
        count_bounds(
            len,
            ("minLength", kw.min_length),
            ("maxLength", kw.max_length),
            loc,
            errs,
        );
        if let Some(J::Str(p)) = kw.pattern {
            if self.is_match(p, st) == Some(false) {
                errs.push(Node::msg(
                    loc.to_vec(),
                    format!("{} does not match pattern {}", quote(st), quote(p)),
                ));
            }
        }
    }

    fn num_validate(&self, kw: &Kw<'s>, v: Inst<'_>, loc: &[String], errs: &mut Vec<Node>) {
        let Some(n) = v.as_f64() else { return };
        let mut minimum = kw.minimum.and_then(J::as_f64);
        let mut maximum = kw.maximum.and_then(J::as_f64);
        let mut ex_min = kw.exclusive_minimum.and_then(J::as_f64);
        let mut ex_max = kw.exclusive_maximum.and_then(J::as_f64);
        if self.draft == 4 {
            if kw.exclusive_minimum == Some(&J::Bool(true)) {
                ex_min = minimum.take();
            }
            if kw.exclusive_maximum == Some(&J::Bool(true)) {
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
        if let Some(m) = kw.multiple_of.and_then(J::as_f64) {
            if !is_multiple(n, m) {
                errs.push(Node::msg(loc.to_vec(), both("multipleOf", m)));
            }
        }
    }

    fn cond_validate(&self, kw: &Kw<'s>, v: Inst<'_>, loc: &mut Vec<String>, errs: &mut Vec<Node>) {
        let wrap = |m: &str, causes: Vec<Node>, loc: &Vec<String>| Node {
            loc: loc.clone(),
            kind: Kind::Wrapper(m.to_owned()),
            causes,
        };
        if let Some(n) = kw.not {
            if self.validate(n, v, loc).is_none() {
                errs.push(Node::msg(loc.clone(), "'not' failed".into()));
            }
        }
        if let Some(J::Arr(all)) = kw.all_of {
            let e: Vec<Node> = all
                .iter()
                .filter_map(|sch| self.validate(sch, v, loc))
                .collect();
            if !e.is_empty() {
                errs.push(wrap("'allOf' failed", e, loc));
            }
        }
        if let Some(J::Arr(any)) = kw.any_of {
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
        if let Some(J::Arr(one)) = kw.one_of {
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
            if let Some(i) = kw.if_ {
                if self.validate(i, v, loc).is_none() {
                    if let Some(t) = kw.then {
                        errs.extend(self.validate(t, v, loc));
                    }
                } else if let Some(e) = kw.else_ {
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

/// The simple type names of the meta-schemas' `simpleTypes`.
const SIMPLE_TYPES: [&str; 7] = [
    "array", "boolean", "integer", "null", "number", "object", "string",
];

fn non_negative_integer(v: &J<'_>) -> bool {
    v.as_f64().is_some_and(|f| f >= 0.0 && f.fract() == 0.0)
}

/// Items pairwise unequal (the meta-schemas' `uniqueItems`).
fn unique(items: &[J<'_>]) -> bool {
    if items.iter().all(|i| matches!(i, J::Str(_))) {
        let mut seen = HashSet::with_capacity(items.len());
        return items.iter().all(|i| seen.insert(i.as_str()));
    }
    (1..items.len()).all(|i| (0..i).all(|j| !j_equals(&items[i], &items[j])))
}

/// A `stringArray` of the meta-schemas (draft 4: also not empty).
fn string_array(v: &J<'_>, draft: u32) -> bool {
    v.as_array().is_some_and(|a| {
        a.iter().all(|x| matches!(x, J::Str(_))) && unique(a) && (draft != 4 || !a.is_empty())
    })
}

/// A URI reference with only unreserved, sub-delimiter, `:`, `@`, `/`, `?` and
/// percent-encoded characters (and one `#` before the fragment), which every URI parser
/// reads alike.
fn plain_uri_reference(s: &str) -> bool {
    let (s, frag) = s.split_once('#').unwrap_or((s, ""));
    plain_uri_chars(s) && plain_uri_chars(frag)
}

fn plain_uri_chars(s: &str) -> bool {
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'%' => {
                if !(i + 2 < b.len()
                    && b[i + 1].is_ascii_hexdigit()
                    && b[i + 2].is_ascii_hexdigit())
                {
                    return false;
                }
                i += 3;
                continue;
            }
            c if c.is_ascii_alphanumeric() => {}
            b'-' | b'.' | b'_' | b'~' | b'!' | b'$' | b'&' | b'\'' | b'(' | b')' | b'*' | b'+'
            | b',' | b';' | b'=' | b':' | b'@' | b'/' | b'?' => {}
            _ => return false,
        }
        i += 1;
    }
    true
}

/// The one pass over the schema that [`Walker::prepare`] makes.
struct Pass<'w, 's> {
    w: &'w Walker<'s>,
    covered: bool,
    unresolved: Option<String>,
}

impl<'s> Pass<'_, 's> {
    fn no(&mut self) {
        self.covered = false;
    }

    fn check(&mut self, ok: bool) {
        if !ok {
            self.covered = false;
        }
    }

    /// A local `$ref`: resolved now (and cached for the walk).
    fn reference(&mut self, r: &'s str) {
        if r == "#" || r.starts_with("#/") {
            if self.w.resolve(r).is_none() && self.unresolved.is_none() {
                self.unresolved = Some(r.to_owned());
            }
            self.check(plain_uri_chars(&r[1..]));
        } else {
            self.no();
        }
    }

    /// A pattern: compiled now (and cached for the walk) when it reads alike in Go.
    fn pattern(&mut self, p: &'s str) {
        if !plain_pattern(p) {
            self.no();
            return;
        }
        // Compiles it into the cache.
        let compiled = self.w.is_match(p, "").is_some();
        self.check(compiled);
    }

    /// Data that is no schema (an unknown keyword's value): only its `$ref`s are looked up,
    /// as any object with a `$ref` could be made a schema by a pointer.
    fn data(&mut self, v: &'s J<'s>) {
        match v {
            J::Obj(m) => {
                for (k, x) in m {
                    match (k.as_ref(), x) {
                        ("$ref", J::Str(r)) => {
                            if r.starts_with("#/")
                                && self.w.resolve(r).is_none()
                                && self.unresolved.is_none()
                            {
                                self.unresolved = Some(r.to_string());
                            }
                        }
                        ("enum" | "const" | "default" | "examples", _) => {}
                        _ => self.data(x),
                    }
                }
            }
            J::Arr(a) => a.iter().for_each(|x| self.data(x)),
            _ => {}
        }
    }

    fn schema_map(&mut self, v: &'s J<'s>) {
        match v {
            J::Obj(m) => m.iter().for_each(|(_, x)| self.schema(x, false)),
            other => {
                self.no();
                self.data(other);
            }
        }
    }

    fn schema_array(&mut self, v: &'s J<'s>) {
        match v {
            J::Arr(a) if !a.is_empty() => a.iter().for_each(|x| self.schema(x, false)),
            other => {
                self.no();
                self.data(other);
            }
        }
    }

    /// `additionalProperties`/`additionalItems`: draft 4 allows a boolean there only.
    fn schema_or_bool(&mut self, v: &'s J<'s>) {
        if let J::Bool(_) = v {
            return;
        }
        self.schema(v, false);
    }

    /// A value in a schema position.
    fn schema(&mut self, s: &'s J<'s>, root: bool) {
        let d = self.w.draft;
        let m = match s {
            J::Bool(_) => {
                // Draft 4 knows no boolean schemas.
                self.check(d != 4);
                return;
            }
            J::Obj(m) => m,
            other => {
                self.no();
                self.data(other);
                return;
            }
        };
        for (k, v) in m {
            match k.as_ref() {
                "$ref" => match v {
                    J::Str(r) => self.reference(r),
                    _ => self.no(),
                },
                "$schema" => self.check(root && v.as_str().and_then(draft_from_url).is_some()),
                "$id" => self.check(
                    root && d >= 6
                        && v.as_str().is_some_and(|id| {
                            let id = id.strip_suffix('#').unwrap_or(id);
                            !id.contains('#') && plain_uri_reference(id)
                        }),
                ),
                "$comment" | "title" | "description" => self.check(matches!(v, J::Str(_))),
                "default" => {}
                "const" => self.check(d >= 6),
                "examples" => self.check(matches!(v, J::Arr(_))),
                "enum" => self.check(v.as_array().is_some_and(|a| !a.is_empty() && unique(a))),
                "type" => self.check(match v {
                    J::Str(t) => SIMPLE_TYPES.contains(&t.as_ref()),
                    J::Arr(a) => {
                        !a.is_empty()
                            && a.iter()
                                .all(|t| t.as_str().is_some_and(|t| SIMPLE_TYPES.contains(&t)))
                            && unique(a)
                    }
                    _ => false,
                }),
                "multipleOf" => self.check(v.as_f64().is_some_and(|f| f > 0.0)),
                "maximum" | "minimum" => self.check(matches!(v, J::Num(_))),
                "exclusiveMaximum" | "exclusiveMinimum" => self.check(if d == 4 {
                    matches!(v, J::Bool(_))
                } else {
                    matches!(v, J::Num(_))
                }),
                "maxLength" | "minLength" | "maxItems" | "minItems" | "maxProperties"
                | "minProperties" => self.check(non_negative_integer(v)),
                "maxContains" | "minContains" => self.check(d >= 2019 && non_negative_integer(v)),
                "uniqueItems" | "readOnly" | "writeOnly" | "deprecated" => {
                    self.check(matches!(v, J::Bool(_)))
                }
                "required" => self.check(string_array(v, d)),
                "dependentRequired" => self.check(
                    d >= 2019
                        && v.as_object()
                            .is_some_and(|m| m.iter().all(|(_, x)| string_array(x, d))),
                ),
                "pattern" => match v {
                    J::Str(p) => self.pattern(p),
                    _ => self.no(),
                },
                "properties" | "definitions" | "$defs" => self.schema_map(v),
                "patternProperties" => {
                    if let J::Obj(m) = v {
                        for (p, _) in m {
                            self.pattern(p);
                        }
                    }
                    self.schema_map(v);
                }
                "dependentSchemas" => {
                    self.check(d >= 2019);
                    self.schema_map(v);
                }
                "dependencies" => match v {
                    J::Obj(m) => {
                        for (_, x) in m {
                            match x {
                                J::Arr(_) => self.check(string_array(x, d)),
                                other => self.schema(other, false),
                            }
                        }
                    }
                    other => {
                        self.no();
                        self.data(other);
                    }
                },
                "items" => match v {
                    J::Arr(_) => {
                        self.check(d < 2020);
                        self.schema_array(v);
                    }
                    other => self.schema(other, false),
                },
                "additionalItems" | "additionalProperties" => {
                    if d == 4 {
                        self.schema_or_bool(v);
                    } else {
                        self.schema(v, false);
                    }
                }
                "prefixItems" => {
                    if d >= 2020 {
                        self.schema_array(v);
                    } else {
                        self.data(v);
                    }
                }
                "allOf" | "anyOf" | "oneOf" => self.schema_array(v),
                "not" => self.schema(v, false),
                "contains" | "propertyNames" => {
                    self.check(d != 4);
                    self.schema(v, false);
                }
                "if" | "then" | "else" => {
                    if d >= 7 {
                        self.schema(v, false);
                    } else {
                        self.data(v);
                    }
                }
                // An annotation from 2019-09 on; drafts up to 7 assert formats we do not.
                "format" => self.check(d >= 2019 && matches!(v, J::Str(_))),
                "contentEncoding" | "contentMediaType" => {
                    self.check(d < 7 || matches!(v, J::Str(_)))
                }
                "id"
                | "$anchor"
                | "$dynamicRef"
                | "$dynamicAnchor"
                | "$recursiveRef"
                | "$recursiveAnchor"
                | "$vocabulary"
                | "unevaluatedProperties"
                | "unevaluatedItems"
                | "contentSchema" => {
                    self.no();
                    self.data(v);
                }
                // Keywords no draft knows: data, which no validator asserts.
                _ => self.data(v),
            }
        }
    }
}

impl Walker<'_> {
    /// One pass over the whole schema: resolves every local `$ref` (the first that points
    /// nowhere is an error, as the library refuses to compile such a schema), compiles every
    /// pattern, and tells whether our walk alone may decide.
    fn prepare(&self) -> Prep {
        let mut pass = Pass {
            w: self,
            covered: true,
            unresolved: None,
        };
        pass.schema(self.root, true);
        Prep {
            covered: pass.covered,
            unresolved: pass.unresolved,
        }
    }
}

/// A regular expression that Go's RE2 and Rust's `regex` (after [`go_pattern`]) read alike:
/// no flags groups, POSIX or Unicode classes, escapes or anchors of one syntax only, no class
/// set operations, no repetition over 1000 (Go's limit).
fn plain_pattern(p: &str) -> bool {
    if [
        "(?", "[[:", "\\A", "\\z", "\\Z", "\\p", "\\P", "\\Q", "\\C", "\\u", "\\U", "&&", "--",
        "~~",
    ]
    .iter()
    .any(|x| p.contains(x))
    {
        return false;
    }
    // Repetition counts.
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'{' {
            let mut n: u64 = 0;
            let mut j = i + 1;
            while j < b.len() && b[j].is_ascii_digit() {
                n = n.saturating_mul(10).saturating_add(u64::from(b[j] - b'0'));
                j += 1;
            }
            if j > i + 1 && n > 1000 {
                return false;
            }
        }
        i += 1;
    }
    true
}

/// Go's Perl classes and word boundaries are ASCII-only; Rust's are Unicode-aware. Rewrites
/// `\d \D \w \W \s \S` as the ASCII classes Go means (nested classes inside brackets,
/// which Rust allows) and `\b \B` as ASCII boundaries; `None` for a boundary inside
/// brackets.
fn go_pattern(p: &str) -> Option<Cow<'_, str>> {
    if !p.contains('\\') {
        return Some(Cow::Borrowed(p));
    }
    let mut out = String::with_capacity(p.len() + 16);
    let mut in_class = false;
    let mut class_start = false;
    let mut chars = p.chars().peekable();
    while let Some(c) = chars.next() {
        let was_start = class_start;
        class_start = false;
        match c {
            '\\' => {
                let Some(n) = chars.next() else {
                    out.push(c);
                    break;
                };
                let rep = match n {
                    'd' => "[0-9]",
                    'D' => "[^0-9]",
                    'w' => "[0-9A-Za-z_]",
                    'W' => "[^0-9A-Za-z_]",
                    's' => "[\\t\\n\\x0C\\r ]",
                    'S' => "[^\\t\\n\\x0C\\r ]",
                    'b' | 'B' if in_class => return None,
                    'b' => "(?-u:\\b)",
                    'B' => "(?-u:\\B)",
                    _ => {
                        out.push(c);
                        out.push(n);
                        continue;
                    }
                };
                out.push_str(rep);
            }
            '[' if !in_class => {
                in_class = true;
                class_start = true;
                out.push(c);
                if chars.peek() == Some(&'^') {
                    out.push('^');
                    chars.next();
                }
            }
            ']' if in_class && !was_start => {
                in_class = false;
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    Some(Cow::Owned(out))
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
        let j = J::parse(schema.as_bytes()).expect("test schema is JSON");
        let w = Walker::new(&j);
        let p = w.prepare();
        p.unresolved.is_none() && p.covered
    }

    #[test]
    fn a_redacted_schema_error_quotes_no_scalar_of_the_values_and_keeps_the_rest_of_helm_s_text() {
        let secret = "hunter2-s3cr3t";
        let values: Values = serde_json::from_value(serde_json::json!({
            "password": secret,
            "port": 8443129,
            "nested": {"token": secret},
            "list": [secret],
            "replicaCount": "many",
            "mail": "no-at-sign-s3cr3t",
        }))
        .expect("values");
        for schema in [
            // Our walk alone decides (draft 7, the keywords it walks).
            r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
                "required": ["missing"],
                "properties": {
                    "password": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 3},
                    "port": {"type": "integer", "maximum": 65535},
                    "nested": {"type": "object", "properties": {"token": {"enum": ["a", "b"]}}},
                    "list": {"type": "array", "items": {"const": "x"}},
                    "replicaCount": {"type": "integer"},
                    "mail": {"type": "string", "format": "email"}}}"#,
            // The jsonschema crate decides (a keyword the walk does not know), with its own
            // messages, which quote the instance.
            r#"{"type": "object", "unevaluatedProperties": false,
                "properties": {
                    "password": {"type": "string", "pattern": "^[a-z]+$"},
                    "port": {"type": "integer", "maximum": 65535},
                    "nested": {"type": "object", "properties": {"token": {"enum": ["a"]}}},
                    "list": {"type": "array", "items": {"const": "x"}},
                    "replicaCount": {"type": "integer"},
                    "mail": {"type": "string"}}}"#,
        ] {
            let plain = validate_single(&values, schema.as_bytes()).expect_err("fails");
            assert!(
                plain.contains("s3cr3t")
                    || plain.contains("8,443,129")
                    || plain.contains("8443129"),
                "Helm's own text quotes values: {plain}"
            );
            let redacted =
                validate_single_as(&values, schema.as_bytes(), true, &RemoteSchemas::new())
                    .expect_err("fails");
            for part in ["s3cr3t", "hunter2", "8443129", "8,443,129", "8.443129"] {
                assert!(!redacted.contains(part), "{part} in {redacted}");
            }
            assert!(redacted.contains(WITHHELD), "{redacted}");
            assert!(redacted.contains("- at '/password': "), "{redacted}");
            assert!(redacted.contains("- at '/replicaCount': "), "{redacted}");
        }
        // What quotes nothing of the value stays Helm's word for word.
        let schema = br#"{"$schema": "http://json-schema.org/draft-07/schema#",
            "required": ["missing"], "properties": {"replicaCount": {"type": "integer"}}}"#;
        assert_eq!(
            validate_single_as(&values, schema, true, &RemoteSchemas::new()),
            validate_single(&values, schema)
        );
        let e =
            validate_single_as(&values, schema, true, &RemoteSchemas::new()).expect_err("fails");
        assert!(e.contains("got string, want integer"), "{e}");
        assert!(e.contains("missing property 'missing'"), "{e}");
    }

    #[test]
    fn the_crate_is_skipped_only_for_schemas_the_walk_covers() {
        for s in [
            r##"{"$schema": "http://json-schema.org/draft-07/schema#", "$id": "x", "type": "object",
                "properties": {"format": {"type": "string", "pattern": "^[a-z]+$"},
                "a": {"$ref": "#/definitions/a"}}, "definitions": {"a": {"enum": [1]}},
                "default": {"format": "email"}, "form": true}"##,
            r##"{"$schema": "http://json-schema.org/draft-07/schema", "items": [{"type": "string"}], "additionalItems": false,
                "patternProperties": {"^x-": {"oneOf": [true, {"minimum": 1}]}},
                "dependencies": {"a": ["b"], "c": {"required": ["d"]}}}"##,
            r##"{"$schema": "http://json-schema.org/schema#", "type": ["string", "null"], "title": "t"}"##,
            r##"{"$schema": "https://json-schema.org/draft/2020-12/schema", "$id": "https://x.io/s.json",
                "properties": {"a": {"format": "date-time", "pattern": "^\\d+\\s$"}}}"##,
        ] {
            assert!(covers(s), "{s}");
        }
        for s in [
            r##"{"$schema": "http://json-schema.org/draft-07/schema#", "properties": {"a": {"type": "string", "format": "email"}}}"##,
            r##"{"properties": {"a": {"unevaluatedProperties": false}}}"##,
            r##"{"properties": {"a": {"$ref": "other.json#/a"}}}"##,
            r##"{"properties": {"a": {"$id": "nested"}}}"##,
            r##"{"properties": {"a": {"pattern": "(?i)^abc$"}}}"##,
            r##"{"properties": {"a": {"pattern": "[unclosed"}}}"##,
            r##"{"properties": {"a": {"pattern": "a{1001}"}}}"##,
            r##"{"patternProperties": {"\\p{L}": true}}"##,
            r##"{"$schema": "https://example.com/custom-meta"}"##,
            r##"{"$schema": "http://json-schema.org/draft-07/schema#frag"}"##,
            r##"{"items": 5}"##,
            r##"{"items": [true]}"##,
            r##"{"properties": {"a": {"type": "strin"}}}"##,
            r##"{"properties": {"a": {"minimum": "3"}}}"##,
            r##"{"properties": {"a": {"required": ["x", "x"]}}}"##,
            r##"{"properties": {"a": {"enum": []}}}"##,
            r##"{"properties": {"a": {"title": 5}}}"##,
            r##"{"allOf": []}"##,
            r##"{"$schema": "http://json-schema.org/draft-04/schema#", "properties": {"a": true}}"##,
            r##"{"$schema": "http://json-schema.org/draft-07/schema#", "dependentRequired": {"a": ["b"]}}"##,
        ] {
            assert!(!covers(s), "{s}");
        }
    }

    #[test]
    fn go_classes_become_ascii_classes() {
        assert_eq!(go_pattern("^a+$").unwrap(), "^a+$");
        assert_eq!(
            go_pattern(r"\d[\w.]\\d").unwrap(),
            r"[0-9][[0-9A-Za-z_].]\\d"
        );
        assert_eq!(go_pattern(r"[]\s]\b").unwrap(), r"[][\t\n\x0C\r ]](?-u:\b)");
        assert!(go_pattern(r"[\b]").is_none());
        let re = regex::Regex::new(&go_pattern(r"^\d+\b").unwrap()).unwrap();
        assert!(re.is_match("12"));
        assert!(!re.is_match("\u{0663}"));
        assert!(
            !regex::Regex::new(&go_pattern(r"^\s$").unwrap())
                .unwrap()
                .is_match("\u{a0}")
        );
    }
}
