//! Rendering: Helm's engine and the install/template pipeline, in pure Rust.
//!
//! Where to start:
//! - [`template::template`] is `helm template NAME CHART [flags]` end to end: it returns
//!   the exact stdout Helm prints, or Helm's error text, plus the log lines Helm writes to
//!   stderr.
//! - [`template::render_release`] is the rendering half of an install or upgrade on a
//!   dependency-processed chart: release manifest, hooks and notes. A cluster-backed
//!   `lookup` plugs in through [`Lookup`].
//! - [`Engine::render`] renders every template of a chart tree
//!   (`pkg/engine/engine.go`): one template set in Helm's parse order, one scope per chart
//!   (`.Values`, `.Release`, `.Chart`, `.Capabilities`, `.Files`, `.Template`,
//!   `.Subcharts`), Sprig plus Helm's functions, Helm's error rewriting.
//! - [`manifest`] splits rendered files into documents, extracts hooks and sorts by kind.
//!
//! Behaviour follows Helm v4.1.4 (document splitting trims whitespace as v4.1 does).
//!
//! Not modelled: post-renderers, `--render-subchart-notes`, the `--debug` dump of invalid
//! YAML.

mod convert;
mod early;
mod engine;
mod errors;
mod funcs;
mod glob;
pub mod manifest;
mod objects;
pub mod template;
mod toml;

pub use early::{EarlyParse, early_parsed_taken, parse_templates_early};
pub use engine::{
    Engine, ReleaseOptions, RenderError, leave_allocations_to_exit, parallel_render_counts,
    render_on_two_threads,
};
pub(crate) use funcs::add_serialisation;
pub use funcs::{Lookup, MAX_INCLUDE_NESTING};
pub use objects::{Capabilities, DEFAULT_API_VERSIONS, HelmVersion, KubeVersion};
pub use template::{
    OutputFile, PostRenderHooks, ReleaseRenderError, RenderOptions, RenderedRelease, Stdout,
    TemplateError, TemplateOptions, TemplateOutput, WriteMode, make_rsa_keys_early, render_release,
    render_release_post_rendered, template,
};
