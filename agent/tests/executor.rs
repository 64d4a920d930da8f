//! The executor primitives against real local clusters: apply, readiness, hooks, deletion,
//! ownership and impersonation. Each test starts its own cluster.

use std::time::Duration;

use flotilla_agent::kube::apply::{ApplyError, ApplyOptions, HelmReleaseRef, ReleaseRef};
use flotilla_agent::kube::delete::{DeleteOptions, Propagation};
use flotilla_agent::kube::hook::{HookOptions, HookPhase};
use flotilla_agent::kube::impersonate::service_account_client;
use flotilla_agent::kube::manifest::parse_manifest;
use flotilla_agent::kube::wait::{WaitError, WaitOptions};
use flotilla_agent::kube::{
    ClusterApi, FIELD_MANAGER, MANAGED_BY_LABEL, ORIGIN_FIELD_MANAGER, OWNER_NAME_LABEL,
    RELEASE_NAME_ANNOTATION, Resource, error_chain,
};
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};

const WAIT: Duration = Duration::from_secs(60);

fn options() -> ApplyOptions {
    ApplyOptions::new(ReleaseRef {
        name: "web".to_owned(),
        namespace: "default".to_owned(),
    })
    .owned_by(HelmReleaseRef {
        name: "web".to_owned(),
        namespace: "flux-system".to_owned(),
    })
}

async fn start(name: &str) -> anyhow::Result<(Cluster, ClusterApi)> {
    let cluster = Cluster::start(ClusterOptions::named(name)).await?;
    let api = ClusterApi::new(cluster.client().await?);
    Ok((cluster, api))
}

fn deployment(name: &str, replicas: u32, pod_labels: &str) -> String {
    format!(
        "apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app: {name}
  template:
    metadata:
      labels:
        app: {name}
{pod_labels}
    spec:
      containers:
      - name: app
        image: example.com/app:1
"
    )
}

async fn resolved(api: &ClusterApi, manifest: &str) -> anyhow::Result<Vec<Resource>> {
    let objects = parse_manifest(manifest)?;
    Ok(api.resolve_all(&objects, "default").await?)
}

#[tokio::test]
async fn a_multi_document_manifest_is_applied_in_install_order_and_becomes_ready()
-> anyhow::Result<()> {
    let (_cluster, api) = start("apply-ready").await?;
    let manifest = format!(
        "---
# Source: web/templates/deployment.yaml
{}---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: web
spec:
  selector:
    app: web
  ports:
  - port: 80
---
# Source: web/templates/config.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: web
data:
  greeting: hello
",
        deployment("web", 2, "")
    );
    let objects = parse_manifest(&manifest)?;
    let report = api.apply(&objects, &options()).await?;
    let order: Vec<String> = report
        .applied
        .iter()
        .map(|r| r.object_ref().to_string())
        .collect();
    assert_eq!(
        order,
        [
            "ConfigMap default/web",
            "Service default/web",
            "Deployment default/web"
        ]
    );
    assert_eq!(report.created.len(), 3);
    api.wait_ready(&report.applied, &WaitOptions::new(WAIT))
        .await?;
    let deployments: Api<Deployment> = Api::namespaced(api.client().clone(), "default");
    let status = deployments.get("web").await?.status.unwrap_or_default();
    assert_eq!(
        status.available_replicas,
        Some(2),
        "the wait ended once both replicas were up"
    );

    let cm: Api<ConfigMap> = Api::namespaced(api.client().clone(), "default");
    let live = cm.get("web").await?;
    let labels = live.metadata.labels.unwrap_or_default();
    let annotations = live.metadata.annotations.unwrap_or_default();
    assert_eq!(
        labels.get(MANAGED_BY_LABEL).map(String::as_str),
        Some("Helm")
    );
    assert_eq!(
        labels.get(OWNER_NAME_LABEL).map(String::as_str),
        Some("web")
    );
    assert_eq!(
        annotations.get(RELEASE_NAME_ANNOTATION).map(String::as_str),
        Some("web")
    );

    let again = api.apply(&objects, &options()).await?;
    assert_eq!((again.created.len(), again.updated.len()), (0, 3));
    Ok(())
}

#[tokio::test]
async fn a_never_ready_deployment_times_out_with_a_message_naming_it() -> anyhow::Result<()> {
    let (_cluster, api) = start("never-ready").await?;
    let manifest = deployment("stuck", 1, "        flotilla.dev/never-ready: \"true\"");
    let report = api.apply(&parse_manifest(&manifest)?, &options()).await?;
    // Let the controllers create the pod first, so the reason below is stable.
    let deployments: Api<Deployment> = Api::namespaced(api.client().clone(), "default");
    wait::until("the pod of the Deployment", WAIT, || async {
        let status = deployments.get("stuck").await?.status.unwrap_or_default();
        Ok((status.updated_replicas == Some(1)).then_some(()))
    })
    .await?;
    let options = WaitOptions::new(Duration::from_secs(3));
    let err = api.wait_ready(&report.applied, &options).await.unwrap_err();
    assert!(matches!(err, WaitError::Timeout(_)), "{err}");
    assert_eq!(
        err.to_string(),
        "timeout waiting for: [Deployment/default/stuck status: 'InProgress']"
    );
    Ok(())
}

const FAILING_JOB_HOOK: &str = "---
# Source: web/templates/hook.yaml
apiVersion: batch/v1
kind: Job
metadata:
  name: migrate
  annotations:
    helm.sh/hook: pre-install
    helm.sh/hook-delete-policy: before-hook-creation,hook-succeeded
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        flotilla.dev/test-outcome: fail
    spec:
      restartPolicy: Never
      containers:
      - name: migrate
        image: example.com/migrate:1
";

#[tokio::test]
async fn a_failing_job_hook_reports_failed_with_the_container_reason() -> anyhow::Result<()> {
    let (_cluster, api) = start("job-hook").await?;
    let hook = resolved(&api, FAILING_JOB_HOOK).await?.remove(0);
    let run = api.run_hook(&hook, &HookOptions::new(WAIT)).await?;
    assert_eq!(run.phase, HookPhase::Failed);
    let failure = run.failure.unwrap_or_default();
    assert!(failure.contains("BackoffLimitExceeded"), "{failure}");
    assert!(
        failure.contains("container \"migrate\" terminated: Error (exit code 1)"),
        "{failure}"
    );
    assert!(run.completed_at.is_some_and(|c| c >= run.started_at));
    assert!(
        !run.deleted,
        "hook-failed was not asked for, so the Job stays"
    );
    assert!(api.get(&hook).await?.is_some());
    // The Job's pods' logs are asked of the API server (found by the Job's uid); kwok serves
    // none for a pod without a Logs object, which the block says in Helm's words.
    let logs = run.logs.unwrap_or_default();
    assert!(
        logs.starts_with("POD LOGS: migrate-")
            && logs.contains("\nunable to get pod logs for migrate-")
            && logs.contains("no logs found"),
        "{logs}"
    );
    Ok(())
}

#[tokio::test]
async fn a_succeeding_pod_hook_is_recreated_and_then_deleted_by_its_policies() -> anyhow::Result<()>
{
    let (_cluster, api) = start("pod-hook").await?;
    let hook = resolved(
        &api,
        "apiVersion: v1
kind: Pod
metadata:
  name: smoke
  annotations:
    helm.sh/hook: test
spec:
  restartPolicy: Never
  containers:
  - name: smoke
    image: example.com/smoke:1
",
    )
    .await?
    .remove(0);
    // The default policy (before-hook-creation) keeps the pod after it succeeded ...
    let first = api.run_hook(&hook, &HookOptions::new(WAIT)).await?;
    assert_eq!((first.phase, first.deleted), (HookPhase::Succeeded, false));
    assert_eq!(first.logs, None, "only a failed hook's log is read");
    assert!(api.get(&hook).await?.is_some());
    // ... and a second run replaces it, then hook-succeeded removes it.
    let mut options = HookOptions::new(WAIT);
    options.delete_policies = Some(vec![
        flotilla_agent::kube::HookDeletePolicy::BeforeHookCreation,
        flotilla_agent::kube::HookDeletePolicy::HookSucceeded,
    ]);
    let second = api.run_hook(&hook, &options).await?;
    assert_eq!((second.phase, second.deleted), (HookPhase::Succeeded, true));
    api.wait_deleted(std::slice::from_ref(&hook), WAIT).await?;
    Ok(())
}

#[tokio::test]
async fn a_failing_pod_hook_reports_the_container_reason_and_is_deleted_on_hook_failed()
-> anyhow::Result<()> {
    let (cluster, api) = start("pod-hook-fail").await?;
    cluster
        .serve_pod_log(
            "default",
            "check",
            "GET /healthz\n503 Service Unavailable\n",
        )
        .await?;
    let hook = resolved(
        &api,
        "apiVersion: v1
kind: Pod
metadata:
  name: check
  labels:
    flotilla.dev/test-outcome: fail
  annotations:
    helm.sh/hook: post-install
    helm.sh/hook-delete-policy: hook-failed
spec:
  restartPolicy: Never
  containers:
  - name: check
    image: example.com/check:1
",
    )
    .await?
    .remove(0);
    let run = api.run_hook(&hook, &HookOptions::new(WAIT)).await?;
    assert_eq!(run.phase, HookPhase::Failed);
    assert_eq!(
        run.failure.as_deref(),
        Some("container \"check\" terminated: Error (exit code 1): flotilla.dev/test-outcome=fail")
    );
    assert!(run.deleted);
    // Its log was read before hook-failed deleted it, in Helm's form.
    assert_eq!(
        run.logs.as_deref(),
        Some("POD LOGS: check\nGET /healthz\n503 Service Unavailable")
    );
    Ok(())
}

#[tokio::test]
async fn a_crd_and_its_custom_resource_apply_in_one_manifest_and_the_kind_is_unknown_once_the_crd_is_gone()
-> anyhow::Result<()> {
    let (_cluster, api) = start("crd").await?;
    let manifest = "---
# Source: widgets/templates/widget.yaml
apiVersion: example.flotilla.dev/v1
kind: Widget
metadata:
  name: first
spec:
  size: 3
---
# Source: widgets/templates/crd.yaml
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.flotilla.dev
spec:
  group: example.flotilla.dev
  scope: Namespaced
  names:
    plural: widgets
    singular: widget
    kind: Widget
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
";
    let report = api.apply(&parse_manifest(manifest)?, &options()).await?;
    let applied: Vec<String> = report
        .applied
        .iter()
        .map(|r| r.object_ref().to_string())
        .collect();
    assert_eq!(
        applied,
        [
            "CustomResourceDefinition widgets.example.flotilla.dev",
            "Widget default/first"
        ]
    );
    assert!(!report.applied[0].namespaced);
    assert_eq!(
        report.applied[1].object.data["spec"]["size"],
        serde_json::json!(3)
    );
    api.wait_ready(&report.applied, &WaitOptions::new(WAIT))
        .await?;

    let objects = parse_manifest(manifest)?;
    let crd_only = DeleteOptions {
        wait: Some(WAIT),
        ..DeleteOptions::default()
    };
    // Deleted by someone else (another cluster client with its own caches): the kind is
    // still in this client's discovery cache; the apply finds out it is gone. (Deleting it
    // through `api` itself would have emptied the cache.)
    ClusterApi::new(api.client().clone())
        .delete(&objects[1..], "default", &crd_only)
        .await?;
    let failure = api.apply(&objects[..1], &options()).await.unwrap_err();
    assert_eq!(failure.error.kind(), "unknown_kind");
    assert!(
        failure
            .to_string()
            .starts_with("Widget default/first: resource mapping not found for name: \"first\""),
        "{failure}"
    );
    Ok(())
}

#[tokio::test]
async fn an_object_the_api_server_rejects_gives_an_error_naming_it() -> anyhow::Result<()> {
    let (_cluster, api) = start("rejected").await?;
    let manifest = "---
# Source: web/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: bad
spec:
  ports:
  - port: 99999
";
    let failure = api
        .apply(&parse_manifest(manifest)?, &options())
        .await
        .unwrap_err();
    assert!(matches!(failure.error, ApplyError::Apply { .. }));
    assert!(!failure.error.is_transient());
    let message = error_chain(&failure);
    assert!(
        message
            .starts_with("Service default/bad (from web/templates/service.yaml): apply failed: "),
        "{message}"
    );
    assert!(message.contains("Invalid value: 99999"), "{message}");
    Ok(())
}

#[tokio::test]
async fn an_unknown_kind_is_refused_in_helms_words_before_anything_is_written() -> anyhow::Result<()>
{
    let (_cluster, api) = start("unknown-kind").await?;
    let manifest = "---
# Source: x/templates/foo.yaml
apiVersion: bar/v1
kind: Foo
metadata:
  name: x
";
    let failure = api
        .apply(&parse_manifest(manifest)?, &options())
        .await
        .unwrap_err();
    assert_eq!(
        failure.to_string(),
        "Foo x: resource mapping not found for name: \"x\" namespace: \"\" from \"x/templates/foo.yaml\": no matches for kind \"Foo\" in version \"bar/v1\"; ensure CRDs are installed first"
    );
    Ok(())
}

#[tokio::test]
async fn an_existing_object_without_release_metadata_is_taken_over_only_when_allowed()
-> anyhow::Result<()> {
    let (_cluster, api) = start("take-ownership").await?;
    let cms: Api<ConfigMap> = Api::namespaced(api.client().clone(), "default");
    let existing: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "shared" } }))?;
    cms.create(&PostParams::default(), &existing).await?;
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: shared\ndata:\n  a: b\n";
    let objects = parse_manifest(manifest)?;

    let failure = api.apply(&objects, &options()).await.unwrap_err();
    assert_eq!(
        failure.to_string(),
        "ConfigMap default/shared: exists and cannot be imported into the current release: \
         invalid ownership metadata; \
         label validation error: missing key \"app.kubernetes.io/managed-by\": must be set to \"Helm\"; \
         annotation validation error: missing key \"meta.helm.sh/release-name\": must be set to \"web\"; \
         annotation validation error: missing key \"meta.helm.sh/release-namespace\": must be set to \"default\""
    );
    assert!(
        cms.get("shared").await?.data.is_none(),
        "nothing was written"
    );

    let mut take = options();
    take.take_ownership = true;
    let report = api.apply(&objects, &take).await?;
    assert_eq!(report.updated.len(), 1);
    assert_eq!(
        cms.get("shared")
            .await?
            .data
            .unwrap_or_default()
            .get("a")
            .map(String::as_str),
        Some("b")
    );
    Ok(())
}

#[tokio::test]
async fn an_object_owned_by_another_helmrelease_is_refused_even_when_taking_ownership()
-> anyhow::Result<()> {
    let (_cluster, api) = start("other-owner").await?;
    let manifest = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n";
    let objects = parse_manifest(manifest)?;
    api.apply(&objects, &options()).await?;

    let mut other = options();
    other.owner = Some(HelmReleaseRef {
        name: "intruder".to_owned(),
        namespace: "team-b".to_owned(),
    });
    other.take_ownership = true;
    let failure = api.apply(&objects, &other).await.unwrap_err();
    assert_eq!(
        failure.to_string(),
        "ConfigMap default/settings: belongs to HelmRelease flux-system/web, not to HelmRelease team-b/intruder"
    );
    Ok(())
}

#[tokio::test]
async fn objects_with_the_keep_policy_survive_deletion_and_the_others_are_gone()
-> anyhow::Result<()> {
    let (_cluster, api) = start("keep").await?;
    let manifest = "---
apiVersion: v1
kind: ConfigMap
metadata:
  name: kept
  annotations:
    helm.sh/resource-policy: \" Keep \"
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: dropped
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: someone-elses
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: never-applied
";
    let objects = parse_manifest(manifest)?;
    api.apply(&objects[..2], &options()).await?;
    let cms: Api<ConfigMap> = Api::namespaced(api.client().clone(), "default");
    let foreign: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "someone-elses" } }))?;
    cms.create(&PostParams::default(), &foreign).await?;

    let report = api
        .delete(
            &objects,
            "default",
            &DeleteOptions {
                propagation: Propagation::Foreground,
                wait: Some(WAIT),
                release: Some(options().release),
                owner: options().owner,
            },
        )
        .await?;
    let names = |list: &[flotilla_agent::kube::ObjectRef]| -> Vec<String> {
        list.iter().map(ToString::to_string).collect()
    };
    assert_eq!(names(&report.kept), ["ConfigMap default/kept"]);
    assert_eq!(names(&report.deleted), ["ConfigMap default/dropped"]);
    assert_eq!(
        names(&report.not_owned),
        ["ConfigMap default/someone-elses"]
    );
    assert_eq!(
        names(&report.not_found),
        ["Deployment default/never-applied"]
    );
    assert!(cms.get_opt("kept").await?.is_some());
    assert!(cms.get_opt("someone-elses").await?.is_some());
    assert!(cms.get_opt("dropped").await?.is_none());
    Ok(())
}

#[tokio::test]
async fn a_dry_run_apply_returns_the_would_be_object_and_changes_nothing() -> anyhow::Result<()> {
    let (_cluster, api) = start("dry-run").await?;
    let resource = resolved(
        &api,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v\n",
    )
    .await?
    .remove(0);
    let would_be = api.dry_run_apply(&resource, &options()).await?;
    assert_eq!(would_be.data["data"]["k"], "v");
    assert_eq!(
        would_be
            .metadata
            .labels
            .unwrap_or_default()
            .get(MANAGED_BY_LABEL)
            .map(String::as_str),
        Some("Helm")
    );
    assert!(api.get(&resource).await?.is_none());
    Ok(())
}

#[tokio::test]
async fn an_rbac_limited_service_account_is_forbidden_from_creating_an_object() -> anyhow::Result<()>
{
    let (cluster, api) = start("impersonation").await?;
    let rbac = "---
apiVersion: v1
kind: ServiceAccount
metadata:
  name: deployer
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata:
  name: read-config
rules:
- apiGroups: [\"\"]
  resources: [configmaps]
  verbs: [get, list, watch]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: deployer-reads
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: read-config
subjects:
- kind: ServiceAccount
  name: deployer
  namespace: default
";
    api.apply(&parse_manifest(rbac)?, &options()).await?;

    let base = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(cluster.kubeconfig())?,
        &Default::default(),
    )
    .await?;
    let limited = ClusterApi::new(service_account_client(&base, "default", "deployer")?);
    let manifest = "---\n# Source: web/templates/cm.yaml\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n";
    let failure = limited
        .apply(&parse_manifest(manifest)?, &options())
        .await
        .unwrap_err();
    let message = error_chain(&failure);
    assert!(
        message.starts_with("ConfigMap default/c (from web/templates/cm.yaml): apply failed: "),
        "{message}"
    );
    assert!(message.contains("forbidden"), "{message}");
    assert!(
        message.contains("system:serviceaccount:default:deployer"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_job_ends_the_wait_early_naming_it() -> anyhow::Result<()> {
    let (_cluster, api) = start("failed-job").await?;
    let manifest = "apiVersion: batch/v1
kind: Job
metadata:
  name: seed
spec:
  backoffLimit: 0
  template:
    metadata:
      labels:
        flotilla.dev/test-outcome: fail
    spec:
      restartPolicy: Never
      containers:
      - name: seed
        image: example.com/seed:1
";
    let report = api.apply(&parse_manifest(manifest)?, &options()).await?;
    let started = std::time::Instant::now();
    let err = api
        .wait_ready(&report.applied, &WaitOptions::new(WAIT))
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < WAIT / 2,
        "the wait ended at the failure, not the timeout"
    );
    assert!(matches!(err, WaitError::Failed(_)), "{err}");
    // Flux's waiter's text; why it failed stays in the error for the logs.
    assert_eq!(
        err.to_string(),
        "failed early due to stalled resources: [Job/default/seed status: 'Failed']"
    );
    let why = &err.not_ready()[0].message;
    assert!(why.contains("BackoffLimitExceeded"), "{why}");
    Ok(())
}

#[tokio::test]
async fn fields_helm_set_client_side_and_dropped_from_the_chart_are_pruned() -> anyhow::Result<()> {
    let (_cluster, api) = start("csa-upgrade").await?;
    // As the Helm 3 CLI leaves it: created with manager "helm" (an Update operation).
    let cms: Api<ConfigMap> = Api::namespaced(api.client().clone(), "default");
    let helm_made: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": "settings",
            "labels": { "app.kubernetes.io/managed-by": "Helm" },
            "annotations": {
                "meta.helm.sh/release-name": "web",
                "meta.helm.sh/release-namespace": "default",
            },
        },
        "data": { "kept": "1", "dropped": "2" },
    }))?;
    let post = PostParams {
        field_manager: Some("helm".to_owned()),
        ..PostParams::default()
    };
    cms.create(&post, &helm_made).await?;

    let manifest =
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  kept: \"1\"\n";
    let report = api.apply(&parse_manifest(manifest)?, &options()).await?;
    assert_eq!(report.updated.len(), 1);
    let live = cms.get("settings").await?;
    let data = live.data.unwrap_or_default();
    assert_eq!(data.keys().collect::<Vec<_>>(), ["kept"]);
    let mut managers: Vec<(String, String)> = live
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .map(|e| {
            (
                e.manager.unwrap_or_default(),
                e.operation.unwrap_or_default(),
            )
        })
        .collect();
    managers.sort();
    // helm's client-side entry is gone; the owner labels are also the origin manager's.
    assert_eq!(
        managers,
        [
            (ORIGIN_FIELD_MANAGER.to_owned(), "Apply".to_owned()),
            (FIELD_MANAGER.to_owned(), "Apply".to_owned())
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_hook_that_never_finishes_fails_at_its_timeout_saying_so() -> anyhow::Result<()> {
    let (_cluster, api) = start("hook-timeout").await?;
    let hook = resolved(
        &api,
        "apiVersion: v1
kind: Pod
metadata:
  name: hang
  labels:
    flotilla.dev/never-ready: \"true\"
  annotations:
    helm.sh/hook: pre-upgrade
spec:
  containers:
  - name: hang
    image: example.com/hang:1
",
    )
    .await?
    .remove(0);
    let run = api
        .run_hook(&hook, &HookOptions::new(Duration::from_secs(3)))
        .await?;
    assert_eq!(run.phase, HookPhase::Failed);
    assert!(run.timed_out, "a hook that did not finish timed out");
    let failure = run.failure.unwrap_or_default();
    assert!(
        failure.starts_with("timed out after 3s waiting for it to finish: phase "),
        "{failure}"
    );
    Ok(())
}

#[tokio::test]
async fn statefulsets_daemonsets_replicasets_jobs_and_budgets_become_current() -> anyhow::Result<()>
{
    let (_cluster, api) = start("workloads").await?;
    let pod = |name: &str| {
        format!(
            "    metadata:
      labels:
        app: {name}
    spec:
      containers:
      - name: app
        image: example.com/{name}:1"
        )
    };
    let manifest = format!(
        "---
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 2
  selector:
    matchLabels:
      app: db
  template:
{}
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels:
      app: agent
  template:
{}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata:
  name: cache
spec:
  replicas: 2
  selector:
    matchLabels:
      app: cache
  template:
{}
---
apiVersion: batch/v1
kind: Job
metadata:
  name: once
spec:
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: once
        image: example.com/once:1
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata:
  name: db
spec:
  minAvailable: 1
  selector:
    matchLabels:
      app: db
",
        pod("db"),
        pod("agent"),
        pod("cache")
    );
    let report = api.apply(&parse_manifest(&manifest)?, &options()).await?;
    api.wait_ready(&report.applied, &WaitOptions::new(WAIT))
        .await?;
    let jobs: Api<k8s_openapi::api::batch::v1::Job> =
        Api::namespaced(api.client().clone(), "default");
    let succeeded = jobs.get("once").await?.status.and_then(|s| s.succeeded);
    assert_eq!(
        succeeded,
        Some(1),
        "with wait_for_jobs the wait ends once the Job completed"
    );
    Ok(())
}

#[tokio::test]
async fn many_objects_of_one_kind_are_applied_waited_for_and_deleted_together() -> anyhow::Result<()>
{
    let (_cluster, api) = start("many").await?;
    let manifest: String = (0..30)
        .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c{i:02}\ndata:\n  i: \"{i}\"\n"))
        .collect();
    let objects = parse_manifest(&manifest)?;
    let report = api.apply(&objects, &options()).await?;
    let names: Vec<String> = report.applied.iter().map(|r| r.name()).collect();
    let expected: Vec<String> = (0..30).map(|i| format!("c{i:02}")).collect();
    assert_eq!(names, expected, "applied in manifest order");
    // An unrelated ConfigMap in the same namespace does not disturb the shared watch.
    let cms: Api<ConfigMap> = Api::namespaced(api.client().clone(), "default");
    let other: ConfigMap =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": "other" } }))?;
    cms.create(&PostParams::default(), &other).await?;
    api.wait_ready(&report.applied, &WaitOptions::new(WAIT))
        .await?;

    let deleted = api
        .delete(
            &objects,
            "default",
            &DeleteOptions {
                wait: Some(WAIT),
                ..DeleteOptions::default()
            },
        )
        .await?;
    assert_eq!(deleted.deleted.len(), 30);
    let left: Vec<String> = cms
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .filter(|n| n != "kube-root-ca.crt")
        .collect();
    assert_eq!(left, ["other"]);
    Ok(())
}
