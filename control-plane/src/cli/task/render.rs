//! How `chorus task …` shows tasks: pure functions from the API's JSON (the shapes
//! of `GET /api/tasks[/{id}[/history]]`) to text. `now` is passed in, so "waiting
//! since" reads the same in tests as at the terminal.

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::cli::render::{Style, duration_ms, one_line};

/// A value as text: strings bare, null as `-`, anything else as JSON.
fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A task's status, coloured by what it asks of a person.
pub fn status(style: Style, status: &str) -> String {
    match status {
        "completed" => style.green(status),
        "failed" | "blocked" => style.red(status),
        "awaiting_input" | "review" | "waiting" => style.yellow(status),
        "active" | "planning" => style.bold(status),
        _ => status.to_string(),
    }
}

/// How long ago `at` (RFC 3339) was, as "12.0 s", "3 min 4 s"; `-` when unreadable.
pub fn age(at: &Value, now: DateTime<Utc>) -> String {
    at.as_str()
        .and_then(|at| DateTime::parse_from_rfc3339(at).ok())
        .map(|at| {
            let ms = (now - at.with_timezone(&Utc)).num_milliseconds().max(0);
            duration_ms(ms as u64)
        })
        .unwrap_or_else(|| "-".into())
}

/// An RFC 3339 time to the second, without the `T` and the zone ("2026-11-26 15:00:02").
pub fn short_time(at: &Value) -> String {
    let Some(text) = at.as_str() else {
        return "-".into();
    };
    match DateTime::parse_from_rfc3339(text) {
        Ok(t) => t
            .with_timezone(&Utc)
            .format("%Y-%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => text.to_string(),
    }
}

/// What a task waits on, in words: "question: q1 (for 3 min 4 s)"; `None` when it
/// waits on nothing.
pub fn waiting_on(task: &Value, now: DateTime<Utc>) -> Option<String> {
    let waiting = &task["waiting_on"];
    let kind = waiting["kind"].as_str()?;
    let detail = waiting["detail"].as_str().unwrap_or("");
    let what = if detail.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}: {}", one_line(detail, 60))
    };
    Some(format!("{what} (for {})", age(&waiting["since"], now)))
}

/// `GET /api/tasks` as a table: id, status, title, assignee, what it waits on and
/// since when (else how long it has had its status).
pub fn list(answer: &Value, style: Style, now: DateTime<Utc>) -> String {
    let tasks: Vec<&Value> = answer["tasks"].as_array().into_iter().flatten().collect();
    if tasks.is_empty() {
        return "No tasks. Create one: chorus task create \"<title>\" -d \"<what to do>\"\n".into();
    }
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            let waiting = &t["waiting_on"];
            // The age goes with what the task waits on, else with its status.
            let on = match waiting["kind"].as_str() {
                Some(kind) => {
                    let what = match waiting["detail"].as_str().filter(|d| !d.is_empty()) {
                        Some(detail) => format!("{kind}: {}", one_line(detail, 30)),
                        None => kind.to_string(),
                    };
                    format!("{what} ({})", age(&waiting["since"], now))
                }
                None => format!(
                    "- ({} {})",
                    age(&t["status_since"], now),
                    cell(&t["status"])
                ),
            };
            vec![
                cell(&t["id"]),
                cell(&t["status"]),
                one_line(t["title"].as_str().unwrap_or(""), 40),
                cell(&t["assignee"]),
                on,
            ]
        })
        .collect();
    let headers = ["ID", "STATUS", "TITLE", "ASSIGNEE", "WAITING ON (SINCE)"];
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in &rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: &[String], paint: &dyn Fn(usize, &str) -> String| {
        let mut out = String::new();
        for (i, c) in cells.iter().enumerate() {
            out.push_str(&paint(i, c));
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.trim_end().to_string() + "\n"
    };
    let mut out = line(&headers.map(str::to_string), &|_, c: &str| c.to_string());
    for row in &rows {
        out.push_str(&line(row, &|i, c: &str| {
            if i == 1 {
                status(style, c)
            } else {
                c.to_string()
            }
        }));
    }
    out
}

/// A numbered list under a heading (nothing when empty).
fn numbered(out: &mut String, heading: &str, items: &Value) {
    let items: Vec<&Value> = items.as_array().into_iter().flatten().collect();
    if items.is_empty() {
        return;
    }
    out.push_str(&format!("{heading}:\n"));
    for (i, item) in items.iter().enumerate() {
        out.push_str(&format!("  {}. {}\n", i + 1, cell(item)));
    }
}

/// The plan: summary, requirements, acceptance criteria, steps, assignee.
pub fn plan(task: &Value) -> String {
    let mut out = String::new();
    if let Some(summary) = task["summary"].as_str() {
        out.push_str(&format!("Plan: {summary}\n"));
    }
    numbered(&mut out, "Requirements", &task["requirements"]);
    numbered(
        &mut out,
        "Acceptance criteria",
        &task["acceptance_criteria"],
    );
    numbered(&mut out, "Steps", &task["steps"]);
    if let Some(assignee) = task["assignee"].as_str() {
        out.push_str(&format!("Assignee: {assignee}\n"));
    }
    out
}

/// The questions: each with its options by number and its answer (or that it is
/// open).
pub fn questions(task: &Value, style: Style) -> String {
    let mut out = String::new();
    for q in task["questions"].as_array().into_iter().flatten() {
        // Ids are unique within a round: a later round's say which.
        let round = match q["round"].as_u64() {
            Some(round) if round > 1 => format!("round {round}, "),
            _ => String::new(),
        };
        out.push_str(&format!(
            "[{round}{}] {}{}\n",
            cell(&q["id"]),
            q["question"].as_str().unwrap_or(""),
            if q["multi_select"] == true {
                " (one or more)"
            } else {
                ""
            }
        ));
        for (i, option) in q["options"].as_array().into_iter().flatten().enumerate() {
            let description = option["description"]
                .as_str()
                .filter(|d| !d.is_empty())
                .map(|d| format!(" — {d}"))
                .unwrap_or_default();
            out.push_str(&format!(
                "    {}. {}{description}\n",
                i + 1,
                cell(&option["label"])
            ));
        }
        match q["answer"].as_str() {
            Some(answer) => out.push_str(&format!(
                "    answer: {answer}{}\n",
                q["answered_by"]
                    .as_str()
                    .map(|by| format!(" (by {by})"))
                    .unwrap_or_default()
            )),
            None => out.push_str(&format!("    {}\n", style.yellow("open"))),
        }
    }
    out
}

/// The ids of the questions not answered yet.
pub fn open_questions(task: &Value) -> Vec<&Value> {
    task["questions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|q| q["answer"].is_null())
        .collect()
}

/// How to answer the open questions from the terminal (nothing when none is open).
pub fn how_to_answer(task: &Value) -> String {
    let open = open_questions(task);
    if open.is_empty() {
        return String::new();
    }
    let id = cell(&task["id"]);
    let pairs: Vec<String> = open
        .iter()
        .map(|q| format!("{}=\"…\"", cell(&q["id"])))
        .collect();
    format!(
        "Answer with: chorus task answer {id} {}\n  (or chorus task answer {id} on a terminal, which asks each in turn)\n",
        pairs.join(" ")
    )
}

/// The report: status, summary, output, and why it is blocked.
pub fn report(report: &Value, style: Style) -> String {
    if !report.is_object() {
        return String::new();
    }
    let state = cell(&report["status"]);
    let painted = match state.as_str() {
        "complete" => style.green(&state),
        _ => style.red(&state),
    };
    let mut out = format!("Report ({painted}): {}\n", cell(&report["summary"]));
    if let Some(reason) = report["blocked_reason"].as_str() {
        out.push_str(&format!("  blocked: {reason}\n"));
    }
    if let Some(output) = report["output"].as_str().filter(|o| !o.is_empty()) {
        for line in output.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out
}

/// `chorus task show`: every field of the task.
pub fn task(t: &Value, style: Style, now: DateTime<Utc>) -> String {
    let mut out = format!(
        "{} {}  {}\n",
        style.bold(&format!("task {}", cell(&t["id"]))),
        status(style, t["status"].as_str().unwrap_or("?")),
        t["title"].as_str().unwrap_or("")
    );
    let mut field = |key: &str, value: String| {
        out.push_str(&format!("  {:<14}{value}\n", format!("{key}:")));
    };
    field(
        "status since",
        format!(
            "{} ({} ago)",
            short_time(&t["status_since"]),
            age(&t["status_since"], now)
        ),
    );
    if let Some(waiting) = waiting_on(t, now) {
        field("waiting on", waiting);
    }
    if let Some(reason) = t["blocked_reason"].as_str() {
        field("blocked", reason.to_string());
    }
    field("assignee", cell(&t["assignee"]));
    field(
        "review",
        if t["review"] == true {
            "on (a person accepts the report)".into()
        } else {
            "off".into()
        },
    );
    if let Some(parent) = t["parent_id"].as_u64() {
        field("parent task", parent.to_string());
    }
    field(
        "created",
        format!(
            "{} by {}",
            short_time(&t["created_at"]),
            cell(&t["created_by"])
        ),
    );
    let limits = &t["limits"];
    if limits.is_object() {
        field(
            "limits",
            format!(
                "{} s, {} model calls",
                cell(&limits["time_secs"]),
                cell(&limits["model_calls"])
            ),
        );
    }
    if let Some(description) = t["description"].as_str().filter(|d| !d.is_empty()) {
        out.push_str("Description:\n");
        for line in description.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    out.push_str(&plan(t));
    let asked = questions(t, style);
    if !asked.is_empty() {
        out.push_str("Questions:\n");
        for line in asked.lines() {
            out.push_str(&format!("  {line}\n"));
        }
    }
    let attachments: Vec<&Value> = t["attachments"].as_array().into_iter().flatten().collect();
    if !attachments.is_empty() {
        out.push_str("Attachments:\n");
        for a in attachments {
            out.push_str(&format!(
                "  {} ({} bytes, by {} at {})\n",
                cell(&a["name"]),
                cell(&a["size"]),
                cell(&a["uploaded_by"]),
                short_time(&a["uploaded_at"])
            ));
        }
    }
    let chain: Vec<String> = t["chain"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|link| {
            let task = link["task_id"]
                .as_u64()
                .map(|id| format!(" (task {id})"))
                .unwrap_or_default();
            format!("{}{task}", cell(&link["agent"]))
        })
        .collect();
    if !chain.is_empty() {
        out.push_str(&format!("Agent chain: {}\n", chain.join(" -> ")));
    }
    let runs: Vec<&Value> = t["runs"].as_array().into_iter().flatten().collect();
    if !runs.is_empty() {
        out.push_str("Runs:\n");
        for run in runs {
            let ended = match run["ended_at"].as_str() {
                Some(_) => format!("ended {}", short_time(&run["ended_at"])),
                None => "going".to_string(),
            };
            out.push_str(&format!(
                "  #{} {} {} (thread {}, {}): {}; {} model calls, {} in / {} out tokens; started {}, {ended}\n",
                cell(&run["id"]),
                cell(&run["role"]),
                cell(&run["agent"]),
                cell(&run["thread_id"]),
                cell(&run["backend"]),
                run["outcome"].as_str().unwrap_or("running"),
                cell(&run["model_calls"]),
                cell(&run["input_tokens"]),
                cell(&run["output_tokens"]),
                short_time(&run["started_at"]),
            ));
        }
    }
    out.push_str(&report(&t["report"], style));
    out
}

/// One history event's data in a few words: a status change as `from -> to`, else
/// its fields as `key=value` (strings bare, nulls left out).
pub fn event_detail(kind: &str, data: &Value) -> String {
    if kind == "status_changed" {
        let reason = data["reason"]
            .as_str()
            .map(|r| format!(": {}", one_line(r, 80)))
            .unwrap_or_default();
        return format!("{} -> {}{reason}", cell(&data["from"]), cell(&data["to"]));
    }
    let Some(fields) = data.as_object() else {
        return match data {
            Value::Null => String::new(),
            other => one_line(&cell(other), 100),
        };
    };
    let parts: Vec<String> = fields
        .iter()
        .filter(|(_, v)| !v.is_null())
        .map(|(k, v)| format!("{k}={}", one_line(&cell(v), 60)))
        .collect();
    one_line(&parts.join(" "), 120)
}

/// `GET /api/tasks/{id}/history` as a timeline: when, what, who, and its details.
pub fn history(answer: &Value, style: Style) -> String {
    let events: Vec<&Value> = answer["events"].as_array().into_iter().flatten().collect();
    if events.is_empty() {
        return "No history yet.\n".into();
    }
    let mut out = String::new();
    for e in events {
        let kind = e["kind"].as_str().unwrap_or("?");
        let detail = event_detail(kind, &e["data"]);
        out.push_str(&format!(
            "{} {:<18} {}{}\n",
            style.dim(&format!("[{}] {}", cell(&e["id"]), short_time(&e["at"]))),
            kind,
            style.dim(&format!("by {}", cell(&e["by"]))),
            if detail.is_empty() {
                String::new()
            } else {
                format!("  {detail}")
            }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: Style = Style { color: false };

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-26T15:10:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    fn sample() -> Value {
        json!({
            "id": 7, "title": "Add a cache", "description": "Cache the lookups.\nKeep it small.",
            "status": "awaiting_input", "review": true,
            "status_since": "2026-11-26T15:07:00Z", "created_at": "2026-11-26T15:06:00.123Z",
            "updated_at": "2026-11-26T15:07:00Z", "created_by": "alice",
            "parent_id": null, "summary": "An LRU cache in front of lookups",
            "requirements": ["bounded memory"], "acceptance_criteria": ["tests pass"],
            "steps": ["write the cache", "wire it"], "assignee": "coder", "blocked_reason": null,
            "report": null,
            "questions": [
                {"id": "q1", "question": "Which backend?", "options": [
                    {"label": "SQLite", "description": "one file"}, {"label": "Postgres", "description": ""}],
                 "multi_select": false, "asked_at": "2026-11-26T15:07:00Z",
                 "answer": null, "answered_by": null, "answered_at": null},
                {"id": "q2", "round": 2, "question": "How big?", "options": [], "multi_select": false,
                 "asked_at": "2026-11-26T15:07:00Z", "answer": "1000 entries",
                 "answered_by": "bob", "answered_at": "2026-11-26T15:08:00Z"}],
            "attachments": [{"name": "spec.md", "size": 120, "uploaded_by": "alice",
                             "uploaded_at": "2026-11-26T15:06:30Z"}],
            "chain": [{"agent": "coder", "task_id": 7, "started_at": "…", "ended_at": null},
                      {"agent": "reviewer", "task_id": 8, "started_at": "…", "ended_at": null}],
            "runs": [{"id": 1, "role": "planner", "agent": "planner", "backend": "api", "thread_id": 3,
                      "outcome": "asked", "report": null, "input_tokens": 120, "output_tokens": 40,
                      "model_calls": 2, "started_at": "2026-11-26T15:06:00Z",
                      "ended_at": "2026-11-26T15:07:00Z"}],
            "waiting_on": {"kind": "question", "detail": "q1", "since": "2026-11-26T15:07:00Z"},
            "limits": {"time_secs": 3600, "model_calls": 200}
        })
    }

    #[test]
    fn show_has_every_field_and_what_it_waits_on() {
        let text = task(&sample(), PLAIN, now());
        for expected in [
            "task 7 awaiting_input  Add a cache\n",
            "  status since: 2026-11-26 15:07:00 (3 min 0 s ago)\n",
            "  waiting on:   question: q1 (for 3 min 0 s)\n",
            "  assignee:     coder\n",
            "  review:       on (a person accepts the report)\n",
            "  created:      2026-11-26 15:06:00 by alice\n",
            "  limits:       3600 s, 200 model calls\n",
            "Description:\n  Cache the lookups.\n  Keep it small.\n",
            "Plan: An LRU cache in front of lookups\n",
            "Requirements:\n  1. bounded memory\n",
            "Acceptance criteria:\n  1. tests pass\n",
            "Steps:\n  1. write the cache\n  2. wire it\n",
            "  [q1] Which backend?\n      1. SQLite — one file\n      2. Postgres\n      open\n",
            "  [round 2, q2] How big?\n      answer: 1000 entries (by bob)\n",
            "  spec.md (120 bytes, by alice at 2026-11-26 15:06:30)\n",
            "Agent chain: coder (task 7) -> reviewer (task 8)\n",
            "  #1 planner planner (thread 3, api): asked; 2 model calls, 120 in / 40 out tokens",
        ] {
            assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
        }
        assert!(!text.contains('\x1b'));
    }

    #[test]
    fn the_list_says_what_each_task_waits_on_and_for_how_long() {
        let mut done = sample();
        done["id"] = json!(8);
        done["status"] = json!("completed");
        done["waiting_on"] = Value::Null;
        done["assignee"] = Value::Null;
        done["status_since"] = json!("2026-11-26T15:09:30Z");
        let text = list(&json!({"tasks": [sample(), done]}), PLAIN, now());
        assert_eq!(
            text,
            "ID  STATUS          TITLE        ASSIGNEE  WAITING ON (SINCE)\n\
             7   awaiting_input  Add a cache  coder     question: q1 (3 min 0 s)\n\
             8   completed       Add a cache  -         - (30.0 s completed)\n"
        );
        assert!(list(&json!({"tasks": []}), PLAIN, now()).starts_with("No tasks."));
    }

    #[test]
    fn how_to_answer_names_only_the_open_questions() {
        assert_eq!(
            how_to_answer(&sample()),
            "Answer with: chorus task answer 7 q1=\"…\"\n  (or chorus task answer 7 on a terminal, which asks each in turn)\n"
        );
        let mut answered = sample();
        answered["questions"][0]["answer"] = json!("SQLite");
        assert_eq!(how_to_answer(&answered), "");
    }

    #[test]
    fn history_reads_as_a_timeline_of_who_did_what() {
        let events = json!({"events": [
            {"id": 1, "at": "2026-11-26T15:06:00Z", "kind": "created", "by": "alice", "data": {}},
            {"id": 2, "at": "2026-11-26T15:07:00Z", "kind": "status_changed", "by": "chorus",
             "data": {"from": "planning", "to": "awaiting_input", "reason": null}},
            {"id": 3, "at": "2026-11-26T15:08:00Z", "kind": "tool_call", "by": "agent:coder:4",
             "data": {"name": "create_file", "input": "notes.md", "status": "ok", "error": null}},
        ]});
        assert_eq!(
            history(&events, PLAIN),
            "[1] 2026-11-26 15:06:00 created            by alice\n\
             [2] 2026-11-26 15:07:00 status_changed     by chorus  planning -> awaiting_input\n\
             [3] 2026-11-26 15:08:00 tool_call          by agent:coder:4  input=notes.md name=create_file status=ok\n"
        );
    }

    #[test]
    fn a_report_shows_its_status_summary_output_and_reason() {
        let r = json!({"status": "blocked", "summary": "Cannot build", "output": "log line 1\nlog line 2",
                       "blocked_reason": "no compiler"});
        assert_eq!(
            report(&r, PLAIN),
            "Report (blocked): Cannot build\n  blocked: no compiler\n  log line 1\n  log line 2\n"
        );
        assert_eq!(report(&Value::Null, PLAIN), "");
    }
}
