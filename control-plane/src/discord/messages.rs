//! Messages in an agent's channel (frontend-neutral: no serenity type here). A
//! message goes to the channel's agent through the threads routing: a reply to a
//! message Chorus knows (its own answer, or a user's message) goes to that
//! message's thread, anything else starts a thread. When the thread ends, its answer
//! is posted as a reply to the user's message, split to Discord's limit (or
//! attached as a file when much longer), and every message posted is recorded
//! against the thread, so replies route after a restart. While the thread runs, one
//! status message shows its progress, edited in place (`status`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio::sync::broadcast::error::RecvError;

use super::access::{self, DiscordRoles};
use super::outbox::{Outbox, OutboxError, Post, Request};
use super::split::{ATTACH_AFTER_CHARS, MESSAGE_CHARS, Outgoing, plan};
use super::status::{Pacer, Progress};
use crate::feed::{FeedEvent, ThreadEvent};
use crate::gate::ToolGate;
use crate::runs::{ReplyTo, Runs};
use crate::store::{OwedAnswer, Store, ThreadStatus};

/// The frontend name in `message_refs`.
pub const FRONTEND: &str = "discord";

/// A message someone wrote in a channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Incoming {
    pub channel_id: u64,
    pub message_id: u64,
    pub author_id: u64,
    pub author_is_bot: bool,
    /// The author's Discord role ids in the guild.
    pub role_ids: Vec<String>,
    pub content: String,
    /// The message it replies to, if any.
    pub reply_to: Option<u64>,
}

pub struct Messages {
    store: Store,
    runs: Arc<Runs>,
    outbox: Arc<Outbox>,
    gate: Arc<ToolGate>,
    roles: DiscordRoles,
    /// Threads whose answer a task already waits to post.
    followed: Mutex<HashSet<(String, u64)>>,
    /// Answers being posted, by channel: a reply to a part just posted may come
    /// before that part is recorded, and waits for it (`await_posting`).
    posting: Mutex<std::collections::HashMap<u64, usize>>,
    posted: tokio::sync::Notify,
}

/// How long a reply to a message not (yet) known waits for the channel's answers
/// being posted to be recorded.
const REPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Counts an answer being posted in a channel while it lives.
struct Posting<'a> {
    messages: &'a Messages,
    channel: u64,
}

impl Drop for Posting<'_> {
    fn drop(&mut self) {
        let mut posting = self
            .messages
            .posting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = posting.get_mut(&self.channel) {
            *count -= 1;
            if *count == 0 {
                posting.remove(&self.channel);
            }
        }
        drop(posting);
        self.messages.posted.notify_waiters();
    }
}

impl Messages {
    pub fn new(
        store: Store,
        runs: Arc<Runs>,
        outbox: Arc<Outbox>,
        gate: Arc<ToolGate>,
        roles: DiscordRoles,
    ) -> Arc<Messages> {
        Arc::new(Messages {
            store,
            runs,
            outbox,
            gate,
            roles,
            followed: Mutex::new(HashSet::new()),
            posting: Mutex::new(std::collections::HashMap::new()),
            posted: tokio::sync::Notify::new(),
        })
    }

    fn start_posting(&self, channel: u64) -> Posting<'_> {
        *self
            .posting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(channel)
            .or_insert(0) += 1;
        Posting {
            messages: self,
            channel,
        }
    }

    fn posting_in(&self, channel: u64) -> usize {
        self.posting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&channel)
            .copied()
            .unwrap_or(0)
    }

    /// Waits (at most [`REPLY_WAIT`]) until no answer is being posted in `channel`,
    /// so a reply to a part posted a moment ago finds it recorded.
    async fn await_posting(&self, channel: u64) {
        let deadline = tokio::time::Instant::now() + REPLY_WAIT;
        loop {
            let notified = self.posted.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.posting_in(channel) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return;
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
        if let Some(reply_to) = incoming.reply_to {
            let known = self
                .store
                .message_ref(FRONTEND, &reply_to.to_string())
                .await
                .ok()
                .flatten()
                .is_some();
            if !known {
                self.await_posting(incoming.channel_id).await;
            }
        }
        // Subscribed before the message goes in, so its thread's end is not missed.
        let events = self.runs.feed().subscribe();
        let reply_to = incoming.reply_to.map(|id| ReplyTo::External {
            frontend: FRONTEND.into(),
            id: id.to_string(),
        });
        let user = access::user_id(incoming.author_id);
        // What the run may grant itself (a permission self-edit) follows this
        // member's Discord roles.
        self.gate
            .vouch(&user, self.roles.role_of(&incoming.role_ids));
        // The user's own message routes to its thread too, and its answer is owed:
        // both recorded before a run it starts reaches the worker, so a restart from
        // the moment the model is asked still answers it.
        let then: crate::runs::OnReceived = {
            let store = self.store.clone();
            let agent_name = agent.name.clone();
            let channel = incoming.channel_id.to_string();
            let message = incoming.message_id.to_string();
            Box::new(move |received: crate::runs::Received| {
                Box::pin(async move {
                    let thread = received.thread_id;
                    if let Err(e) = store
                        .record_message_ref(
                            FRONTEND,
                            &message,
                            &agent_name,
                            thread,
                            Some(received.message_id),
                        )
                        .await
                    {
                        tracing::warn!(agent = %agent_name, thread, error = %e, "cannot record a Discord message");
                    }
                    let owed = OwedAnswer {
                        frontend: FRONTEND.into(),
                        agent_name: agent_name.clone(),
                        thread_id: thread,
                        channel,
                        reply_to: message,
                    };
                    if let Err(e) = store.owe_answer(&owed).await {
                        tracing::warn!(agent = %agent_name, thread, error = %e, "cannot record the answer owed");
                    }
                })
            })
        };
        let received = match self
            .runs
            .receive_then(
                &agent,
                &incoming.content,
                reply_to,
                &crate::principal::Principal::person(&user),
                then,
            )
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
        self.follow(
            events,
            &agent.name,
            thread,
            incoming.channel_id,
            incoming.message_id,
        );
    }

    /// Follows the threads whose answers a stopped control plane still owed, so
    /// they are posted when those threads end (or now, when they ended meanwhile).
    pub async fn resume_owed(self: &Arc<Self>) {
        let owed = match self.store.answers_owed(FRONTEND).await {
            Ok(owed) => owed,
            Err(e) => {
                tracing::error!(error = %e, "cannot read the Discord answers still owed");
                return;
            }
        };
        if !owed.is_empty() {
            tracing::info!(
                threads = owed.len(),
                "following threads whose Discord answer is still owed"
            );
        }
        for o in owed {
            match (o.channel.parse::<u64>(), o.reply_to.parse::<u64>()) {
                (Ok(channel), Ok(reply_to)) => {
                    let events = self.runs.feed().subscribe();
                    self.follow(events, &o.agent_name, o.thread_id, channel, reply_to);
                }
                _ => {
                    let _ = self
                        .store
                        .answer_paid(FRONTEND, &o.agent_name, o.thread_id)
                        .await;
                }
            }
        }
    }

    /// Starts the task that posts `thread`'s answer, unless one already waits.
    fn follow(
        self: &Arc<Self>,
        events: tokio::sync::broadcast::Receiver<Arc<ThreadEvent>>,
        agent: &str,
        thread: u64,
        channel: u64,
        reply_to: u64,
    ) {
        let key = (agent.to_string(), thread);
        if !self
            .followed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone())
        {
            return; // its answer is already awaited (a reply into a going thread)
        }
        let messages = self.clone();
        tokio::spawn(async move {
            let (agent, thread) = &key;
            messages
                .answer_when_done(events, agent, *thread, channel, reply_to)
                .await;
            messages
                .followed
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key);
        });
    }

    /// Follows the thread until it ends, keeping its status message up to date,
    /// then posts its answer as a reply to `reply_to`; nothing is owed after.
    async fn answer_when_done(
        &self,
        mut events: tokio::sync::broadcast::Receiver<Arc<ThreadEvent>>,
        agent: &str,
        thread: u64,
        channel: u64,
        reply_to: u64,
    ) {
        let started = Instant::now();
        let mut progress = Progress::new(thread, started);
        let mut pacer = Pacer::new();
        let mut status_message: Option<u64> = None;
        // Ended before it was followed (while the control plane was down)?
        let ended_before = match self.store.thread(agent, thread).await {
            Ok(Some(t)) if t.status.is_finished() => Some(t.status.as_str().to_string()),
            Ok(Some(_)) => None,
            // Gone (its agent destroyed and purged): nothing to answer.
            Ok(None) => {
                self.paid(agent, thread).await;
                return;
            }
            Err(_) => None,
        };
        let ended = if let Some(ended) = ended_before {
            ended
        } else {
            loop {
                let due = pacer.due(started);
                tokio::select! {
                    event = events.recv() => match event {
                        Ok(event) if event.agent == agent && event.thread_id == Some(thread) => {
                            if event.is_final() {
                                break event.event.status().map_or("ended", |s| s.status.as_str()).to_string();
                            }
                            if see(&mut progress, &event) {
                                pacer.changed();
                            }
                        }
                        Ok(_) => {}
                        // Missed events: the stored thread says whether it ended.
                        Err(RecvError::Lagged(_)) => {
                            if let Ok(Some(t)) = self.store.thread(agent, thread).await
                                && t.status.is_finished()
                            {
                                break t.status.as_str().to_string();
                            }
                        }
                        Err(RecvError::Closed) => return,
                    },
                    () = tokio::time::sleep_until(due.into()) => {
                        let text = progress.running_text(Instant::now());
                        status_message = self.show_status(agent, channel, thread, status_message, &text).await;
                        pacer.shown(Instant::now());
                    }
                }
            }
        };
        if status_message.is_some() {
            let text = progress.ended_text(&ended, Instant::now());
            self.show_status(agent, channel, thread, status_message, &text)
                .await;
        }
        let text = match self.answer(agent, thread).await {
            Ok(text) => text,
            Err(e) => {
                tracing::error!(agent, thread, error = %e, "cannot read a thread's answer");
                return; // still owed: the next start tries again
            }
        };
        let posts = match plan(&text, MESSAGE_CHARS, ATTACH_AFTER_CHARS) {
            Outgoing::Parts(parts) => parts.iter().map(|p| Post::text(p)).collect(),
            Outgoing::File { preview, content } => vec![Post {
                file: Some((format!("thread-{thread}-answer.md"), content)),
                ..Post::text(&preview)
            }],
        };
        let _posting = self.start_posting(channel);
        let mut reply_to = Some(reply_to);
        for post in posts {
            let post = Post {
                reply_to: reply_to.take(),
                ..post
            };
            match self.outbox.send(channel, thread, Request::Post(post)).await {
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
                Err(OutboxError::Refused(e)) => {
                    // Refused for good (not a 429, not unreachable): asking again at
                    // every start would only be refused again.
                    tracing::error!(agent, thread, error = %e, "cannot post an answer on Discord");
                    break;
                }
                Err(OutboxError::Stopped) => {
                    // Nobody refused it: the answer stays owed, and is posted at the
                    // next start.
                    tracing::warn!(
                        agent,
                        thread,
                        "the answer stays owed: Discord's sender stopped"
                    );
                    return;
                }
            }
        }
        self.paid(agent, thread).await;
    }

    async fn paid(&self, agent: &str, thread: u64) {
        if let Err(e) = self.store.answer_paid(FRONTEND, agent, thread).await {
            tracing::warn!(agent, thread, error = %e, "cannot record a Discord answer as posted");
        }
    }

    /// Posts the thread's status message, or edits it when it is posted; returns
    /// its id (kept when an edit fails: the next one tries again).
    async fn show_status(
        &self,
        agent: &str,
        channel: u64,
        thread: u64,
        message: Option<u64>,
        text: &str,
    ) -> Option<u64> {
        let request = match message {
            None => Request::Post(Post::text(text)),
            Some(message) => Request::Edit {
                message,
                post: Post::text(text),
            },
        };
        match self.outbox.send(channel, thread, request).await {
            Ok(id) => {
                // A reply to the status message goes to its thread too.
                if message.is_none()
                    && let Err(e) = self
                        .store
                        .record_message_ref(FRONTEND, &id.to_string(), agent, thread, None)
                        .await
                {
                    tracing::warn!(agent, thread, error = %e, "cannot record a status message");
                }
                Some(id)
            }
            Err(e) => {
                tracing::warn!(thread, error = %e, "cannot show a thread's status on Discord");
                message
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

/// Takes one of the thread's events into its progress; whether it changed.
fn see(progress: &mut Progress, event: &ThreadEvent) -> bool {
    match &event.event {
        FeedEvent::StepStarted(step) => {
            progress.step = Some((step.number, step.description.clone()));
        }
        FeedEvent::StepEnded(_) => {
            progress.steps_done += 1;
            progress.step = None;
        }
        FeedEvent::Approval(_) => progress.waiting = true,
        FeedEvent::ApprovalAnswered(_) => progress.waiting = false,
        _ => return false,
    }
    true
}
