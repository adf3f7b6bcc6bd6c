//! Following one thread live (`chorus send`): the feed's events in, what to print
//! and do out. Pure: the I/O (the event stream, the prompt) is in `send`.

use chorus_proto::domain::{Role, StepKind};

use super::render::{Style, duration_ms, one_line};
use crate::feed::{FeedEvent, StatusDetail};

/// What the follower does with an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Print this (no newline added: streamed text continues a line).
    Print(String),
    /// A person must answer this approval.
    Ask {
        approval_id: String,
        question: String,
    },
    /// The approval is no longer waiting (answered here or elsewhere, or expired).
    Answered { approval_id: String },
    /// The thread ended.
    Done {
        status: String,
        error: Option<String>,
    },
}

/// Keeps a question at the terminal readable while events go on arriving: its prompt
/// is on a line of its own, and whatever is printed while it waits goes above a fresh
/// copy of it rather than after it on its line (pure: text in, text to write out).
#[derive(Debug, Default)]
pub struct Prompt {
    /// The prompt shown while a question waits.
    open: Option<String>,
    /// The cursor is right after the prompt.
    at_prompt: bool,
}

/// What the terminal shows while an approval waits.
pub const APPROVE_PROMPT: &str = "  approve? [y/n] ";

impl Prompt {
    /// Asks: the question on its own line, then the prompt.
    pub fn ask(&mut self, question: &str) -> String {
        let lead = if self.at_prompt { "\n" } else { "" };
        self.open = Some(APPROVE_PROMPT.to_string());
        self.at_prompt = true;
        format!("{lead}{question}\n{APPROVE_PROMPT}")
    }

    /// Asks again after an answer it cannot read (the person's line ended the last).
    pub fn again(&mut self, text: &str) -> String {
        self.at_prompt = true;
        text.to_string()
    }

    /// `text` as it must be written now: below the prompt, then the prompt again.
    pub fn print(&mut self, text: &str) -> String {
        let Some(prompt) = &self.open else {
            return text.to_string();
        };
        let mut out = String::new();
        if self.at_prompt {
            out.push('\n');
        }
        out.push_str(text);
        self.at_prompt = text.ends_with('\n');
        if self.at_prompt {
            out.push_str(prompt);
        }
        out
    }

    /// The person answered at the prompt (their line ended it).
    pub fn answered_here(&mut self) {
        self.open = None;
        self.at_prompt = false;
    }

    /// Answered elsewhere (or expired): ends the prompt's line.
    pub fn answered_elsewhere(&mut self) -> String {
        self.open = None;
        if std::mem::take(&mut self.at_prompt) {
            "\n".into()
        } else {
            String::new()
        }
    }
}

pub struct Follow {
    thread_id: u64,
    style: Style,
    /// Text was streamed since the last line end.
    mid_line: bool,
    /// Text was streamed since the last stored message (so it is not printed twice).
    streamed: bool,
    /// The kind of each open step, by number.
    open_steps: std::collections::HashMap<u32, StepKind>,
}

impl Follow {
    pub fn new(thread_id: u64, style: Style) -> Self {
        Follow {
            thread_id,
            style,
            mid_line: false,
            streamed: false,
            open_steps: std::collections::HashMap::new(),
        }
    }

    /// A line of its own, after ending any streamed text.
    fn line(&mut self, text: String) -> Action {
        let lead = if self.mid_line { "\n" } else { "" };
        self.mid_line = false;
        Action::Print(format!("{lead}{text}\n"))
    }

    /// Ends a line of streamed text, if one is open.
    fn end_line(&mut self) -> Option<Action> {
        std::mem::take(&mut self.mid_line).then(|| Action::Print("\n".into()))
    }

    /// The actions for one feed event of thread `thread_id` (events of other
    /// threads are not this one's).
    pub fn on_event(&mut self, thread_id: Option<u64>, event: &FeedEvent) -> Vec<Action> {
        if thread_id != Some(self.thread_id) {
            return Vec::new();
        }
        let style = self.style;
        match event {
            FeedEvent::StepStarted(step) => {
                self.open_steps.insert(step.number, step.kind);
                let description = one_line(&step.description, 100);
                vec![self.line(style.dim(&format!("-> step {}: {description}", step.number)))]
            }
            FeedEvent::StepEnded(step) => {
                let took = duration_ms(step.duration_ms);
                let number = step.number;
                let kind = self.open_steps.remove(&number);
                if step.failed {
                    vec![self.line(style.red(&format!("   step {number} failed ({took})")))]
                } else if kind == Some(StepKind::LlmCall) {
                    // The model's text shows the step; its end only ends the line.
                    self.end_line().into_iter().collect()
                } else {
                    vec![self.line(style.dim(&format!("   done ({took})")))]
                }
            }
            FeedEvent::Text { text, .. } => {
                if text.is_empty() {
                    return Vec::new();
                }
                self.mid_line = !text.ends_with('\n');
                self.streamed = true;
                vec![Action::Print(text.clone())]
            }
            FeedEvent::Message(message) => {
                let streamed = std::mem::take(&mut self.streamed);
                let content = message.content.as_str();
                match message.role {
                    Role::Assistant if !content.is_empty() && !streamed => {
                        vec![self.line(content.trim_end().to_string())]
                    }
                    Role::Tool => {
                        let head = if message.is_error {
                            style.red("   error:")
                        } else {
                            style.dim("   result:")
                        };
                        vec![self.line(format!("{head} {}", style.dim(&one_line(content, 100))))]
                    }
                    _ => Vec::new(),
                }
            }
            FeedEvent::Approval(asked) => {
                let question = format!(
                    "{} {} wants {}",
                    style.yellow("? approval"),
                    asked.tool,
                    one_line(&asked.actions.join(", "), 120)
                );
                let mut actions: Vec<Action> = self.end_line().into_iter().collect();
                actions.push(Action::Ask {
                    approval_id: asked.approval_id.clone(),
                    question,
                });
                actions
            }
            FeedEvent::ApprovalAnswered(answered) => {
                let by = answered
                    .answer
                    .by()
                    .map(|b| format!(" by {b}"))
                    .unwrap_or_default();
                vec![
                    Action::Answered {
                        approval_id: answered.approval_id.clone(),
                    },
                    self.line(style.dim(&format!("   {}{by}", answered.answer.as_str()))),
                ]
            }
            FeedEvent::Status(change) => {
                match &change.detail {
                    _ if change.status.is_finished() => {
                        let mut actions: Vec<Action> = self.end_line().into_iter().collect();
                        actions.push(Action::Done {
                            status: change.status.as_str().to_string(),
                            error: change.error().map(str::to_string),
                        });
                        actions
                    }
                    StatusDetail::Resumed { resumed, reason } => {
                        vec![self.line(
                            style.yellow(&format!("   resumed (attempt {resumed}): {reason}")),
                        )]
                    }
                    _ => Vec::new(),
                }
            }
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    const PLAIN: Style = Style { color: false };

    fn feed(follow: &mut Follow, events: &[(&str, Value)]) -> Vec<Action> {
        events
            .iter()
            .flat_map(|(kind, data)| {
                let thread_id = data.get("thread_id").map_or(Some(7), Value::as_u64);
                let event = FeedEvent::from_wire(kind, data.clone()).unwrap();
                follow.on_event(thread_id, &event)
            })
            .collect()
    }

    fn printed(actions: &[Action]) -> String {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::Print(p) => Some(p.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_run_reads_as_steps_and_streamed_text_printed_once() {
        let mut f = Follow::new(7, PLAIN);
        let actions = feed(
            &mut f,
            &[
                (
                    "step_started",
                    json!({"number": 1, "kind": "llm_call", "description": "Calling model m"}),
                ),
                ("text", json!({"text": "Hel"})),
                ("text", json!({"text": "lo"})),
                (
                    "step_ended",
                    json!({"number": 1, "duration_ms": 1200, "failed": false}),
                ),
                ("message", json!({"role": "assistant", "content": "Hello"})),
                (
                    "step_started",
                    json!({"number": 2, "kind": "tool", "description": "view notes.txt"}),
                ),
                (
                    "message",
                    json!({"role": "tool", "content": "1 line\nmore", "is_error": false}),
                ),
                (
                    "step_ended",
                    json!({"number": 2, "duration_ms": 5, "failed": false}),
                ),
                (
                    "message",
                    json!({"role": "assistant", "content": "Done, no stream."}),
                ),
                ("status", json!({"status": "completed"})),
                // Another thread's events are not this one's.
                ("text", json!({"text": "elsewhere", "thread_id": 8})),
            ],
        );
        assert_eq!(
            printed(&actions),
            "-> step 1: Calling model m\nHello\n-> step 2: view notes.txt\n   result: 1 line …\n   done (0.0 s)\nDone, no stream.\n"
        );
        assert_eq!(
            actions.last(),
            Some(&Action::Done {
                status: "completed".into(),
                error: None
            })
        );
    }

    #[test]
    fn lines_printed_while_a_question_waits_go_above_its_prompt() {
        let mut p = Prompt::default();
        assert_eq!(p.print("-> step 1\n"), "-> step 1\n");
        let mut screen = p.ask("? approval bash wants tool:bash:rm x");
        screen += &p.print("-> step 2: waiting\n");
        screen += &p.print("Hel");
        screen += &p.print("lo\n");
        assert_eq!(
            screen,
            "? approval bash wants tool:bash:rm x\n  approve? [y/n] \n-> step 2: waiting\n  approve? [y/n] \nHello\n  approve? [y/n] "
        );
        // Every line of it is whole: no step line glued to a prompt.
        assert!(screen.lines().all(|l| !l.contains("] -")), "{screen}");
        assert_eq!(p.answered_elsewhere(), "\n");
        assert_eq!(p.print("-> step 3\n"), "-> step 3\n");
        p.ask("?");
        p.answered_here();
        assert_eq!(p.print("done\n"), "done\n");
    }

    #[test]
    fn an_approval_is_asked_and_its_answer_ends_the_question() {
        let mut f = Follow::new(7, PLAIN);
        let actions = feed(
            &mut f,
            &[
                (
                    "approval",
                    json!({"approval_id": "ab12", "tool": "create_file",
                                     "actions": ["tool:create_file:plan.md"]}),
                ),
                (
                    "approval_answered",
                    json!({"approval_id": "ab12", "outcome": "denied", "by": "api"}),
                ),
                (
                    "status",
                    json!({"status": "failed", "error": "the model gave up"}),
                ),
            ],
        );
        assert_eq!(
            actions[0],
            Action::Ask {
                approval_id: "ab12".into(),
                question: "? approval create_file wants tool:create_file:plan.md".into()
            }
        );
        assert_eq!(
            actions[1],
            Action::Answered {
                approval_id: "ab12".into()
            }
        );
        assert_eq!(actions[2], Action::Print("   denied by api\n".into()));
        assert_eq!(
            actions[3],
            Action::Done {
                status: "failed".into(),
                error: Some("the model gave up".into())
            }
        );
    }
}
