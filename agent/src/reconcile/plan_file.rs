//! Plan files: a HelmRelease plus a local chart, for `flotilla-agent apply`.
//!
//! A plan file is one YAML (or JSON) document: a HelmRelease as Flux or Flotilla write it,
//! with one extra top-level key, `chart`, naming a chart on disk:
//!
//! ```yaml
//! apiVersion: helm.toolkit.fluxcd.io/v2     # or helm.flotilla.dev/v1
//! kind: HelmRelease
//! metadata:
//!   name: podinfo
//!   namespace: apps          # default: "default"
//!   generation: 1            # default: 1; bump it to say "the spec changed"
//! spec:
//!   interval: 5m             # required; the period of `apply --watch`
//!   values: {replicaCount: 2}
//!   install: {remediation: {retries: 3}}
//!   # ... any other HelmRelease v2 field
//! chart:
//!   path: ./charts/podinfo   # a chart directory or .tgz, relative to the plan file
//! ```
//!
//! - The chart comes from `chart.path`, so `spec.chart` and `spec.chartRef` are optional;
//!   when both are absent the plan records `chartRef: {kind: ExternalArtifact, name:
//!   <metadata.name>}` to satisfy the HelmRelease rules. They are not resolved.
//! - Values are `spec.values`. `spec.valuesFrom` needs a hub and is refused.
//! - Errors name the file and the field: `plan.yaml: chart.path: required`.

// Errors name their object for people; they are built on the failure path only, so their
// size does not matter.
#![allow(clippy::result_large_err)]

use std::path::{Path, PathBuf};

use flotilla_chart::Chart;
use flotilla_core::ids::{ChartDigest, PlanRevision};
use flotilla_core::plan::{ChartArtifact, PlanError, ReleasePlan};
use flotilla_core::spec::{HelmRelease, SpecError};
use serde_json::{Value, json};

use crate::kube::manifest::yaml_to_json;

/// The API versions a plan file may use.
pub const API_VERSIONS: [&str; 2] = ["helm.toolkit.fluxcd.io/v2", "helm.flotilla.dev/v1"];

/// Why a plan file was refused; each names the file (and the field).
#[derive(Debug, thiserror::Error)]
pub enum PlanFileError {
    /// The file could not be read.
    #[error("{path}: cannot read the plan file")]
    Read {
        /// The file.
        path: PathBuf,
        /// The IO error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not YAML.
    #[error("{path}: not a YAML document")]
    Yaml {
        /// The file.
        path: PathBuf,
        /// The parser's error.
        #[source]
        source: flotilla_yaml::Error,
    },
    /// A field is missing or wrong.
    #[error("{path}: {field}: {message}")]
    Field {
        /// The file.
        path: PathBuf,
        /// The field (`chart.path`, `apiVersion`, ...).
        field: String,
        /// What is wrong.
        message: String,
    },
    /// The HelmRelease part is invalid (the error names the fields).
    #[error("{path}: {source}")]
    Spec {
        /// The file.
        path: PathBuf,
        /// The validation error.
        #[source]
        source: SpecError,
    },
    /// The chart could not be loaded.
    #[error("{path}: chart.path: cannot load chart {chart}")]
    Chart {
        /// The file.
        path: PathBuf,
        /// The chart path, resolved.
        chart: PathBuf,
        /// The loader's error.
        #[source]
        source: flotilla_chart::LoadError,
    },
    /// The plan could not be built.
    #[error("{path}: {source}")]
    Plan {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: PlanError,
    },
}

/// A plan file, read: the HelmRelease, its plan and its chart.
#[derive(Debug, Clone)]
pub struct PlanFile {
    /// The HelmRelease as written (with the defaults above).
    pub helm_release: HelmRelease,
    /// The release plan.
    pub plan: ReleasePlan,
    /// The loaded chart.
    pub chart: Chart,
    /// The chart's archive, whose sha256 is `plan.chart.digest`.
    pub archive: Vec<u8>,
}

/// Reads and validates a plan file.
pub fn load(path: &Path) -> Result<PlanFile, PlanFileError> {
    let text = std::fs::read_to_string(path).map_err(|source| PlanFileError::Read {
        path: path.to_owned(),
        source,
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse(path, &text, base)
}

fn field(path: &Path, field: &str, message: impl Into<String>) -> PlanFileError {
    PlanFileError::Field {
        path: path.to_owned(),
        field: field.to_owned(),
        message: message.into(),
    }
}

/// Parses plan text; `base` is the directory `chart.path` is relative to.
pub fn parse(path: &Path, text: &str, base: &Path) -> Result<PlanFile, PlanFileError> {
    let yaml = flotilla_yaml::from_str(text).map_err(|source| PlanFileError::Yaml {
        path: path.to_owned(),
        source,
    })?;
    let mut doc = yaml_to_json(yaml).map_err(|m| field(path, ".", m))?;
    let Some(obj) = doc.as_object_mut() else {
        return Err(field(path, ".", "a plan file must be a mapping"));
    };
    match obj.get("apiVersion").and_then(Value::as_str) {
        Some(v) if API_VERSIONS.contains(&v) => {}
        Some(v) => {
            return Err(field(
                path,
                "apiVersion",
                format!("{v:?} is not one of {}", API_VERSIONS.join(", ")),
            ));
        }
        None => return Err(field(path, "apiVersion", "required")),
    }
    match obj.get("kind").and_then(Value::as_str) {
        Some("HelmRelease") => {}
        Some(k) => return Err(field(path, "kind", format!("{k:?} is not HelmRelease"))),
        None => return Err(field(path, "kind", "required")),
    }
    let chart_path = match obj.remove("chart") {
        None => return Err(field(path, "chart.path", "required")),
        Some(Value::Object(mut c)) => {
            let p = match c.remove("path") {
                Some(Value::String(p)) if !p.is_empty() => p,
                Some(Value::String(_)) | None => {
                    return Err(field(path, "chart.path", "required"));
                }
                Some(_) => return Err(field(path, "chart.path", "must be a string")),
            };
            if let Some(k) = c.keys().next() {
                return Err(field(path, &format!("chart.{k}"), "unknown field"));
            }
            p
        }
        Some(_) => return Err(field(path, "chart", "must be a mapping with a path")),
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or_else(|| field(path, "metadata", "must be a mapping"))?;
    meta.entry("namespace").or_insert_with(|| json!("default"));
    meta.entry("generation").or_insert_with(|| json!(1));
    let name = meta
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    let spec = obj
        .get_mut("spec")
        .ok_or_else(|| field(path, "spec", "required"))?
        .as_object_mut()
        .ok_or_else(|| field(path, "spec", "must be a mapping"))?;
    if spec.get("valuesFrom").is_some_and(|v| !v.is_null()) {
        return Err(field(
            path,
            "spec.valuesFrom",
            "not supported in plan files (put the values in spec.values)",
        ));
    }
    if !spec.contains_key("chart") && !spec.contains_key("chartRef") {
        spec.insert(
            "chartRef".into(),
            json!({"kind": "ExternalArtifact", "name": name}),
        );
    }
    let hr = HelmRelease::from_value(doc).map_err(|source| PlanFileError::Spec {
        path: path.to_owned(),
        source,
    })?;
    let chart_dir = base.join(&chart_path);
    let chart_error = |source| PlanFileError::Chart {
        path: path.to_owned(),
        chart: chart_dir.clone(),
        source,
    };
    let (chart, archive) = load_chart(&chart_dir).map_err(chart_error)?;
    let artifact = ChartArtifact {
        name: chart.metadata.name.clone(),
        version: chart.metadata.version.clone(),
        app_version: Some(chart.metadata.app_version.clone()).filter(|v| !v.is_empty()),
        digest: ChartDigest::of_bytes(&archive),
        oci_digest: None,
    };
    let values = hr.spec.values.clone().unwrap_or(Value::Null);
    let plan = ReleasePlan::from_helm_release(&hr, PlanRevision::FIRST, artifact, values).map_err(
        |source| PlanFileError::Plan {
            path: path.to_owned(),
            source,
        },
    )?;
    Ok(PlanFile {
        helm_release: hr,
        plan,
        chart,
        archive,
    })
}

/// Loads a chart directory or archive, with its archive: an archive file as it is, a
/// directory packaged as `helm package` lays it out (deterministically, so the same files
/// give the same digest) from the very files the chart was loaded from, so what the agent
/// caches by digest is what it renders.
fn load_chart(path: &Path) -> Result<(Chart, Vec<u8>), flotilla_chart::LoadError> {
    let mut read = None;
    let chart = flotilla_chart::load::load_observed(path, &mut |files, name| {
        read = Some((name.to_owned(), files.to_vec()));
    })?;
    let archive = match read {
        Some((name, files)) => flotilla_chart::package::archive(&name, &files),
        None => std::fs::read(path),
    }
    .map_err(|source| flotilla_chart::LoadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok((chart, archive))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart_dir() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let c = dir.path().join("demo");
        std::fs::create_dir_all(c.join("templates")).unwrap();
        std::fs::write(
            c.join("Chart.yaml"),
            "apiVersion: v2\nname: demo\nversion: 0.1.0\n",
        )
        .unwrap();
        std::fs::write(
            c.join("templates/cm.yaml"),
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n",
        )
        .unwrap();
        dir
    }

    fn parse_text(text: &str) -> Result<PlanFile, PlanFileError> {
        let dir = chart_dir();
        parse(Path::new("plan.yaml"), text, dir.path())
    }

    #[test]
    fn a_plan_file_becomes_a_plan_with_its_local_chart() {
        let plan = parse_text(
            "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata:\n  name: demo\nspec:\n  interval: 1m\n  values:\n    replicas: 2\nchart:\n  path: demo\n",
        )
        .unwrap();
        assert_eq!(plan.plan.release.qualified(), "default/demo");
        assert_eq!(plan.plan.chart.name, "demo");
        assert_eq!(plan.plan.generation, 1);
        assert_eq!(plan.plan.values["replicas"], json!(2));
    }

    #[test]
    fn bad_plan_files_name_the_field() {
        let cases = [
            (
                "kind: HelmRelease\nspec: {interval: 1m}\nchart: {path: demo}\n",
                "apiVersion: required",
            ),
            (
                "apiVersion: v1\nkind: HelmRelease\nspec: {interval: 1m}\nchart: {path: demo}\n",
                "apiVersion: \"v1\" is not one of",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: Pod\nspec: {interval: 1m}\nchart: {path: demo}\n",
                "kind: \"Pod\" is not HelmRelease",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: demo}\nspec: {interval: 1m}\n",
                "chart.path: required",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: demo}\nspec: {interval: 1m}\nchart: {path: demo, url: x}\n",
                "chart.url: unknown field",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: demo}\nspec: {interval: 1m, valuesFrom: [{kind: Secret, name: s}]}\nchart: {path: demo}\n",
                "spec.valuesFrom: not supported",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: demo}\nspec: {interval: 1m}\nchart: {path: missing}\n",
                "chart.path: cannot load chart",
            ),
            (
                "apiVersion: helm.flotilla.dev/v1\nkind: HelmRelease\nmetadata: {name: demo}\nspec: {interval: 1m, timeout: soon}\nchart: {path: demo}\n",
                "spec.timeout",
            ),
        ];
        for (text, want) in cases {
            let err = match parse_text(text) {
                Ok(_) => panic!("accepted: {text}"),
                Err(e) => e.to_string(),
            };
            assert!(err.starts_with("plan.yaml: "), "{err}");
            assert!(err.contains(want), "{err:?} should contain {want:?}");
        }
    }
}
