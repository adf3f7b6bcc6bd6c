//! Descriptions of saved sessions: a model-written one ([`crate::summaries`]) made
//! into one line, and the first-line fallback, which never fails.

use chorus_proto::domain::{ChatMessage, Role};

use crate::store::AgentRecord;
pub use crate::summaries::{Purpose, Summarizer};

/// The longest description kept, in characters.
pub const MAX_DESCRIPTION_CHARS: usize = 200;
/// The first-line fallback is at most this long.
pub const FIRST_LINE_CHARS: usize = 80;

/// The first line of the first user message (at most [`FIRST_LINE_CHARS`]).
pub struct FirstLineSummarizer;

#[tonic::async_trait]
impl Summarizer for FirstLineSummarizer {
    async fn summarize(
        &self,
        _agent: &AgentRecord,
        messages: &[ChatMessage],
        _purpose: Purpose,
    ) -> Result<String, String> {
        Ok(first_line(messages))
    }
}

/// The first non-blank line of the first user message, cut to
/// [`FIRST_LINE_CHARS`]; when there is none, a count of the messages.
pub fn first_line(messages: &[ChatMessage]) -> String {
    messages
        .iter()
        .filter(|m| m.role == Role::User)
        .find_map(|m| m.content.lines().map(str::trim).find(|l| !l.is_empty()))
        .map(|line| line.chars().take(FIRST_LINE_CHARS).collect::<String>())
        .map(|line| line.trim_end().to_string())
        .unwrap_or_else(|| format!("Conversation of {} messages", messages.len()))
}

/// A summarizer's answer as a description: one line (its lines joined), trimmed,
/// at most [`MAX_DESCRIPTION_CHARS`]; `None` when nothing is left.
pub fn clean(text: &str) -> Option<String> {
    let joined = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let cut: String = joined.chars().take(MAX_DESCRIPTION_CHARS).collect();
    let cut = cut.trim().to_string();
    (!cut.is_empty()).then_some(cut)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_line_of_the_first_user_message() {
        let messages = [
            ChatMessage::assistant("hello", vec![]),
            ChatMessage::user("\n  Refactor the auth module  \nwith JWT"),
            ChatMessage::user("second"),
        ];
        assert_eq!(first_line(&messages), "Refactor the auth module");
        let long = [ChatMessage::user("é".repeat(200))];
        assert_eq!(first_line(&long).chars().count(), FIRST_LINE_CHARS);
        assert_eq!(
            first_line(&[ChatMessage::assistant("x", vec![])]),
            "Conversation of 1 messages"
        );
    }

    #[test]
    fn a_summary_becomes_one_bounded_line() {
        assert_eq!(
            clean("  Did A.\n\n Then B. \n").as_deref(),
            Some("Did A. Then B.")
        );
        assert_eq!(clean(" \n "), None);
        assert_eq!(
            clean(&"x".repeat(500)).unwrap().chars().count(),
            MAX_DESCRIPTION_CHARS
        );
    }
}
