//! Tools granted at run time through the real binaries (SPEC H7): a `locked` agent's
//! `bash` is refused, runs once granted (in the run going, from its next tool call,
//! and offered from its next model call), and is refused again once taken back; a
//! grant above the granter's role is a 403 and audited; unknown tools are a 400.

use std::process::Stdio;
use std::time::Duration;

use chorus_test_support::chorus::{bin_path, tool_results};
use chorus_test_support::fake_model::{Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Hold};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The tool names the model was offered in request `index`.
fn offered(model: &FakeModel, index: usize) -> Vec<String> {
    model.requests()[index].body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn call(
    chorus: &Chorus,
    token: &str,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = reqwest::Client::new()
        .request(method, format!("{}{}", chorus.http_url, path))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30));
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status();
    let body = serde_json::from_slice(&response.bytes().await?).unwrap_or(Value::Null);
    Ok((status, body))
}

async fn audit(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let page: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/audit?limit=200"))
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"].as_array().cloned().unwrap_or_default())
}

/// The terminal client as the API token's user.
async fn client(chorus: &Chorus, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(bin_path("chorus"))
        .args(args)
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chorus")
}

#[tokio::test]
async fn a_granted_tool_runs_from_the_next_call_until_it_is_taken_back() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let (granted, revoked) = (Hold::new(), Hold::new());
    let bash = |id: &str, file: &str| {
        tool_call(
            id,
            "bash",
            json!({"command": format!("echo {id} > {file}")}),
        )
    };
    model.push(bash("c1", "one.txt"));
    // The second call is made while the grant is given, the third while it is taken back.
    // c2 also writes beside the workspace: a grant lifts the gate, not the sandbox.
    let c2 = tool_call(
        "c2",
        "bash",
        json!({"command": "echo c2 > two.txt; echo x > ../escaped.txt"}),
    );
    model.push(Reply::Held(granted.clone(), Box::new(c2)));
    model.push(Reply::Held(
        revoked.clone(),
        Box::new(bash("c3", "three.txt")),
    ));
    model.push(text("done"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "coder", "permissions": "locked"}))
        .await?;
    let workspace = chorus.agent_dir("coder").join("workspace");
    let thread_id = chorus.send_message("coder", "write the files").await?;

    // Request 2 is in flight after c1 was refused: grant bash.
    model.wait_for_requests(2, Duration::from_secs(30)).await;
    let granted_answer = client(&chorus, &["grants", "coder", "add", "bash", "--json"]).await;
    assert!(
        granted_answer.status.success(),
        "{}",
        String::from_utf8_lossy(&granted_answer.stderr)
    );
    let list: Value = serde_json::from_slice(&granted_answer.stdout)?;
    assert_eq!(list["grants"][0]["tool"], "bash", "{list}");
    assert_eq!(list["grants"][0]["granted_by"], "api", "{list}");
    assert!(list["grants"][0]["granted_at"].is_string(), "{list}");
    granted.release();

    // Request 3 is in flight after c2 ran: take bash back.
    model.wait_for_requests(3, Duration::from_secs(30)).await;
    let (status, left) = call(
        &chorus,
        chorus.token(),
        Method::DELETE,
        "/api/agents/coder/grants/bash",
        None,
    )
    .await?;
    assert_eq!(status, 200, "{left}");
    assert_eq!(left["grants"], json!([]));
    revoked.release();

    let thread = chorus
        .wait_thread_finished("coder", thread_id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert_eq!(results.len(), 3, "{results:?}");
    assert!(
        results[0].0
            && results[0]
                .1
                .contains("Permission denied by profile 'locked'"),
        "c1 is refused before the grant: {results:?}"
    );
    assert!(
        !results[1].1.contains("Permission denied by"),
        "c2 runs under the grant: {results:?}"
    );
    assert!(
        results[2].0
            && results[2]
                .1
                .contains("Permission denied by profile 'locked'"),
        "c3 is refused after the revoke: {results:?}"
    );
    assert!(!workspace.join("one.txt").exists());
    assert_eq!(std::fs::read_to_string(workspace.join("two.txt"))?, "c2\n");
    assert!(
        !chorus.agent_dir("coder").join("escaped.txt").exists(),
        "a granted bash still runs in the sandbox: {results:?}"
    );
    assert!(!workspace.join("three.txt").exists());

    // Offered: not before the grant, from the model call after it, not after the revoke.
    assert!(!offered(&model, 0).contains(&"bash".to_string()));
    assert!(!offered(&model, 1).contains(&"bash".to_string()));
    assert!(
        offered(&model, 2).contains(&"bash".to_string()),
        "{:?}",
        offered(&model, 2)
    );
    assert!(!offered(&model, 3).contains(&"bash".to_string()));

    // The audit log: each decision, the grant and the revoke, with who.
    let entries = audit(&chorus, "coder").await?;
    let row = |action: &str| {
        entries
            .iter()
            .find(|e| e["action"].as_str().unwrap_or("").starts_with(action))
            .unwrap_or_else(|| panic!("no {action} row in {entries:#?}"))
            .clone()
    };
    assert_eq!(row("tool:bash:echo c1")["decision"], "deny");
    let by_grant = row("tool:bash:echo c2");
    assert_eq!(by_grant["decision"], "allow");
    assert!(
        by_grant["detail"].as_str().unwrap().contains("granted"),
        "{by_grant}"
    );
    assert_eq!(row("tool:bash:echo c3")["decision"], "deny");
    assert_eq!(row("agent:grant:bash")["user_id"], "api");
    assert_eq!(row("agent:grant:bash")["decision"], "done");
    assert_eq!(row("agent:revoke:bash")["decision"], "done");
    Ok(())
}

#[tokio::test]
async fn grants_stay_within_the_granters_role_and_name_known_tools() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[roles]\nolga = \"operator\"\n")
        .start()
        .await?;
    chorus
        .create_agent_with(json!({"name": "coder", "permissions": "locked"}))
        .await?;
    let issued: Value = chorus
        .api(Method::POST, "/api/users/olga/tokens")
        .json(&json!({"label": "laptop"}))
        .send()
        .await?
        .json()
        .await?;
    let olga = issued["token"].as_str().unwrap().to_string();
    let path = "/api/agents/coder/grants";

    // An operator may not grant bash: every call unasked is what `open` gives.
    let (status, refused) = call(
        &chorus,
        &olga,
        Method::POST,
        path,
        Some(json!({"tools": ["job_output", "bash"]})),
    )
    .await?;
    assert_eq!(status, 403, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("may not grant bash") && message.contains("needs the role admin"),
        "{message}"
    );
    let (_, list) = call(&chorus, &olga, Method::GET, path, None).await?;
    assert_eq!(
        list["grants"],
        json!([]),
        "a refused request grants nothing"
    );
    let entries = audit(&chorus, "coder").await?;
    let row = entries
        .iter()
        .find(|e| e["action"] == "agent:grant:bash")
        .expect("the refused grant is audited");
    assert_eq!(row["decision"], "deny", "{row}");
    assert_eq!(row["user_id"], "olga", "{row}");
    assert!(
        row["detail"]
            .as_str()
            .unwrap()
            .contains("needs the role admin"),
        "{row}"
    );

    // Positive control: what an operator may grant (what `standard` allows unasked),
    // by its older name, stored under its Chorus name.
    let (status, list) = call(
        &chorus,
        &olga,
        Method::POST,
        path,
        Some(json!({"tools": ["task_output"]})),
    )
    .await?;
    assert_eq!(status, 201, "{list}");
    assert_eq!(list["grants"][0]["tool"], "job_output", "{list}");
    assert_eq!(list["grants"][0]["granted_by"], "olga", "{list}");
    // An admin grants bash by its wire name too (file_write → file.write).
    let (status, list) = call(
        &chorus,
        chorus.token(),
        Method::POST,
        path,
        Some(json!({"tools": ["bash", "file_write"]})),
    )
    .await?;
    assert_eq!(status, 201, "{list}");
    let tools: Vec<&str> = list["grants"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["tool"].as_str().unwrap())
        .collect();
    assert_eq!(tools.len(), 3, "{list}");
    for tool in ["job_output", "bash", "file.write"] {
        assert!(tools.contains(&tool), "{tools:?}");
    }
    // The agent's tool list shows them allowed.
    let shown: Value = chorus
        .api(Method::GET, "/api/agents/coder/tools")
        .send()
        .await?
        .json()
        .await?;
    let bash = shown["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "bash")
        .expect("bash is listed once granted");
    assert_eq!(bash["decision"], "allow", "{bash}");

    // Unknown tools are a 400 naming the tools there are; nothing is granted.
    let (status, unknown) = call(
        &chorus,
        chorus.token(),
        Method::POST,
        path,
        Some(json!({"tools": ["view", "rocket"]})),
    )
    .await?;
    assert_eq!(status, 400, "{unknown}");
    let message = unknown["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("no tool named 'rocket'") && message.contains("bash"),
        "{message}"
    );
    let (status, _) = call(
        &chorus,
        chorus.token(),
        Method::POST,
        path,
        Some(json!({"tools": []})),
    )
    .await?;
    assert_eq!(status, 400);
    // Taking back what was never granted is a 404; an unknown agent too.
    let (status, _) = call(
        &chorus,
        chorus.token(),
        Method::DELETE,
        "/api/agents/coder/grants/view",
        None,
    )
    .await?;
    assert_eq!(status, 404);
    let (status, _) = call(
        &chorus,
        chorus.token(),
        Method::GET,
        "/api/agents/ghost/grants",
        None,
    )
    .await?;
    assert_eq!(status, 404);

    // The terminal client lists them and takes several back.
    let shown = client(&chorus, &["grants", "coder"]).await;
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success() && text.contains("file.write") && text.contains("olga"),
        "{text}"
    );
    let removed = client(
        &chorus,
        &["grants", "coder", "rm", "bash", "file_write", "job_output"],
    )
    .await;
    let text = String::from_utf8_lossy(&removed.stdout);
    assert!(
        removed.status.success(),
        "{}",
        String::from_utf8_lossy(&removed.stderr)
    );
    assert!(text.contains("No tools are granted to coder"), "{text}");
    let again = client(&chorus, &["grants", "coder", "rm", "bash"]).await;
    assert!(!again.status.success());
    assert!(
        String::from_utf8_lossy(&again.stderr).contains("bash is not granted"),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    Ok(())
}
