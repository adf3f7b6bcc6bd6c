//! The audit log: append-only, one row per decision, execution or change.

use sqlx::Row;

use super::{Store, StoreError, now};

#[derive(Debug, Clone)]
pub struct AuditEntry<'a> {
    pub agent_name: &'a str,
    /// `tool:<name>:<detail>` for tool calls, `agent:<verb>` for lifecycle changes.
    pub action: &'a str,
    /// allow | deny | ask_approved | ask_denied | done | failed
    pub decision: &'a str,
    /// Who triggered it: `api`, a Discord user id, or none for the system itself.
    pub user_id: Option<&'a str>,
    /// Parameters or old/new values (secrets already redacted by the caller).
    pub detail: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    pub id: i64,
    pub agent_name: String,
    pub timestamp: String,
    pub action: String,
    pub decision: String,
    pub user_id: Option<String>,
    pub detail: Option<String>,
}

impl Store {
    pub async fn audit(&self, entry: AuditEntry<'_>) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO audit_log (agent_name, timestamp, action_string, decision, user_id, detail) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(entry.agent_name)
        .bind(now())
        .bind(entry.action)
        .bind(entry.decision)
        .bind(entry.user_id)
        .bind(entry.detail)
        .execute(&self.pool)
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
            "SELECT id, agent_name, timestamp, action_string, decision, user_id, detail \
             FROM audit_log WHERE agent_name = $1 AND id < $2 ORDER BY id DESC LIMIT $3",
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
                    user_id: row.try_get("user_id")?,
                    detail: row.try_get("detail")?,
                })
            })
            .collect()
    }
}
