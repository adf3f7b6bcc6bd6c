//! Conversions between the generated wire types and [`crate::domain`].
//!
//! Domain → wire is total. Wire → domain is checked: a message that is missing a
//! required part is a [`ProtocolError`], never a silently defaulted value. One
//! exception: a `RunFailed` whose kind is unset or unknown becomes `internal` with the
//! value named in its message, because a refused message is skipped, and refusing the
//! one message that ends a run would leave its thread `running` with the reason lost.

use crate::domain::{
    AgentChange, AgentDirectory, AgentSettings, Backend, BackendStatus, ChatMessage, CliSession,
    ControlCommand, Credential, DialIn, FailureKind, Input, JobEnd, JobOutcome, JobReport,
    ModelRoute, ResourceLimits, ResumedCall, RetryPolicy, Role, RunAssignment, SandboxPolicy,
    Sequenced, StepEnded, StepKind, StepStarted, SummaryRequest, TemplateFile, ToolCall,
    ToolDecision, ToolResult, ToolSpec, TraceExport, Usage, WorkerEvent,
};
use crate::generated as pb;
use crate::mcp::{McpReach, McpServer, McpState, McpTransport};
use crate::tools::RunsIn;
use pb::control_message::Body as ControlBody;
use pb::worker_message::Body as WorkerBody;

/// A peer sent something this version of the protocol cannot accept.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("{0} message has no body")]
    EmptyMessage(&'static str),
    #[error("{message} is missing its {field}")]
    MissingField {
        message: &'static str,
        field: &'static str,
    },
    #[error("{message} has an unknown {field} value {value}")]
    UnknownEnum {
        message: &'static str,
        field: &'static str,
        value: i32,
    },
    /// A closed set carried as text on the wire, with a value outside it.
    #[error("{message} has an unknown {field} {value:?}")]
    UnknownValue {
        message: &'static str,
        field: &'static str,
        value: String,
    },
}

impl From<SandboxPolicy> for pb::Sandbox {
    fn from(s: SandboxPolicy) -> Self {
        pb::Sandbox {
            network: s.network,
            read_only: s.read_only,
            read_write: s.read_write,
            run_unsandboxed: s.run_unsandboxed,
            cpu_secs: s.limits.cpu_secs,
            file_size_bytes: s.limits.file_size_bytes,
            open_files: s.limits.open_files,
            max_processes: s.limits.max_processes,
        }
    }
}

impl From<pb::Sandbox> for SandboxPolicy {
    fn from(s: pb::Sandbox) -> Self {
        SandboxPolicy {
            network: s.network,
            read_only: s.read_only,
            read_write: s.read_write,
            run_unsandboxed: s.run_unsandboxed,
            limits: ResourceLimits {
                cpu_secs: s.cpu_secs,
                file_size_bytes: s.file_size_bytes,
                open_files: s.open_files,
                max_processes: s.max_processes,
            },
        }
    }
}

fn missing(message: &'static str, field: &'static str) -> ProtocolError {
    ProtocolError::MissingField { message, field }
}

// ------------------------------------------------------------ shared parts

impl From<Role> for pb::Role {
    fn from(role: Role) -> Self {
        match role {
            Role::System => pb::Role::System,
            Role::User => pb::Role::User,
            Role::Assistant => pb::Role::Assistant,
            Role::Tool => pb::Role::Tool,
        }
    }
}

fn role_from_wire(value: i32) -> Result<Role, ProtocolError> {
    match pb::Role::try_from(value) {
        Ok(pb::Role::System) => Ok(Role::System),
        Ok(pb::Role::User) => Ok(Role::User),
        Ok(pb::Role::Assistant) => Ok(Role::Assistant),
        Ok(pb::Role::Tool) => Ok(Role::Tool),
        Ok(pb::Role::Unspecified) | Err(_) => Err(ProtocolError::UnknownEnum {
            message: "ChatMessage",
            field: "role",
            value,
        }),
    }
}

impl From<ChatMessage> for pb::ChatMessage {
    fn from(m: ChatMessage) -> Self {
        pb::ChatMessage {
            role: pb::Role::from(m.role) as i32,
            content: m.content,
            tool_calls: m.tool_calls.into_iter().map(Into::into).collect(),
            tool_call_id: m.tool_call_id.unwrap_or_default(),
            tool_name: m.tool_name.unwrap_or_default(),
            is_error: m.is_error,
        }
    }
}

impl TryFrom<pb::ChatMessage> for ChatMessage {
    type Error = ProtocolError;

    fn try_from(m: pb::ChatMessage) -> Result<Self, Self::Error> {
        Ok(ChatMessage {
            role: role_from_wire(m.role)?,
            content: m.content,
            tool_calls: m.tool_calls.into_iter().map(Into::into).collect(),
            tool_call_id: non_empty(m.tool_call_id),
            tool_name: non_empty(m.tool_name),
            is_error: m.is_error,
        })
    }
}

fn non_empty(s: String) -> Option<String> {
    if s.is_empty() { None } else { Some(s) }
}

/// The retry policy of an `AssignRun`: required, and its time limits must be set (a
/// zero would end every call at once).
fn retry_policy(policy: Option<pb::RetryPolicy>) -> Result<RetryPolicy, ProtocolError> {
    let r = policy.ok_or_else(|| missing("AssignRun", "retry"))?;
    if r.call_timeout_ms == 0 {
        return Err(missing("RetryPolicy", "call_timeout_ms"));
    }
    if r.silence_timeout_ms == 0 {
        return Err(missing("RetryPolicy", "silence_timeout_ms"));
    }
    Ok(RetryPolicy {
        max_attempts: r.max_attempts,
        max_total_ms: r.max_total_ms,
        base_delay_ms: r.base_delay_ms,
        call_timeout_ms: r.call_timeout_ms,
        silence_timeout_ms: r.silence_timeout_ms,
    })
}

fn required_message(
    m: Option<pb::ChatMessage>,
    message: &'static str,
) -> Result<ChatMessage, ProtocolError> {
    m.ok_or_else(|| missing(message, "message"))?.try_into()
}

impl From<ToolCall> for pb::ToolCall {
    fn from(c: ToolCall) -> Self {
        pb::ToolCall {
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        }
    }
}

impl From<pb::ToolCall> for ToolCall {
    fn from(c: pb::ToolCall) -> Self {
        ToolCall {
            id: c.id,
            name: c.name,
            arguments: c.arguments,
        }
    }
}

impl From<Usage> for pb::Usage {
    fn from(u: Usage) -> Self {
        pb::Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

impl From<pb::Usage> for Usage {
    fn from(u: pb::Usage) -> Self {
        Usage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

impl From<ModelRoute> for pb::ModelRoute {
    fn from(r: ModelRoute) -> Self {
        pb::ModelRoute {
            provider: r.provider,
            api: r.api,
            relay_path: r.relay_path,
            model: r.model,
            max_tokens: r.limits.max_tokens.unwrap_or(0),
            context_window: r.limits.context_window.unwrap_or(0),
        }
    }
}

impl From<pb::ModelRoute> for ModelRoute {
    fn from(r: pb::ModelRoute) -> Self {
        ModelRoute {
            provider: r.provider,
            api: r.api,
            relay_path: r.relay_path,
            model: r.model,
            limits: crate::domain::ModelLimits {
                max_tokens: (r.max_tokens > 0).then_some(r.max_tokens),
                context_window: (r.context_window > 0).then_some(r.context_window),
            },
        }
    }
}

// ------------------------------------------------------------ control plane -> worker

impl From<ControlCommand> for pb::ControlMessage {
    fn from(command: ControlCommand) -> Self {
        let body = match command {
            ControlCommand::Welcome {
                agent,
                connection_id,
                heartbeat_interval_ms,
                trace_export,
                dial_in,
            } => ControlBody::Welcome(pb::Welcome {
                agent,
                connection_id,
                heartbeat_interval_ms,
                trace_export: trace_export.map(|t| pb::TraceExport {
                    service_name: t.service_name,
                    resource_attributes: t.resource_attributes.into_iter().collect(),
                    record_content: t.record_content,
                }),
                dial_in: dial_in.map(|d| pb::DialIn {
                    credential: d.credential.0,
                    template: d
                        .template
                        .into_iter()
                        .map(|f| pb::TemplateFile {
                            path: f.path,
                            content: f.content,
                            executable: f.executable,
                        })
                        .collect(),
                    incarnation: d.incarnation,
                }),
            }),
            ControlCommand::AssignRun(run) => ControlBody::AssignRun(pb::AssignRun {
                run_id: run.run_id,
                thread_id: run.thread_id,
                agent: Some(pb::AgentSettings {
                    name: run.agent.name,
                    system_prompt: run.agent.system_prompt,
                    model: run.agent.model,
                    tools: run.agent.tools,
                    sandbox: Some(run.agent.sandbox.into()),
                    offered: run.agent.offered.into_iter().map(Into::into).collect(),
                    mcp_servers: run.agent.mcp_servers.into_iter().map(Into::into).collect(),
                    mcp_reach: Some(match run.agent.mcp_reach {
                        McpReach::Any => pb::McpReach {
                            any: true,
                            prefixes: Vec::new(),
                        },
                        McpReach::Prefixes(prefixes) => pb::McpReach {
                            any: false,
                            prefixes: prefixes
                                .into_iter()
                                .map(|(text, open)| pb::McpReachPrefix { text, open })
                                .collect(),
                        },
                    }),
                    identity: run.agent.identity,
                    memory: run.agent.memory,
                }),
                model: Some(run.model.into()),
                messages: run.messages.into_iter().map(Into::into).collect(),
                first_step_number: run.first_step_number,
                max_iterations: run.max_iterations,
                trace_context: run.trace_context,
                retry: Some(run.retry.into()),
                attempt: run.attempt,
                inputs: run.inputs.into_iter().map(Into::into).collect(),
                thread_summary: run.thread_summary,
                thread_started_at_ms: run.thread_started_at_ms,
                role_tools: run.role_tools.into_iter().map(Into::into).collect(),
                workdir: run.workdir.unwrap_or_default(),
                files: run
                    .files
                    .into_iter()
                    .map(|f| pb::TemplateFile {
                        path: f.path,
                        content: f.content,
                        executable: f.executable,
                    })
                    .collect(),
                backend: backend_to_wire(run.backend),
                cli_session: run.cli_session.map(|session| pb::CliSession {
                    id: session.id,
                    fork: session.fork,
                }),
                relevant: run.relevant,
                resumed_call: run.resumed_call.map(|r| pb::ResumedCall {
                    call: Some(r.call.into()),
                    allowed: r.allowed,
                    message: r.message,
                    result: r.result.map(|r| pb::ToolResult {
                        content: r.content,
                        is_error: r.is_error,
                    }),
                    approval_id: r.approval_id,
                    answered_by: r.answered_by,
                }),
            }),
            ControlCommand::InjectMessage { run_id, input } => {
                ControlBody::InjectMessage(pb::InjectMessage {
                    run_id,
                    input: Some(input.into()),
                })
            }
            ControlCommand::Summarize(request) => ControlBody::Summarize(pb::Summarize {
                request_id: request.request_id,
                model: Some(request.model.into()),
                instruction: request.instruction,
                messages: request.messages.into_iter().map(Into::into).collect(),
                retry: Some(request.retry.into()),
            }),
            ControlCommand::DeleteAgentFiles { agent, incarnation } => {
                ControlBody::DeleteAgentFiles(pb::DeleteAgentFiles { agent, incarnation })
            }
            ControlCommand::CancelRun { run_id, reason } => {
                ControlBody::CancelRun(pb::CancelRun { run_id, reason })
            }
            ControlCommand::Shutdown { reason } => ControlBody::Shutdown(pb::Shutdown { reason }),
            ControlCommand::UpdateAgent(change) => {
                let (model, route) = match change.model {
                    Some((model, route)) => (Some(model), Some(route.into())),
                    None => (None, None),
                };
                ControlBody::UpdateAgent(pb::UpdateAgent {
                    model,
                    route,
                    system_prompt: change.system_prompt,
                    tools: change.tools.map(|names| pb::ToolList { names }),
                    offered: change.offered.map(|specs| pb::ToolSpecList {
                        specs: specs.into_iter().map(Into::into).collect(),
                    }),
                    identity: change.identity,
                    memory: change.memory,
                })
            }
            ControlCommand::ToolDecision(d) => ControlBody::ToolDecision(pb::ToolDecision {
                request_id: d.request_id,
                allowed: d.allowed,
                message: d.message,
                result: d.result.map(|r| pb::ToolResult {
                    content: r.content,
                    is_error: r.is_error,
                }),
            }),
            ControlCommand::ToolPending {
                request_id,
                description,
                approval_id,
            } => ControlBody::ToolPending(pb::ToolPending {
                request_id,
                description,
                approval_id,
            }),
            ControlCommand::ToolDeferred {
                request_id,
                message,
                approval_id,
            } => ControlBody::ToolDeferred(pb::ToolDeferred {
                request_id,
                message,
                approval_id,
            }),
        };
        pb::ControlMessage { body: Some(body) }
    }
}

impl TryFrom<pb::ControlMessage> for ControlCommand {
    type Error = ProtocolError;

    fn try_from(message: pb::ControlMessage) -> Result<Self, Self::Error> {
        let body = message
            .body
            .ok_or(ProtocolError::EmptyMessage("ControlMessage"))?;
        Ok(match body {
            ControlBody::Welcome(w) => ControlCommand::Welcome {
                agent: w.agent,
                connection_id: w.connection_id,
                heartbeat_interval_ms: w.heartbeat_interval_ms,
                trace_export: w.trace_export.map(|t| TraceExport {
                    service_name: t.service_name,
                    resource_attributes: t.resource_attributes.into_iter().collect(),
                    record_content: t.record_content,
                }),
                dial_in: w.dial_in.map(|d| DialIn {
                    credential: Credential(d.credential),
                    template: d
                        .template
                        .into_iter()
                        .map(|f| TemplateFile {
                            path: f.path,
                            content: f.content,
                            executable: f.executable,
                        })
                        .collect(),
                    incarnation: d.incarnation,
                }),
            },
            ControlBody::AssignRun(run) => {
                let agent = run.agent.ok_or_else(|| missing("AssignRun", "agent"))?;
                let model = run.model.ok_or_else(|| missing("AssignRun", "model"))?;
                let messages = run
                    .messages
                    .into_iter()
                    .map(ChatMessage::try_from)
                    .collect::<Result<_, _>>()?;
                ControlCommand::AssignRun(Box::new(RunAssignment {
                    run_id: run.run_id,
                    thread_id: run.thread_id,
                    agent: AgentSettings {
                        name: agent.name,
                        system_prompt: agent.system_prompt,
                        model: agent.model,
                        tools: agent.tools,
                        sandbox: agent
                            .sandbox
                            .ok_or_else(|| missing("AgentSettings", "sandbox"))?
                            .into(),
                        offered: agent
                            .offered
                            .into_iter()
                            .map(ToolSpec::try_from)
                            .collect::<Result<_, _>>()?,
                        mcp_servers: agent
                            .mcp_servers
                            .into_iter()
                            .map(McpServer::try_from)
                            .collect::<Result<_, _>>()?,
                        mcp_reach: match agent.mcp_reach {
                            Some(reach) if !reach.any => McpReach::Prefixes(
                                reach
                                    .prefixes
                                    .into_iter()
                                    .map(|p| (p.text, p.open))
                                    .collect(),
                            ),
                            _ => McpReach::Any,
                        },
                        identity: agent.identity,
                        memory: agent.memory,
                    },
                    model: model.into(),
                    messages,
                    first_step_number: run.first_step_number,
                    max_iterations: run.max_iterations,
                    trace_context: run.trace_context,
                    retry: retry_policy(run.retry)?,
                    attempt: run.attempt,
                    inputs: run.inputs.into_iter().map(Into::into).collect(),
                    thread_summary: run.thread_summary,
                    thread_started_at_ms: run.thread_started_at_ms,
                    role_tools: run
                        .role_tools
                        .into_iter()
                        .map(ToolSpec::try_from)
                        .collect::<Result<_, _>>()?,
                    workdir: (!run.workdir.is_empty()).then_some(run.workdir),
                    files: run
                        .files
                        .into_iter()
                        .map(|f| TemplateFile {
                            path: f.path,
                            content: f.content,
                            executable: f.executable,
                        })
                        .collect(),
                    backend: backend_from_wire("AssignRun", run.backend)?,
                    cli_session: run.cli_session.map(|session| CliSession {
                        id: session.id,
                        fork: session.fork,
                    }),
                    resumed_call: run
                        .resumed_call
                        .map(|r| -> Result<ResumedCall, ProtocolError> {
                            Ok(ResumedCall {
                                call: r.call.ok_or_else(|| missing("ResumedCall", "call"))?.into(),
                                allowed: r.allowed,
                                message: r.message,
                                result: r.result.map(|r| ToolResult {
                                    content: r.content,
                                    is_error: r.is_error,
                                }),
                                approval_id: r.approval_id,
                                answered_by: r.answered_by,
                            })
                        })
                        .transpose()?,
                    relevant: run.relevant,
                }))
            }
            ControlBody::InjectMessage(m) => ControlCommand::InjectMessage {
                run_id: m.run_id,
                input: m
                    .input
                    .ok_or_else(|| missing("InjectMessage", "input"))?
                    .into(),
            },
            ControlBody::Summarize(request) => {
                ControlCommand::Summarize(Box::new(SummaryRequest {
                    request_id: request.request_id,
                    model: request
                        .model
                        .ok_or_else(|| missing("Summarize", "model"))?
                        .into(),
                    instruction: request.instruction,
                    messages: request
                        .messages
                        .into_iter()
                        .map(ChatMessage::try_from)
                        .collect::<Result<_, _>>()?,
                    retry: retry_policy(request.retry)?,
                }))
            }
            ControlBody::DeleteAgentFiles(d) => ControlCommand::DeleteAgentFiles {
                agent: d.agent,
                incarnation: d.incarnation,
            },
            ControlBody::CancelRun(c) => ControlCommand::CancelRun {
                run_id: c.run_id,
                reason: c.reason,
            },
            ControlBody::Shutdown(s) => ControlCommand::Shutdown { reason: s.reason },
            ControlBody::UpdateAgent(u) => ControlCommand::UpdateAgent(AgentChange {
                model: match u.model {
                    Some(model) => Some((
                        model,
                        u.route
                            .ok_or_else(|| missing("UpdateAgent", "route"))?
                            .into(),
                    )),
                    None => None,
                },
                system_prompt: u.system_prompt,
                tools: u.tools.map(|t| t.names),
                offered: u
                    .offered
                    .map(|list| list.specs.into_iter().map(ToolSpec::try_from).collect())
                    .transpose()?,
                identity: u.identity,
                memory: u.memory,
            }),
            ControlBody::ToolDecision(d) => ControlCommand::ToolDecision(ToolDecision {
                request_id: d.request_id,
                allowed: d.allowed,
                message: d.message,
                result: d.result.map(|r| ToolResult {
                    content: r.content,
                    is_error: r.is_error,
                }),
            }),
            ControlBody::ToolPending(p) => ControlCommand::ToolPending {
                request_id: p.request_id,
                description: p.description,
                approval_id: p.approval_id,
            },
            ControlBody::ToolDeferred(p) => ControlCommand::ToolDeferred {
                request_id: p.request_id,
                message: p.message,
                approval_id: p.approval_id,
            },
        })
    }
}

impl From<RunsIn> for pb::ToolRunsIn {
    fn from(runs_in: RunsIn) -> Self {
        match runs_in {
            RunsIn::Worker => pb::ToolRunsIn::Worker,
            RunsIn::ControlPlane => pb::ToolRunsIn::ControlPlane,
        }
    }
}

fn backend_to_wire(backend: Backend) -> i32 {
    let wire = match backend {
        Backend::Api => pb::Backend::Api,
        Backend::ClaudeCode => pb::Backend::ClaudeCode,
        Backend::OpenCode => pb::Backend::Opencode,
    };
    wire as i32
}

/// Unspecified is the tool loop (an older control plane's assignment).
fn backend_from_wire(message: &'static str, value: i32) -> Result<Backend, ProtocolError> {
    match pb::Backend::try_from(value) {
        Ok(pb::Backend::Unspecified | pb::Backend::Api) => Ok(Backend::Api),
        Ok(pb::Backend::ClaudeCode) => Ok(Backend::ClaudeCode),
        Ok(pb::Backend::Opencode) => Ok(Backend::OpenCode),
        Err(_) => Err(ProtocolError::UnknownEnum {
            message,
            field: "backend",
            value,
        }),
    }
}

impl From<BackendStatus> for pb::BackendStatus {
    fn from(status: BackendStatus) -> Self {
        pb::BackendStatus {
            backend: backend_to_wire(status.backend),
            usable: status.usable,
            version: status.version.unwrap_or_default(),
            reason: status.reason.unwrap_or_default(),
            path: status.path.unwrap_or_default(),
        }
    }
}

impl TryFrom<pb::BackendStatus> for BackendStatus {
    type Error = ProtocolError;

    fn try_from(status: pb::BackendStatus) -> Result<Self, Self::Error> {
        Ok(BackendStatus {
            backend: backend_from_wire("BackendStatus", status.backend)?,
            usable: status.usable,
            version: (!status.version.is_empty()).then_some(status.version),
            reason: (!status.reason.is_empty()).then_some(status.reason),
            path: (!status.path.is_empty()).then_some(status.path),
        })
    }
}

fn runs_in_from_wire(message: &'static str, value: i32) -> Result<RunsIn, ProtocolError> {
    match pb::ToolRunsIn::try_from(value) {
        Ok(pb::ToolRunsIn::Worker) => Ok(RunsIn::Worker),
        Ok(pb::ToolRunsIn::ControlPlane) => Ok(RunsIn::ControlPlane),
        Ok(pb::ToolRunsIn::Unspecified) | Err(_) => Err(ProtocolError::UnknownEnum {
            message,
            field: "runs_in",
            value,
        }),
    }
}

impl From<ToolSpec> for pb::ToolSpec {
    fn from(spec: ToolSpec) -> Self {
        pb::ToolSpec {
            name: spec.name,
            wire_name: spec.wire_name,
            description: spec.description,
            schema_json: spec.schema_json,
            runs_in: pb::ToolRunsIn::from(spec.runs_in) as i32,
            ends_turn: spec.ends_turn,
        }
    }
}

impl TryFrom<pb::ToolSpec> for ToolSpec {
    type Error = ProtocolError;
    fn try_from(spec: pb::ToolSpec) -> Result<Self, ProtocolError> {
        Ok(ToolSpec {
            runs_in: runs_in_from_wire("ToolSpec", spec.runs_in)?,
            name: spec.name,
            wire_name: spec.wire_name,
            description: spec.description,
            schema_json: spec.schema_json,
            ends_turn: spec.ends_turn,
        })
    }
}

// ------------------------------------------------------------ worker -> control plane

impl From<StepKind> for pb::StepKind {
    fn from(kind: StepKind) -> Self {
        match kind {
            StepKind::LlmCall => pb::StepKind::LlmCall,
            StepKind::Tool => pb::StepKind::Tool,
            StepKind::Wait => pb::StepKind::Wait,
            StepKind::Permission => pb::StepKind::Permission,
        }
    }
}

fn step_kind_from_wire(value: i32) -> Result<StepKind, ProtocolError> {
    match pb::StepKind::try_from(value) {
        Ok(pb::StepKind::LlmCall) => Ok(StepKind::LlmCall),
        Ok(pb::StepKind::Tool) => Ok(StepKind::Tool),
        Ok(pb::StepKind::Wait) => Ok(StepKind::Wait),
        Ok(pb::StepKind::Permission) => Ok(StepKind::Permission),
        Ok(pb::StepKind::Unspecified) | Err(_) => Err(ProtocolError::UnknownEnum {
            message: "StepStarted",
            field: "kind",
            value,
        }),
    }
}

impl From<FailureKind> for pb::FailureKind {
    fn from(kind: FailureKind) -> Self {
        match kind {
            FailureKind::Cancelled => pb::FailureKind::Cancelled,
            FailureKind::Killed => pb::FailureKind::Killed,
            FailureKind::Interrupted => pb::FailureKind::Interrupted,
            FailureKind::ModelError => pb::FailureKind::ModelError,
            FailureKind::BadOutput => pb::FailureKind::BadOutput,
            FailureKind::ToolCrash => pb::FailureKind::ToolCrash,
            FailureKind::Limit => pb::FailureKind::Limit,
            FailureKind::Config => pb::FailureKind::Config,
            FailureKind::Internal => pb::FailureKind::Internal,
        }
    }
}

/// The one exception to "missing is an error": a `RunFailed` whose kind is unset or
/// unknown still ends its run, as `Internal` with the value named in its text.
/// Refusing it would drop the only message that ends the run (a malformed message is
/// skipped), leaving its thread `running` with the reason lost.
fn run_failed_from_wire(r: pb::RunFailed) -> WorkerEvent {
    let (kind, error) = match pb::FailureKind::try_from(r.kind) {
        Ok(pb::FailureKind::Cancelled) => (FailureKind::Cancelled, r.error),
        Ok(pb::FailureKind::Killed) => (FailureKind::Killed, r.error),
        Ok(pb::FailureKind::Interrupted) => (FailureKind::Interrupted, r.error),
        Ok(pb::FailureKind::ModelError) => (FailureKind::ModelError, r.error),
        Ok(pb::FailureKind::BadOutput) => (FailureKind::BadOutput, r.error),
        Ok(pb::FailureKind::ToolCrash) => (FailureKind::ToolCrash, r.error),
        Ok(pb::FailureKind::Limit) => (FailureKind::Limit, r.error),
        Ok(pb::FailureKind::Config) => (FailureKind::Config, r.error),
        Ok(pb::FailureKind::Internal) => (FailureKind::Internal, r.error),
        Ok(pb::FailureKind::Unspecified) | Err(_) => (
            FailureKind::Internal,
            format!(
                "{} (the worker sent failure kind {}, which this control plane does not know; \
                 is the worker from another version of chorus?)",
                r.error, r.kind
            ),
        ),
    };
    WorkerEvent::RunFailed {
        run_id: r.run_id,
        kind,
        error,
    }
}

impl From<Input> for pb::Input {
    fn from(i: Input) -> Self {
        pb::Input {
            message_id: i.message_id,
            content: i.content,
        }
    }
}

impl From<pb::Input> for Input {
    fn from(i: pb::Input) -> Self {
        Input {
            message_id: i.message_id,
            content: i.content,
        }
    }
}

impl From<RetryPolicy> for pb::RetryPolicy {
    fn from(r: RetryPolicy) -> Self {
        pb::RetryPolicy {
            max_attempts: r.max_attempts,
            max_total_ms: r.max_total_ms,
            base_delay_ms: r.base_delay_ms,
            call_timeout_ms: r.call_timeout_ms,
            silence_timeout_ms: r.silence_timeout_ms,
        }
    }
}

/// An event without a place in a run (`seq` 0).
impl From<WorkerEvent> for pb::WorkerMessage {
    fn from(event: WorkerEvent) -> Self {
        pb::WorkerMessage::from(Sequenced { seq: 0, event })
    }
}

impl TryFrom<pb::WorkerMessage> for Sequenced {
    type Error = ProtocolError;

    fn try_from(message: pb::WorkerMessage) -> Result<Self, Self::Error> {
        let seq = message.seq;
        Ok(Sequenced {
            seq,
            event: WorkerEvent::try_from(message)?,
        })
    }
}

impl From<Sequenced> for pb::WorkerMessage {
    fn from(Sequenced { seq, event }: Sequenced) -> Self {
        let body = match event {
            WorkerEvent::Hello {
                worker_version,
                pid,
                directories,
                volume,
                backends,
            } => WorkerBody::Hello(pb::Hello {
                worker_version,
                pid,
                volume,
                backends: backends.into_iter().map(Into::into).collect(),
                directories: directories
                    .into_iter()
                    .map(|d| pb::AgentDirectory {
                        agent: d.agent,
                        incarnation: d.incarnation,
                    })
                    .collect(),
            }),
            WorkerEvent::Heartbeat { active_runs } => {
                WorkerBody::Heartbeat(pb::Heartbeat { active_runs })
            }
            WorkerEvent::StepStarted(s) => WorkerBody::StepStarted(pb::StepStarted {
                run_id: s.run_id,
                number: s.number,
                kind: pb::StepKind::from(s.kind) as i32,
                description: s.description,
                started_at_ms: s.started_at_ms,
                runs_in: s
                    .runs_in
                    .map_or(pb::ToolRunsIn::Unspecified, pb::ToolRunsIn::from)
                    as i32,
            }),
            WorkerEvent::StepEnded(s) => WorkerBody::StepEnded(pb::StepEnded {
                run_id: s.run_id,
                number: s.number,
                ended_at_ms: s.ended_at_ms,
                duration_ms: s.duration_ms,
                failed: s.failed,
                usage: s.usage.map(Into::into),
            }),
            WorkerEvent::MessageAppended { run_id, message } => {
                WorkerBody::MessageAppended(pb::MessageAppended {
                    run_id,
                    message: Some(message.into()),
                })
            }
            WorkerEvent::RunCompleted { run_id, final_text } => {
                WorkerBody::RunCompleted(pb::RunCompleted { run_id, final_text })
            }
            WorkerEvent::RunFailed {
                run_id,
                kind,
                error,
            } => WorkerBody::RunFailed(pb::RunFailed {
                run_id,
                error,
                kind: pb::FailureKind::from(kind) as i32,
            }),
            WorkerEvent::TextDelta { run_id, step, text } => {
                WorkerBody::TextDelta(pb::TextDelta { run_id, step, text })
            }
            WorkerEvent::ToolCheck {
                request_id,
                run_id,
                call,
                trace_context,
            } => WorkerBody::ToolCheck(pb::ToolCheck {
                request_id,
                run_id,
                call_id: call.id,
                tool: call.name,
                arguments: call.arguments,
                trace_context,
            }),
            WorkerEvent::JobStarted(t) => WorkerBody::JobStarted(pb::JobStarted {
                job_id: t.job_id,
                command: t.command,
                pid: t.pid,
            }),
            WorkerEvent::JobEnded { job_id, end } => WorkerBody::JobEnded(pb::JobEnded {
                job_id,
                status: end.status.as_str().to_owned(),
                exit_code: end.exit_code,
                detail: end.detail,
            }),
            WorkerEvent::CliSessionStarted { run_id, session_id } => {
                WorkerBody::CliSessionStarted(pb::CliSessionStarted { run_id, session_id })
            }
            WorkerEvent::ResumedCallDone {
                run_id,
                call_id,
                is_error,
            } => WorkerBody::ResumedCallDone(pb::ResumedCallDone {
                run_id,
                call_id,
                is_error,
            }),
            WorkerEvent::InputTaken { run_id, message_id } => {
                WorkerBody::InputTaken(pb::InputTaken { run_id, message_id })
            }
            WorkerEvent::Summary { request_id, result } => {
                let (text, error) = match result {
                    Ok(text) => (text, String::new()),
                    Err(error) => (String::new(), error),
                };
                WorkerBody::Summary(pb::Summary {
                    request_id,
                    text,
                    error,
                })
            }
            WorkerEvent::AgentFilesDeleted { agent, result } => {
                let (deleted, error) = match result {
                    Ok(deleted) => (deleted, String::new()),
                    Err(error) => (false, error),
                };
                WorkerBody::AgentFilesDeleted(pb::AgentFilesDeleted {
                    agent,
                    deleted,
                    error,
                })
            }
            WorkerEvent::McpServerState {
                agent,
                server,
                state,
                tools,
                offered,
                error,
            } => WorkerBody::McpServerState(pb::McpServerState {
                agent,
                server,
                state: state.as_str().to_owned(),
                tools,
                error,
                offered: offered.into_iter().map(Into::into).collect(),
            }),
        };
        pb::WorkerMessage {
            body: Some(body),
            seq,
        }
    }
}

impl TryFrom<pb::WorkerMessage> for WorkerEvent {
    type Error = ProtocolError;

    fn try_from(message: pb::WorkerMessage) -> Result<Self, Self::Error> {
        let body = message
            .body
            .ok_or(ProtocolError::EmptyMessage("WorkerMessage"))?;
        Ok(match body {
            WorkerBody::Hello(h) => WorkerEvent::Hello {
                worker_version: h.worker_version,
                pid: h.pid,
                volume: h.volume,
                backends: h
                    .backends
                    .into_iter()
                    .map(BackendStatus::try_from)
                    .collect::<Result<_, _>>()?,
                directories: h
                    .directories
                    .into_iter()
                    .map(|d| AgentDirectory {
                        agent: d.agent,
                        incarnation: d.incarnation,
                    })
                    .collect(),
            },
            WorkerBody::Heartbeat(h) => WorkerEvent::Heartbeat {
                active_runs: h.active_runs,
            },
            WorkerBody::StepStarted(s) => WorkerEvent::StepStarted(StepStarted {
                kind: step_kind_from_wire(s.kind)?,
                // Unspecified: not a tool step (or an older worker's).
                runs_in: match s.runs_in {
                    0 => None,
                    value => Some(runs_in_from_wire("StepStarted", value)?),
                },
                run_id: s.run_id,
                number: s.number,
                description: s.description,
                started_at_ms: s.started_at_ms,
            }),
            WorkerBody::StepEnded(s) => WorkerEvent::StepEnded(StepEnded {
                run_id: s.run_id,
                number: s.number,
                ended_at_ms: s.ended_at_ms,
                duration_ms: s.duration_ms,
                failed: s.failed,
                usage: s.usage.map(Into::into),
            }),
            WorkerBody::MessageAppended(m) => WorkerEvent::MessageAppended {
                run_id: m.run_id,
                message: required_message(m.message, "MessageAppended")?,
            },
            WorkerBody::RunCompleted(r) => WorkerEvent::RunCompleted {
                run_id: r.run_id,
                final_text: r.final_text,
            },
            WorkerBody::RunFailed(r) => run_failed_from_wire(r),
            WorkerBody::TextDelta(t) => WorkerEvent::TextDelta {
                run_id: t.run_id,
                step: t.step,
                text: t.text,
            },
            WorkerBody::ToolCheck(c) => WorkerEvent::ToolCheck {
                request_id: c.request_id,
                run_id: c.run_id,
                call: ToolCall {
                    id: c.call_id,
                    name: c.tool,
                    arguments: c.arguments,
                },
                trace_context: c.trace_context,
            },
            WorkerBody::JobStarted(t) => WorkerEvent::JobStarted(JobReport {
                job_id: t.job_id,
                command: t.command,
                pid: t.pid,
            }),
            WorkerBody::JobEnded(t) => WorkerEvent::JobEnded {
                job_id: t.job_id,
                end: JobEnd {
                    status: JobOutcome::parse(&t.status).ok_or(ProtocolError::UnknownValue {
                        message: "JobEnded",
                        field: "status",
                        value: t.status,
                    })?,
                    exit_code: t.exit_code,
                    detail: t.detail,
                },
            },
            WorkerBody::CliSessionStarted(s) => WorkerEvent::CliSessionStarted {
                run_id: s.run_id,
                session_id: s.session_id,
            },
            WorkerBody::ResumedCallDone(d) => WorkerEvent::ResumedCallDone {
                run_id: d.run_id,
                call_id: d.call_id,
                is_error: d.is_error,
            },
            WorkerBody::InputTaken(t) => WorkerEvent::InputTaken {
                run_id: t.run_id,
                message_id: t.message_id,
            },
            WorkerBody::Summary(s) => WorkerEvent::Summary {
                request_id: s.request_id,
                result: if s.error.is_empty() {
                    Ok(s.text)
                } else {
                    Err(s.error)
                },
            },
            WorkerBody::AgentFilesDeleted(d) => WorkerEvent::AgentFilesDeleted {
                agent: d.agent,
                result: if d.error.is_empty() {
                    Ok(d.deleted)
                } else {
                    Err(d.error)
                },
            },
            WorkerBody::McpServerState(m) => WorkerEvent::McpServerState {
                agent: m.agent,
                server: m.server,
                state: McpState::parse(&m.state).ok_or(ProtocolError::UnknownValue {
                    message: "McpServerState",
                    field: "state",
                    value: m.state,
                })?,
                tools: m.tools,
                offered: m
                    .offered
                    .into_iter()
                    .map(ToolSpec::try_from)
                    .collect::<Result<_, _>>()?,
                error: m.error,
            },
        })
    }
}

impl From<McpServer> for pb::McpServer {
    fn from(server: McpServer) -> Self {
        let (command, args, env, url, headers) = match server.transport {
            McpTransport::Stdio { command, args, env } => (
                command,
                args,
                env.into_iter().collect(),
                String::new(),
                Default::default(),
            ),
            McpTransport::Http { url, headers } => (
                String::new(),
                Vec::new(),
                Default::default(),
                url,
                headers.into_iter().collect(),
            ),
        };
        pb::McpServer {
            name: server.name,
            command,
            args,
            env,
            url,
            headers,
            call_timeout_ms: server.call_timeout_ms,
        }
    }
}

impl TryFrom<pb::McpServer> for McpServer {
    type Error = ProtocolError;
    fn try_from(server: pb::McpServer) -> Result<Self, ProtocolError> {
        let transport = match (server.command.is_empty(), server.url.is_empty()) {
            (false, true) => McpTransport::Stdio {
                command: server.command,
                args: server.args,
                env: server.env.into_iter().collect(),
            },
            (true, false) => McpTransport::Http {
                url: server.url,
                headers: server.headers.into_iter().collect(),
            },
            _ => {
                return Err(ProtocolError::UnknownValue {
                    message: "McpServer",
                    field: "command/url",
                    value: format!("server '{}' needs exactly one of them", server.name),
                });
            }
        };
        Ok(McpServer {
            name: server.name,
            transport,
            call_timeout_ms: server.call_timeout_ms,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn call() -> ToolCall {
        ToolCall {
            id: "call_1".into(),
            name: "create_file".into(),
            arguments: r#"{"path":"a.txt""#.into(), // invalid JSON survives untouched
        }
    }

    #[test]
    fn every_worker_event_survives_the_wire() {
        let events = vec![
            WorkerEvent::Hello {
                worker_version: "0.1.0".into(),
                pid: 42,
                directories: vec![AgentDirectory {
                    agent: "a".into(),
                    incarnation: "0f3a".into(),
                }],
                volume: "5e1d".into(),
                backends: vec![
                    BackendStatus {
                        backend: Backend::ClaudeCode,
                        usable: true,
                        version: Some("2.1.332".into()),
                        reason: None,
                        path: Some("/usr/bin/claude".into()),
                    },
                    BackendStatus {
                        backend: Backend::OpenCode,
                        usable: false,
                        version: None,
                        reason: Some("not installed".into()),
                        path: None,
                    },
                ],
            },
            WorkerEvent::CliSessionStarted {
                run_id: "r".into(),
                session_id: "ses_1".into(),
            },
            WorkerEvent::ResumedCallDone {
                run_id: "r".into(),
                call_id: "toolu_1".into(),
                is_error: true,
            },
            WorkerEvent::Heartbeat { active_runs: 2 },
            WorkerEvent::StepStarted(StepStarted {
                run_id: "r".into(),
                number: 3,
                kind: StepKind::Tool,
                description: "Executing create_file: a.txt".into(),
                started_at_ms: 1_700_000_000_000,
                runs_in: Some(RunsIn::Worker),
            }),
            WorkerEvent::StepStarted(StepStarted {
                run_id: "r".into(),
                number: 4,
                kind: StepKind::Tool,
                description: "Executing self_edit_model in the control plane".into(),
                started_at_ms: 1_700_000_000_000,
                runs_in: Some(RunsIn::ControlPlane),
            }),
            WorkerEvent::StepStarted(StepStarted {
                run_id: "r".into(),
                number: 5,
                kind: StepKind::LlmCall,
                description: "Calling LLM (m)".into(),
                started_at_ms: 1_700_000_000_000,
                runs_in: None,
            }),
            WorkerEvent::StepEnded(StepEnded {
                run_id: "r".into(),
                number: 3,
                ended_at_ms: 1_700_000_000_005,
                duration_ms: 5,
                failed: true,
                usage: Some(Usage {
                    input_tokens: 10,
                    output_tokens: 2,
                }),
            }),
            WorkerEvent::MessageAppended {
                run_id: "r".into(),
                message: ChatMessage::assistant("", vec![call()]),
            },
            WorkerEvent::MessageAppended {
                run_id: "r".into(),
                message: ChatMessage::tool_result(&call(), "refused", true),
            },
            WorkerEvent::RunCompleted {
                run_id: "r".into(),
                final_text: "done".into(),
            },
            WorkerEvent::RunFailed {
                run_id: "r".into(),
                kind: FailureKind::ModelError,
                error: "boom".into(),
            },
            WorkerEvent::TextDelta {
                run_id: "r".into(),
                step: 1,
                text: "Hel".into(),
            },
            WorkerEvent::ToolCheck {
                request_id: 9,
                run_id: "r".into(),
                call: call(),
                trace_context: HashMap::from([("traceparent".into(), "00-…".into())]),
            },
            WorkerEvent::JobStarted(JobReport {
                job_id: 2,
                command: "npm run dev".into(),
                pid: 4242,
            }),
            WorkerEvent::JobEnded {
                job_id: 2,
                end: JobEnd {
                    status: JobOutcome::Failed,
                    exit_code: Some(1),
                    detail: "exit code 1".into(),
                },
            },
            WorkerEvent::JobEnded {
                job_id: 3,
                end: JobEnd {
                    status: JobOutcome::Stopped,
                    exit_code: None,
                    detail: "killed by signal SIGTERM".into(),
                },
            },
        ];
        let mut events = events;
        events.extend([
            WorkerEvent::InputTaken {
                run_id: "r".into(),
                message_id: 9,
            },
            WorkerEvent::Summary {
                request_id: 4,
                result: Ok("did things".into()),
            },
            WorkerEvent::Summary {
                request_id: 5,
                result: Err("no provider".into()),
            },
            WorkerEvent::AgentFilesDeleted {
                agent: "a".into(),
                result: Ok(true),
            },
            WorkerEvent::AgentFilesDeleted {
                agent: "a".into(),
                result: Err("held by another worker".into()),
            },
        ]);
        for (seq, event) in events.into_iter().enumerate() {
            let sequenced = Sequenced {
                seq: seq as u64,
                event,
            };
            let wire = pb::WorkerMessage::from(sequenced.clone());
            assert_eq!(Sequenced::try_from(wire).unwrap(), sequenced);
        }
    }

    fn route() -> ModelRoute {
        ModelRoute {
            provider: "openai".into(),
            api: ModelRoute::OPENAI_CHAT.into(),
            relay_path: "/llm/openai".into(),
            model: "gpt-4o".into(),
            limits: crate::domain::ModelLimits {
                max_tokens: Some(4096),
                context_window: Some(32768),
            },
        }
    }

    #[test]
    fn every_control_command_survives_the_wire() {
        let commands = vec![
            ControlCommand::Welcome {
                agent: "a".into(),
                connection_id: "c".into(),
                heartbeat_interval_ms: 5000,
                trace_export: None,
                dial_in: Some(DialIn {
                    credential: Credential("c-1".into()),
                    template: vec![TemplateFile {
                        path: "docs/README.md".into(),
                        content: b"hi".to_vec(),
                        executable: true,
                    }],
                    incarnation: "0f3a".into(),
                }),
            },
            ControlCommand::DeleteAgentFiles {
                agent: "a".into(),
                incarnation: "0f3a".into(),
            },
            ControlCommand::Welcome {
                agent: "a".into(),
                connection_id: "c".into(),
                heartbeat_interval_ms: 5000,
                trace_export: Some(TraceExport {
                    service_name: "chorus-worker".into(),
                    resource_attributes: [("chorus.agent".to_string(), "a".to_string())].into(),
                    record_content: true,
                }),
                dial_in: None,
            },
            ControlCommand::AssignRun(Box::new(RunAssignment {
                run_id: "r".into(),
                thread_id: 7,
                relevant: "# Relevant\n- [memory memory/MEMORY.md:3] a fact".into(),
                agent: AgentSettings {
                    name: "a".into(),
                    system_prompt: "be brief".into(),
                    model: "m".into(),
                    tools: vec!["view".into(), "bash".into()],
                    sandbox: SandboxPolicy {
                        network: false,
                        read_only: vec!["/srv/ro".into()],
                        read_write: vec!["/srv/rw".into()],
                        run_unsandboxed: true,
                        limits: ResourceLimits {
                            cpu_secs: 60,
                            file_size_bytes: 1 << 30,
                            open_files: 1024,
                            max_processes: 256,
                        },
                    },
                    offered: vec![
                        crate::tools::find("view")
                            .unwrap()
                            .spec(&Default::default()),
                        crate::tools::find("self_edit_model")
                            .unwrap()
                            .spec(&Default::default()),
                    ],
                    mcp_servers: vec![
                        McpServer {
                            name: "files".into(),
                            transport: McpTransport::Stdio {
                                command: "/bin/srv".into(),
                                args: vec!["--stdio".into()],
                                env: [("TOKEN".to_string(), "t".to_string())].into(),
                            },
                            call_timeout_ms: 300_000,
                        },
                        McpServer {
                            name: "web".into(),
                            transport: McpTransport::Http {
                                url: "http://127.0.0.1:1/mcp".into(),
                                headers: [("x-key".to_string(), "k".to_string())].into(),
                            },
                            call_timeout_ms: 1_000,
                        },
                    ],
                    mcp_reach: McpReach::Prefixes(vec![("tool:mcp__files__".into(), true)]),
                    identity: "# Who you are\nCalm.".into(),
                    memory: "# Your memory\n- a fact".into(),
                },
                model: route(),
                messages: vec![ChatMessage::user("hi")],
                first_step_number: 4,
                max_iterations: 50,
                trace_context: HashMap::from([("traceparent".into(), "00-…".into())]),
                retry: RetryPolicy {
                    max_attempts: 3,
                    max_total_ms: 1000,
                    base_delay_ms: 10,
                    call_timeout_ms: 5000,
                    silence_timeout_ms: 2000,
                },
                attempt: 2,
                inputs: vec![Input {
                    message_id: 12,
                    content: "and this".into(),
                }],
                thread_summary: "Fix the build".into(),
                thread_started_at_ms: 1_700_000_000_000,
                role_tools: vec![ToolSpec {
                    name: "submit_plan".into(),
                    wire_name: "submit_plan".into(),
                    description: "Submit the plan".into(),
                    schema_json: "{\"type\":\"object\"}".into(),
                    runs_in: crate::tools::RunsIn::ControlPlane,
                    ends_turn: true,
                }],
                workdir: Some("tasks/7".into()),
                files: vec![TemplateFile {
                    path: "spec.md".into(),
                    content: b"the spec".to_vec(),
                    executable: false,
                }],
                backend: Backend::OpenCode,
                cli_session: Some(CliSession {
                    id: "ses_1".into(),
                    fork: true,
                }),
                resumed_call: Some(ResumedCall {
                    call: ToolCall {
                        id: "toolu_1".into(),
                        name: "create_file".into(),
                        arguments: "{}".into(),
                    },
                    allowed: true,
                    message: String::new(),
                    result: Some(ToolResult {
                        content: "done".into(),
                        is_error: false,
                    }),
                    approval_id: "a1".into(),
                    answered_by: "alice".into(),
                }),
            })),
            ControlCommand::Summarize(Box::new(SummaryRequest {
                request_id: 3,
                model: route(),
                instruction: "Summarise".into(),
                messages: vec![ChatMessage::user("hi")],
                retry: RetryPolicy {
                    max_attempts: 1,
                    max_total_ms: 10,
                    base_delay_ms: 1,
                    call_timeout_ms: 5,
                    silence_timeout_ms: 5,
                },
            })),
            ControlCommand::UpdateAgent(AgentChange {
                model: Some(("ollama/llama3.2".into(), route())),
                system_prompt: Some("new".into()),
                tools: Some(vec![]),
                offered: Some(vec![]),
                identity: Some("# Who you are".into()),
                memory: Some("# Your memory".into()),
            }),
            ControlCommand::UpdateAgent(AgentChange::default()),
            ControlCommand::ToolDecision(ToolDecision {
                request_id: 9,
                allowed: false,
                message: "denied by rule 2".into(),
                result: Some(ToolResult {
                    content: "x".into(),
                    is_error: true,
                }),
            }),
            ControlCommand::ToolPending {
                request_id: 9,
                description: "Waiting for permission".into(),
                approval_id: "a1".into(),
            },
            ControlCommand::ToolDeferred {
                request_id: 9,
                message: "Waiting for a person".into(),
                approval_id: "a1".into(),
            },
            ControlCommand::InjectMessage {
                run_id: "r".into(),
                input: Input {
                    message_id: 5,
                    content: "also this".into(),
                },
            },
            ControlCommand::CancelRun {
                run_id: "r".into(),
                reason: "killed".into(),
            },
            ControlCommand::Shutdown {
                reason: "agent destroyed".into(),
            },
        ];
        for command in commands {
            let wire = pb::ControlMessage::from(command.clone());
            assert_eq!(ControlCommand::try_from(wire).unwrap(), command);
        }
    }

    #[test]
    fn malformed_wire_messages_are_rejected_not_defaulted() {
        assert_eq!(
            WorkerEvent::try_from(pb::WorkerMessage { body: None, seq: 0 }),
            Err(ProtocolError::EmptyMessage("WorkerMessage"))
        );
        let no_message = pb::WorkerMessage {
            body: Some(WorkerBody::MessageAppended(pb::MessageAppended {
                run_id: "r".into(),
                message: None,
            })),
            seq: 0,
        };
        assert!(matches!(
            WorkerEvent::try_from(no_message),
            Err(ProtocolError::MissingField { .. })
        ));
        let bad_role = pb::WorkerMessage {
            body: Some(WorkerBody::MessageAppended(pb::MessageAppended {
                run_id: "r".into(),
                message: Some(pb::ChatMessage {
                    role: 99,
                    ..Default::default()
                }),
            })),
            seq: 0,
        };
        assert!(matches!(
            WorkerEvent::try_from(bad_role),
            Err(ProtocolError::UnknownEnum { value: 99, .. })
        ));
        // A job's end is one of the outcomes a worker can report: never "running"
        // or "lost" (the control plane's words), nor anything else.
        for status in ["lost", "running", "exited", ""] {
            let bad_end = pb::WorkerMessage {
                body: Some(WorkerBody::JobEnded(pb::JobEnded {
                    job_id: 1,
                    status: status.into(),
                    exit_code: None,
                    detail: String::new(),
                })),
                seq: 0,
            };
            assert_eq!(
                WorkerEvent::try_from(bad_end),
                Err(ProtocolError::UnknownValue {
                    message: "JobEnded",
                    field: "status",
                    value: status.into(),
                })
            );
        }
        for outcome in JobOutcome::ALL {
            assert_eq!(JobOutcome::parse(outcome.as_str()), Some(outcome));
        }
        let no_agent = pb::ControlMessage {
            body: Some(ControlBody::AssignRun(pb::AssignRun::default())),
        };
        assert!(matches!(
            ControlCommand::try_from(no_agent),
            Err(ProtocolError::MissingField { .. })
        ));
    }

    #[test]
    fn every_failure_kind_survives_the_wire_and_its_name() {
        for kind in FailureKind::ALL {
            let event = WorkerEvent::RunFailed {
                run_id: "r".into(),
                kind,
                error: "why".into(),
            };
            let wire = pb::WorkerMessage::from(event.clone());
            assert_eq!(WorkerEvent::try_from(wire).unwrap(), event);
            assert_eq!(FailureKind::parse(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        assert_eq!(FailureKind::parse("oops"), None);
    }

    #[test]
    fn a_run_failure_of_unknown_kind_still_ends_the_run_as_internal_naming_the_value() {
        for value in [pb::FailureKind::Unspecified as i32, 99] {
            let wire = pb::WorkerMessage {
                body: Some(WorkerBody::RunFailed(pb::RunFailed {
                    run_id: "r".into(),
                    error: "boom".into(),
                    kind: value,
                })),
                seq: 1,
            };
            let Ok(WorkerEvent::RunFailed {
                run_id,
                kind,
                error,
            }) = WorkerEvent::try_from(wire)
            else {
                panic!("a run failure must not be refused");
            };
            assert_eq!((run_id.as_str(), kind), ("r", FailureKind::Internal));
            assert!(
                error.starts_with("boom (the worker sent failure kind ")
                    && error.contains(&value.to_string()),
                "{error}"
            );
        }
    }
}
