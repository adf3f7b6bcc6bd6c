//! The audit log: append-only, one row per decision, execution or change.

use sqlx::Row;

use super::{Store, StoreError, now};
use crate::principal::Principal;

/// What an audit row records: a tool call's decision (and how an ask ended), or a
/// change that was carried out or failed. A closed set; the store's text is `as_str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AuditDecision {
    /// The profile allowed the call.
    Allow,
    /// Refused: the profile, an unclear state (no profile, a restart), or an ask
    /// that could not be put to anyone.
    Deny,
    /// Asked, and a person approved.
    AskApproved,
    /// Asked, and a person denied.
    AskDenied,
    /// Asked, and nobody answered in time.
    AskExpired,
    /// Asked, and the agent's `on_ask = "allow"` answered.
    AskAutoAllowed,
    /// Asked, and the agent's `on_ask = "deny"` answered.
    AskAutoDenied,
    /// A change (an agent's lifecycle, a thread's answer) was carried out.
    Done,
    /// A change was attempted and failed.
    Failed,
}

impl AuditDecision {
    pub const ALL: [AuditDecision; 9] = [
        AuditDecision::Allow,
        AuditDecision::Deny,
        AuditDecision::AskApproved,
        AuditDecision::AskDenied,
        AuditDecision::AskExpired,
        AuditDecision::AskAutoAllowed,
        AuditDecision::AskAutoDenied,
        AuditDecision::Done,
        AuditDecision::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AuditDecision::Allow => "allow",
            AuditDecision::Deny => "deny",
            AuditDecision::AskApproved => "ask_approved",
            AuditDecision::AskDenied => "ask_denied",
            AuditDecision::AskExpired => "ask_expired",
            AuditDecision::AskAutoAllowed => "ask_auto_allowed",
            AuditDecision::AskAutoDenied => "ask_auto_denied",
            AuditDecision::Done => "done",
            AuditDecision::Failed => "failed",
        }
    }

    fn parse(text: &str) -> Option<AuditDecision> {
        AuditDecision::ALL.into_iter().find(|d| d.as_str() == text)
    }
}

#[derive(Debug, Clone)]
pub struct AuditEntry<'a> {
    pub agent_name: &'a str,
    /// `tool:<name>:<detail>` for tool calls, `agent:<verb>` for lifecycle changes.
    pub action: &'a str,
    pub decision: AuditDecision,
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
    pub decision: AuditDecision,
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
        .bind(entry.decision.as_str())
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
                    decision: {
                        let text: String = row.try_get("decision")?;
                        AuditDecision::parse(&text).ok_or(StoreError::Corrupt {
                            column: "audit_log.decision",
                            value: text,
                        })?
                    },
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Every decision is stored as its text and read back as itself; a row with a
    /// text outside the set is a corrupt row, not a guess.
    #[tokio::test]
    async fn every_decision_reads_back_and_a_foreign_one_is_corrupt() {
        let (store, _dir) = crate::store::test_store_with_agent().await;
        let agent = "a";
        for decision in AuditDecision::ALL {
            store
                .audit(AuditEntry {
                    agent_name: agent,
                    action: "tool:view:a",
                    decision,
                    user_id: None,
                    detail: None,
                    thread_id: None,
                    call_id: None,
                    worker: None,
                })
                .await
                .unwrap();
        }
        let mut read: Vec<AuditDecision> = store
            .audit_page(agent, None, 100)
            .await
            .unwrap()
            .into_iter()
            .map(|r| r.decision)
            .collect();
        read.reverse();
        assert_eq!(read, AuditDecision::ALL);
        for d in AuditDecision::ALL {
            assert_eq!(
                serde_json::to_value(d).unwrap(),
                d.as_str(),
                "the API shows the stored text"
            );
        }
        store
            .execute(
                sqlx::query(
                    "INSERT INTO audit_log (agent_name, timestamp, action_string, decision) \
                     VALUES ($1, $2, 'x', 'maybe')",
                )
                .bind(agent)
                .bind(now()),
            )
            .await
            .unwrap();
        assert!(matches!(
            store.audit_page(agent, None, 100).await,
            Err(StoreError::Corrupt {
                column: "audit_log.decision",
                ..
            })
        ));
    }
}
