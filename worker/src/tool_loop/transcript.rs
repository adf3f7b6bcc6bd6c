//! Transcript repair: a history the model APIs accept.
//!
//! Both APIs refuse a history in which an assistant's tool call has no result before
//! the next turn, or a tool result answers no call. Such histories happen: a worker
//! killed while a tool ran, a run cancelled mid-turn, a thread continued later. Before
//! a history is sent again, every call without a result gets one saying it was
//! interrupted and its effect is unknown (so the model checks before repeating it,
//! and no tool is ever silently run again), and results that answer no call are
//! dropped.
//!
//! Pure: no I/O. Invariant: after `repair`, every assistant tool call is followed,
//! before the next user or assistant message, by exactly one result with its id.

use std::collections::HashSet;

use chorus_proto::domain::{ChatMessage, Role, ToolCall};

/// The result given to a call that never got one.
pub const INTERRUPTED_RESULT: &str = "interrupted: this tool call did not finish (the run \
     was interrupted while it ran, or before), so its effect is unknown. Check the \
     workspace before running it again.";

/// What a repair did.
#[derive(Debug, Default, PartialEq)]
pub struct Repair {
    /// Results added where a call had none.
    pub added: usize,
    /// Results dropped that answered no call.
    pub dropped: usize,
    /// The added results that come after the history's last message: they answer
    /// the calls it ended with (a worker killed while they ran), so they can be
    /// stored at the end of the thread, where they belong. The thread's stored
    /// history then has a result for every call.
    pub at_end: Vec<ChatMessage>,
}

/// Repairs `messages` in place.
pub fn repair(messages: &mut Vec<ChatMessage>) -> Repair {
    let mut out: Vec<ChatMessage> = Vec::with_capacity(messages.len());
    let mut open: Vec<ToolCall> = Vec::new();
    let (mut added, mut dropped) = (0, 0);
    let close = |open: &mut Vec<ToolCall>, out: &mut Vec<ChatMessage>, added: &mut usize| {
        for call in open.drain(..) {
            out.push(ChatMessage::tool_result(&call, INTERRUPTED_RESULT, true));
            *added += 1;
        }
    };
    for message in messages.drain(..) {
        match message.role {
            Role::Tool => {
                let id = message.tool_call_id.as_deref().unwrap_or_default();
                match open.iter().position(|c| c.id == id) {
                    Some(at) => {
                        open.remove(at);
                        out.push(message);
                    }
                    None => dropped += 1,
                }
            }
            Role::Assistant => {
                close(&mut open, &mut out, &mut added);
                // A call id repeated within one turn could not be answered twice.
                let mut seen = HashSet::new();
                open = message
                    .tool_calls
                    .iter()
                    .filter(|c| seen.insert(c.id.clone()))
                    .cloned()
                    .collect();
                out.push(message);
            }
            Role::User | Role::System => {
                close(&mut open, &mut out, &mut added);
                out.push(message);
            }
        }
    }
    let before_end = out.len();
    close(&mut open, &mut out, &mut added);
    let at_end = out[before_end..].to_vec();
    *messages = out;
    Repair {
        added,
        dropped,
        at_end,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "bash".into(),
            arguments: "{}".into(),
        }
    }

    fn shape(messages: &[ChatMessage]) -> Vec<String> {
        messages
            .iter()
            .map(|m| match m.role {
                Role::Tool => format!(
                    "tool:{}{}",
                    m.tool_call_id.as_deref().unwrap_or("?"),
                    if m.content == INTERRUPTED_RESULT {
                        "!"
                    } else {
                        ""
                    }
                ),
                Role::Assistant => format!(
                    "assistant:{}",
                    m.tool_calls
                        .iter()
                        .map(|c| c.id.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                ),
                role => role.as_str().to_string(),
            })
            .collect()
    }

    #[test]
    fn a_whole_history_is_left_as_it_is() {
        let mut messages = vec![
            ChatMessage::user("go"),
            ChatMessage::assistant("", vec![call("a"), call("b")]),
            ChatMessage::tool_result(&call("a"), "ok", false),
            ChatMessage::tool_result(&call("b"), "ok", false),
            ChatMessage::assistant("done", vec![]),
        ];
        let before = messages.clone();
        assert_eq!(repair(&mut messages), Repair::default());
        assert_eq!(messages, before);
    }

    #[test]
    fn calls_without_results_are_answered_as_interrupted_where_they_belong() {
        let mut messages = vec![
            ChatMessage::user("go"),
            ChatMessage::assistant("", vec![call("a"), call("b")]),
            ChatMessage::tool_result(&call("a"), "ok", false),
            // The worker died while `b` ran; the user wrote again.
            ChatMessage::user("are you there?"),
            ChatMessage::assistant("", vec![call("c")]),
            // The history ends in a call with no result.
        ];
        let repaired = repair(&mut messages);
        assert_eq!((repaired.added, repaired.dropped), (2, 0));
        assert_eq!(
            shape(&messages),
            [
                "user",
                "assistant:a,b",
                "tool:a",
                "tool:b!",
                "user",
                "assistant:c",
                "tool:c!"
            ]
        );
        let interrupted = &messages[3];
        assert!(interrupted.is_error);
        assert_eq!(interrupted.tool_call_id.as_deref(), Some("b"));
        // Only `c`'s result answers the last message; `b`'s belongs mid-history.
        assert_eq!(repaired.at_end, [messages[6].clone()]);
    }

    #[test]
    fn results_that_answer_no_call_are_dropped() {
        let mut messages = vec![
            ChatMessage::user("go"),
            ChatMessage::tool_result(&call("ghost"), "from nowhere", false),
            ChatMessage::assistant("", vec![call("a")]),
            ChatMessage::tool_result(&call("a"), "ok", false),
            ChatMessage::tool_result(&call("a"), "twice", false),
        ];
        let repaired = repair(&mut messages);
        assert_eq!((repaired.added, repaired.dropped), (0, 2));
        assert!(repaired.at_end.is_empty());
        assert_eq!(shape(&messages), ["user", "assistant:a", "tool:a"]);
        assert_eq!(messages[2].content, "ok");
    }
}
