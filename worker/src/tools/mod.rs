//! The tools an agent's model can call, and how one call is executed.
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
pub mod listing;
pub mod locks;
pub mod procs;
pub mod safe_env;
pub mod sandbox;
mod schemas;
pub mod seccomp;
pub mod tasks;
pub mod walk;

#[cfg(test)]
mod corpus_tests;

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use chorus_proto::domain::ToolCall;
use futures::FutureExt;
use serde::de::DeserializeOwned;

use crate::model::ToolSchema;
use crate::model::wire_names::to_wire;
use bash::{BashArgs, BashConfig};
use edit::ReplaceArgs;
use files::{CreateFileArgs, PathArgs, ViewArgs};
use jail::Workspace;
use listing::{ListArgs, SearchArgs};
use locks::FileLockGuard;
use locks::FileLocks;
use tasks::BackgroundTasks;

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
    /// The worker's background tasks, shared by all its runs.
    tasks: Arc<BackgroundTasks>,
    config: ToolConfig,
}

/// Every tool, in the order the schemas list them.
pub use chorus_proto::domain::TOOL_NAMES;

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
    TaskOutput(tasks::OutputArgs),
    TaskStop(tasks::TaskArgs),
    /// Writes a file in the agent's docs/ directory.
    SelfEditDocs(CreateFileArgs),
    /// Self-edits of what the control plane owns; the gate carries them out, so
    /// one never reaches the worker to run.
    ControlPlane,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NewPrompt {
    #[allow(dead_code)]
    new_prompt: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NewProfile {
    #[allow(dead_code)]
    new_profile: serde_json::Value,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct NewModel {
    #[allow(dead_code)]
    new_model: String,
}

impl Request {
    fn parse(call: &ToolCall) -> Result<Request, ToolOutcome> {
        Ok(match call.name.as_str() {
            "create_file" => Request::CreateFile(parse_args(call)?),
            "str_replace" => Request::StrReplace(parse_args(call)?),
            "view" => Request::View(parse_args(call)?),
            "file.read" => Request::Read(parse_args(call)?),
            "file.write" => Request::Write(parse_args(call)?),
            "file.create" => Request::Create(parse_args(call)?),
            "file.delete" => Request::Delete(parse_args(call)?),
            "file.patch" => Request::Patch(parse_args(call)?),
            "file.list" => Request::List(parse_args(call)?),
            "file.search" => Request::Search(parse_args(call)?),
            "bash" => Request::Bash(parse_args(call)?),
            "task_output" => Request::TaskOutput(parse_args(call)?),
            "task_stop" => Request::TaskStop(parse_args(call)?),
            "self_edit_docs" => Request::SelfEditDocs(parse_args(call)?),
            "self_edit_system_prompt" => {
                parse_args::<NewPrompt>(call)?;
                Request::ControlPlane
            }
            "self_edit_permissions" => {
                parse_args::<NewProfile>(call)?;
                Request::ControlPlane
            }
            "self_edit_model" => {
                parse_args::<NewModel>(call)?;
                Request::ControlPlane
            }
            other => {
                return Err(ToolOutcome::malformed(format!(
                    "there is no tool named '{other}'; the tools are: {}",
                    TOOL_NAMES
                        .iter()
                        .map(|name| to_wire(name))
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
        })
    }

    /// The path a writer changes (and must lock); `None` for readers and bash.
    fn written_path(&self) -> Option<&str> {
        match self {
            Request::CreateFile(a) | Request::Write(a) | Request::Create(a) => Some(&a.path),
            Request::StrReplace(a) | Request::Patch(a) => Some(&a.path),
            Request::Delete(a) => Some(&a.path),
            // Docs are not in the workspace; their own lock key keeps them apart.
            Request::SelfEditDocs(_) => None,
            Request::View(_)
            | Request::Read(_)
            | Request::List(_)
            | Request::Search(_)
            | Request::Bash(_)
            | Request::TaskOutput(_)
            | Request::TaskStop(_)
            | Request::ControlPlane => None,
        }
    }

    /// Runs a file tool (blocking system calls).
    fn run_file_tool(self, workspace: &Workspace) -> ToolOutcome {
        match self {
            Request::CreateFile(a) => files::create_file(workspace, a),
            Request::StrReplace(a) => edit::replace(workspace, a, "str_replace"),
            Request::View(a) => files::read_text(workspace, a, "view"),
            Request::Read(a) => files::read_text(workspace, a, "file.read"),
            Request::Write(a) => files::write_existing(workspace, a),
            Request::Create(a) => files::create_new(workspace, a),
            Request::Delete(a) => files::delete(workspace, a),
            Request::Patch(a) => edit::replace(workspace, a, "file.patch"),
            Request::List(a) => listing::list(workspace, a),
            Request::Search(a) => listing::search(workspace, a),
            Request::Bash(_)
            | Request::TaskOutput(_)
            | Request::TaskStop(_)
            | Request::SelfEditDocs(_)
            | Request::ControlPlane => ToolOutcome::error("not a workspace file tool"),
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
            tasks: Arc::new(BackgroundTasks::default()),
            config: ToolConfig::default(),
        }
    }

    /// Uses the worker's shared background tasks (instead of a registry of its own).
    pub fn with_tasks(mut self, tasks: Arc<BackgroundTasks>) -> Self {
        self.tasks = tasks;
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

    pub fn schemas(&self) -> Vec<ToolSchema> {
        schemas::all(&self.config.bash)
    }

    /// A short human description of a call, for step history: "create_file: src/a.rs",
    /// "bash: cargo test".
    pub fn describe(call: &ToolCall) -> String {
        let args = serde_json::from_str::<serde_json::Value>(&call.arguments).ok();
        let text = |key: &str| {
            args.as_ref()
                .and_then(|v| v.get(key))
                .and_then(|v| v.as_str())
                .map(str::to_string)
        };
        let detail = match call.name.as_str() {
            "bash" => text("command").map(|c| {
                let background = args
                    .as_ref()
                    .and_then(|v| v.get("run_in_background"))
                    .and_then(|v| v.as_bool())
                    .unwrap_or(false);
                let line = one_line(&c, 80);
                if background {
                    format!("{line} (in the background)")
                } else {
                    line
                }
            }),
            "task_output" | "task_stop" => args
                .as_ref()
                .and_then(|v| v.get("task_id"))
                .map(|id| format!("task {id}")),
            "file.search" => text("pattern").map(|pattern| {
                let place = text("path").unwrap_or_else(|| ".".into());
                format!("{} in {}", truncate(&pattern, 60), truncate(&place, 60))
            }),
            // No path lists the root; unreadable arguments get no detail at all.
            "file.list" => args
                .as_ref()
                .map(|_| truncate(&text("path").unwrap_or_else(|| ".".into()), 120)),
            _ => text("path").map(|p| truncate(&p, 120)),
        };
        match detail {
            Some(detail) => format!("{}: {detail}", call.name),
            None => call.name.clone(),
        }
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
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown cause".into());
                ToolOutcome::error(format!("the tool {} crashed: {why}", to_wire(&call.name)))
            })
    }

    async fn execute_inner(&self, call: &ToolCall, waits: Option<&LockWaits>) -> ToolOutcome {
        let request = match Request::parse(call) {
            Ok(request) => request,
            Err(outcome) => return outcome,
        };
        let request = match request {
            Request::Bash(args) if args.run_in_background => {
                return self
                    .tasks
                    .start_in(
                        self.workspace.root(),
                        &args.command,
                        self.config.bash.sandbox.as_ref(),
                    )
                    .await;
            }
            Request::Bash(args) => {
                return bash::run(self.workspace.root(), args, &self.config.bash).await;
            }
            Request::TaskOutput(args) => return self.tasks.output(args).await,
            Request::TaskStop(args) => return self.tasks.stop(args).await,
            Request::SelfEditDocs(args) => return self.write_doc(args, waits).await,
            Request::ControlPlane => {
                return ToolOutcome::error(format!(
                    "{} is carried out by the control plane, not here; the call was not run",
                    to_wire(&call.name)
                ));
            }
            other => other,
        };
        // A path the jail refuses needs no lock: the tool reports the refusal.
        let guard = match request.written_path().and_then(jail::normalise) {
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
    let text = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    };
    serde_json::from_str(text).map_err(|e| {
        ToolOutcome::malformed(format!(
            "the arguments for {} are not valid: {e}; send a JSON object matching the tool's schema",
            to_wire(&call.name)
        ))
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

/// A command on one line (whitespace runs collapsed), shortened to `max` characters.
fn one_line(s: &str, max: usize) -> String {
    truncate(&s.split_whitespace().collect::<Vec<_>>().join(" "), max)
}

#[cfg(test)]
mod tests;
