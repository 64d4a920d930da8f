//! `sources::oci` and `sources::oci_repository` against a real OCI registry: the CNCF
//! distribution registry (`flotilla_tests::servers::OciRegistry`) with charts pushed by the
//! reference `helm push`, plain, with htpasswd basic auth and with TLS. Each test pulls by
//! tag, semver constraint or digest and checks the archive byte for byte against the package
//! helm pushed (and the version against what `helm pull --version` picks from the same
//! registry), or checks that a failure is refused with a clear error. The last test runs the
//! `OCIRepository` reconciler against a real local cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use flotilla_agent::charts::{CachedCharts, NoFetcher};
use flotilla_api::{HelmRepository, OCIRepository};
use flotilla_core::ids::ChartDigest;
use flotilla_core::meta::{ConditionStatus, Conditions as _};
use flotilla_hub::sources::http::{DEFAULT_TIMEOUT, RepositoryAuth};
use flotilla_hub::sources::oci::{
    self, OciClient, OciError, OciLimits, PulledChart, Reference, select_semver_tag,
};
use flotilla_hub::sources::oci_repository::{self, ChartStore, Options};
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::servers::{
    AccessLogEntry, HelmRepoServer, OciRegistry, PushedChart, RegistryOptions, RepoOptions, helm_ok,
};
use flotilla_tests::{Cluster, ClusterOptions, wait};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};

fn hello_chart() -> PathBuf {
    workspace_root().join("tests/charts/hello")
}

/// A client of `oci://HOST/charts/hello` on `registry`: plain HTTP when it has no TLS.
fn client(registry: &OciRegistry, auth: RepositoryAuth) -> anyhow::Result<OciClient> {
    let insecure = registry.ca_file().is_none();
    Ok(OciClient::new(
        &format!("{}/hello", registry.oci_url("charts")),
        auth,
        insecure,
        DEFAULT_TIMEOUT,
        OciLimits::default(),
    )?)
}

fn credentials(registry: &OciRegistry) -> RepositoryAuth {
    RepositoryAuth {
        basic: registry
            .credentials()
            .map(|c| (c.username.clone(), c.password.clone())),
        ca_pem: registry.ca_pem().map(String::into_bytes),
        ..RepositoryAuth::default()
    }
}

fn tag(pushed: &PushedChart) -> String {
    pushed
        .reference
        .rsplit_once(':')
        .map(|(_, t)| t.to_owned())
        .expect("a tagged reference")
}

fn assert_is_package(pulled: &PulledChart, pushed: &PushedChart) -> anyhow::Result<()> {
    assert_eq!(pulled.manifest.digest.as_str(), pushed.digest);
    assert_eq!(pulled.archive, std::fs::read(&pushed.package)?);
    Ok(())
}

/// The chart version `helm pull oci://.../hello --version <version>` picks from `registry`.
fn helm_pulls(registry: &OciRegistry, version: &str) -> anyhow::Result<String> {
    let home = tempfile::tempdir()?;
    let out = home.path().join("out");
    std::fs::create_dir_all(&out)?;
    let chart = format!("{}/hello", registry.oci_url("charts"));
    let mut args = vec![
        "pull".to_owned(),
        chart,
        "--version".to_owned(),
        version.to_owned(),
        "-d".to_owned(),
        out.display().to_string(),
    ];
    args.extend(registry.helm_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    helm_ok(home.path(), &args)?;
    let files: Vec<_> = std::fs::read_dir(&out)?.collect::<Result<_, _>>()?;
    anyhow::ensure!(files.len() == 1, "helm pull wrote {} files", files.len());
    let name = files[0].file_name().to_string_lossy().into_owned();
    Ok(name
        .strip_prefix("hello-")
        .and_then(|n| n.strip_suffix(".tgz"))
        .unwrap_or(&name)
        .to_owned())
}

/// A blob's file in the registry's filesystem storage.
fn blob_file(registry: &OciRegistry, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    registry
        .storage_dir()
        .join("docker/registry/v2/blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data")
}

fn store(dir: &Path) -> anyhow::Result<ChartStore> {
    Ok(CachedCharts::new(dir.to_path_buf(), 64 << 20, NoFetcher)?)
}

#[tokio::test]
async fn a_chart_pulled_by_tag_or_digest_is_the_package_helm_pushed() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    let first = registry.push(&hello_chart(), "charts")?;
    let second = registry.push_version(&hello_chart(), "charts", "0.2.0")?;
    let client = client(&registry, RepositoryAuth::default())?;

    let mut tags = client.list_tags().await?;
    tags.sort();
    assert_eq!(tags, ["0.1.0", "0.2.0"]);

    for pushed in [&first, &second] {
        let by_tag = client.pull_chart(&Reference::Tag(tag(pushed))).await?;
        assert_is_package(&by_tag, pushed)?;
        assert_eq!(
            by_tag.revision(),
            format!("{}@{}", tag(pushed), pushed.digest)
        );

        let by_digest = client
            .pull_chart(&Reference::digest(&pushed.digest)?)
            .await?;
        assert_is_package(&by_digest, pushed)?;
        assert_eq!(by_digest.revision(), pushed.digest);
        assert_eq!(
            by_digest.manifest.annotations["org.opencontainers.image.version"],
            tag(pushed)
        );
    }

    let missing = ChartDigest::of_bytes(b"no such manifest");
    let err = client
        .pull_chart(&Reference::Digest(missing.clone()))
        .await
        .expect_err("unknown digest");
    assert_eq!(err.kind(), "NotFound", "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!("/v2/charts/hello/manifests/{missing}")) && text.contains("404"),
        "{text}"
    );
    let err = client
        .pull_chart(&Reference::Tag("latest".to_owned()))
        .await
        .expect_err("no latest tag");
    assert!(err.to_string().contains("MANIFEST_UNKNOWN"), "{err}");
    Ok(())
}

#[tokio::test]
async fn a_tag_list_larger_than_its_bound_across_pages_is_refused() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    registry.push(&hello_chart(), "charts")?;
    for version in ["0.2.0", "0.3.0"] {
        registry.push_version(&hello_chart(), "charts", version)?;
    }
    let client = client(&registry, RepositoryAuth::default())?;
    let limited = |max_tags_size| {
        OciClient::new(
            &client.url().to_string(),
            RepositoryAuth::default(),
            true,
            DEFAULT_TIMEOUT,
            OciLimits {
                tags_per_page: 1,
                max_tags_size,
                ..OciLimits::default()
            },
        )
    };
    // Each page is small; the three together pass 60 bytes.
    let err = limited(60)?
        .list_tags()
        .await
        .expect_err("the tag list is too large");
    assert!(
        err.to_string()
            .contains("the tag list is larger than the limit of 60 bytes"),
        "{err}"
    );
    assert_eq!(limited(4096)?.list_tags().await?.len(), 3);
    Ok(())
}

#[tokio::test]
async fn semver_constraints_pick_the_version_helm_pull_picks() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    registry.push(&hello_chart(), "charts")?;
    for version in ["0.2.0", "0.10.0", "1.0.0-rc.1", "0.3.0+build.7"] {
        registry.push_version(&hello_chart(), "charts", version)?;
    }
    let client = client(&registry, RepositoryAuth::default())?;
    let mut tags = client.list_tags().await?;
    tags.sort();
    assert_eq!(
        tags,
        ["0.1.0", "0.10.0", "0.2.0", "0.3.0_build.7", "1.0.0-rc.1"]
    );
    // The same tags two at a time, following the registry's Link headers.
    let paged = OciClient::new(
        &client.url().to_string(),
        RepositoryAuth::default(),
        true,
        DEFAULT_TIMEOUT,
        OciLimits {
            tags_per_page: 2,
            ..OciLimits::default()
        },
    )?;
    let mut pages = paged.list_tags().await?;
    pages.sort();
    assert_eq!(pages, tags);
    let log = std::fs::read_to_string(
        registry
            .storage_dir()
            .parent()
            .expect("the storage is in the registry's directory")
            .join("logs/registry.log"),
    )?;
    let next_pages = log
        .lines()
        .filter(|l| l.contains("/v2/charts/hello/tags/list?") && l.contains("last="))
        .count();
    assert!(
        next_pages >= 2,
        "the registry served no further pages:\n{log}"
    );
    let store_dir = tempfile::tempdir()?;
    let store = store(store_dir.path())?;

    for constraint in [
        "*",
        "0.2.0",
        "0.1.*",
        "~0.3",
        ">=0.1.0 <0.3.0",
        "^0.1",
        "0.x",
        ">=1.0.0-0",
        "0.3.0+build.7",
        "<0.2.0 || >=0.10.0 <1.0.0",
    ] {
        let helm = helm_pulls(&registry, constraint)?;

        // A HelmChart of an OCI HelmRepository.
        let version = client.resolve_chart_version(constraint).await?;
        assert_eq!(version, helm, "HelmChart version {constraint}");
        let fetched = oci_repository::fetch_oci_chart(
            &client.url().to_string(),
            RepositoryAuth::default(),
            true,
            DEFAULT_TIMEOUT,
            OciLimits::default(),
            "hello",
            constraint,
            &store,
        )
        .await?;
        assert_eq!(fetched.version, helm, "fetched {constraint}");
        let chart = store.get(&fetched.digest).await?;
        assert_eq!(chart.metadata.version, helm, "stored {constraint}");

        // An OCIRepository's ref.semver with the Helm layer selected (`_` read as `+`).
        if constraint != "0.3.0+build.7" {
            let picked = select_semver_tag(&tags, constraint, true)?;
            assert_eq!(
                picked.replace('_', "+"),
                helm,
                "OCIRepository semver {constraint}"
            );
        }
    }

    let err = client
        .resolve_chart_version(">=2.0.0")
        .await
        .expect_err("no match");
    assert_eq!(
        err.to_string(),
        "could not locate a version matching provided version string >=2.0.0"
    );
    let err = client
        .resolve_semver(">=2.0.0", true)
        .await
        .expect_err("none");
    assert_eq!(err.to_string(), "no match found for semver: >=2.0.0");
    Ok(())
}

#[tokio::test]
async fn basic_auth_pulls_with_good_credentials_and_explains_a_401() -> anyhow::Result<()> {
    let registry =
        OciRegistry::start(RegistryOptions::default().with_basic_auth("carol", "pa55word")).await?;
    let pushed = registry.push(&hello_chart(), "charts")?;

    let good = client(&registry, credentials(&registry))?;
    assert_is_package(
        &good.pull_chart(&Reference::Tag(tag(&pushed))).await?,
        &pushed,
    )?;
    assert_eq!(good.list_tags().await?, ["0.1.0"]);

    // The same credentials from a dockerconfigjson Secret's data.
    let config = serde_json::json!({"auths": {registry.host(): {"username": "carol", "password": "pa55word"}}});
    let data = BTreeMap::from([(".dockerconfigjson".to_owned(), serde_json::to_vec(&config)?)]);
    let basic = oci::registry_credentials(&data, &registry.host())?;
    let from_secret = client(
        &registry,
        RepositoryAuth {
            basic,
            ..RepositoryAuth::default()
        },
    )?;
    assert_is_package(
        &from_secret
            .pull_chart(&Reference::Tag(tag(&pushed)))
            .await?,
        &pushed,
    )?;

    let wrong = client(
        &registry,
        RepositoryAuth {
            basic: Some(("carol".to_owned(), "wrong-pa55".to_owned())),
            ..RepositoryAuth::default()
        },
    )?;
    let err = wrong
        .pull_chart(&Reference::Tag(tag(&pushed)))
        .await
        .expect_err("a wrong password");
    let text = err.to_string();
    assert_eq!(err.kind(), "Unauthorized");
    assert!(!err.is_transient());
    assert!(
        text.starts_with(&format!(
            "failed to fetch http://{}/v2/charts/hello/manifests/0.1.0: 401 Unauthorized: the registry refused the credentials given",
            registry.host()
        )),
        "{text}"
    );
    assert!(!text.contains("wrong-pa55"), "{text}");

    let anonymous = client(&registry, RepositoryAuth::default())?;
    let err = anonymous.list_tags().await.expect_err("no credentials");
    assert!(
        err.to_string()
            .contains("401 Unauthorized: the registry requires credentials and none were given"),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_tls_registry_is_trusted_with_its_ca_only() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default().with_tls()).await?;
    let pushed = registry.push(&hello_chart(), "charts")?;
    let reference = Reference::Tag(tag(&pushed));

    let trusting = client(&registry, credentials(&registry))?;
    assert_is_package(&trusting.pull_chart(&reference).await?, &pushed)?;

    let untrusting = client(&registry, RepositoryAuth::default())?;
    let err = untrusting
        .pull_chart(&reference)
        .await
        .expect_err("an unknown CA");
    assert_eq!(err.kind(), "TlsError", "{err}");
    let text = err.to_string();
    assert!(
        text.contains(&format!(
            "https://{}/v2/charts/hello/manifests/0.1.0",
            registry.host()
        )) && text.contains("TLS handshake failed")
            && text.contains("UnknownIssuer"),
        "{text}"
    );

    // `insecure` without a CA: certificates are not verified (Flux's OCIRepository rule).
    let insecure = OciClient::new(
        &format!("{}/hello", registry.oci_url("charts")),
        RepositoryAuth {
            insecure_skip_verify: true,
            ..RepositoryAuth::default()
        },
        true,
        DEFAULT_TIMEOUT,
        OciLimits::default(),
    )?;
    assert_is_package(&insecure.pull_chart(&reference).await?, &pushed)?;
    Ok(())
}

#[tokio::test]
async fn tampered_manifests_and_layers_are_refused() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    let first = registry.push(&hello_chart(), "charts")?;
    let second = registry.push_version(&hello_chart(), "charts", "0.2.0")?;
    let client = client(&registry, RepositoryAuth::default())?;

    // A layer whose bytes changed on the registry's disk (same size).
    let manifest = client.fetch_manifest(&Reference::Tag(tag(&first))).await?;
    let layer = manifest.helm_chart_layer("hello:0.1.0")?.clone();
    let file = blob_file(&registry, &layer.digest);
    let mut bytes = std::fs::read(&file)?;
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&file, &bytes)?;
    let err = client
        .pull_chart(&Reference::Tag(tag(&first)))
        .await
        .expect_err("a tampered layer");
    assert!(
        matches!(&err, OciError::DigestMismatch { expected, .. } if *expected == layer.digest),
        "{err}"
    );
    assert!(
        err.to_string().contains(&format!(
            "/v2/charts/hello/blobs/{}: digest mismatch",
            layer.digest
        )),
        "{err}"
    );

    // A manifest whose bytes changed: by tag (against the registry's digest) and by digest.
    let file = blob_file(&registry, &second.digest);
    let mut bytes = std::fs::read(&file)?;
    bytes.extend_from_slice(b"\n");
    std::fs::write(&file, &bytes)?;
    for reference in [
        Reference::Tag(tag(&second)),
        Reference::digest(&second.digest)?,
    ] {
        let err = client
            .pull_chart(&reference)
            .await
            .expect_err("a tampered manifest");
        assert_eq!(err.kind(), "DigestMismatch", "{reference}: {err}");
        assert!(
            err.to_string()
                .contains(&format!("digest mismatch: expected {}", second.digest)),
            "{err}"
        );
    }

    // A layer above the size limit is not downloaded.
    let small = OciClient::new(
        &client.url().to_string(),
        RepositoryAuth::default(),
        true,
        DEFAULT_TIMEOUT,
        OciLimits {
            max_chart_size: 100,
            ..OciLimits::default()
        },
    )?;
    let err = small
        .pull_chart(&Reference::Tag(tag(&first)))
        .await
        .expect_err("too large");
    assert_eq!(err.kind(), "TooLarge", "{err}");
    Ok(())
}

/// The requests of `server` after the first `skip`, once there are at least `count` of
/// them (nginx logs a request after answering it).
async fn requests_after(
    server: &HelmRepoServer,
    skip: usize,
    count: usize,
) -> anyhow::Result<Vec<AccessLogEntry>> {
    for _ in 0..50 {
        let requests = server.requests()?;
        if requests.len() >= skip + count {
            return Ok(requests[skip..].to_vec());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(server.requests()?.into_iter().skip(skip).collect())
}

#[tokio::test]
async fn a_bearer_challenge_is_answered_with_a_token_from_its_realm() -> anyhow::Result<()> {
    // The realm: a static token served by nginx; the registry (distribution's `silly`
    // access controller) challenges anonymous requests with it.
    let realm_server = HelmRepoServer::start(RepoOptions::named("oci-token-realm")).await?;
    std::fs::write(
        realm_server.charts_dir().join("token"),
        br#"{"token": "flotilla-test-token"}"#,
    )?;
    let realm = format!("{}/token", realm_server.url());
    let registry = OciRegistry::start(RegistryOptions::default().with_token_auth(&realm)).await?;
    let pushed = registry.push(&hello_chart(), "charts")?;

    let before = realm_server.requests()?.len();
    let with_credentials = client(
        &registry,
        RepositoryAuth {
            basic: Some(("dave".to_owned(), "t0ken-pa55".to_owned())),
            ..RepositoryAuth::default()
        },
    )?;
    assert_is_package(
        &with_credentials
            .pull_chart(&Reference::Tag(tag(&pushed)))
            .await?,
        &pushed,
    )?;
    assert_eq!(with_credentials.list_tags().await?, ["0.1.0"]);
    let requests = requests_after(&realm_server, before, 1).await?;
    // One token for the manifest, the layer and the tags: the scope is the same.
    assert_eq!(requests.len(), 1, "{requests:?}");
    let token = &requests[0];
    assert_eq!((token.method.as_str(), token.status), ("GET", 200));
    assert!(
        token.target.starts_with("/token?")
            && token.target.contains("service=flotilla-test-registry")
            && token
                .target
                .contains("scope=repository%3Acharts%2Fhello%3Apull"),
        "{}",
        token.target
    );
    assert_eq!(token.user, "dave", "the credentials go to the token realm");

    // Anonymous clients get a token too (public registries).
    let anonymous = client(&registry, RepositoryAuth::default())?;
    assert_eq!(anonymous.list_tags().await?, ["0.1.0"]);
    let requests = requests_after(&realm_server, before + 1, 1).await?;
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0].user, "");

    // A realm that refuses: the error names the realm, not the registry.
    std::fs::remove_file(realm_server.charts_dir().join("token"))?;
    let refused = client(&registry, RepositoryAuth::default())?;
    let err = refused.list_tags().await.expect_err("no token");
    assert!(
        err.to_string().starts_with(&format!(
            "failed to fetch {realm}?service=flotilla-test-registry&scope=repository%3Acharts%2Fhello%3Apull: 404 Not Found"
        )),
        "{err}"
    );
    Ok(())
}

/// Applies a CRD and waits until it is Established.
async fn install_crd(client: &kube::Client, crd: CustomResourceDefinition) -> anyhow::Result<()> {
    flotilla_tests::crds::install(client, "flotilla-hub-tests", &[crd]).await
}

#[tokio::test]
async fn an_oci_repository_becomes_ready_with_the_chart_and_keeps_it_when_the_registry_stops()
-> anyhow::Result<()> {
    let mut registry =
        OciRegistry::start(RegistryOptions::default().with_basic_auth("carol", "pa55word")).await?;
    let first = registry.push(&hello_chart(), "charts")?;
    let cluster = Cluster::start(ClusterOptions::named("hub-oci")).await?;
    let kube = cluster.client().await?;
    install_crd(&kube, flotilla_api::crd::crd_of::<OCIRepository>()).await?;
    install_crd(&kube, flotilla_api::crd::crd_of::<HelmRepository>()).await?;

    let config = serde_json::json!({"auths": {registry.host(): {"username": "carol", "password": "pa55word"}}});
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "registry-creds", "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": config.to_string()},
    }))?;
    Api::<Secret>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    let repositories: Api<OCIRepository> = Api::namespaced(kube.clone(), "default");
    let object: OCIRepository = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "OCIRepository",
        "metadata": {"name": "hello", "namespace": "default"},
        "spec": {
            "url": format!("{}/hello", registry.oci_url("charts")),
            "ref": {"semver": ">=0.1.0"},
            "secretRef": {"name": "registry-creds"},
            "insecure": true,
            "interval": "2s",
            "timeout": "5s",
        },
    }))?;
    repositories.create(&PostParams::default(), &object).await?;

    // Wrong credentials, and a URL the API server accepts but that is not a repository.
    let wrong = serde_json::json!({"auths": {registry.host(): {"username": "carol", "password": "wrong-pa55"}}});
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "wrong-creds", "namespace": "default"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": wrong.to_string()},
    }))?;
    Api::<Secret>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    for (name, url, secret) in [
        (
            "wrong-creds",
            format!("{}/hello", registry.oci_url("charts")),
            "wrong-creds",
        ),
        (
            "bad-url",
            format!("oci://{}/Charts/hello", registry.host()),
            "registry-creds",
        ),
    ] {
        let object: OCIRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "url": url,
                "ref": {"tag": "0.1.0"},
                "secretRef": {"name": secret},
                "insecure": true,
                "interval": "1m",
            },
        }))?;
        repositories.create(&PostParams::default(), &object).await?;
    }

    let store_dir = tempfile::tempdir()?;
    let store = Arc::new(store(store_dir.path())?);
    let controller = tokio::spawn(oci_repository::run(
        kube.clone(),
        store.clone(),
        Options {
            namespace: Some("default".to_owned()),
            retry_interval: Duration::from_secs(1),
            ..Options::default()
        },
    ));

    let ready_at = |revision: String| {
        let repositories = repositories.clone();
        async move {
            wait::until(
                &format!("the OCIRepository to be Ready at {revision}"),
                Duration::from_secs(60),
                || async {
                    let object = repositories.get("hello").await?;
                    let Some(status) = object.status else {
                        return Ok(None);
                    };
                    let ready = status.conditions.is_true("Ready");
                    let at = status
                        .artifact
                        .as_ref()
                        .is_some_and(|a| a.revision == revision);
                    Ok((ready && at).then_some(status))
                },
            )
            .await
        }
    };
    let status = ready_at(format!("0.1.0@{}", first.digest)).await?;
    let artifact = status.artifact.clone().expect("an artifact");
    let package_digest = ChartDigest::of_bytes(&std::fs::read(&first.package)?);
    assert_eq!(artifact.digest, package_digest.as_str());
    assert_eq!(
        status.conditions.message_of("Ready"),
        format!("stored artifact for digest '0.1.0@{}'", first.digest)
    );
    assert_eq!(status.conditions.reason_of("Ready"), "Succeeded");
    assert!(status.conditions.is_true("ArtifactInStorage"));
    assert_eq!(status.observed_generation, 1);
    assert_eq!(
        artifact.size,
        Some(std::fs::metadata(&first.package)?.len() as i64)
    );
    assert_eq!(store.get(&package_digest).await?.metadata.version, "0.1.0");
    let (mutated, _) = oci::chart_version_with_digest("0.1.0", &artifact.revision)?;
    assert_eq!(
        mutated,
        format!("0.1.0+{}", &first.digest["sha256:".len()..][..12])
    );

    let url = format!("{}/hello", registry.oci_url("charts"));
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(kube.clone(), "default");
    let note = format!(
        "stored artifact with revision '0.1.0@{}' from '{url}'",
        first.digest
    );
    wait::until("the NewArtifact Event", Duration::from_secs(30), || async {
        let found = events
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .any(|e| {
                e.reason.as_deref() == Some("NewArtifact")
                    && e.type_.as_deref() == Some("Normal")
                    && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("hello")
                    && e.note.as_deref() == Some(note.as_str())
            });
        Ok(found.then_some(()))
    })
    .await?;

    // A new version is picked up at the next interval.
    let second = registry.push_version(&hello_chart(), "charts", "0.2.0")?;
    let status = ready_at(format!("0.2.0@{}", second.digest)).await?;
    let kept = status.artifact.clone().expect("an artifact");

    let not_ready = |name: &'static str| {
        let repositories = repositories.clone();
        async move {
            wait::until(
                &format!("the OCIRepository {name} to be Ready=False"),
                Duration::from_secs(60),
                || async {
                    let status = repositories.get(name).await?.status.unwrap_or_default();
                    let ready = status.conditions.get_condition("Ready");
                    Ok(ready
                        .is_some_and(|c| c.status == ConditionStatus::False)
                        .then_some(status))
                },
            )
            .await
        }
    };
    let status = not_ready("wrong-creds").await?;
    assert_eq!(status.conditions.reason_of("Ready"), "OCIPullFailed");
    assert_eq!(
        status.conditions.message_of("Ready"),
        format!(
            "failed to determine artifact digest: failed to fetch http://{}/v2/charts/hello/manifests/0.1.0: \
             401 Unauthorized: the registry refused the credentials given (UNAUTHORIZED: authentication required)",
            registry.host()
        )
    );
    assert!(status.conditions.is_true("FetchFailed") && status.artifact.is_none());
    assert_eq!(
        status.conditions.reason_of("Reconciling"),
        "ProgressingWithRetry"
    );
    let status = not_ready("bad-url").await?;
    assert_eq!(status.conditions.reason_of("Stalled"), "URLInvalid");
    assert!(status.conditions.is_true("Stalled"));
    assert!(status.conditions.get_condition("Reconciling").is_none());
    assert!(
        status
            .conditions
            .message_of("Ready")
            .contains("invalid repository path component \"Charts\""),
        "{}",
        status.conditions.message_of("Ready")
    );
    assert_eq!(status.observed_generation, 1);

    // A HelmChart of a HelmRepository of type oci, with basic-auth keys in its Secret.
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "basic-creds", "namespace": "default"},
        "stringData": {"username": "carol", "password": "pa55word"},
    }))?;
    Api::<Secret>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    let helm_repository: HelmRepository = serde_json::from_value(serde_json::json!({
        "apiVersion": "source.flotilla.dev/v1",
        "kind": "HelmRepository",
        "metadata": {"name": "charts", "namespace": "default"},
        "spec": {
            "url": registry.oci_url("charts"),
            "type": "oci",
            "secretRef": {"name": "basic-creds"},
            "insecure": true,
            "interval": "5m",
        },
    }))?;
    let helm_repository = Api::<HelmRepository>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), &helm_repository)
        .await?;
    let chart = oci_repository::fetch_helm_repository_chart(
        &kube,
        &store,
        &helm_repository,
        "hello",
        "0.x",
        OciLimits::default(),
    )
    .await?;
    assert_eq!(chart.version, "0.2.0");
    assert_eq!(chart.manifest_digest.as_str(), second.digest);
    assert_eq!(
        chart.digest,
        ChartDigest::of_bytes(&std::fs::read(&second.package)?)
    );
    assert_eq!(
        chart.reference,
        format!("{}/hello:0.2.0", registry.oci_url("charts"))
    );

    // The registry stops: Ready=False says why, and the last artifact is kept and served.
    registry.stop();
    let status = wait::until(
        "the OCIRepository to report the outage",
        Duration::from_secs(60),
        || async {
            let status = repositories.get("hello").await?.status.unwrap_or_default();
            let ready = status.conditions.get_condition("Ready");
            Ok(ready
                .is_some_and(|c| c.status == ConditionStatus::False)
                .then_some(status))
        },
    )
    .await?;
    let message = status.conditions.message_of("Ready");
    assert_eq!(
        status.conditions.reason_of("Ready"),
        "ReadOperationFailed",
        "{message}"
    );
    assert!(
        message.starts_with(&format!(
            "failed to determine the artifact tag for '{}/hello': failed to fetch http://{}/v2/charts/hello/tags/list",
            registry.oci_url("charts"),
            registry.host()
        )) && message.contains("cannot connect")
            && message.ends_with(&format!(
                "; the last artifact '0.2.0@{}' is still served",
                second.digest
            )),
        "{message}"
    );
    assert!(status.conditions.is_true("FetchFailed"));
    assert_eq!(status.artifact.as_ref(), Some(&kept));
    let kept_digest = ChartDigest::new(kept.digest.clone())?;
    assert_eq!(store.get(&kept_digest).await?.metadata.version, "0.2.0");

    controller.abort();
    Ok(())
}

#[tokio::test]
async fn an_oci_repository_on_a_tls_registry_needs_the_ca_of_its_cert_secret() -> anyhow::Result<()>
{
    let mut registry = OciRegistry::start(RegistryOptions::default().with_tls()).await?;
    let pushed = registry.push(&hello_chart(), "charts")?;
    let cluster = Cluster::start(ClusterOptions::named("hub-oci-tls")).await?;
    let kube = cluster.client().await?;
    install_crd(&kube, flotilla_api::crd::crd_of::<OCIRepository>()).await?;

    let secret: Secret = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "registry-ca", "namespace": "default"},
        "stringData": {"ca.crt": registry.ca_pem().expect("TLS")},
    }))?;
    Api::<Secret>::namespaced(kube.clone(), "default")
        .create(&PostParams::default(), &secret)
        .await?;
    let url = format!("{}/hello", registry.oci_url("charts"));
    let repositories: Api<OCIRepository> = Api::namespaced(kube.clone(), "default");
    for (name, cert_secret) in [("trusting", Some("registry-ca")), ("untrusting", None)] {
        let mut spec = serde_json::json!({
            "url": url,
            "ref": {"digest": pushed.digest},
            "interval": "1m",
        });
        if let Some(secret) = cert_secret {
            spec["certSecretRef"] = serde_json::json!({"name": secret});
        }
        let object: OCIRepository = serde_json::from_value(serde_json::json!({
            "apiVersion": "source.flotilla.dev/v1",
            "kind": "OCIRepository",
            "metadata": {"name": name, "namespace": "default"},
            "spec": spec,
        }))?;
        repositories.create(&PostParams::default(), &object).await?;
    }

    let store_dir = tempfile::tempdir()?;
    let store = Arc::new(store(store_dir.path())?);
    let controller = tokio::spawn(oci_repository::run(
        kube.clone(),
        store.clone(),
        Options {
            namespace: Some("default".to_owned()),
            ..Options::default()
        },
    ));
    let settled = |name: &'static str| {
        let repositories = repositories.clone();
        async move {
            wait::until(
                &format!("the OCIRepository {name} to be Ready or not"),
                Duration::from_secs(60),
                || async {
                    let status = repositories.get(name).await?.status.unwrap_or_default();
                    let ready = status.conditions.get_condition("Ready");
                    Ok(ready
                        .is_some_and(|c| c.status != ConditionStatus::Unknown)
                        .then_some(status))
                },
            )
            .await
        }
    };

    let status = settled("trusting").await?;
    assert!(
        status.conditions.is_true("Ready"),
        "{:?}",
        status.conditions
    );
    let artifact = status.artifact.expect("an artifact");
    // Pulled by digest: the revision is the digest alone.
    assert_eq!(artifact.revision, pushed.digest);
    let archive = ChartDigest::of_bytes(&std::fs::read(&pushed.package)?);
    assert_eq!(artifact.digest, archive.as_str());
    assert_eq!(store.get(&archive).await?.metadata.name, "hello");

    let status = settled("untrusting").await?;
    assert_eq!(status.conditions.reason_of("Ready"), "OCIPullFailed");
    assert_eq!(
        status.conditions.message_of("Ready"),
        format!(
            "failed to determine artifact digest: failed to fetch https://{}/v2/charts/hello/manifests/{}: \
             TLS handshake failed: invalid peer certificate: UnknownIssuer",
            registry.host(),
            pushed.digest
        )
    );
    assert!(status.artifact.is_none());

    // Pinned to a digest, the artifact in store is up to date without asking the registry:
    // a new generation is Ready while the registry is down.
    registry.stop();
    repositories
        .patch(
            "trusting",
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"interval": "2m"}})),
        )
        .await?;
    let status = wait::until(
        "the pinned OCIRepository to observe generation 2",
        Duration::from_secs(60),
        || async {
            let status = repositories
                .get("trusting")
                .await?
                .status
                .unwrap_or_default();
            Ok((status.observed_generation == 2).then_some(status))
        },
    )
    .await?;
    assert!(
        status.conditions.is_true("Ready"),
        "{:?}",
        status.conditions
    );
    assert_eq!(
        status.artifact.map(|a| a.revision),
        Some(pushed.digest.clone())
    );
    controller.abort();
    Ok(())
}
