//! Shared vocabulary: how objects are named in messages, resolved objects, API failures.

use std::fmt;

use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, ResourceExt as _};

/// An object's identity as messages print it: `Deployment default/web`, `ClusterRole reader`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectRef {
    /// `apiVersion`, e.g. `apps/v1`.
    pub api_version: String,
    /// `kind`, e.g. `Deployment`.
    pub kind: String,
    /// The namespace, `None` for cluster-scoped objects (or not yet defaulted).
    pub namespace: Option<String>,
    /// `metadata.name` (or `metadata.generateName` when there is no name).
    pub name: String,
}

impl ObjectRef {
    /// The identity of a dynamic object (kind and apiVersion from its type meta).
    pub fn from_object(obj: &DynamicObject) -> ObjectRef {
        let (api_version, kind) = obj
            .types
            .as_ref()
            .map(|t| (t.api_version.clone(), t.kind.clone()))
            .unwrap_or_default();
        ObjectRef {
            api_version,
            kind,
            namespace: obj.metadata.namespace.clone(),
            name: obj
                .metadata
                .name
                .clone()
                .or_else(|| obj.metadata.generate_name.clone())
                .unwrap_or_default(),
        }
    }
}

impl fmt::Display for ObjectRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.namespace {
            Some(ns) if !ns.is_empty() => write!(f, "{} {}/{}", self.kind, ns, self.name),
            _ => write!(f, "{} {}", self.kind, self.name),
        }
    }
}

/// An object resolved against the cluster's API: ready to be applied, watched or deleted.
///
/// Its namespace is set when the resource is namespaced and empty when it is cluster-scoped.
#[derive(Clone, Debug)]
pub struct Resource {
    /// The template the object came from (`chart/templates/web.yaml`), when known.
    pub source: Option<String>,
    /// The API resource (group, version, kind, plural).
    pub api_resource: ApiResource,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// The object, with `apiVersion` and `kind` set.
    pub object: DynamicObject,
}

impl Resource {
    /// The object's identity for messages.
    pub fn object_ref(&self) -> ObjectRef {
        ObjectRef::from_object(&self.object)
    }

    /// `metadata.name` (empty when the object only has a `generateName`).
    pub fn name(&self) -> String {
        self.object.metadata.name.clone().unwrap_or_default()
    }

    /// `metadata.namespace` for namespaced objects.
    pub fn namespace(&self) -> Option<&str> {
        if self.namespaced {
            self.object.metadata.namespace.as_deref()
        } else {
            None
        }
    }

    /// The object's kind.
    pub fn kind(&self) -> &str {
        &self.api_resource.kind
    }

    /// An annotation of the object as rendered.
    pub fn annotation(&self, key: &str) -> Option<&str> {
        self.object.annotations().get(key).map(String::as_str)
    }

    /// An `Api` for this object's resource, in its namespace.
    pub(crate) fn api(&self, client: &Client) -> Api<DynamicObject> {
        match self.namespace() {
            Some(ns) => Api::namespaced_with(client.clone(), ns, &self.api_resource),
            None => Api::all_with(client.clone(), &self.api_resource),
        }
    }
}

/// A failed API request, printed as the API server's message (`deployments.apps "web" is
/// forbidden: ...`) rather than kube's debug form.
#[derive(Debug)]
pub struct ApiFailure(pub kube::Error);

impl ApiFailure {
    /// The HTTP status code, when the API server answered.
    pub fn code(&self) -> Option<u16> {
        match &self.0 {
            kube::Error::Api(status) => Some(status.code),
            _ => None,
        }
    }

    /// The API server's reason (`Forbidden`, `Invalid`, `NotFound`, ...), when it answered.
    pub fn reason(&self) -> Option<&str> {
        match &self.0 {
            kube::Error::Api(status) => Some(status.reason.as_str()),
            _ => None,
        }
    }

    /// Whether the request was refused by authorization.
    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }

    /// Whether the object (or resource) does not exist.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// Whether retrying later may help (server errors, throttling, timeouts, transport).
    pub fn is_transient(&self) -> bool {
        match self.code() {
            Some(code) => code == 409 || code == 429 || code >= 500,
            None => true,
        }
    }
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            kube::Error::Api(status) => f.write_str(&api_status(status)),
            other => f.write_str(&error_chain(other)),
        }
    }
}

impl std::error::Error for ApiFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        // The Display holds the whole chain.
        None
    }
}

impl From<kube::Error> for ApiFailure {
    fn from(e: kube::Error) -> Self {
        ApiFailure(e)
    }
}

/// An API server's answer as a sentence: `<status message> (HTTP <code>)`
/// ([`flotilla_core::api_status::describe`]), never the `Status`'s `Debug`.
pub fn api_status(status: &kube::core::Status) -> String {
    flotilla_core::api_status::describe(status.code, &status.reason, &status.message)
}

/// `<verb> <resource> <name>: <status message> (HTTP <code>)`: a Kubernetes client error in
/// a sentence (`verb` is e.g. `getting`, `resource` a kind, `name` the object).
pub fn api_error(verb: &str, resource: &str, name: &str, e: &kube::Error) -> String {
    format!("{verb} {resource} {name}: {}", error_chain(e))
}

/// An error and its sources, joined with `: `, each message once (what `anyhow`'s `{:#}`
/// prints). An API error (`kube::Error::Api`, or its `Status`) reads as [`api_status`] says
/// and ends the chain: its `Debug` is never shown. The one error chain of hub, agent and CLI.
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    if let Some(text) = api_error_text(err) {
        return text;
    }
    let mut out = grpc_status_text(err).unwrap_or_else(|| err.to_string());
    let mut next = err.source();
    while let Some(e) = next {
        if let Some(text) = api_error_text(e) {
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            break;
        }
        // Some errors print their source in their own message: say it once.
        let text = grpc_status_text(e).unwrap_or_else(|| e.to_string());
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}

/// A gRPC status as `<message> (gRPC <code>)`: tonic's own `Display` quotes the message
/// and prints its source's `Debug` (the source follows in the chain instead).
fn grpc_status_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    let status = e.downcast_ref::<tonic::Status>()?;
    let message = if status.message().is_empty() {
        status.code().description()
    } else {
        status.message()
    };
    Some(format!(
        "{message} (gRPC {})",
        grpc_code_name(status.code())
    ))
}

/// The name of a gRPC status code, as the gRPC specification spells it in CamelCase.
fn grpc_code_name(code: tonic::Code) -> &'static str {
    use tonic::Code;
    match code {
        Code::Ok => "Ok",
        Code::Cancelled => "Cancelled",
        Code::Unknown => "Unknown",
        Code::InvalidArgument => "InvalidArgument",
        Code::DeadlineExceeded => "DeadlineExceeded",
        Code::NotFound => "NotFound",
        Code::AlreadyExists => "AlreadyExists",
        Code::PermissionDenied => "PermissionDenied",
        Code::ResourceExhausted => "ResourceExhausted",
        Code::FailedPrecondition => "FailedPrecondition",
        Code::Aborted => "Aborted",
        Code::OutOfRange => "OutOfRange",
        Code::Unimplemented => "Unimplemented",
        Code::Internal => "Internal",
        Code::Unavailable => "Unavailable",
        Code::DataLoss => "DataLoss",
        Code::Unauthenticated => "Unauthenticated",
    }
}

fn api_error_text(e: &(dyn std::error::Error + 'static)) -> Option<String> {
    if let Some(kube::Error::Api(status)) = e.downcast_ref::<kube::Error>() {
        return Some(api_status(status));
    }
    if let Some(ApiFailure(kube::Error::Api(status))) = e.downcast_ref::<ApiFailure>() {
        return Some(api_status(status));
    }
    e.downcast_ref::<kube::core::Status>().map(api_status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;

    #[derive(Debug, thiserror::Error)]
    #[error("applying Deployment default/web")]
    struct Applying(#[source] ApiFailure);

    #[derive(Debug, thiserror::Error)]
    #[error("session ended")]
    struct Ended(#[source] tonic::Status);

    #[test]
    fn api_and_grpc_errors_read_as_sentences_in_a_chain_each_cause_once() {
        let invalid = || {
            kube::Error::Api(
                Status::failure(
                    "Deployment.apps \"web\" is invalid: spec.replicas",
                    "Invalid",
                )
                .with_code(422)
                .boxed(),
            )
        };
        let table: Vec<(Box<dyn std::error::Error>, &str)> = vec![
            (
                Box::new(ApiFailure(invalid())),
                "Deployment.apps \"web\" is invalid: spec.replicas (HTTP 422)",
            ),
            (
                Box::new(Applying(ApiFailure(invalid()))),
                "applying Deployment default/web: Deployment.apps \"web\" is invalid: spec.replicas (HTTP 422)",
            ),
            (
                Box::new(Ended(tonic::Status::unavailable("the hub is stopping"))),
                "session ended: the hub is stopping (gRPC Unavailable)",
            ),
            (
                Box::new(tonic::Status::permission_denied("")),
                "The caller does not have permission to execute the specified operation (gRPC PermissionDenied)",
            ),
        ];
        for (e, want) in table {
            assert_eq!(error_chain(e.as_ref()), want);
        }
        assert_eq!(
            api_error("getting", "Secret", "default/x", &invalid()),
            "getting Secret default/x: Deployment.apps \"web\" is invalid: spec.replicas (HTTP 422)"
        );
    }
}
