//! The actor of one agent's runs: one task owns the agent's queued and going runs,
//! and each transition is one arm of [`AgentActor::handle`]. This file is the run
//! state machine; `seeding` has the model write titles and continuations' summaries
//! off the actor, `mirror` mirrors runs and steps into spans and metrics, and `flush`
//! is where every ended run leaves the table and its thread's context flush starts.
//!
//! Invariants:
//! - A run belongs to one agent, and only that agent's worker connection can report
//!   on it: events are looked up in this actor's own table, by the generation the
//!   run was handed to.
//! - A run's event is stored only if its `seq` is past the run's last stored one, in
//!   the same transaction (`store::runs::advance`): a replay changes nothing.
//! - Events are queued to the store's writer in the order they arrive, and
//!   published once committed (`publisher`); any command other than such an event
//!   first waits for them (`flush`), so the actor never reads behind its own writes.
//! - A run waits in the queue until a worker is connected. A run whose worker died
//!   before reporting anything goes back to the queue; one that had started is
//!   resumed as a new attempt from the stored history (`decide::on_loss`,
//!   `decide::resume`).
//! - A thread whose CLI run deferred a call for a person (`deferred`) has no run
//!   while it waits and stays `waiting_for_permission`; the answer is its next run
//!   (with the call), started once the deferring run has ended. A kill or failure
//!   of the thread drops it, and the late answer is then ignored.
//! - The actor never waits for the gate, a worker or a model: it only sends them
//!   commands (a continuation's summary is awaited by a task it starts, which
//!   reports back as `Seeded`; a context flush runs in a task of its own).
//!   It may not touch another agent's runs.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chorus_proto::domain::{
    AgentChange, ChatMessage, ControlCommand, Failure, FailureKind, Input, ResumedCall, Role,
    RunAssignment, StepKind, WorkerEvent,
};
use serde_json::json;
use tokio::sync::{mpsc, oneshot};

use super::assignment::{Attempt, Builder};
use super::decide::{self, OnLoss, Resumption, Route};
use super::idle::IdleClock;
use super::publisher::{Publication, Publisher};
use super::roles::{RunContext, TurnEnd};
use super::{EventRejected, Received, ReplyTo, Routed, Shared, status_event};
use crate::feed::{self, FeedEvent, StatusChange, StatusDetail, ThreadCreated, ThreadOrigin};
use crate::reports::{self, RunBudget};
use crate::store::{
    AgentRecord, RunMark, RunRecord, RunStatus, StoreError, ThreadRecord, ThreadRole, ThreadStatus,
    format_epoch_ms,
};
use crate::workers::WorkerLost;
use crate::workers::registry::Generation;
use mirror::label;
use seeding::SEED_BYTES;

mod flush;
mod mirror;
mod seeding;

/// A deadline that never comes (an idle timer that is off).
fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(365 * 24 * 3600)
}

pub(super) enum Command {
    Receive {
        agent: Box<AgentRecord>,
        content: String,
        reply_to: Option<ReplyTo>,
        user: String,
        /// The caller's W3C trace context: a run it starts joins that trace.
        trace: HashMap<String, String>,
        /// Run once the message is stored and before any run it starts is handed to
        /// the worker (a front end's records of it: see [`super::Runs::receive_then`]).
        then: Option<super::OnReceived>,
        reply: oneshot::Sender<Result<Received, StoreError>>,
    },
    /// A new thread with a role in a task (`Runs::start_role_thread`).
    StartRole {
        agent: Box<AgentRecord>,
        content: String,
        user: String,
        role: ThreadRole,
        workdir: Option<String>,
        reply: oneshot::Sender<Result<u64, StoreError>>,
    },
    /// The next message of a given thread (`Runs::message_thread`).
    Message {
        agent: Box<AgentRecord>,
        thread_id: u64,
        content: String,
        user: String,
        reply: oneshot::Sender<Result<Received, StoreError>>,
    },
    Event {
        generation: Generation,
        seq: u64,
        event: Box<WorkerEvent>,
        reply: oneshot::Sender<Result<(), EventRejected>>,
    },
    Deliver,
    WorkerLost {
        lost: WorkerLost,
        reply: oneshot::Sender<()>,
    },
    /// At start: a going thread that never had a run gets its first.
    StartFirst {
        agent: Box<AgentRecord>,
        thread_id: u64,
        reply: oneshot::Sender<()>,
    },
    Resume {
        agent: Box<AgentRecord>,
        previous: Box<RunRecord>,
        reason: String,
        reply: oneshot::Sender<()>,
    },
    Kill {
        thread_id: u64,
        user: String,
        reply: oneshot::Sender<Result<bool, StoreError>>,
    },
    FailAll {
        failure: Failure,
        reply: oneshot::Sender<()>,
    },
    ThreadOf {
        generation: Generation,
        run_id: String,
        reply: oneshot::Sender<Option<RunContext>>,
    },
    SetWaiting {
        thread_id: u64,
        waiting: bool,
    },
    /// The gate deferred a CLI run's call for a person (`Runs::defer`).
    Defer {
        thread_id: u64,
    },
    /// The person answered a deferred call (`Runs::resume_deferred`).
    ResumeDeferred {
        thread_id: u64,
        resumed: Box<ResumedCall>,
    },
    /// At start: a thread the last control plane left waiting on a deferred call
    /// goes on with the call refused (`Runs::resume_all`).
    ResumeRefused {
        thread_id: u64,
        resumed: Box<ResumedCall>,
        reply: oneshot::Sender<()>,
    },
    ActiveThreads {
        reply: oneshot::Sender<Vec<u64>>,
    },
    AgentChanged {
        change: AgentChange,
        /// Answered once the worker has been sent the change.
        sent: oneshot::Sender<()>,
    },
    /// Activity outside the agent's runs (a restore).
    Touch,
    /// The agent's idle timeout may have changed.
    IdleConfigured,
    /// An idle save this actor started ended.
    IdleSaved,
    /// The summary of what a continuation left out is written (or could not be):
    /// its first run can start.
    Seeded {
        thread_id: u64,
        left_out: usize,
        summary: Option<String>,
    },
}

struct ActiveRun {
    thread_id: u64,
    /// Who started the thread (the gate decides with their authority).
    started_by: Option<crate::principal::Principal>,
    /// The thread's role in a task, if any (the gate lets it call the role's tools).
    role: Option<ThreadRole>,
    /// Kept so the run can be handed to another worker if its first one dies early.
    assignment: Box<RunAssignment>,
    /// The worker generation the run was handed to, if any.
    delivered_to: Option<Generation>,
    /// Whether the worker reported any of it yet.
    started: bool,
    /// The run's span on this side, and the spans of its open steps: the control
    /// plane's view of the run mirrors the worker's in traces.
    span: tracing::Span,
    open_steps: HashMap<u32, (StepKind, tracing::Span)>,
    /// The tool calls the model asked for whose results have not come yet (id →
    /// name, arguments): a task's history records each call with its result.
    calls: HashMap<String, (String, String)>,
    /// What the run has stored so far, against `reports::RunLimits`.
    budget: RunBudget,
    /// When the worker last reported anything of it (for the watchdog).
    last_event: Instant,
}

pub(super) struct AgentActor {
    agent: String,
    shared: Arc<Shared>,
    /// Run ids waiting for a connected worker, oldest first.
    queue: VecDeque<String>,
    runs: HashMap<String, ActiveRun>,
    /// Continuations whose first run waits for the summary of what they left out.
    seeding: HashSet<u64>,
    /// New threads to be titled by the model after their first answer.
    untitled: HashSet<u64>,
    /// Those of them that have it: titled once their run is over, so the title
    /// request neither competes with the run for a local server (which may cut one
    /// of the two streams) nor shows a tool call still running as interrupted.
    answered: HashSet<u64>,
    /// Threads with a role that have a run here, with their last run's id: the end
    /// of their turn is told to the task engine (`roles`).
    roles: HashMap<u64, (ThreadRole, String)>,
    /// Threads whose context flush is going (`flush`): at most one each.
    flushing: Arc<std::sync::Mutex<HashSet<u64>>>,
    /// `runs.len() + seeding.len()`, for readers outside the actor.
    active: Arc<AtomicUsize>,
    /// This actor's own queue, for the tasks it starts to report back (weak: the
    /// actor ends when [`super::Runs`] drops its handle).
    itself: mpsc::WeakSender<Command>,
    /// The agent's idle timer.
    idle: IdleClock,
    /// The trace the next queued run continues (set by the command being handled:
    /// a caller's trace, or the interrupted attempt's), and why, for a resumption.
    next_trace: Option<(HashMap<String, String>, Option<String>)>,
    /// Threads whose CLI run deferred a call for a person: the answer, once given
    /// (it waits here while the deferring run still winds down). Such a thread
    /// has no run while it waits and stays `waiting_for_permission`.
    deferred: HashMap<u64, Option<Box<ResumedCall>>>,
    /// The answered call the next queued run carries (set by the command being
    /// handled, like `next_trace`).
    next_resumed: Option<ResumedCall>,
    /// Runs are not handed to the worker while set (a receipt hook runs first).
    holding: bool,
    /// Publishes the worker events this actor queued to the store once they are
    /// committed.
    publisher: Publisher,
    /// Whether events were queued to the store since the last flush: any
    /// command that reads the store first waits for them.
    unflushed: bool,
}

impl AgentActor {
    pub(super) fn new(
        agent: String,
        shared: Arc<Shared>,
        active: Arc<AtomicUsize>,
        itself: mpsc::WeakSender<Command>,
    ) -> Self {
        let publisher = Publisher::start(agent.clone(), shared.feed.clone());
        AgentActor {
            agent,
            shared,
            queue: VecDeque::new(),
            runs: HashMap::new(),
            seeding: HashSet::new(),
            untitled: HashSet::new(),
            answered: HashSet::new(),
            roles: HashMap::new(),
            flushing: Arc::default(),
            active,
            itself,
            idle: IdleClock::new(Instant::now()),
            next_trace: None,
            deferred: HashMap::new(),
            next_resumed: None,
            holding: false,
            publisher,
            unflushed: false,
        }
    }

    pub(super) async fn run(mut self, mut commands: mpsc::Receiver<Command>) {
        let stuck_after = self.shared.settings.threads.stuck_after;
        let mut watchdog = tokio::time::interval(decide::watchdog_period(stuck_after));
        watchdog.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            self.read_idle_timeout().await;
            let idle_due = self.idle.deadline(self.is_busy());
            let idle_sleep = tokio::time::sleep_until(
                idle_due.map_or_else(far_future, tokio::time::Instant::from_std),
            );
            tokio::select! {
                command = commands.recv() => match command {
                    Some(command) => self.handle(command).await,
                    None => break,
                },
                _ = watchdog.tick() => self.watchdog().await,
                _ = idle_sleep, if idle_due.is_some() => self.idle_fire(),
            }
            self.active
                .store(self.runs.len() + self.seeding.len(), Ordering::Relaxed);
        }
    }

    async fn handle(&mut self, command: Command) {
        // Events are queued to the store without waiting for their commit; what
        // reads the store (or acts on what it holds) waits for them first.
        let pipelined = match &command {
            Command::Event { event, .. } => is_pipelined(event),
            // These read nothing the actor may have queued.
            Command::ThreadOf { .. }
            | Command::SetWaiting { .. }
            | Command::Deliver
            | Command::AgentChanged { .. } => true,
            _ => false,
        };
        if !pipelined {
            self.flush().await;
        }
        if matches!(
            command,
            Command::Receive { .. }
                | Command::Event { .. }
                | Command::Kill { .. }
                | Command::SetWaiting { .. }
                | Command::Touch
        ) {
            self.idle.active(Instant::now());
        }
        match command {
            Command::Receive {
                agent,
                content,
                reply_to,
                user,
                trace,
                then,
                reply,
            } => {
                self.next_trace = (!trace.is_empty()).then_some((trace, None));
                self.holding = then.is_some();
                let received = self.receive(&agent, &content, reply_to, &user).await;
                self.next_trace = None;
                if let (Ok(received), Some(then)) = (&received, then) {
                    then(received.clone()).await;
                }
                if std::mem::take(&mut self.holding) {
                    self.deliver().await;
                }
                let _ = reply.send(received);
            }
            Command::StartRole {
                agent,
                content,
                user,
                role,
                workdir,
                reply,
            } => {
                let started = self
                    .start_role(&agent, &content, &user, role, workdir.as_deref())
                    .await;
                let _ = reply.send(started);
            }
            Command::Message {
                agent,
                thread_id,
                content,
                user,
                reply,
            } => {
                let _ = reply.send(self.message(&agent, thread_id, &content, &user).await);
            }
            Command::Event {
                generation,
                seq,
                event,
                reply,
            } => {
                let _ = reply.send(self.apply(generation, seq, *event).await);
            }
            Command::Deliver => self.deliver().await,
            Command::WorkerLost { lost, reply } => {
                self.worker_lost(lost).await;
                let _ = reply.send(());
            }
            Command::StartFirst {
                agent,
                thread_id,
                reply,
            } => {
                if !self.is_going(thread_id)
                    && let Err(e) = self.queue_first_run(&agent, thread_id).await
                {
                    tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot start a thread left without a run");
                }
                let _ = reply.send(());
            }
            Command::Resume {
                agent,
                previous,
                reason,
                reply,
            } => {
                self.resume(&agent, &previous, &reason).await;
                let _ = reply.send(());
            }
            Command::Kill {
                thread_id,
                user,
                reply,
            } => {
                let _ = reply.send(self.kill(thread_id, &user).await);
            }
            Command::FailAll { failure, reply } => {
                self.fail_all(&failure).await;
                let _ = reply.send(());
            }
            Command::ThreadOf {
                generation,
                run_id,
                reply,
            } => {
                let thread = self
                    .runs
                    .get_mut(&run_id)
                    .filter(|run| run.delivered_to == Some(generation))
                    .map(|run| {
                        run.started = true;
                        RunContext {
                            thread_id: run.thread_id,
                            started_by: run.started_by.clone(),
                            role: run.role,
                            backend: run.assignment.backend,
                        }
                    });
                let _ = reply.send(thread);
            }
            Command::SetWaiting { thread_id, waiting } => {
                self.set_waiting(thread_id, waiting).await
            }
            Command::Defer { thread_id } => {
                if self.run_of_thread(thread_id).is_some() {
                    self.deferred.entry(thread_id).or_insert(None);
                }
            }
            Command::ResumeDeferred { thread_id, resumed } => {
                self.resume_deferred(thread_id, resumed).await;
            }
            Command::ResumeRefused {
                thread_id,
                resumed,
                reply,
            } => {
                if let Err(e) = self.start_resumed(thread_id, *resumed).await {
                    tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot resume a thread left waiting on a deferred call");
                }
                let _ = reply.send(());
            }
            Command::ActiveThreads { reply } => {
                let mut threads: Vec<u64> = self.runs.values().map(|r| r.thread_id).collect();
                threads.extend(&self.seeding);
                threads.sort_unstable();
                threads.dedup();
                let _ = reply.send(threads);
            }
            Command::AgentChanged { change, sent } => {
                self.agent_changed(change);
                let _ = sent.send(());
            }
            Command::Touch => {}
            Command::IdleConfigured => self.idle.configured(),
            Command::IdleSaved => self.idle.saved(),
            Command::Seeded {
                thread_id,
                left_out,
                summary,
            } => {
                if let Err(e) = self.seeded(thread_id, left_out, summary).await {
                    tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot start a continued thread");
                }
            }
        }
    }

    fn run_of_thread(&self, thread_id: u64) -> Option<&str> {
        self.runs
            .iter()
            .find(|(_, run)| run.thread_id == thread_id)
            .map(|(id, _)| id.as_str())
    }

    /// A run is queued or going, or a continuation waits for its first.
    fn is_busy(&self) -> bool {
        !self.runs.is_empty() || !self.seeding.is_empty()
    }

    // ---------------------------------------------------------------- idle timer

    /// Reads the agent's idle timeout when the clock does not know it (at start, and
    /// after the agent was reconfigured): one query, not one per tick.
    async fn read_idle_timeout(&mut self) {
        let Some(saver) = self.shared.idle_saver.get() else {
            return;
        };
        if !self.idle.needs_timeout() {
            return;
        }
        match self.shared.store.active_agent(&self.agent).await {
            Ok(Some(agent)) => self
                .idle
                .set_timeout(saver.idle_timeout_of(agent.idle_timeout_secs)),
            Ok(None) => self.idle.set_timeout(None), // destroyed: never
            Err(e) => {
                tracing::warn!(agent = %self.agent, error = %e, "idle timer: cannot read the agent's timeout");
                self.idle.set_timeout(None);
                self.idle.configured(); // read again after the next command
            }
        }
    }

    /// The idle timeout passed with nothing going: a task saves and clears the
    /// context (a model may write its description) and reports back.
    fn idle_fire(&mut self) {
        let Some(idle_for) = self.idle.fire(Instant::now(), self.is_busy()) else {
            return;
        };
        let Some(saver) = self.shared.idle_saver.get().cloned() else {
            return;
        };
        let agent = self.agent.clone();
        let itself = self.itself.clone();
        tokio::spawn(async move {
            saver.idle_save(&agent, idle_for).await;
            if let Some(itself) = itself.upgrade() {
                let _ = itself.send(Command::IdleSaved).await;
            }
        });
    }

    /// Whether the thread has a run here, or waits for its first one (a
    /// continuation being seeded).
    fn is_going(&self, thread_id: u64) -> bool {
        self.seeding.contains(&thread_id) || self.run_of_thread(thread_id).is_some()
    }

    // ---------------------------------------------------------------- routing

    async fn receive(
        &mut self,
        agent: &AgentRecord,
        content: &str,
        reply_to: Option<ReplyTo>,
        user: &str,
    ) -> Result<Received, StoreError> {
        let store = &self.shared.store;
        let replied = match reply_to {
            Some(reply_to) => match reply_to.thread(store, &agent.name).await? {
                Some(thread) => store.thread(&agent.name, thread).await?,
                None => None,
            },
            None => None,
        };
        // A reply into a task's thread goes on in that thread (its role's contract
        // holds for the turn it starts), never in a continuation without it.
        if let Some(thread) = replied.as_ref().filter(|t| t.role.is_some()) {
            return self.message(agent, thread.id, content, user).await;
        }
        let target = replied.map(|t| (t.id, t.status, self.is_going(t.id)));
        match decide::route(target) {
            Route::New => {
                let (thread_id, message_id) = store
                    .start_thread(&agent.name, &ChatMessage::user(content), user, None)
                    .await?;
                // The scheduler's threads (schedules, heartbeats) keep their request's
                // first line: a model-written title would cost a call each firing,
                // beyond the heartbeat's daily cap, with nobody there to read it.
                if self.shared.settings.threads.titles
                    && crate::principal::Principal::parse(user)
                        != crate::principal::Principal::Scheduler
                {
                    self.untitled.insert(thread_id);
                }
                self.thread_created(agent, thread_id, user, None).await?;
                Ok(Received {
                    thread_id,
                    message_id,
                    routed: Routed::New,
                })
            }
            Route::Inject { thread } => {
                let message_id = store
                    .add_user_message(&agent.name, thread, content, true)
                    .await?;
                self.inject(thread, message_id, content);
                tracing::info!(agent = %agent.name, thread_id = thread, message_id, "message injected into a going thread");
                Ok(Received {
                    thread_id: thread,
                    message_id,
                    routed: Routed::Injected,
                })
            }
            Route::Wake { thread } => {
                let message_id = store
                    .add_user_message(&agent.name, thread, content, true)
                    .await?;
                self.set_status(thread, ThreadStatus::Running).await;
                if let Some(record) = store.thread(&agent.name, thread).await? {
                    self.queue_run(agent, &record, Attempt::FIRST).await?;
                }
                Ok(Received {
                    thread_id: thread,
                    message_id,
                    routed: Routed::Injected,
                })
            }
            Route::Continue { from } => {
                // What the ended thread flushed into the daily log stays out of the
                // continuation too (`memory::flush`), named by its first message.
                let (earlier, flushed) = crate::memory::flush::leave_out(
                    store.thread_messages_placed(&agent.name, from).await?,
                    &store.thread_flushes(&agent.name, from).await?,
                );
                let ids: Vec<u64> = earlier.iter().map(|m| m.id).collect();
                let seed =
                    decide::seed(earlier.into_iter().map(|m| m.message).collect(), SEED_BYTES);
                // The kept messages are copied in the store, from the first on.
                let first_kept = (!seed.kept.is_empty()).then(|| ids[seed.left_out.len()]);
                let note = if seed.left_out.is_empty() {
                    flushed
                } else {
                    // Replaced by the summary of what was left out once it is written.
                    Some(decide::seed_note(seed.left_out.len(), None))
                };
                let summary = store
                    .thread(&agent.name, from)
                    .await?
                    .and_then(|t| t.summary)
                    .unwrap_or_else(|| crate::store::summary_of(content));
                let (thread_id, message_id) = store
                    .create_continuation(
                        &agent.name,
                        from,
                        note,
                        first_kept,
                        content,
                        user,
                        &summary,
                    )
                    .await?;
                self.announce(thread_id, user, Some(from));
                if seed.left_out.is_empty() {
                    self.queue_first_run(agent, thread_id).await?;
                } else {
                    self.summarise_left_out(agent, thread_id, seed.left_out);
                }
                Ok(Received {
                    thread_id,
                    message_id,
                    routed: Routed::ContinuedFrom(from),
                })
            }
        }
    }

    /// Starts a thread with a role in a task: created running with its first
    /// message, announced, its first run queued.
    async fn start_role(
        &mut self,
        agent: &AgentRecord,
        content: &str,
        user: &str,
        role: ThreadRole,
        workdir: Option<&str>,
    ) -> Result<u64, StoreError> {
        let (thread_id, _) = self
            .shared
            .store
            .start_role_thread(
                &agent.name,
                &ChatMessage::user(content),
                user,
                role,
                workdir,
            )
            .await?;
        if self.shared.settings.threads.titles {
            self.untitled.insert(thread_id);
        }
        tracing::info!(agent = %agent.name, thread_id, role = role.as_str(), workdir, "thread with a role started");
        self.thread_created(agent, thread_id, user, None).await?;
        Ok(thread_id)
    }

    /// The next message of `thread_id`: into its going run; else its next run
    /// starts with it, whatever its status: an ended thread with a role is
    /// reopened first (its history goes on). An ended chat thread is refused (a
    /// reply to it starts a continuation instead).
    async fn message(
        &mut self,
        agent: &AgentRecord,
        thread_id: u64,
        content: &str,
        user: &str,
    ) -> Result<Received, StoreError> {
        let store = self.shared.store.clone();
        let Some(thread) = store.thread(&agent.name, thread_id).await? else {
            return Err(StoreError::NotFound(format!(
                "agent '{}' has no thread {thread_id}",
                agent.name
            )));
        };
        let going = self.is_going(thread_id);
        if !going && thread.status.is_finished() {
            if !store.reopen_role_thread(&agent.name, thread_id).await? {
                return Err(StoreError::Conflict(format!(
                    "thread {thread_id} of '{}' has ended and has no role in a task; reply to \
                     one of its messages to continue it in a new thread",
                    agent.name
                )));
            }
            tracing::info!(agent = %agent.name, thread_id, %user, "ended thread with a role woken by its next message");
        }
        let message_id = store
            .add_user_message(&agent.name, thread_id, content, true)
            .await?;
        let route = match (going, thread.status) {
            (true, _) => Route::Inject { thread: thread_id },
            // Going in the store but not here: its run is about to be resumed and
            // takes the message with it.
            (false, ThreadStatus::Running | ThreadStatus::WaitingForPermission) => {
                Route::Inject { thread: thread_id }
            }
            (false, _) => Route::Wake { thread: thread_id },
        };
        match route {
            Route::Wake { .. } => {
                self.set_status(thread_id, ThreadStatus::Running).await;
                if let Some(record) = store.thread(&agent.name, thread_id).await? {
                    self.queue_run(agent, &record, Attempt::FIRST).await?;
                }
            }
            _ => self.inject(thread_id, message_id, content),
        }
        Ok(Received {
            thread_id,
            message_id,
            routed: Routed::Injected,
        })
    }

    /// A thread was created running: announce it and queue its first run.
    async fn thread_created(
        &mut self,
        agent: &AgentRecord,
        thread_id: u64,
        user: &str,
        continued_from: Option<u64>,
    ) -> Result<(), StoreError> {
        self.announce(thread_id, user, continued_from);
        self.queue_first_run(agent, thread_id).await
    }

    fn announce(&self, thread_id: u64, user: &str, continued_from: Option<u64>) {
        self.show(
            thread_id,
            FeedEvent::ThreadCreated(ThreadCreated {
                status: ThreadStatus::Running,
                user: user.to_string(),
                origin: ThreadOrigin::Started { continued_from },
            }),
        );
    }

    async fn queue_first_run(
        &mut self,
        agent: &AgentRecord,
        thread_id: u64,
    ) -> Result<(), StoreError> {
        let Some(record) = self.shared.store.thread(&agent.name, thread_id).await? else {
            return Ok(());
        };
        self.queue_run(agent, &record, Attempt::FIRST).await
    }

    /// Hands a user message to the thread's run: to its worker when it has one,
    /// into its assignment while it waits for one.
    fn inject(&mut self, thread_id: u64, message_id: u64, content: &str) {
        let Some(run_id) = self.run_of_thread(thread_id).map(str::to_string) else {
            return; // resumed later from the store, with the message as an input
        };
        let input = Input {
            message_id,
            content: content.to_string(),
        };
        let Some(run) = self.runs.get_mut(&run_id) else {
            return;
        };
        match run.delivered_to {
            Some(_) => {
                if let Some((_, sender)) = self.shared.registry.sender(&self.agent) {
                    let _ = sender.send(ControlCommand::InjectMessage { run_id, input });
                }
                // Without a worker, the resumption takes it from the store.
            }
            None => run.assignment.inputs.push(input),
        }
    }

    // ---------------------------------------------------------------- runs

    /// Builds the thread's next run and queues it; a run that cannot be built (no
    /// provider, no model, too large) fails the thread with the reason.
    async fn queue_run(
        &mut self,
        agent: &AgentRecord,
        thread: &ThreadRecord,
        attempt: Attempt,
    ) -> Result<(), StoreError> {
        let builder = Builder {
            store: &self.shared.store,
            catalog: &self.shared.catalog,
            profiles: &self.shared.profiles,
            settings: &self.shared.settings,
            role_hooks: self.shared.role_hooks.get().map(AsRef::as_ref),
        };
        let mut run = match builder.build(agent, thread, attempt).await? {
            Ok(run) => run,
            Err(failure) => {
                tracing::warn!(
                    agent = %agent.name,
                    thread_id = thread.id,
                    failure_kind = failure.kind.as_str(),
                    error = %failure.message,
                    "run ended before it started"
                );
                // The turn of a thread with a role ends here too.
                if let Some(role) = thread.role {
                    self.roles.insert(thread.id, (role, String::new()));
                }
                self.end_thread(thread.id, ThreadStatus::Failed, Some(&failure))
                    .await?;
                return Ok(());
            }
        };
        run.resumed_call = self.next_resumed.take();
        let span = self.run_span(agent, thread, &run, attempt);
        self.shared
            .store
            .insert_run(crate::store::NewRun {
                agent: &agent.name,
                thread: thread.id,
                run_id: &run.run_id,
                attempt: attempt.number,
                first_step: run.first_step_number,
                stalled: attempt.stalled,
                trace_context: &crate::telemetry::context_of(&span),
                backend: run.backend,
            })
            .await?;
        tracing::debug!(agent = %agent.name, thread_id = thread.id, run_id = %run.run_id, attempt = attempt.number, "run queued");
        crate::metrics::run_started();

        label(&span, agent, thread);
        // The worker's spans of this run continue its trace (and only this agent's
        // workers may write to it).
        run.trace_context = crate::telemetry::context_of(&span);
        self.shared.traces.give(&agent.name, &run.trace_context);
        self.queue.push_back(run.run_id.clone());
        if let Some(role) = thread.role {
            self.roles.insert(thread.id, (role, run.run_id.clone()));
        }
        self.runs.insert(
            run.run_id.clone(),
            ActiveRun {
                thread_id: thread.id,
                started_by: thread.created_by.clone(),
                role: thread.role,
                span,
                assignment: Box::new(run),
                delivered_to: None,
                started: false,
                open_steps: HashMap::new(),
                calls: HashMap::new(),
                budget: RunBudget::default(),
                last_event: Instant::now(),
            },
        );
        self.deliver().await;
        Ok(())
    }

    /// Shows an event on the live feed after those queued before it.
    fn show(&self, thread_id: u64, event: FeedEvent) {
        self.publisher.when_stored(
            crate::store::Pending::ready(true),
            Publication { thread_id, event },
        );
    }

    /// Waits until the events this actor queued to the store are committed.
    async fn flush(&mut self) {
        if self.unflushed {
            self.shared.store.flush().await;
            self.unflushed = false;
        }
    }

    /// Hands queued runs to the agent's worker, if one is connected.
    async fn deliver(&mut self) {
        // Shutting down: queued runs stay queued (in the store too) for the next start.
        // Holding: a receipt hook runs first; delivery follows it.
        if self.holding
            || self
                .shared
                .draining
                .load(std::sync::atomic::Ordering::Relaxed)
        {
            return;
        }
        let Some((generation, sender)) = self.shared.registry.sender(&self.agent) else {
            return;
        };
        while let Some(run_id) = self.queue.pop_front() {
            let Some(run) = self.runs.get_mut(&run_id) else {
                continue; // finished or killed while waiting
            };
            if sender
                .send(ControlCommand::AssignRun(run.assignment.clone()))
                .is_err()
            {
                // The connection closed under us; keep the run for the next worker.
                self.queue.push_front(run_id);
                break;
            }
            run.delivered_to = Some(generation);
            run.last_event = Instant::now();
            // Only a queued or running run is moved (`set_run_status`), so this can
            // never reopen one that ended.
            if let Err(e) = self
                .shared
                .store
                .set_run_status(&run_id, RunStatus::Running, None)
                .await
            {
                tracing::error!(%run_id, error = %e, "cannot record that a run started");
            }
            tracing::info!(agent = %self.agent, thread_id = run.thread_id, attempt = run.assignment.attempt, generation, "run started");
        }
    }

    /// Why an event of `run_id`, which is not going here, is refused: a run of this
    /// agent that ended (a kill crosses the worker's last events), or one it never
    /// had.
    async fn not_going(&self, run_id: &str) -> EventRejected {
        let owner = match self.shared.store.run(run_id).await {
            Ok(run) => run.map(|run| run.agent_name),
            Err(_) => None,
        };
        EventRejected::not_going(run_id, owner.as_deref(), &self.agent)
    }

    /// Applies one event of a run.
    async fn apply(
        &mut self,
        generation: Generation,
        seq: u64,
        mut event: WorkerEvent,
    ) -> Result<(), EventRejected> {
        let Some(run_id) = event.run_id().map(str::to_string) else {
            return Ok(());
        };
        let agent = self.agent.clone();
        let agent = agent.as_str();
        if !self.runs.contains_key(&run_id) {
            return Err(self.not_going(&run_id).await);
        }
        let (thread_id, over_budget, call_ended) = {
            let run = self
                .runs
                .get_mut(&run_id)
                .filter(|run| run.delivered_to == Some(generation))
                .ok_or_else(|| EventRejected::UnknownRun(run_id.clone()))?;
            run.started = true;
            run.last_event = Instant::now();
            run.trace(&event);
            let over_budget = run.budget.charge(&event, self.shared.run_limits).err();
            (run.thread_id, over_budget, run.call_ended(&event))
        };
        // A task's history has every tool call of its threads.
        if let (Some((tool, arguments, failed)), Some((role, _)), Some(hooks)) = (
            call_ended,
            self.roles.get(&thread_id),
            self.shared.role_hooks.get(),
        ) {
            hooks.tool_call_ended(agent, thread_id, *role, &tool, &arguments, failed);
        }
        if let Some(reason) = over_budget {
            self.flush().await;
            self.stop_run(&run_id, thread_id, reason).await;
            return Ok(());
        }
        let now_ms = chrono::Utc::now().timestamp_millis();
        let notes = match &mut event {
            WorkerEvent::StepStarted(step) => reports::check_step_started(step, now_ms),
            WorkerEvent::StepEnded(step) => reports::check_step_ended(step, now_ms),
            _ => Vec::new(),
        };
        for note in notes {
            tracing::warn!(agent, thread_id, %run_id, %note, "worker report corrected");
        }
        let mark = Some(RunMark {
            run_id: &run_id,
            seq,
        });
        let store = &self.shared.store;
        // The event goes to the store's writer; it is published once committed.
        let queued = match &event {
            WorkerEvent::StepStarted(step) => Some((
                store
                    .record_step_started(agent, thread_id, step, mark)
                    .await,
                FeedEvent::StepStarted(feed::StepStarted {
                    number: step.number,
                    kind: step.kind,
                    description: step.description.clone(),
                    started_at: format_epoch_ms(step.started_at_ms),
                    runs_in: step.runs_in,
                }),
            )),
            WorkerEvent::StepEnded(step) => Some((
                store.record_step_ended(agent, thread_id, step, mark).await,
                FeedEvent::StepEnded(feed::StepEnded {
                    number: step.number,
                    duration_ms: step.duration_ms,
                    failed: step.failed,
                    usage: step.usage,
                }),
            )),
            WorkerEvent::MessageAppended { message, .. } => {
                if !matches!(message.role, Role::Assistant | Role::Tool) {
                    return Err(EventRejected::ForbiddenRole(message.role.as_str()));
                }
                Some((
                    store.append_message(agent, thread_id, message, mark).await,
                    FeedEvent::Message(message.clone()),
                ))
            }
            WorkerEvent::InputTaken { message_id, .. } => Some((
                store.take_input(agent, thread_id, *message_id, mark).await,
                FeedEvent::InputTaken {
                    message_id: *message_id,
                },
            )),
            WorkerEvent::ResumedCallDone {
                call_id, is_error, ..
            } => {
                let stored = store
                    .record_resumed_call(
                        agent,
                        thread_id,
                        call_id,
                        *is_error,
                        RunMark {
                            run_id: &run_id,
                            seq,
                        },
                    )
                    .await;
                self.unflushed = true;
                drop(stored);
                return Ok(());
            }
            WorkerEvent::CliSessionStarted { session_id, .. } => {
                // Stored with the run for the thread's next run; nothing to show.
                let stored = store
                    .record_cli_session(
                        agent,
                        thread_id,
                        session_id,
                        RunMark {
                            run_id: &run_id,
                            seq,
                        },
                    )
                    .await;
                self.unflushed = true;
                drop(stored);
                return Ok(());
            }
            _ => None,
        };
        if let Some((pending, shown)) = queued {
            self.unflushed = true;
            self.publisher.when_stored(
                pending,
                Publication {
                    thread_id,
                    event: shown,
                },
            );
            let answered = matches!(&event, WorkerEvent::MessageAppended { message, .. }
                if message.role == Role::Assistant);
            if answered && self.untitled.contains(&thread_id) {
                self.answered.insert(thread_id);
            }
            return Ok(());
        }
        if let WorkerEvent::RunCompleted { .. } | WorkerEvent::RunFailed { .. } = &event
            && let Some(worker) = self.shared.registry.credential_of(agent, generation)
        {
            self.audit_answer(thread_id, &run_id, &event, &worker).await;
        }
        let result = match &event {
            WorkerEvent::RunCompleted { .. } => self.run_completed(&run_id, thread_id).await,
            WorkerEvent::RunFailed { kind, error, .. } => {
                if *kind == FailureKind::Internal {
                    tracing::warn!(agent, thread_id, %run_id, %error, "the worker reported an internal failure");
                }
                let failure = Failure::new(*kind, error.as_str());
                self.finish(&run_id, ThreadStatus::Failed, Some(&failure))
                    .await
            }
            // Live text is only for live views (the whole message follows), never
            // shown before the events queued ahead of it.
            WorkerEvent::TextDelta { step, text, .. } => {
                self.publisher.when_stored(
                    crate::store::Pending::ready(true),
                    Publication {
                        thread_id,
                        event: FeedEvent::Text {
                            step: *step,
                            text: text.clone(),
                        },
                    },
                );
                Ok(())
            }
            // Stored above.
            WorkerEvent::StepStarted(_)
            | WorkerEvent::StepEnded(_)
            | WorkerEvent::MessageAppended { .. }
            | WorkerEvent::InputTaken { .. }
            | WorkerEvent::CliSessionStarted { .. }
            | WorkerEvent::ResumedCallDone { .. } => Ok(()),
            // Tool checks go to the gate; background jobs and summaries elsewhere.
            WorkerEvent::ToolCheck { .. }
            | WorkerEvent::Hello { .. }
            | WorkerEvent::Heartbeat { .. }
            | WorkerEvent::JobStarted(_)
            | WorkerEvent::JobEnded { .. }
            | WorkerEvent::Summary { .. }
            | WorkerEvent::AgentFilesDeleted { .. }
            | WorkerEvent::McpServerState { .. } => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(agent, thread_id, %run_id, error = %e, "cannot record worker event");
        }
        Ok(())
    }

    /// A dial-in worker ended a run: the audit log says which worker wrote the
    /// thread's answer (the messages themselves carry no worker).
    async fn audit_answer(&self, thread_id: u64, run_id: &str, event: &WorkerEvent, worker: &str) {
        let (decision, outcome) = match event {
            WorkerEvent::RunCompleted { .. } => (crate::store::AuditDecision::Done, "completed"),
            _ => (crate::store::AuditDecision::Failed, "failed"),
        };
        let detail = json!({"run_id": run_id, "outcome": outcome}).to_string();
        let entry = crate::store::AuditEntry {
            agent_name: &self.agent,
            action: "thread:answer",
            decision,
            user_id: None,
            detail: Some(detail),
            thread_id: Some(thread_id),
            call_id: None,
            worker: Some(worker),
        };
        if let Err(e) = self.shared.store.audit(entry).await {
            tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot write audit entry");
        }
    }

    /// The model ended its turn. A user message that reached the thread too late
    /// for this run starts the next one; otherwise the thread is completed.
    async fn run_completed(&mut self, run_id: &str, thread_id: u64) -> Result<(), StoreError> {
        if self.deferred.contains_key(&thread_id) {
            return self.deferring_run_ended(run_id, thread_id).await;
        }
        let store = self.shared.store.clone();
        if store
            .pending_inputs(&self.agent, thread_id)
            .await?
            .is_empty()
        {
            return self.finish(run_id, ThreadStatus::Completed, None).await;
        }
        let Some(run) = self.remove_run(run_id) else {
            return Ok(());
        };
        store
            .set_run_status(run_id, RunStatus::Completed, None)
            .await?;
        run.span
            .in_scope(|| tracing::info!("run finished; a message it did not see starts the next"));
        let agent = store.active_agent(&self.agent).await?;
        let thread = store.thread(&self.agent, thread_id).await?;
        if let (Some(agent), Some(thread)) = (agent, thread) {
            self.queue_run(&agent, &thread, Attempt::FIRST).await?;
        }
        Ok(())
    }

    /// A run that deferred a call for a person ended its turn: the thread waits for
    /// the answer without a run (`waiting_for_permission`), or goes on at once if
    /// the answer came while the run wound down.
    async fn deferring_run_ended(
        &mut self,
        run_id: &str,
        thread_id: u64,
    ) -> Result<(), StoreError> {
        let Some(run) = self.remove_run(run_id) else {
            return Ok(());
        };
        self.queue.retain(|id| id != run_id);
        self.shared
            .store
            .set_run_status(run_id, RunStatus::Completed, None)
            .await?;
        match self.deferred.get_mut(&thread_id).and_then(Option::take) {
            Some(resumed) => {
                self.deferred.remove(&thread_id);
                run.span.in_scope(|| {
                    tracing::info!("run ended its turn; the deferred call was answered meanwhile")
                });
                self.start_resumed(thread_id, *resumed).await
            }
            None => {
                run.span.in_scope(|| {
                    tracing::info!("run ended its turn; the thread waits for a person's answer")
                });
                self.set_status(thread_id, ThreadStatus::WaitingForPermission)
                    .await;
                Ok(())
            }
        }
    }

    /// The answer to a deferred call: the thread's next run carries it, now or
    /// when the run that deferred it ends. Ignored for a thread that is no longer
    /// waiting (it was killed or failed meanwhile).
    async fn resume_deferred(&mut self, thread_id: u64, resumed: Box<ResumedCall>) {
        let winding_down = self.run_of_thread(thread_id).is_some();
        let Some(slot) = self.deferred.get_mut(&thread_id) else {
            tracing::debug!(agent = %self.agent, thread_id, "answer to a deferred call of a thread that no longer waits; dropped");
            return;
        };
        if winding_down {
            *slot = Some(resumed);
            return;
        }
        self.deferred.remove(&thread_id);
        if let Err(e) = self.start_resumed(thread_id, *resumed).await {
            tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot resume thread after a deferred call");
        }
    }

    async fn start_resumed(
        &mut self,
        thread_id: u64,
        resumed: ResumedCall,
    ) -> Result<(), StoreError> {
        let store = self.shared.store.clone();
        let (Some(agent), Some(thread)) = (
            store.active_agent(&self.agent).await?,
            store.thread(&self.agent, thread_id).await?,
        ) else {
            return Ok(());
        };
        if thread.status.is_finished() {
            return Ok(());
        }
        self.set_status(thread_id, ThreadStatus::Running).await;
        tracing::info!(agent = %self.agent, thread_id, approval_id = %resumed.approval_id, allowed = resumed.allowed, "thread goes on with an answered deferred call");
        self.next_resumed = Some(resumed);
        let queued = self.queue_run(&agent, &thread, Attempt::FIRST).await;
        self.next_resumed = None;
        queued
    }

    /// Ends a run whose worker reported more than a run may store: the thread fails
    /// with `reason`, the worker is told to cancel it, and what it still sends about
    /// it is refused as the report of an unknown run.
    async fn stop_run(&mut self, run_id: &str, thread_id: u64, reason: String) {
        tracing::warn!(agent = %self.agent, thread_id, run_id, reason, "run over its budget; failing and cancelling it");
        self.cancel_in_worker(run_id, &reason);
        let failure = Failure::new(FailureKind::Limit, reason);
        if let Err(e) = self
            .finish(run_id, ThreadStatus::Failed, Some(&failure))
            .await
        {
            tracing::error!(agent = %self.agent, thread_id, run_id, error = %e, "cannot fail thread");
        }
    }

    fn cancel_in_worker(&self, run_id: &str, reason: &str) {
        if let Some((_, sender)) = self.shared.registry.sender(&self.agent) {
            let _ = sender.send(ControlCommand::CancelRun {
                run_id: run_id.to_string(),
                reason: reason.to_string(),
            });
        }
    }

    /// Ends a run and its thread.
    async fn finish(
        &mut self,
        run_id: &str,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) -> Result<(), StoreError> {
        let Some(run) = self.remove_run(run_id) else {
            return Ok(());
        };
        self.queue.retain(|id| id != run_id);
        // Idle now: titled if it was answered (nothing to title it from otherwise).
        if self.untitled.remove(&run.thread_id) && self.answered.remove(&run.thread_id) {
            self.title(run.thread_id);
        }
        run.span.in_scope(|| {
            tracing::info!(
                status = status.as_str(),
                failure_kind = failure.map(|f| f.kind.as_str()),
                error = failure.map(|f| f.message.as_str()),
                "run ended"
            )
        });
        let run_status = match status {
            ThreadStatus::Completed => RunStatus::Completed,
            ThreadStatus::Killed => RunStatus::Killed,
            _ => RunStatus::Failed,
        };
        self.shared
            .store
            .set_run_status(run_id, run_status, failure.map(|f| f.message.as_str()))
            .await?;
        self.end_thread(run.thread_id, status, failure).await
    }

    /// Finishes a thread in the store and tells live subscribers; a thread with a
    /// role tells the task engine its turn ended.
    async fn end_thread(
        &mut self,
        thread_id: u64,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) -> Result<(), StoreError> {
        let role = status
            .is_finished()
            .then(|| self.roles.remove(&thread_id))
            .flatten();
        if status.is_finished() {
            self.deferred.remove(&thread_id);
        }
        // A question to a person the thread was waiting on is withdrawn.
        self.shared
            .approvals
            .cancel_thread(&self.agent, thread_id)
            .await;
        let stored = self
            .shared
            .store
            .set_thread_status(&self.agent, thread_id, status, failure)
            .await;
        // Told once the store says so (the engine reads the thread), and even when
        // it could not: the turn is over either way.
        if let Some((role, run_id)) = role {
            self.turn_ended(thread_id, role, run_id, status, failure);
        }
        stored?;
        if status.is_finished() {
            crate::metrics::run_ended(status.as_str());
        }
        self.show(
            thread_id,
            status_event(status, failure.map(|f| (f.kind, f.message.as_str()))),
        );
        Ok(())
    }

    /// Tells the task engine a turn of a thread with a role ended (it only queues).
    fn turn_ended(
        &self,
        thread_id: u64,
        role: ThreadRole,
        run_id: String,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) {
        let Some(hooks) = self.shared.role_hooks.get() else {
            return;
        };
        let end = match status {
            ThreadStatus::Completed => TurnEnd::Completed { run_id },
            ThreadStatus::Killed => TurnEnd::Killed,
            _ => TurnEnd::Failed(failure.cloned().unwrap_or_else(|| {
                Failure::new(FailureKind::Internal, "the run ended without a reason")
            })),
        };
        tracing::debug!(agent = %self.agent, thread_id, role = role.as_str(), ?end, "turn of a thread with a role ended");
        hooks.turn_ended(&self.agent, thread_id, role, end);
    }

    /// Moves a going thread to `status` and tells live subscribers.
    async fn set_status(&self, thread_id: u64, status: ThreadStatus) {
        match self
            .shared
            .store
            .set_thread_status(&self.agent, thread_id, status, None)
            .await
        {
            Ok(true) => self.show(thread_id, status_event(status, None)),
            // The thread ended meanwhile; its final status stands.
            Ok(false) => {}
            Err(e) => {
                tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot record thread status")
            }
        }
    }

    async fn set_waiting(&mut self, thread_id: u64, waiting: bool) {
        if let Some(run_id) = self.run_of_thread(thread_id).map(str::to_string)
            && let Some(run) = self.runs.get_mut(&run_id)
        {
            run.last_event = Instant::now();
        }
        let status = if waiting {
            ThreadStatus::WaitingForPermission
        } else {
            ThreadStatus::Running
        };
        self.set_status(thread_id, status).await;
    }

    fn agent_changed(&mut self, change: AgentChange) {
        for run in self.runs.values_mut() {
            let assignment = &mut run.assignment;
            if let Some((model, route)) = &change.model {
                assignment.agent.model = model.clone();
                assignment.model = route.clone();
            }
            if let Some(prompt) = &change.system_prompt {
                assignment.agent.system_prompt = prompt.clone();
            }
            if let Some(tools) = &change.tools {
                assignment.agent.tools = tools.clone();
            }
            if let Some(identity) = &change.identity {
                assignment.agent.identity = identity.clone();
            }
            if let Some(memory) = &change.memory {
                assignment.agent.memory = memory.clone();
            }
        }
        if let Some((_, sender)) = self.shared.registry.sender(&self.agent) {
            let _ = sender.send(ControlCommand::UpdateAgent(change));
        }
    }

    // ---------------------------------------------------------------- durability

    /// A worker ended. Its runs that had not started wait for the next worker; the
    /// started ones are resumed as new attempts from the stored history. If the
    /// worker never attached, waiting could be forever: its queued runs fail.
    async fn worker_lost(&mut self, lost: WorkerLost) {
        let never_ran = Failure::new(
            FailureKind::Interrupted,
            format!(
                "{}; this thread could not start. Send the message again once the worker runs.",
                lost.reason
            ),
        );
        let mut never_started = Vec::new();
        let mut interrupted = Vec::new();
        for (run_id, run) in self.runs.iter_mut() {
            match decide::on_loss(
                run.delivered_to,
                run.started,
                lost.generation,
                lost.attached,
            ) {
                OnLoss::Untouched => {}
                OnLoss::Fail => never_started.push(run_id.clone()),
                OnLoss::Resume => interrupted.push(run_id.clone()),
                OnLoss::Requeue => {
                    run.delivered_to = None;
                    self.queue.push_front(run_id.clone());
                }
            }
        }
        // A re-queued run takes every message injected into it meanwhile.
        let requeued: Vec<(String, u64)> = self
            .queue
            .iter()
            .filter_map(|id| self.runs.get(id).map(|r| (id.clone(), r.thread_id)))
            .collect();
        for (run_id, thread_id) in requeued {
            match self
                .shared
                .store
                .pending_inputs(&self.agent, thread_id)
                .await
            {
                Ok(pending) => {
                    if let Some(run) = self.runs.get_mut(&run_id) {
                        run.assignment.inputs = pending
                            .into_iter()
                            .map(|(message_id, content)| Input {
                                message_id,
                                content,
                            })
                            .collect();
                    }
                }
                Err(e) => {
                    tracing::error!(agent = %self.agent, %run_id, error = %e, "cannot read a thread's pending messages")
                }
            }
        }
        // The agent's next worker may have attached before this loss was handled
        // (losses reach the actor through a queue of their own); it gets them now.
        self.deliver().await;
        for run_id in never_started {
            if let Err(e) = self
                .finish(&run_id, ThreadStatus::Failed, Some(&never_ran))
                .await
            {
                tracing::error!(agent = %self.agent, %run_id, error = %e, "cannot fail thread");
            }
        }
        for run_id in interrupted {
            let Some(run) = self.runs.remove(&run_id) else {
                continue;
            };
            self.queue.retain(|id| *id != run_id);
            let result = async {
                self.shared
                    .store
                    .set_run_status(&run_id, RunStatus::Interrupted, Some(&lost.reason))
                    .await?;
                let previous = self.shared.store.run(&run_id).await?;
                let agent = self.shared.store.active_agent(&self.agent).await?;
                Ok::<_, StoreError>((previous, agent))
            }
            .await;
            match result {
                Ok((Some(previous), Some(agent))) => {
                    run.span.in_scope(|| tracing::warn!(reason = %lost.reason, "run interrupted by its worker's end; resuming"));
                    self.resume(&agent, &previous, &lost.reason).await;
                }
                Ok(_) => {
                    let failure = Failure::new(
                        FailureKind::Interrupted,
                        format!("{}; its agent is gone, so it cannot go on", lost.reason),
                    );
                    let _ = self
                        .end_thread(run.thread_id, ThreadStatus::Failed, Some(&failure))
                        .await;
                }
                Err(e) => {
                    tracing::error!(agent = %self.agent, %run_id, error = %e, "cannot resume a run");
                }
            }
        }
    }

    /// Resumes a thread whose run `previous` was interrupted: a new attempt from the
    /// stored history (a tool call without a result is answered as interrupted by the
    /// worker's transcript repair; a model call is made again), unless it has been
    /// resumed too often without progress.
    async fn resume(&mut self, agent: &AgentRecord, previous: &RunRecord, reason: &str) {
        let thread_id = previous.thread_id;
        let result = async {
            let store = &self.shared.store;
            let Some(thread) = store.thread(&agent.name, thread_id).await? else {
                return Ok(());
            };
            if thread.status.is_finished() {
                return Ok(());
            }
            let max = self.shared.settings.threads.max_resumes;
            match decide::resume(previous.stored, previous.stalled, max) {
                Resumption::Fail(why) => {
                    let failure = Failure::new(
                        FailureKind::Interrupted,
                        format!("{reason}; this thread was {why}. Send the message again to retry."),
                    );
                    self.end_thread(thread_id, ThreadStatus::Failed, Some(&failure))
                        .await
                }
                Resumption::Resume { stalled } => {
                    // The interrupted run's question is withdrawn: its call is
                    // answered as interrupted, and the model may ask again.
                    self.shared
                        .approvals
                        .cancel_thread(&agent.name, thread_id)
                        .await;
                    store.close_open_steps(&agent.name, thread_id).await?;
                    if thread.status == ThreadStatus::WaitingForPermission {
                        self.set_status(thread_id, ThreadStatus::Running).await;
                    }
                    let attempt = Attempt {
                        number: previous.attempt + 1,
                        stalled,
                    };
                    self.show(
                        thread_id,
                        FeedEvent::Status(StatusChange {
                            status: ThreadStatus::Running,
                            detail: StatusDetail::Resumed {
                                resumed: attempt.number,
                                reason: reason.to_string(),
                            },
                        }),
                    );
                    tracing::info!(agent = %agent.name, thread_id, attempt = attempt.number, %reason, "resuming thread");
                    // The new attempt continues the interrupted one's trace.
                    self.next_trace =
                        Some((previous.trace_context.clone(), Some(reason.to_string())));
                    let queued = self.queue_run(agent, &thread, attempt).await;
                    self.next_trace = None;
                    queued
                }
            }
        }
        .await;
        if let Err(e) = result {
            tracing::error!(agent = %agent.name, thread_id, error = %e, "cannot resume thread");
        }
    }

    // ---------------------------------------------------------------- kill, watchdog

    /// Kills a thread (E4): its run is taken off the queue or cancelled in its worker
    /// (which ends the model call, kills the running tool's process group and frees
    /// its file locks), a question it waits on is withdrawn (a deny), and the thread
    /// ends `killed` with its history so far. Returns whether it was still going; a
    /// thread with no run here (ended, or never started) is left as it is.
    async fn kill(&mut self, thread_id: u64, user: &str) -> Result<bool, StoreError> {
        let reason = format!("killed by {user}");
        if self.seeding.remove(&thread_id) {
            let failure = Failure::new(FailureKind::Killed, reason);
            self.end_thread(thread_id, ThreadStatus::Killed, Some(&failure))
                .await?;
            return Ok(true);
        }
        let Some(run_id) = self.run_of_thread(thread_id).map(str::to_string) else {
            // Waiting without a run for the answer to a deferred call.
            if self.deferred.contains_key(&thread_id) {
                let failure = Failure::new(FailureKind::Killed, reason);
                self.end_thread(thread_id, ThreadStatus::Killed, Some(&failure))
                    .await?;
                return Ok(true);
            }
            return Ok(false);
        };
        if self
            .runs
            .get(&run_id)
            .is_some_and(|run| run.delivered_to.is_some())
        {
            self.cancel_in_worker(&run_id, &reason);
        }
        if let Some(run) = self.runs.get(&run_id) {
            run.span.in_scope(|| tracing::info!(%reason, "run killed"));
        }
        let failure = Failure::new(FailureKind::Killed, reason);
        self.finish(&run_id, ThreadStatus::Killed, Some(&failure))
            .await?;
        Ok(true)
    }

    async fn fail_all(&mut self, failure: &Failure) {
        let waiting: Vec<u64> = self
            .deferred
            .keys()
            .copied()
            .filter(|thread| self.run_of_thread(*thread).is_none())
            .collect();
        for thread_id in std::mem::take(&mut self.seeding).into_iter().chain(waiting) {
            if let Err(e) = self
                .end_thread(thread_id, ThreadStatus::Failed, Some(failure))
                .await
            {
                tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot fail thread");
            }
        }
        let runs: Vec<String> = self.runs.keys().cloned().collect();
        for run_id in runs {
            if let Err(e) = self
                .finish(&run_id, ThreadStatus::Failed, Some(failure))
                .await
            {
                tracing::error!(agent = %self.agent, %run_id, error = %e, "cannot fail thread");
            }
        }
    }

    /// Ends runs that are stuck: started, no step open, nothing reported for
    /// `[threads] stuck_after_secs`.
    async fn watchdog(&mut self) {
        let stuck_after = self.shared.settings.threads.stuck_after;
        let stuck: Vec<(String, u64)> = self
            .runs
            .iter()
            .filter(|(_, run)| {
                run.delivered_to.is_some()
                    && decide::is_stuck(
                        run.open_steps.values().map(|(kind, _)| kind),
                        run.last_event.elapsed(),
                        stuck_after,
                    )
            })
            .map(|(id, run)| (id.clone(), run.thread_id))
            .collect();
        for (run_id, thread_id) in stuck {
            let reason = format!(
                "stuck: nothing reported for {} s and no command or approval in progress \
                 ([threads] stuck_after_secs); its partial output is kept. Send the message again to retry",
                stuck_after.as_secs()
            );
            tracing::warn!(agent = %self.agent, thread_id, %run_id, "run stuck; ending it");
            self.cancel_in_worker(&run_id, &reason);
            let failure = Failure::new(FailureKind::Limit, reason);
            if let Err(e) = self
                .finish(&run_id, ThreadStatus::Failed, Some(&failure))
                .await
            {
                tracing::error!(agent = %self.agent, thread_id, error = %e, "cannot fail a stuck thread");
            }
        }
    }
}

/// Worker events the actor queues to the store without waiting for the commit
/// (published once stored): the frequent ones that only add to a thread.
impl ActiveRun {
    /// Remembers the tool calls an assistant message asks for; a tool result ends
    /// one: its name, arguments and whether it failed.
    fn call_ended(&mut self, event: &WorkerEvent) -> Option<(String, String, bool)> {
        let WorkerEvent::MessageAppended { message, .. } = event else {
            return None;
        };
        match message.role {
            Role::Assistant => {
                for call in &message.tool_calls {
                    self.calls
                        .insert(call.id.clone(), (call.name.clone(), call.arguments.clone()));
                }
                None
            }
            Role::Tool => {
                let asked = message
                    .tool_call_id
                    .as_ref()
                    .and_then(|id| self.calls.remove(id));
                // A call asked before a resumption: its name is on the result.
                let (name, arguments) = asked.unwrap_or_else(|| {
                    (message.tool_name.clone().unwrap_or_default(), String::new())
                });
                Some((name, arguments, message.is_error))
            }
            _ => None,
        }
    }
}

fn is_pipelined(event: &WorkerEvent) -> bool {
    matches!(
        event,
        WorkerEvent::StepStarted(_)
            | WorkerEvent::StepEnded(_)
            | WorkerEvent::MessageAppended { .. }
            | WorkerEvent::InputTaken { .. }
            | WorkerEvent::TextDelta { .. }
    )
}
