//! The preview against a real local cluster (`flotilla_agent::preview`): a release of the
//! `preview-1` chart is installed with the real renderer, then previews of changed plans
//! are taken from that one installed state: a values change, a chart bump that drops an
//! object, a field set to the default admission gives it, a Secret change. Every object of
//! the namespace (resourceVersions) and Helm storage are compared before and after: a
//! preview changes nothing. One cluster for all cases. The objects a preview creates or
//! updates are judged against the real `helm template` + `kubectl diff --server-side` on the
//! same cluster (the helm-diff plugin is not built here yet; kubectl cannot see deletions,
//! which are checked against the chart bump itself).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use flotilla_agent::preview::preview_plan;
use flotilla_agent::reconcile::Context;
use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_core::diff::{Change, Masker, PathChange};
use flotilla_core::preview::ReleaseDiff;
use flotilla_tests::Cluster;

use common::{Hr, run};

fn plan(chart: &str, values: &str) -> PlanFile {
    let spec = if values.is_empty() {
        String::new()
    } else {
        format!("  values:\n{values}")
    };
    Hr::new("web", chart).spec(&spec).plan()
}

async fn preview(ctx: &Context, p: &PlanFile, key: u8) -> anyhow::Result<ReleaseDiff> {
    preview_plan(ctx, &p.plan, &p.chart, &Masker::new([key; 32]))
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))
}

fn change_of(d: &ReleaseDiff, object: &str) -> Option<Change> {
    d.objects
        .iter()
        .find(|o| o.object.to_string() == object)
        .map(|o| o.change)
}

fn diff_of<'a>(d: &'a ReleaseDiff, object: &str) -> &'a str {
    match d.objects.iter().find(|o| o.object.to_string() == object) {
        Some(o) => &o.diff,
        None => panic!("no {object} in {d:#?}"),
    }
}

/// `kind/namespace/name → resourceVersion` of every object of the kinds the release, its
/// controllers or Helm storage touch, in the release's namespace, read with the real kubectl.
fn versions(cluster: &Cluster) -> anyhow::Result<BTreeMap<String, String>> {
    let json = flotilla_tests::tools::kubectl_in(
        cluster.kubeconfig(),
        &[
            "get",
            "configmaps,secrets,deployments,replicasets,jobs,pods",
            "-n",
            "default",
            "-o",
            "json",
        ],
        None,
    )?;
    let list: serde_json::Value = serde_json::from_str(&json)?;
    let mut out = BTreeMap::new();
    for item in list["items"].as_array().into_iter().flatten() {
        let m = &item["metadata"];
        out.insert(
            format!(
                "{}/{}/{}",
                item["kind"].as_str().unwrap_or(""),
                m["namespace"].as_str().unwrap_or(""),
                m["name"].as_str().unwrap_or("")
            ),
            m["resourceVersion"].as_str().unwrap_or("").to_owned(),
        );
    }
    Ok(out)
}

/// The objects the real `helm template` (no hooks) of `chart` with `set` would change on the
/// cluster, as the real `kubectl diff --server-side` judges them (it cannot see deletions):
/// `group.version.Kind.namespace.name`, kubectl's names.
fn kubectl_judge(cluster: &Cluster, chart: &str, set: &[&str]) -> anyhow::Result<Vec<String>> {
    let chart = common::charts().join(chart).display().to_string();
    let mut args = vec![
        "template",
        "web",
        chart.as_str(),
        "-n",
        "default",
        "--no-hooks",
    ];
    for s in set {
        args.extend(["--set", s]);
    }
    let manifest = flotilla_tests::tools::helm_in(cluster.kubeconfig(), &args)?;
    let out = flotilla_tests::tools::run(
        &flotilla_tests::tools::kubectl()?,
        &["diff", "--server-side", "--force-conflicts", "-f", "-"],
        cluster.kubeconfig(),
        Some(&manifest),
    )?;
    anyhow::ensure!(
        matches!(out.status.code(), Some(0 | 1)),
        "kubectl diff: {}",
        flotilla_tests::tools::text(&out)
    );
    let mut changed: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("diff "))
        .filter_map(|l| l.split_whitespace().last())
        .filter_map(|p| p.rsplit('/').next())
        .map(str::to_owned)
        .collect();
    changed.sort();
    Ok(changed)
}

/// The created and updated objects of a preview, named as kubectl names them.
fn created_or_updated(d: &ReleaseDiff) -> Vec<String> {
    let mut out: Vec<String> = d
        .objects
        .iter()
        .filter(|o| matches!(o.change, Change::Create | Change::Update))
        .map(|o| {
            format!(
                "{}.{}.{}.{}",
                o.object.api_version.replace('/', "."),
                o.object.kind,
                o.object.namespace.as_deref().unwrap_or(""),
                o.object.name
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_preview_shows_what_an_upgrade_would_do_and_changes_nothing() -> anyhow::Result<()> {
    let (cluster, ctx) = common::start("preview", Arc::new(ChartRenderer::default())).await?;
    let installed = plan("preview-1", "");
    let report = run(&ctx, &installed).await?;
    assert_eq!(report.actions, ["install"], "{:#?}", report.status);
    // Once the Deployment's controllers are done with it (its status settles).
    let mut before = versions(&cluster)?;
    for _ in 0..20 {
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
        let again = versions(&cluster)?;
        if again == before {
            break;
        }
        before = again;
    }
    assert!(
        before
            .keys()
            .any(|k| k.starts_with("Secret/default/sh.helm.release.v1.web.")),
        "Helm storage is among the objects compared: {before:#?}"
    );

    // The plan as installed: nothing would change.
    let same = preview(&ctx, &installed, 1).await?;
    assert!(!same.has_changes(), "{same:#?}");
    assert_eq!(same.counts(), (0, 0, 0, 4), "{same:#?}");
    assert_eq!(
        same.hooks
            .iter()
            .map(|h| (h.object.to_string(), h.events.clone()))
            .collect::<Vec<_>>(),
        [(
            "Job/default/web-migrate".to_owned(),
            vec!["pre-upgrade".to_owned()]
        )]
    );
    assert_eq!(same.tests.len(), 1);
    assert_eq!(same.tests[0].object.to_string(), "Pod/default/web-test");
    assert!(!same.chart.changed());

    // A values change: the ConfigMap's line, and the path in the values diff.
    let greeting = preview(&ctx, &plan("preview-1", "    greeting: bye\n"), 1).await?;
    assert!(greeting.has_changes());
    assert_eq!(
        change_of(&greeting, "ConfigMap/default/web-config"),
        Some(Change::Update)
    );
    let d = diff_of(&greeting, "ConfigMap/default/web-config");
    assert!(
        d.contains("\n-  greeting: hello\n+  greeting: bye\n"),
        "{d}"
    );
    assert_eq!(greeting.counts(), (0, 1, 0, 3), "{greeting:#?}");
    assert_eq!(
        created_or_updated(&greeting),
        kubectl_judge(&cluster, "preview-1", &["greeting=bye"])?,
        "the same objects change as kubectl diff --server-side says"
    );
    assert_eq!(
        greeting
            .values
            .iter()
            .map(|v| (v.path.as_str(), v.change))
            .collect::<Vec<_>>(),
        [("greeting", PathChange::Added)],
        "against the stored release's user values (none)"
    );

    // A chart bump that drops an object: Delete, and the chart change.
    let bumped = preview(&ctx, &plan("preview-2", ""), 1).await?;
    assert_eq!(
        change_of(&bumped, "ConfigMap/default/web-legacy"),
        Some(Change::Delete),
        "{bumped:#?}"
    );
    assert!(
        diff_of(&bumped, "ConfigMap/default/web-legacy").contains("-  note: only in version 1"),
        "{bumped:#?}"
    );
    assert_eq!(bumped.counts(), (0, 0, 1, 3), "{bumped:#?}");
    assert_eq!(
        created_or_updated(&bumped),
        kubectl_judge(&cluster, "preview-2", &[])?,
    );
    assert_eq!(
        (
            bumped.chart.from.as_ref().map(|c| c.version.as_str()),
            bumped.chart.to.version.as_str()
        ),
        (Some("0.1.0"), "0.2.0")
    );

    // A field set to the default the API server gives it: the dry run shows it unchanged;
    // set to another value it is an update of that line.
    let default = preview(
        &ctx,
        &plan("preview-1", "    revisionHistoryLimit: 10\n"),
        1,
    )
    .await?;
    assert_eq!(
        change_of(&default, "Deployment/default/web"),
        Some(Change::Unchanged),
        "{default:#?}"
    );
    let other = preview(&ctx, &plan("preview-1", "    revisionHistoryLimit: 3\n"), 1).await?;
    assert_eq!(
        change_of(&other, "Deployment/default/web"),
        Some(Change::Update),
        "{other:#?}"
    );
    assert_eq!(
        created_or_updated(&default),
        kubectl_judge(&cluster, "preview-1", &["revisionHistoryLimit=10"])?,
    );
    assert_eq!(
        created_or_updated(&other),
        kubectl_judge(&cluster, "preview-1", &["revisionHistoryLimit=3"])?,
    );
    let d = diff_of(&other, "Deployment/default/web");
    assert!(
        d.contains("-  revisionHistoryLimit: 10\n+  revisionHistoryLimit: 3\n"),
        "{d}"
    );

    // A Secret change: the key is named, the value never shows (plain or base64), and the
    // digests of the two sides differ.
    let secret = preview(&ctx, &plan("preview-1", "    password: n3w-s3cr3t\n"), 7).await?;
    assert_eq!(
        change_of(&secret, "Secret/default/web-db"),
        Some(Change::Update),
        "{secret:#?}"
    );
    assert_eq!(
        created_or_updated(&secret),
        kubectl_judge(&cluster, "preview-1", &["password=n3w-s3cr3t"])?,
    );
    let d = diff_of(&secret, "Secret/default/web-db");
    let json = serde_json::to_string(&secret)?;
    for value in [
        "s3cr3t-one",
        "n3w-s3cr3t",
        "czNjcjN0LW9uZQ==",
        "bjN3LXMzY3IzdA==",
        "YWRtaW4=",
    ] {
        assert!(!json.contains(value), "{value} in {json}");
    }
    let changed: Vec<&str> = d
        .lines()
        .filter(|l| (l.starts_with('-') || l.starts_with('+')) && !l.starts_with("---"))
        .filter(|l| !l.starts_with("+++"))
        .collect();
    assert_eq!(changed.len(), 2, "{d}");
    assert!(
        changed
            .iter()
            .all(|l| l.contains("password: (secret value, ")),
        "{d}"
    );
    assert_ne!(changed[0][1..], changed[1][1..], "the digests differ: {d}");

    // Nothing changed anywhere: no object, no Helm storage record, no state.
    let after = versions(&cluster)?;
    assert_eq!(before, after, "a preview changed the cluster");
    Ok(())
}
