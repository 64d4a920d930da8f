//! The hub end to end on a real local cluster: the CRDs installed, a real Helm repository
//! (nginx, charts packaged and indexed by the real helm) holding the podinfo chart, and the
//! hub's controllers running in this process with an in-process agent on the hub's own
//! cluster. Releases are checked with the real `helm` and `kubectl`.

mod common;

use std::time::Duration;

use flotilla_agent::session as agent_session;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_hub::controller::epoch::{EPOCH_CONFIGMAP, EPOCH_SPAN};
use flotilla_hub::controller::{FINALIZER, PLAN_REVISION_ANNOTATION};
use flotilla_hub::session::{NoArchives, SessionConfig, SessionHub, tokens};
use flotilla_tests::tools::{helm_history, kubectl_in};
use flotilla_tests::wait;
use kube::ResourceExt as _;
use kube::api::DeleteParams;

use common::{
    Env, TIMEOUT, helm_list, podinfo_release, podinfo_replicas, ready, ready_condition,
    seed_podinfo, wait_for_history,
};

#[tokio::test]
async fn the_seed_podinfo_example_becomes_ready_upgrades_on_values_chart_version_and_force_and_is_uninstalled_on_deletion()
-> anyhow::Result<()> {
    let env = Env::start("hub-podinfo").await?;
    let hrs = env.helm_releases().await?;

    env.kubectl_apply(&seed_podinfo(&env.repo.url(), 2))?;
    let hr = ready(&hrs, "podinfo").await?;
    let status = hr.status.clone().unwrap_or_default();
    assert_eq!(status.helm_chart, "default/default-podinfo");
    assert_eq!(status.storage_namespace, "default");
    assert_eq!(status.last_attempted_revision, "6.5.2");
    assert!(hr.finalizers().iter().any(|f| f == FINALIZER));
    assert_eq!(
        hr.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLAN_REVISION_ANNOTATION))
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(helm_list(env.kubeconfig())?, vec!["podinfo".to_owned()]);
    let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].1, "deployed");

    // The HelmChart the hub made, with its artifact in the chart store.
    let chart = kubectl_in(
        env.kubeconfig(),
        &[
            "get",
            "helmchart",
            "default-podinfo",
            "-n",
            "default",
            "-o",
            "jsonpath={.status.artifact.revision} {.metadata.labels.helm\\.flotilla\\.dev/name}",
        ],
        None,
    )?;
    assert_eq!(chart.trim(), "6.5.2 podinfo");

    // `kubectl wait` reads the condition as kstatus does.
    kubectl_in(
        env.kubeconfig(),
        &[
            "wait",
            "--for=condition=ready",
            "helmrelease/podinfo",
            "-n",
            "default",
            "--timeout=60s",
        ],
        None,
    )?;

    // At rest, the managed HelmChart is not written again (a write loop between the
    // controllers would show here).
    let chart_version = || {
        kubectl_in(
            env.kubeconfig(),
            &[
                "get",
                "helmchart",
                "default-podinfo",
                "-n",
                "default",
                "-o",
                "jsonpath={.metadata.resourceVersion}",
            ],
            None,
        )
    };
    let before = chart_version()?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        chart_version()?,
        before,
        "the HelmChart was written at rest"
    );

    // A values change upgrades: helm history 2, plan revision 2.
    env.kubectl_apply(&seed_podinfo(&env.repo.url(), 3))?;
    let hr = wait::until("the upgrade", TIMEOUT, || async {
        let hr = ready(&hrs, "podinfo").await?;
        let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
        Ok((history.len() == 2 && history[1].1 == "deployed").then_some(hr))
    })
    .await?;
    assert_eq!(
        hr.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(PLAN_REVISION_ANNOTATION))
            .map(String::as_str),
        Some("2")
    );
    let replicas = podinfo_replicas(env.kubeconfig())?;
    assert_eq!(replicas, "3");

    // A new chart version in the repository, fetched at once on a request token: the
    // HelmChart takes it and the release is upgraded to it.
    env.repo
        .publish_version(&common::podinfo_chart(), "6.5.3")?;
    kubectl_in(
        env.kubeconfig(),
        &[
            "annotate",
            "helmrepository",
            "podinfo",
            "-n",
            "default",
            "--overwrite",
            "reconcile.fluxcd.io/requestedAt=bump",
        ],
        None,
    )?;
    let hr = wait::until("the chart version upgrade", TIMEOUT, || async {
        let hr = ready(&hrs, "podinfo").await?;
        let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
        let at = hr
            .status
            .as_ref()
            .map(|s| s.last_attempted_revision.clone())
            .unwrap_or_default();
        Ok((history.len() == 3 && at == "6.5.3").then_some(hr))
    })
    .await?;
    assert_eq!(
        hr.annotations()
            .get(PLAN_REVISION_ANNOTATION)
            .map(String::as_str),
        Some("3")
    );

    // `flux reconcile hr --force`: both tokens set to the same value force an upgrade, and
    // the status says the token was handled.
    kubectl_in(
        env.kubeconfig(),
        &[
            "annotate",
            "helmrelease",
            "podinfo",
            "-n",
            "default",
            "--overwrite",
            "reconcile.fluxcd.io/requestedAt=t1",
            "reconcile.fluxcd.io/forceAt=t1",
        ],
        None,
    )?;
    wait::until("the forced upgrade", TIMEOUT, || async {
        let hr = ready(&hrs, "podinfo").await?;
        let handled = hr.status.as_ref().is_some_and(|s| {
            s.last_handled_force_at == "t1" && s.last_handled_reconcile_at == "t1"
        });
        let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
        Ok((handled && history.len() == 4).then_some(()))
    })
    .await?;

    // Deletion uninstalls through the agent, then the finalizer goes and the object with it.
    hrs.delete("podinfo", &DeleteParams::default()).await?;
    wait::until("the HelmRelease to be gone", TIMEOUT, || async {
        Ok(hrs.get_opt("podinfo").await?.is_none().then_some(()))
    })
    .await?;
    assert!(helm_list(env.kubeconfig())?.is_empty());
    let charts = kubectl_in(
        env.kubeconfig(),
        &["get", "helmcharts", "-n", "default", "-o", "name"],
        None,
    )?;
    assert_eq!(charts.trim(), "", "the managed HelmChart is deleted");

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn malformed_helm_releases_get_a_condition_naming_the_field_and_the_deployed_release_stays()
-> anyhow::Result<()> {
    let env = Env::start("hub-values").await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let manifest = |key: &str| {
        format!(
            r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: podinfo-values
  namespace: default
data:
  values.yaml: |
    replicaCount: 1
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 5m
  url: {url}
---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: podinfo
      sourceRef:
        kind: HelmRepository
        name: podinfo
  valuesFrom:
  - kind: ConfigMap
    name: podinfo-values
    valuesKey: {key}
"#
        )
    };
    env.kubectl_apply(&manifest("values.yaml"))?;
    ready(&hrs, "podinfo").await?;
    assert_eq!(
        helm_history(env.kubeconfig(), "podinfo", "default")?.len(),
        1
    );

    // A key the ConfigMap does not have: Ready=False with reason ValuesError, naming the
    // entry and the key; nothing is sent, so the release stays at revision 1.
    env.kubectl_apply(&manifest("missing.yaml"))?;
    let hr = wait::until("the ValuesError condition", TIMEOUT, || async {
        let hr = hrs.get("podinfo").await?;
        let c = hr
            .status
            .as_ref()
            .and_then(|s| s.conditions.get_condition(condition::READY).cloned());
        Ok(
            c.filter(|c| c.status == ConditionStatus::False && c.reason == "ValuesError")
                .map(|c| (hr, c)),
        )
    })
    .await?;
    let (_, c) = hr;
    assert!(
        c.message.contains("valuesFrom[0]")
            && c.message.contains("podinfo-values")
            && c.message.contains("'missing.yaml'"),
        "{}",
        c.message
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].1, "deployed");

    // Fixing the key makes it Ready again.
    env.kubectl_apply(&manifest("values.yaml"))?;
    ready(&hrs, "podinfo").await?;

    // Bad YAML in the referenced key: ValuesError naming the object and key.
    kubectl_in(
        env.kubeconfig(),
        &[
            "create",
            "configmap",
            "bad-values",
            "-n",
            "default",
            "--from-literal=values.yaml=replicaCount: [1",
        ],
        None,
    )?;
    env.kubectl_apply(&manifest("values.yaml").replace(
        "name: podinfo-values\n    valuesKey",
        "name: bad-values\n    valuesKey",
    ))?;
    let c = ready_condition(&hrs, "podinfo", "ValuesError for bad YAML", |c| {
        c.reason == "ValuesError" && c.message.contains("bad-values")
    })
    .await?;
    assert!(c.message.contains("'values.yaml'"), "{}", c.message);
    env.kubectl_apply(&manifest("values.yaml"))?;
    ready(&hrs, "podinfo").await?;

    // A chart version the repository does not have: the HelmChart says so and the
    // HelmRelease waits for its source, as Flux's do.
    let unknown = manifest("values.yaml").replace(
        "      chart: podinfo\n",
        "      chart: podinfo\n      version: '9.9.9'\n",
    );
    env.kubectl_apply(&unknown)?;
    let c = ready_condition(&hrs, "podinfo", "SourceNotReady", |c| {
        c.reason == "SourceNotReady"
    })
    .await?;
    assert!(
        c.message
            .starts_with("HelmChart 'default/default-podinfo' is not ready")
            && c.message.contains("9.9.9"),
        "{}",
        c.message
    );

    // Both chart and chartRef: the API server refuses the object, naming the fields.
    let both = manifest("values.yaml").replace(
        "  valuesFrom:",
        "  chartRef:\n    kind: OCIRepository\n    name: podinfo\n  valuesFrom:",
    );
    let refused = kubectl_in(env.kubeconfig(), &["apply", "-f", "-"], Some(&both))
        .expect_err("the API server refuses chart and chartRef together");
    assert!(format!("{refused:#}").contains("chartRef"), "{refused:#}");

    // Values too large for the agent's state Secret: the agent refuses the plan, and the
    // condition says so until a plan it accepts comes.
    let config_maps: kube::Api<k8s_openapi::api::core::v1::ConfigMap> =
        kube::Api::namespaced(env.cluster.client().await?, "default");
    for (name, key) in [("big-1", "a"), ("big-2", "b")] {
        let cm: k8s_openapi::api::core::v1::ConfigMap =
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "data": {"values.yaml": format!("{key}: {}\n", noise(900 * 1024))},
            }))?;
        config_maps.create(&Default::default(), &cm).await?;
    }
    let big = manifest("values.yaml").replace(
        "  valuesFrom:\n",
        "  valuesFrom:\n  - kind: ConfigMap\n    name: big-1\n  - kind: ConfigMap\n    name: big-2\n",
    );
    env.kubectl_apply(&big)?;
    let c = ready_condition(&hrs, "podinfo", "PlanRejected", |c| {
        c.reason == "PlanRejected"
    })
    .await?;
    assert!(c.message.len() < 4096, "no values in the condition");
    let stalled = hrs
        .get("podinfo")
        .await?
        .status
        .is_some_and(|s| s.conditions.is_true(condition::STALLED));
    assert!(stalled);
    env.kubectl_apply(&manifest("values.yaml"))?;
    ready(&hrs, "podinfo").await?;

    // Through all of it the deployed release stayed at its first revision.
    let history = helm_history(env.kubeconfig(), "podinfo", "default")?;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].1, "deployed");

    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_kube_config_secret_target_is_served_in_push_mode_moves_when_the_target_changes_and_a_cluster_ref_without_an_agent_says_so()
-> anyhow::Result<()> {
    let env = Env::start("hub-push").await?;
    let edge =
        flotilla_tests::Cluster::start(flotilla_tests::ClusterOptions::named("hub-push-edge"))
            .await?;
    let hrs = env.helm_releases().await?;
    let kubeconfig = common::inline_kubeconfig(&edge)?;
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "edge-kubeconfig", "namespace": "default"},
        // `value` is not a kubeconfig: `spec.kubeConfig.secretRef.key` names the one to read.
        "stringData": {"value": "not a kubeconfig", "edge.yaml": kubeconfig},
    });
    env.kubectl_apply(&secret.to_string())?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-edge",
        "  releaseName: podinfo\n  kubeConfig:\n    secretRef:\n      name: edge-kubeconfig\n      key: edge.yaml",
    ))?;
    ready(&hrs, "podinfo-edge").await?;
    // A key the Secret does not have: a clear condition, no fallback to `value`.
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-nokey",
        "  releaseName: podinfo-nokey\n  kubeConfig:\n    secretRef:\n      name: edge-kubeconfig\n      key: nope.yaml",
    ))?;
    let c = ready_condition(&hrs, "podinfo-nokey", "the missing key", |c| {
        c.status == ConditionStatus::False && c.message.contains("nope.yaml")
    })
    .await?;
    assert_eq!(
        c.message,
        "kubeConfig Secret default/edge-kubeconfig: has no key 'nope.yaml' (spec.kubeConfig.secretRef.key)"
    );
    assert_eq!(helm_list(edge.kubeconfig())?, vec!["podinfo".to_owned()]);
    assert!(
        helm_list(env.kubeconfig())?.is_empty(),
        "nothing is installed in the hub's cluster"
    );
    // The edge agent's Events are relayed onto the HelmRelease in the hub's cluster, naming
    // its real API version (Flux's name `helm.toolkit.fluxcd.io/v2`, its own).
    let relayed = wait::until("the relayed InstallSucceeded Event", TIMEOUT, || async {
        let events = kubectl_in(
            env.kubeconfig(),
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "involvedObject.name=podinfo-edge,involvedObject.kind=HelmRelease",
                "-o",
                "jsonpath={range .items[*]}{.reason} {.involvedObject.apiVersion}{\"\\n\"}{end}",
            ],
            None,
        )?;
        Ok(events
            .lines()
            .any(|l| l.starts_with("InstallSucceeded "))
            .then_some(events))
    })
    .await?;
    for line in relayed.lines() {
        assert!(line.ends_with(" helm.flotilla.dev/v1"), "{relayed}");
    }

    // A registered cluster with no connected agent: a clear condition, nothing else.
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-far",
        "  clusterRef:\n    name: edge-1",
    ))?;
    let c = ready_condition(&hrs, "podinfo-far", "AgentNotConnected", |c| {
        c.status == ConditionStatus::False && c.reason == "AgentNotConnected"
    })
    .await?;
    assert_eq!(c.message, "no agent connected for cluster edge-1");

    // The target moves to the hub's cluster: the edge agent uninstalls, the hub's installs.
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "podinfo-edge",
        "  releaseName: podinfo",
    ))?;
    wait::until("the release to move", TIMEOUT, || async {
        let here = helm_list(env.kubeconfig())?;
        let there = helm_list(edge.kubeconfig())?;
        Ok((here == ["podinfo"] && there.is_empty()).then_some(()))
    })
    .await?;
    ready(&hrs, "podinfo-edge").await?;

    // Deleting it uninstalls where it now is.
    hrs.delete("podinfo-edge", &DeleteParams::default()).await?;
    wait::until("podinfo-edge to be gone", TIMEOUT, || async {
        Ok(hrs.get_opt("podinfo-edge").await?.is_none().then_some(()))
    })
    .await?;
    assert!(helm_list(env.kubeconfig())?.is_empty());
    assert!(helm_list(edge.kubeconfig())?.is_empty());

    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn depends_on_waits_for_its_dependency_suspend_leaves_the_release_alone_and_a_restarted_hub_keeps_plan_revisions()
-> anyhow::Result<()> {
    let mut env = Env::start("hub-order").await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();

    // b depends on a, which does not exist yet.
    env.kubectl_apply(&podinfo_release(
        &url,
        "b",
        "  dependsOn:\n  - name: a\n  values:\n    replicaCount: 1",
    ))?;
    let c = ready_condition(&hrs, "b", "DependencyNotReady", |c| {
        c.reason == "DependencyNotReady"
    })
    .await?;
    assert!(
        c.message
            .starts_with("unable to get 'default/a' dependency"),
        "{}",
        c.message
    );
    assert!(helm_list(env.kubeconfig())?.is_empty());
    env.kubectl_apply(&podinfo_release(&url, "a", ""))?;
    ready(&hrs, "a").await?;
    ready(&hrs, "b").await?;
    let a_first = helm_history(env.kubeconfig(), "a", "default")?;
    let b_first = helm_history(env.kubeconfig(), "b", "default")?;
    assert_eq!((a_first.len(), b_first.len()), (1, 1));

    // Suspended, a values change does nothing (the agent holds the plan suspended) and the
    // generation counts as observed, as Flux has it.
    env.kubectl_apply(&podinfo_release(
        &url,
        "b",
        "  suspend: true\n  dependsOn:\n  - name: a\n  values:\n    replicaCount: 2",
    ))?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(helm_history(env.kubeconfig(), "b", "default")?.len(), 1);
    let b = hrs.get("b").await?;
    assert_eq!(
        b.status.as_ref().map(|s| s.observed_generation),
        b.metadata.generation
    );

    // A restarted hub re-sends the same plan revisions: nothing is upgraded.
    env.restart_hub().await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let a = ready(&hrs, "a").await?;
    assert_eq!(
        a.annotations()
            .get(PLAN_REVISION_ANNOTATION)
            .map(String::as_str),
        Some("1")
    );
    assert_eq!(helm_history(env.kubeconfig(), "a", "default")?.len(), 1);

    // Resumed, b is upgraded with the new values under the next plan revision.
    env.kubectl_apply(&podinfo_release(
        &url,
        "b",
        "  dependsOn:\n  - name: a\n  values:\n    replicaCount: 2",
    ))?;
    let b = wait::until("b upgraded", TIMEOUT, || async {
        let b = ready(&hrs, "b").await?;
        Ok((helm_history(env.kubeconfig(), "b", "default")?.len() == 2).then_some(b))
    })
    .await?;
    assert_eq!(
        b.annotations()
            .get(PLAN_REVISION_ANNOTATION)
            .map(String::as_str),
        Some("3"),
        "revision 2 was the suspended plan"
    );

    env.stop().await;
    Ok(())
}

/// `len` random letters and digits (they do not compress much).
fn noise(len: usize) -> String {
    let mut rng = fastrand::Rng::with_seed(7);
    (0..len).map(|_| rng.alphanumeric()).collect()
}

fn values_secret(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: default\nstringData:\n  values.yaml: |\n    replicaCount: {replicas}\n"
    )
}

#[tokio::test]
async fn a_values_secret_change_upgrades_only_the_release_using_it_and_a_release_name_change_replaces_the_release()
-> anyhow::Result<()> {
    let env = Env::start("hub-watch").await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    for name in ["a", "b"] {
        env.kubectl_apply(&values_secret(&format!("values-{name}"), 1))?;
        env.kubectl_apply(&podinfo_release(
            &url,
            name,
            &format!("  valuesFrom:\n  - kind: Secret\n    name: values-{name}"),
        ))?;
    }
    ready(&hrs, "a").await?;
    ready(&hrs, "b").await?;

    // The HelmReleases' interval is 10m: only the Secret watch can upgrade `a` this soon.
    env.kubectl_apply(&values_secret("values-a", 2))?;
    wait::until("a upgraded", TIMEOUT, || async {
        ready(&hrs, "a").await?;
        Ok((helm_history(env.kubeconfig(), "a", "default")?.len() == 2).then_some(()))
    })
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let b = hrs.get("b").await?;
    assert_eq!(
        b.annotations()
            .get(PLAN_REVISION_ANNOTATION)
            .map(String::as_str),
        Some("1"),
        "b's plan did not change"
    );
    assert_eq!(helm_history(env.kubeconfig(), "b", "default")?.len(), 1);

    // A new release name: the old release is uninstalled and the new one installed.
    env.kubectl_apply(&podinfo_release(
        &url,
        "b",
        "  releaseName: b-renamed\n  valuesFrom:\n  - kind: Secret\n    name: values-b",
    ))?;
    wait::until("b renamed", TIMEOUT, || async {
        ready(&hrs, "b").await?;
        let mut list = helm_list(env.kubeconfig())?;
        list.sort();
        Ok((list == ["a", "b-renamed"]).then_some(()))
    })
    .await?;

    env.stop().await;
    Ok(())
}

/// The `Stalled` condition of `name` as (status, reason, message), once it is there.
async fn stalled(
    hrs: &kube::Api<flotilla_api::HelmRelease>,
    name: &str,
) -> anyhow::Result<(ConditionStatus, String, String)> {
    wait::until(&format!("{name} Stalled"), common::TIMEOUT, || async {
        let hr = hrs.get(name).await?;
        Ok(hr
            .status
            .as_ref()
            .and_then(|s| s.conditions.get_condition(condition::STALLED))
            .map(|c| (c.status, c.reason.clone(), c.message.clone())))
    })
    .await
}

#[tokio::test]
async fn cel_expressions_that_do_not_parse_stall_the_release_and_ready_expr_decides_when_a_dependency_is_ready()
-> anyhow::Result<()> {
    let env = Env::start("hub-cel").await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();

    // healthCheckExprs that do not parse: terminal, before anything else (Flux's text).
    env.kubectl_apply(&podinfo_release(
        &url,
        "bad-health",
        "  healthCheckExprs:\n  - apiVersion: example.dev/v1\n    kind: Widget\n    current: \"status.(\"",
    ))?;
    let c = ready_condition(&hrs, "bad-health", "InvalidCELExpression", |c| {
        c.reason == "InvalidCELExpression"
    })
    .await?;
    assert_eq!(c.status, ConditionStatus::False);
    let want = "Reconciliation failed terminally due to configuration error: \
                failed to create custom status evaluator for healthchecks[0]: \
                failed to parse the expression Current: \
                failed to parse the CEL expression 'status.(': ERROR: <input>:1:";
    assert!(c.message.starts_with(want), "{}", c.message);
    let (status, why, message) = stalled(&hrs, "bad-health").await?;
    assert_eq!(
        (status, why.as_str(), message.as_str()),
        (
            ConditionStatus::True,
            "InvalidCELExpression",
            c.message.as_str()
        )
    );

    // readyExpr over `self` and `dep`: a's tier must be b's; while it is not, b waits with
    // Flux's message (the built-in Ready check is not used: a is Ready all along).
    env.kubectl_apply(&podinfo_release(&url, "a", ""))?;
    ready(&hrs, "a").await?;
    let b = podinfo_release(
        &url,
        "b",
        "  dependsOn:\n  - name: a\n    readyExpr: \"has(dep.metadata.labels) && 'tier' in dep.metadata.labels && dep.metadata.labels.tier == self.metadata.labels.tier\"",
    )
    .replace(
        "  name: b\n  namespace: default\n",
        "  name: b\n  namespace: default\n  labels:\n    tier: db\n",
    );
    env.kubectl_apply(&b)?;
    let c = ready_condition(&hrs, "b", "DependencyNotReady", |c| {
        c.reason == "DependencyNotReady"
    })
    .await?;
    assert_eq!(
        c.message,
        "dependency 'default/a' is not ready according to readyExpr eval"
    );
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(helm_list(env.kubeconfig())?, vec!["a".to_owned()]);
    kubectl_in(
        env.kubeconfig(),
        &[
            "label",
            "helmreleases.helm.flotilla.dev/a",
            "-n",
            "default",
            "tier=db",
        ],
        None,
    )?;
    ready(&hrs, "b").await?;

    // A readyExpr naming another variable does not compile: terminal too.
    env.kubectl_apply(&podinfo_release(
        &url,
        "c",
        "  dependsOn:\n  - name: a\n    readyExpr: \"other == 1\"",
    ))?;
    let (status, why, message) = stalled(&hrs, "c").await?;
    assert_eq!(
        (status, why.as_str()),
        (ConditionStatus::True, "InvalidCELExpression")
    );
    assert_eq!(
        message,
        "Reconciliation failed terminally due to configuration error: \
         failed to evaluate dependency a: failed to parse the CEL expression 'other == 1': \
         ERROR: <input>:1:1: undeclared reference to 'other'"
    );
    let mut installed = helm_list(env.kubeconfig())?;
    installed.sort();
    assert_eq!(installed, ["a", "b"]);

    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn with_a_plan_epoch_revisions_start_at_its_floor_are_recorded_after_sending_survive_a_restart_unchanged_and_a_new_plan_gets_the_next_epochs()
-> anyhow::Result<()> {
    let mut env = Env::start_with("hub-epoch", |c| {
        c.plan_epoch_namespace = Some("default".into());
    })
    .await?;
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let recorded = |hr: &flotilla_api::HelmRelease| {
        hr.annotations()
            .get(PLAN_REVISION_ANNOTATION)
            .cloned()
            .unwrap_or_default()
    };
    let kubeconfig = env.kubeconfig().to_owned();
    let epoch = || -> anyhow::Result<String> {
        kubectl_in(
            &kubeconfig,
            &[
                "get",
                "configmap",
                EPOCH_CONFIGMAP,
                "-n",
                "default",
                "-o",
                "jsonpath={.data.epoch}",
            ],
            None,
        )
    };
    assert_eq!(epoch()?, "1", "the first hub claims epoch 1");

    // The first plan of epoch 1 is revision 1 * EPOCH_SPAN, written after it was sent.
    env.kubectl_apply(&podinfo_release(&url, "a", ""))?;
    ready(&hrs, "a").await?;
    let first = EPOCH_SPAN.to_string();
    wait::until("a's revision recorded", TIMEOUT, || async {
        Ok((recorded(&hrs.get("a").await?) == first).then_some(()))
    })
    .await?;
    assert_eq!(helm_history(env.kubeconfig(), "a", "default")?.len(), 1);

    // A restarted hub claims epoch 2 and re-sends the unchanged plan at its recorded
    // revision: nothing is upgraded.
    env.restart_hub().await?;
    assert_eq!(epoch()?, "2");
    tokio::time::sleep(Duration::from_secs(5)).await;
    let a = ready(&hrs, "a").await?;
    assert_eq!(recorded(&a), first);
    assert_eq!(helm_history(env.kubeconfig(), "a", "default")?.len(), 1);

    // A changed plan gets epoch 2's first revision, above every revision of epoch 1, and
    // the agent upgrades.
    env.kubectl_apply(&podinfo_release(
        &url,
        "a",
        "  values:\n    replicaCount: 2",
    ))?;
    wait_for_history(env.kubeconfig(), "a", 2).await?;
    ready(&hrs, "a").await?;
    let second = (2 * EPOCH_SPAN).to_string();
    wait::until("a's new revision recorded", TIMEOUT, || async {
        Ok((recorded(&hrs.get("a").await?) == second).then_some(()))
    })
    .await?;

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_helm_release_created_before_its_managed_cluster_reaches_the_agent_as_soon_as_the_cluster_is_accepted_and_connects_not_at_the_requeue()
-> anyhow::Result<()> {
    common::init_logging();
    let cluster =
        flotilla_tests::Cluster::start(flotilla_tests::ClusterOptions::named("hub-late-cluster"))
            .await?;
    let client = cluster.client().await?;
    common::install_crds(&client).await?;
    let repo = flotilla_tests::servers::HelmRepoServer::start(
        flotilla_tests::servers::RepoOptions::named("hub-late-cluster"),
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
    // Far beyond the test's wait: only the ManagedCluster watch can make it in time.
    config.requeue_dependency = Duration::from_secs(600);
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
    let hrs: kube::Api<flotilla_api::HelmRelease> =
        kube::Api::namespaced(client.clone(), "default");

    // The HelmRelease first: its cluster does not exist yet.
    kubectl_in(
        cluster.kubeconfig(),
        &["apply", "-f", "-"],
        Some(&podinfo_release(
            &repo.url(),
            "late",
            "  clusterRef:\n    name: late",
        )),
    )?;
    let c = ready_condition(&hrs, "late", "AgentNotConnected", |c| {
        c.reason == "AgentNotConnected"
    })
    .await?;
    assert_eq!(c.message, "no agent connected for cluster late");

    // The cluster joins (auto-accepted) and its agent connects: the plan arrives within
    // seconds, not at the 600 s requeue.
    let started = std::time::Instant::now();
    let token = tokens::create(
        client.clone(),
        "flotilla-system",
        &tokens::TokenOptions {
            auto_accept: true,
            ..tokens::TokenOptions::new(tokens::TokenScope::Cluster("late".into()))
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
            cluster_name: "late".into(),
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
    let ack = tokio::time::timeout(Duration::from_secs(60), acked.recv())
        .await
        .map_err(|_| anyhow::anyhow!("no plan reached the agent of cluster late within 60 s"))?
        .ok_or_else(|| anyhow::anyhow!("the session ended"))?;
    assert_eq!(ack.object.name.as_str(), "late");
    assert_eq!(ack.chart_version, "6.5.2");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "took {:?}",
        started.elapsed()
    );

    stop.cancel();
    let _ = session.await;
    commands.abort();
    hub.stop().await;
    sessions.stop().await;
    Ok(())
}

fn values_config_map(name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: default\ndata:\n  values.yaml: |\n    replicaCount: {replicas}\n"
    )
}

/// `replicaCount` of the deployed values of release `name` in `default`.
fn deployed_replicas(env: &Env, name: &str) -> anyhow::Result<String> {
    let out = flotilla_tests::tools::helm_in(
        env.kubeconfig(),
        &["get", "values", name, "-n", "default", "-o", "json"],
    )?;
    let values: serde_json::Value = serde_json::from_str(&out)?;
    Ok(values["replicaCount"].to_string())
}

/// `flotilla_hub_values_reads_total{source}` from the hub's metrics.
fn values_reads(metrics: &flotilla_hub::telemetry::HubMetrics, source: &str) -> f64 {
    let text = metrics.encode().unwrap_or_default();
    let series = format!("flotilla_hub_values_reads_total{{source=\"{source}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or_default()
}

#[tokio::test]
async fn values_from_objects_are_served_from_the_cache_between_changes_and_a_value_changed_right_before_a_reconcile_is_planned_at_once()
-> anyhow::Result<()> {
    common::init_logging();
    let cluster =
        flotilla_tests::Cluster::start(flotilla_tests::ClusterOptions::named("hub-values-cache"))
            .await?;
    common::install_crds(&cluster.client().await?).await?;
    let repo = flotilla_tests::servers::HelmRepoServer::start(
        flotilla_tests::servers::RepoOptions::named("hub-values-cache"),
    )
    .await?;
    repo.publish_version(&common::podinfo_chart(), "6.5.2")?;
    let artifacts = tempfile::tempdir()?;
    let config = common::hub_config(&cluster, artifacts.path());
    let metrics = config.metrics.clone();
    let hub = flotilla_hub::run::Hub::start(config).await?;
    let env = Env {
        cluster,
        repo,
        hub: Some(hub),
        artifacts,
        configure: |_| {},
    };
    let hrs = env.helm_releases().await?;
    let url = env.repo.url();
    let release = |extra: &str| {
        podinfo_release(
            &url,
            "cached",
            &format!("  valuesFrom:\n  - kind: ConfigMap\n    name: cached-values\n{extra}"),
        )
    };

    env.kubectl_apply(&values_config_map("cached-values", 1))?;
    env.kubectl_apply(&release(""))?;
    ready(&hrs, "cached").await?;
    assert_eq!(deployed_replicas(&env, "cached")?, "1");

    // A reconcile the HelmRelease did not ask for (its HelmChart changed): the ConfigMap
    // comes from the cache, and nothing is upgraded.
    let api_reads = values_reads(&metrics, "api");
    let cache_reads = values_reads(&metrics, "cache");
    kubectl_in(
        env.kubeconfig(),
        &[
            "annotate",
            "--overwrite",
            "helmchart.source.flotilla.dev/default-cached",
            "reconcile.fluxcd.io/requestedAt=values-cache-test",
        ],
        None,
    )?;
    wait::until("a values read from the cache", TIMEOUT, || async {
        Ok((values_reads(&metrics, "cache") > cache_reads).then_some(()))
    })
    .await?;
    assert_eq!(values_reads(&metrics, "api"), api_reads);
    assert_eq!(
        helm_history(env.kubeconfig(), "cached", "default")?.len(),
        1
    );

    // The ConfigMap changes: the watch drops the cached data before it reconciles the
    // HelmRelease, which plans the new value.
    env.kubectl_apply(&values_config_map("cached-values", 2))?;
    common::wait_for_history(env.kubeconfig(), "cached", 2).await?;
    ready(&hrs, "cached").await?;
    assert_eq!(deployed_replicas(&env, "cached")?, "2");

    // A value changed right before a reconcile request, and right before a spec change:
    // each reconcile plans the new value at once (one upgrade each, never one with the
    // old value first).
    env.kubectl_apply(&values_config_map("cached-values", 3))?;
    kubectl_in(
        env.kubeconfig(),
        &[
            "annotate",
            "--overwrite",
            "helmrelease.helm.flotilla.dev/cached",
            "reconcile.fluxcd.io/requestedAt=right-after-the-change",
        ],
        None,
    )?;
    common::wait_for_history(env.kubeconfig(), "cached", 3).await?;
    ready(&hrs, "cached").await?;
    assert_eq!(deployed_replicas(&env, "cached")?, "3");
    env.kubectl_apply(&format!(
        "{}---\n{}",
        values_config_map("cached-values", 4),
        release("  values:\n    ui:\n      message: spec-changed")
    ))?;
    common::wait_for_history(env.kubeconfig(), "cached", 4).await?;
    ready(&hrs, "cached").await?;
    assert_eq!(deployed_replicas(&env, "cached")?, "4");
    tokio::time::sleep(Duration::from_secs(3)).await;
    let history = helm_history(env.kubeconfig(), "cached", "default")?;
    assert_eq!(history.len(), 4, "one upgrade per change: {history:?}");

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_kube_config_config_map_ref_is_ready_false_naming_the_field_until_its_config_map_names_a_provider_the_hub_serves()
-> anyhow::Result<()> {
    let env = Env::start("hub-kubeconfig-cm").await?;
    let hrs = env.helm_releases().await?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "remote",
        "  kubeConfig:\n    configMapRef:\n      name: workload-identity",
    ))?;
    let c = ready_condition(&hrs, "remote", "the missing ConfigMap", |c| {
        c.status == ConditionStatus::False && c.reason == "RESTClientError"
    })
    .await?;
    assert_eq!(
        c.message,
        "failed to get configmap default/workload-identity: configmaps \"workload-identity\" not found (spec.kubeConfig.configMapRef)"
    );

    // The ConfigMap appears (the watch reconciles the HelmRelease): a cloud provider is
    // refused naming the field and key, and nothing is installed.
    env.kubectl_apply(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: workload-identity\n  namespace: default\ndata:\n  provider: aws\n  cluster: arn:aws:eks:eu-west-1:000000000000:cluster/edge\n",
    )?;
    let c = ready_condition(&hrs, "remote", "the aws provider refused", |c| {
        c.reason == "RESTClientError" && c.message.contains("'aws'")
    })
    .await?;
    assert!(
        c.message.starts_with("provider 'aws' is not supported by the Flotilla hub (spec.kubeConfig.configMapRef: ConfigMap 'default/workload-identity', key 'provider')"),
        "{}",
        c.message
    );
    assert_eq!(c.status, ConditionStatus::False);
    assert!(helm_list(env.kubeconfig())?.is_empty());

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_change_of_the_kube_config_config_map_reconciles_its_helm_release_at_once_not_at_a_requeue()
-> anyhow::Result<()> {
    // Requeues of an hour: only the ConfigMap's watch can reconcile the HelmRelease again.
    let env = Env::start_with("hub-kubeconfig-cm-watch", |config| {
        config.requeue_dependency = Duration::from_secs(3600);
    })
    .await?;
    let hrs = env.helm_releases().await?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "remote",
        "  kubeConfig:\n    configMapRef:\n      name: workload-identity",
    ))?;
    ready_condition(&hrs, "remote", "the missing ConfigMap", |c| {
        c.reason == "RESTClientError" && c.message.contains("not found")
    })
    .await?;
    // Let the HelmChart settle, so that none of its changes reconciles the HelmRelease.
    tokio::time::sleep(Duration::from_secs(3)).await;

    let provider = |name: &str| {
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: workload-identity\n  namespace: default\ndata:\n  provider: {name}\n"
        )
    };
    env.kubectl_apply(&provider("aws"))?;
    ready_condition(&hrs, "remote", "the ConfigMap created", |c| {
        c.reason == "RESTClientError" && c.message.contains("'aws'")
    })
    .await?;
    env.kubectl_apply(&provider("azure"))?;
    let c = ready_condition(&hrs, "remote", "the ConfigMap changed", |c| {
        c.reason == "RESTClientError" && c.message.contains("'azure'")
    })
    .await?;
    assert_eq!(c.status, ConditionStatus::False);

    env.stop().await;
    Ok(())
}

/// Reconciles of HelmRelease `panics` seen by the fault hook of
/// [`a_panic_in_a_reconcile_is_caught_the_release_is_retried_and_the_controller_goes_on`].
static PANIC_HOOK_CALLS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[tokio::test]
async fn a_panic_in_a_reconcile_is_caught_the_release_is_retried_and_the_controller_goes_on()
-> anyhow::Result<()> {
    use std::sync::atomic::Ordering;
    // The test hook runs at the start of every reconcile: the first two of `panics` panic.
    let env = Env::start_with("hub-panic", |config| {
        config.reconcile_fault = Some(flotilla_hub::controller::ReconcileFault(
            std::sync::Arc::new(|hr: &flotilla_api::HelmRelease| {
                if hr.name_any() == "panics" && PANIC_HOOK_CALLS.fetch_add(1, Ordering::SeqCst) < 2
                {
                    panic!("a fault injected into the reconcile");
                }
            }),
        ));
    })
    .await?;
    let hrs = env.helm_releases().await?;
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "panics",
        "  releaseName: panics",
    ))?;
    // Retried with backoff after each panic, then planned and installed.
    ready(&hrs, "panics").await?;
    assert!(PANIC_HOOK_CALLS.load(Ordering::SeqCst) >= 3);
    // The controller goes on with other objects.
    env.kubectl_apply(&podinfo_release(
        &env.repo.url(),
        "calm",
        "  releaseName: calm",
    ))?;
    ready(&hrs, "calm").await?;
    let mut installed = helm_list(env.kubeconfig())?;
    installed.sort();
    assert_eq!(installed, vec!["calm".to_owned(), "panics".to_owned()]);

    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_schema_failure_on_a_value_from_a_secret_quotes_no_part_of_it_in_the_condition_or_the_events()
-> anyhow::Result<()> {
    let env = Env::start("hub-schema-secret").await?;
    let hrs = env.helm_releases().await?;
    // A chart whose schema refuses the password the Secret gives (the message of the
    // `pattern` keyword quotes the value in Helm's text).
    let chart = tempfile::tempdir()?;
    std::fs::write(
        chart.path().join("Chart.yaml"),
        "apiVersion: v2\nname: guarded\nversion: 0.1.0\n",
    )?;
    std::fs::write(
        chart.path().join("values.schema.json"),
        r#"{"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
            "properties": {"auth": {"type": "object", "properties": {
              "password": {"type": "string", "pattern": "^[a-z]{4}$"},
              "port": {"type": "integer", "maximum": 65535}}}}}"#,
    )?;
    std::fs::create_dir(chart.path().join("templates"))?;
    std::fs::write(
        chart.path().join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: guarded\ndata: {}\n",
    )?;
    env.repo.publish_version(chart.path(), "0.1.0")?;
    let password = "Hunter2-s3cr3t-Pa55";
    env.kubectl_apply(
        &serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "guarded-auth", "namespace": "default"},
            "stringData": {"password": password, "port": "7654321"},
        })
        .to_string(),
    )?;
    env.kubectl_apply(&format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: guarded
  namespace: default
spec:
  interval: 5m
  url: {url}
---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: guarded
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: guarded
      sourceRef:
        kind: HelmRepository
        name: guarded
  install:
    remediation:
      retries: 1
  valuesFrom:
  - kind: Secret
    name: guarded-auth
    valuesKey: password
    targetPath: auth.password
  - kind: Secret
    name: guarded-auth
    valuesKey: port
    targetPath: auth.port
"#,
        url = env.repo.url()
    ))?;
    let c = ready_condition(&hrs, "guarded", "the schema failure", |c| {
        c.status == ConditionStatus::False
            && c.message.contains("values don't meet the specifications")
    })
    .await?;
    assert!(
        c.message.contains("- at '/auth/password': "),
        "{}",
        c.message
    );
    assert!(
        c.message.contains(flotilla_chart::schema::WITHHELD),
        "{}",
        c.message
    );
    let events = wait::until("the failure's Event", TIMEOUT, || async {
        let events = kubectl_in(
            env.kubeconfig(),
            &[
                "get",
                "events",
                "-n",
                "default",
                "--field-selector",
                "involvedObject.name=guarded,involvedObject.kind=HelmRelease",
                "-o",
                "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
            ],
            None,
        )?;
        Ok(events
            .contains("values don't meet the specifications")
            .then_some(events))
    })
    .await?;
    let hr = hrs.get("guarded").await?;
    let status = serde_json::to_string(&hr.status)?;
    for part in ["s3cr3t", "Hunter2", "Pa55", "7654321", "7,654,321"] {
        assert!(!c.message.contains(part), "{part} in {}", c.message);
        assert!(!events.contains(part), "{part} in {events}");
        assert!(!status.contains(part), "{part} in {status}");
    }

    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}
