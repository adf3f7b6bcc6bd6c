//! An agent's context window and its saved sessions: where the context starts, the
//! messages in it, clearing it, the `sessions` rows, and the thread a restore makes.
//!
//! The context of an agent is every message of its threads created at or after its
//! cutoff, `max(context_cleared_at, now - window)` ([`context_cutoff`]); nothing
//! older is deleted. Timestamps are compared as text, which orders them because
//! every one is written by [`super::format_time`].

use std::time::Duration;

use chorus_proto::domain::ChatMessage;
use chrono::{DateTime, Utc};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::messages::insert_message;
use super::threads::{ThreadStatus, message_columns, new_thread};
use super::{Store, StoreError, format_time, now};

/// Where an agent's context starts: the later of its last clear and `now - window`.
/// A clear time that cannot be read counts as never cleared (the window still
/// bounds the context).
pub fn context_cutoff(cleared_at: Option<&str>, now: DateTime<Utc>, window: Duration) -> String {
    let window = chrono::Duration::from_std(window).unwrap_or(chrono::Duration::MAX);
    let rolling = now
        .checked_sub_signed(window)
        .unwrap_or(DateTime::<Utc>::MIN_UTC);
    let cleared = cleared_at
        .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&Utc));
    format_time(cleared.map_or(rolling, |c| c.max(rolling)))
}

/// One saved session (its messages are in its file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRecord {
    pub id: String,
    pub agent_name: String,
    pub description: String,
    /// `manual_save`, `idle_timeout`, `shutdown` or `context_clear`.
    pub trigger: String,
    pub saved_at: String,
    pub message_count: u64,
    /// A bare file name inside the agent's `sessions/` directory.
    pub file_name: String,
}

fn session_from_row(row: &AnyRow) -> Result<SessionRecord, StoreError> {
    Ok(SessionRecord {
        id: row.try_get("id")?,
        agent_name: row.try_get("agent_name")?,
        description: row.try_get("description")?,
        trigger: row.try_get("trigger")?,
        saved_at: row.try_get("saved_at")?,
        message_count: row.try_get::<i64, _>("message_count")?.max(0) as u64,
        file_name: row.try_get("file_name")?,
    })
}

const SESSION_COLUMNS: &str =
    "SELECT id, agent_name, description, trigger, saved_at, message_count, file_name FROM sessions";

/// What clearing a context did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cleared {
    /// The agent's new cutoff.
    pub cleared_at: String,
    /// The `idle` threads (waiting for a user) that clearing ended as `completed`.
    pub threads_completed: Vec<u64>,
}

impl Store {
    /// Where `agent`'s context starts now (see [`context_cutoff`]).
    pub async fn agent_context_cutoff(
        &self,
        agent: &str,
        window: Duration,
    ) -> Result<String, StoreError> {
        let cleared: Option<Option<String>> =
            sqlx::query_scalar("SELECT context_cleared_at FROM agents WHERE name = $1")
                .bind(agent)
                .fetch_optional(&self.pool)
                .await?;
        let cleared =
            cleared.ok_or_else(|| StoreError::NotFound(format!("no agent named '{agent}'")))?;
        Ok(context_cutoff(cleared.as_deref(), Utc::now(), window))
    }

    /// Every message of the agent's context: those of all its threads created at or
    /// after `cutoff`, threads in id order, each thread's messages in order, each
    /// with its thread id.
    pub async fn context_messages(
        &self,
        agent: &str,
        cutoff: &str,
    ) -> Result<Vec<(u64, ChatMessage)>, StoreError> {
        // A pending user message (no place yet) is part of the context too: after
        // its thread's placed ones.
        let rows = sqlx::query(concat!(
            "SELECT thread_id, ",
            message_columns!(),
            " FROM messages WHERE agent_name = $1 AND created_at >= $2 \
             ORDER BY thread_id, position IS NULL, position, id"
        ))
        .bind(agent)
        .bind(cutoff)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok((
                    row.try_get::<i64, _>("thread_id")?.max(0) as u64,
                    super::threads::message_from_row(row)?.message,
                ))
            })
            .collect()
    }

    /// Clears `agent`'s context as of `at`: its cutoff moves to `at` (never back),
    /// and its `idle` threads last changed by then end `completed` (they waited for
    /// a user; clearing ends them). A thread that changed after `at` (a reply came
    /// in while an idle save was summarising) is left alone, as are its messages.
    pub async fn clear_context(&self, agent: &str, at: &str) -> Result<Cleared, StoreError> {
        let agent = agent.to_owned();
        let at = at.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let cleared: Option<Option<String>> = sqlx::query_scalar(
                    "UPDATE agents SET context_cleared_at = CASE \
                     WHEN context_cleared_at IS NULL OR context_cleared_at < $2 THEN $2 \
                     ELSE context_cleared_at END \
                     WHERE name = $1 AND status = 'active' RETURNING context_cleared_at",
                )
                .bind(&agent)
                .bind(&at)
                .fetch_optional(&mut *tx)
                .await?;
                let cleared_at = cleared.flatten().ok_or_else(|| {
                    StoreError::NotFound(format!("no active agent named '{agent}'"))
                })?;
                let ended = now();
                let mut threads: Vec<i64> = sqlx::query_scalar(
                    "UPDATE threads SET status = 'completed', updated_at = $3, ended_at = $3 \
                     WHERE agent_name = $1 AND status = 'idle' AND updated_at <= $2 RETURNING id",
                )
                .bind(&agent)
                .bind(&at)
                .bind(&ended)
                .fetch_all(&mut *tx)
                .await?;
                threads.sort_unstable();
                Ok(Cleared {
                    cleared_at,
                    threads_completed: threads.into_iter().map(|t| t.max(0) as u64).collect(),
                })
            })
        })
        .await
    }

    pub async fn insert_session(&self, session: &SessionRecord) -> Result<(), StoreError> {
        let session = session.clone();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO sessions (id, agent_name, description, trigger, saved_at, message_count, \
                     file_name) VALUES ($1, $2, $3, $4, $5, $6, $7)",
                )
                .bind(&session.id)
                .bind(&session.agent_name)
                .bind(&session.description)
                .bind(&session.trigger)
                .bind(&session.saved_at)
                .bind(session.message_count as i64)
                .bind(&session.file_name)
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    pub async fn session(
        &self,
        agent: &str,
        id: &str,
    ) -> Result<Option<SessionRecord>, StoreError> {
        let sql = format!("{SESSION_COLUMNS} WHERE agent_name = $1 AND id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent)
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(session_from_row).transpose()
    }

    /// The agent's sessions, newest first: at most `limit`, starting after the
    /// session `(saved_at, id)` when given (the cursor of the previous page).
    pub async fn sessions(
        &self,
        agent: &str,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let (saved_at, id) = after.unwrap_or(("\u{10FFFF}", ""));
        let sql = format!(
            "{SESSION_COLUMNS} WHERE agent_name = $1 AND (saved_at < $2 OR (saved_at = $2 AND id < $3)) \
             ORDER BY saved_at DESC, id DESC LIMIT $4"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent)
            .bind(saved_at)
            .bind(id)
            .bind(i64::from(limit))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(session_from_row).collect()
    }

    /// Creates one `idle` thread holding `messages` (a restored session), in one
    /// transaction; returns its id and the id of its last message (the one a user
    /// replies to, to continue it).
    pub async fn restore_thread(
        &self,
        agent: &str,
        messages: &[ChatMessage],
        user: &str,
        session_id: &str,
        summary: &str,
    ) -> Result<(u64, i64), StoreError> {
        if messages.is_empty() {
            return Err(StoreError::Conflict(
                "a restored thread needs at least one message".into(),
            ));
        }
        let at = now();
        let agent = agent.to_owned();
        let messages = messages.to_vec();
        let user = user.to_owned();
        let session_id = session_id.to_owned();
        let summary = summary.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let summary = super::threads::summary_of(&summary);
                let id =
                    new_thread(tx, &agent, ThreadStatus::Idle, &at, &user, &summary, None).await?;
                sqlx::query(
                    "UPDATE threads SET restored_from = $3 WHERE agent_name = $1 AND id = $2",
                )
                .bind(&agent)
                .bind(id as i64)
                .bind(&session_id)
                .execute(&mut *tx)
                .await?;
                let mut last = 0;
                for message in messages {
                    last = insert_message(tx, &agent, id, &message, &at, true).await?;
                }
                Ok((id, last as i64))
            })
        })
        .await
    }

    /// The session a thread was restored from, if any.
    pub async fn thread_restored_from(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT restored_from FROM threads WHERE agent_name = $1 AND id = $2",
        )
        .bind(agent)
        .bind(thread as i64)
        .fetch_optional(&self.pool)
        .await?
        .flatten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ThreadStatus, test_store_with_agent};
    use chorus_proto::domain::ToolCall;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn the_cutoff_is_the_later_of_the_clear_and_the_window() {
        let now = at("2026-02-12T12:00:00Z");
        let day = Duration::from_secs(24 * 3600);
        assert_eq!(
            context_cutoff(None, now, day),
            "2026-02-11T12:00:00.000Z",
            "never cleared: the window"
        );
        assert_eq!(
            context_cutoff(Some("2026-02-12T10:00:00.000Z"), now, day),
            "2026-02-12T10:00:00.000Z",
            "cleared within the window"
        );
        assert_eq!(
            context_cutoff(Some("2026-01-01T00:00:00.000Z"), now, day),
            "2026-02-11T12:00:00.000Z",
            "cleared long ago"
        );
        assert_eq!(
            context_cutoff(Some("garbage"), now, day),
            "2026-02-11T12:00:00.000Z"
        );
        // A window larger than time itself starts at the beginning, not a panic.
        assert!(context_cutoff(None, now, Duration::MAX).starts_with('-'));
    }

    #[tokio::test]
    async fn clearing_moves_the_cutoff_and_ends_idle_threads_only() {
        let (store, _dir) = test_store_with_agent().await;
        let day = Duration::from_secs(24 * 3600);
        let idle = store
            .start_thread("a", &ChatMessage::user("waiting"), "api", None)
            .await
            .unwrap()
            .0;
        store
            .set_thread_status("a", idle, ThreadStatus::Idle, None)
            .await
            .unwrap();
        let running = store
            .start_thread("a", &ChatMessage::user("going"), "api", None)
            .await
            .unwrap()
            .0;
        let cutoff = store.agent_context_cutoff("a", day).await.unwrap();
        assert_eq!(store.context_messages("a", &cutoff).await.unwrap().len(), 2);

        let cleared = store.clear_context("a", &now()).await.unwrap();
        assert_eq!(cleared.threads_completed, [idle]);
        assert_eq!(
            store.thread("a", idle).await.unwrap().unwrap().status,
            ThreadStatus::Completed
        );
        assert_eq!(
            store.thread("a", running).await.unwrap().unwrap().status,
            ThreadStatus::Running
        );
        let cutoff = store.agent_context_cutoff("a", day).await.unwrap();
        assert_eq!(cutoff, cleared.cleared_at);
        // Messages from before the clear are kept, outside the context.
        assert!(
            store
                .context_messages("a", &cutoff)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.thread_messages("a", idle).await.unwrap().len(), 1);
        store
            .append_message("a", running, &ChatMessage::assistant("after", vec![]), None)
            .await
            .await
            .unwrap();
        let since = store.context_messages("a", &cutoff).await.unwrap();
        assert_eq!(since.len(), 1);
        assert_eq!(since[0], (running, ChatMessage::assistant("after", vec![])));

        // A clear as of an earlier moment never moves the cutoff back.
        let again = store
            .clear_context("a", "2000-01-01T00:00:00.000Z")
            .await
            .unwrap();
        assert_eq!(again.cleared_at, cleared.cleared_at);
        assert!(matches!(
            store.clear_context("nobody", &now()).await,
            Err(StoreError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn a_restored_thread_is_idle_and_holds_the_messages_in_order() {
        let (store, _dir) = test_store_with_agent().await;
        let call = ToolCall {
            id: "c1".into(),
            name: "view".into(),
            arguments: "{not json".into(),
        };
        let messages = vec![
            ChatMessage::user("look"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "contents", true),
            ChatMessage::assistant("done", vec![]),
        ];
        let (thread, last) = store
            .restore_thread("a", &messages, "api", "s-1", "restored")
            .await
            .unwrap();
        let record = store.thread("a", thread).await.unwrap().unwrap();
        assert_eq!(record.status, ThreadStatus::Idle);
        assert_eq!(
            store.thread_restored_from("a", thread).await.unwrap(),
            Some("s-1".into())
        );
        let stored = store.thread_messages("a", thread).await.unwrap();
        assert_eq!(
            stored.iter().map(|m| m.message.clone()).collect::<Vec<_>>(),
            messages
        );
        assert_eq!(stored.last().unwrap().id as i64, last);
        assert_eq!(
            store
                .thread("a", thread)
                .await
                .unwrap()
                .unwrap()
                .summary
                .as_deref(),
            Some("restored")
        );
        assert!(
            store
                .restore_thread("a", &[], "api", "s-2", "x")
                .await
                .is_err()
        );
    }

    #[tokio::test]
    async fn sessions_list_newest_first_in_pages() {
        let (store, _dir) = test_store_with_agent().await;
        for (i, saved_at) in [
            "2026-01-01T00:00:00.000Z",
            "2026-01-03T00:00:00.000Z",
            "2026-01-02T00:00:00.000Z",
        ]
        .iter()
        .enumerate()
        {
            store
                .insert_session(&SessionRecord {
                    id: format!("s{i}"),
                    agent_name: "a".into(),
                    description: format!("d{i}"),
                    trigger: "manual_save".into(),
                    saved_at: saved_at.to_string(),
                    message_count: 1,
                    file_name: format!("f{i}.json"),
                })
                .await
                .unwrap();
        }
        let first = store.sessions("a", None, 2).await.unwrap();
        let ids: Vec<&str> = first.iter().map(|s| s.id.as_str()).collect();
        assert_eq!(ids, ["s1", "s2"]);
        let last = first.last().unwrap();
        let rest = store
            .sessions("a", Some((&last.saved_at, &last.id)), 2)
            .await
            .unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].id, "s0");
        assert_eq!(
            store.session("a", "s0").await.unwrap().unwrap().file_name,
            "f0.json"
        );
        assert!(store.session("b", "s0").await.unwrap().is_none());
    }
}
