//! MCP servers as tool sources through the real binaries: `chorus-test-mcp` (built
//! with rmcp) as an agent's stdio server and as a streamable HTTP server; the fake
//! model calls their tools, the gate decides them (a denied one refused and
//! audited), results reach the model; a killed server is an error step and a
//! `failed` state, and the next call after it restarts or reconnects.

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call, tool_calls};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Hold, Reply, bin_path};
use reqwest::Method;
use serde_json::{Value, json};

const SECRET: &str = "mcp-secret-value-8812";

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-mcp")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config(&format!(
            "[mcp]\ncall_timeout_secs = 120\n[mcp.secrets]\nDEMO_TOKEN = \"{SECRET}\"\n"
        ))
        .start()
        .await
}

/// Echo, env, add_tool and bash are allowed; secret_word matches no rule, so it is denied.
fn profile(server: &str) -> Value {
    json!({"allow": [
        format!("tool:mcp__{server}__echo:.*"),
        format!("tool:mcp__{server}__env:.*"),
        format!("tool:mcp__{server}__add_tool:.*"),
        format!("tool:mcp__{server}__header:.*"),
        format!("tool:mcp__{server}__late:.*"),
        "tool:bash:.*",
    ]})
}

async fn audit(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let page: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/audit?limit=100"))
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"].as_array().cloned().unwrap_or_default())
}

async fn server_state(chorus: &Chorus, agent: &str, server: &str) -> anyhow::Result<Value> {
    Ok(chorus.agent(agent).await?["mcp_servers"][server].clone())
}

/// Waits until the agent's view shows `server` in `state`.
async fn wait_state(
    chorus: &Chorus,
    agent: &str,
    server: &str,
    state: &str,
) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let shown = server_state(chorus, agent, server).await?;
        if shown["state"] == state {
            return Ok(shown);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{server} never became {state}: {shown:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The pids of the processes whose command line holds `tag`.
fn pids_with(tag: &str) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(tag))
                .unwrap_or(false)
        })
        .collect()
}

fn step_descriptions(thread: &Value) -> Vec<(String, bool)> {
    thread["steps"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .iter()
        .map(|s| {
            (
                s["description"].as_str().unwrap_or_default().to_string(),
                s["failed"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[tokio::test]
async fn bad_mcp_settings_are_refused_and_secrets_are_shown_only_as_references()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    let server = bin_path("chorus-test-mcp");
    for (servers, says) in [
        (json!({"Demo-1": {"command": "x"}}), "not allowed"),
        (
            json!({"demo": {"command": "x", "env": {"API_TOKEN": "plain"}}}),
            "looks like a secret",
        ),
        (
            json!({"demo": {"command": "x", "env": {"A": {"secret": "NOPE"}}}}),
            "no secret named NOPE",
        ),
        (
            json!({"demo": {"url": "file:///etc/passwd"}}),
            "not an http",
        ),
    ] {
        let response = chorus
            .api(Method::POST, "/api/agents")
            .json(&json!({"name": "bad", "mcp_servers": servers}))
            .send()
            .await?;
        assert_eq!(response.status(), 400, "{servers}");
        let body: Value = response.json().await?;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{servers}: {message}");
    }
    assert_eq!(
        chorus
            .api(Method::GET, "/api/agents/bad")
            .send()
            .await?
            .status(),
        404,
        "a refused setting creates nothing"
    );
    chorus
        .create_agent_with(json!({
            "name": "holder",
            "mcp_servers": {"demo": {
                "command": server.to_str().unwrap(),
                "args": ["stdio"],
                "env": {"DEMO_TOKEN": {"secret": "DEMO_TOKEN"}},
            }},
        }))
        .await?;
    let view = chorus.agent("holder").await?;
    assert_eq!(
        view["mcp_servers"]["demo"]["state"], "not_started",
        "{view:#}"
    );
    assert_eq!(
        view["mcp_servers"]["demo"]["env"]["DEMO_TOKEN"],
        json!({"secret": "DEMO_TOKEN"})
    );
    assert!(!view.to_string().contains(SECRET));
    // PATCH replaces the set; a name outside the set is a 400 there too.
    let refused = chorus
        .api(Method::PATCH, "/api/agents/holder")
        .json(&json!({"mcp_servers": {"a.b": {"command": "x"}}}))
        .send()
        .await?;
    assert_eq!(refused.status(), 400);
    let cleared: Value = chorus
        .api(Method::PATCH, "/api/agents/holder")
        .json(&json!({"mcp_servers": null}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    assert_eq!(cleared["mcp_servers"], json!({}), "{cleared:#}");
    Ok(())
}

#[tokio::test]
async fn a_stdio_server_s_tools_are_gated_audited_and_reach_the_model_and_a_killed_server_recovers()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    let tag = format!("mcp-e2e-{}", std::process::id());
    chorus
        .create_agent_with(json!({
            "name": "mcpuser",
            "permissions": profile("demo"),
            "mcp_servers": {"demo": {
                "command": bin_path("chorus-test-mcp").to_str().unwrap(),
                "args": ["stdio", "--tag", tag],
                "env": {"DEMO_TOKEN": {"secret": "DEMO_TOKEN"}},
            }},
        }))
        .await?;

    // One run: an allowed call, a denied one, one that shows the secret reached
    // the server's environment (and is scrubbed on its way back), what else the
    // server's environment holds, that another tool process does not get the secret,
    // and a change of the server's tool list.
    model.push(tool_calls(&[
        ("c1", "mcp__demo__echo", json!({"text": "hi"})),
        ("c2", "mcp__demo__secret_word", json!({})),
        ("c3", "mcp__demo__env", json!({"name": "DEMO_TOKEN"})),
        ("c4", "mcp__demo__env", json!({"name": "OPENAI_API_KEY"})),
        ("c5", "mcp__demo__env", json!({"name": "HOME"})),
        (
            "c6",
            "bash",
            json!({"command": "echo \"[${DEMO_TOKEN:-none}]\""}),
        ),
        ("c7", "mcp__demo__add_tool", json!({})),
        ("c8", "bash", json!({"command": "for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null | grep -q '^DEMO_TOKEN=' && echo \"found in $p\"; done; echo scanned"})),
    ]));
    model.push(text("done"));
    let id = chorus.send_message("mcpuser", "use the server").await?;
    let thread = chorus
        .wait_thread_finished("mcpuser", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert_eq!(results[0], (false, "echo: hi".to_string()), "{results:?}");
    assert!(results[1].0, "denied: {results:?}");
    assert!(
        !results[1].1.contains("swordfish"),
        "the denied tool never ran: {results:?}"
    );
    assert!(!results[2].0, "{results:?}");
    assert_ne!(
        results[2].1, "unset",
        "the server got its secret: {results:?}"
    );
    assert!(
        !thread.to_string().contains(SECRET),
        "scrubbed on its way back"
    );
    assert_eq!(
        results[3],
        (false, "unset".to_string()),
        "no key of chorus's: {results:?}"
    );
    assert!(
        results[4].1.ends_with("/agents/mcpuser/home"),
        "a tool process of the agent's sandbox: {results:?}"
    );
    assert!(
        results[5].1.contains("[none]"),
        "bash has no server's env: {results:?}"
    );
    assert_eq!(results[6], (false, "added".to_string()), "{results:?}");
    // Nor can it read the server's environment through /proc, which the test,
    // unconfined, can.
    let server = pids_with(&tag);
    assert_eq!(server.len(), 1, "{server:?}");
    let environ = std::fs::read(format!("/proc/{}/environ", server[0]))?;
    assert!(String::from_utf8_lossy(&environ).contains("DEMO_TOKEN="));
    assert!(
        results[7].1.contains("scanned") && !results[7].1.contains("found in"),
        "{results:?}"
    );
    assert!(
        results[7]
            .1
            .contains(&format!("/proc/{}/environ: Permission denied", server[0])),
        "{results:?}"
    );

    // The model was offered the server's tools and read the result.
    let requests = model.requests();
    let offered: Vec<String> = requests[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            t["function"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    for tool in ["mcp__demo__echo", "mcp__demo__env"] {
        assert!(offered.contains(&tool.to_string()), "{offered:?}");
    }
    // What the profile always denies is not offered (and refused when called anyway).
    assert!(
        !offered.contains(&"mcp__demo__secret_word".to_string()),
        "{offered:?}"
    );
    assert!(requests[1].body.to_string().contains("echo: hi"));
    // The server announced a changed tool list (add_tool): it was read again within
    // the run, and the new tool offered from the run's next model call on.
    let late = |request: &chorus_test_support::fake_model::RecordedRequest| {
        request.body["tools"]
            .to_string()
            .contains("mcp__demo__late")
    };
    assert!(!late(&requests[0]), "not before add_tool");
    assert!(late(&requests[1]), "{}", requests[1].body["tools"]);

    // Each call decided and audited under its action string.
    let entries = audit(&chorus, "mcpuser").await?;
    let row = |call: &str| {
        entries
            .iter()
            .find(|e| e["call_id"] == call)
            .cloned()
            .unwrap()
    };
    assert_eq!(row("c1")["decision"], "allow");
    assert_eq!(row("c1")["action"], r#"tool:mcp__demo__echo:{"text":"hi"}"#);
    assert_eq!(row("c2")["decision"], "deny");
    assert_eq!(row("c2")["action"], "tool:mcp__demo__secret_word:");

    // The agent's status lists the server's tools as they are now.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let running = wait_state(&chorus, "mcpuser", "demo", "running").await?;
        let tools = running["tools"].as_array().cloned().unwrap_or_default();
        if tools.contains(&json!("late")) {
            assert!(tools.contains(&json!("echo")), "{running}");
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the status never listed the new tool: {running}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The agent's tool listing has them as its model is offered them: with the
    // server's description, where they come from and what the profile gives them;
    // not the one it always denies.
    let listed: Value = chorus
        .api(Method::GET, "/api/agents/mcpuser/tools")
        .send()
        .await?
        .json()
        .await?;
    let listed = listed["tools"].as_array().cloned().unwrap_or_default();
    let tool = |name: &str| listed.iter().find(|t| t["name"] == name).cloned();
    let echo = tool("mcp__demo__echo").expect("echo listed");
    assert_eq!(echo["mcp_server"], "demo", "{echo}");
    assert_eq!(echo["decision"], "allow", "{echo}");
    assert!(
        echo["description"]
            .as_str()
            .unwrap()
            .contains("Echoes its text."),
        "{echo}"
    );
    assert_eq!(echo["schema"]["properties"]["text"]["type"], "string");
    assert!(
        tool("mcp__demo__late").is_some(),
        "the changed list: {listed:?}"
    );
    assert!(tool("mcp__demo__secret_word").is_none(), "{listed:?}");
    assert!(tool("bash").is_some(), "the agent's own tools too");
    // The secret is in no file of the agent's.
    let dir = chorus.agent_dir("mcpuser");
    let mut stack = vec![dir];
    while let Some(path) = stack.pop() {
        if path.is_dir() {
            stack.extend(
                std::fs::read_dir(&path)?
                    .filter_map(Result::ok)
                    .map(|e| e.path()),
            );
        } else if let Ok(bytes) = std::fs::read(&path) {
            assert!(
                !String::from_utf8_lossy(&bytes).contains(SECRET),
                "{}",
                path.display()
            );
        }
    }

    // A second run: the server is killed while the model thinks; the call is an
    // error step saying so, the status says failed, and the next call restarts it.
    let pids = pids_with(&tag);
    assert_eq!(pids.len(), 1, "one server process: {pids:?}");
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(tool_call(
            "k1",
            "mcp__demo__echo",
            json!({"text": "after kill"}),
        )),
    ));
    model.push(tool_call("k2", "mcp__demo__echo", json!({"text": "again"})));
    model.push(text("recovered"));
    let id = chorus.send_message("mcpuser", "again").await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while model.requests().len() < 3 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the run never called the model"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pids[0]),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    while !pids_with(&tag).is_empty() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the server did not die"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    hold.release();
    let thread = chorus
        .wait_thread_finished("mcpuser", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    // A new run offers it too.
    let offered = model.requests()[2].body["tools"].to_string();
    assert!(offered.contains("mcp__demo__late"), "{offered}");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("MCP server 'demo' stopped"),
        "a clear error: {results:?}"
    );
    assert_eq!(
        results[1],
        (false, "echo: again".to_string()),
        "restarted: {results:?}"
    );
    let steps = step_descriptions(&thread);
    assert!(
        steps
            .iter()
            .any(|(d, failed)| *failed && d.starts_with("Executing mcp__demo__echo")),
        "{steps:?}"
    );
    let _ = wait_state(&chorus, "mcpuser", "demo", "running").await?;
    assert_eq!(pids_with(&tag).len(), 1, "one new process");
    Ok(())
}

/// `chorus-test-mcp http` on `addr` (`127.0.0.1:0`: any port); its address.
async fn http_server(addr: &str) -> anyhow::Result<(tokio::process::Child, String)> {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(bin_path("chorus-test-mcp"))
        .args(["http", addr])
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let stdout = child.stdout.take().unwrap();
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await??
        .unwrap_or_default();
    let bound = line
        .strip_prefix("listening ")
        .unwrap_or_default()
        .to_string();
    anyhow::ensure!(!bound.is_empty(), "the server said {line:?}");
    Ok((child, bound))
}

#[tokio::test]
async fn a_streamable_http_server_is_called_and_a_restarted_server_gets_a_new_session()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    let (mut server, addr) = http_server("127.0.0.1:0").await?;
    chorus
        .create_agent_with(json!({
            "name": "webuser",
            "permissions": profile("web"),
            "mcp_servers": {"web": {
                "url": format!("http://{addr}/mcp"),
                "headers": {"X-Api-Key": {"secret": "DEMO_TOKEN"}},
            }},
        }))
        .await?;
    let run = |reply: Reply| {
        model.push(reply);
        model.push(text("ok"));
    };
    run(tool_calls(&[
        ("h1", "mcp__web__echo", json!({"text": "over http"})),
        ("h0", "mcp__web__header", json!({"name": "x-api-key"})),
    ]));
    let id = chorus.send_message("webuser", "one").await?;
    let thread = chorus
        .wait_thread_finished("webuser", id, Duration::from_secs(60))
        .await?;
    let results = tool_results(&thread);
    assert_eq!(results[0], (false, "echo: over http".into()), "{thread:#}");
    // The header's secret reached the server (and is scrubbed on its way back).
    assert_eq!(results[1], (false, "[redacted]".into()), "{thread:#}");
    let _ = wait_state(&chorus, "webuser", "web", "running").await?;

    // The server goes away: the call fails with a clear error, never a hang.
    server.kill().await?;
    run(tool_call("h2", "mcp__web__echo", json!({"text": "gone"})));
    let id = chorus.send_message("webuser", "two").await?;
    let thread = chorus
        .wait_thread_finished("webuser", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("MCP server 'web'"),
        "{results:?}"
    );
    let failed = wait_state(&chorus, "webuser", "web", "failed").await?;
    assert!(
        failed["error"].as_str().unwrap_or_default().contains("web"),
        "{failed}"
    );

    // Back on the same address, knowing none of the old sessions: a new one is made.
    let (_server, _) = http_server(&addr).await?;
    run(tool_call("h3", "mcp__web__echo", json!({"text": "back"})));
    let id = chorus.send_message("webuser", "three").await?;
    let thread = chorus
        .wait_thread_finished("webuser", id, Duration::from_secs(60))
        .await?;
    assert_eq!(
        tool_results(&thread)[0],
        (false, "echo: back".into()),
        "{thread:#}"
    );
    let _ = wait_state(&chorus, "webuser", "web", "running").await?;
    Ok(())
}

#[tokio::test]
async fn a_server_that_cannot_start_is_a_clear_error_step_and_a_failed_state_with_its_stderr()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    chorus
        .create_agent_with(json!({
            "name": "broken",
            "permissions": profile("bad"),
            "mcp_servers": {"bad": {
                "command": "/bin/sh",
                "args": ["-c", "echo 'bad-config: no such database' >&2; exit 3"],
            }},
        }))
        .await?;
    model.push(tool_call("b1", "mcp__bad__echo", json!({"text": "x"})));
    model.push(text("gave up"));
    let id = chorus.send_message("broken", "try it").await?;
    let thread = chorus
        .wait_thread_finished("broken", id, Duration::from_secs(60))
        .await?;
    assert_eq!(
        thread["status"], "completed",
        "never a hung or failed run: {thread:#}"
    );
    let results = tool_results(&thread);
    assert!(
        results[0].0
            && results[0]
                .1
                .contains("MCP server 'bad' could not be started")
            && results[0].1.contains("bad-config: no such database"),
        "{results:?}"
    );
    // Not offered: it never listed a tool.
    let offered = model.requests()[0].body["tools"].to_string();
    assert!(!offered.contains("mcp__bad__"), "{offered}");
    let failed = wait_state(&chorus, "broken", "bad", "failed").await?;
    assert!(
        failed["error"]
            .as_str()
            .unwrap_or_default()
            .contains("bad-config: no such database"),
        "{failed}"
    );
    Ok(())
}

#[tokio::test]
async fn a_call_past_its_deadline_is_an_error_step_and_the_next_call_starts_the_server_again()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-mcp")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[mcp]\ncall_timeout_secs = 2\n")
        .start()
        .await?;
    let tag = format!("mcp-hang-{}", std::process::id());
    chorus
        .create_agent_with(json!({
            "name": "waiter",
            "permissions": {"allow": ["tool:mcp__slow__.*"]},
            "mcp_servers": {"slow": {
                "command": bin_path("chorus-test-mcp").to_str().unwrap(),
                "args": ["stdio", "--tag", tag],
            }},
        }))
        .await?;
    model.push(tool_call("t1", "mcp__slow__hang", json!({})));
    model.push(tool_call(
        "t2",
        "mcp__slow__echo",
        json!({"text": "still here"}),
    ));
    model.push(text("done"));
    let started = std::time::Instant::now();
    let id = chorus.send_message("waiter", "wait").await?;
    let thread = chorus
        .wait_thread_finished("waiter", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("did not answer within 2 s"),
        "{results:?}"
    );
    assert_eq!(
        results[1],
        (false, "echo: still here".to_string()),
        "{results:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The hung process was ended; one new one serves.
    assert_eq!(pids_with(&tag).len(), 1, "{:?}", pids_with(&tag));
    Ok(())
}

/// A CLI backend sees the same offered set through `chorus-tools mcp`: Claude Code
/// calls the server's tool (as `mcp__chorus__mcp__demo__echo`), the gate decides it
/// under the same action string, and the result reaches the model.
#[tokio::test]
async fn a_cli_backend_calls_an_mcp_server_s_tool_through_chorus_tools() -> anyhow::Result<()> {
    use chorus_test_support::FakeAnthropic;
    let model = FakeAnthropic::start().await;
    let chorus = Chorus::builder()
        .env("ANTHROPIC_BASE_URL", &model.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-mcp-e2e-key")
        .env("CHORUS_DEFAULT_MODEL", "claude-fake")
        .start()
        .await?;
    chorus
        .create_agent_with(json!({
            "name": "clier",
            "backend": "claude-code",
            "permissions": profile("demo"),
            "mcp_servers": {"demo": {
                "command": bin_path("chorus-test-mcp").to_str().unwrap(),
                "args": ["stdio"],
            }},
        }))
        .await?;
    model.push(tool_call(
        "m1",
        "mcp__demo__echo",
        json!({"text": "via cli"}),
    ));
    model.push(text("done"));
    let id = chorus.send_message("clier", "use it").await?;
    let thread = chorus
        .wait_thread_finished("clier", id, Duration::from_secs(120))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        tool_results(&thread)[0],
        (false, "echo: via cli".to_string()),
        "{thread:#}"
    );
    let requests = model.requests();
    assert!(
        requests.iter().any(|r| r.body["tools"]
            .to_string()
            .contains("mcp__chorus__mcp__demo__echo")),
        "offered to the CLI's model"
    );
    assert!(
        requests
            .iter()
            .any(|r| r.body.to_string().contains("echo: via cli")),
        "the result reached the model"
    );
    let entries = audit(&chorus, "clier").await?;
    assert!(
        entries.iter().any(
            |e| e["action"] == r#"tool:mcp__demo__echo:{"text":"via cli"}"#
                && e["decision"] == "allow"
        ),
        "{entries:#?}"
    );
    Ok(())
}
