//! `/api/agents/{name}/heartbeat` (`heartbeat` has the mechanics): `GET` shows the
//! agent's heartbeat setting, today's heartbeat tokens against the cap and its
//! heartbeats, newest first; `POST` runs one now, whether or not the periodic one
//! is on, answering with its record (`running`, or `skipped` with the reason).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::agents::active_agent;
use super::{ApiError, AppState};
use crate::heartbeat::HeartbeatError;
use crate::store::HeartbeatCause;

impl From<HeartbeatError> for ApiError {
    fn from(e: HeartbeatError) -> Self {
        match e {
            HeartbeatError::BadRequest(m) => ApiError::bad_request(m),
            HeartbeatError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            HeartbeatError::Store(e) => e.into(),
        }
    }
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    Ok(Json(state.heartbeats.view(&agent).await?))
}

/// "Run one now": 201 with its record (it goes on after the answer; 409 while one goes).
pub(super) async fn run_now(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<impl IntoResponse, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let record = state
        .heartbeats
        .beat(&agent, HeartbeatCause::Manual)
        .await?;
    Ok((StatusCode::CREATED, Json(json!(record))))
}
