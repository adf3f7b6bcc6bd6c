//! `/api/approvals`, `/api/agents/{name}/audit` and `/api/permissions/explain`.

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::agents::active_agent;
use super::{ApiError, ApiJson, AppState, Caller};
use crate::gate::actions::{actions_for, decide_actions};
use crate::permissions::{PermissionsSetting, Profile, bash_actions};
use crate::questions::{AnswerError, Reply};
use crate::views::{ApprovalView, AuditPage, AuditView};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ApprovalsQuery {
    agent: Option<String>,
}

/// Pending approval requests, oldest first.
pub(super) async fn list_approvals(
    State(state): State<AppState>,
    query: Result<Query<ApprovalsQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Vec<ApprovalView>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    Ok(Json(
        state
            .store
            .pending_approvals(query.agent.as_deref())
            .await?
            .into_iter()
            .map(ApprovalView::from)
            .collect(),
    ))
}

pub(super) async fn show_approval(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<ApprovalView>, ApiError> {
    state
        .store
        .approval(&id)
        .await?
        .map(|record| Json(record.into()))
        .ok_or_else(|| ApiError::not_found(format!("no approval request '{id}'")))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AnswerBody {
    /// `approve` or `deny`.
    decision: String,
}

pub(super) async fn answer_approval(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    ApiJson(body): ApiJson<AnswerBody>,
) -> Result<Json<ApprovalView>, ApiError> {
    let reply = match body.decision.as_str() {
        "approve" => Reply::Approve,
        "deny" => Reply::Deny,
        other => {
            return Err(ApiError::bad_request(format!(
                "decision must be \"approve\" or \"deny\", not \"{other}\""
            )));
        }
    };
    match state
        .gate
        .approvals()
        .answer(&id, reply, &caller.principal())
        .await
    {
        Ok(record) => Ok(Json(record.into())),
        Err(AnswerError::NotFound(_)) => {
            Err(ApiError::not_found(format!("no approval request '{id}'")))
        }
        Err(e @ AnswerError::Settled { .. }) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            e.to_string(),
        )),
        Err(e @ AnswerError::NotAYesOrNo(_)) => Err(ApiError::bad_request(e.to_string())),
        Err(AnswerError::Store(e)) => Err(e.into()),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct AuditQuery {
    /// Entries older than this id (for the next page).
    before: Option<i64>,
    limit: Option<u32>,
}

/// The agent's audit log, newest first, a page at a time.
pub(super) async fn audit(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<AuditQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let agent = active_agent(&state, &name).await?;
    let limit = query.limit.unwrap_or(50).clamp(1, 500);
    let entries: Vec<AuditView> = state
        .store
        .audit_page(&agent.name, query.before, limit)
        .await?
        .into_iter()
        .map(AuditView::from)
        .collect();
    let next = (entries.len() as u32 == limit)
        .then(|| {
            entries.last().map(|e| {
                format!(
                    "/api/agents/{}/audit?before={}&limit={limit}",
                    agent.name, e.id
                )
            })
        })
        .flatten();
    // Through a JSON value, as before: its keys sorted.
    let page = serde_json::to_value(AuditPage { entries, next })
        .map_err(|e| ApiError::internal(format!("cannot write the audit page: {e}")))?;
    Ok(Json(page))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ExplainBody {
    /// A preset name or a custom profile.
    profile: PermissionsSetting,
    /// An action string (`tool:bash:git status`), or give `tool` and `arguments` to
    /// have it derived as the gate would.
    action: Option<String>,
    tool: Option<String>,
    arguments: Option<Value>,
}

/// Which rule decides an action, and why.
pub(super) async fn explain(ApiJson(body): ApiJson<ExplainBody>) -> Result<Json<Value>, ApiError> {
    let profile =
        Profile::from_setting(&body.profile).map_err(|e| ApiError::bad_request(e.to_string()))?;
    let actions = match (body.action, body.tool) {
        // A bash line is checked part by part, as the gate does.
        (Some(action), None) => match action.strip_prefix("tool:bash:") {
            Some(command) => bash_actions(command),
            None => vec![action],
        },
        (None, Some(tool)) => {
            let arguments = body.arguments.unwrap_or(Value::Object(Default::default()));
            actions_for(&tool, &arguments.to_string())
        }
        _ => {
            return Err(ApiError::bad_request(
                "give either \"action\" or \"tool\" (with \"arguments\")",
            ));
        }
    };
    let (decision, explanations) = decide_actions(&profile, &actions);
    let first = explanations
        .iter()
        .find(|e| e.decision == decision)
        .cloned();
    Ok(Json(json!({
        "profile": profile.name(),
        "decision": decision,
        "rule": first.as_ref().and_then(|e| e.pattern.clone()),
        "list": first.as_ref().and_then(|e| e.list),
        "rule_index": first.as_ref().and_then(|e| e.rule_index),
        "reason": first.map(|e| e.reason).unwrap_or_default(),
        "actions": explanations,
    })))
}
