//! The `flotilla` command line: parse, run (see the library for the subcommands).

use clap::Parser;

fn main() {
    let cli = flotilla_cli::Cli::parse();
    if let flotilla_cli::Command::Template(_) = cli.command {
        // A short process that allocates as it goes: see `memory`.
        flotilla_cli::memory::prepare_heap();
    }
    std::process::exit(flotilla_cli::run(cli));
}
