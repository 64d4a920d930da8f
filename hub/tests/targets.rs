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

use common::{Env, TIMEOUT, helm_list, podinfo_release, podinfo_replicas, ready, ready_condition};

/// The kubeconfig Secret Cluster API writes for Cluster `name` (type, label and key `value`
/// as its kubeconfig controller writes them), holding the kubeconfig of `edge`.
fn capi_kubeconfig_secret(name: &str, edge: &Cluster) -> anyhow::Result<String> {
    let kubeconfig = std::fs::read_to_string(edge.kubeconfig())?;
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
    let kubeconfig = std::fs::read_to_string(edge.kubeconfig())?;
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

    env.stop().await;
    Ok(())
}

/// A `spec.kubeConfig.configMapRef` ConfigMap of provider `generic` for `cluster`: its
/// API server and CA, the audience its API server accepts (its ServiceAccount issuer), and
/// `extra` keys.
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
        "audiences": "https://kubernetes.default.svc.cluster.local",
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
    let env = Env::start("hub-wi").await?;
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

    // Without serviceAccountName the token would be the hub's pod's; the hub runs outside
    // a pod here.
    env.kubectl_apply(&generic_provider(&env.cluster, &[])?)?;
    env.kubectl_apply(&release(1))?;
    let c = ready_condition(&hrs, "podinfo-wi", "no ServiceAccount", |c| {
        c.status == ConditionStatus::False && c.reason == "RESTClientError"
    })
    .await?;
    assert!(
        c.message
            .starts_with("no ServiceAccount for the token: the hub does not run in a pod")
            && c.message.contains("key 'serviceAccountName'"),
        "{}",
        c.message
    );

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
