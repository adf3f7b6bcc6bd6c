//! What the feed says that belongs in an agent's channel even though nobody there
//! asked: notifications (an idle save, a background task's end) and approval
//! requests with their outcome. One task reads the feed for as long as the Discord
//! connection lives.

use std::sync::Arc;

use tokio::sync::broadcast::error::RecvError;

use super::approvals::ApprovalPosts;
use super::outbox::Outbox;
use crate::feed::FeedEvent;
use crate::runs::Runs;
use crate::store::Store;

pub async fn watch_feed(
    store: Store,
    runs: Arc<Runs>,
    outbox: Arc<Outbox>,
    approvals: Arc<ApprovalPosts>,
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
