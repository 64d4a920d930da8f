//! Parsing a chart's templates ahead, on a helper thread, while the caller goes on with
//! decoding the chart (values files above all), dependencies, values, schema validation and
//! the template scopes.
//!
//! Parsing a template depends only on its name, its text and the names of the functions
//! (not on values or on other templates), so `flotilla template` starts it as soon as a
//! chart directory's files are read ([`EarlyParse::start_files`]), or an archive is loaded
//! ([`EarlyParse::start`]). The engine then takes each source's result when
//! it parses the set ([`EarlyParse::take`]), helping with what is left first, and parses
//! itself whatever was not done ahead: a template whose path changes with dependency
//! processing (an alias renames a subchart) or whose bytes are not those parsed. Results
//! are the ones parsing the same name and text gives, errors included, so the set and the
//! first error in Helm's order are what [`flotilla_gotmpl::TemplateSet::parse_all`] gives.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};

use flotilla_gotmpl::{Error, FuncMap, ParsedSource, TemplateSet};

use super::funcs::{FuncOptions, helm_funcs};
use crate::chart::Chart;

/// Actions from which [`EarlyParse::start`] starts a helper (`usize::MAX`: never); the
/// process-wide setting of [`parse_templates_early`].
static EARLY_FROM: AtomicUsize = AtomicUsize::new(usize::MAX);

/// For a process with a core to spare (`flotilla template`): charts whose templates
/// (subcharts' included) hold at least `min_actions` actions (`{{`, counted in files under
/// [`COUNTED_FILE_MAX`] bytes) have them parsed on a helper thread from the moment they are
/// read. Long-running callers need not: the helper exists for the length of one render.
pub fn parse_templates_early(min_actions: usize) {
    EARLY_FROM.store(min_actions, Ordering::Relaxed);
}

/// Files from this size on are left out of the count of actions: long templates are CRDs and
/// other mostly plain text, whose parse costs little, and scanning them would cost charts
/// that stay under the threshold.
const COUNTED_FILE_MAX: usize = 64 << 10;

/// Whether `sources` hold at least `min` actions (see [`parse_templates_early`]).
fn enough_actions(sources: &[(String, Arc<[u8]>)], min: usize) -> bool {
    let mut left = min;
    for (_, text) in sources {
        if left == 0 {
            break;
        }
        if text.len() < COUNTED_FILE_MAX {
            left -= memchr::memmem::find_iter(text, b"{{").take(left).count();
        }
    }
    left == 0
}

/// Results parsed ahead that renders used, in this process.
static TAKEN: AtomicUsize = AtomicUsize::new(0);

/// How many templates parsed ahead renders have used in this process.
pub fn early_parsed_taken() -> usize {
    TAKEN.load(Ordering::Relaxed)
}

/// Stack of the helper: the parser's own budget and room to report an error, as the
/// engine's parsing threads have.
const HELPER_STACK: usize = 4 * flotilla_gotmpl::PARSE_STACK_BUDGET;

/// Templates being parsed ahead (see the module documentation).
pub struct EarlyParse {
    queue: Arc<Queue>,
    helper: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Done once the caller has parsed what was left and the helper has ended.
    finished: Once,
}

impl std::fmt::Debug for EarlyParse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EarlyParse")
            .field("sources", &self.queue.sources.len())
            .finish_non_exhaustive()
    }
}

/// What both threads share: the sources, which one to take next, the results.
struct Queue {
    /// (path as the engine names it, the file's bytes).
    sources: Vec<(String, Arc<[u8]>)>,
    by_name: HashMap<String, usize>,
    /// Source indexes, largest first, so that the last ones taken are small.
    order: Vec<usize>,
    next: AtomicUsize,
    /// Set once no more sources are to be taken (the caller has the rest or gave up).
    stop: AtomicBool,
    results: Vec<Mutex<Option<Result<ParsedSource, Error>>>>,
}

impl Queue {
    /// Takes and parses sources until none is left; `None` results (text that is not
    /// UTF-8, which the engine reads another way) are left to the engine.
    fn work(&self, funcs: &FuncMap) {
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            let k = self.next.fetch_add(1, Ordering::Relaxed);
            let Some(&i) = self.order.get(k) else {
                return;
            };
            let (name, bytes) = &self.sources[i];
            let Ok(text) = std::str::from_utf8(bytes) else {
                continue;
            };
            let parsed = TemplateSet::parse_alone(name, text, Some(bytes), funcs);
            *self.results[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(parsed);
        }
    }
}

impl EarlyParse {
    /// Starts parsing every template of `chart`'s tree as loaded (before dependency
    /// processing) on a helper thread, when [`parse_templates_early`] asks for it and the
    /// tree has enough template code (see [`parse_templates_early`]); `None` otherwise (or when
    /// no thread can be started).
    pub fn start(chart: &Chart) -> Option<Arc<EarlyParse>> {
        if EARLY_FROM.load(Ordering::Relaxed) == usize::MAX {
            return None;
        }
        let mut sources = Vec::new();
        collect_sources(chart, None, &mut sources);
        EarlyParse::start_sources(sources)
    }

    /// [`EarlyParse::start`] on a chart directory's files as read, before they are decoded
    /// ([`crate::load::load_observed`]), `root` being the name in its `Chart.yaml`. A
    /// subchart's templates are named after its directory, which is its name in the charts
    /// this matters for; where it is not (or an alias renames it), the engine finds no result
    /// under the name it uses and parses the template itself.
    pub fn start_files(files: &[crate::File], root: &str) -> Option<Arc<EarlyParse>> {
        if EARLY_FROM.load(Ordering::Relaxed) == usize::MAX {
            return None;
        }
        let sources = files
            .iter()
            .filter_map(|f| Some((engine_name(root, &f.name)?, Arc::clone(&f.data))))
            .collect();
        EarlyParse::start_sources(sources)
    }

    fn start_sources(sources: Vec<(String, Arc<[u8]>)>) -> Option<Arc<EarlyParse>> {
        let min = EARLY_FROM.load(Ordering::Relaxed);
        if sources.is_empty() || !enough_actions(&sources, min) {
            return None;
        }
        let by_name = sources
            .iter()
            .enumerate()
            .map(|(i, (n, _))| (n.clone(), i))
            .collect();
        let mut order: Vec<usize> = (0..sources.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(sources[i].1.len()));
        let results = std::iter::repeat_with(|| Mutex::new(None))
            .take(sources.len())
            .collect();
        let queue = Arc::new(Queue {
            sources,
            by_name,
            order,
            next: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
            results,
        });
        let theirs = Arc::clone(&queue);
        let helper = std::thread::Builder::new()
            .name("early-parse".into())
            .stack_size(HELPER_STACK)
            .spawn(move || {
                // The engine's functions as `flotilla template` has them: parsing only asks
                // which names exist, and every option keeps the same names.
                let funcs = helm_funcs(&FuncOptions::default());
                theirs.work(&funcs);
                TemplateSet::release_parser_memory();
            })
            .ok()?;
        if let Some(cpu) = flotilla_sprig::cpu::current_cpu() {
            flotilla_sprig::cpu::keep_off_cpu(&helper, cpu);
        }
        Some(Arc::new(EarlyParse {
            queue,
            helper: Mutex::new(Some(helper)),
            finished: Once::new(),
        }))
    }

    /// The result of parsing `name` with text `bytes`, if it was parsed ahead: the caller
    /// (with the function map it would parse with) first parses what is left, then waits
    /// for the helper. `None`: parse it now.
    pub fn take(
        &self,
        name: &str,
        bytes: &Arc<[u8]>,
        funcs: &FuncMap,
    ) -> Option<Result<ParsedSource, Error>> {
        let &i = self.queue.by_name.get(name)?;
        if !Arc::ptr_eq(&self.queue.sources[i].1, bytes) {
            return None;
        }
        self.finished.call_once(|| {
            self.queue.work(funcs);
            self.join_helper();
        });
        let taken = self.queue.results[i]
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if taken.is_some() {
            TAKEN.fetch_add(1, Ordering::Relaxed);
        }
        taken
    }

    /// Waits for the helper to end (its panic, should it panic, goes on here).
    fn join_helper(&self) {
        let helper = self.helper.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(h) = helper
            && let Err(panic) = h.join()
        {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for EarlyParse {
    fn drop(&mut self) {
        // A render that failed before parsing: the helper stops after its current source.
        self.queue.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self
            .helper
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = h.join();
        }
    }
}

/// The path the engine gives the template at `rel` in a chart directory named `root`
/// (`templates/x.yaml`: `root/templates/x.yaml`; `charts/sub/templates/y.yaml`:
/// `root/charts/sub/templates/y.yaml`); `None` for any other file.
fn engine_name(root: &str, rel: &str) -> Option<String> {
    let mut name = String::with_capacity(root.len() + rel.len() + 1);
    name.push_str(root);
    let mut rest = rel;
    loop {
        if let Some(t) = rest.strip_prefix("templates/") {
            name.push_str("/templates/");
            name.push_str(t);
            return Some(name);
        }
        let (dir, r) = rest.strip_prefix("charts/")?.split_once('/')?;
        name.push_str("/charts/");
        name.push_str(dir);
        rest = r;
    }
}

/// Every template of the tree with the path the engine gives it (`root/templates/x.yaml`,
/// `root/charts/sub/templates/y.yaml`; a library chart's partials only).
fn collect_sources(chart: &Chart, parent: Option<&str>, out: &mut Vec<(String, Arc<[u8]>)>) {
    let full_path = match parent {
        None => chart.name().to_string(),
        Some(p) => format!("{p}/charts/{}", chart.name()),
    };
    for dep in &chart.dependencies {
        collect_sources(dep, Some(&full_path), out);
    }
    let library = chart.is_library();
    for t in &chart.templates {
        let base = t.name.rsplit('/').next().unwrap_or(&t.name);
        if library && !base.starts_with('_') {
            continue;
        }
        out.push((format!("{full_path}/{}", t.name), Arc::clone(&t.data)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions_are_counted_in_files_under_the_size_limit() {
        let source = |text: &str| (String::new(), Arc::from(text.as_bytes()));
        let big = format!("{{{{ a }}}}{}", " ".repeat(COUNTED_FILE_MAX));
        let sources = vec![
            source("{{ a }} {{- b }}"),
            source(&big),
            source("x {{/* c */}} {{"),
        ];
        assert!(enough_actions(&sources, 4));
        assert!(!enough_actions(&sources, 5));
        assert!(enough_actions(&sources, 0));
    }

    #[test]
    fn files_are_named_as_the_engine_names_templates() {
        let name = |rel: &str| engine_name("app", rel);
        assert_eq!(
            name("templates/a.yaml").as_deref(),
            Some("app/templates/a.yaml")
        );
        assert_eq!(
            name("templates/sub/_h.tpl").as_deref(),
            Some("app/templates/sub/_h.tpl")
        );
        assert_eq!(
            name("charts/db/charts/x/templates/s.yaml").as_deref(),
            Some("app/charts/db/charts/x/templates/s.yaml")
        );
        for other in [
            "values.yaml",
            "crds/a.yaml",
            "charts/db/values.yaml",
            "charts/db.tgz",
            "files/templates/a.yaml",
            "charts/templates/a.yaml",
        ] {
            assert_eq!(name(other), None, "{other}");
        }
    }
}
