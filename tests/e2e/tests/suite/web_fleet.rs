//! The web page's fleet, agents and header badge, in a real Chromium, with the real
//! binaries: agents created and destroyed from the page and through the API reach
//! the fleet from the feed (`agent` and `worker` events, checked on `GET
//! /api/events` too); a running thread's step and a pending approval (what it waits
//! on, since when) show live and leave when answered; a viewer sees no button its
//! role may not press.

use std::time::Duration;

use chorus_test_support::browser::Browser;
use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{Chorus, EventStream, FakeOpenAi};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

/// The next event of `kind` about `agent` on the feed (within 30 s).
async fn next_of(stream: &mut EventStream, kind: &str, agent: &str) -> anyhow::Result<Value> {
    let read = async {
        while let Some((k, data)) = stream.next().await? {
            if k == kind && data["agent"] == agent {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended before a {kind} event of {agent}")
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .map_err(|_| anyhow::anyhow!("no {kind} event of {agent} within 30 s"))?
}

/// Which of the controls a viewer may not use the page shows: creating, saving the
/// settings, destroying, retracting a remembered fact.
async fn controls_seen(browser: &Browser) -> anyhow::Result<Value> {
    browser
        .execute(
            "return ['#create-agent', '#configure-save', '#destroy', \
             '#memory-entries button.retract'].map(s => !!document.querySelector(s));",
            vec![],
        )
        .await
}

/// JavaScript: the element `css` selects in the fleet's row of `agent`.
fn in_row(agent: &str, css: &str) -> String {
    format!("document.querySelector('#agents tr[data-agent=\"{agent}\"] {css}')")
}

/// JavaScript: whether the fleet has a row for `name`.
fn row_of(name: &str) -> String {
    format!("document.querySelector('#agents tr[data-agent=\"{name}\"]')")
}

#[tokio::test]
async fn web_an_agent_created_on_the_agents_page_joins_the_fleet_live_and_leaves_when_destroyed()
-> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    let origin = chorus.origin();
    let mut feed = chorus.open_events("", None).await?;
    browser.log_in(&origin, chorus.token()).await?;
    // Set once: still there at the end means the page never reloaded.
    browser
        .execute("window.notReloaded = true; return true;", vec![])
        .await?;

    // Create from the Agents page, with a model from the discovered list.
    browser
        .execute("location.hash = '#agents'; return true;", vec![])
        .await?;
    browser
        .find("#create-name")
        .await?
        .type_text("drafted")
        .await?;
    browser
        .find("#create-prompt")
        .await?
        .type_text("You draft things.")
        .await?;
    browser
        .wait_for("[...document.querySelectorAll('#create-model option')].some(o => o.value.endsWith('fake-model'))")
        .await?;
    let model_id = browser
        .execute(
            "const s = document.querySelector('#create-model'); \
             s.value = [...s.options].find(o => o.value.endsWith('fake-model')).value; \
             return s.value;",
            vec![],
        )
        .await?;
    let model_id = model_id.as_str().unwrap_or_default().to_string();
    assert!(model_id.ends_with("fake-model"), "{model_id}");
    // The backends and presets offered are the server's (GET /api/session).
    assert_eq!(
        browser.text_of("#create-backend option").await?,
        "api|claude-code|opencode"
    );
    assert_eq!(
        browser.text_of("#create-permissions option").await?,
        "open|standard|locked|custom profile"
    );
    let preset = browser
        .execute(
            "return document.querySelector('#create-permissions').value;",
            vec![],
        )
        .await?;
    assert_eq!(preset, "standard");
    browser.find("#create-submit").await?.click().await?;
    // The page goes to the new agent; the API has it, with the model chosen.
    browser
        .wait_for("location.hash === '#agents/drafted' && document.querySelector('#agent-name')")
        .await?;
    let made = chorus.agent("drafted").await?;
    assert_eq!(made["model"], model_id.as_str(), "{made:#}");
    assert_eq!(made["system_prompt"], "You draft things.");

    // The feed told it: `agent` created by the person, then its worker's states.
    let created = next_of(&mut feed, "agent", "drafted").await?;
    assert_eq!(created["change"], "created", "{created}");
    assert!(
        created["by"].as_str().is_some_and(|by| by.contains("api")),
        "{created}"
    );
    assert_eq!(created["thread_id"], Value::Null);
    let worker = next_of(&mut feed, "worker", "drafted").await?;
    assert_eq!(worker["state"], "starting", "{worker}");
    loop {
        let worker = next_of(&mut feed, "worker", "drafted").await?;
        for key in ["pid", "dial_in_worker", "restarts", "last_exit"] {
            assert!(worker.get(key).is_some(), "{key} in {worker}");
        }
        if worker["state"] == "running" {
            break;
        }
    }

    // The fleet shows it (with its worker running), no reload.
    browser
        .execute("location.hash = '#fleet'; return true;", vec![])
        .await?;
    browser
        .wait_for(&format!(
            "{} && {}.querySelector('.worker .state').textContent === 'running'",
            row_of("drafted"),
            row_of("drafted")
        ))
        .await?;
    let row = browser
        .find("#agents tr[data-agent=\"drafted\"]")
        .await?
        .text()
        .await?;
    assert!(row.contains(&model_id) && row.contains("api"), "{row}");

    // Another created through the API appears on the fleet from the feed.
    chorus.create_agent("elsewhere").await?;
    browser.wait_for(&row_of("elsewhere")).await?;
    let configured = chorus
        .api(Method::PATCH, "/api/agents/elsewhere")
        .json(&json!({"system_prompt": "Changed."}))
        .send()
        .await?;
    assert_eq!(configured.status(), StatusCode::OK);
    let changed = next_of(&mut feed, "agent", "elsewhere").await?;
    assert_eq!(changed["change"], "created");
    let changed = next_of(&mut feed, "agent", "elsewhere").await?;
    assert_eq!(changed["change"], "changed", "{changed}");

    // Destroy it from its page (keeping nothing): it leaves the fleet.
    browser
        .execute("location.hash = '#agents/drafted'; return true;", vec![])
        .await?;
    browser.find("#destroy").await?.click().await?;
    browser.find("#destroy-confirm").await?.click().await?;
    browser.wait_for("location.hash === '#agents'").await?;
    let destroyed = next_of(&mut feed, "agent", "drafted").await?;
    assert_eq!(destroyed["change"], "destroyed", "{destroyed}");
    let gone = chorus
        .api(Method::GET, "/api/agents/drafted")
        .send()
        .await?;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    browser
        .execute("location.hash = '#fleet'; return true;", vec![])
        .await?;
    browser
        .wait_for(&format!(
            "!{} && {}",
            row_of("drafted"),
            row_of("elsewhere")
        ))
        .await?;
    // And one destroyed through the API leaves it too.
    let response = chorus
        .api(Method::DELETE, "/api/agents/elsewhere")
        .send()
        .await?;
    assert_eq!(response.status(), StatusCode::NO_CONTENT);
    browser
        .wait_for(&format!(
            "!{} && !document.getElementById('no-agents').hidden",
            row_of("elsewhere")
        ))
        .await?;
    assert_eq!(
        browser
            .execute("return window.notReloaded === true;", vec![])
            .await?,
        Value::Bool(true),
        "the page was reloaded"
    );
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}

#[tokio::test]
async fn web_the_fleet_shows_a_running_step_and_a_pending_approval_live_with_the_badge()
-> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    chorus.create_agent("busy").await?;
    chorus
        .create_agent_with(json!({"name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]}}))
        .await?;
    let origin = chorus.origin();
    browser.log_in(&origin, chorus.token()).await?;
    browser.wait_for(&row_of("careful")).await?;
    // Nothing pending yet: no badge.
    assert_eq!(
        browser
            .execute(
                "return document.getElementById('pending-badge').hidden;",
                vec![]
            )
            .await?,
        Value::Bool(true)
    );

    // A thread whose model call is held: running, on its first step.
    let thinking = Hold::new();
    model.push(Reply::Held(thinking.clone(), Box::new(text("done"))));
    let busy = chorus.send_message("busy", "think hard").await?;
    let busy_item = in_row("busy", &format!("li[data-thread=\"{busy}\"]"));
    browser
        .wait_for(&format!(
            "{busy_item} && {busy_item}.textContent.includes('step 1')"
        ))
        .await?;
    let item = browser
        .find(&format!(
            "#agents tr[data-agent=\"busy\"] li[data-thread=\"{busy}\"]"
        ))
        .await?
        .text()
        .await?;
    assert!(
        item.contains(&format!("#{busy}")) && item.contains("running"),
        "{item}"
    );
    // Its elapsed time counts up (the page's 1 s timer, no requests).
    browser
        .wait_for(&format!(
            "{busy_item}.querySelector('.elapsed').textContent !== '0 s'"
        ))
        .await?;

    // A tool call that asks: the thread waits on it; the fleet says for what and
    // since when, and the header's badge counts it, linking to its thread.
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    model.push(text("written"));
    let careful = chorus.send_message("careful", "write the plan").await?;
    let approval = {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let pending: Vec<Value> = chorus
                .api(Method::GET, "/api/approvals")
                .send()
                .await?
                .json()
                .await?;
            if let Some(first) = pending.into_iter().next() {
                break first;
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "no approval was asked"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    let approval_id = approval["id"].as_str().unwrap().to_string();
    let waiting = in_row("careful", &format!("li[data-approval=\"{approval_id}\"]"));
    browser.wait_for(&waiting).await?;
    let text = browser
        .find(&format!(
            "#agents tr[data-agent=\"careful\"] li[data-approval=\"{approval_id}\"]"
        ))
        .await?
        .text()
        .await?;
    assert!(
        text.contains("waits on approval for create_file: tool:create_file:plan.md"),
        "{text}"
    );
    assert!(text.contains("since ") && text.contains(" s"), "{text}");
    assert!(text.contains(&format!("#{careful}")), "{text}");
    let thread_item = in_row("careful", &format!("li[data-thread=\"{careful}\"]"));
    browser
        .wait_for(&format!(
            "{thread_item} && {thread_item}.textContent.includes('waiting_for_permission')"
        ))
        .await?;
    browser
        .wait_for("!document.getElementById('pending-badge').hidden && document.querySelector('#pending-badge .count').textContent === '1'")
        .await?;
    let href = browser
        .execute(
            "return document.getElementById('pending-badge').getAttribute('href');",
            vec![],
        )
        .await?;
    assert_eq!(href, json!(format!("#chat/careful/{careful}")));

    // Answered through the API: it leaves the fleet and the badge, live.
    let answer = chorus
        .api(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(answer.status(), StatusCode::OK);
    browser
        .wait_for(&format!(
            "!{waiting} && document.getElementById('pending-badge').hidden"
        ))
        .await?;
    chorus
        .wait_thread_finished("careful", careful, Duration::from_secs(20))
        .await?;
    browser.wait_for(&format!("!{thread_item}")).await?;
    // The held thread ends too, and leaves the running list.
    thinking.release();
    chorus
        .wait_thread_finished("busy", busy, Duration::from_secs(20))
        .await?;
    browser.wait_for(&format!("!{busy_item}")).await?;
    // Its usage is counted.
    browser
        .wait_for(&format!(
            "{}.querySelector('.usage').textContent.includes(' in')",
            row_of("busy")
        ))
        .await?;

    // Narrow: nothing is wider than a phone's screen.
    browser.resize(390, 844).await?;
    browser
        .wait_for("document.documentElement.scrollWidth <= window.innerWidth")
        .await?;
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}

#[tokio::test]
async fn web_a_viewer_sees_no_create_configure_destroy_or_retract_button() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "m1",
        "remember",
        json!({"text": "The user likes metric units."}),
    ));
    model.push(text("noted"));
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[threads]\ntitles = false\n\n[roles]\nvera = \"viewer\"\n")
        .start()
        .await?;
    chorus.create_agent("keeper").await?;
    let thread = chorus.send_message("keeper", "I like metric units").await?;
    let done = chorus
        .wait_thread_finished("keeper", thread, Duration::from_secs(20))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    let origin = chorus.origin();

    // Positive control: the admin (the API token) sees every control.
    browser.log_in(&origin, chorus.token()).await?;
    browser
        .execute("location.hash = '#agents'; return true;", vec![])
        .await?;
    browser
        .wait_for("document.querySelector('#agent-list li[data-agent=\"keeper\"]') && document.querySelector('#create-agent')")
        .await?;
    browser
        .execute(
            "location.hash = '#agents/keeper/memory'; return true;",
            vec![],
        )
        .await?;
    browser
        .wait_for("document.querySelector('#memory-entries li') && document.querySelector('#configure-save')")
        .await?;
    let fact = browser.find("#memory-entries li").await?.text().await?;
    assert!(
        fact.contains("The user likes metric units.")
            && fact.contains(&format!("thread #{thread}")),
        "{fact}"
    );
    assert_eq!(
        controls_seen(&browser).await?,
        json!([false, true, true, true]),
        "the admin on the agent's page"
    );
    // The other tabs read what the API has.
    for (tab, expected) in [
        ("tools", "remember"),
        ("audit", "agent:create"),
        ("identity", "SOUL.md"),
        ("jobs", "No jobs."),
        ("schedules", "No schedules."),
        ("mcp", "No MCP servers."),
    ] {
        browser
            .execute(
                &format!("location.hash = '#agents/keeper/{tab}'; return true;"),
                vec![],
            )
            .await?;
        browser
            .wait_for(&format!(
                "document.querySelector('.tabs a[data-tab=\"{tab}\"][aria-current=page]') && \
                 document.getElementById('agent-tab').textContent.includes('{expected}')"
            ))
            .await?;
    }
    browser.find("#logout").await?.click().await?;
    browser.wait_for("location.pathname === '/login'").await?;

    // The viewer: the same pages, and not one of those controls.
    let issued: Value = chorus
        .api(Method::POST, "/api/users/vera/tokens")
        .json(&json!({"label": "vera's browser"}))
        .send()
        .await?
        .json()
        .await?;
    let token = issued["token"].as_str().expect("a token").to_string();
    browser.log_in(&origin, &token).await?;
    let role = browser.find("#who-role").await?.text().await?;
    assert_eq!(role, "viewer");
    browser
        .execute("location.hash = '#agents'; return true;", vec![])
        .await?;
    browser
        .wait_for("document.querySelector('#agent-list li[data-agent=\"keeper\"]')")
        .await?;
    assert_eq!(
        controls_seen(&browser).await?,
        json!([false, false, false, false])
    );
    browser
        .execute(
            "location.hash = '#agents/keeper/memory'; return true;",
            vec![],
        )
        .await?;
    browser
        .wait_for("document.querySelector('#memory-entries li') && document.querySelector('#configure-agent')")
        .await?;
    assert_eq!(
        controls_seen(&browser).await?,
        json!([false, false, false, false])
    );
    // What the viewer may do is still there: read the settings, search the memory.
    let buttons = browser
        .execute(
            "return [...document.querySelectorAll('#view-agents button')].map(b => b.textContent);",
            vec![],
        )
        .await?;
    assert_eq!(buttons, json!(["Search"]), "the viewer's buttons");
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}
