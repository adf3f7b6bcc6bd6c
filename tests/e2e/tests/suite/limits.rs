//! Bounds on what crosses the worker link: a big message fails or trims only its own
//! run, never the connection that carries the agent's other runs.

use std::time::Duration;

use chorus_test_support::fake_model::{Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Hold};
use serde_json::{Value, json};

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

/// Starts a thread whose model call is held, so it is in flight while `big` runs;
/// returns its id and the hold.
async fn thread_in_flight(
    chorus: &Chorus,
    model: &FakeModel,
    agent: &str,
) -> anyhow::Result<(u64, Hold)> {
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(text("the quiet thread is done")),
    ));
    let id = chorus.send_message(agent, "take your time").await?;
    model.wait_for_requests(1, Duration::from_secs(15)).await;
    Ok((id, hold))
}

fn assert_quiet_thread_completed(thread: &Value) {
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let last = thread["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned();
    assert_eq!(
        last.as_ref().map(|m| &m["content"]),
        Some(&json!("the quiet thread is done"))
    );
}

#[tokio::test]
async fn a_5_mb_create_file_does_not_cut_the_link_of_the_agents_other_thread() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("bulky").await?;
    let pid = chorus
        .wait_worker_running("bulky", Duration::from_secs(15))
        .await?;
    let (quiet, hold) = thread_in_flight(&chorus, &model, "bulky").await?;

    // 5 MB of content: more than gRPC's default 4 MiB message, less than the
    // file tools' 10 MB write limit.
    let content = "0123456789abcdef\n".repeat(5 * 1024 * 1024 / 17 + 1);
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "big.txt", "content": content}),
    ));
    model.push(text("wrote it"));
    let big = chorus.send_message("bulky", "write a big file").await?;
    let thread = chorus
        .wait_thread_finished("bulky", big, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{}", thread["error"]);
    assert_eq!(
        std::fs::metadata(chorus.agent_dir("bulky").join("workspace/big.txt"))?.len(),
        content.len() as u64
    );

    hold.release();
    let thread = chorus
        .wait_thread_finished("bulky", quiet, Duration::from_secs(30))
        .await?;
    assert_quiet_thread_completed(&thread);
    let agent = chorus.agent("bulky").await?;
    assert_eq!(
        agent["worker"]["pid"], pid,
        "the worker was not restarted: {agent:#}"
    );
    assert_eq!(agent["worker"]["restarts"], 0, "{agent:#}");
    Ok(())
}

#[tokio::test]
async fn a_reply_over_the_link_limit_fails_only_its_own_run() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("wordy").await?;
    let pid = chorus
        .wait_worker_running("wordy", Duration::from_secs(15))
        .await?;
    let (quiet, hold) = thread_in_flight(&chorus, &model, "wordy").await?;

    // 40 MB of text in one reply: more than the link carries (32 MiB).
    model.push(text(
        &"All work and no play. ".repeat(40 * 1024 * 1024 / 22),
    ));
    let big = chorus.send_message("wordy", "say a lot").await?;
    let thread = chorus
        .wait_thread_finished("wordy", big, Duration::from_secs(90))
        .await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    eprintln!("the user reads: {error}");
    assert!(error.contains("MiB"), "the error names the bound: {error}");
    assert!(
        !error.contains("interrupted"),
        "only its own run failed: {error}"
    );

    hold.release();
    let thread = chorus
        .wait_thread_finished("wordy", quiet, Duration::from_secs(30))
        .await?;
    assert_quiet_thread_completed(&thread);
    let agent = chorus.agent("wordy").await?;
    assert_eq!(
        agent["worker"]["pid"], pid,
        "the worker was not restarted: {agent:#}"
    );
    assert_eq!(agent["worker"]["restarts"], 0, "{agent:#}");
    Ok(())
}
