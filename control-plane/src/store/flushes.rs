//! A thread's context flushes (`thread_flushes`, see
//! `migrations/*/0028_memory_flush.sql`; the mechanics are in `crate::memory::flush`).

use sqlx::Row;

use super::threads::{StoredMessage, message_columns, message_from_row};
use super::{Store, StoreError, now};

/// One flushed span of a thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlushRecord {
    /// The place of the span's last message: the thread's messages up to it are
    /// out of its context window.
    pub through_position: i64,
    pub first_message_id: u64,
    pub last_message_id: u64,
    pub messages: u64,
    /// `memory/YYYY-MM-DD.md`.
    pub log_path: String,
    /// The daily-log entry (`mem:<id>`).
    pub entry_id: String,
}

impl Store {
    /// The thread's flushes, oldest first.
    pub async fn thread_flushes(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<FlushRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT through_position, first_message_id, last_message_id, messages, log_path, \
             entry_id FROM thread_flushes WHERE agent_name = $1 AND thread_id = $2 \
             ORDER BY through_position",
        )
        .bind(agent)
        .bind(thread as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(FlushRecord {
                    through_position: row.try_get("through_position")?,
                    first_message_id: row.try_get::<i64, _>("first_message_id")? as u64,
                    last_message_id: row.try_get::<i64, _>("last_message_id")? as u64,
                    messages: row.try_get::<i64, _>("messages")?.max(0) as u64,
                    log_path: row.try_get("log_path")?,
                    entry_id: row.try_get("entry_id")?,
                })
            })
            .collect()
    }

    /// Records a flushed span, only if it goes past the thread's latest one (a
    /// span is never recorded twice, nor one behind another). Whether it was.
    pub async fn record_flush(
        &self,
        agent: &str,
        thread: u64,
        flush: FlushRecord,
    ) -> Result<bool, StoreError> {
        let (agent, at) = (agent.to_owned(), now());
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(
                    "INSERT INTO thread_flushes (agent_name, thread_id, through_position, \
                     first_message_id, last_message_id, messages, log_path, entry_id, created_at) \
                     SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9 WHERE NOT EXISTS (SELECT 1 FROM \
                     thread_flushes WHERE agent_name = $1 AND thread_id = $2 \
                     AND through_position >= $3)",
                )
                .bind(&agent)
                .bind(thread as i64)
                .bind(flush.through_position)
                .bind(flush.first_message_id as i64)
                .bind(flush.last_message_id as i64)
                .bind(flush.messages as i64)
                .bind(&flush.log_path)
                .bind(&flush.entry_id)
                .bind(&at)
                .execute(&mut *tx)
                .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    /// A thread's conversation with each message's place (as
    /// [`Store::thread_messages`]).
    pub async fn thread_messages_placed(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<(i64, StoredMessage)>, StoreError> {
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
        rows.iter()
            .map(|row| Ok((row.try_get::<i64, _>("position")?, message_from_row(row)?)))
            .collect()
    }

    /// The input tokens the thread's latest model call reported (`None`: it has
    /// none, or its provider reported none).
    pub async fn latest_input_tokens(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Option<u64>, StoreError> {
        let tokens: Option<Option<i64>> = sqlx::query_scalar(
            "SELECT input_tokens FROM thread_steps WHERE agent_name = $1 AND thread_id = $2 \
             AND kind = 'llm_call' ORDER BY step_number DESC LIMIT 1",
        )
        .bind(agent)
        .bind(thread as i64)
        .fetch_optional(&self.pool)
        .await?;
        Ok(tokens.flatten().map(|t| t.max(0) as u64))
    }
}
