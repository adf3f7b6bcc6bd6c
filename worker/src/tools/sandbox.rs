//! The sandbox of tool processes: what a bash call or background task may touch once
//! the permission gate has let it run.
//!
//! - **Landlock** (filesystem, TCP, scopes). The ruleset is built in the worker before
//!   the fork (opening paths allocates); the child only calls `restrict_self` (two
//!   system calls, no allocation) between fork and exec. Read-write: the workspace,
//!   the agent's private home and temp dir, and `[sandbox] read_write`. Read-only: the
//!   system (`SYSTEM_READ_ONLY`), the toolchains in the worker's own `$HOME`
//!   (`.cargo`, `.rustup`, …) and `[sandbox] read_only`. Everything else, the data
//!   directory's own files included, cannot be opened. With `network = off` and ABI
//!   ≥ 4, TCP connect and bind are denied. With ABI ≥ 6, signals to and abstract
//!   sockets of processes outside the sandbox are denied too. Landlock also denies
//!   ptrace and `/proc/<pid>/mem`/`cwd` of every process outside the sandbox, root
//!   included. It does not refuse `/proc/<pid>/environ` (measured on 6.18): the
//!   control plane and worker are non-dumpable (closed to other users' and same-user
//!   unprivileged processes), and the control plane blanks the secrets in its own
//!   environment block at start, which is what root could still read.
//! - **Resource limits** (`setrlimit` in the child): CPU seconds, file size and open
//!   files per process. The number of processes is bounded by the spawner's watchdog
//!   (`procs`), not by `RLIMIT_NPROC`, which counts every process of the user (the
//!   control plane's too) and does not bind root.
//! - Where Landlock cannot be enforced, a policy with `run_unsandboxed` runs the command
//!   with a warning in its result; otherwise the call is refused with the reason.
//!
//! Pure choices (which paths, what the result says) are separate from the system calls.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chorus_proto::domain::{ResourceLimits, SandboxPolicy};
use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, LandlockStatus, Ruleset,
    RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope, path_beneath_rules,
};
use nix::sys::resource::{Resource, setrlimit};
use tokio::process::Command;

/// The Landlock ABI whose rights we ask for (best effort below it): every filesystem
/// right including device ioctls (5), TCP (4), signal and socket scopes (6).
const TARGET_ABI: ABI = ABI::V6;

/// System paths tool processes may read and execute.
pub const SYSTEM_READ_ONLY: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/opt",
    "/proc",
    "/sys",
    "/nix/store",
    "/run/systemd/resolve",
];

/// Device files tool processes may read and write.
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
    "/dev/tty",
    "/dev/ptmx",
    "/dev/pts",
    "/dev/shm",
];

/// Toolchain directories in the worker's own `$HOME`, readable when they exist.
pub const HOME_TOOLCHAINS: &[&str] = &[
    ".cargo",
    ".rustup",
    ".pyenv",
    ".nvm",
    ".local/bin",
    ".local/lib",
];

/// What the running kernel offers, probed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Support {
    /// Landlock works at this ABI.
    Landlock { abi: i32 },
    /// Landlock is missing or switched off.
    Unavailable(&'static str),
}

impl Support {
    /// How `GET /api/agents/{name}` and the logs name it.
    pub fn describe(self) -> String {
        match self {
            Support::Landlock { abi } => format!("landlock (abi {abi})"),
            Support::Unavailable(why) => format!("unavailable: {why}"),
        }
    }
}

/// Probes Landlock once, on a throwaway thread that restricts itself (Landlock
/// applies to the calling thread only, so nothing else is touched).
pub fn support() -> Support {
    static SUPPORT: OnceLock<Support> = OnceLock::new();
    *SUPPORT.get_or_init(|| {
        std::thread::spawn(probe)
            .join()
            .unwrap_or(Support::Unavailable("the Landlock probe crashed"))
    })
}

fn probe() -> Support {
    let status = Ruleset::default()
        .handle_access(AccessFs::from_all(ABI::V1))
        .and_then(|r| r.create())
        .and_then(|r| r.restrict_self());
    match status {
        Ok(status) => match status.landlock {
            LandlockStatus::Available { effective_abi, .. }
                if status.ruleset != RulesetStatus::NotEnforced =>
            {
                Support::Landlock {
                    abi: effective_abi as i32,
                }
            }
            LandlockStatus::NotEnabled => {
                Support::Unavailable("Landlock is built into the kernel but not enabled (lsm=)")
            }
            LandlockStatus::NotImplemented => {
                Support::Unavailable("the kernel has no Landlock (Linux 5.13 or later needed)")
            }
            LandlockStatus::Available { .. } => {
                Support::Unavailable("the kernel did not enforce a Landlock ruleset")
            }
        },
        Err(_) => Support::Unavailable("creating a Landlock ruleset failed"),
    }
}

/// The sandbox of one agent's tool processes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sandbox {
    pub policy: SandboxPolicy,
    pub workspace: PathBuf,
    /// HOME and TMPDIR of tool processes: the agent directory's `home/` and `tmp/`
    /// (outside the workspace, so the file tools cannot write them).
    pub home: PathBuf,
    pub tmp: PathBuf,
}

/// Everything a spawn needs, built before the fork.
pub struct Prepared {
    ruleset: Option<RulesetCreated>,
    limits: ResourceLimits,
    pub home: PathBuf,
    pub tmp: PathBuf,
    /// Toolchain variables (see `toolchain_env`).
    env: Vec<(&'static str, std::ffi::OsString)>,
    /// Said at the top of the result when the command runs unconfined.
    pub warning: Option<String>,
}

impl std::fmt::Debug for Prepared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prepared")
            .field("landlock", &self.ruleset.is_some())
            .field("limits", &self.limits)
            .finish()
    }
}

/// The paths of a ruleset: (read-only, read-write). Pure.
pub fn paths(sandbox: &Sandbox, worker_home: Option<&Path>) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let policy = &sandbox.policy;
    let mut read_only: Vec<PathBuf> = SYSTEM_READ_ONLY.iter().map(PathBuf::from).collect();
    if let Some(home) = worker_home {
        read_only.extend(HOME_TOOLCHAINS.iter().map(|dir| home.join(dir)));
    }
    read_only.extend(policy.read_only.iter().map(PathBuf::from));
    let mut read_write: Vec<PathBuf> = DEVICES.iter().map(PathBuf::from).collect();
    read_write.push(sandbox.workspace.clone());
    read_write.extend([sandbox.home.clone(), sandbox.tmp.clone()]);
    read_write.extend(policy.read_write.iter().map(PathBuf::from));
    (read_only, read_write)
}

impl Sandbox {
    /// The sandbox of the agent whose directory is `agent_dir` (`workspace/`,
    /// `home/`, `tmp/` inside it).
    pub fn for_agent(policy: SandboxPolicy, agent_dir: &Path) -> Self {
        Sandbox {
            policy,
            workspace: agent_dir.join("workspace"),
            home: agent_dir.join("home"),
            tmp: agent_dir.join("tmp"),
        }
    }

    /// Builds the ruleset for one spawn; `Err` is what the model reads when the
    /// command is refused because the sandbox cannot be enforced.
    pub fn prepare(&self) -> Result<Prepared, String> {
        let policy = &self.policy;
        let home = private_dir(&self.home, "home")?;
        let tmp = private_dir(&self.tmp, "temp")?;
        let unenforceable = match support() {
            Support::Unavailable(why) => Some(format!("the sandbox is unavailable: {why}")),
            Support::Landlock { abi } if !policy.network && abi < 4 => Some(format!(
                "network = \"off\" needs Landlock ABI 4 (Linux 6.7) and the kernel has ABI {abi}"
            )),
            Support::Landlock { .. } => None,
        };
        if let Some(why) = unenforceable {
            if !policy.run_unsandboxed {
                return Err(format!(
                    "refused: {why}, and this agent's tool processes may not run unconfined; an operator can allow it with [sandbox] when_unavailable = \"warn\" in chorus.toml"
                ));
            }
            let env = toolchain_env(
                std::env::var_os("HOME").map(PathBuf::from).as_deref(),
                &home,
            );
            return Ok(Prepared {
                ruleset: None,
                limits: policy.limits,
                env,
                home,
                tmp,
                warning: Some(format!(
                    "warning: {why}; this command ran without a sandbox ([sandbox] when_unavailable = \"warn\")"
                )),
            });
        }
        let worker_home = std::env::var_os("HOME").map(PathBuf::from);
        let (read_only, read_write) = paths(self, worker_home.as_deref());
        let ruleset = build(&read_only, &read_write, policy.network)
            .map_err(|e| format!("refused: the sandbox could not be built: {e}"))?;
        let env = toolchain_env(worker_home.as_deref(), &home);
        Ok(Prepared {
            ruleset: Some(ruleset),
            limits: policy.limits,
            env,
            home,
            tmp,
            warning: None,
        })
    }
}

/// The agent's home or temp dir, created private (0700) when missing.
fn private_dir(dir: &Path, what: &str) -> Result<PathBuf, String> {
    if !dir.is_dir() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .recursive(true)
            .create(dir)
            .map_err(|e| {
                format!(
                    "refused: cannot create the {what} directory {}: {e}",
                    dir.display()
                )
            })?;
    }
    Ok(dir.to_path_buf())
}

/// With `HOME` moved to the agent's own directory, toolchains installed in the
/// worker's home are found through their variables (read-only there), and cargo's
/// own home (registry cache, installed tools) is the agent's. Variables the worker
/// already has are passed on by `bash::environment` as they are, not here.
pub fn toolchain_env(
    worker_home: Option<&Path>,
    agent_home: &Path,
) -> Vec<(&'static str, std::ffi::OsString)> {
    let mut env = vec![("CARGO_HOME", agent_home.join(".cargo").into_os_string())];
    if let Some(home) = worker_home {
        for (name, dir) in [("RUSTUP_HOME", ".rustup"), ("PYENV_ROOT", ".pyenv")] {
            if home.join(dir).is_dir() {
                env.push((name, home.join(dir).into_os_string()));
            }
        }
    }
    env
}

fn build(
    read_only: &[PathBuf],
    read_write: &[PathBuf],
    network: bool,
) -> Result<RulesetCreated, landlock::RulesetError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))?
        .scope(Scope::from_all(TARGET_ABI))?;
    if !network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    ruleset
        .create()?
        .add_rules(path_beneath_rules(
            read_only,
            AccessFs::from_read(TARGET_ABI),
        ))?
        .add_rules(path_beneath_rules(
            read_write,
            AccessFs::from_all(TARGET_ABI),
        ))
}

/// Applies `prepared` to `command` in the child, between fork and exec: limits first,
/// then Landlock (which also sets `no_new_privs`).
#[allow(unsafe_code)]
pub fn apply(command: &mut Command, prepared: Prepared) {
    command
        .env("HOME", &prepared.home)
        .env("TMPDIR", &prepared.tmp)
        .envs(prepared.env.iter().map(|(k, v)| (k, v)));
    let limits = prepared.limits;
    let mut ruleset = prepared.ruleset;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (setrlimit, prctl, landlock_restrict_self, close); the ruleset was
    // built before the fork, and its success path allocates nothing.
    unsafe {
        command.pre_exec(move || {
            set_limit(Resource::RLIMIT_CPU, limits.cpu_secs, 1)?;
            set_limit(Resource::RLIMIT_FSIZE, limits.file_size_bytes, 0)?;
            set_limit(Resource::RLIMIT_NOFILE, limits.open_files, 0)?;
            if let Some(ruleset) = ruleset.take() {
                ruleset
                    .restrict_self()
                    .map_err(|_| std::io::Error::other("Landlock restrict_self failed"))?;
            }
            Ok(())
        });
    }
}

/// Soft limit `value`, hard limit `value + slack` (CPU: SIGXCPU first, SIGKILL a second
/// later); 0 leaves the limit alone. Never raises a limit already lower.
fn set_limit(resource: Resource, value: u64, slack: u64) -> std::io::Result<()> {
    if value == 0 {
        return Ok(());
    }
    let (soft, hard) = nix::sys::resource::getrlimit(resource)?;
    let hard = hard.min(value.saturating_add(slack));
    setrlimit(resource, soft.min(value).min(hard), hard)?;
    Ok(())
}

/// What to add to a result whose command ended in a way a limit explains (a signal, or
/// bash's 128+signal exit code); `None` when no limit explains it. Pure.
pub fn limit_note(
    signal: Option<i32>,
    code: Option<i32>,
    limits: &ResourceLimits,
) -> Option<String> {
    let signal = signal.or(code.filter(|c| *c > 128 && *c < 160).map(|c| c - 128))?;
    if signal == nix::libc::SIGXCPU && limits.cpu_secs > 0 {
        return Some(format!(
            "killed: CPU time limit ({} s per process, [sandbox] cpu_secs) reached",
            limits.cpu_secs
        ));
    }
    if signal == nix::libc::SIGXFSZ && limits.file_size_bytes > 0 {
        return Some(format!(
            "killed: file size limit ({} bytes per file, [sandbox] file_size_bytes) reached",
            limits.file_size_bytes
        ));
    }
    None
}

#[cfg(test)]
#[path = "sandbox_tests.rs"]
mod tests;
