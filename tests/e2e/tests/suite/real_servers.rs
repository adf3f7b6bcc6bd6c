//! What real third-party servers do that the reference APIs do not, and providers
//! that misbehave, through the real binaries: llama.cpp-style streams, a context
//! overflow answered with an empty stream (and a closed connection), a server that
//! never answers, one that never stops. (Every fake also checks each request as the real APIs do.)

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Quirks, Reply};
use serde_json::{Value, json};

async fn openai_chorus(model: &FakeModel, config: &str) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .openai_fake(model)
        .config(config)
        .start()
        .await
}

async fn run_one(chorus: &Chorus, agent: &str, content: &str) -> anyhow::Result<Value> {
    chorus.create_agent(agent).await?;
    let id = chorus.send_message(agent, content).await?;
    chorus
        .wait_thread_finished(agent, id, Duration::from_secs(60))
        .await
}

#[tokio::test]
async fn a_llama_cpp_style_server_runs_tools_and_its_missing_usage_shows_as_unknown()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_quirks(Quirks {
        repeat_tool_names: true,
        no_usage: true,
    });
    model.push(tool_call(
        "c1",
        "file.create",
        json!({"path": "notes.md", "content": "hi"}),
    ));
    model.push(text("Created."));
    let chorus = openai_chorus(&model, "").await?;
    let thread = run_one(&chorus, "llama", "make notes").await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("llama").join("workspace/notes.md"))?,
        "hi"
    );
    // The call is stored under Chorus's name, whatever the wire said.
    assert_eq!(
        thread["messages"][1]["tool_calls"][0]["name"],
        "file.create"
    );
    assert_eq!(thread["usage"], Value::Null, "{thread:#}");
    assert_eq!(thread["steps"][0]["usage"], Value::Null);
    // The second request carried the first call back as the server named it.
    let second = &model.requests()[1].body;
    assert_eq!(
        second["messages"][2]["tool_calls"][0]["function"]["name"],
        "file_create"
    );
    assert_eq!(second["messages"][2]["content"], "");
    Ok(())
}

#[tokio::test]
async fn a_context_overflow_answered_with_an_empty_stream_fails_with_the_real_reason()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_context_window(10);
    let chorus = openai_chorus(&model, "[models]\nretry_base_ms = 50\n").await?;
    let started = Instant::now();
    let thread = run_one(&chorus, "overflow", "hello").await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    assert_eq!(thread["failure_kind"], "model_error", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(error.contains("too long for the model"), "{error}");
    assert!(error.contains("exceed context window"), "{error}");
    // The server closed the connection after the empty stream: the repeat went out
    // on a new one, so nothing blames the network.
    assert!(
        !error.contains("reach") && !error.contains("closed the connection"),
        "{error}"
    );
    // One streamed request, one plain repeat to learn why; no retries.
    let streams: Vec<bool> = model
        .requests()
        .iter()
        .map(|r| r.body["stream"].as_bool().unwrap_or(false))
        .collect();
    assert_eq!(streams, [true, false]);
    eprintln!("context overflow reported after {:?}", started.elapsed());
    Ok(())
}

/// A server with its own output cap (llama.cpp's `-n 512`) stops a long answer with
/// `finish_reason: "length"` far below the `max_tokens` asked for: without a known
/// window that is not taken for a full one; the answer is kept and continued.
#[tokio::test]
async fn a_reply_stopped_by_a_servers_output_cap_is_kept_and_continued() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_quirks(Quirks {
        no_usage: true,
        ..Quirks::default()
    });
    model.push(Reply::Truncated("The first half".into()));
    model.push(text(" and the rest."));
    let chorus = openai_chorus(&model, "").await?;
    let thread = run_one(&chorus, "capped", "go on").await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let answers: Vec<&str> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "assistant")
        .map(|m| m["content"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(answers, ["The first half", " and the rest."]);
    assert_eq!(model.requests().len(), 2);
    Ok(())
}

/// With the window known (a setting here; discovery where the provider lists it), a
/// reply whose input and output fill it fails with that reason, keeping what it
/// streamed; `max_tokens` is the model's setting.
#[tokio::test]
async fn a_reply_stopped_at_the_full_window_fails_keeping_what_was_streamed() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    // The fake reports every asked-for token used: 20 in + 4000 out of a 4096 window.
    model.push(Reply::Truncated("The answer".into()));
    let chorus = openai_chorus(
        &model,
        "[models.limits.\"fake-model\"]\nmax_tokens = 4000\ncontext_window = 4096\n",
    )
    .await?;
    let thread = run_one(&chorus, "full", "go on").await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(error.contains("fills the context window"), "{error}");
    assert!(error.contains("20 + 4000 of 4096 tokens"), "{error}");
    assert_eq!(thread["messages"][1]["content"], "The answer", "{thread:#}");
    let requests = model.requests();
    assert_eq!(requests.len(), 1, "no 'continue' was asked for");
    assert_eq!(requests[0].body["max_tokens"], 4000);
    Ok(())
}

#[tokio::test]
async fn a_provider_that_never_answers_fails_the_thread_naming_it() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Silent);
    let chorus = openai_chorus(
        &model,
        "[models]\nretry_attempts = 1\nsilence_timeout_secs = 2\n",
    )
    .await?;
    let started = Instant::now();
    let thread = run_one(&chorus, "waiting", "hello?").await?;
    let took = started.elapsed();
    assert_eq!(thread["status"], "failed", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("the provider 'openai' did not answer within 2 s"),
        "{error}"
    );
    assert!(!error.contains("cannot reach"), "{error}");
    assert!(error.contains("after 1 attempt in"), "{error}");
    eprintln!("hung provider: thread failed {took:?} after the message (silence limit 2 s)");
    Ok(())
}

/// Peak resident memory of a process, in KiB (`VmHWM`).
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn an_endless_reply_is_cut_off_and_the_worker_stays_small() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Endless);
    let chorus = openai_chorus(&model, "").await?;
    chorus.create_agent("chatty").await?;
    let pid = chorus
        .wait_worker_running("chatty", Duration::from_secs(20))
        .await?;
    let started = Instant::now();
    let id = chorus.send_message("chatty", "talk").await?;
    let thread = chorus
        .wait_thread_finished("chatty", id, Duration::from_secs(110))
        .await?;
    let took = started.elapsed();
    assert_eq!(thread["status"], "failed", "{thread:#}");
    assert_eq!(thread["failure_kind"], "limit", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(error.contains("exceeded 16 MiB"), "{error}");
    let peak = peak_rss_kib(pid);
    eprintln!(
        "endless stream: cut off after {took:?}; worker peak RSS {} MiB",
        peak / 1024
    );
    assert!(peak > 0 && peak < 200 * 1024, "worker peak RSS {peak} KiB");
    assert_eq!(
        chorus.agent("chatty").await?["worker"]["pid"],
        json!(pid),
        "the worker was not restarted"
    );
    Ok(())
}

#[tokio::test]
async fn discovery_keeps_the_servers_reason_and_a_server_that_cannot_list_models_is_named()
-> anyhow::Result<()> {
    // An OpenAI-compatible server that refuses the key, and an "Ollama" address
    // where some other server answers (it has no /api/tags).
    let openai = FakeOpenAi::start().await;
    let not_ollama = not_found_server().await?;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &openai.base_url())
        .env("OPENAI_API_KEY", "bad-key")
        .env("OLLAMA_BASE_URL", &not_ollama)
        .start()
        .await?;
    let models: Value = chorus
        .api(reqwest::Method::GET, "/api/models")
        .send()
        .await?
        .json()
        .await?;
    let openai_error = models["providers"]["openai"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        openai_error.contains("the key was refused (401: invalid key)"),
        "{models:#}"
    );
    let ollama_error = models["providers"]["ollama"]["error"]
        .as_str()
        .unwrap_or_default();
    assert!(
        ollama_error.starts_with("not an Ollama server:") && ollama_error.contains("404"),
        "{models:#}"
    );

    let response = chorus
        .api(reqwest::Method::POST, "/api/agents")
        .json(&json!({"name": "local", "model": "ollama/llama3.2"}))
        .send()
        .await?;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await?;
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(
            "cannot use 'ollama/llama3.2': the ollama server was reached but cannot list its models"
        ) && message.contains("not an Ollama server"),
        "{message}"
    );
    Ok(())
}

/// A server that cannot list its models is refused under Ollama's name in both forms
/// (`ollama/x` and bare `x`), and trusted in both as an OpenAI-compatible server.
#[tokio::test]
async fn a_server_that_cannot_list_models_is_judged_alike_for_bare_and_prefixed_names()
-> anyhow::Result<()> {
    let not_listing = not_found_server().await?;
    let create = |chorus: &Chorus, name: &str, model: &str| {
        chorus
            .api(reqwest::Method::POST, "/api/agents")
            .json(&json!({"name": name, "model": model}))
            .send()
    };
    let chorus = Chorus::builder()
        .env("OLLAMA_BASE_URL", &not_listing)
        .env("LMSTUDIO_BASE_URL", "http://127.0.0.1:9")
        .start()
        .await?;
    for (name, model) in [("prefixed", "ollama/llama3.2"), ("bare", "llama3.2")] {
        let response = create(&chorus, name, model).await?;
        assert_eq!(response.status(), 400, "{model}");
        let body: Value = response.json().await?;
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains(&format!(
                "cannot use '{model}': the ollama server was reached but cannot list its models"
            )),
            "{message}"
        );
    }
    drop(chorus);

    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &format!("{not_listing}/v1"))
        .env("OLLAMA_BASE_URL", "http://127.0.0.1:9")
        .env("LMSTUDIO_BASE_URL", "http://127.0.0.1:9")
        .start()
        .await?;
    for (name, model) in [("prefixed", "openai/my-model"), ("bare", "my-model")] {
        let response = create(&chorus, name, model).await?;
        assert_eq!(
            response.status(),
            201,
            "{model}: {}",
            response.text().await?
        );
    }
    Ok(())
}

/// An HTTP server on loopback that answers every request with 404 (another
/// program on Ollama's port). Returns its base URL.
async fn not_found_server() -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(
                        b"HTTP/1.1 404 Not Found\r\ncontent-type: text/plain\r\ncontent-length: 18\r\nconnection: close\r\n\r\n404 page not found",
                    )
                    .await;
            });
        }
    });
    Ok(url)
}

#[tokio::test]
async fn an_answer_cut_off_by_the_output_limit_is_continued() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    // The fake reports every asked-for token used: a real cut-off.
    model.push(Reply::Truncated("The first half".into()));
    model.push(text(" and the second half."));
    let chorus = openai_chorus(&model, "").await?;
    let thread = run_one(&chorus, "long", "write a lot").await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let second = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(second[second.len() - 2]["content"], "The first half");
    assert!(
        second[second.len() - 1]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("Continue exactly where it stopped"),
        "{second:#?}"
    );
    Ok(())
}

/// llama-cpp-python ends a running stream with `data: [DONE]` and no finish reason
/// when another request arrives. Two agents on one such server: an empty cut is a
/// failed attempt (retried), a cut after some text is kept and continued; neither
/// is taken as an answer.
#[tokio::test]
async fn two_agents_whose_streams_the_server_cuts_both_complete() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_quirks(Quirks {
        no_usage: true,
        ..Quirks::default()
    });
    for reply in [
        Reply::Cut(String::new()),
        Reply::Cut(String::new()),
        Reply::Cut("The answer is".into()),
        Reply::Cut("The answer is".into()),
    ] {
        model.push(reply);
    }
    // Then: the rest of an interrupted answer, or a whole one.
    model.set_fallback(|body| {
        let messages = body["messages"].as_array().cloned().unwrap_or_default();
        let last = messages.last().map(|m| m["content"].to_string());
        if last.is_some_and(|c| c.contains("interrupted")) {
            text(" forty-two.")
        } else {
            text("Done.")
        }
    });
    let chorus = openai_chorus(&model, "[models]\nretry_base_ms = 50\n").await?;
    chorus.create_agent("one").await?;
    chorus.create_agent("two").await?;
    let (a, b) = tokio::join!(
        chorus.send_message("one", "what is the answer?"),
        chorus.send_message("two", "what is the answer?")
    );
    let mut failed_attempts = 0;
    let mut finals = Vec::new();
    for (agent, id) in [("one", a?), ("two", b?)] {
        let thread = chorus
            .wait_thread_finished(agent, id, Duration::from_secs(60))
            .await?;
        assert_eq!(thread["status"], "completed", "{thread:#}");
        let messages = thread["messages"].as_array().unwrap();
        let answers: Vec<&str> = messages
            .iter()
            .filter(|m| m["role"] == "assistant")
            .map(|m| m["content"].as_str().unwrap_or_default())
            .collect();
        assert!(
            !answers.iter().any(|a| a.is_empty()),
            "no empty answer: {answers:?}"
        );
        finals.push(answers.last().unwrap().to_string());
        failed_attempts += thread["steps"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["kind"] == "llm_call" && s["failed"] == true)
            .count();
        if answers.contains(&"The answer is") {
            assert_eq!(answers.last(), Some(&" forty-two."), "{answers:?}");
        }
    }
    assert_eq!(failed_attempts, 2, "each empty cut was one failed attempt");
    assert!(
        !finals.iter().any(|f| f == "The answer is"),
        "a cut answer is never final: {finals:?}"
    );
    Ok(())
}

/// LiteLLM sends an upstream context-length error inside a 200 stream; it is the
/// same error as a 400 with those words: the context is shortened once, not retried.
#[tokio::test]
async fn a_context_length_error_sent_mid_stream_shortens_the_context_once() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let big = "a line of the report that matters\n".repeat(100);
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "report.txt", "content": big}),
    ));
    model.push(tool_call("c2", "view", json!({"path": "report.txt"})));
    model.push(tool_call("c3", "file.list", json!({})));
    model.push(Reply::StreamError {
        after_text: String::new(),
        code: "400".into(),
        message: "litellm.ContextWindowExceededError: litellm.BadRequestError: prompt is too long: 9000 tokens > 8192 maximum".into(),
    });
    model.push(text("It matters."));
    let chorus = openai_chorus(&model, "[models]\nretry_base_ms = 50\n").await?;
    let thread = run_one(&chorus, "lite", "summarise report.txt").await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let descriptions: Vec<&str> = thread["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["description"].as_str().unwrap_or_default())
        .collect();
    assert!(
        descriptions
            .iter()
            .any(|d| d.contains("too long for the model; shortened 1 old tool results")),
        "{descriptions:#?}"
    );
    assert!(
        !descriptions.iter().any(|d| d.contains("attempt 2")),
        "not retried: {descriptions:#?}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 5);
    assert!(
        requests[4]
            .body
            .to_string()
            .contains("older tool output removed"),
        "the last request carries the shortened context"
    );
    Ok(())
}
