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
            kube::Error::Api(status) if !status.message.is_empty() => f.write_str(&status.message),
            kube::Error::Api(status) => write!(f, "{} ({})", status.reason, status.code),
            other => write!(f, "{other}"),
        }
    }
}

impl std::error::Error for ApiFailure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            kube::Error::Api(_) => None,
            other => std::error::Error::source(other),
        }
    }
}

impl From<kube::Error> for ApiFailure {
    fn from(e: kube::Error) -> Self {
        ApiFailure(e)
    }
}

/// An error and its sources, joined with `: ` (what `anyhow`'s `{:#}` prints).
pub fn error_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut next = err.source();
    while let Some(e) = next {
        // Some errors print their source in their own message: say it once.
        let text = e.to_string();
        if !out.ends_with(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        next = e.source();
    }
    out
}
