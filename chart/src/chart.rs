//! The loaded chart: Helm's `chart.Chart` (v2).

use std::sync::Arc;

use crate::metadata::{Lock, Metadata};
use crate::time::GoTime;
use crate::values::Values;

/// A file of a chart (template, CRD, `.Files` entry, raw file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct File {
    /// Path relative to the chart root, `/`-separated.
    pub name: String,
    /// Contents (a leading UTF-8 BOM removed). Shared: a chart's `raw` list, its
    /// `templates`/`files` and the `.Files` object of a render all point at one copy.
    pub data: Arc<[u8]>,
    /// Modification time, when known.
    pub mod_time: Option<GoTime>,
}

/// A chart with its subcharts.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// `Chart.yaml` (plus `requirements.yaml` for apiVersion v1).
    pub metadata: Metadata,
    /// `Chart.lock` / `requirements.lock`.
    pub lock: Option<Lock>,
    /// Everything under `templates/`, in load order.
    pub templates: Vec<File>,
    /// `values.yaml` (`None` when the chart has none).
    pub values: Option<Values>,
    /// `values.schema.json`, raw.
    pub schema: Option<Vec<u8>>,
    /// Modification time of the schema file.
    pub schema_mod_time: Option<GoTime>,
    /// Other files (`.Files`): everything that is not Chart.yaml, values, schema, templates,
    /// locks or subcharts (plus `charts/*.prov` and, for apiVersion v1, the requirements files).
    pub files: Vec<File>,
    /// Every file as loaded, including Chart.yaml.
    pub raw: Vec<File>,
    /// Modification time of Chart.yaml.
    pub mod_time: Option<GoTime>,
    /// Subcharts (from `charts/`), in the order they were loaded (sorted by directory or
    /// archive name) and, after dependency processing, in Helm's processed order.
    pub dependencies: Vec<Chart>,
}

static EMPTY: std::sync::LazyLock<Values> = std::sync::LazyLock::new(Values::new);

impl Chart {
    /// A chart with only metadata.
    pub fn new(metadata: Metadata) -> Self {
        Chart {
            metadata,
            lock: None,
            templates: Vec::new(),
            values: None,
            schema: None,
            schema_mod_time: None,
            files: Vec::new(),
            raw: Vec::new(),
            mod_time: None,
            dependencies: Vec::new(),
        }
    }

    /// The chart's name (an alias once dependencies are processed).
    pub fn name(&self) -> &str {
        &self.metadata.name
    }

    /// The default values (empty when the chart has no values.yaml).
    pub fn values(&self) -> &Values {
        self.values.as_ref().unwrap_or(&EMPTY)
    }

    /// Whether this is a library chart (`type: library`: its templates are available to
    /// others but not rendered).
    pub fn is_library(&self) -> bool {
        self.metadata.is_library()
    }

    /// Files under `crds/` with a `.yaml`, `.yml` or `.json` extension (any case), as
    /// `Chart.CRDObjects` selects them for this chart (not its subcharts).
    pub fn crd_files(&self) -> impl Iterator<Item = &File> {
        self.files.iter().filter(|f| {
            f.name.starts_with("crds/") && {
                let lower = f.name.to_ascii_lowercase();
                lower.ends_with(".yaml") || lower.ends_with(".yml") || lower.ends_with(".json")
            }
        })
    }

    /// Visits this chart and every subchart, depth first, with the chart path
    /// (`root/charts/sub`-style names joined by `/charts/` are not needed here: the path is
    /// the list of names from the root).
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&[&'a str], &'a Chart)) {
        fn rec<'a>(
            c: &'a Chart,
            path: &mut Vec<&'a str>,
            f: &mut dyn FnMut(&[&'a str], &'a Chart),
        ) {
            path.push(c.name());
            f(path, c);
            for d in &c.dependencies {
                rec(d, path, f);
            }
            path.pop();
        }
        rec(self, &mut Vec::new(), f);
    }
}
