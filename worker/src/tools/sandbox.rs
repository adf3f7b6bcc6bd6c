//! The sandbox of tool processes: what a bash call or background task may touch once
//! the permission gate has let it run.
//!
//! - **A session of its own** (`bash::shell_command`): no controlling terminal, stdin
//!   from /dev/null.
//! - **No capability** (`caps`): bounding, ambient, inheritable, permitted and
//!   effective sets emptied, securebits locked, `no_new_privs`, so a worker running
//!   as root starts tool processes that are uid 0 but powerless (no routes, addresses,
//!   host name or device nodes; and non-dumpable processes' `/proc/<pid>/environ` and
//!   `mem`, `chorus`'s and the worker's, are closed to them).
//! - **Landlock** (filesystem, TCP, scopes). The ruleset is built in the worker before
//!   the fork (opening paths allocates); the child only calls `restrict_self` (two
//!   system calls, no allocation) between fork and exec. Read-write: the workspace,
//!   the agent's private home and temp dir, `DEVICES`, and `[sandbox] read_write`,
//!   with every right but creating device nodes, which nothing grants. Read-only: the
//!   system (`SYSTEM_READ_ONLY`), the toolchains in the worker's own `$HOME`
//!   (`.cargo`, `.rustup`, …) and `[sandbox] read_only`. Everything else cannot be
//!   opened: the data directory's own files, every terminal (`/dev/tty`, `/dev/ptmx`,
//!   `/dev/pts/*`) and `/dev/shm` (so POSIX shared memory and semaphores, e.g.
//!   Python's `multiprocessing` locks, are not available). With `network = off` and
//!   ABI ≥ 4, TCP connect and bind are denied (a CLI backend's spawn may connect to its
//!   run endpoint's port: `Extra`, which also makes the CLI's install directory readable). With ABI ≥ 6, signals to and abstract
//!   sockets of processes outside the sandbox are denied too. Landlock also denies
//!   ptrace and `/proc/<pid>/mem`/`cwd` of every process outside the sandbox. It does
//!   not refuse `/proc/<pid>/environ` (measured on 6.18): with no capability, the
//!   kernel's own check (non-dumpable: `CAP_SYS_PTRACE` needed) refuses it for
//!   `chorus` and the worker, root included.
//! - **seccomp** (`seccomp`), installed last: what Landlock cannot see (terminal
//!   injection ioctls, eBPF, the keyring, modules, kexec, reboot, mounts, new
//!   namespaces, …). Built and tried on the kernel once per worker (`filter`).
//! - **Resource limits** (`setrlimit` in the child): CPU seconds, file size and open
//!   files per process. The number of processes is bounded by the spawner's watchdog
//!   (`procs`), not by `RLIMIT_NPROC`, which counts every process of the user (the
//!   control plane's too) and does not bind root.
//! - Where Landlock or the seccomp filter cannot be enforced, a policy with
//!   `run_unsandboxed` runs the command with what can be (capabilities are dropped
//!   regardless) and a warning in its result; otherwise the call is refused with the
//!   reason.
//!
//! The policy comes with each `AssignRun` (`AgentSettings.sandbox`: the `[sandbox]`
//! settings, the agent's network switch, whether to run unconfined where Landlock is
//! missing; home and temp dir are the agent directory's `home/` and `tmp/`), so the
//! worker's environment stays clean. In the child, between fork and exec and with no
//! allocation: `setsid` (`bash::shell_command`, beside `PR_SET_PDEATHSIG`), the
//! rlimits, every capability dropped, `restrict_self`, and the seccomp filter last.
//! Landlock is probed once per process on a throwaway thread (it restricts only the
//! calling thread); chorus probes the same way at start (`sandbox_probe`), logs the
//! result and shows it in `GET /api/agents/{name}`. The process count is watched by
//! the spawner thread every 200 ms, and a shell's group is killed past
//! `max_processes` (`procs::spawn_limited`). Cost: building the ruleset takes about
//! 0.3 ms per call; a `bash -c true` call took about 4 ms either way on a loaded
//! 2-core host (the difference is in the noise).
//!
//! Pure choices (which paths, what the result says) are separate from the system calls.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use chorus_proto::domain::{ResourceLimits, SandboxPolicy};
use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, LandlockStatus, NetPort,
    Ruleset, RulesetAttr, RulesetCreated, RulesetCreatedAttr, RulesetStatus, Scope,
    path_beneath_rules,
};
use nix::libc::sock_filter;
use nix::sys::resource::{Resource, setrlimit};
use tokio::process::Command;

use super::caps::CapDrop;
use super::seccomp;

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

/// Device files tool processes may read and write. No terminal (`/dev/tty`,
/// `/dev/ptmx`, `/dev/pts`: a pty of the host's is a way to type into its shells) and
/// no `/dev/shm` (shared with the host and every agent).
pub const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/random",
    "/dev/urandom",
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
        .and_then(landlock::Ruleset::create)
        .and_then(landlock::RulesetCreated::restrict_self);
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
    /// The seccomp filter, when the kernel takes it.
    filter: Option<&'static [sock_filter]>,
    caps: CapDrop,
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
            .field("seccomp", &self.filter.is_some())
            .field("caps", &self.caps)
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
        self.prepare_with(&Extra::default())
    }

    /// [`Sandbox::prepare`] with `extra` rules (a CLI backend's: its install
    /// directory readable, its run endpoint's port reachable with the network off).
    pub fn prepare_with(&self, extra: &Extra) -> Result<Prepared, String> {
        let policy = &self.policy;
        let home = private_dir(&self.home, "home")?;
        let tmp = private_dir(&self.tmp, "temp")?;
        let landlock_missing = match support() {
            Support::Unavailable(why) => Some(format!("the sandbox is unavailable: {why}")),
            Support::Landlock { abi } if !policy.network && abi < 4 => Some(format!(
                "network = \"off\" needs Landlock ABI 4 (Linux 6.7) and the kernel has ABI {abi}"
            )),
            Support::Landlock { .. } => None,
        };
        let filter = filter();
        let seccomp_missing = filter
            .err()
            .map(|why| format!("the seccomp filter is unavailable: {why}"));
        let missing: Vec<String> = landlock_missing
            .iter()
            .chain(&seccomp_missing)
            .cloned()
            .collect();
        if !missing.is_empty() && !policy.run_unsandboxed {
            return Err(format!(
                "refused: {}, and this agent's tool processes may not run unconfined; an operator can allow it with [sandbox] when_unavailable = \"warn\" in chorus.toml",
                missing.join("; ")
            ));
        }
        let worker_home = std::env::var_os("HOME").map(PathBuf::from);
        let ruleset = if landlock_missing.is_none() {
            let (mut read_only, read_write) = paths(self, worker_home.as_deref());
            read_only.extend(extra.read_only.iter().cloned());
            Some(
                build(&read_only, &read_write, policy.network, &extra.tcp_connect)
                    .map_err(|e| format!("refused: the sandbox could not be built: {e}"))?,
            )
        } else {
            None
        };
        let warning = (!missing.is_empty()).then(|| {
            let without = if ruleset.is_some() {
                "without its seccomp filter"
            } else {
                "without a sandbox"
            };
            format!(
                "warning: {}; this command ran {without} ([sandbox] when_unavailable = \"warn\")",
                missing.join("; ")
            )
        });
        Ok(Prepared {
            ruleset,
            filter: filter.ok(),
            caps: CapDrop::prepare(),
            limits: policy.limits,
            env: toolchain_env(worker_home.as_deref(), &home),
            home,
            tmp,
            warning,
        })
    }
}

/// The seccomp filter of tool processes, built and tried on this kernel once; `Err`
/// says why the kernel refuses it.
pub fn filter() -> Result<&'static [sock_filter], &'static str> {
    static FILTER: OnceLock<Result<Vec<sock_filter>, String>> = OnceLock::new();
    FILTER
        .get_or_init(|| {
            let program = seccomp::program();
            seccomp::probe(&program).map(|()| program)
        })
        .as_ref()
        .map(Vec::as_slice)
        .map_err(String::as_str)
}

/// The rights on read-write paths: everything but creating device nodes, which no
/// path grants (a block device or `/dev/mem` made in the workspace would bypass
/// every file rule).
pub fn read_write_access() -> BitFlags<AccessFs> {
    AccessFs::from_all(TARGET_ABI) & !(AccessFs::MakeChar | AccessFs::MakeBlock)
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
    tcp_connect: &[u16],
) -> Result<RulesetCreated, landlock::RulesetError> {
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(TARGET_ABI))?
        .scope(Scope::from_all(TARGET_ABI))?;
    if !network {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    let created = ruleset
        .create()?
        .add_rules(path_beneath_rules(
            read_only,
            AccessFs::from_read(TARGET_ABI),
        ))?
        .add_rules(path_beneath_rules(read_write, read_write_access()))?;
    if network {
        return Ok(created);
    }
    created.add_rules(
        tcp_connect.iter().map(|port| {
            Ok::<_, landlock::RulesetError>(NetPort::new(*port, AccessNet::ConnectTcp))
        }),
    )
}

/// Rules beyond the agent's policy for one kind of spawn. `Default`: none.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Extra {
    /// More paths readable (and executable).
    pub read_only: Vec<PathBuf>,
    /// TCP ports that may be connected to when the policy's network is off (any
    /// address: loopback is the only one a CLI is given). Ignored with the network on.
    pub tcp_connect: Vec<u16>,
}

/// A program's install directory: the program's path with symlinks resolved, then
/// up to the nearest directory holding a `package.json` inside a `node_modules` (an
/// npm package), else the program's own directory. Never more: a stray
/// `package.json` higher up (in `/`, a home) must not open a whole tree.
pub fn install_dir(program: &Path) -> std::io::Result<PathBuf> {
    let real = std::fs::canonicalize(program)?;
    let own = real.parent().map(Path::to_path_buf).unwrap_or(real.clone());
    let in_node_modules = |dir: &Path| {
        dir.parent()
            .is_some_and(|up| up.components().any(|c| c.as_os_str() == "node_modules"))
    };
    let package = own
        .ancestors()
        .find(|dir| in_node_modules(dir) && dir.join("package.json").is_file())
        .map(Path::to_path_buf);
    Ok(package.unwrap_or(own))
}

/// Applies `prepared` to `command` in the child, between fork and exec: limits, then
/// every capability dropped and `no_new_privs` (`caps`), then Landlock, then the
/// seccomp filter last (it refuses calls the steps before it make).
#[allow(unsafe_code)]
pub fn apply(command: &mut Command, prepared: Prepared) {
    command
        .env("HOME", &prepared.home)
        .env("TMPDIR", &prepared.tmp)
        .envs(prepared.env.iter().map(|(k, v)| (k, v)));
    let limits = prepared.limits;
    let caps = prepared.caps;
    let filter = prepared.filter;
    let mut ruleset = prepared.ruleset;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe
    // system calls (setrlimit, prctl, capset, landlock_restrict_self, seccomp, close);
    // the ruleset and the filter were built before the fork, and the success paths
    // allocate nothing. (std passes only the errno of a failure to the parent.)
    unsafe {
        command.pre_exec(move || {
            set_limit(Resource::RLIMIT_CPU, limits.cpu_secs, 1)?;
            set_limit(Resource::RLIMIT_FSIZE, limits.file_size_bytes, 0)?;
            set_limit(Resource::RLIMIT_NOFILE, limits.open_files, 0)?;
            caps.apply()?;
            if let Some(ruleset) = ruleset.take() {
                ruleset
                    .restrict_self()
                    .map_err(|_| std::io::Error::from_raw_os_error(nix::libc::EPERM))?;
            }
            if let Some(filter) = filter {
                seccomp::install(filter)?;
            }
            Ok(())
        });
    }
}

/// What to add to a bash result whose output shows a command failing to open a
/// terminal; `None` otherwise. Pure.
pub fn terminal_note(output: &str) -> Option<&'static str> {
    const TERMINALS: &[&str] = &[
        "/dev/tty",
        "/dev/ptmx",
        "/dev/pts",
        "pseudo-terminal",
        "openpty",
    ];
    const FAILURES: &[&str] = &[
        "Permission denied",
        "No such device",
        "not permitted",
        "No such file",
        "Inappropriate ioctl",
        "not a tty",
        "failed",
        "cannot",
        "can't",
        "unable",
    ];
    let found = output.lines().any(|line| {
        let lower = line.to_lowercase();
        TERMINALS.iter().any(|t| lower.contains(&t.to_lowercase()))
            && FAILURES.iter().any(|f| lower.contains(&f.to_lowercase()))
    });
    found.then_some(
        "note: tool processes have no terminal: /dev/tty, /dev/ptmx and /dev/pts cannot be opened and stdin is empty; run the command non-interactively (flags or environment variables that turn prompts off)",
    )
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
