//! Helm's engine (`pkg/engine/engine.go`): one template set for the whole chart tree, one
//! scope object per chart, every non-partial template executed in Helm's order.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use flotilla_gotmpl::{ExecOptions, Map, MapType, MissingKey, SharedText, TemplateSet, Value};

use super::convert::{VALUES_TYPE, into_values_map, values_map};
use super::early::EarlyParse;
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
    /// Renderable templates from which they are executed on two threads (none: the
    /// process-wide setting of [`render_on_two_threads`], by default never).
    pub two_threads_from: Option<usize>,
    /// The chart's templates as parsed ahead ([`EarlyParse::start`] on the chart before
    /// dependency processing); whatever it lacks is parsed at render.
    pub early_parse: Option<Arc<EarlyParse>>,
}

/// One template to execute: its path, source and the scope map of its chart.
struct Renderable<'c> {
    path: String,
    source: std::borrow::Cow<'c, str>,
    /// The file's bytes, which a parsed template may keep when `source` borrows them.
    data: &'c Arc<[u8]>,
    scope: Map,
    base_path: String,
    /// Index of its chart in the walk's list ([`ChartScope`]).
    chart: usize,
}

/// One chart of the tree as the walk met it: its scope map and its parent's index.
struct ChartScope {
    scope: Map,
    parent: Option<usize>,
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
        let mut charts = Vec::new();
        let root_values = Value::Map(values());
        collect(
            chart,
            None,
            &root_values,
            &shared,
            &mut templates,
            &mut charts,
        );

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
        let jobs: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&i| {
                let path = &templates[i].path;
                !path.rsplit('/').next().unwrap_or(path).starts_with('_')
            })
            .collect();
        let min = self
            .two_threads_from
            .unwrap_or_else(|| PARALLEL_MIN_TEMPLATES.load(Ordering::Relaxed));
        let two_threads = jobs.len() >= min.max(2);
        // A chart big enough for two threads is parsed on two as well: the parsing thread's
        // arena, free once it ends, is the one the executing worker then takes.
        let parse_threads = if two_threads { 2 } else { PARSE_THREADS };
        let mut set = TemplateSet::new("gotpl");
        match &self.early_parse {
            Some(early) => {
                for (k, (name, text)) in sources.iter().enumerate() {
                    let ahead = text.bytes.and_then(|b| early.take(name, b, &funcs));
                    let parsed = ahead.unwrap_or_else(|| {
                        TemplateSet::parse_alone(name, text.text, text.bytes, &funcs)
                    });
                    match parsed {
                        Ok(p) => set.add_parsed(p),
                        Err(e) => {
                            return Err(RenderError(cleanup_parse_error(
                                sources[k].0,
                                &e.to_string(),
                            )));
                        }
                    }
                }
                TemplateSet::release_parser_memory();
            }
            None => set
                .parse_all(&sources, &funcs, parse_threads)
                .map_err(|(k, e)| RenderError(cleanup_parse_error(sources[k].0, &e.to_string())))?,
        }
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
        let run = Run {
            set: &set,
            funcs: &funcs,
            opts: &opts,
            templates: &templates,
            not_utf8: std::sync::Mutex::default(),
        };
        let parallel = match two_threads {
            true => run.on_two_threads(&jobs, &charts),
            false => None,
        };
        let rendered = match parallel {
            Some(result) => result?,
            None => {
                for c in &charts {
                    c.scope.remove("Template");
                }
                run.one_after_another(&jobs)?
            }
        };
        let not_utf8 = std::mem::take(
            &mut *run
                .not_utf8
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        if !not_utf8.is_empty() {
            super::manifest::check_not_utf8(&rendered, &not_utf8)
                .map_err(|e| RenderError(e.to_string()))?;
        }
        if LEAVE_TO_EXIT.load(std::sync::atomic::Ordering::Relaxed) {
            std::mem::forget((set, templates, charts, funcs, shared, root_values));
        }
        Ok(rendered)
    }
}

/// Renderable templates a chart tree needs before its templates are executed on two threads
/// ([`render_on_two_threads`]); `usize::MAX`: never.
static PARALLEL_MIN_TEMPLATES: AtomicUsize = AtomicUsize::new(usize::MAX);

/// For a process with a core to spare (`flotilla template`): chart trees with at least
/// `min_templates` templates to render execute them on two threads (this one and one
/// started for the render), with the same output and errors as one after the other: the
/// maps that exist before execution (values, `.Chart`, `.Release`, the scopes ...) are frozen
/// ([`flotilla_gotmpl::value::freeze_maps`]), and if a template tries to change one, which a
/// later template could read, the run is thrown away and the templates are executed again in
/// Helm's order. Long-running callers (the agent) must not call this: a thrown-away run keeps
/// what it wrote to frozen maps until the process exits.
///
/// The template parser's helper threads are then placed as the executing worker is
/// ([`flotilla_sprig::cpu::spawner_cpu`]).
pub fn render_on_two_threads(min_templates: usize) {
    PARALLEL_MIN_TEMPLATES.store(min_templates, Ordering::Relaxed);
    flotilla_gotmpl::set_helper_thread_hooks(Some(flotilla_gotmpl::HelperThreadHooks {
        before_spawn: flotilla_sprig::cpu::spawner_cpu,
        in_helper: flotilla_sprig::cpu::leave_cpu,
        after_spawn: flotilla_sprig::cpu::after_spawn,
    }));
}

/// Renders that went to two threads, and those of them that were done again one template
/// after the other (a template wrote a frozen map, or a thread failed), in this process.
pub fn parallel_render_counts() -> (usize, usize) {
    (
        PARALLEL_RUNS.load(Ordering::Relaxed),
        PARALLEL_FALLBACKS.load(Ordering::Relaxed),
    )
}

static PARALLEL_RUNS: AtomicUsize = AtomicUsize::new(0);
static PARALLEL_FALLBACKS: AtomicUsize = AtomicUsize::new(0);

/// What executing one template needs.
struct Run<'a, 'c> {
    set: &'a TemplateSet,
    funcs: &'a flotilla_gotmpl::FuncMap,
    opts: &'a ExecOptions,
    templates: &'a [Renderable<'c>],
    /// The outputs that are not UTF-8 (a template printed a Go string holding binary
    /// data), by path, `<no value>` removed; the rendered text holds them with U+FFFD.
    not_utf8: std::sync::Mutex<BTreeMap<String, Vec<u8>>>,
}

/// `{"Name": path, "BasePath": base}`, the value of `.Template`.
fn template_entry(t: &Renderable<'_>) -> Value {
    let tmpl = Map::new();
    tmpl.insert("Name", Value::string(&t.path));
    tmpl.insert("BasePath", Value::string(&t.base_path));
    Value::Map(tmpl.with_type(MapType::Named(Arc::from(VALUES_TYPE))))
}

impl Run<'_, '_> {
    /// Executes template `t` with `scope` as dot; `<no value>` removed.
    fn execute(&self, t: &Renderable<'_>, scope: &Map) -> Result<String, RenderError> {
        let out = self
            .set
            .execute_output(
                &t.path,
                &Value::Map(scope.with_type(MapType::Named(Arc::from(VALUES_TYPE)))),
                self.funcs,
                self.opts,
            )
            .map_err(|e| match e {
                flotilla_gotmpl::Error::Exec(msg) => {
                    RenderError(reformat_exec_error(&t.path, &msg))
                }
                flotilla_gotmpl::Error::Parse(msg) => RenderError(msg),
            })?;
        let out = match out {
            flotilla_gotmpl::Output::Text(text) => text,
            flotilla_gotmpl::Output::Bytes(bytes) => {
                let raw = strip_no_value_bytes(&bytes);
                let text = String::from_utf8_lossy(&raw).into_owned();
                self.not_utf8
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(t.path.clone(), raw);
                text
            }
        };
        // The output grew by doubling: give the unused half back now, as every
        // rendered file is kept until the documents are split out of it.
        let mut out = strip_no_value(out);
        out.shrink_to_fit();
        Ok(out)
    }

    /// Helm's loop: each template in turn, its chart's scope map holding its `.Template`.
    fn one_after_another(&self, jobs: &[usize]) -> Result<BTreeMap<String, String>, RenderError> {
        let mut rendered = BTreeMap::new();
        for &i in jobs {
            let t = &self.templates[i];
            t.scope.insert("Template", template_entry(t));
            let out = self.execute(t, &t.scope)?;
            rendered.insert(t.path.clone(), out);
        }
        Ok(rendered)
    }

    /// The templates `jobs` (in Helm's order) executed on two threads, each taking the next
    /// one left; `None` when they must be executed one after the other instead (nothing of
    /// this run is then kept, and no map that existed before it has changed).
    ///
    /// Each template gets a copy of its chart's scope map with its own `.Template`. In Helm
    /// the scope is one map per chart whose `Template` entry each template overwrites, and a
    /// parent's template can read a subchart's through `.Subcharts`: that entry is set to
    /// what Helm's loop would leave there, which must be the same for every such reader.
    fn on_two_threads(
        &self,
        jobs: &[usize],
        charts: &[ChartScope],
    ) -> Option<Result<BTreeMap<String, String>, RenderError>> {
        // A chart whose entry varies is watched instead: a template reading it is run again
        // in Helm's loop.
        let entries = self.subchart_template_entries(jobs, charts);
        for (c, entry) in entries.iter().enumerate() {
            match *entry {
                Entry::Same(Some(pos)) => charts[c]
                    .scope
                    .insert("Template", template_entry(&self.templates[jobs[pos]])),
                Entry::Varies => charts[c].scope.watch_reads(true),
                Entry::Unread | Entry::Same(None) => {}
            }
        }
        let scopes: Vec<Map> = jobs
            .iter()
            .map(|&i| {
                let t = &self.templates[i];
                let scope = t.scope.shallow_copy();
                scope.insert("Template", template_entry(t));
                scope
            })
            .collect();
        PARALLEL_RUNS.fetch_add(1, Ordering::Relaxed);
        let epoch = flotilla_gotmpl::value::freeze_maps();
        let next = AtomicUsize::new(0);
        // Positions of the first failing template and of the first one that wrote a frozen
        // map (or read a watched one) met so far: later ones need not run.
        let stop = AtomicUsize::new(usize::MAX);
        let conflict = AtomicUsize::new(usize::MAX);
        let work = || {
            let freeze = flotilla_gotmpl::value::enter_freeze(epoch, "Template");
            let mut done = Vec::new();
            loop {
                let pos = next.fetch_add(1, Ordering::Relaxed);
                if pos >= jobs.len()
                    || pos > stop.load(Ordering::Relaxed)
                    || pos > conflict.load(Ordering::Relaxed)
                {
                    break;
                }
                let result = self.execute(&self.templates[jobs[pos]], &scopes[pos]);
                if freeze.conflicted() {
                    conflict.fetch_min(pos, Ordering::Relaxed);
                    break;
                }
                if result.is_err() {
                    stop.fetch_min(pos, Ordering::Relaxed);
                }
                done.push((pos, result));
            }
            done
        };
        let results = std::thread::scope(|s| {
            let builder = std::thread::Builder::new()
                .name("render".into())
                .stack_size(RENDER_STACK_BYTES);
            let worker = flotilla_sprig::cpu::spawn_scoped_elsewhere(builder, s, || {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(&work)).ok()
            });
            // A panic here is caught by `render_on_stack` once the worker has been joined.
            let mine = work();
            let theirs = match worker {
                Ok(w) => w.join().ok().flatten(),
                // No thread: this one took every template.
                Err(_) => Some(Vec::new()),
            };
            theirs.map(|mut theirs| {
                theirs.extend(mine);
                theirs
            })
        });
        for c in charts {
            c.scope.watch_reads(false);
        }
        let Some(results) = results else {
            // The worker panicked: Helm's loop again from the start (it panics there too,
            // or fails first on an earlier template, as Helm would).
            PARALLEL_FALLBACKS.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        let mut slots: Vec<Option<Result<String, RenderError>>> = Vec::new();
        slots.resize_with(jobs.len(), || None);
        for (pos, r) in results {
            slots[pos] = Some(r);
        }
        // Every template before the first conflicting one ran on the same data as in Helm's
        // loop (nothing before it changed a map): its output stands.
        let resume = conflict.load(Ordering::Relaxed).min(jobs.len());
        let mut rendered = BTreeMap::new();
        for (pos, slot) in slots.into_iter().enumerate().take(resume) {
            match slot {
                Some(Ok(out)) => {
                    rendered.insert(self.templates[jobs[pos]].path.clone(), out);
                }
                Some(Err(e)) => return Some(Err(e)),
                // Every position up to a failure or conflict is taken and finished; should one
                // not be, Helm's loop from the start.
                None => {
                    PARALLEL_FALLBACKS.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
        }
        if resume < jobs.len() {
            PARALLEL_FALLBACKS.fetch_add(1, Ordering::Relaxed);
            // Helm's loop from there, each chart's scope holding the `.Template` of its last
            // template run so far.
            for c in charts {
                c.scope.remove("Template");
            }
            for &i in &jobs[..resume] {
                let t = &self.templates[i];
                t.scope.insert("Template", template_entry(t));
            }
            match self.one_after_another(&jobs[resume..]) {
                Ok(rest) => rendered.extend(rest),
                Err(e) => return Some(Err(e)),
            }
        }
        Some(Ok(rendered))
    }

    /// For each chart, what the `Template` entry of its scope map holds whenever a template
    /// of an ancestor chart runs in Helm's loop.
    fn subchart_template_entries(&self, jobs: &[usize], charts: &[ChartScope]) -> Vec<Entry> {
        let mut current: Vec<Option<usize>> = vec![None; charts.len()];
        let mut seen = vec![Entry::Unread; charts.len()];
        for (pos, &i) in jobs.iter().enumerate() {
            let c = self.templates[i].chart;
            for d in 0..charts.len() {
                let mut up = charts[d].parent;
                while let Some(p) = up {
                    if p == c {
                        seen[d] = match seen[d] {
                            Entry::Unread => Entry::Same(current[d]),
                            Entry::Same(v) if v == current[d] => Entry::Same(v),
                            _ => Entry::Varies,
                        };
                        break;
                    }
                    up = charts[p].parent;
                }
            }
            current[c] = Some(pos);
        }
        seen
    }
}

/// What a chart's scope map holds under `Template` while an ancestor chart's templates run.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Entry {
    /// No ancestor has templates to run.
    Unread,
    /// Always the `.Template` of the template at this position of the jobs (`None`: none).
    Same(Option<usize>),
    /// It changes from one to the next (a subchart's templates interleave with an
    /// ancestor's in Helm's order).
    Varies,
}

/// Threads a chart's templates are parsed on ([`TemplateSet::parse_all`] adds them in Helm's
/// order whatever the number), unless they are executed on two threads. One: measured on
/// `flotilla template` (README, "Rendering speed"), a second thread sharing one malloc arena
/// waits on the allocator's lock (grafana: 1.9 ms more CPU, 1 ms more wall), and with an
/// arena of its own it saved only 2-6% of wall on small charts for ~20-60 more page faults.
const PARSE_THREADS: usize = 1;

/// `strings.ReplaceAll(out, "<no value>", "")`, without copying text that has none.
/// [`strip_no_value`] of an output that is not UTF-8.
fn strip_no_value_bytes(out: &[u8]) -> Vec<u8> {
    const NO_VALUE: &[u8] = b"<no value>";
    let mut result = Vec::with_capacity(out.len());
    let mut kept = 0;
    for at in memchr::memmem::find_iter(out, NO_VALUE) {
        if at >= kept {
            result.extend_from_slice(&out[kept..at]);
            kept = at + NO_VALUE.len();
        }
    }
    result.extend_from_slice(&out[kept..]);
    result
}

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
    parent: Option<(&str, &Map, usize)>,
    root_values: &Value,
    shared: &Shared,
    out: &mut Vec<Renderable<'c>>,
    charts: &mut Vec<ChartScope>,
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
    let id = charts.len();
    charts.push(ChartScope {
        scope: scope.clone(),
        parent: parent.map(|(_, _, p)| p),
    });
    let values = match parent {
        None => root_values.clone(),
        Some((_, parent_scope, _)) => {
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
        Some((parent_path, _, _)) => format!("{parent_path}/charts/{}", chart.name()),
    };
    for dep in &chart.dependencies {
        let sub = collect(
            dep,
            Some((&full_path, &scope, id)),
            root_values,
            shared,
            out,
            charts,
        );
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
            chart: id,
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

    /// A chart of `n` generated templates (and a subchart), each made of snippets picked by
    /// `seed`: reads of values, scope and `.Template`, includes, local maps, and now and then
    /// a write of shared data, a read of the subchart's `.Template` or a failure.
    fn generated_chart(seed: u64, n: usize) -> Chart {
        const SNIPPETS: [&str; 12] = [
            "a: {{ .Values.a | toYaml | nindent 2 }}\n",
            "name: {{ .Template.Name }} {{ .Template.BasePath }}\n",
            "inc: {{ include \"gen.x\" . | quote }}\n",
            "{{- $m := dict \"k\" 1 }}{{ $_ := set $m \"k\" 2 }}local: {{ $m.k }}\n",
            "{{ range $i, $v := .Values.list }}l{{ $i }}: {{ $v }}\n{{ end }}",
            "counter: {{ .Values.counter | default 0 }} scope: {{ $.mark | default \"none\" }}\n",
            "{{- $_ := set .Values \"counter\" (add1 (.Values.counter | default 0)) }}\n",
            "{{- $_ := set $ \"mark\" .Template.Name }}\n",
            "{{- $_ := merge .Values.a (dict \"extra\" \"x\") }}\n",
            "{{- $_ := merge .Values.a (dict \"b\" \"ignored\") }}\n",
            "sub: {{ .Subcharts.sub.Template | toJson }} {{ .Subcharts.sub.Values.v }}\n",
            "{{- if eq (len .Values.list) 3 }}{{ fail .Template.Name }}{{ end }}\n",
        ];
        let mut state = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let mut next = move |m: u64| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 33) % m
        };
        let file = |name: String, text: String| File {
            name,
            data: text.into_bytes().into(),
            mod_time: None,
        };
        let mut sub = chart_with("v: {{ .Values.v }} t: {{ .Template.Name }}\n");
        sub.metadata.name = "sub".to_string();
        sub.templates.push(file(
            "templates/deep/s.yaml".into(),
            "s: {{ .Values.v }}\n".into(),
        ));
        let mut chart = chart_with("{{ define \"gen.x\" }}{{ .Values.a.b }}{{ end }}");
        chart.templates[0].name = "templates/_helpers.tpl".to_string();
        for i in 0..n {
            let mut text = String::new();
            for _ in 0..1 + next(4) {
                // Writes, subchart reads and failures are rarer than the rest.
                let pick = match next(40) {
                    0 => 6,
                    1 => 7,
                    2 => 8,
                    3 => 9,
                    4 => 10,
                    5 => 11,
                    k => [0, 1, 2, 3, 4, 5][k as usize % 6],
                };
                text.push_str(SNIPPETS[pick]);
            }
            let dir = if next(5) == 0 {
                "templates/d/e"
            } else {
                "templates"
            };
            chart
                .templates
                .push(file(format!("{dir}/t{i:03}.yaml"), text));
        }
        chart.dependencies.push(sub);
        chart
    }

    #[test]
    fn two_threads_render_what_one_renders() {
        let caps = Capabilities::helm_template_default();
        let (mut runs, mut same_run, mut fell_back, mut errors) = (0, 0, 0, 0);
        for seed in 0..120 {
            let chart = generated_chart(seed, 20 + (seed as usize % 50));
            let values_text = if seed % 3 == 0 {
                "a: {b: 1}\nlist: [x, y, z]\nsub: {v: s}\n"
            } else {
                "a: {b: 1}\nlist: [x, y]\nsub: {v: s}\n"
            };
            let values = crate::values::parse_yaml_map(values_text).expect("values");
            let render = |from| {
                let engine = Engine {
                    two_threads_from: Some(from),
                    ..Engine::default()
                };
                engine.render(&chart, &values, &release(), &caps)
            };
            let before = parallel_render_counts();
            let one = render(usize::MAX);
            let two = render(2);
            let after = parallel_render_counts();
            assert_eq!(one, two, "seed {seed}");
            runs += 1;
            // Counts are process-wide (other tests may render meanwhile): informative only.
            if after.1 == before.1 {
                same_run += 1;
            } else {
                fell_back += 1;
            }
            if one.is_err() {
                errors += 1;
            }
        }
        // The generator must give both outcomes, or the comparison proves little.
        assert!(errors > 10 && errors < runs, "{errors} of {runs} failed");
        eprintln!(
            "{runs} charts: {same_run} on two threads to the end, {fell_back} resumed one after the other, {errors} failed"
        );
        assert!(
            same_run > 10 && fell_back > 10,
            "{same_run} kept, {fell_back} fell back"
        );
    }
}
