//! The `flotilla` command line as a library: argument types and what each subcommand does.
//! `main.rs` parses and calls [`run`].

use std::io::Write;

use clap::{Args, Parser, Subcommand};
use flotilla_chart::render::{TemplateOptions, template};

/// Flotilla: Helm releases across a fleet of Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version)]
pub struct Cli {
    /// The subcommand.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Render chart templates locally, exactly as `helm template` does.
    Template(TemplateArgs),
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
            kube_version: a.kube_version,
            api_versions: a.api_versions,
            include_crds: a.include_crds,
            skip_tests: a.skip_tests,
            no_hooks: a.no_hooks,
            show_only: a.show_only,
            is_upgrade: a.is_upgrade,
            skip_schema_validation: a.skip_schema_validation,
        }
    }
}

/// Runs a parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> i32 {
    match cli.command {
        Command::Template(args) => {
            let chart = args.chart.clone();
            let opts = TemplateOptions::from(args);
            let (stdout, warnings, error) = match template(&chart, &opts) {
                Ok(out) => (out.stdout, out.warnings, None),
                Err(e) => (String::new(), e.warnings, Some(e.message)),
            };
            let mut err = std::io::stderr().lock();
            for w in &warnings {
                let _ = writeln!(err, "{w}");
            }
            if let Some(msg) = error {
                let _ = writeln!(err, "Error: {msg}");
                return 1;
            }
            let mut out = std::io::stdout().lock();
            if out
                .write_all(stdout.as_bytes())
                .and_then(|()| out.flush())
                .is_err()
            {
                return 1;
            }
            0
        }
    }
}
