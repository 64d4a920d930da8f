//! Container images of the hub and the agent, built without a container daemon: one layer
//! holding the binary (and, for the hub, the CA bundle its HTTPS chart sources are checked
//! against) on an empty OCI base, run as the non-root user 65532, pushed with crane
//! (go-containerregistry's CLI, built by `tools/build-crane`). `cargo xtask image` calls
//! [`build_and_push`]; `cargo xtask up` is meant to push both to its local registry and point
//! the charts' `image.repository`/`image.tag` at them.
//!
//! The binary must be static (the base has no libc): build it with
//! `RUSTFLAGS='-C target-feature=+crt-static' cargo build --target x86_64-unknown-linux-gnu`.
//! [`is_dynamic`] tells a dynamically linked one, which is refused unless
//! [`ImageOptions::allow_dynamic`] is set (tests of the image's shape only).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context as _, bail};

/// The user and group the images run as (distroless's `nonroot`).
pub const USER: u32 = 65532;

/// Which binary an image carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// `flotilla-hub`.
    Hub,
    /// `flotilla-agent`.
    Agent,
}

impl Component {
    /// The binary's name, also its path under `/usr/local/bin` in the image.
    pub fn binary_name(self) -> &'static str {
        match self {
            Component::Hub => "flotilla-hub",
            Component::Agent => "flotilla-agent",
        }
    }

    /// The entrypoint: the binary's path in the image.
    pub fn entrypoint(self) -> String {
        format!("/usr/local/bin/{}", self.binary_name())
    }

    /// The ports the binary listens on by default (metrics, and the hub's session server).
    fn ports(self) -> &'static [&'static str] {
        match self {
            Component::Hub => &["8080/tcp", "9443/tcp"],
            Component::Agent => &["8080/tcp"],
        }
    }
}

/// How to build and push an image.
#[derive(Clone, Debug)]
pub struct ImageOptions {
    /// The binary.
    pub component: Component,
    /// The binary to put in the image.
    pub binary: PathBuf,
    /// Where to push it: `host[:port]/repository:tag`.
    pub reference: String,
    /// A plain-HTTP registry (the local one of `up` and the tests).
    pub insecure: bool,
    /// The CA bundle copied to `/etc/ssl/certs/ca-certificates.crt` (hub only; default: the
    /// build machine's).
    pub ca_bundle: Option<PathBuf>,
    /// Accept a dynamically linked binary (the image will not run; for tests of its shape).
    pub allow_dynamic: bool,
}

/// The crane binary: `$FLOTILLA_CRANE`, or what `tools/build-crane` prints (it builds crane on
/// first use).
pub fn crane() -> anyhow::Result<PathBuf> {
    static PATH: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    crate::tools::script_output(&PATH, "FLOTILLA_CRANE", "tools/build-crane")
}

/// Runs crane with `args` (plus `--insecure` when asked); its stdout.
pub fn run_crane(args: &[&str], insecure: bool) -> anyhow::Result<String> {
    let crane = crane()?;
    let mut command = Command::new(&crane);
    command.args(args);
    if insecure {
        command.arg("--insecure");
    }
    let out = command
        .output()
        .with_context(|| format!("running {}", crane.display()))?;
    if !out.status.success() {
        bail!(
            "crane {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Whether the ELF file at `path` asks for a program interpreter (is dynamically linked).
pub fn is_dynamic(path: &Path) -> anyhow::Result<bool> {
    const PT_INTERP: u32 = 3;
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let field = |at: usize, len: usize| -> anyhow::Result<u64> {
        let b = bytes
            .get(at..at + len)
            .with_context(|| format!("{}: truncated ELF header", path.display()))?;
        Ok(b.iter().rev().fold(0, |acc, &x| (acc << 8) | u64::from(x)))
    };
    // A little-endian ELF64 file, as x86_64 and aarch64 Linux binaries are.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01".as_slice()) {
        bail!("{}: not a little-endian ELF64 binary", path.display());
    }
    let phoff = usize::try_from(field(0x20, 8)?)?;
    let phentsize = usize::try_from(field(0x36, 2)?)?;
    let phnum = usize::try_from(field(0x38, 2)?)?;
    for i in 0..phnum {
        if field(phoff + i * phentsize, 4)? == u64::from(PT_INTERP) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The layer: the binary at `/usr/local/bin/<name>` (mode 0755), `/etc/passwd` and
/// `/etc/group` naming the non-root user, a world-writable `/tmp`, and for the hub the CA
/// bundle; owned by root, mtime 0, sorted, so the same inputs give the same digest.
fn layer(options: &ImageOptions, dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("rootfs");
    let bin_dir = root.join("usr/local/bin");
    std::fs::create_dir_all(&bin_dir)?;
    let target = bin_dir.join(options.component.binary_name());
    std::fs::copy(&options.binary, &target)
        .with_context(|| format!("copying {}", options.binary.display()))?;
    std::fs::create_dir_all(root.join("etc"))?;
    std::fs::write(
        root.join("etc/passwd"),
        format!(
            "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:{USER}:{USER}:nonroot:/home/nonroot:/sbin/nologin\n"
        ),
    )?;
    std::fs::write(
        root.join("etc/group"),
        format!("root:x:0:\nnonroot:x:{USER}:\n"),
    )?;
    std::fs::create_dir_all(root.join("tmp"))?;
    std::fs::create_dir_all(root.join("home/nonroot"))?;
    if options.component == Component::Hub {
        let bundle = options
            .ca_bundle
            .clone()
            .unwrap_or_else(|| PathBuf::from("/etc/ssl/certs/ca-certificates.crt"));
        let certs = root.join("etc/ssl/certs");
        std::fs::create_dir_all(&certs)?;
        std::fs::copy(&bundle, certs.join("ca-certificates.crt"))
            .with_context(|| format!("copying the CA bundle {}", bundle.display()))?;
    }
    let tar = dir.join("layer.tar");
    let status = Command::new("tar")
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mtime=@0",
            "--mode=u+rwX,go+rX,go-w",
            "--format=posix",
            "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
            "-C",
        ])
        .arg(&root)
        .arg("-cf")
        .arg(&tar)
        .args(["usr", "etc", "home"])
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar failed ({status})");
    }
    // /tmp is sticky and world-writable: appended on its own with its mode.
    let status = Command::new("tar")
        .args([
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mtime=@0",
            "--mode=1777",
            "--format=posix",
            "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime",
            "--no-recursion",
            "-C",
        ])
        .arg(&root)
        .arg("-rf")
        .arg(&tar)
        .arg("tmp")
        .status()
        .context("running tar")?;
    if !status.success() {
        bail!("tar failed ({status})");
    }
    Ok(tar)
}

/// The image's architecture, as Go names it: the binary is built for this machine.
fn go_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Builds the image and pushes it to `options.reference`; returns its digest
/// (`sha256:...`).
pub fn build_and_push(options: &ImageOptions) -> anyhow::Result<String> {
    if !options.allow_dynamic && is_dynamic(&options.binary)? {
        bail!(
            "{} is dynamically linked and would not start on the empty base; build it static \
             (RUSTFLAGS='-C target-feature=+crt-static' cargo build --target \
             x86_64-unknown-linux-gnu ...)",
            options.binary.display()
        );
    }
    let dir = tempfile::tempdir()?;
    let tar = layer(options, dir.path())?;
    let tar = tar.to_string_lossy();
    let reference = options.reference.as_str();
    run_crane(
        &[
            "append",
            "--oci-empty-base",
            "--new_layer",
            &tar,
            "--new_tag",
            reference,
        ],
        options.insecure,
    )?;
    let user = format!("{USER}:{USER}");
    let entrypoint = options.component.entrypoint();
    let title = format!(
        "org.opencontainers.image.title={}",
        options.component.binary_name()
    );
    let platform = format!("linux/{}", go_arch());
    let mut args = vec![
        "mutate",
        reference,
        "--tag",
        reference,
        "--set-platform",
        &platform,
        "--entrypoint",
        &entrypoint,
        "--user",
        &user,
        "--workdir",
        "/home/nonroot",
        "--env",
        "HOME=/home/nonroot",
        "--label",
        &title,
    ];
    for port in options.component.ports() {
        args.extend(["--exposed-ports", port]);
    }
    run_crane(&args, options.insecure)?;
    let digest = run_crane(&["digest", reference], options.insecure)?;
    Ok(digest.trim().to_owned())
}

/// Checks the image pushed by [`build_and_push`] with `options`: an OCI manifest of one layer;
/// its configuration's entrypoint, user, working directory and platform; and that its file
/// system holds the binary, byte for byte, executable, with the CA bundle for the hub.
pub fn verify(options: &ImageOptions) -> anyhow::Result<()> {
    let reference = options.reference.as_str();
    let manifest: serde_json::Value =
        serde_json::from_str(&run_crane(&["manifest", reference], options.insecure)?)?;
    let want = "application/vnd.oci.image.manifest.v1+json";
    if manifest["mediaType"] != want {
        bail!(
            "{reference}: manifest media type {}, not {want}",
            manifest["mediaType"]
        );
    }
    let layers = manifest["layers"].as_array().map_or(0, Vec::len);
    if layers != 1 {
        bail!("{reference}: {layers} layers, not one");
    }
    let config: serde_json::Value =
        serde_json::from_str(&run_crane(&["config", reference], options.insecure)?)?;
    let entrypoint = options.component.entrypoint();
    let user = format!("{USER}:{USER}");
    for (field, got, want) in [
        (
            "config.Entrypoint",
            config["config"]["Entrypoint"].clone(),
            serde_json::json!([entrypoint]),
        ),
        (
            "config.User",
            config["config"]["User"].clone(),
            serde_json::json!(user),
        ),
        (
            "config.WorkingDir",
            config["config"]["WorkingDir"].clone(),
            serde_json::json!("/home/nonroot"),
        ),
        ("os", config["os"].clone(), serde_json::json!("linux")),
        (
            "architecture",
            config["architecture"].clone(),
            serde_json::json!(go_arch()),
        ),
    ] {
        if got != want {
            bail!("{reference}: {field} is {got}, not {want}");
        }
    }
    let dir = tempfile::tempdir()?;
    let fs = dir.path().join("fs.tar");
    run_crane(
        &["export", reference, &fs.to_string_lossy()],
        options.insecure,
    )?;
    let listing = Command::new("tar")
        .args(["-tvf"])
        .arg(&fs)
        .output()
        .context("running tar")?;
    let listing = String::from_utf8_lossy(&listing.stdout).into_owned();
    let path = entrypoint.trim_start_matches('/');
    let line = listing
        .lines()
        .find(|l| l.ends_with(&format!(" {path}")))
        .with_context(|| format!("{reference}: no {path} in the image:\n{listing}"))?;
    if !line.starts_with("-rwxr-xr-x") {
        bail!("{reference}: {path} is not an executable file: {line}");
    }
    let inside = Command::new("tar")
        .arg("-xOf")
        .arg(&fs)
        .arg(path)
        .output()
        .context("running tar")?
        .stdout;
    let outside = std::fs::read(&options.binary)?;
    if inside != outside {
        bail!(
            "{reference}: {path} ({} bytes) is not {} ({} bytes)",
            inside.len(),
            options.binary.display(),
            outside.len()
        );
    }
    let mut wanted = vec!["etc/passwd", "etc/group", "tmp"];
    if options.component == Component::Hub {
        wanted.push("etc/ssl/certs/ca-certificates.crt");
    }
    for file in wanted {
        if !listing
            .lines()
            .any(|l| l.ends_with(&format!(" {file}")) || l.ends_with(&format!(" {file}/")))
        {
            bail!("{reference}: no {file} in the image:\n{listing}");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ELF64 little-endian header with one program header of type `p_type`.
    fn elf(p_type: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 64 + 56];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&64u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[64..68].copy_from_slice(&p_type.to_le_bytes());
        bytes
    }

    #[test]
    fn a_binary_with_a_program_interpreter_is_dynamic_and_one_without_is_static() {
        let dir = tempfile::tempdir().unwrap();
        let dynamic = dir.path().join("dynamic");
        let fixed = dir.path().join("static");
        std::fs::write(&dynamic, elf(3)).unwrap();
        std::fs::write(&fixed, elf(1)).unwrap();
        assert!(is_dynamic(&dynamic).unwrap());
        assert!(!is_dynamic(&fixed).unwrap());
        let script = dir.path().join("script");
        std::fs::write(&script, "#!/bin/sh\n").unwrap();
        let err = is_dynamic(&script).unwrap_err().to_string();
        assert!(err.contains("not a little-endian ELF64 binary"), "{err}");
    }

    #[test]
    fn a_dynamically_linked_binary_is_refused_naming_it_and_how_to_build_a_static_one() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("flotilla-agent");
        std::fs::write(&binary, elf(3)).unwrap();
        let options = ImageOptions {
            component: Component::Agent,
            binary: binary.clone(),
            reference: "127.0.0.1:1/flotilla/flotilla-agent:never".to_owned(),
            insecure: true,
            ca_bundle: None,
            allow_dynamic: false,
        };
        let err = format!("{:#}", build_and_push(&options).unwrap_err());
        assert!(err.contains(&*binary.to_string_lossy()), "{err}");
        assert!(err.contains("crt-static"), "{err}");
    }
}
