//! The web page's chat, in a real Chromium: a message sent from the page, the
//! model's text streaming in and the steps; approvals answered in the thread; a
//! reload in the middle of a run that loses and repeats nothing; a long history
//! drawn a window at a time.

use std::time::Duration;

use chorus_test_support::browser::Browser;
use chorus_test_support::fake_model::{Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Hold};
use reqwest::Method;
use serde_json::{Value, json};

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-web-chat")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

fn origin(chorus: &Chorus) -> String {
    chorus.http_url.trim_end_matches('/').to_string()
}

/// How many elements `css` selects in the page.
async fn count(browser: &Browser, css: &str) -> anyhow::Result<u64> {
    let n = browser
        .execute(
            "return document.querySelectorAll(arguments[0]).length;",
            vec![json!(css)],
        )
        .await?;
    Ok(n.as_u64().unwrap_or_default())
}

/// The text of what `css` selects (all of it, joined), as the page has it.
async fn text_of(browser: &Browser, css: &str) -> anyhow::Result<String> {
    let text = browser
        .execute(
            "return [...document.querySelectorAll(arguments[0])].map(e => e.textContent).join('|');",
            vec![json!(css)],
        )
        .await?;
    Ok(text.as_str().unwrap_or_default().to_string())
}

/// The thread the page shows (from its address), once it shows one.
async fn shown_thread(browser: &Browser, agent: &str) -> anyhow::Result<u64> {
    browser
        .wait_for(&format!(
            "/^#chat\\/{agent}\\/\\d+$/.test(location.hash) && document.querySelector('#chat-thread-status').textContent !== ''"
        ))
        .await?;
    let hash = browser
        .execute("return location.hash;", vec![])
        .await?
        .as_str()
        .unwrap_or_default()
        .to_string();
    Ok(hash.rsplit('/').next().unwrap_or_default().parse()?)
}

async fn send_from_page(browser: &Browser, content: &str) -> anyhow::Result<()> {
    browser
        .find("#chat-input")
        .await?
        .type_text(content)
        .await?;
    browser.find("#chat-send").await?.click().await?;
    Ok(())
}

/// Every address the page requested is of this Chorus.
async fn only_this_origin(browser: &Browser, origin: &str) -> anyhow::Result<()> {
    let requested = browser.requested().await?;
    assert!(!requested.is_empty());
    for url in &requested {
        assert!(
            url.starts_with(&format!("{origin}/")),
            "{url} is not of {origin}"
        );
    }
    Ok(())
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

/// Reloads the page (the address keeps the view) and waits for the new one's shell.
async fn reload(browser: &Browser) -> anyhow::Result<()> {
    browser
        .execute("window.before_reload = true; location.reload();", vec![])
        .await?;
    browser
        .wait_for("!window.before_reload && document.getElementById('who-name').textContent !== ''")
        .await
}

/// A JS string literal of `s`.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

#[tokio::test]
async fn web_chat_sends_a_message_and_streams_the_answer_and_its_steps() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    // The answer comes in three pieces, seconds apart: the page shows the first
    // alone before the rest arrives.
    let answer = "Alpha beta gamma delta epsilon zeta";
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text(answer))));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("scout").await?;
    let origin = origin(&chorus);
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/scout")).await?;
    browser
        .wait_for("document.querySelector('#chat-agent').value === 'scout'")
        .await?;
    // The answer streams in pieces seconds apart (from the request on).
    model.set_chunk_pause(Duration::from_secs(4));
    let target = browser.find("#chat-target").await?.text().await?;
    assert!(target.contains("A new message to scout"), "{target}");

    send_from_page(&browser, "Say hello").await?;
    let id = shown_thread(&browser, "scout").await?;
    // The sent message shows, and the model step runs while the model is held.
    browser
        .wait_for("[...document.querySelectorAll('.chat-user .chat-text')].some(e => e.textContent === 'Say hello')")
        .await?;
    browser
        .wait_for("document.querySelector('.chat-step[data-step=\"1\"]')")
        .await?;
    hold.release();
    let partial = "Alpha beta g";
    browser
        .wait_for(&format!(
            "document.querySelector('#chat-streaming').textContent === {}",
            js(partial)
        ))
        .await?;
    // The API says the same: the open step's text and the feed's position.
    let thread = chorus.thread("scout", id).await?;
    let live_text = thread["live"]["text"].as_str().unwrap_or_default();
    assert!(
        !live_text.is_empty() && answer.starts_with(live_text),
        "{thread:#}"
    );
    assert_eq!(thread["live"]["step"], 1, "{thread:#}");
    assert!(thread["live"]["event_id"].as_str().is_some(), "{thread:#}");

    // The rest streams in; then the answer is a message, shown once, and the step ended.
    browser
        .wait_for(&format!(
            "[...document.querySelectorAll('.chat-assistant .chat-text')].some(e => e.textContent === {})",
            js(answer)
        ))
        .await?;
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'completed'")
        .await?;
    browser
        .wait_for("document.querySelector('#chat-streaming').hidden")
        .await?;
    model.set_chunk_pause(Duration::from_millis(1));
    assert_eq!(count(&browser, ".chat-assistant").await?, 1);
    assert_eq!(count(&browser, ".chat-step").await?, 1);
    let step = text_of(&browser, ".chat-step[data-step=\"1\"]").await?;
    assert!(
        step.contains("llm_call") && step.contains("20 in / 10 out tokens"),
        "{step}"
    );
    assert!(!step.contains("running"), "{step}");
    let thread = chorus.thread("scout", id).await?;
    assert_eq!(thread["status"], "completed");
    assert!(thread["live"].is_null(), "{thread:#}");
    // The thread list shows it with its metrics.
    browser
        .wait_for(&format!(
            "/completed · 1 steps/.test(document.querySelector('#chat-thread-list li[data-thread=\"{id}\"]').textContent)"
        ))
        .await?;
    // In the thread, a message goes to it, and the page says so.
    let target = browser.find("#chat-target").await?.text().await?;
    assert!(target.contains(&format!("goes to thread {id}")), "{target}");
    only_this_origin(&browser, &origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_approve_and_deny_in_the_thread() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    model.push(text("written"));
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "b.txt", "content": "b"}),
    ));
    model.push(text("not written"));
    let chorus = chorus_with(&model).await?;
    chorus
        .create_agent_with(json!({"name": "careful", "permissions":
            {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]}}))
        .await?;
    let origin = origin(&chorus);
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/careful")).await?;
    browser
        .wait_for("document.querySelector('#chat-agent').value === 'careful'")
        .await?;

    // Approve: the outcome shows at once, the tool runs, the same thread completes.
    send_from_page(&browser, "write the plan").await?;
    let first = shown_thread(&browser, "careful").await?;
    browser
        .find(".chat-approval[data-status=\"pending\"] .chat-approve")
        .await?
        .click()
        .await?;
    browser
        .wait_for("document.querySelector('.chat-approval[data-status=\"approved\"]')")
        .await?;
    let outcome = text_of(&browser, ".chat-approval").await?;
    assert!(
        outcome.contains("create_file") && outcome.contains("approved by api"),
        "{outcome}"
    );
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'completed'")
        .await?;
    browser
        .wait_for("[...document.querySelectorAll('.chat-assistant .chat-text')].some(e => e.textContent === 'written')")
        .await?;
    assert_eq!(shown_thread(&browser, "careful").await?, first);
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("careful").join("workspace/plan.md"))?,
        "step 1"
    );
    // The tool call and its result are in the history, collapsed.
    assert!(count(&browser, "details.chat-tool").await? >= 2);
    assert_eq!(count(&browser, "details.chat-tool[open]").await?, 0);
    let thread = chorus.thread("careful", first).await?;
    assert_eq!(thread["status"], "completed");
    assert!(
        thread["steps"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["kind"] == "permission"),
        "{thread:#}"
    );

    // Deny, in a new thread: the tool never runs, the thread goes on to its end.
    browser.find("#chat-new").await?.click().await?;
    browser
        .wait_for("location.hash === '#chat/careful' && document.querySelector('#chat-thread-title').textContent === 'New thread'")
        .await?;
    send_from_page(&browser, "write b").await?;
    browser
        .wait_for(&format!(
            "location.hash !== '#chat/careful/{first}' && /^#chat\\/careful\\/\\d+$/.test(location.hash)"
        ))
        .await?;
    let second = shown_thread(&browser, "careful").await?;
    assert_ne!(first, second);
    browser
        .find(".chat-approval[data-status=\"pending\"] .chat-deny")
        .await?
        .click()
        .await?;
    browser
        .wait_for("document.querySelector('.chat-approval[data-status=\"denied\"]')")
        .await?;
    assert!(
        text_of(&browser, ".chat-approval")
            .await?
            .contains("denied by api")
    );
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'completed'")
        .await?;
    assert!(!chorus.agent_dir("careful").join("workspace/b.txt").exists());

    let entries = audit(&chorus, "careful").await?;
    let decision_of = |call: &str| {
        entries
            .iter()
            .find(|e| e["call_id"] == call)
            .and_then(|e| e["decision"].as_str())
            .map(str::to_string)
    };
    assert_eq!(decision_of("c1").as_deref(), Some("ask_approved"));
    assert_eq!(decision_of("c2").as_deref(), Some("ask_denied"));
    // Readable on a phone: nothing of the chat is wider than the screen.
    browser.resize(390, 800).await?;
    browser
        .wait_for("window.innerWidth <= 400 && document.getElementById('view-chat').scrollWidth <= document.documentElement.clientWidth")
        .await?;
    only_this_origin(&browser, &origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_reload_mid_run_loses_and_repeats_nothing() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let first = "Checking the workspace now";
    let (start, last) = (Hold::new(), Hold::new());
    model.push(Reply::Held(
        start.clone(),
        Box::new(Reply::ToolCalls {
            text: first.into(),
            calls: vec![("c1".into(), "view".into(), json!({"path": "."}).to_string())],
        }),
    ));
    model.push(Reply::Held(last.clone(), Box::new(text("All done here"))));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("scout").await?;
    let origin = origin(&chorus);
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/scout")).await?;
    browser
        .wait_for("document.querySelector('#chat-agent').value === 'scout'")
        .await?;
    // The first answer streams in pieces (its text, then its tool call) seconds apart.
    model.set_chunk_pause(Duration::from_secs(2));
    send_from_page(&browser, "look around").await?;
    let id = shown_thread(&browser, "scout").await?;
    browser
        .wait_for("document.querySelector('.chat-step[data-step=\"1\"]')")
        .await?;

    // Reload while the model is mid-stream: the same thread, the partial text once.
    start.release();
    let piece = &first[..first.len().div_ceil(3)];
    browser
        .wait_for(&format!(
            "document.querySelector('#chat-streaming').textContent === {}",
            js(piece)
        ))
        .await?;
    // The next call answers at once.
    model.set_chunk_pause(Duration::from_millis(1));
    reload(&browser).await?;
    assert_eq!(shown_thread(&browser, "scout").await?, id);
    // Shown again from the snapshot's `live`; then only what came after it.
    browser
        .wait_for("document.querySelector('#chat-streaming').textContent !== ''")
        .await?;
    for _ in 0..3 {
        let streamed = text_of(&browser, "#chat-streaming").await?;
        assert!(
            first.starts_with(&streamed) || streamed.is_empty(),
            "{streamed:?} is not a part of {first:?} shown once"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }

    // After the tool step, with the next model call held: reload again.
    chorus
        .wait_thread("scout", id, Duration::from_secs(60), |t| {
            t["steps"].as_array().is_some_and(|s| s.len() >= 3)
        })
        .await?;
    browser
        .wait_for("document.querySelector('.chat-step[data-step=\"3\"]')")
        .await?;
    reload(&browser).await?;
    assert_eq!(shown_thread(&browser, "scout").await?, id);
    browser
        .wait_for("document.querySelector('.chat-step[data-step=\"3\"]')")
        .await?;
    last.release();
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'completed'")
        .await?;
    browser
        .wait_for("[...document.querySelectorAll('.chat-assistant .chat-text')].some(e => e.textContent === 'All done here')")
        .await?;
    browser
        .wait_for("document.querySelector('#chat-streaming').hidden")
        .await?;
    // Each step once, each message once.
    let steps = browser
        .execute(
            "return [...document.querySelectorAll('.chat-step')].map(e => e.dataset.step);",
            vec![],
        )
        .await?;
    assert_eq!(steps, json!(["1", "2", "3"]));
    let said = browser
        .execute(
            "return [...document.querySelectorAll('.chat-assistant .chat-text')].map(e => e.textContent);",
            vec![],
        )
        .await?;
    assert_eq!(said, json!([first, "All done here"]));
    assert_eq!(count(&browser, ".chat-user").await?, 1);
    let thread = chorus.thread("scout", id).await?;
    assert_eq!(thread["steps"].as_array().unwrap().len(), 3, "{thread:#}");
    only_this_origin(&browser, &origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_long_history_draws_a_window_and_pages_the_rest() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    model.push(text("first answer"));
    let dir = tempfile::tempdir()?;
    let builder = |dir: &std::path::Path| {
        Chorus::builder()
            .env("OPENAI_BASE_URL", &model.base_url())
            .env("OPENAI_API_KEY", "sk-test-web-chat")
            .env("CHORUS_DEFAULT_MODEL", "fake-model")
            .data_dir(dir)
    };
    let chorus = builder(dir.path()).start().await?;
    chorus.create_agent("scout").await?;
    let id = chorus.send_message("scout", "start").await?;
    chorus
        .wait_thread_finished("scout", id, Duration::from_secs(20))
        .await?;
    // 320 more messages in the thread, written into the store while chorus is down.
    let url = chorus.database_url.clone();
    chorus.stop().await?;
    let now = chrono::Utc::now();
    let rows: Vec<String> = (1..=320)
        .map(|i| {
            let at = (now + chrono::Duration::milliseconds(i * 10))
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string();
            format!(
                "('scout', {id}, '{}', 'note {i}', '{at}', {})",
                if i % 2 == 0 { "assistant" } else { "user" },
                i + 2
            )
        })
        .collect();
    let written = Chorus::write_store(
        dir.path(),
        url.as_deref(),
        &format!(
            "INSERT INTO messages (agent_name, thread_id, role, content, created_at, position) VALUES {}",
            rows.join(", ")
        ),
    )
    .await?;
    assert_eq!(written, 320);
    let mut again = builder(dir.path());
    if let Some(url) = &url {
        again = again.database_url(url);
    }
    let chorus = again.start().await?;
    let origin = origin(&chorus);
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/scout/{id}")).await?;
    browser
        .wait_for("document.querySelector('.chat-msg[data-message]')")
        .await?;
    // Only a window of the rows is drawn; the first page (100) is read, not all.
    let drawn = count(&browser, ".chat-row").await?;
    assert!((1..60).contains(&drawn), "{drawn} rows drawn");
    assert!(text_of(&browser, ".chat-msg").await?.contains("start"));
    // Scrolling down reads the following pages, still drawing only a window.
    let scroll = "const h = document.getElementById('chat-history'); h.scrollTop = h.scrollHeight;";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        browser.execute(scroll, vec![]).await?;
        let last = text_of(&browser, ".chat-msg .chat-text").await?;
        if last.contains("note 320") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the end never came into view: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drawn = count(&browser, ".chat-row").await?;
    assert!((1..60).contains(&drawn), "{drawn} rows drawn at the end");
    assert!(!text_of(&browser, ".chat-msg").await?.contains("start"));
    // Every page was read once: the page holds each message once.
    let read = browser
        .execute(
            "return [...document.querySelectorAll('.chat-msg')].map(e => e.dataset.message);",
            vec![],
        )
        .await?;
    let read: Vec<String> = serde_json::from_value(read)?;
    let unique: std::collections::HashSet<&String> = read.iter().collect();
    assert_eq!(read.len(), unique.len(), "{read:?}");
    let requested = browser.requested().await?;
    let pages = requested
        .iter()
        .filter(|u| u.contains(&format!("/threads/{id}?after=")))
        .count();
    assert!(pages >= 3, "{requested:?}");
    only_this_origin(&browser, &origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_kills_a_running_thread() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text("never shown"))));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("scout").await?;
    let id = chorus.send_message("scout", "think long").await?;
    let origin = origin(&chorus);
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/scout/{id}")).await?;
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'running'")
        .await?;
    browser.find("#chat-kill").await?.click().await?;
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'killed' && document.querySelector('#chat-kill').hidden")
        .await?;
    let thread = chorus.thread("scout", id).await?;
    assert_eq!(thread["status"], "killed", "{thread:#}");
    hold.release();
    only_this_origin(&browser, &origin).await?;
    browser.close().await
}
