//! The post-renderer input: plain mirrors of the HelmRelease `spec.postRenderers` entries
//! (the agent converts from `flotilla-core`'s types), and a reader for a YAML list of them.

use flotilla_yaml::Value;

use super::Error;

/// One `spec.postRenderers[]` entry.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PostRenderer {
    /// The built-in kustomize post-renderer.
    pub kustomize: Option<Kustomize>,
}

/// `postRenderers[].kustomize`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Kustomize {
    /// Strategic merge or JSON 6902 patches, applied in order.
    pub patches: Vec<Patch>,
    /// Image overrides, applied in order after the patches.
    pub images: Vec<Image>,
}

/// A kustomize patch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Patch {
    /// The patch text: strategic merge (YAML, one or more documents) or JSON 6902 (a JSON or
    /// YAML list of operations).
    pub patch: String,
    /// The objects it applies to; without it a strategic merge patch names its own target.
    pub target: Option<Selector>,
}

/// A kustomize object selector; empty fields match everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Selector {
    /// API group (anchored regular expression).
    pub group: String,
    /// API version (anchored regular expression).
    pub version: String,
    /// Kind (anchored regular expression).
    pub kind: String,
    /// Name (anchored regular expression).
    pub name: String,
    /// Namespace (anchored regular expression; `default` for namespaced objects without one).
    pub namespace: String,
    /// Kubernetes label selector.
    pub label_selector: String,
    /// Kubernetes label selector syntax, on annotations.
    pub annotation_selector: String,
}

/// A kustomize image override.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Image {
    /// The image name to match (without tag or digest).
    pub name: String,
    /// The replacement name.
    pub new_name: String,
    /// The replacement tag.
    pub new_tag: String,
    /// The replacement digest (`sha256:...`).
    pub digest: String,
}

/// Reads a YAML (or JSON) list of `postRenderers` entries, as written in a HelmRelease spec.
/// A mapping with a `postRenderers` key is accepted too. Errors name the field.
pub fn parse_post_renderers(text: &str) -> Result<Vec<PostRenderer>, Error> {
    let doc =
        flotilla_yaml::from_str(text).map_err(|e| Error::Spec(format!("postRenderers: {e}")))?;
    let list = match &doc {
        Value::Map(m) => m.get_str("postRenderers").cloned().unwrap_or(Value::Null),
        other => other.clone(),
    };
    let items = match list {
        Value::Seq(items) => items,
        Value::Null => Vec::new(),
        other => {
            return Err(spec_err(
                "postRenderers",
                format!("expected a list, found a {}", super::kind_name(&other)),
            ));
        }
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| post_renderer(item, &format!("postRenderers[{i}]")))
        .collect()
}

fn spec_err(path: &str, message: String) -> Error {
    Error::Spec(format!("{path}: {message}"))
}

fn fields<'a>(
    v: &'a Value,
    path: &str,
    known: &[&str],
) -> Result<Vec<(&'a str, &'a Value)>, Error> {
    let m = match v {
        Value::Map(m) => m,
        Value::Null => return Ok(Vec::new()),
        other => {
            return Err(spec_err(
                path,
                format!("expected a mapping, found a {}", super::kind_name(other)),
            ));
        }
    };
    let mut out = Vec::new();
    for (k, v) in m.iter() {
        let Some(k) = k.as_str() else {
            return Err(spec_err(path, "keys must be strings".into()));
        };
        if !known.contains(&k) {
            return Err(spec_err(
                path,
                format!("unknown field {k:?} (expected one of {})", known.join(", ")),
            ));
        }
        out.push((k, v));
    }
    Ok(out)
}

fn string(v: &Value, path: &str) -> Result<String, Error> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        other => Err(spec_err(
            path,
            format!("expected a string, found a {}", super::kind_name(other)),
        )),
    }
}

fn list<'a>(v: &'a Value, path: &str) -> Result<&'a [Value], Error> {
    match v {
        Value::Seq(items) => Ok(items),
        Value::Null => Ok(&[]),
        other => Err(spec_err(
            path,
            format!("expected a list, found a {}", super::kind_name(other)),
        )),
    }
}

fn post_renderer(v: &Value, path: &str) -> Result<PostRenderer, Error> {
    let mut out = PostRenderer::default();
    for (k, v) in fields(v, path, &["kustomize"])? {
        if k == "kustomize" && !matches!(v, Value::Null) {
            out.kustomize = Some(kustomize(v, &format!("{path}.kustomize"))?);
        }
    }
    Ok(out)
}

fn kustomize(v: &Value, path: &str) -> Result<Kustomize, Error> {
    let mut out = Kustomize::default();
    for (k, v) in fields(v, path, &["patches", "images"])? {
        let p = format!("{path}.{k}");
        for (i, item) in list(v, &p)?.iter().enumerate() {
            let ip = format!("{p}[{i}]");
            match k {
                "patches" => out.patches.push(patch(item, &ip)?),
                _ => out.images.push(image(item, &ip)?),
            }
        }
    }
    Ok(out)
}

fn patch(v: &Value, path: &str) -> Result<Patch, Error> {
    let mut out = Patch::default();
    let mut has_patch = false;
    for (k, v) in fields(v, path, &["patch", "target"])? {
        match k {
            "patch" => {
                out.patch = string(v, &format!("{path}.patch"))?;
                has_patch = true;
            }
            _ if !matches!(v, Value::Null) => {
                out.target = Some(selector(v, &format!("{path}.target"))?);
            }
            _ => {}
        }
    }
    if !has_patch {
        return Err(spec_err(path, "missing required field \"patch\"".into()));
    }
    Ok(out)
}

fn selector(v: &Value, path: &str) -> Result<Selector, Error> {
    let mut out = Selector::default();
    let known = [
        "group",
        "version",
        "kind",
        "name",
        "namespace",
        "labelSelector",
        "annotationSelector",
    ];
    for (k, v) in fields(v, path, &known)? {
        let s = string(v, &format!("{path}.{k}"))?;
        match k {
            "group" => out.group = s,
            "version" => out.version = s,
            "kind" => out.kind = s,
            "name" => out.name = s,
            "namespace" => out.namespace = s,
            "labelSelector" => out.label_selector = s,
            _ => out.annotation_selector = s,
        }
    }
    Ok(out)
}

fn image(v: &Value, path: &str) -> Result<Image, Error> {
    let mut out = Image::default();
    for (k, v) in fields(v, path, &["name", "newName", "newTag", "digest"])? {
        let s = string(v, &format!("{path}.{k}"))?;
        match k {
            "name" => out.name = s,
            "newName" => out.new_name = s,
            "newTag" => out.new_tag = s,
            _ => out.digest = s,
        }
    }
    if out.name.is_empty() {
        return Err(spec_err(path, "missing required field \"name\"".into()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_list_of_entries() {
        let got = parse_post_renderers(
            "- kustomize:\n    patches:\n    - patch: '[]'\n      target: {kind: Deployment, labelSelector: app=x}\n    images:\n    - {name: nginx, newTag: '2'}\n",
        )
        .expect("valid");
        assert_eq!(got.len(), 1);
        let k = got[0].kustomize.as_ref().expect("kustomize");
        assert_eq!(k.patches[0].patch, "[]");
        let t = k.patches[0].target.as_ref().expect("target");
        assert_eq!(
            (t.kind.as_str(), t.label_selector.as_str()),
            ("Deployment", "app=x")
        );
        assert_eq!(k.images[0].new_tag, "2");
    }

    #[test]
    fn errors_name_the_field() {
        let e = parse_post_renderers(
            "- kustomize:\n    patches:\n    - patch: x\n      target: {kind: [a]}\n",
        )
        .expect_err("kind is not a string");
        assert_eq!(
            e.to_string(),
            "postRenderers[0].kustomize.patches[0].target.kind: expected a string, found a sequence"
        );
        let e = parse_post_renderers("- kustomize:\n    images:\n    - newTag: x\n")
            .expect_err("no name");
        assert_eq!(
            e.to_string(),
            "postRenderers[0].kustomize.images[0]: missing required field \"name\""
        );
        let e = parse_post_renderers("- kustomise: {}\n").expect_err("typo");
        assert_eq!(
            e.to_string(),
            "postRenderers[0]: unknown field \"kustomise\" (expected one of kustomize)"
        );
    }
}
