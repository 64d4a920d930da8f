//! The `flotilla` command line. Subcommands land with their issues (`template` first).

use clap::Parser;

/// Flotilla: Helm releases across a fleet of Kubernetes clusters.
#[derive(Debug, Parser)]
#[command(name = "flotilla", version)]
struct Cli {}

fn main() -> anyhow::Result<()> {
    let _cli = Cli::parse();
    Ok(())
}
