//! The MCP face: `chorus-tools mcp`, a stdio MCP server named `chorus` that a CLI
//! starts as its child. It lists exactly the run's offered tools (the endpoint's
//! `GET /tools`, wire names, descriptions and schemas as they are) and forwards
//! each call to `POST /tools/call`. The CLIs' own allow/deny handling of MCP tools
//! is unreliable, so what this server lists is the boundary the model sees.
//!
//! Nothing but the protocol goes to stdout. Every failure becomes an answer: a
//! call that cannot be made is an error result saying why (the model and the
//! driver read it), never a hang or a crash of the server.

use std::sync::Arc;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use tokio::sync::Mutex;

use crate::endpoint::{Endpoint, EndpointError, ToolSpec};

/// The server's name: the CLIs prefix tool names with it
/// (`mcp__chorus__file_read`, `chorus_file_read`).
pub const SERVER_NAME: &str = "chorus";

/// Serves MCP on stdin/stdout until the client closes stdin.
pub async fn serve(endpoint: Endpoint) -> anyhow::Result<()> {
    let server = ChorusServer::new(endpoint)
        .serve(rmcp::transport::stdio())
        .await?;
    server.waiting().await?;
    Ok(())
}

pub struct ChorusServer {
    endpoint: Endpoint,
    /// The run's offered set, fetched once: it does not change during a run.
    tools: Mutex<Option<Vec<ToolSpec>>>,
}

impl ChorusServer {
    pub fn new(endpoint: Endpoint) -> Self {
        Self {
            endpoint,
            tools: Mutex::new(None),
        }
    }

    /// The offered tools, from the endpoint on first use (a failed fetch is tried
    /// again next time rather than remembered).
    async fn offered(&self) -> Result<Vec<ToolSpec>, EndpointError> {
        let mut cached = self.tools.lock().await;
        if let Some(tools) = cached.as_ref() {
            return Ok(tools.clone());
        }
        let tools = self.endpoint.list().await?;
        *cached = Some(tools.clone());
        Ok(tools)
    }
}

fn to_mcp(spec: ToolSpec) -> Tool {
    Tool::new(spec.name, spec.description, Arc::new(spec.input_schema))
}

fn error_result(text: String) -> CallToolResponse {
    CallToolResult::error(vec![ContentBlock::text(text)]).into()
}

/// The text a call of a tool the run does not offer gets back.
pub fn unknown_tool(name: &str, offered: &[ToolSpec]) -> String {
    let names: Vec<&str> = offered.iter().map(|t| t.name.as_str()).collect();
    format!(
        "unknown tool '{name}': this run offers {}",
        if names.is_empty() {
            "no tools".to_owned()
        } else {
            names.join(", ")
        }
    )
}

impl ServerHandler for ChorusServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(SERVER_NAME, env!("CARGO_PKG_VERSION")))
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        match self.offered().await {
            Ok(tools) => Ok(ListToolsResult::with_all_items(
                tools.into_iter().map(to_mcp).collect(),
            )),
            Err(e) => Err(McpError::internal_error(
                format!("chorus-tools could not list the run's tools: {e}"),
                None,
            )),
        }
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let offered = match self.offered().await {
            Ok(tools) => tools,
            Err(e) => {
                return Ok(error_result(format!(
                    "chorus-tools could not complete the call: {e}"
                )));
            }
        };
        if !offered.iter().any(|t| t.name == request.name) {
            return Ok(error_result(unknown_tool(&request.name, &offered)));
        }
        let arguments = request.arguments.unwrap_or_default();
        match self.endpoint.call(&request.name, &arguments).await {
            Ok(outcome) if outcome.is_error => Ok(error_result(outcome.content)),
            Ok(outcome) => {
                Ok(CallToolResult::success(vec![ContentBlock::text(outcome.content)]).into())
            }
            Err(e) => Ok(error_result(format!(
                "chorus-tools could not complete the call: {e}"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    #[test]
    fn unknown_tool_names_the_offered_set() {
        let spec = |name: &str| ToolSpec {
            name: name.into(),
            description: String::new(),
            input_schema: Map::new(),
        };
        assert_eq!(
            unknown_tool("bash", &[spec("file_read"), spec("file_write")]),
            "unknown tool 'bash': this run offers file_read, file_write"
        );
        assert_eq!(
            unknown_tool("bash", &[]),
            "unknown tool 'bash': this run offers no tools"
        );
    }
}
