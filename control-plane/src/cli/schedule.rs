//! `chorus schedule add|list|runs|remove|run`: an agent's schedules over
//! `/api/agents/{name}/schedules` (the mechanics are the control plane's `schedules`).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::Printer;
use super::client::Client;
use super::render::{cell, one_line, rows_of, table};

#[derive(Debug, Subcommand)]
pub enum ScheduleCommand {
    /// Schedule a prompt: on a cron expression in a time zone, or once at a time.
    #[command(
        after_help = "Examples:\n  chorus schedule add helper \"Summarise my inbox\" --cron \"30 7 * * mon-fri\" --tz Europe/Berlin\n  chorus schedule add helper \"Remind me to stretch\" --at 2026-12-01T15:00:00Z\n\n\
        A firing missed while Chorus was down runs once at the next start (--on-missed run_once,\n\
        the default) or is skipped (--on-missed skip). A scheduled run never waits for a person:\n\
        what its agent's profile would ask about follows its on_ask, and prompt is a deny."
    )]
    Add {
        agent: String,
        /// What the agent is told at each firing.
        prompt: String,
        /// A five-field cron expression (minute hour day-of-month month day-of-week).
        #[arg(long, conflicts_with = "at", requires = "tz")]
        cron: Option<String>,
        /// The IANA time zone the cron expression's times are in (e.g. Europe/Berlin, UTC).
        #[arg(long)]
        tz: Option<String>,
        /// A one-shot's time (RFC 3339, e.g. 2026-12-01T09:00:00Z).
        #[arg(long)]
        at: Option<String>,
        /// run_once (default) or skip.
        #[arg(long)]
        on_missed: Option<String>,
    },
    /// List an agent's schedules with their next firing (UTC).
    #[command(after_help = "Example:\n  chorus schedule list helper")]
    List { agent: String },
    /// A schedule's runs, newest first: when, its thread, how it ended, tokens.
    #[command(after_help = "Example:\n  chorus schedule runs helper 3")]
    Runs { agent: String, id: u64 },
    /// Delete a schedule (and its runs' record; the threads stay).
    #[command(after_help = "Example:\n  chorus schedule remove helper 3")]
    Remove { agent: String, id: u64 },
    /// Run a schedule now, to test it (refused while its last run goes).
    #[command(after_help = "Example:\n  chorus schedule run helper 3")]
    Run { agent: String, id: u64 },
}

pub(super) async fn run(
    client: &Client,
    command: ScheduleCommand,
    out: Printer,
) -> anyhow::Result<bool> {
    let base = |agent: &str| format!("/api/agents/{agent}/schedules");
    match command {
        ScheduleCommand::Add {
            agent,
            prompt,
            cron,
            tz,
            at,
            on_missed,
        } => {
            let body = add_body(&prompt, cron, tz, at, on_missed);
            let made = client.post(&base(&agent), &body).await?;
            out.show(&made, added)
        }
        ScheduleCommand::List { agent } => {
            let list = client.get(&base(&agent)).await?;
            out.show(&list, |l| schedules(&agent, l))
        }
        ScheduleCommand::Runs { agent, id } => {
            let list = client.get(&format!("{}/{id}/runs", base(&agent))).await?;
            out.show(&list, |l| runs(id, l))
        }
        ScheduleCommand::Remove { agent, id } => {
            let gone = client
                .call(Method::DELETE, &format!("{}/{id}", base(&agent)), None)
                .await?;
            out.show(&gone, |_| format!("Schedule {id} of {agent} removed.\n"))
        }
        ScheduleCommand::Run { agent, id } => {
            let run = client
                .post(&format!("{}/{id}/run", base(&agent)), &json!({}))
                .await?;
            out.show(&run, |r| match r["thread"].as_u64() {
                Some(thread) => format!(
                    "Schedule {id} runs now in thread {thread} (chorus thread show {agent} {thread}).\n"
                ),
                None => format!("Schedule {id}: {}.\n", cell(&r["status"])),
            })
        }
    }
}

/// The body of `POST …/schedules`: only what was given (the server says what is missing).
fn add_body(
    prompt: &str,
    cron: Option<String>,
    tz: Option<String>,
    at: Option<String>,
    on_missed: Option<String>,
) -> Value {
    let mut body = json!({ "prompt": prompt });
    for (key, value) in [
        ("cron", cron),
        ("timezone", tz),
        ("at", at),
        ("on_missed", on_missed),
    ] {
        if let Some(value) = value {
            body[key] = json!(value);
        }
    }
    body
}

fn when(s: &Value) -> String {
    match s["cron"].as_str() {
        Some(cron) => format!("{cron} ({})", cell(&s["timezone"])),
        None => format!("once at {}", cell(&s["at"])),
    }
}

fn added(s: &Value) -> String {
    format!(
        "Schedule {} of {}: {}; next run {}.\n",
        cell(&s["id"]),
        cell(&s["agent"]),
        when(s),
        cell(&s["next_run_at"])
    )
}

fn schedules(agent: &str, list: &Value) -> String {
    let rows = rows_of(&list["schedules"], |s| {
        let next = if s["paused"] == true {
            "paused".to_string()
        } else {
            cell(&s["next_run_at"])
        };
        vec![
            cell(&s["id"]),
            next,
            when(s),
            cell(&s["on_missed"]),
            one_line(s["prompt"].as_str().unwrap_or(""), 40),
        ]
    });
    if rows.is_empty() {
        return format!("{agent} has no schedules.\n");
    }
    table(
        &["ID", "NEXT RUN (UTC)", "WHEN", "IF MISSED", "PROMPT"],
        &rows,
        |_, c| c.to_string(),
    )
}

fn runs(id: u64, list: &Value) -> String {
    let rows = rows_of(&list["runs"], |r| {
        vec![
            cell(&r["started"]),
            cell(&r["cause"]),
            cell(&r["status"]),
            cell(&r["thread"]),
            cell(&r["tokens"]),
            one_line(r["error"].as_str().unwrap_or(""), 50),
        ]
    });
    if rows.is_empty() {
        return format!("Schedule {id} has not run yet.\n");
    }
    table(
        &["STARTED", "CAUSE", "STATUS", "THREAD", "TOKENS", "ERROR"],
        &rows,
        |_, c| c.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_sends_only_what_was_given() {
        assert_eq!(
            add_body(
                "p",
                Some("* * * * *".into()),
                Some("UTC".into()),
                None,
                None
            ),
            json!({"prompt": "p", "cron": "* * * * *", "timezone": "UTC"})
        );
        assert_eq!(
            add_body(
                "p",
                None,
                None,
                Some("2026-12-01T09:00:00Z".into()),
                Some("skip".into())
            ),
            json!({"prompt": "p", "at": "2026-12-01T09:00:00Z", "on_missed": "skip"})
        );
    }

    #[test]
    fn lists_and_runs_read_as_tables() {
        let list = json!({"schedules": [
            {"id": 1, "agent": "a", "prompt": "Summarise\nmy inbox", "cron": "30 7 * * *",
             "timezone": "Europe/Berlin", "at": null, "on_missed": "run_once", "paused": false,
             "next_run_at": "2026-12-01T06:30:00.000Z"},
            {"id": 2, "agent": "a", "prompt": "once", "cron": null, "timezone": null,
             "at": "2026-12-02T09:00:00.000Z", "on_missed": "skip", "paused": true, "next_run_at": null}
        ]});
        assert_eq!(
            schedules("a", &list),
            "ID  NEXT RUN (UTC)            WHEN                              IF MISSED  PROMPT\n\
             1   2026-12-01T06:30:00.000Z  30 7 * * * (Europe/Berlin)        run_once   Summarise …\n\
             2   paused                    once at 2026-12-02T09:00:00.000Z  skip       once\n"
        );
        assert_eq!(
            schedules("a", &json!({"schedules": []})),
            "a has no schedules.\n"
        );
        let ran = json!({"runs": [{"started": "2026-12-01T06:30:00.100Z", "cause": "schedule",
            "status": "failed", "thread": 4, "tokens": 120, "error": "the model refused"}]});
        let text = runs(1, &ran);
        assert!(
            text.ends_with("schedule  failed  4       120     the model refused\n"),
            "{text}"
        );
        assert_eq!(
            runs(1, &json!({"runs": []})),
            "Schedule 1 has not run yet.\n"
        );
    }
}
