//! `/api/workers/tokens`: per-worker join credentials for dial-in workers (admin
//! only). A token is shown once, when it is created; the store keeps its SHA-256.
//! Revoking one ends every link that joined with it at once.

use axum::Json;
use axum::Router;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{API_USER, ApiError, ApiJson, AppState};
use crate::gate::grants::Role;
use crate::workers::credentials::CredentialError;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/workers/tokens", get(list).post(create))
        .route("/workers/tokens/{name}", delete(revoke))
}

/// Worker credentials decide who may serve agents (their prompts, their users'
/// messages, the provider key through the relay): an admin's to hand out.
fn admin_only(state: &AppState) -> Result<(), ApiError> {
    match state.gate.role_of(Some(API_USER)) {
        Role::Admin => Ok(()),
        role => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "worker credentials are for an admin; this token's user '{API_USER}' is {}",
                role.as_str()
            ),
        )),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CreateBody {
    name: String,
}

async fn create(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<(StatusCode, Json<Value>), ApiError> {
    admin_only(&state)?;
    let token = state
        .worker_credentials
        .create(&body.name, API_USER)
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
    tracing::info!(name = %body.name, "worker credential created");
    Ok((
        StatusCode::CREATED,
        Json(json!({
            "name": body.name,
            "token": token,
            "note": "shown once: give it to the worker as CHORUS_JOIN_TOKEN; only its hash is kept",
        })),
    ))
}

async fn list(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    admin_only(&state)?;
    let tokens = state.worker_credentials.list().await?;
    Ok(Json(json!({ "tokens": tokens })))
}

async fn revoke(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<Value>, ApiError> {
    admin_only(&state)?;
    state.worker_credentials.revoke(&name).await?;
    tracing::warn!(%name, "worker credential revoked; its links are ended");
    Ok(Json(json!({ "name": name, "revoked": true })))
}
