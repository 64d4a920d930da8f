//! The strategic-merge view of the built-in Kubernetes types: which lists merge and by which
//! keys, reached from an object's apiVersion and kind. The tables are generated from the
//! Kubernetes OpenAPI document (`cargo xtask gen-patch-schema`); kinds not in them (custom
//! resources) have no schema, so their lists are replaced, as kustomize does.

use super::schema_table::{CLUSTER_SCOPED, ROOTS, TYPES};

/// An object type: the fields that lead to a merging list, and the shape of the values of a
/// map type (`additionalProperties`).
#[derive(Debug)]
pub(super) struct TypeDef {
    pub(super) fields: &'static [FieldDef],
    pub(super) values: Option<Node>,
}

/// One field of a [`TypeDef`].
#[derive(Debug)]
pub(super) struct FieldDef {
    pub(super) name: &'static str,
    pub(super) node: Node,
}

/// A position in the schema.
#[derive(Debug, Clone, Copy)]
pub(super) enum Node {
    /// An object type, by index in the type table.
    Object(u16),
    /// A map whose values all have this shape.
    Map(&'static Node),
    /// A list: its items, and the merge keys when its patch strategy is `merge` (empty for a
    /// list of scalars merged as a set).
    List {
        items: &'static Node,
        merge: Option<&'static [&'static str]>,
    },
    /// Nothing below merges.
    Leaf,
}

impl Node {
    /// The schema of field `name` of this position (kyaml's `ResourceSchema.Field`).
    pub(super) fn field(self, name: &str) -> Option<Node> {
        match self {
            Node::Object(i) => {
                let ty = TYPES.get(usize::from(i))?;
                ty.fields
                    .iter()
                    .find(|f| f.name == name)
                    .map(|f| f.node)
                    .or(ty.values)
            }
            Node::Map(values) => Some(*values),
            Node::List { .. } | Node::Leaf => None,
        }
    }

    /// The schema of a list's items.
    pub(super) fn items(self) -> Option<Node> {
        match self {
            Node::List { items, .. } => Some(*items),
            _ => None,
        }
    }

    /// The merge keys, when this is a list whose strategy is `merge`.
    pub(super) fn merge_keys(self) -> Option<&'static [&'static str]> {
        match self {
            Node::List { merge, .. } => merge,
            _ => None,
        }
    }
}

/// The schema of a built-in kind.
pub(super) fn for_kind(api_version: &str, kind: &str) -> Option<Node> {
    ROOTS
        .binary_search_by(|(av, k, _)| (*av, *k).cmp(&(api_version, kind)))
        .ok()
        .map(|i| Node::Object(ROOTS[i].2))
}

/// Whether a kind is known to be cluster-scoped (unknown kinds are namespaced).
pub(super) fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    CLUSTER_SCOPED
        .binary_search_by(|(av, k)| (*av, *k).cmp(&(api_version, kind)))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containers_merge_by_name_and_ports_by_port_and_protocol() {
        let deployment = for_kind("apps/v1", "Deployment").expect("Deployment is built in");
        let pod_spec = deployment
            .field("spec")
            .and_then(|n| n.field("template"))
            .and_then(|n| n.field("spec"))
            .expect("spec.template.spec");
        let containers = pod_spec.field("containers").expect("containers");
        assert_eq!(containers.merge_keys(), Some(&["name"][..]));
        let ports = containers
            .items()
            .and_then(|n| n.field("ports"))
            .expect("ports");
        assert_eq!(ports.merge_keys(), Some(&["containerPort", "protocol"][..]));
        let mounts = containers
            .items()
            .and_then(|n| n.field("volumeMounts"))
            .expect("volumeMounts");
        assert_eq!(mounts.merge_keys(), Some(&["mountPath"][..]));
        assert_eq!(
            pod_spec.field("volumes").and_then(Node::merge_keys),
            Some(&["name"][..])
        );
        // Tolerations are atomic: no schema entry, so they are replaced.
        assert!(pod_spec.field("tolerations").is_none());
    }

    #[test]
    fn finalizers_merge_as_a_set_and_labels_have_no_lists() {
        let cm = for_kind("v1", "ConfigMap").expect("ConfigMap is built in");
        let meta = cm.field("metadata").expect("metadata");
        assert_eq!(
            meta.field("finalizers").and_then(Node::merge_keys),
            Some(&[][..])
        );
        assert!(meta.field("labels").is_none());
    }

    #[test]
    fn scopes() {
        assert!(is_cluster_scoped("v1", "Namespace"));
        assert!(is_cluster_scoped(
            "rbac.authorization.k8s.io/v1",
            "ClusterRole"
        ));
        assert!(!is_cluster_scoped("v1", "ConfigMap"));
        assert!(!is_cluster_scoped("example.com/v1", "Widget"));
        assert!(for_kind("example.com/v1", "Widget").is_none());
    }
}
