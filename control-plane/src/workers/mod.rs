//! Worker processes: one per active agent, launched, watched, restarted and stopped
//! here. Only this module starts or signals worker processes.

pub mod backends;
pub mod credentials;
mod death;
pub mod launcher;
pub mod pool;
pub mod procs;
pub mod registry;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::WorkerSettings;
use crate::secrets::random_token;
use launcher::{Launcher, Worker};
use registry::{Generation, LinkState, Registry};

/// A worker that ended (or never started). The run dispatcher fails the runs that
/// generation had started; if it never attached, it fails the waiting runs too, so a
/// worker that cannot start leaves no thread hanging.
#[derive(Debug, Clone)]
pub struct WorkerLost {
    pub agent: String,
    pub generation: Generation,
    pub reason: String,
    /// Whether this generation ever connected.
    pub attached: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerState {
    /// Launched, not yet connected.
    Starting,
    /// Connected and taking work.
    Running,
    /// Died; waiting out the backoff before the next launch.
    Restarting,
    Stopped,
}

/// An agent's worker as the API shows it (`worker` of an agent) and the feed tells
/// its changes (the `worker` event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerStatus {
    pub state: WorkerState,
    pub pid: Option<u32>,
    /// The dial-in worker serving it, as the worker names itself (host and pid).
    pub dial_in_worker: Option<String>,
    /// The join credential that worker joined with (`join-token`: the shared one).
    pub dial_in_credential: Option<String>,
    pub restarts: u32,
    /// How the previous worker process ended, or why it could not start.
    pub last_exit: Option<String>,
}

impl WorkerStatus {
    fn stopped() -> Self {
        WorkerStatus {
            state: WorkerState::Stopped,
            pid: None,
            dial_in_worker: None,
            dial_in_credential: None,
            restarts: 0,
            last_exit: None,
        }
    }
}

struct Supervised {
    stop: CancellationToken,
    task: JoinHandle<()>,
    status: watch::Receiver<WorkerStatus>,
}

pub struct WorkerManager {
    registry: Arc<Registry>,
    launcher: Launcher,
    settings: WorkerSettings,
    lost: mpsc::UnboundedSender<WorkerLost>,
    supervised: Mutex<HashMap<String, Supervised>>,
    /// Where each change of a worker's state is told.
    told: StatusSink,
}

/// Told each change of an agent's worker as people see it (`serve` makes it the
/// feed's `worker` event; this module knows nothing of the feed).
pub type StatusSink = Arc<dyn Fn(&str, WorkerStatus) + Send + Sync>;

/// Delay before restart number `attempt` (0-based): doubling from `initial`, capped.
pub fn restart_delay(attempt: u32, initial: Duration, max: Duration) -> Duration {
    initial.saturating_mul(1u32 << attempt.min(16)).min(max)
}

/// Launches in a row that may miss the attach deadline before the runs waiting for
/// the agent's worker fail (the worker is restarted all the same, with backoff).
pub const ATTACH_ATTEMPTS: u32 = 3;

/// A worker that stayed up this long is healthy: its next crash restarts quickly again.
const HEALTHY_UPTIME: Duration = Duration::from_secs(30);

/// How long to wait for one signal of a worker's end (exit or disconnect) to be
/// followed by the other, so runs are failed only after their last events arrived.
const SETTLE: Duration = Duration::from_secs(1);

impl WorkerManager {
    pub fn new(
        registry: Arc<Registry>,
        launcher: Launcher,
        settings: WorkerSettings,
        lost: mpsc::UnboundedSender<WorkerLost>,
        told: StatusSink,
    ) -> Self {
        WorkerManager {
            registry,
            launcher,
            settings,
            lost,
            supervised: Mutex::new(HashMap::new()),
            told,
        }
    }

    fn supervised(&self) -> MutexGuard<'_, HashMap<String, Supervised>> {
        self.supervised
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts supervising `agent`'s worker; does nothing if it is already supervised.
    /// `incarnation`: which creation of the agent this is (a dial-in worker keeps
    /// its directory only if it was laid out for it); `files`: whether a worker's
    /// volume may hold them already (placement waits a little for that worker right
    /// after a start).
    pub fn start(&self, agent: &str, incarnation: &str, files: AgentFiles) {
        let mut supervised = self.supervised();
        if supervised.contains_key(agent) {
            return;
        }
        let stop = CancellationToken::new();
        let starting = WorkerStatus {
            state: WorkerState::Starting,
            ..WorkerStatus::stopped()
        };
        (self.told)(agent, starting.clone());
        let (status_tx, status) = watch::channel(starting);
        let supervisor = Supervisor {
            agent: agent.to_string(),
            registry: self.registry.clone(),
            launcher: self.launcher.clone(),
            settings: self.settings.clone(),
            lost: self.lost.clone(),
            status: status_tx,
            stop: stop.clone(),
            incarnation: incarnation.to_string(),
            files,
            told: self.told.clone(),
        };
        let task = tokio::spawn(supervisor.run());
        supervised.insert(agent.to_string(), Supervised { stop, task, status });
    }

    /// Stops `agent`'s worker (SIGTERM, then SIGKILL after the grace period) and
    /// returns once the process is gone.
    pub async fn stop(&self, agent: &str) {
        let entry = self.supervised().remove(agent);
        if let Some(entry) = entry {
            entry.stop.cancel();
            if let Err(e) = entry.task.await {
                tracing::error!(agent, error = %e, "worker supervisor panicked");
            }
        }
    }

    pub async fn stop_all(&self) {
        // Idle dial-in links end too: they would hold the shutdown open.
        if let Launcher::Remote(pool) = &self.launcher {
            pool.close();
        }
        let entries: Vec<(String, Supervised)> = self.supervised().drain().collect();
        for (_, entry) in &entries {
            entry.stop.cancel();
        }
        for (agent, entry) in entries {
            if let Err(e) = entry.task.await {
                tracing::error!(agent, error = %e, "worker supervisor panicked");
            }
        }
    }

    /// Has a free dial-in worker delete a destroyed agent's files from the workers'
    /// volume (only `volume`, if given), if they are `incarnation`'s. Returns whether
    /// there were any and who deleted them, or why it could not be done (no worker
    /// free within the attach wait, the worker went away, or what the worker said).
    /// With the local launcher there is no such volume: nothing to do.
    pub async fn delete_files(
        &self,
        agent: &str,
        incarnation: &str,
        volume: Option<&str>,
    ) -> Result<(bool, DeletedBy), String> {
        let Launcher::Remote(pool) = &self.launcher else {
            return Ok((
                false,
                DeletedBy {
                    who: "this control plane".into(),
                    credential: None,
                },
            ));
        };
        let (done, answer) = tokio::sync::oneshot::channel();
        let work = pool::Work::Delete(pool::Deletion {
            agent: agent.to_string(),
            incarnation: incarnation.to_string(),
            volume: volume.map(str::to_string),
            done,
        });
        let wait = self.settings.attach_timeout;
        let taken = tokio::time::timeout(wait, pool.assign(work))
            .await
            .map_err(|_| format!("no dial-in worker was free within {}", seconds(wait)))?;
        let peer = &taken.peer;
        // The connection's task answers, or drops `done`, within its own deadline.
        match answer.await {
            Ok(Ok(deleted)) => Ok((
                deleted,
                DeletedBy {
                    who: format!("the dial-in worker from {peer}"),
                    credential: Some(taken.worker.clone()),
                },
            )),
            Ok(Err(error)) => Err(format!("the dial-in worker from {peer}: {error}")),
            Err(_) => Err(format!(
                "the dial-in worker from {peer} did not answer (its connection ended or it took too long)"
            )),
        }
    }

    /// Dial-in worker links waiting for an agent (0 with the local launcher).
    pub fn idle_dial_in(&self) -> usize {
        match &self.launcher {
            Launcher::Remote(pool) => pool.idle_count(),
            Launcher::Local(_) => 0,
        }
    }

    /// What CLIs the workers' hosts can run.
    pub fn backends(&self) -> &Arc<backends::BackendsSeen> {
        self.registry.backends()
    }

    /// The agents' MCP servers' states.
    pub fn mcp(&self) -> &Arc<crate::mcp::McpStates> {
        self.registry.mcp()
    }

    /// How many workers are in each state (for `/metrics`).
    pub fn counts(&self) -> std::collections::BTreeMap<String, u64> {
        let agents: Vec<String> = self.supervised().keys().cloned().collect();
        let mut counts = std::collections::BTreeMap::new();
        for agent in agents {
            let state = match self.status(&agent).state {
                WorkerState::Starting => "starting",
                WorkerState::Running => "running",
                WorkerState::Restarting => "restarting",
                WorkerState::Stopped => continue,
            };
            *counts.entry(state.to_string()).or_insert(0) += 1;
        }
        counts
    }

    pub fn status(&self, agent: &str) -> WorkerStatus {
        let Some(status) = self
            .supervised()
            .get(agent)
            .map(|s| s.status.borrow().clone())
        else {
            return WorkerStatus::stopped();
        };
        shown(status, self.registry.is_attached(agent))
    }
}

/// A supervisor's status as people see it: `starting` is `running` once its worker
/// attached.
fn shown(status: WorkerStatus, attached: bool) -> WorkerStatus {
    match status.state {
        WorkerState::Starting if attached => WorkerStatus {
            state: WorkerState::Running,
            ..status
        },
        _ => status,
    }
}

/// Who deleted a destroyed agent's files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeletedBy {
    /// For people: "the dial-in worker from <host> pid <n>".
    pub who: String,
    /// The join credential of the dial-in worker that did (for the audit log).
    pub credential: Option<String>,
}

/// Owns one agent's worker process for as long as the agent is active.
struct Supervisor {
    agent: String,
    registry: Arc<Registry>,
    launcher: Launcher,
    settings: WorkerSettings,
    lost: mpsc::UnboundedSender<WorkerLost>,
    status: watch::Sender<WorkerStatus>,
    stop: CancellationToken,
    /// Which creation of the agent this is.
    incarnation: String,
    files: AgentFiles,
    told: StatusSink,
}

/// Whether an agent's files may be on a dial-in worker's volume already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentFiles {
    /// A new incarnation: nothing of it exists anywhere yet.
    New,
    /// An agent from before this start, or revived with its kept files.
    MayExist,
}

enum Ended {
    Stopped,
    Exited(String),
}

/// The fate of one generation's attach.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Attach {
    /// It attached (or never got as far as trying: it could not start or exited).
    NotMissed,
    /// It was still not attached at the deadline and was killed.
    Missed,
}

impl Supervisor {
    /// Sets the worker's status and tells it ([`StatusSink`]).
    fn set(&self, status: WorkerStatus) {
        self.status.send_replace(status);
        self.announce();
    }

    /// Tells the worker's status as people see it now.
    fn announce(&self) {
        let status = self.status.borrow().clone();
        let attached = self.registry.is_attached(&self.agent);
        (self.told)(&self.agent, shown(status, attached));
    }

    async fn run(self) {
        let mut attempt = 0u32;
        let mut restarts = 0u32;
        let mut missed_attaches = 0u32;
        let mut last_exit = None;
        while !self.stop.is_cancelled() {
            let launched_at = Instant::now();
            let outcome = self
                .one_generation(restarts, last_exit.take(), &mut missed_attaches)
                .await;
            let reason = match outcome {
                Ended::Stopped => break,
                Ended::Exited(reason) => reason,
            };
            if launched_at.elapsed() >= HEALTHY_UPTIME {
                attempt = 0;
            }
            let delay = restart_delay(
                attempt,
                self.settings.restart_backoff,
                self.settings.restart_backoff_max,
            );
            attempt += 1;
            restarts += 1;
            crate::metrics::worker_restarted();
            tracing::warn!(agent = %self.agent, %reason, ?delay, "worker ended; restarting");
            self.set(WorkerStatus {
                state: WorkerState::Restarting,
                pid: None,
                dial_in_worker: None,
                dial_in_credential: None,
                restarts,
                last_exit: Some(reason.clone()),
            });
            last_exit = Some(reason);
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = self.stop.cancelled() => break,
            }
        }
        self.status.send_modify(|s| {
            s.state = WorkerState::Stopped;
            s.pid = None;
        });
        self.announce();
    }

    /// Launches one worker and watches it until it ends or we are told to stop.
    /// `missed_attaches` counts the launches in a row that missed the attach deadline.
    async fn one_generation(
        &self,
        restarts: u32,
        last_exit: Option<String>,
        missed_attaches: &mut u32,
    ) -> Ended {
        let credential = match random_token() {
            Ok(token) => token,
            Err(e) => return Ended::Exited(format!("could not create a credential: {e}")),
        };
        let (generation, detached) = self.registry.expect(&self.agent, credential.clone());
        let attached = self.registry.attached_signal(&self.agent, generation);
        let launched = tokio::select! {
            launched = self.launcher.launch(
                &self.agent,
                generation,
                &credential,
                self.settings.attach_timeout,
                &self.incarnation,
                self.files == AgentFiles::MayExist,
            ) => launched,
            _ = self.stop.cancelled() => {
                self.registry.revoke(&self.agent, generation);
                return Ended::Stopped;
            }
        };
        let mut worker = match launched {
            Ok(worker) => worker,
            Err(e) => {
                self.registry.revoke(&self.agent, generation);
                tracing::error!(agent = %self.agent, error = %e, "cannot launch worker");
                let reason = format!("the agent's worker could not be started: {e}");
                let _ = self.lost.send(WorkerLost {
                    agent: self.agent.clone(),
                    generation,
                    reason: reason.clone(),
                    attached: false,
                });
                return Ended::Exited(reason);
            }
        };
        drop(credential);
        if let Some(pid) = worker.pid() {
            self.registry.set_pid(&self.agent, generation, pid);
        }
        let who = worker.describe();
        tracing::info!(agent = %self.agent, worker = %who, generation, "worker launched");
        self.set(WorkerStatus {
            state: WorkerState::Starting,
            pid: worker.pid(),
            dial_in_worker: worker.dial_in_name(),
            dial_in_credential: worker.dial_in_credential(),
            restarts,
            last_exit,
        });

        let attach_by = tokio::time::Instant::now() + self.settings.attach_timeout;
        let mut awaiting_attach = true;
        let mut attach = Attach::NotMissed;
        let mut announced = false;
        let reason = loop {
            tokio::select! {
                () = attached.notified(), if !announced => {
                    // Running now: the page follows the feed, not the status.
                    announced = true;
                    self.announce();
                }
                report = worker.wait() => {
                    // Its socket closed with it; let the connection drain its last events.
                    let deadline = Instant::now() + SETTLE;
                    while self.registry.link_state(&self.agent, generation) == LinkState::Attached
                        && Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    break format!("the worker ({who}) {report}");
                }
                () = tokio::time::sleep_until(attach_by), if awaiting_attach => {
                    awaiting_attach = false;
                    if self.registry.link_state(&self.agent, generation) != LinkState::Waiting {
                        continue;
                    }
                    // Launched but silent: waiting longer could be forever.
                    worker.kill();
                    let report = worker.wait().await;
                    attach = Attach::Missed;
                    *missed_attaches += 1;
                    break format!(
                        "the agent's worker did not attach within the attach deadline of {} ([workers] attach_timeout_ms); \
                         {} launch(es) in a row missed it, the last ({who}) was killed and {report}",
                        seconds(self.settings.attach_timeout),
                        missed_attaches,
                    );
                }
                _ = detached.notified() => {
                    // A worker without its connection is of no use: give it a moment to
                    // exit by itself, then make sure. A hung one is killed at once.
                    let why = self.registry.detach_reason(&self.agent, generation);
                    // A dial-in worker is its connection: nothing left to wait for.
                    let settle = if why.is_some() || worker.pid().is_none() {
                        Duration::ZERO
                    } else {
                        SETTLE
                    };
                    let report = match worker.wait_for(settle).await {
                        Some(report) => report,
                        None => { worker.kill(); worker.wait().await }
                    };
                    let why = why.unwrap_or_else(|| "lost its connection".into());
                    break format!("the worker ({who}) {why} and {report}");
                }
                _ = self.stop.cancelled() => {
                    self.shut_down(&mut worker, generation).await;
                    self.end_tool_processes(generation).await;
                    return Ended::Stopped;
                }
            }
        };
        let attached = matches!(
            self.registry.link_state(&self.agent, generation),
            LinkState::Attached | LinkState::Spent
        );
        self.registry.revoke(&self.agent, generation);
        if attached {
            *missed_attaches = 0;
        }
        // Nothing was delivered to a generation that never attached; the runs waiting
        // for the agent's worker wait for the next launch until too many missed.
        if attach == Attach::NotMissed || *missed_attaches >= ATTACH_ATTEMPTS {
            let _ = self.lost.send(WorkerLost {
                agent: self.agent.clone(),
                generation,
                reason: reason.clone(),
                attached,
            });
        }
        self.end_tool_processes(generation).await;
        Ended::Exited(reason)
    }

    /// The worker `generation` is gone (its tool shells died with it): ends whatever
    /// its tool processes left, found by their mark.
    async fn end_tool_processes(&self, generation: Generation) {
        // A dial-in worker ends its own when its link closes: its processes are
        // not ours to find (another machine, another pid namespace).
        let Some(marks) = self.launcher.tool_marks() else {
            return;
        };
        let mark = marks.for_generation(generation);
        let ended = tokio::task::spawn_blocking(move || procs::end_marked(&|m| m == mark))
            .await
            .unwrap_or(0);
        if ended > 0 {
            tracing::warn!(agent = %self.agent, generation, processes = ended, "ended tool processes the worker left behind");
        }
    }

    async fn shut_down(&self, worker: &mut Worker, generation: Generation) {
        let report = worker.stop(self.settings.stop_grace).await;
        self.registry.revoke(&self.agent, generation);
        tracing::info!(agent = %self.agent, worker = %worker.describe(), %report, "worker stopped");
    }
}

/// "30 s", or "1.5 s" for fractions.
fn seconds(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_delay_doubles_up_to_the_cap() {
        let initial = Duration::from_millis(250);
        let max = Duration::from_secs(30);
        let delays: Vec<u128> = (0..9)
            .map(|a| restart_delay(a, initial, max).as_millis())
            .collect();
        assert_eq!(
            delays,
            vec![250, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]
        );
        assert_eq!(restart_delay(u32::MAX, initial, max), max);
    }
}
