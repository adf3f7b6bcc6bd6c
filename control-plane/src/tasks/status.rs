//! Where a task stands ([`TaskStatus`]), the one table of the moves between statuses
//! ([`allowed_from`]), and the person's buttons ([`Button`]) with the status each
//! leads to from where it applies. Pure: the board (`board.rs`) checks every change
//! against [`allowed_from`], whoever asks for it (a person, an agent's report, Chorus).
//!
//! **Pause** is not a status of its own: a paused task is `blocked` with the reason
//! "paused by <who>" (`blocked_reason`), so everything that lists or filters blocked
//! tasks shows it, and **Resume** takes any blocked task back to `active` (the engine
//! then continues its thread). Pause applies to `active` and `waiting` tasks.
//!
//! **Fail** applies to every task not finished: it is a person's way out, and the
//! way a limit or a thread's failure ends a task whatever it was doing.

use serde::{Deserialize, Serialize};

/// Where a task stands. Stored and shown as the lower-case word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// The planner works on it.
    Planning,
    /// The planner asked questions; a person's answers are awaited.
    AwaitingInput,
    /// It has a plan (and an assignee); a person may start it.
    Planned,
    /// The assignee works on it.
    Active,
    /// Its worker paused on a person, a delegate or another agent.
    Waiting,
    /// Its worker reported it cannot go on, or a person paused it (`blocked_reason`).
    Blocked,
    /// Its worker reported it complete; a person accepts it or sends it back.
    Review,
    Completed,
    Failed,
}

impl TaskStatus {
    pub const ALL: [TaskStatus; 9] = [
        TaskStatus::Planning,
        TaskStatus::AwaitingInput,
        TaskStatus::Planned,
        TaskStatus::Active,
        TaskStatus::Waiting,
        TaskStatus::Blocked,
        TaskStatus::Review,
        TaskStatus::Completed,
        TaskStatus::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            TaskStatus::Planning => "planning",
            TaskStatus::AwaitingInput => "awaiting_input",
            TaskStatus::Planned => "planned",
            TaskStatus::Active => "active",
            TaskStatus::Waiting => "waiting",
            TaskStatus::Blocked => "blocked",
            TaskStatus::Review => "review",
            TaskStatus::Completed => "completed",
            TaskStatus::Failed => "failed",
        }
    }

    pub fn parse(s: &str) -> Option<TaskStatus> {
        TaskStatus::ALL.into_iter().find(|t| t.as_str() == s)
    }

    /// Completed or failed: nothing runs for it until a person reopens or retries it.
    pub fn is_finished(self) -> bool {
        matches!(self, TaskStatus::Completed | TaskStatus::Failed)
    }

    /// Not started yet (or reopened to its plan): the plan fields may be edited.
    pub fn before_start(self) -> bool {
        matches!(
            self,
            TaskStatus::Planning | TaskStatus::AwaitingInput | TaskStatus::Planned
        )
    }
}

impl std::fmt::Display for TaskStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The one table: the statuses a task in `from` may go to.
pub fn allowed_from(from: TaskStatus) -> &'static [TaskStatus] {
    use TaskStatus::*;
    match from {
        // The planner plans or asks; it (or a person) may give up.
        Planning => &[AwaitingInput, Planned, Failed],
        // Answers send it back to the planner.
        AwaitingInput => &[Planning, Failed],
        // Start.
        Planned => &[Active, Failed],
        // The worker's report or pause, or a person's Complete / Pause / Fail.
        Active => &[Waiting, Blocked, Review, Completed, Failed],
        // The answer or the delegate's report arrives; or a person pauses, completes
        // or fails it.
        Waiting => &[Active, Blocked, Completed, Failed],
        // Resume (or an answer to what blocked it); or a person completes or fails it.
        Blocked => &[Active, Completed, Failed],
        // Accept, or send back with a message.
        Review => &[Completed, Active, Failed],
        // Reopen (to planning, or to its plan) or retry.
        Completed | Failed => &[Planning, Planned, Active],
    }
}

/// Whether a task may go from `from` to `to`.
pub fn may_go(from: TaskStatus, to: TaskStatus) -> bool {
    allowed_from(from).contains(&to)
}

/// A person's buttons (the seed's, and review's two).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Button {
    Start,
    Pause,
    Resume,
    Complete,
    Fail,
    Reopen,
    Retry,
    Accept,
    SendBack,
}

impl Button {
    pub const ALL: [Button; 9] = [
        Button::Start,
        Button::Pause,
        Button::Resume,
        Button::Complete,
        Button::Fail,
        Button::Reopen,
        Button::Retry,
        Button::Accept,
        Button::SendBack,
    ];

    /// The word of its route (`POST /api/tasks/{id}/<word>`).
    pub fn as_str(self) -> &'static str {
        match self {
            Button::Start => "start",
            Button::Pause => "pause",
            Button::Resume => "resume",
            Button::Complete => "complete",
            Button::Fail => "fail",
            Button::Reopen => "reopen",
            Button::Retry => "retry",
            Button::Accept => "accept",
            Button::SendBack => "send-back",
        }
    }

    /// The statuses it applies to.
    pub fn applies_to(self) -> &'static [TaskStatus] {
        use TaskStatus::*;
        match self {
            Button::Start => &[Planned],
            Button::Pause => &[Active, Waiting],
            Button::Resume => &[Blocked],
            Button::Complete => &[Active, Waiting, Blocked, Review],
            Button::Fail => &[
                Planning,
                AwaitingInput,
                Planned,
                Active,
                Waiting,
                Blocked,
                Review,
            ],
            Button::Reopen => &[Completed, Failed],
            // A new attempt: after a failure, or a report that it cannot go on.
            Button::Retry => &[Failed, Blocked],
            Button::Accept | Button::SendBack => &[Review],
        }
    }

    /// The status it leads to from `from` (`None` where it does not apply).
    /// `has_plan`: the task has an assignee, so a reopened task goes back to its
    /// plan (`planned`) rather than to the planner.
    pub fn leads_to(self, from: TaskStatus, has_plan: bool) -> Option<TaskStatus> {
        if !self.applies_to().contains(&from) {
            return None;
        }
        let to = match self {
            Button::Start | Button::Resume | Button::Retry | Button::SendBack => TaskStatus::Active,
            Button::Pause => TaskStatus::Blocked,
            Button::Complete | Button::Accept => TaskStatus::Completed,
            Button::Fail => TaskStatus::Failed,
            Button::Reopen if has_plan => TaskStatus::Planned,
            Button::Reopen => TaskStatus::Planning,
        };
        // Every button's move is one of the table's (a unit test checks it for all).
        may_go(from, to).then_some(to)
    }
}

/// The buttons valid for a task in `status` (the API's `actions`, which the front
/// ends show and nothing else): those that apply there; Start and Retry only when
/// the task has an assignee to work it.
pub fn actions(status: TaskStatus, has_assignee: bool) -> Vec<Button> {
    Button::ALL
        .into_iter()
        .filter(|b| b.leads_to(status, has_assignee).is_some())
        .filter(|b| has_assignee || !matches!(b, Button::Start | Button::Retry))
        .collect()
}

impl std::fmt::Display for Button {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The words of `statuses`, comma-separated (for errors).
pub fn words(statuses: &[TaskStatus]) -> String {
    statuses
        .iter()
        .map(|s| s.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::TaskStatus::*;
    use super::*;

    #[test]
    fn a_status_is_one_word_stored_and_shown_alike() {
        for status in TaskStatus::ALL {
            assert_eq!(TaskStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert_eq!(TaskStatus::parse("pending"), None);
        assert_eq!(TaskStatus::parse("Planning"), None);
    }

    /// The table is the seed's lifecycle, every move spelled out: what is not
    /// listed here is refused.
    #[test]
    fn the_table_is_the_lifecycle() {
        let expected: [(TaskStatus, &[TaskStatus]); 9] = [
            (Planning, &[AwaitingInput, Planned, Failed]),
            (AwaitingInput, &[Planning, Failed]),
            (Planned, &[Active, Failed]),
            (Active, &[Waiting, Blocked, Review, Completed, Failed]),
            (Waiting, &[Active, Blocked, Completed, Failed]),
            (Blocked, &[Active, Completed, Failed]),
            (Review, &[Completed, Active, Failed]),
            (Completed, &[Planning, Planned, Active]),
            (Failed, &[Planning, Planned, Active]),
        ];
        for (from, tos) in expected {
            for to in TaskStatus::ALL {
                assert_eq!(may_go(from, to), tos.contains(&to), "{from} -> {to}");
            }
        }
        // Nothing stays where it is by a "change", and nothing skips planning.
        for status in TaskStatus::ALL {
            assert!(!may_go(status, status), "{status}");
        }
        assert!(
            !may_go(Planning, Active),
            "a task is started only from its plan"
        );
        assert!(
            !may_go(AwaitingInput, Planned),
            "answers go back to the planner"
        );
        assert!(!may_go(Review, Waiting));
    }

    #[test]
    fn the_buttons_lead_where_the_seed_says_and_only_along_the_table() {
        let cases = [
            (Button::Start, Planned, Active),
            (Button::Pause, Active, Blocked),
            (Button::Pause, Waiting, Blocked),
            (Button::Resume, Blocked, Active),
            (Button::Complete, Active, Completed),
            (Button::Complete, Blocked, Completed),
            (Button::Fail, Planning, Failed),
            (Button::Fail, Waiting, Failed),
            (Button::Retry, Failed, Active),
            (Button::Retry, Blocked, Active),
            (Button::Accept, Review, Completed),
            (Button::SendBack, Review, Active),
        ];
        for (button, from, to) in cases {
            assert_eq!(
                button.leads_to(from, true),
                Some(to),
                "{button} from {from}"
            );
        }
        assert_eq!(Button::Reopen.leads_to(Completed, true), Some(Planned));
        assert_eq!(Button::Reopen.leads_to(Failed, false), Some(Planning));
        // Where they do not apply.
        assert_eq!(Button::Start.leads_to(Planning, true), None);
        assert_eq!(Button::Pause.leads_to(Planned, true), None);
        assert_eq!(Button::Resume.leads_to(Active, true), None);
        assert_eq!(Button::Accept.leads_to(Active, true), None);
        assert_eq!(Button::Fail.leads_to(Completed, true), None);
        assert_eq!(Button::Reopen.leads_to(Active, true), None);
        assert_eq!(
            Button::Retry.leads_to(Completed, true),
            None,
            "a completed task is reopened, not retried"
        );
        // Every button, from everywhere: where it leads is a move of the table, and
        // where it applies it leads somewhere.
        for button in Button::ALL {
            for from in TaskStatus::ALL {
                for plan in [true, false] {
                    match button.leads_to(from, plan) {
                        Some(to) => assert!(may_go(from, to), "{button}: {from} -> {to}"),
                        None => assert!(!button.applies_to().contains(&from), "{button} {from}"),
                    }
                }
            }
        }
    }

    /// What a front end shows for each status: the buttons of the seed, from the
    /// one table, and nothing a person could not press.
    #[test]
    fn the_actions_of_each_status_are_the_buttons_that_apply() {
        let words = |status, plan| -> Vec<&str> {
            actions(status, plan)
                .into_iter()
                .map(Button::as_str)
                .collect()
        };
        assert_eq!(words(Planning, false), ["fail"]);
        assert_eq!(words(AwaitingInput, false), ["fail"]);
        assert_eq!(words(Planned, true), ["start", "fail"]);
        assert_eq!(words(Planned, false), ["fail"], "no assignee to start");
        assert_eq!(words(Active, true), ["pause", "complete", "fail"]);
        assert_eq!(words(Waiting, true), ["pause", "complete", "fail"]);
        assert_eq!(
            words(Blocked, true),
            ["resume", "complete", "fail", "retry"]
        );
        assert_eq!(
            words(Review, true),
            ["complete", "fail", "accept", "send-back"]
        );
        assert_eq!(words(Completed, true), ["reopen"]);
        assert_eq!(words(Failed, true), ["reopen", "retry"]);
        assert_eq!(words(Failed, false), ["reopen"]);
        for status in TaskStatus::ALL {
            for button in actions(status, true) {
                assert!(button.applies_to().contains(&status), "{button} {status}");
            }
        }
    }
}
