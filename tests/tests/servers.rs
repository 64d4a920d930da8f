//! The harness's chart sources are real servers that the real `helm` uses: Helm repositories
//! served by nginx (plain, basic auth, TLS) and the CNCF distribution registry (OCI, htpasswd
//! and TLS). Each test publishes two versions of `tests/charts/hello` and checks what
//! `helm pull` gets (version and digest), that wrong credentials are refused, and that the
//! access log counts index fetches.

use std::path::{Path, PathBuf};

use flotilla_tests::cluster::workspace_root;
use flotilla_tests::servers::{
    HelmRepoServer, OciRegistry, RegistryOptions, RepoOptions, helm_at, helm_ok, sha256_file,
};

fn hello_chart() -> PathBuf {
    workspace_root().join("tests/charts/hello")
}

/// A fresh helm home (cache, config, data) for one client.
fn client_home() -> anyhow::Result<tempfile::TempDir> {
    Ok(tempfile::Builder::new()
        .prefix("flotilla-helm-client-")
        .tempdir()?)
}

fn strings(args: &[&str], flags: &[String]) -> Vec<String> {
    args.iter()
        .map(|a| (*a).to_owned())
        .chain(flags.iter().cloned())
        .collect()
}

fn as_strs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

/// `helm pull --repo URL hello [--version V]` into `home/out`; the file pulled.
fn pull_from_repo(
    home: &Path,
    repo: &HelmRepoServer,
    version: Option<&str>,
    flags: &[String],
) -> anyhow::Result<PathBuf> {
    let out = home.join("out");
    std::fs::create_dir_all(&out)?;
    let mut args = strings(
        &[
            "pull",
            "hello",
            "--repo",
            &repo.url(),
            "-d",
            &out.display().to_string(),
        ],
        flags,
    );
    if let Some(v) = version {
        args.extend(["--version".to_owned(), v.to_owned()]);
    }
    helm_ok(home, &as_strs(&args))?;
    single_package(&out)
}

/// The one `.tgz` in `dir`, which is then emptied for the next pull.
fn single_package(dir: &Path) -> anyhow::Result<PathBuf> {
    let packages: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(
        packages.len() == 1,
        "expected one package, got {packages:?}"
    );
    let pulled = dir.with_file_name(packages[0].file_name().expect("a package has a file name"));
    std::fs::rename(&packages[0], &pulled)?;
    Ok(pulled)
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .expect("a package has a file name")
        .to_string_lossy()
        .into_owned()
}

/// Publishes hello 0.1.0 and 0.2.0; checks that `helm pull` gets each version byte for byte
/// (the digest the index lists) and the newest by default; returns the index fetches counted.
fn publish_and_pull_both_versions(
    repo: &HelmRepoServer,
    flags: &[String],
) -> anyhow::Result<usize> {
    let first = repo.publish(&hello_chart())?;
    let second = repo.publish_version(&hello_chart(), "0.2.0")?;
    assert_eq!(file_name(&first), "hello-0.1.0.tgz");
    assert_eq!(file_name(&second), "hello-0.2.0.tgz");
    let index = std::fs::read_to_string(repo.charts_dir().join("index.yaml"))?;
    for package in [&first, &second] {
        let digest = sha256_file(package)?;
        assert!(
            index.contains(&format!("digest: {digest}")),
            "the index lists {}'s digest {digest}:\n{index}",
            package.display()
        );
        assert!(
            index.contains(&format!("{}/{}", repo.url(), file_name(package))),
            "the index has absolute URLs:\n{index}"
        );
    }
    assert_eq!(repo.index_fetches()?, 0);

    let home = client_home()?;
    let pulled = pull_from_repo(home.path(), repo, Some("0.1.0"), flags)?;
    assert_eq!(file_name(&pulled), "hello-0.1.0.tgz");
    assert_eq!(sha256_file(&pulled)?, sha256_file(&first)?);
    let latest = pull_from_repo(home.path(), repo, None, flags)?;
    assert_eq!(file_name(&latest), "hello-0.2.0.tgz");
    assert_eq!(sha256_file(&latest)?, sha256_file(&second)?);
    let chart_gets = repo
        .requests()?
        .iter()
        .filter(|r| r.method == "GET" && r.target.ends_with(".tgz") && r.status == 200)
        .count();
    assert_eq!(chart_gets, 2, "{:?}", repo.requests()?);
    repo.index_fetches()
}

#[tokio::test]
async fn a_plain_http_repository_serves_both_versions_and_counts_each_index_fetch()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("plain")).await?;
    assert!(
        repo.url().starts_with("http://127.0.0.1:"),
        "{}",
        repo.url()
    );
    assert!(repo.ca_file().is_none() && repo.credentials().is_none());
    let fetches = publish_and_pull_both_versions(&repo, &repo.helm_flags())?;
    assert_eq!(fetches, 2, "one index fetch per `helm pull --repo`");

    // `helm repo add` fetches the index once more, `helm repo update` again.
    let home = client_home()?;
    helm_ok(home.path(), &["repo", "add", "plain", &repo.url()])?;
    helm_ok(home.path(), &["repo", "update", "plain"])?;
    assert_eq!(repo.index_fetches()?, 4);
    let search = helm_ok(
        home.path(),
        &["search", "repo", "plain/hello", "--versions"],
    )?;
    assert!(
        search.contains("0.1.0") && search.contains("0.2.0"),
        "{search}"
    );
    Ok(())
}

#[tokio::test]
async fn a_repository_with_basic_auth_serves_the_right_credentials_and_refuses_wrong_ones()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("auth").with_basic_auth("alice", "s3cret"))
        .await?;
    let fetches = publish_and_pull_both_versions(&repo, &repo.helm_flags())?;
    assert_eq!(fetches, 2);
    assert!(
        repo.requests()?
            .iter()
            .filter(|r| r.status == 200)
            .all(|r| r.user == "alice"),
        "{:?}",
        repo.requests()?
    );

    let home = client_home()?;
    let wrong = [
        "--username".to_owned(),
        "alice".to_owned(),
        "--password".to_owned(),
        "nope".to_owned(),
    ];
    let error =
        pull_from_repo(home.path(), &repo, None, &wrong).expect_err("a wrong password is refused");
    assert!(format!("{error:#}").contains("401"), "{error:#}");
    let error =
        pull_from_repo(home.path(), &repo, None, &[]).expect_err("no credentials are refused");
    assert!(format!("{error:#}").contains("401"), "{error:#}");
    assert_eq!(repo.index_fetches()?, 2, "refused fetches are not counted");
    let refused = repo
        .requests()?
        .iter()
        .filter(|r| r.target == "/index.yaml" && r.status == 401)
        .count();
    assert_eq!(refused, 2, "{:?}", repo.requests()?);
    Ok(())
}

#[tokio::test]
async fn a_tls_repository_serves_clients_that_trust_its_ca_and_fails_the_others()
-> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("tls").with_tls()).await?;
    assert!(
        repo.url().starts_with("https://127.0.0.1:"),
        "{}",
        repo.url()
    );
    let ca = repo.ca_pem().expect("a TLS server has a CA");
    assert!(ca.starts_with("-----BEGIN CERTIFICATE-----"), "{ca}");
    let fetches = publish_and_pull_both_versions(&repo, &repo.helm_flags())?;
    assert_eq!(fetches, 2);

    let home = client_home()?;
    let error = pull_from_repo(home.path(), &repo, None, &[])
        .expect_err("a client without the CA does not trust the server");
    assert!(format!("{error:#}").contains("certificate"), "{error:#}");
    assert_eq!(repo.index_fetches()?, 2);
    Ok(())
}

#[tokio::test]
async fn helm_repo_add_reaches_a_repository_with_tls_and_basic_auth() -> anyhow::Result<()> {
    let repo = HelmRepoServer::start(
        RepoOptions::named("tls-auth")
            .with_tls()
            .with_basic_auth("bob", "hunter2"),
    )
    .await?;
    let published = repo.publish(&hello_chart())?;
    let home = client_home()?;
    let add = strings(&["repo", "add", "secure", &repo.url()], &repo.helm_flags());
    helm_ok(home.path(), &as_strs(&add))?;
    let out = home.path().join("out");
    std::fs::create_dir_all(&out)?;
    helm_ok(
        home.path(),
        &[
            "pull",
            "secure/hello",
            "--version",
            "0.1.0",
            "-d",
            &out.display().to_string(),
        ],
    )?;
    let pulled = single_package(&out)?;
    assert_eq!(sha256_file(&pulled)?, sha256_file(&published)?);
    assert_eq!(repo.index_fetches()?, 1, "{:?}", repo.requests()?);

    let other = client_home()?;
    let mut wrong = repo.helm_flags();
    let password = wrong
        .iter()
        .position(|f| f == "--password")
        .expect("the flags carry the password")
        + 1;
    wrong[password] = "wrong".to_owned();
    let add = strings(&["repo", "add", "secure", &repo.url()], &wrong);
    let out = helm_at(other.path(), &as_strs(&add), None)?;
    assert!(!out.status.success(), "a wrong password is refused");
    Ok(())
}

/// `helm pull oci://...` of `version` into `home/out` with `flags`; the file pulled and the
/// digest helm reported.
fn pull_oci(
    home: &Path,
    reference: &str,
    version: &str,
    flags: &[String],
) -> anyhow::Result<(PathBuf, String)> {
    let out = home.join("out");
    std::fs::create_dir_all(&out)?;
    let args = strings(
        &[
            "pull",
            reference,
            "--version",
            version,
            "-d",
            &out.display().to_string(),
        ],
        flags,
    );
    let printed = helm_ok(home, &as_strs(&args))?;
    let digest = printed
        .lines()
        .find_map(|l| l.strip_prefix("Digest:").map(|d| d.trim().to_owned()))
        .ok_or_else(|| anyhow::anyhow!("helm pull printed no digest: {printed}"))?;
    Ok((single_package(&out)?, digest))
}

#[tokio::test]
async fn an_oci_registry_with_auth_and_tls_serves_the_pushed_charts_and_refuses_wrong_credentials()
-> anyhow::Result<()> {
    let registry = OciRegistry::start(
        RegistryOptions::default()
            .with_tls()
            .with_basic_auth("carol", "pa55word"),
    )
    .await?;
    assert!(registry.ca_pem().is_some());
    let first = registry.push(&hello_chart(), "charts")?;
    let second = registry.push_version(&hello_chart(), "charts", "0.2.0")?;
    assert_eq!(
        first.reference,
        format!("{}/hello:0.1.0", registry.oci_url("charts"))
    );
    assert_eq!(
        second.reference,
        format!("{}/hello:0.2.0", registry.oci_url("charts"))
    );
    assert!(first.digest.starts_with("sha256:"), "{}", first.digest);
    assert_ne!(first.digest, second.digest);

    let home = client_home()?;
    let chart = format!("{}/hello", registry.oci_url("charts"));
    for pushed in [&first, &second] {
        let version = pushed
            .reference
            .rsplit_once(':')
            .map(|(_, v)| v)
            .expect("a tagged reference");
        let (pulled, digest) = pull_oci(home.path(), &chart, version, &registry.helm_flags())?;
        assert_eq!(digest, pushed.digest);
        assert_eq!(file_name(&pulled), format!("hello-{version}.tgz"));
        assert_eq!(sha256_file(&pulled)?, sha256_file(&pushed.package)?);
    }

    let stranger = client_home()?;
    let ca = registry.ca_file().expect("TLS").display().to_string();
    let wrong = strings(
        &[
            "--ca-file",
            &ca,
            "--username",
            "carol",
            "--password",
            "wrong",
        ],
        &[],
    );
    let error = pull_oci(stranger.path(), &chart, "0.1.0", &wrong)
        .expect_err("a wrong password is refused");
    assert!(
        format!("{error:#}").to_lowercase().contains("unauthorized"),
        "{error:#}"
    );
    let anonymous = strings(&["--ca-file", &ca], &[]);
    pull_oci(stranger.path(), &chart, "0.1.0", &anonymous).expect_err("no credentials are refused");
    let untrusting = strings(&["--username", "carol", "--password", "pa55word"], &[]);
    let error = pull_oci(stranger.path(), &chart, "0.1.0", &untrusting)
        .expect_err("a client without the CA does not trust the registry");
    assert!(format!("{error:#}").contains("certificate"), "{error:#}");
    Ok(())
}

#[tokio::test]
async fn a_plain_oci_registry_serves_helm_over_plain_http() -> anyhow::Result<()> {
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    assert!(registry.ca_file().is_none() && registry.credentials().is_none());
    let pushed = registry.push(&hello_chart(), "charts")?;
    let home = client_home()?;
    let chart = format!("{}/hello", registry.oci_url("charts"));
    let (pulled, digest) = pull_oci(home.path(), &chart, "0.1.0", &registry.helm_flags())?;
    assert_eq!(digest, pushed.digest);
    assert_eq!(sha256_file(&pulled)?, sha256_file(&pushed.package)?);
    Ok(())
}

#[tokio::test]
async fn servers_stop_listening_when_dropped() -> anyhow::Result<()> {
    let repo = HelmRepoServer::start(RepoOptions::named("dropped")).await?;
    let registry = OciRegistry::start(RegistryOptions::default()).await?;
    let addresses = [
        repo.url().trim_start_matches("http://").to_owned(),
        registry.host(),
    ];
    for address in &addresses {
        std::net::TcpStream::connect(address)?;
    }
    drop(repo);
    drop(registry);
    for address in &addresses {
        assert!(
            std::net::TcpStream::connect(address).is_err(),
            "{address} still accepts connections"
        );
    }
    Ok(())
}
