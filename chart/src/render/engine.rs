//! Helm's engine (`pkg/engine/engine.go`): one template set for the whole chart tree, one
//! scope object per chart, every non-partial template executed in Helm's order.

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_gotmpl::{ExecOptions, Map, MapType, MissingKey, SharedText, TemplateSet, Value};

use super::convert::{VALUES_TYPE, into_values_map, values_map};
use super::errors::{cleanup_parse_error, reformat_exec_error};
use super::funcs::{FuncOptions, Lookup, helm_funcs};
use super::objects::{Capabilities, CapabilitiesObject, FilesObject};
use crate::chart::Chart;
use crate::metadata::Metadata;
use crate::values::Values;

/// `.Release` (`common.ReleaseOptions` plus `Service`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReleaseOptions {
    /// Release name.
    pub name: String,
    /// Release namespace.
    pub namespace: String,
    /// Revision (1 for an install).
    pub revision: i64,
    /// `.Release.IsInstall`.
    pub is_install: bool,
    /// `.Release.IsUpgrade`.
    pub is_upgrade: bool,
}

/// A rendering failure, in Helm's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

/// Stack rendering runs on, and the share of it the executor may use: deep
/// `include` recursion (Helm allows 1000 levels of one name) needs far more than the default
/// 2 MiB. Untouched stack pages cost nothing.
const RENDER_STACK_BYTES: usize = 512 << 20;

static LEAVE_TO_EXIT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// For a process that exits once it has rendered (`flotilla template`): what a render builds
/// and no longer needs (parsed templates, template scopes, the function map) is then left to
/// the process exit instead of being freed one allocation at a time, as clang's driver does
/// with `-disable-free`. Freeing it took about a tenth of rendering a small chart.
/// Long-running callers (the agent) must not call this.
pub fn leave_allocations_to_exit() {
    LEAVE_TO_EXIT.store(true, std::sync::atomic::Ordering::Relaxed);
}
const EXEC_STACK_BUDGET: usize = 384 << 20;

/// The engine: options that shape the function map.
#[derive(Debug, Clone, Default)]
pub struct Engine {
    /// `missingkey=error` (Helm SDK's `Strict`).
    pub strict: bool,
    /// `helm lint` mode: `required`/`fail` do not fail, `lookup` is the stub.
    pub lint_mode: bool,
    /// Keep Sprig's `getHostByName` instead of Helm's stub returning `""`.
    pub enable_dns: bool,
    /// The cluster for `lookup` (none: every lookup returns an empty map).
    pub lookup: Option<Arc<dyn Lookup>>,
    /// Bytes one template's execution may write (none: [`ExecOptions`]' default). Helm has
    /// no such bound; callers rendering untrusted charts (the fuzzers) set one.
    pub max_output_bytes: Option<usize>,
    /// Execution steps one template may take (none: unlimited, as in Helm).
    pub max_steps: Option<u64>,
}

/// One template to execute: its path, source and the scope map of its chart.
struct Renderable<'c> {
    path: String,
    source: std::borrow::Cow<'c, str>,
    /// The file's bytes, which a parsed template may keep when `source` borrows them.
    data: &'c Arc<[u8]>,
    scope: Map,
    base_path: String,
}

impl Engine {
    /// `Engine.Render(chart, values)`: every template of the chart tree rendered, keyed by
    /// path (`root/templates/x.yaml`, `root/charts/sub/templates/y.yaml`), `<no value>`
    /// removed. Partials (`_*`) are parsed but not rendered. `values` are the coalesced
    /// values of the root chart.
    pub fn render(
        &self,
        chart: &Chart,
        values: &Values,
        release: &ReleaseOptions,
        caps: &Capabilities,
    ) -> Result<BTreeMap<String, String>, RenderError> {
        self.render_on_stack(chart, || values_map(values), release, caps)
    }

    /// [`Engine::render`] of values the caller no longer needs: they become the templates'
    /// `.Values` without copying their keys.
    pub fn render_owned(
        &self,
        chart: &Chart,
        values: Values,
        release: &ReleaseOptions,
        caps: &Capabilities,
    ) -> Result<BTreeMap<String, String>, RenderError> {
        self.render_on_stack(chart, || into_values_map(values), release, caps)
    }

    fn render_on_stack(
        &self,
        chart: &Chart,
        values: impl FnOnce() -> Map,
        release: &ReleaseOptions,
        caps: &Capabilities,
    ) -> Result<BTreeMap<String, String>, RenderError> {
        // A fresh stack on this thread rather than a thread of its own: no thread to start
        // and wait for, and every allocation stays in this thread's malloc arena (a second
        // thread gets a new arena, grown page by page, whose freed memory the first cannot
        // reuse). Untouched pages of the mapping cost nothing.
        stacker::grow(RENDER_STACK_BYTES, || {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                self.render_here(chart, values, release, caps)
            }))
        })
        .unwrap_or_else(|p| {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".to_string());
            Err(RenderError(format!("rendering template failed: {msg}")))
        })
    }

    fn render_here(
        &self,
        chart: &Chart,
        values: impl FnOnce() -> Map,
        release: &ReleaseOptions,
        caps: &Capabilities,
    ) -> Result<BTreeMap<String, String>, RenderError> {
        let funcs = helm_funcs(&FuncOptions {
            lint_mode: self.lint_mode,
            enable_dns: self.enable_dns,
            lookup: self.lookup.clone(),
        });
        let release_map = Map::new();
        release_map.insert("Name", Value::string(&release.name));
        release_map.insert("Namespace", Value::string(&release.namespace));
        release_map.insert("IsUpgrade", Value::Bool(release.is_upgrade));
        release_map.insert("IsInstall", Value::Bool(release.is_install));
        release_map.insert("Revision", Value::Int(release.revision));
        release_map.insert("Service", Value::string("Helm"));
        let shared = Shared {
            release: Value::Map(release_map),
            caps: Value::Object(Arc::new(CapabilitiesObject::new(caps))),
        };
        let mut templates = Vec::new();
        let root_values = Value::Map(values());
        collect(chart, None, &root_values, &shared, &mut templates);

        let mut order: Vec<usize> = (0..templates.len()).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&templates[a].path, &templates[b].path);
            let (sa, sb) = (a.matches('/').count(), b.matches('/').count());
            sb.cmp(&sa).then_with(|| b.cmp(a))
        });

        let sources: Vec<(&str, SharedText<'_>)> = order
            .iter()
            .map(|&i| {
                let t = &templates[i];
                let bytes = match &t.source {
                    std::borrow::Cow::Borrowed(_) => Some(t.data),
                    std::borrow::Cow::Owned(_) => None,
                };
                let text = SharedText {
                    text: &t.source,
                    bytes,
                };
                (t.path.as_str(), text)
            })
            .collect();
        let mut set = TemplateSet::new("gotpl");
        set.parse_all(&sources, &funcs, PARSE_THREADS)
            .map_err(|(k, e)| RenderError(cleanup_parse_error(sources[k].0, &e.to_string())))?;
        drop(sources);
        let opts = ExecOptions {
            missing_key: if self.strict {
                MissingKey::Error
            } else {
                MissingKey::Zero
            },
            max_stack_bytes: EXEC_STACK_BUDGET,
            max_steps: self.max_steps,
            ..ExecOptions::helm()
        };
        let opts = ExecOptions {
            max_output_bytes: self.max_output_bytes.unwrap_or(opts.max_output_bytes),
            ..opts
        };
        let mut rendered = BTreeMap::new();
        for &i in &order {
            let t = &templates[i];
            let base = t.path.rsplit('/').next().unwrap_or(&t.path);
            if base.starts_with('_') {
                continue;
            }
            let tmpl = Map::new();
            tmpl.insert("Name", Value::string(&t.path));
            tmpl.insert("BasePath", Value::string(&t.base_path));
            t.scope.insert(
                "Template",
                Value::Map(tmpl.with_type(MapType::Named(Arc::from(VALUES_TYPE)))),
            );
            let out = set
                .execute(
                    &t.path,
                    &Value::Map(t.scope.with_type(MapType::Named(Arc::from(VALUES_TYPE)))),
                    &funcs,
                    &opts,
                )
                .map_err(|e| match e {
                    flotilla_gotmpl::Error::Exec(msg) => {
                        RenderError(reformat_exec_error(&t.path, &msg))
                    }
                    flotilla_gotmpl::Error::Parse(msg) => RenderError(msg),
                })?;
            // The output grew by doubling: give the unused half back now, as every
            // rendered file is kept until the documents are split out of it.
            let mut out = strip_no_value(out);
            out.shrink_to_fit();
            rendered.insert(t.path.clone(), out);
        }
        if LEAVE_TO_EXIT.load(std::sync::atomic::Ordering::Relaxed) {
            std::mem::forget((set, templates, funcs, shared, root_values));
        }
        Ok(rendered)
    }
}

/// Threads a chart's templates are parsed on ([`TemplateSet::parse_all`] adds them in Helm's
/// order whatever the number). One: measured on `flotilla template` (README, "Rendering
/// speed"), a second thread sharing the single malloc arena of `cli/src/memory.rs` waits on
/// the allocator's lock (grafana: 1.9 ms more CPU, 1 ms more wall), and with an arena of its
/// own it saved only 2-6% of wall for ~20-60 more page faults.
const PARSE_THREADS: usize = 1;

/// `strings.ReplaceAll(out, "<no value>", "")`, without copying text that has none.
fn strip_no_value(out: String) -> String {
    const NO_VALUE: &str = "<no value>";
    let mut kept = 0;
    let mut from = 0;
    let mut result: Option<String> = None;
    while let Some(i) = out[from..].find('<') {
        let at = from + i;
        if out[at..].starts_with(NO_VALUE) {
            let r = result.get_or_insert_with(|| String::with_capacity(out.len()));
            r.push_str(&out[kept..at]);
            kept = at + NO_VALUE.len();
            from = kept;
        } else {
            from = at + 1;
        }
    }
    match result {
        None => out,
        Some(mut r) => {
            r.push_str(&out[kept..]);
            r
        }
    }
}

struct Shared {
    release: Value,
    caps: Value,
}

/// `MetadataAsMap()`: Chart.yaml with Go field names, nil slices as empty lists.
pub(crate) fn metadata_map(md: &Metadata) -> Map {
    fn s(x: &str) -> Value {
        Value::string(x)
    }
    let strings = |v: &[String]| Value::list(v.iter().map(|x| s(x)).collect());
    let m = Map::new();
    m.insert("Name", s(&md.name));
    m.insert("Home", s(&md.home));
    m.insert("Sources", strings(&md.sources));
    m.insert("Version", s(&md.version));
    m.insert("Description", s(&md.description));
    m.insert("Keywords", strings(&md.keywords));
    m.insert(
        "Maintainers",
        Value::list(
            md.maintainers
                .iter()
                .map(|x| {
                    let mm = Map::new();
                    mm.insert("Name", s(&x.name));
                    mm.insert("Email", s(&x.email));
                    mm.insert("URL", s(&x.url));
                    Value::Map(mm)
                })
                .collect(),
        ),
    );
    m.insert("Icon", s(&md.icon));
    m.insert("APIVersion", s(&md.api_version));
    m.insert("Condition", s(&md.condition));
    m.insert("Tags", s(&md.tags));
    m.insert("AppVersion", s(&md.app_version));
    m.insert("Deprecated", Value::Bool(md.deprecated));
    m.insert(
        "Annotations",
        Value::Map(Map::typed(
            md.annotations
                .iter()
                .map(|(k, v)| (k.clone(), s(v)))
                .collect(),
            MapType::StringValues,
        )),
    );
    m.insert("KubeVersion", s(&md.kube_version));
    m.insert(
        "Dependencies",
        Value::list(
            md.dependencies
                .iter()
                .flatten()
                .map(|d| {
                    let dm = Map::new();
                    dm.insert("Name", s(&d.name));
                    dm.insert("Version", s(&d.version));
                    dm.insert("Repository", s(&d.repository));
                    dm.insert("Condition", s(&d.condition));
                    dm.insert("Tags", strings(&d.tags));
                    dm.insert("Enabled", Value::Bool(d.enabled));
                    dm.insert(
                        "ImportValues",
                        Value::list(
                            d.import_values
                                .iter()
                                .map(super::convert::json_to_value)
                                .collect(),
                        ),
                    );
                    dm.insert("Alias", s(&d.alias));
                    Value::Map(dm)
                })
                .collect(),
        ),
    );
    m.insert("Type", s(&md.chart_type));
    m
}

/// `Values.Table(path)`: the map at a dotted path below `values`, shared with it.
fn table(values: &Value, path: &[&str]) -> Option<Map> {
    let mut cur = values.as_map()?.clone();
    for key in path {
        match cur.get(key) {
            Some(Value::Map(m)) => cur = m,
            _ => return None,
        }
    }
    Some(cur)
}

/// `recAllTpls`: builds the scope map of `chart` and registers its templates; returns the
/// scope (it becomes `.Subcharts.<name>` of the parent).
fn collect<'c>(
    chart: &'c Chart,
    parent: Option<(&str, &Map)>,
    root_values: &Value,
    shared: &Shared,
    out: &mut Vec<Renderable<'c>>,
) -> Map {
    let chart_map = metadata_map(&chart.metadata);
    chart_map.insert("IsRoot", Value::Bool(parent.is_none()));
    let subcharts = Map::new();
    let scope = Map::new();
    scope.insert("Chart", Value::Map(chart_map));
    scope.insert(
        "Files",
        Value::Object(Arc::new(FilesObject::new(&chart.files))),
    );
    scope.insert("Release", shared.release.clone());
    scope.insert("Capabilities", shared.caps.clone());
    scope.insert("Subcharts", Value::Map(subcharts.clone()));
    let values = match parent {
        None => root_values.clone(),
        Some((_, parent_scope)) => {
            let mut path = vec!["Values"];
            path.extend(chart.name().split('.'));
            let found = table(&Value::Map(parent_scope.clone()), &path)
                .unwrap_or_default()
                .with_type(MapType::Named(Arc::from(VALUES_TYPE)));
            Value::Map(found)
        }
    };
    scope.insert("Values", values);

    let full_path = match parent {
        None => chart.name().to_string(),
        Some((parent_path, _)) => format!("{parent_path}/charts/{}", chart.name()),
    };
    for dep in &chart.dependencies {
        let sub = collect(dep, Some((&full_path, &scope)), root_values, shared, out);
        subcharts.insert(dep.name(), Value::Map(sub));
    }
    let library = chart.is_library();
    for t in &chart.templates {
        let base = t.name.rsplit('/').next().unwrap_or(&t.name);
        if library && !base.starts_with('_') {
            continue;
        }
        out.push(Renderable {
            path: format!("{full_path}/{}", t.name),
            // Go keeps invalid UTF-8 bytes as they are; here they become U+FFFD.
            source: crate::utf8_lossy(&t.data),
            data: &t.data,
            scope: scope.clone(),
            base_path: format!("{full_path}/templates"),
        });
    }
    scope
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::File;

    fn chart_with(template: &str) -> Chart {
        let mut chart = Chart::new(Metadata {
            name: "limits".to_string(),
            version: "0.1.0".to_string(),
            api_version: "v2".to_string(),
            ..Metadata::default()
        });
        chart.templates.push(File {
            name: "templates/t.yaml".to_string(),
            data: template.as_bytes().into(),
            mod_time: None,
        });
        chart
    }

    fn release() -> ReleaseOptions {
        ReleaseOptions {
            name: "r".to_string(),
            namespace: "default".to_string(),
            revision: 1,
            is_install: true,
            is_upgrade: false,
        }
    }

    #[test]
    fn a_step_bound_stops_a_loop_that_helm_would_run_to_the_end() {
        let engine = Engine {
            max_steps: Some(10_000),
            ..Engine::default()
        };
        let chart = chart_with("{{ range 100000000 }}{{ end }}");
        let caps = Capabilities::helm_template_default();
        let err = engine
            .render(&chart, &Values::new(), &release(), &caps)
            .expect_err("the loop exceeds the bound");
        assert!(
            err.0
                .contains("exceeded maximum number of execution steps (10000)"),
            "{err}"
        );
    }

    #[test]
    fn an_output_bound_stops_a_template_that_writes_too_much() {
        let engine = Engine {
            max_output_bytes: Some(1000),
            ..Engine::default()
        };
        let chart = chart_with(r#"{{ range 2000 }}x{{ end }}"#);
        let caps = Capabilities::helm_template_default();
        let err = engine
            .render(&chart, &Values::new(), &release(), &caps)
            .expect_err("the output exceeds the bound");
        assert!(
            err.0.contains("output exceeds the limit of 1000 bytes"),
            "{err}"
        );
        let small = chart_with(r#"{{ range 10 }}x{{ end }}"#);
        let out = engine
            .render(&small, &Values::new(), &release(), &caps)
            .expect("small output renders");
        assert_eq!(out["limits/templates/t.yaml"], "xxxxxxxxxx");
    }

    #[test]
    fn no_value_is_removed_everywhere_and_other_text_kept() {
        for (input, want) in [
            ("", ""),
            ("a: 1\n", "a: 1\n"),
            ("<no value>", ""),
            ("x: <no value>\ny: <no value>", "x: \ny: "),
            ("<<no value>no value>", "<no value>"),
            ("a < b <no valu", "a < b <no valu"),
            ("é<no value>ü<", "éü<"),
        ] {
            assert_eq!(
                strip_no_value(input.to_string()),
                input.replace("<no value>", "")
            );
            assert_eq!(strip_no_value(input.to_string()), want);
        }
    }
}
