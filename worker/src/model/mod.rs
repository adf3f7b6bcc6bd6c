//! Talking to models. A [`ModelClient`] turns one request (system prompt, messages,
//! tool schemas) into one reply; each wire format is one implementation.

pub mod openai;

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

#[derive(Debug, Clone)]
pub struct ModelRequest<'a> {
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    pub tools: &'a [ToolSchema],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopReason {
    /// The model finished its turn (it may still have asked for tools).
    EndTurn,
    /// The model asked for tools.
    ToolUse,
    /// The reply was cut off by the output limit; the loop asks it to go on.
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

/// A model call failed. Each variant says what the loop does about it.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// The provider (or the relay in front of it) refused or failed the request; the
    /// run fails with this message, which names the provider and what to check.
    #[error("{0}")]
    Provider(String),
    /// The provider could not be reached at all; the run fails.
    #[error("cannot reach the model relay at {url}: {message}")]
    Unreachable { url: String, message: String },
    /// The provider answered with something that is not a valid reply; the run fails.
    #[error("the model's reply could not be read: {0}")]
    BadReply(String),
}

/// One wire format. Implementations do no retries of their own yet (providers get
/// retry and streaming in their own change).
pub trait ModelClient: Send + Sync {
    fn complete(
        &self,
        request: &ModelRequest<'_>,
    ) -> impl std::future::Future<Output = Result<ModelReply, ModelError>> + Send;
}
