//! Fetching from a Helm repository over HTTP(S), as Flux's source-controller does for a
//! `HelmRepository` of type `default`: the index (`index.yaml` under the repository URL) and
//! chart archives, with the repository's basic auth and TLS settings, a timeout
//! (`spec.timeout`, 60s by default) and size limits (source-controller's defaults: 50 MiB for
//! an index, 10 MiB for a chart).
//!
//! Where to start: [`RepositoryClient::new`], then [`RepositoryClient::fetch_index`] (hand the
//! bytes to [`Index::parse`](super::index::Index::parse)) and [`RepositoryClient::fetch_chart`]
//! with the resolved version's URL and digest.
//!
//! Rules kept from Helm and Flux:
//! - Basic auth goes with the index request always, and with a chart request only when the
//!   chart URL has the repository URL's scheme, host and port, or `passCredentials` is set
//!   (Helm's `HTTPGetter`). Redirects to another host drop the credentials.
//! - The TLS roots are the system's plus the repository's CA (Flux appends the CA to the
//!   system pool); a client certificate and key are presented when given.
//! - A chart whose SHA-256 differs from the index's `digest` is refused.
//!
//! Errors name the URL without its user info, and never carry a password or a key; a
//! [`RepositoryAuth`]'s `Debug` redacts them too.

use std::sync::Arc;
use std::time::Duration;

use flotilla_core::ids::ChartDigest;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};

use super::url::{self as repo_url};

/// Flux's default `HelmRepository.spec.timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// source-controller's default maximum index size (`--helm-index-max-size`, 50 MiB).
pub const MAX_INDEX_SIZE: u64 = 50 << 20;
/// source-controller's default maximum chart archive size (`--helm-chart-max-size`, 10 MiB).
pub const MAX_CHART_SIZE: u64 = 10 << 20;

/// How a repository is reached: the contents of its `secretRef` and `certSecretRef`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RepositoryAuth {
    /// Basic auth: user name and password.
    pub basic: Option<(String, String)>,
    /// A CA bundle (PEM) trusted in addition to the system's roots.
    pub ca_pem: Option<Vec<u8>>,
    /// A client certificate chain and its private key (PEM).
    pub client_cert: Option<(Vec<u8>, Vec<u8>)>,
    /// Accept any server certificate (no verification at all).
    pub insecure_skip_verify: bool,
    /// `passCredentials`: send basic auth to chart URLs on other hosts too.
    pub pass_credentials: bool,
}

impl std::fmt::Debug for RepositoryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RepositoryAuth")
            .field(
                "basic",
                &self.basic.as_ref().map(|(user, _)| (user, "<redacted>")),
            )
            .field("ca_pem", &self.ca_pem.as_ref().map(|pem| pem.len()))
            .field(
                "client_cert",
                &self.client_cert.as_ref().map(|_| "<redacted>"),
            )
            .field("insecure_skip_verify", &self.insecure_skip_verify)
            .field("pass_credentials", &self.pass_credentials)
            .finish()
    }
}

/// The size limits of a [`RepositoryClient`], in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// The largest index accepted.
    pub max_index_size: u64,
    /// The largest chart archive accepted.
    pub max_chart_size: u64,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_index_size: MAX_INDEX_SIZE,
            max_chart_size: MAX_CHART_SIZE,
        }
    }
}

/// Why a fetch from a Helm repository failed. URLs are shown without user info.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// A URL does not parse or is not HTTP(S).
    #[error("invalid URL {url}: {reason}")]
    InvalidUrl {
        /// The URL (without user info when it parsed far enough).
        url: String,
        /// Why.
        reason: String,
    },
    /// The CA, client certificate or key of the repository cannot be used.
    #[error("invalid TLS configuration: {what}: {reason}")]
    InvalidTlsConfig {
        /// Which part (`CA certificate`, `client certificate`, `client key`).
        what: &'static str,
        /// Why.
        reason: String,
    },
    /// The server answered with a status other than 2xx.
    #[error("failed to fetch {url}: {status}")]
    Status {
        /// The URL requested.
        url: String,
        /// The status, with its reason phrase (`401 Unauthorized`).
        status: String,
        /// The numeric status.
        code: u16,
    },
    /// The TLS handshake failed (`invalid peer certificate: UnknownIssuer`, ...).
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
    /// The response is larger than the limit.
    #[error("failed to fetch {url}: the {what} is larger than the limit of {limit} bytes")]
    TooLarge {
        /// The URL requested.
        url: String,
        /// `index` or `chart`.
        what: &'static str,
        /// The limit.
        limit: u64,
    },
    /// The chart archive's digest is not the one the index lists.
    #[error("chart {url}: digest mismatch: the index lists {expected}, the archive is {actual}")]
    DigestMismatch {
        /// The chart URL.
        url: String,
        /// The index's digest.
        expected: ChartDigest,
        /// The archive's digest.
        actual: ChartDigest,
    },
}

impl FetchError {
    /// A short machine-readable name of the failure, for conditions and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            FetchError::InvalidUrl { .. } => "InvalidUrl",
            FetchError::InvalidTlsConfig { .. } => "InvalidTlsConfig",
            FetchError::Status { code: 401, .. } | FetchError::Status { code: 403, .. } => {
                "Unauthorized"
            }
            FetchError::Status { .. } => "HttpStatus",
            FetchError::Tls { .. } => "TlsError",
            FetchError::Timeout { .. } => "Timeout",
            FetchError::Connect { .. } => "ConnectError",
            FetchError::Transfer { .. } => "TransferError",
            FetchError::TooLarge { .. } => "TooLarge",
            FetchError::DigestMismatch { .. } => "DigestMismatch",
        }
    }

    /// Whether trying again later may succeed without a change to the objects: timeouts,
    /// connection failures, interrupted transfers, 408, 429 and 5xx answers.
    pub fn is_transient(&self) -> bool {
        match self {
            FetchError::Timeout { .. }
            | FetchError::Connect { .. }
            | FetchError::Transfer { .. } => true,
            FetchError::Status { code, .. } => *code == 408 || *code == 429 || *code >= 500,
            FetchError::InvalidUrl { .. }
            | FetchError::InvalidTlsConfig { .. }
            | FetchError::Tls { .. }
            | FetchError::TooLarge { .. }
            | FetchError::DigestMismatch { .. } => false,
        }
    }
}

/// An HTTP(S) client for one Helm repository.
#[derive(Debug, Clone)]
pub struct RepositoryClient {
    client: reqwest::Client,
    repository: reqwest::Url,
    basic: Option<(String, String)>,
    pass_credentials: bool,
    timeout: Duration,
    limits: Limits,
}

impl RepositoryClient {
    /// A client for the repository at `repository_url` (`http://` or `https://`).
    pub fn new(
        repository_url: &str,
        auth: RepositoryAuth,
        timeout: Duration,
        limits: Limits,
    ) -> Result<RepositoryClient, FetchError> {
        let repository = parse_http_url(repository_url)?;
        let tls = tls_config(&auth)?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .timeout(timeout)
            .user_agent(concat!("flotilla-hub/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| FetchError::InvalidTlsConfig {
                what: "HTTP client",
                reason: error_chain(&e.without_url()),
            })?;
        Ok(RepositoryClient {
            client,
            repository,
            basic: auth.basic,
            pass_credentials: auth.pass_credentials,
            timeout,
            limits,
        })
    }

    /// The repository URL, without user info.
    pub fn repository_url(&self) -> String {
        redacted(&self.repository)
    }

    /// Downloads the repository's `index.yaml` (one GET), with the credentials.
    pub async fn fetch_index(&self) -> Result<Vec<u8>, FetchError> {
        let raw =
            repo_url::index_url(self.repository.as_str()).map_err(|e| FetchError::InvalidUrl {
                url: redacted(&self.repository),
                reason: e.reason,
            })?;
        let url = parse_http_url(&raw)?;
        self.get(url, true, "index", self.limits.max_index_size)
            .await
    }

    /// Downloads a chart archive from `chart_url` (as [`ChartVersion::chart_url`] resolves
    /// it) and checks it against `expected_digest` when the index gives one.
    ///
    /// [`ChartVersion::chart_url`]: super::index::ChartVersion::chart_url
    pub async fn fetch_chart(
        &self,
        chart_url: &str,
        expected_digest: Option<&ChartDigest>,
    ) -> Result<Vec<u8>, FetchError> {
        let url = parse_http_url(chart_url)?;
        let credentials = self.pass_credentials || same_origin(&self.repository, &url);
        let shown = redacted(&url);
        let body = self
            .get(url, credentials, "chart", self.limits.max_chart_size)
            .await?;
        if let Some(expected) = expected_digest {
            let actual = ChartDigest::of_bytes(&body);
            if &actual != expected {
                return Err(FetchError::DigestMismatch {
                    url: shown,
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        Ok(body)
    }

    async fn get(
        &self,
        url: reqwest::Url,
        with_credentials: bool,
        what: &'static str,
        limit: u64,
    ) -> Result<Vec<u8>, FetchError> {
        let shown = redacted(&url);
        let mut request = self.client.get(url);
        if with_credentials && let Some((user, password)) = &self.basic {
            request = request.basic_auth(user, Some(password));
        }
        let mut response = request.send().await.map_err(|e| self.classify(&shown, e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(FetchError::Status {
                url: shown,
                status: status.to_string(),
                code: status.as_u16(),
            });
        }
        let too_large = |url: String| FetchError::TooLarge { url, what, limit };
        if response.content_length().is_some_and(|len| len > limit) {
            return Err(too_large(shown));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| self.classify(&shown, e))?
        {
            if (body.len() + chunk.len()) as u64 > limit {
                return Err(too_large(shown));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    fn classify(&self, url: &str, error: reqwest::Error) -> FetchError {
        let url = url.to_owned();
        match TransportFailure::of(error) {
            TransportFailure::Timeout => FetchError::Timeout {
                url,
                timeout: self.timeout,
            },
            TransportFailure::Tls(reason) => FetchError::Tls { url, reason },
            TransportFailure::Connect(reason) => FetchError::Connect { url, reason },
            TransportFailure::Transfer(reason) => FetchError::Transfer { url, reason },
        }
    }
}

/// How a request failed below HTTP, for the HTTP repository and the OCI clients alike. The
/// checks go in this order: a timeout is one even when a layer below reports it otherwise,
/// and a TLS failure is named before the connect error that carries it.
pub(crate) enum TransportFailure {
    /// The request did not complete in time.
    Timeout,
    /// rustls's reason.
    Tls(String),
    /// The connection could not be made (the cause chain).
    Connect(String),
    /// The request or the body failed otherwise (the cause chain).
    Transfer(String),
}

impl TransportFailure {
    /// Classifies a reqwest error (its URL, which may hold credentials, is dropped).
    pub(crate) fn of(error: reqwest::Error) -> TransportFailure {
        let error = error.without_url();
        if error.is_timeout() {
            return TransportFailure::Timeout;
        }
        if let Some(tls) = find_tls_error(&error) {
            return TransportFailure::Tls(tls.to_string());
        }
        let reason = error_chain(&error);
        if error.is_connect() {
            TransportFailure::Connect(reason)
        } else {
            TransportFailure::Transfer(reason)
        }
    }
}

/// The rustls error somewhere in `error`'s sources (also inside `io::Error`s, whose
/// `source()` skips the error they wrap).
pub(crate) fn find_tls_error<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::Error> {
    let mut current = Some(error);
    while let Some(e) = current {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(tls) = find_tls_error(inner)
        {
            return Some(tls);
        }
        current = e.source();
    }
    None
}

/// `error: source: source...`, each distinct message once ([`crate::util::error_chain`]).
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    crate::util::error_chain(error)
}

fn parse_http_url(raw: &str) -> Result<reqwest::Url, FetchError> {
    let url = reqwest::Url::parse(raw).map_err(|e| FetchError::InvalidUrl {
        url: strip_userinfo_text(raw),
        reason: e.to_string(),
    })?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(FetchError::InvalidUrl {
            url: redacted(&url),
            reason: format!("scheme {:?} is not http or https", url.scheme()),
        });
    }
    Ok(url)
}

/// The URL without user name and password.
pub(crate) fn redacted(url: &reqwest::Url) -> String {
    let mut url = url.clone();
    // Only fails for URLs that cannot have user info, which then have none.
    let _ = url.set_username("");
    let _ = url.set_password(None);
    url.to_string()
}

/// Drops `user:password@` from a URL that did not parse.
pub(crate) fn strip_userinfo_text(raw: &str) -> String {
    let (scheme, rest) = match raw.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), raw),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{}", &rest[at + 1..]),
        None => raw.to_owned(),
    }
}

/// Helm's rule for sending credentials to a chart URL: same scheme and host (with port).
fn same_origin(a: &reqwest::Url, b: &reqwest::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

pub(crate) fn tls_config(auth: &RepositoryAuth) -> Result<rustls::ClientConfig, FetchError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| FetchError::InvalidTlsConfig {
            what: "TLS versions",
            reason: e.to_string(),
        })?;
    let builder = if auth.insecure_skip_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider)))
    } else {
        let mut roots = rustls::RootCertStore::empty();
        // The system roots: unreadable ones are skipped, as Go's SystemCertPool does.
        let native = rustls_native_certs::load_native_certs();
        roots.add_parsable_certificates(native.certs);
        if let Some(pem) = &auth.ca_pem {
            let certs = parse_certs(pem, "CA certificate")?;
            for cert in certs {
                roots.add(cert).map_err(|e| FetchError::InvalidTlsConfig {
                    what: "CA certificate",
                    reason: e.to_string(),
                })?;
            }
        }
        builder.with_root_certificates(roots)
    };
    match &auth.client_cert {
        None => Ok(builder.with_no_client_auth()),
        Some((cert_pem, key_pem)) => {
            let certs = parse_certs(cert_pem, "client certificate")?;
            let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
                FetchError::InvalidTlsConfig {
                    what: "client key",
                    reason: e.to_string(),
                }
            })?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| FetchError::InvalidTlsConfig {
                    what: "client certificate",
                    reason: e.to_string(),
                })
        }
    }
}

fn parse_certs(pem: &[u8], what: &'static str) -> Result<Vec<CertificateDer<'static>>, FetchError> {
    let certs = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| FetchError::InvalidTlsConfig {
            what,
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(FetchError::InvalidTlsConfig {
            what,
            reason: "no PEM certificate found".to_owned(),
        });
    }
    Ok(certs)
}

/// `insecure_skip_verify`: any certificate is accepted; handshake signatures are still
/// checked, so the peer holds the key of the certificate it sent.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_go_only_to_the_repository_origin() {
        let repo = parse_http_url("https://charts.example.com/stable").expect("valid");
        let same =
            parse_http_url("https://charts.example.com:443/stable/a-1.0.0.tgz").expect("valid");
        let other_host = parse_http_url("https://cdn.example.com/a-1.0.0.tgz").expect("valid");
        let other_scheme = parse_http_url("http://charts.example.com/a-1.0.0.tgz").expect("valid");
        let other_port = parse_http_url("https://charts.example.com:8443/a.tgz").expect("valid");
        assert!(same_origin(&repo, &same));
        assert!(!same_origin(&repo, &other_host));
        assert!(!same_origin(&repo, &other_scheme));
        assert!(!same_origin(&repo, &other_port));
    }

    #[test]
    fn urls_in_errors_have_no_user_info() {
        let url = parse_http_url("https://bob:s3cret@charts.example.com/x").expect("valid");
        assert_eq!(redacted(&url), "https://charts.example.com/x");
        assert_eq!(
            strip_userinfo_text("https://bob:s3cret@exa mple/x"),
            "https://exa mple/x"
        );
        let err = parse_http_url("ftp://bob:s3cret@charts.example.com/").expect_err("not http");
        assert!(!err.to_string().contains("s3cret"), "{err}");
    }

    #[test]
    fn the_debug_form_of_auth_hides_the_password_and_key() {
        let auth = RepositoryAuth {
            basic: Some(("bob".to_owned(), "s3cret".to_owned())),
            client_cert: Some((b"CERT".to_vec(), b"PRIVATEKEY".to_vec())),
            ..RepositoryAuth::default()
        };
        let text = format!("{auth:?}");
        assert!(text.contains("bob"), "{text}");
        assert!(
            !text.contains("s3cret") && !text.contains("PRIVATEKEY"),
            "{text}"
        );
    }

    #[test]
    fn a_ca_that_is_not_pem_is_refused_naming_the_ca() {
        let auth = RepositoryAuth {
            ca_pem: Some(b"not a certificate".to_vec()),
            ..RepositoryAuth::default()
        };
        let err = tls_config(&auth).expect_err("no certificate");
        assert_eq!(
            err.to_string(),
            "invalid TLS configuration: CA certificate: no PEM certificate found"
        );
        assert!(!err.is_transient());
    }
}
