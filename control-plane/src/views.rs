//! What the API answers about approvals and audit rows: serde types of their own,
//! separate from the store's rows, so a column added to a table is not published
//! by accident and a front end (the HTTP API, the coming web page) shows what this
//! says. Agents and threads have theirs beside their handlers (`http::agents`,
//! `http::threads`), which fill them from several services. Pure conversions.

use serde::Serialize;

use crate::store::{ApprovalRecord, ApprovalStatus, AuditDecision, AuditRecord, QuestionKind};

/// One approval request (`GET /api/approvals`, `…/{id}`, and the answer's reply).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalView {
    pub id: String,
    /// Not shown for an approval, so the approval API reads as it always did.
    #[serde(skip_serializing_if = "QuestionKind::is_approval")]
    pub kind: QuestionKind,
    pub agent: String,
    pub thread_id: u64,
    pub call_id: String,
    pub tool: String,
    pub actions: Vec<String>,
    pub detail: Option<String>,
    pub status: ApprovalStatus,
    pub requested_by: Option<String>,
    pub requested_at: String,
    pub expires_at: String,
    pub decided_at: Option<String>,
    pub decided_by: Option<String>,
    /// A question's answer in words.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub answer: Option<String>,
}

impl From<ApprovalRecord> for ApprovalView {
    fn from(r: ApprovalRecord) -> Self {
        ApprovalView {
            id: r.id,
            kind: r.kind,
            agent: r.agent,
            thread_id: r.thread_id,
            call_id: r.call_id,
            tool: r.tool,
            actions: r.actions,
            detail: r.detail,
            status: r.status,
            requested_by: r.requested_by.map(|p| p.text()),
            requested_at: r.requested_at,
            expires_at: r.expires_at,
            decided_at: r.decided_at,
            decided_by: r.decided_by.map(|p| p.text()),
            answer: r.answer,
        }
    }
}

/// One row of an agent's audit log (`GET /api/agents/{name}/audit`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditView {
    pub id: i64,
    pub agent_name: String,
    pub timestamp: String,
    pub action: String,
    pub decision: AuditDecision,
    pub user_id: Option<String>,
    pub detail: Option<String>,
    pub thread_id: Option<u64>,
    pub call_id: Option<String>,
    /// How the tool call went: `ok` or `error` (null until it ran, or if it never did).
    pub result: Option<String>,
    /// The dial-in worker whose report the row records.
    pub worker: Option<String>,
}

impl From<AuditRecord> for AuditView {
    fn from(r: AuditRecord) -> Self {
        AuditView {
            id: r.id,
            agent_name: r.agent_name,
            timestamp: r.timestamp,
            action: r.action,
            decision: r.decision,
            user_id: r.user_id.map(|p| p.text()),
            detail: r.detail,
            thread_id: r.thread_id,
            call_id: r.call_id,
            result: r.result,
            worker: r.worker,
        }
    }
}

/// A page of the audit log, newest first; `next` is the URL of the following page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditPage {
    pub entries: Vec<AuditView>,
    pub next: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The JSON the API answered when it serialised the store's rows itself.
    #[test]
    fn the_views_answer_what_the_rows_did() {
        let approval = ApprovalView::from(ApprovalRecord {
            id: "a1".into(),
            kind: QuestionKind::Approval,
            agent: "helper".into(),
            thread_id: 3,
            call_id: "c1".into(),
            tool: "bash".into(),
            actions: vec!["tool:bash:rm x".into()],
            detail: None,
            status: ApprovalStatus::Approved,
            requested_by: Some(crate::principal::Principal::parse("api")),
            requested_at: "2026-11-26T12:00:00.000Z".into(),
            expires_at: "2026-11-26T12:10:00.000Z".into(),
            decided_at: Some("2026-11-26T12:01:00.000Z".into()),
            decided_by: Some(crate::principal::Principal::parse("discord:42")),
            answer: None,
        });
        assert_eq!(
            serde_json::to_string(&approval).unwrap(),
            r#"{"id":"a1","agent":"helper","thread_id":3,"call_id":"c1","tool":"bash","actions":["tool:bash:rm x"],"detail":null,"status":"approved","requested_by":"api","requested_at":"2026-11-26T12:00:00.000Z","expires_at":"2026-11-26T12:10:00.000Z","decided_at":"2026-11-26T12:01:00.000Z","decided_by":"discord:42"}"#
        );
        let row = AuditView::from(AuditRecord {
            id: 9,
            agent_name: "helper".into(),
            timestamp: "2026-11-26T12:00:00.000Z".into(),
            action: "tool:bash:ls".into(),
            decision: AuditDecision::Allow,
            user_id: None,
            detail: Some("{}".into()),
            thread_id: Some(3),
            call_id: Some("c1".into()),
            result: Some("ok".into()),
            worker: None,
        });
        // The page went out through a JSON value: its keys sorted.
        assert_eq!(
            serde_json::to_value(AuditPage {
                entries: vec![row],
                next: None
            })
            .unwrap()
            .to_string(),
            json!({"entries": [{"id": 9, "agent_name": "helper", "timestamp": "2026-11-26T12:00:00.000Z",
                "action": "tool:bash:ls", "decision": "allow", "user_id": null, "detail": "{}",
                "thread_id": 3, "call_id": "c1", "result": "ok", "worker": null}], "next": null})
            .to_string()
        );
    }
}
