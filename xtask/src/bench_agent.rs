//! `cargo xtask bench-agent`: one local cluster, N HelmReleases of a podinfo-like chart
//! (`agent/tests/charts/podinfo-like`: three Deployments, Services and ConfigMaps each),
//! all reconciled by ONE `flotilla-agent apply --watch` process (built with the `agent`
//! profile, as the agent ships; `--debug` for a debug build, `--agent-bin` for a given one).
//!
//! Measured, from the agent's own JSON log lines (`"message":"reconciled"` with `object`,
//! `elapsed_ms`, `actions`, `step`) and `/proc/<pid>`:
//! - total install time: from the agent's start until every release is installed and
//!   ready;
//! - steady-state reconcile cost per release: wall time of each release's first reconcile
//!   after its install (no action: the state machine finds the release in sync; with
//!   drift detection enabled in the plans, this includes the drift check), and the
//!   agent's CPU time over that round divided by N;
//! - peak RSS (`VmHWM`) and idle RSS (`VmRSS` sampled while no reconcile runs, between
//!   intervals), with where the idle pages are (`/proc/<pid>/smaps` summed by mapping
//!   kind: the agent binary's file pages, other files, heap, anonymous maps, stacks).

use std::io::{BufRead as _, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_tests::cluster::{Cluster, ClusterOptions};

use crate::bench_common::{
    ControlPlane, cpu_time, load_average, mib, proc_status_kib, release_name, release_values,
    tempfile_dir,
};

/// Options of `cargo xtask bench-agent`.
#[derive(Debug, clap::Args)]
pub struct BenchAgent {
    /// How many HelmReleases.
    #[arg(long, default_value_t = 200)]
    releases: usize,
    /// The agent's `--concurrency`.
    #[arg(long, default_value_t = 8)]
    concurrency: u16,
    /// `spec.interval` of every release, in seconds (the idle gap follows the second
    /// round, so it must exceed the install time).
    #[arg(long, default_value_t = 120)]
    interval: u64,
    /// Extra spec lines for every plan (YAML, indented by two spaces), e.g.
    /// `  driftDetection:\n    mode: enabled`.
    #[arg(long, default_value = "")]
    spec: String,
    /// Use a debug build of the agent instead of the `agent` profile.
    #[arg(long)]
    debug: bool,
    /// Use this agent binary as it is (no build).
    #[arg(long)]
    agent_bin: Option<PathBuf>,
    /// The chart every release installs (a directory); default: the repository's
    /// `agent/tests/charts/podinfo-like` (3 Deployments, 3 Services, 3 ConfigMaps). The real
    /// podinfo chart (1 Deployment, 1 Service) is `../shared/charts/podinfo/chart`.
    #[arg(long)]
    chart: Option<PathBuf>,
}

/// A `reconciled` log line of the agent.
#[derive(Debug)]
struct Reconciled {
    at: Instant,
    release: String,
    elapsed_ms: u64,
    installed: bool,
}

/// A `reconciled` line of the agent's JSON log (`--log-format json`).
fn parse_line(line: &str, at: Instant) -> Option<Reconciled> {
    let fields: serde_json::Value = serde_json::from_str(line).ok()?;
    if fields.get("message")?.as_str()? != "reconciled" {
        return None;
    }
    let actions = fields.get("actions")?.as_str()?;
    Some(Reconciled {
        at,
        release: fields.get("object")?.as_str()?.to_owned(),
        elapsed_ms: fields.get("elapsed_ms")?.as_u64()?,
        installed: actions.contains("\"install\"") && fields.get("step")?.as_str()? == "done",
    })
}

fn stats(mut ms: Vec<u64>) -> String {
    if ms.is_empty() {
        return "none".into();
    }
    ms.sort_unstable();
    let mean = ms.iter().sum::<u64>() as f64 / ms.len() as f64;
    let p = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    format!(
        "mean {mean:.0} ms, median {} ms, p95 {} ms, max {} ms",
        p(0.5),
        p(0.95),
        ms[ms.len() - 1]
    )
}

fn build_agent(root: &Path, debug: bool) -> anyhow::Result<PathBuf> {
    let mut cargo = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cargo.args([
        "build",
        "-p",
        "flotilla-agent",
        "--bin",
        "flotilla-agent",
        "--locked",
    ]);
    if !debug {
        cargo.args(["--profile", "agent"]);
    }
    let status = cargo.status().context("running cargo build")?;
    if !status.success() {
        bail!("building flotilla-agent failed ({status})");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let bin = target
        .join(if debug { "debug" } else { "agent" })
        .join("flotilla-agent");
    anyhow::ensure!(bin.is_file(), "{} was not built", bin.display());
    Ok(bin)
}

fn write_plans(dir: &Path, chart: &Path, args: &BenchAgent) -> anyhow::Result<()> {
    for i in 0..args.releases {
        // The values as a JSON flow mapping (JSON is YAML), shared with `bench-flux`.
        let text = format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: {name}
  namespace: default
  generation: 1
spec:
  interval: {interval}s
  timeout: 5m
  values: {values}
{spec}
chart:
  path: {chart}
",
            name = release_name(i),
            values = release_values(i),
            interval = args.interval,
            spec = args.spec,
            chart = chart.display(),
        );
        std::fs::write(dir.join(format!("{}.yaml", release_name(i))), text)?;
    }
    Ok(())
}

/// Runs the benchmark and prints the report.
pub fn run(root: &Path, args: &BenchAgent) -> anyhow::Result<()> {
    let bin = match &args.agent_bin {
        Some(bin) => bin.clone(),
        None => build_agent(root, args.debug)?,
    };
    let runtime = tokio::runtime::Runtime::new()?;
    let cluster = runtime.block_on(Cluster::start(ClusterOptions::named("bench-agent")))?;
    let plans = tempfile_dir("flotilla-bench-plans")?;
    let chart = args
        .chart
        .clone()
        .unwrap_or_else(|| root.join("agent/tests/charts/podinfo-like"));
    let chart = chart
        .canonicalize()
        .with_context(|| format!("chart {}", chart.display()))?;
    write_plans(&plans, &chart, args)?;

    let started = Instant::now();
    let cache = plans.join("chart-cache");
    let mut child = Command::new(&bin)
        .args(["--log-format", "json"])
        .arg("apply")
        .arg("--watch")
        .arg("--concurrency")
        .arg(args.concurrency.to_string())
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg(&plans)
        .env("RUST_LOG", "flotilla_agent=info")
        .env("FLOTILLA_CHART_CACHE", &cache)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = child.id();
    let stderr = child.stderr.take().context("the agent's stderr is piped")?;
    let (tx, rx) = mpsc::channel();
    let log_path = plans.join("agent.log");
    let mut log = std::fs::File::create(&log_path)?;
    std::thread::spawn(move || {
        use std::io::Write as _;
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = writeln!(log, "{line}");
            if let Some(r) = parse_line(&line, Instant::now())
                && tx.send(r).is_err()
            {
                break;
            }
        }
    });
    let control_plane = ControlPlane {
        pids: cluster.pids(),
        client: runtime.block_on(cluster.client())?,
    };
    let result = measure(pid, &rx, started, args, &control_plane, &runtime);
    // SIGTERM: the agent stops between reconciles.
    flotilla_tests::process::terminate(pid);
    let _ = child.wait();
    drop(cluster);
    match result {
        Ok(report) => {
            println!("{report}");
            println!("(agent log: {})", log_path.display());
            Ok(())
        }
        Err(e) => Err(e.context(format!("agent log: {}", log_path.display()))),
    }
}

fn measure(
    pid: u32,
    rx: &mpsc::Receiver<Reconciled>,
    started: Instant,
    args: &BenchAgent,
    control_plane: &ControlPlane,
    runtime: &tokio::runtime::Runtime,
) -> anyhow::Result<String> {
    let plane_before = runtime.block_on(control_plane.sample())?;
    let n = args.releases;
    let deadline = started + Duration::from_secs(900);
    let mut installed: std::collections::BTreeMap<String, Instant> = Default::default();
    let mut steady: std::collections::BTreeMap<String, u64> = Default::default();
    let mut install_ms = Vec::new();
    let mut install_done = None;
    let mut peak_after_install = 0;
    let mut cpu_at_install = Duration::ZERO;
    let mut plane_at_install = None;
    let mut last_event = Instant::now();
    // Phase 1 and 2: every release installed, then reconciled once more.
    while steady.len() < n {
        if Instant::now() > deadline {
            bail!(
                "timed out: {} of {n} installed, {} reconciled again",
                installed.len(),
                steady.len()
            );
        }
        let Ok(r) = rx.recv_timeout(Duration::from_millis(200)) else {
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                bail!("the agent exited");
            }
            continue;
        };
        last_event = r.at;
        if r.installed && !installed.contains_key(&r.release) {
            installed.insert(r.release.clone(), r.at);
            install_ms.push(r.elapsed_ms);
            if installed.len() == n {
                install_done = Some(r.at);
                peak_after_install = proc_status_kib(pid, "VmHWM:")?;
                cpu_at_install = cpu_time(pid)?;
                plane_at_install = Some(runtime.block_on(control_plane.sample())?);
            }
        } else if installed.contains_key(&r.release) && !steady.contains_key(&r.release) {
            steady.insert(r.release.clone(), r.elapsed_ms);
        }
    }
    let cpu_steady = cpu_time(pid)?.saturating_sub(cpu_at_install);
    // Phase 3: idle between intervals. The next round starts one interval after the
    // first steady reconcile; sample while nothing is reported.
    let mut idle = Vec::new();
    let window_end = Instant::now() + Duration::from_secs(5);
    while Instant::now() < window_end {
        match rx.recv_timeout(Duration::from_millis(250)) {
            Ok(r) => {
                last_event = r.at;
                idle.clear();
            }
            Err(_) => {
                if last_event.elapsed() > Duration::from_secs(1) {
                    idle.push(proc_status_kib(pid, "VmRSS:")?);
                }
            }
        }
    }
    let peak = proc_status_kib(pid, "VmHWM:")?;
    let threads = proc_status_kib(pid, "Threads:")?;
    let breakdown = if idle.is_empty() {
        String::new()
    } else {
        let smaps = std::fs::read_to_string(format!("/proc/{pid}/smaps"))
            .with_context(|| format!("reading /proc/{pid}/smaps"))?;
        let exe = std::fs::read_link(format!("/proc/{pid}/exe"))
            .with_context(|| format!("reading /proc/{pid}/exe"))?;
        format!("\n{}", smaps_breakdown(&smaps, &exe.to_string_lossy()))
    };
    let install_time = install_done.context("installs finished")? - started;
    let load = load_average();
    let idle_rss = idle.iter().copied().max();
    let plane = plane_at_install.context("installs finished")?.since(
        &plane_before,
        &[("agent", cpu_at_install)],
        install_time,
    );
    Ok(format!(
        "bench-agent: {n} releases of {chart}, one agent, concurrency {c}, interval {i}s
  total install time (agent start to all {n} installed and ready): {install:.1} s = {rate:.1} installs/s
  per-release install reconcile: {install_stats}
  steady-state reconcile per release (first reconcile after install, no action): {steady_stats}
  steady-state CPU per release: {cpu:.1} ms ({cpu_total:.2} s for the round of {n})
  peak RSS (VmHWM): {peak} (after installs: {peak_install})
  idle RSS (VmRSS between intervals, max of {samples} samples): {idle}
  threads when idle: {threads}
  machine load (1-minute average at the end): {load}
{plane}{breakdown}",
        c = args.concurrency,
        i = args.interval,
        chart = args.chart.as_ref().map_or_else(
            || "podinfo-like (3 Deployments, 3 Services, 3 ConfigMaps each)".to_owned(),
            |c| c.display().to_string()
        ),
        install = install_time.as_secs_f64(),
        rate = n as f64 / install_time.as_secs_f64(),
        install_stats = stats(install_ms),
        steady_stats = stats(steady.into_values().collect()),
        cpu = cpu_steady.as_secs_f64() * 1000.0 / n as f64,
        cpu_total = cpu_steady.as_secs_f64(),
        peak = mib(peak),
        peak_install = mib(peak_after_install),
        samples = idle.len(),
        idle = idle_rss.map_or("not measured (no quiet window)".to_owned(), mib),
    ))
}

/// Resident pages of one kind of mapping, in KiB.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Pages {
    rss: u64,
    private: u64,
    shared: u64,
}

/// The mapping kinds of the idle breakdown, in report order.
const KINDS: [&str; 6] = [
    "agent binary (file)",
    "other files (libc, ...)",
    "[heap] (main arena)",
    "anonymous (other arenas, mmap)",
    "thread stacks ([stack] + guard-page maps)",
    "kernel ([vdso], [vvar], ...)",
];

/// Sums `/proc/<pid>/smaps` by mapping kind (see [`KINDS`]); `exe` is the binary's path.
/// An anonymous map directly above a one-page `---p` map (glibc's guard page) is counted as
/// a thread stack; larger `---p` maps are reserved, untouched address space (arenas).
fn smaps_totals(smaps: &str, exe: &str) -> [Pages; KINDS.len()] {
    let mut totals = [Pages::default(); KINDS.len()];
    let mut kind = None;
    let mut after_guard = false;
    for line in smaps.lines() {
        let mut fields = line.split_whitespace();
        let Some(first) = fields.next() else { continue };
        if first.contains('-') && !first.ends_with(':') {
            // A mapping header: `start-end perms offset dev inode [path]`.
            let perms = fields.next().unwrap_or_default();
            let path = fields.nth(3).unwrap_or_default();
            kind = Some(if path == exe {
                0
            } else if path.starts_with('/') {
                1
            } else if path == "[heap]" {
                2
            } else if path == "[stack]" || (path.is_empty() && after_guard) {
                4
            } else if path.is_empty() {
                3
            } else {
                5
            });
            after_guard = path.is_empty() && perms == "---p" && map_bytes(first) == Some(4096);
            continue;
        }
        let Some(k) = kind else { continue };
        let kib: u64 = fields.next().and_then(|v| v.parse().ok()).unwrap_or(0);
        match first {
            "Rss:" => totals[k].rss += kib,
            "Private_Clean:" | "Private_Dirty:" => totals[k].private += kib,
            "Shared_Clean:" | "Shared_Dirty:" => totals[k].shared += kib,
            _ => {}
        }
    }
    totals
}

/// The size of a smaps `start-end` address range.
fn map_bytes(range: &str) -> Option<u64> {
    let (start, end) = range.split_once('-')?;
    let start = u64::from_str_radix(start, 16).ok()?;
    u64::from_str_radix(end, 16).ok()?.checked_sub(start)
}

/// The idle breakdown's report lines.
pub(crate) fn smaps_breakdown(smaps: &str, exe: &str) -> String {
    let totals = smaps_totals(smaps, exe);
    let mut out = String::from("  idle RSS by mapping (/proc/PID/smaps; Rss = Private + Shared):");
    for (name, t) in KINDS.iter().zip(totals) {
        out.push_str(&format!(
            "\n    {name:<42} Rss {:>6} KiB  Private {:>6} KiB  Shared {:>6} KiB",
            t.rss, t.private, t.shared
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconciled_json_log_line_is_parsed() {
        let line = r#"{"timestamp":"2026-11-26T05:00:00.123456Z","level":"INFO","message":"reconciled","object":"default/bench-001","revision":"1","elapsed_ms":734,"actions":"[\"install\"]","step":"done","target":"flotilla_agent::runtime"}"#;
        let r = parse_line(line, Instant::now()).expect("parsed");
        assert_eq!(r.release, "default/bench-001");
        assert_eq!(r.elapsed_ms, 734);
        assert!(r.installed);
        let steady = r#"{"message":"reconciled","object":"default/b","elapsed_ms":12,"actions":"[]","step":"done"}"#;
        let r = parse_line(steady, Instant::now()).expect("parsed");
        assert_eq!(
            (r.release.as_str(), r.elapsed_ms, r.installed),
            ("default/b", 12, false)
        );
        assert!(parse_line(r#"{"message":"plan accepted"}"#, Instant::now()).is_none());
        assert!(parse_line("INFO not json", Instant::now()).is_none());
    }

    #[test]
    fn smaps_mappings_are_summed_by_kind() {
        // The layout of /proc/PID/smaps (proc(5)), with made-up figures.
        let smaps = "\
55d0a0000000-55d0a1000000 r-xp 00001000 fd:01 42   /opt/flotilla-agent
Size:              16384 kB
Rss:                1000 kB
Shared_Clean:        200 kB
Shared_Dirty:          0 kB
Private_Clean:       800 kB
Private_Dirty:         0 kB
55d0a2000000-55d0a2100000 rw-p 00000000 00:00 0    [heap]
Rss:                 300 kB
Shared_Clean:          0 kB
Private_Dirty:       300 kB
7f0000000000-7f0000001000 ---p 00000000 00:00 0
Rss:                   0 kB
7f0000001000-7f0000201000 rw-p 00000000 00:00 0
Rss:                  16 kB
Private_Dirty:        16 kB
7f0000300000-7f0000400000 rw-p 00000000 00:00 0
Rss:                  64 kB
Private_Dirty:        64 kB
7f1000000000-7f1000100000 r-xp 00000000 fd:01 7    /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 900 kB
Shared_Clean:        880 kB
Private_Dirty:        20 kB
7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0    [stack]
Rss:                  12 kB
Private_Dirty:        12 kB
7ffd00100000-7ffd00102000 r-xp 00000000 00:00 0    [vdso]
Rss:                   4 kB
Shared_Clean:          4 kB
";
        let t = smaps_totals(smaps, "/opt/flotilla-agent");
        let p = |rss, private, shared| Pages {
            rss,
            private,
            shared,
        };
        assert_eq!(
            t,
            [
                p(1000, 800, 200),
                p(900, 20, 880),
                p(300, 300, 0),
                p(64, 64, 0),
                p(28, 28, 0),
                p(4, 0, 4),
            ]
        );
    }
}
