//! A stub of the worker's run endpoint (the real one is the worker's, per run):
//! the same routes and JSON, a bearer credential checked, every call recorded.

#![allow(dead_code)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};

/// The credential the stub accepts.
pub const TOKEN: &str = "6f1d0c3a9b8e7d6c5b4a39281706f5e4d3c2b1a09f8e7d6c5b4a392817060f1e";

/// The tool whose calls come back as the tool's error.
pub const FAILING_TOOL: &str = "file_write";

/// How long a test waits for the binary before calling it hung.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// The stub's offered tools: schemas with nesting, enums and `required`, so a
/// list that loses or reorders anything does not compare equal.
pub fn offered_tools() -> Value {
    json!([
        {
            "name": "file_read",
            "description": "Read a file in the workspace.\nPaths are relative to the workspace root.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "Relative path."},
                    "range": {
                        "type": "object",
                        "properties": {
                            "start": {"type": "integer", "minimum": 1},
                            "end": {"type": "integer"}
                        }
                    }
                },
                "required": ["path"],
                "additionalProperties": false
            }
        },
        {
            "name": FAILING_TOOL,
            "description": "Write a file in the workspace.",
            "input_schema": {
                "type": "object",
                "properties": {
                    "path": {"type": "string"},
                    "content": {"type": "string"},
                    "mode": {"type": "string", "enum": ["create", "overwrite"]}
                },
                "required": ["path", "content"]
            }
        },
        {
            "name": "completion_report",
            "description": "Report the task done.",
            "input_schema": {"type": "object", "properties": {}}
        }
    ])
}

#[derive(Clone)]
struct Shared {
    token: String,
    calls: Arc<Mutex<Vec<Value>>>,
}

pub struct Stub {
    pub url: String,
    calls: Arc<Mutex<Vec<Value>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stub {
    /// A stub on 127.0.0.1:0 accepting `token` only.
    pub async fn start(token: &str) -> Stub {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let shared = Shared {
            token: token.to_owned(),
            calls: calls.clone(),
        };
        let app = Router::new()
            .route("/tools", get(list))
            .route("/tools/call", post(call))
            .with_state(shared);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Stub { url, calls, task }
    }

    /// The bodies of the `POST /tools/call` requests that got past the credential.
    pub fn calls(&self) -> Vec<Value> {
        self.calls.lock().unwrap().clone()
    }
}

impl Drop for Stub {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A loopback URL nothing listens on (bound, then closed).
pub async fn dead_url() -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    format!("http://{addr}")
}

fn authorized(shared: &Shared, headers: &HeaderMap) -> bool {
    let expected = format!("Bearer {}", shared.token);
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == expected)
}

fn refused() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        Json(json!({"error": "this credential opens no run here"})),
    )
        .into_response()
}

async fn list(State(shared): State<Shared>, headers: HeaderMap) -> Response {
    if !authorized(&shared, &headers) {
        return refused();
    }
    Json(json!({ "tools": offered_tools() })).into_response()
}

async fn call(
    State(shared): State<Shared>,
    headers: HeaderMap,
    Json(body): Json<Value>,
) -> Response {
    if !authorized(&shared, &headers) {
        return refused();
    }
    shared.calls.lock().unwrap().push(body.clone());
    let name = body["name"].as_str().unwrap_or_default();
    let answer = if name == FAILING_TOOL {
        json!({"content": "permission denied: file_write is not allowed here", "is_error": true})
    } else {
        json!({"content": format!("ran {name} with {}", body["arguments"]), "is_error": false})
    };
    Json(answer).into_response()
}
