//! `/api/agents/{name}/jobs`: an agent's background jobs (bash commands started
//! with `run_in_background`), running ones first. `/api/agents/{name}/tasks`, the
//! path from before jobs had their name, answers the same list as `{"tasks": [...]}`
//! for the clients that know it.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::agents::active_agent;
use super::{ApiError, AppState};
use crate::store::JobRecord;

/// Ended jobs listed after the running ones, at most.
const LISTED: u32 = 100;

async fn of(state: &AppState, name: &str) -> Result<Vec<JobRecord>, ApiError> {
    let agent = active_agent(state, name).await?;
    Ok(state.store.jobs(&agent.name, LISTED).await?)
}

pub(super) async fn list_jobs(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "jobs": of(&state, &name).await? })))
}

/// The old path: the same list under its old key.
pub(super) async fn list_jobs_as_tasks(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!({ "tasks": of(&state, &name).await? })))
}
