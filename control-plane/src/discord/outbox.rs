//! Everything the bot posts goes through here: one task per channel owns that
//! channel's [`ChannelQueue`] and sends in its order and at its pace. A 429 puts the
//! message first again after `retry_after`; nothing is retried blindly and nothing
//! is dropped. The HTTP call itself is a [`Transport`], so the task is tested
//! without Discord.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, oneshot};

use super::queue::{ChannelQueue, RateLimit};

/// How a send went.
#[derive(Debug, Clone, PartialEq)]
pub enum Sent {
    /// Posted: the new message's id, and the rate-limit headers.
    Posted { id: u64, rate: RateLimit },
    /// 429: try again after this long.
    RateLimited {
        retry_after: Duration,
        rate: RateLimit,
    },
    /// Refused for good (the reason); not retried.
    Failed(String),
}

/// One message as the bot sends it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Post {
    pub content: String,
    /// The message it replies to.
    pub reply_to: Option<u64>,
    /// Discord's `components` (buttons); `Some(empty)` removes them on an edit.
    pub components: Option<serde_json::Value>,
    /// A file attached to it: (name, contents).
    pub file: Option<(String, String)>,
}

impl Post {
    pub fn text(content: &str) -> Post {
        Post {
            content: content.to_string(),
            ..Post::default()
        }
    }
}

/// What the bot asks of a channel.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// A new message.
    Post(Post),
    /// A change to a message the bot posted.
    Edit { message: u64, post: Post },
}

/// Sends one request (Discord's REST API, or a test double).
#[tonic::async_trait]
pub trait Transport: Send + Sync + 'static {
    async fn send(&self, channel: u64, request: &Request) -> Sent;
}

/// Why a request was not taken by Discord; the caller decides on the variant.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OutboxError {
    /// Discord refused it (or its answer made no sense): sending it again would be
    /// refused again.
    #[error("{0}")]
    Refused(String),
    /// The channel's sender stopped before Discord answered (a failure inside
    /// Chorus, or Chorus stopping): what was owed is still owed.
    #[error("the channel's sender stopped before Discord answered")]
    Stopped,
}

/// A request waiting its turn, with the caller waiting for its answer.
struct Queued {
    request: Request,
    done: oneshot::Sender<Result<u64, OutboxError>>,
}

/// The senders of every channel, each started on first use.
pub struct Outbox {
    transport: Arc<dyn Transport>,
    channels: Mutex<HashMap<u64, mpsc::UnboundedSender<(u64, Queued)>>>,
}

impl Outbox {
    pub fn new(transport: Arc<dyn Transport>) -> Arc<Outbox> {
        Arc::new(Outbox {
            transport,
            channels: Mutex::new(HashMap::new()),
        })
    }

    /// Queues `content` for `channel` in `lane` (a thread) and waits until it is
    /// posted; returns the posted message's id.
    pub async fn post(
        &self,
        channel: u64,
        lane: u64,
        content: &str,
        reply_to: Option<u64>,
    ) -> Result<u64, OutboxError> {
        let post = Post {
            reply_to,
            ..Post::text(content)
        };
        self.send(channel, lane, Request::Post(post)).await
    }

    /// Queues `request` for `channel` in `lane` and waits until Discord took it;
    /// returns the id of the message posted or edited.
    pub async fn send(
        &self,
        channel: u64,
        lane: u64,
        request: Request,
    ) -> Result<u64, OutboxError> {
        let (done, posted) = oneshot::channel();
        let mut queued = (lane, Queued { request, done });
        // A sender that stopped (it panicked) is replaced once, so one failure
        // does not silence the channel until the next start.
        for _ in 0..2 {
            let sender = {
                let mut channels = self
                    .channels
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let sender = channels.entry(channel).or_insert_with(|| {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(drive(channel, self.transport.clone(), rx));
                    tx
                });
                if sender.is_closed() {
                    let (tx, rx) = mpsc::unbounded_channel();
                    tokio::spawn(drive(channel, self.transport.clone(), rx));
                    *sender = tx;
                }
                sender.clone()
            };
            match sender.send(queued) {
                Ok(()) => return posted.await.map_err(|_| OutboxError::Stopped)?,
                Err(mpsc::error::SendError(back)) => queued = back,
            }
        }
        Err(OutboxError::Stopped)
    }
}

/// One channel's sender: the only owner of its queue.
async fn drive(
    channel: u64,
    transport: Arc<dyn Transport>,
    mut incoming: mpsc::UnboundedReceiver<(u64, Queued)>,
) {
    let mut queue: ChannelQueue<u64, Queued> = ChannelQueue::default();
    loop {
        let next = queue.next_at(Instant::now());
        tokio::select! {
            queued = incoming.recv() => match queued {
                Some((lane, queued)) => queue.push(lane, queued),
                None if queue.is_empty() => return,
                None => {}
            },
            _ = sleep_until(next), if next.is_some() => {
                let now = Instant::now();
                let Some((lane, queued)) = queue.pop(now) else { continue };
                match transport.send(channel, &queued.request).await {
                    Sent::Posted { id, rate } => {
                        queue.answered(rate, Instant::now());
                        let _ = queued.done.send(Ok(id));
                    }
                    Sent::RateLimited { retry_after, rate } => {
                        tracing::warn!(channel, ?retry_after, "Discord rate limit; waiting it out");
                        queue.answered(rate, Instant::now());
                        queue.rate_limited(lane, queued, retry_after, Instant::now());
                    }
                    Sent::Failed(reason) => {
                        tracing::error!(channel, %reason, "Discord refused a message");
                        let _ = queued.done.send(Err(OutboxError::Refused(reason)));
                    }
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    if let Some(at) = at {
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Panics on the first request (a bug inside Chorus), refuses "no", posts the rest.
    struct Fragile {
        calls: Mutex<u32>,
    }

    #[tonic::async_trait]
    impl Transport for Fragile {
        async fn send(&self, _channel: u64, request: &Request) -> Sent {
            let first = {
                let mut calls = self.calls.lock().unwrap();
                *calls += 1;
                *calls == 1
            };
            assert!(!first, "the sender's first request dies with it");
            let rate = RateLimit {
                limit: None,
                remaining: None,
                reset_after: None,
            };
            match request {
                Request::Post(Post { content, .. }) if content == "no" => {
                    Sent::Failed("Discord answered 400: no".into())
                }
                _ => Sent::Posted { id: 7, rate },
            }
        }
    }

    /// A sender that stopped is told apart from a refusal (what was owed stays
    /// owed), and the channel gets a new sender instead of staying silent.
    #[tokio::test]
    async fn a_stopped_sender_is_not_a_refusal_and_the_channel_goes_on() {
        let outbox = Outbox::new(Arc::new(Fragile {
            calls: Mutex::new(0),
        }));
        assert_eq!(
            outbox.post(1, 0, "lost", None).await,
            Err(OutboxError::Stopped)
        );
        assert_eq!(outbox.post(1, 0, "again", None).await, Ok(7));
        assert_eq!(
            outbox.post(1, 0, "no", None).await,
            Err(OutboxError::Refused("Discord answered 400: no".into()))
        );
    }

    /// Refuses the first `refuse` posts with a 429, then posts; records the order.
    struct Recorder {
        refuse: Mutex<u32>,
        posted: Mutex<Vec<String>>,
    }

    #[tonic::async_trait]
    impl Transport for Recorder {
        async fn send(&self, _channel: u64, request: &Request) -> Sent {
            let Request::Post(Post { content, .. }) = request else {
                return Sent::Failed("only posts here".into());
            };
            let no_rate = RateLimit {
                limit: None,
                remaining: None,
                reset_after: None,
            };
            {
                let mut refuse = self.refuse.lock().unwrap();
                if *refuse > 0 {
                    *refuse -= 1;
                    return Sent::RateLimited {
                        retry_after: Duration::from_millis(50),
                        rate: no_rate,
                    };
                }
            }
            let mut posted = self.posted.lock().unwrap();
            posted.push(content.to_string());
            Sent::Posted {
                id: posted.len() as u64,
                rate: no_rate,
            }
        }
    }

    #[tokio::test]
    async fn a_429_is_waited_out_and_every_message_is_posted_once_in_order() {
        let recorder = Arc::new(Recorder {
            refuse: Mutex::new(2),
            posted: Mutex::new(Vec::new()),
        });
        let outbox = Outbox::new(recorder.clone());
        let sends = (0..4).map(|i| {
            let outbox = outbox.clone();
            async move { outbox.post(1, 7, &format!("part {i}"), None).await }
        });
        // Sent one after another, as a thread's parts are.
        let mut ids = Vec::new();
        for send in sends {
            ids.push(send.await.unwrap());
        }
        assert_eq!(ids, [1, 2, 3, 4]);
        assert_eq!(
            *recorder.posted.lock().unwrap(),
            ["part 0", "part 1", "part 2", "part 3"]
        );
    }
}
