//! Messages in an agent's channel (frontend-neutral: no serenity type here). A
//! message goes to the channel's agent through the threads routing: a reply to a
//! message Chorus knows (its own answer, or a user's message) goes to that
//! message's thread, anything else starts a thread. When the thread ends, its answer
//! is posted as a reply to the user's message, split to Discord's limit, and every
//! message posted is recorded against the thread, so replies route after a restart.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use tokio::sync::broadcast::error::RecvError;

use super::access;
use super::outbox::Outbox;
use super::split::{MESSAGE_CHARS, split};
use crate::runs::{ReplyTo, Runs};
use crate::store::{Store, ThreadStatus};

/// The frontend name in `message_refs`.
pub const FRONTEND: &str = "discord";

/// A message someone wrote in a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub channel_id: u64,
    pub message_id: u64,
    pub author_id: u64,
    pub author_is_bot: bool,
    pub content: String,
    /// The message it replies to, if any.
    pub reply_to: Option<u64>,
}

pub struct Messages {
    store: Store,
    runs: Arc<Runs>,
    outbox: Arc<Outbox>,
    /// Threads whose answer a task already waits to post.
    followed: Mutex<HashSet<(String, u64)>>,
}

impl Messages {
    pub fn new(store: Store, runs: Arc<Runs>, outbox: Arc<Outbox>) -> Arc<Messages> {
        Arc::new(Messages {
            store,
            runs,
            outbox,
            followed: Mutex::new(HashSet::new()),
        })
    }

    /// Posts the feed's notifications (an idle save, a background task's end) in
    /// the channel of the agent they are about, for as long as the feed lasts.
    pub async fn post_notifications(self: Arc<Self>) {
        let mut events = self.runs.feed().subscribe();
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(
                        missed,
                        "Discord notifications fell behind the feed; some were not posted"
                    );
                    continue;
                }
                Err(RecvError::Closed) => return,
            };
            if event.kind != "notification" {
                continue;
            }
            let Some(text) = event.data["text"].as_str() else {
                continue;
            };
            let channel = match self.store.agent(&event.agent).await {
                Ok(Some(agent)) => agent.discord_channel_id.and_then(|c| c.parse::<u64>().ok()),
                _ => None,
            };
            if let Some(channel) = channel
                && let Err(e) = self.outbox.post(channel, 0, text, None).await
            {
                tracing::warn!(agent = %event.agent, error = %e, "cannot post a notification on Discord");
            }
        }
    }

    /// Routes one message; its answer is posted later by a task.
    pub async fn received(self: &Arc<Self>, incoming: Incoming) {
        if incoming.author_is_bot || incoming.content.trim().is_empty() {
            return;
        }
        let channel = incoming.channel_id.to_string();
        let agent = match self.store.agent_by_discord_channel(&channel).await {
            Ok(Some(agent)) => agent,
            Ok(None) => return, // not an agent's channel
            Err(e) => {
                tracing::error!(channel, error = %e, "cannot look up the channel's agent");
                return;
            }
        };
        // Subscribed before the message goes in, so its thread's end is not missed.
        let events = self.runs.feed().subscribe();
        let reply_to = incoming.reply_to.map(|id| ReplyTo::External {
            frontend: FRONTEND.into(),
            id: id.to_string(),
        });
        let user = access::user_id(incoming.author_id);
        let received = match self
            .runs
            .receive(&agent, &incoming.content, reply_to, &user)
            .await
        {
            Ok(received) => received,
            Err(e) => {
                tracing::error!(agent = %agent.name, error = %e, "a Discord message could not be routed");
                let _ = self
                    .outbox
                    .post(
                        incoming.channel_id,
                        0,
                        &format!("Sorry, that message could not be handled: {e}"),
                        Some(incoming.message_id),
                    )
                    .await;
                return;
            }
        };
        let thread = received.thread_id;
        // The user's own message routes to its thread too.
        if let Err(e) = self
            .store
            .record_message_ref(
                FRONTEND,
                &incoming.message_id.to_string(),
                &agent.name,
                thread,
                Some(received.message_id),
            )
            .await
        {
            tracing::warn!(agent = %agent.name, thread, error = %e, "cannot record a Discord message");
        }
        let key = (agent.name.clone(), thread);
        if !self
            .followed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone())
        {
            return; // its answer is already awaited (a reply into a going thread)
        }
        let messages = self.clone();
        tokio::spawn(async move {
            messages
                .answer_when_done(events, &agent.name, thread, &incoming)
                .await;
            messages
                .followed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&key);
        });
    }

    async fn answer_when_done(
        &self,
        mut events: tokio::sync::broadcast::Receiver<Arc<crate::feed::ThreadEvent>>,
        agent: &str,
        thread: u64,
        incoming: &Incoming,
    ) {
        loop {
            match events.recv().await {
                Ok(event) => {
                    let ended = event.agent == agent
                        && event.thread_id == Some(thread)
                        && event.kind == "status"
                        && matches!(
                            event.data["status"].as_str(),
                            Some("completed" | "failed" | "killed")
                        );
                    if ended {
                        break;
                    }
                }
                // Missed events: the stored thread says whether it ended.
                Err(RecvError::Lagged(_)) => {
                    if let Ok(Some(t)) = self.store.thread(agent, thread).await
                        && t.status.is_finished()
                    {
                        break;
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
        let text = match self.answer(agent, thread).await {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(agent, thread, error = %e, "cannot read a thread's answer");
                return;
            }
        };
        let mut reply_to = Some(incoming.message_id);
        for part in split(&text, MESSAGE_CHARS) {
            match self
                .outbox
                .post(incoming.channel_id, thread, &part, reply_to.take())
                .await
            {
                Ok(posted) => {
                    let answer_id = self.last_answer_id(agent, thread).await;
                    if let Err(e) = self
                        .store
                        .record_message_ref(FRONTEND, &posted.to_string(), agent, thread, answer_id)
                        .await
                    {
                        tracing::warn!(agent, thread, error = %e, "cannot record a posted message");
                    }
                }
                Err(e) => {
                    tracing::error!(agent, thread, error = %e, "cannot post an answer on Discord");
                    return;
                }
            }
        }
    }

    /// What to post when a thread ends: its last answer, or why it did not finish.
    async fn answer(&self, agent: &str, thread: u64) -> Result<String, crate::store::StoreError> {
        let record = self.store.thread(agent, thread).await?;
        let messages = self.store.thread_messages(agent, thread).await?;
        let last = messages
            .iter()
            .rev()
            .find(|m| {
                m.message.role == chorus_proto::domain::Role::Assistant
                    && !m.message.content.trim().is_empty()
            })
            .map(|m| m.message.content.clone());
        Ok(match record.map(|r| (r.status, r.error)) {
            Some((ThreadStatus::Completed, _)) => {
                last.unwrap_or_else(|| "(done, with no text)".into())
            }
            Some((ThreadStatus::Killed, _)) => "Thread killed.".into(),
            Some((_, error)) => format!(
                "The thread failed: {}",
                error.unwrap_or_else(|| "no reason given".into())
            ),
            None => "The thread is gone.".into(),
        })
    }

    async fn last_answer_id(&self, agent: &str, thread: u64) -> Option<u64> {
        self.store
            .thread_messages(agent, thread)
            .await
            .ok()?
            .iter()
            .rev()
            .find(|m| m.message.role == chorus_proto::domain::Role::Assistant)
            .map(|m| m.id)
    }
}
