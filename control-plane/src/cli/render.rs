//! How the terminal client shows things: pure functions from the API's JSON to
//! text. Colour only when asked (a terminal, and `NO_COLOR` unset); never an escape
//! code otherwise, so pipes and files get plain text.

use serde_json::Value;

use crate::feed::{FeedEvent, ThreadOrigin};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Style {
    pub color: bool,
}

impl Style {
    /// Colour for a terminal that did not opt out (`NO_COLOR`).
    pub fn for_terminal(is_terminal: bool, no_color: bool) -> Style {
        Style {
            color: is_terminal && !no_color,
        }
    }

    fn paint(self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_string()
        }
    }

    pub fn bold(self, text: &str) -> String {
        self.paint("1", text)
    }

    pub fn dim(self, text: &str) -> String {
        self.paint("2", text)
    }

    pub fn red(self, text: &str) -> String {
        self.paint("31", text)
    }

    pub fn green(self, text: &str) -> String {
        self.paint("32", text)
    }

    pub fn yellow(self, text: &str) -> String {
        self.paint("33", text)
    }

    /// A thread's or worker's status, coloured by what it means.
    pub fn status(self, status: &str) -> String {
        match status {
            "completed" | "running_ok" => self.green(status),
            "failed" | "killed" | "crashed" => self.red(status),
            "waiting_for_permission" | "idle" => self.yellow(status),
            "running" => self.paint("36", status),
            _ => status.to_string(),
        }
    }
}

/// A value as a cell: strings bare, null as `-`, anything else as JSON.
pub(super) fn cell(value: &Value) -> String {
    match value {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// One line, cut to `max` characters with an ellipsis.
pub fn one_line(text: &str, max: usize) -> String {
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .unwrap_or("");
    let more = text.lines().filter(|l| !l.trim().is_empty()).count() > 1;
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more {
        format!("{line} …")
    } else {
        line.to_string()
    }
}

/// One row per element of the array `list` (none when it is not an array).
pub(super) fn rows_of(list: &Value, row: impl Fn(&Value) -> Vec<String>) -> Vec<Vec<String>> {
    list.as_array().into_iter().flatten().map(row).collect()
}

/// Columns padded to their widest cell (measured before colouring, which the
/// closure applies per cell).
pub(super) fn table(
    headers: &[&str],
    rows: &[Vec<String>],
    paint: impl Fn(usize, &str) -> String,
) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, c) in row.iter().enumerate() {
            widths[i] = widths[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>, painted: Vec<String>| {
        let mut out = String::new();
        for (i, (c, p)) in cells.iter().zip(painted).enumerate() {
            out.push_str(&p);
            if i + 1 < cells.len() {
                out.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.trim_end().to_string()
    };
    let mut out = vec![line(
        headers
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
        headers
            .iter()
            .map(std::string::ToString::to_string)
            .collect(),
    )];
    for row in rows {
        out.push(line(
            row.clone(),
            row.iter().enumerate().map(|(i, c)| paint(i, c)).collect(),
        ));
    }
    out.join("\n") + "\n"
}

/// "1.2 s", "3 min 4 s", "2 h 5 min".
pub fn duration_ms(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{:.1} s", ms as f64 / 1000.0)
    } else if secs < 3600 {
        format!("{} min {} s", secs / 60, secs % 60)
    } else {
        format!("{} h {} min", secs / 3600, (secs % 3600) / 60)
    }
}

/// `GET /api/workers/tokens` as a table: name, state, volumes, when made.
pub fn worker_tokens(list: &Value) -> String {
    let rows = rows_of(&list["tokens"], |t| {
        let volumes: Vec<&str> = t["volumes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        vec![
            cell(&t["name"]),
            match t["revoked_at"].as_str() {
                Some(at) => format!("revoked {at}"),
                None => "active".into(),
            },
            if volumes.is_empty() {
                "-".into()
            } else {
                volumes.join(",")
            },
            cell(&t["created_at"]),
        ]
    });
    if rows.is_empty() {
        return "No worker credentials yet. Make one: chorus worker token create <name>\n".into();
    }
    table(&["NAME", "STATE", "VOLUMES", "CREATED"], &rows, |_, c| {
        c.to_string()
    })
}

pub fn agents(list: &Value, style: Style) -> String {
    let rows = rows_of(list, |a| {
        vec![
            cell(&a["name"]),
            cell(&a["model"]),
            cell(&a["backend"]),
            match &a["permissions"] {
                Value::String(s) => s.clone(),
                Value::Null => "-".into(),
                _ => "custom".into(),
            },
            cell(&a["worker"]["state"]),
            a["usage"]["input_tokens"]
                .as_u64()
                .map(|i| {
                    format!(
                        "{i} in / {} out",
                        a["usage"]["output_tokens"].as_u64().unwrap_or(0)
                    )
                })
                .unwrap_or_else(|| "-".into()),
        ]
    });
    if rows.is_empty() {
        return "No agents yet. Create one: chorus agent create <name>\n".into();
    }
    table(
        &[
            "NAME",
            "MODEL",
            "BACKEND",
            "PERMISSIONS",
            "WORKER",
            "TOKENS",
        ],
        &rows,
        |i, c| {
            if i == 4 {
                style.status(c)
            } else {
                c.to_string()
            }
        },
    )
}

/// `claude-code (usable, 2.1.332)` / `opencode (not usable: <reason>)` / `api`.
fn backend_line(a: &Value) -> String {
    let backend = cell(&a["backend"]);
    let status = &a["backend_status"];
    if status.is_null() {
        return backend;
    }
    match status["usable"].as_bool() {
        Some(true) => match status["version"].as_str() {
            Some(version) => format!("{backend} (usable, {version})"),
            None => format!("{backend} (usable)"),
        },
        _ => format!(
            "{backend} (not usable: {})",
            status["reason"].as_str().unwrap_or("no reason given")
        ),
    }
}

pub fn agent(a: &Value, style: Style) -> String {
    let mut out = format!("{}\n", style.bold(&cell(&a["name"])));
    let permissions = match &a["permissions"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let worker = &a["worker"];
    let mut worker_line = style.status(&cell(&worker["state"]));
    let restarts = worker["restarts"].as_u64().unwrap_or(0);
    if let Some(pid) = worker["pid"].as_u64() {
        worker_line.push_str(&format!(" (pid {pid}, {restarts} restarts)"));
    } else if let Some(name) = worker["dial_in_worker"].as_str() {
        let credential = worker["dial_in_credential"]
            .as_str()
            .map(|c| format!(" joined as {c}"))
            .unwrap_or_default();
        worker_line.push_str(&format!(
            " (on dial-in worker {name}{credential}, {restarts} restarts)"
        ));
    }
    let idle = match a["effective_idle_timeout_secs"].as_u64() {
        Some(0) => "never".to_string(),
        Some(s) => format!("{s} s"),
        None => "-".into(),
    };
    for (key, value) in [
        ("model", cell(&a["model"])),
        ("permissions", permissions),
        ("on ask", cell(&a["on_ask"])),
        ("network", cell(&a["network"])),
        ("backend", backend_line(a)),
        ("sandbox", cell(&a["sandbox"])),
        ("worker", worker_line),
        ("idle save after", idle),
        ("heartbeat", heartbeat_line(a)),
        ("workspace", cell(&a["workspace"])),
        ("created", cell(&a["created_at"])),
    ] {
        out.push_str(&format!("  {:<18}{value}\n", format!("{key}:")));
    }
    if let Some(exit) = worker["last_exit"].as_str() {
        out.push_str(&format!("  {:<18}{exit}\n", "last exit:"));
    }
    let prompt = a["system_prompt"].as_str().unwrap_or("");
    if !prompt.is_empty() {
        out.push_str(&format!(
            "  {:<18}{}\n",
            "system prompt:",
            one_line(prompt, 70)
        ));
    }
    out
}

/// `off`, or how often the agent reads its HEARTBEAT.md, on which model, and when next.
fn heartbeat_line(a: &Value) -> String {
    match a["heartbeat_minutes"].as_u64() {
        None | Some(0) => "off".into(),
        Some(minutes) => {
            let mut line = format!("every {minutes} min");
            if let Some(model) = a["heartbeat_model"].as_str() {
                line.push_str(&format!(" on {model}"));
            }
            if let Some(next) = a["heartbeat_next_at"].as_str() {
                line.push_str(&format!(", next {next}"));
            }
            line
        }
    }
}

pub fn threads(list: &Value, style: Style) -> String {
    let rows = rows_of(list, |t| {
        vec![
            cell(&t["id"]),
            cell(&t["status"]),
            t["step_number"]
                .as_u64()
                .map_or("-".into(), |n| n.to_string()),
            t["elapsed_ms"].as_u64().map_or("-".into(), duration_ms),
            one_line(t["summary"].as_str().unwrap_or(""), 40),
            one_line(
                t["current_step"]
                    .as_str()
                    .or(t["error"].as_str())
                    .unwrap_or(""),
                50,
            ),
        ]
    });
    if rows.is_empty() {
        return "No threads (ended ones leave this list after a while; add --all).\n".into();
    }
    table(
        &["ID", "STATUS", "STEP", "ELAPSED", "SUMMARY", "NOW / ERROR"],
        &rows,
        |i, c| {
            if i == 1 {
                style.status(c)
            } else {
                c.to_string()
            }
        },
    )
}

pub fn thread(t: &Value, style: Style) -> String {
    let mut out = format!(
        "{} {}  {}\n",
        style.bold(&format!("thread {}", cell(&t["id"]))),
        style.status(&cell(&t["status"])),
        t["summary"].as_str().unwrap_or("")
    );
    if let Some(from) = t["continued_from"].as_u64() {
        out.push_str(&format!("  continues thread {from}\n"));
    }
    if let Some(error) = t["error"].as_str() {
        out.push_str(&format!("  {} {error}\n", style.red("error:")));
    }
    for m in t["messages"].as_array().into_iter().flatten() {
        let role = m["role"].as_str().unwrap_or("?");
        let id = cell(&m["id"]);
        let content = m["content"].as_str().unwrap_or("");
        let head = style.dim(&format!("[{id}] {role}"));
        match role {
            "tool" => out.push_str(&format!(
                "{head} {}{}\n",
                if m["is_error"] == true {
                    style.red("error: ")
                } else {
                    String::new()
                },
                one_line(content, 100)
            )),
            _ => {
                let pending = if m["pending"] == true {
                    " (not seen yet)"
                } else {
                    ""
                };
                out.push_str(&format!("{head}{pending}\n"));
                if !content.is_empty() {
                    for line in content.lines() {
                        out.push_str(&format!("  {line}\n"));
                    }
                }
                for call in m["tool_calls"].as_array().into_iter().flatten() {
                    out.push_str(&format!(
                        "  -> {} {}\n",
                        cell(&call["name"]),
                        one_line(call["arguments"].as_str().unwrap_or(""), 90)
                    ));
                }
            }
        }
    }
    if t["next"].is_string() {
        out.push_str(&style.dim("(more messages: the API pages them with ?after=)\n"));
    }
    out
}

pub fn approvals(list: &Value, style: Style) -> String {
    let rows = rows_of(list, |a| {
        vec![
            cell(&a["id"]),
            cell(&a["agent"]),
            cell(&a["thread_id"]),
            cell(&a["tool"]),
            one_line(
                &a["actions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(", "),
                60,
            ),
            cell(&a["expires_at"]),
        ]
    });
    if rows.is_empty() {
        return "No approvals waiting.\n".into();
    }
    let mut out = table(
        &["ID", "AGENT", "THREAD", "TOOL", "WANTS", "EXPIRES"],
        &rows,
        |i, c| {
            if i == 0 { style.bold(c) } else { c.to_string() }
        },
    );
    out.push_str("Answer with: chorus approve <id>  or  chorus deny <id>\n");
    out
}

/// Issued API tokens (never their secrets): a revoked one says since when.
pub fn tokens(list: &Value, style: Style) -> String {
    let rows = rows_of(&list["tokens"], |t| {
        vec![
            cell(&t["id"]),
            cell(&t["user"]),
            cell(&t["role"]),
            one_line(t["label"].as_str().unwrap_or(""), 40),
            cell(&t["created_at"]),
            cell(&t["last_used_at"]),
            match t["revoked_at"].as_str() {
                Some(at) => format!("revoked {at}"),
                None => "good".to_string(),
            },
        ]
    });
    if rows.is_empty() {
        return "No API tokens issued.\n".into();
    }
    table(
        &[
            "ID",
            "USER",
            "ROLE",
            "LABEL",
            "CREATED",
            "LAST USED",
            "STATE",
        ],
        &rows,
        |i, c| {
            if i == 0 { style.bold(c) } else { c.to_string() }
        },
    )
}

pub fn sessions(history: &Value) -> String {
    let rows = rows_of(&history["sessions"], |s| {
        vec![
            cell(&s["id"]),
            cell(&s["saved_at"]),
            cell(&s["trigger"]),
            cell(&s["message_count"]),
            one_line(s["description"].as_str().unwrap_or(""), 60),
        ]
    });
    if rows.is_empty() {
        return "No saved sessions.\n".into();
    }
    table(
        &["ID", "SAVED", "TRIGGER", "MESSAGES", "DESCRIPTION"],
        &rows,
        |_, c| c.to_string(),
    )
}

/// `GET /api/models`: each provider, whether it is usable, and the names to use.
pub fn models(snapshot: &Value, style: Style) -> String {
    let providers = snapshot["providers"].as_object();
    if providers.is_none_or(serde_json::Map::is_empty) {
        return "No model provider is configured: chorus status says what to set.\n".into();
    }
    let mut out = String::new();
    for (name, p) in providers.into_iter().flatten() {
        let models: Vec<&str> = p["models"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let state = if p["valid"] == true {
            style.green("usable")
        } else if p["reachable"] == false {
            style.red("unreachable")
        } else {
            style.red("refused")
        };
        out.push_str(&format!(
            "{} {state} at {}\n",
            style.bold(name),
            cell(&p["base_url"])
        ));
        if let Some(error) = p["error"].as_str() {
            out.push_str(&format!("  {error}\n"));
        }
        // Local servers' models are named with their provider (`ollama/llama3.2`).
        let prefix = if matches!(name.as_str(), "ollama" | "lmstudio") {
            format!("{name}/")
        } else {
            String::new()
        };
        for model in &models {
            out.push_str(&format!("  {prefix}{model}\n"));
        }
        if models.is_empty() && p["error"].is_null() {
            out.push_str("  (no models listed)\n");
        }
    }
    if let Some(at) = snapshot["refreshed_at"].as_str() {
        out.push_str(&style.dim(&format!(
            "checked {at}; chorus models --refresh checks again\n"
        )));
    }
    out
}

/// `GET /api/agents/{name}/audit`: newest first.
pub fn audit(page: &Value, style: Style) -> String {
    let rows = rows_of(&page["entries"], |e| {
        vec![
            cell(&e["id"]),
            cell(&e["timestamp"]),
            cell(&e["thread_id"]),
            cell(&e["decision"]),
            cell(&e["result"]),
            cell(&e["user_id"]),
            one_line(e["action"].as_str().unwrap_or(""), 70),
        ]
    });
    if rows.is_empty() {
        return "Nothing in the audit log yet.\n".into();
    }
    let mut out = table(
        &["ID", "TIME", "THREAD", "DECISION", "RESULT", "BY", "ACTION"],
        &rows,
        |i, c| match (i, c) {
            (3, "deny" | "denied") => style.red(c),
            (3, "ask" | "asked") => style.yellow(c),
            _ => c.to_string(),
        },
    );
    if let Some(before) = page["entries"]
        .as_array()
        .and_then(|e| e.last())
        .and_then(|e| e["id"].as_i64())
        .filter(|_| page["next"].is_string())
    {
        out.push_str(&style.dim(&format!("older: add --before {before}\n")));
    }
    out
}

/// The tools (`GET /api/tools`), or an agent's with the decision a typical call
/// gets (`GET /api/agents/{name}/tools`): a DECISION column only then.
pub fn tools(list: &Value, style: Style) -> String {
    let with_decision = list["tools"]
        .as_array()
        .is_some_and(|t| t.iter().any(|t| t.get("decision").is_some()));
    let rows = rows_of(&list["tools"], |t| {
        let mut row = vec![cell(&t["name"]), cell(&t["wire_name"]), cell(&t["runs_in"])];
        if with_decision {
            row.push(cell(&t["decision"]));
        }
        row.push(one_line(t["description"].as_str().unwrap_or(""), 60));
        row
    });
    if rows.is_empty() {
        return "No tools: the agent's profile denies every tool.\n".into();
    }
    let headers: &[&str] = if with_decision {
        &[
            "NAME",
            "MODEL CALLS IT",
            "RUNS IN",
            "DECISION",
            "DESCRIPTION",
        ]
    } else {
        &["NAME", "MODEL CALLS IT", "RUNS IN", "DESCRIPTION"]
    };
    table(headers, &rows, |i, c| match (with_decision && i == 3, c) {
        (true, "deny") => style.red(c),
        (true, "ask") => style.yellow(c),
        _ => c.to_string(),
    })
}

/// `GET /api/agents/{name}/jobs`: background jobs, running first.
pub fn jobs(list: &Value, style: Style) -> String {
    let rows = rows_of(&list["jobs"], |t| {
        vec![
            cell(&t["id"]),
            cell(&t["status"]),
            cell(&t["exit_code"]),
            cell(&t["pid"]),
            cell(&t["started_at"]),
            cell(&t["ended_at"]),
            one_line(t["command"].as_str().unwrap_or(""), 60),
        ]
    });
    if rows.is_empty() {
        return "No background jobs.\n".into();
    }
    table(
        &["ID", "STATUS", "EXIT", "PID", "STARTED", "ENDED", "COMMAND"],
        &rows,
        |i, c| match (i, c) {
            (1, "running") => style.status(c),
            (1, "failed" | "lost") => style.red(c),
            _ => c.to_string(),
        },
    )
}

/// One event of the live feed (`chorus events`) as a line; `None` for what a person
/// need not see line by line (streamed text: the stored message follows).
pub fn feed_line(kind: &str, data: &Value, style: Style) -> Option<String> {
    let agent = data["agent"].as_str().unwrap_or("?");
    let head = match data["thread_id"].as_u64() {
        Some(id) => style.bold(&format!("{agent} #{id}")),
        None => style.bold(agent),
    };
    if kind == "reset" {
        return Some(style.yellow(&format!(
            "(events were missed: {}; chorus threads <agent> shows where threads are)\n",
            data["reason"].as_str().unwrap_or("the feed was reset")
        )));
    }
    let Ok(event) = FeedEvent::from_wire(kind, data.clone()) else {
        // A kind this build does not know: shown as it came.
        return Some(format!(
            "{head} {kind}: {}\n",
            one_line(&data.to_string(), 100)
        ));
    };
    let body = match &event {
        FeedEvent::Text { .. } => return None,
        FeedEvent::InputTaken { .. } => format!("{kind}: {}", one_line(&data.to_string(), 100)),
        FeedEvent::StepEnded(step) if !step.failed => return None,
        FeedEvent::ThreadCreated(created) => format!(
            "new thread from {}{}",
            created.user,
            match &created.origin {
                ThreadOrigin::Started {
                    continued_from: Some(t),
                } => format!(", continuing #{t}"),
                _ => String::new(),
            }
        ),
        FeedEvent::Status(change) => {
            let status = change.status.as_str();
            match change.error() {
                Some(error) => format!("{}: {}", style.status(status), one_line(error, 100)),
                None => style.status(status),
            }
        }
        FeedEvent::StepStarted(step) => {
            format!("step {}: {}", step.number, one_line(&step.description, 100))
        }
        FeedEvent::StepEnded(step) => style.red(&format!("step {} failed", step.number)),
        FeedEvent::Message(message) => format!(
            "{}: {}",
            message.role.as_str(),
            one_line(&message.content, 100)
        ),
        FeedEvent::Approval(asked) => format!(
            "{} {} wants {} (chorus approve {})",
            style.yellow("approval"),
            asked.tool,
            one_line(&asked.actions.join(", "), 80),
            asked.approval_id
        ),
        FeedEvent::ApprovalAnswered(answered) => format!(
            "approval {}{}",
            answered.answer.as_str(),
            answered
                .answer
                .by()
                .map(|b| format!(" by {b}"))
                .unwrap_or_default()
        ),
        FeedEvent::Summary { summary } => format!("titled: {}", one_line(summary, 100)),
        FeedEvent::Notification(notification) => one_line(notification.text(), 120),
        FeedEvent::Task(change) => format!(
            "task {} {} by {} ({})",
            change.task_id,
            change.kind,
            change.by,
            style.status(change.status.as_str())
        ),
        FeedEvent::TaskDeleted(deleted) => {
            format!("task {} deleted by {}", deleted.task_id, deleted.by)
        }
        FeedEvent::Agent(change) => format!("agent {} by {}", change.change.as_str(), change.by),
        FeedEvent::Worker(worker) => {
            let state = serde_json::to_value(worker.state).unwrap_or_default();
            let state = state.as_str().unwrap_or("?");
            match (&worker.dial_in_worker, &worker.last_exit) {
                (Some(who), _) => format!("worker {} ({who})", style.status(state)),
                (None, Some(exit)) if worker.state != crate::workers::WorkerState::Running => {
                    format!("worker {}: {}", style.status(state), one_line(exit, 100))
                }
                _ => format!("worker {}", style.status(state)),
            }
        }
    };
    Some(format!("{head} {body}\n"))
}

/// An agent's granted tools (`chorus grants`).
pub fn grants(agent: &str, list: &Value) -> String {
    let rows = rows_of(&list["grants"], |g| {
        vec![
            cell(&g["tool"]),
            cell(&g["granted_by"]),
            cell(&g["granted_at"]),
        ]
    });
    if rows.is_empty() {
        return format!("No tools are granted to {agent}: its profile decides every call.\n");
    }
    table(&["TOOL", "GRANTED BY", "AT"], &rows, |_, c| c.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const PLAIN: Style = Style { color: false };

    #[test]
    fn colour_only_on_a_terminal_that_did_not_opt_out() {
        assert!(Style::for_terminal(true, false).color);
        assert!(!Style::for_terminal(false, false).color);
        assert!(!Style::for_terminal(true, true).color);
        assert_eq!(PLAIN.status("failed"), "failed");
        assert_eq!(
            Style { color: true }.status("failed"),
            "\x1b[31mfailed\x1b[0m"
        );
    }

    #[test]
    fn a_thread_list_is_an_aligned_table() {
        let list = json!([
            {"id": 1, "status": "running", "step_number": 3, "elapsed_ms": 65_000,
             "summary": "Refactor the auth module", "current_step": "Calling model"},
            {"id": 12, "status": "failed", "step_number": null, "elapsed_ms": 500,
             "summary": "x", "current_step": null, "error": "the model refused"},
        ]);
        assert_eq!(
            threads(&list, PLAIN),
            "ID  STATUS   STEP  ELAPSED    SUMMARY                   NOW / ERROR\n\
             1   running  3     1 min 5 s  Refactor the auth module  Calling model\n\
             12  failed   -     0.5 s      x                         the model refused\n"
        );
        assert!(threads(&json!([]), PLAIN).starts_with("No threads"));
    }

    #[test]
    fn tools_are_a_table_with_the_decision_only_for_an_agent() {
        let all = json!({"tools": [{"name": "file.read", "wire_name": "file_read",
            "runs_in": "worker", "description": "Read a text file", "schema": {}}]});
        let text = tools(&all, PLAIN);
        assert!(text.starts_with("NAME"), "{text}");
        assert!(!text.contains("DECISION"), "{text}");
        assert!(
            text.contains("file.read  file_read       worker   Read a text file"),
            "{text}"
        );
        let mine = json!({"tools": [{"name": "bash", "wire_name": "bash",
            "runs_in": "worker", "decision": "ask", "description": "Run", "schema": {}}]});
        let text = tools(&mine, PLAIN);
        assert!(text.contains("DECISION"), "{text}");
        assert!(text.contains(" ask "), "{text}");
        assert!(tools(&json!({"tools": []}), PLAIN).contains("denies every tool"));
    }

    #[test]
    fn models_name_what_to_use_and_feed_lines_name_the_thread() {
        let snapshot = json!({"refreshed_at": "2026-01-01T00:00:00Z", "providers": {
            "ollama": {"valid": true, "base_url": "http://127.0.0.1:11434/v1", "models": ["llama3.2"], "error": null},
            "openai": {"valid": false, "reachable": true, "base_url": "https://x/v1", "models": [],
                       "error": "the key was refused (401)"},
        }});
        let text = models(&snapshot, PLAIN);
        assert!(
            text.contains("ollama usable at http://127.0.0.1:11434/v1\n  ollama/llama3.2\n"),
            "{text}"
        );
        assert!(
            text.contains("openai refused at https://x/v1\n  the key was refused (401)\n"),
            "{text}"
        );
        assert!(models(&json!({"providers": {}}), PLAIN).contains("chorus status"));
        let line = feed_line(
            "step_started",
            &json!({"agent": "helper", "thread_id": 3, "number": 2, "kind": "tool", "description": "view a.md"}),
            PLAIN,
        );
        assert_eq!(line.as_deref(), Some("helper #3 step 2: view a.md\n"));
        assert_eq!(
            feed_line(
                "text",
                &json!({"agent": "h", "thread_id": 1, "step": 1, "text": "x"}),
                PLAIN
            ),
            None
        );
    }

    #[test]
    fn chorus_events_shows_agent_and_worker_changes() {
        let line = |kind: &str, data: Value| feed_line(kind, &data, PLAIN);
        assert_eq!(
            line(
                "agent",
                json!({"agent": "scout", "thread_id": null, "change": "destroyed", "by": "api"})
            )
            .as_deref(),
            Some("scout agent destroyed by api\n")
        );
        let worker = json!({"agent": "scout", "thread_id": null, "state": "restarting",
            "pid": null, "dial_in_worker": null, "dial_in_credential": null, "restarts": 2,
            "last_exit": "exited with status 1"});
        assert_eq!(
            line("worker", worker).as_deref(),
            Some("scout worker restarting: exited with status 1\n")
        );
    }

    #[test]
    fn long_text_is_cut_to_one_line() {
        assert_eq!(one_line("first\nsecond", 20), "first …");
        assert_eq!(one_line("abcdef", 4), "abc…");
        assert_eq!(one_line("", 4), "");
    }

    #[test]
    fn a_coloured_table_aligns_on_the_text_not_the_codes() {
        let list = json!([
            {"id": 1, "status": "failed", "summary": "a"},
            {"id": 2, "status": "completed", "summary": "b"},
        ]);
        let plain = threads(&list, PLAIN);
        let coloured = threads(&list, Style { color: true });
        let stripped = coloured
            .replace("\x1b[31m", "")
            .replace("\x1b[32m", "")
            .replace("\x1b[0m", "");
        assert_eq!(stripped, plain);
    }
}
