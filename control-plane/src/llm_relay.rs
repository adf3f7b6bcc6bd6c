//! The model relay: workers send provider requests here, with their own worker
//! credential; the relay forwards them to the provider with the provider's key and
//! streams the answer back unchanged.
//!
//! Invariant: provider keys never leave the control plane. A worker (and anything an
//! agent runs inside it) holds only its own short-lived credential, valid for its own
//! agent, revoked when the worker ends.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Path, RawQuery, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::any;

use tracing::Instrument;

use crate::providers::ProviderEndpoint;
use crate::secrets::bearer_token;
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
    client: reqwest::Client,
}

impl RelayState {
    pub fn new(registry: Arc<Registry>, providers: Vec<ProviderEndpoint>) -> reqwest::Result<Self> {
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A redirect could carry the key somewhere else; providers do not redirect.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(RelayState {
            registry,
            providers: Arc::new(providers),
            client,
        })
    }
}

pub fn routes(state: RelayState) -> Router {
    Router::new()
        .route("/llm/{provider}/{*path}", any(relay))
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
    Path((provider, path)): Path<(String, String)>,
    RawQuery(query): RawQuery,
    method: Method,
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
            "the model relay needs a current worker credential".into(),
        );
    };
    let Some(endpoint) = state.providers.iter().find(|p| p.kind.name() == provider) else {
        return relay_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "provider_not_configured",
            format!("the provider '{provider}' is not configured in this control plane"),
        );
    };
    let base = endpoint.relay_base();
    let mut url = format!("{base}/{path}");
    if let Some(query) = query {
        url.push('?');
        url.push_str(&query);
    }

    let mut upstream = state.client.request(method, &url).body(body);
    for name in FORWARDED_HEADERS {
        if let Some(value) = headers.get(*name) {
            upstream = upstream.header(*name, value);
        }
    }
    for (name, value) in endpoint.auth_headers() {
        upstream = upstream.header(name, value);
    }
    let span = tracing::info_span!("llm_relay", %agent, %provider, %path);
    let response = match upstream.send().instrument(span.clone()).await {
        Ok(response) => response,
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
