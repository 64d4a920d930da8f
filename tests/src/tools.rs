//! The reference `helm` and `kubectl` binaries, for differential and compatibility tests only
//! (the product never calls them). Installed by `tools/install-reference-tools`.

use std::path::PathBuf;
use std::sync::OnceLock;

use crate::cluster::workspace_root;

/// The directory holding `helm` and `kubectl`: `$FLOTILLA_REFERENCE_TOOLS`, or what
/// `tools/install-reference-tools` prints (it installs them on first use).
pub fn reference_tools_dir() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("FLOTILLA_REFERENCE_TOOLS") {
            return Ok(PathBuf::from(dir));
        }
        let script = workspace_root().join("tools/install-reference-tools");
        let out = std::process::Command::new(&script)
            .stderr(std::process::Stdio::inherit())
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
