//! Installing CustomResourceDefinitions into a test cluster.

use std::time::Duration;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};

use crate::wait;

/// Applies `crds` (server-side, forced, as `manager`) and waits until each is Established.
pub async fn install(
    client: &kube::Client,
    manager: &str,
    crds: &[CustomResourceDefinition],
) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        let name = crd
            .metadata
            .name
            .clone()
            .ok_or_else(|| anyhow::anyhow!("a CRD without a name"))?;
        api.patch(
            &name,
            &PatchParams::apply(manager).force(),
            &Patch::Apply(crd),
        )
        .await?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait::until(
            &format!("the CRD {name} to be Established"),
            Duration::from_secs(120),
            || async {
                let crd = api.get(&name).await?;
                Ok(crd
                    .status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Established" && c.status == "True")
                    .then_some(()))
            },
        )
        .await?;
    }
    Ok(())
}
