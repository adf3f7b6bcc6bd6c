//! Titles and continuation seeding, the two things an agent's actor has its
//! model write off the actor: a new thread's title once its first run answered,
//! and the summary of what a continuation of a long ended thread leaves out, which
//! its first run waits for (`seeding`).
//!
//! A continuation whose conversation is over 256 KiB is cut to its latest whole
//! exchanges: the actor creates the thread at once with a note in its first message and
//! starts a task that asks the worker (`Summarize`); the answer, or after 90 s its
//! absence, comes back to the actor as a command (`Seeded`), the note becomes the
//! summary, and the first run is queued. Until then the thread counts as going (a reply
//! waits in it as an input; a kill ends it). A thread going without any run (a control
//! plane that stopped while it was seeded, or between creating it and queueing its run)
//! gets its first run at the next start, from the note.

use std::time::Duration;

use chorus_proto::domain::ChatMessage;

use super::{AgentActor, Command};
use crate::feed::FeedEvent;
use crate::runs::assignment::Attempt;
use crate::runs::decide;
use crate::store::{AgentRecord, StoreError};
use crate::summaries::Purpose;

/// Most bytes of an ended thread's messages a continuation starts from.
pub(super) const SEED_BYTES: usize = 256 * 1024;
/// How long a continuation waits for the summary of what it left out before it
/// starts with a note instead.
const SEED_SUMMARY_TIME: Duration = Duration::from_secs(90);
/// How long a thread's title may take before its first line stays its title.
const TITLE_TIME: Duration = Duration::from_secs(60);

impl AgentActor {
    /// Has the agent's model summarise what a continuation left out, off the
    /// actor; the answer (or its absence, after [`SEED_SUMMARY_TIME`]) comes back
    /// as [`Command::Seeded`]. Replies meanwhile wait in the store as inputs.
    pub(super) fn summarise_left_out(
        &mut self,
        agent: &AgentRecord,
        thread_id: u64,
        left_out: Vec<ChatMessage>,
    ) {
        self.seeding.insert(thread_id);
        let summarizer = self.shared.summarizer.clone();
        let itself = self.itself.clone();
        let agent = agent.clone();
        tokio::spawn(async move {
            let summary = tokio::time::timeout(
                SEED_SUMMARY_TIME,
                summarizer.summarize(&agent, &left_out, Purpose::Context),
            )
            .await;
            let summary = match summary {
                Ok(Ok(text)) if !text.trim().is_empty() => Some(text.trim().to_string()),
                Ok(Ok(_)) => None,
                Ok(Err(e)) => {
                    tracing::warn!(agent = %agent.name, thread_id, error = %e, "no summary for a continued thread; it starts with a note instead");
                    None
                }
                Err(_) => {
                    tracing::warn!(agent = %agent.name, thread_id, "no summary for a continued thread within {} s; it starts with a note instead", SEED_SUMMARY_TIME.as_secs());
                    None
                }
            };
            if let Some(itself) = itself.upgrade() {
                let _ = itself
                    .send(Command::Seeded {
                        thread_id,
                        left_out: left_out.len(),
                        summary,
                    })
                    .await;
            }
        });
    }

    /// A continuation's summary is in: it replaces the note, and the thread's
    /// first run starts unless the thread ended meanwhile (killed).
    pub(super) async fn seeded(
        &mut self,
        thread_id: u64,
        left_out: usize,
        summary: Option<String>,
    ) -> Result<(), StoreError> {
        if !self.seeding.remove(&thread_id) {
            return Ok(());
        }
        let store = &self.shared.store;
        if let Some(summary) = summary {
            let note = decide::seed_note(left_out, Some(&summary));
            store
                .set_first_message(&self.agent, thread_id, &note.content)
                .await?;
        }
        let Some(agent) = store.active_agent(&self.agent).await? else {
            return Ok(()); // destroyed meanwhile: its threads were failed then
        };
        match store.thread(&self.agent, thread_id).await? {
            Some(thread) if !thread.status.is_finished() => {
                self.queue_run(&agent, &thread, Attempt::FIRST).await
            }
            _ => Ok(()),
        }
    }

    /// A new thread's first run, which answered, is over: a task has the agent's
    /// model title it (the request's first line stays its title if that fails).
    pub(super) fn title(&self, thread_id: u64) {
        let shared = self.shared.clone();
        let agent = self.agent.clone();
        tokio::spawn(async move {
            let store = &shared.store;
            // The answer that prompted the title is queued, maybe not yet stored.
            store.flush().await;
            let (Ok(Some(record)), Ok(messages)) = (
                store.active_agent(&agent).await,
                store.thread_messages(&agent, thread_id).await,
            ) else {
                return;
            };
            let messages: Vec<ChatMessage> = messages.into_iter().map(|m| m.message).collect();
            let answer = tokio::time::timeout(
                TITLE_TIME,
                shared
                    .summarizer
                    .summarize(&record, &messages, Purpose::Title),
            )
            .await;
            let title = match answer {
                Ok(Ok(text)) => crate::sessions::summary::clean(&text),
                Ok(Err(e)) => {
                    tracing::debug!(%agent, thread_id, error = %e, "no title for the thread");
                    None
                }
                Err(_) => None,
            };
            let Some(title) = title else {
                return;
            };
            let title = title.trim_matches(|c| c == '"' || c == '\'' || c == '.');
            match store.set_thread_summary(&agent, thread_id, title).await {
                Ok(summary) => {
                    shared
                        .feed
                        .publish(&agent, thread_id, FeedEvent::Summary { summary });
                }
                Err(e) => {
                    tracing::warn!(%agent, thread_id, error = %e, "cannot store the thread's title")
                }
            }
        });
    }
}
