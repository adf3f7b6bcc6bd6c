//! The outgoing queue of one Discord channel (pure: time is an argument). What the
//! bot posts in a channel waits here and goes out no faster than Discord allows:
//!
//! - **Rate**: at most `limit` messages in any `window` (5 per 5 s to start with,
//!   Discord's usual per-channel bucket), and what Discord's headers say once it
//!   answers (`X-RateLimit-Limit`, `-Remaining`, `-Reset-After`).
//! - **429**: the message goes back to the front of its lane and nothing goes out
//!   until `retry_after` has passed. Nothing is retried blindly, nothing is lost.
//! - **Fairness**: each thread has its own lane, served round robin, so a thread
//!   that posts a lot cannot starve another's messages. Within a lane, order holds.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Discord's usual per-channel allowance before it says otherwise.
pub const START_LIMIT: u32 = 5;
pub const START_WINDOW: Duration = Duration::from_secs(5);

/// What a response's rate-limit headers said.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimit {
    pub limit: Option<u32>,
    pub remaining: Option<u32>,
    pub reset_after: Option<Duration>,
}

#[derive(Debug, Clone)]
struct Bucket {
    limit: u32,
    window: Duration,
    /// When the last (up to `limit`) messages went out, oldest first.
    sent: VecDeque<Instant>,
    /// Nothing goes out before this (Discord said so: a 429 or no requests left).
    blocked_until: Option<Instant>,
}

impl Bucket {
    fn ready_at(&self, now: Instant) -> Instant {
        let mut at = now;
        if let Some(until) = self.blocked_until {
            at = at.max(until);
        }
        let limit = self.limit.max(1) as usize;
        if self.sent.len() >= limit {
            at = at.max(self.sent[self.sent.len() - limit] + self.window);
        }
        at
    }

    fn take(&mut self, now: Instant) {
        self.sent.push_back(now);
        while self.sent.len() > self.limit.max(1) as usize {
            self.sent.pop_front();
        }
    }
}

/// The queue of one channel; `K` names a lane (a thread), `T` is what is sent.
#[derive(Debug, Clone)]
pub struct ChannelQueue<K, T> {
    lanes: VecDeque<(K, VecDeque<T>)>,
    bucket: Bucket,
}

impl<K: PartialEq + Clone, T> Default for ChannelQueue<K, T> {
    fn default() -> Self {
        ChannelQueue::new(START_LIMIT, START_WINDOW)
    }
}

impl<K: PartialEq + Clone, T> ChannelQueue<K, T> {
    pub fn new(limit: u32, window: Duration) -> Self {
        ChannelQueue {
            lanes: VecDeque::new(),
            bucket: Bucket {
                limit,
                window,
                sent: VecDeque::new(),
                blocked_until: None,
            },
        }
    }

    pub fn is_empty(&self) -> bool {
        self.lanes.is_empty()
    }

    pub fn len(&self) -> usize {
        self.lanes.iter().map(|(_, items)| items.len()).sum()
    }

    /// Queues `item` at the end of `lane`.
    pub fn push(&mut self, lane: K, item: T) {
        match self.lanes.iter_mut().find(|(k, _)| *k == lane) {
            Some((_, items)) => items.push_back(item),
            None => self.lanes.push_back((lane, VecDeque::from([item]))),
        }
    }

    /// When the next message may go out (`None`: nothing is waiting).
    pub fn next_at(&self, now: Instant) -> Option<Instant> {
        (!self.lanes.is_empty()).then(|| self.bucket.ready_at(now))
    }

    /// The next message, if one may go out at `now`: the front of the next lane in
    /// turn. It counts against the rate from now.
    pub fn pop(&mut self, now: Instant) -> Option<(K, T)> {
        if self.bucket.ready_at(now) > now {
            return None;
        }
        let (lane, mut items) = self.lanes.pop_front()?;
        let item = items.pop_front()?;
        if !items.is_empty() {
            self.lanes.push_back((lane.clone(), items));
        }
        self.bucket.take(now);
        Some((lane, item))
    }

    /// Discord answered a message with these headers.
    pub fn answered(&mut self, headers: RateLimit, now: Instant) {
        if let Some(limit) = headers.limit.filter(|l| *l > 0) {
            self.bucket.limit = limit;
        }
        if let (Some(0), Some(reset_after)) = (headers.remaining, headers.reset_after) {
            self.bucket.blocked_until = Some(now + reset_after);
        }
    }

    /// Discord refused `item` with a 429: it goes first again, after `retry_after`.
    pub fn rate_limited(&mut self, lane: K, item: T, retry_after: Duration, now: Instant) {
        self.bucket.blocked_until = Some(now + retry_after);
        let queued = self
            .lanes
            .iter()
            .position(|(k, _)| *k == lane)
            .and_then(|i| self.lanes.remove(i));
        match queued {
            Some((k, mut items)) => {
                items.push_front(item);
                self.lanes.push_front((k, items));
            }
            None => self.lanes.push_front((lane, VecDeque::from([item]))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends everything, as fast as the queue allows, with Discord refusing the
    /// sends whose index `refuse` names (once each); returns (time, lane, item).
    fn drain(
        queue: &mut ChannelQueue<u64, String>,
        start: Instant,
        refuse: &[usize],
    ) -> Vec<(Instant, u64, String)> {
        let mut now = start;
        let mut sent = Vec::new();
        let mut attempt = 0;
        while let Some(at) = queue.next_at(now) {
            now = at;
            let (lane, item) = queue.pop(now).expect("ready at next_at");
            if refuse.contains(&attempt) {
                queue.rate_limited(lane, item, Duration::from_millis(1500), now);
            } else {
                sent.push((now, lane, item));
            }
            attempt += 1;
        }
        sent
    }

    fn fill(queue: &mut ChannelQueue<u64, String>, lanes: u64, each: usize) {
        for lane in 0..lanes {
            for i in 0..each {
                queue.push(lane, format!("{lane}:{i}"));
            }
        }
    }

    fn never_over(sent: &[(Instant, u64, String)], limit: usize, window: Duration) {
        for (i, (t, _, _)) in sent.iter().enumerate() {
            let in_window = sent[i..]
                .iter()
                .take_while(|(u, _, _)| *u < *t + window)
                .count();
            assert!(
                in_window <= limit,
                "{in_window} sends within {window:?} from send {i}"
            );
        }
    }

    #[test]
    fn never_more_than_the_bucket_allows_in_any_window() {
        let start = Instant::now();
        let mut queue = ChannelQueue::default();
        fill(&mut queue, 3, 10);
        let sent = drain(&mut queue, start, &[]);
        assert_eq!(sent.len(), 30);
        never_over(&sent, 5, START_WINDOW);
        // And not slower than that: 30 messages in 5 windows.
        assert_eq!(sent.last().unwrap().0 - start, START_WINDOW * 5);
    }

    #[test]
    fn lanes_take_turns_and_keep_their_order() {
        let mut queue = ChannelQueue::new(100, Duration::from_secs(1));
        fill(&mut queue, 3, 4);
        queue.push(0, "0:late".into());
        let sent = drain(&mut queue, Instant::now(), &[]);
        let lanes: Vec<u64> = sent.iter().map(|(_, l, _)| *l).collect();
        assert_eq!(lanes[..9], [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        let lane0: Vec<&str> = sent
            .iter()
            .filter(|(_, l, _)| *l == 0)
            .map(|(_, _, i)| i.as_str())
            .collect();
        assert_eq!(lane0, ["0:0", "0:1", "0:2", "0:3", "0:late"]);
    }

    #[test]
    fn a_429_is_waited_out_and_nothing_is_lost_or_reordered() {
        let start = Instant::now();
        let mut queue = ChannelQueue::default();
        fill(&mut queue, 2, 6);
        let sent = drain(&mut queue, start, &[1, 7]);
        assert_eq!(sent.len(), 12, "every message, once");
        for lane in 0..2u64 {
            let items: Vec<String> = sent
                .iter()
                .filter(|(_, l, _)| *l == lane)
                .map(|(_, _, i)| i.clone())
                .collect();
            let expected: Vec<String> = (0..6).map(|i| format!("{lane}:{i}")).collect();
            assert_eq!(items, expected);
        }
        // The refused message went again only after retry_after (1.5 s).
        assert_eq!(sent[1].2, "1:0");
        assert!(sent[1].0 >= start + Duration::from_millis(1500));
        never_over(&sent, 5, START_WINDOW);
    }

    #[test]
    fn discords_headers_are_followed() {
        let start = Instant::now();
        let mut queue: ChannelQueue<u64, &str> = ChannelQueue::default();
        queue.push(1, "a");
        queue.push(1, "b");
        let (_, first) = queue.pop(start).unwrap();
        assert_eq!(first, "a");
        // Discord says: no requests left for 2.5 s.
        queue.answered(
            RateLimit {
                limit: Some(5),
                remaining: Some(0),
                reset_after: Some(Duration::from_millis(2500)),
            },
            start,
        );
        assert_eq!(
            queue.next_at(start),
            Some(start + Duration::from_millis(2500))
        );
        assert!(queue.pop(start + Duration::from_secs(1)).is_none());
        assert_eq!(
            queue
                .pop(start + Duration::from_millis(2500))
                .map(|(_, i)| i),
            Some("b")
        );
        assert!(queue.is_empty());
        assert_eq!(queue.next_at(start), None);
    }
}
