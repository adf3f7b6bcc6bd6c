//! The store under concurrency and faults, through the real binary: parallel writers
//! wait instead of failing, a full disk is a clear error that goes away when space
//! comes back, destroy and create survive a failure at each step, and what chorus
//! creates in its data directory is private.

use std::time::Duration;

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const AGENTS: usize = 16;
const MESSAGES_PER_AGENT: usize = 2;

/// Many creates and messages at once: every request succeeds (a busy database waits,
/// it never answers 500 "database is locked") and every agent ends up active.
#[tokio::test]
async fn parallel_creates_and_messages_never_fail_with_a_locked_database() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    for i in 0..AGENTS * MESSAGES_PER_AGENT {
        model.push(text(&format!("answer {i}")));
    }
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    let chorus = std::sync::Arc::new(chorus);

    // All creates at once.
    let creates: Vec<_> = (0..AGENTS)
        .map(|i| {
            let chorus = chorus.clone();
            tokio::spawn(async move {
                let response = chorus
                    .api(Method::POST, "/api/agents")
                    .json(&json!({ "name": format!("crowd-{i}") }))
                    .send()
                    .await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await?;
                anyhow::Ok((status, body))
            })
        })
        .collect();
    let mut failures = Vec::new();
    for create in creates {
        let (status, body) = create.await??;
        if status != 201 {
            failures.push(format!("create: {status} {body}"));
        }
    }

    // Then every agent's messages at once, while the workers also write steps.
    let sends: Vec<_> = (0..AGENTS * MESSAGES_PER_AGENT)
        .map(|i| {
            let chorus = chorus.clone();
            tokio::spawn(async move {
                let agent = format!("crowd-{}", i % AGENTS);
                let response = chorus
                    .api(Method::POST, &format!("/api/agents/{agent}/messages"))
                    .json(&json!({ "content": format!("message {i}") }))
                    .send()
                    .await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await?;
                anyhow::Ok((agent, status, body))
            })
        })
        .collect();
    let mut threads = Vec::new();
    for send in sends {
        let (agent, status, body) = send.await??;
        match body["thread_id"].as_u64() {
            Some(id) if status == 202 => threads.push((agent, id)),
            _ => failures.push(format!("message to {agent}: {status} {body}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} requests failed:\n{}",
        failures.len(),
        AGENTS + AGENTS * MESSAGES_PER_AGENT,
        failures.join("\n")
    );

    let listed: Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let active = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "active")
        .count();
    assert_eq!(active, AGENTS, "{listed:#}");
    for (agent, id) in &threads {
        let thread = chorus
            .wait_thread_finished(agent, *id, Duration::from_secs(60))
            .await?;
        assert_eq!(thread["status"], "completed", "{thread:#}");
    }
    assert!(
        !chorus.output().contains("database is locked"),
        "the log mentions a locked database"
    );
    Ok(())
}
