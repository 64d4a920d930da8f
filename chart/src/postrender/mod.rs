//! Post-renderers: the HelmRelease `spec.postRenderers[].kustomize` directives (`patches`,
//! strategic merge or JSON 6902, with target selectors, and `images`) applied to a rendered
//! manifest the way Flux's helm-controller applies them.
//!
//! helm-controller runs each `kustomize` entry, in order, as one kustomize build: the manifest
//! stream is the only resource, the patches are the kustomization's `patches`, the images its
//! `images`, with no reordering of resources; the output of one entry is the input of the next.
//! The output of a build is kustomize's `ResMap.AsYaml`: every object marshalled to JSON and
//! back to YAML (so keys sorted, go-yaml v2's style), joined by `---\n`. [`post_render`] returns
//! exactly that string.
//!
//! Behaviour follows kustomize v5.7.1 (the one in kubectl v1.35.2), checked by differential
//! tests against `kubectl kustomize` (`tests/tests/postrender.rs`):
//! - [`select`]: target selectors; group, version, kind, name and namespace are anchored
//!   regular expressions, label and annotation selectors use Kubernetes selector syntax.
//! - [`smp`]: strategic merge as kustomize's kyaml merges (its list order, its `$patch`
//!   directives; other `$` keys are kept as plain fields, as kyaml does), with the merge keys
//!   of the built-in types from [`schema`]. Unknown kinds have their lists replaced.
//! - [`json6902`]: RFC 6902 operations as evanphx/json-patch applies them.
//! - [`images`]: the images transformer.

mod helm;
mod images;
mod json6902;
mod schema;
#[allow(clippy::all)]
mod schema_table;
mod select;
mod smp;
mod spec;

use flotilla_yaml::{Mapping, Value};

pub use helm::{FILENAME_ANNOTATION, post_render_files};
pub use spec::{Image, Kustomize, Patch, PostRenderer, Selector, parse_post_renderers};

/// What went wrong in a post-renderer; the message names the renderer and the patch or image.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The input manifest is not a stream of Kubernetes objects.
    #[error("post-renderer input: {0}")]
    Input(String),
    /// A patch could not be parsed or applied.
    #[error("postRenderers[{renderer}].kustomize.patches[{patch}]: {message}")]
    Patch {
        /// Index of the post-renderer.
        renderer: usize,
        /// Index of the patch in its `patches`.
        patch: usize,
        /// What failed.
        message: String,
    },
    /// An image override could not be applied.
    #[error("postRenderers[{renderer}].kustomize.images[{image}]: {message}")]
    Image {
        /// Index of the post-renderer.
        renderer: usize,
        /// Index of the image in its `images`.
        image: usize,
        /// What failed.
        message: String,
    },
    /// The output of a post-renderer could not be written.
    #[error("postRenderers[{renderer}]: {message}")]
    Output {
        /// Index of the post-renderer.
        renderer: usize,
        /// What failed.
        message: String,
    },
    /// A post-renderer specification (YAML) is invalid.
    #[error("{0}")]
    Spec(String),
}

/// Applies `renderers` in order to `manifest` (a YAML stream), as helm-controller does.
/// Entries without `kustomize` are skipped. With no entry to run, the manifest is returned
/// unchanged.
pub fn post_render(manifest: &str, renderers: &[PostRenderer]) -> Result<String, Error> {
    let mut current = manifest.to_owned();
    for (index, renderer) in renderers.iter().enumerate() {
        if let Some(kustomize) = &renderer.kustomize {
            current = run_kustomize(&current, kustomize, index)?;
        }
    }
    Ok(current)
}

/// One object of the build, with the name and namespace it had when loaded (kustomize
/// selects by either the original or the current one).
#[derive(Debug, Clone)]
pub(crate) struct Resource {
    pub(crate) object: Mapping,
    pub(crate) original_name: String,
    pub(crate) original_namespace: String,
}

impl Resource {
    fn new(object: Mapping) -> Self {
        let original_name = meta_str(&object, "name").to_owned();
        let original_namespace = meta_str(&object, "namespace").to_owned();
        Resource {
            object,
            original_name,
            original_namespace,
        }
    }

    pub(crate) fn api_version(&self) -> &str {
        str_field(&self.object, "apiVersion")
    }

    pub(crate) fn kind(&self) -> &str {
        str_field(&self.object, "kind")
    }

    pub(crate) fn name(&self) -> &str {
        meta_str(&self.object, "name")
    }

    pub(crate) fn namespace(&self) -> &str {
        meta_str(&self.object, "namespace")
    }

    /// `kind apiVersion namespace/name`, for messages.
    pub(crate) fn describe(&self) -> String {
        let ns = self.namespace();
        if ns.is_empty() {
            format!("{} {} {}", self.api_version(), self.kind(), self.name())
        } else {
            format!(
                "{} {} {ns}/{}",
                self.api_version(),
                self.kind(),
                self.name()
            )
        }
    }
}

pub(crate) fn str_field<'a>(m: &'a Mapping, key: &str) -> &'a str {
    m.get_str(key).and_then(Value::as_str).unwrap_or("")
}

pub(crate) fn meta_str<'a>(m: &'a Mapping, key: &str) -> &'a str {
    m.get_str("metadata")
        .and_then(Value::as_map)
        .map(|meta| str_field(meta, key))
        .unwrap_or("")
}

/// `(group, version)` of an apiVersion.
pub(crate) fn split_api_version(api_version: &str) -> (&str, &str) {
    match api_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", api_version),
    }
}

/// kustomize's effective namespace: `default` for a namespaced object without one, a
/// marker for cluster-scoped kinds.
pub(crate) fn effective_namespace<'a>(
    api_version: &str,
    kind: &str,
    namespace: &'a str,
) -> &'a str {
    if schema::is_cluster_scoped(api_version, kind) {
        "_non_namespaceable_"
    } else if namespace.is_empty() {
        "default"
    } else {
        namespace
    }
}

/// Parses a manifest stream into objects (empty documents are skipped, as kustomize's reader
/// skips them).
fn parse_resources(manifest: &str) -> Result<Vec<Resource>, Error> {
    let docs = flotilla_yaml::from_str_all(manifest).map_err(|e| Error::Input(e.to_string()))?;
    // kustomize's YAML reader refuses a key repeated in a mapping (Helm's own reader keeps
    // the last one).
    for (i, doc) in crate::render::manifest::split_manifests(manifest)
        .iter()
        .enumerate()
    {
        if let Err(e) = flotilla_yaml::from_str_strict(doc) {
            return Err(Error::Input(format!("document {}: {e}", i + 1)));
        }
    }
    let mut out = Vec::with_capacity(docs.len());
    for (i, doc) in docs.into_iter().enumerate() {
        match doc {
            Value::Null => {}
            Value::Map(m) => {
                let m = string_keys(m);
                let r = Resource::new(m);
                if r.kind().is_empty() {
                    return Err(Error::Input(format!(
                        "document {}: missing kind in object",
                        i + 1
                    )));
                }
                if r.name().is_empty() {
                    return Err(Error::Input(format!(
                        "document {} ({} {}): missing metadata.name in object",
                        i + 1,
                        r.api_version(),
                        r.kind()
                    )));
                }
                out.push(r);
            }
            other => {
                return Err(Error::Input(format!(
                    "document {}: expected a mapping, found a {}",
                    i + 1,
                    kind_name(&other)
                )));
            }
        }
    }
    // kustomize refuses two objects with the same id.
    for (i, a) in out.iter().enumerate() {
        for b in &out[..i] {
            if a.api_version() == b.api_version()
                && a.kind() == b.kind()
                && a.name() == b.name()
                && effective_namespace(a.api_version(), a.kind(), a.namespace())
                    == effective_namespace(b.api_version(), b.kind(), b.namespace())
            {
                return Err(Error::Input(format!(
                    "may not add resource with an already registered id: {}",
                    a.describe()
                )));
            }
        }
    }
    Ok(out)
}

/// Turns non-string map keys into their text, recursively (JSON objects only have string
/// keys; kustomize's JSON round trip does the same).
pub(crate) fn string_keys(m: Mapping) -> Mapping {
    let mut out = Mapping::new();
    for (k, v) in m {
        let key = match k {
            Value::String(s) => s,
            other => scalar_text(&other),
        };
        out.insert(Value::String(key), string_keys_value(v));
    }
    out
}

fn string_keys_value(v: Value) -> Value {
    match v {
        Value::Map(m) => Value::Map(string_keys(m)),
        Value::Seq(items) => Value::Seq(items.into_iter().map(string_keys_value).collect()),
        other => other,
    }
}

/// The text of a scalar, as a YAML node holds it (what kyaml compares merge keys by).
pub(crate) fn scalar_text(v: &Value) -> String {
    match v {
        Value::Null | Value::Map(_) | Value::Seq(_) => String::new(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Uint(u) => u.to_string(),
        Value::Float(f) => flotilla_yaml::go_format_float_g(*f, false),
        Value::String(s) => s.clone(),
        Value::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
    }
}

pub(crate) fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Map(_) => "mapping",
        Value::Seq(_) => "sequence",
        Value::Null => "null",
        _ => "scalar",
    }
}

/// `m` without `key`.
pub(crate) fn without(m: Mapping, key: &str) -> Mapping {
    m.into_iter()
        .filter(|(k, _)| k.as_str() != Some(key))
        .collect()
}

/// kustomize's `AsYaml`: each object through JSON, as YAML, joined by `---\n`.
fn emit(resources: &[Resource], renderer: usize) -> Result<String, Error> {
    let mut out = String::new();
    for (i, r) in resources.iter().enumerate() {
        let mut object = r.object.clone();
        drop_empty_annotations(&mut object);
        let text =
            flotilla_yaml::sigs::marshal(&Value::Map(object)).map_err(|e| Error::Output {
                renderer,
                message: format!("{}: {e}", r.describe()),
            })?;
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&text);
    }
    Ok(out)
}

/// kustomize rewrites every object's annotations when it removes its own build annotations,
/// and an empty map is removed then.
fn drop_empty_annotations(object: &mut Mapping) {
    let key = Value::String("metadata".into());
    let Some(Value::Map(meta)) = object.get(&key) else {
        return;
    };
    let empty = match meta.get_str("annotations") {
        Some(Value::Map(a)) => a.is_empty(),
        Some(Value::Null) => true,
        _ => false,
    };
    if empty {
        let meta = without(meta.clone(), "annotations");
        object.insert(key, Value::Map(meta));
    }
}

fn run_kustomize(manifest: &str, k: &Kustomize, renderer: usize) -> Result<String, Error> {
    let mut resources = parse_resources(manifest)?;
    for (index, patch) in k.patches.iter().enumerate() {
        smp::apply_patch(&mut resources, patch).map_err(|message| Error::Patch {
            renderer,
            patch: index,
            message,
        })?;
    }
    for (index, image) in k.images.iter().enumerate() {
        images::apply(&mut resources, image).map_err(|message| Error::Image {
            renderer,
            image: index,
            message,
        })?;
    }
    emit(&resources, renderer)
}
