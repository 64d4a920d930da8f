//! The harness as the kubelet of a workload cluster, for Cluster API onboarding tests.
//!
//! kwok nodes run no containers, so when the hub installs the agent into a workload cluster
//! (a Deployment it server-side applied through the Cluster's kubeconfig), nothing would run
//! it. [`run_deployment`] plays exactly the kubelet's part and nothing else: it reads that
//! Deployment *from the workload cluster* and runs the real `flotilla-agent` binary as a host
//! process with
//!
//! - the container's `args`, as they are;
//! - the container's `env`: plain values, `fieldRef: metadata.namespace` (the downward API)
//!   and `secretKeyRef` (the Secret's value read from the workload cluster, an optional one
//!   left out when missing, as the kubelet does);
//! - the pod's ServiceAccount's credentials: a token of that ServiceAccount (TokenRequest, as
//!   the kubelet's projected token) with the cluster's CA and server, handed over in a
//!   kubeconfig file named by `KUBECONFIG` (where the in-cluster config would read
//!   `/var/run/secrets/kubernetes.io/serviceaccount`). The agent therefore acts with the
//!   chart's RBAC, not the harness's.
//!
//! Two things a pod gets from its own sandbox are given from the host instead: each
//! `emptyDir` volume mount path in the args becomes a directory of the harness (the kubelet
//! mounts the volume there), and the port of `--metrics-addr` becomes a free loopback port
//! (a pod has its own network namespace; host processes share one).

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::cluster::{Cluster, free_port};
use crate::process::Supervised;
use crate::tools::kubectl_in;

/// What [`run_deployment`] started.
#[derive(Debug)]
pub struct AgentPod {
    /// The agent process.
    pub process: Supervised,
    /// The arguments it was given (after the sandbox substitutions).
    pub args: Vec<String>,
    /// The names of the environment variables it was given (values are secret).
    pub env_names: Vec<String>,
    /// Its log.
    pub log: PathBuf,
}

/// Runs the first container of Deployment `namespace/name` of `cluster` as the kubelet would
/// (see the module docs), with the binary `agent`; `dir` holds its volumes, credentials and
/// log.
pub async fn run_deployment(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    agent: &Path,
    dir: &Path,
) -> anyhow::Result<AgentPod> {
    run_deployment_with(cluster, namespace, name, agent, dir, false).await
}

/// [`run_deployment`]; with `detached` the agent is started in a session of its own, to
/// outlive this program once [`Supervised::disown`]ed (`cargo xtask up --capi`).
pub async fn run_deployment_with(
    cluster: &Cluster,
    namespace: &str,
    name: &str,
    agent: &Path,
    dir: &Path,
    detached: bool,
) -> anyhow::Result<AgentPod> {
    let client = cluster.client().await?;
    let deployment = Api::<Deployment>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .with_context(|| {
            format!("reading Deployment {namespace}/{name} of the workload cluster")
        })?;
    let pod = deployment
        .spec
        .and_then(|s| s.template.spec)
        .context("the Deployment has no pod template spec")?;
    let container = pod
        .containers
        .first()
        .context("the Deployment has no container")?
        .clone();
    std::fs::create_dir_all(dir)?;
    // Volumes: each emptyDir mount becomes a directory of the harness.
    let empty_dirs: Vec<String> = pod
        .volumes
        .unwrap_or_default()
        .into_iter()
        .filter(|v| v.empty_dir.is_some())
        .map(|v| v.name)
        .collect();
    let mut mounts = Vec::new();
    for m in container.volume_mounts.clone().unwrap_or_default() {
        if empty_dirs.contains(&m.name) {
            let host = dir.join(format!("volume-{}", m.name));
            std::fs::create_dir_all(&host)?;
            mounts.push((m.mount_path, host.to_string_lossy().into_owned()));
        }
    }
    let metrics_port = free_port()?;
    let args: Vec<String> = container
        .args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| {
            let mut a = a;
            for (path, host) in &mounts {
                a = a.replace(path.as_str(), host);
            }
            if a.starts_with("--metrics-addr=") {
                a = format!("--metrics-addr=127.0.0.1:{metrics_port}");
            }
            a
        })
        .collect();
    // The environment.
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let mut env: Vec<(String, String)> = Vec::new();
    for e in container.env.clone().unwrap_or_default() {
        if let Some(v) = e.value {
            env.push((e.name, v));
            continue;
        }
        let Some(from) = e.value_from else {
            env.push((e.name, String::new()));
            continue;
        };
        if let Some(field) = from.field_ref {
            anyhow::ensure!(
                field.field_path == "metadata.namespace",
                "env {}: fieldRef {} is not played by the harness",
                e.name,
                field.field_path
            );
            env.push((e.name, namespace.to_owned()));
        } else if let Some(key_ref) = from.secret_key_ref {
            let secret = secrets.get_opt(&key_ref.name).await?;
            let value = secret
                .and_then(|s| s.data)
                .and_then(|d| d.get(&key_ref.key).cloned())
                .map(|b| String::from_utf8_lossy(&b.0).into_owned());
            match value {
                Some(v) => env.push((e.name, v)),
                None if key_ref.optional == Some(true) => {}
                None => anyhow::bail!(
                    "env {}: Secret {namespace}/{} has no key {}",
                    e.name,
                    key_ref.name,
                    key_ref.key
                ),
            }
        } else {
            anyhow::bail!("env {}: a valueFrom the harness does not play", e.name);
        }
    }
    // The ServiceAccount's credentials.
    let service_account = pod
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".to_owned());
    let token = kubectl_in(
        cluster.kubeconfig(),
        &[
            "create",
            "token",
            &service_account,
            "-n",
            namespace,
            "--duration=2h",
        ],
        None,
    )?
    .trim()
    .to_owned();
    let kubeconfig = dir.join("serviceaccount.kubeconfig");
    std::fs::write(&kubeconfig, service_account_kubeconfig(cluster, &token)?)?;
    env.push((
        "KUBECONFIG".to_owned(),
        kubeconfig.to_string_lossy().into_owned(),
    ));
    let log = dir.join("agent.log");
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let process = Supervised::start_with_env(
        &format!("agent-pod-{name}"),
        agent,
        &args,
        &env_refs,
        &log,
        detached,
    )?;
    Ok(AgentPod {
        process,
        args,
        env_names: env.into_iter().map(|(k, _)| k).collect(),
        log,
    })
}

/// A kubeconfig of `cluster`'s server and CA with the bearer `token`: what the in-cluster
/// configuration of a pod amounts to.
fn service_account_kubeconfig(cluster: &Cluster, token: &str) -> anyhow::Result<String> {
    let admin = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let named = admin
        .clusters
        .first()
        .and_then(|c| c.cluster.clone())
        .context("the admin kubeconfig has no cluster")?;
    let ca = match (
        &named.certificate_authority_data,
        &named.certificate_authority,
    ) {
        (Some(data), _) => data.clone(),
        // ByteString serializes as base64.
        (None, Some(file)) => serde_json::to_value(k8s_openapi::ByteString(std::fs::read(file)?))?
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        (None, None) => anyhow::bail!("the admin kubeconfig has no CA"),
    };
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": cluster.server(),
            "certificate-authority-data": ca,
        }}],
        "users": [{"name": "pod", "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "workload", "user": "pod"}}],
        "current-context": "pod",
    })
    .to_string())
}
