//! `/api/agents/{name}/grants`: tools granted to an agent at run time (see
//! `agents::grants` for what a grant allows and who may make one).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, AppState, Caller};
use crate::store::GrantRecord;

#[derive(Serialize)]
pub(super) struct GrantsView {
    grants: Vec<GrantRecord>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GrantBody {
    /// Tool names (Chorus, wire or older names).
    tools: Vec<String>,
}

pub(super) async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<GrantsView>, ApiError> {
    let grants = state.agents.grants(&name).await?;
    Ok(Json(GrantsView { grants }))
}

/// 201 with every grant the agent has now.
pub(super) async fn grant(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<GrantBody>,
) -> Result<impl IntoResponse, ApiError> {
    let grants = state
        .agents
        .grant_tools(&name, &body.tools, caller.role, &caller.principal())
        .await?;
    Ok((StatusCode::CREATED, Json(GrantsView { grants })))
}

/// 200 with the grants left.
pub(super) async fn revoke(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, tool)): Path<(String, String)>,
) -> Result<Json<GrantsView>, ApiError> {
    state
        .agents
        .revoke_tool(&name, &tool, &caller.principal())
        .await?;
    let grants = state.agents.grants(&name).await?;
    Ok(Json(GrantsView { grants }))
}
