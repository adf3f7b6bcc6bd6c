//! `/api/agents/{name}/schedules`: an agent's schedules (`schedules` has the
//! mechanics). Bodies: `{prompt, cron, timezone}` or `{prompt, at}`, with
//! `on_missed` and `paused` optional; answers carry `id` and `next_run_at` (UTC).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde_json::{Value, json};

use super::agents::active_agent;
use super::{ApiError, ApiJson, AppState, Caller};
use crate::schedules::{ScheduleError, ScheduleRequest, view};

impl From<ScheduleError> for ApiError {
    fn from(e: ScheduleError) -> Self {
        match e {
            ScheduleError::BadRequest(m) => ApiError::bad_request(m),
            ScheduleError::NotFound(m) => ApiError::not_found(m),
            ScheduleError::Conflict(m) => ApiError::new(StatusCode::CONFLICT, "conflict", m),
            ScheduleError::Store(e) => e.into(),
        }
    }
}

pub(super) async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let schedules = state.schedules.list(&agent).await?;
    Ok(Json(
        json!({ "schedules": schedules.iter().map(view).collect::<Vec<_>>() }),
    ))
}

/// 201 with the schedule.
pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ScheduleRequest>,
) -> Result<impl IntoResponse, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let created = state
        .schedules
        .create(&agent, body, &caller.principal())
        .await?;
    Ok((StatusCode::CREATED, Json(view(&created))))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, u64)>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    Ok(Json(view(&state.schedules.get(&agent, id).await?)))
}

pub(super) async fn update(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, u64)>,
    ApiJson(body): ApiJson<ScheduleRequest>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    Ok(Json(view(&state.schedules.update(&agent, id, body).await?)))
}

/// 204.
pub(super) async fn delete(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, u64)>,
) -> Result<StatusCode, ApiError> {
    let agent = active_agent(&state, &name).await?;
    state.schedules.delete(&agent, id).await?;
    Ok(StatusCode::NO_CONTENT)
}

pub(super) async fn runs(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, u64)>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    Ok(Json(
        json!({ "runs": state.schedules.runs_of(&agent, id).await? }),
    ))
}

/// "Run now": 201 with the run (202-like: it goes on after the answer).
pub(super) async fn run_now(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, u64)>,
) -> Result<impl IntoResponse, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let run = state.schedules.run_now(&agent, id).await?;
    Ok((StatusCode::CREATED, Json(json!(run))))
}
