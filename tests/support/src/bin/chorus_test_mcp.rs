//! `chorus-test-mcp`: the MCP server of the end-to-end tests, built with `rmcp`.
//!
//! - `chorus-test-mcp stdio [--tag T]`: MCP over stdin and stdout (a tool process an
//!   agent's worker starts in its sandbox). `--tag` only marks its command line, so
//!   a test can find (and kill) it.
//! - `chorus-test-mcp http <addr>`: streamable HTTP at `http://<addr>/mcp`; prints
//!   `listening <addr>` once it accepts connections. Its sessions live in memory, so a
//!   restarted server knows none of the old ones.
//!
//! Tools: `echo {text}` (answers `echo: <text>`), `secret_word {}` (the one a test's
//! profile denies: running it would answer `swordfish`), `env {name}` (one variable of
//! its environment, or `unset`), and `add_tool {}` (adds a tool `late` and sends
//! `notifications/tools/list_changed`), `hang {}` (never answers) and `header {name}`
//! (a header of the HTTP request that carried the call).

#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Map, Value, json};

#[derive(Clone, Default)]
struct TestServer {
    /// `add_tool` was called: `late` is listed too.
    late: Arc<AtomicBool>,
}

fn tool(name: &str, description: &str, properties: Value) -> Tool {
    let schema = json!({"type": "object", "properties": properties});
    let Value::Object(schema) = schema else {
        unreachable!("an object")
    };
    Tool::new(name.to_string(), description.to_string(), Arc::new(schema))
}

fn text(result: String) -> CallToolResponse {
    CallToolResult::success(vec![ContentBlock::text(result)]).into()
}

impl TestServer {
    fn tools(&self) -> Vec<Tool> {
        let mut tools = vec![
            tool(
                "echo",
                "Echoes its text.",
                json!({"text": {"type": "string"}}),
            ),
            tool("secret_word", "Tells the secret word.", json!({})),
            tool(
                "env",
                "One variable of the server's environment.",
                json!({"name": {"type": "string"}}),
            ),
            tool("add_tool", "Adds the tool `late`.", json!({})),
            tool("hang", "Never answers.", json!({})),
            tool(
                "header",
                "One header of the HTTP request (streamable HTTP only).",
                json!({"name": {"type": "string"}}),
            ),
        ];
        if self.late.load(Ordering::SeqCst) {
            tools.push(tool("late", "Added by add_tool.", json!({})));
        }
        tools
    }
}

impl ServerHandler for TestServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("chorus-test-mcp", "1"))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args: Map<String, Value> = request.arguments.unwrap_or_default();
        let arg = |name: &str| {
            args.get(name)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        Ok(match request.name.as_ref() {
            "echo" => text(format!("echo: {}", arg("text"))),
            "secret_word" => text("swordfish".into()),
            "env" => text(std::env::var(arg("name")).unwrap_or_else(|_| "unset".into())),
            // Over HTTP: a header of the request that carried the call.
            "header" => text(
                context
                    .extensions
                    .get::<http::request::Parts>()
                    .and_then(|parts| parts.headers.get(arg("name")))
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("unset")
                    .to_string(),
            ),
            "add_tool" => {
                self.late.store(true, Ordering::SeqCst);
                let _ = context.peer.notify_tool_list_changed().await;
                text("added".into())
            }
            "late" => text("late tool ran".into()),
            "hang" => {
                tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                text("woke".into())
            }
            other => {
                CallToolResult::error(vec![ContentBlock::text(format!("no tool named {other}"))])
                    .into()
            }
        })
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("stdio") => {
            let server = TestServer::default()
                .serve(rmcp::transport::stdio())
                .await?;
            server.waiting().await?;
        }
        Some("http") => {
            use rmcp::transport::streamable_http_server::{
                StreamableHttpServerConfig, StreamableHttpService,
                session::local::LocalSessionManager,
            };
            let addr = args.get(1).map_or("127.0.0.1:0", String::as_str);
            let listener = tokio::net::TcpListener::bind(addr).await?;
            let bound = listener.local_addr()?;
            let server = TestServer::default();
            let service = StreamableHttpService::new(
                move || Ok(server.clone()),
                Arc::new(LocalSessionManager::default()),
                StreamableHttpServerConfig::default(),
            );
            let app = axum::Router::new().nest_service("/mcp", service);
            println!("listening {bound}");
            axum::serve(listener, app).await?;
        }
        _ => anyhow::bail!("usage: chorus-test-mcp stdio [--tag T] | chorus-test-mcp http <addr>"),
    }
    Ok(())
}
