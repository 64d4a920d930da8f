//! The deployment artefacts of `deploy/`: the hub's and the agent's charts render with
//! `flotilla template` byte for byte as with the reference `helm template` (default values,
//! and `tests/deploy/*-everything.yaml`, which sets every value); `helm lint --strict` passes;
//! the rendered charts and the kustomize bases pass a server-side dry run on a real API
//! server, after the CRDs. (The agent under the chart's RBAC: `agent/tests/deploy_rbac.rs`.)

use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Parser as _;
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::{Cluster, ClusterOptions, tools};

const NAMESPACE: &str = "flotilla-system";

fn chart(name: &str) -> PathBuf {
    workspace_root().join("deploy/charts").join(name)
}

fn values(name: &str) -> PathBuf {
    workspace_root().join("tests/deploy").join(name)
}

/// The cases: (chart, release name, extra arguments).
fn cases() -> Vec<(&'static str, &'static str, Vec<String>)> {
    let file = |f: &str| values(f).to_string_lossy().into_owned();
    vec![
        ("flotilla-hub", "flotilla-hub", vec![]),
        (
            "flotilla-hub",
            "flotilla-hub",
            vec!["--include-crds".to_owned()],
        ),
        (
            "flotilla-hub",
            "hub",
            vec!["--values".to_owned(), file("hub-everything.yaml")],
        ),
        (
            "flotilla-hub",
            "flotilla-hub",
            vec![
                "--set".to_owned(),
                "leaderElection.enabled=false,grpc.enabled=false,metrics.service.enabled=false,rbac.localTarget.clusterAdmin=false,serviceAccount.create=false,serviceAccount.name=existing".to_owned(),
            ],
        ),
        ("flotilla-agent", "flotilla-agent", vec![]),
        (
            "flotilla-agent",
            "edge",
            vec!["--values".to_owned(), file("agent-everything.yaml")],
        ),
        (
            "flotilla-agent",
            "flotilla-agent",
            vec![
                "--set".to_owned(),
                "hub.url=https://hub:9443,hub.caPin=sha256:00,hub.existingTokenSecret=mine,rbac.workload.clusterAdmin=false,metrics.service.enabled=false".to_owned(),
            ],
        ),
    ]
}

fn args(chart_name: &str, release: &str, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        release.to_owned(),
        chart(chart_name).to_string_lossy().into_owned(),
        "--namespace".to_owned(),
        NAMESPACE.to_owned(),
    ];
    args.extend(extra.iter().cloned());
    args
}

/// `helm template ARGS`: (exit code, stdout, stderr).
fn helm_template(args: &[String]) -> (i32, String, String) {
    let helm = tools::helm().expect("the reference helm (tools/install-reference-tools)");
    let home = tempfile::tempdir().expect("temp dir");
    let out = Command::new(helm)
        .arg("template")
        .args(args)
        .env("HELM_CACHE_HOME", home.path().join("cache"))
        .env("HELM_CONFIG_HOME", home.path().join("config"))
        .env("HELM_DATA_HOME", home.path().join("data"))
        .output()
        .expect("helm runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `flotilla template ARGS`: (exit code, stdout, stderr).
fn flotilla_template(args: &[String]) -> (i32, String, String) {
    let mut argv = vec!["flotilla".to_owned(), "template".to_owned()];
    argv.extend(args.iter().cloned());
    let cli = flotilla_cli::Cli::try_parse_from(&argv).expect("arguments parse");
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = flotilla_cli::run_with(cli, &mut stdout, &mut stderr);
    (
        code,
        String::from_utf8_lossy(&stdout).into_owned(),
        String::from_utf8_lossy(&stderr).into_owned(),
    )
}

#[test]
fn flotilla_template_renders_both_charts_byte_for_byte_as_helm_template() {
    let mut failures = Vec::new();
    for (chart_name, release, extra) in cases() {
        let args = args(chart_name, release, &extra);
        let want = helm_template(&args);
        assert_eq!(want.0, 0, "helm template {args:?}: {}", want.2);
        assert!(want.1.contains("kind: Deployment"), "{}", want.1);
        let got = flotilla_template(&args);
        if got != want {
            failures.push(format!("--- {args:?}\nhelm: {want:#?}\nflotilla: {got:#?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn the_charts_refuse_what_cannot_work_as_helm_does() {
    let cases = [
        (
            "flotilla-hub",
            "replicaCount=2,leaderElection.enabled=false",
            "replicaCount above 1 needs leaderElection.enabled",
        ),
        (
            "flotilla-agent",
            "hub.url=https://hub:9443,hub.token=t",
            "hub.caPin is required with hub.url",
        ),
        (
            "flotilla-agent",
            "hub.url=https://hub:9443,hub.caPin=sha256:00",
            "hub.token (or hub.existingTokenSecret) is required with hub.url",
        ),
    ];
    for (chart_name, set, message) in cases {
        let args = args(
            chart_name,
            chart_name,
            &["--set".to_owned(), set.to_owned()],
        );
        let want = helm_template(&args);
        assert_ne!(want.0, 0, "helm accepted {set}");
        assert!(want.2.contains(message), "{}", want.2);
        assert_eq!(flotilla_template(&args), want, "{set}");
    }
}

#[test]
fn helm_lint_strict_passes_on_both_charts_with_default_and_every_value() {
    let helm = tools::helm().expect("the reference helm");
    for (chart_name, file) in [
        ("flotilla-hub", "hub-everything.yaml"),
        ("flotilla-agent", "agent-everything.yaml"),
    ] {
        for extra in [
            vec![],
            vec![
                "--values".to_owned(),
                values(file).to_string_lossy().into_owned(),
            ],
        ] {
            let out = Command::new(&helm)
                .args(["lint", "--strict"])
                .arg(chart(chart_name))
                .args(&extra)
                .output()
                .expect("helm runs");
            let text = tools::text(&out);
            assert!(
                out.status.success(),
                "helm lint {chart_name} {extra:?}: {text}"
            );
            assert!(text.contains("0 chart(s) failed"), "{text}");
            for bad in ["[WARNING]", "[ERROR]"] {
                assert!(
                    !text.contains(bad),
                    "helm lint {chart_name} {extra:?}: {text}"
                );
            }
        }
    }
}

/// `kubectl apply --server-side --dry-run=server` of `manifests`; the objects it would apply.
fn dry_run(kubeconfig: &Path, what: &str, manifests: &str) -> anyhow::Result<String> {
    let out = tools::kubectl_in(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "--field-manager=flotilla-deploy-test",
            "-o",
            "name",
            "-f",
            "-",
        ],
        Some(manifests),
    )
    .map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    Ok(out)
}

#[tokio::test]
async fn the_rendered_charts_and_the_kustomize_bases_pass_a_server_side_dry_run()
-> anyhow::Result<()> {
    let cluster = Cluster::start(ClusterOptions::named("deploy-dry-run")).await?;
    let kubeconfig = cluster.kubeconfig().to_owned();
    let root = workspace_root();
    // The CRDs for real (a dry run of a CRD does not serve its kind), then the namespaces.
    tools::kubectl_in(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "-f",
            &root.join("deploy/crds").to_string_lossy(),
        ],
        None,
    )?;
    tools::wait_established(
        &kubeconfig,
        &["crd", "--all"],
        std::time::Duration::from_secs(60),
    )?;
    for ns in [NAMESPACE, "flotilla-agents"] {
        tools::kubectl_in(&kubeconfig, &["create", "namespace", ns], None)?;
    }
    for (chart_name, release, extra) in cases() {
        let args = args(chart_name, release, &extra);
        let (code, rendered, stderr) = flotilla_template(&args);
        anyhow::ensure!(code == 0, "flotilla template {args:?}: {stderr}");
        let applied = dry_run(&kubeconfig, &format!("{args:?}"), &rendered)?;
        anyhow::ensure!(
            applied.contains("deployment.apps/"),
            "{args:?} applied:\n{applied}"
        );
    }
    for base in ["hub", "agent"] {
        let dir = root.join("deploy/kustomize").join(base);
        let built = tools::kubectl_in(&kubeconfig, &["kustomize", &dir.to_string_lossy()], None)?;
        let applied = dry_run(&kubeconfig, &format!("kustomize {base}"), &built)?;
        let want = format!("deployment.apps/flotilla-{base}");
        anyhow::ensure!(applied.contains(&want), "{want} not in:\n{applied}");
        if base == "hub" {
            anyhow::ensure!(
                applied.contains(
                    "customresourcedefinition.apiextensions.k8s.io/helmreleases.helm.flotilla.dev"
                ),
                "the hub base holds the CRDs:\n{applied}"
            );
        }
    }
    Ok(())
}
