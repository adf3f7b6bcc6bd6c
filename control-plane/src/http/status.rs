//! `GET /api/status`: what this Chorus sees of itself (its providers as it last
//! checked them, its default model and where it routes, its agents and workers,
//! Discord, the worker link and the store), the same `doctor::Diagnosis` its start
//! block prints, so `chorus status` in another shell reports the server, not itself.

use axum::Json;
use axum::extract::State;
use serde_json::Value;

use super::{ApiError, AppState};
use crate::doctor::Live;

pub(super) async fn status(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let snapshot = state.catalog.snapshot().await;
    let live = Live {
        agents: state.store.active_agents().await?.len() as u64,
        workers: state.workers.counts(),
        providers_checked_at: snapshot.refreshed_at.clone(),
        discord: state
            .setup
            .settings
            .discord
            .is_some()
            .then(|| state.discord_state.borrow().clone()),
    };
    let mut diagnosis = state.setup.diagnosis(&snapshot, live);
    state.workers.backends().probe_local_once().await;
    diagnosis.backends = state.workers.backends().status();
    let mut body = serde_json::to_value(&diagnosis)
        .map_err(|e| ApiError::internal(format!("cannot show the status: {e}")))?;
    // For API users: the two answers `chorus status` derives.
    body["usable"] = Value::Bool(diagnosis.usable());
    body["next"] = serde_json::json!(diagnosis.next_steps());
    Ok(Json(body))
}
