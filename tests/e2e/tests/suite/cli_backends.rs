//! CLI backends through the real binaries, the real Claude Code and OpenCode, and
//! the fake model (issue 29's acceptance): the same task scenario through `api`,
//! `claude-code` and `opencode` agents gives the same audited tool calls and
//! decisions, the same file and the same outcome; no provider key or API token
//! reaches the CLI or `chorus-tools`, and a spent credential is refused; a reply
//! continues the CLI's session; a kill leaves no CLI process behind.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeAnthropic, FakeModel, FakeOpenAi, bin_path};
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(120);
const ANTHROPIC_KEY: &str = "sk-ant-e2e-provider-key-do-not-leak";
const OPENAI_KEY: &str = "sk-openai-e2e-provider-key-do-not-leak";

/// A profile that allows writing and reading files and `echo`; every other bash
/// command is denied (no rule matches).
fn profile() -> Value {
    json!({"allow": ["tool:create_file:.*", "tool:view:.*", "tool:bash:echo( .*)?"], "ask": []})
}

/// Chorus with a fake model of the format the backend speaks (the planner uses the
/// same default model).
async fn start(backend: &str) -> anyhow::Result<(FakeModel, Chorus)> {
    start_configured(backend, "").await
}

/// [`start`], with settings (TOML).
async fn start_configured(backend: &str, config: &str) -> anyhow::Result<(FakeModel, Chorus)> {
    if backend == "claude-code" {
        let model = FakeAnthropic::start().await;
        let chorus = claude_chorus(&model, config, None).await?;
        return Ok((model, chorus));
    }
    start_openai(config).await
}

/// Chorus for a Claude Code agent against `model`, with settings and maybe a data
/// directory of its own (to start it again on the same one).
async fn claude_chorus(
    model: &FakeModel,
    config: &str,
    data: Option<&Path>,
) -> anyhow::Result<Chorus> {
    let mut builder = Chorus::builder();
    if let Some(data) = data {
        builder = builder.data_dir(data);
    }
    builder
        .config(config)
        .env("ANTHROPIC_BASE_URL", &model.host_url())
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("CHORUS_DEFAULT_MODEL", "claude-fake")
        .start()
        .await
}

async fn start_openai(config: &str) -> anyhow::Result<(FakeModel, Chorus)> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .config(config)
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    Ok((model, chorus))
}

async fn create_coder(chorus: &Chorus, backend: &str) -> anyhow::Result<Value> {
    chorus
        .ok(
            Method::POST,
            "/api/agents",
            Some(
                json!({"name": "coder", "backend": backend, "permissions": profile(),
                    "system_prompt": "You are coder."}),
            ),
        )
        .await
}

/// Agent `careful` on `backend`: `view` allowed, `create_file` asked of a person.
async fn create_careful(chorus: &Chorus, backend: &str) -> anyhow::Result<Value> {
    chorus
        .ok(
            Method::POST,
            "/api/agents",
            Some(json!({"name": "careful", "backend": backend,
                    "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]}})),
        )
        .await
}

/// The tool decisions of `agent`'s audit log, oldest first: (action, decision, result).
async fn tool_decisions(
    chorus: &Chorus,
    agent: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let page = chorus
        .ok(
            Method::GET,
            &format!("/api/agents/{agent}/audit?limit=1000"),
            None,
        )
        .await?;
    let mut rows: Vec<Value> = page["entries"].as_array().cloned().unwrap_or_default();
    rows.sort_by_key(|r| r["id"].as_i64());
    Ok(rows
        .iter()
        .filter(|r| r["action"].as_str().is_some_and(|a| a.starts_with("tool:")))
        .map(|r| {
            (
                r["action"].as_str().unwrap_or_default().to_string(),
                r["decision"].as_str().unwrap_or_default().to_string(),
                r["result"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect())
}

/// The tool decisions of `agent`'s audit log, oldest first, one line each:
/// `<action> <decision> <result>`.
async fn decision_lines(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<String>> {
    Ok(tool_decisions(chorus, agent)
        .await?
        .into_iter()
        .map(|(action, decision, result)| format!("{action} {decision} {result}"))
        .collect())
}

/// What one run of the scenario left for a user to see.
#[derive(Debug)]
struct Outcome {
    decisions: Vec<(String, String, String)>,
    file: String,
    status: String,
    report: Value,
    /// The worker thread's tool results, in order: (is_error, content).
    results: Vec<(bool, String)>,
    history_tools: Vec<(String, String)>,
    /// The tools the worker thread's model was offered, by Chorus's wire names
    /// (a CLI's MCP prefix removed), sorted.
    offered: Vec<String>,
    /// The thread's token usage.
    usage: Value,
}

/// The tool names of a model request, either format, without a CLI's MCP prefix.
fn offered_tools(body: &Value) -> Vec<String> {
    let mut names: Vec<String> = body["tools"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|t| {
            let name = t["name"]
                .as_str()
                .or(t["function"]["name"].as_str())
                .unwrap_or_default();
            let name = name.strip_prefix("mcp__chorus__").unwrap_or(name);
            name.strip_prefix("chorus_").unwrap_or(name).to_string()
        })
        .collect();
    names.sort();
    names
}

/// The scenario: planned for coder, started; coder writes hello.txt, reads it
/// back, tries a command its profile denies, and reports.
async fn scenario(backend: &str) -> anyhow::Result<Outcome> {
    let (model, chorus) = start(backend).await?;
    create_coder(&chorus, backend).await?;
    model.push(tool_call(
        "p1",
        "submit_plan",
        json!({"summary": "Write hello.txt", "requirements": ["hello.txt says hello"],
               "acceptance_criteria": ["the file exists"], "steps": ["write it"], "assignee": "coder"}),
    ));
    let (id, _) = chorus
        .create_task(json!({"title": "Hello", "description": "Write hello.txt"}))
        .await?;
    chorus.wait_task(id, "planned", WAIT).await?;

    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "hello.txt", "content": "hello"}),
    ));
    model.push(tool_call("c2", "view", json!({"path": "hello.txt"})));
    model.push(tool_call(
        "c3",
        "bash",
        json!({"command": "rm -f hello.txt"}),
    ));
    model.push(tool_call(
        "c4",
        "completion_report",
        json!({"status": "complete", "summary": "wrote hello.txt", "output": "hello.txt: hello"}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    let worker_thread = done["runs"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["role"] == "worker"))
        .and_then(|r| r["thread_id"].as_u64())
        .unwrap_or_else(|| panic!("no worker run: {done:#}"));
    let runs_backend = done["runs"]
        .as_array()
        .and_then(|runs| runs.iter().find(|r| r["role"] == "worker"))
        .map(|r| r["backend"].clone());
    assert_eq!(runs_backend, Some(json!(backend)), "{done:#}");
    let thread = chorus
        .ok(
            Method::GET,
            &format!("/api/agents/coder/threads/{worker_thread}"),
            None,
        )
        .await?;
    let history = chorus
        .ok(Method::GET, &format!("/api/tasks/{id}/history"), None)
        .await?;
    let history_tools = history["events"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .filter(|e| e["kind"] == "tool_call" && e["data"]["agent"] == "coder")
        .map(|e| {
            (
                e["data"]["tool"].as_str().unwrap_or_default().to_string(),
                e["data"]["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let file_path = chorus
        .agent_dir("coder")
        .join(format!("workspace/tasks/{id}/hello.txt"));
    let outcome = Outcome {
        decisions: tool_decisions(&chorus, "coder").await?,
        file: std::fs::read_to_string(&file_path)
            .unwrap_or_else(|e| format!("{}: {e}", file_path.display())),
        status: done["status"].as_str().unwrap_or_default().to_string(),
        report: done["report"].clone(),
        results: tool_results(&thread),
        history_tools,
        offered: model
            .requests()
            .iter()
            .map(|r| offered_tools(&r.body))
            .find(|tools| tools.iter().any(|t| t == "completion_report"))
            .unwrap_or_default(),
        usage: thread["usage"].clone(),
    };
    assert!(
        model.take_violations().is_empty(),
        "the fake saw requests a real API refuses"
    );
    Ok(outcome)
}

#[tokio::test]
async fn the_same_task_through_api_claude_code_and_opencode_gives_the_same_audit_file_and_outcome()
-> anyhow::Result<()> {
    let api = scenario("api").await?;
    assert_eq!(api.file, "hello");
    assert_eq!(api.status, "completed");
    let denied: Vec<_> = api.decisions.iter().filter(|d| d.1 == "deny").collect();
    assert_eq!(denied.len(), 1, "{:#?}", api.decisions);
    assert_eq!(denied[0].0, "tool:bash:rm -f hello.txt");
    // The profile's tools and the worker role's.
    assert_eq!(
        api.offered,
        [
            "ask_agent",
            "ask_question",
            "bash",
            "completion_report",
            "create_file",
            "delegate_to_agent",
            "view"
        ]
    );
    assert!(
        api.usage["input_tokens"].as_u64().is_some(),
        "{}",
        api.usage
    );
    for backend in ["claude-code", "opencode"] {
        let cli = scenario(backend).await?;
        assert_eq!(cli.decisions, api.decisions, "{backend}: the audit differs");
        assert_eq!(cli.file, api.file, "{backend}");
        assert_eq!(cli.status, api.status, "{backend}");
        assert_eq!(cli.report, api.report, "{backend}");
        assert_eq!(
            cli.results.iter().map(|r| r.0).collect::<Vec<_>>(),
            api.results.iter().map(|r| r.0).collect::<Vec<_>>(),
            "{backend}: which calls failed: {:#?} vs {:#?}",
            cli.results,
            api.results
        );
        assert_eq!(
            cli.history_tools, api.history_tools,
            "{backend}: the task history differs"
        );
        // Exactly the API loop's tools, by the same names: no built-in tool of the CLI.
        assert_eq!(
            cli.offered, api.offered,
            "{backend}: the tools offered differ"
        );
        assert!(
            cli.usage["input_tokens"].as_u64().is_some_and(|n| n > 0),
            "{backend}: usage is recorded like an API run's: {}",
            cli.usage
        );
    }
    Ok(())
}

/// Every process whose executable is `program` (resolved) and whose working
/// directory is below `within` (this test's agent: tests run side by side), by pid.
fn processes_of(program: &Path, within: &Path) -> Vec<u32> {
    let Ok(target) = std::fs::canonicalize(program) else {
        return Vec::new();
    };
    let within = std::fs::canonicalize(within).unwrap_or_else(|_| within.to_path_buf());
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if std::fs::read_link(entry.path().join("exe")).is_ok_and(|exe| exe == target)
            && std::fs::read_link(entry.path().join("cwd"))
                .is_ok_and(|cwd| cwd.starts_with(&within))
        {
            pids.push(pid);
        }
    }
    pids
}

fn which(program: &str) -> PathBuf {
    std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(program))
                .find(|p| p.is_file())
        })
        .unwrap_or_else(|| panic!("{program} is not on PATH: .ci/run installs it"))
}

/// Waits until `check` holds, or fails with `what`.
async fn until(what: &str, mut check: impl FnMut() -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    while !check() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// What a process holds: its environment, argv and the text of its open regular files.
fn held_by(pid: u32) -> String {
    let proc = PathBuf::from(format!("/proc/{pid}"));
    let mut text = String::new();
    for part in ["environ", "cmdline"] {
        text.push_str(&String::from_utf8_lossy(
            &std::fs::read(proc.join(part)).unwrap_or_default(),
        ));
        text.push('\n');
    }
    for fd in std::fs::read_dir(proc.join("fd"))
        .into_iter()
        .flatten()
        .flatten()
    {
        if let Ok(target) = std::fs::read_link(fd.path())
            && target.is_file()
            && let Ok(bytes) = std::fs::read(&target)
        {
            text.push_str(&String::from_utf8_lossy(&bytes));
        }
    }
    text
}

/// No provider key and no API token in what the CLI and `chorus-tools mcp` hold
/// (environment, argv, open files, the config files Chorus wrote), while they run;
/// after the run, its credential is worthless.
#[tokio::test]
async fn no_key_or_token_reaches_the_cli_or_chorus_tools_and_a_spent_credential_is_refused()
-> anyhow::Result<()> {
    for backend in ["claude-code", "opencode"] {
        let (model, chorus) = start(backend).await?;
        create_coder(&chorus, backend).await?;
        let key = if backend == "claude-code" {
            ANTHROPIC_KEY
        } else {
            OPENAI_KEY
        };
        let hold = Hold::new();
        model.push(Reply::Held(
            hold.clone(),
            Box::new(tool_call("c1", "view", json!({"path": "."}))),
        ));
        model.push(text("done"));
        let thread = chorus.send_message("coder", "look around").await?;
        model.wait_for_requests(1, WAIT).await;

        let cli = which(if backend == "claude-code" {
            "claude"
        } else {
            "opencode"
        });
        let tools = bin_path("chorus-tools");
        let agent_dir = chorus.agent_dir("coder");
        let mut seen = Vec::new();
        until("the CLI and chorus-tools mcp run", || {
            let (clis, servers) = (
                processes_of(&cli, &agent_dir),
                processes_of(&tools, &agent_dir),
            );
            let both = !clis.is_empty() && !servers.is_empty();
            seen = [clis, servers].concat();
            both
        })
        .await?;
        let mut endpoint = None;
        for pid in &seen {
            let held = held_by(*pid);
            assert!(
                !held.contains(key),
                "{backend}: the provider key is in process {pid}"
            );
            assert!(
                !held.contains(chorus.token()),
                "{backend}: the API token is in process {pid}"
            );
            for var in held.split('\0') {
                if let Some(url) = var.strip_prefix("CHORUS_TOOLS_URL=") {
                    endpoint.get_or_insert((url.to_string(), String::new())).0 = url.to_string();
                }
                if let Some(token) = var.strip_prefix("CHORUS_TOOLS_TOKEN=") {
                    endpoint.get_or_insert((String::new(), String::new())).1 = token.to_string();
                }
            }
        }
        let tmp = chorus.agent_dir("coder").join("tmp");
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            if entry.path().is_file() {
                let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
                assert!(
                    !text.contains(key),
                    "{backend}: the key is in {}",
                    entry.path().display()
                );
                assert!(
                    !text.contains(chorus.token()),
                    "{backend}: the token is in {}",
                    entry.path().display()
                );
            }
        }
        let (url, token) = endpoint
            .unwrap_or_else(|| panic!("{backend}: no CHORUS_TOOLS_* in the CLI's environment"));
        assert!(
            !url.is_empty() && token.len() >= 32,
            "{backend}: {url} {token}"
        );

        hold.release();
        chorus.wait_thread_finished("coder", thread, WAIT).await?;
        until("the CLI is gone", || {
            processes_of(&cli, &agent_dir).is_empty()
        })
        .await?;
        let spent = tokio::process::Command::new(&tools)
            .args(["view", r#"{"path": "."}"#])
            .env_clear()
            .env("CHORUS_TOOLS_URL", &url)
            .env("CHORUS_TOOLS_TOKEN", &token)
            .output()
            .await?;
        assert_eq!(spent.status.code(), Some(2), "{backend}: {spent:?}");
        let said = String::from_utf8_lossy(&spent.stderr);
        assert!(
            said.contains("no Chorus run is listening") || said.contains("has ended"),
            "{backend}: {said}"
        );
        drop(model);
    }
    Ok(())
}

/// A reply to a CLI agent's ended thread continues in a fork of its session (the
/// model sees the earlier turn as it was); a kill ends the CLI and its
/// `chorus-tools` at once, leaving no process behind.
#[tokio::test]
async fn a_reply_forks_the_cli_session_and_a_kill_leaves_no_cli_process() -> anyhow::Result<()> {
    for backend in ["claude-code", "opencode"] {
        let (model, chorus) = start(backend).await?;
        create_coder(&chorus, backend).await?;
        model.push(text("The capital is Paris."));
        let first = chorus.send_message("coder", "Capital of France?").await?;
        let thread = chorus.wait_thread_finished("coder", first, WAIT).await?;
        assert_eq!(thread["status"], "completed", "{backend}: {thread:#}");
        let messages = thread["messages"].as_array().cloned().unwrap_or_default();
        let answer = messages
            .iter()
            .rev()
            .find(|m| m["role"] == "assistant")
            .unwrap_or_else(|| panic!("{backend}: no answer: {thread:#}"));
        assert_eq!(answer["content"], "The capital is Paris.", "{backend}");

        model.push(text("About 2.1 million."));
        let reply = chorus
            .ok(
                Method::POST,
                "/api/agents/coder/messages",
                Some(json!({"content": "And its population?", "reply_to": answer["id"]})),
            )
            .await?;
        assert_eq!(
            reply["routed"],
            format!("continued_from:{first}"),
            "{backend}"
        );
        let next = reply["thread_id"].as_u64().expect("thread id");
        let thread = chorus.wait_thread_finished("coder", next, WAIT).await?;
        assert_eq!(thread["status"], "completed", "{backend}: {thread:#}");
        // The CLI went on from its own session: the model is sent the earlier turn
        // as the CLI kept it, then the reply (and no transcript written as context).
        let requests = model.requests();
        let last = &requests.last().expect("requests").body;
        let seen = last["messages"].to_string();
        for said in [
            "Capital of France?",
            "The capital is Paris.",
            "And its population?",
        ] {
            assert!(seen.contains(said), "{backend}: {said:?} not in {seen}");
        }
        assert!(
            !seen.contains("The conversation so far"),
            "{backend}: a resumed session needs no transcript: {seen}"
        );
        let sessions = chorus
            .query_store("SELECT cli_session FROM runs ORDER BY created_at")
            .await?;
        let sessions: Vec<&str> = sessions.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(sessions.len(), 2, "{backend}: {sessions:?}");
        assert_ne!(
            sessions[0], sessions[1],
            "{backend}: a fork is a new session"
        );

        // Killed while the CLI waits for its model.
        let hold = Hold::new();
        model.push(Reply::Held(hold.clone(), Box::new(text("never seen"))));
        let long = chorus.send_message("coder", "Take your time.").await?;
        let cli = which(if backend == "claude-code" {
            "claude"
        } else {
            "opencode"
        });
        let tools = bin_path("chorus-tools");
        let agent_dir = chorus.agent_dir("coder");
        let asked = model.requests().len() + 1;
        model.wait_for_requests(asked, WAIT).await;
        until("the CLI runs", || {
            !processes_of(&cli, &agent_dir).is_empty()
        })
        .await?;
        let killed = chorus
            .api(Method::DELETE, &format!("/api/agents/coder/threads/{long}"))
            .send()
            .await?;
        assert!(killed.status().is_success(), "{backend}: {killed:?}");
        chorus
            .wait_thread("coder", long, WAIT, |t| t["status"] == "killed")
            .await?;
        until("no CLI or chorus-tools is left", || {
            processes_of(&cli, &agent_dir).is_empty() && processes_of(&tools, &agent_dir).is_empty()
        })
        .await?;
        hold.release();
    }
    Ok(())
}

/// A task's question ends the CLI's turn (the tool ends it, not a CLI waiting on an
/// MCP call), and the answer goes on in the same thread by resuming the same CLI
/// session: the model sees its question and the answer.
#[tokio::test]
async fn a_task_question_ends_the_cli_turn_and_the_answer_resumes_its_session() -> anyhow::Result<()>
{
    for backend in ["claude-code", "opencode"] {
        let (model, chorus) = start(backend).await?;
        create_coder(&chorus, backend).await?;
        model.push(tool_call(
            "p1",
            "submit_plan",
            json!({"summary": "Greet", "requirements": [], "acceptance_criteria": [],
                   "steps": ["ask, then write"], "assignee": "coder"}),
        ));
        let (id, _) = chorus
            .create_task(json!({"title": "Greet", "description": "Write a greeting"}))
            .await?;
        chorus.wait_task(id, "planned", WAIT).await?;
        model.push(tool_call(
            "c1",
            "ask_question",
            json!({"question": "Which greeting do you want?"}),
        ));
        chorus
            .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
            .await?;
        let waiting = chorus.wait_task(id, "waiting", WAIT).await?;
        let question = waiting["questions"]
            .as_array()
            .and_then(|q| {
                q.iter()
                    .rev()
                    .find(|q| q["question"] == "Which greeting do you want?")
            })
            .and_then(|q| q["id"].as_str())
            .unwrap_or_else(|| panic!("{backend}: no open question: {waiting:#}"))
            .to_string();
        let asked = model.requests().len();

        model.push(tool_call(
            "c2",
            "completion_report",
            json!({"status": "complete", "summary": "greeted", "output": "hello"}),
        ));
        chorus
            .ok(
                Method::POST,
                &format!("/api/tasks/{id}/answers"),
                Some(json!({"answers": {question: "Say hello there"}})),
            )
            .await?;
        let done = chorus.wait_task(id, "completed", WAIT).await?;
        let threads: Vec<u64> = done["runs"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .filter(|r| r["role"] == "worker")
            .filter_map(|r| r["thread_id"].as_u64())
            .collect();
        assert_eq!(threads.len(), 1, "{backend}: one worker thread: {done:#}");
        let sessions = chorus
            .query_store(&format!(
                "SELECT cli_session FROM runs WHERE agent_name = 'coder' AND thread_id = {} ORDER BY created_at",
                threads[0]
            ))
            .await?;
        let sessions: Vec<&str> = sessions.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(
            sessions.len(),
            2,
            "{backend}: two runs of the thread: {sessions:?}"
        );
        assert_eq!(
            sessions[0], sessions[1],
            "{backend}: the answer resumed the same session"
        );
        let after = model.requests();
        let resumed = after[asked..]
            .iter()
            .map(|r| r.body["messages"].to_string())
            .next()
            .unwrap_or_else(|| panic!("{backend}: no model call after the answer"));
        for said in ["Which greeting do you want?", "Say hello there"] {
            assert!(
                resumed.contains(said),
                "{backend}: {said:?} not in {resumed}"
            );
        }
    }
    Ok(())
}

/// A session the CLI no longer has (its store was cleared) does not fail the
/// thread: the same turn starts a new session with the thread's messages as
/// context, and a step says so.
#[tokio::test]
async fn a_session_the_cli_lost_starts_again_with_the_thread_as_context() -> anyhow::Result<()> {
    let (model, chorus) = start("claude-code").await?;
    create_coder(&chorus, "claude-code").await?;
    model.push(text("The capital is Paris."));
    let first = chorus.send_message("coder", "Capital of France?").await?;
    let thread = chorus.wait_thread_finished("coder", first, WAIT).await?;
    let answer = thread["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
        .cloned()
        .unwrap_or_else(|| panic!("no answer: {thread:#}"));
    // Claude Code keeps its sessions in its config directory, in the agent's home.
    let sessions = chorus.agent_dir("coder").join("home/.claude/projects");
    assert!(
        sessions.is_dir(),
        "no session store at {}",
        sessions.display()
    );
    std::fs::remove_dir_all(&sessions)?;

    model.push(text("About 2.1 million."));
    let reply = chorus
        .ok(
            Method::POST,
            "/api/agents/coder/messages",
            Some(json!({"content": "And its population?", "reply_to": answer["id"]})),
        )
        .await?;
    let next = reply["thread_id"].as_u64().expect("thread id");
    let thread = chorus.wait_thread_finished("coder", next, WAIT).await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let said = thread["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .any(|s| {
            s["kind"] == "wait"
                && s["description"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("Starting a new claude-code session"))
        });
    assert!(
        said,
        "no step says the session was started again: {thread:#}"
    );
    let last = model.requests().last().expect("requests").body["messages"].to_string();
    for said in [
        "The conversation so far",
        "Capital of France?",
        "The capital is Paris.",
        "And its population?",
    ] {
        assert!(last.contains(said), "{said:?} not in {last}");
    }
    Ok(())
}

/// A CLI's call that the profile asks about waits for a person inside the MCP call:
/// the thread shows it waiting, an approval runs the call and the CLI goes on, a
/// denial is the result the model reads; both audited as for the tool loop.
#[tokio::test]
async fn a_cli_call_that_asks_waits_for_a_person_and_runs_once_approved() -> anyhow::Result<()> {
    let (model, chorus) = start("claude-code").await?;
    create_careful(&chorus, "claude-code").await?;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "a.txt", "content": "a"}),
    ));
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "b.txt", "content": "b"}),
    ));
    model.push(text("wrote a, b was refused"));
    let id = chorus.send_message("careful", "write a and b").await?;

    for (decision, file) in [("approve", "a.txt"), ("deny", "b.txt")] {
        let deadline = tokio::time::Instant::now() + WAIT;
        let approval = loop {
            let pending = chorus.ok(Method::GET, "/api/approvals", None).await?;
            if let Some(first) = pending.as_array().and_then(|p| p.first()).cloned() {
                break first;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no approval for {file}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert!(
            approval["actions"][0]
                .as_str()
                .is_some_and(|a| a.ends_with(file)),
            "{approval:#}"
        );
        let waiting = chorus.thread("careful", id).await?;
        assert_eq!(waiting["status"], "waiting_for_permission", "{waiting:#}");
        chorus
            .ok(
                Method::POST,
                &format!(
                    "/api/approvals/{}",
                    approval["id"].as_str().unwrap_or_default()
                ),
                Some(json!({"decision": decision})),
            )
            .await?;
        if decision == "approve" {
            let written = chorus.agent_dir("careful").join("workspace/a.txt");
            until("the approved file is written", || written.is_file()).await?;
        }
    }
    let thread = chorus.wait_thread_finished("careful", id, WAIT).await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(!chorus.agent_dir("careful").join("workspace/b.txt").exists());
    let results = tool_results(&thread);
    assert_eq!(results.len(), 2, "{results:#?}");
    assert!(!results[0].0 && results[1].0, "{results:#?}");
    let decisions: Vec<String> = tool_decisions(&chorus, "careful")
        .await?
        .into_iter()
        .map(|(action, decision, _)| format!("{action} {decision}"))
        .collect();
    assert_eq!(
        decisions,
        [
            "tool:create_file:a.txt ask_approved",
            "tool:create_file:b.txt ask_denied"
        ],
        "{decisions:#?}"
    );
    Ok(())
}

/// A CLI's call that waits for a person longer than the hold (below the CLI's own
/// tool-call limit) does not hold the CLI: the call is answered "waiting", the turn
/// ends with no CLI process left, and the thread waits for the person without a
/// run. The answer resumes the same session: an approved call runs then (the file
/// appears) and the model reads its result; a denied one is not run and the model
/// reads why. One audit row each, as for a call answered in time, with the call's
/// result once it ran (or was refused).
#[tokio::test]
async fn an_approval_slower_than_the_hold_ends_the_cli_turn_and_its_answer_resumes_the_session()
-> anyhow::Result<()> {
    for backend in ["claude-code", "opencode"] {
        let program = which(if backend == "claude-code" {
            "claude"
        } else {
            "opencode"
        });
        let (model, chorus) =
            start_configured(backend, "[backends]\napproval_hold_secs = 1\n").await?;
        create_careful(&chorus, backend).await?;
        for (decision, file) in [("approve", "a.txt"), ("deny", "b.txt")] {
            model.push(tool_call(
                "c1",
                "create_file",
                json!({"path": file, "content": "x"}),
            ));
            let id = chorus
                .send_message("careful", &format!("write {file}"))
                .await?;
            let runs = |status: &'static str| {
                let chorus = &chorus;
                async move {
                    let rows = chorus
                        .query_store(&format!(
                            "SELECT status, cli_session FROM runs WHERE agent_name = 'careful' \
                             AND thread_id = {id} ORDER BY created_at"
                        ))
                        .await?;
                    anyhow::Ok(
                        rows.lines()
                            .filter(|l| l.starts_with(status))
                            .map(str::to_string)
                            .collect::<Vec<_>>(),
                    )
                }
            };
            // The hold passes: the run ends its turn, the thread keeps waiting.
            let deadline = tokio::time::Instant::now() + WAIT;
            while runs("completed").await?.is_empty() {
                anyhow::ensure!(
                    tokio::time::Instant::now() < deadline,
                    "{backend}: the deferring run never ended"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            let waiting = chorus.thread("careful", id).await?;
            assert_eq!(
                waiting["status"], "waiting_for_permission",
                "{backend}: {waiting:#}"
            );
            until("the CLI has exited", || {
                processes_of(&program, &chorus.agent_dir("careful")).is_empty()
            })
            .await?;
            let pending = chorus.ok(Method::GET, "/api/approvals", None).await?;
            let approval = pending
                .as_array()
                .and_then(|p| p.first())
                .cloned()
                .unwrap_or_else(|| panic!("{backend}: no pending approval: {pending:#}"));
            assert!(
                approval["actions"][0]
                    .as_str()
                    .is_some_and(|a| a.ends_with(file)),
                "{approval:#}"
            );
            let told = model.requests().len();
            let answer = if decision == "approve" {
                "wrote it"
            } else {
                "it was refused"
            };
            model.push(text(answer));
            chorus
                .ok(
                    Method::POST,
                    &format!(
                        "/api/approvals/{}",
                        approval["id"].as_str().unwrap_or_default()
                    ),
                    Some(json!({"decision": decision})),
                )
                .await?;
            let thread = chorus.wait_thread_finished("careful", id, WAIT).await?;
            assert_eq!(thread["status"], "completed", "{backend}: {thread:#}");
            let written = chorus.agent_dir("careful").join("workspace").join(file);
            assert_eq!(
                written.is_file(),
                decision == "approve",
                "{backend}: {file} after {decision}"
            );
            let last = thread["messages"]
                .as_array()
                .and_then(|m| m.last())
                .cloned()
                .unwrap_or_default();
            assert_eq!(last["content"], answer, "{backend}: {thread:#}");
            // The same session went on, told how the call went.
            let sessions: Vec<String> = runs("completed")
                .await?
                .iter()
                .map(|row| row.split('|').nth(1).unwrap_or_default().to_string())
                .collect();
            assert_eq!(sessions.len(), 2, "{backend}: {sessions:?}");
            assert_eq!(sessions[0], sessions[1], "{backend}: one session");
            let resumed = model.requests()[told..]
                .first()
                .map(|r| r.body["messages"].to_string())
                .unwrap_or_else(|| panic!("{backend}: no model call after the answer"));
            let said = if decision == "approve" {
                "approved it and it has run"
            } else {
                "It was not run: Permission denied by"
            };
            assert!(
                resumed.contains(said),
                "{backend}: {said:?} not in {resumed}"
            );
        }
        // One row per call, with how the call went once it was answered.
        let decisions: Vec<String> = decision_lines(&chorus, "careful").await?;
        assert_eq!(
            decisions,
            [
                "tool:create_file:a.txt ask_approved ok",
                "tool:create_file:b.txt ask_denied error"
            ],
            "{backend}: {decisions:#?}"
        );
    }
    Ok(())
}

/// A thread left waiting on a deferred call when the control plane stops goes on
/// after the restart with the call refused (the wait for the person ended with that
/// control plane): the same CLI session is told so, the call is not run, and the ask
/// is audited as expired with the call's result.
#[tokio::test]
async fn a_restart_while_a_deferred_call_waits_resumes_the_session_with_the_call_refused()
-> anyhow::Result<()> {
    const HOLD: &str = "[backends]\napproval_hold_secs = 1\n";
    let model = FakeAnthropic::start().await;
    let data = tempfile::tempdir()?;
    let chorus = claude_chorus(&model, HOLD, Some(data.path())).await?;
    create_careful(&chorus, "claude-code").await?;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "a.txt", "content": "x"}),
    ));
    let id = chorus.send_message("careful", "write a.txt").await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let rows = chorus
            .query_store(&format!(
                "SELECT status FROM runs WHERE agent_name = 'careful' AND thread_id = {id}"
            ))
            .await?;
        let thread = chorus.thread("careful", id).await?;
        if rows.lines().any(|l| l == "completed") && thread["status"] == "waiting_for_permission" {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the call was never deferred: {rows} {thread:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    chorus.stop().await?;
    let told = model.requests().len();
    model.push(text("I will ask again later"));
    let chorus = claude_chorus(&model, HOLD, Some(data.path())).await?;
    let thread = chorus.wait_thread_finished("careful", id, WAIT).await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let last = thread["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["content"], "I will ask again later", "{thread:#}");
    assert!(!chorus.agent_dir("careful").join("workspace/a.txt").exists());
    let resumed = model.requests()[told..]
        .first()
        .map(|r| r.body["messages"].to_string())
        .unwrap_or_else(|| panic!("no model call after the restart"));
    assert!(
        resumed.contains(
            "It was not run: Permission denied: chorus restarted before a person answered"
        ),
        "{resumed}"
    );
    let decisions: Vec<String> = decision_lines(&chorus, "careful").await?;
    assert_eq!(
        decisions,
        ["tool:create_file:a.txt ask_expired error"],
        "{decisions:#?}"
    );
    let pending = chorus.ok(Method::GET, "/api/approvals", None).await?;
    assert_eq!(pending, json!([]), "nothing left to answer");
    Ok(())
}
