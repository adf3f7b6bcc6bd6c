//! A task as the API shows it (`GET /api/tasks/{id}`, the create answer, and each
//! item of the list, which leaves out the runs).

use serde::Serialize;

use super::status::{TaskStatus, actions};
use crate::store::{
    ChainEntry, QuestionRecord, TaskAttachment, TaskRecord, TaskReport, TaskRun, WaitingOn,
};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TaskView {
    pub id: u64,
    pub title: String,
    pub description: String,
    pub status: TaskStatus,
    pub review: bool,
    pub status_since: String,
    pub created_at: String,
    pub updated_at: String,
    pub created_by: String,
    pub parent_id: Option<u64>,
    pub summary: Option<String>,
    pub requirements: Vec<String>,
    pub acceptance_criteria: Vec<String>,
    pub steps: Vec<String>,
    pub assignee: Option<String>,
    pub blocked_reason: Option<String>,
    pub report: Option<TaskReport>,
    /// Every round's, oldest first.
    pub questions: Vec<QuestionRecord>,
    pub attachments: Vec<TaskAttachment>,
    pub chain: Vec<ChainEntry>,
    /// Left out of lists.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<TaskRun>>,
    pub waiting_on: Option<WaitingOn>,
    /// The planner's thread, once planning started (of agent `planner_agent`).
    pub planner_thread: Option<u64>,
    pub planner_agent: Option<String>,
    pub limits: Limits,
    /// The buttons valid in its status (their route words: `start`, `send-back`, …),
    /// from the one table (`status::actions`): what a front end shows.
    pub actions: Vec<&'static str>,
    /// Whether the plan (summary, requirements, acceptance criteria, steps,
    /// assignee) may be edited: before Start.
    pub plan_editable: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Limits {
    pub time_secs: u64,
    pub model_calls: u64,
}

impl TaskView {
    pub fn new(
        task: TaskRecord,
        questions: Vec<QuestionRecord>,
        attachments: Vec<TaskAttachment>,
        runs: Option<Vec<TaskRun>>,
    ) -> TaskView {
        let actions = actions(task.status, task.assignee.is_some())
            .into_iter()
            .map(super::status::Button::as_str)
            .collect();
        let plan_editable = task.status.before_start();
        TaskView {
            actions,
            plan_editable,
            id: task.id,
            title: task.title,
            description: task.description,
            status: task.status,
            review: task.review,
            status_since: task.status_since,
            created_at: task.created_at,
            updated_at: task.updated_at,
            created_by: task.created_by,
            parent_id: task.parent_id,
            summary: task.summary,
            requirements: task.requirements,
            acceptance_criteria: task.acceptance_criteria,
            steps: task.steps,
            assignee: task.assignee,
            blocked_reason: task.blocked_reason,
            report: task.report,
            questions,
            attachments,
            chain: task.chain,
            runs,
            // What it waits on is worked out when it is read (`Engine::view`).
            waiting_on: None,
            planner_thread: task.planner_thread,
            planner_agent: task.planner_agent,
            limits: Limits {
                time_secs: task.time_limit_secs,
                model_calls: task.model_call_limit,
            },
        }
    }

    /// The questions of the newest round still unanswered.
    pub fn open_questions(&self) -> Vec<&QuestionRecord> {
        let last = self.questions.iter().map(|q| q.round).max();
        self.questions
            .iter()
            .filter(|q| Some(q.round) == last && q.answer.is_none())
            .collect()
    }
}
