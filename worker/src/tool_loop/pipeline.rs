//! One tool call, from the model's call to its result: validate → gate (the
//! control plane's permission check) → execute where the resource lives (lock waits
//! shown) → step begin and end → cap the result → report it. The API tool loop
//! calls [`Pipeline::run`] for each call of a reply; other callers of tools
//! (`chorus-tools`, MCP) are meant to call the same function.
//!
//! Which tools exist is what the assignment offers ([`ToolSpec`]s rendered by the
//! control plane's registry), not what this build knows: a call to an offered tool
//! that runs in the control plane and that this build has no definition of is
//! checked here only for being a JSON object, then sent to the gate, which checks it
//! against the registry and carries it out. Tools that run in the worker still go
//! through their executors (and this build's argument checks).

use std::borrow::Cow;

use chorus_proto::domain::{
    ChatMessage, ResumedCall, StepKind, ToolCall, ToolResult, ToolSpec, WorkerEvent,
};
use chorus_proto::tools::{self as registry, RunsIn};
use opentelemetry::KeyValue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::{CUT_OFF_CALL, EventSink, LoopError, OpenStep, Steps};
use crate::gate::{GateMessage, ToolGate};
use crate::tools::{LockWait, ToolBox, ToolOutcome};

/// What one call needs besides itself.
pub struct Pipeline<'a, G> {
    pub gate: &'a G,
    pub tools: &'a ToolBox,
    /// The tools the model is offered now.
    pub offered: &'a [ToolSpec],
    pub run_id: &'a str,
    pub sink: &'a EventSink,
    pub cancel: &'a CancellationToken,
}

impl<G: ToolGate> Pipeline<'_, G> {
    /// Runs one call to its result message, which is reported (`MessageAppended`)
    /// and returned for the transcript, with whether the call itself was unusable.
    /// `cut_off`: the output limit cut the call's arguments.
    pub async fn run(
        &self,
        call: &ToolCall,
        cut_off: bool,
        steps: &Steps,
    ) -> Result<(ChatMessage, bool), LoopError> {
        let outcome = self.execute(call, cut_off, steps).await?.outcome;
        let result = ChatMessage::tool_result(call, outcome.content, outcome.is_error);
        self.sink
            .try_send(WorkerEvent::MessageAppended {
                run_id: self.run_id.to_string(),
                message: result.clone(),
            })
            .map_err(LoopError::TooLarge)?;
        Ok((result, outcome.malformed))
    }

    /// Runs one call to its result, capped as the model gets it, *without*
    /// reporting the result message: for callers whose own transcript reports it
    /// (a CLI's stream, with the CLI's call id). Calls may run concurrently (the
    /// run endpoint serves a CLI that runs tools in parallel): each has its own
    /// steps from the shared counter, its own gate check, and the tools take their
    /// file locks as for two threads of the agent.
    pub async fn execute(
        &self,
        call: &ToolCall,
        cut_off: bool,
        steps: &Steps,
    ) -> Result<Executed, LoopError> {
        let (outcome, deferred) = self.outcome(call, cut_off, steps).await?;
        Ok(Executed {
            outcome: capped(outcome),
            deferred,
        })
    }

    /// Carries out a call that was deferred for a person's approval and is now
    /// answered (`ResumedCall`): refused as the person said, or its result as the
    /// control plane sent it, or run here (no second check: the gate decided and
    /// audited it when the person answered). A tool no longer offered is not run.
    pub async fn resume(
        &self,
        resumed: &ResumedCall,
        steps: &Steps,
    ) -> Result<ToolOutcome, LoopError> {
        let outcome = self.resumed_outcome(resumed, steps).await?;
        // Its audit row gets the result, as a tool message gives it for other calls.
        self.sink.send(WorkerEvent::ResumedCallDone {
            run_id: self.run_id.to_string(),
            call_id: resumed.call.id.clone(),
            is_error: outcome.is_error,
        });
        Ok(outcome)
    }

    async fn resumed_outcome(
        &self,
        resumed: &ResumedCall,
        steps: &Steps,
    ) -> Result<ToolOutcome, LoopError> {
        let (call, runs_in) = locate(&resumed.call, self.offered);
        let call = &call;
        let offered = self.offered.iter().any(|s| s.name == call.name);
        if !resumed.allowed {
            refused_step(call, steps);
            return Ok(ToolOutcome::error(resumed.message.clone()));
        }
        if let Some(result) = &resumed.result {
            let step = steps.begin_tool(
                format!("Executing {} in the control plane", ToolBox::describe(call)),
                RunsIn::ControlPlane,
            );
            steps.end(step, result.is_error, None);
            return Ok(capped(outcome_of(result.clone())));
        }
        if !offered || runs_in != Some(Where::Worker) {
            refused_step(call, steps);
            return Ok(ToolOutcome::error(format!(
                "{} was approved, but the agent is no longer offered it; the call was not run",
                registry::wire_names::to_wire(&call.name)
            )));
        }
        if let Some(unusable) = ToolBox::validate(call) {
            refused_step(call, steps);
            return Ok(unusable);
        }
        Ok(capped(self.execute_here(call, steps).await?))
    }

    /// The outcome, and whether the gate deferred the call.
    async fn outcome(
        &self,
        call: &ToolCall,
        cut_off: bool,
        steps: &Steps,
    ) -> Result<(ToolOutcome, bool), LoopError> {
        let (call, runs_in) = locate(call, self.offered);
        let call = &call;
        // A call that cannot run at all needs no permission: tell the model what is
        // wrong with it right away.
        let unusable = if cut_off {
            Some(ToolOutcome::malformed(CUT_OFF_CALL))
        } else if runs_in == Some(Where::ControlPlaneOnly) {
            arguments_object(call)
        } else {
            ToolBox::validate(call)
        };
        if let Some(outcome) = unusable {
            refused_step(call, steps);
            return Ok((outcome, false));
        }
        if matches!(runs_in, Some(Where::ControlPlane | Where::ControlPlaneOnly)) {
            return self.run_elsewhere(call, steps).await;
        }
        match ask_gate(self.gate, self.run_id, call, steps, self.cancel).await? {
            Gate::Run => Ok((self.execute_here(call, steps).await?, false)),
            Gate::Refused(message) => {
                refused_step(call, steps);
                Ok((ToolOutcome::error(message), false))
            }
            Gate::Deferred(message) => Ok((ToolOutcome::error(message), true)),
            // The worker runs its own tools; a result from the gate for one is taken as
            // it comes (the gate owns whatever it did).
            Gate::Done(result) => {
                let step = steps.begin_tool(
                    format!("Executing {}", ToolBox::describe(call)),
                    RunsIn::ControlPlane,
                );
                steps.end(step, result.is_error, None);
                Ok((outcome_of(result), false))
            }
        }
    }

    /// A tool the control plane executes (its step is open from before the check
    /// until the result is back, marked `runs_in: control_plane`, so the thread
    /// shows it while it waits and the watchdog sees a tool running, not a stuck run).
    async fn run_elsewhere(
        &self,
        call: &ToolCall,
        steps: &Steps,
    ) -> Result<(ToolOutcome, bool), LoopError> {
        let step = steps.begin_tool(
            format!("Executing {} in the control plane", ToolBox::describe(call)),
            RunsIn::ControlPlane,
        );
        let answer = match ask_gate(self.gate, self.run_id, call, steps, self.cancel).await {
            Ok(answer) => answer,
            Err(cancelled) => {
                steps.end(step, true, None);
                return Err(cancelled);
            }
        };
        let (outcome, deferred) = match answer {
            Gate::Done(result) => (outcome_of(result), false),
            Gate::Refused(message) => (ToolOutcome::error(message), false),
            Gate::Deferred(message) => (ToolOutcome::error(message), true),
            Gate::Run => (
                ToolOutcome::error(format!(
                    "{} is carried out by the control plane, which did not run it; the call was not run",
                    registry::wire_names::to_wire(&call.name)
                )),
                false,
            ),
        };
        steps.end(step, outcome.is_error, None);
        Ok((outcome, deferred))
    }

    /// A tool of the worker's, allowed: its step, its trace span, its lock waits.
    async fn execute_here(&self, call: &ToolCall, steps: &Steps) -> Result<ToolOutcome, LoopError> {
        let step = steps.begin_tool(
            format!("Executing {}", ToolBox::describe(call)),
            RunsIn::Worker,
        );
        let span = tracing::info_span!("tool", tool = %call.name, step = step.number);
        crate::telemetry::label(
            &span,
            vec![
                KeyValue::new("gen_ai.operation.name", "execute_tool"),
                KeyValue::new("gen_ai.tool.name", call.name.clone()),
                KeyValue::new("gen_ai.tool.call.id", call.id.clone()),
                KeyValue::new("openinference.span.kind", "TOOL"),
                KeyValue::new("tool.name", call.name.clone()),
            ],
        );
        let outcome = execute_showing_lock_waits(self.tools, call, steps, self.cancel)
            .instrument(span.clone())
            .await;
        if let Ok(outcome) = &outcome
            && outcome.is_error
        {
            crate::telemetry::label(&span, vec![KeyValue::new("error.type", "tool_error")]);
        }
        drop(span);
        match outcome {
            Ok(outcome) => {
                steps.end(step, outcome.is_error, None);
                Ok(outcome)
            }
            Err(cancelled) => {
                steps.end(step, true, None);
                Err(cancelled)
            }
        }
    }
}

/// Where a call runs, as far as the worker can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Worker,
    /// A control-plane tool this build defines too (its arguments checked here).
    ControlPlane,
    /// A control-plane tool only the assignment describes.
    ControlPlaneOnly,
}

/// The call under its Chorus name (the model clients rename only the tools this
/// build knows; an offered one it does not comes back by its wire name), and where
/// it runs: as the offered spec says, else as this build's registry says (an older
/// name, or a tool the profile never offers, which the gate refuses). `None`: no
/// such tool.
fn locate<'a>(call: &'a ToolCall, offered: &[ToolSpec]) -> (Cow<'a, ToolCall>, Option<Where>) {
    let spec = offered
        .iter()
        .find(|s| s.name == call.name)
        .or_else(|| offered.iter().find(|s| s.wire_name == call.name));
    let call = match spec {
        Some(spec) if spec.name != call.name => Cow::Owned(ToolCall {
            name: spec.name.clone(),
            ..call.clone()
        }),
        _ => Cow::Borrowed(call),
    };
    let known = registry::find(&call.name);
    let runs_in = match (spec.map(|s| s.runs_in), known) {
        (Some(RunsIn::ControlPlane), None) => Some(Where::ControlPlaneOnly),
        (Some(RunsIn::ControlPlane), Some(_)) => Some(Where::ControlPlane),
        (Some(RunsIn::Worker), _) => Some(Where::Worker),
        (None, Some(tool)) => Some(match tool.runs_in {
            RunsIn::Worker => Where::Worker,
            RunsIn::ControlPlane => Where::ControlPlane,
        }),
        (None, None) => None,
    };
    (call, runs_in)
}

/// The one check of a control-plane tool this build does not define: its arguments
/// are a JSON object (or empty); the gate checks the rest against the registry.
fn arguments_object(call: &ToolCall) -> Option<ToolOutcome> {
    if call.arguments.trim().is_empty() {
        return None;
    }
    match serde_json::from_str::<serde_json::Value>(&call.arguments) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(_) => Some(ToolOutcome::malformed(format!(
            "the arguments of {} must be a JSON object; the call was not run",
            registry::wire_names::to_wire(&call.name)
        ))),
        Err(e) => Some(ToolOutcome::malformed(format!(
            "the arguments of {} are not valid JSON ({e}); the call was not run",
            registry::wire_names::to_wire(&call.name)
        ))),
    }
}

fn refused_step(call: &ToolCall, steps: &Steps) {
    let step = steps.begin(
        StepKind::Tool,
        format!("Refused {}", ToolBox::describe(call)),
    );
    steps.end(step, true, None);
}

fn outcome_of(result: ToolResult) -> ToolOutcome {
    ToolOutcome {
        content: result.content,
        is_error: result.is_error,
        malformed: false,
    }
}

/// Runs a tool; a wait for a file lock is a step of its own ("Awaiting file lock on
/// a.txt"), so the thread shows what it is doing meanwhile. Cancelling drops the
/// tool's future: a running bash command's whole process group is killed, a waiting
/// writer gives up.
async fn execute_showing_lock_waits(
    tools: &ToolBox,
    call: &ToolCall,
    steps: &Steps,
    cancel: &CancellationToken,
) -> Result<ToolOutcome, LoopError> {
    let (waits, mut notices) = mpsc::unbounded_channel();
    let execution = tools.execute_noting_waits(call, Some(&waits));
    tokio::pin!(execution);
    let mut waiting: Option<OpenStep> = None;
    let result = loop {
        tokio::select! {
            outcome = &mut execution => break Ok(outcome),
            Some(notice) = notices.recv() => match notice {
                LockWait::Waiting(path) => {
                    waiting = Some(steps.begin(StepKind::Wait, format!("Awaiting file lock on {path}")));
                }
                LockWait::Over { acquired } => {
                    if let Some(step) = waiting.take() {
                        steps.end(step, !acquired, None);
                    }
                }
            },
            _ = cancel.cancelled() => break Err(LoopError::Cancelled("the run was cancelled".into())),
        }
    };
    // The tool may finish before its last notice is read.
    while let Ok(notice) = notices.try_recv() {
        if let (LockWait::Over { acquired }, Some(step)) = (notice, waiting.take()) {
            steps.end(step, !acquired, None);
        }
    }
    if let Some(step) = waiting {
        steps.end(step, true, None);
    }
    result
}

/// What the gate said about one tool call.
enum Gate {
    Run,
    Refused(String),
    Done(ToolResult),
    /// Not run now: a person's answer comes as the thread's next run.
    Deferred(String),
}

/// A call's result as the model gets it, and whether the gate deferred it for a
/// person's approval (a CLI run then ends its turn: `backends::endpoint`).
pub struct Executed {
    pub outcome: ToolOutcome,
    pub deferred: bool,
}

/// What the model is told when its thread goes on after a deferred call was
/// answered: who answered, and the call's result or why it was not run. Pure.
pub fn resumed_note(resumed: &ResumedCall, outcome: &ToolOutcome) -> String {
    let tool = registry::wire_names::to_wire(&resumed.call.name);
    let asked = format!(
        "Your call of {tool} with {} waited for a person's approval (request {}).",
        resumed.call.arguments, resumed.approval_id
    );
    if !resumed.allowed {
        return format!(
            "{asked} It was not run: {}\nGo on without it.",
            outcome.content
        );
    }
    let by = match resumed.answered_by.as_str() {
        "" => "A person".to_string(),
        by => by.to_string(),
    };
    let how = if outcome.is_error {
        "it ran and failed"
    } else {
        "it has run"
    };
    format!(
        "{asked} {by} approved it and {how}. Its result:\n{}\nGo on from there.",
        outcome.content
    )
}

fn capped(outcome: ToolOutcome) -> ToolOutcome {
    ToolOutcome {
        content: crate::outbound::cap_tool_result(outcome.content),
        ..outcome
    }
}

/// Asks the gate; a wait for a person is a step of its own.
async fn ask_gate<G: ToolGate>(
    gate: &G,
    run_id: &str,
    call: &ToolCall,
    steps: &Steps,
    cancel: &CancellationToken,
) -> Result<Gate, LoopError> {
    let mut answers = gate.check(run_id, call);
    let mut waiting: Option<OpenStep> = None;
    loop {
        let answer = tokio::select! {
            answer = answers.recv() => answer,
            _ = cancel.cancelled() => {
                if let Some(step) = waiting {
                    steps.end(step, true, None);
                }
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
        };
        match answer {
            Some(GateMessage::Pending { description, .. }) => {
                if waiting.is_none() {
                    waiting = Some(steps.begin(StepKind::Permission, description));
                }
            }
            Some(GateMessage::Deferred { message, .. }) => {
                // The person has not answered yet; the wait goes on without the run.
                if let Some(step) = waiting {
                    steps.end(step, false, None);
                }
                return Ok(Gate::Deferred(message));
            }
            Some(GateMessage::Decided(decision)) => {
                if let Some(step) = waiting {
                    steps.end(step, !decision.allowed, None);
                }
                return Ok(match (decision.allowed, decision.result) {
                    (true, Some(result)) => Gate::Done(result),
                    (true, None) => Gate::Run,
                    (false, _) => Gate::Refused(decision.message),
                });
            }
            None => {
                if let Some(step) = waiting {
                    steps.end(step, true, None);
                }
                return Ok(Gate::Refused(
                    "the control plane did not answer the permission check; the tool was not run"
                        .into(),
                ));
            }
        }
    }
}
