//! The Kubernetes Events the agent posts about a HelmRelease, against real local clusters:
//! they name the HelmRelease's uid when the plan knows it, a repeat is counted on the same
//! Event (client-go's recorder, which Flux uses), and an identity that may not create Events
//! still reconciles, with the failure in the agent's log.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use flotilla_agent::kube::impersonate::service_account_client;
use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::{ChartRenderer, LiteralRenderer};
use flotilla_agent::reconcile::{Context, reconcile};
use flotilla_core::meta::{Conditions as _, condition, reason};
use flotilla_tests::{Cluster, ClusterOptions, tools};
use k8s_openapi::api::core::v1::Event;
use kube::Api;

use common::Hr;

/// HelmRelease `default/<name>` (uid `uid` when given) with chart `chart`.
fn plan(name: &str, uid: Option<&str>, chart: &str) -> PlanFile {
    Hr::new(name, chart).uid(uid).plan()
}

/// The Events about HelmRelease `default/<name>`, oldest first.
async fn events_about(client: &kube::Client, name: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut out: Vec<Event> = api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("HelmRelease")
                && e.involved_object.name.as_deref() == Some(name)
        })
        .collect();
    out.sort_by(|a, b| a.first_timestamp.cmp(&b.first_timestamp));
    Ok(out)
}

#[tokio::test]
async fn events_name_the_helmrelease_uid_and_repeats_are_counted_per_uid() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("events-uid")).await?;
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    // A chart whose kubeVersion constraint no cluster meets: every install attempt fails
    // with the same message.
    let first_uid = "3c4f1f0e-7c55-4c1e-9a3b-0d6f1d1e0001";
    let p = plan("gate", Some(first_uid), "kube-version-unmet");
    for _ in 0..2 {
        let report = reconcile(&ctx, &p.plan, &p.chart).await?;
        let released = report
            .status
            .conditions
            .get_condition(condition::RELEASED)
            .expect("a Released condition");
        assert_eq!(released.reason, reason::INSTALL_FAILED);
    }
    let events = events_about(&client, "gate").await?;
    let failed: Vec<&Event> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason::INSTALL_FAILED))
        .collect();
    assert_eq!(failed.len(), 1, "{events:#?}");
    let e = failed[0];
    assert_eq!(e.involved_object.uid.as_deref(), Some(first_uid));
    assert_eq!(
        e.involved_object.api_version.as_deref(),
        Some("helm.flotilla.dev/v1")
    );
    assert_eq!(e.type_.as_deref(), Some("Warning"));
    assert_eq!(e.count, Some(2), "{e:#?}");
    assert!(e.last_timestamp >= e.first_timestamp, "{e:#?}");

    // The same HelmRelease recreated (a new uid): its failure is a new Event.
    let second_uid = "3c4f1f0e-7c55-4c1e-9a3b-0d6f1d1e0002";
    let p = plan("gate", Some(second_uid), "kube-version-unmet");
    reconcile(&ctx, &p.plan, &p.chart).await?;
    let events = events_about(&client, "gate").await?;
    let mut failed: Vec<(Option<String>, Option<i32>)> = events
        .iter()
        .filter(|e| e.reason.as_deref() == Some(reason::INSTALL_FAILED))
        .map(|e| (e.involved_object.uid.clone(), e.count))
        .collect();
    failed.sort();
    assert_eq!(
        failed,
        [
            (Some(first_uid.to_owned()), Some(2)),
            (Some(second_uid.to_owned()), Some(1))
        ]
    );

    // Eleven events of one reason with distinct messages: nine Events of their own, then
    // one combined Event counting the tenth and eleventh, with the latest message.
    let p = plan("drifty", Some(first_uid), "kube-version-unmet");
    let recorder = flotilla_agent::events::Recorder::default();
    for i in 0..11 {
        let e = flotilla_core::release::Event {
            type_: flotilla_core::release::EventType::Warning,
            reason: "DriftDetected".to_owned(),
            message: format!("Cluster state has drifted: change {i}"),
            annotations: Default::default(),
        };
        recorder
            .record(&client, "default", &p.plan, std::slice::from_ref(&e))
            .await;
    }
    let events = events_about(&client, "drifty").await?;
    let mut seen: Vec<(String, Option<i32>)> = events
        .iter()
        .map(|e| (e.message.clone().unwrap_or_default(), e.count))
        .collect();
    seen.sort();
    let mut expected: Vec<(String, Option<i32>)> = (0..9)
        .map(|i| (format!("Cluster state has drifted: change {i}"), Some(1)))
        .collect();
    expected.push((
        "(combined from similar events): Cluster state has drifted: change 10".to_owned(),
        Some(2),
    ));
    expected.sort();
    assert_eq!(seen, expected);
    Ok(())
}

/// Log lines written by `tracing` while the guard lives, for assertions.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

#[tokio::test]
async fn an_agent_that_may_not_create_events_still_reconciles_and_logs_why() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("events-forbidden")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    // An agent identity allowed everything the release and the agent's state need, but not
    // Events.
    let rbac = r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: quiet-agent, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: quiet-agent}
rules:
  - apiGroups: [""]
    resources: ["configmaps", "secrets", "pods", "namespaces"]
    verbs: ["*"]
  - apiGroups: ["apps"]
    resources: ["deployments"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: quiet-agent}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: quiet-agent}
subjects: [{kind: ServiceAccount, name: quiet-agent, namespace: default}]
"#;
    tools::kubectl_in(&kubeconfig, &["apply", "-f", "-"], Some(rbac))?;
    // The identity really may not create Events (so the test is not vacuous).
    let can = tools::run(
        &tools::kubectl()?,
        &[
            "auth",
            "can-i",
            "create",
            "events",
            "-n",
            "default",
            "--as=system:serviceaccount:default:quiet-agent",
        ],
        &kubeconfig,
        None,
    )?;
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");

    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let quiet = service_account_client(&config, "default", "quiet-agent")?;
    let ctx = Context::new(quiet, "default", Arc::new(LiteralRenderer));

    let logs = Captured::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let report = {
        let _guard = tracing::subscriber::set_default(subscriber);
        let p = plan("demo", None, "ok");
        reconcile(&ctx, &p.plan, &p.chart).await?
    };
    assert_eq!(report.actions, ["install"], "{:#?}", report.status);
    let released = report
        .status
        .conditions
        .get_condition(condition::RELEASED)
        .expect("a Released condition");
    assert_eq!(
        (released.reason.as_str(), released.status),
        (
            reason::INSTALL_SUCCEEDED,
            flotilla_core::meta::ConditionStatus::True
        ),
        "{released:#?}"
    );
    assert!(!report.events.is_empty(), "Flux records an event here");

    // Nothing was posted, and the agent's log says why, naming the HelmRelease.
    let admin = cluster.client().await?;
    assert!(events_about(&admin, "demo").await?.is_empty());
    let text = logs.text();
    assert!(
        text.contains("posting a Kubernetes Event failed")
            && text.contains("default/demo")
            && text.contains("forbidden")
            && text.contains(reason::INSTALL_SUCCEEDED),
        "{text}"
    );
    Ok(())
}
