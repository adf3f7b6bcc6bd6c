//! Identity and memory through the real binaries and the fake model: what an agent
//! remembers (with where it came from) reaches later threads' system prompts until
//! a person retracts it; SOUL.md set over the API or edited by hand on disk reaches
//! the next model call, before the docs.

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const FACT: &str = "The user prefers metric units.";

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-memory")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

fn system_of(model: &FakeModel, index: usize) -> String {
    model.requests()[index].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

async fn get(chorus: &Chorus, path: &str) -> anyhow::Result<Value> {
    Ok(chorus.api(Method::GET, path).send().await?.json().await?)
}

async fn talk(chorus: &Chorus, agent: &str, message: &str) -> anyhow::Result<(u64, Value)> {
    let id = chorus.send_message(agent, message).await?;
    let thread = chorus
        .wait_thread_finished(agent, id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    Ok((id, thread))
}

#[tokio::test]
async fn a_remembered_fact_reaches_later_threads_until_it_is_retracted() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call("toolu_01", "remember", json!({"text": FACT})));
    model.push(text("noted"));
    model.push(text("metres it is"));
    model.push(text("and now?"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("keeper").await?;

    let (thread, record) = talk(&chorus, "keeper", "I like metric units").await?;
    let results = tool_results(&record);
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");
    // The file holds the entry, with its thread and tool call next to it.
    let file = std::fs::read_to_string(chorus.agent_dir("keeper").join("memory/MEMORY.md"))?;
    let line = file
        .lines()
        .find(|l| l.contains(FACT))
        .unwrap_or_else(|| panic!("no entry in {file}"));
    assert!(line.starts_with(&format!("- {FACT} <!-- mem:")), "{line}");
    assert!(
        line.contains(&format!(" thread:{thread} call:toolu_01 at:")),
        "{line}"
    );
    // The API lists it with the same provenance.
    let memory = get(&chorus, "/api/agents/keeper/memory").await?;
    let entry = memory["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["text"] == FACT)
        .unwrap_or_else(|| panic!("{memory:#}"))
        .clone();
    assert_eq!(entry["thread_id"], thread, "{entry}");
    assert_eq!(entry["call_id"], "toolu_01", "{entry}");
    assert_eq!(entry["file"], "memory/MEMORY.md");
    assert_eq!(memory["limit"], 16384);
    let id = entry["id"].as_str().unwrap().to_string();

    // A later thread is told the fact, and the memory's size and limit.
    talk(&chorus, "keeper", "how tall is it?").await?;
    let later = system_of(&model, 2);
    assert!(later.contains(&format!("- {FACT} [mem:{id}]")), "{later}");
    assert!(later.contains("Your long-term memory is "), "{later}");
    assert!(later.contains(" of 16 KB."), "{later}");
    assert!(
        later.find("# Your docs").unwrap() < later.find("# Your memory").unwrap(),
        "{later}"
    );

    // Retracted: gone from the file, and from the next thread's prompt.
    let gone = chorus
        .api(Method::DELETE, &format!("/api/agents/keeper/memory/{id}"))
        .send()
        .await?;
    assert_eq!(gone.status(), 204);
    let again = chorus
        .api(Method::DELETE, &format!("/api/agents/keeper/memory/{id}"))
        .send()
        .await?;
    assert_eq!(again.status(), 404, "a second retraction finds nothing");
    let file = std::fs::read_to_string(chorus.agent_dir("keeper").join("memory/MEMORY.md"))?;
    assert!(!file.contains(FACT), "{file}");
    talk(&chorus, "keeper", "and now?").await?;
    let after = system_of(&model, 3);
    assert!(!after.contains(FACT), "{after}");

    // The audit log has the tool call and the retraction.
    let audit = get(&chorus, "/api/agents/keeper/audit?limit=100").await?;
    let rows: Vec<(String, String, String)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or("").to_string(),
                e["decision"].as_str().unwrap_or("").to_string(),
                e["detail"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert!(
        rows.iter()
            .any(|(a, d, _)| a == &format!("tool:remember:{FACT}") && d == "allow"),
        "{rows:#?}"
    );
    assert!(
        rows.iter()
            .any(|(a, _, detail)| a == "agent:memory:forget" && detail.contains(&id)),
        "{rows:#?}"
    );
    Ok(())
}

const EDITED: &str = "You are Ferris, edited by hand.";

/// Reads memory (slowly) until the system prompt carries the hand edit, then ends.
fn until_edited(body: &Value) -> Reply {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(1);
    let system = body["messages"][0]["content"].as_str().unwrap_or_default();
    if system.contains(EDITED) {
        return text("seen");
    }
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Reply::Delayed(
        Duration::from_millis(200),
        Box::new(tool_call(
            &format!("r{n}"),
            "memory_get",
            json!({"path": "MEMORY.md"}),
        )),
    )
}

#[tokio::test]
async fn soul_set_over_the_api_or_by_hand_reaches_the_next_model_call() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("ahoy"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("ferris").await?;
    let dir = chorus.agent_dir("ferris");
    // A new agent has the template's files; its SOUL.md is guidance only, left out.
    assert!(dir.join("SOUL.md").is_file() && dir.join("memory/MEMORY.md").is_file());

    let put = chorus
        .api(Method::PUT, "/api/agents/ferris/identity/SOUL.md")
        .json(&json!({"content": "You are Ferris, a crab."}))
        .send()
        .await?;
    assert_eq!(put.status(), 200, "{}", put.text().await?);
    let bad = chorus
        .api(Method::PUT, "/api/agents/ferris/identity/agent.json")
        .json(&json!({"content": "{}"}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    let identity = get(&chorus, "/api/agents/ferris/identity").await?;
    assert_eq!(identity["soul"], "You are Ferris, a crab.");
    talk(&chorus, "ferris", "who are you?").await?;
    let system = system_of(&model, 0);
    let soul = system
        .find("# Who you are (SOUL.md)\nYou are Ferris, a crab.")
        .unwrap_or_else(|| panic!("{system}"));
    assert!(soul < system.find("# Your docs").unwrap(), "{system}");
    assert!(
        !system.contains("USER.md"),
        "the template's USER.md is left out: {system}"
    );

    // A hand edit while a thread runs shows in one of its next model calls: the
    // model keeps reading its memory until its system prompt carries the edit.
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(tool_call("r0", "memory_get", json!({"path": "MEMORY.md"}))),
    ));
    model.set_fallback(until_edited);
    let id = chorus.send_message("ferris", "keep reading").await?;
    model.wait_for_requests(2, Duration::from_secs(20)).await;
    std::fs::write(dir.join("SOUL.md"), EDITED)?;
    let edited_at = model.requests().len();
    hold.release();
    let thread = chorus
        .wait_thread_finished("ferris", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");
    let last = system_of(&model, model.requests().len() - 1);
    assert!(last.contains(EDITED) && !last.contains("a crab"), "{last}");
    // The same thread's call before the edit had the old text (a positive control:
    // the edit, not a new thread, changed it).
    assert!(system_of(&model, edited_at - 1).contains("a crab"));
    Ok(())
}

/// The other tools through the gate: `log_note` writes today's log (UTC) with its
/// provenance, `self_edit_identity` rewrites USER.md (not HEARTBEAT.md), and
/// `memory_get` reads a memory file with line numbers but nothing outside `memory/`;
/// each call is audited under its action string.
#[tokio::test]
async fn log_note_self_edit_identity_and_a_jailed_memory_get() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "n1",
        "log_note",
        json!({"text": "Deployed the site."}),
    ));
    model.push(tool_call(
        "i1",
        "self_edit_identity",
        json!({"file": "USER.md", "content": "Ada, a physicist."}),
    ));
    model.push(tool_call(
        "i2",
        "self_edit_identity",
        json!({"file": "HEARTBEAT.md", "content": "check mail"}),
    ));
    model.push(tool_call(
        "g1",
        "memory_get",
        json!({"path": "memory/MEMORY.md"}),
    ));
    model.push(tool_call("g2", "memory_get", json!({"path": "../USER.md"})));
    model.push(text("done"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("noter").await?;
    std::fs::write(
        chorus.agent_dir("noter").join("memory/MEMORY.md"),
        "# Long-term memory\n\n- first\n- second\n",
    )?;
    let (thread, record) = talk(&chorus, "noter", "note it").await?;
    let results = tool_results(&record);
    assert_eq!(results.len(), 5, "{results:?}");
    // The day's log (UTC), named as the tool said: read from the answer, so a test
    // across midnight does not look in the wrong file.
    let path = results[0]
        .1
        .strip_prefix("Noted in ")
        .and_then(|rest| rest.split(" as ").next())
        .unwrap_or_else(|| panic!("{results:?}"))
        .to_string();
    assert!(
        !results[0].0 && path.starts_with("memory/20") && path.ends_with(".md"),
        "{path}"
    );
    let log = std::fs::read_to_string(chorus.agent_dir("noter").join(&path))?;
    assert!(log.contains("- Deployed the site. <!-- mem:"), "{log}");
    assert!(log.contains(&format!("thread:{thread} call:n1")), "{log}");
    assert!(!results[1].0, "{results:?}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("noter").join("USER.md"))?,
        "Ada, a physicist."
    );
    assert!(
        results[2].0,
        "HEARTBEAT.md is not the agent's to edit: {results:?}"
    );
    assert!(
        !results[3].0 && results[3].1.contains("    3\t- first"),
        "{results:?}"
    );
    assert!(
        results[4].0 && results[4].1.contains("not a memory file"),
        "{results:?}"
    );
    // The next model call (after the tools) already had USER.md.
    assert!(system_of(&model, 5).contains("# Who you work for (USER.md)\nAda, a physicist."));

    let audit = get(&chorus, "/api/agents/noter/audit?limit=100").await?;
    let actions: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["action"].as_str())
        .collect();
    for expected in [
        "tool:log_note:Deployed the site.",
        "tool:self_edit:identity:USER.md",
        "tool:memory_get:memory/MEMORY.md",
        "tool:memory_get:../USER.md",
        "agent:identity:USER.md",
    ] {
        assert!(
            actions.contains(&expected),
            "{expected} not in {actions:#?}"
        );
    }
    Ok(())
}

/// Past `[memory] limit_bytes` a `remember` still writes and says by how much it is
/// over and what to fold; folding (`replaces`) removes the entries it names, and a
/// `replaces` naming no entry writes nothing and says so. Never an error loop.
#[tokio::test]
async fn past_the_limit_remember_writes_and_says_what_to_fold() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-memory")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[memory]\nlimit_bytes = 1024\n")
        .start()
        .await?;
    chorus.create_agent("full").await?;
    let long = "x".repeat(600);
    model.push(tool_call(
        "m1",
        "remember",
        json!({"text": format!("first {long}")}),
    ));
    model.push(tool_call(
        "m2",
        "remember",
        json!({"text": format!("second {long}")}),
    ));
    model.push(text("stored"));
    let (_, thread) = talk(&chorus, "full", "remember twice").await?;
    let results = tool_results(&thread);
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");
    let over = &results[1].1;
    assert!(
        over.contains("of its 1 KB limit") && over.contains("over"),
        "{over}"
    );
    assert!(over.contains("the longest are mem:"), "{over}");
    let memory = get(&chorus, "/api/agents/full/memory").await?;
    assert!(memory["size"].as_u64().unwrap() > 1024, "{memory}");
    let ids: Vec<String> = memory["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["id"].as_str().map(str::to_string))
        .collect();
    assert_eq!(ids.len(), 2, "{memory}");

    model.push(tool_call(
        "m3",
        "remember",
        json!({"text": "first and second, folded", "replaces": ids}),
    ));
    model.push(tool_call(
        "m4",
        "remember",
        json!({"text": "never written", "replaces": ["deadbeef"]}),
    ));
    model.push(text("folded"));
    let (_, thread) = talk(&chorus, "full", "fold them").await?;
    let results = tool_results(&thread);
    assert!(
        !results[0].0 && results[0].1.contains("replacing"),
        "{results:?}"
    );
    assert!(
        results[1].0 && results[1].1.contains("mem:deadbeef"),
        "{results:?}"
    );
    let file = std::fs::read_to_string(chorus.agent_dir("full").join("memory/MEMORY.md"))?;
    assert!(file.contains("first and second, folded"), "{file}");
    assert!(
        !file.contains("never written") && !file.contains(&long),
        "{file}"
    );
    assert!(
        file.contains(&format!("folds:{},{}", ids[0], ids[1])),
        "{file}"
    );
    Ok(())
}

/// With a dial-in worker the files stay with the control plane (the worker's volume
/// holds none of them), and the worker's runs get them rendered in the assignment.
#[tokio::test]
async fn a_dial_in_worker_serves_an_agent_with_identity_and_memory() -> anyhow::Result<()> {
    use super::dial_in::{DialInWorker, JOIN_TOKEN, fixed_grpc_addr, remote_chorus, wait_running};
    let model = FakeOpenAi::start().await;
    let data = tempfile::tempdir()?;
    let control_plane = data.path().join("control-plane");
    let volume = data.path().join("volume");
    let chorus = remote_chorus(&model, &control_plane, &fixed_grpc_addr()?).await?;
    let _worker = DialInWorker::start(&chorus.grpc_url, &volume, 1, JOIN_TOKEN);
    chorus.create_agent("far").await?;
    wait_running(&chorus, "far", Duration::from_secs(30)).await?;
    let put = chorus
        .api(Method::PUT, "/api/agents/far/identity/USER.md")
        .json(&json!({"content": "Ada, who lives far away."}))
        .send()
        .await?;
    assert_eq!(put.status(), 200);
    model.push(tool_call(
        "toolu_far",
        "remember",
        json!({"text": "Ada likes tea."}),
    ));
    model.push(text("noted"));
    model.push(text("tea"));
    let (thread, _) = talk(&chorus, "far", "I like tea").await?;
    let file = std::fs::read_to_string(control_plane.join("agents/far/memory/MEMORY.md"))?;
    assert!(
        file.contains("- Ada likes tea. <!-- mem:")
            && file.contains(&format!("thread:{thread} call:toolu_far")),
        "{file}"
    );
    assert!(
        !volume.join("agents/far/memory").exists(),
        "no memory on the worker's volume"
    );
    assert!(!volume.join("agents/far/USER.md").exists());
    talk(&chorus, "far", "what do I drink?").await?;
    let system = system_of(&model, 2);
    assert!(
        system.contains("# Who you work for (USER.md)\nAda, who lives far away."),
        "{system}"
    );
    assert!(system.contains("- Ada likes tea. [mem:"), "{system}");
    Ok(())
}

/// A claude-code agent's instructions come from the same function: its identity
/// and memory reach the model's system prompt through the CLI, before the docs.
#[tokio::test]
async fn a_claude_code_agent_is_told_its_identity_and_memory() -> anyhow::Result<()> {
    use chorus_test_support::FakeAnthropic;
    let model = FakeAnthropic::start().await;
    let chorus = Chorus::builder()
        .env("ANTHROPIC_BASE_URL", &model.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-e2e-memory-key")
        .env("CHORUS_DEFAULT_MODEL", "claude-fake")
        .start()
        .await?;
    chorus
        .create_agent_with(json!({"name": "clawd", "backend": "claude-code"}))
        .await?;
    let put = chorus
        .api(Method::PUT, "/api/agents/clawd/identity/SOUL.md")
        .json(&json!({"content": "You are Clawd, a careful crab."}))
        .send()
        .await?;
    assert_eq!(put.status(), 200);
    std::fs::write(
        chorus.agent_dir("clawd").join("memory/MEMORY.md"),
        "# Long-term memory\n\n- The user is called Ada.\n",
    )?;
    model.push(text("Hello Ada."));
    talk(&chorus, "clawd", "hi").await?;
    let systems: Vec<String> = model
        .requests()
        .iter()
        .map(|r| r.body["system"].to_string())
        .collect();
    let system = systems
        .iter()
        .find(|s| s.contains("You are Clawd, a careful crab."))
        .unwrap_or_else(|| panic!("no request carried SOUL.md: {systems:#?}"));
    let at = |s: &str| {
        system
            .find(s)
            .unwrap_or_else(|| panic!("{s} not in {system}"))
    };
    assert!(at("You are Clawd") < at("# Your docs"), "{system}");
    assert!(
        at("# Your docs") < at("The user is called Ada."),
        "{system}"
    );
    assert!(system.contains("Your long-term memory is "), "{system}");
    Ok(())
}

/// The terminal client: `chorus agent identity` sets and shows SOUL.md, `chorus
/// memory show` lists entries with their ids and provenance and shows a file,
/// `chorus memory forget` retracts one; a bad id is an error saying what an id is.
#[tokio::test]
async fn the_terminal_client_shows_sets_and_forgets() -> anyhow::Result<()> {
    use super::cli::{client, stderr, stdout};
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("term").await?;
    let dir = chorus.agent_dir("term");
    let soul = dir.join("soul-draft.md");
    std::fs::write(&soul, "You are Term, terse.")?;
    let set = client(
        &chorus,
        &[
            "agent",
            "identity",
            "term",
            "soul",
            "--set",
            soul.to_str().unwrap(),
        ],
    )
    .await;
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(
        std::fs::read_to_string(dir.join("SOUL.md"))?,
        "You are Term, terse."
    );
    let shown = client(&chorus, &["agent", "identity", "term", "soul"]).await;
    assert_eq!(stdout(&shown), "== SOUL.md ==\nYou are Term, terse.\n");

    std::fs::write(
        dir.join("memory/MEMORY.md"),
        "# Long-term memory\n\n- Term likes tabs. <!-- mem:0a1b2c3d thread:4 call:toolu_t at:2026-11-26T21:40:00Z -->\n- hand-written\n",
    )?;
    let listed = client(&chorus, &["memory", "show", "term"]).await;
    let text = stdout(&listed);
    assert!(text.contains("0a1b2c3d  Term likes tabs."), "{text}");
    assert!(
        text.contains("(thread 4, toolu_t, 2026-11-26T21:40:00Z)"),
        "{text}"
    );
    assert!(text.contains("--------  hand-written"), "{text}");
    let found = client(&chorus, &["memory", "search", "term", "likes", "TABS*"]).await;
    assert!(found.status.success(), "{}", stderr(&found));
    let text = stdout(&found);
    assert!(
        text.contains("  memory/MEMORY.md:3\n      Term likes tabs."),
        "{text}"
    );
    let file = client(&chorus, &["memory", "show", "term", "MEMORY.md"]).await;
    assert!(
        stdout(&file).contains("- hand-written"),
        "{}",
        stdout(&file)
    );
    let bad = client(&chorus, &["memory", "forget", "term", "nope"]).await;
    assert!(!bad.status.success());
    assert!(
        stderr(&bad).contains("not a memory entry id"),
        "{}",
        stderr(&bad)
    );
    let forgot = client(&chorus, &["memory", "forget", "term", "0a1b2c3d"]).await;
    assert!(forgot.status.success(), "{}", stderr(&forgot));
    let left = std::fs::read_to_string(dir.join("memory/MEMORY.md"))?;
    assert!(
        !left.contains("tabs") && left.contains("hand-written"),
        "{left}"
    );
    Ok(())
}

/// `GET …/memory/search` with the query encoded.
async fn search(
    chorus: &Chorus,
    agent: &str,
    params: &[(&str, &str)],
) -> anyhow::Result<(u16, Value)> {
    let url = reqwest::Url::parse_with_params("http://query.invalid/", params)?;
    let answer = chorus
        .api(
            Method::GET,
            &format!(
                "/api/agents/{agent}/memory/search?{}",
                url.query().unwrap_or_default()
            ),
        )
        .send()
        .await?;
    Ok((answer.status().as_u16(), answer.json().await?))
}

fn hits_of<'a>(answer: &'a Value, source: &str) -> Vec<&'a Value> {
    answer["hits"]
        .as_array()
        .map(|hits| hits.iter().filter(|h| h["source"] == source).collect())
        .unwrap_or_default()
}

/// Search finds a fact from an old thread (its thread and message) and from a saved
/// session (its id), a `remember`ed fact with its file and line; the model's
/// `memory_search` finds them too; a later thread's system prompt carries the hits
/// relevant to its message; query syntax in people's text is not an error.
#[tokio::test]
async fn search_finds_facts_and_says_where_they_are() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(text("noted"));
    model.push(tool_call(
        "toolu_cat",
        "remember",
        json!({"text": "The user's cat is called Pixel."}),
    ));
    model.push(text("remembered"));
    model.push(tool_call(
        "toolu_find",
        "memory_search",
        json!({"query": "locker code", "sources": ["message", "session"]}),
    ));
    model.push(text("4417"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("finder").await?;

    let (old, _) = talk(&chorus, "finder", "My locker code is 4417.").await?;
    let saved = chorus
        .api(Method::POST, "/api/agents/finder/context/save")
        .json(&json!({"description": "locker talk"}))
        .send()
        .await?;
    assert_eq!(saved.status(), 201);
    let saved: Value = saved.json().await?;
    let session_id = saved["session"]["id"].as_str().unwrap().to_string();
    talk(&chorus, "finder", "Remember my cat, Pixel.").await?;

    // The old thread's message and the saved session, each saying where.
    let (status, found) = search(&chorus, "finder", &[("q", "LOCKER")]).await?;
    assert_eq!(status, 200, "{found}");
    let messages = hits_of(&found, "message");
    assert_eq!(messages.len(), 1, "{found:#}");
    assert_eq!(messages[0]["thread_id"], old);
    assert!(messages[0]["message_id"].as_u64().is_some(), "{found:#}");
    assert_eq!(messages[0]["text"], "My locker code is 4417.");
    let sessions = hits_of(&found, "session");
    assert_eq!(sessions.len(), 1, "{found:#}");
    assert_eq!(sessions[0]["session_id"], session_id.as_str());
    assert_eq!(sessions[0]["thread_id"], old);
    assert!(found["hits"][0]["score"].as_f64().unwrap() > 0.0);

    // The remembered fact, with its file and line.
    let (_, found) = search(&chorus, "finder", &[("q", "pixel"), ("sources", "memory")]).await?;
    let memory = hits_of(&found, "memory");
    assert_eq!(found["hits"].as_array().unwrap().len(), 1, "{found:#}");
    assert_eq!(memory[0]["path"], "memory/MEMORY.md");
    let file = std::fs::read_to_string(chorus.agent_dir("finder").join("memory/MEMORY.md"))?;
    let line = file.lines().position(|l| l.contains("Pixel")).unwrap() + 1;
    assert_eq!(memory[0]["line"], line, "{file}");

    // A hand edit while no run is going is found by the next search (the files are
    // the truth, the index follows them).
    std::fs::write(
        chorus.agent_dir("finder").join("memory/2026-01-02.md"),
        "# 2026-01-02\n\n- The spare key is under the blue pot.\n",
    )?;
    let (_, found) = search(&chorus, "finder", &[("q", "blue pot")]).await?;
    let memory = hits_of(&found, "memory");
    assert_eq!(memory.len(), 1, "{found:#}");
    assert_eq!(memory[0]["path"], "memory/2026-01-02.md");
    assert_eq!(memory[0]["line"], 3);

    // A later thread: its system prompt carries the relevant hits, and the model's
    // memory_search answers where they are.
    let (_, record) = talk(&chorus, "finder", "What was my locker code again?").await?;
    let system = system_of(&model, 3);
    let relevant = system
        .split("# Relevant from your memory")
        .nth(1)
        .unwrap_or_else(|| panic!("no relevant section in {system}"));
    assert!(
        relevant.contains(&format!("[message thread {old}, message ")),
        "{relevant}"
    );
    assert!(relevant.contains("My locker code is 4417."), "{relevant}");
    assert!(
        relevant.contains(&format!("[session session {session_id}")),
        "{relevant}"
    );
    let results = tool_results(&record);
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(!results[0].0, "{results:?}");
    assert!(
        results[0]
            .1
            .contains(&format!("[message thread {old}, message ")),
        "{results:?}"
    );

    // A rebuild from the files and saved sessions answers the same.
    let queries = ["locker", "pixel cat", "blue pot", "4417 code"];
    let mut before = Vec::new();
    for q in queries {
        before.push(search(&chorus, "finder", &[("q", q)]).await?.1);
    }
    let rebuilt = chorus
        .api(Method::POST, "/api/agents/finder/memory/reindex")
        .send()
        .await?;
    assert_eq!(rebuilt.status(), 200);
    for (q, before) in queries.iter().zip(&before) {
        let (_, after) = search(&chorus, "finder", &[("q", q)]).await?;
        assert_eq!(&after, before, "{q}");
        assert!(!after["hits"].as_array().unwrap().is_empty(), "{q}");
    }

    // Query syntax is only words; no words, or an unknown source, is a clear 400.
    for q in [
        r#""locker"#,
        "locker*",
        "-locker",
        "NEAR(locker code)",
        "locker OR",
        "a'; DROP",
    ] {
        let (status, answer) = search(&chorus, "finder", &[("q", q)]).await?;
        assert_eq!(status, 200, "{q}: {answer}");
    }
    let (status, answer) = search(&chorus, "finder", &[("q", "* - \"")]).await?;
    assert_eq!(status, 400, "{answer}");
    assert!(answer.to_string().contains("no words"), "{answer}");
    let (status, answer) = search(&chorus, "finder", &[("q", "x"), ("sources", "files")]).await?;
    assert_eq!(status, 400, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("'files' is not a search source"),
        "{answer}"
    );
    // No query, or a count that is not one, is the API's JSON error naming what to send.
    for params in [&[("k", "3")][..], &[("q", "locker"), ("k", "many")]] {
        let (status, answer) = search(&chorus, "finder", params).await?;
        assert_eq!(status, 400, "{params:?}: {answer}");
        assert!(
            answer["error"].to_string().contains("?q=<words>"),
            "{answer}"
        );
    }
    Ok(())
}
