//! Building a run's assignment: the agent's settings, model route, tools, sandbox and
//! the thread's stored conversation, checked against the link limit.
//!
//! The tools go as specs the registry renders here (name, wire name, description,
//! schema, where each runs), so the worker offers the model exactly these and a
//! tool the control plane runs needs no worker code. The one value in them that is
//! a worker flag, bash's default timeout, is rendered from `[tools]
//! bash_timeout_secs` (see [`schema_settings`]): the control plane passes that same
//! value as the flag to every worker it starts, and so the schemas stay one
//! rendering, equal to what `GET /api/agents/{name}/tools` lists.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

use chorus_proto::domain::{
    AgentSettings, Backend, ChatMessage, CliSession, ControlCommand, Failure, FailureKind, Input,
    RetryPolicy, Role, RunAssignment, SandboxPolicy,
};
use chorus_proto::limits;
use chorus_proto::tools::SchemaSettings;

use crate::config::{SandboxSettings, Settings, ThreadSettings};
use crate::permissions::profiles::{ProfileCache, offered_specs, offered_tools};
use crate::providers::catalog::{Catalog, ResolveError};
use crate::store::{AgentRecord, Store, StoreError, ThreadRecord};

/// What the run dispatcher needs from the settings.
#[derive(Debug, Clone)]
pub struct RunSettings {
    pub default_model: Option<String>,
    pub max_iterations: u32,
    pub retry: RetryPolicy,
    pub sandbox: SandboxSettings,
    pub threads: ThreadSettings,
    /// The rolling context window (`[context] window_hours`).
    pub context_window: Duration,
    /// What the offered tools' schemas are rendered with.
    pub tool_schemas: SchemaSettings,
    /// What the agents' MCP servers' secret references resolve to, and their deadline.
    pub mcp: crate::mcp::McpSettings,
    /// Where the agents' identity and memory files are, rendered into each run.
    pub memory: crate::memory::sections::MemorySettings,
    /// `[memory] flush_at`: the fraction of a model's context window past which a
    /// thread's older context is flushed into the daily log (`memory::flush`).
    pub flush_at: f64,
}

/// What tool schemas are rendered with, for the model and for the API alike.
///
/// The bash default timeout is a worker flag; the control plane renders it from
/// `[tools] bash_timeout_secs`, the value it passes as that flag to every worker it
/// starts, rather than having each worker patch the text: the worker then offers
/// exactly what `GET /api/agents/{name}/tools` lists, and needs no knowledge of any
/// tool's text. (A worker started by hand with another `--bash-timeout-secs` still
/// kills commands at its own timeout; the model sees the configured one.)
pub fn schema_settings(settings: &Settings) -> SchemaSettings {
    SchemaSettings {
        bash_default_timeout_secs: settings.workers.bash_timeout.as_secs(),
        ..SchemaSettings::default()
    }
}

impl RunSettings {
    pub fn from_settings(settings: &Settings) -> Self {
        RunSettings {
            default_model: settings.default_model.clone(),
            max_iterations: settings.max_iterations,
            retry: settings.retry,
            sandbox: settings.sandbox.clone(),
            threads: settings.threads,
            context_window: settings.context.window,
            tool_schemas: schema_settings(settings),
            mcp: settings.mcp.clone(),
            memory: crate::memory::sections::MemorySettings {
                agents_root: settings.data_dir.join("agents"),
                limit_bytes: settings.memory_limit_bytes,
            },
            flush_at: settings.memory_flush_at,
        }
    }
}

/// The run, if its assignment fits the worker link; otherwise why it cannot run. A
/// command over the link's limit is never sent (it would end the stream that carries
/// the agent's other runs), so the run fails here, with the bound named.
pub fn assignment_fits(run: RunAssignment) -> Result<RunAssignment, Failure> {
    let command = ControlCommand::AssignRun(Box::new(run));
    let len = limits::command_len(&command);
    let ControlCommand::AssignRun(run) = command else {
        unreachable!("built above")
    };
    if len <= limits::MAX_LINK_MESSAGE_BYTES {
        return Ok(*run);
    }
    let files = match run.files.len() {
        0 => String::new(),
        n => format!(" and its task's {n} attachments"),
    };
    Err(Failure::new(
        FailureKind::Limit,
        format!(
            "the run's assignment (system prompt, tools and the thread's {} messages{files}) is {}, \
             more than the {} one message to a worker may carry; shorten the system prompt, \
             remove attachments or start a new thread",
            run.messages.len(),
            limits::human_bytes(len),
            limits::human_bytes(limits::MAX_LINK_MESSAGE_BYTES)
        ),
    ))
}

/// Which CLI session a thread's next run goes on from: the session its own latest
/// run on this backend started (resumed), else, for a continuation of an ended
/// thread, that thread's latest session (forked, so the ended thread's session stays
/// as it was); none for the tool loop or when no run started one.
pub fn choose_session(
    backend: Backend,
    own: Option<String>,
    continued_from: Option<String>,
) -> Option<CliSession> {
    backend.cli()?;
    match (own, continued_from) {
        (Some(id), _) => Some(CliSession { id, fork: false }),
        (None, Some(id)) => Some(CliSession { id, fork: true }),
        (None, None) => None,
    }
}

/// Which attempt of the thread's request a run is.
#[derive(Debug, Clone, Copy)]
pub struct Attempt {
    pub number: u32,
    /// Resumptions in a row before it that stored nothing.
    pub stalled: u32,
}

impl Attempt {
    pub const FIRST: Attempt = Attempt {
        number: 1,
        stalled: 0,
    };
}

pub struct Builder<'a> {
    pub store: &'a Store,
    pub catalog: &'a Catalog,
    pub profiles: &'a ProfileCache,
    pub settings: &'a RunSettings,
    /// The task engine, which says what a thread with a role is offered.
    pub role_hooks: Option<&'a dyn super::RoleHooks>,
}

/// The newest of the user messages no model has seen yet.
fn inputs_latest(inputs: &[Input]) -> Option<&str> {
    inputs.last().map(|i| i.content.as_str())
}

impl Builder<'_> {
    /// The next run of `thread` from what the store holds, or why it cannot run:
    /// the agent's configuration (`Config`) or the assignment's size (`Limit`).
    pub async fn build(
        &self,
        agent: &AgentRecord,
        thread: &ThreadRecord,
        attempt: Attempt,
    ) -> Result<Result<RunAssignment, Failure>, StoreError> {
        let config = |message: String| Ok(Err(Failure::new(FailureKind::Config, message)));
        let Some(model) = agent
            .model
            .clone()
            .or_else(|| self.settings.default_model.clone())
        else {
            // Name the more basic problem first.
            if let Err(e @ ResolveError::NoProviders { .. }) = self.catalog.resolve("").await {
                return config(e.to_string());
            }
            return config(format!(
                "agent '{}' has no model: set one with `chorus agent configure {} --model <model>` \
                 (PATCH /api/agents/{} {{\"model\": \"…\"}}; `chorus models` lists them), or start \
                 chorus with CHORUS_DEFAULT_MODEL",
                agent.name, agent.name, agent.name
            ));
        };
        let route = match self.catalog.resolve(&model).await {
            Ok(route) => route,
            Err(e) => return config(e.to_string()),
        };
        // Granted tools are offered beside the profile's (from memory after the first read).
        let grants = self
            .store
            .agent_policy(&agent.name)
            .await?
            .map(|policy| policy.grants)
            .unwrap_or_default();
        let (tools, offered, mcp_reach) = match self.profiles.get(&agent.permissions) {
            Ok(profile) => (
                offered_tools(&profile, &grants),
                offered_specs(&profile, &grants, &self.settings.tool_schemas),
                profile.mcp_reach(),
            ),
            Err(e) => {
                return config(format!(
                    "the agent's permission profile cannot be used: {e}; fix it with `chorus agent \
                     configure {} --permissions …` (PATCH /api/agents/{})",
                    agent.name, agent.name
                ));
            }
        };
        // The agent's MCP servers, their secrets put in only here, for its worker.
        let mcp_servers = match self.mcp_servers(agent).await? {
            Ok(servers) => servers,
            Err(e) => {
                return config(format!(
                    "the agent's MCP servers cannot be used: {e}; fix them with PATCH \
                     /api/agents/{} {{\"mcp_servers\": …}}",
                    agent.name
                ));
            }
        };
        let cutoff = self
            .store
            .agent_context_cutoff(&agent.name, self.settings.context_window)
            .await?;
        // Messages flushed into the daily log are out of the window (`memory::flush`).
        let flushes = self.store.thread_flushes(&agent.name, thread.id).await?;
        let placed = self
            .store
            .thread_messages_placed(&agent.name, thread.id)
            .await?;
        let (stored, flushed) = crate::memory::flush::leave_out(placed, &flushes);
        let stored = stored
            .into_iter()
            .map(|m| (m.created_at, m.message))
            .collect();
        let mut messages = super::decide::within_window(stored, &cutoff);
        if let Some(note) = flushed {
            messages.insert(0, note);
        }
        let inputs = self
            .store
            .pending_inputs(&agent.name, thread.id)
            .await?
            .into_iter()
            .map(|(message_id, content)| Input {
                message_id,
                content,
            })
            .collect::<Vec<_>>();
        let first_step_number = self.store.next_step_number(&agent.name, thread.id).await?;
        // A thread with a role is offered its role's tools beside the agent's (none
        // without the engine, whose gate would refuse them anyway).
        let (role_tools, files) = match (thread.role, self.role_hooks) {
            (Some(role), Some(hooks)) => (
                hooks.offered(role),
                hooks
                    .files(&agent.name, role, thread.workdir.as_deref())
                    .await,
            ),
            _ => (Vec::new(), Vec::new()),
        };
        let cli_session = self.cli_session(agent, thread).await?;
        let (identity, memory) =
            crate::memory::sections::render_sections(&self.settings.memory, &agent.name).await;
        let latest = inputs_latest(&inputs).or_else(|| {
            messages
                .iter()
                .rev()
                .find(|m: &&ChatMessage| m.role == Role::User)
                .map(|m| m.content.as_str())
        });
        let relevant = match latest {
            Some(text) => {
                crate::memory::search::relevant_section(
                    self.store,
                    self.catalog,
                    &route.provider,
                    &agent.name,
                    thread.id,
                    text,
                )
                .await
            }
            None => String::new(),
        };
        let run = RunAssignment {
            run_id: uuid::Uuid::new_v4().to_string(),
            thread_id: thread.id,
            agent: AgentSettings {
                name: agent.name.clone(),
                system_prompt: agent.system_prompt.clone(),
                model,
                tools,
                offered,
                sandbox: sandbox_policy(&self.settings.sandbox, agent),
                mcp_servers,
                mcp_reach,
                identity,
                memory,
            },
            model: route,
            messages,
            first_step_number,
            max_iterations: self.settings.max_iterations,
            trace_context: HashMap::new(),
            retry: self.settings.retry,
            attempt: attempt.number,
            inputs,
            thread_summary: thread.summary.clone().unwrap_or_default(),
            thread_started_at_ms: chrono::DateTime::parse_from_rfc3339(&thread.created_at)
                .map(|t| t.timestamp_millis())
                .unwrap_or(0),
            role_tools,
            workdir: thread.workdir.clone(),
            files,
            backend: agent.backend,
            cli_session,
            resumed_call: None,
            relevant,
        };
        Ok(assignment_fits(run))
    }

    /// The agent's MCP servers as its worker gets them, or why they cannot be used
    /// (a stored setting that no longer reads, a secret chorus no longer has).
    async fn mcp_servers(
        &self,
        agent: &AgentRecord,
    ) -> Result<Result<Vec<chorus_proto::mcp::McpServer>, String>, StoreError> {
        let Some(stored) = self.store.mcp_servers(&agent.name).await? else {
            return Ok(Ok(Vec::new()));
        };
        let setting = serde_json::from_str(&stored)
            .map_err(|e| e.to_string())
            .and_then(|value| crate::mcp::McpServersSetting::parse(&value));
        Ok(setting.and_then(|setting| self.settings.mcp.resolve(&setting)))
    }

    /// The stored sessions [`choose_session`] picks from.
    async fn cli_session(
        &self,
        agent: &AgentRecord,
        thread: &ThreadRecord,
    ) -> Result<Option<CliSession>, StoreError> {
        if agent.backend.cli().is_none() {
            return Ok(None);
        }
        let own = self
            .store
            .latest_cli_session(&agent.name, thread.id, agent.backend)
            .await?;
        let continued_from = match (&own, thread.continued_from) {
            (None, Some(from)) => {
                self.store
                    .latest_cli_session(&agent.name, from, agent.backend)
                    .await?
            }
            _ => None,
        };
        Ok(choose_session(agent.backend, own, continued_from))
    }
}

/// How the agent's tool processes are confined: `[sandbox]` and its network switch.
fn sandbox_policy(sandbox: &SandboxSettings, agent: &AgentRecord) -> SandboxPolicy {
    let text = |paths: &[PathBuf]| {
        paths
            .iter()
            .map(|p| p.to_string_lossy().into_owned())
            .collect()
    };
    SandboxPolicy {
        network: agent.network.allowed(),
        read_only: text(&sandbox.read_only),
        read_write: text(&sandbox.read_write),
        run_unsandboxed: sandbox.run_unsandboxed(&agent.permissions),
        limits: sandbox.limits,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::{ChatMessage, ModelRoute};

    fn assignment(messages: Vec<ChatMessage>) -> RunAssignment {
        RunAssignment {
            run_id: "r".into(),
            thread_id: 1,
            agent: AgentSettings {
                name: "a".into(),
                system_prompt: "be brief".into(),
                model: "m".into(),
                tools: vec!["view".into()],
                sandbox: SandboxPolicy::default(),
                offered: Vec::new(),
                mcp_servers: Vec::new(),
                mcp_reach: Default::default(),
                identity: String::new(),
                memory: String::new(),
            },
            model: ModelRoute {
                provider: "openai".into(),
                api: ModelRoute::OPENAI_CHAT.into(),
                relay_path: "/llm/openai".into(),
                model: "m".into(),
                limits: Default::default(),
            },
            messages,
            first_step_number: 1,
            max_iterations: 0,
            trace_context: HashMap::new(),
            retry: RetryPolicy::default(),
            attempt: 1,
            inputs: Vec::new(),
            thread_summary: String::new(),
            thread_started_at_ms: 0,
            role_tools: Vec::new(),
            workdir: None,
            files: Vec::new(),
            backend: Default::default(),
            cli_session: None,
            resumed_call: None,
            relevant: String::new(),
        }
    }

    #[test]
    fn a_cli_run_resumes_its_threads_session_and_a_continuation_forks_the_ended_ones() {
        let id = |s: &str| Some(s.to_string());
        let session = |s: &str, fork| Some(CliSession { id: s.into(), fork });
        for cli in Backend::CLIS {
            // The thread's own latest session: resumed, even in a continuation.
            assert_eq!(choose_session(cli, id("own"), None), session("own", false));
            assert_eq!(
                choose_session(cli, id("own"), id("ended")),
                session("own", false)
            );
            // A continuation's first run forks the ended thread's.
            assert_eq!(
                choose_session(cli, None, id("ended")),
                session("ended", true)
            );
            // No run started one: a fresh session.
            assert_eq!(choose_session(cli, None, None), None);
        }
        // The tool loop has no CLI session, whatever is stored.
        assert_eq!(choose_session(Backend::Api, id("own"), id("ended")), None);
    }

    #[test]
    fn an_assignment_over_the_link_limit_fails_its_run_with_the_bound_named() {
        let small = assignment(vec![ChatMessage::user("hi")]);
        assert_eq!(assignment_fits(small.clone()), Ok(small));
        let big = ChatMessage::user("x".repeat(limits::MAX_LINK_MESSAGE_BYTES / 2));
        let failure = assignment_fits(assignment(vec![big.clone(), big])).unwrap_err();
        assert_eq!(failure.kind, FailureKind::Limit);
        let reason = failure.message;
        assert!(
            reason.contains("is 32.0 MiB, more than the 32.0 MiB")
                && reason.contains("2 messages")
                && reason.contains("start a new thread"),
            "{reason}"
        );
    }
}
