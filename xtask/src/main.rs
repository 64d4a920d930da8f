//! `cargo xtask`: the one entry point for the project's chores, used by people and by CI.
//!
//! - `cargo xtask test`: everything CI checks: installs what the tests need, then format,
//!   generated code, the dependency-direction guard, lints, the whole test suite and the
//!   rendering conformance run over `../shared/charts`.
//! - `cargo xtask up [--count N]`: the local environment (N clusters, kept running).
//! - `cargo xtask down`: stops what `up` started.
//! - `cargo xtask deps`: installs the test prerequisites only (upstream binaries, reference tools,
//!   the test servers of chart sources: the OCI registry and nginx).
//! - `cargo xtask fmt | clippy | check-deps`: single steps.
//! - `cargo xtask gen | gen-crds | gen-patch-schema`: regenerate committed code (protobuf,
//!   the CRDs of `deploy/crds/`, the strategic-merge schema table); `gen-check` checks all three.
//! - `cargo xtask fuzz [TARGET] [--seconds N]`: the cargo-fuzz targets (`fuzz.rs`).
//! - `cargo xtask bench-agent`: one agent, 50 releases: install time, reconcile cost, RSS.
//! - `cargo xtask bench-hub`: the hub in push mode, 500 HelmReleases at once, change
//!   latency, index fetches, the hub's RSS and CPU (see `bench_hub.rs`).
//! - `cargo xtask bench-render`: `flotilla template` timed against `helm template` on the
//!   chart corpus (see `bench_render.rs`).

mod bench_agent;
mod bench_common;
mod bench_hub;
mod bench_render;
mod crds;
mod fuzz;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use flotilla_tests::cluster::{self, Cluster, ClusterOptions};

mod patch_schema;

#[derive(Debug, Parser)]
#[command(name = "cargo xtask", about = "Flotilla's task runner")]
struct Cli {
    #[command(subcommand)]
    task: Task,
}

#[derive(Debug, Subcommand)]
enum Task {
    /// Install prerequisites and run every check CI runs.
    Test,
    /// Install the test prerequisites: upstream Kubernetes binaries, reference tools, test servers.
    Deps,
    /// Regenerate committed generated code (protobuf) from its sources.
    Gen,
    /// Check that committed generated code (protobuf, CRDs, patch schema) matches its sources.
    GenCheck,
    /// Regenerate the CRDs of deploy/crds/ from the flotilla-api types.
    GenCrds,
    /// Regenerate the strategic-merge schema table from the Kubernetes OpenAPI document.
    GenPatchSchema,
    /// Check formatting.
    Fmt,
    /// Run clippy on every target with warnings denied.
    Clippy,
    /// Check that the pure crates do not depend on IO crates (tokio, tonic, hyper, kube client).
    CheckDeps,
    /// Bring up the local environment: N clusters that keep running until `down`.
    Up {
        #[arg(long, default_value_t = 1)]
        count: usize,
    },
    /// Stop everything `up` started.
    Down,
    /// Measure cluster start time and memory: one cluster alone, then N side by side.
    MeasureClusters {
        #[arg(long, default_value_t = 3)]
        count: usize,
    },
    /// Run the cargo-fuzz targets of fuzz/ (installs cargo-fuzz when missing).
    Fuzz(fuzz::FuzzArgs),
    /// Benchmark one agent reconciling many releases: install time, reconcile cost, RSS.
    BenchAgent(bench_agent::BenchAgent),
    /// Benchmark the hub in push mode: N HelmReleases at once, change latency, sources.
    BenchHub(bench_hub::BenchHub),
    /// Time `flotilla template` against `helm template` on every case of the chart corpus.
    BenchRender(bench_render::BenchRenderArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = cluster::workspace_root();
    std::env::set_current_dir(&root)?;
    match cli.task {
        Task::Test => test(&root),
        Task::Deps => deps(&root),
        Task::Gen => generate(&root, &root.join(GENERATED_PROTO_DIR)),
        Task::GenCheck => gen_check_all(&root),
        Task::GenCrds => crds::generate(&root),
        Task::GenPatchSchema => patch_schema::generate(&root),
        Task::Fmt => fmt(),
        Task::Clippy => clippy(),
        Task::CheckDeps => check_deps(),
        Task::Up { count } => up(&root, count),
        Task::Down => down(&root),
        Task::MeasureClusters { count } => measure_clusters(count),
        Task::Fuzz(args) => fuzz::fuzz(&root, &args),
        Task::BenchAgent(args) => bench_agent::run(&root, &args),
        Task::BenchHub(args) => bench_hub::run(&root, &args),
        Task::BenchRender(args) => bench_render::bench_render(&root, &args),
    }
}

/// Crates that must stay free of IO.
const PURE_CRATES: &[&str] = &[
    "flotilla-gotmpl",
    "flotilla-sprig",
    "flotilla-yaml",
    "flotilla-chart",
    "flotilla-core",
    "flotilla-api",
];
/// Crates a pure crate must not pull in, directly or not.
const IO_CRATES: &[&str] = &["tokio", "tonic", "hyper", "kube-client", "reqwest", "mio"];

fn test(root: &Path) -> anyhow::Result<()> {
    let started = Instant::now();
    deps(root)?;
    step("fmt", fmt)?;
    step("gen-check", || gen_check_all(root))?;
    step("check-deps", check_deps)?;
    step("clippy", clippy)?;
    step("cargo test", || {
        run(Command::new("cargo").args(["test", "--workspace", "--locked"]))
    })?;
    step(
        "conformance (../shared/charts against helm v4.1.4 goldens)",
        || {
            run(Command::new("cargo").args([
                "run",
                "--quiet",
                "--locked",
                "-p",
                "flotilla-tests",
                "--bin",
                "conformance",
            ]))
        },
    )?;
    eprintln!("xtask: all checks passed in {:.0?}", started.elapsed());
    Ok(())
}

fn step(name: &str, f: impl FnOnce() -> anyhow::Result<()>) -> anyhow::Result<()> {
    let started = Instant::now();
    eprintln!("xtask: == {name}");
    f().with_context(|| format!("step {name} failed"))?;
    eprintln!("xtask: == {name} ok ({:.1?})", started.elapsed());
    Ok(())
}

fn deps(root: &Path) -> anyhow::Result<()> {
    step("deps", || {
        let upstream = capture(&mut Command::new(root.join("tools/build-upstream")))?;
        let tools = capture(&mut Command::new(
            root.join("tools/install-reference-tools"),
        ))?;
        let registry = capture(&mut Command::new(root.join("tools/build-registry")))?;
        let nginx = capture(&mut Command::new(root.join("tools/install-test-servers")))?;
        eprintln!("xtask: upstream binaries in {upstream}");
        eprintln!("xtask: reference helm and kubectl in {tools}");
        eprintln!("xtask: test servers: OCI registry {registry}, nginx {nginx}");
        Ok(())
    })
}

fn fmt() -> anyhow::Result<()> {
    run(Command::new("cargo").args(["fmt", "--all", "--", "--check"]))
}

fn clippy() -> anyhow::Result<()> {
    run(Command::new("cargo").args([
        "clippy",
        "--workspace",
        "--all-targets",
        "--locked",
        "--",
        "-D",
        "warnings",
    ]))
}

fn check_deps() -> anyhow::Result<()> {
    let mut failures = Vec::new();
    for krate in PURE_CRATES {
        let tree = capture(Command::new("cargo").args([
            "tree", "--locked", "-p", krate, "-e", "normal", "--prefix", "none", "--format", "{p}",
        ]))?;
        for line in tree.lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if IO_CRATES.contains(&name) {
                failures.push(format!("{krate} depends on {name}"));
            }
        }
    }
    if !failures.is_empty() {
        failures.sort();
        failures.dedup();
        bail!(
            "pure crates must not depend on IO crates:\n  {}",
            failures.join("\n  ")
        );
    }
    eprintln!(
        "xtask: {} pure crates are free of {:?}",
        PURE_CRATES.len(),
        IO_CRATES
    );
    Ok(())
}

/// Where the generated protobuf code is committed.
const GENERATED_PROTO_DIR: &str = "proto/src/gen";
/// The protobuf sources.
const PROTO_FILES: &[&str] = &["proto/proto/flotilla/agent/v1/agent.proto"];

/// Generates the prost/tonic code for [`PROTO_FILES`] into `out_dir`, with protox (a
/// protobuf compiler in Rust, so no system `protoc` is needed).
fn generate(root: &Path, out_dir: &Path) -> anyhow::Result<()> {
    let files: Vec<PathBuf> = PROTO_FILES.iter().map(|f| root.join(f)).collect();
    let descriptors = protox::compile(&files, [root.join("proto/proto")])?;
    std::fs::create_dir_all(out_dir)?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .emit_rerun_if_changed(false)
        .out_dir(out_dir)
        .compile_fds(descriptors)?;
    // rustfmt the output so the committed file and a fresh one compare equal.
    for entry in std::fs::read_dir(out_dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "rs") {
            run(Command::new("rustfmt")
                .args(["--edition", "2024"])
                .arg(&path))?;
        }
    }
    Ok(())
}

fn gen_check(root: &Path) -> anyhow::Result<()> {
    let fresh = tempfile_dir()?;
    generate(root, &fresh)?;
    let committed = root.join(GENERATED_PROTO_DIR);
    let mut stale = Vec::new();
    for entry in std::fs::read_dir(&fresh)? {
        let path = entry?.path();
        let name = path.file_name().expect("read_dir yields named entries");
        let ours = std::fs::read(committed.join(name)).unwrap_or_default();
        if std::fs::read(&path)? != ours {
            stale.push(name.to_string_lossy().into_owned());
        }
    }
    let _ = std::fs::remove_dir_all(&fresh);
    if !stale.is_empty() {
        bail!(
            "generated code is stale: {}; run `cargo xtask gen` and commit",
            stale.join(", ")
        );
    }
    eprintln!("xtask: generated code is up to date");
    Ok(())
}

/// Every generated-file check: protobuf code, CRDs, the strategic-merge schema table.
fn gen_check_all(root: &Path) -> anyhow::Result<()> {
    gen_check(root)?;
    crds::check(root)?;
    patch_schema::check(root)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("flotilla-gen-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// Where `up` keeps its clusters.
fn env_dir(root: &Path) -> PathBuf {
    root.join(".flotilla/env")
}

fn up(root: &Path, count: usize) -> anyhow::Result<()> {
    down(root)?;
    let dir = env_dir(root);
    std::fs::create_dir_all(&dir)?;
    let tools = capture(&mut Command::new(
        root.join("tools/install-reference-tools"),
    ))?;
    let runtime = tokio::runtime::Runtime::new()?;
    let started = Instant::now();
    let clusters = runtime.block_on(async {
        let starts = (0..count).map(|i| {
            let mut options = ClusterOptions::named(&format!("flotilla-{i}"));
            options.parent_dir = Some(dir.clone());
            options.detached = true;
            Cluster::start(options)
        });
        futures_join(starts).await
    })?;
    println!(
        "{} cluster(s) up in {:.1?}. Try:",
        clusters.len(),
        started.elapsed()
    );
    for cluster in clusters {
        let kubeconfig = cluster.kubeconfig().display().to_string();
        let name = cluster.name().to_owned();
        let cluster_dir = cluster.detach()?;
        println!("  {name}: {tools}/kubectl --kubeconfig {kubeconfig} get nodes");
        println!(
            "  {:width$}  logs: {}/logs",
            "",
            cluster_dir.display(),
            width = name.len()
        );
    }
    println!("Stop them with: cargo xtask down");
    Ok(())
}

async fn futures_join<F>(starts: impl Iterator<Item = F>) -> anyhow::Result<Vec<Cluster>>
where
    F: std::future::Future<Output = anyhow::Result<Cluster>>,
{
    let results = flotilla_tests::join_all(starts).await;
    results.into_iter().collect()
}

fn down(root: &Path) -> anyhow::Result<()> {
    let dir = env_dir(root);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Ok(());
    };
    for entry in entries {
        let path = entry?.path();
        if path.join("pids").exists() {
            cluster::stop_detached(&path)?;
            println!("stopped {}", path.display());
        }
    }
    Ok(())
}

fn measure_clusters(count: usize) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(async {
        for round in 0..3 {
            let cluster =
                Cluster::start(ClusterOptions::named(&format!("measure-{round}"))).await?;
            println!(
                "one cluster, run {}: ready in {:.2?}",
                round + 1,
                cluster.started_in()
            );
        }
        let started = Instant::now();
        let clusters = Cluster::start_many("measure-many", count).await?;
        println!(
            "{count} clusters side by side: all ready in {:.2?}",
            started.elapsed()
        );
        // Let the controllers settle before reading memory.
        tokio::time::sleep(std::time::Duration::from_secs(15)).await;
        let mut total_kib = 0;
        for cluster in &clusters {
            let mut cluster_kib = 0;
            let mut parts = Vec::new();
            for (name, pid) in cluster.pids() {
                let kib = rss_kib(pid);
                cluster_kib += kib;
                parts.push(format!("{name} {} MiB", kib / 1024));
            }
            total_kib += cluster_kib;
            println!(
                "  {}: {} MiB ({})",
                cluster.name(),
                cluster_kib / 1024,
                parts.join(", ")
            );
        }
        println!(
            "{count} clusters: {} MiB resident in total",
            total_kib / 1024
        );
        anyhow::Ok(())
    })
}

/// Resident set size of a process, from /proc (0 when it cannot be read).
fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

fn run(command: &mut Command) -> anyhow::Result<()> {
    let status = command
        .status()
        .with_context(|| format!("running {command:?}"))?;
    if !status.success() {
        bail!("{command:?} failed ({status})");
    }
    Ok(())
}

fn capture(command: &mut Command) -> anyhow::Result<String> {
    let out = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {command:?}"))?;
    if !out.status.success() {
        bail!("{command:?} failed ({})", out.status);
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}
