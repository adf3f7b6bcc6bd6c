//! Rows of the `messages` table: the one insert every writer of messages uses
//! (a thread's start, a run's events, a restored session), so the position rule
//! lives in one place.

use chorus_proto::domain::ChatMessage;

use super::StoreError;

/// Inserts one message of a thread: a `placed` one goes after every other message of
/// its thread; a pending one has no position until its run takes it.
pub(super) async fn insert_message(
    tx: &mut sqlx::AnyConnection,
    agent: &str,
    thread: u64,
    message: &ChatMessage,
    at: &str,
    placed: bool,
) -> Result<u64, StoreError> {
    let tool_calls = if message.tool_calls.is_empty() {
        None
    } else {
        Some(
            serde_json::to_string(&message.tool_calls).map_err(|e| StoreError::Corrupt {
                column: "messages.tool_calls",
                value: e.to_string(),
            })?,
        )
    };
    // A placed message goes after every other of its thread; a pending one waits.
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO messages (agent_name, thread_id, role, content, tool_calls, tool_call_id, \
         tool_name, is_error, created_at, position) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, \
         CASE WHEN $10 = 1 THEN (SELECT COALESCE(MAX(position), 0) + 1 FROM messages \
         WHERE agent_name = $1 AND thread_id = $2) END) RETURNING id",
    )
    .bind(agent)
    .bind(thread as i64)
    .bind(message.role.as_str())
    .bind(&message.content)
    .bind(tool_calls)
    .bind(&message.tool_call_id)
    .bind(&message.tool_name)
    .bind(message.is_error as i64)
    .bind(at)
    .bind(placed as i64)
    .fetch_one(&mut *tx)
    .await?;
    Ok(id as u64)
}
