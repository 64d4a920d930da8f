//! What the hub's cluster tests share: a cluster with the CRDs, a real Helm repository,
//! the hub running in this process, and the seed's podinfo manifests.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_api::HelmRelease;
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_hub::run::{Hub, HubConfig};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools::{helm_in, kubectl_in};
use flotilla_tests::{Cluster, ClusterOptions, wait};
use kube::Client;
use kube::api::Api;

pub const TIMEOUT: Duration = Duration::from_secs(180);

/// The podinfo chart of the shared chart collection (`../shared/charts` beside the
/// repository).
pub fn podinfo_chart() -> PathBuf {
    flotilla_tests::cluster::workspace_root().join("../shared/charts/podinfo/chart")
}

/// The ManagedClusterBinding the tests' set-up creates: every namespace may deliver to every
/// ManagedCluster (the tenancy tests delete it).
pub const BIND_ALL: &str = "hub-tests-everything";

/// Installs the flotilla CRDs, waits until they are Established, and binds every namespace
/// to every ManagedCluster ([`BIND_ALL`]).
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    flotilla_tests::crds::install(client, "flotilla-hub-tests", &flotilla_api::crd::all()).await?;
    let binding: flotilla_api::ManagedClusterBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "fleet.flotilla.dev/v1",
        "kind": "ManagedClusterBinding",
        "metadata": {"name": BIND_ALL},
        "spec": {"namespaceSelector": {}, "clusterSelector": {}},
    }))?;
    Api::<flotilla_api::ManagedClusterBinding>::all(client.clone())
        .create(&kube::api::PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// A cluster with the CRDs, a repository holding podinfo as 6.5.2 (so the seed's
/// `6.5.*` picks it), and the hub running against the cluster.
pub struct Env {
    pub cluster: Cluster,
    pub repo: HelmRepoServer,
    pub hub: Option<Hub>,
    pub artifacts: tempfile::TempDir,
    /// Changes [`hub_config`] for this environment (every start of its hub).
    pub configure: fn(&mut HubConfig),
}

impl Env {
    pub async fn start(name: &str) -> anyhow::Result<Env> {
        Env::start_with(name, |_| {}).await
    }

    /// [`Env::start`] with the hub's configuration changed by `configure`.
    pub async fn start_with(name: &str, configure: fn(&mut HubConfig)) -> anyhow::Result<Env> {
        init_logging();
        let cluster = Cluster::start(ClusterOptions::named(name)).await?;
        install_crds(&cluster.client().await?).await?;
        let repo = HelmRepoServer::start(RepoOptions::named(name)).await?;
        repo.publish_version(&podinfo_chart(), "6.5.2")?;
        let artifacts = tempfile::tempdir()?;
        let mut config = hub_config(&cluster, artifacts.path());
        configure(&mut config);
        let hub = Hub::start(config).await?;
        Ok(Env {
            cluster,
            repo,
            hub: Some(hub),
            artifacts,
            configure,
        })
    }

    /// Stops the hub and starts a new one on the same cluster and chart store.
    pub async fn restart_hub(&mut self) -> anyhow::Result<()> {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
        let mut config = hub_config(&self.cluster, self.artifacts.path());
        (self.configure)(&mut config);
        self.hub = Some(Hub::start(config).await?);
        Ok(())
    }

    pub fn kubeconfig(&self) -> &Path {
        self.cluster.kubeconfig()
    }

    pub fn kubectl_apply(&self, yaml: &str) -> anyhow::Result<String> {
        kubectl_in(self.kubeconfig(), &["apply", "-f", "-"], Some(yaml))
    }

    pub async fn helm_releases(&self) -> anyhow::Result<Api<HelmRelease>> {
        Ok(Api::namespaced(self.cluster.client().await?, "default"))
    }

    pub async fn stop(mut self) {
        if let Some(hub) = self.hub.take() {
            hub.stop().await;
        }
    }
}

/// The hub's configuration for the tests: small concurrency, short requeues and backoff.
pub fn hub_config(cluster: &Cluster, artifacts: &Path) -> HubConfig {
    let mut config = HubConfig::new(Some(cluster.kubeconfig().to_owned()), artifacts.to_owned());
    config.concurrency = 2;
    config.requeue_dependency = Duration::from_secs(2);
    config.agent.backoff = flotilla_agent::runtime::queue::Backoff {
        base: Duration::from_millis(500),
        max: Duration::from_secs(5),
        jitter: 0.1,
    };
    config.agent.shutdown_grace = Duration::from_secs(10);
    // Most tests install in the test cluster itself.
    config.tenancy.local_target = true;
    config
}

/// A HelmRepository `podinfo` at `url` and a HelmRelease `name` of its podinfo chart
/// (no tests, no drift detection), with `extra` appended to the spec (indented by two).
pub fn podinfo_release(url: &str, name: &str, extra: &str) -> String {
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
  name: {name}
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: podinfo
      sourceRef:
        kind: HelmRepository
        name: podinfo
{extra}
"#
    )
}

/// The `Ready` condition of `name` once `pred` holds for it.
pub async fn ready_condition(
    api: &Api<HelmRelease>,
    name: &str,
    what: &str,
    pred: impl Fn(&flotilla_core::meta::Condition) -> bool,
) -> anyhow::Result<flotilla_core::meta::Condition> {
    wait::until(what, TIMEOUT, || async {
        let hr = api.get(name).await?;
        let c = hr
            .status
            .as_ref()
            .and_then(|s| s.conditions.get_condition(condition::READY).cloned());
        Ok(c.filter(|c| pred(c)))
    })
    .await
}

/// The seed's first example (`helmrelease-v2-api.md`) with the API groups and the
/// repository URL changed.
pub fn seed_podinfo(repo_url: &str, replicas: u32) -> String {
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
pub async fn ready(api: &Api<HelmRelease>, name: &str) -> anyhow::Result<HelmRelease> {
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
pub fn helm_list(kubeconfig: &Path) -> anyhow::Result<Vec<String>> {
    Ok(helm_in(kubeconfig, &["list", "-n", "default", "-q"])?
        .lines()
        .map(str::to_owned)
        .collect())
}

/// Waits until release `name` in `default` has `count` revisions, the last one deployed.
pub async fn wait_for_history(kubeconfig: &Path, name: &str, count: usize) -> anyhow::Result<()> {
    wait::until(&format!("{name} at revision {count}"), TIMEOUT, || async {
        let h = flotilla_tests::tools::helm_history(kubeconfig, name, "default")?;
        Ok((h.len() == count && h.last().is_some_and(|l| l.1 == "deployed")).then_some(()))
    })
    .await
}

/// Logs of the hub in the test's output, filtered by `RUST_LOG` (nothing by default).
pub fn init_logging() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_from_default_env()
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    });
}

/// `spec.replicas` of Deployment `podinfo` in namespace `default` of the cluster of
/// `kubeconfig`.
pub fn podinfo_replicas(kubeconfig: &Path) -> anyhow::Result<String> {
    Ok(kubectl_in(
        kubeconfig,
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
    )?
    .trim()
    .to_owned())
}

/// The kubeconfig of `cluster` as a kubeconfig Secret holds it: its files (CA, client
/// certificate and key) inlined as `*-data` fields, since the hub reads no file a Secret
/// names (`flotilla_hub::kubeconfig_policy`). JSON, which is YAML.
#[allow(unused_imports)] // each test binary compiles this module; not all of them use it
pub use flotilla_tests::capi::provider::inline_kubeconfig;
