//! `Chart.yaml`, `Chart.lock` and their validation, decoded the way `sigs.k8s.io/yaml` fills
//! Helm's Go structs (YAML numbers and bools written into string fields become strings,
//! floats formatted as float32; field names match case-insensitively).

use std::collections::BTreeMap;

use flotilla_yaml::Value as Y;
use serde::{Deserialize, Serialize};

use crate::time::GoTime;

/// A chart maintainer.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Maintainer {
    /// Name.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    /// E-mail.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub email: String,
    /// URL.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub url: String,
}

/// One entry of `dependencies:` (Chart.yaml, requirements.yaml, Chart.lock).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Dependency {
    /// Chart name (replaced by the alias while dependencies are processed).
    #[serde(default)]
    pub name: String,
    /// Version range.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub version: String,
    /// Repository URL or alias (always written).
    #[serde(default)]
    pub repository: String,
    /// Comma-separated YAML paths to bools.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub condition: String,
    /// Tags.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub tags: Vec<String>,
    /// Whether enabled (set while dependencies are processed).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub enabled: bool,
    /// `import-values`: strings or `{child, parent}` maps.
    #[serde(
        default,
        rename = "import-values",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub import_values: Vec<serde_json::Value>,
    /// Alias.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub alias: String,
}

/// `Chart.yaml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Metadata {
    /// Chart name.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub name: String,
    /// Home page.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub home: String,
    /// Source URLs.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub sources: Vec<String>,
    /// SemVer 2 version.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub version: String,
    /// Description.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub description: String,
    /// Keywords.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub keywords: Vec<String>,
    /// Maintainers.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub maintainers: Vec<Maintainer>,
    /// Icon URL.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub icon: String,
    /// `v1` or `v2`.
    #[serde(
        default,
        rename = "apiVersion",
        skip_serializing_if = "String::is_empty"
    )]
    pub api_version: String,
    /// Legacy condition.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub condition: String,
    /// Legacy tags (one string).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "String::is_empty"
    )]
    pub tags: String,
    /// App version.
    #[serde(
        default,
        rename = "appVersion",
        skip_serializing_if = "String::is_empty"
    )]
    pub app_version: String,
    /// Deprecated flag.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub deprecated: bool,
    /// Annotations.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
    /// Kubernetes version constraint.
    #[serde(
        default,
        rename = "kubeVersion",
        skip_serializing_if = "String::is_empty"
    )]
    pub kube_version: String,
    /// Declared dependencies (`None` when the chart declares none: Helm then skips
    /// dependency processing for it).
    #[serde(default, skip_serializing_if = "opt_vec_empty")]
    pub dependencies: Option<Vec<Dependency>>,
    /// `application` (default) or `library`.
    #[serde(default, rename = "type", skip_serializing_if = "String::is_empty")]
    pub chart_type: String,
    /// Set when a `maintainers` or `dependencies` entry was null (a validation error).
    #[serde(skip)]
    pub(crate) null_node: Option<&'static str>,
}

/// JSON `null` (Go's nil slice/map/zero string) reads as the default.
fn null_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(
    d: D,
) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn opt_vec_empty<T>(v: &Option<Vec<T>>) -> bool {
    v.as_ref().is_none_or(Vec::is_empty)
}

/// `Chart.lock` / `requirements.lock`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Lock {
    /// When the lock was generated.
    #[serde(default = "zero_time")]
    pub generated: GoTime,
    /// Digest of the requirements.
    #[serde(default, deserialize_with = "null_default")]
    pub digest: String,
    /// Resolved dependencies.
    #[serde(default)]
    pub dependencies: Option<Vec<Dependency>>,
}

fn zero_time() -> GoTime {
    GoTime::ZERO
}

/// A YAML document that does not fit the Go struct.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// YAML syntax error (go-yaml's text, with its line).
    #[error("error converting YAML to JSON: {0}")]
    Yaml(String),
    /// A type mismatch (encoding/json's text).
    #[error(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {got} into Go struct field {field} of type {want}"
    )]
    Type {
        /// JSON kind found.
        got: &'static str,
        /// `Struct.path`.
        field: String,
        /// Go type wanted.
        want: &'static str,
    },
    /// The document is not a map.
    #[error(
        "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal {got} into Go value of type {want}"
    )]
    NotAStruct {
        /// JSON kind found.
        got: &'static str,
        /// Go type wanted.
        want: &'static str,
    },
}

/// A metadata validation error (`validation: ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("validation: {0}")]
pub struct ValidationError(pub String);

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

struct Ctx<'a> {
    strukt: &'static str,
    path: &'a str,
}

impl Ctx<'_> {
    fn err(&self, field: &str, got: &Y, want: &'static str) -> DecodeError {
        let field = if self.path.is_empty() {
            format!("{}.{field}", self.strukt)
        } else {
            format!("{}.{}.{field}", self.strukt, self.path)
        };
        DecodeError::Type {
            got: json_kind(got),
            field,
            want,
        }
    }
}

/// sigs.k8s.io/yaml's conversion of a scalar aimed at a Go string field.
fn to_string_field(v: &Y) -> Option<Option<String>> {
    Some(match v {
        Y::Null => None,
        Y::String(s) => Some(s.clone()),
        Y::Bytes(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Y::Bool(b) => Some(b.to_string()),
        Y::Int(i) => Some(i.to_string()),
        Y::Uint(u) => Some(u.to_string()),
        Y::Float(f) => Some(flotilla_yaml::go_format_float_g(*f, true)),
        _ => return None,
    })
}

fn get_string(ctx: &Ctx<'_>, field: &str, v: &Y, out: &mut String) -> Result<(), DecodeError> {
    match to_string_field(v) {
        Some(Some(s)) => *out = s,
        Some(None) => {}
        None => return Err(ctx.err(field, v, "string")),
    }
    Ok(())
}

fn get_bool(ctx: &Ctx<'_>, field: &str, v: &Y, out: &mut bool) -> Result<(), DecodeError> {
    match v {
        Y::Bool(b) => *out = *b,
        Y::Null => {}
        other => return Err(ctx.err(field, other, "bool")),
    }
    Ok(())
}

fn get_strings(
    ctx: &Ctx<'_>,
    field: &str,
    v: &Y,
    out: &mut Vec<String>,
) -> Result<(), DecodeError> {
    match v {
        Y::Null => out.clear(),
        Y::Seq(items) => {
            out.clear();
            for item in items {
                match to_string_field(item) {
                    Some(s) => out.push(s.unwrap_or_default()),
                    None => return Err(ctx.err(field, item, "string")),
                }
            }
        }
        other => return Err(ctx.err(field, other, "[]string")),
    }
    Ok(())
}

/// Iterates a YAML map's string keys, matching them to `fields` as encoding/json does (exact
/// name first, then ASCII case-insensitively).
fn for_fields<'v>(
    m: &'v flotilla_yaml::Mapping,
    fields: &[&'static str],
    mut f: impl FnMut(&'static str, &'v Y) -> Result<(), DecodeError>,
) -> Result<(), DecodeError> {
    for (k, v) in m.iter() {
        let key = match k {
            Y::String(s) => s.clone(),
            other => crate::gofmt::yaml_key_string(other),
        };
        let name = fields
            .iter()
            .find(|f| **f == key)
            .or_else(|| fields.iter().find(|f| f.eq_ignore_ascii_case(&key)));
        if let Some(name) = name {
            f(name, v)?;
        }
    }
    Ok(())
}

fn decode_maintainer(ctx: &Ctx<'_>, v: &Y) -> Result<Option<Maintainer>, DecodeError> {
    let m = match v {
        Y::Null => return Ok(None),
        Y::Map(m) => m,
        other => return Err(ctx.err("maintainers", other, "chart.Maintainer")),
    };
    let mut out = Maintainer::default();
    let c = Ctx {
        strukt: ctx.strukt,
        path: "maintainers",
    };
    for_fields(m, &["name", "email", "url"], |name, v| match name {
        "name" => get_string(&c, name, v, &mut out.name),
        "email" => get_string(&c, name, v, &mut out.email),
        _ => get_string(&c, name, v, &mut out.url),
    })?;
    Ok(Some(out))
}

/// Converts a YAML value to JSON the way sigs.k8s.io/yaml does for `interface{}` targets.
fn to_json_any(v: &Y) -> serde_json::Value {
    crate::values::yaml_to_json(v.clone())
}

fn decode_dependency(strukt: &'static str, v: &Y) -> Result<Option<Dependency>, DecodeError> {
    let ctx = Ctx {
        strukt,
        path: "dependencies",
    };
    let m = match v {
        Y::Null => return Ok(None),
        Y::Map(m) => m,
        other => return Err(ctx.err("dependencies", other, "chart.Dependency")),
    };
    let mut d = Dependency::default();
    for_fields(
        m,
        &[
            "name",
            "version",
            "repository",
            "condition",
            "tags",
            "enabled",
            "import-values",
            "alias",
        ],
        |name, v| match name {
            "name" => get_string(&ctx, name, v, &mut d.name),
            "version" => get_string(&ctx, name, v, &mut d.version),
            "repository" => get_string(&ctx, name, v, &mut d.repository),
            "condition" => get_string(&ctx, name, v, &mut d.condition),
            "alias" => get_string(&ctx, name, v, &mut d.alias),
            "tags" => get_strings(&ctx, name, v, &mut d.tags),
            "enabled" => get_bool(&ctx, name, v, &mut d.enabled),
            _ => match v {
                Y::Null => {
                    d.import_values.clear();
                    Ok(())
                }
                Y::Seq(items) => {
                    d.import_values = items.iter().map(to_json_any).collect();
                    Ok(())
                }
                other => Err(ctx.err(name, other, "[]interface {}")),
            },
        },
    )?;
    Ok(Some(d))
}

fn decode_dependencies(
    strukt: &'static str,
    v: &Y,
    null_node: &mut Option<&'static str>,
) -> Result<Option<Vec<Dependency>>, DecodeError> {
    let ctx = Ctx { strukt, path: "" };
    match v {
        Y::Null => Ok(None),
        Y::Seq(items) => {
            let mut out = Vec::new();
            for item in items {
                match decode_dependency(strukt, item)? {
                    Some(d) => out.push(d),
                    None => *null_node = Some("dependencies must not contain empty or null nodes"),
                }
            }
            Ok(Some(out))
        }
        other => Err(ctx.err("dependencies", other, "[]*chart.Dependency")),
    }
}

fn parse_yaml(src: &[u8]) -> Result<Y, DecodeError> {
    flotilla_yaml::from_slice(src).map_err(|e| DecodeError::Yaml(e.to_string()))
}

/// The JSON fields of Helm's `chart.Metadata`, in its struct's order (what `Chart.yaml` and a
/// repository index entry may hold besides the entry's own fields).
pub const METADATA_FIELDS: &[&str] = &[
    "name",
    "home",
    "sources",
    "version",
    "description",
    "keywords",
    "maintainers",
    "icon",
    "apiVersion",
    "condition",
    "tags",
    "appVersion",
    "deprecated",
    "annotations",
    "kubeVersion",
    "dependencies",
    "type",
];

impl Metadata {
    /// Decodes `Chart.yaml` (or `requirements.yaml`) onto this metadata, as
    /// `yaml.Unmarshal(data, c.Metadata)` does: fields present in the document are
    /// overwritten, others kept.
    pub fn merge_yaml(&mut self, src: &[u8]) -> Result<(), DecodeError> {
        self.merge_yaml_value(&parse_yaml(src)?)
    }

    /// [`Metadata::merge_yaml`] of a document already read (a repository index entry,
    /// whose fields are a chart's metadata plus its own).
    pub fn merge_yaml_value(&mut self, doc: &Y) -> Result<(), DecodeError> {
        let m = match doc {
            Y::Null => return Ok(()),
            Y::Map(m) => m,
            other => {
                return Err(DecodeError::NotAStruct {
                    got: json_kind(other),
                    want: "chart.Metadata",
                });
            }
        };
        let ctx = Ctx {
            strukt: "Metadata",
            path: "",
        };
        let mut null_node = self.null_node;
        for_fields(m, METADATA_FIELDS, |name, v| match name {
            "name" => get_string(&ctx, name, v, &mut self.name),
            "home" => get_string(&ctx, name, v, &mut self.home),
            "sources" => get_strings(&ctx, name, v, &mut self.sources),
            "version" => get_string(&ctx, name, v, &mut self.version),
            "description" => get_string(&ctx, name, v, &mut self.description),
            "keywords" => get_strings(&ctx, name, v, &mut self.keywords),
            "icon" => get_string(&ctx, name, v, &mut self.icon),
            "apiVersion" => get_string(&ctx, name, v, &mut self.api_version),
            "condition" => get_string(&ctx, name, v, &mut self.condition),
            "tags" => get_string(&ctx, name, v, &mut self.tags),
            "appVersion" => get_string(&ctx, name, v, &mut self.app_version),
            "deprecated" => get_bool(&ctx, name, v, &mut self.deprecated),
            "kubeVersion" => get_string(&ctx, name, v, &mut self.kube_version),
            "type" => get_string(&ctx, name, v, &mut self.chart_type),
            "maintainers" => {
                match v {
                    Y::Null => self.maintainers.clear(),
                    Y::Seq(items) => {
                        self.maintainers.clear();
                        for item in items {
                            match decode_maintainer(&ctx, item)? {
                                Some(mt) => self.maintainers.push(mt),
                                None => {
                                    null_node =
                                        Some("maintainers must not contain empty or null nodes")
                                }
                            }
                        }
                    }
                    other => return Err(ctx.err(name, other, "[]*chart.Maintainer")),
                }
                Ok(())
            }
            "annotations" => {
                match v {
                    Y::Null => self.annotations.clear(),
                    Y::Map(am) => {
                        for (k, av) in am.iter() {
                            let key = crate::gofmt::yaml_key_string(k);
                            match to_string_field(av) {
                                Some(s) => {
                                    self.annotations.insert(key, s.unwrap_or_default());
                                }
                                None => return Err(ctx.err(name, av, "string")),
                            }
                        }
                    }
                    other => return Err(ctx.err(name, other, "map[string]string")),
                }
                Ok(())
            }
            _ => {
                self.dependencies = decode_dependencies("Metadata", v, &mut null_node)?;
                Ok(())
            }
        })?;
        self.null_node = null_node;
        Ok(())
    }

    /// Parses a complete `Chart.yaml`.
    pub fn from_yaml(src: &[u8]) -> Result<Self, DecodeError> {
        let mut md = Metadata::default();
        md.merge_yaml(src)?;
        Ok(md)
    }

    /// Helm's `Metadata.Validate`: sanitizes strings (non-printables removed, whitespace
    /// made a space) and checks the required fields.
    pub fn validate(&mut self) -> Result<(), ValidationError> {
        for s in [
            &mut self.name,
            &mut self.description,
            &mut self.home,
            &mut self.icon,
            &mut self.condition,
            &mut self.tags,
            &mut self.app_version,
            &mut self.kube_version,
        ] {
            *s = sanitize(s);
        }
        for s in self.sources.iter_mut().chain(self.keywords.iter_mut()) {
            *s = sanitize(s);
        }
        let err = |m: String| Err(ValidationError(m));
        if self.api_version.is_empty() {
            return err("chart.metadata.apiVersion is required".into());
        }
        if self.name.is_empty() {
            return err("chart.metadata.name is required".into());
        }
        if self.name == "." || self.name == ".." {
            return err(format!(
                "chart.metadata.name {} is not allowed",
                flotilla_gotmpl::gofmt::quote(&self.name)
            ));
        }
        if go_base(&self.name) != self.name {
            return err(format!(
                "chart.metadata.name {} is invalid",
                flotilla_gotmpl::gofmt::quote(&self.name)
            ));
        }
        if self.version.is_empty() {
            return err("chart.metadata.version is required".into());
        }
        if crate::semver::Version::parse(&self.version).is_err() {
            return err(format!(
                "chart.metadata.version {} is invalid",
                flotilla_gotmpl::gofmt::quote(&self.version)
            ));
        }
        if !matches!(self.chart_type.as_str(), "" | "application" | "library") {
            return err("chart.metadata.type must be application or library".into());
        }
        if let Some(m) = self.null_node.filter(|m| m.starts_with("maintainers")) {
            return err(m.to_owned());
        }
        for m in &mut self.maintainers {
            m.name = sanitize(&m.name);
            m.email = sanitize(&m.email);
            m.url = sanitize(&m.url);
        }
        if let Some(m) = self.null_node {
            return err(m.to_owned());
        }
        let mut seen = std::collections::BTreeSet::new();
        for d in self.dependencies.iter_mut().flatten() {
            d.name = sanitize(&d.name);
            d.version = sanitize(&d.version);
            d.repository = sanitize(&d.repository);
            d.condition = sanitize(&d.condition);
            for t in &mut d.tags {
                *t = sanitize(t);
            }
            if !d.alias.is_empty()
                && !d
                    .alias
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
            {
                return err(format!(
                    "dependency {} has disallowed characters in the alias",
                    flotilla_gotmpl::gofmt::quote(&d.name)
                ));
            }
            let key = if d.alias.is_empty() {
                d.name.clone()
            } else {
                d.alias.clone()
            };
            if !seen.insert(key.clone()) {
                return err(format!(
                    "more than one dependency with name or alias {}",
                    flotilla_gotmpl::gofmt::quote(&key)
                ));
            }
        }
        Ok(())
    }

    /// Whether this is a library chart.
    pub fn is_library(&self) -> bool {
        self.chart_type == "library"
    }
}

impl Lock {
    /// Parses `Chart.lock` / `requirements.lock`.
    pub fn from_yaml(src: &[u8]) -> Result<Self, DecodeError> {
        let doc = parse_yaml(src)?;
        let mut lock = Lock::default();
        let m = match &doc {
            Y::Null => return Ok(lock),
            Y::Map(m) => m,
            other => {
                return Err(DecodeError::NotAStruct {
                    got: json_kind(other),
                    want: "chart.Lock",
                });
            }
        };
        let ctx = Ctx {
            strukt: "Lock",
            path: "",
        };
        let mut null_node = None;
        for_fields(
            m,
            &["generated", "digest", "dependencies"],
            |name, v| match name {
                "generated" => {
                    let mut s = String::new();
                    get_string(&ctx, name, v, &mut s)?;
                    if !s.is_empty() {
                        lock.generated =
                            GoTime::parse_rfc3339(&s).map_err(|_| ctx.err(name, v, "time.Time"))?;
                    }
                    Ok(())
                }
                "digest" => get_string(&ctx, name, v, &mut lock.digest),
                _ => {
                    lock.dependencies = decode_dependencies("Lock", v, &mut null_node)?;
                    Ok(())
                }
            },
        )?;
        Ok(lock)
    }
}

/// Go's `filepath.Base` (Unix).
fn go_base(p: &str) -> &str {
    if p.is_empty() {
        return ".";
    }
    let trimmed = p.trim_end_matches('/');
    if trimmed.is_empty() {
        return "/";
    }
    trimmed.rsplit('/').next().unwrap_or(trimmed)
}

/// Helm's `sanitizeString`: whitespace becomes a space, non-printable runes are dropped.
fn sanitize(s: &str) -> String {
    s.chars()
        .filter_map(|c| {
            if c.is_whitespace() {
                Some(' ')
            } else if c.is_control() || matches!(c, '\u{ad}' | '\u{200b}'..='\u{200f}' | '\u{2028}'..='\u{202e}' | '\u{2060}'..='\u{2064}' | '\u{feff}') {
                None
            } else {
                Some(c)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_string_fields_are_formatted_like_sigs_yaml() {
        let md = Metadata::from_yaml(
            b"apiVersion: v2\nname: x\nversion: 1.10\nappVersion: 2\nannotations:\n  a: true\n",
        )
        .unwrap();
        assert_eq!(md.version, "1.1");
        assert_eq!(md.app_version, "2");
        assert_eq!(md.annotations["a"], "true");
    }

    #[test]
    fn validation_messages_match_helm() {
        let mut md = Metadata::from_yaml(b"apiVersion: v2\nversion: 1.0.0\n").unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: chart.metadata.name is required"
        );
        let mut md = Metadata::from_yaml(b"apiVersion: v2\nname: a/b\nversion: 1.0.0\n").unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: chart.metadata.name \"a/b\" is invalid"
        );
        let mut md = Metadata::from_yaml(b"apiVersion: v2\nname: a\nversion: nope\n").unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: chart.metadata.version \"nope\" is invalid"
        );
        let mut md =
            Metadata::from_yaml(b"apiVersion: v2\nname: a\nversion: 1.0.0\ntype: foo\n").unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: chart.metadata.type must be application or library"
        );
        let mut md = Metadata::from_yaml(b"apiVersion: v2\nname: a\nversion: 1.0.0\ndependencies:\n- name: b\n- name: c\n  alias: b\n").unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: more than one dependency with name or alias \"b\""
        );
        let mut md =
            Metadata::from_yaml(b"apiVersion: v2\nname: a\nversion: 1.0.0\nmaintainers:\n- ~\n")
                .unwrap();
        assert_eq!(
            md.validate().unwrap_err().to_string(),
            "validation: maintainers must not contain empty or null nodes"
        );
    }

    #[test]
    fn type_errors_name_the_field() {
        let e = Metadata::from_yaml(b"name: {a: 1}\n")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "error unmarshaling JSON: while decoding JSON: json: cannot unmarshal object into Go struct field Metadata.name of type string"
        );
        let e = Metadata::from_yaml(b"name: [\n").unwrap_err().to_string();
        assert!(
            e.starts_with("error converting YAML to JSON: yaml: line"),
            "{e}"
        );
    }

    #[test]
    fn lock_parses() {
        let l = Lock::from_yaml(b"dependencies:\n- name: common\n  repository: oci://x\n  version: 2.31.4\ndigest: sha256:abc\ngenerated: \"2025-01-02T03:04:05.5Z\"\n").unwrap();
        assert_eq!(l.digest, "sha256:abc");
        assert_eq!(l.generated.to_rfc3339_nano(), "2025-01-02T03:04:05.5Z");
        assert_eq!(l.dependencies.unwrap()[0].name, "common");
    }
}
