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
//! - A shell may be spawned with a process limit (`spawn_limited`): while such a shell
//!   lives, the same thread counts its descendants every `WATCH_EVERY` and kills its
//!   group when they exceed the limit (a fork bomb), remembering why
//!   (`hit_process_limit`). This is the cgroup-free bound on processes: `RLIMIT_NPROC`
//!   counts every process of the user (the control plane's too) and root ignores it.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
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
/// How often the processes of shells with a process limit are counted.
const WATCH_EVERY: Duration = Duration::from_millis(200);

static MARK: OnceLock<String> = OnceLock::new();
static SPAWNER: OnceLock<mpsc::Sender<Request>> = OnceLock::new();
/// Set by `init`: only a worker process (a subreaper) sweeps; a test binary's other
/// children are none of ours.
static SWEEPING: AtomicBool = AtomicBool::new(false);
/// Shells whose group was killed for having too many processes.
static LIMIT_HITS: Mutex<Option<HashSet<u32>>> = Mutex::new(None);

enum Request {
    Spawn {
        command: Box<Command>,
        runtime: tokio::runtime::Handle,
        reply: oneshot::Sender<std::io::Result<Child>>,
        /// Most processes the shell and its descendants may be at once; 0 = no limit.
        max_processes: u32,
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
    spawn_limited(command, 0).await
}

/// [`spawn`], with the shell's group killed once it and its descendants are more than
/// `max_processes` (0: no limit).
pub async fn spawn_limited(command: Command, max_processes: u32) -> std::io::Result<Child> {
    let (reply, answer) = oneshot::channel();
    let request = Request::Spawn {
        command: Box::new(command),
        runtime: tokio::runtime::Handle::current(),
        reply,
        max_processes,
    };
    spawner()
        .send(request)
        .map_err(|_| std::io::Error::other("the process spawner thread is gone"))?;
    answer
        .await
        .map_err(|_| std::io::Error::other("the process spawner thread is gone"))?
}

/// Whether the shell `pid`'s group was killed for exceeding its process limit (asked
/// once: the answer is forgotten).
pub fn hit_process_limit(pid: u32) -> bool {
    LIMIT_HITS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .as_mut()
        .is_some_and(|hits| hits.remove(&pid))
}

/// Tells the spawner that the shell `pid` it started has been reaped.
pub fn ended(pid: u32) {
    let _ = spawner().send(Request::Ended(pid));
}

#[allow(
    clippy::expect_used,
    reason = "without its one spawner thread the worker can run no tool at all"
)]
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
    // Shell pid -> its process limit (0: none).
    let mut shells: HashMap<u32, u32> = HashMap::new();
    let me = std::process::id();
    let mut next_sweep = Instant::now() + SWEEP_EVERY;
    loop {
        let now = Instant::now();
        let watching = shells.values().any(|max| *max > 0);
        if now >= next_sweep {
            let table = process_table();
            if SWEEPING.load(Ordering::Relaxed) {
                sweep(me, &shells, &table);
            }
            if watching {
                enforce_limits(me, &shells, &table);
            }
            next_sweep = now + if watching { WATCH_EVERY } else { SWEEP_EVERY };
        }
        match requests.recv_timeout(next_sweep.saturating_duration_since(now)) {
            Ok(Request::Spawn {
                mut command,
                runtime,
                reply,
                max_processes,
            }) => {
                let _entered = runtime.enter();
                let child = command.spawn();
                if let Ok(child) = &child
                    && let Some(pid) = child.id()
                {
                    shells.insert(pid, max_processes);
                    if max_processes > 0 {
                        next_sweep = next_sweep.min(Instant::now() + WATCH_EVERY);
                    }
                }
                let _ = reply.send(child);
            }
            Ok(Request::Ended(pid)) => {
                shells.remove(&pid);
                // A bash call reads its hit before it reports the shell ended; what
                // nobody read goes now, so a reused pid never inherits it.
                if let Some(hits) = LIMIT_HITS
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .as_mut()
                {
                    hits.remove(&pid);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

/// Every process's parent and group, from one pass over /proc.
fn process_table() -> HashMap<u32, Stat> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| {
            let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            Some((pid, parse_stat(&text)?))
        })
        .collect()
}

/// Kills and reaps our children that are not shells we started and whose process
/// group no such shell leads.
fn sweep(me: u32, shells: &HashMap<u32, u32>, table: &HashMap<u32, Stat>) {
    for (&pid, stat) in table {
        if shells.contains_key(&pid) || stat.ppid != me || shells.contains_key(&stat.pgid) {
            continue;
        }
        let pid = Pid::from_raw(pid as i32);
        let _ = kill(pid, Signal::SIGKILL);
        // Reaped now if it is already dead, else on a later sweep.
        let _ = waitpid(pid, Some(WaitPidFlag::WNOHANG));
    }
}

/// Kills the group of every limited shell with more processes (itself and its
/// descendants, wherever their group) than its limit.
fn enforce_limits(me: u32, shells: &HashMap<u32, u32>, table: &HashMap<u32, Stat>) {
    for (shell, count) in count_descendants(me, shells, table) {
        let max = shells.get(&shell).copied().unwrap_or(0);
        if max > 0 && count > max as usize {
            LIMIT_HITS
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get_or_insert_with(HashSet::new)
                .insert(shell);
            // The shell is our unreaped child, so its group id is still its own.
            let _ = nix::sys::signal::killpg(Pid::from_raw(shell as i32), Signal::SIGKILL);
        }
    }
}

/// For each shell, how many processes (itself included) descend from it. Pure.
pub fn count_descendants(
    me: u32,
    shells: &HashMap<u32, u32>,
    table: &HashMap<u32, Stat>,
) -> HashMap<u32, usize> {
    let mut owner: HashMap<u32, Option<u32>> = HashMap::new();
    let mut counts: HashMap<u32, usize> = HashMap::new();
    for &pid in table.keys() {
        // Walk up to a shell, the worker or the top, remembering the way.
        let mut path = Vec::new();
        let mut at = pid;
        let found = loop {
            if shells.contains_key(&at) {
                break Some(at);
            }
            if let Some(known) = owner.get(&at) {
                break *known;
            }
            if at == me || at <= 1 || path.len() > 4096 {
                break None;
            }
            path.push(at);
            match table.get(&at) {
                Some(stat) => at = stat.ppid,
                None => break None,
            }
        };
        for p in path {
            owner.insert(p, found);
        }
        if let Some(shell) = found {
            *counts.entry(shell).or_default() += 1;
        }
    }
    counts
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
    fn descendants_are_counted_per_shell_whatever_their_group() {
        let stat = |ppid, pgid| Stat { ppid, pgid };
        let table = HashMap::from([
            (10, stat(1, 10)),  // the worker
            (20, stat(10, 20)), // shell A
            (21, stat(20, 20)), // its child
            (22, stat(21, 99)), // a grandchild that left the group
            (30, stat(10, 30)), // shell B
            (40, stat(10, 40)), // an orphan adopted by the worker
            (50, stat(1, 50)),  // someone else's
        ]);
        let shells = HashMap::from([(20, 2), (30, 0)]);
        let counts = count_descendants(10, &shells, &table);
        assert_eq!(counts.get(&20), Some(&3));
        assert_eq!(counts.get(&30), Some(&1));
        assert_eq!(counts.len(), 2);
    }

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
