//! `GET /api/events`: the live feed of every thread (or one agent's, `?agent=`), as
//! server-sent events with ids. A client that reconnects with `Last-Event-ID` (or
//! `?last_event_id=`) first gets every event it missed, once, then live ones; when
//! the gap is no longer kept, a `reset` event says so and the client re-reads.

use std::convert::Infallible;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;
use tokio_stream::wrappers::BroadcastStream;
use tokio_stream::wrappers::errors::BroadcastStreamRecvError;

use super::agents::active_agent;
use super::{ApiError, AppState};
use crate::feed::{Replay, ThreadEvent};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct EventsQuery {
    agent: Option<String>,
    last_event_id: Option<String>,
}

/// One feed event as SSE: `id`, the kind as the event name, and the data with the
/// agent and thread it belongs to.
fn to_sse(event: &ThreadEvent) -> Event {
    Event::default()
        .id(event.id.clone())
        .event(event.kind())
        .data(event.data_with_origin().to_string())
}

fn reset(reason: String) -> Event {
    Event::default()
        .event("reset")
        .data(json!({ "reason": reason }).to_string())
}

pub(super) async fn events(
    State(state): State<AppState>,
    headers: HeaderMap,
    query: Result<Query<EventsQuery>, QueryRejection>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    let Query(query) = query.map_err(|e| {
        ApiError::bad_request(format!(
            "{}; this endpoint takes ?agent=<name> and ?last_event_id=<id>",
            e.body_text()
        ))
    })?;
    let agent = match &query.agent {
        Some(name) => Some(active_agent(&state, name).await?.name),
        None => None,
    };
    let last = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .or(query.last_event_id);
    let feed = state.runs.feed();
    let (replay, receiver) = match &last {
        Some(last) => feed.subscribe_after(last),
        None => (Replay::Missed(Vec::new()), feed.subscribe()),
    };
    let wanted = move |event: &ThreadEvent| agent.as_deref().is_none_or(|a| a == event.agent);
    let wanted_live = wanted.clone();
    let first: Vec<Event> = match replay {
        Replay::Missed(missed) => missed
            .iter()
            .filter(|e| wanted(e))
            .map(|e| to_sse(e))
            .collect(),
        Replay::Reset(reason) => vec![reset(reason)],
    };
    let live = BroadcastStream::new(receiver).filter_map(move |item| {
        std::future::ready(match item {
            Ok(event) => wanted_live(&event).then(|| to_sse(&event)),
            Err(BroadcastStreamRecvError::Lagged(missed)) => Some(reset(format!(
                "this client fell {missed} events behind and they were dropped; re-read what you show"
            ))),
        })
    });
    let stream = futures::stream::iter(first).chain(live).map(Ok);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
