//! "Waiting on": what an unfinished task waits for, and since when (beyond the
//! seeds: every board we looked at shows only a status). Pure: the engine gathers
//! the [`Facts`] from the store and the runs, this decides what to say.

use serde::Serialize;

use super::stand_in::TaskStatus;

/// What a task waits on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WaitKind {
    /// The planning agent is at work.
    Planner,
    /// A person's answer to a question.
    Question,
    /// A person's approval of a tool call.
    Approval,
    /// A delegate's sub-task.
    Delegate,
    /// Another agent's answer (`ask_agent`).
    Agent,
    /// A step of the working agent (a model call or a tool), silent since.
    Step,
    /// A person's decision (start a planned task, review, unblock).
    Person,
    /// A worker to take the run (queued).
    Worker,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WaitingOn {
    pub kind: WaitKind,
    /// Which one, for people: the question, the approval's action, the sub-task.
    pub detail: String,
    /// When the wait began (RFC 3339).
    pub since: String,
}

/// What is known about a task's open work, newest first where it matters.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// An open question to a person: its id, text and when it was asked.
    pub open_question: Option<(String, String, String)>,
    /// A pending approval in one of the task's threads: its id, action, since.
    pub pending_approval: Option<(String, String, String)>,
    /// An unfinished sub-task: its id, agent, since.
    pub open_child: Option<(u64, String, String)>,
    /// An agent asked and not answered yet: its name, since.
    pub open_answerer: Option<(String, String)>,
    /// The open step of the working thread: its text, when it started.
    pub open_step: Option<(String, String)>,
    /// The working thread's last activity (when nothing is open), and whether its
    /// run waits for a worker.
    pub last_activity: Option<String>,
    pub queued: bool,
    /// Since when the task is in its status.
    pub status_since: String,
    pub blocked_reason: Option<String>,
}

/// What a task in `status` waits on; `None` for a finished one.
pub fn waiting_on(status: TaskStatus, facts: &Facts) -> Option<WaitingOn> {
    let at = |kind, detail: String, since: &str| {
        Some(WaitingOn {
            kind,
            detail,
            since: since.to_string(),
        })
    };
    // An approval holds whatever else goes on: a person must act first.
    if let Some((id, action, since)) = &facts.pending_approval {
        return at(WaitKind::Approval, format!("approval {id}: {action}"), since);
    }
    match status {
        TaskStatus::Completed | TaskStatus::Failed => None,
        TaskStatus::Planning => match &facts.open_step {
            Some((step, since)) => at(WaitKind::Planner, format!("the planner: {step}"), since),
            None => at(WaitKind::Planner, "the planner".into(), &facts.status_since),
        },
        TaskStatus::AwaitingInput | TaskStatus::Waiting | TaskStatus::Active
            if facts.open_question.is_some() =>
        {
            let (id, question, since) = facts.open_question.clone().unwrap_or_default();
            at(WaitKind::Question, format!("{id}: {question}"), &since)
        }
        TaskStatus::Waiting | TaskStatus::Active if facts.open_child.is_some() => {
            let (child, agent, since) = facts.open_child.clone().unwrap_or_default();
            at(WaitKind::Delegate, format!("task {child} ({agent})"), &since)
        }
        TaskStatus::Waiting | TaskStatus::Active if facts.open_answerer.is_some() => {
            let (agent, since) = facts.open_answerer.clone().unwrap_or_default();
            at(WaitKind::Agent, agent, &since)
        }
        TaskStatus::Active | TaskStatus::Waiting => {
            if facts.queued {
                return at(WaitKind::Worker, "a worker to take the run".into(), &facts.status_since);
            }
            match (&facts.open_step, &facts.last_activity) {
                (Some((step, since)), _) => at(WaitKind::Step, step.clone(), since),
                (None, Some(last)) => at(WaitKind::Step, "the model".into(), last),
                (None, None) => at(WaitKind::Step, "the agent".into(), &facts.status_since),
            }
        }
        TaskStatus::AwaitingInput => {
            at(WaitKind::Question, "the person's answers".into(), &facts.status_since)
        }
        TaskStatus::Planned => at(WaitKind::Person, "start".into(), &facts.status_since),
        TaskStatus::Review => at(WaitKind::Person, "review: accept or send back".into(), &facts.status_since),
        TaskStatus::Blocked => at(
            WaitKind::Person,
            facts
                .blocked_reason
                .clone()
                .unwrap_or_else(|| "unblocking (resume or retry)".into()),
            &facts.status_since,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts() -> Facts {
        Facts {
            status_since: "T0".into(),
            ..Facts::default()
        }
    }

    #[test]
    fn each_wait_is_named_with_its_start() {
        let mut f = facts();
        assert_eq!(waiting_on(TaskStatus::Completed, &f), None);
        assert_eq!(waiting_on(TaskStatus::Planned, &f).unwrap().kind, WaitKind::Person);
        f.open_question = Some(("q1".into(), "Which port?".into(), "T1".into()));
        let w = waiting_on(TaskStatus::AwaitingInput, &f).unwrap();
        assert_eq!((w.kind, w.detail.as_str(), w.since.as_str()), (WaitKind::Question, "q1: Which port?", "T1"));
        f.open_question = None;
        f.open_child = Some((9, "reviewer".into(), "T2".into()));
        let w = waiting_on(TaskStatus::Waiting, &f).unwrap();
        assert_eq!((w.kind, w.detail.as_str()), (WaitKind::Delegate, "task 9 (reviewer)"));
        f.open_child = None;
        f.open_step = Some(("bash: cargo test".into(), "T3".into()));
        let w = waiting_on(TaskStatus::Active, &f).unwrap();
        assert_eq!((w.kind, w.since.as_str()), (WaitKind::Step, "T3"));
        f.pending_approval = Some(("ab12".into(), "tool:bash:rm x".into(), "T4".into()));
        assert_eq!(waiting_on(TaskStatus::Active, &f).unwrap().kind, WaitKind::Approval);
    }
}
