//! The local clusters look like the release they are built from: the API server, the
//! controller manager and the scheduler report the Kubernetes version pinned in
//! `tests/upstream/kubernetes/go.mod` (not `v0.0.0-master+$Format:%H$`), to kubectl and to
//! discovery, so charts that set `kubeVersion` install on them.

use flotilla_tests::cluster::{pinned_kubernetes_version, upstream_bin_dir};
use flotilla_tests::{Cluster, ClusterOptions, tools};

/// `v1.35.4` as (`1`, `35`).
fn major_minor(version: &str) -> (String, String) {
    let mut parts = version.trim_start_matches('v').split('.');
    let major = parts.next().unwrap_or_default().to_owned();
    let minor = parts.next().unwrap_or_default().to_owned();
    (major, minor)
}

#[tokio::test]
async fn kubectl_and_discovery_report_the_kubernetes_version_the_go_mod_pins() -> anyhow::Result<()>
{
    let pinned = pinned_kubernetes_version()?;
    let (major, minor) = major_minor(&pinned);
    let cluster = Cluster::start(ClusterOptions::named("version")).await?;

    let json = tools::kubectl_in(cluster.kubeconfig(), &["version", "-o", "json"], None)?;
    let reported: serde_json::Value = serde_json::from_str(&json)?;
    let server = &reported["serverVersion"];
    assert_eq!(server["gitVersion"], pinned.as_str(), "{json}");
    assert_eq!(server["major"], major.as_str(), "{json}");
    assert_eq!(server["minor"], minor.as_str(), "{json}");
    assert_eq!(server["gitTreeState"], "clean", "{json}");

    let info = cluster.client().await?.apiserver_version().await?;
    assert_eq!(
        (
            info.git_version.as_str(),
            info.major.as_str(),
            info.minor.as_str()
        ),
        (pinned.as_str(), major.as_str(), minor.as_str()),
        "{info:?}"
    );
    Ok(())
}

#[test]
fn every_kubernetes_binary_is_stamped_with_the_pinned_version() -> anyhow::Result<()> {
    let pinned = pinned_kubernetes_version()?;
    let bin = upstream_bin_dir()?;
    for name in [
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let output = std::process::Command::new(bin.join(name))
            .arg("--version")
            .output()?;
        assert!(output.status.success(), "{name} --version: {output:?}");
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            format!("Kubernetes {pinned}"),
            "{name} --version"
        );
    }
    Ok(())
}
