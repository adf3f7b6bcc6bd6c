//! A token bucket, in two uses: refusing what is over its rate (`take_up_to`: the
//! caller drops it, for what may be lost but must be bounded, a worker's trace
//! spans) and pacing (`charge`: the caller waits, for what must not be lost, a
//! worker's reports in `reports::WorkerRate`). Pure: the caller passes the time.

use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct TokenBucket {
    /// Tokens added per second.
    rate: f64,
    /// The most it holds: what may arrive at once after a quiet spell.
    capacity: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn full(rate: f64, capacity: f64, now: Instant) -> Self {
        TokenBucket {
            rate,
            capacity,
            tokens: capacity,
            at: now,
        }
    }

    fn refill(&mut self, now: Instant) {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = self.at.max(now);
        self.tokens = (self.tokens + elapsed * self.rate).min(self.capacity);
    }

    /// Takes as many of `wanted` tokens as there are (whole ones); returns how many.
    pub fn take_up_to(&mut self, wanted: u64, now: Instant) -> u64 {
        self.refill(now);
        let taken = (self.tokens.floor().max(0.0) as u64).min(wanted);
        self.tokens -= taken as f64;
        taken
    }

    /// Takes `amount` whether or not it is there (the bucket may go into debt);
    /// returns how long until the debt is paid back (zero when there is none).
    pub fn charge(&mut self, amount: f64, now: Instant) -> Duration {
        self.refill(now);
        self.tokens -= amount;
        Duration::from_secs_f64((-self.tokens / self.rate).max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_up_to_the_capacity_then_the_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(100.0, 500.0, start);
        assert_eq!(bucket.take_up_to(400, start), 400);
        assert_eq!(bucket.take_up_to(400, start), 100, "only what is left");
        assert_eq!(bucket.take_up_to(1, start), 0);
        // A second later: one second's worth, never more.
        let later = start + Duration::from_secs(1);
        assert_eq!(bucket.take_up_to(1_000, later), 100);
        // Half a token accrues, but only whole ones are taken.
        let soon = later + Duration::from_millis(5);
        assert_eq!(bucket.take_up_to(1, soon), 0);
        assert_eq!(bucket.take_up_to(1, soon + Duration::from_millis(5)), 1);
    }

    #[test]
    fn a_long_quiet_spell_refills_only_to_the_capacity() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(100.0, 500.0, start);
        assert_eq!(bucket.take_up_to(500, start), 500);
        let much_later = start + Duration::from_secs(3_600);
        assert_eq!(bucket.take_up_to(10_000, much_later), 500);
    }

    #[test]
    fn a_flood_over_ten_seconds_gets_the_capacity_plus_ten_seconds_of_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::full(1_000.0, 5_000.0, start);
        let mut admitted = 0;
        // 30,000 asked per second, in batches of 512 every 17 ms, as a flood would.
        let mut t = start;
        while t < start + Duration::from_secs(10) {
            admitted += bucket.take_up_to(512, t);
            t += Duration::from_millis(17);
        }
        assert!((14_900..=15_000).contains(&admitted), "{admitted}");
    }

    #[test]
    fn time_going_backwards_adds_nothing() {
        let start = Instant::now() + Duration::from_secs(10);
        let mut bucket = TokenBucket::full(100.0, 100.0, start);
        assert_eq!(bucket.take_up_to(100, start), 100);
        assert_eq!(bucket.take_up_to(1, start - Duration::from_secs(5)), 0);
        assert_eq!(bucket.take_up_to(1, start), 0);
    }
}
