//! `cargo xtask bench-render`: `flotilla template` against the reference `helm template` on
//! every case of the chart corpus (`../shared/charts`), both timed in the same run.
//!
//! For each `golden/<stem>.cmd` the words after `helm template` are given unchanged to both
//! tools, run from the chart's corpus directory as the `.cmd` says. Wall time is measured by
//! `hyperfine -N` (no shell; warmup and run counts configurable), peak resident memory by
//! `/usr/bin/time -f %M` (the median of a few runs). The table goes to stdout and, as
//! markdown and JSON, to `<cargo target dir>/bench-render/`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{Context as _, bail};
use flotilla_tests::conformance;

/// Options of `cargo xtask bench-render`.
#[derive(Debug, clap::Args)]
pub struct BenchRenderArgs {
    /// hyperfine warmup runs per command.
    #[arg(long, default_value_t = 3)]
    pub warmup: u32,
    /// hyperfine timed runs per command.
    #[arg(long, default_value_t = 20)]
    pub runs: u32,
    /// Runs of `/usr/bin/time` per command for peak RSS (the median is reported).
    #[arg(long, default_value_t = 3)]
    pub rss_runs: u32,
    /// Only charts whose name contains one of these (default: every chart).
    #[arg(long = "chart")]
    pub charts: Vec<String>,
    /// The corpus (default: `../shared/charts` beside the repository).
    #[arg(long)]
    pub corpus: Option<PathBuf>,
    /// The `flotilla` binary to measure instead of building one in release mode.
    #[arg(long)]
    pub flotilla: Option<PathBuf>,
}

/// One measured case.
#[derive(Debug, Clone)]
struct Row {
    chart: String,
    stem: String,
    flotilla_ms: f64,
    helm_ms: f64,
    flotilla_rss_kib: u64,
    helm_rss_kib: u64,
}

impl Row {
    fn ratio(&self) -> f64 {
        self.helm_ms / self.flotilla_ms
    }
    fn rss_ratio(&self) -> f64 {
        self.helm_rss_kib as f64 / self.flotilla_rss_kib.max(1) as f64
    }
}

/// Runs the benchmark.
pub fn bench_render(root: &Path, args: &BenchRenderArgs) -> anyhow::Result<()> {
    let found = |tool: &str| {
        Command::new(tool)
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok()
    };
    let tools = ["hyperfine", "/usr/bin/time"];
    if !tools.iter().all(|t| found(t)) {
        // Debian's packages, as the other install steps take theirs (tools/).
        eprintln!("bench-render: installing the Debian packages hyperfine and time");
        let _ = Command::new("sh")
            .args([
                "-c",
                "apt-get update -qq >/dev/null && apt-get install -y -qq hyperfine time >/dev/null",
            ])
            .status();
    }
    for tool in tools {
        if !found(tool) {
            bail!("bench-render needs `{tool}` (Debian packages `hyperfine` and `time`)");
        }
    }
    let target_dir = target_dir(root)?;
    let flotilla = match &args.flotilla {
        Some(p) => std::fs::canonicalize(p).with_context(|| format!("{}", p.display()))?,
        None => {
            let status = Command::new("cargo")
                .args(["build", "--release", "--locked", "-p", "flotilla-cli"])
                .status()
                .context("running cargo build")?;
            if !status.success() {
                bail!("cargo build --release -p flotilla-cli failed ({status})");
            }
            target_dir.join("release/flotilla")
        }
    };
    let helm = flotilla_tests::tools::helm()?;
    let corpus = args
        .corpus
        .clone()
        .unwrap_or_else(conformance::default_corpus);
    let cases: Vec<conformance::Case> = conformance::cases(&corpus)
        .with_context(|| format!("reading the corpus {}", corpus.display()))?
        .into_iter()
        .filter(|c| args.charts.is_empty() || args.charts.iter().any(|n| c.chart.contains(n)))
        .collect();
    if cases.is_empty() {
        bail!("no case in {} matches", corpus.display());
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "xtask: bench-render: {} cases, flotilla {}, helm {}, load average {}",
        cases.len(),
        flotilla.display(),
        helm.display(),
        load.trim()
    );
    let work = target_dir.join("bench-render");
    std::fs::create_dir_all(&work)?;
    let mut rows = Vec::new();
    for case in &cases {
        let cmd_path = case.dir.join("golden").join(format!("{}.cmd", case.stem));
        let text = std::fs::read_to_string(&cmd_path)
            .with_context(|| format!("reading {}", cmd_path.display()))?;
        let words = template_args(&text).with_context(|| format!("{}", cmd_path.display()))?;
        let row = measure(case, &words, &flotilla, &helm, args, &work)?;
        eprintln!(
            "xtask: {:<30} flotilla {:>7.1} ms  helm {:>7.1} ms  {:>5.1}x  RSS {:>6.1}/{:>6.1} MiB",
            format!("{}/{}", row.chart, row.stem),
            row.flotilla_ms,
            row.helm_ms,
            row.ratio(),
            row.flotilla_rss_kib as f64 / 1024.0,
            row.helm_rss_kib as f64 / 1024.0,
        );
        rows.push(row);
    }
    let table = markdown(&rows, load.trim(), args);
    println!("{table}");
    let md = work.join("bench-render.md");
    std::fs::write(&md, &table)?;
    let json = work.join("bench-render.json");
    std::fs::write(&json, json_report(&rows, load.trim(), args)?)?;
    eprintln!("xtask: wrote {} and {}", md.display(), json.display());
    Ok(())
}

/// Cargo's target directory (honours `CARGO_TARGET_DIR`).
fn target_dir(root: &Path) -> anyhow::Result<PathBuf> {
    let out = Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .current_dir(root)
        .stderr(Stdio::inherit())
        .output()
        .context("running cargo metadata")?;
    if !out.status.success() {
        bail!("cargo metadata failed ({})", out.status);
    }
    let v: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading cargo metadata")?;
    v.get("target_directory")
        .and_then(|d| d.as_str())
        .map(PathBuf::from)
        .context("cargo metadata has no target_directory")
}

/// The words after `helm template` on the first command line of a `.cmd` file.
fn template_args(cmd: &str) -> anyhow::Result<Vec<String>> {
    // Validates the command the way the conformance runner reads it.
    conformance::parse_command(cmd).map_err(anyhow::Error::msg)?;
    let line = cmd
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .context("no command")?;
    Ok(line
        .split_whitespace()
        .skip(2)
        .map(str::to_string)
        .collect())
}

fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| {
            if w.chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_./=,:".contains(c))
            {
                w.clone()
            } else {
                format!("'{}'", w.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn measure(
    case: &conformance::Case,
    words: &[String],
    flotilla: &Path,
    helm: &Path,
    args: &BenchRenderArgs,
    work: &Path,
) -> anyhow::Result<Row> {
    let tail = shell_words(words);
    let commands = [
        format!("{} template {tail}", shell_words(&[path_str(flotilla)?])),
        format!("{} template {tail}", shell_words(&[path_str(helm)?])),
    ];
    let export = work.join(format!("{}-{}.json", case.chart, case.stem));
    let status = Command::new("hyperfine")
        .current_dir(&case.dir)
        .args(["-N", "--style", "none", "--warmup"])
        .arg(args.warmup.to_string())
        .arg("--runs")
        .arg(args.runs.to_string())
        .arg("--export-json")
        .arg(&export)
        .args(&commands)
        .stdout(Stdio::null())
        .status()
        .context("running hyperfine")?;
    if !status.success() {
        bail!(
            "hyperfine failed for {}/{} ({status}); run the commands by hand from {}",
            case.chart,
            case.stem,
            case.dir.display()
        );
    }
    let report: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&export)?)
        .with_context(|| format!("reading {}", export.display()))?;
    let median = |i: usize| -> anyhow::Result<f64> {
        report
            .pointer(&format!("/results/{i}/median"))
            .and_then(|m| m.as_f64())
            .map(|s| s * 1000.0)
            .with_context(|| format!("{}: no median for command {i}", export.display()))
    };
    let rss = |tool: &Path| -> anyhow::Result<u64> {
        let mut samples = Vec::new();
        for _ in 0..args.rss_runs.max(1) {
            let out = Command::new("/usr/bin/time")
                .current_dir(&case.dir)
                .args(["-f", "%M"])
                .arg(tool)
                .arg("template")
                .args(words)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .context("running /usr/bin/time")?;
            if !out.status.success() {
                bail!(
                    "{} template failed for {}/{} ({})",
                    tool.display(),
                    case.chart,
                    case.stem,
                    out.status
                );
            }
            let stderr = String::from_utf8_lossy(&out.stderr);
            let kib = stderr
                .lines()
                .last()
                .and_then(|l| l.trim().parse::<u64>().ok())
                .with_context(|| format!("no peak RSS in /usr/bin/time output: {stderr}"))?;
            samples.push(kib);
        }
        samples.sort_unstable();
        Ok(samples[samples.len() / 2])
    };
    Ok(Row {
        chart: case.chart.clone(),
        stem: case.stem.clone(),
        flotilla_ms: median(0)?,
        helm_ms: median(1)?,
        flotilla_rss_kib: rss(flotilla)?,
        helm_rss_kib: rss(helm)?,
    })
}

fn path_str(p: &Path) -> anyhow::Result<String> {
    p.to_str()
        .map(str::to_string)
        .with_context(|| format!("path is not UTF-8: {}", p.display()))
}

fn markdown(rows: &[Row], load: &str, args: &BenchRenderArgs) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "`flotilla template` vs `helm template`: medians of {} runs after {} warmups (hyperfine -N), peak RSS median of {} (/usr/bin/time); load average at start: {load}\n",
        args.runs, args.warmup, args.rss_runs
    );
    s.push_str("| chart | case | flotilla ms | helm ms | speed-up | flotilla RSS MiB | helm RSS MiB | RSS ratio |\n");
    s.push_str("|---|---|---:|---:|---:|---:|---:|---:|\n");
    for r in rows {
        let _ = writeln!(
            s,
            "| {} | {} | {:.1} | {:.1} | {:.1}x | {:.1} | {:.1} | {:.1}x |",
            r.chart,
            r.stem,
            r.flotilla_ms,
            r.helm_ms,
            r.ratio(),
            r.flotilla_rss_kib as f64 / 1024.0,
            r.helm_rss_kib as f64 / 1024.0,
            r.rss_ratio(),
        );
    }
    if let (Some(speed), Some(mem)) = (
        rows.iter().map(Row::ratio).reduce(f64::min),
        rows.iter().map(Row::rss_ratio).reduce(f64::min),
    ) {
        let _ = writeln!(
            s,
            "\nlowest speed-up {speed:.1}x, lowest RSS ratio {mem:.1}x over {} cases",
            rows.len()
        );
    }
    s
}

fn json_report(rows: &[Row], load: &str, args: &BenchRenderArgs) -> anyhow::Result<String> {
    let cases: Vec<serde_json::Value> = rows
        .iter()
        .map(|r| {
            serde_json::json!({
                "chart": r.chart,
                "case": r.stem,
                "flotilla_median_ms": r.flotilla_ms,
                "helm_median_ms": r.helm_ms,
                "speedup": r.ratio(),
                "flotilla_peak_rss_kib": r.flotilla_rss_kib,
                "helm_peak_rss_kib": r.helm_rss_kib,
                "rss_ratio": r.rss_ratio(),
            })
        })
        .collect();
    Ok(serde_json::to_string_pretty(&serde_json::json!({
        "load_average": load,
        "warmup": args.warmup,
        "runs": args.runs,
        "rss_runs": args.rss_runs,
        "cases": cases,
    }))?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_args_are_the_words_after_helm_template() {
        let cmd = "# run from the directory x/\nhelm template x chart/ --namespace corpus -f values/default.yaml --include-crds\n";
        assert_eq!(
            template_args(cmd).expect("valid"),
            [
                "x",
                "chart/",
                "--namespace",
                "corpus",
                "-f",
                "values/default.yaml",
                "--include-crds"
            ]
        );
        assert!(template_args("kubectl apply -f x").is_err());
    }

    #[test]
    fn shell_words_quote_only_what_needs_it() {
        assert_eq!(
            shell_words(&["a/b.yaml".into(), "x y".into(), "it's".into()]),
            r"a/b.yaml 'x y' 'it'\''s'"
        );
    }
}
