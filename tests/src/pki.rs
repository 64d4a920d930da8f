//! Certificates for one local test cluster: a CA, the API server's serving certificate, an
//! admin client certificate (group `system:masters`) and the service-account signing key; and
//! for the test servers of chart sources ([`ServerTls`]): a CA, a loopback serving certificate
//! and a client certificate of the same CA (for servers that require one), and client
//! certificates of no known CA ([`ClientCert::self_signed`]).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType,
};

/// Paths of the PEM files written by [`Pki::write`].
#[derive(Debug, Clone)]
pub struct Pki {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub sa_key: PathBuf,
    pub sa_pub: PathBuf,
}

impl Pki {
    /// Generates fresh keys and certificates into `dir`.
    pub fn write(dir: &Path) -> anyhow::Result<Pki> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let pki = Pki {
            ca_cert: dir.join("ca.crt"),
            ca_key: dir.join("ca.key"),
            serving_cert: dir.join("apiserver.crt"),
            serving_key: dir.join("apiserver.key"),
            admin_cert: dir.join("admin.crt"),
            admin_key: dir.join("admin.key"),
            sa_key: dir.join("sa.key"),
            sa_pub: dir.join("sa.pub"),
        };

        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "flotilla-test-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        write(&pki.ca_cert, &ca_cert.pem())?;
        write(&pki.ca_key, &ca_key.serialize_pem())?;
        let ca = Issuer::new(ca_params, ca_key);

        let serving_key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec![
            "localhost".to_owned(),
            "kubernetes".to_owned(),
            "kubernetes.default".to_owned(),
            "kubernetes.default.svc".to_owned(),
            "kubernetes.default.svc.cluster.local".to_owned(),
        ])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))));
        serving
            .distinguished_name
            .push(DnType::CommonName, "kube-apiserver");
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving_cert = serving.signed_by(&serving_key, &ca)?;
        write(&pki.serving_cert, &serving_cert.pem())?;
        write(&pki.serving_key, &serving_key.serialize_pem())?;

        let admin_key = KeyPair::generate()?;
        let mut admin = CertificateParams::new(Vec::<String>::new())?;
        admin
            .distinguished_name
            .push(DnType::CommonName, "flotilla-admin");
        admin
            .distinguished_name
            .push(DnType::OrganizationName, "system:masters");
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let admin_cert = admin.signed_by(&admin_key, &ca)?;
        write(&pki.admin_cert, &admin_cert.pem())?;
        write(&pki.admin_key, &admin_key.serialize_pem())?;

        let sa_key = KeyPair::generate()?;
        write(&pki.sa_key, &sa_key.serialize_pem())?;
        write(&pki.sa_pub, &sa_key.public_key_pem())?;
        Ok(pki)
    }
}

/// Paths of the PEM files written by [`ServerTls::write`]: a fresh CA, a serving certificate
/// it signed for `localhost` and `127.0.0.1`, and a client certificate it signed.
#[derive(Debug, Clone)]
pub struct ServerTls {
    pub ca_cert: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    /// A client certificate (`clientAuth`) of the same CA.
    pub client: ClientCert,
}

/// A client certificate and its key, PEM files.
#[derive(Debug, Clone)]
pub struct ClientCert {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl ClientCert {
    /// A self-signed client certificate for `common_name` (no server trusts it) into `dir`.
    pub fn self_signed(dir: &Path, common_name: &str) -> anyhow::Result<ClientCert> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let out = ClientCert {
            cert: dir.join(format!("{common_name}.crt")),
            key: dir.join(format!("{common_name}.key")),
        };
        let key = KeyPair::generate()?;
        let cert = client_params(common_name)?.self_signed(&key)?;
        write(&out.cert, &cert.pem())?;
        write(&out.key, &key.serialize_pem())?;
        Ok(out)
    }

    /// The certificate and the key, PEM text.
    pub fn pem(&self) -> anyhow::Result<(String, String)> {
        let read = |p: &Path| {
            std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))
        };
        Ok((read(&self.cert)?, read(&self.key)?))
    }
}

fn client_params(common_name: &str) -> anyhow::Result<CertificateParams> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(DnType::CommonName, common_name);
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    Ok(params)
}

impl ServerTls {
    /// Generates a CA and a serving certificate for `common_name` into `dir`.
    pub fn write(dir: &Path, common_name: &str) -> anyhow::Result<ServerTls> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let tls = ServerTls {
            ca_cert: dir.join("ca.crt"),
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
            client: ClientCert {
                cert: dir.join("client.crt"),
                key: dir.join("client.key"),
            },
        };
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{common_name}-ca"));
        ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca_params.self_signed(&ca_key)?;
        write(&tls.ca_cert, &ca_cert.pem())?;
        let ca = Issuer::new(ca_params, ca_key);

        let key = KeyPair::generate()?;
        let mut serving = CertificateParams::new(vec!["localhost".to_owned()])?;
        serving
            .subject_alt_names
            .push(SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        serving
            .distinguished_name
            .push(DnType::CommonName, common_name);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = serving.signed_by(&key, &ca)?;
        write(&tls.cert, &cert.pem())?;
        write(&tls.key, &key.serialize_pem())?;

        let client_key = KeyPair::generate()?;
        let client =
            client_params(&format!("{common_name}-client"))?.signed_by(&client_key, &ca)?;
        write(&tls.client.cert, &client.pem())?;
        write(&tls.client.key, &client_key.serialize_pem())?;
        Ok(tls)
    }
}

fn write(path: &Path, pem: &str) -> anyhow::Result<()> {
    std::fs::write(path, pem).with_context(|| format!("writing {}", path.display()))
}
