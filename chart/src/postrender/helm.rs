//! How Helm v4 runs a post-renderer over a chart's rendered files (`renderResources` with the
//! `combined` strategy, the one helm-controller uses): every document of every template
//! file (sorted by file name, partials and empty files skipped) is annotated with
//! `postrenderer.helm.sh/postrender-filename: <file>` and merged into one stream; the
//! post-renderers run on it; the output is split back into files by that annotation (a
//! document without it goes to `generated-by-postrender-<i>.yaml`), the annotation removed.
//! Helm then sorts hooks and manifests from these files as usual.

use std::collections::BTreeMap;

use flotilla_yaml::{KeyOrder, Mapping, Value};

use super::{Error, PostRenderer, post_render, without};
use crate::render::manifest::split_manifests;

/// The annotation carrying a document's file through the post-renderers.
pub const FILENAME_ANNOTATION: &str = "postrenderer.helm.sh/postrender-filename";

/// Runs `renderers` over rendered template files as Helm v4 does; returns the new files.
/// With no renderer the files are returned unchanged.
pub fn post_render_files(
    files: &BTreeMap<String, String>,
    renderers: &[PostRenderer],
) -> Result<BTreeMap<String, String>, Error> {
    if renderers.iter().all(|r| r.kustomize.is_none()) {
        return Ok(files.clone());
    }
    let mut merged = String::new();
    for (name, content) in files {
        let base = name.rsplit('/').next().unwrap_or(name);
        if base.starts_with('_') || content.trim().is_empty() {
            continue;
        }
        for doc in split_manifests(content) {
            let docs = flotilla_yaml::from_str_all(&doc)
                .map_err(|e| Error::Input(format!("parsing {name}: {e}")))?;
            // The stream Helm hands over keeps a repeated key, which kustomize refuses.
            flotilla_yaml::from_str_strict(&doc)
                .map_err(|e| Error::Input(format!("{name}: {e}")))?;
            for v in docs {
                let mut m = match v {
                    Value::Null => continue,
                    Value::Map(m) => super::string_keys(m),
                    other => {
                        return Err(Error::Input(format!(
                            "parsing {name}: expected a mapping, found a {}",
                            super::kind_name(&other)
                        )));
                    }
                };
                set_annotation(&mut m, name);
                let text = flotilla_yaml::sigs::marshal(&Value::Map(m))
                    .map_err(|e| Error::Input(format!("writing {name}: {e}")))?;
                if !merged.is_empty() {
                    merged.push_str("---\n");
                }
                merged.push_str(&text);
            }
        }
    }
    let out = post_render(&merged, renderers)?;
    let docs = flotilla_yaml::from_str_all(&out)
        .map_err(|e| Error::Input(format!("error parsing post-rendered YAML: {e}")))?;
    let mut by_file: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for (i, doc) in docs.into_iter().enumerate() {
        let Value::Map(m) = doc else { continue };
        let (name, m) = take_annotation(m);
        let name = name.unwrap_or_else(|| format!("generated-by-postrender-{i}.yaml"));
        by_file.entry(name).or_default().push(Value::Map(m));
    }
    let mut result = BTreeMap::new();
    for (name, docs) in by_file {
        let mut content = String::new();
        for (i, d) in docs.iter().enumerate() {
            if i > 0 {
                content.push_str("---\n");
            }
            let text = flotilla_yaml::to_string_with(d, KeyOrder::Insertion)
                .map_err(|e| Error::Input(format!("writing {name}: {e}")))?;
            content.push_str(&text);
        }
        result.insert(name, content);
    }
    Ok(result)
}

fn set_annotation(m: &mut Mapping, file: &str) {
    let mut meta = match m.get_str("metadata") {
        Some(Value::Map(meta)) => meta.clone(),
        _ => Mapping::new(),
    };
    let mut annotations = match meta.get_str("annotations") {
        Some(Value::Map(a)) => a.clone(),
        _ => Mapping::new(),
    };
    annotations.insert(
        Value::String(FILENAME_ANNOTATION.into()),
        Value::String(file.into()),
    );
    meta.insert(Value::String("annotations".into()), Value::Map(annotations));
    m.insert(Value::String("metadata".into()), Value::Map(meta));
}

/// Removes the file annotation (and annotations or metadata left empty, as Helm's writer
/// clears them); returns the file.
fn take_annotation(m: Mapping) -> (Option<String>, Mapping) {
    let Some(Value::Map(meta)) = m.get_str("metadata").cloned() else {
        return (None, m);
    };
    let Some(Value::Map(annotations)) = meta.get_str("annotations").cloned() else {
        return (None, m);
    };
    let file = annotations
        .get_str(FILENAME_ANNOTATION)
        .and_then(Value::as_str)
        .filter(|f| !f.is_empty())
        .map(str::to_owned);
    let annotations = without(annotations, FILENAME_ANNOTATION);
    let meta = if annotations.is_empty() {
        without(meta, "annotations")
    } else {
        let mut meta = meta;
        meta.insert(Value::String("annotations".into()), Value::Map(annotations));
        meta
    };
    let m = if meta.is_empty() {
        without(m, "metadata")
    } else {
        let mut m = m;
        m.insert(Value::String("metadata".into()), Value::Map(meta));
        m
    };
    (file, m)
}
