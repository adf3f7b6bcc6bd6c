//! A stdio MCP server's process: started like a CLI backend or a bash call (a shell
//! that `exec`s the program, in a session and process group of its own, the death
//! signal, the allow-listed environment, forked on the spawner thread and marked),
//! in the agent's sandbox with the program's install directory readable, plus only
//! its own `env` (no other tool process gets it). Its stdin and stdout are the MCP
//! pipes; its stderr is kept as a bounded tail for the errors shown. The whole group
//! is killed when the process is dropped.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::Place;
use crate::tools::sandbox::Extra;

pub struct Process {
    child: Child,
    group: Pid,
    pipes: Option<(ChildStdout, ChildStdin)>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Option<tokio::task::JoinHandle<()>>,
}

impl Process {
    pub async fn spawn(
        command: &str,
        args: &[String],
        env: &BTreeMap<String, String>,
        place: &Place,
    ) -> Result<Process, String> {
        let program = find_program(command)?;
        let mut shell =
            crate::tools::bash::shell_command_in(&place.root, &place.root, "exec \"$0\" \"$@\"");
        shell
            .arg(&program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let mut max_processes = 0;
        if let Some(sandbox) = &place.sandbox {
            let mut extra = Extra::default();
            if let Ok(dir) = crate::tools::sandbox::install_dir(&program) {
                extra.read_only.push(dir);
            }
            let prepared = sandbox.prepare_with(&extra)?;
            if let Some(warning) = &prepared.warning {
                tracing::warn!(program = %program.display(), "{warning}");
            }
            crate::tools::sandbox::apply(&mut shell, prepared);
            max_processes = sandbox.policy.limits.max_processes;
        }
        // After the sandbox's HOME and TMPDIR: the server's own settings are last.
        shell.envs(env);
        let mut child = crate::tools::procs::spawn_limited(shell, max_processes)
            .await
            .map_err(|e| format!("could not start {}: {e}", program.display()))?;
        let (Some(pid), Some(stdout), Some(stdin), Some(stderr)) = (
            child.id(),
            child.stdout.take(),
            child.stdin.take(),
            child.stderr.take(),
        ) else {
            return Err("it started without its pipes".into());
        };
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = tokio::spawn(crate::backends::spawn::read_tail(stderr, tail.clone()));
        Ok(Process {
            child,
            group: Pid::from_raw(pid as i32),
            pipes: Some((stdout, stdin)),
            stderr: tail,
            stderr_done: Some(stderr_done),
        })
    }

    /// Its stdout and stdin, for the MCP client (once).
    pub fn take_pipes(&mut self) -> Option<(ChildStdout, ChildStdin)> {
        self.pipes.take()
    }

    /// Whether it has exited.
    pub fn exited(&mut self) -> bool {
        !matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits a little for it to exit and for its stderr to be read to the end, so
    /// the error shown has what it said last.
    pub async fn settle(&mut self) {
        let _ = tokio::time::timeout(std::time::Duration::from_secs(1), self.child.wait()).await;
        if let Some(done) = self.stderr_done.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), done).await;
        }
    }

    /// The end of what it wrote to stderr.
    pub fn stderr_tail(&self) -> String {
        let tail = self
            .stderr
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = killpg(self.group, Signal::SIGKILL);
        crate::tools::procs::ended(self.group.as_raw() as u32);
    }
}

/// The program: a path as given, else found on the worker's `PATH`.
fn find_program(command: &str) -> Result<PathBuf, String> {
    if command.contains('/') {
        let path = PathBuf::from(command);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{command} is not a file"))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(command))
        .find(|path| is_executable(path))
        .ok_or_else(|| format!("{command} is not on the worker's PATH; give its full path"))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}
