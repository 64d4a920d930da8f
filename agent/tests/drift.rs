//! Drift detection and correction against real local clusters: objects of an installed
//! release changed or deleted with the real `kubectl`, then reconciled with each
//! `driftDetection` mode and with ignore rules; the conditions, the Events posted to the
//! cluster and the live objects (read back with `kubectl`) checked. Before each reconcile
//! that finds drift, Flux's own diff code (`tests/reference/flux-drift`) runs against the
//! same cluster and the drift message must equal the one it gives. Each test starts its own
//! cluster.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::LiteralRenderer;
use flotilla_agent::reconcile::{Context, ReconcileReport};
use flotilla_core::meta::{ConditionStatus, condition, reason};
use flotilla_core::release::Step;
use flotilla_tests::{Cluster, ClusterOptions};

use common::{Hr, run};

/// HelmRelease `default/demo`, release `default/demo`, chart `drift`.
fn plan(spec: &str) -> PlanFile {
    Hr::new("demo", "drift")
        .timeout(Some("20s"))
        .spec(spec)
        .plan()
}

/// HelmRelease `<namespace>/demo` for release `default/demo`.
fn plan_in(namespace: &str, spec: &str) -> PlanFile {
    Hr::new("demo", "drift")
        .namespace(namespace)
        .timeout(Some("20s"))
        .spec(&format!(
            "  releaseName: demo\n  targetNamespace: default\n  storageNamespace: default\n{spec}"
        ))
        .plan()
}

async fn start(name: &str) -> anyhow::Result<(Cluster, Context)> {
    common::start(name, Arc::new(LiteralRenderer)).await
}

fn cond(report: &ReconcileReport, type_: &str) -> Option<(String, ConditionStatus, String)> {
    common::condition(report, type_)
}

/// Runs the real kubectl against the cluster; its stdout.
fn kubectl(cluster: &Cluster, args: &[&str]) -> anyhow::Result<String> {
    flotilla_tests::tools::kubectl_in(cluster.kubeconfig(), args, None)
}

fn jsonpath(cluster: &Cluster, object: &str, path: &str) -> anyhow::Result<String> {
    kubectl(
        cluster,
        &[
            "get",
            object,
            "-n",
            "default",
            "-o",
            &format!("jsonpath={path}"),
        ],
    )
}

/// `(type, reason, message, count)` of the Events about HelmRelease `demo` in `namespace`,
/// oldest first, as kubectl lists them.
fn events(
    cluster: &Cluster,
    namespace: &str,
) -> anyhow::Result<Vec<(String, String, String, i64)>> {
    let json = kubectl(cluster, &["get", "events", "-n", namespace, "-o", "json"])?;
    let list: serde_json::Value = serde_json::from_str(&json)?;
    let mut out = Vec::new();
    for e in list["items"].as_array().into_iter().flatten() {
        let involved = &e["involvedObject"];
        if involved["kind"] != "HelmRelease" || involved["name"] != "demo" {
            continue;
        }
        out.push((
            e["lastTimestamp"].as_str().unwrap_or("").to_owned(),
            e["type"].as_str().unwrap_or("").to_owned(),
            e["reason"].as_str().unwrap_or("").to_owned(),
            e["message"].as_str().unwrap_or("").to_owned(),
            e["count"].as_i64().unwrap_or(0),
        ));
    }
    out.sort();
    Ok(out
        .into_iter()
        .map(|(_, t, r, m, c)| (t, r, m, c))
        .collect())
}

fn event_with<'a>(
    events: &'a [(String, String, String, i64)],
    reason: &str,
) -> &'a (String, String, String, i64) {
    match events.iter().find(|e| e.1 == reason) {
        Some(e) => e,
        None => panic!("no {reason} event in {events:#?}"),
    }
}

/// Flux's own drift detection of release `default/demo` against the cluster, as
/// helm-controller summarizes it: `agent/tests/reference/flux-drift` (Flux's
/// `fluxcd/pkg/ssa` code), built once per source into the Flotilla cache. `ignore` is
/// `spec.driftDetection.ignore` as JSON. Returns the summary and the error.
fn flux_drift(cluster: &Cluster, ignore: &str) -> anyhow::Result<(String, Option<String>)> {
    static BUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);
    let bin = {
        let mut built = BUILT.lock().unwrap_or_else(|p| p.into_inner());
        match &*built {
            Some(bin) => bin.clone(),
            None => {
                let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/reference/flux-drift");
                let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
                for f in ["main.go", "go.mod", "go.sum"] {
                    for b in std::fs::read(src.join(f))? {
                        hash = (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
                    }
                }
                let cache = match (
                    std::env::var_os("FLOTILLA_CACHE"),
                    std::env::var_os("XDG_CACHE_HOME"),
                ) {
                    (Some(dir), _) => PathBuf::from(dir),
                    (None, Some(xdg)) => PathBuf::from(xdg).join("flotilla"),
                    (None, None) => PathBuf::from(std::env::var("HOME")?).join(".cache/flotilla"),
                };
                let dir = cache.join(format!("flux-drift-reference/{hash:016x}"));
                let bin = dir.join("flux-drift");
                if !bin.exists() {
                    std::fs::create_dir_all(&dir)?;
                    let tmp = dir.join(format!("flux-drift.{}", std::process::id()));
                    let out = Command::new("go")
                        .args(["build", "-o"])
                        .arg(&tmp)
                        .arg(".")
                        .current_dir(&src)
                        .output()?;
                    anyhow::ensure!(
                        out.status.success(),
                        "building {}: {}",
                        src.display(),
                        String::from_utf8_lossy(&out.stderr)
                    );
                    std::fs::rename(&tmp, &bin)?;
                }
                *built = Some(bin.clone());
                bin
            }
        }
    };
    let manifest = Command::new(flotilla_tests::tools::helm()?)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .args(["get", "manifest", "demo", "-n", "default"])
        .output()?;
    anyhow::ensure!(manifest.status.success(), "helm get manifest failed");
    let dir = tempfile::tempdir()?;
    let manifest_path = dir.path().join("manifest.yaml");
    std::fs::write(&manifest_path, &manifest.stdout)?;
    let out = Command::new(bin)
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg("--manifest")
        .arg(&manifest_path)
        .args([
            "--release-name",
            "demo",
            "--release-namespace",
            "default",
            "--labels",
            "helm.flotilla.dev/name=demo,helm.flotilla.dev/namespace=default",
            "--field-owner",
            flotilla_agent::kube::FIELD_MANAGER,
            "--ignore",
            ignore,
        ])
        .output()?;
    anyhow::ensure!(
        out.status.success(),
        "flux-drift: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let result: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    Ok((
        result["summary"].as_str().unwrap_or_default().to_owned(),
        result["error"].as_str().map(str::to_owned),
    ))
}

/// Flux's drift message for release `default/demo.v1`, from [`flux_drift`]; fails on a
/// Flux error.
fn flux_drift_message(cluster: &Cluster, ignore: &str) -> anyhow::Result<String> {
    let (summary, error) = flux_drift(cluster, ignore)?;
    anyhow::ensure!(error.is_none(), "Flux's diff failed: {error:?}");
    Ok(format!(
        "Cluster state of release default/demo.v1 has drifted from the desired state:\n{summary}"
    ))
}

#[tokio::test]
async fn enabled_mode_patches_changed_objects_back_and_recreates_deleted_ones() -> anyhow::Result<()>
{
    let (cluster, ctx) = start("drift-enabled").await?;
    let p = plan("  driftDetection:\n    mode: enabled");
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install"]);
    assert_eq!(
        cond(&report, condition::DRIFTED),
        Some((
            reason::NO_DRIFT_DETECTED.to_owned(),
            ConditionStatus::False,
            "No drift detected against the cluster state".to_owned()
        )),
        "detection ran right after the install and found nothing"
    );

    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;
    kubectl(
        &cluster,
        &[
            "set",
            "image",
            "deployment/demo",
            "-n",
            "default",
            "app=example.com/demo:2",
        ],
    )?;
    kubectl(
        &cluster,
        &[
            "annotate",
            "configmap/demo-config",
            "-n",
            "default",
            "note=added-by-hand",
        ],
    )?;
    kubectl(
        &cluster,
        &[
            "label",
            "configmap/demo-config",
            "-n",
            "default",
            "--overwrite",
            "tier=edited",
        ],
    )?;
    kubectl(&cluster, &["delete", "service/demo", "-n", "default"])?;
    kubectl(
        &cluster,
        &[
            "patch",
            "configmap/demo-pinned",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"data":{"greeting":"changed"}}"#,
        ],
    )?;

    let flux = flux_drift_message(&cluster, "[]")?;
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["correct cluster drift"]);
    // The Events say what the correction did (its errors included) when the step is not Done.
    let messages: Vec<&str> = report.events.iter().map(|e| e.message.as_str()).collect();
    assert_eq!(report.step, Step::Done, "{messages:#?}");
    assert_eq!(report.events[0].message, flux, "what Flux's own diff finds");
    let detected = "Cluster state of release default/demo.v1 has drifted from the desired state:\n\
        ConfigMap/default/demo-config changed (0 additions, 1 changes, 0 removals)\n\
        ConfigMap/default/demo-pinned excluded\n\
        Service/default/demo removed\n\
        Deployment/default/demo changed (0 additions, 2 changes, 0 removals)";
    let corrected = "Cluster state of release default/demo.v1 has been corrected:\n\
        Service/default/demo created\n\
        ConfigMap/default/demo-config configured\n\
        Deployment/default/demo configured";
    let reasons: Vec<(&str, &str)> = report
        .events
        .iter()
        .map(|e| (e.reason.as_str(), e.message.as_str()))
        .collect();
    assert_eq!(
        reasons,
        [("DriftDetected", detected), ("DriftCorrected", corrected)]
    );
    assert_eq!(
        cond(&report, condition::DRIFTED).map(|c| (c.0, c.1)),
        Some((reason::NO_DRIFT_DETECTED.to_owned(), ConditionStatus::False)),
        "detection after the correction found nothing left"
    );
    assert_eq!(
        cond(&report, condition::READY).map(|c| c.1),
        Some(ConditionStatus::True)
    );

    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "1"
    );
    assert_eq!(
        jsonpath(
            &cluster,
            "deployment/demo",
            "{.spec.template.spec.containers[0].image}"
        )?,
        "example.com/demo:1"
    );
    assert_eq!(
        jsonpath(&cluster, "configmap/demo-config", "{.metadata.labels.tier}")?,
        "config"
    );
    assert_eq!(
        jsonpath(
            &cluster,
            "configmap/demo-config",
            "{.metadata.annotations.note}"
        )?,
        "added-by-hand",
        "annotations others add are no drift"
    );
    assert_eq!(
        jsonpath(
            &cluster,
            "service/demo",
            "{.metadata.annotations.meta\\.helm\\.sh/release-name}"
        )?,
        "demo",
        "the recreated object carries the release metadata"
    );
    assert_eq!(
        jsonpath(&cluster, "configmap/demo-pinned", "{.data.greeting}")?,
        "changed",
        "an object with driftDetection disabled is left alone"
    );
    // No new release revision: drift correction is not an upgrade.
    assert_eq!(report.status.history.len(), 1);
    assert_eq!(report.status.history[0].version, 1);

    // The same events, posted to the cluster about the HelmRelease.
    let posted = events(&cluster, "default")?;
    let e = event_with(&posted, "DriftDetected");
    assert_eq!((e.0.as_str(), e.2.as_str(), e.3), ("Warning", detected, 1));
    let e = event_with(&posted, "DriftCorrected");
    assert_eq!((e.0.as_str(), e.2.as_str(), e.3), ("Normal", corrected, 1));
    assert_eq!(event_with(&posted, "InstallSucceeded").0, "Normal");
    let json = kubectl(&cluster, &["get", "events", "-n", "default", "-o", "json"])?;
    let list: serde_json::Value = serde_json::from_str(&json)?;
    let annotations = |reason: &str| {
        list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|e| e["reason"] == reason)
            .map(|e| e["metadata"]["annotations"].clone())
            .unwrap_or_default()
    };
    assert_eq!(
        annotations("DriftDetected"),
        serde_json::Value::Null,
        "Flux records DriftDetected without annotations"
    );
    assert_eq!(
        annotations("DriftCorrected")["helm.toolkit.fluxcd.io/revision"],
        "0.1.0"
    );

    // In sync: the next reconcile does nothing.
    let report = run(&ctx, &p).await?;
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    assert!(report.events.is_empty(), "{:?}", report.events);
    Ok(())
}

#[tokio::test]
async fn warn_mode_reports_drift_and_changes_nothing_and_a_repeat_is_counted() -> anyhow::Result<()>
{
    let (cluster, ctx) = start("drift-warn").await?;
    let p = plan("  driftDetection:\n    mode: warn");
    run(&ctx, &p).await?;
    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;

    let flux = flux_drift_message(&cluster, "[]")?;
    let report = run(&ctx, &p).await?;
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    assert_eq!(report.step, Step::Done);
    assert_eq!(report.events[0].message, flux, "what Flux's own diff finds");
    let msg = "Cluster state of release default/demo.v1 has drifted from the desired state:\n\
        ConfigMap/default/demo-pinned excluded\n\
        Deployment/default/demo changed (0 additions, 1 changes, 0 removals)";
    assert_eq!(
        cond(&report, condition::DRIFTED),
        Some((
            reason::DRIFT_DETECTED.to_owned(),
            ConditionStatus::True,
            msg.to_owned()
        ))
    );
    assert_eq!(
        cond(&report, condition::READY).map(|c| (c.0, c.1)),
        Some((reason::INSTALL_SUCCEEDED.to_owned(), ConditionStatus::True)),
        "warn mode leaves Ready alone"
    );
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "3"
    );

    // The same drift on the next reconcile: the same Event, counted twice.
    run(&ctx, &p).await?;
    let posted = events(&cluster, "default")?;
    let e = event_with(&posted, "DriftDetected");
    assert_eq!((e.0.as_str(), e.2.as_str(), e.3), ("Warning", msg, 2));
    assert!(
        posted.iter().all(|e| e.1 != "DriftCorrected"),
        "{posted:#?}"
    );
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "3"
    );
    Ok(())
}

#[tokio::test]
async fn disabled_mode_checks_nothing() -> anyhow::Result<()> {
    let (cluster, ctx) = start("drift-disabled").await?;
    let p = plan("  driftDetection:\n    mode: disabled");
    run(&ctx, &p).await?;
    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;
    kubectl(
        &cluster,
        &["delete", "configmap/demo-config", "-n", "default"],
    )?;
    let report = run(&ctx, &p).await?;
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    assert!(report.events.is_empty(), "{:?}", report.events);
    assert_eq!(cond(&report, condition::DRIFTED), None);
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "3"
    );
    let missing = kubectl(
        &cluster,
        &["get", "configmap", "-n", "default", "-o", "name"],
    )?;
    assert!(!missing.contains("demo-config"), "{missing}");
    Ok(())
}

#[tokio::test]
async fn ignore_rules_leave_their_paths_alone_on_the_objects_they_target() -> anyhow::Result<()> {
    let (cluster, ctx) = start("drift-ignore").await?;
    let p = plan(
        r#"  driftDetection:
    mode: enabled
    ignore:
    - paths: ["/spec/replicas"]
      target:
        kind: Deploy.*
        labelSelector: app=demo
    - paths: ["/data/greeting"]
      target:
        kind: ConfigMap
        name: other
    - paths: ["/metadata/labels/tier"]
      target:
        group: ""
        version: v1
        kind: ConfigMap
        annotationSelector: "!helm.flotilla.dev/driftDetection""#,
    );
    run(&ctx, &p).await?;
    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;
    kubectl(
        &cluster,
        &[
            "set",
            "image",
            "deployment/demo",
            "-n",
            "default",
            "app=example.com/demo:2",
        ],
    )?;
    kubectl(
        &cluster,
        &[
            "patch",
            "configmap/demo-config",
            "-n",
            "default",
            "--type=merge",
            "-p",
            r#"{"data":{"greeting":"changed"},"metadata":{"labels":{"tier":"edited"}}}"#,
        ],
    )?;

    let flux = flux_drift_message(
        &cluster,
        r#"[{"paths": ["/spec/replicas"], "target": {"kind": "Deploy.*", "labelSelector": "app=demo"}},
            {"paths": ["/data/greeting"], "target": {"kind": "ConfigMap", "name": "other"}},
            {"paths": ["/metadata/labels/tier"], "target": {"group": "", "version": "v1", "kind": "ConfigMap",
             "annotationSelector": "!helm.flotilla.dev/driftDetection"}}]"#,
    )?;
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["correct cluster drift"]);
    assert_eq!(report.events[0].message, flux, "what Flux's own diff finds");
    assert_eq!(
        report.events[0].message,
        "Cluster state of release default/demo.v1 has drifted from the desired state:\n\
         ConfigMap/default/demo-config changed (0 additions, 1 changes, 0 removals)\n\
         ConfigMap/default/demo-pinned excluded\n\
         Deployment/default/demo changed (0 additions, 1 changes, 0 removals)"
    );
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "3",
        "the ignored path keeps its drift"
    );
    assert_eq!(
        jsonpath(
            &cluster,
            "deployment/demo",
            "{.spec.template.spec.containers[0].image}"
        )?,
        "example.com/demo:1",
        "the rest of the object is corrected"
    );
    assert_eq!(
        jsonpath(&cluster, "configmap/demo-config", "{.data.greeting}")?,
        "hello",
        "a rule whose target does not match ignores nothing"
    );
    assert_eq!(
        jsonpath(&cluster, "configmap/demo-config", "{.metadata.labels.tier}")?,
        "edited"
    );
    assert_eq!(
        cond(&report, condition::DRIFTED).map(|c| c.0),
        Some(reason::NO_DRIFT_DETECTED.to_owned())
    );
    Ok(())
}

#[tokio::test]
async fn objects_labelled_with_fluxs_key_on_the_cluster_are_skipped_and_bad_rules_are_state_errors()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("drift-exclude").await?;
    let p = plan("  driftDetection:\n    mode: enabled");
    run(&ctx, &p).await?;
    kubectl(
        &cluster,
        &[
            "label",
            "deployment/demo",
            "-n",
            "default",
            "helm.toolkit.fluxcd.io/driftDetection=Disabled",
        ],
    )?;
    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;
    assert_eq!(
        flux_drift(&cluster, "[]")?,
        (
            "ConfigMap/default/demo-pinned excluded\nDeployment/default/demo excluded".to_owned(),
            None
        ),
        "Flux's own diff excludes both and finds no change"
    );
    let report = run(&ctx, &p).await?;
    assert!(report.actions.is_empty(), "{:?}", report.actions);
    assert_eq!(
        cond(&report, condition::DRIFTED).map(|c| c.0),
        Some(reason::NO_DRIFT_DETECTED.to_owned()),
        "excluded objects alone are no drift"
    );
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "3"
    );

    let bad = plan(
        "  driftDetection:\n    mode: enabled\n    ignore:\n    - paths: [\"/spec/replicas\"]\n      target:\n        kind: \"Deploy(\"",
    );
    let report = run(&ctx, &bad).await?;
    assert!(matches!(report.step, Step::Failed(_)), "{:?}", report.step);
    let (r, st, msg) = cond(&report, condition::READY).expect("a Ready condition");
    assert_eq!(
        (r.as_str(), st),
        (reason::STATE_ERROR, ConditionStatus::False)
    );
    assert!(
        msg.starts_with(
            "Could not determine release state: unable to determine cluster state: \
             spec.driftDetection.ignore[0].target.kind: invalid regular expression \"Deploy(\""
        ),
        "{msg}"
    );
    Ok(())
}

#[tokio::test]
async fn events_about_a_helm_release_of_a_namespace_the_cluster_lacks_go_to_the_agent_namespace()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("drift-events").await?;
    let p = plan_in("flux-system", "  driftDetection:\n    mode: enabled");
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["install"]);
    let posted = events(&cluster, "default")?;
    let e = event_with(&posted, "InstallSucceeded");
    assert_eq!(
        (e.0.as_str(), e.2.as_str(), e.3),
        (
            "Normal",
            "Helm install succeeded for release default/demo.v1 with chart drift@0.1.0",
            1
        )
    );
    let json = kubectl(&cluster, &["get", "events", "-n", "default", "-o", "json"])?;
    let list: serde_json::Value = serde_json::from_str(&json)?;
    let event = list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|e| e["reason"] == "InstallSucceeded")
        .cloned()
        .unwrap_or_default();
    assert_eq!(event["involvedObject"]["namespace"], "flux-system");
    assert_eq!(
        event["involvedObject"]["apiVersion"],
        "helm.flotilla.dev/v1"
    );
    assert_eq!(event["source"]["component"], "flotilla-agent");
    assert_eq!(
        event["metadata"]["annotations"]["helm.toolkit.fluxcd.io/revision"],
        "0.1.0"
    );
    Ok(())
}

#[tokio::test]
async fn apply_watch_checks_drift_every_interval_and_corrects_it() -> anyhow::Result<()> {
    use std::io::{BufRead as _, BufReader};
    use std::process::Stdio;
    use std::sync::Mutex;
    use std::time::{Duration, Instant};

    let cluster = Cluster::start(ClusterOptions::named("drift-watch")).await?;
    let dir = tempfile::tempdir()?;
    let plan_path = dir.path().join("plan.yaml");
    Hr::new("demo", "drift")
        .interval("2s")
        .timeout(Some("20s"))
        .spec("  driftDetection:\n    mode: enabled")
        .write(&plan_path)?;
    let mut child = Command::new(env!("CARGO_BIN_EXE_flotilla-agent"))
        .arg("apply")
        .arg("--watch")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig())
        .arg(&plan_path)
        .env("RUST_LOG", "flotilla_agent=debug")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    let printed = Arc::new(Mutex::new(String::new()));
    let logged = Arc::new(Mutex::new(String::new()));
    let collect = |from: Box<dyn std::io::Read + Send>, into: &Arc<Mutex<String>>| {
        let into = Arc::clone(into);
        std::thread::spawn(move || {
            for line in BufReader::new(from).lines().map_while(Result::ok) {
                let mut p = into.lock().expect("not poisoned");
                p.push_str(&line);
                p.push('\n');
            }
        })
    };
    let readers = [
        collect(Box::new(stdout), &printed),
        collect(Box::new(stderr), &logged),
    ];
    let result = async {
        let wait_for =
            |what: &str, check: &dyn Fn() -> anyhow::Result<bool>| -> anyhow::Result<()> {
                let deadline = Instant::now() + Duration::from_secs(60);
                while !check()? {
                    anyhow::ensure!(Instant::now() < deadline, "timed out waiting for {what}");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Ok(())
            };
        wait_for("the install", &|| {
            Ok(printed
                .lock()
                .expect("not poisoned")
                .contains("reason: InstallSucceeded"))
        })?;
        kubectl(
            &cluster,
            &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
        )?;
        wait_for("the correction", &|| {
            Ok(events(&cluster, "default")?
                .iter()
                .any(|e| e.1 == "DriftCorrected"))
        })?;
        assert_eq!(
            jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
            "1"
        );
        let posted = events(&cluster, "default")?;
        assert_eq!(
            event_with(&posted, "DriftCorrected").2,
            "Cluster state of release default/demo.v1 has been corrected:\n\
             Deployment/default/demo configured"
        );
        anyhow::Ok(())
    }
    .await;
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()?;
    let deadline = Instant::now() + Duration::from_secs(20);
    let exit = loop {
        if let Some(exit) = child.try_wait()? {
            break exit;
        }
        if Instant::now() > deadline {
            child.kill()?;
            anyhow::bail!("still running 20s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    for reader in readers {
        reader.join().expect("the reader threads do not panic");
    }
    result?;
    let logged = logged.lock().expect("not poisoned");
    let modified = logged
        .lines()
        .find(|l| l.contains("resource modified"))
        .unwrap_or_else(|| panic!("no \"resource modified\" debug line in:\n{logged}"));
    assert!(
        modified.contains("resource=Deployment/default/demo")
            && modified.contains(r#"patch=[{"op":"replace","path":"/spec/replicas","value":1}]"#),
        "the JSON patch is logged at debug level: {modified}"
    );
    assert!(
        status.success() && exit.success(),
        "exit on SIGTERM: {exit}"
    );
    Ok(())
}

#[tokio::test]
async fn a_variety_of_edits_are_found_and_corrected_as_fluxs_own_diff_sees_them()
-> anyhow::Result<()> {
    let (cluster, ctx) = start("drift-variety").await?;
    let p = plan("  driftDetection:\n    mode: enabled");
    run(&ctx, &p).await?;
    let edits: [&[&str]; 6] = [
        // Fields other managers add are theirs: no drift.
        &[
            "patch",
            "deployment/demo",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/spec/template/spec/containers/0/env","value":[{"name":"X","value":"1"}]}]"#,
        ],
        &[
            "patch",
            "configmap/demo-config",
            "--type=merge",
            "-p",
            r#"{"data":{"added":"by-hand"}}"#,
        ],
        // Changes to fields the release owns: drift.
        &[
            "patch",
            "service/demo",
            "--type=json",
            "-p",
            r#"[{"op":"replace","path":"/spec/ports/0/targetPort","value":9090}]"#,
        ],
        &[
            "patch",
            "secret/demo-secret",
            "--type=merge",
            "-p",
            r#"{"stringData":{"password":"changed"}}"#,
        ],
        &["label", "deployment/demo", "app-"],
        &["delete", "configmap/demo-pinned"],
    ];
    for edit in edits {
        let mut args = edit.to_vec();
        args.extend(["-n", "default"]);
        kubectl(&cluster, &args)?;
    }
    let flux = flux_drift_message(&cluster, "[]")?;
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["correct cluster drift"]);
    assert_eq!(report.events[0].message, flux, "what Flux's own diff finds");
    assert!(
        flux.contains("Secret/default/demo-secret changed"),
        "{flux}"
    );
    assert!(flux.contains("Service/default/demo changed"), "{flux}");
    assert!(
        flux.contains("ConfigMap/default/demo-pinned excluded"),
        "an excluded object is not recreated either: {flux}"
    );

    assert_eq!(
        jsonpath(&cluster, "service/demo", "{.spec.ports[0].targetPort}")?,
        "8080"
    );
    assert_eq!(
        jsonpath(&cluster, "secret/demo-secret", "{.data.password}")?,
        "aHVudGVyMg==",
        "hunter2, as the chart's stringData says"
    );
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.metadata.labels.app}")?,
        "demo"
    );
    assert_eq!(
        jsonpath(
            &cluster,
            "deployment/demo",
            "{.spec.template.spec.containers[0].env[0].name}"
        )?,
        "X",
        "fields of other managers stay"
    );
    let (summary, error) = flux_drift(&cluster, "[]")?;
    assert_eq!(
        (summary.as_str(), error),
        ("ConfigMap/default/demo-pinned excluded", None),
        "Flux's own diff finds nothing left to correct"
    );
    Ok(())
}

/// A ValidatingAdmissionPolicy refusing, outside dry runs, any update that puts a
/// ConfigMap's `tier` label back to `config`: dry runs pass, corrections of that label fail.
const REFUSE_TIER_RESTORE: &str = r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: refuse-tier-restore
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [""]
      apiVersions: ["v1"]
      operations: ["UPDATE"]
      resources: ["configmaps"]
  validations:
  - expression: >-
      request.dryRun == true ||
      !has(object.metadata.labels) || !('tier' in object.metadata.labels) ||
      object.metadata.labels['tier'] != 'config' ||
      (has(oldObject.metadata.labels) && 'tier' in oldObject.metadata.labels &&
       oldObject.metadata.labels['tier'] == 'config')
    message: tier may not go back to config
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: refuse-tier-restore
spec:
  policyName: refuse-tier-restore
  validationActions: [Deny]
"#;

#[tokio::test]
async fn a_failed_correction_is_reported_with_the_corrections_that_worked_and_requeued()
-> anyhow::Result<()> {
    use std::time::{Duration, Instant};

    let (cluster, ctx) = start("drift-fail").await?;
    let p = plan("  driftDetection:\n    mode: enabled");
    run(&ctx, &p).await?;
    let dir = tempfile::tempdir()?;
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, REFUSE_TIER_RESTORE)?;
    kubectl(&cluster, &["apply", "-f", &policy.display().to_string()])?;
    // Wait until the policy is enforced, with a probe ConfigMap.
    kubectl(&cluster, &["create", "configmap", "probe", "-n", "default"])?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        kubectl(
            &cluster,
            &[
                "label",
                "configmap/probe",
                "-n",
                "default",
                "--overwrite",
                "tier=edited",
            ],
        )?;
        let restored = kubectl(
            &cluster,
            &[
                "label",
                "configmap/probe",
                "-n",
                "default",
                "--overwrite",
                "tier=config",
            ],
        );
        if restored.is_err() {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the policy is not enforced after 30s"
        );
        std::thread::sleep(Duration::from_millis(300));
    }

    kubectl(
        &cluster,
        &[
            "label",
            "configmap/demo-config",
            "-n",
            "default",
            "--overwrite",
            "tier=edited",
        ],
    )?;
    kubectl(
        &cluster,
        &["scale", "deployment/demo", "-n", "default", "--replicas=3"],
    )?;
    let report = run(&ctx, &p).await?;
    assert_eq!(report.actions, ["correct cluster drift"]);
    assert_eq!(
        report.step,
        Step::Requeue,
        "the drift left makes the reconcile requeue, as Flux's ErrMustRequeue"
    );
    let failed = report
        .events
        .iter()
        .find(|e| e.reason == "DriftCorrectionFailed")
        .unwrap_or_else(|| panic!("no DriftCorrectionFailed event in {:#?}", report.events));
    let (head, rest) = failed
        .message
        .split_once("\nConfigMap/default/demo-config patch failure: ")
        .unwrap_or_else(|| panic!("{}", failed.message));
    assert_eq!(
        head,
        "Failed to partially correct cluster state of release default/demo.v1:"
    );
    let (error, successes) = rest
        .split_once("\n\nSuccessful corrections:\n")
        .unwrap_or_else(|| panic!("{}", failed.message));
    assert!(
        error.contains("refuse-tier-restore") && error.contains("tier may not go back to config"),
        "the API server's refusal: {error}"
    );
    assert_eq!(successes, "Deployment/default/demo configured");
    assert_eq!(
        jsonpath(&cluster, "deployment/demo", "{.spec.replicas}")?,
        "1"
    );
    assert_eq!(
        jsonpath(&cluster, "configmap/demo-config", "{.metadata.labels.tier}")?,
        "edited"
    );
    let posted = events(&cluster, "default")?;
    assert_eq!(event_with(&posted, "DriftCorrectionFailed").0, "Warning");
    Ok(())
}
