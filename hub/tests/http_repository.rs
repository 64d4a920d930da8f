//! `sources::http` against real Helm repositories: nginx serving charts packaged and indexed
//! by the reference `helm` (`flotilla_tests::servers::HelmRepoServer`), plain, with basic
//! auth, with TLS and with TLS requiring a client certificate; and a listener that never
//! answers, for the timeout. Each test fetches the index, resolves a version with
//! `sources::index`, downloads the archive and checks it byte for byte against the package
//! `helm package` wrote, or checks that a failure is refused with a clear error.

use std::path::{Path, PathBuf};
use std::time::Duration;

use flotilla_core::ids::ChartDigest;
use flotilla_hub::sources::http::{
    DEFAULT_TIMEOUT, FetchError, Limits, RepositoryAuth, RepositoryClient,
};
use flotilla_hub::sources::index::Index;
use flotilla_tests::cluster::workspace_root;
use flotilla_tests::servers::{AccessLogEntry, HelmRepoServer, RepoOptions};

fn hello_chart() -> PathBuf {
    workspace_root().join("tests/charts/hello")
}

/// Publishes hello 0.1.0 and 0.2.0; the two packages.
fn publish_both(repo: &HelmRepoServer) -> anyhow::Result<(PathBuf, PathBuf)> {
    let first = repo.publish(&hello_chart())?;
    let second = repo.publish_version(&hello_chart(), "0.2.0")?;
    Ok((first, second))
}

fn client(url: &str, auth: RepositoryAuth) -> anyhow::Result<RepositoryClient> {
    Ok(RepositoryClient::new(
        url,
        auth,
        DEFAULT_TIMEOUT,
        Limits::default(),
    )?)
}

/// Fetches the index, resolves `hello` at `version` and downloads it with the digest check;
/// the version resolved and the archive.
async fn fetch_hello(
    client: &RepositoryClient,
    version: &str,
) -> anyhow::Result<(String, Vec<u8>)> {
    let index = Index::parse(&client.fetch_index().await?)?;
    let chart = index.resolve("hello", version)?;
    let url = chart.chart_url(&client.repository_url())?;
    let digest = chart.digest().expect("helm repo index writes a digest");
    let archive = client.fetch_chart(&url, Some(&digest)).await?;
    Ok((chart.version().to_owned(), archive))
}

/// The access log once it has `count` lines: nginx writes a line after the response is
/// sent, so the client may be done first.
async fn logged_requests(
    repo: &HelmRepoServer,
    count: usize,
) -> anyhow::Result<Vec<AccessLogEntry>> {
    for _ in 0..50 {
        let requests = repo.requests()?;
        if requests.len() >= count {
            return Ok(requests);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    repo.requests()
}

fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    Ok(std::fs::read(path)?)
}

#[tokio::test]
async fn a_plain_repository_serves_the_index_and_the_resolved_chart_with_its_digest()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-plain")).await?;
    let (first, second) = publish_both(&repo)?;
    let client = client(&repo.url(), RepositoryAuth::default())?;

    let (version, archive) = fetch_hello(&client, "*").await?;
    assert_eq!(version, "0.2.0");
    assert_eq!(archive, read(&second)?);
    logged_requests(&repo, 2).await?;
    assert_eq!(
        repo.index_fetches()?,
        1,
        "one GET /index.yaml per fetch_index"
    );

    let (version, archive) = fetch_hello(&client, "0.1.x").await?;
    assert_eq!(version, "0.1.0");
    assert_eq!(archive, read(&first)?);
    logged_requests(&repo, 4).await?;
    assert_eq!(
        repo.index_fetches()?,
        2,
        "one GET /index.yaml per fetch_index"
    );
    Ok(())
}

#[tokio::test]
async fn basic_auth_with_the_right_credentials_fetches_and_wrong_ones_get_a_clear_401()
-> anyhow::Result<()> {
    let repo =
        HelmRepoServer::start(RepoOptions::named("http-auth").with_basic_auth("bob", "s3cret"))
            .await?;
    let (_, second) = publish_both(&repo)?;

    let good = RepositoryAuth {
        basic: Some(("bob".to_owned(), "s3cret".to_owned())),
        ..RepositoryAuth::default()
    };
    let (version, archive) = fetch_hello(&client(&repo.url(), good)?, "*").await?;
    assert_eq!(version, "0.2.0");
    assert_eq!(archive, read(&second)?);
    let users: Vec<String> = logged_requests(&repo, 2)
        .await?
        .into_iter()
        .map(|r| r.user)
        .collect();
    assert_eq!(
        users,
        ["bob", "bob"],
        "index and chart both carry the credentials"
    );

    let bad = RepositoryAuth {
        basic: Some(("bob".to_owned(), "wrong-password".to_owned())),
        ..RepositoryAuth::default()
    };
    let err = client(&repo.url(), bad)?
        .fetch_index()
        .await
        .expect_err("wrong password");
    assert_eq!(
        err.to_string(),
        format!(
            "failed to fetch {}/index.yaml: 401 Unauthorized",
            repo.url()
        )
    );
    assert_eq!(err.kind(), "Unauthorized");
    assert!(!err.is_transient());
    assert!(!format!("{err:?}").contains("wrong-password"), "{err:?}");

    let err = client(&repo.url(), RepositoryAuth::default())?
        .fetch_index()
        .await
        .expect_err("no credentials");
    assert!(err.to_string().ends_with(": 401 Unauthorized"), "{err}");
    Ok(())
}

#[tokio::test]
async fn credentials_go_to_a_chart_on_another_host_only_with_pass_credentials() -> anyhow::Result<()>
{
    let repo =
        HelmRepoServer::start(RepoOptions::named("http-pass").with_basic_auth("bob", "s3cret"))
            .await?;
    let (_, second) = publish_both(&repo)?;
    // The index's chart URLs name 127.0.0.1; reached as `localhost` the repository is
    // another host for Helm's rule.
    let repository_url = repo.url().replace("127.0.0.1", "localhost");
    let chart_url = format!("{}/hello-0.2.0.tgz", repo.url());
    let digest = ChartDigest::of_bytes(&read(&second)?);
    let mut auth = RepositoryAuth {
        basic: Some(("bob".to_owned(), "s3cret".to_owned())),
        ..RepositoryAuth::default()
    };

    let err = client(&repository_url, auth.clone())?
        .fetch_chart(&chart_url, Some(&digest))
        .await
        .expect_err("no credentials to another host");
    assert_eq!(
        err.to_string(),
        format!("failed to fetch {chart_url}: 401 Unauthorized")
    );

    auth.pass_credentials = true;
    let archive = client(&repository_url, auth)?
        .fetch_chart(&chart_url, Some(&digest))
        .await?;
    assert_eq!(archive, read(&second)?);
    Ok(())
}

#[tokio::test]
async fn tls_with_the_repository_ca_fetches_and_without_it_fails_naming_the_unknown_issuer()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-tls").with_tls()).await?;
    let (_, second) = publish_both(&repo)?;
    assert!(repo.url().starts_with("https://"), "{}", repo.url());

    let with_ca = RepositoryAuth {
        ca_pem: Some(repo.ca_pem().expect("a TLS server has a CA").into_bytes()),
        ..RepositoryAuth::default()
    };
    let (version, archive) = fetch_hello(&client(&repo.url(), with_ca)?, "*").await?;
    assert_eq!(version, "0.2.0");
    assert_eq!(archive, read(&second)?);

    let err = client(&repo.url(), RepositoryAuth::default())?
        .fetch_index()
        .await
        .expect_err("the CA is not trusted");
    assert!(matches!(err, FetchError::Tls { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!(
            "failed to fetch {}/index.yaml: TLS handshake failed: invalid peer certificate: UnknownIssuer",
            repo.url()
        )
    );
    assert_eq!(err.kind(), "TlsError");
    assert!(!err.is_transient());

    let insecure = RepositoryAuth {
        insecure_skip_verify: true,
        ..RepositoryAuth::default()
    };
    let (version, _) = fetch_hello(&client(&repo.url(), insecure)?, "0.1.0").await?;
    assert_eq!(version, "0.1.0");
    Ok(())
}

#[tokio::test]
async fn a_chart_whose_digest_differs_from_the_index_is_refused_naming_both_digests()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-digest")).await?;
    let (_, second) = publish_both(&repo)?;
    let client = client(&repo.url(), RepositoryAuth::default())?;
    let chart_url = format!("{}/hello-0.2.0.tgz", repo.url());
    let expected = ChartDigest::of_bytes(b"another archive");
    let actual = ChartDigest::of_bytes(&read(&second)?);

    let err = client
        .fetch_chart(&chart_url, Some(&expected))
        .await
        .expect_err("digest mismatch");
    assert_eq!(
        err.to_string(),
        format!(
            "chart {chart_url}: digest mismatch: the index lists {expected}, the archive is {actual}"
        )
    );
    assert_eq!(err.kind(), "DigestMismatch");

    let unchecked = client.fetch_chart(&chart_url, None).await?;
    assert_eq!(ChartDigest::of_bytes(&unchecked), actual);
    Ok(())
}

#[tokio::test]
async fn an_index_or_chart_larger_than_its_limit_is_refused() -> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-limits")).await?;
    let (_, second) = publish_both(&repo)?;
    let chart_size = read(&second)?.len() as u64;
    let small = RepositoryClient::new(
        &repo.url(),
        RepositoryAuth::default(),
        Duration::from_secs(10),
        Limits {
            max_index_size: 64,
            max_chart_size: chart_size - 1,
        },
    )?;

    let err = small.fetch_index().await.expect_err("index too large");
    assert_eq!(
        err.to_string(),
        format!(
            "failed to fetch {}/index.yaml: the index is larger than the limit of 64 bytes",
            repo.url()
        )
    );
    assert_eq!(err.kind(), "TooLarge");

    let chart_url = format!("{}/hello-0.2.0.tgz", repo.url());
    let err = small
        .fetch_chart(&chart_url, None)
        .await
        .expect_err("chart too large");
    assert_eq!(
        err.to_string(),
        format!(
            "failed to fetch {chart_url}: the chart is larger than the limit of {} bytes",
            chart_size - 1
        )
    );
    Ok(())
}

#[tokio::test]
async fn a_repository_nobody_listens_on_is_a_transient_connect_error() -> anyhow::Result<()> {
    let mut repo = HelmRepoServer::start(RepoOptions::named("http-gone")).await?;
    let url = repo.url();
    repo.stop();
    let err = client(&url, RepositoryAuth::default())?
        .fetch_index()
        .await
        .expect_err("nothing listens");
    assert_eq!(err.kind(), "ConnectError", "{err}");
    assert!(err.is_transient());
    assert!(
        err.to_string().starts_with(&format!(
            "failed to fetch {url}/index.yaml: cannot connect: "
        )),
        "{err}"
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_accepts_and_never_answers_is_a_transient_timeout_naming_the_limit()
-> anyhow::Result<()> {
    // A real listener that accepts connections and sends nothing back.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", silent.local_addr()?);
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = silent.accept().await {
            held.push(stream);
        }
    });
    let client = RepositoryClient::new(
        &url,
        RepositoryAuth::default(),
        Duration::from_millis(1500),
        Limits::default(),
    )?;
    let started = std::time::Instant::now();
    let err = client.fetch_index().await.expect_err("no answer");
    let waited = started.elapsed();
    holder.abort();
    assert_eq!(
        err.to_string(),
        format!("failed to fetch {url}/index.yaml: timed out after 1.5s")
    );
    assert_eq!(err.kind(), "Timeout");
    assert!(err.is_transient());
    assert!(
        waited >= Duration::from_millis(1500) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
    Ok(())
}

#[tokio::test]
async fn a_repository_requiring_a_client_certificate_serves_only_a_client_presenting_one_of_its_ca()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-mtls").with_client_cert()).await?;
    let (_, second) = publish_both(&repo)?;
    let ca = repo.ca_pem().expect("a TLS server has a CA").into_bytes();
    let (cert, key) = repo.client_cert().expect("a client certificate").pem()?;

    let with_cert = RepositoryAuth {
        ca_pem: Some(ca.clone()),
        client_cert: Some((cert.into_bytes(), key.into_bytes())),
        ..RepositoryAuth::default()
    };
    let (version, archive) = fetch_hello(&client(&repo.url(), with_cert)?, "*").await?;
    assert_eq!(version, "0.2.0");
    assert_eq!(archive, read(&second)?);

    let dir = tempfile::tempdir()?;
    let stranger = flotilla_tests::pki::ClientCert::self_signed(dir.path(), "stranger")?;
    let (cert, key) = stranger.pem()?;
    for (what, client_cert) in [
        ("no certificate", None),
        (
            "a certificate of another CA",
            Some((cert.into_bytes(), key.into_bytes())),
        ),
    ] {
        let auth = RepositoryAuth {
            ca_pem: Some(ca.clone()),
            client_cert,
            ..RepositoryAuth::default()
        };
        let err = client(&repo.url(), auth)?
            .fetch_index()
            .await
            .expect_err(what);
        assert_eq!(
            err.to_string(),
            format!("failed to fetch {}/index.yaml: 400 Bad Request", repo.url()),
            "{what}"
        );
        assert!(!err.is_transient(), "{what}");
    }
    Ok(())
}

/// The chart version `helm pull hello --repo <url> --version <version>` picks from `repo`.
fn helm_pulls(repo: &HelmRepoServer, version: &str) -> anyhow::Result<String> {
    let home = tempfile::tempdir()?;
    let out = home.path().join("out");
    std::fs::create_dir_all(&out)?;
    let mut args = vec![
        "pull".to_owned(),
        "hello".to_owned(),
        "--repo".to_owned(),
        repo.url(),
        "--version".to_owned(),
        version.to_owned(),
        "-d".to_owned(),
        out.display().to_string(),
    ];
    args.extend(repo.helm_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    flotilla_tests::servers::helm_ok(home.path(), &args)?;
    let files: Vec<_> = std::fs::read_dir(&out)?.collect::<Result<_, _>>()?;
    anyhow::ensure!(files.len() == 1, "helm pull wrote {} files", files.len());
    let name = files[0].file_name().to_string_lossy().into_owned();
    Ok(name
        .strip_prefix("hello-")
        .and_then(|n| n.strip_suffix(".tgz"))
        .unwrap_or(&name)
        .to_owned())
}

#[tokio::test]
async fn every_constraint_form_resolves_to_the_version_helm_pull_picks_from_the_same_repository()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("http-constraints")).await?;
    repo.publish(&hello_chart())?;
    for version in ["0.2.0", "0.10.0", "0.3.1", "1.0.0-rc.1", "1.2.3"] {
        repo.publish_version(&hello_chart(), version)?;
    }
    let client = client(&repo.url(), RepositoryAuth::default())?;
    let index = Index::parse(&client.fetch_index().await?)?;
    for constraint in [
        "*",
        "0.2.0",
        "0.1.*",
        "0.x",
        "~0.3",
        "~0.3.0",
        "^0.1",
        "^1.2",
        ">=0.1.0 <0.3.0",
        ">=0.2.0, <0.10.0",
        "<0.2.0 || >=0.10.0 <1.0.0",
        ">=1.0.0-0",
        "1.0.0-rc.1",
        "0.2.0 - 0.3.5",
        "v0.10.0",
    ] {
        let helm = helm_pulls(&repo, constraint)?;
        let ours = index.resolve("hello", constraint)?.version().to_owned();
        assert_eq!(ours, helm, "version {constraint:?}");
        // And the archive is the one helm pulled.
        let (version, archive) = fetch_hello(&client, constraint).await?;
        assert_eq!(version, helm);
        assert_eq!(
            archive,
            read(&repo.charts_dir().join(format!("hello-{helm}.tgz")))?
        );
    }
    Ok(())
}
