//! The CLI flavors against the real CLIs (Claude Code, OpenCode) on `PATH`: each is
//! started exactly as its flavor's `launch` says, against the strict fake model on
//! 127.0.0.1 (below `/llm`, as the run endpoint's proxy serves it), with a stub MCP
//! server standing in for `chorus-tools mcp`; its output goes through the flavor's
//! parser and its end through `classify`. What is checked is what the fake saw (every
//! request: method, path, query, credential, tool names) and what the stub was asked.
//! A test whose CLI (or `python3`, which runs the stub) is not on `PATH` says so and
//! passes without running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use chorus_proto::domain::{CliSession, ToolCall};
use chorus_test_support::fake_model::{self, FakeModel, Wire};
use chorus_worker::backends::claude_code::ClaudeCode;
use chorus_worker::backends::flavor::{CliEvent, CliFailure, ExitReport, Flavor, LaunchSpec};
use chorus_worker::backends::opencode::OpenCode;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The run's credential as the flavor hands it to the CLI.
const TOKEN: &str = "5f1e0c9a7b3d2e8f5f1e0c9a7b3d2e8f";

/// An MCP server over stdio with Chorus's two file tools: `file_read` always fails,
/// `file_write` succeeds; every call (and the env it was started with) is appended to
/// the log named by its first argument.
const STUB_MCP: &str = r#"
import json, os, sys
log = open(sys.argv[1], "a")
def say(obj):
    sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    method, params = m["method"], m.get("params", {})
    if method == "initialize":
        r = {"protocolVersion": params.get("protocolVersion", "2025-06-18"),
             "capabilities": {"tools": {}}, "serverInfo": {"name": "chorus", "version": "0"}}
    elif method == "tools/list":
        r = {"tools": [
            {"name": "file_read", "description": "Read a file",
             "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
            {"name": "file_write", "description": "Write a file",
             "inputSchema": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                             "required": ["path", "content"]}}]}
    elif method == "tools/call":
        log.write(json.dumps({"name": params["name"], "arguments": params.get("arguments"),
                              "url": os.environ.get("CHORUS_TOOLS_URL"),
                              "token": os.environ.get("CHORUS_TOOLS_TOKEN")}) + "\n")
        log.flush()
        if params["name"] == "file_read":
            r = {"content": [{"type": "text", "text": "no such file"}], "isError": True}
        else:
            r = {"content": [{"type": "text", "text": "wrote 2 bytes"}], "isError": False}
    else:
        say({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "unknown method"}})
        continue
    say({"jsonrpc": "2.0", "id": m["id"], "result": r})
"#;

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|path| path.is_file())
}

/// The CLI, or why the test does not run.
fn cli(program: &str) -> Option<PathBuf> {
    let found = on_path(program);
    if found.is_none() {
        eprintln!("skipped: `{program}` is not on PATH (install it to run this test)");
    } else if on_path("python3").is_none() {
        eprintln!("skipped: `python3` (runs the stub MCP server) is not on PATH");
        return None;
    }
    found
}

/// One agent's directories, kept across turns (sessions live in its home, looked
/// up by cwd).
struct Agent {
    _dir: tempfile::TempDir,
    cwd: PathBuf,
    home: PathBuf,
    tmp: PathBuf,
    /// The stand-in for `chorus-tools`, and the log of the calls it got.
    tools: PathBuf,
    calls: PathBuf,
}

impl Agent {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let [cwd, home, tmp, bin] = ["work", "home", "tmp", "bin"].map(|d| dir.path().join(d));
        for d in [&cwd, &home, &tmp, &bin] {
            std::fs::create_dir_all(d).unwrap();
        }
        let calls = dir.path().join("calls.jsonl");
        std::fs::write(bin.join("stub_mcp.py"), STUB_MCP).unwrap();
        let tools = bin.join("chorus-tools");
        // `chorus-tools mcp` as the flavors start it.
        std::fs::write(
            &tools,
            format!(
                "#!/bin/sh\n[ \"$1\" = mcp ] || exit 2\nexec python3 {} {}\n",
                bin.join("stub_mcp.py").display(),
                calls.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&tools, std::fs::Permissions::from_mode(0o755)).unwrap();
        Agent {
            _dir: dir,
            cwd,
            home,
            tmp,
            tools,
            calls,
        }
    }

    fn calls(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.calls)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// Runs one turn as the driver will: the flavor's launch (files 0600, env on a clean
/// one, prompt on stdin), its parser on stdout, its classification of the end.
async fn turn(
    flavor: &dyn Flavor,
    program: &Path,
    fake: &FakeModel,
    agent: &Agent,
    tools_bin: &Path,
    session: Option<&CliSession>,
    prompt: &str,
) -> (Vec<CliEvent>, ExitReport) {
    let endpoint = format!("http://{}", fake.addr());
    let tools = vec!["file_read".to_string(), "file_write".to_string()];
    let spec = LaunchSpec {
        program,
        cwd: &agent.cwd,
        home: &agent.home,
        tmp: &agent.tmp,
        model: match flavor.model_api() {
            "anthropic-messages" => "claude-fake",
            _ => "fake-model",
        },
        endpoint: &endpoint,
        token: TOKEN,
        chorus_tools: tools_bin,
        tools: &tools,
        instructions: "You are Ada, an agent of Chorus.",
        prompt,
        session,
    };
    let launch = flavor.launch(&spec);
    for (path, content) in &launch.files {
        std::fs::write(path, content).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    let mut child = tokio::process::Command::new(program)
        .args(&launch.args)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap())
        .env("HOME", &agent.home)
        .env("TMPDIR", &agent.tmp)
        .envs(launch.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&agent.cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    stdin
        .write_all(launch.stdin.as_deref().unwrap_or("").as_bytes())
        .await
        .unwrap();
    drop(stdin);
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let stderr = tokio::spawn(async move {
        let mut text = String::new();
        let _ = tokio::io::AsyncReadExt::read_to_string(&mut stderr, &mut text).await;
        text
    });
    let mut parser = flavor.parser();
    let mut events = Vec::new();
    let mut exit = ExitReport::default();
    let read = async {
        let mut lines = BufReader::new(stdout).lines();
        while let Some(line) = lines.next_line().await.unwrap() {
            match parser.line(&line) {
                Ok(more) => events.extend(more),
                Err(why) => {
                    exit.malformed_lines += 1;
                    exit.last_error = Some(why);
                }
            }
        }
        child.wait().await.unwrap()
    };
    // The machine is loaded; OpenCode takes 4-8 s to start when it is not.
    let status = tokio::time::timeout(Duration::from_secs(180), read)
        .await
        .expect("the CLI did not end within 180 s");
    events.extend(parser.finish());
    exit.code = status.code();
    exit.signal = std::os::unix::process::ExitStatusExt::signal(&status);
    exit.stderr_tail = stderr.await.unwrap();
    for event in &events {
        match event {
            CliEvent::Final { is_error, .. } => {
                exit.saw_final = true;
                exit.final_is_error = *is_error;
            }
            CliEvent::Error { message } => exit.last_error = Some(message.clone()),
            _ => {}
        }
    }
    (events, exit)
}

fn session_of(events: &[CliEvent]) -> String {
    let ids: Vec<&String> = events
        .iter()
        .filter_map(|e| match e {
            CliEvent::Session { id } => Some(id),
            _ => None,
        })
        .collect();
    assert_eq!(ids.len(), 1, "one Session event: {events:?}");
    ids[0].clone()
}

fn final_text(events: &[CliEvent]) -> String {
    match events.last() {
        Some(CliEvent::Final {
            text,
            is_error: false,
            ..
        }) => text.clone(),
        _ => panic!("the turn did not end with a good Final: {events:?}"),
    }
}

/// The scripted turn both CLIs get: a failing call, a good one, then an answer.
fn script_tool_turn(fake: &FakeModel) {
    fake.push(fake_model::tool_call(
        "call_1",
        "file_read",
        json!({"path": "a.txt"}),
    ))
    .push(fake_model::tool_call(
        "call_2",
        "file_write",
        json!({"path": "a.txt", "content": "hi"}),
    ))
    .push(fake_model::text("done"));
}

/// What the CLI made of the scripted turn: the calls (prefix removed) with their
/// results, and the final text.
fn check_tool_turn(events: &[CliEvent], agent: &Agent) {
    let calls: Vec<&ToolCall> = events
        .iter()
        .filter_map(|e| match e {
            CliEvent::Assistant { tool_calls, .. } => Some(tool_calls),
            _ => None,
        })
        .flatten()
        .collect();
    let names: Vec<&str> = calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["file_read", "file_write"], "{events:?}");
    let args: Value = serde_json::from_str(&calls[1].arguments).unwrap();
    assert_eq!(args, json!({"path": "a.txt", "content": "hi"}));
    let results: Vec<(&str, bool)> = events
        .iter()
        .filter_map(|e| match e {
            CliEvent::ToolResult {
                content, is_error, ..
            } => Some((content.as_str(), *is_error)),
            _ => None,
        })
        .collect();
    assert_eq!(results, [("no such file", true), ("wrote 2 bytes", false)]);
    assert_eq!(final_text(events), "done");
    let started = events
        .iter()
        .filter(|e| matches!(e, CliEvent::ModelCallStarted))
        .count();
    let ended = events
        .iter()
        .filter(|e| matches!(e, CliEvent::ModelCallEnded { usage: Some(_) }))
        .count();
    assert_eq!(
        (started, ended),
        (3, 3),
        "a step per model call, with usage"
    );
    let seen = agent.calls();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(seen[1]["name"], "file_write");
    assert_eq!(
        seen[1]["arguments"],
        json!({"path": "a.txt", "content": "hi"})
    );
    assert_eq!(
        seen[1]["token"], TOKEN,
        "the MCP server got the run's token"
    );
    assert!(
        seen[1]["url"]
            .as_str()
            .is_some_and(|u| u.starts_with("http://127.0.0.1:")),
        "{seen:?}"
    );
}

#[tokio::test]
async fn claude_code_runs_chorus_tools_against_the_fake_and_resumes_and_forks() {
    let Some(claude) = cli("claude") else { return };
    let fake = FakeModel::start_under(Wire::Anthropic, &["claude-fake"], "/llm").await;
    let agent = Agent::new();
    script_tool_turn(&fake);
    let (events, exit) = turn(
        &ClaudeCode,
        &claude,
        &fake,
        &agent,
        &agent.tools,
        None,
        "Write hi to a.txt",
    )
    .await;
    assert_eq!(ClaudeCode.classify(&exit), None, "{exit:?}");
    assert!(
        events.contains(&CliEvent::Init {
            tools: vec!["file_read".into(), "file_write".into()],
            mcp_connected: true
        }),
        "{events:?}"
    );
    check_tool_turn(&events, &agent);
    let session = session_of(&events);

    // Every request: the Messages API with the beta query, the run's credential as
    // the key, exactly the chorus tools, the prompt as written (it came on stdin).
    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "one per model call, no side requests");
    for r in &requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/v1/messages", "beta=true")
        );
        assert_eq!(r.headers["x-api-key"], TOKEN);
        assert!(!r.headers.contains_key("authorization"));
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["mcp__chorus__file_read", "mcp__chorus__file_write"]);
        assert_eq!(r.body["stream"], true);
    }
    assert_eq!(
        requests[0].body["messages"][0]["content"][0]["text"],
        "Write hi to a.txt"
    );
    let system = requests[0].body["system"].to_string();
    assert!(
        system.contains("You are Ada, an agent of Chorus."),
        "{system}"
    );
    assert!(
        fake.stray_requests().is_empty(),
        "{:?}",
        fake.stray_requests()
    );
    assert!(fake.title_requests().is_empty());

    // The next message resumes the session: same id, the earlier turn in the history.
    fake.push(fake_model::text("again"));
    let resume = CliSession {
        id: session.clone(),
        fork: false,
    };
    let (events, exit) = turn(
        &ClaudeCode,
        &claude,
        &fake,
        &agent,
        &agent.tools,
        Some(&resume),
        "And now?",
    )
    .await;
    assert_eq!(ClaudeCode.classify(&exit), None, "{exit:?}");
    assert_eq!(session_of(&events), session);
    assert_eq!(final_text(&events), "again");
    let history = fake.requests()[3].body["messages"].to_string();
    assert!(history.contains("mcp__chorus__file_write") && history.contains("And now?"));

    // A continuation forks it: a new id, the same history.
    fake.push(fake_model::text("forked"));
    let fork = CliSession {
        id: session.clone(),
        fork: true,
    };
    let (events, exit) = turn(
        &ClaudeCode,
        &claude,
        &fake,
        &agent,
        &agent.tools,
        Some(&fork),
        "Once more",
    )
    .await;
    assert_eq!(ClaudeCode.classify(&exit), None, "{exit:?}");
    assert_ne!(session_of(&events), session);
    assert!(
        fake.requests()[4].body["messages"]
            .to_string()
            .contains("And now?")
    );

    // A session it does not have.
    let gone = CliSession {
        id: "00000000-0000-4000-8000-000000000000".into(),
        fork: false,
    };
    let (_, exit) = turn(
        &ClaudeCode,
        &claude,
        &fake,
        &agent,
        &agent.tools,
        Some(&gone),
        "Hello?",
    )
    .await;
    let failure = ClaudeCode.classify(&exit).unwrap();
    assert_eq!(failure.cause, CliFailure::UnknownSession, "{exit:?}");
    assert_eq!(fake.requests().len(), 5, "no model call for it");
}

#[tokio::test]
async fn claude_code_reports_a_dead_mcp_server_and_a_refused_credential() {
    let Some(claude) = cli("claude") else { return };
    let fake = FakeModel::start_under(Wire::Anthropic, &["claude-fake"], "/llm").await;
    let agent = Agent::new();
    fake.push(fake_model::text("no tools"));
    let missing = agent.tmp.join("no-such-chorus-tools");
    let (events, _) = turn(&ClaudeCode, &claude, &fake, &agent, &missing, None, "Hi").await;
    assert!(
        events.contains(&CliEvent::Init {
            tools: vec![],
            mcp_connected: false
        }),
        "{events:?}"
    );

    // 401 twice: the first try and the one retry the launch allows.
    for _ in 0..2 {
        fake.push(fake_model::error(
            401,
            "authentication_error",
            "invalid x-api-key",
        ));
    }
    let (_, exit) = turn(
        &ClaudeCode,
        &claude,
        &fake,
        &agent,
        &agent.tools,
        None,
        "Hi",
    )
    .await;
    let failure = ClaudeCode.classify(&exit).unwrap();
    assert_eq!(failure.cause, CliFailure::AuthRefused, "{exit:?}");
    assert_eq!(fake.requests().len(), 3);
}

#[tokio::test]
async fn opencode_runs_chorus_tools_against_the_fake_and_resumes_and_forks() {
    let Some(opencode) = cli("opencode") else {
        return;
    };
    let fake = FakeModel::start_under(Wire::OpenAi, &["fake-model"], "/llm").await;
    let agent = Agent::new();
    script_tool_turn(&fake);
    let prompt = "Write \"hi\" to a.txt\n-- please";
    let (events, exit) = turn(
        &OpenCode,
        &opencode,
        &fake,
        &agent,
        &agent.tools,
        None,
        prompt,
    )
    .await;
    assert_eq!(OpenCode.classify(&exit), None, "{exit:?}");
    check_tool_turn(&events, &agent);
    let session = session_of(&events);

    let requests = fake.requests();
    assert_eq!(requests.len(), 3, "one per model call, no title request");
    for r in &requests {
        assert_eq!(
            (r.method.as_str(), r.path.as_str(), r.query.as_str()),
            ("POST", "/v1/chat/completions", "")
        );
        assert_eq!(r.headers["authorization"], format!("Bearer {TOKEN}"));
        let tools: Vec<&str> = r.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(tools, ["chorus_file_read", "chorus_file_write"]);
        assert_eq!(r.body["model"], "fake-model");
        assert_eq!(r.body["stream"], true);
    }
    let messages = &requests[0].body["messages"];
    assert_eq!(
        messages[1]["content"], prompt,
        "the prompt exactly as written"
    );
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .contains("You are Ada, an agent of Chorus.")
    );
    assert!(
        fake.stray_requests().is_empty(),
        "{:?}",
        fake.stray_requests()
    );
    assert!(fake.title_requests().is_empty());

    fake.push(fake_model::text("again"));
    let resume = CliSession {
        id: session.clone(),
        fork: false,
    };
    let (events, exit) = turn(
        &OpenCode,
        &opencode,
        &fake,
        &agent,
        &agent.tools,
        Some(&resume),
        "And now?",
    )
    .await;
    assert_eq!(OpenCode.classify(&exit), None, "{exit:?}");
    assert_eq!(session_of(&events), session);
    assert_eq!(final_text(&events), "again");
    let history = fake.requests()[3].body["messages"].to_string();
    assert!(history.contains("chorus_file_write") && history.contains("And now?"));

    fake.push(fake_model::text("forked"));
    let fork = CliSession {
        id: session.clone(),
        fork: true,
    };
    let (events, exit) = turn(
        &OpenCode,
        &opencode,
        &fake,
        &agent,
        &agent.tools,
        Some(&fork),
        "Once more",
    )
    .await;
    assert_eq!(OpenCode.classify(&exit), None, "{exit:?}");
    assert_ne!(session_of(&events), session);
    assert!(
        fake.requests()[4].body["messages"]
            .to_string()
            .contains("And now?")
    );

    let gone = CliSession {
        id: "ses_0000000000000000000000000".into(),
        fork: false,
    };
    let (_, exit) = turn(
        &OpenCode,
        &opencode,
        &fake,
        &agent,
        &agent.tools,
        Some(&gone),
        "Hello?",
    )
    .await;
    assert_eq!(
        OpenCode.classify(&exit).unwrap().cause,
        CliFailure::UnknownSession,
        "{exit:?}"
    );

    // A refused credential is not retried.
    fake.push(fake_model::error(
        401,
        "invalid_api_key",
        "Incorrect API key provided",
    ));
    let (_, exit) = turn(
        &OpenCode,
        &opencode,
        &fake,
        &agent,
        &agent.tools,
        None,
        "Hi",
    )
    .await;
    assert_eq!(
        OpenCode.classify(&exit).unwrap().cause,
        CliFailure::AuthRefused,
        "{exit:?}"
    );
    assert_eq!(fake.requests().len(), 6);
}
