//! A message through the whole system: HTTP → control plane → worker process →
//! model (fake) → tool in the workspace → steps and messages back.

use std::time::Duration;

use chorus_test_support::fake_model::{text, tool_call, tool_calls};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, process};
use serde_json::{Value, json};

const KEY: &str = "sk-test-provider-secret";

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

#[tokio::test]
async fn a_message_runs_the_tool_loop_in_its_own_worker_process() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "call_1",
        "create_file",
        json!({"path": "notes/hello.txt", "content": "Hello from the worker\n"}),
    ));
    model.push(text("I created notes/hello.txt."));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("builder").await?;
    let worker_pid = chorus
        .wait_worker_running("builder", Duration::from_secs(15))
        .await?;
    assert_ne!(
        worker_pid,
        chorus.pid(),
        "the agent must run in its own process"
    );

    let id = chorus
        .send_message("builder", "Please create notes/hello.txt")
        .await?;
    let thread = chorus
        .wait_thread_finished("builder", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    // The file is in the agent's workspace.
    let file = chorus
        .agent_dir("builder")
        .join("workspace/notes/hello.txt");
    assert_eq!(std::fs::read_to_string(&file)?, "Hello from the worker\n");

    // Steps: LLM call, the tool, LLM call — in order, each timed.
    let steps = thread["steps"].as_array().unwrap();
    let described: Vec<(u64, &str, &str)> = steps
        .iter()
        .map(|s| {
            (
                s["number"].as_u64().unwrap(),
                s["kind"].as_str().unwrap(),
                s["description"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        described,
        vec![
            (1, "llm_call", "Calling LLM (fake-model)"),
            (2, "tool", "Executing create_file: notes/hello.txt"),
            (3, "llm_call", "Calling LLM (fake-model)"),
        ]
    );
    for step in steps {
        assert!(
            step["duration_ms"].is_u64(),
            "step without duration: {step}"
        );
        assert!(step["ended_at"].is_string(), "step not ended: {step}");
        assert_eq!(step["failed"], false);
    }
    assert_eq!(
        steps[0]["usage"],
        json!({"input_tokens": 20, "output_tokens": 10})
    );

    // Messages: user, assistant asking for the tool, the tool's result, the answer.
    let messages = thread["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "assistant"]);
    assert_eq!(messages[1]["tool_calls"][0]["name"], "create_file");
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    assert_eq!(messages[2]["content"], "Created notes/hello.txt (22 bytes)");
    assert_eq!(messages[3]["content"], "I created notes/hello.txt.");

    // What reached the model: the system prompt first, the tool result paired with
    // its call in the second request, and the provider key added by the relay.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let first = &requests[0].body;
    assert_eq!(first["model"], "fake-model");
    assert_eq!(first["messages"][0]["role"], "system");
    assert_eq!(
        first["messages"][1],
        json!({"role": "user", "content": "Please create notes/hello.txt"})
    );
    let tool_names: Vec<&str> = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for expected in [
        "create_file",
        "view",
        "str_replace",
        "bash",
        // Offered under names the APIs accept; the model calls `file_search`.
        "file_search",
        "self_edit_docs",
    ] {
        assert!(
            tool_names.contains(&expected),
            "{expected} not offered: {tool_names:?}"
        );
    }
    let second: &Vec<Value> = requests[1].body["messages"].as_array().unwrap();
    let tool_result = second
        .iter()
        .find(|m| m["role"] == "tool")
        .expect("tool result sent");
    assert_eq!(tool_result["tool_call_id"], "call_1");
    assert_eq!(tool_result["content"], "Created notes/hello.txt (22 bytes)");
    for request in &requests {
        assert_eq!(request.headers["authorization"], format!("Bearer {KEY}"));
    }

    // The provider key never reached the worker process.
    let environment = process::environ(worker_pid).join("\n");
    assert!(
        !environment.contains(KEY),
        "worker environment holds the provider key"
    );
    assert!(
        !environment.contains("OPENAI"),
        "worker environment: {environment}"
    );
    Ok(())
}

#[tokio::test]
async fn without_a_provider_a_message_fails_its_thread_with_a_clear_reason() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("lonely").await?;
    let id = chorus.send_message("lonely", "hello?").await?;
    let thread = chorus
        .wait_thread_finished("lonely", id, Duration::from_secs(10))
        .await?;
    assert_eq!(thread["status"], "failed");
    assert_eq!(thread["failure_kind"], "config", "{thread:#}");
    let error = thread["error"].as_str().unwrap();
    assert!(error.contains("no model provider configured"), "{error}");
    assert!(error.contains("OPENAI_API_KEY"), "{error}");
    // The control plane is still fine.
    assert_eq!(chorus.agent("lonely").await?["status"], "active");
    Ok(())
}

#[tokio::test]
async fn paths_that_leave_the_workspace_are_refused_and_the_model_is_told() -> anyhow::Result<()> {
    let outside = tempfile::tempdir()?;
    let model = FakeOpenAi::start().await;
    let absolute = outside.path().join("absolute.txt");
    model.push(tool_calls(&[
        (
            "c1",
            "create_file",
            json!({"path": "../escape.txt", "content": "x"}),
        ),
        (
            "c2",
            "create_file",
            json!({"path": absolute.to_str().unwrap(), "content": "x"}),
        ),
        (
            "c3",
            "create_file",
            json!({"path": "link/through.txt", "content": "x"}),
        ),
        ("c4", "view", json!({"path": "link-to-file"})),
        (
            "c5",
            "create_file",
            json!({"path": "link-to-file", "content": "x"}),
        ),
    ]));
    model.push(text("Understood, I stay inside."));
    let chorus = chorus_with(&model).await?;
    // The `open` profile lets every call through, so what refuses them is the jail
    // itself (under `standard`, the profile would refuse `..` and absolute paths first).
    let created = chorus
        .api(reqwest::Method::POST, "/api/agents")
        .json(&json!({"name": "jailed", "permissions": "open"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let workspace = chorus.agent_dir("jailed").join("workspace");
    std::fs::write(outside.path().join("secret.txt"), "secret")?;
    std::os::unix::fs::symlink(outside.path(), workspace.join("link"))?;
    std::os::unix::fs::symlink(
        outside.path().join("secret.txt"),
        workspace.join("link-to-file"),
    )?;

    let id = chorus.send_message("jailed", "try to escape").await?;
    let thread = chorus
        .wait_thread_finished("jailed", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    let results: Vec<(String, String)> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            assert_eq!(m["is_error"], true, "not refused: {m}");
            (
                m["tool_call_id"].as_str().unwrap().to_string(),
                m["content"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(results.len(), 5);
    assert!(results[0].1.contains("leaves the workspace"), "{results:?}");
    assert!(results[1].1.contains("absolute path"), "{results:?}");
    assert!(results[2].1.contains("symlink"), "{results:?}");
    assert!(
        results[3].1.contains("outside the workspace"),
        "{results:?}"
    );
    assert!(results[4].1.contains("symlink"), "{results:?}");

    // Nothing was written outside, and the secret was not read or changed.
    assert!(!chorus.agent_dir("jailed").join("escape.txt").exists());
    assert!(!absolute.exists());
    assert!(!outside.path().join("through.txt").exists());
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret.txt"))?,
        "secret"
    );
    let second = &model.requests()[1].body;
    let sent = second["messages"].to_string();
    assert!(!sent.contains("secret\""), "the secret reached the model");
    assert!(
        sent.contains("leaves the workspace"),
        "the model was not told"
    );
    Ok(())
}
