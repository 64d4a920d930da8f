//! Rendering with the cluster, and the release options that change what is rendered or
//! applied, against real local clusters. Expected values come from the real helm v4 CLI
//! installing the same chart into the same cluster, never from the agent.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use flotilla_agent::reconcile::plan_file::PlanFile;
use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_agent::reconcile::{Context, ReconcileReport};
use flotilla_core::meta::{condition, reason};
use flotilla_tests::cluster::pinned_kubernetes_version;
use flotilla_tests::tools::{self, helm_history, helm_in as helm, kubectl_in};
use flotilla_tests::{Cluster, ClusterOptions};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;

use common::{Hr, charts, expect_condition, run};

/// HelmRelease `default/<name>` with `chart` and extra spec lines.
fn plan(name: &str, chart: &str, generation: i64, spec: &str) -> PlanFile {
    Hr::new(name, chart)
        .generation(generation)
        .spec(spec)
        .plan()
}

fn released(report: &ReconcileReport) -> (String, String) {
    let (reason, _, message) = expect_condition(report, condition::RELEASED);
    (reason.to_owned(), message.to_owned())
}

fn kubectl_apply(kubeconfig: &Path, yaml: &str) -> anyhow::Result<()> {
    kubectl_in(kubeconfig, &["apply", "-f", "-"], Some(yaml)).map(drop)
}

async fn config_map_data(
    client: &kube::Client,
    name: &str,
) -> anyhow::Result<BTreeMap<String, String>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    Ok(api.get(name).await?.data.unwrap_or_default())
}

const WIDGETS: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  names: {kind: Widget, listKind: WidgetList, plural: widgets, singular: widget}
  scope: Namespaced
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
"#;

#[tokio::test]
async fn capabilities_and_lookup_come_from_the_cluster_as_helm_install_sees_them()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("render-cluster")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    kubectl_apply(&kubeconfig, WIDGETS)?;
    tools::wait_established(
        &kubeconfig,
        &["crd/widgets.example.com"],
        std::time::Duration::from_secs(30),
    )?;
    kubectl_apply(
        &kubeconfig,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  namespace: default\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: given\n  namespace: default\ndata:\n  token: s3cret\n",
    )?;

    // The reference: helm v4 installs the same chart into the same cluster.
    let chart = charts().join("cluster-aware");
    helm(
        &kubeconfig,
        &[
            "install",
            "reference",
            chart.to_str().expect("UTF-8 path"),
            "-n",
            "default",
        ],
    )?;
    let client = cluster.client().await?;
    let expected = config_map_data(&client, "reference-seen").await?;

    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let report = run(&ctx, &plan("agent", "cluster-aware", 1, "")).await?;
    assert_eq!(
        report.actions,
        ["install"],
        "{:#?}",
        report.status.conditions
    );
    let seen = config_map_data(&client, "agent-seen").await?;
    assert_eq!(
        seen, expected,
        "the agent and helm install rendered differently"
    );

    // And the reference saw what the cluster holds (so the comparison is not vacuous).
    assert_eq!(expected["kubeVersion"], pinned_kubernetes_version()?);
    assert_eq!(expected["appsV1Deployment"], "true");
    assert_eq!(expected["widgetsServed"], "true");
    assert_eq!(expected["notServed"], "false");
    assert_eq!(expected["givenToken"], "s3cret");
    assert_eq!(expected["missing"], "map[]");
    assert_eq!(expected["namespaceListKind"], "NamespaceList");
    assert_eq!(expected["defaultNamespacePhase"], "Active");
    assert_eq!(expected["widgetNames"], "w1");

    // A chart's kubeVersion constraint is checked against the same version, with Helm's
    // message.
    let gate = tools::run(
        &tools::helm()?,
        &[
            "install",
            "gate",
            &chart_path("kube-version-unmet"),
            "-n",
            "default",
        ],
        &kubeconfig,
        None,
    )?;
    let helm_says = String::from_utf8_lossy(&gate.stderr).into_owned();
    let helm_reason = helm_says
        .trim()
        .trim_start_matches("Error: INSTALLATION FAILED: ")
        .to_owned();
    let report = run(&ctx, &plan("gate", "kube-version-unmet", 1, "")).await?;
    let (r, message) = released(&report);
    assert_eq!(r, reason::INSTALL_FAILED);
    assert!(
        helm_reason.starts_with("chart requires kubeVersion")
            && helm_reason.ends_with(&format!("Kubernetes {}", expected["kubeVersion"]))
            && message.contains(&helm_reason),
        "helm: {helm_says}\nagent: {message}"
    );
    Ok(())
}

#[tokio::test]
async fn lookups_run_as_the_service_account_the_plan_names() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("render-sa")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    kubectl_apply(&kubeconfig, WIDGETS)?;
    // Allowed everything the release needs in `default`, but not to read Namespaces.
    kubectl_apply(
        &kubeconfig,
        r#"
apiVersion: v1
kind: ServiceAccount
metadata: {name: renderer, namespace: default}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: renderer, namespace: default}
rules:
  - apiGroups: ["", "example.com"]
    resources: ["configmaps", "secrets", "widgets"]
    verbs: ["*"]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: renderer, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: renderer}
subjects: [{kind: ServiceAccount, name: renderer, namespace: default}]
"#,
    )?;
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&kubeconfig)?,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    let ctx = Context::from_config(config, "default", Arc::new(ChartRenderer::default()))?;
    let report = run(
        &ctx,
        &plan(
            "agent",
            "cluster-aware",
            1,
            "  serviceAccountName: renderer",
        ),
    )
    .await?;
    let (r, message) = released(&report);
    assert_eq!(r, reason::INSTALL_FAILED);
    assert!(
        message.contains("namespaces is forbidden")
            && message.contains("system:serviceaccount:default:renderer"),
        "{message}"
    );
    Ok(())
}

/// `helm history` as (revision, status, description).
fn chart_path(name: &str) -> String {
    charts()
        .join(name)
        .to_str()
        .expect("the repo path is UTF-8")
        .to_owned()
}

#[tokio::test]
async fn preserve_values_reuses_the_release_values_as_helm_reuse_values_does() -> anyhow::Result<()>
{
    let cluster = Cluster::start(ClusterOptions::named("opt-preserve")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );

    // Reference: helm install with two values, then upgrade to the chart's next version
    // with one new value and --reuse-values.
    helm(
        &kubeconfig,
        &[
            "install",
            "reference",
            &chart_path("values-echo-1"),
            "-n",
            "default",
            "--set",
            "a=1",
            "--set",
            "b.c=2",
        ],
    )?;
    helm(
        &kubeconfig,
        &[
            "upgrade",
            "reference",
            &chart_path("values-echo-2"),
            "-n",
            "default",
            "--reuse-values",
            "--set",
            "a=5",
        ],
    )?;

    let first = plan(
        "agent",
        "values-echo-1",
        1,
        "  values:\n    a: 1\n    b:\n      c: 2",
    );
    let report = run(&ctx, &first).await?;
    assert_eq!(report.actions, ["install"]);
    let second = plan(
        "agent",
        "values-echo-2",
        2,
        "  upgrade:\n    preserveValues: true\n  values:\n    a: 5",
    );
    let report = run(&ctx, &second).await?;
    assert_eq!(
        released(&report).0,
        reason::UPGRADE_SUCCEEDED,
        "{:?}",
        report.actions
    );

    let expected = config_map_data(&client, "reference-values").await?;
    let seen = config_map_data(&client, "agent-values").await?;
    assert_eq!(seen, expected);
    // The old chart's defaults stay, the old user value is kept, the new one wins.
    let values: serde_json::Value = serde_json::from_str(&expected["values"])?;
    assert_eq!(values["fromChart"], "default-of-version-1");
    assert_eq!(values["a"], 5);
    assert_eq!(values["b"]["c"], 2);
    // The stored user values, as the real helm reads them from both releases.
    let get_values = |name: &str| -> anyhow::Result<serde_json::Value> {
        Ok(serde_json::from_str(&helm(
            &kubeconfig,
            &["get", "values", name, "-n", "default", "-o", "json"],
        )?)?)
    };
    assert_eq!(get_values("agent")?, get_values("reference")?);

    // Without preserveValues the old values are gone (Helm's --reset-values).
    helm(
        &kubeconfig,
        &[
            "upgrade",
            "reference",
            &chart_path("values-echo-2"),
            "-n",
            "default",
            "--reset-values",
            "--set",
            "a=6",
        ],
    )?;
    let third = plan("agent", "values-echo-2", 3, "  values:\n    a: 6");
    let report = run(&ctx, &third).await?;
    assert_eq!(released(&report).0, reason::UPGRADE_SUCCEEDED);
    assert_eq!(
        config_map_data(&client, "agent-values").await?,
        config_map_data(&client, "reference-values").await?
    );
    Ok(())
}

#[tokio::test]
async fn install_replace_reuses_an_uninstalled_name_as_helm_install_replace_does()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("opt-replace")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let chart = chart_path("values-echo-1");

    // Two releases installed and uninstalled keeping their history, by the real helm.
    for name in ["reference", "agent"] {
        helm(&kubeconfig, &["install", name, &chart, "-n", "default"])?;
        helm(
            &kubeconfig,
            &["uninstall", name, "-n", "default", "--keep-history"],
        )?;
    }
    // Reference: installing again is refused, then allowed with --replace.
    let refused = tools::run(
        &tools::helm()?,
        &["install", "reference", &chart, "-n", "default"],
        &kubeconfig,
        None,
    )?;
    assert!(!refused.status.success());
    let refused_message = String::from_utf8_lossy(&refused.stderr).into_owned();
    helm(
        &kubeconfig,
        &["install", "reference", &chart, "-n", "default", "--replace"],
    )?;

    // The agent meets the uninstalled release: install, refused the same way...
    let report = run(&ctx, &plan("agent", "values-echo-1", 1, "")).await?;
    let (r, message) = released(&report);
    assert_eq!(r, reason::INSTALL_FAILED);
    assert!(
        refused_message
            .contains("release name check failed: cannot reuse a name that is still in use")
            && message
                .contains("release name check failed: cannot reuse a name that is still in use"),
        "helm: {refused_message}\nagent: {message}"
    );
    // ...then with install.replace the name is reused, as helm install --replace does.
    let report = run(
        &ctx,
        &plan("agent", "values-echo-1", 2, "  install:\n    replace: true"),
    )
    .await?;
    assert_eq!(
        released(&report).0,
        reason::INSTALL_SUCCEEDED,
        "{:#?}",
        report.status.conditions
    );
    let reference = helm_history(&kubeconfig, "reference", "default")?;
    assert_eq!(helm_history(&kubeconfig, "agent", "default")?, reference);
    assert_eq!(
        reference
            .iter()
            .map(|(v, s, _)| (*v, s.as_str()))
            .collect::<Vec<_>>(),
        [(1, "superseded"), (2, "deployed")]
    );
    Ok(())
}

#[tokio::test]
async fn disable_schema_validation_lets_values_the_schema_refuses_through() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("opt-schema")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let chart = chart_path("schema");

    let refused = tools::run(
        &tools::helm()?,
        &[
            "install",
            "reference",
            &chart,
            "-n",
            "default",
            "--set",
            "replicaCount=0",
        ],
        &kubeconfig,
        None,
    )?;
    assert!(!refused.status.success());
    let refused_message = String::from_utf8_lossy(&refused.stderr).into_owned();
    helm(
        &kubeconfig,
        &[
            "install",
            "reference",
            &chart,
            "-n",
            "default",
            "--set",
            "replicaCount=0",
            "--skip-schema-validation",
        ],
    )?;

    let report = run(
        &ctx,
        &plan("agent", "schema", 1, "  values:\n    replicaCount: 0"),
    )
    .await?;
    let (r, message) = released(&report);
    assert_eq!(r, reason::INSTALL_FAILED);
    // Helm's own schema message (after its "Error: INSTALLATION FAILED: " prefix), up to
    // the path: the rest quotes the value ("got 0"), which the agent withholds since values
    // may come from Secrets (issue 29, point 8).
    let helm_reason = refused_message
        .trim()
        .trim_start_matches("Error: INSTALLATION FAILED: ")
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    let helm_path = helm_reason
        .split_once(": ")
        .map(|(path, _)| path.trim())
        .unwrap_or_default();
    assert!(
        helm_path == "- at '/replicaCount'" && message.contains(helm_path),
        "helm: {refused_message}\nagent: {message}"
    );
    assert!(
        message.contains("message withheld") && !message.contains("got 0"),
        "the agent quotes the refused value: {message}"
    );
    let report = run(
        &ctx,
        &plan(
            "agent",
            "schema",
            2,
            "  install:\n    disableSchemaValidation: true\n  upgrade:\n    disableSchemaValidation: true\n  values:\n    replicaCount: 0",
        ),
    )
    .await?;
    assert!(
        matches!(
            released(&report).0.as_str(),
            reason::INSTALL_SUCCEEDED | reason::UPGRADE_SUCCEEDED
        ),
        "{:?}",
        report.status.conditions
    );
    assert_eq!(
        config_map_data(&client, "agent-schema").await?,
        config_map_data(&client, "reference-schema").await?
    );
    Ok(())
}

#[tokio::test]
async fn common_metadata_labels_and_annotates_every_object_hooks_included() -> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("opt-common")).await?;
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let report = run(
        &ctx,
        &plan(
            "agent",
            "with-hook",
            1,
            "  commonMetadata:\n    labels:\n      team: platform\n      tier: gold\n    annotations:\n      owner: ops@example.com",
        ),
    )
    .await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["agent-plain", "agent-hooked"] {
        let cm = api.get(name).await?;
        let labels = cm.metadata.labels.clone().unwrap_or_default();
        let annotations = cm.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(
            labels.get("team").map(String::as_str),
            Some("platform"),
            "{name}: {labels:?}"
        );
        assert_eq!(
            labels.get("tier").map(String::as_str),
            Some("gold"),
            "{name}"
        );
        assert_eq!(
            annotations.get("owner").map(String::as_str),
            Some("ops@example.com"),
            "{name}"
        );
    }
    let plain = api.get("agent-plain").await?;
    assert_eq!(
        plain
            .metadata
            .labels
            .unwrap_or_default()
            .get("app")
            .map(String::as_str),
        Some("web"),
        "the chart's other labels stay"
    );

    // With the Helm 3 strategy, hooks are left alone.
    let report = run(
        &ctx,
        &plan(
            "other",
            "with-hook",
            1,
            "  postRenderStrategy: nohooks\n  commonMetadata:\n    labels:\n      tier: gold",
        ),
    )
    .await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let hooked = api.get("other-hooked").await?;
    assert!(
        !hooked
            .metadata
            .labels
            .unwrap_or_default()
            .contains_key("tier")
    );
    let plain = api.get("other-plain").await?;
    assert_eq!(
        plain
            .metadata
            .labels
            .unwrap_or_default()
            .get("tier")
            .map(String::as_str),
        Some("gold")
    );
    Ok(())
}

#[tokio::test]
async fn post_renderers_patch_what_is_applied_and_stored_hooks_as_the_strategy_says()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("opt-postrender")).await?;
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let renderers = "  postRenderers:
    - kustomize:
        patches:
          - target:
              kind: ConfigMap
            patch: |
              apiVersion: v1
              kind: ConfigMap
              metadata:
                name: any
              data:
                patched: smp
    - kustomize:
        patches:
          - target:
              kind: ConfigMap
              name: \".*-plain\"
            patch: |
              - op: replace
                path: /data/a
                value: \"6902\"";
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");

    // Helm v4's combined strategy (the default): hooks are post-rendered too.
    let report = run(&ctx, &plan("agent", "with-hook", 1, renderers)).await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let plain = config_map_data(&client, "agent-plain").await?;
    assert_eq!(plain.get("a").map(String::as_str), Some("6902"));
    assert_eq!(plain.get("patched").map(String::as_str), Some("smp"));
    let hooked = config_map_data(&client, "agent-hooked").await?;
    assert_eq!(hooked.get("patched").map(String::as_str), Some("smp"));
    assert_eq!(hooked.get("b").map(String::as_str), Some("2"));
    // The stored release carries the post-rendered manifest, as the real helm shows it.
    let out = tools::run(
        &tools::helm()?,
        &["get", "manifest", "agent", "-n", "default"],
        cluster.kubeconfig(),
        None,
    )?;
    let manifest = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(manifest.contains("patched: smp"), "{manifest}");
    assert!(manifest.contains("a: \"6902\""), "{manifest}");

    // nohooks (Helm 3): hooks are left as the chart renders them.
    let with_strategy = format!("  postRenderStrategy: nohooks\n{renderers}");
    let report = run(&ctx, &plan("other", "with-hook", 1, &with_strategy)).await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let plain = config_map_data(&client, "other-plain").await?;
    assert_eq!(plain.get("patched").map(String::as_str), Some("smp"));
    let hooked = api.get("other-hooked").await?;
    assert!(
        !hooked.data.unwrap_or_default().contains_key("patched"),
        "a hook is not post-rendered with nohooks"
    );

    // A patch that cannot apply fails the install with the patch named; nothing is applied.
    let bad = "  postRenderers:
    - kustomize:
        patches:
          - target:
              kind: ConfigMap
            patch: |
              - op: remove
                path: /data/missing";
    let report = run(&ctx, &plan("broken", "with-hook", 1, bad)).await?;
    let (reason, message) = released(&report);
    assert_eq!(reason, reason::INSTALL_FAILED, "{message}");
    assert!(
        message.contains("postRenderers[0].kustomize.patches[0]"),
        "{message}"
    );
    assert!(api.get_opt("broken-plain").await?.is_none());
    Ok(())
}

/// Helm v4.2's `PostRenderStrategy` as Flux v1.6.3 passes `spec.postRenderStrategy` to it
/// (`toHelmPostRenderStrategy`; Helm's `renderResources`): `combined` (the default) sends
/// hooks and templates to the post-renderers in one stream, where kustomize refuses an object
/// that is both; `separate` sends each group in a stream of its own and stores both
/// post-rendered; `nohooks` post-renders the templates only. Read back with the real helm.
#[tokio::test]
async fn post_render_strategy_separate_post_renders_hooks_apart_so_an_object_in_both_is_no_duplicate_and_nohooks_leaves_hooks_alone()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("opt-prstrategy")).await?;
    let client = cluster.client().await?;
    let ctx = Context::new(
        client.clone(),
        "default",
        Arc::new(ChartRenderer::default()),
    );
    let renderers = "  postRenderers:
    - kustomize:
        patches:
          - target:
              kind: ConfigMap
            patch: |
              apiVersion: v1
              kind: ConfigMap
              metadata:
                name: any
              data:
                patched: by-kustomize";
    let stored =
        |name: &str, what: &str| helm(cluster.kubeconfig(), &["get", what, name, "-n", "default"]);

    // combined: one stream holds `comb-shared` twice.
    let report = run(&ctx, &plan("comb", "shared-object", 1, renderers)).await?;
    let (r, message) = released(&report);
    assert_eq!(r, reason::INSTALL_FAILED, "{message}");
    assert!(
        message.contains("may not add resource with an already registered id"),
        "{message}"
    );

    // separate: each group post-rendered on its own, both stored so.
    let spec = format!("  postRenderStrategy: separate\n{renderers}");
    let report = run(&ctx, &plan("sep", "shared-object", 1, &spec)).await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let live = config_map_data(&client, "sep-shared").await?;
    assert_eq!(
        (
            live.get("from").map(String::as_str),
            live.get("patched").map(String::as_str)
        ),
        (Some("template"), Some("by-kustomize"))
    );
    let manifest = stored("sep", "manifest")?;
    assert!(
        manifest.contains("from: template") && manifest.contains("patched: by-kustomize"),
        "{manifest}"
    );
    let hooks = stored("sep", "hooks")?;
    assert!(
        hooks.contains("from: hook") && hooks.contains("patched: by-kustomize"),
        "{hooks}"
    );
    assert_eq!(
        helm_history(cluster.kubeconfig(), "sep", "default")?,
        [(1, "deployed".to_owned(), "Install complete".to_owned())]
    );

    // nohooks: the hook is stored as the chart renders it.
    let spec = format!("  postRenderStrategy: nohooks\n{renderers}");
    let report = run(&ctx, &plan("noh", "shared-object", 1, &spec)).await?;
    assert_eq!(released(&report).0, reason::INSTALL_SUCCEEDED);
    let manifest = stored("noh", "manifest")?;
    assert!(manifest.contains("patched: by-kustomize"), "{manifest}");
    let hooks = stored("noh", "hooks")?;
    assert!(
        hooks.contains("from: hook") && !hooks.contains("patched"),
        "{hooks}"
    );
    Ok(())
}
