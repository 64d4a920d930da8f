//! The log of a failed hook or test pod follows the failure message in the status and the
//! Event, as Helm v4 prints a pod's log (`helm test --logs`: `POD LOGS: <pod>`, then the
//! log), cut to its last [`POD_LOG_CAP`] bytes; the failed record's description stays
//! Helm's, without it (issue 21 item 4). The pods' logs are served the real way, by the API
//! server from the node's kubelet (kwok's server, fed by `Cluster::serve_pod_log`).

mod common;

use std::sync::Arc;

use flotilla_agent::kube::hook::{CUT_NOTE, POD_LOG_CAP};
use flotilla_agent::reconcile::Context;
use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::LiteralRenderer;
use flotilla_agent::storage::{SecretStorage, status_of};
use flotilla_core::meta::{ConditionStatus, condition, reason};
use flotilla_tests::Cluster;
use k8s_openapi::api::core::v1::Event;
use kube::Api;

use common::{Hr, expect_condition, run};

fn plan(chart: &str, spec: &str) -> PlanFile {
    Hr::new("demo", chart)
        .timeout(Some("20s"))
        .spec(spec)
        .plan()
}

async fn start(name: &str) -> anyhow::Result<(Cluster, Context)> {
    common::start(name, Arc::new(LiteralRenderer)).await
}

/// The messages of the Events about HelmRelease `default/demo` with `reason`.
async fn event_messages(ctx: &Context, reason: &str) -> anyhow::Result<Vec<String>> {
    let api: Api<Event> = Api::namespaced(ctx.cluster.client().clone(), "default");
    Ok(api
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some("HelmRelease")
                && e.involved_object.name.as_deref() == Some("demo")
                && e.reason.as_deref() == Some(reason)
        })
        .filter_map(|e| e.message)
        .collect())
}

#[tokio::test]
async fn a_failed_pre_install_hooks_log_follows_the_failure_message_and_event_in_helms_form_and_not_the_records_description()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("hooklog-pre").await?;
    cluster
        .serve_pod_log(
            "default",
            "demo-migrate",
            "migrating schema to v3\nERROR: relation \"users\" already exists\n",
        )
        .await?;
    let report = run(&ctx, &plan("pre-install-fails", "")).await?;
    assert_eq!(report.actions, ["install"]);
    let failure = "Helm install failed for release default/demo with chart demo@0.1.2: \
                   failed pre-install: failed early due to stalled resources: \
                   [Pod/default/demo-migrate status: 'Failed']";
    let logged = format!(
        "{failure}\n\nPOD LOGS: demo-migrate\nmigrating schema to v3\n\
         ERROR: relation \"users\" already exists"
    );
    let (r, st, msg) = expect_condition(&report, condition::RELEASED);
    assert_eq!((r, st), (reason::INSTALL_FAILED, ConditionStatus::False));
    assert_eq!(msg, logged);
    assert_eq!(
        event_messages(&ctx, reason::INSTALL_FAILED).await?,
        [logged]
    );
    // Helm's record holds its own description, no log.
    let store = SecretStorage::new(ctx.cluster.client().clone(), "default");
    let history = store.history("demo").await?;
    let last = history.last().expect("the failed record");
    assert_eq!(status_of(last).to_string(), "failed");
    assert_eq!(
        last.info.clone().unwrap_or_default().description,
        "Release \"demo\" failed: failed pre-install: failed early due to stalled resources: \
         [Pod/default/demo-migrate status: 'Failed']"
    );
    Ok(())
}

#[tokio::test]
async fn a_failed_test_pods_long_log_is_cut_to_its_end_within_the_cap_and_a_pod_without_a_log_says_so()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("hooklog-test").await?;
    let lines: String = (0..2000).map(|i| format!("check {i:04}: ok\n")).collect();
    let log = format!("{lines}check 2000: FAILED expected 200, got 503\n");
    assert!(log.len() > 4 * POD_LOG_CAP);
    cluster.serve_pod_log("default", "demo-test", &log).await?;
    let report = run(&ctx, &plan("test-fails", "  test:\n    enable: true")).await?;
    assert_eq!(report.actions, ["install", "test"]);
    let failure = "Helm test failed for release default/demo.v1 with chart demo@0.1.1: \
                   failed early due to stalled resources: [Pod/default/demo-test status: 'Failed']";
    let (r, st, msg) = expect_condition(&report, condition::TEST_SUCCESS);
    assert_eq!((r, st), (reason::TEST_FAILED, ConditionStatus::False));
    let block = msg
        .strip_prefix(&format!("{failure}\n\nPOD LOGS: demo-test\n"))
        .unwrap_or_else(|| panic!("Flux's message, then Helm's pod log header: {msg}"));
    assert!(block.len() <= POD_LOG_CAP, "{} bytes", block.len());
    let (note, kept) = block.split_once('\n').expect("a note, then the log");
    assert!(
        kept.ends_with("check 1999: ok\ncheck 2000: FAILED expected 200, got 503"),
        "the end of the log is kept: {kept}"
    );
    assert!(kept.starts_with("check "), "from a whole line: {kept:.40}");
    assert!(log.ends_with(&format!("{kept}\n")));
    assert_eq!(note, CUT_NOTE);
    assert!(!msg.contains("check 0000"));
    assert_eq!(
        event_messages(&ctx, reason::TEST_FAILED).await?,
        [msg.to_owned()]
    );

    // A second release whose test pod has no log on this cluster (kwok serves none without
    // a Logs object; a kubelet could be unreachable or refuse): the message says it could not
    // be read, in Helm's words, with the API server's answer.
    let other = Hr::new("other", "test-fails")
        .timeout(Some("20s"))
        .spec(
            "  targetNamespace: other\n  install:\n    createNamespace: true\n  test:\n    enable: true",
        )
        .plan();
    let report = run(&ctx, &other).await?;
    let (r, _, msg) = expect_condition(&report, condition::TEST_SUCCESS);
    assert_eq!(r, reason::TEST_FAILED);
    let block = msg
        .split_once("\n\nPOD LOGS: demo-test\n")
        .map(|(_, b)| b)
        .unwrap_or_else(|| panic!("Helm's pod log header: {msg}"));
    assert_eq!(
        block,
        "unable to get pod logs for demo-test: no logs found for container \"check\" in pod \"other/demo-test\""
    );
    Ok(())
}
