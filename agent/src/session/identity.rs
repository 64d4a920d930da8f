//! The agent's identity, kept in a Secret of its own namespace
//! (`flotilla-agent-identity`): its private key (generated here, never sent anywhere), the
//! client certificate the hub issued, the hub's CA, the hub's URL and the cluster name.
//!
//! The key is written before the first `Register`, so an agent restarted while its
//! ManagedCluster waits for acceptance asks again with the same key.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};
use x509_parser::prelude::{FromDer as _, X509Certificate};

use super::SessionError;
use super::tls::HubAddress;

/// Name of the identity Secret.
pub const SECRET_NAME: &str = "flotilla-agent-identity";

/// What the identity Secret holds.
#[derive(Clone, Default)]
pub struct Stored {
    /// The hub's URL.
    pub hub: Option<String>,
    /// The ManagedCluster name.
    pub cluster: Option<String>,
    /// The hub CA (PEM).
    pub ca_pem: Option<String>,
    /// The client certificate (PEM).
    pub cert_pem: Option<String>,
    /// The private key (PEM): secret.
    pub key_pem: Option<String>,
}

impl std::fmt::Debug for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stored")
            .field("hub", &self.hub)
            .field("cluster", &self.cluster)
            .field("has_ca", &self.ca_pem.is_some())
            .field("has_cert", &self.cert_pem.is_some())
            .field("key_pem", &self.key_pem.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// A joined agent's identity.
#[derive(Clone)]
pub struct Identity {
    /// Where the hub is.
    pub hub: HubAddress,
    /// The ManagedCluster name.
    pub cluster: String,
    /// The hub CA (PEM).
    pub ca_pem: String,
    /// The client certificate (PEM).
    pub cert_pem: String,
    /// The private key (PEM): secret, never logged.
    pub key_pem: String,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("hub", &self.hub)
            .field("cluster", &self.cluster)
            .field("key_pem", &"<redacted>")
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// The identity in `stored`, when it is complete.
    pub fn from_stored(stored: &Stored) -> Option<Result<Self, SessionError>> {
        let (Some(hub), Some(cluster), Some(ca), Some(cert), Some(key)) = (
            &stored.hub,
            &stored.cluster,
            &stored.ca_pem,
            &stored.cert_pem,
            &stored.key_pem,
        ) else {
            return None;
        };
        Some(HubAddress::parse(hub).map(|hub| Self {
            hub,
            cluster: cluster.clone(),
            ca_pem: ca.clone(),
            cert_pem: cert.clone(),
            key_pem: key.clone(),
        }))
    }

    /// The validity of the client certificate: (not before, not after).
    pub fn validity(&self) -> Result<(SystemTime, SystemTime), SessionError> {
        certificate_validity(&self.cert_pem)
    }

    /// When the client certificate ended, if it has: the hub refuses it, and only a new
    /// `join` with a bootstrap token gets another.
    pub fn expired(&self) -> Result<Option<SystemTime>, SessionError> {
        let (_, end) = self.validity()?;
        Ok((end <= SystemTime::now()).then_some(end))
    }

    /// When to renew: two thirds into the certificate's lifetime.
    pub fn renew_at(&self) -> Result<SystemTime, SessionError> {
        let (from, to) = self.validity()?;
        let lifetime = to.duration_since(from).unwrap_or(Duration::ZERO);
        Ok(from + lifetime * 2 / 3)
    }
}

/// `t` in RFC 3339 (UTC), for messages.
pub fn rfc3339(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|_| "an unrepresentable time".into())
}

/// The validity of the first certificate of `pem`.
pub fn certificate_validity(pem: &str) -> Result<(SystemTime, SystemTime), SessionError> {
    let bad = || SessionError::Certificate {
        message: "the client certificate does not parse".into(),
    };
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|_| bad())?;
    let (_, cert) = X509Certificate::from_der(&block.contents).map_err(|_| bad())?;
    let at =
        |secs: i64| SystemTime::UNIX_EPOCH + Duration::from_secs(u64::try_from(secs).unwrap_or(0));
    Ok((
        at(cert.validity().not_before.timestamp()),
        at(cert.validity().not_after.timestamp()),
    ))
}

fn kube_err(what: &'static str) -> impl FnOnce(kube::Error) -> SessionError {
    move |source| SessionError::Kube { what, source }
}

/// Reads the identity Secret of `namespace`.
pub async fn load(client: &kube::Client, namespace: &str) -> Result<Stored, SessionError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let Some(secret) = api
        .get_opt(SECRET_NAME)
        .await
        .map_err(kube_err("reading the agent identity Secret"))?
    else {
        return Ok(Stored::default());
    };
    let get = |k: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(k))
            .and_then(|b| String::from_utf8(b.0.clone()).ok())
            .filter(|s| !s.is_empty())
    };
    Ok(Stored {
        hub: get("hub"),
        cluster: get("cluster"),
        ca_pem: get("ca.crt"),
        cert_pem: get("tls.crt"),
        key_pem: get("tls.key"),
    })
}

/// Writes `stored` as the identity Secret of `namespace` (created or replaced).
pub async fn store(
    client: &kube::Client,
    namespace: &str,
    stored: &Stored,
) -> Result<(), SessionError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut data = BTreeMap::new();
    for (k, v) in [
        ("hub", &stored.hub),
        ("cluster", &stored.cluster),
        ("ca.crt", &stored.ca_pem),
        ("tls.crt", &stored.cert_pem),
        ("tls.key", &stored.key_pem),
    ] {
        if let Some(v) = v {
            data.insert(k.to_owned(), ByteString(v.clone().into_bytes()));
        }
    }
    let mut secret = Secret {
        metadata: ObjectMeta {
            name: Some(SECRET_NAME.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "flotilla-agent".to_owned(),
                )]
                .into(),
            ),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Secret::default()
    };
    match api
        .get_opt(SECRET_NAME)
        .await
        .map_err(kube_err("reading the agent identity Secret"))?
    {
        Some(existing) => {
            secret.metadata.resource_version = existing.metadata.resource_version;
            api.replace(SECRET_NAME, &PostParams::default(), &secret)
                .await
                .map_err(kube_err("writing the agent identity Secret"))?;
        }
        None => {
            api.create(&PostParams::default(), &secret)
                .await
                .map_err(kube_err("creating the agent identity Secret"))?;
        }
    }
    Ok(())
}
