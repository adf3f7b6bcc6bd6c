//! The web page's chat, in a real Chromium: a message sent from the page, the
//! model's text streaming in and the steps; approvals answered in the thread; a
//! reload in the middle of a run that loses and repeats nothing; a long history
//! drawn a window at a time.

use std::time::Duration;

use chorus_test_support::browser::{Browser, js};
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

async fn audit(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let page: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/audit?limit=100"))
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"].as_array().cloned().unwrap_or_default())
}

/// A Chorus on the fake model (which lists `fake-model` and `fake-model-2`) with one
/// agent, and Chromium logged in as the admin on that agent's chat.
struct ChatPage {
    browser: Browser,
    model: FakeModel,
    chorus: Chorus,
    origin: String,
}

/// The page for an agent made with `agent` (`{"name": …, …}`), or `None` when there
/// is no browser (see `Browser::start`).
async fn chat_page(agent: Value) -> anyhow::Result<Option<ChatPage>> {
    let Some(browser) = Browser::start().await? else {
        return Ok(None);
    };
    let model = FakeOpenAi::start().await;
    model.set_models(&["fake-model", "fake-model-2"]);
    let chorus = chorus_with(&model).await?;
    let name = agent["name"].as_str().unwrap_or_default().to_string();
    chorus.create_agent_with(agent).await?;
    let origin = chorus.origin();
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/{name}")).await?;
    browser
        .wait_for(&format!(
            "document.querySelector('#chat-agent').value === {}",
            js(&name)
        ))
        .await?;
    Ok(Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }))
}

/// Where the composer, the approvals and the history are on the screen, and how far
/// the history is scrolled from its end: `[input top, approvals top, history top,
/// history height, px below the history's visible end]`.
async fn layout(browser: &Browser) -> anyhow::Result<Vec<f64>> {
    let at = browser
        .execute(
            "const top = (id) => document.getElementById(id).getBoundingClientRect().top; \
             const h = document.getElementById('chat-history'); \
             return [top('chat-input'), top('chat-approvals'), top('chat-history'), \
                     h.getBoundingClientRect().height, h.scrollHeight - h.scrollTop - h.clientHeight];",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(at)?)
}

#[tokio::test]
async fn web_chat_sends_a_message_and_streams_the_answer_and_its_steps() -> anyhow::Result<()> {
    let Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }) = chat_page(json!({"name": "scout"})).await?
    else {
        return Ok(());
    };
    // The answer comes in three pieces, seconds apart: the page shows the first
    // alone before the rest arrives.
    let answer = "Alpha beta gamma delta epsilon zeta";
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text(answer))));
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
    assert_eq!(browser.count(".chat-assistant").await?, 1);
    assert_eq!(browser.count(".chat-step").await?, 1);
    let step = browser.text_of(".chat-step[data-step=\"1\"]").await?;
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
    browser.assert_only_origin(&origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_approve_and_deny_in_the_thread() -> anyhow::Result<()> {
    let Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }) = chat_page(json!({"name": "careful", "permissions":
            {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]}}))
    .await?
    else {
        return Ok(());
    };
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
    let outcome = browser.text_of(".chat-approval").await?;
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
    assert!(browser.count("details.chat-tool").await? >= 2);
    assert_eq!(browser.count("details.chat-tool[open]").await?, 0);
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
        browser
            .text_of(".chat-approval")
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
    browser.assert_only_origin(&origin).await?;
    browser.close().await
}

#[tokio::test]
async fn web_chat_reload_mid_run_loses_and_repeats_nothing() -> anyhow::Result<()> {
    let Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }) = chat_page(json!({"name": "scout"})).await?
    else {
        return Ok(());
    };
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
    browser.reload().await?;
    assert_eq!(shown_thread(&browser, "scout").await?, id);
    // Shown again from the snapshot's `live`; then only what came after it.
    browser
        .wait_for("document.querySelector('#chat-streaming').textContent !== ''")
        .await?;
    for _ in 0..3 {
        let streamed = browser.text_of("#chat-streaming").await?;
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
    browser.reload().await?;
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
    assert_eq!(browser.count(".chat-user").await?, 1);
    let thread = chorus.thread("scout", id).await?;
    assert_eq!(thread["steps"].as_array().unwrap().len(), 3, "{thread:#}");
    browser.assert_only_origin(&origin).await?;
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
    let origin = chorus.origin();
    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#chat/scout/{id}")).await?;
    browser
        .wait_for("document.querySelector('.chat-msg[data-message]')")
        .await?;
    // Only a window of the rows is drawn; the first page (100) is read, not all.
    let drawn = browser.count(".chat-row").await?;
    assert!((1..60).contains(&drawn), "{drawn} rows drawn");
    assert!(browser.text_of(".chat-msg").await?.contains("start"));
    // Scrolling down reads the following pages, still drawing only a window.
    let scroll = "const h = document.getElementById('chat-history'); h.scrollTop = h.scrollHeight;";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        browser.execute(scroll, vec![]).await?;
        let last = browser.text_of(".chat-msg .chat-text").await?;
        if last.contains("note 320") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the end never came into view: {last}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let drawn = browser.count(".chat-row").await?;
    assert!((1..60).contains(&drawn), "{drawn} rows drawn at the end");
    assert!(!browser.text_of(".chat-msg").await?.contains("start"));
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
    browser.assert_only_origin(&origin).await?;
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
    let origin = chorus.origin();
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
    browser.assert_only_origin(&origin).await?;
    browser.close().await
}

/// The model's text streams into the history's last row: the composer and the
/// approvals do not move while it grows, the history follows its end, and the
/// finished answer takes the streamed text's place without a jump.
#[tokio::test]
async fn web_chat_streamed_text_moves_nothing_around_it() -> anyhow::Result<()> {
    let Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }) = chat_page(json!({"name": "scout"})).await?
    else {
        return Ok(());
    };
    // Thirty lines in three pieces, seconds apart: more than the history shows.
    let answer: String = (1..=30)
        .map(|i| format!("Line {i} of the answer.\n"))
        .collect();
    let answer = answer.trim_end().to_string();
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text(&answer))));
    model.set_chunk_pause(Duration::from_secs(3));
    send_from_page(&browser, "Thirty lines, please").await?;
    let id = shown_thread(&browser, "scout").await?;
    browser
        .wait_for("document.querySelector('.chat-step[data-step=\"1\"]')")
        .await?;
    let before = layout(&browser).await?;
    hold.release();
    let mut seen: Vec<(usize, Vec<f64>)> = Vec::new();
    for _ in 0..2 {
        // The next piece: more text than the last sample held.
        let shown = seen.last().map_or(0, |(len, _)| *len);
        browser
            .wait_for(&format!(
                "document.querySelector('#chat-streaming').textContent.length > {shown}"
            ))
            .await?;
        let now = layout(&browser).await?;
        let streamed = browser.text_of("#chat-streaming").await?;
        assert!(answer.starts_with(&streamed), "{streamed:?}");
        seen.push((streamed.len(), now));
    }
    assert!(seen[1].0 > seen[0].0, "the text grew: {seen:?}");
    for (_, now) in &seen {
        assert_eq!(
            now[..4],
            before[..4],
            "the page moved while text streamed: {seen:?}"
        );
        // The newest text is in view: the history is at its end.
        assert!(
            now[4] <= 2.0,
            "the history does not follow the text: {now:?}"
        );
    }
    model.set_chunk_pause(Duration::from_millis(1));
    browser
        .wait_for("document.querySelector('#chat-thread-status').textContent === 'completed' && document.querySelector('#chat-streaming').hidden")
        .await?;
    browser
        .wait_for("document.querySelector('.chat-assistant .chat-text')?.textContent.startsWith('Line 1 ')")
        .await?;
    let after = layout(&browser).await?;
    assert_eq!(
        after[..4],
        before[..4],
        "the page moved when the answer came: {after:?} {before:?}"
    );
    browser
        .wait_for("(() => { const h = document.getElementById('chat-history'); return h.scrollHeight - h.scrollTop - h.clientHeight <= 2; })()")
        .await?;
    let thread = chorus.thread("scout", id).await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    browser.assert_only_origin(&origin).await?;
    browser.close().await
}

/// Change model: the agent's next call goes to the new model; a model the providers
/// do not list is refused, with the API's reason shown beside the button, and the
/// agent keeps its model.
#[tokio::test]
async fn web_chat_changes_the_model_and_shows_a_refusal_beside_the_button() -> anyhow::Result<()> {
    let Some(ChatPage {
        browser,
        model,
        chorus,
        origin,
    }) = chat_page(json!({"name": "scout", "model": "fake-model"})).await?
    else {
        return Ok(());
    };
    let set_model = "document.getElementById('chat-model').value = arguments[0]; \
                     document.getElementById('chat-model-save').click(); return true;";
    let refused_box = "document.querySelector('#chat-model-save + .error')";

    // Refused: the reason beside the button (not in the page's own error line).
    browser
        .execute(set_model, vec![json!("no-such-model")])
        .await?;
    browser
        .wait_for(&format!("{refused_box} && !{refused_box}.hidden"))
        .await?;
    let reason = browser.text_of("#chat-model-save + .error").await?;
    assert!(reason.contains("no-such-model"), "{reason}");
    assert_eq!(
        browser
            .execute("return document.getElementById('error').hidden;", vec![])
            .await?,
        json!(true)
    );
    assert_eq!(chorus.agent("scout").await?["model"], "fake-model");

    // Accepted: the refusal goes, the agent's model is the new one, and its next
    // model call asks for it.
    browser
        .execute(set_model, vec![json!("fake-model-2")])
        .await?;
    browser.wait_for(&format!("{refused_box}.hidden")).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while chorus.agent("scout").await?["model"] != "fake-model-2" {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the model did not change: {}",
            chorus.agent("scout").await?
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        browser
            .execute(
                "return document.getElementById('chat-model').value;",
                vec![]
            )
            .await?,
        json!("fake-model-2")
    );
    model.push(text("answered by the second model"));
    send_from_page(&browser, "Which model are you?").await?;
    let id = shown_thread(&browser, "scout").await?;
    browser
        .wait_for("[...document.querySelectorAll('.chat-assistant .chat-text')].some(e => e.textContent === 'answered by the second model')")
        .await?;
    let asked: Vec<Value> = model
        .requests()
        .into_iter()
        .filter(|r| r.path.ends_with("/chat/completions"))
        .map(|r| r.body["model"].clone())
        .collect();
    assert_eq!(asked.last(), Some(&json!("fake-model-2")), "{asked:?}");
    assert_eq!(chorus.thread("scout", id).await?["status"], "completed");
    browser.assert_only_origin(&origin).await?;
    browser.close().await
}
