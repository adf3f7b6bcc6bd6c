//! The web page's board, in a real Chromium against the real binaries and the fake
//! model: a task created in the page (with an attachment), the planner's question
//! answered there, Start, and the task seen reaching `completed` live; the buttons
//! of each status (and none for a viewer); a reload keeping the open task.

use std::time::Duration;

use chorus_test_support::browser::Browser;
use chorus_test_support::fake_model::{Reply, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(60);

async fn start(model: &FakeModel, config: Option<&str>) -> anyhow::Result<Chorus> {
    let mut builder = Chorus::builder().openai_fake(model);
    if let Some(config) = config {
        builder = builder.config(config);
    }
    builder.start().await
}

async fn history_ids(chorus: &Chorus, id: u64) -> anyhow::Result<Vec<u64>> {
    let history = chorus
        .ok(Method::GET, &format!("/api/tasks/{id}/history"), None)
        .await?;
    Ok(history["events"]
        .as_array()
        .map(|events| events.iter().filter_map(|e| e["id"].as_u64()).collect())
        .unwrap_or_default())
}

/// The event ids of the history the page shows, in its order.
async fn page_history(browser: &Browser) -> anyhow::Result<Vec<u64>> {
    let ids = browser
        .execute(
            "return [...document.querySelectorAll('#task-history li')].map(li => Number(li.dataset.event));",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(ids)?)
}

/// The page's history is the API's, each event once, once it has caught up.
async fn wait_history_is_the_apis(
    browser: &Browser,
    chorus: &Chorus,
    id: u64,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let api = history_ids(chorus, id).await?;
        let page = page_history(browser).await?;
        if page == api {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!("the page's history {page:?} is not the API's {api:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The actions of the buttons the page shows for the open task (visible ones).
async fn buttons(browser: &Browser) -> anyhow::Result<Vec<String>> {
    let shown = browser
        .execute(
            "return [...document.querySelectorAll('#task-actions button')]\
             .filter(b => b.getClientRects().length > 0).map(b => b.dataset.action);",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(shown)?)
}

/// Waits for the page to show exactly the buttons of `actions` for the open task.
async fn wait_buttons(browser: &Browser, actions: &[&str]) -> anyhow::Result<()> {
    let check = format!(
        "JSON.stringify([...document.querySelectorAll('#task-actions button')]\
         .filter(b => b.getClientRects().length > 0 && !b.disabled).map(b => b.dataset.action)) === '{}'",
        serde_json::to_string(actions)?
    );
    if let Err(e) = browser.wait_for(&check).await {
        anyhow::bail!("{e}: the buttons are {:?}", buttons(browser).await?);
    }
    Ok(())
}

fn plan(assignee: &str) -> Reply {
    tool_call(
        "plan",
        "submit_plan",
        json!({"summary": "Write a greeting file", "requirements": ["greeting.txt says hello"],
               "acceptance_criteria": ["the file exists"], "steps": ["write greeting.txt"],
               "assignee": assignee}),
    )
}

/// The acceptance flow, all in the page and without reloading it: create a task
/// with an attachment, answer the planner's question (an option, and a box), Start
/// it, and see its card reach the completed column with its report and history.
#[tokio::test]
async fn web_board_task_created_answered_started_and_completed_live() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    chorus
        .create_agent_with(json!({"name": "coder", "permissions": "standard",
            "system_prompt": "You are coder."}))
        .await?;
    let origin = chorus.origin();
    let dir = tempfile::tempdir()?;
    let attachment = dir.path().join("notes.md");
    std::fs::write(&attachment, "say hello")?;

    model.push(tool_call(
        "ask",
        "ask_questions",
        json!({"questions": [
        {"id": "q1", "question": "Which greeting?",
         "options": [{"label": "hello", "description": "plain"}, {"label": "hi"}]},
        {"id": "q2", "question": "Which file name?"}]}),
    ));

    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#board")).await?;
    // Set once: a reload would clear it.
    browser
        .execute("window.notReloaded = true; return true;", vec![])
        .await?;
    browser
        .find("#board-columns ul[data-status=completed]")
        .await?;
    browser.find("#task-new-box summary").await?.click().await?;
    browser
        .find("#task-new-title")
        .await?
        .type_text("Greet")
        .await?;
    browser
        .find("#task-new-description")
        .await?
        .type_text("Write a greeting file")
        .await?;
    browser
        .find("#task-new-files")
        .await?
        .type_text(attachment.to_str().unwrap())
        .await?;
    browser.find("#task-new-create").await?.click().await?;
    browser
        .wait_for("/^#board\\/\\d+$/.test(location.hash)")
        .await?;
    let hash = browser.execute("return location.hash;", vec![]).await?;
    let id: u64 = hash.as_str().unwrap_or_default()["#board/".len()..].parse()?;

    // The task and its attachment, through the API and in the page.
    let attachments = chorus
        .ok(Method::GET, &format!("/api/tasks/{id}/attachments"), None)
        .await?;
    assert_eq!(
        attachments["attachments"][0]["name"], "notes.md",
        "{attachments:#}"
    );
    assert_eq!(attachments["attachments"][0]["size"], 9);
    browser
        .wait_for("document.querySelector('#task-attachments')?.textContent.includes('notes.md')")
        .await?;

    // The planner's questions, with their options and an answer box.
    browser
        .find("#task-questions fieldset[data-question=q1]")
        .await?;
    let asked = browser.find("#task-questions").await?.text().await?;
    for words in [
        "Which greeting?",
        "hello",
        "plain",
        "hi",
        "Which file name?",
    ] {
        assert!(asked.contains(words), "{words} in {asked:?}");
    }
    browser
        .wait_for("document.getElementById('task-status').textContent === 'awaiting_input'")
        .await?;
    browser
        .wait_for(&format!(
            "document.querySelector('ul[data-status=awaiting_input] li[data-task=\"{id}\"]')"
        ))
        .await?;
    model.push(plan("coder"));
    browser
        .find("input[name=q-q1][value=hello]")
        .await?
        .click()
        .await?;
    browser
        .find("#q-q2-text")
        .await?
        .type_text("greeting.txt")
        .await?;
    browser.find("#task-answer").await?.click().await?;

    // The answers reached the planner, which planned: Start is shown, not Accept.
    browser
        .wait_for("document.querySelector('#task-actions button[data-action=start]')")
        .await?;
    let planned = chorus.wait_task(id, "planned", WAIT).await?;
    let answers: Vec<(&str, &str)> = planned["questions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["id"].as_str().unwrap(),
                q["answer"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(answers, [("q1", "hello"), ("q2", "greeting.txt")]);
    wait_buttons(&browser, &["start", "fail"]).await?;
    browser.find("#plan-assignee").await?;
    assert_eq!(
        browser
            .execute(
                "return document.getElementById('plan-assignee').value;",
                vec![]
            )
            .await?,
        json!("coder")
    );

    model.push(tool_call(
        "write",
        "create_file",
        json!({"path": "greeting.txt", "content": "hello"}),
    ));
    model.push(tool_call(
        "report",
        "completion_report",
        json!({"status": "complete", "summary": "wrote greeting.txt", "output": "greeting.txt: hello"}),
    ));
    browser
        .find("#task-actions button[data-action=start]")
        .await?
        .click()
        .await?;

    // Its card moves to the completed column, and the detail shows the report,
    // the chain, the runs and the history, live.
    browser
        .wait_for(&format!(
            "document.querySelector('ul[data-status=completed] li[data-task=\"{id}\"]')"
        ))
        .await?;
    browser
        .wait_for("document.getElementById('task-status').textContent === 'completed'")
        .await?;
    browser
        .wait_for(
            "document.querySelector('#task-report')?.textContent.includes('wrote greeting.txt')",
        )
        .await?;
    browser
        .wait_for("document.querySelector('#task-chain')?.textContent.includes('coder')")
        .await?;
    browser
        .wait_for("document.querySelectorAll('#task-runs tbody tr').length === 2")
        .await?;
    wait_buttons(&browser, &["reopen"]).await?;
    wait_history_is_the_apis(&browser, &chorus, id).await?;
    let history = browser.find("#task-history").await?.text().await?;
    for words in [
        "created",
        "question_asked",
        "planning_finished",
        "started",
        "report_received",
        "active → completed",
    ] {
        assert!(history.contains(words), "{words} in {history:?}");
    }
    // No other card of it anywhere.
    assert_eq!(
        browser
            .execute(
                &format!("return document.querySelectorAll('li[data-task=\"{id}\"]').length;"),
                vec![]
            )
            .await?,
        json!(1)
    );
    assert_eq!(
        browser
            .execute("return window.notReloaded === true;", vec![])
            .await?,
        json!(true),
        "the page was not reloaded"
    );
    // The effect: the agent worked the task in its directory, where the attachment
    // uploaded from the page was given to it.
    let task_dir = chorus
        .agent_dir("coder")
        .join("workspace")
        .join(format!("tasks/{id}"));
    assert_eq!(
        std::fs::read_to_string(task_dir.join("greeting.txt"))?,
        "hello"
    );
    assert_eq!(
        std::fs::read_to_string(task_dir.join("notes.md"))?,
        "say hello"
    );

    // At phone width the board and the task fit the screen (the columns scroll
    // inside their own box).
    browser.resize(390, 844).await?;
    browser
        .wait_for(
            "window.innerWidth <= 400 && document.documentElement.scrollWidth <= window.innerWidth",
        )
        .await?;
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}

/// The buttons are the task's `actions` for its status, following it live (a
/// planned task shows Start, not Accept; failed, Reopen and Retry); the plan is a
/// form before Start; a viewer sees the task but no button and no form.
#[tokio::test]
async fn web_board_buttons_follow_the_status_and_a_viewer_sees_none() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, Some("[roles]\nvera = \"viewer\"\n")).await?;
    chorus.create_agent("coder").await?;
    let origin = chorus.origin();
    model.push(plan("coder"));
    let (id, _) = chorus
        .create_task(json!({"title": "Greet", "description": "Write a greeting file"}))
        .await?;
    let planned = chorus.wait_task(id, "planned", WAIT).await?;
    assert_eq!(planned["actions"], json!(["start", "fail"]));
    assert_eq!(planned["plan_editable"], json!(true));

    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#board/{id}")).await?;
    browser
        .wait_for("document.querySelector('#task-actions button[data-action=start]')")
        .await?;
    wait_buttons(&browser, &["start", "fail"]).await?;
    assert_eq!(browser.find("#task-status").await?.text().await?, "planned");
    // The plan may be edited before Start: saved through the API.
    browser
        .find("#plan-steps")
        .await?
        .type_text("\nsay it twice")
        .await?;
    browser.find("#task-plan-save").await?.click().await?;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let task = chorus
            .ok(Method::GET, &format!("/api/tasks/{id}"), None)
            .await?;
        if task["steps"] == json!(["write greeting.txt", "say it twice"]) {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "steps not saved: {task:#}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A change made elsewhere shows at once: failed, the buttons are Reopen and Retry.
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/fail"), None)
        .await?;
    browser
        .wait_for("document.querySelector('#task-actions button[data-action=retry]')")
        .await?;
    wait_buttons(&browser, &["reopen", "retry"]).await?;
    assert_eq!(browser.find("#task-status").await?.text().await?, "failed");
    assert!(
        browser
            .execute("return !document.getElementById('task-plan');", vec![])
            .await?
            == json!(true),
        "no plan form after Start"
    );
    browser
        .wait_for(&format!(
            "document.querySelector('ul[data-status=failed] li[data-task=\"{id}\"]')"
        ))
        .await?;
    browser.assert_only_origin(&origin).await?;

    // A viewer: the same task, its status and plan, and no button at all.
    let issued = chorus
        .ok(
            Method::POST,
            "/api/users/vera/tokens",
            Some(json!({"label": "web"})),
        )
        .await?;
    browser.find("#logout").await?.click().await?;
    browser.wait_for("location.pathname === '/login'").await?;
    browser
        .log_in(&origin, issued["token"].as_str().unwrap())
        .await?;
    browser.goto(&format!("{origin}/#board/{id}")).await?;
    browser
        .wait_for("document.getElementById('task-status')?.textContent === 'failed'")
        .await?;
    browser
        .wait_for("document.getElementById('task-assignee')?.textContent === 'coder'")
        .await?;
    let visible = browser
        .execute(
            "return [...document.querySelectorAll('#view-board button, #view-board input, #view-board textarea')]\
             .filter(b => b.getClientRects().length > 0).map(b => b.outerHTML);",
            vec![],
        )
        .await?;
    assert_eq!(visible, json!([]), "a viewer sees no control");
    assert_eq!(buttons(&browser).await?, Vec::<String>::new());
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}

/// A reload with `#board/<id>` shows the same task, its history once, and the
/// events after it are added once.
#[tokio::test]
async fn web_board_reload_keeps_the_open_task_and_its_history_once() -> anyhow::Result<()> {
    let Some(browser) = Browser::start().await? else {
        return Ok(());
    };
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    chorus.create_agent("coder").await?;
    let origin = chorus.origin();
    model.push(tool_call(
        "ask",
        "ask_questions",
        json!({"questions": [{"id": "q1", "question": "Which greeting?"}]}),
    ));
    let (id, _) = chorus
        .create_task(json!({"title": "Keep me open", "description": "after a reload"}))
        .await?;
    chorus.wait_task(id, "awaiting_input", WAIT).await?;

    browser.log_in(&origin, chorus.token()).await?;
    browser.goto(&format!("{origin}/#board/{id}")).await?;
    browser
        .find("#task-questions fieldset[data-question=q1]")
        .await?;
    wait_history_is_the_apis(&browser, &chorus, id).await?;
    let before = page_history(&browser).await?;
    assert!(before.len() >= 3, "{before:?}");

    browser.reload().await?;
    browser
        .wait_for("document.getElementById('task-title')?.textContent.includes('Keep me open')")
        .await?;
    assert_eq!(
        browser.execute("return location.hash;", vec![]).await?,
        json!(format!("#board/{id}"))
    );
    wait_history_is_the_apis(&browser, &chorus, id).await?;
    assert_eq!(
        page_history(&browser).await?,
        before,
        "the same history, not doubled"
    );
    assert_eq!(
        browser
            .execute(
                "return document.querySelector('li.card[aria-current=true]')?.dataset.task;",
                vec![]
            )
            .await?,
        json!(id.to_string())
    );

    // Events after the reload are added once each: an edit, then the answer.
    chorus
        .ok(
            Method::PATCH,
            &format!("/api/tasks/{id}"),
            Some(json!({"title": "Kept open"})),
        )
        .await?;
    browser
        .wait_for("document.getElementById('task-title').textContent.includes('Kept open')")
        .await?;
    model.push(plan("coder"));
    chorus
        .ok(
            Method::POST,
            &format!("/api/tasks/{id}/answers"),
            Some(json!({"answers": {"q1": "hello"}})),
        )
        .await?;
    browser
        .wait_for("document.getElementById('task-status').textContent === 'planned'")
        .await?;
    wait_history_is_the_apis(&browser, &chorus, id).await?;
    let after = page_history(&browser).await?;
    assert!(after.len() > before.len() + 2, "{before:?} then {after:?}");
    let mut unique = after.clone();
    unique.dedup();
    assert_eq!(unique, after, "each event once");
    // The answer shows, and the card is in the planned column.
    let questions = browser.find(".part-questions").await?.text().await?;
    assert!(questions.contains("hello"), "{questions}");
    browser
        .wait_for(&format!(
            "document.querySelector('ul[data-status=planned] li[data-task=\"{id}\"]')"
        ))
        .await?;
    // Deleted elsewhere (the API here): its card goes and the detail closes, live.
    let (status, _) = chorus
        .call(Method::DELETE, &format!("/api/tasks/{id}"), None)
        .await?;
    assert_eq!(status, 204);
    browser
        .wait_for(&format!(
            "!document.querySelector('li.card[data-task=\"{id}\"]') && location.hash === '#board'"
        ))
        .await?;
    browser.assert_only_origin(&origin).await?;
    browser.close().await?;
    Ok(())
}
