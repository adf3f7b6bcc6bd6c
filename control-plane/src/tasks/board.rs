//! The board: the one way tasks change (the store and the live feed together). The
//! engine and every front end use it; it checks each status change against the table
//! (`status`), records every change in the task's history with who made it, and puts
//! each history event on the live feed as a `task` event.
//!
//! **Feed.** A task's events are published under the agent they concern: the
//! assignee once the task has one, the planner before (the task's planner agent, else
//! `[tasks] planner`), so `GET /api/events?agent=coder` shows coder's tasks. They
//! belong to no thread (`thread_id` null).
//!
//! **Attachments** live in `<data>/tasks/<id>/attachments/<name>` (written to a
//! temporary name, then renamed: a reader never sees half a file), recorded in the
//! store; the engine copies them into the worker's task directory at Start. Names are
//! jailed ([`check_attachment_name`]): one plain file name, never a path.
//!
//! **Deleting** a task whose run is going is refused (409): kill its thread first.
//! Otherwise its rows (history, questions, runs, attachments' record) and its
//! attachments' directory go; its child tasks stay, unlinked.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use super::history::{TaskEvent, TaskEventKind};
use super::status::{Button, TaskStatus, allowed_from, may_go, words};
use super::view::TaskView;
use crate::config::TaskSettings;
use crate::feed::{TaskChange, ThreadFeed};
use crate::principal::Principal;
use crate::store::{
    ChainEntry, NewQuestion, NewTask, PlanFields, QuestionRecord, RunOutcome, Store, StoreError,
    TaskAttachment, TaskFilter, TaskRecord, TaskReport, TaskRun, ThreadRole,
};

/// What went wrong, for the API: 404, 400, 409 (with the statuses allowed, when it
/// is about a status), or the store's own error.
#[derive(Debug, thiserror::Error)]
pub enum BoardError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{message}")]
    Conflict {
        message: String,
        /// Where the task may go from where it is (empty when not about a move).
        allowed: Vec<TaskStatus>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A task's files could not be written (the disk full is `Store(DiskFull)`).
    #[error("{0}")]
    Files(String),
}

/// A new task.
#[derive(Debug, Clone, Default)]
pub struct CreateTask {
    pub title: String,
    pub description: String,
    pub review: bool,
    /// A delegated child's parent.
    pub parent_id: Option<u64>,
    /// Set for a task that needs no planner (a delegation names its agent): it is
    /// created `planned` with this assignee. Otherwise it is created `planning`.
    pub assignee: Option<String>,
}

/// Called with a task's id once a person created it (the engine starts planning).
pub type OnCreated = Arc<dyn Fn(u64) + Send + Sync>;

/// The longest title accepted.
const MAX_TITLE: usize = 200;
/// The longest attachment name accepted (a common file system's limit).
const MAX_NAME: usize = 255;

pub struct Board {
    store: Store,
    feed: ThreadFeed,
    settings: TaskSettings,
    /// `<data>/tasks`.
    root: PathBuf,
    on_created: OnceLock<OnCreated>,
}

fn not_found(id: u64) -> BoardError {
    BoardError::NotFound(format!(
        "no task {id}; GET /api/tasks lists the tasks there are"
    ))
}

/// Why `name` cannot be an attachment's name, if it cannot: it must be one plain
/// file name (no `/`, `\`, `..`, NUL or other control characters, not hidden, at
/// most 255 bytes), so it lands in the task's directory and nowhere else.
pub fn check_attachment_name(name: &str) -> Result<(), String> {
    let why = if name.is_empty() {
        "it is empty"
    } else if name.contains('/') || name.contains('\\') {
        "it holds a path separator ('/' or '\\'); send the file's own name"
    } else if name.contains("..") {
        "it holds '..'"
    } else if name.contains('\0') {
        "it holds a NUL byte"
    } else if name.chars().any(char::is_control) {
        "it holds a control character"
    } else if name.starts_with('.') {
        "it starts with '.' (hidden files are not accepted)"
    } else if name.len() > MAX_NAME {
        "it is longer than 255 bytes"
    } else {
        return Ok(());
    };
    Err(format!(
        "the attachment name {:?} is refused: {why}",
        name.chars().take(80).collect::<String>()
    ))
}

impl Board {
    pub fn new(store: Store, feed: ThreadFeed, settings: TaskSettings, data_dir: &Path) -> Board {
        Board {
            store,
            feed,
            settings,
            root: data_dir.join("tasks"),
            on_created: OnceLock::new(),
        }
    }

    pub fn settings(&self) -> &TaskSettings {
        &self.settings
    }

    /// The engine's call point: `hook(id)` runs for each task a person creates
    /// ([`Board::created`]). Set once, at start; a second call is ignored.
    pub fn set_on_created(&self, hook: OnCreated) {
        let _ = self.on_created.set(hook);
    }

    /// Tells the engine a person created task `id` (so it starts planning). The front
    /// ends call it after [`Board::create`]; before the engine is wired, nothing runs.
    pub fn created(&self, id: u64) {
        if let Some(hook) = self.on_created.get() {
            hook(id);
        }
    }

    async fn record_of(&self, id: u64) -> Result<TaskRecord, BoardError> {
        self.store.task(id).await?.ok_or_else(|| not_found(id))
    }

    /// The agent a task's feed events go under: its assignee, else its planner.
    fn agent_of(&self, task: &TaskRecord) -> String {
        task.assignee
            .clone()
            .or_else(|| task.planner_agent.clone())
            .unwrap_or_else(|| self.settings.planner.clone())
    }

    /// Puts a history event on the live feed, under the agent it concerns.
    async fn publish(&self, event: TaskEvent) {
        // Deleted meanwhile, or unreadable: the history has it; the feed is live only.
        let Ok(Some(task)) = self.store.task(event.task_id).await else {
            return;
        };
        self.feed.publish_task(
            &self.agent_of(&task),
            TaskChange {
                task_id: event.task_id,
                event_id: event.id,
                at: event.at,
                kind: event.kind,
                by: event.by,
                status: task.status,
                data: event.data,
            },
        );
    }

    /// Creates a task (see [`CreateTask`]) and records `created`.
    pub async fn create(&self, new: CreateTask, by: &Principal) -> Result<TaskView, BoardError> {
        let title = new.title.trim().to_string();
        if title.is_empty() {
            return Err(BoardError::Invalid(
                "a task needs a title: send {\"title\": \"…\", \"description\": \"…\"}".into(),
            ));
        }
        if title.chars().count() > MAX_TITLE {
            return Err(BoardError::Invalid(format!(
                "the title is longer than {MAX_TITLE} characters; put the detail in the description"
            )));
        }
        if let Some(parent) = new.parent_id {
            self.record_of(parent).await?;
        }
        if let Some(agent) = &new.assignee {
            self.check_agent(agent).await?;
        }
        let status = if new.assignee.is_some() {
            TaskStatus::Planned
        } else {
            TaskStatus::Planning
        };
        let (id, event) = self
            .store
            .insert_task(
                &NewTask {
                    title,
                    description: new.description,
                    review: new.review,
                    created_by: by.text(),
                    parent_id: new.parent_id,
                    time_limit_secs: self.settings.time_limit_secs,
                    model_call_limit: self.settings.model_call_limit,
                },
                status,
            )
            .await?;
        if let Some(agent) = new.assignee {
            let fields = PlanFields {
                assignee: Some(Some(agent)),
                ..PlanFields::default()
            };
            self.store
                .update_task_fields(id, &fields, false, &by.text())
                .await?;
        }
        self.publish(event).await;
        self.get(id).await
    }

    /// A task whole: its questions, attachments, chain and runs.
    pub async fn get(&self, id: u64) -> Result<TaskView, BoardError> {
        let task = self.record_of(id).await?;
        let questions = self.store.task_questions(id).await?;
        let attachments = self.store.task_attachments(id).await?;
        let runs = self.store.task_runs(id).await?;
        Ok(TaskView::new(task, questions, attachments, Some(runs)))
    }

    /// The tasks `filter` selects, newest first, without their runs.
    pub async fn list(&self, filter: &TaskFilter) -> Result<Vec<TaskView>, BoardError> {
        let mut views = Vec::new();
        for task in self.store.tasks(filter).await? {
            let questions = self.store.task_questions(task.id).await?;
            let attachments = self.store.task_attachments(task.id).await?;
            views.push(TaskView::new(task, questions, attachments, None));
        }
        Ok(views)
    }

    /// `Ok` when `name` is an active agent; else an error listing the agents.
    pub async fn check_agent(&self, name: &str) -> Result<(), BoardError> {
        if self.store.active_agent(name).await?.is_some() {
            return Ok(());
        }
        let agents: Vec<String> = self
            .store
            .active_agents()
            .await?
            .into_iter()
            .map(|a| a.name)
            .collect();
        Err(BoardError::Invalid(format!(
            "'{name}' is not an agent; the agents are: {}",
            if agents.is_empty() {
                "(none)".to_string()
            } else {
                agents.join(", ")
            }
        )))
    }

    /// Edits a task: title, description and review any time; the plan (summary,
    /// requirements, acceptance criteria, steps, assignee) only before Start (409
    /// after). An assignee must be an agent. Records `plan_edited`.
    pub async fn update(
        &self,
        id: u64,
        fields: PlanFields,
        by: &Principal,
    ) -> Result<TaskView, BoardError> {
        let mut fields = fields;
        if let Some(title) = &mut fields.title {
            *title = title.trim().to_string();
        }
        if fields.names().is_empty() {
            return Err(BoardError::Invalid(
                "nothing to change: send any of title, description, review, summary, \
                 requirements, acceptance_criteria, steps, assignee"
                    .into(),
            ));
        }
        if let Some(title) = &fields.title
            && (title.trim().is_empty() || title.chars().count() > MAX_TITLE)
        {
            return Err(BoardError::Invalid(format!(
                "a title must be 1 to {MAX_TITLE} characters"
            )));
        }
        if let Some(Some(agent)) = &fields.assignee {
            self.check_agent(agent).await?;
        }
        let task = self.record_of(id).await?;
        let plan = fields.touches_plan();
        if plan && !task.status.before_start() {
            return Err(self.plan_locked(&task));
        }
        match self
            .store
            .update_task_fields(id, &fields, plan, &by.text())
            .await?
        {
            Some(event) => self.publish(event).await,
            // Started (or deleted) since it was read.
            None => return Err(self.plan_locked(&self.record_of(id).await?)),
        }
        self.get(id).await
    }

    fn plan_locked(&self, task: &TaskRecord) -> BoardError {
        BoardError::Conflict {
            message: format!(
                "task {} is {}: its plan (summary, requirements, acceptance_criteria, steps, \
                 assignee) can be edited only before Start (while planning, awaiting_input or \
                 planned); title, description and review can be edited any time",
                task.id, task.status
            ),
            allowed: Vec::new(),
        }
    }

    /// Deletes a task (see the module doc). 409 while one of its runs is going.
    pub async fn delete(&self, id: u64, by: &Principal) -> Result<(), BoardError> {
        let task = self.record_of(id).await?;
        let runs = self.store.task_runs(id).await?;
        if let Some(run) = runs.iter().find(|r| r.ended_at.is_none()) {
            let thread = run
                .thread_id
                .map(|t| format!(" (DELETE /api/agents/{}/threads/{t})", run.agent))
                .unwrap_or_default();
            return Err(BoardError::Conflict {
                message: format!(
                    "task {id} has a run going: agent {}'s {} thread; kill it first{thread}, \
                     or fail the task, then delete it",
                    run.agent,
                    run.role.as_str()
                ),
                allowed: Vec::new(),
            });
        }
        if !self.store.delete_task(id).await? {
            return Err(not_found(id));
        }
        let dir = self.root.join(id.to_string());
        if let Err(e) = std::fs::remove_dir_all(&dir)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(task = id, error = %e, "could not remove a deleted task's files");
        }
        self.feed
            .publish_task_deleted(&self.agent_of(&task), id, &by.text());
        Ok(())
    }

    /// Moves a task to `to`, if the table allows it from where it is; records
    /// `status_changed` (from, to, reason) by `by`. Going to `blocked`, `reason` is
    /// the blocked reason shown; leaving `blocked` clears it; finishing clears what it
    /// waited on. A move the table refuses is a 409 naming where it may go.
    pub async fn transition(
        &self,
        id: u64,
        to: TaskStatus,
        by: &Principal,
        reason: Option<String>,
    ) -> Result<TaskView, BoardError> {
        // Compare-and-set: a change that raced this one is read again and checked.
        for _ in 0..8 {
            let task = self.record_of(id).await?;
            if !may_go(task.status, to) {
                return Err(refused(id, task.status, to));
            }
            let blocked = (to == TaskStatus::Blocked)
                .then(|| reason.clone())
                .flatten();
            if let Some(event) = self
                .store
                .set_task_status(id, task.status, to, blocked, &by.text(), reason.clone())
                .await?
            {
                self.publish(event).await;
                return self.get(id).await;
            }
        }
        Err(BoardError::Conflict {
            message: format!("task {id} kept changing while it was moved to {to}; try again"),
            allowed: Vec::new(),
        })
    }

    /// A person's button that is a status change alone (Pause, Resume, Complete, Fail,
    /// Reopen, Accept; the engine's buttons go through it too once it has done its
    /// part). Pause blocks the task with the reason "paused by <who>".
    pub async fn press(
        &self,
        id: u64,
        button: Button,
        by: &Principal,
    ) -> Result<TaskView, BoardError> {
        let task = self.record_of(id).await?;
        let Some(to) = button.leads_to(task.status, task.assignee.is_some()) else {
            let allowed = allowed_from(task.status).to_vec();
            return Err(BoardError::Conflict {
                message: format!(
                    "task {id} is {}; {button} is for {} tasks (from {} it may go to: {})",
                    task.status,
                    words(button.applies_to()).replace(", ", " or "),
                    task.status,
                    words(&allowed)
                ),
                allowed,
            });
        };
        let reason = match button {
            Button::Pause => Some(format!("paused by {}", by.text())),
            _ => None,
        };
        self.transition(id, to, by, reason).await
    }

    /// Appends an event to a task's history (and the feed).
    pub async fn record(
        &self,
        id: u64,
        kind: TaskEventKind,
        by: &Principal,
        data: Value,
    ) -> Result<TaskEvent, BoardError> {
        let event = self
            .store
            .record_task_event(id, kind, &by.text(), data)
            .await?
            .ok_or_else(|| not_found(id))?;
        self.publish(event.clone()).await;
        Ok(event)
    }

    /// A task's history, oldest first.
    pub async fn history(&self, id: u64) -> Result<Vec<TaskEvent>, BoardError> {
        self.record_of(id).await?;
        Ok(self.store.task_events(id).await?)
    }

    pub async fn set_report(&self, id: u64, report: Option<&TaskReport>) -> Result<(), BoardError> {
        if self.store.set_task_report(id, report).await? {
            Ok(())
        } else {
            Err(not_found(id))
        }
    }

    /// Records the planner's thread of a task.
    pub async fn set_planner(&self, id: u64, agent: &str, thread: u64) -> Result<(), BoardError> {
        if self.store.set_task_planner(id, agent, thread).await? {
            Ok(())
        } else {
            Err(not_found(id))
        }
    }

    /// Adds a round of the planner's questions (ids unique and non-empty, at least
    /// one); records `question_asked`. Returns the round's number.
    pub async fn ask(
        &self,
        id: u64,
        questions: &[NewQuestion],
        by: &Principal,
    ) -> Result<u32, BoardError> {
        if questions.is_empty() {
            return Err(BoardError::Invalid("ask at least one question".into()));
        }
        let mut ids = std::collections::HashSet::new();
        for q in questions {
            if q.id.trim().is_empty() || q.question.trim().is_empty() {
                return Err(BoardError::Invalid(
                    "every question needs an id and its text".into(),
                ));
            }
            if !ids.insert(q.id.as_str()) {
                return Err(BoardError::Invalid(format!(
                    "two questions have the id '{}'; give each its own",
                    q.id
                )));
            }
        }
        let (round, event) = self
            .store
            .add_task_questions(id, questions, &by.text())
            .await?
            .ok_or_else(|| not_found(id))?;
        self.publish(event).await;
        Ok(round)
    }

    /// The questions of the newest round still unanswered.
    pub async fn open_questions(&self, id: u64) -> Result<Vec<QuestionRecord>, BoardError> {
        self.record_of(id).await?;
        let questions = self.store.task_questions(id).await?;
        let last = questions.iter().map(|q| q.round).max();
        Ok(questions
            .into_iter()
            .filter(|q| Some(q.round) == last && q.answer.is_none())
            .collect())
    }

    /// Answers open questions of the newest round by id (all or none); records
    /// `question_answered`. Returns that round's questions as they now stand. The
    /// status is the engine's to change (it sends the answers to the planner).
    pub async fn answer(
        &self,
        id: u64,
        answers: &std::collections::BTreeMap<String, String>,
        by: &Principal,
    ) -> Result<Vec<QuestionRecord>, BoardError> {
        let open = self.open_questions(id).await?;
        if open.is_empty() {
            return Err(BoardError::Conflict {
                message: format!("task {id} has no open questions"),
                allowed: Vec::new(),
            });
        }
        if answers.is_empty() {
            return Err(BoardError::Invalid(format!(
                "send {{\"answers\": {{\"<id>\": \"<answer>\"}}}}; the open questions are: {}",
                open_ids(&open)
            )));
        }
        if let Some(unknown) = answers.keys().find(|k| !open.iter().any(|q| &q.id == *k)) {
            return Err(BoardError::Invalid(format!(
                "'{unknown}' is not an open question of task {id}; the open ones are: {}",
                open_ids(&open)
            )));
        }
        let round = open[0].round;
        let pairs = answers
            .iter()
            .map(|(q, a)| (q.clone(), a.clone()))
            .collect();
        let event = self
            .store
            .answer_task_questions(id, round, pairs, &by.text())
            .await?
            .ok_or_else(|| BoardError::Conflict {
                message: format!("the questions of task {id} were answered meanwhile"),
                allowed: Vec::new(),
            })?;
        self.publish(event).await;
        Ok(self
            .store
            .task_questions(id)
            .await?
            .into_iter()
            .filter(|q| q.round == round)
            .collect())
    }

    /// Where a task's attachments are kept.
    pub fn attachments_dir(&self, id: u64) -> PathBuf {
        self.root.join(id.to_string()).join("attachments")
    }

    /// Stores an attachment (replacing one of the same name) and records
    /// `attachment_added`. The name is jailed ([`check_attachment_name`]); the size
    /// bound is the caller's, which must not hold more than `attachment_max_bytes`.
    pub async fn add_attachment(
        &self,
        id: u64,
        name: &str,
        bytes: &[u8],
        by: &Principal,
    ) -> Result<TaskAttachment, BoardError> {
        check_attachment_name(name).map_err(BoardError::Invalid)?;
        if bytes.len() as u64 > self.settings.attachment_max_bytes {
            return Err(BoardError::Invalid(format!(
                "the attachment is larger than {} bytes ([tasks] attachment_max_bytes)",
                self.settings.attachment_max_bytes
            )));
        }
        self.record_of(id).await?;
        let dir = self.attachments_dir(id);
        let write = || -> std::io::Result<()> {
            std::fs::create_dir_all(&dir)?;
            let partial = dir.join(format!(".{name}.partial"));
            std::fs::write(&partial, bytes)?;
            std::fs::rename(&partial, dir.join(name))
        };
        write().map_err(|e| {
            let detail = format!("{}: {e}", dir.join(name).display());
            if crate::store::is_no_space(&e) {
                BoardError::Store(StoreError::DiskFull(detail))
            } else {
                BoardError::Files(format!("cannot store the attachment at {detail}"))
            }
        })?;
        let event = self
            .store
            .put_task_attachment(id, name, bytes.len() as u64, &by.text())
            .await?
            .ok_or_else(|| not_found(id))?;
        self.publish(event).await;
        self.store
            .task_attachments(id)
            .await?
            .into_iter()
            .find(|a| a.name == name)
            .ok_or_else(|| not_found(id))
    }

    pub async fn attachments(&self, id: u64) -> Result<Vec<TaskAttachment>, BoardError> {
        self.record_of(id).await?;
        Ok(self.store.task_attachments(id).await?)
    }

    /// Records a run of a task (its thread, when known); returns the run's id.
    pub async fn add_run(
        &self,
        task: u64,
        role: ThreadRole,
        agent: &str,
        backend: &str,
        thread: Option<u64>,
    ) -> Result<u64, BoardError> {
        self.record_of(task).await?;
        Ok(self
            .store
            .insert_task_run(task, role, agent, backend, thread)
            .await?)
    }

    /// Records the control call of a run's current turn (`None` clears it once the
    /// turn's end is applied).
    pub async fn set_finishing(
        &self,
        run: u64,
        finishing: Option<&Value>,
    ) -> Result<(), BoardError> {
        run_found(
            run,
            self.store.set_task_run_finishing(run, finishing).await?,
        )
    }

    /// Where a run stands among agents: the agents from the task's root down to it
    /// (the loop and depth checks) and the run whose `ask_agent` it answers.
    pub async fn set_run_links(
        &self,
        run: u64,
        chain: &[String],
        asked_by: Option<u64>,
    ) -> Result<(), BoardError> {
        Ok(self.store.set_task_run_links(run, chain, asked_by).await?)
    }

    /// Whether the run was sent the one follow-up since its last control call.
    pub async fn set_followed_up(&self, run: u64, followed_up: bool) -> Result<(), BoardError> {
        Ok(self
            .store
            .set_task_run_followed_up(run, followed_up)
            .await?)
    }

    /// Reopens an ended run (a report sent back, a paused task resumed).
    pub async fn reopen_run(&self, run: u64) -> Result<(), BoardError> {
        Ok(self.store.reopen_task_run(run).await?)
    }

    /// Ends a run: its outcome, report and usage (input tokens, output tokens, model
    /// calls). `false` when it had ended already.
    pub async fn end_run(
        &self,
        run: u64,
        outcome: RunOutcome,
        report: Option<&Value>,
        usage: (u64, u64, u64),
    ) -> Result<bool, BoardError> {
        if self.store.task_run(run).await?.is_none() {
            return Err(BoardError::NotFound(format!("no task run {run}")));
        }
        Ok(self.store.end_task_run(run, outcome, report, usage).await?)
    }

    pub async fn run(&self, run: u64) -> Result<Option<TaskRun>, BoardError> {
        Ok(self.store.task_run(run).await?)
    }

    /// The task run of an agent's thread, if the thread is one.
    pub async fn run_of_thread(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Option<TaskRun>, BoardError> {
        Ok(self.store.task_run_of_thread(agent, thread).await?)
    }

    /// Adds `agent` (working on `on_task`: the task itself, or a delegated child) to
    /// the task's agent chain; records `handoff_started` (data: agent, task_id, chain).
    pub async fn push_chain(
        &self,
        id: u64,
        agent: &str,
        on_task: u64,
        by: &Principal,
    ) -> Result<Vec<ChainEntry>, BoardError> {
        let entry = ChainEntry {
            agent: agent.to_string(),
            task_id: on_task,
            started_at: crate::store::now(),
            ended_at: None,
        };
        let data = json!({ "agent": agent, "task_id": on_task });
        self.change_chain(
            id,
            Box::new(move |chain| chain.push(entry)),
            TaskEventKind::HandoffStarted,
            by,
            data,
        )
        .await
    }

    /// Ends `agent`'s open entry of the chain (the newest); records
    /// `handoff_completed` (data: agent, chain).
    pub async fn complete_chain(
        &self,
        id: u64,
        agent: &str,
        by: &Principal,
    ) -> Result<Vec<ChainEntry>, BoardError> {
        let name = agent.to_string();
        let data = json!({ "agent": agent });
        self.change_chain(
            id,
            Box::new(move |chain| {
                if let Some(entry) = chain
                    .iter_mut()
                    .rev()
                    .find(|e| e.agent == name && e.ended_at.is_none())
                {
                    entry.ended_at = Some(crate::store::now());
                }
            }),
            TaskEventKind::HandoffCompleted,
            by,
            data,
        )
        .await
    }

    async fn change_chain(
        &self,
        id: u64,
        change: crate::store::ChainChange,
        kind: TaskEventKind,
        by: &Principal,
        data: Value,
    ) -> Result<Vec<ChainEntry>, BoardError> {
        let (chain, event) = self
            .store
            .change_task_chain(id, change, kind, &by.text(), data)
            .await?
            .ok_or_else(|| not_found(id))?;
        self.publish(event).await;
        Ok(chain)
    }
}

fn run_found(run: u64, found: bool) -> Result<(), BoardError> {
    if found {
        Ok(())
    } else {
        Err(BoardError::NotFound(format!("no task run {run}")))
    }
}

fn open_ids(open: &[QuestionRecord]) -> String {
    open.iter()
        .map(|q| q.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The 409 of a move the table refuses, naming where the task may go.
fn refused(id: u64, from: TaskStatus, to: TaskStatus) -> BoardError {
    let allowed = allowed_from(from).to_vec();
    BoardError::Conflict {
        message: format!(
            "task {id} is {from}; it cannot go to {to} (allowed: {})",
            words(&allowed)
        ),
        allowed,
    }
}

#[cfg(test)]
#[path = "board_tests.rs"]
mod tests;
