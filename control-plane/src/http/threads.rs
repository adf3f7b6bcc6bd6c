//! `/api/agents/{name}/messages` and `/api/agents/{name}/threads`.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde_json::json;
use std::convert::Infallible;
use std::sync::Arc;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use crate::feed::ThreadEvent;
use serde::Deserialize;

use super::agents::active_agent;
use super::{ApiError, ApiJson, AppState, Caller};
use crate::runs::ReplyTo;
use crate::store::ThreadRecord;
use crate::views::{MessageView, ThreadSummary, ThreadView};

/// Longest user message accepted, in bytes.
const MAX_MESSAGE_BYTES: usize = 256 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MessageBody {
    content: String,
    /// The id of a message this one answers: routes it into that message's thread.
    #[serde(default)]
    reply_to: Option<u64>,
}

pub(super) async fn send_message(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    headers: axum::http::HeaderMap,
    ApiJson(body): ApiJson<MessageBody>,
) -> Result<impl IntoResponse, ApiError> {
    if body.content.trim().is_empty() {
        return Err(ApiError::bad_request("content must not be empty"));
    }
    if body.content.len() > MAX_MESSAGE_BYTES {
        return Err(ApiError::bad_request(format!(
            "content is {} bytes; the limit is {MAX_MESSAGE_BYTES}",
            body.content.len()
        )));
    }
    let agent = active_agent(&state, &name).await?;
    // A caller that sends `traceparent` gets the run in its own trace.
    let received = state
        .runs
        .receive_traced(
            &agent,
            &body.content,
            body.reply_to.map(ReplyTo::Message),
            &caller.principal(),
            crate::telemetry::trace_headers(&headers),
        )
        .await?;
    let thread_id = received.thread_id;
    Ok((
        StatusCode::ACCEPTED,
        Json(serde_json::json!({
            "agent": agent.name,
            "thread_id": thread_id,
            "message_id": received.message_id,
            "routed": received.routed.as_string(),
            "url": format!("/api/agents/{}/threads/{thread_id}", agent.name),
        })),
    ))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ListQuery {
    /// `true`: every thread the agent ever had, not only the active and recently ended.
    #[serde(default)]
    all: bool,
}

/// `GET …/threads`: the active threads and those ended within `[threads]
/// retention_secs` (all of them with `?all=true`), with their metrics.
pub(super) async fn list_threads(
    State(state): State<AppState>,
    Path(name): Path<String>,
    query: Result<Query<ListQuery>, QueryRejection>,
) -> Result<Json<Vec<ThreadSummary>>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let agent = active_agent(&state, &name).await?;
    let threads = state.store.threads(&agent.name).await?;
    let mut progress = state.store.threads_progress(&agent.name, None).await?;
    let retention = chrono::Duration::from_std(state.thread_retention).unwrap_or_default();
    let shown_since = chrono::Utc::now() - retention;
    Ok(Json(
        threads
            .into_iter()
            .filter(|t| {
                query.all
                    || t.ended_at
                        .as_deref()
                        .and_then(|e| chrono::DateTime::parse_from_rfc3339(e).ok())
                        .is_none_or(|ended| ended >= shown_since)
            })
            .map(|t| {
                let progress = progress.remove(&t.id);
                ThreadSummary::new(t, progress)
            })
            .collect(),
    ))
}

/// Messages and steps a page holds unless `limit` says otherwise.
const DEFAULT_PAGE_LIMIT: u32 = 100;
/// The most a page may hold.
const MAX_PAGE_LIMIT: u32 = 1000;
/// About how many bytes of messages (and, separately, of step descriptions) one
/// page carries at most; a page always holds at least one of each that remains.
const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ThreadQuery {
    /// The cursor from a page's `next`: `<message id>.<step number>`.
    after: Option<String>,
    limit: Option<String>,
}

/// Where a page starts: after this message id and this step number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Cursor {
    message: i64,
    step: u32,
}

impl ThreadQuery {
    fn parse(&self) -> Result<(Cursor, u32), ApiError> {
        let limit = match &self.limit {
            None => DEFAULT_PAGE_LIMIT,
            Some(text) => text
                .parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PAGE_LIMIT).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "limit must be a whole number from 1 to {MAX_PAGE_LIMIT}, not '{text}'"
                    ))
                })?,
        };
        let cursor = match &self.after {
            None => Cursor::default(),
            Some(text) => text
                .split_once('.')
                .and_then(|(m, s)| {
                    Some(Cursor {
                        message: m.parse::<i64>().ok().filter(|m| *m >= 0)?,
                        step: s.parse().ok()?,
                    })
                })
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "after must be the cursor from a page's `next` (like '120.45'), not '{text}'"
                    ))
                })?,
        };
        Ok((cursor, limit))
    }
}

/// `GET …/threads/{id}`: the thread with a page of its messages and steps, oldest
/// first. `next` (a URL) is set while either list has more; following it until it
/// is null reads both lists whole, each item once.
pub(super) async fn show_thread(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
    query: Result<Query<ThreadQuery>, QueryRejection>,
) -> Result<Json<ThreadView>, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    let (after, limit) = query.parse()?;
    let agent = active_agent(&state, &name).await?;
    let thread = find_thread(&state, &agent.name, &id).await?;
    let id = thread.id;
    let (messages, more_messages) = state
        .store
        .thread_messages_page(&agent.name, id, after.message, limit, MAX_PAGE_BYTES)
        .await?;
    let (steps, more_steps) = state
        .store
        .thread_steps_page(&agent.name, id, after.step, limit, MAX_PAGE_BYTES)
        .await?;
    let usage = state.store.token_usage(&agent.name, Some(id)).await?;
    let progress = state
        .store
        .threads_progress(&agent.name, Some(id))
        .await?
        .remove(&id);
    // Messages no model has seen yet have no place; they follow the last page.
    let pending = if more_messages {
        Vec::new()
    } else {
        state.store.pending_messages(&agent.name, id).await?
    };
    let next = (more_messages || more_steps).then(|| {
        let cursor = Cursor {
            message: messages.last().map_or(after.message, |(id, _)| *id),
            step: steps.last().map_or(after.step, |s| s.number),
        };
        format!(
            "/api/agents/{}/threads/{id}?after={}.{}&limit={limit}",
            agent.name, cursor.message, cursor.step
        )
    });
    // Read after the store, so the open step's text is at least as new as what the
    // store said (the page drops it once that step ends).
    let live = state.runs.feed().streaming(&agent.name, id);
    Ok(Json(ThreadView {
        live,
        agent: agent.name,
        summary: ThreadSummary::new(thread, progress),
        messages: messages
            .into_iter()
            .map(|(_, m)| MessageView::from(m))
            .chain(pending.into_iter().map(MessageView::from))
            .collect(),
        steps: steps.into_iter().map(Into::into).collect(),
        usage,
        next,
    }))
}

/// The thread `id` (as the path gave it) of `agent`, or a 404 that names both.
async fn find_thread(state: &AppState, agent: &str, id: &str) -> Result<ThreadRecord, ApiError> {
    let not_found = || ApiError::not_found(format!("agent '{agent}' has no thread {id}"));
    let id: u64 = id.parse().map_err(|_| not_found())?;
    state.store.thread(agent, id).await?.ok_or_else(not_found)
}

/// `DELETE …/threads/{id}`: kills a thread that is still going (E4). 200 with its
/// new status; 409 when it had ended already (nothing changes); 404 when unknown.
pub(super) async fn kill_thread(
    State(state): State<AppState>,
    caller: Caller,
    Path((name, id)): Path<(String, String)>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let thread = find_thread(&state, &agent.name, &id).await?;
    let id = thread.id;
    if !state
        .runs
        .kill_thread(&agent.name, id, &caller.user)
        .await?
    {
        let status = state
            .store
            .thread(&agent.name, id)
            .await?
            .map_or(thread.status, |t| t.status);
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "thread {id} of '{name}' is {} already; nothing to kill",
                status.as_str()
            ),
        ));
    }
    Ok(Json(
        json!({"agent": agent.name, "thread_id": id, "status": "killed"}),
    ))
}

/// `DELETE …/threads`: kills every thread of the agent that is still going.
pub(super) async fn kill_all(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let mut killed = Vec::new();
    for id in state.runs.active_threads(&agent.name).await {
        if state
            .runs
            .kill_thread(&agent.name, id, &caller.user)
            .await?
        {
            killed.push(id);
        }
    }
    Ok(Json(json!({"agent": agent.name, "killed": killed})))
}

/// What a thread's live stream sends: its events, and a notice when it fell behind.
enum Live {
    Event(Arc<ThreadEvent>),
    Lagged(u64),
}

/// `GET …/threads/{id}/events`: the thread live, as server-sent events. First its
/// current `status`; then `step_started`, `step_ended`, `text` (model output as it
/// streams), `message` and, last, the final `status`, after which the stream ends.
pub(super) async fn thread_events(
    State(state): State<AppState>,
    Path((name, id)): Path<(String, String)>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let not_found = || ApiError::not_found(format!("agent '{name}' has no thread {id}"));
    let id: u64 = id.parse().map_err(|_| not_found())?;
    // Subscribe before reading the status, so an ending in between is not missed.
    let receiver = state.runs.feed().subscribe();
    let thread = state
        .store
        .thread(&agent.name, id)
        .await?
        .ok_or_else(not_found)?;
    let finished = thread.status.is_finished();
    let first = Event::default().event("status").data(
        json!({"status": thread.status.as_str(), "error": thread.error,
                   "failure_kind": thread.failure_kind})
        .to_string(),
    );
    let agent_name = agent.name;
    let live = BroadcastStream::new(receiver)
        .filter_map(move |item| {
            let item = match item {
                Ok(event) if event.agent == agent_name && event.thread_id == Some(id) => {
                    Some(Live::Event(event))
                }
                Ok(_) => None,
                Err(BroadcastStreamRecvError::Lagged(missed)) => Some(Live::Lagged(missed)),
            };
            std::future::ready(item)
        })
        .boxed();
    // Yield events up to and including the final status, then end at once (not at
    // the next event, which never comes).
    let live = futures::stream::unfold((live, finished), |(mut events, done)| async move {
        if done {
            return None;
        }
        let item = events.next().await?;
        let done = matches!(&item, Live::Event(event) if event.is_final());
        Some((item, (events, done)))
    })
    .map(|item| {
        Ok(match item {
            Live::Event(event) => Event::default()
                .id(event.id.clone())
                .event(event.kind())
                .data(event.event.data().to_string()),
            Live::Lagged(missed) => Event::default().event("lagged").data(
                json!({"missed": missed, "hint": "re-read the thread for what was missed"})
                    .to_string(),
            ),
        })
    });
    let stream = futures::stream::once(std::future::ready(Ok(first))).chain(live);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(after: Option<&str>, limit: Option<&str>) -> ThreadQuery {
        ThreadQuery {
            after: after.map(str::to_string),
            limit: limit.map(str::to_string),
        }
    }

    #[test]
    fn the_defaults_read_the_first_page() {
        let (cursor, limit) = query(None, None).parse().unwrap();
        assert_eq!((cursor, limit), (Cursor::default(), DEFAULT_PAGE_LIMIT));
        let (cursor, limit) = query(Some("120.45"), Some("1000")).parse().unwrap();
        assert_eq!(
            (cursor, limit),
            (
                Cursor {
                    message: 120,
                    step: 45
                },
                1000
            )
        );
    }

    #[test]
    fn bad_limits_and_cursors_are_refused_with_what_is_allowed() {
        for bad in ["0", "1001", "-1", "ten", ""] {
            let Err(e) = query(None, Some(bad)).parse() else {
                panic!("limit {bad:?} was accepted");
            };
            assert!(
                e.message
                    .contains("limit must be a whole number from 1 to 1000"),
                "{}",
                e.message
            );
        }
        for bad in ["12", "a.b", "-1.2", "1.-2", "1.2.3"] {
            let Err(e) = query(Some(bad), None).parse() else {
                panic!("cursor {bad:?} was accepted");
            };
            assert!(
                e.message.contains("after must be the cursor"),
                "{}",
                e.message
            );
        }
    }
}
