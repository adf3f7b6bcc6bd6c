//! What `chorus serve` prints tells the truth: a clean start and stop with nothing
//! configured, and the expected events of a kill, print no WARN or ERROR line.

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi, process};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::json;

/// The lines of `output` at WARN or ERROR (chorus's and its workers' logs).
fn loud(output: &str) -> Vec<&str> {
    output
        .lines()
        .filter(|line| line.contains(" WARN ") || line.contains(" ERROR "))
        .collect()
}

/// Waits until `output` holds `line` (the process may still be writing it).
async fn wait_for(output: &std::sync::Arc<std::sync::Mutex<String>>, line: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let text = output
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if text.contains(line) || Instant::now() > deadline {
            return text;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_clean_start_and_ctrl_c_with_nothing_configured_warn_of_nothing() -> anyhow::Result<()> {
    // No provider, no Discord: Ollama and LM Studio are probed at their defaults,
    // where nothing runs.
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("idle").await?;
    let worker = chorus
        .wait_worker_running("idle", Duration::from_secs(15))
        .await?;
    let output = chorus.output_handle();
    let said = wait_for(&output, "model catalogue refreshed").await;
    // Still shown, in one quiet line each.
    assert!(
        said.contains("ollama      not running at http://127.0.0.1:11434"),
        "{said}"
    );
    // Ctrl-C in its terminal (workers lead process groups of their own, so it
    // reaches chorus alone); chorus stops the workers, which close their links.
    let status = chorus.stop_with(Signal::SIGINT).await?;
    assert!(status.success(), "{status}");
    assert!(process::wait_gone(worker, Duration::from_secs(10)).await);
    let said = wait_for(&output, "chorus stopped").await;
    assert!(said.contains("chorus stopped"), "{said}");
    assert_eq!(loud(&said), Vec::<&str>::new(), "{said}");
    Ok(())
}

#[tokio::test]
async fn killing_a_thread_prints_no_warning() -> anyhow::Result<()> {
    let marker = format!("600.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}")}),
    ));
    model.set_fallback(|_| text("done"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "busy", "permissions": "open"}))
        .await?;
    let id = chorus.send_message("busy", "wait").await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while process::with_marker(&marker).is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    chorus
        .api(Method::DELETE, &format!("/api/agents/busy/threads/{id}"))
        .send()
        .await?
        .error_for_status()?;
    let output = chorus.output_handle();
    let said = wait_for(&output, "run cancelled").await;
    assert!(said.contains("run cancelled"), "{said}");
    // The worker's last events of the killed run come before the next run's on its
    // one stream: once another thread completes, they have all been handled.
    let next = chorus.send_message("busy", "and now?").await?;
    let done = chorus
        .wait_thread_finished("busy", next, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    chorus.stop().await?;
    let said = wait_for(&output, "chorus stopped").await;
    assert_eq!(loud(&said), Vec::<&str>::new(), "{said}");
    Ok(())
}
