//! Finding and ending what is left of a worker's tool processes, and telling whether
//! a process is in a worker's tree. Never signals a process it has not verified.
//!
//! A worker's tool shells die with it (`PR_SET_PDEATHSIG` in the worker), but their
//! children lose that signal at fork and would be adopted by pid 1. So every tool
//! process carries a *mark* in its environment, `CHORUS_TOOL_MARK=<instance>/<boot>/
//! <generation>`: `instance` is kept in the data directory (`tool-mark-instance`), so a
//! restarted control plane knows the marks of the one before; `boot` is new for each
//! start; `generation` is the worker's. A process is ended only when its own
//! `/proc/<pid>/environ` carries a matching mark, and it is signalled through a pidfd
//! opened *before* that check, so a pid reused in between is never hit.
//!
//! When a launched worker's generation ends (exit, kill, hang, stop), its supervisor
//! ends every process with that exact mark (`workers::end_tool_processes`; a dial-in
//! worker ends its own); at start-up the control plane ends every process with its
//! instance's mark, before any worker starts (`serve`). No cgroup is used: the host
//! this was built on has a hybrid v1 hierarchy (v2 only at `/sys/fs/cgroup/unified`),
//! and the worker's layers (`worker/src/tools/procs.rs`) with this one need none.
//! Limit: a process that both leaves its group and replaces its whole environment is
//! found only while its worker lives (the worker's subreaper).

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::time::{Duration, Instant};

use rustix::process::{PidfdFlags, Signal, pidfd_open, pidfd_send_signal};

use super::registry::Generation;
use crate::secrets::random_token;

/// The environment variable the worker sets on every tool process (the worker's
/// `tools::procs::MARK_VAR`).
pub const MARK_VAR: &str = "CHORUS_TOOL_MARK";
/// The file in the data directory that names this data directory's tool processes.
const INSTANCE_FILE: &str = "tool-mark-instance";
/// How long one sweep keeps looking (processes may fork while it runs).
const SWEEP_LIMIT: Duration = Duration::from_secs(5);

/// The marks of this control plane's tool processes.
#[derive(Debug, Clone)]
pub struct ToolMarks {
    instance: String,
    boot: String,
}

impl ToolMarks {
    /// Reads the data directory's instance id, creating it (private) the first time.
    pub fn load(data_dir: &Path) -> std::io::Result<ToolMarks> {
        let path = data_dir.join(INSTANCE_FILE);
        let instance = match std::fs::read_to_string(&path) {
            Ok(text) if !text.trim().is_empty() => text.trim().to_string(),
            Ok(_) | Err(_) => {
                use std::io::Write;
                use std::os::unix::fs::OpenOptionsExt;
                let instance = random_token()?[..16].to_string();
                let mut file = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&path)?;
                writeln!(file, "{instance}")?;
                instance
            }
        };
        Ok(ToolMarks {
            instance,
            boot: random_token()?[..16].to_string(),
        })
    }

    /// The mark of `generation`'s tool processes.
    pub fn for_generation(&self, generation: Generation) -> String {
        format!("{}/{}/{generation}", self.instance, self.boot)
    }

    /// What every mark of this data directory starts with, whichever start made it.
    pub fn any_start(&self) -> String {
        format!("{}/", self.instance)
    }
}

/// Whether `environ` (NUL-separated, as in `/proc/<pid>/environ`) carries a mark
/// `wanted` accepts.
pub fn carries_mark(environ: &[u8], wanted: &dyn Fn(&str) -> bool) -> bool {
    let prefix = format!("{MARK_VAR}=");
    environ
        .split(|b| *b == 0)
        .filter_map(|entry| std::str::from_utf8(entry).ok())
        .filter_map(|entry| entry.strip_prefix(&prefix))
        .any(wanted)
}

/// SIGKILLs every process whose mark `wanted` accepts, scanning again until a scan
/// finds none (bounded); returns how many were signalled. Blocking: /proc I/O.
pub fn end_marked(wanted: &dyn Fn(&str) -> bool) -> usize {
    let me = std::process::id();
    let started = Instant::now();
    let mut signalled = HashSet::new();
    loop {
        let mut found = false;
        for pid in pids().filter(|pid| *pid != me) {
            // The handle first: whatever we verify below is this process or nothing.
            let Some(handle) = pidfd(pid) else { continue };
            let Ok(environ) = std::fs::read(format!("/proc/{pid}/environ")) else {
                continue;
            };
            if !carries_mark(&environ, wanted) {
                continue;
            }
            // (A zombie's environ reads empty, so a dead process is not found again.)
            if pidfd_send_signal(&handle, Signal::KILL).is_ok() {
                found = true;
                signalled.insert(pid);
            }
        }
        if !found || started.elapsed() > SWEEP_LIMIT {
            return signalled.len();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn pidfd(pid: u32) -> Option<OwnedFd> {
    let pid = rustix::process::Pid::from_raw(i32::try_from(pid).ok()?)?;
    pidfd_open(pid, PidfdFlags::empty()).ok()
}

fn pids() -> impl Iterator<Item = u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
}

/// The parent pid from `/proc/<pid>/stat`; the command name (in parentheses) may
/// contain anything, so the fields are read after its last `)`.
pub fn parse_ppid(stat: &str) -> Option<u32> {
    let mut fields = stat.rsplit_once(')')?.1.split_whitespace();
    let _state = fields.next()?;
    fields.next()?.parse().ok()
}

/// Whether `pid` is `ancestor` or one of its descendants, by walking parent pids.
pub fn in_tree(pid: u32, ancestor: u32) -> bool {
    let mut current = pid;
    // A tree is never this deep; the bound also ends any loop a race could make.
    for _ in 0..64 {
        if current == ancestor {
            return true;
        }
        if current <= 1 {
            return false;
        }
        let Some(parent) = std::fs::read_to_string(format!("/proc/{current}/stat"))
            .ok()
            .and_then(|stat| parse_ppid(&stat))
        else {
            return false;
        };
        current = parent;
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_is_read_from_the_environment_exactly() {
        let environ = b"PATH=/bin\0CHORUS_TOOL_MARK=ab/cd/7\0HOME=/w\0";
        assert!(carries_mark(environ, &|m| m == "ab/cd/7"));
        assert!(carries_mark(environ, &|m| m.starts_with("ab/")));
        assert!(!carries_mark(environ, &|m| m == "ab/cd/70"));
        assert!(!carries_mark(b"XCHORUS_TOOL_MARK=ab/cd/7\0", &|_| true));
    }

    #[test]
    fn the_parent_is_read_after_the_command_name() {
        assert_eq!(parse_ppid("42 (a) (b) S 17 42 42 0"), Some(17));
        assert_eq!(parse_ppid("42 (a"), None);
    }

    #[test]
    fn a_process_is_in_its_ancestors_tree_and_no_other() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let me = std::process::id();
        assert!(in_tree(child.id(), me));
        assert!(in_tree(me, me));
        assert!(!in_tree(me, child.id()));
        assert!(!in_tree(child.id(), 999_999_999));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    #[test]
    fn only_processes_with_the_mark_are_ended() {
        let mark = format!("test-{}/x/1", std::process::id());
        let spawn = |mark: &str| {
            std::process::Command::new("sleep")
                .arg("30")
                .env(MARK_VAR, mark)
                .spawn()
                .unwrap()
        };
        let mut marked = spawn(&mark);
        let mut other = spawn(&format!("{mark}0"));
        assert_eq!(end_marked(&|m| m == mark), 1);
        let status = marked.wait().unwrap();
        assert!(!status.success());
        assert_eq!(
            other.try_wait().unwrap(),
            None,
            "an unmarked process was hit"
        );
        other.kill().unwrap();
        other.wait().unwrap();
    }
}
