//! The hub–agent session end to end on real local clusters: the hub's session server
//! (`flotilla_hub::session`) and the agent's session client (`flotilla_agent::session`) in
//! this process, talking over real TLS on loopback, against real API servers.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use flotilla_agent::charts::LocalCharts;
use flotilla_agent::reconcile::Context;
use flotilla_agent::reconcile::plan_file;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::runtime::{Agent, AgentOptions};
use flotilla_agent::session::{
    self as agent_session, CaPin, HubAddress, Identity, JoinOptions, SessionError, SessionOptions,
};
use flotilla_api::ManagedCluster;
use flotilla_api::fleet::condition as fleet_condition;
use flotilla_core::agent::{Command, Report};
use flotilla_core::ids::{ChartDigest, ClusterId, PlanRevision};
use flotilla_core::meta::{Conditions as _, condition};
use flotilla_hub::link::{Links as _, ReportReceiver, TargetId, report_channel};
use flotilla_hub::session::{
    ChartArchives, MemoryArchives, NoArchives, SessionConfig, SessionHub, tokens,
};
use flotilla_hub::telemetry::ChartSent;
use flotilla_proto::v1::{self, agent_message, hub_client::HubClient, hub_message};
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use tokio::sync::mpsc;

const HUB_NAMESPACE: &str = "flotilla-system";
/// A value placed in a plan's values: it must appear in no log line.
const MARKER: &str = "flotilla-marker-7f3a91c2";

/// Every log line of this test process, at debug level for every crate (hub, agent, tonic,
/// h2, rustls, kube), captured once for all the tests of the binary.
fn logs() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("debug"))
            .with_ansi(false)
            .with_writer(move || LogWriter(writer.clone()))
            .finish();
        tracing::subscriber::set_global_default(subscriber)
            .expect("the first test installs the log capture");
        buffer
    })
}

struct LogWriter(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Fails when `secret` (named `what`) appears in the captured logs.
fn assert_never_logged(what: &str, secret: &str) {
    assert!(secret.len() >= 16, "{what}: too short to search for");
    let logs = logs()
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let text = String::from_utf8_lossy(&logs);
    assert!(
        text.contains("session up"),
        "the log capture saw the session"
    );
    assert!(!text.contains(secret), "{what} appears in a log line");
}

/// The first line of base64 of a PEM private key: what a leaked key would show.
fn key_material(pem: &str) -> String {
    pem.lines()
        .find(|l| !l.starts_with("-----") && l.len() >= 16)
        .expect("a PEM body")
        .to_owned()
}
const TIMEOUT: Duration = Duration::from_secs(60);

async fn install_managed_cluster_crd(client: &kube::Client) -> anyhow::Result<()> {
    let crd = flotilla_api::crd::all()
        .into_iter()
        .find(|c| c.spec.names.kind == "ManagedCluster")
        .expect("the ManagedCluster CRD is generated");
    let name = crd.metadata.name.clone().expect("generated CRDs are named");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        &name,
        &PatchParams::apply("flotilla-hub-tests"),
        &Patch::Apply(&crd),
    )
    .await?;
    wait::until(&format!("{name} to be Established"), TIMEOUT, || async {
        let crd = crds.get(&name).await?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .into_iter()
            .flatten()
            .any(|c| c.type_ == "Established" && c.status == "True");
        Ok(established.then_some(()))
    })
    .await?;
    // The CRD is served a moment after it is Established.
    let api: Api<ManagedCluster> = Api::all(client.clone());
    wait::until("ManagedClusters to be served", TIMEOUT, || async {
        Ok(api.list(&Default::default()).await.ok().map(|_| ()))
    })
    .await
}

async fn namespace(client: &kube::Client, name: &str) -> anyhow::Result<()> {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))?;
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

fn config(lifetime: Duration) -> SessionConfig {
    SessionConfig {
        namespace: HUB_NAMESPACE.into(),
        client_cert_lifetime: lifetime,
        heartbeat_interval: Duration::from_secs(1),
        heartbeat_timeout: Duration::from_secs(4),
        status_interval: Duration::from_secs(1),
        // The expired-token sweep only where a test looks at it.
        token_sweep_interval: Duration::from_secs(3600),
        ..SessionConfig::default()
    }
}

/// A hub on the management cluster `mgmt`, serving on loopback, with no chart archives.
async fn hub(
    mgmt: &kube::Client,
    lifetime: Duration,
) -> anyhow::Result<(SessionHub, ReportReceiver)> {
    hub_with(mgmt, lifetime, Arc::new(NoArchives)).await
}

/// A hub serving `archives` with `GetChart`.
async fn hub_with(
    mgmt: &kube::Client,
    lifetime: Duration,
    archives: Arc<dyn ChartArchives>,
) -> anyhow::Result<(SessionHub, ReportReceiver)> {
    hub_configured(mgmt, config(lifetime), archives).await
}

/// A hub with `config`.
async fn hub_configured(
    mgmt: &kube::Client,
    config: SessionConfig,
    archives: Arc<dyn ChartArchives>,
) -> anyhow::Result<(SessionHub, ReportReceiver)> {
    install_managed_cluster_crd(mgmt).await?;
    namespace(mgmt, HUB_NAMESPACE).await?;
    let (tx, rx) = report_channel();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hub = SessionHub::start(mgmt.clone(), config, listener, tx, archives).await?;
    Ok((hub, rx))
}

fn join_options(hub: &SessionHub, token: &str, pin: &str, cluster: &str, ns: &str) -> JoinOptions {
    JoinOptions {
        hub: HubAddress::parse(&format!("https://127.0.0.1:{}", hub.local_addr().port()))
            .expect("a valid URL"),
        token: Some(token.to_owned()),
        ca_pin: CaPin::parse(pin).expect("a valid pin"),
        cluster_name: cluster.to_owned(),
        namespace: ns.to_owned(),
        poll_interval: Duration::from_millis(300),
    }
}

async fn token(mgmt: &kube::Client, options: tokens::TokenOptions) -> anyhow::Result<String> {
    Ok(tokens::create(mgmt.clone(), HUB_NAMESPACE, &options)
        .await?
        .expose())
}

/// An auto-accepting any-cluster token good for `uses` joins (any number when `None`).
async fn auto_token(mgmt: &kube::Client, uses: Option<u32>) -> anyhow::Result<String> {
    token(
        mgmt,
        tokens::TokenOptions {
            auto_accept: true,
            uses,
            ..tokens::TokenOptions::new(tokens::TokenScope::AnyCluster)
        },
    )
    .await
}

fn refused(result: Result<Identity, SessionError>) -> String {
    match result {
        Err(SessionError::Refused { message }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

type RawSession = (
    mpsc::Sender<v1::AgentMessage>,
    tonic::Streaming<v1::HubMessage>,
);

/// A session opened by hand with `identity`'s certificate and `hello`: the Hello sent, the
/// inbound stream returned.
async fn open_session(
    identity: &Identity,
    cert_pem: &str,
    key_pem: &str,
    hello: v1::Hello,
) -> Result<RawSession, String> {
    let config = agent_session::tls::session_config(&identity.ca_pem, cert_pem, key_pem)
        .map_err(|e| e.to_string())?;
    let channel = agent_session::tls::channel(&identity.hub, config)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel(16);
    tx.send(v1::AgentMessage {
        kind: Some(agent_message::Kind::Hello(hello)),
    })
    .await
    .map_err(|e| e.to_string())?;
    let inbound = HubClient::new(channel)
        .session(tokio_stream::wrappers::ReceiverStream::new(rx))
        .await
        .map_err(|s| format!("{:?}: {}", s.code(), s.message()))?
        .into_inner();
    Ok((tx, inbound))
}

/// The plans a session receives before the hub says the resync is complete (pings
/// skipped).
async fn resync_upserts(
    inbound: &mut tonic::Streaming<v1::HubMessage>,
) -> Result<Vec<v1::PlanUpsert>, String> {
    let mut upserts = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(10), inbound.message()).await {
            Ok(Ok(Some(v1::HubMessage { kind: Some(kind) }))) => match kind {
                hub_message::Kind::PlanUpsert(u) => upserts.push(u),
                hub_message::Kind::ResyncComplete(_) => return Ok(upserts),
                hub_message::Kind::Ping(_) | hub_message::Kind::Pong(_) => {}
                other => return Err(format!("unexpected {other:?}")),
            },
            Ok(Ok(other)) => return Err(format!("expected a plan, got {other:?}")),
            Ok(Err(s)) => return Err(format!("{:?}: {}", s.code(), s.message())),
            Err(_) => return Err("no ResyncComplete".into()),
        }
    }
}

/// The next plan a session receives (pings skipped).
async fn next_upsert(
    inbound: &mut tonic::Streaming<v1::HubMessage>,
) -> anyhow::Result<v1::PlanUpsert> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| anyhow::anyhow!("no plan within 10 s"))??;
        match m.and_then(|m| m.kind) {
            Some(hub_message::Kind::PlanUpsert(u)) => return Ok(u),
            Some(hub_message::Kind::Ping(_) | hub_message::Kind::Pong(_)) => {}
            other => anyhow::bail!("expected a plan, got {other:?}"),
        }
    }
}

/// A session opened by hand with `identity`'s certificate and an empty Hello: the Hello
/// sent, the inbound stream returned once the resync completed.
async fn raw_session(
    identity: &Identity,
    cert_pem: &str,
    key_pem: &str,
    cluster_uid: &str,
) -> Result<RawSession, String> {
    let (tx, mut inbound) = open_session(
        identity,
        cert_pem,
        key_pem,
        v1::Hello {
            cluster_uid: cluster_uid.to_owned(),
            ..v1::Hello::default()
        },
    )
    .await?;
    // The resync of an empty Hello: ResyncComplete first.
    match tokio::time::timeout(Duration::from_secs(10), inbound.message()).await {
        Ok(Ok(Some(v1::HubMessage {
            kind: Some(hub_message::Kind::ResyncComplete(_)),
        }))) => Ok((tx, inbound)),
        Ok(Ok(other)) => Err(format!("expected ResyncComplete, got {other:?}")),
        Ok(Err(s)) => Err(format!("{:?}: {}", s.code(), s.message())),
        Err(_) => Err("no ResyncComplete".into()),
    }
}

#[tokio::test]
async fn registration_takes_a_valid_token_waits_for_acceptance_and_refuses_wrong_expired_used_up_tokens_foreign_certificates_a_wrong_ca_pin_and_a_deleted_clusters_certificate()
-> anyhow::Result<()> {
    // The management cluster is also the "workload" cluster of the agents here: each agent
    // keeps its identity in its own namespace.
    logs();
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-join")).await?;
    let mgmt = mgmt_cluster.client().await?;
    let (hub, _reports) = hub(&mgmt, Duration::from_secs(3600)).await?;
    let pin = hub.ca().pin().to_string();
    let clusters: Api<ManagedCluster> = Api::all(mgmt.clone());
    for ns in ["auto", "hand", "used-1", "used-2", "wrong", "pinned"] {
        namespace(&mgmt, ns).await?;
    }

    // Auto-accepted: the certificate comes back at once and names the cluster.
    let auto = auto_token(&mgmt, None).await?;
    let identity =
        agent_session::join(&mgmt, &join_options(&hub, &auto, &pin, "auto", "auto")).await?;
    assert_eq!(identity.cluster, "auto");
    let mc = clusters.get("auto").await?;
    assert!(mc.spec.accepted);
    let status = mc.status.expect("status written at registration");
    assert!(status.cluster_uid.is_some());
    assert!(status.certificate_expiry.is_some());
    assert!(
        status.conditions.is_true(fleet_condition::JOINED),
        "{:?}",
        status.conditions
    );
    // The key stayed in the cluster: the hub's side has no Secret holding it.
    let hub_secrets = Api::<Secret>::namespaced(mgmt.clone(), HUB_NAMESPACE)
        .list(&Default::default())
        .await?;
    for s in &hub_secrets.items {
        for v in s.data.iter().flat_map(|d| d.values()) {
            assert_ne!(v.0, identity.key_pem.as_bytes());
        }
    }

    // Accepted by hand: pending until spec.accepted.
    let by_hand = token(
        &mgmt,
        tokens::TokenOptions::new(tokens::TokenScope::AnyCluster),
    )
    .await?;
    let join = tokio::spawn({
        let options = join_options(&hub, &by_hand, &pin, "hand", "hand");
        let client = mgmt.clone();
        async move { agent_session::join(&client, &options).await }
    });
    let mc = wait::until("ManagedCluster hand to be created", TIMEOUT, || async {
        Ok(clusters.get_opt("hand").await?)
    })
    .await?;
    assert!(!mc.spec.accepted);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !join.is_finished(),
        "the agent must wait while the cluster is not accepted"
    );
    // What `flotilla cluster accept hand` does.
    flotilla_hub::session::registry::set_accepted(mgmt.clone(), "hand", true).await?;
    let hand = tokio::time::timeout(TIMEOUT, join).await???;
    assert_eq!(hand.cluster, "hand");

    // A wrong secret, a malformed token, an expired one and a used-up one.
    let wrong = format!("{}.0000000000000000", &by_hand[..6]);
    let message = refused(
        agent_session::join(&mgmt, &join_options(&hub, &wrong, &pin, "wrong", "wrong")).await,
    );
    assert!(message.contains("not valid"), "{message}");
    assert!(!message.contains("0000000000000000"), "{message}");
    let message = refused(
        agent_session::join(
            &mgmt,
            &join_options(&hub, "not-a-token", &pin, "wrong", "wrong"),
        )
        .await,
    );
    assert!(message.contains("malformed"), "{message}");
    let expiring = token(
        &mgmt,
        tokens::TokenOptions {
            ttl: Some(Duration::from_secs(1)),
            auto_accept: true,
            ..tokens::TokenOptions::new(tokens::TokenScope::AnyCluster)
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let message = refused(
        agent_session::join(
            &mgmt,
            &join_options(&hub, &expiring, &pin, "wrong", "wrong"),
        )
        .await,
    );
    assert!(message.contains("expired"), "{message}");
    let once = auto_token(&mgmt, Some(1)).await?;
    agent_session::join(&mgmt, &join_options(&hub, &once, &pin, "used-1", "used-1")).await?;
    let message = refused(
        agent_session::join(&mgmt, &join_options(&hub, &once, &pin, "used-2", "used-2")).await,
    );
    assert!(message.contains("used up"), "{message}");
    for refused_name in ["wrong", "used-2"] {
        assert!(
            clusters.get_opt(refused_name).await?.is_none(),
            "{refused_name} was created"
        );
    }

    // A wrong CA pin: the agent refuses the hub before sending anything.
    let other_ca = flotilla_hub::session::HubCa::generate("not-the-hub")?;
    let started = Instant::now();
    let err = agent_session::join(
        &mgmt,
        &join_options(&hub, &auto, other_ca.pin().as_str(), "pinned", "pinned"),
    )
    .await
    .expect_err("a wrong pin must be refused");
    assert!(err.to_string().contains("CA pin"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
    assert!(clusters.get_opt("pinned").await?.is_none());

    let mgmt_uid = agent_session::cluster_uid(&mgmt).await?;

    // The cluster's own certificate, presented from another cluster (another kube-system
    // UID), is refused.
    let elsewhere = raw_session(
        &identity,
        &identity.cert_pem,
        &identity.key_pem,
        "00000000-0000-0000-0000-000000000000",
    )
    .await
    .expect_err("a certificate used from another cluster is refused");
    assert!(elsewhere.contains("another cluster"), "{elsewhere}");

    // A client certificate not signed by the hub CA, naming an accepted cluster.
    let foreign_ca = flotilla_hub::session::HubCa::generate("foreign")?;
    let key = rcgen::KeyPair::generate()?;
    let csr = rcgen::CertificateParams::default()
        .serialize_request(&key)?
        .pem()?;
    let uid = clusters.get("auto").await?.metadata.uid.expect("a uid");
    let foreign = foreign_ca.sign_client(
        &csr,
        &ClusterId::new("auto")?,
        &uid,
        Duration::from_secs(3600),
    )?;
    let result = raw_session(&identity, &foreign.pem, &key.serialize_pem(), &mgmt_uid).await;
    assert!(result.is_err(), "a foreign certificate opened a session");
    // The same hub, with the cluster's own certificate, opens one (the control).
    let (_tx, mut inbound) =
        raw_session(&identity, &identity.cert_pem, &identity.key_pem, &mgmt_uid)
            .await
            .map_err(anyhow::Error::msg)?;

    // An agent that stops answering is dropped after the heartbeat timeout (4 s here).
    let (_silent_tx, mut silent) = raw_session(&hand, &hand.cert_pem, &hand.key_pem, &mgmt_uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(15), async {
        loop {
            match silent.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return tonic::Code::Ok,
                Err(s) => return s.code(),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("a silent agent's session was not ended"))?;
    assert_eq!(ended, tonic::Code::DeadlineExceeded);
    assert!(
        started.elapsed() >= Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );

    // Deleting the ManagedCluster ends its session at once and refuses its certificate.
    clusters.delete("auto", &Default::default()).await?;
    let started = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(5), async {
        loop {
            match inbound.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return "closed".to_owned(),
                Err(s) => return s.message().to_owned(),
            }
        }
    })
    .await
    .map_err(|_| anyhow::anyhow!("the session outlived its ManagedCluster by 5 s"))?;
    assert!(started.elapsed() < Duration::from_secs(5), "{ended}");
    let refusal = raw_session(&identity, &identity.cert_pem, &identity.key_pem, &mgmt_uid)
        .await
        .expect_err("a deleted cluster's certificate is refused");
    assert!(refusal.contains("PermissionDenied"), "{refusal}");

    // No token, no key, at any level.
    for (what, t) in [
        ("the auto-accept token", &auto),
        ("the by-hand token", &by_hand),
        ("the one-use token", &once),
    ] {
        assert_never_logged(what, t);
        assert_never_logged(what, &t[7..]);
    }
    assert_never_logged("an agent key", &key_material(&identity.key_pem));
    assert_never_logged("an agent key", &key_material(&hand.key_pem));
    let ca_secret = Api::<Secret>::namespaced(mgmt.clone(), HUB_NAMESPACE)
        .get("flotilla-hub-ca")
        .await?;
    let ca_key = String::from_utf8(ca_secret.data.expect("data")["tls.key"].0.clone())?;
    assert_never_logged("the hub CA key", &key_material(&ca_key));

    hub.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_plan_sent_through_the_hubs_link_reaches_the_agent_on_its_cluster_its_status_comes_back_also_after_a_hub_restart_and_another_cluster_can_neither_receive_nor_report_it()
-> anyhow::Result<()> {
    logs();
    let mut clusters = Cluster::start_many("session-e2e", 2).await?;
    let work_cluster = clusters.pop().expect("two clusters");
    let mgmt_cluster = clusters.pop().expect("two clusters");
    let mgmt = mgmt_cluster.client().await?;
    let work = work_cluster.client().await?;
    // Short certificates: the agent renews during the test.
    let (hub, mut reports) = hub(&mgmt, Duration::from_secs(24)).await?;
    let pin = hub.ca().pin().to_string();
    namespace(&work, "other").await?;
    let auto = auto_token(&mgmt, Some(2)).await?;
    let edge =
        agent_session::join(&work, &join_options(&hub, &auto, &pin, "edge", "default")).await?;
    let other =
        agent_session::join(&work, &join_options(&hub, &auto, &pin, "other", "other")).await?;
    let edge_id = ClusterId::new("edge")?;
    let work_uid = agent_session::cluster_uid(&work).await?;
    let other_id = ClusterId::new("other")?;

    // The agent runtime on the workload cluster, with its session.
    let charts = Arc::new(LocalCharts::new());
    let ctx = Context::new(work.clone(), "default", Arc::new(ChartRenderer::default()));
    let (handle, agent_reports) =
        Agent::start(ctx, charts.clone(), AgentOptions::default()).await?;
    let stop = tokio_util::sync::CancellationToken::new();
    let session = tokio::spawn(agent_session::run(
        work.clone(),
        edge.clone(),
        handle.clone(),
        agent_reports,
        SessionOptions {
            namespace: "default".into(),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(4),
            backoff_min: Duration::from_millis(200),
            backoff_max: Duration::from_secs(2),
            ..SessionOptions::default()
        },
        stop.clone(),
    ));
    let links = hub.links();
    let link = wait::until("the edge agent to connect", TIMEOUT, || async {
        Ok(links
            .link(&TargetId::Cluster(edge_id.clone()))
            .filter(|l| l.connected()))
    })
    .await?;

    // Cluster "other" holds a session of its own.
    let (other_tx, mut other_inbound) =
        raw_session(&other, &other.cert_pem, &other.key_pem, &work_uid)
            .await
            .map_err(anyhow::Error::msg)?;

    // A plan for edge, through the link.
    let text = "apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: demo
  namespace: default
  generation: 1
spec:
  interval: 1h
  timeout: 30s
  values:
    marker: flotilla-marker-7f3a91c2
chart:
  path: ok
";
    let charts_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/charts");
    let file = plan_file::parse(std::path::Path::new("plan.yaml"), text, &charts_dir)?;
    charts.insert(file.plan.chart.digest.clone(), file.chart);
    let key = file.plan.object.key();
    assert_eq!(file.plan.values["marker"], MARKER);
    link.send(Command::Upsert(Box::new(file.plan.clone())))?;

    // Its status comes back, from edge.
    let status = tokio::time::timeout(Duration::from_secs(120), async {
        loop {
            let Some(r) = reports.recv().await else {
                anyhow::bail!("the report sink closed");
            };
            assert_eq!(r.target, TargetId::Cluster(edge_id.clone()), "{r:?}");
            if let Report::Status(s) = r.report
                && s.status.conditions.is_true(condition::READY)
            {
                return Ok(*s);
            }
        }
    })
    .await??;
    assert_eq!(status.object.key(), key);
    Api::<Deployment>::namespaced(work.clone(), "default")
        .get("demo")
        .await?;
    assert!(link.held().iter().any(|h| h.object == key));

    // A preview of the plan with a changed value, through the same link and session: the
    // agent (its Hello lists "preview") answers with the value path and no object change,
    // and holds the plan it held.
    let mut changed = file.plan.clone();
    changed.values["marker"] = serde_json::json!("changed");
    changed.config_digest = flotilla_core::digest::config_digest(&changed.values);
    let edge_target = TargetId::Cluster(edge_id.clone());
    let diff = flotilla_hub::previews::ask(
        reports.previews(),
        link.as_ref(),
        &edge_target,
        changed.clone(),
        Duration::from_secs(60),
    )
    .await
    .map_err(anyhow::Error::msg)?;
    assert_eq!(
        diff.values
            .iter()
            .map(|v| v.path.as_str())
            .collect::<Vec<_>>(),
        ["marker"],
        "{diff:#?}"
    );
    assert_eq!(diff.counts().1, 0, "{diff:#?}");
    assert!(!serde_json::to_string(&diff)?.contains(MARKER));
    assert!(
        link.held()
            .iter()
            .any(|h| h.object == key && h.revision == file.plan.revision)
    );
    // Cluster other's session said nothing of previews in its Hello (an older agent): the
    // hub answers for it, and sends it nothing.
    let other_link = links
        .link(&TargetId::Cluster(other_id.clone()))
        .expect("other is accepted");
    let unsupported = flotilla_hub::previews::ask(
        reports.previews(),
        other_link.as_ref(),
        &TargetId::Cluster(other_id.clone()),
        changed,
        Duration::from_secs(60),
    )
    .await
    .expect_err("an older agent cannot preview");
    assert_eq!(
        unsupported.to_string(),
        "the agent of cluster other does not support previews (it is older than this hub); upgrade the agent."
    );

    // Other received nothing of edge's plan...
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while let Ok(m) = tokio::time::timeout_at(deadline, other_inbound.message()).await {
        let m = m?.expect("the session stays open");
        assert!(
            matches!(
                m.kind,
                Some(hub_message::Kind::Ping(_) | hub_message::Kind::Pong(_))
            ),
            "cluster other received {m:?}"
        );
    }
    // ...and cannot report for it: the hub drops the report, tagged or not.
    let mut forged: flotilla_core::agent::StatusReport = status.clone();
    forged.seq += 100;
    other_tx
        .send(flotilla_proto::session::report_message(
            Report::Status(Box::new(forged)),
            &flotilla_hub::session::cluster_status::now(),
        ))
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(r) = tokio::time::timeout_at(deadline, reports.recv()).await {
        let r = r.expect("the sink stays open");
        assert_ne!(r.target, TargetId::Cluster(other_id.clone()), "{r:?}");
        if let Report::Status(s) = &r.report {
            assert!(
                s.seq < status.seq + 100,
                "the forged report was forwarded: {r:?}"
            );
        }
    }

    // ...nor fetch its chart.
    let other_channel = agent_session::tls::channel(
        &other.hub,
        agent_session::tls::session_config(&other.ca_pem, &other.cert_pem, &other.key_pem)?,
    )
    .await?;
    let refused_chart = HubClient::new(other_channel)
        .get_chart(v1::GetChartRequest {
            digest: file.plan.chart.digest.to_string(),
            offset: 0,
        })
        .await
        .expect_err("another cluster's chart is not served");
    assert_eq!(refused_chart.code(), tonic::Code::NotFound);
    assert!(
        refused_chart
            .message()
            .contains("not in a plan of cluster other"),
        "{}",
        refused_chart.message()
    );

    // The ManagedCluster shows the session.
    let mcs: Api<ManagedCluster> = Api::all(mgmt.clone());
    wait::until(
        "edge's status to show its session and plan",
        TIMEOUT,
        || async {
            let s = mcs.get("edge").await?.status.unwrap_or_default();
            Ok((s.conditions.is_true(fleet_condition::AVAILABLE)
                && s.plans_held == Some(1)
                && s.last_heartbeat_time.is_some())
            .then_some(()))
        },
    )
    .await?;

    // The certificate was renewed over the session (24 s lifetime, renewed at two thirds).
    let first_cert = edge.cert_pem.clone();
    wait::until("the agent to renew its certificate", TIMEOUT, || async {
        let stored = agent_session::identity::load(&work, "default").await?;
        Ok(stored.cert_pem.filter(|c| *c != first_cert).map(|_| ()))
    })
    .await?;

    // The hub goes away and comes back on the same address (the same CA, from its
    // Secret): the agent reconnects by itself with its renewed certificate. The plan sent
    // again through the new hub's link is a no-op for the agent (no new Helm revision), and
    // its latest status comes back.
    let history_before = status.status.history.iter().map(|s| s.version).max();
    let port = hub.local_addr().port();
    hub.stop().await;
    let (tx, mut reports) = report_channel();
    let listener = wait::until("the hub's port to be free again", TIMEOUT, || async {
        Ok(tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .ok())
    })
    .await?;
    let hub = SessionHub::start(
        mgmt.clone(),
        config(Duration::from_secs(24)),
        listener,
        tx,
        Arc::new(NoArchives),
    )
    .await?;
    let links = hub.links();
    let link = wait::until("the edge agent to reconnect", TIMEOUT, || async {
        Ok(links
            .link(&TargetId::Cluster(edge_id.clone()))
            .filter(|l| l.connected()))
    })
    .await?;
    link.send(Command::Upsert(Box::new(file.plan.clone())))?;
    let again = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let Some(r) = reports.recv().await else {
                anyhow::bail!("the report sink closed");
            };
            if let Report::Status(s) = r.report
                && s.object.key() == key
            {
                return Ok(*s);
            }
        }
    })
    .await??;
    assert_eq!(again.plan_revision, status.plan_revision);
    assert_eq!(
        again.status.history.iter().map(|s| s.version).max(),
        history_before,
        "no new Helm revision"
    );

    // Un-accepting edge ends its session within seconds.
    mcs.patch(
        "edge",
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"accepted": false}})),
    )
    .await?;
    let started = Instant::now();
    let mailbox = links.mailbox(&edge_id).expect("edge's mailbox");
    wait::until("edge's session to end", Duration::from_secs(10), || async {
        Ok((!flotilla_hub::link::AgentLink::connected(&*mailbox)).then_some(()))
    })
    .await?;
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    assert!(links.link(&TargetId::Cluster(edge_id.clone())).is_none());

    // Neither the values nor the token nor the keys are in any log line.
    assert_never_logged("a plan value", MARKER);
    assert_never_logged("the token", &auto);
    assert_never_logged("the token's secret", &auto[7..]);
    assert_never_logged("edge's key", &key_material(&edge.key_pem));
    assert_never_logged("other's key", &key_material(&other.key_pem));

    stop.cancel();
    let _ = session.await;
    hub.stop().await;
    drop(work_cluster);
    drop(mgmt_cluster);
    Ok(())
}

#[tokio::test]
async fn forty_clusters_redeeming_one_token_at_once_each_spend_one_use_a_wrong_secret_among_them_is_refused_and_the_next_cluster_finds_it_used_up()
-> anyhow::Result<()> {
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-redeem")).await?;
    let mgmt = mgmt_cluster.client().await?;
    namespace(&mgmt, HUB_NAMESPACE).await?;
    let presented = auto_token(&mgmt, Some(40)).await?;
    let id = presented.split('.').next().unwrap_or_default().to_owned();
    let wrong = format!("{id}.0000000000000000");
    let redemptions = Arc::new(tokens::Redemptions::new(mgmt.clone(), HUB_NAMESPACE));
    let requests = (0..40)
        .map(|i| (presented.clone(), format!("c-{i}")))
        .chain(std::iter::once((wrong, "intruder".to_owned())));
    let outcomes = futures::future::join_all(requests.map(|(presented, cluster)| {
        let redemptions = redemptions.clone();
        async move {
            (
                cluster.clone(),
                redemptions.redeem(&presented, &cluster).await,
            )
        }
    }))
    .await;
    for (cluster, outcome) in &outcomes {
        match (cluster.as_str(), outcome) {
            ("intruder", Err(tokens::TokenError::Invalid { .. })) => {}
            ("intruder", other) => panic!("a wrong secret was not refused: {other:?}"),
            (_, Ok(grant)) => assert!(grant.auto_accept, "{cluster}"),
            (_, Err(e)) => panic!("{cluster} was refused: {e}"),
        }
    }
    // A cluster asking again (an agent retrying) spends nothing; a new one finds none left.
    redemptions.redeem(&presented, "c-7").await?;
    let err = redemptions
        .redeem(&presented, "c-40")
        .await
        .expect_err("the 41st cluster is refused");
    assert!(matches!(err, tokens::TokenError::UsedUp { .. }), "{err}");
    let secret = Api::<Secret>::namespaced(mgmt.clone(), HUB_NAMESPACE)
        .get(&format!("{}{id}", tokens::SECRET_PREFIX))
        .await?;
    let data = secret.data.unwrap_or_default();
    let text = |key: &str| String::from_utf8(data[key].0.clone()).expect("text");
    assert_eq!(text("usages-remaining"), "0");
    let mut registered: Vec<String> = text("registered-clusters")
        .split(',')
        .map(str::to_owned)
        .collect();
    registered.sort();
    let mut expected: Vec<String> = (0..40).map(|i| format!("c-{i}")).collect();
    expected.sort();
    assert_eq!(registered, expected);
    Ok(())
}

/// A TCP proxy on loopback to `upstream`: forwards both ways while `flowing` holds true and
/// holds every byte (connections stay open) while it is false, as a hub that stops
/// answering. Counts the connections it accepts.
async fn stalling_proxy(
    upstream: std::net::SocketAddr,
    flowing: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<(
    std::net::SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::task::JoinHandle<()>,
)> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    async fn pipe(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        mut flowing: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut buf = vec![0u8; 16 << 10];
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            if flowing.wait_for(|f| *f).await.is_err() {
                break;
            }
            if to.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        // A close is held too: a silent hub does not hang up either.
        let _ = flowing.wait_for(|f| *f).await;
        let _ = to.shutdown().await;
    }

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    let task = tokio::spawn(async move {
        while let Ok((down, _)) = listener.accept().await {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let Ok(up) = tokio::net::TcpStream::connect(upstream).await else {
                continue;
            };
            let (down_read, down_write) = down.into_split();
            let (up_read, up_write) = up.into_split();
            tokio::spawn(pipe(down_read, up_write, flowing.clone()));
            tokio::spawn(pipe(up_read, down_write, flowing.clone()));
        }
    });
    Ok((addr, accepted, task))
}

#[tokio::test]
async fn an_agent_whose_hub_stops_answering_drops_the_session_within_its_heartbeat_timeout_and_reconnects_and_gets_its_plans_when_the_hub_answers_again()
-> anyhow::Result<()> {
    logs();
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-silent")).await?;
    let mgmt = mgmt_cluster.client().await?;
    let (hub, _reports) = hub(&mgmt, Duration::from_secs(3600)).await?;
    let pin = hub.ca().pin().to_string();
    let auto = auto_token(&mgmt, None).await?;
    let mut identity =
        agent_session::join(&mgmt, &join_options(&hub, &auto, &pin, "quiet", "default")).await?;
    // The session goes through the proxy (the certificate's SAN 127.0.0.1 still holds).
    let (flowing_tx, flowing) = tokio::sync::watch::channel(true);
    let (proxy, accepted, proxy_task) = stalling_proxy(hub.local_addr(), flowing).await?;
    identity.hub = HubAddress::parse(&format!("https://{proxy}"))?;

    // The agent: pings every 500 ms, gives up on a silent hub after 2 s.
    let heartbeat_timeout = Duration::from_secs(2);
    let (handle, reports, mut external) = flotilla_agent::runtime::external();
    let (acked_tx, mut acked) = mpsc::unbounded_channel();
    let stop = tokio_util::sync::CancellationToken::new();
    let session = tokio::spawn(agent_session::run(
        mgmt.clone(),
        identity,
        handle,
        reports,
        SessionOptions {
            namespace: "default".into(),
            heartbeat_interval: Duration::from_millis(500),
            heartbeat_timeout,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
            acked: Some(acked_tx),
            ..SessionOptions::default()
        },
        stop.clone(),
    ));
    let commands = tokio::spawn(async move { while external.recv().await.is_some() {} });
    let id = ClusterId::new("quiet")?;
    let links = hub.links();
    let link = wait::until("the agent to connect", TIMEOUT, || async {
        Ok(links
            .link(&TargetId::Cluster(id.clone()))
            .filter(|l| l.connected()))
    })
    .await?;
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);

    // The hub stops answering (its connection stays open, nothing comes back). The agent
    // notices within its heartbeat timeout (plus a ping interval) and dials again: a new
    // connection at the proxy.
    flowing_tx.send_replace(false);
    let silent_since = Instant::now();
    let charts_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/charts");
    let file = plan_file::parse(
        std::path::Path::new("plan.yaml"),
        "apiVersion: helm.toolkit.fluxcd.io/v2
kind: HelmRelease
metadata:
  name: while-silent
  namespace: default
  generation: 1
spec:
  interval: 1h
chart:
  path: ok
",
        &charts_dir,
    )?;
    // A plan sent meanwhile waits in the cluster's mailbox.
    link.send(Command::Upsert(Box::new(file.plan.clone())))?;
    wait::until(
        "the agent to dial again",
        Duration::from_secs(10),
        || async { Ok((accepted.load(std::sync::atomic::Ordering::SeqCst) >= 2).then_some(())) },
    )
    .await?;
    let noticed = silent_since.elapsed();
    assert!(
        noticed >= heartbeat_timeout - Duration::from_secs(1)
            && noticed <= heartbeat_timeout + Duration::from_secs(3),
        "the agent dialled again {noticed:?} after the hub went silent (heartbeat timeout {heartbeat_timeout:?})"
    );
    assert!(
        acked.try_recv().is_err(),
        "nothing reaches the agent while the hub is silent"
    );

    // The hub answers again: the agent's session is back and the plan sent meanwhile
    // arrives and is acknowledged.
    flowing_tx.send_replace(true);
    let ack = tokio::time::timeout(Duration::from_secs(30), acked.recv())
        .await
        .map_err(|_| anyhow::anyhow!("the plan sent while the hub was silent never arrived"))?
        .ok_or_else(|| anyhow::anyhow!("the session ended"))?;
    assert_eq!(ack.object, file.plan.object.key());
    wait::until("the agent to be connected again", TIMEOUT, || async {
        Ok(link.connected().then_some(()))
    })
    .await?;

    stop.cancel();
    let _ = session.await;
    commands.abort();
    proxy_task.abort();
    hub.stop().await;
    drop(mgmt_cluster);
    Ok(())
}

#[tokio::test]
async fn a_plan_carries_its_chart_archive_to_an_agent_that_holds_no_copy_once_and_never_one_its_hello_lists_nor_one_too_large()
-> anyhow::Result<()> {
    logs();
    let cluster = Cluster::start(ClusterOptions::named("session-charts")).await?;
    let client = cluster.client().await?;
    // Chart X: a real chart archive, small. Chart Y: larger than one GetChart chunk.
    let text = |name: &str| {
        format!(
            "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  interval: 1h\nchart:\n  path: ok\n"
        )
    };
    let charts_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/charts");
    let parse = |name: &str| -> anyhow::Result<plan_file::PlanFile> {
        Ok(plan_file::parse(
            std::path::Path::new("plan.yaml"),
            &text(name),
            &charts_dir,
        )?)
    };
    let a = parse("a")?;
    let x = a.plan.chart.digest.clone();
    let big: Vec<u8> = (0..300u32 << 10).map(|i| (i % 251) as u8).collect();
    let y = ChartDigest::of_bytes(&big);
    let archives = MemoryArchives::of([a.archive.clone(), big.clone()]);
    let (hub, _reports) = hub_with(&client, Duration::from_secs(3600), Arc::new(archives)).await?;
    let metrics = hub.metrics().clone();
    let sent = || {
        (
            metrics.charts_sent(ChartSent::WithPlan),
            metrics.charts_sent(ChartSent::GetChart),
        )
    };
    let pin = hub.ca().pin().to_string();
    let auto = auto_token(&client, Some(1)).await?;
    let edge =
        agent_session::join(&client, &join_options(&hub, &auto, &pin, "edge", "default")).await?;
    let uid = agent_session::cluster_uid(&client).await?;
    let edge_id = ClusterId::new("edge")?;
    let links = hub.links();
    let link = wait::until("edge's link", TIMEOUT, || async {
        Ok(links.link(&TargetId::Cluster(edge_id.clone())))
    })
    .await?;
    // Three plans while no agent is connected: a and c on chart X, b on chart Y.
    let mut b = parse("b")?.plan;
    b.chart.digest = y.clone();
    let c = parse("c")?.plan;
    for plan in [&a.plan, &b, &c] {
        link.send(Command::Upsert(Box::new(plan.clone())))?;
    }
    let hello = |cached: &[&ChartDigest]| v1::Hello {
        cluster_uid: uid.clone(),
        cached_chart_digests: cached.iter().map(|d| d.to_string()).collect(),
        ..v1::Hello::default()
    };
    let by_name = |upserts: Vec<v1::PlanUpsert>| -> std::collections::BTreeMap<String, usize> {
        upserts
            .into_iter()
            .map(|u| {
                let name = u
                    .plan
                    .and_then(|p| p.object)
                    .map(|o| o.name)
                    .unwrap_or_default();
                (name, u.chart_archive.len())
            })
            .collect()
    };

    // Session 1, a Hello listing no chart: X goes once, with the first of its plans; Y,
    // too large, goes with none (GetChart).
    let (tx, mut inbound) = open_session(&edge, &edge.cert_pem, &edge.key_pem, hello(&[]))
        .await
        .map_err(anyhow::Error::msg)?;
    let upserts = resync_upserts(&mut inbound)
        .await
        .map_err(anyhow::Error::msg)?;
    let first = upserts
        .iter()
        .find(|u| {
            u.plan
                .as_ref()
                .is_some_and(|p| p.object.as_ref().is_some_and(|o| o.name == "a"))
        })
        .expect("plan a sent");
    assert_eq!(
        first.chart_archive.as_ref(),
        a.archive.as_slice(),
        "chart X's archive, whole"
    );
    assert_eq!(
        by_name(upserts),
        [
            ("a".to_owned(), a.archive.len()),
            ("b".to_owned(), 0),
            ("c".to_owned(), 0)
        ]
        .into()
    );
    assert_eq!(sent(), (1, 0));
    // Y fetched with GetChart, to its end: a new plan on Y comes without it.
    let channel = agent_session::tls::channel(
        &edge.hub,
        agent_session::tls::session_config(&edge.ca_pem, &edge.cert_pem, &edge.key_pem)?,
    )
    .await?;
    let mut stream = HubClient::new(channel)
        .get_chart(v1::GetChartRequest {
            digest: y.to_string(),
            offset: 0,
        })
        .await?
        .into_inner();
    let mut fetched = Vec::new();
    while let Some(chunk) = stream.message().await? {
        fetched.extend_from_slice(&chunk.data);
    }
    assert_eq!(fetched, big);
    wait::until("the GetChart transfer counted", TIMEOUT, || async {
        Ok((sent().1 == 1).then_some(()))
    })
    .await?;
    let mut b2 = b.clone();
    b2.revision = PlanRevision::new(b.revision.get() + 1);
    link.send(Command::Upsert(Box::new(b2.clone())))?;
    assert_eq!(
        next_upsert(&mut inbound).await?.chart_archive.len(),
        0,
        "Y was served"
    );
    drop((tx, inbound));

    // Session 2, a Hello listing Y only (its cache lost X): the hub's memory of what it
    // sent gives way to the Hello; X goes again, once.
    let (tx, mut inbound) = open_session(&edge, &edge.cert_pem, &edge.key_pem, hello(&[&y]))
        .await
        .map_err(anyhow::Error::msg)?;
    let upserts = by_name(
        resync_upserts(&mut inbound)
            .await
            .map_err(anyhow::Error::msg)?,
    );
    assert_eq!(
        upserts.values().filter(|n| **n > 0).count(),
        1,
        "{upserts:?}"
    );
    assert_eq!(upserts["b"], 0);
    assert_eq!(sent().0, 2);
    drop((tx, inbound));

    // Session 3, a Hello listing both: no archive at all.
    let (tx, mut inbound) = open_session(&edge, &edge.cert_pem, &edge.key_pem, hello(&[&x, &y]))
        .await
        .map_err(anyhow::Error::msg)?;
    let upserts = by_name(
        resync_upserts(&mut inbound)
            .await
            .map_err(anyhow::Error::msg)?,
    );
    assert_eq!(upserts.len(), 3);
    assert!(upserts.values().all(|n| *n == 0), "{upserts:?}");
    assert_eq!(sent().0, 2);
    wait::until("the earlier sessions counted down", TIMEOUT, || async {
        Ok((metrics.sessions() == 1).then_some(()))
    })
    .await?;
    drop((tx, inbound));

    // A Hello with a malformed digest is refused, naming it.
    let mut bad = hello(&[&x]);
    bad.cached_chart_digests.push("md5:0123".into());
    let (_tx, mut inbound) = open_session(&edge, &edge.cert_pem, &edge.key_pem, bad)
        .await
        .map_err(anyhow::Error::msg)?;
    let refused = loop {
        match inbound.message().await {
            Err(s) => break s,
            Ok(Some(_)) => {}
            Ok(None) => anyhow::bail!("the session ended without an error"),
        }
    };
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert!(
        refused.message().contains("hello.cachedChartDigests[1]"),
        "{}",
        refused.message()
    );
    hub.stop().await;
    Ok(())
}

// Registration identity, revocation and expiry (issue 29, points 3 and 4).

/// `sha256:<hex>` of the public key of the PEM private key `key_pem`.
fn key_fingerprint(key_pem: &str) -> anyhow::Result<String> {
    use rcgen::PublicKeyData as _;
    let key = rcgen::KeyPair::from_pem(key_pem)?;
    Ok(
        flotilla_hub::session::pki::KeyFingerprint::of_spki(&key.subject_public_key_info())
            .to_string(),
    )
}

/// A CSR for the PEM private key `key_pem`.
fn csr_of(key_pem: &str) -> anyhow::Result<String> {
    let key = rcgen::KeyPair::from_pem(key_pem)?;
    Ok(rcgen::CertificateParams::default()
        .serialize_request(&key)?
        .pem()?)
}

/// Pings the hub every second on `tx` (a raw session stays up past the heartbeat
/// timeout), until the session's sender is gone.
fn keep_alive(tx: &mpsc::Sender<v1::AgentMessage>) -> tokio::task::JoinHandle<()> {
    let tx = tx.clone();
    tokio::spawn(async move {
        let mut nonce = 0;
        loop {
            nonce += 1;
            let ping = v1::AgentMessage {
                kind: Some(agent_message::Kind::Ping(v1::Ping { nonce })),
            };
            if tx.send(ping).await.is_err() {
                return;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// How a session ended within `within`: its gRPC code and message; `None` when it did not.
async fn session_end(
    inbound: &mut tonic::Streaming<v1::HubMessage>,
    within: Duration,
) -> Option<(tonic::Code, String)> {
    tokio::time::timeout(within, async {
        loop {
            match inbound.message().await {
                Ok(Some(_)) => {}
                Ok(None) => return (tonic::Code::Ok, "closed".to_owned()),
                Err(s) => return (s.code(), s.message().to_owned()),
            }
        }
    })
    .await
    .ok()
}

/// The next renewed certificate a session receives (pings skipped).
async fn renewed_certificate(
    inbound: &mut tonic::Streaming<v1::HubMessage>,
) -> anyhow::Result<String> {
    loop {
        let m = tokio::time::timeout(Duration::from_secs(10), inbound.message())
            .await
            .map_err(|_| anyhow::anyhow!("no certificate within 10 s"))??;
        match m.and_then(|m| m.kind) {
            Some(hub_message::Kind::Certificate(c)) => {
                return Ok(String::from_utf8(c.certificate_pem)?);
            }
            Some(hub_message::Kind::Ping(_) | hub_message::Kind::Pong(_)) => {}
            other => anyhow::bail!("expected a certificate, got {other:?}"),
        }
    }
}

/// Sends a Renew with a CSR of `key_pem` on a session.
async fn send_renew(tx: &mpsc::Sender<v1::AgentMessage>, key_pem: &str) -> anyhow::Result<()> {
    tx.send(v1::AgentMessage {
        kind: Some(agent_message::Kind::Renew(v1::RenewCertificate {
            csr_pem: csr_of(key_pem)?.into_bytes(),
        })),
    })
    .await
    .map_err(|_| anyhow::anyhow!("the session closed"))
}

/// The serial of a PEM certificate, as the hub records it.
fn serial_of(cert_pem: &str) -> anyhow::Result<String> {
    let der = flotilla_hub::session::pki::first_pem_der(cert_pem, "certificate")?;
    Ok(flotilla_hub::session::ClusterIdentity::from_der(&der)?.serial)
}

/// A plan named `name` for the `ok` test chart.
fn plan_named(name: &str) -> anyhow::Result<flotilla_core::plan::ReleasePlan> {
    let text = format!(
        "apiVersion: helm.toolkit.fluxcd.io/v2\nkind: HelmRelease\nmetadata:\n  name: {name}\n  namespace: default\nspec:\n  interval: 1h\nchart:\n  path: ok\n"
    );
    let charts_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/charts");
    Ok(plan_file::parse(std::path::Path::new("plan.yaml"), &text, &charts_dir)?.plan)
}

/// Drops the certificate from the identity Secret of `namespace`, keeping the key: the
/// agent's next `join` registers again with the same key.
async fn forget_certificate(client: &kube::Client, namespace: &str) -> anyhow::Result<()> {
    let mut stored = agent_session::identity::load(client, namespace).await?;
    stored.cert_pem = None;
    agent_session::identity::store(client, namespace, &stored).await?;
    Ok(())
}

#[tokio::test]
async fn an_impostor_with_a_valid_any_cluster_token_gets_no_certificate_for_an_accepted_cluster_the_real_session_keeps_receiving_plans_and_only_an_approved_key_or_the_clusters_own_key_registers_again()
-> anyhow::Result<()> {
    logs();
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-impostor")).await?;
    let mgmt = mgmt_cluster.client().await?;
    let (hub, _reports) = hub(&mgmt, Duration::from_secs(3600)).await?;
    let pin = hub.ca().pin().to_string();
    let clusters: Api<ManagedCluster> = Api::all(mgmt.clone());
    for ns in ["real", "impostor", "third"] {
        namespace(&mgmt, ns).await?;
    }
    let uid = agent_session::cluster_uid(&mgmt).await?;

    // The attack of issue 29: one plain token (any cluster, auto-accept, unlimited uses),
    // the real agent joins as workload-a ...
    let shared = auto_token(&mgmt, None).await?;
    let real = agent_session::join(
        &mgmt,
        &join_options(&hub, &shared, &pin, "workload-a", "real"),
    )
    .await?;
    let (real_tx, mut real_inbound) = raw_session(&real, &real.cert_pem, &real.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let _pings = keep_alive(&real_tx);
    let real_serial = serial_of(&real.cert_pem)?;

    // ... and a second agent, another namespace for its identity, asks to be workload-a
    // with the same token and a new key: it waits for an administrator, with no
    // certificate.
    let impostor = tokio::spawn({
        let options = join_options(&hub, &shared, &pin, "workload-a", "impostor");
        let client = mgmt.clone();
        async move { agent_session::join(&client, &options).await }
    });
    let impostor_key = wait::until("the impostor's key to be stored", TIMEOUT, || async {
        Ok(agent_session::identity::load(&mgmt, "impostor")
            .await?
            .key_pem)
    })
    .await?;
    let impostor_fingerprint = key_fingerprint(&impostor_key)?;
    let pending = wait::until("the pending registration to be shown", TIMEOUT, || async {
        Ok(clusters
            .get("workload-a")
            .await?
            .status
            .and_then(|s| s.pending_registration))
    })
    .await?;
    assert_eq!(pending.key_fingerprint, impostor_fingerprint);
    assert_eq!(pending.reason, "KeyNotApproved");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(!impostor.is_finished(), "the impostor's join must wait");
    let stored = agent_session::identity::load(&mgmt, "impostor").await?;
    assert!(stored.cert_pem.is_none(), "the impostor got a certificate");
    let mc = clusters.get("workload-a").await?;
    let newest = mc
        .status
        .and_then(|s| s.certificate)
        .expect("the newest certificate");
    assert_eq!(
        newest.serial, real_serial,
        "no certificate was issued to the impostor"
    );

    // The real agent's session is still up and still receives the cluster's plans.
    let links = hub.links();
    let link = links
        .link(&TargetId::Cluster(ClusterId::new("workload-a")?))
        .expect("workload-a's link");
    assert!(link.connected());
    link.send(Command::Upsert(Box::new(plan_named("after-the-impostor")?)))?;
    let upsert = next_upsert(&mut real_inbound).await?;
    assert_eq!(
        upsert
            .plan
            .and_then(|p| p.object)
            .map(|o| o.name)
            .as_deref(),
        Some("after-the-impostor")
    );

    // Another any-cluster token, not the one that created workload-a: refused outright.
    let other = auto_token(&mgmt, None).await?;
    let message = refused(
        agent_session::join(
            &mgmt,
            &join_options(&hub, &other, &pin, "workload-a", "third"),
        )
        .await,
    );
    assert!(
        message.contains("was not created with bootstrap token"),
        "{message}"
    );

    // The real agent registers again with its own key (its CSR proves it holds the key of
    // the newest certificate) and a token made for workload-a: a certificate, no approval.
    let bound = token(
        &mgmt,
        tokens::TokenOptions::new(tokens::TokenScope::Cluster("workload-a".into())),
    )
    .await?;
    forget_certificate(&mgmt, "real").await?;
    let again = agent_session::join(
        &mgmt,
        &join_options(&hub, &bound, &pin, "workload-a", "real"),
    )
    .await?;
    assert_ne!(serial_of(&again.cert_pem)?, real_serial);
    assert_eq!(
        key_fingerprint(&again.key_pem)?,
        key_fingerprint(&real.key_pem)?
    );
    assert!(
        !impostor.is_finished(),
        "the impostor's join must still wait"
    );

    // An administrator approves the waiting key (what `flotilla cluster approve
    // workload-a` does): that agent's next attempt gets a certificate for it.
    clusters
        .patch(
            "workload-a",
            &PatchParams::default(),
            &Patch::Merge(
                serde_json::json!({"spec": {"approvedKeyFingerprint": impostor_fingerprint}}),
            ),
        )
        .await?;
    let approved = tokio::time::timeout(TIMEOUT, impostor).await???;
    assert_eq!(key_fingerprint(&approved.key_pem)?, impostor_fingerprint);
    let status = clusters.get("workload-a").await?.status.expect("a status");
    assert_eq!(
        status.certificate.map(|c| c.key_fingerprint),
        Some(impostor_fingerprint)
    );
    assert!(status.pending_registration.is_none());

    assert_never_logged("the shared token's secret", &shared[7..]);
    hub.stop().await;
    Ok(())
}

#[tokio::test]
async fn auto_accept_never_accepts_an_existing_cluster_again_nor_recreates_a_deleted_one_token_secrets_are_hashed_at_rest_and_expired_ones_removed()
-> anyhow::Result<()> {
    logs();
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-tokens")).await?;
    let mgmt = mgmt_cluster.client().await?;
    let config = SessionConfig {
        token_sweep_interval: Duration::from_secs(1),
        ..config(Duration::from_secs(3600))
    };
    let (hub, _reports) = hub_configured(&mgmt, config, Arc::new(NoArchives)).await?;
    let pin = hub.ca().pin().to_string();
    let clusters: Api<ManagedCluster> = Api::all(mgmt.clone());
    let secrets: Api<Secret> = Api::namespaced(mgmt.clone(), HUB_NAMESPACE);
    namespace(&mgmt, "solo").await?;

    // At rest: the SHA-256 of the secret, never the secret.
    let auto = auto_token(&mgmt, None).await?;
    let (id, secret) = auto.split_once('.').expect("<id>.<secret>");
    let stored = secrets
        .get(&format!("{}{id}", tokens::SECRET_PREFIX))
        .await?;
    let data = stored.data.expect("token data");
    assert!(!data.contains_key("token-secret"));
    for (key, value) in &data {
        assert!(
            !String::from_utf8_lossy(&value.0).contains(secret),
            "{key} holds the secret"
        );
    }
    assert_eq!(
        data["token-secret-sha256"].0,
        flotilla_hub::session::pki::sha256_hex(secret.as_bytes()).into_bytes()
    );

    let joined =
        agent_session::join(&mgmt, &join_options(&hub, &auto, &pin, "solo", "solo")).await?;
    assert!(clusters.get("solo").await?.spec.accepted);

    // A joined agent starts again from its stored identity, without a token; one that has
    // not joined is told to give one.
    let without_token = JoinOptions {
        token: None,
        ..join_options(&hub, &auto, &pin, "solo", "solo")
    };
    let resumed = agent_session::join(&mgmt, &without_token).await?;
    assert_eq!(resumed.cert_pem, joined.cert_pem);
    namespace(&mgmt, "never-joined").await?;
    let err = agent_session::join(
        &mgmt,
        &JoinOptions {
            token: None,
            ..join_options(&hub, &auto, &pin, "never", "never-joined")
        },
    )
    .await
    .expect_err("no identity, no token");
    assert!(
        err.to_string().contains("FLOTILLA_BOOTSTRAP_TOKEN"),
        "{err}"
    );

    // Un-accepted by an administrator: the auto-accepting token registers again (same key)
    // but waits; spec.accepted stays false.
    flotilla_hub::session::registry::set_accepted(mgmt.clone(), "solo", false).await?;
    forget_certificate(&mgmt, "solo").await?;
    let rejoin = tokio::spawn({
        let options = join_options(&hub, &auto, &pin, "solo", "solo");
        let client = mgmt.clone();
        async move { agent_session::join(&client, &options).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        !rejoin.is_finished(),
        "an un-accepted cluster's agent must wait"
    );
    assert!(
        !clusters.get("solo").await?.spec.accepted,
        "auto-accept re-accepted solo"
    );
    rejoin.abort();

    // Deleted: the token that registered it does not create it again.
    clusters.delete("solo", &Default::default()).await?;
    wait::until("solo to be deleted", TIMEOUT, || async {
        Ok(clusters.get_opt("solo").await?.is_none().then_some(()))
    })
    .await?;
    let message =
        refused(agent_session::join(&mgmt, &join_options(&hub, &auto, &pin, "solo", "solo")).await);
    assert!(message.contains("has been deleted since"), "{message}");
    assert!(
        clusters.get_opt("solo").await?.is_none(),
        "solo was re-created"
    );

    // Expired token Secrets are removed by the hub; a valid one stays.
    let expiring = token(
        &mgmt,
        tokens::TokenOptions {
            ttl: Some(Duration::from_secs(1)),
            ..tokens::TokenOptions::new(tokens::TokenScope::Cluster("later".into()))
        },
    )
    .await?;
    let expiring_name = format!("{}{}", tokens::SECRET_PREFIX, &expiring[..6]);
    wait::until(
        "the expired token Secret to be removed",
        TIMEOUT,
        || async {
            Ok(secrets
                .get_opt(&expiring_name)
                .await?
                .is_none()
                .then_some(()))
        },
    )
    .await?;
    assert!(
        secrets
            .get_opt(&format!("{}{id}", tokens::SECRET_PREFIX))
            .await?
            .is_some(),
        "a token without expiration was removed"
    );
    hub.stop().await;
    Ok(())
}

#[tokio::test]
async fn renew_is_for_the_newest_certificate_once_per_interval_a_revoked_certificate_ends_its_session_and_opens_none_the_cluster_stays_accepted_and_an_expired_certificates_session_is_closed()
-> anyhow::Result<()> {
    logs();
    let mgmt_cluster = Cluster::start(ClusterOptions::named("session-revoke")).await?;
    let mgmt = mgmt_cluster.client().await?;
    // 30 s certificates: renewals at most every 3 s per cluster.
    let lifetime = Duration::from_secs(30);
    let (hub, _reports) = hub(&mgmt, lifetime).await?;
    let pin = hub.ca().pin().to_string();
    let clusters: Api<ManagedCluster> = Api::all(mgmt.clone());
    let uid = agent_session::cluster_uid(&mgmt).await?;
    let auto = auto_token(&mgmt, None).await?;
    let first =
        agent_session::join(&mgmt, &join_options(&hub, &auto, &pin, "rev", "default")).await?;
    let first_serial = serial_of(&first.cert_pem)?;

    // Renew with the newest certificate: a new one.
    let (tx_a, mut inbound_a) = raw_session(&first, &first.cert_pem, &first.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let _pings_a = keep_alive(&tx_a);
    send_renew(&tx_a, &first.key_pem).await?;
    let second_pem = renewed_certificate(&mut inbound_a).await?;
    let second_serial = serial_of(&second_pem)?;
    assert_ne!(second_serial, first_serial);

    // Renew again at once, with the new (newest) certificate: too soon.
    let (tx_b, mut inbound_b) = raw_session(&first, &second_pem, &first.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    send_renew(&tx_b, &first.key_pem).await?;
    let (code, message) = session_end(&mut inbound_b, Duration::from_secs(10))
        .await
        .expect("a renewal too soon ends the session");
    assert_eq!(code, tonic::Code::ResourceExhausted, "{message}");

    // Past the interval, with the first certificate, no longer the newest: refused. (Session
    // B replaced session A, one session per cluster: A is opened again.)
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (tx_a, mut inbound_a) = raw_session(&first, &first.cert_pem, &first.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let _pings_a = keep_alive(&tx_a);
    send_renew(&tx_a, &first.key_pem).await?;
    let (code, message) = session_end(&mut inbound_a, Duration::from_secs(10))
        .await
        .expect("a renewal with an older certificate ends the session");
    assert_eq!(code, tonic::Code::PermissionDenied, "{message}");
    assert!(message.contains("not the newest"), "{message}");

    // Revoking the second certificate (what `flotilla cluster revoke rev --serial S`
    // does) ends its live session at once; it opens no new one; the first certificate,
    // not revoked, still does; the cluster stays accepted.
    let (tx_b, mut inbound_b) = raw_session(&first, &second_pem, &first.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let _pings_b = keep_alive(&tx_b);
    clusters
        .patch(
            "rev",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"revokedSerials": [second_serial]}})),
        )
        .await?;
    let (code, message) = session_end(&mut inbound_b, Duration::from_secs(5))
        .await
        .expect("the revoked certificate's session outlived its revocation by 5 s");
    assert_eq!(code, tonic::Code::PermissionDenied, "{message}");
    assert!(message.contains("revoked"), "{message}");
    let refusal = raw_session(&first, &second_pem, &first.key_pem, &uid)
        .await
        .expect_err("a revoked certificate opens no session");
    assert!(refusal.contains("revoked"), "{refusal}");
    assert!(clusters.get("rev").await?.spec.accepted);
    let (tx_a, mut inbound_a) = raw_session(&first, &first.cert_pem, &first.key_pem, &uid)
        .await
        .map_err(anyhow::Error::msg)?;
    let _pings_a = keep_alive(&tx_a);

    // The first certificate's session ends when the certificate expires (the pings keep
    // it alive otherwise).
    let (_, end) = agent_session::identity::certificate_validity(&first.cert_pem)?;
    let left = end
        .duration_since(std::time::SystemTime::now())
        .unwrap_or_default();
    let (code, message) = session_end(&mut inbound_a, left + Duration::from_secs(10))
        .await
        .expect("the session outlived its certificate");
    assert_eq!(code, tonic::Code::Unauthenticated, "{message}");
    assert!(message.contains("expired"), "{message}");
    assert!(std::time::SystemTime::now() >= end);
    hub.stop().await;
    Ok(())
}
