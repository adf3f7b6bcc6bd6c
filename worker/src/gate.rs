//! The tool gate: before a tool call runs, the worker asks the control plane, which
//! decides (permissions, approvals) and audits. The worker never decides by itself.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use chorus_proto::domain::{ToolCall, ToolDecision, WorkerEvent};
use tokio::sync::mpsc;

use crate::events::EventSink;

/// What the control plane says about one check, in order: maybe `Pending` (a
/// person must answer), then exactly one `Decided` or `Deferred`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateMessage {
    Pending {
        description: String,
        approval_id: String,
    },
    Decided(ToolDecision),
    /// A CLI run's call waited for a person longer than the control plane holds
    /// it: not run now; the person's answer comes as the thread's next run.
    Deferred {
        message: String,
        approval_id: String,
    },
}

/// Asks whether a tool call may run.
pub trait ToolGate: Send + Sync {
    /// Starts a check; the answers arrive on the returned channel. A channel that
    /// closes without a decision means "deny" (the control plane is gone).
    fn check(&self, run_id: &str, call: &ToolCall) -> mpsc::UnboundedReceiver<GateMessage>;
}

/// The gate through the control plane link.
pub struct RelayGate {
    sink: EventSink,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, mpsc::UnboundedSender<GateMessage>>>,
}

impl RelayGate {
    pub fn new(sink: EventSink) -> Self {
        RelayGate {
            sink,
            next_id: AtomicU64::new(1),
            waiting: Mutex::new(HashMap::new()),
        }
    }

    fn waiting(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<u64, mpsc::UnboundedSender<GateMessage>>> {
        self.waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Routes an answer from the control plane to the check waiting for it.
    pub fn answer(&self, request_id: u64, message: GateMessage) {
        let done = matches!(
            message,
            GateMessage::Decided(_) | GateMessage::Deferred { .. }
        );
        let sender = if done {
            self.waiting().remove(&request_id)
        } else {
            self.waiting().get(&request_id).cloned()
        };
        match sender {
            Some(sender) => {
                let _ = sender.send(message);
            }
            None => tracing::warn!(request_id, "answer for a tool check nobody waits for"),
        }
    }
}

impl ToolGate for RelayGate {
    fn check(&self, run_id: &str, call: &ToolCall) -> mpsc::UnboundedReceiver<GateMessage> {
        let request_id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded_channel();
        self.waiting().insert(request_id, tx);
        self.sink.send(WorkerEvent::ToolCheck {
            request_id,
            run_id: run_id.to_string(),
            call: call.clone(),
            trace_context: crate::telemetry::current_context(),
        });
        rx
    }
}

/// A gate that allows everything (tests and benchmarks only: real runs go through
/// the control plane).
pub struct AllowAll;

impl ToolGate for AllowAll {
    fn check(&self, _run_id: &str, _call: &ToolCall) -> mpsc::UnboundedReceiver<GateMessage> {
        let (tx, rx) = mpsc::unbounded_channel();
        let _ = tx.send(GateMessage::Decided(ToolDecision {
            request_id: 0,
            allowed: true,
            message: String::new(),
            result: None,
        }));
        rx
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_reach_the_check_that_asked() {
        let (tx, mut events) = mpsc::unbounded_channel();
        let gate = RelayGate::new(EventSink::new(tx));
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let mut first = gate.check("r", &call);
        let mut second = gate.check("r", &call);
        let ids: Vec<u64> = (0..2)
            .map(|_| match events.try_recv().unwrap().event {
                WorkerEvent::ToolCheck { request_id, .. } => request_id,
                other => panic!("{other:?}"),
            })
            .collect();
        let decided = |id| {
            GateMessage::Decided(ToolDecision {
                request_id: id,
                allowed: id == ids[1],
                message: String::new(),
                result: None,
            })
        };
        gate.answer(
            ids[1],
            GateMessage::Pending {
                description: "Waiting".into(),
                approval_id: "a".into(),
            },
        );
        gate.answer(ids[1], decided(ids[1]));
        gate.answer(ids[0], decided(ids[0]));
        assert!(matches!(
            second.recv().await,
            Some(GateMessage::Pending { .. })
        ));
        assert!(matches!(second.recv().await, Some(GateMessage::Decided(d)) if d.allowed));
        assert!(matches!(first.recv().await, Some(GateMessage::Decided(d)) if !d.allowed));
        assert!(
            first.recv().await.is_none(),
            "one decision, then the check is over"
        );
    }
}
