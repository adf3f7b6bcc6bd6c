//! Where tool processes are born, and how none outlives the worker.
//!
//! - Every tool shell (a bash call, a background task) is forked by one dedicated,
//!   long-lived thread and gets `PR_SET_PDEATHSIG = SIGKILL`. The kernel sends that
//!   signal when the *thread* that forked the child exits, not the process; tokio's
//!   own threads can come and go (its blocking pool lets idle threads exit), so a
//!   shell forked there could be killed while the worker is healthy. This thread lives
//!   as long as the process, so the signal comes exactly when the worker dies.
//! - The worker is a child subreaper (`init`): a process whose parent (a shell) ends
//!   is adopted by the worker rather than by pid 1. The same thread then ends every
//!   adopted process whose group no live shell of ours leads (it left its group with
//!   `setsid`, or outlived it) and reaps it, so no zombie piles up either. Signalling
//!   our own unreaped child is safe: its pid cannot be reused until we reap it.
//! - Grandchildren lose the death signal at fork. When the worker itself dies, the
//!   control plane finds them by the mark every tool process carries in its
//!   environment (`MARK_VAR`, set per worker generation) and ends them.

use std::collections::HashSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;
use tokio::process::{Child, Command};
use tokio::sync::oneshot;

/// The variable that marks a tool process as this worker generation's.
pub const MARK_VAR: &str = "CHORUS_TOOL_MARK";
/// How often adopted orphans are looked for.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

static MARK: OnceLock<String> = OnceLock::new();
static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
/// Set by `init`: only a worker process (a subreaper) sweeps; a test binary's other
/// children are none of ours.
static SWEEPING: AtomicBool = AtomicBool::new(false);

enum Request {
    Spawn {
        command: Box<Command>,
        runtime: tokio::runtime::Handle,
        reply: oneshot::Sender<std::io::Result<Child>>,
    },
    /// A shell we spawned has been reaped: its group is no longer ours to keep.
    Ended(u32),
}

/// At worker start: becomes a child subreaper and remembers the mark its tool
/// processes carry (given by the control plane).
pub fn init(mark: Option<String>) -> std::io::Result<()> {
    if let Some(mark) = mark {
        let _ = MARK.set(mark);
    }
    nix::sys::prctl::set_child_subreaper(true).map_err(std::io::Error::from)?;
    SWEEPING.store(true, Ordering::Relaxed);
    spawner();
    Ok(())
}

/// The mark for tool processes' environment, if the control plane gave one.
pub fn mark() -> Option<&'static str> {
    MARK.get().map(String::as_str)
}

/// Spawns `command` on the long-lived spawner thread (see the module docs).
pub async fn spawn(command: Command) -> std::io::Result<Child> {
    let (reply, answer) = oneshot::channel();
    let request = Request::Spawn {
        command: Box::new(command),
        runtime: tokio::runtime::Handle::current(),
        reply,
    };
    spawner()
        .send(request)
        .map_err(|_| std::io::Error::other("the process spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| std::io::Error::other("the process spawner thread is gone"))?
}

/// Tells the spawner that the shell `pid` it started has been reaped.
pub fn ended(pid: u32) {
    let _ = spawner().send(Request::Ended(pid));
}

fn spawner() -> &'static mpsc::Sender<Request> {
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("tool-spawner".into())
            .spawn(move || serve(rx))
            .expect("cannot start the tool spawner thread");
        tx
    })
}

/// The spawner thread: spawns on request and sweeps adopted orphans in between.
/// Spawning and sweeping on one thread means a shell is always in `shells` before
/// any sweep can see it.
fn serve(requests: mpsc::Receiver<Request>) {
    let mut shells: HashSet<u32> = HashSet::new();
    let me = std::process::id();
    let mut next_sweep = Instant::now() + SWEEP_EVERY;
    loop {
        let now = Instant::now();
        if now >= next_sweep {
            if SWEEPING.load(Ordering::Relaxed) {
                sweep(me, &shells);
            }
            next_sweep = now + SWEEP_EVERY;
        }
        match requests.recv_timeout(next_sweep.saturating_duration_since(now)) {
            Ok(Request::Spawn {
                mut command,
                runtime,
                reply,
            }) => {
                let _entered = runtime.enter();
                let child = command.spawn();
                if let Ok(child) = &child
                    && let Some(pid) = child.id()
                {
                    shells.insert(pid);
                }
                let _ = reply.send(child);
            }
            Ok(Request::Ended(pid)) => {
                shells.remove(&pid);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Kills and reaps our children that are not shells we started and whose process
/// group no such shell leads.
fn sweep(me: u32, shells: &HashSet<u32>) {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return;
    };
    for pid in entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
    {
        if shells.contains(&pid) {
            continue;
        }
        let Some(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|text| parse_stat(&text))
        else {
            continue;
        };
        if stat.ppid != me || shells.contains(&stat.pgid) {
            continue;
        }
        let pid = Pid::from_raw(pid as i32);
        let _ = kill(pid, Signal::SIGKILL);
        // Reaped now if it is already dead, else on a later sweep.
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// The fields of `/proc/<pid>/stat` we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: u32,
    pub pgid: u32,
}

/// Parses `/proc/<pid>/stat`; the command name (in parentheses) may contain anything,
/// so the fields are read after its last `)`.
pub fn parse_stat(text: &str) -> Option<Stat> {
    let mut fields = text.rsplit_once(')')?.1.split_whitespace();
    let _state = fields.next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some(Stat { ppid, pgid })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_read_after_the_command_name() {
        let text = "4242 (a) b) (c) S 17 4242 4242 0 -1 4194560 100 0 0 0";
        assert_eq!(
            parse_stat(text),
            Some(Stat {
                ppid: 17,
                pgid: 4242
            })
        );
        assert_eq!(parse_stat("4242 (x"), None);
    }
}
