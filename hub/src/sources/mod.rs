//! Chart sources: where a HelmRelease's chart comes from.
//!
//! - [`index`]: a Helm repository's `index.yaml` and chart version resolution (pure).
//! - [`url`]: the index's URL and chart URLs resolved against the repository URL, as Go's
//!   `net/url` resolves them (pure).

pub mod index;
pub mod url;
