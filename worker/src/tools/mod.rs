//! How the tools that run in the worker execute one call. What a tool is (its
//! name, schema, description, actions, the path it locks) is defined once in the
//! registry (`chorus_proto::tools`); this module holds only the executors.
//!
//! A tool call never fails the run: bad arguments, an unknown tool, a refused path,
//! a held lock or even a panic all come back to the model as an error result it can
//! act on. Writers take the agent's per-file lock first (`locks`); file tools run
//! off the async threads; `bash` runs as its own process group (`bash`).

pub mod bash;
pub mod caps;
pub mod edit;
pub mod files;
pub mod jail;
pub mod jobs;
pub mod listing;
pub mod locks;
pub mod procs;
pub mod safe_env;
pub mod sandbox;
pub mod seccomp;
pub mod walk;

#[cfg(test)]
mod corpus_tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use chorus_proto::domain::ToolCall;
use chorus_proto::tools::{self as registry, RunsIn};
use futures::FutureExt;
use serde::de::DeserializeOwned;

use crate::model::wire_names::to_wire;
use bash::{BashArgs, BashConfig};
use edit::ReplaceArgs;
use files::{CreateFileArgs, PathArgs, ViewArgs};
use jail::Workspace;
use jobs::BackgroundJobs;
use listing::{ListArgs, SearchArgs};
use locks::FileLockGuard;
use locks::FileLocks;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
    /// The call itself was unusable (unknown tool, arguments that do not parse), as
    /// opposed to a tool that ran and failed. The loop counts these as bad model output.
    pub malformed: bool,
}

impl ToolOutcome {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: false,
            malformed: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: true,
            malformed: false,
        }
    }

    pub fn malformed(content: impl Into<String>) -> Self {
        ToolOutcome {
            malformed: true,
            ..ToolOutcome::error(content)
        }
    }
}

/// Settings of the tools that are not per call.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolConfig {
    pub bash: BashConfig,
}

/// The tools of one agent, bound to its workspace and its worker's file locks.
#[derive(Debug, Clone)]
pub struct ToolBox {
    workspace: Workspace,
    /// The agent's docs/ directory, for `self_edit_docs`.
    docs: Option<Workspace>,
    locks: Arc<FileLocks>,
    /// The worker's background jobs, shared by all its runs.
    jobs: Arc<BackgroundJobs>,
    config: ToolConfig,
    /// The agent's MCP servers, and where its stdio servers run.
    mcp: Option<(Arc<crate::mcp::McpHub>, crate::mcp::Place)>,
}

/// One call with its arguments parsed.
enum Request {
    CreateFile(CreateFileArgs),
    StrReplace(ReplaceArgs),
    View(ViewArgs),
    Read(ViewArgs),
    Write(CreateFileArgs),
    Create(CreateFileArgs),
    Delete(PathArgs),
    Patch(ReplaceArgs),
    List(ListArgs),
    Search(SearchArgs),
    Bash(BashArgs),
    JobOutput(jobs::OutputArgs),
    JobStop(jobs::JobArgs),
    /// Writes a file in the agent's docs/ directory.
    SelfEditDocs(CreateFileArgs),
    /// A tool the control plane carries out (its arguments checked by the registry);
    /// one never reaches the worker to run.
    ControlPlane,
    /// A tool of one of the agent's MCP servers (`mcp__<server>__<tool>`).
    Mcp {
        server: String,
        tool: String,
    },
}

impl Request {
    /// The call parsed, with the path a writer locks (from the registry's definition).
    fn parse(call: &ToolCall) -> Result<(Request, Option<String>), ToolOutcome> {
        if let Some((server, tool)) = chorus_proto::mcp::split_tool_name(&call.name) {
            let arguments = call.arguments.trim();
            if !arguments.is_empty()
                && !matches!(
                    serde_json::from_str::<serde_json::Value>(arguments),
                    Ok(serde_json::Value::Object(_))
                )
            {
                return Err(ToolOutcome::malformed(format!(
                    "the arguments of {} must be a JSON object; the call was not run",
                    call.name
                )));
            }
            let request = Request::Mcp {
                server: server.to_string(),
                tool: tool.to_string(),
            };
            return Ok((request, None));
        }
        let Some(tool) = registry::find(&call.name) else {
            return Err(ToolOutcome::malformed(format!(
                "there is no tool named '{}'; the tools are: {}",
                call.name,
                registry::TOOLS
                    .iter()
                    .map(chorus_proto::tools::ToolDef::wire_name)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if tool.runs_in == RunsIn::ControlPlane {
            (tool.check_args)(&call.arguments).map_err(|e| not_valid(call, e))?;
            return Ok((Request::ControlPlane, None));
        }
        let request = match tool.name {
            registry::CREATE_FILE => Request::CreateFile(parse_args(call)?),
            registry::STR_REPLACE => Request::StrReplace(parse_args(call)?),
            registry::VIEW => Request::View(parse_args(call)?),
            registry::FILE_READ => Request::Read(parse_args(call)?),
            registry::FILE_WRITE => Request::Write(parse_args(call)?),
            registry::FILE_CREATE => Request::Create(parse_args(call)?),
            registry::FILE_DELETE => Request::Delete(parse_args(call)?),
            registry::FILE_PATCH => Request::Patch(parse_args(call)?),
            registry::FILE_LIST => Request::List(parse_args(call)?),
            registry::FILE_SEARCH => Request::Search(parse_args(call)?),
            registry::BASH => Request::Bash(parse_args(call)?),
            registry::JOB_OUTPUT => Request::JobOutput(parse_args(call)?),
            registry::JOB_STOP => Request::JobStop(parse_args(call)?),
            registry::SELF_EDIT_DOCS => Request::SelfEditDocs(parse_args(call)?),
            other => {
                return Err(ToolOutcome::error(format!(
                    "the worker has no executor for {}; the call was not run",
                    to_wire(other)
                )));
            }
        };
        Ok((request, tool.subject_of(&call.arguments).writes))
    }

    /// Runs a file tool (blocking system calls).
    fn run_file_tool(self, workspace: &Workspace) -> ToolOutcome {
        match self {
            Request::CreateFile(a) => files::create_file(workspace, a),
            Request::StrReplace(a) => edit::replace(workspace, a, registry::STR_REPLACE),
            Request::View(a) => files::read_text(workspace, a, registry::VIEW),
            Request::Read(a) => files::read_text(workspace, a, registry::FILE_READ),
            Request::Write(a) => files::write_existing(workspace, a),
            Request::Create(a) => files::create_new(workspace, a),
            Request::Delete(a) => files::delete(workspace, a),
            Request::Patch(a) => edit::replace(workspace, a, registry::FILE_PATCH),
            Request::List(a) => listing::list(workspace, a),
            Request::Search(a) => listing::search(workspace, a),
            Request::Bash(_)
            | Request::JobOutput(_)
            | Request::JobStop(_)
            | Request::SelfEditDocs(_)
            | Request::ControlPlane
            | Request::Mcp { .. } => ToolOutcome::error("not a workspace file tool"),
        }
    }
}

impl ToolBox {
    /// The tools of the workspace, sharing `locks` with every other run of this
    /// worker (pass the same `Arc` to every run, or locks do not exclude anything).
    pub fn new(workspace: Workspace, locks: Arc<FileLocks>) -> Self {
        ToolBox {
            workspace,
            docs: None,
            locks,
            jobs: Arc::new(BackgroundJobs::default()),
            config: ToolConfig::default(),
            mcp: None,
        }
    }

    /// Runs the calls of MCP tools on `hub`'s servers (stdio ones at `place`).
    pub fn with_mcp(mut self, hub: Arc<crate::mcp::McpHub>, place: crate::mcp::Place) -> Self {
        self.mcp = Some((hub, place));
        self
    }

    /// Uses the worker's shared background jobs (instead of a registry of its own).
    pub fn with_jobs(mut self, jobs: Arc<BackgroundJobs>) -> Self {
        self.jobs = jobs;
        self
    }

    /// Lets `self_edit_docs` write into `docs` (a jail of its own).
    pub fn with_docs(mut self, docs: Workspace) -> Self {
        self.docs = Some(docs);
        self
    }

    /// Why a call cannot run at all (an unknown tool, arguments that do not fit
    /// its schema), as the model should hear it; `None` when it can.
    pub fn validate(call: &ToolCall) -> Option<ToolOutcome> {
        Request::parse(call).err()
    }

    pub fn with_config(mut self, config: ToolConfig) -> Self {
        self.config = config;
        self
    }

    pub fn workspace(&self) -> &Workspace {
        &self.workspace
    }

    /// A short human description of a call, for step history: "create_file: src/a.rs",
    /// "bash: cargo test".
    pub fn describe(call: &ToolCall) -> String {
        registry::describe(&call.name, &call.arguments)
    }

    /// Executes one call. Total: every failure, a panic included, is an outcome.
    pub async fn execute(&self, call: &ToolCall) -> ToolOutcome {
        self.execute_noting_waits(call, None).await
    }

    /// [`ToolBox::execute`], telling `waits` when a write has to wait for a file
    /// another thread is writing, and when that wait is over.
    pub async fn execute_noting_waits(
        &self,
        call: &ToolCall,
        waits: Option<&LockWaits>,
    ) -> ToolOutcome {
        AssertUnwindSafe(self.execute_inner(call, waits))
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(std::string::ToString::to_string)
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown cause".into());
                ToolOutcome::error(format!("the tool {} crashed: {why}", to_wire(&call.name)))
            })
    }

    async fn execute_inner(&self, call: &ToolCall, waits: Option<&LockWaits>) -> ToolOutcome {
        let (request, writes) = match Request::parse(call) {
            Ok(parsed) => parsed,
            Err(outcome) => return outcome,
        };
        let request = match request {
            Request::Bash(args) if args.run_in_background => {
                return self
                    .jobs
                    .start_in(
                        self.workspace.base(),
                        self.workspace.root(),
                        &args.command,
                        self.config.bash.sandbox.as_ref(),
                    )
                    .await;
            }
            Request::Bash(args) => {
                return bash::run_in(
                    self.workspace.base(),
                    self.workspace.root(),
                    args,
                    &self.config.bash,
                )
                .await;
            }
            Request::JobOutput(args) => return self.jobs.output(args).await,
            Request::JobStop(args) => return self.jobs.stop(args).await,
            Request::SelfEditDocs(args) => return self.write_doc(args, waits).await,
            Request::Mcp { server, tool } => {
                return match &self.mcp {
                    Some((hub, place)) => hub.call(&server, &tool, &call.arguments, place).await,
                    None => ToolOutcome::error(format!(
                        "this run has no MCP servers; {} was not run",
                        call.name
                    )),
                };
            }
            Request::ControlPlane => {
                return ToolOutcome::error(format!(
                    "{} is carried out by the control plane, not here; the call was not run",
                    to_wire(&call.name)
                ));
            }
            other => other,
        };
        // A path the jail refuses needs no lock: the tool reports the refusal.
        let guard = match writes.as_deref().and_then(jail::normalise) {
            Some(key) => match self.lock(&key, &key, waits).await {
                Ok(guard) => Some(guard),
                Err(outcome) => return outcome,
            },
            None => None,
        };
        let workspace = self.workspace.clone();
        // File tools do blocking system calls; keep them off the async threads. The
        // lock goes along, so it is held until the write has really ended, even when
        // this future is dropped meanwhile.
        tokio::task::spawn_blocking(move || {
            let outcome = request.run_file_tool(&workspace);
            drop(guard);
            outcome
        })
        .await
        .unwrap_or_else(|e| {
            ToolOutcome::error(format!("the tool {} crashed: {e}", to_wire(&call.name)))
        })
    }
}

impl ToolBox {
    /// `self_edit_docs`: a file under docs/, through the docs jail, under the same
    /// per-file locks as workspace writes (keyed apart by a `docs:` prefix).
    async fn write_doc(&self, args: CreateFileArgs, waits: Option<&LockWaits>) -> ToolOutcome {
        let Some(docs) = self.docs.clone() else {
            return ToolOutcome::error("this agent has no docs directory");
        };
        let guard = match jail::normalise(&args.path) {
            Some(key) => match self
                .lock(&format!("docs:{key}"), &format!("docs/{key}"), waits)
                .await
            {
                Ok(guard) => Some(guard),
                Err(outcome) => return outcome,
            },
            None => None,
        };
        tokio::task::spawn_blocking(move || {
            let outcome = files::create_file(&docs, args);
            drop(guard);
            outcome
        })
        .await
        .unwrap_or_else(|e| ToolOutcome::error(format!("the tool self_edit_docs crashed: {e}")))
    }
}

impl ToolBox {
    /// Takes the write lock on `key`, telling `waits` about a wait (naming `shown`).
    async fn lock(
        &self,
        key: &str,
        shown: &str,
        waits: Option<&LockWaits>,
    ) -> Result<FileLockGuard, ToolOutcome> {
        let mut waited = false;
        let result = self
            .locks
            .lock_noting_wait(key, || {
                waited = true;
                if let Some(waits) = waits {
                    let _ = waits.send(LockWait::Waiting(shown.to_string()));
                }
            })
            .await;
        if let (true, Some(waits)) = (waited, waits) {
            let _ = waits.send(LockWait::Over {
                acquired: result.is_ok(),
            });
        }
        result.map_err(|locked| ToolOutcome::error(locked.to_string()))
    }
}

/// A write waiting for a file another thread is writing (seed 001: "Awaiting file
/// lock on main.py" is what the thread is doing meanwhile).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LockWait {
    /// Waiting for the file at this path.
    Waiting(String),
    /// The wait is over: the lock was taken, or the wait timed out.
    Over { acquired: bool },
}

pub type LockWaits = tokio::sync::mpsc::UnboundedSender<LockWait>;

fn parse_args<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolOutcome> {
    registry::parse_args(&call.arguments).map_err(|e| not_valid(call, e))
}

fn not_valid(call: &ToolCall, e: serde_json::Error) -> ToolOutcome {
    ToolOutcome::malformed(format!(
        "the arguments for {} are not valid: {e}; send a JSON object matching the tool's schema",
        to_wire(&call.name)
    ))
}

#[cfg(test)]
mod tests;
