//! Runs: turning a user message into work for the agent's worker, and the worker's
//! events back into thread state.
//!
//! Invariants:
//! - A run belongs to one agent, and only that agent's worker connection can report
//!   on it: events are looked up in the reporting agent's own table.
//! - A run waits in `pending` until a worker is connected. If its worker is lost
//!   before the run reported a step, the run goes back to `pending` for the next
//!   worker; once started, it fails with the reason the worker ended.
//! - Every event is persisted before the next one from that connection is read, so
//!   the database always holds the thread's steps up to the last one reported.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_proto::domain::{
    AgentChange, AgentSettings, ChatMessage, ControlCommand, Failure, FailureKind, RetryPolicy,
    Role, RunAssignment, SandboxPolicy, WorkerEvent,
};

use chorus_proto::limits;

use crate::config::Settings;
use crate::feed::ThreadFeed;
use crate::gate::approvals::Approvals;
use crate::gate::profiles::{ProfileCache, offered_tools};
use crate::providers::catalog::{Catalog, ResolveError};
use crate::reports::{self, RunBudget, RunLimits};
use crate::store::{AgentRecord, Store, StoreError, ThreadStatus, format_epoch_ms};
use crate::workers::WorkerLost;
use crate::workers::registry::{Generation, Registry};
use serde_json::json;

/// The run, if its assignment fits the worker link; otherwise why it cannot run. A
/// command over the link's limit is never sent (it would end the stream that carries
/// the agent's other runs), so the run fails here, with the bound named.
fn assignment_fits(run: RunAssignment) -> Result<RunAssignment, Failure> {
    let command = ControlCommand::AssignRun(Box::new(run));
    let len = limits::command_len(&command);
    let ControlCommand::AssignRun(run) = command else {
        unreachable!("built above")
    };
    if len <= limits::MAX_LINK_MESSAGE_BYTES {
        return Ok(*run);
    }
    Err(Failure::new(
        FailureKind::Limit,
        format!(
            "the run's assignment (system prompt, tools and the thread's {} messages) is {}, more \
             than the {} one message to a worker may carry; shorten the system prompt or start a new thread",
            run.messages.len(),
            limits::human_bytes(len),
            limits::human_bytes(limits::MAX_LINK_MESSAGE_BYTES)
        ),
    ))
}

/// A `status` event of the live feed: the status and, when the thread failed, how
/// (`failure_kind`, for programs) and why (`error`, for people), as the thread view
/// shows them.
fn status_event(status: ThreadStatus, failure: Option<(FailureKind, &str)>) -> serde_json::Value {
    json!({
        "status": status.as_str(),
        "error": failure.map(|(_, message)| message),
        "failure_kind": failure.map(|(kind, _)| kind),
    })
}

/// What the run dispatcher needs from the settings.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub default_model: Option<String>,
    pub max_iterations: u32,
    pub retry: RetryPolicy,
    pub agents_root: std::path::PathBuf,
    pub sandbox: crate::config::SandboxSettings,
}

impl RunSettings {
    pub fn from_settings(settings: &Settings, agents_root: std::path::PathBuf) -> Self {
        RunSettings {
            default_model: settings.default_model.clone(),
            max_iterations: settings.max_iterations,
            retry: settings.retry,
            agents_root,
            sandbox: settings.sandbox.clone(),
        }
    }
}

struct ActiveRun {
    thread_id: u64,
    /// Kept so the run can be handed to another worker if its first one dies early.
    assignment: Box<RunAssignment>,
    /// The worker generation the run was handed to, if any.
    delivered_to: Option<Generation>,
    /// Whether the worker reported any step of it yet.
    started: bool,
    /// The run's span on this side, and the spans of its open steps: the control
    /// plane's view of the run mirrors the worker's in traces.
    span: tracing::Span,
    open_steps: HashMap<u32, tracing::Span>,
    /// What the run has stored so far, against `reports::RunLimits`.
    budget: RunBudget,
}

impl ActiveRun {
    /// Opens or closes the span of the step an event is about.
    fn trace(&mut self, event: &WorkerEvent) {
        match event {
            WorkerEvent::StepStarted(step) => {
                let span = tracing::info_span!(
                    parent: &self.span,
                    "step",
                    number = step.number,
                    kind = step.kind.as_str(),
                    description = %step.description,
                    duration_ms = tracing::field::Empty,
                    failed = tracing::field::Empty,
                );
                self.open_steps.insert(step.number, span);
            }
            WorkerEvent::StepEnded(step) => {
                if let Some(span) = self.open_steps.remove(&step.number) {
                    span.record("duration_ms", step.duration_ms);
                    span.record("failed", step.failed);
                    span.in_scope(|| tracing::debug!("step ended"));
                }
            }
            _ => {}
        }
    }
}

#[derive(Default)]
struct AgentRuns {
    /// Run ids waiting for a connected worker, oldest first.
    pending: VecDeque<String>,
    active: HashMap<String, ActiveRun>,
}

pub struct Runs {
    store: Store,
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    profiles: Arc<ProfileCache>,
    approvals: Arc<Approvals>,
    settings: RunSettings,
    agents: Mutex<HashMap<String, AgentRuns>>,
    feed: ThreadFeed,
    /// What one run may store.
    run_limits: RunLimits,
}

/// An event a worker is not entitled to send.
#[derive(Debug, thiserror::Error)]
pub enum EventRejected {
    #[error("run '{0}' is not a run of this worker's agent")]
    UnknownRun(String),
    #[error("workers may add only assistant and tool messages, not {0}")]
    ForbiddenRole(&'static str),
}

impl Runs {
    pub fn new(
        store: Store,
        registry: Arc<Registry>,
        catalog: Arc<Catalog>,
        profiles: Arc<ProfileCache>,
        approvals: Arc<Approvals>,
        settings: RunSettings,
    ) -> Self {
        Runs {
            store,
            registry,
            catalog,
            profiles,
            approvals,
            settings,
            agents: Mutex::new(HashMap::new()),
            feed: ThreadFeed::default(),
            run_limits: RunLimits::default(),
        }
    }

    fn agents(&self) -> MutexGuard<'_, HashMap<String, AgentRuns>> {
        self.agents.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a new thread for `content` and queues its first run. A thread whose run
    /// cannot be built (no provider, no model) is created failed, with the reason.
    pub async fn start_thread(
        &self,
        agent: &AgentRecord,
        content: &str,
        user: &str,
    ) -> Result<u64, StoreError> {
        let thread_id = self
            .store
            .start_thread(&agent.name, &ChatMessage::user(content), user)
            .await?;
        self.feed.publish(
            &agent.name,
            thread_id,
            "thread_created",
            json!({"status": "running", "user": user}),
        );
        let run = match self.build_run(agent, thread_id).await? {
            Ok(run) => run,
            Err(failure) => {
                self.end_thread(&agent.name, thread_id, ThreadStatus::Failed, Some(&failure))
                    .await?;
                return Ok(thread_id);
            }
        };
        tracing::info!(agent = %agent.name, thread_id, run_id = %run.run_id, "run queued");
        {
            let mut agents = self.agents();
            let runs = agents.entry(agent.name.clone()).or_default();
            runs.pending.push_back(run.run_id.clone());
            runs.active.insert(
                run.run_id.clone(),
                ActiveRun {
                    thread_id,
                    span: tracing::info_span!(
                        "run",
                        agent = %agent.name,
                        thread_id,
                        run_id = %run.run_id,
                        model = %run.agent.model,
                    ),
                    assignment: Box::new(run),
                    delivered_to: None,
                    started: false,
                    open_steps: HashMap::new(),
                    budget: RunBudget::default(),
                },
            );
        }
        self.deliver_pending(&agent.name);
        Ok(thread_id)
    }

    /// The run for a thread, or why it cannot run: the agent's configuration
    /// (`Config`) or the assignment's size (`Limit`).
    async fn build_run(
        &self,
        agent: &AgentRecord,
        thread_id: u64,
    ) -> Result<Result<RunAssignment, Failure>, StoreError> {
        let config = |message: String| Ok(Err(Failure::new(FailureKind::Config, message)));
        let Some(model) = agent
            .model
            .clone()
            .or_else(|| self.settings.default_model.clone())
        else {
            // Name the more basic problem first.
            if let Err(e @ ResolveError::NoProviders { .. }) = self.catalog.resolve("").await {
                return config(e.to_string());
            }
            return config(format!(
                "agent '{}' has no model: set one with PATCH /api/agents/{} {{\"model\": \"…\"}}, \
                 or start chorus with CHORUS_DEFAULT_MODEL",
                agent.name, agent.name
            ));
        };
        let route = match self.catalog.resolve(&model).await {
            Ok(route) => route,
            Err(e) => return config(e.to_string()),
        };
        let tools = match self.profiles.get(&agent.permissions) {
            Ok(profile) => offered_tools(&profile),
            Err(e) => {
                return config(format!(
                    "the agent's permission profile cannot be used: {e}; fix it with PATCH /api/agents/{}",
                    agent.name
                ));
            }
        };
        let messages = self
            .store
            .thread_messages(&agent.name, thread_id)
            .await?
            .into_iter()
            .map(|m| m.message)
            .collect();
        let first_step_number = self.store.next_step_number(&agent.name, thread_id).await?;
        let agent_dir = self.settings.agents_root.join(&agent.name);
        let workspace = agent_dir.join("workspace");
        let docs_dir = agent_dir.join("docs");
        let run = RunAssignment {
            run_id: uuid::Uuid::new_v4().to_string(),
            thread_id,
            agent: AgentSettings {
                name: agent.name.clone(),
                system_prompt: agent.system_prompt.clone(),
                model,
                workspace: workspace.to_string_lossy().into_owned(),
                docs_dir: docs_dir.to_string_lossy().into_owned(),
                tools,
                sandbox: self.sandbox_policy(agent, &agent_dir),
            },
            model: route,
            messages,
            first_step_number,
            max_iterations: self.settings.max_iterations,
            trace_context: HashMap::new(),
            retry: self.settings.retry,
            attempt: 1,
            inputs: Vec::new(),
            thread_summary: String::new(),
            thread_started_at_ms: 0,
        };
        Ok(assignment_fits(run))
    }

    /// How the agent's tool processes are confined: `[sandbox]` and its network switch.
    fn sandbox_policy(&self, agent: &AgentRecord, agent_dir: &std::path::Path) -> SandboxPolicy {
        let sandbox = &self.settings.sandbox;
        let text = |paths: &[std::path::PathBuf]| {
            paths
                .iter()
                .map(|p| p.to_string_lossy().into_owned())
                .collect()
        };
        SandboxPolicy {
            network: agent.network == "on",
            read_only: text(&sandbox.read_only),
            read_write: text(&sandbox.read_write),
            run_unsandboxed: sandbox.run_unsandboxed(&agent.permissions),
            home_dir: agent_dir.join("home").to_string_lossy().into_owned(),
            tmp_dir: agent_dir.join("tmp").to_string_lossy().into_owned(),
            limits: sandbox.limits,
        }
    }

    /// The live feed of every thread's events.
    pub fn feed(&self) -> &ThreadFeed {
        &self.feed
    }

    /// Finishes a thread in the store and tells live subscribers.
    async fn end_thread(
        &self,
        agent: &str,
        thread_id: u64,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) -> Result<(), StoreError> {
        // A question to a person the thread was waiting on is withdrawn.
        self.approvals.cancel_thread(agent, thread_id).await;
        self.store
            .set_thread_status(agent, thread_id, status, failure)
            .await?;
        self.feed.publish(
            agent,
            thread_id,
            "status",
            status_event(status, failure.map(|f| (f.kind, f.message.as_str()))),
        );
        Ok(())
    }

    /// The agent changed (configure, self-edit): runs in progress use the new values
    /// from their next model call, runs still waiting get them in their assignment.
    pub fn agent_changed(&self, agent: &str, change: AgentChange) {
        if let Some(runs) = self.agents().get_mut(agent) {
            for run in runs.active.values_mut() {
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
            }
        }
        if let Some((_, sender)) = self.registry.sender(agent) {
            let _ = sender.send(ControlCommand::UpdateAgent(change));
        }
    }

    /// The thread of `run_id`, if it is a run of `agent` handed to `generation`.
    pub fn thread_of(&self, agent: &str, generation: Generation, run_id: &str) -> Option<u64> {
        let mut agents = self.agents();
        let run = agents
            .get_mut(agent)?
            .active
            .get_mut(run_id)
            .filter(|run| run.delivered_to == Some(generation))?;
        run.started = true;
        Some(run.thread_id)
    }

    /// A thread starts or stops waiting for a person's answer.
    pub async fn set_waiting(&self, agent: &str, thread_id: u64, waiting: bool) {
        let status = if waiting {
            ThreadStatus::WaitingForPermission
        } else {
            ThreadStatus::Running
        };
        match self
            .store
            .set_thread_status(agent, thread_id, status, None)
            .await
        {
            Ok(true) => self
                .feed
                .publish(agent, thread_id, "status", status_event(status, None)),
            // The thread ended meanwhile; its final status stands.
            Ok(false) => {}
            Err(e) => {
                tracing::error!(agent, thread_id, error = %e, "cannot record thread status")
            }
        }
    }

    /// Tells the thread's live feed which approval it waits for.
    pub fn publish_approval(&self, agent: &str, thread_id: u64, approval: serde_json::Value) {
        self.feed.publish(agent, thread_id, "approval", approval);
    }

    /// Puts an event of a thread on the live feed (e.g. an approval answered).
    pub fn publish(
        &self,
        agent: &str,
        thread_id: u64,
        kind: &'static str,
        data: serde_json::Value,
    ) {
        self.feed.publish(agent, thread_id, kind, data);
    }

    /// Hands queued runs to the agent's worker, if one is connected.
    pub fn deliver_pending(&self, agent: &str) {
        let Some((generation, sender)) = self.registry.sender(agent) else {
            return;
        };
        let mut agents = self.agents();
        let Some(runs) = agents.get_mut(agent) else {
            return;
        };
        while let Some(run_id) = runs.pending.pop_front() {
            let Some(active) = runs.active.get_mut(&run_id) else {
                continue; // finished or cancelled while waiting
            };
            if sender
                .send(ControlCommand::AssignRun(active.assignment.clone()))
                .is_err()
            {
                // The connection closed under us; keep the run for the next worker.
                runs.pending.push_front(run_id);
                break;
            }
            active.delivered_to = Some(generation);
            tracing::debug!(agent, %run_id, generation, "run delivered");
        }
    }

    /// Applies one event from `agent`'s worker (generation `generation`).
    pub async fn apply(
        &self,
        agent: &str,
        generation: Generation,
        mut event: WorkerEvent,
    ) -> Result<(), EventRejected> {
        let Some(run_id) = event.run_id().map(str::to_string) else {
            return Ok(()); // hello / heartbeat: nothing to persist
        };
        let (thread_id, over_budget) = {
            let mut agents = self.agents();
            let active = agents
                .get_mut(agent)
                .and_then(|runs| runs.active.get_mut(&run_id))
                .filter(|run| run.delivered_to == Some(generation))
                .ok_or_else(|| EventRejected::UnknownRun(run_id.clone()))?;
            active.started = true;
            active.trace(&event);
            let over_budget = active.budget.charge(&event, self.run_limits).err();
            (active.thread_id, over_budget)
        };
        if let Some(reason) = over_budget {
            self.stop_run(agent, &run_id, thread_id, reason).await;
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
        let publish = |kind, data| self.feed.publish(agent, thread_id, kind, data);
        let result = match &event {
            WorkerEvent::StepStarted(step) => {
                let stored = self.store.record_step_started(agent, thread_id, step).await;
                publish(
                    "step_started",
                    json!({"number": step.number, "kind": step.kind, "description": step.description,
                           "started_at": format_epoch_ms(step.started_at_ms)}),
                );
                stored
            }
            WorkerEvent::StepEnded(step) => {
                let stored = self.store.record_step_ended(agent, thread_id, step).await;
                publish(
                    "step_ended",
                    json!({"number": step.number, "duration_ms": step.duration_ms,
                           "failed": step.failed, "usage": step.usage}),
                );
                stored
            }
            WorkerEvent::MessageAppended { message, .. } => {
                if !matches!(message.role, Role::Assistant | Role::Tool) {
                    return Err(EventRejected::ForbiddenRole(message.role.as_str()));
                }
                let stored = self.store.append_message(agent, thread_id, message).await;
                if let (Role::Tool, Some(call_id)) = (message.role, &message.tool_call_id) {
                    let result = if message.is_error { "error" } else { "ok" };
                    if let Err(e) = self
                        .store
                        .audit_result(agent, thread_id, call_id, result)
                        .await
                    {
                        tracing::error!(agent, thread_id, error = %e, "cannot record a tool result in the audit log");
                    }
                }
                publish("message", json!(message));
                stored
            }
            WorkerEvent::RunCompleted { .. } => {
                self.finish(agent, &run_id, thread_id, ThreadStatus::Completed, None)
                    .await
            }
            WorkerEvent::RunFailed { kind, error, .. } => {
                if *kind == FailureKind::Internal {
                    tracing::warn!(agent, thread_id, %run_id, %error, "the worker reported an internal failure");
                }
                let failure = Failure::new(*kind, error.as_str());
                self.finish(
                    agent,
                    &run_id,
                    thread_id,
                    ThreadStatus::Failed,
                    Some(&failure),
                )
                .await
            }
            // Live text is only for live views; the whole message follows.
            WorkerEvent::TextDelta { step, text, .. } => {
                publish("text", json!({"step": step, "text": text}));
                Ok(())
            }
            // Tool checks go to the gate, not here.
            WorkerEvent::ToolCheck { .. } => Ok(()),
            // Not events of a run (they return above); background tasks are `tasks`'s.
            WorkerEvent::Hello { .. }
            | WorkerEvent::Heartbeat { .. }
            | WorkerEvent::TaskStarted(_)
            | WorkerEvent::TaskEnded { .. }
            | WorkerEvent::InputTaken { .. }
            | WorkerEvent::Summary { .. } => Ok(()),
        };
        if let Err(e) = result {
            tracing::error!(agent, thread_id, %run_id, error = %e, "cannot record worker event");
        }
        Ok(())
    }

    /// Ends a run whose worker reported more than a run may store: the thread fails
    /// with `reason`, the worker is told to cancel it, and what it still sends about
    /// it is refused as the report of an unknown run.
    async fn stop_run(&self, agent: &str, run_id: &str, thread_id: u64, reason: String) {
        tracing::warn!(
            agent,
            thread_id,
            run_id,
            reason,
            "run over its budget; failing and cancelling it"
        );
        if let Some((_, sender)) = self.registry.sender(agent) {
            let _ = sender.send(ControlCommand::CancelRun {
                run_id: run_id.to_string(),
                reason: reason.clone(),
            });
        }
        let failure = Failure::new(FailureKind::Limit, reason);
        if let Err(e) = self
            .finish(
                agent,
                run_id,
                thread_id,
                ThreadStatus::Failed,
                Some(&failure),
            )
            .await
        {
            tracing::error!(agent, thread_id, run_id, error = %e, "cannot fail thread");
        }
    }

    async fn finish(
        &self,
        agent: &str,
        run_id: &str,
        thread_id: u64,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) -> Result<(), StoreError> {
        let span = self
            .agents()
            .get_mut(agent)
            .and_then(|runs| runs.active.remove(run_id))
            .map(|run| run.span)
            .unwrap_or_else(tracing::Span::none);
        span.in_scope(|| {
            tracing::info!(
                status = status.as_str(),
                failure_kind = failure.map(|f| f.kind.as_str()),
                error = failure.map(|f| f.message.as_str()),
                "run finished"
            )
        });
        self.end_thread(agent, thread_id, status, failure).await
    }

    /// A worker ended: its started runs fail with `reason`, its unstarted runs wait
    /// for the next worker.
    pub async fn worker_lost(&self, lost: WorkerLost) {
        // Either way the worker is at fault, not the run: both are `Interrupted`.
        let interrupted = Failure::new(
            FailureKind::Interrupted,
            format!(
                "{}; this thread was interrupted. Send the message again to retry.",
                lost.reason
            ),
        );
        let never_ran = Failure::new(
            FailureKind::Interrupted,
            format!(
                "{}; this thread could not start. Send the message again once the worker runs.",
                lost.reason
            ),
        );
        let failed: Vec<(String, u64, &Failure)> = {
            let mut agents = self.agents();
            let Some(runs) = agents.get_mut(&lost.agent) else {
                return;
            };
            let mut failed = Vec::new();
            for (run_id, run) in runs.active.iter_mut() {
                if !lost.attached && run.delivered_to.is_none() {
                    // The worker never came up: waiting for it could be forever.
                    failed.push((run_id.clone(), run.thread_id, &never_ran));
                    continue;
                }
                if run.delivered_to != Some(lost.generation) {
                    continue;
                }
                if run.started {
                    failed.push((run_id.clone(), run.thread_id, &interrupted));
                } else {
                    run.delivered_to = None;
                    runs.pending.push_front(run_id.clone());
                }
            }
            for (run_id, _, _) in &failed {
                runs.active.remove(run_id);
            }
            runs.pending.retain(|id| runs.active.contains_key(id));
            failed
        };
        for (run_id, thread_id, failure) in failed {
            if let Err(e) = self
                .end_thread(&lost.agent, thread_id, ThreadStatus::Failed, Some(failure))
                .await
            {
                tracing::error!(agent = %lost.agent, thread_id, %run_id, error = %e, "cannot fail thread");
            }
        }
    }

    /// The agent is going away: every run of it fails with `failure`.
    pub async fn fail_agent_runs(&self, agent: &str, failure: &Failure) {
        let threads: Vec<u64> = self
            .agents()
            .remove(agent)
            .map(|runs| runs.active.into_values().map(|r| r.thread_id).collect())
            .unwrap_or_default();
        for thread_id in threads {
            if let Err(e) = self
                .end_thread(agent, thread_id, ThreadStatus::Failed, Some(failure))
                .await
            {
                tracing::error!(agent, thread_id, error = %e, "cannot fail thread");
            }
        }
    }

    /// Kills a thread (E4): its run is taken off the queue or cancelled in its worker
    /// (which ends the model call, kills the running tool's process group and frees
    /// its file locks), a question it waits on is withdrawn (a deny), and the thread
    /// ends `killed` with its history so far. Returns whether it was still going;
    /// a thread with no run here (ended, or never started) is left as it is.
    pub async fn kill_thread(
        &self,
        agent: &str,
        thread_id: u64,
        user: &str,
    ) -> Result<bool, StoreError> {
        let run = {
            let mut agents = self.agents();
            let Some(runs) = agents.get_mut(agent) else {
                return Ok(false);
            };
            let Some(run_id) = runs
                .active
                .iter()
                .find(|(_, run)| run.thread_id == thread_id)
                .map(|(id, _)| id.clone())
            else {
                return Ok(false);
            };
            runs.pending.retain(|id| *id != run_id);
            runs.active.remove(&run_id).map(|run| (run_id, run))
        };
        let Some((run_id, run)) = run else {
            return Ok(false);
        };
        let reason = format!("killed by {user}");
        if run.delivered_to.is_some()
            && let Some((_, sender)) = self.registry.sender(agent)
        {
            let _ = sender.send(ControlCommand::CancelRun {
                run_id: run_id.clone(),
                reason: reason.clone(),
            });
        }
        run.span.in_scope(|| tracing::info!(%reason, "run killed"));
        let failure = Failure::new(FailureKind::Killed, reason);
        self.end_thread(agent, thread_id, ThreadStatus::Killed, Some(&failure))
            .await?;
        Ok(true)
    }

    /// The threads of `agent` that have a run here (queued or going).
    pub fn active_threads(&self, agent: &str) -> Vec<u64> {
        let mut threads: Vec<u64> = self
            .agents()
            .get(agent)
            .map(|runs| runs.active.values().map(|r| r.thread_id).collect())
            .unwrap_or_default();
        threads.sort_unstable();
        threads
    }

    /// Every run of every agent fails with `failure` (shutdown).
    pub async fn fail_all(&self, failure: &Failure) {
        let agents: Vec<String> = self.agents().keys().cloned().collect();
        for agent in agents {
            self.fail_agent_runs(&agent, failure).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::ModelRoute;

    fn assignment(messages: Vec<ChatMessage>) -> RunAssignment {
        RunAssignment {
            run_id: "r".into(),
            thread_id: 1,
            agent: AgentSettings {
                name: "a".into(),
                system_prompt: "be brief".into(),
                model: "m".into(),
                workspace: "/w".into(),
                docs_dir: "/d".into(),
                tools: vec!["view".into()],
                sandbox: SandboxPolicy::default(),
            },
            model: ModelRoute {
                provider: "openai".into(),
                api: ModelRoute::OPENAI_CHAT.into(),
                relay_path: "/llm/openai".into(),
                model: "m".into(),
            },
            messages,
            first_step_number: 1,
            max_iterations: 0,
            trace_context: HashMap::new(),
            retry: RetryPolicy::default(),
            attempt: 1,
            inputs: Vec::new(),
            thread_summary: String::new(),
            thread_started_at_ms: 0,
        }
    }

    #[test]
    fn an_assignment_over_the_link_limit_fails_its_run_with_the_bound_named() {
        let small = assignment(vec![ChatMessage::user("hi")]);
        assert_eq!(assignment_fits(small.clone()), Ok(small));
        let big = ChatMessage::user("x".repeat(limits::MAX_LINK_MESSAGE_BYTES / 2));
        let failure = assignment_fits(assignment(vec![big.clone(), big])).unwrap_err();
        assert_eq!(failure.kind, FailureKind::Limit);
        let reason = failure.message;
        assert!(
            reason.contains("is 32.0 MiB, more than the 32.0 MiB")
                && reason.contains("2 messages")
                && reason.contains("start a new thread"),
            "{reason}"
        );
    }
}
