//! Awareness of the agent's other threads (SPEC E5): a worker-wide board of the runs
//! this worker is running, kept current as their steps begin and end, and the block
//! each run puts into its system prompt so the model knows what else the agent is
//! doing (seed 001's format).
//!
//! Invariant: with fewer than two active threads nothing is added, so the common
//! case keeps its prompt (and the provider's prompt cache) unchanged. The block is
//! bounded: at most [`MAX_LISTED`] threads, each line at most [`MAX_LINE_CHARS`].

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};

use chorus_proto::domain::StepKind;

/// Threads listed in one block; the rest are counted.
pub const MAX_LISTED: usize = 20;
/// Characters of one thread's line, beyond which it is cut.
pub const MAX_LINE_CHARS: usize = 200;

/// What one thread is doing, as the block shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ThreadState {
    pub thread_id: u64,
    pub summary: String,
    pub started_at_ms: i64,
    /// The number of its latest step (0 before the first).
    pub step: u32,
    /// The description of the step in progress (or of the last one).
    pub current: String,
    pub waiting_for_permission: bool,
}

/// The runs of this worker (so of its one agent), by run id.
#[derive(Default)]
pub struct Board {
    runs: Mutex<HashMap<String, Entry>>,
}

struct Entry {
    state: ThreadState,
    /// Steps begun and not ended (a lock wait or a permission wait is open inside
    /// its tool step): the newest is the current one.
    open: Vec<(u32, StepKind, String)>,
}

impl Board {
    fn runs(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A run starts: `summary` is its thread's summary line ("thread N" when it has
    /// none yet); `started_at_ms` when its thread started (now when unknown).
    pub fn join(&self, run_id: &str, thread_id: u64, summary: &str, started_at_ms: i64) {
        let summary = match summary.trim() {
            "" => format!("thread {thread_id}"),
            text => text.to_string(),
        };
        let started_at_ms = if started_at_ms > 0 {
            started_at_ms
        } else {
            chrono::Utc::now().timestamp_millis()
        };
        self.runs().insert(
            run_id.to_string(),
            Entry {
                state: ThreadState {
                    thread_id,
                    summary,
                    started_at_ms,
                    step: 0,
                    current: "starting".into(),
                    waiting_for_permission: false,
                },
                open: Vec::new(),
            },
        );
    }

    /// A run ended.
    pub fn leave(&self, run_id: &str) {
        self.runs().remove(run_id);
    }

    pub fn step_began(&self, run_id: &str, number: u32, kind: StepKind, description: &str) {
        if let Some(entry) = self.runs().get_mut(run_id) {
            entry.open.push((number, kind, description.to_string()));
            entry.state.step = number;
            entry.refresh();
        }
    }

    /// The run is about to begin step `number` (a model call, whose system prompt
    /// is built before the step begins): its own line shows that step, not the one
    /// before it.
    pub fn next_step(&self, run_id: &str, number: u32, description: &str) {
        if let Some(entry) = self.runs().get_mut(run_id) {
            entry.state.step = number;
            entry.state.current = description.to_string();
        }
    }

    pub fn step_ended(&self, run_id: &str, number: u32) {
        if let Some(entry) = self.runs().get_mut(run_id) {
            entry.open.retain(|(n, _, _)| *n != number);
            entry.refresh();
        }
    }

    /// The block for `run_id`'s system prompt, or `None` when its thread is the
    /// agent's only one.
    pub fn prompt_block(&self, run_id: &str) -> Option<String> {
        let (this, threads) = {
            let runs = self.runs();
            let this = runs.get(run_id)?.state.thread_id;
            let threads: Vec<ThreadState> = runs.values().map(|e| e.state.clone()).collect();
            (this, threads)
        };
        describe_threads(this, &threads, chrono::Utc::now().timestamp_millis())
    }
}

impl Entry {
    fn refresh(&mut self) {
        if let Some((_, _, description)) = self.open.last() {
            self.state.current = description.clone();
        }
        self.state.waiting_for_permission = self
            .open
            .iter()
            .any(|(_, kind, _)| *kind == StepKind::Permission);
    }
}

/// The block that tells a thread's model about the agent's active threads: its own
/// first, then the others by thread id. `None` with fewer than two threads. Pure.
pub fn describe_threads(this_thread: u64, threads: &[ThreadState], now_ms: i64) -> Option<String> {
    let mut ordered: Vec<&ThreadState> = threads.iter().collect();
    ordered.sort_by_key(|t| (t.thread_id != this_thread, t.thread_id));
    ordered.dedup_by_key(|t| t.thread_id);
    if ordered.len() < 2 {
        return None;
    }
    let mut out = String::from("Active threads in this agent:");
    for thread in ordered.iter().take(MAX_LISTED) {
        let marker = if thread.thread_id == this_thread {
            " (this thread)"
        } else {
            ""
        };
        let step = if thread.step == 0 {
            "not started".to_string()
        } else {
            format!("step {}", thread.step)
        };
        let mut line = format!(
            "Thread #{}{marker}: {} — {step}, {} elapsed, currently: {}",
            thread.thread_id,
            one_line(&thread.summary),
            elapsed(now_ms.saturating_sub(thread.started_at_ms)),
            one_line(&thread.current),
        );
        if thread.waiting_for_permission {
            line.push_str(" [waiting_for_permission]");
        }
        out.push_str("\n  ");
        out.push_str(&cut(&line, MAX_LINE_CHARS));
    }
    if ordered.len() > MAX_LISTED {
        out.push_str(&format!("\n  … and {} more", ordered.len() - MAX_LISTED));
    }
    Some(out)
}

/// Text on one line: a summary or a command may hold line breaks.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// At most `max` characters, with `…` where it was cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max - 1).collect();
    out.push('…');
    out
}

/// "45s", "12m 5s", "3h 20m".
fn elapsed(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        0..60 => format!("{secs}s"),
        60..3600 => format!("{}m {}s", secs / 60, secs % 60),
        _ => format!("{}h {}m", secs / 3600, secs % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread(id: u64, summary: &str, step: u32, current: &str, started: i64) -> ThreadState {
        ThreadState {
            thread_id: id,
            summary: summary.into(),
            started_at_ms: started,
            step,
            current: current.into(),
            waiting_for_permission: false,
        }
    }

    #[test]
    fn the_block_has_seed_001s_format() {
        let now = 1_000_000;
        let mut second = thread(
            2,
            "Writing user model tests",
            3,
            "Calling LLM",
            now - 12_400,
        );
        second.waiting_for_permission = true;
        let threads = [
            second,
            thread(
                1,
                "Refactoring auth module",
                7,
                "Executing bash: ruff check",
                now - 45_000,
            ),
        ];
        assert_eq!(
            describe_threads(1, &threads, now).unwrap(),
            "Active threads in this agent:\n\
             \x20 Thread #1 (this thread): Refactoring auth module — step 7, 45s elapsed, currently: Executing bash: ruff check\n\
             \x20 Thread #2: Writing user model tests — step 3, 12s elapsed, currently: Calling LLM [waiting_for_permission]"
        );
        // Seen from thread 2, its own line comes first.
        let from_two = describe_threads(2, &threads, now).unwrap();
        assert!(from_two.contains("\n  Thread #2 (this thread): Writing"));
        assert!(from_two.ends_with("currently: Executing bash: ruff check"));
    }

    #[test]
    fn one_thread_adds_nothing() {
        let only = [thread(4, "alone", 1, "Calling LLM", 0)];
        assert_eq!(describe_threads(4, &only, 10_000), None);
        assert_eq!(describe_threads(4, &[], 10_000), None);
    }

    #[test]
    fn the_block_is_bounded_in_threads_and_line_length() {
        let long = "word ".repeat(200);
        let threads: Vec<ThreadState> = (1..=25)
            .map(|id| thread(id, &long, 1, "multi\nline\ncommand", 0))
            .collect();
        let block = describe_threads(25, &threads, 3_725_000).unwrap();
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines.len(), 1 + MAX_LISTED + 1);
        assert!(lines[1].starts_with("  Thread #25 (this thread)"));
        assert!(lines[2].starts_with("  Thread #1:"));
        assert_eq!(lines.last().unwrap(), &"  … and 5 more");
        for line in &lines[1..=MAX_LISTED] {
            assert_eq!(line.chars().count(), 2 + MAX_LINE_CHARS, "{line}");
            assert!(line.ends_with('…'));
        }
        let short: Vec<ThreadState> = (1..=2)
            .map(|id| thread(id, "s", 2, "multi\nline\ncommand", 0))
            .collect();
        let block = describe_threads(1, &short, 3_725_000).unwrap();
        assert!(
            block.contains("1h 2m elapsed, currently: multi line command"),
            "{block}"
        );
    }

    #[test]
    fn the_board_follows_steps_and_permission_waits() {
        let board = Board::default();
        board.join("r1", 1, "", 0);
        assert_eq!(board.prompt_block("r1"), None, "one thread: nothing");
        board.join("r2", 2, "Writing tests", 0);
        board.step_began("r2", 5, StepKind::Tool, "Executing bash: make");
        board.step_began(
            "r2",
            6,
            StepKind::Permission,
            "Waiting for approval: bash make",
        );
        let block = board.prompt_block("r1").unwrap();
        assert!(
            block.contains("Thread #1 (this thread): thread 1 — not started"),
            "{block}"
        );
        assert!(
            block.contains(
                "Thread #2: Writing tests — step 6, 0s elapsed, currently: Waiting for approval: bash make [waiting_for_permission]"
            ),
            "{block}"
        );
        board.step_ended("r2", 6);
        let block = board.prompt_block("r1").unwrap();
        assert!(
            block.ends_with("currently: Executing bash: make"),
            "back to the tool step: {block}"
        );
        board.leave("r2");
        assert_eq!(board.prompt_block("r1"), None);
        assert_eq!(board.prompt_block("unknown"), None);
    }
}
