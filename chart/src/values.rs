//! Helm values as `serde_json` values: reading values files the way Helm does, the map merge
//! used for `-f` files, and the `Values` path helpers (`Table`, `PathValue`).
//!
//! Numbers read from YAML or JSON are float64 (`serde_json` f64 numbers), as Go's
//! `map[string]interface{}` holds them after `sigs.k8s.io/yaml`; `--set` integers are int64
//! (i64 numbers). Maps are `serde_json::Map`, sorted by key.

use serde_json::{Map, Number, Value};

/// A values map (Go's `map[string]interface{}`).
pub type Values = Map<String, Value>;

/// An error reading a values document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesError {
    /// The YAML did not parse, or a document is not a map.
    #[error("cannot unmarshal yaml document: {0}")]
    Unmarshal(String),
    /// A file could not be read (Go's `open PATH: reason`).
    #[error("open {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The OS error.
        message: String,
    },
    /// A values file (`-f`) did not parse.
    #[error("failed to parse {path}: {source}")]
    File {
        /// The file as given.
        path: String,
        /// What went wrong.
        source: Box<ValuesError>,
    },
}

/// Converts a `sigs.k8s.io/yaml`-shaped YAML value (string keys, float numbers) to JSON.
pub(crate) fn yaml_to_json(v: flotilla_yaml::Value) -> Value {
    use flotilla_yaml::Value as Y;
    match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        #[allow(clippy::cast_precision_loss)]
        Y::Int(i) => float(i as f64),
        #[allow(clippy::cast_precision_loss)]
        Y::Uint(u) => float(u as f64),
        Y::Float(f) => float(f),
        Y::String(s) => Value::String(s),
        Y::Bytes(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
        Y::Seq(items) => Value::Array(items.into_iter().map(yaml_to_json).collect()),
        Y::Map(m) => {
            let mut out = Map::new();
            for (k, v) in m.into_entries() {
                let key = match k {
                    Y::String(s) => s,
                    other => crate::gofmt::yaml_key_string(&other),
                };
                out.insert(key, yaml_to_json(v));
            }
            Value::Object(out)
        }
    }
}

/// One pass of what `sigs.k8s.io/yaml` does to a decoded mapping (keys to strings, every number
/// to a float64), straight into JSON values; `None` where that pass could fail or needs a
/// rarer rule (a NaN or an infinity, `!!binary` bytes, a key that is not a string, boolean
/// or integer), which [`parse_yaml_map_reference`] then applies.
fn yaml_map_to_json_direct(m: flotilla_yaml::Mapping) -> Option<Values> {
    let mut out = Map::new();
    for (k, v) in m.into_entries() {
        let key = match k {
            flotilla_yaml::Value::String(s) => s,
            flotilla_yaml::Value::Bool(b) => b.to_string(),
            flotilla_yaml::Value::Int(i) => i.to_string(),
            _ => return None,
        };
        // Keys that read the same once strings (`1` and `"1"`): the later value wins, as
        // in Go's map.
        out.insert(key, yaml_to_json_direct(v)?);
    }
    Some(out)
}

/// [`yaml_map_to_json_direct`] of any value.
fn yaml_to_json_direct(v: flotilla_yaml::Value) -> Option<Value> {
    use flotilla_yaml::Value as Y;
    Some(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        #[allow(clippy::cast_precision_loss)]
        Y::Int(i) => Value::Number(Number::from_f64(i as f64)?),
        #[allow(clippy::cast_precision_loss)]
        Y::Uint(u) => Value::Number(Number::from_f64(u as f64)?),
        Y::Float(f) => Value::Number(Number::from_f64(f)?),
        Y::String(s) => Value::String(s),
        Y::Bytes(_) => return None,
        Y::Seq(items) => Value::Array(
            items
                .into_iter()
                .map(yaml_to_json_direct)
                .collect::<Option<_>>()?,
        ),
        Y::Map(m) => Value::Object(yaml_map_to_json_direct(m)?),
    })
}

/// A float64 number (NaN and infinities, which JSON cannot hold, become null).
pub(crate) fn float(f: f64) -> Value {
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// `sigs.k8s.io/yaml.Unmarshal` of one document into `map[string]interface{}` (`null` and an
/// empty document give an empty map).
pub fn parse_yaml_map(src: &str) -> Result<Values, flotilla_yaml::Error> {
    // The go-yaml value goes straight into the JSON model when that cannot fail: only the
    // reference path below gives errors (and the rare keys and values it would have to
    // report or convert: non-finite floats, byte strings, keys other than strings, booleans
    // and integers).
    if let Ok(v) = flotilla_yaml::from_str(src) {
        match v {
            flotilla_yaml::Value::Null => return Ok(Values::new()),
            flotilla_yaml::Value::Map(m) => {
                if let Some(out) = yaml_map_to_json_direct(m) {
                    return Ok(out);
                }
            }
            _ => {}
        }
    }
    parse_yaml_map_reference(src)
}

/// [`parse_yaml_map`] through `sigs.k8s.io/yaml`'s two steps (YAML to its JSON form, then
/// that form to JSON values): the path that reports errors.
pub(crate) fn parse_yaml_map_reference(src: &str) -> Result<Values, flotilla_yaml::Error> {
    let m = flotilla_yaml::sigs::unmarshal_map(src)?;
    match yaml_to_json(flotilla_yaml::Value::Map(m)) {
        Value::Object(o) => Ok(o),
        _ => Ok(Values::new()),
    }
}

/// Splits a stream into documents as `k8s.io/apimachinery/pkg/util/yaml.YAMLReader` does: a
/// line that starts with `---` followed only by whitespace ends a document; empty documents
/// are skipped.
pub(crate) fn split_yaml_documents(src: &str) -> Vec<&str> {
    // A document is the run of lines between two separators: a slice of `src`, not a copy.
    // Only lines starting with `---` can be separators: they are found with `memchr`.
    let mut docs = Vec::new();
    let mut start = 0;
    let starts = (src.starts_with("---").then_some(0))
        .into_iter()
        .chain(memchr::memmem::find_iter(src.as_bytes(), b"\n---").map(|i| i + 1));
    for pos in starts {
        // `pos` follows a line feed (or is 0): a character boundary.
        let rest = src.get(pos..).unwrap_or_default();
        let end = pos + memchr::memchr(b'\n', rest.as_bytes()).map_or(rest.len(), |i| i + 1);
        let line = src.get(pos..end).unwrap_or_default();
        if let Some(after) = line.strip_prefix("---")
            && after.trim_end().is_empty()
        {
            if start < pos {
                docs.push(&src[start..pos]);
            }
            start = end;
        }
    }
    if start < src.len() {
        docs.push(&src[start..]);
    }
    docs
}

/// Helm v4's `loader.LoadValues`: every YAML document of the stream, merged in order with
/// [`merge_maps`].
pub fn load_values(src: &str) -> Result<Values, ValuesError> {
    let mut out = Values::new();
    for doc in split_yaml_documents(src) {
        // Helm's document reader hands each line on with its line break, the last one too:
        // a block scalar that runs to the end of a file without one still ends with "\n" (and
        // an unclosed quote is reported on the line after), as helm v4.1.4 shows.
        let cur = if doc.is_empty() || doc.ends_with('\n') {
            parse_yaml_map(doc)
        } else {
            parse_yaml_map(&format!("{doc}\n"))
        };
        let cur = cur.map_err(|e| ValuesError::Unmarshal(e.to_string()))?;
        out = merge_maps(out, cur);
    }
    Ok(out)
}

/// [`load_values`] of raw bytes (a UTF-8 BOM is not special here: Helm strips it while
/// loading charts, not values files).
pub fn load_values_bytes(src: &[u8]) -> Result<Values, ValuesError> {
    load_values(&crate::utf8_lossy(src))
}

/// Helm's `loader.MergeMaps(a, b)`: `b` wins; maps present on both sides are merged
/// recursively; lists and scalars are replaced.
pub fn merge_maps(a: Values, b: Values) -> Values {
    if a.is_empty() {
        // Every key of `b` would be inserted as it is (the first document of a stream).
        return b;
    }
    let mut out = a;
    for (k, v) in b {
        match (out.get_mut(&k), v) {
            (Some(Value::Object(existing)), Value::Object(new)) => {
                let merged = merge_maps(std::mem::take(existing), new);
                *existing = merged;
            }
            (_, v) => {
                out.insert(k, v);
            }
        }
    }
    out
}

/// `common.ErrNoTable` / `common.ErrNoValue`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No table at that key.
    #[error("{0:?} is not a table")]
    NoTable(String),
    /// No value at that key.
    #[error("{0:?} is not a value")]
    NoValue(String),
    /// An empty path.
    #[error("YAML path cannot be empty")]
    Empty,
}

/// `Values.Table(path)`: the map at a dotted path.
pub fn table<'a>(values: &'a Values, path: &str) -> Result<&'a Values, PathError> {
    let mut cur = values;
    for part in path.split('.') {
        match cur.get(part) {
            Some(Value::Object(m)) => cur = m,
            _ => return Err(PathError::NoTable(part.to_owned())),
        }
    }
    Ok(cur)
}

/// `Values.PathValue(path)`: the non-table value at a dotted path (a table is "no value").
pub fn path_value<'a>(values: &'a Values, path: &str) -> Result<&'a Value, PathError> {
    if path.is_empty() {
        return Err(PathError::Empty);
    }
    let parts: Vec<&str> = path.split('.').collect();
    let (key, parents) = parts.split_last().ok_or(PathError::Empty)?;
    let t = if parents.is_empty() {
        values
    } else {
        table(values, &parents.join(".")).map_err(|_| PathError::NoValue((*key).to_owned()))?
    };
    match t.get(*key) {
        Some(v) if !v.is_object() => Ok(v),
        _ => Err(PathError::NoValue((*key).to_owned())),
    }
}

/// Reads and parses one `-f` values file as the Helm CLI does (`failed to parse FILE: ...`).
pub fn read_values_file(path: &std::path::Path) -> Result<Values, ValuesError> {
    let data = std::fs::read(path).map_err(|e| ValuesError::Io {
        path: path.display().to_string(),
        message: match e.kind() {
            std::io::ErrorKind::NotFound => "no such file or directory".to_owned(),
            std::io::ErrorKind::PermissionDenied => "permission denied".to_owned(),
            std::io::ErrorKind::IsADirectory => "is a directory".to_owned(),
            _ => e.to_string(),
        },
    })?;
    load_values_bytes(&data).map_err(|e| ValuesError::File {
        path: path.display().to_string(),
        source: Box::new(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(v: Value) -> Values {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    /// A values file whose last line has no line break reads as if it had one (helm v4.1.4:
    /// `x: |\n  a` gives "a\n", a last line of spaces stays content, `|-` strips, an unclosed
    /// quote is reported on the following line).
    #[test]
    fn the_last_line_of_a_values_file_ends_with_a_line_break() {
        let x = |src: &str| load_values(src).expect("valid").get("x").cloned();
        assert_eq!(x("x: |\n  a"), Some(json!("a\n")));
        assert_eq!(x("x: |\n  a\n  b"), Some(json!("a\nb\n")));
        assert_eq!(x("x: |\n  a\n    "), Some(json!("a\n  \n")));
        assert_eq!(x("x: |+\n  a"), Some(json!("a\n")));
        assert_eq!(x("x: >\n  a\n  b"), Some(json!("a b\n")));
        assert_eq!(x("x: |-\n  a"), Some(json!("a")));
        assert_eq!(x("a: 1\n---\nx: |\n  a"), Some(json!("a\n")));
        assert_eq!(x("x: plain"), Some(json!("plain")));
        let err = load_values("x: \"abc")
            .expect_err("unclosed quote")
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }

    /// The line walk `split_yaml_documents` replaced: every line is a separator candidate.
    fn split_by_lines(src: &str) -> Vec<&str> {
        let mut docs = Vec::new();
        let mut start = 0;
        let mut pos = 0;
        for line in src.split_inclusive('\n') {
            let end = pos + line.len();
            if let Some(after) = line.strip_prefix("---")
                && after.trim_end().is_empty()
            {
                if start < pos {
                    docs.push(&src[start..pos]);
                }
                start = end;
            }
            pos = end;
        }
        if start < src.len() {
            docs.push(&src[start..]);
        }
        docs
    }

    #[test]
    fn document_split_finds_what_a_line_walk_finds() {
        let lines = [
            "---",
            "--- ",
            "---\r",
            "--- # c",
            "----",
            " ---",
            "a: 1",
            "",
            "---\u{85}",
            "-- -",
            "...",
            "x---",
            "---\t",
            "é---",
        ];
        let mut n = 0;
        // Every sequence of up to four of those lines, with and without a final line feed.
        for len in 0..=4u32 {
            for mut code in 0..lines.len().pow(len) {
                let mut text = String::new();
                for i in 0..len {
                    if i > 0 {
                        text.push('\n');
                    }
                    text.push_str(lines[code % lines.len()]);
                    code /= lines.len();
                }
                for t in [text.clone(), format!("{text}\n")] {
                    assert_eq!(split_yaml_documents(&t), split_by_lines(&t), "{t:?}");
                    n += 1;
                }
            }
        }
        assert!(n > 80_000, "{n}");
    }

    /// Every `.yaml` file below `dir`.
    fn yaml_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
        for e in std::fs::read_dir(dir).expect("readable corpus directory") {
            let p = e.expect("directory entry").path();
            if p.is_dir() {
                yaml_files(&p, out);
            } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                out.push(p);
            }
        }
    }

    #[test]
    fn direct_conversion_matches_the_two_sigs_yaml_steps() {
        let mut docs: Vec<String> = [
            "",
            "null",
            "~",
            "{}",
            "[]",
            "- a",
            "a",
            "1",
            "a: 1\n",
            "1: a\n'1': b\n",
            "'1': b\n1: a\n",
            "true: 1\ny: 2\n'true': 3\n",
            "1.5: a\n",
            "~: a\n",
            "[1]: a\n",
            "{a: 1}: b\n",
            "a: .nan\n",
            "a: [1, .inf]\n",
            "b: -.inf\n",
            "a: !!binary aGk=\n",
            "!!binary aGk=: 1\n",
            "a: 18446744073709551615\n",
            "a: 9223372036854775807\nb: -9223372036854775808\nc: 1e400\n",
            "a: 0x1F\nb: 0o17\nc: 017\nd: 1_000\ne: 1:20\nf: .5\ng: -0\n",
            "t: 2001-12-14t21:59:43.10-05:00\nd: 2002-12-14\n",
            "a: b: c\n",
            "a: [\n",
            "a: &x {b: 1}\nc: *x\n<<: *x\n",
            "a:\n  b:\n  - 1\n  - {c: null}\n",
            "a: 1\na: 2\n",
            "a: yes\nb: off\nc: Null\nd: ''\n",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        let corpus = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/charts");
        let mut files = Vec::new();
        yaml_files(&corpus, &mut files);
        assert!(
            files.len() > 500,
            "the chart corpus is expected at {corpus:?}"
        );
        for f in files {
            let text = String::from_utf8_lossy(&std::fs::read(&f).expect("readable")).into_owned();
            docs.extend(split_yaml_documents(&text).into_iter().map(str::to_owned));
        }
        for d in &docs {
            assert_eq!(parse_yaml_map(d), parse_yaml_map_reference(d), "{d:?}");
        }
    }

    #[test]
    fn yaml_numbers_become_floats() {
        let v = load_values("a: 1\nb: 1.5\nc: [1, x]\n").unwrap();
        assert!(v["a"].is_f64());
        assert_eq!(v["a"].as_f64(), Some(1.0));
        assert_eq!(v["c"][1], json!("x"));
    }

    #[test]
    fn multiple_documents_are_merged() {
        // Checked against helm v4.1.4: `y` is a YAML 1.1 bool, so the key is "true".
        let v = load_values("a: {x: 1, y: 2, z: 2}\n---\na: {y: 3, z: 4}\nb: 1\n--- \n\n").unwrap();
        assert_eq!(v["a"]["x"].as_f64(), Some(1.0));
        assert_eq!(v["a"]["true"].as_f64(), Some(3.0));
        assert_eq!(v["a"]["z"].as_f64(), Some(4.0));
        assert_eq!(v["b"].as_f64(), Some(1.0));
        assert!(load_values("").unwrap().is_empty());
        assert!(load_values("--- # c\na: 1\n").is_ok());
    }

    #[test]
    fn bad_yaml_is_an_error_with_line() {
        let e = load_values("a: b: c\n").unwrap_err().to_string();
        // helm v4.1.4 prints exactly this (go-yaml gives no line for this one).
        assert_eq!(
            e,
            "cannot unmarshal yaml document: error converting YAML to JSON: yaml: mapping values are not allowed in this context"
        );
        let e = load_values("a: 1\nb: [\n").unwrap_err().to_string();
        assert!(e.contains("yaml: line"), "{e}");
        let e = load_values("- a\n").unwrap_err().to_string();
        assert!(e.contains("cannot unmarshal array"), "{e}");
    }

    #[test]
    fn merge_maps_later_wins_and_recurses() {
        let a = obj(json!({"a": {"x": 1, "y": [1]}, "b": 1}));
        let b = obj(json!({"a": {"y": [2], "z": null}, "b": {"c": 1}}));
        let m = merge_maps(a, b);
        assert_eq!(
            Value::Object(m),
            json!({"a": {"x": 1, "y": [2], "z": null}, "b": {"c": 1}})
        );
    }

    #[test]
    fn missing_values_file_reads_like_go() {
        let e = read_values_file(std::path::Path::new("/nonexistent/v.yaml")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "open /nonexistent/v.yaml: no such file or directory"
        );
    }

    #[test]
    fn path_value_and_table() {
        let v = obj(json!({"a": {"b": {"c": true}, "d": null}, "t": 1}));
        assert_eq!(path_value(&v, "a.b.c"), Ok(&json!(true)));
        assert_eq!(path_value(&v, "a.d"), Ok(&Value::Null));
        assert_eq!(path_value(&v, "a.b"), Err(PathError::NoValue("b".into())));
        assert_eq!(path_value(&v, "x.y"), Err(PathError::NoValue("y".into())));
        assert_eq!(path_value(&v, "t"), Ok(&json!(1)));
        assert!(table(&v, "a.b").is_ok());
        assert!(table(&v, "t").is_err());
    }
}
