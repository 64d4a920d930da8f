//! `--set` and friends against the real helm v4.1.4 (`tests/fixtures/strvals`, made by its
//! `regenerate.sh`): each case is one flag applied after `-f base.yaml`; the resulting values
//! (as helm's `toJson` printed them) or the error line must match.

use std::path::{Path, PathBuf};

use flotilla_chart::strvals::ValueOptions;
use serde_json::Value;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/strvals")
}

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

/// What the Helm CLI's `--set-file` reader does (Go's error text for a missing file).
fn read_file(p: &str) -> Result<Value, String> {
    match std::fs::read(fixture().join(p)) {
        Ok(b) => Ok(Value::String(String::from_utf8_lossy(&b).into_owned())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("open {p}: no such file or directory"))
        }
        Err(e) => Err(e.to_string()),
    }
}

#[test]
fn set_flags_match_helm() {
    let golden = std::fs::read_to_string(fixture().join("golden.txt")).unwrap();
    let base = std::fs::read(fixture().join("base.yaml")).unwrap();
    let mut n = 0;
    for line in golden.lines() {
        let parts: Vec<&str> = line.splitn(4, '\t').collect();
        let (flag, expr, status, out) = (parts[0], parts[1], parts[2], parts[3]);
        let mut o = ValueOptions {
            value_files: vec![("base.yaml".into(), base.clone())],
            ..ValueOptions::default()
        };
        match flag {
            "--set" => o.values.push(expr.into()),
            "--set-string" => o.string_values.push(expr.into()),
            "--set-json" => o.json_values.push(expr.into()),
            "--set-literal" => o.literal_values.push(expr.into()),
            "--set-file" => o.file_values.push(expr.into()),
            other => panic!("{other}"),
        }
        let got = o.merge(&mut read_file);
        match status {
            "ok" => {
                let want: Value = serde_json::from_str(out).unwrap();
                let got = got.unwrap_or_else(|e| panic!("{flag} {expr}: {e}"));
                assert_eq!(norm(&Value::Object(got)), norm(&want), "{flag} {expr}");
            }
            _ => assert_eq!(got.unwrap_err().to_string(), out, "{flag} {expr}"),
        }
        n += 1;
    }
    assert!(n >= 40);
}
