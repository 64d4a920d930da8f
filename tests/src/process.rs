//! Child processes of the test clusters, and the guarantee that none outlives its owner.
//!
//! Every process is spawned from one long-lived thread with `PR_SET_PDEATHSIG = SIGKILL`, so
//! the kernel kills it when the test process dies, even by `SIGKILL` or an abort that skips
//! destructors. (Linux delivers the parent-death signal when the *thread* that forked the
//! child exits; spawning from a per-test thread would kill the processes of a cluster shared
//! between tests as soon as the first test's thread ended.) A [`Supervised`] process is also
//! stopped when dropped: `SIGTERM`, a short grace period, then `SIGKILL`.
//!
//! Detached processes (for `cargo xtask cluster up`) skip the parent-death signal and start
//! their own session, so they survive the command that started them.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use anyhow::Context as _;

type SpawnReply = mpsc::Sender<std::io::Result<Child>>;

struct SpawnRequest {
    command: Command,
    detached: bool,
    reply: SpawnReply,
}

fn spawner() -> &'static Mutex<mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<SpawnRequest>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnRequest>();
        std::thread::Builder::new()
            .name("flotilla-spawner".into())
            .spawn(move || {
                for mut request in rx {
                    let result = spawn_here(&mut request.command, request.detached);
                    // The requester may have given up waiting; nothing to do then.
                    let _ = request.reply.send(result);
                }
            })
            .expect("the spawner thread starts once per process");
        Mutex::new(tx)
    })
}

#[allow(unsafe_code)]
fn spawn_here(command: &mut Command, detached: bool) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt as _;
    // SAFETY: the closure runs in the forked child before exec and calls only
    // async-signal-safe functions (prctl, getppid, setsid, _exit), touching no memory shared
    // with the parent.
    unsafe {
        command.pre_exec(move || {
            if detached {
                libc::setsid();
            } else {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                // The parent may have died between fork and prctl.
                if libc::getppid() == 1 {
                    libc::_exit(1);
                }
            }
            Ok(())
        });
    }
    command.spawn()
}

/// A running child process with its log file; stopped when dropped.
#[derive(Debug)]
pub struct Supervised {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl Supervised {
    /// Starts `program` with `args`, stdout and stderr going to `log`.
    pub fn start(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        detached: bool,
    ) -> anyhow::Result<Supervised> {
        Supervised::start_with_env(name, program, args, &[], log, detached)
    }

    /// [`Supervised::start`] with extra environment variables `env` set for the process.
    pub fn start_with_env(
        name: &str,
        program: &Path,
        args: &[String],
        env: &[(&str, &str)],
        log: &Path,
        detached: bool,
    ) -> anyhow::Result<Supervised> {
        // Appended to: a process started again keeps what it wrote before.
        let out = File::options()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(program);
        command
            .args(args)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        let (reply_tx, reply_rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| anyhow::anyhow!("the spawner lock is poisoned"))?
            .send(SpawnRequest {
                command,
                detached,
                reply: reply_tx,
            })
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?;
        let child = reply_rx
            .recv()
            .map_err(|_| anyhow::anyhow!("the spawner thread is gone"))?
            .with_context(|| format!("starting {name} ({})", program.display()))?;
        Ok(Supervised {
            name: name.to_owned(),
            child: Some(child),
            log: log.to_owned(),
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails with the end of the log when the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        let Some(child) = self.child.as_mut() else {
            anyhow::bail!("{} was stopped", self.name);
        };
        if let Some(status) = child.try_wait()? {
            anyhow::bail!(
                "{} exited ({status}); the end of its log {}:\n{}",
                self.name,
                self.log.display(),
                tail(&self.log, 30)
            );
        }
        Ok(())
    }

    /// Lets the process run on after this value is dropped (detached clusters).
    pub fn release(mut self) -> Option<u32> {
        self.disown()
    }

    /// [`Supervised::release`] in place: the process runs on, this value no longer stops it.
    pub fn disown(&mut self) -> Option<u32> {
        self.child.take().map(|c| c.id())
    }

    /// Stops the process: SIGTERM, up to `grace` to exit, then SIGKILL.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        terminate(child.id());
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for Supervised {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(3));
    }
}

/// Sends SIGTERM to `pid`.
pub fn terminate(pid: u32) {
    signal(pid, libc::SIGTERM);
}

/// Sends SIGKILL to `pid`.
pub fn kill(pid: u32) {
    signal(pid, libc::SIGKILL);
}

/// Whether a process with this pid exists (and is not a zombie we could see).
pub fn alive(pid: u32) -> bool {
    let Ok(pid) = i32::try_from(pid) else {
        return false;
    };
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Field 3 of /proc/PID/stat is the state; Z is a zombie, X is dead.
    let state = status
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("X");
    !matches!(state, "Z" | "X")
}

#[allow(unsafe_code)]
fn signal(pid: u32, signal: i32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    if pid <= 1 {
        return;
    }
    // SAFETY: kill(2) takes plain integers and touches no memory of ours.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The last `lines` lines of a log file, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
