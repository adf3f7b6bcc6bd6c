//! `bash`: one shell command in the workspace, bounded in time and output, leaving
//! nothing behind.
//!
//! - The command runs as `/bin/bash -c <command>` (`/bin/sh` where there is no bash),
//!   with cwd = the workspace, stdin = /dev/null, in a new session (its own process
//!   group, no controlling terminal).
//! - The environment is cleared and rebuilt from an allow-list (`environment`), so
//!   the worker's credential, provider keys and any other `CHORUS_*` or `*_API_KEY`
//!   variable are never visible to the command.
//! - stdout and stderr are read concurrently (a full pipe never stalls the command)
//!   and each is capped, keeping its head and tail with a note of what was cut.
//! - When the shell ends, times out, or the tool's future is dropped (the run was
//!   cancelled), the whole process group gets SIGKILL, so no background process or
//!   grandchild survives the call. A process that leaves the group on purpose
//!   (`setsid`) is beyond a process-group kill; the worker, a subreaper, adopts and
//!   ends it when its parent is gone (`procs`). The shell dies with the worker
//!   (`PR_SET_PDEATHSIG`), and carries the worker's mark (`procs::MARK_VAR`).
//! - In a worker, the command runs in the agent's sandbox (`sandbox`: Landlock and
//!   resource limits), with `HOME` and `TMPDIR` the agent's private directories.

use std::collections::VecDeque;
use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use chorus_proto::domain::ResourceLimits;
use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::Command;

use super::ToolOutcome;

/// Timeout when the call gives none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
/// Longest timeout a call may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);
/// Bytes of each of stdout and stderr kept (half from the start, half from the end).
pub const DEFAULT_OUTPUT_CAP: usize = 30_000;
/// After the shell has ended or been killed, how long its pipes may take to drain.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// How long to wait for killed processes to be gone before returning.
const EXIT_GRACE: Duration = Duration::from_secs(1);

/// Variables passed through from the worker's own environment when set. The worker
/// itself starts with a cleared environment; this list keeps even that minimal.
pub const PASSED_VARS: &[&str] = &[
    "PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "USER", "LOGNAME",
];
/// Variables the command always gets: HOME is the workspace and TMPDIR the worker's or
/// /tmp, except in a worker, where the sandbox replaces both with the agent's private
/// directories (`sandbox::apply`: dotfiles never land where the file tools write);
/// a dumb terminal, no colour codes, no pager, and git never waits for a password
/// prompt.
pub const SET_VARS: &[&str] = &[
    "HOME",
    "TMPDIR",
    "TERM",
    "NO_COLOR",
    "PAGER",
    "GIT_TERMINAL_PROMPT",
];
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BashConfig {
    pub default_timeout: Duration,
    pub max_timeout: Duration,
    /// Bytes kept of each output stream.
    pub output_cap: usize,
    /// The agent's sandbox; `None` runs unconfined (unit tests of the tools).
    pub sandbox: Option<super::sandbox::Sandbox>,
}

impl Default for BashConfig {
    fn default() -> Self {
        BashConfig {
            default_timeout: DEFAULT_TIMEOUT,
            max_timeout: MAX_TIMEOUT,
            output_cap: DEFAULT_OUTPUT_CAP,
            sandbox: None,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    pub command: String,
    /// Seconds.
    pub timeout: Option<f64>,
    /// Start a background task instead (see `tasks`).
    #[serde(default)]
    pub run_in_background: bool,
}

/// The whole environment a command sees (see `PASSED_VARS` and `SET_VARS`).
pub fn environment(root: &Path) -> Vec<(&'static str, OsString)> {
    let mut env: Vec<(&'static str, OsString)> = PASSED_VARS
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (*name, value)))
        .collect();
    if !env.iter().any(|(name, _)| *name == "PATH") {
        env.push(("PATH", DEFAULT_PATH.into()));
    }
    if !env.iter().any(|(name, _)| *name == "LANG") {
        env.push(("LANG", "C.UTF-8".into()));
    }
    let tmp = std::env::var_os("TMPDIR").unwrap_or_else(|| "/tmp".into());
    env.extend([
        ("HOME", root.as_os_str().to_owned()),
        ("TMPDIR", tmp),
        ("TERM", "dumb".into()),
        ("NO_COLOR", "1".into()),
        ("PAGER", "cat".into()),
        ("GIT_TERMINAL_PROMPT", "0".into()),
    ]);
    env.extend(super::safe_env::git_safety_env(root));
    env
}

/// How the command ended.
enum End {
    Exited(std::io::Result<ExitStatus>),
    TimedOut,
}

pub async fn run(root: &Path, args: BashArgs, config: &BashConfig) -> ToolOutcome {
    run_in(root, root, args, config).await
}

/// [`run`], starting in `cwd` (a run's working directory under the workspace `root`,
/// which stays the command's home and git's ceiling).
pub async fn run_in(root: &Path, cwd: &Path, args: BashArgs, config: &BashConfig) -> ToolOutcome {
    if args.command.trim().is_empty() {
        return ToolOutcome::error("command is empty; give the shell command to run");
    }
    let max = config.max_timeout.as_secs_f64();
    let (limit, capped) = match args.timeout {
        None => (config.default_timeout, false),
        Some(t) if !(t.is_finite() && t > 0.0) => {
            return ToolOutcome::error(format!(
                "timeout must be a positive number of seconds (at most {})",
                seconds(config.max_timeout)
            ));
        }
        Some(t) => (Duration::from_secs_f64(t.min(max)), t > max),
    };
    let shell = shell();
    let mut command = shell_command_in(root, cwd, &args.command);
    command.stderr(Stdio::piped()).kill_on_drop(true);
    let (warning, limits) = match confine(&mut command, config.sandbox.as_ref()) {
        Ok(confined) => confined,
        Err(refusal) => return ToolOutcome::error(refusal),
    };
    let mut child = match super::procs::spawn_limited(command, limits.max_processes).await {
        Ok(child) => child,
        Err(e) => {
            return ToolOutcome::error(format!(
                "could not start {shell} in the workspace {}: {e}",
                cwd.display()
            ));
        }
    };
    let (Some(pid), Some(stdout), Some(stderr)) =
        (child.id(), child.stdout.take(), child.stderr.take())
    else {
        return ToolOutcome::error("the shell started without its output pipes");
    };
    let Ok(pid) = i32::try_from(pid) else {
        return ToolOutcome::error(format!("the shell has an unusable process id {pid}"));
    };
    // From here on, dropping this future (cancellation) kills the group.
    let mut group = ProcessGroup {
        id: Pid::from_raw(pid),
        armed: true,
    };
    let mut out = Capture::new(config.output_cap);
    let mut err = Capture::new(config.output_cap);
    let mut left_behind = false;
    let mut drained = true;
    let end = {
        let readers = async { tokio::join!(out.fill(stdout), err.fill(stderr)) };
        let mut readers = std::pin::pin!(readers);
        let mut readers_done = false;
        let deadline = tokio::time::Instant::now() + limit;
        let status = loop {
            tokio::select! {
                status = child.wait() => break Some(status),
                _ = &mut readers, if !readers_done => readers_done = true,
                () = tokio::time::sleep_until(deadline) => break None,
            }
        };
        let end = match status {
            Some(status) => {
                // The shell is gone; whatever is left in its group was put in the
                // background, and a bash call does not outlive itself.
                left_behind = group.kill();
                End::Exited(status)
            }
            None => {
                group.kill();
                let _ = tokio::time::timeout(DRAIN_GRACE, child.wait()).await;
                End::TimedOut
            }
        };
        if !readers_done {
            drained = tokio::time::timeout(DRAIN_GRACE, &mut readers)
                .await
                .is_ok();
        }
        end
    };
    if left_behind || matches!(end, End::TimedOut) {
        group.wait_gone(EXIT_GRACE).await;
    }
    // The leader is reaped; its id may be reused, so never signal it again.
    group.armed = false;
    let too_many = super::procs::hit_process_limit(pid as u32);

    let ended_as = match &end {
        End::Exited(Ok(status)) => Some((status.signal(), status.code())),
        _ => None,
    };
    let (headline, is_error) = match end {
        End::Exited(Ok(status)) => (describe_status(status), !status.success()),
        End::Exited(Err(e)) => (format!("could not wait for the command: {e}"), true),
        End::TimedOut => (
            format!(
                "timed out after {} s; the command and everything it started were killed",
                seconds(limit)
            ),
            true,
        ),
    };
    let mut text = String::new();
    if let Some(warning) = warning {
        text.push_str(&warning);
        text.push('\n');
    }
    text.push_str(&headline);
    if capped {
        text.push_str(&format!(
            " (the timeout was capped at {} s)",
            seconds(config.max_timeout)
        ));
    }
    text.push('\n');
    if too_many {
        text.push_str(&format!(
            "killed: process limit ({} processes per command, [sandbox] max_processes) reached; the command and everything it started were killed\n",
            limits.max_processes
        ));
    } else if let Some((signal, code)) = ended_as
        && let Some(note) = super::sandbox::limit_note(signal, code, &limits)
    {
        text.push_str(&note);
        text.push('\n');
    }
    for (name, capture) in [("stdout", &out), ("stderr", &err)] {
        if capture.total > 0 {
            text.push_str(&format!("--- {name} ---\n"));
            text.push_str(&capture.render());
            if !text.ends_with('\n') {
                text.push('\n');
            }
        }
    }
    if out.total == 0 && err.total == 0 {
        text.push_str("(no output)\n");
    }
    if config.sandbox.is_some()
        && let Some(note) = super::sandbox::terminal_note(&text)
    {
        text.push_str(note);
        text.push('\n');
    }
    if left_behind {
        text.push_str("note: processes the command left running in the background were stopped; a bash call ends everything it started\n");
    }
    if !drained {
        text.push_str("note: the output may be incomplete: a process that left the command's process group kept it open\n");
    }
    ToolOutcome {
        content: text,
        is_error,
        malformed: false,
    }
}

/// A shell running `script` in the workspace, in a session (and process group) of its
/// own with no terminal, with the allow-listed environment, no stdin and stdout piped.
pub fn shell_command(root: &Path, script: &str) -> Command {
    shell_command_in(root, root, script)
}

/// [`shell_command`], starting in `cwd` (a directory under the workspace `root`).
pub fn shell_command_in(root: &Path, cwd: &Path, script: &str) -> Command {
    let mut command = Command::new(shell());
    command
        .arg("-c")
        .arg(script)
        .current_dir(cwd)
        .env_clear()
        .envs(environment(root))
        .stdin(Stdio::null())
        .stdout(Stdio::piped());
    if let Some(mark) = super::procs::mark() {
        command.env(super::procs::MARK_VAR, mark);
    }
    own_session(&mut command);
    die_with_the_worker(&mut command);
    command
}

/// `setsid`: the shell leads a new session and process group, with no controlling
/// terminal (the worker's session may have the terminal `chorus` was started from; a
/// tool process must not be able to open `/dev/tty` or signal that session). Its
/// group id is its pid, as with `process_group(0)`, which it replaces (a group leader
/// cannot call `setsid`).
#[allow(unsafe_code)]
fn own_session(command: &mut Command) {
    // SAFETY: the closure runs between fork and exec and makes one async-signal-safe
    // system call (setsid); it allocates nothing.
    unsafe {
        command.pre_exec(|| {
            nix::unistd::setsid().map_err(std::io::Error::from)?;
            Ok(())
        });
    }
}

/// Puts `command` in `sandbox` (when there is one): the warning to show when it runs
/// unconfined, and its limits; `Err` is the refusal the model reads.
pub fn confine(
    command: &mut Command,
    sandbox: Option<&super::sandbox::Sandbox>,
) -> Result<(Option<String>, ResourceLimits), String> {
    let Some(sandbox) = sandbox else {
        return Ok((None, ResourceLimits::default()));
    };
    let prepared = sandbox.prepare()?;
    let warning = prepared.warning.clone();
    super::sandbox::apply(command, prepared);
    Ok((warning, sandbox.policy.limits))
}

/// `PR_SET_PDEATHSIG = SIGKILL`: the shell dies with the thread that forks it, which
/// `procs::spawn` makes a thread that lives as long as the worker.
#[allow(unsafe_code)]
fn die_with_the_worker(command: &mut Command) {
    let worker = std::process::id();
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (prctl, getppid); it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // The worker may have died before prctl took effect; then nobody would
            // deliver the signal, so give up now.
            if nix::unistd::getppid().as_raw() as u32 != worker {
                return Err(std::io::Error::other("the worker exited during the spawn"));
            }
            Ok(())
        });
    }
}

/// The shell commands run in.
pub fn shell() -> &'static str {
    if Path::new("/bin/bash").exists() {
        "/bin/bash"
    } else {
        "/bin/sh"
    }
}

pub fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit code {code}"),
        (None, Some(signal)) => match Signal::try_from(signal) {
            Ok(signal) => format!("killed by signal {}", signal.as_str()),
            Err(_) => format!("killed by signal {signal}"),
        },
        (None, None) => "ended without an exit code".to_string(),
    }
}

/// "5", or "1.5" for fractions.
fn seconds(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{}", d.as_secs())
    } else {
        format!("{s:.1}")
    }
}

/// The command's process group; killed on drop while armed.
struct ProcessGroup {
    id: Pid,
    armed: bool,
}

impl ProcessGroup {
    /// SIGKILL to every process of the group; whether there was anyone to kill.
    fn kill(&self) -> bool {
        killpg(self.id, Signal::SIGKILL).is_ok()
    }

    /// Waits (bounded) until no process of the group exists any more.
    async fn wait_gone(&self, grace: Duration) {
        let deadline = tokio::time::Instant::now() + grace;
        while killpg(self.id, None) != Err(Errno::ESRCH) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        if self.armed {
            self.kill();
        }
        super::procs::ended(self.id.as_raw() as u32);
    }
}

/// One output stream: the first and last bytes up to the cap, and the total.
struct Capture {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    head_cap: usize,
    tail_cap: usize,
    total: u64,
}

impl Capture {
    fn new(cap: usize) -> Self {
        Capture {
            head: Vec::new(),
            tail: VecDeque::new(),
            head_cap: cap / 2,
            tail_cap: cap - cap / 2,
            total: 0,
        }
    }

    async fn fill(&mut self, mut pipe: impl AsyncRead + Unpin) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => self.push(&buf[..n]),
            }
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let into_head = bytes.len().min(self.head_cap - self.head.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        self.tail.extend(&bytes[into_head..]);
        if self.tail.len() > self.tail_cap {
            let excess = self.tail.len() - self.tail_cap;
            self.tail.drain(..excess);
        }
    }

    fn render(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        if kept == self.total {
            let mut all = self.head.clone();
            all.extend_from_slice(&tail);
            return String::from_utf8_lossy(&all).into_owned();
        }
        format!(
            "{}\n[… {} bytes cut from the middle …]\n{}",
            String::from_utf8_lossy(&self.head),
            self.total - kept,
            String::from_utf8_lossy(&tail)
        )
    }
}

#[cfg(test)]
#[path = "bash_tests.rs"]
mod tests;
