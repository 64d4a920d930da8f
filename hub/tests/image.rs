//! The hub's container image (`cargo xtask image --bin hub`): built around the hub
//! binary with crane, no container daemon, pushed to a real registry (the CNCF distribution
//! registry), and read back: one layer holding the binary as the entrypoint and the CA bundle,
//! user 65532.

use flotilla_tests::image::{self, Component, ImageOptions};
use flotilla_tests::servers::{OciRegistry, RegistryOptions};

#[tokio::test]
async fn the_hub_image_is_pushed_with_the_binary_as_entrypoint_run_as_user_65532()
-> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    let options = ImageOptions {
        component: Component::Hub,
        binary: env!("CARGO_BIN_EXE_flotilla-hub").into(),
        reference: format!("{}/flotilla/flotilla-hub:test", registry.host()),
        insecure: true,
        ca_bundle: None,
        // The test build is dynamically linked; the image's shape is what is checked.
        allow_dynamic: true,
    };
    let options2 = options.clone();
    let digest = tokio::task::spawn_blocking(move || image::build_and_push(&options2)).await??;
    assert!(digest.starts_with("sha256:"), "{digest}");
    tokio::task::spawn_blocking(move || image::verify(&options)).await??;
    Ok(())
}
