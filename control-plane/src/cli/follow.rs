//! Following one thread live (`chorus send`): the feed's events in, what to print
//! and do out. Pure: the I/O (the event stream, the prompt) is in `send`.

use serde_json::Value;

use super::render::{Style, duration_ms, one_line};

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

pub struct Follow {
    thread_id: u64,
    style: Style,
    /// Text was streamed since the last line end.
    mid_line: bool,
    /// Text was streamed since the last stored message (so it is not printed twice).
    streamed: bool,
    /// The kind of each open step, by number.
    open_steps: std::collections::HashMap<u64, String>,
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

    /// The actions for one feed event (`kind`, its data with `thread_id`).
    pub fn on_event(&mut self, kind: &str, data: &Value) -> Vec<Action> {
        if data["thread_id"].as_u64() != Some(self.thread_id) {
            return Vec::new();
        }
        let style = self.style;
        match kind {
            "step_started" => {
                if let Some(number) = data["number"].as_u64() {
                    let kind = data["kind"].as_str().unwrap_or("").to_string();
                    self.open_steps.insert(number, kind);
                }
                let description = one_line(data["description"].as_str().unwrap_or(""), 100);
                vec![self.line(style.dim(&format!(
                    "-> step {}: {description}",
                    data["number"].as_u64().unwrap_or(0)
                )))]
            }
            "step_ended" => {
                let took = data["duration_ms"]
                    .as_u64()
                    .map(duration_ms)
                    .unwrap_or_default();
                let number = data["number"].as_u64().unwrap_or(0);
                let kind = self.open_steps.remove(&number).unwrap_or_default();
                if data["failed"] == true {
                    vec![self.line(style.red(&format!("   step {number} failed ({took})")))]
                } else if kind == "llm_call" {
                    // The model's text shows the step; its end only ends the line.
                    self.end_line().into_iter().collect()
                } else {
                    vec![self.line(style.dim(&format!("   done ({took})")))]
                }
            }
            "text" => {
                let text = data["text"].as_str().unwrap_or("").to_string();
                if text.is_empty() {
                    return Vec::new();
                }
                self.mid_line = !text.ends_with('\n');
                self.streamed = true;
                vec![Action::Print(text)]
            }
            "message" => {
                let streamed = std::mem::take(&mut self.streamed);
                let content = data["content"].as_str().unwrap_or("");
                match data["role"].as_str() {
                    Some("assistant") if !content.is_empty() && !streamed => {
                        vec![self.line(content.trim_end().to_string())]
                    }
                    Some("tool") => {
                        let head = if data["is_error"] == true {
                            style.red("   error:")
                        } else {
                            style.dim("   result:")
                        };
                        vec![self.line(format!("{head} {}", style.dim(&one_line(content, 100))))]
                    }
                    _ => Vec::new(),
                }
            }
            "approval" => {
                let id = data["approval_id"].as_str().unwrap_or("").to_string();
                let actions = data["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", ");
                let question = format!(
                    "{} {} wants {}",
                    style.yellow("? approval"),
                    data["tool"].as_str().unwrap_or("a tool"),
                    one_line(&actions, 120)
                );
                let mut actions: Vec<Action> = self.end_line().into_iter().collect();
                actions.push(Action::Ask {
                    approval_id: id,
                    question,
                });
                actions
            }
            "approval_answered" => {
                let id = data["approval_id"].as_str().unwrap_or("").to_string();
                let outcome = data["outcome"].as_str().unwrap_or("answered");
                let by = data["by"]
                    .as_str()
                    .map(|b| format!(" by {b}"))
                    .unwrap_or_default();
                vec![
                    Action::Answered { approval_id: id },
                    self.line(style.dim(&format!("   {outcome}{by}"))),
                ]
            }
            "status" => match data["status"].as_str() {
                Some(status @ ("completed" | "failed" | "killed")) => {
                    let mut actions: Vec<Action> = self.end_line().into_iter().collect();
                    actions.push(Action::Done {
                        status: status.to_string(),
                        error: data["error"].as_str().map(str::to_string),
                    });
                    actions
                }
                Some("running") if data["resumed"].is_u64() => {
                    vec![self.line(style.yellow(&format!(
                        "   resumed (attempt {}): {}",
                        data["resumed"],
                        data["reason"].as_str().unwrap_or("")
                    )))]
                }
                _ => Vec::new(),
            },
            _ => Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: Style = Style { color: false };

    fn feed(follow: &mut Follow, events: &[(&str, Value)]) -> Vec<Action> {
        events
            .iter()
            .flat_map(|(kind, data)| {
                let mut data = data.clone();
                data["thread_id"] = data.get("thread_id").cloned().unwrap_or(json!(7));
                follow.on_event(kind, &data)
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
