//! values.schema.json errors against the real helm v4.1.4 (`tests/fixtures/schema`, made by
//! its `regenerate.sh`). Helm walks object properties in Go's random map order, so sibling
//! causes are compared as sets (sorted at every level); everything else is exact.

use std::path::{Path, PathBuf};

use flotilla_chart::coalesce::coalesce_values;
use flotilla_chart::dependencies::process_dependencies;
use flotilla_chart::schema::validate_against_schema;
use flotilla_chart::values::read_values_file;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema")
}

/// Sorts sibling blocks (a `- ` line with its deeper-indented lines) at every level.
fn normalize(text: &str) -> String {
    fn indent(l: &str) -> usize {
        l.len() - l.trim_start().len()
    }
    fn blocks(lines: &[&str]) -> Vec<String> {
        let mut out = Vec::new();
        let mut i = 0;
        while i < lines.len() {
            let base = indent(lines[i]);
            let mut j = i + 1;
            while j < lines.len() && indent(lines[j]) > base {
                j += 1;
            }
            let mut children = blocks(&lines[i + 1..j]);
            children.sort();
            let mut b = lines[i].to_owned();
            for c in children {
                b.push('\n');
                b.push_str(&c);
            }
            out.push(b);
            i = j;
        }
        out
    }
    // Chart sections start with a line that is not a cause.
    let mut out = String::new();
    let mut section: Vec<&str> = Vec::new();
    let flush = |section: &mut Vec<&str>, out: &mut String| {
        let mut b = blocks(section);
        b.sort();
        for x in b {
            out.push_str(&x);
            out.push('\n');
        }
        section.clear();
    };
    for line in text.lines() {
        if !line.trim_start().starts_with("- ") {
            flush(&mut section, &mut out);
            out.push_str(line);
            out.push('\n');
        } else {
            section.push(line);
        }
    }
    flush(&mut section, &mut out);
    out
}

fn run(case: &str, chart_dir: &Path) {
    let dir = fixtures().join(case);
    let stderr = std::fs::read_to_string(dir.join("helm.stderr")).unwrap();
    let want = stderr.strip_prefix("Error: ").unwrap();
    let user = read_values_file(&dir.join("user.yaml")).unwrap();
    let mut chart = flotilla_chart::load_dir(chart_dir).unwrap();
    let mut w = Vec::new();
    process_dependencies(&mut chart, &user, &mut w).unwrap();
    let vals = coalesce_values(&chart, &user, &mut w).unwrap();
    let got = format!("{}\n", validate_against_schema(&chart, &vals).unwrap_err());
    assert_eq!(normalize(&got), normalize(want), "{case}: ours\n{got}");
}

#[test]
fn keywords_of_draft_2020_12_match_helm() {
    run("keywords", &fixtures().join("keywords/chart"));
}

#[test]
fn draft_7_keywords_and_ref_siblings_match_helm() {
    run("draft7", &fixtures().join("draft7/chart"));
}

#[test]
fn parent_and_subchart_schemas_match_helm() {
    run("subchart", &fixtures().join("subchart/chart"));
}

#[test]
fn external_dns_without_policy_fails_like_helm() {
    let corpus =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts/external-dns/chart");
    run("external-dns-empty", &corpus);
}

#[test]
fn valid_values_pass() {
    let chart = flotilla_chart::load_dir(&fixtures().join("keywords/chart")).unwrap();
    let vals: serde_json::Map<String, serde_json::Value> = serde_json::from_str(
        r#"{"policy": "x", "zz": null, "ratio": 0.5, "fine": 0.6, "age": 6000}"#,
    )
    .unwrap();
    validate_against_schema(&chart, &vals).unwrap();
}

#[test]
fn corpus_schemas_report_invalid_values_like_helm() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
    let dir = fixtures().join("corpus-cases");
    let mut n = 0;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for vf in entries
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
    {
        let name = vf.file_stem().unwrap().to_string_lossy().into_owned();
        let stderr = std::fs::read_to_string(dir.join(format!("{name}.stderr"))).unwrap();
        let want = stderr.strip_prefix("Error: ").unwrap();
        let user = read_values_file(vf).unwrap();
        let mut chart = flotilla_chart::load_dir(&corpus.join(&name).join("chart")).unwrap();
        let mut w = Vec::new();
        process_dependencies(&mut chart, &user, &mut w).unwrap();
        let vals = coalesce_values(&chart, &user, &mut w).unwrap();
        let got = format!("{}\n", validate_against_schema(&chart, &vals).unwrap_err());
        assert_eq!(normalize(&got), normalize(want), "{name}: ours\n{got}");
        n += 1;
    }
    assert!(n >= 6);
}

/// Texts checked against helm v4.1.4 with the same schema files.
#[test]
fn broken_schemas_are_reported_like_helm() {
    let vals = serde_json::Map::new();
    let e = flotilla_chart::schema::validate_single(&vals, br#"{ "type": }"#).unwrap_err();
    assert_eq!(e, "invalid character '}' looking for beginning of value");
    let e = flotilla_chart::schema::validate_single(
        &vals,
        br##"{"type": "object", "properties": {"a": {"$ref": "#/nope"}}}"##,
    )
    .unwrap_err();
    assert_eq!(
        e,
        "json-pointer in \"file:///values.schema.json#/nope\" not found"
    );
    let e = flotilla_chart::schema::validate_single(&vals, br#"{"a" 1}"#).unwrap_err();
    assert_eq!(e, "invalid character '1' after object key");
    let e = flotilla_chart::schema::validate_single(&vals, br#"{"a": 1"#).unwrap_err();
    assert_eq!(e, "unexpected EOF");
}

/// Every schema of the corpus (charts and subcharts) is checked by our walk alone, without
/// compiling it with the `jsonschema` crate (the differential tests above check the walk).
#[test]
fn corpus_schemas_need_no_fallback() {
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
    let mut found = Vec::new();
    let mut stack = vec![corpus];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.file_name().is_some_and(|n| n == "values.schema.json") {
                found.push(p);
            }
        }
    }
    assert!(found.len() >= 8, "{found:?}");
    for p in &found {
        let bytes = std::fs::read(p).unwrap();
        assert!(
            flotilla_chart::schema::walk_alone_decides(&bytes),
            "{} goes to the fallback",
            p.display()
        );
    }
}

/// `$schema: http://json-schema.org/schema#` is the latest draft (2020-12) for the library:
/// `$ref` siblings apply, `format` is only an annotation, `dependentRequired` and
/// `minContains` hold; Go's `\w`, `\s`, `\d` are ASCII classes.
#[test]
fn latest_draft_url_and_go_classes_match_helm() {
    run("latest-url", &fixtures().join("latest-url/chart"));
}

/// Draft 7 beside a `$ref`: only `const` is checked (then the reference); `dependentRequired`,
/// `minContains` and `additionalItems` without array `items` assert nothing.
#[test]
fn draft_7_ref_siblings_and_later_keywords_match_helm() {
    run("draft7-ref", &fixtures().join("draft7-ref/chart"));
}

/// Schemas the meta-schema refuses (`tests/fixtures/schema/meta`, made by its
/// `regenerate.sh`): Helm's `is not valid against metaschema` error tree, for every draft.
#[test]
fn schemas_the_meta_schema_refuses_fail_like_helm() {
    let dir = fixtures().join("meta");
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 15);
    let values: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"x": 1}"#).unwrap();
    for case in &cases {
        let schema = std::fs::read(case).unwrap();
        let stderr = std::fs::read_to_string(case.with_extension("stderr")).unwrap();
        let want = stderr
            .strip_prefix(
                "Error: values don't meet the specifications of the schema(s) in the following chart(s):\nmeta:\n",
            )
            .unwrap();
        let got = format!(
            "{}\n",
            flotilla_chart::schema::validate_single(&values, &schema).unwrap_err()
        );
        assert_eq!(
            normalize(&got),
            normalize(want),
            "{}: ours\n{got}",
            case.display()
        );
    }
}

/// A `$ref` cycle that consumes no value is an error (helm: `both /$ref and  resolve to
/// "file:///values.schema.json#" causing reference cycle`), not an endless walk.
#[test]
fn reference_cycles_are_errors() {
    let values: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"x": 1}"#).unwrap();
    for (schema, url) in [
        (r##"{"$ref": "#"}"##, "file:///values.schema.json#"),
        (
            r##"{"$schema": "http://json-schema.org/draft-07/schema#", "$ref": "#"}"##,
            "file:///values.schema.json#",
        ),
        (
            r##"{"properties": {"x": {"$ref": "#/$defs/a"}}, "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"allOf": [{"$ref": "#/$defs/a"}]}}}"##,
            "file:///values.schema.json#/$defs/",
        ),
    ] {
        let e = flotilla_chart::schema::validate_single(&values, schema.as_bytes()).unwrap_err();
        assert!(
            e.contains(url) && e.contains("causing reference cycle"),
            "{schema}: {e}"
        );
    }
    // Recursion that consumes the values is no cycle.
    let tree: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(r#"{"a": {"a": {"a": {}}}}"#).unwrap();
    flotilla_chart::schema::validate_single(
        &tree,
        br##"{"type": "object", "properties": {"a": {"$ref": "#"}}}"##,
    )
    .unwrap();
}
