//! Which CLI backends (`claude-code`, `opencode`) can run where agents are served.
//!
//! A dial-in worker probes its host when it starts and says what it found in its
//! `Hello.backends`; that is kept per agent (the worker serving it). Local workers
//! share the control plane's host: it runs `chorus-worker backends` (the same probe,
//! printed as JSON) when first asked (`GET /api/status`, the view of an agent
//! with a CLI backend), and again at the first ask after an agent switched to a CLI
//! backend (the CLI may have been installed since); launched workers probe nothing; with dial-in workers the
//! status shows the latest joining worker's. What is not known yet, or a probe that
//! failed, reads as "not usable" with the reason, never as usable.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use chorus_proto::domain::{Backend, BackendStatus};

use crate::config::BackendPaths;

/// How long the local probe may take (each CLI answers `--version`).
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct BackendsSeen {
    /// The local probe's answer; `None` until it ran.
    local: Mutex<Option<Vec<BackendStatus>>>,
    /// The latest Hello of any worker (a dial-in worker's host).
    latest: Mutex<Option<Vec<BackendStatus>>>,
    /// The Hello of the worker serving each agent.
    by_agent: Mutex<HashMap<String, Vec<BackendStatus>>>,
    /// How to probe the local host (local workers), run at the first need.
    local_probe: Mutex<Option<LocalProbe>>,
    /// Whether the local answer is current (cleared by [`Self::reprobe`]).
    fresh: std::sync::atomic::AtomicBool,
    /// One local probe at a time.
    probing: tokio::sync::Mutex<()>,
}

/// What the local probe runs: `<worker_bin> backends` with the `[backends]` paths.
#[derive(Clone)]
struct LocalProbe {
    worker_bin: PathBuf,
    paths: BackendPaths,
    env: Vec<(String, std::ffi::OsString)>,
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Every CLI as not usable, for `reason`.
pub fn unknown(reason: &str) -> Vec<BackendStatus> {
    Backend::CLIS
        .into_iter()
        .map(|backend| BackendStatus {
            backend,
            usable: false,
            version: None,
            reason: Some(format!("unknown: {reason}")),
            path: None,
        })
        .collect()
}

/// One entry per CLI, in the order of [`Backend::CLIS`]: what `found` says of it, or
/// "unknown" when it says nothing (an older worker).
fn complete(found: Vec<BackendStatus>, missing: &str) -> Vec<BackendStatus> {
    Backend::CLIS
        .into_iter()
        .map(|backend| {
            found
                .iter()
                .find(|s| s.backend == backend)
                .cloned()
                .unwrap_or_else(|| BackendStatus {
                    backend,
                    usable: false,
                    version: None,
                    reason: Some(format!("unknown: {missing}")),
                    path: None,
                })
        })
        .collect()
}

/// What `chorus-worker backends` printed, read; or why not.
pub fn parse_probe(stdout: &[u8]) -> Result<Vec<BackendStatus>, String> {
    serde_json::from_slice::<Vec<BackendStatus>>(stdout)
        .map_err(|e| format!("`chorus-worker backends` printed no list of backends ({e})"))
}

impl BackendsSeen {
    /// A worker said hello for `agent` with what its host can run.
    pub fn hello(&self, agent: &str, backends: Vec<BackendStatus>) {
        self.joined(backends.clone());
        lock(&self.by_agent).insert(agent.to_string(), backends);
    }

    /// A dial-in worker joined the pool (serving no agent yet).
    pub fn joined(&self, backends: Vec<BackendStatus>) {
        *lock(&self.latest) = Some(backends);
    }

    /// The local probe's answer (or its failure as "unknown").
    pub fn set_local(&self, probed: Result<Vec<BackendStatus>, String>) {
        let statuses = match probed {
            Ok(found) => complete(found, "the worker's probe did not list it"),
            Err(reason) => unknown(&reason),
        };
        *lock(&self.local) = Some(statuses);
    }

    /// Each CLI's state where agents are served: the local probe's, else the latest
    /// worker's Hello, else unknown.
    pub fn status(&self) -> Vec<BackendStatus> {
        if let Some(local) = lock(&self.local).clone() {
            return local;
        }
        match lock(&self.latest).clone() {
            Some(found) => complete(found, "the worker did not report it"),
            None => unknown("no worker has reported its CLIs yet"),
        }
    }

    /// A CLI backend's state for `agent`: from the worker serving it, else
    /// [`Self::status`]. `None` for `api`.
    pub fn of_agent(&self, agent: &str, backend: Backend) -> Option<BackendStatus> {
        backend.cli()?;
        let served = lock(&self.by_agent)
            .get(agent)
            .and_then(|found| found.iter().find(|s| s.backend == backend).cloned());
        served.or_else(|| self.status().into_iter().find(|s| s.backend == backend))
    }

    /// Local workers are probed with `<worker_bin> backends` (with the `[backends]`
    /// paths), once, when first asked ([`Self::probe_local_once`]): asking each CLI
    /// its version costs about a second of CPU, which a chorus whose agents use none
    /// never pays. A launched worker probes nothing itself (this host is the control
    /// plane's).
    pub fn probe_local(
        &self,
        worker_bin: PathBuf,
        paths: BackendPaths,
        env: Vec<(String, std::ffi::OsString)>,
    ) {
        *lock(&self.local_probe) = Some(LocalProbe {
            worker_bin,
            paths,
            env,
        });
    }

    /// Runs the local probe if it is set and its answer is not current, and waits
    /// for it.
    pub async fn probe_local_once(&self) {
        use std::sync::atomic::Ordering;
        let Some(probe) = lock(&self.local_probe).clone() else {
            return;
        };
        if self.fresh.load(Ordering::SeqCst) {
            return;
        }
        let _one = self.probing.lock().await;
        if self.fresh.load(Ordering::SeqCst) {
            return;
        }
        let probed = run_probe(&probe.worker_bin, &probe.paths, probe.env).await;
        if let Err(reason) = &probed {
            tracing::warn!(%reason, "cannot tell which CLI backends local workers can run");
        }
        self.set_local(probed);
        self.fresh.store(true, Ordering::SeqCst);
    }

    /// An agent switched to a CLI backend: the local probe runs again at the next
    /// ask. (A dial-in worker's answer is its start's; each CLI turn checks the
    /// CLI again before it starts, `worker/src/backends/probe.rs`.)
    pub fn reprobe(&self) {
        self.fresh.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

async fn run_probe(
    worker_bin: &std::path::Path,
    paths: &BackendPaths,
    env: Vec<(String, std::ffi::OsString)>,
) -> Result<Vec<BackendStatus>, String> {
    let mut command = tokio::process::Command::new(worker_bin);
    command
        .arg("backends")
        .args(paths.worker_args())
        .env_clear()
        .envs(env)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    // Nothing chorus starts outlives it, even a probe that hangs while it stops: the
    // probe dies with chorus, and its group is killed unless it ended by itself.
    super::death::set_parent_death_signal(&mut command);
    command
        .process_group(0)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut probe = ProbeChild::spawn(command)
        .map_err(|e| format!("cannot run `{} backends`: {e}", worker_bin.display()))?;
    let output = tokio::time::timeout(PROBE_TIMEOUT, probe.output())
        .await
        .map_err(|_| {
            format!(
                "`{} backends` did not answer within {} s",
                worker_bin.display(),
                PROBE_TIMEOUT.as_secs()
            )
        })?
        .map_err(|e| format!("cannot run `{} backends`: {e}", worker_bin.display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        // Its first line says what went wrong (clap's `error: …`, a panic).
        let said = stderr.lines().find(|l| !l.trim().is_empty());
        return Err(format!(
            "`{} backends` failed ({}){}",
            worker_bin.display(),
            output.status,
            said.map(|l| format!(": {}", l.trim())).unwrap_or_default()
        ));
    }
    parse_probe(&output.stdout)
}

/// The probe's process; dropped before it ended (a timeout, chorus stopping), its
/// whole group is killed. Only then: the leader is not reaped yet, so its group id
/// cannot have been reused.
struct ProbeChild {
    child: tokio::process::Child,
    unreaped: bool,
}

impl ProbeChild {
    fn spawn(mut command: tokio::process::Command) -> std::io::Result<Self> {
        Ok(ProbeChild {
            child: command.spawn()?,
            unreaped: true,
        })
    }

    async fn output(&mut self) -> std::io::Result<std::process::Output> {
        use tokio::io::AsyncReadExt;
        async fn read(pipe: Option<impl AsyncReadExt + Unpin>) -> Vec<u8> {
            let mut bytes = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut bytes).await;
            }
            bytes
        }
        let stdout = self.child.stdout.take();
        let stderr = self.child.stderr.take();
        let (status, stdout, stderr) = tokio::join!(self.child.wait(), read(stdout), read(stderr));
        let status = status?;
        self.unreaped = false;
        Ok(std::process::Output {
            status,
            stdout,
            stderr,
        })
    }
}

impl Drop for ProbeChild {
    fn drop(&mut self) {
        if self.unreaped
            && let Some(pid) = self.child.id()
        {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid as i32),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usable(backend: Backend, version: &str) -> BackendStatus {
        BackendStatus {
            backend,
            usable: true,
            version: Some(version.into()),
            reason: None,
            path: Some(format!("/usr/bin/{backend}")),
        }
    }

    #[test]
    fn nothing_known_is_never_usable_and_says_why() {
        let seen = BackendsSeen::default();
        let status = seen.status();
        assert_eq!(
            status.iter().map(|s| s.backend).collect::<Vec<_>>(),
            Backend::CLIS
        );
        assert!(status.iter().all(|s| !s.usable));
        assert!(
            status[0]
                .reason
                .as_deref()
                .is_some_and(|r| r.starts_with("unknown: no worker")),
            "{status:?}"
        );
        assert_eq!(seen.of_agent("a", Backend::Api), None);
    }

    #[test]
    fn the_serving_worker_wins_then_the_local_probe_then_the_latest_hello() {
        let seen = BackendsSeen::default();
        seen.hello("a", vec![usable(Backend::ClaudeCode, "2.1.332")]);
        // An older worker's Hello names only one: the other is unknown, not usable.
        let status = seen.status();
        assert!(status[0].usable);
        assert!(!status[1].usable);
        seen.set_local(Err("`chorus-worker backends` failed (exit status 2)".into()));
        assert_eq!(
            seen.status()[0].reason.as_deref(),
            Some("unknown: `chorus-worker backends` failed (exit status 2)")
        );
        // Agent a's own worker said it can run claude-code.
        assert_eq!(
            seen.of_agent("a", Backend::ClaudeCode),
            Some(usable(Backend::ClaudeCode, "2.1.332"))
        );
        // Agent b has no worker yet: the local probe.
        assert!(
            !seen
                .of_agent("b", Backend::ClaudeCode)
                .is_some_and(|s| s.usable)
        );
    }

    /// The local probe runs once until an agent switches to a CLI backend; then the
    /// next ask runs it again and sees what changed (a CLI installed meanwhile).
    #[tokio::test]
    async fn a_switch_to_a_cli_backend_probes_the_host_again() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let answer = dir.path().join("answer.json");
        let worker = dir.path().join("worker");
        std::fs::write(
            &worker,
            format!(
                "#!/bin/sh
cat {}
",
                answer.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let write = |version: &str| {
            let found = vec![usable(Backend::ClaudeCode, version)];
            std::fs::write(&answer, serde_json::to_string(&found).unwrap()).unwrap();
        };
        let env: Vec<(String, std::ffi::OsString)> = std::env::var_os("PATH")
            .map(|path| ("PATH".to_string(), path))
            .into_iter()
            .collect();
        let seen = BackendsSeen::default();
        seen.probe_local(worker, BackendPaths::default(), env);
        let version = |seen: &BackendsSeen| seen.status()[0].version.clone();
        write("2.1.332");
        seen.probe_local_once().await;
        assert_eq!(version(&seen).as_deref(), Some("2.1.332"));
        write("2.1.400");
        seen.probe_local_once().await;
        assert_eq!(version(&seen).as_deref(), Some("2.1.332"), "probed once");
        seen.reprobe();
        seen.probe_local_once().await;
        assert_eq!(version(&seen).as_deref(), Some("2.1.400"), "probed again");
    }

    /// The probe runs the worker binary with `backends` and the `[backends]` flags;
    /// a worker without the subcommand reads as unknown, with its own words.
    #[tokio::test]
    async fn the_local_probe_runs_the_worker_and_a_failure_says_why() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let worker = dir.path().join("worker");
        let found = serde_json::to_string(&vec![usable(Backend::ClaudeCode, "2.1.332")]).unwrap();
        std::fs::write(
            &worker,
            format!(
                "#!/bin/sh\n[ \"$1 $2 $3\" = 'backends --claude-code /x/claude' ] || \
                 {{ echo \"error: unexpected argument '$1' found\" >&2; echo usage >&2; exit 2; }}\n\
                 echo '{found}'\n"
            ),
        )
        .unwrap();
        std::fs::set_permissions(&worker, std::fs::Permissions::from_mode(0o755)).unwrap();
        let paths = BackendPaths {
            claude_code: Some("/x/claude".into()),
            opencode: None,
        };
        let env: Vec<(String, std::ffi::OsString)> = std::env::var_os("PATH")
            .map(|path| ("PATH".to_string(), path))
            .into_iter()
            .collect();
        let seen = BackendsSeen::default();
        seen.set_local(run_probe(&worker, &paths, env.clone()).await);
        let status = seen.status();
        assert_eq!(status[0], usable(Backend::ClaudeCode, "2.1.332"));
        assert_eq!(
            status[1].reason.as_deref(),
            Some("unknown: the worker's probe did not list it")
        );
        // Without the flag the script fails like a worker that lacks the subcommand.
        let failed = run_probe(&worker, &BackendPaths::default(), env)
            .await
            .unwrap_err();
        assert!(
            failed.contains("backends` failed (exit status: 2)"),
            "{failed}"
        );
        assert!(
            failed.ends_with(": error: unexpected argument 'backends' found"),
            "{failed}"
        );
    }

    #[test]
    fn the_probe_prints_the_statuses_as_json() {
        let json = serde_json::to_vec(&vec![usable(Backend::OpenCode, "1.18.33")]).unwrap();
        assert_eq!(
            parse_probe(&json).unwrap(),
            [usable(Backend::OpenCode, "1.18.33")]
        );
        let err = parse_probe(b"usage: chorus-worker ...").unwrap_err();
        assert!(err.contains("printed no list of backends"), "{err}");
    }
}
