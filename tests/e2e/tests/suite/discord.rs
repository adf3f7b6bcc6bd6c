//! The Discord front end through the real binary, with serenity connected to a fake
//! Discord on 127.0.0.1 (REST and gateway).

use std::time::Duration;

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
        ["agent", "context", "settings", "status", "tasks", "thread"]
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
