//! The chart corpus (`../shared/charts`): every chart loads; for each values file the enabled
//! subcharts and the coalesced values equal what the real helm v4.1.4 computed
//! (`tests/corpus/golden`, made by `tests/corpus/regenerate.sh`).

use std::path::{Path, PathBuf};

use flotilla_chart::coalesce::coalesce_values;
use flotilla_chart::dependencies::process_dependencies;
use flotilla_chart::values::read_values_file;
use serde_json::Value;

fn corpus() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
    assert!(
        p.is_dir(),
        "the chart corpus is expected at {}",
        p.display()
    );
    p
}

/// JSON numbers compared as float64, as Go's `toJson` output reads back.
fn norm(v: &Value) -> Value {
    match v {
        Value::Number(n) => serde_json::Number::from_f64(n.as_f64().unwrap_or(0.0))
            .map_or(Value::Null, Value::Number),
        Value::Array(a) => Value::Array(a.iter().map(norm).collect()),
        Value::Object(m) => Value::Object(m.iter().map(|(k, v)| (k.clone(), norm(v))).collect()),
        other => other.clone(),
    }
}

fn first_diff(path: &str, a: &Value, b: &Value) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => {
                        if let Some(d) = first_diff(&format!("{path}.{k}"), p, q) {
                            return Some(d);
                        }
                    }
                    (p, q) => return Some(format!("{path}.{k}: ours {p:?} helm {q:?}")),
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some(format!("{path}: ours {a} helm {b}")),
    }
}

#[test]
fn every_corpus_chart_loads_and_coalesces_like_helm() {
    let corpus = corpus();
    let golden_root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus/golden");
    let mut charts = 0;
    let mut cases = 0;
    let mut failures = Vec::new();
    let mut dirs: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    dirs.sort();
    for dir in dirs {
        if !dir.join("chart").is_dir() {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let chart =
            flotilla_chart::load_dir(&dir.join("chart")).unwrap_or_else(|e| panic!("{name}: {e}"));
        charts += 1;
        if name == "aws-load-balancer-controller" {
            // Its .helmignore keeps crds/kustomization.yaml out of the CRDs.
            let crds: Vec<&str> = chart.crd_files().map(|f| f.name.as_str()).collect();
            assert!(
                !crds.is_empty() && crds.iter().all(|n| !n.contains("kustomization")),
                "{crds:?}"
            );
        }
        if name == "grafana" {
            // Its `tests/` pattern also drops templates/tests/.
            assert!(
                chart
                    .templates
                    .iter()
                    .all(|t| !t.name.starts_with("templates/tests/"))
            );
        }
        let mut vfiles: Vec<_> = std::fs::read_dir(dir.join("values"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        vfiles.sort();
        for vf in vfiles {
            let stem = vf.file_stem().unwrap().to_string_lossy().into_owned();
            let golden_path = golden_root.join(&name).join(format!("{stem}.json"));
            let golden: Value = serde_json::from_slice(&std::fs::read(&golden_path).unwrap())
                .unwrap_or_else(|e| panic!("{}: {e}", golden_path.display()));
            let user = read_values_file(&vf).unwrap();
            let mut c = chart.clone();
            let mut warnings = Vec::new();
            process_dependencies(&mut c, &user, &mut warnings).unwrap();
            let mut ours_subs = serde_json::Map::new();
            for sub in &c.dependencies {
                let mut names: Vec<Value> = sub
                    .dependencies
                    .iter()
                    .map(|d| Value::String(d.name().to_owned()))
                    .collect();
                names.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
                ours_subs.insert(sub.name().to_owned(), Value::Array(names));
            }
            if Value::Object(ours_subs.clone()) != golden["subcharts"] {
                failures.push(format!(
                    "{name}/{stem}: subcharts ours {ours_subs:?} helm {}",
                    golden["subcharts"]
                ));
            }
            let mut coalesce_warnings = Vec::new();
            let vals = coalesce_values(&c, &user, &mut coalesce_warnings).unwrap();
            // Helm rendered every corpus values file, so schema validation passed.
            if let Err(e) = flotilla_chart::schema::validate_against_schema(&c, &vals) {
                failures.push(format!("{name}/{stem}: schema: {e}"));
            }
            if let Some(d) = first_diff("", &norm(&Value::Object(vals)), &norm(&golden["values"])) {
                failures.push(format!("{name}/{stem}: values differ at {d}"));
            }
            let stderr = dir.join("golden").join(format!("{stem}.stderr"));
            if stderr.exists() {
                let text = std::fs::read_to_string(&stderr).unwrap();
                let want: Vec<String> = text.lines().map(str::to_owned).collect();
                warnings.extend(coalesce_warnings);
                let warnings: Vec<String> = warnings.iter().map(ToString::to_string).collect();
                if warnings != want {
                    failures.push(format!(
                        "{name}/{stem}: warnings ours {warnings:?} helm {want:?}"
                    ));
                }
            }
            cases += 1;
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {cases} cases differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
    assert!(
        charts >= 17 && cases >= 49,
        "{charts} charts, {cases} cases"
    );
}
