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

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use chorus_proto::domain::{Role, ToolSpec};
use chorus_proto::tools::{AgentQuestion, Delegation, SchemaSettings};
use serde_json::json;
use tokio::sync::{Mutex, mpsc};

use super::brief;
use super::contract::{self, Call, TurnDecision};
use super::stand_in::{TaskStatus, ThreadRole};
// From lane A (board) and lane B (roles), reconciled at merge.
use super::board::{Board, BoardError, TaskView};
use super::history::TaskEventKind;
use super::status::RunOutcome;
use crate::runs::roles::{RoleHooks, TurnEnd};
use crate::store::TaskTurn;
use crate::agents::{AgentService, CreateAgent};
use crate::permissions::PermissionsSetting;
use crate::permissions::grants::Role as PersonRole;
use crate::principal::Principal;
use crate::runs::Runs;
use crate::store::{AgentRecord, Store};

/// The board's settings (`[tasks]`).
#[derive(Debug, Clone)]
pub struct EngineSettings {
    /// The planning agent's name; created at first use.
    pub planner: String,
    /// How deep delegations and questions between agents may chain.
    pub max_depth: usize,
}

impl Default for EngineSettings {
    fn default() -> Self {
        EngineSettings {
            planner: "planner".into(),
            max_depth: 5,
        }
    }
}

/// Why the engine refused a person's request (mapped to HTTP by the routes).
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error(transparent)]
    Board(#[from] BoardError),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    Store(#[from] crate::store::StoreError),
}

/// A turn's end, as the actor told it.
struct Ended {
    agent: String,
    thread_id: u64,
    role: ThreadRole,
    end: TurnEnd,
}

pub struct Engine {
    store: Store,
    board: Board,
    runs: Arc<Runs>,
    agents: Arc<AgentService>,
    settings: EngineSettings,
    schema: SchemaSettings,
    /// Held by every change of a task (a turn's end, a person's button), so none
    /// interleave; never held across a wait for a model or a worker.
    turn: Mutex<()>,
    ends: mpsc::UnboundedSender<Ended>,
}

impl Engine {
    /// Starts the engine and the task that applies turns' ends in order.
    pub fn start(
        store: Store,
        board: Board,
        runs: Arc<Runs>,
        agents: Arc<AgentService>,
        settings: EngineSettings,
    ) -> Arc<Engine> {
        let (ends, mut receiver) = mpsc::unbounded_channel::<Ended>();
        let schema = runs.tool_schemas();
        let engine = Arc::new(Engine {
            store,
            board,
            runs,
            agents,
            settings,
            schema,
            turn: Mutex::new(()),
            ends,
        });
        let weak = Arc::downgrade(&engine);
        tokio::spawn(async move {
            while let Some(ended) = receiver.recv().await {
                let Some(engine) = weak.upgrade() else { break };
                if let Err(e) = engine.turn_end(&ended).await {
                    tracing::error!(agent = %ended.agent, thread_id = ended.thread_id, error = %e, "cannot apply the end of a task turn");
                }
            }
        });
        engine
    }

    // ------------------------------------------------------------ people

    /// A task was created: its planning starts.
    pub async fn created(&self, task_id: u64, by: &Principal) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        self.plan(task_id, by).await
    }

    async fn plan(&self, task_id: u64, by: &Principal) -> Result<(), EngineError> {
        let task = self.board.get(task_id).await?;
        let planner = match self.planner().await {
            Ok(planner) => planner,
            Err(why) => {
                self.board
                    .transition(task_id, TaskStatus::Failed, &Principal::Scheduler, Some(&why))
                    .await?;
                return Err(EngineError::Conflict(why));
            }
        };
        let agents = self.agent_lines().await?;
        let content = brief::planner(&text_of(&task), &agents);
        let thread = self
            .runs
            .start_role_thread(&planner, &content, by, ThreadRole::Planner, None)
            .await?;
        let run = self
            .board
            .add_run(task_id, ThreadRole::Planner, &planner.name, "api", thread)
            .await?;
        self.store
            .task_turn_started(run, task_id, &planner.name, thread, ThreadRole::Planner, &[planner.name.clone()], None)
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
    /// prompt, read-only tools and the default model.
    async fn planner(&self) -> Result<AgentRecord, String> {
        let name = &self.settings.planner;
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
            idle_timeout_secs: None,
            discord_channel_id: None,
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
            .filter(|a| a.name != self.settings.planner)
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

    /// Answers to a task's open questions. Once none is open, they go to the thread
    /// that asked, as its next message.
    pub async fn answer(
        &self,
        task_id: u64,
        answers: &HashMap<String, String>,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        let open: Vec<_> = task.questions.iter().filter(|q| q.answer.is_none()).collect();
        if open.is_empty() {
            return Err(EngineError::Conflict(format!(
                "task {task_id} has no open question (it is {})",
                task.status.as_str()
            )));
        }
        if answers.is_empty() {
            return Err(EngineError::Invalid("answers is empty: give {\"answers\": {\"<question id>\": \"text\"}}".into()));
        }
        for (id, text) in answers {
            if !open.iter().any(|q| &q.id == id) {
                let ids: Vec<&str> = open.iter().map(|q| q.id.as_str()).collect();
                return Err(EngineError::Invalid(format!(
                    "question {id:?} is not open on task {task_id}; the open ones: {}",
                    ids.join(", ")
                )));
            }
            if text.trim().is_empty() {
                return Err(EngineError::Invalid(format!("the answer to {id:?} is empty")));
            }
        }
        for (id, text) in answers {
            self.board.answer(task_id, id, text, by).await?;
        }
        let task = self.board.get(task_id).await?;
        let still_open = task.questions.iter().any(|q| q.answer.is_none());
        if still_open {
            return Ok(task);
        }
        // Every question of the round answered: back to the thread that asked.
        let Some(run) = task.runs.iter().rev().find(|r| r.ended_at.is_none()) else {
            return Err(EngineError::Conflict(format!("task {task_id} has no thread waiting for answers")));
        };
        let asked: Vec<brief::Answered> = task
            .questions
            .iter()
            .filter(|q| answers.contains_key(&q.id) || q.asked_in_run == Some(run.id))
            .filter_map(|q| {
                q.answer.as_ref().map(|a| brief::Answered {
                    question: q.question.clone(),
                    answer: a.clone(),
                })
            })
            .collect();
        let next = match task.status {
            TaskStatus::AwaitingInput => TaskStatus::Planning,
            _ => TaskStatus::Active,
        };
        self.board.transition(task_id, next, by, None).await?;
        let agent = self.agent(&run.agent).await?;
        self.runs
            .message_thread(&agent, run.thread_id, &brief::answers(&asked), by)
            .await?;
        Ok(self.board.get(task_id).await?)
    }

    /// Start: the agent the plan names works the task in a directory of its own.
    pub async fn start(&self, task_id: u64, by: &Principal) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        self.board.check_transition(&task, TaskStatus::Active)?;
        if task.status != TaskStatus::Planned {
            return Err(EngineError::Conflict(format!(
                "task {task_id} is {}; only a planned task can be started (retry a failed or blocked one)",
                task.status.as_str()
            )));
        }
        let Some(assignee) = task.assignee.clone() else {
            return Err(EngineError::Conflict(format!(
                "task {task_id} has no assignee: set one with PATCH /api/tasks/{task_id} {{\"assignee\": \"…\"}}"
            )));
        };
        self.work(&task, &assignee, by, None).await?;
        Ok(self.board.get(task_id).await?)
    }

    /// Retry: a failed or blocked task gets a new attempt, told how the last ended.
    pub async fn retry(&self, task_id: u64, by: &Principal) -> Result<TaskView, EngineError> {
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        self.board.check_transition(&task, TaskStatus::Active)?;
        let Some(assignee) = task.assignee.clone() else {
            return Err(EngineError::Conflict(format!("task {task_id} has no assignee to retry with")));
        };
        let previous = task
            .report
            .as_ref()
            .map(|r| format!("{}: {}", r.status, r.summary))
            .or_else(|| task.blocked_reason.clone());
        self.work(&task, &assignee, by, previous.as_deref()).await?;
        Ok(self.board.get(task_id).await?)
    }

    /// Starts a worker thread of `assignee` on `task` (start, retry, a delegation).
    async fn work(
        &self,
        task: &TaskView,
        assignee: &str,
        by: &Principal,
        previous: Option<&str>,
    ) -> Result<u64, EngineError> {
        let agent = self.agent(assignee).await?;
        let workdir = workdir_of(task.id);
        let content = brief::worker(&text_of(task), &workdir, previous);
        let chain = self.chain_of(task);
        let thread = self
            .runs
            .start_role_thread(&agent, &content, by, ThreadRole::Worker, Some(&workdir))
            .await?;
        let run = self
            .board
            .add_run(task.id, ThreadRole::Worker, &agent.name, "api", thread)
            .await?;
        let mut chain_here = chain;
        chain_here.push(agent.name.clone());
        self.store
            .task_turn_started(run, task.id, &agent.name, thread, ThreadRole::Worker, &chain_here, None)
            .await?;
        self.board.chain_started(task.id, &agent.name).await?;
        self.board
            .transition(task.id, TaskStatus::Active, by, None)
            .await?;
        self.board
            .record(
                task.id,
                TaskEventKind::Started,
                by,
                json!({"agent": agent.name, "thread_id": thread, "run_id": run, "workdir": workdir}),
            )
            .await?;
        Ok(thread)
    }

    /// A person sends the report back: the same thread goes on with the message.
    pub async fn send_back(
        &self,
        task_id: u64,
        message: &str,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        if message.trim().is_empty() {
            return Err(EngineError::Invalid("send-back needs a message saying what is missing".into()));
        }
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        self.board.check_transition(&task, TaskStatus::Active)?;
        if task.status != TaskStatus::Review {
            return Err(EngineError::Conflict(format!(
                "task {task_id} is {}; only a task in review can be sent back",
                task.status.as_str()
            )));
        }
        let Some(run) = task.runs.iter().rev().find(|r| r.role == ThreadRole::Worker) else {
            return Err(EngineError::Conflict(format!("task {task_id} has no worker thread")));
        };
        let agent = self.agent(&run.agent).await?;
        self.board.reopen_run(run.id).await?;
        self.board
            .transition(task_id, TaskStatus::Active, by, Some(message))
            .await?;
        self.runs
            .message_thread(&agent, run.thread_id, &brief::sent_back(&by.text(), message), by)
            .await?;
        Ok(self.board.get(task_id).await?)
    }

    /// A person's message to the agent working on the task: into its thread (its
    /// running turn takes it at its next model call; otherwise it starts the next
    /// turn), or kept for the brief when no agent works on it yet.
    pub async fn message(
        &self,
        task_id: u64,
        message: &str,
        by: &Principal,
    ) -> Result<TaskView, EngineError> {
        if message.trim().is_empty() {
            return Err(EngineError::Invalid("message is empty".into()));
        }
        let _turn = self.turn.lock().await;
        let task = self.board.get(task_id).await?;
        if matches!(task.status, TaskStatus::Completed | TaskStatus::Failed) {
            return Err(EngineError::Conflict(format!(
                "task {task_id} is {}; reopen or retry it first",
                task.status.as_str()
            )));
        }
        let open = task.runs.iter().rev().find(|r| r.ended_at.is_none() && r.role != ThreadRole::Answerer);
        let delivered = match open {
            Some(run) => {
                let agent = self.agent(&run.agent).await?;
                self.runs
                    .message_thread(&agent, run.thread_id, &brief::person_message(&by.text(), message), by)
                    .await?;
                true
            }
            None => false,
        };
        self.board
            .record(
                task_id,
                TaskEventKind::MessageSent,
                by,
                json!({"message": message, "delivered": delivered}),
            )
            .await?;
        Ok(self.board.get(task_id).await?)
    }

    // ------------------------------------------------------------ turns

    async fn turn_end(&self, ended: &Ended) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        let Some(turn) = self.store.task_turn(&ended.agent, ended.thread_id).await? else {
            return Ok(()); // a thread whose task is gone
        };
        let task = match self.board.get(turn.task_id).await {
            Ok(task) => task,
            Err(BoardError::NotFound(_)) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        match &ended.end {
            TurnEnd::Failed(failure) => {
                let why = format!("the {} thread failed: {}", ended.role_str(), failure.message);
                self.run_failed(&task, &turn, RunOutcome::Error, &why).await
            }
            TurnEnd::Killed => {
                let why = format!("the {} thread was killed", ended.role_str());
                self.run_failed(&task, &turn, RunOutcome::Killed, &why).await
            }
            TurnEnd::Completed { .. } => {
                let call = turn.call.clone();
                self.store.task_turn_call(turn.run_id, None).await?;
                match contract::on_turn_end(ended.role, call, turn.followed_up) {
                    TurnDecision::Apply(call) => {
                        self.store.task_turn_followed_up(turn.run_id, false).await?;
                        self.apply(&task, &turn, ended, call).await
                    }
                    TurnDecision::FollowUp(text) => {
                        self.store.task_turn_followed_up(turn.run_id, true).await?;
                        self.board
                            .record(
                                task.id,
                                TaskEventKind::NudgeSent,
                                &Principal::Scheduler,
                                json!({"agent": ended.agent, "thread_id": ended.thread_id, "run_id": turn.run_id}),
                            )
                            .await?;
                        let agent = self.agent(&ended.agent).await?;
                        self.runs
                            .message_thread(&agent, ended.thread_id, &text, &Principal::Scheduler)
                            .await?;
                        Ok(())
                    }
                    TurnDecision::Violation => {
                        let raw = self.last_text(&ended.agent, ended.thread_id).await?;
                        let why = format!(
                            "{} ended its turn twice without calling {}",
                            ended.agent,
                            contract::of(ended.role).tools().collect::<Vec<_>>().join(" or ")
                        );
                        let report = json!({"status": "protocol_violation", "summary": why, "output": raw});
                        self.run_ended(&task, &turn, RunOutcome::ProtocolViolation, Some(report.clone())).await?;
                        self.board.set_report(task.id, &report).await?;
                        self.board
                            .transition(task.id, TaskStatus::Failed, &Principal::Scheduler, Some(&why))
                            .await?;
                        self.tell_parent_failed(&task, &ended.agent, &why).await
                    }
                    TurnDecision::Answer => {
                        let answer = self.last_text(&ended.agent, ended.thread_id).await?;
                        self.run_ended(&task, &turn, RunOutcome::Completed, None).await?;
                        self.answered_by_agent(&task, &turn, &ended.agent, ended.thread_id, &answer).await
                    }
                }
            }
        }
    }
}

impl Ended {
    fn role_str(&self) -> &'static str {
        self.role.as_str()
    }
}

impl Engine {
    /// Applies an accepted control call at the end of the turn that made it.
    async fn apply(
        &self,
        task: &TaskView,
        turn: &TaskTurn,
        ended: &Ended,
        call: Call,
    ) -> Result<(), EngineError> {
        let agent_principal = Principal::agent(&ended.agent, ended.thread_id);
        let status = contract::status_after(&call, task.review);
        match &call {
            Call::SubmitPlan(plan) => {
                self.board.set_plan(task.id, plan).await?;
                self.run_ended(task, turn, RunOutcome::Planned, None).await?;
                self.board
                    .record(
                        task.id,
                        TaskEventKind::PlanningFinished,
                        &agent_principal,
                        json!({"assignee": plan.assignee}),
                    )
                    .await?;
                self.board.transition(task.id, status, &agent_principal, None).await?;
            }
            Call::AskQuestions(questions) => {
                self.board
                    .ask(task.id, turn.run_id, &questions.questions, &agent_principal)
                    .await?;
                self.board.transition(task.id, status, &agent_principal, None).await?;
            }
            Call::AskQuestion(question) => {
                let q = chorus_proto::tools::PlannerQuestion {
                    id: format!("r{}q{}", turn.run_id, task.questions.len() + 1),
                    question: question.question.clone(),
                    options: question.options.clone(),
                    multi_select: false,
                };
                self.board
                    .ask(task.id, turn.run_id, std::slice::from_ref(&q), &agent_principal)
                    .await?;
                self.board.transition(task.id, status, &agent_principal, None).await?;
            }
            Call::CompletionReport(report) => {
                let value = serde_json::to_value(report).unwrap_or_default();
                let outcome = match report.status {
                    chorus_proto::tools::ReportStatus::Complete => RunOutcome::Completed,
                    chorus_proto::tools::ReportStatus::Blocked => RunOutcome::Blocked,
                    chorus_proto::tools::ReportStatus::Failed => RunOutcome::Failed,
                };
                self.run_ended(task, turn, outcome, Some(value.clone())).await?;
                self.board.set_report(task.id, &value).await?;
                self.board
                    .record(task.id, TaskEventKind::ReportReceived, &agent_principal, value)
                    .await?;
                self.board.chain_ended(task.id, &ended.agent).await?;
                self.board
                    .transition(task.id, status, &agent_principal, report.blocked_reason.as_deref())
                    .await?;
                // A delegate's report is the delegating thread's next message.
                if let Some(parent) = task.parent_id {
                    let text = brief::delegate_report(&ended.agent, task.id, report);
                    self.back_to_parent(parent, task.id, &ended.agent, &text, &agent_principal)
                        .await?;
                }
            }
            Call::DelegateToAgent(delegation) => {
                self.delegate(task, turn, ended, delegation).await?;
                self.board.transition(task.id, status, &agent_principal, None).await?;
            }
            Call::AskAgent(question) => {
                self.ask_agent(task, turn, ended, question).await?;
                if task.status == TaskStatus::Active {
                    self.board.transition(task.id, status, &agent_principal, None).await?;
                }
            }
        }
        Ok(())
    }

    /// A child task for the delegate, started at once; its report comes back to
    /// this thread.
    async fn delegate(
        &self,
        task: &TaskView,
        turn: &TaskTurn,
        ended: &Ended,
        delegation: &Delegation,
    ) -> Result<(), EngineError> {
        let by = Principal::agent(&ended.agent, ended.thread_id);
        let child = self
            .board
            .create_child(task.id, &delegation.agent, &brief::delegated(&ended.agent, task.id, &delegation.instructions), &by)
            .await?;
        let mut chain = turn.chain.clone();
        chain.push(delegation.agent.clone());
        self.board
            .record(
                task.id,
                TaskEventKind::HandoffStarted,
                &by,
                json!({"from": ended.agent, "to": delegation.agent, "child_task": child.id, "chain": chain}),
            )
            .await?;
        // The child starts from the parent's chain: the depth and loop checks see it.
        self.work(&child, &delegation.agent, &by, None).await?;
        Ok(())
    }

    /// A thread of the other agent, whose reply is this thread's next message.
    async fn ask_agent(
        &self,
        task: &TaskView,
        turn: &TaskTurn,
        ended: &Ended,
        question: &AgentQuestion,
    ) -> Result<(), EngineError> {
        let by = Principal::agent(&ended.agent, ended.thread_id);
        let asked = self.agent(&question.agent).await?;
        let thread = self
            .runs
            .start_role_thread(
                &asked,
                &brief::asked(&ended.agent, &question.question),
                &by,
                ThreadRole::Answerer,
                None,
            )
            .await?;
        let run = self
            .board
            .add_run(task.id, ThreadRole::Answerer, &asked.name, "api", thread)
            .await?;
        let mut chain = turn.chain.clone();
        chain.push(asked.name.clone());
        self.store
            .task_turn_started(run, task.id, &asked.name, thread, ThreadRole::Answerer, &chain, Some(turn.run_id))
            .await?;
        self.board
            .record(
                task.id,
                TaskEventKind::QuestionAsked,
                &by,
                json!({"to": asked.name, "question": question.question, "thread_id": thread, "chain": chain}),
            )
            .await?;
        Ok(())
    }

    /// An answerer's reply goes to the thread that asked.
    async fn answered_by_agent(
        &self,
        task: &TaskView,
        turn: &TaskTurn,
        agent: &str,
        thread_id: u64,
        answer: &str,
    ) -> Result<(), EngineError> {
        let by = Principal::agent(agent, thread_id);
        let Some(asker_run) = turn.asked_by else {
            return Ok(());
        };
        let Some(asker) = self.store.task_turn_of_run(asker_run).await? else {
            return Ok(());
        };
        self.board
            .record(
                task.id,
                TaskEventKind::QuestionAnswered,
                &by,
                json!({"by_agent": agent, "to": asker.agent, "answer": answer}),
            )
            .await?;
        if asker.role == ThreadRole::Worker && task.status == TaskStatus::Waiting {
            self.board.transition(task.id, TaskStatus::Active, &by, None).await?;
        }
        let asker_agent = self.agent(&asker.agent).await?;
        self.runs
            .message_thread(&asker_agent, asker.thread_id, &brief::agent_answer(agent, answer), &by)
            .await?;
        Ok(())
    }

    /// A run that ended without a report (its thread failed or was killed): the task
    /// fails with the reason, and a parent hears of it.
    async fn run_failed(
        &self,
        task: &TaskView,
        turn: &TaskTurn,
        outcome: RunOutcome,
        why: &str,
    ) -> Result<(), EngineError> {
        let partial = self.last_text(&turn.agent, turn.thread_id).await.unwrap_or_default();
        let report = json!({"status": outcome.as_str(), "summary": why, "output": partial});
        self.run_ended(task, turn, outcome, Some(report.clone())).await?;
        if turn.role == ThreadRole::Answerer {
            // The asker hears that no answer comes.
            return self
                .answered_by_agent(task, turn, &turn.agent, turn.thread_id, &format!("(no answer: {why})"))
                .await;
        }
        if !task.status.is_finished() {
            self.board.set_report(task.id, &report).await?;
            self.board
                .transition(task.id, TaskStatus::Failed, &Principal::Scheduler, Some(why))
                .await?;
        }
        self.tell_parent_failed(task, &turn.agent, why).await
    }

    async fn tell_parent_failed(
        &self,
        task: &TaskView,
        agent: &str,
        why: &str,
    ) -> Result<(), EngineError> {
        if let Some(parent) = task.parent_id {
            let text = brief::delegate_failed(agent, task.id, why);
            self.back_to_parent(parent, task.id, agent, &text, &Principal::Scheduler)
                .await?;
        }
        Ok(())
    }

    /// A child task's end goes to its parent's worker thread as its next message.
    async fn back_to_parent(
        &self,
        parent_id: u64,
        child_id: u64,
        agent: &str,
        text: &str,
        by: &Principal,
    ) -> Result<(), EngineError> {
        let parent = self.board.get(parent_id).await?;
        let Some(run) = parent
            .runs
            .iter()
            .rev()
            .find(|r| r.role == ThreadRole::Worker && r.ended_at.is_none())
        else {
            return Ok(());
        };
        self.board
            .record(
                parent_id,
                TaskEventKind::HandoffCompleted,
                by,
                json!({"child_task": child_id, "agent": agent, "chain": parent.chain}),
            )
            .await?;
        if parent.status == TaskStatus::Waiting {
            self.board.transition(parent_id, TaskStatus::Active, by, None).await?;
        }
        let parent_agent = self.agent(&run.agent).await?;
        self.runs
            .message_thread(&parent_agent, run.thread_id, text, by)
            .await?;
        Ok(())
    }

    async fn run_ended(
        &self,
        _task: &TaskView,
        turn: &TaskTurn,
        outcome: RunOutcome,
        report: Option<serde_json::Value>,
    ) -> Result<(), EngineError> {
        let usage = self.store.thread_usage(&turn.agent, turn.thread_id).await?;
        self.board.end_run(turn.run_id, outcome, report, usage).await?;
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
            .ok_or_else(|| EngineError::Conflict(format!("agent '{name}' does not exist (any more)")))
    }

    /// The agents from the root task down to this one (a delegation's chain).
    fn chain_of(&self, task: &TaskView) -> Vec<String> {
        task.chain.iter().map(|c| c.agent.clone()).collect()
    }

    /// Checks a control call before it is recorded: agents named exist, and no
    /// delegation or question between agents loops or goes deeper than the bound.
    async fn check_call(&self, turn: &TaskTurn, call: &Call) -> Result<(), String> {
        let names = || async {
            self.store
                .active_agents()
                .await
                .map(|agents| {
                    agents
                        .into_iter()
                        .map(|a| a.name)
                        .filter(|n| *n != self.settings.planner)
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        };
        let (target, verb) = match call {
            Call::SubmitPlan(plan) => (&plan.assignee, "assign the task to"),
            Call::DelegateToAgent(d) => (&d.agent, "delegate to"),
            Call::AskAgent(a) => (&a.agent, "ask"),
            _ => return Ok(()),
        };
        let agents = names().await;
        if !agents.contains(target) {
            return Err(format!(
                "'{target}' is not an agent you can {verb}; the agents are: {}. Call again with one of them.",
                if agents.is_empty() { "(none)".to_string() } else { agents.join(", ") }
            ));
        }
        if matches!(call, Call::SubmitPlan(_)) {
            return Ok(());
        }
        if turn.chain.contains(target) {
            return Err(format!(
                "refused: {target} is already in this chain ({}), so this would loop. Do the work yourself or report.",
                turn.chain.join(" → ")
            ));
        }
        if turn.chain.len() >= self.settings.max_depth {
            return Err(format!(
                "refused: the chain {} is already {} agents deep (the bound is {}). Do the work yourself or report.",
                turn.chain.join(" → "),
                turn.chain.len(),
                self.settings.max_depth
            ));
        }
        Ok(())
    }
}

/// A task's own directory, under its agent's workspace.
pub fn workdir_of(task_id: u64) -> String {
    format!("tasks/{task_id}")
}

/// A task's text for its briefs.
fn text_of(task: &TaskView) -> brief::TaskText {
    brief::TaskText {
        id: task.id,
        title: task.title.clone(),
        description: task.description.clone(),
        plan: task.assignee.as_ref().map(|assignee| chorus_proto::tools::Plan {
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
            return Err(format!("{tool} is not a tool of the {} role", role.as_str()));
        };
        let call = Call::parse(name, arguments)?;
        let _turn = self.turn.lock().await;
        let turn = match self.store.task_turn(agent, thread_id).await {
            Ok(Some(turn)) => turn,
            Ok(None) => return Err("this thread belongs to no task (any more); end your turn".into()),
            Err(e) => return Err(format!("the task cannot be read ({e}); try again")),
        };
        if let Some(earlier) = &turn.call {
            return Err(format!(
                "you already called {} in this turn; it stands. End your turn now.",
                earlier.tool()
            ));
        }
        self.check_call(&turn, &call).await?;
        let accepted = call.accepted();
        self.store
            .task_turn_call(turn.run_id, Some(&call))
            .await
            .map_err(|e| format!("the call cannot be recorded ({e}); try again"))?;
        Ok(accepted)
    }

    fn turn_ended(&self, agent: &str, thread_id: u64, role: ThreadRole, end: TurnEnd) {
        let _ = self.ends.send(Ended {
            agent: agent.to_string(),
            thread_id,
            role,
            end,
        });
    }
}

// ---------------------------------------------------------------- limits

/// How often running tasks are checked against their limits.
const LIMIT_SWEEP: std::time::Duration = std::time::Duration::from_secs(2);

impl Engine {
    /// Checks the working tasks against their limits until the engine is dropped.
    pub fn watch_limits(self: &Arc<Self>) {
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

    /// A task whose agents have worked longer (model calls and tool steps, summed) or
    /// called the model more often than its limits allow is failed with the reason and
    /// its partial output, and its open threads are ended.
    async fn enforce_limits(&self) -> Result<(), EngineError> {
        let _turn = self.turn.lock().await;
        for task in self.board.working().await? {
            let threads: Vec<(String, u64)> = task
                .runs
                .iter()
                .map(|r| (r.agent.clone(), r.thread_id))
                .collect();
            let spent = self.store.threads_work(&threads).await?;
            let over = limits::exceeded(&task.limits, &spent);
            let Some(why) = over else { continue };
            tracing::info!(task_id = task.id, reason = %why, "task over its limits; failing it");
            for run in task.runs.iter().filter(|r| r.ended_at.is_none()) {
                let Some(turn) = self.store.task_turn_of_run(run.id).await? else { continue };
                let partial = self.last_text(&turn.agent, turn.thread_id).await.unwrap_or_default();
                let report = json!({"status": RunOutcome::Limit.as_str(), "summary": why, "output": partial});
                self.run_ended(&task, &turn, RunOutcome::Limit, Some(report.clone())).await?;
                self.board.set_report(task.id, &report).await?;
                let _ = self
                    .runs
                    .kill_thread(&turn.agent, turn.thread_id, &Principal::Scheduler.text())
                    .await;
            }
            self.board
                .transition(task.id, TaskStatus::Failed, &Principal::Scheduler, Some(&why))
                .await?;
            self.tell_parent_failed(&task, task.assignee.as_deref().unwrap_or_default(), &why)
                .await?;
        }
        Ok(())
    }

    /// At start: a turn that ended while the control plane was down (its thread
    /// ended, its task run still open and not waiting for an answer) is applied now.
    pub async fn recover(&self) -> Result<usize, EngineError> {
        let mut told = 0;
        for task in self.board.working().await? {
            for run in task.runs.iter().filter(|r| r.ended_at.is_none()) {
                let Some(turn) = self.store.task_turn_of_run(run.id).await? else { continue };
                let Some(thread) = self.store.thread(&turn.agent, turn.thread_id).await? else { continue };
                let waits_for_answer = matches!(task.status, TaskStatus::AwaitingInput | TaskStatus::Waiting | TaskStatus::Review | TaskStatus::Blocked);
                if thread.status.is_finished() && (turn.call.is_some() || !waits_for_answer) {
                    let end = match thread.status {
                        crate::store::ThreadStatus::Completed => TurnEnd::Completed { run_id: String::new() },
                        crate::store::ThreadStatus::Killed => TurnEnd::Killed,
                        _ => TurnEnd::Failed(chorus_proto::domain::Failure::new(
                            thread.failure_kind.unwrap_or(chorus_proto::domain::FailureKind::Internal),
                            thread.error.clone().unwrap_or_else(|| "the thread failed".into()),
                        )),
                    };
                    self.turn_ended(&turn.agent, turn.thread_id, turn.role, end);
                    told += 1;
                }
            }
        }
        Ok(told)
    }
}
