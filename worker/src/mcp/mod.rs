//! An agent's MCP servers as tool sources, on its worker: started (stdio) or
//! connected (streamable HTTP) with `rmcp`, their tools offered as
//! `mcp__<server>__<tool>`, their calls run after the gate allowed them.
//!
//! Mechanics:
//! - **One hub per agent** ([`McpHub`], the runner's). Each run's assignment carries
//!   the agent's servers (secrets resolved by the control plane); [`McpHub::prepare`]
//!   makes the hub match them (a new or changed server is (re)started, a removed one
//!   stopped) and connects every server that is not up, each bounded by its deadline,
//!   concurrently; the tools of the servers that are up are the run's MCP tools. A
//!   server that fails is left out of that run's tools and reported `failed`.
//!   Starting or connecting (and the first listing) is bounded by the call deadline
//!   and at most 30 s ([`MAX_START`]).
//! - **Calls** ([`McpHub::call`]): through the same connection, each with the explicit
//!   deadline `call_timeout_ms` (`[mcp] call_timeout_secs`, 300 s by default). A
//!   server that answers with an error is alive (the error is the tool's result); a
//!   connection that broke (the process died, the HTTP server went away) or a call
//!   past its deadline marks the server `failed`, with its stderr's tail, and the
//!   call's result says so: the step is an error, never a hung run.
//! - **Reconnecting**: the next call or run after a failure starts the process again
//!   (stdio) or opens a new session (HTTP; and rmcp itself starts a new session when
//!   the server answers 404 to the old one). Failures in a row back off: the first
//!   retry is immediate, then 1, 2, 4 … up to 30 s, during which calls fail at once
//!   saying when the next try is.
//! - **Changed tool lists**: a server's `notifications/tools/list_changed` marks its
//!   list stale and wakes the runs going ([`McpHub::changes`]): each reads the lists
//!   again and offers the new tools from its next model call on (a CLI backend's
//!   `chorus-tools` serves the new list at once, but the CLI reads its list when its
//!   turn starts, so it sees them from its next turn); a run's start and a reconnect
//!   read them too. They are filtered again by the profile's
//!   reach (`AgentSettings::mcp_reach`, the runner's job: a tool no allow or ask rule
//!   can match is not offered), each call checked by the gate like any other.
//! - **States** go to the control plane as `McpServerState` events (starting,
//!   running with the tool names, failed with the error), which `GET
//!   /api/agents/{name}` shows.
//!
//! A stdio server is a tool process (`stdio`): the agent's sandbox, its own process
//! group, the death signal, the allow-listed environment plus only its own `env`.

mod http;
mod stdio;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chorus_proto::domain::{ToolSpec, WorkerEvent};
use chorus_proto::mcp::{McpServer, McpState, McpTransport, offerable, tool_name};
use chorus_proto::tools::RunsIn;
use rmcp::model::{CallToolRequestParams, ContentBlock, Tool};
use rmcp::service::{NotificationContext, RunningService, ServiceError};
use rmcp::{ClientHandler, RoleClient, ServiceExt};
use tokio::sync::Mutex;
use tokio::time::Instant;

use crate::events::EventSink;
use crate::tools::ToolOutcome;
use crate::tools::sandbox::Sandbox;

/// Longest wait between tries of a server that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The longest start or connection (and first listing of tools) of a server, whatever
/// its call deadline: a run waits for its servers before its first model call.
const MAX_START: Duration = Duration::from_secs(30);

/// Where the agent's stdio servers run: its sandbox and workspace.
#[derive(Debug, Clone)]
pub struct Place {
    pub sandbox: Option<Sandbox>,
    pub root: std::path::PathBuf,
}

/// The agent's MCP servers on this worker.
pub struct McpHub {
    /// The agent's name (from its runs), for its reports.
    agent: std::sync::Mutex<String>,
    sink: EventSink,
    http: reqwest::Client,
    servers: Mutex<HashMap<String, Arc<Slot>>>,
    /// Counts the tool-list changes the servers announced: runs follow it.
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl std::fmt::Debug for McpHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the servers' settings: they hold secrets.
        f.write_str("McpHub")
    }
}

struct Slot {
    config: McpServer,
    conn: Mutex<Conn>,
}

enum Conn {
    Down {
        failures: u32,
        retry_at: Option<Instant>,
        error: Option<String>,
    },
    Up(Box<Connected>),
}

struct Connected {
    service: RunningService<RoleClient, Watcher>,
    tools: Vec<Tool>,
    /// The server said its tool list changed.
    stale: Arc<AtomicBool>,
    /// The process of a stdio server (killed with its group when dropped).
    process: Option<stdio::Process>,
}

/// The client side's handler: notes a changed tool list, and tells the runs.
#[derive(Clone)]
struct Watcher {
    stale: Arc<AtomicBool>,
    changes: Arc<tokio::sync::watch::Sender<u64>>,
}

impl ClientHandler for Watcher {
    async fn on_tool_list_changed(&self, _context: NotificationContext<RoleClient>) {
        self.stale.store(true, Ordering::SeqCst);
        self.changes.send_modify(|n| *n = n.wrapping_add(1));
    }
}

impl McpHub {
    pub fn new(sink: EventSink, http: reqwest::Client) -> Self {
        McpHub {
            agent: std::sync::Mutex::new(String::new()),
            sink,
            http,
            servers: Mutex::new(HashMap::new()),
            changes: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }

    /// Wakes at each change a server announces to its tool list from now on (the
    /// run then reads the lists again with [`McpHub::prepare`]).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Makes the hub match `servers`, connects those that are down, and returns the
    /// tools of those that are up, as the run offers them.
    pub async fn prepare(
        &self,
        agent: &str,
        servers: &[McpServer],
        place: &Place,
    ) -> Vec<ToolSpec> {
        agent.clone_into(
            &mut self
                .agent
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let slots: Vec<Arc<Slot>> = {
            let mut current = self.servers.lock().await;
            current.retain(|name, slot| {
                servers
                    .iter()
                    .any(|s| &s.name == name && s.config_eq(&slot.config))
            });
            for server in servers {
                current.entry(server.name.clone()).or_insert_with(|| {
                    Arc::new(Slot {
                        config: server.clone(),
                        conn: Mutex::new(Conn::Down {
                            failures: 0,
                            retry_at: None,
                            error: None,
                        }),
                    })
                });
            }
            servers
                .iter()
                .filter_map(|s| current.get(&s.name).cloned())
                .collect()
        };
        let specs = futures::future::join_all(slots.iter().map(|slot| async move {
            let mut conn = slot.conn.lock().await;
            match self.ready(slot, &mut conn, place, true).await {
                Ok(()) => match &*conn {
                    Conn::Up(up) => specs_of(&slot.config.name, &up.tools),
                    Conn::Down { .. } => Vec::new(),
                },
                Err(_) => Vec::new(),
            }
        }))
        .await;
        specs.into_iter().flatten().collect()
    }

    /// Runs one allowed call of `tool` on `server`.
    pub async fn call(
        &self,
        server: &str,
        tool: &str,
        arguments: &str,
        place: &Place,
    ) -> ToolOutcome {
        let Some(slot) = self.servers.lock().await.get(server).cloned() else {
            return ToolOutcome::error(format!(
                "the agent has no MCP server named '{server}' (any more); the call was not run"
            ));
        };
        let arguments = match arguments_object(arguments) {
            Ok(arguments) => arguments,
            Err(outcome) => return outcome,
        };
        let mut conn = slot.conn.lock().await;
        if let Err(error) = self.ready(&slot, &mut conn, place, false).await {
            return ToolOutcome::error(format!("{error}; the call was not run"));
        }
        let Conn::Up(up) = &*conn else {
            return ToolOutcome::error(format!(
                "MCP server '{server}' is not running; the call was not run"
            ));
        };
        let timeout = slot.config.timeout();
        let mut params = CallToolRequestParams::new(tool.to_string());
        params.arguments = arguments;
        let peer = up.service.peer().clone();
        // The slot's lock is let go during the call: calls of one server may overlap.
        drop(conn);
        let answer = tokio::time::timeout(timeout, peer.call_tool(params)).await;
        match answer {
            Ok(Ok(result)) => {
                let text = render(&result.content, result.structured_content.as_ref());
                if result.is_error.unwrap_or(false) {
                    ToolOutcome::error(text)
                } else {
                    ToolOutcome::ok(text)
                }
            }
            // The server answered, with an error: it is alive.
            Ok(Err(ServiceError::McpError(e))) => ToolOutcome::error(format!(
                "MCP server '{server}' refused the call: {}",
                e.message
            )),
            Ok(Err(e)) => {
                let error = self
                    .failed(&slot, format!("the connection broke during the call ({e})"))
                    .await;
                ToolOutcome::error(format!("{error}; the call's effect is unknown"))
            }
            Err(_) => {
                let error = self
                    .failed(
                        &slot,
                        format!(
                            "it did not answer within {} s (`[mcp] call_timeout_secs`)",
                            timeout.as_secs()
                        ),
                    )
                    .await;
                ToolOutcome::error(format!("{error}; the call's effect is unknown"))
            }
        }
    }

    /// Stops every server (the worker is stopping).
    pub async fn shutdown(&self) {
        let slots: Vec<Arc<Slot>> = self.servers.lock().await.drain().map(|(_, s)| s).collect();
        for slot in slots {
            let mut conn = slot.conn.lock().await;
            if let Conn::Up(up) = std::mem::replace(
                &mut *conn,
                Conn::Down {
                    failures: 0,
                    retry_at: None,
                    error: None,
                },
            ) {
                let _ = up.service.cancel().await;
            }
        }
    }

    /// Connects the server if it is down (and its back-off allows), and reads its
    /// tools again if they changed. `Err`: why it cannot be used now. A death found
    /// here is that error when `restart_dead` is false (a call: its step says the
    /// server died, and the next call starts it again); at a run's start it is
    /// started again at once.
    async fn ready(
        &self,
        slot: &Slot,
        conn: &mut Conn,
        place: &Place,
        restart_dead: bool,
    ) -> Result<(), String> {
        let name = &slot.config.name;
        if let Conn::Up(up) = conn {
            let closed =
                up.service.is_closed() || up.process.as_mut().is_some_and(stdio::Process::exited);
            if !closed {
                if up.stale.swap(false, Ordering::SeqCst) {
                    match tokio::time::timeout(
                        slot.config.timeout(),
                        up.service.peer().list_all_tools(),
                    )
                    .await
                    {
                        Ok(Ok(tools)) => {
                            up.tools = tools;
                            self.report(name, McpState::Running, &up.tools, String::new());
                        }
                        _ => {
                            tracing::warn!(server = %name, "could not read the changed tool list of an MCP server")
                        }
                    }
                }
                return Ok(());
            }
            let stderr = match up.process.as_mut() {
                Some(process) => {
                    process.settle().await;
                    process.stderr_tail()
                }
                None => String::new(),
            };
            let error = with_stderr(format!("MCP server '{name}' stopped"), &stderr);
            self.report(name, McpState::Failed, &[], error.clone());
            *conn = Conn::Down {
                failures: 1,
                retry_at: None,
                error: Some(error.clone()),
            };
            if !restart_dead {
                return Err(format!("{error}; it is started again at the next call"));
            }
        }
        let Conn::Down {
            failures,
            retry_at,
            error,
        } = conn
        else {
            return Ok(());
        };
        if let (Some(at), Some(error)) = (*retry_at, error.as_ref())
            && Instant::now() < at
        {
            return Err(format!(
                "{error}; it is tried again in {} s",
                at.saturating_duration_since(Instant::now())
                    .as_secs()
                    .max(1)
            ));
        }
        self.report(name, McpState::Starting, &[], String::new());
        // The connection's tasks outlive the run that started them: a span of their own.
        let agent = self
            .agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let span = tracing::info_span!(parent: None, "mcp_server", %agent, server = %name);
        match tracing::Instrument::instrument(self.connect(&slot.config, place), span).await {
            Ok(up) => {
                self.report(name, McpState::Running, &up.tools, String::new());
                *conn = Conn::Up(Box::new(up));
                Ok(())
            }
            Err(e) => {
                let failures = *failures + 1;
                let error = format!("MCP server '{name}' could not be started: {e}");
                self.report(name, McpState::Failed, &[], error.clone());
                *conn = Conn::Down {
                    failures,
                    retry_at: Some(Instant::now() + backoff(failures)),
                    error: Some(error.clone()),
                };
                Err(error)
            }
        }
    }

    async fn connect(&self, config: &McpServer, place: &Place) -> Result<Connected, String> {
        let stale = Arc::new(AtomicBool::new(false));
        let watcher = Watcher {
            stale: stale.clone(),
            changes: self.changes.clone(),
        };
        let deadline = config.timeout().min(MAX_START);
        let timed_out = || format!("no answer within {} s", deadline.as_secs());
        match &config.transport {
            McpTransport::Stdio { command, args, env } => {
                let mut process = stdio::Process::spawn(command, args, env, place).await?;
                let pipes = process.take_pipes().ok_or("it started without its pipes")?;
                let started = tokio::time::timeout(deadline, async {
                    let service = watcher.serve(pipes).await.map_err(|e| e.to_string())?;
                    let tools = service
                        .peer()
                        .list_all_tools()
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((service, tools))
                })
                .await;
                let error = match started {
                    Ok(Ok((service, tools))) => {
                        return Ok(Connected {
                            service,
                            tools,
                            stale,
                            process: Some(process),
                        });
                    }
                    Ok(Err(e)) => e,
                    Err(_) => timed_out(),
                };
                process.settle().await;
                Err(with_stderr(error, &process.stderr_tail()))
            }
            McpTransport::Http { url, headers } => {
                use rmcp::transport::StreamableHttpClientTransport;
                use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
                let mut custom = HashMap::new();
                for (name, value) in headers {
                    let name = ::http::HeaderName::try_from(name.as_str())
                        .map_err(|_| format!("header name '{name}' is not valid"))?;
                    let mut value = ::http::HeaderValue::try_from(value.as_str())
                        .map_err(|_| format!("the value of header '{name}' is not valid"))?;
                    value.set_sensitive(true);
                    custom.insert(name, value);
                }
                let transport = StreamableHttpClientTransport::with_client(
                    http::McpHttp {
                        client: self.http.clone(),
                    },
                    StreamableHttpClientTransportConfig::with_uri(url.as_str())
                        .custom_headers(custom),
                );
                let started = tokio::time::timeout(deadline, async {
                    let service = watcher.serve(transport).await.map_err(|e| e.to_string())?;
                    let tools = service
                        .peer()
                        .list_all_tools()
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>((service, tools))
                })
                .await;
                match started {
                    Ok(Ok((service, tools))) => Ok(Connected {
                        service,
                        tools,
                        stale,
                        process: None,
                    }),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(timed_out()),
                }
            }
        }
    }

    /// Marks the server failed after a broken call; returns the error to show.
    async fn failed(&self, slot: &Slot, why: String) -> String {
        let name = &slot.config.name;
        let mut conn = slot.conn.lock().await;
        let stderr = match &*conn {
            Conn::Up(up) => up
                .process
                .as_ref()
                .map(stdio::Process::stderr_tail)
                .unwrap_or_default(),
            Conn::Down { .. } => String::new(),
        };
        let error = with_stderr(format!("MCP server '{name}' failed: {why}"), &stderr);
        self.report(name, McpState::Failed, &[], error.clone());
        // Tried again at the next call or run.
        *conn = Conn::Down {
            failures: 1,
            retry_at: None,
            error: Some(error.clone()),
        };
        error
    }

    fn report(&self, server: &str, state: McpState, tools: &[Tool], error: String) {
        let agent = self
            .agent
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match state {
            McpState::Failed => {
                // Without the server's stderr, which may repeat what it was given: the
                // worker's log is not scrubbed, the reported state is (by the control plane).
                let error = error.split(STDERR_NOTE).next().unwrap_or_default();
                tracing::warn!(%agent, %server, %error, "MCP server failed")
            }
            _ => tracing::info!(%agent, %server, state = state.as_str(), "MCP server"),
        }
        self.sink.send(WorkerEvent::McpServerState {
            agent,
            server: server.to_string(),
            state,
            tools: tool_names(tools),
            offered: specs_of(server, tools),
            error,
        });
    }
}

trait ServerExt {
    fn timeout(&self) -> Duration;
    fn config_eq(&self, other: &McpServer) -> bool;
}

impl ServerExt for McpServer {
    fn timeout(&self) -> Duration {
        Duration::from_millis(self.call_timeout_ms.max(1000))
    }

    fn config_eq(&self, other: &McpServer) -> bool {
        self == other
    }
}

/// The wait before try number `failures + 1`: none after the first failure, then
/// doubling from 1 s up to [`MAX_BACKOFF`].
fn backoff(failures: u32) -> Duration {
    match failures {
        0 | 1 => Duration::ZERO,
        n => Duration::from_secs(1u64 << (n - 2).min(5)).min(MAX_BACKOFF),
    }
}

/// What introduces a server's stderr in an error.
const STDERR_NOTE: &str = " (its stderr ends: ";

fn with_stderr(error: String, stderr: &str) -> String {
    let stderr = stderr.trim();
    if stderr.is_empty() {
        error
    } else {
        format!("{error}{STDERR_NOTE}{stderr})")
    }
}

fn tool_names(tools: &[Tool]) -> Vec<String> {
    tools.iter().map(|t| t.name.to_string()).collect()
}

/// The tools a server lists, as the model is offered them (names it cannot be
/// offered under are left out, with a warning).
fn specs_of(server: &str, tools: &[Tool]) -> Vec<ToolSpec> {
    tools
        .iter()
        .filter(|tool| {
            let ok = offerable(server, &tool.name);
            if !ok {
                tracing::warn!(%server, tool = %tool.name, "MCP tool name cannot be offered to a model; left out");
            }
            ok
        })
        .map(|tool| {
            let name = tool_name(server, &tool.name);
            ToolSpec {
                wire_name: name.clone(),
                name,
                description: format!(
                    "(MCP server {server}) {}",
                    tool.description.as_deref().unwrap_or_default()
                ),
                schema_json: serde_json::Value::Object((*tool.input_schema).clone()).to_string(),
                runs_in: RunsIn::Worker,
                ends_turn: false,
            }
        })
        .collect()
}

fn arguments_object(
    arguments: &str,
) -> Result<Option<serde_json::Map<String, serde_json::Value>>, ToolOutcome> {
    if arguments.trim().is_empty() {
        return Ok(None);
    }
    match serde_json::from_str::<serde_json::Value>(arguments) {
        Ok(serde_json::Value::Object(map)) => Ok(Some(map)),
        _ => Err(ToolOutcome::malformed(
            "the arguments of an MCP tool must be a JSON object; the call was not run",
        )),
    }
}

/// A call's result as the model reads it: its text blocks, other blocks named, and
/// the structured result when there is no text.
fn render(content: &[ContentBlock], structured: Option<&serde_json::Value>) -> String {
    let mut parts: Vec<String> = content
        .iter()
        .map(|block| match block.as_text() {
            Some(text) => text.text.clone(),
            None => serde_json::to_string(block).unwrap_or_else(|_| "[content]".into()),
        })
        .collect();
    if parts.is_empty()
        && let Some(value) = structured
    {
        parts.push(value.to_string());
    }
    parts.join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_retries_at_once_then_doubles_up_to_thirty_seconds() {
        let secs: Vec<u64> = (1..=9).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(secs, [0, 1, 2, 4, 8, 16, 30, 30, 30]);
    }

    #[test]
    fn a_server_s_tools_are_offered_under_their_mcp_names() {
        let schema =
            serde_json::json!({"type": "object", "properties": {"text": {"type": "string"}}});
        let serde_json::Value::Object(schema) = schema else {
            unreachable!()
        };
        let tools = vec![
            Tool::new("echo", "Echoes.", Arc::new(schema.clone())),
            Tool::new("bad name", "Spaces.", Arc::new(schema)),
        ];
        let specs = specs_of("demo", &tools);
        assert_eq!(specs.len(), 1, "a name the APIs refuse is left out");
        assert_eq!(specs[0].name, "mcp__demo__echo");
        assert_eq!(specs[0].wire_name, "mcp__demo__echo");
        assert_eq!(specs[0].runs_in, RunsIn::Worker);
        assert!(specs[0].description.contains("Echoes."));
        assert!(specs[0].schema_json.contains("\"text\""));
    }

    #[test]
    fn results_read_as_their_text() {
        let content = vec![ContentBlock::text("a"), ContentBlock::text("b")];
        assert_eq!(render(&content, None), "a\nb");
        let structured = serde_json::json!({"n": 1});
        assert_eq!(render(&[], Some(&structured)), r#"{"n":1}"#);
    }
}
