//! Helm compatibility of the release storage, both ways, against real local clusters and the
//! reference `helm` v4 CLI: records the agent writes are listed, shown, rolled back and
//! uninstalled by helm; records helm writes are read by the agent, which writes the next
//! revision; pruning, unlocking and unreadable records. Each test starts its own cluster.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use flotilla_agent::kube::apply::{ApplyOptions, ReleaseRef};
use flotilla_agent::kube::manifest::parse_manifest;
use flotilla_agent::kube::{ClusterApi, error_chain};
use flotilla_agent::storage::transitions::{self, INSTALL_COMPLETE, UPGRADE_COMPLETE, Unlock};
use flotilla_agent::storage::{SecretStorage, StorageError, status_of};
use flotilla_chart::release::{Hook, HookEvent, HookPhase, Info, RecordChart, Release, Status};
use flotilla_chart::time::GoTime;
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::{Cluster, ClusterOptions, tools, wait};
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ObjectMeta, PostParams};
use serde_json::{Value, json};

const NS: &str = "default";

fn hello_chart_dir() -> String {
    workspace_root()
        .join("tests/charts/hello")
        .to_str()
        .expect("the repo path is UTF-8")
        .to_owned()
}

fn helm(args: &[&str], kubeconfig: &Path) -> anyhow::Result<Output> {
    tools::run(&tools::helm()?, args, kubeconfig, None)
}

/// Runs helm and returns its stdout, failing with its output when it fails.
fn helm_ok(args: &[&str], kubeconfig: &Path) -> anyhow::Result<String> {
    tools::helm_in(kubeconfig, args)
}

fn helm_json(args: &[&str], kubeconfig: &Path) -> anyhow::Result<Value> {
    let mut args = args.to_vec();
    args.extend(["-o", "json"]);
    Ok(serde_json::from_str(&helm_ok(&args, kubeconfig)?)?)
}

/// `helm history` as (revision, status, description).
fn helm_history(name: &str, kubeconfig: &Path) -> anyhow::Result<Vec<(i64, String, String)>> {
    tools::helm_history(kubeconfig, name, "default")
}

/// Our history as (revision, status, description).
async fn our_history(
    storage: &SecretStorage,
    name: &str,
) -> anyhow::Result<Vec<(i64, String, String)>> {
    Ok(storage
        .history(name)
        .await?
        .iter()
        .map(|r| {
            (
                r.version,
                status_of(r).to_string(),
                r.info
                    .as_ref()
                    .map(|i| i.description.clone())
                    .unwrap_or_default(),
            )
        })
        .collect())
}

fn row(version: i64, status: &str, description: &str) -> (i64, String, String) {
    (version, status.to_owned(), description.to_owned())
}

/// The hello chart rendered by hand for release `name` (what `helm template` prints,
/// without the test hook).
fn hello_manifest(name: &str, replicas: u32) -> String {
    format!(
        "---
# Source: hello/templates/service.yaml
apiVersion: v1
kind: Service
metadata:
  name: {name}-hello
spec:
  selector:
    app.kubernetes.io/name: hello
    app.kubernetes.io/instance: {name}
  ports:
  - port: 80
    targetPort: 9898
---
# Source: hello/templates/deployment.yaml
apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}-hello
  labels:
    app.kubernetes.io/name: hello
    app.kubernetes.io/instance: {name}
spec:
  replicas: {replicas}
  selector:
    matchLabels:
      app.kubernetes.io/name: hello
      app.kubernetes.io/instance: {name}
  template:
    metadata:
      labels:
        app.kubernetes.io/name: hello
        app.kubernetes.io/instance: {name}
    spec:
      containers:
      - name: hello
        image: ghcr.io/stefanprodan/podinfo:6.5.0
        ports:
        - containerPort: 9898
"
    )
}

fn hello_test_hook(name: &str) -> Hook {
    Hook {
        name: format!("{name}-hello-test"),
        kind: "Pod".to_owned(),
        path: "hello/templates/test-connection.yaml".to_owned(),
        manifest: format!(
            "apiVersion: v1
kind: Pod
metadata:
  name: {name}-hello-test
  annotations:
    helm.sh/hook: test
    helm.sh/hook-delete-policy: before-hook-creation
spec:
  restartPolicy: Never
  containers:
  - name: curl
    image: curlimages/curl:8.5.0
    command: [\"curl\", \"-sf\", \"http://{name}-hello\"]"
        ),
        events: vec![HookEvent::Test],
        delete_policies: vec![flotilla_chart::release::HookDeletePolicy::BeforeHookCreation],
        ..Hook::default()
    }
}

/// A record of the hello chart as our executor would build it, in `status`.
fn hello_release(
    name: &str,
    version: i64,
    replicas: u32,
    status: Status,
) -> anyhow::Result<Release> {
    let chart = flotilla_chart::load(Path::new(&hello_chart_dir()))?;
    let now = GoTime::now();
    let mut config = serde_json::Map::new();
    config.insert("replicaCount".to_owned(), json!(replicas));
    Ok(Release {
        name: name.to_owned(),
        namespace: NS.to_owned(),
        version,
        info: Some(Info {
            first_deployed: now,
            last_deployed: now,
            status: Some(status),
            description: "written by the agent".to_owned(),
            notes: format!("hello notes for revision {version}"),
            ..Info::default()
        }),
        chart: Some(RecordChart::from(&chart)),
        config,
        manifest: hello_manifest(name, replicas),
        hooks: vec![hello_test_hook(name)],
        apply_method: "ssa".to_owned(),
        labels: BTreeMap::from([("team".to_owned(), "payments".to_owned())]),
    })
}

async fn apply(api: &ClusterApi, rls: &Release) -> anyhow::Result<()> {
    let objects = parse_manifest(&rls.manifest)?;
    let options = ApplyOptions::new(ReleaseRef {
        name: rls.name.clone(),
        namespace: rls.namespace.clone(),
    });
    api.apply(&objects, &options).await?;
    Ok(())
}

async fn start(name: &str) -> anyhow::Result<(Cluster, ClusterApi, SecretStorage)> {
    let cluster = Cluster::start(ClusterOptions::named(name)).await?;
    let client = cluster.client().await?;
    Ok((
        cluster,
        ClusterApi::new(client.clone()),
        SecretStorage::new(client, NS),
    ))
}

async fn deployment_replicas(api: &ClusterApi, name: &str) -> anyhow::Result<Option<i32>> {
    let deployments: Api<Deployment> = Api::namespaced(api.client().clone(), NS);
    Ok(deployments
        .get_opt(name)
        .await?
        .and_then(|d| d.spec)
        .and_then(|s| s.replicas))
}

fn number(v: &Value) -> Option<f64> {
    v.as_f64()
}

#[tokio::test]
async fn helm_lists_shows_rolls_back_and_uninstalls_a_release_the_agent_stored()
-> anyhow::Result<()> {
    let (cluster, api, storage) = start("storage-ours").await?;
    let kubeconfig = cluster.kubeconfig();

    // Revision 1: install.
    let mut v1 = hello_release("web", 1, 1, Status::PendingInstall)?;
    storage.create_with_max_history(&v1, 10).await?;
    apply(&api, &v1).await?;
    storage.mark_deployed(&mut v1, INSTALL_COMPLETE).await?;
    // Revision 2: upgrade.
    let mut v2 = hello_release("web", 2, 3, Status::PendingUpgrade)?;
    storage.create_with_max_history(&v2, 10).await?;
    apply(&api, &v2).await?;
    assert_eq!(storage.mark_deployed(&mut v2, UPGRADE_COMPLETE).await?, [1]);

    let list = helm_json(&["list"], kubeconfig)?;
    let entry = &list[0];
    assert_eq!(list.as_array().map(Vec::len), Some(1), "{list}");
    assert_eq!(entry["name"], "web");
    assert_eq!(entry["namespace"], NS);
    assert_eq!(entry["revision"], "2");
    assert_eq!(entry["status"], "deployed");
    assert_eq!(entry["chart"], "hello-0.1.0");
    assert_eq!(entry["app_version"], "1.0.0");
    let selected = helm_ok(
        &["list", "--short", "--selector", "team=payments"],
        kubeconfig,
    )?;
    assert_eq!(selected.trim(), "web", "user labels are on the Secrets");

    assert_eq!(
        helm_history("web", kubeconfig)?,
        [
            row(1, "superseded", INSTALL_COMPLETE),
            row(2, "deployed", UPGRADE_COMPLETE)
        ]
    );
    let history = helm_json(&["history", "web"], kubeconfig)?;
    assert_eq!(history[1]["chart"], "hello-0.1.0");
    assert_eq!(history[1]["app_version"], "1.0.0");

    let manifest = helm_ok(&["get", "manifest", "web"], kubeconfig)?;
    assert_eq!(manifest.trim_end(), hello_manifest("web", 3).trim_end());
    let manifest_v1 = helm_ok(&["get", "manifest", "web", "--revision", "1"], kubeconfig)?;
    assert_eq!(manifest_v1.trim_end(), hello_manifest("web", 1).trim_end());

    let values = helm_json(&["get", "values", "web"], kubeconfig)?;
    assert_eq!(values, json!({"replicaCount": 3}));
    let all = helm_json(&["get", "values", "web", "--all"], kubeconfig)?;
    assert_eq!(
        all,
        json!({
            "image": "ghcr.io/stefanprodan/podinfo:6.5.0",
            "replicaCount": 3,
            "testOutcome": "pass"
        })
    );
    let notes = helm_ok(&["get", "notes", "web"], kubeconfig)?;
    assert!(notes.contains("hello notes for revision 2"), "{notes}");
    let hooks = helm_ok(&["get", "hooks", "web"], kubeconfig)?;
    assert!(hooks.contains("name: web-hello-test"), "{hooks}");
    let status = helm_ok(&["status", "web"], kubeconfig)?;
    for line in [
        "NAME: web",
        "NAMESPACE: default",
        "STATUS: deployed",
        "REVISION: 2",
        "DESCRIPTION: Upgrade complete",
    ] {
        assert!(status.contains(line), "{line:?} in {status}");
    }
    let status = helm_json(&["status", "web"], kubeconfig)?;
    assert_eq!(status["info"]["notes"], "hello notes for revision 2");
    assert_eq!(deployment_replicas(&api, "web-hello").await?, Some(3));

    // helm rolls our release back to revision 1 (server-side apply, as our records say),
    // without forcing conflicts: the agent applies with helm's field manager.
    helm_ok(&["rollback", "web", "1"], kubeconfig)?;
    assert_eq!(
        our_history(&storage, "web").await?,
        [
            row(1, "superseded", INSTALL_COMPLETE),
            row(2, "superseded", UPGRADE_COMPLETE),
            row(3, "deployed", "Rollback to 1"),
        ]
    );
    let v3 = storage.get("web", 3).await?;
    assert_eq!(v3.manifest, hello_manifest("web", 1));
    assert_eq!(v3.config.get("replicaCount").and_then(number), Some(1.0));
    assert_eq!(v3.hooks, v1.hooks);
    assert_eq!(v3.chart, v1.chart, "the chart round-trips through helm");
    assert_eq!(v3.apply_method, "ssa");
    assert_eq!(
        v3.labels,
        BTreeMap::from([("team".to_owned(), "payments".to_owned())]),
        "get filters Helm's system labels"
    );
    let v3_info = v3.info.clone().unwrap_or_default();
    assert_eq!(v3_info.notes, "hello notes for revision 1");
    assert_eq!(
        v3_info.first_deployed,
        v2.info
            .as_ref()
            .map(|i| i.first_deployed)
            .unwrap_or(GoTime::ZERO),
        "helm keeps the first deployment time (as Go's time.Time round-trips ours)"
    );
    assert_eq!(storage.last("web").await?.map(|r| r.version), Some(3));
    assert_eq!(storage.deployed("web").await?.map(|r| r.version), Some(3));
    assert_eq!(deployment_replicas(&api, "web-hello").await?, Some(1));

    helm_ok(&["uninstall", "web"], kubeconfig)?;
    assert!(storage.history("web").await?.is_empty());
    assert!(storage.last("web").await?.is_none());
    assert!(storage.list().await?.releases.is_empty());
    let deployments: Api<Deployment> = Api::namespaced(api.client().clone(), NS);
    wait::until("the Deployment to go", Duration::from_secs(30), || async {
        let d = deployments.get_opt("web-hello").await?;
        Ok(d.is_none_or(|d| d.metadata.deletion_timestamp.is_some())
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn the_agent_reads_a_release_helm_installed_and_upgraded_and_writes_its_next_revision()
-> anyhow::Result<()> {
    let (cluster, api, storage) = start("storage-helms").await?;
    let kubeconfig = cluster.kubeconfig();
    let chart = hello_chart_dir();

    helm_ok(
        &[
            "install",
            "hi",
            &chart,
            "--set",
            "replicaCount=1",
            "--wait",
            "--timeout",
            "60s",
        ],
        kubeconfig,
    )?;
    helm_ok(
        &["upgrade", "hi", &chart, "--set", "replicaCount=2"],
        kubeconfig,
    )?;
    helm_ok(&["test", "hi", "--timeout", "60s"], kubeconfig)?;

    assert_eq!(
        our_history(&storage, "hi").await?,
        [
            row(1, "superseded", INSTALL_COMPLETE),
            row(2, "deployed", UPGRADE_COMPLETE)
        ]
    );
    let last = storage.last("hi").await?.expect("helm wrote two revisions");
    assert_eq!(last.version, 2);
    assert_eq!(storage.deployed("hi").await?.map(|r| r.version), Some(2));
    assert_eq!(last.namespace, NS);
    assert_eq!(last.config.get("replicaCount").and_then(number), Some(2.0));
    assert!(
        last.manifest
            .contains("# Source: hello/templates/deployment.yaml")
    );
    assert!(last.manifest.contains("replicas: 2"), "{}", last.manifest);
    let metadata = last
        .chart
        .as_ref()
        .and_then(|c| c.metadata.clone())
        .unwrap_or_default();
    assert_eq!(
        (metadata.name.as_str(), metadata.version.as_str()),
        ("hello", "0.1.0")
    );
    assert_eq!(last.hooks.len(), 1);
    let hook = &last.hooks[0];
    assert_eq!(
        (hook.name.as_str(), hook.kind.as_str()),
        ("hi-hello-test", "Pod")
    );
    assert_eq!(hook.events, [HookEvent::Test]);
    assert_eq!(hook.last_run.phase, Some(HookPhase::Succeeded));
    assert!(!hook.last_run.started_at.is_zero() && !hook.last_run.completed_at.is_zero());
    let v1 = storage.get("hi", 1).await?;
    assert!(
        v1.labels.is_empty(),
        "system labels filtered: {:?}",
        v1.labels
    );
    assert_eq!(v1.config.get("replicaCount").and_then(number), Some(1.0));
    let queried = storage.history("hi").await?;
    assert_eq!(
        queried[0].labels.get("owner").map(String::as_str),
        Some("helm"),
        "queries keep the Secret's labels, as Helm's do"
    );

    // The agent upgrades helm's release: revision 3 supersedes 2.
    let mut next = last.clone();
    next.version = transitions::next_version(&queried);
    next.labels.clear();
    next.config.insert("replicaCount".to_owned(), json!(3));
    next.manifest = last.manifest.replace("replicas: 2", "replicas: 3");
    for hook in &mut next.hooks {
        hook.last_run = Default::default();
    }
    let now = GoTime::now();
    transitions::set_status(
        &mut next,
        Status::PendingUpgrade,
        transitions::PREPARING_UPGRADE,
    );
    if let Some(info) = next.info.as_mut() {
        info.last_deployed = now;
    }
    let base = transitions::upgrade_base("hi", &queried)?;
    assert_eq!(base.version, 2);
    storage.create_with_max_history(&next, 10).await?;
    assert!(
        helm_ok(&["upgrade", "hi", &chart], kubeconfig).is_err(),
        "helm sees our pending record as a lock"
    );
    apply(&api, &next).await?;
    assert_eq!(
        storage.mark_deployed(&mut next, UPGRADE_COMPLETE).await?,
        [2]
    );

    assert_eq!(
        helm_history("hi", kubeconfig)?,
        [
            row(1, "superseded", INSTALL_COMPLETE),
            row(2, "superseded", UPGRADE_COMPLETE),
            row(3, "deployed", UPGRADE_COMPLETE),
        ]
    );
    assert_eq!(
        helm_json(&["get", "values", "hi"], kubeconfig)?,
        json!({"replicaCount": 3})
    );
    let list = helm_json(&["list"], kubeconfig)?;
    assert_eq!(list[0]["revision"], "3");
    assert_eq!(deployment_replicas(&api, "hi-hello").await?, Some(3));

    // And helm carries on from our revision.
    helm_ok(&["upgrade", "hi", &chart, "--reuse-values"], kubeconfig)?;
    assert_eq!(
        our_history(&storage, "hi").await?[2..],
        [
            row(3, "superseded", UPGRADE_COMPLETE),
            row(4, "deployed", UPGRADE_COMPLETE),
        ]
    );
    let v4 = storage.get("hi", 4).await?;
    assert_eq!(v4.config.get("replicaCount").and_then(number), Some(3.0));
    Ok(())
}

/// Writes revisions 1.. of `name` with the given statuses (no objects applied).
async fn seed(storage: &SecretStorage, name: &str, statuses: &[Status]) -> anyhow::Result<()> {
    for (status, version) in statuses.iter().zip(1..) {
        storage
            .create(&hello_release(name, version, 1, status.clone())?)
            .await?;
    }
    Ok(())
}

#[tokio::test]
async fn pruning_with_max_history_leaves_the_revisions_helm_leaves() -> anyhow::Result<()> {
    let (cluster, _api, storage) = start("storage-prune").await?;
    let kubeconfig = cluster.kubeconfig();
    let statuses = [
        Status::Superseded,
        Status::Deployed,
        Status::Failed,
        Status::Failed,
        Status::Failed,
    ];
    seed(&storage, "theirs", &statuses).await?;
    seed(&storage, "ours", &statuses).await?;

    helm_ok(
        &[
            "upgrade",
            "theirs",
            &hello_chart_dir(),
            "--history-max",
            "3",
        ],
        kubeconfig,
    )?;
    let pruned = storage
        .create_with_max_history(&hello_release("ours", 6, 1, Status::PendingUpgrade)?, 3)
        .await?;
    assert_eq!(pruned, [1, 3, 4], "the deployed revision 2 is kept");

    let versions = |h: Vec<(i64, String, String)>| h.into_iter().map(|r| r.0).collect::<Vec<_>>();
    let theirs = versions(our_history(&storage, "theirs").await?);
    let ours = versions(our_history(&storage, "ours").await?);
    assert_eq!(theirs, [2, 5, 6]);
    assert_eq!(ours, theirs);
    assert_eq!(versions(helm_history("ours", kubeconfig)?), [2, 5, 6]);

    // maxHistory 1 keeps only the deployed record before the new one.
    storage
        .create_with_max_history(&hello_release("ours", 7, 1, Status::PendingUpgrade)?, 1)
        .await?;
    assert_eq!(versions(our_history(&storage, "ours").await?), [2, 7]);

    // A revision another writer already took, and records that are not there.
    let seventh = hello_release("ours", 7, 1, Status::PendingUpgrade)?;
    let err = storage.create(&seventh).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Secret default/sh.helm.release.v1.ours.v7: already exists"
    );
    assert!(
        err.is_transient(),
        "re-reading the history picks the next revision"
    );
    let missing = hello_release("ours", 9, 1, Status::Deployed)?;
    let err = storage.update(&missing).await.unwrap_err();
    assert!(err.is_not_found(), "{err}");
    let err = storage.get("ours", 9).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Secret default/sh.helm.release.v1.ours.v9: not found"
    );
    assert!(storage.delete("ours", 9).await.unwrap_err().is_not_found());
    Ok(())
}

#[tokio::test]
async fn a_release_left_pending_by_a_crash_is_unlocked_and_helm_can_upgrade_it()
-> anyhow::Result<()> {
    let (cluster, _api, storage) = start("storage-unlock").await?;
    let kubeconfig = cluster.kubeconfig();
    let chart = hello_chart_dir();
    seed(
        &storage,
        "stuck",
        &[Status::Deployed, Status::PendingUpgrade],
    )
    .await?;

    let refused = helm(&["upgrade", "stuck", &chart], kubeconfig)?;
    assert!(!refused.status.success());
    assert!(
        tools::text(&refused)
            .contains("another operation (install/upgrade/rollback) is in progress"),
        "{}",
        tools::text(&refused)
    );
    assert!(matches!(
        transitions::upgrade_base("stuck", &storage.history("stuck").await?),
        Err(transitions::TransitionError::Locked { version: 2, .. })
    ));

    let Unlock::Unlocked { release, previous } = storage.unlock("stuck").await? else {
        anyhow::bail!("revision 2 is pending");
    };
    assert_eq!(previous, Status::PendingUpgrade);
    assert_eq!(release.version, 2);
    assert_eq!(
        storage.unlock("stuck").await?,
        Unlock::NotPending,
        "nothing left to unlock"
    );
    assert_eq!(storage.unlock("absent").await?, Unlock::NotFound);
    assert_eq!(
        helm_history("stuck", kubeconfig)?,
        [
            row(1, "deployed", "written by the agent"),
            row(
                2,
                "failed",
                "Release unlocked from stale 'pending-upgrade' state"
            ),
        ]
    );

    helm_ok(&["upgrade", "stuck", &chart], kubeconfig)?;
    assert_eq!(
        our_history(&storage, "stuck").await?,
        [
            row(1, "superseded", "written by the agent"),
            row(
                2,
                "failed",
                "Release unlocked from stale 'pending-upgrade' state"
            ),
            row(3, "deployed", UPGRADE_COMPLETE),
        ]
    );
    Ok(())
}

#[tokio::test]
async fn a_garbled_secret_with_helms_labels_is_an_error_naming_it_and_is_never_deleted()
-> anyhow::Result<()> {
    let (cluster, _api, storage) = start("storage-garbled").await?;
    let kubeconfig = cluster.kubeconfig();
    seed(&storage, "web", &[Status::Deployed]).await?;
    let secrets: Api<Secret> = Api::namespaced(cluster.client().await?, NS);
    let garbled = Secret {
        metadata: ObjectMeta {
            name: Some("sh.helm.release.v1.web.v2".to_owned()),
            labels: Some(BTreeMap::from(
                [
                    ("name", "web"),
                    ("owner", "helm"),
                    ("status", "deployed"),
                    ("version", "2"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            )),
            ..ObjectMeta::default()
        },
        type_: Some("helm.sh/release.v1".to_owned()),
        data: Some(BTreeMap::from([(
            "release".to_owned(),
            ByteString(b"H4sIAAAAAAAC/not really gzip".to_vec()),
        )])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &garbled).await?;
    let mut foreign = garbled.clone();
    foreign.metadata.name = Some("web-token".to_owned());
    foreign.type_ = Some("Opaque".to_owned());
    foreign.data = Some(BTreeMap::from([(
        "token".to_owned(),
        ByteString(b"x".to_vec()),
    )]));
    foreign
        .metadata
        .labels
        .as_mut()
        .map(|l| l.insert("status".to_owned(), "superseded".to_owned()));
    secrets.create(&PostParams::default(), &foreign).await?;

    let named = "Secret default/sh.helm.release.v1.web.v2: cannot decode the release record";
    let err = storage.history("web").await.unwrap_err();
    assert!(
        error_chain(&err).starts_with(named),
        "{}",
        error_chain(&err)
    );
    assert_eq!(err.kind(), "unreadable_record");
    assert!(!err.is_transient());
    let err = storage.deployed("web").await.unwrap_err();
    assert!(
        error_chain(&err).starts_with(named),
        "{}",
        error_chain(&err)
    );
    let err = storage.get("web", 2).await.unwrap_err();
    assert!(matches!(err, StorageError::Decode { .. }), "{err}");
    assert!(storage.last("web").await.is_err());
    assert!(storage.delete("web", 2).await.is_err());
    assert!(
        storage
            .create_with_max_history(&hello_release("web", 3, 1, Status::PendingUpgrade)?, 1)
            .await
            .is_err(),
        "no pruning over an unreadable history"
    );

    let listing = storage.list().await?;
    assert_eq!(
        listing
            .releases
            .iter()
            .map(|r| (r.name.as_str(), r.version))
            .collect::<Vec<_>>(),
        [("web", 1)]
    );
    let mut unreadable: Vec<String> = listing.unreadable.iter().map(ToString::to_string).collect();
    unreadable.sort();
    assert_eq!(
        unreadable,
        [
            "Secret default/sh.helm.release.v1.web.v2: cannot decode the release record",
            "Secret default/web-token: no \"release\" key in data, not a Helm release record",
        ]
    );

    // Both Secrets are still there, and helm (which skips what it cannot decode) still
    // shows revision 1.
    assert!(
        secrets
            .get_opt("sh.helm.release.v1.web.v2")
            .await?
            .is_some()
    );
    assert!(secrets.get_opt("web-token").await?.is_some());
    assert!(storage.get("web", 1).await.is_ok());
    let history = helm_history("web", kubeconfig)?;
    assert_eq!(history.first().map(|h| h.0), Some(1), "{history:?}");
    Ok(())
}

/// Standard base64 with padding (what Helm's `encodeRelease` ends with).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0_u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// A record in Helm v3's shape: zero times written as `""`, `deleted` always present, plain
/// (not gzipped) JSON, which both Helm versions accept.
fn helm_v3_record(name: &str) -> String {
    let manifest = hello_manifest(name, 1);
    json!({
        "name": name,
        "info": {
            "first_deployed": "2021-03-04T05:06:07.123456789+01:00",
            "last_deployed": "2021-03-04T05:06:07.123456789+01:00",
            "deleted": "",
            "description": "Install complete",
            "status": "deployed",
            "notes": "v3 notes"
        },
        "chart": {
            "metadata": {"name": "hello", "version": "0.1.0", "appVersion": "1.0.0", "apiVersion": "v2", "type": "application"},
            "lock": null,
            "templates": [],
            "values": {"replicaCount": 2, "image": "ghcr.io/stefanprodan/podinfo:6.5.0", "testOutcome": "pass"},
            "schema": null,
            "files": []
        },
        "config": {"replicaCount": 1},
        "manifest": manifest,
        "hooks": [{
            "name": format!("{name}-hello-test"),
            "kind": "Pod",
            "path": "hello/templates/test-connection.yaml",
            "manifest": "apiVersion: v1\nkind: Pod",
            "events": ["test"],
            "last_run": {"started_at": "", "completed_at": "", "phase": ""},
            "delete_policies": ["before-hook-creation"]
        }],
        "version": 1,
        "namespace": NS
    })
    .to_string()
}

#[tokio::test]
async fn a_record_in_helm_v3_shape_is_read_superseded_and_uninstalled_keeping_history()
-> anyhow::Result<()> {
    let (cluster, _api, storage) = start("storage-v3").await?;
    let kubeconfig = cluster.kubeconfig();
    let secrets: Api<Secret> = Api::namespaced(cluster.client().await?, NS);
    let v3 = Secret {
        metadata: ObjectMeta {
            name: Some("sh.helm.release.v1.old.v1".to_owned()),
            labels: Some(BTreeMap::from(
                [
                    ("name", "old"),
                    ("owner", "helm"),
                    ("status", "deployed"),
                    ("version", "1"),
                    ("modifiedAt", "1614830767"),
                ]
                .map(|(k, v)| (k.to_owned(), v.to_owned())),
            )),
            ..ObjectMeta::default()
        },
        type_: Some("helm.sh/release.v1".to_owned()),
        data: Some(BTreeMap::from([(
            "release".to_owned(),
            ByteString(base64(helm_v3_record("old").as_bytes()).into_bytes()),
        )])),
        ..Secret::default()
    };
    secrets.create(&PostParams::default(), &v3).await?;

    let old = storage.get("old", 1).await?;
    let info = old.info.clone().unwrap_or_default();
    assert_eq!(status_of(&old), Status::Deployed);
    assert!(info.deleted.is_zero());
    assert_eq!(
        info.first_deployed.to_rfc3339_nano(),
        "2021-03-04T05:06:07.123456789+01:00"
    );
    assert!(old.hooks[0].last_run.started_at.is_zero());
    assert_eq!(old.hooks[0].last_run.phase, None);
    assert_eq!(old.config.get("replicaCount").and_then(number), Some(1.0));
    assert!(old.labels.is_empty(), "{:?}", old.labels);
    assert_eq!(storage.deployed("old").await?.map(|r| r.version), Some(1));

    // The agent upgrades it (revision 2 supersedes 1) ...
    let mut next = hello_release("old", 2, 2, Status::PendingUpgrade)?;
    next.labels.clear();
    storage.create_with_max_history(&next, 5).await?;
    assert_eq!(
        storage.mark_deployed(&mut next, UPGRADE_COMPLETE).await?,
        [1]
    );
    // ... then uninstalls it keeping history, as `helm uninstall --keep-history` does.
    let mut last = storage.last("old").await?.expect("two revisions");
    storage.mark_uninstalling(&mut last, GoTime::now()).await?;
    assert_eq!(
        helm_history("old", kubeconfig)?[1],
        row(2, "uninstalling", transitions::UNINSTALL_IN_PROGRESS)
    );
    storage.finish_uninstall(&mut last, true).await?;
    assert_eq!(
        helm_history("old", kubeconfig)?,
        [
            row(1, "superseded", INSTALL_COMPLETE),
            row(2, "uninstalled", transitions::UNINSTALL_COMPLETE),
        ]
    );
    let status = helm_ok(&["status", "old"], kubeconfig)?;
    assert!(status.contains("STATUS: uninstalled"), "{status}");
    let refused = helm(&["uninstall", "old", "--keep-history"], kubeconfig)?;
    assert!(
        tools::text(&refused).contains("is already deleted"),
        "{}",
        tools::text(&refused)
    );

    // Without history: every record goes.
    assert_eq!(storage.purge("old").await?, [1, 2]);
    assert!(
        helm_history("old", kubeconfig).is_err(),
        "helm: release not found"
    );
    Ok(())
}
