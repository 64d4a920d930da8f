//! `status.inventory`: the objects a release applied, as Flux's inventory observer records
//! them on every release write (`internal/inventory`): the objects of the written record's
//! manifest but hooks, in manifest order, then the objects of the chart's CRD files.
//!
//! A namespaced object without a namespace gets the release namespace; the scope comes from
//! API discovery, and an object whose kind discovery does not serve keeps an empty
//! namespace (Flux skips it with a warning). Cluster-scoped objects have an empty
//! namespace part, and CRD-file objects keep the namespace they are written with.

use flotilla_core::status::{ResourceInventory, ResourceRef};

use super::render::CrdFile;
use crate::kube::ClusterApi;
use crate::kube::manifest::{ManifestError, ManifestObject, parse_manifest};

/// Helm's hook annotation; objects carrying it are not in the inventory.
const HOOK_ANNOTATION: &str = "helm.sh/hook";

/// The inventory of a release whose record holds `manifest`, installed in
/// `release_namespace` from a chart with `crds`.
pub async fn of_release(
    cluster: &ClusterApi,
    manifest: &str,
    release_namespace: &str,
    crds: &[CrdFile],
) -> Result<ResourceInventory, ManifestError> {
    let mut entries = Vec::new();
    for obj in parse_manifest(manifest)? {
        if is_hook(&obj) {
            continue;
        }
        let mut namespace = obj.object.metadata.namespace.clone().unwrap_or_default();
        if namespace.is_empty() {
            let namespaced = cluster
                .catalog()
                .lookup(&obj.gvk)
                .await
                .ok()
                .flatten()
                .is_some_and(|k| k.namespaced);
            if namespaced {
                namespace = release_namespace.to_owned();
            }
        }
        entries.push(entry(&obj, &namespace));
    }
    for file in crds {
        for obj in parse_manifest(&file.text)? {
            let namespace = obj.object.metadata.namespace.clone().unwrap_or_default();
            entries.push(entry(&obj, &namespace));
        }
    }
    Ok(ResourceInventory { entries })
}

fn is_hook(obj: &ManifestObject) -> bool {
    obj.object
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(HOOK_ANNOTATION))
}

fn entry(obj: &ManifestObject, namespace: &str) -> ResourceRef {
    ResourceRef::new(
        namespace,
        obj.object.metadata.name.as_deref().unwrap_or_default(),
        &obj.gvk.api_version(),
        &obj.gvk.kind,
    )
}
