//! The task board's control tools: how a planner or a worker run ends its turn
//! (`submit_plan`, `ask_questions`; `completion_report`, `ask_question`,
//! `delegate_to_agent`, `ask_agent`). They run in the control plane, and no profile
//! offers them: a run is offered the ones of its thread's role (the control plane's
//! `tasks::contract` says which, and what each outcome leads to). Their arguments are
//! typed here for both sides.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    Actions, RunsIn, SchemaSettings, Subject, ToolDef, object, parse_args, text, truncate,
};

pub const SUBMIT_PLAN: &str = "submit_plan";
pub const ASK_QUESTIONS: &str = "ask_questions";
pub const COMPLETION_REPORT: &str = "completion_report";
pub const ASK_QUESTION: &str = "ask_question";
pub const DELEGATE_TO_AGENT: &str = "delegate_to_agent";
pub const ASK_AGENT: &str = "ask_agent";

/// The planner's plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Plan {
    pub summary: String,
    pub requirements: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub steps: Vec<String>,
    /// The agent that works the task.
    pub assignee: String,
}

/// One choice offered with a question (Claude Code's AskUserQuestion shape).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuestionOption {
    pub label: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub description: String,
}

/// One of the planner's questions.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannerQuestion {
    pub id: String,
    pub question: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<QuestionOption>,
    #[serde(default)]
    pub multi_select: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Questions {
    pub questions: Vec<PlannerQuestion>,
}

/// How a worker says its work went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ReportStatus {
    Complete,
    Blocked,
    Failed,
}

impl ReportStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ReportStatus::Complete => "complete",
            ReportStatus::Blocked => "blocked",
            ReportStatus::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompletionReport {
    pub status: ReportStatus,
    pub summary: String,
    #[serde(default)]
    pub output: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blocked_reason: Option<String>,
}

/// A worker's question to the person who runs the task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Question {
    pub question: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub options: Vec<QuestionOption>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Delegation {
    pub agent: String,
    pub instructions: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentQuestion {
    pub agent: String,
    pub question: String,
}

fn strings(description: &str) -> Value {
    json!({"type": "array", "items": {"type": "string"}, "description": description})
}

fn options() -> Value {
    json!({
        "type": "array",
        "description": "Choices to offer (optional); the answer may still be free text",
        "items": object(
            json!({
                "label": {"type": "string", "description": "The choice, short"},
                "description": {"type": "string", "description": "What choosing it means"}
            }),
            &["label"],
        )
    })
}

/// Checked as `tool:<name>:<agent named>`, shown as "<agent>: <gist>".
fn by_assignee(args: &Value) -> Subject {
    named(args, "assignee", "summary")
}

fn by_delegate(args: &Value) -> Subject {
    named(args, "agent", "instructions")
}

fn by_asked(args: &Value) -> Subject {
    named(args, "agent", "question")
}

fn named(args: &Value, key: &str, shown: &str) -> Subject {
    let agent = text(args, key).unwrap_or_default();
    let gist = text(args, shown)
        .map(|s| truncate(&s.split_whitespace().collect::<Vec<_>>().join(" "), 80));
    Subject {
        actions: Actions::Detail(agent.to_string()),
        shown: match (agent.is_empty(), gist) {
            (false, Some(gist)) => Some(format!("{agent}: {gist}")),
            (false, None) => Some(agent.to_string()),
            (true, gist) => gist,
        },
        writes: None,
    }
}

pub(super) const SUBMIT_PLAN_TOOL: ToolDef = ToolDef {
    name: SUBMIT_PLAN,
    aliases: &[],
    action_name: SUBMIT_PLAN,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Submit the plan for the task and end your turn. Name the agent that should do the \
         work as assignee (one of the agents listed in the task)."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "summary": {"type": "string", "description": "What the task is, in a few sentences"},
                "requirements": strings("What the result must satisfy"),
                "acceptance_criteria": strings("How a person checks it is done"),
                "steps": strings("The steps to do it, in order"),
                "assignee": {"type": "string", "description": "The agent that does the work"}
            }),
            &[
                "summary",
                "requirements",
                "acceptance_criteria",
                "steps",
                "assignee",
            ],
        )
    },
    subject: by_assignee,
    typical_call: r#"{"summary":"Add a greeting","requirements":["hello.txt says hello"],"acceptance_criteria":["the file exists"],"steps":["write hello.txt"],"assignee":"coder"}"#,
    check_args: |args| parse_args::<Plan>(args).map(drop),
};

pub(super) const ASK_QUESTIONS_TOOL: ToolDef = ToolDef {
    name: ASK_QUESTIONS,
    aliases: &[],
    action_name: ASK_QUESTIONS,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Ask the person who created the task what you need to know before you can plan it, \
         and end your turn. Their answers come back as your next message."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "questions": {
                    "type": "array",
                    "minItems": 1,
                    "items": object(
                        json!({
                            "id": {"type": "string", "description": "A short id for the question (q1, q2, …)"},
                            "question": {"type": "string"},
                            "options": options(),
                            "multi_select": {"type": "boolean", "description": "Whether several options may be chosen"}
                        }),
                        &["id", "question"],
                    )
                }
            }),
            &["questions"],
        )
    },
    subject: |args| Subject {
        actions: Actions::Detail(String::new()),
        shown: args.get("questions").and_then(Value::as_array).map(|q| {
            format!(
                "{} question{}",
                q.len(),
                if q.len() == 1 { "" } else { "s" }
            )
        }),
        writes: None,
    },
    typical_call: r#"{"questions":[{"id":"q1","question":"Which language?","options":[{"label":"Rust"},{"label":"Go"}]}]}"#,
    check_args: |args| parse_args::<Questions>(args).map(drop),
};

pub(super) const COMPLETION_REPORT_TOOL: ToolDef = ToolDef {
    name: COMPLETION_REPORT,
    aliases: &[],
    action_name: COMPLETION_REPORT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Report how your work on the task went and end your turn: complete (done), blocked \
         (you need something from a person: say what in blocked_reason) or failed."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "status": {"type": "string", "enum": ["complete", "blocked", "failed"]},
                "summary": {"type": "string", "description": "What you did, briefly"},
                "output": {"type": "string", "description": "The details: results, files written, findings"},
                "blocked_reason": {"type": "string", "description": "When blocked: what you need"}
            }),
            &["status", "summary", "output"],
        )
    },
    subject: |args| Subject {
        actions: Actions::Detail(text(args, "status").unwrap_or_default().into()),
        shown: text(args, "status").map(str::to_string),
        writes: None,
    },
    typical_call: r#"{"status":"complete","summary":"Wrote hello.txt","output":"hello.txt says hello"}"#,
    check_args: |args| parse_args::<CompletionReport>(args).map(drop),
};

pub(super) const ASK_QUESTION_TOOL: ToolDef = ToolDef {
    name: ASK_QUESTION,
    aliases: &[],
    action_name: ASK_QUESTION,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Ask the person who runs the task a question and end your turn; their answer comes \
         back as your next message. Do not poll or wait for it."
            .into()
    },
    parameters: |_| {
        object(
            json!({"question": {"type": "string"}, "options": options()}),
            &["question"],
        )
    },
    subject: |args| Subject {
        actions: Actions::Detail(String::new()),
        shown: text(args, "question").map(|q| truncate(q, 80)),
        writes: None,
    },
    typical_call: r#"{"question":"Which port should it listen on?"}"#,
    check_args: |args| parse_args::<Question>(args).map(drop),
};

pub(super) const DELEGATE_TO_AGENT_TOOL: ToolDef = ToolDef {
    name: DELEGATE_TO_AGENT,
    aliases: &[],
    action_name: DELEGATE_TO_AGENT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Hand a piece of the work to another agent as a sub-task and end your turn; its \
         completion report comes back as your next message. Do not poll or wait for it."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "agent": {"type": "string", "description": "The agent to do it"},
                "instructions": {"type": "string", "description": "What to do, completely: it sees nothing else"}
            }),
            &["agent", "instructions"],
        )
    },
    subject: by_delegate,
    typical_call: r#"{"agent":"reviewer","instructions":"Review hello.txt"}"#,
    check_args: |args| parse_args::<Delegation>(args).map(drop),
};

pub(super) const ASK_AGENT_TOOL: ToolDef = ToolDef {
    name: ASK_AGENT,
    aliases: &[],
    action_name: ASK_AGENT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Ask another agent a question and end your turn; its answer comes back as your next \
         message. Do not poll or wait for it."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "agent": {"type": "string", "description": "The agent to ask"},
                "question": {"type": "string"}
            }),
            &["agent", "question"],
        )
    },
    subject: by_asked,
    typical_call: r#"{"agent":"reviewer","question":"Is hello.txt clear?"}"#,
    check_args: |args| parse_args::<AgentQuestion>(args).map(drop),
};
