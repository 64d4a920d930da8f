//! The normalizations Flux makes before diffing (`fluxcd/pkg/ssa/normalize`), on objects as
//! JSON:
//!
//! - desired objects ([`desired`]): container ports of pod templates (Pod, Deployment,
//!   StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) and Service ports get the protocol
//!   `TCP` when they have none; a Secret's `stringData` moves into `data` (base64);
//!   `status` goes, except on CustomResourceDefinitions. Roles and ClusterRoles are left
//!   alone, as Flux leaves them.
//! - dry-run results ([`dry_run`]): a HorizontalPodAutoscaler's `spec.metrics` loses
//!   repeated and empty entries (an API server bug Flux works around).

use serde_json::{Map, Value};

fn api_version(obj: &Value) -> &str {
    obj.get("apiVersion").and_then(Value::as_str).unwrap_or("")
}

fn kind(obj: &Value) -> &str {
    obj.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// Normalizes a desired object in place.
pub fn desired(obj: &mut Value) {
    let (av, k) = (api_version(obj).to_owned(), kind(obj).to_owned());
    if av == "rbac.authorization.k8s.io/v1" && (k == "Role" || k == "ClusterRole") {
        return;
    }
    let pod_spec_path: Option<&[&str]> = match (av.as_str(), k.as_str()) {
        ("v1", "Pod") => Some(&["spec"]),
        ("apps/v1", "Deployment" | "StatefulSet" | "DaemonSet" | "ReplicaSet")
        | ("batch/v1", "Job") => Some(&["spec", "template", "spec"]),
        ("batch/v1", "CronJob") => Some(&["spec", "jobTemplate", "spec", "template", "spec"]),
        _ => None,
    };
    if let Some(path) = pod_spec_path
        && let Some(spec) = get_mut(obj, path)
        && let Some(containers) = spec.get_mut("containers").and_then(Value::as_array_mut)
    {
        for c in containers {
            if let Some(ports) = c.get_mut("ports").and_then(Value::as_array_mut) {
                default_protocol(ports);
            }
        }
    }
    if (av.as_str(), k.as_str()) == ("v1", "Service")
        && let Some(ports) = get_mut(obj, &["spec", "ports"]).and_then(Value::as_array_mut)
    {
        default_protocol(ports);
    }
    if (av.as_str(), k.as_str()) == ("v1", "Secret") {
        secret_string_data(obj);
    }
    if k != "CustomResourceDefinition"
        && let Some(m) = obj.as_object_mut()
    {
        m.remove("status");
    }
}

/// Normalizes a dry-run result in place.
pub fn dry_run(obj: &mut Value) {
    if kind(obj) != "HorizontalPodAutoscaler" || api_version(obj) != "autoscaling/v2" {
        return;
    }
    let Some(metrics) = get_mut(obj, &["spec", "metrics"]).and_then(Value::as_array_mut) else {
        return;
    };
    let mut kept: Vec<Value> = Vec::new();
    for m in metrics.drain(..) {
        let typed = m
            .get("type")
            .and_then(Value::as_str)
            .is_some_and(|t| !t.is_empty());
        if typed && !kept.contains(&m) {
            kept.push(m);
        }
    }
    *metrics = kept;
}

fn get_mut<'a>(obj: &'a mut Value, path: &[&str]) -> Option<&'a mut Value> {
    let mut cur = obj;
    for p in path {
        cur = cur.get_mut(*p)?;
    }
    Some(cur)
}

fn default_protocol(ports: &mut [Value]) {
    for p in ports {
        if let Some(m) = p.as_object_mut() {
            let missing = m
                .get("protocol")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty);
            if missing {
                m.insert("protocol".into(), Value::String("TCP".into()));
            }
        }
    }
}

fn secret_string_data(obj: &mut Value) {
    let Some(m) = obj.as_object_mut() else {
        return;
    };
    let Some(Value::Object(string_data)) = m.remove("stringData") else {
        return;
    };
    if string_data.is_empty() {
        return;
    }
    let data = m.entry("data").or_insert_with(|| Value::Object(Map::new()));
    if !data.is_object() {
        *data = Value::Object(Map::new());
    }
    let data = data.as_object_mut().expect("set to an object above");
    for (k, v) in string_data {
        let text = match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let encoded = serde_json::to_value(k8s_openapi::ByteString(text.into_bytes()))
            .expect("a ByteString serializes to a string");
        data.insert(k, encoded);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn pod_template_and_service_ports_get_tcp() {
        let mut d = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "spec": {"template": {"spec": {"containers": [
                {"name": "a", "ports": [{"containerPort": 80}, {"containerPort": 53, "protocol": "UDP"}]}
            ]}}},
            "status": {"replicas": 1}
        });
        desired(&mut d);
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["ports"],
            json!([{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 53, "protocol": "UDP"}])
        );
        assert!(d.get("status").is_none());
        let mut s =
            json!({"apiVersion": "v1", "kind": "Service", "spec": {"ports": [{"port": 80}]}});
        desired(&mut s);
        assert_eq!(s["spec"]["ports"][0]["protocol"], "TCP");
    }

    #[test]
    fn secret_string_data_moves_into_data() {
        let mut s = json!({
            "apiVersion": "v1", "kind": "Secret",
            "data": {"a": "eA=="},
            "stringData": {"b": "hello"}
        });
        desired(&mut s);
        assert_eq!(
            s,
            json!({"apiVersion": "v1", "kind": "Secret", "data": {"a": "eA==", "b": "aGVsbG8="}})
        );
    }

    #[test]
    fn roles_and_crd_status_are_left_alone() {
        let mut r =
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "status": {}});
        desired(&mut r);
        assert!(r.get("status").is_some());
        let mut c = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "status": {"x": 1}});
        desired(&mut c);
        assert!(c.get("status").is_some());
    }

    #[test]
    fn hpa_metrics_lose_repeats_and_empty_entries() {
        let m = json!({"type": "Resource", "resource": {"name": "cpu"}});
        let mut h = json!({
            "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
            "spec": {"metrics": [m, m, {"type": ""}]}
        });
        dry_run(&mut h);
        assert_eq!(h["spec"]["metrics"], json!([m]));
    }
}
