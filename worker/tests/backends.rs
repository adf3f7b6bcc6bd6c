//! The worker side of CLI backends over real sockets and processes: the run endpoint
//! (credential, tools through the pipeline and the gate), its model proxy against the
//! strict fake model, and the driver running a "CLI" (a bash script printing JSON
//! lines, calling the endpoint over `/dev/tcp`) in the tool sandbox.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::domain::{
    Backend, ChatMessage, FailureKind, Input, ModelRoute, SandboxPolicy, Sequenced, StepKind,
    ToolCall, ToolDecision, ToolSpec, WorkerEvent,
};
use chorus_test_support::fake_model::{self, FakeModel, Wire};
use chorus_worker::backends::driver::{self, CliRun};
use chorus_worker::backends::endpoint::{RunEndpoint, RunTools};
use chorus_worker::backends::flavor::{
    Classified, CliEvent, CliFailure, ExitReport, Flavor, Launch, LaunchSpec, StreamParser,
};
use chorus_worker::backends::probe::BackendPaths;
use chorus_worker::gate::{AllowAll, GateMessage, ToolGate};
use chorus_worker::model::relay::RelayClients;
use chorus_worker::tool_loop::{EventSink, Inbox, LiveAgent, LoopError, ModelSelection, Steps};
use chorus_worker::tools::ToolBox;
use chorus_worker::tools::jail::Workspace;
use chorus_worker::tools::locks::FileLocks;
use chorus_worker::tools::sandbox::Sandbox;
use serde_json::{Value, json};
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;

const WAIT: Duration = Duration::from_secs(20);

/// Refuses every call, as the control plane does for a denied tool.
struct DenyAll;

impl ToolGate for DenyAll {
    fn check(&self, _run_id: &str, _call: &ToolCall) -> mpsc::UnboundedReceiver<GateMessage> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(GateMessage::Decided(ToolDecision {
            request_id: 0,
            allowed: false,
            message: "denied by the agent's permissions (file.create)".into(),
            result: None,
        }));
        rx
    }
}

fn create_file(ends_turn: bool) -> ToolSpec {
    let mut spec = chorus_proto::tools::find("create_file")
        .unwrap()
        .spec(&Default::default());
    spec.ends_turn = ends_turn;
    spec
}

fn anthropic_route() -> ModelRoute {
    ModelRoute {
        provider: "anthropic".into(),
        api: ModelRoute::ANTHROPIC_MESSAGES.into(),
        relay_path: String::new(),
        model: "m".into(),
        limits: Default::default(),
    }
}

fn agent(route: ModelRoute, tools: Vec<ToolSpec>) -> watch::Receiver<LiveAgent> {
    let (tx, rx) = watch::channel(LiveAgent {
        model: ModelSelection {
            display: "anthropic/m".into(),
            route,
        },
        system_prompt: "be brief".into(),
        tools: Arc::new(tools),
        docs_dir: None,
        identity: String::new(),
        memory: String::new(),
        relevant: String::new(),
    });
    // The sender may go: the endpoint reads the last value.
    std::mem::forget(tx);
    rx
}

fn toolbox(workspace: &Path) -> ToolBox {
    ToolBox::new(
        Workspace::new(workspace),
        Arc::new(FileLocks::new(Duration::from_secs(5))),
    )
}

fn relay(base: &str) -> RelayClients {
    RelayClients::new(reqwest::Client::new(), base, "worker-credential")
}

struct Open {
    endpoint: RunEndpoint,
    events: mpsc::UnboundedReceiver<Sequenced>,
    workspace: tempfile::TempDir,
}

async fn open<G: ToolGate + 'static>(gate: G, tools: Vec<ToolSpec>, relay_base: &str) -> Open {
    let workspace = tempfile::tempdir().unwrap();
    let (tx, events) = mpsc::unbounded_channel();
    let sink = EventSink::new(tx);
    let endpoint = RunEndpoint::open(RunTools {
        gate: Arc::new(gate),
        tools: toolbox(workspace.path()),
        agent: agent(anthropic_route(), tools),
        steps: Steps::new("r1", 1, sink, None),
        cancel: CancellationToken::new(),
        relay: relay(relay_base),
        calls: Default::default(),
        max_model_calls: 50,
    })
    .await
    .unwrap();
    Open {
        endpoint,
        events,
        workspace,
    }
}

fn drain(events: &mut mpsc::UnboundedReceiver<Sequenced>) -> Vec<WorkerEvent> {
    let mut all = Vec::new();
    while let Ok(event) = events.try_recv() {
        all.push(event.event);
    }
    all
}

async fn call(open: &Open, token: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{}/tools/call", open.endpoint.url))
        .bearer_auth(token)
        .json(&body)
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

#[tokio::test]
async fn the_run_endpoint_takes_only_its_own_credential_and_runs_calls_through_the_pipeline() {
    let mut one = open(AllowAll, vec![create_file(false)], "http://127.0.0.1:9").await;
    let other = open(AllowAll, vec![create_file(false)], "http://127.0.0.1:9").await;
    let http = reqwest::Client::new();
    let tools_url = format!("{}/tools", one.endpoint.url);
    // No credential, another run's, a near miss: 401 with a reason.
    for token in [None, Some(other.endpoint.token.clone()), {
        let mut near = one.endpoint.token.clone();
        near.pop();
        near.push('x');
        Some(near)
    }] {
        let mut request = http.get(&tools_url);
        if let Some(token) = token {
            request = request.header("x-api-key", token);
        }
        let response = request.send().await.unwrap();
        assert_eq!(response.status().as_u16(), 401);
        let body: Value = response.json().await.unwrap();
        assert!(body["error"].as_str().unwrap().contains("run's credential"));
    }
    let listed: Value = http
        .get(&tools_url)
        .bearer_auth(&one.endpoint.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let names: Vec<&str> = listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["create_file"]);
    assert_eq!(listed["tools"][0]["input_schema"]["type"], "object");

    let token = one.endpoint.token.clone();
    let (status, result) = call(
        &one,
        &token,
        json!({"name": "create_file", "arguments": {"path": "a.txt", "content": "hi"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(result["is_error"], false, "{result}");
    assert_eq!(
        std::fs::read_to_string(one.workspace.path().join("a.txt")).unwrap(),
        "hi"
    );
    // The call is a tool step; its result message is the CLI's to report.
    let events = drain(&mut one.events);
    let started: Vec<(u32, StepKind)> = events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::StepStarted(s) => Some((s.number, s.kind)),
            _ => None,
        })
        .collect();
    assert_eq!(started, [(1, StepKind::Tool)]);
    assert!(
        events
            .iter()
            .any(|e| matches!(e, WorkerEvent::StepEnded(s) if s.number == 1 && !s.failed))
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, WorkerEvent::MessageAppended { .. }))
    );
    // A big call (past axum's default 2 MiB body limit) goes through too.
    let big = "x".repeat(3 << 20);
    let (status, result) = call(
        &one,
        &token,
        json!({"name": "create_file", "arguments": {"path": "big.txt", "content": big}}),
    )
    .await;
    assert_eq!((status, result["is_error"].clone()), (200, json!(false)));
    assert_eq!(
        std::fs::metadata(one.workspace.path().join("big.txt"))
            .unwrap()
            .len(),
        3 << 20
    );
    // The model's mistakes are results it reads, not transport errors.
    let (status, unknown) = call(&one, &token, json!({"name": "nope", "arguments": {}})).await;
    assert_eq!((status, unknown["is_error"].clone()), (200, json!(true)));
    let response = http
        .post(format!("{}/tools/call", one.endpoint.url))
        .bearer_auth(&token)
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["is_error"], true);
    assert!(body["content"].as_str().unwrap().contains("not JSON"));

    // The run ends: its listener is gone with it, so the credential is worthless.
    let url = one.endpoint.url.clone();
    one.endpoint.close().await;
    let after = http
        .get(format!("{url}/tools"))
        .bearer_auth(&token)
        .send()
        .await;
    assert!(after.is_err(), "{after:?}");
}

#[tokio::test]
async fn a_call_the_gate_refuses_is_not_run() {
    let mut denied = open(DenyAll, vec![create_file(false)], "http://127.0.0.1:9").await;
    let token = denied.endpoint.token.clone();
    let (status, result) = call(
        &denied,
        &token,
        json!({"name": "create_file", "arguments": {"path": "a.txt", "content": "hi"}}),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(result["is_error"], true);
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("denied by the agent's permissions"),
        "{result}"
    );
    assert!(!denied.workspace.path().join("a.txt").exists());
    let events = drain(&mut denied.events);
    assert!(
        events.iter().any(
            |e| matches!(e, WorkerEvent::StepStarted(s) if s.description.starts_with("Refused"))
        )
    );
    // Positive control: the same call with a gate that allows it writes the file.
    let allowed = open(AllowAll, vec![create_file(false)], "http://127.0.0.1:9").await;
    let token = allowed.endpoint.token.clone();
    let (_, result) = call(
        &allowed,
        &token,
        json!({"name": "create_file", "arguments": {"path": "a.txt", "content": "hi"}}),
    )
    .await;
    assert_eq!(result["is_error"], false);
    assert!(allowed.workspace.path().join("a.txt").exists());
}

fn anthropic_body() -> Value {
    json!({"model": "m", "max_tokens": 100, "stream": true,
           "messages": [{"role": "user", "content": "hi"}]})
}

#[tokio::test]
async fn the_proxy_streams_the_models_reply_with_the_workers_credential_then_ends_the_turn() {
    let model = FakeModel::start(Wire::Anthropic, &["m"]).await;
    model.push(fake_model::text("hello from the model"));
    let open = open(AllowAll, vec![create_file(true)], &model.host_url()).await;
    let http = reqwest::Client::new();
    let messages = format!("{}/llm/v1/messages?beta=true", open.endpoint.url);
    let response = http
        .post(&messages)
        .header("x-api-key", &open.endpoint.token)
        .header("anthropic-version", "2023-06-01")
        .json(&anthropic_body())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200);
    assert!(
        response
            .headers()
            .get("content-type")
            .unwrap()
            .to_str()
            .unwrap()
            .starts_with("text/event-stream")
    );
    let body = response.text().await.unwrap();
    let reply = decode_anthropic(&body);
    assert_eq!(reply.content, "hello from the model");
    let requests = model.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].path, "/v1/messages");
    // The relay sees the worker's credential, never the run's.
    assert_eq!(requests[0].headers["x-api-key"], "worker-credential");
    assert_eq!(requests[0].headers["anthropic-version"], "2023-06-01");
    assert!(model.take_violations().is_empty());

    // A finishing tool succeeds: the next model request is answered by the worker.
    let token = open.endpoint.token.clone();
    let (_, result) = call(
        &open,
        &token,
        json!({"name": "create_file", "arguments": {"path": "report.md", "content": "done"}}),
    )
    .await;
    assert_eq!(result["is_error"], false);
    assert!(open.endpoint.turn_ended());
    let body = http
        .post(&messages)
        .header("x-api-key", &open.endpoint.token)
        .json(&anthropic_body())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let reply = decode_anthropic(&body);
    assert_eq!(reply.stop, chorus_worker::model::StopReason::EndTurn);
    assert!(reply.content.is_empty() && reply.tool_calls.is_empty());
    assert_eq!(model.requests().len(), 1, "the model was not asked again");
}

/// Past the run's bound on model calls the proxy ends the CLI's turn itself, asks
/// the model no more, and says so (the driver fails the run as `limit`).
#[tokio::test]
async fn past_the_runs_model_calls_the_proxy_ends_the_turn_and_says_so() {
    let model = FakeModel::start(Wire::Anthropic, &["m"]).await;
    model.push(fake_model::text("one"));
    let workspace = tempfile::tempdir().unwrap();
    let (tx, _events) = mpsc::unbounded_channel();
    let endpoint = RunEndpoint::open(RunTools {
        gate: Arc::new(AllowAll),
        tools: toolbox(workspace.path()),
        agent: agent(anthropic_route(), vec![create_file(false)]),
        steps: Steps::new("r1", 1, EventSink::new(tx), None),
        cancel: CancellationToken::new(),
        relay: relay(&model.host_url()),
        calls: Default::default(),
        max_model_calls: 1,
    })
    .await
    .unwrap();
    let ask = || async {
        reqwest::Client::new()
            .post(format!("{}/llm/v1/messages?beta=true", endpoint.url))
            .header("x-api-key", &endpoint.token)
            .header("anthropic-version", "2023-06-01")
            .json(&anthropic_body())
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    assert_eq!(decode_anthropic(&ask().await).content, "one");
    assert!(!endpoint.over_limit());
    let second = decode_anthropic(&ask().await);
    assert_eq!(second.stop, chorus_worker::model::StopReason::EndTurn);
    assert!(second.content.is_empty() && second.tool_calls.is_empty());
    assert!(endpoint.over_limit());
    assert_eq!(model.requests().len(), 1, "the model was not asked again");
}

fn decode_anthropic(body: &str) -> chorus_worker::model::ModelReply {
    use chorus_worker::model::http::StreamFormat;
    let mut decoder = chorus_worker::model::sse::SseDecoder::new();
    let mut state = chorus_worker::model::anthropic::StreamState::default();
    for event in decoder.push(body.as_bytes()) {
        state.apply("fake", &event, &mut |_| {}).unwrap();
    }
    state.finish("fake").unwrap()
}

// ---- the driver, with a test flavor whose CLI is a bash script ----

/// A CLI that prints one JSON object per line: `{"t": "session"|"init"|"model_start"|
/// "text"|"model_end"|"assistant"|"tool_result"|"final", …}`.
struct ScriptFlavor;

struct ScriptParser;

impl StreamParser for ScriptParser {
    fn line(&mut self, line: &str) -> Result<Vec<CliEvent>, String> {
        let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        Ok(vec![match v["t"].as_str().unwrap_or_default() {
            "session" => CliEvent::Session { id: s("id") },
            "init" => CliEvent::Init {
                tools: v["tools"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|t| t.as_str().unwrap().to_string())
                    .collect(),
                mcp_connected: v["mcp"].as_bool().unwrap_or(false),
            },
            "model_start" => CliEvent::ModelCallStarted,
            "text" => CliEvent::TextDelta(s("text")),
            "model_end" => CliEvent::ModelCallEnded { usage: None },
            "assistant" => CliEvent::Assistant {
                text: s("text"),
                tool_calls: Vec::new(),
            },
            "tool_result" => CliEvent::ToolResult {
                call_id: s("id"),
                content: s("content"),
                is_error: v["is_error"].as_bool().unwrap_or(true),
            },
            "final" => CliEvent::Final {
                text: s("text"),
                is_error: false,
                usage: None,
            },
            other => return Err(format!("unknown line type {other}")),
        }])
    }

    fn finish(&mut self) -> Vec<CliEvent> {
        Vec::new()
    }
}

impl Flavor for ScriptFlavor {
    fn backend(&self) -> Backend {
        Backend::ClaudeCode
    }
    fn model_api(&self) -> &'static str {
        ModelRoute::ANTHROPIC_MESSAGES
    }
    fn launch(&self, spec: &LaunchSpec<'_>) -> Launch {
        Launch {
            args: Vec::new(),
            env: vec![
                ("CHORUS_TOOLS_URL".into(), spec.endpoint.into()),
                ("CHORUS_TOOLS_TOKEN".into(), spec.token.into()),
                ("PROMPT".into(), spec.prompt.into()),
                (
                    "SESSION".into(),
                    spec.session.map(|s| s.id.clone()).unwrap_or_default(),
                ),
            ],
            files: Vec::new(),
            stdin: None,
        }
    }
    fn parser(&self) -> Box<dyn StreamParser> {
        Box::new(ScriptParser)
    }
    fn classify(&self, exit: &ExitReport) -> Option<Classified> {
        (exit.code != Some(0) || !exit.saw_final).then(|| Classified {
            kind: FailureKind::Internal,
            message: format!(
                "exit {:?}/{:?}: {}",
                exit.code, exit.signal, exit.stderr_tail
            ),
            cause: CliFailure::Exited,
        })
    }
    fn parse_version(&self, _: &str) -> Option<(u32, u32, u32)> {
        None
    }
}

/// Posts `$1` (JSON) to the endpoint's /tools/call over bash's /dev/tcp; prints the body.
const CALL: &str = r#"call() {
  local port=${CHORUS_TOOLS_URL##*:}
  exec 3<>/dev/tcp/127.0.0.1/$port || { echo '{"t":"text","text":"no connection"}'; return 1; }
  printf 'POST /tools/call HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$CHORUS_TOOLS_TOKEN" "${#1}" "$1" >&3
  tail -n 1 <&3
  exec 3<&-
}
"#;

struct Agent {
    dir: tempfile::TempDir,
    bin: tempfile::TempDir,
}

impl Agent {
    fn new(script: &str) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("workspace")).unwrap();
        let bin = tempfile::tempdir().unwrap();
        let program = bin.path().join("fake-cli");
        std::fs::write(&program, format!("#!/bin/bash\n{CALL}\n{script}\n")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&program, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(bin.path().join("chorus-tools"), "").unwrap();
        Agent { dir, bin }
    }

    fn workspace(&self) -> PathBuf {
        self.dir.path().join("workspace")
    }

    fn paths(&self) -> BackendPaths {
        BackendPaths {
            claude_code: Some(self.bin.path().join("fake-cli")),
            opencode: None,
            chorus_tools: Some(self.bin.path().join("chorus-tools")),
        }
    }
}

async fn drive(
    agent: &Agent,
    route: ModelRoute,
    cancel: &CancellationToken,
    watchdog: Duration,
) -> (Result<String, LoopError>, Vec<WorkerEvent>) {
    drive_with(
        agent,
        route,
        cancel,
        watchdog,
        Inbox::default(),
        "http://127.0.0.1:9",
    )
    .await
}

async fn drive_with(
    agent: &Agent,
    route: ModelRoute,
    cancel: &CancellationToken,
    watchdog: Duration,
    inbox: Inbox,
    relay_base: &str,
) -> (Result<String, LoopError>, Vec<WorkerEvent>) {
    let (tx, mut events) = mpsc::unbounded_channel();
    let sink = EventSink::new(tx);
    // The network off: the CLI reaches its endpoint's port only (where Landlock can).
    let sandbox = Sandbox::for_agent(
        SandboxPolicy {
            network: false,
            run_unsandboxed: true,
            ..SandboxPolicy::default()
        },
        agent.dir.path(),
    );
    let paths = agent.paths();
    let run = CliRun {
        flavor: &ScriptFlavor,
        paths: &paths,
        run_id: "r1",
        messages: vec![ChatMessage::user("earlier")],
        inputs: vec![Input {
            message_id: 7,
            content: "write out.txt".into(),
        }],
        inbox,
        session: None,
        resumed: None,
        agent: agent_for(route),
        first_step_number: 1,
        board: None,
        root: agent.workspace(),
        cwd: agent.workspace(),
        home: sandbox.home.clone(),
        tmp: sandbox.tmp.clone(),
        sandbox: Some(sandbox),
        gate: Arc::new(AllowAll),
        tools: toolbox(&agent.workspace()),
        relay: relay(relay_base),
        first_event_within: watchdog,
        max_model_calls: 50,
    };
    let outcome = driver::run(run, &sink, cancel).await;
    (outcome, drain(&mut events))
}

fn agent_for(route: ModelRoute) -> watch::Receiver<LiveAgent> {
    agent(route, vec![create_file(false)])
}

#[tokio::test]
async fn a_cli_turn_writes_through_the_endpoint_and_its_stream_becomes_steps_and_messages() {
    let agent = Agent::new(
        r#"echo '{"t":"session","id":"s-1"}'
echo '{"t":"init","tools":["create_file"],"mcp":true}'
echo '{"t":"model_start"}'
echo '{"t":"text","text":"writing"}'
echo '{"t":"model_end"}'
reply=$(call '{"name":"create_file","arguments":{"path":"out.txt","content":"from the cli"}}')
case "$reply" in *'"is_error":false'*) ok=false ;; *) ok=true ;; esac
echo "{\"t\":\"tool_result\",\"id\":\"c1\",\"content\":\"written\",\"is_error\":$ok}"
case "$PROMPT" in *earlier*'write out.txt') echo '{"t":"final","text":"done"}' ;; *) echo '{"t":"final","text":"bad prompt"}' ;; esac"#,
    );
    let (outcome, events) = drive(
        &agent,
        anthropic_route(),
        &CancellationToken::new(),
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(outcome.unwrap(), "done");
    assert_eq!(
        std::fs::read_to_string(agent.workspace().join("out.txt")).unwrap(),
        "from the cli"
    );
    let shown: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::InputTaken { message_id, .. } => Some(format!("taken {message_id}")),
            WorkerEvent::CliSessionStarted { session_id, .. } => {
                Some(format!("session {session_id}"))
            }
            WorkerEvent::MessageAppended { message, .. } => Some(format!(
                "{} {} {}",
                message.role.as_str(),
                message.content,
                message.is_error
            )),
            _ => None,
        })
        .collect();
    assert_eq!(
        shown,
        [
            "taken 7",
            "session s-1",
            "tool written false",
            "assistant done false",
        ]
    );
    // The stream's model step and the endpoint's tool step share one counter. They
    // run concurrently (the CLI's stdout is read while its tool call is served), so
    // which gets 1 depends on timing; each is begun, then ended, once.
    let started: Vec<(u32, StepKind)> = events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::StepStarted(s) => Some((s.number, s.kind)),
            _ => None,
        })
        .collect();
    let mut numbers: Vec<u32> = started.iter().map(|(n, _)| *n).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, [1, 2], "{started:?}");
    let llm = started
        .iter()
        .find(|(_, kind)| *kind == StepKind::LlmCall)
        .unwrap()
        .0;
    assert!(started.contains(&(3 - llm, StepKind::Tool)), "{started:?}");
    assert!(events.iter().any(
        |e| matches!(e, WorkerEvent::TextDelta { step, text, .. } if *step == llm && text == "writing")
    ));
    for number in [1, 2] {
        let ended = events
            .iter()
            .filter(|e| matches!(e, WorkerEvent::StepEnded(s) if s.number == number && !s.failed))
            .count();
        assert_eq!(ended, 1, "step {number}");
    }
    assert!(events.iter().all(|e| e.run_id() == Some("r1")));
}

#[tokio::test]
async fn a_model_of_another_wire_format_fails_at_once_as_config() {
    let agent = Agent::new("echo should-not-run > \"$PWD/ran\"");
    let route = ModelRoute {
        provider: "openai".into(),
        api: ModelRoute::OPENAI_CHAT.into(),
        relay_path: "/llm/openai".into(),
        model: "gpt".into(),
        limits: Default::default(),
    };
    let (outcome, _) = drive(
        &agent,
        route,
        &CancellationToken::new(),
        Duration::from_secs(30),
    )
    .await;
    let error = outcome.unwrap_err();
    assert_eq!(error.kind(), FailureKind::Config);
    let message = error.to_string();
    assert!(
        message.contains("speaks anthropic-messages") && message.contains("provider 'openai'"),
        "{message}"
    );
    assert!(!agent.workspace().join("ran").exists());
}

/// Whether `pid` is still a running process (a zombie or no process is not).
fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            !state.starts_with('Z') && !state.starts_with('X')
        }
    }
}

async fn gone_within(pid: i32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while running(pid) {
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn wait_for_file(path: &Path) -> String {
    let deadline = Instant::now() + WAIT;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && text.ends_with('\n')
        {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_cancelled_cli_leaves_no_process_behind() {
    let agent = Agent::new(
        r#"sleep 300 &
echo "$$ $!" > "$PWD/pids"
echo '{"t":"model_start"}'
sleep 300"#,
    );
    let cancel = CancellationToken::new();
    let pids_file = agent.workspace().join("pids");
    let stopper = {
        let cancel = cancel.clone();
        let pids_file = pids_file.clone();
        tokio::spawn(async move {
            let pids = wait_for_file(&pids_file).await;
            cancel.cancel();
            pids
        })
    };
    let (outcome, events) =
        drive(&agent, anthropic_route(), &cancel, Duration::from_secs(30)).await;
    assert!(
        matches!(outcome, Err(LoopError::Cancelled(_))),
        "{outcome:?}"
    );
    let pids = stopper.await.unwrap();
    let pids: Vec<i32> = pids
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    for pid in pids {
        assert!(
            gone_within(pid, Duration::from_secs(5)).await,
            "process {pid} outlived the cancel"
        );
    }
    // A model step the driver had seen begin is closed, failed (whether it saw the
    // line before the cancel is a matter of timing).
    for event in &events {
        if let WorkerEvent::StepStarted(started) = event {
            let closed = events.iter().any(|e| {
                matches!(e, WorkerEvent::StepEnded(s) if s.number == started.number && s.failed)
            });
            assert!(closed, "{events:?}");
        }
    }
}

/// A CLI that retries a rate-limited model call forever (OpenCode does, silently)
/// is stopped once the provider answered 429 to `GIVE_UP_AFTER_429S` calls in a
/// row, and the run fails as a model error saying so.
#[tokio::test]
async fn a_cli_the_provider_keeps_rate_limiting_is_stopped_saying_so() {
    let model = FakeModel::start(Wire::Anthropic, &["m"]).await;
    for _ in 0..30 {
        model.push(fake_model::Reply::Error {
            status: 429,
            kind: "rate_limit_error".into(),
            message: "slow down".into(),
            retry_after: Some("1".into()),
        });
    }
    let agent = Agent::new(
        r#"echo "$$" > "$PWD/pid"
echo '{"t":"session","id":"s-1"}'
llm() {
  local port=${CHORUS_TOOLS_URL##*:}
  local body='{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"hi"}]}'
  exec 4<>/dev/tcp/127.0.0.1/$port || return 1
  printf 'POST /llm/v1/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nx-api-key: %s\r\nanthropic-version: 2023-06-01\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s' "$CHORUS_TOOLS_TOKEN" "${#body}" "$body" >&4
  cat <&4 > /dev/null
  exec 4<&-
}
for i in $(seq 1 30); do llm; done
sleep 300"#,
    );
    let (outcome, _) = tokio::time::timeout(
        Duration::from_secs(120),
        drive_with(
            &agent,
            anthropic_route(),
            &CancellationToken::new(),
            Duration::from_secs(30),
            Inbox::default(),
            &model.host_url(),
        ),
    )
    .await
    .expect("the rate-limited CLI was not stopped");
    let error = outcome.unwrap_err();
    assert_eq!(error.kind(), FailureKind::ModelError);
    let message = error.to_string();
    assert!(
        message.contains("kept rate-limiting")
            && message.contains("8 model calls in a row were answered 429"),
        "{message}"
    );
    assert!(model.requests().len() >= 8, "{}", model.requests().len());
    let pid: i32 = std::fs::read_to_string(agent.workspace().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone_within(pid, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_cli_that_prints_nothing_is_stopped_by_the_watchdog() {
    let agent = Agent::new(
        r#"echo "$$" > "$PWD/pid"
echo "waiting for a network that never answers" >&2
sleep 300"#,
    );
    let started = Instant::now();
    let (outcome, _) = drive(
        &agent,
        anthropic_route(),
        &CancellationToken::new(),
        Duration::from_secs(1),
    )
    .await;
    let error = outcome.unwrap_err();
    assert_eq!(error.kind(), FailureKind::Internal);
    let message = error.to_string();
    assert!(message.contains("printed nothing for 1 s"), "{message}");
    assert!(message.contains("never answers"), "{message}");
    assert!(started.elapsed() < Duration::from_secs(20));
    let pid: i32 = std::fs::read_to_string(agent.workspace().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone_within(pid, Duration::from_secs(5)).await);
}

#[tokio::test]
async fn a_message_injected_while_the_cli_runs_starts_another_turn_of_the_same_session() {
    let agent = Agent::new(
        r#"if [ -z "$SESSION" ]; then
  echo '{"t":"session","id":"s-1"}'
  echo started > "$PWD/started"
  while [ ! -e "$PWD/release" ]; do sleep 0.05; done
  echo '{"t":"final","text":"first"}'
else
  echo "{\"t\":\"session\",\"id\":\"$SESSION\"}"
  echo "{\"t\":\"final\",\"text\":\"second: $PROMPT\"}"
fi"#,
    );
    let inbox = Inbox::default();
    let releaser = {
        let inbox = inbox.clone();
        let workspace = agent.workspace();
        tokio::spawn(async move {
            wait_for_file(&workspace.join("started")).await;
            inbox.push(Input {
                message_id: 8,
                content: "and also this".into(),
            });
            std::fs::write(workspace.join("release"), "").unwrap();
        })
    };
    let (outcome, events) = drive_with(
        &agent,
        anthropic_route(),
        &CancellationToken::new(),
        Duration::from_secs(30),
        inbox,
        "http://127.0.0.1:9",
    )
    .await;
    releaser.await.unwrap();
    // The second turn resumed s-1 with the new message only.
    assert_eq!(outcome.unwrap(), "second: and also this");
    let shown: Vec<String> = events
        .iter()
        .filter_map(|e| match e {
            WorkerEvent::InputTaken { message_id, .. } => Some(format!("taken {message_id}")),
            WorkerEvent::CliSessionStarted { session_id, .. } => {
                Some(format!("session {session_id}"))
            }
            WorkerEvent::MessageAppended { message, .. } => Some(message.content.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(
        shown,
        [
            "taken 7",
            "session s-1",
            "first",
            "taken 8",
            "second: and also this"
        ]
    );
}

#[tokio::test]
async fn a_runner_without_the_flavor_fails_a_cli_run_as_config() {
    use chorus_proto::domain::{AgentSettings, ControlCommand, RunAssignment};
    let (tx, mut events) = mpsc::unbounded_channel();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("workspace")).unwrap();
    let runner = chorus_worker::runner::Runner::new(
        EventSink::new(tx),
        "http://127.0.0.1:9",
        "worker-credential",
        &Default::default(),
        dir.path().to_path_buf(),
    );
    runner.handle(ControlCommand::AssignRun(Box::new(RunAssignment {
        run_id: "r1".into(),
        thread_id: 1,
        agent: AgentSettings {
            name: "helper".into(),
            system_prompt: String::new(),
            model: "anthropic/m".into(),
            tools: Vec::new(),
            sandbox: Default::default(),
            offered: vec![create_file(false)],
            mcp_servers: Vec::new(),
            mcp_reach: Default::default(),
            identity: String::new(),
            memory: String::new(),
        },
        model: anthropic_route(),
        messages: Vec::new(),
        first_step_number: 1,
        max_iterations: 0,
        trace_context: Default::default(),
        retry: Default::default(),
        attempt: 1,
        inputs: vec![Input {
            message_id: 1,
            content: "go".into(),
        }],
        thread_summary: String::new(),
        thread_started_at_ms: 0,
        role_tools: Vec::new(),
        workdir: None,
        files: Vec::new(),
        backend: Backend::ClaudeCode,
        cli_session: None,
        resumed_call: None,
        relevant: String::new(),
    })));
    let deadline = Instant::now() + WAIT;
    let failed = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = tokio::time::timeout(left, events.recv())
            .await
            .expect("no RunFailed")
            .unwrap();
        if let WorkerEvent::RunFailed { kind, error, .. } = event.event {
            break (kind, error);
        }
    };
    // One line in backends/mod.rs gives this build the flavors; until then a CLI
    // run says what to do rather than running the tool loop in its place.
    if chorus_worker::backends::flavor(Backend::ClaudeCode).is_none() {
        assert_eq!(failed.0, FailureKind::Config);
        assert!(
            failed.1.contains("cannot drive the claude-code backend"),
            "{failed:?}"
        );
    } else {
        assert_ne!(failed.0, FailureKind::Cancelled, "{failed:?}");
    }
}

#[tokio::test]
async fn an_openai_format_request_passes_through_to_the_routes_relay_path() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    model.push(fake_model::text("hello over chat"));
    let workspace = tempfile::tempdir().unwrap();
    let (tx, _events) = mpsc::unbounded_channel();
    let route = ModelRoute {
        provider: "openai".into(),
        api: ModelRoute::OPENAI_CHAT.into(),
        relay_path: "/v1".into(),
        model: "m".into(),
        limits: Default::default(),
    };
    let endpoint = RunEndpoint::open(RunTools {
        gate: Arc::new(AllowAll),
        tools: toolbox(workspace.path()),
        agent: agent(route, vec![create_file(false)]),
        steps: Steps::new("r1", 1, EventSink::new(tx), None),
        cancel: CancellationToken::new(),
        relay: relay(&model.host_url()),
        calls: Default::default(),
        max_model_calls: 50,
    })
    .await
    .unwrap();
    // OpenCode's base URL is <endpoint>/llm/v1.
    let body = reqwest::Client::new()
        .post(format!("{}/llm/v1/chat/completions", endpoint.url))
        .bearer_auth(&endpoint.token)
        .json(&json!({"model": "m", "stream": true,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    use chorus_worker::model::http::StreamFormat;
    let mut decoder = chorus_worker::model::sse::SseDecoder::new();
    let mut state = chorus_worker::model::openai::StreamState::default();
    for event in decoder.push(body.as_bytes()) {
        state.apply("fake", &event, &mut |_| {}).unwrap();
    }
    assert_eq!(state.finish("fake").unwrap().content, "hello over chat");
    let requests = model.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(
        requests[0].headers["authorization"],
        "Bearer worker-credential"
    );
    assert!(model.take_violations().is_empty());
}

#[tokio::test]
async fn the_tool_list_follows_the_agent_and_open_connections_end_with_the_run() {
    use chorus_test_support::fake_model::{Hold, Reply};
    let model = FakeModel::start(Wire::Anthropic, &["m"]).await;
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(fake_model::text("late")),
    ));
    let workspace = tempfile::tempdir().unwrap();
    let (tx, _events) = mpsc::unbounded_channel();
    let (agent_tx, agent_rx) = watch::channel(LiveAgent {
        model: ModelSelection {
            display: "anthropic/m".into(),
            route: anthropic_route(),
        },
        system_prompt: String::new(),
        tools: Arc::new(vec![create_file(false)]),
        docs_dir: None,
        identity: String::new(),
        memory: String::new(),
        relevant: String::new(),
    });
    let endpoint = RunEndpoint::open(RunTools {
        gate: Arc::new(AllowAll),
        tools: toolbox(workspace.path()),
        agent: agent_rx,
        steps: Steps::new("r1", 1, EventSink::new(tx), None),
        cancel: CancellationToken::new(),
        relay: relay(&model.host_url()),
        calls: Default::default(),
        max_model_calls: 50,
    })
    .await
    .unwrap();
    let http = reqwest::Client::new();
    let names = |listed: Value| -> Vec<String> {
        listed["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    };
    let list = || {
        http.get(format!("{}/tools", endpoint.url))
            .bearer_auth(&endpoint.token)
            .send()
    };
    assert_eq!(
        names(list().await.unwrap().json().await.unwrap()),
        ["create_file"]
    );
    // An UpdateAgent (the runner's send_modify) changes what is listed at once.
    let view = chorus_proto::tools::find("view")
        .unwrap()
        .spec(&Default::default());
    agent_tx.send_modify(|a| a.tools = Arc::new(vec![view]));
    assert_eq!(names(list().await.unwrap().json().await.unwrap()), ["view"]);

    // A model request in flight when the run ends is cut, not left open.
    let pending = tokio::spawn({
        let http = http.clone();
        let url = format!("{}/llm/v1/messages", endpoint.url);
        let token = endpoint.token.clone();
        async move {
            let response = http
                .post(url)
                .header("x-api-key", token)
                .header("anthropic-version", "2023-06-01")
                .json(&anthropic_body())
                .send()
                .await?;
            response.text().await
        }
    });
    model.wait_for_requests(1, WAIT).await;
    let started = Instant::now();
    endpoint.close().await;
    let cut = tokio::time::timeout(WAIT, pending).await.unwrap().unwrap();
    assert!(cut.is_err(), "{cut:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    hold.release();
}
