//! Several threads of one agent at once (seed 001's test list, E3) through the real
//! binaries: they run side by side, a thread waiting for a person holds up no other,
//! and the watchdog ends a run that went quiet without holding up a long command.

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const SLOW: Duration = Duration::from_secs(3);

fn slow(reply: Reply) -> Reply {
    Reply::Delayed(SLOW, Box::new(reply))
}

#[tokio::test]
async fn two_threads_of_one_agent_run_side_by_side() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(slow(text("first done")));
    model.push(slow(text("second done")));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("pair").await?;
    chorus
        .wait_worker_running("pair", Duration::from_secs(20))
        .await?;

    let started = Instant::now();
    let a = chorus.send_message("pair", "first task").await?;
    let b = chorus.send_message("pair", "second task").await?;
    for id in [a, b] {
        let done = chorus
            .wait_thread_finished("pair", id, Duration::from_secs(30))
            .await?;
        assert_eq!(done["status"], "completed", "{done:#}");
    }
    let total = started.elapsed();
    // Each model call takes 3 s: the second was asked while the first was still
    // being answered, and the whole took about the longer, not the sum.
    let mut requests = model.requests();
    assert_eq!(requests.len(), 2);
    // Either call may reach the model first; the second thread's is the one to read.
    requests.sort_by_key(|r| {
        r.body["messages"]
            .as_array()
            .and_then(|m| m.last())
            .is_some_and(|m| m["content"] == "second task")
    });
    let apart = requests[1].at.max(requests[0].at) - requests[1].at.min(requests[0].at);
    assert!(
        apart < SLOW,
        "the second call waited for the first: {apart:?}"
    );
    assert!(total < SLOW * 2, "took {total:?}, the sum of both");
    // The second call knew of the first thread (E5): the other threads' block is
    // in its system prompt.
    let system = requests[1].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        system.contains(&format!("#{a}")) && system.contains("first task"),
        "{system}"
    );
    Ok(())
}

#[tokio::test]
async fn a_thread_waiting_for_permission_holds_up_no_other() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({
            "name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
        }))
        .await?;
    let asking = chorus.send_message("careful", "write the plan").await?;
    chorus
        .wait_thread("careful", asking, Duration::from_secs(20), |t| {
            t["status"] == "waiting_for_permission"
        })
        .await?;

    // Another thread runs to the end while the first one waits.
    model.push(text("the answer is 4"));
    let other = chorus.send_message("careful", "what is 2 + 2?").await?;
    let done = chorus
        .wait_thread_finished("careful", other, Duration::from_secs(20))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(
        chorus.thread("careful", asking).await?["status"],
        "waiting_for_permission"
    );

    // The first one goes on once a person answers.
    let approvals: Vec<Value> = chorus
        .api(Method::GET, "/api/approvals?agent=careful")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    model.push(text("written"));
    let answer = chorus
        .api(
            Method::POST,
            &format!("/api/approvals/{}", approvals[0]["id"].as_str().unwrap()),
        )
        .json(&json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    let done = chorus
        .wait_thread_finished("careful", asking, Duration::from_secs(20))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert!(
        chorus
            .agent_dir("careful")
            .join("workspace/plan.md")
            .exists()
    );
    Ok(())
}

#[tokio::test]
async fn the_watchdog_ends_a_quiet_run_but_not_a_long_command() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[threads]\nstuck_after_secs = 2\n")
        .start()
        .await?;
    chorus
        .create_agent_with(json!({"name": "watched", "permissions": "open"}))
        .await?;

    // A command that runs longer than the limit is work in progress, not stuck.
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": "sleep 4; echo slept"}),
    ));
    model.push(text("slept well"));
    let long = chorus.send_message("watched", "sleep a while").await?;
    let done = chorus
        .wait_thread_finished("watched", long, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");

    // A model call that never answers is: the thread fails with the reason, its
    // history kept.
    model.push(Reply::Silent);
    let started = Instant::now();
    let quiet = chorus.send_message("watched", "think forever").await?;
    let failed = chorus
        .wait_thread_finished("watched", quiet, Duration::from_secs(30))
        .await?;
    assert_eq!(failed["status"], "failed", "{failed:#}");
    assert_eq!(failed["failure_kind"], "limit", "{failed:#}");
    let error = failed["error"].as_str().unwrap();
    assert!(
        error.contains("stuck") && error.contains("stuck_after_secs"),
        "{error}"
    );
    assert_eq!(failed["messages"][0]["content"], "think forever");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "ended after {:?}, not by the watchdog",
        started.elapsed()
    );
    Ok(())
}
