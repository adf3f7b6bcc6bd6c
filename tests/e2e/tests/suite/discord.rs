//! The Discord front end through the real binary, with serenity connected to a fake
//! Discord on 127.0.0.1 (REST and gateway).

use std::time::Duration;

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeDiscord, FakeOpenAi};
use reqwest::Method;

#[tokio::test]
async fn the_bot_connects_and_registers_its_commands_in_the_guild() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .env("DISCORD_TOKEN", "fake-bot-token")
        .env("DISCORD_GUILD_ID", "800000000000000001")
        .env("CHORUS_DISCORD_API_BASE", &discord.base_url)
        .start()
        .await?;
    let (guild, commands) = discord
        .wait_for("command registration", Duration::from_secs(30), |d| {
            d.commands().into_iter().next()
        })
        .await?;
    assert_eq!(
        guild, "800000000000000001",
        "registered in the guild, not globally"
    );
    let mut names: Vec<&str> = commands
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        // `tasks` is `jobs` under its old name; the task board is `task`.
        [
            "agent", "context", "jobs", "memory", "schedule", "settings", "status", "task",
            "tasks", "thread"
        ]
    );
    let agent = commands
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "agent")
        .unwrap();
    let subs: Vec<&str> = agent["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(subs, ["init", "destroy", "list", "configure"]);
    let task = commands
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "task")
        .unwrap();
    let subs: Vec<&str> = task["options"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|o| o["name"].as_str())
        .collect();
    assert_eq!(subs, ["create", "list", "show", "answer", "start"]);

    // It identified with the token and asked for message text (MESSAGE_CONTENT).
    let identify = &discord.identifies()[0];
    assert_eq!(identify["token"], "Bot fake-bot-token");
    let intents = identify["intents"].as_u64().unwrap();
    assert_ne!(intents & (1 << 15), 0, "MESSAGE_CONTENT: {intents:b}");
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    // The HTTP API runs beside it.
    let health = chorus.anonymous(Method::GET, "/healthz").send().await?;
    assert_eq!(health.status(), 200);
    Ok(())
}

#[tokio::test]
async fn an_unreachable_discord_never_stops_the_http_api() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .env("DISCORD_TOKEN", "fake-bot-token")
        .env("CHORUS_DISCORD_API_BASE", "http://127.0.0.1:9")
        .start()
        .await?;
    let health = chorus.anonymous(Method::GET, "/healthz").send().await?;
    assert_eq!(health.status(), 200);
    chorus.create_agent("still-here").await?;
    assert!(
        chorus
            .output()
            .contains("cannot start the Discord front end"),
        "{}",
        chorus.output()
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_is_bound_to_one_discord_channel_through_the_api() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    let first = chorus
        .create_agent_with(
            serde_json::json!({"name": "first", "discord_channel_id": "700000000000000001"}),
        )
        .await?;
    assert_eq!(first["discord_channel_id"], "700000000000000001");
    let taken = chorus
        .api(Method::POST, "/api/agents")
        .json(&serde_json::json!({"name": "second", "discord_channel_id": "700000000000000001"}))
        .send()
        .await?;
    assert_eq!(taken.status(), 409);
    let said: serde_json::Value = taken.json().await?;
    assert!(
        said["error"]["message"]
            .as_str()
            .unwrap()
            .contains("'first'"),
        "{said}"
    );
    let bad = chorus
        .api(Method::POST, "/api/agents")
        .json(&serde_json::json!({"name": "third", "discord_channel_id": "general"}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    // Unbound, the channel is free for another agent; binding it twice is refused.
    chorus.create_agent("second").await?;
    let unbound = chorus
        .api(Method::PATCH, "/api/agents/first")
        .json(&serde_json::json!({"discord_channel_id": null}))
        .send()
        .await?;
    assert_eq!(unbound.status(), 200);
    let bound = chorus
        .api(Method::PATCH, "/api/agents/second")
        .json(&serde_json::json!({"discord_channel_id": "700000000000000001"}))
        .send()
        .await?;
    assert_eq!(bound.status(), 200);
    let again = chorus
        .api(Method::PATCH, "/api/agents/first")
        .json(&serde_json::json!({"discord_channel_id": "700000000000000001"}))
        .send()
        .await?;
    assert_eq!(again.status(), 409);
    assert_eq!(
        chorus.agent("second").await?["discord_channel_id"],
        "700000000000000001"
    );
    Ok(())
}

/// Whether a posted message is a thread's status message.
pub(crate) fn is_status(message: &serde_json::Value) -> bool {
    let content = message["content"].as_str().unwrap_or("");
    ["⏳", "✅", "❌", "⏹️"]
        .iter()
        .any(|mark| content.starts_with(mark))
}

/// What the bot posted in `channel`, status messages left out.
pub(crate) fn answers_in(discord: &FakeDiscord, channel: &str) -> Vec<serde_json::Value> {
    discord
        .posted()
        .into_iter()
        .filter(|m| m["channel_id"] == channel && !is_status(m))
        .collect()
}

/// Chorus with the bot connected to `discord`, its commands registered.
async fn with_bot(
    discord: &FakeDiscord,
    model: &chorus_test_support::FakeModel,
) -> anyhow::Result<Chorus> {
    with_bot_config(discord, model, "").await
}

/// Like [`with_bot`], with `config` as chorus.toml.
pub(crate) async fn with_bot_config(
    discord: &FakeDiscord,
    model: &chorus_test_support::FakeModel,
    config: &str,
) -> anyhow::Result<Chorus> {
    let chorus = Chorus::builder()
        .openai_fake(model)
        .config(config)
        .env("DISCORD_TOKEN", "fake-bot-token")
        .env(
            "DISCORD_GUILD_ID",
            chorus_test_support::fake_discord::GUILD_ID,
        )
        .env("CHORUS_DISCORD_API_BASE", &discord.base_url)
        .start()
        .await?;
    discord
        .wait_for("the bot ready", Duration::from_secs(30), |d| {
            d.commands().into_iter().next()
        })
        .await?;
    Ok(chorus)
}

#[tokio::test]
async fn a_channel_message_is_answered_as_a_reply_and_a_reply_continues_the_thread()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot(&discord, &model).await?;
    let channel = "700000000000000009";
    chorus
        .create_agent_with(serde_json::json!({"name": "helper", "discord_channel_id": channel}))
        .await?;

    model.push(text("The capital is Paris."));
    let asked = discord.user_says(channel, "What is the capital of France?", None);
    let answer = discord
        .wait_for("the answer", Duration::from_secs(30), |d| {
            answers_in(d, channel).into_iter().next()
        })
        .await?;
    assert_eq!(answer["content"], "The capital is Paris.");
    assert_eq!(
        answer["message_reference"]["message_id"],
        asked.as_str(),
        "posted as a reply"
    );

    // A reply to the answer continues that thread: the model sees the history.
    model.push(text("About 2.1 million people."));
    let answer_id = answer["id"].as_str().unwrap().to_string();
    let followup = discord.user_says(channel, "And its population?", Some(&answer_id));
    let second = discord
        .wait_for("the second answer", Duration::from_secs(30), |d| {
            d.posted()
                .into_iter()
                .find(|m| m["content"] == "About 2.1 million people.")
        })
        .await?;
    assert_eq!(second["message_reference"]["message_id"], followup.as_str());
    let last = model.requests().last().unwrap().body.to_string();
    assert!(
        last.contains("What is the capital of France?") && last.contains("The capital is Paris."),
        "{last}"
    );
    // Both exchanges belong to one conversation: the reply continued thread 1.
    let threads: serde_json::Value = chorus
        .api(Method::GET, "/api/agents/helper/threads")
        .send()
        .await?
        .json()
        .await?;
    let continued = threads
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["id"] == 2)
        .unwrap();
    assert_eq!(continued["continued_from"], 1, "{threads:#}");
    assert!(discord.strays().is_empty(), "{:?}", discord.strays());
    Ok(())
}

#[tokio::test]
async fn a_429_is_waited_out_and_a_long_answer_arrives_in_parts_with_its_code_intact()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot(&discord, &model).await?;
    let channel = "700000000000000010";
    chorus
        .create_agent_with(serde_json::json!({"name": "coder", "discord_channel_id": channel}))
        .await?;
    let code: String = (0..80)
        .map(|i| format!("let value_{i:02} = compute({i});\n"))
        .collect();
    let long = format!(
        "{}```rust\n{code}```\nThat is all.",
        "Here is the change.\n".repeat(40)
    );
    assert!(long.chars().count() > 2900);
    model.push(text(&long));
    discord.rate_limit_next(1, 0.4);
    discord.user_says(channel, "Write the code", None);
    let parts = discord
        .wait_for("both parts", Duration::from_secs(30), |d| {
            let parts = answers_in(d, channel);
            (parts.len() >= 2).then_some(parts)
        })
        .await?;
    assert_eq!(discord.refused(), 1, "the 429 was given");
    assert_eq!(parts.len(), 2, "nothing lost, nothing twice: {parts:#?}");
    let first = parts[0]["content"].as_str().unwrap();
    let second = parts[1]["content"].as_str().unwrap();
    assert!(first.chars().count() <= 2000 && second.chars().count() <= 2000);
    assert!(first.ends_with("```"), "the block is closed: {first}");
    assert!(second.starts_with("```rust\n"), "and reopened: {second}");
    assert!(
        parts[0]["message_reference"].is_object(),
        "the first part is the reply"
    );
    assert!(second.ends_with("That is all."));
    Ok(())
}

#[tokio::test]
async fn an_idle_save_is_posted_in_the_agents_channel() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot(&discord, &model).await?;
    let channel = "700000000000000011";
    chorus
        .create_agent_with(serde_json::json!({
            "name": "dozy", "discord_channel_id": channel, "idle_timeout_secs": 1,
        }))
        .await?;
    model.push(text("Noted."));
    // The idle save asks the model for a description.
    model.push(text("A note was taken"));
    discord.user_says(channel, "Take a note", None);
    let notice = discord
        .wait_for("the idle notification", Duration::from_secs(30), |d| {
            d.posted().into_iter().find(|m| {
                m["channel_id"] == channel
                    && m["content"]
                        .as_str()
                        .unwrap_or("")
                        .starts_with("Session saved:")
            })
        })
        .await?;
    let text = notice["content"].as_str().unwrap();
    assert!(
        text.contains("A note was taken") && text.contains("1 second of inactivity"),
        "{text}"
    );
    Ok(())
}

#[tokio::test]
async fn an_answer_owed_when_chorus_was_killed_is_posted_after_the_restart() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let data = tempfile::tempdir()?;
    let start = |model: &chorus_test_support::FakeModel| {
        Chorus::builder()
            .openai_fake(model)
            .data_dir(data.path())
            .env("DISCORD_TOKEN", "fake-bot-token")
            .env(
                "DISCORD_GUILD_ID",
                chorus_test_support::fake_discord::GUILD_ID,
            )
            .env("CHORUS_DISCORD_API_BASE", &discord.base_url)
            .start()
    };
    let chorus = start(&model).await?;
    let channel = "700000000000000012";
    chorus
        .create_agent_with(serde_json::json!({"name": "steady", "discord_channel_id": channel}))
        .await?;
    // The model call in flight when Chorus dies is never answered.
    model.push(chorus_test_support::Reply::Silent);
    let asked = discord.user_says(channel, "Summarise the repository", None);
    model.wait_for_requests(1, Duration::from_secs(30)).await;
    chorus.kill().await?;

    // The next start resumes the thread, and the answer still comes as a reply.
    model.push(text("It is a small Rust project."));
    let _chorus = start(&model).await?;
    let answer = discord
        .wait_for(
            "the answer after the restart",
            Duration::from_secs(60),
            |d| {
                answers_in(d, channel)
                    .into_iter()
                    .find(|m| m["content"] == "It is a small Rust project.")
            },
        )
        .await?;
    assert_eq!(answer["message_reference"]["message_id"], asked.as_str());
    Ok(())
}

#[tokio::test]
async fn a_message_sent_while_the_worker_restarts_and_a_gateway_resume_lose_nothing()
-> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot(&discord, &model).await?;
    let channel = "700000000000000013";
    chorus
        .create_agent_with(serde_json::json!({"name": "sturdy", "discord_channel_id": channel}))
        .await?;
    let worker = chorus
        .wait_worker_running("sturdy", Duration::from_secs(15))
        .await?;
    // The worker dies; a message comes before its replacement is up.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    model.push(text("Still here."));
    let asked = discord.user_says(channel, "Are you there?", None);
    let answer = discord
        .wait_for("the answer", Duration::from_secs(60), |d| {
            answers_in(d, channel)
                .into_iter()
                .find(|m| m["content"] == "Still here.")
        })
        .await?;
    assert_eq!(answer["message_reference"]["message_id"], asked.as_str());

    // Discord drops the gateway connection: serenity resumes, and messages flow.
    discord.drop_gateway();
    discord
        .wait_for("a resume", Duration::from_secs(60), |d| {
            d.resumes().into_iter().next()
        })
        .await?;
    model.push(text("And again."));
    discord.user_says(channel, "Once more?", None);
    discord
        .wait_for(
            "the answer after the resume",
            Duration::from_secs(60),
            |d| {
                answers_in(d, channel)
                    .into_iter()
                    .find(|m| m["content"] == "And again.")
            },
        )
        .await?;
    assert_eq!(
        discord.identifies().len(),
        1,
        "resumed, not identified again"
    );
    Ok(())
}

#[tokio::test]
async fn a_very_long_answer_is_attached_as_a_file_with_a_preview() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = with_bot(&discord, &model).await?;
    let channel = "700000000000000014";
    chorus
        .create_agent_with(serde_json::json!({"name": "verbose", "discord_channel_id": channel}))
        .await?;
    let long: String = (0..600)
        .map(|i| format!("Line {i:03} of the report.\n"))
        .collect();
    assert!(long.chars().count() > 12_000);
    model.push(text(&long));
    let asked = discord.user_says(channel, "Write the full report", None);
    let answer = discord
        .wait_for("the answer", Duration::from_secs(30), |d| {
            answers_in(d, channel).into_iter().next()
        })
        .await?;
    assert_eq!(answer["message_reference"]["message_id"], asked.as_str());
    let preview = answer["content"].as_str().unwrap();
    assert!(
        preview.starts_with("Line 000") && preview.contains("the whole answer is attached"),
        "{preview}"
    );
    let file = &answer["attachments"][0];
    assert_eq!(file["filename"], "thread-1-answer.md");
    assert_eq!(
        file["content"].as_str().unwrap().trim_end(),
        long.trim_end(),
        "the whole answer"
    );
    assert_eq!(answers_in(&discord, channel).len(), 1, "one message");
    Ok(())
}

/// The banner says "connecting" while the bot connects, and the log says when it
/// is connected, in Chorus's words.
#[tokio::test]
async fn the_banner_says_connecting_and_the_log_says_connected() -> anyhow::Result<()> {
    let discord = FakeDiscord::start().await;
    let chorus = Chorus::builder()
        .env("DISCORD_TOKEN", "fake-bot-token")
        .env("CHORUS_DISCORD_API_BASE", &discord.base_url)
        .start()
        .await?;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let said = loop {
        let said = chorus.output();
        if said.contains("discord: connected as ") || std::time::Instant::now() > deadline {
            break said;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(said.contains("discord: connected as "), "{said}");
    assert!(
        said.contains("discord:        connecting (DISCORD_TOKEN is set)"),
        "{said}"
    );
    // `chorus status` (GET /api/status) reports the server's connection.
    let status: serde_json::Value = chorus
        .api(Method::GET, "/api/status")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(status["live"]["discord"]["state"], "connected", "{status}");
    Ok(())
}

/// A gateway that cannot be reached is said once, in words, with the retry; not
/// serenity's raw error every 5 s.
#[tokio::test]
async fn an_unreachable_gateway_is_said_in_words() -> anyhow::Result<()> {
    let discord = FakeDiscord::start_with_gateway_down().await;
    let chorus = Chorus::builder()
        .env("DISCORD_TOKEN", "fake-bot-token")
        .env("CHORUS_DISCORD_API_BASE", &discord.base_url)
        .start()
        .await?;
    let sentence = "cannot reach Discord: the connection was refused; retrying every 5 s";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let said = loop {
        let said = chorus.output();
        if said.contains(sentence) || std::time::Instant::now() > deadline {
            break said;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(said.contains(sentence), "{said}");
    assert!(!said.contains("Err starting shard"), "{said}");
    // `chorus status` in another shell says the same, from the server.
    let status = tokio::process::Command::new(chorus_test_support::bin_path("chorus"))
        .arg("status")
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .env_remove("DISCORD_TOKEN")
        .output()
        .await?;
    let shown = String::from_utf8_lossy(&status.stdout);
    assert!(
        shown.contains(&format!("discord:        {sentence}")),
        "{shown}"
    );
    // The API goes on without it.
    let health = chorus.anonymous(Method::GET, "/healthz").send().await?;
    assert!(health.status().is_success());
    Ok(())
}
