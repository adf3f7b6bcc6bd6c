//! What differs between the CLIs Chorus drives, behind one trait: how one is
//! launched (arguments, environment, config files), how its output stream reads as
//! [`CliEvent`]s, how its end is classified, and its version. All pure: the driver
//! (`backends::driver`) does the I/O.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use chorus_proto::domain::{Backend, CliSession, FailureKind, ToolCall, Usage};

/// What a CLI run is started with.
#[derive(Debug, Clone)]
pub struct LaunchSpec<'a> {
    /// The CLI's executable (found by the probe).
    pub program: &'a Path,
    /// Where it works: the agent's workspace, or the task's directory in it.
    pub cwd: &'a Path,
    /// The agent's private home and temp dir (the CLI's own config and sessions live
    /// in the home; config files Chorus writes go to the temp dir, mode 0600).
    pub home: &'a Path,
    pub tmp: &'a Path,
    /// The provider's own model name (`ModelRoute::model`).
    pub model: &'a str,
    /// The run's endpoint in the worker, `http://127.0.0.1:<port>`: the model proxy
    /// below `/llm`, the tools below `/tools`.
    pub endpoint: &'a str,
    /// The run's credential (worthless once the run ends): the CLI's API key for the
    /// proxy, and `chorus-tools`' token.
    pub token: &'a str,
    /// The `chorus-tools` executable (absolute path), run by the CLI as its MCP server.
    pub chorus_tools: &'a Path,
    /// The tools offered, by wire name (`file_read`), exactly the API loop's set.
    pub tools: &'a [String],
    /// The agent's instructions: system prompt, docs, the task's context.
    pub instructions: &'a str,
    /// What this turn says (the new user messages; with no session to go on from,
    /// the thread so far as context first).
    pub prompt: &'a str,
    /// The CLI session to resume or fork, if any.
    pub session: Option<&'a CliSession>,
}

/// How to start the CLI: arguments after the program, environment (on top of the
/// tool processes' allow-listed one), files to write first (mode 0600), and what to
/// write to its stdin (then closed; `None`: stdin is `/dev/null`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Launch {
    pub args: Vec<OsString>,
    pub env: Vec<(String, String)>,
    pub files: Vec<(PathBuf, String)>,
    /// The prompt goes here, not in argv: OpenCode quotes and escapes a prompt given
    /// as an argument (`say "hi"` reaches the model as `"say \"hi\""`), argv is
    /// capped at 128 KiB per argument, and `/proc/<pid>/cmdline` is readable by
    /// every process of the sandbox's user.
    pub stdin: Option<String>,
}

/// One thing a CLI's output stream said, in Chorus's terms. Tool names are Chorus's
/// wire names (the CLI's MCP prefix removed).
#[derive(Debug, Clone, PartialEq)]
pub enum CliEvent {
    /// The CLI's session id (Claude Code's `session_id`, OpenCode's `sessionID`).
    Session { id: String },
    /// The start-up report (Claude Code's `system/init`): the tools the CLI offers
    /// its model as it names them, and whether the `chorus` MCP server connected.
    Init {
        tools: Vec<String>,
        mcp_connected: bool,
    },
    /// A model call began.
    ModelCallStarted,
    /// Streamed text of the model call in progress.
    TextDelta(String),
    /// A whole assistant message: text and tool calls.
    Assistant {
        text: String,
        tool_calls: Vec<ToolCall>,
    },
    /// The result the CLI gave its model for a call.
    ToolResult {
        call_id: String,
        content: String,
        is_error: bool,
    },
    /// A model call ended, with its usage when the CLI says it.
    ModelCallEnded { usage: Option<Usage> },
    /// The turn's end (Claude Code's `result`): its final text.
    Final {
        text: String,
        is_error: bool,
        usage: Option<Usage>,
    },
    /// The CLI reported an error (OpenCode's `error`, an API error).
    Error { message: String },
}

/// Reads a CLI's output, line by line.
pub trait StreamParser: Send {
    /// One line of output; a line that is not the CLI's format is an `Err` with why.
    fn line(&mut self, line: &str) -> Result<Vec<CliEvent>, String>;
    /// The stream ended: whatever was held back.
    fn finish(&mut self) -> Vec<CliEvent>;
}

/// How a CLI run ended, as the driver saw it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExitReport {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    /// The end of its stderr (bounded).
    pub stderr_tail: String,
    /// Whether a `Final` event came, and whether it was an error.
    pub saw_final: bool,
    pub final_is_error: bool,
    /// The last `Error` event or unparseable line.
    pub last_error: Option<String>,
    /// Lines that were not the CLI's format.
    pub malformed_lines: u32,
}

/// A CLI run's failure: its kind, a sentence for people, and what happened, as a
/// closed set the driver can act on (an unknown session is retried fresh).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Classified {
    pub kind: FailureKind,
    pub message: String,
    pub cause: CliFailure,
}

/// What ended a CLI run that failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CliFailure {
    /// The model endpoint refused the credential (401/403).
    AuthRefused,
    /// The model endpoint kept answering 429.
    RateLimited,
    /// The session to resume or fork is not in the CLI's store (for this cwd).
    UnknownSession,
    /// Any other error the model API answered.
    ApiError,
    /// Lines that are not the CLI's output format, and no result.
    MalformedStream,
    /// Exit code 0 without a result.
    NoResult,
    /// Killed by a signal Chorus did not send.
    Signal,
    /// A non-zero exit with nothing else to go by.
    Exited,
}

/// One CLI.
pub trait Flavor: Send + Sync {
    fn backend(&self) -> Backend;
    /// The model API its model calls speak (`ModelRoute::ANTHROPIC_MESSAGES` or
    /// `ModelRoute::OPENAI_CHAT`).
    fn model_api(&self) -> &'static str;
    fn launch(&self, spec: &LaunchSpec<'_>) -> Launch;
    fn parser(&self) -> Box<dyn StreamParser>;
    /// Why a run that ended this way failed; `None`: it succeeded.
    fn classify(&self, exit: &ExitReport) -> Option<Classified>;
    /// The version in the output of `<program> --version`.
    fn parse_version(&self, output: &str) -> Option<(u32, u32, u32)>;
}
