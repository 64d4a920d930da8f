//! Checking a schema against its draft's meta-schema, as the Go library does before it
//! compiles one, with its error text: `"file:///values.schema.json#" is not valid against
//! metaschema: jsonschema validation failed with '<meta-schema>#'` and the error tree of the
//! walk of the meta-schema over the schema document.
//!
//! The meta-schema documents come from the `referencing` crate (the `jsonschema` crate's
//! own); where the Go library ships another revision of a draft's document (drafts 4, 6 and
//! 7: `enum` must be a non-empty array of unique items, draft 4 `$ref`, `$schema` and `id`
//! formats, draft 6 without `examples` and the `patternProperties` name format) they are
//! patched to read as the library's. Formats the meta-schemas assert (`regex`, `uri`,
//! `uri-reference`) are decided only where every parser agrees; anything else leaves the
//! verdict to the `jsonschema` crate.

use std::cell::Cell;

use serde_json::{Value, json};

use super::tree::J;
use super::{Inst, Kind, Node, Walker};

/// The meta-schema documents of one draft, the first the entry point.
pub(super) struct MetaDocs {
    pub(super) docs: Vec<(String, J<'static>)>,
    /// A format or reference the walk could not decide was met.
    pub(super) undecided: Cell<bool>,
}

/// What the meta-schema says of a schema.
pub(super) enum Verdict {
    Valid,
    /// Helm's whole message.
    Invalid(String),
    /// The walk met something it cannot decide exactly.
    Undecided,
}

fn owned(v: &Value) -> J<'static> {
    match v {
        Value::Null => J::Null,
        Value::Bool(b) => J::Bool(*b),
        Value::Number(n) => J::Num(n.clone()),
        Value::String(s) => J::Str(s.clone().into()),
        Value::Array(a) => J::Arr(a.iter().map(owned).collect()),
        Value::Object(m) => {
            let mut o: Vec<(std::borrow::Cow<'static, str>, J<'static>)> = m
                .iter()
                .map(|(k, v)| (k.clone().into(), owned(v)))
                .collect();
            o.sort_by(|a, b| a.0.cmp(&b.0));
            J::Obj(o)
        }
    }
}

/// The draft's meta-schema URL as the library names it (no fragment).
fn entry_url(draft: u32) -> &'static str {
    match draft {
        4 => "http://json-schema.org/draft-04/schema",
        6 => "http://json-schema.org/draft-06/schema",
        7 => "http://json-schema.org/draft-07/schema",
        2019 => "https://json-schema.org/draft/2019-09/schema",
        _ => "https://json-schema.org/draft/2020-12/schema",
    }
}

fn docs_of(draft: u32) -> Vec<(String, J<'static>)> {
    use referencing::meta as m;
    let strict_enum = json!({"type": "array", "minItems": 1, "uniqueItems": true});
    let mut out = Vec::new();
    match draft {
        4 => {
            let mut d = (*m::DRAFT4).as_ref().clone();
            if let Some(p) = d.get_mut("properties").and_then(Value::as_object_mut) {
                p.insert("enum".into(), strict_enum);
                p.insert("$ref".into(), json!({"type": "string"}));
                p.insert("$schema".into(), json!({"type": "string", "format": "uri"}));
                p.insert("id".into(), json!({"type": "string", "format": "uriref"}));
            }
            out.push((entry_url(4).to_owned(), owned(&d)));
        }
        6 => {
            let mut d = (*m::DRAFT6).as_ref().clone();
            if let Some(p) = d.get_mut("properties").and_then(Value::as_object_mut) {
                p.insert("enum".into(), strict_enum);
                p.remove("examples");
                if let Some(pp) = p
                    .get_mut("patternProperties")
                    .and_then(Value::as_object_mut)
                {
                    pp.remove("propertyNames");
                }
            }
            out.push((entry_url(6).to_owned(), owned(&d)));
        }
        7 => {
            let mut d = (*m::DRAFT7).as_ref().clone();
            if let Some(p) = d.get_mut("properties").and_then(Value::as_object_mut) {
                p.insert(
                    "enum".into(),
                    json!({"type": "array", "items": true, "minItems": 1, "uniqueItems": true}),
                );
            }
            out.push((entry_url(7).to_owned(), owned(&d)));
        }
        2019 => {
            let base = "https://json-schema.org/draft/2019-09/meta/";
            out.push((entry_url(2019).to_owned(), owned(&m::DRAFT201909)));
            for (name, d) in [
                ("core", &*m::DRAFT201909_CORE),
                ("applicator", &*m::DRAFT201909_APPLICATOR),
                ("validation", &*m::DRAFT201909_VALIDATION),
                ("meta-data", &*m::DRAFT201909_META_DATA),
                ("format", &*m::DRAFT201909_FORMAT),
                ("content", &*m::DRAFT201909_CONTENT),
            ] {
                out.push((format!("{base}{name}"), owned(d)));
            }
        }
        _ => {
            let base = "https://json-schema.org/draft/2020-12/meta/";
            out.push((entry_url(2020).to_owned(), owned(&m::DRAFT202012)));
            for (name, d) in [
                ("core", &*m::DRAFT202012_CORE),
                ("applicator", &*m::DRAFT202012_APPLICATOR),
                ("unevaluated", &*m::DRAFT202012_UNEVALUATED),
                ("validation", &*m::DRAFT202012_VALIDATION),
                ("meta-data", &*m::DRAFT202012_META_DATA),
                ("format-annotation", &*m::DRAFT202012_FORMAT_ANNOTATION),
                ("content", &*m::DRAFT202012_CONTENT),
            ] {
                out.push((format!("{base}{name}"), owned(d)));
            }
        }
    }
    out
}

/// Checks `schema` (of draft `draft`) against the draft's meta-schema.
pub(super) fn check(schema: &J<'_>, draft: u32) -> Verdict {
    let meta = MetaDocs {
        docs: docs_of(draft),
        undecided: Cell::new(false),
    };
    let instance = schema.to_value();
    let walker = Walker::for_meta(&meta, 0);
    let err = walker.validate(walker.root, Inst::V(&instance), &mut Vec::new());
    if meta.undecided.get() {
        return Verdict::Undecided;
    }
    let Some(node) = err else {
        return Verdict::Valid;
    };
    let causes = match node.kind {
        Kind::Group => node.causes,
        _ => vec![node],
    };
    let mut sb = format!(
        "\"file:///values.schema.json#\" is not valid against metaschema: jsonschema validation failed with '{}#'",
        entry_url(draft)
    );
    for c in &causes {
        c.display(&mut sb, 1);
    }
    Verdict::Invalid(sb)
}

/// `doc` resolved against `base` (the meta-schemas use relative references only).
pub(super) fn join(base: &str, doc: &str) -> String {
    if doc.contains("://") {
        return doc.to_owned();
    }
    match base.rfind('/') {
        Some(i) => format!("{}{doc}", &base[..=i]),
        None => doc.to_owned(),
    }
}

/// Wraps a failed reference's error as the library does.
pub(super) fn reference(err: Node, loc: &[String]) -> Node {
    let causes = match err.kind {
        Kind::Group => err.causes,
        _ => vec![err],
    };
    Node {
        loc: loc.to_vec(),
        kind: Kind::Reference,
        causes,
    }
}
