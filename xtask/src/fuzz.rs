//! `cargo xtask fuzz [TARGET] [--seconds N] [--seed] [--minimize]`: runs the cargo-fuzz
//! targets of `fuzz/` (installing cargo-fuzz when it is missing), one after the other.
//!
//! Each run reads the committed corpus `fuzz/corpus/TARGET` and writes what it finds to
//! `fuzz/target/corpus-work/TARGET`, so the committed corpus only changes with
//! `--minimize` (which merges the two, inputs up to a size per target, and runs `cargo fuzz
//! cmin`; with `--seconds 0`, only that). `--seed` first fills the work corpus from real
//! inputs: the repository's fixtures and `../shared/charts`.
//! Crashes land in `fuzz/artifacts/TARGET/`; replay one with
//! `cargo +nightly fuzz run TARGET fuzz/artifacts/TARGET/crash-...` from `fuzz/`.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

/// A fuzz target and the libFuzzer limits it runs with.
struct Target {
    name: &'static str,
    /// `-max_len`: the largest input tried.
    max_len: usize,
    /// The largest new input `--minimize` adds to the committed corpus (keeps it small).
    keep_max: usize,
}

const TARGETS: &[Target] = &[
    Target {
        name: "template_parse",
        max_len: 16 << 10,
        keep_max: 4 << 10,
    },
    Target {
        name: "template_exec",
        max_len: 32 << 10,
        keep_max: 4 << 10,
    },
    Target {
        name: "yaml_values",
        max_len: 32 << 10,
        keep_max: 8 << 10,
    },
    Target {
        name: "strvals",
        max_len: 4 << 10,
        keep_max: 4 << 10,
    },
    Target {
        name: "chart_archive",
        max_len: 128 << 10,
        keep_max: 8 << 10,
    },
    Target {
        name: "postrender",
        max_len: 32 << 10,
        keep_max: 4 << 10,
    },
    Target {
        name: "agent_messages",
        max_len: 64 << 10,
        keep_max: 4 << 10,
    },
];

/// Seconds one input may run before libFuzzer reports a timeout.
const INPUT_TIMEOUT_SECS: u32 = 20;
/// Resident memory beyond which libFuzzer reports an out-of-memory.
const RSS_LIMIT_MB: u32 = 3072;

/// Options of `cargo xtask fuzz`.
#[derive(Debug, clap::Args)]
pub struct FuzzArgs {
    /// One target (template_parse, template_exec, yaml_values, strvals, chart_archive,
    /// postrender, agent_messages);
    /// all of them, one after the other, when omitted.
    target: Option<String>,
    /// How long each target runs; 0 skips the run (with --minimize: only merge and minimise).
    #[arg(long, default_value_t = 600)]
    seconds: u64,
    /// Add seed inputs from the repository's fixtures and ../shared/charts first.
    #[arg(long)]
    seed: bool,
    /// Afterwards merge what the run found into fuzz/corpus/TARGET and minimise it.
    #[arg(long)]
    minimize: bool,
}

pub fn fuzz(root: &Path, args: &FuzzArgs) -> anyhow::Result<()> {
    let targets: Vec<&Target> = match &args.target {
        None => TARGETS.iter().collect(),
        Some(name) => match TARGETS.iter().find(|t| t.name == name) {
            Some(t) => vec![t],
            None => bail!(
                "unknown fuzz target {name:?}; the targets are: {}",
                TARGETS
                    .iter()
                    .map(|t| t.name)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        },
    };
    ensure_cargo_fuzz()?;
    let fuzz_dir = root.join("fuzz");
    for t in targets {
        let committed = fuzz_dir.join("corpus").join(t.name);
        let work = fuzz_dir.join("target").join("corpus-work").join(t.name);
        std::fs::create_dir_all(&committed)?;
        std::fs::create_dir_all(&work)?;
        if args.seed {
            let n = write_seeds(root, t, &work)?;
            eprintln!("xtask: {}: {n} seed inputs in {}", t.name, work.display());
        }
        if args.seconds > 0 {
            eprintln!("xtask: fuzzing {} for {} s", t.name, args.seconds);
            let status = Command::new("cargo")
                .current_dir(&fuzz_dir)
                .args(["+nightly", "fuzz", "run", t.name])
                .arg(&work)
                .arg(&committed)
                .arg("--")
                .arg(format!("-max_total_time={}", args.seconds))
                .arg(format!("-max_len={}", t.max_len))
                .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
                .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
                .arg("-print_final_stats=1")
                .status()
                .context("running cargo fuzz")?;
            if !status.success() {
                bail!(
                    "fuzz target {} failed ({status}); the input is in fuzz/artifacts/{}/",
                    t.name,
                    t.name
                );
            }
        }
        if args.minimize {
            minimize(&fuzz_dir, t, &work, &committed)?;
        }
    }
    Ok(())
}

fn ensure_cargo_fuzz() -> anyhow::Result<()> {
    let present = Command::new("cargo")
        .args(["+nightly", "fuzz", "--version"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if present {
        return Ok(());
    }
    eprintln!("xtask: installing cargo-fuzz");
    let status = Command::new("cargo")
        .args(["install", "cargo-fuzz", "--locked"])
        .status()
        .context("running cargo install cargo-fuzz")?;
    if !status.success() {
        bail!("cargo install cargo-fuzz failed ({status})");
    }
    Ok(())
}

/// Copies the work corpus (inputs up to `keep_max` bytes) into the committed one and
/// minimises it in place.
fn minimize(fuzz_dir: &Path, t: &Target, work: &Path, committed: &Path) -> anyhow::Result<()> {
    for entry in std::fs::read_dir(work)? {
        let entry = entry?;
        let to = committed.join(entry.file_name());
        if !to.exists() && entry.metadata()?.len() <= t.keep_max as u64 {
            std::fs::copy(entry.path(), &to)?;
        }
    }
    let status = Command::new("cargo")
        .current_dir(fuzz_dir)
        .args(["+nightly", "fuzz", "cmin", t.name])
        .arg(committed)
        .arg("--")
        .arg(format!("-max_len={}", t.max_len))
        .arg(format!("-timeout={INPUT_TIMEOUT_SECS}"))
        .arg(format!("-rss_limit_mb={RSS_LIMIT_MB}"))
        .status()
        .context("running cargo fuzz cmin")?;
    if !status.success() {
        bail!("cargo fuzz cmin {} failed ({status})", t.name);
    }
    Ok(())
}

/// Writes the seed inputs of `t` into `dir`, named by content; returns how many.
fn write_seeds(root: &Path, t: &Target, dir: &Path) -> anyhow::Result<usize> {
    let shared = root.join("../shared/charts");
    let mut seeds: BTreeSet<Vec<u8>> = BTreeSet::new();
    let charts = chart_dirs(root, &shared);
    match t.name {
        "template_parse" | "template_exec" => {
            for chart in &charts {
                let helpers = std::fs::read(chart.join("templates/_helpers.tpl")).ok();
                for f in files_under(&chart.join("templates")) {
                    let Ok(text) = std::fs::read(&f) else {
                        continue;
                    };
                    let mut seed = text.clone();
                    if let Some(h) = &helpers {
                        seed.push(0);
                        seed.extend_from_slice(h);
                    }
                    seeds.insert(seed);
                    seeds.insert(text);
                }
            }
            for dir in ["gotmpl/tests/fixtures/ok", "gotmpl/tests/fixtures/errors"] {
                for f in files_under(&root.join(dir)) {
                    if let Ok(text) = std::fs::read(&f) {
                        seeds.insert(text);
                    }
                }
            }
            for json in [
                "gotmpl/tests/fixtures/fuzz_cases.json",
                "gotmpl/tests/fixtures/struct_cases.json",
            ] {
                seeds.extend(json_strings(&root.join(json))?);
            }
        }
        "yaml_values" => {
            let fixtures = ["yaml/tests/fixtures", "chart/tests/fixtures"]
                .into_iter()
                .flat_map(|d| files_under(&root.join(d)));
            for f in charts.iter().flat_map(|c| files_under(c)).chain(fixtures) {
                let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if [".yaml", ".yml", ".json"].iter().any(|e| name.ends_with(e))
                    && let Ok(text) = std::fs::read(&f)
                {
                    seeds.insert(text);
                }
            }
            for values in files_under(&shared).into_iter().filter(|p| {
                p.parent()
                    .and_then(|d| d.file_name())
                    .is_some_and(|d| d == "values")
            }) {
                if let Ok(text) = std::fs::read(&values) {
                    seeds.insert(text);
                }
            }
        }
        "strvals" => {
            let cases =
                std::fs::read_to_string(root.join("chart/tests/fixtures/strvals/cases.txt"))
                    .context("reading the strvals cases")?;
            for line in cases.lines() {
                let Some((flag, arg)) = line.split_once('\t') else {
                    continue;
                };
                let mode = match flag {
                    "--set" => 's',
                    "--set-string" => 'S',
                    "--set-json" => 'j',
                    "--set-file" => 'f',
                    "--set-literal" => 'l',
                    _ => continue,
                };
                seeds.insert(format!("{mode}{arg}").into_bytes());
            }
            for cmd in files_under(&shared)
                .into_iter()
                .filter(|p| p.extension().is_some_and(|e| e == "cmd"))
            {
                let text = std::fs::read_to_string(&cmd).unwrap_or_default();
                let words: Vec<&str> = text.split_whitespace().collect();
                let mut lines = Vec::new();
                for w in words.windows(2) {
                    let mode = match w[0] {
                        "--set" => 's',
                        "--set-string" => 'S',
                        "--set-json" => 'j',
                        "--set-file" => 'f',
                        "--set-literal" => 'l',
                        _ => continue,
                    };
                    lines.push(format!("{mode}{}", w[1]));
                }
                if !lines.is_empty() {
                    seeds.insert(lines.join("\n").into_bytes());
                }
            }
        }
        "chart_archive" => {
            for tgz in files_under(root)
                .into_iter()
                .filter(|p| {
                    !p.starts_with(root.join("target")) && !p.starts_with(root.join("fuzz"))
                })
                .filter(|p| p.to_str().is_some_and(|s| s.ends_with(".tgz")))
            {
                let mut seed = vec![0u8];
                seed.extend(std::fs::read(&tgz)?);
                seeds.insert(seed);
            }
            for chart in &charts {
                // NUL-separated names and contents, archived by the target (mode 2).
                let mut seed = vec![2u8];
                for f in files_under(chart) {
                    let rel = f.strip_prefix(chart).unwrap_or(&f);
                    let Ok(data) = std::fs::read(&f) else {
                        continue;
                    };
                    if data.contains(&0) {
                        continue;
                    }
                    if seed.len() > 1 {
                        seed.push(0);
                    }
                    seed.extend_from_slice(rel.to_string_lossy().as_bytes());
                    seed.push(0);
                    seed.extend_from_slice(&data);
                }
                seeds.insert(seed);
            }
        }
        "postrender" => seeds.extend(postrender_seeds(root, &shared)?),
        // Hand-made sessions only: the committed corpus (fuzz/corpus/agent_messages).
        "agent_messages" => {}
        other => bail!("no seeds defined for {other}"),
    }
    let mut n = 0;
    for s in seeds
        .iter()
        .filter(|s| !s.is_empty() && s.len() <= t.max_len)
    {
        std::fs::write(dir.join(format!("seed-{:016x}", fnv1a64(s))), s)?;
        n += 1;
    }
    Ok(n)
}

/// Seeds of the `postrender` target (its layout is documented on `flotilla_fuzz::postrender`):
/// the manifest and the post-renderer specs of `tests/tests/postrender.rs` (its string
/// literals that read as `postRenderers` lists, selectors, patch bodies or image lists), and
/// the golden outputs of `../shared/charts` cut into pieces with a few generic renderers.
fn postrender_seeds(root: &Path, shared: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let source = std::fs::read_to_string(root.join("tests/tests/postrender.rs"))
        .context("reading tests/tests/postrender.rs")?;
    let app = source
        .split_once("const APP: &str = r#\"")
        .and_then(|(_, rest)| rest.split_once("\"#;"))
        .map(|(app, _)| app.to_string())
        .context("tests/tests/postrender.rs: no APP manifest")?;
    let label = |target: &str| {
        format!(
            "- kustomize:\n    patches:\n    - target: {target}\n      patch: |\n        apiVersion: v1\n        kind: Any\n        metadata:\n          name: any\n          labels:\n            picked: \"yes\"\n"
        )
    };
    let mut specs = Vec::new();
    for lit in string_literals(&source) {
        let t = lit.trim_start();
        if t.starts_with('{') && t.ends_with('}') {
            specs.push(label(t));
        } else if t.starts_with("[{name:") {
            specs.push(format!("- kustomize:\n    images: {t}\n"));
        } else if lit.starts_with("spec:") || lit.starts_with("  annotations:") {
            let body: String = lit.lines().map(|l| format!("        {l}\n")).collect();
            specs.push(format!(
                "- kustomize:\n    patches:\n    - patch: |\n        apiVersion: apps/v1\n        kind: Deployment\n        metadata:\n          name: web\n{body}"
            ));
        } else if t.starts_with("- kustomize") {
            specs.push(lit);
        }
    }
    let mut out = Vec::new();
    for spec in &specs {
        let Ok(renderers) = flotilla_chart::postrender::parse_post_renderers(spec) else {
            continue;
        };
        out.push(encode_postrender(false, &app, &renderers));
        out.push(encode_postrender(true, &app, &renderers));
        // The same list as HelmRelease YAML, read by the target.
        out.push(format!("0{app}\0S{spec}").into_bytes());
    }
    // Golden outputs, in pieces of whole documents, each with a strategic merge patch on
    // every object, a JSON 6902 patch on Deployments and an image override.
    let generic = flotilla_chart::postrender::parse_post_renderers(
        "- kustomize:\n    patches:\n    - target: {name: '.*'}\n      patch: |\n        apiVersion: v1\n        kind: Any\n        metadata:\n          name: any\n          labels:\n            fuzz: \"1\"\n    - target: {kind: Deployment}\n      patch: '[{\"op\": \"add\", \"path\": \"/spec/replicas\", \"value\": 2}]'\n    images:\n    - name: busybox\n      newTag: '1'\n",
    )
    .context("the generic post-renderer seed")?;
    for golden in files_under(shared).into_iter().filter(|p| {
        p.extension().is_some_and(|e| e == "yaml")
            && p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|d| d == "golden")
    }) {
        let text = std::fs::read_to_string(&golden).unwrap_or_default();
        let mut piece = String::new();
        for doc in text.split("\n---\n") {
            if !piece.is_empty() && piece.len() + doc.len() > 6 << 10 {
                out.push(encode_postrender(false, &piece, &generic));
                piece.clear();
            }
            if doc.len() <= 6 << 10 {
                piece.push_str("---\n");
                piece.push_str(doc);
                piece.push('\n');
            }
        }
        if !piece.is_empty() {
            out.push(encode_postrender(true, &piece, &generic));
        }
    }
    Ok(out)
}

/// The `postrender` target's input for a manifest and post-renderers; `by_files` cuts the
/// manifest into template files at its document separators.
fn encode_postrender(
    by_files: bool,
    manifest: &str,
    renderers: &[flotilla_chart::postrender::PostRenderer],
) -> Vec<u8> {
    let mut s = String::from(if by_files { "1" } else { "0" });
    if by_files {
        s.push_str(&manifest.replace("\n---\n", "\n\x01---\n"));
    } else {
        s.push_str(manifest);
    }
    for (i, r) in renderers.iter().enumerate() {
        let Some(k) = &r.kustomize else {
            s.push_str("\0N");
            continue;
        };
        if i > 0 {
            s.push_str("\0R");
        }
        for p in &k.patches {
            s.push_str("\0P");
            if let Some(t) = &p.target {
                s.push_str(
                    &[
                        t.group.as_str(),
                        &t.version,
                        &t.kind,
                        &t.name,
                        &t.namespace,
                        &t.label_selector,
                        &t.annotation_selector,
                    ]
                    .join("|"),
                );
            }
            s.push('\n');
            s.push_str(&p.patch);
        }
        for im in &k.images {
            s.push_str("\0I");
            s.push_str(&[im.name.as_str(), &im.new_name, &im.new_tag, &im.digest].join("|"));
        }
    }
    s.into_bytes()
}

/// The string literals of a Rust source (raw `r#"…"#` and plain `"…"` with the usual
/// escapes); good enough for the test files the seeds come from.
fn string_literals(source: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(i) = rest.find('"') {
        let raw = rest[..i].ends_with("r#");
        rest = &rest[i + 1..];
        if raw {
            let Some(end) = rest.find("\"#") else { break };
            out.push(rest[..end].to_string());
            rest = &rest[end + 2..];
            continue;
        }
        let mut lit = String::new();
        let mut chars = rest.char_indices();
        let mut end = rest.len();
        while let Some((j, c)) = chars.next() {
            match c {
                '"' => {
                    end = j + 1;
                    break;
                }
                '\\' => match chars.next().map(|(_, e)| e) {
                    Some('n') => lit.push('\n'),
                    Some('t') => lit.push('\t'),
                    Some(e) => lit.push(e),
                    None => {}
                },
                c => lit.push(c),
            }
        }
        out.push(lit);
        rest = &rest[end..];
    }
    out
}

/// The chart directories among the fixtures and `../shared/charts` (every directory with a
/// Chart.yaml, subcharts included).
fn chart_dirs(root: &Path, shared: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for base in [
        root.join("chart/tests"),
        root.join("tests/charts"),
        root.join("agent/tests"),
        shared.to_path_buf(),
    ] {
        for f in files_under(&base) {
            if f.file_name().is_some_and(|n| n == "Chart.yaml")
                && let Some(dir) = f.parent()
            {
                out.push(dir.to_path_buf());
            }
        }
    }
    out
}

/// Every regular file below `dir`, sorted; missing directories give none.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            match e.file_type() {
                Ok(ft) if ft.is_dir() => stack.push(p),
                Ok(ft) if ft.is_file() => out.push(p),
                _ => {}
            }
        }
    }
    out.sort();
    out
}

/// The strings of a JSON array of strings (the gotmpl fixture case lists).
fn json_strings(path: &Path) -> anyhow::Result<Vec<Vec<u8>>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let mut out = Vec::new();
    collect_strings(&v, &mut out);
    Ok(out)
}

fn collect_strings(v: &serde_json::Value, out: &mut Vec<Vec<u8>>) {
    match v {
        serde_json::Value::String(s) if s.contains("{{") => out.push(s.clone().into_bytes()),
        serde_json::Value::Array(a) => a.iter().for_each(|x| collect_strings(x, out)),
        serde_json::Value::Object(m) => m.values().for_each(|x| collect_strings(x, out)),
        _ => {}
    }
}

fn fnv1a64(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}
