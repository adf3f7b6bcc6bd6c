//! The streamable HTTP client of MCP servers: rmcp's [`StreamableHttpClient`] over
//! the worker's own reqwest (rmcp's built-in one is for another reqwest major
//! version, and one HTTP stack is kept in the tree).
//!
//! What it does: POSTs each message (answers as JSON or as an SSE stream), deletes
//! a session, and says it has no standalone GET stream (so server-initiated
//! messages come only inside answers to requests). A 404 on a request that carried
//! a session is `SessionExpired`, from which rmcp starts a new session (a server
//! restarted behind the same URL). Answers are bounded by rmcp's limits.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use futures::stream::BoxStream;
use http::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::{Sse, SseStream};

const SESSION_ID: &str = "Mcp-Session-Id";
const EVENT_STREAM: &str = "text/event-stream";
const JSON: &str = "application/json";

/// An MCP client's HTTP: reqwest, and the headers the server's setting names.
#[derive(Clone)]
pub struct McpHttp {
    pub client: reqwest::Client,
}

/// A reqwest failure, as rmcp's client error.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HttpError(String);

type Result<T> = std::result::Result<T, StreamableHttpError<HttpError>>;

fn client_error(e: reqwest::Error) -> StreamableHttpError<HttpError> {
    // Without the URL: a query string may carry a credential.
    StreamableHttpError::Client(HttpError(e.without_url().to_string()))
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    session: Option<&str>,
    auth: Option<String>,
    headers: HashMap<HeaderName, HeaderValue>,
) -> reqwest::RequestBuilder {
    if let Some(session) = session {
        request = request.header(SESSION_ID, session);
    }
    if let Some(auth) = auth {
        request = request.bearer_auth(auth);
    }
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request
}

fn media(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim()
        .to_ascii_lowercase()
}

fn sse(response: reqwest::Response) -> BoxStream<'static, std::result::Result<Sse, SseError>> {
    SseStream::from_bytes_stream(response.bytes_stream()).boxed()
}

impl StreamableHttpClient for McpHttp {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse> {
        self.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            custom_headers,
            StreamableHttpResponseLimits::default(),
        )
        .await
    }

    async fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> Result<StreamableHttpPostResponse> {
        let request = self
            .client
            .post(uri.as_ref())
            .header(reqwest::header::ACCEPT, format!("{EVENT_STREAM}, {JSON}"));
        let request = with_headers(request, session_id.as_deref(), auth_header, custom_headers);
        let response = request.json(&message).send().await.map_err(client_error)?;
        let status = response.status();
        if matches!(
            status,
            reqwest::StatusCode::ACCEPTED | reqwest::StatusCode::NO_CONTENT
        ) {
            return Ok(StreamableHttpPostResponse::Accepted);
        }
        if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
            return Err(StreamableHttpError::SessionExpired);
        }
        let awaits_nothing = !matches!(message, ClientJsonRpcMessage::Request(_));
        let session = response
            .headers()
            .get(SESSION_ID)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let kind = media(&response);
        if !status.is_success() {
            // A JSON-RPC error in the body is the server's answer; anything else is
            // the status with the start of the body.
            let body = bounded(response, limits.max_error_response_size).await;
            if let Ok(message @ rmcp::model::JsonRpcMessage::Error(_)) =
                serde_json::from_slice::<ServerJsonRpcMessage>(&body)
            {
                return Ok(StreamableHttpPostResponse::Json(message, session));
            }
            return Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                format!("HTTP {status}: {}", String::from_utf8_lossy(&body)),
            )));
        }
        match kind.as_str() {
            EVENT_STREAM => Ok(StreamableHttpPostResponse::Sse(sse(response), session)),
            JSON => {
                if response
                    .content_length()
                    .is_some_and(|n| n > limits.max_json_response_size as u64)
                {
                    return Err(StreamableHttpError::UnexpectedServerResponse(
                        "the server's answer is over the size limit".into(),
                    ));
                }
                let body = response.bytes().await.map_err(client_error)?;
                match serde_json::from_slice::<ServerJsonRpcMessage>(&body) {
                    Ok(message) => Ok(StreamableHttpPostResponse::Json(message, session)),
                    Err(_) if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
                    Err(e) => Err(StreamableHttpError::UnexpectedServerResponse(Cow::Owned(
                        format!("the server's answer is not JSON-RPC: {e}"),
                    ))),
                }
            }
            _ if awaits_nothing => Ok(StreamableHttpPostResponse::Accepted),
            other => Err(StreamableHttpError::UnexpectedContentType(Some(
                other.to_string(),
            ))),
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<()> {
        let request = with_headers(
            self.client.delete(uri.as_ref()),
            Some(&session_id),
            auth_header,
            custom_headers,
        );
        // A server that cannot delete sessions, or lost this one, is fine.
        let _ = request.send().await.map_err(client_error)?;
        Ok(())
    }

    async fn get_stream(
        &self,
        _uri: Arc<str>,
        _session_id: Option<Arc<str>>,
        _last_event_id: Option<String>,
        _auth_header: Option<String>,
        _custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<BoxStream<'static, std::result::Result<Sse, SseError>>> {
        // No standalone stream: a call's answer carries what the server sends
        // meanwhile, and a changed tool list is read again at the next run.
        Err(StreamableHttpError::ServerDoesNotSupportSse)
    }
}

/// At most `limit` bytes of the body.
async fn bounded(response: reqwest::Response, limit: usize) -> Vec<u8> {
    let mut out = Vec::new();
    let mut chunks = response.bytes_stream();
    while let Some(Ok(chunk)) = chunks.next().await {
        let room = limit.saturating_sub(out.len());
        out.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if out.len() >= limit {
            break;
        }
    }
    out
}
