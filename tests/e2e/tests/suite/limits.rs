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

    // 40 MB of text in one reply: past the bound on one reply (16 MiB), which the
    // worker enforces while reading, well before the link's 32 MiB.
    model.push(text(
        &"All work and no play. ".repeat(40 * 1024 * 1024 / 22),
    ));
    let big = chorus.send_message("wordy", "say a lot").await?;
    let thread = chorus
        .wait_thread_finished("wordy", big, Duration::from_secs(90))
        .await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    assert_eq!(thread["failure_kind"], "limit", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    eprintln!("the user reads: {error}");
    assert!(
        error.contains("exceeded 16 MiB"),
        "the error names the bound: {error}"
    );
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

/// Reads a thread page by page from `first`, following `next`; returns the pages.
async fn read_pages(chorus: &Chorus, first: &str) -> anyhow::Result<Vec<Value>> {
    let mut pages = Vec::new();
    let mut url = Some(first.to_string());
    while let Some(path) = url {
        let page: Value = chorus
            .api(reqwest::Method::GET, &path)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        url = page["next"].as_str().map(str::to_string);
        pages.push(page);
        anyhow::ensure!(pages.len() < 100, "paging does not end");
    }
    Ok(pages)
}

fn joined(pages: &[Value], list: &str) -> Vec<Value> {
    pages
        .iter()
        .flat_map(|p| p[list].as_array().cloned().unwrap_or_default())
        .collect()
}

#[tokio::test]
async fn a_long_thread_is_read_in_pages_that_join_up_without_gaps_or_repeats() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    // Three turns of 60 tool calls each, then an answer: 185 messages, 184 steps.
    for turn in 0..3 {
        let calls: Vec<(String, Value)> = (0..60)
            .map(|i| {
                (
                    format!("c{turn}_{i}"),
                    json!({"path": format!("missing-{turn}-{i}.txt")}),
                )
            })
            .collect();
        let calls: Vec<(&str, &str, Value)> = calls
            .iter()
            .map(|(id, args)| (id.as_str(), "view", args.clone()))
            .collect();
        model.push(chorus_test_support::fake_model::tool_calls(&calls));
    }
    model.push(text("looked everywhere"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("pager").await?;
    let id = chorus.send_message("pager", "look for the files").await?;
    let thread = chorus
        .wait_thread_finished("pager", id, Duration::from_secs(120))
        .await?;
    assert_eq!(thread["status"], "completed", "{}", thread["error"]);

    // The default page: 100 of each, and where to go on.
    assert_eq!(thread["messages"].as_array().map(Vec::len), Some(100));
    assert_eq!(thread["steps"].as_array().map(Vec::len), Some(100));
    assert!(
        thread["next"]
            .as_str()
            .is_some_and(|n| n.contains("limit=100")),
        "{}",
        thread["next"]
    );

    // Everything at once (the largest page) is the reference.
    let base = format!("/api/agents/pager/threads/{id}");
    let all = read_pages(&chorus, &format!("{base}?limit=1000")).await?;
    assert_eq!(all.len(), 1);
    assert_eq!(all[0]["next"], Value::Null);
    let messages = joined(&all, "messages");
    let steps = joined(&all, "steps");
    assert_eq!((messages.len(), steps.len()), (185, 184));

    // Pages of 50 join up to the same lists: nothing missing, nothing twice.
    let pages = read_pages(&chorus, &format!("{base}?limit=50")).await?;
    let sizes: Vec<(usize, usize)> = pages
        .iter()
        .map(|p| {
            (
                p["messages"].as_array().map_or(0, Vec::len),
                p["steps"].as_array().map_or(0, Vec::len),
            )
        })
        .collect();
    eprintln!("pages of 50 (messages, steps): {sizes:?}");
    assert_eq!(sizes, vec![(50, 50), (50, 50), (50, 50), (35, 34)]);
    assert_eq!(joined(&pages, "messages"), messages);
    assert_eq!(joined(&pages, "steps"), steps);
    let numbers: Vec<u64> = steps.iter().filter_map(|s| s["number"].as_u64()).collect();
    assert_eq!(numbers, (1..=184).collect::<Vec<_>>());

    // A bad limit or cursor is a 400 that says what is allowed.
    for bad in ["limit=0", "limit=5000", "limit=many", "after=banana"] {
        let response = chorus
            .api(reqwest::Method::GET, &format!("{base}?{bad}"))
            .send()
            .await?;
        assert_eq!(response.status(), 400, "{bad}");
        let body: Value = response.json().await?;
        let message = body["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        eprintln!("{bad}: {message}");
        assert!(
            message.contains("from 1 to 1000") || message.contains("cursor from a page's `next`"),
            "{bad}: {body}"
        );
    }
    Ok(())
}
