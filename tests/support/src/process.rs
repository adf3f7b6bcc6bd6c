//! Looking at and signalling real processes through /proc.

use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Whether this test runs as root, which the attacks on the host need to mean
/// anything (and their positive controls need root's powers). CI runs as root;
/// elsewhere the test says it was skipped, and passes.
pub fn as_root(test: &str) -> bool {
    // `Uid:` real, effective, saved, filesystem.
    let root = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let uids = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
            uids.split_whitespace().nth(1).map(|euid| euid == "0")
        })
        .unwrap_or(false);
    if !root {
        println!("SKIPPED: {test} needs root (CI runs as root)");
    }
    root
}

pub fn signal(pid: u32, signal: Signal) {
    let _ = kill(Pid::from_raw(pid as i32), signal);
}

/// Whether `pid` is a live process (a zombie counts as gone).
pub fn is_alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => {
            // The state follows the parenthesised command name.
            let state = stat
                .rsplit(')')
                .next()
                .and_then(|rest| rest.split_whitespace().next());
            state != Some("Z") && state != Some("X")
        }
        Err(_) => false,
    }
}

/// Waits until `pid` is gone; returns whether it went within `timeout`.
pub async fn wait_gone(pid: u32, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if !is_alive(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    !is_alive(pid)
}

/// A NUL-separated /proc file (`environ`, `cmdline`) as strings.
fn proc_strings(pid: u32, file: &str) -> Vec<String> {
    std::fs::read(format!("/proc/{pid}/{file}"))
        .map(|bytes| {
            bytes
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// The environment a process was started with.
pub fn environ(pid: u32) -> Vec<String> {
    proc_strings(pid, "environ")
}

/// The command line of a process.
pub fn cmdline(pid: u32) -> Vec<String> {
    proc_strings(pid, "cmdline")
}

/// Live processes whose command line contains `marker`.
pub fn with_marker(marker: &str) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .map(|entries| {
            entries
                .flatten()
                .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
                .filter(|pid| is_alive(*pid) && cmdline(*pid).join(" ").contains(marker))
                .collect()
        })
        .unwrap_or_default()
}
