//! The live feed of thread events: steps as they start and end, streamed model text,
//! messages, and the final status. Frontends subscribe; nothing here is stored (the
//! store has the durable record).

use serde::Serialize;
use serde_json::Value;
use tokio::sync::broadcast;

/// One event of one thread.
#[derive(Debug, Clone, Serialize)]
pub struct ThreadEvent {
    pub agent: String,
    pub thread_id: u64,
    /// `step_started`, `step_ended`, `text`, `message` or `status`.
    pub kind: &'static str,
    pub data: Value,
}

impl ThreadEvent {
    /// Whether this is the thread's last event (its final status).
    pub fn is_final(&self) -> bool {
        self.kind == "status"
            && matches!(
                self.data.get("status").and_then(Value::as_str),
                Some("completed" | "failed")
            )
    }
}

#[derive(Clone)]
pub struct ThreadFeed {
    sender: broadcast::Sender<ThreadEvent>,
}

/// Events a slow subscriber may fall behind by before it is told it lagged.
const CAPACITY: usize = 4096;

impl Default for ThreadFeed {
    fn default() -> Self {
        ThreadFeed {
            sender: broadcast::Sender::new(CAPACITY),
        }
    }
}

impl ThreadFeed {
    pub fn publish(&self, agent: &str, thread_id: u64, kind: &'static str, data: Value) {
        // No subscribers is the common case and not an error.
        let _ = self.sender.send(ThreadEvent {
            agent: agent.to_string(),
            thread_id,
            kind,
            data,
        });
    }

    pub fn subscribe(&self) -> broadcast::Receiver<ThreadEvent> {
        self.sender.subscribe()
    }
}
