//! The size limits of the chorus.v1 link, in one place for both ends.
//!
//! gRPC refuses a message over its decode limit by ending the whole stream, and one
//! stream carries every run of an agent. So neither end may ever *send* a message
//! over [`MAX_LINK_MESSAGE_BYTES`]: the sender measures each message first and turns
//! one that would not fit into an error for its own run (or trims it), and the
//! receiver's decode limit is the same number, as a backstop.
//!
//! The numbers fit together: the link carries a model reply of 16 MiB (text plus tool
//! arguments, the size the model client is meant to cap replies at) with room to
//! spare, and a tool result is cut to [`MAX_TOOL_RESULT_BYTES`] before it is
//! reported. Anything bigger fails only the run that produced it.

use std::borrow::Cow;

use prost::Message;

use crate::domain::{ChatMessage, ControlCommand, WorkerEvent};
use crate::generated as pb;

/// Largest encoded message either end sends or accepts on the `Attach` stream (both
/// directions), 32 MiB: room for a 16 MiB model reply plus framing.
pub const MAX_LINK_MESSAGE_BYTES: usize = 32 * 1024 * 1024;

/// A tool result is cut to this many bytes (its head and tail, with a note) before
/// the worker reports it: well below the link limit, and more than any model can
/// usefully read in one result.
pub const MAX_TOOL_RESULT_BYTES: usize = 1024 * 1024;

/// The encoded size of a wire message (for the connection modules, which have one).
pub fn encoded_len(message: &impl Message) -> usize {
    message.encoded_len()
}

/// The encoded size of an event on the wire.
pub fn event_len(event: &WorkerEvent) -> usize {
    // Cheap for the common small event; the clone matters only for big ones, which
    // are rare and are exactly the ones that must be measured.
    pb::WorkerMessage::from(event.clone()).encoded_len()
}

/// The encoded size of a command on the wire.
pub fn command_len(command: &ControlCommand) -> usize {
    pb::ControlMessage::from(command.clone()).encoded_len()
}

/// Whether an event fits the link.
pub fn event_fits(event: &WorkerEvent) -> bool {
    // Most events are far below the limit: a generous upper bound settles them
    // without encoding; only big ones are measured exactly.
    upper_bound(event) <= MAX_LINK_MESSAGE_BYTES || event_len(event) <= MAX_LINK_MESSAGE_BYTES
}

/// Per field: its tag, its length prefix and the nesting around it, generously.
const FIELD: usize = 16;

fn message_bound(m: &ChatMessage) -> usize {
    let calls: usize = m
        .tool_calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + c.arguments.len() + 4 * FIELD)
        .sum();
    m.content.len()
        + calls
        + m.tool_call_id.as_ref().map_or(0, String::len)
        + m.tool_name.as_ref().map_or(0, String::len)
        + 8 * FIELD
}

/// At least the encoded size of `event`, and never much more.
fn upper_bound(event: &WorkerEvent) -> usize {
    let text = match event {
        WorkerEvent::Hello {
            worker_version,
            directories,
            volume,
            backends,
            ..
        } => {
            worker_version.len()
                + volume.len()
                + directories
                    .iter()
                    .map(|d| d.agent.len() + d.incarnation.len() + 4 * FIELD)
                    .sum::<usize>()
                + backends
                    .iter()
                    .map(|b| {
                        [&b.version, &b.reason, &b.path]
                            .into_iter()
                            .map(|text| text.as_ref().map_or(0, String::len))
                            .sum::<usize>()
                            + 6 * FIELD
                    })
                    .sum::<usize>()
        }
        WorkerEvent::CliSessionStarted { run_id, session_id } => run_id.len() + session_id.len(),
        WorkerEvent::ResumedCallDone {
            run_id, call_id, ..
        } => run_id.len() + call_id.len(),
        WorkerEvent::Heartbeat { .. } | WorkerEvent::JobEnded { .. } => 0,
        WorkerEvent::StepStarted(s) => s.run_id.len() + s.description.len(),
        WorkerEvent::StepEnded(s) => s.run_id.len(),
        WorkerEvent::MessageAppended { run_id, message } => run_id.len() + message_bound(message),
        WorkerEvent::RunCompleted {
            run_id,
            final_text: t,
        }
        | WorkerEvent::RunFailed {
            run_id, error: t, ..
        }
        | WorkerEvent::TextDelta {
            run_id, text: t, ..
        } => run_id.len() + t.len(),
        WorkerEvent::ToolCheck {
            run_id,
            call,
            trace_context,
            ..
        } => {
            run_id.len()
                + call.id.len()
                + call.name.len()
                + call.arguments.len()
                // Each map entry is a nested message: its key, value and framing.
                + trace_context
                    .iter()
                    .map(|(k, v)| k.len() + v.len() + 3 * FIELD)
                    .sum::<usize>()
        }
        WorkerEvent::JobStarted(t) => t.command.len(),
        WorkerEvent::InputTaken { run_id, .. } => run_id.len(),
        WorkerEvent::Summary { result, .. } => match result {
            Ok(t) | Err(t) => t.len(),
        },
        WorkerEvent::AgentFilesDeleted { agent, result } => {
            agent.len() + result.as_ref().err().map_or(0, String::len)
        }
        WorkerEvent::McpServerState {
            agent,
            server,
            state,
            tools,
            offered,
            error,
        } => {
            agent.len()
                + server.len()
                + state.as_str().len()
                + error.len()
                + tools.iter().map(|t| t.len() + FIELD).sum::<usize>()
                + offered
                    .iter()
                    .map(|t| {
                        t.name.len()
                            + t.wire_name.len()
                            + t.description.len()
                            + t.schema_json.len()
                            + 4 * FIELD
                    })
                    .sum::<usize>()
        }
    };
    let detail = match event {
        WorkerEvent::JobEnded { end, .. } => end.status.as_str().len() + end.detail.len(),
        _ => 0,
    };
    text + detail + 12 * FIELD
}

/// `text` cut to at most `max` bytes: its head and tail with a note in between
/// saying how much was cut and why. Unchanged when it fits.
pub fn truncate_middle<'a>(text: &'a str, max: usize, why: &str) -> Cow<'a, str> {
    if text.len() <= max {
        return Cow::Borrowed(text);
    }
    let note_for = |cut: usize| {
        format!(
            "\n\n[… {cut} bytes cut from the middle of {} bytes: {why} …]\n\n",
            text.len()
        )
    };
    // The note's own length depends on the number in it; size it for the worst case.
    let room = max.saturating_sub(note_for(text.len()).len());
    let head_end = floor_char_boundary(text, room / 2);
    let tail_start = ceil_char_boundary(text, text.len() - (room - room / 2));
    let cut = tail_start - head_end;
    Cow::Owned(format!(
        "{}{}{}",
        &text[..head_end],
        note_for(cut),
        &text[tail_start..]
    ))
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

/// Bytes as a person reads them: "20.0 MiB", "512 bytes".
pub fn human_bytes(n: usize) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if n >= 1024 * 1024 {
        format!("{:.1} MiB", n as f64 / MIB)
    } else if n >= 1024 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::{StepKind, StepStarted, ToolCall};

    #[test]
    fn a_short_text_is_left_alone() {
        assert!(matches!(
            truncate_middle("abc", 10, "why"),
            Cow::Borrowed("abc")
        ));
    }

    #[test]
    fn a_long_text_keeps_head_and_tail_within_the_bound_and_says_what_was_cut() {
        let text = format!(
            "{}{}{}",
            "H".repeat(5000),
            "m".repeat(1_000_000),
            "T".repeat(5000)
        );
        let cut = truncate_middle(&text, 4096, "tool results are limited to 4 KiB");
        assert!(cut.len() <= 4096, "{}", cut.len());
        assert!(cut.starts_with("HHHH") && cut.ends_with("TTTT"));
        assert!(cut.contains("bytes cut from the middle of 1010000 bytes"));
        assert!(cut.contains("tool results are limited to 4 KiB"));
    }

    #[test]
    fn cutting_never_splits_a_character() {
        let text = "é".repeat(10_000);
        for max in [200, 201, 202, 203, 1001] {
            let cut = truncate_middle(&text, max, "x");
            assert!(cut.len() <= max);
        }
    }

    #[test]
    fn sizes_are_measured_as_encoded() {
        let small = WorkerEvent::MessageAppended {
            run_id: "r".into(),
            message: ChatMessage::assistant("hi", vec![]),
        };
        assert!(event_len(&small) < 32 && event_fits(&small));
        let big = WorkerEvent::MessageAppended {
            run_id: "r".into(),
            message: ChatMessage::assistant("x".repeat(MAX_LINK_MESSAGE_BYTES), vec![]),
        };
        assert!(event_len(&big) > MAX_LINK_MESSAGE_BYTES && !event_fits(&big));
    }

    #[test]
    fn the_quick_bound_is_never_below_the_encoded_size() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "create_file".into(),
            arguments: "{\"path\":\"a\"}".repeat(300),
        };
        let events = [
            WorkerEvent::MessageAppended {
                run_id: "r".repeat(36),
                message: ChatMessage::assistant("é".repeat(1000), vec![call.clone(); 64]),
            },
            WorkerEvent::MessageAppended {
                run_id: "r".into(),
                message: ChatMessage::tool_result(&call, "ok", true),
            },
            WorkerEvent::StepStarted(StepStarted {
                run_id: "r".into(),
                number: u32::MAX,
                kind: StepKind::Permission,
                description: "d".repeat(200),
                started_at_ms: i64::MIN,
                runs_in: None,
            }),
            WorkerEvent::ToolCheck {
                request_id: u64::MAX,
                run_id: "r".into(),
                call,
                // W3C limits: traceparent is 55 characters, tracestate at most 512.
                trace_context: std::collections::HashMap::from([
                    ("traceparent".to_string(), "0".repeat(55)),
                    ("tracestate".to_string(), "s".repeat(512)),
                ]),
            },
            WorkerEvent::Heartbeat {
                active_runs: u32::MAX,
            },
        ];
        for event in &events {
            assert!(upper_bound(event) >= event_len(event), "{event:?}");
            assert!(upper_bound(event) <= event_len(event) + 64 * 64 * FIELD);
        }
    }
}
