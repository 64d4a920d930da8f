//! The HelmRepository and HelmChart controllers against real Helm repositories (nginx,
//! charts packaged and indexed by the real helm; the CNCF distribution registry, charts
//! pushed by the real `helm push`) on a real cluster: one index fetch per interval however
//! many HelmCharts use it (counted at nginx's access log), an archive the chart store holds
//! not downloaded again for another HelmChart, versions resolved as Helm does, a new version
//! picked up on the next interval, an outage that keeps the last index and says so; OCI
//! HelmRepositories (tags resolved, credentials, a HelmRelease installed from one);
//! `valuesFiles` merged into the chart (and into the release); a repository that never
//! answers timing out; a repository that requires a client certificate.

mod common;

use std::path::Path;
use std::time::Duration;

use flotilla_api::{HelmChart, HelmRepository};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{Condition, ConditionStatus, Conditions as _, condition};
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::pki::ClientCert;
use flotilla_tests::servers::{HelmRepoServer, OciRegistry, RegistryOptions, RepoOptions};
use flotilla_tests::tools::helm_history;
use flotilla_tests::wait;
use k8s_openapi::api::apps::v1::Deployment;
use kube::api::Api;

use common::{Env, TIMEOUT, ready};

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

#[tokio::test]
async fn a_restarted_hub_keeps_its_helm_charts_ready_while_it_loads_their_repositorys_index_again()
-> anyhow::Result<()> {
    let mut env = Env::start("hub-index-restart").await?;
    let hello = workspace_root().join("tests/charts/hello");
    env.repo.publish(&hello)?;
    let client = env.cluster.client().await?;
    let charts: Api<HelmChart> = Api::namespaced(client, "default");
    // The repository behind a proxy that can hold each new connection a while: the
    // restarted hub's index then arrives seconds after its HelmCharts are first reconciled.
    let upstream: std::net::SocketAddr = env.repo.url().trim_start_matches("http://").parse()?;
    let (delay, delayed) = tokio::sync::watch::channel(Duration::ZERO);
    let proxy = delaying_proxy(upstream, delayed).await?;
    env.kubectl_apply(&repository(&format!("http://{proxy}")))?;
    let names = ["any", "minor", "range"];
    for (name, version) in names.iter().zip(["*", "0.1.*", ">=0.1.0 <1.0.0"]) {
        env.kubectl_apply(&chart(name, version))?;
    }
    for name in names {
        chart_at(&charts, name, "0.1.0").await?;
    }

    // Indexes live in the hub's memory: a new hub holds none until its HelmRepository
    // controller fetched it again. Its HelmCharts must not turn Ready=False meanwhile
    // (their HelmReleases would follow): they wait for the index.
    delay.send_replace(Duration::from_secs(3));
    env.restart_hub().await?;
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(6) {
        for name in names {
            let status = charts.get(name).await?.status.unwrap_or_default();
            let ready = status.conditions.get_condition(condition::READY).cloned();
            assert!(
                status.conditions.is_true(condition::READY),
                "HelmChart {name} after the hub's restart, {:?} in: {ready:?}",
                watched.elapsed()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // And once the index is there they resolve against it: a new version is taken.
    env.repo.publish_version(&hello, "0.2.0")?;
    chart_at(&charts, "any", "0.2.0").await?;
    env.stop().await;
    Ok(())
}

/// A TCP proxy to `upstream` on loopback that holds each new connection for the current
/// `delay` before connecting it.
async fn delaying_proxy(
    upstream: std::net::SocketAddr,
    delay: tokio::sync::watch::Receiver<Duration>,
) -> anyhow::Result<std::net::SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((mut down, _)) = listener.accept().await {
            let wait = *delay.borrow();
            tokio::spawn(async move {
                tokio::time::sleep(wait).await;
                if let Ok(mut up) = tokio::net::TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                }
            });
        }
    });
    Ok(addr)
}

/// `tests/charts/hello` copied into `dir` with a `values-prod.yaml` beside its values.
fn hello_with_values_files(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let source = workspace_root().join("tests/charts/hello");
    let chart = dir.join("hello");
    std::fs::create_dir_all(chart.join("templates"))?;
    for name in ["Chart.yaml", "values.yaml"] {
        std::fs::copy(source.join(name), chart.join(name))?;
    }
    for entry in std::fs::read_dir(source.join("templates"))? {
        let entry = entry?;
        std::fs::copy(
            entry.path(),
            chart.join("templates").join(entry.file_name()),
        )?;
    }
    std::fs::write(
        chart.join("values-prod.yaml"),
        "# production\nreplicaCount: 3\nextra:\n  tier: prod\n",
    )?;
    Ok(chart)
}

/// The `Ready` condition of HelmChart `name` once `pred` holds for it.
async fn chart_condition(
    api: &Api<HelmChart>,
    name: &str,
    pred: impl Fn(&Condition) -> bool,
) -> anyhow::Result<Condition> {
    wait::until(
        &format!("HelmChart {name}'s condition"),
        TIMEOUT,
        || async {
            let c = api.get(name).await?;
            Ok(c.status
                .and_then(|s| s.conditions.get_condition(condition::READY).cloned())
                .filter(|c| pred(c)))
        },
    )
    .await
}

/// The `Ready` condition of HelmRepository `name` once it is `False`.
async fn repository_not_ready(api: &Api<HelmRepository>, name: &str) -> anyhow::Result<Condition> {
    wait::until(
        &format!("HelmRepository {name} Ready=False"),
        TIMEOUT,
        || async {
            let r = api.get(name).await?;
            Ok(r.status
                .and_then(|s| s.conditions.get_condition(condition::READY).cloned())
                .filter(|c| c.status == ConditionStatus::False))
        },
    )
    .await
}

#[tokio::test]
async fn an_oci_helm_repository_resolves_tags_for_its_charts_and_values_files_are_merged_into_the_chart_and_the_release()
-> anyhow::Result<()> {
    let env = Env::start("hub-sources-oci").await?;
    let dir = tempfile::tempdir()?;
    let hello = hello_with_values_files(dir.path())?;
    let registry =
        OciRegistry::start(RegistryOptions::default().with_basic_auth("carol", "pa55word")).await?;
    let first = registry.push(&hello, "charts")?;
    let second = registry.push_version(&hello, "charts", "0.2.0")?;
    let client = env.cluster.client().await?;
    let repos: Api<HelmRepository> = Api::namespaced(client.clone(), "default");
    let charts: Api<HelmChart> = Api::namespaced(client.clone(), "default");

    let oci_repository = |name: &str, secret: &str| {
        format!(
            r#"apiVersion: v1
kind: Secret
metadata:
  name: {secret}
  namespace: default
stringData:
  username: carol
  password: {password}
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: {name}
  namespace: default
spec:
  type: oci
  url: {url}
  insecure: true
  interval: 1m
  secretRef:
    name: {secret}
"#,
            password = if secret == "good-creds" {
                "pa55word"
            } else {
                "wrong"
            },
            url = registry.oci_url("charts"),
        )
    };
    let oci_chart = |name: &str, repository: &str, version: &str, extra: &str| {
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
    name: {repository}
{extra}"#
        )
    };
    env.kubectl_apply(&oci_repository("oci", "good-creds"))?;
    env.kubectl_apply(&oci_repository("oci-wrong", "wrong-creds"))?;
    for (name, version) in [
        ("oci-any", "*"),
        ("oci-exact", "0.1.0"),
        ("oci-minor", "0.1.x"),
    ] {
        env.kubectl_apply(&oci_chart(name, "oci", version, ""))?;
    }
    let package_digest = |p: &Path| -> anyhow::Result<String> {
        Ok(ChartDigest::of_bytes(&std::fs::read(p)?)
            .as_str()
            .to_owned())
    };
    assert_eq!(
        chart_at(&charts, "oci-any", "0.2.0").await?,
        package_digest(&second.package)?
    );
    assert_eq!(
        chart_at(&charts, "oci-exact", "0.1.0").await?,
        package_digest(&first.package)?
    );
    assert_eq!(
        chart_at(&charts, "oci-minor", "0.1.0").await?,
        package_digest(&first.package)?
    );
    let any = charts.get("oci-any").await?.status.expect("a status");
    assert_eq!(
        any.conditions
            .get_condition(condition::READY)
            .map(|c| c.message.as_str()),
        Some("pulled 'hello' chart with version '0.2.0'")
    );
    assert_eq!(
        any.artifact.map(|a| a.url),
        Some(format!("{}/hello:0.2.0", registry.oci_url("charts")))
    );
    // An OCI repository is only data: no index, no artifact, no status (as in Flux).
    let status = repos.get("oci").await?.status.unwrap_or_default();
    assert!(
        status.conditions.is_empty() && status.artifact.is_none() && status.url.is_none(),
        "{status:?}"
    );

    // Wrong credentials: AuthenticationFailed, saying so.
    env.kubectl_apply(&oci_chart("oci-wrong", "oci-wrong", "*", ""))?;
    let c = chart_condition(&charts, "oci-wrong", |c| c.status == ConditionStatus::False).await?;
    assert_eq!(c.reason, "AuthenticationFailed", "{}", c.message);
    assert!(
        c.message.starts_with(
            "failed to authenticate with the Helm repository: failed to get chart version for \
             remote reference: "
        ) && c.message.contains("401 Unauthorized"),
        "{}",
        c.message
    );

    // A registry serving TLS: trusted with the CA of certSecretRef; without it, a clear
    // AuthenticationFailed.
    let tls_registry = OciRegistry::start(RegistryOptions::default().with_tls()).await?;
    let tls_pushed = tls_registry.push(&hello, "charts")?;
    let ca = tls_registry.ca_pem().expect("a TLS registry has a CA");
    for (name, cert_secret) in [
        ("oci-tls", "  certSecretRef:\n    name: registry-ca\n"),
        ("oci-tls-no-ca", ""),
    ] {
        env.kubectl_apply(&format!(
            r#"apiVersion: v1
kind: Secret
metadata:
  name: registry-ca
  namespace: default
stringData:
  ca.crt: {ca:?}
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: {name}
  namespace: default
spec:
  type: oci
  url: {url}
  interval: 1m
{cert_secret}"#,
            url = tls_registry.oci_url("charts"),
        ))?;
        env.kubectl_apply(&oci_chart(name, name, "0.1.x", ""))?;
    }
    assert_eq!(
        chart_at(&charts, "oci-tls", "0.1.0").await?,
        package_digest(&tls_pushed.package)?
    );
    let c = chart_condition(&charts, "oci-tls-no-ca", |c| {
        c.status == ConditionStatus::False
    })
    .await?;
    assert_eq!(c.reason, "AuthenticationFailed", "{}", c.message);
    assert!(
        c.message
            .contains("TLS handshake failed: invalid peer certificate: UnknownIssuer"),
        "{}",
        c.message
    );

    // valuesFiles: the chart is packaged anew, its version carrying the generation.
    env.kubectl_apply(&oci_chart(
        "oci-values",
        "oci",
        "0.1.0",
        "  valuesFiles:\n  - values.yaml\n  - values-prod.yaml\n",
    ))?;
    let digest = chart_at(&charts, "oci-values", "0.1.0+1").await?;
    assert_ne!(digest, package_digest(&first.package)?, "a new package");
    let c = chart_condition(&charts, "oci-values", |c| c.status == ConditionStatus::True).await?;
    assert_eq!(c.reason, "ChartPackageSucceeded");
    assert_eq!(
        c.message,
        "packaged 'hello' chart with version '0.1.0+1' and merged values files [values.yaml values-prod.yaml]"
    );
    // A missing file: BuildFailed and Stalled, naming it; ignored when asked.
    env.kubectl_apply(&oci_chart(
        "oci-missing",
        "oci",
        "*",
        "  valuesFiles:\n  - values-prod.yaml\n  - values-nope.yaml\n",
    ))?;
    let c = chart_condition(&charts, "oci-missing", |c| {
        c.status == ConditionStatus::False
    })
    .await?;
    assert_eq!(c.reason, "ValuesFilesError");
    assert_eq!(
        c.message,
        "values files merge error: failed to merge chart values: no values file found at path \
         'values-nope.yaml'"
    );
    let status = charts.get("oci-missing").await?.status.expect("a status");
    assert!(status.conditions.is_true("BuildFailed") && status.conditions.is_true("Stalled"));
    env.kubectl_apply(&oci_chart(
        "oci-missing",
        "oci",
        "*",
        "  valuesFiles:\n  - values-prod.yaml\n  - values-nope.yaml\n  ignoreMissingValuesFiles: true\n",
    ))?;
    chart_at(&charts, "oci-missing", "0.2.0+2").await?;
    let status = charts.get("oci-missing").await?.status.expect("a status");
    assert_eq!(status.observed_values_files, ["values-prod.yaml"]);
    assert!(!status.conditions.is_true("Stalled") && !status.conditions.is_true("BuildFailed"));

    // A HelmRelease from the OCI repository with valuesFiles: installed with the merged
    // defaults (replicaCount 3 from values-prod.yaml) at the packaged version.
    let release = |values_files: &str| {
        format!(
            r#"apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: hello-oci
  namespace: default
spec:
  interval: 10m
  chart:
    spec:
      chart: hello
      version: '0.1.*'
      sourceRef:
        kind: HelmRepository
        name: oci
      valuesFiles: [{values_files}]
"#
        )
    };
    env.kubectl_apply(&release("values.yaml, values-prod.yaml"))?;
    let hrs = env.helm_releases().await?;
    ready(&hrs, "hello-oci").await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let replicas = |d: Deployment| d.spec.and_then(|s| s.replicas);
    assert_eq!(replicas(deployments.get("hello-oci-hello").await?), Some(3));
    let history = helm_history(env.kubeconfig(), "hello-oci", "default")?;
    assert_eq!(history.len(), 1, "{history:?}");
    assert_eq!(
        charts
            .get("default-hello-oci")
            .await?
            .status
            .and_then(|s| s.artifact)
            .map(|a| a.revision),
        Some("0.1.0+1".to_owned())
    );
    // Only values.yaml: the repository's archive again, a new revision, an upgrade back to
    // the chart's own defaults.
    env.kubectl_apply(&release("values.yaml"))?;
    chart_at(&charts, "default-hello-oci", "0.1.0").await?;
    wait::until("the upgrade to the chart's defaults", TIMEOUT, || async {
        Ok((replicas(deployments.get("hello-oci-hello").await?) == Some(2)).then_some(()))
    })
    .await?;
    ready(&hrs, "hello-oci").await?;

    env.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_repository_that_never_answers_times_out_one_requiring_a_client_certificate_takes_only_its_own_and_tls_and_auth_failures_are_clear()
-> anyhow::Result<()> {
    let env = Env::start("hub-sources-tls").await?;
    let client = env.cluster.client().await?;
    let repos: Api<HelmRepository> = Api::namespaced(client.clone(), "default");
    let charts: Api<HelmChart> = Api::namespaced(client.clone(), "default");

    // A listener that accepts connections and never answers: `spec.timeout` ends the fetch.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let silent_url = format!("http://{}", silent.local_addr()?);
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    env.kubectl_apply(&format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: silent
  namespace: default
spec:
  interval: 1m
  timeout: 2s
  url: {silent_url}
"#
    ))?;
    let c = repository_not_ready(&repos, "silent").await?;
    assert_eq!(c.reason, "IndexationFailed");
    assert_eq!(
        c.message,
        format!(
            "failed to fetch Helm repository index: failed to fetch {silent_url}/index.yaml: \
             timed out after 2s"
        )
    );
    holder.abort();

    // nginx requiring a client certificate of its CA.
    let mtls =
        HelmRepoServer::start(RepoOptions::named("hub-sources-mtls").with_client_cert()).await?;
    let package = mtls.publish(&workspace_root().join("tests/charts/hello"))?;
    let ca = mtls.ca_pem().expect("a TLS server has a CA");
    let (cert, key) = mtls.client_cert().expect("a client certificate").pem()?;
    let stranger = ClientCert::self_signed(&env.artifacts.path().join("pki"), "stranger")?;
    let (stranger_cert, stranger_key) = stranger.pem()?;
    let secret = |name: &str, data: serde_json::Value| {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": "default"},
            "stringData": data,
        })
        .to_string()
    };
    env.kubectl_apply(&secret(
        "mtls-client",
        serde_json::json!({"ca.crt": ca, "tls.crt": cert, "tls.key": key}),
    ))?;
    env.kubectl_apply(&secret("mtls-ca-only", serde_json::json!({"ca.crt": ca})))?;
    env.kubectl_apply(&secret(
        "mtls-stranger",
        serde_json::json!({"ca.crt": ca, "tls.crt": stranger_cert, "tls.key": stranger_key}),
    ))?;
    let repository = |name: &str, secret: &str| {
        format!(
            r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: {name}
  namespace: default
spec:
  interval: 1m
  url: {url}
  certSecretRef:
    name: {secret}
"#,
            url = mtls.url()
        )
    };
    env.kubectl_apply(&repository("hello", "mtls-client"))?;
    env.kubectl_apply(&chart("mtls-hello", "*"))?;
    assert_eq!(
        chart_at(&charts, "mtls-hello", "0.1.0").await?,
        ChartDigest::of_bytes(&std::fs::read(&package)?).as_str(),
        "index and archive fetched with the client certificate"
    );
    assert!(
        repos
            .get("hello")
            .await?
            .status
            .is_some_and(|s| s.conditions.is_true(condition::READY))
    );
    for name in ["mtls-ca-only", "mtls-stranger"] {
        env.kubectl_apply(&repository(name, name))?;
        let c = repository_not_ready(&repos, name).await?;
        assert_eq!(c.reason, "IndexationFailed", "{name}");
        assert_eq!(
            c.message,
            format!(
                "failed to fetch Helm repository index: failed to fetch {}/index.yaml: 400 Bad Request",
                mtls.url()
            ),
            "{name}: nginx refuses a request without a certificate of its CA"
        );
    }
    // No CA for the server's certificate, and wrong basic-auth credentials: clear messages.
    env.kubectl_apply(&format!(
        r#"apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: mtls-no-ca
  namespace: default
spec:
  interval: 1m
  url: {}
"#,
        mtls.url()
    ))?;
    let c = repository_not_ready(&repos, "mtls-no-ca").await?;
    assert_eq!(
        c.message,
        format!(
            "failed to fetch Helm repository index: failed to fetch {}/index.yaml: TLS handshake \
             failed: invalid peer certificate: UnknownIssuer",
            mtls.url()
        )
    );
    let basic = HelmRepoServer::start(
        RepoOptions::named("hub-sources-basic").with_basic_auth("bob", "s3cret"),
    )
    .await?;
    env.kubectl_apply(&format!(
        r#"apiVersion: v1
kind: Secret
metadata:
  name: basic-wrong
  namespace: default
stringData:
  username: bob
  password: not-the-password
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: basic-wrong
  namespace: default
spec:
  interval: 1m
  url: {}
  secretRef:
    name: basic-wrong
"#,
        basic.url()
    ))?;
    let c = repository_not_ready(&repos, "basic-wrong").await?;
    assert_eq!(c.reason, "IndexationFailed");
    assert_eq!(
        c.message,
        format!(
            "failed to fetch Helm repository index: failed to fetch {}/index.yaml: 401 Unauthorized",
            basic.url()
        )
    );
    assert!(!c.message.contains("not-the-password"));

    let refused: Vec<u16> = mtls
        .requests()?
        .into_iter()
        .filter(|r| r.target == "/index.yaml")
        .map(|r| r.status)
        .collect();
    assert!(
        refused.contains(&200) && refused.contains(&400),
        "{refused:?}"
    );

    // Every condition and Event these failures left reads as a sentence.
    flotilla_tests::messages::scan(&env.cluster.client().await?).await?;
    env.stop().await;
    Ok(())
}
