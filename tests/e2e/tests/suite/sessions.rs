//! Saved sessions through the real binaries (SPEC F1–F4): save, history, restore and
//! clear over HTTP with the files on disk in seed 003's format; the idle timer at
//! 1 s; the save of every context at SIGTERM.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

/// `method path` with `body` (none when `Value::Null`); the status and the answer.
async fn call(
    chorus: &Chorus,
    method: Method,
    path: &str,
    body: Value,
) -> anyhow::Result<(u16, Value)> {
    let mut request = chorus.api(method, path);
    if !body.is_null() {
        request = request.json(&body);
    }
    let response = request.send().await?;
    let status = response.status().as_u16();
    Ok((status, response.json().await?))
}

/// A finished thread of `agent`: the user's message, a tool call and its result,
/// and an answer.
async fn one_conversation(
    chorus: &Chorus,
    model: &FakeModel,
    agent: &str,
    content: &str,
) -> anyhow::Result<u64> {
    model.push(tool_call("tc_001", "view", json!({"path": "notes.txt"})));
    model.push(text("There are no notes yet."));
    let thread = chorus.send_message(agent, content).await?;
    let done = chorus
        .wait_thread_finished(agent, thread, Duration::from_secs(30))
        .await?;
    anyhow::ensure!(done["status"] == "completed", "{done:#}");
    Ok(thread)
}

/// The session file `name` of `agent`, parsed; checks it is private.
fn session_file(chorus: &Chorus, agent: &str, name: &str) -> anyhow::Result<Value> {
    let path = chorus.agent_dir(agent).join("sessions").join(name);
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    anyhow::ensure!(mode == 0o600, "{} has mode {mode:o}", path.display());
    Ok(serde_json::from_str(&std::fs::read_to_string(&path)?)?)
}

#[tokio::test]
async fn save_history_restore_and_clear_over_http() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("keeper").await?;
    let base = "/api/agents/keeper/context";
    let first = one_conversation(
        &chorus,
        &model,
        "keeper",
        "Set up the project notes\nwith details",
    )
    .await?;

    // Save without a description: the agent's model writes one (one call, no
    // tools, after the conversation), the context kept.
    model.push(text("Project notes: set up, none written yet\n"));
    let (status, saved) = call(&chorus, Method::POST, &format!("{base}/save"), Value::Null).await?;
    assert_eq!(status, 201, "{saved}");
    let session = &saved["session"];
    assert_eq!(
        session["description"],
        "Project notes: set up, none written yet"
    );
    let asked = model.requests().last().unwrap().body.clone();
    assert!(
        asked["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains("You name saved conversations"),
        "{asked:#}"
    );
    assert_eq!(asked.get("tools"), None, "{asked:#}");
    assert!(
        asked.to_string().contains("There are no notes yet."),
        "the conversation is in the request: {asked:#}"
    );
    assert_eq!(session["trigger"], "manual_save");
    assert_eq!(session["message_count"], 4);
    let id = session["id"].as_str().unwrap().to_string();
    let name = session["file"].as_str().unwrap();
    assert!(
        name.ends_with(&format!(
            "_project-notes-set-up-none-written-yet_{}.json",
            &id[..8]
        )),
        "{name}"
    );

    // The file is seed 003's format.
    let file = session_file(&chorus, "keeper", name)?;
    assert_eq!(file["id"], id.as_str());
    assert_eq!(file["agent_name"], "keeper");
    assert_eq!(file["trigger"], "manual_save");
    assert_eq!(file["message_count"], 4);
    let messages = file["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool_result", "assistant"]);
    assert_eq!(
        messages[1]["tool_calls"][0],
        json!({"id": "tc_001", "name": "view", "params": {"path": "notes.txt"}})
    );
    assert_eq!(messages[2]["tool_call_id"], "tc_001");
    assert_eq!(messages[2]["tool_name"], "view");
    assert!(messages.iter().all(|m| m["thread_id"] == first));
    assert_eq!(messages[3]["content"], "There are no notes yet.");

    let (status, checkpoint) = call(
        &chorus,
        Method::POST,
        &format!("{base}/save"),
        json!({"description": "checkpoint"}),
    )
    .await?;
    assert_eq!(status, 201, "{checkpoint}");
    let (status, history) = call(
        &chorus,
        Method::GET,
        &format!("{base}/history"),
        Value::Null,
    )
    .await?;
    assert_eq!(status, 200);
    let listed: Vec<&str> = history["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["description"].as_str().unwrap())
        .collect();
    assert_eq!(
        listed,
        ["checkpoint", "Project notes: set up, none written yet"],
        "newest first"
    );
    assert_eq!(history["next"], Value::Null);

    // Restore: the current context is saved, then one idle thread holds the
    // session's messages; its last message is the one to reply to.
    let (status, restored) = call(
        &chorus,
        Method::POST,
        &format!("{base}/restore"),
        json!({"session_id": id}),
    )
    .await?;
    assert_eq!(status, 200, "{restored}");
    assert_eq!(restored["session"]["id"], id.as_str());
    assert_eq!(restored["saved_before"]["trigger"], "context_clear");
    assert!(restored["message_id"].as_i64().unwrap() > 0);
    let thread_id = restored["thread_id"].as_u64().unwrap();
    assert_ne!(thread_id, first);
    let thread = chorus.thread("keeper", thread_id).await?;
    assert_eq!(thread["status"], "idle");
    let contents: Vec<&str> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(contents[0], "Set up the project notes\nwith details");
    assert_eq!(contents[3], "There are no notes yet.");
    assert_eq!(
        thread["messages"][1]["tool_calls"][0]["arguments"],
        r#"{"path":"notes.txt"}"#
    );

    // Clear: the restored context is saved, the idle thread ends completed, and
    // nothing is left to save.
    let (status, cleared) =
        call(&chorus, Method::POST, &format!("{base}/clear"), Value::Null).await?;
    assert_eq!(status, 200, "{cleared}");
    assert_eq!(cleared["threads_completed"], json!([thread_id]));
    assert_eq!(cleared["saved"]["message_count"], 4);
    assert!(cleared["cleared_at"].is_string());
    assert_eq!(
        chorus.thread("keeper", thread_id).await?["status"],
        "completed"
    );
    let (status, nothing) = call(&chorus, Method::POST, &format!("{base}/save"), json!({})).await?;
    assert_eq!(
        (status, &nothing["error"]["code"]),
        (409, &json!("nothing_to_save")),
        "{nothing}"
    );
    // The thread's history is kept.
    assert_eq!(
        chorus.thread("keeper", first).await?["messages"]
            .as_array()
            .unwrap()
            .len(),
        4
    );

    // Bad requests say what is wrong.
    let (status, unknown) = call(
        &chorus,
        Method::POST,
        &format!("{base}/restore"),
        json!({"session_id": "no-such-session"}),
    )
    .await?;
    assert_eq!(status, 404, "{unknown}");
    assert!(
        unknown["error"]["message"]
            .as_str()
            .unwrap()
            .contains("context/history")
    );
    let (status, _) = call(
        &chorus,
        Method::POST,
        &format!("{base}/save"),
        json!({"descripton": "x"}),
    )
    .await?;
    assert_eq!(status, 400);
    std::fs::write(
        chorus.agent_dir("keeper").join("sessions").join(name),
        "{ torn",
    )?;
    let (status, corrupt) = call(
        &chorus,
        Method::POST,
        &format!("{base}/restore"),
        json!({"session_id": id}),
    )
    .await?;
    assert_eq!(
        (status, &corrupt["error"]["code"]),
        (422, &json!("session_file_corrupt")),
        "{corrupt}"
    );
    let (status, _) = call(
        &chorus,
        Method::GET,
        "/api/agents/nobody/context/history",
        Value::Null,
    )
    .await?;
    assert_eq!(status, 404);
    Ok(())
}

#[tokio::test]
async fn an_idle_agent_is_saved_cleared_and_notified() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    let agent = chorus
        .create_agent_with(json!({"name": "dozy", "idle_timeout_secs": 1}))
        .await?;
    assert_eq!(
        (
            agent["idle_timeout_secs"].clone(),
            agent["effective_idle_timeout_secs"].clone()
        ),
        (json!(1), json!(1))
    );
    let mut feed = chorus.open_events("?agent=dozy", None).await?;
    let thread = one_conversation(&chorus, &model, "dozy", "Tidy the notes").await?;
    model.push(text("Notes tidied"));

    let notification = tokio::time::timeout(Duration::from_secs(20), async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(notification["kind"], "idle_save");
    assert_eq!(notification["agent"], "dozy");
    assert_eq!(notification["thread_id"], Value::Null);
    let id = notification["session_id"].as_str().unwrap();
    assert_eq!(
        notification["text"],
        format!(
            "Session saved: Notes tidied. Context cleared after 1 second of inactivity. \
             Use context restore {id} to resume."
        )
    );
    let (_, history) = call(
        &chorus,
        Method::GET,
        "/api/agents/dozy/context/history",
        Value::Null,
    )
    .await?;
    let session = &history["sessions"][0];
    assert_eq!(
        (session["id"].as_str(), session["trigger"].as_str()),
        (Some(id), Some("idle_timeout"))
    );
    let file = session_file(&chorus, "dozy", session["file"].as_str().unwrap())?;
    assert_eq!(file["trigger"], "idle_timeout");
    assert!(
        file["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["thread_id"] == thread)
    );
    let (status, _) = call(
        &chorus,
        Method::POST,
        "/api/agents/dozy/context/save",
        Value::Null,
    )
    .await?;
    assert_eq!(status, 409, "the context was cleared");

    // The timeout is the agent's to set: 0 is never, null the server's default.
    for (value, own, effective) in [(json!(0), json!(0), 0), (Value::Null, Value::Null, 1800)] {
        let (status, view) = call(
            &chorus,
            Method::PATCH,
            "/api/agents/dozy",
            json!({"idle_timeout_secs": value}),
        )
        .await?;
        assert_eq!(status, 200, "{view}");
        assert_eq!(
            (
                view["idle_timeout_secs"].clone(),
                view["effective_idle_timeout_secs"].as_u64()
            ),
            (own, Some(effective))
        );
    }
    let (status, refused) = call(
        &chorus,
        Method::PATCH,
        "/api/agents/dozy",
        json!({"idle_timeout_secs": 1_000_000_000u64}),
    )
    .await?;
    assert_eq!(status, 400, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("at most")
    );
    Ok(())
}

#[tokio::test]
async fn sigterm_saves_every_context_as_a_shutdown_session() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("data");
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    chorus.create_agent("busy").await?;
    chorus.create_agent("quiet").await?;
    one_conversation(&chorus, &model, "busy", "Plan the release").await?;
    let sessions_dir = chorus.agent_dir("busy").join("sessions");
    assert!(chorus.stop().await?.success());

    let files: Vec<_> = std::fs::read_dir(&sessions_dir)?.collect::<Result<_, _>>()?;
    assert_eq!(files.len(), 1, "{files:?}");
    let file: Value = serde_json::from_str(&std::fs::read_to_string(files[0].path())?)?;
    assert_eq!(file["trigger"], "shutdown");
    // A stop asks no model: the description is the first line.
    assert_eq!(file["description"], "Plan the release");
    assert_eq!(file["message_count"], 4);
    assert_eq!(
        std::fs::read_dir(data.join("agents/quiet/sessions"))?.count(),
        0,
        "an agent without context saves nothing"
    );

    // After a restart the session is listed and restores.
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    let (_, history) = call(
        &chorus,
        Method::GET,
        "/api/agents/busy/context/history",
        Value::Null,
    )
    .await?;
    assert_eq!(history["sessions"][0]["trigger"], "shutdown");
    let (status, restored) = call(
        &chorus,
        Method::POST,
        "/api/agents/busy/context/restore",
        json!({"session_id": file["id"]}),
    )
    .await?;
    assert_eq!(status, 200, "{restored}");
    Ok(())
}

#[tokio::test]
async fn the_next_model_call_after_a_restore_carries_the_restored_session() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("memo").await?;
    let base = "/api/agents/memo/context";
    one_conversation(&chorus, &model, "memo", "Remember the codeword: heron").await?;
    let (status, saved) = call(
        &chorus,
        Method::POST,
        &format!("{base}/save"),
        json!({"description": "the codeword"}),
    )
    .await?;
    assert_eq!(status, 201, "{saved}");
    let session = saved["session"]["id"].clone();
    let (status, _) = call(&chorus, Method::POST, &format!("{base}/clear"), Value::Null).await?;
    assert_eq!(status, 200);
    one_conversation(&chorus, &model, "memo", "Unrelated: count the files").await?;

    let (status, restored) = call(
        &chorus,
        Method::POST,
        &format!("{base}/restore"),
        json!({"session_id": session}),
    )
    .await?;
    assert_eq!(status, 200, "{restored}");
    let thread = restored["thread_id"].as_u64().unwrap();
    assert_eq!(
        chorus.thread("memo", thread).await?["summary"],
        "the codeword"
    );

    // A reply to the restored thread's last message wakes it: the model sees the
    // session, and nothing of the context the restore replaced.
    model.push(text("The codeword is heron."));
    let response = chorus
        .api(Method::POST, "/api/agents/memo/messages")
        .json(&json!({"content": "What was the codeword?", "reply_to": restored["message_id"]}))
        .send()
        .await?;
    assert_eq!(response.status(), 202);
    let routed: Value = response.json().await?;
    assert_eq!(
        (routed["thread_id"].as_u64(), routed["routed"].as_str()),
        (Some(thread), Some("injected")),
        "{routed:#}"
    );
    let done = chorus
        .wait_thread_finished("memo", thread, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    let asked = model.requests().last().unwrap().body.to_string();
    for seen in [
        "Remember the codeword: heron",
        "There are no notes yet.",
        "What was the codeword?",
    ] {
        assert!(asked.contains(seen), "{seen:?} not in {asked}");
    }
    assert!(!asked.contains("Unrelated"), "{asked}");
    Ok(())
}
