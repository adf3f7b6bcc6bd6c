//! The model proxy, below `/llm` on the run endpoint: the CLI's model requests go to
//! the control plane's relay with the *worker's* credential (the CLI holds only the
//! run's), streamed both ways unbuffered.
//!
//! Mapping (the relay serves `<relay_path>/<provider endpoint>`, `relay_path` being
//! `/llm/<provider>`): Claude Code, with `ANTHROPIC_BASE_URL=<endpoint>/llm`, asks
//! `/llm/v1/messages` → `<relay_path>/v1/messages` (Anthropic's endpoints sit below
//! the bare host); OpenCode, with `baseURL=<endpoint>/llm/v1`, asks
//! `/llm/v1/chat/completions` → `<relay_path>/chat/completions` (the relay's base of
//! an OpenAI-format provider already ends in its `/v1`). The query string is kept;
//! only `content-type`, `accept`, `anthropic-beta` and `anthropic-version` are
//! passed on (the CLI's key headers are dropped).
//!
//! Slow upstreams: nothing here cuts a slow answer (no read or total timeout; the
//! CLI's own request timeout applies). While a streamed answer (`text/event-stream`)
//! is silent for [`KEEP_ALIVE_EVERY`] between two events, the proxy sends an SSE
//! comment (`: keep-alive`), which SSE readers skip, so nothing idle-times the
//! connection out; inside an event it sends nothing (that would corrupt it).
//!
//! Rate limits: the provider's 429 passes to the CLI as it came (it retries as it
//! likes); after [`GIVE_UP_AFTER_429S`] in a row the driver stops the CLI and fails
//! the run as a model error saying so, since OpenCode retries a 429 forever and
//! prints nothing meanwhile.
//!
//! Turn end: once a tool that ends the turn was called successfully, the proxy
//! answers every further model request itself with a minimal final reply in the
//! route's format (no content, `end_turn` / `stop`), so the CLI ends cleanly and its
//! session keeps the tool result.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use chorus_proto::domain::ModelRoute;
use futures::TryStreamExt;
use serde_json::json;

use tokio::sync::watch;

use crate::model::relay::RelayClients;
use crate::tool_loop::LiveAgent;

/// What the proxy forwards with: the agent's model route (live), the relay and the
/// worker's credential, and whether the turn has ended (set by the tool endpoint).
pub struct Upstream {
    pub agent: watch::Receiver<LiveAgent>,
    pub relay: RelayClients,
    pub turn_ended: Arc<AtomicBool>,
    /// The run's bound on model calls (the tool loop's iteration cap): past it the
    /// proxy ends the CLI's turn itself and says so in `over_limit`.
    pub max_model_calls: u32,
    pub model_calls: AtomicU32,
    pub over_limit: Arc<AtomicBool>,
    /// Model calls answered 429 in a row.
    pub rate_limited_in_a_row: AtomicU32,
    /// Set once [`GIVE_UP_AFTER_429S`] calls in a row were rate-limited, saying so:
    /// the driver then ends the CLI (some CLIs retry a 429 forever, silently).
    pub gave_up: watch::Sender<Option<String>>,
}

/// Model calls in a row the provider may rate-limit before the run gives up.
pub const GIVE_UP_AFTER_429S: u32 = 8;

/// The proxy's routes, below `/llm`.
pub fn router(upstream: Arc<Upstream>) -> axum::Router {
    axum::Router::new()
        .route("/llm/{*rest}", axum::routing::any(forward))
        .with_state(upstream)
}

/// Request headers passed on to the relay.
const FORWARDED: &[&str] = &[
    "content-type",
    "accept",
    "anthropic-beta",
    "anthropic-version",
];

/// Largest request body read when the proxy answers a request itself.
const MAX_OWN_ANSWER_BODY: usize = 32 * 1024 * 1024;

/// The relay URL for a CLI's request path below `/llm/` (`rest`, no leading slash)
/// on `route`. Pure.
pub fn relay_url(
    control_plane: &str,
    route: &ModelRoute,
    rest: &str,
    query: Option<&str>,
) -> String {
    let rest = rest.trim_start_matches('/');
    let rest = if route.api == ModelRoute::OPENAI_CHAT {
        rest.strip_prefix("v1/").unwrap_or(rest)
    } else {
        rest
    };
    let mut url = format!(
        "{}{}/{rest}",
        control_plane.trim_end_matches('/'),
        route.relay_path.trim_end_matches('/')
    );
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    url
}

async fn forward(
    State(shared): State<Arc<Upstream>>,
    Path(rest): Path<String>,
    request: Request,
) -> Response {
    let route = shared.agent.borrow().model.route.clone();
    let over = shared.model_calls.fetch_add(1, Ordering::SeqCst) >= shared.max_model_calls;
    if over {
        shared.over_limit.store(true, Ordering::SeqCst);
    }
    if over || shared.turn_ended.load(Ordering::SeqCst) {
        let body = axum::body::to_bytes(request.into_body(), MAX_OWN_ANSWER_BODY)
            .await
            .unwrap_or_default();
        let wants_stream = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v.get("stream").and_then(serde_json::Value::as_bool))
            .unwrap_or(false);
        return final_reply(&route, wants_stream);
    }
    let relay = &shared.relay;
    let url = relay_url(relay.control_plane(), &route, &rest, request.uri().query());
    let method = request.method().clone();
    // The worker's credential, the way the route's own clients send it.
    let upstream = relay.http().request(method, &url);
    let mut upstream = if route.api == ModelRoute::ANTHROPIC_MESSAGES {
        upstream.header("x-api-key", relay.credential())
    } else {
        upstream.bearer_auth(relay.credential())
    };
    for name in FORWARDED {
        if let Some(value) = request.headers().get(*name) {
            upstream = upstream.header(*name, value);
        }
    }
    let body = request.into_body().into_data_stream();
    let sent = upstream.body(reqwest::Body::wrap_stream(body)).send().await;
    let response = match sent {
        Ok(response) => response,
        Err(e) => {
            return (
                StatusCode::BAD_GATEWAY,
                axum::Json(json!({"error": {"type": "api_error", "message": format!("the worker cannot reach the control plane's model relay: {e}")}})),
            )
                .into_response();
        }
    };
    note_rate_limit(&shared, &response);
    let mut answer = Response::builder().status(response.status().as_u16());
    for (name, value) in response.headers() {
        let name = name.as_str();
        if matches!(
            name,
            "content-type" | "retry-after" | "retry-after-ms" | "request-id" | "x-request-id"
        ) || name.starts_with("anthropic-")
            || name.starts_with("x-ratelimit")
            || name.starts_with("x-chorus")
        {
            answer = answer.header(name, value.as_bytes());
        }
    }
    let streamed = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let stream = response.bytes_stream().map_err(std::io::Error::other);
    let body = if streamed {
        Body::from_stream(with_keep_alive(stream, KEEP_ALIVE_EVERY))
    } else {
        Body::from_stream(stream)
    };
    answer
        .body(body)
        .unwrap_or_else(|_| StatusCode::BAD_GATEWAY.into_response())
}

/// Counts 429s in a row (any success resets) and gives up at the bound.
fn note_rate_limit(shared: &Upstream, response: &reqwest::Response) {
    let status = response.status();
    if status.as_u16() != 429 {
        if status.is_success() {
            shared.rate_limited_in_a_row.store(0, Ordering::SeqCst);
        }
        return;
    }
    let in_a_row = shared.rate_limited_in_a_row.fetch_add(1, Ordering::SeqCst) + 1;
    if in_a_row >= GIVE_UP_AFTER_429S {
        let wait = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(|v| format!("; it asked to wait {v} s"))
            .unwrap_or_default();
        shared.gave_up.send_replace(Some(format!(
            "{in_a_row} model calls in a row were answered 429 (rate limited){wait}"
        )));
    }
}

/// How long a streamed answer may be silent between events before the proxy sends
/// a keep-alive comment.
pub const KEEP_ALIVE_EVERY: std::time::Duration = std::time::Duration::from_secs(15);

/// An SSE comment: readers skip it.
pub const KEEP_ALIVE: &[u8] = b": keep-alive\n\n";

/// `upstream`'s chunks as they come; and [`KEEP_ALIVE`] after each `every` of
/// silence, but only where an event has just ended (or before the first), never in
/// the middle of one.
pub fn with_keep_alive<S>(
    upstream: S,
    every: std::time::Duration,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> + Send
where
    S: futures::Stream<Item = Result<axum::body::Bytes, std::io::Error>> + Send + Unpin + 'static,
{
    use futures::StreamExt;
    struct Relayed<S> {
        upstream: S,
        /// The last bytes sent (enough to see an event's blank line).
        tail: Vec<u8>,
        done: bool,
    }
    fn between_events(tail: &[u8]) -> bool {
        tail.is_empty() || tail.ends_with(b"\n\n") || tail.ends_with(b"\r\n\r\n")
    }
    let start = Relayed {
        upstream,
        tail: Vec::new(),
        done: false,
    };
    futures::stream::unfold(start, move |mut relayed| async move {
        if relayed.done {
            return None;
        }
        loop {
            match tokio::time::timeout(every, relayed.upstream.next()).await {
                Ok(Some(Ok(chunk))) => {
                    relayed
                        .tail
                        .extend_from_slice(&chunk[chunk.len().saturating_sub(4)..]);
                    let excess = relayed.tail.len().saturating_sub(4);
                    relayed.tail.drain(..excess);
                    return Some((Ok(chunk), relayed));
                }
                Ok(Some(Err(e))) => {
                    relayed.done = true;
                    return Some((Err(e), relayed));
                }
                Ok(None) => return None,
                Err(_silent) if between_events(&relayed.tail) => {
                    return Some((Ok(axum::body::Bytes::from_static(KEEP_ALIVE)), relayed));
                }
                Err(_silent) => continue,
            }
        }
    })
}

/// The reply that ends the CLI's turn: no content, a clean stop, in the route's
/// format, streamed or not as the request asked.
pub fn final_reply(route: &ModelRoute, stream: bool) -> Response {
    let (content_type, body) = final_reply_body(route, stream);
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The content type and body of [`final_reply`]. Pure.
pub fn final_reply_body(route: &ModelRoute, stream: bool) -> (&'static str, String) {
    let model = route.model.as_str();
    let anthropic = route.api == ModelRoute::ANTHROPIC_MESSAGES;
    match (anthropic, stream) {
        (true, true) => {
            let start = json!({"type": "message_start", "message": {
                "id": "msg_chorus_turn_end", "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}});
            let delta = json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": 0}});
            let stop = json!({"type": "message_stop"});
            (
                "text/event-stream",
                format!(
                    "event: message_start\ndata: {start}\n\nevent: message_delta\ndata: {delta}\n\nevent: message_stop\ndata: {stop}\n\n"
                ),
            )
        }
        (true, false) => (
            "application/json",
            json!({"id": "msg_chorus_turn_end", "type": "message", "role": "assistant",
                "model": model, "content": [], "stop_reason": "end_turn", "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}})
            .to_string(),
        ),
        (false, true) => {
            let chunk = json!({"id": "chatcmpl-chorus-turn-end", "object": "chat.completion.chunk",
                "created": 0, "model": model,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": "stop"}]});
            (
                "text/event-stream",
                format!("data: {chunk}\n\ndata: [DONE]\n\n"),
            )
        }
        (false, false) => (
            "application/json",
            json!({"id": "chatcmpl-chorus-turn-end", "object": "chat.completion", "created": 0,
                "model": model,
                "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}})
            .to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Silence between events brings keep-alive comments (the upstream sends nothing
    /// until one came); silence inside an event brings none; the events themselves
    /// pass unchanged.
    #[tokio::test]
    async fn a_silent_stream_is_kept_alive_between_events_only() {
        use futures::StreamExt;
        type Item = Result<axum::body::Bytes, std::io::Error>;
        async fn next_text<S: futures::Stream<Item = Item> + Unpin>(s: &mut S) -> Option<String> {
            s.next()
                .await
                .map(|item| String::from_utf8(item.unwrap().to_vec()).unwrap())
        }
        let every = std::time::Duration::from_millis(20);
        let (tx, rx) = futures::channel::mpsc::unbounded::<Item>();
        let mut relayed = Box::pin(with_keep_alive(rx, every));
        let chunk = |text: &'static str| Ok(axum::body::Bytes::from_static(text.as_bytes()));
        // Before the first byte: kept alive.
        assert_eq!(
            next_text(&mut relayed).await.as_deref(),
            Some(": keep-alive\n\n")
        );
        tx.unbounded_send(chunk("event: a\ndata: 1\n\n")).unwrap();
        assert_eq!(
            next_text(&mut relayed).await.as_deref(),
            Some("event: a\ndata: 1\n\n")
        );
        assert_eq!(
            next_text(&mut relayed).await.as_deref(),
            Some(": keep-alive\n\n")
        );
        tx.unbounded_send(chunk("data: par")).unwrap();
        assert_eq!(next_text(&mut relayed).await.as_deref(), Some("data: par"));
        // Mid-event: many intervals pass and nothing is sent.
        let quiet = tokio::time::timeout(every * 10, next_text(&mut relayed)).await;
        assert!(quiet.is_err(), "sent inside an event: {quiet:?}");
        tx.unbounded_send(chunk("tial\n\n")).unwrap();
        assert_eq!(next_text(&mut relayed).await.as_deref(), Some("tial\n\n"));
        drop(tx);
        // The end of the upstream ends the stream (no keep-alive after it).
        assert_eq!(next_text(&mut relayed).await, None);
    }
    use crate::model::StopReason;
    use crate::model::http::StreamFormat;
    use crate::model::sse::SseDecoder;

    fn route(api: &str, relay_path: &str) -> ModelRoute {
        ModelRoute {
            provider: "p".into(),
            api: api.into(),
            relay_path: relay_path.into(),
            model: "m-1".into(),
            limits: Default::default(),
        }
    }

    fn decode<F: StreamFormat>(body: &str) -> crate::model::ModelReply {
        let mut decoder = SseDecoder::new();
        let mut state = F::default();
        let mut ended = false;
        for event in decoder.push(body.as_bytes()) {
            ended |= state.apply("p", &event, &mut |_| {}).unwrap();
        }
        assert!(ended, "the stream must say it ended: {body}");
        state.finish("p").unwrap()
    }

    #[test]
    fn the_turn_end_replies_parse_as_clean_empty_stops_in_both_formats() {
        let anthropic = route(ModelRoute::ANTHROPIC_MESSAGES, "/llm/anthropic");
        let (kind, body) = final_reply_body(&anthropic, true);
        assert_eq!(kind, "text/event-stream");
        let reply = decode::<crate::model::anthropic::StreamState>(&body);
        assert_eq!(reply.stop, StopReason::EndTurn);
        assert!(reply.content.is_empty() && reply.tool_calls.is_empty());
        let (_, body) = final_reply_body(&anthropic, false);
        let reply =
            crate::model::anthropic::parse_reply(&serde_json::from_str(&body).unwrap()).unwrap();
        assert_eq!(reply.stop, StopReason::EndTurn);

        let openai = route(ModelRoute::OPENAI_CHAT, "/llm/openai");
        let (_, body) = final_reply_body(&openai, true);
        let reply = decode::<crate::model::openai::StreamState>(&body);
        assert_eq!(reply.stop, StopReason::EndTurn);
        assert!(reply.content.is_empty() && reply.tool_calls.is_empty());
        let (_, body) = final_reply_body(&openai, false);
        let reply =
            crate::model::openai::parse_reply(&serde_json::from_str(&body).unwrap()).unwrap();
        assert_eq!(reply.stop, StopReason::EndTurn);
    }

    #[test]
    fn cli_paths_map_to_the_routes_relay_path_with_the_query_kept() {
        let anthropic = route(ModelRoute::ANTHROPIC_MESSAGES, "/llm/anthropic");
        assert_eq!(
            relay_url("http://cp:1/", &anthropic, "v1/messages", Some("beta=true")),
            "http://cp:1/llm/anthropic/v1/messages?beta=true"
        );
        let openai = route(ModelRoute::OPENAI_CHAT, "/llm/ollama");
        assert_eq!(
            relay_url("http://cp:1", &openai, "v1/chat/completions", None),
            "http://cp:1/llm/ollama/chat/completions"
        );
    }
}
