//! Context flush through the real binaries and the fake model: a conversation whose
//! context passes `[memory] flush_at` of its model's window has its older part
//! summarised into the daily log once, and it leaves the model's window while search
//! still finds it.

use std::time::Duration;

use chorus_test_support::fake_model::{Reply, text};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

/// Said once, in the first message: the word only the flushed span has.
const FIRST: &str = "My boat is called WOMBAT and it is blue.";
/// How the flush's summary request begins (`control-plane/src/summaries.rs`).
const FLUSH_INSTRUCTION: &str = "You keep an agent's daily log.";
const SUMMARY: &str = "The user's boat is called WOMBAT; it is blue.";
const WAIT: Duration = Duration::from_secs(30);

/// The fake model: the flush's summary request gets the summary, anything else "ok".
fn answer(body: &Value) -> Reply {
    if body.to_string().contains(FLUSH_INSTRUCTION) {
        text(SUMMARY)
    } else {
        text("ok")
    }
}

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-flush")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config(
            "[models.limits.\"fake-model\"]\ncontext_window = 1000\n\n[memory]\nflush_at = 0.75\n",
        )
        .start()
        .await
}

/// Sends `content` as a reply to the latest answer of `thread` (none: a new
/// thread); returns the thread it went to, once that is completed.
async fn say(
    chorus: &Chorus,
    agent: &str,
    thread: Option<&Value>,
    content: &str,
) -> anyhow::Result<Value> {
    let mut body = json!({ "content": content });
    if let Some(thread) = thread {
        let answer = thread["messages"]
            .as_array()
            .and_then(|m| m.iter().rev().find(|m| m["role"] == "assistant"))
            .expect("an answer to reply to");
        body["reply_to"] = answer["id"].clone();
    }
    let sent: Value = chorus
        .api(Method::POST, &format!("/api/agents/{agent}/messages"))
        .json(&body)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let id = sent["thread_id"].as_u64().expect("thread_id");
    let thread = chorus.wait_thread_finished(agent, id, WAIT).await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    Ok(thread)
}

/// The flush entries of the agent's daily logs (lines whose provenance names a
/// span of messages).
fn flush_entries(chorus: &Chorus, agent: &str) -> Vec<(String, String)> {
    let dir = chorus.agent_dir(agent).join("memory");
    let mut found = Vec::new();
    for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // A file being written is a `.tmp-<pid>` until its rename: not a log yet.
        if name == "MEMORY.md" || !name.ends_with(".md") {
            continue;
        }
        let text = std::fs::read_to_string(entry.path()).unwrap_or_default();
        for line in text.lines().filter(|l| l.contains(" messages:")) {
            found.push((name.clone(), line.to_string()));
        }
    }
    found
}

/// The non-system messages of a model request.
fn conversation_of(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// The model request of the run that answered `content` (not a summary's).
fn request_for(model: &FakeModel, content: &str) -> Value {
    model
        .requests()
        .into_iter()
        .rev()
        .map(|r| r.body)
        .find(|b| {
            !b.to_string().contains(FLUSH_INSTRUCTION)
                && conversation_of(b).last().is_some_and(|m| m == content)
        })
        .unwrap_or_else(|| panic!("no model request answered {content:?}"))
}

#[tokio::test]
async fn a_long_conversation_flushes_once_into_the_daily_log_and_search_still_finds_it()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(answer);
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("sailor").await?;
    let mut feed = chorus.open_events("?agent=sailor", None).await?;

    // Under the threshold (the fake reports 20 input tokens of a 1000-token window):
    // nothing is flushed, however many exchanges.
    let first = say(&chorus, "sailor", None, FIRST).await?;
    let second = say(&chorus, "sailor", Some(&first), "It has two sails.").await?;
    assert!(flush_entries(&chorus, "sailor").is_empty());

    // The model reports 800 of 1000 tokens: past 0.75 of the window, so the end of
    // this run flushes everything before the latest two exchanges (the first one).
    model.set_usage(800, 10);
    let third = say(&chorus, "sailor", Some(&second), "Where should I moor it?").await?;
    let third_id = third["id"].as_u64().unwrap();
    let deadline = tokio::time::Instant::now() + WAIT;
    let entries = loop {
        let entries = flush_entries(&chorus, "sailor");
        if !entries.is_empty() || tokio::time::Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(entries.len(), 1, "{entries:#?}");
    let (log, line) = &entries[0];
    // The entry: the model's summary, and where it came from (the thread and its
    // first two messages, the flushed span).
    let ids: Vec<u64> = third["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    assert!(line.contains(SUMMARY), "{line}");
    assert!(
        line.contains(&format!(
            " thread:{third_id} messages:{}-{} at:",
            ids[0], ids[1]
        )),
        "{line}"
    );
    let entry_id = line
        .split("<!-- mem:")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .to_string();
    // The person is told, on the agent's feed.
    let notice = tokio::time::timeout(WAIT, async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" && data["kind"] == "context_flushed" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(notice["thread_id"], third_id, "{notice}");
    assert_eq!(notice["entry_id"], entry_id.as_str(), "{notice}");
    assert_eq!(notice["path"], format!("memory/{log}"), "{notice}");

    // Still past the threshold: the next request no longer carries the flushed
    // messages but a note saying where they are (its continuation starts after
    // them), and the log entry is in its memory section.
    let fourth = say(&chorus, "sailor", Some(&third), "And in winter?").await?;
    let request = request_for(&model, "And in winter?");
    let messages = conversation_of(&request);
    assert!(
        !messages.iter().any(|m| m.contains("WOMBAT")),
        "{messages:#?}"
    );
    assert!(
        messages[0].starts_with("[Earlier context: the first 2 messages")
            && messages[0].contains(&format!("memory/{log} mem:{entry_id}"))
            && messages[0].contains("memory_search"),
        "{messages:#?}"
    );
    assert!(
        messages.iter().any(|m| m == "It has two sails.")
            && messages.iter().any(|m| m == "Where should I moor it?"),
        "the kept exchanges are still there: {messages:#?}"
    );
    let system = request["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains(SUMMARY), "{system}");

    // Its run end flushes again, but only what came after the first span (the note
    // and the second exchange): the flushed span is never summarised twice.
    let fourth_id = fourth["id"].as_u64().unwrap();
    let ids: Vec<u64> = fourth["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_u64().unwrap())
        .collect();
    let deadline = tokio::time::Instant::now() + WAIT;
    let entries = loop {
        let entries = flush_entries(&chorus, "sailor");
        if entries.len() > 1 || tokio::time::Instant::now() > deadline {
            break entries;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(entries.len(), 2, "{entries:#?}");
    assert!(
        entries[1].1.contains(&format!(
            " thread:{fourth_id} messages:{}-{} at:",
            ids[0], ids[2]
        )),
        "{entries:#?}"
    );
    let summaries: Vec<Value> = model
        .requests()
        .into_iter()
        .map(|r| r.body)
        .filter(|b| b.to_string().contains(FLUSH_INSTRUCTION))
        .collect();
    assert_eq!(summaries.len(), 2);
    let second_span = conversation_of(&summaries[1]).join("\n");
    assert!(
        !second_span.contains(FIRST) && second_span.contains("It has two sails."),
        "{second_span}"
    );
    tokio::time::timeout(WAIT, async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" && data["kind"] == "context_flushed" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;

    // Under the threshold again: a further message flushes nothing.
    model.set_usage(300, 10);
    say(&chorus, "sailor", Some(&fourth), "Thanks.").await?;
    assert_eq!(flush_entries(&chorus, "sailor").len(), 2);

    // What was flushed is still found: the message in the threads, the entry in the log.
    let found: Value = chorus
        .api(Method::GET, "/api/agents/sailor/memory/search?q=WOMBAT")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let hits = found["hits"].as_array().unwrap();
    assert!(
        hits.iter()
            .any(|h| h["source"] == "message" && h["text"].as_str().unwrap().contains("WOMBAT")),
        "{found:#}"
    );
    assert!(
        hits.iter().any(|h| h["source"] == "memory"
            && h["path"] == format!("memory/{log}")
            && h["text"].as_str().unwrap().contains(SUMMARY)),
        "{found:#}"
    );
    Ok(())
}
