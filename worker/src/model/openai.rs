//! The OpenAI chat-completions wire format (OpenAI, and the many servers that speak it).

use chorus_proto::domain::{ChatMessage, Role, ToolCall, Usage};
use serde_json::{Value, json};

use super::{ModelClient, ModelError, ModelReply, ModelRequest, StopReason};

pub struct OpenAiClient {
    http: reqwest::Client,
    /// e.g. `http://127.0.0.1:50051/llm/openai` (the control plane's relay).
    base_url: String,
    /// Sent as the bearer token: the worker credential when calling the relay.
    api_key: String,
    /// Provider name for error messages.
    provider: String,
}

impl OpenAiClient {
    /// `http` is shared by every client of the worker (one connection pool).
    pub fn new(
        http: reqwest::Client,
        base_url: impl Into<String>,
        api_key: impl Into<String>,
        provider: impl Into<String>,
    ) -> Self {
        OpenAiClient {
            http,
            base_url: base_url.into().trim_end_matches('/').to_string(),
            api_key: api_key.into(),
            provider: provider.into(),
        }
    }
}

/// The request body for `/chat/completions`.
pub fn request_body(request: &ModelRequest<'_>) -> Value {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    if !request.system.is_empty() {
        messages.push(json!({ "role": "system", "content": request.system }));
    }
    messages.extend(request.messages.iter().map(message_json));
    let mut body = json!({
        "model": request.model,
        "messages": messages,
        "stream": false,
    });
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|t| {
                json!({
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    }
                })
            })
            .collect();
    }
    body
}

fn message_json(m: &ChatMessage) -> Value {
    match m.role {
        Role::Tool => json!({
            "role": "tool",
            "tool_call_id": m.tool_call_id.clone().unwrap_or_default(),
            "content": m.content,
        }),
        Role::Assistant if !m.tool_calls.is_empty() => json!({
            "role": "assistant",
            "content": if m.content.is_empty() { Value::Null } else { Value::from(m.content.clone()) },
            "tool_calls": m.tool_calls.iter().map(|c| json!({
                "id": c.id,
                "type": "function",
                "function": { "name": c.name, "arguments": c.arguments },
            })).collect::<Vec<_>>(),
        }),
        role => json!({ "role": role.as_str(), "content": m.content }),
    }
}

/// Reads a `/chat/completions` response body.
pub fn parse_reply(body: &Value) -> Result<ModelReply, ModelError> {
    let choice = body
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| ModelError::BadReply("no choices in the response".into()))?;
    let message = choice
        .get("message")
        .ok_or_else(|| ModelError::BadReply("the first choice has no message".into()))?;
    let content = message
        .get("content")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let tool_calls = message
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .enumerate()
                .map(|(i, c)| tool_call(i, c))
                .collect()
        })
        .unwrap_or_default();
    let stop = match choice.get("finish_reason").and_then(Value::as_str) {
        Some("stop") => StopReason::EndTurn,
        Some("tool_calls") | Some("function_call") => StopReason::ToolUse,
        Some("length") => StopReason::MaxTokens,
        _ => StopReason::Other,
    };
    let usage = body.get("usage").map(|u| Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    Ok(ModelReply {
        content,
        tool_calls,
        stop,
        usage,
    })
}

fn tool_call(index: usize, call: &Value) -> ToolCall {
    let function = call.get("function");
    let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or_default().to_string();
    let id = text(call.get("id"));
    ToolCall {
        // A call without an id still needs one to pair its result with.
        id: if id.is_empty() {
            format!("call_{index}")
        } else {
            id
        },
        name: text(function.and_then(|f| f.get("name"))),
        arguments: match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
            None => String::new(),
        },
    }
}

/// The provider's own error message, from `{"error": {"message": …}}` when present.
fn error_message(body: &str) -> String {
    serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| {
            v.get("error").and_then(|e| {
                e.get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .or_else(|| e.as_str().map(str::to_string))
            })
        })
        .unwrap_or_else(|| body.chars().take(500).collect())
}

impl ModelClient for OpenAiClient {
    async fn complete(&self, request: &ModelRequest<'_>) -> Result<ModelReply, ModelError> {
        let url = format!("{}/chat/completions", self.base_url);
        let response = self
            .http
            .post(&url)
            .bearer_auth(&self.api_key)
            .json(&request_body(request))
            .send()
            .await
            .map_err(|e| ModelError::Unreachable {
                url: url.clone(),
                message: e.to_string(),
            })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| ModelError::Unreachable {
            url: url.clone(),
            message: e.to_string(),
        })?;
        if !status.is_success() {
            let message = error_message(&text);
            let hint = match status.as_u16() {
                401 | 403 => " Check OPENAI_API_KEY.",
                404 => " Check the model name and OPENAI_BASE_URL.",
                _ => "",
            };
            return Err(ModelError::Provider(format!(
                "the model provider '{}' answered {}: {}.{}",
                self.provider,
                status.as_u16(),
                message.trim_end_matches('.'),
                hint
            )));
        }
        let body: Value = serde_json::from_str(&text)
            .map_err(|e| ModelError::BadReply(format!("not JSON ({e})")))?;
        parse_reply(&body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ToolSchema;

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
        let body = request_body(&ModelRequest {
            model: "m",
            system: "be brief",
            messages: &messages,
            tools: &tools,
        });
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "be brief"})
        );
        assert_eq!(body["messages"][2]["content"], Value::Null);
        assert_eq!(
            body["messages"][2]["tool_calls"][0]["function"]["arguments"],
            "{\"path\":\"a\"}"
        );
        assert_eq!(body["messages"][3]["tool_call_id"], "call_1");
        assert_eq!(body["tools"][0]["function"]["name"], "view");
    }

    #[test]
    fn replies_are_normalised() {
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

    #[test]
    fn provider_errors_keep_the_providers_words() {
        assert_eq!(
            error_message(r#"{"error":{"message":"Incorrect API key provided"}}"#),
            "Incorrect API key provided"
        );
        assert_eq!(error_message("plain text"), "plain text");
    }
}
