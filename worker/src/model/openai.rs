//! The OpenAI chat-completions wire format, spoken by OpenAI, OpenRouter, Ollama,
//! LM Studio and many other servers. Streaming: tool-call arguments arrive as
//! fragments keyed by index; usage comes in a last chunk (`include_usage`).

use std::collections::BTreeMap;

use chorus_proto::domain::{ChatMessage, ModelRoute, Role, ToolCall, Usage};
use serde_json::{Value, json};

use super::http::{Endpoint, StreamFormat, classify_stream_error, cut_stream, exchange};
use super::sse::SseEvent;
use super::wire_names::{from_wire, to_wire};
use super::{ModelClient, ModelError, ModelReply, ModelRequest, StopReason};

/// A client for one provider speaking this format.
pub struct OpenAiClient(pub Endpoint);

/// The request body for `/chat/completions`, as JSON text. Messages come from the
/// request's cache, so only new ones are serialised (see [`MessageCache`]).
///
/// [`MessageCache`]: super::MessageCache
pub fn request_json(request: &ModelRequest<'_>, stream: bool) -> String {
    let mut head = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "stream": stream,
    });
    if stream {
        head["stream_options"] = json!({ "include_usage": true });
    }
    let mut head = head.to_string();
    if !request.tools.is_empty() {
        let tools = request
            .cache
            .tools_json(ModelRoute::OPENAI_CHAT, request.tools, |tools| {
                let list: Vec<Value> = tools
                    .iter()
                    .map(|t| {
                        json!({
                            "type": "function",
                            "function": {
                                "name": to_wire(&t.name),
                                "description": t.description,
                                "parameters": t.parameters,
                            }
                        })
                    })
                    .collect();
                Value::from(list).to_string()
            });
        head.pop(); // reopen the object for "tools"
        head.push_str(",\"tools\":");
        head.push_str(&tools);
        // "auto" is what OpenAI, vLLM and llama.cpp's server assume when tools are
        // given; llama-cpp-python's function-calling chat formats offer the tools
        // only when it is said (and every API refuses it without tools).
        head.push_str(",\"tool_choice\":\"auto\"");
        head.push('}');
    }
    let system = (!request.system.is_empty())
        .then(|| json!({ "role": "system", "content": request.system }).to_string());
    request.cache.with_fragments(
        ModelRoute::OPENAI_CHAT,
        request.messages,
        |m| message_json(m).to_string(),
        |fragments| {
            let size = head.len()
                + system.as_ref().map_or(0, String::len)
                + fragments.iter().map(|f| f.len() + 1).sum::<usize>()
                + 16;
            let mut out = String::with_capacity(size);
            // `head` is an object with at least one field: reopen it for "messages".
            out.push_str(&head[..head.len() - 1]);
            out.push_str(",\"messages\":[");
            let mut first = true;
            for fragment in system
                .iter()
                .map(String::as_str)
                .chain(fragments.iter().copied())
            {
                if !first {
                    out.push(',');
                }
                first = false;
                out.push_str(fragment);
            }
            out.push_str("]}");
            out
        },
    )
}

/// The request body as a JSON value (for tests and inspection).
pub fn request_body(request: &ModelRequest<'_>, stream: bool) -> Value {
    serde_json::from_str(&request_json(request, stream)).unwrap_or(Value::Null)
}

fn message_json(m: &ChatMessage) -> Value {
    match m.role {
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        // `content` is always a string, `""` when the turn is only tool calls: some
        // servers (llama-cpp-python) answer `null` or a missing `content` with a 500.
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": m.content,
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": { "name": to_wire(&c.name), "arguments": c.arguments },
            })).collect::<Vec<_>>(),
        }),
        role => json!({ "role": role.as_str(), "content": m.content }),
    }
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls") | Some("function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        _ => StopReason::Other,
    }
}

/// The reply's token usage; `None` when the server sent none (`null`, absent, or no
/// counts in it): unknown is not zero.
fn usage_of(value: &Value) -> Option<Usage> {
    let usage = value.get("usage")?;
    let input = usage.get("prompt_tokens").and_then(Value::as_u64);
    let output = usage.get("completion_tokens").and_then(Value::as_u64);
    if input.is_none() && output.is_none() {
        return None;
    }
    Some(Usage {
        input_tokens: input.unwrap_or(0),
        output_tokens: output.unwrap_or(0),
    })
}

/// Reads a non-streaming `/chat/completions` response body.
pub fn parse_reply(body: &Value) -> Result<ModelReply, ModelError> {
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ModelError::retryable("the reply has no choices"))?;
    let message = choice
        .get("message")
        .ok_or_else(|| ModelError::retryable("the reply's first choice has no message"))?;
    let mut calls = ToolCalls::default();
    if let Some(list) = message.get("tool_calls").and_then(Value::as_array) {
        for (i, call) in list.iter().enumerate() {
            calls.apply(i as u64, call);
        }
    }
    Ok(ModelReply {
        content: message
            .get("content")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        tool_calls: calls.finish(),
        stop: stop_reason(choice.get("finish_reason").and_then(Value::as_str)),
        usage: usage_of(body),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        finish_reason: choice
            .get("finish_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

/// Tool calls put together from streamed fragments.
///
/// A fragment names its call by `index` (and, from some servers, `id`). The name is
/// set once: servers such as llama.cpp repeat it in every fragment, and appending
/// would make `viewviewview`. Arguments are appended. A fragment with a new `id` at an
/// index already in use starts a new call (servers that send every call at index 0).
#[derive(Default)]
struct ToolCalls {
    calls: Vec<ToolCall>,
    /// The call each index currently refers to (a position in `calls`).
    by_index: BTreeMap<u64, usize>,
    /// Bytes of ids, names and arguments so far.
    bytes: usize,
}

impl ToolCalls {
    fn apply(&mut self, index: u64, fragment: &Value) {
        let id = fragment
            .get("id")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty());
        let existing = self.by_index.get(&index).copied().filter(|&at| {
            let known = &self.calls[at].id;
            id.is_none_or(|id| known.is_empty() || known == id)
        });
        let at = match existing {
            Some(at) => at,
            None => {
                self.calls.push(ToolCall {
                    id: String::new(),
                    name: String::new(),
                    arguments: String::new(),
                });
                self.by_index.insert(index, self.calls.len() - 1);
                self.calls.len() - 1
            }
        };
        let call = &mut self.calls[at];
        if let Some(id) = id {
            self.bytes += id.len();
            call.id = id.to_string();
        }
        let function = fragment.get("function");
        if let Some(name) = function
            .and_then(|f| f.get("name"))
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            && call.name.is_empty()
        {
            call.name = from_wire(name).into_owned();
        }
        let before = call.arguments.len();
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => call.arguments.push_str(s),
            Some(Value::Null) | None => {}
            // Some servers send the arguments as an object instead of a string.
            Some(other) => call.arguments.push_str(&other.to_string()),
        }
        self.bytes += call.name.len() + call.arguments.len() - before;
    }

    /// Bytes of names and arguments received so far (the reply's size bound; a
    /// repeated name counts each time, as it was sent).
    fn size(&self) -> usize {
        self.bytes
    }

    fn finish(self) -> Vec<ToolCall> {
        self.calls
            .into_iter()
            .enumerate()
            .map(|(position, mut call)| {
                if call.id.is_empty() {
                    // Without an id a result could not be paired with its call.
                    call.id = format!("call_{position}");
                }
                call
            })
            .collect()
    }
}

/// Builds a reply from `chat.completion.chunk` events.
#[derive(Default)]
pub struct StreamState {
    content: String,
    calls: ToolCalls,
    finish: Option<String>,
    usage: Option<Usage>,
    model: Option<String>,
}

impl StreamFormat for StreamState {
    fn parse_body(body: &Value) -> Result<ModelReply, ModelError> {
        parse_reply(body)
    }

    /// Applies one event; text deltas go to `on_text`. Returns whether the stream ended.
    fn apply(
        &mut self,
        provider: &str,
        event: &SseEvent,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ModelError> {
        if event.data.trim() == "[DONE]" {
            return Ok(true);
        }
        let chunk: Value = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::retryable(format!(
                "'{provider}' streamed a chunk that is not JSON ({e})"
            ))
        })?;
        if let Some(error) = chunk.get("error") {
            return Err(classify_stream_error(provider, error));
        }
        if let Some(usage) = usage_of(&chunk) {
            self.usage = Some(usage);
        }
        if self.model.is_none() {
            self.model = chunk
                .get("model")
                .and_then(Value::as_str)
                .map(str::to_string);
        }
        let Some(choice) = chunk.get("choices").and_then(|c| c.get(0)) else {
            return Ok(false); // the usage chunk has no choices
        };
        let delta = choice.get("delta").or_else(|| choice.get("message"));
        if let Some(text) = delta
            .and_then(|d| d.get("content"))
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            on_text(text);
            self.content.push_str(text);
        }
        if let Some(calls) = delta
            .and_then(|d| d.get("tool_calls"))
            .and_then(Value::as_array)
        {
            for (position, fragment) in calls.iter().enumerate() {
                let index = fragment
                    .get("index")
                    .and_then(Value::as_u64)
                    .unwrap_or(position as u64);
                self.calls.apply(index, fragment);
            }
        }
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish = Some(reason.to_string());
        }
        Ok(false)
    }

    fn size(&self) -> usize {
        self.content.len() + self.calls.size()
    }

    fn finish(self, provider: &str) -> Result<ModelReply, ModelError> {
        // Servers differ on `[DONE]`; a finish reason is what says the reply is whole.
        let whole = self.finish.is_some();
        let reply = ModelReply {
            content: self.content,
            tool_calls: self.calls.finish(),
            stop: stop_reason(self.finish.as_deref()),
            usage: self.usage,
            model: self.model,
            finish_reason: self.finish,
        };
        if whole {
            Ok(reply)
        } else {
            cut_stream(provider, reply)
        }
    }
}

impl ModelClient for OpenAiClient {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let url = format!("{}/chat/completions", self.0.base_url);
        let auth = format!("Bearer {}", self.0.api_key);
        let headers = [
            ("authorization", auth.as_str()),
            ("accept", "text/event-stream"),
        ];
        exchange::<StreamState>(
            &self.0,
            &url,
            &headers,
            |stream| request_json(request, stream),
            &request.limits,
            on_text,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageCache, ToolSchema};

    #[test]
    fn the_system_prompt_leads_and_tool_turns_pair_up() {
        let call = ToolCall {
            id: "call_1".into(),
            name: "view".into(),
            arguments: "{\"path\":\"a\"}".into(),
        };
        let messages = vec![
            ChatMessage::user("look"),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "1\thello", false),
        ];
        let tools = vec![ToolSchema {
            name: "view".into(),
            description: "read".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = request_body(
            &ModelRequest {
                model: "m",
                system: "be brief",
                messages: &messages,
                tools: &tools,
                max_tokens: 100,
                cache: &MessageCache::default(),
                limits: Default::default(),
            },
            true,
        );
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(body["messages"][2]["content"], "");
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
        assert_eq!(body["tools"][0]["function"]["name"], "view");
        assert_eq!(
            body["tool_choice"], "auto",
            "llama-cpp-python offers tools only then"
        );
        assert_eq!(body["stream_options"], json!({"include_usage": true}));
        // Without tools (a summary), no tool_choice: every API refuses it alone.
        let body = request_body(
            &ModelRequest {
                model: "m",
                system: "",
                messages: &messages[..1],
                tools: &[],
                max_tokens: 100,
                cache: &MessageCache::default(),
                limits: Default::default(),
            },
            false,
        );
        assert!(body.get("tool_choice").is_none() && body.get("tools").is_none());
    }

    fn chunk(data: Value) -> SseEvent {
        SseEvent {
            event: None,
            data: data.to_string(),
        }
    }

    #[test]
    fn parallel_tool_calls_are_put_together_by_index() {
        let events = vec![
            chunk(
                json!({"choices": [{"index": 0, "delta": {"role": "assistant", "content": "On it. "}}]}),
            ),
            chunk(json!({"choices": [{"index": 0, "delta": {"tool_calls": [
                {"index": 0, "id": "call_a", "type": "function", "function": {"name": "view", "arguments": ""}},
                {"index": 1, "id": "call_b", "type": "function", "function": {"name": "create_file", "arguments": "{\"pa"}}
            ]}}]})),
            chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"path\":\"x\"}"}}]}}]}),
            ),
            chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 1, "function": {"arguments": "th\":\"y\",\"content\":\"\"}"}}]}}]}),
            ),
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
            chunk(json!({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 4}})),
            SseEvent {
                event: None,
                data: "[DONE]".into(),
            },
        ];
        let mut state = StreamState::default();
        let mut streamed = String::new();
        let mut done = false;
        for event in &events {
            done = state
                .apply("openai", event, &mut |t| streamed.push_str(t))
                .unwrap();
        }
        assert!(done);
        assert_eq!(streamed, "On it. ");
        let reply = state.finish("openai").unwrap();
        assert_eq!(reply.stop, StopReason::ToolUse);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 9,
                output_tokens: 4
            })
        );
        let calls: Vec<(&str, &str, &str)> = reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            calls,
            vec![
                ("call_a", "view", "{\"path\":\"x\"}"),
                ("call_b", "create_file", "{\"path\":\"y\",\"content\":\"\"}"),
            ]
        );
    }

    fn done() -> SseEvent {
        SseEvent {
            event: None,
            data: "[DONE]".into(),
        }
    }

    #[test]
    fn a_cut_stream_is_never_a_final_answer_and_calls_without_ids_get_one() {
        // Text, then the end (with or without `[DONE]`) and no finish reason: kept,
        // as an interrupted answer.
        for end in [Some(done()), None] {
            let mut state = StreamState::default();
            state
                .apply(
                    "ollama",
                    &chunk(json!({"choices": [{"delta": {"content": "partial"}}]})),
                    &mut |_| {},
                )
                .unwrap();
            if let Some(end) = &end {
                assert!(state.apply("ollama", end, &mut |_| {}).unwrap());
            }
            let reply = state.finish("ollama").unwrap();
            assert_eq!(
                (reply.content.as_str(), reply.stop),
                ("partial", StopReason::Interrupted)
            );
        }
        // Nothing, or a tool call, then `[DONE]` and no finish reason: a failed attempt.
        let empty = [
            chunk(json!({"choices": [{"delta": {"role": "assistant", "content": ""}}]})),
            done(),
        ];
        let call = [
            chunk(
                json!({"choices": [{"delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "view", "arguments": "{\"pa"}}]}}]}),
            ),
            done(),
        ];
        for events in [&empty[..], &call[..], &[done()][..]] {
            let mut state = StreamState::default();
            for event in events {
                state.apply("llama", event, &mut |_| {}).unwrap();
            }
            assert!(
                matches!(state.finish("llama"), Err(ModelError::Retryable { .. })),
                "{events:?}"
            );
        }

        let mut state = StreamState::default();
        state
            .apply(
                "ollama",
                &chunk(json!({"choices": [{"delta": {"tool_calls": [{"function": {"name": "view", "arguments": {"path": "a"}}}]}, "finish_reason": "stop"}]})),
                &mut |_| {},
            )
            .unwrap();
        let reply = state.finish("ollama").unwrap();
        assert_eq!(reply.tool_calls[0].id, "call_0");
        assert_eq!(reply.tool_calls[0].arguments, r#"{"path":"a"}"#);
        assert!(matches!(
            StreamState::default().apply(
                "x",
                &SseEvent {
                    event: None,
                    data: "{bad".into()
                },
                &mut |_| {}
            ),
            Err(ModelError::Retryable { .. })
        ));
    }

    /// An error inside a 200 stream is sorted as the same error sent as a status.
    #[test]
    fn mid_stream_errors_are_classified_as_their_status_would_be() {
        let error = |value: Value| {
            StreamState::default()
                .apply("litellm", &chunk(json!({ "error": value })), &mut |_| {})
                .unwrap_err()
        };
        // LiteLLM's context-window error, mid-stream.
        assert!(matches!(
            error(
                json!({"message": "litellm.ContextWindowExceededError: prompt is too long", "type": null, "param": null, "code": "400"})
            ),
            ModelError::ContextLength(_)
        ));
        assert!(matches!(
            error(json!({"message": "This model's maximum context length is 4096 tokens"})),
            ModelError::ContextLength(_)
        ));
        assert!(matches!(
            error(json!({"message": "invalid key", "code": 401})),
            ModelError::Fatal(m) if m.contains("refused the credentials")
        ));
        assert!(matches!(
            error(json!({"message": "overloaded", "type": "server_error"})),
            ModelError::Retryable { .. }
        ));
        assert!(matches!(
            error(json!({"message": "something odd"})),
            ModelError::Retryable { .. }
        ));
    }

    #[test]
    fn non_streaming_replies_are_normalised() {
        let body = json!({
            "choices": [{
                "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"type": "function", "function": {"name": "view", "arguments": "{}"}}
                ]},
                "finish_reason": "tool_calls"
            }],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3}
        });
        let reply = parse_reply(&body).unwrap();
        assert_eq!(reply.stop, StopReason::ToolUse);
        assert_eq!(reply.tool_calls[0].id, "call_0");
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 12,
                output_tokens: 3
            })
        );
        assert!(parse_reply(&json!({"choices": []})).is_err());
    }
}
