//! The real Flux controllers on a local cluster: source-controller and helm-controller,
//! built from the Go modules under `tests/flux/` (the pins of issue 21: helm-controller
//! v1.6.3, source-controller v1.9.6) by `tools/build-flux` and run as host processes, as the
//! Flux benchmark (`cargo xtask bench-flux`) and the Flux differential suite run them.
//!
//! [`bin_dir`] builds the controllers on first use (minutes; cached under
//! `~/.cache/flotilla/flux`), [`install_crds`] installs Flux's own CRDs (the pinned modules'
//! `config/crd/bases`, from the Go module cache), and [`FluxControllers::start`] runs both
//! controllers against a [`Cluster`]: `KUBECONFIG`, `RUNTIME_NAMESPACE`, leader election off,
//! metrics, health and source-controller's artifact storage on loopback.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context as _, bail};

use crate::cluster::{Cluster, free_port, workspace_root};
use crate::process::Supervised;
use crate::tools::kubectl_in;

/// The Go modules that pin the controllers, under `tests/flux/`: (directory, module path).
pub const MODULES: [(&str, &str); 2] = [
    ("source-controller", "github.com/fluxcd/source-controller"),
    ("helm-controller", "github.com/fluxcd/helm-controller"),
];

/// The controllers' `RUNTIME_NAMESPACE`, as Flux installs them.
pub const RUNTIME_NAMESPACE: &str = "flux-system";

/// Where the controllers' binaries are: what `tools/build-flux` prints (it builds them on
/// first use and caches them).
pub fn bin_dir() -> anyhow::Result<PathBuf> {
    let script = workspace_root().join("tools/build-flux");
    let out = Command::new(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed ({})", script.display(), out.status);
    }
    Ok(PathBuf::from(String::from_utf8(out.stdout)?.trim()))
}

/// The directory of a pinned controller module in the Go module cache (`go mod download`).
fn module_dir(dir: &str, module: &str) -> anyhow::Result<PathBuf> {
    let cwd = workspace_root().join("tests/flux").join(dir);
    let out = Command::new("go")
        .args(["mod", "download", "-json", module])
        .current_dir(&cwd)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running go mod download in {}", cwd.display()))?;
    let info: serde_json::Value = serde_json::from_slice(&out.stdout)
        .with_context(|| format!("reading the output of go mod download {module}"))?;
    if let Some(error) = info.get("Error").and_then(|e| e.as_str()) {
        bail!("go mod download {module}: {error}");
    }
    let dir = info
        .get("Dir")
        .and_then(|d| d.as_str())
        .with_context(|| format!("go mod download {module} names no Dir"))?;
    Ok(PathBuf::from(dir))
}

/// The version of `module` that `tests/flux/<dir>/go.mod` requires.
pub fn pinned_version(dir: &str, module: &str) -> anyhow::Result<String> {
    let path = workspace_root().join("tests/flux").join(dir).join("go.mod");
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .find_map(|line| {
            let line = line.trim();
            let line = line.strip_prefix("require ").unwrap_or(line).trim_start();
            let rest = line.strip_prefix(module)?.strip_prefix(' ')?;
            rest.split_whitespace().next().map(str::to_owned)
        })
        .with_context(|| format!("{}: no requirement of {module}", path.display()))
}

/// Installs Flux's CRDs (the `config/crd/bases` of both pinned modules) into the cluster and
/// waits until they are Established.
pub fn install_crds(cluster: &Cluster) -> anyhow::Result<()> {
    for (dir, module) in MODULES {
        let bases = module_dir(dir, module)?.join("config/crd/bases");
        let bases = bases
            .to_str()
            .context("the Go module cache path is UTF-8")?;
        kubectl_in(
            cluster.kubeconfig(),
            &["apply", "--server-side", "--force-conflicts", "-f", bases],
            None,
        )
        .with_context(|| format!("installing the CRDs of {module}"))?;
        crate::tools::wait_established(
            cluster.kubeconfig(),
            &["-f", bases],
            std::time::Duration::from_secs(120),
        )
        .with_context(|| format!("waiting for the CRDs of {module}"))?;
    }
    Ok(())
}

/// How the controllers are started.
#[derive(Debug, Clone, Default)]
pub struct FluxOptions {
    /// `--concurrent` of both controllers (their default, 4, when `None`).
    pub concurrency: Option<u16>,
    /// Extra flags of helm-controller (`--max-retry-delay=5s`, say).
    pub helm_args: Vec<String>,
    /// Extra flags of source-controller.
    pub source_args: Vec<String>,
}

/// The two controller processes of a run; stopped when dropped.
#[derive(Debug)]
pub struct FluxControllers {
    source: Supervised,
    helm: Supervised,
    dir: PathBuf,
}

impl FluxControllers {
    /// Starts source-controller, then helm-controller (binaries in `bin`, see [`bin_dir`])
    /// against `cluster`, with their storage and logs under `dir`.
    pub fn start(
        bin: &Path,
        cluster: &Cluster,
        options: &FluxOptions,
        dir: &Path,
    ) -> anyhow::Result<FluxControllers> {
        let kubeconfig = cluster.kubeconfig().to_str().context("kubeconfig path")?;
        let env = [
            ("KUBECONFIG", kubeconfig),
            ("RUNTIME_NAMESPACE", RUNTIME_NAMESPACE),
        ];
        let loopback = |port: u16| format!("127.0.0.1:{port}");
        let common = |metrics: u16, health: u16| {
            let mut args = vec![
                "--enable-leader-election=false".to_owned(),
                format!("--metrics-addr={}", loopback(metrics)),
                format!("--health-addr={}", loopback(health)),
            ];
            if let Some(c) = options.concurrency {
                args.push(format!("--concurrent={c}"));
            }
            args
        };
        let storage = dir.join("storage");
        std::fs::create_dir_all(&storage)?;
        let storage_addr = loopback(free_port()?);
        let mut source_args = common(free_port()?, free_port()?);
        source_args.extend([
            format!("--storage-path={}", storage.display()),
            format!("--storage-addr={storage_addr}"),
            format!("--storage-adv-addr={storage_addr}"),
        ]);
        source_args.extend(options.source_args.iter().cloned());
        let source = Supervised::start_with_env(
            "source-controller",
            &bin.join("source-controller"),
            &source_args,
            &env,
            &dir.join("source-controller.log"),
            false,
        )?;
        let mut helm_args = common(free_port()?, free_port()?);
        helm_args.extend(options.helm_args.iter().cloned());
        let helm = Supervised::start_with_env(
            "helm-controller",
            &bin.join("helm-controller"),
            &helm_args,
            &env,
            &dir.join("helm-controller.log"),
            false,
        )?;
        Ok(FluxControllers {
            source,
            helm,
            dir: dir.to_owned(),
        })
    }

    /// The directory of the controllers' logs and storage.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The pids of source-controller and helm-controller.
    pub fn pids(&self) -> anyhow::Result<(u32, u32)> {
        Ok((
            self.source.pid().context("source-controller was stopped")?,
            self.helm.pid().context("helm-controller was stopped")?,
        ))
    }

    /// An error when either controller exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        self.source.check_running()?;
        self.helm.check_running()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_controller_versions_are_read_from_the_go_modules() {
        assert_eq!(
            pinned_version("helm-controller", "github.com/fluxcd/helm-controller").expect("pinned"),
            "v1.6.3"
        );
        assert_eq!(
            pinned_version("source-controller", "github.com/fluxcd/source-controller")
                .expect("pinned"),
            "v1.9.6"
        );
    }
}
