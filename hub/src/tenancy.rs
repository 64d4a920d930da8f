//! Tenancy: what the HelmReleases of a hub namespace may reach.
//!
//! Four rules, each an operator's decision, checked before a HelmRelease's source is
//! touched ([`Tenancy::admit`]); a refusal is `Ready=False`, `Stalled=True`, reason
//! [`ACCESS_DENIED`] (Flux's `AccessDenied`) with a Warning Event, looked at again every
//! `--requeue-dependency` (a binding created later, or a flag changed by a restart, lets it
//! through without an edit of the HelmRelease):
//!
//! 1. **Cluster bindings** ([`permits`]): a HelmRelease in namespace `N` whose
//!    `spec.clusterRef` names ManagedCluster `C` is planned only when a
//!    `ManagedClusterBinding` (cluster-scoped, an administrator's; see
//!    `flotilla_api::tenancy`) selects both `N` and `C`. The message names the binding that
//!    is missing: `namespace 'team-a' is not bound to ManagedCluster 'edge-1': no
//!    ManagedClusterBinding selects both (ManagedClusterBindings of the namespace: team-a-eu)`.
//!    A ManagedCluster that does not exist yet has no labels: only a binding naming it lets
//!    it through. A binding removed after delivery stops new plans; the agent keeps the one
//!    it holds.
//! 2. **`--no-cross-namespace-refs`** ([`cross_namespace_ref`]), with Flux helm-controller's
//!    meaning: the HelmRelease's chart must come from its own namespace. Refused, with Flux's
//!    message (`cross-namespace references are not allowed: cannot access HelmChart
//!    team-b/team-a-podinfo`): `spec.chart.spec.sourceRef.namespace` (the HelmChart is made
//!    in the source's namespace) and `spec.chartRef.namespace` (HelmChart or
//!    OCIRepository). As in Flux, `spec.dependsOn` may name another namespace (it reads only
//!    a Ready condition), and `valuesFrom` and `kubeConfig` have no namespace field.
//! 3. **`--default-service-account`** ([`service_account`]), as Flux's: a HelmRelease with no
//!    `spec.serviceAccountName` is applied as `system:serviceaccount:<its namespace>:<the
//!    default>` on its target (the agent impersonates it; on a workload cluster the
//!    ServiceAccount must exist there, in the HelmRelease's namespace).
//! 4. **The hub's own cluster** ([`TenancyOptions::local_target`], `--allow-local-target`):
//!    a HelmRelease with neither `spec.clusterRef` nor `spec.kubeConfig` is installed in the
//!    hub's cluster only when the operator enables it; otherwise it is refused.
//!
//! The HelmReleaseSet controller ([`crate::sets`]) selects clusters and calls
//! [`Tenancy::permits_cluster`] for each candidate with the set's namespace: a cluster the rule refuses is left out of the set's
//! selection and counted, never planned. [`permits`] is the interface for both controllers;
//! [`Tenancy`] holds the watched bindings, namespaces and ManagedClusters it reads.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use flotilla_api::{HelmRelease, ManagedCluster, ManagedClusterBinding};
use flotilla_core::spec::ChartRefKind;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Namespace;
use kube::core::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Api, Client, ResourceExt as _};

use crate::link::TargetId;

/// Flux's reason of a refused reference (`aclv1.AccessDeniedReason`), used for every
/// tenancy refusal.
pub const ACCESS_DENIED: &str = "AccessDenied";

/// How long [`Tenancy::admit`] waits for its watches' first lists.
const SYNC_WAIT: Duration = Duration::from_secs(10);

/// The operator's tenancy settings (the hub's flags).
#[derive(Debug, Clone, Default)]
pub struct TenancyOptions {
    /// `--no-cross-namespace-refs`: a HelmRelease's chart only from its own namespace.
    pub no_cross_namespace_refs: bool,
    /// `--default-service-account`: the ServiceAccount (in the HelmRelease's namespace) a
    /// HelmRelease without `spec.serviceAccountName` is applied as.
    pub default_service_account: Option<String>,
    /// `--allow-local-target`: HelmReleases without `clusterRef` and `kubeConfig` go to the
    /// hub's own cluster; when false they are refused.
    pub local_target: bool,
}

/// Why a HelmRelease may not be planned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Denied {
    /// No binding selects both the namespace and the cluster.
    #[error(
        "namespace '{namespace}' is not bound to ManagedCluster '{cluster}': no ManagedClusterBinding selects both ({})",
        namespace_bindings_text(.namespace_bindings)
    )]
    NotBound {
        /// The HelmRelease's namespace.
        namespace: String,
        /// The ManagedCluster.
        cluster: String,
        /// The bindings that select the namespace (but not the cluster), sorted.
        namespace_bindings: Vec<String>,
    },
    /// A chart reference to another namespace under `--no-cross-namespace-refs`.
    #[error("cross-namespace references are not allowed: cannot access {kind} {namespace}/{name}")]
    CrossNamespaceRef {
        /// The kind of the object referred to.
        kind: &'static str,
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// The hub's own cluster without `--allow-local-target`.
    #[error(
        "the hub's own cluster is not a target here: set spec.clusterRef or spec.kubeConfig (the hub runs without --allow-local-target)"
    )]
    LocalTarget,
    /// The watches of bindings, namespaces and ManagedClusters have not listed yet.
    #[error("waiting for the hub's view of ManagedClusterBindings, Namespaces and ManagedClusters")]
    NotSynced,
}

impl Denied {
    /// Whether the refusal is an operator's decision (stall and warn) rather than a wait.
    pub fn is_terminal(&self) -> bool {
        !matches!(self, Denied::NotSynced)
    }

    /// The condition's reason.
    pub fn reason(&self) -> &'static str {
        match self {
            Denied::NotSynced => "TenancyNotSynced",
            _ => ACCESS_DENIED,
        }
    }
}

fn namespace_bindings_text(names: &[String]) -> String {
    if names.is_empty() {
        "no ManagedClusterBinding selects the namespace".to_owned()
    } else {
        format!(
            "ManagedClusterBindings of the namespace: {}",
            names.join(", ")
        )
    }
}

/// The tenancy rule: whether namespace `namespace` (with `namespace_labels`) may deliver to
/// ManagedCluster `cluster` (with `cluster_labels`; none when it does not exist), given every
/// ManagedClusterBinding. Pure; the HelmRelease controller and the HelmReleaseSet
/// controller call it for each cluster a HelmRelease or set would reach.
pub fn permits<'a>(
    namespace: &str,
    namespace_labels: &BTreeMap<String, String>,
    cluster: &str,
    cluster_labels: &BTreeMap<String, String>,
    bindings: impl IntoIterator<Item = &'a ManagedClusterBinding>,
) -> Result<(), Denied> {
    let mut namespace_bindings = Vec::new();
    for b in bindings {
        if !b.spec.selects_namespace(namespace, namespace_labels) {
            continue;
        }
        if b.spec.selects_cluster(cluster, cluster_labels) {
            return Ok(());
        }
        namespace_bindings.push(b.name_any());
    }
    namespace_bindings.sort();
    Err(Denied::NotBound {
        namespace: namespace.to_owned(),
        cluster: cluster.to_owned(),
        namespace_bindings,
    })
}

/// `--no-cross-namespace-refs`: the chart reference of `hr` that leaves its namespace, as
/// Flux's helm-controller refuses it (the HelmChart of `spec.chart` is made in the source's
/// namespace as `<namespace>-<name>`).
pub fn cross_namespace_ref(hr: &HelmRelease) -> Result<(), Denied> {
    let ns = hr.namespace().unwrap_or_default();
    let refused = |kind, namespace: &str, name: String| {
        Err(Denied::CrossNamespaceRef {
            kind,
            namespace: namespace.to_owned(),
            name,
        })
    };
    if let Some(template) = &hr.spec.chart
        && let Some(src_ns) = template.spec.source_ref.namespace.as_deref()
        && !src_ns.is_empty()
        && src_ns != ns
    {
        return refused("HelmChart", src_ns, format!("{ns}-{}", hr.name_any()));
    }
    if let Some(r) = &hr.spec.chart_ref
        && let Some(ref_ns) = r.namespace.as_deref()
        && !ref_ns.is_empty()
        && ref_ns != ns
    {
        let kind = match r.kind {
            ChartRefKind::OCIRepository => "OCIRepository",
            _ => "HelmChart",
        };
        return refused(kind, ref_ns, r.name.clone());
    }
    Ok(())
}

/// The ServiceAccount a release is applied as: its own `spec.serviceAccountName`, else the
/// operator's `--default-service-account`, else none (the agent's identity).
pub fn service_account(spec: Option<&str>, default: Option<&str>) -> Option<String> {
    spec.filter(|s| !s.is_empty())
        .or(default.filter(|s| !s.is_empty()))
        .map(str::to_owned)
}

/// The watched state the rules read, and the operator's options.
pub struct Tenancy {
    /// The operator's settings.
    pub options: TenancyOptions,
    bindings: Store<ManagedClusterBinding>,
    namespaces: Store<PartialObjectMeta<Namespace>>,
    clusters: Store<ManagedCluster>,
    writers: std::sync::Mutex<Option<Writers>>,
}

struct Writers {
    bindings: reflector::store::Writer<ManagedClusterBinding>,
    namespaces: reflector::store::Writer<PartialObjectMeta<Namespace>>,
    clusters: reflector::store::Writer<ManagedCluster>,
}

impl std::fmt::Debug for Tenancy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tenancy")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Default for Tenancy {
    fn default() -> Self {
        Tenancy::new(TenancyOptions::default())
    }
}

impl Tenancy {
    /// Empty stores; [`Tenancy::run`] fills them.
    pub fn new(options: TenancyOptions) -> Tenancy {
        let (bindings, bindings_w) = reflector::store();
        let (namespaces, namespaces_w) = reflector::store();
        let (clusters, clusters_w) = reflector::store();
        Tenancy {
            options,
            bindings,
            namespaces,
            clusters,
            writers: std::sync::Mutex::new(Some(Writers {
                bindings: bindings_w,
                namespaces: namespaces_w,
                clusters: clusters_w,
            })),
        }
    }

    /// Watches ManagedClusterBindings, Namespaces (metadata only) and ManagedClusters into
    /// the stores until dropped (a second call returns at once).
    pub async fn run(self: Arc<Self>, client: Client) {
        let Some(w) = self
            .writers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let config = watcher::Config::default();
        let bindings = watcher(
            Api::<ManagedClusterBinding>::all(client.clone()),
            config.clone(),
        )
        .default_backoff()
        .reflect(w.bindings)
        .for_each(|_| async {});
        let namespaces = watcher(
            Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
            config.clone(),
        )
        .default_backoff()
        .reflect(w.namespaces)
        .for_each(|_| async {});
        let clusters = watcher(Api::<ManagedCluster>::all(client), config)
            .default_backoff()
            .reflect(w.clusters)
            .for_each(|_| async {});
        tokio::join!(bindings, namespaces, clusters);
    }

    /// Whether `target` is the hub's own cluster and the operator did not allow it (the
    /// finalizer then has no target to uninstall through either).
    pub fn refuses_local(&self, target: &TargetId) -> bool {
        matches!(target, TargetId::Local) && !self.options.local_target
    }

    /// Whether `hr`, going to `target`, passes every rule of this module.
    pub async fn admit(&self, hr: &HelmRelease, target: &TargetId) -> Result<(), Denied> {
        if self.options.no_cross_namespace_refs {
            cross_namespace_ref(hr)?;
        }
        match target {
            TargetId::Local if !self.options.local_target => Err(Denied::LocalTarget),
            TargetId::Cluster(cluster) => {
                self.permits_cluster(&hr.namespace().unwrap_or_default(), cluster.as_str())
                    .await
            }
            _ => Ok(()),
        }
    }

    /// Rule 1 alone, over the watched state: whether namespace `namespace` may deliver to
    /// ManagedCluster `cluster` ([`permits`]). The HelmRelease controller's check of a
    /// `clusterRef`, and the HelmReleaseSet controller's filter of a set's clusters.
    pub async fn permits_cluster(&self, namespace: &str, cluster: &str) -> Result<(), Denied> {
        self.synced().await?;
        let namespace_labels = self
            .namespaces
            .get(&ObjectRef::new(namespace))
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        let cluster_labels = self
            .clusters
            .get(&ObjectRef::new(cluster))
            .map(|c| c.labels().clone())
            .unwrap_or_default();
        // The store's objects, not copies: a set checks every selected cluster.
        let bindings = self.bindings.state();
        permits(
            namespace,
            &namespace_labels,
            cluster,
            &cluster_labels,
            bindings.iter().map(|b| b.as_ref()),
        )
    }

    /// The ManagedClusters as watched (empty until the watch has listed).
    pub fn clusters(&self) -> Vec<Arc<ManagedCluster>> {
        self.clusters.state()
    }

    /// Whether ManagedCluster `name` is paused ([`crate::onboarding::LABEL_PAUSED`]: its
    /// Cluster API Cluster has `spec.paused`), from the watched store; not synced or not
    /// there: not paused.
    pub async fn cluster_paused(&self, name: &str) -> bool {
        if self.synced().await.is_err() {
            return false;
        }
        self.clusters
            .get(&ObjectRef::new(name))
            .and_then(|c| c.labels().get(crate::onboarding::LABEL_PAUSED).cloned())
            .is_some_and(|v| v == "true")
    }

    async fn synced(&self) -> Result<(), Denied> {
        let ready = async {
            self.bindings.wait_until_ready().await?;
            self.namespaces.wait_until_ready().await?;
            self.clusters.wait_until_ready().await
        };
        match tokio::time::timeout(SYNC_WAIT, ready).await {
            Ok(Ok(())) => Ok(()),
            _ => Err(Denied::NotSynced),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn binding(name: &str, spec: serde_json::Value) -> ManagedClusterBinding {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "fleet.flotilla.dev/v1",
            "kind": "ManagedClusterBinding",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .expect("a binding")
    }

    #[test]
    fn a_namespace_delivers_only_to_the_clusters_a_binding_gives_it() {
        let bindings = vec![
            binding(
                "team-a-eu",
                serde_json::json!({"namespaces": ["team-a"], "clusterSelector": {"matchLabels": {"region": "eu"}}}),
            ),
            binding(
                "team-a-edge",
                serde_json::json!({"namespaces": ["team-a"], "clusters": ["edge-9"]}),
            ),
            binding(
                "prod-everywhere",
                serde_json::json!({"namespaceSelector": {"matchLabels": {"tier": "prod"}}, "clusterSelector": {}}),
            ),
        ];
        let eu = labels(&[("region", "eu")]);
        let us = labels(&[("region", "us")]);
        let none = labels(&[]);
        let prod = labels(&[("tier", "prod")]);
        let not_bound = |namespace: &str, cluster: &str, of_namespace: &[&str]| {
            Err(Denied::NotBound {
                namespace: namespace.into(),
                cluster: cluster.into(),
                namespace_bindings: of_namespace.iter().map(|s| (*s).to_owned()).collect(),
            })
        };
        /// Namespace and its labels, cluster and its labels, the verdict.
        type Case<'a> = (
            &'a str,
            &'a BTreeMap<String, String>,
            &'a str,
            &'a BTreeMap<String, String>,
            Result<(), Denied>,
        );
        let cases: Vec<Case<'_>> = vec![
            ("team-a", &none, "edge-1", &eu, Ok(())),
            ("team-a", &none, "edge-9", &none, Ok(())),
            (
                "team-a",
                &none,
                "edge-2",
                &us,
                not_bound("team-a", "edge-2", &["team-a-edge", "team-a-eu"]),
            ),
            (
                "team-b",
                &none,
                "edge-1",
                &eu,
                not_bound("team-b", "edge-1", &[]),
            ),
            ("team-b", &prod, "edge-2", &us, Ok(())),
            // A cluster that has not registered: only a name lets it through.
            ("team-b", &prod, "late", &none, Ok(())),
            (
                "team-c",
                &none,
                "late",
                &none,
                not_bound("team-c", "late", &[]),
            ),
        ];
        for (ns, ns_labels, cluster, cluster_labels, want) in cases {
            assert_eq!(
                permits(ns, ns_labels, cluster, cluster_labels, &bindings),
                want,
                "{ns} -> {cluster}"
            );
        }
        assert_eq!(
            permits("team-a", &none, "edge-1", &eu, &[]),
            not_bound("team-a", "edge-1", &[])
        );
    }

    #[test]
    fn the_refusal_names_the_binding_that_is_missing_and_those_the_namespace_has() {
        let bindings = vec![binding(
            "team-a-eu",
            serde_json::json!({"namespaces": ["team-a"], "clusters": ["eu-1"]}),
        )];
        let denied = permits("team-a", &labels(&[]), "us-1", &labels(&[]), &bindings).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "namespace 'team-a' is not bound to ManagedCluster 'us-1': no ManagedClusterBinding selects both (ManagedClusterBindings of the namespace: team-a-eu)"
        );
        assert_eq!(denied.reason(), ACCESS_DENIED);
        assert!(denied.is_terminal());
        let denied = permits("team-b", &labels(&[]), "us-1", &labels(&[]), &bindings).unwrap_err();
        assert_eq!(
            denied.to_string(),
            "namespace 'team-b' is not bound to ManagedCluster 'us-1': no ManagedClusterBinding selects both (no ManagedClusterBinding selects the namespace)"
        );
        assert!(!Denied::NotSynced.is_terminal());
    }

    fn hr(spec: serde_json::Value) -> HelmRelease {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "helm.flotilla.dev/v1",
            "kind": "HelmRelease",
            "metadata": {"name": "podinfo", "namespace": "team-a"},
            "spec": spec,
        }))
        .expect("a HelmRelease")
    }

    #[test]
    fn cross_namespace_chart_references_are_refused_as_flux_refuses_them() {
        let chart = |ns: Option<&str>| {
            let mut source = serde_json::json!({"kind": "HelmRepository", "name": "podinfo"});
            if let Some(ns) = ns {
                source["namespace"] = ns.into();
            }
            hr(
                serde_json::json!({"interval": "5m", "chart": {"spec": {"chart": "podinfo", "sourceRef": source}}}),
            )
        };
        let chart_ref = |kind: &str, ns: Option<&str>| {
            let mut r = serde_json::json!({"kind": kind, "name": "shared"});
            if let Some(ns) = ns {
                r["namespace"] = ns.into();
            }
            hr(serde_json::json!({"interval": "5m", "chartRef": r}))
        };
        let refused = |kind, namespace: &str, name: &str| {
            Err(Denied::CrossNamespaceRef {
                kind,
                namespace: namespace.into(),
                name: name.into(),
            })
        };
        let cases = vec![
            (chart(None), Ok(())),
            (chart(Some("team-a")), Ok(())),
            (chart(Some("")), Ok(())),
            (
                chart(Some("flux-system")),
                refused("HelmChart", "flux-system", "team-a-podinfo"),
            ),
            (chart_ref("OCIRepository", None), Ok(())),
            (chart_ref("OCIRepository", Some("team-a")), Ok(())),
            (
                chart_ref("OCIRepository", Some("shared")),
                refused("OCIRepository", "shared", "shared"),
            ),
            (
                chart_ref("HelmChart", Some("shared")),
                refused("HelmChart", "shared", "shared"),
            ),
        ];
        for (hr, want) in cases {
            assert_eq!(cross_namespace_ref(&hr), want, "{:?}", hr.spec.chart_ref);
        }
        assert_eq!(
            cross_namespace_ref(&chart(Some("flux-system")))
                .unwrap_err()
                .to_string(),
            "cross-namespace references are not allowed: cannot access HelmChart flux-system/team-a-podinfo"
        );
    }

    #[test]
    fn the_default_service_account_applies_only_when_the_spec_names_none() {
        assert_eq!(
            service_account(Some("own"), Some("dflt")),
            Some("own".into())
        );
        assert_eq!(service_account(None, Some("dflt")), Some("dflt".into()));
        assert_eq!(service_account(Some(""), Some("dflt")), Some("dflt".into()));
        assert_eq!(service_account(None, None), None);
        assert_eq!(service_account(None, Some("")), None);
    }

    #[tokio::test]
    async fn the_local_target_and_cross_namespace_refs_are_refused_only_when_the_operator_says_so()
    {
        let release = hr(
            serde_json::json!({"interval": "5m", "chartRef": {"kind": "OCIRepository", "name": "x", "namespace": "other"}}),
        );
        let open = Tenancy::new(TenancyOptions {
            local_target: true,
            ..Default::default()
        });
        assert_eq!(open.admit(&release, &TargetId::Local).await, Ok(()));
        let closed = Tenancy::new(TenancyOptions::default());
        assert_eq!(
            closed.admit(&release, &TargetId::Local).await,
            Err(Denied::LocalTarget)
        );
        let strict = Tenancy::new(TenancyOptions {
            local_target: true,
            no_cross_namespace_refs: true,
            ..Default::default()
        });
        assert!(matches!(
            strict.admit(&release, &TargetId::Local).await,
            Err(Denied::CrossNamespaceRef { .. })
        ));
        // A kubeConfig target is not the hub's cluster and has no binding to check.
        let kube_config = TargetId::KubeConfig {
            namespace: "team-a".into(),
            name: "remote".into(),
            key: None,
        };
        assert_eq!(closed.admit(&release, &kube_config).await, Ok(()));
    }
}
