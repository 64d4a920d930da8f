//! `spec.kubeConfig.configMapRef`: Flux's "kubeconfig from a ConfigMap with a provider"
//! (helm-controller v1.5+, `fluxcd/pkg/auth`), where the target cluster is reached with a
//! short-lived identity token instead of a stored kubeconfig.
//!
//! The ConfigMap, in the HelmRelease's namespace, holds (Flux's keys):
//! - `provider`: `aws`, `azure`, `gcp` or `generic` (required);
//! - `address`: the target's API server (required for `generic`; `host[:port]` means
//!   `https://`, only `https` is accepted, the port defaults to 443);
//! - `ca.crt`: the PEM CA of the API server (optional: the system roots otherwise);
//! - `audiences`: Flux's token audiences; the hub fixes the audience itself (below), so
//!   this key, when set, must name exactly the canonical address;
//! - `serviceAccountName`: the ServiceAccount, in the HelmRelease's namespace, whose token is
//!   used (required: the hub never falls back to its own ServiceAccount);
//! - `cluster`: the cloud cluster resource (cloud providers only).
//!
//! The hub serves `generic` (Flux's workload identity federation between Kubernetes
//! clusters: the target trusts the issuer of the hub cluster's ServiceAccount tokens): it
//! asks the hub's cluster for a token of the ServiceAccount (`TokenRequest`, one hour),
//! gives the push agent of the target a client that sends it as a bearer token, and renews
//! it before it expires.
//!
//! **The audience is the destination.** The token's only audience is the target's address
//! in Flux's canonical form, `https://<lower-case host>:<port>` ([`cluster_address`]): the
//! server the token is sent to. A ConfigMap's author therefore cannot ask for a token valid
//! somewhere else (the hub's own API server, whose default audience is its issuer) and
//! send it to an address of their choosing: whoever receives the token can use it only
//! where that address is an accepted audience. The target must accept that audience (a
//! structured `AuthenticationConfiguration` JWT authenticator for the hub cluster's issuer
//! with `audiences: [https://host:port]`, or `--api-audiences` for a cluster trusting its
//! own issuer).
//!
//! **Never the hub's identity.** `serviceAccountName` is required, and a ServiceAccount
//! that is the hub's own identity (as the hub's cluster reports it: `SelfSubjectReview`)
//! is refused ([`ProviderError::HubServiceAccount`]): a HelmRelease in the hub's namespace
//! cannot lend the hub's permissions to a target. The cloud providers exchange that token with the
//! cloud's identity service (AWS STS, Entra ID, GCP STS), which needs the cloud: they are
//! refused with a `Ready=False` naming the field ([`ProviderError::CloudProvider`]).
//!
//! Unlike Flux, `serviceAccountName` needs no feature gate (Flux's
//! `ObjectLevelWorkloadIdentity`, off by default) and is required (Flux falls back to the
//! controller's own ServiceAccount): the hub's ClusterRole decides who may mint tokens. Tokens never reach a log, a status or an Event; the push agent's client
//! reads the current one from a file only the hub's user can read (`token_file`, reread
//! every minute by the client, as a pod's projected token).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::Client;
use kube::api::{Api, PostParams};

/// Flux's `meta.KubeConfigKeyProvider`.
pub const PROVIDER_KEY: &str = "provider";
/// Flux's `meta.KubeConfigKeyAddress`.
pub const ADDRESS_KEY: &str = "address";
/// Flux's `meta.KubeConfigKeyCACert`.
pub const CA_KEY: &str = "ca.crt";
/// Flux's `meta.KubeConfigKeyAudiences`.
pub const AUDIENCES_KEY: &str = "audiences";
/// Flux's `meta.KubeConfigKeyServiceAccountName`.
pub const SERVICE_ACCOUNT_KEY: &str = "serviceAccountName";
/// The cloud providers of Flux's `fluxcd/pkg/auth`.
pub const CLOUD_PROVIDERS: [&str; 3] = ["aws", "azure", "gcp"];
/// The token of a pod's ServiceAccount.
pub const POD_TOKEN_FILE: &str = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// The lifetime asked for a token.
pub const TOKEN_LIFETIME: Duration = Duration::from_secs(3600);

/// A `generic` target, as its ConfigMap describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericTarget {
    /// The API server, `https://host:port` (lower-case host).
    pub address: String,
    /// The API server's CA (PEM), if given.
    pub ca_pem: Option<String>,
    /// The token's audiences: the address alone (see the module docs).
    pub audiences: Vec<String>,
    /// The ServiceAccount in the HelmRelease's namespace.
    pub service_account: String,
}

/// Why a `spec.kubeConfig.configMapRef` gives no target. `Display` is the `Ready=False`
/// message (reason `RESTClientError`, as Flux): Flux's own text first where Flux has one,
/// then the field and key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// The ConfigMap does not exist.
    #[error(
        "failed to get configmap {namespace}/{name}: configmaps \"{name}\" not found (spec.kubeConfig.configMapRef)"
    )]
    NotFound {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
    },
    /// The ConfigMap could not be read.
    #[error("failed to get configmap {namespace}/{name}: {reason} (spec.kubeConfig.configMapRef)")]
    Read {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The API error.
        reason: String,
    },
    /// `provider` is none of Flux's.
    #[error(
        "provider '{provider}' not implemented (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}', key 'provider': one of aws, azure, gcp, generic)"
    )]
    UnknownProvider {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The provider named.
        provider: String,
    },
    /// A cloud provider: not served by the hub.
    #[error(
        "provider '{provider}' is not supported by the Flotilla hub (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}', key 'provider'): it exchanges the token with the cloud's identity service, which the hub does not implement; use provider 'generic' or spec.kubeConfig.secretRef"
    )]
    CloudProvider {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The provider named.
        provider: String,
    },
    /// `generic` without `address`.
    #[error(
        "cluster address is required to create a REST config (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}', key 'address')"
    )]
    MissingAddress {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
    },
    /// `address` is not an https URL.
    #[error(
        "{reason} (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}', key 'address')"
    )]
    InvalidAddress {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// Flux's text.
        reason: String,
    },
    /// No `serviceAccountName`.
    #[error(
        "key 'serviceAccountName' is required (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}'): the token is one of a ServiceAccount of namespace {namespace}, never the hub's own"
    )]
    NoServiceAccount {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
    },
    /// `audiences` names another audience than the target's address.
    #[error(
        "key 'audiences' may only name the target's address {address} (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}'): the hub sets the token's audience to the address it sends the token to; remove the key"
    )]
    Audience {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The canonical address.
        address: String,
    },
    /// `serviceAccountName` is the hub's own identity.
    #[error(
        "ServiceAccount '{namespace}/{service_account}' is the hub's own (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}', key 'serviceAccountName'): the hub never sends a token of its own identity to a target"
    )]
    HubServiceAccount {
        /// Namespace of the ConfigMap (and the ServiceAccount).
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The ServiceAccount named.
        service_account: String,
    },
    /// The hub could not learn its own identity (to refuse it).
    #[error(
        "the hub could not determine its own identity to refuse it as a token's ServiceAccount: {reason} (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}')"
    )]
    HubIdentity {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// The API error.
        reason: String,
    },
    /// The hub's cluster refused the token.
    #[error(
        "failed to create kubernetes token for service account '{service_account}': {reason} (spec.kubeConfig.configMapRef: ConfigMap '{namespace}/{name}')"
    )]
    Token {
        /// Namespace of the ConfigMap.
        namespace: String,
        /// Name of the ConfigMap.
        name: String,
        /// `namespace/name` of the ServiceAccount.
        service_account: String,
        /// The API error.
        reason: String,
    },
}

impl ProviderError {
    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Self::NotFound { .. } => "config_map_not_found",
            Self::Read { .. } => "config_map_read",
            Self::UnknownProvider { .. } => "unknown_provider",
            Self::CloudProvider { .. } => "cloud_provider",
            Self::MissingAddress { .. } => "missing_address",
            Self::InvalidAddress { .. } => "invalid_address",
            Self::NoServiceAccount { .. } => "no_service_account",
            Self::Audience { .. } => "audience",
            Self::HubServiceAccount { .. } => "hub_service_account",
            Self::HubIdentity { .. } => "hub_identity",
            Self::Token { .. } => "token",
        }
    }

    /// Whether retrying may help: always (the ConfigMap, the ServiceAccount or its RBAC may
    /// change; a ConfigMap change reconciles the HelmRelease at once).
    pub fn is_transient(&self) -> bool {
        true
    }
}

/// Reads the `generic` target of ConfigMap `namespace/name` from its data (`None`: the
/// ConfigMap does not exist), as Flux's `GetRESTConfig` and generic provider read it.
pub fn parse(
    namespace: &str,
    name: &str,
    data: Option<&BTreeMap<String, Vec<u8>>>,
) -> Result<GenericTarget, ProviderError> {
    let (ns, n) = (namespace.to_owned(), name.to_owned());
    let Some(data) = data else {
        return Err(ProviderError::NotFound {
            namespace: ns,
            name: n,
        });
    };
    let text = |key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    };
    let provider = text(PROVIDER_KEY).unwrap_or_default();
    if CLOUD_PROVIDERS.contains(&provider.as_str()) {
        return Err(ProviderError::CloudProvider {
            namespace: ns,
            name: n,
            provider,
        });
    }
    if provider != "generic" {
        return Err(ProviderError::UnknownProvider {
            namespace: ns,
            name: n,
            provider,
        });
    }
    let raw = text(ADDRESS_KEY).unwrap_or_default();
    if raw.is_empty() {
        return Err(ProviderError::MissingAddress {
            namespace: ns,
            name: n,
        });
    }
    let address = cluster_address(&raw).map_err(|reason| ProviderError::InvalidAddress {
        namespace: ns.clone(),
        name: n.clone(),
        reason,
    })?;
    let audiences: Vec<String> = text(AUDIENCES_KEY)
        .unwrap_or_default()
        .lines()
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect();
    if audiences.iter().any(|a| *a != address) {
        return Err(ProviderError::Audience {
            namespace: ns,
            name: n,
            address,
        });
    }
    let Some(service_account) = text(SERVICE_ACCOUNT_KEY).filter(|s| !s.is_empty()) else {
        return Err(ProviderError::NoServiceAccount {
            namespace: ns,
            name: n,
        });
    };
    Ok(GenericTarget {
        ca_pem: text(CA_KEY).filter(|c| !c.trim().is_empty()),
        audiences: vec![address.clone()],
        address,
        service_account,
    })
}

/// The Kubernetes user name of ServiceAccount `namespace/name`.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// `Err` when `target`'s ServiceAccount (in `namespace`, that of ConfigMap
/// `namespace/name`) is `hub_user`, the hub's own identity.
pub fn refuse_hub_identity(
    namespace: &str,
    name: &str,
    target: &GenericTarget,
    hub_user: &str,
) -> Result<(), ProviderError> {
    if service_account_user(namespace, &target.service_account) == hub_user {
        return Err(ProviderError::HubServiceAccount {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            service_account: target.service_account.clone(),
        });
    }
    Ok(())
}

/// The user name the hub's cluster knows the hub by (`SelfSubjectReview`).
pub async fn hub_user(hub: &Client) -> Result<String, kube::Error> {
    use k8s_openapi::api::authentication::v1::SelfSubjectReview;
    let api: Api<SelfSubjectReview> = Api::all(hub.clone());
    let review = api
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await?;
    Ok(review
        .status
        .and_then(|s| s.user_info)
        .and_then(|u| u.username)
        .unwrap_or_default())
}

/// Flux's `ParseClusterAddress`: `https://<lower-case host>:<port>`, `https://` added when
/// the address does not start with `http`, port 443 by default; errors in Flux's words.
pub fn cluster_address(address: &str) -> Result<String, String> {
    let full = if address.starts_with("http") {
        address.to_owned()
    } else {
        format!("https://{address}")
    };
    let uri: http::Uri = full
        .parse()
        .map_err(|e| format!("failed to parse Kubernetes API server address '{full}': {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "the Kubernetes API server address '{full}' must use https scheme"
        ));
    }
    let authority = uri.authority().ok_or_else(|| {
        format!("failed to parse Kubernetes API server address '{full}': no host")
    })?;
    let port = authority.port_u16().unwrap_or(443);
    Ok(format!(
        "https://{}:{port}",
        authority.host().to_ascii_lowercase()
    ))
}

/// The ServiceAccount (`namespace`, `name`) of the subject of a pod's token
/// (`system:serviceaccount:<namespace>:<name>`), read without checking the signature (the
/// token is the hub's own, from its pod).
pub fn token_subject(token: &str) -> Result<(String, String), String> {
    use base64::Engine as _;
    let payload = token
        .split('.')
        .nth(1)
        .ok_or_else(|| "not a JWT".to_owned())?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| "the JWT payload is not base64url".to_owned())?;
    let claims: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|_| "the JWT payload is not JSON".to_owned())?;
    let sub = claims
        .get("sub")
        .and_then(|s| s.as_str())
        .ok_or_else(|| "the JWT has no subject".to_owned())?;
    match sub.split(':').collect::<Vec<_>>().as_slice() {
        ["system", "serviceaccount", ns, name] => Ok(((*ns).to_owned(), (*name).to_owned())),
        _ => Err(format!("the subject {sub:?} is not a ServiceAccount")),
    }
}

/// A token for `target`'s ServiceAccount (in `namespace`), from the hub's cluster; its
/// lifetime. (ConfigMap `namespace/name` is named in errors.)
pub async fn mint(
    hub: &Client,
    namespace: &str,
    name: &str,
    target: &GenericTarget,
) -> Result<(String, Duration), ProviderError> {
    let (sa_namespace, sa_name) = (namespace.to_owned(), target.service_account.clone());
    let api: Api<ServiceAccount> = Api::namespaced(hub.clone(), &sa_namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: target.audiences.clone(),
            expiration_seconds: Some(TOKEN_LIFETIME.as_secs() as i64),
            bound_object_ref: None,
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(&sa_name, &PostParams::default(), &request)
        .await
        .map_err(|e| ProviderError::Token {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            service_account: format!("{sa_namespace}/{sa_name}"),
            reason: crate::util::error_chain(&e),
        })?;
    let status = answer.status.ok_or_else(|| ProviderError::Token {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        service_account: format!("{sa_namespace}/{sa_name}"),
        reason: "the TokenRequest has no status".to_owned(),
    })?;
    let lifetime = time_until(&status.expiration_timestamp.0).unwrap_or(TOKEN_LIFETIME);
    Ok((status.token, lifetime))
}

fn time_until(at: &k8s_openapi::jiff::Timestamp) -> Option<Duration> {
    let seconds = at.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
    u64::try_from(seconds)
        .ok()
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
}

/// When to renew a token of `lifetime`: at four fifths of it, not sooner than 30 s.
pub fn renew_after(lifetime: Duration) -> Duration {
    lifetime.mul_f64(0.8).max(Duration::from_secs(30))
}

/// Writes `token` to `path` (mode 0600 on Unix), replacing it in one rename.
pub fn write_token(path: &Path, token: &str) -> std::io::Result<()> {
    let tmp: PathBuf = path.with_extension("tmp");
    {
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(&tmp)?;
        std::io::Write::write_all(&mut file, token.as_bytes())?;
    }
    std::fs::rename(&tmp, path)
}

/// The client configuration of `target`: its address and CA, the token read from
/// `token_file`.
pub fn client_config(target: &GenericTarget, token_file: &Path) -> Result<kube::Config, String> {
    use rustls_pki_types::pem::PemObject as _;
    let url: http::Uri = target
        .address
        .parse()
        .map_err(|e| format!("address {}: {e}", target.address))?;
    let mut config = kube::Config::new(url);
    if let Some(pem) = &target.ca_pem {
        let certs = rustls_pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
            .map(|c| c.map(|c| c.to_vec()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("key 'ca.crt' is not PEM certificates: {e}"))?;
        if certs.is_empty() {
            return Err("key 'ca.crt' holds no PEM certificate".into());
        }
        config.root_cert = Some(certs);
    }
    config.auth_info.token_file = Some(token_file.to_string_lossy().into_owned());
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(pairs: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
            .collect()
    }

    fn refusal(pairs: Option<&[(&str, &str)]>) -> String {
        let d = pairs.map(data);
        parse("apps", "wi", d.as_ref())
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn a_config_map_names_the_field_and_key_for_a_missing_config_map_an_unknown_or_cloud_provider_and_a_bad_address()
     {
        assert_eq!(
            refusal(None),
            "failed to get configmap apps/wi: configmaps \"wi\" not found (spec.kubeConfig.configMapRef)"
        );
        let field = "spec.kubeConfig.configMapRef: ConfigMap 'apps/wi'";
        assert_eq!(
            refusal(Some(&[])),
            format!(
                "provider '' not implemented ({field}, key 'provider': one of aws, azure, gcp, generic)"
            )
        );
        assert!(
            refusal(Some(&[("provider", "oracle")]))
                .starts_with("provider 'oracle' not implemented (")
        );
        for cloud in CLOUD_PROVIDERS {
            let m = refusal(Some(&[("provider", cloud), ("cluster", "arn:x")]));
            assert!(
                m.starts_with(&format!(
                    "provider '{cloud}' is not supported by the Flotilla hub ({field}, key 'provider')"
                )),
                "{m}"
            );
        }
        assert_eq!(
            refusal(Some(&[("provider", "generic")])),
            format!("cluster address is required to create a REST config ({field}, key 'address')")
        );
        assert_eq!(
            refusal(Some(&[
                ("provider", "generic"),
                ("address", "http://api:6443")
            ])),
            format!(
                "the Kubernetes API server address 'http://api:6443' must use https scheme ({field}, key 'address')"
            )
        );
    }

    #[test]
    fn a_generic_target_has_flux_s_canonical_address_as_its_only_audience_and_a_required_service_account()
     {
        let t = parse(
            "apps",
            "wi",
            Some(&data(&[
                ("provider", "generic"),
                ("address", "API.Example.com"),
                ("serviceAccountName", "deployer"),
            ])),
        )
        .expect("a generic target");
        assert_eq!(t.address, "https://api.example.com:443");
        assert_eq!(t.audiences, vec!["https://api.example.com:443".to_owned()]);
        assert_eq!(t.ca_pem, None);
        assert_eq!(t.service_account, "deployer");
        let t = parse(
            "apps",
            "wi",
            Some(&data(&[
                ("provider", "generic"),
                ("address", "https://10.0.0.1:6443"),
                ("audiences", " https://10.0.0.1:6443 \n\n"),
                ("serviceAccountName", "deployer"),
                ("ca.crt", "PEM"),
            ])),
        )
        .expect("a generic target");
        assert_eq!(t.address, "https://10.0.0.1:6443");
        assert_eq!(t.audiences, vec!["https://10.0.0.1:6443".to_owned()]);
        assert_eq!(t.service_account, "deployer");
        assert_eq!(t.ca_pem.as_deref(), Some("PEM"));
    }

    #[test]
    fn the_audience_is_not_the_config_map_s_choice_and_the_service_account_is_required_and_never_the_hub_s()
     {
        let field = "spec.kubeConfig.configMapRef: ConfigMap 'apps/wi'";
        for audiences in [
            "https://kubernetes.default.svc.cluster.local",
            "https://10.0.0.1:6443\nsts.amazonaws.com",
            "10.0.0.1:6443",
        ] {
            assert_eq!(
                refusal(Some(&[
                    ("provider", "generic"),
                    ("address", "10.0.0.1:6443"),
                    ("audiences", audiences),
                    ("serviceAccountName", "deployer"),
                ])),
                format!(
                    "key 'audiences' may only name the target's address https://10.0.0.1:6443 ({field}): the hub sets the token's audience to the address it sends the token to; remove the key"
                ),
                "{audiences}"
            );
        }
        for sa in [None, Some("")] {
            let mut pairs = vec![("provider", "generic"), ("address", "10.0.0.1:6443")];
            if let Some(sa) = sa {
                pairs.push(("serviceAccountName", sa));
            }
            assert_eq!(
                refusal(Some(&pairs)),
                format!(
                    "key 'serviceAccountName' is required ({field}): the token is one of a ServiceAccount of namespace apps, never the hub's own"
                )
            );
        }
        let t = parse(
            "apps",
            "wi",
            Some(&data(&[
                ("provider", "generic"),
                ("address", "10.0.0.1:6443"),
                ("serviceAccountName", "flotilla-hub"),
            ])),
        )
        .expect("a generic target");
        assert_eq!(
            refuse_hub_identity("apps", "wi", &t, "system:serviceaccount:apps:flotilla-hub")
                .expect_err("the hub's own")
                .to_string(),
            format!(
                "ServiceAccount 'apps/flotilla-hub' is the hub's own ({field}, key 'serviceAccountName'): the hub never sends a token of its own identity to a target"
            )
        );
        for other in [
            "system:serviceaccount:flotilla-system:flotilla-hub",
            "system:serviceaccount:apps:flotilla-hub-x",
            "kubernetes-admin",
            "",
        ] {
            assert_eq!(
                refuse_hub_identity("apps", "wi", &t, other),
                Ok(()),
                "{other}"
            );
        }
    }

    #[test]
    fn the_subject_of_a_pod_token_is_its_service_account() {
        use base64::Engine as _;
        let jwt = |claims: &str| {
            let e = base64::engine::general_purpose::URL_SAFE_NO_PAD;
            format!("{}.{}.sig", e.encode("{}"), e.encode(claims))
        };
        assert_eq!(
            token_subject(&jwt(
                r#"{"sub":"system:serviceaccount:flotilla-system:flotilla-hub"}"#
            )),
            Ok(("flotilla-system".to_owned(), "flotilla-hub".to_owned()))
        );
        assert!(token_subject(&jwt(r#"{"sub":"alice"}"#)).is_err());
        assert!(token_subject("not-a-jwt").is_err());
    }

    #[test]
    fn a_token_is_renewed_at_four_fifths_of_its_life_and_written_for_the_owner_only() {
        assert_eq!(
            renew_after(Duration::from_secs(3600)),
            Duration::from_secs(2880)
        );
        assert_eq!(
            renew_after(Duration::from_secs(10)),
            Duration::from_secs(30)
        );
        let dir = tempfile::tempdir().expect("a temp dir");
        let path = dir.path().join("token");
        write_token(&path, "first").expect("written");
        write_token(&path, "second").expect("replaced");
        assert_eq!(std::fs::read_to_string(&path).expect("read"), "second");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            let mode = std::fs::metadata(&path)
                .expect("metadata")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
