//! Standard five-field cron expressions (pure): `minute hour day-of-month month
//! day-of-week`, each field `*`, a number, a range `a-b`, a step `*/n`, `a-b/n` or
//! `a/n`, or a comma-separated list of those; months and weekdays also by their
//! English three-letter names (`jan`, `mon`), Sunday as 0 or 7. As in Vixie cron,
//! when both the day of the month and the day of the week are restricted (neither
//! starts with `*`), a day matching either fires.
//!
//! [`Cron::next_after`] finds the next firing in an IANA zone: candidates are local
//! wall-clock times, taken in order, each turned into an instant with the zone's
//! rules. Daylight saving: a local time that happens twice (the clocks go back)
//! fires once, at its first occurrence; a local time that does not happen (the
//! clocks go forward) fires at the next valid instant, the end of the gap (so a
//! daily 02:30 job fires at 03:00 on the night New York springs forward).

use chrono::{DateTime, Datelike, Duration, LocalResult, NaiveDate, NaiveDateTime, TimeZone, Utc};
use chrono_tz::Tz;

/// How far ahead a firing is looked for: an expression with none in this many
/// days (`0 0 30 2 *`) never fires, and is refused when it is set.
const HORIZON_DAYS: i64 = 366 * 5;

/// A parsed expression: each field as the set of values it allows (bit `v`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days: u64,
    months: u64,
    weekdays: u64,
    /// Whether the day-of-month field starts with `*` (then days match by AND).
    any_day: bool,
    any_weekday: bool,
}

/// One field's bounds, and its names when it has them.
struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const MINUTE: Field = Field {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
};
const HOUR: Field = Field {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
};
const DAY: Field = Field {
    name: "day of the month",
    min: 1,
    max: 31,
    names: &[],
};
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ],
};
// 7 is Sunday too (folded onto 0 after parsing).
const WEEKDAY: Field = Field {
    name: "day of the week",
    min: 0,
    max: 7,
    names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
};

impl Cron {
    /// Parses `text`; the error is a sentence saying what is wrong and what to send.
    pub fn parse(text: &str) -> Result<Cron, String> {
        let fields: Vec<&str> = text.split_whitespace().collect();
        let [minute, hour, day, month, weekday] = fields[..] else {
            return Err(format!(
                "the cron expression '{text}' has {} fields; send five: minute hour day-of-month month day-of-week, like '30 7 * * mon-fri'",
                fields.len()
            ));
        };
        let mut weekdays = parse_field(weekday, &WEEKDAY)?;
        if weekdays & (1 << 7) != 0 {
            weekdays = (weekdays & !(1 << 7)) | 1;
        }
        Ok(Cron {
            minutes: parse_field(minute, &MINUTE)?,
            hours: parse_field(hour, &HOUR)?,
            days: parse_field(day, &DAY)?,
            months: parse_field(month, &MONTH)?,
            weekdays,
            any_day: day.starts_with('*'),
            any_weekday: weekday.starts_with('*'),
        })
    }

    fn matches_date(&self, date: NaiveDate) -> bool {
        if !has(self.months, date.month()) {
            return false;
        }
        let day = has(self.days, date.day());
        let weekday = has(self.weekdays, date.weekday().num_days_from_sunday());
        if self.any_day || self.any_weekday {
            day && weekday
        } else {
            day || weekday
        }
    }

    /// The first firing strictly after `after`, with local times read in `zone`
    /// (see the module doc for daylight saving); `None` when there is none within
    /// five years.
    pub fn next_after(&self, zone: Tz, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local_after = after.with_timezone(&zone).naive_local();
        // A local time more than this before `after`'s cannot be an instant after
        // it (offsets change by at most a few hours): skipped without a zone lookup.
        let earliest = local_after - Duration::hours(4);
        let first_day = earliest.date();
        for offset in 0..=HORIZON_DAYS {
            let date = first_day + Duration::days(offset);
            if !self.matches_date(date) {
                continue;
            }
            for hour in values(self.hours) {
                for minute in values(self.minutes) {
                    let Some(local) = date.and_hms_opt(hour, minute, 0) else {
                        continue;
                    };
                    if local < earliest {
                        continue;
                    }
                    if let Some(instant) = resolve(zone, local)
                        && instant > after
                    {
                        return Some(instant);
                    }
                }
            }
        }
        None
    }
}

/// The instant a local wall-clock time fires at in `zone`: itself; the first of
/// two (a repeated time fires once); or, for a time the zone skips, the first valid
/// instant after it (the end of the gap).
fn resolve(zone: Tz, local: NaiveDateTime) -> Option<DateTime<Utc>> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
        LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
        LocalResult::None => {
            // Gaps are whole minutes and at most a few hours long.
            (1..=24 * 60).find_map(|m| {
                match zone.from_local_datetime(&(local + Duration::minutes(m))) {
                    LocalResult::Single(t) => Some(t.with_timezone(&Utc)),
                    LocalResult::Ambiguous(first, _) => Some(first.with_timezone(&Utc)),
                    LocalResult::None => None,
                }
            })
        }
    }
}

fn has(set: u64, value: u32) -> bool {
    set & (1 << value) != 0
}

fn values(set: u64) -> impl Iterator<Item = u32> {
    (0..64).filter(move |v| has(set, *v))
}

fn parse_field(text: &str, field: &Field) -> Result<u64, String> {
    let mut set = 0u64;
    for item in text.split(',') {
        set |= parse_item(item, field).map_err(|why| {
            format!(
                "the {} field '{text}' {why}; use *, a number from {} to {}, a range like 1-5, a step like */15, or a list of these",
                field.name, field.min, field.max
            )
        })?;
    }
    Ok(set)
}

fn parse_item(item: &str, field: &Field) -> Result<u64, String> {
    let (range, step) = match item.split_once('/') {
        Some((range, step)) => {
            let step: u32 = step
                .parse()
                .map_err(|_| format!("has a step '{step}' that is not a number"))?;
            if step == 0 {
                return Err("has a step of 0".into());
            }
            (range, Some(step))
        }
        None => (item, None),
    };
    let (low, high) = if range == "*" {
        (field.min, field.max)
    } else if let Some((low, high)) = range.split_once('-') {
        (value(low, field)?, value(high, field)?)
    } else {
        let low = value(range, field)?;
        // `a/n` runs from a to the field's end.
        (low, if step.is_some() { field.max } else { low })
    };
    if low > high {
        return Err(format!("has a range {low}-{high} that runs backwards"));
    }
    let mut set = 0u64;
    let mut v = low;
    while v <= high {
        set |= 1 << v;
        v += step.unwrap_or(1);
    }
    Ok(set)
}

fn value(text: &str, field: &Field) -> Result<u32, String> {
    let lower = text.to_ascii_lowercase();
    if let Some(index) = field.names.iter().position(|n| *n == lower) {
        // Months count from 1, weekdays from 0 (Sunday): each from its field's least.
        return Ok(index as u32 + field.min);
    }
    let v: u32 = text
        .parse()
        .map_err(|_| format!("has '{text}', which is not a number"))?;
    if v < field.min || v > field.max {
        return Err(format!("has {v}, outside {}-{}", field.min, field.max));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text)
            .expect("a test instant")
            .with_timezone(&Utc)
    }

    fn next(cron: &str, zone: Tz, after: &str) -> String {
        Cron::parse(cron)
            .expect("a good expression")
            .next_after(zone, at(after))
            .expect("a next firing")
            .to_rfc3339()
    }

    #[test]
    fn fields_take_numbers_ranges_steps_lists_and_names() {
        let utc = chrono_tz::UTC;
        assert_eq!(
            next("*/15 * * * *", utc, "2026-01-01T10:07:00Z"),
            "2026-01-01T10:15:00+00:00"
        );
        assert_eq!(
            next("30 7 * * mon-fri", utc, "2026-01-02T08:00:00Z"), // a Friday
            "2026-01-05T07:30:00+00:00"
        );
        assert_eq!(
            next("0 9 1,15 * *", utc, "2026-01-01T09:00:00Z"),
            "2026-01-15T09:00:00+00:00"
        );
        assert_eq!(
            next("0 0 * feb 7", utc, "2026-01-01T00:00:00Z"), // Sundays in February
            "2026-02-01T00:00:00+00:00"
        );
        // Both day fields restricted: either matches (the 13th, or any Friday).
        assert_eq!(
            next("0 12 13 * 5", utc, "2026-01-03T00:00:00Z"),
            "2026-01-09T12:00:00+00:00"
        );
        // Strictly after: a firing at `after` itself is not the next one.
        assert_eq!(
            next("0 * * * *", utc, "2026-01-01T10:00:00Z"),
            "2026-01-01T11:00:00+00:00"
        );
    }

    #[test]
    fn bad_expressions_say_what_to_send() {
        for (bad, says) in [
            ("* * * *", "has 4 fields"),
            ("60 * * * *", "minute field '60' has 60, outside 0-59"),
            ("* * * * funday", "day of the week field"),
            ("*/0 * * * *", "step of 0"),
            ("5-1 * * * *", "runs backwards"),
            ("", "has 0 fields"),
        ] {
            let e = Cron::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("send five") || e.contains("use *"), "{e}");
        }
        let never = Cron::parse("0 0 30 feb *").expect("parses");
        assert_eq!(
            never.next_after(chrono_tz::UTC, at("2026-01-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn the_next_firing_is_computed_in_the_schedules_zone() {
        // 07:30 in New York in January is 12:30 UTC; in Berlin, 06:30 UTC.
        assert_eq!(
            next(
                "30 7 * * *",
                chrono_tz::America::New_York,
                "2026-01-10T00:00:00Z"
            ),
            "2026-01-10T12:30:00+00:00"
        );
        assert_eq!(
            next(
                "30 7 * * *",
                chrono_tz::Europe::Berlin,
                "2026-01-10T00:00:00Z"
            ),
            "2026-01-10T06:30:00+00:00"
        );
        // In July (daylight time) the same local time is an hour earlier in UTC.
        assert_eq!(
            next(
                "30 7 * * *",
                chrono_tz::America::New_York,
                "2026-07-10T00:00:00Z"
            ),
            "2026-07-10T11:30:00+00:00"
        );
    }

    /// Firings of `cron` in `zone` from `from` (exclusive) up to `to`, as a fake
    /// clock that jumps to each firing sees them.
    fn firings(cron: &str, zone: Tz, from: &str, to: &str) -> Vec<String> {
        let cron = Cron::parse(cron).expect("a good expression");
        let (mut now, end) = (at(from), at(to));
        let mut seen = Vec::new();
        while let Some(t) = cron.next_after(zone, now) {
            if t > end {
                break;
            }
            seen.push(t.to_rfc3339());
            now = t;
        }
        seen
    }

    #[test]
    fn a_repeated_local_time_fires_once() {
        // New York falls back on 2026-11-01: 01:00-01:59 happens twice (EDT, then EST).
        assert_eq!(
            firings(
                "30 1 * * *",
                chrono_tz::America::New_York,
                "2026-10-31T12:00:00Z",
                "2026-11-02T12:00:00Z"
            ),
            [
                "2026-11-01T05:30:00+00:00", // 01:30 EDT, the first of the two
                "2026-11-02T06:30:00+00:00", // 01:30 EST the next day
            ]
        );
        // Berlin falls back on 2026-10-25: 02:00-02:59 happens twice.
        assert_eq!(
            firings(
                "30 2 * * *",
                chrono_tz::Europe::Berlin,
                "2026-10-24T12:00:00Z",
                "2026-10-26T12:00:00Z"
            ),
            ["2026-10-25T00:30:00+00:00", "2026-10-26T01:30:00+00:00"]
        );
        // An hourly job runs once an hour of wall-clock time: the repeated hour once.
        let hourly = firings(
            "0 * * * *",
            chrono_tz::America::New_York,
            "2026-11-01T03:30:00Z", // 23:30 EDT
            "2026-11-01T08:30:00Z", // 03:30 EST
        );
        assert_eq!(
            hourly,
            [
                "2026-11-01T04:00:00+00:00", // 00:00 EDT
                "2026-11-01T05:00:00+00:00", // 01:00 EDT (01:00 EST is not fired again)
                "2026-11-01T07:00:00+00:00", // 02:00 EST
                "2026-11-01T08:00:00+00:00", // 03:00 EST
            ]
        );
    }

    #[test]
    fn a_skipped_local_time_fires_at_the_next_valid_instant() {
        // New York springs forward on 2026-03-08: 02:00-02:59 does not happen.
        assert_eq!(
            firings(
                "30 2 * * *",
                chrono_tz::America::New_York,
                "2026-03-07T12:00:00Z",
                "2026-03-09T12:00:00Z"
            ),
            [
                "2026-03-08T07:00:00+00:00", // 03:00 EDT, where the gap ends
                "2026-03-09T06:30:00+00:00", // 02:30 EDT the next day
            ]
        );
        // Berlin springs forward on 2026-03-29: 02:00-02:59 does not happen.
        assert_eq!(
            firings(
                "15 2 * * *",
                chrono_tz::Europe::Berlin,
                "2026-03-28T12:00:00Z",
                "2026-03-30T12:00:00Z"
            ),
            ["2026-03-29T01:00:00+00:00", "2026-03-30T00:15:00+00:00"]
        );
        // Every minute of the gap maps to its end: it fires there once, not 60 times.
        let minutely = firings(
            "* 2 * * *",
            chrono_tz::America::New_York,
            "2026-03-08T06:00:00Z",
            "2026-03-08T08:00:00Z",
        );
        assert_eq!(minutely, ["2026-03-08T07:00:00+00:00"]);
    }
}
