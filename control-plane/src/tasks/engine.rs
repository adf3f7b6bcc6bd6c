//! The task engine: what moves a task between people and agents (SPEC H3–H6).
//!
//! It carries out the board's control tools for the gate ([`RoleHooks::execute`]:
//! checks the call and records it on the task run), and decides what a turn of a
//! planner, worker or answerer thread led to when it ends ([`RoleHooks::turn_ended`],
//! through [`tasks::contract`](super::contract)): a plan, questions, a report, a
//! question to a person, a delegation, a question to another agent, the one
//! follow-up, or a protocol violation. It starts the threads (planning on create,
//! work on start, a delegate's, an answerer's) and sends answers, reports and
//! people's messages into the thread that waits for them as its next message.
//!
//! Every change of a task goes through one lock (`turn`), so a turn's end and a
//! person's button never interleave on one task. The store is the truth: what a turn
//! called is on its task run, so a restart in between loses nothing (the decision is
//! taken when the turn's end is told, and a turn that ended while the control plane
//! was down is told again at start: [`Engine::recover`]).

use std::collections::BTreeMap;
use std::sync::Arc;

use chorus_proto::domain::{Role, ToolSpec};
use chorus_proto::tools::{AgentQuestion, CompletionReport, Delegation, SchemaSettings};
use serde_json::json;
use tokio::sync::{Mutex, mpsc};

use super::board::{Board, BoardError, CreateTask};
use super::brief;
use super::contract::{self, Call, TurnDecision};
use super::history::TaskEventKind;
use super::status::{Button, TaskStatus};
use super::view::TaskView;
use crate::agents::{AgentService, CreateAgent};
use crate::permissions::PermissionsSetting;
use crate::permissions::grants::Role as PersonRole;
use crate::principal::Principal;
use crate::runs::Runs;
use crate::runs::roles::{RoleHooks, TurnEnd};
use crate::store::{AgentRecord, ReportStatus, RunOutcome, Store, TaskReport, TaskRun, ThreadRole};

/// Why the engine refused a person's request (mapped to HTTP by the routes).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Board(#[from] BoardError),
    #[error("{0}")]
    Invalid(String),
    #[error("{message}")]
    Conflict {
        message: String,
        allowed: Vec<TaskStatus>,
    },
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
}

fn conflict(message: String) -> EngineError {
    EngineError::Conflict {
        message,
        allowed: Vec::new(),
    }
}

/// What the engine is told from outside its lock, applied in order by its task.
enum Told {
    /// A turn of a thread with a role ended.
    TurnEnded {
        agent: String,
        thread_id: u64,
        role: ThreadRole,
        end: TurnEnd,
    },
    /// A person created a task: its planning starts.
    Created(u64),
    /// A tool call of a task's thread has its result.
    ToolCall {
        agent: String,
        thread_id: u64,
        tool: String,
        arguments: String,
        failed: bool,
    },
}

pub struct Engine {
    store: Store,
    board: Arc<Board>,
    runs: Arc<Runs>,
    agents: Arc<AgentService>,
    schema: SchemaSettings,
    /// Held by every change of a task (a turn's end, a person's button, a control
    /// call), so none interleave; never held across a wait for a model or a worker.
    turn: Mutex<()>,
    told: mpsc::UnboundedSender<Told>,
}

impl Engine {
    /// Starts the engine: the task that applies what it is told in order, and the
    /// check of the working tasks against their limits. It is the board's creation
    /// hook and the runs' role hooks.
    pub fn launch(
        store: Store,
        board: Arc<Board>,
        runs: Arc<Runs>,
        agents: Arc<AgentService>,
    ) -> Arc<Engine> {
        let (told, mut receiver) = mpsc::unbounded_channel::<Told>();
        let schema = runs.tool_schemas();
        let engine = Arc::new(Engine {
            store,
            board,
            runs,
            agents,
            schema,
            turn: Mutex::new(()),
            told,
        });
        let weak = Arc::downgrade(&engine);
        tokio::spawn(async move {
            while let Some(told) = receiver.recv().await {
                let Some(engine) = weak.upgrade() else { break };
                engine.apply_told(told).await;
            }
        });
        let hook = Arc::downgrade(&engine);
        engine.board.set_on_created(Arc::new(move |id| {
            if let Some(engine) = hook.upgrade() {
                let _ = engine.told.send(Told::Created(id));
            }
        }));
        engine.runs.set_role_hooks(engine.clone());
        engine.watch_limits();
        engine
    }

    async fn apply_told(&self, told: Told) {
        match told {
            Told::TurnEnded {
                agent,
                thread_id,
                role,
                end,
            } => {
                if let Err(e) = self.turn_end(&agent, thread_id, role, &end).await {
                    tracing::error!(%agent, thread_id, error = %e, "cannot apply the end of a task turn");
                }
            }
            Told::ToolCall {
                agent,
                thread_id,
                tool,
                arguments,
                failed,
            } => {
                if let Err(e) = self
                    .tool_call(&agent, thread_id, &tool, &arguments, failed)
                    .await
                {
                    tracing::warn!(%agent, thread_id, error = %e, "cannot record a task's tool call");
                }
            }
            Told::Created(id) => {
                if let Err(e) = self.created(id).await {
                    tracing::warn!(task_id = id, error = %e, "cannot start planning a task");
                }
            }
        }
    }

    pub fn board(&self) -> &Arc<Board> {
        &self.board
    }

    /// A task as people see it: the board's view, with what it waits on now.
    pub async fn view(&self, task_id: u64) -> Result<TaskView, EngineError> {
        let task = self.board.get(task_id).await?;
        self.with_waiting_on(task).await
    }

    /// The tasks a filter selects (without their runs), each with what it waits on.
    pub async fn list(
        &self,
        filter: &crate::store::TaskFilter,
    ) -> Result<Vec<TaskView>, EngineError> {
        let mut tasks = Vec::new();
        for task in self.board.list(filter).await? {
            let waiting_on = if task.status.is_finished() {
                None
            } else {
                self.view(task.id).await?.waiting_on
            };
            tasks.push(TaskView { waiting_on, ..task });
        }
        Ok(tasks)
    }

    async fn with_waiting_on(&self, task: TaskView) -> Result<TaskView, EngineError> {
        use super::waiting::{Facts, waiting_on};
        let runs = runs_of(&task);
        let mut facts = Facts {
            status_since: task.status_since.clone(),
            blocked_reason: task.blocked_reason.clone(),
            ..Facts::default()
        };
        facts.open_question = task
            .questions
            .iter()
            .find(|q| q.answer.is_none())
            .map(|q| (q.id.clone(), q.question.clone(), q.asked_at.clone()));
        facts.open_child = task
            .chain
            .iter()
            .find(|c| c.task_id != task.id && c.ended_at.is_none())
            .map(|c| (c.task_id, c.agent.clone(), c.started_at.clone()));
        facts.open_answerer = runs
            .iter()
            .find(|r| r.role == ThreadRole::Answerer && r.ended_at.is_none())
            .map(|r| (r.agent.clone(), r.started_at.clone()));
        if let Some(run) = runs
            .iter()
            .rev()
            .find(|r| r.ended_at.is_none() && r.role != ThreadRole::Answerer)
            && let Some(thread) = run.thread_id
        {
            let (open, last) = self.store.thread_activity(&run.agent, thread).await?;
            facts.open_step = open;
            facts.last_activity = last;
        }
        let waiting_on = waiting_on(task.status, &facts);
        Ok(TaskView { waiting_on, ..task })
    }

    fn settings(&self) -> &crate::config::TaskSettings {
        self.board.settings()
    }

    // ------------------------------------------------------------ people

    /// A task was created: the planner gets it in a thread of its own.
    async fn created(&self, task_id: u64) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if task.status != TaskStatus::Planning {
            return Ok(());
        }
        let by = Principal::parse(&task.created_by);
        let planner = match self.planner().await {
            Ok(planner) => planner,
            Err(why) => {
                self.board
                    .transition(
                        task_id,
                        TaskStatus::Failed,
                        &Principal::Scheduler,
                        Some(why.clone()),
                    )
                    .await?;
                return Err(conflict(why));
            }
        };
        let agents = self.agent_lines().await?;
        let content = brief::planner(&text_of(&task), &agents);
        let thread = self
            .runs
            .start_role_thread(&planner, &content, &by, ThreadRole::Planner, None)
            .await?;
        let run = self
            .board
            .add_run(
                task_id,
                ThreadRole::Planner,
                &planner.name,
                planner.backend.as_str(),
                Some(thread),
            )
            .await?;
        self.store
            .set_task_run_links(run, std::slice::from_ref(&planner.name), None)
            .await?;
        self.board
            .set_planner(task_id, &planner.name, thread)
            .await?;
        self.board
            .record(
                task_id,
                TaskEventKind::PlanningStarted,
                &Principal::Scheduler,
                json!({"agent": planner.name, "thread_id": thread, "run_id": run}),
            )
            .await?;
        Ok(())
    }

    /// The planning agent, created from the template at first use with the planner
    /// prompt, read-only tools (`locked`) and the default model.
    async fn planner(&self) -> Result<AgentRecord, String> {
        let name = &self.settings().planner;
        if let Ok(Some(agent)) = self.store.active_agent(name).await {
            return Ok(agent);
        }
        let request = CreateAgent {
            name: name.clone(),
            system_prompt: Some(contract::PLANNER_PROMPT.into()),
            model: None,
            permissions: Some(PermissionsSetting::Preset("locked".into())),
            on_ask: Some("deny".into()),
            network: Some("off".into()),
            backend: None,
            idle_timeout_secs: None,
            discord_channel_id: None,
            mcp_servers: None,
            heartbeat: None,
        };
        self.agents
            .create(request, &Principal::Scheduler, PersonRole::Admin)
            .await
            .map_err(|e| format!("the planning agent '{name}' cannot be created: {e}"))
    }

    /// Every agent a plan may name (the planner excepted), with what it is for.
    async fn agent_lines(&self) -> Result<Vec<brief::AgentLine>, EngineError> {
        Ok(self
            .store
            .active_agents()
            .await?
            .into_iter()
            .filter(|a| a.name != self.settings().planner)
            .map(|a| brief::AgentLine {
                about: a
                    .system_prompt
                    .lines()
                    .find(|l| !l.trim().is_empty())
                    .unwrap_or("(no description)")
                    .chars()
                    .take(160)
                    .collect(),
                name: a.name,
            })
            .collect())
    }

    /// Answers to a task's open questions (all of the round at once). They go to
    /// the thread that asked, as its next message.
    pub async fn answer(
        &self,
        task_id: u64,
        answers: &BTreeMap<String, String>,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        if let Some((id, _)) = answers.iter().find(|(_, a)| a.trim().is_empty()) {
            return Err(EngineError::Invalid(format!(
                "the answer to '{id}' is empty"
            )));
        }
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        let open = self.board.open_questions(task_id).await?;
        if !open.is_empty() && answers.len() < open.len() {
            let missing: Vec<&str> = open
                .iter()
                .filter(|q| !answers.contains_key(&q.id))
                .map(|q| q.id.as_str())
                .collect();
            return Err(EngineError::Invalid(format!(
                "answer every open question at once; missing: {}",
                missing.join(", ")
            )));
        }
        let round = self.board.answer(task_id, answers, by).await?;
        let Some(run) = runs_of(&task)
            .iter()
            .rev()
            .find(|r| r.ended_at.is_none() && r.role != ThreadRole::Answerer)
            .cloned()
        else {
            return Err(conflict(format!(
                "task {task_id} has no thread waiting for answers"
            )));
        };
        let answered: Vec<brief::Answered> = round
            .iter()
            .map(|q| brief::Answered {
                question: q.question.clone(),
                answer: q.answer.clone().unwrap_or_default(),
            })
            .collect();
        let next = match task.status {
            TaskStatus::AwaitingInput => TaskStatus::Planning,
            _ => TaskStatus::Active,
        };
        if task.status != next {
            self.board.transition(task_id, next, by, None).await?;
        }
        self.tell_thread(&run, &brief::answers(&answered), by)
            .await?;
        self.view(task_id).await
    }

    /// Start: the agent the plan names works the task in a directory of its own.
    pub async fn start(&self, task_id: u64, by: &Principal) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if !Button::Start.applies_to().contains(&task.status) {
            return Err(refused(
                &task,
                "start is for planned tasks (retry a failed or blocked one)",
            ));
        }
        let Some(assignee) = task.assignee.clone() else {
            return Err(conflict(format!(
                "task {task_id} has no assignee: set one with PATCH /api/tasks/{task_id} {{\"assignee\": \"…\"}}"
            )));
        };
        self.work(&task, &assignee, by, None, &[]).await?;
        self.view(task_id).await
    }

    /// Retry: a failed or blocked task gets a new attempt, told how the last ended.
    pub async fn retry(&self, task_id: u64, by: &Principal) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if !Button::Retry.applies_to().contains(&task.status) {
            return Err(refused(&task, "retry is for failed or blocked tasks"));
        }
        let Some(assignee) = task.assignee.clone() else {
            return Err(conflict(format!(
                "task {task_id} has no assignee to retry with"
            )));
        };
        // What still runs of the last attempt is ended first.
        self.end_open_runs(&task, RunOutcome::Killed, "retried")
            .await?;
        let previous = task
            .report
            .as_ref()
            .map(|r| format!("{}: {}\n{}", report_word(r.status), r.summary, r.output))
            .or_else(|| task.blocked_reason.clone());
        self.work(&task, &assignee, by, previous.as_deref(), &[])
            .await?;
        self.view(task_id).await
    }

    /// Starts a worker thread of `assignee` on `task` (start, retry, a delegation);
    /// `chain` is the agents above it (a delegate's parents).
    async fn work(
        &self,
        task: &TaskView,
        assignee: &str,
        by: &Principal,
        previous: Option<&str>,
        chain: &[String],
    ) -> Result<u64, EngineError> {
        let agent = self.agent(assignee).await?;
        let workdir = workdir_of(task.id);
        self.board
            .transition(task.id, TaskStatus::Active, by, None)
            .await?;
        let mut text = text_of(task);
        text.messages = self.queued_messages(task.id).await?;
        let content = brief::worker(&text, &workdir, previous);
        let thread = self
            .runs
            .start_role_thread(&agent, &content, by, ThreadRole::Worker, Some(&workdir))
            .await?;
        let run = self
            .board
            .add_run(
                task.id,
                ThreadRole::Worker,
                &agent.name,
                agent.backend.as_str(),
                Some(thread),
            )
            .await?;
        let mut chain = chain.to_vec();
        chain.push(agent.name.clone());
        self.board.set_run_links(run, &chain, None).await?;
        self.board
            .record(
                task.id,
                TaskEventKind::Started,
                by,
                json!({"agent": agent.name, "thread_id": thread, "run_id": run, "workdir": workdir}),
            )
            .await?;
        self.board
            .push_chain(task.id, &agent.name, task.id, by)
            .await?;
        Ok(thread)
    }

    /// Messages people sent while no agent worked on the task, for the next brief.
    async fn queued_messages(&self, task_id: u64) -> Result<Vec<String>, EngineError> {
        Ok(self
            .board
            .history(task_id)
            .await?
            .into_iter()
            .filter(|e| e.kind == TaskEventKind::MessageSent && e.data["delivered"] == false)
            .filter_map(|e| e.data["message"].as_str().map(str::to_string))
            .collect())
    }

    /// A person sends the report back: the same thread goes on with the message.
    pub async fn send_back(
        &self,
        task_id: u64,
        message: &str,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        if message.trim().is_empty() {
            return Err(EngineError::Invalid(
                "send-back needs a message saying what is missing: {\"message\": \"…\"}".into(),
            ));
        }
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if task.status != TaskStatus::Review {
            return Err(refused(&task, "send-back is for tasks in review"));
        }
        let Some(run) = runs_of(&task)
            .iter()
            .rev()
            .find(|r| r.role == ThreadRole::Worker)
            .cloned()
        else {
            return Err(conflict(format!("task {task_id} has no worker thread")));
        };
        self.board.reopen_run(run.id).await?;
        self.board
            .transition(task_id, TaskStatus::Active, by, Some(message.to_string()))
            .await?;
        self.tell_thread(&run, &brief::sent_back(&by.text(), message), by)
            .await?;
        self.view(task_id).await
    }

    /// A person's message to the agent working on the task: into its thread (its
    /// going turn takes it at its next model call; otherwise it starts the next
    /// turn), or kept for the brief when no agent works on it yet.
    pub async fn message(
        &self,
        task_id: u64,
        message: &str,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        if message.trim().is_empty() {
            return Err(EngineError::Invalid("send {\"message\": \"…\"}".into()));
        }
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if task.status.is_finished() {
            return Err(refused(&task, "reopen or retry it first"));
        }
        let open = runs_of(&task)
            .iter()
            .rev()
            .find(|r| r.ended_at.is_none() && r.role != ThreadRole::Answerer)
            .cloned();
        let delivered = open.is_some();
        self.board
            .record(
                task_id,
                TaskEventKind::MessageSent,
                by,
                json!({"message": message, "delivered": delivered}),
            )
            .await?;
        if let Some(run) = open {
            self.tell_thread(&run, &brief::person_message(&by.text(), message), by)
                .await?;
        }
        self.view(task_id).await
    }

    /// Pause and Fail by a person: the button, and the task's threads stopped.
    pub async fn press(
        &self,
        task_id: u64,
        button: Button,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.press(task_id, button, by).await?;
        match button {
            Button::Pause | Button::Fail | Button::Complete => {
                let why = format!("{} by {}", button.as_str(), by.text());
                self.end_open_runs(&task, RunOutcome::Killed, &why).await?;
            }
            // The worker's thread goes on where it stopped.
            Button::Resume if task.status == TaskStatus::Active => {
                if let Some(run) = runs_of(&task)
                    .iter()
                    .rev()
                    .find(|r| r.role == ThreadRole::Worker)
                    .cloned()
                {
                    self.board.reopen_run(run.id).await?;
                    let text = format!("{} resumed the task: go on with it.", by.text());
                    self.tell_thread(&run, &text, by).await?;
                }
            }
            // Back to the planner: it plans again, in a thread of its own.
            Button::Reopen if task.status == TaskStatus::Planning => {
                drop(_turn);
                let _ = self.told.send(Told::Created(task_id));
            }
            _ => {}
        }
        self.view(task_id).await
    }

    /// Deletes a task: its going threads are stopped first (their history stays in
    /// the agents' thread lists).
    pub async fn delete(&self, task_id: u64, by: &Principal) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        let why = format!("the task was deleted by {}", by.text());
        self.end_open_runs(&task, RunOutcome::Killed, &why).await?;
        Ok(self.board.delete(task_id, by).await?)
    }

    /// Ends the task's going runs and kills their threads.
    async fn end_open_runs(
        &self,
        task: &TaskView,
        outcome: RunOutcome,
        why: &str,
    ) -> Result<(), EngineError> {
        for run in runs_of(task).iter().filter(|r| r.ended_at.is_none()) {
            let report = json!({"status": "failed", "summary": why, "output": ""});
            self.end_run(run, outcome, Some(report)).await?;
            if let Some(thread) = run.thread_id {
                let _ = self
                    .runs
                    .kill_thread(&run.agent, thread, &Principal::Scheduler.text())
                    .await;
            }
        }
        Ok(())
    }

    /// A thread's next message (an answer, a report, a nudge, a person's words).
    async fn tell_thread(
        &self,
        run: &TaskRun,
        text: &str,
        by: &Principal,
    ) -> Result<(), EngineError> {
        let Some(thread) = run.thread_id else {
            return Err(conflict(format!("task run {} has no thread", run.id)));
        };
        let agent = self.agent(&run.agent).await?;
        self.runs.message_thread(&agent, thread, text, by).await?;
        Ok(())
    }
}

// ---------------------------------------------------------------- turns

impl Engine {
    async fn turn_end(
        &self,
        agent: &str,
        thread_id: u64,
        role: ThreadRole,
        end: &TurnEnd,
    ) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        let Some(run) = self.board.run_of_thread(agent, thread_id).await? else {
            return Ok(()); // a thread whose task is gone
        };
        if run.ended_at.is_some() {
            return Ok(()); // ended meanwhile (a limit, a person's button)
        }
        let task = match self.board.get(run.task_id).await {
            Ok(task) => task,
            Err(BoardError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match end {
            TurnEnd::Failed(failure) => {
                let why = format!("the {role} thread failed: {}", failure.message);
                self.run_failed(&task, &run, RunOutcome::Error, &why).await
            }
            TurnEnd::Killed => {
                let why = format!("the {role} thread was killed");
                self.run_failed(&task, &run, RunOutcome::Killed, &why).await
            }
            TurnEnd::Completed { .. } => {
                let call = run
                    .finishing
                    .clone()
                    .and_then(|f| serde_json::from_value::<Call>(f).ok());
                self.board.set_finishing(run.id, None).await?;
                match contract::on_turn_end(role, call, run.followed_up) {
                    TurnDecision::Apply(call) => {
                        self.board.set_followed_up(run.id, false).await?;
                        self.apply(&task, &run, call).await
                    }
                    TurnDecision::FollowUp(text) => {
                        self.board.set_followed_up(run.id, true).await?;
                        self.board
                            .record(
                                task.id,
                                TaskEventKind::NudgeSent,
                                &Principal::Scheduler,
                                json!({"agent": agent, "thread_id": thread_id, "run_id": run.id}),
                            )
                            .await?;
                        self.tell_thread(&run, &text, &Principal::Scheduler).await
                    }
                    TurnDecision::Violation => {
                        let raw = self.last_text(agent, thread_id).await?;
                        let why = format!(
                            "{agent} ended its turn twice without calling {}",
                            contract::of(role).tools().collect::<Vec<_>>().join(" or ")
                        );
                        let report = TaskReport {
                            status: ReportStatus::ProtocolViolation,
                            summary: why.clone(),
                            output: raw,
                            blocked_reason: None,
                        };
                        self.end_run(&run, RunOutcome::ProtocolViolation, Some(json!(report)))
                            .await?;
                        self.board.set_report(task.id, Some(&report)).await?;
                        self.board
                            .transition(
                                task.id,
                                TaskStatus::Failed,
                                &Principal::Scheduler,
                                Some(why.clone()),
                            )
                            .await?;
                        self.tell_parent(
                            &task,
                            agent,
                            &brief::delegate_failed(agent, task.id, &why),
                            &Principal::Scheduler,
                        )
                        .await
                    }
                    TurnDecision::Answer => {
                        let answer = self.last_text(agent, thread_id).await?;
                        self.end_run(&run, RunOutcome::Completed, None).await?;
                        self.answered_by_agent(&task, &run, &answer).await
                    }
                }
            }
        }
    }

    /// Records a tool call of one of the task's threads in its history: the tool's
    /// Chorus name, what it was called on (as the step shows it), and its result.
    async fn tool_call(
        &self,
        agent: &str,
        thread_id: u64,
        called: &str,
        arguments: &str,
        failed: bool,
    ) -> Result<(), EngineError> {
        let Some(run) = self.board.run_of_thread(agent, thread_id).await? else {
            return Ok(());
        };
        let known = chorus_proto::tools::find_any(called);
        let tool = known.map_or(called, |t| t.name);
        let input = known
            .and_then(|t| t.subject_of(arguments).shown)
            .unwrap_or_default();
        self.board
            .record(
                run.task_id,
                TaskEventKind::ToolCall,
                &Principal::agent(agent, thread_id),
                json!({"agent": agent, "thread_id": thread_id, "tool": tool, "input": input,
                       "status": if failed { "error" } else { "ok" }}),
            )
            .await?;
        Ok(())
    }

    /// Applies an accepted control call at the end of the turn that made it.
    async fn apply(&self, task: &TaskView, run: &TaskRun, call: Call) -> Result<(), EngineError> {
        let thread = run.thread_id.unwrap_or_default();
        let by = Principal::agent(&run.agent, thread);
        let status = contract::status_after(&call, task.review);
        match &call {
            Call::SubmitPlan(plan) => {
                let fields = crate::store::PlanFields {
                    summary: Some(Some(plan.summary.clone())),
                    requirements: Some(plan.requirements.clone()),
                    acceptance_criteria: Some(plan.acceptance_criteria.clone()),
                    steps: Some(plan.steps.clone()),
                    assignee: Some(Some(plan.assignee.clone())),
                    ..crate::store::PlanFields::default()
                };
                self.board.update(task.id, fields, &by).await?;
                self.end_run(run, RunOutcome::Planned, None).await?;
                self.board
                    .record(
                        task.id,
                        TaskEventKind::PlanningFinished,
                        &by,
                        json!({"assignee": plan.assignee}),
                    )
                    .await?;
                self.board.transition(task.id, status, &by, None).await?;
            }
            Call::AskQuestions(questions) => {
                self.board.ask(task.id, &questions.questions, &by).await?;
                self.board.transition(task.id, status, &by, None).await?;
            }
            Call::AskQuestion(question) => {
                let asked = crate::store::NewQuestion {
                    id: format!("q{}", task.questions.len() + 1),
                    question: question.question.clone(),
                    options: question.options.clone(),
                    multi_select: false,
                };
                self.board
                    .ask(task.id, std::slice::from_ref(&asked), &by)
                    .await?;
                self.board.transition(task.id, status, &by, None).await?;
            }
            Call::CompletionReport(report) => {
                let record = task_report(report);
                self.end_run(run, outcome_of(report), Some(json!(record)))
                    .await?;
                self.board.set_report(task.id, Some(&record)).await?;
                // A delegate's claims are checked where they can be: the files it names.
                let checked = match task.parent_id {
                    Some(_) => self.check_files(&run.agent, task.id, report),
                    None => Vec::new(),
                };
                let mut data = json!(record);
                if !checked.is_empty() {
                    data["checked_files"] = json!(
                        checked
                            .iter()
                            .map(|(file, exists)| json!({"file": file, "exists": exists}))
                            .collect::<Vec<_>>()
                    );
                }
                self.board
                    .record(task.id, TaskEventKind::ReportReceived, &by, data)
                    .await?;
                self.board.complete_chain(task.id, &run.agent, &by).await?;
                self.board
                    .transition(task.id, status, &by, report.blocked_reason.clone())
                    .await?;
                let mut text = brief::delegate_report(&run.agent, task.id, report);
                if let Some(verdict) = super::claims::verdict(&checked) {
                    text.push_str(&verdict);
                    text.push('\n');
                }
                self.tell_parent(task, &run.agent, &text, &by).await?;
            }
            Call::DelegateToAgent(delegation) => {
                self.delegate(task, run, delegation, &by).await?;
                self.board.transition(task.id, status, &by, None).await?;
            }
            Call::AskAgent(question) => {
                self.ask_agent(task, run, question, &by).await?;
                if task.status == TaskStatus::Active {
                    self.board.transition(task.id, status, &by, None).await?;
                }
            }
        }
        Ok(())
    }

    /// Which of the files a report names exist in its task's directory. Only where
    /// the agent's workspace is on this host (a local worker's); none otherwise.
    fn check_files(
        &self,
        agent: &str,
        task_id: u64,
        report: &CompletionReport,
    ) -> Vec<(String, bool)> {
        let workspace = self.agents.dir(agent).workspace();
        if !workspace.is_dir() {
            return Vec::new();
        }
        let dir = workspace.join(workdir_of(task_id));
        let text = format!("{}\n{}", report.summary, report.output);
        super::claims::named_files(&text)
            .into_iter()
            .map(|name| {
                let exists = dir.join(&name).is_file();
                (name, exists)
            })
            .collect()
    }

    /// A child task for the delegate, started at once; its report comes back to
    /// the delegating thread.
    async fn delegate(
        &self,
        task: &TaskView,
        run: &TaskRun,
        delegation: &Delegation,
        by: &Principal,
    ) -> Result<(), EngineError> {
        let title: String = delegation
            .instructions
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("sub-task")
            .chars()
            .take(120)
            .collect();
        let child = self
            .board
            .create(
                CreateTask {
                    title,
                    description: brief::delegated(&run.agent, task.id, &delegation.instructions),
                    review: false,
                    parent_id: Some(task.id),
                    assignee: Some(delegation.agent.clone()),
                },
                by,
            )
            .await?;
        self.board
            .push_chain(task.id, &delegation.agent, child.id, by)
            .await?;
        self.work(&child, &delegation.agent, by, None, &run.chain)
            .await?;
        Ok(())
    }

    /// A thread of the other agent, whose reply is the asking thread's next message.
    async fn ask_agent(
        &self,
        task: &TaskView,
        run: &TaskRun,
        question: &AgentQuestion,
        by: &Principal,
    ) -> Result<(), EngineError> {
        let asked = self.agent(&question.agent).await?;
        let thread = self
            .runs
            .start_role_thread(
                &asked,
                &brief::asked(&run.agent, &question.question),
                by,
                ThreadRole::Answerer,
                None,
            )
            .await?;
        let answerer = self
            .board
            .add_run(
                task.id,
                ThreadRole::Answerer,
                &asked.name,
                asked.backend.as_str(),
                Some(thread),
            )
            .await?;
        let mut chain = run.chain.clone();
        chain.push(asked.name.clone());
        self.store
            .set_task_run_links(answerer, &chain, Some(run.id))
            .await?;
        self.board
            .record(
                task.id,
                TaskEventKind::QuestionAsked,
                by,
                json!({"to": asked.name, "question": question.question, "thread_id": thread, "chain": chain}),
            )
            .await?;
        Ok(())
    }

    /// An answerer's reply goes to the thread that asked.
    async fn answered_by_agent(
        &self,
        task: &TaskView,
        run: &TaskRun,
        answer: &str,
    ) -> Result<(), EngineError> {
        let by = Principal::agent(&run.agent, run.thread_id.unwrap_or_default());
        let Some(asker_id) = run.asked_by else {
            return Ok(());
        };
        let Some(asker) = self.board.run(asker_id).await? else {
            return Ok(());
        };
        self.board
            .record(
                task.id,
                TaskEventKind::QuestionAnswered,
                &by,
                json!({"by_agent": run.agent, "to": asker.agent, "answer": answer}),
            )
            .await?;
        if asker.role == ThreadRole::Worker && task.status == TaskStatus::Waiting {
            self.board
                .transition(task.id, TaskStatus::Active, &by, None)
                .await?;
        }
        self.tell_thread(&asker, &brief::agent_answer(&run.agent, answer), &by)
            .await
    }

    /// A run that ended without a report (its thread failed or was killed): the task
    /// fails with the reason and its partial output, and a parent hears of it.
    async fn run_failed(
        &self,
        task: &TaskView,
        run: &TaskRun,
        outcome: RunOutcome,
        why: &str,
    ) -> Result<(), EngineError> {
        let thread = run.thread_id.unwrap_or_default();
        let partial = self.last_text(&run.agent, thread).await.unwrap_or_default();
        let report = TaskReport {
            status: ReportStatus::Failed,
            summary: why.to_string(),
            output: partial,
            blocked_reason: None,
        };
        self.end_run(run, outcome, Some(json!(report))).await?;
        if run.role == ThreadRole::Answerer {
            // The asker hears that no answer comes, and goes on.
            return self
                .answered_by_agent(task, run, &format!("(no answer: {why})"))
                .await;
        }
        if !task.status.is_finished() {
            self.board.set_report(task.id, Some(&report)).await?;
            self.board
                .transition(
                    task.id,
                    TaskStatus::Failed,
                    &Principal::Scheduler,
                    Some(why.to_string()),
                )
                .await?;
        }
        let text = brief::delegate_failed(&run.agent, task.id, why);
        self.tell_parent(task, &run.agent, &text, &Principal::Scheduler)
            .await
    }

    /// A child task's end goes to its parent's worker thread as its next message.
    async fn tell_parent(
        &self,
        task: &TaskView,
        agent: &str,
        text: &str,
        by: &Principal,
    ) -> Result<(), EngineError> {
        let Some(parent_id) = task.parent_id else {
            return Ok(());
        };
        let parent = self.board.get(parent_id).await?;
        let Some(run) = runs_of(&parent)
            .iter()
            .rev()
            .find(|r| r.role == ThreadRole::Worker && r.ended_at.is_none())
            .cloned()
        else {
            return Ok(());
        };
        self.board.complete_chain(parent_id, agent, by).await?;
        if parent.status == TaskStatus::Waiting {
            self.board
                .transition(parent_id, TaskStatus::Active, by, None)
                .await?;
        }
        self.tell_thread(&run, text, by).await
    }

    async fn end_run(
        &self,
        run: &TaskRun,
        outcome: RunOutcome,
        report: Option<serde_json::Value>,
    ) -> Result<(), EngineError> {
        let usage = match run.thread_id {
            Some(thread) => self.store.thread_usage(&run.agent, thread).await?,
            None => crate::store::ThreadUsage::default(),
        };
        self.board
            .end_run(
                run.id,
                outcome,
                report.as_ref(),
                (usage.input_tokens, usage.output_tokens, usage.model_calls),
            )
            .await?;
        Ok(())
    }

    /// The last text the model wrote in the thread (a raw output, an answer).
    async fn last_text(&self, agent: &str, thread_id: u64) -> Result<String, EngineError> {
        Ok(self
            .store
            .thread_messages(agent, thread_id)
            .await?
            .into_iter()
            .rev()
            .find(|m| m.message.role == Role::Assistant && !m.message.content.trim().is_empty())
            .map(|m| m.message.content)
            .unwrap_or_default())
    }

    async fn agent(&self, name: &str) -> Result<AgentRecord, EngineError> {
        self.store
            .active_agent(name)
            .await?
            .ok_or_else(|| conflict(format!("agent '{name}' does not exist (any more)")))
    }

    /// Checks a control call before it is recorded: the agent it names exists, and
    /// no delegation or question between agents loops or goes deeper than the bound.
    async fn check_call(&self, run: &TaskRun, call: &Call) -> Result<(), String> {
        let (target, verb) = match call {
            Call::SubmitPlan(plan) => (&plan.assignee, "assign the task to"),
            Call::DelegateToAgent(d) => (&d.agent, "delegate to"),
            Call::AskAgent(a) => (&a.agent, "ask"),
            _ => return Ok(()),
        };
        let agents: Vec<String> = self
            .store
            .active_agents()
            .await
            .map_err(|e| format!("the agents cannot be read ({e}); try again"))?
            .into_iter()
            .map(|a| a.name)
            .filter(|n| *n != self.settings().planner)
            .collect();
        if !agents.contains(target) {
            return Err(format!(
                "'{target}' is not an agent you can {verb}; the agents are: {}. Call again with one of them.",
                if agents.is_empty() {
                    "(none)".to_string()
                } else {
                    agents.join(", ")
                }
            ));
        }
        if matches!(call, Call::SubmitPlan(_)) {
            return Ok(());
        }
        let bound = self.settings().max_delegation_depth as usize;
        if run.chain.contains(target) {
            return Err(format!(
                "refused: {target} is already in this chain ({}), so this would loop. Do it yourself, or end with your answer or report.",
                run.chain.join(" → ")
            ));
        }
        if run.chain.len() >= bound {
            return Err(format!(
                "refused: the chain {} is already {} agents deep, the bound ([tasks] max_delegation_depth) is {bound}. Do it yourself, or end with your answer or report.",
                run.chain.join(" → "),
                run.chain.len(),
            ));
        }
        Ok(())
    }
}

/// A person's request the task's status does not allow: a 409 that says where the
/// task may go from here.
fn refused(task: &TaskView, rule: &str) -> EngineError {
    let allowed = super::status::allowed_from(task.status).to_vec();
    EngineError::Conflict {
        message: format!(
            "task {} is {}; {rule} (allowed from {}: {})",
            task.id,
            task.status,
            task.status,
            super::status::words(&allowed)
        ),
        allowed,
    }
}

fn runs_of(task: &TaskView) -> &[TaskRun] {
    task.runs.as_deref().unwrap_or_default()
}

fn task_report(report: &CompletionReport) -> TaskReport {
    use chorus_proto::tools::ReportStatus as Said;
    TaskReport {
        status: match report.status {
            Said::Complete => ReportStatus::Complete,
            Said::Blocked => ReportStatus::Blocked,
            Said::Failed => ReportStatus::Failed,
        },
        summary: report.summary.clone(),
        output: report.output.clone(),
        blocked_reason: report.blocked_reason.clone(),
    }
}

fn outcome_of(report: &CompletionReport) -> RunOutcome {
    use chorus_proto::tools::ReportStatus as Said;
    match report.status {
        Said::Complete => RunOutcome::Completed,
        Said::Blocked => RunOutcome::Blocked,
        Said::Failed => RunOutcome::Failed,
    }
}

fn report_word(status: ReportStatus) -> &'static str {
    match status {
        ReportStatus::Complete => "complete",
        ReportStatus::Blocked => "blocked",
        ReportStatus::Failed => "failed",
        ReportStatus::ProtocolViolation => "protocol violation",
    }
}

/// A task's own directory, under its agent's workspace.
pub fn workdir_of(task_id: u64) -> String {
    format!("tasks/{task_id}")
}

/// The task whose directory `workdir` is ([`workdir_of`]'s inverse).
pub fn task_of_workdir(workdir: &str) -> Option<u64> {
    workdir.strip_prefix("tasks/")?.parse().ok()
}

/// A task's text for its briefs.
fn text_of(task: &TaskView) -> brief::TaskText {
    brief::TaskText {
        id: task.id,
        title: task.title.clone(),
        description: task.description.clone(),
        plan: task
            .assignee
            .as_ref()
            .map(|assignee| chorus_proto::tools::Plan {
                summary: task.summary.clone().unwrap_or_default(),
                requirements: task.requirements.clone(),
                acceptance_criteria: task.acceptance_criteria.clone(),
                steps: task.steps.clone(),
                assignee: assignee.clone(),
            }),
        answered: task
            .questions
            .iter()
            .filter_map(|q| {
                q.answer.as_ref().map(|a| brief::Answered {
                    question: q.question.clone(),
                    answer: a.clone(),
                })
            })
            .collect(),
        attachments: task.attachments.iter().map(|a| a.name.clone()).collect(),
        messages: Vec::new(),
    }
}

#[tonic::async_trait]
impl RoleHooks for Engine {
    fn offered(&self, role: ThreadRole) -> Vec<ToolSpec> {
        contract::of(role).specs(&self.schema)
    }

    fn owns(&self, role: ThreadRole, tool: &str) -> bool {
        contract::of(role).owns(tool).is_some()
    }

    async fn execute(
        &self,
        agent: &str,
        thread_id: u64,
        _run_id: &str,
        role: ThreadRole,
        tool: &str,
        arguments: &str,
    ) -> Result<String, String> {
        let Some(name) = contract::of(role).owns(tool) else {
            return Err(format!("{tool} is not a tool of the {role} role"));
        };
        let call = Call::parse(name, arguments)?;
        let _turn = self.turn.lock().await;
        let run = match self.board.run_of_thread(agent, thread_id).await {
            Ok(Some(run)) if run.ended_at.is_none() => run,
            Ok(_) => return Err("this thread works on no task (any more); end your turn".into()),
            Err(e) => return Err(format!("the task cannot be read ({e}); try again")),
        };
        if let Some(earlier) = run.finishing.as_ref().and_then(|f| f["tool"].as_str()) {
            return Err(format!(
                "you already called {earlier} in this turn; it stands. End your turn now."
            ));
        }
        self.check_call(&run, &call).await?;
        let accepted = call.accepted();
        self.board
            .set_finishing(run.id, Some(&json!(call)))
            .await
            .map_err(|e| format!("the call cannot be recorded ({e}); try again"))?;
        Ok(accepted)
    }

    fn tool_call_ended(
        &self,
        agent: &str,
        thread_id: u64,
        _role: ThreadRole,
        tool: &str,
        arguments: &str,
        failed: bool,
    ) {
        let _ = self.told.send(Told::ToolCall {
            agent: agent.to_string(),
            thread_id,
            tool: tool.to_string(),
            arguments: arguments.to_string(),
            failed,
        });
    }

    /// A worker's run is given the task's attachments in its directory (on whichever
    /// host its worker runs); an attachment that cannot be read is left out, logged.
    async fn files(
        &self,
        _agent: &str,
        role: ThreadRole,
        workdir: Option<&str>,
    ) -> Vec<chorus_proto::domain::TemplateFile> {
        if role != ThreadRole::Worker {
            return Vec::new();
        }
        // From the thread's own directory, not its run's record: the thread starts
        // (and its first assignment is built) before `work` records the run.
        let Some(task_id) = workdir.and_then(task_of_workdir) else {
            return Vec::new();
        };
        let Ok(attachments) = self.board.attachments(task_id).await else {
            return Vec::new();
        };
        let dir = self.board.attachments_dir(task_id);
        let mut files = Vec::new();
        for attachment in attachments {
            match tokio::fs::read(dir.join(&attachment.name)).await {
                Ok(content) => files.push(chorus_proto::domain::TemplateFile {
                    path: attachment.name,
                    content,
                    executable: false,
                }),
                Err(e) => {
                    tracing::warn!(task_id, name = %attachment.name, error = %e, "a task's attachment cannot be read; its run goes without it")
                }
            }
        }
        files
    }

    fn turn_ended(&self, agent: &str, thread_id: u64, role: ThreadRole, end: TurnEnd) {
        let _ = self.told.send(Told::TurnEnded {
            agent: agent.to_string(),
            thread_id,
            role,
            end,
        });
    }
}

// ---------------------------------------------------------------- limits, restart

/// How often working tasks are checked against their limits.
const LIMIT_SWEEP: std::time::Duration = std::time::Duration::from_secs(2);

impl Engine {
    fn watch_limits(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(LIMIT_SWEEP);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(engine) = weak.upgrade() else { break };
                if let Err(e) = engine.enforce_limits().await {
                    tracing::warn!(error = %e, "cannot check tasks against their limits");
                }
            }
        });
    }

    /// The tasks agents are working on, whole.
    async fn working(&self) -> Result<Vec<TaskView>, EngineError> {
        let mut working = Vec::new();
        for status in [
            TaskStatus::Planning,
            TaskStatus::Active,
            TaskStatus::Waiting,
        ] {
            let filter = crate::store::TaskFilter {
                status: Some(status),
                ..crate::store::TaskFilter::default()
            };
            for task in self.board.list(&filter).await? {
                working.push(self.board.get(task.id).await?);
            }
        }
        Ok(working)
    }

    /// A task whose agents have worked longer or called the model more often than
    /// its limits allow is failed with the reason and its partial output, and its
    /// going threads are ended.
    async fn enforce_limits(&self) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        for task in self.working().await? {
            let threads: Vec<(String, u64)> = runs_of(&task)
                .iter()
                .filter_map(|r| r.thread_id.map(|t| (r.agent.clone(), t)))
                .collect();
            let spent = self.store.threads_work(&threads).await?;
            let Some(why) = super::limits::exceeded(&task.limits, &spent) else {
                continue;
            };
            tracing::info!(task_id = task.id, reason = %why, "task over its limits; failing it");
            let mut partial = String::new();
            for run in runs_of(&task).iter().filter(|r| r.ended_at.is_none()) {
                let thread = run.thread_id.unwrap_or_default();
                partial = self.last_text(&run.agent, thread).await.unwrap_or_default();
                let report = json!({"status": "failed", "summary": why, "output": partial});
                self.end_run(run, RunOutcome::Limit, Some(report)).await?;
                let _ = self
                    .runs
                    .kill_thread(&run.agent, thread, &Principal::Scheduler.text())
                    .await;
            }
            let report = TaskReport {
                status: ReportStatus::Failed,
                summary: why.clone(),
                output: partial,
                blocked_reason: None,
            };
            self.board.set_report(task.id, Some(&report)).await?;
            self.board
                .transition(
                    task.id,
                    TaskStatus::Failed,
                    &Principal::Scheduler,
                    Some(why.clone()),
                )
                .await?;
            let agent = task.assignee.clone().unwrap_or_default();
            let text = brief::delegate_failed(&agent, task.id, &why);
            self.tell_parent(&task, &agent, &text, &Principal::Scheduler)
                .await?;
        }
        Ok(())
    }

    /// At start: a turn that ended while the control plane was down (its thread
    /// ended, its run still open) is applied now. Returns how many.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        let mut told = 0;
        for task in self.working().await? {
            for run in runs_of(&task).iter().filter(|r| r.ended_at.is_none()) {
                let Some(thread_id) = run.thread_id else {
                    continue;
                };
                let Some(thread) = self.store.thread(&run.agent, thread_id).await? else {
                    continue;
                };
                // A run that asked and waits for its answer has ended its turn already.
                let waits = task.status == TaskStatus::Waiting && run.finishing.is_none();
                if !thread.status.is_finished() || waits {
                    continue;
                }
                let end = match thread.status {
                    crate::store::ThreadStatus::Completed => TurnEnd::Completed {
                        run_id: String::new(),
                    },
                    crate::store::ThreadStatus::Killed => TurnEnd::Killed,
                    _ => TurnEnd::Failed(chorus_proto::domain::Failure::new(
                        thread
                            .failure_kind
                            .unwrap_or(chorus_proto::domain::FailureKind::Internal),
                        thread
                            .error
                            .clone()
                            .unwrap_or_else(|| "the thread failed".into()),
                    )),
                };
                self.turn_ended(&run.agent, thread_id, run.role, end);
                told += 1;
            }
        }
        Ok(told)
    }
}

#[cfg(test)]
mod workdir_tests {
    use super::*;

    #[test]
    fn a_tasks_directory_names_the_task_and_nothing_else_does() {
        for id in [1, 42, u64::MAX] {
            assert_eq!(task_of_workdir(&workdir_of(id)), Some(id));
        }
        for other in [
            "",
            "tasks/",
            "tasks/x",
            "task/3",
            "tasks/3/sub",
            "other/tasks/3",
        ] {
            assert_eq!(task_of_workdir(other), None, "{other}");
        }
    }
}
