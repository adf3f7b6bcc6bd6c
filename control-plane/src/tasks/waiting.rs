//! "Waiting on": what an unfinished task waits for, and since when (beyond the
//! seeds: every board we looked at shows only a status). Pure: the engine gathers
//! the [`Facts`] from the store, this decides what to say. A task's threads never
//! wait for a person's approval (their asks resolve by `on_ask`, prompt as deny), so
//! an approval is never what a task waits on.

use super::status::TaskStatus;

pub use crate::store::{WaitingKind as WaitKind, WaitingOn};

/// What is known about a task's open work, newest first where it matters.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// An open question to a person: its id, text and when it was asked.
    pub open_question: Option<(String, String, String)>,
    /// An unfinished sub-task: its id, agent, since.
    pub open_child: Option<(u64, String, String)>,
    /// An agent asked and not answered yet: its name, since.
    pub open_answerer: Option<(String, String)>,
    /// The open step of the working thread: its text, when it started.
    pub open_step: Option<(String, String)>,
    /// The working thread's last activity (when nothing is open).
    pub last_activity: Option<String>,
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
            at(
                WaitKind::Delegate,
                format!("task {child} ({agent})"),
                &since,
            )
        }
        TaskStatus::Waiting | TaskStatus::Active if facts.open_answerer.is_some() => {
            let (agent, since) = facts.open_answerer.clone().unwrap_or_default();
            at(WaitKind::Agent, agent, &since)
        }
        TaskStatus::Active | TaskStatus::Waiting => {
            match (&facts.open_step, &facts.last_activity) {
                (Some((step, since)), _) => at(WaitKind::Step, step.clone(), since),
                (None, Some(last)) => at(WaitKind::Step, "the model".into(), last),
                (None, None) => at(WaitKind::Step, "the agent".into(), &facts.status_since),
            }
        }
        TaskStatus::AwaitingInput => at(
            WaitKind::Question,
            "the person's answers".into(),
            &facts.status_since,
        ),
        TaskStatus::Planned => at(WaitKind::Person, "start".into(), &facts.status_since),
        TaskStatus::Review => at(
            WaitKind::Person,
            "review: accept or send back".into(),
            &facts.status_since,
        ),
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
        assert_eq!(
            waiting_on(TaskStatus::Planned, &f).unwrap().kind,
            WaitKind::Person
        );
        f.open_question = Some(("q1".into(), "Which port?".into(), "T1".into()));
        let w = waiting_on(TaskStatus::AwaitingInput, &f).unwrap();
        assert_eq!(
            (w.kind, w.detail.as_str(), w.since.as_str()),
            (WaitKind::Question, "q1: Which port?", "T1")
        );
        f.open_question = None;
        f.open_child = Some((9, "reviewer".into(), "T2".into()));
        let w = waiting_on(TaskStatus::Waiting, &f).unwrap();
        assert_eq!(
            (w.kind, w.detail.as_str()),
            (WaitKind::Delegate, "task 9 (reviewer)")
        );
        f.open_child = None;
        f.open_step = Some(("bash: cargo test".into(), "T3".into()));
        let w = waiting_on(TaskStatus::Active, &f).unwrap();
        assert_eq!((w.kind, w.since.as_str()), (WaitKind::Step, "T3"));
    }
}
