//! Push-mode targets on a second real cluster: a Cluster API `Cluster` (the real Cluster
//! API CRDs, from the Go module `sigs.k8s.io/cluster-api`) whose `<name>-kubeconfig` Secret
//! points at the edge cluster, and `spec.serviceAccountName` impersonated in the target.
//! No Cluster API controller runs: the test writes the Cluster's status and kubeconfig
//! Secret as the providers and Cluster API's controllers would. And
//! `spec.kubeConfig.configMapRef` with provider `generic`: a ServiceAccount token for the
//! target.

mod common;

use flotilla_core::meta::ConditionStatus;
use flotilla_hub::controller::{
    CLUSTER_NOT_FOUND, CLUSTER_NOT_INITIALIZED, PLAN_REVISION_ANNOTATION,
};
use flotilla_tests::tools::kubectl_in;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use kube::ResourceExt as _;
use kube::api::DeleteParams;

use common::{
    Env, TIMEOUT, helm_list, inline_kubeconfig, podinfo_release, podinfo_replicas, ready,
    ready_condition,
};

/// The kubeconfig Secret Cluster API writes for Cluster `name` (type, label and key `value`
/// as its kubeconfig controller writes them), holding the kubeconfig of `edge`.
fn capi_kubeconfig_secret(name: &str, edge: &Cluster) -> anyhow::Result<String> {
    let kubeconfig = inline_kubeconfig(edge)?;
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "cluster.x-k8s.io/secret",
        "metadata": {
            "name": format!("{name}-kubeconfig"),
            "namespace": "default",
            "labels": {"cluster.x-k8s.io/cluster-name": name},
        },
        "stringData": {"value": kubeconfig},
    })
    .to_string())
}

/// A v1beta2 Cluster `name` whose control plane endpoint is the edge cluster's API server.
fn capi_cluster(name: &str, edge: &Cluster) -> anyhow::Result<String> {
    let server = edge.server().trim_start_matches("https://");
    let (host, port) = server
        .rsplit_once(':')
        .ok_or_else(|| anyhow::anyhow!("no port in {server}"))?;
    let port: u16 = port.trim_end_matches('/').parse()?;
    Ok(serde_json::json!({
        "apiVersion": "cluster.x-k8s.io/v1beta2",
        "kind": "Cluster",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"controlPlaneEndpoint": {"host": host, "port": port}},
    })
    .to_string())
}

/// Patches the status subresource of Cluster `name` with `status` (as JSON).
fn set_cluster_status(env: &Env, name: &str, status: serde_json::Value) -> anyhow::Result<()> {
    kubectl_in(
        env.kubeconfig(),
        &[
            "patch",
            "clusters.cluster.x-k8s.io",
            name,
            "-n",
            "default",
            "--subresource=status",
            "--type=merge",
            "-p",
            &serde_json::json!({"status": status}).to_string(),
        ],
        None,
    )?;
    Ok(())
}

#[tokio::test]
async fn a_cluster_api_cluster_target_installs_nothing_until_its_control_plane_is_initialized_then_installs_through_its_kubeconfig_secret()
-> anyhow::Result<()> {
    let (env, edge) = tokio::join!(
        Env::start("hub-capi"),
        Cluster::start(ClusterOptions::named("hub-capi-edge"))
    );
    let (env, edge) = (env?, edge?);
    flotilla_tests::capi::install_crds(env.kubeconfig())?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let target = "  releaseName: podinfo\n  clusterRef:\n    kind: Cluster\n    name: edge";

    // No Cluster yet: a clear reason, nothing sent.
    env.kubectl_apply(&podinfo_release(&url, "podinfo-capi", target))?;
    let c = ready_condition(&hrs, "podinfo-capi", CLUSTER_NOT_FOUND, |c| {
        c.status == ConditionStatus::False && c.reason == CLUSTER_NOT_FOUND
    })
    .await?;
    assert_eq!(
        c.message,
        "Cluster API Cluster 'default/edge' (spec.clusterRef) not found"
    );

    // The Cluster and its kubeconfig Secret exist, the infrastructure is provisioned, the
    // control plane is not initialized: the release waits, and nothing reaches the edge.
    env.kubectl_apply(&capi_cluster("edge", &edge)?)?;
    env.kubectl_apply(&capi_kubeconfig_secret("edge", &edge)?)?;
    set_cluster_status(
        &env,
        "edge",
        serde_json::json!({
            "phase": "Provisioning",
            "initialization": {"infrastructureProvisioned": true},
        }),
    )?;
    let c = ready_condition(&hrs, "podinfo-capi", CLUSTER_NOT_INITIALIZED, |c| {
        c.status == ConditionStatus::False && c.reason == CLUSTER_NOT_INITIALIZED
    })
    .await?;
    assert_eq!(
        c.message,
        "waiting for the control plane of Cluster API Cluster 'default/edge' to be initialized (phase Provisioning)"
    );
    // Several requeues (every 2 s in these tests) later, still nothing.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let hr = hrs.get("podinfo-capi").await?;
    assert!(
        !hr.annotations().contains_key(PLAN_REVISION_ANNOTATION),
        "no plan was made before the control plane was initialized"
    );
    assert!(helm_list(edge.kubeconfig())?.is_empty());
    let agent_ns = kubectl_in(
        edge.kubeconfig(),
        &[
            "get",
            "namespaces",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ],
        None,
    )?;
    assert!(
        !agent_ns.contains("flotilla"),
        "no in-process agent reached the edge yet: {agent_ns}"
    );

    // Cluster API marks the control plane initialized (v1beta2: the initialization field
    // and the condition): the release goes out in push mode to the edge.
    set_cluster_status(
        &env,
        "edge",
        serde_json::json!({
            "phase": "Provisioned",
            "initialization": {
                "infrastructureProvisioned": true,
                "controlPlaneInitialized": true,
            },
            "conditions": [{
                "type": "ControlPlaneInitialized",
                "status": "True",
                "reason": "Initialized",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }],
        }),
    )?;
    ready(&hrs, "podinfo-capi").await?;
    assert_eq!(helm_list(edge.kubeconfig())?, vec!["podinfo".to_owned()]);
    assert!(
        helm_list(env.kubeconfig())?.is_empty(),
        "nothing is installed in the hub's cluster"
    );

    // The same Secret works as a plain kubeConfig target (key `value`), served by the same
    // in-process agent.
    env.kubectl_apply(&podinfo_release(
        &url,
        "podinfo-kc",
        "  releaseName: podinfo-kc\n  kubeConfig:\n    secretRef:\n      name: edge-kubeconfig",
    ))?;
    ready(&hrs, "podinfo-kc").await?;
    let mut on_edge = helm_list(edge.kubeconfig())?;
    on_edge.sort();
    assert_eq!(on_edge, vec!["podinfo".to_owned(), "podinfo-kc".to_owned()]);

    // Deleting the HelmRelease uninstalls from the Cluster API cluster.
    hrs.delete("podinfo-capi", &DeleteParams::default()).await?;
    wait::until("podinfo-capi to be gone", TIMEOUT, || async {
        Ok(hrs.get_opt("podinfo-capi").await?.is_none().then_some(()))
    })
    .await?;
    assert_eq!(helm_list(edge.kubeconfig())?, vec!["podinfo-kc".to_owned()]);

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn service_account_name_is_impersonated_in_the_push_target_forbidden_without_rbac_and_installed_with_it()
-> anyhow::Result<()> {
    let (env, edge) = tokio::join!(
        Env::start("hub-sa"),
        Cluster::start(ClusterOptions::named("hub-sa-edge"))
    );
    let (env, edge) = (env?, edge?);
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let kubeconfig = inline_kubeconfig(&edge)?;
    env.kubectl_apply(
        &serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "edge-kubeconfig", "namespace": "default"},
            "stringData": {"value": kubeconfig},
        })
        .to_string(),
    )?;
    // The ServiceAccount exists in the target (in the HelmRelease's namespace, as Flux
    // impersonates it) with no permission at all.
    kubectl_in(
        edge.kubeconfig(),
        &["create", "serviceaccount", "deployer", "-n", "default"],
        None,
    )?;
    let release = |replicas: u32| {
        podinfo_release(
            &url,
            "podinfo-sa",
            &format!(
                "  releaseName: podinfo\n  serviceAccountName: deployer\n  kubeConfig:\n    secretRef:\n      name: edge-kubeconfig\n  values:\n    replicaCount: {replicas}"
            ),
        )
    };
    env.kubectl_apply(&release(1))?;
    let c = ready_condition(&hrs, "podinfo-sa", "a forbidden Ready=False", |c| {
        c.status == ConditionStatus::False && c.message.contains("forbidden")
    })
    .await?;
    assert!(
        c.message.contains("system:serviceaccount:default:deployer"),
        "the condition names the impersonated ServiceAccount: {c:?}"
    );
    assert!(helm_list(edge.kubeconfig())?.is_empty());
    let deployments = kubectl_in(
        edge.kubeconfig(),
        &["get", "deployments", "-n", "default", "-o", "name"],
        None,
    )?;
    assert!(deployments.trim().is_empty(), "{deployments}");

    // With RBAC for the ServiceAccount in its namespace, it installs (a spec change starts a
    // new attempt, as Flux retries a failed install on a new generation).
    kubectl_in(
        edge.kubeconfig(),
        &[
            "create",
            "rolebinding",
            "deployer-admin",
            "--clusterrole=admin",
            "--serviceaccount=default:deployer",
            "-n",
            "default",
        ],
        None,
    )?;
    env.kubectl_apply(&release(2))?;
    ready(&hrs, "podinfo-sa").await?;
    assert_eq!(helm_list(edge.kubeconfig())?, vec!["podinfo".to_owned()]);
    let replicas = podinfo_replicas(edge.kubeconfig())?;
    assert_eq!(replicas, "2");

    // The Forbidden failure and every Event read as sentences.
    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}

/// A `spec.kubeConfig.configMapRef` ConfigMap of provider `generic` for `cluster`: its
/// API server and CA, and `extra` keys. (The token's audience is the API server's address,
/// which the test clusters accept: `--api-audiences`.)
fn generic_provider(cluster: &Cluster, extra: &[(&str, &str)]) -> anyhow::Result<String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
    let ca_file = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority.clone())
        .ok_or_else(|| anyhow::anyhow!("the test kubeconfig names no CA file"))?;
    let mut data = serde_json::json!({
        "provider": "generic",
        "address": cluster.server(),
        "ca.crt": std::fs::read_to_string(ca_file)?,
    });
    for (k, v) in extra {
        data[*k] = serde_json::Value::from(*v);
    }
    Ok(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "workload-identity", "namespace": "default"},
        "data": data,
    })
    .to_string())
}

#[tokio::test]
async fn a_generic_workload_identity_config_map_installs_with_a_token_of_its_service_account_which_its_rbac_governs()
-> anyhow::Result<()> {
    // The target is the hub's own cluster reached through its address with a token: the
    // cluster trusts its own ServiceAccount issuer, as a target federated with the hub's
    // cluster would.
    let mut env = Env::start("hub-wi").await?;
    let hrs = env.helm_releases().await?;
    let release = |replicas: u32| {
        podinfo_release(
            &env.repo.url(),
            "podinfo-wi",
            &format!(
                "  releaseName: podinfo\n  kubeConfig:\n    configMapRef:\n      name: workload-identity\n  values:\n    replicaCount: {replicas}"
            ),
        )
    };

    // Without serviceAccountName: refused (the hub never falls back to its own identity).
    env.kubectl_apply(&generic_provider(&env.cluster, &[])?)?;
    env.kubectl_apply(&release(1))?;
    let c = ready_condition(&hrs, "podinfo-wi", "no ServiceAccount", |c| {
        c.status == ConditionStatus::False && c.reason == "RESTClientError"
    })
    .await?;
    assert_eq!(
        c.message,
        "key 'serviceAccountName' is required (spec.kubeConfig.configMapRef: ConfigMap 'default/workload-identity'): the token is one of a ServiceAccount of namespace default, never the hub's own"
    );

    // The audience is not the ConfigMap's choice: one the hub's own API server accepts (its
    // issuer) would make a token for the hub's cluster, sent to the ConfigMap's address.
    env.kubectl_apply(&generic_provider(
        &env.cluster,
        &[
            ("serviceAccountName", "deployer"),
            ("audiences", "https://kubernetes.default.svc.cluster.local"),
        ],
    )?)?;
    let c = ready_condition(&hrs, "podinfo-wi", "the audience refused", |c| {
        c.status == ConditionStatus::False && c.message.contains("key 'audiences'")
    })
    .await?;
    assert_eq!(
        c.message,
        format!(
            "key 'audiences' may only name the target's address {} (spec.kubeConfig.configMapRef: ConfigMap 'default/workload-identity'): the hub sets the token's audience to the address it sends the token to; remove the key",
            env.cluster.server()
        )
    );
    assert!(helm_list(env.kubeconfig())?.is_empty());

    // A ServiceAccount with no permission: the target answers Forbidden for it, so the
    // agent's client carries its token (not the hub's credentials).
    kubectl_in(
        env.kubeconfig(),
        &["create", "serviceaccount", "deployer", "-n", "default"],
        None,
    )?;
    env.kubectl_apply(&generic_provider(
        &env.cluster,
        &[("serviceAccountName", "deployer")],
    )?)?;
    let c = ready_condition(&hrs, "podinfo-wi", "a forbidden Ready=False", |c| {
        c.status == ConditionStatus::False && c.message.contains("forbidden")
    })
    .await?;
    assert!(
        c.message.contains("system:serviceaccount:default:deployer"),
        "the condition names the token's ServiceAccount: {c:?}"
    );
    assert!(helm_list(env.kubeconfig())?.is_empty());

    // With RBAC for it, the release installs through the token.
    kubectl_in(
        env.kubeconfig(),
        &[
            "create",
            "clusterrolebinding",
            "deployer-admin",
            "--clusterrole=cluster-admin",
            "--serviceaccount=default:deployer",
        ],
        None,
    )?;
    ready(&hrs, "podinfo-wi").await?;
    assert_eq!(helm_list(env.kubeconfig())?, vec!["podinfo".to_owned()]);
    env.kubectl_apply(&release(2))?;
    wait::until("the upgrade through the token", TIMEOUT, || async {
        ready(&hrs, "podinfo-wi").await?;
        let replicas = podinfo_replicas(env.kubeconfig())?;
        Ok((replicas == "2").then_some(()))
    })
    .await?;

    // The hub's own identity is never lent to a target: a hub running as ServiceAccount
    // default/flotilla-hub refuses a ConfigMap naming it.
    kubectl_in(
        env.kubeconfig(),
        &["create", "serviceaccount", "flotilla-hub", "-n", "default"],
        None,
    )?;
    kubectl_in(
        env.kubeconfig(),
        &[
            "create",
            "clusterrolebinding",
            "flotilla-hub-admin",
            "--clusterrole=cluster-admin",
            "--serviceaccount=default:flotilla-hub",
        ],
        None,
    )?;
    let token = kubectl_in(
        env.kubeconfig(),
        &[
            "create",
            "token",
            "flotilla-hub",
            "-n",
            "default",
            "--duration=1h",
        ],
        None,
    )?;
    let mut as_hub: serde_json::Value = serde_json::from_str(&inline_kubeconfig(&env.cluster)?)?;
    as_hub["users"][0]["user"] = serde_json::json!({"token": token.trim()});
    let dir = tempfile::tempdir()?;
    let hub_kubeconfig = dir.path().join("hub-as-service-account.kubeconfig");
    std::fs::write(&hub_kubeconfig, as_hub.to_string())?;
    env.kubectl_apply(&generic_provider(
        &env.cluster,
        &[("serviceAccountName", "flotilla-hub")],
    )?)?;
    if let Some(hub) = env.hub.take() {
        hub.stop().await;
    }
    let mut config = common::hub_config(&env.cluster, env.artifacts.path());
    config.kubeconfig = Some(hub_kubeconfig);
    env.hub = Some(flotilla_hub::run::Hub::start(config).await?);
    let c = ready_condition(
        &hrs,
        "podinfo-wi",
        "the hub's own ServiceAccount refused",
        |c| c.status == ConditionStatus::False && c.message.contains("the hub's own"),
    )
    .await?;
    assert_eq!(
        c.message,
        "ServiceAccount 'default/flotilla-hub' is the hub's own (spec.kubeConfig.configMapRef: ConfigMap 'default/workload-identity', key 'serviceAccountName'): the hub never sends a token of its own identity to a target"
    );

    env.stop().await;
    Ok(())
}

/// How a 404 that is no Kubernetes `Status` reads (issue 35).
const NOT_FOUND: &str = "Not Found: the server has no such resource; check the kubeConfig's server URL (scheme, host, port, no extra path) and that the resource's CRD is installed (HTTP 404)";

/// A plain TCP server on 127.0.0.1 that records every byte it is sent (request lines and
/// headers) and answers 404: where a kubeconfig Secret would make the hub send its
/// requests.
struct Recorder {
    port: u16,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u8>>>,
    connections: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start() -> anyhow::Result<Recorder> {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let connections = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (s, n) = (seen.clone(), connections.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                n.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let s = s.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    let read = tokio::time::timeout(
                        std::time::Duration::from_secs(5),
                        stream.read(&mut buf),
                    )
                    .await;
                    if let Ok(Ok(len)) = read {
                        s.lock()
                            .expect("the recorder's lock")
                            .extend_from_slice(&buf[..len]);
                    }
                    let _ = stream
                        .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                        .await;
                });
            }
        });
        Ok(Recorder {
            port,
            seen,
            connections,
            task,
        })
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn seen(&self) -> String {
        String::from_utf8_lossy(&self.seen.lock().expect("the recorder's lock")).into_owned()
    }

    fn connections(&self) -> usize {
        self.connections.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A kubeconfig Secret `name` in `default` whose one user is `user`, for `server`.
fn kubeconfig_secret(name: &str, server: &str, user: serde_json::Value) -> String {
    let kubeconfig = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "target", "cluster": {"server": server}}],
        "users": [{"name": "tenant", "user": user}],
        "contexts": [{"name": "target", "context": {"cluster": "target", "user": "tenant"}}],
        "current-context": "target",
    });
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": "default"},
        "stringData": {"value": kubeconfig.to_string()},
    })
    .to_string()
}

#[tokio::test]
async fn a_kubeconfig_secret_makes_the_hub_neither_send_a_file_of_its_host_nor_run_a_command()
-> anyhow::Result<()> {
    let env = Env::start("hub-kc-policy").await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let recorder = Recorder::start().await?;
    let dir = tempfile::tempdir()?;
    let token = format!("stolen-hub-token-{}", std::process::id());
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token)?;
    let marker = dir.path().join("the-exec-plugin-ran");
    let path = |p: &std::path::Path| p.to_string_lossy().into_owned();

    // The attack of issue 29: the hub's file sent as a bearer token to the Secret's server;
    // a command run by the hub.
    env.kubectl_apply(&kubeconfig_secret(
        "kc-token",
        &recorder.url(),
        serde_json::json!({"tokenFile": path(&token_file)}),
    ))?;
    env.kubectl_apply(&kubeconfig_secret(
        "kc-exec",
        &recorder.url(),
        serde_json::json!({"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/usr/bin/touch",
            "args": [path(&marker)],
            "interactiveMode": "Never",
        }}),
    ))?;
    for (release, secret) in [("podinfo-token", "kc-token"), ("podinfo-exec", "kc-exec")] {
        env.kubectl_apply(&podinfo_release(
            &url,
            release,
            &format!(
                "  releaseName: {release}\n  kubeConfig:\n    secretRef:\n      name: {secret}"
            ),
        ))?;
    }
    let refused = |field: &'static str| {
        move |c: &flotilla_core::meta::Condition| {
            // The field's sentence, not any message naming it: a HelmChart named
            // `…-podinfo-exec` not ready yet would match "exec" alone.
            c.status == ConditionStatus::False
                && c.message.contains(&format!("user.{field} is not allowed"))
        }
    };
    let c = ready_condition(
        &hrs,
        "podinfo-token",
        "tokenFile refused",
        refused("tokenFile"),
    )
    .await?;
    assert_eq!(
        c.message,
        "kubeConfig Secret default/kc-token key \"value\": users[0].user.tokenFile is not allowed: the hub reads no file of its own host for a kubeconfig unless started with --insecure-kubeconfig-files; put the content in token"
    );
    let c = ready_condition(&hrs, "podinfo-exec", "exec refused", refused("exec")).await?;
    assert_eq!(
        c.message,
        "kubeConfig Secret default/kc-exec key \"value\": users[0].user.exec is not allowed: the hub runs no command from a kubeconfig unless started with --insecure-kubeconfig-exec"
    );

    // Several requeues (every 2 s in these tests) later: nothing ran, nothing was sent.
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    assert!(!marker.exists(), "the exec plugin's command ran in the hub");
    let seen = recorder.seen();
    assert!(
        !seen.contains(&token),
        "the hub sent its file's content: {seen}"
    );
    assert_eq!(
        recorder.connections(),
        0,
        "the hub reached the Secret's server: {seen}"
    );
    for release in ["podinfo-token", "podinfo-exec"] {
        let hr = hrs.get(release).await?;
        let text = serde_json::to_string(&hr.status)?;
        for secret in [
            token.as_str(),
            &path(&token_file),
            &path(&marker),
            "/usr/bin/touch",
        ] {
            assert!(
                !text.contains(secret),
                "the status quotes the Secret: {text}"
            );
        }
    }

    // What is allowed (an inline token) reaches the Secret's server; a server that is no
    // API server (a 404 without a Status) reads as a sentence (issue 35), not a Debug dump.
    let answering = Recorder::start().await?;
    env.kubectl_apply(&kubeconfig_secret(
        "kc-404",
        &answering.url(),
        serde_json::json!({"token": "the-tenant-s-own-token"}),
    ))?;
    env.kubectl_apply(&podinfo_release(
        &url,
        "podinfo-404",
        "  releaseName: podinfo-404\n  kubeConfig:\n    secretRef:\n      name: kc-404",
    ))?;
    let c = ready_condition(&hrs, "podinfo-404", "the 404 in a sentence", |c| {
        c.status == ConditionStatus::False && c.message.contains("HTTP 404")
    })
    .await?;
    assert_eq!(
        c.message,
        format!(
            "starting the in-process agent of kubeConfig Secret default/kc-404: getting Namespace flotilla-system: {NOT_FOUND}"
        )
    );
    assert!(
        answering
            .seen()
            .to_ascii_lowercase()
            .contains("authorization: bearer the-tenant-s-own-token"),
        "{}",
        answering.seen()
    );

    // A real API server behind a wrong path prefix in the server URL (the hub's own, with
    // its own credentials): it answers 404 with a plain-text body, which reads the same.
    let mut wrong_path: serde_json::Value =
        serde_json::from_str(&inline_kubeconfig(&env.cluster)?)?;
    let server = wrong_path["clusters"][0]["cluster"]["server"]
        .as_str()
        .ok_or_else(|| anyhow::anyhow!("no server in the hub cluster's kubeconfig"))?
        .trim_end_matches('/')
        .to_owned();
    wrong_path["clusters"][0]["cluster"]["server"] =
        serde_json::Value::String(format!("{server}/no-such-prefix"));
    env.kubectl_apply(
        &serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "kc-wrong-path", "namespace": "default"},
            "stringData": {"value": wrong_path.to_string()},
        })
        .to_string(),
    )?;
    env.kubectl_apply(&podinfo_release(
        &url,
        "podinfo-wrong-path",
        "  releaseName: podinfo-wrong-path\n  kubeConfig:\n    secretRef:\n      name: kc-wrong-path",
    ))?;
    let c = ready_condition(&hrs, "podinfo-wrong-path", "the wrong path's 404", |c| {
        c.status == ConditionStatus::False && c.message.contains("HTTP 404")
    })
    .await?;
    assert_eq!(
        c.message,
        format!(
            "starting the in-process agent of kubeConfig Secret default/kc-wrong-path: getting Namespace flotilla-system: {NOT_FOUND}"
        )
    );
    // Every condition and Event these refusals and failures left is a sentence.
    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn insecure_skip_tls_verify_is_refused_by_default_and_served_with_insecure_kubeconfig_tls()
-> anyhow::Result<()> {
    let (env, edge) = tokio::join!(
        Env::start("hub-kc-tls"),
        Cluster::start(ClusterOptions::named("hub-kc-tls-edge"))
    );
    let (mut env, edge) = (env?, edge?);
    let hrs = env.helm_releases().await?;
    let mut kubeconfig: serde_json::Value = serde_json::from_str(&inline_kubeconfig(&edge)?)?;
    let cluster = &mut kubeconfig["clusters"][0]["cluster"];
    cluster
        .as_object_mut()
        .ok_or_else(|| anyhow::anyhow!("no cluster in the edge's kubeconfig"))?
        .remove("certificate-authority-data");
    cluster["insecure-skip-tls-verify"] = serde_json::Value::Bool(true);
    env.kubectl_apply(
        &serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "edge-insecure", "namespace": "default"},
            "stringData": {"value": kubeconfig.to_string()},
        })
        .to_string(),
    )?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-insecure",
        "  releaseName: podinfo\n  kubeConfig:\n    secretRef:\n      name: edge-insecure",
    ))?;
    let c = ready_condition(&hrs, "podinfo-insecure", "insecure TLS refused", |c| {
        c.status == ConditionStatus::False && c.message.contains("insecure-skip-tls-verify")
    })
    .await?;
    assert_eq!(
        c.message,
        "kubeConfig Secret default/edge-insecure key \"value\": clusters[0].cluster.insecure-skip-tls-verify is not allowed: the hub verifies the API server's certificate unless started with --insecure-kubeconfig-tls; give the CA in certificate-authority-data"
    );
    assert!(helm_list(edge.kubeconfig())?.is_empty());

    // The operator opts in: the same Secret is served.
    env.configure = |c| c.kubeconfig_policy.allow_insecure_tls = true;
    env.restart_hub().await?;
    ready(&hrs, "podinfo-insecure").await?;
    assert_eq!(helm_list(edge.kubeconfig())?, vec!["podinfo".to_owned()]);

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_cluster_api_kubeconfig_secret_appearing_reconciles_its_helm_release_at_once_not_at_a_requeue()
-> anyhow::Result<()> {
    // Requeues of an hour: only the Secret's watch can reconcile the HelmRelease again. The
    // Cluster's kubeconfig points at the hub's own cluster.
    let env = Env::start_with("hub-capi-watch", |config| {
        config.requeue_dependency = std::time::Duration::from_secs(3600);
    })
    .await?;
    flotilla_tests::capi::install_crds(env.kubeconfig())?;
    let hrs = env.helm_releases().await?;
    env.kubectl_apply(&capi_cluster("edge", &env.cluster)?)?;
    set_cluster_status(
        &env,
        "edge",
        serde_json::json!({
            "phase": "Provisioned",
            "initialization": {
                "infrastructureProvisioned": true,
                "controlPlaneInitialized": true,
            },
        }),
    )?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-capi",
        "  releaseName: podinfo\n  clusterRef:\n    kind: Cluster\n    name: edge",
    ))?;
    ready_condition(&hrs, "podinfo-capi", "no kubeconfig Secret", |c| {
        c.status == ConditionStatus::False && c.reason == "RESTClientError"
    })
    .await?;
    // Let the HelmChart settle, so that none of its changes reconciles the HelmRelease.
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;

    env.kubectl_apply(&capi_kubeconfig_secret("edge", &env.cluster)?)?;
    ready(&hrs, "podinfo-capi").await?;
    assert_eq!(helm_list(env.kubeconfig())?, vec!["podinfo".to_owned()]);

    env.stop().await;
    Ok(())
}
