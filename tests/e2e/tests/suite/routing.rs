//! Routing (E1) through the real binaries: every message has an id, a reply names
//! one, and the reply goes to that message's thread — into it while it runs, or into
//! a new thread carrying its context once it has ended.

use std::time::Duration;

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn send(chorus: &Chorus, agent: &str, body: Value) -> anyhow::Result<Value> {
    let response = chorus
        .api(Method::POST, &format!("/api/agents/{agent}/messages"))
        .json(&body)
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == StatusCode::ACCEPTED,
        "{}",
        response.text().await?
    );
    Ok(response.json().await?)
}

/// The contents of the messages a model request carried, in order.
fn contents(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[tokio::test]
async fn a_reply_to_an_ended_thread_starts_a_linked_thread_carrying_its_context()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("the capital is Paris"));
    model.push(text("about 2.1 million"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("geo").await?;

    let first = send(&chorus, "geo", json!({"content": "capital of France?"})).await?;
    assert_eq!(first["routed"], "new", "{first:#}");
    let thread = chorus
        .wait_thread_finished(
            "geo",
            first["thread_id"].as_u64().unwrap(),
            Duration::from_secs(20),
        )
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let messages = thread["messages"].as_array().unwrap();
    assert_eq!(messages[0]["id"], first["message_id"], "{thread:#}");
    let answer = &messages[1];
    assert_eq!(answer["content"], "the capital is Paris");

    let reply = send(
        &chorus,
        "geo",
        json!({"content": "and its population?", "reply_to": answer["id"]}),
    )
    .await?;
    let from = first["thread_id"].as_u64().unwrap();
    assert_eq!(
        reply["routed"],
        format!("continued_from:{from}"),
        "{reply:#}"
    );
    let next = reply["thread_id"].as_u64().unwrap();
    assert_ne!(next, from);
    let thread = chorus
        .wait_thread_finished("geo", next, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(thread["continued_from"], from, "{thread:#}");
    // The model saw the earlier exchange, then the reply.
    let requests = model.requests();
    assert_eq!(
        contents(&requests[1].body),
        [
            "capital of France?",
            "the capital is Paris",
            "and its population?"
        ]
    );

    // The list shows both with their summary, steps and elapsed time.
    let list: Value = chorus
        .api(Method::GET, "/api/agents/geo/threads")
        .send()
        .await?
        .json()
        .await?;
    let listed = list.as_array().unwrap();
    assert_eq!(listed.len(), 2, "{list:#}");
    assert_eq!(listed[0]["summary"], "capital of France?", "{list:#}");
    assert_eq!(listed[0]["step_number"], 1, "{list:#}");
    assert!(listed[0]["elapsed_ms"].is_u64(), "{list:#}");
    assert!(listed[0]["current_step"].is_null(), "{list:#}");
    Ok(())
}

#[tokio::test]
async fn a_reply_to_an_unknown_message_starts_a_new_thread() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("hello"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("fresh").await?;
    let sent = send(
        &chorus,
        "fresh",
        json!({"content": "hi", "reply_to": 987_654}),
    )
    .await?;
    assert_eq!(sent["routed"], "new", "{sent:#}");
    let thread = chorus
        .wait_thread_finished(
            "fresh",
            sent["thread_id"].as_u64().unwrap(),
            Duration::from_secs(20),
        )
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(contents(&model.requests()[0].body), ["hi"]);
    Ok(())
}

#[tokio::test]
async fn a_reply_to_a_running_thread_is_seen_at_its_next_model_call() -> anyhow::Result<()> {
    use chorus_test_support::Hold;
    use chorus_test_support::fake_model::{Reply, tool_call};
    let model = FakeOpenAi::start().await;
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(tool_call("c1", "view", json!({"path": ".gitkeep"}))),
    ));
    model.push(text("checked both"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("steer").await?;
    let first = send(&chorus, "steer", json!({"content": "look at the repo"})).await?;
    let thread_id = first["thread_id"].as_u64().unwrap();
    model.wait_for_requests(1, Duration::from_secs(20)).await;

    // The model is thinking; the user adds something by replying to the thread.
    let reply = send(
        &chorus,
        "steer",
        json!({"content": "also check the README", "reply_to": first["message_id"]}),
    )
    .await?;
    assert_eq!(
        (&reply["routed"], &reply["thread_id"]),
        (&json!("injected"), &json!(thread_id)),
        "{reply:#}"
    );
    let waiting = chorus.thread("steer", thread_id).await?;
    let last = waiting["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (&last["content"], &last["pending"]),
        (&json!("also check the README"), &json!(true)),
        "shown as not yet seen: {waiting:#}"
    );
    hold.release();

    let thread = chorus
        .wait_thread_finished("steer", thread_id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    // The next model call carried it, after the tool result it was sent during.
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let seen = &requests[1].body["messages"];
    let roles: Vec<&str> = seen
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "user"],
        "{seen:#}"
    );
    assert_eq!(seen[4]["content"], "also check the README");
    // The stored thread has it in the same place, with the id the reply got.
    let stored: Vec<(Value, Value)> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["role"].clone(), m["id"].clone()))
        .collect();
    assert_eq!(
        stored[3],
        (json!("user"), reply["message_id"].clone()),
        "{thread:#}"
    );
    assert_eq!(stored.len(), 5, "{thread:#}");
    Ok(())
}

#[tokio::test]
async fn a_long_thread_is_continued_from_a_model_written_summary() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    // Over the 256 KiB a continuation carries: the first exchange is left out.
    let long = "long report line\n".repeat(20_000);
    model.push(text(&long));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("scribe").await?;
    let first = send(
        &chorus,
        "scribe",
        json!({"content": "write the full report"}),
    )
    .await?;
    let from = first["thread_id"].as_u64().unwrap();
    let thread = chorus
        .wait_thread_finished("scribe", from, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    // The summary is asked for first, then the continuation runs from it.
    model.push(text(
        "The user asked for the full report; it was written in full.",
    ));
    model.push(text("Here is the short version."));
    let reply = send(
        &chorus,
        "scribe",
        json!({"content": "now shorten it", "reply_to": thread["messages"][1]["id"]}),
    )
    .await?;
    assert_eq!(
        reply["routed"],
        format!("continued_from:{from}"),
        "{reply:#}"
    );
    let next = reply["thread_id"].as_u64().unwrap();
    let done = chorus
        .wait_thread_finished("scribe", next, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");

    let requests = model.requests();
    let summary_request = &requests[requests.len() - 2].body;
    assert!(
        summary_request["messages"][0]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("condense the earlier part"),
        "{summary_request:#}"
    );
    assert!(contents(summary_request).contains(&"write the full report".to_string()));
    let run_request = &requests[requests.len() - 1].body;
    let seen = contents(run_request);
    assert!(
        seen[0].contains("A summary of its first 2 messages")
            && seen[0].ends_with("it was written in full."),
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap(), "now shorten it");
    assert!(
        !run_request.to_string().contains("long report line"),
        "the left-out part is not sent again"
    );
    // The thread shows what its model saw.
    let messages = done["messages"].as_array().unwrap();
    assert_eq!(messages[0]["content"], seen[0].as_str());
    Ok(())
}

#[tokio::test]
async fn a_continuation_cut_off_by_a_killed_control_plane_starts_at_the_next_start()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text(&"long report line\n".repeat(20_000)));
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("data");
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    chorus.create_agent("scribe").await?;
    let first = send(
        &chorus,
        "scribe",
        json!({"content": "write the full report"}),
    )
    .await?;
    let from = first["thread_id"].as_u64().unwrap();
    let thread = chorus
        .wait_thread_finished("scribe", from, Duration::from_secs(30))
        .await?;

    // The summary of the left-out part is never written: the control plane dies
    // while it waits for it.
    model.push(chorus_test_support::Reply::Silent);
    let reply = send(
        &chorus,
        "scribe",
        json!({"content": "now shorten it", "reply_to": thread["messages"][1]["id"]}),
    )
    .await?;
    let next = reply["thread_id"].as_u64().unwrap();
    model.wait_for_requests(2, Duration::from_secs(20)).await;
    chorus.kill().await?;

    // The next start gives the thread its first run, from the note.
    model.push(text("Here is the short version."));
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    let done = chorus
        .wait_thread_finished("scribe", next, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    assert_eq!(done["continued_from"], from);
    let seen = contents(&model.requests().last().unwrap().body);
    assert!(
        seen[0].contains("first 2 messages are left out"),
        "{seen:?}"
    );
    assert_eq!(seen.last().unwrap(), "now shorten it");
    Ok(())
}

#[tokio::test]
async fn a_new_thread_is_titled_by_its_model_after_the_first_answer() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_title_reply(text("\"Capital of France.\"\n"));
    model.push(text("the capital is Paris"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("geo").await?;
    let mut feed = chorus.open_events("?agent=geo", None).await?;
    let first = send(
        &chorus,
        "geo",
        json!({"content": "which city is the capital of France? be brief"}),
    )
    .await?;
    let id = first["thread_id"].as_u64().unwrap();
    // Until the title is written, the request's first line stands in.
    let titled = chorus
        .wait_thread("geo", id, Duration::from_secs(20), |t| {
            t["summary"] == "Capital of France"
        })
        .await?;
    assert_eq!(titled["status"], "completed", "{titled:#}");
    let asked = model.title_requests();
    assert_eq!(asked.len(), 1);
    let body = asked[0].body.to_string();
    assert!(
        body.contains("the capital is Paris"),
        "after the first answer: {body}"
    );
    assert_eq!(asked[0].body.get("tools"), None);
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "summary" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(told["summary"], "Capital of France");

    // A continuation keeps the title of the thread it continues; none is asked.
    model.push(text("about 2.1 million"));
    let thread = chorus.thread("geo", id).await?;
    let reply = send(
        &chorus,
        "geo",
        json!({"content": "and its population?", "reply_to": thread["messages"][1]["id"]}),
    )
    .await?;
    let next = reply["thread_id"].as_u64().unwrap();
    let done = chorus
        .wait_thread_finished("geo", next, Duration::from_secs(20))
        .await?;
    assert_eq!(done["summary"], "Capital of France");
    assert_eq!(model.title_requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn titles_can_be_switched_off() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("hello"));
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    chorus.create_agent("plain").await?;
    let id = chorus.send_message("plain", "say hello\nplease").await?;
    let done = chorus
        .wait_thread_finished("plain", id, Duration::from_secs(20))
        .await?;
    assert_eq!(done["summary"], "say hello");
    assert!(model.title_requests().is_empty());
    Ok(())
}
