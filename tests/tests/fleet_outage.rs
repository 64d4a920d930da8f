//! The fleet without its hub, and the agents' certificates renewed under a short lifetime: the
//! real `flotilla-hub` and `flotilla-agent` processes on real local clusters
//! ([`flotilla_tests::fleet::Fleet`]), checked with the real `kubectl` and `helm`.
//!
//! - The hub stopped for two minutes: the agent of workload-a goes on reconciling on its
//!   interval (a Deployment deleted by hand, twice, is put back each time by drift
//!   correction), and once the hub is serving again every HelmRelease's status on the hub
//!   equals what its agent holds within 5 s, with no extra Helm revision on either cluster.
//! - With `--agent-cert-lifetime 30s` the agent's certificate is renewed over the session
//!   (its identity Secret gets a new serial and a later notAfter), plan changes keep
//!   arriving after the renewal and after the first certificate's end, and the agent
//!   restarted then connects with the renewed certificate. Stopped past its certificate's
//!   end, the agent started with `run` says in an error line that it must join again and
//!   gets no session; `join` with a new token brings it back. The hub's and the agent's
//!   debug logs hold neither the marker of a valuesFrom Secret, nor the token, nor a key.
//!   Their scrapes export every series `deploy/monitoring/`'s alert rules and dashboard
//!   query, the agent's certificate end among them.

use std::io::Read as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use flotilla_api::{HelmRelease, ManagedCluster};
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_core::status::HelmReleaseStatus;
use flotilla_tests::bins::{self, Progress};
use flotilla_tests::fleet::{AGENT_NAMESPACE, Fleet, FleetOptions, hello_deployment};
use flotilla_tests::tools::{helm_history, kubectl_in};
use flotilla_tests::wait;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, ListParams};

const NS: &str = "fleet-outage";
/// A value in a valuesFrom Secret on the hub: it must appear in no log line.
const MARKER: &str = "flotilla-outage-marker-3c9e";
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long the hub stays away.
const OUTAGE: Duration = Duration::from_secs(120);
/// How soon after the hub serves again every status must be the agent's.
const CONVERGENCE: Duration = Duration::from_secs(5);

/// A HelmRepository with the example chart and one HelmRelease per `(name, cluster)`, every
/// one reconciled every `interval`, with drift detection enabled.
fn manifests(fleet: &Fleet, releases: &[(&str, &str)], interval: &str) -> String {
    let mut out = format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NS}\n---\napiVersion: source.flotilla.dev/v1\nkind: HelmRepository\nmetadata:\n  name: examples\n  namespace: {NS}\nspec:\n  interval: 10m\n  url: {}\n",
        fleet.repo.url()
    );
    for (name, cluster) in releases {
        out.push_str(&format!(
            r#"---
apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: {name}
  namespace: {NS}
spec:
  clusterRef:
    name: {cluster}
  interval: {interval}
  releaseName: hello
  targetNamespace: hello
  storageNamespace: hello
  install:
    createNamespace: true
  driftDetection:
    mode: enabled
  chart:
    spec:
      chart: hello
      version: "0.1.x"
      sourceRef:
        kind: HelmRepository
        name: examples
  values:
    message: Hello from {cluster}
"#
        ));
    }
    out
}

fn revisions(kubeconfig: &Path) -> anyhow::Result<Vec<(i64, String, String)>> {
    helm_history(kubeconfig, "hello", "hello")
}

/// The uid of the Deployment `hello` on a workload cluster, if it exists and is not being
/// deleted.
fn deployment_uid(kubeconfig: &Path) -> Option<String> {
    hello_deployment(
        kubeconfig,
        "{.metadata.uid}{\" \"}{.metadata.deletionTimestamp}",
    )
    .ok()
    .and_then(|out| {
        let mut words = out.split_whitespace();
        let uid = words.next()?.to_owned();
        words.next().is_none().then_some(uid)
    })
}

/// The status the agent holds for HelmRelease `NS/name`: its state Secret in the workload
/// cluster (gzip-compressed JSON with the plan, the status and the report sequence).
async fn agent_status(
    workload: &kube::Client,
    name: &str,
) -> anyhow::Result<Option<HelmReleaseStatus>> {
    let secrets: Api<Secret> = Api::namespaced(workload.clone(), AGENT_NAMESPACE);
    let list = secrets
        .list(&ListParams::default().labels("flotilla.dev/release-state=true"))
        .await?;
    let object = format!("{NS}/{name}");
    let Some(secret) = list.items.into_iter().find(|s| {
        s.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("flotilla.dev/helm-release"))
            == Some(&object)
    }) else {
        return Ok(None);
    };
    let data = secret.data.unwrap_or_default();
    let gz = data
        .get("state")
        .ok_or_else(|| anyhow::anyhow!("the state Secret of {object} has no state"))?;
    let mut json = String::new();
    flate2::read::GzDecoder::new(gz.0.as_slice()).read_to_string(&mut json)?;
    let state: serde_json::Value = serde_json::from_str(&json)?;
    Ok(Some(serde_json::from_value(state["status"].clone())?))
}

/// The agent-reported part of a HelmRelease status on the hub (`helmChart` is the hub's).
fn reported(hr: &HelmRelease) -> HelmReleaseStatus {
    let mut status = hr.status.clone().unwrap_or_default();
    status.helm_chart.clear();
    status
}

async fn ready(fleet: &Fleet, names: &[&str]) -> anyhow::Result<Vec<HelmRelease>> {
    let releases: Vec<(&str, &str)> = names.iter().map(|n| (NS, *n)).collect();
    fleet.wait_ready(&releases, TIMEOUT, |_| {}).await
}

#[tokio::test]
async fn with_the_hub_away_two_minutes_the_agent_corrects_drift_on_its_interval_and_every_status_is_the_agents_within_5s_of_the_hub_serving_again()
-> anyhow::Result<()> {
    let mut fleet = Fleet::start(
        bins::build(Progress::OnFailure)?,
        FleetOptions::named("outage"),
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
    let clients = [
        (
            "hello-a",
            fleet.workload("workload-a")?.cluster.client().await?,
        ),
        (
            "hello-b",
            fleet.workload("workload-b")?.cluster.client().await?,
        ),
    ];
    fleet.apply(&manifests(
        &fleet,
        &[("hello-a", "workload-a"), ("hello-b", "workload-b")],
        "20s",
    ))?;
    ready(&fleet, &["hello-a", "hello-b"]).await?;
    let history_a = revisions(&a)?;
    let history_b = revisions(&b)?;
    assert_eq!(history_a.len(), 1, "{history_a:?}");
    assert_eq!(history_b.len(), 1, "{history_b:?}");

    // The hub goes away.
    fleet.stop_hub();
    let stopped = Instant::now();
    let api: Api<HelmRelease> = Api::namespaced(fleet.mgmt.client().await?, NS);

    // What the hub shows now is made stale: only a hub that takes its agents' statuses
    // again after its restart shows them.
    for name in ["hello-a", "hello-b"] {
        kubectl_in(
            fleet.kubeconfig(),
            &[
                "patch",
                "helmrelease",
                name,
                "-n",
                NS,
                "--subresource=status",
                "--type=merge",
                "-p",
                r#"{"status":{"lastAttemptedRevision":"0.0.0-stale","conditions":[{"type":"Ready","status":"Unknown","reason":"Stale","message":"written by the test while the hub was away","lastTransitionTime":"2020-01-01T00:00:00Z","observedGeneration":1}]}}"#,
            ],
            None,
        )?;
    }

    // Drift on workload-a, twice: each time the agent alone puts the Deployment back at its
    // next interval (20 s).
    for round in 1..=2 {
        let before = deployment_uid(&a).ok_or_else(|| {
            anyhow::anyhow!("round {round}: no Deployment hello on workload-a to delete")
        })?;
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
        let deleted = Instant::now();
        wait::until(
            &format!("round {round}: the Deployment recreated on workload-a without the hub"),
            Duration::from_secs(60),
            || {
                let a = a.clone();
                let before = before.clone();
                async move { Ok(deployment_uid(&a).filter(|uid| *uid != before)) }
            },
        )
        .await?;
        eprintln!(
            "round {round}: the Deployment was back {:.1} s after its deletion ({:.1} s into the outage)",
            deleted.elapsed().as_secs_f64(),
            stopped.elapsed().as_secs_f64()
        );
        assert!(fleet.hub_pid().is_none(), "the hub is still away");
    }
    assert_eq!(
        revisions(&a)?,
        history_a,
        "drift correction makes no revision"
    );

    // Two minutes without the hub, then it comes back.
    if let Some(rest) = OUTAGE.checked_sub(stopped.elapsed()) {
        tokio::time::sleep(rest).await;
    }
    fleet.start_hub().await?;
    let serving = Instant::now();
    eprintln!(
        "the hub was away {:.1} s",
        (serving - stopped).as_secs_f64()
    );
    let converged = wait::until(
        "every HelmRelease status on the hub to be its agent's",
        CONVERGENCE + TIMEOUT,
        || {
            let api = api.clone();
            let clients = clients.clone();
            async move {
                for (name, client) in &clients {
                    let hr = api.get(name).await?;
                    let Some(held) = agent_status(client, name).await? else {
                        anyhow::bail!("the agent holds no state for {name}");
                    };
                    if reported(&hr) != held
                        || !hr
                            .status
                            .as_ref()
                            .is_some_and(|s| s.conditions.is_true(condition::READY))
                    {
                        return Ok(None);
                    }
                }
                Ok(Some(serving.elapsed()))
            }
        },
    )
    .await;
    let converged = match converged {
        Ok(took) => took,
        Err(e) => {
            let mut detail = String::new();
            for (name, client) in &clients {
                let hub = api.get(name).await.ok().map(|hr| reported(&hr));
                let held = agent_status(client, name).await.ok().flatten();
                detail.push_str(&format!(
                    "\n{name} on the hub: {hub:#?}\n{name} held by its agent: {held:#?}"
                ));
            }
            return Err(e.context(detail));
        }
    };
    eprintln!(
        "every status was its agent's {:.2} s after the hub served again",
        converged.as_secs_f64()
    );
    assert!(
        converged <= CONVERGENCE,
        "the statuses took {converged:?} to converge after the hub came back (at most {CONVERGENCE:?})"
    );
    for hr in api.list(&ListParams::default()).await? {
        let status = hr.status.clone().unwrap_or_default();
        assert!(
            status.last_attempted_revision.starts_with("0.1.0"),
            "{status:?}"
        );
        assert_eq!(status.history.len(), 1, "{:?}", status.history);
    }
    // No extra revision on either cluster, also after the hub has sent its plans again.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(revisions(&a)?, history_a);
    assert_eq!(revisions(&b)?, history_b);
    Ok(())
}

/// The client certificate in the agent's identity Secret: (serial, notAfter).
async fn agent_certificate(workload: &kube::Client) -> anyhow::Result<(String, SystemTime)> {
    let secret = Api::<Secret>::namespaced(workload.clone(), AGENT_NAMESPACE)
        .get("flotilla-agent-identity")
        .await?;
    let data = secret.data.unwrap_or_default();
    let pem = data
        .get("tls.crt")
        .ok_or_else(|| anyhow::anyhow!("the identity Secret has no tls.crt"))?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem.0)?;
    let cert = block.parse_x509()?;
    let not_after = u64::try_from(cert.validity().not_after.timestamp())?;
    Ok((
        cert.raw_serial_as_string(),
        SystemTime::UNIX_EPOCH + Duration::from_secs(not_after),
    ))
}

fn patch_message(fleet: &Fleet, name: &str, message: &str) -> anyhow::Result<()> {
    kubectl_in(
        fleet.kubeconfig(),
        &[
            "patch",
            "helmrelease",
            name,
            "-n",
            NS,
            "--type",
            "merge",
            "-p",
            &serde_json::json!({"spec": {"values": {"message": message}}}).to_string(),
        ],
        None,
    )?;
    Ok(())
}

/// Waits until the release's ConfigMap on the workload cluster says `message` and the
/// HelmRelease is Ready for its generation; returns the Helm history then.
async fn applied(
    fleet: &Fleet,
    kubeconfig: &Path,
    name: &str,
    message: &str,
) -> anyhow::Result<Vec<(i64, String, String)>> {
    wait::until(
        &format!("{message:?} on the workload cluster"),
        TIMEOUT,
        || async {
            let got = kubectl_in(
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
            )?;
            Ok((got == message).then_some(()))
        },
    )
    .await?;
    ready(fleet, &[name]).await?;
    revisions(kubeconfig)
}

#[tokio::test]
async fn a_short_lived_agent_certificate_is_renewed_over_the_session_and_plans_keep_arriving_past_the_first_certificates_end()
-> anyhow::Result<()> {
    let mut options = FleetOptions::named("cert-renewal");
    options.workloads = vec!["workload-a".to_owned()];
    options.hub_args = vec!["--agent-cert-lifetime".to_owned(), "30s".to_owned()];
    let agent_metrics = format!("127.0.0.1:{}", flotilla_tests::cluster::free_port()?);
    options.agent_args = vec!["--metrics-addr".to_owned(), agent_metrics.clone()];
    // Debug logs, scanned at the end for what must never be logged.
    options.log_level = "debug".to_owned();
    let mut fleet = Fleet::start(bins::build(Progress::OnFailure)?, options).await?;
    let a = fleet
        .workload("workload-a")?
        .cluster
        .kubeconfig()
        .to_owned();
    let work = fleet.workload("workload-a")?.cluster.client().await?;
    let (first_serial, first_end) = agent_certificate(&work).await?;
    let lifetime = first_end
        .duration_since(SystemTime::now())
        .unwrap_or_default();
    assert!(
        lifetime <= Duration::from_secs(30),
        "the first certificate ends within --agent-cert-lifetime: {lifetime:?} left"
    );

    // Values from a Secret on the hub carry a marker.
    let with_secret_values = manifests(&fleet, &[("hello-a", "workload-a")], "1h").replace(
        "  values:\n",
        "  valuesFrom:\n  - kind: Secret\n    name: hello-secret-values\n  values:\n",
    );
    fleet.apply(&format!(
        "{with_secret_values}---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: hello-secret-values\n  namespace: {NS}\nstringData:\n  values.yaml: |\n    secretMarker: {MARKER}\n"
    ))?;
    ready(&fleet, &["hello-a"]).await?;
    assert_eq!(revisions(&a)?.len(), 1);

    // Renewed two thirds into the lifetime: a new certificate in the agent's Secret, and
    // its end on the ManagedCluster.
    let (serial, end) = wait::until(
        "the agent's certificate renewed",
        Duration::from_secs(60),
        || {
            let work = work.clone();
            let first_serial = first_serial.clone();
            async move {
                let (serial, end) = agent_certificate(&work).await?;
                Ok((serial != first_serial).then_some((serial, end)))
            }
        },
    )
    .await?;
    assert!(end > first_end, "the renewed certificate ends later");
    let clusters: Api<ManagedCluster> = Api::all(fleet.mgmt.client().await?);
    wait::until(
        "the ManagedCluster to show a renewed certificate's expiry",
        Duration::from_secs(30),
        || async {
            let mc = clusters.get("workload-a").await?;
            let expiry = mc
                .status
                .and_then(|s| s.certificate_expiry)
                .map(|t| t.to_string())
                .unwrap_or_default();
            Ok((!expiry.is_empty() && expiry > format_time(first_end)).then_some(()))
        },
    )
    .await?;
    eprintln!("renewed: serial {first_serial} -> {serial}");

    // The session still carries plans after the renewal.
    patch_message(&fleet, "hello-a", "after the renewal")?;
    assert_eq!(
        applied(&fleet, &a, "hello-a", "after the renewal")
            .await?
            .len(),
        2
    );

    // And after the first certificate's end.
    if let Ok(rest) = first_end.duration_since(SystemTime::now()) {
        tokio::time::sleep(rest + Duration::from_secs(1)).await;
    }
    patch_message(&fleet, "hello-a", "past the first certificate")?;
    assert_eq!(
        applied(&fleet, &a, "hello-a", "past the first certificate")
            .await?
            .len(),
        3
    );

    // A new connection is made with the renewed certificate the agent stored.
    fleet.kill_agent("workload-a")?;
    fleet.restart_agent("workload-a").await?;
    patch_message(&fleet, "hello-a", "after a reconnect")?;
    assert_eq!(
        applied(&fleet, &a, "hello-a", "after a reconnect")
            .await?
            .len(),
        4
    );
    let (_, latest_end) = agent_certificate(&work).await?;
    assert!(latest_end > first_end);

    // The monitoring series: the agent exports its certificate's end, the hub the accepted,
    // connected cluster; every series the alert rules and the dashboard of
    // deploy/monitoring query is in the scrapes of these two real binaries.
    // A HelmReleaseSet whose one child the API server refuses (a replica count that is not
    // a number): the set's conditions are exported too.
    fleet.apply(&format!(
        r#"apiVersion: helm.flotilla.dev/v1alpha1
kind: HelmReleaseSet
metadata:
  name: refused
  namespace: {NS}
spec:
  clusterNames: [workload-a]
  template:
    spec:
      interval: 10m
      releaseName: refused
      targetNamespace: refused
      storageNamespace: refused
      install:
        createNamespace: true
        disableWait: true
      chart:
        spec:
          chart: hello
          version: "0.1.x"
          sourceRef:
            kind: HelmRepository
            name: examples
  valuesTemplate: |
    replicaCount: "many on {{{{ .ClusterName }}}}"
"#
    ))?;
    // (The certificate is renewed every 20 s here: its end is read again with each scrape.)
    let agent_scrape = wait::until(
        "the agent's metrics to show its current certificate's end",
        Duration::from_secs(30),
        || {
            let (agent_metrics, work) = (agent_metrics.clone(), work.clone());
            async move {
                let text = flotilla_tests::http::get(&agent_metrics, "/metrics")?;
                let (_, end) = agent_certificate(&work).await?;
                let stored = end.duration_since(SystemTime::UNIX_EPOCH)?.as_secs_f64();
                let exported = flotilla_tests::http::sample(
                    &text,
                    "flotilla_agent_certificate_expiry_timestamp_seconds",
                );
                Ok(exported
                    .is_some_and(|e| (e - stored).abs() <= 1.0)
                    .then_some(text))
            }
        },
    )
    .await?;
    let hub_scrape = wait::until(
        "the hub's metrics to count the connected, accepted cluster and the set",
        Duration::from_secs(30),
        || async {
            let text = fleet.hub_metrics()?;
            let connected = flotilla_tests::http::sample(
                &text,
                r#"flotilla_hub_managed_clusters{accepted="true",connected="true"}"#,
            );
            let sets = text.contains("flotilla_hub_helmreleasesets{");
            Ok((sets && connected == Some(1.0)).then_some(text))
        },
    )
    .await?;
    let queried = flotilla_tests::monitoring::queried_series()?;
    let missing = flotilla_tests::monitoring::missing(&queried, &[&agent_scrape, &hub_scrape]);
    assert!(
        missing.is_empty(),
        "deploy/monitoring queries series no binary exports: {missing:?}"
    );

    // Stopped past its certificate's end, the agent started with `run` says it must join
    // again, and stays away; `join` with a new token brings it back with the same key.
    fleet.stop_agent("workload-a")?;
    let (stale_serial, end) = agent_certificate(&work).await?;
    wait::until(
        "the ManagedCluster to show the agent gone",
        Duration::from_secs(30),
        || async {
            let mc = clusters.get("workload-a").await?;
            let available = mc.status.is_some_and(|s| {
                s.conditions
                    .is_true(flotilla_api::fleet::condition::AVAILABLE)
            });
            Ok((!available).then_some(()))
        },
    )
    .await?;
    if let Ok(rest) = end.duration_since(SystemTime::now()) {
        tokio::time::sleep(rest + Duration::from_secs(1)).await;
    }
    let log = fleet.workload("workload-a")?.agent_log().to_owned();
    let logged_before = std::fs::read_to_string(&log)?.len();
    fleet.start_agent_run("workload-a")?;
    let said = wait::until(
        "the agent to say its certificate expired",
        Duration::from_secs(30),
        || {
            let log = log.clone();
            async move {
                let text = std::fs::read_to_string(&log)?;
                let new = text.get(logged_before..).unwrap_or_default();
                Ok(new
                    .lines()
                    .find(|l| l.contains("the client certificate has expired"))
                    .map(str::to_owned))
            }
        },
    )
    .await?;
    assert!(
        said.contains("ERROR") && said.contains("flotilla-agent join"),
        "{said}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mc = clusters.get("workload-a").await?;
    assert!(
        !mc.status.is_some_and(|s| s
            .conditions
            .is_true(flotilla_api::fleet::condition::AVAILABLE)),
        "an expired certificate gets no session"
    );
    fleet.stop_agent("workload-a")?;
    let printed = fleet.flotilla(&[
        "token",
        "create",
        "--hub-url",
        &fleet.hub_url(),
        "--ttl",
        "10m",
        "--cluster-name",
        "workload-a",
    ])?;
    let (token, _) = flotilla_tests::fleet::parse_join_command(&printed)?;
    fleet.rejoin_agent("workload-a", &token).await?;
    let (serial, end) = agent_certificate(&work).await?;
    assert_ne!(serial, stale_serial);
    assert!(end > SystemTime::now());
    patch_message(&fleet, "hello-a", "after joining again")?;
    assert_eq!(
        applied(&fleet, &a, "hello-a", "after joining again")
            .await?
            .len(),
        5
    );

    // Neither the hub's nor the agent's debug log holds the Secret's value, the token or a
    // key.
    let agent_key = secret_key(&work, AGENT_NAMESPACE, "flotilla-agent-identity").await?;
    let ca_key = secret_key(
        &fleet.mgmt.client().await?,
        flotilla_tests::fleet::HUB_NAMESPACE,
        "flotilla-hub-ca",
    )
    .await?;
    let hub_log = std::fs::read_to_string(fleet.hub_log())?;
    let agent_log = std::fs::read_to_string(&log)?;
    assert!(
        hub_log.contains("DEBUG") && agent_log.contains("DEBUG"),
        "the logs are at debug level"
    );
    for (what, secret) in [
        ("the valuesFrom Secret's value", MARKER),
        ("the token", token.as_str()),
        ("the token's secret", &token[7..]),
        ("the agent's key", agent_key.as_str()),
        ("the hub CA's key", ca_key.as_str()),
    ] {
        assert!(!hub_log.contains(secret), "{what} is in the hub's log");
        assert!(!agent_log.contains(secret), "{what} is in the agent's log");
    }
    Ok(())
}

/// A line of the body of the PEM key `tls.key` of Secret `namespace/name`.
async fn secret_key(client: &kube::Client, namespace: &str, name: &str) -> anyhow::Result<String> {
    let secret = Api::<Secret>::namespaced(client.clone(), namespace)
        .get(name)
        .await?;
    let data = secret.data.unwrap_or_default();
    let pem = String::from_utf8(
        data.get("tls.key")
            .ok_or_else(|| anyhow::anyhow!("Secret {namespace}/{name} has no tls.key"))?
            .0
            .clone(),
    )?;
    pem.lines()
        .find(|l| !l.starts_with("-----") && l.len() > 16)
        .map(str::to_owned)
        .ok_or_else(|| anyhow::anyhow!("Secret {namespace}/{name}: tls.key has no PEM body"))
}

/// RFC 3339 in UTC, seconds, as Kubernetes writes times.
fn format_time(t: SystemTime) -> String {
    k8s_openapi::jiff::Timestamp::try_from(t)
        .expect("a time after 1970")
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}
