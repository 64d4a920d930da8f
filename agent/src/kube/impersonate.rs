//! Clients that act as a ServiceAccount (HelmRelease `spec.serviceAccountName`): the base
//! identity impersonates `system:serviceaccount:<namespace>:<name>`, so every request is
//! authorized against the ServiceAccount's RBAC.

use kube::{Client, Config};

/// Errors building an impersonating client.
#[derive(Debug, thiserror::Error)]
pub enum ImpersonationError {
    /// The namespace or name is empty.
    #[error("service account {namespace:?}/{name:?}: namespace and name must not be empty")]
    EmptyName {
        /// The namespace given.
        namespace: String,
        /// The name given.
        name: String,
    },
    /// The client could not be built from the configuration.
    #[error("service account {namespace}/{name}: building the client")]
    Client {
        /// The namespace.
        namespace: String,
        /// The name.
        name: String,
        /// Why.
        #[source]
        source: kube::Error,
    },
}

/// The user name Kubernetes gives a ServiceAccount.
pub fn service_account_user(namespace: &str, name: &str) -> String {
    format!("system:serviceaccount:{namespace}:{name}")
}

/// `base` changed to impersonate the ServiceAccount (any earlier impersonation replaced).
pub fn service_account_config(
    base: &Config,
    namespace: &str,
    name: &str,
) -> Result<Config, ImpersonationError> {
    if namespace.is_empty() || name.is_empty() {
        return Err(ImpersonationError::EmptyName {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
        });
    }
    let mut config = base.clone();
    config.auth_info.impersonate = Some(service_account_user(namespace, name));
    config.auth_info.impersonate_groups = None;
    config.auth_info.impersonate_uid = None;
    config.auth_info.impersonate_user_extra = None;
    Ok(config)
}

/// A client built from `base` that acts as the ServiceAccount. Needs a Tokio runtime.
pub fn service_account_client(
    base: &Config,
    namespace: &str,
    name: &str,
) -> Result<Client, ImpersonationError> {
    let config = service_account_config(base, namespace, name)?;
    Client::try_from(config).map_err(|source| ImpersonationError::Client {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_impersonates_the_service_account_user() {
        let base = Config::new("https://127.0.0.1:6443".parse().expect("a valid URL"));
        let config = service_account_config(&base, "apps", "deployer").unwrap();
        assert_eq!(
            config.auth_info.impersonate.as_deref(),
            Some("system:serviceaccount:apps:deployer")
        );
    }

    #[test]
    fn an_empty_service_account_name_is_refused() {
        let base = Config::new("https://127.0.0.1:6443".parse().expect("a valid URL"));
        assert!(service_account_config(&base, "apps", "").is_err());
    }
}
