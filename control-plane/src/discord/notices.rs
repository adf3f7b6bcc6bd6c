//! What the feed says that belongs in an agent's channel even though nobody there
//! asked: notifications (an idle save, a background task's end) and approval
//! requests with their outcome; and in the tasks channel (`[tasks] discord_channel`),
//! a task's questions to a person, its block and its end ([`TaskPosts`]). One task
//! reads the feed for as long as the Discord connection lives.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;
use tokio::sync::mpsc;

use super::approvals::ApprovalPosts;
use super::outbox::Outbox;
use super::split::{MESSAGE_CHARS, split};
use crate::feed::{FeedEvent, TaskChange};
use crate::runs::Runs;
use crate::store::Store;
use crate::tasks::TaskEventKind;
use crate::tasks::engine::Engine;

/// The tasks channel's posts. They go out one after the other, in the feed's order
/// (a question before the end it led to), from a sender of their own, so a channel
/// that is slowed down never holds up the feed.
pub struct TaskPosts {
    engine: Arc<Engine>,
    posts: mpsc::UnboundedSender<(u64, String)>,
}

impl TaskPosts {
    /// Posts into `channel` through `outbox` (which paces them and retries 429s).
    pub fn start(channel: u64, engine: Arc<Engine>, outbox: Arc<Outbox>) -> TaskPosts {
        let (posts, mut queued) = mpsc::unbounded_channel::<(u64, String)>();
        tokio::spawn(async move {
            while let Some((task, text)) = queued.recv().await {
                for part in split(&text, MESSAGE_CHARS) {
                    if let Err(e) = outbox.post(channel, task, &part, None).await {
                        tracing::warn!(task_id = task, error = %e, "cannot post a task's news on Discord");
                        break;
                    }
                }
            }
        });
        TaskPosts { engine, posts }
    }

    /// Queues what `change` says to the channel, if it says anything there.
    async fn changed(&self, change: &TaskChange) {
        if !matches!(
            change.kind,
            TaskEventKind::QuestionAsked | TaskEventKind::StatusChanged
        ) {
            return;
        }
        let task = match self.engine.board().get(change.task_id).await {
            Ok(task) => task,
            Err(e) => {
                tracing::warn!(task_id = change.task_id, error = %e, "cannot read a task to post its news");
                return;
            }
        };
        if let Some(text) = super::tasks::post_for(change, &task) {
            let _ = self.posts.send((change.task_id, text));
        }
    }
}

pub async fn watch_feed(
    store: Store,
    runs: Arc<Runs>,
    outbox: Arc<Outbox>,
    approvals: Arc<ApprovalPosts>,
    tasks: Option<TaskPosts>,
) {
    let mut events = runs.feed().subscribe();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(
                    missed,
                    "Discord notices fell behind the feed; some were not posted"
                );
                continue;
            }
            Err(RecvError::Closed) => return,
        };
        if let FeedEvent::Task(change) = &event.event {
            if let Some(tasks) = &tasks {
                tasks.changed(change).await;
            }
            continue;
        }
        if !matches!(
            event.event,
            FeedEvent::Notification(_) | FeedEvent::Approval(_) | FeedEvent::ApprovalAnswered(_)
        ) {
            continue;
        }
        let channel = match store.agent(&event.agent).await {
            Ok(Some(agent)) => agent.discord_channel_id.and_then(|c| c.parse::<u64>().ok()),
            _ => None,
        };
        let Some(channel) = channel else { continue };
        let thread = event.thread_id.unwrap_or(0);
        // Each is handled off this loop: a post waits for the channel's pace, and
        // the feed must not fall behind meanwhile.
        let (outbox, approvals) = (outbox.clone(), approvals.clone());
        tokio::spawn(async move {
            match &event.event {
                FeedEvent::Notification(notification) => {
                    if let Err(e) = outbox.post(channel, 0, notification.text(), None).await {
                        tracing::warn!(agent = %event.agent, error = %e, "cannot post a notification on Discord");
                    }
                }
                FeedEvent::Approval(asked) => {
                    approvals.asked(channel, &event.agent, thread, asked).await
                }
                FeedEvent::ApprovalAnswered(answered) => approvals.answered(thread, answered).await,
                _ => {}
            }
        });
    }
}
