//! Starting a CLI in the tool sandbox, and ending it.
//!
//! The CLI is started like a bash call (`tools::bash::shell_command_in`, then
//! `exec`s the program): a session and process group of its own with no terminal,
//! stdin the flavor's prompt (then closed) or `/dev/null`, `PR_SET_PDEATHSIG`, forked on the worker's spawner thread
//! (`tools::procs`, the worker a subreaper, the process marked), the allow-listed
//! environment plus the flavor's `Launch.env`, and the agent's sandbox plus the
//! CLI's [`Extra`] (its install directory readable; with the network off, the run
//! endpoint's port reachable). Its stdout is read as lines, its stderr kept as a
//! bounded tail. The whole group is killed on [`CliProcess::kill`] and when the
//! process handle is dropped (cancel, watchdog, the driver's end).

use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::process::Child;
use tokio::sync::mpsc;

use crate::tools::sandbox::{Extra, Sandbox};

/// Bytes of stderr kept (the end).
pub const STDERR_TAIL: usize = 8 * 1024;
/// Longest stdout line passed on; a longer one comes in pieces (which its parser
/// refuses as malformed lines).
pub const MAX_LINE: usize = 32 * 1024 * 1024;

/// What to start.
pub struct SpawnSpec<'a> {
    pub program: &'a Path,
    pub args: &'a [OsString],
    /// On top of the tool processes' environment.
    pub env: &'a [(String, String)],
    /// The workspace (home of the allow-listed environment, git's ceiling).
    pub root: &'a Path,
    pub cwd: &'a Path,
    /// `None`: unconfined (tests of the driver on a machine without Landlock).
    pub sandbox: Option<&'a Sandbox>,
    pub extra: Extra,
    /// Written to its stdin, which is then closed (`None`: stdin is `/dev/null`).
    pub stdin: Option<&'a str>,
}

/// A running CLI.
pub struct CliProcess {
    child: Child,
    group: Pid,
    /// Whether the group may still be signalled (false once the leader is reaped
    /// and the group seen gone).
    armed: bool,
    lines: mpsc::Receiver<String>,
    stderr: Arc<Mutex<VecDeque<u8>>>,
    stderr_done: Option<tokio::task::JoinHandle<()>>,
}

/// How it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stderr_tail: String,
}

/// The extra sandbox rules of a CLI: its install directory, and the endpoint port.
pub fn extra_for(program: &Path, endpoint_port: u16) -> Extra {
    let mut read_only: Vec<PathBuf> = Vec::new();
    if let Ok(dir) = crate::tools::sandbox::install_dir(program) {
        read_only.push(dir);
    }
    Extra {
        read_only,
        tcp_connect: vec![endpoint_port],
    }
}

impl CliProcess {
    /// Starts the CLI; `Err` says why it could not start.
    pub async fn spawn(spec: SpawnSpec<'_>) -> Result<CliProcess, String> {
        let mut command =
            crate::tools::bash::shell_command_in(spec.root, spec.cwd, "exec \"$0\" \"$@\"");
        command
            .arg(spec.program)
            .args(spec.args)
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if spec.stdin.is_some() {
            command.stdin(Stdio::piped());
        }
        let mut max_processes = 0;
        if let Some(sandbox) = spec.sandbox {
            let prepared = sandbox.prepare_with(&spec.extra)?;
            if let Some(warning) = &prepared.warning {
                tracing::warn!(program = %spec.program.display(), "{warning}");
            }
            crate::tools::sandbox::apply(&mut command, prepared);
            max_processes = sandbox.policy.limits.max_processes;
        }
        // After the sandbox's HOME and TMPDIR: the flavor's word is last.
        command.envs(spec.env.iter().map(|(k, v)| (k, v)));
        let mut child = crate::tools::procs::spawn_limited(command, max_processes)
            .await
            .map_err(|e| format!("could not start {}: {e}", spec.program.display()))?;
        let (Some(pid), Some(stdout), Some(stderr)) =
            (child.id(), child.stdout.take(), child.stderr.take())
        else {
            return Err("the CLI started without its output pipes".into());
        };
        if let (Some(text), Some(mut pipe)) = (spec.stdin, child.stdin.take()) {
            // Written beside the reading, so a CLI that prints before it has read
            // everything cannot block on a full stdout pipe; closed when written.
            let text = text.to_owned();
            tokio::spawn(async move {
                use tokio::io::AsyncWriteExt;
                if let Err(e) = pipe.write_all(text.as_bytes()).await {
                    tracing::warn!(error = %e, "could not write the prompt to the CLI's stdin");
                }
            });
        }
        let group = Pid::from_raw(pid as i32);
        let (tx, lines) = mpsc::channel(256);
        tokio::spawn(read_lines(stdout, tx));
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let stderr_done = tokio::spawn(read_tail(stderr, tail.clone()));
        Ok(CliProcess {
            child,
            group,
            armed: true,
            lines,
            stderr: tail,
            stderr_done: Some(stderr_done),
        })
    }

    /// The process id of the CLI (its group's id too).
    pub fn pid(&self) -> i32 {
        self.group.as_raw()
    }

    /// The next line of its stdout; `None` once stdout is closed.
    pub async fn next_line(&mut self) -> Option<String> {
        self.lines.recv().await
    }

    /// SIGKILL to its whole process group.
    pub fn kill(&self) {
        if self.armed {
            let _ = killpg(self.group, Signal::SIGKILL);
        }
    }

    /// Waits for the CLI to exit, then ends what it left in its group, and returns
    /// how it ended.
    pub async fn wait(&mut self) -> Ended {
        let status = self.child.wait().await;
        // What the CLI left in its group (its MCP server, a tool process) does not
        // outlive it.
        self.kill();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while killpg(self.group, None) != Err(Errno::ESRCH)
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.armed = false;
        if let Some(done) = self.stderr_done.take() {
            let _ = tokio::time::timeout(Duration::from_secs(2), done).await;
        }
        let stderr_tail = {
            let tail = self
                .stderr
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            String::from_utf8_lossy(&tail.iter().copied().collect::<Vec<u8>>()).into_owned()
        };
        use std::os::unix::process::ExitStatusExt;
        let (code, signal) = match status {
            Ok(status) => (status.code(), status.signal()),
            Err(_) => (None, None),
        };
        Ended {
            code,
            signal,
            stderr_tail,
        }
    }
}

impl Drop for CliProcess {
    fn drop(&mut self) {
        self.kill();
        crate::tools::procs::ended(self.group.as_raw() as u32);
    }
}

async fn read_lines(stdout: tokio::process::ChildStdout, tx: mpsc::Sender<String>) {
    let mut reader = BufReader::new(stdout);
    let mut line = Vec::new();
    loop {
        line.clear();
        match (&mut reader)
            .take(MAX_LINE as u64)
            .read_until(b'\n', &mut line)
            .await
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {
                let text = String::from_utf8_lossy(&line);
                let text = text.trim_end_matches(['\n', '\r']);
                if text.trim().is_empty() {
                    continue;
                }
                if tx.send(text.to_string()).await.is_err() {
                    return;
                }
            }
        }
    }
}

pub(crate) async fn read_tail(
    mut stderr: tokio::process::ChildStderr,
    tail: Arc<Mutex<VecDeque<u8>>>,
) {
    let mut buf = vec![0u8; 8 * 1024];
    loop {
        match stderr.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = tail
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                tail.extend(&buf[..n]);
                while tail.len() > STDERR_TAIL {
                    tail.pop_front();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::SandboxPolicy;
    use tokio::net::TcpListener;

    /// Runs `script` as the "CLI" (bash) in a sandbox with the network off and
    /// `extra`; returns its stdout lines.
    async fn run_confined(agent: &Path, network: bool, extra: Extra, script: &str) -> Vec<String> {
        run_confined_with(agent, network, extra, script, None).await
    }

    async fn run_confined_with(
        agent: &Path,
        network: bool,
        extra: Extra,
        script: &str,
        stdin: Option<&str>,
    ) -> Vec<String> {
        let sandbox = Sandbox::for_agent(
            SandboxPolicy {
                network,
                ..SandboxPolicy::default()
            },
            agent,
        );
        std::fs::create_dir_all(&sandbox.workspace).unwrap();
        let args = [OsString::from("-c"), OsString::from(script)];
        let mut cli = CliProcess::spawn(SpawnSpec {
            program: Path::new("/bin/bash"),
            args: &args,
            env: &[],
            root: &sandbox.workspace,
            cwd: &sandbox.workspace,
            sandbox: Some(&sandbox),
            extra,
            stdin,
        })
        .await
        .unwrap();
        let mut lines = Vec::new();
        while let Some(line) = tokio::time::timeout(Duration::from_secs(30), cli.next_line())
            .await
            .unwrap()
        {
            lines.push(line);
        }
        cli.wait().await;
        lines
    }

    #[tokio::test]
    async fn the_prompt_arrives_on_stdin_which_is_then_closed() {
        let agent = tempfile::tempdir().unwrap();
        let script = "while IFS= read -r line; do echo \"got: $line\"; done; echo eof";
        let lines = run_confined_with(
            agent.path(),
            false,
            Extra::default(),
            script,
            Some("first line\nsecond \"quoted\" line\n"),
        )
        .await;
        assert_eq!(
            lines,
            ["got: first line", "got: second \"quoted\" line", "eof"]
        );
        // Without a prompt, stdin is /dev/null: read sees its end at once.
        let lines = run_confined(agent.path(), false, Extra::default(), script).await;
        assert_eq!(lines, ["eof"]);
    }

    #[tokio::test]
    async fn with_the_network_off_only_the_endpoints_port_can_be_reached() {
        match crate::tools::sandbox::support() {
            crate::tools::sandbox::Support::Landlock { abi } if abi >= 4 => {}
            other => {
                eprintln!(
                    "skipped: TCP rules need Landlock ABI 4 ({})",
                    other.describe()
                );
                return;
            }
        }
        let agent = tempfile::tempdir().unwrap();
        // Both ports really listen: a refusal is the sandbox's, not a closed port's.
        let allowed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let other = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (allowed, other) = (
            allowed.local_addr().unwrap().port(),
            other.local_addr().unwrap().port(),
        );
        let probe = |port: u16| {
            format!(
                "(echo > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo {port}:open || echo {port}:refused"
            )
        };
        let script = format!("{}; {}", probe(allowed), probe(other));
        let rule = Extra {
            read_only: vec![],
            tcp_connect: vec![allowed],
        };
        let with_rule = run_confined(agent.path(), false, rule.clone(), &script).await;
        assert_eq!(
            with_rule,
            [format!("{allowed}:open"), format!("{other}:refused")]
        );
        // Without the rule the endpoint's port is refused too; with the network on,
        // both are open (the refusals above are the rule's doing).
        let without = run_confined(agent.path(), false, Extra::default(), &script).await;
        assert_eq!(
            without,
            [format!("{allowed}:refused"), format!("{other}:refused")]
        );
        let open = run_confined(agent.path(), true, rule, &script).await;
        assert_eq!(open, [format!("{allowed}:open"), format!("{other}:open")]);
    }

    #[test]
    fn the_install_directory_is_the_npm_package_of_the_resolved_program() {
        let root = tempfile::tempdir().unwrap();
        let package = root.path().join("lib/node_modules/cli");
        std::fs::create_dir_all(package.join("bin")).unwrap();
        std::fs::write(package.join("package.json"), "{}").unwrap();
        std::fs::write(package.join("bin/cli.exe"), "").unwrap();
        std::fs::create_dir_all(root.path().join("bin")).unwrap();
        std::os::unix::fs::symlink(package.join("bin/cli.exe"), root.path().join("bin/cli"))
            .unwrap();
        let extra = extra_for(&root.path().join("bin/cli"), 7);
        assert_eq!(extra.read_only, [package.canonicalize().unwrap()]);
        assert_eq!(extra.tcp_connect, [7]);
        // A package.json outside node_modules (a project, `/`) opens nothing more
        // than the program's own directory.
        std::fs::write(root.path().join("package.json"), "{}").unwrap();
        std::fs::write(root.path().join("bin/tool"), "").unwrap();
        let extra = extra_for(&root.path().join("bin/tool"), 7);
        assert_eq!(
            extra.read_only,
            [root.path().join("bin").canonicalize().unwrap()]
        );
        // The real CLIs, where installed: their npm package.
        if let Ok(dir) = crate::tools::sandbox::install_dir(Path::new("/usr/bin/claude")) {
            assert!(
                dir.ends_with("node_modules/@anthropic-ai/claude-code"),
                "{dir:?}"
            );
        }
    }
}

#[cfg(test)]
mod real_clis {
    use super::*;
    use chorus_proto::domain::SandboxPolicy;

    /// The installed CLIs (where they are) start in the tool sandbox with the network
    /// off: their package directory is all they need beyond the bash sandbox.
    #[tokio::test]
    async fn the_installed_clis_answer_their_version_inside_the_sandbox() {
        for program in ["/usr/bin/claude", "/usr/bin/opencode"] {
            let program = Path::new(program);
            if !program.exists() {
                eprintln!("skipped: {} is not installed", program.display());
                continue;
            }
            let agent = tempfile::tempdir().unwrap();
            let sandbox = Sandbox::for_agent(
                SandboxPolicy {
                    network: false,
                    run_unsandboxed: true,
                    ..SandboxPolicy::default()
                },
                agent.path(),
            );
            std::fs::create_dir_all(&sandbox.workspace).unwrap();
            let args = [OsString::from("--version")];
            let env = [
                ("DISABLE_AUTOUPDATER".to_string(), "1".to_string()),
                ("OPENCODE_DISABLE_AUTOUPDATE".to_string(), "1".to_string()),
                (
                    "XDG_CONFIG_HOME".to_string(),
                    sandbox.home.join(".config").display().to_string(),
                ),
                (
                    "XDG_CACHE_HOME".to_string(),
                    sandbox.home.join(".cache").display().to_string(),
                ),
                (
                    "XDG_DATA_HOME".to_string(),
                    sandbox.home.join(".local/share").display().to_string(),
                ),
                (
                    "XDG_STATE_HOME".to_string(),
                    sandbox.home.join(".local/state").display().to_string(),
                ),
            ];
            let mut cli = CliProcess::spawn(SpawnSpec {
                program,
                args: &args,
                env: &env,
                root: &sandbox.workspace,
                cwd: &sandbox.workspace,
                sandbox: Some(&sandbox),
                extra: extra_for(program, 1),
                stdin: None,
            })
            .await
            .unwrap();
            let mut lines = Vec::new();
            while let Some(line) = tokio::time::timeout(Duration::from_secs(30), cli.next_line())
                .await
                .unwrap()
            {
                lines.push(line);
            }
            let ended = cli.wait().await;
            assert_eq!(ended.code, Some(0), "{program:?}: {lines:?} {ended:?}");
            assert!(
                lines
                    .iter()
                    .any(|l| l.chars().next().is_some_and(|c| c.is_ascii_digit())),
                "{program:?}: {lines:?}"
            );
        }
    }
}
