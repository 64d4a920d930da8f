//! A component run under exactly its chart's ServiceAccount and RBAC: the chart's
//! ServiceAccount, Roles and bindings rendered by the reference `helm template`, applied with
//! `kubectl`, and a kubeconfig that authenticates with a token of that ServiceAccount from
//! the TokenRequest API only (the API server authorizes it as the ServiceAccount, not by
//! impersonation).

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, PostParams};
use kube::config::{AuthInfo, Kubeconfig, NamedAuthInfo};

use crate::tools;

/// The ServiceAccount and RBAC templates of `chart` (release `release` in `namespace`, with
/// `values`), rendered by the reference helm.
pub fn chart_rbac(
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &Path,
) -> anyhow::Result<String> {
    let out = Command::new(tools::helm()?)
        .arg("template")
        .arg(release)
        .arg(chart)
        .args(["--namespace", namespace, "--values"])
        .arg(values)
        .args([
            "--show-only",
            "templates/serviceaccount.yaml",
            "--show-only",
            "templates/rbac.yaml",
        ])
        .output()?;
    anyhow::ensure!(out.status.success(), "helm template: {}", tools::text(&out));
    Ok(String::from_utf8(out.stdout)?)
}

/// Applies `rbac` to the cluster of `admin` (its admin kubeconfig; `client` the same
/// cluster), then writes to `path` a kubeconfig authenticating as ServiceAccount
/// `namespace/service_account` with an hour-long token, and checks the API server sees
/// that identity (`kubectl auth whoami`).
pub async fn service_account_kubeconfig(
    admin: &Path,
    client: &kube::Client,
    rbac: &str,
    namespace: &str,
    service_account: &str,
    path: &Path,
) -> anyhow::Result<()> {
    tools::kubectl_in(
        admin,
        &["apply", "--server-side", "--field-manager=test", "-f", "-"],
        Some(rbac),
    )?;
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..TokenRequestSpec::default()
        },
        ..TokenRequest::default()
    };
    let token = Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .create_token_request(service_account, &PostParams::default(), &request)
        .await?
        .status
        .ok_or_else(|| anyhow::anyhow!("a TokenRequest answer without a status"))?
        .token;
    let mut config = Kubeconfig::read_from(admin)?;
    config.auth_infos = vec![NamedAuthInfo {
        name: "service-account".to_owned(),
        auth_info: Some(AuthInfo {
            token: Some(token.into()),
            ..AuthInfo::default()
        }),
        other: Default::default(),
    }];
    for context in &mut config.contexts {
        if let Some(c) = context.context.as_mut() {
            c.user = Some("service-account".to_owned());
        }
    }
    std::fs::write(path, serde_json::to_string(&config)?)?;
    let whoami = tools::run_ok(
        &tools::kubectl()?,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
        path,
        None,
    )?;
    anyhow::ensure!(
        whoami == format!("system:serviceaccount:{namespace}:{service_account}"),
        "the kubeconfig authenticates as {whoami}"
    );
    Ok(())
}
