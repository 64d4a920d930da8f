//! The whole system end to end, the way `cargo xtask up` runs it: a hub cluster, two workload
//! clusters, the `flotilla-hub` process serving sessions, two `flotilla-agent` processes
//! joined with a bootstrap token, a Helm repository (nginx) and an OCI registry
//! (distribution) holding this repository's example chart (`examples/charts/hello`).
//!
//! Each flow of the seeds is driven on the hub (HelmReleases, the `flotilla` CLI) and checked
//! on both sides: the HelmRelease's status on the hub, and the workload cluster's real objects
//! and Helm storage, read by the real `kubectl` and `helm`.

use std::path::Path;
use std::time::{Duration, Instant};

use flotilla_api::HelmRelease;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_tests::bins::{self, Progress};
use flotilla_tests::fleet::{Fleet, FleetOptions, hello_deployment};
use flotilla_tests::tools::{helm_history, helm_in, kubectl_in};
use flotilla_tests::wait;
use kube::api::Api;

const TIMEOUT: Duration = Duration::from_secs(120);
const NS: &str = "fleet-demo";

async fn fleet(name: &str) -> anyhow::Result<Fleet> {
    Fleet::start(bins::build(Progress::OnFailure)?, FleetOptions::named(name)).await
}

async fn releases(fleet: &Fleet) -> anyhow::Result<Api<HelmRelease>> {
    Ok(Api::namespaced(fleet.mgmt.client().await?, NS))
}

/// Waits until `name` is Ready=True for its current generation and has handled `since`
/// (the HelmRelease's `lastHandled...` is not needed: the generation tells).
async fn ready(fleet: &Fleet, name: &str) -> anyhow::Result<HelmRelease> {
    let mut ready = fleet.wait_ready(&[(NS, name)], TIMEOUT, |_| {}).await?;
    Ok(ready.remove(0))
}

/// Waits until `check` holds for the HelmRelease `name`.
async fn until_release(
    fleet: &Fleet,
    name: &str,
    what: &str,
    check: impl Fn(&HelmRelease) -> bool,
) -> anyhow::Result<HelmRelease> {
    let api = releases(fleet).await?;
    let check = &check;
    let waited = wait::until(&format!("HelmRelease {name}: {what}"), TIMEOUT, || {
        let api = api.clone();
        async move {
            let hr = api.get(name).await?;
            Ok(check(&hr).then_some(hr))
        }
    })
    .await;
    match waited {
        Ok(hr) => Ok(hr),
        Err(e) => {
            // What it was instead, to tell why.
            let last = api.get(name).await.ok();
            let annotations = last.as_ref().map(|hr| hr.metadata.annotations.clone());
            let status = last.and_then(|hr| hr.status);
            Err(e.context(format!(
                "its annotations: {annotations:?}\nits status: {status:#?}"
            )))
        }
    }
}

/// `kubectl patch --type merge` of object `kind/name` in [`NS`] on the hub's cluster.
fn merge_patch(fleet: &Fleet, kind: &str, name: &str, patch: &str) -> anyhow::Result<String> {
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch", kind, name, "-n", NS, "--type", "merge", "-p", patch,
        ],
        None,
    )
}

fn condition_of<'a>(hr: &'a HelmRelease, ty: &str) -> Option<&'a flotilla_core::meta::Condition> {
    hr.status.as_ref()?.conditions.get_condition(ty)
}

fn history(kubeconfig: &Path) -> anyhow::Result<Vec<(i64, String, String)>> {
    helm_history(kubeconfig, "hello", "hello")
}

fn statuses(history: &[(i64, String, String)]) -> Vec<&str> {
    history.iter().map(|(_, s, _)| s.as_str()).collect()
}

fn config_message(kubeconfig: &Path) -> anyhow::Result<String> {
    kubectl_in(
        kubeconfig,
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
    )
}

async fn until_history_len(
    kubeconfig: &Path,
    len: usize,
) -> anyhow::Result<Vec<(i64, String, String)>> {
    wait::until(&format!("{len} Helm revisions"), TIMEOUT, || async {
        let h = history(kubeconfig)?;
        Ok((h.len() >= len).then_some(h))
    })
    .await
}

#[tokio::test]
async fn the_example_fleet_installs_on_both_clusters_upgrades_on_values_and_chart_changes_handles_drift_in_each_mode_suspends_and_uninstalls()
-> anyhow::Result<()> {
    let mut fleet = fleet("e2e-flows").await?;
    let a = fleet
        .workload("workload-a")?
        .cluster
        .kubeconfig()
        .to_owned();
    let b = fleet
        .workload("workload-b")?
        .cluster
        .kubeconfig()
        .to_owned();

    // Install: one release per workload cluster, from the Helm repository (with tests) and
    // from the OCI registry (values from a ConfigMap on the hub).
    fleet.apply(&fleet.example_releases()?)?;
    let hr_a = ready(&fleet, "hello-a").await?;
    let hr_b = ready(&fleet, "hello-b").await?;
    for hr in [&hr_a, &hr_b] {
        let status = hr.status.clone().unwrap_or_default();
        assert!(
            status.last_attempted_revision.starts_with("0.1.0"),
            "{status:?}"
        );
        assert_eq!(status.storage_namespace, "hello");
        assert_eq!(status.history.len(), 1, "{:?}", status.history);
    }
    // An OCI-sourced chart's version carries the artifact digest, as Flux records it, and
    // the release is not upgraded again and again for it.
    let version_b = hr_b.status.clone().unwrap_or_default().history[0]
        .chart_version
        .clone();
    assert!(
        version_b.starts_with("0.1.0+") && version_b.len() == "0.1.0+".len() + 12,
        "{version_b}"
    );
    // The hub counts what the sessions did: two agents up, each chart archive sent along
    // with its first plan (the agents held none), none fetched with GetChart.
    assert_eq!(fleet.hub_metric("flotilla_hub_agent_sessions")?, Some(2.0));
    assert_eq!(
        fleet.hub_metric("flotilla_hub_chart_archives_sent_total{how=\"with_plan\"}")?,
        Some(2.0)
    );
    assert_eq!(
        fleet.hub_metric("flotilla_hub_chart_archives_sent_total{how=\"get_chart\"}")?,
        Some(0.0)
    );
    let tested = condition_of(&hr_a, condition::TEST_SUCCESS).expect("hello-a runs its tests");
    assert_eq!(tested.status, ConditionStatus::True, "{tested:?}");
    assert!(condition_of(&hr_b, condition::TEST_SUCCESS).is_none());
    assert_eq!(statuses(&history(&a)?), ["deployed"]);
    assert_eq!(statuses(&history(&b)?), ["deployed"]);
    assert_eq!(config_message(&a)?, "Hello from workload-a");
    assert_eq!(config_message(&b)?, "Hello from workload-b");
    assert_eq!(
        hello_deployment(&b, "{.spec.replicas}")?,
        "2",
        "hello-b's replicaCount comes from its ConfigMap"
    );
    // Each cluster holds only its own release.
    assert_eq!(helm_in(&a, &["list", "-A", "-q"])?.trim(), "hello");
    assert_eq!(helm_in(&b, &["list", "-A", "-q"])?.trim(), "hello");
    // Each cluster's PLANS column is the one plan its agent acknowledged, seconds after
    // (not at the session's next 30 s status tick: issue 35).
    let plans_of = |clusters: &str, name: &str| -> Option<String> {
        let header: Vec<&str> = clusters.lines().next()?.split_whitespace().collect();
        let column = header.iter().position(|h| *h == "PLANS")?;
        let row = clusters
            .lines()
            .find(|l| l.split_whitespace().next() == Some(name))?;
        row.split_whitespace().nth(column).map(str::to_owned)
    };
    let clusters = wait::until(
        "get clusters to show one plan on each cluster",
        Duration::from_secs(10),
        || async {
            let clusters = fleet.flotilla(&["get", "clusters"])?;
            Ok(["workload-a", "workload-b"]
                .iter()
                .all(|c| plans_of(&clusters, c).as_deref() == Some("1"))
                .then_some(clusters))
        },
    )
    .await?;
    assert!(
        clusters.contains("workload-a") && clusters.contains("workload-b"),
        "{clusters}"
    );
    // `flotilla version`: the client's and each agent's, as its session reported it.
    let version = env!("CARGO_PKG_VERSION");
    assert_eq!(
        fleet.flotilla(&["version"])?,
        format!(
            "client: flotilla {version}\nagent workload-a: flotilla-agent {version}\nagent workload-b: flotilla-agent {version}\n"
        )
    );

    // A values change upgrades hello-a only.
    merge_patch(
        &fleet,
        "helmrelease",
        "hello-a",
        r#"{"spec":{"values":{"message":"changed on the hub"}}}"#,
    )?;
    ready(&fleet, "hello-a").await?;
    assert_eq!(statuses(&history(&a)?), ["superseded", "deployed"]);
    assert_eq!(config_message(&a)?, "changed on the hub");
    assert_eq!(history(&b)?.len(), 1);

    // A valuesFrom ConfigMap change upgrades hello-b.
    merge_patch(
        &fleet,
        "configmap",
        "hello-b-values",
        r#"{"data":{"values.yaml":"message: from the ConfigMap\nreplicaCount: 2\n"}}"#,
    )?;
    until_history_len(&b, 2).await?;
    ready(&fleet, "hello-b").await?;
    assert_eq!(config_message(&b)?, "from the ConfigMap");

    // A new chart version in both sources: hello-a (0.1.x) and hello-b (>=0.1.0) upgrade.
    let chart = flotilla_tests::cluster::workspace_root().join("examples/charts/hello");
    fleet.repo.publish_version(&chart, "0.1.1")?;
    fleet.registry.push_version(&chart, "charts", "0.1.1")?;
    fleet.flotilla(&["reconcile", "hr", "hello-a", "-n", NS, "--with-source"])?;
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "annotate",
            "--overwrite",
            "ocirepository",
            "hello",
            "-n",
            NS,
            &format!("reconcile.fluxcd.io/requestedAt={}", now_token()),
        ],
        None,
    )?;
    for (name, kubeconfig) in [("hello-a", &a), ("hello-b", &b)] {
        let hr = until_release(&fleet, name, "at chart 0.1.1", |hr| {
            hr.status.as_ref().is_some_and(|s| {
                s.last_attempted_revision.starts_with("0.1.1")
                    && s.conditions.is_true(condition::READY)
            })
        })
        .await?;
        let version = hr.status.unwrap_or_default().history[0]
            .chart_version
            .clone();
        assert!(version.starts_with("0.1.1"), "{version}");
        let h = history(kubeconfig)?;
        assert_eq!(
            h.last().map(|(_, s, _)| s.as_str()),
            Some("deployed"),
            "{h:?}"
        );
    }
    let revisions_a = history(&a)?.len();

    // Drift (mode enabled on hello-a): a Deployment deleted by hand is put back at the next
    // reconcile, without a new Helm revision.
    kubectl_in(
        &a,
        &[
            "delete",
            "deployment",
            "hello",
            "-n",
            "hello",
            "--wait=false",
        ],
        None,
    )?;
    fleet.flotilla(&["reconcile", "hr", "hello-a", "-n", NS])?;
    wait::until("the Deployment back on workload-a", TIMEOUT, || async {
        Ok(kubectl_in(
            &a,
            &["get", "deployment", "hello", "-n", "hello", "-o", "name"],
            None,
        )
        .ok())
    })
    .await?;
    assert_eq!(
        history(&a)?.len(),
        revisions_a,
        "drift correction makes no Helm revision"
    );

    // Drift in the other two modes, on hello-b (workload-b). `disabled` (hello-b's default):
    // a change by hand is not looked at.
    let revisions_b = history(&b)?.len();
    kubectl_in(
        &b,
        &[
            "scale",
            "deployment",
            "hello",
            "-n",
            "hello",
            "--replicas=5",
        ],
        None,
    )?;
    fleet.flotilla(&["reconcile", "hr", "hello-b", "-n", NS])?;
    let hr_b = ready(&fleet, "hello-b").await?;
    assert!(
        condition_of(&hr_b, condition::DRIFTED).is_none(),
        "drift detection disabled: no Drifted condition: {:?}",
        hr_b.status
    );
    assert_eq!(
        hello_deployment(&b, "{.spec.replicas}")?,
        "5",
        "disabled: left alone"
    );
    assert_eq!(history(&b)?.len(), revisions_b);
    // `warn`: Flux's Drifted condition and Warning Event name the change; nothing is
    // corrected, Ready stays True and no Helm revision is made.
    merge_patch(
        &fleet,
        "helmrelease",
        "hello-b",
        r#"{"spec":{"driftDetection":{"mode":"warn"}}}"#,
    )?;
    let hr_b = until_release(&fleet, "hello-b", "Drifted=True in warn mode", |hr| {
        condition_of(hr, condition::DRIFTED).is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await?;
    let drifted = condition_of(&hr_b, condition::DRIFTED).expect("waited for it");
    assert_eq!(drifted.reason, flotilla_core::meta::reason::DRIFT_DETECTED);
    let expected = format!(
        "Cluster state of release hello/hello.v{revisions_b} has drifted from the desired state:\n\
         Deployment/hello/hello changed (0 additions, 1 changes, 0 removals)"
    );
    assert_eq!(drifted.message, expected);
    let ready_b = condition_of(&hr_b, condition::READY).expect("a Ready condition");
    assert_eq!(ready_b.status, ConditionStatus::True, "{ready_b:?}");
    wait::until("the DriftDetected Event on hello-b", TIMEOUT, || async {
        let events = kubectl_in(
            fleet.kubeconfig(),
            &[
                "get",
                "events",
                "-n",
                NS,
                "--field-selector",
                "involvedObject.name=hello-b,reason=DriftDetected,type=Warning",
                "-o",
                "jsonpath={.items[*].message}",
            ],
            None,
        )?;
        Ok(events.contains(&expected).then_some(()))
    })
    .await?;
    assert_eq!(
        hello_deployment(&b, "{.spec.replicas}")?,
        "5",
        "warn: not corrected"
    );
    assert_eq!(
        history(&b)?.len(),
        revisions_b,
        "warn makes no Helm revision"
    );

    // Suspend: a values change is not acted on until resumed.
    fleet.flotilla(&["suspend", "hr", "hello-a", "-n", NS])?;
    merge_patch(
        &fleet,
        "helmrelease",
        "hello-a",
        r#"{"spec":{"values":{"message":"while suspended"}}}"#,
    )?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        history(&a)?.len(),
        revisions_a,
        "a suspended release is left alone"
    );
    assert_ne!(config_message(&a)?, "while suspended");
    fleet.flotilla(&["resume", "hr", "hello-a", "-n", NS])?;
    until_history_len(&a, revisions_a + 1).await?;
    ready(&fleet, "hello-a").await?;
    assert_eq!(config_message(&a)?, "while suspended");

    // The agent killed with SIGKILL and started again (`run`, no token): it resumes from its
    // cluster, and a change made meanwhile on the hub reaches it once, with one revision.
    fleet.kill_agent("workload-b")?;
    let revisions_b = history(&b)?.len();
    merge_patch(
        &fleet,
        "helmrelease",
        "hello-b",
        r#"{"spec":{"values":{"message":"after a restart"}}}"#,
    )?;
    fleet.restart_agent("workload-b").await?;
    until_history_len(&b, revisions_b + 1).await?;
    ready(&fleet, "hello-b").await?;
    assert_eq!(config_message(&b)?, "after a restart");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(history(&b)?.len(), revisions_b + 1, "no duplicate upgrade");

    // Deletion uninstalls on the workload cluster and lets the HelmRelease go.
    let started = Instant::now();
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "delete",
            "helmrelease",
            "hello-a",
            "-n",
            NS,
            "--timeout=120s",
        ],
        None,
    )?;
    wait::until("hello-a uninstalled from workload-a", TIMEOUT, || async {
        let list = helm_in(&a, &["list", "-A", "-q"])?;
        Ok(list.trim().is_empty().then_some(()))
    })
    .await?;
    let deployments = kubectl_in(
        &a,
        &["get", "deployments", "-n", "hello", "-o", "name"],
        None,
    )?;
    assert!(deployments.trim().is_empty(), "{deployments}");
    assert_eq!(
        helm_in(&b, &["list", "-A", "-q"])?.trim(),
        "hello",
        "workload-b keeps its release"
    );
    eprintln!("deletion took {:?}", started.elapsed());
    Ok(())
}

#[tokio::test]
async fn failed_upgrades_roll_back_failed_installs_uninstall_and_dependencies_wait_across_clusters()
-> anyhow::Result<()> {
    let fleet = fleet("e2e-remediation").await?;
    let a = fleet
        .workload("workload-a")?
        .cluster
        .kubeconfig()
        .to_owned();
    let b = fleet
        .workload("workload-b")?
        .cluster
        .kubeconfig()
        .to_owned();
    let repo_url = fleet.repo.url();
    let release = |name: &str, cluster: &str, extra: &str| {
        format!(
            r#"apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: {name}
  namespace: {NS}
spec:
  clusterRef:
    name: {cluster}
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
{extra}"#
        )
    };
    let source = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\napiVersion: source.flotilla.dev/v1\nkind: HelmRepository\nmetadata:\n  name: examples\n  namespace: {NS}\nspec:\n  interval: 5m\n  url: {repo_url}\n"
    );
    fleet.apply(&source)?;

    // dependsOn across clusters: `late` on workload-b waits for `early` on workload-a.
    fleet.apply(&release(
        "late",
        "workload-b",
        "  dependsOn:\n  - name: early\n",
    ))?;
    until_release(&fleet, "late", "waiting for its dependency", |hr| {
        condition_of(hr, condition::READY).is_some_and(|c| c.reason == "DependencyNotReady")
    })
    .await?;
    assert!(
        helm_in(&b, &["list", "-A", "-q"])?.trim().is_empty(),
        "nothing installed before its dependency"
    );
    fleet.apply(&release(
        "early",
        "workload-a",
        "  test:\n    enable: true\n  upgrade:\n    remediation:\n      retries: 0\n      remediateLastFailure: true\n      strategy: rollback\n",
    ))?;
    ready(&fleet, "early").await?;
    ready(&fleet, "late").await?;
    assert_eq!(statuses(&history(&b)?), ["deployed"]);

    // An upgrade whose test fails is rolled back: revisions deployed (1), failed (2) and the
    // rollback's deployed (3); the status says so.
    merge_patch(
        &fleet,
        "helmrelease",
        "early",
        r#"{"spec":{"values":{"tests":{"podLabels":{"flotilla.dev/test-outcome":"fail"}}}}}"#,
    )?;
    let hr = until_release(&fleet, "early", "remediated by rollback", |hr| {
        condition_of(hr, condition::REMEDIATED).is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await?;
    let ready_condition = condition_of(&hr, condition::READY).expect("a Ready condition");
    assert_eq!(
        ready_condition.status,
        ConditionStatus::False,
        "{ready_condition:?}"
    );
    let remediated = condition_of(&hr, condition::REMEDIATED).expect("Remediated");
    assert_eq!(remediated.reason, "RollbackSucceeded", "{remediated:?}");
    let h = until_history_len(&a, 3).await?;
    // Helm's storage: the upgrade itself succeeded (its test failed), the rollback is
    // revision 3.
    assert_eq!(
        statuses(&h),
        ["superseded", "superseded", "deployed"],
        "{h:?}"
    );
    assert_eq!(h[1].2, "Upgrade complete", "{h:?}");
    assert!(h[2].2.contains("Rollback to 1"), "{h:?}");

    // An install that never becomes ready (pods kept unready) fails at its timeout and is
    // uninstalled (the install remediation's default).
    fleet.apply(
        &release(
            "stuck",
            "workload-b",
            "  timeout: 10s\n  values:\n    podLabels:\n      flotilla.dev/never-ready: \"true\"\n",
        )
        .replace("releaseName: hello", "releaseName: stuck")
        // Flux remediates the last failure only when told to, with no retries.
        .replace(
            "install:\n    createNamespace: true\n",
            "install:\n    createNamespace: true\n    remediation:\n      retries: 0\n      remediateLastFailure: true\n",
        ),
    )?;
    let hr = until_release(&fleet, "stuck", "remediated by uninstall", |hr| {
        condition_of(hr, condition::REMEDIATED).is_some_and(|c| c.status == ConditionStatus::True)
    })
    .await?;
    let remediated = condition_of(&hr, condition::REMEDIATED).expect("Remediated");
    assert_eq!(remediated.reason, "UninstallSucceeded", "{remediated:?}");
    let released = condition_of(&hr, condition::RELEASED).expect("Released");
    assert_eq!(released.reason, "InstallFailed", "{released:?}");
    let list = helm_in(&b, &["list", "-A", "-q"])?;
    assert!(
        !list.lines().any(|l| l == "stuck"),
        "the failed install is uninstalled: {list}"
    );
    // Every condition and Event the failures left is a sentence.
    fleet.scan_messages().await?;
    Ok(())
}

/// The token `flotilla reconcile` and `flux reconcile` write (RFC 3339).
fn now_token() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}.{:09}", now.as_secs(), now.subsec_nanos())
}
