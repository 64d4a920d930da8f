//! A Helm repository's `index.yaml`, read and searched as Flux's source-controller does
//! (`repository.IndexFromBytes`, `ChartRepository.GetChartVersion`), on Helm's index format
//! (`repo.IndexFile`, `apiVersion: v1`, `entries: name -> [ChartVersion]`).
//!
//! Where to start: [`Index::parse`], then [`Index::resolve`] with the chart name and the
//! HelmRelease's `chart.spec.version` (default `*`), then [`ChartVersion::chart_url`] for
//! the archive's URL and [`ChartVersion::digest`] to check the archive.
//!
//! Reading (`IndexFromBytes`):
//! - Empty input is `empty index.yaml file`; a missing `apiVersion` is `no API version
//!   specified`.
//! - Valid JSON is read as JSON, anything else as YAML with `sigs.k8s.io/yaml`'s strict mode:
//!   a repeated key or a field Helm's structs do not have is an error. YAML scalars written
//!   into string fields become strings (`appVersion: 1.10` is `"1.1"`, as Go reads it).
//! - Each entry is checked as Helm checks chart metadata (`Metadata.Validate`, after
//!   defaulting `apiVersion` to `v1`); invalid entries and null entries are dropped (see
//!   [`Index::warnings`]), except for the duplicate dependency name or alias error JFrog's
//!   indexes trigger, which is ignored.
//! - Each chart's versions are sorted newest first (invalid versions last).
//!
//! Resolving (`getChartVersion`):
//! - A chart name not in the index is `no chart name found`; a name with no (valid) entry is
//!   `no chart version found`.
//! - A version string equal to an entry's version picks that entry, whatever it is (this
//!   runs before the constraint is parsed, so `latest` can name an entry `latest`).
//! - Otherwise the version is a Masterminds semver v3 constraint (`*` when empty):
//!   `6.5.*`, `>=4.0.0 <5.0.0`, `^1.2`, `~1.2.3`, `1.2.3`, `||` alternatives, `x`/`X`
//!   wildcards, a leading `v`. A pre-release matches only a constraint (an `||` branch) that
//!   has a pre-release itself. Entries whose version is not `X.Y.Z[-pre][+build]` (three
//!   dot-separated parts, then Masterminds' lenient parse: `v` prefix and leading zeros
//!   allowed) are skipped.
//! - The highest matching version wins; equal versions (they may differ in build metadata)
//!   go to the one created last, then to the first in the sorted index.
//! - No match is `no '<name>' chart with version matching '<version>' found`.
//!
//! Not read: `removed` entries are not skipped (Flux does not skip them either), provenance
//! files, `serverInfo`, `publicKeys`. JSON input is read leniently about field name case and
//! scalar types in string fields are converted as for YAML (Go's JSON decoder would refuse
//! a number there).

use std::collections::BTreeMap;

use flotilla_chart::Metadata;
use flotilla_chart::metadata::METADATA_FIELDS;
use flotilla_chart::semver::{Constraints, Version};
use flotilla_chart::time::GoTime;
use flotilla_core::ids::ChartDigest;
use flotilla_yaml::{Mapping, Value as Y};

use super::url::{self, UrlError};

/// Why an index could not be read (Helm's and Go's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IndexError {
    /// The index is empty.
    #[error("empty index.yaml file")]
    Empty,
    /// The index has no `apiVersion`.
    #[error("no API version specified")]
    NoApiVersion,
    /// The document does not decode into Helm's index structure.
    #[error("{0}")]
    Decode(String),
}

/// Why no chart version could be picked. `Display` is source-controller's text (the
/// HelmChart's `invalid chart reference: failed to get chart version for remote
/// reference: ` prefix is [`ResolveError::condition_message`]'s).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// No chart of that name.
    #[error("no chart name found")]
    NoChartName {
        /// The chart asked for.
        name: String,
    },
    /// The chart has no valid version in the index.
    #[error("no chart version found")]
    NoChartVersion {
        /// The chart asked for.
        name: String,
    },
    /// The version is not a semver constraint (Masterminds' text).
    #[error("{message}")]
    InvalidConstraint {
        /// The chart asked for.
        name: String,
        /// The version constraint.
        version: String,
        /// `improper constraint: ...` and the like.
        message: String,
    },
    /// No version matches.
    #[error("no '{name}' chart with version matching '{version}' found")]
    NoMatch {
        /// The chart asked for.
        name: String,
        /// The version constraint.
        version: String,
    },
}

impl ResolveError {
    /// The message source-controller puts on the HelmChart's (and so the HelmRelease's)
    /// not-ready condition.
    pub fn condition_message(&self) -> String {
        format!("invalid chart reference: failed to get chart version for remote reference: {self}")
    }

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NoChartName { .. } => "no_chart_name",
            Self::NoChartVersion { .. } => "no_chart_version",
            Self::InvalidConstraint { .. } => "invalid_version_constraint",
            Self::NoMatch { .. } => "no_matching_version",
        }
    }

    /// Whether retrying may help: a new index may bring the chart or the version (Flux
    /// treats these as persistent until the index or the spec changes, so callers wait for
    /// either rather than back off).
    pub fn is_transient(&self) -> bool {
        !matches!(self, Self::InvalidConstraint { .. })
    }
}

/// Why a chart version has no URL to download.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChartUrlError {
    /// The entry lists no URL.
    #[error("chart '{name}' has no downloadable URLs")]
    NoUrls {
        /// The chart.
        name: String,
    },
    /// The entry's first URL or the repository URL does not parse.
    #[error("failed to parse {url} as URL: {source}")]
    Invalid {
        /// The URL that did not parse.
        url: String,
        /// Go's parse error.
        source: UrlError,
    },
}

/// One version of a chart in the index (`repo.ChartVersion`).
#[derive(Debug, Clone, PartialEq)]
pub struct ChartVersion {
    /// The chart's metadata, as the index records it.
    pub metadata: Metadata,
    /// Where the archive is (relative URLs are relative to the repository URL).
    pub urls: Vec<String>,
    /// When the entry was created (Go's zero time when absent).
    pub created: GoTime,
    /// Marked removed (not acted on, as in Flux).
    pub removed: bool,
    /// The archive's SHA-256, hex, as `helm repo index` writes it (may be empty).
    pub digest: String,
}

impl ChartVersion {
    /// The chart's name.
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The version, as written in the index.
    pub fn version(&self) -> &str {
        &self.metadata.version
    }

    /// The app version.
    pub fn app_version(&self) -> &str {
        &self.metadata.app_version
    }

    /// The archive digest the index announces, when it is a SHA-256 (64 hex digits, either
    /// case); compare it with [`ChartDigest::of_bytes`] of the downloaded archive.
    pub fn digest(&self) -> Option<ChartDigest> {
        let hex = self.digest.strip_prefix("sha256:").unwrap_or(&self.digest);
        ChartDigest::new(format!("sha256:{}", hex.to_ascii_lowercase())).ok()
    }

    /// The URL to download the archive from: the first of `urls`, resolved against the
    /// repository URL as source-controller does (`NormalizeURL`, then Helm's
    /// `ResolveReferenceURL`: an absolute URL as it is, a relative one under the repository
    /// URL, which keeps its query).
    pub fn chart_url(&self, repository_url: &str) -> Result<String, ChartUrlError> {
        let Some(first) = self.urls.first() else {
            return Err(ChartUrlError::NoUrls {
                name: self.metadata.name.clone(),
            });
        };
        let invalid = |source: UrlError| ChartUrlError::Invalid {
            url: source.url.clone(),
            source,
        };
        let base = url::normalize_repository_url(repository_url).map_err(invalid)?;
        url::resolve_reference_url(&base, first).map_err(invalid)
    }
}

/// A repository index.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Index {
    /// `apiVersion` (`v1`).
    pub api_version: String,
    /// When the index was generated (Go's zero time when absent).
    pub generated: GoTime,
    entries: BTreeMap<String, Vec<ChartVersion>>,
    warnings: Vec<String>,
}

/// The fields of Helm's `IndexFile`.
const INDEX_FIELDS: &[&str] = &[
    "serverInfo",
    "apiVersion",
    "generated",
    "entries",
    "publicKeys",
    "annotations",
];

/// The fields of Helm's `ChartVersion` besides the chart metadata's
/// ([`flotilla_chart::metadata::METADATA_FIELDS`]).
const CHART_VERSION_OWN_FIELDS: &[&str] = &[
    "urls",
    "created",
    "removed",
    "digest",
    "checksum",
    "engine",
    "tillerVersion",
    "url",
];

const MAINTAINER_FIELDS: &[&str] = &["name", "email", "url"];

const DEPENDENCY_FIELDS: &[&str] = &[
    "name",
    "version",
    "repository",
    "condition",
    "tags",
    "enabled",
    "import-values",
    "alias",
];

impl Index {
    /// Reads an index as source-controller's `IndexFromBytes` does (see the module docs).
    pub fn parse(bytes: &[u8]) -> Result<Index, IndexError> {
        if bytes.is_empty() {
            return Err(IndexError::Empty);
        }
        let (doc, strict) = match serde_json::from_slice::<serde_json::Value>(bytes) {
            Ok(json) => (json_to_yaml(json), false),
            Err(_) => {
                let text = std::str::from_utf8(bytes).map_err(|_| {
                    IndexError::Decode(
                        flotilla_yaml::sigs::unmarshal_bytes(bytes)
                            .err()
                            .map_or_else(|| "yaml: invalid UTF-8".to_owned(), |e| e.to_string()),
                    )
                })?;
                let doc = flotilla_yaml::from_str_strict(text).map_err(|e| {
                    IndexError::Decode(format!("error converting YAML to JSON: {e}"))
                })?;
                (doc, true)
            }
        };
        let mut index = decode_index(&doc, strict)?;
        if index.api_version.is_empty() {
            return Err(IndexError::NoApiVersion);
        }
        for versions in index.entries.values_mut() {
            sort_newest_first(versions);
        }
        index.warnings.sort();
        Ok(index)
    }

    /// The chart names in the index.
    pub fn chart_names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// A chart's versions, newest first (`None` when the index has no such chart).
    pub fn versions(&self, name: &str) -> Option<&[ChartVersion]> {
        self.entries.get(name).map(Vec::as_slice)
    }

    /// Entries dropped while reading, as Helm logs them (`skipping loading invalid entry for
    /// chart "x" "1.0" from index: validation: ...`).
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The version of chart `name` that `version` picks, as source-controller picks it (see
    /// the module docs). `version` is the HelmChart's / HelmRelease's `version` (`*` or empty:
    /// the latest stable version).
    pub fn resolve(&self, name: &str, version: &str) -> Result<&ChartVersion, ResolveError> {
        let versions = self
            .entries
            .get(name)
            .ok_or_else(|| ResolveError::NoChartName {
                name: name.to_owned(),
            })?;
        if versions.is_empty() {
            return Err(ResolveError::NoChartVersion {
                name: name.to_owned(),
            });
        }
        if !version.is_empty()
            && let Some(exact) = best(versions.iter().filter(|cv| cv.version() == version))
        {
            return Ok(exact);
        }
        let constraint = if version.is_empty() || version == "*" {
            "*"
        } else {
            version
        };
        let constraint =
            Constraints::parse(constraint).map_err(|message| ResolveError::InvalidConstraint {
                name: name.to_owned(),
                version: version.to_owned(),
                message,
            })?;
        best(
            versions
                .iter()
                .filter(|cv| parse_version(cv.version()).is_some_and(|v| constraint.check(&v))),
        )
        .ok_or_else(|| ResolveError::NoMatch {
            name: name.to_owned(),
            version: version.to_owned(),
        })
    }
}

/// fluxcd/pkg's `version.ParseVersion`: three dot-separated parts, then Masterminds'
/// lenient `NewVersion`.
pub(crate) fn parse_version(v: &str) -> Option<Version> {
    if v.splitn(3, '.').count() != 3 {
        return None;
    }
    Version::parse(v).ok()
}

/// The highest version, then the one created last, then the first.
fn best<'a>(candidates: impl Iterator<Item = &'a ChartVersion>) -> Option<&'a ChartVersion> {
    let mut best: Option<(&ChartVersion, Option<Version>)> = None;
    for cv in candidates {
        let v = parse_version(cv.version());
        let better = match &best {
            None => true,
            Some((b, bv)) => {
                let by_version = match (&v, bv) {
                    (Some(v), Some(bv)) => v.compare(bv),
                    _ => 0,
                };
                by_version > 0 || (by_version == 0 && cv.created > b.created)
            }
        };
        if better {
            best = Some((cv, v));
        }
    }
    best.map(|(cv, _)| cv)
}

/// `SortEntries`: newest first by Masterminds' lenient version; versions that do not parse
/// last (in index order).
fn sort_newest_first(versions: &mut [ChartVersion]) {
    versions.sort_by(|a, b| {
        match (
            Version::parse(a.version()).ok(),
            Version::parse(b.version()).ok(),
        ) {
            (Some(a), Some(b)) => b.compare(&a).cmp(&0),
            (Some(_), None) => std::cmp::Ordering::Less,
            (None, Some(_)) => std::cmp::Ordering::Greater,
            (None, None) => std::cmp::Ordering::Equal,
        }
    });
}

/// A JSON document as go-yaml would have decoded it.
pub(crate) fn json_to_yaml(v: serde_json::Value) -> Y {
    match v {
        serde_json::Value::Null => Y::Null,
        serde_json::Value::Bool(b) => Y::Bool(b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Y::Int(i),
            (None, Some(u)) => Y::Uint(u),
            _ => Y::Float(n.as_f64().unwrap_or(0.0)),
        },
        serde_json::Value::String(s) => Y::String(s),
        serde_json::Value::Array(items) => Y::Seq(items.into_iter().map(json_to_yaml).collect()),
        serde_json::Value::Object(m) => {
            let mut out = Mapping::new();
            for (k, v) in m {
                out.insert(Y::String(k), json_to_yaml(v));
            }
            Y::Map(out)
        }
    }
}

/// encoding/json's kind names in its errors.
fn json_kind(v: &Y) -> &'static str {
    match v {
        Y::Seq(_) => "array",
        Y::Map(_) => "object",
        Y::String(_) | Y::Bytes(_) => "string",
        Y::Bool(_) => "bool",
        Y::Null => "null",
        _ => "number",
    }
}

fn type_error(v: &Y, field: &str, want: &str) -> IndexError {
    IndexError::Decode(format!(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go struct field {field} of type {want}",
        json_kind(v)
    ))
}

fn key_text(k: &Y) -> String {
    match k {
        Y::String(s) => s.clone(),
        Y::Int(i) => i.to_string(),
        Y::Uint(u) => u.to_string(),
        Y::Bool(b) => b.to_string(),
        Y::Float(f) => flotilla_yaml::go_format_float_g(*f, true),
        Y::Null => "null".to_owned(),
        _ => String::new(),
    }
}

/// The field `key` names, matched as encoding/json matches (exactly, then ignoring ASCII
/// case); an unknown key is an error in strict mode.
fn field<'f>(key: &Y, fields: &[&'f str], strict: bool) -> Result<Option<&'f str>, IndexError> {
    field_of(key, &[fields], strict)
}

/// [`field`] over several disjoint field lists read as one struct's.
fn field_of<'f>(
    key: &Y,
    lists: &[&[&'f str]],
    strict: bool,
) -> Result<Option<&'f str>, IndexError> {
    let key = key_text(key);
    let all = || lists.iter().flat_map(|l| l.iter());
    let found = all()
        .find(|f| **f == key)
        .or_else(|| all().find(|f| f.eq_ignore_ascii_case(&key)))
        .copied();
    if found.is_none() && strict {
        return Err(IndexError::Decode(format!(
            "error unmarshaling JSON: while decoding JSON: json: unknown field {}",
            flotilla_gotmpl::gofmt::quote(&key)
        )));
    }
    Ok(found)
}

/// A scalar written into a Go string field, as `sigs.k8s.io/yaml` converts it.
fn string_field(v: &Y, field: &str) -> Result<String, IndexError> {
    match v {
        Y::Null => Ok(String::new()),
        Y::String(s) => Ok(s.clone()),
        Y::Bool(b) => Ok(b.to_string()),
        Y::Int(i) => Ok(i.to_string()),
        Y::Uint(u) => Ok(u.to_string()),
        Y::Float(f) => Ok(flotilla_yaml::go_format_float_g(*f, true)),
        Y::Bytes(b) => Ok(String::from_utf8_lossy(b).into_owned()),
        other => Err(type_error(other, field, "string")),
    }
}

fn time_field(v: &Y, field: &str) -> Result<GoTime, IndexError> {
    match v {
        Y::Null => Ok(GoTime::ZERO),
        Y::String(s) => GoTime::parse_rfc3339(s).map_err(|e| IndexError::Decode(e.to_string())),
        other => Err(type_error(other, field, "time.Time")),
    }
}

fn strings_field(v: &Y, field: &str) -> Result<Vec<String>, IndexError> {
    match v {
        Y::Null => Ok(Vec::new()),
        Y::Seq(items) => items.iter().map(|i| string_field(i, field)).collect(),
        other => Err(type_error(other, field, "[]string")),
    }
}

fn decode_index(doc: &Y, strict: bool) -> Result<Index, IndexError> {
    let mut index = Index::default();
    let m = match doc {
        Y::Null => return Ok(index),
        Y::Map(m) => m,
        other => {
            return Err(IndexError::Decode(format!(
                "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {} into Go value of type repo.IndexFile",
                json_kind(other)
            )));
        }
    };
    for (k, v) in m.iter() {
        match field(k, INDEX_FIELDS, strict)? {
            Some("apiVersion") => index.api_version = string_field(v, "IndexFile.apiVersion")?,
            Some("generated") => index.generated = time_field(v, "IndexFile.generated")?,
            Some("entries") => decode_entries(v, strict, &mut index)?,
            Some("publicKeys") => {
                strings_field(v, "IndexFile.publicKeys")?;
            }
            Some("annotations") => match v {
                Y::Null => {}
                Y::Map(a) => {
                    for (_, av) in a.iter() {
                        string_field(av, "IndexFile.annotations")?;
                    }
                }
                other => {
                    return Err(type_error(
                        other,
                        "IndexFile.annotations",
                        "map[string]string",
                    ));
                }
            },
            Some(_) => match v {
                Y::Null | Y::Map(_) => {}
                other => {
                    return Err(type_error(
                        other,
                        "IndexFile.serverInfo",
                        "map[string]interface {}",
                    ));
                }
            },
            None => {}
        }
    }
    Ok(index)
}

fn decode_entries(v: &Y, strict: bool, index: &mut Index) -> Result<(), IndexError> {
    let m = match v {
        Y::Null => return Ok(()),
        Y::Map(m) => m,
        other => {
            return Err(type_error(
                other,
                "IndexFile.entries",
                "map[string]repo.ChartVersions",
            ));
        }
    };
    for (k, v) in m.iter() {
        let name = key_text(k);
        let items: &[Y] = match v {
            Y::Null => &[],
            Y::Seq(items) => items,
            other => return Err(type_error(other, "IndexFile.entries", "repo.ChartVersions")),
        };
        let mut versions = Vec::new();
        for item in items {
            match decode_chart_version(item, strict)? {
                None => index.warnings.push(format!(
                    "skipping loading invalid entry for chart {} from index: empty entry",
                    flotilla_gotmpl::gofmt::quote(&name)
                )),
                Some(mut cv) => {
                    if cv.metadata.api_version.is_empty() {
                        cv.metadata.api_version = "v1".to_owned();
                    }
                    match cv.metadata.validate() {
                        Err(e)
                            if !e.to_string().starts_with(
                                "validation: more than one dependency with name or alias",
                            ) =>
                        {
                            index.warnings.push(format!(
                                "skipping loading invalid entry for chart {} {} from index: {e}",
                                flotilla_gotmpl::gofmt::quote(&name),
                                flotilla_gotmpl::gofmt::quote(&cv.metadata.version)
                            ));
                        }
                        _ => versions.push(cv),
                    }
                }
            }
        }
        index.entries.insert(name, versions);
    }
    Ok(())
}

fn decode_chart_version(v: &Y, strict: bool) -> Result<Option<ChartVersion>, IndexError> {
    let m = match v {
        Y::Null => return Ok(None),
        Y::Map(m) => m,
        other => return Err(type_error(other, "IndexFile.entries", "repo.ChartVersion")),
    };
    let mut cv = ChartVersion {
        metadata: Metadata::default(),
        urls: Vec::new(),
        created: GoTime::ZERO,
        removed: false,
        digest: String::new(),
    };
    for (k, fv) in m.iter() {
        match field_of(k, &[METADATA_FIELDS, CHART_VERSION_OWN_FIELDS], strict)? {
            Some("urls") => cv.urls = strings_field(fv, "ChartVersion.urls")?,
            Some("created") => cv.created = time_field(fv, "ChartVersion.created")?,
            Some("removed") => match fv {
                Y::Null => {}
                Y::Bool(b) => cv.removed = *b,
                other => return Err(type_error(other, "ChartVersion.removed", "bool")),
            },
            Some("digest") => cv.digest = string_field(fv, "ChartVersion.digest")?,
            Some(f @ ("checksum" | "engine" | "tillerVersion" | "url")) => {
                string_field(fv, &format!("ChartVersion.{f}"))?;
            }
            Some("maintainers") => check_nested(fv, MAINTAINER_FIELDS, strict)?,
            Some("dependencies") => check_nested(fv, DEPENDENCY_FIELDS, strict)?,
            _ => {}
        }
    }
    cv.metadata
        .merge_yaml_value(v)
        .map_err(|e| IndexError::Decode(e.to_string()))?;
    Ok(Some(cv))
}

/// Strict mode's unknown-field check inside `maintainers` and `dependencies` (their types
/// are the metadata decoder's to check).
fn check_nested(v: &Y, fields: &[&str], strict: bool) -> Result<(), IndexError> {
    if let Y::Seq(items) = v {
        for item in items {
            if let Y::Map(m) = item {
                for (k, _) in m.iter() {
                    field(k, fields, strict)?;
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `helm repo index` (helm v4.1.4) over packaged `helm create` charts: podinfo 1.0.0+build.2,
    /// 6.4.0, 6.5.0, 6.5.1, 6.5.2-rc.1, 6.9.0, 6.9.1 and v7.0.0, and `sub/other-0.1.0.tgz`.
    const FIXTURE: &str = include_str!("testdata/index.yaml");
    /// The podinfo 6.9.1 archive `helm repo index` digested.
    const PODINFO_6_9_1: &[u8] = include_bytes!("testdata/podinfo-6.9.1.tgz");

    fn fixture() -> Index {
        Index::parse(FIXTURE.as_bytes()).expect("the fixture index parses")
    }

    #[test]
    fn a_helm_generated_index_reads_with_versions_newest_first() {
        let index = fixture();
        assert_eq!(index.api_version, "v1");
        assert_eq!(
            index.chart_names().collect::<Vec<_>>(),
            ["other", "podinfo"]
        );
        let versions: Vec<&str> = index
            .versions("podinfo")
            .unwrap()
            .iter()
            .map(ChartVersion::version)
            .collect();
        assert_eq!(
            versions,
            [
                "v7.0.0",
                "6.9.1",
                "6.9.0",
                "6.5.2-rc.1",
                "6.5.1",
                "6.5.0",
                "6.4.0",
                "1.0.0+build.2"
            ]
        );
        let other = &index.versions("other").unwrap()[0];
        // `appVersion: 1.16.0` is written unquoted; it reads as the string.
        assert_eq!(other.app_version(), "1.16.0");
        assert_eq!(other.urls, ["sub/other-0.1.0.tgz"]);
        assert!(index.warnings().is_empty());
    }

    /// Every pick here is also what helm v4.1.4's `helm pull podinfo --version C` picked from
    /// this index served over HTTP (Helm and Flux agree on this index: every version has
    /// three parts and no two are equal).
    #[test]
    fn versions_resolve_as_source_controller_picks_them() {
        let index = fixture();
        let cases = [
            ("", "v7.0.0"),
            ("*", "v7.0.0"),
            ("<7", "6.9.1"),
            ("6.5.*", "6.5.1"),
            ("6.5.x", "6.5.1"),
            ("6.5.X", "6.5.1"),
            ("6.x", "6.9.1"),
            ("6", "6.9.1"),
            (">=6.5.0 <6.9.0", "6.5.1"),
            (">=6.5.0, <6.9.0", "6.5.1"),
            (">=6.5.0-0 <6.9.0", "6.5.2-rc.1"),
            ("^6.4", "6.9.1"),
            ("^6.5.0", "6.9.1"),
            ("~6.5.0", "6.5.1"),
            ("~6.5", "6.5.1"),
            ("6.5.0", "6.5.0"),
            ("=6.5.0", "6.5.0"),
            ("v6.5.0", "6.5.0"),
            ("6.5.0 || 6.4.0", "6.5.0"),
            ("<6.0.0 || >=6.9.0 <7", "6.9.1"),
            ("6.5.2-rc.1", "6.5.2-rc.1"),
            ("~6.5.2-0", "6.5.2-rc.1"),
            ("7", "v7.0.0"),
            ("v7.0.0", "v7.0.0"),
            ("^7.0.0", "v7.0.0"),
            (">=7.0.0-0", "v7.0.0"),
            ("1.0.0", "1.0.0+build.2"),
            ("6.4.0 - 6.5.0", "6.5.0"),
        ];
        for (constraint, want) in cases {
            let got = index
                .resolve("podinfo", constraint)
                .map(ChartVersion::version);
            assert_eq!(got, Ok(want), "{constraint:?}");
        }
    }

    #[test]
    fn pre_releases_match_only_constraints_that_name_one() {
        let index = fixture();
        for constraint in [
            ">=6.5.1 <6.9.0",
            "~6.5.1",
            ">=6.5.2-rc.0 <6.6.0 || >6.9.9 <7",
        ] {
            let got = index
                .resolve("podinfo", constraint)
                .map(ChartVersion::version);
            let want = if constraint.contains("rc") {
                "6.5.2-rc.1"
            } else {
                "6.5.1"
            };
            assert_eq!(got, Ok(want), "{constraint}");
        }
        // The pre-release branch of an `||` does not let the other branch match pre-releases.
        let got = index
            .resolve("podinfo", ">=6.5.2 <6.9.0 || 1.0.0-0")
            .map(ChartVersion::version);
        assert_eq!(
            got.unwrap_err().to_string(),
            "no 'podinfo' chart with version matching '>=6.5.2 <6.9.0 || 1.0.0-0' found"
        );
    }

    #[test]
    fn resolution_errors_use_source_controller_text() {
        let index = fixture();
        let e = index.resolve("podinfo", "6.6.*").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no 'podinfo' chart with version matching '6.6.*' found"
        );
        assert_eq!(
            e.condition_message(),
            "invalid chart reference: failed to get chart version for remote reference: no 'podinfo' chart with version matching '6.6.*' found"
        );
        assert_eq!(e.kind(), "no_matching_version");
        let e = index.resolve("missing", "*").unwrap_err();
        assert_eq!(e.to_string(), "no chart name found");
        assert_eq!(
            e,
            ResolveError::NoChartName {
                name: "missing".into()
            }
        );
        let e = index.resolve("podinfo", "not a version").unwrap_err();
        assert_eq!(e.to_string(), "improper constraint: not a version");
        assert!(!e.is_transient());
    }

    const HAND_WRITTEN: &str = r#"apiVersion: v1
entries:
  app:
  - name: app
    version: 2.0.0
    created: "2024-01-01T00:00:00Z"
    urls: [app-2.0.0.tgz]
  - name: app
    version: 2.0.0+b2
    created: "2024-03-01T00:00:00Z"
    urls: [app-2.0.0+b2.tgz]
  - name: app
    version: 2.0.0+b1
    created: "2024-02-01T00:00:00Z"
    urls: [app-2.0.0+b1.tgz]
  - name: app
    version: "2.1"
    urls: [app-2.1.tgz]
  - name: app
    version: latest
    urls: [app-latest.tgz]
  - name: app
    version: 01.9.0
    urls: [app-01.9.0.tgz]
  - name: app
    version: not-semver
    urls: [x.tgz]
  - name: app
  -
  empty: []
  nothing:
"#;

    #[test]
    fn hand_written_indexes_follow_helm_and_flux_rules() {
        let index = Index::parse(HAND_WRITTEN.as_bytes()).unwrap();
        let pick = |c: &str| index.resolve("app", c).map(|cv| cv.urls[0].as_str());
        // Equal versions (build metadata differs): the one created last.
        assert_eq!(pick("*"), Ok("app-2.0.0+b2.tgz"));
        assert_eq!(
            pick("2.0.0"),
            Ok("app-2.0.0.tgz"),
            "an exact string match comes first"
        );
        // "2.1" has two parts: Flux skips it, though Helm's lenient parse reads it.
        assert_eq!(
            pick(">=2.1.0").unwrap_err().to_string(),
            "no 'app' chart with version matching '>=2.1.0' found"
        );
        assert_eq!(
            pick("2.1"),
            Ok("app-2.1.tgz"),
            "an exact string match needs no semver"
        );
        // Helm's entry validation dropped the versions that are not semver at all.
        assert_eq!(
            pick("latest").unwrap_err().to_string(),
            "improper constraint: latest"
        );
        // Leading zeros are accepted (coerced) by Flux's parse.
        assert_eq!(pick("~1.9.0"), Ok("app-01.9.0.tgz"));
        // Invalid entries were dropped, with a warning.
        assert_eq!(
            index.warnings(),
            [
                "skipping loading invalid entry for chart \"app\" \"\" from index: validation: chart.metadata.version is required",
                "skipping loading invalid entry for chart \"app\" \"latest\" from index: validation: chart.metadata.version \"latest\" is invalid",
                "skipping loading invalid entry for chart \"app\" \"not-semver\" from index: validation: chart.metadata.version \"not-semver\" is invalid",
                "skipping loading invalid entry for chart \"app\" from index: empty entry",
            ]
        );
        assert_eq!(
            index.resolve("empty", "*").unwrap_err().to_string(),
            "no chart version found"
        );
        assert_eq!(
            index.resolve("nothing", "*").unwrap_err(),
            ResolveError::NoChartVersion {
                name: "nothing".into()
            }
        );
        // Newest first.
        let order: Vec<&str> = index
            .versions("app")
            .unwrap()
            .iter()
            .map(ChartVersion::version)
            .collect();
        assert_eq!(order, ["2.1", "2.0.0", "2.0.0+b2", "2.0.0+b1", "01.9.0"]);
    }

    #[test]
    fn json_indexes_read_leniently_and_yaml_ones_strictly() {
        let json = br#"{"apiVersion":"v1","entries":{"a":[{"name":"a","version":"1.0.0","urls":["a.tgz"],"extra":1}]},"unknown":true}"#;
        let index = Index::parse(json).unwrap();
        assert_eq!(index.resolve("a", "").unwrap().urls, ["a.tgz"]);
        let yaml =
            "apiVersion: v1\nentries:\n  a:\n  - name: a\n    version: 1.0.0\n    extra: 1\n";
        assert_eq!(
            Index::parse(yaml.as_bytes()).unwrap_err().to_string(),
            "error unmarshaling JSON: while decoding JSON: json: unknown field \"extra\""
        );
        let dup = "apiVersion: v1\napiVersion: v1\n";
        assert!(
            Index::parse(dup.as_bytes())
                .unwrap_err()
                .to_string()
                .contains("already set in map")
        );
        // Field names match case-insensitively, as encoding/json matches them.
        let cased = "APIVersion: v1\nentries:\n  a:\n  - Name: a\n    Version: 1.0.0\n";
        assert_eq!(
            Index::parse(cased.as_bytes())
                .unwrap()
                .resolve("a", "*")
                .unwrap()
                .version(),
            "1.0.0"
        );
    }

    #[test]
    fn empty_and_versionless_indexes_are_errors() {
        assert_eq!(Index::parse(b"").unwrap_err(), IndexError::Empty);
        assert_eq!(
            Index::parse(b"entries: {}\n").unwrap_err(),
            IndexError::NoApiVersion
        );
        assert_eq!(
            Index::parse(b"null\n").unwrap_err(),
            IndexError::NoApiVersion
        );
        assert_eq!(
            Index::parse(b"- 1\n").unwrap_err().to_string(),
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal array into Go value of type repo.IndexFile"
        );
        assert!(
            Index::parse(b"apiVersion: [v1\n")
                .unwrap_err()
                .to_string()
                .starts_with("error converting YAML to JSON: yaml: line")
        );
        assert_eq!(
            Index::parse(b"apiVersion: v1\nentries:\n  a:\n  - {name: a, version: 1.0.0, created: yesterday}\n").unwrap_err(),
            IndexError::Decode("parsing time \"yesterday\" as RFC 3339".into())
        );
    }

    #[test]
    fn chart_urls_resolve_against_the_repository_url() {
        let index = fixture();
        let podinfo = index.resolve("podinfo", "6.9.1").unwrap();
        assert_eq!(
            podinfo
                .chart_url("https://charts.example.com/podinfo")
                .unwrap(),
            "https://charts.example.com/podinfo/podinfo-6.9.1.tgz"
        );
        let other = index.resolve("other", "*").unwrap();
        assert_eq!(
            other.chart_url("https://example.com/repo?token=t").unwrap(),
            "https://example.com/repo/sub/other-0.1.0.tgz?token=t"
        );
        let mut absolute = other.clone();
        absolute.urls = vec!["https://cdn.example.com/other-0.1.0.tgz".into()];
        assert_eq!(
            absolute.chart_url("https://example.com/repo").unwrap(),
            "https://cdn.example.com/other-0.1.0.tgz"
        );
        let mut none = other.clone();
        none.urls.clear();
        assert_eq!(
            none.chart_url("https://example.com")
                .unwrap_err()
                .to_string(),
            "chart 'other' has no downloadable URLs"
        );
        let mut bad = other.clone();
        bad.urls = vec!["a%zz.tgz".into()];
        assert_eq!(
            bad.chart_url("https://example.com")
                .unwrap_err()
                .to_string(),
            "failed to parse a%zz.tgz as URL: parse \"a%zz.tgz\": invalid URL escape \"%zz\""
        );
    }

    #[test]
    fn the_index_digest_verifies_the_archive_helm_digested() {
        let index = fixture();
        let podinfo = index.resolve("podinfo", "6.9.1").unwrap();
        let digest = podinfo.digest().expect("helm writes a sha256 digest");
        assert_eq!(digest, ChartDigest::of_bytes(PODINFO_6_9_1));
        assert_ne!(
            index.resolve("podinfo", "6.9.0").unwrap().digest(),
            Some(digest)
        );
        let mut odd = podinfo.clone();
        odd.digest = "not-a-digest".into();
        assert_eq!(odd.digest(), None);
        odd.digest = format!("sha256:{}", podinfo.digest.to_ascii_uppercase());
        assert_eq!(odd.digest(), podinfo.digest());
    }
}
