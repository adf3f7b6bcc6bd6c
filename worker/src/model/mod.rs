//! Talking to models. A wire format implements one streaming call
//! ([`ModelClient::stream`]); the non-streaming call is built on it. Every format
//! converts exactly to and from Chorus's one message model
//! ([`chorus_proto::domain::ChatMessage`]).
//!
//! Irregular servers: streamed tool calls are keyed by index (a new `id` at a used
//! index starts a new call) and their name is set once (llama.cpp repeats it in every
//! fragment). An assistant turn with tool calls is sent with `"content": ""` (never
//! `null`); a request with tools says `tool_choice: "auto"` (llama-cpp-python offers
//! tools only then), one without never does. A 200 stream with no events is asked once
//! more without streaming to learn the real error; the relay sends a request whose
//! pooled connection the server had closed (no response byte) once more on a new
//! connection, and calls that "closed the connection", never "unreachable". A stream
//! that ends without a finish reason (`[DONE]` alone, or the end of the body) was cut
//! by the server: empty or in a tool call it is a failed attempt, with text it is kept
//! and continued (`Interrupted`), never a final answer. An error sent inside a 200
//! stream is classified as the same error sent as a status (`classify_stream_error`). A
//! length stop is judged by `tool_loop::length_stop` from what is known: input plus
//! output against the route's `context_window` (settings, or the provider's list);
//! without one, every `max_tokens` used is the output limit and fewer is unsure
//! (continued once, full if the continuation adds nothing). What was streamed is kept
//! either way. `ModelRoute.limits` carries `max_tokens` and `context_window`. Missing
//! usage stays `None` up to the API (`null`), never 0.

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod relay;
pub mod sse;
pub mod wire_names;

use std::time::Duration;

use chorus_proto::domain::{ChatMessage, ToolCall, Usage};
use serde_json::Value;

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

impl ToolSchema {
    /// A tool as the control plane offers it. A schema that is not JSON (never from
    /// a control plane of the same version) becomes an open object schema rather
    /// than failing every model call.
    pub fn from_spec(spec: &chorus_proto::domain::ToolSpec) -> ToolSchema {
        let parameters = serde_json::from_str(&spec.schema_json).unwrap_or_else(|e| {
            tracing::warn!(tool = %spec.name, error = %e, "a tool schema that is not JSON");
            serde_json::json!({"type": "object"})
        });
        ToolSchema {
            name: spec.name.clone(),
            description: spec.description.clone(),
            parameters,
        }
    }
}

/// Output limit asked for when the caller does not say (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

#[derive(Clone, Copy)]
pub struct ModelRequest<'a> {
    /// The model name as the provider knows it (no `ollama/` style prefix).
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSchema],
    pub max_tokens: u32,
    /// Serialised messages from earlier calls of the same run.
    pub cache: &'a MessageCache,
    /// How long one attempt may take.
    pub limits: http::CallLimits,
}

/// What identifies a message cheaply: enough to notice a history that was not
/// simply appended to (then the cache starts over), without reading the content.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    role: chorus_proto::domain::Role,
    content_len: usize,
    tool_calls: usize,
    tool_call_id_len: usize,
}

impl Fingerprint {
    fn of(m: &ChatMessage) -> Self {
        Fingerprint {
            role: m.role,
            content_len: m.content.len(),
            tool_calls: m.tool_calls.len(),
            tool_call_id_len: m.tool_call_id.as_ref().map_or(0, String::len),
        }
    }
}

/// Each message serialised once per wire format and run, not once per model call.
///
/// Why: a run's history only grows, and re-serialising all of it on every call made
/// the worker's cost per turn grow with the conversation (about 1.5 ms at 200 turns).
/// Invariant: a fragment is reused only while the message at its index has the same
/// fingerprint; anything else is rendered again.
#[derive(Default)]
pub struct MessageCache {
    formats: std::sync::Mutex<std::collections::HashMap<&'static str, Vec<(Fingerprint, String)>>>,
    /// The tool list as JSON, by format, with the names it was made for.
    tools: std::sync::Mutex<std::collections::HashMap<&'static str, (Vec<String>, String)>>,
}

impl MessageCache {
    /// The tools as JSON text, rendered again only when the offered tools change.
    pub fn tools_json(
        &self,
        format: &'static str,
        tools: &[ToolSchema],
        render: impl Fn(&[ToolSchema]) -> String,
    ) -> String {
        let mut cached = self
            .tools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let same = cached.get(format).is_some_and(|(names, _)| {
            names.len() == tools.len() && names.iter().zip(tools).all(|(n, t)| *n == t.name)
        });
        if !same {
            let names = tools.iter().map(|t| t.name.clone()).collect();
            cached.insert(format, (names, render(tools)));
        }
        cached
            .get(format)
            .map(|(_, json)| json.clone())
            .unwrap_or_default()
    }

    /// Calls `assemble` with one rendered fragment per message, rendering only the
    /// messages not rendered (unchanged) before.
    pub fn with_fragments<R>(
        &self,
        format: &'static str,
        messages: &[ChatMessage],
        render: impl Fn(&ChatMessage) -> String,
        assemble: impl FnOnce(&[&str]) -> R,
    ) -> R {
        let mut formats = self
            .formats
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cached = formats.entry(format).or_default();
        let valid = cached
            .iter()
            .zip(messages)
            .take_while(|((fingerprint, _), m)| *fingerprint == Fingerprint::of(m))
            .count();
        cached.truncate(valid);
        for m in &messages[valid..] {
            cached.push((Fingerprint::of(m), render(m)));
        }
        let fragments: Vec<&str> = cached.iter().map(|(_, s)| s.as_str()).collect();
        assemble(&fragments)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The reply was cut off by the output limit; the loop keeps it and asks for more.
    MaxTokens,
    /// The stream ended (`[DONE]`, or the end of the body) without a finish reason,
    /// after some text and no tool call: the server cut it off (llama-cpp-python does
    /// when another request arrives). The loop keeps the text and asks for the rest;
    /// see [`http::cut_stream`].
    Interrupted,
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop: StopReason,
    pub usage: Option<Usage>,
    /// The model that answered, as the provider named it (traces).
    pub model: Option<String>,
    /// The provider's own finish reason (`stop`, `tool_calls`, `end_turn`, …).
    pub finish_reason: Option<String>,
}

/// A model call failed. Each variant says what the tool loop does about it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ModelError {
    /// Transient (429, 5xx, overloaded, connection refused or cut mid-stream, a reply
    /// that could not be parsed). The loop retries with backoff, waiting at least
    /// `retry_after` when the provider said so, within its attempt and time budget.
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The conversation no longer fits the model's context window. The loop shortens
    /// old tool output and tries again, a bounded number of times, then fails the
    /// run with this message.
    #[error("{0}")]
    ContextLength(String),
    /// Retrying cannot help: bad key, no quota, unknown model, a refused request. The
    /// run fails with this message, which names the provider and what to check.
    #[error("{0}")]
    Fatal(String),
    /// The reply went over a bound on its size (a model stuck repeating itself, a
    /// server that is not a model server). Retrying would most likely repeat it: the
    /// run fails with this message, which names the bound.
    #[error("{0}")]
    TooLarge(String),
}

impl ModelError {
    pub fn retryable(message: impl Into<String>) -> Self {
        ModelError::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }
}

/// One wire format.
pub trait ModelClient: Send + Sync {
    /// Sends `request` with streaming on, hands each piece of text to `on_text` as it
    /// arrives, and returns the whole reply.
    fn stream(
        &self,
        request: &ModelRequest<'_>,
        on_text: &mut (dyn FnMut(&str) + Send),
    ) -> impl std::future::Future<Output = Result<ModelReply, ModelError>> + Send;

    /// The whole reply at once.
    fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> impl std::future::Future<Output = Result<ModelReply, ModelError>> + Send {
        async move { self.stream(request, &mut |_| {}).await }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::Role;

    fn history(turns: usize) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::user("start")];
        for i in 0..turns {
            let call = ToolCall {
                id: format!("c{i}"),
                name: "view".into(),
                arguments: format!("{{\"path\":\"f{i}\"}}"),
            };
            messages.push(ChatMessage::assistant(
                format!("turn {i}"),
                vec![call.clone()],
            ));
            messages.push(ChatMessage::tool_result(
                &call,
                format!("line\t{i}\n"),
                i % 2 == 0,
            ));
        }
        messages
    }

    /// A cache carried through a growing (and once rewritten) history must give the
    /// same bodies as no cache at all, in both wire formats.
    #[test]
    fn a_reused_cache_gives_the_same_bodies_as_a_fresh_one() {
        type Render = fn(&ModelRequest<'_>, bool) -> String;
        let formats: [(&str, Render); 2] = [
            ("openai", openai::request_json),
            ("anthropic", anthropic::request_json),
        ];
        for (name, render) in formats {
            let cache = MessageCache::default();
            let mut messages = history(0);
            let tool = |name: &str| ToolSchema {
                name: name.into(),
                description: format!("the {name} tool"),
                parameters: serde_json::json!({"type": "object"}),
            };
            let mut tools = vec![tool("view"), tool("bash")];
            let request =
                |messages: &[ChatMessage], tools: &[ToolSchema], cache: &MessageCache| -> String {
                    render(
                        &ModelRequest {
                            model: "m",
                            system: "sys",
                            messages,
                            tools,
                            max_tokens: 10,
                            cache,
                            limits: Default::default(),
                        },
                        true,
                    )
                };
            let fresh = |messages: &[ChatMessage], tools: &[ToolSchema]| {
                request(messages, tools, &MessageCache::default())
            };
            for turns in 1..6 {
                messages = history(turns);
                assert_eq!(
                    request(&messages, &tools, &cache),
                    fresh(&messages, &tools),
                    "{name}"
                );
            }
            // A rewritten history (not an append) is noticed and rendered again.
            messages[3] = ChatMessage::user("rewritten, and longer than before");
            assert_eq!(messages[3].role, Role::User);
            assert_eq!(
                request(&messages, &tools, &cache),
                fresh(&messages, &tools),
                "{name}"
            );
            messages.truncate(2);
            assert_eq!(
                request(&messages, &tools, &cache),
                fresh(&messages, &tools),
                "{name}"
            );
            // So are changed tools, and no tools at all.
            tools.pop();
            assert_eq!(
                request(&messages, &tools, &cache),
                fresh(&messages, &tools),
                "{name}"
            );
            assert!(request(&messages, &tools, &cache).contains("the view tool"));
            assert!(!request(&messages, &tools, &cache).contains("the bash tool"));
            assert_eq!(
                request(&messages, &[], &cache),
                fresh(&messages, &[]),
                "{name}"
            );
        }
    }
}
