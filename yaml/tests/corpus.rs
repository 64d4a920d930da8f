//! Every document of the shared chart corpus goldens (`shared/charts/*/golden/*.yaml`, real
//! `helm template` output of 17 public charts) against digests of what the real helm binary
//! makes of it with `fromYaml | toJson` and `fromYaml | toYaml`
//! (`tests/fixtures/corpus/regenerate.sh`). Also checks that emitting and re-parsing every
//! document preserves its data.

mod common;

use common::{fixtures, go_json, helm_from_yaml, helm_to_yaml, read};
use flotilla_yaml::{KeyOrder, Value};
use std::path::PathBuf;

fn fnv1a64(b: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &c in b {
        h ^= u64::from(c);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    format!("{h:016x}")
}

/// The shared chart corpus beside the repository; its absence is a failure, not a skip.
fn charts_dir() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
    assert!(
        dir.is_dir(),
        "the chart corpus is expected at {} (the shared directory beside the repository)",
        dir.display()
    );
    dir
}

/// Splits a golden file on lines that are exactly `---`, as regenerate.sh does.
fn split_docs(text: &str) -> Vec<String> {
    let mut docs = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        if line == "---" {
            docs.push(cur.join("\n"));
            cur.clear();
        } else {
            cur.push(line);
        }
    }
    docs.push(cur.join("\n"));
    docs
}

struct Row {
    file: String,
    /// Document of a golden file, or `None` for a whole file.
    index: Option<usize>,
    json: String,
    yaml: String,
}

fn rows() -> Vec<Row> {
    read(&fixtures().join("corpus/corpus.tsv"))
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            Some(Row {
                file: f.first()?.to_string(),
                index: match *f.get(1)? {
                    "file" => None,
                    n => Some(n.parse().ok()?),
                },
                json: f.get(2)?.to_string(),
                yaml: f.get(3)?.to_string(),
            })
        })
        .collect()
}

/// The documents of each golden file, read once.
fn docs(charts: &std::path::Path, rows: &[Row]) -> Vec<String> {
    let mut cache: std::collections::HashMap<String, Vec<String>> = Default::default();
    rows.iter()
        .map(|row| {
            let docs = cache
                .entry(row.file.clone())
                .or_insert_with(|| split_docs(&read(&charts.join(&row.file))));
            match row.index {
                Some(i) => docs.get(i).cloned().unwrap_or_default(),
                None => read(&charts.join(&row.file)),
            }
        })
        .collect()
}

#[test]
fn corpus_documents_read_and_print_like_helm() {
    let charts = charts_dir();
    let rows = rows();
    assert!(rows.len() > 1000, "corpus.tsv has {} rows", rows.len());
    let mut json_bad = Vec::new();
    let mut yaml_bad = Vec::new();
    for (row, src) in rows.iter().zip(docs(&charts, &rows)) {
        let v = helm_from_yaml(&src);
        let json = go_json(&v).unwrap_or_default();
        if fnv1a64(json.as_bytes()) != row.json {
            json_bad.push(format!("{}#{:?}", row.file, row.index));
        }
        let yaml = helm_to_yaml(&v);
        if let Ok(dir) = std::env::var("CORPUS_MINE") {
            let index = row
                .index
                .map_or_else(|| "file".to_owned(), |i| i.to_string());
            let base = format!("{dir}/{}.{index}", row.file.replace('/', "_"));
            std::fs::create_dir_all(&dir).expect("dump dir");
            std::fs::write(format!("{base}.json"), &json).expect("dump");
            std::fs::write(format!("{base}.toyaml"), &yaml).expect("dump");
        }
        if fnv1a64(yaml.as_bytes()) != row.yaml {
            yaml_bad.push(format!("{}#{:?}", row.file, row.index));
        }
    }
    assert!(
        json_bad.is_empty() && yaml_bad.is_empty(),
        "of {} documents, fromYaml|toJson differs for {}: {:?}\nfromYaml|toYaml differs for {}: {:?}",
        rows.len(),
        json_bad.len(),
        json_bad,
        yaml_bad.len(),
        yaml_bad
    );
}

#[test]
fn corpus_documents_survive_emit_and_reparse() {
    let charts = charts_dir();
    let mut checked = 0;
    let rows = rows();
    for (row, src) in rows.iter().zip(docs(&charts, &rows)) {
        let Ok(v) = flotilla_yaml::from_str(&src) else {
            assert!(
                row.index.is_none(),
                "{}#{:?} does not parse",
                row.file,
                row.index
            );
            continue;
        };
        for order in [KeyOrder::GoYaml, KeyOrder::Insertion] {
            let text = flotilla_yaml::to_string_with(&v, order).expect("emits");
            let back = flotilla_yaml::from_str(&text).expect("emitted text parses");
            let same = match order {
                KeyOrder::Insertion => back == v,
                KeyOrder::GoYaml => sorted(&back) == sorted(&v),
            };
            assert!(
                same,
                "{}#{:?}: data changed through {order:?}",
                row.file, row.index
            );
        }
        checked += 1;
    }
    assert!(checked > 1000);
}

fn sorted(v: &Value) -> Value {
    match v {
        Value::Map(m) => {
            let mut m = m.clone();
            m.sort_go_yaml();
            Value::Map(m.into_iter().map(|(k, v)| (k, sorted(&v))).collect())
        }
        Value::Seq(s) => Value::Seq(s.iter().map(sorted).collect()),
        other => other.clone(),
    }
}
