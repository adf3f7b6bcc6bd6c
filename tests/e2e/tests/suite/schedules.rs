//! Schedules through the real binaries and the fake model (issue 30, J5): a one-shot
//! a few seconds ahead fires once, starts a thread (principal: the scheduler) and logs
//! its run; missed one-shots follow their policy across a restart of the control
//! plane; a firing while the last run goes is skipped and recorded; failures in a row
//! pause a schedule with a notification; a scheduled run never waits for a person;
//! bad requests are 400s that say what to send. The cron and daylight-saving rules are
//! the control plane's unit tests (`schedules::cron`, `schedules::timing`: fixed
//! instants, a fake clock).

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{Hold, Reply, error, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use chrono::{DateTime, SecondsFormat, Utc};
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn start(
    model: &FakeModel,
    data_dir: Option<&std::path::Path>,
    config: &str,
) -> anyhow::Result<Chorus> {
    let mut builder = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-schedules")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config(config);
    if let Some(dir) = data_dir {
        builder = builder.data_dir(dir);
    }
    builder.start().await
}

async fn create(chorus: &Chorus, agent: &str, body: Value) -> anyhow::Result<Value> {
    let (status, made) = chorus
        .call(
            Method::POST,
            &format!("/api/agents/{agent}/schedules"),
            Some(body),
        )
        .await?;
    anyhow::ensure!(status == 201, "create: {status} {made}");
    Ok(made)
}

async fn schedule(chorus: &Chorus, agent: &str, id: u64) -> anyhow::Result<Value> {
    let (status, s) = chorus
        .call(
            Method::GET,
            &format!("/api/agents/{agent}/schedules/{id}"),
            None,
        )
        .await?;
    anyhow::ensure!(status == 200, "{status} {s}");
    Ok(s)
}

async fn runs(chorus: &Chorus, agent: &str, id: u64) -> anyhow::Result<Vec<Value>> {
    let (status, runs) = chorus
        .call(
            Method::GET,
            &format!("/api/agents/{agent}/schedules/{id}/runs"),
            None,
        )
        .await?;
    anyhow::ensure!(status == 200, "{status} {runs}");
    Ok(runs["runs"].as_array().cloned().unwrap_or_default())
}

/// Schedule `id`'s runs (newest first) once `done` holds of them.
async fn wait_runs(
    chorus: &Chorus,
    agent: &str,
    id: u64,
    done: impl Fn(&[Value]) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let now = runs(chorus, agent, id).await?;
        if done(&now) {
            return Ok(now);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "schedule {id}'s runs never got there: {now:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ended(runs: &[Value], n: usize) -> bool {
    runs.len() == n && runs.iter().all(|r| r["status"] != "running")
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

/// Whole seconds from now, so the text is exact.
fn seconds_ahead(seconds: i64) -> DateTime<Utc> {
    let now = Utc::now().timestamp() + seconds;
    DateTime::from_timestamp(now, 0).unwrap()
}

#[tokio::test]
async fn a_one_shot_a_few_seconds_ahead_fires_once_starts_a_thread_and_logs_its_run()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "").await?;
    chorus.create_agent("clock").await?;
    model.push(text("Good morning: nothing on the calendar."));
    // Sent with an offset: stored and answered in UTC.
    let at = seconds_ahead(4);
    let local = at
        .with_timezone(&chrono::FixedOffset::east_opt(3600).unwrap())
        .to_rfc3339();
    let made = create(
        &chorus,
        "clock",
        json!({"prompt": "Say good morning", "at": local}),
    )
    .await?;
    let id = made["id"].as_u64().expect("an id");
    assert_eq!(made["next_run_at"], rfc3339(at), "{made}");
    assert_eq!(made["at"], rfc3339(at));
    assert_eq!(made["on_missed"], "run_once", "the stated default");
    assert_eq!(made["paused"], false);
    assert_eq!(made["created_by"], "api");

    let runs = wait_runs(&chorus, "clock", id, |r| ended(r, 1)).await?;
    let run = &runs[0];
    assert_eq!(run["status"], "completed", "{run:#}");
    assert_eq!(run["cause"], "schedule");
    assert!(
        run["error"].is_null() && run["ended"].is_string(),
        "{run:#}"
    );
    assert!(run["tokens"].as_u64().unwrap() > 0, "{run:#}");
    let started = DateTime::parse_from_rfc3339(run["started"].as_str().unwrap())?;
    assert!(started >= at, "fired at {started}, due at {at}");
    let thread_id = run["thread"].as_u64().expect("its thread");
    let thread = chorus.thread("clock", thread_id).await?;
    assert_eq!(thread["status"], "completed");
    assert_eq!(thread["messages"][0]["role"], "user");
    assert_eq!(thread["messages"][0]["content"], "Say good morning");
    // The thread's principal is the scheduler.
    let by = chorus
        .query_store(&format!(
            "SELECT created_by FROM threads WHERE agent_name = 'clock' AND id = {thread_id}"
        ))
        .await?;
    assert_eq!(by.trim(), "chorus");
    // Once: done, nothing left to fire, one model call in all.
    let after = schedule(&chorus, "clock", id).await?;
    assert!(after["next_run_at"].is_null(), "{after:#}");
    assert_eq!(model.requests().len(), 1);
    assert_eq!(runs_len(&chorus, "clock", id).await?, 1);
    Ok(())
}

async fn runs_len(chorus: &Chorus, agent: &str, id: u64) -> anyhow::Result<usize> {
    Ok(runs(chorus, agent, id).await?.len())
}

#[tokio::test]
async fn bad_requests_are_400s_that_say_what_to_send() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "").await?;
    chorus.create_agent("picky").await?;
    let past = rfc3339(Utc::now() - chrono::Duration::minutes(5));
    for (body, says) in [
        (
            json!({"prompt": "p", "cron": "61 * * * *", "timezone": "UTC"}),
            "outside 0-59",
        ),
        (
            json!({"prompt": "p", "cron": "* * *", "timezone": "UTC"}),
            "send five",
        ),
        (
            json!({"prompt": "p", "cron": "0 0 30 2 *", "timezone": "UTC"}),
            "never fires",
        ),
        (
            json!({"prompt": "p", "cron": "* * * * *", "timezone": "Mars/Base"}),
            "not an IANA time zone",
        ),
        (
            json!({"prompt": "p", "cron": "* * * * *"}),
            "needs a timezone",
        ),
        (json!({"prompt": "p", "at": past}), "has passed"),
        (
            json!({"prompt": "p", "at": "next tuesday"}),
            "not an RFC 3339 time",
        ),
        (
            json!({"prompt": "p", "cron": "* * * * *", "timezone": "UTC", "at": past}),
            "not both",
        ),
        (json!({"prompt": "p"}), "send cron"),
        (
            json!({"prompt": " ", "cron": "* * * * *", "timezone": "UTC"}),
            "prompt is empty",
        ),
        (
            json!({"prompt": "p", "cron": "* * * * *", "timezone": "UTC", "on_missed": "burst"}),
            "run_once",
        ),
    ] {
        let (status, answer) = chorus
            .call(
                Method::POST,
                "/api/agents/picky/schedules",
                Some(body.clone()),
            )
            .await?;
        assert_eq!(status, 400, "{body}: {answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(says), "{body}: {message}");
    }
    let (status, _) = chorus
        .call(
            Method::POST,
            "/api/agents/picky/schedules",
            Some(json!({"prompt": "p", "cron": "* * * * *", "timezone": "UTC", "colour": "red"})),
        )
        .await?;
    assert_eq!(status, 400, "an unknown field is refused");
    assert!(runs(&chorus, "picky", 1).await.is_err(), "nothing was made");

    // A good one, then changes to it: the same checks; a ghost is a 404.
    let made = create(
        &chorus,
        "picky",
        json!({"prompt": "p", "cron": "30 7 * * *", "timezone": "America/New_York"}),
    )
    .await?;
    let id = made["id"].as_u64().unwrap();
    let next = DateTime::parse_from_rfc3339(made["next_run_at"].as_str().unwrap())?;
    assert_eq!(next.format("%M").to_string(), "30", "{made}");
    assert!(
        ["11", "12"].contains(&next.format("%H").to_string().as_str()),
        "07:30 in New York is 11:30 or 12:30 UTC: {made}"
    );
    let path = format!("/api/agents/picky/schedules/{id}");
    let (status, answer) = chorus
        .call(
            Method::PATCH,
            &path,
            Some(json!({"timezone": "Nowhere/Land"})),
        )
        .await?;
    assert_eq!(status, 400, "{answer}");
    let (status, moved) = chorus
        .call(
            Method::PATCH,
            &path,
            Some(json!({"timezone": "Europe/Berlin"})),
        )
        .await?;
    assert_eq!(status, 200, "{moved}");
    assert_eq!(moved["cron"], "30 7 * * *");
    assert_eq!(moved["timezone"], "Europe/Berlin");
    let next = DateTime::parse_from_rfc3339(moved["next_run_at"].as_str().unwrap())?;
    assert!(
        ["05", "06"].contains(&next.format("%H").to_string().as_str()),
        "{moved}"
    );
    let (status, paused) = chorus
        .call(Method::PATCH, &path, Some(json!({"paused": true})))
        .await?;
    assert_eq!(status, 200);
    assert!(
        paused["paused"] == true && paused["next_run_at"].is_null(),
        "{paused}"
    );
    let (status, answer) = chorus
        .call(Method::GET, "/api/agents/picky/schedules/999", None)
        .await?;
    assert_eq!(status, 404, "{answer}");
    let (status, _) = chorus
        .call(Method::GET, "/api/agents/ghost/schedules", None)
        .await?;
    assert_eq!(status, 404);
    let (status, listed) = chorus
        .call(Method::GET, "/api/agents/picky/schedules", None)
        .await?;
    assert_eq!(status, 200);
    assert_eq!(listed["schedules"].as_array().unwrap().len(), 1);
    let (status, _) = chorus.call(Method::DELETE, &path, None).await?;
    assert_eq!(status, 204);
    let (status, _) = chorus.call(Method::DELETE, &path, None).await?;
    assert_eq!(status, 404);
    Ok(())
}

/// Two one-shots come due while chorus is down: the `run_once` one runs once at the
/// next start (its run says `missed`), the `skip` one does not run and is done.
#[tokio::test]
async fn missed_one_shots_follow_their_policy_across_a_restart() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let data = tempfile::tempdir()?;
    let chorus = start(&model, Some(data.path()), "").await?;
    chorus.create_agent("sleeper").await?;
    let at = seconds_ahead(10);
    let once = create(
        &chorus,
        "sleeper",
        json!({"prompt": "catch up", "at": rfc3339(at), "on_missed": "run_once"}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    let skipped = create(
        &chorus,
        "sleeper",
        json!({"prompt": "not now", "at": rfc3339(at), "on_missed": "skip"}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    chorus.stop().await?;
    anyhow::ensure!(
        Utc::now() < at,
        "chorus took too long to stop: the firing was not missed, and this test proves nothing"
    );
    // Down until both are well past due.
    tokio::time::sleep((at - Utc::now()).to_std().unwrap_or_default() + Duration::from_secs(1))
        .await;
    model.push(text("Caught up."));
    let chorus = start(&model, Some(data.path()), "").await?;
    let ran = wait_runs(&chorus, "sleeper", once, |r| ended(r, 1)).await?;
    assert_eq!(ran[0]["cause"], "missed", "{ran:#?}");
    assert_eq!(ran[0]["status"], "completed", "{ran:#?}");
    assert!(schedule(&chorus, "sleeper", once).await?["next_run_at"].is_null());
    // The skipped one is done without a run; its step was taken with the other's.
    let skip = schedule(&chorus, "sleeper", skipped).await?;
    assert!(skip["next_run_at"].is_null(), "{skip:#}");
    assert!(runs(&chorus, "sleeper", skipped).await?.is_empty());
    let asked: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    assert_eq!(asked.len(), 1, "one run in all");
    assert!(asked[0].contains("catch up") && !asked[0].contains("not now"));
    Ok(())
}

/// At most one run per schedule: a firing while the last run goes is recorded as
/// skipped, and "run now" is refused with a 409.
#[tokio::test]
async fn a_firing_while_the_last_run_goes_is_skipped_and_recorded() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "").await?;
    chorus.create_agent("busy").await?;
    let thinking = Hold::new();
    model.push(Reply::Held(
        thinking.clone(),
        Box::new(text("finally done")),
    ));
    let at = seconds_ahead(4);
    let id = create(
        &chorus,
        "busy",
        json!({"prompt": "long job", "at": rfc3339(at)}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    let run_path = format!("/api/agents/busy/schedules/{id}/run");
    let (status, first) = chorus.call(Method::POST, &run_path, None).await?;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["cause"], "manual");
    assert_eq!(first["status"], "running");
    assert_eq!(model.wait_for_requests(1, WAIT).await.len(), 1);
    let (status, refused) = chorus.call(Method::POST, &run_path, None).await?;
    assert_eq!(status, 409, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has a run going")
    );
    // The one-shot comes due while the manual run still thinks.
    let now = wait_runs(&chorus, "busy", id, |r| r.len() == 2).await?;
    assert_eq!(now[0]["status"], "skipped", "{now:#?}");
    assert_eq!(now[0]["cause"], "schedule");
    assert!(now[0]["thread"].is_null());
    assert!(now[0]["error"].as_str().unwrap().contains("still going"));
    assert_eq!(now[1]["status"], "running");
    thinking.release();
    let done = wait_runs(&chorus, "busy", id, |r| ended(r, 2)).await?;
    assert_eq!(done[1]["status"], "completed", "{done:#?}");
    assert_eq!(
        model.requests().len(),
        1,
        "the skipped firing asked nothing"
    );
    Ok(())
}

/// With `pause_after_failures = 2`, the second failed run in a row pauses the
/// schedule; the feed carries the notification (Discord posts feed notifications in
/// the agent's channel).
#[tokio::test]
async fn failures_in_a_row_pause_the_schedule_with_a_notification() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "[schedules]\npause_after_failures = 2\n").await?;
    chorus.create_agent("flaky").await?;
    let mut feed = chorus.open_events("?agent=flaky", None).await?;
    let id = create(
        &chorus,
        "flaky",
        json!({"prompt": "try", "cron": "0 0 1 1 *", "timezone": "UTC"}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    let run_path = format!("/api/agents/flaky/schedules/{id}/run");
    for n in 1..=2 {
        model.push(error(400, "invalid_request_error", "the model refuses"));
        let (status, run) = chorus.call(Method::POST, &run_path, None).await?;
        assert_eq!(status, 201, "{run}");
        let runs = wait_runs(&chorus, "flaky", id, |r| ended(r, n)).await?;
        assert_eq!(runs[0]["status"], "failed", "{runs:#?}");
        assert!(runs[0]["error"].as_str().is_some_and(|e| !e.is_empty()));
        let s = schedule(&chorus, "flaky", id).await?;
        assert_eq!(s["failures"], n as u64);
        assert_eq!(s["paused"], n == 2, "{s:#}");
    }
    let paused = schedule(&chorus, "flaky", id).await?;
    assert!(paused["next_run_at"].is_null(), "{paused:#}");
    let notice = tokio::time::timeout(WAIT, async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" && data["kind"] == "schedule_paused" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(notice["schedule_id"], id);
    assert_eq!(notice["agent"], "flaky");
    assert!(
        notice["text"]
            .as_str()
            .unwrap()
            .contains("failed 2 times in a row and is paused"),
        "{notice}"
    );
    // Resumed: counted afresh, and it has a next firing again.
    let (status, resumed) = chorus
        .call(
            Method::PATCH,
            &format!("/api/agents/flaky/schedules/{id}"),
            Some(json!({"paused": false})),
        )
        .await?;
    assert_eq!(status, 200);
    assert!(
        resumed["paused"] == false
            && resumed["failures"] == 0
            && resumed["next_run_at"].is_string(),
        "{resumed}"
    );
    Ok(())
}

/// A scheduled run never waits for a person: the agent's `on_ask` is `prompt`, so
/// its ask resolves as a deny (audited); the same call in a person's thread waits.
#[tokio::test]
async fn a_scheduled_run_never_waits_for_a_person() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "").await?;
    chorus
        .create_agent_with(json!({"name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]}}))
        .await?;
    let id = create(
        &chorus,
        "careful",
        json!({"prompt": "write the plan", "cron": "0 0 1 1 *", "timezone": "UTC"}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    model.push(text("I could not write the plan."));
    let (status, run) = chorus
        .call(
            Method::POST,
            &format!("/api/agents/careful/schedules/{id}/run"),
            None,
        )
        .await?;
    assert_eq!(status, 201, "{run}");
    let runs = wait_runs(&chorus, "careful", id, |r| ended(r, 1)).await?;
    assert_eq!(runs[0]["status"], "completed", "{runs:#?}");
    let thread = chorus
        .thread("careful", runs[0]["thread"].as_u64().unwrap())
        .await?;
    let results = tool_results(&thread);
    assert_eq!(results.len(), 1, "{thread:#}");
    assert!(results[0].0, "the call was refused: {results:?}");
    assert!(
        results[0].1.contains("a scheduled thread does not wait"),
        "{results:?}"
    );
    assert!(
        !chorus
            .agent_dir("careful")
            .join("workspace/plan.md")
            .exists()
    );
    let approvals: Vec<Value> = chorus
        .api(Method::GET, "/api/approvals")
        .send()
        .await?
        .json()
        .await?;
    assert!(approvals.is_empty(), "nobody was asked: {approvals:?}");
    let audit: Value = chorus
        .api(Method::GET, "/api/agents/careful/audit")
        .send()
        .await?
        .json()
        .await?;
    let denied = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "tool:create_file:plan.md")
        .expect("the call is audited");
    assert_eq!(denied["decision"], "ask_auto_denied", "{denied:#}");
    assert!(
        denied["detail"]
            .to_string()
            .contains("a scheduled thread never waits for a person"),
        "{denied:#}"
    );

    // The control: a person's thread making the same call waits for an approval.
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    let person = chorus.send_message("careful", "write the plan").await?;
    chorus
        .wait_thread("careful", person, WAIT, |t| {
            t["status"] == "waiting_for_permission"
        })
        .await?;
    Ok(())
}

/// `chorus schedule add|list|run|runs|remove` through the real binaries: what a
/// person reads, what scripts get with `--json`, and a bad cron's message.
#[tokio::test]
async fn schedules_from_the_terminal_client() -> anyhow::Result<()> {
    use super::cli::{client, stderr, stdout};
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None, "").await?;
    chorus.create_agent("helper").await?;
    let added = client(
        &chorus,
        &[
            "schedule",
            "add",
            "helper",
            "Summarise my inbox",
            "--cron",
            "30 7 * * mon-fri",
            "--tz",
            "Europe/Berlin",
            "--json",
        ],
    )
    .await;
    assert!(added.status.success(), "{}", stderr(&added));
    let made: Value = serde_json::from_slice(&added.stdout)?;
    let id = made["id"].as_u64().unwrap().to_string();
    assert_eq!(made["timezone"], "Europe/Berlin");

    let bad = client(
        &chorus,
        &[
            "schedule", "add", "helper", "x", "--cron", "* * *", "--tz", "UTC",
        ],
    )
    .await;
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("send five"), "{}", stderr(&bad));

    let listed = client(&chorus, &["schedule", "list", "helper"]).await;
    let text_out = stdout(&listed);
    assert!(
        text_out.starts_with("ID  NEXT RUN (UTC)")
            && text_out.contains("30 7 * * mon-fri (Europe/Berlin)")
            && text_out.contains("Summarise my inbox"),
        "{text_out}"
    );

    model.push(text("Inbox: empty."));
    let ran = client(&chorus, &["schedule", "run", "helper", &id]).await;
    assert!(ran.status.success(), "{}", stderr(&ran));
    assert!(
        stdout(&ran).contains("runs now in thread"),
        "{}",
        stdout(&ran)
    );
    wait_runs(&chorus, "helper", made["id"].as_u64().unwrap(), |r| {
        ended(r, 1)
    })
    .await?;
    let runs_out = client(&chorus, &["schedule", "runs", "helper", &id]).await;
    let text_out = stdout(&runs_out);
    assert!(
        text_out.starts_with("STARTED") && text_out.contains("  manual  completed  "),
        "{text_out}"
    );

    let removed = client(&chorus, &["schedule", "remove", "helper", &id]).await;
    assert!(removed.status.success(), "{}", stderr(&removed));
    let listed = client(&chorus, &["schedule", "list", "helper"]).await;
    assert_eq!(stdout(&listed), "helper has no schedules.\n");
    Ok(())
}

/// `/schedule …` in an agent's channel: an operator adds and runs one, a viewer may
/// list but not run; the pause after a failed run is posted in the agent's channel.
#[tokio::test]
async fn schedules_on_discord_and_the_pause_is_posted_in_the_agents_channel() -> anyhow::Result<()>
{
    use chorus_test_support::FakeDiscord;
    const OPERATOR: &str = "600000000000000002";
    const VIEWER: &str = "600000000000000003";
    const CHANNEL: &str = "700000000000000031";
    let discord = FakeDiscord::start().await;
    let model = FakeOpenAi::start().await;
    let chorus = super::discord::with_bot_config(
        &discord,
        &model,
        "[discord.roles]\n\"111\" = \"operator\"\n\n[schedules]\npause_after_failures = 1\n",
    )
    .await?;
    chorus
        .create_agent_with(json!({"name": "flaky", "discord_channel_id": CHANNEL}))
        .await?;
    let answer = |token: String| {
        let discord = &discord;
        async move {
            let (_, body) = discord
                .wait_for("an interaction answer", WAIT, |d| {
                    d.answers(&token).into_iter().next()
                })
                .await?;
            anyhow::Ok(
                body["data"]["content"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            )
        }
    };
    let sub = |name: &str, options: Value| json!([{"name": name, "type": 1, "options": options}]);
    let add = sub(
        "add",
        json!([
            {"name": "prompt", "type": 3, "value": "try"},
            {"name": "cron", "type": 3, "value": "0 0 1 1 *"},
            {"name": "timezone", "type": 3, "value": "UTC"},
        ]),
    );
    let said = answer(discord.slash(OPERATOR, &["111"], CHANNEL, "schedule", add)).await?;
    assert!(
        said.starts_with("Schedule 1 of **flaky**: `0 0 1 1 *` (UTC); next "),
        "{said}"
    );
    let run = sub("run", json!([{"name": "id", "type": 4, "value": 1}]));
    let said = answer(discord.slash(VIEWER, &[], CHANNEL, "schedule", run.clone())).await?;
    assert!(said.contains("Only an operator or an admin"), "{said}");
    assert!(
        runs(&chorus, "flaky", 1).await?.is_empty(),
        "the viewer ran nothing"
    );

    model.push(error(400, "invalid_request_error", "the model refuses"));
    let said = answer(discord.slash(OPERATOR, &["111"], CHANNEL, "schedule", run)).await?;
    assert!(said.contains("runs now, in thread"), "{said}");
    let notice = discord
        .wait_for("the pause posted", WAIT, |d| {
            d.posted().into_iter().find(|m| {
                m["channel_id"] == CHANNEL
                    && m["content"].as_str().unwrap_or("").contains("is paused")
            })
        })
        .await?;
    assert!(
        notice["content"]
            .as_str()
            .unwrap()
            .starts_with("Schedule 1 of flaky failed 1 time in a row and is paused."),
        "{notice}"
    );
    let list = sub("list", json!([]));
    let said = answer(discord.slash(VIEWER, &[], CHANNEL, "schedule", list)).await?;
    assert!(said.contains("- 1 · `0 0 1 1 *` (UTC) · paused"), "{said}");
    let runs_of = sub("runs", json!([{"name": "id", "type": 4, "value": 1}]));
    let said = answer(discord.slash(VIEWER, &[], CHANNEL, "schedule", runs_of)).await?;
    assert!(said.contains("manual · failed · thread"), "{said}");
    Ok(())
}

/// A run going when chorus is killed is still its schedule's run after the restart:
/// its thread is resumed, and its end is recorded when it comes.
#[tokio::test]
async fn a_run_going_through_a_crash_ends_as_its_thread_does_after_the_restart()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let data = tempfile::tempdir()?;
    let chorus = start(&model, Some(data.path()), "").await?;
    chorus.create_agent("steady").await?;
    let id = create(
        &chorus,
        "steady",
        json!({"prompt": "long report", "cron": "0 0 1 1 *", "timezone": "UTC"}),
    )
    .await?["id"]
        .as_u64()
        .unwrap();
    // The model call in flight when chorus dies is never answered.
    model.push(Reply::Silent);
    let (status, run) = chorus
        .call(
            Method::POST,
            &format!("/api/agents/steady/schedules/{id}/run"),
            None,
        )
        .await?;
    assert_eq!(status, 201, "{run}");
    model.wait_for_requests(1, WAIT).await;
    chorus.kill().await?;

    model.push(text("The report, after all."));
    let chorus = start(&model, Some(data.path()), "").await?;
    let runs = wait_runs(&chorus, "steady", id, |r| ended(r, 1)).await?;
    assert_eq!(runs[0]["status"], "completed", "{runs:#?}");
    assert_eq!(runs[0]["thread"], run["thread"], "the same thread, resumed");
    let thread = chorus
        .thread("steady", run["thread"].as_u64().unwrap())
        .await?;
    assert_eq!(thread["status"], "completed");
    Ok(())
}
