//! Cluster API onboarding end to end (`flotilla_hub::onboarding`): the real hub binary with
//! `--capi-import`, the real Cluster API `Cluster` CRD, a real workload cluster and the real
//! agent binary.
//!
//! The harness plays two roles and nothing else: the Cluster API providers (it writes the
//! Cluster, its `<name>-kubeconfig` Secret and, when the test says so, marks the control
//! plane initialized) and the kubelet of the workload cluster
//! (`flotilla_tests::capi_kubelet`: it runs the agent Deployment the hub applied, as that
//! Deployment says).
//!
//! Two tests, one at a time ([`SERIAL`]: each starts several local control planes):
//!
//! - one management cluster and one workload cluster serve the checks of one Cluster in
//!   order: import, bootstrap, re-bootstrap, token reuse refused, a bad kubeconfig, no
//!   kubeconfig request after the join (the audit log), an agent upgrade, pause, deletion;
//! - the fleet: three `env=prod` Clusters, each with a workload API server of its own
//!   (`ClusterOptions::api_server_only`: the set's releases do not wait for pods), and a
//!   fourth created later all get a HelmReleaseSet's release as their agents join; a
//!   refused kubeconfig Secret fixed, a rotated one (the old credential revoked) used for
//!   the agent upgrade that follows, and an upgraded agent that never reconnects stopping
//!   the upgrade rollout.

mod common;

use std::time::Duration;

use flotilla_api::ManagedCluster;
use flotilla_core::meta::{Condition, Conditions as _};
use flotilla_tests::bins::{self, Progress};
use flotilla_tests::capi::provider;
use flotilla_tests::fleet::{Fleet, FleetOptions, HUB_NAMESPACE};
use flotilla_tests::tools::kubectl_in;
use flotilla_tests::{Cluster, ClusterOptions, capi, capi_kubelet, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

use common::inline_kubeconfig;

const TIMEOUT: Duration = Duration::from_secs(120);
const NS: &str = "fleet";
const AGENT_NS: &str = "flotilla-system";
/// The ServiceAccount (of `kube-system` in the workload cluster) the kubeconfig Secret
/// authenticates as.
const BOOTSTRAP_SA: &str = "capi-bootstrap";
/// The release's message after its upgrade.
const UPGRADED: &str = "Upgraded over the session";
/// The image the hub is restarted with (an agent upgrade).
const NEW_IMAGE: &str = "registry.example/flotilla/flotilla-agent:test-2";

/// The tests of this file run one at a time: each starts several local control planes,
/// and two at once on a small machine would only make both slower.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn bootstrap_condition(mc: &ManagedCluster) -> Option<&Condition> {
    mc.status
        .as_ref()?
        .conditions
        .get_condition(flotilla_hub::onboarding::CONDITION)
}

/// Waits until ManagedCluster `name`'s `AgentBootstrap` condition has `reason`.
async fn until_step(
    mcs: &Api<ManagedCluster>,
    name: &str,
    reason: &str,
) -> anyhow::Result<ManagedCluster> {
    let waited = wait::until(
        &format!("ManagedCluster {name}: {reason}"),
        TIMEOUT,
        || async {
            let mc = mcs.get_opt(name).await?;
            Ok(mc.filter(|mc| bootstrap_condition(mc).is_some_and(|c| c.reason == reason)))
        },
    )
    .await;
    match waited {
        Ok(mc) => Ok(mc),
        Err(e) => {
            let last = mcs.get_opt(name).await.ok().flatten();
            Err(e.context(format!("it is: {last:#?}")))
        }
    }
}

async fn mc_annotation(
    mcs: &Api<ManagedCluster>,
    name: &str,
    key: &str,
) -> anyhow::Result<Option<String>> {
    Ok(mcs
        .get(name)
        .await?
        .metadata
        .annotations
        .and_then(|a| a.get(key).cloned()))
}

#[tokio::test]
async fn selected_cluster_api_clusters_are_imported_bootstrapped_once_initialized_joined_and_released_to_over_the_session()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    common::init_logging();
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("agent-values.yaml");
    // What the agent installs: any chart (the chart's own rbac.workload switch).
    std::fs::write(&values, "rbac:\n  workload:\n    clusterAdmin: true\n")?;
    let mut options = FleetOptions::named("capi");
    options.workloads = Vec::new();
    options.hub_args = [
        "--capi-import",
        "--capi-import-selector=env=prod",
        "--capi-hub-url=${HUB_URL}",
        "--capi-agent-image=registry.example/flotilla/flotilla-agent:test",
        // Short: the first agent is left to miss its deadline.
        "--capi-agent-join-timeout=10s",
        "--capi-resync-interval=2s",
    ]
    .into_iter()
    .map(str::to_owned)
    .chain([format!("--capi-agent-values={}", values.display())])
    .collect();
    let binaries = bins::build(Progress::OnFailure)?;
    let (fleet, edge) = tokio::join!(
        Fleet::start(binaries.clone(), options),
        Cluster::start(ClusterOptions {
            audit_log: true,
            ..ClusterOptions::named("capi-edge")
        }),
    );
    let (mut fleet, edge) = (fleet?, edge?);
    // The kubeconfig the "provider" writes authenticates as a user of its own, so the
    // workload API server's audit log tells the hub's uses of it from the harness's.
    let edge_kubeconfig = kubeconfig_of_user(&edge, BOOTSTRAP_SA)?;
    capi::install_crds(fleet.kubeconfig())?;
    let hub = fleet.mgmt.client().await?;
    let mcs: Api<ManagedCluster> = Api::all(hub.clone());
    fleet.apply(&format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\n{}\n---\n{}\n---\n{}\n",
        provider::cluster(
            NS,
            "edge",
            serde_json::json!({"env": "prod", "tier": "edge", "fleet.flotilla.dev/x": "forged"}),
            &edge
        )?,
        provider::cluster(NS, "broken", serde_json::json!({"env": "prod"}), &edge)?,
        provider::cluster(NS, "dev", serde_json::json!({"env": "dev"}), &edge)?,
    ))?;

    // Imported, with its labels, before anything else.
    let mc = until_step(&mcs, "fleet.edge", "WaitingForControlPlane").await?;
    let labels = mc.metadata.labels.clone().unwrap_or_default();
    for (k, v) in [
        ("env", "prod"),
        ("tier", "edge"),
        ("capi.fleet.flotilla.dev/namespace", NS),
        ("capi.fleet.flotilla.dev/cluster", "edge"),
        ("capi.fleet.flotilla.dev/imported", "true"),
    ] {
        assert_eq!(
            labels.get(k).map(String::as_str),
            Some(v),
            "label {k}: {labels:?}"
        );
    }
    assert!(!labels.contains_key("fleet.flotilla.dev/x"), "{labels:?}");
    assert!(mc.spec.accepted);
    assert!(
        mcs.get_opt("fleet.dev").await?.is_none(),
        "an unselected Cluster was imported"
    );

    // The kubeconfig exists, the control plane is not initialized: nothing is applied.
    fleet.apply(&provider::kubeconfig_secret(NS, "edge", &edge_kubeconfig))?;
    let workload = edge.client().await?;
    let deployments: Api<Deployment> = Api::namespaced(workload.clone(), AGENT_NS);
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert!(
        deployments.get_opt("flotilla-agent").await?.is_none(),
        "the agent was installed before the control plane was initialized"
    );
    until_step(&mcs, "fleet.edge", "WaitingForControlPlane").await?;

    // A kubeconfig the hub's policy refuses: the condition names the Secret and the key.
    let mut bad: serde_json::Value = serde_json::from_str(&inline_kubeconfig(&edge)?)?;
    bad["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = true.into();
    fleet.apply(&provider::kubeconfig_secret(NS, "broken", &bad.to_string()))?;
    provider::mark_initialized(fleet.kubeconfig(), NS, "broken")?;
    let broken = until_step(&mcs, "fleet.broken", "KubeconfigInvalid").await?;
    let message = &bootstrap_condition(&broken).expect("condition").message;
    assert!(
        message.contains("fleet/broken-kubeconfig") && message.contains("key \"value\""),
        "{message}"
    );
    assert!(message.contains("insecure-skip-tls-verify"), "{message}");

    // Initialized: the agent is installed through the kubeconfig.
    provider::mark_initialized(fleet.kubeconfig(), NS, "edge")?;
    until_step(&mcs, "fleet.edge", "WaitingForAgent").await?;
    let deployment = deployments.get("flotilla-agent").await?;
    let container = &deployment
        .spec
        .as_ref()
        .unwrap()
        .template
        .spec
        .as_ref()
        .unwrap()
        .containers[0];
    assert_eq!(
        container.image.as_deref(),
        Some("registry.example/flotilla/flotilla-agent:test")
    );

    // Nobody runs the first agent: past its deadline it is installed once more (a new
    // token, a restarted Deployment).
    let first_token = mc_annotation(
        &mcs,
        "fleet.edge",
        "capi.fleet.flotilla.dev/bootstrap-token-id",
    )
    .await?;
    wait::until("the agent installed a second time", TIMEOUT, || async {
        let d = deployments.get("flotilla-agent").await?;
        let attempt = d
            .spec
            .and_then(|s| s.template.metadata)
            .and_then(|m| m.annotations)
            .and_then(|a| a.get("capi.fleet.flotilla.dev/bootstrap-attempt").cloned());
        Ok((attempt.as_deref() == Some("2")).then_some(()))
    })
    .await?;
    let second_token = mc_annotation(
        &mcs,
        "fleet.edge",
        "capi.fleet.flotilla.dev/bootstrap-token-id",
    )
    .await?;
    assert_ne!(
        first_token, second_token,
        "the second install has a token of its own"
    );
    assert_eq!(
        mc_annotation(
            &mcs,
            "fleet.edge",
            "capi.fleet.flotilla.dev/bootstrap-attempts"
        )
        .await?,
        Some("2".to_owned())
    );

    // The harness as the kubelet runs it; it joins.
    let pod = capi_kubelet::run_deployment(
        &edge,
        AGENT_NS,
        "flotilla-agent",
        &binaries.agent,
        &dir.path().join("agent-pod"),
    )
    .await?;
    let joined = until_step(&mcs, "fleet.edge", "Joined").await;
    if joined.is_err() {
        eprintln!(
            "agent log:\n{}",
            flotilla_tests::process::tail(&pod.log, 40)
        );
    }
    let mc = joined?;
    assert!(
        mc.status
            .as_ref()
            .is_some_and(|s| s.conditions.is_true(flotilla_api::fleet::condition::JOINED))
    );

    // The bootstrap token is spent: presented again, it is refused.
    let token_secret: Api<Secret> = Api::namespaced(workload.clone(), AGENT_NS);
    let token = token_secret
        .get("flotilla-agent-token")
        .await?
        .data
        .and_then(|d| d.get("token").cloned())
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
        .expect("the token Secret the hub applied");
    wait::until("the used token refused", TIMEOUT, || async {
        let refused =
            flotilla_hub::session::tokens::redeem(hub.clone(), HUB_NAMESPACE, &token, "fleet.edge")
                .await
                .is_err();
        Ok(refused.then_some(()))
    })
    .await?;

    // After the join the kubeconfig is not used: one that reaches no server changes nothing.
    let mut dead: serde_json::Value = serde_json::from_str(&inline_kubeconfig(&edge)?)?;
    dead["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1".into();
    fleet.apply(&provider::kubeconfig_secret(NS, "edge", &dead.to_string()))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    until_step(&mcs, "fleet.edge", "Joined").await?;

    // A HelmRelease to the ManagedCluster goes over the agent's session.
    fleet.apply(&hello_release(&fleet, "Hello from a Cluster API cluster"))?;
    fleet.wait_ready(&[(NS, "hello")], TIMEOUT, |_| {}).await?;
    assert_eq!(hello_message(&edge)?, "Hello from a Cluster API cluster");
    let log = std::fs::read_to_string(&pod.log)?;
    assert!(
        !log.contains("forbidden"),
        "the agent met a permission error:\n{log}"
    );

    // A release upgrade after the join: the workload API server sees no request made
    // with the kubeconfig (which works again), checked in its audit log.
    fleet.apply(&provider::kubeconfig_secret(NS, "edge", &edge_kubeconfig))?;
    let before = audit_requests_of(&edge, &bootstrap_user())?;
    assert!(
        before.iter().any(|r| r.starts_with("patch ")),
        "the bootstrap's applies are not in the audit log as the kubeconfig's user: {before:?}"
    );
    fleet.apply(&hello_release(&fleet, UPGRADED))?;
    wait::until("the release upgraded over the session", TIMEOUT, || async {
        Ok((hello_message(&edge)? == UPGRADED).then_some(()))
    })
    .await?;
    // A few resyncs of import, too.
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = audit_requests_of(&edge, &bootstrap_user())?;
    assert_eq!(
        after.len(),
        before.len(),
        "requests made with the kubeconfig after the join: {:#?}",
        &after[before.len().min(after.len())..]
    );

    // An agent upgrade by the hub: restarted with another image, the hub re-applies the
    // agent through the kubeconfig and waits for it to reconnect.
    fleet.stop_hub();
    for arg in fleet.hub_args_mut() {
        if arg.starts_with("--capi-agent-image=") {
            *arg = format!("--capi-agent-image={NEW_IMAGE}");
        }
    }
    fleet.start_hub().await?;
    wait::until("the agent Deployment at the new image", TIMEOUT, || async {
        let d = deployments.get("flotilla-agent").await?;
        let image = d
            .spec
            .and_then(|s| s.template.spec)
            .and_then(|s| s.containers.into_iter().next())
            .and_then(|c| c.image);
        Ok((image.as_deref() == Some(NEW_IMAGE)).then_some(()))
    })
    .await?;
    wait::until("the upgrade recorded in flight", TIMEOUT, || async {
        let to = mc_annotation(
            &mcs,
            "fleet.edge",
            "capi.fleet.flotilla.dev/agent-upgrading-to",
        )
        .await?;
        Ok((to.as_deref() == Some(NEW_IMAGE)).then_some(()))
    })
    .await?;
    // The kubelet replaces the pod: the old agent goes, the new one starts from the new
    // Deployment (a fresh emptyDir: it starts from its identity in the cluster).
    drop(pod);
    let pod = capi_kubelet::run_deployment(
        &edge,
        AGENT_NS,
        "flotilla-agent",
        &binaries.agent,
        &dir.path().join("agent-pod-2"),
    )
    .await?;
    let upgraded = wait::until(
        "the upgrade recorded once the agent reconnected",
        TIMEOUT,
        || async {
            let image =
                mc_annotation(&mcs, "fleet.edge", "capi.fleet.flotilla.dev/agent-image").await?;
            let upgrading = mc_annotation(
                &mcs,
                "fleet.edge",
                "capi.fleet.flotilla.dev/agent-upgrading-to",
            )
            .await?;
            Ok((image.as_deref() == Some(NEW_IMAGE) && upgrading.is_none()).then_some(()))
        },
    )
    .await;
    if upgraded.is_err() {
        eprintln!(
            "agent log:\n{}",
            flotilla_tests::process::tail(&pod.log, 40)
        );
    }
    upgraded?;
    until_step(&mcs, "fleet.edge", "Joined").await?;

    // A deleted Cluster's ManagedCluster goes.
    kubectl_in(
        fleet.kubeconfig(),
        &["delete", "clusters.cluster.x-k8s.io", "broken", "-n", NS],
        None,
    )?;
    wait::until("ManagedCluster fleet.broken gone", TIMEOUT, || async {
        Ok(mcs.get_opt("fleet.broken").await?.is_none().then_some(()))
    })
    .await?;

    // A paused Cluster: its ManagedCluster says so, and is labelled for selectors.
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "clusters.cluster.x-k8s.io",
            "edge",
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":true}}"#,
        ],
        None,
    )?;
    let paused = until_step(&mcs, "fleet.edge", "Paused").await?;
    assert_eq!(
        paused
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("capi.fleet.flotilla.dev/paused"))
            .map(String::as_str),
        Some("true")
    );
    // Its releases are held as if suspended: a new value is not sent while paused.
    until_event(&hub, "hello", "TargetPaused").await?;
    fleet.apply(&hello_release(&fleet, "Paused, not sent"))?;
    tokio::time::sleep(Duration::from_secs(8)).await;
    assert_eq!(
        hello_message(&edge)?,
        UPGRADED,
        "a plan reached the agent of a paused cluster"
    );
    // Unpaused: the held change goes out.
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "clusters.cluster.x-k8s.io",
            "edge",
            "-n",
            NS,
            "--type=merge",
            "-p",
            r#"{"spec":{"paused":false}}"#,
        ],
        None,
    )?;
    until_step(&mcs, "fleet.edge", "Joined").await?;
    wait::until("the held change applied once unpaused", TIMEOUT, || async {
        Ok((hello_message(&edge)? == "Paused, not sent").then_some(()))
    })
    .await?;

    // The Cluster is deleted: its ManagedCluster goes, and the release's deletion neither
    // hangs nor uninstalls from the cluster that is going away.
    kubectl_in(
        fleet.kubeconfig(),
        &["delete", "clusters.cluster.x-k8s.io", "edge", "-n", NS],
        None,
    )?;
    wait::until("ManagedCluster fleet.edge gone", TIMEOUT, || async {
        Ok(mcs.get_opt("fleet.edge").await?.is_none().then_some(()))
    })
    .await?;
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "delete",
            "helmreleases.helm.flotilla.dev",
            "hello",
            "-n",
            NS,
            "--wait=false",
        ],
        None,
    )?;
    let releases: Api<flotilla_api::HelmRelease> = Api::namespaced(hub.clone(), NS);
    wait::until(
        "HelmRelease hello gone",
        Duration::from_secs(30),
        || async { Ok(releases.get_opt("hello").await?.is_none().then_some(())) },
    )
    .await?;
    until_event(&hub, "hello", "TargetDeleted").await?;
    assert_eq!(
        hello_message(&edge)?,
        "Paused, not sent",
        "the release was uninstalled from a cluster being deleted"
    );
    drop(pod);
    Ok(())
}

/// The fleet test's Clusters: three `env=prod` at first, a fourth created later.
const PROD: [&str; 3] = ["prod-a", "prod-b", "prod-c"];
const LATE: &str = "prod-d";
/// The fleet test's first agent image, and the one its hub is restarted with.
const PROD_IMAGE: &str = "registry.example/flotilla/flotilla-agent:prod-1";
const PROD_IMAGE_2: &str = "registry.example/flotilla/flotilla-agent:prod-2";
/// How long an upgraded agent has to reconnect, in the fleet test.
const UPGRADE_TIMEOUT_SECS: u64 = 12;

/// The HelmReleaseSet of the fleet test: every `env=prod` ManagedCluster, all at once;
/// the message names the ManagedCluster and, through `.Cluster` (the imported Cluster API
/// object), the Cluster it was made from. The releases do not wait for pods: the workload clusters
/// are API servers only.
fn prod_set(fleet: &Fleet) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: examples
  namespace: {NS}
spec:
  interval: 5m
  url: {url}
---
apiVersion: helm.flotilla.dev/v1alpha1
kind: HelmReleaseSet
metadata:
  name: prod
  namespace: {NS}
spec:
  clusterSelector:
    matchLabels: {{env: prod}}
  template:
    spec:
      interval: 10m
      releaseName: hello
      targetNamespace: hello
      storageNamespace: hello
      install:
        createNamespace: true
        disableWait: true
      upgrade:
        disableWait: true
      chart:
        spec:
          chart: hello
          version: "0.1.x"
          sourceRef:
            kind: HelmRepository
            name: examples
  valuesTemplate: |
    message: "Hello {{{{ .ClusterName }}}} ({{{{ .Cluster.metadata.namespace }}}}/{{{{ .Cluster.metadata.name }}}})"
  rollout:
    strategy: AllAtOnce
"#,
        url = fleet.repo.url()
    )
}

/// The ManagedCluster of Cluster `fleet/<name>`.
fn mc_of(name: &str) -> String {
    flotilla_hub::onboarding::managed_cluster_name(NS, name)
}

/// The image of the agent Deployment in `workload`.
async fn agent_image(workload: &Cluster) -> anyhow::Result<Option<String>> {
    let deployments: Api<Deployment> = Api::namespaced(workload.client().await?, AGENT_NS);
    Ok(deployments
        .get_opt("flotilla-agent")
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.template.spec)
        .and_then(|s| s.containers.into_iter().next())
        .and_then(|c| c.image))
}

/// Waits until the set's release is deployed on `workload` (Helm storage, as `helm list`
/// reads it) with the message naming the ManagedCluster of Cluster `fleet/<name>` and the
/// Cluster (its `.Cluster` in the set's `valuesTemplate`).
async fn until_released(workload: &Cluster, name: &str) -> anyhow::Result<()> {
    let mc = mc_of(name);
    let want = format!("Hello {mc} ({NS}/{name})");
    wait::until(
        &format!("the set's release deployed on {mc}"),
        TIMEOUT,
        || async {
            let listed = flotilla_tests::tools::helm_in(
                workload.kubeconfig(),
                &["list", "-n", "hello", "-o", "json"],
            )?;
            let releases: Vec<serde_json::Value> = serde_json::from_str(&listed)?;
            let deployed = releases
                .iter()
                .any(|r| r["name"] == "hello" && r["status"] == "deployed");
            Ok((deployed && hello_message(workload).is_ok_and(|m| m == want)).then_some(()))
        },
    )
    .await
}

/// Whether namespace `name` exists in `workload`.
async fn has_namespace(workload: &Cluster, name: &str) -> anyhow::Result<bool> {
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(workload.client().await?);
    Ok(namespaces.get_opt(name).await?.is_some())
}

/// Waits until condition `ty` of ManagedCluster `name` has `reason`.
async fn until_condition(
    mcs: &Api<ManagedCluster>,
    name: &str,
    ty: &str,
    reason: &str,
) -> anyhow::Result<Condition> {
    let waited = wait::until(
        &format!("ManagedCluster {name}: {ty} {reason}"),
        TIMEOUT,
        || async {
            let mc = mcs.get_opt(name).await?;
            Ok(mc
                .and_then(|mc| mc.status)
                .and_then(|s| s.conditions.get_condition(ty).cloned())
                .filter(|c| c.reason == reason))
        },
    )
    .await;
    match waited {
        Ok(c) => Ok(c),
        Err(e) => {
            let last = mcs.get_opt(name).await.ok().flatten();
            Err(e.context(format!("it is: {last:#?}")))
        }
    }
}

#[tokio::test]
async fn a_helm_release_set_reaches_every_imported_prod_cluster_as_its_agent_joins_through_a_fixed_and_a_rotated_kubeconfig_and_a_bad_agent_upgrade_stops()
-> anyhow::Result<()> {
    let _serial = SERIAL.lock().await;
    common::init_logging();
    let started = std::time::Instant::now();
    let dir = tempfile::tempdir()?;
    let values = dir.path().join("agent-values.yaml");
    std::fs::write(&values, "rbac:\n  workload:\n    clusterAdmin: true\n")?;
    let mut options = FleetOptions::named("capi-prod");
    options.workloads = Vec::new();
    options.hub_args = vec![
        "--capi-import".to_owned(),
        "--capi-import-selector=env=prod".to_owned(),
        "--capi-hub-url=${HUB_URL}".to_owned(),
        format!("--capi-agent-image={PROD_IMAGE}"),
        "--capi-agent-join-timeout=5m".to_owned(),
        "--capi-resync-interval=2s".to_owned(),
        format!("--capi-agent-upgrade-timeout={UPGRADE_TIMEOUT_SECS}s"),
        format!("--capi-agent-values={}", values.display()),
    ];
    let binaries = bins::build(Progress::OnFailure)?;
    // Every workload API server at once, beside the management cluster.
    let starts = PROD.iter().chain([&LATE]).map(|name| {
        Cluster::start(ClusterOptions {
            api_server_only: true,
            ..ClusterOptions::named(&format!("capi-{name}"))
        })
    });
    let (fleet, workloads) = tokio::join!(
        Fleet::start(binaries.clone(), options),
        flotilla_tests::join_all(starts),
    );
    let mut fleet = fleet?;
    let workloads = workloads.into_iter().collect::<anyhow::Result<Vec<_>>>()?;
    eprintln!(
        "capi fleet: the management cluster, the hub and {} workload API servers up in {:.1?}",
        workloads.len(),
        started.elapsed()
    );
    let (a, b, c, d) = (&workloads[0], &workloads[1], &workloads[2], &workloads[3]);
    capi::install_crds(fleet.kubeconfig())?;
    let hub = fleet.mgmt.client().await?;
    let mcs: Api<ManagedCluster> = Api::all(hub.clone());

    // prod-a's kubeconfig authenticates as a ServiceAccount of its own (rotated below);
    // prod-c's asks for unverified TLS, which the hub's policy refuses (fixed below).
    let a_v1 = provider::service_account_kubeconfig(a, "capi-v1")?;
    let mut refused: serde_json::Value = serde_json::from_str(&provider::inline_kubeconfig(c)?)?;
    refused["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = true.into();
    let kubeconfigs = [
        a_v1.clone(),
        provider::inline_kubeconfig(b)?,
        refused.to_string(),
    ];
    let mut manifests = vec![
        format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n"),
        prod_set(&fleet),
    ];
    for (i, name) in PROD.iter().enumerate() {
        let labels = serde_json::json!({"env": "prod", "slot": i.to_string()});
        manifests.push(provider::cluster(NS, name, labels, &workloads[i])?);
        manifests.push(provider::kubeconfig_secret(NS, name, &kubeconfigs[i]));
    }
    fleet.apply(&manifests.join("\n---\n"))?;

    // Three ManagedClusters with the Clusters' labels, and a child of the set for each.
    for (i, name) in PROD.iter().enumerate() {
        let mc = until_step(&mcs, &mc_of(name), "WaitingForControlPlane").await?;
        let labels = mc.metadata.labels.unwrap_or_default();
        let slot = i.to_string();
        for (k, v) in [
            ("env", "prod"),
            ("slot", slot.as_str()),
            ("capi.fleet.flotilla.dev/cluster", name),
        ] {
            assert_eq!(
                labels.get(k).map(String::as_str),
                Some(v),
                "{name}: {labels:?}"
            );
        }
    }
    let children: Api<flotilla_api::HelmRelease> = Api::namespaced(hub.clone(), NS);
    let set_children =
        ListParams::default().labels(&format!("{}=prod", flotilla_core::set::SET_LABEL));
    wait::until("a child of the set per ManagedCluster", TIMEOUT, || async {
        let n = children.list(&set_children).await?.items.len();
        Ok((n == PROD.len()).then_some(()))
    })
    .await?;
    // Nothing is applied to a workload cluster before its control plane is initialized
    // (a few resyncs later).
    tokio::time::sleep(Duration::from_secs(5)).await;
    for (i, name) in PROD.iter().enumerate() {
        for ns in [AGENT_NS, "hello"] {
            assert!(
                !has_namespace(&workloads[i], ns).await?,
                "{name}: namespace {ns} exists before the control plane was initialized"
            );
        }
    }

    // Initialized: prod-a and prod-b are bootstrapped; prod-c's kubeconfig is refused,
    // with a condition naming the Secret and the key.
    for name in PROD {
        provider::mark_initialized(fleet.kubeconfig(), NS, name)?;
    }
    let refused = until_step(&mcs, &mc_of("prod-c"), "KubeconfigInvalid").await?;
    let message = &bootstrap_condition(&refused).expect("condition").message;
    assert!(
        message.contains("fleet/prod-c-kubeconfig") && message.contains("key \"value\""),
        "{message}"
    );
    assert!(
        !has_namespace(c, AGENT_NS).await?,
        "prod-c: installed with a refused kubeconfig"
    );
    // The Secret fixed: the condition clears and the agent is installed.
    fleet.apply(&provider::kubeconfig_secret(
        NS,
        "prod-c",
        &provider::inline_kubeconfig(c)?,
    ))?;
    let mut pods = Vec::new();
    for (i, name) in PROD.iter().enumerate() {
        until_step(&mcs, &mc_of(name), "WaitingForAgent").await?;
        // The harness as the kubelet runs each agent the hub applied.
        pods.push(
            capi_kubelet::run_deployment(
                &workloads[i],
                AGENT_NS,
                "flotilla-agent",
                &binaries.agent,
                &dir.path().join(format!("pod-{name}")),
            )
            .await?,
        );
    }
    for (i, name) in PROD.iter().enumerate() {
        let joined = until_step(&mcs, &mc_of(name), "Joined").await;
        if joined.is_err() {
            eprintln!(
                "{name}: agent log:\n{}",
                flotilla_tests::process::tail(&pods[i].log, 40)
            );
        }
        joined?;
    }
    for (i, name) in PROD.iter().enumerate() {
        until_released(&workloads[i], name).await?;
    }
    eprintln!(
        "capi fleet: the set's release on the three clusters at {:.1?}",
        started.elapsed()
    );

    // A fourth Cluster, created later, gets it too.
    fleet.apply(&format!(
        "{}\n---\n{}\n",
        provider::cluster(NS, LATE, serde_json::json!({"env": "prod"}), d)?,
        provider::kubeconfig_secret(NS, LATE, &provider::inline_kubeconfig(d)?),
    ))?;
    until_step(&mcs, &mc_of(LATE), "WaitingForControlPlane").await?;
    provider::mark_initialized(fleet.kubeconfig(), NS, LATE)?;
    until_step(&mcs, &mc_of(LATE), "WaitingForAgent").await?;
    pods.push(
        capi_kubelet::run_deployment(
            d,
            AGENT_NS,
            "flotilla-agent",
            &binaries.agent,
            &dir.path().join(format!("pod-{LATE}")),
        )
        .await?,
    );
    until_step(&mcs, &mc_of(LATE), "Joined").await?;
    until_released(d, LATE).await?;
    eprintln!(
        "capi fleet: the set's release on the fourth cluster at {:.1?}",
        started.elapsed()
    );
    for pod in &pods {
        let log = std::fs::read_to_string(&pod.log)?;
        assert!(
            !log.contains("forbidden"),
            "an agent met a permission error:\n{log}"
        );
    }

    // prod-a's kubeconfig Secret rotates: a new credential, the old one revoked (its
    // ServiceAccount deleted). The agent upgrade that follows can only be applied with the
    // new one.
    let a_v2 = provider::service_account_kubeconfig(a, "capi-v2")?;
    fleet.apply(&provider::kubeconfig_secret(NS, "prod-a", &a_v2))?;
    kubectl_in(
        a.kubeconfig(),
        &["delete", "serviceaccount", "capi-v1", "-n", "kube-system"],
        None,
    )?;
    let old = dir.path().join("prod-a-v1.kubeconfig");
    std::fs::write(&old, &a_v1)?;
    wait::until("the old credential revoked", TIMEOUT, || async {
        Ok(kubectl_in(&old, &["get", "namespaces"], None)
            .is_err()
            .then_some(()))
    })
    .await?;

    // The hub restarted with another agent image: the upgrades go one at a time, in name
    // order. prod-a's agent reconnects at it (the kubelet replaces the pod).
    fleet.stop_hub();
    for arg in fleet.hub_args_mut() {
        if arg.starts_with("--capi-agent-image=") {
            *arg = format!("--capi-agent-image={PROD_IMAGE_2}");
        }
    }
    fleet.start_hub().await?;
    wait::until(
        "prod-a's agent Deployment at the new image",
        TIMEOUT,
        || async { Ok((agent_image(a).await?.as_deref() == Some(PROD_IMAGE_2)).then_some(())) },
    )
    .await?;
    let old_pod = pods.remove(0);
    drop(old_pod);
    let pod_a = capi_kubelet::run_deployment(
        a,
        AGENT_NS,
        "flotilla-agent",
        &binaries.agent,
        &dir.path().join("pod-prod-a-2"),
    )
    .await?;
    let upgraded = until_condition(
        &mcs,
        &mc_of("prod-a"),
        flotilla_hub::onboarding::CONDITION_UPGRADE,
        "Upgraded",
    )
    .await;
    if upgraded.is_err() {
        eprintln!(
            "prod-a: agent log:\n{}",
            flotilla_tests::process::tail(&pod_a.log, 40)
        );
    }
    upgraded?;
    assert_eq!(
        mc_annotation(
            &mcs,
            &mc_of("prod-a"),
            "capi.fleet.flotilla.dev/agent-image"
        )
        .await?,
        Some(PROD_IMAGE_2.to_owned())
    );

    // prod-b's agent is upgraded next, and nothing runs the new pod: past the upgrade
    // timeout its ManagedCluster says so, naming the image, and the rollout stops.
    wait::until(
        "prod-b's agent Deployment at the new image",
        TIMEOUT,
        || async { Ok((agent_image(b).await?.as_deref() == Some(PROD_IMAGE_2)).then_some(())) },
    )
    .await?;
    let failed = until_condition(
        &mcs,
        &mc_of("prod-b"),
        flotilla_hub::onboarding::CONDITION_UPGRADE,
        "UpgradeNotReconnected",
    )
    .await?;
    assert!(failed.message.contains(PROD_IMAGE_2), "{}", failed.message);
    assert_eq!(
        mc_annotation(
            &mcs,
            &mc_of("prod-b"),
            flotilla_hub::onboarding::ANNOTATION_UPGRADE_FAILED
        )
        .await?,
        Some(PROD_IMAGE_2.to_owned())
    );
    // A few resyncs later, prod-c and prod-d still run the old image.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for (workload, name) in [(c, "prod-c"), (d, LATE)] {
        assert_eq!(
            agent_image(workload).await?.as_deref(),
            Some(PROD_IMAGE),
            "{name} was upgraded after the rollout stopped"
        );
    }
    eprintln!("capi fleet: done in {:.1?}", started.elapsed());
    drop(pod_a);
    drop(pods);
    // The clusters stop side by side: each takes a few seconds.
    std::thread::scope(|scope| {
        scope.spawn(move || drop(fleet));
        for workload in workloads {
            scope.spawn(move || drop(workload));
        }
    });
    eprintln!("capi fleet: stopped at {:.1?}", started.elapsed());
    Ok(())
}

fn hello_release(fleet: &Fleet, message: &str) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: examples
  namespace: {NS}
spec:
  interval: 5m
  url: {url}
---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: hello
  namespace: {NS}
spec:
  clusterRef:
    name: fleet.edge
  interval: 10m
  releaseName: hello
  targetNamespace: hello
  storageNamespace: hello
  install:
    createNamespace: true
  chart:
    spec:
      chart: hello
      version: "0.1.x"
      sourceRef:
        kind: HelmRepository
        name: examples
  values:
    message: {message}
"#,
        url = fleet.repo.url()
    )
}

fn hello_message(edge: &Cluster) -> anyhow::Result<String> {
    let message = kubectl_in(
        edge.kubeconfig(),
        &[
            "get",
            "configmap",
            "hello",
            "-n",
            "hello",
            "-o",
            "jsonpath={.data.message}",
        ],
        None,
    )?;
    Ok(message.trim().to_owned())
}

/// Waits for an Event of `reason` about HelmRelease `name` in the test namespace.
async fn until_event(hub: &kube::Client, name: &str, reason: &str) -> anyhow::Result<()> {
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(hub.clone(), NS);
    wait::until(&format!("a {reason} Event on {name}"), TIMEOUT, || async {
        let found = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some(reason)
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
            });
        Ok(found.then_some(()))
    })
    .await
}

fn bootstrap_user() -> String {
    format!("system:serviceaccount:kube-system:{BOOTSTRAP_SA}")
}

/// A kubeconfig of `cluster` (inline, as Cluster API writes one) authenticating with a
/// token of ServiceAccount `kube-system/<sa>`, made cluster-admin.
fn kubeconfig_of_user(cluster: &Cluster, sa: &str) -> anyhow::Result<String> {
    let kc = cluster.kubeconfig();
    kubectl_in(
        kc,
        &["create", "serviceaccount", sa, "-n", "kube-system"],
        None,
    )?;
    kubectl_in(
        kc,
        &[
            "create",
            "clusterrolebinding",
            sa,
            "--clusterrole=cluster-admin",
            &format!("--serviceaccount=kube-system:{sa}"),
        ],
        None,
    )?;
    let token = kubectl_in(
        kc,
        &["create", "token", sa, "-n", "kube-system", "--duration=4h"],
        None,
    )?;
    let mut doc: serde_json::Value = serde_json::from_str(&inline_kubeconfig(cluster)?)?;
    doc["users"][0]["user"] = serde_json::json!({"token": token.trim()});
    Ok(doc.to_string())
}

/// The requests of `user` in `cluster`'s audit log: `verb requestURI` each, in order.
fn audit_requests_of(cluster: &Cluster, user: &str) -> anyhow::Result<Vec<String>> {
    let text = std::fs::read_to_string(cluster.audit_log())?;
    Ok(text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["user"]["username"] == user)
        .map(|e| {
            format!(
                "{} {}",
                e["verb"].as_str().unwrap_or_default(),
                e["requestURI"].as_str().unwrap_or_default()
            )
        })
        .collect())
}
