//! Which CLIs this worker can run: each found (the path a flag names, else `PATH`),
//! asked `<program> --version` within [`VERSION_DEADLINE`], its answer read by the
//! flavor and compared with the oldest supported version. Done once at the start of
//! a dial-in worker (for `Hello.backends`) and by `chorus-worker backends` (which the
//! control plane runs for its launched workers). Before a CLI turn the runner asks
//! [`refusal`]: a CLI whose version was read and is too old is refused at once, not
//! run. What the probe read is remembered per executable file (path, size, mtime), so
//! a turn asks `--version` only of a CLI replaced since (an upgrade in place).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, SystemTime};

use chorus_proto::backend::CliFacts;
use chorus_proto::domain::{Backend, BackendStatus};

use super::flavor::Flavor;

/// How long `<program> --version` may take.
pub const VERSION_DEADLINE: Duration = Duration::from_secs(10);

/// Where this worker's CLIs and `chorus-tools` are (flags; `None`: looked up).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendPaths {
    pub claude_code: Option<PathBuf>,
    pub opencode: Option<PathBuf>,
    /// `None`: beside the worker's own executable.
    pub chorus_tools: Option<PathBuf>,
}

impl BackendPaths {
    /// The path given for `backend`'s CLI, if any.
    pub fn given(&self, backend: Backend) -> Option<&Path> {
        match backend {
            Backend::ClaudeCode => self.claude_code.as_deref(),
            Backend::OpenCode => self.opencode.as_deref(),
            Backend::Api => None,
        }
    }

    /// The `chorus-tools` executable: the flag's, else beside this executable.
    pub fn chorus_tools(&self) -> PathBuf {
        self.chorus_tools.clone().unwrap_or_else(|| {
            std::env::current_exe()
                .ok()
                .and_then(|exe| exe.parent().map(|dir| dir.join("chorus-tools")))
                .unwrap_or_else(|| PathBuf::from("chorus-tools"))
        })
    }
}

/// The flag that names a backend's CLI.
pub fn flag(backend: Backend) -> &'static str {
    match backend {
        Backend::ClaudeCode => "--claude-code",
        Backend::OpenCode => "--opencode",
        Backend::Api => "",
    }
}

/// The CLI's program: `given` if it is an executable file, else `facts.program` on
/// `path_var`. `Err` says why it is not usable, with the install line. Pure but for
/// looking at the file system.
pub fn locate(
    backend: Backend,
    given: Option<&Path>,
    path_var: Option<&std::ffi::OsStr>,
) -> Result<PathBuf, String> {
    let Some(facts) = backend.cli() else {
        return Err("the api backend runs no CLI".into());
    };
    if let Some(given) = given {
        return if is_executable(given) {
            Ok(given.to_path_buf())
        } else {
            Err(format!(
                "{} (given by {} or [backends]) is not an executable file; install it with `{}` or fix the path",
                given.display(),
                flag(backend),
                facts.install
            ))
        };
    }
    path_var
        .into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(facts.program))
        .find(|candidate| is_executable(candidate))
        .ok_or_else(|| missing(backend, facts))
}

fn missing(backend: Backend, facts: &CliFacts) -> String {
    format!(
        "'{}' is not on PATH; install it with `{}` (or name its path with {})",
        facts.program,
        facts.install,
        flag(backend)
    )
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// `(a, b, c)` as text.
fn version_text((major, minor, patch): (u32, u32, u32)) -> String {
    format!("{major}.{minor}.{patch}")
}

/// The status from what was found: the program, its `--version` output (or why it
/// gave none) and the flavor's reading of it. Pure.
pub fn status(
    backend: Backend,
    program: Result<&Path, &str>,
    output: Result<&str, &str>,
    flavor: Option<&dyn Flavor>,
) -> BackendStatus {
    let mut status = BackendStatus {
        backend,
        usable: false,
        version: None,
        reason: None,
        path: None,
    };
    let Some(facts) = backend.cli() else {
        status.usable = true;
        return status;
    };
    let program = match program {
        Ok(program) => program,
        Err(why) => {
            status.reason = Some(why.to_string());
            return status;
        }
    };
    status.path = Some(program.display().to_string());
    let output = match output {
        Ok(output) => output,
        Err(why) => {
            status.reason = Some(format!(
                "{} --version failed ({why}); reinstall it with `{}`",
                program.display(),
                facts.install
            ));
            return status;
        }
    };
    let Some(flavor) = flavor else {
        status.reason = Some(format!(
            "this chorus-worker build cannot drive {backend} yet; upgrade chorus-worker"
        ));
        return status;
    };
    let Some(version) = flavor.parse_version(output) else {
        status.reason = Some(format!(
            "{} --version printed no version Chorus can read ({:?}); install the supported one with `{}`",
            program.display(),
            output.trim().chars().take(80).collect::<String>(),
            facts.install
        ));
        return status;
    };
    status.version = Some(version_text(version));
    if version < facts.min_version {
        status.reason = Some(format!(
            "version {} is too old: {} or later is needed; install it with `{}`",
            version_text(version),
            facts.min_version_text(),
            facts.install
        ));
        return status;
    }
    status.usable = true;
    status
}

/// Runs `<program> --version` (deadline, a throwaway HOME of its own, no update
/// checks), started like every process of the worker's (`tools::procs`): a worker
/// ends any child of its own that the spawner did not start.
pub async fn version_output(program: &Path) -> Result<String, String> {
    static PROBES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let probe = PROBES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    // The CLIs are probed side by side: each gets a HOME no other probe removes.
    let home = std::env::temp_dir().join(format!("chorus-probe-{}-{probe}", std::process::id()));
    let _ = std::fs::create_dir_all(&home);
    let mut command = tokio::process::Command::new(program);
    command
        .arg("--version")
        .env("HOME", &home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("DISABLE_AUTOUPDATER", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let result = match crate::tools::procs::spawn(command).await {
        Ok(child) => {
            let pid = child.id();
            let output = tokio::time::timeout(VERSION_DEADLINE, child.wait_with_output()).await;
            if let Some(pid) = pid {
                crate::tools::procs::ended(pid);
            }
            output
        }
        Err(e) => Ok(Err(e)),
    };
    let _ = std::fs::remove_dir_all(&home);
    match result {
        Err(_) => Err(format!(
            "it did not answer within {} s",
            VERSION_DEADLINE.as_secs()
        )),
        Ok(Err(e)) => Err(e.to_string()),
        Ok(Ok(output)) if !output.status.success() => Err(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )),
        Ok(Ok(output)) => Ok(String::from_utf8_lossy(&output.stdout).into_owned()),
    }
}

/// One executable file as the probe saw it: an upgrade in place changes its size or
/// modification time, so it is probed again.
type FileKey = (Backend, PathBuf, u64, Option<SystemTime>);

fn file_key(backend: Backend, program: &Path) -> Option<FileKey> {
    let meta = std::fs::metadata(program).ok()?;
    Some((
        backend,
        program.to_path_buf(),
        meta.len(),
        meta.modified().ok(),
    ))
}

/// What the probe read from each file whose version it could read (a failed or
/// timed-out `--version` is not remembered: it may answer next time).
static READ: LazyLock<Mutex<HashMap<FileKey, BackendStatus>>> = LazyLock::new(Default::default);

fn remembered() -> std::sync::MutexGuard<'static, HashMap<FileKey, BackendStatus>> {
    READ.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Probes the found `program` (once per file, see [`READ`]).
async fn probe_found(backend: Backend, program: &Path, flavor: &dyn Flavor) -> BackendStatus {
    let key = file_key(backend, program);
    if let Some(known) = key.as_ref().and_then(|k| remembered().get(k).cloned()) {
        return known;
    }
    let output = version_output(program).await;
    let found = status(
        backend,
        Ok(program),
        output.as_deref().map_err(String::as_str),
        Some(flavor),
    );
    if let Some(key) = key.filter(|_| found.version.is_some()) {
        remembered().insert(key, found.clone());
    }
    found
}

/// Probes one CLI backend.
pub async fn probe_one(
    backend: Backend,
    given: Option<&Path>,
    flavor: Option<&dyn Flavor>,
) -> BackendStatus {
    let path_var = std::env::var_os("PATH");
    match (locate(backend, given, path_var.as_deref()), flavor) {
        (Err(why), _) => status(backend, Err(&why), Err("not run"), flavor),
        // Without a flavor there is nothing to read the version with.
        (Ok(program), None) => status(backend, Ok(&program), Ok(""), None),
        (Ok(program), Some(flavor)) => probe_found(backend, &program, flavor).await,
    }
}

/// Why a turn of `backend` must not start although its CLI is found: the probe read
/// its version and it is older than supported (the reason names both versions and
/// the install line). `None`: go on (a CLI not found, or whose version could not be
/// read, is left to the driver and the CLI's own exit).
pub async fn refusal(
    backend: Backend,
    paths: &BackendPaths,
    flavor: &dyn Flavor,
) -> Option<String> {
    let path_var = std::env::var_os("PATH");
    let program = locate(backend, paths.given(backend), path_var.as_deref()).ok()?;
    let found = probe_found(backend, &program, flavor).await;
    match found.version {
        Some(_) if !found.usable => found.reason,
        _ => None,
    }
}

/// Probes every CLI backend (`Backend::CLIS`, at once), with the flavors this build
/// has.
pub async fn probe_all(paths: &BackendPaths) -> Vec<BackendStatus> {
    futures::future::join_all(
        Backend::CLIS
            .into_iter()
            .map(|backend| probe_one(backend, paths.given(backend), super::flavor(backend))),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::flavor::{Classified, ExitReport, Launch, LaunchSpec, StreamParser};

    /// Reads `X.Y.Z` from the first word.
    struct Versions;

    impl Flavor for Versions {
        fn backend(&self) -> Backend {
            Backend::ClaudeCode
        }
        fn model_api(&self) -> &'static str {
            chorus_proto::domain::ModelRoute::ANTHROPIC_MESSAGES
        }
        fn launch(&self, _: &LaunchSpec<'_>) -> Launch {
            Launch::default()
        }
        fn parser(&self) -> Box<dyn StreamParser> {
            unimplemented!("not used by the probe")
        }
        fn classify(&self, _: &ExitReport) -> Option<Classified> {
            None
        }
        fn parse_version(&self, output: &str) -> Option<(u32, u32, u32)> {
            let mut parts = output.split_whitespace().next()?.split('.');
            Some((
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
                parts.next()?.parse().ok()?,
            ))
        }
    }

    fn fake_cli(dir: &Path, prints: &str) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let program = dir.join("claude");
        std::fs::write(&program, format!("#!/bin/sh\necho '{prints}'\n")).unwrap();
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        program
    }

    #[tokio::test]
    async fn a_cli_is_usable_only_when_found_and_new_enough() {
        let dir = tempfile::tempdir().unwrap();
        // Missing: on no PATH and no flag.
        let none = locate(Backend::ClaudeCode, None, Some(dir.path().as_os_str()));
        let reason = none.unwrap_err();
        assert!(
            reason.contains("npm install -g @anthropic-ai/claude-code@2.1.332"),
            "{reason}"
        );
        let program = fake_cli(dir.path(), "2.1.332 (Claude Code)");
        // Found on PATH, and by a flag.
        assert_eq!(
            locate(Backend::ClaudeCode, None, Some(dir.path().as_os_str())),
            Ok(program.clone())
        );
        let bad_flag = locate(Backend::ClaudeCode, Some(&dir.path().join("nope")), None);
        assert!(bad_flag.unwrap_err().contains("--claude-code"));

        let usable = probe_one(Backend::ClaudeCode, Some(&program), Some(&Versions)).await;
        assert!(usable.usable, "{usable:?}");
        assert_eq!(usable.version.as_deref(), Some("2.1.332"));
        assert_eq!(usable.path, Some(program.display().to_string()));

        let program = fake_cli(dir.path(), "2.1.9 (Claude Code)");
        let old = probe_one(Backend::ClaudeCode, Some(&program), Some(&Versions)).await;
        assert!(!old.usable);
        assert_eq!(old.version.as_deref(), Some("2.1.9"));
        let reason = old.reason.unwrap_or_default();
        assert!(
            reason.contains("2.1.9 is too old: 2.1.332 or later"),
            "{reason}"
        );

        // No flavor in this build: found, but not usable, and it says why.
        let unknown = probe_one(Backend::ClaudeCode, Some(&program), None).await;
        assert!(!unknown.usable);
        assert!(unknown.reason.unwrap_or_default().contains("cannot drive"));
    }

    #[tokio::test]
    async fn a_turn_is_refused_for_a_cli_too_old_and_an_upgrade_in_place_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let program = fake_cli(dir.path(), "2.1.9 (Claude Code)");
        let paths = BackendPaths {
            claude_code: Some(program.clone()),
            ..Default::default()
        };
        let refused = refusal(Backend::ClaudeCode, &paths, &Versions).await;
        let reason = refused.unwrap_or_default();
        assert!(
            reason.contains("2.1.9 is too old: 2.1.332 or later")
                && reason.contains("npm install -g @anthropic-ai/claude-code@2.1.332"),
            "{reason}"
        );
        // Upgraded in place (another size): asked again, and now it may run.
        fake_cli(dir.path(), "2.1.332 (Claude Code) upgraded");
        assert_eq!(refusal(Backend::ClaudeCode, &paths, &Versions).await, None);
        // Not found, or no version read: left to the driver and the CLI.
        let missing = BackendPaths {
            claude_code: Some(dir.path().join("nope")),
            ..Default::default()
        };
        assert_eq!(
            refusal(Backend::ClaudeCode, &missing, &Versions).await,
            None
        );
        fake_cli(dir.path(), "no version here, sorry");
        assert_eq!(refusal(Backend::ClaudeCode, &paths, &Versions).await, None);
    }
}
