//! The task board's records (migration 0020): tasks, their runs, their history,
//! the planner's questions and the attachments' record. Only rows here; what may
//! change when (the status table, plan edits only before Start) is the board's
//! (`tasks::board`), which changes a status by compare-and-set ([`Store::set_task_status`])
//! so two changes racing cannot both pass the table. Every change that has a history
//! event writes it in the same transaction and returns it, for the feed.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sqlx::any::AnyRow;
use sqlx::{AnyConnection, Row};

use super::{Store, StoreError, ThreadRole, now};
use crate::tasks::history::{TaskEvent, TaskEventKind};
use crate::tasks::status::TaskStatus;

/// A task as created.
#[derive(Debug, Clone)]
pub struct NewTask {
    pub title: String,
    pub description: String,
    pub review: bool,
    /// A principal's text.
    pub created_by: String,
    /// The task this one was delegated from.
    pub parent_id: Option<u64>,
    pub time_limit_secs: u64,
    pub model_call_limit: u64,
}

/// The completion report that ended a task's run (`completion_report`'s arguments,
/// or what Chorus wrote for a run that broke the contract).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskReport {
    pub status: ReportStatus,
    pub summary: String,
    pub output: String,
    #[serde(default)]
    pub blocked_reason: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Complete,
    Blocked,
    Failed,
    /// The run ended twice without a finishing call: Chorus wrote this report, its
    /// `output` the run's last text.
    ProtocolViolation,
}

/// One agent of a task's agent chain (the assignee first, then each delegate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainEntry {
    pub agent: String,
    /// The task it works on (a delegate's is the child task).
    pub task_id: u64,
    pub started_at: String,
    pub ended_at: Option<String>,
}

/// What an unfinished task waits on, and since when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WaitingOn {
    pub kind: WaitingKind,
    /// Which one, in words (the question, the approval's id, the child task, …).
    pub detail: String,
    pub since: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitingKind {
    Planner,
    Question,
    Approval,
    Delegate,
    Agent,
    Step,
    Person,
}

/// A change to a task's agent chain, made inside the write that stores it.
pub type ChainChange = Box<dyn FnOnce(&mut Vec<ChainEntry>) + Send>;

/// A task row.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    pub id: u64,
    pub title: String,
    pub description: String,
    pub status: TaskStatus,
    pub review: bool,
    pub status_since: String,
    pub created_at: String,
    pub updated_at: String,
    pub created_by: String,
    pub parent_id: Option<u64>,
    pub summary: Option<String>,
    pub requirements: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub steps: Vec<String>,
    pub assignee: Option<String>,
    pub blocked_reason: Option<String>,
    pub report: Option<TaskReport>,
    pub chain: Vec<ChainEntry>,
    /// The planner's thread (of `planner_agent`), once planning started.
    pub planner_thread: Option<u64>,
    pub planner_agent: Option<String>,
    pub time_limit_secs: u64,
    pub model_call_limit: u64,
}

/// The plan fields and the rest a person may edit (`PATCH /api/tasks/{id}`); `None`
/// leaves a field as it is, `Some(None)` clears a nullable one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PlanFields {
    pub title: Option<String>,
    pub description: Option<String>,
    pub review: Option<bool>,
    pub summary: Option<Option<String>>,
    pub requirements: Option<Vec<String>>,
    pub acceptance_criteria: Option<Vec<String>>,
    pub steps: Option<Vec<String>>,
    pub assignee: Option<Option<String>>,
}

impl PlanFields {
    /// Whether it changes any of the plan proper (editable only before Start).
    pub fn touches_plan(&self) -> bool {
        self.summary.is_some()
            || self.requirements.is_some()
            || self.acceptance_criteria.is_some()
            || self.steps.is_some()
            || self.assignee.is_some()
    }

    /// The names of the fields it sets, for the history.
    pub fn names(&self) -> Vec<&'static str> {
        [
            ("title", self.title.is_some()),
            ("description", self.description.is_some()),
            ("review", self.review.is_some()),
            ("summary", self.summary.is_some()),
            ("requirements", self.requirements.is_some()),
            ("acceptance_criteria", self.acceptance_criteria.is_some()),
            ("steps", self.steps.is_some()),
            ("assignee", self.assignee.is_some()),
        ]
        .into_iter()
        .filter(|(_, set)| *set)
        .map(|(name, _)| name)
        .collect()
    }
}

/// What `GET /api/tasks` filters by (all optional, all must hold).
#[derive(Debug, Clone, Default)]
pub struct TaskFilter {
    pub status: Option<TaskStatus>,
    /// The assignee, or the agent of any of its runs.
    pub agent: Option<String>,
    /// Text in the title or the description (case-insensitive).
    pub text: Option<String>,
}

/// A question as asked (the planner's `ask_questions`, a worker's `ask_question`):
/// the control tools' own shape, Claude Code's AskUserQuestion.
pub use chorus_proto::tools::{PlannerQuestion as NewQuestion, QuestionOption};

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuestionRecord {
    pub id: String,
    /// Which round of the planner's questions (1, 2, …): ids are unique within one.
    pub round: u32,
    pub question: String,
    pub options: Vec<QuestionOption>,
    pub multi_select: bool,
    pub asked_at: String,
    pub answer: Option<String>,
    pub answered_by: Option<String>,
    pub answered_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TaskAttachment {
    pub name: String,
    pub size: u64,
    pub uploaded_by: String,
    pub uploaded_at: String,
}

/// How a task's run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunOutcome {
    Planned,
    Asked,
    Completed,
    Blocked,
    Failed,
    Waiting,
    ProtocolViolation,
    Killed,
    Limit,
    /// Its thread failed.
    Error,
}

impl RunOutcome {
    pub const ALL: [RunOutcome; 10] = [
        RunOutcome::Planned,
        RunOutcome::Asked,
        RunOutcome::Completed,
        RunOutcome::Blocked,
        RunOutcome::Failed,
        RunOutcome::Waiting,
        RunOutcome::ProtocolViolation,
        RunOutcome::Killed,
        RunOutcome::Limit,
        RunOutcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            RunOutcome::Planned => "planned",
            RunOutcome::Asked => "asked",
            RunOutcome::Completed => "completed",
            RunOutcome::Blocked => "blocked",
            RunOutcome::Failed => "failed",
            RunOutcome::Waiting => "waiting",
            RunOutcome::ProtocolViolation => "protocol_violation",
            RunOutcome::Killed => "killed",
            RunOutcome::Limit => "limit",
            RunOutcome::Error => "error",
        }
    }

    pub fn parse(s: &str) -> Option<RunOutcome> {
        RunOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

/// One attempt at a task: the planner's or a worker's thread.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskRun {
    pub id: u64,
    #[serde(skip)]
    pub task_id: u64,
    pub role: ThreadRole,
    pub agent: String,
    pub backend: String,
    pub thread_id: Option<u64>,
    /// The finishing call the run made (the role tool and its arguments), if any.
    #[serde(skip)]
    pub finishing: Option<Value>,
    pub outcome: Option<RunOutcome>,
    pub report: Option<Value>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// The agents from the root task down to this run's (loop and depth checks).
    #[serde(skip)]
    pub chain: Vec<String>,
    /// The run whose `ask_agent` this run answers.
    #[serde(skip)]
    pub asked_by: Option<u64>,
    /// The run was sent the one follow-up and has made no control call since.
    #[serde(skip)]
    pub followed_up: bool,
}

fn corrupt(column: &'static str, value: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        column,
        value: value.to_string(),
    }
}

fn json_text<T: Serialize>(column: &'static str, value: &T) -> Result<String, StoreError> {
    serde_json::to_string(value).map_err(|e| corrupt(column, e))
}

fn from_json<T: serde::de::DeserializeOwned>(
    column: &'static str,
    text: &str,
) -> Result<T, StoreError> {
    serde_json::from_str(text).map_err(|e| corrupt(column, format!("{e}: {text}")))
}

fn opt_json<T: serde::de::DeserializeOwned>(
    column: &'static str,
    text: Option<String>,
) -> Result<Option<T>, StoreError> {
    text.map(|t| from_json(column, &t)).transpose()
}

const TASK_COLUMNS: &str = "id, title, description, status, review, status_since, created_at, \
     updated_at, created_by, parent_id, summary, requirements, acceptance_criteria, steps, \
     assignee, blocked_reason, report, chain, planner_thread, planner_agent, \
     time_limit_secs, model_call_limit";

fn task_of(row: &AnyRow) -> Result<TaskRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(TaskRecord {
        id: row.try_get::<i64, _>("id")? as u64,
        title: row.try_get("title")?,
        description: row.try_get("description")?,
        status: TaskStatus::parse(&status).ok_or_else(|| corrupt("tasks.status", &status))?,
        review: row.try_get::<i64, _>("review")? != 0,
        status_since: row.try_get("status_since")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        created_by: row.try_get("created_by")?,
        parent_id: row
            .try_get::<Option<i64>, _>("parent_id")?
            .map(|v| v as u64),
        summary: row.try_get("summary")?,
        requirements: from_json(
            "tasks.requirements",
            &row.try_get::<String, _>("requirements")?,
        )?,
        acceptance_criteria: from_json(
            "tasks.acceptance_criteria",
            &row.try_get::<String, _>("acceptance_criteria")?,
        )?,
        steps: from_json("tasks.steps", &row.try_get::<String, _>("steps")?)?,
        assignee: row.try_get("assignee")?,
        blocked_reason: row.try_get("blocked_reason")?,
        report: opt_json("tasks.report", row.try_get("report")?)?,
        chain: from_json("tasks.chain", &row.try_get::<String, _>("chain")?)?,
        planner_thread: row
            .try_get::<Option<i64>, _>("planner_thread")?
            .map(|v| v as u64),
        planner_agent: row.try_get("planner_agent")?,
        time_limit_secs: row.try_get::<i64, _>("time_limit_secs")? as u64,
        model_call_limit: row.try_get::<i64, _>("model_call_limit")? as u64,
    })
}

fn event_of(row: &AnyRow) -> Result<TaskEvent, StoreError> {
    let kind: String = row.try_get("kind")?;
    Ok(TaskEvent {
        id: row.try_get::<i64, _>("id")? as u64,
        task_id: row.try_get::<i64, _>("task_id")? as u64,
        at: row.try_get("at")?,
        kind: TaskEventKind::parse(&kind).ok_or_else(|| corrupt("task_events.kind", &kind))?,
        by: row.try_get("actor")?,
        data: from_json("task_events.data", &row.try_get::<String, _>("data")?)?,
    })
}

/// The backend of the latest run of a task run's thread, as `run_backend`.
macro_rules! latest_backend {
    () => {
        "(SELECT runs.backend FROM runs WHERE runs.agent_name = task_runs.agent_name \
         AND runs.thread_id = task_runs.thread_id \
         ORDER BY runs.created_at DESC, runs.attempt DESC LIMIT 1) AS run_backend"
    };
}

fn run_of(row: &AnyRow) -> Result<TaskRun, StoreError> {
    let role: String = row.try_get("role")?;
    let outcome: Option<String> = row.try_get("outcome")?;
    Ok(TaskRun {
        id: row.try_get::<i64, _>("id")? as u64,
        task_id: row.try_get::<i64, _>("task_id")? as u64,
        role: ThreadRole::parse(&role).ok_or_else(|| corrupt("task_runs.role", &role))?,
        agent: row.try_get("agent_name")?,
        // What ran the thread's latest run (`runs.backend`); the agent's when the
        // task run was recorded, before any run.
        backend: row
            .try_get::<Option<String>, _>("run_backend")?
            .map_or_else(|| row.try_get("backend"), Ok)?,
        thread_id: row
            .try_get::<Option<i64>, _>("thread_id")?
            .map(|v| v as u64),
        finishing: opt_json("task_runs.finishing", row.try_get("finishing")?)?,
        outcome: outcome
            .map(|o| RunOutcome::parse(&o).ok_or_else(|| corrupt("task_runs.outcome", &o)))
            .transpose()?,
        report: opt_json("task_runs.report", row.try_get("report")?)?,
        input_tokens: row.try_get::<i64, _>("input_tokens")? as u64,
        output_tokens: row.try_get::<i64, _>("output_tokens")? as u64,
        model_calls: row.try_get::<i64, _>("model_calls")? as u64,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        chain: from_json("task_runs.chain", &row.try_get::<String, _>("chain")?)?,
        asked_by: row.try_get::<Option<i64>, _>("asked_by")?.map(|v| v as u64),
        followed_up: row.try_get::<i64, _>("followed_up")? != 0,
    })
}

/// Appends one history event inside a write transaction.
async fn append_event(
    tx: &mut AnyConnection,
    task_id: u64,
    kind: TaskEventKind,
    by: &str,
    data: &Value,
) -> Result<TaskEvent, StoreError> {
    let at = now();
    let text = json_text("task_events.data", data)?;
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO task_events (task_id, at, kind, actor, data) VALUES ($1, $2, $3, $4, $5) \
         RETURNING id",
    )
    .bind(task_id as i64)
    .bind(&at)
    .bind(kind.as_str())
    .bind(by)
    .bind(&text)
    .fetch_one(&mut *tx)
    .await?;
    Ok(TaskEvent {
        id: id as u64,
        task_id,
        at,
        kind,
        by: by.to_string(),
        data: data.clone(),
    })
}

/// `LIKE` pattern for text anywhere, with the pattern characters taken literally.
fn contains_pattern(text: &str) -> String {
    let mut pattern = String::from("%");
    for c in text.to_lowercase().chars() {
        if matches!(c, '%' | '_' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('%');
    pattern
}

impl Store {
    /// Inserts a task in `status` and its `created` event (data: title and status).
    pub async fn insert_task(
        &self,
        task: &NewTask,
        status: TaskStatus,
    ) -> Result<(u64, TaskEvent), StoreError> {
        let task = task.clone();
        self.write(move |tx| {
            Box::pin(async move {
                let at = now();
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO tasks (title, description, status, review, status_since, \
                     created_at, updated_at, created_by, parent_id, time_limit_secs, \
                     model_call_limit) VALUES ($1, $2, $3, $4, $5, $5, $5, $6, $7, $8, $9) \
                     RETURNING id",
                )
                .bind(&task.title)
                .bind(&task.description)
                .bind(status.as_str())
                .bind(i64::from(task.review))
                .bind(&at)
                .bind(&task.created_by)
                .bind(task.parent_id.map(|p| p as i64))
                .bind(task.time_limit_secs as i64)
                .bind(task.model_call_limit as i64)
                .fetch_one(&mut *tx)
                .await?;
                let data = serde_json::json!({
                    "title": task.title,
                    "status": status,
                    "parent_id": task.parent_id,
                });
                let event = append_event(
                    tx,
                    id as u64,
                    TaskEventKind::Created,
                    &task.created_by,
                    &data,
                )
                .await?;
                Ok((id as u64, event))
            })
        })
        .await
    }

    pub async fn task(&self, id: u64) -> Result<Option<TaskRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TASK_COLUMNS} FROM tasks WHERE id = $1"
        )))
        .bind(id as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(task_of).transpose()
    }

    /// Tasks matching `filter`, the newest first.
    pub async fn tasks(&self, filter: &TaskFilter) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {TASK_COLUMNS} FROM tasks t WHERE ($1 IS NULL OR status = $1) \
             AND ($2 IS NULL OR assignee = $2 OR EXISTS \
                 (SELECT 1 FROM task_runs r WHERE r.task_id = t.id AND r.agent_name = $2)) \
             AND ($3 IS NULL OR LOWER(title) LIKE $3 ESCAPE '\\' \
                  OR LOWER(description) LIKE $3 ESCAPE '\\') \
             ORDER BY id DESC"
        )))
        .bind(filter.status.map(TaskStatus::as_str))
        .bind(filter.agent.as_deref())
        .bind(filter.text.as_deref().map(contains_pattern))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(task_of).collect()
    }

    /// Sets the fields `fields` names and records `plan_edited` (data: the fields'
    /// names). With `only_before_start`, only while the task has not started (its
    /// status `planning`, `awaiting_input` or `planned`). `None`: no such task (or
    /// it has started, when that was asked).
    pub async fn update_task_fields(
        &self,
        id: u64,
        fields: &PlanFields,
        only_before_start: bool,
        by: &str,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let fields = fields.clone();
        let by = by.to_string();
        let lists = [
            fields.requirements.as_ref(),
            fields.acceptance_criteria.as_ref(),
            fields.steps.as_ref(),
        ]
        .map(|l| l.map(|l| json_text("tasks.plan", l)).transpose());
        let [requirements, criteria, steps] = lists;
        let (requirements, criteria, steps) = (requirements?, criteria?, steps?);
        self.write(move |tx| {
            Box::pin(async move {
                // Each field: set flag, value ($n IS 1 → set).
                let updated = sqlx::query(
                    "UPDATE tasks SET updated_at = $2, \
                     title = COALESCE($3, title), \
                     description = COALESCE($4, description), \
                     review = COALESCE($5, review), \
                     summary = CASE WHEN $6 = 1 THEN $7 ELSE summary END, \
                     requirements = COALESCE($8, requirements), \
                     acceptance_criteria = COALESCE($9, acceptance_criteria), \
                     steps = COALESCE($10, steps), \
                     assignee = CASE WHEN $11 = 1 THEN $12 ELSE assignee END \
                     WHERE id = $1 AND ($13 = 0 OR status IN ('planning', 'awaiting_input', 'planned'))",
                )
                .bind(id as i64)
                .bind(now())
                .bind(&fields.title)
                .bind(&fields.description)
                .bind(fields.review.map(i64::from))
                .bind(i64::from(fields.summary.is_some()))
                .bind(fields.summary.clone().flatten())
                .bind(&requirements)
                .bind(&criteria)
                .bind(&steps)
                .bind(i64::from(fields.assignee.is_some()))
                .bind(fields.assignee.clone().flatten())
                .bind(i64::from(only_before_start))
                .execute(&mut *tx)
                .await?;
                if updated.rows_affected() == 0 {
                    return Ok(None);
                }
                let data = serde_json::json!({ "fields": fields.names() });
                Ok(Some(
                    append_event(tx, id, TaskEventKind::PlanEdited, &by, &data).await?,
                ))
            })
        })
        .await
    }

    /// Moves a task from `from` to `to` if it is still in `from` (compare-and-set),
    /// setting `blocked_reason` (kept only while blocked) and recording
    /// `status_changed` (data: from, to, reason). `None`: it was not in `from`.
    pub async fn set_task_status(
        &self,
        id: u64,
        from: TaskStatus,
        to: TaskStatus,
        blocked_reason: Option<String>,
        by: &str,
        reason: Option<String>,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let by = by.to_string();
        self.write(move |tx| {
            Box::pin(async move {
                let at = now();
                let updated = sqlx::query(
                    "UPDATE tasks SET status = $3, status_since = $4, updated_at = $4, \
                     blocked_reason = $5 \
                     WHERE id = $1 AND status = $2",
                )
                .bind(id as i64)
                .bind(from.as_str())
                .bind(to.as_str())
                .bind(&at)
                .bind(blocked_reason.filter(|_| to == TaskStatus::Blocked))
                .execute(&mut *tx)
                .await?;
                if updated.rows_affected() == 0 {
                    return Ok(None);
                }
                let data = serde_json::json!({ "from": from, "to": to, "reason": reason });
                Ok(Some(
                    append_event(tx, id, TaskEventKind::StatusChanged, &by, &data).await?,
                ))
            })
        })
        .await
    }

    /// Sets one of the task's JSON-or-null columns (`report`) or the
    /// planner's thread. `false`: no such task.
    pub async fn set_task_report(
        &self,
        id: u64,
        report: Option<&TaskReport>,
    ) -> Result<bool, StoreError> {
        let text = report.map(|r| json_text("tasks.report", r)).transpose()?;
        self.set_task_column(id, "report", text).await
    }

    async fn set_task_column(
        &self,
        id: u64,
        column: &'static str,
        value: Option<String>,
    ) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "UPDATE tasks SET {column} = $2, updated_at = $3 WHERE id = $1"
                )))
                .bind(id as i64)
                .bind(value)
                .bind(now()),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records the planner's thread. `false`: no such task.
    pub async fn set_task_planner(
        &self,
        id: u64,
        agent: &str,
        thread_id: u64,
    ) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE tasks SET planner_agent = $2, planner_thread = $3, updated_at = $4 \
                     WHERE id = $1",
                )
                .bind(id as i64)
                .bind(agent.to_string())
                .bind(thread_id as i64)
                .bind(now()),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Changes the task's agent chain with `change` (read and written in one
    /// transaction) and records `kind` (data: `data` with the new chain). `None`: no
    /// such task.
    pub async fn change_task_chain(
        &self,
        id: u64,
        change: ChainChange,
        kind: TaskEventKind,
        by: &str,
        data: Value,
    ) -> Result<Option<(Vec<ChainEntry>, TaskEvent)>, StoreError> {
        let by = by.to_string();
        self.write(move |tx| {
            Box::pin(async move {
                let Some(text): Option<String> =
                    sqlx::query_scalar("SELECT chain FROM tasks WHERE id = $1")
                        .bind(id as i64)
                        .fetch_optional(&mut *tx)
                        .await?
                else {
                    return Ok(None);
                };
                let mut chain: Vec<ChainEntry> = from_json("tasks.chain", &text)?;
                change(&mut chain);
                sqlx::query("UPDATE tasks SET chain = $2, updated_at = $3 WHERE id = $1")
                    .bind(id as i64)
                    .bind(json_text("tasks.chain", &chain)?)
                    .bind(now())
                    .execute(&mut *tx)
                    .await?;
                let mut data = data;
                if let Value::Object(map) = &mut data {
                    map.insert(
                        "chain".into(),
                        serde_json::to_value(&chain).unwrap_or_default(),
                    );
                }
                let event = append_event(tx, id, kind, &by, &data).await?;
                Ok(Some((chain, event)))
            })
        })
        .await
    }

    /// Deletes a task and everything recorded of it (its child tasks stay, unlinked).
    /// `false`: no such task.
    pub async fn delete_task(&self, id: u64) -> Result<bool, StoreError> {
        self.write(move |tx| {
            Box::pin(async move {
                // Postgres and SQLite both cascade; the children are unlinked first
                // explicitly so neither depends on ON DELETE SET NULL ordering.
                sqlx::query("UPDATE tasks SET parent_id = NULL WHERE parent_id = $1")
                    .bind(id as i64)
                    .execute(&mut *tx)
                    .await?;
                for table in [
                    "task_events",
                    "task_questions",
                    "task_attachments",
                    "task_runs",
                ] {
                    sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DELETE FROM {table} WHERE task_id = $1"
                    )))
                    .bind(id as i64)
                    .execute(&mut *tx)
                    .await?;
                }
                let done = sqlx::query("DELETE FROM tasks WHERE id = $1")
                    .bind(id as i64)
                    .execute(&mut *tx)
                    .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    /// Appends an event to a task's history. `None`: no such task.
    pub async fn record_task_event(
        &self,
        id: u64,
        kind: TaskEventKind,
        by: &str,
        data: Value,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let by = by.to_string();
        self.write(move |tx| {
            Box::pin(async move {
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM tasks WHERE id = $1")
                    .bind(id as i64)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Ok(None);
                }
                Ok(Some(append_event(tx, id, kind, &by, &data).await?))
            })
        })
        .await
    }

    /// A task's history, oldest first.
    pub async fn task_events(&self, id: u64) -> Result<Vec<TaskEvent>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, task_id, at, kind, actor, data FROM task_events WHERE task_id = $1 \
             ORDER BY id",
        )
        .bind(id as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(event_of).collect()
    }

    /// Adds a round of questions (the next round number) and records
    /// `question_asked` (data: round and ids). `None`: no such task.
    pub async fn add_task_questions(
        &self,
        id: u64,
        questions: &[NewQuestion],
        by: &str,
    ) -> Result<Option<(u32, TaskEvent)>, StoreError> {
        let questions = questions.to_vec();
        let by = by.to_string();
        self.write(move |tx| {
            Box::pin(async move {
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM tasks WHERE id = $1")
                    .bind(id as i64)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Ok(None);
                }
                let last: Option<i64> =
                    sqlx::query_scalar("SELECT MAX(round) FROM task_questions WHERE task_id = $1")
                        .bind(id as i64)
                        .fetch_one(&mut *tx)
                        .await?;
                let round = last.unwrap_or(0) + 1;
                let at = now();
                for (position, q) in questions.iter().enumerate() {
                    sqlx::query(
                        "INSERT INTO task_questions (task_id, round, question_id, position, \
                         question, options, multi_select, asked_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
                    )
                    .bind(id as i64)
                    .bind(round)
                    .bind(&q.id)
                    .bind(position as i64)
                    .bind(&q.question)
                    .bind(json_text("task_questions.options", &q.options)?)
                    .bind(i64::from(q.multi_select))
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                }
                let ids: Vec<&str> = questions.iter().map(|q| q.id.as_str()).collect();
                let data = serde_json::json!({ "round": round, "ids": ids });
                let event = append_event(tx, id, TaskEventKind::QuestionAsked, &by, &data).await?;
                Ok(Some((round as u32, event)))
            })
        })
        .await
    }

    /// Every question of a task, by round and as asked.
    pub async fn task_questions(&self, id: u64) -> Result<Vec<QuestionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT question_id, round, question, options, multi_select, asked_at, answer, \
             answered_by, answered_at FROM task_questions WHERE task_id = $1 \
             ORDER BY round, position",
        )
        .bind(id as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(QuestionRecord {
                    id: row.try_get("question_id")?,
                    round: row.try_get::<i64, _>("round")? as u32,
                    question: row.try_get("question")?,
                    options: from_json(
                        "task_questions.options",
                        &row.try_get::<String, _>("options")?,
                    )?,
                    multi_select: row.try_get::<i64, _>("multi_select")? != 0,
                    asked_at: row.try_get("asked_at")?,
                    answer: row.try_get("answer")?,
                    answered_by: row.try_get("answered_by")?,
                    answered_at: row.try_get("answered_at")?,
                })
            })
            .collect()
    }

    /// Answers questions of `round` that are still open, all or none, and records
    /// `question_answered` (data: round and ids). `None`: one of them is not an
    /// open question of that round (nothing was written).
    pub async fn answer_task_questions(
        &self,
        id: u64,
        round: u32,
        answers: Vec<(String, String)>,
        by: &str,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let by = by.to_string();
        self.write(move |tx| {
            Box::pin(async move {
                let at = now();
                for (question, answer) in &answers {
                    let done = sqlx::query(
                        "UPDATE task_questions SET answer = $4, answered_by = $5, \
                         answered_at = $6 WHERE task_id = $1 AND round = $2 \
                         AND question_id = $3 AND answer IS NULL",
                    )
                    .bind(id as i64)
                    .bind(i64::from(round))
                    .bind(question)
                    .bind(answer)
                    .bind(&by)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                    if done.rows_affected() == 0 {
                        // Rolls back the answers written before it.
                        return Err(StoreError::Conflict(format!(
                            "question '{question}' of round {round} is not open"
                        )));
                    }
                }
                let ids: Vec<&str> = answers.iter().map(|(q, _)| q.as_str()).collect();
                let data = serde_json::json!({ "round": round, "ids": ids });
                Ok(Some(
                    append_event(tx, id, TaskEventKind::QuestionAnswered, &by, &data).await?,
                ))
            })
        })
        .await
        .or_else(|e| match e {
            StoreError::Conflict(_) => Ok(None),
            other => Err(other),
        })
    }

    /// Records an attachment (replacing one of the same name) and `attachment_added`
    /// (data: name and size). `None`: no such task.
    pub async fn put_task_attachment(
        &self,
        id: u64,
        name: &str,
        size: u64,
        by: &str,
    ) -> Result<Option<TaskEvent>, StoreError> {
        let (name, by) = (name.to_string(), by.to_string());
        self.write(move |tx| {
            Box::pin(async move {
                let exists: Option<i64> = sqlx::query_scalar("SELECT id FROM tasks WHERE id = $1")
                    .bind(id as i64)
                    .fetch_optional(&mut *tx)
                    .await?;
                if exists.is_none() {
                    return Ok(None);
                }
                sqlx::query("DELETE FROM task_attachments WHERE task_id = $1 AND name = $2")
                    .bind(id as i64)
                    .bind(&name)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(
                    "INSERT INTO task_attachments (task_id, name, size, uploaded_by, uploaded_at) \
                     VALUES ($1, $2, $3, $4, $5)",
                )
                .bind(id as i64)
                .bind(&name)
                .bind(size as i64)
                .bind(&by)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                let data = serde_json::json!({ "name": name, "size": size });
                Ok(Some(
                    append_event(tx, id, TaskEventKind::AttachmentAdded, &by, &data).await?,
                ))
            })
        })
        .await
    }

    pub async fn task_attachments(&self, id: u64) -> Result<Vec<TaskAttachment>, StoreError> {
        let rows = sqlx::query(
            "SELECT name, size, uploaded_by, uploaded_at FROM task_attachments \
             WHERE task_id = $1 ORDER BY name",
        )
        .bind(id as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(TaskAttachment {
                    name: row.try_get("name")?,
                    size: row.try_get::<i64, _>("size")? as u64,
                    uploaded_by: row.try_get("uploaded_by")?,
                    uploaded_at: row.try_get("uploaded_at")?,
                })
            })
            .collect()
    }

    /// Records a run of a task; returns its id.
    pub async fn insert_task_run(
        &self,
        task_id: u64,
        role: ThreadRole,
        agent: &str,
        backend: &str,
        thread_id: Option<u64>,
    ) -> Result<u64, StoreError> {
        let (agent, backend) = (agent.to_string(), backend.to_string());
        self.write(move |tx| {
            Box::pin(async move {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO task_runs (task_id, role, agent_name, backend, thread_id, \
                     started_at) VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                )
                .bind(task_id as i64)
                .bind(role.as_str())
                .bind(&agent)
                .bind(&backend)
                .bind(thread_id.map(|t| t as i64))
                .bind(now())
                .fetch_one(&mut *tx)
                .await?;
                Ok(id as u64)
            })
        })
        .await
    }

    /// Records the control call of a run's current turn (`None` clears it once the
    /// turn's end is applied). `false`: no such run.
    pub async fn set_task_run_finishing(
        &self,
        run: u64,
        finishing: Option<&Value>,
    ) -> Result<bool, StoreError> {
        let text = finishing
            .map(|f| json_text("task_runs.finishing", f))
            .transpose()?;
        let done = self
            .execute(
                sqlx::query("UPDATE task_runs SET finishing = $2 WHERE id = $1")
                    .bind(run as i64)
                    .bind(text),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Ends a run that is still going. `false`: no such run, or it had ended.
    pub async fn end_task_run(
        &self,
        run: u64,
        outcome: RunOutcome,
        report: Option<&Value>,
        usage: (u64, u64, u64),
    ) -> Result<bool, StoreError> {
        let report = report
            .map(|r| json_text("task_runs.report", r))
            .transpose()?;
        let (input, output, calls) = usage;
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE task_runs SET outcome = $2, report = $3, input_tokens = $4, \
                     output_tokens = $5, model_calls = $6, ended_at = $7 \
                     WHERE id = $1 AND ended_at IS NULL",
                )
                .bind(run as i64)
                .bind(outcome.as_str())
                .bind(report)
                .bind(input as i64)
                .bind(output as i64)
                .bind(calls as i64)
                .bind(now()),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// A task's runs, oldest first.
    pub async fn task_runs(&self, task_id: u64) -> Result<Vec<TaskRun>, StoreError> {
        self.task_runs_where("task_id = $1", task_id as i64).await
    }

    pub async fn task_run(&self, run: u64) -> Result<Option<TaskRun>, StoreError> {
        Ok(self
            .task_runs_where("id = $1", run as i64)
            .await?
            .into_iter()
            .next())
    }

    /// The task run of an agent's thread (the newest, when several were).
    pub async fn task_run_of_thread(
        &self,
        agent: &str,
        thread_id: u64,
    ) -> Result<Option<TaskRun>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT task_runs.*, ",
            latest_backend!(),
            " FROM task_runs WHERE agent_name = $1 AND thread_id = $2 \
             ORDER BY id DESC LIMIT 1"
        ))
        .bind(agent)
        .bind(thread_id as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_of).transpose()
    }

    async fn task_runs_where(
        &self,
        condition: &'static str,
        value: i64,
    ) -> Result<Vec<TaskRun>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT task_runs.*, {} FROM task_runs WHERE {condition} ORDER BY id",
            latest_backend!()
        )))
        .bind(value)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_of).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_closed_sets_are_one_word_each() {
        for outcome in RunOutcome::ALL {
            assert_eq!(RunOutcome::parse(outcome.as_str()), Some(outcome));
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
        }
    }

    #[test]
    fn text_search_takes_pattern_characters_literally() {
        assert_eq!(contains_pattern("50%_a\\B"), "%50\\%\\_a\\\\b%");
    }
}
