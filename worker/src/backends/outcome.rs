//! How a CLI run ended, in Chorus's terms: the classification both flavors share
//! (the CLIs differ only in where they say it: Claude Code's `result` line and
//! stderr, OpenCode's `error` line and stderr), and the version in `--version`.
//!
//! The parsers report a model API error as an [`CliEvent::Error`] whose message is
//! [`api_error`]'s text; [`classify`] reads the status back from
//! `ExitReport::last_error`, so the two stay one definition.
//!
//! [`CliEvent::Error`]: super::flavor::CliEvent::Error

use chorus_proto::domain::FailureKind;

use super::flavor::{Classified, CliFailure, ExitReport};

const API_ERROR: &str = "API error ";

/// The text of an `Error` event for a model API error.
pub fn api_error(status: Option<u64>, kind: Option<&str>, message: &str) -> String {
    let status = status.map_or_else(|| "?".to_string(), |s| s.to_string());
    match kind {
        Some(kind) if !kind.is_empty() => format!("{API_ERROR}{status} ({kind}): {message}"),
        _ => format!("{API_ERROR}{status}: {message}"),
    }
}

/// The HTTP status in an [`api_error`] text.
fn api_status(text: &str) -> Option<u16> {
    let rest = text.strip_prefix(API_ERROR)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// What a CLI says when the session it was told to go on from is not in its store.
pub struct Markers {
    /// The CLI's name for people ("Claude Code").
    pub cli: &'static str,
    /// Text in stderr or the last error that means "no such session".
    pub unknown_session: &'static [&'static str],
}

fn failed(kind: FailureKind, cause: CliFailure, message: String) -> Option<Classified> {
    Some(Classified {
        kind,
        message,
        cause,
    })
}

/// The last non-empty line of a text, bounded, for a sentence.
fn last_line(text: &str) -> String {
    let line = text
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    // ANSI colour codes (OpenCode colours its errors) are noise in a sentence.
    let plain: String = strip_ansi(line);
    let mut plain = plain.trim().to_string();
    if plain.len() > 300 {
        let mut end = 300;
        while !plain.is_char_boundary(end) {
            end -= 1;
        }
        plain.truncate(end);
        plain.push('…');
    }
    plain
}

/// The line of a stderr that says what went wrong: the last one that begins with
/// `Error` (OpenCode prints `Error: <what>` and then the config it could not read,
/// line by line), else the last one that is not a `[claude-code:…]` diagnostic.
fn telling_line(stderr: &str) -> String {
    let lines: Vec<String> = stderr
        .lines()
        .map(|l| strip_ansi(l).trim().to_string())
        .filter(|l| !l.is_empty())
        .collect();
    let pick = lines
        .iter()
        .rev()
        .find(|l| l.starts_with("Error"))
        .or_else(|| lines.iter().rev().find(|l| !l.starts_with("[claude-code:")));
    pick.map_or_else(String::new, |l| last_line(l))
}

fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Why a run that ended this way failed; `None`: it succeeded (a result that is not
/// an error, exit code 0).
pub fn classify(markers: &Markers, exit: &ExitReport) -> Option<Classified> {
    let cli = markers.cli;
    if let Some(signal) = exit.signal {
        // SIGXCPU / SIGXFSZ: the sandbox's rlimits ended it.
        return match signal {
            24 | 25 => failed(
                FailureKind::Limit,
                CliFailure::Signal,
                format!(
                    "{cli} was stopped by the sandbox's limits (signal {signal}): the turn used \
                     more CPU time or wrote a bigger file than a tool process may"
                ),
            ),
            9 => failed(
                FailureKind::Interrupted,
                CliFailure::Signal,
                format!(
                    "{cli} was killed (signal 9), probably for memory: send the message again, \
                     or give the agent a smaller task"
                ),
            ),
            _ => failed(
                FailureKind::Internal,
                CliFailure::Signal,
                format!(
                    "{cli} died of signal {signal}: {}",
                    or_nothing(&telling_line(&exit.stderr_tail))
                ),
            ),
        };
    }
    let error = exit.last_error.as_deref().unwrap_or("");
    let said = |marker: &&str| exit.stderr_tail.contains(marker) || error.contains(marker);
    if markers.unknown_session.iter().any(said) {
        return failed(
            FailureKind::Interrupted,
            CliFailure::UnknownSession,
            format!(
                "{cli} no longer has the session this thread went on from (its store in the \
                 agent's home was cleared, or the working directory changed): send the message \
                 again to start a new session with the thread as context"
            ),
        );
    }
    match api_status(error) {
        Some(401 | 403) => {
            return failed(
                FailureKind::ModelError,
                CliFailure::AuthRefused,
                format!(
                    "the model endpoint refused {cli}'s credential ({error}): check the \
                     provider's API key in Chorus's configuration, then send the message again"
                ),
            );
        }
        Some(429) => {
            return failed(
                FailureKind::ModelError,
                CliFailure::RateLimited,
                format!(
                    "the provider kept rate-limiting {cli}'s model calls ({error}): wait a \
                     while and send the message again"
                ),
            );
        }
        Some(_) => {
            return failed(
                FailureKind::ModelError,
                CliFailure::ApiError,
                format!("{cli}'s model call failed: {error}"),
            );
        }
        None => {}
    }
    if exit.saw_final && exit.final_is_error {
        return failed(
            FailureKind::ModelError,
            CliFailure::ApiError,
            format!(
                "{cli} ended its turn with an error: {}",
                or_nothing(if error.is_empty() {
                    &exit.stderr_tail
                } else {
                    error
                })
            ),
        );
    }
    if exit.saw_final && exit.code == Some(0) {
        return None;
    }
    if !error.is_empty() && !exit.saw_final && exit.malformed_lines == 0 {
        return failed(
            FailureKind::ModelError,
            CliFailure::ApiError,
            format!("{cli} reported an error: {}", last_line(error)),
        );
    }
    if exit.malformed_lines > 0 && !exit.saw_final {
        return failed(
            FailureKind::Internal,
            CliFailure::MalformedStream,
            format!(
                "{cli} printed {} line(s) that are not its JSON output and no result (last: \
                 {}): check that the installed version is a supported one",
                exit.malformed_lines,
                or_nothing(&last_line(error)),
            ),
        );
    }
    match exit.code {
        Some(0) => failed(
            FailureKind::Internal,
            CliFailure::NoResult,
            format!(
                "{cli} exited without a result{}: send the message again; if it keeps \
                 happening, check the worker's log",
                match telling_line(&exit.stderr_tail) {
                    s if s.is_empty() => String::new(),
                    s => format!(" ({s})"),
                }
            ),
        ),
        code => failed(
            FailureKind::Internal,
            CliFailure::Exited,
            format!(
                "{cli} exited with code {}: {}",
                code.map_or_else(|| "?".to_string(), |c| c.to_string()),
                or_nothing(&telling_line(&exit.stderr_tail))
            ),
        ),
    }
}

fn or_nothing(text: &str) -> String {
    let line = last_line(text);
    if line.is_empty() {
        "it said nothing on stderr".to_string()
    } else {
        line
    }
}

/// The first `x.y.z` in a `--version` output (`2.1.332 (Claude Code)`, `1.18.33`,
/// `v1.2.3`).
pub fn parse_version(output: &str) -> Option<(u32, u32, u32)> {
    output.split_whitespace().find_map(|word| {
        let word = word.trim_start_matches('v');
        let mut parts = word.split('.');
        let major = parts.next()?.parse().ok()?;
        let minor = parts.next()?.parse().ok()?;
        // `1.18.33-beta.1`: the patch ends where the digits do.
        let patch = parts.next()?;
        let digits: String = patch.chars().take_while(char::is_ascii_digit).collect();
        Some((major, minor, digits.parse().ok()?))
    })
}

/// Test help: a fixture run through a parser, and the `ExitReport` the driver would
/// make of it.
#[cfg(test)]
pub(crate) fn replay(
    parser: &mut dyn super::flavor::StreamParser,
    output: &str,
    code: i32,
    stderr: &str,
) -> (Vec<super::flavor::CliEvent>, ExitReport) {
    use super::flavor::CliEvent;
    let mut events = Vec::new();
    let mut exit = ExitReport {
        code: Some(code),
        stderr_tail: stderr.to_string(),
        ..ExitReport::default()
    };
    for line in output.lines() {
        match parser.line(line) {
            Ok(more) => events.extend(more),
            Err(why) => {
                exit.malformed_lines += 1;
                exit.last_error = Some(why);
            }
        }
    }
    events.extend(parser.finish());
    for event in &events {
        match event {
            CliEvent::Final { is_error, .. } => {
                exit.saw_final = true;
                exit.final_is_error = *is_error;
            }
            CliEvent::Error { message } => exit.last_error = Some(message.clone()),
            _ => {}
        }
    }
    (events, exit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLI: Markers = Markers {
        cli: "Test CLI",
        unknown_session: &["No such session"],
    };

    #[test]
    fn api_errors_round_trip_through_their_text() {
        let text = api_error(Some(429), Some("rate_limit_error"), "slow down");
        assert_eq!(text, "API error 429 (rate_limit_error): slow down");
        assert_eq!(api_status(&text), Some(429));
        assert_eq!(api_status(&api_error(None, None, "x")), None);
        assert_eq!(api_status("the API error 401 came"), None);
    }

    #[test]
    fn versions_are_read_from_either_form() {
        assert_eq!(parse_version("2.1.332 (Claude Code)\n"), Some((2, 1, 332)));
        assert_eq!(parse_version("1.18.33\n"), Some((1, 18, 33)));
        assert_eq!(parse_version("opencode v1.18.40-beta.2"), Some((1, 18, 40)));
        assert_eq!(parse_version("command not found"), None);
        assert_eq!(parse_version(""), None);
    }

    #[test]
    fn a_clean_end_is_no_failure_and_signals_say_why() {
        let ok = ExitReport {
            code: Some(0),
            saw_final: true,
            ..ExitReport::default()
        };
        assert_eq!(classify(&CLI, &ok), None);
        let killed = ExitReport {
            signal: Some(9),
            ..ExitReport::default()
        };
        let c = classify(&CLI, &killed).unwrap();
        assert_eq!(
            (c.kind, c.cause),
            (FailureKind::Interrupted, CliFailure::Signal)
        );
        let cpu = ExitReport {
            signal: Some(24),
            ..ExitReport::default()
        };
        assert_eq!(classify(&CLI, &cpu).unwrap().kind, FailureKind::Limit);
        let segv = ExitReport {
            signal: Some(11),
            stderr_tail: "boom\n".into(),
            ..ExitReport::default()
        };
        let c = classify(&CLI, &segv).unwrap();
        assert_eq!(c.kind, FailureKind::Internal);
        assert!(c.message.contains("signal 11: boom"), "{}", c.message);
    }

    #[test]
    fn a_stream_that_is_not_the_format_and_a_silent_exit_are_told_apart() {
        let garbage = ExitReport {
            code: Some(0),
            malformed_lines: 3,
            last_error: Some("not json: <html>".into()),
            ..ExitReport::default()
        };
        let c = classify(&CLI, &garbage).unwrap();
        assert_eq!(c.cause, CliFailure::MalformedStream);
        assert!(c.message.contains("3 line(s)"), "{}", c.message);
        let silent = ExitReport {
            code: Some(0),
            ..ExitReport::default()
        };
        let c = classify(&CLI, &silent).unwrap();
        assert_eq!(
            (c.kind, c.cause),
            (FailureKind::Internal, CliFailure::NoResult)
        );
        let crashed = ExitReport {
            code: Some(2),
            stderr_tail: "\u{1b}[91mError: \u{1b}[0mit broke\n--- JSONC Input ---\n{\n   ^\n\n"
                .into(),
            ..ExitReport::default()
        };
        let c = classify(&CLI, &crashed).unwrap();
        assert_eq!(c.cause, CliFailure::Exited);
        assert!(
            c.message.ends_with("code 2: Error: it broke"),
            "{}",
            c.message
        );
    }
}
