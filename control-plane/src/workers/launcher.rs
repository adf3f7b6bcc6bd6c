//! The local launcher: a worker as a child process of the control plane.
//!
//! No orphans, by three means: the child runs in its own process group and is stopped
//! as a group; it gets `PR_SET_PDEATHSIG = SIGKILL`, so it dies with the control plane
//! even on SIGKILL; and it is told to exit when its connection to us closes. It is
//! given the mark its tool processes carry (`--tool-mark`), by which the supervisor
//! ends whatever of them is left when the worker is gone.

use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::AsyncWriteExt;
use tokio::process::{Child, Command};

use super::procs::ToolMarks;
use super::registry::Generation;

/// Environment variables a worker inherits; everything else (API keys, tokens) is
/// withheld. Provider keys stay in the control plane, behind the model relay.
const INHERITED_ENV: &[&str] = &[
    "PATH",
    "HOME",
    "USER",
    "LANG",
    "LC_ALL",
    "TZ",
    "TMPDIR",
    "RUST_LOG",
    "RUST_BACKTRACE",
];

/// The inherited part of a worker's environment (also what `chorus-worker
/// backends` runs with: the same `PATH` finds the same CLIs).
pub fn inherited_env() -> Vec<(String, std::ffi::OsString)> {
    INHERITED_ENV
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| (k.to_string(), v)))
        .collect()
}

#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(
        "cannot start worker binary {path}: {source}; build it with `cargo build --bins` or set CHORUS_WORKER_BIN"
    )]
    Spawn {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot hand the credential to the worker: {0}")]
    Credential(std::io::Error),
    #[error("the worker {0} before it took its credential")]
    ExitedEarly(String),
    #[error(
        "no dial-in worker was free within {0:?}: start more (chorus-worker --control-plane <url> --data-dir <dir>, with CHORUS_JOIN_TOKEN set to a worker credential or the shared join token) or raise [workers] attach_timeout_ms"
    )]
    NoFreeWorker(Duration),
}

#[derive(Debug, Clone)]
pub struct LocalLauncher {
    pub worker_bin: PathBuf,
    /// URL the worker dials, e.g. `http://127.0.0.1:50051`.
    pub control_plane_url: String,
    /// The data directory the worker finds the agent's directory in (ours: a local
    /// worker shares our disk).
    pub data_dir: PathBuf,
    pub bash_timeout: Duration,
    pub file_lock_timeout: Duration,
    /// The marks its tool processes carry (see `procs`).
    pub tool_marks: ToolMarks,
    /// JSON logs: the worker writes JSON and its lines are relayed into ours
    /// labelled with its agent; text: its stderr is ours.
    pub json_logs: bool,
    /// The CLIs `[backends]` names (`--claude-code`, `--opencode`).
    pub backends: crate::config::BackendPaths,
}

/// A running local worker process.
pub struct LocalWorker {
    child: Child,
    pid: u32,
}

impl LocalLauncher {
    /// Starts a worker for `agent` and hands it `credential` over its stdin (never in
    /// argv or the environment, where other processes of this user could read it).
    pub async fn launch(
        &self,
        agent: &str,
        generation: Generation,
        credential: &str,
    ) -> Result<LocalWorker, LaunchError> {
        let mut command = Command::new(&self.worker_bin);
        command
            .arg("--control-plane")
            .arg(&self.control_plane_url)
            .arg("--agent")
            .arg(agent)
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--credential-stdin")
            .arg("--bash-timeout-secs")
            .arg(self.bash_timeout.as_secs().to_string())
            .arg("--file-lock-timeout-secs")
            .arg(self.file_lock_timeout.as_secs().to_string())
            .arg("--tool-mark")
            .arg(self.tool_marks.for_generation(generation))
            .args(if self.json_logs {
                &["--log-format", "json"][..]
            } else {
                &[]
            })
            .args(self.backends.worker_args())
            .env_clear()
            .envs(inherited_env())
            .stdin(Stdio::piped())
            .stdout(stderr_stdio())
            .stderr(if self.json_logs {
                Stdio::piped()
            } else {
                Stdio::inherit()
            })
            .process_group(0)
            .kill_on_drop(true);
        super::death::set_parent_death_signal(&mut command);
        let child = command.spawn().map_err(|source| LaunchError::Spawn {
            path: self.worker_bin.clone(),
            source,
        })?;
        let pid = child.id().unwrap_or_default();
        let mut child = child;
        if let Some(stderr) = child.stderr.take() {
            tokio::spawn(crate::telemetry::json_log::relay_worker_log(
                agent.to_string(),
                stderr,
            ));
        }
        let mut worker = LocalWorker { child, pid };
        if let Err(e) = worker.send_credential(credential).await {
            // Most often the process died at once; its exit says more than EPIPE.
            return Err(match worker.wait_for(Duration::from_secs(1)).await {
                Some(report) => LaunchError::ExitedEarly(report),
                None => {
                    worker.kill();
                    worker.wait().await;
                    e
                }
            });
        }
        Ok(worker)
    }
}

/// The worker's stdout goes to our stderr: our stdout carries only what `chorus`
/// itself prints for its caller.
fn stderr_stdio() -> Stdio {
    use std::os::fd::AsFd;
    match std::io::stderr().as_fd().try_clone_to_owned() {
        Ok(fd) => Stdio::from(fd),
        Err(_) => Stdio::null(),
    }
}

impl LocalWorker {
    pub fn pid(&self) -> u32 {
        self.pid
    }

    async fn send_credential(&mut self, credential: &str) -> Result<(), LaunchError> {
        let mut stdin = self
            .child
            .stdin
            .take()
            .ok_or_else(|| LaunchError::Credential(std::io::Error::other("no stdin pipe")))?;
        stdin
            .write_all(format!("{credential}\n").as_bytes())
            .await
            .map_err(LaunchError::Credential)?;
        stdin.shutdown().await.map_err(LaunchError::Credential)?;
        Ok(())
    }

    /// Waits for the worker to exit and says how it ended.
    pub async fn wait(&mut self) -> String {
        match self.child.wait().await {
            Ok(status) => describe_exit(status),
            Err(e) => format!("could not be waited for: {e}"),
        }
    }

    /// Waits at most `limit`; `None` when it is still running.
    pub async fn wait_for(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.wait()).await.ok()
    }

    /// SIGKILL to the whole process group.
    pub fn kill(&mut self) {
        self.signal_group(Signal::SIGKILL);
        let _ = self.child.start_kill();
    }

    /// SIGTERM to the group, then SIGKILL after `grace`; returns once it is reaped.
    pub async fn stop(&mut self, grace: Duration) -> String {
        self.signal_group(Signal::SIGTERM);
        if let Some(report) = self.wait_for(grace).await {
            // The worker is gone; make sure nothing it started lingers in its group.
            self.signal_group(Signal::SIGKILL);
            return report;
        }
        tracing::warn!(pid = self.pid, "worker ignored SIGTERM; sending SIGKILL");
        self.kill();
        self.wait().await
    }

    fn signal_group(&self, signal: Signal) {
        if self.pid != 0 {
            // ESRCH (already gone) is fine.
            let _ = killpg(Pid::from_raw(self.pid as i32), signal);
        }
    }
}

pub fn describe_exit(status: ExitStatus) -> String {
    if let Some(code) = status.code() {
        format!("exited with status {code}")
    } else if let Some(signal) = status.signal() {
        let name = Signal::try_from(signal)
            .map(|s| s.as_str().to_string())
            .unwrap_or_else(|_| format!("signal {signal}"));
        format!("was killed by {name}")
    } else {
        "ended".to_string()
    }
}

/// How workers come to be: launched here as children, or dial-in workers that joined
/// the pool (`[workers] launcher`).
#[derive(Clone)]
pub enum Launcher {
    Local(LocalLauncher),
    Remote(std::sync::Arc<super::pool::Pool>),
}

/// One generation's worker, however it came.
pub enum Worker {
    Local(LocalWorker),
    Remote(RemoteWorker),
}

/// A dial-in worker serving one agent: all we hold of it is its connection (the
/// registry's slot). It is let go by closing that connection; the worker then winds
/// its runs down, ends its tool processes and joins the pool again.
pub struct RemoteWorker {
    peer: String,
    /// The credential it joined with.
    credential: String,
    /// Its volume held the agent's directory.
    where_files_are: bool,
    released: tokio_util::sync::CancellationToken,
}

impl Launcher {
    /// A worker for `agent`'s generation `generation` holding `credential`. A remote
    /// one is the oldest free dial-in worker; with none free within `wait_free`, the
    /// launch fails saying so. `incarnation`, `may_have_files`: see `pool::Assignment`.
    pub async fn launch(
        &self,
        agent: &str,
        generation: Generation,
        credential: &str,
        wait_free: Duration,
        incarnation: &str,
        may_have_files: bool,
    ) -> Result<Worker, LaunchError> {
        match self {
            Launcher::Local(local) => local
                .launch(agent, generation, credential)
                .await
                .map(Worker::Local),
            Launcher::Remote(pool) => {
                let assignment = super::pool::Work::Serve(super::pool::Assignment {
                    agent: agent.to_string(),
                    credential: credential.to_string(),
                    incarnation: incarnation.to_string(),
                    may_have_files,
                });
                match tokio::time::timeout(wait_free, pool.assign(assignment)).await {
                    Ok(taken) => Ok(Worker::Remote(RemoteWorker {
                        peer: taken.peer,
                        credential: taken.worker,
                        where_files_are: taken.holds,
                        released: Default::default(),
                    })),
                    Err(_) => Err(LaunchError::NoFreeWorker(wait_free)),
                }
            }
        }
    }

    /// The marks of local workers' tool processes; `None` for remote workers, which
    /// end their own.
    pub fn tool_marks(&self) -> Option<&ToolMarks> {
        match self {
            Launcher::Local(local) => Some(&local.tool_marks),
            Launcher::Remote(_) => None,
        }
    }
}

impl Worker {
    /// The process id, for a worker launched here.
    pub fn pid(&self) -> Option<u32> {
        match self {
            Worker::Local(w) => Some(w.pid()),
            Worker::Remote(_) => None,
        }
    }

    /// Who it is, for the logs: `pid N`, or where a dial-in worker dialled from.
    pub fn describe(&self) -> String {
        match self {
            Worker::Local(w) => format!("pid {}", w.pid()),
            Worker::Remote(w) if w.where_files_are => {
                format!("dial-in worker {}, where its files are", w.peer)
            }
            Worker::Remote(w) => format!("dial-in worker {}", w.peer),
        }
    }

    /// A dial-in worker's name for itself (host and pid).
    pub fn dial_in_name(&self) -> Option<String> {
        match self {
            Worker::Local(_) => None,
            Worker::Remote(w) => Some(w.peer.clone()),
        }
    }

    /// The join credential of a dial-in worker (`join-token` for the shared one).
    pub fn dial_in_credential(&self) -> Option<String> {
        match self {
            Worker::Local(_) => None,
            Worker::Remote(w) => Some(w.credential.clone()),
        }
    }

    /// Until it ends: a local process exits; a remote worker is released.
    pub async fn wait(&mut self) -> String {
        match self {
            Worker::Local(w) => w.wait().await,
            Worker::Remote(w) => {
                w.released.cancelled().await;
                "was released".to_string()
            }
        }
    }

    pub async fn wait_for(&mut self, limit: Duration) -> Option<String> {
        tokio::time::timeout(limit, self.wait()).await.ok()
    }

    /// SIGKILL for a local process; a remote worker is released (its connection is
    /// closed by revoking its generation, which the supervisor does next).
    pub fn kill(&mut self) {
        match self {
            Worker::Local(w) => w.kill(),
            Worker::Remote(w) => w.released.cancel(),
        }
    }

    /// Stops it: SIGTERM then SIGKILL for a local process; a remote worker is
    /// released at once (its runs wind down on its side when the link closes).
    pub async fn stop(&mut self, grace: Duration) -> String {
        match self {
            Worker::Local(w) => w.stop(grace).await,
            Worker::Remote(w) => {
                w.released.cancel();
                "was released".to_string()
            }
        }
    }
}
