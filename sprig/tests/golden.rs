//! Differential tests against goldens produced by the real helm binary
//! (`tests/fixtures/regenerate.sh`). Each family under `tests/fixtures/` is a chart whose
//! `templates/_cases.tpl` defines one case per line (rendered here through flotilla-gotmpl
//! and this crate's functions, compared byte for byte with helm's output) and whose
//! `templates/_errors.tpl` holds cases helm must fail on (compared with helm's error, converted
//! back from Helm's presentation to Go's error string).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_gotmpl::{Error, ExecOptions, FuncMap, MapType, TemplateSet, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The root Helm passes to a chart template: it and `.Values` are `common.Values` (Helm 4).
fn root() -> Value {
    let json: serde_json::Value =
        serde_json::from_str(&read(&fixtures().join("values.yaml"))).expect("values.yaml is JSON");
    let values = match Value::from_json(&json) {
        Value::Map(m) => Value::Map(m.with_type(MapType::Named(Arc::from("common.Values")))),
        other => other,
    };
    let root = flotilla_gotmpl::Map::new().with_type(MapType::Named(Arc::from("common.Values")));
    root.insert("Values", values);
    Value::Map(root)
}

/// `(name, body)` for each `{{- define "NAME" }}BODY{{ end }}` line.
fn cases(path: &Path) -> Vec<(String, String)> {
    if !path.exists() {
        return Vec::new();
    }
    read(path)
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("{{/*"))
        .map(|l| {
            let rest = l.strip_prefix("{{- define \"").expect("case line");
            let (name, rest) = rest.split_once("\" }}").expect("case name");
            let body = rest.strip_suffix("{{ end }}").expect("case end");
            (name.to_string(), body.to_string())
        })
        .collect()
}

/// Turns Helm's presentation of a template error back into what must hold for Go's error.
fn compare_error(stderr: &str, got: &Error) -> Result<(), String> {
    let helm = stderr.strip_prefix("Error: ").unwrap_or(stderr);
    let helm = helm
        .split("\n\nUse --debug")
        .next()
        .unwrap_or(helm)
        .trim_end();
    let want = if helm.starts_with("template: ") {
        helm.to_string()
    } else {
        // LOC\n  executing "NAME" at <CTX>:\n    MSG
        let mut lines = helm.lines();
        let loc = lines.next().unwrap_or("");
        let exec = lines.next().unwrap_or("").trim().trim_end_matches(':');
        let msg: Vec<&str> = lines.map(str::trim).collect();
        format!("template: {loc}: {exec}: {}", msg.join(" "))
    };
    let ours = got.to_string();
    if ours.trim_end() == want.trim_end() {
        Ok(())
    } else {
        Err(format!("ours {ours:?}\n  helm {want:?}"))
    }
}

fn render(name: &str, text: &str, funcs: &FuncMap) -> Result<String, Error> {
    let mut set = TemplateSet::new("gotpl");
    set.parse(name, text, funcs)?;
    set.execute(name, &root(), funcs, &ExecOptions::helm())
}

/// Checks one family; returns the failures.
fn check_family(family: &str) -> (usize, Vec<String>) {
    let dir = fixtures().join(family);
    let golden: serde_json::Value =
        serde_json::from_str(&read(&dir.join("golden.json"))).expect("golden.json");
    let funcs = flotilla_sprig::funcs();
    let mut failures = Vec::new();
    let mut count = 0;

    let cases_path = dir.join("templates/_cases.tpl");
    let text = read(&cases_path);
    let mut set = TemplateSet::new("gotpl");
    set.parse("fx/templates/_cases.tpl", &text, &funcs)
        .unwrap_or_else(|e| panic!("{family}: {e}"));
    for (name, _) in cases(&cases_path) {
        count += 1;
        let Some(want) = golden["ok"][&name].as_str() else {
            failures.push(format!("{family}/{name}: no golden (run regenerate.sh)"));
            continue;
        };
        match set.execute(&name, &root(), &funcs, &ExecOptions::helm()) {
            Ok(got) if got == want => {}
            Ok(got) => failures.push(format!("{family}/{name}:\n  ours {got:?}\n  helm {want:?}")),
            Err(e) => failures.push(format!(
                "{family}/{name}: unexpected error {e}\n  helm {want:?}"
            )),
        }
    }
    for (name, body) in cases(&dir.join("templates/_errors.tpl")) {
        count += 1;
        let Some(stderr) = golden["err"][&name].as_str() else {
            failures.push(format!("{family}/{name}: no golden (run regenerate.sh)"));
            continue;
        };
        match render("fx/templates/case.yaml", &body, &funcs) {
            Ok(out) => failures.push(format!(
                "{family}/{name}: expected an error, rendered {out:?}"
            )),
            Err(e) => {
                if let Err(diff) = compare_error(stderr, &e) {
                    failures.push(format!("{family}/{name}: {diff}"));
                }
            }
        }
    }
    (count, failures)
}

fn run(family: &str) {
    let (count, failures) = check_family(family);
    assert!(count > 0, "{family}: no cases");
    assert!(
        failures.is_empty(),
        "{} of {count} {family} cases differ from helm:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

macro_rules! families {
    ($($name:ident),* $(,)?) => {
        $( #[test] fn $name() { run(stringify!($name)); } )*

        #[test]
        fn every_fixture_family_is_tested() {
            let mut on_disk: Vec<String> = std::fs::read_dir(fixtures())
                .expect("fixtures")
                .filter_map(|e| e.ok())
                .filter(|e| e.path().join("templates").is_dir())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            on_disk.sort();
            let mut listed = vec![$(stringify!($name).to_string()),*];
            listed.sort();
            assert_eq!(on_disk, listed);
        }
    };
}

families!(
    defaults, dicts, encoding, lists, math, paths, reflection, regex, json, strings, url
);
