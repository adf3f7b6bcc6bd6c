//! `/api/whoami` and the API tokens of people and automation
//! (`/api/users/{user}/tokens`, `/api/tokens`).

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};
use serde_json::json;

use chorus_proto::domain::Backend;

use super::{ApiError, AppState, Caller};
use crate::gate::policy::{Act, allowed};
use crate::store::UserTokenRecord;
use crate::user_tokens;

/// `GET /api/whoami`: the caller's user and role.
pub(super) async fn whoami(caller: Caller) -> Json<serde_json::Value> {
    Json(json!({ "user": caller.user, "role": caller.role.as_str() }))
}

/// `GET /api/session`: the caller's user and role, what that role may do (`may`:
/// the page shows only those controls), the CSRF token of the web session the
/// request came with (null with a bearer token, which needs none), and the feed's
/// position (`event_id`): the page reads what it shows after taking it, then
/// follows `GET /api/events` from it, so nothing in between is lost. With them, the
/// closed sets a form offers: the agent backends and the permission presets.
pub(super) async fn session(
    State(state): State<AppState>,
    caller: Caller,
    csrf: Option<axum::Extension<super::access::CsrfToken>>,
) -> Json<serde_json::Value> {
    let may: Vec<&str> = Act::ALL
        .into_iter()
        .filter(|act| allowed(caller.role, *act))
        .map(Act::as_str)
        .collect();
    Json(json!({
        "user": caller.user,
        "role": caller.role.as_str(),
        "may": may,
        "csrf_token": csrf.map(|axum::Extension(t)| t.0),
        "event_id": state.runs.feed().position(),
        "backends": Backend::ALL.map(Backend::as_str),
        "presets": crate::permissions::PRESETS,
    }))
}

/// A token as listed: never its secret, with the role it has now.
#[derive(Serialize)]
struct TokenView {
    #[serde(flatten)]
    record: UserTokenRecord,
    role: &'static str,
}

fn view(state: &AppState, record: UserTokenRecord) -> TokenView {
    TokenView {
        role: state.gate.role_of(Some(&record.user)).as_str(),
        record,
    }
}

fn checked_user(user: &str) -> Result<(), ApiError> {
    user_tokens::check_user(user).map_err(ApiError::bad_request)
}

/// `GET /api/tokens`: every issued token, revoked ones too.
pub(super) async fn list_tokens(
    State(state): State<AppState>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let tokens = state.store.user_tokens(None).await?;
    let tokens: Vec<TokenView> = tokens.into_iter().map(|t| view(&state, t)).collect();
    Ok(Json(json!({ "tokens": tokens })))
}

/// `GET /api/users/{user}/tokens`: that user's tokens, revoked ones too.
pub(super) async fn list_user_tokens(
    State(state): State<AppState>,
    Path(user): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    checked_user(&user)?;
    let tokens = state.store.user_tokens(Some(&user)).await?;
    let tokens: Vec<TokenView> = tokens.into_iter().map(|t| view(&state, t)).collect();
    Ok(Json(json!({ "tokens": tokens })))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    #[serde(default)]
    label: Option<String>,
}

/// `POST /api/users/{user}/tokens {label?}` → 201 with the token, shown this once.
pub(super) async fn create_token(
    State(state): State<AppState>,
    caller: Caller,
    Path(user): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    checked_user(&user)?;
    let body: CreateBody = if body.iter().all(u8::is_ascii_whitespace) {
        CreateBody::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))?
    };
    let label = body.label.unwrap_or_default().trim().to_string();
    user_tokens::check_label(&label).map_err(ApiError::bad_request)?;
    let issued = user_tokens::issue(&state.store, &user, &label, &caller.user).await?;
    tracing::info!(user = %user, id = %issued.record.id, by = %caller.user, "API token issued");
    let mut body = serde_json::to_value(view(&state, issued.record)).unwrap_or_default();
    body["token"] = json!(issued.token);
    Ok((StatusCode::CREATED, Json(body)))
}

/// `DELETE /api/users/{user}/tokens/{id}`: refused from the next request on.
pub(super) async fn revoke_token(
    State(state): State<AppState>,
    caller: Caller,
    Path((user, id)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    checked_user(&user)?;
    let Some(record) = state.store.revoke_user_token(&user, &id).await? else {
        return Err(ApiError::not_found(format!(
            "'{user}' has no token '{id}' (`chorus user token list {user}` shows them)"
        )));
    };
    tracing::info!(user = %user, id = %id, by = %caller.user, "API token revoked");
    Ok(Json(
        serde_json::to_value(view(&state, record)).unwrap_or_default(),
    ))
}
