//! What the worker may put on the link. One message over the link's limit would end
//! the stream that carries every run of the agent (gRPC ends a stream on a message it
//! cannot decode), so every event is measured before it is queued: free text that may
//! be shortened (a step's description, an error) is cut to fit; anything else that
//! cannot fit is not sent, and its run fails with an error naming the bound.
//! Live text (a `TextDelta`) that cannot fit is only dropped: the reply it belongs to
//! is measured again when it is appended. Tool results are cut to
//! [`MAX_TOOL_RESULT_BYTES`], head and tail with a note ([`cap_tool_result`]).
//! Pure: no I/O.

use chorus_proto::domain::{Role, WorkerEvent};
use chorus_proto::limits::{
    MAX_LINK_MESSAGE_BYTES, MAX_TOOL_RESULT_BYTES, event_fits, event_len, human_bytes,
    truncate_middle,
};

/// An event too big for the link, which was not sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is {}, more than the {} one message between worker and control plane may carry",
    human_bytes(*len),
    human_bytes(MAX_LINK_MESSAGE_BYTES)
)]
pub struct TooLarge {
    pub what: &'static str,
    pub len: usize,
}

/// The event as it may be sent, or why it cannot be.
pub fn fit(event: WorkerEvent) -> Result<WorkerEvent, TooLarge> {
    if event_fits(&event) {
        return Ok(event);
    }
    let cut = |text: String| truncate_middle(&text, MAX_TOOL_RESULT_BYTES, LINK_NOTE).into_owned();
    match event {
        WorkerEvent::StepStarted(mut s) => {
            s.description = cut(s.description);
            Ok(WorkerEvent::StepStarted(s))
        }
        WorkerEvent::RunFailed {
            run_id,
            kind,
            error,
        } => Ok(WorkerEvent::RunFailed {
            run_id,
            kind,
            error: cut(error),
        }),
        WorkerEvent::RunCompleted { run_id, final_text } => Ok(WorkerEvent::RunCompleted {
            run_id,
            final_text: cut(final_text),
        }),
        WorkerEvent::JobStarted(mut t) => {
            t.command = cut(t.command);
            Ok(WorkerEvent::JobStarted(t))
        }
        WorkerEvent::JobEnded { job_id, mut end } => {
            end.detail = cut(end.detail);
            Ok(WorkerEvent::JobEnded { job_id, end })
        }
        // Exactly one Summary answers a request: an answer too long is cut, not lost.
        WorkerEvent::Summary { request_id, result } => Ok(WorkerEvent::Summary {
            request_id,
            result: result.map(cut).map_err(cut),
        }),
        other => Err(TooLarge {
            what: describe(&other),
            len: event_len(&other),
        }),
    }
}

const LINK_NOTE: &str = "shortened to fit the link between worker and control plane";

fn describe(event: &WorkerEvent) -> &'static str {
    match event {
        WorkerEvent::MessageAppended { message, .. } if message.role == Role::Tool => {
            "the tool result"
        }
        WorkerEvent::MessageAppended { .. } => "the model's reply",
        WorkerEvent::ToolCheck { .. } => "the tool call",
        WorkerEvent::TextDelta { .. } => "the streamed text",
        _ => "an event",
    }
}

/// A tool result as it is reported and shown to the model: at most
/// [`MAX_TOOL_RESULT_BYTES`], its head and tail with a note on what was cut.
pub fn cap_tool_result(content: String) -> String {
    if content.len() <= MAX_TOOL_RESULT_BYTES {
        return content;
    }
    let why = format!(
        "tool results are limited to {}; narrow the command or read the output in parts",
        human_bytes(MAX_TOOL_RESULT_BYTES)
    );
    truncate_middle(&content, MAX_TOOL_RESULT_BYTES, &why).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::{ChatMessage, FailureKind, StepKind, StepStarted, ToolCall};

    fn huge() -> String {
        "x".repeat(MAX_LINK_MESSAGE_BYTES + 1)
    }

    #[test]
    fn small_events_pass_unchanged() {
        let event = WorkerEvent::RunFailed {
            run_id: "r".into(),
            kind: FailureKind::Internal,
            error: "boom".into(),
        };
        assert_eq!(fit(event.clone()), Ok(event));
    }

    #[test]
    fn a_reply_over_the_limit_is_refused_with_the_bound_named() {
        let err = fit(WorkerEvent::MessageAppended {
            run_id: "r".into(),
            message: ChatMessage::assistant(huge(), vec![]),
        })
        .unwrap_err();
        assert_eq!(err.what, "the model's reply");
        assert_eq!(
            err.to_string(),
            "the model's reply is 32.0 MiB, more than the 32.0 MiB one message between worker and control plane may carry"
        );
    }

    #[test]
    fn a_tool_call_or_live_text_over_the_limit_is_refused() {
        let call = ToolCall {
            id: "c".into(),
            name: "create_file".into(),
            arguments: huge(),
        };
        let check = WorkerEvent::ToolCheck {
            request_id: 1,
            run_id: "r".into(),
            call,
            trace_context: Default::default(),
        };
        assert_eq!(fit(check).unwrap_err().what, "the tool call");
        let text = WorkerEvent::TextDelta {
            run_id: "r".into(),
            step: 1,
            text: huge(),
        };
        assert_eq!(fit(text).unwrap_err().what, "the streamed text");
    }

    #[test]
    fn free_text_is_shortened_to_fit() {
        let Ok(WorkerEvent::StepStarted(step)) = fit(WorkerEvent::StepStarted(StepStarted {
            run_id: "r".into(),
            number: 1,
            kind: StepKind::Tool,
            description: huge(),
            started_at_ms: 0,
            runs_in: None,
        })) else {
            panic!("a description is shortened, not refused");
        };
        assert!(step.description.len() <= MAX_TOOL_RESULT_BYTES);
        assert!(step.description.contains("to fit the link"));
        let Ok(WorkerEvent::RunFailed { error, kind, .. }) = fit(WorkerEvent::RunFailed {
            run_id: "r".into(),
            kind: FailureKind::Limit,
            error: huge(),
        }) else {
            panic!("an error is shortened, not refused");
        };
        assert_eq!(kind, FailureKind::Limit, "the kind survives the cut");
        assert!(error.len() <= MAX_TOOL_RESULT_BYTES);
    }

    #[test]
    fn a_20_mb_tool_result_keeps_head_and_tail_and_says_why() {
        let output = format!("first line\n{}last line\n", "y".repeat(20_000_000));
        let capped = cap_tool_result(output);
        assert!(capped.len() <= MAX_TOOL_RESULT_BYTES);
        assert!(capped.starts_with("first line\n") && capped.ends_with("last line\n"));
        assert!(
            capped.contains("bytes cut from the middle of 20000021 bytes"),
            "{}",
            &capped[500_000..500_300]
        );
        assert!(capped.contains("tool results are limited to 1.0 MiB"));
        assert_eq!(cap_tool_result("short".into()), "short");
    }
}
