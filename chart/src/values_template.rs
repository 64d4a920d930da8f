//! A HelmReleaseSet's `valuesTemplate`: a Go template rendered on the hub once per cluster,
//! whose YAML output becomes that cluster's values (merged over the template's values by
//! `flotilla_core::set::child_spec`).
//!
//! Start at [`ValuesTemplate::parse`] (once per set revision), then
//! [`ValuesTemplate::render`] per cluster with a [`ClusterContext`].
//!
//! # The template's world
//!
//! - Context: `.Cluster` (the ManagedCluster as `{apiVersion, kind, metadata: {name,
//!   labels, annotations}}`; for a cluster made from a Cluster API `Cluster`, that Cluster's
//!   object instead, with `status`, `metadata.managedFields`, `metadata.resourceVersion` and
//!   `metadata.generation` stripped so status churn never changes the values), `.ClusterName`,
//!   `.ClusterLabels`, `.ClusterAnnotations` (the ManagedCluster's).
//! - Functions: Sprig as Helm exposes it, plus Helm's `toYaml`, `toJson`, `fromYaml`,
//!   `fromJson`, `toToml` and their variants, byte-compatible with Helm.
//!
//! # Guarantees
//!
//! - **Strict.** A missing map key is an error (Go's `missingkey=error`), so a typo fails
//!   the cluster instead of rendering an empty value.
//! - **No reach outside the template.** No environment (`env`, `expandenv`), no DNS
//!   (`getHostByName`), no files (`.Files`), no cluster (`lookup`), no other templates
//!   (`include`, `tpl`).
//! - **Deterministic.** Functions whose result changes from call to call are removed (the
//!   clock: `now`, `ago`; randomness: `rand*`, `uuidv4`, `shuffle`, salted hashes `bcrypt`,
//!   `htpasswd`, `encryptAES`; key and certificate generation `genPrivateKey`, `genCA*`,
//!   `genSelfSignedCert*`, `genSignedCert*`, `buildCustomCert`; and `derivePassword`, whose
//!   scrypt is a CPU sink). The same cluster renders the same values on every reconcile
//!   and every hub, so a render never causes a rollout by itself.
//! - **Bounded.** Execution stops after [`Budget::max_steps`] steps (nodes and loop
//!   iterations: an endless `range` fails) and [`Budget::max_output_bytes`] bytes of output;
//!   template nesting is bounded, and the executor runs on a stack of its own
//!   (`stacker`), so deep recursion is an error, never an overflow. Strings and lists a
//!   function builds are capped by Sprig (256 MiB, 10 million items).
//! - **Errors name the place.** Parse errors read `template: valuesTemplate:LINE: ...`,
//!   execution errors `template: valuesTemplate:LINE:COL: executing ...`, as Helm prints
//!   them; output that is not a YAML map says so with go-yaml's line.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use flotilla_gotmpl::{ExecOptions, FuncMap, MissingKey, TemplateSet, Value};
use serde_json::json;

use crate::values::{Values, load_values};

/// Name of the template in messages.
pub const TEMPLATE_NAME: &str = "valuesTemplate";

/// Functions removed from Sprig + Helm's serialisation functions (see the module
/// documentation for why).
pub const REMOVED_FUNCTIONS: &[&str] = &[
    "env",
    "expandenv",
    "getHostByName",
    "now",
    "ago",
    "randAlphaNum",
    "randAlpha",
    "randAscii",
    "randNumeric",
    "randBytes",
    "randInt",
    "uuidv4",
    "shuffle",
    "bcrypt",
    "htpasswd",
    "encryptAES",
    "derivePassword",
    "genPrivateKey",
    "genCA",
    "genCAWithKey",
    "genSelfSignedCert",
    "genSelfSignedCertWithKey",
    "genSignedCert",
    "genSignedCertWithKey",
    "buildCustomCert",
];

/// Stack the executor may use; it runs on a segment of [`EXEC_STACK_BYTES`].
const EXEC_STACK_BUDGET: usize = 8 << 20;
const EXEC_STACK_BYTES: usize = 2 * EXEC_STACK_BUDGET;
/// Most nested template invocations.
const MAX_DEPTH: usize = 1000;

static FUNCS: LazyLock<FuncMap> = LazyLock::new(|| {
    let mut f = flotilla_sprig::funcs();
    crate::render::add_serialisation(&mut f);
    for name in REMOVED_FUNCTIONS {
        f.remove(name);
    }
    f
});

/// The resources one render may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// Execution steps (nodes walked plus loop iterations).
    pub max_steps: u64,
    /// Bytes of output.
    pub max_output_bytes: usize,
}

impl Default for Budget {
    /// 100,000 steps and 1 MiB: far above any values file, far below a stuck hub.
    fn default() -> Self {
        Budget {
            max_steps: 100_000,
            max_output_bytes: 1 << 20,
        }
    }
}

/// Why a `valuesTemplate` did not parse or render; the message is the user's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesTemplateError {
    /// The template does not parse (`template: valuesTemplate:LINE: ...`).
    #[error("{0}")]
    Parse(String),
    /// Execution failed (`template: valuesTemplate:LINE:COL: executing ...`), including a
    /// missing key, a removed function or an exceeded budget.
    #[error("{0}")]
    Execute(String),
    /// The output is not a YAML map.
    #[error("{TEMPLATE_NAME}: the rendered values are not a YAML map: {0}")]
    NotValues(String),
}

/// A cluster as the template sees it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ClusterContext {
    /// The ManagedCluster's name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// Its annotations.
    pub annotations: BTreeMap<String, String>,
    /// The Cluster API `Cluster` it was made from, as JSON (stripped on use).
    pub cluster_api: Option<serde_json::Value>,
}

impl ClusterContext {
    /// The template's root: `.Cluster`, `.ClusterName`, `.ClusterLabels`,
    /// `.ClusterAnnotations`.
    pub fn to_json(&self) -> serde_json::Value {
        let cluster = match &self.cluster_api {
            Some(obj) => strip(obj.clone()),
            None => json!({
                "apiVersion": "fleet.flotilla.dev/v1",
                "kind": "ManagedCluster",
                "metadata": {
                    "name": self.name,
                    "labels": self.labels,
                    "annotations": self.annotations,
                },
            }),
        };
        json!({
            "Cluster": cluster,
            "ClusterName": self.name,
            "ClusterLabels": self.labels,
            "ClusterAnnotations": self.annotations,
        })
    }
}

/// A Cluster API object without what changes with its status.
fn strip(mut obj: serde_json::Value) -> serde_json::Value {
    if let Some(m) = obj.as_object_mut() {
        m.remove("status");
        if let Some(meta) = m
            .get_mut("metadata")
            .and_then(serde_json::Value::as_object_mut)
        {
            for key in ["managedFields", "resourceVersion", "generation"] {
                meta.remove(key);
            }
        }
    }
    obj
}

/// A template of the cluster context, parsed once, named in its messages.
#[derive(Debug, Clone)]
struct Compiled {
    name: String,
    set: TemplateSet,
}

impl Compiled {
    fn parse(name: &str, text: &str) -> Result<Compiled, ValuesTemplateError> {
        let mut set = TemplateSet::new(name);
        stacker::grow(EXEC_STACK_BYTES, || set.parse(name, text, &FUNCS))
            .map_err(|e| ValuesTemplateError::Parse(e.to_string()))?;
        Ok(Compiled {
            name: name.to_owned(),
            set,
        })
    }

    fn execute(
        &self,
        cluster: &ClusterContext,
        budget: Budget,
    ) -> Result<String, ValuesTemplateError> {
        let opts = ExecOptions {
            missing_key: MissingKey::Error,
            max_depth: MAX_DEPTH,
            max_stack_bytes: EXEC_STACK_BUDGET,
            max_output_bytes: budget.max_output_bytes,
            max_steps: Some(budget.max_steps),
        };
        let data = Value::from_json(&cluster.to_json());
        stacker::grow(EXEC_STACK_BYTES, || {
            self.set.execute(&self.name, &data, &FUNCS, &opts)
        })
        .map_err(|e| ValuesTemplateError::Execute(e.to_string()))
    }
}

/// A parsed `valuesTemplate`.
#[derive(Debug, Clone)]
pub struct ValuesTemplate {
    compiled: Compiled,
}

impl ValuesTemplate {
    /// Parses the template text.
    pub fn parse(text: &str) -> Result<ValuesTemplate, ValuesTemplateError> {
        Compiled::parse(TEMPLATE_NAME, text).map(|compiled| ValuesTemplate { compiled })
    }

    /// Renders the values of one cluster: the template's output read as a YAML map (Helm's
    /// reading of a values file); empty output is no values.
    pub fn render(
        &self,
        cluster: &ClusterContext,
        budget: Budget,
    ) -> Result<Values, ValuesTemplateError> {
        let out = self.compiled.execute(cluster, budget)?;
        load_values(&out).map_err(|e| ValuesTemplateError::NotValues(e.to_string()))
    }
}

/// A one-line template of the same context and rules, whose output is a string: the
/// name of a `valuesFrom` entry of a set's template (`values-{{ .ClusterName }}`), so
/// each cluster can read its own ConfigMap or Secret.
#[derive(Debug, Clone)]
pub struct TextTemplate {
    compiled: Compiled,
}

impl TextTemplate {
    /// Parses `text`; `field` names it in messages (`template: FIELD:LINE:COL: ...`).
    pub fn parse(field: &str, text: &str) -> Result<TextTemplate, ValuesTemplateError> {
        Compiled::parse(field, text).map(|compiled| TextTemplate { compiled })
    }

    /// Whether `text` holds template actions at all (a plain name needs no parse).
    pub fn is_template(text: &str) -> bool {
        text.contains("{{")
    }

    /// The output for one cluster, surrounding whitespace trimmed.
    pub fn render(
        &self,
        cluster: &ClusterContext,
        budget: Budget,
    ) -> Result<String, ValuesTemplateError> {
        self.compiled
            .execute(cluster, budget)
            .map(|s| s.trim().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn edge() -> ClusterContext {
        ClusterContext {
            name: "edge-1".into(),
            labels: [("region".to_owned(), "eu".to_owned())].into(),
            annotations: [("owner".to_owned(), "team-a".to_owned())].into(),
            cluster_api: None,
        }
    }

    fn render(text: &str) -> Result<Values, ValuesTemplateError> {
        ValuesTemplate::parse(text)?.render(&edge(), Budget::default())
    }

    #[test]
    fn the_context_names_the_cluster_its_labels_and_annotations() {
        let v = render(
            "name: {{ .ClusterName }}-nginx\n\
             region: {{ .ClusterLabels.region | upper }}\n\
             owner: {{ .ClusterAnnotations.owner }}\n\
             meta: {{ .Cluster.metadata.name }}\n\
             labels:\n{{ toYaml .ClusterLabels | indent 2 }}\n\
             zone: {{ get .ClusterLabels \"zone\" | default \"none\" }}\n",
        )
        .unwrap();
        assert_eq!(
            serde_json::Value::Object(v),
            json!({"name": "edge-1-nginx", "region": "EU", "owner": "team-a",
                   "meta": "edge-1", "labels": {"region": "eu"}, "zone": "none"})
        );
        assert!(render("").unwrap().is_empty());
    }

    #[test]
    fn a_text_template_renders_a_name_per_cluster_and_names_its_field_in_errors() {
        let t = TextTemplate::parse(
            "spec.template.valuesFrom[0].name",
            "values-{{ .ClusterName }} ",
        )
        .unwrap();
        assert_eq!(
            t.render(&edge(), Budget::default()).unwrap(),
            "values-edge-1"
        );
        let err = TextTemplate::parse(
            "spec.template.valuesFrom[0].name",
            "v-{{ .ClusterLabels.zone }}",
        )
        .unwrap()
        .render(&edge(), Budget::default())
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("template: spec.template.valuesFrom[0].name:1:"),
            "{err}"
        );
        assert!(err.contains("zone"), "{err}");
        assert!(TextTemplate::parse("f", "{{ env \"HOME\" }}").is_err());
        assert!(TextTemplate::is_template("a-{{ .ClusterName }}"));
        assert!(!TextTemplate::is_template("plain"));
    }

    #[test]
    fn a_cluster_api_cluster_is_seen_without_its_status() {
        let mut ctx = edge();
        ctx.cluster_api = Some(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": "capi-1", "resourceVersion": "77", "generation": 3,
                         "managedFields": [{}]},
            "spec": {"clusterNetwork": {"pods": {"cidrBlocks": ["10.1.0.0/16"]}}},
            "status": {"phase": "Provisioned"},
        }));
        let t = ValuesTemplate::parse(
            "cidr: {{ index .Cluster.spec.clusterNetwork.pods.cidrBlocks 0 }}\nname: {{ .ClusterName }}\n",
        )
        .unwrap();
        let v = t.render(&ctx, Budget::default()).unwrap();
        assert_eq!(v["cidr"], "10.1.0.0/16");
        assert_eq!(v["name"], "edge-1");
        let err = ValuesTemplate::parse("{{ .Cluster.status.phase }}")
            .unwrap()
            .render(&ctx, Budget::default())
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("map has no entry for key \"status\""),
            "{err}"
        );
        let root = ctx.to_json();
        assert!(root["Cluster"]["metadata"].get("resourceVersion").is_none());
        assert!(root["Cluster"]["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn a_missing_key_is_an_error_naming_line_and_column() {
        let err = render("a: 1\nzone: {{ .ClusterLabels.zone }}\n").unwrap_err();
        assert_eq!(
            err.to_string(),
            "template: valuesTemplate:2:23: executing \"valuesTemplate\" at <.ClusterLabels.zone>: map has no entry for key \"zone\""
        );
        let err = render("a: {{ .ClusterLabels.region ").unwrap_err();
        assert!(matches!(err, ValuesTemplateError::Parse(_)));
        assert!(
            err.to_string().starts_with("template: valuesTemplate:1:"),
            "{err}"
        );
    }

    #[test]
    fn environment_network_file_and_clock_functions_are_not_there() {
        for call in [
            "env \"HOME\"",
            "expandenv \"$HOME\"",
            "getHostByName \"example.com\"",
            "lookup \"v1\" \"Secret\" \"ns\" \"name\"",
            "include \"x\" .",
            "tpl \"x\" .",
            "now",
            "randAlphaNum 8",
            "uuidv4",
            "genCA \"x\" 3",
            "derivePassword 1 \"long\" \"p\" \"u\" \"s\"",
        ] {
            let err = render(&format!("a: {{{{ {call} }}}}")).unwrap_err();
            assert!(
                matches!(&err, ValuesTemplateError::Parse(m) if m.contains("not defined")),
                "{call}: {err}"
            );
        }
        let err = render("a: {{ .Files.Get \"x\" }}").unwrap_err();
        assert!(
            err.to_string()
                .contains("map has no entry for key \"Files\""),
            "{err}"
        );
    }

    #[test]
    fn an_endless_range_stops_at_the_step_budget() {
        let err = render("{{ range $i := until 10000000 }}{{ end }}").unwrap_err();
        assert!(
            err.to_string()
                .contains("exceeded maximum number of execution steps (100000)"),
            "{err}"
        );
        let err = render("{{ define \"r\" }}{{ template \"r\" . }}{{ end }}{{ template \"r\" . }}")
            .unwrap_err();
        assert!(err.to_string().contains("exceeded maximum"), "{err}");
    }

    #[test]
    fn huge_output_stops_at_the_output_budget() {
        let err = render("a: {{ repeat 2000000 \"x\" }}").unwrap_err();
        assert!(
            err.to_string()
                .contains("output exceeds the limit of 1048576 bytes"),
            "{err}"
        );
        let small = Budget {
            max_steps: 1000,
            max_output_bytes: 10,
        };
        let err = ValuesTemplate::parse("{{ range until 100 }}xx{{ end }}")
            .unwrap()
            .render(&edge(), small)
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("output exceeds the limit of 10 bytes"),
            "{err}"
        );
    }

    #[test]
    fn output_that_is_not_a_yaml_map_is_refused() {
        for text in ["- a\n- b\n", "a: [1\n", "just text"] {
            let err = render(text).unwrap_err();
            assert!(
                matches!(err, ValuesTemplateError::NotValues(_)),
                "{text}: {err}"
            );
            assert!(
                err.to_string()
                    .starts_with("valuesTemplate: the rendered values"),
                "{err}"
            );
        }
    }
}
