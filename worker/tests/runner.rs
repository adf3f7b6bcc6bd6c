//! The worker's `Runner` (what the connection hands every command to) against the
//! strict fake model servers over real HTTP: messages injected into a running run,
//! the agent's other threads in each model's system prompt, summaries on request,
//! and the per-run numbering of every event it sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::time::{Duration, Instant};

use chorus_proto::domain::{
    AgentSettings, ChatMessage, ControlCommand, Input, ModelRoute, RetryPolicy, RunAssignment,
    Sequenced, SummaryRequest, WorkerEvent,
};
use chorus_test_support::fake_model::{self, FakeModel, Hold, Reply, Wire};
use chorus_worker::runner::{Runner, WorkerToolSettings};
use chorus_worker::tool_loop::EventSink;
use serde_json::Value;
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(20);

fn route(wire: Wire) -> ModelRoute {
    match wire {
        Wire::OpenAi => ModelRoute {
            provider: "openai".into(),
            api: ModelRoute::OPENAI_CHAT.into(),
            relay_path: "/v1".into(),
            model: "m".into(),
            limits: Default::default(),
        },
        Wire::Anthropic => ModelRoute {
            provider: "anthropic".into(),
            api: ModelRoute::ANTHROPIC_MESSAGES.into(),
            relay_path: String::new(),
            model: "m".into(),
            limits: Default::default(),
        },
    }
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 2,
        base_delay_ms: 1,
        ..RetryPolicy::default()
    }
}

fn assignment(run_id: &str, thread_id: u64, summary: &str) -> ControlCommand {
    ControlCommand::AssignRun(Box::new(run(run_id, thread_id, summary)))
}

fn run(run_id: &str, thread_id: u64, summary: &str) -> RunAssignment {
    RunAssignment {
        run_id: run_id.into(),
        thread_id,
        agent: AgentSettings {
            name: "helper".into(),
            system_prompt: "be brief".into(),
            model: "m".into(),
            tools: vec!["view".into()],
            sandbox: Default::default(),
            offered: vec![
                chorus_proto::tools::find("view")
                    .unwrap()
                    .spec(&Default::default()),
            ],
            mcp_servers: Vec::new(),
            mcp_reach: Default::default(),
            identity: String::new(),
            memory: String::new(),
        },
        model: route(Wire::OpenAi),
        messages: vec![ChatMessage::user("go")],
        first_step_number: 1,
        max_iterations: 0,
        trace_context: HashMap::new(),
        retry: fast(),
        attempt: 1,
        inputs: Vec::new(),
        thread_summary: summary.into(),
        thread_started_at_ms: 0,
        role_tools: Vec::new(),
        workdir: None,
        files: Vec::new(),
        backend: Default::default(),
        cli_session: None,
        resumed_call: None,
        relevant: String::new(),
    }
}

/// A runner whose model calls go to `model`, the events it sends, and the agent's
/// directory (a temporary one, with an empty workspace).
fn runner(
    model: &FakeModel,
) -> (
    Runner,
    mpsc::UnboundedReceiver<Sequenced>,
    tempfile::TempDir,
) {
    let (tx, rx) = mpsc::unbounded_channel();
    let agent_dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(agent_dir.path().join("workspace")).unwrap();
    let runner = Runner::new(
        EventSink::new(tx),
        &model.host_url(),
        "worker-credential",
        &WorkerToolSettings::default(),
        agent_dir.path().to_path_buf(),
    );
    (runner, rx, agent_dir)
}

/// Events until one matches `last` (included), or the test fails at the deadline.
async fn until(
    events: &mut mpsc::UnboundedReceiver<Sequenced>,
    seen: &mut Vec<Sequenced>,
    last: impl Fn(&WorkerEvent) -> bool,
) {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, events.recv())
            .await
            .unwrap_or_else(|_| panic!("no such event within {WAIT:?}; got {seen:#?}"))
            .expect("the sink is open");
        let done = last(&event.event);
        seen.push(event);
        if done {
            return;
        }
    }
}

fn completed(run: &'static str) -> impl Fn(&WorkerEvent) -> bool {
    move |e| matches!(e, WorkerEvent::RunCompleted { run_id, .. } if run_id == run)
}

/// Each run's events are numbered 1, 2, 3 … in the order they came; others are 0.
fn assert_numbered_per_run(events: &[Sequenced]) {
    let mut last: HashMap<String, u64> = HashMap::new();
    for event in events {
        match event.event.run_id() {
            None => assert_eq!(event.seq, 0, "{event:?}"),
            Some(run) => {
                let previous = last.insert(run.to_string(), event.seq).unwrap_or(0);
                assert_eq!(event.seq, previous + 1, "{event:?}");
            }
        }
    }
}

fn system_of(request: &Value) -> String {
    request["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn a_message_injected_into_a_running_run_reaches_its_next_model_call() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(fake_model::text("first")),
    ));
    model.push(fake_model::text("second"));
    let (runner, mut events, _agent_dir) = runner(&model);
    runner.handle(assignment("r1", 1, ""));
    model.wait_for_requests(1, WAIT).await;
    // Arrives while the model answers: the run takes it and goes on.
    runner.handle(ControlCommand::InjectMessage {
        run_id: "r1".into(),
        input: Input {
            message_id: 5,
            content: "and also this".into(),
        },
    });
    // For a run this worker is not running: ignored, nothing is sent.
    runner.handle(ControlCommand::InjectMessage {
        run_id: "gone".into(),
        input: Input {
            message_id: 6,
            content: "lost?".into(),
        },
    });
    hold.release();
    let mut seen = Vec::new();
    until(&mut events, &mut seen, completed("r1")).await;
    assert!(matches!(
        &seen.last().unwrap().event,
        WorkerEvent::RunCompleted { final_text, .. } if final_text == "second"
    ));
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let last = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(last["role"], "user");
    assert_eq!(last["content"], "and also this");
    let kinds: Vec<String> = seen
        .iter()
        .filter_map(|s| match &s.event {
            WorkerEvent::InputTaken { message_id, .. } => Some(format!("taken {message_id}")),
            WorkerEvent::StepStarted(step) => Some(format!("step {}", step.number)),
            _ => None,
        })
        .collect();
    assert_eq!(kinds, vec!["step 1", "taken 5", "step 2"]);
    assert!(seen.iter().all(|s| s.event.run_id() == Some("r1")));
    assert_numbered_per_run(&seen);
    runner.cancel_all(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn two_runs_tell_their_models_about_each_other_and_number_their_own_events() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(fake_model::text("one"))));
    model.push(fake_model::text("two"));
    let (runner, mut events, _agent_dir) = runner(&model);
    runner.handle(assignment("r1", 1, "Refactoring auth"));
    model.wait_for_requests(1, WAIT).await;
    runner.handle(assignment("r2", 2, ""));
    let mut seen = Vec::new();
    until(&mut events, &mut seen, completed("r2")).await;
    hold.release();
    until(&mut events, &mut seen, completed("r1")).await;
    assert_numbered_per_run(&seen);

    let requests = model.requests();
    assert_eq!(
        system_of(&requests[0].body),
        "be brief",
        "alone, the prompt is unchanged"
    );
    let second = system_of(&requests[1].body);
    let block = second
        .strip_prefix("be brief\n\n")
        .unwrap_or_else(|| panic!("{second}"));
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines[0], "Active threads in this agent:");
    assert!(
        lines[1].starts_with("  Thread #2 (this thread): thread 2 — step 1, ")
            && lines[1].ends_with("currently: Calling LLM (m)"),
        "{block}"
    );
    assert!(
        lines[2].starts_with("  Thread #1: Refactoring auth — step 1, ")
            && lines[2].ends_with("currently: Calling LLM (m)"),
        "{block}"
    );
    assert_eq!(lines.len(), 3);

    // Ended runs leave the board: a run alone again sees no block.
    model.push(fake_model::text("three"));
    runner.handle(assignment("r3", 3, ""));
    until(&mut events, &mut seen, completed("r3")).await;
    assert_eq!(system_of(&model.requests()[2].body), "be brief");
    runner.cancel_all(Duration::from_secs(5)).await;
}

#[tokio::test]
async fn every_summary_request_gets_exactly_one_answer_over_either_wire() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let model = FakeModel::start(wire, &["m"]).await;
        model.push(fake_model::text("  The user asked for a build; it ran.  "));
        model.push(fake_model::error(
            401,
            "authentication_error",
            "invalid x-api-key",
        ));
        let (runner, mut events, _agent_dir) = runner(&model);
        let call = chorus_proto::domain::ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            arguments: r#"{"command":"make"}"#.into(),
        };
        let summarize = |request_id| {
            ControlCommand::Summarize(Box::new(SummaryRequest {
                request_id,
                model: route(wire),
                instruction: "Summarise this conversation in one line.".into(),
                // A thread killed while its tool ran: repaired before it is sent.
                messages: vec![
                    ChatMessage::user("build it"),
                    ChatMessage::assistant("", vec![call.clone()]),
                ],
                retry: fast(),
            }))
        };
        let summary = |id: u64| move |e: &WorkerEvent| matches!(e, WorkerEvent::Summary { request_id, .. } if *request_id == id);
        let mut seen = Vec::new();
        runner.handle(summarize(1));
        until(&mut events, &mut seen, summary(1)).await;
        runner.handle(summarize(2));
        until(&mut events, &mut seen, summary(2)).await;
        runner.cancel_all(Duration::from_secs(5)).await;
        while let Ok(more) = events.try_recv() {
            seen.push(more);
        }
        let answers: Vec<(u64, Result<String, String>)> = seen
            .into_iter()
            .map(|s| {
                assert_eq!(s.seq, 0);
                match s.event {
                    WorkerEvent::Summary { request_id, result } => (request_id, result),
                    other => panic!("a summary is not a run: {other:?}"),
                }
            })
            .collect();
        assert_eq!(answers.len(), 2, "{wire:?}: {answers:?}");
        assert_eq!(
            answers[0],
            (1, Ok("The user asked for a build; it ran.".into())),
            "{wire:?}"
        );
        let (2, Err(error)) = &answers[1] else {
            panic!("{wire:?}: {answers:?}");
        };
        assert!(
            error.contains("could not write the summary") && error.contains("invalid x-api-key"),
            "{wire:?}: {error}"
        );
        let sent = &model.requests()[0].body;
        assert!(
            sent.get("tools")
                .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)),
            "{sent}"
        );
        assert_eq!(sent["max_tokens"], 1024, "{sent}");
    }
}

/// The names of the tools offered in a request (OpenAI wire).
fn offered_in(request: &Value) -> Vec<String> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// A task's run: its role's tools are offered beside the agent's and stay offered
/// when the agent's tools change mid-run; its file tools work in its directory
/// (made under the workspace), where the same name as a workspace file reads the
/// task's own. A working directory that climbs out fails the run before any model
/// call, as a configuration error.
#[tokio::test]
async fn a_task_run_offers_its_role_tools_and_works_in_its_directory() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(fake_model::tool_call(
            "c1",
            "view",
            serde_json::json!({"path": "x"}),
        )),
    ));
    model.push(fake_model::text("done"));
    let (runner, mut events, agent_dir) = runner(&model);
    let workspace = agent_dir.path().join("workspace");
    std::fs::write(workspace.join("x"), "the workspace's").unwrap();
    std::fs::create_dir_all(workspace.join("tasks/9")).unwrap();
    std::fs::write(workspace.join("tasks/9/x"), "the task's").unwrap();
    let mut task = run("r1", 1, "");
    task.workdir = Some("tasks/9".into());
    // The task's attachments: written where no file is yet; the agent's `x` stays.
    let file = |path: &str, content: &str| chorus_proto::domain::TemplateFile {
        path: path.into(),
        content: content.as_bytes().to_vec(),
        executable: false,
    };
    task.files = vec![file("spec.md", "the spec"), file("x", "an attachment")];
    task.role_tools = vec![chorus_proto::domain::ToolSpec {
        name: "submit_plan".into(),
        wire_name: "submit_plan".into(),
        description: "Submit the plan".into(),
        schema_json: r#"{"type":"object"}"#.into(),
        runs_in: chorus_proto::tools::RunsIn::ControlPlane,
        ends_turn: true,
    }];
    runner.handle(ControlCommand::AssignRun(Box::new(task)));
    model.wait_for_requests(1, WAIT).await;
    runner.handle(ControlCommand::UpdateAgent(
        chorus_proto::domain::AgentChange {
            model: None,
            system_prompt: None,
            tools: Some(vec!["file_read".into()]),
            offered: Some(vec![
                chorus_proto::tools::find("file_read")
                    .unwrap()
                    .spec(&Default::default()),
            ]),
            ..Default::default()
        },
    ));
    hold.release();
    let mut seen = Vec::new();
    until(&mut events, &mut seen, |e| {
        matches!(e, WorkerEvent::ToolCheck { .. })
    })
    .await;
    let Some(WorkerEvent::ToolCheck { request_id, .. }) = seen.last().map(|s| &s.event) else {
        unreachable!()
    };
    runner.handle(ControlCommand::ToolDecision(
        chorus_proto::domain::ToolDecision {
            request_id: *request_id,
            allowed: true,
            message: String::new(),
            result: None,
        },
    ));
    until(&mut events, &mut seen, completed("r1")).await;
    let requests = model.requests();
    assert_eq!(offered_in(&requests[0].body), ["view", "submit_plan"]);
    assert_eq!(
        offered_in(&requests[1].body),
        ["file_read", "submit_plan"],
        "the agent's change leaves the role's tools"
    );
    let result = seen
        .iter()
        .find_map(|s| match &s.event {
            WorkerEvent::MessageAppended { message, .. } if message.tool_call_id.is_some() => {
                Some(message.content.clone())
            }
            _ => None,
        })
        .unwrap();
    assert!(result.contains("the task's"), "{result}");

    runner.handle(ControlCommand::AssignRun(Box::new(RunAssignment {
        workdir: Some("../elsewhere".into()),
        ..run("r2", 2, "")
    })));
    let mut seen = Vec::new();
    until(
        &mut events,
        &mut seen,
        |e| matches!(e, WorkerEvent::RunFailed { run_id, .. } if run_id == "r2"),
    )
    .await;
    match &seen.last().unwrap().event {
        WorkerEvent::RunFailed { kind, error, .. } => {
            assert_eq!(*kind, chorus_proto::domain::FailureKind::Config);
            assert!(error.contains("working directory"), "{error}");
        }
        _ => unreachable!(),
    }
    assert_eq!(model.requests().len(), 2, "no model call for it");
    assert!(!agent_dir.path().join("elsewhere").exists());
    assert_eq!(
        std::fs::read_to_string(workspace.join("tasks/9/spec.md")).unwrap(),
        "the spec"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("tasks/9/x")).unwrap(),
        "the task's",
        "a file the agent has is not replaced"
    );

    // A file that is not a plain name: the run does not start, and nothing is written.
    runner.handle(ControlCommand::AssignRun(Box::new(RunAssignment {
        workdir: Some("tasks/9".into()),
        files: vec![file("../escaped.md", "no")],
        ..run("r3", 3, "")
    })));
    until(
        &mut events,
        &mut seen,
        |e| matches!(e, WorkerEvent::RunFailed { run_id, .. } if run_id == "r3"),
    )
    .await;
    match &seen.last().unwrap().event {
        WorkerEvent::RunFailed { error, .. } => assert!(error.contains("plain name"), "{error}"),
        _ => unreachable!(),
    }
    assert!(!workspace.join("tasks/escaped.md").exists());
}
