//! What the executor needs from rendering, behind a small trait so it does not depend on
//! the render pipeline's internals: chart + values + release options in, manifest text,
//! hooks, notes and CRDs out.
//!
//! [`ChartRenderer`] renders with `flotilla_chart::render` (Helm's engine).
//! [`LiteralRenderer`] takes a chart's templates as they are and refuses any template that
//! uses template actions (`{{`): the tests' plain charts use it.
//! [`split_rendered`] does Helm's part after rendering: hooks are separated by their
//! `helm.sh/hook` annotation and the rest becomes the release manifest in install order.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

use std::sync::Arc;

use flotilla_chart::Chart;
use flotilla_chart::Values;
use flotilla_chart::release::{
    HOOK_ANNOTATION, HOOK_DELETE_ANNOTATION, HOOK_OUTPUT_LOG_ANNOTATION, HOOK_WEIGHT_ANNOTATION,
    Hook, HookDeletePolicy, HookEvent, HookOutputLogPolicy,
};
use flotilla_chart::render::{Capabilities, Lookup};
use kube::ResourceExt as _;

use crate::kube::manifest::{KindOrder, ManifestError, parse_document, split_documents};

/// The release a chart is rendered for (Helm's `.Release`), and what the cluster tells
/// the templates.
#[derive(Debug, Clone, Default)]
pub struct RenderOptions {
    /// `.Release.Name`.
    pub release_name: String,
    /// `.Release.Namespace`.
    pub namespace: String,
    /// `.Release.Revision`.
    pub revision: i64,
    /// `.Release.IsInstall`.
    pub is_install: bool,
    /// `.Release.IsUpgrade`.
    pub is_upgrade: bool,
    /// `.Capabilities` of the target cluster; `None`: the renderer's own (`helm
    /// template`'s defaults for [`ChartRenderer::default`]).
    pub capabilities: Option<Capabilities>,
    /// The cluster behind `lookup`; `None`: every lookup finds nothing (`helm template`).
    pub lookup: Option<Arc<dyn Lookup>>,
    /// Skip `values.schema.json` validation (`disableSchemaValidation`).
    pub skip_schema_validation: bool,
    /// The remote documents the chart's schemas `$ref`, fetched ([`crate::schema_refs`]).
    pub remote_schemas: flotilla_chart::schema::remote::RemoteSchemas,
    /// `spec.postRenderers`, run in order over the rendered templates.
    pub post_renderers: Vec<flotilla_chart::postrender::PostRenderer>,
    /// How hooks go through the post-renderers (`postRenderStrategy`).
    pub post_render_hooks: flotilla_chart::render::PostRenderHooks,
}

/// One file of the chart's `crds/` directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrdFile {
    /// Path in the chart (`crds/x.yaml`).
    pub name: String,
    /// Its text.
    pub text: String,
}

/// A rendered chart, split as Helm stores it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Rendered {
    /// The release manifest: non-hook documents in install order, each as
    /// `---\n# Source: <path>\n<document>\n`.
    pub manifest: String,
    /// Hooks, ordered by weight then name.
    pub hooks: Vec<Hook>,
    /// Rendered `NOTES.txt`.
    pub notes: String,
}

/// Why a chart could not be rendered; each names the chart and template.
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// Helm's engine refused the chart: its message as Helm words it, which names the
    /// template (`template: demo/templates/cm.yaml:3:12: executing ...`) or the schema.
    #[error("{0}")]
    Engine(String),
    /// The renderer cannot render this template.
    #[error("chart {chart}: template {file}: {reason}")]
    Template {
        /// Chart name.
        chart: String,
        /// Template path.
        file: String,
        /// What went wrong.
        reason: String,
    },
    /// A rendered document is not a Kubernetes object.
    #[error("chart {chart}: rendered manifest")]
    Manifest {
        /// Chart name.
        chart: String,
        /// The parse error (names the template).
        #[source]
        source: ManifestError,
    },
}

/// Renders a chart for a release.
pub trait Renderer: Send + Sync + std::fmt::Debug {
    /// Renders `chart` with the user-supplied `values` for the release `options`.
    fn render(
        &self,
        chart: &Chart,
        values: &Values,
        options: &RenderOptions,
    ) -> Result<Rendered, RenderError>;

    /// The `crds/` files an install or upgrade of `chart` with `values` applies before
    /// rendering: the chart's own, then those of every subchart the values enable, as
    /// Helm's `CRDObjects` after `ProcessDependencies`. By default the chart's own only.
    fn crds(&self, chart: &Chart, _values: &Values) -> Result<Vec<CrdFile>, RenderError> {
        Ok(chart
            .crd_files()
            .map(|f| CrdFile {
                name: f.name.clone(),
                text: String::from_utf8_lossy(&f.data).into_owned(),
            })
            .collect())
    }
}

/// Takes templates literally; refuses templates with actions (see the module docs).
#[derive(Debug, Clone, Copy, Default)]
pub struct LiteralRenderer;

impl Renderer for LiteralRenderer {
    fn render(
        &self,
        chart: &Chart,
        _values: &Values,
        _options: &RenderOptions,
    ) -> Result<Rendered, RenderError> {
        let chart_name = chart.name().to_owned();
        let mut files = Vec::new();
        let mut notes = String::new();
        for t in &chart.templates {
            let base = t.name.rsplit('/').next().unwrap_or(&t.name);
            let text = String::from_utf8_lossy(&t.data).into_owned();
            if base.starts_with('_') {
                continue;
            }
            if text.contains("{{") {
                return Err(RenderError::Template {
                    chart: chart_name,
                    file: format!("{}/{}", chart.name(), t.name),
                    reason: "uses template actions, which this agent cannot render yet".into(),
                });
            }
            if base == "NOTES.txt" {
                notes = text;
                continue;
            }
            files.push((format!("{}/{}", chart.name(), t.name), text));
        }
        let mut rendered = split_rendered(&chart_name, &files)?;
        rendered.notes = notes;
        Ok(rendered)
    }
}

/// Helm's `SortManifests` on rendered files (`(path, text)`): documents annotated
/// `helm.sh/hook` become hooks (unknown events dropped, weight parsed as an integer, 0 when
/// it is not one); the others form the manifest in install order.
pub fn split_rendered(chart: &str, files: &[(String, String)]) -> Result<Rendered, RenderError> {
    let mut docs: Vec<(String, String, String)> = Vec::new(); // (kind, path, text)
    let mut hooks = Vec::new();
    for (path, text) in files {
        for doc in split_documents(text) {
            let Some(obj) = parse_document(doc.text, Some(path), path).map_err(|source| {
                RenderError::Manifest {
                    chart: chart.to_owned(),
                    source,
                }
            })?
            else {
                continue;
            };
            let body = doc.text.trim_end().to_owned();
            let annotations = obj.object.annotations();
            let Some(events) = annotations.get(HOOK_ANNOTATION) else {
                docs.push((obj.gvk.kind.clone(), path.clone(), body));
                continue;
            };
            let events: Vec<HookEvent> = events
                .split(',')
                .map(|e| HookEvent::parse(e.trim()))
                .filter(|e| !matches!(e, HookEvent::Other(_)))
                .collect();
            let list = |key: &str| -> Vec<String> {
                annotations
                    .get(key)
                    .map(|v| {
                        v.split(',')
                            .map(|p| p.trim().to_owned())
                            .filter(|p| !p.is_empty())
                            .collect()
                    })
                    .unwrap_or_default()
            };
            hooks.push(Hook {
                name: obj.object.name_any(),
                kind: obj.gvk.kind.clone(),
                path: path.clone(),
                manifest: body,
                events,
                last_run: Default::default(),
                weight: annotations
                    .get(HOOK_WEIGHT_ANNOTATION)
                    .and_then(|w| w.trim().parse().ok())
                    .unwrap_or(0),
                delete_policies: list(HOOK_DELETE_ANNOTATION)
                    .iter()
                    .map(|p| HookDeletePolicy::parse(p))
                    .filter(|p| !matches!(p, HookDeletePolicy::Other(_)))
                    .collect(),
                output_log_policies: list(HOOK_OUTPUT_LOG_ANNOTATION)
                    .iter()
                    .map(|p| HookOutputLogPolicy::parse(p))
                    .filter(|p| !matches!(p, HookOutputLogPolicy::Other(_)))
                    .collect(),
            });
        }
    }
    KindOrder::Install.sort(&mut docs, |d| d.0.as_str());
    hooks.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.name.cmp(&b.name)));
    let mut manifest = String::new();
    for (_, path, text) in &docs {
        manifest.push_str(&format!("---\n# Source: {path}\n{text}\n"));
    }
    Ok(Rendered {
        manifest,
        hooks,
        notes: String::new(),
    })
}

/// Rewrites every object of a release manifest (documents `---\n# Source: <path>\n...`)
/// with `f`, keeping each document's leading comments. Documents holding no object are
/// kept as they are.
pub fn map_manifest(manifest: &str, f: impl Fn(&mut serde_json::Value)) -> Result<String, String> {
    let mut out = String::new();
    for doc in split_documents(manifest) {
        out.push_str("---\n");
        out.push_str(&map_document(doc.text, &f)?);
        out.push('\n');
    }
    Ok(out)
}

/// Rewrites the object of one YAML document with `f` (keys sorted as Go's YAML writers
/// sort them), keeping its leading comment lines; the result has no final newline.
pub fn map_document(text: &str, f: impl Fn(&mut serde_json::Value)) -> Result<String, String> {
    let yaml = flotilla_yaml::from_str(text).map_err(|e| e.to_string())?;
    let mut json = crate::kube::manifest::yaml_to_json(yaml)?;
    if json.is_null() {
        return Ok(text.trim_end().to_owned());
    }
    f(&mut json);
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('#') || t.is_empty() {
            if t.starts_with('#') {
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        break;
    }
    let body = flotilla_yaml::to_string(&json_to_yaml(json)).map_err(|e| e.to_string())?;
    out.push_str(body.trim_end());
    Ok(out)
}

fn json_to_yaml(v: serde_json::Value) -> flotilla_yaml::Value {
    use flotilla_yaml::Value as Y;
    use serde_json::Value as J;
    match v {
        J::Null => Y::Null,
        J::Bool(b) => Y::Bool(b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Y::Int(i)
            } else if let Some(u) = n.as_u64() {
                Y::Uint(u)
            } else {
                Y::Float(n.as_f64().unwrap_or_default())
            }
        }
        J::String(s) => Y::String(s),
        J::Array(a) => Y::Seq(a.into_iter().map(json_to_yaml).collect()),
        J::Object(m) => {
            let mut map = flotilla_yaml::Mapping::new();
            for (k, v) in m {
                map.insert(Y::String(k), json_to_yaml(v));
            }
            Y::Map(map)
        }
    }
}

/// Renders with `flotilla_chart::render` (Helm's engine): dependencies processed with the
/// user values, values coalesced with the chart's and validated against its schema,
/// templates rendered, hooks and manifests sorted. `.Capabilities` and `lookup` come from
/// the [`RenderOptions`] (the executor fills them from the cluster); without them,
/// `capabilities` below (`helm template`'s defaults) and a `lookup` that finds nothing.
#[derive(Debug, Clone)]
pub struct ChartRenderer {
    /// `.Capabilities`.
    pub capabilities: flotilla_chart::render::Capabilities,
}

impl Default for ChartRenderer {
    fn default() -> Self {
        ChartRenderer {
            capabilities: flotilla_chart::render::Capabilities::helm_template_default(),
        }
    }
}

impl Renderer for ChartRenderer {
    fn render(
        &self,
        chart: &Chart,
        values: &Values,
        options: &RenderOptions,
    ) -> Result<Rendered, RenderError> {
        use flotilla_chart::render::{ReleaseOptions, RenderOptions as ChartOptions};
        let mut chart = chart.clone();
        let mut warnings = Vec::new();
        flotilla_chart::dependencies::process_dependencies(&mut chart, values, &mut warnings)
            .map_err(|e| {
                RenderError::Engine(format!("chart dependencies processing failed: {e}"))
            })?;
        let opts = ChartOptions {
            release: ReleaseOptions {
                name: options.release_name.clone(),
                namespace: options.namespace.clone(),
                revision: options.revision,
                is_install: options.is_install,
                is_upgrade: options.is_upgrade,
            },
            capabilities: options
                .capabilities
                .clone()
                .unwrap_or_else(|| self.capabilities.clone()),
            include_crds: false,
            skip_schema_validation: options.skip_schema_validation,
            // The message becomes a condition, an Event and a log line; values may hold
            // Secret data (valuesFrom Secrets).
            redact_schema_values: true,
            lookup: options.lookup.clone(),
            remote_schemas: options.remote_schemas.clone(),
        };
        let mut log = Vec::new();
        let rendered = flotilla_chart::render::render_release_post_rendered(
            &chart,
            values,
            &opts,
            &options.post_renderers,
            options.post_render_hooks,
            &mut log,
        )
        .map_err(|e| RenderError::Engine(e.to_string()))?;
        let mut hooks = rendered.hooks;
        hooks.sort_by(|a, b| a.weight.cmp(&b.weight).then_with(|| a.name.cmp(&b.name)));
        Ok(Rendered {
            manifest: rendered.manifest,
            hooks,
            notes: rendered.notes,
        })
    }

    fn crds(&self, chart: &Chart, values: &Values) -> Result<Vec<CrdFile>, RenderError> {
        let mut chart = chart.clone();
        let mut warnings = Vec::new();
        flotilla_chart::dependencies::process_dependencies(&mut chart, values, &mut warnings)
            .map_err(|e| RenderError::Template {
                chart: chart.name().to_owned(),
                file: "Chart.yaml".to_owned(),
                reason: format!("chart dependencies processing failed: {e}"),
            })?;
        Ok(flotilla_chart::render::template::crd_objects(&chart)
            .into_iter()
            .map(|(name, f)| CrdFile {
                name,
                text: String::from_utf8_lossy(&f.data).into_owned(),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hooks_are_split_from_the_manifest_and_ordered_by_weight_then_name() {
        let files = vec![(
            "demo/templates/all.yaml".to_owned(),
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: b-test\n  annotations:\n    helm.sh/hook: test,bogus\n---\napiVersion: batch/v1\nkind: Job\nmetadata:\n  name: a-migrate\n  annotations:\n    helm.sh/hook: pre-install,pre-upgrade\n    helm.sh/hook-weight: \"5\"\n    helm.sh/hook-delete-policy: hook-succeeded\n"
                .to_owned(),
        )];
        let r = split_rendered("demo", &files).unwrap();
        assert_eq!(
            r.manifest,
            "---\n# Source: demo/templates/all.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cfg\n---\n# Source: demo/templates/all.yaml\napiVersion: v1\nkind: Service\nmetadata:\n  name: web\n"
        );
        let names: Vec<&str> = r.hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["b-test", "a-migrate"]);
        assert_eq!(r.hooks[0].events, [HookEvent::Test]);
        assert_eq!(r.hooks[1].weight, 5);
        assert_eq!(
            r.hooks[1].delete_policies,
            [HookDeletePolicy::HookSucceeded]
        );
    }

    #[test]
    fn a_template_with_actions_is_refused_naming_the_file() {
        let mut metadata = flotilla_chart::Metadata::default();
        metadata.name = "demo".into();
        metadata.version = "0.1.0".into();
        let mut chart = Chart::new(metadata);
        chart.templates.push(flotilla_chart::File {
            name: "templates/cm.yaml".into(),
            data: b"kind: ConfigMap\nname: {{ .Release.Name }}\n"
                .as_slice()
                .into(),
            mod_time: None,
        });
        let options = RenderOptions {
            release_name: "r".into(),
            namespace: "default".into(),
            revision: 1,
            is_install: true,
            is_upgrade: false,
            ..RenderOptions::default()
        };
        let err = LiteralRenderer
            .render(&chart, &Values::new(), &options)
            .unwrap_err();
        assert!(err.to_string().contains("demo/templates/cm.yaml"), "{err}");
    }
}

#[cfg(test)]
mod chart_renderer_tests {
    use super::*;

    #[test]
    fn the_hello_chart_renders_with_the_release_name_and_a_test_hook() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/charts/hello");
        let chart = flotilla_chart::load(&dir).unwrap();
        let options = RenderOptions {
            release_name: "web".into(),
            namespace: "apps".into(),
            revision: 1,
            is_install: true,
            is_upgrade: false,
            ..RenderOptions::default()
        };
        let r = ChartRenderer::default()
            .render(&chart, &Values::new(), &options)
            .unwrap();
        assert!(
            r.manifest
                .contains("# Source: hello/templates/deployment.yaml"),
            "{}",
            r.manifest
        );
        assert!(r.manifest.contains("web-hello"), "{}", r.manifest);
        assert_eq!(r.hooks.len(), 1);
        assert_eq!(r.hooks[0].name, "web-hello-test");
        assert_eq!(r.hooks[0].events, [HookEvent::Test]);
    }

    #[test]
    fn engine_errors_are_helms_own_words_without_a_prefix() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/charts/schema");
        let chart = flotilla_chart::load(&dir).unwrap();
        let options = RenderOptions {
            release_name: "web".into(),
            namespace: "apps".into(),
            revision: 1,
            is_install: true,
            ..RenderOptions::default()
        };
        let values: Values =
            serde_json::from_value(serde_json::json!({"replicaCount": "many"})).unwrap();
        let err = ChartRenderer::default()
            .render(&chart, &values, &options)
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("values don't meet the specifications of the schema"),
            "{err}"
        );
        assert!(!err.contains("template templates"), "{err}");

        let mut metadata = flotilla_chart::Metadata::default();
        metadata.name = "demo".into();
        metadata.version = "0.1.0".into();
        let mut chart = Chart::new(metadata);
        chart.templates.push(flotilla_chart::File {
            name: "templates/cm.yaml".into(),
            data: b"x: {{ fail \"boom\" }}\n".as_slice().into(),
            mod_time: None,
        });
        let err = ChartRenderer::default()
            .render(&chart, &Values::new(), &options)
            .unwrap_err()
            .to_string();
        // `fail` in Helm's words: `execution error at (<template>:<line>:<col>): <message>`.
        assert!(
            err.starts_with("execution error at (demo/templates/cm.yaml:1:"),
            "{err}"
        );
        assert!(err.ends_with("): boom"), "{err}");
    }
}
