//! A task's history: an append-only list of events with ids (`task_events`), each
//! a [`TaskEventKind`], who caused it (a principal's text) and its data (a JSON
//! object whose shape the kind decides). The board records the events of what it
//! changes itself (created, status_changed, plan_edited, question_asked,
//! question_answered, attachment_added); the engine records the rest through
//! `Board::record`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What happened to a task. Stored and shown as the snake_case word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEventKind {
    Created,
    PlanningStarted,
    PlanningFinished,
    QuestionAsked,
    QuestionAnswered,
    Started,
    HandoffStarted,
    HandoffCompleted,
    ToolCall,
    ReportReceived,
    NudgeSent,
    /// data: `{"from": …, "to": …, "reason": …}`.
    StatusChanged,
    MessageSent,
    AttachmentAdded,
    PlanEdited,
}

impl TaskEventKind {
    pub const ALL: [TaskEventKind; 15] = [
        TaskEventKind::Created,
        TaskEventKind::PlanningStarted,
        TaskEventKind::PlanningFinished,
        TaskEventKind::QuestionAsked,
        TaskEventKind::QuestionAnswered,
        TaskEventKind::Started,
        TaskEventKind::HandoffStarted,
        TaskEventKind::HandoffCompleted,
        TaskEventKind::ToolCall,
        TaskEventKind::ReportReceived,
        TaskEventKind::NudgeSent,
        TaskEventKind::StatusChanged,
        TaskEventKind::MessageSent,
        TaskEventKind::AttachmentAdded,
        TaskEventKind::PlanEdited,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskEventKind::Created => "created",
            TaskEventKind::PlanningStarted => "planning_started",
            TaskEventKind::PlanningFinished => "planning_finished",
            TaskEventKind::QuestionAsked => "question_asked",
            TaskEventKind::QuestionAnswered => "question_answered",
            TaskEventKind::Started => "started",
            TaskEventKind::HandoffStarted => "handoff_started",
            TaskEventKind::HandoffCompleted => "handoff_completed",
            TaskEventKind::ToolCall => "tool_call",
            TaskEventKind::ReportReceived => "report_received",
            TaskEventKind::NudgeSent => "nudge_sent",
            TaskEventKind::StatusChanged => "status_changed",
            TaskEventKind::MessageSent => "message_sent",
            TaskEventKind::AttachmentAdded => "attachment_added",
            TaskEventKind::PlanEdited => "plan_edited",
        }
    }

    pub fn parse(s: &str) -> Option<TaskEventKind> {
        TaskEventKind::ALL.into_iter().find(|k| k.as_str() == s)
    }
}

impl std::fmt::Display for TaskEventKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event of a task's history, as stored and shown
/// (`GET /api/tasks/{id}/history` → `{"events": [...]}`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TaskEvent {
    /// Increasing across all tasks: a task's events in id order are its history.
    pub id: u64,
    pub task_id: u64,
    /// RFC 3339, milliseconds, UTC.
    pub at: String,
    pub kind: TaskEventKind,
    /// Who caused it: a principal's text (`api`, `discord:1`, `agent:coder:3`, `chorus`).
    pub by: String,
    /// What the kind says about it (an object; `{}` when nothing).
    pub data: Value,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_one_word_stored_and_shown_alike() {
        for kind in TaskEventKind::ALL {
            assert_eq!(TaskEventKind::parse(kind.as_str()), Some(kind));
            assert_eq!(
                serde_json::to_value(kind).unwrap(),
                serde_json::json!(kind.as_str())
            );
        }
        assert_eq!(TaskEventKind::parse("task_created"), None);
    }
}
