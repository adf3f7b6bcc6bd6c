//! `/api/agents/{name}/tasks`: an agent's background tasks (bash commands started
//! with `run_in_background`), running ones first.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::agents::active_agent;
use super::{ApiError, AppState};

/// Ended tasks listed after the running ones, at most.
const LISTED: u32 = 100;

pub(super) async fn list_tasks(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let tasks = state.store.tasks(&agent.name, LISTED).await?;
    Ok(Json(json!({ "tasks": tasks })))
}
