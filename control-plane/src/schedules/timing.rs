//! When a schedule fires (pure): its [`When`] (a cron expression in a zone, or one
//! instant), what a firing that was due while the control plane was down becomes
//! ([`OnMissed`]), and the step the scheduler's loop takes at each due firing
//! ([`advance`]). Every instant is UTC; zones only turn local times into instants.

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use serde::{Deserialize, Serialize};

use super::cron::Cron;

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq)]
pub enum When {
    /// Each time the expression matches the zone's wall clock.
    Cron { cron: Cron, text: String, zone: Tz },
    /// Once, at this instant.
    At(DateTime<Utc>),
}

impl When {
    /// From what a person sent: `cron` with `timezone`, or `at` (RFC 3339), and
    /// nothing else. The error is a sentence saying what to send.
    pub fn from_request(
        cron: Option<&str>,
        timezone: Option<&str>,
        at: Option<&str>,
    ) -> Result<When, String> {
        match (cron, at) {
            (Some(_), Some(_)) => Err(
                "send either cron (with timezone) for a repeating schedule or at for a one-shot one, not both"
                    .into(),
            ),
            (None, None) => Err(
                "send cron (a five-field expression like '30 7 * * *') with timezone (an IANA zone like 'Europe/Berlin'), or at (an RFC 3339 time like '2026-12-01T09:00:00Z') for a one-shot schedule"
                    .into(),
            ),
            (Some(text), None) => {
                let Some(zone) = timezone else {
                    return Err(format!(
                        "the cron schedule '{text}' needs a timezone: send an IANA zone like 'Europe/Berlin' or 'UTC'"
                    ));
                };
                let zone = parse_zone(zone)?;
                let cron = Cron::parse(text)?;
                Ok(When::Cron {
                    cron,
                    text: text.trim().to_string(),
                    zone,
                })
            }
            (None, Some(at)) => {
                if timezone.is_some() {
                    return Err(
                        "a one-shot schedule's at carries its own offset; send at without timezone"
                            .into(),
                    );
                }
                Ok(When::At(parse_at(at)?))
            }
        }
    }

    /// The first firing strictly after `after` (`None`: never again).
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            When::Cron { cron, zone, .. } => cron.next_after(*zone, after),
            When::At(at) => (*at > after).then_some(*at),
        }
    }

    /// The cron text, zone name and one-shot instant, as stored and shown.
    pub fn parts(&self) -> (Option<String>, Option<String>, Option<DateTime<Utc>>) {
        match self {
            When::Cron { text, zone, .. } => (Some(text.clone()), Some(zone.name().into()), None),
            When::At(at) => (None, None, Some(*at)),
        }
    }
}

fn parse_zone(name: &str) -> Result<Tz, String> {
    name.trim().parse::<Tz>().map_err(|_| {
        format!(
            "'{name}' is not an IANA time zone; send a name like 'Europe/Berlin', 'America/New_York' or 'UTC'"
        )
    })
}

fn parse_at(text: &str) -> Result<DateTime<Utc>, String> {
    DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.with_timezone(&Utc))
        .map_err(|e| {
            format!(
                "at '{text}' is not an RFC 3339 time ({e}); send one like '2026-12-01T09:00:00Z' or '2026-12-01T10:00:00+01:00'"
            )
        })
}

/// What becomes of a firing that was due while the control plane was down.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnMissed {
    /// One run at start, however many firings were missed (never a burst).
    #[default]
    RunOnce,
    /// None: the schedule waits for its next future firing.
    Skip,
}

impl OnMissed {
    pub fn as_str(self) -> &'static str {
        match self {
            OnMissed::RunOnce => "run_once",
            OnMissed::Skip => "skip",
        }
    }

    pub fn parse(text: &str) -> Result<OnMissed, String> {
        match text {
            "run_once" => Ok(OnMissed::RunOnce),
            "skip" => Ok(OnMissed::Skip),
            other => Err(format!(
                "on_missed '{other}' is not a policy; send \"run_once\" (one run at start for what was missed) or \"skip\""
            )),
        }
    }
}

/// What the loop does with a firing that is due.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// Start a run now.
    pub run: bool,
    /// The schedule's next firing (`None`: it has none, a one-shot that is done).
    pub next: Option<DateTime<Utc>>,
}

/// The step for a firing due at `due`, seen at `now` (`now >= due`) by a control
/// plane that started at `boot`. A firing due after `boot` is on time however late
/// the loop wakes; one due before was missed while Chorus was down, and goes by
/// `policy`. Either way the next firing is the first after `now`: the firings
/// between `due` and `now` are folded into this one, so there is never a burst.
pub fn advance(
    when: &When,
    due: DateTime<Utc>,
    boot: DateTime<Utc>,
    now: DateTime<Utc>,
    policy: OnMissed,
) -> Step {
    let run = due >= boot || policy == OnMissed::RunOnce;
    Step {
        run,
        next: when.next_after(now.max(due)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a test instant")
            .with_timezone(&Utc)
    }

    fn hourly() -> When {
        When::from_request(Some("0 * * * *"), Some("Europe/Berlin"), None).expect("good")
    }

    #[test]
    fn a_request_names_cron_with_a_zone_or_at_and_errors_say_what_to_send() {
        for (cron, zone, at, says) in [
            (
                Some("* * * * *"),
                Some("UTC"),
                Some("2026-01-01T00:00:00Z"),
                "not both",
            ),
            (None, None, None, "send cron"),
            (Some("* * * * *"), None, None, "needs a timezone"),
            (
                Some("* * * * *"),
                Some("Mars/Olympus"),
                None,
                "not an IANA time zone",
            ),
            (Some("* * *"), Some("UTC"), None, "send five"),
            (None, None, Some("tomorrow"), "not an RFC 3339 time"),
            (
                None,
                Some("UTC"),
                Some("2026-01-01T00:00:00Z"),
                "without timezone",
            ),
        ] {
            let e = When::from_request(cron, zone, at).expect_err(says);
            assert!(e.contains(says), "{e}");
        }
        let at = When::from_request(None, None, Some("2026-01-01T10:00:00+01:00")).expect("good");
        assert_eq!(at, When::At(self::at("2026-01-01T09:00:00Z")));
        assert_eq!(OnMissed::default(), OnMissed::RunOnce);
        assert!(OnMissed::parse("burst").is_err());
    }

    /// The loop as it runs: wake at each due firing (the fake clock jumps to
    /// `now`), take the step. Returns how many runs started and the next firing.
    fn catch_up(
        when: &When,
        mut due: DateTime<Utc>,
        boot: DateTime<Utc>,
        now: DateTime<Utc>,
        policy: OnMissed,
    ) -> (usize, Option<DateTime<Utc>>) {
        let mut runs = 0;
        loop {
            let step = advance(when, due, boot, now, policy);
            runs += usize::from(step.run);
            match step.next {
                Some(next) if next <= now => due = next,
                next => return (runs, next),
            }
        }
    }

    #[test]
    fn missed_firings_run_once_or_are_skipped_never_in_a_burst() {
        // Down from 10:30 to 15:10: the 11:00 … 15:00 firings were missed.
        let (due, boot) = (at("2026-06-01T11:00:00Z"), at("2026-06-01T15:10:00Z"));
        let now = boot;
        assert_eq!(
            catch_up(&hourly(), due, boot, now, OnMissed::RunOnce),
            (1, Some(at("2026-06-01T16:00:00Z")))
        );
        assert_eq!(
            catch_up(&hourly(), due, boot, now, OnMissed::Skip),
            (0, Some(at("2026-06-01T16:00:00Z")))
        );
        // A one-shot missed while down: run once, or skipped; either way done.
        let once = When::At(at("2026-06-01T12:00:00Z"));
        assert_eq!(
            catch_up(
                &once,
                at("2026-06-01T12:00:00Z"),
                boot,
                now,
                OnMissed::RunOnce
            ),
            (1, None)
        );
        assert_eq!(
            catch_up(&once, at("2026-06-01T12:00:00Z"), boot, now, OnMissed::Skip),
            (0, None)
        );
    }

    #[test]
    fn a_firing_due_while_up_runs_however_late_the_loop_wakes_and_only_once() {
        let boot = at("2026-06-01T09:00:00Z");
        // Woken three hours late (a suspended machine): one run, whatever the policy.
        for policy in [OnMissed::RunOnce, OnMissed::Skip] {
            assert_eq!(
                catch_up(
                    &hourly(),
                    at("2026-06-01T10:00:00Z"),
                    boot,
                    at("2026-06-01T13:30:00Z"),
                    policy
                ),
                (1, Some(at("2026-06-01T14:00:00Z")))
            );
        }
        // On time: the next is an hour on.
        assert_eq!(
            advance(
                &hourly(),
                at("2026-06-01T10:00:00Z"),
                boot,
                at("2026-06-01T10:00:00Z"),
                OnMissed::Skip
            ),
            Step {
                run: true,
                next: Some(at("2026-06-01T11:00:00Z"))
            }
        );
    }
}
