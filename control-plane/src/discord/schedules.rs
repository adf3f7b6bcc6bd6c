//! `/schedule add|list|runs|remove|run` for the channel's agent: the same scheduler
//! calls the HTTP API makes (`schedules::Scheduler`), answered as text.

use super::actions::Actions;
use super::slash::Invocation;
use crate::principal::Principal;
use crate::schedules::ScheduleRequest;
use crate::store::{AgentRecord, ScheduleRecord, ScheduleRunRecord};

fn when(s: &ScheduleRecord) -> String {
    match (&s.cron, &s.timezone, &s.run_at) {
        (Some(cron), Some(zone), _) => format!("`{cron}` ({zone})"),
        (_, _, Some(at)) => format!("once at {at}"),
        _ => "-".into(),
    }
}

fn next(s: &ScheduleRecord) -> String {
    match (&s.next_run_at, s.paused) {
        (_, true) => "paused".into(),
        (Some(next), false) => format!("next {next}"),
        (None, false) => "done".into(),
    }
}

/// The schedules of `agent`, one line each.
pub fn list_text(agent: &str, schedules: &[ScheduleRecord]) -> String {
    if schedules.is_empty() {
        return format!("**{agent}** has no schedules.");
    }
    let mut out = format!("Schedules of **{agent}**:\n");
    for s in schedules {
        out.push_str(&format!(
            "- {} · {} · {} · if missed: {} · {}\n",
            s.id,
            when(s),
            next(s),
            s.on_missed.as_str(),
            crate::cli::render::one_line(&s.prompt, 60)
        ));
    }
    out
}

/// A schedule's runs, newest first, one line each.
pub fn runs_text(id: u64, runs: &[ScheduleRunRecord]) -> String {
    if runs.is_empty() {
        return format!("Schedule {id} has not run yet.");
    }
    let mut out = format!("Runs of schedule {id}, newest first:\n");
    for r in runs.iter().take(20) {
        out.push_str(&format!(
            "- {} · {} · {}{}{} · {} tokens\n",
            r.started,
            r.cause.as_str(),
            r.status.as_str(),
            r.thread
                .map(|t| format!(" · thread {t}"))
                .unwrap_or_default(),
            r.error
                .as_deref()
                .map(|e| format!(" · {}", crate::cli::render::one_line(e, 80)))
                .unwrap_or_default(),
            r.tokens
        ));
    }
    out
}

impl Actions {
    pub(super) async fn schedule(
        &self,
        agent: &AgentRecord,
        invocation: Invocation,
        by: &Principal,
    ) -> Result<String, String> {
        let scheduler = &self.api.schedules;
        let name = &agent.name;
        match invocation {
            Invocation::ScheduleAdd {
                prompt,
                cron,
                timezone,
                at,
                on_missed,
            } => {
                let request = ScheduleRequest {
                    prompt: Some(prompt),
                    cron,
                    timezone,
                    at,
                    on_missed,
                    paused: None,
                };
                let s = scheduler
                    .create(agent, request, by)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!(
                    "Schedule {} of **{name}**: {}; {} (UTC).",
                    s.id,
                    when(&s),
                    next(&s)
                ))
            }
            Invocation::ScheduleList => {
                let list = scheduler.list(agent).await.map_err(|e| e.to_string())?;
                Ok(list_text(name, &list))
            }
            Invocation::ScheduleRuns(id) => {
                let runs = scheduler
                    .runs_of(agent, id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(runs_text(id, &runs))
            }
            Invocation::ScheduleRemove(id) => {
                scheduler
                    .delete(agent, id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(format!("Schedule {id} of **{name}** removed."))
            }
            Invocation::ScheduleRun(id) => {
                let run = scheduler
                    .run_now(agent, id)
                    .await
                    .map_err(|e| e.to_string())?;
                Ok(match run.thread {
                    Some(thread) => {
                        format!("Schedule {id} of **{name}** runs now, in thread {thread}.")
                    }
                    None => format!("Schedule {id}: {}.", run.status.as_str()),
                })
            }
            _ => Err("not a schedule command".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedules::OnMissed;
    use crate::store::{RunCause, ScheduleRunStatus};

    #[test]
    fn lists_say_when_next_and_what() {
        let s = ScheduleRecord {
            id: 3,
            agent_name: "helper".into(),
            prompt: "Summarise my inbox".into(),
            cron: Some("30 7 * * *".into()),
            timezone: Some("Europe/Berlin".into()),
            run_at: None,
            on_missed: OnMissed::Skip,
            paused: false,
            failures: 0,
            next_run_at: Some("2026-12-01T06:30:00.000Z".into()),
            created_by: "api".into(),
            created_at: String::new(),
            updated_at: String::new(),
        };
        let text = list_text("helper", std::slice::from_ref(&s));
        assert!(
            text.contains("- 3 · `30 7 * * *` (Europe/Berlin) · next 2026-12-01T06:30:00.000Z · if missed: skip · Summarise my inbox"),
            "{text}"
        );
        assert_eq!(list_text("helper", &[]), "**helper** has no schedules.");
        let run = ScheduleRunRecord {
            id: 1,
            schedule_id: 3,
            cause: RunCause::Missed,
            status: ScheduleRunStatus::Failed,
            thread: Some(9),
            error: Some("the model refused".into()),
            tokens: 12,
            started: "2026-12-01T06:30:00.100Z".into(),
            ended: None,
        };
        let text = runs_text(3, &[run]);
        assert!(
            text.contains("missed · failed · thread 9 · the model refused · 12 tokens"),
            "{text}"
        );
    }
}
