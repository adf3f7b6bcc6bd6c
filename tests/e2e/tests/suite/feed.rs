//! `GET /api/events`, the live feed of every thread, through the real binaries:
//! ids on every event, and a reconnect with `Last-Event-ID` that delivers every
//! missed event once.

use std::time::Duration;

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, EventStream, FakeOpenAi};
use serde_json::Value;

/// Reads events until `thread`'s final status; returns (id, kind, data) of each.
async fn until_done(
    stream: &mut EventStream,
    thread: u64,
) -> anyhow::Result<Vec<(String, String, Value)>> {
    let mut seen = Vec::new();
    let read = async {
        while let Some((kind, data)) = stream.next().await? {
            // The agent's own events (its worker attaching) belong to no thread.
            if kind == "worker" || kind == "agent" {
                continue;
            }
            let id = stream.last_id().unwrap_or_default().to_string();
            let done = kind == "status"
                && data["thread_id"] == thread
                && matches!(data["status"].as_str(), Some("completed" | "failed"));
            seen.push((id, kind, data));
            if done {
                return anyhow::Ok(());
            }
        }
        anyhow::bail!("the feed ended: {seen:?}")
    };
    tokio::time::timeout(Duration::from_secs(30), read).await??;
    Ok(seen)
}

fn seq(id: &str) -> u64 {
    id.rsplit_once('.')
        .and_then(|(_, n)| n.parse().ok())
        .unwrap_or_else(|| panic!("bad event id {id:?}"))
}

#[tokio::test]
async fn a_reconnect_with_last_event_id_gets_every_missed_event_once() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("first answer"));
    model.push(text("second answer"));
    model.push(text("an answer for the other agent"));
    // Titles off: a title written after a thread ended would be its late event.
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    chorus.create_agent("watched").await?;
    chorus.create_agent("other").await?;

    let mut live = chorus.open_events("?agent=watched", None).await?;
    let first = chorus.send_message("watched", "one").await?;
    let seen = until_done(&mut live, first).await?;
    let kinds: Vec<&str> = seen.iter().map(|(_, k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"thread_created"), "{kinds:?}");
    assert!(kinds.contains(&"step_started") && kinds.contains(&"message"));
    assert!(seen.iter().all(|(_, _, d)| d["agent"] == "watched"));
    let last = seen.last().unwrap().0.clone();
    drop(live); // the client goes away

    // Meanwhile: a thread of this agent runs and ends, and one of another agent.
    let second = chorus.send_message("watched", "two").await?;
    chorus
        .wait_thread_finished("watched", second, Duration::from_secs(30))
        .await?;
    let elsewhere = chorus.send_message("other", "three").await?;
    chorus
        .wait_thread_finished("other", elsewhere, Duration::from_secs(30))
        .await?;

    let mut resumed = chorus.open_events("?agent=watched", Some(&last)).await?;
    let missed = until_done(&mut resumed, second).await?;
    let ids: Vec<u64> = missed.iter().map(|(id, _, _)| seq(id)).collect();
    assert!(
        ids[0] > seq(&last),
        "nothing seen before is sent again: {ids:?}"
    );
    assert!(
        ids.windows(2).all(|w| w[0] < w[1]),
        "in order, once: {ids:?}"
    );
    assert!(
        missed
            .iter()
            .all(|(_, _, d)| d["thread_id"] == second && d["agent"] == "watched"),
        "{missed:#?}"
    );
    assert_eq!(missed[0].1, "thread_created");
    assert!(
        missed
            .iter()
            .any(|(_, k, d)| k == "message" && d["content"] == "second answer")
    );
    drop(resumed);

    // An id from another start (or nonsense) is a reset, then live events.
    let mut stale = chorus.open_events("", Some("0.1")).await?;
    let (kind, data) = tokio::time::timeout(Duration::from_secs(10), stale.next())
        .await??
        .expect("a first event");
    assert_eq!(kind, "reset", "{data}");
    assert!(
        data["reason"]
            .as_str()
            .unwrap_or_default()
            .contains("restarted"),
        "{data}"
    );

    // An unknown agent is a 404, as everywhere.
    let response = chorus
        .api(reqwest::Method::GET, "/api/events?agent=nobody")
        .send()
        .await?;
    assert_eq!(response.status(), 404);
    Ok(())
}
