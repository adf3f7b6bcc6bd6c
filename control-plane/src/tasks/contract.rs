//! The finishing contract of each thread role, defined once (SPEC H5).
//!
//! A run of a thread with a role (`planner`, `worker`, `answerer`) is offered its
//! role's control tools beside its agent's. Every one of them ends the turn (the
//! worker makes no further model call after the batch that called one). From the one
//! [`Contract`] of a role come: the tools offered and their specs, the check at the
//! end of a turn ([`on_turn_end`]), the one follow-up message a turn without a
//! finishing call gets ([`follow_up`]), and the task status each outcome leads to
//! ([`status_after`]). The decision is keyed on the role of the thread whose turn
//! ended, never on a setting inherited from a parent task: a delegate's thread is a
//! `worker` thread of its own task, with its own duty to report, and the nudge of
//! its parent never reaches it.
//!
//! Pure: no I/O. The engine (`tasks::engine`) applies what this decides.

use chorus_proto::domain::ToolSpec;
use chorus_proto::tools::{
    self, ASK_AGENT, ASK_QUESTION, ASK_QUESTIONS, AgentQuestion, COMPLETION_REPORT,
    CompletionReport, DELEGATE_TO_AGENT, Delegation, Plan, Question, Questions, ReportStatus,
    SUBMIT_PLAN, SchemaSettings, parse_args,
};

use super::status::TaskStatus;
use crate::store::ThreadRole;

/// What a run of one role must end each turn with.
#[derive(Debug)]
pub struct Contract {
    pub role: ThreadRole,
    /// Calls that end the role's work: one of them (or a pausing one) must end every
    /// turn. Empty for a role whose last text is its result (an answerer).
    pub finishing: &'static [&'static str],
    /// Calls that end the turn to wait: the answer, or a delegate's report, comes
    /// back as the next message of the same thread.
    pub pausing: &'static [&'static str],
}

const PLANNER: Contract = Contract {
    role: ThreadRole::Planner,
    finishing: &[SUBMIT_PLAN, ASK_QUESTIONS],
    pausing: &[],
};

const WORKER: Contract = Contract {
    role: ThreadRole::Worker,
    finishing: &[COMPLETION_REPORT],
    pausing: &[ASK_QUESTION, DELEGATE_TO_AGENT, ASK_AGENT],
};

const ANSWERER: Contract = Contract {
    role: ThreadRole::Answerer,
    finishing: &[],
    pausing: &[ASK_AGENT],
};

/// The contract of `role`.
pub fn of(role: ThreadRole) -> &'static Contract {
    match role {
        ThreadRole::Planner => &PLANNER,
        ThreadRole::Worker => &WORKER,
        ThreadRole::Answerer => &ANSWERER,
    }
}

impl Contract {
    /// The role's tools, finishing ones first.
    pub fn tools(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.finishing.iter().chain(self.pausing).copied()
    }

    /// Whether `name` (any of a tool's names) is one of this role's tools; its
    /// Chorus name if so.
    pub fn owns(&self, name: &str) -> Option<&'static str> {
        let tool = tools::find_any(name)?;
        self.tools().find(|t| *t == tool.name)
    }

    /// The specs a run of this role is offered beside its agent's tools: every one
    /// ends the turn.
    pub fn specs(&self, settings: &SchemaSettings) -> Vec<ToolSpec> {
        self.tools()
            .filter_map(tools::find_any)
            .map(|tool| ToolSpec {
                ends_turn: true,
                ..tool.spec(settings)
            })
            .collect()
    }
}

/// A control tool's call, read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "tool", content = "arguments", rename_all = "snake_case")]
pub enum Call {
    SubmitPlan(Plan),
    AskQuestions(Questions),
    CompletionReport(CompletionReport),
    AskQuestion(Question),
    DelegateToAgent(Delegation),
    AskAgent(AgentQuestion),
}

impl Call {
    /// Reads a call of the tool named `tool` (its Chorus name). The error says what
    /// is wrong, for the model.
    pub fn parse(tool: &str, arguments: &str) -> Result<Call, String> {
        let wrong = |e: serde_json::Error| {
            let schema = tools::find_any(tool)
                .map(|t| (t.parameters)(&SchemaSettings::default()).to_string())
                .unwrap_or_default();
            format!("{tool} was not called as its schema says ({e}); the schema: {schema}")
        };
        Ok(match tool {
            SUBMIT_PLAN => Call::SubmitPlan(parse_args(arguments).map_err(wrong)?),
            ASK_QUESTIONS => {
                let questions: Questions = parse_args(arguments).map_err(wrong)?;
                check_questions(&questions)?;
                Call::AskQuestions(questions)
            }
            COMPLETION_REPORT => Call::CompletionReport(parse_args(arguments).map_err(wrong)?),
            ASK_QUESTION => Call::AskQuestion(parse_args(arguments).map_err(wrong)?),
            DELEGATE_TO_AGENT => Call::DelegateToAgent(parse_args(arguments).map_err(wrong)?),
            ASK_AGENT => Call::AskAgent(parse_args(arguments).map_err(wrong)?),
            other => return Err(format!("{other} is not a control tool")),
        })
    }

    /// The Chorus name of the tool called.
    pub fn tool(&self) -> &'static str {
        match self {
            Call::SubmitPlan(_) => SUBMIT_PLAN,
            Call::AskQuestions(_) => ASK_QUESTIONS,
            Call::CompletionReport(_) => COMPLETION_REPORT,
            Call::AskQuestion(_) => ASK_QUESTION,
            Call::DelegateToAgent(_) => DELEGATE_TO_AGENT,
            Call::AskAgent(_) => ASK_AGENT,
        }
    }

    /// What the model is told when the call is accepted: its turn is over, and what
    /// comes next.
    pub fn accepted(&self) -> String {
        match self {
            Call::SubmitPlan(plan) => format!(
                "Plan recorded (assignee: {}). Your turn is over: end it now.",
                plan.assignee
            ),
            Call::AskQuestions(q) => format!(
                "{} question{} sent to the person. Your turn is over: end it now; the answers come back as your next message.",
                q.questions.len(),
                if q.questions.len() == 1 { "" } else { "s" }
            ),
            Call::CompletionReport(r) => format!(
                "Report recorded ({}). Your turn is over: end it now.",
                r.status.as_str()
            ),
            Call::AskQuestion(_) => "Question sent to the person. Your turn is over: end it now; the answer comes back as your next message.".into(),
            Call::DelegateToAgent(d) => format!(
                "Sub-task handed to {}. Your turn is over: end it now; its report comes back as your next message.",
                d.agent
            ),
            Call::AskAgent(a) => format!(
                "Question sent to {}. Your turn is over: end it now; the answer comes back as your next message.",
                a.agent
            ),
        }
    }
}

fn check_questions(questions: &Questions) -> Result<(), String> {
    if questions.questions.is_empty() {
        return Err("ask_questions needs at least one question".into());
    }
    let mut seen = std::collections::HashSet::new();
    for q in &questions.questions {
        if q.id.trim().is_empty() || q.question.trim().is_empty() {
            return Err("every question needs an id and a question".into());
        }
        if !seen.insert(q.id.as_str()) {
            return Err(format!(
                "two questions have the id {:?}; give each its own",
                q.id
            ));
        }
    }
    Ok(())
}

/// What becomes of a turn that ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnDecision {
    /// It ended with this control call: apply its outcome.
    Apply(Call),
    /// No control call: send this one follow-up into the same thread.
    FollowUp(String),
    /// Still none after the follow-up: the run broke the contract.
    Violation,
    /// A role with no finishing duty (an answerer): its last text is its result.
    Answer,
}

/// The check at the end of a turn of `role`: `call` is the control call the turn
/// made (if any), `followed_up` whether this turn answered the follow-up.
pub fn on_turn_end(role: ThreadRole, call: Option<Call>, followed_up: bool) -> TurnDecision {
    let contract = of(role);
    match call {
        Some(call) => TurnDecision::Apply(call),
        None if contract.finishing.is_empty() => TurnDecision::Answer,
        None if followed_up => TurnDecision::Violation,
        None => TurnDecision::FollowUp(follow_up(contract)),
    }
}

/// The one follow-up a turn without a control call gets, generated from the role's
/// definition. It names the calls and says to make one now: never to wait or check
/// (a nudge that says "wait for …" sends agents into polling loops).
pub fn follow_up(contract: &Contract) -> String {
    let settings = SchemaSettings::default();
    let lines: Vec<String> = contract
        .tools()
        .filter_map(tools::find_any)
        .map(|t| format!("- `{}`: {}", t.wire_name(), (t.description)(&settings)))
        .collect();
    format!(
        "Your turn ended without a call of {}. Every turn of yours on this task must end \
         with one of these tool calls:\n{}\nMake one of these calls now, as your next step; \
         do not wait, poll or check for anything first. If you end your turn again without \
         one, the task fails.",
        contract
            .tools()
            .map(|t| format!("`{t}`"))
            .collect::<Vec<_>>()
            .join(" or "),
        lines.join("\n")
    )
}

/// The task status an accepted call leads to (`review`: the task was created with
/// `"review": true`, so a completed report waits for a person's acceptance).
pub fn status_after(call: &Call, review: bool) -> TaskStatus {
    match call {
        Call::SubmitPlan(_) => TaskStatus::Planned,
        Call::AskQuestions(_) => TaskStatus::AwaitingInput,
        Call::CompletionReport(report) => match report.status {
            ReportStatus::Complete if review => TaskStatus::Review,
            ReportStatus::Complete => TaskStatus::Completed,
            ReportStatus::Blocked => TaskStatus::Blocked,
            ReportStatus::Failed => TaskStatus::Failed,
        },
        Call::AskQuestion(_) | Call::DelegateToAgent(_) | Call::AskAgent(_) => TaskStatus::Waiting,
    }
}

/// The system prompt of the planning agent, when Chorus creates it.
pub const PLANNER_PROMPT: &str = "You are the planner of a task board. Each conversation \
is one task a person created. Read the task, look at what you need to (you can read files), \
and then end your turn in one of exactly two ways: call `submit_plan` with a summary, \
requirements, acceptance criteria, the steps, and the agent to assign (one of the agents \
listed in the task); or, when you cannot plan without knowing more, call `ask_questions` \
with short, specific questions (offer options where the choice is between a few). Answers \
come back as your next message; then plan, or ask again. Never do the work yourself.";

#[cfg(test)]
mod tests {
    use super::*;

    fn report(status: &str) -> Call {
        Call::parse(
            COMPLETION_REPORT,
            &format!(r#"{{"status":"{status}","summary":"s","output":"o"}}"#),
        )
        .unwrap()
    }

    /// Each role offers exactly its tools, every one ending the turn, and owns them
    /// under any of their names; no role owns another's.
    #[test]
    fn each_role_offers_and_owns_exactly_its_tools() {
        let settings = SchemaSettings::default();
        let names = |role| {
            of(role)
                .specs(&settings)
                .into_iter()
                .map(|s| {
                    assert!(s.ends_turn, "{} ends the turn", s.name);
                    s.name
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(names(ThreadRole::Planner), [SUBMIT_PLAN, ASK_QUESTIONS]);
        assert_eq!(
            names(ThreadRole::Worker),
            [
                COMPLETION_REPORT,
                ASK_QUESTION,
                DELEGATE_TO_AGENT,
                ASK_AGENT
            ]
        );
        assert_eq!(names(ThreadRole::Answerer), [ASK_AGENT]);
        assert_eq!(
            of(ThreadRole::Worker).owns("completion_report"),
            Some(COMPLETION_REPORT)
        );
        assert_eq!(of(ThreadRole::Planner).owns(COMPLETION_REPORT), None);
        assert_eq!(of(ThreadRole::Worker).owns(SUBMIT_PLAN), None);
        assert_eq!(of(ThreadRole::Worker).owns("bash"), None);
    }

    /// A turn with a call applies it; without one, one follow-up naming the role's own
    /// tools, then a violation; an answerer's last text is its answer.
    #[test]
    fn a_turn_without_a_control_call_gets_one_follow_up_then_fails() {
        let call = report("complete");
        assert_eq!(
            on_turn_end(ThreadRole::Worker, Some(call.clone()), true),
            TurnDecision::Apply(call)
        );
        let TurnDecision::FollowUp(text) = on_turn_end(ThreadRole::Worker, None, false) else {
            panic!("a follow-up");
        };
        assert!(text.contains("`completion_report`"), "{text}");
        assert!(
            !text.contains("submit_plan"),
            "only the role's own tools: {text}"
        );
        assert_eq!(
            on_turn_end(ThreadRole::Worker, None, true),
            TurnDecision::Violation
        );
        let TurnDecision::FollowUp(text) = on_turn_end(ThreadRole::Planner, None, false) else {
            panic!("a follow-up");
        };
        assert!(text.contains("`submit_plan` or `ask_questions`"), "{text}");
        assert!(!text.contains("completion_report"), "{text}");
        assert_eq!(
            on_turn_end(ThreadRole::Answerer, None, false),
            TurnDecision::Answer
        );
    }

    #[test]
    fn each_outcome_leads_to_its_status() {
        assert_eq!(
            status_after(&report("complete"), false),
            TaskStatus::Completed
        );
        assert_eq!(status_after(&report("complete"), true), TaskStatus::Review);
        assert_eq!(status_after(&report("blocked"), true), TaskStatus::Blocked);
        assert_eq!(status_after(&report("failed"), false), TaskStatus::Failed);
        let ask = Call::parse(ASK_QUESTION, r#"{"question":"which?"}"#).unwrap();
        assert_eq!(status_after(&ask, false), TaskStatus::Waiting);
        let plan = Call::parse(
            SUBMIT_PLAN,
            r#"{"summary":"s","requirements":[],"acceptance_criteria":[],"steps":[],"assignee":"coder"}"#,
        )
        .unwrap();
        assert_eq!(status_after(&plan, false), TaskStatus::Planned);
    }

    #[test]
    fn a_wrong_call_says_what_is_wrong() {
        let e = Call::parse(COMPLETION_REPORT, r#"{"status":"done","summary":"s"}"#).unwrap_err();
        assert!(e.contains("schema"), "{e}");
        let e = Call::parse(
            ASK_QUESTIONS,
            r#"{"questions":[{"id":"q","question":"a"},{"id":"q","question":"b"}]}"#,
        )
        .unwrap_err();
        assert!(e.contains("two questions"), "{e}");
        assert!(Call::parse(ASK_QUESTIONS, r#"{"questions":[]}"#).is_err());
    }
}
