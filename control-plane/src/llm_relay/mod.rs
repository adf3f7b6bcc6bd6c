//! The model relay: workers send provider requests here, with their own worker
//! credential; the relay forwards them to the provider with the provider's key and
//! streams the answer back unchanged.
//!
//! Invariants: provider keys never leave the control plane. A worker (and anything an
//! agent runs inside it) holds only its own short-lived credential, valid for its own
//! agent while its connection lives. With it, only model endpoints can be reached
//! (`allowed`: chat completions, messages and their token count, models, embeddings;
//! the one query string is Anthropic's `beta=true`, which Claude Code sends); anything
//! else is a 403 before the provider is contacted. Headers other than
//! `FORWARDED_HEADERS` are dropped; `anthropic-version` is the relay's own. Every known secret (provider keys, the API
//! token) is replaced in a request body before it leaves, so a key a tool printed
//! does not reach the provider in the conversation.

pub mod allowed;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use tracing::Instrument;

use crate::providers::ProviderEndpoint;
use crate::secrets::{KnownSecrets, bearer_token};
use crate::workers::registry::Registry;

/// Marks errors the relay makes itself, so a worker can tell them from the provider's.
pub const RELAY_ERROR_HEADER: &str = "x-chorus-relay-error";

/// Request headers passed through to the provider (everything else is dropped,
/// notably the worker's own credential).
const FORWARDED_HEADERS: &[&str] = &["content-type", "accept", "anthropic-beta"];

/// Largest request a worker may relay (a long conversation with file contents).
const MAX_REQUEST_BYTES: usize = 32 * 1024 * 1024;

#[derive(Clone)]
pub struct RelayState {
    registry: Arc<Registry>,
    providers: Arc<Vec<ProviderEndpoint>>,
    secrets: KnownSecrets,
    /// A worker's trace context is continued only into a trace it may write to.
    traces: Arc<crate::telemetry::run_traces::RunTraces>,
    client: reqwest::Client,
    /// Keeps no idle connection: a request sent again after the pooled connection
    /// it went out on turned out closed goes out on a new one.
    fresh: reqwest::Client,
}

impl RelayState {
    pub fn new(
        registry: Arc<Registry>,
        providers: Vec<ProviderEndpoint>,
        secrets: KnownSecrets,
        traces: Arc<crate::telemetry::run_traces::RunTraces>,
    ) -> reqwest::Result<Self> {
        let builder = || {
            reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                // A redirect could carry the key somewhere else; providers do not redirect.
                .redirect(reqwest::redirect::Policy::none())
        };
        Ok(RelayState {
            registry,
            providers: Arc::new(providers),
            secrets,
            traces,
            client: builder().build()?,
            fresh: builder().pool_max_idle_per_host(0).build()?,
        })
    }
}

pub fn routes(state: RelayState) -> Router {
    Router::new()
        // Everything under /llm/ comes here, so whatever is refused is refused the
        // same way (403 with the reason), not by a router's bare 404.
        .route("/llm/{*rest}", any(relay))
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

fn relay_error(status: StatusCode, code: &str, message: String) -> Response {
    let body = serde_json::json!({ "error": { "code": code, "message": message } });
    let mut response = (status, axum::Json(body)).into_response();
    response.headers_mut().insert(
        RELAY_ERROR_HEADER,
        axum::http::HeaderValue::from_static("1"),
    );
    response
}

async fn relay(
    State(state): State<RelayState>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    // Workers present their credential the way the provider's own clients would:
    // a bearer token, or Anthropic's x-api-key.
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .or_else(|| headers.get("x-api-key").and_then(|v| v.to_str().ok()));
    let Some(agent) = presented.and_then(|t| state.registry.agent_for_credential(t)) else {
        return relay_error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "the model relay needs the credential of a connected worker".into(),
        );
    };
    // The raw target, neither decoded nor normalised: see `allowed`.
    let allowed = match allowed::check(method.as_str(), uri.path(), uri.query()) {
        Ok(allowed) => allowed,
        Err(refusal) => {
            let reason = state.secrets.scrubbed(&refusal.to_string());
            tracing::warn!(%agent, %method, %reason, "model relay refused a request");
            return relay_error(StatusCode::FORBIDDEN, "not_a_model_endpoint", reason);
        }
    };
    let provider = allowed.provider.name();
    let path = allowed.endpoint.path;
    let Some(endpoint) = state.providers.iter().find(|p| p.kind == allowed.provider) else {
        return relay_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_not_configured",
            format!("the provider '{provider}' is not configured in this control plane"),
        );
    };
    let body = match scrubbed_body(&state.secrets, body) {
        Ok((body, false)) => body,
        Ok((body, true)) => {
            tracing::warn!(%agent, %provider, "replaced a known secret in a request to the model");
            body
        }
        Err(message) => return relay_error(StatusCode::BAD_REQUEST, "bad_request", message),
    };
    // The allow-list's own target (its query too), never the worker's.
    let url = format!("{}/{}", endpoint.relay_base(), allowed.endpoint.target());

    let request = |client: &reqwest::Client| {
        let mut upstream = client.request(method.clone(), &url).body(body.clone());
        for name in FORWARDED_HEADERS {
            if let Some(value) = headers.get(*name) {
                upstream = upstream.header(*name, value);
            }
        }
        for (name, value) in endpoint.auth_headers() {
            upstream = upstream.header(name, value);
        }
        upstream
    };
    let span = tracing::info_span!("llm_relay", %agent, %provider, %path);
    crate::telemetry::continue_trace(
        &span,
        &state
            .traces
            .admit_context(&agent, &crate::telemetry::trace_headers(&headers)),
    );
    let mut sent = request(&state.client).send().instrument(span.clone()).await;
    if let Err(e) = &sent
        && closed_before_answering(e)
    {
        // A kept-alive connection the server had closed (llama-cpp-python closes
        // it after an empty stream while saying keep-alive): no byte of an answer
        // came, so the request is sent once more, on a new connection.
        tracing::info!(parent: &span, error = %error_chain(e), "pooled connection was closed; sending again on a new one");
        sent = request(&state.fresh).send().instrument(span.clone()).await;
    }
    let response = match sent {
        Ok(response) => response,
        Err(e) if closed_before_answering(&e) => {
            tracing::warn!(parent: &span, error = %e, "provider closed the connection without answering");
            return relay_error(
                StatusCode::BAD_GATEWAY,
                "provider_closed_connection",
                format!(
                    "{} at {} closed the connection without answering, also on a new connection ({})",
                    provider,
                    endpoint.base_url,
                    error_chain(&e)
                ),
            );
        }
        Err(e) => {
            tracing::warn!(parent: &span, error = %e, "provider unreachable");
            return relay_error(
                StatusCode::BAD_GATEWAY,
                "provider_unreachable",
                format!(
                    "cannot reach {} at {} ({}): {}",
                    provider,
                    endpoint.base_url,
                    endpoint.kind.base_env(),
                    error_chain(&e)
                ),
            );
        }
    };
    tracing::debug!(parent: &span, status = %response.status(), "provider answered");
    let mut reply = Response::builder().status(response.status());
    for name in ["content-type", "retry-after", "retry-after-ms"] {
        if let Some(value) = response.headers().get(name) {
            reply = reply.header(name, value.clone());
        }
    }
    reply
        .body(Body::from_stream(response.bytes_stream()))
        .unwrap_or_else(|e| {
            relay_error(
                StatusCode::INTERNAL_SERVER_ERROR,
                "relay_error",
                e.to_string(),
            )
        })
}

/// The request body with every known secret replaced (a tool result can hold a key
/// the agent found, and the whole conversation goes to the provider on every call).
/// Model requests are JSON, so UTF-8; anything else is refused rather than sent
/// unchecked.
/// Also says whether anything was replaced.
fn scrubbed_body(secrets: &KnownSecrets, body: Bytes) -> Result<(Bytes, bool), String> {
    if body.is_empty() {
        return Ok((body, false));
    }
    let mut text = String::from_utf8(body.into()).map_err(|e| {
        format!(
            "the model relay forwards JSON (UTF-8) bodies only; byte {} is not UTF-8",
            e.utf8_error().valid_up_to()
        )
    })?;
    let found = secrets.scrub_found(&mut text);
    Ok((Bytes::from(text), found))
}

/// Whether a request failed because the server closed (or reset) a connection
/// that was open, before any byte of a response: not a connection that could not
/// be made, nor a timeout.
fn closed_before_answering(e: &reqwest::Error) -> bool {
    if e.is_connect() || e.is_timeout() {
        return false;
    }
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        if let Some(hyper) = cause.downcast_ref::<hyper::Error>()
            && hyper.is_incomplete_message()
        {
            return true;
        }
        if let Some(io) = cause.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
            )
        {
            return true;
        }
        source = cause.source();
    }
    false
}

/// The error with its causes, e.g. "error sending request: connection refused".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
