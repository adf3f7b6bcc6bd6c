//! The tool registry: one definition per tool ([`ToolDef`]), shared by the control
//! plane (which renders the offered tools' specs into each assignment with
//! [`ToolDef::spec`], derives the action strings it checks, and executes its own
//! tools) and the worker (which offers the model the specs it is sent, and executes
//! the tools that run there).
//!
//! A definition holds everything about a tool that is not its execution: its Chorus
//! name (`file.read`, used in action strings and profiles), the older names it still
//! answers to, where it runs, its description and JSON schema, and one function of
//! the arguments ([`ToolDef::subject`]) from which the action strings, the step text
//! and the path a writer locks all derive. Pure data and pure functions: no I/O.
//!
//! Adding a tool is one definition (a `const` in one of this module's files) and one
//! line in [`TOOLS`]; a tool that runs in the control plane needs no worker code.

mod bash;
mod contract;
mod files;
mod jobs;
mod memory;
mod self_edit;
pub mod wire_names;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

pub use bash::BASH;
pub use contract::{
    ASK_AGENT, ASK_QUESTION, ASK_QUESTIONS, AgentQuestion, COMPLETION_REPORT, CompletionReport,
    DELEGATE_TO_AGENT, Delegation, Plan, PlannerQuestion, Question, QuestionOption, Questions,
    ReportStatus, SUBMIT_PLAN,
};
pub use files::{
    CREATE_FILE, FILE_CREATE, FILE_DELETE, FILE_LIST, FILE_PATCH, FILE_READ, FILE_SEARCH,
    FILE_WRITE, STR_REPLACE, VIEW,
};
pub use jobs::{JOB_OUTPUT, JOB_STOP};
pub use memory::{
    IdentityEdit, IdentityFile, LOG_NOTE, MEMORY_GET, MEMORY_SEARCH, MemoryGet, MemorySearch,
    MemoryText, REMEMBER, Remember, SELF_EDIT_IDENTITY, parse_identity_edit,
};
pub use self_edit::{
    NewModel, NewProfile, NewPrompt, SELF_EDIT, SELF_EDIT_DOCS, SELF_EDIT_MODEL,
    SELF_EDIT_PERMISSIONS, SELF_EDIT_SYSTEM_PROMPT,
};

use wire_names::to_wire;

/// Every tool, in the order the model is offered them.
pub static TOOLS: &[ToolDef] = &[
    files::CREATE_FILE_TOOL,
    files::STR_REPLACE_TOOL,
    files::VIEW_TOOL,
    files::FILE_READ_TOOL,
    files::FILE_WRITE_TOOL,
    files::FILE_CREATE_TOOL,
    files::FILE_DELETE_TOOL,
    files::FILE_PATCH_TOOL,
    files::FILE_LIST_TOOL,
    files::FILE_SEARCH_TOOL,
    bash::BASH_TOOL,
    jobs::JOB_OUTPUT_TOOL,
    jobs::JOB_STOP_TOOL,
    self_edit::SYSTEM_PROMPT_TOOL,
    self_edit::DOCS_TOOL,
    self_edit::PERMISSIONS_TOOL,
    self_edit::MODEL_TOOL,
    memory::IDENTITY_TOOL,
    memory::REMEMBER_TOOL,
    memory::LOG_NOTE_TOOL,
    memory::MEMORY_GET_TOOL,
    memory::MEMORY_SEARCH_TOOL,
];

/// The task board's control tools, offered by thread role rather than by profile
/// (the control plane's `tasks::contract` says which role has which).
pub static ROLE_TOOLS: &[ToolDef] = &[
    contract::SUBMIT_PLAN_TOOL,
    contract::ASK_QUESTIONS_TOOL,
    contract::COMPLETION_REPORT_TOOL,
    contract::ASK_QUESTION_TOOL,
    contract::DELEGATE_TO_AGENT_TOOL,
    contract::ASK_AGENT_TOOL,
];

/// Where a tool is executed: beside the resource it changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunsIn {
    /// In the agent's worker (the workspace, its processes).
    Worker,
    /// In the control plane (the agent's settings); the worker only reports the step.
    ControlPlane,
}

impl RunsIn {
    pub fn as_str(self) -> &'static str {
        match self {
            RunsIn::Worker => "worker",
            RunsIn::ControlPlane => "control_plane",
        }
    }

    /// The inverse of [`RunsIn::as_str`].
    pub fn parse(text: &str) -> Option<RunsIn> {
        [RunsIn::Worker, RunsIn::ControlPlane]
            .into_iter()
            .find(|r| r.as_str() == text)
    }
}

/// The settings some descriptions and schemas depend on (the bash timeouts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SchemaSettings {
    pub bash_default_timeout_secs: u64,
    pub bash_max_timeout_secs: u64,
}

impl Default for SchemaSettings {
    /// The worker's default bash timeouts.
    fn default() -> Self {
        SchemaSettings {
            bash_default_timeout_secs: 120,
            bash_max_timeout_secs: 600,
        }
    }
}

/// How a call is checked: its action strings come from this.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actions {
    /// One action `tool:<action name>:<detail>`.
    Detail(String),
    /// A bash command line, checked as one action per simple command.
    Bash(String),
}

/// What one function of a call's arguments says about it: what is checked, what the
/// step history shows, and what a writer locks. Arguments that are not a JSON object
/// come as `Value::Null`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    pub actions: Actions,
    /// The detail after the tool's name in step text ("bash: cargo test").
    pub shown: Option<String>,
    /// The workspace path a writer changes (and locks first).
    pub writes: Option<String>,
}

/// One tool.
#[derive(Debug, Clone, Copy)]
pub struct ToolDef {
    /// Chorus's name, as in action strings and profiles (`file.read`).
    pub name: &'static str,
    /// Earlier names the model may still call it by; stored profile rules written
    /// for them keep deciding its calls.
    pub aliases: &'static [&'static str],
    /// The tool name in its action strings (the self-edit tools share `self_edit`).
    pub action_name: &'static str,
    pub runs_in: RunsIn,
    pub description: fn(&SchemaSettings) -> String,
    /// The JSON Schema of the arguments (an object schema).
    pub parameters: fn(&SchemaSettings) -> Value,
    pub subject: fn(&Value) -> Subject,
    /// The arguments of a typical call (JSON), for showing what a profile gives it.
    pub typical_call: &'static str,
    /// Checks the arguments of a tool that does not run in the worker (whose
    /// executor parses them itself), so a call that cannot run is refused before it
    /// is checked.
    pub check_args: fn(&str) -> Result<(), serde_json::Error>,
}

impl ToolDef {
    /// The name the model APIs accept (`file_read`).
    pub fn wire_name(&self) -> std::borrow::Cow<'static, str> {
        to_wire(self.name)
    }

    /// The tool as the model is offered it, rendered with `settings`: what the
    /// control plane sends the worker, and what the API lists.
    pub fn spec(&self, settings: &SchemaSettings) -> crate::domain::ToolSpec {
        crate::domain::ToolSpec {
            name: self.name.to_string(),
            wire_name: self.wire_name().into_owned(),
            description: (self.description)(settings),
            schema_json: (self.parameters)(settings).to_string(),
            runs_in: self.runs_in,
            // The agent's own tools never end a turn; a task role's may.
            ends_turn: false,
        }
    }

    /// The subject of a call given its arguments as the model wrote them.
    pub fn subject_of(&self, arguments: &str) -> Subject {
        (self.subject)(&parse(arguments))
    }
}

/// The tool called `name`: by its name, its wire name or one of its older names.
/// Only the tools profiles offer; a task role's control tools are [`find_any`]'s.
pub fn find(name: &str) -> Option<&'static ToolDef> {
    find_in(TOOLS, name)
}

/// The tool called `name` among every tool, a task role's control tools included.
pub fn find_any(name: &str) -> Option<&'static ToolDef> {
    find(name).or_else(|| find_in(ROLE_TOOLS, name))
}

fn find_in(tools: &'static [ToolDef], name: &str) -> Option<&'static ToolDef> {
    tools
        .iter()
        .find(|t| t.name == name || t.aliases.contains(&name))
        .or_else(|| tools.iter().find(|t| to_wire(t.name) == name))
}

/// Every tool's Chorus name, in the registry's order.
pub fn names() -> impl Iterator<Item = &'static str> {
    TOOLS.iter().map(|t| t.name)
}

/// The arguments as JSON; anything unreadable is `Null`.
fn parse(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or(Value::Null)
}

/// A short human description of a call, for step history: "create_file: src/a.rs",
/// "bash: cargo test". Named as the model called it.
pub fn describe(name: &str, arguments: &str) -> String {
    if crate::mcp::split_tool_name(name).is_some() {
        let summary = crate::mcp::summary(arguments);
        return match summary.is_empty() {
            true => name.to_string(),
            false => format!("{name}: {}", truncate(&summary, 120)),
        };
    }
    let args = serde_json::from_str::<Value>(arguments).ok();
    let shown = match (find_any(name), &args) {
        (Some(tool), Some(args)) => (tool.subject)(args).shown,
        // An unknown tool: its path, if it names one.
        (None, Some(args)) => text(args, "path").map(|p| truncate(p, 120)),
        (_, None) => None,
    };
    match shown {
        Some(detail) => format!("{name}: {detail}"),
        None => name.to_string(),
    }
}

/// The action strings' parts for a call: `(tool, Actions)`. A tool called by an
/// older name is checked under that name (and [`other_forms`] adds the rest); an
/// unknown tool is checked as `tool:<name>:<path>` (and refused by the worker anyway).
/// An MCP server's tool (`mcp__<server>__<tool>`) is checked as
/// `tool:mcp__<server>__<tool>:<summary of arguments>` ([`crate::mcp::summary`]).
pub fn actions_of<'a>(name: &'a str, arguments: &str) -> (&'a str, Actions) {
    if crate::mcp::split_tool_name(name).is_some() {
        return (name, Actions::Detail(crate::mcp::summary(arguments)));
    }
    match find(name) {
        Some(tool) => {
            let action_tool = if tool.aliases.contains(&name) {
                name
            } else {
                tool.action_name
            };
            (action_tool, tool.subject_of(arguments).actions)
        }
        None => (
            name,
            Actions::Detail(text(&parse(arguments), "path").unwrap_or_default().into()),
        ),
    }
}

/// The same action under the other names of a renamed tool (`tool:job_output:3` ↔
/// `tool:task_output:3`): a profile rule written for either name decides it.
pub fn other_forms(action: &str) -> Vec<String> {
    let Some((tool, detail)) = action
        .strip_prefix("tool:")
        .and_then(|rest| rest.split_once(':'))
    else {
        return Vec::new();
    };
    let Some(def) = TOOLS
        .iter()
        .find(|t| !t.aliases.is_empty() && (t.action_name == tool || t.aliases.contains(&tool)))
    else {
        return Vec::new();
    };
    std::iter::once(def.action_name)
        .chain(def.aliases.iter().copied())
        .filter(|name| *name != tool)
        .map(|name| format!("tool:{name}:{detail}"))
        .collect()
}

/// A strict object schema: a wrong call is caught by the argument parser and comes
/// back as "not valid", not half-run.
fn object(properties: Value, required: &[&str]) -> Value {
    json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false
    })
}

fn text<'a>(args: &'a Value, key: &str) -> Option<&'a str> {
    args.get(key).and_then(Value::as_str)
}

/// A call checked as `tool:<name>:<path>`, shown with its path, locking nothing.
fn by_path(args: &Value) -> Subject {
    Subject {
        actions: Actions::Detail(text(args, "path").unwrap_or_default().into()),
        shown: text(args, "path").map(|p| truncate(p, 120)),
        writes: None,
    }
}

/// A writer of the path it names.
fn writes_path(args: &Value) -> Subject {
    Subject {
        writes: text(args, "path").map(str::to_string),
        ..by_path(args)
    }
}

/// For tools whose executor in the worker checks the arguments itself.
fn checked_by_executor(_: &str) -> Result<(), serde_json::Error> {
    Ok(())
}

/// Parses arguments into `T` (empty arguments are `{}`).
pub fn parse_args<T: serde::de::DeserializeOwned>(arguments: &str) -> Result<T, serde_json::Error> {
    let text = if arguments.trim().is_empty() {
        "{}"
    } else {
        arguments
    };
    serde_json::from_str(text)
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
