//! The task board from the terminal client (`chorus task …`) through the real
//! binaries and a fake model: a task planned after two questions (answered at a
//! terminal, an option by its number), started, worked by `coder` with the file
//! tools and closed by its report; one in review sent back and accepted; what a
//! script gets with `--json`, and the API's refusals as exit 1 with its message.

use chorus_test_support::fake_model::tool_call;
use chorus_test_support::{Chorus, FakeOpenAi};
use serde_json::{Value, json};

use super::cli::{Terminal, client, stderr as err, stdout as out};

/// What a terminal shows as plain text: colour codes left out, `\r\n` read as `\n`.
fn plain(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // CSI: ESC [ parameters final-letter
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out.replace("\r\n", "\n")
}

/// Asserts `text` holds each of `parts`, in this order, as a terminal shows it.
fn in_order(text: &str, parts: &[&str]) {
    let text = &plain(text);
    let mut rest = text.as_str();
    for part in parts {
        let Some(at) = rest.find(part) else {
            panic!("{part:?} missing (or out of order) in:\n{text}");
        };
        rest = &rest[at + part.len()..];
    }
}

#[tokio::test]

async fn a_task_is_planned_answered_started_and_reported_from_the_terminal() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "coder", "permissions": "open"}))
        .await?;
    let dir = tempfile::tempdir()?;
    let spec = dir.path().join("spec.md");
    std::fs::write(&spec, "Keep it under 100 lines.\n")?;

    // Create: the planner asks two questions, one with options; the client follows
    // it and ends at the questions, with the command that answers them.
    model.push(tool_call(
        "p1",
        "ask_questions",
        json!({"questions": [
            {"id": "q1", "question": "Which backend?", "options": [
                {"label": "SQLite", "description": "one file"},
                {"label": "Postgres", "description": "a server"}]},
            {"id": "q2", "question": "How many entries?"}]}),
    ));
    let created = client(
        &chorus,
        &[
            "task",
            "create",
            "Add a cache",
            "-d",
            "Cache the lookups of src/db.rs",
            "--attach",
            spec.to_str().unwrap(),
        ],
    )
    .await;
    let text = out(&created);
    assert!(created.status.success(), "{text}\n{}", err(&created));
    in_order(
        &text,
        &[
            "task 1 planning  Add a cache\n",
            "== planner (planner), thread ",
            "-> step 1:",
            "task 1 awaiting_input\n",
            "[q1] Which backend?\n",
            "    1. SQLite — one file\n",
            "    2. Postgres — a server\n",
            "[q2] How many entries?\n",
            "Answer with: chorus task answer 1 q1=\"…\" q2=\"…\"",
        ],
    );
    assert!(
        !text.contains('\x1b'),
        "no escape codes in a pipe: {text:?}"
    );

    // The list says what it waits on.
    let listed = out(&client(&chorus, &["task", "list"]).await);
    in_order(
        &listed,
        &[
            "ID",
            "STATUS",
            "WAITING ON",
            "\n1 ",
            "awaiting_input",
            "Add a cache",
            "question",
        ],
    );
    let filtered = out(&client(&chorus, &["task", "list", "--status", "completed"]).await);
    assert!(filtered.starts_with("No tasks."), "{filtered}");

    // Answered at a terminal: an option by its number, the other in words; the
    // planner (the same thread) plans, naming coder.
    model.push(tool_call(
        "p2",
        "submit_plan",
        json!({"summary": "An LRU cache in front of the lookups",
               "requirements": ["bounded memory"], "acceptance_criteria": ["cache.rs exists"],
               "steps": ["write cache.rs", "report"], "assignee": "coder"}),
    ));
    let mut terminal = Terminal::spawn(&chorus, &["task", "answer", "1"])?;
    terminal.wait_for("[q1] Which backend?").await?;
    terminal.wait_for("answer> ").await?;
    terminal.type_line("3")?;
    terminal.wait_for("no option 3; type 1 to 2").await?;
    terminal.type_line("1")?;
    terminal.wait_for("[q2] How many entries?").await?;
    terminal.type_line("1000 entries")?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(0), "{screen}");
    in_order(
        &screen,
        &[
            "task 1 planned\n",
            "Plan: An LRU cache in front of the lookups\n",
            "Assignee: coder\n",
            "Start it: chorus task start 1",
        ],
    );
    let task: Value = serde_json::from_slice(
        &client(&chorus, &["task", "show", "1", "--json"])
            .await
            .stdout,
    )?;
    assert_eq!(task["questions"][0]["answer"], "SQLite");
    assert_eq!(task["questions"][1]["answer"], "1000 entries");
    assert_eq!(task["attachments"][0]["name"], "spec.md");

    // Start: coder writes a file with the file tools and reports; the client shows
    // its thread's steps and the report, exit 0.
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "cache.rs", "content": "// the cache\n"}),
    ));
    model.push(tool_call(
        "c2",
        "completion_report",
        json!({"status": "complete", "summary": "Cache added", "output": "cache.rs written"}),
    ));
    let started = client(&chorus, &["task", "start", "1"]).await;
    let text = out(&started);
    assert!(started.status.success(), "{text}\n{}", err(&started));
    in_order(
        &text,
        &[
            "task 1 active",
            "== coder (worker), thread ",
            "-> step 2: ",
            "task 1 completed\n",
            "Report (complete): Cache added\n",
            "  cache.rs written\n",
        ],
    );
    assert!(
        chorus
            .agent_dir("coder")
            .join("workspace/tasks/1/cache.rs")
            .is_file()
    );

    // Show with the history: every field, the runs, who changed each status.
    let shown = client(&chorus, &["task", "show", "1", "--history"]).await;
    let text = out(&shown);
    assert!(shown.status.success(), "{}", err(&shown));
    in_order(
        &text,
        &[
            "task 1 completed  Add a cache\n",
            "  assignee:     coder\n",
            "  limits:       ",
            "Requirements:\n  1. bounded memory\n",
            "  [q1] Which backend?\n",
            "      answer: SQLite (by ",
            "  spec.md (",
            "Agent chain: coder",
            "Runs:\n",
            " planner planner (thread ",
            " worker coder (thread ",
            "Report (complete): Cache added\n",
            "History:\n",
            "created",
            "planning -> awaiting_input",
            "question_answered",
            "planned -> active",
            "active -> completed",
        ],
    );
    // Who changed each status: the person started it, Chorus closed it on the report.
    assert!(
        text.lines()
            .any(|l| l.contains("by api") && l.contains("planned -> active")),
        "{text}"
    );

    // An invalid transition: the API's 409 message (naming the allowed ones), exit 1.
    let again = client(&chorus, &["task", "start", "1"]).await;
    assert_eq!(again.status.code(), Some(1), "{}", out(&again));
    assert!(
        err(&again).contains("allowed") && err(&again).contains("(HTTP 409)"),
        "{}",
        err(&again)
    );
    // A wrong answer pair is explained before anything is sent.
    let wrong = client(&chorus, &["task", "answer", "1", "SQLite"]).await;
    assert_eq!(wrong.status.code(), Some(1));
    assert!(
        err(&wrong).contains("<question id>=<answer>"),
        "{}",
        err(&wrong)
    );
    Ok(())
}

#[tokio::test]

async fn a_task_in_review_is_sent_back_then_accepted_and_scripts_get_json() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "coder", "permissions": "open"}))
        .await?;

    model.push(tool_call(
        "p1",
        "submit_plan",
        json!({"summary": "Write notes", "requirements": [], "acceptance_criteria": [],
               "steps": ["write notes.md"], "assignee": "coder"}),
    ));
    // --json: one object per line, the task last.
    let created = client(
        &chorus,
        &[
            "task",
            "create",
            "Notes",
            "-d",
            "Write notes.md",
            "--review",
            "--json",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", err(&created));
    let lines: Vec<Value> = out(&created)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines[0]["kind"], "created");
    assert_eq!(lines[0]["data"]["review"], true);
    let last = lines.last().unwrap();
    assert_eq!(
        (last["kind"].as_str(), last["data"]["status"].as_str()),
        (Some("task"), Some("planned"))
    );
    let id = last["data"]["id"].as_u64().unwrap().to_string();

    // The plan is editable before Start.
    let edited = client(
        &chorus,
        &[
            "task",
            "edit",
            &id,
            "--step",
            "write notes.md",
            "--step",
            "report",
        ],
    )
    .await;
    assert!(
        out(&edited).contains("Steps:\n  1. write notes.md\n  2. report\n"),
        "{}{}",
        out(&edited),
        err(&edited)
    );

    model.push(tool_call(
        "c1",
        "completion_report",
        json!({"status": "complete", "summary": "Notes written", "output": ""}),
    ));
    let started = client(&chorus, &["task", "start", &id]).await;
    let text = out(&started);
    assert!(started.status.success(), "{text}{}", err(&started));
    in_order(
        &text,
        &[
            &format!("task {id} review\n"),
            "Report (complete): Notes written\n",
            &format!("Accept it: chorus task accept {id}"),
        ],
    );

    // Sent back with a message: the same thread goes on, and reports again.
    let thread = {
        let task: Value = serde_json::from_slice(
            &client(&chorus, &["task", "show", &id, "--json"])
                .await
                .stdout,
        )?;
        task["runs"].as_array().unwrap().last().unwrap()["thread_id"].clone()
    };
    model.push(tool_call(
        "c2",
        "completion_report",
        json!({"status": "complete", "summary": "Notes written, with headings", "output": ""}),
    ));
    let sent_back = client(&chorus, &["task", "send-back", &id, "Add headings"]).await;
    assert!(sent_back.status.success(), "{}", err(&sent_back));
    let followed = client(&chorus, &["task", "follow", &id]).await;
    in_order(
        &out(&followed),
        &[
            &format!("task {id} review\n"),
            "Report (complete): Notes written, with headings\n",
        ],
    );
    let task: Value = serde_json::from_slice(
        &client(&chorus, &["task", "show", &id, "--json"])
            .await
            .stdout,
    )?;
    let worker_threads: Vec<&Value> = task["runs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["role"] == "worker")
        .map(|r| &r["thread_id"])
        .collect();
    assert!(worker_threads.iter().all(|t| **t == thread), "{task:#}");

    let accepted = client(&chorus, &["task", "accept", &id]).await;
    assert_eq!(
        out(&accepted),
        format!("task {id} completed  Notes\n"),
        "{}",
        err(&accepted)
    );

    // Deleting from a script needs --yes; then it is gone.
    let refused = client(&chorus, &["task", "delete", &id]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(err(&refused).contains("pass --yes"), "{}", err(&refused));
    let deleted = client(&chorus, &["task", "delete", &id, "--yes"]).await;
    assert_eq!(
        out(&deleted),
        format!("Task {id} deleted.\n"),
        "{}",
        err(&deleted)
    );
    let gone = client(&chorus, &["task", "show", &id]).await;
    assert_eq!(gone.status.code(), Some(1));
    assert!(err(&gone).contains("(HTTP 404)"), "{}", err(&gone));
    Ok(())
}
