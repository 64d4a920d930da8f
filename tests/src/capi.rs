//! The real Cluster API CRDs in a test cluster: `tools/fetch-capi-crds` downloads the Go
//! module `sigs.k8s.io/cluster-api` (pinned there) through the Go module proxy once and
//! caches its `Cluster` CRD under `~/.cache/flotilla/capi/<version>`; [`install_crds`]
//! applies it with the reference kubectl and waits until it is Established. No Cluster API
//! controller runs: a test plays the providers' part by writing the Cluster's status and
//! its `<name>-kubeconfig` Secret.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::tools::kubectl_in;

/// The Cluster CRD's file name in the cache.
pub const CLUSTERS_CRD: &str = "cluster.x-k8s.io_clusters.yaml";

/// The directory holding the Cluster API CRDs: `$FLOTILLA_CAPI_CRDS`, or what
/// `tools/fetch-capi-crds` prints (it downloads them on first use).
pub fn crd_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::script_output(&DIR, "FLOTILLA_CAPI_CRDS", "tools/fetch-capi-crds")
}

/// Installs the Cluster API `Cluster` CRD into the cluster of `kubeconfig` (server-side:
/// it is larger than client-side apply's annotation allows) and waits until it is
/// Established.
pub fn install_crds(kubeconfig: &Path) -> anyhow::Result<()> {
    let file = crd_dir()?.join(CLUSTERS_CRD);
    let file = file.to_string_lossy();
    kubectl_in(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager=flotilla-tests",
            "-f",
            &file,
        ],
        None,
    )?;
    crate::tools::wait_established(
        kubeconfig,
        &["crd/clusters.cluster.x-k8s.io"],
        std::time::Duration::from_secs(120),
    )
}
