//! A chart whose `values.schema.json` is a `$ref` to a schema served over HTTP (by the
//! harness's nginx, as bjw-s `app-template`'s refers to raw.githubusercontent.com): the
//! agent fetches it and validates against it, and a chart whose remote schema is missing
//! fails with Helm's message. Real `helm install` of the same charts on the same cluster is
//! the judge.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use flotilla_agent::reconcile::render::ChartRenderer;
use flotilla_core::meta::{ConditionStatus, reason};
use flotilla_tests::servers::{HelmRepoServer, RepoOptions};
use flotilla_tests::tools;

use common::{Hr, expect_condition, run};

/// A chart `name` with a ConfigMap holding `.Values.message` and `schema` as its
/// `values.schema.json`.
fn chart(root: &Path, name: &str, schema: &str) -> anyhow::Result<PathBuf> {
    let dir = root.join(name);
    std::fs::create_dir_all(dir.join("templates"))?;
    std::fs::write(
        dir.join("Chart.yaml"),
        format!("apiVersion: v2\nname: {name}\nversion: 0.1.0\n"),
    )?;
    std::fs::write(dir.join("values.yaml"), "message: hello\n")?;
    std::fs::write(dir.join("values.schema.json"), schema)?;
    std::fs::write(
        dir.join("templates/cm.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-cm\ndata:\n  message: {{ .Values.message | quote }}\n",
    )?;
    Ok(dir)
}

/// What `helm install` printed on failure, after its `Error: INSTALLATION FAILED: `.
fn helm_refusal(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = tools::run(&tools::helm()?, args, kubeconfig, None)?;
    anyhow::ensure!(!out.status.success(), "helm {args:?} succeeded");
    let stderr = String::from_utf8_lossy(&out.stderr);
    Ok(stderr
        .trim()
        .trim_start_matches("Error: INSTALLATION FAILED: ")
        .to_owned())
}

#[tokio::test]
async fn a_remote_schema_ref_is_fetched_and_enforced_and_a_missing_one_fails_with_helms_message()
-> anyhow::Result<()> {
    let (cluster, ctx) = common::start("remote-schema", Arc::new(ChartRenderer::default())).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let server = HelmRepoServer::start(RepoOptions::named("schemas")).await?;
    let schemas = server.charts_dir().join("schemas");
    std::fs::create_dir_all(&schemas)?;
    std::fs::write(
        schemas.join("app.json"),
        r#"{"type": "object", "required": ["message"],
            "properties": {"message": {"type": "string", "minLength": 1}}}"#,
    )?;
    let url = server.url();
    let root = tempfile::tempdir()?;
    let ok = chart(
        root.path(),
        "remote-ok",
        &format!(r#"{{"$ref": "{url}/schemas/app.json"}}"#),
    )?;
    let missing = chart(
        root.path(),
        "remote-missing",
        &format!(r#"{{"$ref": "{url}/schemas/missing.json#/definitions/app"}}"#),
    )?;
    let (ok, missing) = (ok.display().to_string(), missing.display().to_string());

    // The judge: helm installs the first, refuses it with an empty message (the remote
    // schema's minLength), and refuses the second naming the document it could not load.
    tools::helm_in(&kubeconfig, &["install", "ref-ok", &ok, "-n", "default"])?;
    let helm_empty = helm_refusal(
        &kubeconfig,
        &[
            "install",
            "ref-empty",
            &ok,
            "-n",
            "default",
            "--set",
            "message=",
        ],
    )?;
    assert!(
        helm_empty.ends_with("- at '/message': minLength: got 0, want 1"),
        "{helm_empty}"
    );
    let helm_missing = helm_refusal(
        &kubeconfig,
        &["install", "ref-missing", &missing, "-n", "default"],
    )?;
    let expected = format!(
        "values don't meet the specifications of the schema(s) in the following chart(s):\nremote-missing:\nfailing loading \"{url}/schemas/missing.json\": HTTP request to {url}/schemas/missing.json returned status 404 (Not Found)"
    );
    assert_eq!(helm_missing, expected);

    let app_gets = || -> anyhow::Result<usize> {
        Ok(server
            .requests()?
            .iter()
            .filter(|r| r.target == "/schemas/app.json" && r.status == 200)
            .count())
    };
    let helm_gets = app_gets()?;
    assert_eq!(helm_gets, 2, "helm loads the schema on each install");

    // The agent installs the first.
    let report = run(&ctx, &Hr::new("ok", &ok).plan()).await?;
    let (r, status, _) = expect_condition(&report, "Released");
    assert_eq!(
        (r, status),
        (reason::INSTALL_SUCCEEDED, ConditionStatus::True)
    );
    let data = tools::kubectl_in(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "ok-cm",
            "-n",
            "default",
            "-o",
            "jsonpath={.data.message}",
        ],
        None,
    )?;
    assert_eq!(data, "hello");

    // It enforces the remote schema: an empty message is refused at the path helm names.
    let report = run(
        &ctx,
        &Hr::new("empty", &ok)
            .spec("  values:\n    message: \"\"")
            .plan(),
    )
    .await?;
    let (r, status, message) = expect_condition(&report, "Released");
    assert_eq!(
        (r, status),
        (reason::INSTALL_FAILED, ConditionStatus::False)
    );
    assert!(
        message.contains("remote-ok:\n- at '/message': "),
        "{message}"
    );

    // The missing one fails with Helm's message, word for word.
    let report = run(&ctx, &Hr::new("missing", &missing).plan()).await?;
    let (r, status, message) = expect_condition(&report, "Released");
    assert_eq!(
        (r, status),
        (reason::INSTALL_FAILED, ConditionStatus::False)
    );
    assert_eq!(
        message,
        format!(
            "Helm install failed for release default/missing with chart remote-missing@0.1.0: {expected}"
        )
    );

    // The agent fetched the schema once; the second install took it from its cache.
    assert_eq!(app_gets()? - helm_gets, 1, "{:?}", server.requests()?);
    Ok(())
}
