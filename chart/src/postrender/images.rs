//! kustomize's images transformer. Two passes, as kustomize runs them: first every `image`
//! of every element of any `containers` or `initContainers` list anywhere in the object,
//! then the configured fields (`spec/containers[]/image`, `spec/initContainers[]/image`,
//! `spec/volumes[]/image/reference` and the same under `spec/template/spec`). Custom
//! resource definitions are left alone.
//!
//! An image matches when it is the `name` (a regular expression, as in kustomize) followed
//! by an optional `:tag` and an optional `@sha256:digest`. Then `newName` replaces the name;
//! `newTag` replaces the tag and drops the digest; `digest` replaces the digest and drops
//! the tag; both set both.

use flotilla_yaml::Value;
use regex::Regex;

use super::{Image, Resource};

pub(super) fn apply(resources: &mut [Resource], image: &Image) -> Result<(), String> {
    let pattern = Regex::new(&format!(
        "^{}(:[a-zA-Z0-9_.{{}}-]*)?(@sha256:[a-zA-Z0-9_.{{}}-]*)?$",
        image.name
    ))
    .map_err(|e| format!("name {:?} is not a valid pattern: {e}", image.name))?;
    let rewrite = |s: &str| -> Option<String> { pattern.is_match(s).then(|| update(s, image)) };
    for r in resources.iter_mut() {
        if r.kind() == "CustomResourceDefinition" {
            continue;
        }
        let mut object = Value::Map(std::mem::take(&mut r.object));
        let legacy = walk_containers(&mut object, &rewrite);
        let configured = legacy.and_then(|()| configured_fields(&mut object, &rewrite));
        if let Value::Map(m) = object {
            r.object = m;
        }
        configured.map_err(|e| format!("{}: {e}", r.describe()))?;
    }
    Ok(())
}

/// kustomize's `image.Split`: name, tag, digest (the tag's `:` is searched after the first
/// `/`, so a registry port is not a tag).
fn split(image: &str) -> (&str, &str, &str) {
    let offset = match image.find('/') {
        Some(i) if i > 0 => i,
        _ => 0,
    };
    let search = &image[offset..];
    let at = search.find('@').map(|i| i + offset);
    let colon = search.find(':').map(|i| i + offset);
    match (colon, at) {
        (None, None) => (image, "", ""),
        (c, Some(a)) if c.is_none_or(|c| a < c) => (&image[..a], "", &image[a + 1..]),
        (Some(c), Some(a)) => (&image[..c], &image[c + 1..a], &image[a + 1..]),
        (Some(c), None) => (&image[..c], &image[c + 1..], ""),
        (None, Some(_)) => (image, "", ""),
    }
}

fn update(value: &str, image: &Image) -> String {
    let (name, tag, digest) = split(value);
    let mut name = name.to_owned();
    let (mut tag, mut digest) = (tag.to_owned(), digest.to_owned());
    if !image.new_name.is_empty() {
        name.clone_from(&image.new_name);
    }
    match (image.new_tag.is_empty(), image.digest.is_empty()) {
        (false, false) => {
            tag.clone_from(&image.new_tag);
            digest.clone_from(&image.digest);
        }
        (false, true) => {
            tag.clone_from(&image.new_tag);
            digest.clear();
        }
        (true, false) => {
            tag.clear();
            digest.clone_from(&image.digest);
        }
        (true, true) => {}
    }
    if !tag.is_empty() {
        name.push(':');
        name.push_str(&tag);
    }
    if !digest.is_empty() {
        name.push('@');
        name.push_str(&digest);
    }
    name
}

fn set_image(slot: &mut Value, rewrite: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    match slot {
        Value::String(s) => {
            if let Some(new) = rewrite(s) {
                *s = new;
            }
            Ok(())
        }
        Value::Map(_) | Value::Seq(_) => Err("an image field is not a string".into()),
        _ => Ok(()),
    }
}

/// Mutable access to a map's value (flotilla's mapping has no `get_mut`): take it out, let
/// `f` change it, put it back in place.
fn with_field<T>(map: &mut Value, key: &str, f: impl FnOnce(&mut Value) -> T) -> Option<T> {
    let Value::Map(m) = map else { return None };
    let mut v = m.get_str(key)?.clone();
    let out = f(&mut v);
    m.insert(Value::String(key.to_owned()), v);
    Some(out)
}

/// The legacy pass: any `containers`/`initContainers` list, at any depth.
fn walk_containers(v: &mut Value, rewrite: &dyn Fn(&str) -> Option<String>) -> Result<(), String> {
    match v {
        Value::Map(m) => {
            let keys: Vec<String> = m
                .keys()
                .filter_map(|k| k.as_str().map(str::to_owned))
                .collect();
            for key in keys {
                let is_list = key == "containers" || key == "initContainers";
                with_field(v, &key, |child| -> Result<(), String> {
                    walk_containers(child, rewrite)?;
                    if is_list && let Value::Seq(items) = child {
                        for item in items {
                            with_field(item, "image", |img| set_image(img, rewrite)).transpose()?;
                        }
                    }
                    Ok(())
                })
                .transpose()?;
            }
            Ok(())
        }
        Value::Seq(items) => items
            .iter_mut()
            .try_for_each(|i| walk_containers(i, rewrite)),
        _ => Ok(()),
    }
}

/// The configured pass: the image field specs.
fn configured_fields(
    object: &mut Value,
    rewrite: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    let paths: [&[&str]; 6] = [
        &["spec", "containers", "[]", "image"],
        &["spec", "initContainers", "[]", "image"],
        &["spec", "volumes", "[]", "image", "reference"],
        &["spec", "template", "spec", "containers", "[]", "image"],
        &["spec", "template", "spec", "initContainers", "[]", "image"],
        &[
            "spec",
            "template",
            "spec",
            "volumes",
            "[]",
            "image",
            "reference",
        ],
    ];
    for path in paths {
        visit_path(object, path, rewrite)?;
    }
    Ok(())
}

fn visit_path(
    v: &mut Value,
    path: &[&str],
    rewrite: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
    match path {
        [] => set_image(v, rewrite),
        ["[]", rest @ ..] => match v {
            Value::Seq(items) => items
                .iter_mut()
                .try_for_each(|i| visit_path(i, rest, rewrite)),
            _ => Ok(()),
        },
        [key, rest @ ..] => {
            with_field(v, key, |child| visit_path(child, rest, rewrite)).transpose()?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_like_kustomize() {
        assert_eq!(split("nginx"), ("nginx", "", ""));
        assert_eq!(split("nginx:1.2"), ("nginx", "1.2", ""));
        assert_eq!(split("reg:5000/app:1"), ("reg:5000/app", "1", ""));
        assert_eq!(split("reg:5000/app"), ("reg:5000/app", "", ""));
        assert_eq!(split("app@sha256:ab"), ("app", "", "sha256:ab"));
        assert_eq!(split("a/app:1@sha256:ab"), ("a/app", "1", "sha256:ab"));
    }

    #[test]
    fn tags_and_digests() {
        let img = |t: &str, d: &str| Image {
            name: "app".into(),
            new_name: String::new(),
            new_tag: t.into(),
            digest: d.into(),
        };
        assert_eq!(update("app:1@sha256:x", &img("2", "")), "app:2");
        assert_eq!(update("app:1", &img("", "sha256:y")), "app@sha256:y");
        assert_eq!(update("app", &img("2", "sha256:y")), "app:2@sha256:y");
    }
}
