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
/// message, never object data). An API error (`kube::Error::Api`, or its `Status`) reads
/// as [`api_status`] says, and ends the chain (its `Debug` is never shown).
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    if let Some(text) = api_error_text(e) {
        return text;
    }
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        if let Some(text) = api_error_text(s) {
            out.push_str(": ");
            out.push_str(&text);
            break;
        }
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

fn api_error_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(KubeError::Api(status)) = e.downcast_ref::<KubeError>() {
        return Some(api_status(status));
    }
    e.downcast_ref::<kube::core::Status>().map(api_status)
}

/// The most a server's answer contributes to a message.
const MAX_STATUS_MESSAGE: usize = 300;

/// An API server's refusal as a sentence: its message (else its reason), then
/// `(HTTP <code>)`. An answer that is no Kubernetes `Status` (a proxy's page, a server that
/// is not an API server) says so; a long one is cut, on one line.
pub fn api_status(status: &kube::core::Status) -> String {
    // kube's reason when the body was no `Status` (the body is then the message).
    const NOT_A_STATUS: &str = "Failed to parse error data";
    let one_line = |s: &str| s.split_whitespace().collect::<Vec<_>>().join(" ");
    let mut message = one_line(&status.message);
    if message.chars().count() > MAX_STATUS_MESSAGE {
        message = message.chars().take(MAX_STATUS_MESSAGE).collect::<String>() + "…";
    }
    let text = if status.reason == NOT_A_STATUS {
        if message.is_empty() {
            "the server's answer is not a Kubernetes API response (is it a Kubernetes API server?)"
                .to_owned()
        } else {
            format!(
                "the server's answer is not a Kubernetes API response (is it a Kubernetes API server?): {message}"
            )
        }
    } else if !message.is_empty() {
        message
    } else if !status.reason.is_empty() {
        one_line(&status.reason)
    } else {
        "the server refused the request".to_owned()
    };
    if status.code == 0 {
        text
    } else {
        format!("{text} (HTTP {})", status.code)
    }
}

/// `<verb> <resource> <name>: <status message> (HTTP <code>)`: a Kubernetes client error
/// in a sentence (`verb` is e.g. `getting`, `resource` a kind, `name` the object).
pub fn api_error(verb: &str, resource: &str, name: &str, e: &KubeError) -> String {
    format!("{verb} {resource} {name}: {}", error_chain(e))
}

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
        let m = error_chain(&bare);
        assert_eq!(
            m,
            "the server's answer is not a Kubernetes API response (is it a Kubernetes API server?) (HTTP 404)"
        );
        for debug in ["Status {", "Some(", "None", "ApiError"] {
            assert!(!m.contains(debug), "{m}");
        }
        let page = KubeError::Api(
            Status::failure("<html>\n  404\n page </html>", "Failed to parse error data")
                .with_code(404)
                .boxed(),
        );
        assert_eq!(
            error_chain(&page),
            "the server's answer is not a Kubernetes API response (is it a Kubernetes API server?): <html> 404 page </html> (HTTP 404)"
        );
        let reason_only = Status::failure("", "Forbidden").with_code(403);
        assert_eq!(error_chain(&reason_only), "Forbidden (HTTP 403)");
        let long = KubeError::Api(
            Status::failure(&"x".repeat(1000), "Bad")
                .with_code(400)
                .boxed(),
        );
        assert!(error_chain(&long).chars().count() < MAX_STATUS_MESSAGE + 20);
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
