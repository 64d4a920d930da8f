//! Helm charts in pure Rust: loading (directories and `.tgz` archives), `.helmignore`,
//! `Chart.yaml` validation, dependency processing (conditions, tags, aliases,
//! import-values), values coalescing exactly as Helm, `--set` parsing (`pkg/strvals`),
//! `values.schema.json` validation and the Helm release record codec.
//!
//! Where to start:
//! - [`load::load`] turns a path into a [`Chart`] (Helm CLI errors; [`load_dir`] and
//!   [`load_archive`] keep the detailed loader errors).
//! - [`dependencies::check_dependencies`], then [`dependencies::process_dependencies`], then
//!   [`coalesce::coalesce_values`] compute the values a render sees;
//!   [`schema::validate_against_schema`] checks them. Warnings Helm logs are returned as
//!   [`Warning`]s whose `Display` is Helm's stderr line.
//! - [`strvals::ValueOptions`] assembles user values from `-f`/`--set*` inputs.
//! - [`release`] encodes and decodes `sh.helm.release.v1.*` records.
//! - [`values_template`] renders a HelmReleaseSet's `valuesTemplate` per cluster (strict,
//!   sandboxed, budgeted).
//! - [`postrender::post_render`] applies HelmRelease `postRenderers` (kustomize patches and
//!   images) to a rendered manifest.
//!
//! Values are `serde_json` values with Go's number rules: YAML/JSON numbers are f64, `--set`
//! integers i64. [`render`] is Helm's engine and `helm template` pipeline on top of
//! `flotilla-gotmpl` and `flotilla-sprig`. Nothing here does IO except reading the chart and
//! values files a caller names.

pub mod chart;
pub mod coalesce;
pub mod dependencies;
pub mod gofmt;
pub mod ignore;
pub mod load;
pub mod metadata;
pub mod package;
pub mod postrender;
pub mod release;
pub mod render;
pub mod schema;
pub mod semver;
pub mod strvals;
pub mod time;
pub mod values;
pub mod values_template;

pub use chart::{Chart, File};
pub use coalesce::{Warning, Warnings};
pub use load::{LoadError, load, load_archive, load_dir};
pub use metadata::{Dependency, Lock, Maintainer, Metadata};
pub use values::Values;

/// `String::from_utf8_lossy`, with the validation of text that is valid UTF-8 (nearly every
/// chart file) done by `str::from_utf8`, which checks ASCII a word at a time where the lossy
/// decoder goes byte by byte.
pub(crate) fn utf8_lossy(bytes: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(bytes) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(bytes),
    }
}
