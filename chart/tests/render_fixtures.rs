//! Differential tests against the real helm: the small charts in `tests/render-fixtures/`
//! (one per area) rendered by `render::template` must print exactly what helm v4.1.4 printed
//! (`golden/*.stdout`, `*.stderr`, `*.code`, made by `render-fixtures/regenerate.sh`).

use std::path::{Path, PathBuf};

use flotilla_chart::render::{TemplateOptions, template};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/render-fixtures")
}

/// `STEM RELEASE FLAGS...` as `regenerate.sh` runs it.
fn options(area: &Path, line: &str) -> (String, TemplateOptions) {
    let mut words = line.split_whitespace();
    let stem = words.next().expect("stem").to_string();
    let mut o = TemplateOptions {
        release_name: words.next().expect("release name").to_string(),
        ..TemplateOptions::default()
    };
    let rest: Vec<&str> = words.collect();
    let mut i = 0;
    while i < rest.len() {
        let flag = rest[i];
        let mut value = || {
            i += 1;
            rest[i].to_string()
        };
        match flag {
            "-n" | "--namespace" => o.namespace = value(),
            "-f" | "--values" => o
                .value_files
                .push(area.join(value()).to_string_lossy().into_owned()),
            "--set" => o.set.push(value()),
            "--set-string" => o.set_string.push(value()),
            "--set-json" => o.set_json.push(value()),
            "--kube-version" => o.kube_version = Some(value()),
            "--api-versions" => o.api_versions.push(value()),
            "--show-only" => o.show_only.push(value()),
            "--include-crds" => o.include_crds = true,
            "--skip-tests" => o.skip_tests = true,
            "--no-hooks" => o.no_hooks = true,
            "--is-upgrade" => o.is_upgrade = true,
            other => panic!("flag {other} is not handled by this test"),
        }
        i += 1;
    }
    (stem, o)
}

/// Every case three times: executed one template after the other, then on two threads
/// (`render_on_two_threads`, from two templates on; the `parallel` area's cases write shared
/// maps, read a subchart's `.Template` and fail in two templates), then with the templates
/// parsed ahead (`parse_templates_early`). The settings are process-wide, hence one test.
#[test]
fn render_fixtures_print_what_helm_prints() {
    let sequential = check_all_fixtures();
    flotilla_chart::render::render_on_two_threads(2);
    let before = flotilla_chart::render::parallel_render_counts();
    let parallel = check_all_fixtures();
    let after = flotilla_chart::render::parallel_render_counts();
    flotilla_chart::render::render_on_two_threads(usize::MAX);
    // Templates parsed ahead on a helper from the moment each chart is read: the aliased
    // subchart's are parsed again at render (their paths change), a disabled subchart's
    // are not used, and parse errors come in Helm's order.
    flotilla_chart::render::parse_templates_early(1);
    let taken_before = flotilla_chart::render::early_parsed_taken();
    let early = check_all_fixtures();
    let taken_after = flotilla_chart::render::early_parsed_taken();
    flotilla_chart::render::parse_templates_early(usize::MAX);
    assert!(
        sequential.is_empty() && parallel.is_empty() && early.is_empty(),
        "one after the other, {} cases differ:\n{}\non two threads, {} cases differ:\n{}\n\
         parsed ahead, {} cases differ:\n{}",
        sequential.len(),
        sequential.join("\n"),
        parallel.len(),
        parallel.join("\n"),
        early.len(),
        early.join("\n")
    );
    assert!(
        taken_after - taken_before >= 50,
        "templates parsed ahead and used: {taken_before} -> {taken_after}"
    );
    // The parallel area alone renders six times on two threads: `mutate` and `subread`
    // finish one after the other from the template that writes or reads.
    assert!(
        after.0 - before.0 >= 6,
        "parallel runs: {before:?} -> {after:?}"
    );
    assert!(
        after.1 - before.1 >= 2,
        "fallbacks: {before:?} -> {after:?}"
    );
}

/// Renders every fixture case; the differences from helm's goldens.
fn check_all_fixtures() -> Vec<String> {
    let mut areas: Vec<PathBuf> = std::fs::read_dir(fixtures())
        .expect("fixtures directory")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.join("cases.txt").is_file())
        .collect();
    areas.sort();
    let mut failures = Vec::new();
    let mut cases = 0;
    for area in &areas {
        let name = area.file_name().unwrap_or_default().to_string_lossy();
        let lines = std::fs::read_to_string(area.join("cases.txt")).expect("cases");
        for line in lines.lines().filter(|l| !l.trim().is_empty()) {
            let (stem, opts) = options(area, line);
            let golden = |ext: &str| {
                std::fs::read_to_string(area.join("golden").join(format!("{stem}.{ext}")))
                    .unwrap_or_else(|e| panic!("{name}/{stem}.{ext}: {e}"))
            };
            let (want_out, want_err, want_code) =
                (golden("stdout"), golden("stderr"), golden("code"));
            let chart = area.join("chart").to_string_lossy().into_owned() + "/";
            let (out, err, code) = match template(&chart, &opts) {
                Ok(o) => (
                    o.stdout.to_text(),
                    o.warnings
                        .iter()
                        .map(|w| format!("{w}\n"))
                        .collect::<String>(),
                    "0\n",
                ),
                Err(e) => (
                    String::new(),
                    e.warnings
                        .iter()
                        .map(|w| format!("{w}\n"))
                        .collect::<String>()
                        + &format!("Error: {}\n", e.message),
                    "1\n",
                ),
            };
            cases += 1;
            if out != want_out || err != want_err || code != want_code {
                failures.push(format!(
                    "{name}/{stem}:\n--- helm stdout\n{want_out}\n--- ours\n{out}\n--- helm stderr\n{want_err}\n--- ours\n{err}"
                ));
            }
        }
    }
    assert!(cases >= 20, "only {cases} cases");
    failures
}
