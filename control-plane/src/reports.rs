//! Checks on what a worker reports, before it is stored. A worker runs a model's
//! tool loop and bash; it may be buggy or taken over, so what it says is bounded:
//! - numbers are sane: token counts and durations within what any real call has,
//!   timestamps near the control plane's clock (SQLite stores i64, so a u64 over
//!   `i64::MAX` must never reach it and wrap);
//! - one run stores a bounded number of events and bytes ([`RunBudget`]): a run over
//!   its budget is failed and cancelled, never a database that grows without end;
//! - one worker's events arrive at a bounded rate ([`WorkerRate`]): a flood is slowed
//!   down (the connection reads no faster), never an unbounded queue here.
//!
//! Pure: no I/O, no clock (callers pass the time).
//!
//! The bounds: token counts over 10^9 per call become unknown, durations over 7 days are
//! clamped, timestamps more than a day off are replaced; a run stores at most 50,000
//! steps and messages and 512 MiB; a worker is read at most 2,000 messages and 32 MiB a
//! second (2 s burst).

use std::time::{Duration, Instant};

use chorus_proto::domain::{StepEnded, StepStarted, WorkerEvent};

use crate::token_bucket::TokenBucket;

/// More tokens than any model call uses (context windows are a few million).
pub const MAX_TOKENS_PER_CALL: u64 = 1_000_000_000;
/// Longer than any step can take (approval waits and bash timeouts are hours).
pub const MAX_STEP_DURATION_MS: u64 = 7 * 24 * 3600 * 1000;
/// How far a worker's clock may be from the control plane's before its timestamps
/// are replaced by the control plane's.
pub const MAX_CLOCK_SKEW_MS: i64 = 24 * 3600 * 1000;

/// Sanity-checks a step's start; returns what was corrected, for the log.
pub fn check_step_started(step: &mut StepStarted, now_ms: i64) -> Vec<String> {
    let mut notes = Vec::new();
    if step.started_at_ms.abs_diff(now_ms) > MAX_CLOCK_SKEW_MS as u64 {
        notes.push(format!(
            "start time {} ms is more than a day from the control plane's clock; using the control plane's",
            step.started_at_ms
        ));
        step.started_at_ms = now_ms;
    }
    notes
}

/// Sanity-checks a step's end; returns what was corrected, for the log.
pub fn check_step_ended(step: &mut StepEnded, now_ms: i64) -> Vec<String> {
    let mut notes = Vec::new();
    if step.ended_at_ms.abs_diff(now_ms) > MAX_CLOCK_SKEW_MS as u64 {
        notes.push(format!(
            "end time {} ms is more than a day from the control plane's clock; using the control plane's",
            step.ended_at_ms
        ));
        step.ended_at_ms = now_ms;
    }
    if step.duration_ms > MAX_STEP_DURATION_MS {
        notes.push(format!(
            "duration {} ms is more than {} ms; clamped",
            step.duration_ms, MAX_STEP_DURATION_MS
        ));
        step.duration_ms = MAX_STEP_DURATION_MS;
    }
    if let Some(usage) = step.usage
        && (usage.input_tokens > MAX_TOKENS_PER_CALL || usage.output_tokens > MAX_TOKENS_PER_CALL)
    {
        notes.push(format!(
            "usage of {} input and {} output tokens is more than {MAX_TOKENS_PER_CALL} per call; recorded as unknown",
            usage.input_tokens, usage.output_tokens
        ));
        step.usage = None;
    }
    notes
}

/// What one run may store: generous for any real run (50 model calls of 64 tool
/// calls each is ~10,000 events), small enough that no run fills the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunLimits {
    pub max_events: u64,
    pub max_bytes: u64,
}

impl Default for RunLimits {
    fn default() -> Self {
        RunLimits {
            max_events: 50_000,
            max_bytes: 512 * 1024 * 1024,
        }
    }
}

/// What one run has stored so far.
#[derive(Debug, Clone, Default)]
pub struct RunBudget {
    events: u64,
    bytes: u64,
}

impl RunBudget {
    /// Counts an event the run is about to store; `Err` (the reason, for the user)
    /// when it would go over the run's limits: the run must end instead.
    pub fn charge(&mut self, event: &WorkerEvent, limits: RunLimits) -> Result<(), String> {
        let bytes = match event {
            WorkerEvent::StepStarted(s) => s.description.len() as u64,
            WorkerEvent::StepEnded(_) => 0,
            WorkerEvent::MessageAppended { message, .. } => {
                let calls: usize = message
                    .tool_calls
                    .iter()
                    .map(|c| c.arguments.len() + c.name.len() + c.id.len())
                    .sum();
                (message.content.len() + calls) as u64
            }
            // Not stored (live text, checks, endings): not counted.
            _ => return Ok(()),
        };
        self.events += 1;
        self.bytes += bytes;
        if self.events > limits.max_events {
            return Err(format!(
                "the worker reported more than {} steps and messages for this run; the run was stopped",
                limits.max_events
            ));
        }
        if self.bytes > limits.max_bytes {
            return Err(format!(
                "the worker reported more than {} MiB of steps and messages for this run; the run was stopped",
                limits.max_bytes / (1024 * 1024)
            ));
        }
        Ok(())
    }
}

/// How fast one worker may report: a token bucket per events and per bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RateLimits {
    pub events_per_sec: f64,
    pub bytes_per_sec: f64,
    /// How much may arrive at once: `burst` seconds' worth (at least one largest
    /// message).
    pub burst_secs: f64,
}

impl Default for RateLimits {
    fn default() -> Self {
        RateLimits {
            events_per_sec: 2_000.0,
            bytes_per_sec: 32.0 * 1024.0 * 1024.0,
            burst_secs: 2.0,
        }
    }
}

/// One worker's reporting rate.
#[derive(Debug, Clone)]
pub struct WorkerRate {
    events: TokenBucket,
    bytes: TokenBucket,
}

impl WorkerRate {
    pub fn new(limits: RateLimits, now: Instant) -> Self {
        let bucket = |rate: f64| TokenBucket::full(rate, rate * limits.burst_secs, now);
        WorkerRate {
            events: bucket(limits.events_per_sec),
            bytes: bucket(limits.bytes_per_sec),
        }
    }

    /// Takes one message of `bytes` from the buckets; returns how long the caller
    /// should wait before reading the next one (`None`: at once).
    pub fn admit(&mut self, now: Instant, bytes: usize) -> Option<Duration> {
        let behind = self
            .events
            .charge(1.0, now)
            .max(self.bytes.charge(bytes as f64, now));
        (!behind.is_zero()).then_some(behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::{ChatMessage, StepKind, Usage};

    const NOW: i64 = 1_800_000_000_000;

    fn ended(duration_ms: u64, usage: Option<Usage>) -> StepEnded {
        StepEnded {
            run_id: "r".into(),
            number: 1,
            ended_at_ms: NOW,
            duration_ms,
            failed: false,
            usage,
        }
    }

    #[test]
    fn sane_numbers_pass_unchanged() {
        let usage = Some(Usage {
            input_tokens: 200_000,
            output_tokens: 8_000,
        });
        let mut step = ended(90_000, usage);
        assert!(check_step_ended(&mut step, NOW).is_empty());
        assert_eq!(step, ended(90_000, usage));
    }

    #[test]
    fn absurd_token_counts_become_unknown_never_a_wrapped_i64() {
        let mut step = ended(
            10,
            Some(Usage {
                input_tokens: 1 << 63,
                output_tokens: 5,
            }),
        );
        let notes = check_step_ended(&mut step, NOW);
        assert_eq!(step.usage, None);
        assert!(notes[0].contains("9223372036854775808 input"), "{notes:?}");
    }

    #[test]
    fn absurd_durations_are_clamped_and_far_timestamps_replaced() {
        let mut step = ended(u64::MAX, None);
        step.ended_at_ms = i64::MIN;
        let notes = check_step_ended(&mut step, NOW);
        assert_eq!(step.duration_ms, MAX_STEP_DURATION_MS);
        assert_eq!(step.ended_at_ms, NOW);
        assert_eq!(notes.len(), 2, "{notes:?}");
        let mut started = StepStarted {
            run_id: "r".into(),
            number: 1,
            kind: StepKind::Tool,
            description: "x".into(),
            started_at_ms: i64::MAX,
            runs_in: None,
        };
        assert_eq!(check_step_started(&mut started, NOW).len(), 1);
        assert_eq!(started.started_at_ms, NOW);
        started.started_at_ms = NOW - 5_000;
        assert!(check_step_started(&mut started, NOW).is_empty());
    }

    fn message(bytes: usize) -> WorkerEvent {
        WorkerEvent::MessageAppended {
            run_id: "r".into(),
            message: ChatMessage::assistant("x".repeat(bytes), vec![]),
        }
    }

    #[test]
    fn a_run_over_its_event_budget_is_stopped_with_a_reason() {
        let limits = RunLimits {
            max_events: 3,
            max_bytes: 1 << 20,
        };
        let mut budget = RunBudget::default();
        for _ in 0..3 {
            budget.charge(&message(1), limits).unwrap();
        }
        // Live text is not stored, so it does not count.
        let delta = WorkerEvent::TextDelta {
            run_id: "r".into(),
            step: 1,
            text: "x".repeat(1 << 21),
        };
        budget.charge(&delta, limits).unwrap();
        let reason = budget.charge(&message(1), limits).unwrap_err();
        assert!(
            reason.contains("more than 3 steps and messages"),
            "{reason}"
        );
    }

    #[test]
    fn a_run_over_its_byte_budget_is_stopped_with_a_reason() {
        let limits = RunLimits {
            max_events: 100,
            max_bytes: 2 << 20,
        };
        let mut budget = RunBudget::default();
        budget.charge(&message(1 << 20), limits).unwrap();
        budget.charge(&message(1 << 20), limits).unwrap();
        let reason = budget.charge(&message(1), limits).unwrap_err();
        assert!(reason.contains("more than 2 MiB"), "{reason}");
    }

    #[test]
    fn a_flood_is_slowed_to_the_rate_and_a_trickle_is_not() {
        let limits = RateLimits {
            events_per_sec: 100.0,
            bytes_per_sec: 1000.0,
            burst_secs: 1.0,
        };
        let start = Instant::now();
        let mut rate = WorkerRate::new(limits, start);
        // The burst passes at once.
        for _ in 0..100 {
            assert_eq!(rate.admit(start, 1), None);
        }
        // Then each event waits its share: 10 ms per event.
        let wait = rate.admit(start, 1).unwrap();
        assert!((wait.as_secs_f64() - 0.01).abs() < 1e-6, "{wait:?}");
        // Bytes count too: 2000 bytes at 1000/s is two seconds behind.
        let mut rate = WorkerRate::new(limits, start);
        let wait = rate.admit(start, 3000).unwrap();
        assert!((wait.as_secs_f64() - 2.0).abs() < 1e-6, "{wait:?}");
        // A worker within its rate never waits.
        let mut rate = WorkerRate::new(limits, start);
        for i in 0..1000u64 {
            let at = start + Duration::from_millis(20 * i);
            assert_eq!(rate.admit(at, 10), None);
        }
    }
}
