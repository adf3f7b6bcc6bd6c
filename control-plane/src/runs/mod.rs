//! Runs: turning user messages into work for the agent's worker, and the worker's
//! events back into thread state.
//!
//! One owner per agent's live state: each agent has an actor ([`actor`]), one task
//! that owns that agent's queued and running runs and does every transition of
//! them (routing a message, delivering to a worker, storing an event, a worker's
//! death and the resumption after it, kill, the watchdog) as one `match` arm over
//! a bounded command channel. Everything else reaches an agent's runs only through
//! [`Runs`], which sends commands and awaits the answers. The database is the truth
//! a restarted control plane starts from: runs are rows (`store::runs`), and every
//! worker event is stored idempotently by its `(run_id, seq)`.
//!
//! Also kept here (see `actor`, `assignment`, `publisher`, `idle`):
//! - an assignment over the link limit is never sent: its thread fails, naming the bound;
//! - a run over its budget (`reports`) is failed and cancelled; every failed thread gets
//!   a `FailureKind` with its message;
//! - a tool check's audit row, queued after the events before it, is committed with or
//!   after them before the gate answers;
//! - a kill takes the run off the queue or sends `CancelRun`, withdraws its question and
//!   ends the thread `killed`; what the worker still sends about it is dropped (an ended
//!   run of this agent: expected, logged at debug; a run it never had: a warning);
//! - every known secret is scrubbed from a worker event's text by `grpc` before the event
//!   reaches the actor, so nothing here stores, publishes or logs one.
//!
//! A user message sent into a going run is stored *pending* (no place in the thread
//! yet) and sent to the worker as `InjectMessage`; the run takes it right before its next
//! model call (never between a tool call and its result) and reports `InputTaken`, which
//! gives the message its place. A message the run did not take before it ended starts
//! the thread's next run.

mod actor;
mod assignment;
pub mod decide;
pub mod idle;
mod publisher;
pub mod roles;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use chorus_proto::domain::{AgentChange, Failure, FailureKind, ResumedCall, WorkerEvent};
use tokio::sync::{mpsc, oneshot};

use crate::feed::{ApprovalAsked, FeedEvent, StatusChange, ThreadFeed};
use crate::permissions::profiles::ProfileCache;
use crate::principal::Principal;
use crate::providers::catalog::Catalog;
use crate::questions::Questions;
use crate::reports::RunLimits;
use crate::store::{AgentRecord, Store, StoreError, ThreadRole, ThreadStatus};
use crate::summaries::Summarizer;
use crate::workers::WorkerLost;
use crate::workers::registry::{Generation, Registry};

pub use assignment::{RunSettings, schema_settings};
pub use roles::{RoleHooks, RunContext, TurnEnd};

/// Commands an agent's actor takes at once before senders wait.
const COMMAND_QUEUE: usize = 256;

/// An event a worker is not entitled to send (or no longer needs to).
#[derive(Debug, thiserror::Error)]
pub enum EventRejected {
    #[error("run '{0}' is not a run of this worker's agent")]
    UnknownRun(String),
    /// A run of this agent that has ended here (killed, failed, completed): its
    /// worker's last events cross the end on the wire. Expected, not a forgery.
    #[error("run '{0}' has ended; its late event is dropped")]
    EndedRun(String),
    #[error("workers may add only assistant and tool messages, not {0}")]
    ForbiddenRole(&'static str),
}

/// Where a user message went (`routed` in the API).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Routed {
    New,
    Injected,
    ContinuedFrom(u64),
}

impl EventRejected {
    /// Why an event of `run_id`, not going here, is refused: the store knows it as a
    /// run of `owner` (`None`: not at all); a run of this `agent` has ended, any
    /// other was never this worker's to report on.
    pub fn not_going(run_id: &str, owner: Option<&str>, agent: &str) -> EventRejected {
        match owner {
            Some(owner) if owner == agent => EventRejected::EndedRun(run_id.to_string()),
            _ => EventRejected::UnknownRun(run_id.to_string()),
        }
    }

    /// Whether a worker sending this can be an attack (or a bug) worth a warning.
    pub fn is_suspicious(&self) -> bool {
        !matches!(self, EventRejected::EndedRun(_))
    }
}

impl Routed {
    pub fn as_string(&self) -> String {
        match self {
            Routed::New => "new".into(),
            Routed::Injected => "injected".into(),
            Routed::ContinuedFrom(thread) => format!("continued_from:{thread}"),
        }
    }
}

/// What a user message replies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplyTo {
    /// A Chorus message id (the HTTP API's `reply_to`).
    Message(u64),
    /// A frontend's own message id (Discord's), mapped through `message_refs`.
    External { frontend: String, id: String },
}

impl ReplyTo {
    /// The thread of `agent` the reply points into, if it points anywhere known.
    pub async fn thread(&self, store: &Store, agent: &str) -> Result<Option<u64>, StoreError> {
        match self {
            ReplyTo::Message(message) => store.message_thread(agent, *message).await,
            ReplyTo::External { frontend, id } => Ok(store
                .message_ref(frontend, id)
                .await?
                .filter(|r| r.agent_name == agent)
                .map(|r| r.thread_id)),
        }
    }
}

/// What a front end records about a message it passed in, run by the thread's actor
/// after the message is stored and before a run it starts reaches the worker: so a
/// crash can never leave a run going whose answer nobody knows is owed.
pub type OnReceived = Box<dyn FnOnce(Received) -> futures::future::BoxFuture<'static, ()> + Send>;

/// A user message, received: its thread, its id, and how it was routed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    pub thread_id: u64,
    pub message_id: u64,
    pub routed: Routed,
}

/// The answer when an agent's actor is gone.
fn stopped() -> StoreError {
    StoreError::Conflict("the agent's run queue has stopped; restart chorus".into())
}

/// Checks a thread's working directory: relative to the agent's workspace, below it
/// (no `..`, not absolute, not the workspace itself), plain names only.
pub fn check_workdir(workdir: &str) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "the working directory '{workdir}' {why}; give a directory relative to the agent's workspace, like tasks/7"
        ))
    };
    if workdir.starts_with('/') {
        return refuse("is absolute");
    }
    if workdir.contains('\0') || workdir.contains('\\') {
        return refuse("has a NUL byte or a backslash");
    }
    let parts: Vec<&str> = workdir
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.contains(&"..") {
        return refuse("leaves the workspace ('..')");
    }
    if parts.is_empty() {
        return refuse("names the workspace itself");
    }
    Ok(())
}

/// A `status` event of the live feed: the status and, when the thread failed, how
/// (`failure_kind`, for programs) and why (`error`, for people), as the thread view
/// shows them.
fn status_event(status: ThreadStatus, failure: Option<(FailureKind, &str)>) -> FeedEvent {
    FeedEvent::Status(StatusChange::new(status, failure))
}

/// Saves an idle agent's context (the sessions module): what an actor's idle timer
/// calls when it fires, from a task of its own.
#[tonic::async_trait]
pub trait IdleSaver: Send + Sync {
    /// The idle timeout of an agent with this setting of its own (`None`: never).
    fn idle_timeout_of(&self, agent_setting: Option<u64>) -> Option<Duration>;
    /// Saves (trigger `idle_timeout`), clears and notifies; `idle_for` is what
    /// the notification says.
    async fn idle_save(&self, agent: &str, idle_for: Duration);
}

/// What the actors share: the store and the services they call. Read-only.
pub(crate) struct Shared {
    store: Store,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    profiles: Arc<ProfileCache>,
    approvals: Arc<Questions>,
    settings: RunSettings,
    feed: ThreadFeed,
    run_limits: RunLimits,
    /// Writes the summary a long continuation starts from.
    summarizer: Arc<dyn Summarizer>,
    /// The traces each agent's workers are given (a run's), for the trace relay.
    traces: Arc<crate::telemetry::run_traces::RunTraces>,
    /// Set once at start; without it no agent is idle-saved.
    idle_saver: OnceLock<Arc<dyn IdleSaver>>,
    /// The task engine, set once at start: threads with a role are offered its
    /// tools and tell it when their turns end (without it they are offered none).
    role_hooks: OnceLock<Arc<dyn RoleHooks>>,
    /// The agents' memory, set once at start: where a run's end flushes a long
    /// thread's older context (`memory::flush`; without it nothing is flushed).
    memory: OnceLock<Arc<crate::memory::Memory>>,
    /// Set at shutdown: what workers still report is not applied (their runs stay
    /// open in the store and are resumed by the next start).
    stopping: AtomicBool,
    /// Set when shutdown begins: no queued run is delivered any more (it stays
    /// queued in the store for the next start), and `/readyz` says so.
    draining: AtomicBool,
}

struct Handle {
    commands: mpsc::Sender<actor::Command>,
    /// Runs queued or going, kept by the actor for cheap reads.
    active: Arc<AtomicUsize>,
}

pub struct Runs {
    shared: Arc<Shared>,
    agents: Mutex<HashMap<String, Handle>>,
}

impl crate::memory::LiveRuns for Runs {
    fn agent_changed<'a>(
        &'a self,
        agent: &'a str,
        change: AgentChange,
    ) -> futures::future::BoxFuture<'a, ()> {
        Box::pin(Runs::agent_changed(self, agent, change))
    }

    fn busy_agents(&self) -> Vec<String> {
        Runs::busy_agents(self)
    }
}

impl Runs {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        catalog: Arc<Catalog>,
        profiles: Arc<ProfileCache>,
        approvals: Arc<Questions>,
        summarizer: Arc<dyn Summarizer>,
        settings: RunSettings,
    ) -> Self {
        Runs {
            shared: Arc::new(Shared {
                store,
                registry,
                catalog,
                profiles,
                approvals,
                settings,
                feed: ThreadFeed::default(),
                run_limits: RunLimits::default(),
                summarizer,
                traces: Arc::default(),
                idle_saver: OnceLock::new(),
                role_hooks: OnceLock::new(),
                memory: OnceLock::new(),
                stopping: AtomicBool::new(false),
                draining: AtomicBool::new(false),
            }),
            agents: Mutex::new(HashMap::new()),
        }
    }

    /// What the offered tools' schemas are rendered with (assignments and changes).
    pub fn tool_schemas(&self) -> chorus_proto::tools::SchemaSettings {
        self.shared.settings.tool_schemas
    }

    /// The traces each agent's workers were given (for the trace and model relays,
    /// and the gate).
    pub fn traces(&self) -> &Arc<crate::telemetry::run_traces::RunTraces> {
        &self.shared.traces
    }

    /// The actor of `agent`, started on first use.
    fn actor(&self, agent: &str) -> (mpsc::Sender<actor::Command>, Arc<AtomicUsize>) {
        let mut agents = self
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let handle = agents.entry(agent.to_string()).or_insert_with(|| {
            let (commands, receiver) = mpsc::channel(COMMAND_QUEUE);
            let active = Arc::new(AtomicUsize::new(0));
            tokio::spawn(
                actor::AgentActor::new(
                    agent.to_string(),
                    self.shared.clone(),
                    active.clone(),
                    commands.downgrade(),
                )
                .run(receiver),
            );
            Handle { commands, active }
        });
        (handle.commands.clone(), handle.active.clone())
    }

    /// Sends `command` to the agent's actor and waits for its answer.
    async fn ask<T>(
        &self,
        agent: &str,
        command: impl FnOnce(oneshot::Sender<T>) -> actor::Command,
    ) -> Option<T> {
        let (reply, answer) = oneshot::channel();
        let (commands, _) = self.actor(agent);
        commands.send(command(reply)).await.ok()?;
        answer.await.ok()
    }

    async fn tell(&self, agent: &str, command: actor::Command) {
        let (commands, _) = self.actor(agent);
        let _ = commands.send(command).await;
    }

    /// Routes a user message (E1): a new thread, into a going or idle thread, or a
    /// new thread continuing an ended one.
    pub async fn receive(
        &self,
        agent: &AgentRecord,
        content: &str,
        reply_to: Option<ReplyTo>,
        user: &Principal,
    ) -> Result<Received, StoreError> {
        self.receive_traced(agent, content, reply_to, user, HashMap::new())
            .await
    }

    /// [`Runs::receive`], with `then` run once the message is stored and before a
    /// run it starts is handed to the worker.
    pub async fn receive_then(
        &self,
        agent: &AgentRecord,
        content: &str,
        reply_to: Option<ReplyTo>,
        user: &Principal,
        then: OnReceived,
    ) -> Result<Received, StoreError> {
        self.receive_with(agent, content, reply_to, user, HashMap::new(), Some(then))
            .await
    }

    /// [`Runs::receive`], with the caller's W3C trace context (an HTTP request's
    /// `traceparent`): a run the message starts is a child of that trace.
    pub async fn receive_traced(
        &self,
        agent: &AgentRecord,
        content: &str,
        reply_to: Option<ReplyTo>,
        user: &Principal,
        trace: HashMap<String, String>,
    ) -> Result<Received, StoreError> {
        self.receive_with(agent, content, reply_to, user, trace, None)
            .await
    }

    async fn receive_with(
        &self,
        agent: &AgentRecord,
        content: &str,
        reply_to: Option<ReplyTo>,
        user: &Principal,
        trace: HashMap<String, String>,
        then: Option<OnReceived>,
    ) -> Result<Received, StoreError> {
        self.ask(&agent.name, |reply| actor::Command::Receive {
            agent: Box::new(agent.clone()),
            content: content.to_string(),
            reply_to,
            // The actor and the store hold its text form (see `principal`).
            user: user.text(),
            trace,
            then,
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
    }

    /// Starts a new thread for `content`; returns its id.
    pub async fn start_thread(
        &self,
        agent: &AgentRecord,
        content: &str,
        user: &Principal,
    ) -> Result<u64, StoreError> {
        Ok(self.receive(agent, content, None, user).await?.thread_id)
    }

    /// Starts a thread with `role` in a task (working in `workdir`, relative to the
    /// agent's workspace, when set) for `content`; returns its id.
    pub async fn start_role_thread(
        &self,
        agent: &AgentRecord,
        content: &str,
        user: &Principal,
        role: ThreadRole,
        workdir: Option<&str>,
    ) -> Result<u64, StoreError> {
        if let Some(workdir) = workdir {
            // The engine names it (`tasks/<id>`); a bad one is its bug, refused here too.
            check_workdir(workdir).map_err(StoreError::Conflict)?;
        }
        self.ask(&agent.name, |reply| actor::Command::StartRole {
            agent: Box::new(agent.clone()),
            content: content.to_string(),
            user: user.text(),
            role,
            workdir: workdir.map(str::to_string),
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
    }

    /// The next message of a thread (a task's answer, its follow-up): into its
    /// going run, or as its next run whatever its status (an ended thread is woken,
    /// with its history; never continued into a new thread).
    pub async fn message_thread(
        &self,
        agent: &AgentRecord,
        thread_id: u64,
        content: &str,
        user: &Principal,
    ) -> Result<Received, StoreError> {
        self.ask(&agent.name, |reply| actor::Command::Message {
            agent: Box::new(agent.clone()),
            thread_id,
            content: content.to_string(),
            user: user.text(),
            reply,
        })
        .await
        .unwrap_or_else(|| Err(stopped()))
    }

    /// The task engine (once, at start).
    pub fn set_role_hooks(&self, hooks: Arc<dyn RoleHooks>) {
        let _ = self.shared.role_hooks.set(hooks);
    }

    /// The agents' memory (once, at start): long threads flush into it.
    pub fn set_memory(&self, memory: Arc<crate::memory::Memory>) {
        let _ = self.shared.memory.set(memory);
    }

    /// The task engine, once set.
    pub fn role_hooks(&self) -> Option<&Arc<dyn RoleHooks>> {
        self.shared.role_hooks.get()
    }

    /// The live feed of every thread's events.
    pub fn feed(&self) -> &ThreadFeed {
        &self.shared.feed
    }

    /// The agent changed (configure, self-edit): runs in progress use the new values
    /// from their next model call, runs still waiting get them in their assignment.
    /// Returns once the worker has been sent the change, so an answer sent to it
    /// after this (a self-edit's tool decision) reaches it after the change.
    pub async fn agent_changed(&self, agent: &str, change: AgentChange) {
        self.ask(agent, |sent| actor::Command::AgentChanged { change, sent })
            .await;
    }

    /// The thread of `run_id` and who started it, if it is a run of `agent` handed
    /// to `generation`.
    pub async fn thread_of(
        &self,
        agent: &str,
        generation: Generation,
        run_id: &str,
    ) -> Option<(u64, Option<Principal>)> {
        self.run_context(agent, generation, run_id)
            .await
            .map(|run| (run.thread_id, run.started_by))
    }

    /// [`Runs::thread_of`] with the thread's role, from the actor that owns the run.
    pub async fn run_context(
        &self,
        agent: &str,
        generation: Generation,
        run_id: &str,
    ) -> Option<RunContext> {
        self.ask(agent, |reply| actor::Command::ThreadOf {
            generation,
            run_id: run_id.to_string(),
            reply,
        })
        .await
        .flatten()
    }

    /// A thread starts or stops waiting for a person's answer.
    pub async fn set_waiting(&self, agent: &str, thread_id: u64, waiting: bool) {
        self.tell(agent, actor::Command::SetWaiting { thread_id, waiting })
            .await;
    }

    /// A CLI run's call that waits for a person was deferred (its hold passed):
    /// when that run ends, its thread stays `waiting_for_permission` until
    /// [`Runs::resume_deferred`] brings the answer.
    pub async fn defer(&self, agent: &str, thread_id: u64) {
        self.tell(agent, actor::Command::Defer { thread_id }).await;
    }

    /// The person answered a deferred call: the thread's next run carries it out
    /// (or tells its refusal) once the run that deferred it has ended. Nothing
    /// happens if the thread ended meanwhile (killed, failed).
    pub async fn resume_deferred(&self, agent: &str, thread_id: u64, resumed: ResumedCall) {
        self.tell(
            agent,
            actor::Command::ResumeDeferred {
                thread_id,
                resumed: Box::new(resumed),
            },
        )
        .await;
    }

    /// Tells the thread's live feed which approval it waits for.
    pub fn publish_approval(&self, agent: &str, thread_id: u64, approval: ApprovalAsked) {
        self.shared
            .feed
            .publish(agent, thread_id, FeedEvent::Approval(approval));
    }

    /// Puts an event of a thread on the live feed (e.g. an approval answered).
    pub fn publish(&self, agent: &str, thread_id: u64, event: FeedEvent) {
        self.shared.feed.publish(agent, thread_id, event);
    }

    /// Who saves idle agents' contexts (once, at start).
    pub fn set_idle_saver(&self, saver: Arc<dyn IdleSaver>) {
        let _ = self.shared.idle_saver.set(saver);
    }

    /// Activity of `agent` outside its runs (a restore): its idle timer starts over.
    pub async fn touch(&self, agent: &str) {
        self.tell(agent, actor::Command::Touch).await;
    }

    /// `agent`'s idle timeout may have changed: its actor reads it again.
    pub async fn idle_configured(&self, agent: &str) {
        self.tell(agent, actor::Command::IdleConfigured).await;
    }

    /// A worker of `agent` attached: its queued runs are handed to it.
    pub async fn deliver_pending(&self, agent: &str) {
        self.tell(agent, actor::Command::Deliver).await;
    }

    /// Applies one event of a run from `agent`'s worker (generation `generation`),
    /// stored before this returns.
    pub async fn apply(
        &self,
        agent: &str,
        generation: Generation,
        seq: u64,
        event: WorkerEvent,
    ) -> Result<(), EventRejected> {
        if event.run_id().is_none() || self.shared.stopping.load(Ordering::Relaxed) {
            return Ok(()); // hello / heartbeat; or shutting down
        }
        self.ask(agent, |reply| actor::Command::Event {
            generation,
            seq,
            event: Box::new(event),
            reply,
        })
        .await
        .unwrap_or(Ok(()))
    }

    /// A worker ended: its runs are resumed on the next worker (or wait for it).
    pub async fn worker_lost(&self, lost: WorkerLost) {
        if self.shared.stopping.load(Ordering::Relaxed) {
            return;
        }
        let agent = lost.agent.clone();
        let _ = self
            .ask(&agent, |reply| actor::Command::WorkerLost { lost, reply })
            .await;
    }

    /// The agent is going away: every run of it fails with `failure`.
    pub async fn fail_agent_runs(&self, agent: &str, failure: &Failure) {
        let _ = self
            .ask(agent, |reply| actor::Command::FailAll {
                failure: failure.clone(),
                reply,
            })
            .await;
    }

    /// Kills a thread (E4); see [`actor::AgentActor::kill`]. Returns whether it was
    /// still going.
    pub async fn kill_thread(
        &self,
        agent: &str,
        thread_id: u64,
        user: &str,
    ) -> Result<bool, StoreError> {
        self.ask(agent, |reply| actor::Command::Kill {
            thread_id,
            user: user.to_string(),
            reply,
        })
        .await
        .unwrap_or(Ok(false))
    }

    /// The threads of `agent` that have a run here (queued or going).
    pub async fn active_threads(&self, agent: &str) -> Vec<u64> {
        self.ask(agent, |reply| actor::Command::ActiveThreads { reply })
            .await
            .unwrap_or_default()
    }

    /// Whether `agent` has a run queued or going (cheap; for the idle timer).
    pub fn is_busy(&self, agent: &str) -> bool {
        self.agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .is_some_and(|h| h.active.load(Ordering::Relaxed) > 0)
    }

    /// The agents with a run queued or going (for the memory watcher).
    pub fn busy_agents(&self) -> Vec<String> {
        self.agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|(_, h)| h.active.load(Ordering::Relaxed) > 0)
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// At start: every run the store holds as open (its control plane died or
    /// stopped under it) is resumed as a new attempt; a thread left waiting on a
    /// deferred call goes on with the call refused; a thread whose agent is gone,
    /// or that was going without a run, fails with the reason. Returns how many
    /// threads were resumed.
    pub async fn resume_all(&self) -> Result<usize, StoreError> {
        let store = &self.shared.store;
        let mut resumed = 0;
        let mut last: HashMap<(String, u64), crate::store::RunRecord> = HashMap::new();
        for run in store.open_runs().await? {
            store
                .set_run_status(
                    &run.id,
                    crate::store::RunStatus::Interrupted,
                    Some("chorus stopped while it ran"),
                )
                .await?;
            last.insert((run.agent_name.clone(), run.thread_id), run);
        }
        for ((agent, _), run) in last {
            match store.active_agent(&agent).await? {
                Some(record) => {
                    // Awaited: the new run's row exists before threads without
                    // one are failed.
                    let _ = self
                        .ask(&agent, |reply| actor::Command::Resume {
                            agent: Box::new(record),
                            previous: Box::new(run),
                            reason: "chorus stopped while this thread ran".into(),
                            reply,
                        })
                        .await;
                    resumed += 1;
                }
                None => self.agent_gone(&agent, run.thread_id).await?,
            }
        }
        resumed += self.resume_left_waiting().await?;
        // Threads that never got as far as a run start their first one now.
        for (agent, thread_id) in store.threads_never_run().await? {
            match store.active_agent(&agent).await? {
                Some(record) => {
                    let _ = self
                        .ask(&agent, |reply| actor::Command::StartFirst {
                            agent: Box::new(record),
                            thread_id,
                            reply,
                        })
                        .await;
                    resumed += 1;
                }
                None => self.agent_gone(&agent, thread_id).await?,
            }
        }
        Ok(resumed)
    }

    /// At start: a thread the last control plane left waiting on a deferred call (a
    /// CLI run's, `gate`) goes on with the call refused, since the wait for the
    /// person ended with that control plane (a restart is a deny). The ask is
    /// audited as expired, saying why; the run reports the call's result.
    async fn resume_left_waiting(&self) -> Result<usize, StoreError> {
        let store = &self.shared.store;
        let mut resumed = 0;
        for (agent, thread_id) in store.threads_waiting_without_run().await? {
            if store.active_agent(&agent).await?.is_none() {
                self.agent_gone(&agent, thread_id).await?;
                continue;
            }
            // Without the approval it waited on, the thread fails with the others
            // left without a run.
            let Some(approval) = store
                .latest_approval_of_thread(&agent, thread_id)
                .await?
                .filter(|a| a.kind == crate::questions::QuestionKind::Approval)
            else {
                continue;
            };
            const WHY: &str = "chorus restarted before a person answered";
            let detail = serde_json::json!({
                "arguments": approval.detail.clone().unwrap_or_default(),
                "why": [WHY],
            })
            .to_string();
            store
                .audit(crate::store::AuditEntry {
                    agent_name: &agent,
                    action: &approval.actions.join("\n"),
                    decision: crate::store::AuditDecision::AskExpired,
                    user_id: approval.requested_by.as_ref(),
                    detail: Some(detail),
                    thread_id: Some(thread_id),
                    call_id: Some(&approval.call_id),
                    worker: None,
                })
                .await?;
            let resumed_call = ResumedCall {
                call: chorus_proto::domain::ToolCall {
                    id: approval.call_id.clone(),
                    name: approval.tool.clone(),
                    arguments: approval.detail.clone().unwrap_or_default(),
                },
                allowed: false,
                message: format!(
                    "Permission denied: {WHY}, so the call was not run; ask again if you still need it"
                ),
                result: None,
                approval_id: approval.id.clone(),
                answered_by: String::new(),
            };
            tracing::info!(%agent, thread_id, approval_id = %approval.id, "thread left waiting on a deferred call goes on with the call refused");
            let _ = self
                .ask(&agent, |reply| actor::Command::ResumeRefused {
                    thread_id,
                    resumed: Box::new(resumed_call),
                    reply,
                })
                .await;
            resumed += 1;
        }
        Ok(resumed)
    }

    async fn agent_gone(&self, agent: &str, thread_id: u64) -> Result<(), StoreError> {
        let failure = Failure::new(
            FailureKind::Config,
            format!("its agent '{agent}' no longer exists, so it cannot go on"),
        );
        self.shared
            .store
            .set_thread_status(agent, thread_id, ThreadStatus::Failed, Some(&failure))
            .await?;
        Ok(())
    }

    /// At shutdown: stop applying what workers report, so the runs they are made to
    /// abandon stay open in the store and the next start resumes them.
    pub fn stop_accepting(&self) {
        self.shared.stopping.store(true, Ordering::Relaxed);
    }

    /// Shutdown begins: runs going may finish, no queued one starts.
    pub fn drain(&self) {
        self.shared.draining.store(true, Ordering::Relaxed);
    }

    /// Whether shutdown has begun.
    pub fn draining(&self) -> bool {
        self.shared.draining.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::ChatMessage;

    use super::*;
    use crate::store::test_store_with_agent;

    #[test]
    fn only_an_ended_run_of_the_workers_own_agent_is_expected() {
        let ended = EventRejected::not_going("r1", Some("a"), "a");
        assert!(matches!(ended, EventRejected::EndedRun(_)));
        assert!(!ended.is_suspicious());
        // Another agent's run, or one nobody ever had: a forgery or a bug.
        for owner in [Some("b"), None] {
            let refused = EventRejected::not_going("r1", owner, "a");
            assert!(matches!(refused, EventRejected::UnknownRun(_)));
            assert!(refused.is_suspicious());
        }
    }

    #[tokio::test]
    async fn a_reply_points_into_its_thread_by_chorus_or_frontend_id() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, message) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        store
            .record_message_ref("discord", "999", "a", thread, None)
            .await
            .unwrap();
        let external = |id: &str| ReplyTo::External {
            frontend: "discord".into(),
            id: id.into(),
        };
        for (reply_to, agent, expected) in [
            (ReplyTo::Message(message), "a", Some(thread)),
            (ReplyTo::Message(message + 100), "a", None),
            (external("999"), "a", Some(thread)),
            (external("998"), "a", None),
            // Another agent's message is no reply of this one's.
            (ReplyTo::Message(message), "b", None),
            (external("999"), "b", None),
        ] {
            assert_eq!(
                reply_to.thread(&store, agent).await.unwrap(),
                expected,
                "{reply_to:?} for {agent}"
            );
        }
    }
}
