//! The hub's PKI: its CA, the gRPC server certificate, and the agents' client certificates.
//!
//! - **CA**: read from a `kubernetes.io/tls` Secret (`tls.crt`, `tls.key`; what cert-manager
//!   writes for a CA Issuer), or generated into it on first start (ECDSA P-256, ten years).
//!   [`HubCa::load_or_create`] does either; a user-provided Secret is never overwritten.
//! - **CA pin**: `sha256:<hex>` of the CA certificate's DER SubjectPublicKeyInfo, as
//!   kubeadm's `--discovery-token-ca-cert-hash`. The agent checks it against the chain the
//!   hub presents before it sends its bootstrap token.
//! - **Server certificate**: issued by the CA for the configured SANs (DNS names or IP
//!   addresses) at each start; served with the CA certificate as its chain.
//! - **Client certificates**: issued from the agent's CSR (only its public key is taken;
//!   everything else is the hub's), `clientAuth`, 24 hours unless configured, backdated
//!   for clock skew (five minutes, or a tenth of a shorter lifetime). A cluster's identity is in two URI SANs:
//!   `spiffe://flotilla/cluster/<ManagedCluster name>` (the identity) and
//!   `urn:uuid:<ManagedCluster metadata.uid>` (the incarnation: a certificate of a deleted
//!   ManagedCluster does not come back to life when one of the same name is created).
//!   [`ClusterIdentity::from_der`] reads them back, with the certificate's serial (lower-case
//!   hex) and its key's [`KeyFingerprint`] (`sha256:<hex>` of the SubjectPublicKeyInfo, the
//!   form `flotilla get clusters -o wide`, `cluster approve` and `cluster revoke` use).

use std::time::{Duration, SystemTime};

use flotilla_core::ids::ClusterId;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, CertificateSigningRequestParams, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType, SerialNumber,
};
use ring::rand::SecureRandom as _;
use x509_parser::prelude::{FromDer as _, GeneralName, X509Certificate};

/// Key of the certificate in the CA Secret.
pub const TLS_CERT_KEY: &str = "tls.crt";
/// Key of the private key in the CA Secret.
pub const TLS_KEY_KEY: &str = "tls.key";
/// The URI SAN prefix naming a cluster in its client certificate.
pub const CLUSTER_URI_PREFIX: &str = "spiffe://flotilla/cluster/";
/// The URI SAN prefix of the ManagedCluster's uid in a client certificate.
pub const INCARNATION_URI_PREFIX: &str = "urn:uuid:";
/// The default lifetime of a client certificate.
pub const DEFAULT_CLIENT_LIFETIME: Duration = Duration::from_secs(24 * 3600);

/// Why a PKI operation failed. Never carries key material.
#[derive(Debug, thiserror::Error)]
pub enum PkiError {
    /// Generating or signing failed.
    #[error("{what}")]
    Generate {
        /// What was being made.
        what: &'static str,
        /// rcgen's error.
        #[source]
        source: rcgen::Error,
    },
    /// The CA Secret lacks a key or holds something that is not PEM of the right kind.
    #[error("CA Secret {namespace}/{name}: {message}")]
    CaSecret {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// What is wrong (never its content).
        message: String,
    },
    /// The Kubernetes API failed.
    #[error("CA Secret {namespace}/{name}: {}", crate::util::error_chain(source))]
    Kube {
        /// Namespace of the Secret.
        namespace: String,
        /// Name of the Secret.
        name: String,
        /// The API error.
        #[source]
        source: kube::Error,
    },
    /// A certificate or CSR could not be parsed or is not what it should be.
    #[error("{what}: {message}")]
    Invalid {
        /// Which input.
        what: &'static str,
        /// What is wrong with it.
        message: String,
    },
}

impl PkiError {
    /// A bounded label for metrics and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Generate { .. } => "generate",
            Self::CaSecret { .. } => "caSecret",
            Self::Kube { .. } => "kube",
            Self::Invalid { .. } => "invalid",
        }
    }

    /// Whether retrying may help (the API was unreachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Kube { .. })
    }

    fn invalid(what: &'static str, message: impl ToString) -> Self {
        Self::Invalid {
            what,
            message: message.to_string(),
        }
    }
}

fn generate(what: &'static str) -> impl FnOnce(rcgen::Error) -> PkiError {
    move |source| PkiError::Generate { what, source }
}

/// Lower-case hex of `bytes`.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// Lower-case hex SHA-256 of `bytes` (token hashes, pins, fingerprints).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(ring::digest::digest(&ring::digest::SHA256, bytes).as_ref())
}

/// `sha256:<hex>` of a CA's SubjectPublicKeyInfo (kubeadm's CA certificate hash).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CaPin(String);

impl CaPin {
    /// The pin of a DER SubjectPublicKeyInfo.
    pub fn of_spki(spki_der: &[u8]) -> Self {
        Self(format!("sha256:{}", sha256_hex(spki_der)))
    }

    /// The pin of a DER certificate's public key.
    pub fn of_certificate(cert_der: &[u8]) -> Result<Self, PkiError> {
        let (_, cert) = X509Certificate::from_der(cert_der)
            .map_err(|e| PkiError::invalid("CA certificate", e))?;
        Ok(Self::of_spki(cert.tbs_certificate.subject_pki.raw))
    }

    /// Parses `sha256:<64 hex>` (upper-case hex is accepted and lowered).
    pub fn parse(s: &str) -> Result<Self, PkiError> {
        let hex = s.strip_prefix("sha256:").ok_or_else(|| {
            PkiError::invalid("CA pin", "must start with \"sha256:\" (as kubeadm's hash)")
        })?;
        if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(PkiError::invalid(
                "CA pin",
                "must be \"sha256:\" followed by 64 hex digits",
            ));
        }
        Ok(Self(format!("sha256:{}", hex.to_ascii_lowercase())))
    }

    /// The text, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for CaPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// `sha256:<hex>` of a key's DER SubjectPublicKeyInfo: which key an agent holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KeyFingerprint(String);

impl KeyFingerprint {
    /// The fingerprint of a DER SubjectPublicKeyInfo.
    pub fn of_spki(spki_der: &[u8]) -> Self {
        Self(format!("sha256:{}", sha256_hex(spki_der)))
    }

    /// The fingerprint of the key of a CSR (PEM); the CSR's signature is checked.
    pub fn of_csr(csr_pem: &str) -> Result<Self, PkiError> {
        use rcgen::PublicKeyData as _;
        let csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::invalid("certificate signing request", e))?;
        Ok(Self::of_spki(&csr.public_key.subject_public_key_info()))
    }

    /// Parses `sha256:<64 hex>` (upper-case hex is accepted and lowered).
    pub fn parse(s: &str) -> Result<Self, PkiError> {
        CaPin::parse(s).map(|p| Self(p.0)).map_err(|_| {
            PkiError::invalid(
                "key fingerprint",
                "must be \"sha256:\" followed by 64 hex digits",
            )
        })
    }

    /// The text, `sha256:<hex>`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for KeyFingerprint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// A certificate serial as `flotilla cluster revoke --serial` takes it: lower-case hex,
/// colons and a `0x` prefix dropped, leading zeros trimmed.
pub fn normalize_serial(s: &str) -> Result<String, PkiError> {
    let s = s.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    let digits: String = s.chars().filter(|c| *c != ':').collect();
    if digits.is_empty() || digits.len() > 64 || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(PkiError::invalid(
            "serial",
            "must be hexadecimal digits (colons allowed), as `flotilla get clusters -o wide` shows it",
        ));
    }
    let trimmed = digits.trim_start_matches('0');
    Ok(if trimmed.is_empty() {
        "0".to_owned()
    } else {
        trimmed.to_ascii_lowercase()
    })
}

/// A certificate and its private key, PEM (the key is secret: never log it).
#[derive(Clone)]
pub struct CertifiedKeyPem {
    /// The certificate chain, leaf first.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for CertifiedKeyPem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CertifiedKeyPem")
            .field("cert_pem", &self.cert_pem)
            .field("key_pem", &"<redacted>")
            .finish()
    }
}

/// A client certificate issued to an agent.
#[derive(Debug, Clone)]
pub struct IssuedCertificate {
    /// The certificate, PEM.
    pub pem: String,
    /// When it expires.
    pub not_after: SystemTime,
    /// Its serial ([`normalize_serial`]'s form).
    pub serial: String,
    /// Its key.
    pub key_fingerprint: KeyFingerprint,
}

/// The hub's certificate authority.
pub struct HubCa {
    cert_pem: String,
    cert_der: Vec<u8>,
    issuer: Issuer<'static, KeyPair>,
    pin: CaPin,
}

impl std::fmt::Debug for HubCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubCa")
            .field("pin", &self.pin)
            .finish_non_exhaustive()
    }
}

fn random_serial() -> Result<SerialNumber, PkiError> {
    let mut bytes = [0u8; 16];
    ring::rand::SystemRandom::new()
        .fill(&mut bytes)
        .map_err(|_| PkiError::invalid("serial number", "the system random source failed"))?;
    // Positive: clear the top bit.
    bytes[0] &= 0x7f;
    Ok(SerialNumber::from_slice(&bytes))
}

fn offset(t: SystemTime) -> time::OffsetDateTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    time::OffsetDateTime::from_unix_timestamp(i64::try_from(secs).unwrap_or(i64::MAX))
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH)
}

impl HubCa {
    /// A new self-signed CA (ECDSA P-256, valid ten years).
    pub fn generate(common_name: &str) -> Result<Self, PkiError> {
        let key = KeyPair::generate().map_err(generate("CA key"))?;
        let mut params = CertificateParams::new(Vec::<String>::new()).map_err(generate("CA"))?;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = offset(now - Duration::from_secs(300));
        params.not_after = offset(now + Duration::from_secs(10 * 365 * 24 * 3600));
        params.serial_number = Some(random_serial()?);
        let cert = params
            .self_signed(&key)
            .map_err(generate("CA certificate"))?;
        Self::from_pem(&cert.pem(), &key.serialize_pem())
    }

    /// A CA from its certificate and key (PEM).
    pub fn from_pem(cert_pem: &str, key_pem: &str) -> Result<Self, PkiError> {
        let key = KeyPair::from_pem(key_pem)
            .map_err(|_| PkiError::invalid("CA key", "not a PEM private key rcgen can use"))?;
        let cert_der = first_pem_der(cert_pem, "CA certificate")?;
        let pin = CaPin::of_certificate(&cert_der)?;
        let issuer = Issuer::from_ca_cert_der(&cert_der.clone().into(), key)
            .map_err(|e| PkiError::invalid("CA certificate", e))?;
        Ok(Self {
            cert_pem: cert_pem.to_owned(),
            cert_der,
            issuer,
            pin,
        })
    }

    /// The CA of the `kubernetes.io/tls` Secret `namespace/name`, generated into it when
    /// the Secret does not exist (the hub's first start).
    pub async fn load_or_create(
        client: kube::Client,
        namespace: &str,
        name: &str,
    ) -> Result<Self, PkiError> {
        let api: Api<Secret> = Api::namespaced(client, namespace);
        let kube_err = |source| PkiError::Kube {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        };
        if let Some(secret) = api.get_opt(name).await.map_err(kube_err)? {
            return Self::from_secret(namespace, name, &secret);
        }
        let ca = Self::generate("flotilla-hub-ca")?;
        let key_pem = ca.issuer.key().serialize_pem();
        let secret = Secret {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(namespace.to_owned()),
                labels: Some(
                    [(
                        "app.kubernetes.io/managed-by".to_owned(),
                        "flotilla-hub".to_owned(),
                    )]
                    .into(),
                ),
                ..ObjectMeta::default()
            },
            type_: Some("kubernetes.io/tls".to_owned()),
            data: Some(
                [
                    (
                        TLS_CERT_KEY.to_owned(),
                        ByteString(ca.cert_pem.clone().into_bytes()),
                    ),
                    (TLS_KEY_KEY.to_owned(), ByteString(key_pem.into_bytes())),
                ]
                .into(),
            ),
            ..Secret::default()
        };
        match api.create(&PostParams::default(), &secret).await {
            Ok(_) => {
                tracing::info!(namespace, name, pin = %ca.pin, "generated the hub CA");
                Ok(ca)
            }
            // Another replica made it first: use theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let secret = api.get(name).await.map_err(kube_err)?;
                Self::from_secret(namespace, name, &secret)
            }
            Err(e) => Err(kube_err(e)),
        }
    }

    fn from_secret(namespace: &str, name: &str, secret: &Secret) -> Result<Self, PkiError> {
        let field = |key: &str| -> Result<String, PkiError> {
            let bytes = secret
                .data
                .as_ref()
                .and_then(|d| d.get(key))
                .ok_or_else(|| PkiError::CaSecret {
                    namespace: namespace.to_owned(),
                    name: name.to_owned(),
                    message: format!("has no {key:?}"),
                })?;
            String::from_utf8(bytes.0.clone()).map_err(|_| PkiError::CaSecret {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                message: format!("{key:?} is not UTF-8 PEM"),
            })
        };
        Self::from_pem(&field(TLS_CERT_KEY)?, &field(TLS_KEY_KEY)?).map_err(|e| {
            PkiError::CaSecret {
                namespace: namespace.to_owned(),
                name: name.to_owned(),
                message: e.to_string(),
            }
        })
    }

    /// The CA certificate, PEM.
    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    /// The CA certificate, DER.
    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// The CA pin agents are given.
    pub fn pin(&self) -> &CaPin {
        &self.pin
    }

    /// A serving certificate for `sans` (DNS names or IP addresses), with a fresh key; the
    /// chain is the leaf then the CA.
    pub fn server_certificate(&self, sans: &[String]) -> Result<CertifiedKeyPem, PkiError> {
        let key = KeyPair::generate().map_err(generate("server key"))?;
        let mut params =
            CertificateParams::new(sans.to_vec()).map_err(generate("server certificate"))?;
        params
            .distinguished_name
            .push(DnType::CommonName, "flotilla-hub");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = SystemTime::now();
        params.not_before = offset(now - Duration::from_secs(300));
        params.not_after = offset(now + Duration::from_secs(365 * 24 * 3600));
        params.serial_number = Some(random_serial()?);
        let cert = params
            .signed_by(&key, &self.issuer)
            .map_err(generate("server certificate"))?;
        Ok(CertifiedKeyPem {
            cert_pem: format!("{}{}", cert.pem(), self.cert_pem),
            key_pem: key.serialize_pem(),
        })
    }

    /// A client certificate for `cluster` (incarnation `uid`) with the public key of
    /// `csr_pem`, valid `lifetime`. The CSR's signature is checked; its subject and
    /// extensions are ignored.
    pub fn sign_client(
        &self,
        csr_pem: &str,
        cluster: &ClusterId,
        uid: &str,
        lifetime: Duration,
    ) -> Result<IssuedCertificate, PkiError> {
        let csr = CertificateSigningRequestParams::from_pem(csr_pem)
            .map_err(|e| PkiError::invalid("certificate signing request", e))?;
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, cluster.as_str());
        params
            .distinguished_name
            .push(DnType::OrganizationName, "flotilla:clusters");
        params.subject_alt_names = vec![
            SanType::URI(
                format!("{CLUSTER_URI_PREFIX}{cluster}")
                    .try_into()
                    .map_err(generate("client certificate"))?,
            ),
            SanType::URI(
                format!("{INCARNATION_URI_PREFIX}{uid}")
                    .try_into()
                    .map_err(generate("client certificate"))?,
            ),
        ];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let now = SystemTime::now();
        let not_after = now + lifetime;
        // Backdated for clock skew, by at most a tenth of the lifetime so that the agent's
        // "renew at two thirds" stays in the future for short lifetimes.
        params.not_before = offset(now - (lifetime / 10).min(Duration::from_secs(300)));
        params.not_after = offset(not_after);
        params.serial_number = Some(random_serial()?);
        let cert = params
            .signed_by(&csr.public_key, &self.issuer)
            .map_err(generate("client certificate"))?;
        // Serial and fingerprint as a peer's certificate is read back: one form for both.
        let facts = ClusterIdentity::from_der(cert.der().as_ref())?;
        Ok(IssuedCertificate {
            pem: cert.pem(),
            not_after: facts.not_after,
            serial: facts.serial,
            key_fingerprint: facts.key_fingerprint,
        })
    }
}

/// The DER of the first PEM block of `pem`.
pub fn first_pem_der(pem: &str, what: &'static str) -> Result<Vec<u8>, PkiError> {
    let (_, block) =
        x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| PkiError::invalid(what, e))?;
    Ok(block.contents)
}

/// Who a client certificate (already verified against the hub CA) names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The ManagedCluster.
    pub cluster: ClusterId,
    /// `metadata.uid` of the ManagedCluster the certificate was issued for.
    pub incarnation: String,
    /// When the certificate expires.
    pub not_after: SystemTime,
    /// The certificate's serial ([`normalize_serial`]'s form).
    pub serial: String,
    /// The certificate's key.
    pub key_fingerprint: KeyFingerprint,
}

impl ClusterIdentity {
    /// Reads the identity out of a DER client certificate's URI SANs.
    pub fn from_der(cert_der: &[u8]) -> Result<Self, PkiError> {
        let (_, cert) = X509Certificate::from_der(cert_der)
            .map_err(|e| PkiError::invalid("client certificate", e))?;
        let mut cluster = None;
        let mut incarnation = None;
        if let Ok(Some(san)) = cert.subject_alternative_name() {
            for name in &san.value.general_names {
                if let GeneralName::URI(uri) = name {
                    if let Some(c) = uri.strip_prefix(CLUSTER_URI_PREFIX) {
                        cluster = Some(c.to_owned());
                    } else if let Some(u) = uri.strip_prefix(INCARNATION_URI_PREFIX) {
                        incarnation = Some(u.to_owned());
                    }
                }
            }
        }
        let cluster = cluster.ok_or_else(|| {
            PkiError::invalid(
                "client certificate",
                format!("names no cluster (no URI SAN {CLUSTER_URI_PREFIX}<name>)"),
            )
        })?;
        let cluster =
            ClusterId::new(cluster).map_err(|e| PkiError::invalid("client certificate", e))?;
        let incarnation = incarnation.ok_or_else(|| {
            PkiError::invalid(
                "client certificate",
                "has no ManagedCluster uid (urn:uuid:)",
            )
        })?;
        let not_after = SystemTime::UNIX_EPOCH
            + Duration::from_secs(
                u64::try_from(cert.validity().not_after.timestamp()).unwrap_or(0),
            );
        let serial = normalize_serial(&hex(cert.raw_serial()))
            .map_err(|e| PkiError::invalid("client certificate", e))?;
        Ok(Self {
            cluster,
            incarnation,
            not_after,
            serial,
            key_fingerprint: KeyFingerprint::of_spki(cert.tbs_certificate.subject_pki.raw),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;

    #[test]
    fn a_client_certificate_names_its_cluster_and_incarnation() {
        let ca = HubCa::generate("test").unwrap();
        let key = KeyPair::generate().unwrap();
        let csr = CertificateParams::new(vec!["ignored.example".to_owned()])
            .unwrap()
            .serialize_request(&key)
            .unwrap()
            .pem()
            .unwrap();
        let cluster = ClusterId::new("edge-1").unwrap();
        let issued = ca
            .sign_client(&csr, &cluster, "1234", Duration::from_secs(3600))
            .unwrap();
        let der = first_pem_der(&issued.pem, "cert").unwrap();
        let id = ClusterIdentity::from_der(&der).unwrap();
        assert_eq!(id.cluster, cluster);
        assert_eq!(id.incarnation, "1234");
        assert_eq!(id.serial, issued.serial);
        assert_eq!(id.key_fingerprint, issued.key_fingerprint);
        assert_eq!(KeyFingerprint::of_csr(&csr).unwrap(), id.key_fingerprint);
        assert_eq!(
            id.key_fingerprint,
            KeyFingerprint::of_spki(&rcgen::PublicKeyData::subject_public_key_info(&key))
        );
        let left = id.not_after.duration_since(SystemTime::now()).unwrap();
        assert!(left > Duration::from_secs(3500) && left <= Duration::from_secs(3600));
    }

    #[test]
    fn the_pin_is_the_sha256_of_the_public_key_info_and_parses_back() {
        let ca = HubCa::generate("test").unwrap();
        let spki = ca.issuer.key().subject_public_key_info();
        assert_eq!(ca.pin(), &CaPin::of_spki(&spki));
        assert_eq!(&CaPin::parse(ca.pin().as_str()).unwrap(), ca.pin());
        assert_eq!(
            CaPin::parse(
                &ca.pin()
                    .as_str()
                    .to_ascii_uppercase()
                    .replace("SHA256", "sha256")
            )
            .unwrap(),
            *ca.pin()
        );
        assert!(CaPin::parse("md5:00").is_err());
        assert!(CaPin::parse("sha256:xyz").is_err());
    }

    #[test]
    fn serials_are_read_in_one_form_and_junk_is_refused() {
        for (text, want) in [
            ("0A:1b:00", "a1b00"),
            ("0x00ff", "ff"),
            ("00", "0"),
            ("DEADbeef", "deadbeef"),
        ] {
            assert_eq!(normalize_serial(text).unwrap(), want, "{text}");
        }
        for bad in ["", ":", "xyz", "0x", &"f".repeat(65)] {
            assert!(normalize_serial(bad).is_err(), "{bad}");
        }
        assert!(KeyFingerprint::parse("sha256:zz").is_err());
    }

    #[test]
    fn a_ca_survives_its_pem_round_trip() {
        let ca = HubCa::generate("test").unwrap();
        let again = HubCa::from_pem(ca.cert_pem(), &ca.issuer.key().serialize_pem()).unwrap();
        assert_eq!(again.pin(), ca.pin());
        let server = again
            .server_certificate(&["127.0.0.1".into(), "hub.example".into()])
            .unwrap();
        assert!(server.cert_pem.ends_with(ca.cert_pem()));
        assert!(!format!("{server:?}").contains("PRIVATE KEY"));
    }
}
