//! Background jobs (SPEC D4): a bash command started with `run_in_background`
//! outlives its tool call (a dev server, a long build), is tracked while it runs,
//! and is read and stopped by id with `job_output` and `job_stop`.
//! (The model may still call them `task_output` and `task_stop`, with `task_id`.)
//!
//! - One registry per worker, shared by all its runs: a task started in one thread
//!   can be read from another. Ids are small numbers, unique within the worker.
//! - A task runs like a bash call (same shell, workspace, cleared environment, own
//!   process group) with stdout and stderr merged, as a terminal shows them. The last
//!   `OUTPUT_KEPT` bytes are kept; reading returns what is new since the last read.
//! - When the shell ends, what is left of its group is killed: a task ends everything
//!   it started. A stopped task gets SIGTERM, then SIGKILL after a grace period. When
//!   the worker shuts down, every task is stopped; if the worker is killed, the
//!   shell dies with it (`PR_SET_PDEATHSIG`) and the control plane ends what is left
//!   by its mark (`procs`).
//! - Every start and end is reported to the control plane (`JobStarted`,
//!   `JobEnded`), which keeps the record (`GET /api/agents/{name}/jobs`).

use std::collections::{HashMap, VecDeque};
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use chorus_proto::domain::{JobEnd, JobOutcome, JobReport, WorkerEvent};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::Deserialize;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

use super::ToolOutcome;
use super::bash::{describe_status, shell, shell_command_in};
use super::procs;
use crate::events::EventSink;

/// Bytes of output kept per task (the newest).
pub const OUTPUT_KEPT: usize = 64 * 1024;
/// Most output one `job_output` call returns.
const OUTPUT_SHOWN: usize = 30_000;
/// Tasks running at once per worker.
pub const MAX_RUNNING: usize = 8;
/// Between SIGTERM and SIGKILL when a task is stopped.
const STOP_GRACE: Duration = Duration::from_secs(3);
/// How long output is still read after a task's shell has ended.
const READ_GRACE: Duration = Duration::from_secs(2);
/// Longest wait a `job_output` call may ask for.
const MAX_WAIT: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobArgs {
    #[serde(alias = "task_id")]
    pub job_id: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputArgs {
    #[serde(alias = "task_id")]
    pub job_id: u32,
    /// Seconds to wait for the task to end before answering.
    pub wait: Option<f64>,
}

/// Where a task stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobState {
    Running,
    Ended(JobEnd),
}

struct Job {
    command: String,
    pid: i32,
    started: Instant,
    output: Output,
    state: JobState,
    /// Whether a stop was asked for (so its end is "stopped", not "failed").
    stopping: bool,
}

/// The newest output of a task, and how far the agent has read it.
#[derive(Default)]
struct Output {
    kept: VecDeque<u8>,
    /// Bytes ever written.
    total: u64,
    /// Bytes the agent has been shown (or skipped).
    read: u64,
}

impl Output {
    fn push(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        self.kept.extend(bytes);
        if self.kept.len() > OUTPUT_KEPT {
            let excess = self.kept.len() - OUTPUT_KEPT;
            self.kept.drain(..excess);
        }
    }

    /// What is new since the last read, with a note of what was lost or cut.
    fn take_new(&mut self) -> String {
        let first_kept = self.total - self.kept.len() as u64;
        let mut text = String::new();
        if self.read < first_kept {
            text.push_str(&format!(
                "[… {} bytes of older output were not kept …]\n",
                first_kept - self.read
            ));
            self.read = first_kept;
        }
        let new = (self.total - self.read) as usize;
        let start = self.kept.len() - new;
        let shown: Vec<u8> = self.kept.iter().skip(start).copied().collect();
        let (cut, shown) = if shown.len() > OUTPUT_SHOWN {
            (
                shown.len() - OUTPUT_SHOWN,
                &shown[shown.len() - OUTPUT_SHOWN..],
            )
        } else {
            (0, &shown[..])
        };
        if cut > 0 {
            text.push_str(&format!("[… {cut} bytes cut; the newest follow …]\n"));
        }
        text.push_str(&String::from_utf8_lossy(shown));
        self.read = self.total;
        text
    }
}

/// The background tasks of one worker.
pub struct BackgroundJobs {
    tasks: Mutex<HashMap<u32, Job>>,
    next_id: Mutex<u32>,
    /// Bumped whenever a task writes output or ends, so readers can wait for it.
    changed: watch::Sender<u64>,
    sink: Option<EventSink>,
}

impl std::fmt::Debug for BackgroundJobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundJobs")
            .field("running", &self.running())
            .finish()
    }
}

impl Default for BackgroundJobs {
    fn default() -> Self {
        BackgroundJobs::new(None)
    }
}

impl BackgroundJobs {
    /// `sink` receives a report of every start and end (none in unit tests).
    pub fn new(sink: Option<EventSink>) -> Self {
        BackgroundJobs {
            tasks: Mutex::new(HashMap::new()),
            next_id: Mutex::new(1),
            changed: watch::Sender::new(0),
            sink,
        }
    }

    fn tasks(&self) -> MutexGuard<'_, HashMap<u32, Job>> {
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn report(&self, event: WorkerEvent) {
        if let Some(sink) = &self.sink {
            sink.send(event);
        }
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    pub fn running(&self) -> usize {
        self.tasks()
            .values()
            .filter(|t| t.state == JobState::Running)
            .count()
    }

    /// Starts `command` in the workspace, unconfined (unit tests); returns what to
    /// tell the model.
    pub async fn start(self: &Arc<Self>, root: &Path, command: &str) -> ToolOutcome {
        self.start_in(root, root, command, None).await
    }

    /// Starts `command` in `cwd` (the workspace `root` or a run's working directory
    /// under it) inside `sandbox`; returns what to tell the model.
    pub async fn start_in(
        self: &Arc<Self>,
        root: &Path,
        cwd: &Path,
        command: &str,
        sandbox: Option<&super::sandbox::Sandbox>,
    ) -> ToolOutcome {
        if command.trim().is_empty() {
            return ToolOutcome::error("command is empty; give the shell command to run");
        }
        if self.running() >= MAX_RUNNING {
            return ToolOutcome::error(format!(
                "{MAX_RUNNING} background tasks are running already; stop one with job_stop first"
            ));
        }
        let shell = shell();
        // Merged output, as a terminal shows it.
        let mut shell_cmd = shell_command_in(root, cwd, &format!("exec 2>&1\n{command}"));
        shell_cmd.stderr(Stdio::null());
        let (warning, limits) = match super::bash::confine(&mut shell_cmd, sandbox) {
            Ok(confined) => confined,
            Err(refusal) => return ToolOutcome::error(refusal),
        };
        let mut child = match procs::spawn_limited(shell_cmd, limits.max_processes).await {
            Ok(child) => child,
            Err(e) => {
                return ToolOutcome::error(format!(
                    "could not start {shell} in the workspace {}: {e}",
                    cwd.display()
                ));
            }
        };
        let (Some(pid), Some(mut stdout)) = (
            child.id().and_then(|p| i32::try_from(p).ok()),
            child.stdout.take(),
        ) else {
            let _ = child.start_kill();
            if let Some(pid) = child.id() {
                procs::ended(pid);
            }
            return ToolOutcome::error("the shell started without its output pipe");
        };
        let id = {
            let mut next = self
                .next_id
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = *next;
            *next += 1;
            id
        };
        self.tasks().insert(
            id,
            Job {
                command: command.to_string(),
                pid,
                started: Instant::now(),
                output: Output::default(),
                state: JobState::Running,
                stopping: false,
            },
        );
        self.report(WorkerEvent::JobStarted(JobReport {
            job_id: id,
            command: command.to_string(),
            pid: pid as u32,
        }));

        let tasks = self.clone();
        tokio::spawn(async move {
            let mut read = tokio::spawn({
                let tasks = tasks.clone();
                async move {
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match stdout.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if let Some(task) = tasks.tasks().get_mut(&id) {
                                    task.output.push(&buf[..n]);
                                }
                                tasks.bump();
                            }
                        }
                    }
                }
            });
            let status = child.wait().await;
            // A task ends everything it started; this also closes the pipe for a
            // reader that a lingering grandchild kept open.
            let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            procs::ended(pid as u32);
            // A process that left the group (setsid) may hold the pipe forever: the
            // task has ended all the same.
            if tokio::time::timeout(READ_GRACE, &mut read).await.is_err() {
                read.abort();
            }
            tasks.finish(id, status);
        });
        let warning = warning.map(|w| format!("{w}\n")).unwrap_or_default();
        let _ = limits;
        ToolOutcome::ok(format!(
            "{warning}Started background task {id} (pid {pid}): {command}\n\
             It runs on after this call. Read its output with job_output(job_id={id}) \
             and stop it with job_stop(job_id={id})."
        ))
    }

    fn finish(&self, id: u32, status: std::io::Result<ExitStatus>) {
        let end = {
            let mut tasks = self.tasks();
            let Some(task) = tasks.get_mut(&id) else {
                return;
            };
            let end = match &status {
                Ok(status) if task.stopping => JobEnd {
                    status: JobOutcome::Stopped,
                    exit_code: status.code(),
                    detail: describe_status(*status),
                },
                Ok(status) => JobEnd {
                    status: if status.success() {
                        JobOutcome::Completed
                    } else {
                        JobOutcome::Failed
                    },
                    exit_code: status.code(),
                    detail: describe_status(*status),
                },
                Err(e) => JobEnd {
                    status: JobOutcome::Failed,
                    exit_code: None,
                    detail: format!("could not wait for the task: {e}"),
                },
            };
            task.state = JobState::Ended(end.clone());
            end
        };
        self.bump();
        self.report(WorkerEvent::JobEnded { job_id: id, end });
    }

    /// `job_output`: the job's state and its output since the last read. With
    /// `wait`, waits up to that long for the task to end first.
    pub async fn output(&self, args: OutputArgs) -> ToolOutcome {
        let wait = match args.wait {
            None => Duration::ZERO,
            Some(w) if w.is_finite() && w >= 0.0 => Duration::from_secs_f64(w).min(MAX_WAIT),
            Some(_) => {
                return ToolOutcome::error(format!(
                    "wait must be a number of seconds from 0 to {}",
                    MAX_WAIT.as_secs()
                ));
            }
        };
        let deadline = tokio::time::Instant::now() + wait;
        let mut changes = self.changed.subscribe();
        loop {
            // (The map's lock is released before `unknown` takes it again.)
            let running = self
                .tasks()
                .get(&args.job_id)
                .map(|task| task.state == JobState::Running);
            match running {
                None => return self.unknown(args.job_id),
                Some(false) => break,
                Some(true) => {}
            }
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                break;
            }
        }
        let mut tasks = self.tasks();
        let Some(task) = tasks.get_mut(&args.job_id) else {
            drop(tasks);
            return self.unknown(args.job_id);
        };
        let state = match &task.state {
            JobState::Running => format!(
                "task {} is running (pid {}, for {} s): {}",
                args.job_id,
                task.pid,
                task.started.elapsed().as_secs(),
                task.command
            ),
            JobState::Ended(end) => format!(
                "task {} has ended ({}, {}): {}",
                args.job_id, end.status, end.detail, task.command
            ),
        };
        let new = task.output.take_new();
        let body = if new.is_empty() {
            "(no new output)".to_string()
        } else {
            new
        };
        ToolOutcome::ok(format!(
            "{state}\n--- output since the last read ---\n{body}"
        ))
    }

    /// `job_stop`: SIGTERM to the task's group, SIGKILL after a grace period.
    pub async fn stop(&self, args: JobArgs) -> ToolOutcome {
        let pid = {
            let mut tasks = self.tasks();
            match tasks.get_mut(&args.job_id) {
                None => None,
                Some(task) if task.state != JobState::Running => {
                    return ToolOutcome::ok(format!("task {} had ended already", args.job_id));
                }
                Some(task) => {
                    task.stopping = true;
                    Some(task.pid)
                }
            }
        };
        let Some(pid) = pid else {
            return self.unknown(args.job_id);
        };
        let ended = self.terminate(args.job_id, pid).await;
        let end = match self.tasks().get(&args.job_id).map(|t| t.state.clone()) {
            Some(JobState::Ended(end)) => end.detail,
            _ => "killed".into(),
        };
        if ended {
            ToolOutcome::ok(format!("task {} stopped ({end})", args.job_id))
        } else {
            ToolOutcome::error(format!(
                "task {} did not end after SIGKILL; its processes may have left its process group",
                args.job_id
            ))
        }
    }

    /// SIGTERM, then SIGKILL after the grace period; whether the task has ended.
    async fn terminate(&self, id: u32, pid: i32) -> bool {
        let mut changes = self.changed.subscribe();
        let ended = |tasks: &Self| {
            tasks
                .tasks()
                .get(&id)
                .is_none_or(|t| t.state != JobState::Running)
        };
        let group = Pid::from_raw(pid);
        // ESRCH: the group is gone already, and its end is on the way.
        let _ = killpg(group, Signal::SIGTERM);
        let deadline = tokio::time::Instant::now() + STOP_GRACE;
        while !ended(self) {
            if tokio::time::timeout_at(deadline, changes.changed())
                .await
                .is_err()
            {
                let _ = killpg(group, Signal::SIGKILL);
                let _ = tokio::time::timeout(Duration::from_secs(2), async {
                    while !ended(self) {
                        if changes.changed().await.is_err() {
                            break;
                        }
                    }
                })
                .await;
                break;
            }
        }
        ended(self)
    }

    /// Stops every running task (the worker is shutting down).
    pub async fn stop_all(&self) {
        let running: Vec<(u32, i32)> = {
            let mut tasks = self.tasks();
            tasks
                .iter_mut()
                .filter(|(_, t)| t.state == JobState::Running)
                .map(|(id, t)| {
                    t.stopping = true;
                    (*id, t.pid)
                })
                .collect()
        };
        futures::future::join_all(running.into_iter().map(|(id, pid)| self.terminate(id, pid)))
            .await;
    }

    fn unknown(&self, id: u32) -> ToolOutcome {
        let known: Vec<String> = {
            let tasks = self.tasks();
            let mut ids: Vec<u32> = tasks.keys().copied().collect();
            ids.sort_unstable();
            ids.iter().map(u32::to_string).collect()
        };
        if known.is_empty() {
            ToolOutcome::error(format!(
                "there is no task {id}: no background task was started (bash with run_in_background: true starts one)"
            ))
        } else {
            ToolOutcome::error(format!(
                "there is no task {id}; the tasks are {}",
                known.join(", ")
            ))
        }
    }
}

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
