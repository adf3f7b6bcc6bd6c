//! What the feed says: one [`FeedEvent`] per kind, each with its fields. The
//! control plane publishes them (the run actor, the gate, sessions, the jobs
//! record) and every front end reads them typed (Discord, the terminal client, the
//! HTTP streams), so a kind or a field exists in one place.
//!
//! On the wire an event is its kind (the SSE event name) and its data (a JSON
//! object): [`FeedEvent::kind`] and [`FeedEvent::data`] going out,
//! [`FeedEvent::from_wire`] coming in (the terminal client). Fields a front end
//! needs no value for are lenient when read (`#[serde(default)]`), so a thin event
//! from an older server still reads; what is written never changes shape by that.

use chorus_proto::domain::{ChatMessage, FailureKind, StepKind, Usage};
use chorus_proto::tools::RunsIn;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::ThreadStatus;
use crate::tasks::history::TaskEventKind;
use crate::tasks::status::TaskStatus;
use crate::workers::WorkerStatus;

/// One event of the feed, by kind. Serialised as `{"kind": …, "data": {…}}`; the
/// SSE streams send the kind as the event name and the data as its payload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "data", rename_all = "snake_case")]
pub enum FeedEvent {
    /// A thread began: a run was asked for, or a session was restored into it.
    ThreadCreated(ThreadCreated),
    /// The thread's status changed.
    Status(StatusChange),
    StepStarted(StepStarted),
    StepEnded(StepEnded),
    /// Model output as it streams (the whole message follows as `message`).
    Text {
        #[serde(default)]
        step: u32,
        text: String,
    },
    /// A message was added to the thread (the model's, or a tool's result).
    Message(ChatMessage),
    /// The worker took a queued message into its run.
    InputTaken {
        message_id: u64,
    },
    /// A tool call waits for a person's approval.
    Approval(ApprovalAsked),
    /// That approval was answered, or expired.
    ApprovalAnswered(ApprovalAnswered),
    /// The thread's new title.
    Summary {
        summary: String,
    },
    /// An event of the agent that belongs to no thread.
    Notification(Notification),
    /// An event of a task's history (no thread: published under the agent it
    /// concerns, `tasks::board`).
    Task(TaskChange),
    /// A task was deleted, with its history (no thread; published under the agent
    /// it concerned, as its `task` events were).
    TaskDeleted(TaskDeleted),
    /// The agent was created, configured or destroyed (no thread; `agents`).
    Agent(AgentChange),
    /// The agent's worker changed state (no thread; `workers`): its `worker` as
    /// `GET /api/agents/{name}` shows it.
    Worker(WorkerStatus),
}

/// What happened to an agent, and who did it (`agent` on the wire names it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgentChange {
    pub change: AgentChangeKind,
    /// Who did it (a principal's text).
    pub by: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AgentChangeKind {
    Created,
    /// Its settings changed (`GET /api/agents/{name}` shows them).
    Changed,
    Destroyed,
}

impl AgentChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentChangeKind::Created => "created",
            AgentChangeKind::Changed => "changed",
            AgentChangeKind::Destroyed => "destroyed",
        }
    }
}

/// One event of a task's history as the feed tells it, with the task's status after it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskChange {
    pub task_id: u64,
    /// The history event's id (`GET /api/tasks/{id}/history`).
    pub event_id: u64,
    pub at: String,
    pub kind: TaskEventKind,
    /// Who caused it (a principal's text).
    pub by: String,
    pub status: TaskStatus,
    pub data: Value,
}

/// A task that no longer is, and who deleted it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskDeleted {
    pub task_id: u64,
    /// Who deleted it (a principal's text).
    pub by: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadCreated {
    pub status: ThreadStatus,
    /// Who asked (`api`, `discord:<id>`, a person's user name).
    pub user: String,
    #[serde(flatten)]
    pub origin: ThreadOrigin,
}

/// Where a new thread comes from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ThreadOrigin {
    /// A saved session was restored into it (it starts `idle`).
    Restored { restored_from: String },
    /// A message started it, continuing an earlier thread or none.
    Started { continued_from: Option<u64> },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusChange {
    pub status: ThreadStatus,
    #[serde(flatten)]
    pub detail: StatusDetail,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum StatusDetail {
    /// Running again after its worker was lost: which attempt, and why.
    Resumed { resumed: u32, reason: String },
    /// Why it failed, if it did (both `null` otherwise).
    Failure {
        error: Option<String>,
        failure_kind: Option<FailureKind>,
    },
}

impl StatusChange {
    /// A status, with the failure that ended the thread, if one did.
    pub fn new(status: ThreadStatus, failure: Option<(FailureKind, &str)>) -> Self {
        StatusChange {
            status,
            detail: StatusDetail::Failure {
                error: failure.map(|(_, message)| message.to_string()),
                failure_kind: failure.map(|(kind, _)| kind),
            },
        }
    }

    /// The error that ended the thread, if any.
    pub fn error(&self) -> Option<&str> {
        match &self.detail {
            StatusDetail::Failure { error, .. } => error.as_deref(),
            StatusDetail::Resumed { .. } => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepStarted {
    pub number: u32,
    pub kind: StepKind,
    pub description: String,
    /// RFC 3339, milliseconds, UTC.
    #[serde(default)]
    pub started_at: String,
    /// Where a tool step's tool runs; absent for other steps (and from older
    /// servers), so every event recorded before it was added is written as it was.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runs_in: Option<RunsIn>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEnded {
    pub number: u32,
    #[serde(default)]
    pub duration_ms: u64,
    #[serde(default)]
    pub failed: bool,
    /// The model call's tokens (`null` for other steps).
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAsked {
    pub approval_id: String,
    pub tool: String,
    /// The actions the call needs that the profile asks about.
    #[serde(default)]
    pub actions: Vec<String>,
    /// RFC 3339: when it counts as denied.
    #[serde(default)]
    pub expires_at: String,
    /// Why it asks (the rules), secrets scrubbed.
    #[serde(default)]
    pub why: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalAnswered {
    pub approval_id: String,
    #[serde(flatten)]
    pub answer: Answer,
}

/// How an approval ended (`outcome` on the wire, with `by` when a person answered).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum Answer {
    Approved {
        by: String,
    },
    Denied {
        by: String,
    },
    /// Nobody answered in time: a deny.
    Expired,
}

impl Answer {
    pub fn as_str(&self) -> &'static str {
        match self {
            Answer::Approved { .. } => "approved",
            Answer::Denied { .. } => "denied",
            Answer::Expired => "expired",
        }
    }

    /// Who answered, unless it expired.
    pub fn by(&self) -> Option<&str> {
        match self {
            Answer::Approved { by } | Answer::Denied { by } => Some(by),
            Answer::Expired => None,
        }
    }
}

/// What an agent is told that belongs to no thread, each with its `text` for people.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Notification {
    /// An idle agent's context was saved and cleared.
    IdleSave {
        session_id: String,
        description: String,
        text: String,
    },
    /// A background job ended (or was lost with its worker). Servers before jobs
    /// were named so called it `task_ended`; it still reads.
    #[serde(alias = "task_ended")]
    JobEnded {
        task_id: u32,
        command: String,
        status: String,
        exit_code: Option<i32>,
        detail: String,
        text: String,
    },
    /// A schedule failed `failures` times in a row and was paused (`schedules`).
    SchedulePaused {
        schedule_id: u64,
        failures: u32,
        text: String,
    },
    /// A thread's older context was summarised into the daily log and left its
    /// window (`memory::flush`); published on that thread (its `thread_id`).
    ContextFlushed {
        first_message_id: u64,
        last_message_id: u64,
        /// The log (`memory/YYYY-MM-DD.md`) and its entry's id.
        path: String,
        entry_id: String,
        text: String,
    },
    /// A heartbeat's answer that was not `HEARTBEAT_OK` (`heartbeat`): what the
    /// agent found worth a person's attention, with the thread it answered in
    /// (`thread`: an agent's event's `thread_id` on the wire is the envelope's, null).
    Heartbeat {
        heartbeat_id: u64,
        thread: u64,
        text: String,
    },
}

impl Notification {
    /// What it says, for people.
    pub fn text(&self) -> &str {
        match self {
            Notification::IdleSave { text, .. }
            | Notification::JobEnded { text, .. }
            | Notification::SchedulePaused { text, .. }
            | Notification::ContextFlushed { text, .. }
            | Notification::Heartbeat { text, .. } => text,
        }
    }
}

impl FeedEvent {
    /// The kind, as the SSE event name.
    pub fn kind(&self) -> &'static str {
        match self {
            FeedEvent::ThreadCreated(_) => "thread_created",
            FeedEvent::Status(_) => "status",
            FeedEvent::StepStarted(_) => "step_started",
            FeedEvent::StepEnded(_) => "step_ended",
            FeedEvent::Text { .. } => "text",
            FeedEvent::Message(_) => "message",
            FeedEvent::InputTaken { .. } => "input_taken",
            FeedEvent::Approval(_) => "approval",
            FeedEvent::ApprovalAnswered(_) => "approval_answered",
            FeedEvent::Summary { .. } => "summary",
            FeedEvent::Notification(_) => "notification",
            FeedEvent::Task(_) => "task",
            FeedEvent::TaskDeleted(_) => "task_deleted",
            FeedEvent::Agent(_) => "agent",
            FeedEvent::Worker(_) => "worker",
        }
    }

    /// The data, as the SSE payload: a JSON object.
    pub fn data(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut event)) => event.remove("data").unwrap_or(Value::Null),
            // Every variant carries an object of plain fields.
            _ => Value::Null,
        }
    }

    /// An event read off the wire: its kind and data (extra fields, such as the
    /// `agent` and `thread_id` `GET /api/events` adds, are ignored). An error for a
    /// kind this build does not know, or data that is not of its kind.
    pub fn from_wire(kind: &str, data: Value) -> Result<FeedEvent, serde_json::Error> {
        serde_json::from_value(json!({ "kind": kind, "data": data }))
    }

    /// The status change, if this is one.
    pub fn status(&self) -> Option<&StatusChange> {
        match self {
            FeedEvent::Status(change) => Some(change),
            _ => None,
        }
    }

    /// Whether this is a thread's last event (its final status).
    pub fn is_final(&self) -> bool {
        self.status().is_some_and(|s| s.status.is_finished())
    }

    /// Whether this kind belongs to no thread (an agent's event).
    pub fn is_agents(&self) -> bool {
        matches!(
            self,
            FeedEvent::Notification(_)
                | FeedEvent::Task(_)
                | FeedEvent::TaskDeleted(_)
                | FeedEvent::Agent(_)
                | FeedEvent::Worker(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Events of every kind and shape as the feed published them before it was
    /// typed (recorded from the e2e suites; `thread` says whether the event
    /// belongs to a thread).
    const RECORDED: &str = include_str!("../../tests/fixtures/feed_events.json");

    fn recorded() -> Vec<(String, bool, Value)> {
        let entries: Vec<Value> = serde_json::from_str(RECORDED).unwrap();
        entries
            .into_iter()
            .map(|e| {
                (
                    e["kind"].as_str().unwrap().to_string(),
                    e["thread"].as_bool().unwrap(),
                    e["data"].clone(),
                )
            })
            .collect()
    }

    /// What the typed event must write for a recorded one: the same, but for the
    /// one change this format made (a background job's end is `job_ended`).
    fn expected(kind: &str, data: &Value) -> Value {
        let mut data = data.clone();
        if kind == "notification" && data["kind"] == "task_ended" {
            data["kind"] = json!("job_ended");
        }
        data
    }

    #[test]
    fn every_recorded_event_reads_and_is_written_exactly_as_before() {
        let entries = recorded();
        let mut kinds = std::collections::BTreeSet::new();
        for (kind, thread, data) in &entries {
            let event = FeedEvent::from_wire(kind, data.clone())
                .unwrap_or_else(|e| panic!("{kind} {data}: {e}"));
            assert_eq!(event.kind(), kind, "{data}");
            assert_eq!(event.data(), expected(kind, data), "{kind}");
            // The bytes, not just the value: the keys in the same order.
            assert_eq!(
                event.data().to_string(),
                expected(kind, data).to_string(),
                "{kind}"
            );
            // Only notifications, task, agent and worker events belong to no thread.
            assert_eq!(!thread, event.is_agents());
            kinds.insert(event.kind());
        }
        // Every kind was recorded.
        assert_eq!(
            kinds.into_iter().collect::<Vec<_>>(),
            [
                "agent",
                "approval",
                "approval_answered",
                "input_taken",
                "message",
                "notification",
                "status",
                "step_ended",
                "step_started",
                "summary",
                "task",
                "text",
                "thread_created",
                "worker",
            ]
        );
    }

    /// The agent and worker events the page follows: their wire shape, and back.
    #[test]
    fn agent_and_worker_events_are_written_as_the_api_names_them() {
        let created = FeedEvent::Agent(AgentChange {
            change: AgentChangeKind::Created,
            by: "user:ana".into(),
        });
        assert_eq!(created.kind(), "agent");
        assert_eq!(
            created.data().to_string(),
            r#"{"by":"user:ana","change":"created"}"#
        );
        let worker = FeedEvent::Worker(WorkerStatus {
            state: crate::workers::WorkerState::Running,
            pid: Some(42),
            dial_in_worker: None,
            dial_in_credential: None,
            restarts: 1,
            last_exit: Some("exited with status 1".into()),
        });
        assert_eq!(worker.kind(), "worker");
        assert_eq!(
            worker.data(),
            json!({"state": "running", "pid": 42, "dial_in_worker": null,
                   "dial_in_credential": null, "restarts": 1,
                   "last_exit": "exited with status 1"})
        );
        for event in [created, worker] {
            assert!(event.is_agents());
            assert_eq!(
                FeedEvent::from_wire(event.kind(), event.data()).unwrap(),
                event
            );
        }
        for change in ["changed", "destroyed"] {
            let read = FeedEvent::from_wire("agent", json!({"change": change, "by": "api"}));
            assert!(
                matches!(read, Ok(FeedEvent::Agent(AgentChange { .. }))),
                "{change}"
            );
        }
        assert!(FeedEvent::from_wire("agent", json!({"change": "renamed", "by": "api"})).is_err());
    }

    /// `runs_in` is additive: a tool step carries it, and it reads back.
    #[test]
    fn a_tool_steps_runs_in_is_written_and_read() {
        let event = FeedEvent::StepStarted(StepStarted {
            number: 4,
            kind: StepKind::Tool,
            description: "Executing self_edit_model in the control plane".into(),
            started_at: "2026-01-01T00:00:00.000Z".into(),
            runs_in: Some(RunsIn::ControlPlane),
        });
        assert_eq!(event.data()["runs_in"], "control_plane");
        assert_eq!(
            FeedEvent::from_wire(event.kind(), event.data()).unwrap(),
            event
        );
    }

    #[test]
    fn a_jobs_end_is_job_ended_and_the_old_name_still_reads() {
        let (_, _, data) = recorded()
            .into_iter()
            .find(|(_, _, d)| d["kind"] == "task_ended")
            .unwrap();
        let event = FeedEvent::from_wire("notification", data).unwrap();
        assert!(matches!(
            &event,
            FeedEvent::Notification(Notification::JobEnded { task_id: 1, .. })
        ));
        assert_eq!(event.data()["kind"], "job_ended");
    }

    #[test]
    fn the_shapes_of_one_kind_read_as_what_they_are() {
        let read = |kind: &str, data: Value| FeedEvent::from_wire(kind, data).unwrap();
        assert!(matches!(
            read(
                "thread_created",
                json!({"status": "idle", "user": "api", "restored_from": "s1"})
            ),
            FeedEvent::ThreadCreated(ThreadCreated {
                origin: ThreadOrigin::Restored { .. },
                ..
            })
        ));
        assert!(matches!(
            read(
                "thread_created",
                json!({"status": "running", "user": "api", "continued_from": 3})
            ),
            FeedEvent::ThreadCreated(ThreadCreated {
                origin: ThreadOrigin::Started {
                    continued_from: Some(3)
                },
                ..
            })
        ));
        let resumed = read(
            "status",
            json!({"status": "running", "resumed": 2, "reason": "lost"}),
        );
        assert!(matches!(
            resumed.status().map(|s| &s.detail),
            Some(StatusDetail::Resumed { resumed: 2, .. })
        ));
        assert!(!resumed.is_final());
        let failed = read(
            "status",
            json!({"status": "failed", "error": "no", "failure_kind": "model_error"}),
        );
        assert!(failed.is_final());
        assert_eq!(failed.status().and_then(StatusChange::error), Some("no"));
        // A kind this build does not know is an error, not a guess.
        assert!(FeedEvent::from_wire("reset", json!({"reason": "x"})).is_err());
    }
}
