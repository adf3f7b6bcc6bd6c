//! Settings for `chorus serve`, layered: built-in defaults < `chorus.toml` <
//! environment < command-line flags.
//!
//! Flags and `CHORUS_*` variables arrive together through clap (a flag wins over its
//! variable); the ecosystem's own variables (`OPENAI_API_KEY`, …) are read here. The
//! merge itself is a pure function so the precedence is tested without touching the
//! process environment.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_proto::domain::{Backend, RetryPolicy};
use serde::Deserialize;

use crate::permissions::grants::Role;
use crate::providers::{ALL_PROVIDERS, ProviderEndpoint, ProviderKind};
use crate::secrets::Secret;
use std::collections::HashMap;

/// Values given on the command line or in `CHORUS_*` variables (clap merges the two).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ServeArgs {
    /// Directory that holds all state (database, agents, caches).
    /// [default: ./data]
    #[arg(long, env = "CHORUS_DATA_DIR")]
    pub data_dir: Option<PathBuf>,

    /// Address of the HTTP API (and the live event feed). [default: 127.0.0.1:8080]
    #[arg(long, env = "CHORUS_HTTP_ADDR")]
    pub http_addr: Option<SocketAddr>,

    /// Address workers dial (gRPC and the model relay). [default: 127.0.0.1:50051]
    #[arg(long, env = "CHORUS_GRPC_ADDR")]
    pub grpc_addr: Option<SocketAddr>,

    /// How log lines look: text for people, or one JSON object per line (with
    /// trace_id and span_id when traces are exported; workers' lines included).
    #[arg(long, env = "CHORUS_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: crate::telemetry::json_log::LogFormat,

    /// Settings file. [default: ./chorus.toml when it exists]
    #[arg(long, env = "CHORUS_CONFIG")]
    pub config: Option<PathBuf>,

    /// Model for agents created without one, e.g. gpt-4o-mini.
    #[arg(long, env = "CHORUS_DEFAULT_MODEL")]
    pub default_model: Option<String>,

    /// Path of the `chorus-worker` binary. [default: next to `chorus`]
    #[arg(long, env = "CHORUS_WORKER_BIN")]
    pub worker_bin: Option<PathBuf>,

    /// Directory copied for each new agent. [default: the template built into `chorus`]
    #[arg(long, env = "CHORUS_TEMPLATE_DIR")]
    pub template_dir: Option<PathBuf>,

    /// Upper bound on LLM calls in one run of a thread. [default: 50]
    #[arg(long, env = "CHORUS_MAX_ITERATIONS")]
    pub max_iterations: Option<u32>,

    /// Where workers come from: `local` children, or `remote` workers that dial in
    /// with a join credential (`chorus worker token create`, or the shared
    /// CHORUS_JOIN_TOKEN). [default: local]
    #[arg(long, env = "CHORUS_LAUNCHER", value_enum)]
    pub launcher: Option<LauncherKind>,

    /// Bearer token for /api. [default: generated into <data-dir>/api-token]
    #[arg(long = "api-token", env = "CHORUS_API_TOKEN", hide_env_values = true)]
    pub api_token: Option<String>,
}

/// `chorus.toml`. Every field is optional; unknown fields are an error so a typo
/// does not silently fall back to a default.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSettings {
    pub data_dir: Option<PathBuf>,
    pub http_addr: Option<SocketAddr>,
    pub grpc_addr: Option<SocketAddr>,
    pub default_model: Option<String>,
    pub worker_bin: Option<PathBuf>,
    pub template_dir: Option<PathBuf>,
    pub max_iterations: Option<u32>,
    pub api_token: Option<Secret>,
    #[serde(default)]
    pub providers: FileProviders,
    #[serde(default)]
    pub workers: FileWorkers,
    #[serde(default)]
    pub models: FileModels,
    #[serde(default)]
    pub permissions: FilePermissions,
    #[serde(default)]
    pub tools: FileTools,
    #[serde(default)]
    pub sandbox: FileSandbox,
    #[serde(default)]
    pub threads: FileThreads,
    #[serde(default)]
    pub context: FileContext,
    #[serde(default)]
    pub memory: FileMemory,
    #[serde(default)]
    pub discord: FileDiscord,
    #[serde(default)]
    pub metrics: FileMetrics,
    #[serde(default)]
    pub http: FileHttp,
    #[serde(default)]
    pub telemetry: FileTelemetry,
    #[serde(default)]
    pub store: FileStore,
    #[serde(default)]
    pub tasks: FileTasks,
    #[serde(default)]
    pub backends: FileBackends,
    #[serde(default)]
    pub schedules: FileSchedules,
    #[serde(default)]
    pub heartbeat: FileHeartbeat,
    /// Agents' MCP servers: the call deadline and the secrets references name.
    #[serde(default)]
    pub mcp: FileMcp,
    /// Roles by user id (`api` is whoever holds the API token; `default` is everyone
    /// not listed): admin | operator | viewer.
    #[serde(default)]
    pub roles: HashMap<String, Role>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTelemetry {
    /// Record model calls' messages on their spans (known secrets scrubbed); off
    /// by default: prompts and answers often hold what should not leave the host.
    #[serde(default)]
    pub record_content: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileStore {
    /// What a commit waits for: `normal` (the default: an application crash loses
    /// nothing committed; a power loss can lose the last commits) or `full` (each
    /// commit flushed to the disk: a power loss loses nothing committed).
    #[serde(default)]
    pub durability: crate::store::Durability,
    /// A Postgres database (`postgres://user:password@host:port/name`) instead of
    /// SQLite in the data directory; `DATABASE_URL` wins over it.
    pub database_url: Option<Secret>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHttp {
    /// How long a client has to send a whole request head (request line and
    /// headers) on the HTTP API and the worker link before its connection is
    /// closed; 60 by default, at least 1.
    pub header_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMetrics {
    /// Serve `GET /metrics` without the API token (for a scraper on a trusted
    /// network); off by default.
    #[serde(default)]
    pub open: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTools {
    /// Timeout of a bash call that names none.
    pub bash_timeout_secs: Option<u64>,
    /// How long a write waits for a file another thread of the agent is writing.
    pub file_lock_timeout_secs: Option<u64>,
}

/// `[sandbox]`: how agents' tool processes are confined (see `SandboxSettings`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSandbox {
    /// Extra paths tool processes may read.
    #[serde(default)]
    pub read_only: Vec<PathBuf>,
    /// Extra paths tool processes may read and write.
    #[serde(default)]
    pub read_write: Vec<PathBuf>,
    /// Where Landlock cannot be enforced: `refuse` bash, or `warn` and run it
    /// unconfined. Unset: refuse, except for agents under the `open` preset.
    pub when_unavailable: Option<WhenUnavailable>,
    /// CPU seconds per tool process (0: no limit).
    pub cpu_secs: Option<u64>,
    /// Largest file a tool process may write, in bytes (0: no limit).
    pub file_size_bytes: Option<u64>,
    /// Open files per tool process (0: no limit).
    pub open_files: Option<u64>,
    /// Processes one bash call or background job may have at once (0: no limit).
    pub max_processes: Option<u32>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WhenUnavailable {
    Refuse,
    Warn,
}

/// The resolved `[sandbox]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    pub read_only: Vec<PathBuf>,
    pub read_write: Vec<PathBuf>,
    pub when_unavailable: Option<WhenUnavailable>,
    pub limits: chorus_proto::domain::ResourceLimits,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        SandboxSettings::from_file(FileSandbox::default())
    }
}

impl SandboxSettings {
    fn from_file(file: FileSandbox) -> Self {
        SandboxSettings {
            read_only: file.read_only,
            read_write: file.read_write,
            when_unavailable: file.when_unavailable,
            limits: chorus_proto::domain::ResourceLimits {
                cpu_secs: file.cpu_secs.unwrap_or(3600),
                file_size_bytes: file.file_size_bytes.unwrap_or(4 << 30),
                open_files: file.open_files.unwrap_or(4096),
                max_processes: file.max_processes.unwrap_or(512),
            },
        }
    }

    /// Whether an agent with `permissions` (a preset name or a custom profile) runs
    /// bash unconfined where Landlock is unavailable.
    pub fn run_unsandboxed(&self, permissions: &str) -> bool {
        match self.when_unavailable {
            Some(WhenUnavailable::Warn) => true,
            Some(WhenUnavailable::Refuse) => false,
            None => permissions == "open",
        }
    }
}

/// `[context]`: how much of its past an agent sees, and when it is saved and cleared.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileContext {
    /// The rolling window: messages older than this many hours leave the context
    /// (they stay in the database). At least 1.
    pub window_hours: Option<u64>,
    /// Seconds without activity after which an agent's context is saved and cleared,
    /// for agents that set none (0: never).
    pub idle_timeout_secs: Option<u64>,
}

/// `[memory]`: an agent's long-term memory (`memory/MEMORY.md`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMemory {
    /// How large MEMORY.md should stay, in bytes: the agent is told its size and
    /// this limit, and a write past it still succeeds, saying how far over it is.
    pub limit_bytes: Option<usize>,
    /// The fraction of a model's context window past which a thread's older context
    /// is summarised into the daily log and leaves the window (`memory::flush`).
    pub flush_at: Option<f64>,
}

/// The resolved `[context]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextSettings {
    pub window: Duration,
    /// `None`: agents without a setting of their own are never idle-saved.
    pub idle_timeout: Option<Duration>,
}

impl Default for ContextSettings {
    #[allow(
        clippy::expect_used,
        reason = "constants; a unit test reads the defaults"
    )]
    fn default() -> Self {
        ContextSettings::from_file(&FileContext::default()).expect("the defaults are in range")
    }
}

impl ContextSettings {
    fn from_file(file: &FileContext) -> Result<Self, ConfigError> {
        let hours = in_range(
            "[context] window_hours",
            file.window_hours,
            24,
            1..=24 * 365,
        )?;
        Ok(ContextSettings {
            window: Duration::from_secs(hours * 3600),
            idle_timeout: match file.idle_timeout_secs.unwrap_or(1800) {
                0 => None,
                secs => Some(Duration::from_secs(secs)),
            },
        })
    }
}

/// A number setting's value (`default` when unset), or an error naming the setting
/// and the values it takes: an out-of-range value is refused, never quietly changed.
/// `[memory] flush_at` when unset: three quarters of the model's window
/// (`memory::flush`).
pub const DEFAULT_FLUSH_AT: f64 = 0.75;

/// `[memory] flush_at`: a fraction of the window, more than 0 and at most 1.
fn flush_at(value: Option<f64>) -> Result<f64, ConfigError> {
    let value = value.unwrap_or(DEFAULT_FLUSH_AT);
    if value > 0.0 && value <= 1.0 {
        return Ok(value);
    }
    Err(ConfigError::Invalid {
        name: "[memory] flush_at",
        message: format!(
            "{value} is out of range; it is a fraction of the model's context window, more \
             than 0 and at most 1 (such as 0.75)"
        ),
    })
}

fn in_range<T>(
    name: &'static str,
    value: Option<T>,
    default: T,
    range: std::ops::RangeInclusive<T>,
) -> Result<T, ConfigError>
where
    T: PartialOrd + Copy + std::fmt::Display + num_bounds::Max,
{
    let value = value.unwrap_or(default);
    if range.contains(&value) {
        return Ok(value);
    }
    let allowed = if *range.end() == T::MAX {
        format!("at least {}", range.start())
    } else {
        format!("from {} to {}", range.start(), range.end())
    };
    Err(ConfigError::Invalid {
        name,
        message: format!("{value} is out of range; it must be {allowed}"),
    })
}

/// The largest value of the integer types settings use (`in_range` says "at least").
mod num_bounds {
    pub trait Max {
        const MAX: Self;
    }
    impl Max for u64 {
        const MAX: u64 = u64::MAX;
    }
    impl Max for u32 {
        const MAX: u32 = u32::MAX;
    }
    impl Max for usize {
        const MAX: usize = usize::MAX;
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilePermissions {
    /// How long an ASK waits for a person before it counts as a deny.
    pub ask_timeout_secs: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileProviders {
    pub anthropic: Option<FileProvider>,
    pub openai: Option<FileProvider>,
    pub openrouter: Option<FileProvider>,
    pub ollama: Option<FileProvider>,
    pub lmstudio: Option<FileProvider>,
}

impl FileProviders {
    fn take(&mut self, kind: ProviderKind) -> FileProvider {
        match kind {
            ProviderKind::Anthropic => self.anthropic.take(),
            ProviderKind::OpenAi => self.openai.take(),
            ProviderKind::OpenRouter => self.openrouter.take(),
            ProviderKind::Ollama => self.ollama.take(),
            ProviderKind::LmStudio => self.lmstudio.take(),
        }
        .unwrap_or_default()
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileProvider {
    pub base_url: Option<String>,
    pub api_key: Option<Secret>,
    /// Local servers are probed by default; `enabled = false` stops that.
    pub enabled: Option<bool>,
    /// The embedding model memory search uses for agents of this provider (hybrid
    /// ranking); unset: lexical ranking only.
    pub embedding_model: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileModels {
    /// Attempts per model call, the first included.
    pub retry_attempts: Option<u32>,
    /// Give up retrying a model call after this many seconds.
    pub retry_max_secs: Option<u64>,
    /// First backoff delay in milliseconds (it doubles per attempt).
    pub retry_base_ms: Option<u64>,
    /// One attempt's deadline in seconds, from the request to the reply's end.
    pub call_timeout_secs: Option<u64>,
    /// One attempt ends when the provider sends nothing for this many seconds.
    pub silence_timeout_secs: Option<u64>,
    /// Per model (as agents name it, `ollama/llama3.2`, or as its provider does):
    /// `max_tokens` to ask for and its `context_window`, over what discovery found.
    #[serde(default)]
    pub limits: std::collections::BTreeMap<String, chorus_proto::domain::ModelLimits>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileWorkers {
    pub restart_backoff_ms: Option<u64>,
    pub restart_backoff_max_ms: Option<u64>,
    pub stop_grace_ms: Option<u64>,
    /// How often workers send a heartbeat; three missed in a row mark a worker hung.
    pub heartbeat_interval_ms: Option<u64>,
    /// How long a launched worker has to attach before it is killed and restarted.
    pub attach_timeout_ms: Option<u64>,
    /// `local` (workers are our children) or `remote` (dial-in workers).
    pub launcher: Option<LauncherKind>,
    /// TLS on the worker link (remote launcher): our certificate chain and key
    /// (PEM), and the CA whose certificates workers must present (mutual TLS).
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_client_ca: Option<PathBuf>,
}

/// Where workers come from (`[workers] launcher`, `--launcher`, `CHORUS_LAUNCHER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum LauncherKind {
    /// One child process per agent, on this machine (the default).
    #[default]
    Local,
    /// Workers started elsewhere (containers, pods) dial in with a join credential
    /// (a per-worker one, or the shared CHORUS_JOIN_TOKEN) and are given agents.
    Remote,
}

/// The shortest join token accepted: it admits workers that are then trusted with
/// agents' work, so it must not be guessable.
pub const MIN_JOIN_TOKEN_LEN: usize = 16;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileThreads {
    /// How long an ended thread stays in the thread list (its history stays).
    pub retention_secs: Option<u64>,
    /// A run with no step open and none begun or ended for this long is stuck.
    pub stuck_after_secs: Option<u64>,
    /// Resumptions in a row without progress before a thread fails.
    pub max_resumes: Option<u32>,
    /// Whether the agent's model titles a new thread once its first run is over (one
    /// short model call); otherwise the title is the request's first line.
    pub titles: Option<bool>,
}

/// Thread lifecycle settings (`[threads]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadSettings {
    pub retention: Duration,
    pub stuck_after: Duration,
    pub max_resumes: u32,
    pub titles: bool,
}

impl ThreadSettings {
    fn from_file(file: &FileThreads) -> Result<Self, ConfigError> {
        Ok(ThreadSettings {
            retention: Duration::from_secs(file.retention_secs.unwrap_or(600)),
            stuck_after: Duration::from_secs(in_range(
                "[threads] stuck_after_secs",
                file.stuck_after_secs,
                900,
                1..=u64::MAX,
            )?),
            max_resumes: file.max_resumes.unwrap_or(3),
            titles: file.titles.unwrap_or(true),
        })
    }
}

impl Default for ThreadSettings {
    #[allow(
        clippy::expect_used,
        reason = "constants; a unit test reads the defaults"
    )]
    fn default() -> Self {
        ThreadSettings::from_file(&FileThreads::default()).expect("the defaults are in range")
    }
}

/// `[tasks]`: the task board.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileTasks {
    /// The agent that plans new tasks (created from the template at first use).
    pub planner: Option<String>,
    /// A task's time budget in seconds (a new task takes it; shown in the task).
    pub time_limit_secs: Option<u64>,
    /// A task's budget of model calls.
    pub model_call_limit: Option<u64>,
    /// How deep delegations may nest (a task's child's child …).
    pub max_delegation_depth: Option<u32>,
    /// The largest attachment accepted, in bytes (larger: 413).
    pub attachment_max_bytes: Option<u64>,
    /// The Discord channel where tasks post their questions, blocks and ends.
    pub discord_channel: Option<String>,
}

/// The resolved `[tasks]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskSettings {
    pub planner: String,
    pub time_limit_secs: u64,
    pub model_call_limit: u64,
    pub max_delegation_depth: u32,
    pub attachment_max_bytes: u64,
    pub discord_channel: Option<String>,
}

impl TaskSettings {
    fn from_file(file: &FileTasks) -> Result<Self, ConfigError> {
        let planner = file.planner.clone().unwrap_or_else(|| "planner".into());
        crate::agents::name::validate(&planner).map_err(|e| ConfigError::Invalid {
            name: "[tasks] planner",
            message: e.to_string(),
        })?;
        Ok(TaskSettings {
            planner,
            time_limit_secs: in_range(
                "[tasks] time_limit_secs",
                file.time_limit_secs,
                3600,
                1..=u64::MAX,
            )?,
            model_call_limit: in_range(
                "[tasks] model_call_limit",
                file.model_call_limit,
                200,
                1..=u64::MAX,
            )?,
            max_delegation_depth: in_range(
                "[tasks] max_delegation_depth",
                file.max_delegation_depth,
                5,
                1..=u32::MAX,
            )?,
            attachment_max_bytes: in_range(
                "[tasks] attachment_max_bytes",
                file.attachment_max_bytes,
                10 << 20,
                1..=u64::MAX,
            )?,
            discord_channel: match file.discord_channel.as_deref().map(str::trim) {
                None | Some("") => None,
                Some(id) if id.parse::<u64>().is_ok() => Some(id.to_string()),
                Some(other) => {
                    return Err(ConfigError::Invalid {
                        name: "[tasks] discord_channel",
                        message: format!(
                            "'{other}' is not a Discord channel id (digits: Discord's \"Copy Channel ID\")"
                        ),
                    });
                }
            },
        })
    }
}

impl Default for TaskSettings {
    #[allow(
        clippy::expect_used,
        reason = "constants; a unit test reads the defaults"
    )]
    fn default() -> Self {
        TaskSettings::from_file(&FileTasks::default()).expect("the defaults are in range")
    }
}

/// `[schedules]`: agents' scheduled prompts (`schedules`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileSchedules {
    /// Failed runs in a row after which a schedule is paused (with a notification).
    pub pause_after_failures: Option<u32>,
}

/// `[heartbeat]`: agents' heartbeats (`heartbeat`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileHeartbeat {
    /// Tokens an agent's heartbeats may use per UTC day; past it they make no model call.
    pub daily_token_cap: Option<u64>,
    /// The shortest `heartbeat_minutes` an agent may set (default 5).
    pub min_minutes: Option<u32>,
}

/// The resolved `[heartbeat]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeartbeatSettings {
    pub daily_token_cap: u64,
    pub min_minutes: u32,
}

impl HeartbeatSettings {
    fn from_file(file: &FileHeartbeat) -> Result<Self, ConfigError> {
        let max = crate::heartbeat::decide::MAX_MINUTES;
        Ok(HeartbeatSettings {
            daily_token_cap: in_range(
                "[heartbeat] daily_token_cap",
                file.daily_token_cap,
                DEFAULT_HEARTBEAT_CAP,
                1..=u64::MAX,
            )?,
            min_minutes: in_range(
                "[heartbeat] min_minutes",
                file.min_minutes,
                crate::heartbeat::decide::MIN_MINUTES,
                1..=max,
            )?,
        })
    }
}

/// Tokens per agent per UTC day for heartbeats unless `[heartbeat] daily_token_cap` says.
pub const DEFAULT_HEARTBEAT_CAP: u64 = 50_000;

impl Default for HeartbeatSettings {
    fn default() -> Self {
        HeartbeatSettings {
            daily_token_cap: DEFAULT_HEARTBEAT_CAP,
            min_minutes: crate::heartbeat::decide::MIN_MINUTES,
        }
    }
}

/// The resolved `[schedules]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScheduleSettings {
    pub pause_after_failures: u32,
}

impl ScheduleSettings {
    fn from_file(file: &FileSchedules) -> Result<Self, ConfigError> {
        Ok(ScheduleSettings {
            pause_after_failures: in_range(
                "[schedules] pause_after_failures",
                file.pause_after_failures,
                3,
                1..=u32::MAX,
            )?,
        })
    }
}

impl Default for ScheduleSettings {
    fn default() -> Self {
        ScheduleSettings {
            pause_after_failures: 3,
        }
    }
}

/// `[backends]`: where the CLIs an agent's backend may name are (default: found on
/// the `PATH` local workers get).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileBackends {
    pub claude_code: Option<PathBuf>,
    pub opencode: Option<PathBuf>,
    /// How long a CLI run's call that waits for a person is held before its turn
    /// ends (the answer then resumes the session): below the CLI's tool-call limit.
    pub approval_hold_secs: Option<u64>,
}

/// `[mcp]`: `call_timeout_secs` (one MCP tool call's deadline, default 300) and
/// `[mcp.secrets]`, the values `{"secret": "NAME"}` in an agent's `mcp_servers` name.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileMcp {
    pub call_timeout_secs: Option<u64>,
    #[serde(default)]
    pub secrets: std::collections::BTreeMap<String, Secret>,
}

/// The CLIs' paths `[backends]` names, each checked to be a file at start; passed to
/// local workers as `--claude-code` / `--opencode`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BackendPaths {
    pub claude_code: Option<PathBuf>,
    pub opencode: Option<PathBuf>,
}

impl BackendPaths {
    fn from_file(file: FileBackends) -> Result<Self, ConfigError> {
        let check = |name: &'static str, backend: Backend, path: Option<PathBuf>| match path {
            Some(path) if !path.is_file() => Err(ConfigError::Invalid {
                name,
                message: format!(
                    "{} is not a file{}; give the path of the installed CLI (`command -v {}`) or \
                     leave it out to use the one on PATH",
                    path.display(),
                    match std::fs::metadata(&path) {
                        Err(e) => format!(" ({e})"),
                        Ok(_) => String::new(),
                    },
                    backend.cli().map_or("", |cli| cli.program)
                ),
            }),
            other => Ok(other),
        };
        Ok(BackendPaths {
            claude_code: check(
                "[backends] claude_code",
                Backend::ClaudeCode,
                file.claude_code,
            )?,
            opencode: check("[backends] opencode", Backend::OpenCode, file.opencode)?,
        })
    }

    /// The worker flags that name them (nothing for a CLI found on `PATH`).
    pub fn worker_args(&self) -> Vec<std::ffi::OsString> {
        let mut args = Vec::new();
        for (flag, path) in [
            ("--claude-code", &self.claude_code),
            ("--opencode", &self.opencode),
        ] {
            if let Some(path) = path {
                args.push(flag.into());
                args.push(path.clone().into_os_string());
            }
        }
        args
    }
}

/// `[backends] approval_hold_secs` (default 60): at least a second, and below the
/// CLIs' tool-call limit, which would cut the call first.
fn approval_hold(secs: Option<u64>) -> Result<Duration, ConfigError> {
    let limit = chorus_proto::backend::MCP_CALL_LIMIT_MS / 1000;
    match secs.unwrap_or(60) {
        secs if secs >= 1 && secs < limit => Ok(Duration::from_secs(secs)),
        secs => Err(ConfigError::Invalid {
            name: "[backends] approval_hold_secs",
            message: format!(
                "{secs} is out of range: give from 1 to {} seconds (a CLI cuts a tool call \
                 after {limit})",
                limit - 1
            ),
        }),
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileDiscord {
    /// Another base URL for Discord's REST API and gateway lookup (`http://host:port`,
    /// no path): a test fake or a self-hosted gateway. Unset: Discord itself.
    pub api_base: Option<String>,
    /// The guild whose slash commands are registered there (else globally).
    pub guild_id: Option<u64>,
    /// Discord role ids mapped to Chorus roles (admin, operator, viewer).
    #[serde(default)]
    pub roles: HashMap<String, Role>,
}

/// The Discord front end's settings; present only when `DISCORD_TOKEN` is set.
#[derive(Debug, Clone)]
pub struct DiscordSettings {
    pub token: Secret,
    pub guild_id: Option<u64>,
    pub api_base: Option<String>,
    pub roles: HashMap<String, Role>,
}

impl DiscordSettings {
    fn resolve(
        file: FileDiscord,
        env: &impl Fn(&str) -> Option<String>,
    ) -> Result<Option<DiscordSettings>, ConfigError> {
        let Some(token) = env("DISCORD_TOKEN").filter(|t| !t.trim().is_empty()) else {
            return Ok(None);
        };
        let guild_id = match env("DISCORD_GUILD_ID").filter(|g| !g.trim().is_empty()) {
            Some(id) => Some(id.trim().parse().map_err(|_| ConfigError::Invalid {
                name: "DISCORD_GUILD_ID",
                message: format!("'{id}' is not a Discord id (a number)"),
            })?),
            None => file.guild_id,
        };
        let api_base = env("CHORUS_DISCORD_API_BASE")
            .filter(|b| !b.trim().is_empty())
            .or(file.api_base)
            .map(|b| b.trim().trim_end_matches('/').to_string());
        Ok(Some(DiscordSettings {
            token: Secret::new(token.trim()),
            guild_id,
            api_base,
            roles: file.roles,
        }))
    }
}

/// The resolved settings `chorus serve` runs with.
#[derive(Debug, Clone)]
pub struct Settings {
    pub data_dir: PathBuf,
    pub http_addr: SocketAddr,
    pub grpc_addr: SocketAddr,
    pub default_model: Option<String>,
    pub worker_bin: Option<PathBuf>,
    pub template_dir: Option<PathBuf>,
    pub max_iterations: u32,
    pub api_token: Option<Secret>,
    /// Configured providers, in resolution order.
    pub providers: Vec<ProviderEndpoint>,
    pub workers: WorkerSettings,
    pub retry: RetryPolicy,
    /// `[models.limits."<model>"]`: what is known of a model's limits.
    pub model_limits: std::collections::BTreeMap<String, chorus_proto::domain::ModelLimits>,
    pub ask_timeout: Duration,
    /// `[backends] approval_hold_secs`: how long a CLI run's call waits for a
    /// person inside the call before it is deferred (`gate`).
    pub cli_approval_hold: Duration,
    /// Roles by user id; see [`FileSettings::roles`].
    pub roles: HashMap<String, Role>,
    pub default_role: Role,
    pub sandbox: SandboxSettings,
    pub threads: ThreadSettings,
    pub context: ContextSettings,
    /// `[memory] limit_bytes`.
    pub memory_limit_bytes: usize,
    /// `[memory] flush_at`, in (0, 1].
    pub memory_flush_at: f64,
    /// The task board (`[tasks]`).
    pub tasks: TaskSettings,
    /// `[backends]`: the CLIs' paths, when not found on `PATH`.
    pub backends: BackendPaths,
    /// `[schedules]`.
    pub schedules: ScheduleSettings,
    /// `[heartbeat]`.
    pub heartbeat: HeartbeatSettings,
    /// `None`: no Discord front end (no `DISCORD_TOKEN`).
    pub discord: Option<DiscordSettings>,
    /// `[mcp]`, with the `CHORUS_MCP_SECRET_*` variables added at start (`main`).
    pub mcp: crate::mcp::McpSettings,
    /// Where traces are exported (`OTEL_EXPORTER_OTLP_*`); `None`: nowhere.
    pub trace_export: Option<crate::telemetry::config::ExportSettings>,
    /// `GET /metrics` needs no token (`[metrics] open`).
    pub metrics_open: bool,
    /// How long a client has to send a request head (`[http] header_timeout_secs`).
    pub header_deadline: Duration,
    /// What a database commit waits for (`[store] durability`).
    pub durability: crate::store::Durability,
    /// Where the store lives (`DATABASE_URL`, `[store] database_url`).
    pub database: Database,
    /// `PGPASSWORD`: the Postgres driver uses it when the URL has no password, so it
    /// is a secret whether or not the store is on Postgres.
    pub pg_password: Option<Secret>,
    /// Model calls' messages go on their spans (`[telemetry] record_content`).
    pub trace_content: bool,
    /// How log lines look; in JSON, workers' lines are re-emitted as ours.
    pub log_format: crate::telemetry::json_log::LogFormat,
}

/// Where the store lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Database {
    /// `chorus.db` in the data directory (the default).
    Sqlite,
    /// A Postgres server. The URL may hold a password: it is a secret.
    Postgres(Secret),
}

/// What TLS the connection to Postgres has, by the URL's `sslmode` (libpq's
/// meanings; `prefer` when unset), for people.
fn postgres_tls(url: &reqwest::Url) -> &'static str {
    let mode = url
        .query_pairs()
        .find(|(key, _)| key == "sslmode")
        .map(|(_, value)| value.to_ascii_lowercase());
    match mode.as_deref() {
        Some("disable") => "no TLS",
        None | Some("allow") | Some("prefer") => {
            "TLS if the server offers it, unverified (sslmode=verify-full to require a verified server)"
        }
        Some("require") => "TLS, server not verified",
        Some("verify-ca") => "TLS, verifying the server's CA",
        Some("verify-full") => "TLS, verifying the server",
        Some(_) => "sslmode not understood",
    }
}

impl Database {
    /// `DATABASE_URL` (or `[store] database_url`): Postgres for `postgres://` or
    /// `postgresql://`; anything else is refused without echoing the URL (it may hold
    /// a password).
    pub fn from_url(url: Option<Secret>) -> Result<Database, ConfigError> {
        let Some(url) = url else {
            return Ok(Database::Sqlite);
        };
        let invalid = |message: String| ConfigError::Invalid {
            name: "DATABASE_URL",
            message,
        };
        let parsed = reqwest::Url::parse(url.expose().trim()).map_err(|e| {
            invalid(format!(
                "not a URL ({e}); expected postgres://user:password@host:port/database"
            ))
        })?;
        match parsed.scheme() {
            "postgres" | "postgresql" if parsed.host_str().is_some_and(|h| !h.is_empty()) => {
                Ok(Database::Postgres(Secret::new(url.expose().trim())))
            }
            "postgres" | "postgresql" => Err(invalid(
                "names no host; expected postgres://user:password@host:port/database".into(),
            )),
            other => Err(invalid(format!(
                "'{other}:' is not supported: give a postgres:// URL, or leave it unset for \
                 SQLite in the data directory"
            ))),
        }
    }

    /// Where the store is, for people: never the password.
    pub fn describe(&self, data_dir: &Path) -> String {
        match self {
            Database::Sqlite => format!("SQLite, {}", data_dir.join("chorus.db").display()),
            Database::Postgres(url) => match reqwest::Url::parse(url.expose()) {
                Ok(u) => format!(
                    "Postgres, {}{}{}{}, {}",
                    match u.username() {
                        "" => String::new(),
                        user => format!("{user}@"),
                    },
                    u.host_str().unwrap_or(""),
                    u.port().map(|p| format!(":{p}")).unwrap_or_default(),
                    u.path(),
                    postgres_tls(&u),
                ),
                Err(_) => "Postgres".to_string(),
            },
        }
    }

    /// The values a log line, a tool result or a model answer must never show: the
    /// URL and its password (as written and percent-decoded).
    pub fn secrets(&self) -> Vec<String> {
        let Database::Postgres(url) = self else {
            return Vec::new();
        };
        let mut secrets = vec![url.expose().to_string()];
        if let Ok(u) = reqwest::Url::parse(url.expose())
            && let Some(password) = u.password()
        {
            secrets.push(password.to_string());
            // A URL's userinfo is percent-encoded.
            secrets.push(crate::telemetry::config::percent_decode(password));
        }
        secrets
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerSettings {
    /// Passed to local workers: default bash timeout and file-lock wait.
    pub bash_timeout: Duration,
    pub file_lock_timeout: Duration,
    /// First delay before restarting a worker that died; doubles up to the max.
    pub restart_backoff: Duration,
    pub restart_backoff_max: Duration,
    /// Time between SIGTERM and SIGKILL when a worker is stopped.
    pub stop_grace: Duration,
    /// How often workers send a heartbeat (at least 500 ms).
    pub heartbeat_interval: Duration,
    /// How long a launched worker has to attach (at least 100 ms); one that does not
    /// is killed and restarted. With remote workers, also how long an agent waits
    /// for a free one.
    pub attach_timeout: Duration,
    pub launcher: LauncherKind,
    /// The shared token any dial-in worker may present (`CHORUS_JOIN_TOKEN`);
    /// optional: per-worker credentials (`chorus worker token create`) need none.
    pub join_token: Option<Secret>,
    /// `Some`: the worker link speaks only TLS.
    pub tls: Option<crate::link_tls::LinkTlsFiles>,
}

impl WorkerSettings {
    /// A worker silent this long is hung: three heartbeats missed.
    pub fn silence_limit(&self) -> Duration {
        self.heartbeat_interval * 3
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read settings file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("settings file {path} is not valid: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{name} is set but empty; unset it or give it a value")]
    EmptyVariable { name: &'static str },
    #[error("{name}: {message}")]
    Invalid { name: &'static str, message: String },
}

/// Loads the settings file named by `--config`, else `./chorus.toml` if present.
pub fn load_file(explicit: Option<&Path>) -> Result<(FileSettings, Option<PathBuf>), ConfigError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => {
            let default = PathBuf::from("chorus.toml");
            if !default.exists() {
                return Ok((FileSettings::default(), None));
            }
            default
        }
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let file = toml::from_str(&text).map_err(|e| ConfigError::Parse {
        path: path.clone(),
        message: e.to_string(),
    })?;
    Ok((file, Some(path)))
}

impl Settings {
    /// Every secret these settings hold, by value: provider keys, the API token when
    /// given, the join token, the database's URL and password, `PGPASSWORD`, the OTLP
    /// headers (a collector's key) and the Discord token. The one list
    /// [`KnownSecrets`](crate::secrets::KnownSecrets) is made from (with a generated
    /// API token), so whatever holds one of them is scrubbed and blanked alike.
    pub fn secrets(&self) -> Vec<String> {
        let exposed = |s: &Secret| s.expose().to_string();
        self.providers
            .iter()
            .filter_map(|p| p.api_key.as_ref().map(exposed))
            .chain(self.api_token.as_ref().map(exposed))
            .chain(self.workers.join_token.as_ref().map(exposed))
            .chain(self.database.secrets())
            .chain(self.pg_password.as_ref().map(exposed))
            .chain(
                self.trace_export
                    .iter()
                    .flat_map(|t| t.headers.iter().map(|(_, v)| v.clone())),
            )
            .chain(self.discord.as_ref().map(|d| exposed(&d.token)))
            .chain(self.mcp.values())
            .collect()
    }

    /// Merges the layers. `env` looks up the ecosystem's own variables.
    pub fn resolve(
        args: ServeArgs,
        file: FileSettings,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Settings, ConfigError> {
        let non_empty = |name: &'static str| -> Result<Option<String>, ConfigError> {
            match env(name) {
                Some(v) if v.trim().is_empty() => Err(ConfigError::EmptyVariable { name }),
                other => Ok(other),
            }
        };
        let mut file_providers = file.providers;
        let mut providers = Vec::new();
        for kind in ALL_PROVIDERS {
            let from_file = file_providers.take(kind);
            let key = match kind.key_env() {
                Some(var) => non_empty(var)?.map(Secret::new).or(from_file.api_key),
                None => from_file.api_key,
            };
            let base = non_empty(kind.base_env())?.or(from_file.base_url);
            // Hosted providers are on when given a key (or an explicit endpoint, for
            // keyless compatible servers); local ones unless switched off.
            let enabled = match kind {
                ProviderKind::OpenAi => key.is_some() || base.is_some(),
                ProviderKind::Anthropic | ProviderKind::OpenRouter => key.is_some(),
                ProviderKind::Ollama | ProviderKind::LmStudio => from_file.enabled.unwrap_or(true),
            };
            let embedding_model = match from_file.embedding_model {
                Some(m) if m.trim().is_empty() => {
                    return Err(ConfigError::Invalid {
                        name: "[providers.*] embedding_model",
                        message: format!(
                            "empty for {}: name the provider's embedding model, or leave the \
                             line out for lexical search only",
                            kind.name()
                        ),
                    });
                }
                Some(_) if !kind.offers_embeddings() => {
                    return Err(ConfigError::Invalid {
                        name: "[providers.*] embedding_model",
                        message: format!(
                            "{} offers no embeddings endpoint; set embedding_model on an \
                             OpenAI-compatible provider or Ollama, or leave it out (memory \
                             search is then lexical for agents of this provider)",
                            kind.name()
                        ),
                    });
                }
                other => other.map(|m| m.trim().to_string()),
            };
            if enabled {
                let configured = !kind.is_local()
                    || base.is_some()
                    || key.is_some()
                    || from_file.enabled == Some(true);
                providers.push(ProviderEndpoint {
                    kind,
                    configured,
                    base_url: base
                        .unwrap_or_else(|| kind.default_base().to_string())
                        .trim_end_matches('/')
                        .to_string(),
                    api_key: key,
                    embedding_model,
                });
            }
        }
        let workers = WorkerSettings {
            bash_timeout: Duration::from_secs(in_range(
                "[tools] bash_timeout_secs",
                file.tools.bash_timeout_secs,
                120,
                1..=u64::MAX,
            )?),
            file_lock_timeout: Duration::from_secs(file.tools.file_lock_timeout_secs.unwrap_or(30)),
            restart_backoff: Duration::from_millis(file.workers.restart_backoff_ms.unwrap_or(250)),
            restart_backoff_max: Duration::from_millis(
                file.workers.restart_backoff_max_ms.unwrap_or(30_000),
            ),
            stop_grace: Duration::from_millis(file.workers.stop_grace_ms.unwrap_or(5_000)),
            heartbeat_interval: Duration::from_millis(in_range(
                "[workers] heartbeat_interval_ms",
                file.workers.heartbeat_interval_ms,
                5_000,
                500..=u64::MAX,
            )?),
            attach_timeout: Duration::from_millis(in_range(
                "[workers] attach_timeout_ms",
                file.workers.attach_timeout_ms,
                30_000,
                100..=u64::MAX,
            )?),
            launcher: args.launcher.or(file.workers.launcher).unwrap_or_default(),
            join_token: non_empty("CHORUS_JOIN_TOKEN")?.map(Secret::new),
            tls: {
                let path = |var: &'static str, from_file: Option<PathBuf>| {
                    non_empty(var).map(|v| v.map(PathBuf::from).or(from_file))
                };
                let cert = path("CHORUS_TLS_CERT", file.workers.tls_cert)?;
                let key = path("CHORUS_TLS_KEY", file.workers.tls_key)?;
                let client_ca = path("CHORUS_TLS_CLIENT_CA", file.workers.tls_client_ca)?;
                match (cert, key) {
                    (Some(cert), Some(key)) => Some(crate::link_tls::LinkTlsFiles {
                        cert,
                        key,
                        client_ca,
                    }),
                    (None, None) if client_ca.is_none() => None,
                    _ => {
                        return Err(ConfigError::Invalid {
                            name: "CHORUS_TLS_CERT",
                            message: "TLS on the worker link needs both a certificate \
                                      (CHORUS_TLS_CERT, [workers] tls_cert) and its key \
                                      (CHORUS_TLS_KEY, [workers] tls_key)"
                                .into(),
                        });
                    }
                }
            },
        };
        if workers.tls.is_some() && workers.launcher == LauncherKind::Local {
            return Err(ConfigError::Invalid {
                name: "CHORUS_TLS_CERT",
                message: "TLS on the worker link is for dial-in workers (--launcher remote); \
                          local workers dial over loopback"
                    .into(),
            });
        }
        if let Some(token) = &workers.join_token
            && token.expose().trim().len() < MIN_JOIN_TOKEN_LEN
        {
            return Err(ConfigError::Invalid {
                name: "CHORUS_JOIN_TOKEN",
                message: format!(
                    "is shorter than {MIN_JOIN_TOKEN_LEN} characters; use a random one (e.g. openssl rand -hex 32)"
                ),
            });
        }
        Ok(Settings {
            data_dir: args
                .data_dir
                .or(file.data_dir)
                .unwrap_or_else(|| PathBuf::from("./data")),
            http_addr: args
                .http_addr
                .or(file.http_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 8080))),
            grpc_addr: args
                .grpc_addr
                .or(file.grpc_addr)
                .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 50051))),
            default_model: args.default_model.or(file.default_model),
            worker_bin: args.worker_bin.or(file.worker_bin),
            template_dir: args.template_dir.or(file.template_dir),
            max_iterations: args.max_iterations.or(file.max_iterations).unwrap_or(50),
            api_token: args.api_token.map(Secret::new).or(file.api_token),
            providers,
            workers,
            ask_timeout: Duration::from_secs(file.permissions.ask_timeout_secs.unwrap_or(600)),
            threads: ThreadSettings::from_file(&file.threads)?,
            sandbox: SandboxSettings::from_file(file.sandbox),
            context: ContextSettings::from_file(&file.context)?,
            memory_limit_bytes: in_range(
                "[memory] limit_bytes",
                file.memory.limit_bytes,
                crate::memory::sections::DEFAULT_LIMIT_BYTES,
                1024..=1024 * 1024,
            )?,
            memory_flush_at: flush_at(file.memory.flush_at)?,
            tasks: TaskSettings::from_file(&file.tasks)?,
            cli_approval_hold: approval_hold(file.backends.approval_hold_secs)?,
            backends: BackendPaths::from_file(file.backends)?,
            schedules: ScheduleSettings::from_file(&file.schedules)?,
            heartbeat: HeartbeatSettings::from_file(&file.heartbeat)?,
            mcp: crate::mcp::McpSettings {
                call_timeout: Duration::from_secs(in_range(
                    "[mcp] call_timeout_secs",
                    file.mcp.call_timeout_secs,
                    crate::mcp::DEFAULT_CALL_TIMEOUT.as_secs(),
                    1..=86_400,
                )?),
                secrets: file.mcp.secrets,
            },
            discord: DiscordSettings::resolve(file.discord, &env)?,
            metrics_open: file.metrics.open,
            header_deadline: Duration::from_secs(in_range(
                "[http] header_timeout_secs",
                file.http.header_timeout_secs,
                crate::listener::HEADER_DEADLINE.as_secs(),
                1..=u64::MAX,
            )?),
            durability: file.store.durability,
            database: Database::from_url(
                non_empty("DATABASE_URL")?
                    .map(Secret::new)
                    .or(file.store.database_url),
            )?,
            pg_password: env("PGPASSWORD").filter(|p| !p.is_empty()).map(Secret::new),
            trace_content: file.telemetry.record_content,
            log_format: args.log_format,
            trace_export: crate::telemetry::config::from_env(&env).map_err(|message| {
                ConfigError::Invalid {
                    name: "OTEL_EXPORTER_OTLP_*",
                    message,
                }
            })?,
            default_role: file.roles.get("default").copied().unwrap_or(Role::Operator),
            roles: {
                let mut roles = file.roles.clone();
                roles.remove("default");
                // Whoever holds the API token runs this control plane.
                roles.entry("api".to_string()).or_insert(Role::Admin);
                roles
            },
            model_limits: file.models.limits.clone(),
            retry: RetryPolicy {
                max_attempts: in_range(
                    "[models] retry_attempts",
                    file.models.retry_attempts,
                    5,
                    1..=u32::MAX,
                )?,
                max_total_ms: file
                    .models
                    .retry_max_secs
                    .unwrap_or(120)
                    .saturating_mul(1000),
                base_delay_ms: file.models.retry_base_ms.unwrap_or(1000),
                call_timeout_ms: in_range(
                    "[models] call_timeout_secs",
                    file.models.call_timeout_secs,
                    600,
                    1..=u64::MAX,
                )?
                .saturating_mul(1000),
                silence_timeout_ms: in_range(
                    "[models] silence_timeout_secs",
                    file.models.silence_timeout_secs,
                    120,
                    1..=u64::MAX,
                )?
                .saturating_mul(1000),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_setting_out_of_range_is_refused_naming_it_and_the_range() {
        let file = |text: &str| toml::from_str::<FileSettings>(text).unwrap();
        let refused = |text: &str| {
            Settings::resolve(ServeArgs::default(), file(text), |_| None)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_else(|| panic!("{text} was accepted"))
        };
        assert_eq!(
            refused("[context]\nwindow_hours = 0"),
            "[context] window_hours: 0 is out of range; it must be from 1 to 8760"
        );
        assert_eq!(
            refused("[context]\nwindow_hours = 9000"),
            "[context] window_hours: 9000 is out of range; it must be from 1 to 8760"
        );
        for bad in ["0", "1.5", "-0.5", "nan"] {
            let said = refused(&format!("[memory]\nflush_at = {bad}"));
            assert!(
                said.starts_with("[memory] flush_at: ")
                    && said.contains("a fraction of the model's context window"),
                "{said}"
            );
        }
        let accepted = |text: &str| {
            Settings::resolve(ServeArgs::default(), file(text), |_| None)
                .unwrap()
                .memory_flush_at
        };
        assert_eq!(accepted(""), 0.75);
        assert_eq!(accepted("[memory]\nflush_at = 1.0"), 1.0);
        assert_eq!(
            refused("[workers]\nheartbeat_interval_ms = 100"),
            "[workers] heartbeat_interval_ms: 100 is out of range; it must be at least 500"
        );
        for (text, said) in [
            (
                "[threads]\nstuck_after_secs = 0",
                "[threads] stuck_after_secs: 0 ",
            ),
            (
                "[tools]\nbash_timeout_secs = 0",
                "[tools] bash_timeout_secs: 0 ",
            ),
            (
                "[workers]\nattach_timeout_ms = 5",
                "[workers] attach_timeout_ms: 5 ",
            ),
            (
                "[http]\nheader_timeout_secs = 0",
                "[http] header_timeout_secs: 0 ",
            ),
            (
                "[models]\nretry_attempts = 0",
                "[models] retry_attempts: 0 ",
            ),
            (
                "[models]\ncall_timeout_secs = 0",
                "[models] call_timeout_secs: 0 ",
            ),
            (
                "[models]\nsilence_timeout_secs = 0",
                "[models] silence_timeout_secs: 0 ",
            ),
            (
                "[mcp]\ncall_timeout_secs = 0",
                "[mcp] call_timeout_secs: 0 ",
            ),
        ] {
            let refusal = refused(text);
            assert!(refusal.starts_with(said), "{refusal}");
        }
        // In range (the lowest allowed) is taken as it is.
        let ok = Settings::resolve(
            ServeArgs::default(),
            file("[context]\nwindow_hours = 1\n[workers]\nheartbeat_interval_ms = 500"),
            |_| None,
        )
        .unwrap();
        assert_eq!(ok.context.window, Duration::from_secs(3600));
        assert_eq!(ok.workers.heartbeat_interval, Duration::from_millis(500));
    }

    #[test]
    fn mcp_reads_its_deadline_and_secrets_with_a_default_well_above_a_minute() {
        let file = |text: &str| toml::from_str::<FileSettings>(text).unwrap();
        let none = Settings::resolve(ServeArgs::default(), file(""), |_| None).unwrap();
        assert_eq!(none.mcp.call_timeout, Duration::from_secs(300));
        let set = Settings::resolve(
            ServeArgs::default(),
            file("[mcp]\ncall_timeout_secs = 900\n[mcp.secrets]\nNOTES = \"n-0123456789\""),
            |_| None,
        )
        .unwrap();
        assert_eq!(set.mcp.call_timeout, Duration::from_secs(900));
        assert_eq!(set.mcp.secrets["NOTES"].expose(), "n-0123456789");
        assert!(!format!("{:?}", set.mcp).contains("n-0123456789"));
    }

    #[test]
    fn discord_is_on_only_with_a_token_and_reads_its_table() {
        let file = |text: &str| toml::from_str::<FileSettings>(text).unwrap();
        let none = Settings::resolve(ServeArgs::default(), file(""), |_| None).unwrap();
        assert!(none.discord.is_none());
        let table = r#"
            [discord]
            api_base = "http://127.0.0.1:9/"
            guild_id = 7
            [discord.roles]
            "111" = "admin"
            "222" = "viewer"
        "#;
        let env = |name: &str| match name {
            "DISCORD_TOKEN" => Some("bot-token".to_string()),
            _ => None,
        };
        let on = Settings::resolve(ServeArgs::default(), file(table), env).unwrap();
        let discord = on.discord.unwrap();
        assert_eq!(discord.token.expose(), "bot-token");
        assert_eq!(discord.guild_id, Some(7));
        assert_eq!(discord.api_base.as_deref(), Some("http://127.0.0.1:9"));
        assert_eq!(discord.roles.get("111"), Some(&Role::Admin));
        // The environment wins; a bad id is refused with its name.
        let env = |name: &str| match name {
            "DISCORD_TOKEN" => Some("t".to_string()),
            "DISCORD_GUILD_ID" => Some("42".to_string()),
            "CHORUS_DISCORD_API_BASE" => Some("http://127.0.0.1:8".to_string()),
            _ => None,
        };
        let on = Settings::resolve(ServeArgs::default(), file(table), env).unwrap();
        let discord = on.discord.unwrap();
        assert_eq!(
            (discord.guild_id, discord.api_base.as_deref()),
            (Some(42), Some("http://127.0.0.1:8"))
        );
        let env = |name: &str| match name {
            "DISCORD_TOKEN" => Some("t".to_string()),
            "DISCORD_GUILD_ID" => Some("my-guild".to_string()),
            _ => None,
        };
        let refused = Settings::resolve(ServeArgs::default(), file(""), env).unwrap_err();
        assert!(
            refused.to_string().contains("DISCORD_GUILD_ID"),
            "{refused}"
        );
        assert!(
            toml::from_str::<FileSettings>("[discord]\nguild = 1\n").is_err(),
            "unknown keys"
        );
    }

    #[test]
    fn the_example_settings_file_is_valid() {
        let file: FileSettings =
            toml::from_str(include_str!("../../chorus.example.toml")).expect("chorus.example.toml");
        let s = Settings::resolve(ServeArgs::default(), file, |_| None).unwrap();
        assert_eq!(s.default_model.as_deref(), Some("claude-sonnet-4-5"));
        assert_eq!(s.threads.stuck_after, Duration::from_secs(900));
        assert_eq!(s.context.idle_timeout, Some(Duration::from_secs(1800)));
        // The example says the defaults.
        assert_eq!(s.tasks, TaskSettings::default());
        assert_eq!(s.backends, BackendPaths::default());
        assert_eq!(s.schedules, ScheduleSettings::default());
    }

    #[test]
    fn heartbeats_are_capped_per_day_and_their_period_bounded() {
        let resolve = |text: &str| {
            let file: FileSettings = toml::from_str(text).unwrap();
            Settings::resolve(ServeArgs::default(), file, |_| None)
        };
        let s = resolve("").unwrap().heartbeat;
        assert_eq!(s, HeartbeatSettings::default());
        assert_eq!((s.daily_token_cap, s.min_minutes), (50_000, 5));
        let set = resolve("[heartbeat]\ndaily_token_cap = 30\nmin_minutes = 1\n").unwrap();
        assert_eq!(
            (set.heartbeat.daily_token_cap, set.heartbeat.min_minutes),
            (30, 1)
        );
        for bad in ["daily_token_cap = 0", "min_minutes = 0"] {
            let e = resolve(&format!("[heartbeat]\n{bad}\n"))
                .unwrap_err()
                .to_string();
            assert!(e.contains("[heartbeat]"), "{e}");
        }
    }

    #[test]
    fn schedules_pause_after_three_failures_unless_set_and_never_after_none() {
        let resolve = |text: &str| {
            let file: FileSettings = toml::from_str(text).unwrap();
            Settings::resolve(ServeArgs::default(), file, |_| None)
        };
        assert_eq!(resolve("").unwrap().schedules.pause_after_failures, 3);
        let set = resolve("[schedules]\npause_after_failures = 1\n").unwrap();
        assert_eq!(set.schedules.pause_after_failures, 1);
        let e = resolve("[schedules]\npause_after_failures = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("[schedules] pause_after_failures"), "{e}");
    }

    #[test]
    fn the_approval_hold_stays_below_the_clis_tool_call_limit() {
        let resolve = |text: &str| {
            let file: FileSettings = toml::from_str(text).unwrap();
            Settings::resolve(ServeArgs::default(), file, |_| None)
        };
        assert_eq!(
            resolve("").unwrap().cli_approval_hold,
            Duration::from_secs(60)
        );
        let s = resolve("[backends]\napproval_hold_secs = 5\n").unwrap();
        assert_eq!(s.cli_approval_hold, Duration::from_secs(5));
        for bad in ["0", "3600", "99999"] {
            let err = resolve(&format!("[backends]\napproval_hold_secs = {bad}\n")).unwrap_err();
            let text = err.to_string();
            assert!(
                text.contains("approval_hold_secs") && text.contains("from 1 to 3599"),
                "{text}"
            );
        }
    }

    #[test]
    fn backends_name_files_or_start_up_fails_saying_which() {
        let dir = tempfile::tempdir().unwrap();
        let cli = dir.path().join("claude");
        std::fs::write(&cli, "#!/bin/sh\n").unwrap();
        let resolve = |text: String| {
            let file: FileSettings = toml::from_str(&text).unwrap();
            Settings::resolve(ServeArgs::default(), file, |_| None)
        };
        let s = resolve(format!("[backends]\nclaude_code = {cli:?}\n")).unwrap();
        assert_eq!(s.backends.claude_code.as_deref(), Some(cli.as_path()));
        assert_eq!(s.backends.opencode, None);
        assert_eq!(
            s.backends.worker_args(),
            [std::ffi::OsString::from("--claude-code"), cli.into()]
        );
        let missing = dir.path().join("nowhere/opencode");
        let err = resolve(format!("[backends]\nopencode = {missing:?}\n")).unwrap_err();
        let text = err.to_string();
        assert!(text.starts_with("[backends] opencode: "), "{text}");
        assert!(text.contains("is not a file"), "{text}");
        assert!(text.contains("command -v opencode"), "{text}");
        // A directory is not a CLI either.
        let err = resolve(format!("[backends]\nclaude_code = {:?}\n", dir.path())).unwrap_err();
        assert!(err.to_string().contains("is not a file"), "{err}");
        assert!(toml::from_str::<FileSettings>("[backends]\nclaude = \"x\"\n").is_err());
    }

    #[test]
    fn tasks_take_their_defaults_and_refuse_what_cannot_work() {
        let t = TaskSettings::default();
        assert_eq!(
            (t.planner.as_str(), t.time_limit_secs, t.model_call_limit),
            ("planner", 3600, 200)
        );
        assert_eq!(
            (t.max_delegation_depth, t.attachment_max_bytes),
            (5, 10 << 20)
        );
        assert_eq!(t.discord_channel, None);
        let read = |text: &str| {
            let file: FileSettings = toml::from_str(text).unwrap();
            Settings::resolve(ServeArgs::default(), file, |_| None)
        };
        let set = read(
            "[tasks]\nplanner = \"plans\"\nattachment_max_bytes = 5\ndiscord_channel = \" 42 \"\n",
        )
        .unwrap();
        assert_eq!(set.tasks.discord_channel.as_deref(), Some("42"));
        assert_eq!(
            (set.tasks.planner.as_str(), set.tasks.attachment_max_bytes),
            ("plans", 5)
        );
        for bad in [
            "[tasks]\nplanner = \"no/slash\"\n",
            "[tasks]\ntime_limit_secs = 0\n",
            "[tasks]\nattachment_max_bytes = 0\n",
            "[tasks]\ndiscord_channel = \"#tasks\"\n",
        ] {
            let e = read(bad).unwrap_err().to_string();
            assert!(e.contains("[tasks]"), "{bad}: {e}");
        }
    }
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn defaults_apply_when_nothing_is_set() {
        let s =
            Settings::resolve(ServeArgs::default(), FileSettings::default(), env_of(&[])).unwrap();
        assert_eq!(s.data_dir, PathBuf::from("./data"));
        assert_eq!(s.http_addr.to_string(), "127.0.0.1:8080");
        assert_eq!(s.grpc_addr.to_string(), "127.0.0.1:50051");
        let kinds: Vec<ProviderKind> = s.providers.iter().map(|p| p.kind).collect();
        assert_eq!(
            kinds,
            vec![ProviderKind::Ollama, ProviderKind::LmStudio],
            "local servers are probed"
        );
        assert_eq!(s.max_iterations, 50);
        assert_eq!(s.workers.attach_timeout, Duration::from_secs(30));
        assert_eq!(s.retry, RetryPolicy::default());
        assert_eq!(s.ask_timeout, Duration::from_secs(600));
        assert_eq!(s.roles.get("api"), Some(&Role::Admin));
        assert_eq!(s.default_role, Role::Operator);
        assert_eq!(s.context.window, Duration::from_secs(24 * 3600));
        assert_eq!(s.context.idle_timeout, Some(Duration::from_secs(1800)));
    }

    #[test]
    fn a_shared_join_token_is_optional_but_long_and_the_flag_wins() {
        let resolve = |args: ServeArgs, file: &str, env: &[(&str, &str)]| {
            Settings::resolve(args, toml::from_str(file).unwrap(), env_of(env))
        };
        let s = resolve(ServeArgs::default(), "", &[]).unwrap();
        assert_eq!(s.workers.launcher, LauncherKind::Local);
        let remote = "[workers]\nlauncher = \"remote\"\n";
        // Per-worker credentials only: no shared token.
        let s = resolve(ServeArgs::default(), remote, &[]).unwrap();
        assert_eq!(s.workers.launcher, LauncherKind::Remote);
        assert!(s.workers.join_token.is_none());
        let err = resolve(
            ServeArgs::default(),
            remote,
            &[("CHORUS_JOIN_TOKEN", "short")],
        )
        .unwrap_err();
        assert!(err.to_string().contains("shorter than 16"), "{err}");
        assert!(
            !err.to_string().contains("short\""),
            "the value is not echoed"
        );
        let token = [("CHORUS_JOIN_TOKEN", "0123456789abcdef-join")];
        let s = resolve(ServeArgs::default(), remote, &token).unwrap();
        assert_eq!(s.workers.launcher, LauncherKind::Remote);
        assert_eq!(
            s.workers.join_token.as_ref().map(Secret::expose),
            Some("0123456789abcdef-join")
        );
        let flag = ServeArgs {
            launcher: Some(LauncherKind::Local),
            ..ServeArgs::default()
        };
        assert_eq!(
            resolve(flag, remote, &[]).unwrap().workers.launcher,
            LauncherKind::Local,
            "--launcher wins over the file"
        );
        // TLS on the link: a certificate needs its key; local workers take none.
        let tls = [
            token[0],
            ("CHORUS_TLS_CERT", "/c.pem"),
            ("CHORUS_TLS_KEY", "/k.pem"),
        ];
        let s = resolve(ServeArgs::default(), remote, &tls).unwrap();
        assert_eq!(
            s.workers.tls,
            Some(crate::link_tls::LinkTlsFiles {
                cert: "/c.pem".into(),
                key: "/k.pem".into(),
                client_ca: None,
            })
        );
        let err = resolve(ServeArgs::default(), remote, &tls[..2]).unwrap_err();
        assert!(err.to_string().contains("both a certificate"), "{err}");
        let err = resolve(ServeArgs::default(), "", &tls).unwrap_err();
        assert!(err.to_string().contains("for dial-in workers"), "{err}");
    }

    #[test]
    fn database_url_selects_postgres_and_its_password_stays_secret() {
        let resolve = |file: &str, env: &[(&str, &str)]| {
            Settings::resolve(
                ServeArgs::default(),
                toml::from_str(file).unwrap(),
                env_of(env),
            )
        };
        assert_eq!(resolve("", &[]).unwrap().database, Database::Sqlite);
        let url = "postgres://chorus:p%40ss%20word@db.internal:5433/chorus";
        let s = resolve("", &[("DATABASE_URL", url)]).unwrap();
        assert_eq!(s.database, Database::Postgres(Secret::new(url)));
        let shown = s.database.describe(Path::new("/d"));
        assert_eq!(
            shown,
            "Postgres, chorus@db.internal:5433/chorus, TLS if the server offers it, unverified (sslmode=verify-full to require a verified server)"
        );
        assert!(!format!("{s:?}").contains("p%40ss"), "Debug hides it");
        let secrets = s.database.secrets();
        assert!(secrets.contains(&"p@ss word".to_string()), "{secrets:?}");
        assert!(secrets.contains(&"p%40ss%20word".to_string()));
        assert!(secrets.contains(&url.to_string()));
        // The environment wins over the file.
        let file = "[store]\ndatabase_url = \"postgresql://a@file-host/x?sslmode=verify-full&sslrootcert=/ca.pem\"\n";
        let s = resolve(file, &[]).unwrap();
        assert_eq!(
            s.database.describe(Path::new("/d")),
            "Postgres, a@file-host/x, TLS, verifying the server"
        );
        let s = resolve(file, &[("DATABASE_URL", url)]).unwrap();
        assert_eq!(s.database, Database::Postgres(Secret::new(url)));
        assert_eq!(
            resolve("", &[]).unwrap().database.describe(Path::new("/d")),
            "SQLite, /d/chorus.db"
        );
        // Refusals name the variable and never echo the URL.
        for bad in [
            "mysql://root:hunter22@h/db",
            "postgres://:hunter22@/db",
            "hunter22 no url",
        ] {
            let err = resolve("", &[("DATABASE_URL", bad)])
                .unwrap_err()
                .to_string();
            assert!(err.starts_with("DATABASE_URL"), "{err}");
            assert!(!err.contains("hunter22"), "{err}");
        }
        assert!(matches!(
            resolve("", &[("DATABASE_URL", " ")]),
            Err(ConfigError::EmptyVariable { .. })
        ));
    }

    #[test]
    fn an_embedding_model_is_set_per_provider_and_refused_where_there_is_none() {
        let parse = |text: &str| {
            let file: FileSettings = toml::from_str(text).unwrap();
            Settings::resolve(
                ServeArgs::default(),
                file,
                env_of(&[("OPENAI_API_KEY", "k"), ("ANTHROPIC_API_KEY", "k")]),
            )
        };
        let s =
            parse("[providers.openai]\nembedding_model = \"text-embedding-3-small\"\n").unwrap();
        let openai = provider(&s, ProviderKind::OpenAi).unwrap();
        assert_eq!(
            openai.embedding_model.as_deref(),
            Some("text-embedding-3-small")
        );
        assert_eq!(
            provider(&s, ProviderKind::Anthropic)
                .unwrap()
                .embedding_model,
            None
        );
        let err = parse("[providers.anthropic]\nembedding_model = \"x\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("anthropic offers no embeddings endpoint"),
            "{err}"
        );
        let err = parse("[providers.ollama]\nembedding_model = \" \"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("empty for ollama"), "{err}");
    }

    #[test]
    fn the_context_section_sets_the_window_and_the_idle_timeout() {
        let file: FileSettings =
            toml::from_str("[context]\nwindow_hours = 2\nidle_timeout_secs = 0\n").unwrap();
        let s = Settings::resolve(ServeArgs::default(), file, env_of(&[])).unwrap();
        assert_eq!(s.context.window, Duration::from_secs(7200));
        assert_eq!(s.context.idle_timeout, None, "0 switches it off");
        // Less than an hour is refused, not rounded up (see the out-of-range test).
        let file: FileSettings = toml::from_str("[context]\nwindow_hours = 0\n").unwrap();
        assert!(Settings::resolve(ServeArgs::default(), file, env_of(&[])).is_err());
    }

    #[test]
    fn flags_and_env_beat_the_file_and_the_file_beats_defaults() {
        let file: FileSettings = toml::from_str(
            r#"
            data_dir = "/from/file"
            default_model = "file-model"
            max_iterations = 7
            [providers.openai]
            base_url = "http://file/v1"
            api_key = "file-key"
            [workers]
            stop_grace_ms = 100
            heartbeat_interval_ms = 600
            attach_timeout_ms = 1500
            "#,
        )
        .unwrap();
        let args = ServeArgs {
            data_dir: Some(PathBuf::from("/from/flag")),
            ..ServeArgs::default()
        };
        let s = Settings::resolve(args, file, env_of(&[("OPENAI_API_KEY", "env-key")])).unwrap();
        assert_eq!(s.data_dir, PathBuf::from("/from/flag"));
        assert_eq!(s.default_model.as_deref(), Some("file-model"));
        assert_eq!(s.max_iterations, 7);
        let openai = provider(&s, ProviderKind::OpenAi).unwrap();
        assert_eq!(openai.base_url, "http://file/v1");
        assert_eq!(openai.api_key.unwrap().expose(), "env-key");
        assert_eq!(s.workers.stop_grace, Duration::from_millis(100));
        assert_eq!(s.workers.attach_timeout, Duration::from_millis(1500));
        assert_eq!(s.workers.heartbeat_interval, Duration::from_millis(600));
        assert_eq!(s.workers.silence_limit(), Duration::from_millis(1800));
    }

    fn provider(s: &Settings, kind: ProviderKind) -> Option<ProviderEndpoint> {
        s.providers.iter().find(|p| p.kind == kind).cloned()
    }

    #[test]
    fn a_base_url_alone_configures_a_keyless_local_endpoint() {
        let s = Settings::resolve(
            ServeArgs::default(),
            FileSettings::default(),
            env_of(&[("OPENAI_BASE_URL", "http://127.0.0.1:9/v1/")]),
        )
        .unwrap();
        let openai = provider(&s, ProviderKind::OpenAi).unwrap();
        assert_eq!(openai.base_url, "http://127.0.0.1:9/v1");
        assert!(openai.api_key.is_none());
    }

    #[test]
    fn keys_switch_hosted_providers_on_with_their_public_endpoints() {
        let s = Settings::resolve(
            ServeArgs::default(),
            FileSettings::default(),
            env_of(&[
                ("OPENAI_API_KEY", "k"),
                ("ANTHROPIC_API_KEY", "a"),
                ("OPENROUTER_API_KEY", "o"),
            ]),
        )
        .unwrap();
        let kinds: Vec<ProviderKind> = s.providers.iter().map(|p| p.kind).collect();
        assert_eq!(kinds, ALL_PROVIDERS.to_vec(), "resolution order");
        assert_eq!(
            provider(&s, ProviderKind::OpenAi).unwrap().base_url,
            "https://api.openai.com/v1"
        );
        assert_eq!(
            provider(&s, ProviderKind::Anthropic).unwrap().base_url,
            "https://api.anthropic.com"
        );
    }

    #[test]
    fn local_servers_can_be_switched_off_or_moved() {
        let file: FileSettings = toml::from_str(
            "[providers.ollama]\nenabled = false\n[models]\nretry_attempts = 2\nretry_max_secs = 9\nsilence_timeout_secs = 7\n",
        )
        .unwrap();
        let s = Settings::resolve(
            ServeArgs::default(),
            file,
            env_of(&[("LMSTUDIO_BASE_URL", "http://10.0.0.5:1234")]),
        )
        .unwrap();
        assert!(provider(&s, ProviderKind::Ollama).is_none());
        assert_eq!(
            provider(&s, ProviderKind::LmStudio).unwrap().base_url,
            "http://10.0.0.5:1234"
        );
        assert_eq!(
            s.retry,
            RetryPolicy {
                max_attempts: 2,
                max_total_ms: 9000,
                base_delay_ms: 1000,
                call_timeout_ms: 600_000,
                silence_timeout_ms: 7000,
            }
        );
    }

    #[test]
    fn an_empty_variable_is_an_error_not_a_silent_default() {
        let err = Settings::resolve(
            ServeArgs::default(),
            FileSettings::default(),
            env_of(&[("OPENAI_API_KEY", " ")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("OPENAI_API_KEY"));
    }

    #[test]
    fn unknown_fields_in_the_file_are_reported() {
        let err = toml::from_str::<FileSettings>("dta_dir = \"x\"").unwrap_err();
        assert!(err.to_string().contains("dta_dir"), "{err}");
    }

    #[test]
    fn every_secret_the_settings_hold_is_listed() {
        let mut file = FileSettings::default();
        file.mcp
            .secrets
            .insert("FROM_FILE".into(), Secret::new("mcp-file-secret"));
        let mut s = Settings::resolve(
            ServeArgs {
                api_token: Some("api-token-given".into()),
                ..ServeArgs::default()
            },
            file,
            env_of(&[
                ("OPENAI_API_KEY", "sk-openai-key"),
                ("CHORUS_JOIN_TOKEN", "join-token-0123456789abcdef0123456789"),
                ("DATABASE_URL", "postgres://u:url%2Fpass@db/x"),
                ("PGPASSWORD", "pg-env-password"),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "x-api-key=collector-key"),
                ("DISCORD_TOKEN", "discord-bot-token"),
            ]),
        )
        .unwrap();
        s.mcp.add_env(
            [(
                "CHORUS_MCP_SECRET_FROM_ENV".to_string(),
                "mcp-env-secret".to_string(),
            )]
            .into_iter(),
        );
        let secrets = s.secrets();
        for expected in [
            "mcp-file-secret",
            "mcp-env-secret",
            "sk-openai-key",
            "api-token-given",
            "join-token-0123456789abcdef0123456789",
            "postgres://u:url%2Fpass@db/x",
            "url%2Fpass",
            "url/pass",
            "pg-env-password",
            "collector-key",
            "discord-bot-token",
        ] {
            assert!(secrets.iter().any(|s| s == expected), "{expected} missing");
        }
    }

    #[test]
    fn secrets_do_not_print() {
        let s = Secret::new("sk-very-secret");
        assert!(!format!("{s:?}").contains("very-secret"));
    }
}
