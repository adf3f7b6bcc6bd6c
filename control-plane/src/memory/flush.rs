//! Context flush: when a thread's context passes `[memory] flush_at` of its model's
//! window, its older part is summarised into the agent's daily log and leaves the
//! thread's context window (the messages stay in the database, and so in search).
//!
//! [`flush`] is the one function; the agent's actor starts it (off the actor) from
//! the one place its runs end (`AgentActor::remove_run`), whatever the backend and
//! whatever started the thread (a message, a schedule, a task). It:
//! 1. measures the thread: the input tokens its latest model call reported, or, when
//!    the provider reports none, an estimate of the messages still in its window
//!    (4 bytes a token);
//! 2. is due when that is at least `flush_at` (a fraction, so it scales from 8k to
//!    million-token models) of the model's `context_window`. A model whose window is
//!    unknown (neither configured in `[models.limits]` nor listed by its provider)
//!    never flushes;
//! 3. takes the span: the messages after the latest flushed one up to the start of
//!    the latest [`KEEP_EXCHANGES`] exchanges (kept whole: an exchange starts at a
//!    user message, so no tool result is parted from its call); an empty span does
//!    nothing;
//! 4. has the agent's worker summarise it ([`Purpose::Flush`], at most
//!    [`SUMMARY_TIME`]), or, without an answer, writes the span's user messages'
//!    first lines, which needs no model;
//! 5. writes the daily-log entry through [`super::Memory::log_flush`] with its
//!    provenance (`thread:<id> messages:<first id>-<last id>`), so it is indexed for
//!    search and sent to live runs;
//! 6. records the span in the store (`thread_flushes`): from the next run on, the
//!    assignment leaves its messages out ([`leave_out`]) and tells the model they are
//!    in its memory, where `memory_search` and `memory_get` find them; and tells the
//!    person (a `context_flushed` notification on the thread's feed).
//!
//! Never twice, never a loop: one flush of a thread at a time (the actor's set); a
//! span starts after the latest recorded one and is never empty; the store records a
//! span only past the latest; a log entry for the same thread and span (written
//! before a crash between 5 and 6) is taken instead of a second one; and a flush's
//! own write starts no run. A failure is logged and leaves the thread as it was:
//! the next run end tries again, once.

use std::time::Duration;

use chorus_proto::domain::{ChatMessage, Role};

use super::Memory;
use crate::feed::{FeedEvent, Notification, ThreadFeed};
use crate::providers::catalog::Catalog;
use crate::store::{FlushRecord, Store, StoredMessage};
use crate::summaries::{Purpose, Summarizer};

/// The latest exchanges a flush keeps in the window, whole.
pub const KEEP_EXCHANGES: usize = 2;
/// How long a flush waits for the model's summary before it writes the fallback.
pub const SUMMARY_TIME: Duration = Duration::from_secs(90);
/// Bytes a token, for a thread whose provider reports no usage.
const BYTES_PER_TOKEN: u64 = 4;
/// Most bytes of each user message's first line in the fallback summary.
const FALLBACK_LINE_BYTES: usize = 160;

/// Whether a thread of `tokens` has passed `flush_at` of `window` (`None`: the
/// window is unknown, and the thread never flushes).
pub fn due(tokens: u64, window: Option<u64>, flush_at: f64) -> bool {
    match window {
        Some(window) if window > 0 => tokens as f64 >= flush_at * window as f64,
        _ => false,
    }
}

/// A thread's size in tokens estimated from its messages' bytes.
pub fn estimate_tokens<'a>(messages: impl IntoIterator<Item = &'a ChatMessage>) -> u64 {
    let bytes: usize = messages
        .into_iter()
        .map(|m| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.name.len() + c.arguments.len())
                    .sum::<usize>()
        })
        .sum();
    (bytes as u64).div_ceil(BYTES_PER_TOKEN)
}

/// The indexes of `placed` (messages with their places, in order) a flush takes:
/// those after place `through` (the latest flushed) up to the start of the latest
/// `keep` exchanges. `None` when that is empty.
pub fn span(
    placed: &[(i64, &ChatMessage)],
    through: Option<i64>,
    keep: usize,
) -> Option<std::ops::Range<usize>> {
    let start = placed
        .iter()
        .position(|(place, _)| through.is_none_or(|t| *place > t))?;
    let mut kept = 0;
    let mut end = None;
    for (i, (_, m)) in placed.iter().enumerate().skip(start).rev() {
        if m.role == Role::User {
            kept += 1;
            if kept == keep.max(1) {
                end = Some(i);
                break;
            }
        }
    }
    let end = end?;
    (start < end).then_some(start..end)
}

/// The messages of a thread its next run is given, and the note that says what was
/// left out: those up to the latest flush are out of the window.
pub fn leave_out(
    placed: Vec<(i64, StoredMessage)>,
    flushes: &[FlushRecord],
) -> (Vec<StoredMessage>, Option<ChatMessage>) {
    let Some(latest) = flushes.last() else {
        return (placed.into_iter().map(|(_, m)| m).collect(), None);
    };
    let left: Vec<StoredMessage> = placed
        .into_iter()
        .filter(|(place, _)| *place > latest.through_position)
        .map(|(_, m)| m)
        .collect();
    let flushed: u64 = flushes.iter().map(|f| f.messages).sum();
    let entries: Vec<String> = flushes
        .iter()
        .map(|f| format!("{} mem:{}", f.log_path, f.entry_id))
        .collect();
    let note = ChatMessage::user(format!(
        "[Earlier context: the first {flushed} messages of this thread are left out here; \
         they were summarised into your memory ({}). memory_search finds what they said, \
         and memory_get reads the log.]",
        entries.join("; ")
    ));
    (left, Some(note))
}

/// The summary when no model writes one: the first line of each user message.
pub fn fallback_summary(messages: &[ChatMessage]) -> String {
    let lines: Vec<String> = messages
        .iter()
        .filter(|m| m.role == Role::User)
        .filter_map(|m| m.content.lines().find(|l| !l.trim().is_empty()))
        .map(|line| {
            let line = line.trim();
            let mut end = line.len().min(FALLBACK_LINE_BYTES);
            while !line.is_char_boundary(end) {
                end -= 1;
            }
            line[..end].to_string()
        })
        .collect();
    format!("The user asked: {}", lines.join(" / "))
}

/// What a flush works with.
pub struct Flusher<'a> {
    pub store: &'a Store,
    pub catalog: &'a Catalog,
    pub summarizer: &'a dyn Summarizer,
    pub memory: &'a Memory,
    pub feed: &'a ThreadFeed,
    /// `[memory] flush_at`.
    pub flush_at: f64,
    /// The model of agents without one of their own.
    pub default_model: Option<String>,
}

impl Flusher<'_> {
    /// Flushes the thread's older context if it is due (see the module doc): the
    /// span recorded, or `None` when nothing was to be done.
    pub async fn flush(&self, agent: &str, thread_id: u64) -> Result<Option<FlushRecord>, String> {
        let store = self.store;
        // The run's last events may still be queued to the store.
        store.flush().await;
        let Some(record) = store.active_agent(agent).await.map_err(text_of)? else {
            return Ok(None);
        };
        let Some(model) = record.model.clone().or_else(|| self.default_model.clone()) else {
            return Ok(None);
        };
        let window = match self.catalog.resolve(&model).await {
            Ok(route) => route.limits.context_window,
            Err(_) => return Ok(None), // the run that ended said why
        };
        if window.is_none() {
            return Ok(None);
        }
        let reported = store
            .latest_input_tokens(agent, thread_id)
            .await
            .map_err(text_of)?;
        // Most run ends stop here, before the thread's messages are read.
        if reported.is_some_and(|tokens| !due(tokens, window, self.flush_at)) {
            return Ok(None);
        }
        let placed = store
            .thread_messages_placed(agent, thread_id)
            .await
            .map_err(text_of)?;
        let flushes = store
            .thread_flushes(agent, thread_id)
            .await
            .map_err(text_of)?;
        let through = flushes.last().map(|f| f.through_position);
        let tokens = reported.unwrap_or_else(|| {
            estimate_tokens(
                placed
                    .iter()
                    .filter(|(place, _)| through.is_none_or(|t| *place > t))
                    .map(|(_, m)| &m.message),
            )
        });
        if !due(tokens, window, self.flush_at) {
            return Ok(None);
        }
        let refs: Vec<(i64, &ChatMessage)> = placed.iter().map(|(p, m)| (*p, &m.message)).collect();
        let Some(range) = span(&refs, through, KEEP_EXCHANGES) else {
            return Ok(None);
        };
        let taken = &placed[range];
        let (first, last) = (&taken[0], &taken[taken.len() - 1]);
        let messages: Vec<ChatMessage> = taken.iter().map(|(_, m)| m.message.clone()).collect();
        tracing::info!(
            agent,
            thread_id,
            tokens,
            window,
            messages = messages.len(),
            "flushing a thread's older context into the daily log"
        );
        let summary = tokio::time::timeout(
            SUMMARY_TIME,
            self.summarizer
                .summarize(&record, &messages, Purpose::Flush),
        )
        .await;
        let summary = match summary {
            Ok(Ok(text)) if !text.trim().is_empty() => text,
            Ok(Ok(_)) => fallback_summary(&messages),
            Ok(Err(e)) => {
                tracing::warn!(agent, thread_id, error = %e, "no summary for a context flush; the log gets the user's requests instead");
                fallback_summary(&messages)
            }
            Err(_) => {
                tracing::warn!(
                    agent,
                    thread_id,
                    "no summary for a context flush within {} s; the log gets the user's requests instead",
                    SUMMARY_TIME.as_secs()
                );
                fallback_summary(&messages)
            }
        };
        let text = format!(
            "Earlier in thread {thread_id} (messages {}-{}): {}",
            first.1.id,
            last.1.id,
            summary.trim()
        );
        let (log_path, entry_id) = self
            .memory
            .log_flush(agent, &text, thread_id, first.1.id, last.1.id)
            .await
            .map_err(|e| e.to_string())?;
        let flush = FlushRecord {
            through_position: last.0,
            first_message_id: first.1.id,
            last_message_id: last.1.id,
            messages: messages.len() as u64,
            log_path,
            entry_id,
        };
        if !store
            .record_flush(agent, thread_id, flush.clone())
            .await
            .map_err(text_of)?
        {
            return Ok(None);
        }
        let text = format!(
            "Thread {thread_id} was long: its {} older messages were summarised into {} \
             (mem:{}) and leave its context window; they stay in the thread and in search.",
            flush.messages, flush.log_path, flush.entry_id
        );
        self.feed.publish(
            agent,
            thread_id,
            FeedEvent::Notification(Notification::ContextFlushed {
                first_message_id: flush.first_message_id,
                last_message_id: flush.last_message_id,
                path: flush.log_path.clone(),
                entry_id: flush.entry_id.clone(),
                text,
            }),
        );
        Ok(Some(flush))
    }
}

fn text_of(e: crate::store::StoreError) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conversation(roles: &str) -> Vec<ChatMessage> {
        roles
            .chars()
            .map(|c| match c {
                'u' => ChatMessage::user("u"),
                _ => ChatMessage::assistant("a", vec![]),
            })
            .collect()
    }

    fn placed(messages: &[ChatMessage]) -> Vec<(i64, &ChatMessage)> {
        messages
            .iter()
            .enumerate()
            .map(|(i, m)| (i as i64 + 10, m))
            .collect()
    }

    #[test]
    fn the_threshold_is_a_fraction_of_the_window_and_an_unknown_window_never_flushes() {
        assert!(!due(749, Some(1000), 0.75));
        assert!(due(750, Some(1000), 0.75));
        // A million-token model is not flushed at an absolute size.
        assert!(!due(200_000, Some(1_000_000), 0.75));
        assert!(due(750_000, Some(1_000_000), 0.75));
        assert!(!due(u64::MAX, None, 0.75));
        assert!(!due(10, Some(0), 0.75));
        assert_eq!(estimate_tokens(&[ChatMessage::user("x".repeat(9))]), 3);
    }

    #[test]
    fn a_span_runs_from_the_last_flush_to_the_kept_exchanges_and_is_never_empty() {
        // Three exchanges (one with tool work), keep the latest two.
        let messages = conversation("uaaauaua");
        let all = placed(&messages);
        assert_eq!(span(&all, None, 2), Some(0..4));
        // Already flushed through the first exchange (places 10..=13): nothing new.
        assert_eq!(span(&all, Some(13), 2), None);
        // One more exchange later, only it is taken: never the same span twice.
        let longer = conversation("uaaauauaua");
        let all = placed(&longer);
        assert_eq!(span(&all, Some(13), 2), Some(4..6));
        // Too short to keep two exchanges and flush something: nothing.
        let short = conversation("uaua");
        assert_eq!(span(&placed(&short), None, 2), None);
        assert_eq!(span(&[], None, 2), None);
        // Flushed through the end: nothing.
        assert_eq!(span(&all, Some(100), 2), None);
    }

    #[test]
    fn the_flushed_messages_leave_the_window_with_a_note_naming_the_log() {
        let stored = |id: u64, content: &str| StoredMessage {
            id,
            message: ChatMessage::user(content),
            created_at: String::new(),
            pending: false,
        };
        let placed = vec![
            (1, stored(7, "old")),
            (2, stored(8, "older answer")),
            (3, stored(9, "new")),
        ];
        let (kept, note) = leave_out(placed.clone(), &[]);
        assert_eq!(kept.len(), 3);
        assert!(note.is_none());
        let flush = FlushRecord {
            through_position: 2,
            first_message_id: 7,
            last_message_id: 8,
            messages: 2,
            log_path: "memory/2026-11-27.md".into(),
            entry_id: "0badcafe".into(),
        };
        let (kept, note) = leave_out(placed, &[flush]);
        assert_eq!(kept.iter().map(|m| m.id).collect::<Vec<_>>(), [9]);
        let note = note.unwrap().content;
        assert!(
            note.contains("first 2 messages")
                && note.contains("memory/2026-11-27.md mem:0badcafe")
                && note.contains("memory_search"),
            "{note}"
        );
    }

    #[test]
    fn the_fallback_summary_needs_no_model() {
        let messages = vec![
            ChatMessage::user("\nplan the trip\nmore"),
            ChatMessage::assistant("sure", vec![]),
            ChatMessage::user("é".repeat(200)),
        ];
        let text = fallback_summary(&messages);
        assert!(
            text.starts_with("The user asked: plan the trip / é"),
            "{text}"
        );
        assert!(!text.contains("sure"));
    }
}
