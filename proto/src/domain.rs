//! Types the control plane and the worker exchange, free of generated code.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

pub use crate::backend::{Backend, BackendStatus, CliSession};

/// A credential on the link: `Debug` never shows it (commands are logged).
#[derive(Clone, PartialEq, Eq)]
pub struct Credential(pub String);

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Credential(***)")
    }
}

/// What a dial-in worker is given with its agent (see `Welcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DialIn {
    pub credential: Credential,
    /// Laid out only where the worker's volume has no directory for the agent yet.
    pub template: Vec<TemplateFile>,
    /// Which creation of the agent this is: a directory laid out for another one is
    /// deleted and laid out again.
    pub incarnation: String,
}

/// An agent's directory on a dial-in worker's volume, laid out for `incarnation`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentDirectory {
    pub agent: String,
    pub incarnation: String,
}

/// One file of an agent's template, by relative path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TemplateFile {
    pub path: String,
    pub content: Vec<u8>,
    pub executable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
    Assistant,
    Tool,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::Tool => "tool",
        }
    }

    pub fn parse(s: &str) -> Option<Role> {
        match s {
            "system" => Some(Role::System),
            "user" => Some(Role::User),
            "assistant" => Some(Role::Assistant),
            "tool" => Some(Role::Tool),
            _ => None,
        }
    }
}

/// One message of a conversation in Chorus's provider-neutral model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChatMessage {
    pub role: Role,
    pub content: String,
    /// Assistant messages: the tool calls the model asked for, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// Tool messages: the call this is the result of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// Tool messages: the tool's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    /// Tool messages: the result is an error the model should act on.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
}

impl ChatMessage {
    pub fn user(content: impl Into<String>) -> Self {
        Self::plain(Role::User, content.into())
    }

    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        ChatMessage {
            tool_calls,
            ..Self::plain(Role::Assistant, content.into())
        }
    }

    pub fn tool_result(call: &ToolCall, content: impl Into<String>, is_error: bool) -> Self {
        ChatMessage {
            tool_call_id: Some(call.id.clone()),
            tool_name: Some(call.name.clone()),
            is_error,
            ..Self::plain(Role::Tool, content.into())
        }
    }

    fn plain(role: Role, content: String) -> Self {
        ChatMessage {
            role,
            content,
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
            is_error: false,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    /// The arguments exactly as the model produced them; may be invalid JSON.
    pub arguments: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

/// What a worker needs to know about its agent to run one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentSettings {
    pub name: String,
    pub system_prompt: String,
    pub model: String,
    /// The tools the model may be offered (the profile may allow or ask for them).
    pub tools: Vec<String>,
    /// How the agent's tool processes are confined.
    pub sandbox: SandboxPolicy,
    /// The tools offered to the model, as the control plane's registry renders them
    /// (the same tools as `tools`, which older workers read instead).
    pub offered: Vec<ToolSpec>,
    /// Its MCP servers, secrets resolved: their tools are offered beside `offered`.
    pub mcp_servers: Vec<crate::mcp::McpServer>,
    /// Which of their tools the profile may ever allow or ask for (the others are
    /// not offered).
    pub mcp_reach: crate::mcp::McpReach,
    /// The identity section of the system prompt (SOUL.md, USER.md), rendered by the
    /// control plane, which keeps the files; "" when there is none.
    pub identity: String,
    /// The memory section of the system prompt (MEMORY.md and daily log tails, size
    /// and limit), rendered by the control plane; "" when there is none.
    pub memory: String,
}

/// One tool as the model is offered it: what the worker needs to offer a tool it
/// has no code for (one the control plane carries out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolSpec {
    /// Chorus's name (`file.read`), as in action strings and profiles.
    pub name: String,
    /// The name the model calls it by (`file_read`).
    pub wire_name: String,
    pub description: String,
    /// The JSON Schema of its arguments (an object schema), as JSON text.
    pub schema_json: String,
    pub runs_in: crate::tools::RunsIn,
    /// A successful call ends the run's turn (a task role's finishing tools): the
    /// worker ends the run after the batch it was in, with no further model call.
    pub ends_turn: bool,
}

/// How an agent's tool processes are confined (Landlock and resource limits; the
/// worker applies it to every process it starts for a tool). See `worker::tools::sandbox`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SandboxPolicy {
    /// Tool processes may connect and bind TCP.
    pub network: bool,
    /// Extra paths readable by tool processes (the system's always are).
    pub read_only: Vec<String>,
    /// Extra paths readable and writable (besides workspace, home and temp dir).
    pub read_write: Vec<String>,
    /// Where Landlock cannot be enforced: run unconfined with a warning instead of refusing.
    pub run_unsandboxed: bool,
    pub limits: ResourceLimits,
}

/// Limits on tool processes; 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ResourceLimits {
    /// CPU seconds per process (RLIMIT_CPU).
    pub cpu_secs: u64,
    /// Largest file a process may write (RLIMIT_FSIZE).
    pub file_size_bytes: u64,
    /// Open file descriptors per process (RLIMIT_NOFILE).
    pub open_files: u64,
    /// Processes one bash call or job may have alive at once.
    pub max_processes: u32,
}

/// Where a worker sends model requests: a path on the control plane's model relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelRoute {
    pub provider: String,
    /// Wire format spoken behind the relay: [`ModelRoute::OPENAI_CHAT`] or
    /// [`ModelRoute::ANTHROPIC_MESSAGES`].
    pub api: String,
    pub relay_path: String,
    /// The model name as the provider knows it.
    pub model: String,
    /// What is known of the model's limits (settings, or the provider's list).
    pub limits: ModelLimits,
}

/// A model's limits, where known.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelLimits {
    /// Output tokens to ask for (`max_tokens`); `None`: the worker's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u32>,
    /// Input plus output tokens the model can hold.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
}

impl ModelRoute {
    pub const OPENAI_CHAT: &'static str = "openai-chat";
    pub const ANTHROPIC_MESSAGES: &'static str = "anthropic-messages";
}

/// How a worker retries model calls that failed for a passing reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub max_attempts: u32,
    /// Give up once this long has passed since the first attempt.
    pub max_total_ms: u64,
    /// First backoff delay; doubles per attempt. A provider's Retry-After wins.
    pub base_delay_ms: u64,
    /// One attempt's deadline, from sending the request to the reply's last byte.
    pub call_timeout_ms: u64,
    /// One attempt ends when the provider sends nothing for this long (a provider
    /// that accepts the connection and never answers).
    pub silence_timeout_ms: u64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            max_total_ms: 120_000,
            base_delay_ms: 1_000,
            call_timeout_ms: 600_000,
            silence_timeout_ms: 120_000,
        }
    }
}

/// One run of a thread's tool loop, assigned to the agent's worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunAssignment {
    pub run_id: String,
    pub thread_id: u64,
    pub agent: AgentSettings,
    pub model: ModelRoute,
    /// The conversation so far, oldest first, without a system message.
    pub messages: Vec<ChatMessage>,
    pub first_step_number: u32,
    /// Upper bound on LLM calls; 0 lets the worker choose.
    pub max_iterations: u32,
    pub trace_context: HashMap<String, String>,
    pub retry: RetryPolicy,
    /// 1 for a request's first run; each resumption after a crash is the next.
    pub attempt: u32,
    /// User messages of the thread no model has seen yet; taken before the first
    /// model call, as injected ones are.
    pub inputs: Vec<Input>,
    /// What the thread is about (its summary line) and when it started, so the run
    /// can describe it beside the agent's other threads.
    pub thread_summary: String,
    pub thread_started_at_ms: i64,
    /// The tools of the thread's role in a task, offered beside the agent's (a
    /// change of the agent's tools leaves them as they are).
    pub role_tools: Vec<ToolSpec>,
    /// The directory the run's tools work in, relative to the agent's workspace
    /// (`tasks/7`); `None`: the whole workspace.
    pub workdir: Option<String>,
    /// Files its working directory is given before the first model call (a task's
    /// attachments), written where no file is yet.
    pub files: Vec<TemplateFile>,
    /// What runs the turn: the tool loop or a CLI.
    pub backend: Backend,
    /// A CLI backend's session to go on from (the thread's last run's).
    pub cli_session: Option<CliSession>,
    /// A call that was deferred for a person's approval, now answered.
    pub resumed_call: Option<ResumedCall>,
    /// The memory search hits most relevant to the thread's latest user message, as a
    /// prompt section ("" when none).
    pub relevant: String,
}

/// A tool call a CLI run deferred while it waited for a person
/// ([`ControlCommand::ToolDeferred`]), as the person answered it: the thread's next
/// run carries it out (if allowed) before the model goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumedCall {
    pub call: ToolCall,
    pub allowed: bool,
    /// Why not, for the model.
    pub message: String,
    /// The result, when the control plane carried the call out itself.
    pub result: Option<ToolResult>,
    pub approval_id: String,
    /// Who answered.
    pub answered_by: String,
}

/// A user message the model has not seen yet, with its id in the thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Input {
    pub message_id: u64,
    pub content: String,
}

/// Write a summary of `messages` with `model` (not a run: no tools, no steps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SummaryRequest {
    pub request_id: u64,
    pub model: ModelRoute,
    pub instruction: String,
    pub messages: Vec<ChatMessage>,
    pub retry: RetryPolicy,
}

/// How a worker labels the spans it exports (its OpenTelemetry resource).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TraceExport {
    pub service_name: String,
    pub resource_attributes: std::collections::BTreeMap<String, String>,
    /// Put model calls' messages on their spans (`[telemetry] record_content`).
    pub record_content: bool,
}

/// Control plane to worker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ControlCommand {
    Welcome {
        agent: String,
        connection_id: String,
        heartbeat_interval_ms: u32,
        /// `Some`: export spans through the control plane, labelled so.
        trace_export: Option<TraceExport>,
        /// `Some` for a dial-in worker: its credential and the agent's template.
        dial_in: Option<DialIn>,
    },
    AssignRun(Box<RunAssignment>),
    /// A user message for a run in progress: taken before its next model call.
    InjectMessage {
        run_id: String,
        input: Input,
    },
    /// Answered by exactly one [`WorkerEvent::Summary`].
    Summarize(Box<SummaryRequest>),
    /// To an idle dial-in worker: delete a destroyed agent's files if they are that
    /// incarnation's. Answered by [`WorkerEvent::AgentFilesDeleted`].
    DeleteAgentFiles {
        agent: String,
        incarnation: String,
    },
    CancelRun {
        run_id: String,
        reason: String,
    },
    Shutdown {
        reason: String,
    },
    /// The agent changed; runs use the new values from their next model call.
    UpdateAgent(AgentChange),
    /// The answer to a [`WorkerEvent::ToolCheck`].
    ToolDecision(ToolDecision),
    /// A tool check waits for a person's answer.
    ToolPending {
        request_id: u64,
        description: String,
        approval_id: String,
    },
    /// A CLI run's check that waits for a person outlived its hold: the call is
    /// not run now (see [`ResumedCall`]).
    ToolDeferred {
        request_id: u64,
        message: String,
        approval_id: String,
    },
}

/// What changed about an agent; `None` means unchanged.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AgentChange {
    /// The model as the user named it, and its route.
    pub model: Option<(String, ModelRoute)>,
    pub system_prompt: Option<String>,
    pub tools: Option<Vec<String>>,
    /// The tools offered from now on (set with `tools`, which older workers read).
    pub offered: Option<Vec<ToolSpec>>,
    /// The identity section from now on.
    pub identity: Option<String>,
    /// The memory section from now on.
    pub memory: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolDecision {
    pub request_id: u64,
    pub allowed: bool,
    /// Why not (for the model), or a note.
    pub message: String,
    /// The result, when the control plane executed the tool itself.
    pub result: Option<ToolResult>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    pub content: String,
    pub is_error: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StepKind {
    LlmCall,
    Tool,
    /// Waiting before a retry.
    Wait,
    /// Waiting for a person to approve or deny a tool call.
    Permission,
}

impl StepKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StepKind::LlmCall => "llm_call",
            StepKind::Tool => "tool",
            StepKind::Wait => "wait",
            StepKind::Permission => "permission",
        }
    }

    pub fn parse(s: &str) -> Option<StepKind> {
        match s {
            "llm_call" => Some(StepKind::LlmCall),
            "tool" => Some(StepKind::Tool),
            "wait" => Some(StepKind::Wait),
            "permission" => Some(StepKind::Permission),
            _ => None,
        }
    }
}

/// How a run ended without the model finishing its turn: what a program (a frontend,
/// a retry policy) chooses on. The text beside it is for people.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// Cancelled by Chorus (a `CancelRun`, the worker shutting down).
    Cancelled,
    /// Ended by a person (e.g. its agent was destroyed).
    Killed,
    /// Its worker died, hung or lost its link, or chorus stopped under it: not the
    /// run's fault; sending the message again may well succeed.
    Interrupted,
    /// The provider refused the call, kept failing until the retries ran out, or the
    /// conversation no longer fits the model's context window.
    ModelError,
    /// The model kept giving replies that cannot be used.
    BadOutput,
    /// A tool failed in a way the model could not be told about. Nothing produces it
    /// yet: a tool's error (even a panic) is a result the model reads.
    ToolCrash,
    /// A bound was reached: model calls per run, the size of a reply or of one
    /// message on the link, what a run may store.
    Limit,
    /// The agent cannot run as configured (no model or provider, an unusable
    /// permission profile).
    Config,
    /// Anything else: a bug, or a worker that sent a kind this build does not know.
    Internal,
}

impl FailureKind {
    pub const ALL: [FailureKind; 9] = [
        FailureKind::Cancelled,
        FailureKind::Killed,
        FailureKind::Interrupted,
        FailureKind::ModelError,
        FailureKind::BadOutput,
        FailureKind::ToolCrash,
        FailureKind::Limit,
        FailureKind::Config,
        FailureKind::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Cancelled => "cancelled",
            FailureKind::Killed => "killed",
            FailureKind::Interrupted => "interrupted",
            FailureKind::ModelError => "model_error",
            FailureKind::BadOutput => "bad_output",
            FailureKind::ToolCrash => "tool_crash",
            FailureKind::Limit => "limit",
            FailureKind::Config => "config",
            FailureKind::Internal => "internal",
        }
    }

    pub fn parse(s: &str) -> Option<FailureKind> {
        FailureKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

/// Why a thread failed: its kind, for programs, and what to do, for people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailureKind,
    pub message: String,
}

impl Failure {
    pub fn new(kind: FailureKind, message: impl Into<String>) -> Failure {
        Failure {
            kind,
            message: message.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepStarted {
    pub run_id: String,
    pub number: u32,
    pub kind: StepKind,
    pub description: String,
    pub started_at_ms: i64,
    /// Where a tool step's tool runs (`None` for other steps and for calls refused
    /// before they ran): a control-plane tool's step is open while it runs there.
    pub runs_in: Option<crate::tools::RunsIn>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepEnded {
    pub run_id: String,
    pub number: u32,
    pub ended_at_ms: i64,
    pub duration_ms: u64,
    pub failed: bool,
    pub usage: Option<Usage>,
}

/// Worker to control plane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerEvent {
    Hello {
        worker_version: String,
        pid: u32,
        /// A dial-in worker's volume: the agents' directories it holds.
        directories: Vec<AgentDirectory>,
        /// A dial-in worker's volume id (the same for workers sharing a volume).
        volume: String,
        /// The CLI backends on the worker's host, usable or not.
        backends: Vec<BackendStatus>,
    },
    Heartbeat {
        active_runs: u32,
    },
    StepStarted(StepStarted),
    StepEnded(StepEnded),
    MessageAppended {
        run_id: String,
        message: ChatMessage,
    },
    RunCompleted {
        run_id: String,
        final_text: String,
    },
    RunFailed {
        run_id: String,
        kind: FailureKind,
        error: String,
    },
    /// Streamed text of an LLM-call step, for live views; not stored.
    TextDelta {
        run_id: String,
        step: u32,
        text: String,
    },
    /// May this tool call run? Answered by [`ControlCommand::ToolDecision`].
    ToolCheck {
        request_id: u64,
        run_id: String,
        call: ToolCall,
        /// W3C trace context of the worker's span making the check.
        trace_context: HashMap<String, String>,
    },
    /// A background job started; it belongs to the worker, not to a run.
    JobStarted(JobReport),
    /// A background job ended.
    JobEnded {
        job_id: u32,
        end: JobEnd,
    },
    /// A CLI backend's run named its session; stored with the run.
    CliSessionStarted {
        run_id: String,
        session_id: String,
    },
    /// The run carried out (or refused) its assignment's [`ResumedCall`].
    ResumedCallDone {
        run_id: String,
        call_id: String,
        is_error: bool,
    },
    /// The run put a user message (injected, or an input of its assignment) into
    /// its history; the model sees it at the next call.
    InputTaken {
        run_id: String,
        message_id: u64,
    },
    /// The answer to [`ControlCommand::Summarize`].
    Summary {
        request_id: u64,
        result: Result<String, String>,
    },
    /// The answer to [`ControlCommand::DeleteAgentFiles`]: whether there was
    /// anything of that incarnation to delete, or why it could not be done.
    AgentFilesDeleted {
        agent: String,
        result: Result<bool, String>,
    },
    /// What became of one of the agent's MCP servers (started, connected, failed,
    /// its tools listed again); the control plane shows the latest in the agent's view.
    McpServerState {
        agent: String,
        server: String,
        state: crate::mcp::McpState,
        /// The names the server lists.
        tools: Vec<String>,
        /// Those tools as a run is offered them (`mcp__<server>__<tool>`).
        offered: Vec<ToolSpec>,
        error: String,
    },
}

/// A worker event with its place in its run: `seq` counts a run's events from 1 in
/// the order the worker sent them; 0 for events of no run. The control plane stores
/// a run's event only when its `seq` is past the last one stored for that run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sequenced {
    pub seq: u64,
    pub event: WorkerEvent,
}

/// A background job as it started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobReport {
    pub job_id: u32,
    pub command: String,
    /// The job's shell, which leads its process group.
    pub pid: u32,
}

/// How a background job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobEnd {
    pub status: JobOutcome,
    pub exit_code: Option<i32>,
    pub detail: String,
}

/// How a worker says a background job ended: the only ends it can report. (A job is
/// also `running` before, or `lost` with its worker: those are the control plane's
/// record, `store::JobStatus`, not anything a worker says.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobOutcome {
    /// Its shell exited with 0.
    Completed,
    /// Its shell exited otherwise, was killed, or could not be waited for.
    Failed,
    /// It was stopped on request (the agent stopped it, or its worker shut down),
    /// whatever its shell's exit.
    Stopped,
}

impl JobOutcome {
    pub const ALL: [JobOutcome; 3] = [
        JobOutcome::Completed,
        JobOutcome::Failed,
        JobOutcome::Stopped,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobOutcome::Completed => "completed",
            JobOutcome::Failed => "failed",
            JobOutcome::Stopped => "stopped",
        }
    }

    pub fn parse(s: &str) -> Option<JobOutcome> {
        JobOutcome::ALL.into_iter().find(|o| o.as_str() == s)
    }
}

impl std::fmt::Display for JobOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl WorkerEvent {
    /// The run an event belongs to, for events that belong to one.
    pub fn run_id(&self) -> Option<&str> {
        match self {
            WorkerEvent::Hello { .. }
            | WorkerEvent::Heartbeat { .. }
            | WorkerEvent::JobStarted(_)
            | WorkerEvent::JobEnded { .. }
            | WorkerEvent::Summary { .. }
            | WorkerEvent::AgentFilesDeleted { .. }
            | WorkerEvent::McpServerState { .. } => None,
            WorkerEvent::StepStarted(s) => Some(&s.run_id),
            WorkerEvent::StepEnded(s) => Some(&s.run_id),
            WorkerEvent::MessageAppended { run_id, .. }
            | WorkerEvent::RunCompleted { run_id, .. }
            | WorkerEvent::RunFailed { run_id, .. }
            | WorkerEvent::TextDelta { run_id, .. }
            | WorkerEvent::InputTaken { run_id, .. }
            | WorkerEvent::CliSessionStarted { run_id, .. }
            | WorkerEvent::ResumedCallDone { run_id, .. }
            | WorkerEvent::ToolCheck { run_id, .. } => Some(run_id),
        }
    }
}
