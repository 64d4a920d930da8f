//! Remote `$ref`s of a `values.schema.json`, resolved as Helm resolves them, without IO.
//!
//! Helm (v4, `pkg/chart/common/util/jsonschema.go`) compiles the chart's schema as
//! `file:///values.schema.json` with loaders for `http`, `https` (a GET, 15 s), `file` and
//! `urn` (an unresolved URN is the permissive schema `true`). A document that cannot be
//! loaded fails the compile with the library's `failing loading "<url>": <reason>`, e.g.
//! `failing loading "https://x/s.json": HTTP request to https://x/s.json returned status 404
//! (Not Found)`; any other scheme is `no URLLoader registered for "<url>"`.
//!
//! This crate does no IO: [`chart_remote_refs`] and [`remote_refs`] list the documents a
//! schema needs, the process that validates fetches them (the agent, which renders) and
//! hands them back as [`RemoteSchemas`], and validation resolves `$ref`s only from that map.
//! Differences from Helm, on purpose: `file://` references (and relative ones, which resolve
//! against `file:///values.schema.json`) are refused with a sentence — a chart's schema may
//! not read the files of the process that validates it; a document is at most
//! [`MAX_DOCUMENT_BYTES`], and one schema pulls in at most [`MAX_DOCUMENTS`].

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use serde_json::Value;

use crate::chart::Chart;
use flotilla_gotmpl::gofmt::quote as go_quote;

/// The base URI Helm gives the chart's own schema.
pub const ROOT_URL: &str = "file:///values.schema.json";
/// The largest remote schema document taken.
pub const MAX_DOCUMENT_BYTES: usize = 1 << 20;
/// The most remote documents one chart's schemas pull in (their own references included).
pub const MAX_DOCUMENTS: usize = 32;

/// A reference to a document outside the schema.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RemoteRef {
    /// An `http` or `https` document to fetch (the URL without its fragment).
    Fetch(String),
    /// A `urn:` reference: Helm's default resolver leaves it unresolved and uses the
    /// permissive schema `true`.
    Urn(String),
    /// A reference that is not fetched, with the reason (the validation fails with it).
    Refused {
        /// The URL without its fragment.
        url: String,
        /// Why, as a sentence.
        reason: String,
    },
}

impl RemoteRef {
    /// The document's URL.
    pub fn url(&self) -> &str {
        match self {
            Self::Fetch(u) | Self::Urn(u) | Self::Refused { url: u, .. } => u,
        }
    }
}

/// Documents fetched for remote references, by URL (without fragment), or why each could
/// not be had. Cheap to clone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RemoteSchemas {
    docs: Arc<BTreeMap<String, Result<Value, String>>>,
}

impl RemoteSchemas {
    /// No documents.
    pub fn new() -> RemoteSchemas {
        RemoteSchemas::default()
    }

    /// Records the body fetched from `url`: parsed when it is JSON of at most
    /// [`MAX_DOCUMENT_BYTES`], else the reason it is not taken. Returns the document.
    pub fn insert_fetched(&mut self, url: &str, body: &[u8]) -> Option<&Value> {
        let doc = if body.len() > MAX_DOCUMENT_BYTES {
            Err(too_large())
        } else {
            serde_json::from_slice::<Value>(body)
                .map_err(|e| format!("the document is not JSON: {e}"))
        };
        let docs = Arc::make_mut(&mut self.docs);
        docs.insert(url.to_owned(), doc);
        docs.get(url).and_then(|d| d.as_ref().ok())
    }

    /// Records a document already parsed (a cached one).
    pub fn insert_fetched_value(&mut self, url: &str, doc: Value) {
        Arc::make_mut(&mut self.docs).insert(url.to_owned(), Ok(doc));
    }

    /// Records why `url` could not be fetched.
    pub fn insert_failed(&mut self, url: &str, reason: String) {
        Arc::make_mut(&mut self.docs).insert(url.to_owned(), Err(reason));
    }

    /// What is known of `url`.
    pub fn get(&self, url: &str) -> Option<&Result<Value, String>> {
        self.docs.get(url)
    }

    /// How many documents (fetched or failed) are known.
    pub fn len(&self) -> usize {
        self.docs.len()
    }

    /// Whether none are.
    pub fn is_empty(&self) -> bool {
        self.docs.is_empty()
    }
}

/// The reason a document larger than [`MAX_DOCUMENT_BYTES`] is refused.
pub fn too_large() -> String {
    format!(
        "the document is larger than {} MiB, the most a remote schema may be",
        MAX_DOCUMENT_BYTES >> 20
    )
}

fn strip_fragment(u: &str) -> &str {
    u.split_once('#').map_or(u, |(d, _)| d)
}

/// Resolves `reference` against `base` (RFC 3986), without the fragment.
fn resolve(base: &str, reference: &str) -> Option<String> {
    let base = referencing::uri::from_str(base).ok()?;
    let resolved = referencing::uri::resolve_against(&base.borrow(), reference).ok()?;
    Some(strip_fragment(resolved.as_str()).to_owned())
}

/// Meta-schemas both validators know without loading them.
fn is_known_meta_schema(url: &str) -> bool {
    ["http://json-schema.org/", "https://json-schema.org/"]
        .iter()
        .any(|p| url.starts_with(p))
}

/// Classifies a document URL that is not the schema itself.
fn classify(url: String) -> RemoteRef {
    let scheme = url
        .split_once(':')
        .map_or("", |(s, _)| s)
        .to_ascii_lowercase();
    match scheme.as_str() {
        "http" | "https" => RemoteRef::Fetch(url),
        "urn" => RemoteRef::Urn(url),
        "file" => RemoteRef::Refused {
            reason: format!(
                "{} names a local file: only http and https references are resolved (a chart's schema may not read the files of the process that validates it)",
                go_quote(&url)
            ),
            url,
        },
        _ => RemoteRef::Refused {
            reason: format!("no URLLoader registered for {}", go_quote(&url)),
            url,
        },
    }
}

/// The documents outside `doc` its `$ref`s (and `$schema`s naming custom meta-schemas)
/// point to, in document order, each once; `base` is `doc`'s own URL ([`ROOT_URL`] for a
/// chart's schema). `$id`s change the base of their subtree, and a reference to a
/// resource identified inside `doc` needs no document.
pub fn remote_refs(doc: &Value, base: &str) -> Vec<RemoteRef> {
    let mut ids = BTreeSet::new();
    ids.insert(strip_fragment(base).to_owned());
    collect_ids(doc, base, &mut ids);
    let mut refs = Vec::new();
    let mut seen = BTreeSet::new();
    collect_refs(doc, base, &ids, &mut seen, &mut refs);
    refs
}

fn subtree_base(m: &serde_json::Map<String, Value>, base: &str) -> Option<String> {
    let id = m.get("$id").or_else(|| m.get("id"))?.as_str()?;
    resolve(base, id)
}

fn collect_ids(v: &Value, base: &str, ids: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            let own = subtree_base(m, base);
            if let Some(id) = &own {
                ids.insert(id.clone());
            }
            let base = own.as_deref().unwrap_or(base);
            for (k, x) in m {
                if !matches!(k.as_str(), "enum" | "const" | "default" | "examples") {
                    collect_ids(x, base, ids);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_ids(x, base, ids)),
        _ => {}
    }
}

fn collect_refs(
    v: &Value,
    base: &str,
    ids: &BTreeSet<String>,
    seen: &mut BTreeSet<String>,
    out: &mut Vec<RemoteRef>,
) {
    match v {
        Value::Object(m) => {
            let own = subtree_base(m, base);
            let base = own.as_deref().unwrap_or(base);
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref" | "$schema", Value::String(r)) => {
                        let Some(url) = resolve(base, r) else {
                            continue;
                        };
                        if ids.contains(&url) || is_known_meta_schema(&url) {
                            continue;
                        }
                        if seen.insert(url.clone()) {
                            out.push(classify(url));
                        }
                    }
                    ("enum" | "const" | "default" | "examples", _) => {}
                    _ => collect_refs(x, base, ids, seen, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, base, ids, seen, out)),
        _ => {}
    }
}

/// The remote references of every `values.schema.json` in `chart` and its subcharts, each
/// once (a schema that is not JSON has none: its validation fails on its own).
pub fn chart_remote_refs(chart: &Chart) -> Vec<RemoteRef> {
    let mut out = Vec::new();
    let mut seen = BTreeSet::new();
    let mut charts = vec![chart];
    while let Some(c) = charts.pop() {
        if let Some(schema) = &c.schema
            && let Ok(doc) = serde_json::from_slice::<Value>(schema)
        {
            for r in remote_refs(&doc, ROOT_URL) {
                if seen.insert(r.url().to_owned()) {
                    out.push(r);
                }
            }
        }
        charts.extend(c.dependencies.iter().rev());
    }
    out
}

/// The first document `doc` (at `base`) needs that cannot be had, as the validator's error
/// (`failing loading "<url>": <reason>`), breadth first from `doc`'s own references.
pub(super) fn first_unavailable(doc: &Value, base: &str, remote: &RemoteSchemas) -> Option<String> {
    let mut queue: VecDeque<RemoteRef> = remote_refs(doc, base).into();
    let mut visited = BTreeSet::new();
    while let Some(r) = queue.pop_front() {
        if !visited.insert(r.url().to_owned()) {
            continue;
        }
        let fail = |reason: &str| Some(format!("failing loading {}: {reason}", go_quote(r.url())));
        match &r {
            RemoteRef::Urn(_) => {}
            RemoteRef::Refused { reason, .. } => return fail(reason),
            RemoteRef::Fetch(url) => match remote.get(url) {
                None if visited.len() > MAX_DOCUMENTS => {
                    return fail(&format!(
                        "the schema needs more than {MAX_DOCUMENTS} remote documents"
                    ));
                }
                None => return fail("the document was not fetched"),
                Some(Err(reason)) => return fail(reason),
                Some(Ok(d)) => queue.extend(remote_refs(d, url)),
            },
        }
    }
    None
}

/// Serves the validator's `$ref`s from the documents fetched (a `urn:` as `true`); anything
/// else is an error, never a fetch.
pub(super) struct MapRetriever(pub(super) RemoteSchemas);

impl jsonschema::Retrieve for MapRetriever {
    fn retrieve(
        &self,
        uri: &jsonschema::Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let url = strip_fragment(uri.as_str());
        if url.starts_with("urn:") {
            return Ok(Value::Bool(true));
        }
        match self.0.get(url) {
            Some(Ok(doc)) => Ok(doc.clone()),
            Some(Err(reason)) => Err(reason.clone().into()),
            None => Err(format!("{} was not fetched", go_quote(url)).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn urls(refs: &[RemoteRef]) -> Vec<&str> {
        refs.iter().map(RemoteRef::url).collect()
    }

    #[test]
    fn remote_references_are_collected_once_in_document_order_without_fragments() {
        let doc = json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "$ref": "https://example.com/app/values.schema.json#/definitions/app",
            "properties": {
                "a": {"$ref": "#/definitions/a"},
                "b": {"$ref": "https://example.com/app/values.schema.json"},
                "c": {"items": [{"$ref": "http://schemas.example.org/c.json#/x"}]},
                "d": {"default": {"$ref": "https://example.com/not-a-schema.json"}},
                "e": {"enum": [{"$ref": "https://example.com/data.json"}]}
            },
            "definitions": {"a": {"type": "string"}}
        });
        let refs = remote_refs(&doc, ROOT_URL);
        assert_eq!(
            refs,
            [
                RemoteRef::Fetch("https://example.com/app/values.schema.json".into()),
                RemoteRef::Fetch("http://schemas.example.org/c.json".into()),
            ]
        );
    }

    #[test]
    fn relative_references_resolve_against_the_document_and_its_ids() {
        let doc = json!({
            "$id": "https://example.com/charts/common/values.schema.json",
            "properties": {
                "a": {"$ref": "definitions/a.json#/a"},
                "b": {"$ref": "../shared.json"},
                "c": {"$id": "https://other.example/c/", "properties": {"d": {"$ref": "d.json"}}},
                "self": {"$ref": "values.schema.json#/properties/a"},
                "embedded": {"$ref": "https://other.example/c/"}
            }
        });
        let refs = remote_refs(&doc, "https://example.com/charts/common/values.schema.json");
        assert_eq!(
            urls(&refs),
            [
                "https://example.com/charts/common/definitions/a.json",
                "https://example.com/charts/shared.json",
                "https://other.example/c/d.json",
            ]
        );
    }

    #[test]
    fn file_and_relative_references_of_a_charts_schema_are_refused_other_schemes_too() {
        let doc = json!({"properties": {
            "a": {"$ref": "file:///etc/passwd"},
            "b": {"$ref": "other.json#/b"},
            "c": {"$ref": "ftp://example.com/c.json"},
            "d": {"$ref": "urn:example:d"}
        }});
        let refs = remote_refs(&doc, ROOT_URL);
        assert_eq!(
            urls(&refs),
            [
                "file:///etc/passwd",
                "file:///other.json",
                "ftp://example.com/c.json",
                "urn:example:d"
            ]
        );
        match &refs[0] {
            RemoteRef::Refused { reason, .. } => assert_eq!(
                reason,
                "\"file:///etc/passwd\" names a local file: only http and https references are resolved (a chart's schema may not read the files of the process that validates it)"
            ),
            other => panic!("{other:?}"),
        }
        match &refs[2] {
            RemoteRef::Refused { reason, .. } => {
                assert_eq!(
                    reason,
                    "no URLLoader registered for \"ftp://example.com/c.json\""
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(refs[3], RemoteRef::Urn("urn:example:d".into()));
        let remote = RemoteSchemas::new();
        assert_eq!(
            first_unavailable(&doc, ROOT_URL, &remote).unwrap(),
            format!(
                "failing loading \"file:///etc/passwd\": {}",
                match &refs[0] {
                    RemoteRef::Refused { reason, .. } => reason.as_str(),
                    _ => unreachable!(),
                }
            )
        );
    }

    #[test]
    fn a_document_over_the_size_limit_or_not_json_is_not_taken() {
        let mut remote = RemoteSchemas::new();
        let big = vec![b' '; MAX_DOCUMENT_BYTES + 1];
        assert!(remote.insert_fetched("https://x/big.json", &big).is_none());
        assert_eq!(
            remote.get("https://x/big.json"),
            Some(&Err(
                "the document is larger than 1 MiB, the most a remote schema may be".to_owned()
            ))
        );
        assert!(remote.insert_fetched("https://x/bad.json", b"{").is_none());
        assert!(
            matches!(remote.get("https://x/bad.json"), Some(Err(e)) if e.starts_with("the document is not JSON: "))
        );
        let at_limit = format!("{}{}", " ".repeat(MAX_DOCUMENT_BYTES - 2), "{}");
        assert_eq!(
            remote.insert_fetched("https://x/ok.json", at_limit.as_bytes()),
            Some(&json!({}))
        );
    }

    #[test]
    fn the_first_unavailable_document_is_named_breadth_first_through_fetched_ones() {
        let root = json!({"$ref": "https://x/a.json"});
        let mut remote = RemoteSchemas::new();
        assert_eq!(
            first_unavailable(&root, ROOT_URL, &remote).as_deref(),
            Some("failing loading \"https://x/a.json\": the document was not fetched")
        );
        remote.insert_fetched(
            "https://x/a.json",
            br#"{"properties": {"b": {"$ref": "b.json"}}}"#,
        );
        remote.insert_failed(
            "https://x/b.json",
            "HTTP request to https://x/b.json returned status 404 (Not Found)".into(),
        );
        assert_eq!(
            first_unavailable(&root, ROOT_URL, &remote).as_deref(),
            Some(
                "failing loading \"https://x/b.json\": HTTP request to https://x/b.json returned status 404 (Not Found)"
            )
        );
        remote.insert_fetched("https://x/b.json", b"true");
        assert_eq!(first_unavailable(&root, ROOT_URL, &remote), None);
    }

    #[test]
    fn references_across_a_charts_subcharts_are_listed_once() {
        let mut parent = Chart::new(crate::metadata::Metadata {
            name: "parent".into(),
            ..Default::default()
        });
        parent.schema = Some(br#"{"$ref": "https://x/common.json"}"#.to_vec());
        let mut sub = Chart::new(crate::metadata::Metadata {
            name: "sub".into(),
            ..Default::default()
        });
        sub.schema =
            Some(br#"{"properties": {"a": {"$ref": "https://x/common.json#/a"}, "b": {"$ref": "https://x/sub.json"}}}"#.to_vec());
        parent.dependencies.push(sub);
        assert_eq!(
            urls(&chart_remote_refs(&parent)),
            ["https://x/common.json", "https://x/sub.json"]
        );
    }
}
