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

/// What a Cluster API provider writes, played by the harness (tests and `cargo xtask up
/// --capi`): the `Cluster`, its `<name>-kubeconfig` Secret, and the control plane marked
/// initialized.
pub mod provider {
    use std::path::Path;

    use anyhow::Context as _;

    use crate::cluster::Cluster;
    use crate::tools::kubectl_in;

    /// A `cluster.x-k8s.io/v1beta2` Cluster `namespace/name` with `labels`, whose control
    /// plane endpoint is `workload`'s API server (JSON).
    pub fn cluster(
        namespace: &str,
        name: &str,
        labels: serde_json::Value,
        workload: &Cluster,
    ) -> anyhow::Result<String> {
        let server = workload.server().trim_start_matches("https://");
        let (host, port) = server
            .rsplit_once(':')
            .with_context(|| format!("no port in {server}"))?;
        let port: u16 = port.trim_end_matches('/').parse()?;
        Ok(serde_json::json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2",
            "kind": "Cluster",
            "metadata": {"name": name, "namespace": namespace, "labels": labels},
            "spec": {"controlPlaneEndpoint": {"host": host, "port": port}},
        })
        .to_string())
    }

    /// The `<name>-kubeconfig` Secret of Cluster `namespace/name`, as Cluster API writes it
    /// (key `value`, type `cluster.x-k8s.io/secret`, the cluster-name label) (JSON).
    pub fn kubeconfig_secret(namespace: &str, name: &str, kubeconfig: &str) -> String {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "cluster.x-k8s.io/secret",
            "metadata": {
                "name": format!("{name}-kubeconfig"),
                "namespace": namespace,
                "labels": {"cluster.x-k8s.io/cluster-name": name},
            },
            "stringData": {"value": kubeconfig},
        })
        .to_string()
    }

    /// Marks Cluster `namespace/name` of the management cluster of `kubeconfig` initialized
    /// (`status.initialization.controlPlaneInitialized`), as the control-plane provider
    /// does once the API server answers.
    pub fn mark_initialized(kubeconfig: &Path, namespace: &str, name: &str) -> anyhow::Result<()> {
        let status =
            serde_json::json!({"status": {"initialization": {"controlPlaneInitialized": true}}});
        kubectl_in(
            kubeconfig,
            &[
                "patch",
                "clusters.cluster.x-k8s.io",
                name,
                "-n",
                namespace,
                "--subresource=status",
                "--type=merge",
                "-p",
                &status.to_string(),
            ],
            None,
        )?;
        Ok(())
    }

    /// `cluster`'s admin kubeconfig with every file inline (CA, client certificate and
    /// key), as Cluster API writes one (JSON).
    pub fn inline_kubeconfig(cluster: &Cluster) -> anyhow::Result<String> {
        let b64 = |path: &str| -> anyhow::Result<String> {
            // ByteString serializes as base64.
            let bytes = std::fs::read(path).with_context(|| format!("reading {path}"))?;
            Ok(serde_json::to_value(k8s_openapi::ByteString(bytes))?
                .as_str()
                .unwrap_or_default()
                .to_owned())
        };
        let mut kc = kube::config::Kubeconfig::read_from(cluster.kubeconfig())?;
        for named in &mut kc.clusters {
            if let Some(c) = &mut named.cluster
                && let Some(ca) = c.certificate_authority.take()
            {
                c.certificate_authority_data = Some(b64(&ca)?);
            }
        }
        for named in &mut kc.auth_infos {
            if let Some(u) = &mut named.auth_info {
                if let Some(cert) = u.client_certificate.take() {
                    u.client_certificate_data = Some(b64(&cert)?);
                }
                if let Some(key) = u.client_key.take() {
                    u.client_key_data = Some(b64(&key)?.into());
                }
            }
        }
        Ok(serde_json::to_string(&kc)?)
    }

    /// A kubeconfig of `cluster` (inline) authenticating with a token of ServiceAccount
    /// `kube-system/<sa>`, which is made (when missing) and bound to cluster-admin: a
    /// credential of its own, which the workload API server's audit log names
    /// (`system:serviceaccount:kube-system:<sa>`) and which deleting the ServiceAccount
    /// revokes.
    pub fn service_account_kubeconfig(cluster: &Cluster, sa: &str) -> anyhow::Result<String> {
        let kc = cluster.kubeconfig();
        let binding = format!(
            "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {sa}\n  namespace: kube-system\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {sa}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: {sa}\n  namespace: kube-system\n"
        );
        kubectl_in(kc, &["apply", "-f", "-"], Some(&binding))?;
        let token = kubectl_in(
            kc,
            &["create", "token", sa, "-n", "kube-system", "--duration=4h"],
            None,
        )?;
        let mut doc: serde_json::Value = serde_json::from_str(&inline_kubeconfig(cluster)?)?;
        doc["users"][0]["user"] = serde_json::json!({"token": token.trim()});
        Ok(doc.to_string())
    }
}
