//! The tool loop (SPEC C1): call the model, run the tools it asks for in order, give
//! it the results, and repeat until it ends its turn. Every model call, every wait
//! before a retry and every tool execution is a step, reported as it starts and ends.
//!
//! This module knows nothing of gRPC: it reports through an [`EventSink`] and reaches
//! models through a [`ClientFactory`].
//!
//! - A tool the control plane runs has its `tool` step open from before its check until
//!   its result is back ("… in the control plane"), so the watchdog sees a running tool,
//!   not a stuck run.
//! - The model is re-read before each call, so a switch applies mid-run.
//! - User messages for the run (the assignment's `inputs`, then injected ones) are taken
//!   only right before a model call (never between a tool call and its result), each
//!   reported by `InputTaken` before that call's `StepStarted`; a final answer with
//!   messages waiting goes on with another call instead of ending the run (within the
//!   iteration cap).
//! - A tool whose spec `ends_turn` (a task role's finishing tool), called successfully,
//!   ends the turn: the rest of its batch runs, its results are stored as usual, and
//!   the run completes with no further model call (its final text: that reply's). A
//!   call of it that failed (an error result) does not: the model goes on.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_proto::domain::{
    ChatMessage, Input, ModelRoute, ResumedCall, RetryPolicy, StepEnded, StepKind, StepStarted,
    ToolSpec, Usage, WorkerEvent,
};
use chorus_proto::tools::RunsIn;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::awareness::Board;
use crate::gate::ToolGate;
use crate::model::http::CallLimits;
use crate::model::{
    DEFAULT_MAX_TOKENS, MessageCache, ModelClient, ModelError, ModelReply, ModelRequest, StopReason,
};
use crate::tools::ToolBox;

pub use crate::events::EventSink;

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
    /// The tools offered to the model, exactly as the control plane sent them (the
    /// permission profile may allow or ask for them). A tool this worker has no
    /// executor for runs in the control plane. Shared: the loop clones the agent
    /// before every model call, and the specs (schemas included) change rarely.
    pub tools: std::sync::Arc<Vec<ToolSpec>>,
    /// The agent's docs directory, whose files follow the system prompt.
    pub docs_dir: Option<std::path::PathBuf>,
    /// The identity and memory sections, as the control plane last sent them.
    pub identity: String,
    pub memory: String,
    /// The search hits relevant to the thread's latest user message, as the
    /// control plane found them when it assigned the run.
    pub relevant: String,
}

impl LiveAgent {
    /// What this agent's system prompt is made of now (`context::Docs::compose`
    /// puts it in order, for the loop and the CLI backends alike).
    pub fn prompt_parts(&self) -> crate::context::PromptParts<'_> {
        crate::context::PromptParts {
            system_prompt: &self.system_prompt,
            identity: &self.identity,
            docs_dir: self.docs_dir.as_deref(),
            memory: &self.memory,
            relevant: Some(&self.relevant),
        }
    }
}

/// Makes the client for a model route.
pub trait ClientFactory: Send + Sync {
    type Client: ModelClient;
    fn client(&self, route: &ModelRoute) -> Result<Self::Client, ModelError>;
}

/// Numbers steps and reports their start and end (to the control plane and to the
/// worker's board of what its threads are doing). Cheap to clone, and clones share
/// the counter: a CLI run numbers its model steps (from the CLI's stream) and its
/// tool steps (from the run endpoint) concurrently, one sequence.
#[derive(Clone)]
pub struct Steps {
    run_id: Arc<str>,
    next: Arc<std::sync::atomic::AtomicU32>,
    sink: EventSink,
    board: Option<Arc<Board>>,
}

/// A step begun and not yet ended.
pub struct OpenStep {
    number: u32,
    started: Instant,
}

impl OpenStep {
    pub fn number(&self) -> u32 {
        self.number
    }
}

impl Steps {
    /// Steps of `run_id`, the first numbered `first` (at least 1).
    pub fn new(run_id: &str, first: u32, sink: EventSink, board: Option<Arc<Board>>) -> Self {
        Steps {
            run_id: Arc::from(run_id),
            next: Arc::new(std::sync::atomic::AtomicU32::new(first.max(1))),
            sink,
            board,
        }
    }

    /// The number the next step will get.
    pub fn peek(&self) -> u32 {
        self.next.load(std::sync::atomic::Ordering::SeqCst)
    }

    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    pub fn sink(&self) -> &EventSink {
        &self.sink
    }

    pub fn begin(&self, kind: StepKind, description: String) -> OpenStep {
        self.begin_where(kind, description, None)
    }

    /// A step of a tool that runs in `runs_in`.
    pub fn begin_tool(&self, description: String, runs_in: RunsIn) -> OpenStep {
        self.begin_where(StepKind::Tool, description, Some(runs_in))
    }

    fn begin_where(
        &self,
        kind: StepKind,
        description: String,
        runs_in: Option<RunsIn>,
    ) -> OpenStep {
        let number = self.next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        if let Some(board) = &self.board {
            board.step_began(&self.run_id, number, kind, &description);
        }
        self.sink.send(WorkerEvent::StepStarted(StepStarted {
            run_id: self.run_id.to_string(),
            number,
            kind,
            description,
            started_at_ms: chrono::Utc::now().timestamp_millis(),
            runs_in,
        }));
        OpenStep {
            number,
            started: Instant::now(),
        }
    }

    pub fn end(&self, step: OpenStep, failed: bool, usage: Option<Usage>) {
        if let Some(board) = &self.board {
            board.step_ended(&self.run_id, step.number);
        }
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

/// User messages for a run in progress (injected while it runs), waiting for its
/// next model call. Shared by the runner, which adds to it, and the loop, which
/// takes everything in it right before each model call.
#[derive(Clone, Default)]
pub struct Inbox(Arc<Mutex<VecDeque<Input>>>);

impl Inbox {
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Input>> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn push(&self, input: Input) {
        self.queue().push_back(input);
    }

    /// Everything queued, oldest first; the inbox is empty after.
    pub fn take_all(&self) -> Vec<Input> {
        self.queue().drain(..).collect()
    }

    pub fn is_empty(&self) -> bool {
        self.queue().is_empty()
    }
}

pub struct LoopInput<'a> {
    pub run_id: &'a str,
    pub messages: Vec<ChatMessage>,
    /// User messages of the thread no model has seen yet (the assignment's): taken
    /// before the first model call, before anything in `inbox`.
    pub inputs: Vec<Input>,
    /// Messages injected while the run goes on.
    pub inbox: Inbox,
    /// The worker's board of its threads: this run reports its steps there and,
    /// when the agent has other active threads, tells its model about them.
    pub board: Option<Arc<Board>>,
    pub first_step_number: u32,
    pub max_iterations: u32,
    pub retry: RetryPolicy,
    /// The agent as it is now; read again before every model call.
    pub agent: watch::Receiver<LiveAgent>,
    /// A call deferred for a person's approval, now answered: carried out (or
    /// refused) first, and the model told how it went.
    pub resumed: Option<ResumedCall>,
}

/// Why a run ended without the model finishing its turn.
#[derive(Debug, thiserror::Error)]
pub enum LoopError {
    #[error(transparent)]
    Model(ModelError),
    #[error(
        "gave up on the model after {attempts} {} in {elapsed:.0?}: {last}",
        if *.attempts == 1 { "attempt" } else { "attempts" }
    )]
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
    #[error(
        "the model's answer was still cut off by its output limit after {continuations} \
         continuations; ask for less at once, or split the task"
    )]
    CutOff { continuations: u32 },
    #[error(
        "the server cut the model's answer off {count} times in a row without saying why          (a local server serving several requests at once does); try again, or give the          server more parallel slots"
    )]
    Interrupted { count: u32 },
    #[error(
        "{0}; the run stopped here. Ask for the work in smaller parts (a big file in several pieces)"
    )]
    TooLarge(crate::outbound::TooLarge),
    /// A CLI backend's run failed (`backends::driver`): its kind and sentence.
    #[error("{message}")]
    Backend {
        kind: chorus_proto::domain::FailureKind,
        message: String,
    },
}

impl LoopError {
    /// The kind of ending the control plane records and frontends choose on. One
    /// exhaustive `match`, so a new way to fail must be classified to build.
    pub fn kind(&self) -> chorus_proto::domain::FailureKind {
        use chorus_proto::domain::FailureKind;
        match self {
            LoopError::Model(ModelError::TooLarge(_)) => FailureKind::Limit,
            LoopError::Model(
                ModelError::Retryable { .. } | ModelError::ContextLength(_) | ModelError::Fatal(_),
            )
            | LoopError::GaveUp { .. }
            | LoopError::Interrupted { .. } => FailureKind::ModelError,
            LoopError::BadOutput { .. } => FailureKind::BadOutput,
            LoopError::IterationCap(_) | LoopError::TooLarge(_) | LoopError::CutOff { .. } => {
                FailureKind::Limit
            }
            LoopError::Cancelled(_) => FailureKind::Cancelled,
            LoopError::Backend { kind, .. } => *kind,
        }
    }
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

/// Cut-off answers continued in a row before the run fails.
pub const MAX_CONTINUATIONS: u32 = 3;

/// The result of a tool call whose arguments the output limit cut off.
pub const CUT_OFF_CALL: &str = "this tool call was cut off by the output limit before its \
     arguments were complete, so it was not run. Send it again, shorter (for a big file, \
     write it in parts: create_file with the first part, then append with str_replace or \
     bash).";

/// Tool calls run from one reply; the rest are answered as refused.
pub const MAX_TOOL_CALLS_PER_REPLY: usize = 64;

/// Bytes of text and tool calls in a reply.
fn reply_bytes(reply: &ModelReply) -> usize {
    reply.content.len()
        + reply
            .tool_calls
            .iter()
            .map(|c| c.name.len() + c.arguments.len())
            .sum::<usize>()
}

/// What a reply that stopped at a length limit ran into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthStop {
    /// The output limit (the `max_tokens` asked for, or a server's own lower cap):
    /// the answer is kept and continued.
    OutputLimit,
    /// The end of the context window: continuing would only fill it further.
    FullWindow,
    /// Not known: fewer tokens than asked for and no known window (a server with its
    /// own output cap, or a full window). Continued once; called full only if the
    /// continuation adds nothing.
    Unsure,
}

/// Share of the window at which a reply that stopped at a length limit counts as
/// having filled it (servers keep a few tokens back).
const FULL_WINDOW_PERCENT: u64 = 98;

/// Decides what a length stop ran into from what is known: input plus output
/// tokens against the window where both are known; else a reply that used every
/// token asked for (or, without usage, at least as many bytes) hit the output limit.
pub fn length_stop(reply: &ModelReply, max_tokens: u32, window: Option<u64>) -> LengthStop {
    let usage = reply.usage.filter(|u| u.output_tokens > 0);
    if let (Some(window), Some(usage)) = (window, usage)
        && usage.input_tokens > 0
    {
        let used = usage.input_tokens + usage.output_tokens;
        return if used * 100 >= window * FULL_WINDOW_PERCENT {
            LengthStop::FullWindow
        } else {
            LengthStop::OutputLimit
        };
    }
    let reached_max = match usage {
        Some(usage) => usage.output_tokens >= u64::from(max_tokens),
        None => reply_bytes(reply) >= max_tokens as usize,
    };
    if reached_max {
        LengthStop::OutputLimit
    } else {
        LengthStop::Unsure
    }
}

/// Said to the model when its answer was cut off by the output limit.
const CONTINUE_PROMPT: &str =
    "Your previous answer was cut off by the output limit. Continue exactly where it stopped.";
/// Said to the model when the server cut its answer off without a reason.
const RESUME_PROMPT: &str =
    "Your previous answer was interrupted. Continue exactly where it stopped.";
/// Said to the model when it replied with nothing at all.
const EMPTY_REPLY_PROMPT: &str =
    "Your last reply was empty. Continue with the task, or give your final answer if you are done.";

/// Moves the user messages waiting for this model call into the conversation, each
/// reported taken.
fn take_inputs(
    pending: &mut Vec<Input>,
    messages: &mut Vec<ChatMessage>,
    sink: &EventSink,
    run_id: &str,
) {
    for taken in pending.drain(..) {
        messages.push(ChatMessage::user(taken.content));
        sink.send(WorkerEvent::InputTaken {
            run_id: run_id.to_string(),
            message_id: taken.message_id,
        });
    }
}

/// Whether `call` is of an offered tool that ends the turn (by its Chorus or its
/// wire name, as the model clients may hand it over).
fn ends_the_turn(offered: &[ToolSpec], call: &chorus_proto::domain::ToolCall) -> bool {
    offered
        .iter()
        .any(|s| s.ends_turn && (s.name == call.name || s.wire_name == call.name))
}

/// The schemas offered to the model, made again only when the offered tools
/// change (a permissions change), which is rare.
type Offered = Option<(std::sync::Arc<Vec<ToolSpec>>, Vec<crate::model::ToolSchema>)>;

fn offered_schemas<'a>(
    offered: &'a mut Offered,
    tools: &std::sync::Arc<Vec<ToolSpec>>,
) -> &'a [crate::model::ToolSchema] {
    let same = offered
        .as_ref()
        .is_some_and(|(specs, _)| std::sync::Arc::ptr_eq(specs, tools) || specs == tools);
    if !same {
        let schemas = tools
            .iter()
            .map(crate::model::ToolSchema::from_spec)
            .collect();
        *offered = Some((tools.clone(), schemas));
    }
    offered
        .as_ref()
        .map(|(_, s)| s.as_slice())
        .unwrap_or_default()
}

/// Runs the loop; returns the model's final text.
pub async fn run<F: ClientFactory, G: ToolGate>(
    clients: &F,
    gate: &G,
    tools: &ToolBox,
    mut input: LoopInput<'_>,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<String, LoopError> {
    let mut offered: Offered = None;
    // The docs are read again only when their files change.
    let mut docs = crate::context::Docs::default();
    let mut messages = std::mem::take(&mut input.messages);
    // A history cut by a crash or a kill is made acceptable to the APIs first.
    let repaired = transcript::repair(&mut messages);
    if repaired.added + repaired.dropped > 0 {
        tracing::info!(
            run_id = input.run_id,
            added = repaired.added,
            dropped = repaired.dropped,
            "repaired the transcript: tool calls without results answered as interrupted"
        );
    }
    let board = input.board.clone();
    let steps = Steps::new(
        input.run_id,
        input.first_step_number,
        sink.clone(),
        board.clone(),
    );
    if let Some(resumed) = input.resumed.take() {
        let live = input.agent.borrow().clone();
        let pipeline = pipeline::Pipeline {
            gate,
            tools,
            offered: &live.tools,
            run_id: input.run_id,
            sink,
            cancel,
        };
        let outcome = pipeline.resume(&resumed, &steps).await?;
        messages.push(ChatMessage::user(pipeline::resumed_note(
            &resumed, &outcome,
        )));
    }
    let mut pending_inputs = std::mem::take(&mut input.inputs);
    let emit = |message: &ChatMessage| {
        sink.try_send(WorkerEvent::MessageAppended {
            run_id: input.run_id.to_string(),
            message: message.clone(),
        })
        .map_err(LoopError::TooLarge)
    };
    // The results given to the calls the thread ended with are stored with this
    // run (in their place: nothing of this run precedes them), so a history rebuilt
    // from the store answers every call. Repairs further back are repeated on each
    // send instead: their place in the thread is taken.
    for result in &repaired.at_end {
        emit(result)?;
    }
    let mut bad_replies = 0u32;
    // Replies in a row cut off by the output limit (each one continued).
    let mut continuations = 0u32;
    // Replies in a row the server cut off without a reason (each one continued).
    let mut interruptions = 0u32;
    let mut shrinks = 0u32;
    // The last reply stopped at a length limit not known to be the output limit.
    let mut unsure_length_stop = false;
    // Messages are appended, and only old tool output is ever shortened in place;
    // the cache notices the latter by the changed length.
    let cache = MessageCache::default();

    let mut calls = 0u32;
    while calls < input.max_iterations {
        calls += 1;
        // User messages are taken only here, right before a model call: never
        // between an assistant's tool calls and their results.
        pending_inputs.extend(input.inbox.take_all());
        take_inputs(&mut pending_inputs, &mut messages, sink, input.run_id);
        let live = input.agent.borrow_and_update().clone();
        let selection = live.model.clone();
        let client = clients.client(&selection.route).map_err(LoopError::Model)?;
        let schemas = offered_schemas(&mut offered, &live.tools);
        let mut system = docs.compose(live.prompt_parts());
        if let Some(board) = &board {
            let next = format!("Calling LLM ({})", selection.display);
            board.next_step(input.run_id, steps.peek(), &next);
        }
        if let Some(block) = board.as_ref().and_then(|b| b.prompt_block(input.run_id)) {
            system.push_str("\n\n");
            system.push_str(&block);
        }
        let max_tokens = selection
            .route
            .limits
            .max_tokens
            .unwrap_or(DEFAULT_MAX_TOKENS);
        let window = selection.route.limits.context_window;
        let request = ModelRequest {
            model: &selection.route.model,
            system: &system,
            messages: &messages,
            tools: schemas,
            max_tokens,
            cache: &cache,
            limits: CallLimits::from(&input.retry),
        };
        let result =
            retry::call_with_retries(&client, &request, &selection, input.retry, &steps, cancel)
                .await;
        let reply = match result {
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

        // A continuation after an unsure length stop that adds nothing: the window
        // was full.
        let adds_nothing = reply.content.trim().is_empty() && reply.tool_calls.is_empty();
        let unsure_before = std::mem::take(&mut unsure_length_stop);
        let length =
            (reply.stop == StopReason::MaxTokens).then(|| length_stop(&reply, max_tokens, window));
        let full = match length {
            Some(LengthStop::FullWindow) => true,
            Some(LengthStop::Unsure) if unsure_before => true,
            Some(LengthStop::Unsure) => {
                unsure_length_stop = true;
                false
            }
            Some(LengthStop::OutputLimit) => false,
            None => unsure_before && adds_nothing,
        };
        // What was streamed is kept, whatever comes next.
        if !(adds_nothing && full) {
            let assistant = ChatMessage::assistant(reply.content.clone(), reply.tool_calls.clone());
            emit(&assistant)?;
            messages.push(assistant);
        }
        if full {
            // Continuing would only fill the window further: shorten old tool output
            // and go on, or stop with the reason.
            let trimmed = if shrinks < MAX_SHRINKS {
                shrink_context(&mut messages)
            } else {
                0
            };
            if trimmed == 0 {
                return Err(LoopError::Model(ModelError::ContextLength(format!(
                    "the conversation fills the context window of {} (its reply stopped at the \
                     window's end{}); what it wrote is kept. Clear or summarise the context, or \
                     use a model with a larger window",
                    selection.display,
                    match (reply.usage, window) {
                        (Some(usage), Some(window)) => format!(
                            ", {} + {} of {window} tokens",
                            usage.input_tokens, usage.output_tokens
                        ),
                        (Some(usage), None) => {
                            format!(" after {} tokens", usage.output_tokens)
                        }
                        _ => String::new(),
                    }
                ))));
            }
            shrinks += 1;
            let step = steps.begin(
                StepKind::Wait,
                format!("The conversation fills the model's context window; shortened {trimmed} old tool results and going on"),
            );
            steps.end(step, false, None);
            // Calls in a reply the window stopped are not run, but each needs its
            // result or the next request is refused.
            for call in &reply.tool_calls {
                let result = ChatMessage::tool_result(
                    call,
                    "not run: the reply stopped at the end of the context window",
                    true,
                );
                emit(&result)?;
                messages.push(result);
            }
            if !adds_nothing {
                messages.push(ChatMessage::user(CONTINUE_PROMPT));
            }
            continue;
        }
        if reply.stop != StopReason::MaxTokens {
            continuations = 0;
        }
        if reply.stop != StopReason::Interrupted {
            interruptions = 0;
        }

        if reply.tool_calls.is_empty() {
            match reply.stop {
                StopReason::MaxTokens => {
                    // Keep the partial answer and let the model go on (seed 000),
                    // a bounded number of times in a row.
                    if continuations >= MAX_CONTINUATIONS {
                        return Err(LoopError::CutOff {
                            continuations: MAX_CONTINUATIONS,
                        });
                    }
                    continuations += 1;
                    messages.push(ChatMessage::user(CONTINUE_PROMPT));
                    continue;
                }
                StopReason::Interrupted => {
                    // Never a final answer: keep what came and ask for the rest.
                    if interruptions >= MAX_CONTINUATIONS {
                        return Err(LoopError::Interrupted {
                            count: interruptions + 1,
                        });
                    }
                    interruptions += 1;
                    messages.push(ChatMessage::user(RESUME_PROMPT));
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
                // The user said more while the model answered: go on with it.
                // (At the iteration cap the answer stands; what is left untaken
                // is never reported taken, so the control plane runs it later.)
                _ if !input.inbox.is_empty() && calls < input.max_iterations => continue,
                _ => return Ok(reply.content),
            }
        }

        let mut malformed = 0;
        // A finishing tool called successfully in this batch: the turn ends after it.
        let mut ends_turn = false;
        let (runnable, refused) = reply
            .tool_calls
            .split_at(reply.tool_calls.len().min(MAX_TOOL_CALLS_PER_REPLY));
        let pipeline = pipeline::Pipeline {
            gate,
            tools,
            offered: &live.tools,
            run_id: input.run_id,
            sink,
            cancel,
        };
        for call in runnable {
            if cancel.is_cancelled() {
                return Err(LoopError::Cancelled("the run was cancelled".into()));
            }
            // A call cut off by the output limit has unfinished arguments: say so,
            // rather than "invalid JSON", so the model sends it again, shorter.
            let cut_off = reply.stop == StopReason::MaxTokens
                && serde_json::from_str::<serde_json::Value>(&call.arguments).is_err();
            let (result, was_malformed) = pipeline.run(call, cut_off, &steps).await?;
            if was_malformed {
                malformed += 1;
            }
            ends_turn |= !result.is_error && ends_the_turn(&live.tools, call);
            messages.push(result);
        }
        if !refused.is_empty() {
            // Every call needs its result, or the next request is refused by the API.
            let step = steps.begin(
                StepKind::Tool,
                format!(
                    "Refused {} tool calls past the first {MAX_TOOL_CALLS_PER_REPLY} of one reply",
                    refused.len()
                ),
            );
            steps.end(step, true, None);
            for call in refused {
                let result = ChatMessage::tool_result(
                    call,
                    format!(
                        "not run: only the first {MAX_TOOL_CALLS_PER_REPLY} tool calls of a reply \
                         are run; ask for this one again in your next reply"
                    ),
                    true,
                );
                emit(&result)?;
                messages.push(result);
            }
        }
        if ends_turn {
            return Ok(reply.content);
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

pub mod pipeline;
pub(crate) mod retry;
pub mod transcript;

#[cfg(test)]
pub(crate) mod tests;
