//! Real servers of chart sources for tests, on loopback: Helm repositories over HTTP(S) and OCI
//! registries. No hand-written stand-in: charts are packaged by the reference `helm package`,
//! indexed by `helm repo index` and served by nginx ([`HelmRepoServer`]), or pushed by
//! `helm push` to the CNCF distribution registry ([`OciRegistry`]).
//!
//! Each server runs in the foreground as a [`Supervised`] process with a generated
//! configuration, its logs and data in its own temporary directory, and stops when dropped.
//! nginx comes from the distribution's packages (`tools/install-test-servers`), the registry is
//! built from its pinned Go module (`tools/build-registry`); `cargo xtask deps` installs both.
//! Basic auth uses bcrypt htpasswd entries; TLS uses a fresh CA per server ([`ServerTls`]).

use std::fmt::Write as _;
use std::io::Read as _;
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};

use crate::cluster::free_port;
use crate::pki::{ClientCert, ServerTls};
use crate::process::{Supervised, tail};
use crate::tools::helm;
use crate::tools::script_output;

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(30);
/// bcrypt cost of the htpasswd entries: the minimum-ish, since servers check it per request.
const HTPASSWD_COST: u32 = 5;

/// Basic-auth credentials of a test server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl Credentials {
    pub fn new(username: &str, password: &str) -> Credentials {
        Credentials {
            username: username.to_owned(),
            password: password.to_owned(),
        }
    }
}

/// How to run a [`HelmRepoServer`].
#[derive(Debug, Clone)]
pub struct RepoOptions {
    /// Names the temporary directory and appears in errors.
    pub name: String,
    /// Require these credentials (nginx `auth_basic`).
    pub basic_auth: Option<Credentials>,
    /// Serve HTTPS with a certificate of a fresh CA ([`HelmRepoServer::ca_file`]).
    pub tls: bool,
    /// With `tls`: require a client certificate of that CA (nginx `ssl_verify_client on`;
    /// [`HelmRepoServer::client_cert`] is one). Requests without one, or with another, are
    /// answered `400 Bad Request`.
    pub client_cert: bool,
    /// Keep nginx running after this program exits ([`HelmRepoServer::detach`]).
    pub detached: bool,
    /// Where the server's directory goes (default: the temp dir).
    pub parent_dir: Option<PathBuf>,
}

impl RepoOptions {
    /// Plain HTTP, no auth.
    pub fn named(name: &str) -> RepoOptions {
        RepoOptions {
            name: name.to_owned(),
            basic_auth: None,
            tls: false,
            client_cert: false,
            detached: false,
            parent_dir: None,
        }
    }

    pub fn with_basic_auth(mut self, username: &str, password: &str) -> RepoOptions {
        self.basic_auth = Some(Credentials::new(username, password));
        self
    }

    pub fn with_tls(mut self) -> RepoOptions {
        self.tls = true;
        self
    }

    /// HTTPS that requires a client certificate of the server's CA.
    pub fn with_client_cert(mut self) -> RepoOptions {
        self.tls = true;
        self.client_cert = true;
        self
    }
}

/// A Helm chart repository served by nginx on loopback.
#[derive(Debug)]
pub struct HelmRepoServer {
    name: String,
    dir: tempfile::TempDir,
    port: u16,
    tls: Option<ServerTls>,
    credentials: Option<Credentials>,
    process: Supervised,
}

/// One request of a [`HelmRepoServer`]'s access log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessLogEntry {
    pub method: String,
    /// The request target as sent (path and query).
    pub target: String,
    pub status: u16,
    /// The basic-auth user name given, empty when none.
    pub user: String,
}

impl HelmRepoServer {
    /// Starts nginx serving an empty repository and waits until it accepts connections.
    pub async fn start(options: RepoOptions) -> anyhow::Result<HelmRepoServer> {
        let nginx = nginx_binary()?;
        let prefix = format!("flotilla-repo-{}-", options.name);
        let mut builder = tempfile::Builder::new();
        builder.prefix(&prefix);
        let dir = match &options.parent_dir {
            Some(parent) => builder.tempdir_in(parent)?,
            None => builder.tempdir()?,
        };
        let root = dir.path();
        for sub in ["charts", "logs", "tmp", "helm"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        let tls = if options.tls {
            Some(ServerTls::write(&root.join("pki"), &options.name)?)
        } else {
            None
        };
        if let Some(credentials) = &options.basic_auth {
            write_htpasswd(&root.join("htpasswd"), credentials)?;
        }
        let port = free_port()?;
        let config = nginx_config(
            root,
            port,
            tls.as_ref(),
            options.basic_auth.is_some(),
            options.client_cert,
        );
        let config_path = root.join("nginx.conf");
        std::fs::write(&config_path, config)
            .with_context(|| format!("writing {}", config_path.display()))?;
        let args = vec![
            "-p".to_owned(),
            path_string(root)?,
            "-c".to_owned(),
            path_string(&config_path)?,
            "-e".to_owned(),
            path_string(&root.join("logs/error.log"))?,
        ];
        let log = root.join("logs/nginx.log");
        let process = Supervised::start("nginx", &nginx, &args, &log, options.detached)?;
        let mut server = HelmRepoServer {
            name: options.name.clone(),
            port,
            tls,
            credentials: options.basic_auth,
            process,
            dir,
        };
        let error_log = server.dir.path().join("logs/error.log");
        wait_until_listening(&mut server.process, port, &error_log)
            .await
            .with_context(|| {
                format!(
                    "starting nginx for the Helm repository {:?} (config and logs in {})",
                    options.name,
                    server.dir.path().display()
                )
            })?;
        Ok(server)
    }

    /// The repository URL: `http://127.0.0.1:PORT` or `https://...` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.port)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// The directory served: packaged charts and `index.yaml`.
    pub fn charts_dir(&self) -> PathBuf {
        self.dir.path().join("charts")
    }

    /// The CA certificate file the server's certificate chains to (TLS only).
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// The CA certificate, PEM (TLS only).
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_file().and_then(|p| std::fs::read_to_string(p).ok())
    }

    /// The credentials the server requires (basic auth only).
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    /// A client certificate of the server's CA (TLS only; the server requires one with
    /// [`RepoOptions::with_client_cert`]).
    pub fn client_cert(&self) -> Option<&ClientCert> {
        self.tls.as_ref().map(|t| &t.client)
    }

    /// The `helm` flags that reach this repository: `--ca-file`, `--username`, `--password`.
    pub fn helm_flags(&self) -> Vec<String> {
        client_flags(self.ca_file(), self.credentials.as_ref())
    }

    /// The access log: one line per request, tab-separated (see [`HelmRepoServer::requests`]).
    pub fn access_log_path(&self) -> PathBuf {
        self.dir.path().join("logs/access.log")
    }

    /// The requests served so far, oldest first.
    pub fn requests(&self) -> anyhow::Result<Vec<AccessLogEntry>> {
        let path = self.access_log_path();
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        text.lines()
            .map(|line| {
                parse_access_line(line)
                    .with_context(|| format!("{}: unexpected line {line:?}", path.display()))
            })
            .collect()
    }

    /// How many times `index.yaml` was served (`GET /index.yaml` answered 200).
    pub fn index_fetches(&self) -> anyhow::Result<usize> {
        Ok(self
            .requests()?
            .iter()
            .filter(|r| r.method == "GET" && r.target == "/index.yaml" && r.status == 200)
            .count())
    }

    /// Packages `chart_dir` at its own version into the served directory and re-indexes the
    /// repository; the package's path.
    pub fn publish(&self, chart_dir: &Path) -> anyhow::Result<PathBuf> {
        self.publish_package(chart_dir, None)
    }

    /// [`HelmRepoServer::publish`] with the chart's version set to `version`.
    pub fn publish_version(&self, chart_dir: &Path, version: &str) -> anyhow::Result<PathBuf> {
        self.publish_package(chart_dir, Some(version))
    }

    fn publish_package(&self, chart_dir: &Path, version: Option<&str>) -> anyhow::Result<PathBuf> {
        let home = self.dir.path().join("helm");
        let charts = self.charts_dir();
        let package = helm_package(&home, chart_dir, &charts, version)?;
        // `--url` makes the entries' URLs absolute, as repositories behind a CDN publish them.
        helm_ok(
            &home,
            &[
                "repo",
                "index",
                &path_string(&charts)?,
                "--url",
                &self.url(),
            ],
        )
        .with_context(|| format!("indexing the Helm repository {:?}", self.name))?;
        Ok(package)
    }

    /// Stops nginx now (it is also stopped when dropped).
    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(3));
    }

    /// Leaves nginx running and its directory in place (`cargo xtask up`); returns the
    /// directory and nginx's pid. Start it with [`RepoOptions::detached`] so it outlives
    /// this program.
    pub fn detach(&mut self) -> (PathBuf, Option<u32>) {
        self.dir.disable_cleanup(true);
        (self.dir.path().to_owned(), self.process.disown())
    }
}

/// How to run an [`OciRegistry`].
#[derive(Debug, Clone, Default)]
pub struct RegistryOptions {
    /// Require these credentials (htpasswd).
    pub basic_auth: Option<Credentials>,
    /// Serve HTTPS with a certificate of a fresh CA ([`OciRegistry::ca_file`]).
    pub tls: bool,
    /// Answer anonymous requests with a `Bearer` challenge naming this token realm and
    /// accept any `Authorization` header (distribution's `silly` access controller): tests
    /// the registry token flow with any static file server as the realm.
    pub token_realm: Option<String>,
    /// Keep the registry running after this program exits ([`OciRegistry::detach`]).
    pub detached: bool,
    /// Where the registry's directory goes (default: the temp dir).
    pub parent_dir: Option<PathBuf>,
}

impl RegistryOptions {
    pub fn with_token_auth(mut self, realm: &str) -> RegistryOptions {
        self.token_realm = Some(realm.to_owned());
        self
    }

    pub fn with_basic_auth(mut self, username: &str, password: &str) -> RegistryOptions {
        self.basic_auth = Some(Credentials::new(username, password));
        self
    }

    pub fn with_tls(mut self) -> RegistryOptions {
        self.tls = true;
        self
    }
}

/// The CNCF distribution registry on loopback, storing in its temporary directory.
#[derive(Debug)]
pub struct OciRegistry {
    dir: tempfile::TempDir,
    port: u16,
    tls: Option<ServerTls>,
    credentials: Option<Credentials>,
    process: Supervised,
}

/// A chart pushed by [`OciRegistry::push`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PushedChart {
    /// `oci://127.0.0.1:PORT/REPO/NAME:VERSION`.
    pub reference: String,
    /// The manifest digest `helm push` reported: `sha256:...`.
    pub digest: String,
    /// The package pushed.
    pub package: PathBuf,
}

impl OciRegistry {
    /// Starts the registry, waits until it accepts connections and, with auth, checks that
    /// `helm registry login` succeeds.
    pub async fn start(options: RegistryOptions) -> anyhow::Result<OciRegistry> {
        let bin = registry_binary()?;
        let mut builder = tempfile::Builder::new();
        builder.prefix("flotilla-registry-");
        let dir = match &options.parent_dir {
            Some(parent) => builder.tempdir_in(parent)?,
            None => builder.tempdir()?,
        };
        let root = dir.path();
        for sub in ["storage", "logs", "helm", "packages"] {
            std::fs::create_dir_all(root.join(sub))?;
        }
        let tls = if options.tls {
            Some(ServerTls::write(&root.join("pki"), "flotilla-registry")?)
        } else {
            None
        };
        if let Some(credentials) = &options.basic_auth {
            write_htpasswd(&root.join("htpasswd"), credentials)?;
        }
        let port = free_port()?;
        let config_path = root.join("config.yml");
        std::fs::write(
            &config_path,
            registry_config(
                root,
                port,
                tls.as_ref(),
                options.basic_auth.is_some(),
                options.token_realm.as_deref(),
            ),
        )
        .with_context(|| format!("writing {}", config_path.display()))?;
        let log = root.join("logs/registry.log");
        let process = Supervised::start_with_env(
            "registry",
            &bin,
            &["serve".to_owned(), path_string(&config_path)?],
            // No OpenTelemetry exporter: there is no collector to send spans to.
            &[("OTEL_TRACES_EXPORTER", "none")],
            &log,
            options.detached,
        )?;
        let mut registry = OciRegistry {
            dir,
            port,
            tls,
            credentials: options.basic_auth,
            process,
        };
        let context = || {
            format!(
                "starting the OCI registry (config and logs in {})",
                registry.dir.path().display()
            )
        };
        wait_until_listening(&mut registry.process, port, &log)
            .await
            .with_context(context)?;
        if let Some(credentials) = &registry.credentials {
            let mut args = vec!["registry".to_owned(), "login".to_owned(), registry.host()];
            args.extend(registry.helm_flags_without_credentials());
            args.extend([
                "--username".to_owned(),
                credentials.username.clone(),
                "--password-stdin".to_owned(),
            ]);
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let home = registry.dir.path().join("helm");
            let out = helm_at(&home, &args, Some(&credentials.password))?;
            if !out.status.success() {
                return Err(anyhow::anyhow!("helm {}: {}", redact(&args), text(&out)))
                    .with_context(context);
            }
        }
        Ok(registry)
    }

    /// `127.0.0.1:PORT`, the registry host of `oci://` references.
    pub fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// `oci://127.0.0.1:PORT/REPO`, the reference prefix of the charts pushed to `repo`.
    pub fn oci_url(&self, repo: &str) -> String {
        format!("oci://{}/{repo}", self.host())
    }

    /// The CA certificate file the server's certificate chains to (TLS only).
    pub fn ca_file(&self) -> Option<&Path> {
        self.tls.as_ref().map(|t| t.ca_cert.as_path())
    }

    /// The CA certificate, PEM (TLS only).
    pub fn ca_pem(&self) -> Option<String> {
        self.ca_file().and_then(|p| std::fs::read_to_string(p).ok())
    }

    /// The registry's storage root (its filesystem driver's `rootdirectory`): a blob is at
    /// `docker/registry/v2/blobs/sha256/<first 2 hex>/<hex>/data`. Tests tamper with it to
    /// check that clients verify what they are served.
    pub fn storage_dir(&self) -> PathBuf {
        self.dir.path().join("storage")
    }

    /// The credentials the registry requires (basic auth only).
    pub fn credentials(&self) -> Option<&Credentials> {
        self.credentials.as_ref()
    }

    /// The `helm pull`/`helm push` flags that reach this registry: `--ca-file` or
    /// `--plain-http`, `--username`, `--password`.
    pub fn helm_flags(&self) -> Vec<String> {
        let mut flags = self.helm_flags_without_credentials();
        flags.extend(client_flags(None, self.credentials.as_ref()));
        flags
    }

    fn helm_flags_without_credentials(&self) -> Vec<String> {
        match self.ca_file() {
            Some(_) => client_flags(self.ca_file(), None),
            None => vec!["--plain-http".to_owned()],
        }
    }

    /// Packages `chart_dir` at its own version and pushes it to `oci://HOST/repo`.
    pub fn push(&self, chart_dir: &Path, repo: &str) -> anyhow::Result<PushedChart> {
        self.push_package(chart_dir, repo, None)
    }

    /// [`OciRegistry::push`] with the chart's version set to `version`.
    pub fn push_version(
        &self,
        chart_dir: &Path,
        repo: &str,
        version: &str,
    ) -> anyhow::Result<PushedChart> {
        self.push_package(chart_dir, repo, Some(version))
    }

    fn push_package(
        &self,
        chart_dir: &Path,
        repo: &str,
        version: Option<&str>,
    ) -> anyhow::Result<PushedChart> {
        let home = self.dir.path().join("helm");
        let package = helm_package(&home, chart_dir, &self.dir.path().join("packages"), version)?;
        let mut args = vec![
            "push".to_owned(),
            path_string(&package)?,
            self.oci_url(repo),
        ];
        // The credentials are those `helm registry login` stored in this registry's helm home.
        args.extend(self.helm_flags_without_credentials());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let printed = helm_ok(&home, &args)?;
        let field = |name: &str| {
            printed
                .lines()
                .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_owned()))
                .with_context(|| format!("helm push printed no {name:?}: {printed}"))
        };
        Ok(PushedChart {
            reference: format!("oci://{}", field("Pushed:")?),
            digest: field("Digest:")?,
            package,
        })
    }

    /// Stops the registry now (it is also stopped when dropped).
    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(3));
    }

    /// Leaves the registry running and its directory in place (`cargo xtask up`); returns
    /// the directory and the registry's pid. Start it with [`RegistryOptions::detached`].
    pub fn detach(&mut self) -> (PathBuf, Option<u32>) {
        self.dir.disable_cleanup(true);
        (self.dir.path().to_owned(), self.process.disown())
    }
}

/// The nginx binary: `$FLOTILLA_NGINX`, or what `tools/install-test-servers` prints (it
/// installs nginx on first use).
pub fn nginx_binary() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    script_output(&BIN, "FLOTILLA_NGINX", "tools/install-test-servers")
}

/// The distribution registry binary: `$FLOTILLA_REGISTRY`, or what `tools/build-registry`
/// prints (it builds the registry on first use).
pub fn registry_binary() -> anyhow::Result<PathBuf> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    script_output(&BIN, "FLOTILLA_REGISTRY", "tools/build-registry")
}

/// Runs the reference helm with its cache, config and data homes under `home`, so runs with
/// different homes never share repositories, logins or caches; `stdin` is written to its input.
pub fn helm_at(home: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
    let bin = helm()?;
    let mut child = Command::new(&bin)
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {}", bin.display()))?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        use std::io::Write as _;
        pipe.write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    Ok(child.wait_with_output()?)
}

/// [`helm_at`] without input; all it printed (stdout then stderr), or an error naming the
/// command (passwords masked) with all it printed when it fails.
pub fn helm_ok(home: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = helm_at(home, args, None)?;
    anyhow::ensure!(
        out.status.success(),
        "helm {}: {}",
        redact(args),
        text(&out)
    );
    Ok(text(&out))
}

/// The arguments, space-separated, with the value of every `--password` masked.
fn redact(args: &[&str]) -> String {
    let mut shown = Vec::with_capacity(args.len());
    let mut mask_next = false;
    for arg in args {
        if mask_next {
            shown.push("***");
            mask_next = false;
        } else if *arg == "--password" || *arg == "-p" {
            shown.push(arg);
            mask_next = true;
        } else if arg.starts_with("--password=") {
            shown.push("--password=***");
        } else {
            shown.push(arg);
        }
    }
    shown.join(" ")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The hex SHA-256 of a file, as Helm repository indexes and OCI digests write it.
pub fn sha256_file(path: &Path) -> anyhow::Result<String> {
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file
            .read(&mut buf)
            .with_context(|| format!("reading {}", path.display()))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    let mut hex = String::with_capacity(64);
    for byte in hasher.finalize() {
        let _ = write!(hex, "{byte:02x}");
    }
    Ok(hex)
}

fn helm_package(
    home: &Path,
    chart_dir: &Path,
    destination: &Path,
    version: Option<&str>,
) -> anyhow::Result<PathBuf> {
    let mut args = vec![
        "package".to_owned(),
        path_string(chart_dir)?,
        "--destination".to_owned(),
        path_string(destination)?,
    ];
    if let Some(version) = version {
        args.extend(["--version".to_owned(), version.to_owned()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let printed = helm_ok(home, &args)?;
    // "Successfully packaged chart and saved it to: /path/name-version.tgz"
    let package = printed
        .lines()
        .find_map(|l| l.split_once("saved it to:").map(|(_, p)| p.trim()))
        .with_context(|| format!("helm package printed no package path: {printed}"))?;
    Ok(PathBuf::from(package))
}

fn client_flags(ca_file: Option<&Path>, credentials: Option<&Credentials>) -> Vec<String> {
    let mut flags = Vec::new();
    if let Some(ca) = ca_file {
        flags.extend(["--ca-file".to_owned(), ca.display().to_string()]);
    }
    if let Some(c) = credentials {
        flags.extend([
            "--username".to_owned(),
            c.username.clone(),
            "--password".to_owned(),
            c.password.clone(),
        ]);
    }
    flags
}

fn write_htpasswd(path: &Path, credentials: &Credentials) -> anyhow::Result<()> {
    let hash = bcrypt::hash(&credentials.password, HTPASSWD_COST)
        .context("hashing the test server's password")?;
    std::fs::write(path, format!("{}:{hash}\n", credentials.username))
        .with_context(|| format!("writing {}", path.display()))
}

/// nginx in one foreground process (so the parent-death signal reaches all of it), every path
/// inside `root`, the access log one tab-separated line per request.
fn nginx_config(
    root: &Path,
    port: u16,
    tls: Option<&ServerTls>,
    basic_auth: bool,
    client_cert: bool,
) -> String {
    let r = root.display();
    let mut server = String::new();
    let ssl = if tls.is_some() { " ssl" } else { "" };
    let _ = writeln!(server, "        listen 127.0.0.1:{port}{ssl};");
    let _ = writeln!(server, "        server_name localhost;");
    let _ = writeln!(server, "        root {r}/charts;");
    if let Some(tls) = tls {
        let _ = writeln!(server, "        ssl_certificate {};", tls.cert.display());
        let _ = writeln!(server, "        ssl_certificate_key {};", tls.key.display());
        if client_cert {
            let _ = writeln!(
                server,
                "        ssl_client_certificate {};",
                tls.ca_cert.display()
            );
            let _ = writeln!(server, "        ssl_verify_client on;");
        }
    }
    if basic_auth {
        let _ = writeln!(server, "        auth_basic \"flotilla test repository\";");
        let _ = writeln!(server, "        auth_basic_user_file {r}/htpasswd;");
    }
    format!(
        "daemon off;
master_process off;
worker_processes 1;
pid {r}/nginx.pid;
error_log {r}/logs/error.log info;
events {{
    worker_connections 256;
}}
http {{
    types {{
        application/x-yaml yaml yml;
        application/gzip tgz;
        text/plain prov;
    }}
    default_type application/octet-stream;
    log_format flotilla '$request_method\\t$request_uri\\t$status\\t$remote_user';
    access_log {r}/logs/access.log flotilla;
    client_body_temp_path {r}/tmp/body;
    proxy_temp_path {r}/tmp/proxy;
    fastcgi_temp_path {r}/tmp/fastcgi;
    uwsgi_temp_path {r}/tmp/uwsgi;
    scgi_temp_path {r}/tmp/scgi;
    sendfile on;
    keepalive_timeout 30;
    server {{
{server}    }}
}}
"
    )
}

fn parse_access_line(line: &str) -> Option<AccessLogEntry> {
    let mut fields = line.split('\t');
    let method = fields.next()?.to_owned();
    let target = fields.next()?.to_owned();
    let status = fields.next()?.parse().ok()?;
    let user = fields.next().unwrap_or_default();
    Some(AccessLogEntry {
        method,
        target,
        status,
        user: if user == "-" {
            String::new()
        } else {
            user.to_owned()
        },
    })
}

fn registry_config(
    root: &Path,
    port: u16,
    tls: Option<&ServerTls>,
    basic_auth: bool,
    token_realm: Option<&str>,
) -> String {
    let r = root.display();
    let mut config = format!(
        "version: 0.1
log:
  level: info
  formatter: text
storage:
  filesystem:
    rootdirectory: {r}/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
  secret: flotilla-test-{port}
"
    );
    if let Some(tls) = tls {
        let _ = write!(
            config,
            "  tls:\n    certificate: {}\n    key: {}\n",
            tls.cert.display(),
            tls.key.display()
        );
    }
    if basic_auth {
        let _ = write!(
            config,
            "auth:\n  htpasswd:\n    realm: flotilla-test-registry\n    path: {r}/htpasswd\n"
        );
    }
    if let Some(realm) = token_realm {
        let _ = write!(
            config,
            "auth:\n  silly:\n    realm: {realm}\n    service: flotilla-test-registry\n"
        );
    }
    config
}

/// Waits until `port` accepts connections, failing fast with the end of `log` when the
/// process exits first.
async fn wait_until_listening(
    process: &mut Supervised,
    port: u16,
    log: &Path,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + START_TIMEOUT;
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    loop {
        process.check_running().map_err(|e| {
            anyhow::anyhow!("{e:#}\nthe end of {}:\n{}", log.display(), tail(log, 20))
        })?;
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not listen on {addr} within {START_TIMEOUT:?}; the end of {}:\n{}",
                process.name(),
                log.display(),
                tail(log, 20)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn path_string(path: &Path) -> anyhow::Result<String> {
    path.to_str()
        .map(str::to_owned)
        .with_context(|| format!("{} is not valid UTF-8", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn access_log_lines_are_read_with_their_method_target_status_and_user() {
        assert_eq!(
            parse_access_line("GET\t/index.yaml\t200\talice"),
            Some(AccessLogEntry {
                method: "GET".into(),
                target: "/index.yaml".into(),
                status: 200,
                user: "alice".into(),
            })
        );
        let anonymous = parse_access_line("HEAD\t/hello-0.1.0.tgz?x=1\t401\t-").expect("parses");
        assert_eq!(anonymous.user, "");
        assert_eq!(anonymous.status, 401);
        assert_eq!(parse_access_line("GET /index.yaml"), None);
    }

    #[test]
    fn passwords_are_masked_in_the_commands_errors_show() {
        assert_eq!(
            redact(&[
                "pull",
                "--username",
                "u",
                "--password",
                "secret",
                "--password=s2"
            ]),
            "pull --username u --password *** --password=***"
        );
    }

    #[test]
    fn htpasswd_entries_are_bcrypt_hashes_that_verify() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("htpasswd");
        write_htpasswd(&path, &Credentials::new("alice", "wonderland")).expect("written");
        let text = std::fs::read_to_string(&path).expect("readable");
        let (user, hash) = text.trim().split_once(':').expect("user:hash");
        assert_eq!(user, "alice");
        assert!(hash.starts_with("$2"), "{hash}");
        assert!(bcrypt::verify("wonderland", hash).expect("a valid hash"));
    }
}
