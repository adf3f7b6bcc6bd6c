//! Summaries on request (`Summarize`): one model call, through the same relay
//! clients as runs, that writes what the control plane asks for (a saved session's
//! description, a long thread's context for its continuation).
//!
//! Not a run: no tools (tool calls and results go as text), no steps, no run id. Invariant: every request is answered
//! by exactly one `Summary` event, the trimmed text or an error that says what went
//! wrong (the runner sends it; cancellation at shutdown is such an error too).

use std::time::{Duration, Instant};

use chorus_proto::domain::{ChatMessage, SummaryRequest, WorkerEvent};
use tokio_util::sync::CancellationToken;

use crate::model::http::CallLimits;
use crate::model::wire_names::to_wire;
use crate::model::{MessageCache, ModelClient, ModelError, ModelRequest, StopReason};
use crate::tool_loop::{ClientFactory, EventSink, retry::backoff};

/// Output tokens a summary may use: a summary is short by nature.
pub const SUMMARY_MAX_TOKENS: u32 = 1024;

/// The last message sent: without it a model would go on with the conversation
/// (answer its last question; Anthropic even continues a final assistant message as
/// its own) instead of writing the summary. (Consecutive user messages are fine: the
/// Anthropic format merges them.)
pub const WRITE_IT_NOW: &str =
    "Now write what the system prompt asks for about the conversation above, and nothing else.";

/// The conversation with its tool calls and results written as text: a summary
/// offers no tools, and the APIs refuse tool blocks in a request without tools
/// (Anthropic and Bedrock: "Requests which include tool_use or tool_result blocks
/// must define tools"). As text, a call without a result (a run cut by a crash)
/// needs no repair, so nothing reads "interrupted" that was not.
pub fn as_text(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    use chorus_proto::domain::Role;
    let mut names = std::collections::HashMap::new();
    let mut out = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::Assistant if !m.tool_calls.is_empty() => {
                let mut text = m.content.clone();
                for call in &m.tool_calls {
                    names.insert(call.id.as_str(), call.name.as_str());
                    if !text.is_empty() {
                        text.push('\n');
                    }
                    // Named as the model knows the tools.
                    text.push_str(&format!(
                        "[called {} with {}]",
                        to_wire(&call.name),
                        call.arguments
                    ));
                }
                out.push(ChatMessage::assistant(text, Vec::new()));
            }
            Role::Tool => {
                let name = m
                    .tool_call_id
                    .as_deref()
                    .and_then(|id| names.get(id))
                    .map(|name| to_wire(name))
                    .unwrap_or("a tool".into());
                let outcome = if m.is_error { "failed" } else { "answered" };
                out.push(ChatMessage::user(format!(
                    "[{name} {outcome}:]\n{}",
                    m.content
                )));
            }
            _ => out.push(m.clone()),
        }
    }
    out
}

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
        // Stopping mid-summary is expected (a shutdown); the control plane falls back.
        Err(e) if cancel.is_cancelled() => tracing::info!(error = %e, "no summary"),
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
    let mut messages = as_text(&request.messages);
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
            // A summary cut off by the server is no summary: ask again.
            Ok(reply) if reply.stop == StopReason::Interrupted => (
                format!(
                    "the server cut the summary off after {} bytes",
                    reply.content.len()
                ),
                None,
            ),
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
                limits: Default::default(),
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
        assert!(
            sent.iter()
                .all(|m| m.tool_calls.is_empty() && m.tool_call_id.is_none())
        );
        let sent: Vec<&str> = sent.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            sent,
            vec![
                "build it",
                r#"[called bash with {"command":"make"}]"#,
                WRITE_IT_NOW
            ],
            "tool calls as text (nothing made up for the missing result), the ask last"
        );
    }

    #[test]
    fn tool_results_are_written_with_the_name_of_their_call() {
        let call = ToolCall {
            id: "c1".into(),
            name: "file.read".into(),
            arguments: r#"{"path":"a"}"#.into(),
        };
        let text = as_text(&[
            ChatMessage::user("read a"),
            ChatMessage::assistant("Reading.", vec![call.clone()]),
            ChatMessage::tool_result(&call, "hello", false),
            ChatMessage::assistant("It says hello.", vec![]),
        ]);
        let contents: Vec<&str> = text.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            contents,
            [
                "read a",
                "Reading.\n[called file_read with {\"path\":\"a\"}]",
                "[file_read answered:]\nhello",
                "It says hello."
            ]
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
