//! Questions for a person: approvals of tool calls (SPEC D2) and questions in words
//! (see `questions` for how they are asked and answered).

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, now};
use crate::principal::Principal;

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    Pending,
    Approved,
    Denied,
    /// Nobody answered in time: a deny.
    Expired,
    /// The control plane stopped while it waited: a deny.
    Cancelled,
    /// A question answered in words (never an approval).
    Answered,
}

/// What kind of question a row is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuestionKind {
    /// May this tool call run? Approve or deny.
    Approval,
    /// An agent's question in words: approve, deny, or an answer in text.
    Question,
}

impl QuestionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            QuestionKind::Approval => "approval",
            QuestionKind::Question => "question",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "approval" => QuestionKind::Approval,
            "question" => QuestionKind::Question,
            _ => return None,
        })
    }

    pub fn is_approval(&self) -> bool {
        *self == QuestionKind::Approval
    }
}

impl ApprovalStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ApprovalStatus::Pending => "pending",
            ApprovalStatus::Approved => "approved",
            ApprovalStatus::Denied => "denied",
            ApprovalStatus::Expired => "expired",
            ApprovalStatus::Cancelled => "cancelled",
            ApprovalStatus::Answered => "answered",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => ApprovalStatus::Pending,
            "approved" => ApprovalStatus::Approved,
            "denied" => ApprovalStatus::Denied,
            "expired" => ApprovalStatus::Expired,
            "cancelled" => ApprovalStatus::Cancelled,
            "answered" => ApprovalStatus::Answered,
            _ => return None,
        })
    }
}

#[derive(Debug, Clone)]
pub struct NewApproval {
    pub id: String,
    pub kind: QuestionKind,
    pub agent_name: String,
    pub thread_id: u64,
    pub call_id: String,
    pub tool: String,
    pub actions: Vec<String>,
    pub detail: Option<String>,
    /// Who started the thread that asks.
    pub requested_by: Option<Principal>,
    pub expires_at: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRecord {
    pub id: String,
    pub kind: QuestionKind,
    pub agent: String,
    pub thread_id: u64,
    pub call_id: String,
    pub tool: String,
    pub actions: Vec<String>,
    pub detail: Option<String>,
    pub status: ApprovalStatus,
    pub requested_by: Option<Principal>,
    pub requested_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
    pub decided_by: Option<Principal>,
    /// A question's answer in words.
    pub answer: Option<String>,
}

const COLUMNS: &str = "SELECT id, agent_name, thread_id, call_id, tool, action, detail, status, \
    requested_by, requested_at, expires_at, decided_at, decided_by, kind, answer FROM approvals";

fn principal(row: &AnyRow, column: &str) -> Result<Option<Principal>, StoreError> {
    Ok(row
        .try_get::<Option<String>, _>(column)?
        .map(|text| Principal::parse(&text)))
}

fn approval_from_row(row: &AnyRow) -> Result<ApprovalRecord, StoreError> {
    let status: String = row.try_get("status")?;
    let actions: String = row.try_get("action")?;
    let kind: String = row.try_get("kind")?;
    Ok(ApprovalRecord {
        id: row.try_get("id")?,
        kind: QuestionKind::parse(&kind).ok_or(StoreError::Corrupt {
            column: "approvals.kind",
            value: kind,
        })?,
        answer: row.try_get("answer")?,
        agent: row.try_get("agent_name")?,
        thread_id: row.try_get::<i64, _>("thread_id")? as u64,
        call_id: row.try_get("call_id")?,
        tool: row.try_get("tool")?,
        actions: actions.lines().map(str::to_string).collect(),
        detail: row.try_get("detail")?,
        status: ApprovalStatus::parse(&status).ok_or(StoreError::Corrupt {
            column: "approvals.status",
            value: status,
        })?,
        requested_by: principal(row, "requested_by")?,
        requested_at: row.try_get("requested_at")?,
        expires_at: row.try_get("expires_at")?,
        decided_at: row.try_get("decided_at")?,
        decided_by: principal(row, "decided_by")?,
    })
}

impl Store {
    pub async fn insert_approval(&self, approval: &NewApproval) -> Result<(), StoreError> {
        self.execute(sqlx::query(
            "INSERT INTO approvals (id, agent_name, thread_id, call_id, tool, action, detail, status, \
             requested_by, requested_at, expires_at, kind) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, 'pending', $8, $9, $10, $11)",
        )
        .bind(&approval.id)
        .bind(&approval.agent_name)
        .bind(approval.thread_id as i64)
        .bind(&approval.call_id)
        .bind(&approval.tool)
        .bind(approval.actions.join("\n"))
        .bind(&approval.detail)
        .bind(approval.requested_by.as_ref().map(Principal::text))
        .bind(now())
        .bind(&approval.expires_at)
        .bind(approval.kind.as_str())
        )
        .await?;
        Ok(())
    }

    pub async fn approval(&self, id: &str) -> Result<Option<ApprovalRecord>, StoreError> {
        let sql = format!("{COLUMNS} WHERE id = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    /// Pending approvals, oldest first (all agents when `agent` is `None`).
    pub async fn pending_approvals(
        &self,
        agent: Option<&str>,
    ) -> Result<Vec<ApprovalRecord>, StoreError> {
        let rows = match agent {
            Some(agent) => {
                let sql = format!(
                    "{COLUMNS} WHERE status = 'pending' AND agent_name = $1 ORDER BY requested_at"
                );
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .bind(agent)
                    .fetch_all(&self.pool)
                    .await?
            }
            None => {
                let sql = format!("{COLUMNS} WHERE status = 'pending' ORDER BY requested_at");
                sqlx::query(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&self.pool)
                    .await?
            }
        };
        rows.iter().map(approval_from_row).collect()
    }

    /// The latest question asked in a thread, whatever became of it.
    pub async fn latest_approval_of_thread(
        &self,
        agent: &str,
        thread_id: u64,
    ) -> Result<Option<ApprovalRecord>, StoreError> {
        let sql = format!(
            "{COLUMNS} WHERE agent_name = $1 AND thread_id = $2 ORDER BY requested_at DESC, id DESC LIMIT 1"
        );
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent)
            .bind(thread_id as i64)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(approval_from_row).transpose()
    }

    /// Settles a pending question without words (approved, denied, expired,
    /// cancelled); `false` when it was no longer pending.
    pub async fn settle_approval(
        &self,
        id: &str,
        status: ApprovalStatus,
        by: Option<&Principal>,
    ) -> Result<bool, StoreError> {
        self.answer_question(id, status, None, by).await
    }

    /// Settles a pending question, with its answer in words if it has one; `false`
    /// when it was no longer pending.
    pub async fn answer_question(
        &self,
        id: &str,
        status: ApprovalStatus,
        answer: Option<&str>,
        by: Option<&Principal>,
    ) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE approvals SET status = $2, decided_at = $3, decided_by = $4, answer = $5 \
             WHERE id = $1 AND status = 'pending'",
                )
                .bind(id)
                .bind(status.as_str())
                .bind(now())
                .bind(by.map(Principal::text))
                .bind(answer),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// At start-up: nobody waits for approvals of an earlier process any more.
    pub async fn cancel_pending_approvals(&self) -> Result<u64, StoreError> {
        let done = self.execute(sqlx::query(
            "UPDATE approvals SET status = 'cancelled', decided_at = $1 WHERE status = 'pending'",
        )
        .bind(now())
        )
        .await?;
        Ok(done.rows_affected())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store_with_agent;

    /// Rows written before questions existed (no `kind`) read as approvals, and the
    /// user strings they hold as the persons they were.
    #[tokio::test]
    async fn rows_from_before_questions_read_as_approvals_of_the_same_people() {
        let (store, _dir) = test_store_with_agent().await;
        sqlx::query(
            "INSERT INTO approvals (id, agent_name, thread_id, call_id, tool, action, status, \
             requested_by, requested_at, expires_at, decided_at, decided_by) \
             VALUES ('old', 'a', 1, 'c', 'bash', 'tool:bash:rm x', 'approved', 'api', $1, $1, $1, 'discord:42')",
        )
        .bind(now())
        .execute(&store.pool)
        .await
        .unwrap();
        let record = store.approval("old").await.unwrap().unwrap();
        assert_eq!(record.kind, QuestionKind::Approval);
        assert_eq!(record.answer, None);
        assert_eq!(record.requested_by, Some(Principal::person("api")));
        assert_eq!(record.decided_by, Some(Principal::person("discord:42")));
        let shown = serde_json::to_value(crate::views::ApprovalView::from(record)).unwrap();
        assert_eq!(shown["requested_by"], "api");
        assert_eq!(shown["decided_by"], "discord:42");
        assert!(shown.get("kind").is_none(), "{shown}");
    }
}
