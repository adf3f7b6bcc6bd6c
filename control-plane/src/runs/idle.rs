//! The idle timer of one agent (F3), as pure state its actor keeps: when the agent
//! has had no activity for its idle timeout and no run is going, its context is
//! saved (trigger `idle_timeout`), cleared, and a notification goes to the feed.
//!
//! Activity is what the actor sees: a user message, a worker's event, a kill, an
//! approval's answer, a restore. Nothing polls: the actor sleeps until
//! [`IdleClock::deadline`]. An agent that was idle-saved is not saved again until
//! it is active again.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct IdleClock {
    last_active: Instant,
    /// `None` until read (the agent's own setting, else the server's); the inner
    /// `None` is "never".
    timeout: Option<Option<Duration>>,
    /// An idle save is going, started then.
    saving_since: Option<Instant>,
    /// Saved, and quiet since: nothing to do until the next activity.
    quiet: bool,
}

impl IdleClock {
    pub fn new(now: Instant) -> Self {
        IdleClock {
            last_active: now,
            timeout: None,
            saving_since: None,
            quiet: false,
        }
    }

    /// The agent did something: its timer starts over.
    pub fn active(&mut self, now: Instant) {
        self.last_active = self.last_active.max(now);
        self.quiet = false;
    }

    /// The agent's settings changed: its timeout is read again.
    pub fn configured(&mut self) {
        self.timeout = None;
    }

    pub fn needs_timeout(&self) -> bool {
        self.timeout.is_none()
    }

    pub fn set_timeout(&mut self, timeout: Option<Duration>) {
        self.timeout = Some(timeout);
    }

    /// When the idle save falls due, if it can: a timeout applies, no run is going
    /// (`busy`), none is being saved, and there was activity since the last save.
    pub fn deadline(&self, busy: bool) -> Option<Instant> {
        if busy || self.quiet || self.saving_since.is_some() {
            return None;
        }
        let timeout = self.timeout??;
        self.last_active.checked_add(timeout)
    }

    /// If the save is due at `now`, marks it started and returns the timeout (what
    /// the notification says the agent was idle for).
    pub fn fire(&mut self, now: Instant, busy: bool) -> Option<Duration> {
        let due = self.deadline(busy)?;
        if now < due {
            return None;
        }
        self.saving_since = Some(now);
        self.timeout.flatten()
    }

    /// The idle save ended. Quiet since it started: nothing more until activity.
    pub fn saved(&mut self) {
        if let Some(started) = self.saving_since.take()
            && self.last_active <= started
        {
            self.quiet = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    fn clock(t0: Instant, timeout: Option<Duration>) -> IdleClock {
        let mut clock = IdleClock::new(t0);
        assert!(clock.needs_timeout());
        clock.set_timeout(timeout);
        clock
    }

    #[test]
    fn due_a_timeout_after_the_last_activity_unless_busy_or_off() {
        let t0 = Instant::now();
        let mut c = clock(t0, Some(SECOND));
        assert_eq!(c.deadline(false), Some(t0 + SECOND));
        assert_eq!(c.deadline(true), None, "a run is going");
        assert_eq!(c.fire(t0 + Duration::from_millis(999), false), None);
        c.active(t0 + SECOND);
        assert_eq!(
            c.deadline(false),
            Some(t0 + 2 * SECOND),
            "activity restarts it"
        );
        // Activity stamped earlier than the latest never moves it back.
        c.active(t0);
        assert_eq!(c.deadline(false), Some(t0 + 2 * SECOND));
        assert_eq!(clock(t0, None).deadline(false), None, "never");
        let unread = IdleClock::new(t0);
        assert_eq!(unread.deadline(false), None, "timeout not read yet");
    }

    #[test]
    fn fires_once_then_waits_for_activity() {
        let t0 = Instant::now();
        let mut c = clock(t0, Some(SECOND));
        assert_eq!(c.fire(t0 + SECOND, true), None, "busy");
        assert_eq!(c.fire(t0 + SECOND, false), Some(SECOND));
        assert_eq!(c.deadline(false), None, "saving");
        assert_eq!(c.fire(t0 + 5 * SECOND, false), None);
        c.saved();
        assert_eq!(c.deadline(false), None, "quiet since: not again");
        c.active(t0 + 6 * SECOND);
        assert_eq!(c.deadline(false), Some(t0 + 7 * SECOND));
    }

    #[test]
    fn activity_during_a_save_starts_the_timer_over_after_it() {
        let t0 = Instant::now();
        let mut c = clock(t0, Some(SECOND));
        assert!(c.fire(t0 + SECOND, false).is_some());
        c.active(t0 + Duration::from_millis(1500)); // a reply while the summary is written
        c.saved();
        assert_eq!(
            c.deadline(false),
            Some(t0 + Duration::from_millis(2500)),
            "its own timeout from that reply"
        );
    }

    #[test]
    fn a_new_setting_is_read_again() {
        let t0 = Instant::now();
        let mut c = clock(t0, Some(SECOND));
        c.configured();
        assert!(c.needs_timeout());
        assert_eq!(c.deadline(false), None);
        c.set_timeout(Some(5 * SECOND));
        assert_eq!(c.deadline(false), Some(t0 + 5 * SECOND));
    }
}
