//! The hub end to end on a real local cluster: the CRDs installed, a real Helm repository
//! (nginx, charts packaged and indexed by the real helm) holding the podinfo chart, and the
//! hub's controllers running in this process with an in-process agent on the hub's own
//! cluster. Releases are checked with the real `helm` and `kubectl`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::HelmRelease;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_hub::controller::{FINALIZER, PLAN_REVISION_ANNOTATION};
use flotilla_hub::run::{Hub, HubConfig};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools::{helm_history, helm_in, kubectl_in};
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::{Client, ResourceExt as _};

const TIMEOUT: Duration = Duration::from_secs(180);

/// The podinfo chart of the shared chart collection.
fn podinfo_chart() -> PathBuf {
    PathBuf::from("/work/shared/charts/podinfo/chart")
}

/// Installs the flotilla CRDs and waits until they are Established.
async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let all = flotilla_api::crd::all();
    for crd in &all {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        crds.patch(
            &name,
            &PatchParams::apply("flotilla-hub-tests").force(),
            &Patch::Apply(crd),
        )
        .await?;
    }
    for crd in &all {
        let name = crd.metadata.name.clone().expect("generated CRDs are named");
        wait::until(&format!("{name} Established"), TIMEOUT, || async {
            let crd = crds.get(&name).await?;
            Ok(crd
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(()))
        })
        .await?;
    }
    Ok(())
}

/// A cluster with the CRDs, a repository holding podinfo as 6.5.2 (so the seed's
/// `6.5.*` picks it), and the hub running against the cluster.
struct Env {
    cluster: Cluster,
    repo: HelmRepoServer,
    hub: Option<Hub>,
    _artifacts: tempfile::TempDir,
}

impl Env {
    async fn start(name: &str) -> anyhow::Result<Env> {
        let cluster = Cluster::start(ClusterOptions::named(name)).await?;
        install_crds(&cluster.client().await?).await?;
        let repo = HelmRepoServer::start(RepoOptions::named(name)).await?;
        repo.publish_version(&podinfo_chart(), "6.5.2")?;
        let artifacts = tempfile::tempdir()?;
        let mut config = HubConfig::new(
            Some(cluster.kubeconfig().to_owned()),
            artifacts.path().to_owned(),
        );
        config.concurrency = 2;
        config.requeue_dependency = Duration::from_secs(2);
        config.agent.backoff = flotilla_agent::runtime::queue::Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(5),
            jitter: 0.1,
        };
        config.agent.shutdown_grace = Duration::from_secs(10);
        let hub = Hub::start(config).await?;
        Ok(Env {
            cluster,
            repo,
            hub: Some(hub),
            _artifacts: artifacts,
        })
    }

    fn kubeconfig(&self) -> &Path {
        self.cluster.kubeconfig()
    }

    fn kubectl_apply(&self, yaml: &str) -> anyhow::Result<String> {
        kubectl_in(self.kubeconfig(), &["apply", "-f", "-"], Some(yaml))
    }

    async fn helm_releases(&self) -> anyhow::Result<Api<HelmRelease>> {
        Ok(Api::namespaced(self.cluster.client().await?, "default"))
    }

    async fn stop(mut self) {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
    }
}

/// The seed's first example (`helmrelease-v2-api.md`) with the API groups and the
/// repository URL changed.
fn seed_podinfo(repo_url: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 5m
  url: {repo_url}
---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: podinfo
  namespace: default
spec:
  interval: 10m
  timeout: 5m
  chart:
    spec:
      chart: podinfo
      version: '6.5.*'
      sourceRef:
        kind: HelmRepository
        name: podinfo
      interval: 5m
  releaseName: podinfo
  install:
    remediation:
      retries: 3
  upgrade:
    remediation:
      retries: 3
  test:
    enable: true
  driftDetection:
    mode: enabled
    ignore:
    - paths: ["/spec/replicas"]
      target:
        kind: Deployment
  values:
    replicaCount: {replicas}
"#
    )
}

/// Waits until `name` is Ready=True for its current generation; the object.
async fn ready(api: &Api<HelmRelease>, name: &str) -> anyhow::Result<HelmRelease> {
    wait::until(&format!("HelmRelease {name} Ready"), TIMEOUT, || async {
        let hr = api.get(name).await?;
        let ok = hr.status.as_ref().is_some_and(|s| {
            s.observed_generation == hr.metadata.generation.unwrap_or_default()
                && s.conditions.is_true(condition::READY)
        });
        Ok(ok.then_some(hr))
    })
    .await
}

/// `helm list -n default -q` as a list of names.
fn helm_list(kubeconfig: &Path) -> anyhow::Result<Vec<String>> {
    Ok(helm_in(kubeconfig, &["list", "-n", "default", "-q"])?
        .lines()
        .map(str::to_owned)
        .collect())
}

#[tokio::test]
async fn the_seed_podinfo_example_becomes_ready_upgrades_on_a_values_change_and_is_uninstalled_on_deletion()
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
    let replicas = kubectl_in(
        env.kubeconfig(),
        &[
            "get",
            "deployment",
            "podinfo",
            "-n",
            "default",
            "-o",
            "jsonpath={.spec.replicas}",
        ],
        None,
    )?;
    assert_eq!(replicas.trim(), "3");

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
async fn a_missing_values_from_key_is_a_condition_naming_the_field_and_the_deployed_release_stays()
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

    env.stop().await;
    Ok(())
}
