//! Heartbeats through the real binaries and the fake model (issue 30, J5): `POST
//! /api/agents/{name}/heartbeat` runs one now; an answer with `HEARTBEAT_OK` is
//! recorded quietly (no notification in the feed), any other answer is posted as a
//! notification; an empty HEARTBEAT.md and the daily token cap cost no model call;
//! the model's request carries HEARTBEAT.md's text, on `heartbeat_model` when set;
//! the settings are checked with 400s that say what to send. The periodic heartbeat
//! is shown across restarts: its next time moved into the past while chorus is down
//! (the store written directly, standing for the time that passed), one heartbeat runs
//! at the start, never a burst, and an unchanged HEARTBEAT.md costs no model call.

use std::time::Duration;

use chorus_test_support::fake_model::{Hold, Reply, Wire, text};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn start(model: &FakeModel, config: &str) -> anyhow::Result<Chorus> {
    builder(model, config).start().await
}

fn builder(model: &FakeModel, config: &str) -> chorus_test_support::chorus::ChorusBuilder {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-heartbeat")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config(config)
}

/// Stops chorus, moves every periodic heartbeat's next time to long ago (as if chorus
/// had been down for years), and starts it again on the same store.
async fn down_past_due(chorus: Chorus, model: &FakeModel) -> anyhow::Result<Chorus> {
    let (dir, url) = (chorus.data_dir.clone(), chorus.database_url.clone());
    chorus.stop().await?;
    let moved = Chorus::write_store(
        &dir,
        url.as_deref(),
        "UPDATE agent_heartbeats SET next_at = '2000-01-01T00:00:00.000Z' WHERE minutes > 0",
    )
    .await?;
    anyhow::ensure!(moved == 1, "{moved} heartbeats moved");
    let mut again = builder(model, "").data_dir(&dir);
    if let Some(url) = &url {
        again = again.database_url(url);
    }
    again.start().await
}

/// The agent's heartbeats, newest first, once there are `n` and none is going.
async fn settled(chorus: &Chorus, agent: &str, n: usize) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, view) = chorus
            .call(Method::GET, &format!("/api/agents/{agent}/heartbeat"), None)
            .await?;
        anyhow::ensure!(status == 200, "GET heartbeat: {status} {view}");
        let all = view["heartbeats"].as_array().cloned().unwrap_or_default();
        if all.len() == n && all.iter().all(|h| h["outcome"] != "running") {
            return Ok(view);
        }
        anyhow::ensure!(
            all.len() <= n && tokio::time::Instant::now() < deadline,
            "never {n} settled heartbeats: {view:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn set_heartbeat_file(chorus: &Chorus, agent: &str, content: &str) -> anyhow::Result<()> {
    let (status, body) = chorus
        .call(
            Method::PUT,
            &format!("/api/agents/{agent}/identity/HEARTBEAT.md"),
            Some(json!({ "content": content })),
        )
        .await?;
    anyhow::ensure!(
        status == 200 || status == 204,
        "PUT HEARTBEAT.md: {status} {body}"
    );
    Ok(())
}

/// `POST …/heartbeat`: 201 with the record.
async fn beat(chorus: &Chorus, agent: &str) -> anyhow::Result<Value> {
    let (status, record) = chorus
        .call(
            Method::POST,
            &format!("/api/agents/{agent}/heartbeat"),
            None,
        )
        .await?;
    anyhow::ensure!(status == 201, "POST heartbeat: {status} {record}");
    Ok(record)
}

/// Heartbeat `id` once it has ended.
async fn ended(chorus: &Chorus, agent: &str, id: u64) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, view) = chorus
            .call(Method::GET, &format!("/api/agents/{agent}/heartbeat"), None)
            .await?;
        anyhow::ensure!(status == 200, "GET heartbeat: {status} {view}");
        let found = view["heartbeats"]
            .as_array()
            .and_then(|all| all.iter().find(|h| h["id"] == id).cloned());
        if let Some(h) = found.filter(|h| h["outcome"] != "running") {
            return Ok(h);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "heartbeat {id} never ended: {view:#}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn request_text(body: &Value) -> String {
    body["messages"].to_string()
}

/// An empty HEARTBEAT.md (the template's) costs no model call; a quiet answer posts
/// nothing; any other answer is a notification in the feed naming its heartbeat and
/// thread; the model is sent HEARTBEAT.md's text; one at a time (409).
#[tokio::test]
async fn a_quiet_answer_posts_nothing_and_any_other_answer_a_notification() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, "").await?;
    chorus.create_agent("pulse").await?;
    let mut feed = chorus.open_events("?agent=pulse", None).await?;

    // The template's HEARTBEAT.md says nothing: skipped, no model call.
    let empty = beat(&chorus, "pulse").await?;
    assert_eq!(empty["outcome"], "skipped", "{empty}");
    assert_eq!(empty["cause"], "manual");
    assert!(
        empty["reason"].as_str().unwrap().contains("empty"),
        "{empty}"
    );
    set_heartbeat_file(&chorus, "pulse", "# Heartbeat\n<!-- what to check -->\n\n").await?;
    let still_empty = beat(&chorus, "pulse").await?;
    assert_eq!(still_empty["outcome"], "skipped", "{still_empty}");
    assert_eq!(model.requests().len(), 0, "an empty file called the model");

    set_heartbeat_file(
        &chorus,
        "pulse",
        "# Heartbeat\n- is the nightly build green?\n",
    )
    .await?;
    // Quiet, and held so that a second one is refused while it goes.
    let thinking = Hold::new();
    model.push(Reply::Held(
        thinking.clone(),
        Box::new(text("HEARTBEAT_OK")),
    ));
    let quiet = beat(&chorus, "pulse").await?;
    assert_eq!(quiet["outcome"], "running", "{quiet}");
    assert!(quiet["thread_id"].is_u64(), "{quiet}");
    let asked = model.wait_for_requests(1, WAIT).await;
    assert_eq!(asked.len(), 1);
    let sent = request_text(&asked[0].body);
    assert!(
        sent.contains("is the nightly build green?") && sent.contains("HEARTBEAT_OK"),
        "the model was not sent HEARTBEAT.md: {sent}"
    );
    let (status, refused) = chorus
        .call(Method::POST, "/api/agents/pulse/heartbeat", None)
        .await?;
    assert_eq!(status, 409, "{refused}");
    thinking.release();
    let quiet_id = quiet["id"].as_u64().unwrap();
    let quiet = ended(&chorus, "pulse", quiet_id).await?;
    assert_eq!(quiet["outcome"], "quiet", "{quiet}");
    assert_eq!(quiet["tokens"], 30, "{quiet}");

    // Anything else is posted. Asked for, it runs though the file is unchanged.
    model.push(text("The nightly build is red since 02:00."));
    let loud = beat(&chorus, "pulse").await?;
    let loud_id = loud["id"].as_u64().unwrap();
    let loud = ended(&chorus, "pulse", loud_id).await?;
    assert_eq!(loud["outcome"], "notified", "{loud}");
    assert_eq!(model.requests().len(), 2);

    // The feed's first heartbeat notification is the loud one's: the quiet one,
    // which ended before it, posted nothing.
    let notice = tokio::time::timeout(WAIT, async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" && data["kind"] == "heartbeat" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(notice["heartbeat_id"], loud_id, "{notice}");
    assert_eq!(notice["thread"], loud["thread_id"], "{notice}");
    assert_eq!(notice["agent"], "pulse");
    assert!(
        notice["text"]
            .as_str()
            .unwrap()
            .contains("The nightly build is red since 02:00."),
        "{notice}"
    );
    Ok(())
}

/// With `[heartbeat] daily_token_cap = 30` (one call of the fake model), the first
/// heartbeat uses the day's tokens and the next is skipped without a model call;
/// `chorus agent heartbeat` runs one, waits for its end and says what came of it.
#[tokio::test]
async fn the_daily_token_cap_stops_model_calls() -> anyhow::Result<()> {
    use super::cli::{client, stderr, stdout};
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, "[heartbeat]\ndaily_token_cap = 30\n").await?;
    chorus.create_agent("frugal").await?;
    set_heartbeat_file(&chorus, "frugal", "- anything new in the inbox?").await?;
    model.push(text("HEARTBEAT_OK"));
    let first = client(&chorus, &["agent", "heartbeat", "frugal"]).await;
    assert!(first.status.success(), "{}", stderr(&first));
    let said = stdout(&first);
    assert!(
        said.contains("HEARTBEAT_OK, nothing to post; 30 tokens"),
        "{said}"
    );
    let capped = client(&chorus, &["agent", "heartbeat", "frugal", "--json"]).await;
    assert!(capped.status.success(), "{}", stderr(&capped));
    let capped: Value = serde_json::from_slice(&capped.stdout)?;
    assert_eq!(capped["outcome"], "skipped", "{capped}");
    assert!(
        capped["reason"]
            .as_str()
            .unwrap()
            .contains("daily_token_cap"),
        "{capped}"
    );
    assert_eq!(model.requests().len(), 1, "the cap did not stop the call");
    let (_, view) = chorus
        .call(Method::GET, "/api/agents/frugal/heartbeat", None)
        .await?;
    assert_eq!(view["tokens_today"], 30, "{view}");
    assert_eq!(view["daily_token_cap"], 30, "{view}");
    let outcomes: Vec<&str> = view["heartbeats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["outcome"].as_str().unwrap())
        .collect();
    assert_eq!(outcomes, ["skipped", "quiet"], "{view:#}");
    let skipped = client(&chorus, &["agent", "heartbeat", "frugal"]).await;
    assert!(
        stdout(&skipped).contains("skipped, no model call"),
        "{}",
        stdout(&skipped)
    );
    let on = client(
        &chorus,
        &[
            "agent",
            "configure",
            "frugal",
            "--heartbeat-minutes",
            "10",
            "--json",
        ],
    )
    .await;
    assert!(on.status.success(), "{}", stderr(&on));
    let on: Value = serde_json::from_slice(&on.stdout)?;
    assert_eq!(on["heartbeat_minutes"], 10, "{on}");
    let shown = stdout(&client(&chorus, &["agent", "show", "frugal"]).await);
    assert!(
        shown
            .lines()
            .any(|l| l.contains("heartbeat:") && l.contains("every 10 min, next ")),
        "{shown}"
    );
    Ok(())
}

/// `heartbeat_minutes` and `heartbeat_model` at create and PATCH: off by default,
/// bounded and checked against the catalog with 400s that say what to send, shown in
/// the agent's view; a heartbeat runs on its `heartbeat_model`.
#[tokio::test]
async fn the_heartbeat_settings_are_checked_shown_and_used() -> anyhow::Result<()> {
    let model = FakeModel::start(Wire::OpenAi, &["fake-model", "cheap-model"]).await;
    let chorus = start(&model, "").await?;
    let agent = chorus.create_agent("tick").await?;
    assert_eq!(agent["heartbeat_minutes"], 0, "off by default: {agent}");
    assert!(agent["heartbeat_next_at"].is_null(), "{agent}");

    let (status, refused) = chorus
        .call(
            Method::POST,
            "/api/agents",
            Some(json!({"name": "hasty", "heartbeat_minutes": 1})),
        )
        .await?;
    assert_eq!(status, 400, "{refused}");
    let message = refused.to_string();
    assert!(
        message.contains("heartbeat_minutes") && message.contains("from 5"),
        "{message}"
    );
    let (status, _) = chorus.call(Method::GET, "/api/agents/hasty", None).await?;
    assert_eq!(status, 404, "a refused create made the agent");
    let (status, refused) = chorus
        .call(
            Method::PATCH,
            "/api/agents/tick",
            Some(json!({"heartbeat_model": "no-such-model"})),
        )
        .await?;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("heartbeat_model"), "{refused}");

    let (status, on) = chorus
        .call(
            Method::PATCH,
            "/api/agents/tick",
            Some(json!({"heartbeat_minutes": 30, "heartbeat_model": "cheap-model"})),
        )
        .await?;
    assert_eq!(status, 200, "{on}");
    assert_eq!(on["heartbeat_minutes"], 30);
    assert_eq!(on["heartbeat_model"], "cheap-model");
    let next = chrono::DateTime::parse_from_rfc3339(on["heartbeat_next_at"].as_str().unwrap())?;
    let ahead = next.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(29) && ahead <= chrono::Duration::minutes(30),
        "the next heartbeat is {ahead} ahead"
    );

    set_heartbeat_file(&chorus, "tick", "- ping the status page").await?;
    model.push(text("HEARTBEAT_OK"));
    let record = beat(&chorus, "tick").await?;
    ended(&chorus, "tick", record["id"].as_u64().unwrap()).await?;
    let asked = model.requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(
        asked[0].body["model"], "cheap-model",
        "the heartbeat's model was not used"
    );

    let (status, off) = chorus
        .call(
            Method::PATCH,
            "/api/agents/tick",
            Some(json!({"heartbeat_minutes": 0, "heartbeat_model": null})),
        )
        .await?;
    assert_eq!(status, 200, "{off}");
    assert_eq!(off["heartbeat_minutes"], 0);
    assert!(
        off["heartbeat_model"].is_null() && off["heartbeat_next_at"].is_null(),
        "{off}"
    );
    Ok(())
}

/// The periodic heartbeat: one due while chorus was down (for years) runs once at the
/// start, on its own, and the next is a period later (no burst); after a quiet answer
/// an unchanged HEARTBEAT.md costs no model call; a changed one is read again.
#[tokio::test]
async fn a_periodic_heartbeat_runs_once_when_due_and_an_unchanged_file_costs_no_call()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    // A directory of its own: the settings file is written beside the data directory.
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("data");
    let chorus = builder(&model, "").data_dir(&data).start().await?;
    chorus
        .create_agent_with(json!({"name": "watch", "heartbeat_minutes": 5}))
        .await?;
    set_heartbeat_file(&chorus, "watch", "- is the disk full?").await?;

    model.push(text("HEARTBEAT_OK"));
    let chorus = down_past_due(chorus, &model).await?;
    let view = settled(&chorus, "watch", 1).await?;
    let first = &view["heartbeats"][0];
    assert_eq!(
        (first["cause"].as_str(), first["outcome"].as_str()),
        (Some("periodic"), Some("quiet")),
        "{view:#}"
    );
    let next = chrono::DateTime::parse_from_rfc3339(view["next_at"].as_str().unwrap())?;
    let ahead = next.with_timezone(&chrono::Utc) - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::minutes(4),
        "the next heartbeat is a period after this one, not a catch-up: {ahead}"
    );
    assert_eq!(model.requests().len(), 1);

    // Unchanged since the quiet answer: recorded, no model call.
    let chorus = down_past_due(chorus, &model).await?;
    let view = settled(&chorus, "watch", 2).await?;
    let unchanged = &view["heartbeats"][0];
    assert_eq!(unchanged["outcome"], "skipped", "{view:#}");
    assert!(
        unchanged["reason"].as_str().unwrap().contains("unchanged"),
        "{unchanged}"
    );
    assert_eq!(
        model.requests().len(),
        1,
        "an unchanged file called the model"
    );

    // Changed: read again, and this answer is posted.
    set_heartbeat_file(
        &chorus,
        "watch",
        "- is the disk full?\n- is the backup fresh?",
    )
    .await?;
    model.push(text("The backup is two days old."));
    let chorus = down_past_due(chorus, &model).await?;
    let view = settled(&chorus, "watch", 3).await?;
    assert_eq!(view["heartbeats"][0]["outcome"], "notified", "{view:#}");
    let asked = model.requests();
    assert_eq!(asked.len(), 2);
    assert!(
        request_text(&asked[1].body).contains("is the backup fresh?"),
        "the changed file was not sent"
    );
    Ok(())
}

/// Discord posts a heartbeat's notification in the agent's channel, and nothing for
/// a quiet answer.
#[tokio::test]
async fn a_heartbeat_notification_is_posted_in_the_agents_discord_channel() -> anyhow::Result<()> {
    use chorus_test_support::FakeDiscord;
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = super::discord::with_bot_config(&discord, &model, "").await?;
    let channel = "700000000000000031";
    chorus
        .create_agent_with(json!({"name": "herald", "discord_channel_id": channel}))
        .await?;
    set_heartbeat_file(&chorus, "herald", "- any new issue?").await?;
    model.push(text("HEARTBEAT_OK"));
    let quiet = beat(&chorus, "herald").await?;
    ended(&chorus, "herald", quiet["id"].as_u64().unwrap()).await?;
    model.push(text("Issue 42 was opened an hour ago."));
    let loud = beat(&chorus, "herald").await?;
    ended(&chorus, "herald", loud["id"].as_u64().unwrap()).await?;
    let heartbeat_posts = |d: &FakeDiscord| -> Vec<String> {
        d.posted()
            .into_iter()
            .filter(|m| m["channel_id"] == channel)
            .filter_map(|m| m["content"].as_str().map(str::to_string))
            .filter(|c| c.starts_with("Heartbeat of herald"))
            .collect()
    };
    discord
        .wait_for("the heartbeat's post", WAIT, |d| {
            heartbeat_posts(d).into_iter().next()
        })
        .await?;
    let posts = heartbeat_posts(&discord);
    assert_eq!(
        posts.len(),
        1,
        "the quiet answer was posted too: {posts:#?}"
    );
    assert!(
        posts[0].contains("Issue 42 was opened an hour ago."),
        "{posts:#?}"
    );
    let anything_quiet: Vec<Value> = discord
        .posted()
        .into_iter()
        .filter(|m| m["content"].as_str().unwrap_or("").contains("HEARTBEAT_OK"))
        .collect();
    assert!(anything_quiet.is_empty(), "{anything_quiet:#?}");
    Ok(())
}
