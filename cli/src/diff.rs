//! `flotilla diff hr NAME [-n NS] [-f changed.yaml] [-o json]`: what the next reconcile of
//! a HelmRelease would do on its cluster, as `helm diff upgrade` shows it.
//!
//! The command creates a `HelmReleasePreview` (from the live HelmRelease's spec, or the spec
//! of the HelmRelease in the file, which must have the same name), waits for the hub's
//! answer (`--timeout`), prints it and deletes the preview. Exit code 0 when nothing would
//! change, 2 when something would, 1 on an error (a sentence on stderr), like `diff`.
//! `-o json` prints the `ReleaseDiff` as the preview's status holds it.

use std::io::Write;
use std::time::Duration;

use clap::{Args, Subcommand};
use flotilla_api::preview::{HelmReleasePreview, HelmReleasePreviewSpec};
use flotilla_core::diff::Change;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::preview::ReleaseDiff;
use kube::Client;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::Value;

use crate::fleet::{Failed, KubeArgs, parse_duration};

/// `flotilla diff ...`
#[derive(Debug, Subcommand)]
pub enum DiffKind {
    /// What the next reconcile of a HelmRelease would do on its cluster.
    #[command(name = "helmrelease", visible_alias = "hr")]
    HelmRelease(DiffArgs),
}

/// `flotilla diff hr` arguments.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The HelmRelease's name.
    pub name: String,
    /// Its namespace.
    #[arg(short = 'n', long, default_value = "default")]
    pub namespace: String,
    /// A file holding the HelmRelease as it would be changed (YAML or JSON): its spec is
    /// previewed instead of the live one's.
    #[arg(short = 'f', long = "file")]
    pub file: Option<std::path::PathBuf>,
    /// `json` prints the diff as JSON.
    #[arg(short = 'o', long = "output")]
    pub output: Option<String>,
    /// How long to wait for the answer.
    #[arg(long, default_value = "90s", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// Bytes of a `-f` file read at most.
const MAX_FILE: u64 = 4 << 20;

/// Runs `flotilla diff`; returns the exit code (0 no change, 2 changes, 1 error).
pub fn run(cmd: DiffKind, kube: &KubeArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let DiffKind::HelmRelease(args) = cmd;
    if args.output.as_deref().is_some_and(|o| o != "json") {
        let _ = writeln!(err, "✗ --output: only json is supported.");
        return 1;
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            let _ = writeln!(err, "✗ cannot start: {e}");
            return 1;
        }
    };
    let result = runtime.block_on(async {
        let client = crate::fleet::client(kube).await?;
        diff(client, &args).await
    });
    match result {
        Ok(d) => {
            let printed = if args.output.is_some() {
                serde_json::to_string_pretty(&d)
                    .map_err(|e| e.to_string())
                    .and_then(|j| writeln!(out, "{j}").map_err(|e| e.to_string()))
            } else {
                out.write_all(render(&d).as_bytes())
                    .map_err(|e| e.to_string())
            };
            if let Err(e) = printed.and_then(|()| out.flush().map_err(|e| e.to_string())) {
                let _ = writeln!(err, "✗ writing the diff: {e}");
                return 1;
            }
            if d.has_changes() { 2 } else { 0 }
        }
        Err(Failed(message)) => {
            let _ = out.flush();
            let _ = writeln!(err, "✗ {message}");
            1
        }
    }
}

/// The spec of the HelmRelease in `file`, which must be named `name`.
fn spec_from_file(path: &std::path::Path, name: &str) -> Result<Value, Failed> {
    let shown = path.display();
    let meta = std::fs::metadata(path).map_err(|e| Failed(format!("{shown}: {e}.")))?;
    if meta.len() > MAX_FILE {
        return Err(Failed(format!(
            "{shown}: larger than {} MiB.",
            MAX_FILE >> 20
        )));
    }
    let text = std::fs::read_to_string(path).map_err(|e| Failed(format!("{shown}: {e}.")))?;
    let yaml = flotilla_yaml::from_str(&text)
        .map_err(|e| Failed(format!("{shown}: not a YAML document: {e}.")))?;
    let doc = json_of(yaml).map_err(|e| Failed(format!("{shown}: {e}.")))?;
    if doc.get("kind").and_then(Value::as_str) != Some("HelmRelease") {
        return Err(Failed(format!("{shown}: kind: must be HelmRelease.")));
    }
    let named = doc
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if named != name {
        return Err(Failed(format!(
            "{shown}: metadata.name: is \"{named}\", not the HelmRelease \"{name}\" being previewed."
        )));
    }
    match doc.get("spec") {
        Some(spec @ Value::Object(_)) => Ok(spec.clone()),
        _ => Err(Failed(format!("{shown}: spec: required."))),
    }
}

/// A YAML value as JSON (keys as strings, floats that JSON cannot hold refused).
fn json_of(v: flotilla_yaml::Value) -> Result<Value, String> {
    use flotilla_yaml::Value as Y;
    Ok(match v {
        Y::Null => Value::Null,
        Y::Bool(b) => Value::Bool(b),
        Y::Int(i) => Value::from(i),
        Y::Uint(u) => Value::from(u),
        Y::Float(f) => serde_json::Number::from_f64(f)
            .map(Value::Number)
            .ok_or_else(|| format!("{f} is not a JSON number"))?,
        Y::String(s) => Value::String(s),
        Y::Seq(items) => Value::Array(items.into_iter().map(json_of).collect::<Result<_, _>>()?),
        Y::Map(m) => {
            let mut out = serde_json::Map::new();
            for (k, v) in m {
                let key = match k {
                    Y::String(s) => s,
                    other => flotilla_yaml::to_string(&other)
                        .map(|s| s.trim_end().to_owned())
                        .map_err(|e| e.to_string())?,
                };
                out.insert(key, json_of(v)?);
            }
            Value::Object(out)
        }
        Y::Bytes(b) => Value::String(String::from_utf8_lossy(&b).into_owned()),
    })
}

async fn diff(client: Client, args: &DiffArgs) -> Result<ReleaseDiff, Failed> {
    let spec = args
        .file
        .as_deref()
        .map(|f| spec_from_file(f, &args.name))
        .transpose()?;
    let api: Api<HelmReleasePreview> = Api::namespaced(client, &args.namespace);
    let mut preview = HelmReleasePreview::new(
        "",
        HelmReleasePreviewSpec {
            helm_release_name: args.name.clone(),
            spec,
        },
    );
    preview.metadata.name = None;
    preview.metadata.generate_name = Some(format!("{}-", truncate(&args.name, 40)));
    let created = api
        .create(&PostParams::default(), &preview)
        .await
        .map_err(|e| {
            Failed(format!(
                "creating a HelmReleasePreview in {}: {e}.",
                args.namespace
            ))
        })?;
    let name = created.metadata.name.clone().unwrap_or_default();
    let answer = wait(&api, &name, args).await;
    // The hub deletes it after 10 minutes anyway.
    let _ = api.delete(&name, &DeleteParams::default()).await;
    answer
}

fn truncate(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

async fn wait(
    api: &Api<HelmReleasePreview>,
    name: &str,
    args: &DiffArgs,
) -> Result<ReleaseDiff, Failed> {
    let deadline = tokio::time::Instant::now() + args.timeout;
    loop {
        let p = api
            .get(name)
            .await
            .map_err(|e| Failed(format!("reading HelmReleasePreview {name}: {e}.")))?;
        let status = p.status.unwrap_or_default();
        if let Some(ready) = status.conditions.get_condition(condition::READY) {
            if ready.status == ConditionStatus::True
                && let Some(diff) = status.diff
            {
                return Ok(diff);
            }
            return Err(Failed(format!(
                "the preview of HelmRelease {}/{} failed: {}",
                args.namespace, args.name, ready.message
            )));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(Failed(format!(
                "the hub did not answer the preview of HelmRelease {}/{} within {}s (is the hub running?).",
                args.namespace,
                args.name,
                args.timeout.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The diff as text: per changed object `~ Kind/ns/name` (`+` create, `-` delete) with its
/// unified diff, then the value paths, the chart change, hooks and tests, and a summary.
pub fn render(d: &ReleaseDiff) -> String {
    let mut s = String::new();
    for o in &d.objects {
        let mark = match o.change {
            Change::Create => '+',
            Change::Update => '~',
            Change::Delete => '-',
            Change::Unchanged => continue,
        };
        s.push_str(&format!("{mark} {}\n", o.object));
        s.push_str(&o.diff);
        if !o.diff.is_empty() && !o.diff.ends_with('\n') {
            s.push('\n');
        }
    }
    if !d.values.is_empty() {
        s.push_str("values:\n");
        for v in &d.values {
            let what = match v.change {
                flotilla_core::diff::PathChange::Added => "added",
                flotilla_core::diff::PathChange::Removed => "removed",
                flotilla_core::diff::PathChange::Changed => "changed",
            };
            s.push_str(&format!("  {} {what}\n", v.path));
        }
    }
    if d.chart.changed() {
        match &d.chart.from {
            Some(from) => s.push_str(&format!("chart: {from} → {}\n", d.chart.to)),
            None => s.push_str(&format!("chart: {} (not installed)\n", d.chart.to)),
        }
    }
    for (what, list) in [("hook", &d.hooks), ("test", &d.tests)] {
        for h in list {
            s.push_str(&format!("{what} {} ({})\n", h.object, h.events.join(", ")));
        }
    }
    if d.truncated {
        s.push_str(&format!(
            "(the diff was cut to fit; digest of the whole: {})\n",
            d.digest
        ));
    }
    let (c, u, del, _) = d.counts();
    if d.has_changes() {
        s.push_str(&format!(
            "{c} to create, {u} to update, {del} to delete, {} value paths changed\n",
            d.values.len()
        ));
    } else {
        s.push_str("no change\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use flotilla_core::diff::{ObjectDiff, ObjectRef, PathChange};
    use flotilla_core::preview::{ChartChange, ChartVersion, ValueChange};

    use super::*;

    #[test]
    fn the_text_names_each_changed_object_with_its_diff() {
        let d = ReleaseDiff::bounded(
            vec![
                ObjectDiff {
                    object: ObjectRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        namespace: Some("apps".into()),
                        name: "web".into(),
                    },
                    change: Change::Update,
                    diff: "--- live\n+++ desired\n@@ -1 +1 @@\n-a\n+b\n".into(),
                },
                ObjectDiff {
                    object: ObjectRef {
                        api_version: "v1".into(),
                        kind: "ConfigMap".into(),
                        namespace: Some("apps".into()),
                        name: "same".into(),
                    },
                    change: Change::Unchanged,
                    diff: String::new(),
                },
            ],
            vec![],
            vec![],
            vec![ValueChange {
                path: "image.tag".into(),
                change: PathChange::Changed,
            }],
            ChartChange {
                from: Some(ChartVersion {
                    name: "web".into(),
                    version: "1.0.0".into(),
                }),
                to: ChartVersion {
                    name: "web".into(),
                    version: "1.1.0".into(),
                },
            },
        );
        let text = render(&d);
        assert_eq!(
            text,
            "~ Deployment/apps/web\n--- live\n+++ desired\n@@ -1 +1 @@\n-a\n+b\nvalues:\n  image.tag changed\nchart: web@1.0.0 → web@1.1.0\n0 to create, 1 to update, 0 to delete, 1 value paths changed\n"
        );
        let quiet = ReleaseDiff {
            chart: ChartChange {
                from: Some(d.chart.to.clone()),
                to: d.chart.to.clone(),
            },
            ..ReleaseDiff::default()
        };
        assert_eq!(render(&quiet), "no change\n");
    }

    #[test]
    fn a_file_must_hold_the_helm_release_being_previewed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hr.yaml");
        std::fs::write(
            &path,
            "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata:\n  name: web\nspec:\n  interval: 5m\n  values:\n    a: 1.5\n",
        )
        .unwrap();
        let spec = spec_from_file(&path, "web").unwrap();
        assert_eq!(spec["values"]["a"], 1.5);
        let other = spec_from_file(&path, "db").unwrap_err().0;
        assert!(other.contains("metadata.name: is \"web\""), "{other}");
        std::fs::write(&path, "kind: ConfigMap\n").unwrap();
        assert!(
            spec_from_file(&path, "web")
                .unwrap_err()
                .0
                .ends_with("kind: must be HelmRelease.")
        );
    }
}
