//! Installing the agent into a workload cluster: the agent chart
//! (`deploy/charts/flotilla-agent`, compiled into the hub so the chart stays the one source)
//! rendered by the project's renderer ([`render`]), then each object server-side applied
//! through the Cluster's kubeconfig ([`apply`]), the namespace first.

use std::collections::BTreeMap;

use flotilla_chart::Values;
use flotilla_chart::load::BufferedFile;
use flotilla_chart::render::{Capabilities, ReleaseOptions, RenderOptions};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::util::{FIELD_MANAGER, api_error};

/// The release name the chart is rendered as (its objects are `flotilla-agent`).
pub const RELEASE_NAME: &str = "flotilla-agent";

/// The pod template annotation that restarts the agent on a new attempt.
pub const ATTEMPT_ANNOTATION: &str = "capi.fleet.flotilla.dev/bootstrap-attempt";

macro_rules! chart_file {
    ($path:literal) => {
        (
            $path,
            include_str!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../deploy/charts/flotilla-agent/",
                $path
            )),
        )
    };
}

/// The agent chart's files, as in `deploy/charts/flotilla-agent` (a test checks the list
/// is the directory's).
pub const CHART_FILES: &[(&str, &str)] = &[
    chart_file!(".helmignore"),
    chart_file!("Chart.yaml"),
    chart_file!("values.yaml"),
    chart_file!("templates/_helpers.tpl"),
    chart_file!("templates/deployment.yaml"),
    chart_file!("templates/rbac.yaml"),
    chart_file!("templates/secret.yaml"),
    chart_file!("templates/service.yaml"),
    chart_file!("templates/serviceaccount.yaml"),
];

/// What an agent is installed with.
#[derive(Clone)]
pub struct AgentInstall {
    /// The session URL.
    pub hub_url: String,
    /// The hub CA's pin.
    pub ca_pin: String,
    /// The ManagedCluster name.
    pub cluster_name: String,
    /// The bootstrap token (secret: never logged).
    pub token: String,
    /// `repository[:tag]`.
    pub image: String,
    /// The agent's namespace.
    pub namespace: String,
    /// The operator's values (`--capi-agent-values`), under the hub's.
    pub operator_values: Values,
    /// The attempt (a new one restarts the Deployment).
    pub attempt: u32,
}

impl std::fmt::Debug for AgentInstall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentInstall")
            .field("cluster_name", &self.cluster_name)
            .field("namespace", &self.namespace)
            .field("image", &self.image)
            .field("token", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// `repository[:tag]` split as the chart takes it (a `:` after the last `/` is the tag).
fn split_image(image: &str) -> (String, String) {
    let slash = image.rfind('/').map_or(0, |i| i + 1);
    match image[slash..].rfind(':') {
        Some(i) => (
            image[..slash + i].to_owned(),
            image[slash + i + 1..].to_owned(),
        ),
        None => (image.to_owned(), String::new()),
    }
}

/// The agent chart's objects for `install`, in install order, the namespace first. The
/// error quotes no value (the token is one).
pub fn render(install: &AgentInstall) -> Result<Vec<Value>, String> {
    let files = CHART_FILES
        .iter()
        .map(|(name, text)| BufferedFile {
            name: (*name).to_owned(),
            data: text.as_bytes().to_vec(),
            mod_time: None,
        })
        .collect();
    let mut chart = flotilla_chart::load::load_files(files)
        .map_err(|e| format!("loading the agent chart: {e}"))?;
    let (repository, tag) = split_image(&install.image);
    let ours = json!({
        "image": {"repository": repository, "tag": tag},
        "hub": {
            "url": install.hub_url,
            "caPin": install.ca_pin,
            "clusterName": install.cluster_name,
            "token": install.token,
            "existingTokenSecret": "",
        },
        "podAnnotations": {ATTEMPT_ANNOTATION: install.attempt.to_string()},
    });
    let Value::Object(ours) = ours else {
        return Err("the hub's values are not a map".into());
    };
    let values = flotilla_chart::values::merge_maps(install.operator_values.clone(), ours);
    let mut warnings = Vec::new();
    flotilla_chart::dependencies::process_dependencies(&mut chart, &values, &mut warnings)
        .map_err(|e| format!("the agent chart's dependencies: {e}"))?;
    let options = RenderOptions {
        release: ReleaseOptions {
            name: RELEASE_NAME.into(),
            namespace: install.namespace.clone(),
            revision: 1,
            is_install: true,
            is_upgrade: false,
        },
        capabilities: Capabilities::helm_template_default(),
        include_crds: false,
        skip_schema_validation: false,
        redact_schema_values: true,
        lookup: None,
        remote_schemas: Default::default(),
    };
    let mut log = Vec::new();
    let rendered = flotilla_chart::render::render_release(&chart, &values, &options, &mut log)
        .map_err(|e| format!("rendering the agent chart: {e}"))?;
    let mut objects = vec![json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": install.namespace},
    })];
    for m in &rendered.manifests {
        let doc = flotilla_chart::values::parse_yaml_map(&m.content)
            .map_err(|_| format!("the agent chart's {} is not YAML", m.name))?;
        if doc.is_empty() {
            continue;
        }
        objects.push(Value::Object(doc));
    }
    Ok(objects)
}

/// The API resource of a kind the agent chart renders.
fn resource_of(kind: &str) -> Option<(ApiResource, bool)> {
    let (group, version, plural, namespaced) = match kind {
        "Namespace" => ("", "v1", "namespaces", false),
        "ServiceAccount" => ("", "v1", "serviceaccounts", true),
        "Secret" => ("", "v1", "secrets", true),
        "Service" => ("", "v1", "services", true),
        "Deployment" => ("apps", "v1", "deployments", true),
        "Role" => ("rbac.authorization.k8s.io", "v1", "roles", true),
        "RoleBinding" => ("rbac.authorization.k8s.io", "v1", "rolebindings", true),
        "ClusterRole" => ("rbac.authorization.k8s.io", "v1", "clusterroles", false),
        "ClusterRoleBinding" => (
            "rbac.authorization.k8s.io",
            "v1",
            "clusterrolebindings",
            false,
        ),
        _ => return None,
    };
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some((
        ApiResource {
            group: group.into(),
            version: version.into(),
            api_version,
            kind: kind.into(),
            plural: plural.into(),
        },
        namespaced,
    ))
}

/// Server-side applies `objects` (from [`render`]) in order through `client`; stops at
/// the first failure, with a sentence naming the object.
pub async fn apply(client: &Client, objects: &[Value], namespace: &str) -> Result<(), String> {
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for object in objects {
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let (resource, namespaced) = resource_of(kind).ok_or_else(|| {
            format!("the agent chart renders a '{kind}' object, which the hub does not install")
        })?;
        let api: Api<DynamicObject> = if namespaced {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or(namespace);
            Api::namespaced_with(client.clone(), ns, &resource)
        } else {
            Api::all_with(client.clone(), &resource)
        };
        api.patch(name, &params, &Patch::Apply(object))
            .await
            .map_err(|e| api_error("applying", kind, name, &e))?;
    }
    Ok(())
}

/// Parses the operator's values file.
pub fn operator_values(text: &str) -> Result<Values, String> {
    flotilla_chart::values::parse_yaml_map(text).map_err(|e| format!("not a YAML map: {e}"))
}

/// The container args of the agent Deployment among `objects` (for tests and logs).
pub fn agent_args(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment")
        .and_then(|d| d["spec"]["template"]["spec"]["containers"][0]["args"].as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// Kinds rendered, in order (for tests).
pub fn kinds(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

/// Counts of kinds (for tests).
pub fn kind_counts(objects: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for k in kinds(objects) {
        *out.entry(k).or_default() += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn install() -> AgentInstall {
        AgentInstall {
            hub_url: "https://hub.example:9443".into(),
            ca_pin: format!("sha256:{}", "a".repeat(64)),
            cluster_name: "fleet.edge-1".into(),
            token: "abcdef.0123456789abcdef".into(),
            image: "registry.example:5000/flotilla/flotilla-agent:v9".into(),
            namespace: "flotilla-system".into(),
            operator_values: Values::new(),
            attempt: 2,
        }
    }

    #[test]
    fn the_embedded_chart_is_the_chart_directory() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../deploy/charts/flotilla-agent");
        let mut on_disk = Vec::new();
        for sub in ["", "templates"] {
            for entry in std::fs::read_dir(dir.join(sub)).unwrap() {
                let entry = entry.unwrap();
                if entry.file_type().unwrap().is_file() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    on_disk.push(if sub.is_empty() {
                        name
                    } else {
                        format!("{sub}/{name}")
                    });
                }
            }
        }
        on_disk.sort();
        let mut embedded: Vec<String> = CHART_FILES.iter().map(|(n, _)| (*n).to_owned()).collect();
        embedded.sort();
        assert_eq!(embedded, on_disk);
    }

    #[test]
    fn the_agent_is_rendered_from_the_chart_with_the_hubs_values() {
        let objects = render(&install()).unwrap();
        let kinds = kinds(&objects);
        assert_eq!(kinds[0], "Namespace");
        let counts = kind_counts(&objects);
        for k in [
            "ServiceAccount",
            "Secret",
            "Role",
            "RoleBinding",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
        ] {
            assert!(counts.contains_key(k), "{k} missing: {kinds:?}");
        }
        let args = agent_args(&objects);
        for want in [
            "join",
            "--hub=https://hub.example:9443",
            "--cluster-name=fleet.edge-1",
        ] {
            assert!(args.iter().any(|a| a == want), "{want} not in {args:?}");
        }
        assert!(
            args.iter().any(|a| a.starts_with("--ca-hash=sha256:aaaa")),
            "{args:?}"
        );
        let deployment = objects.iter().find(|o| o["kind"] == "Deployment").unwrap();
        let pod = &deployment["spec"]["template"];
        assert_eq!(
            pod["spec"]["containers"][0]["image"],
            "registry.example:5000/flotilla/flotilla-agent:v9"
        );
        assert_eq!(pod["metadata"]["annotations"][ATTEMPT_ANNOTATION], "2");
        for o in &objects[1..] {
            assert_eq!(
                o["metadata"]["namespace"]
                    .as_str()
                    .unwrap_or("flotilla-system"),
                "flotilla-system"
            );
        }
        // The token is in the Secret only, not in the Deployment.
        assert!(!deployment.to_string().contains("0123456789abcdef"));
    }

    #[test]
    fn the_operators_values_go_under_the_hubs() {
        let mut i = install();
        i.operator_values = operator_values(
            "rbac:\n  workload:\n    clusterAdmin: true\nhub:\n  url: https://evil\n",
        )
        .unwrap();
        let objects = render(&i).unwrap();
        assert!(
            objects
                .iter()
                .any(|o| o["kind"] == "ClusterRoleBinding"
                    && o["roleRef"]["name"] == "cluster-admin")
        );
        assert!(
            agent_args(&objects)
                .iter()
                .any(|a| a == "--hub=https://hub.example:9443")
        );
    }

    #[test]
    fn images_split_at_the_tag_not_the_registry_port() {
        assert_eq!(
            split_image("localhost:5000/a/b:v1"),
            ("localhost:5000/a/b".into(), "v1".into())
        );
        assert_eq!(
            split_image("localhost:5000/a/b"),
            ("localhost:5000/a/b".into(), String::new())
        );
        assert_eq!(split_image("b:v1"), ("b".into(), "v1".into()));
    }
}
