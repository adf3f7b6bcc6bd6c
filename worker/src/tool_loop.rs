//! The tool loop (SPEC C1): call the model, run the tools it asks for in order, give
//! it the results, and repeat until it ends its turn. Every model call and every tool
//! execution is a step, reported to the control plane as it starts and as it ends.
//!
//! This module knows nothing of gRPC: it reports through an [`EventSink`].

use std::time::Instant;

use chorus_proto::domain::{ChatMessage, StepEnded, StepKind, StepStarted, Usage, WorkerEvent};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::model::{ModelClient, ModelError, ModelRequest, StopReason};
use crate::tools::ToolBox;

/// Where a run's events go (the connection forwards them to the control plane).
#[derive(Clone)]
pub struct EventSink(mpsc::UnboundedSender<WorkerEvent>);

impl EventSink {
    pub fn new(sender: mpsc::UnboundedSender<WorkerEvent>) -> Self {
        EventSink(sender)
    }

    pub fn send(&self, event: WorkerEvent) {
        // If the connection is gone the worker is shutting down; nothing to do.
        let _ = self.0.send(event);
    }
}

/// Numbers steps and reports their start and end.
struct Steps<'a> {
    run_id: &'a str,
    next: u32,
    sink: &'a EventSink,
}

struct OpenStep {
    number: u32,
    started: Instant,
}

impl Steps<'_> {
    fn begin(&mut self, kind: StepKind, description: String) -> OpenStep {
        let number = self.next;
        self.next += 1;
        self.sink.send(WorkerEvent::StepStarted(StepStarted {
            run_id: self.run_id.to_string(),
            number,
            kind,
            description,
            started_at_ms: chrono::Utc::now().timestamp_millis(),
        }));
        OpenStep {
            number,
            started: Instant::now(),
        }
    }

    fn end(&self, step: OpenStep, failed: bool, usage: Option<Usage>) {
        self.sink.send(WorkerEvent::StepEnded(StepEnded {
            run_id: self.run_id.to_string(),
            number: step.number,
            ended_at_ms: chrono::Utc::now().timestamp_millis(),
            duration_ms: step.started.elapsed().as_millis() as u64,
            failed,
            usage,
        }));
    }
}

pub struct LoopInput<'a> {
    pub run_id: &'a str,
    pub model: &'a str,
    pub system_prompt: &'a str,
    pub messages: Vec<ChatMessage>,
    pub first_step_number: u32,
    pub max_iterations: u32,
}

/// Why a run ended without the model finishing its turn.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Model(#[from] ModelError),
    #[error(
        "stopped after {0} model calls without the model finishing; raise CHORUS_MAX_ITERATIONS or split the task"
    )]
    IterationCap(u32),
    #[error("cancelled: {0}")]
    Cancelled(String),
}

/// Text sent when the model's answer was cut off by its output limit.
const CONTINUE_PROMPT: &str =
    "Your previous answer was cut off by the output limit. Continue exactly where it stopped.";

/// Runs the loop; returns the model's final text.
pub async fn run<M: ModelClient>(
    model: &M,
    tools: &ToolBox,
    input: LoopInput<'_>,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<String, LoopError> {
    let schemas = tools.schemas();
    let mut messages = input.messages;
    let mut steps = Steps {
        run_id: input.run_id,
        next: input.first_step_number.max(1),
        sink,
    };
    let emit = |message: &ChatMessage| {
        sink.send(WorkerEvent::MessageAppended {
            run_id: input.run_id.to_string(),
            message: message.clone(),
        })
    };

    for _ in 0..input.max_iterations {
        let step = steps.begin(StepKind::LlmCall, format!("Calling LLM ({})", input.model));
        let request = ModelRequest {
            model: input.model,
            system: input.system_prompt,
            messages: &messages,
            tools: &schemas,
        };
        let span = tracing::info_span!("llm_call", model = input.model, step = step.number);
        let reply = tokio::select! {
            reply = model.complete(&request).instrument(span) => reply,
            _ = cancel.cancelled() => {
                steps.end(step, true, None);
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
        };
        let reply = match reply {
            Ok(reply) => {
                steps.end(step, false, reply.usage);
                reply
            }
            Err(e) => {
                steps.end(step, true, None);
                return Err(e.into());
            }
        };

        let assistant = ChatMessage::assistant(reply.content.clone(), reply.tool_calls.clone());
        emit(&assistant);
        messages.push(assistant);

        if reply.tool_calls.is_empty() {
            if reply.stop == StopReason::MaxTokens {
                // Keep the partial answer and let the model go on (seed 000).
                let nudge = ChatMessage::user(CONTINUE_PROMPT);
                messages.push(nudge);
                continue;
            }
            return Ok(reply.content);
        }

        for call in &reply.tool_calls {
            if cancel.is_cancelled() {
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
            let step = steps.begin(
                StepKind::Tool,
                format!("Executing {}", ToolBox::describe(call)),
            );
            let span = tracing::info_span!("tool", tool = %call.name, step = step.number);
            let outcome = tools.execute(call).instrument(span).await;
            steps.end(step, outcome.is_error, None);
            let result = ChatMessage::tool_result(call, outcome.content, outcome.is_error);
            emit(&result);
            messages.push(result);
        }
    }
    Err(LoopError::IterationCap(input.max_iterations))
}
