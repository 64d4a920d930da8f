//! TLS to the hub: kubeadm-style discovery with a CA pin for `Register`, then mutual TLS with
//! the CA the hub returned for the session.
//!
//! - [`CaPin`]: `sha256:<hex>` of a CA certificate's SubjectPublicKeyInfo.
//! - [`pinned_config`]: trusts the hub only if the chain it presents contains a CA whose
//!   pin matches, and the server certificate verifies against that CA for the hub's name.
//!   Nothing (the token included) is sent before that handshake succeeds.
//! - [`session_config`]: the hub CA as the only root, and the agent's client certificate.
//! - [`channel`]: a tonic channel over a TLS stream made with one of these configurations; a
//!   refused TCP connection (nothing listens: the hub is down) is
//!   [`SessionError::Unreachable`], anything else [`SessionError::Connect`].

use std::sync::Arc;

use flotilla_proto::v1::hub_client::HubClient;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject as _;
use rustls_pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use tonic::transport::{Channel, Endpoint};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::SessionError;

/// `sha256:<hex>` of a CA's SubjectPublicKeyInfo (kubeadm's `--discovery-token-ca-cert-hash`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CaPin(String);

impl CaPin {
    /// Parses `sha256:<64 hex>`.
    pub fn parse(s: &str) -> Result<Self, SessionError> {
        let bad = || SessionError::Config {
            field: "--ca-hash",
            message: "expected \"sha256:\" followed by 64 hex digits (the hub's CA pin)".into(),
        };
        let hex = s.strip_prefix("sha256:").ok_or_else(bad)?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(Self(format!("sha256:{}", hex.to_ascii_lowercase())))
    }

    /// The pin of a DER certificate, `None` when it does not parse.
    pub fn of_certificate(der: &[u8]) -> Option<Self> {
        let (_, cert) = X509Certificate::from_der(der).ok()?;
        let digest =
            ring::digest::digest(&ring::digest::SHA256, cert.tbs_certificate.subject_pki.raw);
        let mut s = String::from("sha256:");
        for b in digest.as_ref() {
            s.push_str(&format!("{b:02x}"));
        }
        Some(Self(s))
    }

    /// The text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CaPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Verifies the hub against a CA pin.
#[derive(Debug)]
struct PinnedCa {
    pin: CaPin,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedCa {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let ca = intermediates
            .iter()
            .find(|c| CaPin::of_certificate(c.as_ref()).as_ref() == Some(&self.pin))
            .ok_or_else(|| {
                rustls::Error::General(format!(
                    "the hub presented no CA matching the CA pin {}",
                    self.pin
                ))
            })?;
        let mut roots = RootCertStore::empty();
        roots.add(ca.clone().into_owned())?;
        let verifier =
            WebPkiServerVerifier::builder_with_provider(Arc::new(roots), self.provider.clone())
                .build()
                .map_err(|e| rustls::Error::General(e.to_string()))?;
        verifier.verify_server_cert(end_entity, &[], server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

fn tls_error(message: impl ToString) -> SessionError {
    SessionError::Tls {
        message: message.to_string(),
    }
}

/// A client configuration trusting only a hub whose CA matches `pin`; no client certificate.
pub fn pinned_config(pin: &CaPin) -> Result<ClientConfig, SessionError> {
    let provider = provider();
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(PinnedCa {
            pin: pin.clone(),
            provider,
        }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// A client configuration trusting the hub CA `ca_pem` and presenting `cert_pem` with
/// `key_pem` (secret).
pub fn session_config(
    ca_pem: &str,
    cert_pem: &str,
    key_pem: &str,
) -> Result<ClientConfig, SessionError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
        roots
            .add(cert.map_err(|_| tls_error("the stored hub CA is not PEM"))?)
            .map_err(tls_error)?;
    }
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|_| tls_error("the stored client certificate is not PEM"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes())
        .map_err(|_| tls_error("the stored client key is not a PEM private key"))?;
    let mut config = ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?
        .with_root_certificates(roots)
        .with_client_auth_cert(chain, key)
        .map_err(tls_error)?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Where the hub is: `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubAddress {
    /// Host name or IP address (what its certificate must name).
    pub host: String,
    /// Port.
    pub port: u16,
}

impl HubAddress {
    /// Parses `https://host[:port]` (port 443 by default).
    pub fn parse(url: &str) -> Result<Self, SessionError> {
        let bad = |message: &str| SessionError::Config {
            field: "--hub",
            message: message.to_owned(),
        };
        let uri: http::Uri = url.parse().map_err(|_| bad("not a URL"))?;
        if uri.scheme_str() != Some("https") {
            return Err(bad("the hub URL must be https://host[:port]"));
        }
        let host = uri.host().ok_or_else(|| bad("the hub URL has no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_owned();
        Ok(Self {
            host,
            port: uri.port_u16().unwrap_or(443),
        })
    }

    /// The URL, `https://host:port`.
    pub fn url(&self) -> String {
        if self.host.contains(':') {
            format!("https://[{}]:{}", self.host, self.port)
        } else {
            format!("https://{}:{}", self.host, self.port)
        }
    }
}

type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send>>;

/// Dials the hub and runs the TLS handshake with a given configuration.
#[derive(Clone)]
struct Connector {
    config: Arc<ClientConfig>,
    address: HubAddress,
}

impl tower::Service<http::Uri> for Connector {
    type Response = hyper_util::rt::TokioIo<tokio_rustls::client::TlsStream<tokio::net::TcpStream>>;
    type Error = std::io::Error;
    type Future = BoxFuture<Result<Self::Response, Self::Error>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let config = self.config.clone();
        let address = self.address.clone();
        Box::pin(async move {
            let name = ServerName::try_from(address.host.clone())
                .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
            let tcp = tokio::net::TcpStream::connect((address.host.as_str(), address.port)).await?;
            tcp.set_nodelay(true)?;
            let tls = tokio_rustls::TlsConnector::from(config)
                .connect(name, tcp)
                .await?;
            Ok(hyper_util::rt::TokioIo::new(tls))
        })
    }
}

/// The largest hub message the agent decodes (a plan with its values and a chart archive of
/// one `GetChart` chunk; the hub encodes no larger).
pub const MAX_HUB_MESSAGE: usize = 16 << 20;
/// The largest message the agent encodes (the hub decodes no larger).
pub const MAX_AGENT_MESSAGE: usize = 4 << 20;
/// Requests the agent has starting at once on its channel (a session, chart transfers).
pub const MAX_CONCURRENT_REQUESTS: usize = 16;
/// The largest header list the agent takes from the hub.
pub const MAX_HEADER_LIST_SIZE: u32 = 16 << 10;

/// The `Hub` client on `channel`, with the agent's message-size limits.
pub fn hub_client(channel: Channel) -> HubClient<Channel> {
    HubClient::new(channel)
        .max_decoding_message_size(MAX_HUB_MESSAGE)
        .max_encoding_message_size(MAX_AGENT_MESSAGE)
}

/// A channel to the hub over TLS made with `config` (connects at once, so a refused hub is
/// an error here; the TCP connection and the TLS handshake together get 10 s).
pub async fn channel(address: &HubAddress, config: ClientConfig) -> Result<Channel, SessionError> {
    // The connector does the TLS; the URI only names the authority for HTTP/2.
    let endpoint = Endpoint::from_shared(format!("http://{}:{}", address.host, address.port))
        .map_err(|e| SessionError::Config {
            field: "--hub",
            message: e.to_string(),
        })?
        .connect_timeout(std::time::Duration::from_secs(10))
        .http2_keep_alive_interval(std::time::Duration::from_secs(30))
        .keep_alive_timeout(std::time::Duration::from_secs(10))
        .keep_alive_while_idle(true)
        .concurrency_limit(MAX_CONCURRENT_REQUESTS)
        .http2_max_header_list_size(MAX_HEADER_LIST_SIZE);
    endpoint
        .connect_with_connector(Connector {
            config: Arc::new(config),
            address: address.clone(),
        })
        .await
        .map_err(|e| {
            if refused(&e) {
                SessionError::Unreachable {
                    hub: address.url(),
                    message: error_chain(&e),
                }
            } else {
                SessionError::Connect {
                    hub: address.url(),
                    message: error_chain(&e),
                }
            }
        })
}

/// Whether `e` comes from a refused TCP connection: nothing listens at the address.
fn refused(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

/// An error with its causes, `: `-joined ([`crate::kube::error_chain`]).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    crate::kube::error_chain(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hub_url_must_be_https_and_defaults_to_port_443() {
        assert_eq!(
            HubAddress::parse("https://hub.example").unwrap(),
            HubAddress {
                host: "hub.example".into(),
                port: 443
            }
        );
        let v6 = HubAddress::parse("https://[::1]:8443").unwrap();
        assert_eq!(v6.host, "::1");
        assert_eq!(v6.url(), "https://[::1]:8443");
        assert!(HubAddress::parse("http://hub.example").is_err());
        assert!(HubAddress::parse("hub.example:443").is_err());
    }

    #[test]
    fn a_ca_pin_is_sha256_and_64_hex_digits_and_matches_the_certificates_public_key() {
        assert!(CaPin::parse("sha256:abc").is_err());
        assert!(CaPin::parse(&format!("md5:{}", "0".repeat(64))).is_err());
        let upper = format!("sha256:{}", "AB".repeat(32));
        assert_eq!(
            CaPin::parse(&upper).unwrap().as_str(),
            format!("sha256:{}", "ab".repeat(32))
        );
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let pin = CaPin::of_certificate(cert.der()).unwrap();
        let spki = rcgen::PublicKeyData::subject_public_key_info(&key);
        let digest = ring::digest::digest(&ring::digest::SHA256, &spki);
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(pin.as_str(), format!("sha256:{hex}"));
        assert_eq!(CaPin::parse(pin.as_str()).unwrap(), pin);
    }

    #[tokio::test]
    async fn a_refused_connection_is_unreachable_and_a_hub_that_fails_the_handshake_is_not() {
        let config =
            || pinned_config(&CaPin::parse(&format!("sha256:{}", "0".repeat(64))).unwrap());
        // Nothing listens on a port just freed.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let nobody = HubAddress::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        match channel(&nobody, config().unwrap()).await {
            Err(e @ SessionError::Unreachable { .. }) => {
                assert_eq!(e.kind(), "unreachable");
                assert!(e.is_transient());
            }
            other => panic!("expected Unreachable, got {other:?}"),
        }
        // Something listens but speaks no TLS: the hub answered, and failed.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let _ =
                    tokio::io::AsyncWriteExt::write_all(&mut s, b"HTTP/1.1 400 Bad\r\n\r\n").await;
            }
        });
        let plain = HubAddress::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        match channel(&plain, config().unwrap()).await {
            Err(SessionError::Connect { .. }) => {}
            other => panic!("expected Connect, got {other:?}"),
        }
    }
}
