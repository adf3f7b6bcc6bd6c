//! Shows an agent's stored events on the live feed: the actor queues a worker's
//! event to the store's writer without waiting for the commit, and hands the
//! pending write here with what to publish. This task (one per agent actor)
//! publishes each event once its write is committed, in the order they were
//! queued.
//!
//! Invariant: nothing reaches the feed before it is in the database (an event a
//! client was shown survives a crash of the control plane); a replay the store
//! refused (already stored) is not published again; a failed write is logged and
//! not published.

use tokio::sync::mpsc;

use crate::feed::{FeedEvent, ThreadFeed};
use crate::store::Pending;

/// One stored event to show.
pub(super) struct Publication {
    pub thread_id: u64,
    pub event: FeedEvent,
}

pub(super) struct Publisher {
    queue: mpsc::UnboundedSender<(Pending<bool>, Publication)>,
}

impl Publisher {
    /// Starts the task; it ends when the publisher is dropped and its queue is
    /// drained.
    pub(super) fn start(agent: String, feed: ThreadFeed) -> Publisher {
        // Unbounded, yet bounded in practice: each entry is a write the store's
        // writer already took into its own bounded queue.
        let (queue, mut stored) = mpsc::unbounded_channel::<(Pending<bool>, Publication)>();
        tokio::spawn(async move {
            while let Some((pending, event)) = stored.recv().await {
                match pending.await {
                    Ok(true) => feed.publish(&agent, event.thread_id, event.event),
                    // A replay: stored (and published) the first time.
                    Ok(false) => {}
                    Err(e) => tracing::error!(
                        %agent,
                        thread_id = event.thread_id,
                        kind = event.event.kind(),
                        error = %e,
                        "cannot record worker event"
                    ),
                }
            }
        });
        Publisher { queue }
    }

    /// Publishes `event` once `pending` is committed.
    pub(super) fn when_stored(&self, pending: Pending<bool>, event: Publication) {
        let _ = self.queue.send((pending, event));
    }
}
