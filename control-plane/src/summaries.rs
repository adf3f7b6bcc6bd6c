//! Model-written summaries: a saved session's description, and the earlier part of
//! a long thread that a continuation starts from.
//!
//! The control plane holds no model client: a summary is one `Summarize` command to
//! the agent's own worker (its model, its relay credential), answered by exactly one
//! `Summary` event (`worker/src/summary.rs`). [`WorkerSummarizer`] pairs the two by
//! request id. Callers bound the wait themselves and fall back to something that
//! needs no model; a request whose worker died is simply never answered.
//!
//! A request carries at most 256 KiB of conversation (the first user message, a note,
//! and the latest whole exchanges); the fallbacks are the first line or the note.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use chorus_proto::domain::{ChatMessage, ControlCommand, RetryPolicy, Role, SummaryRequest};
use tokio::sync::oneshot;

use crate::providers::catalog::Catalog;
use crate::store::AgentRecord;
use crate::workers::registry::Registry;

/// What a summary is for; each has its own instruction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose {
    /// A new thread's title, from its request and the first answer.
    Title,
    /// One line that names a saved session in a list.
    Description,
    /// The earlier part of a long thread, for the model that goes on with it.
    Context,
    /// The older part of a thread that leaves its context window, for the agent's
    /// daily log (`memory::flush`).
    Flush,
}

impl Purpose {
    pub fn instruction(self) -> &'static str {
        match self {
            Purpose::Title => {
                "Write a title of at most 8 words for the task the user gives in this \
                 conversation, in the user's language. Only the title: no quotes, no preamble, \
                 no full stop."
            }
            Purpose::Description => {
                "You name saved conversations. Write one line of at most 15 words saying what \
                 the conversation is about and where it got to. No preamble, no quotes."
            }
            Purpose::Context => {
                "You condense the earlier part of a conversation between a user and a coding \
                 agent so the agent can go on without it. Write at most 300 words: the user's \
                 goals and instructions, decisions made, files and commands that matter, results \
                 so far and what was still open. Plain prose or short bullet points; no preamble."
            }
            Purpose::Flush => {
                "You keep an agent's daily log. The earlier part of this conversation is leaving \
                 the agent's context window; write what the agent needs to remember of it, in at \
                 most 200 words on one paragraph: the user's requests and facts about them, \
                 decisions, results, names, numbers and what is still open. No preamble."
            }
        }
    }
}

/// Writes summaries of conversations.
#[tonic::async_trait]
pub trait Summarizer: Send + Sync {
    async fn summarize(
        &self,
        agent: &AgentRecord,
        messages: &[ChatMessage],
        purpose: Purpose,
    ) -> Result<String, String>;
}

/// Most bytes of conversation one summary request carries (a model's context is
/// the real bound; this keeps a request well inside any of them and the link's).
pub const SUMMARY_INPUT_BYTES: usize = 256 * 1024;
/// Most bytes of the first user message kept when the middle is left out.
const FIRST_MESSAGE_BYTES: usize = 8 * 1024;

/// What a summary request carries: all of `messages` when they fit `max_bytes`;
/// otherwise the first user message (it usually states the goal, cut to
/// [`FIRST_MESSAGE_BYTES`]), a note of how many were left out, and the latest whole
/// exchanges that fit.
pub fn summary_input(messages: &[ChatMessage], max_bytes: usize) -> Vec<ChatMessage> {
    let start = crate::runs::decide::latest_fitting(messages, max_bytes);
    if start == 0 {
        return messages.to_vec();
    }
    let mut input = Vec::new();
    let mut skipped = start;
    if let Some(first) = messages.first().filter(|m| m.role == Role::User) {
        let mut end = first.content.len().min(FIRST_MESSAGE_BYTES);
        while !first.content.is_char_boundary(end) {
            end -= 1;
        }
        input.push(ChatMessage::user(&first.content[..end]));
        skipped -= 1;
    }
    input.push(ChatMessage::user(format!(
        "[{skipped} messages are left out here for length.]"
    )));
    input.extend_from_slice(&messages[start..]);
    input
}

type Waiters = Mutex<HashMap<u64, oneshot::Sender<Result<String, String>>>>;

/// Summaries written by the agent's worker.
pub struct WorkerSummarizer {
    registry: Arc<Registry>,
    catalog: Arc<Catalog>,
    default_model: Option<String>,
    retry: RetryPolicy,
    next_request: AtomicU64,
    waiting: Arc<Waiters>,
}

impl WorkerSummarizer {
    pub fn new(
        registry: Arc<Registry>,
        catalog: Arc<Catalog>,
        default_model: Option<String>,
        retry: RetryPolicy,
    ) -> Self {
        WorkerSummarizer {
            registry,
            catalog,
            default_model,
            retry,
            next_request: AtomicU64::new(1),
            waiting: Arc::default(),
        }
    }

    /// A worker's `Summary` event: the answer to the request that waits for it. An
    /// answer nobody waits for any more (the caller gave up) is dropped.
    pub fn answered(&self, request_id: u64, result: Result<String, String>) {
        let waiter = self
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&request_id);
        if let Some(waiter) = waiter {
            let _ = waiter.send(result);
        }
    }

    /// Requests waiting for an answer (for tests and diagnostics).
    pub fn waiting(&self) -> usize {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

/// Removes a request's waiter however its caller ends (answer, timeout, drop).
struct Waiting {
    waiting: Arc<Waiters>,
    request_id: u64,
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.request_id);
    }
}

#[tonic::async_trait]
impl Summarizer for WorkerSummarizer {
    async fn summarize(
        &self,
        agent: &AgentRecord,
        messages: &[ChatMessage],
        purpose: Purpose,
    ) -> Result<String, String> {
        let model = agent
            .model
            .clone()
            .or_else(|| self.default_model.clone())
            .ok_or_else(|| format!("agent '{}' has no model to write a summary", agent.name))?;
        let route = self
            .catalog
            .resolve(&model)
            .await
            .map_err(|e| e.to_string())?;
        let (_, sender) = self
            .registry
            .sender(&agent.name)
            .ok_or_else(|| format!("agent '{}' has no connected worker", agent.name))?;
        let request_id = self.next_request.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(request_id, tx);
        let _waiting = Waiting {
            waiting: self.waiting.clone(),
            request_id,
        };
        let request = SummaryRequest {
            request_id,
            model: route,
            instruction: purpose.instruction().to_string(),
            messages: summary_input(messages, SUMMARY_INPUT_BYTES),
            retry: self.retry,
        };
        sender
            .send(ControlCommand::Summarize(Box::new(request)))
            .map_err(|_| format!("agent '{}''s worker disconnected", agent.name))?;
        rx.await
            .map_err(|_| "the summary request was dropped".to_string())?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_conversation_is_summarised_from_its_goal_and_its_latest_exchanges() {
        let messages = vec![
            ChatMessage::user("the goal"),
            ChatMessage::assistant("x".repeat(100), vec![]),
            ChatMessage::user("middle"),
            ChatMessage::assistant("y".repeat(100), vec![]),
            ChatMessage::user("latest"),
            ChatMessage::assistant("done", vec![]),
        ];
        assert_eq!(summary_input(&messages, 10_000), messages);
        let input = summary_input(&messages, 20);
        let contents: Vec<&str> = input.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(
            contents,
            [
                "the goal",
                "[3 messages are left out here for length.]",
                "latest",
                "done"
            ]
        );
        // A long first message is cut on a character boundary.
        let long = vec![
            ChatMessage::user("é".repeat(FIRST_MESSAGE_BYTES)),
            ChatMessage::user("latest"),
        ];
        let input = summary_input(&long, 10);
        assert!(input[0].content.len() <= FIRST_MESSAGE_BYTES);
        assert_eq!(input.last().unwrap().content, "latest");
    }
}
