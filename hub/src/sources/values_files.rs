//! A HelmChart's `spec.valuesFiles`, applied to the chart archive as source-controller's chart
//! builder applies them (`remoteChartBuilder.Build`, `mergeChartValues`,
//! `OverwriteChartDefaultValues`): the artifact is a new chart package whose `values.yaml`
//! is the merge of the listed files, so the chart's defaults (and therefore every
//! HelmRelease's values composition, which starts from them) include them.
//!
//! The rules, as Flux has them:
//! - `valuesFiles` that is empty, or exactly `[values.yaml]`, changes nothing: the archive is
//!   the one the repository serves ([`effective`]).
//! - Otherwise the chart version gets the HelmChart's generation as build metadata
//!   (`6.5.2` → `6.5.2+3`, replacing any build metadata; printed canonically), so that a
//!   change of the list is a new revision for the HelmRelease. That version is the
//!   artifact's revision and the packaged `Chart.yaml`'s `version`.
//! - The files are merged in list order, later ones winning (maps merged key by key, other
//!   values replaced). `values.yaml` in the list stands for the chart's own default values;
//!   any other path (cleaned as Go's `filepath.Clean`) is looked up among the chart's other
//!   files (`.Files`: not templates, not subcharts). A missing file is an error unless
//!   `ignoreMissingValuesFiles`, which skips it.
//! - The merged values replace `values.yaml` (encoded as `sigs.k8s.io/yaml` marshals a map:
//!   keys sorted, comments gone; an empty merge gives an empty file). The files that
//!   contributed are reported only when this changed the file.
//! - A chart without `values.yaml` cannot take merged values.
//!
//! Errors read as Flux's `BuildError`s: `<summary>: <cause>` (see [`ValuesFilesError`]), with
//! the reason of [`ValuesFilesError::reason`].

use flotilla_chart::Chart;
use flotilla_chart::load::BufferedFile;
use flotilla_chart::semver::Version;
use flotilla_chart::values::{Values, merge_maps, parse_yaml_map};

/// The chart's default values file.
pub const VALUES_FILE: &str = "values.yaml";

/// Why a chart could not be packaged with its values files.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValuesFilesError {
    /// The chart version is not a semantic version (the generation cannot be appended).
    #[error(
        "chart metadata patch error: failed to parse version from chart metadata as SemVer: \
         Invalid Semantic Version"
    )]
    Version {
        /// The chart version.
        version: String,
    },
    /// A listed file is not in the chart (and missing files are not ignored).
    #[error(
        "values files merge error: failed to merge chart values: no values file found at \
         path '{path}'"
    )]
    Missing {
        /// The path as listed.
        path: String,
    },
    /// A listed file is not a YAML map.
    #[error(
        "values files merge error: failed to merge chart values: unmarshaling values from \
         '{path}' failed: {reason}"
    )]
    Parse {
        /// The path as listed.
        path: String,
        /// The parser's message.
        reason: String,
    },
    /// The chart has no `values.yaml` to replace.
    #[error("values files merge error: failed to locate values file: values.yaml")]
    NoValuesFile,
    /// The archive could not be read or written.
    #[error("chart package error: {0}")]
    Package(String),
}

impl ValuesFilesError {
    /// The condition reason (Flux's `BuildErrorReason`).
    pub fn reason(&self) -> &'static str {
        match self {
            ValuesFilesError::Version { .. } => "MetadataPatchError",
            ValuesFilesError::Missing { .. }
            | ValuesFilesError::Parse { .. }
            | ValuesFilesError::NoValuesFile => "ValuesFilesError",
            ValuesFilesError::Package(_) => "ChartPackageError",
        }
    }

    /// Whether only a change of the HelmChart (or of the chart) can fix it (Flux stalls).
    pub fn is_persistent(&self) -> bool {
        !matches!(self, ValuesFilesError::Package(_))
    }
}

/// A chart packaged with its values files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packaged {
    /// The new archive (gzipped tar, deterministic).
    pub archive: Vec<u8>,
    /// The files that made the new `values.yaml`, as listed; empty when the merge left
    /// `values.yaml` as it was.
    pub merged: Vec<String>,
}

/// The values files that make the chart be packaged (Flux's `BuildOptions.GetValuesFiles`):
/// none when the list is empty or only names `values.yaml`.
pub fn effective(values_files: &[String]) -> &[String] {
    match values_files {
        [only] if clean(only) == VALUES_FILE => &[],
        all => all,
    }
}

/// `version` with `generation` as its build metadata, printed canonically (Masterminds'
/// `SetMetadata` then `String`: no `v`, missing parts as `0`, old build metadata replaced).
pub fn version_with_generation(version: &str, generation: i64) -> Result<String, ValuesFilesError> {
    let v = Version::parse(version).map_err(|_| ValuesFilesError::Version {
        version: version.to_owned(),
    })?;
    let mut out = format!("{}.{}.{}", v.major(), v.minor(), v.patch());
    if !v.prerelease().is_empty() {
        out.push('-');
        out.push_str(v.prerelease());
    }
    out.push('+');
    out.push_str(&generation.to_string());
    Ok(out)
}

/// The merge of `paths` over `chart` (Flux's `mergeChartValues`): the values, and the paths
/// that contributed (missing ones skipped when `ignore_missing`).
pub fn merge(
    chart: &Chart,
    paths: &[String],
    ignore_missing: bool,
) -> Result<(Values, Vec<String>), ValuesFilesError> {
    let mut merged = Values::new();
    let mut used = Vec::with_capacity(paths.len());
    for path in paths {
        let name = clean(path);
        if name == VALUES_FILE {
            merged = merge_maps(merged, chart.values().clone());
            used.push(path.clone());
            continue;
        }
        let Some(file) = chart.files.iter().find(|f| f.name == name) else {
            if ignore_missing {
                continue;
            }
            return Err(ValuesFilesError::Missing { path: path.clone() });
        };
        let text = String::from_utf8_lossy(&file.data);
        let values = parse_yaml_map(&text).map_err(|e| ValuesFilesError::Parse {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        merged = merge_maps(merged, values);
        used.push(path.clone());
    }
    Ok((merged, used))
}

/// The chart of `archive` (loaded as `chart`) packaged with `values_files` merged into its
/// `values.yaml` and `version` (the resolved version with the HelmChart's generation,
/// [`version_with_generation`]) in its `Chart.yaml`; `None` when [`effective`] leaves
/// nothing to merge (the archive is used as it is).
pub fn package(
    archive: &[u8],
    chart: &Chart,
    values_files: &[String],
    ignore_missing: bool,
    version: &str,
) -> Result<Option<Packaged>, ValuesFilesError> {
    let paths = effective(values_files);
    if paths.is_empty() {
        return Ok(None);
    }
    let (values, used) = merge(chart, paths, ignore_missing)?;
    let encoded = if values.is_empty() {
        Vec::new()
    } else {
        let yaml = crate::sources::index::json_to_yaml(serde_json::Value::Object(values));
        flotilla_yaml::sigs::marshal_owned(yaml)
            .map_err(|e| ValuesFilesError::Package(format!("failed to encode values: {e}")))?
            .into_bytes()
    };
    let mut files = flotilla_chart::load::load_archive_files(archive)
        .map_err(|e| ValuesFilesError::Package(format!("failed to load downloaded chart: {e}")))?;
    let Some(values_file) = files.iter_mut().find(|f| f.name == VALUES_FILE) else {
        return Err(ValuesFilesError::NoValuesFile);
    };
    let merged = if values_file.data == encoded {
        Vec::new()
    } else {
        values_file.data = encoded;
        used
    };
    let chart_file = files
        .iter_mut()
        .find(|f| f.name == "Chart.yaml")
        .ok_or_else(|| ValuesFilesError::Package("the archive has no Chart.yaml".into()))?;
    chart_file.data = with_version(&chart_file.data, version)?;
    let files: Vec<flotilla_chart::File> = files.into_iter().map(BufferedFile::into).collect();
    let archive = flotilla_chart::package::archive(&chart.metadata.name, &files)
        .map_err(|e| ValuesFilesError::Package(format!("failed to package chart: {e}")))?;
    Ok(Some(Packaged { archive, merged }))
}

/// `Chart.yaml` with its `version` set.
fn with_version(chart_yaml: &[u8], version: &str) -> Result<Vec<u8>, ValuesFilesError> {
    let bad =
        |e: String| ValuesFilesError::Package(format!("failed to package chart: Chart.yaml: {e}"));
    let text = String::from_utf8_lossy(chart_yaml);
    let mut doc = flotilla_yaml::from_str(&text).map_err(|e| bad(e.to_string()))?;
    let flotilla_yaml::Value::Map(map) = &mut doc else {
        return Err(bad("not a map".into()));
    };
    map.insert(
        flotilla_yaml::Value::String("version".into()),
        flotilla_yaml::Value::String(version.to_owned()),
    );
    Ok(flotilla_yaml::sigs::marshal_owned(doc)
        .map_err(|e| bad(e.to_string()))?
        .into_bytes())
}

/// Go's `filepath.Clean` on a `/`-separated relative path.
fn clean(path: &str) -> String {
    let rooted = path.starts_with('/');
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if matches!(parts.last(), Some(p) if *p != "..") {
                    parts.pop();
                } else if !rooted {
                    parts.push("..");
                }
            }
            p => parts.push(p),
        }
    }
    let joined = parts.join("/");
    match (rooted, joined.is_empty()) {
        (true, _) => format!("/{joined}"),
        (false, true) => ".".to_owned(),
        (false, false) => joined,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, data: &str) -> flotilla_chart::File {
        flotilla_chart::File {
            name: name.to_owned(),
            data: data.as_bytes().into(),
            mod_time: None,
        }
    }

    /// A chart archive with `values.yaml` and two extra values files (one invalid).
    fn demo(values: Option<&str>) -> (Vec<u8>, Chart) {
        let mut files = vec![
            file(
                "Chart.yaml",
                "apiVersion: v2\nname: demo\nversion: v1.2.3+old\n# a comment\ndescription: d\n",
            ),
            file("templates/cm.yaml", "kind: ConfigMap\n"),
            file(
                "values-prod.yaml",
                "replicas: 3\nimage:\n  tag: prod\nlist: [a]\n",
            ),
            file(
                "ci/values-ha.yaml",
                "image:\n  pullPolicy: Always\nlist: [b]\n",
            ),
            file("bad.yaml", "- not\n- a map\n"),
        ];
        if let Some(v) = values {
            files.push(file("values.yaml", v));
        }
        let archive = flotilla_chart::package::archive("demo", &files).expect("archived");
        let chart = flotilla_chart::load_archive(&archive).expect("loads");
        (archive, chart)
    }

    fn strings(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    const VALUES: &str = "# defaults\nreplicas: 1\nimage:\n  repository: demo\n  tag: latest\n";

    #[test]
    fn no_files_or_only_values_yaml_leave_the_archive_as_it_is() {
        let (archive, chart) = demo(Some(VALUES));
        for list in [
            vec![],
            strings(&["values.yaml"]),
            strings(&["./values.yaml"]),
        ] {
            assert_eq!(
                package(&archive, &chart, &list, false, "1.2.3+4"),
                Ok(None),
                "{list:?}"
            );
        }
        assert_eq!(
            effective(&strings(&["values.yaml", "values.yaml"])).len(),
            2,
            "two entries are a list to merge"
        );
    }

    #[test]
    fn files_merge_in_list_order_over_the_defaults_and_replace_values_yaml() {
        let (archive, chart) = demo(Some(VALUES));
        let list = strings(&["values.yaml", "values-prod.yaml", "./ci/values-ha.yaml"]);
        let packaged = package(&archive, &chart, &list, false, "1.2.3+7")
            .expect("packaged")
            .expect("values files given");
        assert_eq!(packaged.merged, list);
        let repacked = flotilla_chart::load_archive(&packaged.archive).expect("loads");
        assert_eq!(repacked.metadata.version, "1.2.3+7");
        assert_eq!(repacked.metadata.name, "demo");
        assert_eq!(repacked.metadata.description, "d");
        assert_eq!(
            serde_json::Value::Object(repacked.values().clone()),
            serde_json::json!({
                "replicas": 3.0,
                "image": {"repository": "demo", "tag": "prod", "pullPolicy": "Always"},
                "list": ["b"],
            })
        );
        let raw = repacked
            .raw
            .iter()
            .find(|f| f.name == "values.yaml")
            .expect("values.yaml");
        assert_eq!(
            std::str::from_utf8(&raw.data).expect("utf-8"),
            "image:\n  pullPolicy: Always\n  repository: demo\n  tag: prod\nlist:\n- b\nreplicas: 3\n",
            "sorted keys, no comments: as sigs.k8s.io/yaml writes a map"
        );
        assert_eq!(repacked.templates, chart.templates, "templates untouched");
        // The same inputs give the same bytes: the digest is stable across reconciles.
        let again = package(&archive, &chart, &list, false, "1.2.3+7").expect("packaged");
        assert_eq!(again.map(|p| p.archive), Some(packaged.archive));
    }

    #[test]
    fn without_values_yaml_in_the_list_the_defaults_are_replaced_not_merged() {
        let (archive, chart) = demo(Some(VALUES));
        let packaged = package(
            &archive,
            &chart,
            &strings(&["values-prod.yaml"]),
            false,
            "1.2.3+1",
        )
        .expect("packaged")
        .expect("values files given");
        let repacked = flotilla_chart::load_archive(&packaged.archive).expect("loads");
        assert_eq!(
            serde_json::Value::Object(repacked.values().clone()),
            serde_json::json!({"replicas": 3.0, "image": {"tag": "prod"}, "list": ["a"]})
        );
    }

    #[test]
    fn a_missing_file_is_an_error_unless_ignored_and_then_it_is_not_reported() {
        let (archive, chart) = demo(Some(VALUES));
        let list = strings(&["values-prod.yaml", "values-missing.yaml"]);
        let err = package(&archive, &chart, &list, false, "1.2.3+1").expect_err("missing");
        assert_eq!(
            err.to_string(),
            "values files merge error: failed to merge chart values: no values file found at \
             path 'values-missing.yaml'"
        );
        assert_eq!(err.reason(), "ValuesFilesError");
        assert!(err.is_persistent());
        let packaged = package(&archive, &chart, &list, true, "1.2.3+1")
            .expect("missing ignored")
            .expect("values files given");
        assert_eq!(packaged.merged, strings(&["values-prod.yaml"]));
        // A file under templates/ is a template, not one of the chart's files.
        let err = package(
            &archive,
            &chart,
            &strings(&["templates/cm.yaml"]),
            false,
            "1.2.3+1",
        )
        .expect_err("templates are not values files");
        assert!(matches!(err, ValuesFilesError::Missing { .. }), "{err}");
    }

    #[test]
    fn every_file_missing_and_ignored_empties_values_yaml_as_flux_does() {
        let (archive, chart) = demo(Some(VALUES));
        let packaged = package(&archive, &chart, &strings(&["nope.yaml"]), true, "1.2.3+2")
            .expect("packaged")
            .expect("values files given");
        assert!(packaged.merged.is_empty());
        let repacked = flotilla_chart::load_archive(&packaged.archive).expect("loads");
        assert!(repacked.values().is_empty());
        assert_eq!(repacked.metadata.version, "1.2.3+2");
    }

    #[test]
    fn unchanged_values_are_not_reported_as_merged_but_the_version_still_changes() {
        let encoded = "image:\n  repository: demo\n  tag: latest\nreplicas: 1\n";
        let (archive, chart) = demo(Some(encoded));
        let packaged = package(
            &archive,
            &chart,
            &strings(&["values.yaml", "nope.yaml"]),
            true,
            "1.2.3+5",
        )
        .expect("packaged")
        .expect("values files given");
        assert!(packaged.merged.is_empty(), "{:?}", packaged.merged);
        let repacked = flotilla_chart::load_archive(&packaged.archive).expect("loads");
        assert_eq!(repacked.metadata.version, "1.2.3+5");
    }

    #[test]
    fn a_file_that_is_not_a_map_is_refused_naming_it() {
        let (archive, chart) = demo(Some(VALUES));
        let err = package(&archive, &chart, &strings(&["bad.yaml"]), false, "1.2.3+1")
            .expect_err("a list");
        assert!(
            err.to_string().starts_with(
                "values files merge error: failed to merge chart values: unmarshaling values \
                 from 'bad.yaml' failed: "
            ),
            "{err}"
        );
        assert_eq!(err.reason(), "ValuesFilesError");
    }

    #[test]
    fn a_chart_without_values_yaml_cannot_take_values_files() {
        let (archive, chart) = demo(None);
        let err = package(
            &archive,
            &chart,
            &strings(&["values-prod.yaml"]),
            false,
            "1.2.3+1",
        )
        .expect_err("no values.yaml");
        assert_eq!(
            err.to_string(),
            "values files merge error: failed to locate values file: values.yaml"
        );
    }

    #[test]
    fn the_generation_replaces_build_metadata_and_a_non_semver_version_is_refused() {
        assert_eq!(
            version_with_generation("6.5.2", 3).as_deref(),
            Ok("6.5.2+3")
        );
        assert_eq!(
            version_with_generation("v1.2-rc.1+abc", 12).as_deref(),
            Ok("1.2.0-rc.1+12")
        );
        let err = version_with_generation("latest", 1).expect_err("not semver");
        assert_eq!(err.reason(), "MetadataPatchError");
        assert_eq!(
            err.to_string(),
            "chart metadata patch error: failed to parse version from chart metadata as SemVer: \
             Invalid Semantic Version"
        );
    }

    #[test]
    fn paths_are_cleaned_as_go_does() {
        assert_eq!(clean("./values.yaml"), "values.yaml");
        assert_eq!(clean("ci//a/../values.yaml"), "ci/values.yaml");
        assert_eq!(clean("../x"), "../x");
        assert_eq!(clean(""), ".");
    }
}
