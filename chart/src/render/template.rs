//! The `helm template` action (`pkg/cmd/template.go`, `pkg/cmd/install.go runInstall`,
//! `pkg/action/install.go` in client-only dry-run mode, `pkg/action/action.go
//! renderResources`): user values, chart checks, dependencies, coalescing, schema, render,
//! notes, hooks, kind order, CRDs and the exact stdout Helm prints.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use regex::Regex;

use super::engine::{Engine, ReleaseOptions};
use super::funcs::Lookup;
use super::manifest::{INSTALL_ORDER, Manifest, slog_value, sort_manifests};
use super::objects::{Capabilities, KubeVersion};
use crate::chart::Chart;
use crate::release::{Hook, HookEvent};
use crate::strvals::ValueOptions;
use crate::values::Values;

/// Everything `helm template NAME CHART [flags]` takes that this renderer supports.
#[derive(Debug, Clone, Default)]
pub struct TemplateOptions {
    /// Release name (`NAME`).
    pub release_name: String,
    /// `--namespace` (empty: `default`).
    pub namespace: String,
    /// `-f` files, in order.
    pub value_files: Vec<String>,
    /// `--set`.
    pub set: Vec<String>,
    /// `--set-string`.
    pub set_string: Vec<String>,
    /// `--set-json`.
    pub set_json: Vec<String>,
    /// `--set-file`.
    pub set_file: Vec<String>,
    /// `--set-literal`.
    pub set_literal: Vec<String>,
    /// `--output-dir`: manifests, CRDs and hooks go to files under it instead of stdout
    /// (see [`TemplateOutput::files`]).
    pub output_dir: Option<String>,
    /// `--release-name`: with `--output-dir`, manifests and hooks go under
    /// `OUTPUT_DIR/RELEASE` (CRDs stay directly under `OUTPUT_DIR`, as in Helm).
    pub use_release_name: bool,
    /// `--kube-version`.
    pub kube_version: Option<String>,
    /// `--api-versions` (each may hold several, comma-separated).
    pub api_versions: Vec<String>,
    /// `--include-crds`.
    pub include_crds: bool,
    /// `--skip-tests`.
    pub skip_tests: bool,
    /// `--no-hooks`.
    pub no_hooks: bool,
    /// `--show-only`.
    pub show_only: Vec<String>,
    /// `--is-upgrade`.
    pub is_upgrade: bool,
    /// `--skip-schema-validation`.
    pub skip_schema_validation: bool,
    /// HelmRelease `postRenderers` entries, run over the rendered files as Helm v4 runs a
    /// post-renderer (see [`crate::postrender::post_render_files`]).
    pub post_renderers: Vec<crate::postrender::PostRenderer>,
}

/// A successful run: what Helm prints on stdout, and the log lines it prints on stderr.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TemplateOutput {
    /// stdout, byte for byte (after the `wrote PATH` lines of [`Self::files`], which the
    /// caller prints as it writes them).
    pub stdout: Stdout,
    /// stderr lines (`level=INFO msg=...`), in order.
    pub warnings: Vec<String>,
    /// With `--output-dir`: the files to write, in Helm's order.
    pub files: Vec<OutputFile>,
}

/// What `helm template` prints on stdout, kept as the pieces it is made of (the rendered
/// documents moved, not copied, and `crds/` files shared with the chart) so that a caller
/// can write it out without first joining it into one more copy of the whole output.
#[derive(Debug, Clone, Default)]
pub struct Stdout {
    pieces: Vec<Piece>,
}

#[derive(Debug, Clone)]
enum Piece {
    Static(&'static str),
    Owned(String),
    /// A chart file's bytes, valid UTF-8.
    Shared(Arc<[u8]>),
}

impl Piece {
    fn as_str(&self) -> &str {
        match self {
            Piece::Static(s) => s,
            Piece::Owned(s) => s,
            // Only valid UTF-8 is stored as shared bytes (see `Stdout::push_file`).
            Piece::Shared(b) => std::str::from_utf8(b).unwrap_or_default(),
        }
    }
}

impl Stdout {
    fn push_static(&mut self, s: &'static str) {
        self.pieces.push(Piece::Static(s));
    }

    fn push(&mut self, s: String) {
        if !s.is_empty() {
            self.pieces.push(Piece::Owned(s));
        }
    }

    /// A chart file as text: shared when it is valid UTF-8; otherwise (as everywhere a
    /// file becomes text here) with U+FFFD for the invalid bytes.
    fn push_file(&mut self, data: &Arc<[u8]>) {
        match crate::utf8_lossy(data) {
            std::borrow::Cow::Borrowed(_) => self.pieces.push(Piece::Shared(data.clone())),
            std::borrow::Cow::Owned(s) => self.push(s),
        }
    }

    /// `---\n# Source: NAME\nDATA\n`, the block Helm prints for each document.
    fn push_document(&mut self, name: String, data: String) {
        self.push_static("---\n# Source: ");
        self.push(name);
        self.push_static("\n");
        self.push(data);
        self.push_static("\n");
    }

    /// `strings.TrimSpace` of everything pushed so far, which starts with `---` when it is
    /// not empty: only trailing white space goes.
    fn trim_end(&mut self) {
        while let Some(last) = self.pieces.last_mut() {
            let text = last.as_str();
            let kept = text.trim_end().len();
            if kept == text.len() {
                break;
            }
            match last {
                _ if kept == 0 => {
                    self.pieces.pop();
                }
                Piece::Static(s) => *s = &s[..kept],
                Piece::Owned(s) => s.truncate(kept),
                Piece::Shared(b) => {
                    let owned = String::from_utf8_lossy(&b[..kept]).into_owned();
                    *last = Piece::Owned(owned);
                }
            }
        }
    }

    /// The output's length in bytes.
    pub fn len(&self) -> usize {
        self.pieces.iter().map(|p| p.as_str().len()).sum()
    }

    /// Whether nothing is printed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the output piece by piece.
    pub fn write_to(&self, out: &mut dyn std::io::Write) -> std::io::Result<()> {
        for p in &self.pieces {
            out.write_all(p.as_str().as_bytes())?;
        }
        Ok(())
    }

    /// The whole output as one string.
    pub fn to_text(&self) -> String {
        let mut s = String::with_capacity(self.len());
        for p in &self.pieces {
            s.push_str(p.as_str());
        }
        s
    }
}

impl From<String> for Stdout {
    fn from(s: String) -> Self {
        let mut out = Stdout::default();
        out.push(s);
        out
    }
}

impl std::fmt::Display for Stdout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.pieces.iter().try_for_each(|p| f.write_str(p.as_str()))
    }
}

impl PartialEq for Stdout {
    /// Equal when the printed text is, however it is split into pieces.
    fn eq(&self, other: &Self) -> bool {
        self.len() == other.len() && self.to_text() == other.to_text()
    }
}

impl Eq for Stdout {}

impl PartialEq<str> for Stdout {
    fn eq(&self, other: &str) -> bool {
        let mut rest = other.as_bytes();
        for p in &self.pieces {
            let Some(after) = rest.strip_prefix(p.as_str().as_bytes()) else {
                return false;
            };
            rest = after;
        }
        rest.is_empty()
    }
}

/// One write of `helm template --output-dir` (`writeToFile`): the caller creates the
/// parent directories (mode 0755), creates or appends to `path` as [`WriteMode`] says,
/// writes `content`, then prints `wrote PATH` on stdout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputFile {
    /// `OUTPUT_DIR/NAME`, joined as Helm joins it (no cleaning), which is also what the
    /// `wrote` line prints.
    pub path: String,
    /// `---\n# Source: NAME\nDATA\n`.
    pub content: String,
    /// Whether to truncate or append.
    pub mode: WriteMode,
}

/// How Helm decides between truncating and appending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Manifests and CRDs: append when this run already wrote the path, otherwise create
    /// (truncating what a previous run left). A failure is a rendering error
    /// ([`WriteMode::error_message`] adds Helm's `--debug` hint).
    AppendIfWrittenInThisRun,
    /// Hooks: append when the file exists on disk at all, otherwise create.
    AppendIfExists,
}

impl WriteMode {
    /// The `Error:` text of `helm template` when writing fails with `cause` (Go's error
    /// text, e.g. `open out/x: permission denied`).
    pub fn error_message(self, cause: &str) -> String {
        match self {
            WriteMode::AppendIfWrittenInThisRun => {
                format!("{cause}\n\nUse --debug flag to render out invalid YAML")
            }
            WriteMode::AppendIfExists => cause.to_string(),
        }
    }
}

/// A failed run: the message Helm prints after `Error: `, and the log lines before it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct TemplateError {
    /// The error message (without `Error: `).
    pub message: String,
    /// stderr lines printed before the error.
    pub warnings: Vec<String>,
    /// With `--output-dir`: files Helm writes before it fails (`--show-only` fails after).
    pub files: Vec<OutputFile>,
}

/// What an install renders (`renderResources`): the release manifest, hooks and notes.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RenderedRelease {
    /// `release.Manifest`: `---\n# Source: PATH\nDOC\n` per manifest in install order
    /// (CRDs from `crds/` first when asked for).
    pub manifest: String,
    /// Hooks, in kind order (execution order by weight is the executor's business).
    pub hooks: Vec<Hook>,
    /// The root chart's rendered `NOTES.txt`.
    pub notes: String,
    /// The ordinary manifests, sorted.
    pub manifests: Vec<Manifest>,
}

/// Inputs of [`render_release`] beyond the chart and values.
#[derive(Debug, Clone)]
pub struct RenderOptions {
    /// `.Release`.
    pub release: ReleaseOptions,
    /// `.Capabilities`.
    pub capabilities: Capabilities,
    /// Put `crds/` files at the head of the manifest (`helm template --include-crds`).
    pub include_crds: bool,
    /// Skip `values.schema.json` validation.
    pub skip_schema_validation: bool,
    /// Withhold every schema message that would quote a value (see
    /// [`crate::schema::validate_against_schema_redacted`]): for messages that reach
    /// conditions, Events and logs, where values may hold Secret data. `helm template`
    /// quotes them.
    pub redact_schema_values: bool,
    /// The cluster behind `lookup` (none: empty results, as `helm template`).
    pub lookup: Option<Arc<dyn Lookup>>,
    /// The remote documents the chart's schemas `$ref` (fetched by the caller:
    /// [`crate::schema::remote`]); without them such a schema fails as Helm fails to load one.
    pub remote_schemas: crate::schema::remote::RemoteSchemas,
}

/// Where a failure happened: before the release existed, or while rendering it (Helm then
/// still has a release to show, which `helm template` mentions).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReleaseRenderError {
    /// Dependencies, coalescing or schema validation failed.
    #[error("{0}")]
    Values(String),
    /// Rendering, notes or manifest sorting failed.
    #[error("{0}")]
    Render(String),
}

/// Helm's release name pattern, `^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`:
/// dot-separated labels of lowercase letters, digits and `-`, none empty and none starting
/// or ending with `-`.
fn is_release_name(name: &str) -> bool {
    name.split('.').all(|label| {
        !label.is_empty()
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    })
}

/// `chartutil.ValidateReleaseName`.
pub fn validate_release_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > 53 || !is_release_name(name) {
        return Err("invalid release name, must match regex ^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$ and the length must not be longer than 53".to_string());
    }
    Ok(())
}

/// `CRDObjects()`: `crds/` files of the chart and its subcharts, with their full paths.
pub fn crd_objects(chart: &Chart) -> Vec<(String, &crate::File)> {
    fn rec<'a>(c: &'a Chart, full: &str, out: &mut Vec<(String, &'a crate::File)>) {
        for f in c.crd_files() {
            out.push((format!("{full}/{}", f.name), f));
        }
        for d in &c.dependencies {
            rec(d, &format!("{full}/charts/{}", d.name()), out);
        }
    }
    let mut out = Vec::new();
    rec(chart, chart.name(), &mut out);
    out
}

/// Install's rendering half on an already dependency-processed chart: coalesce `user`
/// values, validate them, render, extract notes, sort hooks and manifests, build the
/// release manifest. `warnings` receives Helm's log lines.
pub fn render_release(
    chart: &Chart,
    user: &Values,
    opts: &RenderOptions,
    warnings: &mut Vec<String>,
) -> Result<RenderedRelease, ReleaseRenderError> {
    render_release_post_rendered(chart, user, opts, &[], PostRenderHooks::Combined, warnings)
}

/// How hooks meet the post-renderers (Helm v4's `PostRenderStrategy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PostRenderHooks {
    /// `combined` (Helm v4's default): every template file goes through them in one stream
    /// before hooks and manifests are sorted.
    #[default]
    Combined,
    /// `separate` (Helm v4.2): hooks and manifests are sorted first, then each group goes
    /// through them in a stream of its own (so an object in both is no duplicate), and the
    /// results are sorted again together.
    Separate,
    /// `nohooks` (Helm 3's behaviour): only the non-hook documents go through them, after
    /// sorting.
    Excluded,
}

/// [`render_release`] with post-renderers run over the rendered files (CRDs from `crds/` and
/// notes never), as Helm v4 does, hooks as `hooks` says.
pub fn render_release_post_rendered(
    chart: &Chart,
    user: &Values,
    opts: &RenderOptions,
    post_renderers: &[crate::postrender::PostRenderer],
    hooks: PostRenderHooks,
    warnings: &mut Vec<String>,
) -> Result<RenderedRelease, ReleaseRenderError> {
    let sorted = render_sorted(
        chart,
        HandedOver::default(),
        user,
        opts,
        post_renderers,
        hooks,
        warnings,
    )?;
    let mut manifest = String::new();
    if opts.include_crds {
        for (path, f) in crd_objects(chart) {
            manifest.push_str("---\n# Source: ");
            manifest.push_str(&path);
            manifest.push('\n');
            manifest.push_str(&crate::utf8_lossy(&f.data));
            manifest.push('\n');
        }
    }
    for m in &sorted.manifests {
        manifest.push_str("---\n# Source: ");
        manifest.push_str(&m.name);
        manifest.push('\n');
        manifest.push_str(&m.content);
        manifest.push('\n');
    }
    Ok(RenderedRelease {
        manifest,
        hooks: sorted.hooks,
        notes: sorted.notes,
        manifests: sorted.manifests,
    })
}

/// What [`render_sorted`] returns: a [`RenderedRelease`] before its manifest text is built.
struct SortedRelease {
    manifests: Vec<Manifest>,
    hooks: Vec<Hook>,
    notes: String,
}

/// What a caller that owns the chart hands to [`render_sorted`] beyond it.
#[derive(Default)]
struct HandedOver {
    /// When given, they stand for `chart.values` (which is then not read): the caller gives
    /// them up so that coalescing moves them instead of copying them.
    defaults: Option<Values>,
    /// The chart's templates as parsed ahead.
    early_parse: Option<Arc<super::EarlyParse>>,
}

/// Coalesce, validate, render, take the notes out, post-render and sort.
fn render_sorted(
    chart: &Chart,
    handed: HandedOver,
    user: &Values,
    opts: &RenderOptions,
    post_renderers: &[crate::postrender::PostRenderer],
    hooks: PostRenderHooks,
    warnings: &mut Vec<String>,
) -> Result<SortedRelease, ReleaseRenderError> {
    let HandedOver {
        defaults,
        early_parse,
    } = handed;
    let mut coalesce_warnings = Vec::new();
    let values = match defaults {
        Some(d) => {
            crate::coalesce::coalesce_values_with_defaults(chart, d, user, &mut coalesce_warnings)
        }
        None => crate::coalesce::coalesce_values(chart, user, &mut coalesce_warnings),
    };
    warnings.extend(coalesce_warnings.iter().map(|w| w.to_string()));
    let values = values.map_err(|e| ReleaseRenderError::Values(e.to_string()))?;
    if !opts.skip_schema_validation {
        let validated = crate::schema::validate_against_schema_with(
            chart,
            &values,
            &opts.remote_schemas,
            opts.redact_schema_values,
        );
        validated.map_err(|e| ReleaseRenderError::Values(e.to_string()))?;
    }

    let caps = &opts.capabilities;
    let kv = &chart.metadata.kube_version;
    if !kv.is_empty() && !crate::semver::is_compatible_range(kv, caps.kube_version.string()) {
        return Err(ReleaseRenderError::Render(format!(
            "chart requires kubeVersion: {kv} which is incompatible with Kubernetes {}",
            caps.kube_version.version
        )));
    }
    let engine = Engine {
        lookup: opts.lookup.clone(),
        early_parse,
        ..Engine::default()
    };
    let mut files = engine
        .render_owned(chart, values, &opts.release, caps)
        .map_err(|e| ReleaseRenderError::Render(e.0))?;

    let root_notes = format!("{}/templates/NOTES.txt", chart.name());
    let notes = files.remove(&root_notes).unwrap_or_default();
    files.retain(|k, _| !k.ends_with("NOTES.txt"));
    let post_render = |files: &BTreeMap<String, String>, group: &str| {
        crate::postrender::post_render_files(files, post_renderers).map_err(|e| {
            ReleaseRenderError::Render(format!("error while running post render on {group}: {e}"))
        })
    };
    if hooks == PostRenderHooks::Combined && !post_renderers.is_empty() {
        files = post_render(&files, "files")?;
    }

    let mut sorted = sort_manifests(&files, INSTALL_ORDER)
        .map_err(|e| ReleaseRenderError::Render(e.to_string()))?;
    // The documents are copies: the rendered files are not needed any more.
    drop(files);
    warnings.extend(std::mem::take(&mut sorted.warnings));
    if hooks != PostRenderHooks::Combined && !post_renderers.is_empty() {
        // Only the release's own documents, regrouped by the file they came from.
        let mut manifests: BTreeMap<String, String> = BTreeMap::new();
        for m in &sorted.manifests {
            append_document(&mut manifests, &m.name, &m.content);
        }
        let mut rendered = post_render(&manifests, "manifests")?;
        if hooks == PostRenderHooks::Separate {
            // The hooks in a stream of their own, then everything sorted together, as Helm's
            // `renderResources` does.
            let mut hook_files: BTreeMap<String, String> = BTreeMap::new();
            for h in &sorted.hooks {
                append_document(&mut hook_files, &h.path, &h.manifest);
            }
            for (path, text) in post_render(&hook_files, "hooks")? {
                append_document(&mut rendered, &path, &text);
            }
            sorted.hooks.clear();
        }
        let resorted = sort_manifests(&rendered, INSTALL_ORDER)
            .map_err(|e| ReleaseRenderError::Render(e.to_string()))?;
        warnings.extend(resorted.warnings);
        sorted.manifests = resorted.manifests;
        sorted.hooks.extend(resorted.hooks);
    }

    Ok(SortedRelease {
        manifests: sorted.manifests,
        hooks: sorted.hooks,
        notes,
    })
}

/// Adds a document to the text of file `path` (`---`-separated, as Helm joins a file's
/// documents when it regroups them).
fn append_document(files: &mut BTreeMap<String, String>, path: &str, document: &str) {
    let text = files.entry(path.to_owned()).or_default();
    if !text.is_empty() {
        text.push_str("\n---\n");
    }
    text.push_str(document);
}

fn io_error_text(op: &str, path: &str, e: &std::io::Error) -> String {
    let why = match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
        std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
        std::io::ErrorKind::IsADirectory => return format!("read {path}: is a directory"),
        _ => e.to_string(),
    };
    format!("{op} {path}: {why}")
}

/// `LocateChart` for a local path.
fn locate_chart(reference: &str) -> Result<&Path, String> {
    let p = Path::new(reference);
    if p.exists() {
        return Ok(p);
    }
    if p.is_absolute() || reference.starts_with('.') {
        return Err(format!(
            "path {} not found",
            flotilla_gotmpl::gofmt::quote(reference)
        ));
    }
    match reference.split_once('/') {
        None => Err(format!(
            "non-absolute URLs should be in form of repo_name/path_to_chart, got: {reference}"
        )),
        Some((repo, _)) => Err(format!("repo {repo} not found")),
    }
}

/// The user values of a Helm command (`values.Options.MergeValues`), reading `-f` and
/// `--set-file` files.
pub fn merge_user_values(opts: &TemplateOptions) -> Result<Values, String> {
    let mut vo = ValueOptions {
        json_values: opts.set_json.clone(),
        values: opts.set.clone(),
        string_values: opts.set_string.clone(),
        file_values: opts.set_file.clone(),
        literal_values: opts.set_literal.clone(),
        ..ValueOptions::default()
    };
    let mut read_failure = None;
    for path in &opts.value_files {
        let data = if path == "-" {
            let mut buf = Vec::new();
            std::io::Read::read_to_end(&mut std::io::stdin(), &mut buf)
                .map(|_| buf)
                .map_err(|e| e.to_string())
        } else {
            std::fs::read(path).map_err(|e| io_error_text("open", path, &e))
        };
        match data {
            Ok(d) => vo.value_files.push((path.clone(), d)),
            Err(e) => {
                read_failure = Some(e);
                break;
            }
        }
    }
    if let Some(e) = read_failure {
        // Files before the unreadable one were parsed first.
        let earlier = ValueOptions {
            value_files: vo.value_files.clone(),
            ..ValueOptions::default()
        };
        earlier
            .merge(&mut |_| Ok(serde_json::Value::Null))
            .map_err(|e| e.to_string())?;
        return Err(e);
    }
    vo.merge(&mut |path: &str| {
        std::fs::read(path)
            .map(|d| serde_json::Value::String(String::from_utf8_lossy(&d).into_owned()))
            .map_err(|e| io_error_text("open", path, &e))
    })
    .map_err(|e| e.to_string())
}

fn fail(message: impl Into<String>, warnings: &[String]) -> TemplateError {
    TemplateError {
        message: message.into(),
        warnings: warnings.to_vec(),
        files: Vec::new(),
    }
}

/// `CheckDependencies`: every dependency named in Chart.yaml must be present in `charts/`.
fn check_dependencies(chart: &Chart) -> Result<(), String> {
    let Some(reqs) = chart
        .metadata
        .dependencies
        .as_ref()
        .filter(|r| !r.is_empty())
    else {
        return Ok(());
    };
    let missing: Vec<&str> = reqs
        .iter()
        .filter(|r| !chart.dependencies.iter().any(|d| d.name() == r.name))
        .map(|r| r.name.as_str())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "an error occurred while checking for chart dependencies. You may need to run `helm dependency build` to fetch missing dependencies: found in Chart.yaml, but missing in charts/ directory: {}",
            missing.join(", ")
        ))
    }
}

/// Whether [`template`] finds the primes of the chart's RSA keys ahead (see
/// [`make_rsa_keys_early`]).
static EARLY_RSA_KEYS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// At most this many keys are made ahead of their use.
const EARLY_RSA_KEYS_MAX: usize = 8;

/// Makes [`template`] find the primes of the RSA keys the chart's templates mention
/// (`genCA`, `genSelfSignedCert`, `genSignedCert`, each a 2048-bit key) on a background
/// thread from the first key on, so that the later keys, the bulk of such a chart's
/// rendering time, are partly made while the templates do other work
/// ([`flotilla_sprig::expect_rsa_keys`]). For `flotilla template`, a process that renders one
/// chart and exits: a mention whose template does not run costs background CPU time.
pub fn make_rsa_keys_early(on: bool) {
    EARLY_RSA_KEYS.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The templates of `chart` and its subcharts.
fn all_templates(chart: &Chart, out: &mut Vec<Arc<[u8]>>) {
    out.extend(chart.templates.iter().map(|f| f.data.clone()));
    for dep in &chart.dependencies {
        all_templates(dep, out);
    }
}

/// Mentions of the functions that make a 2048-bit RSA key in `templates` (their `...WithKey`
/// forms take a key instead).
fn rsa_key_mentions(templates: &[Arc<[u8]>]) -> usize {
    let names = ["genCA", "genSelfSignedCert", "genSignedCert"];
    let finders = names.map(memchr::memmem::Finder::new);
    templates
        .iter()
        .map(|data| {
            finders
                .iter()
                .map(|finder| {
                    let end = finder.needle().len();
                    finder
                        .find_iter(data)
                        .filter(|&at| !data[at + end..].starts_with(b"WithKey"))
                        .count()
                })
                .sum::<usize>()
        })
        .sum()
}

/// `helm template NAME CHART [flags]` for a chart on disk, without a cluster.
pub fn template(chart_ref: &str, opts: &TemplateOptions) -> Result<TemplateOutput, TemplateError> {
    let mut warnings: Vec<String> = Vec::new();
    let kube_version = match &opts.kube_version {
        Some(v) if !v.is_empty() => Some(
            KubeVersion::parse(v)
                .map_err(|e| fail(format!("invalid kube version '{v}': {e}"), &warnings))?,
        ),
        _ => None,
    };
    let path = locate_chart(chart_ref).map_err(|e| fail(e, &warnings))?;
    let user = merge_user_values(opts).map_err(|e| fail(e, &warnings))?;
    // The templates are parsed on a helper from the moment they are read, while the chart is
    // decoded and dependencies, values and the schema are dealt with (when the process asked
    // for it: `parse_templates_early`).
    let mut early = None;
    let chart = crate::load::load_observed(path, &mut |files, root| {
        early = super::EarlyParse::start_files(files, root);
    })
    .map_err(|e| fail(e.to_string(), &warnings))?;
    if EARLY_RSA_KEYS.load(std::sync::atomic::Ordering::Relaxed) {
        // Counted only if a template makes a key (the file contents are shared, not copied).
        let mut templates = Vec::new();
        all_templates(&chart, &mut templates);
        flotilla_sprig::expect_rsa_keys(move || {
            rsa_key_mentions(&templates).min(EARLY_RSA_KEYS_MAX)
        });
    }
    let chart_type = chart.metadata.chart_type.as_str();
    if !matches!(chart_type, "" | "application") {
        return Err(fail(
            format!("{chart_type} charts are not installable"),
            &warnings,
        ));
    }
    if chart.metadata.deprecated {
        warnings.push("level=WARN msg=\"this chart is deprecated\"".to_string());
    }
    check_dependencies(&chart).map_err(|e| fail(e, &warnings))?;
    // An archive is parsed ahead once loaded.
    let early = early.or_else(|| super::EarlyParse::start(&chart));
    render_chart(chart, user, kube_version, opts, warnings, early)
}

/// [`template`] for an already loaded chart and merged user values.
pub fn render_template_chart(
    chart: Chart,
    user: Values,
    kube_version: Option<KubeVersion>,
    opts: &TemplateOptions,
    warnings: Vec<String>,
) -> Result<TemplateOutput, TemplateError> {
    render_chart(chart, user, kube_version, opts, warnings, None)
}

fn render_chart(
    mut chart: Chart,
    user: Values,
    kube_version: Option<KubeVersion>,
    opts: &TemplateOptions,
    mut warnings: Vec<String>,
    early_parse: Option<Arc<super::EarlyParse>>,
) -> Result<TemplateOutput, TemplateError> {
    let name = &opts.release_name;
    if let Err(e) = validate_release_name(name) {
        let msg = format!("release name {}: {e}", flotilla_gotmpl::gofmt::quote(name));
        warnings.push(format!(
            "level=ERROR msg=\"release name check failed\" error={}",
            slog_value(&msg)
        ));
        return Err(fail(format!("release name check failed: {msg}"), &warnings));
    }
    let mut dep_warnings = Vec::new();
    let processed = crate::dependencies::process_dependencies(&mut chart, &user, &mut dep_warnings);
    warnings.extend(dep_warnings.iter().map(|w| w.to_string()));
    if let Err(e) = processed {
        let msg = e.to_string();
        warnings.push(format!(
            "level=ERROR msg=\"chart dependencies processing failed\" error={}",
            slog_value(&msg)
        ));
        return Err(fail(
            format!("chart dependencies processing failed: {msg}"),
            &warnings,
        ));
    }
    let mut caps = Capabilities::helm_template_default();
    if let Some(kv) = kube_version {
        caps.kube_version = kv;
    }
    for a in &opts.api_versions {
        caps.api_versions
            .extend(a.split(',').filter(|s| !s.is_empty()).map(str::to_string));
    }
    let namespace = if opts.namespace.is_empty() {
        "default".to_string()
    } else {
        opts.namespace.clone()
    };
    let render_opts = RenderOptions {
        release: ReleaseOptions {
            name: name.clone(),
            namespace,
            revision: 1,
            is_install: !opts.is_upgrade,
            is_upgrade: opts.is_upgrade,
        },
        capabilities: caps,
        include_crds: opts.include_crds,
        skip_schema_validation: opts.skip_schema_validation,
        redact_schema_values: false,
        lookup: None,
        remote_schemas: Default::default(),
    };
    // Only coalescing reads the chart's defaults from here on: they are moved into the values.
    let defaults = chart.values.take().unwrap_or_default();
    let handed = HandedOver {
        defaults: Some(defaults),
        early_parse,
    };
    let rel = match render_sorted(
        &chart,
        handed,
        &user,
        &render_opts,
        &opts.post_renderers,
        PostRenderHooks::Combined,
        &mut warnings,
    ) {
        Ok(r) => r,
        Err(ReleaseRenderError::Values(e)) => return Err(fail(e, &warnings)),
        Err(ReleaseRenderError::Render(e)) => {
            return Err(fail(
                format!("{e}\n\nUse --debug flag to render out invalid YAML"),
                &warnings,
            ));
        }
    };
    drop(user);

    let mut out = Stdout::default();
    let mut files = Vec::new();
    match &opts.output_dir {
        None => {
            // The release manifest, `strings.TrimSpace`d: CRDs, then the manifests.
            if opts.include_crds {
                for (path, f) in crd_objects(&chart) {
                    out.push_static("---\n# Source: ");
                    out.push(path);
                    out.push_static("\n");
                    out.push_file(&f.data);
                    out.push_static("\n");
                }
            }
            for m in rel.manifests {
                out.push_document(m.name, m.content);
            }
            out.trim_end();
        }
        Some(dir) => files = output_files(&chart, &rel, dir, name, opts),
    }
    out.push_static("\n");
    if !opts.no_hooks && opts.output_dir.is_none() {
        for h in rel.hooks {
            if opts.skip_tests && is_test_hook(&h) {
                continue;
            }
            out.push_document(h.path, h.manifest);
        }
    }
    if opts.show_only.is_empty() {
        return Ok(TemplateOutput {
            stdout: out,
            warnings,
            files,
        });
    }
    match show_only(&out.to_text(), &opts.show_only) {
        Ok(stdout) => Ok(TemplateOutput {
            stdout: stdout.into(),
            warnings,
            files,
        }),
        Err(e) => Err(TemplateError {
            files,
            ..fail(e, &warnings)
        }),
    }
}

fn is_test_hook(h: &Hook) -> bool {
    h.events.contains(&HookEvent::parse("test"))
}

/// `--output-dir`: CRDs (with `--include-crds`) directly under `dir`, then manifests in
/// install order and hooks under `dir` or `dir/RELEASE`, as `renderResources` and
/// `helm template` write them.
fn output_files(
    chart: &Chart,
    rel: &SortedRelease,
    dir: &str,
    release: &str,
    opts: &TemplateOptions,
) -> Vec<OutputFile> {
    let file = |dir: &str, name: &str, data: &str, mode| OutputFile {
        path: format!("{dir}/{name}"),
        content: format!("---\n# Source: {name}\n{data}\n"),
        mode,
    };
    let new_dir = if opts.use_release_name {
        go_clean_path(&format!("{dir}/{release}"))
    } else {
        dir.to_string()
    };
    let mut files = Vec::new();
    if opts.include_crds {
        for (path, f) in crd_objects(chart) {
            let data = crate::utf8_lossy(&f.data);
            files.push(file(dir, &path, &data, WriteMode::AppendIfWrittenInThisRun));
        }
    }
    for m in &rel.manifests {
        files.push(file(
            &new_dir,
            &m.name,
            &m.content,
            WriteMode::AppendIfWrittenInThisRun,
        ));
    }
    if !opts.no_hooks {
        for h in &rel.hooks {
            if opts.skip_tests && is_test_hook(h) {
                continue;
            }
            files.push(file(
                &new_dir,
                &h.path,
                &h.manifest,
                WriteMode::AppendIfExists,
            ));
        }
    }
    files
}

/// Go's `filepath.Clean` (Unix): `filepath.Join` of the output directory and release name.
fn go_clean_path(p: &str) -> String {
    let rooted = p.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in p.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.last().is_some_and(|last| *last != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            other => parts.push(other),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_string(),
        (false, false) => joined,
    }
}

static SOURCE_LINE: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"# Source: [^/]+/(.+)").expect("the source regex is valid"));

/// `--show-only`: the documents whose `# Source:` path (without the chart name) matches
/// one of the patterns (`filepath.Match`), pattern by pattern.
fn show_only(out: &str, patterns: &[String]) -> Result<String, String> {
    let docs = super::manifest::split_manifests(out);
    let mut selected: Vec<&str> = Vec::new();
    for f in patterns {
        let f = f.replace('\\', "/");
        let mut missing = true;
        for doc in &docs {
            let Some(c) = SOURCE_LINE.captures(doc) else {
                continue;
            };
            let path = c.get(1).map_or("", |m| m.as_str());
            if crate::ignore::go_match(&f, path).unwrap_or(false) {
                selected.push(doc);
                missing = false;
            }
        }
        if missing {
            return Err(format!("could not find template {f} in chart"));
        }
    }
    let mut s = String::new();
    for d in selected {
        s.push_str("---\n");
        s.push_str(d);
        s.push('\n');
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rsa_key_mentions_count_key_making_calls_in_every_chart() {
        let file = |name: &str, data: &str| crate::chart::File {
            name: name.to_string(),
            data: Arc::from(data.as_bytes()),
            mod_time: None,
        };
        let mut sub = Chart::new(Default::default());
        sub.templates.push(file(
            "templates/tls.yaml",
            "{{ genSelfSignedCert \"a\" nil nil 1 }}",
        ));
        let mut chart = Chart::new(Default::default());
        chart.templates.push(file(
            "templates/_helpers.tpl",
            "{{- $ca := genCA \"ca\" 365 -}}{{ genSignedCert \"x\" nil nil 365 $ca }}",
        ));
        chart.templates.push(file(
            "templates/given.yaml",
            "{{ genCAWithKey \"ca\" 1 $k }}{{ genSignedCertWithKey \"x\" nil nil 1 $ca $k }}\n\
             {{ genSelfSignedCertWithKey \"y\" nil nil 1 $k }}{{ genPrivateKey \"rsa\" }}",
        ));
        chart.dependencies.push(sub);
        let mut templates = Vec::new();
        all_templates(&chart, &mut templates);
        assert_eq!(templates.len(), 3);
        assert_eq!(rsa_key_mentions(&templates), 3);
        assert_eq!(rsa_key_mentions(&[]), 0);
    }

    #[test]
    fn stdout_pieces_print_as_one_text_trimmed_like_trim_space() {
        let mut out = Stdout::default();
        out.push_document("c/templates/a.yaml".to_string(), "a: 1".to_string());
        out.push_file(&Arc::from(&b"kind: CRD\n \n"[..]));
        out.push_static("\n\t");
        out.trim_end();
        out.push_static("\n");
        let want = "---\n# Source: c/templates/a.yaml\na: 1\nkind: CRD\n";
        assert_eq!(out.to_text(), want);
        assert_eq!(out.to_string(), want);
        assert_eq!(out.len(), want.len());
        assert!(out == *want);
        assert!(out != *"---\n# Source: c/templates/a.yaml\na: 1\n");
        assert_eq!(out, Stdout::from(want.to_string()));
        let mut written = Vec::new();
        out.write_to(&mut written).expect("written");
        assert_eq!(written, want.as_bytes());

        // Pieces that are all white space go; an empty output stays empty.
        let mut blank = Stdout::default();
        blank.push_file(&Arc::from(&b" \n"[..]));
        blank.push_static("\n");
        blank.trim_end();
        assert!(blank.is_empty());
        // Invalid UTF-8 in a file prints as U+FFFD, as everywhere else.
        let mut bad = Stdout::default();
        bad.push_file(&Arc::from(&b"a\xffb"[..]));
        assert_eq!(bad.to_text(), "a\u{fffd}b");
    }

    #[test]
    fn output_dir_with_release_name_is_cleaned_like_filepath_join() {
        assert_eq!(go_clean_path("out//rel"), "out/rel");
        assert_eq!(go_clean_path("./out/rel"), "out/rel");
        assert_eq!(go_clean_path("/a/../../rel"), "/rel");
        assert_eq!(go_clean_path("../a/../../rel"), "../../rel");
        assert_eq!(go_clean_path("a/.."), ".");
    }

    #[test]
    fn release_names_follow_helm() {
        assert!(validate_release_name("my-release.v1").is_ok());
        assert!(validate_release_name("Bad_Name").is_err());
        assert!(validate_release_name(&"a".repeat(54)).is_err());
    }

    #[test]
    fn release_names_are_what_helms_pattern_accepts() {
        let re = Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
            .expect("Helm's release name pattern");
        let alphabet = ["a", "z", "0", "9", "-", ".", "A", "_", "é", "\n"];
        // Every text of up to 5 of these pieces.
        let mut texts = vec![String::new()];
        let mut all = Vec::new();
        for _ in 0..5 {
            texts = texts
                .iter()
                .flat_map(|t| alphabet.iter().map(move |a| format!("{t}{a}")))
                .collect();
            all.extend(texts.iter().cloned());
        }
        for t in all {
            assert_eq!(is_release_name(&t), re.is_match(&t), "{t:?}");
        }
    }

    #[test]
    fn show_only_selects_by_path_without_chart_name() {
        let out =
            "---\n# Source: c/templates/a.yaml\na: 1\n---\n# Source: c/templates/b.yaml\nb: 2\n";
        assert_eq!(
            show_only(out, &["templates/b.yaml".to_string()]).expect("found"),
            "---\n# Source: c/templates/b.yaml\nb: 2\n"
        );
        assert_eq!(
            show_only(out, &["templates/*.yaml".to_string()]).expect("found"),
            out
        );
        assert_eq!(
            show_only(out, &["templates/x.yaml".to_string()]).unwrap_err(),
            "could not find template templates/x.yaml in chart"
        );
    }
}
