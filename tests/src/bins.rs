//! The workspace's own programs as processes: `flotilla-hub`, `flotilla-agent` and the
//! `flotilla` CLI, built by cargo on demand.
//!
//! A cross-crate suite cannot name another package's binary (`CARGO_BIN_EXE_*` only exists
//! in the package that defines it), so [`build`] runs `cargo build` for the three packages and
//! takes the executables' paths from cargo's JSON messages. Cargo holds its build lock only
//! while it compiles, so this works from inside `cargo test` too; when nothing changed it is a
//! fingerprint check of a second or two. `FLOTILLA_BIN_DIR` points at a directory that holds
//! the three already (an installed release, or a `--release` build for the benchmarks), and
//! skips cargo.

use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context as _, bail};

use crate::cluster::workspace_root;

/// The packages of the fleet's programs, and their binaries.
const PROGRAMS: &[(&str, &str)] = &[
    ("flotilla-hub", "flotilla-hub"),
    ("flotilla-agent", "flotilla-agent"),
    ("flotilla-cli", "flotilla"),
];

/// Paths of the fleet's programs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binaries {
    /// `flotilla-hub`.
    pub hub: PathBuf,
    /// `flotilla-agent`.
    pub agent: PathBuf,
    /// `flotilla`, the CLI.
    pub cli: PathBuf,
}

impl Binaries {
    /// The directories of the three programs, each once, `:`-joined: what a `PATH` needs
    /// to hold them (the static hub and agent live in `target/<triple>/debug`, the CLI in
    /// `target/debug`).
    pub fn search_path(&self) -> String {
        let mut dirs: Vec<String> = Vec::new();
        for program in [&self.cli, &self.agent, &self.hub] {
            let dir = program
                .parent()
                .unwrap_or(std::path::Path::new("."))
                .display()
                .to_string();
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
        dirs.join(":")
    }
}

/// How cargo's output is shown while it builds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Cargo's own progress lines on this process's stderr (`cargo xtask up`).
    Show,
    /// Kept, and shown only if the build fails (tests).
    OnFailure,
}

/// The programs of `$FLOTILLA_BIN_DIR`, or built by cargo (dev profile), once per process.
pub fn build(progress: Progress) -> anyhow::Result<Binaries> {
    static BUILT: OnceLock<Result<Binaries, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            if let Some(dir) = std::env::var_os("FLOTILLA_BIN_DIR") {
                return in_dir(Path::new(&dir)).map_err(|e| format!("{e:#}"));
            }
            build_with_cargo(&[], progress).map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
}

/// The hub and the agent linked statically (glibc's `crt-static`) for this machine's target,
/// so that the very binaries `cargo xtask up` runs can go into the container images (an empty
/// base: no C library to load). They are built in cargo's `target/<triple>/debug`, apart from
/// the usual dynamic build, whose cache this leaves alone. The CLI, which no image carries,
/// is the usual dynamic build (it links with `-no-pie`, see `cli/build.rs`, which a static
/// glibc start-up does not support).
pub fn build_static(progress: Progress) -> anyhow::Result<Binaries> {
    let triple = host_triple()?;
    let servers = build_command(
        &["--target", &triple],
        &[("RUSTFLAGS", "-C target-feature=+crt-static")],
        &PROGRAMS[..2],
        progress,
    )?;
    let cli = build_command(&[], &[], &PROGRAMS[2..], progress)?;
    Ok(Binaries {
        cli: cli.cli,
        ..servers
    })
}

/// The host's target triple, as rustc names it (`rustc -vV`, line `host:`).
fn host_triple() -> anyhow::Result<String> {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let out = Command::new(rustc)
        .arg("-vV")
        .output()
        .context("running rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|line| line.strip_prefix("host: "))
        .map(|triple| triple.trim().to_owned())
        .context("rustc -vV printed no `host:` line")
}

/// The programs built with cargo's extra `args` (for example `["--release"]`).
pub fn build_with_cargo(args: &[&str], progress: Progress) -> anyhow::Result<Binaries> {
    build_command(args, &[], PROGRAMS, progress)
}

/// Builds `programs` (a subset of [`PROGRAMS`]); the paths of the programs not built are left
/// empty.
fn build_command(
    args: &[&str],
    env: &[(&str, &str)],
    programs: &[(&str, &str)],
    progress: Progress,
) -> anyhow::Result<Binaries> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.envs(env.iter().copied());
    command
        .current_dir(workspace_root())
        .args([
            "build",
            "--locked",
            "--bins",
            "--message-format=json-render-diagnostics",
        ])
        .args(args);
    for (package, _) in programs {
        command.args(["-p", package]);
    }
    command.stdout(Stdio::piped()).stderr(match progress {
        Progress::Show => Stdio::inherit(),
        Progress::OnFailure => Stdio::piped(),
    });
    let mut child = command.spawn().context("running cargo build")?;
    let stderr = child.stderr.take().map(|mut pipe| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut pipe, &mut text);
            text
        })
    });
    let mut executables = Vec::new();
    let stdout = child.stdout.take().expect("stdout is piped");
    for line in std::io::BufReader::new(stdout).lines() {
        let line = line.context("reading cargo's messages")?;
        let Ok(message) = serde_json::from_str::<serde_json::Value>(&line) else {
            continue;
        };
        if message["reason"] != "compiler-artifact" {
            continue;
        }
        if let (Some(name), Some(path)) = (
            message["target"]["name"].as_str(),
            message["executable"].as_str(),
        ) {
            executables.push((name.to_owned(), PathBuf::from(path)));
        }
    }
    let status = child.wait()?;
    let errors = stderr.and_then(|t| t.join().ok()).unwrap_or_default();
    if !status.success() {
        let names: Vec<&str> = programs.iter().map(|(_, name)| *name).collect();
        bail!(
            "cargo build of {} failed ({status})\n{errors}",
            names.join(", ")
        );
    }
    let find = |binary: &str| {
        if !programs.iter().any(|(_, name)| *name == binary) {
            return Ok(PathBuf::new());
        }
        executables
            .iter()
            .find(|(name, _)| name == binary)
            .map(|(_, path)| path.clone())
            .with_context(|| format!("cargo built no executable {binary:?}"))
    };
    Ok(Binaries {
        hub: find("flotilla-hub")?,
        agent: find("flotilla-agent")?,
        cli: find("flotilla")?,
    })
}

/// The programs in `dir`, which must all be there.
pub fn in_dir(dir: &Path) -> anyhow::Result<Binaries> {
    let path = |binary: &str| {
        let path = dir.join(binary);
        anyhow::ensure!(
            path.is_file(),
            "{} does not exist (FLOTILLA_BIN_DIR must hold flotilla-hub, flotilla-agent and flotilla)",
            path.display()
        );
        Ok(path)
    };
    Ok(Binaries {
        hub: path("flotilla-hub")?,
        agent: path("flotilla-agent")?,
        cli: path("flotilla")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_search_path_holds_each_programs_directory_once() {
        let b = Binaries {
            hub: PathBuf::from("/t/x86_64-unknown-linux-gnu/debug/flotilla-hub"),
            agent: PathBuf::from("/t/x86_64-unknown-linux-gnu/debug/flotilla-agent"),
            cli: PathBuf::from("/t/debug/flotilla"),
        };
        assert_eq!(
            b.search_path(),
            "/t/debug:/t/x86_64-unknown-linux-gnu/debug"
        );
    }
}
