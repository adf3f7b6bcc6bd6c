//! `/api/workers/tokens`: per-worker join credentials for dial-in workers (admin
//! only, `Act::ManageWorkers`: they decide who may serve agents, their prompts, their
//! users' messages and the provider key through the relay). A token is shown once, when it is created; the store keeps its SHA-256.
//! Revoking one ends every link that joined with it at once.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{ApiError, ApiJson, AppState, Caller};
use crate::workers::credentials::CredentialError;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    name: String,
}

pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    let token = state
        .worker_credentials
        .create(&body.name, &caller.user)
        .await
        .map_err(|e| match e {
            CredentialError::InvalidName(m) => ApiError::bad_request(m),
            CredentialError::Store(e) => e.into(),
            CredentialError::Random(e) => ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                format!("cannot make a token: {e}"),
            ),
        })?;
    tracing::info!(name = %body.name, by = %caller.user, "worker credential created");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "name": body.name,
            "token": token,
            "note": "shown once: give it to the worker as CHORUS_JOIN_TOKEN; only its hash is kept",
        })),
    ))
}

pub(super) async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    let tokens = state.worker_credentials.list().await?;
    Ok(Json(json!({ "tokens": tokens })))
}

pub(super) async fn revoke(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    state.worker_credentials.revoke(&name).await?;
    tracing::warn!(%name, "worker credential revoked; its links are ended");
    Ok(Json(json!({ "name": name, "revoked": true })))
}
