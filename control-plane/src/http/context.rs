//! `/api/agents/{name}/context/…`: save, clear and restore an agent's context, and
//! list its saved sessions (SPEC F2–F4).

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::agents::active_agent;
use super::{ApiError, ApiJson, AppState, Caller};
use crate::sessions::SessionError;
use crate::sessions::file::Trigger;
use crate::store::{DISK_FULL, SessionRecord};

impl From<SessionError> for ApiError {
    fn from(e: SessionError) -> Self {
        match e {
            SessionError::NothingToSave(m) => Self::new(StatusCode::CONFLICT, "nothing_to_save", m),
            SessionError::NotFound(m) => Self::not_found(m),
            SessionError::InvalidInput(m) => Self::bad_request(m),
            SessionError::FileMissing(m) => {
                Self::new(StatusCode::NOT_FOUND, "session_file_missing", m)
            }
            SessionError::FileCorrupt(m) => {
                Self::new(StatusCode::UNPROCESSABLE_ENTITY, "session_file_corrupt", m)
            }
            SessionError::Files {
                message,
                disk_full: true,
            } => Self::new(
                StatusCode::INSUFFICIENT_STORAGE,
                "disk_full",
                format!("{DISK_FULL} ({message})"),
            ),
            SessionError::Files { message, .. } => {
                Self::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
            }
            SessionError::Store(e) => e.into(),
        }
    }
}

#[derive(Serialize)]
struct SessionView {
    id: String,
    agent: String,
    description: String,
    trigger: String,
    saved_at: String,
    message_count: u64,
    /// The file's name in the agent's `sessions/` directory.
    file: String,
}

impl From<SessionRecord> for SessionView {
    fn from(s: SessionRecord) -> Self {
        SessionView {
            id: s.id,
            agent: s.agent_name,
            description: s.description,
            trigger: s.trigger,
            saved_at: s.saved_at,
            message_count: s.message_count,
            file: s.file_name,
        }
    }
}

/// A JSON body that may also be left out entirely (as `{}`).
fn optional_body<T: DeserializeOwned + Default>(body: &Bytes) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid: {e}")))
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct SaveBody {
    description: Option<String>,
}

/// `POST …/context/save {description?}`: 201 with the session; the context is kept.
pub(super) async fn save(
    State(state): State<AppState>,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<impl IntoResponse, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let body: SaveBody = optional_body(&body)?;
    let session = state
        .sessions
        .save(&agent, body.description, Trigger::ManualSave)
        .await?;
    Ok((
        StatusCode::CREATED,
        Json(json!({ "session": SessionView::from(session) })),
    ))
}

/// `POST …/context/clear`: the context is saved (trigger `context_clear`) when there
/// is one, then cleared; idle threads end `completed`.
pub(super) async fn clear(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let outcome = state.sessions.clear(&agent).await?;
    Ok(Json(json!({
        "cleared_at": outcome.cleared.cleared_at,
        "threads_completed": outcome.cleared.threads_completed,
        "saved": outcome.saved.map(SessionView::from),
    })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RestoreBody {
    session_id: String,
}

/// `POST …/context/restore {session_id}`: the current context is saved and cleared,
/// and one new idle thread holds the session; reply to `message_id` to continue.
pub(super) async fn restore(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<RestoreBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let restored = state
        .sessions
        .restore(&agent, body.session_id.trim(), &caller.user)
        .await?;
    // A restored context waits for the user: its idle timer starts now.
    state.runs.touch(&agent.name).await;
    Ok(Json(json!({
        "thread_id": restored.thread_id,
        "message_id": restored.message_id,
        "session": SessionView::from(restored.session),
        "saved_before": restored.saved_before.map(SessionView::from),
    })))
}

/// Sessions a page holds unless `limit` says otherwise, and the most it may hold.
const DEFAULT_LIMIT: u32 = 100;
const MAX_LIMIT: u32 = 1000;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HistoryQuery {
    /// The cursor from a page's `next`.
    after: Option<String>,
    limit: Option<String>,
}

/// `GET …/context/history`: saved sessions, newest first, a page at a time (`next`
/// is the URL of the following page while there is one).
pub(super) async fn history(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<HistoryQuery>, QueryRejection>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let agent = active_agent(&state, &name).await?;
    let limit = match &query.limit {
        None => DEFAULT_LIMIT,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=MAX_LIMIT).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "limit must be a whole number from 1 to {MAX_LIMIT}, not '{text}'"
                ))
            })?,
    };
    // The cursor is `<saved_at>~<id>` of the last session of the previous page.
    let after = match &query.after {
        None => None,
        Some(text) => Some(text.split_once('~').ok_or_else(|| {
            ApiError::bad_request(format!(
                "after must be the cursor from a page's `next`, not '{text}'"
            ))
        })?),
    };
    let mut sessions = state
        .sessions
        .history(&agent.name, after, limit + 1)
        .await?;
    let more = sessions.len() > limit as usize;
    sessions.truncate(limit as usize);
    let next = match (more, sessions.last()) {
        (true, Some(last)) => Some(format!(
            "/api/agents/{}/context/history?after={}~{}&limit={limit}",
            agent.name, last.saved_at, last.id
        )),
        _ => None,
    };
    Ok(Json(json!({
        "sessions": sessions.into_iter().map(SessionView::from).collect::<Vec<_>>(),
        "next": next,
    })))
}
