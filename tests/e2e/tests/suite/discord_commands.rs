//! Slash commands, approval buttons and status messages through the real binary,
//! with serenity connected to the fake Discord.

use std::time::Duration;

use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{FakeDiscord, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

use super::discord::{answers_in, is_status, with_bot_config};

const ADMIN_ROLE: &str = "100";
const OPERATOR_ROLE: &str = "111";
const OPERATOR: &str = "600000000000000002";
const VIEWER: &str = "600000000000000003";

const ROLES: &str = "[discord.roles]\n\"100\" = \"admin\"\n\"111\" = \"operator\"\n";

fn sub(name: &str, options: Value) -> Value {
    json!([{"name": name, "type": 1, "options": options}])
}

fn string(name: &str, value: &str) -> Value {
    json!({"name": name, "type": 3, "value": value})
}

/// The first answer to interaction `token`, once there is one.
async fn first_answer(discord: &FakeDiscord, token: &str) -> anyhow::Result<(String, Value)> {
    discord
        .wait_for("an interaction answer", Duration::from_secs(30), |d| {
            d.answers(token).into_iter().next()
        })
        .await
}

fn is_ephemeral(body: &Value) -> bool {
    body["data"]["flags"].as_u64().unwrap_or(0) & 64 != 0
}

#[tokio::test]
async fn agent_init_makes_a_channel_with_a_welcome_and_the_agent_answers_there()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let init = sub(
        "init",
        json!([
            string("name", "helper"),
            string("system_prompt", "You help with Rust.\nBe brief."),
        ]),
    );

    // A viewer may not create agents: told privately, nothing made.
    let refused = discord.slash(VIEWER, &[], "700000000000000100", "agent", init.clone());
    let (kind, body) = first_answer(&discord, &refused).await?;
    assert_eq!(kind, "callback");
    assert!(is_ephemeral(&body), "{body}");
    assert!(
        body["data"]["content"]
            .as_str()
            .unwrap()
            .contains("Only an operator or an admin"),
        "{body}"
    );
    assert!(discord.channels().is_empty());

    let token = discord.slash(
        OPERATOR,
        &[OPERATOR_ROLE],
        "700000000000000100",
        "agent",
        init,
    );
    let (_, body) = first_answer(&discord, &token).await?;
    let channel = discord.channels()[0].clone();
    let channel_id = channel["id"].as_str().unwrap().to_string();
    assert_eq!(channel["name"], "helper");
    assert_eq!(
        channel["topic"], "You help with Rust.",
        "the prompt's first line"
    );
    assert_eq!(body["type"], 4, "answered at once: {body}");
    assert!(
        body["data"]["content"]
            .as_str()
            .unwrap()
            .contains(&format!("<#{channel_id}>")),
        "{body}"
    );
    let welcome = discord
        .wait_for("the welcome", Duration::from_secs(30), |d| {
            d.posted()
                .into_iter()
                .find(|m| m["channel_id"] == channel_id.as_str())
        })
        .await?;
    let welcome = welcome["content"].as_str().unwrap();
    assert!(
        welcome.contains("You help with Rust.") && welcome.contains("standard"),
        "{welcome}"
    );
    let agent = chorus.agent("helper").await?;
    assert_eq!(agent["discord_channel_id"], channel_id.as_str());
    assert_eq!(agent["permissions"], "standard");

    // Any member's message there reaches the agent.
    model.push(text("Use an iterator."));
    let asked = discord.user_says(&channel_id, "How do I sum a Vec?", None);
    let answer = discord
        .wait_for("the answer", Duration::from_secs(30), |d| {
            answers_in(d, &channel_id)
                .into_iter()
                .find(|m| m["content"] == "Use an iterator.")
        })
        .await?;
    assert_eq!(answer["message_reference"]["message_id"], asked.as_str());

    // Listed; then destroyed, and its channel with it.
    let list = discord.slash(VIEWER, &[], &channel_id, "agent", sub("list", json!([])));
    let (_, body) = first_answer(&discord, &list).await?;
    assert!(
        body["data"]["content"]
            .as_str()
            .unwrap()
            .contains("**helper**"),
        "{body}"
    );
    let destroy = discord.slash(
        OPERATOR,
        &[OPERATOR_ROLE],
        "700000000000000100",
        "agent",
        sub("destroy", json!([string("name", "helper")])),
    );
    first_answer(&discord, &destroy).await?;
    discord
        .wait_for("the channel deleted", Duration::from_secs(30), |d| {
            d.deleted_channels().contains(&channel_id).then_some(())
        })
        .await?;
    let gone = chorus.api(Method::GET, "/api/agents/helper").send().await?;
    assert_eq!(gone.status(), 404);
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    Ok(())
}

#[tokio::test]
async fn a_slow_command_is_deferred_then_finished_with_an_edit() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000101";
    chorus
        .create_agent_with(json!({"name": "notes", "discord_channel_id": channel}))
        .await?;
    model.push(text("Noted: buy milk."));
    discord.user_says(channel, "Remember to buy milk", None);
    discord
        .wait_for("the answer", Duration::from_secs(30), |d| {
            answers_in(d, channel).into_iter().next()
        })
        .await?;
    // The session's description is written by the model, slowly.
    model.push(Reply::Delayed(
        Duration::from_secs(4),
        Box::new(text("Shopping list")),
    ));
    let token = discord.slash(
        OPERATOR,
        &[OPERATOR_ROLE],
        channel,
        "context",
        sub("save", json!([])),
    );
    let answers = discord
        .wait_for("the finished answer", Duration::from_secs(60), |d| {
            let answers = d.answers(&token);
            (answers.len() >= 2).then_some(answers)
        })
        .await?;
    assert_eq!(answers[0].0, "callback");
    assert_eq!(answers[0].1["type"], 5, "deferred: {:?}", answers[0]);
    assert_eq!(answers[1].0, "edit_original");
    let content = answers[1].1["content"].as_str().unwrap();
    assert!(
        content.contains("Saved session") && content.contains("Shopping list"),
        "{content}"
    );
    let history: Value = chorus
        .api(Method::GET, "/api/agents/notes/context/history")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(history["sessions"][0]["description"], "Shopping list");
    Ok(())
}

#[tokio::test]
async fn one_status_message_is_edited_while_a_thread_runs_and_thread_kill_all_stops_it()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000102";
    chorus
        .create_agent_with(json!({"name": "worker", "discord_channel_id": channel}))
        .await?;
    chorus
        .wait_worker_running("worker", Duration::from_secs(15))
        .await?;
    // A model call that takes 3 s, a tool, then a model call that never answers.
    model.push(Reply::Delayed(
        Duration::from_secs(3),
        Box::new(tool_call("c1", "view", json!({"path": ".gitkeep"}))),
    ));
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text("too late"))));
    let asked = discord.user_says(channel, "Look around", None);
    let edited = discord
        .wait_for(
            "the status edited to a later step",
            Duration::from_secs(30),
            |d| {
                d.edits()
                    .into_iter()
                    .find(|(_, _, body)| body["content"].as_str().unwrap_or("").contains("step 3"))
            },
        )
        .await?;
    let status_id = edited.1.clone();
    let statuses: Vec<Value> = discord.posted().into_iter().filter(is_status).collect();
    assert_eq!(statuses.len(), 1, "one status message: {statuses:#?}");
    assert_eq!(statuses[0]["id"], status_id.as_str());

    let kill = discord.slash(
        OPERATOR,
        &[OPERATOR_ROLE],
        channel,
        "thread",
        sub("kill", json!([string("id", "all")])),
    );
    let (_, body) = first_answer(&discord, &kill).await?;
    assert!(
        body["data"]["content"]
            .as_str()
            .unwrap()
            .contains("Killed #1"),
        "{body}"
    );
    let answer = discord
        .wait_for("the killed thread's reply", Duration::from_secs(30), |d| {
            answers_in(d, channel)
                .into_iter()
                .find(|m| m["content"] == "Thread killed.")
        })
        .await?;
    assert_eq!(answer["message_reference"]["message_id"], asked.as_str());
    let status = discord
        .posted()
        .into_iter()
        .find(|m| m["id"] == status_id.as_str())
        .unwrap();
    assert!(
        status["content"]
            .as_str()
            .unwrap()
            .starts_with("⏹️ Thread #1 killed"),
        "{status}"
    );
    // Edits were paced: never two within 2 s is checked by the unit tests; here,
    // a handful at most for a run of a few seconds.
    let edits = discord.edits().len();
    assert!((2..=8).contains(&edits), "{edits} edits");
    hold.release();
    let thread: Value = chorus
        .api(Method::GET, "/api/agents/worker/threads/1")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(thread["status"], "killed");
    Ok(())
}

/// An agent whose file writes need a person.
fn careful(channel: &str) -> Value {
    json!({
        "name": "careful", "discord_channel_id": channel,
        "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
    })
}

#[tokio::test]
async fn an_ask_posts_buttons_a_viewer_is_refused_and_an_operator_approves() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000103";
    chorus.create_agent_with(careful(channel)).await?;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "notes.txt", "content": "hello"}),
    ));
    model.push(text("Written."));
    discord.user_says(channel, "Write notes.txt", None);
    let request = discord
        .wait_for("the approval request", Duration::from_secs(30), |d| {
            d.posted()
                .into_iter()
                .find(|m| m["components"].as_array().is_some_and(|c| !c.is_empty()))
        })
        .await?;
    let content = request["content"].as_str().unwrap();
    assert!(
        content.contains("create_file") && content.contains("Why it asks"),
        "{content}"
    );
    let buttons = &request["components"][0]["components"];
    assert_eq!(buttons[0]["label"], "Approve");
    assert_eq!(buttons[1]["label"], "Deny");
    let approve = buttons[0]["custom_id"].as_str().unwrap().to_string();

    // A viewer's click: refused where only they see it; the request stays open.
    let refused = discord.click(VIEWER, &[], &request, &approve);
    let (_, body) = first_answer(&discord, &refused).await?;
    assert_eq!(body["type"], 4);
    assert!(is_ephemeral(&body), "{body}");
    let pending: Value = chorus
        .api(Method::GET, "/api/approvals")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(pending.as_array().map(Vec::len), Some(1), "{pending}");

    // An operator's click approves: the tool runs and the message shows who.
    let clicked = discord.click(OPERATOR, &[OPERATOR_ROLE], &request, &approve);
    let (_, body) = first_answer(&discord, &clicked).await?;
    assert_eq!(body["type"], 7, "the message is updated: {body}");
    discord
        .wait_for("the answer", Duration::from_secs(30), |d| {
            answers_in(d, channel)
                .into_iter()
                .find(|m| m["content"] == "Written.")
        })
        .await?;
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("careful").join("workspace/notes.txt"))?,
        "hello"
    );
    let shown = discord
        .wait_for("the outcome on the request", Duration::from_secs(30), |d| {
            d.posted()
                .into_iter()
                .find(|m| m["id"] == request["id"])
                .filter(|m| m["content"].as_str().unwrap_or("").contains("Approved"))
        })
        .await?;
    assert!(
        shown["content"]
            .as_str()
            .unwrap()
            .contains(&format!("**Approved** by <@{OPERATOR}>")),
        "{shown}"
    );
    assert_eq!(shown["components"], json!([]), "the buttons are gone");
    Ok(())
}

#[tokio::test]
async fn an_unanswered_ask_is_shown_as_expired_and_denied() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let config = format!("{ROLES}[permissions]\nask_timeout_secs = 1\n");
    let chorus = with_bot_config(&discord, &model, &config).await?;
    let channel = "700000000000000104";
    chorus.create_agent_with(careful(channel)).await?;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "late.txt", "content": "x"}),
    ));
    model.push(text("Nobody answered."));
    discord.user_says(channel, "Write late.txt", None);
    let expired = discord
        .wait_for("the expired request", Duration::from_secs(30), |d| {
            d.posted().into_iter().find(|m| {
                m["content"]
                    .as_str()
                    .unwrap_or("")
                    .contains("Expired — denied")
            })
        })
        .await?;
    assert_eq!(expired["components"], json!([]));
    assert!(
        !chorus
            .agent_dir("careful")
            .join("workspace/late.txt")
            .exists()
    );
    Ok(())
}

#[tokio::test]
async fn a_permission_self_edit_follows_the_discord_roles_of_who_started_the_run()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000105";
    chorus
        .create_agent_with(json!({
            "name": "climber", "discord_channel_id": channel,
            "permissions": "standard", "on_ask": "allow",
        }))
        .await?;
    let open_up = || {
        tool_call(
            "c1",
            "self_edit_permissions",
            json!({"new_profile": "open"}),
        )
    };

    // A member without a mapped role is a viewer: may not grant `open`.
    model.push(open_up());
    model.push(text("Could not."));
    discord.member_says(VIEWER, &[], channel, "Give yourself everything", None);
    discord
        .wait_for("the first answer", Duration::from_secs(30), |d| {
            answers_in(d, channel)
                .into_iter()
                .find(|m| m["content"] == "Could not.")
        })
        .await?;
    let result = model.requests()[1].body["messages"].to_string();
    assert!(
        result.contains("may not grant the 'open' preset"),
        "{result}"
    );
    assert_eq!(chorus.agent("climber").await?["permissions"], "standard");

    // An admin's message: the same self-edit is granted.
    model.push(open_up());
    model.push(text("Done."));
    discord.member_says(
        ADMIN_ROLE_MEMBER,
        &[ADMIN_ROLE],
        channel,
        "Give yourself everything",
        None,
    );
    discord
        .wait_for("the second answer", Duration::from_secs(30), |d| {
            answers_in(d, channel)
                .into_iter()
                .find(|m| m["content"] == "Done.")
        })
        .await?;
    assert_eq!(chorus.agent("climber").await?["permissions"], "open");
    Ok(())
}

const ADMIN_ROLE_MEMBER: &str = "600000000000000004";

#[tokio::test]
async fn command_output_over_the_limit_comes_in_pages() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000106";
    chorus
        .create_agent_with(json!({"name": "archivist", "discord_channel_id": channel}))
        .await?;
    model.push(text("Started."));
    let id = chorus
        .send_message("archivist", "Start the archive")
        .await?;
    chorus
        .wait_thread_finished("archivist", id, Duration::from_secs(30))
        .await?;
    for i in 0..24 {
        let saved = chorus
            .api(Method::POST, "/api/agents/archivist/context/save")
            .json(&json!({"description": format!("archive snapshot number {i:02} of the quarterly records")}))
            .send()
            .await?;
        assert_eq!(saved.status(), 201);
    }
    let token = discord.slash(VIEWER, &[], channel, "context", sub("history", json!([])));
    let pages = discord
        .wait_for("every page", Duration::from_secs(30), |d| {
            let answers = d.answers(&token);
            (answers.len() >= 2).then_some(answers)
        })
        .await?;
    assert_eq!(pages[0].0, "callback");
    let first = pages[0].1["data"]["content"].as_str().unwrap().to_string();
    let rest: Vec<String> = pages[1..]
        .iter()
        .map(|(kind, body)| {
            assert_eq!(kind, "followup");
            body["content"].as_str().unwrap().to_string()
        })
        .collect();
    let all = format!("{first}\n{}", rest.join("\n"));
    for i in 0..24 {
        assert!(all.contains(&format!("snapshot number {i:02}")), "{all}");
    }
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    Ok(())
}

/// `/jobs` lists the channel's agent's background jobs; `/tasks`, the command's old
/// name, answers the same until the task board takes that word.
#[tokio::test]
async fn jobs_and_its_old_name_tasks_list_the_agents_background_jobs() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000107";
    chorus
        .create_agent_with(
            json!({"name": "runner", "discord_channel_id": channel, "permissions": "open"}),
        )
        .await?;
    let marker = format!("304.{}{}", std::process::id(), line!());
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}"), "run_in_background": true}),
    ));
    model.push(text("Started."));
    let id = chorus.send_message("runner", "start it").await?;
    chorus
        .wait_thread_finished("runner", id, Duration::from_secs(30))
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let listed: Value = chorus
            .api(Method::GET, "/api/agents/runner/jobs")
            .send()
            .await?
            .json()
            .await?;
        if listed["jobs"][0]["status"] == "running" {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "the job never ran: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let mut said = Vec::new();
    for command in ["jobs", "tasks"] {
        let token = discord.slash(VIEWER, &[], channel, command, json!([]));
        // The answer itself (a slow one comes as an edit of a deferral).
        let content = discord
            .wait_for("the list", Duration::from_secs(30), |d| {
                d.answers(&token).into_iter().find_map(|(_, body)| {
                    body["data"]["content"]
                        .as_str()
                        .or(body["content"].as_str())
                        .map(str::to_string)
                })
            })
            .await?;
        said.push(content);
    }
    assert!(
        said[0].starts_with("Background jobs of **runner**:")
            && said[0].contains("job 1 · running")
            && said[0].contains(&format!("sleep {marker}")),
        "{said:?}"
    );
    assert_eq!(said[0], said[1]);
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    Ok(())
}

/// `/memory show` lists the channel's agent's entries with their ids; `/memory
/// search` finds one, saying where; `/memory forget` retracts one (an operator's act: a viewer is refused and nothing
/// changes); `/agent configure key:soul` replaces its SOUL.md.
#[tokio::test]
async fn memory_show_forget_and_soul_from_discord() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot_config(&discord, &model, ROLES).await?;
    let channel = "700000000000000130";
    chorus
        .create_agent_with(json!({"name": "keeper", "discord_channel_id": channel}))
        .await?;
    let memory = chorus.agent_dir("keeper").join("memory/MEMORY.md");
    std::fs::write(
        &memory,
        "# Long-term memory\n\n- Ada likes tea. <!-- mem:0badcafe thread:3 call:toolu_9 at:2026-11-26T21:40:00Z -->\n",
    )?;
    let content = |body: &Value| {
        body["data"]["content"]
            .as_str()
            .or(body["content"].as_str())
            .unwrap_or_default()
            .to_string()
    };

    let token = discord.slash(VIEWER, &[], channel, "memory", sub("show", json!([])));
    let (_, body) = first_answer(&discord, &token).await?;
    let shown = content(&body);
    assert!(shown.contains("`0badcafe` Ada likes tea."), "{shown}");
    assert!(shown.contains("thread 3"), "{shown}");

    let search = sub("search", json!([string("query", "TEA?")]));
    let token = discord.slash(VIEWER, &[], channel, "memory", search);
    let (_, body) = first_answer(&discord, &token).await?;
    let found = content(&body);
    assert!(
        found.contains("[memory memory/MEMORY.md:3] Ada likes tea."),
        "{found}"
    );

    let forget = sub("forget", json!([string("id", "0badcafe")]));
    let token = discord.slash(VIEWER, &[], channel, "memory", forget.clone());
    let (_, body) = first_answer(&discord, &token).await?;
    assert!(content(&body).starts_with("Only "), "{body}");
    assert!(std::fs::read_to_string(&memory)?.contains("Ada likes tea."));
    let token = discord.slash(OPERATOR, &[OPERATOR_ROLE], channel, "memory", forget);
    let (_, body) = first_answer(&discord, &token).await?;
    assert!(content(&body).contains("forgot `0badcafe`"), "{body}");
    assert!(!std::fs::read_to_string(&memory)?.contains("Ada likes tea."));

    let soul = sub(
        "configure",
        json!([
            string("name", "keeper"),
            string("key", "soul"),
            string("value", "You are calm.")
        ]),
    );
    let token = discord.slash(OPERATOR, &[OPERATOR_ROLE], channel, "agent", soul);
    let (_, body) = first_answer(&discord, &token).await?;
    assert!(content(&body).contains("SOUL.md set"), "{body}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("keeper").join("SOUL.md"))?,
        "You are calm."
    );
    Ok(())
}
