//! A fake OpenAI-compatible model server on 127.0.0.1. It answers from a script and
//! records every request it receives (headers and JSON body), so tests can check
//! exactly what Chorus sent.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this chat-completion body.
    Json(Value),
    /// This status with an OpenAI-style error body.
    Error { status: u16, message: String },
    /// Wait, then answer with the inner reply (a slow model, or one a test kills
    /// the worker under).
    Delayed(Duration, Box<Reply>),
}

#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: Value,
}

#[derive(Default)]
struct Script {
    replies: VecDeque<Reply>,
    requests: Vec<RecordedRequest>,
}

pub struct FakeOpenAi {
    addr: std::net::SocketAddr,
    script: Arc<Mutex<Script>>,
    task: JoinHandle<()>,
}

impl Drop for FakeOpenAi {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeOpenAi {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind fake model");
        let addr = listener.local_addr().expect("fake model address");
        let script = Arc::new(Mutex::new(Script::default()));
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/v1/models", get(models))
            .with_state(script.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        FakeOpenAi { addr, script, task }
    }

    /// The value for `OPENAI_BASE_URL`.
    pub fn base_url(&self) -> String {
        format!("http://{}/v1", self.addr)
    }

    pub fn push(&self, reply: Reply) -> &Self {
        self.script.lock().expect("script").replies.push_back(reply);
        self
    }

    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.script.lock().expect("script").requests.clone()
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

async fn chat(
    State(script): State<Arc<Mutex<Script>>>,
    headers: HeaderMap,
    body: String,
) -> Response {
    let body: Value = serde_json::from_str(&body).unwrap_or(Value::String(body));
    let reply = {
        let mut script = script.lock().expect("script");
        script.requests.push(RecordedRequest {
            path: "/v1/chat/completions".into(),
            headers: headers
                .iter()
                .map(|(k, v)| {
                    (
                        k.as_str().to_string(),
                        v.to_str().unwrap_or_default().to_string(),
                    )
                })
                .collect(),
            body,
        });
        script.replies.pop_front()
    };
    let mut reply = reply.unwrap_or(Reply::Error {
        status: 500,
        message: "fake model: no scripted reply left for this request".into(),
    });
    loop {
        match reply {
            Reply::Delayed(delay, inner) => {
                tokio::time::sleep(delay).await;
                reply = *inner;
            }
            Reply::Json(value) => return axum::Json(value).into_response(),
            Reply::Error { status, message } => {
                let status =
                    StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
                let body = json!({"error": {"message": message, "type": "fake_error"}});
                return (status, axum::Json(body)).into_response();
            }
        }
    }
}

async fn models() -> Response {
    axum::Json(json!({"object": "list", "data": [{"id": "fake-model", "object": "model"}]}))
        .into_response()
}

/// A chat-completion body that asks for one tool call.
pub fn tool_call(id: &str, name: &str, arguments: Value) -> Reply {
    tool_calls(&[(id, name, arguments)])
}

/// A chat-completion body that asks for several tool calls in one turn.
pub fn tool_calls(calls: &[(&str, &str, Value)]) -> Reply {
    let calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, arguments)| {
            json!({
                "id": id,
                "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()}
            })
        })
        .collect();
    Reply::Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": calls},
            "finish_reason": "tool_calls"
        }],
        "usage": {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
    }))
}

/// A chat-completion body with a final text answer.
pub fn text(content: &str) -> Reply {
    Reply::Json(json!({
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "model": "fake-model",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": content},
            "finish_reason": "stop"
        }],
        "usage": {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
    }))
}
