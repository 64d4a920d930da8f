//! The reference `helm` and `kubectl` binaries, for differential and compatibility tests only
//! (the product never calls them). Installed by `tools/install-reference-tools`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use crate::cluster::workspace_root;

/// The directory holding `helm` and `kubectl`: `$FLOTILLA_REFERENCE_TOOLS`, or what
/// `tools/install-reference-tools` prints (it installs them on first use).
pub fn reference_tools_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    script_output(
        &DIR,
        "FLOTILLA_REFERENCE_TOOLS",
        "tools/install-reference-tools",
    )
}

/// A path a project script prints on stdout (it installs or builds what is missing and caches
/// it), or `$env` when set; run once per process, its result kept in `cell`.
pub(crate) fn script_output(
    cell: &'static OnceLock<Result<PathBuf, String>>,
    env: &str,
    script: &str,
) -> anyhow::Result<PathBuf> {
    cell.get_or_init(|| {
        if let Some(path) = std::env::var_os(env) {
            return Ok(PathBuf::from(path));
        }
        let script = workspace_root().join(script);
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!("{} failed ({})", script.display(), out.status));
        }
        Ok(PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// The reference helm v4 binary.
pub fn helm() -> anyhow::Result<PathBuf> {
    Ok(reference_tools_dir()?.join("helm"))
}

/// The reference kubectl binary.
pub fn kubectl() -> anyhow::Result<PathBuf> {
    Ok(reference_tools_dir()?.join("kubectl"))
}

/// Runs a reference tool (`helm()` or `kubectl()`) against the cluster of `kubeconfig`,
/// with helm's cache, config and data homes beside that file so runs never share them;
/// `stdin` is written to its standard input when given.
pub fn run(
    bin: &Path,
    args: &[&str],
    kubeconfig: &Path,
    stdin: Option<&str>,
) -> anyhow::Result<Output> {
    let mut child = Command::new(bin)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("HELM_CACHE_HOME", kubeconfig.with_file_name("helm-cache"))
        .env("HELM_CONFIG_HOME", kubeconfig.with_file_name("helm-config"))
        .env("HELM_DATA_HOME", kubeconfig.with_file_name("helm-data"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| anyhow::anyhow!("running {}: {e}", bin.display()))?;
    if let Some(input) = stdin
        && let Some(mut pipe) = child.stdin.take()
    {
        pipe.write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    output_within(child, TOOL_TIMEOUT)
        .map_err(|e| anyhow::anyhow!("{name} {}: {e}", args.join(" ")))
}

/// How long a reference tool may run before it is killed: far above any test's own
/// `--timeout`, so that a tool that hangs fails its test instead of holding the suite.
pub const TOOL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(600);

/// The output of `child` (its stdout and stderr read to the end), or an error once it has
/// run for `limit`, after which it is killed.
pub fn output_within(
    mut child: std::process::Child,
    limit: std::time::Duration,
) -> anyhow::Result<Output> {
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut buf);
            }
            buf
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = std::time::Instant::now() + limit;
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if std::time::Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            anyhow::bail!("still running after {limit:?}, killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    Ok(Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    })
}

/// A tool's stdout and stderr, one after the other.
pub fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// [`run`], then its stdout; an error naming the command with all it printed when it fails.
pub fn run_ok(
    bin: &Path,
    args: &[&str],
    kubeconfig: &Path,
    stdin: Option<&str>,
) -> anyhow::Result<String> {
    let out = run(bin, args, kubeconfig, stdin)?;
    let name = bin.file_name().unwrap_or_default().to_string_lossy();
    anyhow::ensure!(
        out.status.success(),
        "{name} {}: {}",
        args.join(" "),
        text(&out)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The reference helm against the cluster of `kubeconfig`; its stdout.
pub fn helm_in(kubeconfig: &Path, args: &[&str]) -> anyhow::Result<String> {
    run_ok(&helm()?, args, kubeconfig, None)
}

/// The reference kubectl against the cluster of `kubeconfig`; its stdout.
pub fn kubectl_in(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    run_ok(&kubectl()?, args, kubeconfig, stdin)
}

/// `kubectl wait --for=condition=Established --timeout=T <targets>` (CRD names, `-f DIR` or
/// `crd --all`) for CRDs just applied. kubectl's wait fails at once ("`.status.conditions
/// accessor error: <nil>`") on a CRD whose status the API server has not written yet; that
/// answer is asked again until `timeout`.
pub fn wait_established(
    kubeconfig: &Path,
    targets: &[&str],
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let timeout_arg = format!("--timeout={}s", left.as_secs().max(1));
        let mut args = vec!["wait", "--for=condition=Established", timeout_arg.as_str()];
        args.extend_from_slice(targets);
        let out = run(&kubectl()?, &args, kubeconfig, None)?;
        if out.status.success() {
            return Ok(());
        }
        let printed = text(&out);
        let not_yet = printed.contains(".status.conditions accessor error");
        anyhow::ensure!(
            not_yet && std::time::Instant::now() < deadline,
            "kubectl {}: {printed}",
            args.join(" ")
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// `helm history NAME -n NAMESPACE` as (revision, status, description), oldest first.
pub fn helm_history(
    kubeconfig: &Path,
    name: &str,
    namespace: &str,
) -> anyhow::Result<Vec<(i64, String, String)>> {
    let json = helm_in(
        kubeconfig,
        &["history", name, "-n", namespace, "-o", "json"],
    )?;
    let history: serde_json::Value = serde_json::from_str(&json)?;
    Ok(history
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            (
                h["revision"].as_i64().unwrap_or_default(),
                h["status"].as_str().unwrap_or_default().to_owned(),
                h["description"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect())
}
