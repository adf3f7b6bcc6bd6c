//! The audit log: append-only, one row per decision, execution or change.

use sqlx::Row;

use super::{Store, StoreError, now};
use crate::principal::Principal;

#[derive(Debug, Clone)]
pub struct AuditEntry<'a> {
    pub agent_name: &'a str,
    /// `tool:<name>:<detail>` for tool calls, `agent:<verb>` for lifecycle changes.
    pub action: &'a str,
    /// allow | deny | ask_approved | ask_denied | done | failed
    pub decision: &'a str,
    /// Who triggered it (stored as its text form: `api`, `discord:42`, …), or none.
    pub user_id: Option<&'a Principal>,
    /// Parameters or old/new values (secrets already redacted by the caller).
    pub detail: Option<String>,
    /// For tool calls: the thread and the model's call id (the result is added later).
    pub thread_id: Option<u64>,
    pub call_id: Option<&'a str>,
    /// The dial-in worker whose report this row records (its credential's name,
    /// `join-token` for the shared one); `None` for the control plane's own.
    pub worker: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub id: i64,
    pub agent_name: String,
    pub timestamp: String,
    pub action: String,
    pub decision: String,
    pub user_id: Option<Principal>,
    pub detail: Option<String>,
    pub thread_id: Option<u64>,
    pub call_id: Option<String>,
    /// How the tool call went: `ok` or `error` (absent until it ran, or if it never did).
    pub result: Option<String>,
    /// The dial-in worker whose report the row records (see [`AuditEntry::worker`]).
    pub worker: Option<String>,
}

impl Store {
    pub async fn audit(&self, entry: AuditEntry<'_>) -> Result<(), StoreError> {
        self.execute(sqlx::query(
            "INSERT INTO audit_log (agent_name, timestamp, action_string, decision, user_id, detail, \
             thread_id, call_id, worker) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(entry.agent_name)
        .bind(now())
        .bind(entry.action)
        .bind(entry.decision)
        .bind(entry.user_id.map(Principal::text))
        .bind(entry.detail)
        .bind(entry.thread_id.map(|t| t as i64))
        .bind(entry.call_id)
        .bind(entry.worker),
        )
        .await?;
        Ok(())
    }

    /// One page of an agent's audit log, newest first, starting below `before_id`.
    pub async fn audit_page(
        &self,
        agent: &str,
        before_id: Option<i64>,
        limit: u32,
    ) -> Result<Vec<AuditRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, agent_name, timestamp, action_string, decision, user_id, detail, thread_id, \
             call_id, result, worker FROM audit_log WHERE agent_name = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
        )
        .bind(agent)
        .bind(before_id.unwrap_or(i64::MAX))
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(AuditRecord {
                    id: row.try_get("id")?,
                    agent_name: row.try_get("agent_name")?,
                    timestamp: row.try_get("timestamp")?,
                    action: row.try_get("action_string")?,
                    decision: row.try_get("decision")?,
                    user_id: row
                        .try_get::<Option<String>, _>("user_id")?
                        .map(|text| Principal::parse(&text)),
                    detail: row.try_get("detail")?,
                    thread_id: row
                        .try_get::<Option<i64>, _>("thread_id")?
                        .map(|t| t as u64),
                    call_id: row.try_get("call_id")?,
                    result: row.try_get("result")?,
                    worker: row.try_get("worker")?,
                })
            })
            .collect()
    }
}

/// Records how an audited tool call went, once its result is in (with the tool's
/// message, in its transaction).
pub(super) async fn record_result(
    tx: &mut sqlx::AnyConnection,
    agent: &str,
    thread_id: u64,
    call_id: &str,
    result: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE audit_log SET result = $4 \
         WHERE agent_name = $1 AND thread_id = $2 AND call_id = $3 AND result IS NULL",
    )
    .bind(agent)
    .bind(thread_id as i64)
    .bind(call_id)
    .bind(result)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
