//! The CustomResourceDefinitions of the hub, as generated from the types and committed
//! under `deploy/crds/` (`cargo xtask gen-crds`; `cargo xtask gen-check` and this crate's
//! tests fail when the committed files are stale).
//!
//! [`all`] is the source of truth. Each kind's schema is generated here ([`crd_of`]) rather
//! than taken from kube-derive's `CustomResourceExt::crd()`, whose generator marks every
//! `Option` `nullable: true` and lets an optional enum's type documentation replace the
//! field's. Without `nullable` the schema matches Flux's field for field, and the API server
//! treats an explicit `null` as Flux's CRDs make it do: it refuses it (`spec.chart: must be of
//! type object`) rather than storing it. The transforms that make a schema structural (enums
//! hoisted out of `oneOf`) are kube-core's.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::CustomResourceExt;
use kube::core::schema::StructuralSchemaRewriter;
use schemars::generate::SchemaSettings;
use schemars::transform::{ReplaceBoolSchemas, ReplaceConstValue, Transform, transform_subschemas};
use schemars::{JsonSchema, Schema};
use serde_json::Value;

use crate::{
    HelmChart, HelmRelease, HelmReleasePreview, HelmReleaseSet, HelmRepository, ManagedCluster,
    ManagedClusterBinding, OCIRepository,
};

/// Where the generated CRDs are committed, relative to the workspace root.
pub const CRD_DIR: &str = "deploy/crds";

/// The header of every generated file.
pub const HEADER: &str =
    "# Generated from the flotilla-api types by `cargo xtask gen-crds`. Do not edit.\n";

/// Why a CRD could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum CrdError {
    /// The CRD does not serialize to JSON.
    #[error("CRD {crd}: encoding JSON")]
    Json {
        /// Name of the CRD.
        crd: String,
        /// The encoder's error.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON does not convert to YAML.
    #[error("CRD {crd}: encoding YAML")]
    Yaml {
        /// Name of the CRD.
        crd: String,
        /// The YAML error.
        #[source]
        source: flotilla_yaml::Error,
    },
}

/// Every CRD of the hub, in a stable order.
pub fn all() -> Vec<CustomResourceDefinition> {
    vec![
        crd_of::<HelmRelease>(),
        crd_of::<HelmRepository>(),
        crd_of::<HelmChart>(),
        crd_of::<OCIRepository>(),
        crd_of::<ManagedCluster>(),
        crd_of::<HelmReleaseSet>(),
        crd_of::<ManagedClusterBinding>(),
        crd_of::<HelmReleasePreview>(),
    ]
}

/// The CRD of `K`: names, scope, printer columns and subresources from its `#[kube]`
/// attributes, the schema from [`schema_of`].
pub fn crd_of<K: CustomResourceExt + JsonSchema>() -> CustomResourceDefinition {
    let mut crd = K::crd();
    let schema = schema_of::<K>();
    for version in &mut crd.spec.versions {
        version.schema = Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema.clone()),
        });
    }
    crd
}

/// The structural OpenAPI v3 schema of a custom resource type: every subschema inlined,
/// optional fields neither nullable nor wrapped in `anyOf`, enums as `enum` lists.
pub fn schema_of<K: JsonSchema>() -> JSONSchemaProps {
    let mut settings = SchemaSettings::openapi3();
    settings.inline_subschemas = true;
    settings.meta_schema = None;
    let mut bool_schemas = ReplaceBoolSchemas::default();
    bool_schemas.skip_additional_properties = true;
    settings.transforms = vec![
        Box::new(bool_schemas),
        Box::new(ReplaceConstValue::default()),
        Box::new(FoldOptional),
        Box::new(StructuralSchemaRewriter),
    ];
    let schema = settings.into_generator().into_root_schema_for::<K>();
    serde_json::from_value(schema.to_value())
        .expect("an inlined OpenAPI v3 schema is a JSONSchemaProps")
}

/// Turns schemars' `Option<T>` (`type: [T, "null"]`, `enum: [..., null]`, or
/// `anyOf: [T, {type: null}]`) back into `T`, keeping the field's own keys (description,
/// default, validations) over `T`'s.
#[derive(Debug, Clone, Copy)]
struct FoldOptional;

impl Transform for FoldOptional {
    fn transform(&mut self, schema: &mut Schema) {
        transform_subschemas(self, schema);
        let Some(obj) = schema.as_object_mut() else {
            return;
        };
        if let Some(Value::Array(types)) = obj.get_mut("type") {
            types.retain(|t| t != "null");
            if types.len() == 1 {
                let only = types.remove(0);
                obj.insert("type".into(), only);
            }
        }
        if let Some(Value::Array(values)) = obj.get_mut("enum") {
            values.retain(|v| !v.is_null());
        }
        let folds = match obj.get("anyOf") {
            Some(Value::Array(branches)) => {
                branches.len() == 2 && branches[1] == serde_json::json!({"type": "null"})
            }
            _ => false,
        };
        if folds
            && let Some(Value::Array(mut branches)) = obj.remove("anyOf")
            && let Value::Object(inner) = branches.swap_remove(0)
        {
            for (key, value) in inner {
                obj.entry(key).or_insert(value);
            }
        }
    }
}

/// `<group>_<plural>.yaml`, the name controller-gen gives the file of a CRD.
pub fn file_name(crd: &CustomResourceDefinition) -> String {
    format!("{}_{}.yaml", crd.spec.group, crd.spec.names.plural)
}

/// The CRD as YAML: [`HEADER`], `---`, then the object with its keys sorted as
/// `sigs.k8s.io/yaml` (and so controller-gen and kubectl) write them.
pub fn to_yaml(crd: &CustomResourceDefinition) -> Result<String, CrdError> {
    let name = crd.metadata.name.clone().unwrap_or_default();
    let json = serde_json::to_string(crd).map_err(|source| CrdError::Json {
        crd: name.clone(),
        source,
    })?;
    let yaml = flotilla_yaml::from_str(&json)
        .and_then(flotilla_yaml::sigs::marshal_owned)
        .map_err(|source| CrdError::Yaml { crd: name, source })?;
    Ok(format!("{HEADER}---\n{yaml}"))
}

/// Every CRD as `(file name, YAML)`, in [`all`]'s order.
pub fn render_all() -> Result<Vec<(String, String)>, CrdError> {
    all()
        .iter()
        .map(|crd| Ok((file_name(crd), to_yaml(crd)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `openAPIV3Schema` of the CRD of `plural` as JSON.
    fn schema(plural: &str) -> Value {
        let crd = all()
            .into_iter()
            .find(|c| c.spec.names.plural == plural)
            .unwrap_or_else(|| panic!("no CRD for {plural}"));
        assert_eq!(crd.spec.versions.len(), 1);
        serde_json::to_value(
            crd.spec.versions[0]
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("every CRD has a schema"),
        )
        .unwrap()
    }

    /// The subschema at a dotted path (`spec.valuesFrom[].valuesKey`).
    fn at<'a>(schema: &'a Value, path: &str) -> &'a Value {
        let mut node = schema;
        for part in path.split('.') {
            let (name, items) = match part.strip_suffix("[]") {
                Some(name) => (name, true),
                None => (part, false),
            };
            node = &node["properties"][name];
            assert!(!node.is_null(), "{path}: no property {name}");
            if items {
                node = &node["items"];
            }
        }
        node
    }

    /// Every node of a schema with its path, depth first.
    fn nodes<'a>(schema: &'a Value, path: String, out: &mut Vec<(String, &'a Value)>) {
        out.push((path.clone(), schema));
        if let Some(props) = schema["properties"].as_object() {
            for (name, child) in props {
                nodes(child, format!("{path}.{name}"), out);
            }
        }
        if schema["items"].is_object() {
            nodes(&schema["items"], format!("{path}[]"), out);
        }
        if schema["additionalProperties"].is_object() {
            nodes(&schema["additionalProperties"], format!("{path}{{}}"), out);
        }
    }

    fn all_nodes(schema: &Value) -> Vec<(String, &Value)> {
        let mut out = Vec::new();
        nodes(schema, String::new(), &mut out);
        out
    }

    const PLURALS: [&str; 6] = [
        "helmreleases",
        "helmrepositories",
        "helmcharts",
        "ocirepositories",
        "managedclusters",
        "managedclusterbindings",
    ];

    #[test]
    fn every_schema_is_structural() {
        for plural in PLURALS {
            let schema = schema(plural);
            for (path, node) in all_nodes(&schema) {
                let free_form = node["x-kubernetes-preserve-unknown-fields"] == true;
                assert!(
                    node["type"].is_string() || free_form,
                    "{plural}{path}: no type: {node}"
                );
                for banned in [
                    "anyOf", "oneOf", "allOf", "not", "$ref", "nullable", "const",
                ] {
                    assert!(
                        node.get(banned).is_none(),
                        "{plural}{path}: has {banned}: {node}"
                    );
                }
                assert!(
                    node.get("properties").is_none() || node.get("additionalProperties").is_none(),
                    "{plural}{path}: both properties and additionalProperties"
                );
                if node["type"] == "array" {
                    assert!(
                        node["items"].is_object(),
                        "{plural}{path}: array without items"
                    );
                }
                if let Some(required) = node["required"].as_array() {
                    for name in required {
                        let name = name.as_str().unwrap();
                        assert!(
                            node["properties"].get(name).is_some(),
                            "{plural}{path}: requires {name}, which it does not define"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn only_helm_release_values_preserve_unknown_fields() {
        let mut free_form = Vec::new();
        for plural in PLURALS {
            for (path, node) in all_nodes(&schema(plural)) {
                if node.get("x-kubernetes-preserve-unknown-fields").is_some() {
                    free_form.push(format!("{plural}{path}"));
                }
            }
        }
        assert_eq!(free_form, ["helmreleases.spec.values"]);
        let hr = schema("helmreleases");
        let values = at(&hr, "spec.values");
        assert_eq!(values["type"], "object");
        assert_eq!(values["x-kubernetes-preserve-unknown-fields"], true);
        // Flux's kustomize patches are text (YAML or JSON), not free-form objects.
        let patch = at(&hr, "spec.postRenderers[].kustomize.patches[].patch");
        assert_eq!(patch["type"], "string");
    }

    #[test]
    fn the_helm_release_spec_carries_fluxs_cel_rules() {
        let schema = schema("helmreleases");
        let rules = |path: &str| -> Vec<(String, String)> {
            at(&schema, path)["x-kubernetes-validations"]
                .as_array()
                .unwrap_or_else(|| panic!("{path}: no CEL rules"))
                .iter()
                .map(|r| {
                    (
                        r["rule"].as_str().unwrap().to_owned(),
                        r["message"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        let spec = rules("spec");
        assert!(spec.contains(&(
            "(has(self.chart) && !has(self.chartRef)) || (!has(self.chart) && has(self.chartRef))"
                .into(),
            "either chart or chartRef must be set".into()
        )));
        assert!(spec.contains(&(
            "!has(self.clusterRef) || !has(self.kubeConfig)".into(),
            "clusterRef and kubeConfig are mutually exclusive".into()
        )));
        assert_eq!(rules("spec.kubeConfig").len(), 2);
        assert_eq!(
            rules("spec.install.strategy"),
            [(
                "!has(self.retryInterval) || self.name != 'RemediateOnFailure'".into(),
                ".retryInterval cannot be set when .name is 'RemediateOnFailure'".into()
            )]
        );
        assert_eq!(
            rules("spec.upgrade.strategy"),
            [(
                "!has(self.retryInterval) || self.name == 'RetryOnFailure'".into(),
                ".retryInterval can only be set when .name is 'RetryOnFailure'".into()
            )]
        );
    }

    #[test]
    fn the_helm_release_schema_validates_fields_as_fluxs_crd_does() {
        let schema = schema("helmreleases");
        let duration = serde_json::json!(flotilla_core::duration::DURATION_PATTERN);
        for path in [
            "spec.interval",
            "spec.timeout",
            "spec.chart.spec.interval",
            "spec.install.timeout",
            "spec.install.strategy.retryInterval",
            "spec.upgrade.timeout",
            "spec.upgrade.strategy.retryInterval",
            "spec.test.timeout",
            "spec.rollback.timeout",
            "spec.uninstall.timeout",
        ] {
            assert_eq!(at(&schema, path)["pattern"], duration, "{path}");
            assert_eq!(at(&schema, path)["type"], "string", "{path}");
        }
        for (path, min, max) in [
            ("spec.releaseName", Some(1), 53),
            ("spec.targetNamespace", Some(1), 63),
            ("spec.storageNamespace", Some(1), 63),
            ("spec.serviceAccountName", Some(1), 253),
            ("spec.chart.spec.chart", Some(1), 2048),
            ("spec.chart.spec.sourceRef.name", Some(1), 253),
            ("spec.chart.spec.sourceRef.namespace", Some(1), 63),
            ("spec.chartRef.name", Some(1), 253),
            ("spec.chartRef.namespace", Some(1), 63),
            ("spec.valuesFrom[].name", Some(1), 253),
            ("spec.valuesFrom[].valuesKey", None, 253),
            ("spec.valuesFrom[].targetPath", None, 250),
            ("spec.test.filters[].name", Some(1), 253),
            ("status.storageNamespace", Some(1), 63),
        ] {
            let node = at(&schema, path);
            assert_eq!(node["maxLength"], max, "{path}");
            assert_eq!(node["minLength"].as_i64(), min, "{path}");
        }
        for (path, pattern) in [
            ("spec.valuesFrom[].valuesKey", r"^[\-._a-zA-Z0-9]+$"),
            (
                "spec.valuesFrom[].targetPath",
                r"^([a-zA-Z0-9_\-.\\\/]|\[[0-9]{1,5}\])+$",
            ),
        ] {
            assert_eq!(at(&schema, path)["pattern"], pattern, "{path}");
        }
        for (path, values) in [
            (
                "spec.chart.spec.sourceRef.kind",
                &["HelmRepository", "GitRepository", "Bucket"][..],
            ),
            (
                "spec.chartRef.kind",
                &["OCIRepository", "HelmChart", "ExternalArtifact"],
            ),
            (
                "spec.chart.spec.reconcileStrategy",
                &["ChartVersion", "Revision"],
            ),
            ("spec.chart.spec.verify.provider", &["cosign", "notation"]),
            ("spec.valuesFrom[].kind", &["ConfigMap", "Secret"]),
            ("spec.driftDetection.mode", &["enabled", "warn", "disabled"]),
            (
                "spec.postRenderStrategy",
                &["nohooks", "combined", "separate"],
            ),
            ("spec.waitStrategy.name", &["poller", "legacy"]),
            ("spec.install.crds", &["Skip", "Create", "CreateReplace"]),
            ("spec.upgrade.crds", &["Skip", "Create", "CreateReplace"]),
            (
                "spec.install.strategy.name",
                &["RemediateOnFailure", "RetryOnFailure"],
            ),
            (
                "spec.upgrade.remediation.strategy",
                &["rollback", "uninstall"],
            ),
            (
                "spec.upgrade.serverSideApply",
                &["enabled", "disabled", "auto"],
            ),
            (
                "spec.rollback.serverSideApply",
                &["enabled", "disabled", "auto"],
            ),
            (
                "spec.upgrade.chartNameChangeStrategy",
                &["InPlaceUpdate", "Reinstall"],
            ),
            (
                "spec.uninstall.deletionPropagation",
                &["background", "foreground", "orphan"],
            ),
            ("status.lastAttemptedReleaseAction", &["install", "upgrade"]),
        ] {
            assert_eq!(
                at(&schema, path)["enum"],
                serde_json::json!(values),
                "{path}"
            );
        }
        for (path, default) in [
            ("spec.chart.spec.version", serde_json::json!("*")),
            (
                "spec.chart.spec.reconcileStrategy",
                serde_json::json!("ChartVersion"),
            ),
            (
                "spec.chart.spec.verify.provider",
                serde_json::json!("cosign"),
            ),
            (
                "spec.uninstall.deletionPropagation",
                serde_json::json!("background"),
            ),
            ("status", serde_json::json!({"observedGeneration": -1})),
        ] {
            assert_eq!(at(&schema, path)["default"], default, "{path}");
        }
        assert_eq!(
            at(&schema, "spec")["required"],
            serde_json::json!(["interval"])
        );
        // Field documentation, not the documentation of the field's type, describes a field.
        assert_eq!(
            at(&schema, "spec.chart.spec.reconcileStrategy")["description"],
            "What makes a new artifact; defaults to `ChartVersion`."
        );
    }

    #[test]
    fn source_schemas_validate_urls_durations_and_digests() {
        let repo = schema("helmrepositories");
        assert_eq!(at(&repo, "spec.url")["pattern"], "^(http|https|oci)://.*$");
        assert_eq!(
            at(&repo, "spec.type")["enum"],
            serde_json::json!(["default", "oci"])
        );
        assert_eq!(at(&repo, "spec.timeout")["pattern"], TIMEOUT_PATTERN);
        assert_eq!(at(&repo, "spec")["required"], serde_json::json!(["url"]));
        assert_eq!(
            at(&repo, "status.artifact")["required"],
            serde_json::json!(["digest", "lastUpdateTime", "path", "revision", "url"])
        );
        let chart = schema("helmcharts");
        assert_eq!(at(&chart, "spec.version")["default"], "*");
        assert_eq!(
            at(&chart, "spec")["required"],
            serde_json::json!(["chart", "interval", "sourceRef"])
        );
        assert_eq!(
            at(&chart, "spec")["x-kubernetes-validations"][0]["rule"],
            "!has(self.verify) || self.sourceRef.kind == 'HelmRepository'"
        );
        let oci = schema("ocirepositories");
        assert_eq!(at(&oci, "spec.url")["pattern"], "^oci://.*$");
        assert_eq!(at(&oci, "spec.timeout")["default"], "60s");
        assert_eq!(
            at(&oci, "spec.layerSelector.operation")["enum"],
            serde_json::json!(["extract", "copy"])
        );
        assert!(at(&oci, "spec.ref.tag").is_object());
    }

    const TIMEOUT_PATTERN: &str = r"^([0-9]+(\.[0-9]+)?(ms|s|m))+$";

    #[test]
    fn the_crds_name_scope_and_print_as_flux_and_kubectl_expect() {
        let crds = all();
        let find = |plural: &str| {
            crds.iter()
                .find(|c| c.spec.names.plural == plural)
                .expect("generated")
        };
        let hr = find("helmreleases");
        assert_eq!(
            hr.metadata.name.as_deref(),
            Some("helmreleases.helm.flotilla.dev")
        );
        assert_eq!(hr.spec.scope, "Namespaced");
        assert_eq!(hr.spec.names.short_names, Some(vec!["hr".to_owned()]));
        assert_eq!(hr.spec.names.categories, Some(vec!["flotilla".to_owned()]));
        let version = &hr.spec.versions[0];
        assert!(version.served && version.storage);
        assert!(
            version
                .subresources
                .as_ref()
                .is_some_and(|s| s.status.is_some())
        );
        let columns: Vec<(&str, &str)> = version
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| (c.name.as_str(), c.json_path.as_str()))
            .collect();
        assert_eq!(
            columns,
            [
                ("Age", ".metadata.creationTimestamp"),
                ("Ready", r#".status.conditions[?(@.type=="Ready")].status"#),
                (
                    "Status",
                    r#".status.conditions[?(@.type=="Ready")].message"#
                ),
            ]
        );
        let mc = find("managedclusters");
        assert_eq!(mc.spec.scope, "Cluster");
        assert_eq!(mc.spec.group, "fleet.flotilla.dev");
        let columns: Vec<&str> = mc.spec.versions[0]
            .additional_printer_columns
            .iter()
            .flatten()
            .map(|c| c.name.as_str())
            .collect();
        assert_eq!(columns, ["Accepted", "Available", "Kubernetes", "Age"]);
        for plural in ["helmrepositories", "helmcharts", "ocirepositories"] {
            assert_eq!(find(plural).spec.group, "source.flotilla.dev");
        }
    }

    #[test]
    fn the_yaml_reads_back_as_the_same_crd() {
        for crd in all() {
            let yaml = to_yaml(&crd).unwrap();
            assert!(yaml.starts_with(HEADER));
            let back: CustomResourceDefinition = serde_norway::from_str(&yaml).unwrap();
            assert_eq!(back, crd, "{}", file_name(&crd));
        }
    }

    #[test]
    fn committed_crds_match_the_types() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("..")
            .join(CRD_DIR);
        for (name, yaml) in render_all().unwrap() {
            let committed = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            assert!(
                committed == yaml,
                "{CRD_DIR}/{name} is stale; run `cargo xtask gen-crds` and commit"
            );
        }
    }
}
