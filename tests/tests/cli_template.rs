//! `flotilla template` against the real `helm template` (v4.1.4): the same arguments must
//! give the same exit code, stdout and stderr, and with `--output-dir` the same files, byte
//! for byte. Charts are the render fixtures of the chart crate.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use clap::Parser as _;
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::tools;

fn fixture_chart(area: &str) -> String {
    workspace_root()
        .join("chart/tests/render-fixtures")
        .join(area)
        .join("chart")
        .to_string_lossy()
        .into_owned()
}

/// What one run left behind.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    /// Every file under the output directory, by relative path.
    files: BTreeMap<String, String>,
}

fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries {
            let path = e.expect("directory entry").path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let rel = path
                    .strip_prefix(root)
                    .expect("under the root")
                    .to_string_lossy()
                    .into_owned();
                let text = std::fs::read_to_string(&path).expect("output file is text");
                out.insert(rel, text);
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// `{out}` in the arguments stands for the run's output directory, which is also written
/// back as `{out}` in what it printed.
fn args_for(args: &[&str], out: &Path) -> Vec<String> {
    let dir = out.to_string_lossy();
    args.iter().map(|a| a.replace("{out}", &dir)).collect()
}

fn unplace(text: &[u8], out: &Path) -> String {
    String::from_utf8_lossy(text).replace(&*out.to_string_lossy(), "{out}")
}

fn run_helm(args: &[&str], work: &Path, runs: usize) -> Run {
    let helm = tools::helm().expect("the reference helm (tools/install-reference-tools)");
    let out = work.join("out");
    let mut last = None;
    for _ in 0..runs {
        let o = Command::new(&helm)
            .arg("template")
            .args(args_for(args, &out))
            .env("HELM_CACHE_HOME", work.join("helm-cache"))
            .env("HELM_CONFIG_HOME", work.join("helm-config"))
            .env("HELM_DATA_HOME", work.join("helm-data"))
            .output()
            .expect("helm runs");
        last = Some(o);
    }
    let o = last.expect("at least one run");
    Run {
        code: o.status.code().unwrap_or(-1),
        stdout: unplace(&o.stdout, &out),
        stderr: unplace(&o.stderr, &out),
        files: tree(&out),
    }
}

fn run_ours(args: &[&str], work: &Path, runs: usize) -> Run {
    let out = work.join("out");
    let mut last = None;
    for _ in 0..runs {
        let mut argv = vec!["flotilla".to_string(), "template".to_string()];
        argv.extend(args_for(args, &out));
        let cli = flotilla_cli::Cli::try_parse_from(&argv).expect("arguments parse");
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        let code = flotilla_cli::run_with(cli, &mut stdout, &mut stderr);
        last = Some((code, stdout, stderr));
    }
    let (code, stdout, stderr) = last.expect("at least one run");
    Run {
        code,
        stdout: unplace(&stdout, &out),
        stderr: unplace(&stderr, &out),
        files: tree(&out),
    }
}

/// Runs both `runs` times in fresh directories (a second run sees the first one's files)
/// and compares the last runs.
fn same_as_helm(name: &str, args: &[&str], runs: usize) -> Option<String> {
    let helm_dir = tempfile::tempdir().expect("temp dir");
    let our_dir = tempfile::tempdir().expect("temp dir");
    let want = run_helm(args, helm_dir.path(), runs);
    let got = run_ours(args, our_dir.path(), runs);
    (want != got).then(|| format!("--- {name}: {args:?}\nhelm: {want:#?}\nours: {got:#?}"))
}

fn check(cases: &[(&str, Vec<&str>, usize)]) {
    let failures: Vec<String> = cases
        .iter()
        .filter_map(|(name, args, runs)| same_as_helm(name, args, *runs))
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} cases differ from helm:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}

#[test]
fn output_dir_writes_what_helm_writes() {
    let hooks = fixture_chart("hooks");
    let crds = fixture_chart("crds");
    let pretty = fixture_chart("pretty");
    let out = "{out}";
    let out_slash = "{out}/";
    check(&[
        ("hooks", vec!["rel", &hooks, "--output-dir", out], 1),
        (
            "hooks, second run appends hooks only",
            vec!["rel", &hooks, "--output-dir", out],
            2,
        ),
        (
            "release name",
            vec!["rel", &hooks, "--output-dir", out_slash, "--release-name"],
            1,
        ),
        (
            "skip tests",
            vec!["rel", &hooks, "--output-dir", out, "--skip-tests"],
            1,
        ),
        (
            "no hooks",
            vec!["rel", &hooks, "--output-dir", out, "--no-hooks"],
            1,
        ),
        (
            "show-only finds nothing on stdout",
            vec![
                "rel",
                &hooks,
                "--output-dir",
                out,
                "--show-only",
                "templates/all.yaml",
            ],
            1,
        ),
        (
            "crds stay outside the release directory",
            vec![
                "rel",
                &crds,
                "--output-dir",
                out,
                "--include-crds",
                "--release-name",
            ],
            1,
        ),
        (
            "several documents",
            vec!["rel", &pretty, "--output-dir", out],
            1,
        ),
    ]);
}

#[test]
fn output_dir_that_is_a_file_fails_as_helm_does() {
    let hooks = fixture_chart("hooks");
    let helm_dir = tempfile::tempdir().expect("temp dir");
    let our_dir = tempfile::tempdir().expect("temp dir");
    for d in [&helm_dir, &our_dir] {
        std::fs::write(d.path().join("out"), "not a directory").expect("file written");
    }
    let args = ["rel", hooks.as_str(), "--output-dir", "{out}"];
    let want = run_helm(&args, helm_dir.path(), 1);
    let got = run_ours(&args, our_dir.path(), 1);
    assert_eq!(got.code, want.code);
    assert_eq!(got.stdout, want.stdout);
    assert_eq!(got.stderr, want.stderr);
}

#[test]
fn set_literal_sets_what_helm_sets() {
    let pretty = fixture_chart("pretty");
    check(&[
        (
            "literal values",
            vec![
                "rel",
                &pretty,
                "--show-only",
                "templates/values.yaml",
                "--set-literal",
                r"keys.lit=a,b=c\d{e}[0]",
                "--set-literal",
                "image.tag=1.26",
                "--set",
                "frac=7",
                "--set-literal",
                "frac=7",
            ],
            1,
        ),
        (
            "literal without a value",
            vec!["rel", &pretty, "--set-literal", "novalue"],
            1,
        ),
    ]);
}
