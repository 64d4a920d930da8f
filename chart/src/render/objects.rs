//! The objects Helm hands templates besides values: `.Files` (Helm's `files` map type with
//! its methods) and `.Capabilities` (`*common.Capabilities` with `KubeVersion`,
//! `APIVersions` and `HelmVersion`).

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;
use flotilla_gotmpl::gofmt::quote as go_quote;
use flotilla_gotmpl::{ArgType, FuncError, GoKind, List, Map, Object, Signature, Value};

use super::glob::Glob;

/// The group/versions `helm template` (v4.1.4, client-go v0.35) reports without a cluster,
/// in its order: every group/version of client-go's scheme plus apiextensions v1beta1/v1.
pub const DEFAULT_API_VERSIONS: &[&str] = &[
    "v1",
    "admissionregistration.k8s.io/v1",
    "admissionregistration.k8s.io/v1alpha1",
    "admissionregistration.k8s.io/v1beta1",
    "internal.apiserver.k8s.io/v1alpha1",
    "apps/v1",
    "apps/v1beta1",
    "apps/v1beta2",
    "authentication.k8s.io/v1",
    "authentication.k8s.io/v1alpha1",
    "authentication.k8s.io/v1beta1",
    "authorization.k8s.io/v1",
    "authorization.k8s.io/v1beta1",
    "autoscaling/v1",
    "autoscaling/v2",
    "autoscaling/v2beta1",
    "autoscaling/v2beta2",
    "batch/v1",
    "batch/v1beta1",
    "certificates.k8s.io/v1",
    "certificates.k8s.io/v1beta1",
    "certificates.k8s.io/v1alpha1",
    "coordination.k8s.io/v1alpha2",
    "coordination.k8s.io/v1beta1",
    "coordination.k8s.io/v1",
    "discovery.k8s.io/v1",
    "discovery.k8s.io/v1beta1",
    "events.k8s.io/v1",
    "events.k8s.io/v1beta1",
    "extensions/v1beta1",
    "flowcontrol.apiserver.k8s.io/v1",
    "flowcontrol.apiserver.k8s.io/v1beta1",
    "flowcontrol.apiserver.k8s.io/v1beta2",
    "flowcontrol.apiserver.k8s.io/v1beta3",
    "networking.k8s.io/v1",
    "networking.k8s.io/v1beta1",
    "node.k8s.io/v1",
    "node.k8s.io/v1alpha1",
    "node.k8s.io/v1beta1",
    "policy/v1",
    "policy/v1beta1",
    "rbac.authorization.k8s.io/v1",
    "rbac.authorization.k8s.io/v1beta1",
    "rbac.authorization.k8s.io/v1alpha1",
    "resource.k8s.io/v1",
    "resource.k8s.io/v1beta2",
    "resource.k8s.io/v1beta1",
    "resource.k8s.io/v1alpha3",
    "scheduling.k8s.io/v1alpha1",
    "scheduling.k8s.io/v1beta1",
    "scheduling.k8s.io/v1",
    "storage.k8s.io/v1beta1",
    "storage.k8s.io/v1",
    "storage.k8s.io/v1alpha1",
    "storagemigration.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1beta1",
    "apiextensions.k8s.io/v1",
];

/// `.Capabilities.KubeVersion`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeVersion {
    /// The full version (`v1.33.4-gke.1245000`).
    pub version: String,
    /// The normalized version used for constraint checks and printing (`v1.33.4`).
    pub normalized: String,
    /// Major version.
    pub major: String,
    /// Minor version.
    pub minor: String,
}

impl KubeVersion {
    /// `common.ParseKubeVersion` (Kubernetes' generic version parser): `1.34`, `v1.34.0`,
    /// `1.33.4-gke.1` are accepted; the error is the parser's message.
    pub fn parse(s: &str) -> Result<KubeVersion, String> {
        let trimmed = s.trim_start();
        let body = trimmed.strip_prefix('v').unwrap_or(trimmed);
        let digits_end = body
            .char_indices()
            .find(|(_, c)| !(c.is_ascii_digit() || *c == '.'))
            .map_or(body.len(), |(i, _)| i);
        let mut numbers = &body[..digits_end];
        // The regex takes `[0-9]+(\.[0-9]+)*`: a trailing dot belongs to the rest.
        while numbers.ends_with('.') || numbers.contains("..") {
            match numbers.rfind('.') {
                Some(i) if numbers.ends_with('.') => numbers = &numbers[..i],
                _ => match numbers.find("..") {
                    Some(i) => numbers = &numbers[..i],
                    None => break,
                },
            }
        }
        if numbers.is_empty() || !numbers.starts_with(|c: char| c.is_ascii_digit()) {
            return Err(format!("could not parse {} as version", go_quote(s)));
        }
        let components: Vec<&str> = numbers.split('.').collect();
        if components.len() < 2 {
            return Err(format!("illegal version string {}", go_quote(s)));
        }
        let mut nums = Vec::with_capacity(components.len());
        for (i, comp) in components.iter().enumerate() {
            if i == 0 && comp.starts_with('0') && *comp != "0" {
                return Err(format!(
                    "illegal zero-prefixed version component {} in {}",
                    go_quote(comp),
                    go_quote(s)
                ));
            }
            let n: u64 = comp.parse().map_err(|_| {
                format!(
                    "illegal non-numeric version component {} in {}: strconv.ParseUint: parsing {}: value out of range",
                    go_quote(comp),
                    go_quote(s),
                    go_quote(comp)
                )
            })?;
            nums.push(n);
        }
        let version = if s.starts_with('v') {
            s.to_string()
        } else {
            format!("v{s}")
        };
        let joined: Vec<String> = nums.iter().map(u64::to_string).collect();
        Ok(KubeVersion {
            version,
            normalized: format!("v{}", joined.join(".")),
            major: nums[0].to_string(),
            minor: nums[1].to_string(),
        })
    }

    /// The version `helm template` assumes without `--kube-version` (v1.35.0 for Helm
    /// v4.1.4, built with client-go v0.35).
    pub fn helm_default() -> KubeVersion {
        KubeVersion {
            version: "v1.35.0".to_string(),
            normalized: "v1.35.0".to_string(),
            major: "1".to_string(),
            minor: "35".to_string(),
        }
    }

    /// `String()`: the normalized version.
    pub fn string(&self) -> &str {
        if self.normalized.is_empty() {
            &self.version
        } else {
            &self.normalized
        }
    }
}

/// `.Capabilities.HelmVersion` (`version.BuildInfo`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmVersion {
    /// `v4.1.4`
    pub version: String,
    /// Git commit of the build.
    pub git_commit: String,
    /// `clean`
    pub git_tree_state: String,
    /// Go toolchain.
    pub go_version: String,
    /// `v1.35`
    pub kube_client_version: String,
}

impl HelmVersion {
    /// The reference build this renderer follows: Helm v4.1.4.
    pub fn reference() -> HelmVersion {
        HelmVersion {
            version: "v4.1.4".to_string(),
            git_commit: "05fa37973dc9e42b76e1d2883494c87174b6074f".to_string(),
            git_tree_state: "clean".to_string(),
            go_version: "go1.25.9".to_string(),
            kube_client_version: "v1.35".to_string(),
        }
    }
}

/// `.Capabilities`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capabilities {
    /// Kubernetes version.
    pub kube_version: KubeVersion,
    /// Known group/versions (and, from a cluster, group/version/kinds).
    pub api_versions: Vec<String>,
    /// Helm build information.
    pub helm_version: HelmVersion,
}

impl Capabilities {
    /// What `helm template` uses without a cluster: [`KubeVersion::helm_default`] and
    /// [`DEFAULT_API_VERSIONS`].
    pub fn helm_template_default() -> Capabilities {
        Capabilities {
            kube_version: KubeVersion::helm_default(),
            api_versions: DEFAULT_API_VERSIONS.iter().map(|s| s.to_string()).collect(),
            helm_version: HelmVersion::reference(),
        }
    }
}

fn s(x: &str) -> Value {
    Value::string(x)
}

/// `*common.Capabilities` as a template object.
#[derive(Debug)]
pub(crate) struct CapabilitiesObject {
    kube: Arc<KubeVersionObject>,
    apis: Arc<VersionSetObject>,
    helm: Arc<BuildInfoObject>,
}

impl CapabilitiesObject {
    pub(crate) fn new(caps: &Capabilities) -> Self {
        CapabilitiesObject {
            kube: Arc::new(KubeVersionObject(caps.kube_version.clone())),
            apis: Arc::new(VersionSetObject(caps.api_versions.clone())),
            helm: Arc::new(BuildInfoObject(caps.helm_version.clone())),
        }
    }
}

impl Object for CapabilitiesObject {
    fn type_name(&self) -> String {
        "*common.Capabilities".to_string()
    }
    fn field(&self, name: &str) -> Option<Value> {
        match name {
            "KubeVersion" => Some(Value::Object(self.kube.clone())),
            "APIVersions" => Some(Value::Object(self.apis.clone())),
            "HelmVersion" => Some(Value::Object(self.helm.clone())),
            _ => None,
        }
    }
    fn display(&self) -> String {
        format!(
            "&{{{} {} {}}}",
            self.kube.struct_form(),
            self.apis.display(),
            self.helm.display()
        )
    }
    fn marshal(&self) -> Option<Value> {
        Some(Value::Map(ordered_struct(vec![
            ("KubeVersion", self.kube.marshal().unwrap_or_default()),
            ("APIVersions", self.apis.marshal().unwrap_or_default()),
            ("HelmVersion", self.helm.marshal().unwrap_or_default()),
        ])))
    }
}

/// A struct's exported fields as a map. `encoding/json` keeps a struct's field order while a
/// [`Map`] sorts keys: `toYaml` output is the same (YAML sorts too), `toJson` of these
/// objects lists fields alphabetically where Go keeps declaration order.
fn ordered_struct(fields: Vec<(&str, Value)>) -> Map {
    Map::from_entries(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect::<BTreeMap<_, _>>(),
    )
}

/// `common.KubeVersion`.
#[derive(Debug)]
pub(crate) struct KubeVersionObject(KubeVersion);

impl KubeVersionObject {
    fn struct_form(&self) -> String {
        let k = &self.0;
        format!("{{{} {} {} {}}}", k.version, k.normalized, k.major, k.minor)
    }
}

impl Object for KubeVersionObject {
    fn type_name(&self) -> String {
        "common.KubeVersion".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Struct
    }
    fn method(&self, name: &str) -> Option<Signature> {
        matches!(name, "String" | "GitVersion").then(|| Signature::fixed([]))
    }
    fn call_method(&self, name: &str, _args: &[Value]) -> Result<Value, FuncError> {
        match name {
            "String" => Ok(s(self.0.string())),
            _ => Ok(s(&self.0.version)),
        }
    }
    fn field(&self, name: &str) -> Option<Value> {
        match name {
            "Version" => Some(s(&self.0.version)),
            "Major" => Some(s(&self.0.major)),
            "Minor" => Some(s(&self.0.minor)),
            _ => None,
        }
    }
    fn display(&self) -> String {
        // Templates print the addressable field through its `String()` method.
        self.0.string().to_string()
    }
    fn marshal(&self) -> Option<Value> {
        Some(Value::Map(ordered_struct(vec![
            ("Version", s(&self.0.version)),
            ("Major", s(&self.0.major)),
            ("Minor", s(&self.0.minor)),
        ])))
    }
}

/// `common.VersionSet`.
#[derive(Debug)]
pub(crate) struct VersionSetObject(Vec<String>);

impl Object for VersionSetObject {
    fn type_name(&self) -> String {
        "common.VersionSet".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Slice
    }
    fn method(&self, name: &str) -> Option<Signature> {
        (name == "Has").then(|| Signature::fixed([ArgType::String]))
    }
    fn call_method(&self, _name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let want = args.first().and_then(Value::as_str).unwrap_or_default();
        Ok(Value::Bool(self.0.iter().any(|v| v == want)))
    }
    fn list_items(&self) -> Option<Vec<Value>> {
        Some(self.0.iter().map(|v| s(v)).collect())
    }
    fn display(&self) -> String {
        format!("[{}]", self.0.join(" "))
    }
    fn marshal(&self) -> Option<Value> {
        Some(Value::List(List::typed(
            self.0.iter().map(|v| s(v)).collect(),
            flotilla_gotmpl::ElemType::String,
        )))
    }
}

/// `version.BuildInfo`.
#[derive(Debug)]
pub(crate) struct BuildInfoObject(HelmVersion);

impl Object for BuildInfoObject {
    fn type_name(&self) -> String {
        "version.BuildInfo".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Struct
    }
    fn field(&self, name: &str) -> Option<Value> {
        let h = &self.0;
        match name {
            "Version" => Some(s(&h.version)),
            "GitCommit" => Some(s(&h.git_commit)),
            "GitTreeState" => Some(s(&h.git_tree_state)),
            "GoVersion" => Some(s(&h.go_version)),
            "KubeClientVersion" => Some(s(&h.kube_client_version)),
            _ => None,
        }
    }
    fn display(&self) -> String {
        let h = &self.0;
        format!(
            "{{{} {} {} {} {}}}",
            h.version, h.git_commit, h.git_tree_state, h.go_version, h.kube_client_version
        )
    }
    fn marshal(&self) -> Option<Value> {
        let h = &self.0;
        let mut fields = vec![];
        for (k, v) in [
            ("version", &h.version),
            ("git_commit", &h.git_commit),
            ("git_tree_state", &h.git_tree_state),
            ("go_version", &h.go_version),
        ] {
            if !v.is_empty() {
                fields.push((k, s(v)));
            }
        }
        fields.push(("kube_client_version", s(&h.kube_client_version)));
        Some(Value::Map(ordered_struct(fields)))
    }
}

/// Helm's `files` type (`.Files`): chart files by path, with `Get`, `GetBytes`, `Glob`,
/// `AsConfig`, `AsSecrets` and `Lines`.
#[derive(Debug, Default)]
pub(crate) struct FilesObject {
    entries: BTreeMap<String, Arc<[u8]>>,
}

impl FilesObject {
    pub(crate) fn new(files: &[crate::File]) -> Self {
        FilesObject {
            entries: files
                .iter()
                .map(|f| (f.name.clone(), f.data.clone()))
                .collect(),
        }
    }

    fn get_bytes(&self, name: &str) -> Arc<[u8]> {
        self.entries
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::from(&[][..]))
    }

    fn by_basename(&self, encode: impl Fn(&[u8]) -> String) -> String {
        let mut m = flotilla_yaml::Mapping::new();
        for (k, v) in &self.entries {
            let base = k.rsplit('/').next().unwrap_or(k);
            m.insert(
                flotilla_yaml::Value::String(base.to_string()),
                flotilla_yaml::Value::String(encode(v)),
            );
        }
        flotilla_yaml::sigs::helm_to_yaml(&flotilla_yaml::Value::Map(m)).unwrap_or_default()
    }
}

impl Object for FilesObject {
    fn type_name(&self) -> String {
        "engine.files".to_string()
    }
    fn kind(&self) -> GoKind {
        GoKind::Map
    }
    fn method(&self, name: &str) -> Option<Signature> {
        match name {
            "Get" | "GetBytes" | "Glob" | "Lines" => Some(Signature::fixed([ArgType::String])),
            "AsConfig" | "AsSecrets" => Some(Signature::fixed([])),
            _ => None,
        }
    }
    fn call_method(&self, name: &str, args: &[Value]) -> Result<Value, FuncError> {
        let arg = args.first().and_then(Value::as_str).unwrap_or_default();
        match name {
            // `string(bytes)`: a binary file keeps its bytes.
            "Get" => Ok(Value::go_string(self.get_bytes(arg))),
            "GetBytes" => Ok(Value::Bytes(self.get_bytes(arg))),
            "Glob" => {
                let g = Glob::compile(arg).unwrap_or_else(Glob::match_all);
                let entries = self
                    .entries
                    .iter()
                    .filter(|(k, _)| g.matches(k))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                Ok(Value::Object(Arc::new(FilesObject { entries })))
            }
            // Through encoding/json, as Helm's `toYAML`: invalid UTF-8 becomes U+FFFD.
            "AsConfig" => Ok(Value::string(
                self.by_basename(|v| crate::utf8_lossy(v).into_owned()),
            )),
            "AsSecrets" => {
                Ok(Value::string(self.by_basename(|v| {
                    base64::engine::general_purpose::STANDARD.encode(v)
                })))
            }
            "Lines" => {
                let items = match self.entries.get(arg) {
                    None => Vec::new(),
                    Some(data) => {
                        let data: &[u8] = data;
                        let Some(text) = data.strip_suffix(b"\n").or(if data.is_empty() {
                            None
                        } else {
                            Some(data)
                        }) else {
                            return Err(FuncError::new("runtime error: index out of range [-1]"));
                        };
                        text.split(|&b| b == b'\n').map(Value::go_string).collect()
                    }
                };
                Ok(Value::List(List::typed(
                    items,
                    flotilla_gotmpl::ElemType::String,
                )))
            }
            other => Err(FuncError::new(format!("method {other} not implemented"))),
        }
    }
    fn map_entries(&self) -> Option<Vec<(String, Value)>> {
        Some(
            self.entries
                .iter()
                .map(|(k, v)| (k.clone(), Value::Bytes(v.clone())))
                .collect(),
        )
    }
    fn display(&self) -> String {
        let m = Map::from_entries(
            self.entries
                .iter()
                .map(|(k, v)| (k.clone(), Value::Bytes(v.clone())))
                .collect(),
        );
        flotilla_gotmpl::gofmt::sprint_value(&Value::Map(m))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_versions_parse_like_kubernetes_generic_versions() {
        let k = KubeVersion::parse("1.34.0").expect("parses");
        assert_eq!((k.version.as_str(), k.string()), ("v1.34.0", "v1.34.0"));
        let k = KubeVersion::parse("v1.33.4-gke.1245000").expect("parses");
        assert_eq!(k.version, "v1.33.4-gke.1245000");
        assert_eq!(
            (k.string(), k.major.as_str(), k.minor.as_str()),
            ("v1.33.4", "1", "33")
        );
        assert_eq!(
            KubeVersion::parse("1.34").expect("parses").string(),
            "v1.34"
        );
        assert_eq!(
            KubeVersion::parse("1").unwrap_err(),
            "illegal version string \"1\""
        );
    }

    #[test]
    fn files_lines_drop_one_trailing_newline() {
        let f = FilesObject::new(&[crate::File {
            name: "a.txt".into(),
            data: b"x\ny\n\n".as_slice().into(),
            mod_time: None,
        }]);
        let v = f
            .call_method("Lines", &[Value::string("a.txt")])
            .expect("lines");
        assert_eq!(v.as_list().map(List::len), Some(3));
        let v = f
            .call_method("Lines", &[Value::string("missing")])
            .expect("lines");
        assert_eq!(v.as_list().map(List::len), Some(0));
    }

    #[test]
    fn as_config_keys_by_basename() {
        let f = FilesObject::new(&[crate::File {
            name: "conf/a.txt".into(),
            data: b"one\ntwo".as_slice().into(),
            mod_time: None,
        }]);
        let v = f.call_method("AsConfig", &[]).expect("config");
        assert_eq!(v.as_str(), Some("a.txt: |-\n  one\n  two"));
    }

    #[test]
    fn binary_files_keep_their_bytes_except_where_helm_goes_through_json() {
        let data: &[u8] = b"ab\xff\n\xc3cd\n";
        let f = FilesObject::new(&[crate::File {
            name: "files/x.bin".into(),
            data: data.into(),
            mod_time: None,
        }]);
        let arg = [Value::string("files/x.bin")];
        let get = f.call_method("Get", &arg).expect("get");
        assert!(matches!(get, Value::RawString(_)));
        assert_eq!(get.as_go_bytes(), Some(data));
        let bytes = f.call_method("GetBytes", &arg).expect("bytes");
        assert!(matches!(&bytes, Value::Bytes(b) if **b == *data));
        let lines = f.call_method("Lines", &arg).expect("lines");
        let lines: Vec<&[u8]> = lines
            .as_list()
            .expect("list")
            .items()
            .iter()
            .map(|l| l.as_go_bytes().expect("string"))
            .collect();
        assert_eq!(lines, [&b"ab\xff"[..], b"\xc3cd"]);
        // `toYAML` marshals through encoding/json: U+FFFD.
        let config = f.call_method("AsConfig", &[]).expect("config");
        assert_eq!(
            config.as_str(),
            Some("x.bin: |\n  ab\u{fffd}\n  \u{fffd}cd")
        );
        let secrets = f.call_method("AsSecrets", &[]).expect("secrets");
        assert_eq!(secrets.as_str(), Some("x.bin: YWL/CsNjZAo="));
    }
}
