//! Dependencies and values against the real helm v4.1.4 (`tests/fixtures/deps` and
//! `tests/fixtures/deps-v1`, made by their `regenerate.sh`): tags, multi-path conditions
//! with a non-bool first path, aliases (one chart twice), import-values in both forms, a
//! library chart, an undeclared chart in charts/, a nested .tgz subchart with a BOM and CRLF
//! values, nested conditions, globals, null deletes, list-over-map warnings, every `--set`
//! flavour, and a Helm 2 style chart with requirements.yaml. For each case the enabled
//! subchart tree, the coalesced values and helm's stderr lines must match.

use std::path::{Path, PathBuf};

use flotilla_chart::coalesce::coalesce_values;
use flotilla_chart::dependencies::process_dependencies;
use flotilla_chart::strvals::ValueOptions;
use serde_json::Value;

fn fixtures(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn options(args: &str, base: &Path) -> ValueOptions {
    let mut o = ValueOptions::default();
    for line in args.lines().filter(|l| !l.is_empty()) {
        let (flag, value) = line.split_once(' ').unwrap();
        match flag {
            "-f" => o
                .value_files
                .push((value.to_owned(), std::fs::read(base.join(value)).unwrap())),
            "--set" => o.values.push(value.to_owned()),
            "--set-string" => o.string_values.push(value.to_owned()),
            "--set-json" => o.json_values.push(value.to_owned()),
            "--set-file" => o.file_values.push(value.to_owned()),
            other => panic!("unknown flag {other}"),
        }
    }
    o
}

fn tree(c: &flotilla_chart::Chart) -> Value {
    Value::Object(
        c.dependencies
            .iter()
            .map(|d| (d.name().to_owned(), tree(d)))
            .collect(),
    )
}

/// Numbers compared as Go's toJson output reads back (float64).
fn norm(v: &Value) -> Value {
    match v {
        Value::Number(n) => {
            serde_json::Number::from_f64(n.as_f64().unwrap()).map_or(Value::Null, Value::Number)
        }
        Value::Array(a) => Value::Array(a.iter().map(norm).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), norm(v))).collect()),
        other => other.clone(),
    }
}

fn run_cases(fixture: &Path, at_least: usize) {
    let chart = flotilla_chart::load_dir(&fixture.join("chart")).unwrap();
    let mut cases: Vec<PathBuf> = std::fs::read_dir(fixture.join("cases"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    cases.sort();
    assert!(cases.len() >= at_least);
    for case in cases {
        let name = case.file_stem().unwrap().to_string_lossy().into_owned();
        let golden: Value = serde_json::from_slice(
            &std::fs::read(fixture.join(format!("golden/{name}.json"))).unwrap(),
        )
        .unwrap();
        let want_stderr = std::fs::read_to_string(fixture.join(format!("golden/{name}.stderr")))
            .unwrap_or_default();
        let opts = options(&std::fs::read_to_string(&case).unwrap(), fixture);
        let user = opts
            .merge(&mut |p| {
                std::fs::read_to_string(fixture.join(p))
                    .map(Value::String)
                    .map_err(|e| e.to_string())
            })
            .unwrap();
        let mut c = chart.clone();
        let mut warnings = Vec::new();
        process_dependencies(&mut c, &user, &mut warnings).unwrap();
        let vals = coalesce_values(&c, &user, &mut warnings).unwrap();
        assert_eq!(tree(&c), golden["subcharts"], "{name}: enabled subcharts");
        assert_eq!(
            norm(&Value::Object(vals)),
            norm(&golden["values"]),
            "{name}: values"
        );
        // Helm walks values maps in Go's random order, so the order of warnings within one
        // pass varies between its runs: compare them as multisets.
        let mut got: Vec<String> = warnings.iter().map(ToString::to_string).collect();
        let mut want: Vec<String> = want_stderr.lines().map(str::to_owned).collect();
        got.sort();
        want.sort();
        assert_eq!(got, want, "{name}: stderr");
    }
}

#[test]
fn dependency_and_values_cases_match_helm() {
    run_cases(&fixtures("deps"), 6);
}

#[test]
fn legacy_v1_chart_with_requirements_yaml_matches_helm() {
    run_cases(&fixtures("deps-v1"), 2);
    let chart = flotilla_chart::load_dir(&fixtures("deps-v1").join("chart")).unwrap();
    assert_eq!(chart.metadata.api_version, "v1");
    let files: Vec<&str> = chart.files.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(files, vec!["requirements.lock", "requirements.yaml"]);
    let lock = chart.lock.as_ref().unwrap();
    assert_eq!(lock.generated.to_rfc3339_nano(), "2024-05-06T07:08:09.123Z");
    assert_eq!(
        chart.metadata.dependencies.as_ref().unwrap()[0].alias,
        "kid"
    );
}

#[test]
fn helmignore_applies_inside_templates_and_dot_files_are_skipped() {
    let chart = flotilla_chart::load_dir(&fixtures("deps").join("chart")).unwrap();
    let names: Vec<&str> = chart.templates.iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, vec!["templates/NOTES.txt", "templates/cm.yaml"]);
    let gamma = chart
        .dependencies
        .iter()
        .find(|d| d.name() == "gamma")
        .unwrap();
    // The nested archive's values.yaml had a BOM and CRLF line endings.
    assert_eq!(gamma.values()["win"], Value::String("crlf".into()));
    assert!(chart.dependencies.iter().any(|d| d.is_library()));
}

/// helm v4.1.4: a chart in charts/ whose version misses the Chart.yaml range is not matched to
/// its dependency entry, but a disabled entry still removes every chart of that name
/// (`helm template` renders no `kind: Sub` here, and renders it with `--set sub.enabled=true`).
#[test]
fn version_mismatch_chart_is_still_removed_by_a_false_condition() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path();
    std::fs::create_dir_all(p.join("charts/sub/templates")).unwrap();
    std::fs::write(
        p.join("Chart.yaml"),
        "apiVersion: v2\nname: vm\nversion: 0.1.0\ndependencies:\n  - name: sub\n    version: \"2.x\"\n    repository: file://charts/sub\n    condition: sub.enabled\n",
    )
    .unwrap();
    std::fs::write(p.join("values.yaml"), "sub:\n  enabled: false\n").unwrap();
    std::fs::write(
        p.join("charts/sub/Chart.yaml"),
        "apiVersion: v2\nname: sub\nversion: 1.0.0\n",
    )
    .unwrap();
    let chart = flotilla_chart::load_dir(p).unwrap();
    let mut c = chart.clone();
    process_dependencies(&mut c, &serde_json::Map::new(), &mut Vec::new()).unwrap();
    assert!(c.dependencies.is_empty());
    let mut c = chart;
    let on = flotilla_chart::strvals::parse("sub.enabled=true").unwrap();
    process_dependencies(&mut c, &on, &mut Vec::new()).unwrap();
    assert_eq!(c.dependencies.len(), 1);
}
