//! The imported Cluster API `Cluster`s as the import controller watches them, shared with
//! the HelmReleaseSet controller: a set's `valuesTemplate` sees, as `.Cluster`, the
//! `Cluster` a ManagedCluster was made from.
//!
//! The view is empty until import runs and Cluster API is served (the import controller
//! fills it once its watch starts); a hub without import gives every template the
//! ManagedCluster instead.

use std::sync::{Arc, OnceLock};

use flotilla_api::ManagedCluster;
use kube::ResourceExt as _;
use kube::api::DynamicObject;
use kube::runtime::reflector::{ObjectRef, Store};

use super::{ANNOTATION_CLUSTER_REF, ANNOTATION_CLUSTER_UID};

/// The imported Clusters: set once by the import controller, read by the set controller.
#[derive(Clone, Default)]
pub struct ImportedClusters {
    store: Arc<OnceLock<Store<DynamicObject>>>,
}

impl std::fmt::Debug for ImportedClusters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ImportedClusters")
            .field("watching", &self.store.get().is_some())
            .finish()
    }
}

impl ImportedClusters {
    /// Called by the import controller when its watch of Clusters starts.
    pub(super) fn publish(&self, store: Store<DynamicObject>) {
        let _ = self.store.set(store);
    }

    /// The Cluster `mc` was imported from, as JSON, when `mc` carries the import's link
    /// and the watched Cluster of that name has the linked UID (a Cluster recreated under
    /// the same name is another cluster). `None` for a ManagedCluster not made by import,
    /// or while the view is not filled.
    pub fn cluster_of(&self, mc: &ManagedCluster) -> Option<serde_json::Value> {
        let store = self.store.get()?;
        let annotations = mc.annotations();
        let (namespace, name) = annotations.get(ANNOTATION_CLUSTER_REF)?.split_once('/')?;
        let uid = annotations.get(ANNOTATION_CLUSTER_UID)?;
        let resource = super::controller::cluster_resource();
        let key = ObjectRef::<DynamicObject>::new_with(name, resource).within(namespace);
        let cluster = store.get(&key)?;
        (cluster.uid().as_deref() == Some(uid.as_str()))
            .then(|| serde_json::to_value(&*cluster).ok())
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::reflector::store::Writer;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn managed(annotations: serde_json::Value) -> ManagedCluster {
        serde_json::from_value(json!({
            "apiVersion": "fleet.flotilla.dev/v1", "kind": "ManagedCluster",
            "metadata": {"name": "prod.edge-1", "annotations": annotations},
            "spec": {"accepted": true},
        }))
        .unwrap()
    }

    #[test]
    fn the_linked_cluster_is_found_by_reference_and_uid_only() {
        let view = ImportedClusters::default();
        let linked = managed(json!({
            ANNOTATION_CLUSTER_REF: "prod/edge-1", ANNOTATION_CLUSTER_UID: "u-1",
        }));
        assert_eq!(view.cluster_of(&linked), None, "no watch yet");
        let mut writer = Writer::new(super::super::controller::cluster_resource());
        let cluster: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cluster.x-k8s.io/v1beta2", "kind": "Cluster",
            "metadata": {"name": "edge-1", "namespace": "prod", "uid": "u-1"},
            "spec": {"paused": false},
        }))
        .unwrap();
        writer.apply_watcher_event(&Event::Apply(cluster));
        view.publish(writer.as_reader());
        let got = view.cluster_of(&linked).unwrap();
        assert_eq!(got["metadata"]["name"], "edge-1");
        assert_eq!(got["spec"]["paused"], false);
        let recreated = managed(json!({
            ANNOTATION_CLUSTER_REF: "prod/edge-1", ANNOTATION_CLUSTER_UID: "u-0",
        }));
        assert_eq!(view.cluster_of(&recreated), None);
        assert_eq!(view.cluster_of(&managed(json!({}))), None);
    }
}
