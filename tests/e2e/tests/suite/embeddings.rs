//! Hybrid memory search through the real binaries and the fake model's embeddings:
//! a fact is found by a query sharing no word with it only when the provider has an
//! embedding model (the same search, lexical only, finds nothing); a change of
//! embedding model pauses vector search until reindex; failing embeddings leave the
//! lexical hits and say why.

use std::path::Path;
use std::time::Duration;

use chorus_test_support::fake_embed::EmbedMode;
use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::Value;

const KEY: &str = "sk-embed-secret-1234";
const FACT: &str = "Ada drives a crimson sedan.";
/// No word in common with [`FACT`]; the same concepts (vehicle, colour).
const BY_MEANING: &str = "automobile colour";

/// Chorus on `data` with the OpenAI fake, and `embedding_model` on its provider.
async fn start(
    model: &FakeModel,
    data: &Path,
    embedding_model: Option<&str>,
) -> anyhow::Result<Chorus> {
    let config = match embedding_model {
        Some(m) => format!("[providers.openai]\nembedding_model = \"{m}\"\n"),
        None => String::new(),
    };
    Chorus::builder()
        .data_dir(data)
        .config(&config)
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

/// `GET …/memory/search?q=…` (`sources=memory`: leaves out the threads' messages,
/// which talk of the same things once the test has talked).
async fn search(chorus: &Chorus, agent: &str, q: &str, memory_only: bool) -> anyhow::Result<Value> {
    let mut params = vec![("q", q)];
    if memory_only {
        params.push(("sources", "memory"));
    }
    let url = reqwest::Url::parse_with_params("http://query.invalid/", &params)?;
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
    assert_eq!(answer.status(), 200);
    Ok(answer.json().await?)
}

fn texts(answer: &Value) -> Vec<String> {
    answer["hits"]
        .as_array()
        .map(|hits| {
            hits.iter()
                .map(|h| h["text"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

async fn talk(chorus: &Chorus, agent: &str, message: &str) -> anyhow::Result<u64> {
    let id = chorus.send_message(agent, message).await?;
    let thread = chorus
        .wait_thread_finished(agent, id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    Ok(id)
}

#[tokio::test]
async fn vectors_find_a_fact_by_meaning_never_mixing_models() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_embedding_models(&["fake-embed", "fake-embed-2"]);
    model.push(text("noted"));
    model.push(text("It is in your notes."));
    let data = tempfile::tempdir()?;
    let data = data.path().join("data");

    let chorus = start(&model, &data, Some("fake-embed")).await?;
    chorus.create_agent("keeper").await?;
    std::fs::write(
        chorus.agent_dir("keeper").join("memory/2026-01-03.md"),
        format!("# 2026-01-03\n\n- {FACT}\n- The wifi router is in the hallway.\n"),
    )?;

    // Found by meaning alone, saying where it is; the unrelated entry is not a hit.
    let found = search(&chorus, "keeper", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "hybrid", "{found:#}");
    assert!(found.get("ranking_note").is_none(), "{found:#}");
    assert_eq!(texts(&found), [FACT], "{found:#}");
    assert_eq!(found["hits"][0]["path"], "memory/2026-01-03.md");
    assert_eq!(found["hits"][0]["line"], 3);
    // The control plane asked with the provider's key, in the real wire format.
    let asked = model.embedding_requests();
    assert!(!asked.is_empty());
    assert!(asked.iter().all(|r| r.path == "/v1/embeddings"
        && r.body["model"] == "fake-embed"
        && r.headers.get("authorization").map(String::as_str) == Some(&format!("Bearer {KEY}"))));

    // A thread's message is found by meaning too, with its thread.
    let puppy = talk(&chorus, "keeper", "My puppy is called Rex.").await?;
    let found = search(&chorus, "keeper", "hound", false).await?;
    assert_eq!(texts(&found), ["My puppy is called Rex."], "{found:#}");
    assert_eq!(found["hits"][0]["thread_id"], puppy);
    // The prompt's relevant section uses the same search.
    talk(&chorus, "keeper", "What colour is my automobile?").await?;
    let system = model.requests()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let relevant = system
        .split("# Relevant from your memory")
        .nth(1)
        .unwrap_or_else(|| panic!("no relevant section in {system}"));
    assert!(relevant.contains(FACT), "{relevant}");
    assert!(chorus.stop().await?.success());

    // The control: the same search, lexical only, finds nothing, and says why.
    let chorus = start(&model, &data, None).await?;
    let found = search(&chorus, "keeper", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "lexical", "{found:#}");
    assert!(texts(&found).is_empty(), "{found:#}");
    let note = found["ranking_note"].as_str().unwrap_or_default();
    assert!(note.contains("no embedding model is configured"), "{note}");
    assert!(chorus.stop().await?.success());

    // Another embedding model: vector search waits for reindex, never mixing.
    let chorus = start(&model, &data, Some("fake-embed-2")).await?;
    let before = model.embedding_requests().len();
    let found = search(&chorus, "keeper", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "lexical", "{found:#}");
    assert!(texts(&found).is_empty(), "{found:#}");
    let note = found["ranking_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("paused")
            && note.contains("'openai/fake-embed'")
            && note.contains("'openai/fake-embed-2'")
            && note.contains("/api/agents/keeper/memory/reindex"),
        "{note}"
    );
    assert_eq!(
        model.embedding_requests().len(),
        before,
        "nothing embedded while paused"
    );
    let reindexed = chorus
        .api(Method::POST, "/api/agents/keeper/memory/reindex")
        .send()
        .await?;
    assert_eq!(reindexed.status(), 200);
    let reindexed: Value = reindexed.json().await?;
    assert_eq!(reindexed["reindexed"], true, "{reindexed:#}");
    assert_eq!(reindexed["ranking"], "hybrid", "{reindexed:#}");
    assert_eq!(reindexed["embedding_model"], "openai/fake-embed-2");
    // Two entries, the four messages with text (two asked, two answered), and the
    // same four texts in the sessions saved at each shutdown (a doc's vector is
    // keyed by its text: one each, however many sessions hold it).
    assert_eq!(
        reindexed["embedded"],
        10,
        "{reindexed:#} {:?}",
        model.embedding_requests().last().map(|r| r.body.clone())
    );
    let found = search(&chorus, "keeper", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "hybrid", "{found:#}");
    assert_eq!(texts(&found), [FACT], "{found:#}");
    let since = &model.embedding_requests()[before..];
    assert!(!since.is_empty());
    assert!(since.iter().all(|r| r.body["model"] == "fake-embed-2"));

    // Embeddings failing: the lexical hits still, and the answer and log say why.
    model.set_embed_mode(EmbedMode::Status(500));
    let found = search(&chorus, "keeper", "sedan", true).await?;
    assert_eq!(found["ranking"], "lexical", "{found:#}");
    assert_eq!(texts(&found), [FACT], "{found:#}");
    let note = found["ranking_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("embedding failed") && note.contains("500"),
        "{note}"
    );
    // Vectors of another size behind the same name are refused, not compared.
    model.set_embed_mode(EmbedMode::WrongDims);
    let found = search(&chorus, "keeper", "sedan", true).await?;
    assert_eq!(found["ranking"], "lexical", "{found:#}");
    assert_eq!(texts(&found), [FACT], "{found:#}");
    let note = found["ranking_note"].as_str().unwrap_or_default();
    assert!(
        note.contains("11 dimensions where this agent's have 10"),
        "{note}"
    );
    model.set_embed_mode(EmbedMode::Normal);
    let found = search(&chorus, "keeper", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "hybrid", "{found:#}");
    let output = chorus.output();
    assert!(output.contains("embedding failed"), "{output}");
    assert!(!output.contains(KEY), "the key reached the log");
    Ok(())
}

/// Ollama's own endpoint (`/api/embed`, no key); an agent on another provider with
/// no embedding model (Anthropic has none) searches lexically, saying why.
#[tokio::test]
async fn ollama_embeds_at_its_own_endpoint_and_other_providers_stay_lexical() -> anyhow::Result<()>
{
    let ollama = FakeOpenAi::start().await;
    ollama.set_models(&["llama3.2:latest"]);
    let anthropic = chorus_test_support::FakeAnthropic::start().await;
    let chorus = Chorus::builder()
        .config("[providers.ollama]\nembedding_model = \"fake-embed\"\n")
        .env("OLLAMA_BASE_URL", &ollama.host_url())
        .env("ANTHROPIC_BASE_URL", &anthropic.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .start()
        .await?;
    for (agent, model) in [("local", "ollama/llama3.2"), ("hosted", "claude-fake")] {
        let created = chorus
            .api(Method::POST, "/api/agents")
            .json(&serde_json::json!({"name": agent, "model": model}))
            .send()
            .await?;
        assert_eq!(created.status(), 201, "{}", created.text().await?);
        std::fs::write(
            chorus.agent_dir(agent).join("memory/2026-01-03.md"),
            format!("# 2026-01-03\n\n- {FACT}\n"),
        )?;
    }
    let found = search(&chorus, "local", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "hybrid", "{found:#}");
    assert_eq!(texts(&found), [FACT], "{found:#}");
    let asked = ollama.embedding_requests();
    assert!(!asked.is_empty());
    assert!(asked.iter().all(|r| r.path == "/api/embed"
        && r.body["model"] == "fake-embed"
        && !r.headers.contains_key("authorization")));

    let found = search(&chorus, "hosted", BY_MEANING, true).await?;
    assert_eq!(found["ranking"], "lexical", "{found:#}");
    assert!(texts(&found).is_empty(), "{found:#}");
    let note = found["ranking_note"].as_str().unwrap_or_default();
    assert!(note.contains("(anthropic) offers no embeddings"), "{note}");
    assert!(anthropic.stray_requests().is_empty());
    Ok(())
}
