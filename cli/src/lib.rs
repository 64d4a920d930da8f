//! The `flotilla` command line as a library: argument types and what each subcommand does.
//! `main.rs` parses and calls [`run`].

pub mod diff;
pub mod fleet;
pub mod memory;
pub mod rollout;

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;

use clap::{Args, Parser, Subcommand};
use flotilla_chart::render::{OutputFile, Stdout, TemplateOptions, WriteMode, template};

/// Flotilla: Helm releases across a fleet of Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
    /// The management cluster (fleet commands).
    #[command(flatten)]
    pub kube: fleet::KubeArgs,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render chart templates locally, exactly as `helm template` does.
    Template(Box<TemplateArgs>),
    /// List HelmReleases, sources or clusters of the hub.
    #[command(subcommand)]
    Get(fleet::Get),
    /// Ask for a reconcile now (as `flux reconcile`) and wait for the result.
    #[command(subcommand)]
    Reconcile(fleet::ReconcileKind),
    /// Suspend the reconciliation of an object.
    #[command(subcommand)]
    Suspend(fleet::ReleaseKind),
    /// Resume a suspended object and wait for its reconciliation.
    #[command(subcommand)]
    Resume(fleet::ReleaseKind),
    /// Troubleshoot an object (as `flux debug`).
    #[command(subcommand)]
    Debug(fleet::DebugKind),
    /// Bootstrap tokens for agents to join the hub.
    #[command(subcommand)]
    Token(fleet::Token),
    /// Accept or refuse a ManagedCluster.
    #[command(subcommand)]
    Cluster(fleet::ClusterCmd),
    /// Follow and steer the fleet rollout of a HelmReleaseSet.
    #[command(subcommand)]
    Rollout(rollout::Rollout),
    /// Prints this client's version and, from the hub's ManagedClusters, each agent's.
    Version(fleet::VersionArgs),
    /// Prints a shell completion script: `source <(flotilla completion bash)`.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// What the next reconcile of an object would do on its cluster (exit 0: no change,
    /// 2: changes, 1: error).
    #[command(subcommand)]
    Diff(diff::DiffKind),
}

/// `flotilla template NAME CHART [flags]` (the flags of `helm template` it supports).
#[derive(Debug, Args)]
pub struct TemplateArgs {
    /// Release name.
    pub name: String,
    /// Chart directory or archive.
    pub chart: String,
    /// Namespace of the release.
    #[arg(short = 'n', long = "namespace", default_value = "")]
    pub namespace: String,
    /// Values files, merged in order.
    #[arg(short = 'f', long = "values")]
    pub values: Vec<String>,
    /// Values as key=value (typed).
    #[arg(long = "set")]
    pub set: Vec<String>,
    /// Values as key=value (strings).
    #[arg(long = "set-string")]
    pub set_string: Vec<String>,
    /// Values as key=JSON.
    #[arg(long = "set-json")]
    pub set_json: Vec<String>,
    /// Values as key=path (file contents).
    #[arg(long = "set-file")]
    pub set_file: Vec<String>,
    /// Values as key=value, the value taken literally (no escapes, commas or lists).
    #[arg(long = "set-literal")]
    pub set_literal: Vec<String>,
    /// Write the rendered templates to files under this directory instead of stdout.
    #[arg(long = "output-dir")]
    pub output_dir: Option<String>,
    /// With --output-dir, write under OUTPUT_DIR/NAME.
    #[arg(long = "release-name")]
    pub release_name: bool,
    /// Kubernetes version for .Capabilities.KubeVersion.
    #[arg(long = "kube-version")]
    pub kube_version: Option<String>,
    /// Extra API versions for .Capabilities.APIVersions (comma-separated allowed).
    #[arg(short = 'a', long = "api-versions")]
    pub api_versions: Vec<String>,
    /// Include crds/ in the output.
    #[arg(long = "include-crds")]
    pub include_crds: bool,
    /// Leave test hooks out of the output.
    #[arg(long = "skip-tests")]
    pub skip_tests: bool,
    /// Leave hooks out of the output.
    #[arg(long = "no-hooks")]
    pub no_hooks: bool,
    /// Only show manifests rendered from these templates.
    #[arg(short = 's', long = "show-only")]
    pub show_only: Vec<String>,
    /// Set .Release.IsUpgrade instead of .Release.IsInstall.
    #[arg(long = "is-upgrade")]
    pub is_upgrade: bool,
    /// Do not validate values against values.schema.json.
    #[arg(long = "skip-schema-validation")]
    pub skip_schema_validation: bool,
    /// A YAML file holding a list of HelmRelease `postRenderers` entries (kustomize patches
    /// and images), run over the rendered manifests as helm-controller runs them.
    #[arg(long = "post-renderer-kustomize", value_name = "FILE")]
    pub post_renderer_kustomize: Option<String>,
}

impl From<TemplateArgs> for TemplateOptions {
    fn from(a: TemplateArgs) -> Self {
        TemplateOptions {
            release_name: a.name,
            namespace: a.namespace,
            value_files: a.values,
            set: a.set,
            set_string: a.set_string,
            set_json: a.set_json,
            set_file: a.set_file,
            set_literal: a.set_literal,
            output_dir: a.output_dir,
            use_release_name: a.release_name,
            kube_version: a.kube_version,
            api_versions: a.api_versions,
            include_crds: a.include_crds,
            skip_tests: a.skip_tests,
            no_hooks: a.no_hooks,
            show_only: a.show_only,
            is_upgrade: a.is_upgrade,
            skip_schema_validation: a.skip_schema_validation,
            post_renderers: Vec::new(),
        }
    }
}

/// Renderable templates from which `flotilla template` executes a chart's templates on two
/// threads. Measured on the corpus (README, "Rendering speed"): argo-cd ha-redis-ha (161
/// templates) gains ~15% of wall; argo-cd's other cases (133) gain ~1 ms but their peak RSS
/// rises by up to 3.7 MiB, to within 1.2 MiB of a quarter of helm's; prometheus (73) gains
/// or loses within noise; ingress-nginx (43) and traefik (28) write their values early, so
/// most of their templates would run again after the thread. Measured again once helper
/// threads no longer waited on their spawner's CPU (`hyperfine -N`, medians, 150 vs 20):
/// prometheus default 6.4/6.5 vs 6.0/6.6 ms, ingress-nginx 4.9/4.9 vs 5.1/5.2, traefik
/// 5.8/5.7 vs 6.0/5.9: no gain below 150.
const TWO_THREADS_FROM: usize = 150;

/// Files from which `flotilla template` reads a chart directory on two threads: starting the
/// second costs about as much as reading a few dozen cached files.
const READ_TWO_THREADS_FROM: usize = 64;

/// Actions (`{{`) in a chart's templates (subcharts' included, files under 64 KiB) from which
/// `flotilla template` parses them on a helper thread from the moment the chart's files are
/// read, while values files are decoded and dependencies, values and the schema are
/// processed; what it costs (starting the thread) and saves (the parse, where it ends before
/// the engine needs it) goes with the amount of template code, not the number of files.
/// Measured (`hyperfine -N`, rounds in both orders, medians, early vs not; actions as
/// counted): traefik (2507) 0.85-0.90, ingress-nginx (1807) 0.94; between 1400 and 1600
/// results went both ways from one measurement to the next (cert-manager (1568) 0.96 then
/// 1.13, keda (1479) 0.97-1.12, grafana (1437) 0.94-1.04); below, slower: external-secrets
/// (1418) 1.05, flux2 (1037) 1.08, podinfo (502) 1.03.
const PARSE_EARLY_FROM: usize = 1800;

/// Runs a parsed command line on the process's stdout and stderr; returns the exit code.
/// The process is expected to exit then: rendering leaves what it allocated to the exit
/// ([`flotilla_chart::render::leave_allocations_to_exit`]).
pub fn run(cli: Cli) -> i32 {
    flotilla_chart::render::leave_allocations_to_exit();
    // Big charts execute their templates on both cores (README, "Rendering speed").
    flotilla_chart::render::render_on_two_threads(TWO_THREADS_FROM);
    // Templates are parsed on the other core while values and dependencies are processed.
    flotilla_chart::render::parse_templates_early(PARSE_EARLY_FROM);
    // Big chart directories are read on both cores.
    flotilla_chart::load::read_on_two_threads(READ_TWO_THREADS_FROM);
    // Nothing is stored: the files' modification times are not needed.
    flotilla_chart::load::read_without_mod_times();
    // Charts that make RSA keys start on them at once, on the other core (README,
    // "Rendering speed").
    flotilla_chart::render::make_rsa_keys_early(true);
    // The output is written in pieces (one per document and header): buffered, so that
    // they go out in a few large writes rather than one write per line.
    let mut out = std::io::BufWriter::with_capacity(64 << 10, std::io::stdout().lock());
    run_with(cli, &mut out, &mut std::io::stderr().lock())
}

/// [`run`] writing to the given streams (files of `--output-dir` still go to disk).
pub fn run_with(cli: Cli, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use fleet::FleetCommand as F;
    let fleet_command = match cli.command {
        Command::Template(args) => return run_template(*args, out, err),
        Command::Get(get) => F::Get(get),
        Command::Reconcile(fleet::ReconcileKind::HelmRelease(args)) => F::Reconcile(args),
        Command::Suspend(fleet::ReleaseKind::HelmRelease(named)) => F::Suspend(named),
        Command::Resume(fleet::ReleaseKind::HelmRelease(named)) => F::Resume(named),
        Command::Debug(fleet::DebugKind::HelmRelease(args)) => F::Debug(args),
        Command::Token(fleet::Token::Create(args)) => F::TokenCreate(args),
        Command::Cluster(cmd) => F::Cluster(cmd),
        Command::Rollout(cmd) => F::Rollout(cmd),
        Command::Completion { shell } => {
            use clap::CommandFactory as _;
            clap_complete::generate(shell, &mut Cli::command(), "flotilla", out);
            return 0;
        }
        Command::Version(args) => {
            if writeln!(out, "client: flotilla {}", env!("CARGO_PKG_VERSION")).is_err() {
                return 1;
            }
            if args.client {
                return 0;
            }
            F::Version
        }
        Command::Diff(cmd) => return diff::run(cmd, &cli.kube, out, err),
    };
    fleet::run(fleet_command, &cli.kube, out, err)
}

/// `flotilla template`.
fn run_template(args: TemplateArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let chart = args.chart.clone();
    let post_renderer_file = args.post_renderer_kustomize.clone();
    let mut opts = TemplateOptions::from(args);
    if let Some(file) = post_renderer_file {
        match read_post_renderers(&file) {
            Ok(list) => opts.post_renderers = list,
            Err(msg) => {
                let _ = writeln!(err, "Error: {msg}");
                return 1;
            }
        }
    }
    let (stdout, warnings, files, error) = match template(&chart, &opts) {
        Ok(o) => (o.stdout, o.warnings, o.files, None),
        Err(e) => (Stdout::default(), e.warnings, e.files, Some(e.message)),
    };
    for w in &warnings {
        let _ = writeln!(err, "{w}");
    }
    // Helm writes the files (printing `wrote PATH`) before it reports a failure
    // that comes after them (`--show-only`).
    let error = match write_files(&files, out) {
        Ok(()) => error,
        Err(write_error) => Some(write_error),
    };
    if let Some(msg) = error {
        // The `wrote` lines go out before the error, as Helm prints them.
        let _ = out.flush();
        let _ = writeln!(err, "Error: {msg}");
        return 1;
    }
    if stdout.write_to(out).and_then(|()| out.flush()).is_err() {
        return 1;
    }
    0
}

/// `writeToFile` for each file in order: parent directories, create or append, content,
/// then `wrote PATH` on stdout. Stops at the first failure, with Helm's message.
fn write_files(files: &[OutputFile], out: &mut dyn Write) -> Result<(), String> {
    let mut written: HashSet<&str> = HashSet::new();
    for f in files {
        let path = Path::new(&f.path);
        let append = match f.mode {
            WriteMode::AppendIfWrittenInThisRun => written.contains(f.path.as_str()),
            WriteMode::AppendIfExists => path.exists(),
        };
        write_file(path, &f.content, append).map_err(|e| f.mode.error_message(&e.to_string()))?;
        written.insert(&f.path);
        writeln!(out, "wrote {}", f.path).map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A failed file operation: Go's `PathError` parts.
struct PathError {
    op: &'static str,
    path: String,
    cause: std::io::Error,
}

/// `ensureDirectoryForFile`, `createOrOpenFile` and the write of `writeToFile`.
fn write_file(path: &Path, content: &str, append: bool) -> Result<(), PathError> {
    fn fail(op: &'static str, p: &Path) -> impl FnOnce(std::io::Error) -> PathError {
        let path = p.to_string_lossy().into_owned();
        move |cause| PathError { op, path, cause }
    }
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        // Helm stats the directory first and gives up on any error but "not found".
        if let Err(e) = std::fs::metadata(parent)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            return Err(fail("stat", parent)(e));
        }
        std::fs::DirBuilder::new()
            .recursive(true)
            .create(parent)
            .map_err(fail("mkdir", parent))?;
    }
    let mut file = if append {
        std::fs::OpenOptions::new().append(true).open(path)
    } else {
        std::fs::File::create(path)
    }
    .map_err(fail("open", path))?;
    file.write_all(content.as_bytes())
        .map_err(fail("write", path))
}

impl std::fmt::Display for PathError {
    /// Go's `*PathError` text: `open PATH: permission denied`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let why = match self.cause.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_string(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_string(),
            std::io::ErrorKind::NotADirectory => "not a directory".to_string(),
            std::io::ErrorKind::IsADirectory => "is a directory".to_string(),
            _ => self.cause.to_string(),
        };
        write!(f, "{} {}: {why}", self.op, self.path)
    }
}

/// Reads `--post-renderer-kustomize FILE`: errors name the file and the field.
fn read_post_renderers(
    file: &str,
) -> Result<Vec<flotilla_chart::postrender::PostRenderer>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("reading {file}: {e}"))?;
    flotilla_chart::postrender::parse_post_renderers(&text).map_err(|e| format!("{file}: {e}"))
}
