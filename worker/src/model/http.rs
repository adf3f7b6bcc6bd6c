//! What every wire format shares over HTTP: sending a request, reading a stream of
//! server-sent events, and turning a provider's failure into a [`ModelError`] that
//! says what to do.
//!
//! Bounds: each attempt has a deadline (`call_timeout_ms`) and a silence limit
//! (`silence_timeout_ms`), both in `AssignRun.retry`; a server-sent event is at most 1
//! MiB, a reply's text plus tool names and arguments at most 16 MiB, a plain JSON body
//! 32 MiB, an error body is read to 64 KiB; the tool loop runs at most 64 tool calls of
//! a reply and answers the rest as refused. So a server that streams without end costs
//! one bounded attempt (about 6–8 s and 33–40 MiB peak worker RSS in a debug build),
//! and one that never answers is named as such after the silence limit.

use std::time::Duration;

use futures::StreamExt;
use serde_json::Value;

use super::sse::{SseDecoder, SseEvent};
use super::{ModelError, ModelReply};

/// Where a client sends its requests, and as whom.
#[derive(Clone)]
pub struct Endpoint {
    /// Shared by every client of the worker (one connection pool).
    pub http: reqwest::Client,
    /// e.g. `http://127.0.0.1:50051/llm/openai` (the control plane's relay).
    pub base_url: String,
    /// The credential, sent the way the format expects (bearer or `x-api-key`):
    /// the worker's own when calling the relay.
    pub api_key: String,
    /// Provider name, for messages.
    pub provider: String,
}

impl Endpoint {
    pub fn new(
        http: reqwest::Client,
        base_url: impl Into<String>,
        api_key: impl Into<String>,
        provider: impl Into<String>,
    ) -> Self {
        Endpoint {
            http,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: api_key.into(),
            provider: provider.into(),
        }
    }
}

/// Header the control plane's model relay puts on errors it makes itself (as opposed
/// to errors it passes through from the provider).
pub const RELAY_ERROR_HEADER: &str = "x-chorus-relay-error";

/// The setting a user fixes when a provider refuses its credentials.
pub fn key_hint(provider: &str) -> &'static str {
    match provider {
        "anthropic" => "ANTHROPIC_API_KEY",
        "openai" => "OPENAI_API_KEY",
        "openrouter" => "OPENROUTER_API_KEY",
        "ollama" => "OLLAMA_BASE_URL",
        "lmstudio" => "LMSTUDIO_BASE_URL",
        _ => "the provider's API key",
    }
}

/// Reads `Retry-After` (seconds, or an HTTP date) and OpenAI's `retry-after-ms`.
pub fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    if let Some(ms) = headers
        .get("retry-after-ms")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<f64>().ok())
    {
        return duration_from_secs(ms / 1000.0);
    }
    parse_retry_after(headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?)
}

pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return duration_from_secs(secs);
    }
    let at = chrono::DateTime::parse_from_rfc2822(value).ok()?;
    let wait = at.with_timezone(&chrono::Utc) - chrono::Utc::now();
    Some(wait.to_std().unwrap_or(Duration::ZERO))
}

fn duration_from_secs(secs: f64) -> Option<Duration> {
    (secs.is_finite() && secs >= 0.0).then(|| Duration::from_secs_f64(secs.min(3600.0)))
}

/// The provider's own words from an error body (`{"error": {"message": …}}`, or
/// `{"error": "…"}`, or plain text), shortened.
pub fn provider_message(body: &str) -> String {
    let json: Option<Value> = serde_json::from_str(body).ok();
    let message = json.as_ref().and_then(|v| {
        let error = v.get("error")?;
        error
            .get("message")
            .and_then(Value::as_str)
            .or_else(|| error.as_str())
            .map(str::to_string)
    });
    let message = message.unwrap_or_else(|| body.trim().to_string());
    let message: String = message.chars().take(500).collect();
    if message.is_empty() {
        "no details given".into()
    } else {
        message.trim_end_matches('.').to_string()
    }
}

fn error_code(body: &str) -> Option<String> {
    let v: Value = serde_json::from_str(body).ok()?;
    let error = v.get("error")?;
    error
        .get("code")
        .or_else(|| error.get("type"))
        .and_then(Value::as_str)
        .map(str::to_string)
}

fn looks_like_context_length(code: Option<&str>, message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    code == Some("context_length_exceeded")
        || message.contains("context length")
        || message.contains("context window")
        || message.contains("maximum context")
        || message.contains("prompt is too long")
        || message.contains("too many tokens")
}

/// Turns a non-success answer into what the loop should do about it.
pub fn classify(
    provider: &str,
    status: u16,
    body: &str,
    retry_after: Option<Duration>,
    from_relay: bool,
) -> ModelError {
    let message = provider_message(body);
    if from_relay {
        return match status {
            // The relay's words say what happened (the provider could not be
            // reached, or closed the connection without answering).
            502 | 504 if error_code(body).as_deref() == Some("provider_unreachable") => {
                ModelError::Retryable {
                    message: format!("the model relay could not reach '{provider}': {message}"),
                    retry_after,
                }
            }
            502 | 504 => ModelError::Retryable {
                message: format!("the model relay got no answer from '{provider}': {message}"),
                retry_after,
            },
            _ => ModelError::Fatal(format!(
                "the model relay refused the call ({status}): {message}"
            )),
        };
    }
    let code = error_code(body);
    let quota = code.as_deref() == Some("insufficient_quota");
    match status {
        429 if !quota => ModelError::Retryable {
            message: format!("'{provider}' is rate limiting (429): {message}"),
            retry_after,
        },
        408 | 500..=599 => ModelError::Retryable {
            message: format!("'{provider}' failed ({status}): {message}"),
            retry_after,
        },
        401 | 403 => ModelError::Fatal(format!(
            "the model provider '{provider}' refused the credentials ({status}): {message}. Check {}.",
            key_hint(provider)
        )),
        402 | 429 => ModelError::Fatal(format!(
            "the model provider '{provider}' says the account is out of credit or quota ({status}): {message}"
        )),
        404 => ModelError::Fatal(format!(
            "the model provider '{provider}' does not know this model or endpoint (404): {message}. \
             Check the model name (GET /api/models lists the known ones)."
        )),
        _ if looks_like_context_length(code.as_deref(), &message) => {
            ModelError::ContextLength(format!(
                "the conversation is too long for the model ('{provider}' said: {message}); \
             clear or summarise the context, or use a model with a larger window"
            ))
        }
        _ => ModelError::Fatal(format!(
            "the model provider '{provider}' refused the request ({status}): {message}"
        )),
    }
}

/// The HTTP status an error object stands for when a server sends it inside a 200
/// stream: its `code` when that is a status (LiteLLM sends `"code": "400"`), else
/// its `code` or `type` as the APIs name them. `None`: it does not say.
fn status_of(error: &Value) -> Option<u16> {
    let field = |name: &str| {
        error.get(name).and_then(|v| match v {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
    };
    for name in ["code", "status", "type"] {
        let Some(value) = field(name) else { continue };
        if let Ok(status) = value.parse::<u16>()
            && (400..=599).contains(&status)
        {
            return Some(status);
        }
        let status = match value.as_str() {
            "authentication_error" | "invalid_api_key" => 401,
            "billing_error" => 402,
            "permission_error" => 403,
            "not_found_error" | "model_not_found" => 404,
            "request_too_large" => 413,
            "rate_limit_error" | "rate_limit_exceeded" | "insufficient_quota" => 429,
            "invalid_request_error" | "context_length_exceeded" => 400,
            "api_error" | "server_error" => 500,
            "overloaded_error" => 529,
            _ => continue,
        };
        return Some(status);
    }
    None
}

/// An error a server sent in the middle of a 200 stream (`{"error": {…}}`), sorted
/// exactly as the same error sent as an HTTP status ([`classify`]): a context-length
/// error shortens the context, a refused key is fatal. One that names no status is
/// taken as passing unless its words say the context is too long.
pub fn classify_stream_error(provider: &str, error: &Value) -> ModelError {
    let body = serde_json::json!({ "error": error }).to_string();
    let status = status_of(error).or_else(|| {
        looks_like_context_length(error_code(&body).as_deref(), &provider_message(&body))
            .then_some(400)
    });
    match status {
        Some(status) => match classify(provider, status, &body, None, false) {
            ModelError::Retryable {
                message,
                retry_after,
            } => ModelError::Retryable {
                message: format!("mid-stream, {message}"),
                retry_after,
            },
            other => other,
        },
        None => ModelError::retryable(format!(
            "'{provider}' reported an error mid-stream: {}",
            provider_message(&body)
        )),
    }
}

/// A streamed reply that ended without a finish reason (`[DONE]` alone, or the end
/// of the body): the server cut it off. With nothing in it, the attempt failed and is
/// retried (never an empty answer); with tool calls, their arguments may be cut, so
/// it failed too; with text only, the text is kept as an [`StopReason::Interrupted`]
/// answer that the loop continues (never a final one).
///
/// [`StopReason::Interrupted`]: super::StopReason::Interrupted
pub fn cut_stream(provider: &str, mut reply: ModelReply) -> Result<ModelReply, ModelError> {
    if !reply.tool_calls.is_empty() {
        return Err(ModelError::retryable(format!(
            "the stream from '{provider}' ended in the middle of a tool call, without a finish reason"
        )));
    }
    if reply.content.is_empty() {
        return Err(ModelError::retryable(format!(
            "the stream from '{provider}' ended without an answer or a finish reason              (the server cut it off; llama-cpp-python does when another request arrives)"
        )));
    }
    reply.stop = super::StopReason::Interrupted;
    Ok(reply)
}

/// Sends a JSON POST (`body` is JSON text). Success is the response to read;
/// failure is already classified. Waits at most `limits.silence` for the answer to
/// start.
pub async fn post_json(
    http: &reqwest::Client,
    provider: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: String,
    limits: &CallLimits,
) -> Result<reqwest::Response, ModelError> {
    let mut request = http
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    // The relay's span joins this call's trace.
    for (name, value) in crate::telemetry::current_context() {
        request = request.header(name, value);
    }
    let response = match tokio::time::timeout(limits.silence, request.send()).await {
        Err(_) => return Err(silent(provider, limits, "did not answer")),
        Ok(Err(e)) if e.is_timeout() => return Err(silent(provider, limits, "did not answer")),
        Ok(Err(e)) => {
            return Err(ModelError::retryable(format!(
                "cannot reach the model relay for '{provider}' at {url}: {e}"
            )));
        }
        Ok(Ok(response)) => response,
    };
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status().as_u16();
    let wait = retry_after(response.headers());
    let from_relay = response.headers().contains_key(RELAY_ERROR_HEADER);
    // An error body is read only so far: it is a message, not a reply.
    let text = read_bounded(provider, response, MAX_ERROR_BODY_BYTES, limits, true)
        .await
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    Err(classify(provider, status, &text, wait, from_relay))
}

/// How long one attempt of a model call may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallLimits {
    /// The whole attempt, from sending the request to the reply's last byte.
    pub deadline: Duration,
    /// The longest the provider may send nothing: before its answer starts, or
    /// between two pieces of it.
    pub silence: Duration,
}

impl Default for CallLimits {
    fn default() -> Self {
        CallLimits::from(&chorus_proto::domain::RetryPolicy::default())
    }
}

impl From<&chorus_proto::domain::RetryPolicy> for CallLimits {
    fn from(policy: &chorus_proto::domain::RetryPolicy) -> Self {
        CallLimits {
            deadline: Duration::from_millis(policy.call_timeout_ms.max(1)),
            silence: Duration::from_millis(policy.silence_timeout_ms.max(1)),
        }
    }
}

/// The bounds on what one reply may make the worker hold. Each ends the attempt with
/// an error that names it, so a broken or hostile server cannot grow the worker
/// without limit.
pub const MAX_SSE_EVENT_BYTES: usize = 1 << 20;
/// Text plus tool-call names and arguments of one reply.
pub const MAX_REPLY_BYTES: usize = 16 << 20;
/// A whole non-streamed reply body (JSON around at most `MAX_REPLY_BYTES`).
pub const MAX_BODY_BYTES: usize = 2 * MAX_REPLY_BYTES;
/// An error body: only its message is used.
pub const MAX_ERROR_BODY_BYTES: usize = 64 << 10;

fn silent(provider: &str, limits: &CallLimits, what: &str) -> ModelError {
    ModelError::retryable(format!(
        "the provider '{provider}' {what} within {} s ([models] silence_timeout_secs)",
        limits.silence.as_secs_f64()
    ))
}

fn too_big(provider: &str, what: &str, bound: usize) -> ModelError {
    ModelError::TooLarge(format!(
        "the reply from '{provider}' was refused: {what} exceeded {} MiB (the bound on one {what}); \
         the model may be stuck repeating itself, or the server is not a chat-completions server. \
         Try again, or use another model",
        bound >> 20
    ))
}

/// A wire format's reading of a streamed reply.
pub trait StreamFormat: Default {
    /// Applies one event; text goes to `on_text`. Returns whether the reply ended.
    fn apply(
        &mut self,
        provider: &str,
        event: &SseEvent,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ModelError>;
    /// The whole reply, once the stream is over.
    fn finish(self, provider: &str) -> Result<ModelReply, ModelError>;
    /// Reads a non-streaming body (servers that ignore `stream: true`).
    fn parse_body(body: &Value) -> Result<ModelReply, ModelError>;
    /// Bytes of text, tool names and arguments gathered so far.
    fn size(&self) -> usize;
}

/// One model call: POST `body(true)` and read the event stream (or the plain JSON
/// body of a server that ignores streaming) with the format `F`, within `limits`.
///
/// A server that answers 200 with an empty stream (llama-cpp-python does when the
/// prompt overflows its context) is asked once more without streaming, which
/// brings out its real error (e.g. `400 context_length_exceeded`).
pub async fn exchange<F: StreamFormat>(
    endpoint: &Endpoint,
    url: &str,
    headers: &[(&str, &str)],
    body: impl Fn(bool) -> String,
    limits: &CallLimits,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ModelError> {
    let provider = endpoint.provider.as_str();
    let attempt = async {
        let response =
            post_json(&endpoint.http, provider, url, headers, body(true), limits).await?;
        if !is_event_stream(&response) {
            return read_reply::<F>(provider, response, limits, on_text).await;
        }
        let mut state = F::default();
        let events = read_sse(provider, response, limits, |event| {
            let done = state.apply(provider, &event, on_text)?;
            if state.size() > MAX_REPLY_BYTES {
                return Err(too_big(provider, "reply", MAX_REPLY_BYTES));
            }
            Ok(done)
        })
        .await?;
        if events > 0 {
            return state.finish(provider);
        }
        tracing::info!(%provider, "empty event stream; asking again without streaming");
        let response = post_json(&endpoint.http, provider, url, headers, body(false), limits)
            .await
            .map_err(|e| match e {
                ModelError::Retryable {
                    message,
                    retry_after,
                } => ModelError::Retryable {
                    message: format!(
                        "'{provider}' answered with an empty stream, and then: {message}"
                    ),
                    retry_after,
                },
                other => other,
            })?;
        read_reply::<F>(provider, response, limits, on_text).await
    };
    match tokio::time::timeout(limits.deadline, attempt).await {
        Ok(result) => result,
        Err(_) => Err(ModelError::retryable(format!(
            "the provider '{provider}' did not finish its reply within {} s ([models] call_timeout_secs)",
            limits.deadline.as_secs_f64()
        ))),
    }
}

/// A whole, non-streamed reply.
async fn read_reply<F: StreamFormat>(
    provider: &str,
    response: reqwest::Response,
    limits: &CallLimits,
    on_text: &mut (dyn FnMut(&str) + Send),
) -> Result<ModelReply, ModelError> {
    let reply = F::parse_body(&read_json(provider, response, limits).await?)?;
    if !reply.content.is_empty() {
        on_text(&reply.content);
    }
    Ok(reply)
}

/// Whether a response is a server-sent event stream (by its content type).
pub fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// Reads a response as server-sent events, handing each to `on_event` until it
/// returns `Ok(true)` (done) or the stream ends. Returns how many events there were.
/// An event over [`MAX_SSE_EVENT_BYTES`] or a silence over `limits.silence` ends it
/// with an error.
pub async fn read_sse(
    provider: &str,
    response: reqwest::Response,
    limits: &CallLimits,
    mut on_event: impl FnMut(SseEvent) -> Result<bool, ModelError>,
) -> Result<usize, ModelError> {
    let mut decoder = SseDecoder::with_max_event(MAX_SSE_EVENT_BYTES);
    let mut bytes = response.bytes_stream();
    let mut events = 0;
    while let Some(chunk) = next_chunk(provider, &mut bytes, limits).await? {
        let decoded = decoder.push(&chunk);
        for event in decoded {
            events += 1;
            if on_event(event)? {
                return Ok(events);
            }
        }
        if decoder.overflowed() {
            return Err(too_big(provider, "server-sent event", MAX_SSE_EVENT_BYTES));
        }
    }
    if let Some(event) = decoder.finish() {
        events += 1;
        on_event(event)?;
    }
    Ok(events)
}

/// The next piece of a body, waiting at most `limits.silence` for it.
async fn next_chunk<B>(
    provider: &str,
    bytes: &mut (impl futures::Stream<Item = reqwest::Result<B>> + Unpin),
    limits: &CallLimits,
) -> Result<Option<B>, ModelError> {
    match tokio::time::timeout(limits.silence, bytes.next()).await {
        Err(_) => Err(silent(
            provider,
            limits,
            "stopped sending in the middle of its reply and sent nothing",
        )),
        Ok(None) => Ok(None),
        Ok(Some(Ok(chunk))) => Ok(Some(chunk)),
        Ok(Some(Err(e))) => Err(ModelError::retryable(format!(
            "the stream from '{provider}' broke off: {e}"
        ))),
    }
}

/// Reads a body of at most `max` bytes. With `cut`, a longer body is cut at `max`;
/// without, it is an error.
async fn read_bounded(
    provider: &str,
    response: reqwest::Response,
    max: usize,
    limits: &CallLimits,
    cut: bool,
) -> Result<Vec<u8>, ModelError> {
    let mut body = Vec::new();
    let mut bytes = response.bytes_stream();
    while let Some(chunk) = next_chunk(provider, &mut bytes, limits).await? {
        if body.len() + chunk.len() > max {
            if cut {
                body.extend_from_slice(&chunk[..max - body.len()]);
                return Ok(body);
            }
            return Err(too_big(provider, "reply body", max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// Reads a whole JSON body (non-streaming answers, model lists), at most
/// [`MAX_BODY_BYTES`].
pub async fn read_json(
    provider: &str,
    response: reqwest::Response,
    limits: &CallLimits,
) -> Result<Value, ModelError> {
    let body = read_bounded(provider, response, MAX_BODY_BYTES, limits, false).await?;
    serde_json::from_slice(&body).map_err(|e| {
        ModelError::retryable(format!(
            "'{provider}' answered with something that is not JSON ({e})"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_sorted_by_what_to_do() {
        let retry = |status, body: &str| {
            matches!(
                classify("openai", status, body, None, false),
                ModelError::Retryable { .. }
            )
        };
        assert!(retry(429, r#"{"error":{"message":"slow down"}}"#));
        assert!(retry(500, ""));
        assert!(retry(503, "upstream busy"));
        assert!(retry(
            529,
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
        ));

        let fatal = classify(
            "anthropic",
            401,
            r#"{"error":{"type":"authentication_error","message":"invalid x-api-key"}}"#,
            None,
            false,
        );
        assert_eq!(
            fatal.to_string(),
            "the model provider 'anthropic' refused the credentials (401): invalid x-api-key. Check ANTHROPIC_API_KEY."
        );
        assert!(matches!(
            classify("openai", 429, r#"{"error":{"code":"insufficient_quota","message":"You exceeded your current quota"}}"#, None, false),
            ModelError::Fatal(m) if m.contains("quota")
        ));
        assert!(matches!(
            classify(
                "openai",
                400,
                r#"{"error":{"code":"context_length_exceeded","message":"This model's maximum context length is 8192 tokens"}}"#,
                None,
                false
            ),
            ModelError::ContextLength(_)
        ));
        assert!(matches!(
            classify(
                "anthropic",
                400,
                r#"{"error":{"type":"invalid_request_error","message":"prompt is too long: 210000 tokens > 200000 maximum"}}"#,
                None,
                false
            ),
            ModelError::ContextLength(_)
        ));
        assert!(
            matches!(classify("ollama", 404, "model not found", None, false), ModelError::Fatal(m) if m.contains("GET /api/models"))
        );
        assert!(matches!(
            classify("openai", 502, "{}", None, true),
            ModelError::Retryable { .. }
        ));
        assert!(
            matches!(classify("openai", 401, "{}", None, true), ModelError::Fatal(m) if m.contains("relay"))
        );
        let closed = classify(
            "openai",
            502,
            r#"{"error":{"code":"provider_closed_connection","message":"openai closed the connection"}}"#,
            None,
            true,
        );
        assert!(
            matches!(&closed, ModelError::Retryable { message, .. } if !message.contains("reach")),
            "{closed:?}"
        );
    }

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        assert_eq!(parse_retry_after("1"), Some(Duration::from_secs(1)));
        assert_eq!(parse_retry_after("0.5"), Some(Duration::from_millis(500)));
        assert_eq!(parse_retry_after("-3"), None);
        assert_eq!(
            parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"),
            Some(Duration::ZERO)
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
