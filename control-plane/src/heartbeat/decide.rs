//! The heartbeat's pure rules: whether HEARTBEAT.md says anything, whether a
//! heartbeat may call the model, what the model is sent, what its answer means, and
//! when the next periodic one is. No I/O; tested with fixed texts and instants.

use chrono::{DateTime, Duration, Utc};

use crate::store::HeartbeatCause;

/// The word an answer begins or ends with when nothing needs a person.
pub const OK_WORD: &str = "HEARTBEAT_OK";

/// The shortest period an agent may set, in minutes, unless `[heartbeat]
/// min_minutes` says otherwise: shorter ones mostly burn tokens.
pub const MIN_MINUTES: u32 = 5;
/// The longest period: a week.
pub const MAX_MINUTES: u32 = 7 * 24 * 60;

/// Why a heartbeat made no model call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Skip {
    /// HEARTBEAT.md holds nothing to act on (whitespace, comments, headings).
    Empty,
    /// HEARTBEAT.md is what it was at the last quiet answer.
    Unchanged,
    /// Today's (UTC) heartbeat tokens reached the daily cap.
    Cap { used: u64, cap: u64 },
}

impl Skip {
    pub fn reason(&self) -> String {
        match self {
            Skip::Empty => "HEARTBEAT.md is empty (nothing but whitespace, comments or headings); \
                 write what the agent should check in it"
                .into(),
            Skip::Unchanged => {
                "HEARTBEAT.md is unchanged since the last quiet answer (HEARTBEAT_OK)".into()
            }
            Skip::Cap { used, cap } => format!(
                "today's (UTC) heartbeats used {used} tokens, the daily cap is {cap} \
                 ([heartbeat] daily_token_cap); the next heartbeat after midnight UTC calls the model"
            ),
        }
    }
}

/// Whether HEARTBEAT.md says anything: a line that is not blank, not a heading and
/// not inside an HTML comment (the template's guidance is written as such).
pub fn has_content(text: &str) -> bool {
    let mut rest = text;
    let mut outside = String::new();
    while let Some(start) = rest.find("<!--") {
        outside.push_str(&rest[..start]);
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => {
                rest = "";
                break;
            }
        }
    }
    outside.push_str(rest);
    outside.lines().any(|line| {
        let line = line.trim();
        !line.is_empty() && !line.starts_with('#')
    })
}

/// HEARTBEAT.md's hash (SHA-256, hex), compared with the one at the last quiet answer.
pub fn file_hash(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Whether a heartbeat may call the model, in this order: an empty file never
/// (nothing to read, even when a person asks); an unchanged one only when a person
/// asked; and never past the daily cap.
pub fn check(
    text: &str,
    quiet_hash: Option<&str>,
    cause: HeartbeatCause,
    used_today: u64,
    cap: u64,
) -> Result<(), Skip> {
    if !has_content(text) {
        return Err(Skip::Empty);
    }
    if cause == HeartbeatCause::Periodic && quiet_hash == Some(file_hash(text).as_str()) {
        return Err(Skip::Unchanged);
    }
    if used_today >= cap {
        return Err(Skip::Cap {
            used: used_today,
            cap,
        });
    }
    Ok(())
}

/// The message a heartbeat's thread starts with: the instruction, then the file.
pub fn prompt(text: &str) -> String {
    format!(
        "This is a heartbeat: nobody wrote to you. Read your HEARTBEAT.md below and do what it asks \
         you to check. If nothing needs a person's attention, answer with {OK_WORD} alone. \
         Otherwise answer with what the person should know: your answer is posted to them.\n\n\
         --- HEARTBEAT.md ---\n{text}"
    )
}

/// Whether an answer is quiet: it begins or ends with `HEARTBEAT_OK`, once trimmed
/// of whitespace and of the emphasis or punctuation models wrap words in.
pub fn is_quiet(answer: &str) -> bool {
    let trimmed = answer.trim_matches(|c: char| c.is_whitespace() || "*`.!\"'".contains(c));
    trimmed.starts_with(OK_WORD) || trimmed.ends_with(OK_WORD)
}

/// The next periodic heartbeat after one due at `due` and taken at `now`: a period
/// after `now` (a late or missed one, e.g. while chorus was down, is taken once,
/// never made up for in a burst).
pub fn next_after(now: DateTime<Utc>, minutes: u32) -> DateTime<Utc> {
    now + Duration::minutes(minutes as i64)
}

/// The start of `now`'s UTC day (the daily cap counts from it).
pub fn day_start(now: DateTime<Utc>) -> DateTime<Utc> {
    now.date_naive()
        .and_hms_opt(0, 0, 0)
        .map(|t| t.and_utc())
        .unwrap_or(now)
}

/// A `heartbeat_minutes` a person sent: 0 (off), or `min..=MAX_MINUTES`.
pub fn check_minutes(minutes: u32, min: u32) -> Result<u32, String> {
    if minutes == 0 || (min..=MAX_MINUTES).contains(&minutes) {
        Ok(minutes)
    } else {
        Err(format!(
            "heartbeat_minutes must be 0 (off) or from {min} to {MAX_MINUTES} (a week), not {minutes}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use HeartbeatCause::{Manual, Periodic};

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn a_file_of_whitespace_comments_and_headings_says_nothing() {
        for empty in [
            "",
            "  \n\t\n",
            "# Heartbeat\n\n## Checks\n",
            "<!-- write what to check -->\n# Heartbeat\n",
            "<!-- a comment\nover lines\n- with a list -->\n",
            "<!-- never closed\n- check the build",
        ] {
            assert!(!has_content(empty), "{empty:?}");
        }
        for full in [
            "- check the build",
            "# Heartbeat\n- is the disk full?",
            "<!-- hint -->\nLook at the inbox.",
            "text <!-- hint -->",
        ] {
            assert!(has_content(full), "{full:?}");
        }
    }

    #[test]
    fn an_unchanged_file_is_skipped_only_when_periodic_and_the_cap_stops_both() {
        let text = "- check the build";
        let hash = file_hash(text);
        assert_eq!(
            check(text, Some(&hash), Periodic, 0, 100),
            Err(Skip::Unchanged)
        );
        assert_eq!(check(text, Some(&hash), Manual, 0, 100), Ok(()));
        assert_eq!(check("- changed", Some(&hash), Periodic, 0, 100), Ok(()));
        assert_eq!(check(text, None, Periodic, 0, 100), Ok(()));
        assert_eq!(check("", None, Manual, 0, 100), Err(Skip::Empty));
        assert_eq!(
            check(text, None, Manual, 100, 100),
            Err(Skip::Cap {
                used: 100,
                cap: 100
            })
        );
        assert_eq!(check(text, None, Periodic, 99, 100), Ok(()));
        // Positive control: the hash tells texts apart.
        assert_ne!(file_hash("a"), file_hash("b"));
    }

    #[test]
    fn an_answer_is_quiet_when_it_begins_or_ends_with_the_word() {
        for quiet in [
            "HEARTBEAT_OK",
            "  HEARTBEAT_OK\n",
            "**HEARTBEAT_OK**",
            "HEARTBEAT_OK — all fine",
            "Checked everything. HEARTBEAT_OK.",
        ] {
            assert!(is_quiet(quiet), "{quiet:?}");
        }
        for loud in [
            "The build is red.",
            "",
            "I would say HEARTBEAT_OK but the disk is full",
            "heartbeat_ok",
        ] {
            assert!(!is_quiet(loud), "{loud:?}");
        }
    }

    #[test]
    fn the_prompt_carries_the_file_and_the_word() {
        let p = prompt("- check the build");
        assert!(p.ends_with("- check the build"), "{p}");
        assert!(p.contains(OK_WORD), "{p}");
    }

    #[test]
    fn the_next_heartbeat_is_a_period_after_it_was_taken_never_a_burst() {
        // Due at 10:00, taken at 13:07 (chorus was down): one now, the next at 13:37.
        let now = at("2026-03-01T13:07:00Z");
        assert_eq!(next_after(now, 30), at("2026-03-01T13:37:00Z"));
        assert_eq!(day_start(now), at("2026-03-01T00:00:00Z"));
    }

    #[test]
    fn minutes_are_off_or_within_bounds() {
        assert_eq!(check_minutes(0, 5), Ok(0));
        assert_eq!(check_minutes(5, 5), Ok(5));
        assert_eq!(check_minutes(MAX_MINUTES, 5), Ok(MAX_MINUTES));
        let e = check_minutes(4, 5).unwrap_err();
        assert!(
            e.contains("heartbeat_minutes") && e.contains("from 5"),
            "{e}"
        );
        assert!(check_minutes(MAX_MINUTES + 1, 5).is_err());
        assert_eq!(check_minutes(1, 1), Ok(1));
    }
}
