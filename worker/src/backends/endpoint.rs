//! The run endpoint: one HTTP/1.1 server per CLI run, on `127.0.0.1:0`, alive exactly
//! as long as the run. The CLI's `chorus-tools mcp` lists the run's tools here and
//! calls them; the CLI's model requests come here too (`/llm/…`, the [`super::proxy`]).
//!
//! - Every request carries the run's credential (32 random bytes, hex), as
//!   `Authorization: Bearer` or `x-api-key`; it is compared in constant time. Anything
//!   else is a 401. When the run ends the listener and every open connection are
//!   dropped, so the credential is worthless after (nothing listens for it).
//! - `GET /tools`: exactly the tools the run offers now (agent's offered + role
//!   tools, re-read on every request, so an `UpdateAgent` applies at once).
//! - `POST /tools/call`: one call through the tool loop's pipeline
//!   ([`Pipeline::execute`]: validate → gate → execute → steps → cap), without the
//!   result message (the CLI's stream reports it, with the CLI's call id). Calls may
//!   arrive concurrently (the CLI runs tools in parallel) and run concurrently: each
//!   has its own gate check and steps from the run's shared counter, and the tools
//!   take their file locks as two threads of one agent do. A call the model got
//!   wrong (not JSON, unknown tool, bad arguments) is a 200 with `is_error`: the
//!   model's mistake, not the transport's.
//! - A successful call of a tool that `ends_turn` marks the turn over: the proxy
//!   answers the CLI's next model request itself (see [`super::proxy`]). So does a
//!   call the gate deferred for a person's approval (its hold, below the CLI's own
//!   tool-call limit, passed): the model is told to end its turn, and the answer
//!   starts the thread's next run, which carries the call out (or tells its refusal)
//!   before the CLI session goes on (`driver`).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use chorus_proto::domain::{ToolCall, ToolSpec};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::gate::ToolGate;
use crate::model::relay::RelayClients;
use crate::tool_loop::pipeline::{Executed, Pipeline};
use crate::tool_loop::{LiveAgent, LoopError, Steps};
use crate::tools::ToolBox;

/// Largest `POST /tools/call` body: a model reply's bound (`model::http`).
const MAX_CALL_BYTES: usize = 16 * 1024 * 1024;

/// What the endpoint serves a run with.
pub struct RunTools<G> {
    pub gate: Arc<G>,
    pub tools: ToolBox,
    /// The agent as it is now (its offered tools and model route).
    pub agent: watch::Receiver<LiveAgent>,
    /// The run's steps (shared with the driver's LLM steps).
    pub steps: Steps,
    pub cancel: CancellationToken,
    /// Where the model proxy forwards to, and with which credential.
    pub relay: RelayClients,
    /// Pairs each call with the CLI's report of it (one id for both).
    pub calls: Arc<super::calls::CallIds>,
    /// Model calls the run may make (the tool loop's iteration cap).
    pub max_model_calls: u32,
}

/// State shared by the handlers.
pub(super) struct Shared<G> {
    pub run: RunTools<G>,
    token: String,
    /// A call of a tool that ends the turn succeeded (the model proxy reads it).
    pub turn_ended: Arc<AtomicBool>,
}

/// A run's endpoint; dropping it (or [`RunEndpoint::close`]) ends the listener and
/// every connection.
pub struct RunEndpoint {
    /// `http://127.0.0.1:<port>`.
    pub url: String,
    pub port: u16,
    /// The run's credential.
    pub token: String,
    turn_ended: Arc<dyn Fn() -> bool + Send + Sync>,
    over_limit: Arc<AtomicBool>,
    rate_limited: watch::Receiver<Option<String>>,
    stop: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

impl RunEndpoint {
    /// Opens the endpoint on a free loopback port.
    pub async fn open<G: ToolGate + 'static>(run: RunTools<G>) -> std::io::Result<RunEndpoint> {
        let token = new_token()?;
        let listener = TcpListener::bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
        let port = listener.local_addr()?.port();
        let turn_ended = Arc::new(AtomicBool::new(false));
        let over_limit = Arc::new(AtomicBool::new(false));
        let (gave_up, rate_limited) = watch::channel(None);
        let upstream = Arc::new(super::proxy::Upstream {
            agent: run.agent.clone(),
            relay: run.relay.clone(),
            turn_ended: turn_ended.clone(),
            max_model_calls: run.max_model_calls,
            model_calls: Default::default(),
            over_limit: over_limit.clone(),
            rate_limited_in_a_row: Default::default(),
            gave_up,
        });
        let shared = Arc::new(Shared {
            run,
            token: token.clone(),
            turn_ended,
        });
        let router = Router::new()
            .route("/tools", get(list::<G>))
            .route("/tools/call", post(call::<G>))
            .with_state(shared.clone())
            .merge(super::proxy::router(upstream))
            // A call's arguments may be as large as a model's reply may be (axum's
            // default is 2 MiB); model requests stream past this bound.
            .layer(axum::extract::DefaultBodyLimit::max(MAX_CALL_BYTES))
            .layer(middleware::from_fn_with_state(
                shared.clone(),
                authenticate::<G>,
            ));
        let stop = CancellationToken::new();
        let server = tokio::spawn(serve(listener, router, stop.clone()));
        let ended = shared;
        Ok(RunEndpoint {
            url: format!("http://127.0.0.1:{port}"),
            port,
            token,
            turn_ended: Arc::new(move || ended.turn_ended.load(Ordering::SeqCst)),
            over_limit,
            rate_limited,
            stop,
            server: Some(server),
        })
    }

    /// Resolves with why, once the provider rate-limited too many model calls in a
    /// row (`proxy::GIVE_UP_AFTER_429S`); never otherwise.
    pub async fn rate_limited(&self) -> String {
        let mut seen = self.rate_limited.clone();
        loop {
            if let Some(why) = seen.borrow_and_update().clone() {
                return why;
            }
            if seen.changed().await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    }

    /// Whether the CLI asked its model more often than the run allows (its turn was
    /// ended by the proxy).
    pub fn over_limit(&self) -> bool {
        self.over_limit.load(Ordering::SeqCst)
    }

    /// Whether a call of a tool that ends the turn succeeded.
    pub fn turn_ended(&self) -> bool {
        (self.turn_ended)()
    }

    /// Ends the listener and every connection, and waits until they are gone.
    pub async fn close(mut self) {
        self.stop.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for RunEndpoint {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Accepts connections until `stop`; then drops the listener and aborts every
/// connection (a `JoinSet` aborts its tasks when dropped), in-flight streams included.
async fn serve(listener: TcpListener, router: Router, stop: CancellationToken) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use hyper_util::service::TowerToHyperService;
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = stop.cancelled() => break,
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let service = TowerToHyperService::new(router.clone());
                connections.spawn(async move {
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .http1_only()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    connections.shutdown().await;
}

/// 32 random bytes, hex.
fn new_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness for a run credential: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Equal, in time independent of where they differ.
fn same_secret(presented: &[u8], expected: &[u8]) -> bool {
    if presented.len() != expected.len() {
        return false;
    }
    presented
        .iter()
        .zip(expected)
        .fold(0u8, |acc, (a, b)| acc | (a ^ b))
        == 0
}

/// The credential a request presents: a bearer token or `x-api-key`.
pub(super) fn presented(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()))
}

async fn authenticate<G: ToolGate + 'static>(
    State(shared): State<Arc<Shared<G>>>,
    request: Request,
    next: Next,
) -> Response {
    let ok = presented(request.headers())
        .is_some_and(|p| same_secret(p.as_bytes(), shared.token.as_bytes()));
    if !ok {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": "this run's endpoint needs the run's credential (CHORUS_TOOLS_TOKEN); it is given to the CLI of this run only and ends with the run"})),
        )
            .into_response();
    }
    next.run(request).await
}

/// One tool as `GET /tools` lists it.
pub fn listed(spec: &ToolSpec) -> Value {
    let schema = crate::model::ToolSchema::from_spec(spec);
    json!({
        "name": spec.wire_name,
        "description": schema.description,
        "input_schema": schema.parameters,
    })
}

async fn list<G: ToolGate + 'static>(State(shared): State<Arc<Shared<G>>>) -> Response {
    let tools = shared.run.agent.borrow().tools.clone();
    let listed: Vec<Value> = tools.iter().map(listed).collect();
    axum::Json(json!({ "tools": listed })).into_response()
}

fn result(content: impl Into<String>, is_error: bool) -> Response {
    axum::Json(json!({"content": content.into(), "is_error": is_error})).into_response()
}

async fn call<G: ToolGate + 'static>(
    State(shared): State<Arc<Shared<G>>>,
    body: Bytes,
) -> Response {
    let (name, arguments) = match parse_call(&body) {
        Ok(call) => call,
        Err(message) => return result(message, true),
    };
    let run = &shared.run;
    let offered = run.agent.borrow().tools.clone();
    let call = ToolCall {
        id: run.calls.for_execution(&name, &arguments),
        name,
        arguments,
    };
    let pipeline = Pipeline {
        gate: run.gate.as_ref(),
        tools: &run.tools,
        offered: &offered,
        run_id: run.steps.run_id(),
        sink: run.steps.sink(),
        cancel: &run.cancel,
    };
    match pipeline.execute(&call, false, &run.steps).await {
        Ok(Executed { outcome, deferred }) => {
            // A call deferred for a person's approval ends the turn like a
            // finishing tool: the answer comes as the thread's next run.
            if deferred || (!outcome.is_error && ends_turn(&offered, &call.name)) {
                shared.turn_ended.store(true, Ordering::SeqCst);
            }
            result(outcome.content, outcome.is_error)
        }
        Err(LoopError::Cancelled(why)) => result(format!("not run: {why}"), true),
        Err(e) => result(format!("not run: {e}"), true),
    }
}

fn ends_turn(offered: &[ToolSpec], name: &str) -> bool {
    offered
        .iter()
        .any(|s| s.ends_turn && (s.wire_name == name || s.name == name))
}

/// `{"name": <wire name>, "arguments": <object>}` → the name and the arguments as
/// JSON text (checked by the pipeline as a model's call is); `Err` is what the model
/// reads. Pure.
pub fn parse_call(body: &[u8]) -> Result<(String, String), String> {
    const SHAPE: &str = r#"a tool call is {"name": <tool>, "arguments": {...}}"#;
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| format!("the call is not JSON ({e}); {SHAPE}; the call was not run"))?;
    let name = value
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("the call names no tool; {SHAPE}; the call was not run"))?;
    let arguments = match value.get("arguments") {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    };
    Ok((name.to_string(), arguments))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_compare_whole_and_calls_parse_to_name_and_arguments() {
        let token = new_token().unwrap();
        assert_eq!(token.len(), 64);
        assert!(token.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(token, new_token().unwrap());
        assert!(same_secret(token.as_bytes(), token.as_bytes()));
        assert!(!same_secret(&token.as_bytes()[..63], token.as_bytes()));
        let mut other = token.clone().into_bytes();
        other[63] ^= 1;
        assert!(!same_secret(&other, token.as_bytes()));

        assert_eq!(
            parse_call(br#"{"name":"file_read","arguments":{"path":"a"}}"#),
            Ok(("file_read".into(), r#"{"path":"a"}"#.into()))
        );
        assert_eq!(
            parse_call(br#"{"name":"list_files"}"#),
            Ok(("list_files".into(), "{}".into()))
        );
        assert!(parse_call(b"nope").unwrap_err().contains("not JSON"));
        assert!(
            parse_call(br#"{"arguments":{}}"#)
                .unwrap_err()
                .contains("names no tool")
        );
    }
}
