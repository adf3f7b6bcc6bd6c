//! Model providers through the real binaries: both wire formats, streaming, retries,
//! discovery, local servers and mid-run model switches. The fakes record every
//! request, so these tests check what was sent as well as what the user sees.

use std::time::Duration;

use chorus_test_support::fake_model::{error, text, tool_call, tool_calls};
use chorus_test_support::{Chorus, FakeAnthropic, FakeModel, FakeOpenAi, Hold, Reply};
use reqwest::Method;
use serde_json::{Value, json};

const FAST_RETRIES: &str = "[models]\nretry_base_ms = 50\n";

async fn openai_chorus(model: &FakeModel, config: &str) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .openai_fake(model)
        .config(config)
        .start()
        .await
}

async fn anthropic_chorus(model: &FakeModel, config: &str) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("ANTHROPIC_BASE_URL", &model.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CHORUS_DEFAULT_MODEL", "claude-fake")
        .config(config)
        .start()
        .await
}

fn steps(thread: &Value) -> Vec<(String, String, bool)> {
    thread["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["kind"].as_str().unwrap().to_string(),
                s["description"].as_str().unwrap().to_string(),
                s["failed"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// The two-turn tool task, with two tool calls in one turn.
fn script_tool_task(model: &FakeModel) {
    model.push(tool_calls(&[
        (
            "call_1",
            "create_file",
            json!({"path": "out/result.txt", "content": "forty-two"}),
        ),
        ("call_2", "view", json!({"path": "out/result.txt"})),
    ]));
    model.push(text("The file says forty-two."));
}

async fn run_tool_task(chorus: &Chorus) -> anyhow::Result<Value> {
    chorus.create_agent("worker-bee").await?;
    let id = chorus
        .send_message("worker-bee", "Write the answer to out/result.txt")
        .await?;
    let thread = chorus
        .wait_thread_finished("worker-bee", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(
            chorus
                .agent_dir("worker-bee")
                .join("workspace/out/result.txt")
        )?,
        "forty-two"
    );
    let messages = thread["messages"].as_array().unwrap();
    assert_eq!(
        messages.last().unwrap()["content"],
        "The file says forty-two."
    );
    assert_eq!(
        messages[3]["content"], "     1\tforty-two\n",
        "the view result"
    );
    // Usage: two model calls of 20 in / 10 out each.
    assert_eq!(
        thread["usage"],
        json!({"input_tokens": 40, "output_tokens": 20})
    );
    Ok(thread)
}

#[tokio::test]
async fn the_tool_task_runs_over_the_openai_wire_format_streaming() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    script_tool_task(&model);
    let chorus = openai_chorus(&model, "").await?;
    run_tool_task(&chorus).await?;

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/chat/completions");
        assert_eq!(request.headers["authorization"], "Bearer sk-openai-test");
        assert_eq!(request.body["stream"], true);
        assert_eq!(
            request.body["stream_options"],
            json!({"include_usage": true})
        );
        assert_eq!(request.body["model"], "fake-model");
        assert_eq!(request.body["messages"][0]["role"], "system");
    }
    let first = &requests[0].body;
    assert_eq!(first["tools"][0]["type"], "function");
    assert_eq!(first["tools"][0]["function"]["name"], "create_file");
    assert!(first["tools"][0]["function"]["parameters"]["properties"]["path"].is_object());
    // Said outright (llama-cpp-python offers tools only then); the strict fake
    // refuses it on any request without tools, the title request included.
    assert_eq!(first["tool_choice"], "auto");
    let second = requests[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = second.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, vec!["system", "user", "assistant", "tool", "tool"]);
    assert_eq!(second[2]["tool_calls"][1]["id"], "call_2");
    assert_eq!(second[3]["tool_call_id"], "call_1");
    assert_eq!(second[4]["tool_call_id"], "call_2");
    assert_eq!(second[4]["content"], "     1\tforty-two\n");
    Ok(())
}

#[tokio::test]
async fn the_tool_task_runs_over_the_anthropic_wire_format_streaming() -> anyhow::Result<()> {
    let model = FakeAnthropic::start().await;
    script_tool_task(&model);
    let chorus = anthropic_chorus(&model, "").await?;
    run_tool_task(&chorus).await?;

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    for request in &requests {
        assert_eq!(request.path, "/v1/messages");
        assert_eq!(request.headers["x-api-key"], "sk-ant-test");
        assert_eq!(request.headers["anthropic-version"], "2023-06-01");
        assert!(
            !request.headers.contains_key("authorization"),
            "the worker's own credential must not reach the provider"
        );
        assert_eq!(request.body["stream"], true);
        assert_eq!(request.body["model"], "claude-fake");
        assert!(request.body["max_tokens"].as_u64().unwrap() > 0);
        assert!(
            request.body["system"]
                .as_str()
                .unwrap()
                .contains("general-purpose AI agent")
        );
    }
    let first = &requests[0].body;
    assert_eq!(first["messages"][0]["role"], "user");
    assert_eq!(first["tools"][0]["name"], "create_file");
    assert!(first["tools"][0]["input_schema"]["properties"]["path"].is_object());
    let second = requests[1].body["messages"].as_array().unwrap();
    assert_eq!(
        second.len(),
        3,
        "user, assistant, user(tool results): {second:#?}"
    );
    assert_eq!(second[1]["content"][0]["type"], "tool_use");
    assert_eq!(
        second[1]["content"][0]["input"],
        json!({"path": "out/result.txt", "content": "forty-two"})
    );
    assert_eq!(
        second[2]["content"],
        json!([
            {"type": "tool_result", "tool_use_id": "call_1", "content": "Created out/result.txt (9 bytes)"},
            {"type": "tool_result", "tool_use_id": "call_2", "content": "     1\tforty-two\n"}
        ])
    );
    Ok(())
}

/// The Anthropic API refuses tool blocks in a request without tools; the title of a
/// thread that used a tool is still written (its request carries the calls as text),
/// once the run is over, so no finished call reads "interrupted".
#[tokio::test]
async fn a_thread_that_used_a_tool_gets_its_title_through_a_strict_anthropic_api()
-> anyhow::Result<()> {
    let model = FakeAnthropic::start().await;
    model.set_title_reply(text("Answer written to a file"));
    script_tool_task(&model);
    let chorus = anthropic_chorus(&model, "").await?;
    let thread = run_tool_task(&chorus).await?;
    let id = thread["id"].as_u64().expect("thread id");
    let titled = chorus
        .wait_thread("worker-bee", id, Duration::from_secs(30), |t| {
            t["summary"] == "Answer written to a file"
        })
        .await?;
    assert_eq!(titled["status"], "completed");
    let asked = model.title_requests();
    assert_eq!(asked.len(), 1, "one title request");
    let body = asked[0].body.to_string();
    assert!(
        !body.contains("tool_use") && !body.contains("tool_result"),
        "{body}"
    );
    assert!(
        body.contains("forty-two"),
        "the tool's result is there: {body}"
    );
    assert!(
        body.contains("The file says forty-two."),
        "asked once the run was over: {body}"
    );
    assert!(!body.contains("interrupted"), "{body}");
    Ok(())
}

#[tokio::test]
async fn a_rate_limit_is_waited_out_as_a_visible_step() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Error {
        status: 429,
        kind: "rate_limit_exceeded".into(),
        message: "Rate limit reached".into(),
        retry_after: Some("1".into()),
    });
    model.push(text("patience pays"));
    let chorus = openai_chorus(&model, "").await?;
    chorus.create_agent("patient").await?;
    let id = chorus.send_message("patient", "hello").await?;
    let thread = chorus
        .wait_thread_finished("patient", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    let waited = requests[1].at - requests[0].at;
    assert!(
        waited >= Duration::from_secs(1),
        "retried after {waited:?}, before Retry-After"
    );
    let steps = steps(&thread);
    assert_eq!(steps.len(), 3, "{steps:#?}");
    assert_eq!(
        steps[0],
        ("llm_call".into(), "Calling LLM (fake-model)".into(), true)
    );
    assert_eq!(steps[1].0, "wait");
    assert!(
        steps[1].1.starts_with(
            "Waiting 1.0s before retrying: 'openai' is rate limiting (429): Rate limit reached"
        ),
        "{}",
        steps[1].1
    );
    assert_eq!(
        steps[2],
        (
            "llm_call".into(),
            "Calling LLM (fake-model), attempt 2 of 5".into(),
            false
        )
    );
    Ok(())
}

#[tokio::test]
async fn server_errors_broken_streams_and_garbage_are_retried_until_success() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    model.push(error(500, "server_error", "boom"));
    model.push(error(500, "server_error", "boom"));
    model.push(error(500, "server_error", "boom"));
    model.push(text("finally"));
    let chorus = openai_chorus(&model, FAST_RETRIES).await?;
    chorus.create_agent("stubborn").await?;
    let id = chorus.send_message("stubborn", "try hard").await?;
    let thread = chorus
        .wait_thread_finished("stubborn", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(model.requests().len(), 4);
    let waits = steps(&thread).iter().filter(|s| s.0 == "wait").count();
    assert_eq!(waits, 3);

    // The same for a stream cut mid-answer and a reply that is not JSON.
    let model = FakeAnthropic::start().await;
    model.push(Reply::Disconnect {
        after_text: "Hel".into(),
    });
    model.push(Reply::Malformed);
    model.push(text("Hello in full"));
    let chorus = anthropic_chorus(&model, FAST_RETRIES).await?;
    chorus.create_agent("stubborn").await?;
    let id = chorus.send_message("stubborn", "say hello").await?;
    let thread = chorus
        .wait_thread_finished("stubborn", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(model.requests().len(), 3);
    let messages = thread["messages"].as_array().unwrap();
    assert_eq!(
        messages.len(),
        2,
        "the partial answer is not stored: {messages:#?}"
    );
    assert_eq!(messages[1]["content"], "Hello in full");
    Ok(())
}

#[tokio::test]
async fn retries_stop_at_the_attempt_limit_with_the_last_error() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    for _ in 0..3 {
        model.push(error(503, "overloaded", "try later"));
    }
    let chorus =
        openai_chorus(&model, "[models]\nretry_base_ms = 20\nretry_attempts = 2\n").await?;
    chorus.create_agent("limited").await?;
    let id = chorus.send_message("limited", "x").await?;
    let thread = chorus
        .wait_thread_finished("limited", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "failed");
    assert_eq!(thread["failure_kind"], "model_error", "{thread:#}");
    let error = thread["error"].as_str().unwrap();
    assert!(
        error.contains("gave up on the model after 2 attempts"),
        "{error}"
    );
    assert!(error.contains("try later"), "{error}");
    assert_eq!(model.requests().len(), 2);
    Ok(())
}

#[tokio::test]
async fn a_refused_key_fails_the_thread_naming_the_provider_and_its_variable() -> anyhow::Result<()>
{
    let model = FakeAnthropic::start().await;
    model.push(error(401, "authentication_error", "invalid x-api-key"));
    let chorus = anthropic_chorus(&model, "").await?;
    chorus.create_agent("locked-out").await?;
    let id = chorus.send_message("locked-out", "hello").await?;
    let thread = chorus
        .wait_thread_finished("locked-out", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "failed");
    assert_eq!(
        thread["error"],
        "the model provider 'anthropic' refused the credentials (401): invalid x-api-key. Check ANTHROPIC_API_KEY."
    );
    assert_eq!(model.requests().len(), 1, "a refused key is not retried");
    Ok(())
}

#[tokio::test]
async fn models_are_discovered_cached_and_checked_when_agents_are_configured() -> anyhow::Result<()>
{
    let openai = FakeOpenAi::start().await;
    openai.set_models(&["gpt-fake-1", "gpt-fake-2"]);
    let anthropic = FakeAnthropic::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &openai.base_url())
        .env("OPENAI_API_KEY", "sk-openai-test")
        .env("ANTHROPIC_BASE_URL", &anthropic.host_url())
        .env("ANTHROPIC_API_KEY", "bad-key")
        .start()
        .await?;

    let models: Value = chorus
        .api(Method::GET, "/api/models")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(models["providers"]["openai"]["valid"], true);
    assert_eq!(
        models["providers"]["openai"]["models"],
        json!(["gpt-fake-1", "gpt-fake-2"])
    );
    assert_eq!(models["providers"]["anthropic"]["valid"], false);
    let refused = models["providers"]["anthropic"]["error"].as_str().unwrap();
    assert!(
        refused.contains("refused") && refused.contains("ANTHROPIC_API_KEY"),
        "{refused}"
    );
    let ollama = models["providers"]["ollama"]["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        ollama.contains("cannot reach"),
        "a local server that is down is reported: {models:#}"
    );
    let cached: Value = serde_json::from_str(&std::fs::read_to_string(
        chorus.data_dir.join("available_models.json"),
    )?)?;
    assert_eq!(cached, models);

    let create = |name: &str, model: &str| {
        chorus
            .api(Method::POST, "/api/agents")
            .json(&json!({"name": name, "model": model}))
            .send()
    };
    let unknown = create("a1", "gpt-nope").await?;
    assert_eq!(unknown.status(), 400);
    let body: Value = unknown.json().await?;
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("unknown model 'gpt-nope'") && message.contains("gpt-fake-1, gpt-fake-2"),
        "{message}"
    );
    assert_eq!(create("a2", "gpt-fake-2").await?.status(), 201);

    // A model the provider adds later is known after a refresh.
    openai.set_models(&["gpt-fake-1", "gpt-fake-2", "gpt-fake-3"]);
    assert_eq!(create("a3", "gpt-fake-3").await?.status(), 400);
    let refreshed: Value = chorus
        .api(Method::POST, "/api/models/refresh")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(refreshed["providers"]["openai"]["models"][2], "gpt-fake-3");
    assert_eq!(create("a3", "gpt-fake-3").await?.status(), 201);

    // Configure checks the model too.
    let patch = chorus
        .api(Method::PATCH, "/api/agents/a2")
        .json(&json!({"model": "gpt-nope"}))
        .send()
        .await?;
    assert_eq!(patch.status(), 400);
    assert_eq!(chorus.agent("a2").await?["model"], "gpt-fake-2");
    Ok(())
}

#[tokio::test]
async fn local_servers_and_openrouter_are_reached_through_the_relay() -> anyhow::Result<()> {
    let ollama = FakeOpenAi::start().await;
    ollama.set_models(&["llama3.2:latest"]);
    ollama.push(text("hello from llama"));
    let openrouter = FakeOpenAi::start().await;
    openrouter.set_models(&["anthropic/claude-3.5-sonnet"]);
    openrouter.push(text("hello from the router"));
    let chorus = Chorus::builder()
        .env("OLLAMA_BASE_URL", &ollama.host_url())
        .env("OPENROUTER_BASE_URL", &openrouter.base_url())
        .env("OPENROUTER_API_KEY", "sk-or-test")
        .start()
        .await?;

    for (agent, model, fake, answer) in [
        ("local", "ollama/llama3.2", &ollama, "hello from llama"),
        (
            "routed",
            "openrouter/anthropic/claude-3.5-sonnet",
            &openrouter,
            "hello from the router",
        ),
    ] {
        let created = chorus
            .api(Method::POST, "/api/agents")
            .json(&json!({"name": agent, "model": model}))
            .send()
            .await?;
        assert_eq!(created.status(), 201, "{}", created.text().await?);
        let id = chorus.send_message(agent, "hi").await?;
        let thread = chorus
            .wait_thread_finished(agent, id, Duration::from_secs(30))
            .await?;
        assert_eq!(thread["status"], "completed", "{thread:#}");
        assert_eq!(thread["messages"][1]["content"], answer);
        assert_eq!(fake.requests().len(), 1);
    }
    let local = &ollama.requests()[0];
    assert_eq!(local.path, "/v1/chat/completions");
    assert_eq!(local.body["model"], "llama3.2:latest");
    assert!(
        !local.headers.contains_key("authorization"),
        "Ollama needs no key and gets none"
    );
    let routed = &openrouter.requests()[0];
    assert_eq!(routed.body["model"], "anthropic/claude-3.5-sonnet");
    assert_eq!(routed.headers["authorization"], "Bearer sk-or-test");
    assert_eq!(routed.headers["x-title"], "Chorus");
    Ok(())
}

#[tokio::test]
async fn bad_model_output_becomes_errors_the_model_can_fix_within_a_bound() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(Reply::ToolCalls {
        text: String::new(),
        calls: vec![(
            "c1".into(),
            "create_file".into(),
            "{\"path\": \"a.txt\", \"content\": ".into(),
        )],
    });
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "a.txt", "content": "fixed"}),
    ));
    model.push(text("done"));
    let chorus = openai_chorus(&model, FAST_RETRIES).await?;
    chorus.create_agent("sloppy").await?;
    let id = chorus.send_message("sloppy", "write a.txt").await?;
    let thread = chorus
        .wait_thread_finished("sloppy", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("sloppy").join("workspace/a.txt"))?,
        "fixed"
    );
    let told = model.requests()[1].body["messages"].to_string();
    assert!(
        told.contains("the arguments for create_file are not valid"),
        "{told}"
    );

    // Unusable replies over and over end the thread with a clear reason.
    for i in 0..3 {
        model.push(tool_call(&format!("x{i}"), "launch_rockets", json!({})));
    }
    let id = chorus.send_message("sloppy", "again").await?;
    let thread = chorus
        .wait_thread_finished("sloppy", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "failed");
    assert_eq!(thread["failure_kind"], "bad_output", "{thread:#}");
    let error = thread["error"].as_str().unwrap();
    assert!(error.contains("3 unusable replies in a row"), "{error}");
    let told = model.requests()[4].body["messages"].to_string();
    assert!(
        told.contains("there is no tool named 'launch_rockets'"),
        "{told}"
    );
    Ok(())
}

#[tokio::test]
async fn a_model_switch_takes_effect_at_the_next_model_call() -> anyhow::Result<()> {
    let openai = FakeOpenAi::start().await;
    let hold = Hold::new();
    openai.push(Reply::Held(
        hold.clone(),
        Box::new(tool_call(
            "c1",
            "create_file",
            json!({"path": "x.txt", "content": "1"}),
        )),
    ));
    let anthropic = FakeAnthropic::start().await;
    anthropic.push(text("finished by claude"));
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &openai.base_url())
        .env("OPENAI_API_KEY", "sk-openai-test")
        .env("ANTHROPIC_BASE_URL", &anthropic.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    chorus.create_agent("switcher").await?;
    chorus
        .wait_worker_running("switcher", Duration::from_secs(15))
        .await?;
    let id = chorus
        .send_message("switcher", "start on one model, end on another")
        .await?;
    assert_eq!(
        openai
            .wait_for_requests(1, Duration::from_secs(10))
            .await
            .len(),
        1
    );
    let patched = chorus
        .api(Method::PATCH, "/api/agents/switcher")
        .json(&json!({"model": "claude-fake"}))
        .send()
        .await?;
    assert_eq!(patched.status(), 200);
    // The first call answers only now, so its tool call is certainly followed by a
    // call made after the switch.
    hold.release();

    let thread = chorus
        .wait_thread_finished("switcher", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let descriptions: Vec<String> = steps(&thread).into_iter().map(|s| s.1).collect();
    assert_eq!(
        descriptions,
        vec![
            "Calling LLM (fake-model)",
            "Executing create_file: x.txt",
            "Calling LLM (claude-fake)"
        ]
    );
    let second = &anthropic.requests()[0].body;
    assert_eq!(second["model"], "claude-fake");
    assert_eq!(
        second["messages"][2]["content"][0]["tool_use_id"], "c1",
        "the context moved with it"
    );
    assert_eq!(openai.requests().len(), 1);
    Ok(())
}

#[tokio::test]
async fn model_text_streams_live_to_the_thread_event_feed() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let hold = Hold::new();
    model.push(Reply::Held(
        hold.clone(),
        Box::new(tool_call(
            "c1",
            "create_file",
            json!({"path": "hello.txt", "content": "hi"}),
        )),
    ));
    model.push(text("Hello there, streaming world"));
    let chorus = openai_chorus(&model, "").await?;
    chorus.create_agent("streamer").await?;
    chorus
        .wait_worker_running("streamer", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("streamer", "stream to me").await?;
    let mut feed = chorus.open_thread_events("streamer", id).await?;
    // The model answers only once the feed is open, so everything after its first
    // call (a tool step, a second call with streamed text) is seen live.
    hold.release();
    let events = tokio::time::timeout(Duration::from_secs(20), feed.rest()).await??;
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(kinds.first(), Some(&"status"), "{events:#?}");
    assert_eq!(events[0].1["status"], "running");
    assert!(
        kinds.contains(&"step_started") && kinds.contains(&"step_ended"),
        "{kinds:?}"
    );
    let texts: Vec<&str> = events
        .iter()
        .filter(|(k, _)| k == "text")
        .map(|(_, d)| d["text"].as_str().unwrap())
        .collect();
    assert!(texts.len() >= 2, "the text arrived in pieces: {texts:?}");
    assert_eq!(texts.concat(), "Hello there, streaming world");
    let message = events.iter().find(|(k, _)| k == "message").unwrap();
    assert_eq!(message.1["role"], "assistant");
    assert_eq!(
        events.last().unwrap(),
        &(
            "status".to_string(),
            json!({"status": "completed", "error": null, "failure_kind": null})
        )
    );

    // A finished thread's feed says so and ends at once.
    let again = chorus
        .thread_events("streamer", id, Duration::from_secs(5))
        .await?;
    assert_eq!(
        again,
        vec![(
            "status".to_string(),
            json!({"status": "completed", "error": null, "failure_kind": null})
        )]
    );
    Ok(())
}

#[tokio::test]
async fn a_server_that_ignores_streaming_still_works() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(Reply::Json(json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "plain JSON reply"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 4}
    })));
    let chorus = openai_chorus(&model, "").await?;
    chorus.create_agent("old-server").await?;
    let id = chorus.send_message("old-server", "hi").await?;
    let thread = chorus
        .wait_thread_finished("old-server", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(thread["messages"][1]["content"], "plain JSON reply");
    assert_eq!(
        thread["usage"],
        json!({"input_tokens": 3, "output_tokens": 4})
    );
    Ok(())
}
