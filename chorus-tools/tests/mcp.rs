//! The MCP face through the real binary: `chorus-tools mcp` driven over its
//! stdin/stdout with line-delimited JSON-RPC, as a CLI drives it, against a stub
//! run endpoint.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Stdio;

use serde_json::{Value, json};
use support::{DEADLINE, FAILING_TOOL, Stub, TOKEN};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

/// A running `chorus-tools mcp` and the client end of its stdio.
struct Server {
    child: Child,
    stdin: ChildStdin,
    stdout: Lines<BufReader<ChildStdout>>,
    next_id: u64,
}

impl Server {
    /// Starts the server for `url` with `token`, and initializes the session.
    async fn start(url: &str, token: &str) -> (Server, Value) {
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus-tools"))
            .arg("mcp")
            .env("CHORUS_TOOLS_URL", url)
            .env("CHORUS_TOOLS_TOKEN", token)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut server = Server {
            child,
            stdin,
            stdout,
            next_id: 0,
        };
        // The version Claude Code 2.1 asks for; rmcp negotiates it.
        let init = server
            .request(
                "initialize",
                json!({
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "chorus-tools-test", "version": "0"}
                }),
            )
            .await;
        server
            .send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        (server, init)
    }

    async fn send(&mut self, message: Value) {
        let line = format!("{message}\n");
        self.stdin.write_all(line.as_bytes()).await.unwrap();
        self.stdin.flush().await.unwrap();
    }

    /// Sends a request and returns its response (result or error), skipping any
    /// notification the server sends meanwhile. Every line on stdout must be
    /// JSON-RPC: nothing else may be printed there.
    async fn request(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}))
            .await;
        loop {
            let line = tokio::time::timeout(DEADLINE, self.stdout.next_line())
                .await
                .unwrap_or_else(|_| panic!("no answer to {method} within {DEADLINE:?}"))
                .unwrap()
                .unwrap_or_else(|| panic!("the server closed stdout before answering {method}"));
            let message: Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("stdout carried a non-JSON line ({e}): {line}"));
            assert_eq!(message["jsonrpc"], "2.0", "{line}");
            if message["id"] == json!(id) {
                return message;
            }
        }
    }

    async fn call(&mut self, name: &str, arguments: Value) -> Value {
        let answer = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await;
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("tools/call gave no result: {answer}"))
    }

    /// Closes stdin (the CLI going away) and expects a clean exit.
    async fn close(mut self) {
        drop(self.stdin);
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("the server did not exit when its stdin closed")
            .unwrap();
        assert!(status.success(), "the server exited with {status}");
    }
}

/// The one text content of a tool result, and its error flag.
fn content(result: &Value) -> (String, bool) {
    let blocks = result["content"].as_array().expect("content is a list");
    assert_eq!(blocks.len(), 1, "{result}");
    assert_eq!(blocks[0]["type"], "text", "{result}");
    (
        blocks[0]["text"].as_str().unwrap().to_owned(),
        result["isError"].as_bool().unwrap_or(false),
    )
}

#[tokio::test]
async fn initialize_names_the_server_chorus_with_tools() {
    let stub = Stub::start(TOKEN).await;
    let (server, init) = Server::start(&stub.url, TOKEN).await;
    let result = &init["result"];
    assert_eq!(result["serverInfo"]["name"], "chorus", "{init}");
    assert_eq!(result["protocolVersion"], "2025-06-18", "{init}");
    assert!(result["capabilities"]["tools"].is_object(), "{init}");
    server.close().await;
}

#[tokio::test]
async fn the_list_is_exactly_the_endpoints() {
    let stub = Stub::start(TOKEN).await;
    let (mut server, _) = Server::start(&stub.url, TOKEN).await;
    let answer = server.request("tools/list", json!({})).await;
    let listed: Vec<Value> = answer["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("no tools in {answer}"))
        .iter()
        .map(|tool| {
            json!({
                "name": tool["name"],
                "description": tool["description"],
                "input_schema": tool["inputSchema"],
            })
        })
        .collect();
    assert_eq!(Value::Array(listed), support::offered_tools());
    assert!(answer["result"].get("nextCursor").is_none(), "{answer}");
    // Listing calls nothing.
    assert!(stub.calls().is_empty());
    server.close().await;
}

#[tokio::test]
async fn a_call_reaches_the_endpoint_and_returns_its_content() {
    let stub = Stub::start(TOKEN).await;
    let (mut server, _) = Server::start(&stub.url, TOKEN).await;
    // Without a tools/list first: the server fetches the offered set itself.
    let arguments = json!({"path": "notes.md", "range": {"start": 2}});
    let result = server.call("file_read", arguments.clone()).await;
    assert_eq!(
        content(&result),
        (format!("ran file_read with {arguments}"), false)
    );
    assert_eq!(
        stub.calls(),
        vec![json!({"name": "file_read", "arguments": arguments})]
    );

    let result = server
        .call(FAILING_TOOL, json!({"path": "a", "content": "b"}))
        .await;
    assert_eq!(
        content(&result),
        (
            "permission denied: file_write is not allowed here".to_owned(),
            true
        )
    );
    assert_eq!(stub.calls().len(), 2);
    server.close().await;
}

#[tokio::test]
async fn an_unknown_tool_is_an_error_result_naming_the_tools() {
    let stub = Stub::start(TOKEN).await;
    let (mut server, _) = Server::start(&stub.url, TOKEN).await;
    let result = server.call("bash", json!({"command": "id"})).await;
    assert_eq!(
        content(&result),
        (
            "unknown tool 'bash': this run offers file_read, file_write, completion_report"
                .to_owned(),
            true
        )
    );
    assert!(
        stub.calls().is_empty(),
        "an unoffered tool reached the endpoint"
    );
    server.close().await;
}

#[tokio::test]
async fn a_refusing_endpoint_gives_errors_not_a_crash() {
    let stub = Stub::start(TOKEN).await;
    let (mut server, init) = Server::start(&stub.url, "a-spent-credential").await;
    assert_eq!(init["result"]["serverInfo"]["name"], "chorus", "{init}");

    let answer = server.request("tools/list", json!({})).await;
    let message = answer["error"]["message"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(
        message.contains("the run this credential belonged to has ended"),
        "{answer}"
    );

    let result = server.call("file_read", json!({"path": "notes.md"})).await;
    let (text, is_error) = content(&result);
    assert!(is_error, "{result}");
    assert!(
        text.contains("the run this credential belonged to has ended (or it is another run's)"),
        "{text}"
    );

    // Still serving.
    let pong = server.request("ping", json!({})).await;
    assert!(pong.get("result").is_some(), "{pong}");
    assert!(stub.calls().is_empty());
    server.close().await;
}

#[tokio::test]
async fn an_endpoint_that_is_gone_gives_an_error_result() {
    let url = support::dead_url().await;
    let (mut server, _) = Server::start(&url, TOKEN).await;
    let result = server.call("file_read", json!({})).await;
    let (text, is_error) = content(&result);
    assert!(is_error, "{result}");
    assert!(
        text.contains(&format!("no Chorus run is listening at {url}")),
        "{text}"
    );
    server.close().await;
}

#[tokio::test]
async fn outside_a_run_mcp_exits_2_saying_so() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus-tools"))
        .arg("mcp")
        .env_remove("CHORUS_TOOLS_URL")
        .env_remove("CHORUS_TOOLS_TOKEN")
        .stdin(Stdio::null())
        .output();
    let out = tokio::time::timeout(DEADLINE, out).await.unwrap().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert!(String::from_utf8_lossy(&out.stderr).contains("runs only inside a Chorus run"));
}
