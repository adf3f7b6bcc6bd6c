//! An agent's identity and memory files (`crate::memory`): read them, replace an
//! identity file, list memory entries with their provenance, read a memory file,
//! search the memory, retract an entry. Every change is audited and reaches the agent's live runs at
//! their next model call.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::agents::active_agent;
use super::{ApiError, ApiJson, AppState, Caller};
use crate::memory::MemoryError;
use crate::memory::vectors::{ReindexAnswer, SearchAnswer};
use crate::store::SearchSource;
use chorus_proto::tools::IdentityFile;

impl From<MemoryError> for ApiError {
    fn from(e: MemoryError) -> Self {
        match e {
            MemoryError::NotFound(m) => ApiError::not_found(m),
            MemoryError::Invalid(m) => ApiError::bad_request(m),
            MemoryError::Io(m) => ApiError::internal(m),
        }
    }
}

/// `GET /api/agents/{name}/identity`: `{"soul", "user", "heartbeat"}`.
pub(super) async fn identity(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    active_agent(&state, &name).await?;
    let files = state.agents.memory().identity(&name).await?;
    let map: serde_json::Map<String, serde_json::Value> = files
        .into_iter()
        .map(|(file, text)| (file.key().to_string(), text.into()))
        .collect();
    Ok(Json(map.into()))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct IdentityBody {
    content: String,
}

/// `PUT /api/agents/{name}/identity/{file}` (`SOUL.md`, `USER.md`, `HEARTBEAT.md`).
pub(super) async fn set_identity(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, file)): Path<(String, String)>,
    ApiJson(body): ApiJson<IdentityBody>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let file = IdentityFile::parse(&file).ok_or_else(|| {
        ApiError::bad_request(format!(
            "'{file}' is not an identity file: use SOUL.md, USER.md or HEARTBEAT.md"
        ))
    })?;
    active_agent(&state, &name).await?;
    state
        .agents
        .memory()
        .set_identity(&name, file, &body.content, &caller.principal(), None)
        .await?;
    Ok(Json(serde_json::json!({
        "file": file.file_name(),
        "size": body.content.len(),
    })))
}

#[derive(Serialize)]
pub(super) struct MemoryView {
    size: usize,
    limit: usize,
    files: Vec<FileView>,
    entries: Vec<EntryView>,
}

#[derive(Serialize)]
struct FileView {
    path: String,
    size: u64,
}

#[derive(Serialize)]
struct EntryView {
    /// `null` for a line written by hand without a marker.
    id: Option<String>,
    text: String,
    file: String,
    line: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    thread_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    call_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    by: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    at: Option<String>,
}

/// `GET /api/agents/{name}/memory`: sizes, files, and every entry with provenance.
pub(super) async fn list(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<MemoryView>, ApiError> {
    active_agent(&state, &name).await?;
    let listing = state.agents.memory().list(&name).await?;
    Ok(Json(MemoryView {
        size: listing.size,
        limit: listing.limit,
        files: listing
            .files
            .into_iter()
            .map(|(name, size)| FileView {
                path: format!("memory/{name}"),
                size,
            })
            .collect(),
        entries: listing
            .entries
            .into_iter()
            .map(|(file, entry)| {
                let p = entry.provenance.unwrap_or_default();
                EntryView {
                    id: (!p.id.is_empty()).then_some(p.id),
                    text: entry.text,
                    file: format!("memory/{file}"),
                    line: entry.line,
                    thread_id: p.thread_id,
                    call_id: p.call_id,
                    message_id: p.message_id,
                    by: p.by,
                    at: p.at,
                }
            })
            .collect(),
    }))
}

/// `GET /api/agents/{name}/memory/{path}`: a memory file's text.
pub(super) async fn file(
    State(state): State<AppState>,
    Path((name, path)): Path<(String, String)>,
) -> Result<String, ApiError> {
    active_agent(&state, &name).await?;
    Ok(state.agents.memory().read_file(&name, &path).await?)
}

/// `DELETE /api/agents/{name}/memory/{id}`: retracts one entry (audited).
pub(super) async fn forget(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    active_agent(&state, &name).await?;
    state
        .agents
        .memory()
        .forget(&name, &id, &caller.principal())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SearchParams {
    q: String,
    #[serde(default)]
    k: Option<usize>,
    /// `memory,session,message` (any of them; all when absent).
    #[serde(default)]
    sources: Option<String>,
}

/// Parses `sources=memory,session,message`, naming what is not a source.
pub(super) fn parse_sources(text: &str) -> Result<Vec<SearchSource>, ApiError> {
    text.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            SearchSource::parse(s).ok_or_else(|| {
                ApiError::bad_request(format!(
                    "'{}' is not a search source: use memory, session or message",
                    s.trim()
                ))
            })
        })
        .collect()
}

/// `GET /api/agents/{name}/memory/search?q=…&k=…&sources=…`: ranked hits, each
/// saying where it is, and which ranking gave them (`"ranking": "hybrid"|"lexical"`,
/// with `ranking_note` saying why it is lexical).
pub(super) async fn search(
    State(state): State<AppState>,
    Path(name): Path<String>,
    params: Result<Query<SearchParams>, QueryRejection>,
) -> Result<Json<SearchAnswer>, ApiError> {
    let Query(params) = params.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; this endpoint takes ?q=<words>, ?k=<how many> and ?sources=memory,session,message",
            e.body_text()
        ))
    })?;
    active_agent(&state, &name).await?;
    let sources = parse_sources(params.sources.as_deref().unwrap_or_default())?;
    let answer = state
        .agents
        .memory()
        .search(&name, &params.q, params.k, &sources)
        .await?;
    Ok(Json(answer))
}

/// `POST /api/agents/{name}/memory/reindex`: builds the agent's search index from
/// its files and saved sessions again (the same answers as before, unless the files
/// changed behind it), and its vectors with the embedding model configured now →
/// `{"reindexed": true, "ranking", "embedding_model"?, "embedded", "ranking_note"?}`.
pub(super) async fn reindex(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ReindexAnswer>, ApiError> {
    active_agent(&state, &name).await?;
    let answer = state.agents.memory().rebuild_index(&name).await?;
    Ok(Json(answer))
}
