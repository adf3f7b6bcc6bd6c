//! Killing threads (E4) through the real binaries: a running command ends with its
//! whole process group, a question waiting for a person is withdrawn, the history so
//! far is kept, and the thread says `killed`.

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::tool_call;
use chorus_test_support::{Chorus, FakeOpenAi, process};
use reqwest::Method;
use serde_json::{Value, json};

async fn create(chorus: &Chorus, name: &str, permissions: Value) -> anyhow::Result<()> {
    chorus
        .create_agent_with(json!({"name": name, "permissions": permissions}))
        .await?;
    Ok(())
}

async fn pending(chorus: &Chorus) -> anyhow::Result<Value> {
    Ok(chorus
        .api(Method::GET, "/api/approvals")
        .send()
        .await?
        .json()
        .await?)
}

async fn wait_until<F: Fn() -> bool>(
    what: &str,
    timeout: Duration,
    ready: F,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    while !ready() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test]
async fn killing_a_thread_ends_its_command_and_keeps_its_history() -> anyhow::Result<()> {
    let marker = format!("600.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sh -c 'sleep {marker} & sleep {marker}'")}),
    ));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    create(&chorus, "busy", json!("open")).await?;
    let id = chorus.send_message("busy", "wait a long time").await?;
    wait_until("the command never started", Duration::from_secs(20), || {
        !process::with_marker(&marker).is_empty()
    })
    .await?;
    // The steps are in the database while the thread runs: the model call ended,
    // the command started and not yet ended.
    // (The command can start a moment before the control plane has stored the
    // worker's report of it: wait for the row, with a deadline.)
    let query = format!(
        "SELECT step_number, kind, ended_at IS NOT NULL FROM thread_steps \
         WHERE agent_name = 'busy' AND thread_id = {id} ORDER BY step_number"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut steps = chorus.query_store(&query).await?;
    while steps != "1|llm_call|1\n2|tool|0\n" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        steps = chorus.query_store(&query).await?;
    }
    assert_eq!(steps, "1|llm_call|1\n2|tool|0\n");

    let started = Instant::now();
    let response = chorus
        .api(Method::DELETE, &format!("/api/agents/busy/threads/{id}"))
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await?;
    assert_eq!(body["status"], "killed");
    wait_until(
        "the command outlived its thread",
        Duration::from_secs(10),
        || process::with_marker(&marker).is_empty(),
    )
    .await?;
    let gone = started.elapsed();
    let thread = chorus.thread("busy", id).await?;
    eprintln!(
        "killed: thread {}, processes gone after {gone:?}",
        thread["status"]
    );
    assert_eq!(thread["status"], "killed", "{thread:#}");
    assert_eq!(thread["failure_kind"], "killed");
    assert_eq!(thread["error"], "killed by api");
    // The history so far is kept: the request and the call that was running.
    let messages = thread["messages"].as_array().unwrap();
    assert_eq!(
        messages[1]["tool_calls"][0]["name"], "bash",
        "{messages:#?}"
    );

    // Killing it again changes nothing.
    let again = chorus
        .api(Method::DELETE, &format!("/api/agents/busy/threads/{id}"))
        .send()
        .await?;
    assert_eq!(again.status(), 409);
    let missing = chorus
        .api(Method::DELETE, "/api/agents/busy/threads/99")
        .send()
        .await?;
    assert_eq!(missing.status(), 404);
    // The worker goes on: it was not restarted, and the model was asked nothing more
    // (the strict fake fails this test at drop otherwise).
    assert_eq!(chorus.agent("busy").await?["worker"]["restarts"], 0);
    Ok(())
}

#[tokio::test]
async fn killing_all_withdraws_a_question_waiting_for_a_person() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "x"}),
    ));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    create(
        &chorus,
        "asker",
        json!({"allow": [], "ask": ["tool:create_file:.*"]}),
    )
    .await?;
    let id = chorus.send_message("asker", "write the plan").await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let pending = pending(&chorus).await?;
        if pending.as_array().is_some_and(|a| !a.is_empty()) {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no question asked: {pending:#}"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    let response = chorus
        .api(Method::DELETE, "/api/agents/asker/threads")
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await?;
    assert_eq!(body["killed"], json!([id]));
    let thread = chorus.thread("asker", id).await?;
    assert_eq!(thread["status"], "killed", "{thread:#}");
    assert_eq!(
        pending(&chorus).await?,
        json!([]),
        "the question is withdrawn"
    );
    assert!(!chorus.agent_dir("asker").join("workspace/plan.md").exists());
    // Nothing left to kill.
    let body: Value = chorus
        .api(Method::DELETE, "/api/agents/asker/threads")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(body["killed"], json!([]));
    Ok(())
}

/// A running thread's own route shows how far it got, as the list does: one
/// function computes both (`Store::threads_progress`).
#[tokio::test]
async fn a_running_thread_shows_its_progress_on_its_own_route() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    // The command waits for a file the test writes: the thread is held at its tool
    // step for as long as the test looks.
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": "while [ ! -e go ]; do sleep 0.05; done; echo went"}),
    ));
    model.push(chorus_test_support::fake_model::text("done"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    create(&chorus, "stepper", json!("open")).await?;
    let id = chorus.send_message("stepper", "wait for go").await?;
    let running = chorus
        .wait_thread("stepper", id, Duration::from_secs(30), |t| {
            t["current_step"]
                .as_str()
                .is_some_and(|s| s.contains("while [ ! -e go ]"))
        })
        .await?;
    assert_eq!(running["status"], "running", "{running:#}");
    // Step 1 was the model call; the command is step 2.
    assert_eq!(running["step_number"], 2, "{running:#}");
    // The list says the same of the same thread.
    let list: Value = chorus
        .api(Method::GET, "/api/agents/stepper/threads")
        .send()
        .await?
        .json()
        .await?;
    let listed = list
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == id)
        .cloned()
        .unwrap_or_default();
    assert_eq!(listed["step_number"], running["step_number"], "{list:#}");
    assert_eq!(listed["current_step"], running["current_step"], "{list:#}");

    std::fs::write(chorus.agent_dir("stepper").join("workspace/go"), "")?;
    let done = chorus
        .wait_thread_finished("stepper", id, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    // The final model call is step 3; an ended thread is doing nothing.
    assert_eq!(done["step_number"], 3, "{done:#}");
    assert!(done["current_step"].is_null(), "{done:#}");
    Ok(())
}
