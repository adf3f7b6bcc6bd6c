//! Where the worker's events go: one queue to the connection, which sends them in
//! order. Each event of a run gets that run's next sequence number (1, 2, 3 … in the
//! order they are queued), so the control plane can store a run's events exactly once
//! even when they reach it twice (a reconnect, a resumed run); an event of no run
//! (hello, heartbeat, a background job, a summary) gets 0.
//!
//! Invariant: numbering and queueing happen under one lock, so the queue's order is
//! the order of the numbers; a run's counter is forgotten after its `RunCompleted` or
//! `RunFailed`, its last event.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chorus_proto::domain::{Sequenced, WorkerEvent};
use tokio::sync::mpsc;

/// The sending end of the worker's event queue; cheap to clone.
#[derive(Clone)]
pub struct EventSink(Arc<Inner>);

struct Inner {
    queue: mpsc::UnboundedSender<Sequenced>,
    /// The last number given to each run that has not ended.
    last_seq: Mutex<HashMap<String, u64>>,
}

impl EventSink {
    pub fn new(queue: mpsc::UnboundedSender<Sequenced>) -> Self {
        EventSink(Arc::new(Inner {
            queue,
            last_seq: Mutex::new(HashMap::new()),
        }))
    }

    pub fn send(&self, event: WorkerEvent) {
        let _ = self.try_send(event);
    }

    /// Queues the event if it fits the link (see [`crate::outbound`]); one that
    /// cannot fit is not sent (and takes no number), and the caller decides what
    /// becomes of its run.
    pub fn try_send(&self, event: WorkerEvent) -> Result<(), crate::outbound::TooLarge> {
        let event = crate::outbound::fit(event)
            .inspect_err(|e| tracing::warn!(error = %e, "event not sent"))?;
        let mut last_seq = self
            .0
            .last_seq
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let seq = match event.run_id() {
            None => 0,
            Some(run_id) => {
                let ends_run = matches!(
                    event,
                    WorkerEvent::RunCompleted { .. } | WorkerEvent::RunFailed { .. }
                );
                if ends_run {
                    last_seq.remove(run_id).unwrap_or(0) + 1
                } else {
                    let last = last_seq.entry(run_id.to_string()).or_insert(0);
                    *last += 1;
                    *last
                }
            }
        };
        // Still under the lock: the queue's order is the numbers' order. If the
        // connection is gone the worker is shutting down; nothing to do.
        let _ = self.0.queue.send(Sequenced { seq, event });
        Ok(())
    }

    /// Runs that have sent events and not yet ended (for tests and diagnostics).
    pub fn open_runs(&self) -> usize {
        self.0
            .last_seq
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::{ChatMessage, FailureKind, JobEnd, JobOutcome};

    use super::*;

    fn message(run: &str) -> WorkerEvent {
        WorkerEvent::MessageAppended {
            run_id: run.into(),
            message: ChatMessage::assistant("hi", vec![]),
        }
    }

    fn drain(rx: &mut mpsc::UnboundedReceiver<Sequenced>) -> Vec<(u64, Option<String>)> {
        let mut out = Vec::new();
        while let Ok(s) = rx.try_recv() {
            out.push((s.seq, s.event.run_id().map(str::to_string)));
        }
        out
    }

    #[test]
    fn each_run_counts_its_own_events_from_one_and_others_get_zero() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = EventSink::new(tx);
        sink.send(message("a"));
        sink.send(message("b"));
        sink.send(message("a"));
        sink.send(WorkerEvent::JobEnded {
            job_id: 7,
            end: JobEnd {
                status: JobOutcome::Completed,
                exit_code: Some(0),
                detail: String::new(),
            },
        });
        sink.send(message("b"));
        sink.send(WorkerEvent::RunCompleted {
            run_id: "a".into(),
            final_text: "done".into(),
        });
        sink.send(message("b"));
        let a = Some("a".to_string());
        let b = Some("b".to_string());
        assert_eq!(
            drain(&mut rx),
            vec![
                (1, a.clone()),
                (1, b.clone()),
                (2, a.clone()),
                (0, None),
                (2, b.clone()),
                (3, a),
                (3, b.clone()),
            ]
        );
        assert_eq!(sink.open_runs(), 1, "a's counter is forgotten when it ends");
        sink.send(WorkerEvent::RunFailed {
            run_id: "b".into(),
            kind: FailureKind::Cancelled,
            error: "cancelled".into(),
        });
        assert_eq!(drain(&mut rx), vec![(4, b)]);
        assert_eq!(sink.open_runs(), 0);
    }

    #[test]
    fn an_event_that_is_not_sent_takes_no_number() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = EventSink::new(tx);
        let huge = WorkerEvent::TextDelta {
            run_id: "a".into(),
            step: 1,
            text: "x".repeat(chorus_proto::limits::MAX_LINK_MESSAGE_BYTES + 1),
        };
        assert!(sink.try_send(huge).is_err());
        sink.send(message("a"));
        assert_eq!(drain(&mut rx), vec![(1, Some("a".to_string()))]);
    }

    #[test]
    fn numbers_follow_queue_order_across_threads() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let sink = EventSink::new(tx);
        std::thread::scope(|s| {
            for _ in 0..4 {
                let sink = sink.clone();
                s.spawn(move || {
                    for _ in 0..500 {
                        sink.send(message("a"));
                    }
                });
            }
        });
        let seqs: Vec<u64> = drain(&mut rx).into_iter().map(|(seq, _)| seq).collect();
        assert_eq!(seqs, (1..=2000).collect::<Vec<_>>());
    }
}
