//! The worker's model clients against the strict fake model servers, over real HTTP:
//! what real servers accept, how irregular ones are read, and the bounds on a reply.
//! (The fakes check every request the way the real APIs do and fail the test at drop
//! if one would have been refused.)
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use chorus_proto::domain::{ChatMessage, ToolCall};
use chorus_test_support::fake_model::{self, FakeModel, Quirks, Reply, Wire};
use chorus_worker::model::anthropic::AnthropicClient;
use chorus_worker::model::http::{CallLimits, Endpoint, MAX_REPLY_BYTES};
use chorus_worker::model::openai::OpenAiClient;
use chorus_worker::model::{MessageCache, ModelClient, ModelError, ModelReply, ToolSchema};
use serde_json::json;

fn all_tools() -> Vec<ToolSchema> {
    chorus_proto::tools::TOOLS
        .iter()
        .map(|t| ToolSchema::from_spec(&t.spec(&Default::default())))
        .collect()
}

/// A conversation with a tool turn, as a run sends it.
fn history() -> Vec<ChatMessage> {
    let call = ToolCall {
        id: "call_1".into(),
        name: "file.read".into(),
        arguments: json!({"path": "a.txt"}).to_string(),
    };
    vec![
        ChatMessage::user("read a.txt"),
        ChatMessage::assistant("", vec![call.clone()]),
        ChatMessage::tool_result(&call, "1\thello", false),
    ]
}

async fn call(
    model: &FakeModel,
    wire: Wire,
    messages: &[ChatMessage],
    limits: CallLimits,
) -> Result<ModelReply, ModelError> {
    let tools = all_tools();
    let cache = MessageCache::default();
    let request = chorus_worker::model::ModelRequest {
        model: "m",
        system: "be brief",
        messages,
        tools: &tools,
        max_tokens: 1024,
        cache: &cache,
        limits,
    };
    // In Chorus the relay talks to the provider, and sends a request whose pooled
    // connection the server closed again on a new one (the fake closes it after an
    // empty stream, as llama-cpp-python does); a client keeping no idle connection
    // stands in for that.
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    match wire {
        Wire::OpenAi => {
            OpenAiClient(Endpoint::new(http, model.base_url(), "k", "openai"))
                .complete(&request)
                .await
        }
        Wire::Anthropic => {
            AnthropicClient(Endpoint::new(http, model.host_url(), "k", "anthropic"))
                .complete(&request)
                .await
        }
    }
}

#[tokio::test]
async fn every_tool_and_a_tool_turn_pass_the_real_apis_rules_both_ways() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let model = FakeModel::start(wire, &["m"]).await;
        model.push(fake_model::tool_call(
            "call_2",
            "file.write",
            json!({"path": "a.txt", "content": "x"}),
        ));
        let reply = call(&model, wire, &history(), CallLimits::default())
            .await
            .unwrap();
        // Sent as file_write, read back as Chorus's own name.
        assert_eq!(reply.tool_calls[0].name, "file.write", "{wire:?}");
        let body = &model.requests()[0].body;
        let names = body["tools"].to_string();
        assert!(names.contains("\"file_read\""), "{wire:?}: {names}");
        assert!(!names.contains("\"file.read\""), "{wire:?}: {names}");
    }
}

#[tokio::test]
async fn a_name_repeated_in_every_fragment_is_not_concatenated_and_unknown_usage_stays_unknown() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    model.set_quirks(Quirks {
        repeat_tool_names: true,
        no_usage: true,
    });
    model.push(fake_model::tool_calls(&[
        ("a", "view", json!({"path": "one.txt"})),
        ("b", "file.list", json!({})),
    ]));
    let reply = call(&model, Wire::OpenAi, &history(), CallLimits::default())
        .await
        .unwrap();
    let names: Vec<&str> = reply.tool_calls.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["view", "file.list"]);
    assert_eq!(reply.tool_calls[0].arguments, r#"{"path":"one.txt"}"#);
    assert_eq!(reply.usage, None, "no usage sent is not zero usage");
}

#[tokio::test]
async fn an_empty_stream_is_asked_again_without_streaming_to_learn_the_real_error() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    model.set_context_window(10);
    let error = call(&model, Wire::OpenAi, &history(), CallLimits::default())
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::ContextLength(m) if m.contains("exceed context window")),
        "{error:?}"
    );
    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body["stream"], true);
    assert_eq!(requests[1].body["stream"], false);
}

#[tokio::test]
async fn an_endless_reply_is_cut_off_at_the_bound_naming_it() {
    for wire in [Wire::OpenAi, Wire::Anthropic] {
        let model = FakeModel::start(wire, &["m"]).await;
        model.push(Reply::Endless);
        let started = Instant::now();
        let error = call(&model, wire, &history(), CallLimits::default())
            .await
            .unwrap_err();
        assert!(
            matches!(&error, ModelError::TooLarge(m) if m.contains(&format!("exceeded {} MiB", MAX_REPLY_BYTES >> 20))),
            "{wire:?}: {error:?}"
        );
        eprintln!("{wire:?}: cut off after {:?}", started.elapsed());
    }
}

#[tokio::test]
async fn a_provider_that_never_answers_is_named_after_the_silence_limit() {
    let model = FakeModel::start(Wire::Anthropic, &["m"]).await;
    model.push(Reply::Silent);
    let limits = CallLimits {
        deadline: Duration::from_secs(60),
        silence: Duration::from_millis(300),
    };
    let started = Instant::now();
    let error = call(&model, Wire::Anthropic, &history(), limits)
        .await
        .unwrap_err();
    assert!(
        matches!(&error, ModelError::Retryable { message, .. }
            if message == "the provider 'anthropic' did not answer within 0.3 s ([models] silence_timeout_secs)"),
        "{error:?}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));

    // The whole call has a deadline too, even while bytes keep coming.
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    model.push(Reply::Delayed(
        Duration::from_secs(30),
        Box::new(Reply::Text("late".into())),
    ));
    let limits = CallLimits {
        deadline: Duration::from_millis(300),
        silence: Duration::from_secs(60),
    };
    let error = call(&model, Wire::OpenAi, &history(), limits)
        .await
        .unwrap_err();
    assert!(
        error
            .to_string()
            .contains("did not finish its reply within 0.3 s"),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_request_a_real_api_would_refuse_fails_the_test_with_the_reason() {
    let model = FakeModel::start(Wire::OpenAi, &["m"]).await;
    let dotted = "file.read";
    let client = reqwest::Client::new();
    // A hand-made request with a dotted tool name and a null assistant content.
    let response = client
        .post(format!("{}/chat/completions", model.base_url()))
        .json(&json!({"model": "m", "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "x", "type": "function", "function": {"name": dotted, "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "x", "content": "r"}],
            "tools": [{"type": "function", "function": {"name": dotted, "parameters": {}}}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let violations = model.take_violations();
    assert_eq!(violations.len(), 1);
    assert!(
        violations[0].contains("'file.read' does not match"),
        "{violations:?}"
    );
    assert!(
        violations[0].contains("'content' must be a string"),
        "{violations:?}"
    );
}
