//! The HelmReleaseSet controller (`flotilla_hub::sets`) on the fleet harness: a hub, two
//! workload clusters with real agents (`flotilla-agent`), the example chart in a Helm
//! repository. One fleet for the whole suite (cluster start-ups dominate its time); the
//! steps run in order on it:
//!
//! 1. a malformed set (a `valuesTemplate` that does not parse) gets `Ready=False`,
//!    `Stalled=True` `InvalidSpec` naming `spec.valuesTemplate`, and no child;
//! 2. a set with a canary wave (manual gate) and a second wave installs on the canary first,
//!    with values templated from the cluster's `region` label (read back with `helm get
//!    values` on the cluster) and its own ConfigMap named by a templated `valuesFrom`,
//!    waits for approval, then installs on the rest;
//! 3. paused, a new revision promotes nothing; resumed, it goes to the canary and waits at the
//!    gate again; approved, it reaches the rest;
//! 4. a change whose Helm test fails stops at the canary (`onFailure: Pause`; wave main's
//!    Helm history untouched); switched to `AbortAndRollback`, the canary is put back on the
//!    current revision;
//! 5. a cluster whose label stops matching has its child deleted and its release
//!    uninstalled (`stopMatchingPolicy: Uninstall`, the default);
//! 6. a cluster added to the selector mid-rollout (a new revision held at the canary's
//!    gate) gets its wave's revision, the current one; the held revision withdrawn, the
//!    canary goes back;
//! 7. with `Orphan`, a cluster that stops matching keeps its release and its HelmRelease;
//! 8. a ManagedCluster deleted has its child dropped without an uninstall, not counted as a
//!    failure;
//! 9. `flotilla rollout abort` of a change stopped at the canary puts the canary back on the
//!    current revision.
//!
//! Between 3's approval and its end the hub is killed (SIGKILL) and started again: the
//! rollout resumes, and no cluster is upgraded twice (Helm history counted).

use std::time::Duration;

use flotilla_api::{HelmRelease, HelmReleaseSet};
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_core::set::{REVISION_LABEL, SET_LABEL};
use flotilla_tests::bins::{self, Progress};
use flotilla_tests::fleet::{Fleet, FleetOptions};
use flotilla_tests::tools::{helm_history, helm_in, kubectl_in};
use flotilla_tests::wait;
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};

const TIMEOUT: Duration = Duration::from_secs(180);
const NS: &str = "rollout";

fn setup(repo_url: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
---
apiVersion: fleet.flotilla.dev/v1
kind: ManagedClusterBinding
metadata:
  name: rollout
spec:
  namespaces: [{NS}]
  clusterSelector: {{}}
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: examples
  namespace: {NS}
spec:
  interval: 5m
  url: {repo_url}
---
# Each cluster's own values, named by the set's templated valuesFrom.
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-values-workload-a
  namespace: {NS}
data:
  values.yaml: "zone: eu-1\n"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: web-values-workload-b
  namespace: {NS}
data:
  values.yaml: "zone: us-1\n"
"#
    )
}

/// The set `web`: every cluster with a `ring` label, the canary wave first (manual gate),
/// then `main`; values from the cluster's `region` label.
fn web_set(message: &str) -> String {
    web_set_with(message, "")
}

/// [`web_set`] with `extra` (indented YAML) under `template.spec`.
fn web_set_with(message: &str, extra: &str) -> String {
    format!(
        r#"apiVersion: helm.flotilla.dev/v1alpha1
kind: HelmReleaseSet
metadata:
  name: web
  namespace: {NS}
spec:
  clusterSelector:
    matchExpressions:
      - {{key: ring, operator: Exists}}
  template:
    spec:
      interval: 10m
      releaseName: web
      targetNamespace: web
      storageNamespace: web
      install:
        createNamespace: true
      test:
        enable: true
      valuesFrom:
        - kind: ConfigMap
          name: "web-values-{{{{ .ClusterName }}}}"
{extra}      chart:
        spec:
          chart: hello
          version: "0.1.x"
          sourceRef:
            kind: HelmRepository
            name: examples
  valuesTemplate: |
    message: "{message} {{{{ .ClusterLabels.region }}}}"
  rollout:
    strategy: Progressive
    revisionHistoryLimit: 1
    waves:
      - name: canary
        clusterSelector:
          matchLabels: {{ring: canary}}
        maxConcurrency: 1
        progressDeadline: 2m
        gate: Manual
      - name: main
        clusterSelector:
          matchLabels: {{ring: main}}
"#
    )
}

async fn sets(fleet: &Fleet) -> anyhow::Result<Api<HelmReleaseSet>> {
    Ok(Api::namespaced(fleet.mgmt.client().await?, NS))
}

async fn children(fleet: &Fleet, set: &str) -> anyhow::Result<Vec<HelmRelease>> {
    let api: Api<HelmRelease> = Api::namespaced(fleet.mgmt.client().await?, NS);
    Ok(api
        .list(&ListParams::default().labels(&format!("{SET_LABEL}={set}")))
        .await?
        .items)
}

/// Waits until `check` holds for set `name`; the error shows its last status.
async fn until_set(
    fleet: &Fleet,
    name: &str,
    what: &str,
    check: impl Fn(&HelmReleaseSet) -> bool,
) -> anyhow::Result<HelmReleaseSet> {
    let api = sets(fleet).await?;
    let check = &check;
    let waited = wait::until(&format!("HelmReleaseSet {name}: {what}"), TIMEOUT, || {
        let api = api.clone();
        async move {
            let s = api.get(name).await?;
            Ok(check(&s).then_some(s))
        }
    })
    .await;
    match waited {
        Ok(s) => Ok(s),
        Err(e) => {
            let status = api.get(name).await.ok().and_then(|s| s.status);
            Err(e.context(format!(
                "its status: {status:#?}\nthe end of the hub's log:\n{}",
                flotilla_tests::process::tail(fleet.hub_log(), 30)
            )))
        }
    }
}

fn condition_is(s: &HelmReleaseSet, ty: &str, status: ConditionStatus, reason: &str) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.conditions.get_condition(ty))
        .is_some_and(|c| c.status == status && c.reason == reason)
}

/// `helm get values web -n web` on a cluster: its `message`.
fn deployed_message(kubeconfig: &std::path::Path) -> anyhow::Result<String> {
    let json = helm_in(
        kubeconfig,
        &["get", "values", "web", "-n", "web", "-o", "json"],
    )?;
    let values: serde_json::Value = serde_json::from_str(&json)?;
    Ok(values["message"].as_str().unwrap_or_default().to_owned())
}

fn revision_of(hr: &HelmRelease) -> String {
    hr.labels().get(REVISION_LABEL).cloned().unwrap_or_default()
}

fn approve(fleet: &Fleet, revision: &str) -> anyhow::Result<()> {
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "helmreleaseset",
            "web",
            "-n",
            NS,
            "--type",
            "json",
            "-p",
            &format!(
                r#"[{{"op":"add","path":"/spec/rollout/waves/0/approvedRevision","value":"{revision}"}}]"#
            ),
        ],
        None,
    )?;
    Ok(())
}

fn merge_patch_set(fleet: &Fleet, patch: &str) -> anyhow::Result<()> {
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "helmreleaseset",
            "web",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            patch,
        ],
        None,
    )?;
    Ok(())
}

#[tokio::test]
async fn a_set_rolls_out_wave_by_wave_with_a_manual_gate_templated_values_pause_and_resume_and_uninstalls_a_cluster_that_leaves()
-> anyhow::Result<()> {
    let mut fleet = Fleet::start(
        bins::build(Progress::OnFailure)?,
        FleetOptions::named("sets"),
    )
    .await?;
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
    for (cluster, ring, region) in [("workload-a", "canary", "eu"), ("workload-b", "main", "us")] {
        kubectl_in(
            fleet.kubeconfig(),
            &[
                "label",
                "--overwrite",
                "managedcluster",
                cluster,
                &format!("ring={ring}"),
                &format!("region={region}"),
            ],
            None,
        )?;
    }
    fleet.apply(&setup(&fleet.repo.url()))?;

    // 1. A malformed set: a condition naming the field, no child.
    fleet.apply(&format!(
        r#"apiVersion: helm.flotilla.dev/v1alpha1
kind: HelmReleaseSet
metadata:
  name: broken
  namespace: {NS}
spec:
  clusterSelector: {{}}
  template:
    spec:
      interval: 10m
      chart:
        spec:
          chart: hello
          sourceRef: {{kind: HelmRepository, name: examples}}
  valuesTemplate: |
    message: {{{{ .ClusterName
"#
    ))?;
    let broken = until_set(&fleet, "broken", "InvalidSpec", |s| {
        condition_is(s, condition::STALLED, ConditionStatus::True, "InvalidSpec")
    })
    .await?;
    let ready = broken
        .status
        .as_ref()
        .and_then(|s| s.conditions.get_condition(condition::READY))
        .expect("a Ready condition");
    assert_eq!(ready.status, ConditionStatus::False);
    assert!(
        ready.message.contains("spec.valuesTemplate") && ready.message.contains("rollout/broken"),
        "{}",
        ready.message
    );
    assert!(children(&fleet, "broken").await?.is_empty());

    // 2. The canary first, then the gate, then the rest.
    fleet.apply(&web_set("Hello from"))?;
    let mut ready_a = fleet
        .wait_ready(&[(NS, "web-workload-a")], TIMEOUT, |_| {})
        .await?;
    let child_a = ready_a.remove(0);
    let rev1 = revision_of(&child_a);
    let waiting = until_set(&fleet, "web", "awaiting approval", |s| {
        condition_is(
            s,
            "RolloutPaused",
            ConditionStatus::True,
            "AwaitingApproval",
        )
    })
    .await?;
    let status = waiting.status.clone().unwrap_or_default();
    assert_eq!(
        status.update_revision.as_ref().map(|r| r.to_string()),
        Some(rev1.clone())
    );
    assert_eq!(status.current_wave.as_deref(), Some("canary"));
    assert_eq!(
        (status.summary.desired, status.summary.updated),
        (2, 1),
        "{status:?}"
    );
    assert_eq!(deployed_message(&a)?, "Hello from eu");
    // The templated valuesFrom name: each cluster's own ConfigMap.
    let values: serde_json::Value = serde_json::from_str(&helm_in(
        &a,
        &["get", "values", "web", "-n", "web", "-o", "json"],
    )?)?;
    assert_eq!(values["zone"], "eu-1", "{values}");
    assert_eq!(
        child_a.spec.values_from.first().map(|v| v.name.as_str()),
        Some("web-values-workload-a")
    );
    assert_eq!(
        children(&fleet, "web").await?.len(),
        1,
        "the second wave waits for the gate"
    );
    assert!(helm_in(&b, &["list", "-n", "web", "-q"])?.trim().is_empty());
    approve(&fleet, &rev1)?;
    fleet
        .wait_ready(&[(NS, "web-workload-b")], TIMEOUT, |_| {})
        .await?;
    let done = until_set(&fleet, "web", "Ready", |s| {
        condition_is(
            s,
            condition::READY,
            ConditionStatus::True,
            "RolloutComplete",
        )
    })
    .await?;
    let status = done.status.clone().unwrap_or_default();
    assert_eq!(
        status.current_revision.as_ref().map(|r| r.to_string()),
        Some(rev1.clone())
    );
    assert_eq!(status.summary.ready, 2, "{status:?}");
    assert_eq!(deployed_message(&b)?, "Hello from us");
    // The revision history: one ControllerRevision.
    let revisions = controller_revisions(&fleet)?;
    assert_eq!(
        revisions.trim(),
        format!("controllerrevision.apps/web-{rev1}")
    );
    // A hand edit of a child's spec is put back.
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "helmrelease",
            "web-workload-a",
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            r#"{"spec":{"interval":"7m"}}"#,
        ],
        None,
    )?;
    let releases: Api<HelmRelease> = Api::namespaced(fleet.mgmt.client().await?, NS);
    wait::until("the hand edit put back", TIMEOUT, || async {
        let hr = releases.get("web-workload-a").await?;
        Ok((hr.spec.interval.get() == Duration::from_secs(600)).then_some(()))
    })
    .await?;

    // 3. Paused: a new revision promotes nothing.
    // (With the CLI, as a user does.)
    let printed = fleet.flotilla(&["rollout", "pause", "web", "-n", NS])?;
    assert!(printed.contains("✔ rollout paused"), "{printed}");
    fleet.apply(&web_set("Hi from").replace(
        "    strategy: Progressive\n",
        "    strategy: Progressive\n    paused: true\n",
    ))?;
    let paused = until_set(&fleet, "web", "paused at a new revision", |s| {
        condition_is(s, "RolloutPaused", ConditionStatus::True, "RolloutPaused")
            && s.status
                .as_ref()
                .and_then(|st| st.update_revision.as_ref())
                .is_some_and(|r| r.as_str() != rev1)
    })
    .await?;
    let rev2 = paused
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone())
        .expect("an update revision")
        .to_string();
    tokio::time::sleep(Duration::from_secs(3)).await;
    for child in children(&fleet, "web").await? {
        assert_eq!(
            revision_of(&child),
            rev1,
            "{} promoted while paused",
            child.name_any()
        );
    }
    // Resumed: the canary gets it, the gate holds the rest.
    fleet.flotilla(&["rollout", "resume", "web", "-n", NS])?;
    until_set(
        &fleet,
        "web",
        "awaiting approval of the new revision",
        |s| {
            condition_is(
                s,
                "RolloutPaused",
                ConditionStatus::True,
                "AwaitingApproval",
            ) && s
                .status
                .as_ref()
                .and_then(|st| st.update_revision.as_ref())
                .is_some_and(|r| r.as_str() == rev2)
        },
    )
    .await?;
    assert_eq!(deployed_message(&a)?, "Hi from eu");
    assert_eq!(
        deployed_message(&b)?,
        "Hello from us",
        "the gate holds wave main"
    );
    let status = fleet.flotilla(&["rollout", "status", "web", "-n", NS])?;
    assert!(
        status.contains(&format!(
            "Waiting for: approval of revision {rev2} at wave canary (flotilla rollout approve web -n {NS})"
        )),
        "{status}"
    );
    let listed = fleet.flotilla(&["get", "hrs", "-n", NS])?;
    assert!(
        listed
            .lines()
            .any(|l| l.starts_with("web") && l.contains(&rev2) && l.contains("1/2")),
        "{listed}"
    );
    let kids = fleet.flotilla(&["get", "hr", "-n", NS, "-l", &format!("{SET_LABEL}=web")])?;
    assert!(
        kids.contains("web-workload-a") && kids.contains("web-workload-b"),
        "{kids}"
    );
    let printed = fleet.flotilla(&["rollout", "approve", "web", "-n", NS])?;
    assert!(printed.contains("✔ wave canary approved"), "{printed}");
    // The hub killed (SIGKILL) right after the approval resumes where it was: no cluster is
    // upgraded twice (Helm history counted below).
    let pid = fleet.hub_pid().expect("the hub runs");
    std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()?;
    fleet.stop_hub();
    fleet.start_hub().await?;
    until_set(&fleet, "web", "Ready at the new revision", |s| {
        condition_is(
            s,
            condition::READY,
            ConditionStatus::True,
            "RolloutComplete",
        ) && s
            .status
            .as_ref()
            .and_then(|st| st.current_revision.as_ref())
            .is_some_and(|r| r.as_str() == rev2)
    })
    .await?;
    assert_eq!(deployed_message(&b)?, "Hi from us");
    // One upgrade each: no cluster was upgraded twice for one revision.
    for kubeconfig in [&a, &b] {
        let h = helm_history(kubeconfig, "web", "web")?;
        assert_eq!(h.len(), 2, "{h:?}");
    }

    // 4. A change whose Helm test fails stops at the canary (Pause): wave main untouched.
    let failing = web_set_with(
        "Hi from",
        "      values:\n        tests:\n          podLabels:\n            flotilla.dev/test-outcome: fail\n",
    );
    fleet.apply(&failing)?;
    let breached = until_set(&fleet, "web", "stopped by the failed canary", |s| {
        condition_is(
            s,
            "RolloutPaused",
            ConditionStatus::True,
            "MaxFailuresExceeded",
        )
    })
    .await?;
    let rev3 = breached
        .status
        .as_ref()
        .and_then(|s| s.update_revision.clone())
        .expect("an update revision")
        .to_string();
    assert_ne!(rev3, rev2);
    assert!(condition_is(
        &breached,
        condition::STALLED,
        ConditionStatus::True,
        "MaxFailuresExceeded"
    ));
    let failed = breached.status.clone().unwrap_or_default().failed_clusters;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].cluster, "workload-a");
    assert_eq!(
        helm_history(&b, "web", "web")?.len(),
        2,
        "wave main untouched"
    );
    assert_eq!(deployed_message(&b)?, "Hi from us");
    // AbortAndRollback: the canary goes back to the current revision.
    merge_patch_set(
        &fleet,
        r#"{"spec":{"rollout":{"onFailure":"AbortAndRollback"}}}"#,
    )?;
    let aborted = until_set(&fleet, "web", "rolled back", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.aborted_revision
                .as_ref()
                .is_some_and(|r| r.as_str() == rev3)
        }) && condition_is(
            s,
            "RolloutDegraded",
            ConditionStatus::True,
            "RolloutAborted",
        )
    })
    .await?;
    assert_eq!(
        aborted
            .status
            .as_ref()
            .and_then(|s| s.current_revision.as_ref())
            .map(|r| r.to_string()),
        Some(rev2.clone())
    );
    until_child_at(&fleet, "web-workload-a", &rev2).await?;
    fleet
        .wait_ready(&[(NS, "web-workload-a")], TIMEOUT, |_| {})
        .await?;
    let values = helm_in(&a, &["get", "values", "web", "-n", "web", "-o", "json"])?;
    assert!(!values.contains("test-outcome"), "{values}");
    assert_eq!(
        helm_history(&b, "web", "web")?.len(),
        2,
        "wave main still untouched"
    );
    // Back to a good spec (rev2's template): a rollout that completes at once.
    fleet.apply(&web_set("Hi from"))?;
    until_set(&fleet, "web", "Ready again", |s| {
        condition_is(
            s,
            condition::READY,
            ConditionStatus::True,
            "RolloutComplete",
        )
    })
    .await?;

    // 5. A cluster that stops matching: its child deleted, its release uninstalled.
    kubectl_in(
        fleet.kubeconfig(),
        &["label", "managedcluster", "workload-b", "ring-"],
        None,
    )?;
    wait::until("the child of workload-b gone", TIMEOUT, || async {
        let left = children(&fleet, "web").await?;
        Ok((!left.iter().any(|c| c.name_any() == "web-workload-b")).then_some(()))
    })
    .await?;
    wait::until(
        "the release uninstalled from workload-b",
        TIMEOUT,
        || async {
            Ok(helm_in(&b, &["list", "-n", "web", "-q"])?
                .trim()
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    assert_eq!(deployed_message(&a)?, "Hi from eu");
    let after = until_set(&fleet, "web", "one cluster left", |s| {
        s.status.as_ref().is_some_and(|st| st.summary.desired == 1)
    })
    .await?;
    assert!(condition_is(
        &after,
        condition::READY,
        ConditionStatus::True,
        "RolloutComplete"
    ));

    // 6. A cluster added to the selector mid-rollout gets its wave's revision: with a new
    // revision waiting at the canary's gate, a cluster joining wave main (not open for it)
    // gets the current revision; withdrawn before approval, the canary goes back.
    fleet.apply(&web_set("Hey from"))?;
    let held = until_set(&fleet, "web", "a new revision at the canary's gate", |s| {
        condition_is(
            s,
            "RolloutPaused",
            ConditionStatus::True,
            "AwaitingApproval",
        ) && s
            .status
            .as_ref()
            .and_then(|st| st.update_revision.as_ref())
            .is_some_and(|r| r.as_str() != rev2)
    })
    .await?;
    let rev_held = held
        .status
        .and_then(|s| s.update_revision)
        .expect("an update revision")
        .to_string();
    until_child_at(&fleet, "web-workload-a", &rev_held).await?;
    label(&fleet, "workload-b", "ring=main")?;
    let back = fleet
        .wait_ready(&[(NS, "web-workload-b")], TIMEOUT, |_| {})
        .await?;
    assert_eq!(
        revision_of(&back[0]),
        rev2,
        "wave main is at the current revision"
    );
    assert_eq!(deployed_message(&b)?, "Hi from us");
    fleet
        .wait_ready(&[(NS, "web-workload-a")], TIMEOUT, |_| {})
        .await?;
    assert_eq!(deployed_message(&a)?, "Hey from eu");
    fleet.apply(&web_set("Hi from"))?;
    until_child_at(&fleet, "web-workload-a", &rev2).await?;
    until_set(&fleet, "web", "Ready at the current revision again", |s| {
        condition_is(
            s,
            condition::READY,
            ConditionStatus::True,
            "RolloutComplete",
        ) && s.status.as_ref().is_some_and(|st| st.summary.desired == 2)
    })
    .await?;
    fleet
        .wait_ready(&[(NS, "web-workload-a")], TIMEOUT, |_| {})
        .await?;
    assert_eq!(deployed_message(&a)?, "Hi from eu");
    assert_eq!(revision_of(&releases.get("web-workload-b").await?), rev2);

    // 7. Orphan: a cluster that stops matching keeps its release and its HelmRelease, which
    // is no longer the set's.
    merge_patch_set(&fleet, r#"{"spec":{"stopMatchingPolicy":"Orphan"}}"#)?;
    label(&fleet, "workload-b", "ring-")?;
    wait::until("the child of workload-b orphaned", TIMEOUT, || async {
        let left = children(&fleet, "web").await?;
        Ok((!left.iter().any(|c| c.name_any() == "web-workload-b")).then_some(()))
    })
    .await?;
    let orphan = releases.get("web-workload-b").await?;
    assert!(orphan.owner_references().is_empty(), "{orphan:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(helm_in(&b, &["list", "-n", "web", "-q"])?.trim(), "web");
    assert_eq!(
        helm_history(&b, "web", "web")?.len(),
        1,
        "the orphan is left alone"
    );

    // 8. A ManagedCluster deleted: its child (adopted again when the label came back) is
    // dropped without an uninstall, and the rollout does not count it.
    label(&fleet, "workload-b", "ring=main")?;
    wait::until("the orphan adopted again", TIMEOUT, || async {
        let kids = children(&fleet, "web").await?;
        Ok(kids
            .iter()
            .any(|c| c.name_any() == "web-workload-b" && !c.owner_references().is_empty())
            .then_some(()))
    })
    .await?;
    kubectl_in(
        fleet.kubeconfig(),
        &["delete", "managedcluster", "workload-b", "--wait=false"],
        None,
    )?;
    wait::until("the child of the deleted cluster gone", TIMEOUT, || async {
        Ok(releases
            .get_opt("web-workload-b")
            .await?
            .is_none()
            .then_some(()))
    })
    .await?;
    assert_eq!(
        helm_in(&b, &["list", "-n", "web", "-q"])?.trim(),
        "web",
        "a deleted cluster's release is not uninstalled"
    );
    let after = until_set(&fleet, "web", "Ready without the deleted cluster", |s| {
        s.status.as_ref().is_some_and(|st| st.summary.desired == 1)
            && condition_is(
                s,
                condition::READY,
                ConditionStatus::True,
                "RolloutComplete",
            )
    })
    .await?;
    assert_eq!(after.status.unwrap_or_default().summary.failed, 0);

    // 9. `flotilla rollout abort`: a failing change stopped by Pause is aborted by hand, and
    // the canary goes back to the current revision.
    merge_patch_set(&fleet, r#"{"spec":{"rollout":{"onFailure":"Pause"}}}"#)?;
    fleet.apply(&web_set_with(
        "Bye from",
        "      values:\n        tests:\n          podLabels:\n            flotilla.dev/test-outcome: fail\n",
    ))?;
    let stopped = until_set(&fleet, "web", "stopped by the failed canary again", |s| {
        condition_is(
            s,
            "RolloutPaused",
            ConditionStatus::True,
            "MaxFailuresExceeded",
        ) && s
            .status
            .as_ref()
            .and_then(|st| st.update_revision.as_ref())
            .is_some_and(|r| r.as_str() != rev3 && r.as_str() != rev2)
    })
    .await?;
    let rev4 = stopped
        .status
        .and_then(|s| s.update_revision)
        .expect("an update revision")
        .to_string();
    let printed = fleet.flotilla(&["rollout", "abort", "web", "-n", NS])?;
    assert!(printed.contains("✔ rollout aborted"), "{printed}");
    until_set(&fleet, "web", "aborted by hand", |s| {
        s.status.as_ref().is_some_and(|st| {
            st.aborted_revision
                .as_ref()
                .is_some_and(|r| r.as_str() == rev4)
        }) && condition_is(
            s,
            "RolloutDegraded",
            ConditionStatus::True,
            "RolloutAborted",
        )
    })
    .await?;
    until_child_at(&fleet, "web-workload-a", &rev2).await?;
    fleet
        .wait_ready(&[(NS, "web-workload-a")], TIMEOUT, |_| {})
        .await?;
    assert_eq!(deployed_message(&a)?, "Hi from eu");

    // The revision history: the current and update revisions, and one more
    // (`revisionHistoryLimit: 1`: the newest of the others, the withdrawn one of step 6);
    // the older ones trimmed.
    let revisions = controller_revisions(&fleet)?;
    let mut names: Vec<&str> = revisions.lines().collect();
    names.sort();
    let mut want: Vec<String> = [&rev2, &rev_held, &rev4]
        .iter()
        .map(|r| format!("controllerrevision.apps/web-{r}"))
        .collect();
    want.sort();
    assert_eq!(names, want);

    // The Events on the sets: each wave started and completed, the pauses, the aborts, the
    // completed rollouts, the refused spec.
    let events = kubectl_in(
        fleet.kubeconfig(),
        &[
            "get",
            "events",
            "-n",
            NS,
            "--field-selector",
            "involvedObject.kind=HelmReleaseSet",
            "-o",
            "jsonpath={range .items[*]}{.reason}{\"\\n\"}{end}",
        ],
        None,
    )?;
    for reason in [
        "InvalidSpec",
        "WaveStarted",
        "WaveCompleted",
        "RolloutPaused",
        "RolloutAborted",
        "RolloutCompleted",
    ] {
        assert!(
            events.lines().any(|l| l == reason),
            "no {reason} Event: {events}"
        );
    }
    // Every condition and Event of the hub and the workload clusters is a sentence.
    fleet.scan_messages().await?;
    Ok(())
}

/// `kubectl label --overwrite managedcluster NAME CHANGE`.
fn label(fleet: &Fleet, cluster: &str, change: &str) -> anyhow::Result<()> {
    kubectl_in(
        fleet.kubeconfig(),
        &["label", "--overwrite", "managedcluster", cluster, change],
        None,
    )?;
    Ok(())
}

/// `kubectl get controllerrevisions -l helm.flotilla.dev/set=web -o name`.
fn controller_revisions(fleet: &Fleet) -> anyhow::Result<String> {
    let selector = format!("{SET_LABEL}=web");
    let args = [
        "get",
        "controllerrevisions",
        "-n",
        NS,
        "-l",
        &selector,
        "-o",
        "name",
    ];
    kubectl_in(fleet.kubeconfig(), &args, None)
}

/// Waits until child `name` of set `web` carries revision `rev`.
async fn until_child_at(fleet: &Fleet, name: &str, rev: &str) -> anyhow::Result<()> {
    wait::until(&format!("{name} at revision {rev}"), TIMEOUT, || async {
        let kids = children(fleet, "web").await?;
        let at = kids
            .iter()
            .any(|c| c.name_any() == name && revision_of(c) == rev);
        Ok(at.then_some(()))
    })
    .await
}
