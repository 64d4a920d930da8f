//! The HelmRepository and HelmChart controllers against a real Helm repository (nginx,
//! charts packaged and indexed by the real helm) on a real cluster: one index fetch per
//! interval however many HelmCharts use it (counted at nginx's access log), an archive the
//! chart store holds not downloaded again for another HelmChart, versions resolved as Helm
//! does, a new version picked up on the next interval, and an outage that
//! keeps the last index and says so.

mod common;

use std::time::Duration;

use flotilla_api::{HelmChart, HelmRepository};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{ConditionStatus, Conditions as _, condition};
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::wait;
use kube::api::Api;

use common::{Env, TIMEOUT};

fn repository(url: &str) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: hello
  namespace: default
spec:
  interval: 3s
  url: {url}
"#
    )
}

fn chart(name: &str, version: &str) -> String {
    format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmChart
metadata:
  name: {name}
  namespace: default
spec:
  chart: hello
  version: '{version}'
  interval: 1m
  sourceRef:
    kind: HelmRepository
    name: hello
"#
    )
}

/// The artifact `(revision, digest)` of HelmChart `name` once it is Ready with `revision`.
async fn chart_at(api: &Api<HelmChart>, name: &str, revision: &str) -> anyhow::Result<String> {
    wait::until(
        &format!("HelmChart {name} at {revision}"),
        TIMEOUT,
        || async {
            let c = api.get(name).await?;
            let Some(status) = c.status else {
                return Ok(None);
            };
            let ready = status.conditions.is_true(condition::READY);
            Ok(status
                .artifact
                .filter(|a| ready && a.revision == revision)
                .map(|a| a.digest))
        },
    )
    .await
}

#[tokio::test]
async fn one_index_fetch_per_interval_serves_every_chart_a_new_version_is_picked_up_and_an_outage_keeps_the_last_index()
-> anyhow::Result<()> {
    let mut env = Env::start("hub-sources").await?;
    let hello = workspace_root().join("tests/charts/hello");
    let first = env.repo.publish(&hello)?;
    let client = env.cluster.client().await?;
    let repos: Api<HelmRepository> = Api::namespaced(client.clone(), "default");
    let charts: Api<HelmChart> = Api::namespaced(client, "default");

    env.kubectl_apply(&repository(&env.repo.url()))?;
    for (name, version) in [
        ("any", "*"),
        ("minor", "0.1.*"),
        ("range", ">=0.1.0 <1.0.0"),
    ] {
        env.kubectl_apply(&chart(name, version))?;
    }
    let digest = ChartDigest::of_bytes(&std::fs::read(&first)?);
    for name in ["any", "minor", "range"] {
        assert_eq!(chart_at(&charts, name, "0.1.0").await?, digest.as_str());
    }
    let index = std::fs::read(env.repo.charts_dir().join("index.yaml"))?;
    let repo = repos.get("hello").await?;
    let status = repo.status.expect("a status");
    assert!(status.conditions.is_true(condition::READY));
    assert_eq!(
        status.artifact.expect("an artifact").revision,
        ChartDigest::of_bytes(&index).as_str()
    );

    // Another HelmChart of a version the store holds: its artifact without a download.
    let downloads = || -> anyhow::Result<usize> {
        Ok(env
            .repo
            .requests()?
            .iter()
            .filter(|r| {
                r.method == "GET" && r.target.ends_with("/hello-0.1.0.tgz") && r.status == 200
            })
            .count())
    };
    let before = downloads()?;
    assert!(before >= 1, "the first charts downloaded the archive");
    env.kubectl_apply(&chart("again", "0.1.0"))?;
    assert_eq!(chart_at(&charts, "again", "0.1.0").await?, digest.as_str());
    assert_eq!(
        downloads()?,
        before,
        "the store's archive was downloaded again"
    );

    // valuesFiles are not merged yet: refused with a condition rather than ignored.
    env.kubectl_apply(&chart("with-values-files", "*").replace(
        "  interval: 1m\n",
        "  interval: 1m\n  valuesFiles:\n  - values-prod.yaml\n",
    ))?;
    wait::until("the valuesFiles refusal", TIMEOUT, || async {
        let c = charts.get("with-values-files").await?;
        Ok(c.status
            .and_then(|s| s.conditions.get_condition(condition::READY).cloned())
            .filter(|c| c.status == ConditionStatus::False && c.reason == "ValuesFilesNotSupported")
            .map(|_| ()))
    })
    .await?;

    // Three charts, one repository: one fetch per interval (3s), not one per chart.
    let before = env.repo.index_fetches()?;
    tokio::time::sleep(Duration::from_secs(9)).await;
    let fetches = env.repo.index_fetches()? - before;
    assert!((2..=4).contains(&fetches), "{fetches} index fetches in 9s");

    // A new version is picked up by the charts whose range takes it.
    env.repo.publish_version(&hello, "0.2.0")?;
    chart_at(&charts, "any", "0.2.0").await?;
    chart_at(&charts, "range", "0.2.0").await?;
    assert_eq!(
        charts
            .get("minor")
            .await?
            .status
            .and_then(|s| s.artifact)
            .map(|a| a.revision),
        Some("0.1.0".to_owned())
    );

    // The server stops: the repository says why and that it keeps the last index; the
    // charts keep their artifacts and stay Ready.
    env.repo.stop();
    let message = wait::until("the fetch failure", TIMEOUT, || async {
        let r = repos.get("hello").await?;
        let c = r
            .status
            .and_then(|s| s.conditions.get_condition(condition::READY).cloned());
        Ok(c.filter(|c| c.status == ConditionStatus::False)
            .map(|c| (c.reason, c.message)))
    })
    .await?;
    assert_eq!(message.0, "IndexationFailed");
    assert!(
        message
            .1
            .starts_with("failed to fetch Helm repository index")
            && message.1.contains("the last index"),
        "{}",
        message.1
    );
    let any = charts.get("any").await?.status.expect("a status");
    assert!(any.conditions.is_true(condition::READY));
    assert_eq!(any.artifact.map(|a| a.revision).as_deref(), Some("0.2.0"));

    env.stop().await;
    Ok(())
}
