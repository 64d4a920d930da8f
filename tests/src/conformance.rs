//! The chart-corpus conformance runner: every `golden/<stem>.cmd` of every chart in the
//! corpus (`../shared/charts`) rendered in-process by `flotilla_chart::render::template`
//! and compared with the real helm's `golden/<stem>.yaml` (and `.stderr`), masking only the
//! lines the chart's `NONDETERMINISTIC` file lists.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use flotilla_chart::render::{TemplateOptions, template};

/// One case: a chart and one golden command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Case {
    /// Chart directory name.
    pub chart: String,
    /// Golden stem (`default`, `features`, ...).
    pub stem: String,
    /// The chart's corpus directory.
    pub dir: PathBuf,
}

/// The outcome of one case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Byte-identical (after masking).
    Pass,
    /// What differed.
    Fail(String),
}

/// Where the corpus lives by default: `../shared/charts` beside the repository.
pub fn default_corpus() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts")
}

/// Every case of the corpus, sorted by chart then stem.
pub fn cases(corpus: &Path) -> std::io::Result<Vec<Case>> {
    let mut out = Vec::new();
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(corpus)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.join("chart").is_dir() && p.join("golden").is_dir())
        .collect();
    dirs.sort();
    for dir in dirs {
        let chart = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let mut stems: Vec<String> = std::fs::read_dir(dir.join("golden"))?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".cmd").map(str::to_string)
            })
            .collect();
        stems.sort();
        for stem in stems {
            out.push(Case {
                chart: chart.clone(),
                stem,
                dir: dir.clone(),
            });
        }
    }
    Ok(out)
}

/// Parses a `.cmd` file (`helm template NAME CHART flags...`, `#` comment lines ignored)
/// into the chart path (relative to the case directory) and options.
pub fn parse_command(text: &str) -> Result<(String, TemplateOptions), String> {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .ok_or("no command")?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let rest = match words.as_slice() {
        ["helm", "template", rest @ ..] => rest,
        _ => return Err(format!("not a helm template command: {line}")),
    };
    let mut opts = TemplateOptions::default();
    let mut positional = Vec::new();
    let mut i = 0;
    while i < rest.len() {
        let w = rest[i];
        let (flag, inline) = match w.split_once('=') {
            Some((f, v)) if w.starts_with('-') => (f, Some(v.to_string())),
            _ => (w, None),
        };
        let mut value = || -> Result<String, String> {
            if let Some(v) = inline.clone() {
                return Ok(v);
            }
            i += 1;
            rest.get(i)
                .map(|s| s.to_string())
                .ok_or(format!("flag needs an argument: {flag}"))
        };
        match flag {
            "-n" | "--namespace" => opts.namespace = value()?,
            "-f" | "--values" => opts.value_files.push(value()?),
            "--set" => opts.set.push(value()?),
            "--set-string" => opts.set_string.push(value()?),
            "--set-json" => opts.set_json.push(value()?),
            "--set-file" => opts.set_file.push(value()?),
            "--kube-version" => opts.kube_version = Some(value()?),
            "-a" | "--api-versions" => opts.api_versions.push(value()?),
            "-s" | "--show-only" => opts.show_only.push(value()?),
            "--include-crds" => opts.include_crds = true,
            "--skip-tests" => opts.skip_tests = true,
            "--no-hooks" => opts.no_hooks = true,
            "--is-upgrade" => opts.is_upgrade = true,
            "--skip-schema-validation" => opts.skip_schema_validation = true,
            f if f.starts_with('-') => return Err(format!("unsupported flag {f}")),
            p => positional.push(p.to_string()),
        }
        i += 1;
    }
    let [name, chart] = <[String; 2]>::try_from(positional)
        .map_err(|p| format!("expected NAME CHART, got {p:?}"))?;
    opts.release_name = name;
    Ok((chart, opts))
}

/// The 1-based line numbers `NONDETERMINISTIC` lists for `golden/<stem>.yaml`.
pub fn masked_lines(nondeterministic: &str, stem: &str) -> BTreeSet<usize> {
    let prefix = format!("golden/{stem}.yaml line ");
    nondeterministic
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| rest.split(':').next()?.trim().parse().ok())
        .collect()
}

fn shorten(s: &str) -> String {
    const MAX: usize = 160;
    if s.chars().count() <= MAX {
        s.to_string()
    } else {
        format!("{}...", s.chars().take(MAX).collect::<String>())
    }
}

/// Compares rendered text with the golden, skipping masked line numbers; `None` when equal.
pub fn compare(ours: &str, golden: &str, masked: &BTreeSet<usize>) -> Option<String> {
    if ours == golden {
        return None;
    }
    let a: Vec<&str> = ours.split('\n').collect();
    let b: Vec<&str> = golden.split('\n').collect();
    for i in 0..a.len().max(b.len()) {
        let n = i + 1;
        let (x, y) = (a.get(i), b.get(i));
        if masked.contains(&n) && x.is_some() && y.is_some() {
            continue;
        }
        if x != y {
            return Some(format!(
                "first difference at line {n}: expected {:?}, got {:?}",
                y.map(|s| shorten(s)).unwrap_or_else(|| "<end>".to_string()),
                x.map(|s| shorten(s)).unwrap_or_else(|| "<end>".to_string()),
            ));
        }
    }
    None
}

/// Runs one case.
pub fn run_case(case: &Case) -> Outcome {
    let golden_dir = case.dir.join("golden");
    let read =
        |p: PathBuf| std::fs::read_to_string(&p).map_err(|e| format!("{}: {e}", p.display()));
    let cmd = match read(golden_dir.join(format!("{}.cmd", case.stem))) {
        Ok(c) => c,
        Err(e) => return Outcome::Fail(e),
    };
    let (chart, mut opts) = match parse_command(&cmd) {
        Ok(x) => x,
        Err(e) => return Outcome::Fail(e),
    };
    let rel = |p: &str| case.dir.join(p).to_string_lossy().into_owned();
    opts.value_files = opts.value_files.iter().map(|p| rel(p)).collect();
    let golden = match read(golden_dir.join(format!("{}.yaml", case.stem))) {
        Ok(g) => g,
        Err(e) => return Outcome::Fail(e),
    };
    let want_stderr = std::fs::read_to_string(golden_dir.join(format!("{}.stderr", case.stem)))
        .unwrap_or_default();
    let nondet = std::fs::read_to_string(case.dir.join("NONDETERMINISTIC")).unwrap_or_default();
    let masked = masked_lines(&nondet, &case.stem);
    let out = match template(&rel(&chart), &opts) {
        Ok(o) => o,
        Err(e) => {
            return Outcome::Fail(format!(
                "error: {}",
                shorten(&e.message.replace('\n', " | "))
            ));
        }
    };
    if let Some(d) = compare(&out.stdout.to_text(), &golden, &masked) {
        return Outcome::Fail(d);
    }
    let got_stderr: String = out.warnings.iter().map(|w| format!("{w}\n")).collect();
    if got_stderr != want_stderr {
        return Outcome::Fail(format!(
            "stderr differs: expected {:?}, got {:?}",
            shorten(&want_stderr),
            shorten(&got_stderr)
        ));
    }
    Outcome::Pass
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn golden_commands_parse_into_template_options() {
        let (chart, o) = parse_command(
            "# run from the directory podinfo/ (helm v4.1.4)\nhelm template podinfo chart/ --namespace corpus -f values/default.yaml --kube-version 1.34.0 --api-versions a/v1 --api-versions b/v1 --include-crds\n",
        )
        .expect("parses");
        assert_eq!(chart, "chart/");
        assert_eq!(o.release_name, "podinfo");
        assert_eq!(o.namespace, "corpus");
        assert_eq!(o.value_files, vec!["values/default.yaml"]);
        assert_eq!(o.kube_version.as_deref(), Some("1.34.0"));
        assert_eq!(o.api_versions, vec!["a/v1", "b/v1"]);
        assert!(o.include_crds);
        assert!(parse_command("kubectl apply").is_err());
    }

    #[test]
    fn masked_lines_are_taken_for_the_right_golden_only() {
        let text = "# comment\ngolden/default.yaml line 124: source=x kind=Pod key='name' sample='a'\ngolden/features.yaml line 9: source=y\n";
        assert_eq!(masked_lines(text, "default"), BTreeSet::from([124]));
        let m = BTreeSet::from([2]);
        assert_eq!(compare("a\nX\nc", "a\nY\nc", &m), None);
        assert!(
            compare("a\nb\nd", "a\nb\nc", &m)
                .expect("differs")
                .starts_with("first difference at line 3")
        );
    }
}
