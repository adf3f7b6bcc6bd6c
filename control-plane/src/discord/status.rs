//! The one status message a running thread has in its channel (pure): what it
//! says, and when it may be edited. It is posted once the thread has run for
//! [`SHOW_AFTER`] (a quick answer needs none), then edited in place at most every
//! [`EDIT_EVERY`] as steps change, and edited a last time when the thread ends.
//! Steps are never posted one by one.

use std::time::{Duration, Instant};

/// A thread that answers sooner than this gets no status message.
pub const SHOW_AFTER: Duration = Duration::from_secs(2);
/// The least time between two edits of one status message.
pub const EDIT_EVERY: Duration = Duration::from_secs(2);
/// How often the elapsed time is brought up to date while nothing else changes.
pub const REFRESH_EVERY: Duration = Duration::from_secs(15);

/// What a status message shows of its thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    pub thread: u64,
    pub started: Instant,
    /// The step going on now (number, description), if any.
    pub step: Option<(u32, String)>,
    /// Steps that ended.
    pub steps_done: u32,
    /// Waiting for a person to approve a tool call.
    pub waiting: bool,
}

impl Progress {
    pub fn new(thread: u64, started: Instant) -> Progress {
        Progress {
            thread,
            started,
            step: None,
            steps_done: 0,
            waiting: false,
        }
    }

    /// The text while the thread runs.
    pub fn running_text(&self, now: Instant) -> String {
        let elapsed = format_elapsed(now.saturating_duration_since(self.started));
        let doing = match (&self.step, self.waiting) {
            (_, true) => "waiting for approval".to_string(),
            (Some((number, description)), false) => {
                format!(
                    "step {number}: {}",
                    crate::cli::render::one_line(description, 120)
                )
            }
            (None, false) => "starting".to_string(),
        };
        format!("⏳ Thread #{} · {doing} · {elapsed}", self.thread)
    }

    /// The text once the thread ended with `status`.
    pub fn ended_text(&self, status: &str, now: Instant) -> String {
        let elapsed = format_elapsed(now.saturating_duration_since(self.started));
        let mark = match status {
            "completed" => "✅",
            "killed" => "⏹️",
            _ => "❌",
        };
        let steps = self.steps_done;
        let plural = if steps == 1 { "" } else { "s" };
        format!(
            "{mark} Thread #{} {status} · {steps} step{plural} · {elapsed}",
            self.thread
        )
    }
}

/// `42 s`, `3 min 5 s`.
pub fn format_elapsed(elapsed: Duration) -> String {
    let secs = elapsed.as_secs();
    if secs < 60 {
        format!("{secs} s")
    } else {
        format!("{} min {} s", secs / 60, secs % 60)
    }
}

/// When the status message may change next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pacer {
    /// When the message was last posted or edited (`None`: not posted yet).
    last: Option<Instant>,
    /// Something changed since.
    dirty: bool,
}

impl Pacer {
    pub fn new() -> Pacer {
        Pacer {
            last: None,
            dirty: true,
        }
    }

    /// Something the message shows changed.
    pub fn changed(&mut self) {
        self.dirty = true;
    }

    /// When to post or edit next: soon after a change, and now and then to bring
    /// the elapsed time up to date.
    pub fn due(&self, started: Instant) -> Instant {
        match (self.last, self.dirty) {
            (None, _) => started + SHOW_AFTER,
            (Some(last), true) => last + EDIT_EVERY,
            (Some(last), false) => last + REFRESH_EVERY,
        }
    }

    /// The message was posted or edited at `now`.
    pub fn shown(&mut self, now: Instant) {
        self.last = Some(now);
        self.dirty = false;
    }

    pub fn posted(&self) -> bool {
        self.last.is_some()
    }
}

impl Default for Pacer {
    fn default() -> Self {
        Pacer::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_post_waits_and_edits_are_at_least_two_seconds_apart() {
        let start = Instant::now();
        let mut pacer = Pacer::new();
        assert_eq!(pacer.due(start), start + SHOW_AFTER);
        let shown = start + SHOW_AFTER;
        pacer.shown(shown);
        assert!(pacer.posted());
        assert_eq!(
            pacer.due(start),
            shown + REFRESH_EVERY,
            "nothing changed: only the elapsed time, seldom"
        );
        // Many changes in a burst: one edit, two seconds after the last.
        for _ in 0..50 {
            pacer.changed();
        }
        let next = pacer.due(start);
        assert_eq!(next, shown + EDIT_EVERY);
        pacer.shown(next);
        assert_eq!(pacer.due(start), next + REFRESH_EVERY);
    }

    #[test]
    fn the_text_shows_the_step_the_wait_and_the_end() {
        let start = Instant::now();
        let mut p = Progress::new(7, start);
        assert_eq!(p.running_text(start), "⏳ Thread #7 · starting · 0 s");
        p.step = Some((3, "bash: cargo test".into()));
        assert_eq!(
            p.running_text(start + Duration::from_secs(65)),
            "⏳ Thread #7 · step 3: bash: cargo test · 1 min 5 s"
        );
        p.waiting = true;
        assert!(p.running_text(start).contains("waiting for approval"));
        p.steps_done = 1;
        assert_eq!(
            p.ended_text("completed", start + Duration::from_secs(4)),
            "✅ Thread #7 completed · 1 step · 4 s"
        );
        assert!(p.ended_text("failed", start).starts_with("❌"));
    }
}
