//! What a kubeconfig from a Secret may ask of the hub.
//!
//! A `spec.kubeConfig.secretRef` Secret (and a Cluster API `<cluster>-kubeconfig` Secret)
//! is written by whoever may write Secrets in the HelmRelease's namespace, but the client
//! built from it runs in the hub, with the hub's files, processes and network. As Flux's
//! helm-controller (`fluxcd/pkg/runtime/client` `KubeConfig`), the hub keeps only what the
//! kubeconfig's author owns (the server, inline CA and credentials) and refuses the rest
//! unless the hub was started with the matching opt-in flag (all off by default):
//!
//! | field | flag |
//! |---|---|
//! | `users[].user.exec` (a command the hub would run) | `--insecure-kubeconfig-exec` (Flux's) |
//! | `users[].user.auth-provider` (its `gcp` provider runs `cmd-path`; `oidc` refreshes tokens from a URL it names) | `--insecure-kubeconfig-exec` |
//! | `clusters[].cluster.insecure-skip-tls-verify: true` | `--insecure-kubeconfig-tls` (Flux's) |
//! | `users[].user.tokenFile`, `client-certificate`, `client-key`, `clusters[].cluster.certificate-authority` (files of the hub's host, e.g. its own ServiceAccount token) | `--insecure-kubeconfig-files` |
//! | `clusters[].cluster.proxy-url` | `--insecure-kubeconfig-proxy` |
//!
//! Flux drops these fields silently; the hub refuses the kubeconfig instead, with a message
//! naming the field by its index ([`Refusal`]), so the author learns why the target does
//! not answer as expected. Every entry of the kubeconfig is checked, not only the current
//! context's: an entry the hub would not use today is one edit of `current-context` away.
//!
//! No message of this module quotes anything of the Secret (names, paths, commands, URLs
//! are all the author's): fields are named by index, and [`load_error`] replaces kube's
//! own texts (its YAML errors quote the document, its context errors the names) with
//! sentences of its own.

use std::fmt;

use kube::config::{Kubeconfig, KubeconfigError, LoadDataError};

/// The opt-in flags of the hub for kubeconfig Secrets (all off by default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KubeconfigPolicy {
    /// `--insecure-kubeconfig-exec`: `user.exec` and `user.auth-provider`.
    pub allow_exec: bool,
    /// `--insecure-kubeconfig-tls`: `cluster.insecure-skip-tls-verify: true`.
    pub allow_insecure_tls: bool,
    /// `--insecure-kubeconfig-files`: paths of the hub's host.
    pub allow_files: bool,
    /// `--insecure-kubeconfig-proxy`: `cluster.proxy-url`.
    pub allow_proxy: bool,
}

/// What kind of field was refused (each with its own flag and sentence).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// `user.exec`.
    Exec,
    /// `user.auth-provider`.
    AuthProvider,
    /// `cluster.insecure-skip-tls-verify: true`.
    InsecureTls,
    /// A file path; `data` is the inline field to use instead.
    File {
        /// The field holding the content inline.
        data: &'static str,
    },
    /// `cluster.proxy-url`.
    Proxy,
}

/// A field the policy refuses: `field` is its path with indices
/// (`users[0].user.exec`), never a name from the kubeconfig.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The field, e.g. `clusters[1].cluster.proxy-url`.
    pub field: String,
    /// Why.
    pub rule: Rule,
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let field = &self.field;
        match self.rule {
            Rule::Exec => write!(
                f,
                "{field} is not allowed: the hub runs no command from a kubeconfig unless started with --insecure-kubeconfig-exec"
            ),
            Rule::AuthProvider => write!(
                f,
                "{field} is not allowed: the hub runs no auth-provider plugin from a kubeconfig unless started with --insecure-kubeconfig-exec; use an inline token or client certificate"
            ),
            Rule::InsecureTls => write!(
                f,
                "{field} is not allowed: the hub verifies the API server's certificate unless started with --insecure-kubeconfig-tls; give the CA in certificate-authority-data"
            ),
            Rule::File { data } => write!(
                f,
                "{field} is not allowed: the hub reads no file of its own host for a kubeconfig unless started with --insecure-kubeconfig-files; put the content in {data}"
            ),
            Rule::Proxy => write!(
                f,
                "{field} is not allowed: the hub sends no request through a proxy a kubeconfig names unless started with --insecure-kubeconfig-proxy"
            ),
        }
    }
}

impl std::error::Error for Refusal {}

impl KubeconfigPolicy {
    /// The first field of `kubeconfig` this policy refuses, in document order (clusters,
    /// then users).
    pub fn check(&self, kubeconfig: &Kubeconfig) -> Result<(), Refusal> {
        let refuse = |field: String, rule: Rule| Err(Refusal { field, rule });
        for (i, named) in kubeconfig.clusters.iter().enumerate() {
            let Some(c) = &named.cluster else { continue };
            let at = |f: &str| format!("clusters[{i}].cluster.{f}");
            if !self.allow_files && c.certificate_authority.is_some() {
                return refuse(
                    at("certificate-authority"),
                    Rule::File {
                        data: "certificate-authority-data",
                    },
                );
            }
            if !self.allow_insecure_tls && c.insecure_skip_tls_verify == Some(true) {
                return refuse(at("insecure-skip-tls-verify"), Rule::InsecureTls);
            }
            if !self.allow_proxy && c.proxy_url.as_deref().is_some_and(|p| !p.is_empty()) {
                return refuse(at("proxy-url"), Rule::Proxy);
            }
        }
        for (i, named) in kubeconfig.auth_infos.iter().enumerate() {
            let Some(u) = &named.auth_info else { continue };
            let at = |f: &str| format!("users[{i}].user.{f}");
            if !self.allow_exec && u.exec.is_some() {
                return refuse(at("exec"), Rule::Exec);
            }
            if !self.allow_exec && u.auth_provider.is_some() {
                return refuse(at("auth-provider"), Rule::AuthProvider);
            }
            if !self.allow_files {
                let files = [
                    (u.token_file.is_some(), "tokenFile", "token"),
                    (
                        u.client_certificate.is_some(),
                        "client-certificate",
                        "client-certificate-data",
                    ),
                    (u.client_key.is_some(), "client-key", "client-key-data"),
                ];
                if let Some((_, field, data)) = files.into_iter().find(|(set, _, _)| *set) {
                    return refuse(at(field), Rule::File { data });
                }
            }
        }
        Ok(())
    }
}

/// A sentence for kube's refusal to parse or load a kubeconfig, quoting nothing of it:
/// kube's own texts quote the document (YAML errors) and its names (context errors). A
/// YAML error keeps its line and column.
pub fn load_error(e: &KubeconfigError) -> String {
    let data = |what: &str, e: &LoadDataError| match e {
        LoadDataError::DecodeBase64(_) => format!("{what}-data is not base64"),
        LoadDataError::NoBase64DataOrFile => {
            format!(
                "{what}-data is missing (a client certificate needs its key, and a key its certificate)"
            )
        }
        LoadDataError::ReadFile(..) => format!("the file of {what} could not be read"),
        // Variants a newer kube may add.
        #[allow(unreachable_patterns)]
        _ => format!("{what} could not be loaded"),
    };
    match e {
        KubeconfigError::Parse(p) => match p.location() {
            Some(l) => format!(
                "not a valid kubeconfig: the YAML does not parse or does not have a kubeconfig's shape at line {}, column {}",
                l.line(),
                l.column()
            ),
            None => "not a valid kubeconfig: the YAML does not parse or does not have a kubeconfig's shape".to_owned(),
        },
        KubeconfigError::CurrentContextNotSet => "current-context is not set".to_owned(),
        KubeconfigError::LoadContext(_) => {
            "current-context names no entry of contexts (or one without a context)".to_owned()
        }
        KubeconfigError::LoadClusterOfContext(_) => {
            "the current context's cluster names no entry of clusters (or one without a cluster)"
                .to_owned()
        }
        KubeconfigError::KindMismatch | KubeconfigError::ApiVersionMismatch => {
            "its YAML documents have different kinds or apiVersions".to_owned()
        }
        KubeconfigError::MissingClusterUrl => "the current context's cluster has no server".to_owned(),
        KubeconfigError::ParseClusterUrl(_) => {
            "the current context's cluster's server is not a URL".to_owned()
        }
        KubeconfigError::ParseProxyUrl(_) => "the proxy URL is not a URL".to_owned(),
        KubeconfigError::LoadCertificateAuthority(e) => data("certificate-authority", e),
        KubeconfigError::LoadClientCertificate(e) => data("client-certificate", e),
        KubeconfigError::LoadClientKey(e) => data("client-key", e),
        KubeconfigError::ParseCertificates(_) => {
            "certificate-authority-data holds no valid PEM certificate".to_owned()
        }
        // ReadConfig and FindPath (no file is read here), and what features or a newer kube
        // add.
        #[allow(unreachable_patterns)]
        _ => "the kubeconfig could not be loaded".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "apiVersion: v1
kind: Config
clusters:
- name: edge
  cluster:
    server: https://10.0.0.1:6443
    certificate-authority-data: Q0EK
users:
- name: admin
  user:
    token: t0ken
contexts:
- name: edge
  context: {cluster: edge, user: admin}
current-context: edge
";

    fn with(cluster: &str, user: &str) -> Kubeconfig {
        let text = format!(
            "apiVersion: v1
kind: Config
clusters:
- name: ok
  cluster:
    server: https://10.0.0.1:6443
- name: edge
  cluster:
    server: https://10.0.0.2:6443
{cluster}
users:
- name: ok
  user:
    token: t0ken
- name: admin
  user:
    token: t0ken
{user}
"
        );
        Kubeconfig::from_yaml(&text).expect("a kubeconfig")
    }

    #[test]
    fn every_refused_field_is_named_by_index_and_allowed_by_its_flag_only() {
        let exec = "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /usr/bin/touch, args: [/tmp/x]}";
        /// Cluster block, user block, the field named, the rule, the flag that allows it.
        type Case = (
            &'static str,
            &'static str,
            &'static str,
            Rule,
            fn(&mut KubeconfigPolicy),
        );
        let table: [Case; 9] = [
            ("", exec, "users[1].user.exec", Rule::Exec, |p| {
                p.allow_exec = true
            }),
            (
                "",
                "    auth-provider: {name: gcp, config: {cmd-path: /usr/bin/touch}}",
                "users[1].user.auth-provider",
                Rule::AuthProvider,
                |p| p.allow_exec = true,
            ),
            (
                "",
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token",
                "users[1].user.tokenFile",
                Rule::File { data: "token" },
                |p| p.allow_files = true,
            ),
            (
                "",
                "    client-certificate: /etc/hub/tls.crt",
                "users[1].user.client-certificate",
                Rule::File {
                    data: "client-certificate-data",
                },
                |p| p.allow_files = true,
            ),
            (
                "",
                "    client-key: /etc/hub/tls.key",
                "users[1].user.client-key",
                Rule::File {
                    data: "client-key-data",
                },
                |p| p.allow_files = true,
            ),
            (
                "    certificate-authority: /etc/hub/ca.crt",
                "",
                "clusters[1].cluster.certificate-authority",
                Rule::File {
                    data: "certificate-authority-data",
                },
                |p| p.allow_files = true,
            ),
            (
                "    insecure-skip-tls-verify: true",
                "",
                "clusters[1].cluster.insecure-skip-tls-verify",
                Rule::InsecureTls,
                |p| p.allow_insecure_tls = true,
            ),
            (
                "    proxy-url: http://127.0.0.1:3128",
                "",
                "clusters[1].cluster.proxy-url",
                Rule::Proxy,
                |p| p.allow_proxy = true,
            ),
            (
                "    proxy-url: socks5://127.0.0.1:1080",
                "",
                "clusters[1].cluster.proxy-url",
                Rule::Proxy,
                |p| p.allow_proxy = true,
            ),
        ];
        let every_other_flag = |only: fn(&mut KubeconfigPolicy)| {
            let mut allowed = KubeconfigPolicy::default();
            only(&mut allowed);
            let all = KubeconfigPolicy {
                allow_exec: true,
                allow_insecure_tls: true,
                allow_files: true,
                allow_proxy: true,
            };
            // Every flag but the one that allows the field.
            let others = KubeconfigPolicy {
                allow_exec: !allowed.allow_exec,
                allow_insecure_tls: !allowed.allow_insecure_tls,
                allow_files: !allowed.allow_files,
                allow_proxy: !allowed.allow_proxy,
            };
            (allowed, all, others)
        };
        for (cluster, user, field, rule, flag) in table {
            let kc = with(cluster, user);
            let refusal = KubeconfigPolicy::default()
                .check(&kc)
                .expect_err("refused by default");
            assert_eq!(
                refusal,
                Refusal {
                    field: field.to_owned(),
                    rule
                }
            );
            let (allowed, all, others) = every_other_flag(flag);
            assert_eq!(allowed.check(&kc), Ok(()), "{field} with its flag");
            assert_eq!(all.check(&kc), Ok(()), "{field} with every flag");
            assert_eq!(
                others.check(&kc).map_err(|r| r.field),
                Err(field.to_owned()),
                "{field} with every other flag"
            );
        }
    }

    #[test]
    fn inline_credentials_a_verified_server_and_explicit_falses_are_accepted() {
        let kc = Kubeconfig::from_yaml(BASE).expect("a kubeconfig");
        assert_eq!(KubeconfigPolicy::default().check(&kc), Ok(()));
        let kc = with(
            "    insecure-skip-tls-verify: false\n    proxy-url: ''\n    tls-server-name: api.internal",
            "    client-certificate-data: Q0VSVAo=\n    client-key-data: S0VZCg==\n    as: someone",
        );
        assert_eq!(KubeconfigPolicy::default().check(&kc), Ok(()));
        let kc = with("", "    username: u\n    password: p");
        assert_eq!(KubeconfigPolicy::default().check(&kc), Ok(()));
    }

    #[test]
    fn the_messages_name_the_field_and_the_flag_and_quote_nothing_of_the_kubeconfig() {
        let kc = with(
            "",
            "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /usr/bin/touch, args: [/tmp/marker-xyz]}",
        );
        let m = KubeconfigPolicy::default()
            .check(&kc)
            .expect_err("refused")
            .to_string();
        assert_eq!(
            m,
            "users[1].user.exec is not allowed: the hub runs no command from a kubeconfig unless started with --insecure-kubeconfig-exec"
        );
        let kc = with("", "    tokenFile: /tmp/marker-xyz");
        let m = KubeconfigPolicy::default()
            .check(&kc)
            .expect_err("refused")
            .to_string();
        assert_eq!(
            m,
            "users[1].user.tokenFile is not allowed: the hub reads no file of its own host for a kubeconfig unless started with --insecure-kubeconfig-files; put the content in token"
        );
    }

    #[tokio::test]
    async fn load_errors_keep_the_line_and_column_and_quote_nothing_of_the_secret() {
        // A YAML error, and a shape error (a scalar where a map belongs).
        for text in [
            "clusters: [\n  {name: s3cr3t-marker\n",
            "apiVersion: v1\nclusters:\n- name: edge\n  cluster: s3cr3t-marker\n",
        ] {
            let e = Kubeconfig::from_yaml(text).expect_err("not a kubeconfig");
            let m = load_error(&e);
            assert!(!m.contains("s3cr3t-marker"), "{m}");
            assert!(m.starts_with("not a valid kubeconfig: "), "{m}");
            assert!(m.contains("at line "), "{m} (kube: {e})");
        }
        // Context errors: kube quotes the names.
        let missing = BASE.replace("current-context: edge", "current-context: s3cr3t-marker");
        let e = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&missing).expect("parses"),
            &Default::default(),
        )
        .await
        .expect_err("no such context");
        assert!(e.to_string().contains("s3cr3t-marker"), "{e}");
        assert_eq!(
            load_error(&e),
            "current-context names no entry of contexts (or one without a context)"
        );
        let bad_ca = BASE.replace("Q0EK", "s3cr3t-marker!");
        let e = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&bad_ca).expect("parses"),
            &Default::default(),
        )
        .await
        .expect_err("not base64");
        assert_eq!(load_error(&e), "certificate-authority-data is not base64");
        let no_server = BASE.replace("    server: https://10.0.0.1:6443\n", "");
        let e = kube::Config::from_custom_kubeconfig(
            Kubeconfig::from_yaml(&no_server).expect("parses"),
            &Default::default(),
        )
        .await
        .expect_err("no server");
        assert_eq!(
            load_error(&e),
            "the current context's cluster has no server"
        );
    }
}
