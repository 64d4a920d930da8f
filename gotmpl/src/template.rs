//! The template set: named templates parsed from many sources, sharing one namespace
//! (Helm parses every chart file into one set, so every `define` is global).

use std::sync::Arc;

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::ast::{Ast, Span};
use crate::exec::{BUILTIN_NAMES, Ev, Output, Shared, run_template};
use crate::names::NameMap;
use crate::parse::{ParsedTree, Scratch};
use crate::signature::FuncMap;
use crate::value::Value;
use crate::{Error, ExecOptions};

/// Sorts template file names into the order Helm parses (and renders) them
/// (`pkg/engine/engine.go` `sortTemplates`): more `/` first, so subcharts come before their
/// parents, then reverse lexical order. Parsing in this order makes the root chart's
/// definitions win, and `_a.tpl` win over `_b.tpl`.
pub fn sort_in_helm_parse_order<S: AsRef<str>>(names: &mut [S]) {
    names.sort_by(|a, b| {
        let (a, b) = (a.as_ref(), b.as_ref());
        let (sa, sb) = (a.matches('/').count(), b.matches('/').count());
        sb.cmp(&sa).then_with(|| b.cmp(a))
    });
}

/// A source for [`TemplateSet::parse_all`]: its text, and maybe the same bytes held in an
/// `Arc` by the caller.
pub trait TemplateSource: Sync {
    /// The text to parse.
    fn text(&self) -> &str;

    /// The bytes of [`TemplateSource::text`] in an `Arc` the caller keeps anyway (a chart
    /// file): a long source that is mostly plain text (few actions, as a CRD) then keeps them
    /// instead of a copy. Bytes that are not exactly the text's (the same memory) are ignored.
    fn shared_bytes(&self) -> Option<&Arc<[u8]>> {
        None
    }
}

impl TemplateSource for &str {
    fn text(&self) -> &str {
        self
    }
}

impl TemplateSource for String {
    fn text(&self) -> &str {
        self
    }
}

/// Text that may share its bytes with the parsed templates ([`TemplateSource`]).
#[derive(Clone, Copy, Debug)]
pub struct SharedText<'a> {
    /// The text.
    pub text: &'a str,
    /// The same bytes (`text` borrows them), when the caller holds them in an `Arc`.
    pub bytes: Option<&'a Arc<[u8]>>,
}

impl TemplateSource for SharedText<'_> {
    fn text(&self) -> &str {
        self.text
    }

    fn shared_bytes(&self) -> Option<&Arc<[u8]>> {
        self.bytes
    }
}

/// One named template: its body, in the tree of the source it was parsed from (which also
/// gives error positions).
#[derive(Debug)]
pub struct Template {
    pub(crate) name: String,
    pub(crate) parse_name: String,
    pub(crate) ast: Arc<Ast>,
    pub(crate) root: Span,
}

impl Template {
    /// The template's name (a file name, or the name given to `define`/`block`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The name of the source the template was parsed from.
    pub fn parse_name(&self) -> &str {
        &self.parse_name
    }
}

/// A set of named templates. Cloning is cheap and gives an independent namespace, as Go's
/// `Template.Clone` does for Helm's `tpl`: the clone shares the original's table of
/// templates and keeps what is added to it afterwards (`tpl`'s text and its `define`s) in a
/// small table of its own that shadows the shared one, so a `tpl` call costs what its own
/// text holds, not a copy of every template of the chart.
#[derive(Clone, Debug)]
pub struct TemplateSet {
    name: String,
    /// The templates, shared with the sets cloned from this one.
    shared: Arc<NameMap<String, Arc<Template>>>,
    /// Templates added while `shared` had other holders; they shadow `shared`.
    own: NameMap<String, Arc<Template>>,
}

impl TemplateSet {
    /// An empty set. `name` is the set's own name, quoted by
    /// `template: no template "x" associated with template "NAME"` (Helm uses `gotpl`).
    pub fn new(name: impl Into<String>) -> Self {
        TemplateSet {
            name: name.into(),
            shared: Arc::default(),
            own: NameMap::default(),
        }
    }

    /// The set's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Parses `text` as the template `name`, adding it and every template it defines to the
    /// set. A later definition replaces an earlier one of the same name unless its body is
    /// empty (whitespace and comments only); two non-empty definitions in the same text are
    /// an error. Every function a template names must exist in `funcs` or the builtins.
    /// On error the set is unchanged.
    pub fn parse(&mut self, name: &str, text: &str, funcs: &FuncMap) -> Result<(), Error> {
        let parsed = parse_source(name, text, None, funcs)?;
        self.add(parsed);
        Ok(())
    }

    /// Parses `sources` (name, text) in order into the set, exactly as one [`parse`] call
    /// per source in that order would: the same definitions win, and on error the set holds
    /// the sources before the first one (in order) that fails, whose index and error are
    /// returned. With `threads` > 1 the sources are parsed on that many threads (this one
    /// included), each taking the largest source left, and added in order afterwards.
    /// Sources with shared bytes ([`TemplateSource::shared_bytes`]) may be kept rather than
    /// copied.
    ///
    /// [`parse`]: TemplateSet::parse
    pub fn parse_all<N, T>(
        &mut self,
        sources: &[(N, T)],
        funcs: &FuncMap,
        threads: usize,
    ) -> Result<(), (usize, Error)>
    where
        N: AsRef<str> + Sync,
        T: TemplateSource,
    {
        let result = self.parse_all_kept(sources, funcs, threads);
        // What comes next (execution) can use the parser's working memory.
        release_scratch();
        result
    }

    fn parse_all_kept<N, T>(
        &mut self,
        sources: &[(N, T)],
        funcs: &FuncMap,
        threads: usize,
    ) -> Result<(), (usize, Error)>
    where
        N: AsRef<str> + Sync,
        T: TemplateSource,
    {
        let threads = threads.clamp(1, sources.len().max(1));
        if threads == 1 {
            for (i, (name, text)) in sources.iter().enumerate() {
                let parsed = parse_source(name.as_ref(), text.text(), text.shared_bytes(), funcs)
                    .map_err(|e| (i, e))?;
                self.add(parsed);
            }
            return Ok(());
        }
        let parsed = parse_on_threads(sources, funcs, threads);
        for (i, result) in parsed.into_iter().enumerate() {
            self.add(result.map_err(|e| (i, e))?);
        }
        Ok(())
    }

    /// Parses one source on its own, on any thread, as [`TemplateSet::parse_all`] does each
    /// of its sources (`shared`: the bytes `text` borrows, which the trees may keep);
    /// [`TemplateSet::add_parsed`] adds it to a set later. Parsing does not depend on the
    /// set, only on the names `funcs` holds.
    pub fn parse_alone(
        name: &str,
        text: &str,
        shared: Option<&Arc<[u8]>>,
        funcs: &FuncMap,
    ) -> Result<ParsedSource, Error> {
        parse_source(name, text, shared, funcs)
    }

    /// Adds a source parsed by [`TemplateSet::parse_alone`]: sources added in a given order
    /// make the set [`TemplateSet::parse_all`] makes of them in that order.
    pub fn add_parsed(&mut self, parsed: ParsedSource) {
        self.add(parsed);
    }

    /// Frees the calling thread's parser working memory (kept between parses for the
    /// next one); [`TemplateSet::parse_all`] does it when it is done.
    pub fn release_parser_memory() {
        release_scratch();
    }

    /// Adds the trees of one parsed source, in the order its parse met them.
    fn add(&mut self, parsed: ParsedSource) {
        let ParsedSource {
            parse_name,
            ast,
            trees,
        } = parsed;
        for tree in trees {
            if tree.empty && self.contains(&tree.name) {
                continue;
            }
            let t = Arc::new(Template {
                name: tree.name.clone(),
                parse_name: parse_name.clone(),
                ast: Arc::clone(&ast),
                root: tree.root,
            });
            match Arc::get_mut(&mut self.shared) {
                // No clone shares the table: add to it (what an own entry of the same name
                // shadowed is replaced as well).
                Some(table) => {
                    if !self.own.is_empty() {
                        self.own.remove(&tree.name);
                    }
                    table.insert(tree.name, t);
                }
                None => {
                    self.own.insert(tree.name, t);
                }
            }
        }
    }

    /// The template named `name`.
    pub fn get(&self, name: &str) -> Option<&Template> {
        if !self.own.is_empty()
            && let Some(t) = self.own.get(name)
        {
            return Some(t);
        }
        self.shared.get(name).map(Arc::as_ref)
    }

    /// Whether a template named `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// The template names, sorted.
    pub fn names(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self
            .own
            .keys()
            .chain(self.shared.keys().filter(|k| !self.own.contains_key(*k)))
            .map(String::as_str)
            .collect();
        v.sort_unstable();
        v
    }

    /// Executes the template `name` with `data` as dot and `$` (Go's `ExecuteTemplate`).
    /// A [`Value::Nil`] data is Go's nil: dot has no value. The output as text: bytes that
    /// are not UTF-8 (printed Go strings holding binary data) become U+FFFD;
    /// [`TemplateSet::execute_bytes`] keeps them.
    pub fn execute(
        &self,
        name: &str,
        data: &Value,
        funcs: &FuncMap,
        opts: &ExecOptions,
    ) -> Result<String, Error> {
        self.execute_output(name, data, funcs, opts)
            .map(Output::into_text)
    }

    /// [`TemplateSet::execute`] with the output as Go writes it: bytes, valid UTF-8 unless
    /// the template printed a Go string that is not.
    pub fn execute_bytes(
        &self,
        name: &str,
        data: &Value,
        funcs: &FuncMap,
        opts: &ExecOptions,
    ) -> Result<Vec<u8>, Error> {
        self.execute_output(name, data, funcs, opts)
            .map(Output::into_bytes)
    }

    /// [`TemplateSet::execute`] with the output as text when it is UTF-8 (not validated
    /// again), as bytes otherwise.
    pub fn execute_output(
        &self,
        name: &str,
        data: &Value,
        funcs: &FuncMap,
        opts: &ExecOptions,
    ) -> Result<Output, Error> {
        let Some(tmpl) = self.get(name) else {
            return Err(Error::Exec(format!(
                "template: no template {} associated with template {}",
                crate::gofmt::quote(name),
                crate::gofmt::quote(&self.name)
            )));
        };
        let mut shared = Shared::new(funcs, opts);
        let dot = if data.is_nil() {
            Ev::Invalid
        } else {
            Ev::Val(data.clone())
        };
        run_template(&mut shared, self, tmpl, dot)
    }
}

/// One source parsed on its own, before it joins a set.
/// One source parsed on its own ([`TemplateSet::parse_alone`]), not yet in a set: what
/// [`TemplateSet::parse_all`] makes of each source before adding them in order.
pub struct ParsedSource {
    parse_name: String,
    ast: Arc<Ast>,
    trees: Vec<ParsedTree>,
}

impl std::fmt::Debug for ParsedSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedSource")
            .field("parse_name", &self.parse_name)
            .field("trees", &self.trees.len())
            .finish_non_exhaustive()
    }
}

thread_local! {
    /// The parser's working memory on this thread, kept between parses (a chart's sources
    /// are parsed one after another; `tpl` parses again and again).
    static SCRATCH: std::cell::RefCell<Scratch> = std::cell::RefCell::default();
}

/// Frees this thread's parser working memory.
fn release_scratch() {
    SCRATCH.with(|scratch| {
        if let Ok(mut scratch) = scratch.try_borrow_mut() {
            *scratch = Scratch::default();
        }
    });
}

fn parse_source(
    name: &str,
    text: &str,
    shared: Option<&Arc<[u8]>>,
    funcs: &FuncMap,
) -> Result<ParsedSource, Error> {
    let has = |n: &str| funcs.contains(n) || BUILTIN_NAMES.contains(&n);
    let parsed = SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
        Ok(mut scratch) => crate::parse::parse(name, text, shared, &has, &mut scratch),
        Err(_) => crate::parse::parse(name, text, shared, &has, &mut Scratch::default()),
    });
    let (ast, trees) = parsed.map_err(Error::Parse)?;
    Ok(ParsedSource {
        parse_name: name.to_string(),
        ast: Arc::new(ast),
        trees,
    })
}

/// Stack of a parsing thread: room for the parser's own budget (it stops at
/// [`crate::PARSE_STACK_BUDGET`] bytes below its entry) and for reporting the error.
/// Untouched pages cost nothing.
const PARSE_THREAD_STACK: usize = 4 * crate::parse::PARSE_STACK_BUDGET;

/// How the embedding program places the helper threads [`TemplateSet::parse_all`] starts
/// (e.g. off the CPU of the thread that starts them), without this crate making system
/// calls of its own: `before_spawn` runs on the spawning thread and its result is given to
/// `in_helper`, which the helper runs first; `after_spawn` runs on the spawning thread once
/// the helper is started.
#[derive(Debug, Clone, Copy)]
pub struct HelperThreadHooks {
    /// On the spawning thread, before the helper is started.
    pub before_spawn: fn() -> usize,
    /// First thing on the helper, with what `before_spawn` returned.
    pub in_helper: fn(usize),
    /// On the spawning thread, once the helper is started.
    pub after_spawn: fn(),
}

static HELPER_THREAD_HOOKS: std::sync::RwLock<Option<HelperThreadHooks>> =
    std::sync::RwLock::new(None);

/// Installs (or, with `None`, removes) the process-wide [`HelperThreadHooks`].
pub fn set_helper_thread_hooks(hooks: Option<HelperThreadHooks>) {
    *HELPER_THREAD_HOOKS
        .write()
        .unwrap_or_else(|p| p.into_inner()) = hooks;
}

/// Parses every source on `threads` threads (this one and `threads - 1` spawned), each
/// taking the largest source not yet taken; the results come back in the sources' order.
fn parse_on_threads<N, T>(
    sources: &[(N, T)],
    funcs: &FuncMap,
    threads: usize,
) -> Vec<Result<ParsedSource, Error>>
where
    N: AsRef<str> + Sync,
    T: TemplateSource,
{
    // Largest first, so that the last sources taken are small and the threads end together.
    let mut by_size: Vec<usize> = (0..sources.len()).collect();
    by_size.sort_by_key(|&i| std::cmp::Reverse(sources[i].1.text().len()));
    let next = AtomicUsize::new(0);
    let work = || {
        let mut done = Vec::new();
        loop {
            let k = next.fetch_add(1, Ordering::Relaxed);
            let Some(&i) = by_size.get(k) else {
                return done;
            };
            let (name, text) = &sources[i];
            done.push((
                i,
                parse_source(name.as_ref(), text.text(), text.shared_bytes(), funcs),
            ));
        }
    };
    let mut slots: Vec<Option<Result<ParsedSource, Error>>> = std::iter::repeat_with(|| None)
        .take(sources.len())
        .collect();
    let hooks = *HELPER_THREAD_HOOKS
        .read()
        .unwrap_or_else(|p| p.into_inner());
    std::thread::scope(|scope| {
        let helpers: Vec<_> = (1..threads)
            .map(|_| {
                let token = hooks.map(|h| (h.before_spawn)());
                let helper = std::thread::Builder::new()
                    .name("gotmpl-parse".to_string())
                    .stack_size(PARSE_THREAD_STACK)
                    .spawn_scoped(scope, move || {
                        if let (Some(h), Some(token)) = (hooks, token) {
                            (h.in_helper)(token);
                        }
                        work()
                    });
                if let Some(h) = hooks {
                    (h.after_spawn)();
                }
                helper
            })
            .collect();
        let mut all = work();
        // A thread that could not be started took nothing: this one parsed it all.
        for handle in helpers.into_iter().flatten() {
            match handle.join() {
                Ok(done) => all.extend(done),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        for (i, r) in all {
            slots[i] = Some(r);
        }
    });
    slots
        .into_iter()
        .map(|r| r.expect("every source is taken by exactly one thread"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a set holds: every template's name and the source its body came from (one
    /// source defines a name once).
    fn contents(set: &TemplateSet) -> Vec<(String, String)> {
        set.names()
            .into_iter()
            .map(|n| {
                (
                    n.to_string(),
                    set.get(n).expect("listed").parse_name.clone(),
                )
            })
            .collect()
    }

    /// Sources in parse order: redefinitions (a later non-empty body wins, an empty one keeps
    /// the earlier), sizes that make the threads take them out of order, and parse errors in
    /// two places.
    fn sources() -> Vec<(String, String)> {
        let mut v = Vec::new();
        for i in 0..24 {
            let body =
                "row {{ .Values.x }} {{ if .a }}{{ .b }}{{ end }}\n".repeat(1 + (i * 7) % 40);
            let define = match i % 4 {
                0 => format!(r#"{{{{ define "x" }}}}{i}{{{{ end }}}}"#),
                1 => r#"{{ define "x" }}{{/* empty */}}{{ end }}"#.to_string(),
                2 => format!(r#"{{{{ define "y{}" }}}}{i}{{{{ end }}}}"#, i % 3),
                _ => String::new(),
            };
            let text = define + &body;
            v.push((format!("c/templates/t{i:02}.yaml"), text));
        }
        v
    }

    type Outcome = (Vec<(String, String)>, Option<(usize, Error)>);

    /// One `parse` call per source, stopping at the first error.
    fn sequential(sources: &[(String, String)]) -> Outcome {
        let funcs = FuncMap::new();
        let mut set = TemplateSet::new("gotpl");
        for (i, (name, text)) in sources.iter().enumerate() {
            if let Err(e) = set.parse(name, text, &funcs) {
                return (contents(&set), Some((i, e)));
            }
        }
        (contents(&set), None)
    }

    #[test]
    fn parsing_on_threads_gives_the_set_and_first_error_of_one_parse_per_source() {
        let ok = sources();
        let mut broken = sources();
        broken[9].1.push_str("{{ nope }}");
        broken[17].1.push_str("{{ .a");
        let mut broken_late = sources();
        broken_late[23].1.push_str("{{ end }}");
        let funcs = FuncMap::new();
        for srcs in [&ok, &broken, &broken_late] {
            let (want, want_err) = sequential(srcs);
            for threads in 1..=4 {
                let mut set = TemplateSet::new("gotpl");
                let err = set.parse_all(srcs, &funcs, threads).err();
                assert_eq!(err, want_err, "{threads} threads");
                assert_eq!(contents(&set), want, "{threads} threads");
            }
        }
        let (_, err) = sequential(&broken);
        let (i, e) = err.expect("source 9 fails");
        assert_eq!(i, 9);
        assert!(
            e.to_string().starts_with("template: c/templates/t09.yaml:"),
            "{e}"
        );
        let (held, _) = sequential(&ok);
        let x = held.iter().find(|(n, _)| n == "x").expect("x defined");
        assert_eq!(
            x.1, "c/templates/t20.yaml",
            "the last non-empty definition wins"
        );
    }

    fn run(set: &TemplateSet, name: &str) -> String {
        set.execute(name, &Value::Nil, &FuncMap::new(), &ExecOptions::helm())
            .expect("executes")
    }

    #[test]
    fn a_clone_shares_the_templates_and_keeps_what_it_adds_to_itself() {
        let funcs = FuncMap::new();
        let mut set = TemplateSet::new("gotpl");
        set.parse(
            "a",
            r#"{{ define "x" }}base{{ end }}{{ define "y" }}y{{ end }}"#,
            &funcs,
        )
        .expect("parses");
        let mut clone = set.clone();
        clone
            .parse(
                "gotpl",
                r#"{{ define "x" }}clone{{ end }}{{ define "y" }} {{ end }}{{ define "z" }}z{{ end }}"#,
                &funcs,
            )
            .expect("parses");
        // The clone's definitions win in the clone; an empty one keeps the shared body.
        assert_eq!(run(&clone, "x"), "clone");
        assert_eq!(run(&clone, "y"), "y");
        assert_eq!(run(&clone, "z"), "z");
        assert_eq!(clone.names(), ["a", "gotpl", "x", "y", "z"]);
        // Nothing leaks into the original.
        assert_eq!(run(&set, "x"), "base");
        assert!(!set.contains("z") && !set.contains("gotpl"));
        assert_eq!(set.names(), ["a", "x", "y"]);
        // A clone of the clone sees both layers; what it adds stays in it.
        let mut deeper = clone.clone();
        deeper
            .parse(
                "gotpl",
                r#"{{ define "w" }}{{ template "z" }}w{{ end }}"#,
                &funcs,
            )
            .expect("parses");
        assert_eq!(run(&deeper, "w"), "zw");
        assert_eq!(run(&deeper, "x"), "clone");
        assert!(!clone.contains("w"));
        // The original, parsed into while clones share its table, keeps its own additions
        // from them, and the clones keep theirs.
        set.parse(
            "b",
            r#"{{ define "x" }}second{{ end }}{{ define "v" }}v{{ end }}"#,
            &funcs,
        )
        .expect("parses");
        assert_eq!(run(&set, "x"), "second");
        assert_eq!(run(&clone, "x"), "clone");
        assert!(!clone.contains("v") && !deeper.contains("v"));
        assert_eq!(set.names(), ["a", "b", "v", "x", "y"]);
        // Once no clone is left, a later definition replaces the one added meanwhile.
        drop((clone, deeper));
        set.parse("c", r#"{{ define "x" }}third{{ end }}"#, &funcs)
            .expect("parses");
        assert_eq!(run(&set, "x"), "third");
        assert_eq!(set.names(), ["a", "b", "c", "v", "x", "y"]);
    }

    #[test]
    fn only_long_mostly_plain_sources_keep_the_callers_bytes() {
        let funcs = FuncMap::new();
        let crd = format!("{}{{{{ .x }}}}\n", "plain: text é\n".repeat(2000));
        let helpers = "{{ .x }}\n".repeat(3000);
        let short = "plain {{ .x }}".to_string();
        let opts = ExecOptions::helm();
        for (text, shared) in [(crd, true), (helpers, false), (short, false)] {
            let bytes: Arc<[u8]> = Arc::from(text.as_bytes());
            let own = std::str::from_utf8(&bytes).expect("UTF-8");
            let elsewhere = text.as_str();
            for (view, want) in [(own, shared), (elsewhere, false)] {
                let source = SharedText {
                    text: view,
                    bytes: Some(&bytes),
                };
                let mut set = TemplateSet::new("gotpl");
                set.parse_all(&[("t", source)], &funcs, 1).expect("parses");
                let tmpl = set.get("t").expect("parsed");
                assert_eq!(tmpl.ast.is_shared(), want, "{} bytes", text.len());
                let mut copy = TemplateSet::new("gotpl");
                copy.parse("t", &text, &funcs).expect("parses");
                assert_eq!(
                    set.execute("t", &Value::Nil, &funcs, &opts),
                    copy.execute("t", &Value::Nil, &funcs, &opts)
                );
            }
        }
    }

    #[test]
    fn helper_thread_hooks_run_around_each_helper_and_change_nothing_else() {
        use std::sync::atomic::AtomicUsize;
        static BEFORE: AtomicUsize = AtomicUsize::new(0);
        static IN_HELPER: AtomicUsize = AtomicUsize::new(0);
        static AFTER: AtomicUsize = AtomicUsize::new(0);
        static HELPER_ON_ANOTHER_THREAD: AtomicUsize = AtomicUsize::new(0);
        std::thread_local! {
            static SPAWNER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        }
        fn before() -> usize {
            SPAWNER.with(|s| s.set(true));
            BEFORE.fetch_add(1, Ordering::SeqCst);
            41
        }
        fn in_helper(token: usize) {
            assert_eq!(token, 41);
            if !SPAWNER.with(|s| s.get()) {
                HELPER_ON_ANOTHER_THREAD.fetch_add(1, Ordering::SeqCst);
            }
            IN_HELPER.fetch_add(1, Ordering::SeqCst);
        }
        fn after() {
            AFTER.fetch_add(1, Ordering::SeqCst);
        }
        let srcs = sources();
        let funcs = FuncMap::new();
        let (want, want_err) = sequential(&srcs);
        set_helper_thread_hooks(Some(HelperThreadHooks {
            before_spawn: before,
            in_helper,
            after_spawn: after,
        }));
        let mut set = TemplateSet::new("gotpl");
        let err = set.parse_all(&srcs, &funcs, 3).err();
        set_helper_thread_hooks(None);
        assert_eq!(err, want_err);
        assert_eq!(contents(&set), want);
        // Two helpers for three threads (other tests of this process may add theirs while
        // the hooks are installed, never fewer).
        assert!(BEFORE.load(Ordering::SeqCst) >= 2);
        assert!(AFTER.load(Ordering::SeqCst) >= 2);
        assert!(IN_HELPER.load(Ordering::SeqCst) >= 2);
        assert_eq!(
            HELPER_ON_ANOTHER_THREAD.load(Ordering::SeqCst),
            IN_HELPER.load(Ordering::SeqCst)
        );
    }

    #[test]
    fn parsing_no_sources_on_threads_leaves_the_set_empty() {
        let mut set = TemplateSet::new("gotpl");
        let none: &[(&str, &str)] = &[];
        assert_eq!(set.parse_all(none, &FuncMap::new(), 2), Ok(()));
        assert!(set.names().is_empty());
    }
}
