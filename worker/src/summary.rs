//! Summaries on request (`Summarize`): one model call, through the same relay
//! clients as runs, that writes what the control plane asks for (a saved session's
//! description, a long thread's context for its continuation).
//!
//! Not a run: no tools, no steps, no run id. Invariant: every request is answered
//! by exactly one `Summary` event, the trimmed text or an error that says what went
//! wrong (the runner sends it; cancellation at shutdown is such an error too).

use std::time::{Duration, Instant};

use chorus_proto::domain::{ChatMessage, SummaryRequest, WorkerEvent};
use tokio_util::sync::CancellationToken;

use crate::model::http::CallLimits;
use crate::model::{MessageCache, ModelClient, ModelError, ModelRequest};
use crate::tool_loop::{ClientFactory, EventSink, retry::backoff, transcript};

/// Output tokens a summary may use: a summary is short by nature.
pub const SUMMARY_MAX_TOKENS: u32 = 1024;

/// The last message sent: without it a model would go on with the conversation
/// (answer its last question; Anthropic even continues a final assistant message as
/// its own) instead of writing the summary. (Consecutive user messages are fine: the
/// Anthropic format merges them.)
pub const WRITE_IT_NOW: &str =
    "Now write what the system prompt asks for about the conversation above, and nothing else.";

/// Answers `request` with exactly one `Summary` event.
pub async fn answer<F: ClientFactory>(
    clients: &F,
    request: &SummaryRequest,
    sink: &EventSink,
    cancel: &CancellationToken,
) {
    let result = summarize(clients, request, cancel).await;
    match &result {
        Ok(text) => tracing::info!(chars = text.chars().count(), "summary written"),
        Err(e) => tracing::warn!(error = %e, "no summary"),
    }
    sink.send(WorkerEvent::Summary {
        request_id: request.request_id,
        result,
    });
}

/// Writes the summary `request` asks for: the model's answer, trimmed, or why there
/// is none.
pub async fn summarize<F: ClientFactory>(
    clients: &F,
    request: &SummaryRequest,
    cancel: &CancellationToken,
) -> Result<String, String> {
    let model = format!("{}/{}", request.model.provider, request.model.model);
    if request.messages.is_empty() {
        return Err("there is nothing to summarise: the request has no messages".into());
    }
    let client = clients
        .client(&request.model)
        .map_err(|e| format!("cannot call the model {model} for the summary: {e}"))?;
    let mut messages = request.messages.clone();
    // A history cut by a crash or kill is one the APIs would refuse.
    transcript::repair(&mut messages);
    messages.push(ChatMessage::user(WRITE_IT_NOW));
    let cache = MessageCache::default();
    let call = ModelRequest {
        model: &request.model.model,
        system: &request.instruction,
        messages: &messages,
        tools: &[],
        max_tokens: SUMMARY_MAX_TOKENS,
        cache: &cache,
        limits: CallLimits::from(&request.retry),
    };
    let policy = request.retry;
    let started = Instant::now();
    let max_attempts = policy.max_attempts.max(1);
    let mut attempt = 1u32;
    // Nobody watches a summary being written: no live text.
    let mut no_live_text = |_: &str| {};
    loop {
        let result = tokio::select! {
            result = client.stream(&call, &mut no_live_text) => result,
            _ = cancel.cancelled() => {
                return Err("the worker stopped before the summary was written".into());
            }
        };
        let (message, retry_after) = match result {
            Ok(reply) => {
                let text = reply.content.trim();
                return if text.is_empty() {
                    Err(format!(
                        "the model {model} answered with an empty summary; try again or use another model"
                    ))
                } else {
                    Ok(text.to_string())
                };
            }
            Err(ModelError::Retryable {
                message,
                retry_after,
            }) => (message, retry_after),
            Err(other) => {
                return Err(format!(
                    "the model {model} could not write the summary: {other}"
                ));
            }
        };
        let delay = retry_after
            .unwrap_or_else(|| backoff(attempt, Duration::from_millis(policy.base_delay_ms)));
        if attempt >= max_attempts
            || started.elapsed() + delay > Duration::from_millis(policy.max_total_ms)
        {
            return Err(format!(
                "the model {model} could not write the summary after {attempt} {} in {:.0?}: {message}",
                if attempt == 1 { "attempt" } else { "attempts" },
                started.elapsed()
            ));
        }
        tracing::warn!(attempt, ?delay, %message, "summary call failed; retrying");
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = cancel.cancelled() => {
                return Err("the worker stopped before the summary was written".into());
            }
        }
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::{ModelRoute, RetryPolicy, Sequenced, ToolCall};
    use tokio::sync::mpsc;

    use super::*;
    use crate::model::StopReason;
    use crate::tool_loop::tests::{Scripted, reply};

    fn request() -> SummaryRequest {
        let call = ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"make"}"#.into(),
        };
        SummaryRequest {
            request_id: 9,
            model: ModelRoute {
                provider: "p".into(),
                api: ModelRoute::OPENAI_CHAT.into(),
                relay_path: "/llm/p".into(),
                model: "m".into(),
            },
            instruction: "Summarise this conversation in one line.".into(),
            // Cut by a kill: the call has no result.
            messages: vec![
                ChatMessage::user("build it"),
                ChatMessage::assistant("", vec![call]),
            ],
            retry: RetryPolicy {
                max_attempts: 2,
                base_delay_ms: 1,
                ..RetryPolicy::default()
            },
        }
    }

    /// Every event the request produced.
    async fn answered(model: &Scripted, request: &SummaryRequest) -> Vec<Sequenced> {
        let (tx, mut rx) = mpsc::unbounded_channel();
        answer(
            model,
            request,
            &EventSink::new(tx),
            &CancellationToken::new(),
        )
        .await;
        let mut events = Vec::new();
        while let Ok(event) = rx.try_recv() {
            events.push(event);
        }
        events
    }

    #[tokio::test]
    async fn a_summary_is_one_call_without_tools_and_one_trimmed_answer() {
        let model = Scripted::new(vec![reply("  Built the project.\n", StopReason::EndTurn)]);
        let events = answered(&model, &request()).await;
        assert_eq!(
            events,
            vec![Sequenced {
                seq: 0,
                event: WorkerEvent::Summary {
                    request_id: 9,
                    result: Ok("Built the project.".into()),
                },
            }],
            "exactly one Summary, of no run: no steps, no live text"
        );
        let requests = model.requests.lock().unwrap().clone();
        assert_eq!(
            requests,
            vec![(
                "Summarise this conversation in one line.".to_string(),
                0,
                SUMMARY_MAX_TOKENS
            )]
        );
        let sent = model.seen.lock().unwrap()[0].clone();
        let sent: Vec<&str> = sent.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            sent,
            vec!["build it", "", transcript::INTERRUPTED_RESULT, WRITE_IT_NOW],
            "repaired, and asked for the summary last"
        );
    }

    #[tokio::test]
    async fn a_model_error_is_one_summary_that_says_what_went_wrong() {
        let cases = [
            (
                vec![Err(ModelError::Fatal("401: invalid api key".into()))],
                "the model p/m could not write the summary: ",
            ),
            (
                vec![
                    Err(ModelError::retryable("503 overloaded")),
                    Err(ModelError::retryable("503 overloaded")),
                ],
                "the model p/m could not write the summary after 2 attempts",
            ),
            (
                vec![reply("  ", StopReason::EndTurn)],
                "the model p/m answered with an empty summary",
            ),
        ];
        for (script, expected) in cases {
            let model = Scripted::new(script);
            let events = answered(&model, &request()).await;
            let [
                Sequenced {
                    seq: 0,
                    event:
                        WorkerEvent::Summary {
                            request_id: 9,
                            result: Err(error),
                        },
                },
            ] = events.as_slice()
            else {
                panic!("one Summary with an error expected, got {events:?}");
            };
            assert!(error.starts_with(expected), "{error}");
        }
        // A passing failure is retried.
        let model = Scripted::new(vec![
            Err(ModelError::retryable("503 overloaded")),
            reply("Fine.", StopReason::EndTurn),
        ]);
        let events = answered(&model, &request()).await;
        assert_eq!(events.len(), 1);
        assert!(matches!(
            &events[0].event,
            WorkerEvent::Summary { result: Ok(text), .. } if text == "Fine."
        ));
        // Nothing to summarise is said before any model is asked.
        let model = Scripted::new(vec![]);
        let mut empty = request();
        empty.messages.clear();
        let events = answered(&model, &empty).await;
        assert!(matches!(
            &events[..],
            [Sequenced { event: WorkerEvent::Summary { result: Err(e), .. }, .. }] if e.contains("nothing to summarise")
        ));
    }
}
