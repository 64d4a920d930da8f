//! The `flotilla` command line: parse, run (see the library for the subcommands).

use clap::Parser;

fn main() {
    let cli = flotilla_cli::Cli::parse();
    std::process::exit(flotilla_cli::run(cli));
}
