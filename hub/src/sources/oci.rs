//! Helm charts in OCI registries, over the OCI distribution API, as Flux's source-controller
//! reads them for an `OCIRepository` and for a `HelmChart` of a `HelmRepository` with
//! `type: oci` (Helm's registry client underneath).
//!
//! Where to start: [`OciUrl::parse`] reads `oci://host[:port]/path`; [`OciClient::new`] makes
//! a client for that repository with its auth and TLS; then [`OciClient::pull_chart`] with a
//! [`Reference`] (a tag or a digest) returns the manifest digest and the chart archive, both
//! verified. Versions are picked from the tags by [`select_semver_tag`] (an `OCIRepository`'s
//! `ref.semver`) and [`select_chart_version`] (a HelmChart's `version`); [`OciClient::list_tags`]
//! lists them. [`chart_version_with_digest`] is helm-controller's rule that appends the
//! manifest digest to the chart version of a chart from an `OCIRepository`.
//!
//! Protocol:
//! - Tags: `GET /v2/<name>/tags/list?n=1000`, following the `Link: <...>; rel="next"` header.
//! - Manifests: `GET /v2/<name>/manifests/<tag|digest>` accepting the OCI image manifest. The
//!   manifest digest is the SHA-256 of the bytes received; it must equal the digest asked for
//!   and the `Docker-Content-Digest` header when there is one. An image index or another
//!   manifest type is refused. A Helm chart has the config media type
//!   [`HELM_CONFIG_MEDIA_TYPE`] and a layer of type [`HELM_CHART_LAYER_MEDIA_TYPE`] (or Helm's
//!   legacy `application/tar+gzip`).
//! - Blobs: `GET /v2/<name>/blobs/<digest>` (redirects followed; the `Authorization` header is
//!   dropped when a redirect leaves the host), refused when the descriptor's size is above the
//!   limit, and checked against the descriptor's size and digest.
//! - Auth: anonymous first; on `401` the `WWW-Authenticate` challenge is answered once:
//!   `Basic` with the credentials, `Bearer realm=..,service=..,scope=..` with a token from the
//!   realm (`GET realm?service=..&scope=..`, basic auth when there are credentials; the
//!   `token` or `access_token` of the answer). The answer is kept for the client's next
//!   requests. Credentials come from the object's Secret: `username`/`password`, or a
//!   `kubernetes.io/dockerconfigjson` entry for the registry host ([`registry_credentials`]).
//! - Transport: HTTPS with the system roots plus the Secret's CA, and its client certificate
//!   (the TLS configuration of [`super::http`]). With `insecure`, HTTPS is tried first (the
//!   `/v2/` ping of go-containerregistry) and plain HTTP used when it fails, as Flux does with
//!   `name.Insecure`; the caller also skips certificate verification when no CA or client
//!   certificate is given (Flux's OCIRepository rule).
//!
//! Helm's tag rule: a `+` in a chart version is stored as `_` in the tag (`+` is not allowed
//! in tags, `_` is not allowed in semver, so the mapping is a bijection).
//!
//! Not done: Docker Hub's `library/` name expansion, cloud provider auth (`provider`),
//! signature verification, proxies; go-containerregistry's plain-HTTP fallback for
//! loopback and RFC 1918 hosts without `insecure` (here `insecure` is needed).
//!
//! Errors name the URL (no URL here can carry user info: it is refused in [`OciUrl::parse`]);
//! no error or log carries a password or token.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use flotilla_chart::semver::{Constraints, Version};
use flotilla_core::ids::ChartDigest;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, LINK, WWW_AUTHENTICATE};
use serde::Deserialize;

use super::http::{self, RepositoryAuth};
use super::index;

/// The OCI image manifest, the only manifest type Helm pushes.
pub const MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The OCI image index (refused: a chart is one manifest).
pub const INDEX_MEDIA_TYPE: &str = "application/vnd.oci.image.index.v1+json";
/// The config media type of a Helm chart.
pub const HELM_CONFIG_MEDIA_TYPE: &str = "application/vnd.cncf.helm.config.v1+json";
/// The media type of a Helm chart's archive layer.
pub const HELM_CHART_LAYER_MEDIA_TYPE: &str = "application/vnd.cncf.helm.chart.content.v1.tar+gzip";
/// The chart layer media type of Helm before 3.8, still accepted by Helm.
pub const HELM_LEGACY_CHART_LAYER_MEDIA_TYPE: &str = "application/tar+gzip";
/// The tag pulled when an `OCIRepository` has no `ref`.
pub const DEFAULT_TAG: &str = "latest";
/// The largest manifest accepted (containerd's limit).
pub const MAX_MANIFEST_SIZE: u64 = 4 << 20;
/// The largest page of a tag list accepted.
pub const MAX_TAGS_PAGE_SIZE: u64 = 4 << 20;
/// The most tag list pages followed.
const MAX_TAG_PAGES: usize = 1000;
/// The largest tag list accepted, all pages together (pages of up to 4 MiB could
/// otherwise add up to 4 GiB).
pub const MAX_TAGS_SIZE: u64 = 64 << 20;
/// Tags asked for per page of the tag list.
pub const TAGS_PER_PAGE: u32 = 1000;
/// The most bytes of an error answer read for its message.
const MAX_ERROR_BODY: u64 = 64 << 10;
/// The largest token answer accepted.
const MAX_TOKEN_SIZE: u64 = 1 << 20;

/// The size limits of an [`OciClient`], in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OciLimits {
    /// The largest manifest.
    pub max_manifest_size: u64,
    /// The largest chart layer (source-controller's `--helm-chart-max-size`, 10 MiB).
    pub max_chart_size: u64,
    /// The largest page of a tag list.
    pub max_tags_page_size: u64,
    /// The tags asked for per page (`n`); the registry may send fewer.
    pub tags_per_page: u32,
    /// The largest tag list, all pages together.
    pub max_tags_size: u64,
}

impl Default for OciLimits {
    fn default() -> OciLimits {
        OciLimits {
            max_manifest_size: MAX_MANIFEST_SIZE,
            max_chart_size: http::MAX_CHART_SIZE,
            max_tags_page_size: MAX_TAGS_PAGE_SIZE,
            tags_per_page: TAGS_PER_PAGE,
            max_tags_size: MAX_TAGS_SIZE,
        }
    }
}

/// Why an OCI operation failed. URLs are the registry's HTTP(S) URLs or `oci://` URLs,
/// neither with user info.
#[derive(Debug, thiserror::Error)]
pub enum OciError {
    /// The `oci://` URL is not `oci://host[:port]/path` with a valid repository path.
    #[error("invalid OCI URL {url}: {reason}")]
    InvalidUrl {
        /// The URL (without user info).
        url: String,
        /// Why.
        reason: String,
    },
    /// The CA, client certificate or key cannot be used.
    #[error("invalid TLS configuration: {what}: {reason}")]
    InvalidTlsConfig {
        /// Which part.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The registry Secret cannot be read.
    #[error("invalid registry credentials: {reason}")]
    InvalidCredentials {
        /// Why (never the credentials).
        reason: String,
    },
    /// The registry refused the request for lack of (valid) credentials: 401 or 403.
    #[error(
        "failed to fetch {url}: {status}: {}{}",
        if *.credentials_given { "the registry refused the credentials given" } else { "the registry requires credentials and none were given" },
        detail_suffix(.detail)
    )]
    Unauthorized {
        /// The URL requested (a registry URL or the token realm).
        url: String,
        /// The status with its reason phrase.
        status: String,
        /// Whether credentials were configured.
        credentials_given: bool,
        /// The registry's error codes and messages.
        detail: String,
    },
    /// The registry answered with another non-2xx status.
    #[error("failed to fetch {url}: {status}{}", detail_suffix(.detail))]
    Status {
        /// The URL requested.
        url: String,
        /// The status with its reason phrase (`404 Not Found`).
        status: String,
        /// The numeric status.
        code: u16,
        /// The registry's error codes and messages (`MANIFEST_UNKNOWN: manifest unknown`).
        detail: String,
    },
    /// The TLS handshake failed.
    #[error("failed to fetch {url}: TLS handshake failed: {reason}")]
    Tls {
        /// The URL requested.
        url: String,
        /// rustls's reason.
        reason: String,
    },
    /// The request did not complete within the timeout.
    #[error("failed to fetch {url}: timed out after {timeout:?}")]
    Timeout {
        /// The URL requested.
        url: String,
        /// The timeout.
        timeout: Duration,
    },
    /// The connection could not be made.
    #[error("failed to fetch {url}: cannot connect: {reason}")]
    Connect {
        /// The URL requested.
        url: String,
        /// Why.
        reason: String,
    },
    /// The request or the response body failed otherwise.
    #[error("failed to fetch {url}: {reason}")]
    Transfer {
        /// The URL requested.
        url: String,
        /// Why.
        reason: String,
    },
    /// The answer is larger than the limit.
    #[error("failed to fetch {url}: the {what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL requested.
        url: String,
        /// `manifest`, `chart layer`, `tag list`.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// Content whose digest is not the one expected.
    #[error("{url}: digest mismatch: expected {expected}, got {actual}")]
    DigestMismatch {
        /// The URL of the manifest or blob.
        url: String,
        /// The digest asked for (or announced by the registry).
        expected: String,
        /// The digest of the bytes received.
        actual: String,
    },
    /// A blob whose size is not the descriptor's.
    #[error("{url}: size mismatch: the manifest says {expected} bytes, got {actual}")]
    SizeMismatch {
        /// The blob URL.
        url: String,
        /// The descriptor's size.
        expected: u64,
        /// The bytes received.
        actual: u64,
    },
    /// A tag outside the OCI grammar (`[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`).
    #[error(
        "invalid tag {tag:?}: a tag is 1 to 128 letters, digits, '_', '.' or '-', not starting with '.' or '-'"
    )]
    InvalidTag {
        /// The tag.
        tag: String,
    },
    /// A digest of another algorithm than SHA-256, or malformed.
    #[error("unsupported digest {digest:?}: only sha256:<64 hex digits> is supported")]
    UnsupportedDigest {
        /// The digest.
        digest: String,
    },
    /// The manifest or an answer does not decode.
    #[error("{url}: invalid {what}: {reason}")]
    InvalidDocument {
        /// The URL.
        url: String,
        /// `manifest`, `tag list`, `token answer`.
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The artifact is not a Helm chart.
    #[error("{reference} is not a Helm chart: {reason}")]
    NotAHelmChart {
        /// `oci://host/repo:tag` or `@digest`.
        reference: String,
        /// Why.
        reason: String,
    },
    /// The repository has no tag that is a version (Flux's HelmChart text).
    #[error("unable to locate any tags in provided repository: {repository}")]
    NoTags {
        /// `oci://host/repo`.
        repository: String,
    },
    /// `ref.semver` is not a constraint (source-controller's text).
    #[error("semver '{constraint}' parse error: {message}")]
    InvalidSemver {
        /// The constraint.
        constraint: String,
        /// Masterminds' message.
        message: String,
    },
    /// No tag matches `ref.semver` (source-controller's text).
    #[error("no match found for semver: {constraint}")]
    NoSemverMatch {
        /// The constraint.
        constraint: String,
    },
    /// A HelmChart's `version` is not a constraint (Masterminds' message, as Flux shows it).
    #[error("{message}")]
    InvalidVersion {
        /// The version.
        version: String,
        /// Masterminds' message.
        message: String,
    },
    /// No tag matches a HelmChart's `version` (Flux's text).
    #[error("could not locate a version matching provided version string {version}")]
    NoVersionMatch {
        /// The version.
        version: String,
    },
}

fn detail_suffix(detail: &str) -> String {
    if detail.is_empty() {
        String::new()
    } else {
        format!(" ({detail})")
    }
}

impl OciError {
    /// A short machine-readable name of the failure, for conditions and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            OciError::InvalidUrl { .. } => "InvalidUrl",
            OciError::InvalidTlsConfig { .. } => "InvalidTlsConfig",
            OciError::InvalidCredentials { .. } => "InvalidCredentials",
            OciError::Unauthorized { .. } => "Unauthorized",
            OciError::Status { code: 404, .. } => "NotFound",
            OciError::Status { .. } => "HttpStatus",
            OciError::Tls { .. } => "TlsError",
            OciError::Timeout { .. } => "Timeout",
            OciError::Connect { .. } => "ConnectError",
            OciError::Transfer { .. } => "TransferError",
            OciError::TooLarge { .. } => "TooLarge",
            OciError::DigestMismatch { .. } => "DigestMismatch",
            OciError::SizeMismatch { .. } => "SizeMismatch",
            OciError::UnsupportedDigest { .. } => "UnsupportedDigest",
            OciError::InvalidTag { .. } => "InvalidTag",
            OciError::InvalidDocument { .. } => "InvalidDocument",
            OciError::NotAHelmChart { .. } => "NotAHelmChart",
            OciError::NoTags { .. } => "NoTags",
            OciError::InvalidSemver { .. } | OciError::InvalidVersion { .. } => {
                "InvalidVersionConstraint"
            }
            OciError::NoSemverMatch { .. } | OciError::NoVersionMatch { .. } => "NoMatchingVersion",
        }
    }

    /// Whether trying again later may succeed without a change to the objects: timeouts,
    /// connection failures, interrupted transfers, 408, 429 and 5xx answers.
    pub fn is_transient(&self) -> bool {
        match self {
            OciError::Timeout { .. } | OciError::Connect { .. } | OciError::Transfer { .. } => true,
            OciError::Status { code, .. } => *code == 408 || *code == 429 || *code >= 500,
            _ => false,
        }
    }

    /// Whether the object's spec itself is wrong (retrying without a spec change cannot
    /// help): an invalid URL, digest or version constraint.
    pub fn is_spec_error(&self) -> bool {
        matches!(
            self,
            OciError::InvalidUrl { .. }
                | OciError::UnsupportedDigest { .. }
                | OciError::InvalidTag { .. }
                | OciError::InvalidSemver { .. }
                | OciError::InvalidVersion { .. }
        )
    }
}

// ---------------------------------------------------------------------------------------
// URLs and references

/// An OCI repository: `oci://<registry>/<repository>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciUrl {
    registry: String,
    repository: String,
}

impl OciUrl {
    /// Reads `oci://host[:port]/path` as Flux does (`oci://` prefix, no tag or digest in the
    /// URL, a lower-case repository path of the distribution grammar). User info is refused.
    pub fn parse(url: &str) -> Result<OciUrl, OciError> {
        let invalid = |reason: String| OciError::InvalidUrl {
            url: http::strip_userinfo_text(url),
            reason,
        };
        let Some(rest) = url.strip_prefix("oci://") else {
            return Err(invalid(
                "URL must be in format 'oci://<domain>/<org>/<repo>'".to_owned(),
            ));
        };
        let (registry, repository) = rest.split_once('/').unwrap_or((rest, ""));
        if registry.contains('@') {
            return Err(invalid(
                "credentials in the URL are not supported; use secretRef".to_owned(),
            ));
        }
        if !valid_registry(registry) {
            return Err(invalid(format!("invalid registry host {registry:?}")));
        }
        if let Some((_, digest)) = repository.split_once('@') {
            return Err(invalid(format!(
                "URL must not contain a digest; remove '@{digest}'"
            )));
        }
        if let Some((_, tag)) = repository.split_once(':') {
            return Err(invalid(format!(
                "URL must not contain a tag; remove ':{tag}'"
            )));
        }
        if repository.is_empty() {
            return Err(invalid("the repository path is empty".to_owned()));
        }
        if let Some(bad) = repository.split('/').find(|c| !valid_path_component(c)) {
            return Err(invalid(format!(
                "invalid repository path component {bad:?}: lower-case letters and digits, \
                 separated by '.', '_', '__' or dashes"
            )));
        }
        Ok(OciUrl {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
        })
    }

    /// The repository of chart `name` under this one (a `HelmRepository` of `type: oci`
    /// holds its charts at `<url>/<chart>`).
    pub fn join(&self, name: &str) -> Result<OciUrl, OciError> {
        OciUrl::parse(&format!("{self}/{name}"))
    }

    /// `host[:port]`.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository path (`charts/podinfo`).
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The host requests go to (`docker.io` is served at `registry-1.docker.io`).
    fn request_host(&self) -> &str {
        match self.registry.as_str() {
            "docker.io" | "index.docker.io" => "registry-1.docker.io",
            other => other,
        }
    }
}

impl fmt::Display for OciUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "oci://{}/{}", self.registry, self.repository)
    }
}

/// `host`, `host:port` or `[ipv6]:port`.
fn valid_registry(registry: &str) -> bool {
    let valid_port =
        |p: &str| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit());
    if let Some(rest) = registry.strip_prefix('[') {
        let Some((ip, after)) = rest.split_once(']') else {
            return false;
        };
        if ip.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        return after.is_empty() || after.strip_prefix(':').is_some_and(valid_port);
    }
    let (host, port) = match registry.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (registry, None),
    };
    port.is_none_or(valid_port)
        && !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
}

/// A path component of the distribution grammar: `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`.
fn valid_path_component(component: &str) -> bool {
    let b = component.as_bytes();
    let alnum = |c: u8| c.is_ascii_lowercase() || c.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &component[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|c| c == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// What to pull from a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reference {
    /// A tag.
    Tag(String),
    /// A manifest digest.
    Digest(ChartDigest),
}

impl Reference {
    /// A tag reference, checked against the OCI tag grammar.
    pub fn tag(tag: &str) -> Result<Reference, OciError> {
        check_tag(tag)?;
        Ok(Reference::Tag(tag.to_owned()))
    }

    /// A digest reference from `sha256:<hex>`.
    pub fn digest(digest: &str) -> Result<Reference, OciError> {
        parse_digest(digest).map(Reference::Digest)
    }

    fn path_segment(&self) -> String {
        match self {
            Reference::Tag(tag) => tag.clone(),
            Reference::Digest(d) => d.to_string(),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reference::Tag(tag) => write!(f, ":{tag}"),
            Reference::Digest(d) => write!(f, "@{d}"),
        }
    }
}

/// The OCI distribution tag grammar: `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn check_tag(tag: &str) -> Result<(), OciError> {
    let b = tag.as_bytes();
    let ok = !b.is_empty()
        && b.len() <= 128
        && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(OciError::InvalidTag {
            tag: tag.to_owned(),
        })
    }
}

fn parse_digest(digest: &str) -> Result<ChartDigest, OciError> {
    ChartDigest::new(digest).map_err(|_| OciError::UnsupportedDigest {
        digest: digest.to_owned(),
    })
}

/// Flux's artifact revision of an OCI artifact: `<tag>@<digest>`, or the digest alone when
/// it was pulled by digest.
pub fn revision(tag: Option<&str>, digest: &ChartDigest) -> String {
    match tag {
        Some(tag) => format!("{tag}@{digest}"),
        None => digest.to_string(),
    }
}

// ---------------------------------------------------------------------------------------
// Manifests

/// A content descriptor of a manifest.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    /// The media type.
    #[serde(default)]
    pub media_type: String,
    /// `<algorithm>:<hex>`.
    pub digest: String,
    /// The size in bytes.
    pub size: i64,
    /// Annotations.
    #[serde(default)]
    pub annotations: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawManifest {
    schema_version: i64,
    config: Descriptor,
    #[serde(default)]
    layers: Vec<Descriptor>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// An OCI image manifest, with the digest of its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The SHA-256 of the manifest's bytes.
    pub digest: ChartDigest,
    /// The config descriptor.
    pub config: Descriptor,
    /// The layers, in order.
    pub layers: Vec<Descriptor>,
    /// The manifest's annotations.
    pub annotations: BTreeMap<String, String>,
}

impl Manifest {
    /// Reads manifest bytes served with `content_type`; `digest` is theirs.
    fn parse(
        url: &str,
        bytes: &[u8],
        content_type: Option<&str>,
        digest: ChartDigest,
    ) -> Result<Manifest, OciError> {
        let invalid = |reason: String| OciError::InvalidDocument {
            url: url.to_owned(),
            what: "manifest",
            reason,
        };
        let raw: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
        let declared = raw
            .get("mediaType")
            .and_then(|m| m.as_str())
            .map(str::to_owned)
            .or_else(|| content_type.map(|c| c.split(';').next().unwrap_or(c).trim().to_owned()));
        match declared.as_deref() {
            Some(MANIFEST_MEDIA_TYPE) | None => {}
            Some(INDEX_MEDIA_TYPE) => {
                return Err(invalid(
                    "an image index, not an image manifest (a Helm chart is one manifest)"
                        .to_owned(),
                ));
            }
            Some(other) => {
                return Err(invalid(format!(
                    "media type {other:?} is not {MANIFEST_MEDIA_TYPE:?}"
                )));
            }
        }
        let raw: RawManifest = serde_json::from_value(raw).map_err(|e| invalid(e.to_string()))?;
        if raw.schema_version != 2 {
            return Err(invalid(format!(
                "schemaVersion {} is not 2",
                raw.schema_version
            )));
        }
        Ok(Manifest {
            digest,
            config: raw.config,
            layers: raw.layers,
            annotations: raw.annotations,
        })
    }

    /// The chart layer, when the manifest is a Helm chart's (config media type
    /// [`HELM_CONFIG_MEDIA_TYPE`], a layer of [`HELM_CHART_LAYER_MEDIA_TYPE`] or the legacy
    /// type). `reference` names the artifact in the error.
    pub fn helm_chart_layer(&self, reference: &str) -> Result<&Descriptor, OciError> {
        let not_chart = |reason: String| OciError::NotAHelmChart {
            reference: reference.to_owned(),
            reason,
        };
        if self.config.media_type != HELM_CONFIG_MEDIA_TYPE {
            return Err(not_chart(format!(
                "the config media type is {:?}, not {HELM_CONFIG_MEDIA_TYPE:?}",
                self.config.media_type
            )));
        }
        self.layers
            .iter()
            .find(|l| l.media_type == HELM_CHART_LAYER_MEDIA_TYPE)
            .or_else(|| {
                self.layers
                    .iter()
                    .find(|l| l.media_type == HELM_LEGACY_CHART_LAYER_MEDIA_TYPE)
            })
            .ok_or_else(|| not_chart(format!("no layer of type {HELM_CHART_LAYER_MEDIA_TYPE:?}")))
    }

    /// The layer an `OCIRepository`'s `layerSelector.mediaType` picks (Flux: the first of
    /// that type; the first layer when no type is given).
    pub fn select_layer(&self, media_type: Option<&str>) -> Result<&Descriptor, String> {
        match media_type.filter(|m| !m.is_empty()) {
            Some(m) => self
                .layers
                .iter()
                .find(|l| l.media_type == m)
                .ok_or_else(|| format!("failed to find layer with media type '{m}' in artifact")),
            None => self
                .layers
                .first()
                .ok_or_else(|| "no layers found in artifact".to_owned()),
        }
    }
}

/// A chart pulled from a registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulledChart {
    /// The tag pulled, when pulled by tag.
    pub tag: Option<String>,
    /// The manifest.
    pub manifest: Manifest,
    /// The chart layer's descriptor.
    pub layer: Descriptor,
    /// The chart archive (the layer's bytes, digest-checked).
    pub archive: Vec<u8>,
}

impl PulledChart {
    /// Flux's revision: `<tag>@sha256:<manifest digest>`, or the digest.
    pub fn revision(&self) -> String {
        revision(self.tag.as_deref(), &self.manifest.digest)
    }
}

// ---------------------------------------------------------------------------------------
// Credentials

/// The credentials for `registry` (`host[:port]`) in a registry Secret's data, as Flux
/// reads them: a `.dockerconfigjson` (or `.dockercfg`) entry whose key's host matches
/// (scheme and path ignored, port significant; `auth` (base64 `user:password`) taking
/// precedence over `username`/`password`), else the `username` and `password` keys.
/// `None` when the Secret has none for this registry.
pub fn registry_credentials(
    data: &BTreeMap<String, Vec<u8>>,
    registry: &str,
) -> Result<Option<(String, String)>, OciError> {
    let docker = data
        .get(".dockerconfigjson")
        .map(|d| (d, true))
        .or_else(|| data.get(".dockercfg").map(|d| (d, false)));
    if let Some((bytes, nested)) = docker {
        let invalid = |reason: String| OciError::InvalidCredentials { reason };
        let doc: serde_json::Value = serde_json::from_slice(bytes)
            .map_err(|e| invalid(format!("the docker config is not JSON: {e}")))?;
        let auths = if nested { doc.get("auths") } else { Some(&doc) };
        let Some(auths) = auths.and_then(|a| a.as_object()) else {
            return Err(invalid(
                "the docker config has no \"auths\" object".to_owned(),
            ));
        };
        for (key, entry) in auths {
            if !docker_key_matches(key, registry) {
                continue;
            }
            let field = |name: &str| {
                entry
                    .get(name)
                    .and_then(|v| v.as_str())
                    .unwrap_or("")
                    .to_owned()
            };
            let auth = field("auth");
            if !auth.is_empty() {
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(auth.trim())
                    .map_err(|_| {
                        invalid(format!("the \"auth\" of registry {key:?} is not base64"))
                    })?;
                let text = String::from_utf8(decoded).map_err(|_| {
                    invalid(format!("the \"auth\" of registry {key:?} is not UTF-8"))
                })?;
                let Some((user, password)) = text.split_once(':') else {
                    return Err(invalid(format!(
                        "the \"auth\" of registry {key:?} is not user:password"
                    )));
                };
                return Ok(Some((user.to_owned(), password.to_owned())));
            }
            let (user, password) = (field("username"), field("password"));
            if !user.is_empty() || !password.is_empty() {
                return Ok(Some((user, password)));
            }
        }
        return Ok(None);
    }
    let text = |key: &str| -> Result<Option<String>, OciError> {
        data.get(key)
            .map(|v| {
                String::from_utf8(v.clone()).map_err(|_| OciError::InvalidCredentials {
                    reason: format!("the {key:?} key is not UTF-8"),
                })
            })
            .transpose()
    };
    match (text("username")?, text("password")?) {
        (Some(user), Some(password)) => Ok(Some((user, password))),
        (None, None) => Ok(None),
        _ => Err(OciError::InvalidCredentials {
            reason: "the Secret must hold both \"username\" and \"password\"".to_owned(),
        }),
    }
}

/// A docker config key (`https://host:port/v1/`, `host:port`, `host`) names `registry`.
fn docker_key_matches(key: &str, registry: &str) -> bool {
    let key = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = key.split('/').next().unwrap_or(key);
    let registry_aliases: &[&str] = match registry {
        "docker.io" | "index.docker.io" | "registry-1.docker.io" => {
            &["docker.io", "index.docker.io", "registry-1.docker.io"]
        }
        _ => &[],
    };
    host.eq_ignore_ascii_case(registry)
        || registry_aliases
            .iter()
            .any(|alias| host.eq_ignore_ascii_case(alias))
}

// ---------------------------------------------------------------------------------------
// The client

/// A client for one OCI repository (`oci://host/path`). Cheap to clone.
#[derive(Clone)]
pub struct OciClient {
    inner: Arc<Inner>,
}

struct Inner {
    client: reqwest::Client,
    url: OciUrl,
    basic: Option<(String, String)>,
    insecure: bool,
    timeout: Duration,
    limits: OciLimits,
    base: tokio::sync::OnceCell<reqwest::Url>,
    /// The `Authorization` header that last worked (a secret: never logged).
    authorization: Mutex<Option<String>>,
}

impl fmt::Debug for OciClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciClient")
            .field("url", &self.inner.url.to_string())
            .field(
                "user",
                &self.inner.basic.as_ref().map(|(user, _)| user.as_str()),
            )
            .field("insecure", &self.inner.insecure)
            .field("timeout", &self.inner.timeout)
            .field("limits", &self.inner.limits)
            .finish()
    }
}

impl OciClient {
    /// A client for the repository `url` (`oci://host[:port]/path`). `auth` gives the
    /// credentials (`basic`) and TLS settings (`pass_credentials` is not used: the token
    /// realm gets the credentials, as with every registry client); `insecure` allows plain
    /// HTTP when HTTPS fails.
    pub fn new(
        url: &str,
        auth: RepositoryAuth,
        insecure: bool,
        timeout: Duration,
        limits: OciLimits,
    ) -> Result<OciClient, OciError> {
        let url = OciUrl::parse(url)?;
        let tls = http::tls_config(&auth).map_err(tls_config_error)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .user_agent(concat!("flotilla-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| OciError::InvalidTlsConfig {
                what: "HTTP client",
                reason: http::error_chain(&e.without_url()),
            })?;
        Ok(OciClient {
            inner: Arc::new(Inner {
                client,
                url,
                basic: auth.basic,
                insecure,
                timeout,
                limits,
                base: tokio::sync::OnceCell::new(),
                authorization: Mutex::new(None),
            }),
        })
    }

    /// The repository.
    pub fn url(&self) -> &OciUrl {
        &self.inner.url
    }

    /// All tags of the repository, in the registry's order (every page).
    pub async fn list_tags(&self) -> Result<Vec<String>, OciError> {
        #[derive(Deserialize)]
        struct TagList {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let base = self.base().await?.clone();
        let mut next = Some(self.api_url(
            &base,
            &format!("tags/list?n={}", self.inner.limits.tags_per_page.max(1)),
        )?);
        let mut tags = Vec::new();
        let mut pages = 0;
        let mut size = 0u64;
        while let Some(url) = next.take() {
            pages += 1;
            if pages > MAX_TAG_PAGES {
                return Err(OciError::TooLarge {
                    url: url.to_string(),
                    what: "tag list",
                    limit: MAX_TAG_PAGES as u64,
                });
            }
            let shown = url.to_string();
            let response = self.send(url.clone(), "application/json").await?;
            next = next_link(response.headers())
                .map(|link| {
                    url.join(&link).map_err(|e| OciError::InvalidDocument {
                        url: shown.clone(),
                        what: "tag list",
                        reason: format!("bad Link header {link:?}: {e}"),
                    })
                })
                .transpose()?;
            let body = self
                .read_body(
                    response,
                    &shown,
                    "tag list",
                    self.inner.limits.max_tags_page_size,
                )
                .await?;
            size += body.len() as u64;
            if size > self.inner.limits.max_tags_size {
                return Err(OciError::TooLarge {
                    url: shown,
                    what: "tag list",
                    limit: self.inner.limits.max_tags_size,
                });
            }
            let page: TagList =
                serde_json::from_slice(&body).map_err(|e| OciError::InvalidDocument {
                    url: shown.clone(),
                    what: "tag list",
                    reason: e.to_string(),
                })?;
            tags.extend(page.tags.unwrap_or_default());
        }
        Ok(tags)
    }

    /// The manifest `reference` names, its digest verified (see the module docs).
    pub async fn fetch_manifest(&self, reference: &Reference) -> Result<Manifest, OciError> {
        if let Reference::Tag(tag) = reference {
            check_tag(tag)?;
        }
        let base = self.base().await?.clone();
        let url = self.api_url(&base, &format!("manifests/{}", reference.path_segment()))?;
        let shown = url.to_string();
        let response = self
            .send(url, &format!("{MANIFEST_MEDIA_TYPE}, {INDEX_MEDIA_TYPE}"))
            .await?;
        let announced = response
            .headers()
            .get("docker-content-digest")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = self
            .read_body(
                response,
                &shown,
                "manifest",
                self.inner.limits.max_manifest_size,
            )
            .await?;
        let actual = ChartDigest::of_bytes(&body);
        let expected = match reference {
            Reference::Digest(d) => Some(d.to_string()),
            Reference::Tag(_) => announced.filter(|a| a.starts_with("sha256:")),
        };
        if let Some(expected) = expected
            && expected != actual.as_str()
        {
            return Err(OciError::DigestMismatch {
                url: shown,
                expected,
                actual: actual.to_string(),
            });
        }
        Manifest::parse(&shown, &body, content_type.as_deref(), actual)
    }

    /// The blob of `descriptor`, at most `limit` bytes, checked against its size and digest.
    pub async fn fetch_blob(
        &self,
        descriptor: &Descriptor,
        what: &'static str,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let digest = parse_digest(&descriptor.digest)?;
        let base = self.base().await?.clone();
        let url = self.api_url(&base, &format!("blobs/{digest}"))?;
        let shown = url.to_string();
        let size = u64::try_from(descriptor.size).unwrap_or(0);
        if size > limit {
            return Err(OciError::TooLarge {
                url: shown,
                what,
                limit,
            });
        }
        let response = self.send(url, "*/*").await?;
        let body = self.read_body(response, &shown, what, limit).await?;
        if body.len() as u64 != size {
            return Err(OciError::SizeMismatch {
                url: shown,
                expected: size,
                actual: body.len() as u64,
            });
        }
        let actual = ChartDigest::of_bytes(&body);
        if actual != digest {
            return Err(OciError::DigestMismatch {
                url: shown,
                expected: digest.to_string(),
                actual: actual.to_string(),
            });
        }
        Ok(body)
    }

    /// The Helm chart `reference` names: the manifest (a Helm chart's) and the chart layer.
    pub async fn pull_chart(&self, reference: &Reference) -> Result<PulledChart, OciError> {
        let manifest = self.fetch_manifest(reference).await?;
        let layer = manifest
            .helm_chart_layer(&format!("{}{reference}", self.inner.url))?
            .clone();
        let archive = self
            .fetch_blob(&layer, "chart layer", self.inner.limits.max_chart_size)
            .await?;
        Ok(PulledChart {
            tag: match reference {
                Reference::Tag(t) => Some(t.clone()),
                Reference::Digest(_) => None,
            },
            manifest,
            layer,
            archive,
        })
    }

    /// The tag an `OCIRepository`'s `ref.semver` picks ([`select_semver_tag`] over
    /// [`OciClient::list_tags`]).
    pub async fn resolve_semver(
        &self,
        constraint: &str,
        underscore_is_plus: bool,
    ) -> Result<String, OciError> {
        let tags = self.list_tags().await?;
        select_semver_tag(&tags, constraint, underscore_is_plus)
    }

    /// The chart version a HelmChart's `version` picks in this repository (the chart's own
    /// repository: `<HelmRepository url>/<chart>`), as source-controller picks it: a
    /// `version` that is a version is taken as it is, without listing the tags; otherwise
    /// [`select_chart_version`] over the tags. Pull it with [`version_tag`].
    pub async fn resolve_chart_version(&self, version: &str) -> Result<String, OciError> {
        if index::parse_version(version).is_some() {
            return Ok(version.to_owned());
        }
        let tags = self.list_tags().await?;
        select_chart_version(&tags, version, &self.inner.url.to_string())
    }

    /// `scheme://host/`, HTTPS unless `insecure` and HTTPS fails (a `/v2/` ping).
    async fn base(&self) -> Result<&reqwest::Url, OciError> {
        self.inner
            .base
            .get_or_try_init(|| async {
                let host = self.inner.url.request_host();
                let parse = |scheme: &str| {
                    reqwest::Url::parse(&format!("{scheme}://{host}/")).map_err(|e| {
                        OciError::InvalidUrl {
                            url: self.inner.url.to_string(),
                            reason: e.to_string(),
                        }
                    })
                };
                let https = parse("https")?;
                if !self.inner.insecure {
                    return Ok(https);
                }
                let ping = https.join("v2/").map_err(|e| OciError::InvalidUrl {
                    url: self.inner.url.to_string(),
                    reason: e.to_string(),
                })?;
                match self.inner.client.get(ping).send().await {
                    Ok(_) => Ok(https),
                    Err(_) => parse("http"),
                }
            })
            .await
    }

    fn api_url(&self, base: &reqwest::Url, rest: &str) -> Result<reqwest::Url, OciError> {
        base.join(&format!("v2/{}/{rest}", self.inner.url.repository))
            .map_err(|e| OciError::InvalidUrl {
                url: self.inner.url.to_string(),
                reason: e.to_string(),
            })
    }

    /// A GET with the current authorization; a `401` challenge is answered once.
    async fn send(&self, url: reqwest::Url, accept: &str) -> Result<reqwest::Response, OciError> {
        let shown = url.to_string();
        let mut answered = false;
        loop {
            let current = lock(&self.inner.authorization).clone();
            let mut request = self.inner.client.get(url.clone()).header(ACCEPT, accept);
            if let Some(value) = &current {
                request = request.header(AUTHORIZATION, value);
            }
            let response = request.send().await.map_err(|e| self.classify(&shown, e))?;
            let status = response.status();
            if status.is_success() {
                return Ok(response);
            }
            if status == reqwest::StatusCode::UNAUTHORIZED
                && !answered
                && let Some(challenge) = response
                    .headers()
                    .get(WWW_AUTHENTICATE)
                    .and_then(|v| v.to_str().ok())
                    .and_then(Challenge::parse)
                && let Some(value) = self.answer(&challenge).await?
                && Some(&value) != current.as_ref()
            {
                *lock(&self.inner.authorization) = Some(value);
                answered = true;
                continue;
            }
            return Err(self.status_error(shown, response).await);
        }
    }

    /// The `Authorization` value answering `challenge`, `None` when there is nothing to
    /// answer with (Basic without credentials).
    async fn answer(&self, challenge: &Challenge) -> Result<Option<String>, OciError> {
        let basic = self.inner.basic.as_ref();
        if challenge.scheme.eq_ignore_ascii_case("basic") {
            return Ok(basic.map(|(user, password)| basic_header(user, password)));
        }
        if !challenge.scheme.eq_ignore_ascii_case("bearer") {
            return Ok(None);
        }
        let Some(realm) = challenge.params.get("realm") else {
            return Ok(None);
        };
        let mut url = reqwest::Url::parse(realm).map_err(|e| OciError::InvalidDocument {
            url: self.inner.url.to_string(),
            what: "authentication challenge",
            reason: format!("bad realm {realm:?}: {e}"),
        })?;
        let scope = challenge
            .params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| format!("repository:{}:pull", self.inner.url.repository));
        {
            let mut query = url.query_pairs_mut();
            if let Some(service) = challenge.params.get("service") {
                query.append_pair("service", service);
            }
            query.append_pair("scope", &scope);
        }
        let shown = http::redacted(&url);
        let mut request = self.inner.client.get(url);
        if let Some((user, password)) = basic {
            request = request.basic_auth(user, Some(password));
        }
        let response = request.send().await.map_err(|e| self.classify(&shown, e))?;
        if !response.status().is_success() {
            return Err(self.status_error(shown, response).await);
        }
        let body = self
            .read_body(response, &shown, "token answer", MAX_TOKEN_SIZE)
            .await?;
        #[derive(Deserialize)]
        struct Token {
            #[serde(default)]
            token: String,
            #[serde(default)]
            access_token: String,
        }
        let token: Token =
            serde_json::from_slice(&body).map_err(|e| OciError::InvalidDocument {
                url: shown.clone(),
                what: "token answer",
                reason: e.to_string(),
            })?;
        let value = if token.token.is_empty() {
            token.access_token
        } else {
            token.token
        };
        if value.is_empty() {
            return Err(OciError::InvalidDocument {
                url: shown,
                what: "token answer",
                reason: "no token".to_owned(),
            });
        }
        Ok(Some(format!("Bearer {value}")))
    }

    async fn status_error(&self, url: String, response: reqwest::Response) -> OciError {
        let status = response.status();
        let body = self
            .read_body(response, &url, "error answer", MAX_ERROR_BODY)
            .await
            .unwrap_or_default();
        let detail = registry_error_detail(&body);
        if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
            OciError::Unauthorized {
                url,
                status: status.to_string(),
                credentials_given: self.inner.basic.is_some(),
                detail,
            }
        } else {
            OciError::Status {
                url,
                status: status.to_string(),
                code: status.as_u16(),
                detail,
            }
        }
    }

    async fn read_body(
        &self,
        mut response: reqwest::Response,
        url: &str,
        what: &'static str,
        limit: u64,
    ) -> Result<Vec<u8>, OciError> {
        let too_large = || OciError::TooLarge {
            url: url.to_owned(),
            what,
            limit,
        };
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.classify(url, e))? {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn classify(&self, url: &str, error: reqwest::Error) -> OciError {
        let url = url.to_owned();
        match http::TransportFailure::of(error) {
            http::TransportFailure::Timeout => OciError::Timeout {
                url,
                timeout: self.inner.timeout,
            },
            http::TransportFailure::Tls(reason) => OciError::Tls { url, reason },
            http::TransportFailure::Connect(reason) => OciError::Connect { url, reason },
            http::TransportFailure::Transfer(reason) => OciError::Transfer { url, reason },
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn basic_header(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

fn tls_config_error(e: http::FetchError) -> OciError {
    match e {
        http::FetchError::InvalidTlsConfig { what, reason } => {
            OciError::InvalidTlsConfig { what, reason }
        }
        other => OciError::InvalidTlsConfig {
            what: "TLS",
            reason: other.to_string(),
        },
    }
}

/// `CODE: message; CODE: message` of a distribution error answer, or `""`.
fn registry_error_detail(body: &[u8]) -> String {
    #[derive(Deserialize)]
    struct Errors {
        #[serde(default)]
        errors: Vec<ErrorEntry>,
    }
    #[derive(Deserialize)]
    struct ErrorEntry {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Errors>(body) {
        Ok(errors) => errors
            .errors
            .iter()
            .map(|e| match (e.code.is_empty(), e.message.is_empty()) {
                (false, false) => format!("{}: {}", e.code, e.message),
                (false, true) => e.code.clone(),
                _ => e.message.clone(),
            })
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; "),
        Err(_) => String::new(),
    }
}

/// The `rel="next"` target of a `Link` header.
fn next_link(headers: &HeaderMap) -> Option<String> {
    for value in headers.get_all(LINK) {
        let Ok(text) = value.to_str() else { continue };
        for link in text.split(',') {
            let mut parts = link.split(';');
            let target = parts.next()?.trim();
            let is_next = parts.any(|p| {
                let p = p.trim();
                p == "rel=\"next\"" || p == "rel=next"
            });
            if is_next && let Some(url) = target.strip_prefix('<').and_then(|t| t.strip_suffix('>'))
            {
                return Some(url.to_owned());
            }
        }
    }
    None
}

/// A `WWW-Authenticate` challenge: `Scheme k="v", k2=v2`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Challenge {
    scheme: String,
    params: BTreeMap<String, String>,
}

impl Challenge {
    fn parse(header: &str) -> Option<Challenge> {
        let header = header.trim();
        let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
        if scheme.is_empty() {
            return None;
        }
        let mut params = BTreeMap::new();
        let b = rest.as_bytes();
        let mut i = 0;
        while i < b.len() {
            while i < b.len() && (b[i] == b' ' || b[i] == b',') {
                i += 1;
            }
            let key_start = i;
            while i < b.len() && b[i] != b'=' && b[i] != b',' {
                i += 1;
            }
            let key = rest[key_start..i].trim().to_ascii_lowercase();
            if i >= b.len() || b[i] != b'=' {
                continue;
            }
            i += 1;
            let mut value = String::new();
            if i < b.len() && b[i] == b'"' {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' && i + 1 < b.len() {
                        i += 1;
                    }
                    let ch = rest[i..].chars().next()?;
                    value.push(ch);
                    i += ch.len_utf8();
                }
                i += 1;
            } else {
                let start = i;
                while i < b.len() && b[i] != b',' {
                    i += 1;
                }
                value = rest[start..i].trim().to_owned();
            }
            if !key.is_empty() {
                params.insert(key, value);
            }
        }
        Some(Challenge {
            scheme: scheme.to_owned(),
            params,
        })
    }
}

// ---------------------------------------------------------------------------------------
// Tag and version selection (pure)

/// A chart version as its tag: Helm stores `+` as `_`.
pub fn version_tag(version: &str) -> String {
    version.replace('+', "_")
}

/// The tag an `OCIRepository`'s `ref.semver` picks, as source-controller's `getTagBySemver`:
/// each tag (with `_` read as `+` when `underscore_is_plus`, which Flux does when the
/// layer selector's media type is the Helm chart layer's) that is a version (three
/// dot-separated parts, Masterminds' lenient parse) and matches the constraint; the highest
/// wins (the first of equal ones in tag order), returned as its tag.
pub fn select_semver_tag(
    tags: &[String],
    constraint: &str,
    underscore_is_plus: bool,
) -> Result<String, OciError> {
    let parsed = Constraints::parse(constraint).map_err(|message| OciError::InvalidSemver {
        constraint: constraint.to_owned(),
        message,
    })?;
    let mut best: Option<(&String, Version)> = None;
    for tag in tags {
        let candidate = if underscore_is_plus {
            tag.replace('_', "+")
        } else {
            tag.clone()
        };
        let Some(v) = index::parse_version(&candidate) else {
            continue;
        };
        if !parsed.check(&v) {
            continue;
        }
        if best.as_ref().is_none_or(|(_, b)| v.compare(b) > 0) {
            best = Some((tag, v));
        }
    }
    best.map(|(tag, _)| tag.clone())
        .ok_or_else(|| OciError::NoSemverMatch {
            constraint: constraint.to_owned(),
        })
}

/// Helm's registry `Tags`: the tags that are strict semver once `_` is read as `+`, as
/// canonical versions, highest first.
pub fn chart_versions(tags: &[String]) -> Vec<String> {
    let mut versions: Vec<Version> = tags
        .iter()
        .filter_map(|t| strict_version(&t.replace('_', "+")))
        .collect();
    versions.sort_by(|a, b| b.compare(a).cmp(&0));
    versions.iter().map(|v| v.to_string()).collect()
}

/// The chart version a HelmChart's `version` picks among a repository's tags, as
/// source-controller's `OCIChartRepository` does over Helm's `Tags` ([`chart_versions`]):
/// a version equal to `version` as written, else the highest matching the constraint
/// (`*` when empty: the latest stable). `repository` names the repository in errors.
pub fn select_chart_version(
    tags: &[String],
    version: &str,
    repository: &str,
) -> Result<String, OciError> {
    let versions = chart_versions(tags);
    if versions.is_empty() {
        return Err(OciError::NoTags {
            repository: repository.to_owned(),
        });
    }
    if !version.is_empty()
        && let Some(exact) = versions.iter().find(|v| v.as_str() == version)
    {
        return Ok(exact.clone());
    }
    let constraint = if version.is_empty() { "*" } else { version };
    let parsed = Constraints::parse(constraint).map_err(|message| OciError::InvalidVersion {
        version: version.to_owned(),
        message,
    })?;
    versions
        .iter()
        .find(|v| index::parse_version(v).is_some_and(|v| parsed.check(&v)))
        .cloned()
        .ok_or_else(|| OciError::NoVersionMatch {
            version: version.to_owned(),
        })
}

/// Masterminds' `StrictNewVersion`: `MAJOR.MINOR.PATCH[-PRE][+META]`, no `v`, no leading
/// zeros.
fn strict_version(s: &str) -> Option<Version> {
    let core_end = s.find(['-', '+']).unwrap_or(s.len());
    let core: Vec<&str> = s[..core_end].split('.').collect();
    let numeric_ok = core.len() == 3
        && core.iter().all(|part| {
            !part.is_empty()
                && part.bytes().all(|b| b.is_ascii_digit())
                && (part.len() == 1 || !part.starts_with('0'))
        });
    if !numeric_ok {
        return None;
    }
    Version::parse(s).ok()
}

// ---------------------------------------------------------------------------------------
// The chart version of an OCIRepository chart (helm-controller)

/// Why [`chart_version_with_digest`] refused (helm-controller's texts).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChartMutateError {
    /// The chart's version is not a version.
    #[error("invalid chart version {version}")]
    InvalidChartVersion {
        /// The chart's version.
        version: String,
    },
    /// The revision's tag is a version other than the chart's.
    #[error("artifact revision {tag} does not match chart version {version}")]
    RevisionMismatch {
        /// The revision's tag part.
        tag: String,
        /// The chart's version.
        version: String,
    },
    /// The revision has no `<algorithm>:<at least 12 characters>` digest.
    #[error("invalid artifact revision {revision}")]
    InvalidRevision {
        /// The revision.
        revision: String,
    },
}

/// The chart version helm-controller gives a chart from an `OCIRepository`
/// (`mutateChartWithSourceRevision`): the chart's version with its build metadata replaced
/// by the first 12 characters of the revision's digest (`6.6.1` and `6.6.1@sha256:0cc9a8446c95...`
/// give `6.6.1+0cc9a8446c95`), printed canonically (Masterminds' `String`: no `v`, missing
/// parts as `0`). When the revision is `<tag>@<digest>` and the tag is a version (`_` read
/// as `+`), it must equal the chart's version (build metadata ignored). Returns the new
/// version and what helm-controller stores in `status.lastAttemptedRevisionDigest`: the
/// revision's digest, or the whole revision when its tag is not a version (its quirk:
/// `latest@sha256:...` is kept as it is).
pub fn chart_version_with_digest(
    chart_version: &str,
    revision: &str,
) -> Result<(String, String), ChartMutateError> {
    let version =
        Version::parse(chart_version).map_err(|_| ChartMutateError::InvalidChartVersion {
            version: chart_version.to_owned(),
        })?;
    let semver_tag = if revision.contains('@') {
        let tag = revision.split('@').next().unwrap_or("");
        Version::parse(&tag.replace('_', "+")).ok()
    } else {
        Version::parse(revision).ok()
    };
    let digest = match semver_tag {
        Some(tag_version) => {
            let pair: Vec<&str> = revision.split('@').collect();
            if pair.len() != 2 || tag_version.compare(&version) != 0 {
                return Err(ChartMutateError::RevisionMismatch {
                    tag: pair[0].to_owned(),
                    version: chart_version.to_owned(),
                });
            }
            pair[1]
        }
        None => revision,
    };
    let invalid = || ChartMutateError::InvalidRevision {
        revision: digest.to_owned(),
    };
    let hex = match digest.split(':').collect::<Vec<_>>().as_slice() {
        [_, hex] => *hex,
        _ => return Err(invalid()),
    };
    if hex.len() < 12 || !hex.is_char_boundary(12) {
        return Err(invalid());
    }
    let short = &hex[..12];
    if !short
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-')
    {
        return Err(invalid());
    }
    let mut out = format!(
        "{}.{}.{}",
        version.major(),
        version.minor(),
        version.patch()
    );
    if !version.prerelease().is_empty() {
        out.push('-');
        out.push_str(version.prerelease());
    }
    out.push('+');
    out.push_str(short);
    Ok((out, digest.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tags(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| (*s).to_owned()).collect()
    }

    #[test]
    fn oci_urls_parse_as_flux_reads_them() {
        let url = OciUrl::parse("oci://ghcr.io/stefanprodan/charts/podinfo").expect("valid");
        assert_eq!(url.registry(), "ghcr.io");
        assert_eq!(url.repository(), "stefanprodan/charts/podinfo");
        assert_eq!(url.to_string(), "oci://ghcr.io/stefanprodan/charts/podinfo");
        let local = OciUrl::parse("oci://127.0.0.1:5000/charts").expect("valid");
        assert_eq!(local.registry(), "127.0.0.1:5000");
        assert_eq!(
            local.join("hello").expect("valid").to_string(),
            "oci://127.0.0.1:5000/charts/hello"
        );
        assert!(OciUrl::parse("oci://[::1]:5000/a/b").is_ok());
        assert!(OciUrl::parse("oci://reg.example.com/a__b/c-d/e.f/g---h").is_ok());

        let refused = [
            ("https://ghcr.io/a", "URL must be in format"),
            ("oci://ghcr.io", "the repository path is empty"),
            ("oci://ghcr.io/", "the repository path is empty"),
            (
                "oci://ghcr.io/a/podinfo:6.5.0",
                "URL must not contain a tag; remove ':6.5.0'",
            ),
            (
                "oci://ghcr.io/a/podinfo@sha256:abc",
                "must not contain a digest",
            ),
            (
                "oci://ghcr.io/Upper",
                "invalid repository path component \"Upper\"",
            ),
            (
                "oci://ghcr.io/a//b",
                "invalid repository path component \"\"",
            ),
            ("oci://ghcr.io/a/-b", "invalid repository path component"),
            ("oci://ghcr.io/a/b___c", "invalid repository path component"),
            ("oci://gh cr.io/a", "invalid registry host"),
            ("oci://ghcr.io:/a", "invalid registry host"),
            ("oci://ghcr.io:99999x/a", "invalid registry host"),
        ];
        for (input, message) in refused {
            let err = OciUrl::parse(input).expect_err(input);
            assert!(err.to_string().contains(message), "{input}: {err}");
            assert!(err.is_spec_error() && !err.is_transient(), "{input}");
        }
    }

    #[test]
    fn credentials_in_an_oci_url_are_refused_without_being_shown() {
        let err = OciUrl::parse("oci://bob:s3cret@ghcr.io/a/b").expect_err("user info");
        let text = err.to_string();
        assert!(!text.contains("s3cret") && !text.contains("bob"), "{text}");
        assert!(text.contains("use secretRef"), "{text}");
    }

    #[test]
    fn revisions_are_tag_at_digest_or_the_digest() {
        let d = ChartDigest::of_bytes(b"manifest");
        assert_eq!(revision(Some("6.5.0"), &d), format!("6.5.0@{d}"));
        assert_eq!(revision(None, &d), d.to_string());
        assert!(Reference::digest("sha512:abcd").is_err());
        for good in ["0.1.0", "0.3.0_build.7", "latest", "_x", "v1.2.3-rc.1"] {
            assert_eq!(
                Reference::tag(good).expect(good),
                Reference::Tag(good.to_owned())
            );
        }
        let long = "a".repeat(129);
        for bad in ["", ".x", "-x", "1.0.0+b", "../../x", "a/b", long.as_str()] {
            let err = Reference::tag(bad).expect_err(bad);
            assert!(err.is_spec_error(), "{bad}");
        }
        assert_eq!(
            Reference::digest(d.as_str()).expect("sha256").to_string(),
            format!("@{d}")
        );
    }

    #[test]
    fn semver_tags_resolve_as_source_controller_picks_them() {
        let all = tags(&[
            "latest",
            "0.1.0",
            "0.2.0",
            "0.10.0",
            "1.0.0-rc.1",
            "1.0.0_build.7",
            "v0.3.0",
            "0.4",
            "0.5.0.1",
            "2.0.0-alpha",
        ]);
        let cases: &[(&str, bool, &str)] = &[
            ("*", false, "0.10.0"),
            ("*", true, "1.0.0_build.7"),
            (">=0.1.0 <0.3.0", false, "0.2.0"),
            ("~0.2", false, "0.2.0"),
            ("^0.1.0", false, "0.1.0"),
            ("0.x", false, "0.10.0"),
            ("v0.3.x", false, "v0.3.0"),
            (">=1.0.0-0", false, "2.0.0-alpha"),
            ("1.0.0-rc.1", false, "1.0.0-rc.1"),
            (">=0.1.0", false, "0.10.0"),
        ];
        for (constraint, plus, want) in cases {
            assert_eq!(
                select_semver_tag(&all, constraint, *plus).expect(constraint),
                *want,
                "{constraint} {plus}"
            );
        }
        let err = select_semver_tag(&all, ">=5.0.0", false).expect_err("none");
        assert_eq!(err.to_string(), "no match found for semver: >=5.0.0");
        assert!(!err.is_spec_error());
        let err = select_semver_tag(&all, "not a constraint", false).expect_err("invalid");
        assert!(
            err.to_string()
                .starts_with("semver 'not a constraint' parse error: "),
            "{err}"
        );
        assert!(err.is_spec_error());
    }

    #[test]
    fn chart_versions_resolve_as_helm_and_source_controller_pick_them() {
        let all = tags(&[
            "0.1.0",
            "0.2.0",
            "0.10.0",
            "1.0.0-rc.1",
            "0.3.0_build.7",
            "v0.4.0",
            "0.5",
            "latest",
            "01.0.0",
        ]);
        assert_eq!(
            chart_versions(&all),
            ["1.0.0-rc.1", "0.10.0", "0.3.0+build.7", "0.2.0", "0.1.0"]
        );
        let cases: &[(&str, &str)] = &[
            ("", "0.10.0"),
            ("*", "0.10.0"),
            ("0.2.0", "0.2.0"),
            ("0.3.0+build.7", "0.3.0+build.7"),
            ("~0.3", "0.3.0+build.7"),
            (">=0.1.0 <0.3.0", "0.2.0"),
            ("^0.1", "0.1.0"),
            ("0.x", "0.10.0"),
            (">=1.0.0-0", "1.0.0-rc.1"),
        ];
        for (version, want) in cases {
            assert_eq!(
                select_chart_version(&all, version, "oci://r/c").expect(version),
                *want,
                "{version}"
            );
        }
        assert_eq!(version_tag("0.3.0+build.7"), "0.3.0_build.7");
        let err = select_chart_version(&all, ">=3", "oci://r/c").expect_err("none");
        assert_eq!(
            err.to_string(),
            "could not locate a version matching provided version string >=3"
        );
        let err = select_chart_version(&tags(&["latest"]), "*", "oci://r/c").expect_err("none");
        assert_eq!(
            err.to_string(),
            "unable to locate any tags in provided repository: oci://r/c"
        );
    }

    #[test]
    fn the_chart_version_gets_the_digest_as_helm_controller_appends_it() {
        let digest = "sha256:9933f58f8bf459eb199d59ebc8a05683f3944e1242d9f5467d99aa2cf08a5370";
        let ok: &[(&str, String, &str)] = &[
            ("1.2.3", format!("1.2.3@{digest}"), "1.2.3+9933f58f8bf4"),
            ("1.2.3", digest.to_owned(), "1.2.3+9933f58f8bf4"),
            // Existing build metadata is replaced; the tag's `_` is the chart's `+`.
            (
                "1.2.3+old",
                format!("1.2.3_old@{digest}"),
                "1.2.3+9933f58f8bf4",
            ),
            ("1.2.3+old", format!("1.2.3@{digest}"), "1.2.3+9933f58f8bf4"),
            // A tag that is not a version is not compared.
            ("1.2.3", format!("latest@{digest}"), "1.2.3+9933f58f8bf4"),
            // Canonical printing: no `v`, missing parts as 0, pre-release kept.
            ("v1.2", format!("v1.2.0@{digest}"), "1.2.0+9933f58f8bf4"),
            (
                "1.0.0-rc.1",
                format!("1.0.0-rc.1@{digest}"),
                "1.0.0-rc.1+9933f58f8bf4",
            ),
        ];
        for (version, rev, want) in ok {
            let (got, d) = chart_version_with_digest(version, rev).expect(rev);
            assert_eq!(got, *want, "{version} {rev}");
            // helm-controller returns the whole revision when its tag is not a version.
            let want_digest = if rev.starts_with("latest@") {
                rev.as_str()
            } else {
                digest
            };
            assert_eq!(d, want_digest, "{version} {rev}");
        }
        let refused: &[(&str, String, &str)] = &[
            (
                "1.2.3",
                format!("1.2.4@{digest}"),
                "artifact revision 1.2.4 does not match chart version 1.2.3",
            ),
            (
                "1.2.3",
                "1.2.3".to_owned(),
                "artifact revision 1.2.3 does not match chart version 1.2.3",
            ),
            (
                "sha:123456",
                "1.2.3@sha:123456".to_owned(),
                "invalid chart version sha:123456",
            ),
            (
                "1.2.3",
                "latest@sha256:abc".to_owned(),
                "invalid artifact revision latest@sha256:abc",
            ),
            (
                "1.2.3",
                "latest".to_owned(),
                "invalid artifact revision latest",
            ),
        ];
        for (version, rev, message) in refused {
            let err = chart_version_with_digest(version, rev).expect_err(rev);
            assert_eq!(err.to_string(), *message, "{version} {rev}");
        }
    }

    #[test]
    fn docker_config_credentials_are_found_by_registry_host() {
        let config = serde_json::json!({"auths": {
            "https://index.docker.io/v1/": {"auth": "ZG9jazpodWI="},
            "127.0.0.1:5000": {"username": "carol", "password": "pa55word"},
            "reg.example.com": {"auth": "Ym9iOnMzY3JldA=="},
        }});
        let data = BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            serde_json::to_vec(&config).expect("json"),
        )]);
        let get = |host: &str| registry_credentials(&data, host).expect(host);
        assert_eq!(
            get("127.0.0.1:5000"),
            Some(("carol".to_owned(), "pa55word".to_owned()))
        );
        assert_eq!(get("127.0.0.1:5001"), None);
        assert_eq!(
            get("reg.example.com"),
            Some(("bob".to_owned(), "s3cret".to_owned()))
        );
        assert_eq!(
            get("docker.io"),
            Some(("dock".to_owned(), "hub".to_owned()))
        );

        let basic = BTreeMap::from([
            ("username".to_owned(), b"carol".to_vec()),
            ("password".to_owned(), b"pa55word".to_vec()),
        ]);
        assert_eq!(
            registry_credentials(&basic, "any").expect("basic"),
            Some(("carol".to_owned(), "pa55word".to_owned()))
        );
        let half = BTreeMap::from([("username".to_owned(), b"carol".to_vec())]);
        assert!(registry_credentials(&half, "any").is_err());
        let bad = BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            br#"{"auths":{"h":{"auth":"!!!"}}}"#.to_vec(),
        )]);
        let err = registry_credentials(&bad, "h").expect_err("not base64");
        assert!(!err.to_string().contains("!!!"), "{err}");
    }

    #[test]
    fn challenges_and_links_parse() {
        let c = Challenge::parse(
            r#"Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push""#,
        )
        .expect("challenge");
        assert_eq!(c.scheme, "Bearer");
        assert_eq!(c.params["realm"], "https://auth.example.com/token");
        assert_eq!(c.params["service"], "registry.example.com");
        assert_eq!(c.params["scope"], "repository:a/b:pull,push");
        let basic = Challenge::parse(r#"Basic realm="Registry Realm""#).expect("basic");
        assert_eq!(basic.scheme, "Basic");
        assert_eq!(basic.params["realm"], "Registry Realm");

        let mut headers = HeaderMap::new();
        headers.insert(
            LINK,
            "</v2/charts/hello/tags/list?last=0.2.0&n=2>; rel=\"next\""
                .parse()
                .expect("header"),
        );
        assert_eq!(
            next_link(&headers).as_deref(),
            Some("/v2/charts/hello/tags/list?last=0.2.0&n=2")
        );
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    #[test]
    fn a_manifest_is_a_helm_chart_only_with_helm_media_types() {
        let chart = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST_MEDIA_TYPE,
            "config": {"mediaType": HELM_CONFIG_MEDIA_TYPE, "digest": "sha256:aa", "size": 1},
            "layers": [{"mediaType": HELM_CHART_LAYER_MEDIA_TYPE, "digest": "sha256:bb", "size": 2}],
            "annotations": {"org.opencontainers.image.version": "0.1.0"},
        });
        let bytes = serde_json::to_vec(&chart).expect("json");
        let digest = ChartDigest::of_bytes(&bytes);
        let m = Manifest::parse("u", &bytes, None, digest).expect("manifest");
        assert_eq!(m.helm_chart_layer("r").expect("chart").digest, "sha256:bb");
        assert_eq!(m.select_layer(None).expect("first").digest, "sha256:bb");
        assert!(m.select_layer(Some("x/y")).is_err());

        let mut image = chart.clone();
        image["config"]["mediaType"] = "application/vnd.oci.image.config.v1+json".into();
        let bytes = serde_json::to_vec(&image).expect("json");
        let m =
            Manifest::parse("u", &bytes, None, ChartDigest::of_bytes(&bytes)).expect("manifest");
        let err = m.helm_chart_layer("oci://r/img:1").expect_err("image");
        assert!(
            err.to_string()
                .starts_with("oci://r/img:1 is not a Helm chart: the config media type"),
            "{err}"
        );

        let index =
            serde_json::json!({"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": []});
        let bytes = serde_json::to_vec(&index).expect("json");
        let err =
            Manifest::parse("u", &bytes, None, ChartDigest::of_bytes(&bytes)).expect_err("index");
        assert!(err.to_string().contains("an image index"), "{err}");
    }

    #[test]
    fn the_debug_form_of_a_client_hides_the_password() {
        let client = OciClient::new(
            "oci://127.0.0.1:5000/charts",
            RepositoryAuth {
                basic: Some(("carol".to_owned(), "pa55word".to_owned())),
                ..RepositoryAuth::default()
            },
            false,
            http::DEFAULT_TIMEOUT,
            OciLimits::default(),
        )
        .expect("client");
        let text = format!("{client:?}");
        assert!(
            text.contains("carol") && !text.contains("pa55word"),
            "{text}"
        );
    }
}
