//! `cargo xtask`: the one entry point for the project's chores, used by people and by CI.
//!
//! - `cargo xtask test`: everything CI checks: installs what the tests need, then format,
//!   generated code, the dependency-direction guard, lints, the whole test suite and the
//!   rendering conformance run over `../shared/charts`.
//! - `cargo xtask up [--clusters N]`: the local fleet (hub and workload clusters, the hub, the
//!   agents, the example releases), kept running; `--clusters N`: N bare clusters;
//!   `--capi`: Cluster API onboarding (`up_capi.rs`).
//! - `cargo xtask down`: stops what `up` started.
//! - `cargo xtask deps`: installs the test prerequisites only (upstream binaries, reference tools,
//!   the test servers of chart sources: the OCI registry and nginx, and crane for the images).
//! - `cargo xtask fmt | clippy | check-deps`: single steps.
//! - `cargo xtask gen | gen-crds | gen-deploy | gen-patch-schema`: regenerate committed code
//!   (protobuf, the CRDs of `deploy/crds/` and their copies, the kustomize bases rendered from
//!   `deploy/charts/`, the strategic-merge schema table); `gen-check` checks all four.
//! - `cargo xtask image --bin hub|agent --binary PATH --push REF`: builds a hub or agent image
//!   around a binary and pushes it, with crane, no container daemon (`image.rs`).
//! - `cargo xtask fuzz [TARGET] [--seconds N]`: the cargo-fuzz targets (`fuzz.rs`).
//! - `cargo xtask bench-agent`: one agent, 50 releases: install time, reconcile cost, RSS.
//! - `cargo xtask bench-flux`: the real Flux helm-controller and source-controller on the
//!   same releases (`bench_flux.rs`; the controllers are built by `tools/build-flux`).
//! - `cargo xtask bench-hub`: the hub in push mode, 500 HelmReleases at once, change
//!   latency, index fetches, the hub's RSS and CPU (see `bench_hub.rs`).
//! - `cargo xtask bench-fleet`: N releases across the two workload clusters through the hub
//!   and the agents, Flux side by side, latency of spec changes (`bench_fleet.rs`).
//! - `cargo xtask bench-sessions`: N simulated agents (the real session client and mTLS) on
//!   one hub: connect storm, rollout, chart version bump (see `bench_sessions.rs`).
//! - `cargo xtask bench-rollout`: a HelmReleaseSet rolled out in waves to N simulated
//!   clusters (the same simulated agents), its time against the sum of its gates, the hub's
//!   RSS, API writes per cluster, a breach stopping in its wave (see `bench_rollout.rs`;
//!   the simulated agents are shared in `bench_sim.rs`).
//! - `cargo xtask bench-render`: `flotilla template` timed against `helm template` on the
//!   chart corpus (see `bench_render.rs`).

mod bench_agent;
mod bench_ceiling;
mod bench_common;
mod bench_fleet;
mod bench_flux;
mod bench_hub;
mod bench_render;
mod bench_rollout;
mod bench_sessions;
mod bench_sim;
mod crds;
mod deploy;
mod fuzz;
mod image;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use flotilla_tests::bins;
use flotilla_tests::cluster::{self, Cluster, ClusterOptions};
use flotilla_tests::fleet::{self, Fleet, FleetOptions};
use std::time::Duration;

mod patch_schema;
mod up_capi;

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
    /// Install the test prerequisites: upstream Kubernetes binaries, reference tools, test servers,
    /// crane.
    Deps,
    /// Regenerate committed generated code (protobuf) from its sources.
    Gen,
    /// Check that committed generated code (protobuf, CRDs, patch schema) matches its sources.
    GenCheck,
    /// Regenerate the CRDs of deploy/crds/ (and their copies) from the flotilla-api types.
    GenCrds,
    /// Regenerate the kustomize bases of deploy/kustomize/ from the charts of deploy/charts/.
    GenDeploy,
    /// Regenerate the strategic-merge schema table from the Kubernetes OpenAPI document.
    GenPatchSchema,
    /// Check formatting.
    Fmt,
    /// Run clippy on every target with warnings denied.
    Clippy,
    /// Check that the pure crates do not depend on IO crates (tokio, tonic, hyper, kube client).
    CheckDeps,
    /// Bring up the local fleet (a hub cluster, two workload clusters, the hub, two agents,
    /// the example releases) and keep it running until `down`.
    Up(UpArgs),
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
    /// Benchmark the real Flux helm-controller and source-controller on the same releases.
    BenchFlux(bench_flux::BenchFlux),
    /// Benchmark the hub in push mode: N HelmReleases at once, change latency, sources.
    BenchHub(bench_hub::BenchHub),
    /// Benchmark the fleet: N releases across two workload clusters through the hub and the
    /// agents, and the real Flux controllers on the same releases, side by side.
    BenchFleet(bench_fleet::BenchFleet),
    /// Benchmark the hub's sessions: N simulated agents (the real session client, mTLS) join,
    /// get one HelmRelease each, and acknowledge a chart version bump.
    BenchSessions(bench_sessions::BenchSessions),
    /// Benchmark a fleet rollout: one HelmReleaseSet, N simulated clusters in waves of 1,
    /// 10% and the rest, a values change, then a change that fails on 5% of the clusters.
    BenchRollout(bench_rollout::BenchRollout),
    /// Time `flotilla template` against `helm template` on every case of the chart corpus.
    BenchRender(bench_render::BenchRenderArgs),
    /// Build the hub's or the agent's image around a binary and push it (crane, no daemon).
    Image(image::ImageArgs),
}

/// `cargo xtask up`.
#[derive(Debug, clap::Args)]
struct UpArgs {
    /// Start N bare clusters instead (no hub, no agents).
    #[arg(long, value_name = "N")]
    clusters: Option<usize>,
    /// Cluster API onboarding instead: three Clusters (env=prod) backed by local clusters,
    /// their agents bootstrapped by the hub, a HelmReleaseSet on each (`up_capi.rs`).
    #[arg(long, conflicts_with = "clusters")]
    capi: bool,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let root = cluster::workspace_root();
    std::env::set_current_dir(&root)?;
    match cli.task {
        Task::Test => test(&root),
        Task::Deps => deps(&root, Needs::Tests),
        Task::Gen => generate(&root, &root.join(GENERATED_PROTO_DIR)),
        Task::GenCheck => gen_check_all(&root),
        Task::GenCrds => crds::generate(&root),
        Task::GenDeploy => deploy::generate(&root),
        Task::GenPatchSchema => patch_schema::generate(&root),
        Task::Fmt => fmt(),
        Task::Clippy => clippy(),
        Task::CheckDeps => check_deps(),
        Task::Up(args) => up(&root, &args),
        Task::Down => down(&root),
        Task::MeasureClusters { count } => measure_clusters(count),
        Task::Fuzz(args) => fuzz::fuzz(&root, &args),
        Task::BenchAgent(args) => bench_agent::run(&root, &args),
        Task::BenchFlux(args) => bench_flux::run(&root, &args),
        Task::BenchHub(args) => bench_hub::run(&root, &args),
        Task::BenchFleet(args) => bench_fleet::run(&root, &args),
        Task::BenchSessions(args) => bench_sessions::run(&root, &args),
        Task::BenchRollout(args) => bench_rollout::run(&root, &args),
        Task::BenchRender(args) => bench_render::bench_render(&root, &args),
        Task::Image(args) => image::run(&root, &args),
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
    deps(root, Needs::Tests)?;
    step("fmt", fmt)?;
    step("gen-check", || gen_check_all(root))?;
    step("check-deps", check_deps)?;
    step("clippy", clippy)?;
    // The end-to-end suite runs the hub, agent and CLI binaries this same `cargo test` builds
    // (every one of the three packages has integration tests): no second build with other
    // features (see flotilla_tests::bins).
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    step("cargo test", || {
        run(Command::new("cargo")
            .args(["test", "--workspace", "--locked"])
            .env("FLOTILLA_BIN_DIR", target.join("debug")))
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

/// What [`deps`] installs: everything the test command needs, or only what the fleet of
/// `up` runs on (without the Flux controllers, a reference that only the differential
/// tests and the Flux benchmarks run; they build them through `tools/build-flux` too).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Needs {
    Tests,
    Fleet,
}

fn deps(root: &Path, needs: Needs) -> anyhow::Result<()> {
    step("deps", || {
        let upstream = capture(&mut Command::new(root.join("tools/build-upstream")))?;
        let tools = capture(&mut Command::new(
            root.join("tools/install-reference-tools"),
        ))?;
        let registry = capture(&mut Command::new(root.join("tools/build-registry")))?;
        let nginx = capture(&mut Command::new(root.join("tools/install-test-servers")))?;
        let crane = capture(&mut Command::new(root.join("tools/build-crane")))?;
        // The Flux differential suite (hub/tests/flux_differential.rs) runs the real Flux
        // controllers; built here (minutes, once) rather than inside a test.
        let flux = if needs == Needs::Tests {
            capture(&mut Command::new(root.join("tools/build-flux")))?
        } else {
            "(not needed: built by the commands that run Flux)".to_owned()
        };
        eprintln!("xtask: upstream binaries in {upstream}");
        eprintln!("xtask: reference helm and kubectl in {tools}");
        eprintln!("xtask: test servers: OCI registry {registry}, nginx {nginx}");
        eprintln!("xtask: crane (images) {crane}");
        eprintln!("xtask: Flux controllers {flux}");
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
        // Shared, not copied, when one archive goes to many sessions.
        .bytes(".flotilla.agent.v1.PlanUpsert.chart_archive")
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

/// Every generated-file check: protobuf code, CRDs, kustomize bases, the strategic-merge
/// schema table.
fn gen_check_all(root: &Path) -> anyhow::Result<()> {
    gen_check(root)?;
    crds::check(root)?;
    deploy::check(root)?;
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

fn up(root: &Path, args: &UpArgs) -> anyhow::Result<()> {
    down(root)?;
    let dir = env_dir(root);
    std::fs::create_dir_all(&dir)?;
    let started = Instant::now();
    eprintln!("xtask up: installing what the fleet runs on (built once, then cached)");
    deps(root, Needs::Fleet)?;
    if let Some(count) = args.clusters {
        return up_clusters(root, &dir, count);
    }
    if args.capi {
        return up_capi::run(&dir);
    }
    eprintln!(
        "xtask up: building flotilla-hub, flotilla-agent and flotilla, statically linked (cargo build; the images carry these same binaries)"
    );
    let binaries = bins::build_static(bins::Progress::Show)?;
    let tools = flotilla_tests::tools::reference_tools_dir()?;
    let runtime = tokio::runtime::Runtime::new()?;
    let fleet_started = Instant::now();
    let mut options = FleetOptions::named("flotilla");
    options.parent_dir = Some(dir.clone());
    options.detached = true;
    options.verbose = true;
    // The hub's and the agents' log filter: the user's RUST_LOG, else info.
    if let Ok(filter) = std::env::var("RUST_LOG")
        && !filter.trim().is_empty()
    {
        options.log_level = filter;
    }
    let fleet = runtime.block_on(Fleet::start(binaries, options))?;
    let say = |what: &str| eprintln!("[{:>5.1}s] {what}", fleet_started.elapsed().as_secs_f64());
    say(&format!(
        "applying {} (one HelmRelease per workload cluster)",
        fleet::EXAMPLE_RELEASES
    ));
    let applied = fleet.example_releases().and_then(|m| fleet.apply(&m));
    let ready = applied.and_then(|()| {
        runtime.block_on(fleet.wait_ready(
            &[("fleet-demo", "hello-a"), ("fleet-demo", "hello-b")],
            Duration::from_secs(300),
            |waiting| say(&format!("waiting for {}", waiting.join("; "))),
        ))
    });
    let ready = ready.and_then(|_| {
        say(&format!(
            "labelling the workload clusters as two rings and applying {EXAMPLE_SET} (a HelmReleaseSet: the canary ring, then the main ring)"
        ));
        example_set(root, &fleet)
    });
    if let Err(e) = ready {
        let hub_kubeconfig = fleet.kubeconfig().to_owned();
        let dir = fleet.detach()?;
        let kubectl = tools.join("kubectl");
        let sources = Command::new(&kubectl)
            .args([
                "get",
                "helmrepositories,ocirepositories,helmcharts,helmreleases",
                "-A",
            ])
            .env("KUBECONFIG", &hub_kubeconfig)
            .output()?;
        eprintln!("{}", String::from_utf8_lossy(&sources.stdout));
        eprintln!(
            "xtask up: the example releases did not become Ready; the fleet is left running to look at (logs in {}; KUBECONFIG={} for the hub's cluster); `cargo xtask down` stops it",
            dir.display(),
            hub_kubeconfig.display()
        );
        return Err(e);
    }
    say("building the hub's and the agent's images and pushing them to the local registry");
    let images = push_images(&fleet)?;
    let hub_kubeconfig = fleet.kubeconfig().to_owned();
    let cli = fleet.binaries().cli.clone();
    let bin_path = fleet.binaries().search_path();
    let workloads: Vec<(String, PathBuf)> = fleet
        .workloads
        .iter()
        .map(|w| (w.name.clone(), w.cluster.kubeconfig().to_owned()))
        .collect();
    let (hub_log, fleet_dir) = (fleet.hub_log().to_owned(), fleet.dir().to_owned());
    let repo_url = fleet.repo.url();
    fleet.detach()?;
    eprintln!(
        "xtask up: the fleet is up in {:.0?}: a hub cluster, {} workload clusters, Ready releases\n",
        started.elapsed(),
        workloads.len()
    );
    let kubectl = tools.join("kubectl");
    let helm = tools.join("helm");
    let show = |title: &str, command: &mut Command| -> anyhow::Result<()> {
        println!("$ {title}");
        let out = command.output()?;
        print!("{}", String::from_utf8_lossy(&out.stdout));
        eprint!("{}", String::from_utf8_lossy(&out.stderr));
        println!();
        Ok(())
    };
    show(
        "flotilla get clusters",
        Command::new(&cli)
            .args(["get", "clusters"])
            .env("KUBECONFIG", &hub_kubeconfig),
    )?;
    show(
        "kubectl get helmreleases -A",
        Command::new(&kubectl)
            .args(["get", "helmreleases", "-A"])
            .env("KUBECONFIG", &hub_kubeconfig),
    )?;
    show(
        "flotilla rollout status hello-fleet -n fleet-demo",
        Command::new(&cli)
            .args(["rollout", "status", "hello-fleet", "-n", "fleet-demo"])
            .env("KUBECONFIG", &hub_kubeconfig),
    )?;
    for (name, kubeconfig) in &workloads {
        show(
            &format!("helm list -A   # on {name}"),
            Command::new(&helm)
                .args(["list", "-A"])
                .env("KUBECONFIG", kubeconfig),
        )?;
    }
    let (a_name, a_kubeconfig) = &workloads[0];
    println!("What to try next (the tools are in {}):", tools.display());
    println!("  export PATH={}:{bin_path}:$PATH", tools.display());
    println!(
        "  export KUBECONFIG={}   # the hub's cluster",
        hub_kubeconfig.display()
    );
    println!(
        "  # change a value: the agent on {a_name} upgrades the release (helm history shows revision 2)"
    );
    println!(
        "  kubectl -n fleet-demo patch helmrelease hello-a --type merge -p '{{\"spec\":{{\"values\":{{\"message\":\"changed\"}}}}}}'"
    );
    println!("  flotilla get hr -A");
    println!(
        "  helm --kubeconfig {} history hello -n hello",
        a_kubeconfig.display()
    );
    println!("  # delete a Deployment on {a_name}: drift detection puts it back");
    println!(
        "  kubectl --kubeconfig {} -n hello delete deployment hello",
        a_kubeconfig.display()
    );
    println!("  flotilla reconcile hr hello-a -n fleet-demo    # or wait for the interval");
    println!(
        "  kubectl --kubeconfig {} -n hello get deployment hello",
        a_kubeconfig.display()
    );
    println!("  # publish a new chart version to {repo_url}, suspend/resume, the fleet CLI:");
    println!(
        "  flotilla suspend hr hello-a -n fleet-demo; flotilla resume hr hello-a -n fleet-demo"
    );
    println!(
        "  # the fleet rollout ({EXAMPLE_SET}): change its valuesTemplate, watch the canary go first"
    );
    println!("  flotilla get hrs -n fleet-demo; flotilla rollout status hello-fleet -n fleet-demo");
    println!(
        "  kubectl -n fleet-demo patch helmreleaseset hello-fleet --type merge -p '{{\"spec\":{{\"valuesTemplate\":\"message: Hi from {{{{ .ClusterName }}}}\"}}}}'"
    );
    println!("  # the images of the binaries running here, in the local registry:");
    for (chart, repository, digest) in &images {
        println!(
            "  #   {repository}:{IMAGE_TAG}@{digest}\n  helm template {chart} deploy/charts/{chart} --set image.repository={repository} --set image.tag={IMAGE_TAG}"
        );
    }
    println!(
        "Logs: {} (hub), {}/agent-*.log (agents)",
        hub_log.display(),
        fleet_dir.display()
    );
    println!("Stop everything with: cargo xtask down");
    Ok(())
}

/// The example HelmReleaseSet `up` applies after the example releases.
const EXAMPLE_SET: &str = "examples/fleet/rollout.yaml";

/// Labels the two workload clusters as the rings of [`EXAMPLE_SET`], applies it, and waits
/// for its rollout to complete (`kubectl wait --for=condition=ready`).
fn example_set(root: &Path, fleet: &Fleet) -> anyhow::Result<()> {
    for (cluster, labels) in [
        ("workload-a", ["ring=canary", "region=eu"]),
        ("workload-b", ["ring=main", "region=us"]),
    ] {
        let mut args = vec!["label", "--overwrite", "managedcluster", cluster];
        args.extend(labels);
        flotilla_tests::tools::kubectl_in(fleet.kubeconfig(), &args, None)?;
    }
    let path = root.join(EXAMPLE_SET);
    let manifest =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    fleet.apply(&manifest)?;
    flotilla_tests::tools::kubectl_in(
        fleet.kubeconfig(),
        &[
            "wait",
            "--for=condition=ready",
            "helmreleaseset/hello-fleet",
            "-n",
            "fleet-demo",
            "--timeout=300s",
        ],
        None,
    )?;
    Ok(())
}

/// The tag `up` gives the images it pushes.
const IMAGE_TAG: &str = "dev";

/// Builds the hub's and the agent's images around the binaries the fleet runs and pushes them
/// to the fleet's registry, where the charts in `deploy/charts` take them with
/// `image.repository`/`image.tag`. Returns (chart, repository, digest) for each.
fn push_images(fleet: &Fleet) -> anyhow::Result<Vec<(&'static str, String, String)>> {
    use flotilla_tests::image;
    let host = fleet.registry.host();
    let mut pushed = Vec::new();
    for (component, binary) in [
        (image::Component::Hub, &fleet.binaries().hub),
        (image::Component::Agent, &fleet.binaries().agent),
    ] {
        let chart = component.binary_name();
        let repository = format!("{host}/flotilla/{chart}");
        let options = image::ImageOptions {
            component,
            binary: binary.clone(),
            reference: format!("{repository}:{IMAGE_TAG}"),
            insecure: true,
            ca_bundle: None,
            allow_dynamic: false,
        };
        let digest = image::build_and_push(&options)
            .with_context(|| format!("building and pushing the {chart} image"))?;
        image::verify(&options).with_context(|| format!("checking the pushed {chart} image"))?;
        pushed.push((chart, repository, digest));
    }
    Ok(pushed)
}

/// `cargo xtask up --clusters N`: bare clusters, no Flotilla.
fn up_clusters(root: &Path, dir: &Path, count: usize) -> anyhow::Result<()> {
    let tools = capture(&mut Command::new(
        root.join("tools/install-reference-tools"),
    ))?;
    let runtime = tokio::runtime::Runtime::new()?;
    let started = Instant::now();
    let clusters = runtime.block_on(async {
        let starts = (0..count).map(|i| {
            let mut options = ClusterOptions::named(&format!("flotilla-{i}"));
            options.parent_dir = Some(dir.to_owned());
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
    let mut dirs: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("pids").exists())
        .collect();
    // The fleet's processes (agents, hub, servers) before the clusters they talk to.
    dirs.sort_by_key(|p| !p.join("server-dirs").exists());
    for path in dirs {
        if path.join("server-dirs").exists() {
            fleet::stop_detached(&path)?;
        } else {
            cluster::stop_detached(&path)?;
        }
        println!("stopped {}", path.display());
    }
    // What an interrupted `up` started before it could write the pids down: every process
    // whose command line names a path under the environment's directory.
    let marker = dir.to_string_lossy().into_owned();
    let strays: Vec<u32> = std::fs::read_dir("/proc")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| *pid != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .is_ok_and(|c| String::from_utf8_lossy(&c).contains(&marker))
        })
        .collect();
    for pid in &strays {
        flotilla_tests::process::terminate(*pid);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while strays.iter().any(|p| flotilla_tests::process::alive(*p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    for pid in &strays {
        if flotilla_tests::process::alive(*pid) {
            flotilla_tests::process::kill(*pid);
        }
    }
    if !strays.is_empty() {
        println!(
            "stopped {} stray process(es) of an interrupted `up`",
            strays.len()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
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
