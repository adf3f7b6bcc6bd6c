//! Talking to models. A wire format implements one streaming call
//! ([`ModelClient::stream`]); the non-streaming call is built on it. Every format
//! converts exactly to and from Chorus's one message model
//! ([`chorus_proto::domain::ChatMessage`]).

pub mod anthropic;
pub mod http;
pub mod openai;
pub mod relay;
pub mod sse;

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

/// Output limit asked for when the caller does not say (Anthropic requires one).
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    /// The model name as the provider knows it (no `ollama/` style prefix).
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSchema],
    pub max_tokens: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished its turn.
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The reply was cut off by the output limit; the loop keeps it and asks for more.
    MaxTokens,
    Other,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ModelReply {
    pub content: String,
    pub tool_calls: Vec<ToolCall>,
    pub stop: StopReason,
    pub usage: Option<Usage>,
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
    /// The conversation no longer fits the model's context window. The loop fails the
    /// run with this message (shrinking the context is the context manager's job).
    #[error("{0}")]
    ContextLength(String),
    /// Retrying cannot help: bad key, no quota, unknown model, a refused request. The
    /// run fails with this message, which names the provider and what to check.
    #[error("{0}")]
    Fatal(String),
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
