//! One model call, retried on passing failures: each failed attempt, each wait and
//! each new attempt is a step of its own, so the user sees them.

use std::time::{Duration, Instant};

use chorus_proto::domain::{RetryPolicy, StepKind, WorkerEvent};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{LoopError, ModelSelection, Steps};
use crate::model::{ModelClient, ModelError, ModelReply, ModelRequest};

/// One model call, retried on passing failures within the policy. The failed call,
/// each wait, and each new attempt are steps of their own, so the user sees them.
pub(super) async fn call_with_retries<C: ModelClient>(
    client: &C,
    request: &ModelRequest<'_>,
    selection: &ModelSelection,
    policy: RetryPolicy,
    steps: &Steps,
    cancel: &CancellationToken,
) -> Result<ModelReply, LoopError> {
    let first_attempt = Instant::now();
    let max_total = Duration::from_millis(policy.max_total_ms);
    let max_attempts = policy.max_attempts.max(1);
    let mut attempt = 1u32;
    loop {
        let description = if attempt == 1 {
            format!("Calling LLM ({})", selection.display)
        } else {
            format!(
                "Calling LLM ({}), attempt {attempt} of {max_attempts}",
                selection.display
            )
        };
        let step = steps.begin(StepKind::LlmCall, description);
        let step_number = step.number;
        let sink = steps.sink.clone();
        let run_id = steps.run_id.to_string();
        let mut on_text = move |text: &str| {
            sink.send(WorkerEvent::TextDelta {
                run_id: run_id.clone(),
                step: step_number,
                text: text.to_string(),
            })
        };
        let span = tracing::info_span!(
            "llm_call",
            provider = %selection.route.provider,
            model = %selection.route.model,
            step = step_number,
            attempt
        );
        crate::telemetry::label(&span, genai::call(selection));
        if crate::telemetry::record_content() {
            crate::telemetry::label(&span, genai::input(request));
        }
        let result = tokio::select! {
            result = client.stream(request, &mut on_text).instrument(span.clone()) => result,
            _ = cancel.cancelled() => {
                steps.end(step, true, None);
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
        };
        genai::outcome(&span, &result);
        if crate::telemetry::record_content()
            && let Ok(reply) = &result
        {
            crate::telemetry::label(&span, genai::output(reply));
        }
        drop(span);
        let (message, retry_after) = match result {
            Ok(reply) => {
                steps.end(step, false, reply.usage);
                return Ok(reply);
            }
            Err(ModelError::Retryable {
                message,
                retry_after,
            }) => {
                steps.end(step, true, None);
                (message, retry_after)
            }
            Err(other) => {
                steps.end(step, true, None);
                return Err(LoopError::Model(other));
            }
        };
        let delay = retry_after
            .unwrap_or_else(|| backoff(attempt, Duration::from_millis(policy.base_delay_ms)));
        if attempt >= max_attempts || first_attempt.elapsed() + delay > max_total {
            return Err(LoopError::GaveUp {
                attempts: attempt,
                elapsed: first_attempt.elapsed(),
                last: message,
            });
        }
        tracing::warn!(attempt, ?delay, %message, "model call failed; retrying");
        let wait = steps.begin(
            StepKind::Wait,
            format!(
                "Waiting {:.1}s before retrying: {message}",
                delay.as_secs_f64()
            ),
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => steps.end(wait, false, None),
            _ = cancel.cancelled() => {
                steps.end(wait, true, None);
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
        }
        attempt += 1;
    }
}

/// The GenAI semantic conventions (and the OpenInference names LLM-trace UIs
/// read) on a model call's span.
mod genai {
    use opentelemetry::{KeyValue, Value};

    use crate::model::{ModelError, ModelReply, ModelRequest};
    use crate::tool_loop::ModelSelection;

    /// The most of a message's text recorded on a span, and of all of them.
    const MESSAGE_CHARS: usize = 8 * 1024;
    const TOTAL_CHARS: usize = 64 * 1024;

    fn cut(text: &str, max: usize) -> String {
        match text.char_indices().nth(max) {
            Some((at, _)) => format!("{}… [cut]", &text[..at]),
            None => text.to_string(),
        }
    }

    /// What the model was given (the operator opted in): the system prompt, and
    /// the latest messages within the size bound, oldest first.
    pub fn input(request: &ModelRequest<'_>) -> Vec<KeyValue> {
        let mut budget = TOTAL_CHARS;
        let mut messages = Vec::new();
        for m in request.messages.iter().rev() {
            let content = cut(&m.content, MESSAGE_CHARS);
            let size = content.len();
            if size > budget {
                break;
            }
            budget -= size;
            messages.push(serde_json::json!({"role": m.role.as_str(), "content": content}));
        }
        messages.reverse();
        let messages = serde_json::Value::Array(messages).to_string();
        vec![
            KeyValue::new(
                "gen_ai.system_instructions",
                cut(request.system, MESSAGE_CHARS),
            ),
            KeyValue::new("gen_ai.input.messages", messages.clone()),
            KeyValue::new("input.value", messages),
            KeyValue::new("input.mime_type", "application/json"),
        ]
    }

    /// What the model answered (the operator opted in).
    pub fn output(reply: &ModelReply) -> Vec<KeyValue> {
        let calls: Vec<serde_json::Value> = reply
            .tool_calls
            .iter()
            .map(|c| {
                serde_json::json!({"id": c.id, "name": c.name, "arguments": cut(&c.arguments, MESSAGE_CHARS)})
            })
            .collect();
        let message = serde_json::json!([{
            "role": "assistant",
            "content": cut(&reply.content, MESSAGE_CHARS),
            "tool_calls": calls,
        }]);
        vec![
            KeyValue::new("gen_ai.output.messages", message.to_string()),
            KeyValue::new("output.value", cut(&reply.content, MESSAGE_CHARS)),
        ]
    }

    pub fn call(selection: &ModelSelection) -> Vec<KeyValue> {
        vec![
            KeyValue::new("gen_ai.operation.name", "chat"),
            KeyValue::new("gen_ai.provider.name", selection.route.provider.clone()),
            KeyValue::new("gen_ai.request.model", selection.route.model.clone()),
            KeyValue::new("openinference.span.kind", "LLM"),
            KeyValue::new("llm.provider", selection.route.provider.clone()),
            KeyValue::new("llm.model_name", selection.route.model.clone()),
        ]
    }

    fn int(n: u64) -> i64 {
        i64::try_from(n).unwrap_or(i64::MAX)
    }

    pub fn outcome(span: &tracing::Span, result: &Result<ModelReply, ModelError>) {
        match result {
            Ok(reply) => {
                let mut attributes = Vec::new();
                if let Some(model) = &reply.model {
                    attributes.push(KeyValue::new("gen_ai.response.model", model.clone()));
                }
                if let Some(reason) = &reply.finish_reason {
                    attributes.push(KeyValue::new(
                        "gen_ai.response.finish_reasons",
                        Value::Array(vec![opentelemetry::StringValue::from(reason.clone())].into()),
                    ));
                }
                if let Some(usage) = reply.usage {
                    let (input, output) = (int(usage.input_tokens), int(usage.output_tokens));
                    attributes.extend([
                        KeyValue::new("gen_ai.usage.input_tokens", input),
                        KeyValue::new("gen_ai.usage.output_tokens", output),
                        KeyValue::new("llm.token_count.prompt", input),
                        KeyValue::new("llm.token_count.completion", output),
                        KeyValue::new("llm.token_count.total", input.saturating_add(output)),
                    ]);
                }
                crate::telemetry::label(span, attributes);
            }
            Err(error) => {
                let retryable = matches!(error, ModelError::Retryable { .. });
                crate::telemetry::label(
                    span,
                    vec![KeyValue::new(
                        "error.type",
                        if retryable { "retryable" } else { "failed" },
                    )],
                );
                crate::telemetry::event(
                    span,
                    "exception",
                    vec![
                        KeyValue::new("exception.message", error.to_string()),
                        KeyValue::new("chorus.retryable", retryable),
                    ],
                );
            }
        }
    }
}

/// Exponential backoff from `base`, capped at 30 s, with ±20 % jitter so many
/// workers hitting one rate limit do not retry in lockstep.
pub fn backoff(attempt: u32, base: Duration) -> Duration {
    let base = base.saturating_mul(1u32 << attempt.saturating_sub(1).min(5));
    let base = base.min(Duration::from_secs(30));
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let jitter = (nanos % 401) as f64 / 1000.0 - 0.2; // -0.2 ..= +0.2
    base.mul_f64(1.0 + jitter)
}
