//! The decisions of an agent's runs, as pure functions: where a message goes, what
//! becomes of a run whose worker died, when a run is stuck, what a continuation
//! carries. The actor does the I/O around them.

use std::time::Duration;

use chorus_proto::domain::ChatMessage;

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

/// What becomes of a run whose worker (or control plane) died under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterLoss {
    /// It never reached the worker's loop: hand the same run to the next worker.
    Requeue,
    /// Run it again from the stored history; `stalled` resumptions in a row stored
    /// nothing.
    Resume { stalled: u32 },
    /// Resumed too often without progress.
    Fail(String),
}

/// `started`: the worker reported anything of it; `stored`: messages the lost run
/// stored; `stalled_before`: the run's own count of fruitless resumptions before it.
pub fn after_loss(started: bool, stored: u64, stalled_before: u32, max_resumes: u32) -> AfterLoss {
    if !started {
        return AfterLoss::Requeue;
    }
    let stalled = if stored > 0 { 0 } else { stalled_before + 1 };
    if stalled > max_resumes {
        return AfterLoss::Fail(format!(
            "resumed {max_resumes} times in a row without any progress (no model reply or \
             tool result stored in between), so it is not resumed again"
        ));
    }
    AfterLoss::Resume { stalled }
}

/// A run is stuck when nothing is in progress (no step open: a long command or an
/// approval wait is a step in progress) and nothing happened for `stuck_after`.
pub fn is_stuck(open_steps: usize, quiet_for: Duration, stuck_after: Duration) -> bool {
    open_steps == 0 && quiet_for >= stuck_after
}

/// How often an agent's runs are checked for being stuck.
pub fn watchdog_period(stuck_after: Duration) -> Duration {
    (stuck_after / 4).clamp(Duration::from_millis(100), Duration::from_secs(5))
}

/// The context a continuation of an ended thread starts from: its messages, or as
/// many of the latest as fit `max_bytes` (starting at a user message, so no tool
/// result is cut from its call), with a note of what was left out.
pub fn seed_messages(messages: Vec<ChatMessage>, max_bytes: usize) -> Vec<ChatMessage> {
    use chorus_proto::domain::Role;
    let size = |m: &ChatMessage| {
        m.content.len()
            + m.tool_calls
                .iter()
                .map(|c| c.arguments.len() + c.name.len())
                .sum::<usize>()
    };
    let total: usize = messages.iter().map(size).sum();
    if total <= max_bytes {
        return messages;
    }
    let mut kept = 0;
    let mut start = messages.len();
    for (i, m) in messages.iter().enumerate().rev() {
        kept += size(m);
        if kept > max_bytes {
            break;
        }
        if m.role == Role::User {
            start = i;
        }
    }
    let left_out = start;
    let mut seed = vec![ChatMessage::user(format!(
        "[This conversation continues an earlier thread; its first {left_out} messages are \
         left out here for length.]"
    ))];
    seed.extend(messages.into_iter().skip(start));
    seed
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
        assert_eq!(after_loss(false, 0, 0, 3), AfterLoss::Requeue);
        assert_eq!(after_loss(true, 5, 2, 3), AfterLoss::Resume { stalled: 0 });
        assert_eq!(after_loss(true, 0, 0, 3), AfterLoss::Resume { stalled: 1 });
        assert_eq!(after_loss(true, 0, 2, 3), AfterLoss::Resume { stalled: 3 });
        let AfterLoss::Fail(why) = after_loss(true, 0, 3, 3) else {
            panic!("a fourth fruitless resumption must fail")
        };
        assert!(why.contains("3 times"), "{why}");
        assert!(matches!(after_loss(true, 0, 0, 0), AfterLoss::Fail(_)));
    }

    #[test]
    fn a_run_with_a_step_open_is_never_stuck() {
        let after = Duration::from_secs(10);
        assert!(!is_stuck(1, Duration::from_secs(3600), after));
        assert!(!is_stuck(0, Duration::from_secs(9), after));
        assert!(is_stuck(0, Duration::from_secs(10), after));
        assert_eq!(
            watchdog_period(Duration::from_secs(900)),
            Duration::from_secs(5)
        );
        assert_eq!(
            watchdog_period(Duration::from_secs(1)),
            Duration::from_millis(250)
        );
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
        assert_eq!(seed_messages(messages.clone(), 10_000), messages);
        let seed = seed_messages(messages, 50);
        assert_eq!(seed.len(), 3, "{seed:?}");
        assert!(seed[0].content.contains("first 3 messages are left out"));
        assert_eq!(seed[1].content, "second");
    }
}
