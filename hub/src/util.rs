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

pub use flotilla_agent::kube::{api_error, api_status, error_chain};

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[test]
    fn an_api_error_reads_as_its_message_and_http_code_never_as_a_debug_dump() {
        let not_found = KubeError::Api(
            Status::failure("namespaces \"flotilla-system\" not found", "NotFound")
                .with_code(404)
                .boxed(),
        );
        assert_eq!(
            api_error("getting", "Namespace", "flotilla-system", &not_found),
            "getting Namespace flotilla-system: namespaces \"flotilla-system\" not found (HTTP 404)"
        );
        // What a server that is no API server answers (kube's reason, an empty body): the
        // Ready message of issue 35.
        let bare = KubeError::Api(
            Status::failure("", "Failed to parse error data")
                .with_code(404)
                .boxed(),
        );
        let m = api_error("getting", "Namespace", "flotilla-system", &bare);
        assert_eq!(
            m,
            "getting Namespace flotilla-system: Not Found: the server has no such resource; check the kubeConfig's server URL (scheme, host, port, no extra path) and that the resource's CRD is installed (HTTP 404)"
        );
        for debug in ["Status {", "Some(", "None", "ApiError"] {
            assert!(!m.contains(debug), "{m}");
        }
        let reason_only = Status::failure("", "Forbidden").with_code(403);
        assert_eq!(
            error_chain(&reason_only),
            "Forbidden: the credentials are not allowed to do this; check their RBAC (HTTP 403)"
        );
    }

    #[test]
    fn an_api_error_deeper_in_a_chain_ends_it_in_the_same_words() {
        #[derive(Debug, thiserror::Error)]
        #[error("listing plans")]
        struct Outer(#[source] KubeError);
        let e = Outer(KubeError::Api(
            Status::failure("secrets is forbidden: no", "Forbidden")
                .with_code(403)
                .boxed(),
        ));
        assert_eq!(
            error_chain(&e),
            "listing plans: secrets is forbidden: no (HTTP 403)"
        );
    }
}
