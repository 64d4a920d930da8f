//! The `flotilla` fleet commands as a user runs them: the real binary against a local
//! cluster with the CRDs, a real Helm repository (nginx) and the hub running in this
//! process.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use flotilla_api::HelmRelease;
use flotilla_api::fleet::ManagedCluster;
use flotilla_hub::run::{Hub, HubConfig};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools::kubectl_in;
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, ListParams, PostParams};

const TIMEOUT: Duration = Duration::from_secs(180);

/// Runs the `flotilla` binary; its exit code, stdout and stderr.
fn flotilla(kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_flotilla"))
        .args(args)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .output()
        .expect("the flotilla binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn podinfo(url: &str) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
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
      version: '6.5.*'
      sourceRef:
        kind: HelmRepository
        name: podinfo
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_reconcile_suspend_resume_token_create_and_cluster_accept_work_as_the_flux_cli_does()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("cli-fleet")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    flotilla_tests::crds::install(&client, "flotilla-cli-tests", &flotilla_api::crd::all()).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("cli-fleet")).await?;
    repo.publish_version(
        &flotilla_tests::cluster::workspace_root().join("../shared/charts/podinfo/chart"),
        "6.5.2",
    )?;
    let artifacts = tempfile::tempdir()?;
    let mut config = HubConfig::new(Some(kubeconfig.clone()), artifacts.path().to_owned());
    config.concurrency = 2;
    config.tenancy.local_target = true;
    let hub = Hub::start(config).await?;

    // Nothing yet: said in words, exit 0.
    let (code, out, _) = flotilla(&kubeconfig, &["get", "hr", "-n", "default"]);
    assert_eq!(code, 0);
    assert_eq!(out, "no HelmRelease objects found in default namespace\n");

    kubectl_in(
        &kubeconfig,
        &["apply", "-f", "-"],
        Some(&podinfo(&repo.url())),
    )?;
    let hrs: Api<HelmRelease> = Api::namespaced(client.clone(), "default");
    wait::until("podinfo listed Ready", TIMEOUT, || async {
        let (code, out, _) = flotilla(&kubeconfig, &["get", "hr"]);
        Ok((code == 0 && out.lines().nth(1).is_some_and(|l| l.contains("\tTrue "))).then_some(()))
    })
    .await?;
    let (_, out, _) = flotilla(&kubeconfig, &["get", "helmreleases", "-A"]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split('\t')
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "NAMESPACE",
            "NAME",
            "REVISION",
            "SUSPENDED",
            "READY",
            "CLUSTER",
            "MESSAGE"
        ]
    );
    let row: Vec<&str> = lines
        .next()
        .unwrap_or_default()
        .split('\t')
        .map(str::trim)
        .collect();
    assert_eq!(row[..5], ["default", "podinfo", "6.5.2", "false", "True"]);
    assert!(row[6].starts_with("Helm install succeeded"), "{row:?}");

    let (code, out, _) = flotilla(&kubeconfig, &["get", "sources", "helm"]);
    assert_eq!(code, 0);
    assert!(
        out.lines().nth(1).is_some_and(|l| l.starts_with("podinfo")),
        "{out}"
    );

    // -o json|yaml on every get: a v1 List, parsed back (JSON by serde_json, YAML by the
    // real kubectl, which reads it as it reads its own output).
    for (args, kind, want) in [
        (&["get", "hr"][..], "HelmRelease", 1),
        (&["get", "sources", "helm"][..], "HelmRepository", 1),
        (&["get", "hrs"][..], "HelmReleaseSet", 0),
        (&["get", "clusters"][..], "ManagedCluster", 0),
    ] {
        let mut json_args = args.to_vec();
        json_args.extend(["-o", "json"]);
        let (code, out, err) = flotilla(&kubeconfig, &json_args);
        assert_eq!(code, 0, "{args:?}: {err}");
        let list: serde_json::Value = serde_json::from_str(&out)?;
        assert_eq!(list["kind"], "List", "{out}");
        let items = list["items"].as_array().expect("items");
        assert_eq!(items.len(), want, "{out}");
        for item in items {
            assert_eq!(item["kind"], kind, "{out}");
            assert_eq!(item["metadata"]["name"], "podinfo", "{out}");
            assert!(item["metadata"].get("managedFields").is_none(), "{out}");
        }
        let mut yaml_args = args.to_vec();
        yaml_args.extend(["-o", "yaml"]);
        let (code, yaml, err) = flotilla(&kubeconfig, &yaml_args);
        assert_eq!(code, 0, "{args:?}: {err}");
        if want == 0 {
            // kubectl refuses to create nothing: the empty List as sigs.k8s.io/yaml writes it.
            assert_eq!(yaml, "apiVersion: v1\nitems: []\nkind: List\n");
            continue;
        }
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("list.yaml");
        std::fs::write(&file, &yaml)?;
        let file = file.to_str().expect("a UTF-8 path");
        let names = kubectl_in(
            &kubeconfig,
            &["create", "--dry-run=client", "-f", file, "-o", "name"],
            None,
        )?;
        assert_eq!(names.lines().count(), want, "{yaml}\n{names}");
    }

    // `version --client` asks no cluster; `version` lists the (here: no) agents.
    let client_line = format!("client: flotilla {}\n", env!("CARGO_PKG_VERSION"));
    let (code, out, err) = flotilla(&kubeconfig, &["version", "--client"]);
    assert_eq!((code, out.as_str()), (0, client_line.as_str()), "{err}");

    // Shell completions: a script the real bash reads, completing the subcommands.
    let (code, script, err) = flotilla(&kubeconfig, &["completion", "bash"]);
    assert_eq!(code, 0, "{err}");
    let checked = Command::new("bash").args(["-n", "-c", &script]).output()?;
    assert!(
        checked.status.success(),
        "{}",
        String::from_utf8_lossy(&checked.stderr)
    );
    for word in ["_flotilla", "helmreleases", "rollout", "version"] {
        assert!(script.contains(word), "no {word} in the completion script");
    }

    // reconcile --force: annotated, waited for, an upgrade ran.
    let (code, out, err) = flotilla(
        &kubeconfig,
        &[
            "reconcile",
            "hr",
            "podinfo",
            "--force",
            "--with-source",
            "--timeout",
            "2m",
        ],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("► annotating HelmRepository podinfo in default namespace"),
        "{out}"
    );
    assert!(
        out.contains("► annotating HelmRelease podinfo in default namespace"),
        "{out}"
    );
    assert!(out.ends_with("✔ applied revision 6.5.2\n"), "{out}");
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "podinfo", "default")?;
    assert_eq!(history.len(), 2, "--force ran an upgrade: {history:?}");
    let hr = hrs.get("podinfo").await?;
    let annotations = hr.metadata.annotations.unwrap_or_default();
    let token = &annotations["reconcile.fluxcd.io/requestedAt"];
    assert_eq!(&annotations["reconcile.fluxcd.io/forceAt"], token);

    // suspend: the spec says so, reconcile refuses, resume waits for a reconcile.
    let (code, out, _) = flotilla(&kubeconfig, &["suspend", "hr", "podinfo"]);
    assert_eq!(code, 0);
    assert_eq!(
        out,
        "► suspending HelmRelease podinfo in default namespace\n✔ HelmRelease suspended\n"
    );
    let (_, out, _) = flotilla(&kubeconfig, &["get", "hr"]);
    assert!(
        out.lines().nth(1).is_some_and(|l| l.contains("\ttrue ")),
        "{out}"
    );
    let (code, _, err) = flotilla(&kubeconfig, &["reconcile", "hr", "podinfo"]);
    assert_eq!(code, 1);
    assert_eq!(
        err,
        "✗ HelmRelease podinfo in namespace default is suspended: resume it first\n"
    );
    let (code, out, err) = flotilla(&kubeconfig, &["resume", "hr", "podinfo", "--timeout", "2m"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("✔ applied revision 6.5.2\n"), "{out}");

    // A missing object: named, exit 1.
    let (code, _, err) = flotilla(&kubeconfig, &["reconcile", "hr", "nope", "-n", "apps"]);
    assert_eq!(code, 1);
    assert_eq!(err, "✗ HelmRelease nope not found in namespace apps\n");

    // token create prints the join command with the CA's pin; the token is stored.
    // The hub's namespace (its in-process agent may have made it already).
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt("flotilla-system").await?.is_none() {
        let namespace = serde_json::json!({"metadata": {"name": "flotilla-system"}});
        match namespaces
            .create(&PostParams::default(), &serde_json::from_value(namespace)?)
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let ca = flotilla_hub::session::pki::HubCa::load_or_create(
        client.clone(),
        "flotilla-system",
        "flotilla-hub-ca",
    )
    .await?;
    let (code, out, err) = flotilla(
        &kubeconfig,
        &[
            "token",
            "create",
            "--hub-url",
            "https://hub.example:9443",
            "--cluster-name",
            "edge-1",
            "--auto-accept",
        ],
    );
    assert_eq!(code, 0, "{err}");
    // The token goes in the agent's environment, never on its command line.
    let prefix = "FLOTILLA_BOOTSTRAP_TOKEN=";
    assert!(out.starts_with(prefix), "{out}");
    assert!(
        out.ends_with(&format!(
            " flotilla-agent join --hub https://hub.example:9443 --ca-hash {} --cluster-name edge-1\n",
            ca.pin()
        )),
        "{out}"
    );
    assert!(!out.contains("--token"), "{out}");
    let token = out[prefix.len()..].split(' ').next().unwrap_or_default();
    let id = token.split('.').next().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "flotilla-system");
    assert!(
        secrets
            .get_opt(&format!("flotilla-token-{id}"))
            .await?
            .is_some()
    );

    // cluster accept sets the hub's side of the opt-in; get clusters shows it.
    let clusters: Api<ManagedCluster> = Api::all(client.clone());
    clusters
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({
                "apiVersion": "fleet.flotilla.dev/v1",
                "kind": "ManagedCluster",
                "metadata": {"name": "edge-2"},
                "spec": {"accepted": false}
            }))?,
        )
        .await?;
    let (code, out, _) = flotilla(&kubeconfig, &["cluster", "accept", "edge-2"]);
    assert_eq!(
        (code, out.as_str()),
        (0, "✔ ManagedCluster edge-2 accepted\n")
    );
    assert!(clusters.get("edge-2").await?.spec.accepted);
    let (_, out, _) = flotilla(&kubeconfig, &["get", "clusters"]);
    let row: Vec<&str> = out
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split('\t')
        .map(str::trim)
        .collect();
    assert_eq!(row[..2], ["edge-2", "true"], "{out}");
    let (code, _, err) = flotilla(&kubeconfig, &["cluster", "accept", "edge-9"]);
    assert_eq!(
        (code, err.as_str()),
        (1, "✗ ManagedCluster edge-9 not found\n")
    );
    assert_eq!(clusters.list(&ListParams::default()).await?.items.len(), 1);

    // A token names its cluster or says --any-cluster.
    let (code, _, err) = flotilla(
        &kubeconfig,
        &["token", "create", "--hub-url", "https://hub.example:9443"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cluster-name"), "{err}");
    assert!(err.contains("--any-cluster"), "{err}");

    // approve: the pending registration's key (shown by get clusters -o wide), or the one
    // given; revoke: a serial or a key, the cluster stays accepted.
    let key = format!("sha256:{}", "ab".repeat(32));
    clusters
        .patch_status(
            "edge-2",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(serde_json::json!({"status": {
                "certificate": {"serial": "1f2e", "keyFingerprint": format!("sha256:{}", "cd".repeat(32))},
                "pendingRegistration": {"keyFingerprint": key, "reason": "KeyNotApproved"},
            }})),
        )
        .await?;
    let (_, out, _) = flotilla(&kubeconfig, &["get", "clusters", "-o", "wide"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or_default()
        .split('\t')
        .map(str::trim)
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "ACCEPTED",
            "JOINED",
            "AVAILABLE",
            "PLANS",
            "SERIAL",
            "KEY",
            "PENDING KEY",
            "MESSAGE"
        ],
        "{out}"
    );
    assert!(out.contains(&format!("{key} (KeyNotApproved)")), "{out}");
    assert!(out.contains("1f2e"), "{out}");
    let (code, out, err) = flotilla(&kubeconfig, &["cluster", "approve", "edge-2"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.starts_with(&format!("✔ ManagedCluster edge-2: key {key} approved")),
        "{out}"
    );
    assert_eq!(
        clusters
            .get("edge-2")
            .await?
            .spec
            .approved_key_fingerprint
            .as_deref(),
        Some(key.as_str())
    );
    let (code, _, err) = flotilla(
        &kubeconfig,
        &["cluster", "approve", "edge-2", "--fingerprint", "md5:00"],
    );
    assert_eq!(code, 1);
    assert!(err.starts_with("✗ --fingerprint: key fingerprint"), "{err}");
    let (code, out, err) = flotilla(
        &kubeconfig,
        &["cluster", "revoke", "edge-2", "--serial", "1F:2E"],
    );
    assert_eq!(
        (code, out.as_str()),
        (
            0,
            "✔ ManagedCluster edge-2: certificate 1f2e revoked; a session using it ends, and the cluster stays accepted\n"
        ),
        "{err}"
    );
    let (code, _, err) = flotilla(
        &kubeconfig,
        &["cluster", "revoke", "edge-2", "--fingerprint", &key],
    );
    assert_eq!(code, 0, "{err}");
    let (code, out, _) = flotilla(
        &kubeconfig,
        &["cluster", "revoke", "edge-2", "--serial", "1f2e"],
    );
    assert_eq!(code, 0);
    assert!(out.contains("already revoked"), "{out}");
    let edge2 = clusters.get("edge-2").await?;
    assert_eq!(edge2.spec.revoked_serials, ["1f2e"]);
    assert_eq!(edge2.spec.revoked_key_fingerprints, [key]);
    assert!(edge2.spec.accepted);
    let (code, _, err) = flotilla(&kubeconfig, &["cluster", "revoke", "edge-2"]);
    assert_eq!(code, 2, "{err}");

    hub.stop().await;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn debug_hr_prints_the_status_and_the_values_composed_from_config_maps_secrets_and_inline_values_as_flux_does()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("cli-debug")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    flotilla_tests::crds::install(&client, "flotilla-cli-tests", &flotilla_api::crd::all()).await?;
    kubectl_in(
        &kubeconfig,
        &["apply", "-f", "-"],
        Some(
            r#"apiVersion: v1
kind: ConfigMap
metadata:
  name: podinfo-values
  namespace: default
data:
  values.yaml: |
    replicaCount: 2
    ui:
      color: blue
      message: from the ConfigMap
---
apiVersion: v1
kind: Secret
metadata:
  name: podinfo-auth
  namespace: default
stringData:
  password: s3cr3t
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
  - kind: Secret
    name: podinfo-auth
    valuesKey: password
    targetPath: auth.password
  values:
    ui:
      message: inline
"#,
        ),
    )?;

    // The values, composed as the hub composes them (ConfigMap, then the Secret at its
    // targetPath, then the inline values on top), printed as `flux debug hr` prints them.
    let (code, out, err) = flotilla(&kubeconfig, &["debug", "hr", "podinfo", "--show-values"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        out,
        "auth:\n  password: s3cr3t\nreplicaCount: 2\nui:\n  color: blue\n  message: inline\n"
    );

    // Both: the status (nothing observed yet), `---`, the values.
    let (code, out, err) = flotilla(
        &kubeconfig,
        &[
            "debug",
            "hr",
            "podinfo",
            "-n",
            "default",
            "--show-status",
            "--show-values",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let (status, values) = out.split_once("---\n").expect("a status, then the values");
    assert_eq!(status, "observedGeneration: -1\n", "{out}");
    assert!(values.starts_with("auth:\n  password: s3cr3t\n"), "{out}");

    // Neither flag, a missing object, a missing valuesFrom key: exit 1 with a message.
    let (code, _, err) = flotilla(&kubeconfig, &["debug", "hr", "podinfo"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "✗ either --show-status or --show-values must be set"
    );
    let (code, _, err) = flotilla(&kubeconfig, &["debug", "hr", "nope", "--show-values"]);
    assert_eq!(code, 1);
    assert_eq!(
        err.trim(),
        "✗ HelmRelease nope not found in namespace default"
    );
    kubectl_in(
        &kubeconfig,
        &[
            "patch",
            "helmrelease",
            "podinfo",
            "-n",
            "default",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/spec/valuesFrom/1/valuesKey", "value": "token"}]"#,
        ],
        None,
    )?;
    let (code, out, err) = flotilla(&kubeconfig, &["debug", "hr", "podinfo", "--show-values"]);
    assert_eq!(code, 1, "{out}");
    assert!(
        err.contains("podinfo-auth") && err.contains("token") && !err.contains("s3cr3t"),
        "{err}"
    );
    Ok(())
}

/// `status.installFailures` and the `Stalled` condition's (status, reason) of `podinfo`.
async fn failures_and_stalled(
    hrs: &Api<HelmRelease>,
) -> anyhow::Result<(i64, Option<(String, String)>)> {
    let hr = hrs.get("podinfo").await?;
    let status = serde_json::to_value(&hr.status)?;
    let failures = status["installFailures"].as_i64().unwrap_or(0);
    let stalled = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "Stalled")
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["reason"].as_str().unwrap_or_default().to_owned(),
            )
        });
    Ok((failures, stalled))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconcile_reset_retries_a_release_whose_retries_are_exhausted_where_a_plain_reconcile_leaves_it_stalled()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("cli-reset")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    flotilla_tests::crds::install(&client, "flotilla-cli-tests", &flotilla_api::crd::all()).await?;
    let repo = HelmRepoServer::start(RepoOptions::named("cli-reset")).await?;
    repo.publish_version(
        &flotilla_tests::cluster::workspace_root().join("../shared/charts/podinfo/chart"),
        "6.5.2",
    )?;
    let artifacts = tempfile::tempdir()?;
    let mut config = HubConfig::new(Some(kubeconfig.clone()), artifacts.path().to_owned());
    config.concurrency = 2;
    config.tenancy.local_target = true;
    let hub = Hub::start(config).await?;

    // The target namespace does not exist: the install fails, and with Flux's default
    // remediation (no retries) the release is Stalled RetriesExceeded. (The release is
    // `apps-podinfo`, Flux's default name with a target namespace, stored in `default`.)
    let release = podinfo(&repo.url()).replace(
        "  interval: 10m\n  chart:",
        "  interval: 10m\n  targetNamespace: apps\n  chart:",
    );
    kubectl_in(&kubeconfig, &["apply", "-f", "-"], Some(&release))?;
    let hrs: Api<HelmRelease> = Api::namespaced(client.clone(), "default");
    wait::until("podinfo Stalled", TIMEOUT, || async {
        let (failures, stalled) = failures_and_stalled(&hrs).await?;
        Ok(
            (stalled == Some(("True".to_owned(), "RetriesExceeded".to_owned())))
                .then_some(failures),
        )
    })
    .await
    .map(|failures| assert_eq!(failures, 1))?;

    // The cause goes away; the retries stay exhausted: a plain reconcile is handled but
    // attempts nothing (exit 1 with the last failure), as `flux reconcile` without --reset.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "apps"}}))?,
        )
        .await?;
    let (code, out, err) = flotilla(
        &kubeconfig,
        &["reconcile", "hr", "podinfo", "--timeout", "1m"],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.starts_with("✗ HelmRelease default/podinfo: "), "{err}");
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "apps-podinfo", "default")?;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(history[0].1, "failed");
    let (failures, stalled) = failures_and_stalled(&hrs).await?;
    assert_eq!(failures, 1);
    assert_eq!(
        stalled,
        Some(("True".to_owned(), "RetriesExceeded".to_owned()))
    );

    // --reset sets resetAt with the token: the counters start again, the release is retried
    // and succeeds, Stalled is gone.
    let (code, out, err) = flotilla(
        &kubeconfig,
        &["reconcile", "hr", "podinfo", "--reset", "--timeout", "2m"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.ends_with("✔ applied revision 6.5.2\n"), "{out}");
    let hr = hrs.get("podinfo").await?;
    let annotations = hr.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("reconcile.fluxcd.io/resetAt"),
        annotations.get("reconcile.fluxcd.io/requestedAt")
    );
    let status = serde_json::to_value(&hr.status)?;
    assert_eq!(
        status["lastHandledResetAt"].as_str(),
        annotations
            .get("reconcile.fluxcd.io/resetAt")
            .map(String::as_str)
    );
    let (failures, stalled) = failures_and_stalled(&hrs).await?;
    assert_eq!((failures, stalled), (0, None));
    let history = flotilla_tests::tools::helm_history(&kubeconfig, "apps-podinfo", "default")?;
    assert_eq!(history.len(), 2, "{history:?}");
    assert_eq!(history[1].1, "deployed");

    hub.stop().await;
    Ok(())
}
