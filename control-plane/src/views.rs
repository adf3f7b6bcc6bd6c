//! What the API answers about approvals, audit rows and threads: serde types of their own,
//! separate from the store's rows, so a column added to a table is not published
//! by accident and a front end (the HTTP API, the coming web page) shows what this
//! says. Threads' views are here too; the agent's view sits beside its handler
//! (`http::agents`), which fills it from several services. Pure conversions.

use chorus_proto::domain::{ChatMessage, FailureKind, StepKind, Usage};
use chorus_proto::tools::RunsIn;
use serde::Serialize;

use crate::store::{
    ApprovalRecord, ApprovalStatus, AuditDecision, AuditRecord, Progress, QuestionKind, StepRecord,
    StoredMessage, ThreadRecord,
};

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

// ---- threads (`GET …/threads`, `GET …/threads/{id}`): built by `http::threads`, which reads the store ----

#[derive(Serialize)]
pub struct ThreadSummary {
    id: u64,
    status: &'static str,
    created_at: String,
    updated_at: String,
    ended_at: Option<String>,
    /// Why the thread failed, for people; null unless it failed.
    error: Option<String>,
    /// How it failed, for programs (`interrupted`, `model_error`, `limit` …); null
    /// unless it failed (and for threads that failed before kinds were recorded).
    failure_kind: Option<FailureKind>,
    /// What the thread is about, in one line.
    summary: Option<String>,
    /// The ended thread this one continues.
    continued_from: Option<u64>,
    /// From its creation to its end (or to now while it goes).
    elapsed_ms: u64,
    /// Steps so far, and what it is doing now (its open step), if anything.
    step_number: u32,
    current_step: Option<String>,
}

impl ThreadSummary {
    /// The thread as both routes show it; `progress` from `Store::threads_progress`
    /// (none: no step yet).
    pub fn new(t: ThreadRecord, progress: Option<Progress>) -> Self {
        let parse = |s: &str| chrono::DateTime::parse_from_rfc3339(s).ok();
        let end = t
            .ended_at
            .as_deref()
            .and_then(parse)
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_else(chrono::Utc::now);
        let elapsed_ms = parse(&t.created_at)
            .map(|start| {
                (end - start.with_timezone(&chrono::Utc))
                    .num_milliseconds()
                    .max(0) as u64
            })
            .unwrap_or(0);
        ThreadSummary {
            id: t.id,
            status: t.status.as_str(),
            created_at: t.created_at,
            updated_at: t.updated_at,
            ended_at: t.ended_at,
            error: t.error,
            failure_kind: t.failure_kind,
            summary: t.summary,
            continued_from: t.continued_from,
            elapsed_ms,
            current_step: if t.status.is_finished() {
                None
            } else {
                progress.as_ref().and_then(|p| p.current_step.clone())
            },
            step_number: progress.map_or(0, |p| p.step_number),
        }
    }
}

#[derive(Serialize)]
pub struct MessageView {
    /// Stable; a reply names it (`reply_to`).
    id: u64,
    #[serde(flatten)]
    message: ChatMessage,
    created_at: String,
    /// Sent while a run was going; no model has seen it yet.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pending: bool,
}

impl From<StoredMessage> for MessageView {
    fn from(m: StoredMessage) -> Self {
        MessageView {
            id: m.id,
            message: m.message,
            created_at: m.created_at,
            pending: m.pending,
        }
    }
}

#[derive(Serialize)]
pub struct StepView {
    number: u32,
    kind: StepKind,
    description: String,
    started_at: String,
    ended_at: Option<String>,
    duration_ms: Option<u64>,
    failed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<UsageView>,
    /// Where a tool step's tool runs (`worker`, `control_plane`); absent for other
    /// steps, calls refused before they ran, and steps stored before it was kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_in: Option<RunsIn>,
}

#[derive(Serialize)]
pub struct UsageView {
    input_tokens: u64,
    output_tokens: u64,
}

impl From<StepRecord> for StepView {
    fn from(s: StepRecord) -> Self {
        let usage = match (s.input_tokens, s.output_tokens) {
            (None, None) => None,
            (i, o) => Some(UsageView {
                input_tokens: i.unwrap_or(0),
                output_tokens: o.unwrap_or(0),
            }),
        };
        StepView {
            number: s.number,
            kind: s.kind,
            description: s.description,
            started_at: s.started_at,
            ended_at: s.ended_at,
            duration_ms: s.duration_ms,
            runs_in: s.runs_in,
            failed: s.failed,
            usage,
        }
    }
}

#[derive(Serialize)]
pub struct ThreadView {
    pub agent: String,
    #[serde(flatten)]
    pub summary: ThreadSummary,
    pub messages: Vec<MessageView>,
    pub steps: Vec<StepView>,
    /// Tokens used by all of the thread's model calls; null when no provider
    /// reported any (unknown is not zero).
    pub usage: Option<Usage>,
    /// The next page of messages and steps, when there is more.
    pub next: Option<String>,
    /// What the model is streaming now in its open step, and the feed's position
    /// then (`event_id`: later `text` events follow it); null when nothing is.
    pub live: Option<crate::feed::Streaming>,
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
