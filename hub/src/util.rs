//! Small helpers the hub's controllers share: interval jitter, the current time as a
//! Kubernetes timestamp, reading Secret and ConfigMap data, and the error chain of a
//! Kubernetes client error (for conditions and logs).

use std::collections::BTreeMap;
use std::time::Duration;

use flotilla_core::meta::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::{Client, Error as KubeError};

/// The field manager of everything the hub writes.
pub const FIELD_MANAGER: &str = "flotilla-hub";

/// Flux's interval jitter: `d * (1 + p * (2 * rand - 1))`.
pub fn jitter(d: Duration, fraction: f64) -> Duration {
    let factor = 1.0 + fraction * (2.0 * fastrand::f64() - 1.0);
    d.mul_f64(factor.max(0.0))
}

/// Now, as Kubernetes writes a time.
pub fn now() -> Timestamp {
    flotilla_agent::reconcile::now()
}

/// The data of Secret `namespace/name` (decoded), `None` when it does not exist.
pub async fn secret_data(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, KubeError> {
    let api: Api<Secret> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(secret_bytes))
}

/// The `.data` of ConfigMap `namespace/name` as bytes, `None` when it does not exist.
pub async fn config_map_data(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, KubeError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    Ok(api.get_opt(name).await?.map(config_map_bytes))
}

/// A Secret's data by key, decoded: `stringData` (as the API server would merge it), then
/// `data` over it.
pub fn secret_bytes(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .string_data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    data.extend(
        secret
            .data
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| (k, v.0)),
    );
    data
}

/// A ConfigMap's `.data` by key, as bytes.
pub fn config_map_bytes(config_map: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    config_map
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect()
}

/// An error and its sources, joined with `: ` (Kubernetes errors carry the API server's
/// message, never object data).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}
