//! The tool loop against a scripted model (no network, no processes).
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use chorus_proto::domain::{Role, ToolCall};
use serde_json::json;
use tokio::sync::mpsc;

use super::retry::backoff;
use super::*;
use crate::gate::AllowAll;
use crate::model::ModelReply;
use crate::tools::jail::Workspace;

/// A model that answers from a script and remembers what it was sent.
#[derive(Clone, Default)]
pub(crate) struct Scripted {
    pub(crate) replies: Arc<Mutex<VecDeque<Result<ModelReply, ModelError>>>>,
    pub(crate) seen: Arc<Mutex<Vec<Vec<ChatMessage>>>>,
    /// The rest of each request: system prompt, tools offered, max_tokens.
    pub(crate) requests: Arc<Mutex<Vec<(String, usize, u32)>>>,
    /// The names of the tools offered in each request.
    pub(crate) tool_names: Arc<Mutex<Vec<Vec<String>>>>,
    /// Called with the call's number (from 1) as each call arrives, before it is
    /// answered: for tests that act while a model call is in flight.
    pub(crate) on_call: Option<Arc<dyn Fn(usize) + Send + Sync>>,
    hang: bool,
}

impl Scripted {
    pub(crate) fn new(script: Vec<Result<ModelReply, ModelError>>) -> Self {
        Scripted {
            replies: Arc::new(Mutex::new(script.into())),
            ..Scripted::default()
        }
    }
}

impl ModelClient for Scripted {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let call = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(request.messages.to_vec());
            seen.len()
        };
        self.requests.lock().unwrap().push((
            request.system.to_string(),
            request.tools.len(),
            request.max_tokens,
        ));
        self.tool_names
            .lock()
            .unwrap()
            .push(request.tools.iter().map(|t| t.name.clone()).collect());
        if let Some(hook) = &self.on_call {
            hook(call);
        }
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

pub(crate) fn reply(content: &str, stop: StopReason) -> Result<ModelReply, ModelError> {
    Ok(ModelReply {
        content: content.into(),
        tool_calls: vec![],
        stop,
        usage: None,
        model: None,
        finish_reason: None,
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
        model: None,
        finish_reason: None,
    })
}

struct Outcome {
    result: Result<String, LoopError>,
    events: Vec<WorkerEvent>,
    seen: Vec<Vec<ChatMessage>>,
    /// The system prompt of each model call.
    systems: Vec<String>,
}

async fn run_script(script: Vec<Result<ModelReply, ModelError>>, policy: RetryPolicy) -> Outcome {
    let model = Scripted {
        replies: Arc::new(Mutex::new(script.into())),
        ..Scripted::default()
    };
    run_with(model, policy, &CancellationToken::new()).await
}

async fn run_with(model: Scripted, retry: RetryPolicy, cancel: &CancellationToken) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    run_with_tools(model, retry, cancel, &tools).await
}

async fn run_with_tools(
    model: Scripted,
    retry: RetryPolicy,
    cancel: &CancellationToken,
    tools: &ToolBox,
) -> Outcome {
    let (_agent_tx, agent_rx) = watch::channel(live_agent());
    let input = LoopInput {
        max_iterations: 10,
        retry,
        ..loop_input(agent_rx)
    };
    run_input(model, input, cancel, tools).await
}

/// The input of a scripted run: thread "go", run "r", no inputs, no board.
fn loop_input(agent: watch::Receiver<LiveAgent>) -> LoopInput<'static> {
    LoopInput {
        run_id: "r",
        messages: vec![ChatMessage::user("go")],
        inputs: Vec::new(),
        inbox: Inbox::default(),
        board: None,
        first_step_number: 1,
        max_iterations: 10,
        retry: fast(),
        agent,
        resumed: None,
    }
}

async fn run_input(
    model: Scripted,
    input: LoopInput<'_>,
    cancel: &CancellationToken,
    tools: &ToolBox,
) -> Outcome {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let result = run(&model, &AllowAll, tools, input, &EventSink::new(tx), cancel).await;
    let mut events = Vec::new();
    while let Ok(sequenced) = rx.try_recv() {
        events.push(sequenced.event);
    }
    let seen = model.seen.lock().unwrap().clone();
    let systems = model
        .requests
        .lock()
        .unwrap()
        .iter()
        .map(|(system, _, _)| system.clone())
        .collect();
    Outcome {
        result,
        events,
        seen,
        systems,
    }
}

/// Every tool of the registry, as a control plane offers them.
pub(crate) fn every_tool() -> Vec<ToolSpec> {
    chorus_proto::tools::TOOLS
        .iter()
        .map(|t| t.spec(&Default::default()))
        .collect()
}

/// The agent every scripted run talks for.
fn live_agent() -> LiveAgent {
    LiveAgent {
        model: ModelSelection {
            display: "m".into(),
            route: ModelRoute {
                provider: "p".into(),
                api: ModelRoute::OPENAI_CHAT.into(),
                relay_path: "/llm/p".into(),
                model: "m".into(),
                limits: Default::default(),
            },
        },
        system_prompt: "sys".into(),
        tools: std::sync::Arc::new(every_tool()),
        docs_dir: None,
        identity: String::new(),
        memory: String::new(),
        relevant: String::new(),
    }
}

/// `files` turns that each write a 5,000-byte file and view it: long tool results
/// the context can be shortened by.
fn long_tool_results(files: usize) -> Vec<Result<ModelReply, ModelError>> {
    let big = "x".repeat(5000);
    let mut script = Vec::new();
    for i in 0..files {
        script.push(call_reply(
            "create_file",
            &json!({"path": format!("f{i}"), "content": big}).to_string(),
        ));
        script.push(call_reply(
            "view",
            &json!({"path": format!("f{i}")}).to_string(),
        ));
    }
    script
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 3,
        max_total_ms: 10_000,
        base_delay_ms: 1,
        ..RetryPolicy::default()
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
    // Cut off at the output limit asked for: all of `max_tokens` was used.
    let mut cut = reply("part one", StopReason::MaxTokens).unwrap();
    cut.usage = Some(Usage {
        input_tokens: 100,
        output_tokens: u64::from(crate::model::DEFAULT_MAX_TOKENS),
    });
    let out = run_script(
        vec![Ok(cut), reply("part two", StopReason::EndTurn)],
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
    // SIGKILLed at once; the deadline is for a loaded machine, where the killed
    // processes may wait a while for a core to exit on (2 s was missed once in CI).
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
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
    let mut script = long_tool_results(4);
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

/// A write that must wait for a file another thread is writing shows the wait as a
/// step of its own, ended when the lock is taken (or failed when the wait times out).
#[tokio::test]
async fn a_wait_for_a_file_lock_is_a_step_of_its_own() {
    use crate::tools::locks::FileLocks;
    for (timeout, released, lock_step_failed) in [
        (Duration::from_secs(10), true, false),
        (Duration::from_millis(100), false, true),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let locks = Arc::new(FileLocks::new(timeout));
        let tools = ToolBox::new(Workspace::new(dir.path()), locks.clone());
        let held = locks.lock("a.txt").await.unwrap();
        // Another thread's write holds the file until this run's write queues behind it.
        let other_write = tokio::spawn({
            let locks = locks.clone();
            async move {
                while released && locks.claims("a.txt") < 2 {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                if !released {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                drop(held);
            }
        });
        let model = Scripted {
            replies: Arc::new(Mutex::new(
                vec![
                    call_reply("create_file", r#"{"path":"a.txt","content":"mine"}"#),
                    reply("done", StopReason::EndTurn),
                ]
                .into(),
            )),
            ..Scripted::default()
        };
        let out = run_with_tools(model, fast(), &CancellationToken::new(), &tools).await;
        other_write.await.unwrap();
        assert_eq!(out.result.unwrap(), "done");
        assert_eq!(
            step_descriptions(&out.events),
            vec![
                "Calling LLM (m)",
                "Executing create_file: a.txt",
                "Awaiting file lock on a.txt",
                "Calling LLM (m)"
            ]
        );
        let ended: Vec<(u32, bool)> = out
            .events
            .iter()
            .filter_map(|e| match e {
                WorkerEvent::StepEnded(s) => Some((s.number, s.failed)),
                _ => None,
            })
            .collect();
        // The wait (step 3) ends before the write (step 2) it belongs to.
        assert_eq!(
            ended,
            vec![
                (1, false),
                (3, lock_step_failed),
                (2, lock_step_failed),
                (4, false)
            ],
            "timeout {timeout:?}"
        );
        let result = &out.seen[1].last().unwrap().content;
        if released {
            assert_eq!(result, "Created a.txt (4 bytes)");
        } else {
            assert!(result.contains("locked by another thread"), "{result}");
        }
    }
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

fn length_reply(text: &str, input: u64, output: u64) -> ModelReply {
    let mut reply = reply(text, StopReason::MaxTokens).unwrap();
    reply.usage = Some(Usage {
        input_tokens: input,
        output_tokens: output,
    });
    reply
}

#[test]
fn a_length_stop_is_judged_by_what_is_known() {
    // The window known: input plus output against it.
    let far = length_reply("x", 1000, 512);
    assert_eq!(
        length_stop(&far, 8192, Some(32768)),
        LengthStop::OutputLimit
    );
    let full = length_reply("x", 32000, 700);
    assert_eq!(
        length_stop(&full, 8192, Some(32768)),
        LengthStop::FullWindow
    );
    // Unknown: every token asked for was used, or not.
    assert_eq!(
        length_stop(&length_reply("x", 10, 8192), 8192, None),
        LengthStop::OutputLimit
    );
    assert_eq!(length_stop(&far, 8192, None), LengthStop::Unsure);
    // Without usage, by bytes (a token is at least one).
    assert_eq!(
        length_stop(&reply("The", StopReason::MaxTokens).unwrap(), 8192, None),
        LengthStop::Unsure
    );
}

/// Runs `script` for a model whose limits are `limits`.
async fn run_script_with_limits(
    script: Vec<Result<ModelReply, ModelError>>,
    limits: chorus_proto::domain::ModelLimits,
) -> Outcome {
    let model = Scripted {
        replies: Arc::new(Mutex::new(script.into())),
        ..Scripted::default()
    };
    let mut agent = live_agent();
    agent.model.route.limits = limits;
    let (_agent_tx, agent_rx) = watch::channel(agent);
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let input = LoopInput {
        max_iterations: 10,
        retry: fast(),
        ..loop_input(agent_rx)
    };
    run_input(model, input, &CancellationToken::new(), &tools).await
}

/// A reply stopped by a server's own output cap (far from the window) is kept and
/// continued; one stopped at the full window fails with that reason, keeping what
/// it wrote; with no window known, a length stop is continued once and called full
/// only when the continuation adds nothing.
#[tokio::test]
async fn an_output_cap_is_continued_and_a_full_window_fails_keeping_the_answer() {
    let limits = chorus_proto::domain::ModelLimits {
        max_tokens: Some(4096),
        context_window: Some(32768),
    };
    let out = run_script_with_limits(
        vec![
            Ok(length_reply("The first half", 1000, 512)),
            reply(" and the rest.", StopReason::EndTurn),
        ],
        limits,
    )
    .await;
    assert_eq!(out.result.unwrap(), " and the rest.");
    assert_eq!(out.seen[1].last().unwrap().content, CONTINUE_PROMPT);
    let asked = out.seen.len();
    assert_eq!(asked, 2);

    let out =
        run_script_with_limits(vec![Ok(length_reply("The answer is", 32000, 700))], limits).await;
    let error = out.result.unwrap_err().to_string();
    assert!(error.contains("fills the context window of m"), "{error}");
    assert!(error.contains("32000 + 700 of 32768 tokens"), "{error}");
    assert_eq!(out.seen.len(), 1, "no 'continue' request was sent");
    assert!(
        out.events.iter().any(|e| matches!(e, WorkerEvent::MessageAppended { message, .. } if message.content == "The answer is")),
        "what it wrote is kept"
    );

    // No window known, a server cap (512 of 8192): continued, and it goes on.
    let out = run_script(
        vec![
            Ok(length_reply("The first half", 20, 512)),
            reply(" and the rest.", StopReason::EndTurn),
        ],
        fast(),
    )
    .await;
    assert_eq!(out.result.unwrap(), " and the rest.");
    // No window known, and the continuation adds nothing: the window was full.
    let out = run_script(
        vec![
            Ok(length_reply("The answer is", 4000, 12)),
            reply("", StopReason::EndTurn),
        ],
        fast(),
    )
    .await;
    assert!(matches!(
        out.result,
        Err(LoopError::Model(ModelError::ContextLength(_)))
    ));
    assert_eq!(out.seen.len(), 2, "continued once");
    assert!(
        out.events.iter().any(|e| matches!(e, WorkerEvent::MessageAppended { message, .. } if message.content == "The answer is"))
    );

    // With old tool output to shorten, it is shortened and the run goes on.
    let mut script = long_tool_results(2);
    script.push(Ok(length_reply("The", 32000, 700)));
    script.push(reply(" fits now", StopReason::EndTurn));
    let out = run_script_with_limits(script, limits).await;
    assert_eq!(out.result.unwrap(), " fits now");
    let last = out.seen.last().unwrap();
    assert!(last.iter().any(|m| m.content == TRIMMED_OUTPUT));
}

#[tokio::test]
async fn tool_calls_past_the_bound_are_answered_as_refused() {
    let calls: Vec<ToolCall> = (0..MAX_TOOL_CALLS_PER_REPLY + 3)
        .map(|i| ToolCall {
            id: format!("c{i}"),
            name: "file.list".into(),
            arguments: "{}".into(),
        })
        .collect();
    let many = ModelReply {
        content: String::new(),
        tool_calls: calls,
        stop: StopReason::ToolUse,
        usage: None,
        model: None,
        finish_reason: None,
    };
    let out = run_script(vec![Ok(many), reply("done", StopReason::EndTurn)], fast()).await;
    assert_eq!(out.result.unwrap(), "done");
    let results: Vec<&ChatMessage> = out.seen[1]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .collect();
    assert_eq!(
        results.len(),
        MAX_TOOL_CALLS_PER_REPLY + 3,
        "every call has its result"
    );
    assert!(
        results[..MAX_TOOL_CALLS_PER_REPLY]
            .iter()
            .all(|m| !m.is_error)
    );
    for refused in &results[MAX_TOOL_CALLS_PER_REPLY..] {
        assert!(refused.is_error);
        assert!(
            refused.content.contains("only the first 64 tool calls"),
            "{}",
            refused.content
        );
    }
    assert!(
        step_descriptions(&out.events)
            .iter()
            .any(|d| d == "Refused 3 tool calls past the first 64 of one reply")
    );
}

fn cut_off(text: &str) -> Result<ModelReply, ModelError> {
    let mut reply = reply(text, StopReason::MaxTokens).unwrap();
    reply.usage = Some(Usage {
        input_tokens: 10,
        output_tokens: u64::from(crate::model::DEFAULT_MAX_TOKENS),
    });
    Ok(reply)
}

#[tokio::test]
async fn continuing_a_cut_off_answer_is_bounded() {
    // Three continuations are asked for; a fourth cut-off ends the run with the reason,
    // every partial answer kept in the history.
    let script = vec![
        cut_off("one"),
        cut_off("two"),
        cut_off("three"),
        cut_off("four"),
    ];
    let out = run_script(script, fast()).await;
    let error = out.result.unwrap_err();
    assert!(
        matches!(error, LoopError::CutOff { continuations: 3 }),
        "{error}"
    );
    assert!(
        error.to_string().contains("after 3 continuations"),
        "{error}"
    );
    assert_eq!(out.seen.len(), 4);
    let continues = out.seen[3]
        .iter()
        .filter(|m| m.content == CONTINUE_PROMPT)
        .count();
    assert_eq!(continues, 3);

    // A finished reply in between starts the count again.
    let script = vec![
        cut_off("a"),
        call_reply("file.list", "{}"),
        cut_off("b"),
        cut_off("c"),
        cut_off("d"),
        reply("end", StopReason::EndTurn),
    ];
    let out = run_script(script, fast()).await;
    assert_eq!(out.result.unwrap(), "end");
}

#[tokio::test]
async fn a_tool_call_cut_off_by_the_output_limit_is_answered_so_the_model_can_fix_it() {
    let mut cut = call_reply("create_file", r#"{"path": "big.txt", "content": "aaaa"#).unwrap();
    cut.stop = StopReason::MaxTokens;
    cut.usage = Some(Usage {
        input_tokens: 10,
        output_tokens: u64::from(crate::model::DEFAULT_MAX_TOKENS),
    });
    let out = run_script(
        vec![Ok(cut), reply("retrying", StopReason::EndTurn)],
        fast(),
    )
    .await;
    assert_eq!(out.result.unwrap(), "retrying");
    let result = out.seen[1].last().unwrap();
    assert_eq!(result.role, Role::Tool);
    assert!(result.is_error);
    assert_eq!(result.content, CUT_OFF_CALL);
}

#[tokio::test]
async fn a_history_with_an_unanswered_call_is_repaired_before_it_is_sent() {
    let model = Scripted::default();
    model
        .replies
        .lock()
        .unwrap()
        .push_back(reply("checked", StopReason::EndTurn));
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let (tx, _rx) = mpsc::unbounded_channel();
    let (_agent_tx, agent_rx) = watch::channel(live_agent());
    let interrupted = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command": "make"}"#.into(),
    };
    let input = LoopInput {
        messages: vec![
            ChatMessage::user("build it"),
            ChatMessage::assistant("", vec![interrupted]),
            ChatMessage::user("did it work?"),
        ],
        max_iterations: 3,
        ..loop_input(agent_rx)
    };
    let cancel = CancellationToken::new();
    let result = run(
        &model,
        &AllowAll,
        &tools,
        input,
        &EventSink::new(tx),
        &cancel,
    )
    .await;
    assert_eq!(result.unwrap(), "checked");
    let sent = model.seen.lock().unwrap()[0].clone();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[2].role, Role::Tool);
    assert_eq!(sent[2].tool_call_id.as_deref(), Some("c1"));
    assert_eq!(sent[2].content, transcript::INTERRUPTED_RESULT);
}

#[tokio::test]
async fn the_result_for_a_call_the_history_ended_with_is_reported_to_be_stored_first() {
    let model = Scripted::default();
    model
        .replies
        .lock()
        .unwrap()
        .push_back(reply("checked", StopReason::EndTurn));
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let (_agent_tx, agent_rx) = watch::channel(live_agent());
    let killed_while_running = ToolCall {
        id: "c1".into(),
        name: "bash".into(),
        arguments: r#"{"command": "make"}"#.into(),
    };
    let input = LoopInput {
        messages: vec![
            ChatMessage::user("build it"),
            ChatMessage::assistant("", vec![killed_while_running]),
        ],
        max_iterations: 3,
        ..loop_input(agent_rx)
    };
    let outcome = run_input(model, input, &CancellationToken::new(), &tools).await;
    assert_eq!(outcome.result.unwrap(), "checked");
    // The first thing the run reports is the result, so it takes its place in the
    // thread right after the call.
    match &outcome.events[0] {
        WorkerEvent::MessageAppended { message, .. } => {
            assert_eq!(message.role, Role::Tool);
            assert_eq!(message.tool_call_id.as_deref(), Some("c1"));
            assert_eq!(message.content, transcript::INTERRUPTED_RESULT);
        }
        other => panic!("first event: {other:?}"),
    }
    let results = outcome
        .events
        .iter()
        .filter(|e| matches!(e, WorkerEvent::MessageAppended { message, .. } if message.role == Role::Tool))
        .count();
    assert_eq!(results, 1, "reported once");
}

fn user_input(message_id: u64, content: &str) -> Input {
    Input {
        message_id,
        content: content.into(),
    }
}

/// Where in `events` the first event matching `is` is.
fn position(events: &[WorkerEvent], is: impl Fn(&WorkerEvent) -> bool) -> usize {
    events
        .iter()
        .position(is)
        .unwrap_or_else(|| panic!("no such event in {events:#?}"))
}

fn taken(events: &[WorkerEvent]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::InputTaken { message_id, .. } => Some(*message_id),
            _ => None,
        })
        .collect()
}

fn step_started(number: u32) -> impl Fn(&WorkerEvent) -> bool {
    move |e| matches!(e, WorkerEvent::StepStarted(s) if s.number == number)
}

#[tokio::test]
async fn an_input_injected_while_a_tool_runs_reaches_the_next_model_call_after_its_result() {
    use crate::tools::locks::FileLocks;
    let dir = tempfile::tempdir().unwrap();
    let locks = Arc::new(FileLocks::new(Duration::from_secs(30)));
    let tools = ToolBox::new(Workspace::new(dir.path()), locks.clone());
    // The tool (a write) waits for this lock, so the message arrives while it runs.
    let held = locks.lock("a.txt").await.unwrap();
    let inbox = Inbox::default();
    let injector = tokio::spawn({
        let (inbox, locks) = (inbox.clone(), locks.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(10);
            while locks.claims("a.txt") < 2 {
                assert!(Instant::now() < deadline, "the write never started");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            inbox.push(user_input(42, "also add a README"));
            drop(held);
        }
    });
    let model = Scripted::new(vec![
        call_reply("create_file", r#"{"path":"a.txt","content":"mine"}"#),
        reply("done", StopReason::EndTurn),
    ]);
    let (_agent_tx, agent_rx) = watch::channel(live_agent());
    let run_input_ = LoopInput {
        inbox: inbox.clone(),
        ..loop_input(agent_rx)
    };
    let out = run_input(model, run_input_, &CancellationToken::new(), &tools).await;
    injector.await.unwrap();
    assert_eq!(out.result.unwrap(), "done");
    assert_eq!(
        out.seen[0].len(),
        1,
        "nothing to take before the first call"
    );
    let second: Vec<(Role, &str)> = out.seen[1]
        .iter()
        .map(|m| (m.role, m.content.as_str()))
        .collect();
    assert_eq!(
        second,
        vec![
            (Role::User, "go"),
            (Role::Assistant, ""),
            (Role::Tool, "Created a.txt (4 bytes)"),
            (Role::User, "also add a README"),
        ],
        "after the tool's result, never between the call and its result"
    );
    assert_eq!(taken(&out.events), vec![42]);
    // Steps: 1 model call, 2 the write, 3 its lock wait, 4 the next model call.
    let taken_at = position(&out.events, |e| matches!(e, WorkerEvent::InputTaken { .. }));
    let tool_ended = position(
        &out.events,
        |e| matches!(e, WorkerEvent::StepEnded(s) if s.number == 2),
    );
    assert!(tool_ended < taken_at && taken_at < position(&out.events, step_started(4)));
    assert!(inbox.is_empty());
}

#[tokio::test]
async fn an_input_arriving_as_the_model_answers_makes_the_run_go_on() {
    for max_iterations in [10, 1] {
        let inbox = Inbox::default();
        let mut model = Scripted::new(vec![
            reply("first answer", StopReason::EndTurn),
            reply("second answer", StopReason::EndTurn),
        ]);
        model.on_call = Some(Arc::new({
            let inbox = inbox.clone();
            move |call| {
                if call == 1 {
                    inbox.push(user_input(7, "one more thing"));
                }
            }
        }));
        let (_agent_tx, agent_rx) = watch::channel(live_agent());
        let input = LoopInput {
            inbox: inbox.clone(),
            max_iterations,
            ..loop_input(agent_rx)
        };
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
        let out = run_input(model, input, &CancellationToken::new(), &tools).await;
        if max_iterations == 1 {
            // At the iteration cap the answer stands; the message is left untaken
            // (never reported taken), for the control plane to run later.
            assert_eq!(out.result.unwrap(), "first answer");
            assert!(taken(&out.events).is_empty());
            assert_eq!(inbox.take_all(), vec![user_input(7, "one more thing")]);
            continue;
        }
        assert_eq!(out.result.unwrap(), "second answer");
        let last: Vec<&str> = out.seen[1].iter().map(|m| m.content.as_str()).collect();
        assert_eq!(last, vec!["go", "first answer", "one more thing"]);
        assert_eq!(taken(&out.events), vec![7]);
        let taken_at = position(&out.events, |e| matches!(e, WorkerEvent::InputTaken { .. }));
        assert!(taken_at < position(&out.events, step_started(2)));
    }
}

#[tokio::test]
async fn the_assignments_inputs_reach_the_first_model_call_before_injected_ones() {
    let inbox = Inbox::default();
    inbox.push(user_input(3, "third"));
    let (_agent_tx, agent_rx) = watch::channel(live_agent());
    let input = LoopInput {
        inputs: vec![user_input(1, "first"), user_input(2, "second")],
        inbox,
        ..loop_input(agent_rx)
    };
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let model = Scripted::new(vec![reply("ok", StopReason::EndTurn)]);
    let out = run_input(model, input, &CancellationToken::new(), &tools).await;
    assert_eq!(out.result.unwrap(), "ok");
    let sent: Vec<&str> = out.seen[0].iter().map(|m| m.content.as_str()).collect();
    assert_eq!(sent, vec!["go", "first", "second", "third"]);
    assert_eq!(taken(&out.events), vec![1, 2, 3]);
    assert!(matches!(
        &out.events[..4],
        [
            WorkerEvent::InputTaken { .. },
            WorkerEvent::InputTaken { .. },
            WorkerEvent::InputTaken { .. },
            WorkerEvent::StepStarted(_)
        ]
    ));
}

#[tokio::test]
async fn the_model_is_told_of_the_agents_other_threads_and_only_then() {
    use crate::awareness::Board;
    use chorus_proto::domain::StepKind;
    let board = Arc::new(Board::default());
    board.join("r", 1, "Refactoring auth", 0);
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
    let run_once = |board: Arc<Board>| {
        let (agent_tx, agent_rx) = watch::channel(live_agent());
        let input = LoopInput {
            board: Some(board),
            ..loop_input(agent_rx)
        };
        let model = Scripted::new(vec![reply("ok", StopReason::EndTurn)]);
        let tools = &tools;
        async move {
            let out = run_input(model, input, &CancellationToken::new(), tools).await;
            drop(agent_tx);
            out
        }
    };
    let alone = run_once(board.clone()).await;
    assert_eq!(
        alone.systems,
        vec!["sys"],
        "one thread: the prompt is unchanged"
    );

    // Seen afresh: at its first call, a thread is at step 1, calling its model.
    let board = Arc::new(Board::default());
    board.join("r", 1, "Refactoring auth", 0);
    board.join("o", 2, "Writing tests", 0);
    board.step_began("o", 3, StepKind::Permission, "Asking to run bash: make");
    let together = run_once(board.clone()).await;
    let system = &together.systems[0];
    assert!(
        system.starts_with(
            "sys\n\nActive threads in this agent:\n  \
             Thread #1 (this thread): Refactoring auth — step 1, 0s elapsed, currently: Calling LLM (m)\n  \
             Thread #2: Writing tests — step 3, 0s elapsed, currently: Asking to run bash: make [waiting_for_permission]"
        ),
        "{system}"
    );
}

/// A stream the server cut off without a reason (text, no finish reason) is never
/// the final answer: it is kept and continued, a bounded number of times in a row.
#[tokio::test]
async fn an_interrupted_answer_is_kept_and_continued_never_final() {
    let script = vec![
        reply("The first half", StopReason::Interrupted),
        reply(" and the rest.", StopReason::EndTurn),
    ];
    let out = run_script(script, fast()).await;
    assert_eq!(out.result.unwrap(), " and the rest.");
    let second = &out.seen[1];
    assert_eq!(second[second.len() - 2].content, "The first half");
    assert_eq!(second[second.len() - 1].content, RESUME_PROMPT);
    let kept: Vec<&str> = out
        .events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::MessageAppended { message, .. } => Some(message.content.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(kept, ["The first half", " and the rest."]);

    let script = (0..=MAX_CONTINUATIONS)
        .map(|i| reply(&format!("part {i}"), StopReason::Interrupted))
        .collect();
    let out = run_script(script, fast()).await;
    let error = out.result.unwrap_err();
    assert!(
        matches!(error, LoopError::Interrupted { count: 4 }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("cut the model's answer off 4 times")
    );
}

/// A gate that records the calls it is asked about and carries each out itself,
/// as the control plane does for its own tools.
#[derive(Default)]
struct CarriesOut {
    calls: Mutex<Vec<ToolCall>>,
}

impl ToolGate for CarriesOut {
    fn check(
        &self,
        _run_id: &str,
        call: &ToolCall,
    ) -> mpsc::UnboundedReceiver<crate::gate::GateMessage> {
        self.calls.lock().unwrap().push(call.clone());
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(crate::gate::GateMessage::Decided(
            chorus_proto::domain::ToolDecision {
                request_id: 0,
                allowed: true,
                message: String::new(),
                result: Some(chorus_proto::domain::ToolResult {
                    content: format!("reported by the control plane: {}", call.arguments),
                    is_error: false,
                }),
            },
        ));
        rx
    }
}

/// A tool this worker's build neither defines nor executes, offered by the
/// assignment as one the control plane runs: the model is offered it, a call with
/// an object of arguments goes to the gate under its Chorus name and the gate's
/// result comes back to the model; a call whose arguments are no object never
/// reaches the gate. Without the spec (the positive control), the same call is an
/// unknown tool and never reaches the gate either.
#[tokio::test]
async fn an_offered_control_plane_tool_the_worker_does_not_know_runs_through_the_gate() {
    use chorus_proto::tools::{self as registry, RunsIn};
    assert!(registry::find("board.report").is_none() && registry::find("board_report").is_none());
    let spec = ToolSpec {
        name: "board.report".into(),
        wire_name: "board_report".into(),
        description: "Report progress on your task".into(),
        schema_json: json!({"type": "object", "properties": {"done": {"type": "boolean"}}})
            .to_string(),
        runs_in: RunsIn::ControlPlane,
        ends_turn: false,
    };
    let run = |offered: Vec<ToolSpec>| async move {
        let model = Scripted::new(vec![
            // Named as the model clients hand it over: by its wire name, since this
            // build cannot rename a tool it does not know.
            call_reply("board_report", r#"{"done": true}"#),
            call_reply("board_report", "[1]"),
            reply("ok", StopReason::EndTurn),
        ]);
        let gate = CarriesOut::default();
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
        let (_agent_tx, agent_rx) = watch::channel(LiveAgent {
            tools: std::sync::Arc::new(offered),
            ..live_agent()
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let result = run(
            &model,
            &gate,
            &tools,
            loop_input(agent_rx),
            &EventSink::new(tx),
            &CancellationToken::new(),
        )
        .await;
        let mut events = Vec::new();
        while let Ok(sequenced) = rx.try_recv() {
            events.push(sequenced.event);
        }
        assert_eq!(result.unwrap(), "ok");
        let seen = model.seen.lock().unwrap().clone();
        let offered = model.tool_names.lock().unwrap()[0].clone();
        let calls = gate.calls.lock().unwrap().clone();
        (offered, calls, seen, events)
    };

    let (offered, calls, seen, events) = run(vec![spec.clone()]).await;
    assert_eq!(
        offered,
        vec!["board.report"],
        "exactly the assignment's tools"
    );
    assert_eq!(
        calls.len(),
        1,
        "only the call with an object reaches the gate"
    );
    assert_eq!(
        calls[0].name, "board.report",
        "checked under its Chorus name"
    );
    assert_eq!(calls[0].arguments, r#"{"done": true}"#);
    let results: Vec<_> = seen[2]
        .iter()
        .filter(|m| m.role == Role::Tool)
        .map(|m| m.content.clone())
        .collect();
    assert_eq!(
        results[0],
        r#"reported by the control plane: {"done": true}"#
    );
    assert!(
        results[1].contains("must be a JSON object"),
        "{}",
        results[1]
    );
    let marks: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::StepStarted(s) => Some((s.description.as_str(), s.kind, s.runs_in)),
            _ => None,
        })
        .collect();
    assert!(
        marks.contains(&(
            "Executing board.report in the control plane",
            StepKind::Tool,
            Some(RunsIn::ControlPlane)
        )),
        "its step is marked as running there, as data: {marks:?}"
    );
    assert!(
        marks
            .iter()
            .filter(|(_, kind, _)| *kind != StepKind::Tool)
            .all(|(_, _, runs_in)| runs_in.is_none()),
        "{marks:?}"
    );
    assert!(
        marks.contains(&("Refused board.report", StepKind::Tool, None)),
        "a call refused before it ran ran nowhere: {marks:?}"
    );

    let (offered, calls, seen, _) = run(every_tool()).await;
    assert!(!offered.contains(&"board.report".to_string()));
    assert!(
        calls.is_empty(),
        "an unknown tool is never checked: {calls:?}"
    );
    let unknown = &seen[1].last().unwrap().content;
    assert!(unknown.contains("no tool named"), "{unknown}");
}

/// A gate that carries out every call itself, failing those whose arguments say
/// `"ok": false` (a finishing tool the engine refused: the model must try again).
#[derive(Default)]
struct Finishes {
    calls: Mutex<Vec<ToolCall>>,
}

impl ToolGate for Finishes {
    fn check(
        &self,
        _run_id: &str,
        call: &ToolCall,
    ) -> mpsc::UnboundedReceiver<crate::gate::GateMessage> {
        self.calls.lock().unwrap().push(call.clone());
        let refused = call.arguments.contains(r#""ok": false"#);
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(crate::gate::GateMessage::Decided(
            chorus_proto::domain::ToolDecision {
                request_id: 0,
                allowed: true,
                message: String::new(),
                result: Some(chorus_proto::domain::ToolResult {
                    content: if refused {
                        "the assignee is not an agent; the agents are: coder".into()
                    } else {
                        "plan recorded; your turn is over".into()
                    },
                    is_error: refused,
                }),
            },
        ));
        rx
    }
}

/// A task role's finishing tool (`ends_turn`): a call of it that fails leaves the
/// turn going (the model is called again with the error); one that succeeds ends
/// the run right after its batch (the other call of the batch still runs and both
/// results are stored), with no further model call. Without `ends_turn` (the
/// positive control) the same script goes on to a third model call.
#[tokio::test]
async fn a_successful_turn_ending_tool_ends_the_run_after_its_batch() {
    use chorus_proto::tools::RunsIn;
    let spec = |ends_turn: bool| ToolSpec {
        name: "submit_plan".into(),
        wire_name: "submit_plan".into(),
        description: "Submit the plan".into(),
        schema_json: json!({"type": "object"}).to_string(),
        runs_in: RunsIn::ControlPlane,
        ends_turn,
    };
    let batch = || {
        Ok(ModelReply {
            content: "Here is the plan.".into(),
            tool_calls: vec![
                ToolCall {
                    id: "c1".into(),
                    name: "submit_plan".into(),
                    arguments: r#"{"ok": true}"#.into(),
                },
                ToolCall {
                    id: "c2".into(),
                    name: "submit_plan".into(),
                    arguments: r#"{"ok": true, "again": 1}"#.into(),
                },
            ],
            stop: StopReason::ToolUse,
            usage: None,
            model: None,
            finish_reason: None,
        })
    };
    let run = |ends_turn: bool| async move {
        let model = Scripted::new(vec![
            call_reply("submit_plan", r#"{"ok": false}"#),
            batch(),
            reply("after the plan", StopReason::EndTurn),
        ]);
        let gate = Finishes::default();
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolBox::new(Workspace::new(dir.path()), Default::default());
        let mut offered = every_tool();
        offered.push(spec(ends_turn));
        let (_agent_tx, agent_rx) = watch::channel(LiveAgent {
            tools: std::sync::Arc::new(offered),
            ..live_agent()
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let result = run(
            &model,
            &gate,
            &tools,
            loop_input(agent_rx),
            &EventSink::new(tx),
            &CancellationToken::new(),
        )
        .await;
        let mut stored = Vec::new();
        while let Ok(sequenced) = rx.try_recv() {
            if let WorkerEvent::MessageAppended { message, .. } = sequenced.event
                && message.role == Role::Tool
            {
                stored.push((message.tool_call_id.clone(), message.is_error));
            }
        }
        let calls = model.seen.lock().unwrap().len();
        (
            result.unwrap(),
            calls,
            gate.calls.lock().unwrap().len(),
            stored,
        )
    };

    let (text, model_calls, checked, stored) = run(true).await;
    assert_eq!(
        text, "Here is the plan.",
        "the run ends with the finishing reply's text"
    );
    assert_eq!(
        model_calls, 2,
        "the failed call let the turn go on; the successful one ended it"
    );
    assert_eq!(checked, 3, "the whole batch ran");
    assert_eq!(
        stored,
        vec![
            (Some("c".to_string()), true),
            (Some("c1".to_string()), false),
            (Some("c2".to_string()), false)
        ],
        "every result is stored as usual"
    );

    let (text, model_calls, _, _) = run(false).await;
    assert_eq!((text.as_str(), model_calls), ("after the plan", 3));
}
