//! The tool loop (SPEC C1): call the model, run the tools it asks for in order, give
//! it the results, and repeat until it ends its turn. Every model call, every wait
//! before a retry and every tool execution is a step, reported as it starts and ends.
//!
//! This module knows nothing of gRPC: it reports through an [`EventSink`] and reaches
//! models through a [`ClientFactory`].

use std::time::{Duration, Instant};

use chorus_proto::domain::{
    ChatMessage, ModelRoute, RetryPolicy, StepEnded, StepKind, StepStarted, ToolCall, ToolResult,
    Usage, WorkerEvent,
};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::gate::{GateMessage, ToolGate};
use crate::model::{
    DEFAULT_MAX_TOKENS, MessageCache, ModelClient, ModelError, ModelReply, ModelRequest, StopReason,
};
use crate::tools::{ToolBox, ToolOutcome};

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

/// The model a run talks to. It may change while the run goes on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelSelection {
    /// As the user named it, e.g. `ollama/llama3.2`.
    pub display: String,
    pub route: ModelRoute,
}

/// What a run knows about its agent; any of it may change while the run goes on
/// (configure, self-edit), and the loop reads it again before every model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveAgent {
    pub model: ModelSelection,
    pub system_prompt: String,
    /// The tools offered to the model (the permission profile may allow or ask for
    /// them); `None` offers every tool.
    pub tools: Option<Vec<String>>,
    /// The agent's docs directory, whose files follow the system prompt.
    pub docs_dir: Option<std::path::PathBuf>,
}

/// Makes the client for a model route.
pub trait ClientFactory: Send + Sync {
    type Client: ModelClient;
    fn client(&self, route: &ModelRoute) -> Result<Self::Client, ModelError>;
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
    pub messages: Vec<ChatMessage>,
    pub first_step_number: u32,
    pub max_iterations: u32,
    pub retry: RetryPolicy,
    /// The agent as it is now; read again before every model call.
    pub agent: watch::Receiver<LiveAgent>,
}

/// Why a run ended without the model finishing its turn.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Model(ModelError),
    #[error("gave up on the model after {attempts} attempts in {elapsed:.0?}: {last}")]
    GaveUp {
        attempts: u32,
        elapsed: Duration,
        last: String,
    },
    #[error(
        "the model gave {count} unusable replies in a row (the last was {last}); try another model or rephrase the request"
    )]
    BadOutput { count: u32, last: String },
    #[error(
        "stopped after {0} model calls without the model finishing; raise CHORUS_MAX_ITERATIONS or split the task"
    )]
    IterationCap(u32),
    #[error("cancelled: {0}")]
    Cancelled(String),
}

/// Consecutive unusable replies tolerated before the run fails.
pub const MAX_BAD_REPLIES: u32 = 3;

/// Times a run shortens its context after "too long" before giving up.
pub const MAX_SHRINKS: u32 = 3;

/// What replaces tool output dropped to fit the context window.
pub const TRIMMED_OUTPUT: &str = "[older tool output removed to fit the model's context window; run the tool again if you need it]";

/// Shortens the context after the model said it is too long: replaces the older
/// half of the long tool results (never those of the latest turn) by a note.
/// Returns how many were shortened. Only what the model sees changes; the thread's
/// stored history keeps everything.
pub fn shrink_context(messages: &mut [ChatMessage]) -> usize {
    use chorus_proto::domain::Role;
    let latest_turn = messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .unwrap_or(messages.len());
    let long: Vec<usize> = messages[..latest_turn]
        .iter()
        .enumerate()
        .filter(|(_, m)| m.role == Role::Tool && m.content.len() > TRIMMED_OUTPUT.len() * 2)
        .map(|(i, _)| i)
        .collect();
    let count = long.len().div_ceil(2);
    for &i in &long[..count] {
        messages[i].content = TRIMMED_OUTPUT.to_string();
    }
    count
}

/// Said to the model when its answer was cut off by the output limit.
const CONTINUE_PROMPT: &str =
    "Your previous answer was cut off by the output limit. Continue exactly where it stopped.";
/// Said to the model when it replied with nothing at all.
const EMPTY_REPLY_PROMPT: &str =
    "Your last reply was empty. Continue with the task, or give your final answer if you are done.";

/// Runs the loop; returns the model's final text.
pub async fn run<F: ClientFactory, G: ToolGate>(
    clients: &F,
    gate: &G,
    tools: &ToolBox,
    mut input: LoopInput<'_>,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<String, LoopError> {
    let all_schemas = tools.schemas();
    let mut offered: Option<(Option<Vec<String>>, Vec<crate::model::ToolSchema>)> = None;
    let mut messages = std::mem::take(&mut input.messages);
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
    let mut bad_replies = 0u32;
    let mut shrinks = 0u32;
    // Messages are appended, and only old tool output is ever shortened in place;
    // the cache notices the latter by the changed length.
    let cache = MessageCache::default();

    let mut calls = 0u32;
    while calls < input.max_iterations {
        calls += 1;
        let live = input.agent.borrow_and_update().clone();
        let selection = live.model.clone();
        let client = clients.client(&selection.route).map_err(LoopError::Model)?;
        // The offered tools change rarely (a permissions change); filter only then.
        if offered.as_ref().map(|(list, _)| list) != Some(&live.tools) {
            let schemas: Vec<_> = match &live.tools {
                Some(names) => all_schemas
                    .iter()
                    .filter(|s| names.contains(&s.name))
                    .cloned()
                    .collect(),
                None => all_schemas.clone(),
            };
            offered = Some((live.tools.clone(), schemas));
        }
        let schemas = offered
            .as_ref()
            .map(|(_, s)| s.as_slice())
            .unwrap_or_default();
        let system = crate::context::system_prompt(&live.system_prompt, live.docs_dir.as_deref());
        let request = ModelRequest {
            model: &selection.route.model,
            system: &system,
            messages: &messages,
            tools: schemas,
            max_tokens: DEFAULT_MAX_TOKENS,
            cache: &cache,
        };
        let reply = match call_with_retries(
            &client,
            &request,
            &selection,
            input.retry,
            &mut steps,
            cancel,
        )
        .await
        {
            Err(LoopError::Model(ModelError::ContextLength(message))) if shrinks < MAX_SHRINKS => {
                let trimmed = shrink_context(&mut messages);
                if trimmed == 0 {
                    return Err(LoopError::Model(ModelError::ContextLength(message)));
                }
                shrinks += 1;
                calls -= 1; // the refused call did no work
                let step = steps.begin(
                    StepKind::Wait,
                    format!("The conversation is too long for the model; shortened {trimmed} old tool results and trying again"),
                );
                steps.end(step, false, None);
                continue;
            }
            other => other?,
        };

        let assistant = ChatMessage::assistant(reply.content.clone(), reply.tool_calls.clone());
        emit(&assistant);
        messages.push(assistant);

        if reply.tool_calls.is_empty() {
            match reply.stop {
                StopReason::MaxTokens => {
                    // Keep the partial answer and let the model go on (seed 000).
                    messages.push(ChatMessage::user(CONTINUE_PROMPT));
                    continue;
                }
                _ if reply.content.trim().is_empty() => {
                    bad_replies += 1;
                    if bad_replies >= MAX_BAD_REPLIES {
                        return Err(LoopError::BadOutput {
                            count: bad_replies,
                            last: "an empty reply".into(),
                        });
                    }
                    messages.push(ChatMessage::user(EMPTY_REPLY_PROMPT));
                    continue;
                }
                _ => return Ok(reply.content),
            }
        }

        let mut malformed = 0;
        for call in &reply.tool_calls {
            if cancel.is_cancelled() {
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
            // A call that cannot run at all needs no permission: tell the model what
            // is wrong with it right away.
            let unusable = ToolBox::validate(call);
            let gated = match unusable {
                Some(outcome) => Err(outcome),
                None => Ok(ask_gate(gate, input.run_id, call, &mut steps, cancel).await?),
            };
            let outcome = match gated {
                Err(outcome) => {
                    let step = steps.begin(
                        StepKind::Tool,
                        format!("Refused {}", ToolBox::describe(call)),
                    );
                    steps.end(step, true, None);
                    outcome
                }
                Ok(gate_answer) => match gate_answer {
                    Gate::Run => {
                        let step = steps.begin(
                            StepKind::Tool,
                            format!("Executing {}", ToolBox::describe(call)),
                        );
                        let span =
                            tracing::info_span!("tool", tool = %call.name, step = step.number);
                        // Cancelling drops the tool's future: a running bash command's
                        // whole process group is killed, a waiting writer gives up.
                        let outcome = tokio::select! {
                            outcome = tools.execute(call).instrument(span) => outcome,
                            _ = cancel.cancelled() => {
                                steps.end(step, true, None);
                                return Err(LoopError::Cancelled("the run was cancelled".into()));
                            }
                        };
                        steps.end(step, outcome.is_error, None);
                        outcome
                    }
                    Gate::Refused(message) => {
                        let step = steps.begin(
                            StepKind::Tool,
                            format!("Refused {}", ToolBox::describe(call)),
                        );
                        steps.end(step, true, None);
                        ToolOutcome::error(message)
                    }
                    Gate::Done(result) => {
                        // Executed by the control plane, which owns the resource.
                        let step = steps.begin(
                            StepKind::Tool,
                            format!("Executing {}", ToolBox::describe(call)),
                        );
                        steps.end(step, result.is_error, None);
                        ToolOutcome {
                            content: result.content,
                            is_error: result.is_error,
                            malformed: false,
                        }
                    }
                },
            };
            if outcome.malformed {
                malformed += 1;
            }
            let result = ChatMessage::tool_result(call, outcome.content, outcome.is_error);
            emit(&result);
            messages.push(result);
        }
        if malformed == reply.tool_calls.len() {
            bad_replies += 1;
            if bad_replies >= MAX_BAD_REPLIES {
                return Err(LoopError::BadOutput {
                    count: bad_replies,
                    last: "tool calls that could not be used (unknown tool or invalid arguments)"
                        .into(),
                });
            }
        } else {
            bad_replies = 0;
        }
    }
    Err(LoopError::IterationCap(input.max_iterations))
}

/// What the gate said about one tool call.
enum Gate {
    Run,
    Refused(String),
    Done(ToolResult),
}

/// Asks the gate; a wait for a person is a step of its own.
async fn ask_gate<G: ToolGate>(
    gate: &G,
    run_id: &str,
    call: &ToolCall,
    steps: &mut Steps<'_>,
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

/// One model call, retried on passing failures within the policy. The failed call,
/// each wait, and each new attempt are steps of their own, so the user sees them.
async fn call_with_retries<C: ModelClient>(
    client: &C,
    request: &ModelRequest<'_>,
    selection: &ModelSelection,
    policy: RetryPolicy,
    steps: &mut Steps<'_>,
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
        let result = tokio::select! {
            result = client.stream(request, &mut on_text).instrument(span) => result,
            _ = cancel.cancelled() => {
                steps.end(step, true, None);
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
        };
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;
    use std::sync::{Arc, Mutex};

    use chorus_proto::domain::{Role, ToolCall};
    use serde_json::json;

    use super::*;
    use crate::gate::AllowAll;
    use crate::tools::jail::Workspace;

    /// A model that answers from a script and remembers what it was sent.
    #[derive(Clone, Default)]
    struct Scripted {
        replies: Arc<Mutex<VecDeque<Result<ModelReply, ModelError>>>>,
        seen: Arc<Mutex<Vec<Vec<ChatMessage>>>>,
        hang: bool,
    }

    impl ModelClient for Scripted {
        async fn stream(
            &self,
            request: &ModelRequest<'_>,
            on_text: &mut (dyn FnMut(&str) + Send),
        ) -> Result<ModelReply, ModelError> {
            self.seen.lock().unwrap().push(request.messages.to_vec());
            if self.hang {
                std::future::pending::<()>().await;
            }
            let reply = self
                .replies
                .lock()
                .unwrap()
                .pop_front()
                .expect("a scripted reply");
            if let Ok(reply) = &reply {
                on_text(&reply.content);
            }
            reply
        }
    }

    impl ClientFactory for Scripted {
        type Client = Scripted;
        fn client(&self, _route: &ModelRoute) -> Result<Scripted, ModelError> {
            Ok(self.clone())
        }
    }

    fn reply(content: &str, stop: StopReason) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            content: content.into(),
            tool_calls: vec![],
            stop,
            usage: None,
        })
    }

    fn call_reply(name: &str, arguments: &str) -> Result<ModelReply, ModelError> {
        Ok(ModelReply {
            content: String::new(),
            tool_calls: vec![ToolCall {
                id: "c".into(),
                name: name.into(),
                arguments: arguments.into(),
            }],
            stop: StopReason::ToolUse,
            usage: None,
        })
    }

    struct Outcome {
        result: Result<String, LoopError>,
        events: Vec<WorkerEvent>,
        seen: Vec<Vec<ChatMessage>>,
    }

    async fn run_script(
        script: Vec<Result<ModelReply, ModelError>>,
        policy: RetryPolicy,
    ) -> Outcome {
        let model = Scripted {
            replies: Arc::new(Mutex::new(script.into())),
            ..Scripted::default()
        };
        run_with(model, policy, &CancellationToken::new()).await
    }

    async fn run_with(model: Scripted, retry: RetryPolicy, cancel: &CancellationToken) -> Outcome {
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (_agent_tx, agent_rx) = watch::channel(LiveAgent {
            model: ModelSelection {
                display: "m".into(),
                route: ModelRoute {
                    provider: "p".into(),
                    api: ModelRoute::OPENAI_CHAT.into(),
                    relay_path: "/llm/p".into(),
                    model: "m".into(),
                },
            },
            system_prompt: "sys".into(),
            tools: None,
            docs_dir: None,
        });
        let input = LoopInput {
            run_id: "r",
            messages: vec![ChatMessage::user("go")],
            first_step_number: 1,
            max_iterations: 10,
            retry,
            agent: agent_rx,
        };
        let result = run(
            &model,
            &AllowAll,
            &tools,
            input,
            &EventSink::new(tx),
            cancel,
        )
        .await;
        let mut events = Vec::new();
        while let Ok(event) = rx.try_recv() {
            events.push(event);
        }
        let seen = model.seen.lock().unwrap().clone();
        Outcome {
            result,
            events,
            seen,
        }
    }

    fn fast() -> RetryPolicy {
        RetryPolicy {
            max_attempts: 3,
            max_total_ms: 10_000,
            base_delay_ms: 1,
        }
    }

    fn step_descriptions(events: &[WorkerEvent]) -> Vec<String> {
        events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::StepStarted(s) => Some(s.description.clone()),
                _ => None,
            })
            .collect()
    }

    #[tokio::test]
    async fn a_cut_off_answer_is_kept_and_continued() {
        let out = run_script(
            vec![
                reply("part one", StopReason::MaxTokens),
                reply("part two", StopReason::EndTurn),
            ],
            fast(),
        )
        .await;
        assert_eq!(out.result.unwrap(), "part two");
        let second = &out.seen[1];
        assert_eq!(
            second[1].content, "part one",
            "the partial answer stays in the context"
        );
        assert_eq!(second[2].content, CONTINUE_PROMPT);
    }

    #[tokio::test]
    async fn empty_replies_are_nudged_then_fail_the_run() {
        let out = run_script(
            vec![
                reply("", StopReason::EndTurn),
                reply("done", StopReason::EndTurn),
            ],
            fast(),
        )
        .await;
        assert_eq!(out.result.unwrap(), "done");
        assert_eq!(out.seen[1].last().unwrap().content, EMPTY_REPLY_PROMPT);

        let out = run_script(vec![reply(" ", StopReason::EndTurn); 3], fast()).await;
        assert!(
            matches!(out.result, Err(LoopError::BadOutput { count: 3, .. })),
            "{:?}",
            out.result
        );
    }

    #[tokio::test]
    async fn a_good_turn_resets_the_count_of_bad_ones() {
        let out = run_script(
            vec![
                call_reply("nope", "{}"),
                call_reply("nope", "{}"),
                call_reply("view", r#"{"path":"missing.txt"}"#), // runs, fails: not bad output
                call_reply("nope", "{}"),
                call_reply("nope", "{}"),
                reply("done", StopReason::EndTurn),
            ],
            fast(),
        )
        .await;
        assert_eq!(out.result.unwrap(), "done");
        let tool_results: Vec<&ChatMessage> = out.seen[5]
            .iter()
            .filter(|m| m.role == Role::Tool)
            .collect();
        assert_eq!(tool_results.len(), 5);
        assert!(tool_results.iter().all(|m| m.is_error));
    }

    #[tokio::test]
    async fn passing_failures_are_retried_as_steps_and_then_given_up() {
        let retryable = || Err(ModelError::retryable("busy"));
        let out = run_script(
            vec![retryable(), retryable(), reply("ok", StopReason::EndTurn)],
            fast(),
        )
        .await;
        assert_eq!(out.result.unwrap(), "ok");
        let steps = step_descriptions(&out.events);
        assert_eq!(steps.len(), 5, "{steps:?}");
        assert!(
            steps[1].starts_with("Waiting") && steps[1].ends_with("busy"),
            "{steps:?}"
        );
        assert_eq!(steps[4], "Calling LLM (m), attempt 3 of 3");

        let out = run_script(vec![retryable(), retryable(), retryable()], fast()).await;
        assert!(
            matches!(out.result, Err(LoopError::GaveUp { attempts: 3, .. })),
            "{:?}",
            out.result
        );

        let out = run_script(
            vec![Err(ModelError::ContextLength("too long".into()))],
            fast(),
        )
        .await;
        assert!(matches!(
            out.result,
            Err(LoopError::Model(ModelError::ContextLength(_)))
        ));
        assert_eq!(out.seen.len(), 1, "not retried");
    }

    #[tokio::test]
    async fn streamed_text_is_reported_with_its_step() {
        let out = run_script(vec![reply("hi there", StopReason::EndTurn)], fast()).await;
        assert!(out.events.iter().any(|e| matches!(
            e,
            WorkerEvent::TextDelta { step: 1, text, .. } if text == "hi there"
        )));
    }

    #[tokio::test]
    async fn cancelling_ends_a_hanging_model_call_and_closes_its_step() {
        let model = Scripted {
            hang: true,
            ..Scripted::default()
        };
        let cancel = CancellationToken::new();
        let canceller = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                cancel.cancel();
            })
        };
        let out = tokio::time::timeout(Duration::from_secs(5), run_with(model, fast(), &cancel))
            .await
            .expect("cancellation is prompt");
        canceller.await.unwrap();
        assert!(matches!(out.result, Err(LoopError::Cancelled(_))));
        assert!(
            out.events
                .iter()
                .any(|e| matches!(e, WorkerEvent::StepEnded(s) if s.failed))
        );
    }

    /// Live processes whose command line contains `marker`.
    fn running(marker: &str) -> usize {
        std::fs::read_dir("/proc")
            .unwrap()
            .flatten()
            .filter(|p| {
                std::fs::read(p.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
            })
            .count()
    }

    #[tokio::test]
    async fn cancelling_ends_a_running_command_and_everything_it_started() {
        let marker = format!("300.{}{}", std::process::id(), line!());
        let command = format!("sleep {marker} & sleep {marker}");
        let model = Scripted {
            replies: Arc::new(Mutex::new(
                vec![call_reply(
                    "bash",
                    &json!({ "command": command }).to_string(),
                )]
                .into(),
            )),
            ..Scripted::default()
        };
        let cancel = CancellationToken::new();
        let canceller = {
            let cancel = cancel.clone();
            let marker = marker.clone();
            tokio::spawn(async move {
                // Cancel once the command is really running.
                let deadline = std::time::Instant::now() + Duration::from_secs(5);
                while running(&marker) < 2 && std::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                cancel.cancel();
                running(&marker)
            })
        };
        let out = tokio::time::timeout(Duration::from_secs(10), run_with(model, fast(), &cancel))
            .await
            .expect("cancellation is prompt");
        assert!(canceller.await.unwrap() >= 2, "the command never ran");
        assert!(matches!(out.result, Err(LoopError::Cancelled(_))));
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while running(&marker) > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "the command survived cancellation"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    #[tokio::test]
    async fn the_iteration_cap_ends_a_model_that_never_stops() {
        let out = run_script(
            (0..10)
                .map(|_| call_reply("view", &json!({"path": "x"}).to_string()))
                .collect(),
            fast(),
        )
        .await;
        assert!(matches!(out.result, Err(LoopError::IterationCap(10))));
    }

    #[tokio::test]
    async fn a_context_that_is_too_long_is_shortened_and_tried_again() {
        let big = "x".repeat(5000);
        let mut script = Vec::new();
        for i in 0..4 {
            script.push(call_reply(
                "create_file",
                &json!({"path": format!("f{i}"), "content": big}).to_string(),
            ));
            script.push(call_reply(
                "view",
                &json!({"path": format!("f{i}")}).to_string(),
            ));
        }
        script.push(Err(ModelError::ContextLength("prompt is too long".into())));
        script.push(reply("fits now", StopReason::EndTurn));
        let out = run_script(script, fast()).await;
        assert_eq!(out.result.unwrap(), "fits now");
        let last = out.seen.last().unwrap();
        let trimmed = last.iter().filter(|m| m.content == TRIMMED_OUTPUT).count();
        assert_eq!(trimmed, 2, "the older half of the 4 long view results");
        assert!(
            last.iter()
                .rev()
                .find(|m| m.role == Role::Tool)
                .unwrap()
                .content
                .len()
                > 5000
        );
        assert!(
            step_descriptions(&out.events)
                .iter()
                .any(|d| d.contains("too long for the model"))
        );

        // With nothing left to shorten, the error reaches the user.
        let out = run_script(
            vec![Err(ModelError::ContextLength("prompt is too long".into()))],
            fast(),
        )
        .await;
        assert!(matches!(
            out.result,
            Err(LoopError::Model(ModelError::ContextLength(_)))
        ));
    }

    #[test]
    fn backoff_grows_and_stays_bounded() {
        for attempt in 1..10 {
            let d = backoff(attempt, Duration::from_secs(1)).as_secs_f64();
            let base = (1u64 << (attempt - 1).min(5)).min(30) as f64;
            assert!(
                d >= base * 0.79 && d <= base * 1.21,
                "attempt {attempt}: {d}"
            );
        }
    }
}
