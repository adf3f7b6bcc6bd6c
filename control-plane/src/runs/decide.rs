//! The decisions of an agent's runs, as pure functions: where a message goes, what
//! becomes of a run whose worker died, when a run is stuck, what a continuation
//! carries. The actor does the I/O around them.

use std::time::Duration;

use chorus_proto::domain::{ChatMessage, StepKind};

use crate::store::ThreadStatus;

/// Where a user message goes (E1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// A new thread (no `reply_to`, or one naming no message of this agent).
    New,
    /// Into a thread whose run is going: the model sees it at its next call.
    Inject { thread: u64 },
    /// Into an idle thread (waiting for its user): its next run starts.
    Wake { thread: u64 },
    /// A new thread seeded with an ended thread's context.
    Continue { from: u64 },
}

/// `target`: the thread the replied-to message belongs to, its status, and whether
/// a run of it is queued or going here.
pub fn route(target: Option<(u64, ThreadStatus, bool)>) -> Route {
    match target {
        None => Route::New,
        Some((thread, _, true)) => Route::Inject { thread },
        Some((thread, status, false)) => match status {
            ThreadStatus::Idle => Route::Wake { thread },
            // Going in the store but not here: its run is about to be resumed, and
            // takes the message with it.
            ThreadStatus::Running | ThreadStatus::WaitingForPermission => Route::Inject { thread },
            ThreadStatus::Completed | ThreadStatus::Failed | ThreadStatus::Killed => {
                Route::Continue { from: thread }
            }
        },
    }
}

/// What becomes of one of the agent's runs when a worker of it is lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnLoss {
    /// Not this worker's run: nothing.
    Untouched,
    /// It waited for a worker that never attached: it cannot start.
    Fail,
    /// It was handed to the lost worker, which reported nothing of it: the same run
    /// goes to the next worker.
    Requeue,
    /// The lost worker had started it: resume it as a new attempt ([`resume`]).
    Resume,
}

/// `delivered_to`: the generation the run was handed to; `started`: that worker
/// reported anything of it; `lost`: the generation lost, `attached`: whether it
/// ever attached.
pub fn on_loss(delivered_to: Option<u64>, started: bool, lost: u64, attached: bool) -> OnLoss {
    match delivered_to {
        None if !attached => OnLoss::Fail,
        Some(generation) if generation == lost => {
            if started {
                OnLoss::Resume
            } else {
                OnLoss::Requeue
            }
        }
        _ => OnLoss::Untouched,
    }
}

/// Whether a lost run that had started is run again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resumption {
    /// Run it again from the stored history; `stalled` resumptions in a row stored
    /// nothing.
    Resume { stalled: u32 },
    /// Resumed too often without progress.
    Fail(String),
}

/// `stored`: messages the lost run stored; `stalled_before`: the run's own count of
/// fruitless resumptions before it.
pub fn resume(stored: u64, stalled_before: u32, max_resumes: u32) -> Resumption {
    let stalled = if stored > 0 { 0 } else { stalled_before + 1 };
    if stalled > max_resumes {
        return Resumption::Fail(format!(
            "resumed {max_resumes} times in a row without any progress (no model reply or \
             tool result stored in between), so it is not resumed again"
        ));
    }
    Resumption::Resume { stalled }
}

/// A run is stuck when it reported nothing (no step, no text, no message) for
/// `stuck_after` and is not waiting on work that may rightly take that long: a tool
/// (a tool step, wherever it runs: a command in the worker, or a control-plane tool
/// waiting hours for another agent or a person, `runs_in: control_plane`) or a
/// person (a permission step). A model call or a retry
/// wait that long is stuck: the provider's own timeouts should have ended it.
pub fn is_stuck<'a>(
    open_steps: impl IntoIterator<Item = &'a StepKind>,
    quiet_for: Duration,
    stuck_after: Duration,
) -> bool {
    quiet_for >= stuck_after
        && !open_steps
            .into_iter()
            .any(|kind| matches!(kind, StepKind::Tool | StepKind::Permission))
}

/// How often an agent's runs are checked for being stuck.
pub fn watchdog_period(stuck_after: Duration) -> Duration {
    (stuck_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// What a run of a thread shows the model of its stored messages (F1): those from
/// the first user message created at or after `cutoff` (the later of the agent's
/// last clear and the start of its rolling window), but always at least the latest
/// exchange, the one the run is about. When older ones are left out, a note at the
/// start says so. `messages` are `(created_at, message)` in order; times compare
/// as the store writes them (RFC 3339, UTC, fixed width).
pub fn within_window(messages: Vec<(String, ChatMessage)>, cutoff: &str) -> Vec<ChatMessage> {
    use chorus_proto::domain::Role;
    let is_user = |(_, m): &(String, ChatMessage)| m.role == Role::User;
    let first_inside = messages
        .iter()
        .position(|entry| is_user(entry) && entry.0.as_str() >= cutoff);
    let latest_user = messages.iter().rposition(is_user);
    let start = match (first_inside, latest_user) {
        (Some(inside), Some(latest)) => inside.min(latest),
        (None, Some(latest)) => latest,
        (_, None) => 0,
    };
    let mut kept = Vec::with_capacity(messages.len() - start + 1);
    if start > 0 {
        kept.push(ChatMessage::user(format!(
            "[The first {start} messages of this thread are outside the context window (the \
             agent's context was cleared, or they are older than its rolling window) and are \
             left out here.]"
        )));
    }
    kept.extend(messages.into_iter().skip(start).map(|(_, m)| m));
    kept
}

/// Where the latest whole exchanges of `messages` that fit `max_bytes` start: the
/// index of a user message (so no tool result is cut from its call), or
/// `messages.len()` when not even the last exchange fits; 0 when all fit.
pub fn latest_fitting(messages: &[ChatMessage], max_bytes: usize) -> usize {
    use chorus_proto::domain::Role;
    let size = |m: &ChatMessage| {
        m.content.len()
            + m.tool_calls
                .iter()
                .map(|c| c.arguments.len() + c.name.len())
                .sum::<usize>()
    };
    let mut kept = 0;
    let mut start = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        kept += size(m);
        if kept > max_bytes {
            return start;
        }
        if m.role == Role::User {
            start = i;
        }
    }
    0
}

/// A long thread cut for its continuation: the summary of (or a note about) what
/// was left out, then the latest whole exchanges that fit.
#[derive(Debug, Clone, PartialEq)]
pub struct Seed {
    /// The messages left out, oldest first (empty when everything fits).
    pub left_out: Vec<ChatMessage>,
    /// What the continuation starts from.
    pub kept: Vec<ChatMessage>,
}

/// Splits an ended thread's messages for its continuation (see [`latest_fitting`]).
pub fn seed(mut messages: Vec<ChatMessage>, max_bytes: usize) -> Seed {
    let start = latest_fitting(&messages, max_bytes);
    let kept = messages.split_off(start);
    Seed {
        left_out: messages,
        kept,
    }
}

/// The first message of a continuation that left `left_out` messages out: the
/// model's summary of them, or, without one, a note that they are missing.
pub fn seed_note(left_out: usize, summary: Option<&str>) -> ChatMessage {
    ChatMessage::user(match summary {
        Some(summary) => format!(
            "[This conversation continues an earlier thread. A summary of its first \
             {left_out} messages, which are left out here for length:]\n\n{summary}"
        ),
        None => format!(
            "[This conversation continues an earlier thread; its first {left_out} messages are \
             left out here for length.]"
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::ToolCall;

    #[test]
    fn a_message_goes_where_its_reply_points() {
        assert_eq!(route(None), Route::New);
        assert_eq!(
            route(Some((3, ThreadStatus::Running, true))),
            Route::Inject { thread: 3 }
        );
        assert_eq!(
            route(Some((3, ThreadStatus::WaitingForPermission, true))),
            Route::Inject { thread: 3 }
        );
        assert_eq!(
            route(Some((3, ThreadStatus::Idle, false))),
            Route::Wake { thread: 3 }
        );
        for ended in [
            ThreadStatus::Completed,
            ThreadStatus::Failed,
            ThreadStatus::Killed,
        ] {
            assert_eq!(route(Some((3, ended, false))), Route::Continue { from: 3 });
        }
        // Still running in the store while its run waits to be resumed.
        assert_eq!(
            route(Some((3, ThreadStatus::Running, false))),
            Route::Inject { thread: 3 }
        );
    }

    #[test]
    fn a_lost_run_is_resumed_until_it_stalls_too_often() {
        assert_eq!(resume(5, 2, 3), Resumption::Resume { stalled: 0 });
        assert_eq!(resume(0, 0, 3), Resumption::Resume { stalled: 1 });
        assert_eq!(resume(0, 2, 3), Resumption::Resume { stalled: 3 });
        let Resumption::Fail(why) = resume(0, 3, 3) else {
            panic!("a fourth fruitless resumption must fail");
        };
        assert!(why.contains("3 times"), "{why}");
        assert!(matches!(resume(0, 0, 0), Resumption::Fail(_)));
    }

    #[test]
    fn a_workers_loss_touches_only_its_own_runs() {
        // Handed to the lost worker: resumed once it had started, else handed on.
        assert_eq!(on_loss(Some(4), true, 4, true), OnLoss::Resume);
        assert_eq!(on_loss(Some(4), false, 4, true), OnLoss::Requeue);
        // Another generation's run, or one still queued behind a worker that ran.
        assert_eq!(on_loss(Some(3), true, 4, true), OnLoss::Untouched);
        assert_eq!(on_loss(None, false, 4, true), OnLoss::Untouched);
        // Queued behind a worker that never attached: it cannot start.
        assert_eq!(on_loss(None, false, 4, false), OnLoss::Fail);
    }

    #[test]
    fn a_run_is_stuck_when_quiet_and_not_waiting_on_a_command_or_a_person() {
        let after = Duration::from_secs(10);
        let hour = Duration::from_secs(3600);
        assert!(!is_stuck(&[StepKind::Tool], hour, after));
        assert!(!is_stuck(
            &[StepKind::LlmCall, StepKind::Permission],
            hour,
            after
        ));
        assert!(!is_stuck(&[], Duration::from_secs(9), after));
        assert!(is_stuck(&[], Duration::from_secs(10), after));
        assert!(is_stuck(&[StepKind::LlmCall], after, after));
        assert!(is_stuck(&[StepKind::Wait], after, after));
        assert_eq!(
            watchdog_period(Duration::from_secs(900)),
            Duration::from_secs(5)
        );
        assert_eq!(
            watchdog_period(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
    }

    /// A control-plane tool's step, as the worker reports it (open from before its
    /// check, marked `runs_in: control_plane`), keeps a quiet run from being stuck
    /// for as long as it stays open; once it ends, the same quiet is stuck.
    #[test]
    fn an_open_control_plane_tool_step_is_a_running_tool() {
        use chorus_proto::domain::StepStarted;
        use chorus_proto::tools::RunsIn;
        let step = StepStarted {
            run_id: "r".into(),
            number: 3,
            kind: StepKind::Tool,
            description: "Executing self_edit_permissions in the control plane".into(),
            started_at_ms: 0,
            runs_in: Some(RunsIn::ControlPlane),
        };
        let after = Duration::from_secs(10);
        let days = Duration::from_secs(3 * 24 * 3600);
        assert!(!is_stuck(&[step.kind], days, after));
        assert!(!is_stuck(&[StepKind::LlmCall, step.kind], days, after));
        assert!(is_stuck(&[], days, after), "ended, the quiet is stuck");
    }

    #[test]
    fn a_thread_is_shown_from_the_context_cutoff_but_never_without_its_latest_exchange() {
        let at = |t: &str, m: ChatMessage| (format!("2026-11-23T{t}Z"), m);
        let messages = vec![
            at("08:00:00.000", ChatMessage::user("old")),
            at("08:00:01.000", ChatMessage::assistant("old answer", vec![])),
            at("10:00:00.000", ChatMessage::user("new")),
            at("10:00:01.000", ChatMessage::assistant("new answer", vec![])),
        ];
        let contents = |m: Vec<ChatMessage>| m.into_iter().map(|m| m.content).collect::<Vec<_>>();
        // Everything inside: all of it, no note.
        assert_eq!(
            contents(within_window(messages.clone(), "2026-11-23T07:00:00.000Z")),
            ["old", "old answer", "new", "new answer"]
        );
        // A clear at 09:00: from the first user message after it, with a note.
        let shown = contents(within_window(messages.clone(), "2026-11-23T09:00:00.000Z"));
        assert!(shown[0].contains("first 2 messages"), "{shown:?}");
        assert_eq!(shown[1..], ["new", "new answer"]);
        // Cleared after everything: still the latest exchange.
        let shown = contents(within_window(messages.clone(), "2026-11-23T11:00:00.000Z"));
        assert_eq!(shown[1..], ["new", "new answer"]);
        // An answer inside the window whose question is outside is not cut from it.
        let shown = contents(within_window(messages, "2026-11-23T08:00:00.500Z"));
        assert_eq!(shown[1..], ["new", "new answer"]);
    }

    #[test]
    fn a_long_context_is_seeded_from_its_latest_whole_exchanges() {
        let call = ToolCall {
            id: "c".into(),
            name: "view".into(),
            arguments: "{}".into(),
        };
        let messages = vec![
            ChatMessage::user("a".repeat(100)),
            ChatMessage::assistant("", vec![call.clone()]),
            ChatMessage::tool_result(&call, "b".repeat(100), false),
            ChatMessage::user("second"),
            ChatMessage::assistant("done", vec![]),
        ];
        let all = seed(messages.clone(), 10_000);
        assert!(all.left_out.is_empty());
        assert_eq!(all.kept, messages);
        let cut = seed(messages.clone(), 50);
        assert_eq!(cut.left_out, messages[..3]);
        assert_eq!(cut.kept, messages[3..]);
        // Not even the last exchange fits: everything is left out.
        assert_eq!(latest_fitting(&messages, 3), messages.len());
        assert!(
            seed_note(3, None)
                .content
                .contains("first 3 messages are left out")
        );
        let note = seed_note(3, Some("They built X."));
        assert!(note.content.contains("summary of its first 3 messages"));
        assert!(note.content.ends_with("They built X."));
    }
}
