//! The live feed of thread events: threads created, steps as they start and end,
//! streamed model text, messages, approvals, and each status; and of agent events
//! that belong to no thread (`notification`: an idle save, a job's end, a schedule paused; `task`: an event of a
//! task's history). Frontends subscribe to
//! one thread (`…/threads/{id}/events`) or to everything (`GET /api/events`).
//!
//! Every event has an id, `<boot>.<seq>`: `boot` names this start of the control
//! plane, `seq` counts up from 1 without gaps. The most recent events are kept in a
//! ring bounded by count and bytes, so a client that reconnects with `Last-Event-ID`
//! gets exactly what it missed, once; when the gap is older than the ring (or from
//! an earlier start), it is told to re-read instead (`Replay::Reset`).
//!
//! Invariant: an event is in the ring and sent to subscribers under one lock, so a
//! subscriber that takes the ring's tail and subscribes under that lock sees every
//! later event exactly once. Nothing here is stored: the store is the durable record.
//! What an event says is typed ([`FeedEvent`], in `event`).
//!
//! The wire JSON of every kind is checked against output recorded before it was typed
//! (`tests/fixtures/feed_events.json`).

mod event;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_proto::domain::StepKind;
use serde_json::Value;
use tokio::sync::broadcast;

pub use event::{
    AgentChange, AgentChangeKind, Answer, ApprovalAnswered, ApprovalAsked, FeedEvent, Notification,
    StatusChange, StatusDetail, StepEnded, StepStarted, TaskChange, TaskDeleted, ThreadCreated,
    ThreadOrigin,
};

/// One event of one thread, or of an agent (`thread_id` `None`).
#[derive(Debug, Clone)]
pub struct ThreadEvent {
    /// `<boot>.<seq>`, unique and increasing within one start of the control plane.
    pub id: String,
    pub agent: String,
    pub thread_id: Option<u64>,
    /// What happened; an agent's events (no thread) are notifications.
    pub event: FeedEvent,
}

impl ThreadEvent {
    /// Whether this is the thread's last event (its final status).
    pub fn is_final(&self) -> bool {
        self.event.is_final()
    }

    /// The event's kind, as the SSE event name.
    pub fn kind(&self) -> &'static str {
        self.event.kind()
    }

    /// The event's data with the agent and thread it belongs to, as `GET
    /// /api/events` sends it.
    pub fn data_with_origin(&self) -> Value {
        let mut data = self.event.data();
        data["agent"] = Value::from(self.agent.clone());
        data["thread_id"] = Value::from(self.thread_id);
        data
    }
}

/// The text a thread's model is streaming in its open step ([`ThreadFeed::streaming`]).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Streaming {
    /// The feed's position when the text was read: later `text` events follow it.
    pub event_id: String,
    /// The model step the text belongs to.
    pub step: u32,
    pub text: String,
}

/// What a subscriber that names the last event it saw gets first.
#[derive(Debug)]
pub enum Replay {
    /// Every event after the one named, in order (none when it was the newest).
    Missed(Vec<Arc<ThreadEvent>>),
    /// The events after the one named are no longer kept (or it is from an earlier
    /// start, or unknown): the subscriber must re-read what it shows.
    Reset(String),
}

/// How much of the recent past the feed keeps for reconnecting subscribers.
#[derive(Debug, Clone, Copy)]
pub struct RingLimits {
    pub events: usize,
    pub bytes: usize,
}

impl Default for RingLimits {
    fn default() -> Self {
        RingLimits {
            events: 10_000,
            bytes: 16 << 20,
        }
    }
}

struct Ring {
    next_seq: u64,
    events: VecDeque<(u64, usize, Arc<ThreadEvent>)>,
    bytes: usize,
}

#[derive(Clone)]
pub struct ThreadFeed {
    boot: Arc<str>,
    limits: RingLimits,
    ring: Arc<Mutex<Ring>>,
    sender: broadcast::Sender<Arc<ThreadEvent>>,
}

/// Events a slow live subscriber may fall behind by before it is told it lagged.
const CAPACITY: usize = 4096;

impl Default for ThreadFeed {
    fn default() -> Self {
        ThreadFeed::new(RingLimits::default())
    }
}

impl ThreadFeed {
    pub fn new(limits: RingLimits) -> Self {
        // Distinct for each start, so an id from an earlier one is never mistaken.
        let boot = format!("{:x}", chrono::Utc::now().timestamp_millis());
        ThreadFeed {
            boot: boot.into(),
            limits,
            ring: Arc::new(Mutex::new(Ring {
                next_seq: 1,
                events: VecDeque::new(),
                bytes: 0,
            })),
            sender: broadcast::Sender::new(CAPACITY),
        }
    }

    fn ring(&self) -> MutexGuard<'_, Ring> {
        self.ring
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn publish(&self, agent: &str, thread_id: u64, event: FeedEvent) {
        self.publish_event(agent, Some(thread_id), event);
    }

    /// An event of the agent that belongs to no thread (its `thread_id` is null).
    pub fn publish_agent(&self, agent: &str, notification: Notification) {
        self.publish_event(agent, None, FeedEvent::Notification(notification));
    }

    /// An event of a task's history, under the agent it concerns (no thread).
    pub fn publish_task(&self, agent: &str, change: TaskChange) {
        self.publish_event(agent, None, FeedEvent::Task(change));
    }

    /// A task was deleted, under the agent it concerned (no thread).
    pub fn publish_task_deleted(&self, agent: &str, task_id: u64, by: &str) {
        let by = by.to_string();
        self.publish_event(
            agent,
            None,
            FeedEvent::TaskDeleted(TaskDeleted { task_id, by }),
        );
    }

    /// The agent was created, configured or destroyed (no thread).
    pub fn publish_agent_change(&self, agent: &str, change: AgentChangeKind, by: &str) {
        let by = by.to_string();
        self.publish_event(agent, None, FeedEvent::Agent(AgentChange { change, by }));
    }

    /// The agent's worker is now as `status` says (no thread).
    pub fn publish_worker(&self, agent: &str, status: crate::workers::WorkerStatus) {
        self.publish_event(agent, None, FeedEvent::Worker(status));
    }

    fn publish_event(&self, agent: &str, thread_id: Option<u64>, event: FeedEvent) {
        let size = agent.len() + serde_json::to_string(&event).map_or(0, |s| s.len()) + 64;
        let mut ring = self.ring();
        let seq = ring.next_seq;
        ring.next_seq += 1;
        let event = Arc::new(ThreadEvent {
            id: format!("{}.{seq}", self.boot),
            agent: agent.to_string(),
            thread_id,
            event,
        });
        ring.events.push_back((seq, size, event.clone()));
        ring.bytes += size;
        while ring.events.len() > self.limits.events
            || (ring.bytes > self.limits.bytes && ring.events.len() > 1)
        {
            if let Some((_, size, _)) = ring.events.pop_front() {
                ring.bytes -= size;
            }
        }
        // No subscribers is the common case and not an error.
        let _ = self.sender.send(event);
    }

    /// The newest event's id (`<boot>.0` before the first). A front end that takes
    /// it, then reads what it shows from the store, then subscribes after it, misses
    /// nothing (and may see again what the store already had: it applies events by
    /// their ids).
    pub fn position(&self) -> String {
        format!("{}.{}", self.boot, self.ring().next_seq - 1)
    }

    /// What `thread_id`'s model is streaming now: the text of its newest model step
    /// that has not ended (the `text` events since that step's `step_started`,
    /// joined), with the feed's position when it was read. A page shows this text,
    /// then appends only the `text` events after `event_id`, so nothing streamed is
    /// lost or shown twice. `None` when no model step of the thread is open (or its
    /// start is no longer in the ring).
    pub fn streaming(&self, agent: &str, thread_id: u64) -> Option<Streaming> {
        let ring = self.ring();
        let mut open: Option<(u32, String)> = None;
        for (_, _, event) in ring.events.iter() {
            if event.thread_id != Some(thread_id) || event.agent != agent {
                continue;
            }
            match &event.event {
                FeedEvent::StepStarted(started) if started.kind == StepKind::LlmCall => {
                    open = Some((started.number, String::new()));
                }
                FeedEvent::StepEnded(ended)
                    if open.as_ref().is_some_and(|(step, _)| *step == ended.number) =>
                {
                    open = None;
                }
                FeedEvent::Text { step, text } => match open.as_mut() {
                    Some((open_step, streamed)) if open_step == step => streamed.push_str(text),
                    _ => {}
                },
                event if event.is_final() => open = None,
                _ => {}
            }
        }
        open.map(|(step, text)| Streaming {
            event_id: format!("{}.{}", self.boot, ring.next_seq - 1),
            step,
            text,
        })
    }

    /// Live events from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<ThreadEvent>> {
        self.sender.subscribe()
    }

    /// How many live subscribers there are (front ends' own included).
    pub fn subscribers(&self) -> usize {
        self.sender.receiver_count()
    }

    /// Live events after the one with id `last` (what was missed first, from the
    /// ring, then live, with nothing lost or repeated in between).
    pub fn subscribe_after(&self, last: &str) -> (Replay, broadcast::Receiver<Arc<ThreadEvent>>) {
        let ring = self.ring();
        let receiver = self.sender.subscribe();
        (self.replay(&ring, last), receiver)
    }

    fn replay(&self, ring: &Ring, last: &str) -> Replay {
        let Some((boot, seq)) = last.split_once('.') else {
            return Replay::Reset(format!("'{last}' is not an event id of this feed"));
        };
        let Ok(seq) = seq.parse::<u64>() else {
            return Replay::Reset(format!("'{last}' is not an event id of this feed"));
        };
        if boot != &*self.boot {
            return Replay::Reset(
                "the control plane restarted since that event; re-read what you show".into(),
            );
        }
        if seq >= ring.next_seq {
            return Replay::Reset(format!("no event '{last}' was sent yet"));
        }
        let oldest = ring.events.front().map_or(ring.next_seq, |(s, _, _)| *s);
        if seq + 1 < oldest {
            return Replay::Reset(format!(
                "{} events after '{last}' are no longer kept; re-read what you show",
                oldest - seq - 1
            ));
        }
        Replay::Missed(
            ring.events
                .iter()
                .filter(|(s, _, _)| *s > seq)
                .map(|(_, _, e)| e.clone())
                .collect(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::ChatMessage;

    fn text(i: u32) -> FeedEvent {
        FeedEvent::Text {
            step: 1,
            text: i.to_string(),
        }
    }

    fn ids(events: &[Arc<ThreadEvent>]) -> Vec<String> {
        events.iter().map(|e| e.id.clone()).collect()
    }

    #[test]
    fn a_reconnect_gets_what_it_missed_once_then_live_events() {
        let feed = ThreadFeed::default();
        for i in 0..5 {
            feed.publish("a", 1, text(i));
        }
        let boot = feed.boot.to_string();
        let (replay, mut live) = feed.subscribe_after(&format!("{boot}.2"));
        let Replay::Missed(missed) = replay else {
            panic!("{replay:?}")
        };
        assert_eq!(
            ids(&missed),
            [3, 4, 5].map(|n| format!("{boot}.{n}")).to_vec()
        );
        feed.publish("a", 1, text(5));
        assert_eq!(live.try_recv().unwrap().id, format!("{boot}.6"));
        assert!(live.try_recv().is_err(), "nothing twice");

        // The newest id: nothing missed.
        let (replay, _) = feed.subscribe_after(&format!("{boot}.6"));
        assert!(matches!(replay, Replay::Missed(m) if m.is_empty()));
    }

    #[test]
    fn a_subscriber_after_the_position_gets_every_later_event() {
        let feed = ThreadFeed::default();
        let before = feed.position();
        assert!(before.ends_with(".0"), "{before}");
        let (replay, _) = feed.subscribe_after(&before);
        assert!(
            matches!(replay, Replay::Missed(ref m) if m.is_empty()),
            "{replay:?}"
        );
        feed.publish("a", 1, text(1));
        let mid = feed.position();
        feed.publish("a", 1, text(2));
        let Replay::Missed(missed) = feed.subscribe_after(&before).0 else {
            panic!("a reset");
        };
        assert_eq!(missed.len(), 2);
        let Replay::Missed(missed) = feed.subscribe_after(&mid).0 else {
            panic!("a reset");
        };
        assert_eq!(ids(&missed), [feed.position()]);
    }

    #[test]
    fn a_gap_older_than_the_ring_or_another_start_is_a_reset() {
        let feed = ThreadFeed::new(RingLimits {
            events: 3,
            bytes: 1 << 20,
        });
        for i in 0..10 {
            feed.publish("a", 1, text(i));
        }
        let boot = feed.boot.to_string();
        // 8, 9, 10 are kept: after 7 is whole, after 6 is not.
        assert!(
            matches!(feed.subscribe_after(&format!("{boot}.7")).0, Replay::Missed(m) if m.len() == 3)
        );
        let (replay, _) = feed.subscribe_after(&format!("{boot}.6"));
        assert!(
            matches!(&replay, Replay::Reset(why) if why.contains("1 events after")),
            "{replay:?}"
        );
        for bad in [
            "0.1",
            "nonsense",
            &format!("{boot}.x"),
            &format!("{boot}.99"),
        ] {
            assert!(
                matches!(feed.subscribe_after(bad).0, Replay::Reset(_)),
                "{bad}"
            );
        }
    }

    #[test]
    fn the_ring_is_bounded_by_bytes_too() {
        let feed = ThreadFeed::new(RingLimits {
            events: 1000,
            bytes: 10_000,
        });
        for _ in 0..100 {
            feed.publish(
                "a",
                1,
                FeedEvent::Message(ChatMessage::assistant("x".repeat(1000), Vec::new())),
            );
        }
        let ring = feed.ring();
        assert!(ring.bytes <= 10_000, "{}", ring.bytes);
        assert!(ring.events.len() < 10);
        assert_eq!(ring.next_seq, 101);
    }

    #[test]
    fn agent_events_have_no_thread_and_share_the_sequence() {
        let feed = ThreadFeed::default();
        let mut live = feed.subscribe();
        feed.publish(
            "a",
            3,
            FeedEvent::Status(StatusChange::new(
                crate::store::ThreadStatus::Completed,
                None,
            )),
        );
        feed.publish_agent(
            "a",
            Notification::IdleSave {
                session_id: "s".into(),
                description: "d".into(),
                text: "t".into(),
            },
        );
        let first = live.try_recv().unwrap();
        let second = live.try_recv().unwrap();
        assert_eq!(first.thread_id, Some(3));
        assert_eq!((second.thread_id, second.kind()), (None, "notification"));
        assert!(!second.is_final());
        assert_eq!(seq_of(&second.id), seq_of(&first.id) + 1);
    }

    fn started(number: u32, kind: StepKind) -> FeedEvent {
        FeedEvent::StepStarted(StepStarted {
            number,
            kind,
            description: "d".into(),
            started_at: String::new(),
            runs_in: None,
        })
    }

    fn ended(number: u32) -> FeedEvent {
        FeedEvent::StepEnded(StepEnded {
            number,
            duration_ms: 1,
            failed: false,
            usage: None,
        })
    }

    fn streamed(step: u32, text: &str) -> FeedEvent {
        FeedEvent::Text {
            step,
            text: text.into(),
        }
    }

    #[test]
    fn streaming_is_the_open_model_steps_text_and_the_position_it_was_read_at() {
        let feed = ThreadFeed::default();
        assert_eq!(feed.streaming("a", 1), None, "nothing yet");
        feed.publish("a", 1, started(1, StepKind::LlmCall));
        assert_eq!(
            feed.streaming("a", 1).map(|s| (s.step, s.text)),
            Some((1, String::new())),
            "a model step that streamed nothing yet"
        );
        feed.publish("a", 1, streamed(1, "Hel"));
        // Another thread's and another agent's text is not mixed in.
        feed.publish("a", 2, started(1, StepKind::LlmCall));
        feed.publish("a", 2, streamed(1, "other"));
        feed.publish("b", 1, started(1, StepKind::LlmCall));
        feed.publish("b", 1, streamed(1, "agent b"));
        feed.publish("a", 1, streamed(1, "lo"));
        let now = feed.streaming("a", 1).unwrap();
        assert_eq!((now.step, now.text.as_str()), (1, "Hello"));
        assert_eq!(now.event_id, feed.position());
        assert_eq!(feed.streaming("a", 2).unwrap().text, "other");
        assert_eq!(feed.streaming("b", 1).unwrap().text, "agent b");

        // An ended step's text is not returned; a tool step streams nothing.
        feed.publish("a", 1, ended(1));
        assert_eq!(feed.streaming("a", 1), None);
        feed.publish("a", 1, started(2, StepKind::Tool));
        assert_eq!(feed.streaming("a", 1), None);
        feed.publish("a", 1, ended(2));

        // A later step replaces an earlier one.
        feed.publish("a", 1, started(3, StepKind::LlmCall));
        feed.publish("a", 1, streamed(3, "Second"));
        let now = feed.streaming("a", 1).unwrap();
        assert_eq!((now.step, now.text.as_str()), (3, "Second"));
        // A thread's final status closes whatever was open.
        feed.publish(
            "a",
            1,
            FeedEvent::Status(StatusChange::new(crate::store::ThreadStatus::Killed, None)),
        );
        assert_eq!(feed.streaming("a", 1), None);
    }

    fn seq_of(id: &str) -> u64 {
        id.rsplit_once('.').unwrap().1.parse().unwrap()
    }
}
