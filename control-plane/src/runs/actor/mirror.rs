//! The trace and metrics mirror of an agent's runs: the control plane's view of a
//! run as spans (the run's own, continuing a caller's trace or the interrupted
//! attempt's; one per step its worker reports) and the model-call and tool-call
//! metrics of the steps that end.

use chorus_proto::domain::{RunAssignment, StepKind, WorkerEvent};

use super::{ActiveRun, AgentActor};
use crate::runs::assignment::Attempt;
use crate::store::{AgentRecord, ThreadRecord};

impl ActiveRun {
    /// Opens or closes the span of the step an event is about.
    pub(super) fn trace(&mut self, event: &WorkerEvent) {
        match event {
            WorkerEvent::StepStarted(step) => {
                let span = tracing::info_span!(
                    parent: &self.span,
                    "step",
                    number = step.number,
                    kind = step.kind.as_str(),
                    description = %step.description,
                    duration_ms = tracing::field::Empty,
                    failed = tracing::field::Empty,
                );
                self.open_steps.insert(step.number, (step.kind, span));
            }
            WorkerEvent::StepEnded(step) => {
                if let Some((kind, span)) = self.open_steps.remove(&step.number) {
                    let took = std::time::Duration::from_millis(step.duration_ms);
                    match kind {
                        StepKind::LlmCall => crate::metrics::model_call(
                            &self.assignment.model.provider,
                            &self.assignment.model.model,
                            step.failed,
                            took,
                            step.usage.map(|u| (u.input_tokens, u.output_tokens)),
                        ),
                        StepKind::Tool => crate::metrics::tool_call(took),
                        _ => {}
                    }
                    span.record("duration_ms", step.duration_ms);
                    span.record("failed", step.failed);
                    span.in_scope(|| tracing::debug!("step ended"));
                }
            }
            _ => {}
        }
    }
}

impl AgentActor {
    /// The span of a new run of `thread`: a child of the caller's trace, or of the
    /// attempt it resumes (`next_trace`, taken).
    pub(super) fn run_span(
        &mut self,
        agent: &AgentRecord,
        thread: &ThreadRecord,
        run: &RunAssignment,
        attempt: Attempt,
    ) -> tracing::Span {
        let span = tracing::info_span!(
            "run",
            agent = %agent.name,
            thread_id = thread.id,
            run_id = %run.run_id,
            attempt = attempt.number,
            model = %run.agent.model,
        );
        // A caller's trace, or the trace of the attempt this one resumes.
        if let Some((parent, resumed)) = self.next_trace.take() {
            crate::telemetry::continue_trace(&span, &parent);
            if let Some(reason) = resumed {
                use tracing_opentelemetry::OpenTelemetrySpanExt;
                span.add_event(
                    "resumed",
                    vec![
                        crate::telemetry::KeyValue::new("reason", reason),
                        crate::telemetry::KeyValue::new("attempt", i64::from(attempt.number)),
                    ],
                );
            }
        }
        span
    }
}

/// Labels a run's span as an agent's invocation (the OpenInference and GenAI
/// attributes trace viewers read).
pub(super) fn label(span: &tracing::Span, agent: &AgentRecord, thread: &ThreadRecord) {
    crate::telemetry::label(
        span,
        &agent.name,
        Some(thread.id),
        vec![
            crate::telemetry::KeyValue::new("openinference.span.kind", "AGENT"),
            crate::telemetry::KeyValue::new("gen_ai.operation.name", "invoke_agent"),
            crate::telemetry::KeyValue::new("gen_ai.agent.name", agent.name.clone()),
        ],
    );
}
