//! Chart sources: where a HelmRelease's chart comes from.
//!
//! - [`http`]: fetching a Helm repository's index and chart archives over HTTP(S), with the
//!   repository's auth, TLS, timeout and size limits.
//! - [`index`]: a Helm repository's `index.yaml` and chart version resolution (pure).
//! - [`url`]: the index's URL and chart URLs resolved against the repository URL, as Go's
//!   `net/url` resolves them (pure).

pub mod http;
pub mod index;
pub mod url;
