//! `cargo xtask image`: the hub's or the agent's container image around a binary, built and
//! pushed with crane, no container daemon (see `flotilla_tests::image`).
//!
//! ```text
//! RUSTFLAGS='-C target-feature=+crt-static' cargo build --target x86_64-unknown-linux-gnu -p flotilla-agent
//! cargo xtask image --bin agent --binary target/x86_64-unknown-linux-gnu/debug/flotilla-agent \
//!     --push localhost:5000/flotilla/flotilla-agent:dev --insecure
//! ```
//!
//! The charts then take `--set image.repository=localhost:5000/flotilla/flotilla-agent
//! --set image.tag=dev`. `cargo xtask up` uses [`flotilla_tests::image::build_and_push`]
//! the same way for both binaries.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use flotilla_tests::image::{self, Component, ImageOptions};

/// Which binary the image carries.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Bin {
    /// flotilla-hub.
    Hub,
    /// flotilla-agent.
    Agent,
}

/// `cargo xtask image`.
#[derive(Debug, Args)]
pub struct ImageArgs {
    /// The binary the image carries.
    #[arg(long, value_enum)]
    bin: Bin,
    /// Path of that binary (a static one: the base is empty).
    #[arg(long)]
    binary: PathBuf,
    /// Where to push: host[:port]/repository:tag.
    #[arg(long)]
    push: String,
    /// The registry speaks plain HTTP (the local one).
    #[arg(long)]
    insecure: bool,
    /// The hub's CA bundle (default: /etc/ssl/certs/ca-certificates.crt).
    #[arg(long)]
    ca_bundle: Option<PathBuf>,
    /// Accept a dynamically linked binary (the image will not start).
    #[arg(long)]
    allow_dynamic: bool,
}

pub fn run(root: &Path, args: &ImageArgs) -> anyhow::Result<()> {
    let binary = root.join(&args.binary);
    let options = ImageOptions {
        component: match args.bin {
            Bin::Hub => Component::Hub,
            Bin::Agent => Component::Agent,
        },
        binary,
        reference: args.push.clone(),
        insecure: args.insecure,
        ca_bundle: args.ca_bundle.clone(),
        allow_dynamic: args.allow_dynamic,
    };
    let digest = image::build_and_push(&options)?;
    eprintln!("xtask: pushed {}@{digest}", args.push);
    println!("{}@{digest}", args.push);
    Ok(())
}
