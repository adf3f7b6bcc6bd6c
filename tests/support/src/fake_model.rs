//! Fake model servers on 127.0.0.1 that speak the real wire formats: OpenAI chat
//! completions (also standing in for OpenRouter, Ollama and LM Studio) and
//! Anthropic messages, streaming or not. Tests script what the model says in a
//! format-neutral way ([`Reply`]); each fake renders it in its own format, and
//! records every request (headers and JSON body) so tests can check what was sent.
//!
//! The fakes are as strict as the real APIs: every request is checked against the
//! rules the real servers enforce ([`crate::wire_rules`]: tool-name pattern, tool
//! call and result pairing, content forms per role, role order). A request that
//! breaks one gets the 400 a real API would send, and the test fails with the
//! reason when the fake is dropped. So does a request nothing was scripted for; it
//! is answered with a 400 at once rather than a 500 the client would retry for
//! seconds. [`Quirks`] and [`FakeModel::set_context_window`] make a fake behave like
//! the less regular servers (llama.cpp, llama-cpp-python).

use std::collections::{HashMap, VecDeque};
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::closing::CloseHandle;

/// What the model says next.
#[derive(Debug, Clone)]
pub enum Reply {
    /// A final answer.
    Text(String),
    /// Tool calls (id, name, arguments JSON text) with optional text before them.
    ToolCalls {
        text: String,
        calls: Vec<(String, String, String)>,
    },
    /// An answer cut off by the output limit.
    Truncated(String),
    /// An error status with the format's error body, and `Retry-After` when given.
    Error {
        status: u16,
        kind: String,
        message: String,
        retry_after: Option<String>,
    },
    /// 200 with a body that is not valid for the format.
    Malformed,
    /// A streamed answer whose connection drops after some text.
    Disconnect { after_text: String },
    /// A streamed answer the server cuts off, as llama-cpp-python does when another
    /// request arrives: the text (maybe none), then `data: [DONE]` and no finish
    /// reason (Anthropic format: the body just ends, without a stop reason).
    Cut(String),
    /// `200` and an event stream carrying an error after some text, as LiteLLM
    /// sends an upstream error once streaming began (`"code": "400"` as a string).
    StreamError {
        after_text: String,
        code: String,
        message: String,
    },
    /// Wait, then answer with the inner reply.
    Delayed(Duration, Box<Reply>),
    /// Wait until the test calls [`Hold::release`], then answer with the inner
    /// reply: for tests that must act while a model call is in flight.
    Held(Hold, Box<Reply>),
    /// A raw JSON body, sent as is (non-streaming only).
    Json(Value),
    /// Text streamed without end, as fast as the client reads it.
    Endless,
    /// The connection is accepted and nothing is ever answered.
    Silent,
}

/// Ways real servers differ from the reference APIs.
#[derive(Debug, Clone, Copy, Default)]
pub struct Quirks {
    /// Repeat the function name in every streamed tool-call fragment (llama.cpp).
    pub repeat_tool_names: bool,
    /// Send no usage at all (llama-cpp-python's streams).
    pub no_usage: bool,
}

/// A reply held back until the test lets it go.
#[derive(Debug, Clone)]
pub struct Hold(Arc<tokio::sync::watch::Sender<bool>>);

impl Hold {
    pub fn new() -> Self {
        Self(Arc::new(tokio::sync::watch::channel(false).0))
    }

    pub fn release(&self) {
        self.0.send_replace(true);
    }

    async fn released(&self) {
        let _ = self.0.subscribe().wait_for(|released| *released).await;
    }
}

impl Default for Hold {
    fn default() -> Self {
        Self::new()
    }
}

/// Which wire format a fake speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    OpenAi,
    Anthropic,
}

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    /// When it arrived.
    pub at: std::time::Instant,
    pub method: String,
    /// The path, without the prefix the fake was started under.
    pub path: String,
    /// The query string (`beta=true`), empty if none.
    pub query: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

struct Script {
    wire: Wire,
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
    models: Vec<String>,
    usage: (u64, u64),
    quirks: Quirks,
    /// Requests whose messages are longer than this (in bytes of JSON) overflow
    /// the context as llama-cpp-python does.
    context_window: Option<usize>,
    /// Answers a request when the script is empty (benchmarks: endless turns).
    fallback: Option<fn(&Value) -> Reply>,
    /// The pause between streamed chunks (1 ms: readers see them arrive apart).
    chunk_pause: Duration,
    /// Why requests were refused: each fails the test when the fake is dropped.
    violations: Vec<String>,
    /// Requests to paths the fake does not serve, as `METHOD /path?query`.
    strays: Vec<String>,
    /// Title requests (Chorus titling a new thread), answered on their own.
    titles: Vec<RecordedRequest>,
    /// What a title request is answered; `None`: the first line of its first user
    /// message, as it was.
    title_reply: Option<Reply>,
    /// Answers rendered so far: each gets its own message id, as from a real API
    /// (Claude Code puts an answer's blocks together by it).
    answered: u64,
    /// The path prefix the API is served under (`/llm`), empty for none.
    prefix: String,
    /// The embedding models served (`crate::fake_embed`).
    embedding_models: Vec<String>,
    /// How embedding requests are answered.
    embed_mode: crate::fake_embed::EmbedMode,
    /// Embedding requests, apart from the model calls.
    embeddings: Vec<RecordedRequest>,
}

type Shared = Arc<Mutex<Script>>;

/// How Chorus's title request begins (`control-plane/src/summaries.rs`).
const TITLE_INSTRUCTION: &str = "Write a title of at most 8 words";
/// How OpenCode's title request begins (1.18, when `run` gets no `--title`).
const OPENCODE_TITLE_INSTRUCTION: &str = "You are a title generator";

/// The first line of the first user message of a request (either wire format).
fn first_user_line(body: &Value) -> String {
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let text = |content: &Value| match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b["text"].as_str())
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    messages
        .iter()
        .find(|m| m["role"] == "user")
        .map(|m| text(&m["content"]))
        .and_then(|t| {
            t.lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .map(str::to_string)
        })
        .unwrap_or_else(|| "untitled".into())
}

/// A fake model server. `FakeOpenAi::start()` / `FakeAnthropic::start()` make one.
pub struct FakeModel {
    addr: std::net::SocketAddr,
    script: Shared,
    task: JoinHandle<()>,
}

/// The OpenAI-format fake (also serves Ollama's `/api/tags` and OpenRouter's `/key`).
pub struct FakeOpenAi;
/// The Anthropic-format fake.
pub struct FakeAnthropic;

impl FakeOpenAi {
    #[allow(clippy::new_ret_no_self)]
    pub async fn start() -> FakeModel {
        FakeModel::start(Wire::OpenAi, &["fake-model"]).await
    }
}

impl FakeAnthropic {
    #[allow(clippy::new_ret_no_self)]
    pub async fn start() -> FakeModel {
        FakeModel::start(Wire::Anthropic, &["claude-fake"]).await
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.task.abort();
        if std::thread::panicking() {
            return;
        }
        let violations = std::mem::take(
            &mut self
                .script
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .violations,
        );
        assert!(
            violations.is_empty(),
            "the fake model got requests a real API would refuse (or that nothing was scripted for):\n{}",
            violations.join("\n")
        );
    }
}

impl FakeModel {
    pub async fn start(wire: Wire, models: &[&str]) -> Self {
        Self::start_under(wire, models, "").await
    }

    /// A fake whose API is served below `prefix` only (`/llm`: a run endpoint's model
    /// proxy, for a CLI pointed at `<endpoint>/llm`); requests outside it are strays.
    pub async fn start_under(wire: Wire, models: &[&str], prefix: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake model");
        let addr = listener.local_addr().expect("fake model address");
        let script = Arc::new(Mutex::new(Script {
            wire,
            replies: VecDeque::new(),
            requests: Vec::new(),
            models: models
                .iter()
                .map(std::string::ToString::to_string)
                .collect(),
            usage: (20, 10),
            quirks: Quirks::default(),
            context_window: None,
            fallback: None,
            chunk_pause: Duration::from_millis(1),
            violations: Vec::new(),
            strays: Vec::new(),
            titles: Vec::new(),
            title_reply: None,
            answered: 0,
            prefix: prefix.to_string(),
            embedding_models: vec!["fake-embed".to_string()],
            embed_mode: crate::fake_embed::EmbedMode::Normal,
            embeddings: Vec::new(),
        }));
        let api = Router::new()
            .route("/v1/chat/completions", post(answer))
            .route("/v1/messages", post(answer))
            .route("/v1/models", get(list_models))
            .route("/api/tags", get(ollama_tags))
            .route("/v1/key", get(openrouter_key))
            .route("/v1/embeddings", post(embed_openai))
            .route("/api/embed", post(embed_ollama));
        let app = if prefix.is_empty() {
            api
        } else {
            Router::new().nest(prefix, api)
        };
        let app = app
            // Real servers take requests far over axum's default of 2 MB (a history
            // with a big file in it); they refuse by context length, not body size.
            .fallback(stray)
            .layer(axum::extract::DefaultBodyLimit::max(64 * 1024 * 1024))
            .with_state(script.clone());
        let task = tokio::spawn(async move {
            let listener = crate::closing::ClosingListener(listener);
            let app = app.into_make_service_with_connect_info::<CloseHandle>();
            let _ = axum::serve(listener, app).await;
        });
        FakeModel { addr, script, task }
    }

    /// Base URL with `/v1` (OPENAI_BASE_URL, OPENROUTER_BASE_URL).
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    /// Base URL of the host (ANTHROPIC_BASE_URL, OLLAMA_BASE_URL, LMSTUDIO_BASE_URL).
    pub fn host_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `http://127.0.0.1:<port>` without the prefix: what a CLI flavor takes as its
    /// run endpoint when the fake was started under `/llm`.
    pub fn addr(&self) -> std::net::SocketAddr {
        self.addr
    }

    pub fn set_models(&self, models: &[&str]) -> &Self {
        self.script.lock().unwrap().models = models
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        self
    }

    /// The pause between the chunks of a streamed answer (1 ms unless set; zero
    /// sends them at once, for benchmarks of Chorus rather than of the fake).
    /// The usage every answer reports from now on (input and output tokens; 20
    /// and 10 at start).
    pub fn set_usage(&self, input: u64, output: u64) -> &Self {
        self.script.lock().unwrap().usage = (input, output);
        self
    }

    pub fn set_chunk_pause(&self, pause: Duration) -> &Self {
        self.script.lock().unwrap().chunk_pause = pause;
        self
    }

    /// Behave like a less regular server.
    pub fn set_quirks(&self, quirks: Quirks) -> &Self {
        self.script.lock().unwrap().quirks = quirks;
        self
    }

    /// Requests whose messages take more than `bytes` of JSON overflow the context
    /// the way llama-cpp-python does: a streaming request gets `200` with an empty
    /// event stream, after which the server closes that connection (still
    /// advertising keep-alive: the next request sent on it gets no answer, see
    /// [`crate::closing`]); a plain one gets `400 context_length_exceeded`. Such
    /// requests use no scripted reply.
    pub fn set_context_window(&self, bytes: usize) -> &Self {
        self.script.lock().unwrap().context_window = Some(bytes);
        self
    }

    /// Why requests were refused so far (each also fails the test at drop); taking
    /// them clears them, for tests that provoke a refusal on purpose.
    pub fn take_violations(&self) -> Vec<String> {
        std::mem::take(&mut self.script.lock().unwrap().violations)
    }

    pub fn push(&self, reply: Reply) -> &Self {
        self.script.lock().unwrap().replies.push_back(reply);
        self
    }

    /// Title requests (Chorus titling a thread after its first answer). They are
    /// answered without the script and are not in [`FakeModel::requests`], so a
    /// test scripts only the conversation it is about.
    pub fn title_requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().unwrap().titles.clone()
    }

    /// What title requests get from now on (by default the first line of the
    /// request's first user message).
    pub fn set_title_reply(&self, reply: Reply) -> &Self {
        self.script.lock().unwrap().title_reply = Some(reply);
        self
    }

    /// How requests are answered once the script is empty (instead of an error).
    pub fn set_fallback(&self, answer: fn(&Value) -> Reply) -> &Self {
        self.script.lock().unwrap().fallback = Some(answer);
        self
    }

    /// Requests to the model endpoints (not the model lists, not titles).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().unwrap().requests.clone()
    }

    /// Requests to anything the fake does not serve (`DELETE /v1/keys/x`), as
    /// `METHOD /path?query`: they got a 404 and are recorded nowhere else.
    pub fn stray_requests(&self) -> Vec<String> {
        self.script.lock().unwrap().strays.clone()
    }

    /// The embedding models served (`fake-embed` unless set).
    pub fn set_embedding_models(&self, models: &[&str]) -> &Self {
        self.script.lock().unwrap().embedding_models =
            models.iter().map(ToString::to_string).collect();
        self
    }

    /// How embedding requests are answered from now on (fail on demand).
    pub fn set_embed_mode(&self, mode: crate::fake_embed::EmbedMode) -> &Self {
        self.script.lock().unwrap().embed_mode = mode;
        self
    }

    /// Embedding requests so far (not in [`FakeModel::requests`]).
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().unwrap().embeddings.clone()
    }

    /// Waits until at least `n` requests arrived.
    pub async fn wait_for_requests(&self, n: usize, timeout: Duration) -> Vec<RecordedRequest> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let requests = self.requests();
            if requests.len() >= n || tokio::time::Instant::now() >= deadline {
                return requests;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

async fn embed_openai(
    State(script): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    embed(script, uri, headers, body, false)
}

async fn embed_ollama(
    State(script): State<Shared>,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
) -> Response {
    embed(script, uri, headers, body, true)
}

/// An embeddings request, checked strictly and answered as the mode says.
fn embed(
    script: Shared,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: String,
    ollama: bool,
) -> Response {
    use crate::fake_embed::{EmbedMode, answer, error_body, inputs, problems};
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let mut script = script.lock().unwrap();
    script.embeddings.push(RecordedRequest {
        at: std::time::Instant::now(),
        method: "POST".into(),
        path: uri.path().to_string(),
        query: uri.query().unwrap_or("").to_string(),
        headers: headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    v.to_str().unwrap_or_default().to_string(),
                )
            })
            .collect(),
        body: body.clone(),
    });
    let problems = problems(&body, ollama, &script.embedding_models);
    if !problems.is_empty() {
        script
            .violations
            .extend(problems.iter().map(|p| format!("POST {}: {p}", uri.path())));
        let message = problems.join("; ");
        let error = if ollama {
            json!({"error": message})
        } else {
            json!({"error": {"message": message, "type": "invalid_request_error", "param": null, "code": null}})
        };
        return (StatusCode::BAD_REQUEST, axum::Json(error)).into_response();
    }
    let model = body["model"].as_str().unwrap_or_default();
    match script.embed_mode {
        EmbedMode::Status(status) => (
            StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
            axum::Json(error_body(status, ollama)),
        )
            .into_response(),
        mode => axum::Json(answer(
            &inputs(&body),
            model,
            ollama,
            mode == EmbedMode::WrongDims,
        ))
        .into_response(),
    }
}

async fn stray(
    State(script): State<Shared>,
    method: axum::http::Method,
    uri: axum::http::Uri,
) -> StatusCode {
    let target = uri.path_and_query().map_or("/", |p| p.as_str());
    script
        .lock()
        .unwrap()
        .strays
        .push(format!("{method} {target}"));
    StatusCode::NOT_FOUND
}

async fn answer(
    State(script): State<Shared>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    ConnectInfo(connection): ConnectInfo<CloseHandle>,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let streaming = body.get("stream").and_then(Value::as_bool).unwrap_or(false);
    let max_tokens = body
        .get("max_tokens")
        .and_then(Value::as_u64)
        .unwrap_or(4096);
    let messages_len = body.get("messages").map_or(0, |m| m.to_string().len());
    let is_title = {
        let text = body.to_string();
        text.contains(TITLE_INSTRUCTION) || text.contains(OPENCODE_TITLE_INSTRUCTION)
    };
    let offered = offered_tools(&body);
    let (wire, reply, usage, quirks, pause, answer_id) = {
        let mut script = script.lock().unwrap();
        script.answered += 1;
        let answer_id = script.answered;
        let path = uri.path();
        let path = path
            .strip_prefix(script.prefix.as_str())
            .unwrap_or(path)
            .to_string();
        let recorded = if is_title {
            &mut script.titles
        } else {
            &mut script.requests
        };
        recorded.push(RecordedRequest {
            at: std::time::Instant::now(),
            method: method.to_string(),
            path,
            query: uri.query().unwrap_or("").to_string(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        v.to_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            body: body.clone(),
        });
        let wire = script.wire;
        let problems = match wire {
            Wire::OpenAi => crate::wire_rules::openai_problems(&body),
            Wire::Anthropic => crate::wire_rules::anthropic_problems(&body),
        };
        if !problems.is_empty() {
            let message = problems.join("; ");
            let n = script.requests.len();
            script.violations.push(format!("request {n}: {message}"));
            drop(script);
            return render_error(wire, 400, "invalid_request_error", &message, None);
        }
        if script
            .context_window
            .is_some_and(|window| messages_len > window)
        {
            drop(script);
            return if streaming {
                // llama-cpp-python closes the socket after this, although the
                // response says keep-alive.
                connection.close_after_response();
                sse_response(Vec::new(), Duration::ZERO)
            } else {
                render_error(
                    wire,
                    400,
                    "context_length_exceeded",
                    "Requested tokens exceed context window",
                    None,
                )
            };
        }
        if is_title {
            let reply = script
                .title_reply
                .clone()
                .unwrap_or_else(|| Reply::Text(first_user_line(&body)));
            (
                wire,
                Some(reply),
                script.usage,
                script.quirks,
                script.chunk_pause,
                answer_id,
            )
        } else {
            let reply = script
                .replies
                .pop_front()
                .or_else(|| script.fallback.map(|answer| answer(&body)));
            if reply.is_none() {
                let n = script.requests.len();
                script
                    .violations
                    .push(format!("request {n}: no scripted reply left for it"));
            }
            (
                wire,
                reply,
                script.usage,
                script.quirks,
                script.chunk_pause,
                answer_id,
            )
        }
    };
    let mut reply = reply.unwrap_or(Reply::Error {
        status: 400,
        kind: "invalid_request_error".into(),
        message: "fake model: no scripted reply left for this request".into(),
        retry_after: None,
    });
    loop {
        reply = match reply {
            Reply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                *inner
            }
            Reply::Held(hold, inner) => {
                hold.released().await;
                *inner
            }
            Reply::Silent => std::future::pending().await,
            other => {
                break render(
                    wire,
                    as_offered(other, &offered),
                    streaming,
                    Render {
                        usage,
                        quirks,
                        max_tokens,
                        pause,
                        answer_id,
                    },
                );
            }
        };
    }
}

/// How a scripted turn is rendered.
#[derive(Clone, Copy)]
struct Render {
    usage: (u64, u64),
    quirks: Quirks,
    /// The request's `max_tokens`: a truncated answer used all of them.
    max_tokens: u64,
    /// The pause between streamed chunks.
    pause: Duration,
    /// This answer's number: its message id is `msg_fake_<n>` / `chatcmpl-fake-<n>`.
    answer_id: u64,
}

/// The tool names a request offers, as it spells them.
fn offered_tools(body: &Value) -> Vec<String> {
    body.get("tools")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|t| {
            t.get("name")
                .or_else(|| t.pointer("/function/name"))
                .and_then(Value::as_str)
        })
        .map(str::to_string)
        .collect()
}

/// A scripted tool call names the tool as Chorus does (`file_write`); a CLI offers it
/// with its MCP prefix: Claude Code `mcp__<server>__file_write`, OpenCode
/// `chorus_file_write`. The call is made with the one offered name that is the
/// scripted one or one of those, as a model would call it; with none, the name stays
/// as scripted. (Only these prefixes: `write` must not become Chorus's `file_write`.)
fn as_offered(reply: Reply, offered: &[String]) -> Reply {
    let Reply::ToolCalls { text, calls } = reply else {
        return reply;
    };
    let calls = calls
        .into_iter()
        .map(|(id, name, args)| {
            let wire = wire_name(&name);
            let claude = format!("__{wire}");
            let opencode = format!("chorus_{wire}");
            let prefixed: Vec<&String> = offered
                .iter()
                .filter(|o| (o.starts_with("mcp__") && o.ends_with(&claude)) || **o == opencode)
                .collect();
            let name = match prefixed.as_slice() {
                _ if offered.contains(&wire) => wire,
                [only] => (*only).clone(),
                _ => name,
            };
            (id, name, args)
        })
        .collect();
    Reply::ToolCalls { text, calls }
}

fn render_error(
    wire: Wire,
    status: u16,
    kind: &str,
    message: &str,
    retry_after: Option<String>,
) -> Response {
    let body = match wire {
        Wire::OpenAi => json!({"error": {"message": message, "type": kind, "code": kind}}),
        Wire::Anthropic => {
            json!({"type": "error", "error": {"type": kind, "message": message}})
        }
    };
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(wait) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", wait.parse().unwrap());
    }
    response
}

fn render(wire: Wire, reply: Reply, streaming: bool, how: Render) -> Response {
    let usage = how.usage;
    match reply {
        Reply::Error {
            status,
            kind,
            message,
            retry_after,
        } => render_error(wire, status, &kind, &message, retry_after),
        Reply::Endless => endless(wire),
        Reply::Malformed if streaming => sse_response(
            vec![Ok(Bytes::from("data: {this is not json\n\n"))],
            how.pause,
        ),
        Reply::Malformed => {
            ([("content-type", "application/json")], "{\"choices\": [").into_response()
        }
        Reply::Json(value) => axum::Json(value).into_response(),
        Reply::Disconnect { after_text } => {
            let mut chunks: Vec<Result<Bytes, std::io::Error>> = match wire {
                Wire::OpenAi => openai_events(&Turn::text(after_text), how, false),
                Wire::Anthropic => anthropic_events(&Turn::text(after_text), how, false),
            }
            .into_iter()
            .map(Ok)
            .collect();
            chunks.push(Err(std::io::Error::other("fake model: connection dropped")));
            sse_response(chunks, how.pause)
        }
        Reply::Cut(text) => {
            let mut chunks = match wire {
                Wire::OpenAi => openai_events(&Turn::text(text), how, false),
                Wire::Anthropic => anthropic_events(&Turn::text(text), how, false),
            };
            if wire == Wire::OpenAi {
                chunks.push(Bytes::from("data: [DONE]\n\n"));
            }
            sse_response(chunks.into_iter().map(Ok).collect(), how.pause)
        }
        Reply::StreamError {
            after_text,
            code,
            message,
        } => {
            let mut chunks = match wire {
                Wire::OpenAi => openai_events(&Turn::text(after_text), how, false),
                Wire::Anthropic => anthropic_events(&Turn::text(after_text), how, false),
            };
            chunks.push(match wire {
                Wire::OpenAi => sse(
                    None,
                    &json!({"error": {"message": message, "type": null, "param": null, "code": code}}),
                ),
                Wire::Anthropic => sse(
                    Some("error"),
                    &json!({"type": "error", "error": {"type": code, "message": message}}),
                ),
            });
            sse_response(chunks.into_iter().map(Ok).collect(), how.pause)
        }
        Reply::Text(_) | Reply::ToolCalls { .. } | Reply::Truncated(_) => {
            let turn = Turn::from(reply);
            let how = Render {
                // Cut off by the output limit: every token asked for was used.
                usage: if turn.truncated {
                    (usage.0, how.max_tokens)
                } else {
                    usage
                },
                ..how
            };
            match (wire, streaming) {
                (Wire::OpenAi, true) => sse_response(
                    openai_events(&turn, how, true)
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    how.pause,
                ),
                (Wire::Anthropic, true) => sse_response(
                    anthropic_events(&turn, how, true)
                        .into_iter()
                        .map(Ok)
                        .collect(),
                    how.pause,
                ),
                (Wire::OpenAi, false) => axum::Json(openai_body(&turn, how)).into_response(),
                (Wire::Anthropic, false) => axum::Json(anthropic_body(&turn, how)).into_response(),
            }
        }
        Reply::Delayed(..) | Reply::Held(..) | Reply::Silent => {
            unreachable!("waits are unwrapped before rendering")
        }
    }
}

/// An answer that never ends: text deltas as fast as the client reads them.
fn endless(wire: Wire) -> Response {
    let piece = "all work and no play makes jack a dull boy ".repeat(20);
    let event = match wire {
        Wire::OpenAi => sse(
            None,
            &json!({"id": "chatcmpl-fake", "object": "chat.completion.chunk",
                    "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}]}),
        ),
        Wire::Anthropic => sse(
            Some("content_block_delta"),
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}),
        ),
    };
    let head = match wire {
        Wire::OpenAi => Bytes::new(),
        Wire::Anthropic => Bytes::from(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"claude-fake\",\"usage\":{\"input_tokens\":1,\"output_tokens\":1}}}\n\nevent: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
        ),
    };
    use futures::StreamExt;
    let stream = futures::stream::once(async move { Ok::<_, std::io::Error>(head) })
        .chain(futures::stream::repeat_with(move || Ok(event.clone())));
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

fn sse_response(chunks: Vec<Result<Bytes, std::io::Error>>, pause: Duration) -> Response {
    let stream = futures_util_stream(chunks, pause);
    Response::builder()
        .header("content-type", "text/event-stream")
        .body(Body::from_stream(stream))
        .unwrap()
}

/// A stream that yields the chunks with a short pause between them, so readers see
/// them arrive separately (as from a real server).
fn futures_util_stream(
    chunks: Vec<Result<Bytes, std::io::Error>>,
    pause: Duration,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> + Send {
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(async move {
        for chunk in chunks {
            if tx.send(chunk).await.is_err() {
                return;
            }
            if !pause.is_zero() {
                tokio::time::sleep(pause).await;
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

/// A model turn, format-neutral.
struct Turn {
    text: String,
    calls: Vec<(String, String, String)>,
    truncated: bool,
}

impl Turn {
    fn text(text: String) -> Self {
        Turn {
            text,
            calls: Vec::new(),
            truncated: false,
        }
    }
}

impl From<Reply> for Turn {
    fn from(reply: Reply) -> Self {
        match reply {
            Reply::Text(text) => Turn::text(text),
            Reply::Truncated(text) => Turn {
                truncated: true,
                ..Turn::text(text)
            },
            Reply::ToolCalls { text, calls } => Turn {
                text,
                calls,
                truncated: false,
            },
            _ => Turn::text(String::new()),
        }
    }
}

/// Splits text into a few pieces, as a model streams it (at least three, none over
/// 16 Ki characters: real servers stream tokens, never one huge event).
fn pieces(text: &str) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(3).clamp(1, 16 * 1024);
    chars.chunks(size).map(|c| c.iter().collect()).collect()
}

/// A scripted tool name as a real model would send it: one of the names it was
/// offered, which match `^[a-zA-Z0-9_-]{1,64}$` (`file.read` is offered as `file_read`).
fn wire_name(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

fn sse(event: Option<&str>, data: &Value) -> Bytes {
    match event {
        Some(name) => Bytes::from(format!("event: {name}\ndata: {data}\n\n")),
        None => Bytes::from(format!("data: {data}\n\n")),
    }
}

fn openai_finish(turn: &Turn) -> &'static str {
    if turn.truncated {
        "length"
    } else if turn.calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

fn openai_events(turn: &Turn, how: Render, complete: bool) -> Vec<Bytes> {
    let usage = how.usage;
    let chunk = |delta: Value, finish: Value| {
        sse(
            None,
            &json!({"id": format!("chatcmpl-fake-{}", how.answer_id), "object": "chat.completion.chunk",
                    "model": "fake-model",
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}),
        )
    };
    let mut out = vec![chunk(
        json!({"role": "assistant", "content": ""}),
        Value::Null,
    )];
    for piece in pieces(&turn.text) {
        out.push(chunk(json!({"content": piece}), Value::Null));
    }
    if !complete {
        return out;
    }
    for (index, (id, name, args)) in turn.calls.iter().enumerate() {
        let name = wire_name(name);
        out.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function", "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        for piece in pieces(args) {
            let function = if how.quirks.repeat_tool_names {
                json!({"name": name, "arguments": piece})
            } else {
                json!({"arguments": piece})
            };
            out.push(chunk(
                json!({"tool_calls": [{"index": index, "function": function}]}),
                Value::Null,
            ));
        }
    }
    out.push(chunk(json!({}), Value::from(openai_finish(turn))));
    if !how.quirks.no_usage {
        out.push(sse(
            None,
            &json!({"id": format!("chatcmpl-fake-{}", how.answer_id), "object": "chat.completion.chunk", "choices": [],
                    "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}}),
        ));
    }
    out.push(Bytes::from("data: [DONE]\n\n"));
    out
}

fn openai_body(turn: &Turn, how: Render) -> Value {
    let usage = how.usage;
    let calls: Vec<Value> = turn
        .calls
        .iter()
        .map(|(id, name, args)| json!({"id": id, "type": "function", "function": {"name": wire_name(name), "arguments": args}}))
        .collect();
    let mut message = json!({"role": "assistant", "content": if turn.text.is_empty() { Value::Null } else { Value::from(turn.text.clone()) }});
    if !calls.is_empty() {
        message["tool_calls"] = Value::from(calls);
    }
    let mut body = json!({
        "id": format!("chatcmpl-fake-{}", how.answer_id), "object": "chat.completion", "model": "fake-model",
        "choices": [{"index": 0, "message": message, "finish_reason": openai_finish(turn)}],
        "usage": {"prompt_tokens": usage.0, "completion_tokens": usage.1, "total_tokens": usage.0 + usage.1}
    });
    if how.quirks.no_usage {
        body["usage"] = Value::Null;
    }
    body
}

fn anthropic_stop(turn: &Turn) -> &'static str {
    if turn.truncated {
        "max_tokens"
    } else if turn.calls.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    }
}

fn anthropic_events(turn: &Turn, how: Render, complete: bool) -> Vec<Bytes> {
    let usage = how.usage;
    let mut out = vec![sse(
        Some("message_start"),
        &json!({"type": "message_start", "message": {"id": format!("msg_fake_{}", how.answer_id), "type": "message", "role": "assistant",
                "content": [], "model": "claude-fake", "stop_reason": null,
                "usage": {"input_tokens": usage.0, "output_tokens": 1}}}),
    )];
    let mut index = 0;
    if !turn.text.is_empty() {
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        out.push(sse(Some("ping"), &json!({"type": "ping"})));
        for piece in pieces(&turn.text) {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": piece}}),
            ));
        }
        if !complete {
            return out;
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": 0}),
        ));
        index = 1;
    }
    for (i, (id, name, args)) in turn.calls.iter().enumerate() {
        let index = index + i;
        out.push(sse(
            Some("content_block_start"),
            &json!({"type": "content_block_start", "index": index,
                    "content_block": {"type": "tool_use", "id": id, "name": wire_name(name), "input": {}}}),
        ));
        for piece in pieces(args) {
            out.push(sse(
                Some("content_block_delta"),
                &json!({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": piece}}),
            ));
        }
        out.push(sse(
            Some("content_block_stop"),
            &json!({"type": "content_block_stop", "index": index}),
        ));
    }
    out.push(sse(
        Some("message_delta"),
        &json!({"type": "message_delta", "delta": {"stop_reason": anthropic_stop(turn), "stop_sequence": null},
                "usage": {"output_tokens": usage.1}}),
    ));
    out.push(sse(Some("message_stop"), &json!({"type": "message_stop"})));
    out
}

fn anthropic_body(turn: &Turn, how: Render) -> Value {
    let usage = how.usage;
    let mut content = Vec::new();
    if !turn.text.is_empty() {
        content.push(json!({"type": "text", "text": turn.text}));
    }
    for (id, name, args) in &turn.calls {
        let input: Value = serde_json::from_str(args).unwrap_or(json!({}));
        content
            .push(json!({"type": "tool_use", "id": id, "name": wire_name(name), "input": input}));
    }
    json!({"id": format!("msg_fake_{}", how.answer_id), "type": "message", "role": "assistant", "model": "claude-fake",
           "content": content, "stop_reason": anthropic_stop(turn),
           "usage": {"input_tokens": usage.0, "output_tokens": usage.1}})
}

async fn list_models(State(script): State<Shared>, headers: HeaderMap) -> Response {
    let script = script.lock().unwrap();
    let authorized = match script.wire {
        Wire::OpenAi => headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .is_none_or(|v| !v.contains("bad-key")),
        Wire::Anthropic => headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v != "bad-key"),
    };
    if !authorized {
        return (
            StatusCode::UNAUTHORIZED,
            axum::Json(json!({"error": {"message": "invalid key"}})),
        )
            .into_response();
    }
    let data: Vec<Value> = script
        .models
        .iter()
        .map(|m| json!({"id": m, "object": "model"}))
        .collect();
    axum::Json(json!({"object": "list", "data": data})).into_response()
}

async fn ollama_tags(State(script): State<Shared>) -> Response {
    let script = script.lock().unwrap();
    let models: Vec<Value> = script
        .models
        .iter()
        .map(|m| json!({"name": m, "model": m}))
        .collect();
    axum::Json(json!({"models": models})).into_response()
}

async fn openrouter_key() -> Result<axum::Json<Value>, Infallible> {
    Ok(axum::Json(json!({"data": {"label": "fake", "usage": 0}})))
}

// ------------------------------------------------------------ script helpers

/// The model asks for one tool call.
pub fn tool_call(id: &str, name: &str, arguments: Value) -> Reply {
    tool_calls(&[(id, name, arguments)])
}

/// The model asks for several tool calls in one turn.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
    Reply::ToolCalls {
        text: String::new(),
        calls: calls
            .iter()
            .map(|(id, name, args)| (id.to_string(), name.to_string(), args.to_string()))
            .collect(),
    }
}

/// The model answers with text.
pub fn text(content: &str) -> Reply {
    Reply::Text(content.to_string())
}

/// An error status; `kind` is the format's error type (e.g. `rate_limit_error`).
pub fn error(status: u16, kind: &str, message: &str) -> Reply {
    Reply::Error {
        status,
        kind: kind.into(),
        message: message.into(),
        retry_after: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(reply: Reply) -> Vec<String> {
        match reply {
            Reply::ToolCalls { calls, .. } => calls.into_iter().map(|c| c.1).collect(),
            _ => panic!("not tool calls"),
        }
    }

    #[test]
    fn a_scripted_call_takes_the_name_the_cli_offers() {
        let offered =
            |names: &[&str]| -> Vec<String> { names.iter().map(ToString::to_string).collect() };
        let call = |name: &str| tool_call("c1", name, json!({}));
        let claude = offered(&["mcp__chorus__file_read", "mcp__chorus__file_write"]);
        assert_eq!(
            names(as_offered(call("file_write"), &claude)),
            ["mcp__chorus__file_write"]
        );
        let opencode = offered(&["chorus_file_read", "chorus_file_write"]);
        assert_eq!(
            names(as_offered(call("file.write"), &opencode)),
            ["chorus_file_write"]
        );
        // Chorus's own names are kept, and a shorter name is not widened to one.
        let api = offered(&["file_write", "job_stop"]);
        assert_eq!(names(as_offered(call("file_write"), &api)), ["file_write"]);
        assert_eq!(names(as_offered(call("write"), &api)), ["write"]);
        assert_eq!(names(as_offered(call("stop"), &api)), ["stop"]);
    }
}
