//! `flotilla diff hr` end to end: the real `flotilla-hub`, one real `flotilla-agent` on its
//! workload cluster ([`flotilla_tests::fleet::Fleet`]) and the real `flotilla` CLI. A
//! HelmRelease of the example chart is installed; then its preview as it is (exit 0, no
//! change), with a values change given in a file (exit 2, the ConfigMap's line, the value
//! path), as JSON (parseable, the same answer), and a file naming another HelmRelease (exit
//! 1, a sentence). The workload's Helm history and the HelmRelease's plan revision are the
//! same after the previews as before: a preview changes nothing.

use std::time::Duration;

use flotilla_api::HelmRelease;
use flotilla_tests::bins::{self, Progress};
use flotilla_tests::fleet::{Fleet, FleetOptions};
use flotilla_tests::tools::helm_history;
use kube::api::Api;

const NS: &str = "preview";

fn manifests(fleet: &Fleet, message: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Namespace
metadata:
  name: {NS}
---
apiVersion: source.flotilla.dev/v1
kind: HelmRepository
metadata:
  name: examples
  namespace: {NS}
spec:
  interval: 10m
  url: {}
---
{}"#,
        fleet.repo.url(),
        release(message)
    )
}

fn release(message: &str) -> String {
    format!(
        r#"apiVersion: helm.flotilla.dev/v1
kind: HelmRelease
metadata:
  name: hello
  namespace: {NS}
spec:
  clusterRef:
    name: workload-a
  interval: 10m
  releaseName: hello
  targetNamespace: hello
  storageNamespace: hello
  install:
    createNamespace: true
  chart:
    spec:
      chart: hello
      version: "0.1.x"
      sourceRef:
        kind: HelmRepository
        name: examples
  values:
    message: {message}
"#
    )
}

#[tokio::test]
async fn diff_hr_shows_the_next_reconcile_and_exits_0_or_2() -> anyhow::Result<()> {
    let mut options = FleetOptions::named("preview");
    options.workloads = vec!["workload-a".to_owned()];
    let fleet = Fleet::start(bins::build(Progress::OnFailure)?, options).await?;
    fleet.apply(&manifests(&fleet, "before"))?;
    fleet
        .wait_ready(&[(NS, "hello")], Duration::from_secs(180), |_| {})
        .await?;
    let workload = &fleet.workload("workload-a")?.cluster;
    let history = helm_history(workload.kubeconfig(), "hello", "hello")?;
    let api: Api<HelmRelease> = Api::namespaced(fleet.mgmt.client().await?, NS);
    let annotations = |hr: HelmRelease| hr.metadata.annotations.unwrap_or_default();
    let before = annotations(api.get("hello").await?);

    // As it is: nothing would change.
    let same = fleet.flotilla_output(&["diff", "hr", "hello", "-n", NS])?;
    let text = String::from_utf8_lossy(&same.stdout);
    assert_eq!(
        same.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&same.stderr)
    );
    assert!(text.ends_with("no change\n"), "{text}");

    // A values change in a file: the ConfigMap's line and the value path; exit 2.
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("hello.yaml");
    std::fs::write(&file, release("after"))?;
    let file_arg = file.display().to_string();
    let changed = fleet.flotilla_output(&["diff", "hr", "hello", "-n", NS, "-f", &file_arg])?;
    let text = String::from_utf8_lossy(&changed.stdout);
    assert_eq!(
        changed.status.code(),
        Some(2),
        "{text}{}",
        String::from_utf8_lossy(&changed.stderr)
    );
    assert!(text.contains("~ ConfigMap/hello/hello\n"), "{text}");
    assert!(
        text.contains("\n-  message: before\n+  message: after\n"),
        "{text}"
    );
    assert!(text.contains("values:\n  message changed\n"), "{text}");

    // The same as JSON: a ReleaseDiff.
    let json = fleet.flotilla_output(&[
        "diff", "hr", "hello", "-n", NS, "-f", &file_arg, "-o", "json",
    ])?;
    assert_eq!(json.status.code(), Some(2));
    let diff: flotilla_core::preview::ReleaseDiff = serde_json::from_slice(&json.stdout)?;
    assert!(diff.has_changes());
    assert_eq!(
        diff.counts().1,
        2,
        "the ConfigMap and the Deployment (its checksum): {diff:#?}"
    );

    // A file of another HelmRelease: refused with a sentence, exit 1.
    std::fs::write(
        &file,
        release("after").replace("name: hello\n  namespace", "name: other\n  namespace"),
    )?;
    let wrong = fleet.flotilla_output(&["diff", "hr", "hello", "-n", NS, "-f", &file_arg])?;
    assert_eq!(wrong.status.code(), Some(1));
    let err = String::from_utf8_lossy(&wrong.stderr);
    assert!(err.contains("metadata.name: is \"other\""), "{err}");

    // Nothing changed: no Helm revision, no plan revision, and the previews are gone.
    assert_eq!(
        helm_history(workload.kubeconfig(), "hello", "hello")?,
        history
    );
    let after = annotations(api.get("hello").await?);
    assert_eq!(
        after.get("helm.flotilla.dev/plan-revision"),
        before.get("helm.flotilla.dev/plan-revision")
    );
    let previews: Api<flotilla_api::HelmReleasePreview> =
        Api::namespaced(fleet.mgmt.client().await?, NS);
    assert!(previews.list(&Default::default()).await?.items.is_empty());
    Ok(())
}
