//! Threads, their messages and their step history.

use chorus_proto::domain::{
    ChatMessage, Failure, FailureKind, Role, StepEnded, StepKind, StepStarted, ToolCall, Usage,
};
use chorus_proto::tools::RunsIn;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::messages::insert_message;
use super::run_events::{RunEvent, ThreadEvent};
use super::runs::RunMark;
use super::{Store, StoreError, now};
use crate::principal::Principal;

/// The columns `message_from_row` reads (a macro, so queries stay literal strings).
macro_rules! message_columns {
    () => {
        "id, position, role, content, tool_calls, tool_call_id, tool_name, is_error, created_at"
    };
}
pub(super) use message_columns;

/// Longest thread summary, in characters.
const SUMMARY_CHARS: usize = 80;

/// One line saying what a thread is about: the first non-empty line of its first
/// message, cut to [`SUMMARY_CHARS`].
pub fn summary_of(content: &str) -> String {
    let line = content
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    if line.chars().count() <= SUMMARY_CHARS {
        return line.to_string();
    }
    let cut: String = line.chars().take(SUMMARY_CHARS - 1).collect();
    format!("{}…", cut.trim_end())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    Running,
    WaitingForPermission,
    Idle,
    Completed,
    Failed,
    /// Ended by a person (`DELETE …/threads/{id}`); its history so far is kept.
    Killed,
}

impl ThreadStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadStatus::Running => "running",
            ThreadStatus::WaitingForPermission => "waiting_for_permission",
            ThreadStatus::Idle => "idle",
            ThreadStatus::Completed => "completed",
            ThreadStatus::Failed => "failed",
            ThreadStatus::Killed => "killed",
        }
    }

    fn parse(s: &str) -> Option<ThreadStatus> {
        Some(match s {
            "running" => ThreadStatus::Running,
            "waiting_for_permission" => ThreadStatus::WaitingForPermission,
            "idle" => ThreadStatus::Idle,
            "completed" => ThreadStatus::Completed,
            "failed" => ThreadStatus::Failed,
            "killed" => ThreadStatus::Killed,
            _ => return None,
        })
    }

    pub fn is_finished(self) -> bool {
        matches!(
            self,
            ThreadStatus::Completed | ThreadStatus::Failed | ThreadStatus::Killed
        )
    }
}

/// A thread's part in a task (`threads.role`; a chat thread has none): what its
/// runs are offered beside the agent's tools and how its turns must end are the
/// task engine's (`runs::roles`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ThreadRole {
    /// Turns a task into a plan, or asks about it first.
    Planner,
    /// Works a started task and ends with a report.
    Worker,
    /// Answers another agent's `ask_agent`.
    Answerer,
}

impl ThreadRole {
    pub fn as_str(self) -> &'static str {
        match self {
            ThreadRole::Planner => "planner",
            ThreadRole::Worker => "worker",
            ThreadRole::Answerer => "answerer",
        }
    }

    pub fn parse(s: &str) -> Option<ThreadRole> {
        Some(match s {
            "planner" => ThreadRole::Planner,
            "worker" => ThreadRole::Worker,
            "answerer" => ThreadRole::Answerer,
            _ => return None,
        })
    }
}

impl std::fmt::Display for ThreadRole {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadRecord {
    pub agent_name: String,
    pub id: u64,
    pub status: ThreadStatus,
    pub created_at: String,
    pub updated_at: String,
    pub ended_at: Option<String>,
    /// Why it failed, for people.
    pub error: Option<String>,
    /// How it failed, for programs; `None` unless it failed (and for threads that
    /// failed before kinds were recorded).
    pub failure_kind: Option<FailureKind>,
    /// Who started the thread (stored as its text form: `api`, `discord:42`, …).
    pub created_by: Option<Principal>,
    /// What the thread is about, in one line.
    pub summary: Option<String>,
    /// The ended thread this one continues.
    pub continued_from: Option<u64>,
    /// Its part in a task; `None` for a chat thread.
    pub role: Option<ThreadRole>,
    /// The directory under the agent's workspace its runs work in (`tasks/7`);
    /// `None`: the whole workspace.
    pub workdir: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredMessage {
    /// Stable for the message's life; a reply names it (`reply_to`).
    pub id: u64,
    pub message: ChatMessage,
    pub created_at: String,
    /// A user message sent while a run was going that no model has seen yet.
    pub pending: bool,
}

/// How far a thread has got: its steps so far, and its open step (what it is doing
/// now), if any.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Progress {
    pub step_number: u32,
    pub current_step: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepRecord {
    pub number: u32,
    pub kind: StepKind,
    pub description: String,
    pub started_at: String,
    pub ended_at: Option<String>,
    pub duration_ms: Option<u64>,
    pub failed: bool,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    /// Where a tool step's tool runs (`None`: not a tool that ran, or a step from
    /// before this was stored).
    pub runs_in: Option<RunsIn>,
}

fn thread_from_row(row: &AnyRow) -> Result<ThreadRecord, StoreError> {
    let status: String = row.try_get("status")?;
    let failure_kind = match row.try_get::<Option<String>, _>("failure_kind")? {
        Some(kind) => Some(FailureKind::parse(&kind).ok_or(StoreError::Corrupt {
            column: "threads.failure_kind",
            value: kind,
        })?),
        None => None,
    };
    Ok(ThreadRecord {
        agent_name: row.try_get("agent_name")?,
        id: row.try_get::<i64, _>("id")? as u64,
        status: ThreadStatus::parse(&status).ok_or(StoreError::Corrupt {
            column: "threads.status",
            value: status,
        })?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        ended_at: row.try_get("ended_at")?,
        error: row.try_get("error")?,
        failure_kind,
        created_by: row
            .try_get::<Option<String>, _>("created_by")?
            .map(|text| Principal::parse(&text)),
        summary: row.try_get("summary")?,
        continued_from: row
            .try_get::<Option<i64>, _>("continued_from")?
            .map(|id| id as u64),
        role: match row.try_get::<Option<String>, _>("role")? {
            Some(role) => Some(ThreadRole::parse(&role).ok_or(StoreError::Corrupt {
                column: "threads.role",
                value: role,
            })?),
            None => None,
        },
        workdir: row.try_get("workdir")?,
    })
}

pub(super) fn message_from_row(row: &AnyRow) -> Result<StoredMessage, StoreError> {
    let role: String = row.try_get("role")?;
    let tool_calls: Option<String> = row.try_get("tool_calls")?;
    let tool_calls: Vec<ToolCall> = match tool_calls {
        Some(json) => serde_json::from_str(&json).map_err(|_| StoreError::Corrupt {
            column: "messages.tool_calls",
            value: json,
        })?,
        None => Vec::new(),
    };
    Ok(StoredMessage {
        id: row.try_get::<i64, _>("id")? as u64,
        pending: row.try_get::<Option<i64>, _>("position")?.is_none(),
        message: ChatMessage {
            role: Role::parse(&role).ok_or(StoreError::Corrupt {
                column: "messages.role",
                value: role,
            })?,
            content: row.try_get("content")?,
            tool_calls,
            tool_call_id: row.try_get("tool_call_id")?,
            tool_name: row.try_get("tool_name")?,
            is_error: row.try_get::<i64, _>("is_error")? != 0,
        },
        created_at: row.try_get("created_at")?,
    })
}

fn step_from_row(row: &AnyRow) -> Result<StepRecord, StoreError> {
    let kind: String = row.try_get("kind")?;
    let opt_u64 = |col: &str| -> Result<Option<u64>, StoreError> {
        Ok(row.try_get::<Option<i64>, _>(col)?.map(|v| v as u64))
    };
    Ok(StepRecord {
        number: row.try_get::<i64, _>("step_number")? as u32,
        kind: StepKind::parse(&kind).ok_or(StoreError::Corrupt {
            column: "thread_steps.kind",
            value: kind,
        })?,
        description: row.try_get("description")?,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        duration_ms: opt_u64("duration_ms")?,
        failed: row.try_get::<i64, _>("failed")? != 0,
        input_tokens: opt_u64("input_tokens")?,
        output_tokens: opt_u64("output_tokens")?,
        runs_in: match row.try_get::<Option<String>, _>("runs_in")? {
            Some(text) => Some(RunsIn::parse(&text).ok_or(StoreError::Corrupt {
                column: "thread_steps.runs_in",
                value: text,
            })?),
            None => None,
        },
    })
}

impl Store {
    /// Creates a running thread with its first user message, started by `user`
    /// (continuing the ended thread `continued_from`, if set); returns the thread's
    /// id and the message's.
    pub async fn start_thread(
        &self,
        agent: &str,
        first: &ChatMessage,
        user: &str,
        continued_from: Option<u64>,
    ) -> Result<(u64, u64), StoreError> {
        self.create_thread(
            agent,
            std::slice::from_ref(first),
            user,
            ThreadStatus::Running,
            &summary_of(&first.content),
            continued_from,
        )
        .await
    }

    /// Creates a running thread with the role `role` in a task, working in
    /// `workdir` (relative to the agent's workspace) when set, with its first user
    /// message; returns the thread's id and the message's.
    pub async fn start_role_thread(
        &self,
        agent: &str,
        first: &ChatMessage,
        user: &str,
        role: ThreadRole,
        workdir: Option<&str>,
    ) -> Result<(u64, u64), StoreError> {
        let at = now();
        let agent = agent.to_owned();
        let first = first.clone();
        let user = user.to_owned();
        let workdir = workdir.map(str::to_owned);
        self.write(move |tx| {
            Box::pin(async move {
                let summary = summary_of(&first.content);
                let id = new_thread(
                    tx,
                    &agent,
                    ThreadStatus::Running,
                    &at,
                    &user,
                    &summary,
                    None,
                )
                .await?;
                sqlx::query(
                    "UPDATE threads SET role = $3, workdir = $4 WHERE agent_name = $1 AND id = $2",
                )
                .bind(&agent)
                .bind(id as i64)
                .bind(role.as_str())
                .bind(&workdir)
                .execute(&mut *tx)
                .await?;
                let message = insert_message(tx, &agent, id, &first, &at, true).await?;
                Ok((id, message))
            })
        })
        .await
    }

    /// Makes an ended thread with a role going again (its next turn: a task's
    /// answer, a follow-up). A chat thread that ended stays ended (a reply to it
    /// starts a continuation); so does one that is not ended. Returns whether the
    /// thread was reopened.
    pub async fn reopen_role_thread(&self, agent: &str, id: u64) -> Result<bool, StoreError> {
        let at = now();
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE threads SET status = 'running', error = NULL, failure_kind = NULL, \
                     ended_at = NULL, updated_at = $3 WHERE agent_name = $1 AND id = $2 \
                     AND role IS NOT NULL AND status IN ('completed', 'failed', 'killed')",
                )
                .bind(&agent)
                .bind(id as i64)
                .bind(&at)
                .execute(&mut *tx)
                .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    /// Creates a thread in `status` holding `messages` (a continuation's seed, a
    /// restored session); returns its id and its last message's.
    pub async fn create_thread(
        &self,
        agent: &str,
        messages: &[ChatMessage],
        user: &str,
        status: ThreadStatus,
        summary: &str,
        continued_from: Option<u64>,
    ) -> Result<(u64, u64), StoreError> {
        let at = now();
        let agent = agent.to_owned();
        let messages = messages.to_vec();
        let user = user.to_owned();
        let summary = summary.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let id =
                    new_thread(tx, &agent, status, &at, &user, &summary, continued_from).await?;
                let mut last = 0;
                for message in messages {
                    last = insert_message(tx, &agent, id, &message, &at, true).await?;
                }
                Ok((id, last))
            })
        })
        .await
    }

    /// Creates a running continuation of the ended thread `from`: `note` (what was
    /// left out) if any, then copies of `from`'s messages from the one with id
    /// `first_kept` on, in their order (none when `None`), then the user message
    /// `content`. The copy is one statement, whatever the length. Returns the
    /// thread's id and the user message's.
    #[allow(clippy::too_many_arguments)]
    pub async fn create_continuation(
        &self,
        agent: &str,
        from: u64,
        note: Option<ChatMessage>,
        first_kept: Option<u64>,
        content: &str,
        user: &str,
        summary: &str,
    ) -> Result<(u64, u64), StoreError> {
        let at = now();
        let agent = agent.to_owned();
        let user = user.to_owned();
        let summary = summary.to_owned();
        let content = content.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let id = new_thread(
                    tx,
                    &agent,
                    ThreadStatus::Running,
                    &at,
                    &user,
                    &summary,
                    Some(from),
                )
                .await?;
                if let Some(note) = note {
                    insert_message(tx, &agent, id, &note, &at, true).await?;
                }
                if let Some(first) = first_kept {
                    sqlx::query(
                        "INSERT INTO messages (agent_name, thread_id, role, content, tool_calls, \
                         tool_call_id, tool_name, is_error, created_at, position) \
                         SELECT agent_name, $3, role, content, tool_calls, tool_call_id, tool_name, \
                         is_error, $5, position - f.start + 1 + \
                         (SELECT COALESCE(MAX(position), 0) FROM messages \
                          WHERE agent_name = $1 AND thread_id = $3) \
                         FROM messages, (SELECT position AS start FROM messages \
                          WHERE agent_name = $1 AND thread_id = $2 AND id = $4) f \
                         WHERE agent_name = $1 AND thread_id = $2 AND position >= f.start \
                         ORDER BY position",
                    )
                    .bind(&agent)
                    .bind(from as i64)
                    .bind(id as i64)
                    .bind(first as i64)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                }
                let last =
                    insert_message(tx, &agent, id, &ChatMessage::user(content), &at, true).await?;
                Ok((id, last))
            })
        })
        .await
    }

    pub async fn thread(&self, agent: &str, id: u64) -> Result<Option<ThreadRecord>, StoreError> {
        let row = sqlx::query(
            "SELECT agent_name, id, status, created_at, updated_at, ended_at, error, failure_kind, \
             created_by, summary, continued_from, role, workdir FROM threads \
             WHERE agent_name = $1 AND id = $2",
        )
        .bind(agent)
        .bind(id as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(thread_from_row).transpose()
    }

    pub async fn threads(&self, agent: &str) -> Result<Vec<ThreadRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT agent_name, id, status, created_at, updated_at, ended_at, error, failure_kind, \
             created_by, summary, continued_from, role, workdir FROM threads \
             WHERE agent_name = $1 ORDER BY id",
        )
        .bind(agent)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(thread_from_row).collect()
    }

    /// Moves a thread to `status`, with the failure when it failed. Finishing a
    /// thread also closes any step left open. A finished thread is never moved again,
    /// so a late event cannot resurrect it.
    pub async fn set_thread_status(
        &self,
        agent: &str,
        id: u64,
        status: ThreadStatus,
        failure: Option<&Failure>,
    ) -> Result<bool, StoreError> {
        let at = now();
        let ended_at = status.is_finished().then(|| at.clone());
        let agent = agent.to_owned();
        let failure = failure.cloned();
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE threads SET status = $3, error = COALESCE($4, error), \
                     failure_kind = COALESCE($7, failure_kind), updated_at = $5, ended_at = $6 \
                     WHERE agent_name = $1 AND id = $2 AND status NOT IN ('completed', 'failed', 'killed')",
                )
                .bind(&agent)
                .bind(id as i64)
                .bind(status.as_str())
                .bind(failure.as_ref().map(|f| f.message.as_str()))
                .bind(&at)
                .bind(&ended_at)
                .bind(failure.as_ref().map(|f| f.kind.as_str()))
                .execute(&mut *tx)
                .await?;
                if status.is_finished() {
                    sqlx::query(
                        "UPDATE thread_steps SET ended_at = $3, failed = 1 \
                         WHERE agent_name = $1 AND thread_id = $2 AND ended_at IS NULL",
                    )
                    .bind(&agent)
                    .bind(id as i64)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                }
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    /// Threads going that never had a run (the control plane stopped between
    /// creating one and queueing its first run, or while a continuation's summary
    /// was being written), oldest first, as `(agent, thread)`.
    pub async fn threads_never_run(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT agent_name, id FROM threads WHERE status = 'running' AND NOT EXISTS \
             (SELECT 1 FROM runs r WHERE r.agent_name = threads.agent_name \
              AND r.thread_id = threads.id) ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(agent, id)| (agent, id.max(0) as u64))
            .collect())
    }

    /// Threads waiting for a person with no run to go on: a CLI run's call was
    /// deferred for a person's approval (`gate`) when the last control plane stopped.
    pub async fn threads_waiting_without_run(&self) -> Result<Vec<(String, u64)>, StoreError> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT agent_name, id FROM threads WHERE status = 'waiting_for_permission' AND NOT EXISTS \
             (SELECT 1 FROM runs r WHERE r.agent_name = threads.agent_name \
              AND r.thread_id = threads.id AND r.status IN ('queued', 'running')) ORDER BY created_at, id",
        )
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(agent, id)| (agent, id.max(0) as u64))
            .collect())
    }

    /// Marks every unfinished thread that has no open run failed with `failure`:
    /// at start-up, after the open runs were resumed. Returns how many were failed.
    pub async fn fail_threads_without_run(&self, failure: &Failure) -> Result<u64, StoreError> {
        let at = now();
        let failure = failure.clone();
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE threads SET status = 'failed', error = $1, failure_kind = $3, updated_at = $2, \
                     ended_at = $2 WHERE status IN ('running', 'waiting_for_permission') AND NOT EXISTS \
                     (SELECT 1 FROM runs r WHERE r.agent_name = threads.agent_name \
                      AND r.thread_id = threads.id AND r.status IN ('queued', 'running'))",
                )
                .bind(&failure.message)
                .bind(&at)
                .bind(failure.kind.as_str())
                .execute(&mut *tx)
                .await?;
                // Their steps left open will never end.
                sqlx::query(
                    "UPDATE thread_steps SET ended_at = $1, failed = 1 WHERE ended_at IS NULL AND EXISTS \
                     (SELECT 1 FROM threads t WHERE t.agent_name = thread_steps.agent_name \
                      AND t.id = thread_steps.thread_id AND t.status IN ('completed', 'failed', 'killed'))",
                )
                .bind(&at)
                .execute(&mut *tx)
                .await?;
                Ok(done.rows_affected())
            })
        })
        .await
    }

    /// The user messages of a thread no model has seen yet, as messages.
    pub async fn pending_messages(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE agent_name = $1 AND thread_id = $2 AND position IS NULL ORDER BY id"
        ))
        .bind(agent)
        .bind(thread as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    /// Appends a message a run produced (a tool's result also records how the call
    /// went in its audit row); false (and nothing stored) when `mark` says the
    /// run's event was stored already.
    /// Queued to the writer: the [`super::Pending`] answers once it is committed.
    pub async fn append_message(
        &self,
        agent: &str,
        thread: u64,
        message: &ChatMessage,
        mark: Option<RunMark<'_>>,
    ) -> super::Pending<bool> {
        self.queue_event(agent, thread, mark, RunEvent::Message(message.clone()))
            .await
    }

    /// Adds a user message to a thread; `pending` when a run is going that has not
    /// seen it yet (it gets its place when the run takes it). Returns its id.
    pub async fn add_user_message(
        &self,
        agent: &str,
        thread: u64,
        content: &str,
        pending: bool,
    ) -> Result<u64, StoreError> {
        let at = now();
        let agent = agent.to_owned();
        let content = content.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let id = insert_message(
                    tx,
                    &agent,
                    thread,
                    &ChatMessage::user(content),
                    &at,
                    !pending,
                )
                .await?;
                sqlx::query("UPDATE threads SET updated_at = $3 WHERE agent_name = $1 AND id = $2")
                    .bind(&agent)
                    .bind(thread as i64)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                Ok(id)
            })
        })
        .await
    }

    /// A run took a pending user message into its history: it gets the next place
    /// in the thread. False when the event was a replay.
    /// Queued to the writer: the [`super::Pending`] answers once it is committed.
    pub async fn take_input(
        &self,
        agent: &str,
        thread: u64,
        message_id: u64,
        mark: Option<RunMark<'_>>,
    ) -> super::Pending<bool> {
        self.queue_event(agent, thread, mark, RunEvent::InputTaken(message_id))
            .await
    }

    /// The user messages of a thread no model has seen yet, oldest first: their ids
    /// and contents.
    pub async fn pending_inputs(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        Ok(self
            .pending_messages(agent, thread)
            .await?
            .into_iter()
            .map(|m| (m.id, m.message.content))
            .collect())
    }

    /// The thread a message of `agent` belongs to.
    pub async fn message_thread(
        &self,
        agent: &str,
        message_id: u64,
    ) -> Result<Option<u64>, StoreError> {
        let thread: Option<i64> =
            sqlx::query_scalar("SELECT thread_id FROM messages WHERE agent_name = $1 AND id = $2")
                .bind(agent)
                .bind(message_id as i64)
                .fetch_optional(&self.pool)
                .await?;
        Ok(thread.map(|t| t as u64))
    }

    /// Sets a thread's one-line summary (its title), cut to the summary length.
    pub async fn set_thread_summary(
        &self,
        agent: &str,
        thread: u64,
        summary: &str,
    ) -> Result<String, StoreError> {
        let summary = summary_of(summary);
        let agent = agent.to_owned();
        let summary = summary.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query("UPDATE threads SET summary = $3 WHERE agent_name = $1 AND id = $2")
                    .bind(&agent)
                    .bind(thread as i64)
                    .bind(&summary)
                    .execute(&mut *tx)
                    .await?;
                Ok(summary)
            })
        })
        .await
    }

    /// Replaces the content of a thread's first message (a continuation's note,
    /// once the summary of what it left out is written, before any run of it).
    pub async fn set_first_message(
        &self,
        agent: &str,
        thread: u64,
        content: &str,
    ) -> Result<(), StoreError> {
        let agent = agent.to_owned();
        let content = content.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "UPDATE messages SET content = $3 WHERE agent_name = $1 AND thread_id = $2 \
                     AND position = 1",
                )
                .bind(&agent)
                .bind(thread as i64)
                .bind(&content)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// A thread's conversation as the model saw it: every message with a place, in
    /// order (pending user messages are not in it).
    pub async fn thread_messages(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<StoredMessage>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE agent_name = $1 AND thread_id = $2 \
             AND position IS NOT NULL ORDER BY position"
        ))
        .bind(agent)
        .bind(thread as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(message_from_row).collect()
    }

    /// A page of a thread's messages: those after place `after` (0 for the first
    /// page), in the order the model saw them, at most `limit` and, past the first,
    /// no more than about `max_bytes` of content and tool arguments. Each comes with
    /// its place (the cursor for the next page); the flag says whether more follow.
    /// Pending user messages have no place and are not paged
    /// ([`Store::pending_inputs`]).
    pub async fn thread_messages_page(
        &self,
        agent: &str,
        thread: u64,
        after: i64,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<(i64, StoredMessage)>, bool), StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            message_columns!(),
            " FROM messages WHERE agent_name = $1 AND thread_id = $2 \
             AND position > $3 ORDER BY position LIMIT $4"
        ))
        .bind(agent)
        .bind(thread as i64)
        .bind(after)
        .bind(i64::from(limit) + 1)
        .fetch(&self.pool);
        read_page(rows, limit, max_bytes, |row| {
            let message = message_from_row(row)?;
            let size = message.message.content.len()
                + message
                    .message
                    .tool_calls
                    .iter()
                    .map(|c| c.arguments.len())
                    .sum::<usize>();
            Ok(((row.try_get::<i64, _>("position")?, message), size))
        })
        .await
    }

    /// A page of a thread's steps: those numbered after `after`, in order, at most
    /// `limit` and, past the first, about `max_bytes` of descriptions; the flag says
    /// whether more follow.
    pub async fn thread_steps_page(
        &self,
        agent: &str,
        thread: u64,
        after: u32,
        limit: u32,
        max_bytes: usize,
    ) -> Result<(Vec<StepRecord>, bool), StoreError> {
        let rows = sqlx::query(
            "SELECT step_number, kind, description, started_at, ended_at, duration_ms, failed, \
             input_tokens, output_tokens, runs_in \
             FROM thread_steps WHERE agent_name = $1 AND thread_id = $2 AND step_number > $3 \
             ORDER BY step_number LIMIT $4",
        )
        .bind(agent)
        .bind(thread as i64)
        .bind(i64::from(after))
        .bind(i64::from(limit) + 1)
        .fetch(&self.pool);
        read_page(rows, limit, max_bytes, |row| {
            let step = step_from_row(row)?;
            let size = step.description.len();
            Ok((step, size))
        })
        .await
    }

    /// Queued to the writer: the [`super::Pending`] answers once it is committed.
    pub async fn record_step_started(
        &self,
        agent: &str,
        thread: u64,
        step: &StepStarted,
        mark: Option<RunMark<'_>>,
    ) -> super::Pending<bool> {
        self.queue_event(agent, thread, mark, RunEvent::StepStarted(step.clone()))
            .await
    }

    /// Queued to the writer: the [`super::Pending`] answers once it is committed.
    pub async fn record_step_ended(
        &self,
        agent: &str,
        thread: u64,
        step: &StepEnded,
        mark: Option<RunMark<'_>>,
    ) -> super::Pending<bool> {
        self.queue_event(agent, thread, mark, RunEvent::StepEnded(step.clone()))
            .await
    }

    /// A CLI backend's run said which session it started (a run event: stored once,
    /// by its `seq`, like the others, into `runs.cli_session`). False when it was a
    /// replay.
    /// Queued to the writer: the [`super::Pending`] answers once it is committed.
    pub async fn record_cli_session(
        &self,
        agent: &str,
        thread: u64,
        session_id: &str,
        mark: RunMark<'_>,
    ) -> super::Pending<bool> {
        self.queue_event(
            agent,
            thread,
            Some(mark),
            RunEvent::CliSession(session_id.to_owned()),
        )
        .await
    }

    /// Queues the result of a deferred call a later run carried out, for its audit row.
    pub async fn record_resumed_call(
        &self,
        agent: &str,
        thread: u64,
        call_id: &str,
        is_error: bool,
        mark: RunMark<'_>,
    ) -> super::Pending<bool> {
        self.queue_event(
            agent,
            thread,
            Some(mark),
            RunEvent::ResumedCallDone {
                call_id: call_id.to_owned(),
                is_error,
            },
        )
        .await
    }

    /// Queues a run's event to the writer, which merges it with its neighbours.
    async fn queue_event(
        &self,
        agent: &str,
        thread: u64,
        mark: Option<RunMark<'_>>,
        event: RunEvent,
    ) -> super::Pending<bool> {
        self.writer
            .submit_event(ThreadEvent {
                agent: agent.to_owned(),
                thread,
                mark: super::runs::Mark::of(mark),
                event,
            })
            .await
    }

    /// Closes a thread's open steps as failed: their run is gone (a resumption
    /// follows), so they will never end.
    pub async fn close_open_steps(&self, agent: &str, thread: u64) -> Result<(), StoreError> {
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "UPDATE thread_steps SET ended_at = $3, failed = 1 \
                     WHERE agent_name = $1 AND thread_id = $2 AND ended_at IS NULL",
                )
                .bind(&agent)
                .bind(thread as i64)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// Each thread's progress: its last step number and the description of its open
    /// step (what it is doing now); every thread of `agent`'s, or only `thread`. The
    /// one place progress is computed, for the thread list and a thread's own route.
    pub async fn threads_progress(
        &self,
        agent: &str,
        thread: Option<u64>,
    ) -> Result<std::collections::HashMap<u64, Progress>, StoreError> {
        let rows: Vec<(i64, i64, Option<String>)> = sqlx::query_as(
            "SELECT s.thread_id, MAX(s.step_number), \
             (SELECT o.description FROM thread_steps o WHERE o.agent_name = s.agent_name \
              AND o.thread_id = s.thread_id AND o.ended_at IS NULL \
              ORDER BY o.step_number DESC LIMIT 1) \
             FROM thread_steps s WHERE s.agent_name = $1 AND ($2 < 0 OR s.thread_id = $2) \
             GROUP BY s.agent_name, s.thread_id",
        )
        .bind(agent)
        // -1: every thread (ids start at 1); a typed bind either way, so both
        // backends take the same query.
        .bind(thread.map_or(-1, |t| t as i64))
        .fetch_all(&self.pool)
        .await?;
        Ok(rows
            .into_iter()
            .map(|(thread, step, current)| {
                (
                    thread as u64,
                    Progress {
                        step_number: step as u32,
                        current_step: current,
                    },
                )
            })
            .collect())
    }

    pub async fn thread_steps(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<StepRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT step_number, kind, description, started_at, ended_at, duration_ms, failed, \
             input_tokens, output_tokens, runs_in \
             FROM thread_steps WHERE agent_name = $1 AND thread_id = $2 ORDER BY step_number",
        )
        .bind(agent)
        .bind(thread as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(step_from_row).collect()
    }

    /// Tokens used by a thread's model calls (all of the agent's threads when `thread`
    /// is `None`): the sum of what providers reported; `None` when no call reported
    /// any (a server that sends no usage has unknown usage, not zero).
    pub async fn token_usage(
        &self,
        agent: &str,
        thread: Option<u64>,
    ) -> Result<Option<Usage>, StoreError> {
        // Two statements rather than `$2 IS NULL OR …`; the sums cast back to
        // BIGINT (Postgres sums integers as NUMERIC).
        let (input, output): (Option<i64>, Option<i64>) = match thread {
            Some(thread) => {
                sqlx::query_as(
                    "SELECT CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT) FROM thread_steps \
                     WHERE agent_name = $1 AND thread_id = $2",
                )
                .bind(agent)
                .bind(thread as i64)
                .fetch_one(&self.pool)
                .await?
            }
            None => {
                sqlx::query_as(
                    "SELECT CAST(SUM(input_tokens) AS BIGINT), CAST(SUM(output_tokens) AS BIGINT) FROM thread_steps WHERE agent_name = $1",
                )
                .bind(agent)
                .fetch_one(&self.pool)
                .await?
            }
        };
        if input.is_none() && output.is_none() {
            return Ok(None);
        }
        Ok(Some(Usage {
            input_tokens: input.unwrap_or(0).max(0) as u64,
            output_tokens: output.unwrap_or(0).max(0) as u64,
        }))
    }

    /// The next step number of a thread (step numbers continue across runs).
    pub async fn next_step_number(&self, agent: &str, thread: u64) -> Result<u32, StoreError> {
        let max: Option<i64> = sqlx::query_scalar(
            "SELECT MAX(step_number) FROM thread_steps WHERE agent_name = $1 AND thread_id = $2",
        )
        .bind(agent)
        .bind(thread as i64)
        .fetch_one(&self.pool)
        .await?;
        Ok(max.unwrap_or(0) as u32 + 1)
    }
}

/// Creates a thread row, its id the next of the agent's counter (bumping it is
/// atomic on both SQLite and Postgres, so concurrent creates never collide).
pub(super) async fn new_thread(
    tx: &mut sqlx::AnyConnection,
    agent: &str,
    status: ThreadStatus,
    at: &str,
    user: &str,
    summary: &str,
    continued_from: Option<u64>,
) -> Result<u64, StoreError> {
    let id: Option<i64> = sqlx::query_scalar(
        "UPDATE agents SET next_thread_id = next_thread_id + 1 \
         WHERE name = $1 AND status = 'active' RETURNING next_thread_id - 1",
    )
    .bind(agent)
    .fetch_optional(&mut *tx)
    .await?;
    let id = id.ok_or_else(|| StoreError::NotFound(format!("no active agent named '{agent}'")))?;
    sqlx::query(
        "INSERT INTO threads (agent_name, id, status, created_at, updated_at, created_by, \
         summary, continued_from) VALUES ($1, $2, $3, $4, $4, $5, $6, $7)",
    )
    .bind(agent)
    .bind(id)
    .bind(status.as_str())
    .bind(at)
    .bind(user)
    .bind(summary)
    .bind(continued_from.map(|t| t as i64))
    .execute(&mut *tx)
    .await?;
    Ok(id as u64)
}

/// Reads rows into a page: at most `limit` items and, past the first, about
/// `max_bytes` (as `convert` measures each); says whether more follow. Rows are read
/// one at a time (the query asks for `limit + 1`), so a page of huge rows stops at
/// the budget instead of loading them all.
async fn read_page<T>(
    mut rows: impl futures::Stream<Item = Result<sqlx::any::AnyRow, sqlx::Error>> + Unpin,
    limit: u32,
    max_bytes: usize,
    convert: impl Fn(&sqlx::any::AnyRow) -> Result<(T, usize), StoreError>,
) -> Result<(Vec<T>, bool), StoreError> {
    use futures::TryStreamExt;
    let mut page = Vec::new();
    let mut bytes = 0usize;
    while let Some(row) = rows.try_next().await? {
        if page.len() == limit as usize || (!page.is_empty() && bytes >= max_bytes) {
            return Ok((page, true));
        }
        let (item, size) = convert(&row)?;
        bytes += size;
        page.push(item);
    }
    Ok((page, false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store_with_agent;

    /// A thread's role and working directory are stored and read back; only an
    /// ended thread with a role is reopened (a chat thread that ended stays ended,
    /// a going one is left as it is).
    #[tokio::test]
    async fn only_an_ended_thread_with_a_role_is_reopened() {
        for role in [
            ThreadRole::Planner,
            ThreadRole::Worker,
            ThreadRole::Answerer,
        ] {
            assert_eq!(ThreadRole::parse(role.as_str()), Some(role));
            assert_eq!(
                serde_json::to_value(role).unwrap(),
                serde_json::json!(role.as_str())
            );
        }
        assert_eq!(ThreadRole::parse("boss"), None);
        let (store, _dir) = test_store_with_agent().await;
        let (task, _) = store
            .start_role_thread(
                "a",
                &ChatMessage::user("do task 7"),
                "api",
                ThreadRole::Worker,
                Some("tasks/7"),
            )
            .await
            .unwrap();
        let (chat, _) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        let record = store.thread("a", task).await.unwrap().unwrap();
        assert_eq!(
            (record.role, record.workdir.as_deref(), record.status),
            (
                Some(ThreadRole::Worker),
                Some("tasks/7"),
                ThreadStatus::Running
            )
        );
        let chat_record = store.thread("a", chat).await.unwrap().unwrap();
        assert_eq!((chat_record.role, chat_record.workdir), (None, None));
        assert!(!store.reopen_role_thread("a", task).await.unwrap(), "going");
        let failure = Failure::new(FailureKind::ModelError, "no");
        for thread in [task, chat] {
            store
                .set_thread_status("a", thread, ThreadStatus::Failed, Some(&failure))
                .await
                .unwrap();
        }
        assert!(store.reopen_role_thread("a", task).await.unwrap());
        assert!(!store.reopen_role_thread("a", chat).await.unwrap());
        let reopened = store.thread("a", task).await.unwrap().unwrap();
        assert_eq!(
            (
                reopened.status,
                reopened.ended_at,
                reopened.error,
                reopened.failure_kind
            ),
            (ThreadStatus::Running, None, None, None)
        );
        assert_eq!(
            store.thread("a", chat).await.unwrap().unwrap().status,
            ThreadStatus::Failed
        );
    }

    #[tokio::test]
    async fn thread_ids_count_up_per_agent() {
        let (store, _dir) = test_store_with_agent().await;
        let first = store
            .start_thread("a", &ChatMessage::user("1"), "api", None)
            .await
            .unwrap()
            .0;
        let second = store
            .start_thread("a", &ChatMessage::user("2"), "api", None)
            .await
            .unwrap()
            .0;
        assert_eq!((first, second), (1, 2));
        assert!(matches!(
            store
                .start_thread("nobody", &ChatMessage::user("x"), "api", None)
                .await,
            Err(StoreError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn messages_keep_their_order_and_tool_calls() {
        let (store, _dir) = test_store_with_agent().await;
        let t = store
            .start_thread("a", &ChatMessage::user("make a file"), "api", None)
            .await
            .unwrap()
            .0;
        let call = ToolCall {
            id: "c1".into(),
            name: "create_file".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        store
            .append_message(
                "a",
                t,
                &ChatMessage::assistant("", vec![call.clone()]),
                None,
            )
            .await
            .await
            .unwrap();
        store
            .append_message("a", t, &ChatMessage::tool_result(&call, "ok", false), None)
            .await
            .await
            .unwrap();
        let messages: Vec<ChatMessage> = store
            .thread_messages("a", t)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.message)
            .collect();
        assert_eq!(messages.len(), 3);
        assert_eq!(messages[1].tool_calls, vec![call.clone()]);
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
    }

    /// A continuation copies the kept messages (from the first kept one on, in the
    /// order the model saw them, tool calls included) after its note, then the new
    /// user message; the ended thread keeps its own.
    #[tokio::test]
    async fn a_continuation_copies_the_kept_messages_in_order() {
        let (store, _dir) = test_store_with_agent().await;
        let t = store
            .start_thread("a", &ChatMessage::user("first"), "api", None)
            .await
            .unwrap()
            .0;
        let call = ToolCall {
            id: "c1".into(),
            name: "view".into(),
            arguments: "{}".into(),
        };
        for message in [
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "seen", false),
            ChatMessage::assistant("one", vec![]),
        ] {
            store
                .append_message("a", t, &message, None)
                .await
                .await
                .unwrap();
        }
        let second = store
            .add_user_message("a", t, "second", false)
            .await
            .unwrap();
        store
            .append_message("a", t, &ChatMessage::assistant("two", vec![]), None)
            .await
            .await
            .unwrap();
        let shown = |messages: Vec<StoredMessage>| -> Vec<(Role, String)> {
            messages
                .into_iter()
                .map(|m| (m.message.role, m.message.content))
                .collect()
        };
        let before = shown(store.thread_messages("a", t).await.unwrap());

        let note = ChatMessage::user("[left out]");
        let (next, last) = store
            .create_continuation("a", t, Some(note), Some(second), "third", "api", "s")
            .await
            .unwrap();
        let copied = store.thread_messages("a", next).await.unwrap();
        assert_eq!(copied.last().unwrap().id, last);
        assert_eq!(
            shown(copied),
            [
                (Role::User, "[left out]".to_string()),
                (Role::User, "second".into()),
                (Role::Assistant, "two".into()),
                (Role::User, "third".into()),
            ]
        );
        assert_eq!(shown(store.thread_messages("a", t).await.unwrap()), before);

        // Everything kept: the tool call and its result come along.
        let first = store.thread_messages("a", t).await.unwrap()[0].id;
        let (whole, _) = store
            .create_continuation("a", t, None, Some(first), "again", "api", "s")
            .await
            .unwrap();
        let whole = store.thread_messages("a", whole).await.unwrap();
        assert_eq!(whole.len(), 7);
        assert_eq!(whole[1].message.tool_calls, vec![call.clone()]);
        assert_eq!(whole[2].message.tool_call_id.as_deref(), Some("c1"));
        assert_eq!(
            store
                .thread("a", next)
                .await
                .unwrap()
                .unwrap()
                .continued_from,
            Some(t)
        );
    }

    #[tokio::test]
    async fn a_finished_thread_stays_finished_and_closes_open_steps() {
        let (store, _dir) = test_store_with_agent().await;
        let t = store
            .start_thread("a", &ChatMessage::user("x"), "api", None)
            .await
            .unwrap()
            .0;
        store
            .record_step_started(
                "a",
                t,
                &StepStarted {
                    run_id: "r".into(),
                    number: 1,
                    kind: StepKind::LlmCall,
                    description: "Calling LLM".into(),
                    started_at_ms: 1_700_000_000_000,
                    runs_in: None,
                },
                None,
            )
            .await
            .await
            .unwrap();
        let died = Failure::new(FailureKind::Interrupted, "worker died");
        assert!(
            store
                .set_thread_status("a", t, ThreadStatus::Failed, Some(&died))
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_thread_status("a", t, ThreadStatus::Completed, None)
                .await
                .unwrap()
        );
        let thread = store.thread("a", t).await.unwrap().unwrap();
        assert_eq!(thread.status, ThreadStatus::Failed);
        assert_eq!(thread.error.as_deref(), Some("worker died"));
        assert_eq!(thread.failure_kind, Some(FailureKind::Interrupted));
        let steps = store.thread_steps("a", t).await.unwrap();
        assert!(steps[0].ended_at.is_some() && steps[0].failed);
        assert_eq!(store.next_step_number("a", t).await.unwrap(), 2);
    }

    #[tokio::test]
    async fn the_failure_kind_is_kept_with_the_thread_and_only_for_failures() {
        let (store, _dir) = test_store_with_agent().await;
        let mut ids = Vec::new();
        for _ in 0..4 {
            ids.push(
                store
                    .start_thread("a", &ChatMessage::user("x"), "api", None)
                    .await
                    .unwrap()
                    .0,
            );
        }
        let over = Failure::new(FailureKind::Limit, "stopped after 50 model calls");
        store
            .set_thread_status("a", ids[0], ThreadStatus::Failed, Some(&over))
            .await
            .unwrap();
        store
            .set_thread_status("a", ids[1], ThreadStatus::Completed, None)
            .await
            .unwrap();
        // Waiting and back does not invent a failure.
        store
            .set_thread_status("a", ids[2], ThreadStatus::WaitingForPermission, None)
            .await
            .unwrap();
        // A step left open by the control plane that died.
        let open = StepStarted {
            run_id: "r".into(),
            number: 1,
            kind: StepKind::LlmCall,
            description: "Calling LLM".into(),
            started_at_ms: 1_700_000_000_000,
            runs_in: None,
        };
        store
            .record_step_started("a", ids[3], &open, None)
            .await
            .await
            .unwrap();
        // Start-up repair: what is left unfinished without a run was interrupted.
        let stopped = Failure::new(FailureKind::Interrupted, "chorus stopped");
        assert_eq!(store.fail_threads_without_run(&stopped).await.unwrap(), 2);
        let steps = store.thread_steps("a", ids[3]).await.unwrap();
        assert!(steps[0].ended_at.is_some() && steps[0].failed, "{steps:?}");
        let seen: Vec<_> = store
            .threads("a")
            .await
            .unwrap()
            .into_iter()
            .map(|t| (t.status, t.failure_kind, t.error))
            .collect();
        assert_eq!(
            seen,
            [
                (
                    ThreadStatus::Failed,
                    Some(FailureKind::Limit),
                    Some("stopped after 50 model calls".into())
                ),
                (ThreadStatus::Completed, None, None),
                (
                    ThreadStatus::Failed,
                    Some(FailureKind::Interrupted),
                    Some("chorus stopped".into())
                ),
                (
                    ThreadStatus::Failed,
                    Some(FailureKind::Interrupted),
                    Some("chorus stopped".into())
                ),
            ]
        );
        // A kind this build does not know is a corrupt row, never a guess.
        sqlx::query("UPDATE threads SET failure_kind = 'mystery' WHERE id = $1")
            .bind(ids[0] as i64)
            .execute(&store.pool)
            .await
            .unwrap();
        assert!(matches!(
            store.thread("a", ids[0]).await,
            Err(StoreError::Corrupt {
                column: "threads.failure_kind",
                ..
            })
        ));
    }

    #[tokio::test]
    async fn pages_of_messages_join_up_and_stop_at_their_byte_budget() {
        let (store, _dir) = test_store_with_agent().await;
        let t = store
            .start_thread("a", &ChatMessage::user("0"), "api", None)
            .await
            .unwrap()
            .0;
        for i in 1..10 {
            let content = if i == 1 || i == 3 {
                "x".repeat(1000)
            } else {
                i.to_string()
            };
            store
                .append_message("a", t, &ChatMessage::assistant(content, vec![]), None)
                .await
                .await
                .unwrap();
        }
        let mut seen = Vec::new();
        let mut after = 0;
        let mut pages = 0;
        loop {
            let (page, more) = store
                .thread_messages_page("a", t, after, 5, 500)
                .await
                .unwrap();
            pages += 1;
            seen.extend(page.iter().map(|(_, m)| m.message.content.clone()));
            after = page.last().map_or(after, |(id, _)| *id);
            if !more {
                break;
            }
        }
        // All ten in order, none twice; 5 a page would be 2 pages, but each
        // 1000-byte message ends its page at the 500-byte budget: [0,1] [2,3] [4..8] [9].
        let expected: Vec<String> = (0..10)
            .map(|i| {
                if i == 1 || i == 3 {
                    "x".repeat(1000)
                } else {
                    i.to_string()
                }
            })
            .collect();
        assert_eq!(seen, expected);
        assert_eq!(pages, 4);
    }

    #[tokio::test]
    async fn token_usage_adds_up_per_thread_and_per_agent() {
        let (store, _dir) = test_store_with_agent().await;
        for (thread, tokens) in [(1u64, 10u64), (2, 5)] {
            let t = store
                .start_thread("a", &ChatMessage::user("x"), "api", None)
                .await
                .unwrap()
                .0;
            assert_eq!(t, thread);
            for number in 1..=2 {
                let started = StepStarted {
                    run_id: "r".into(),
                    number,
                    kind: StepKind::LlmCall,
                    description: "Calling LLM".into(),
                    started_at_ms: 0,
                    runs_in: None,
                };
                store
                    .record_step_started("a", t, &started, None)
                    .await
                    .await
                    .unwrap();
                let ended = StepEnded {
                    run_id: "r".into(),
                    number,
                    ended_at_ms: 1,
                    duration_ms: 1,
                    failed: false,
                    usage: Some(Usage {
                        input_tokens: tokens,
                        output_tokens: 1,
                    }),
                };
                store
                    .record_step_ended("a", t, &ended, None)
                    .await
                    .await
                    .unwrap();
            }
        }
        let usage = |input_tokens, output_tokens| Usage {
            input_tokens,
            output_tokens,
        };
        assert_eq!(
            store.token_usage("a", Some(1)).await.unwrap(),
            Some(usage(20, 2))
        );
        assert_eq!(
            store.token_usage("a", None).await.unwrap(),
            Some(usage(30, 4))
        );
        assert_eq!(store.token_usage("b", None).await.unwrap(), None);
    }
}
