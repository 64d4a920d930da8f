//! Tenancy on a real local cluster (`flotilla_hub::tenancy`): a HelmRelease whose namespace
//! no ManagedClusterBinding binds to its ManagedCluster gets `Ready=False`/`Stalled=True`
//! `AccessDenied` naming the missing binding and its agent is sent nothing, until a binding
//! lets it through; `--no-cross-namespace-refs` refuses a chart from another namespace as
//! Flux does; `--default-service-account` is impersonated when `spec.serviceAccountName` is
//! empty; the hub's own cluster is refused without `--allow-local-target`.

mod common;

use std::time::Duration;

use flotilla_agent::session as agent_session;
use flotilla_api::{HelmRelease, ManagedCluster, ManagedClusterBinding};
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_hub::controller::PLAN_REVISION_ANNOTATION;
use flotilla_hub::session::{NoArchives, SessionConfig, SessionHub, tokens};
use flotilla_hub::tenancy::ACCESS_DENIED;
use flotilla_tests::tools::kubectl_in;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use kube::ResourceExt as _;
use kube::api::{Api, DeleteParams};

use common::{Env, TIMEOUT, helm_list, podinfo_release, ready, ready_condition};

/// The `Stalled` condition of HelmRelease `name`.
async fn stalled(
    hrs: &Api<HelmRelease>,
    name: &str,
) -> anyhow::Result<flotilla_core::meta::Condition> {
    let hr = hrs.get(name).await?;
    hr.status
        .as_ref()
        .and_then(|s| s.conditions.get_condition(condition::STALLED).cloned())
        .ok_or_else(|| anyhow::anyhow!("HelmRelease {name} has no Stalled condition"))
}

/// `kubectl get helmcharts -n NAMESPACE -o name`.
fn helm_charts(kubeconfig: &std::path::Path, namespace: &str) -> anyhow::Result<String> {
    kubectl_in(
        kubeconfig,
        &[
            "get",
            "helmcharts.source.flotilla.dev",
            "-n",
            namespace,
            "-o",
            "name",
        ],
        None,
    )
}

#[tokio::test]
async fn a_helm_release_whose_namespace_is_not_bound_to_its_managed_cluster_is_access_denied_and_sent_nothing_until_a_binding_lets_it_through()
-> anyhow::Result<()> {
    common::init_logging();
    let cluster = Cluster::start(ClusterOptions::named("hub-tenancy")).await?;
    let client = cluster.client().await?;
    common::install_crds(&client).await?;
    // Only the bindings of this test.
    let bindings: Api<ManagedClusterBinding> = Api::all(client.clone());
    bindings
        .delete(common::BIND_ALL, &DeleteParams::default())
        .await?;
    let repo = flotilla_tests::servers::HelmRepoServer::start(
        flotilla_tests::servers::RepoOptions::named("hub-tenancy"),
    )
    .await?;
    repo.publish_version(&common::podinfo_chart(), "6.5.2")?;
    kubectl_in(
        cluster.kubeconfig(),
        &["create", "namespace", "flotilla-system"],
        None,
    )?;
    let artifacts = tempfile::tempdir()?;
    let mut config = common::hub_config(&cluster, artifacts.path());
    let sessions = SessionHub::start(
        client.clone(),
        SessionConfig {
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(4),
            ..SessionConfig::default()
        },
        tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        config.report_sink(),
        std::sync::Arc::new(NoArchives),
    )
    .await?;
    config.remote = Some(sessions.links());
    let hub = flotilla_hub::run::Hub::start(config).await?;
    let hrs: Api<HelmRelease> = Api::namespaced(client.clone(), "default");

    // The agent of cluster `edge` joins (auto-accepted) and connects first.
    let token = tokens::create(
        client.clone(),
        "flotilla-system",
        &tokens::TokenOptions {
            auto_accept: true,
            ..tokens::TokenOptions::new(tokens::TokenScope::Cluster("edge".into()))
        },
    )
    .await?
    .expose();
    let identity = agent_session::join(
        &client,
        &agent_session::JoinOptions {
            hub: agent_session::HubAddress::parse(&format!(
                "https://127.0.0.1:{}",
                sessions.local_addr().port()
            ))?,
            token: Some(token),
            ca_pin: agent_session::CaPin::parse(&sessions.ca().pin().to_string())?,
            cluster_name: "edge".into(),
            namespace: "default".into(),
            poll_interval: Duration::from_millis(300),
        },
    )
    .await?;
    let (handle, reports, mut external) = flotilla_agent::runtime::external();
    let (acked_tx, mut acked) = tokio::sync::mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let session = tokio::spawn(agent_session::run(
        client.clone(),
        identity,
        handle,
        reports,
        agent_session::SessionOptions {
            namespace: "default".into(),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(4),
            acked: Some(acked_tx),
            ..agent_session::SessionOptions::default()
        },
        stop.clone(),
    ));
    let commands = tokio::spawn(async move { while external.recv().await.is_some() {} });
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    wait::until("ManagedCluster edge connected", TIMEOUT, || async {
        let mc = clusters.get_opt("edge").await?;
        Ok(mc
            .and_then(|m| m.status)
            .and_then(|s| s.connection)
            .filter(|c| c.state == flotilla_api::fleet::ConnectionState::Connected)
            .map(|_| ()))
    })
    .await?;

    // The namespace is bound, but to another cluster.
    kubectl_in(
        cluster.kubeconfig(),
        &["apply", "-f", "-"],
        Some(
            r#"apiVersion: fleet.flotilla.dev/v1
kind: ManagedClusterBinding
metadata:
  name: default-elsewhere
spec:
  namespaces: [default]
  clusters: [elsewhere]
"#,
        ),
    )?;
    kubectl_in(
        cluster.kubeconfig(),
        &["apply", "-f", "-"],
        Some(&podinfo_release(
            &repo.url(),
            "podinfo-edge",
            "  clusterRef:\n    name: edge",
        )),
    )?;
    let c = ready_condition(&hrs, "podinfo-edge", "Ready=False AccessDenied", |c| {
        c.status == ConditionStatus::False && c.reason == ACCESS_DENIED
    })
    .await?;
    assert_eq!(
        c.message,
        "namespace 'default' is not bound to ManagedCluster 'edge': no ManagedClusterBinding selects both (ManagedClusterBindings of the namespace: default-elsewhere)"
    );
    let s = stalled(&hrs, "podinfo-edge").await?;
    assert_eq!(
        (s.status, s.reason.as_str()),
        (ConditionStatus::True, ACCESS_DENIED)
    );
    // Nothing was planned or sent: no plan revision, no ack from the agent, and no HelmChart
    // made for it.
    let hr = hrs.get("podinfo-edge").await?;
    assert!(
        !hr.annotations().contains_key(PLAN_REVISION_ANNOTATION),
        "{:?}",
        hr.annotations()
    );
    assert!(acked.try_recv().is_err(), "the agent was sent a plan");
    let charts = helm_charts(cluster.kubeconfig(), "default")?;
    assert!(charts.trim().is_empty(), "{charts}");

    // A binding by the cluster's labels (the label set after the binding) lets it through.
    kubectl_in(
        cluster.kubeconfig(),
        &["apply", "-f", "-"],
        Some(
            r#"apiVersion: fleet.flotilla.dev/v1
kind: ManagedClusterBinding
metadata:
  name: default-tenancy-test
spec:
  namespaceSelector:
    matchLabels:
      kubernetes.io/metadata.name: default
  clusterSelector:
    matchLabels:
      tenancy-test: "yes"
"#,
        ),
    )?;
    kubectl_in(
        cluster.kubeconfig(),
        &[
            "label",
            "managedclusters.fleet.flotilla.dev",
            "edge",
            "tenancy-test=yes",
        ],
        None,
    )?;
    let ack = tokio::time::timeout(Duration::from_secs(120), acked.recv())
        .await
        .map_err(|_| anyhow::anyhow!("no plan reached the agent of cluster edge within 120 s"))?
        .ok_or_else(|| anyhow::anyhow!("the session ended"))?;
    assert_eq!(ack.object.name.as_str(), "podinfo-edge");
    assert_eq!(ack.chart_version, "6.5.2");
    let hr = hrs.get("podinfo-edge").await?;
    assert!(
        hr.annotations().contains_key(PLAN_REVISION_ANNOTATION),
        "{:?}",
        hr.annotations()
    );

    stop.cancel();
    let _ = session.await;
    commands.abort();
    hub.stop().await;
    sessions.stop().await;
    Ok(())
}

#[tokio::test]
async fn with_no_cross_namespace_refs_a_chart_from_another_namespace_is_access_denied_as_flux_says_and_one_from_its_own_installs()
-> anyhow::Result<()> {
    let env = Env::start_with("hub-no-xns", |c| c.tenancy.no_cross_namespace_refs = true).await?;
    let hrs = env.helm_releases().await?;
    kubectl_in(env.kubeconfig(), &["create", "namespace", "charts"], None)?;
    env.kubectl_apply(&format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: podinfo
  namespace: charts
spec:
  interval: 5m
  url: {url}
---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: shared
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: podinfo
      sourceRef:
        kind: HelmRepository
        name: podinfo
        namespace: charts
"#,
        url = env.repo.url()
    ))?;
    let c = ready_condition(&hrs, "shared", "Ready=False AccessDenied", |c| {
        c.status == ConditionStatus::False && c.reason == ACCESS_DENIED
    })
    .await?;
    assert_eq!(
        c.message,
        "cross-namespace references are not allowed: cannot access HelmChart charts/default-shared"
    );
    let s = stalled(&hrs, "shared").await?;
    assert_eq!(
        (s.status, s.reason.as_str()),
        (ConditionStatus::True, ACCESS_DENIED)
    );
    let charts = helm_charts(env.kubeconfig(), "charts")?;
    assert!(charts.trim().is_empty(), "no HelmChart in charts: {charts}");

    // The same chart from the HelmRelease's own namespace installs.
    env.kubectl_apply(&podinfo_release(&env.repo.url(), "own", ""))?;
    ready(&hrs, "own").await?;
    assert_eq!(helm_list(env.kubeconfig())?, vec!["own".to_owned()]);
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn the_default_service_account_is_impersonated_when_the_spec_names_none_forbidden_without_rbac_and_installed_with_it()
-> anyhow::Result<()> {
    let env = Env::start_with("hub-default-sa", |c| {
        c.tenancy.default_service_account = Some("deployer".into())
    })
    .await?;
    let hrs = env.helm_releases().await?;
    kubectl_in(
        env.kubeconfig(),
        &["create", "serviceaccount", "deployer", "-n", "default"],
        None,
    )?;
    let release = |replicas: u32| {
        podinfo_release(
            &env.repo.url(),
            "podinfo",
            &format!("  values:\n    replicaCount: {replicas}"),
        )
    };
    env.kubectl_apply(&release(1))?;
    let c = ready_condition(&hrs, "podinfo", "a forbidden Ready=False", |c| {
        c.status == ConditionStatus::False && c.message.contains("forbidden")
    })
    .await?;
    assert!(
        c.message.contains("system:serviceaccount:default:deployer"),
        "the condition names the default ServiceAccount: {c:?}"
    );
    assert!(helm_list(env.kubeconfig())?.is_empty());

    kubectl_in(
        env.kubeconfig(),
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
    ready(&hrs, "podinfo").await?;
    assert_eq!(helm_list(env.kubeconfig())?, vec!["podinfo".to_owned()]);
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_allow_local_target_a_release_for_the_hubs_own_cluster_is_access_denied_and_nothing_is_installed()
-> anyhow::Result<()> {
    let env = Env::start_with("hub-no-local", |c| c.tenancy.local_target = false).await?;
    let hrs = env.helm_releases().await?;
    env.kubectl_apply(&podinfo_release(&env.repo.url(), "podinfo", ""))?;
    let c = ready_condition(&hrs, "podinfo", "Ready=False AccessDenied", |c| {
        c.status == ConditionStatus::False && c.reason == ACCESS_DENIED
    })
    .await?;
    assert_eq!(
        c.message,
        "the hub's own cluster is not a target here: set spec.clusterRef or spec.kubeConfig (the hub runs without --allow-local-target)"
    );
    let s = stalled(&hrs, "podinfo").await?;
    assert_eq!(
        (s.status, s.reason.as_str()),
        (ConditionStatus::True, ACCESS_DENIED)
    );
    assert!(helm_list(env.kubeconfig())?.is_empty());
    let charts = helm_charts(env.kubeconfig(), "default")?;
    assert!(charts.trim().is_empty(), "no HelmChart: {charts}");
    env.stop().await;
    Ok(())
}
