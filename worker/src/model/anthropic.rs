//! Anthropic's native Messages API: `system` as a parameter, `tool_use` /
//! `tool_result` content blocks, and its server-sent event stream.

use std::collections::BTreeMap;

use chorus_proto::domain::{ChatMessage, ModelRoute, Role, ToolCall, Usage};
use serde_json::{Map, Value, json};

use super::http::{Endpoint, StreamFormat, classify_stream_error, cut_stream, exchange};
use super::sse::SseEvent;
use super::wire_names::{from_wire, to_wire};
use super::{ModelClient, ModelError, ModelReply, ModelRequest, StopReason};

pub const API_VERSION: &str = "2023-06-01";

/// A client for one provider speaking this format.
pub struct AnthropicClient(pub Endpoint);

/// The request body for `POST /v1/messages`, as JSON text. Each message's content
/// blocks come from the request's cache, so only new messages are serialised.
pub fn request_json(request: &ModelRequest<'_>, stream: bool) -> String {
    let mut head = json!({
        "model": request.model,
        "max_tokens": request.max_tokens,
        "stream": stream,
    });
    if !request.system.is_empty() {
        head["system"] = Value::from(request.system);
    }
    let mut head = head.to_string();
    if !request.tools.is_empty() {
        let tools = request.cache.tools_json(ModelRoute::ANTHROPIC_MESSAGES, request.tools, |tools| {
            let list: Vec<Value> = tools
                .iter()
                .map(|t| json!({"name": to_wire(&t.name), "description": t.description, "input_schema": t.parameters}))
                .collect();
            Value::from(list).to_string()
        });
        head.pop(); // reopen the object for "tools"
        head.push_str(",\"tools\":");
        head.push_str(&tools);
        head.push('}');
    }
    request.cache.with_fragments(
        ModelRoute::ANTHROPIC_MESSAGES,
        request.messages,
        render_blocks,
        |fragments| {
            let size = head.len() + fragments.iter().map(|f| f.len() + 40).sum::<usize>();
            let mut out = String::with_capacity(size);
            out.push_str(&head[..head.len() - 1]);
            out.push_str(",\"messages\":[");
            // Anthropic wants alternating turns: consecutive fragments of one role
            // (e.g. several tool results and the user's next words) share a turn.
            let mut open_role: Option<char> = None;
            for fragment in fragments {
                let mut chars = fragment.chars();
                let (Some(role), blocks) = (chars.next(), chars.as_str()) else {
                    continue;
                };
                if blocks.is_empty() {
                    continue; // an empty turn is refused by the API and says nothing
                }
                if open_role == Some(role) {
                    out.push(',');
                } else {
                    if open_role.is_some() {
                        out.push_str("]},");
                    }
                    let name = if role == 'a' { "assistant" } else { "user" };
                    out.push_str(&format!("{{\"role\":\"{name}\",\"content\":["));
                    open_role = Some(role);
                }
                out.push_str(blocks);
            }
            if open_role.is_some() {
                out.push_str("]}");
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

/// One message as its role letter (`u`/`a`) followed by its content blocks, comma
/// separated (nothing after the letter when it has no content).
fn render_blocks(message: &ChatMessage) -> String {
    let (role, blocks): (char, Vec<Value>) = match message.role {
        Role::User | Role::System => ('u', text_block(&message.content).into_iter().collect()),
        Role::Tool => {
            let mut block = json!({
                "type": "tool_result",
                "tool_use_id": message.tool_call_id.clone().unwrap_or_default(),
                "content": message.content,
            });
            if message.is_error {
                block["is_error"] = Value::Bool(true);
            }
            ('u', vec![block])
        }
        Role::Assistant => {
            let mut blocks: Vec<Value> = text_block(&message.content).into_iter().collect();
            blocks.extend(message.tool_calls.iter().map(|call| {
                json!({"type": "tool_use", "id": call.id, "name": to_wire(&call.name), "input": tool_input(call)})
            }));
            ('a', blocks)
        }
    };
    let mut out = String::new();
    out.push(role);
    for (i, block) in blocks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(&block.to_string());
    }
    out
}

fn text_block(text: &str) -> Option<Value> {
    (!text.is_empty()).then(|| json!({"type": "text", "text": text}))
}

/// Tool inputs must be objects; arguments another model produced as invalid JSON
/// are sent as an empty object (their tool result already says what was wrong).
fn tool_input(call: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(Value::Object(map)) => Value::Object(map),
        _ => Value::Object(Map::new()),
    }
}

fn stop_reason(reason: Option<&str>) -> StopReason {
    match reason {
        Some("end_turn") | Some("stop_sequence") => StopReason::EndTurn,
        Some("tool_use") => StopReason::ToolUse,
        Some("max_tokens") => StopReason::MaxTokens,
        _ => StopReason::Other,
    }
}

/// Reads a non-streaming response body.
pub fn parse_reply(body: &Value) -> Result<ModelReply, ModelError> {
    let blocks = body
        .get("content")
        .and_then(Value::as_array)
        .ok_or_else(|| ModelError::retryable("the reply has no content blocks"))?;
    let mut content = String::new();
    let mut tool_calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => content.push_str(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
            ),
            Some("tool_use") => tool_calls.push(ToolCall {
                id: str_of(block, "id"),
                name: from_wire(&str_of(block, "name")).into_owned(),
                arguments: block
                    .get("input")
                    .map(Value::to_string)
                    .unwrap_or_else(|| "{}".into()),
            }),
            _ => {}
        }
    }
    Ok(ModelReply {
        content,
        tool_calls,
        stop: stop_reason(body.get("stop_reason").and_then(Value::as_str)),
        model: body
            .get("model")
            .and_then(Value::as_str)
            .map(str::to_string),
        finish_reason: body
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
        usage: body.get("usage").and_then(|u| {
            let input = u.get("input_tokens").and_then(Value::as_u64);
            let output = u.get("output_tokens").and_then(Value::as_u64);
            // Unknown is not zero.
            (input.is_some() || output.is_some()).then(|| Usage {
                input_tokens: input.unwrap_or(0),
                output_tokens: output.unwrap_or(0),
            })
        }),
    })
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

enum Block {
    Text,
    Tool {
        id: String,
        name: String,
        input: String,
    },
    Other,
}

/// Builds a reply from the event stream.
#[derive(Default)]
pub struct StreamState {
    blocks: BTreeMap<u64, Block>,
    content: String,
    stop: Option<String>,
    model: Option<String>,
    input_tokens: u64,
    output_tokens: u64,
    saw_usage: bool,
    /// Bytes of text, tool names and inputs so far.
    bytes: usize,
}

impl StreamState {
    fn add_usage(&mut self, usage: &Value) {
        if let Some(n) = usage.get("input_tokens").and_then(Value::as_u64) {
            self.input_tokens = n;
            self.saw_usage = true;
        }
        if let Some(n) = usage.get("output_tokens").and_then(Value::as_u64) {
            self.output_tokens = n;
            self.saw_usage = true;
        }
    }
}

impl StreamFormat for StreamState {
    fn parse_body(body: &Value) -> Result<ModelReply, ModelError> {
        parse_reply(body)
    }

    /// Applies one event; text deltas go to `on_text`. Returns whether the message ended.
    fn apply(
        &mut self,
        provider: &str,
        event: &SseEvent,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<bool, ModelError> {
        let data: Value = serde_json::from_str(&event.data).map_err(|e| {
            ModelError::retryable(format!(
                "'{provider}' streamed an event that is not JSON ({e})"
            ))
        })?;

        let kind = event
            .event
            .clone()
            .or_else(|| data.get("type").and_then(Value::as_str).map(str::to_string))
            .unwrap_or_default();
        match kind.as_str() {
            "message_start" => {
                if let Some(usage) = data.pointer("/message/usage") {
                    self.add_usage(usage);
                }
                self.model = data
                    .pointer("/message/model")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            "content_block_start" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let block = data.get("content_block").cloned().unwrap_or(Value::Null);
                let block = match block.get("type").and_then(Value::as_str) {
                    Some("text") => {
                        let text = str_of(&block, "text");
                        if !text.is_empty() {
                            on_text(&text);
                            self.content.push_str(&text);
                            self.bytes += text.len();
                        }
                        Block::Text
                    }
                    Some("tool_use") => Block::Tool {
                        id: str_of(&block, "id"),
                        name: from_wire(&str_of(&block, "name")).into_owned(),
                        // A non-empty start input (rare) is kept unless deltas follow.
                        input: match block.get("input") {
                            Some(Value::Object(map)) if !map.is_empty() => {
                                Value::Object(map.clone()).to_string()
                            }
                            _ => String::new(),
                        },
                    },
                    _ => Block::Other,
                };
                if let Block::Tool { id, name, input } = &block {
                    self.bytes += id.len() + name.len() + input.len();
                }
                self.blocks.insert(index, block);
            }
            "content_block_delta" => {
                let index = data.get("index").and_then(Value::as_u64).unwrap_or(0);
                let delta = data.get("delta").cloned().unwrap_or(Value::Null);
                match (
                    delta.get("type").and_then(Value::as_str),
                    self.blocks.get_mut(&index),
                ) {
                    (Some("text_delta"), _) => {
                        let text = str_of(&delta, "text");
                        on_text(&text);
                        self.content.push_str(&text);
                        self.bytes += text.len();
                    }
                    (Some("input_json_delta"), Some(Block::Tool { input, .. })) => {
                        let part = delta
                            .get("partial_json")
                            .and_then(Value::as_str)
                            .unwrap_or_default();
                        input.push_str(part);
                        self.bytes += part.len();
                    }
                    _ => {} // thinking, signatures: not part of Chorus's message model
                }
            }
            "message_delta" => {
                if let Some(reason) = data.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.stop = Some(reason.to_string());
                }
                if let Some(usage) = data.get("usage") {
                    self.add_usage(usage);
                }
            }
            "message_stop" => return Ok(true),
            "error" => {
                let error = data.get("error").cloned().unwrap_or(Value::Null);
                return Err(classify_stream_error(provider, &error));
            }
            _ => {} // ping, content_block_stop
        }
        Ok(false)
    }

    fn size(&self) -> usize {
        self.bytes
    }

    fn finish(self, provider: &str) -> Result<ModelReply, ModelError> {
        // A stop reason is what says the message is whole (`message_stop` may be
        // missing after it).
        let whole = self.stop.is_some();
        let tool_calls = self
            .blocks
            .into_values()
            .filter_map(|block| match block {
                Block::Tool { id, name, input } => Some(ToolCall {
                    id,
                    name,
                    arguments: if input.trim().is_empty() {
                        "{}".into()
                    } else {
                        input
                    },
                }),
                _ => None,
            })
            .collect();
        let reply = ModelReply {
            content: self.content,
            tool_calls,
            stop: stop_reason(self.stop.as_deref()),
            model: self.model,
            finish_reason: self.stop,
            usage: self.saw_usage.then_some(Usage {
                input_tokens: self.input_tokens,
                output_tokens: self.output_tokens,
            }),
        };
        if whole {
            Ok(reply)
        } else {
            cut_stream(provider, reply)
        }
    }
}

impl ModelClient for AnthropicClient {
    async fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> Result<ModelReply, ModelError> {
        let url = format!("{}/v1/messages", self.0.base_url);
        let headers = [
            ("x-api-key", self.0.api_key.as_str()),
            ("anthropic-version", API_VERSION),
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

    fn call(id: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "view".into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn requests_use_system_and_pair_tool_results_with_their_calls() {
        let a = call("toolu_1", r#"{"path":"a"}"#);
        let b = call("toolu_2", "{not json");
        let messages = vec![
            ChatMessage::user("look at a and b"),
            ChatMessage::assistant("Looking.", vec![a.clone(), b.clone()]),
            ChatMessage::tool_result(&a, "1\thello", false),
            ChatMessage::tool_result(&b, "invalid arguments", true),
            ChatMessage::user("and then?"),
            ChatMessage::assistant("", vec![]),
        ];
        let tools = vec![ToolSchema {
            name: "view".into(),
            description: "read".into(),
            parameters: json!({"type": "object"}),
        }];
        let body = request_body(
            &ModelRequest {
                model: "claude-x",
                system: "be brief",
                messages: &messages,
                tools: &tools,
                max_tokens: 1024,
                cache: &MessageCache::default(),
                limits: Default::default(),
            },
            true,
        );
        assert_eq!(body["system"], "be brief");
        assert_eq!(body["max_tokens"], 1024);
        assert_eq!(body["stream"], true);
        assert_eq!(
            body["tools"][0],
            json!({"name": "view", "description": "read", "input_schema": {"type": "object"}})
        );
        let turns = body["messages"].as_array().unwrap();
        assert_eq!(turns.len(), 3, "{turns:#?}");
        assert_eq!(
            turns[0],
            json!({"role": "user", "content": [{"type": "text", "text": "look at a and b"}]})
        );
        assert_eq!(
            turns[1]["content"][1],
            json!({"type": "tool_use", "id": "toolu_1", "name": "view", "input": {"path": "a"}})
        );
        assert_eq!(turns[1]["content"][2]["input"], json!({}));
        assert_eq!(
            turns[2]["content"],
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "1\thello"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "invalid arguments", "is_error": true},
                {"type": "text", "text": "and then?"}
            ])
        );
    }

    fn sse(event: &str, data: Value) -> SseEvent {
        SseEvent {
            event: Some(event.into()),
            data: data.to_string(),
        }
    }

    #[test]
    fn a_stream_of_text_and_tool_use_becomes_one_reply() {
        let events = vec![
            sse(
                "message_start",
                json!({"type": "message_start", "message": {"usage": {"input_tokens": 25, "output_tokens": 1}}}),
            ),
            sse(
                "content_block_start",
                json!({"index": 0, "content_block": {"type": "text", "text": ""}}),
            ),
            sse("ping", json!({"type": "ping"})),
            sse(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "text_delta", "text": "Let me "}}),
            ),
            sse(
                "content_block_delta",
                json!({"index": 0, "delta": {"type": "text_delta", "text": "look."}}),
            ),
            sse("content_block_stop", json!({"index": 0})),
            sse(
                "content_block_start",
                json!({"index": 1, "content_block": {"type": "tool_use", "id": "toolu_9", "name": "view", "input": {}}}),
            ),
            sse(
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"pa"}}),
            ),
            sse(
                "content_block_delta",
                json!({"index": 1, "delta": {"type": "input_json_delta", "partial_json": "th\": \"a\"}"}}),
            ),
            sse("content_block_stop", json!({"index": 1})),
            sse(
                "message_delta",
                json!({"delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 17}}),
            ),
            sse("message_stop", json!({"type": "message_stop"})),
        ];
        let mut state = StreamState::default();
        let mut streamed = String::new();
        let mut done = false;
        for event in &events {
            done = state
                .apply("anthropic", event, &mut |t| streamed.push_str(t))
                .unwrap();
        }
        assert!(done);
        assert_eq!(streamed, "Let me look.");
        let reply = state.finish("anthropic").unwrap();
        assert_eq!(reply.content, "Let me look.");
        assert_eq!(reply.stop, StopReason::ToolUse);
        assert_eq!(reply.tool_calls, vec![call("toolu_9", "{\"path\": \"a\"}")]);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 25,
                output_tokens: 17
            })
        );
    }

    #[test]
    fn a_cut_stream_and_stream_errors_are_reported_as_what_they_are() {
        let mut state = StreamState::default();
        state
            .apply(
                "anthropic",
                &sse(
                    "message_start",
                    json!({"message": {"usage": {"input_tokens": 1}}}),
                ),
                &mut |_| {},
            )
            .unwrap();
        assert!(matches!(
            state.finish("anthropic"),
            Err(ModelError::Retryable { .. })
        ));

        let overloaded = sse(
            "error",
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        assert!(matches!(
            StreamState::default().apply("anthropic", &overloaded, &mut |_| {}),
            Err(ModelError::Retryable { .. })
        ));
        let invalid = sse(
            "error",
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": "bad"}}),
        );
        assert!(matches!(
            StreamState::default().apply("anthropic", &invalid, &mut |_| {}),
            Err(ModelError::Fatal(_))
        ));
        let garbage = SseEvent {
            event: Some("content_block_delta".into()),
            data: "{oops".into(),
        };
        assert!(matches!(
            StreamState::default().apply("anthropic", &garbage, &mut |_| {}),
            Err(ModelError::Retryable { .. })
        ));
    }

    #[test]
    fn non_streaming_replies_parse_too() {
        let reply = parse_reply(&json!({
            "content": [{"type": "text", "text": "hi"}, {"type": "tool_use", "id": "t", "name": "view", "input": {"path": "x"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 3, "output_tokens": 4}
        }))
        .unwrap();
        assert_eq!(reply.content, "hi");
        assert_eq!(reply.tool_calls[0].arguments, r#"{"path":"x"}"#);
        assert_eq!(reply.stop, StopReason::ToolUse);
    }
}
