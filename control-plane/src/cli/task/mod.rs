//! `chorus task …`: the task board from the terminal, over `/api/tasks`.
//!
//! `args` turns arguments into paths and bodies, `render` the API's JSON into text,
//! `follow` decides from the feed and the task what to print and when a wait is
//! over (all three pure); this module does the I/O. `create`, `answer` and `start`
//! open the feed before they post, so nothing of the task's threads is missed, and
//! then follow the task live (`--no-wait` returns at once); `follow` joins a task
//! where it is. Exit 0 unless the task failed or is blocked (or the request failed).

pub mod args;
pub mod follow;
pub mod render;

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::time::Duration;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::client::Client;
use super::feed::Feed;
use super::render::Style;
use follow::{Phase, TaskFollow, Verdict};

/// How often a followed task is read again when its feed is quiet: the wait ends
/// even if a task event was missed.
const REREAD: Duration = Duration::from_secs(3);

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Create a task; the planner plans it (or asks first), followed live until it has.
    #[command(
        after_help = "Examples:\n  chorus task create \"Add a cache\" -d \"Cache the lookups in src/db.rs\"\n  chorus task create \"Fix the build\" --review --attach build.log\n  chorus task create \"Nightly report\" --no-wait\n\n\
        Without --no-wait it shows the planner's steps, then its questions or its plan."
    )]
    Create {
        title: String,
        /// What to do, in as much detail as the planner needs.
        #[arg(long, short = 'd')]
        description: Option<String>,
        /// A person accepts the report (or sends it back) before the task is completed.
        #[arg(long)]
        review: bool,
        /// Files to upload to the task (they land in its workspace).
        #[arg(long, num_args = 1..)]
        attach: Vec<PathBuf>,
        /// Print the task and return at once.
        #[arg(long)]
        no_wait: bool,
    },
    /// The tasks, with what each waits on and since when.
    #[command(
        after_help = "Examples:\n  chorus task list\n  chorus task list --status awaiting_input\n  chorus task list --agent coder --search cache"
    )]
    List {
        /// Only tasks in this status (planning, awaiting_input, planned, active,
        /// waiting, blocked, review, completed, failed).
        #[arg(long)]
        status: Option<String>,
        /// Only tasks of this agent.
        #[arg(long)]
        agent: Option<String>,
        /// Only tasks whose text holds this.
        #[arg(long)]
        search: Option<String>,
    },
    /// Everything about a task: plan, questions, attachments, chain, runs, report, what it waits on.
    #[command(after_help = "Examples:\n  chorus task show 7\n  chorus task show 7 --history")]
    Show {
        id: u64,
        /// Add the history: who did what, when.
        #[arg(long)]
        history: bool,
    },
    /// A task's history: every event, who caused it and when.
    #[command(after_help = "Example:\n  chorus task history 7")]
    History { id: u64 },
    /// Answer the planner's (or worker's) questions; the same thread goes on.
    #[command(
        after_help = "Examples:\n  chorus task answer 7 q1=Postgres q2=\"1000 entries\"\n  chorus task answer 7      (on a terminal: asks each open question, options by number)"
    )]
    Answer {
        id: u64,
        /// <question id>=<answer>, one per question.
        answers: Vec<String>,
        /// Return once answered, without following the task.
        #[arg(long)]
        no_wait: bool,
    },
    /// Start a planned task: its assignee works it, followed live until it reports or needs you.
    #[command(after_help = "Examples:\n  chorus task start 7\n  chorus task start 7 --no-wait")]
    Start {
        id: u64,
        #[arg(long)]
        no_wait: bool,
    },
    /// Follow a task live from where it is (planning or work) until it needs you or ends.
    #[command(after_help = "Example:\n  chorus task follow 7")]
    Follow { id: u64 },
    /// Send a message to the agent working the task (into its running turn, or its next).
    #[command(
        after_help = "Example:\n  chorus task message 7 \"Use the existing helper in util.rs\""
    )]
    Message { id: u64, text: String },
    /// Send a task in review back to its agent with what to change (the same thread goes on).
    #[command(
        after_help = "Example:\n  chorus task send-back 7 \"The tests do not cover eviction\""
    )]
    SendBack { id: u64, text: String },
    /// Accept a task's report (a task in review becomes completed).
    #[command(after_help = "Example:\n  chorus task accept 7")]
    Accept { id: u64 },
    /// Pause a task: its agents stop, and it is blocked until resumed.
    #[command(after_help = "Example:\n  chorus task pause 7")]
    Pause { id: u64 },
    /// Resume a paused task.
    #[command(after_help = "Example:\n  chorus task resume 7")]
    Resume { id: u64 },
    /// Mark a task completed by hand.
    #[command(after_help = "Example:\n  chorus task complete 7")]
    Complete { id: u64 },
    /// Mark a task failed by hand.
    #[command(after_help = "Example:\n  chorus task fail 7")]
    Fail { id: u64 },
    /// Reopen a finished task.
    #[command(after_help = "Example:\n  chorus task reopen 7")]
    Reopen { id: u64 },
    /// Retry a failed or blocked task.
    #[command(after_help = "Example:\n  chorus task retry 7")]
    Retry { id: u64 },
    /// Change the plan before Start (a list given replaces the task's list).
    #[command(
        after_help = "Example:\n  chorus task edit 7 --assignee coder --step \"write the cache\" --step \"wire it in\""
    )]
    Edit {
        id: u64,
        #[command(flatten)]
        edit: args::EditArgs,
    },
    /// Delete a task and its history (asks first on a terminal).
    #[command(
        after_help = "Examples:\n  chorus task delete 7\n  chorus task delete 7 --yes\n\n\
        Without a terminal (a script) it refuses unless --yes is given."
    )]
    Delete {
        id: u64,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
    /// Upload files to a task (they land in its workspace).
    #[command(after_help = "Example:\n  chorus task attach 7 spec.md data.csv")]
    Attach {
        id: u64,
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

/// The person-driven transitions: `chorus task <button> <id>` is `POST
/// /api/tasks/{id}/<button>`.
fn button(command: &TaskCommand) -> Option<(&'static str, u64)> {
    Some(match *command {
        TaskCommand::Accept { id } => ("accept", id),
        TaskCommand::Pause { id } => ("pause", id),
        TaskCommand::Resume { id } => ("resume", id),
        TaskCommand::Complete { id } => ("complete", id),
        TaskCommand::Fail { id } => ("fail", id),
        TaskCommand::Reopen { id } => ("reopen", id),
        TaskCommand::Retry { id } => ("retry", id),
        _ => return None,
    })
}

/// Runs one `chorus task` command; `Ok(false)` is a failure already explained.
pub async fn run(
    client: &Client,
    command: TaskCommand,
    json: bool,
    style: Style,
) -> anyhow::Result<bool> {
    let now = chrono::Utc::now;
    let show = |value: &Value, text: String| -> anyhow::Result<bool> {
        let mut out = std::io::stdout();
        if json {
            writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
        } else {
            write!(out, "{text}")?;
        }
        Ok(true)
    };
    if let Some((button, id)) = button(&command) {
        let answer = client
            .post(&format!("/api/tasks/{id}/{button}"), &json!({}))
            .await?;
        let task = task_of(client, id, answer).await?;
        return show(&task, summary_line(&task, style));
    }
    match command {
        TaskCommand::Create {
            title,
            description,
            review,
            attach,
            no_wait,
        } => {
            // Every file is readable before anything is created.
            for file in &attach {
                std::fs::metadata(file)
                    .map_err(|e| anyhow::anyhow!("cannot attach {}: {e}", file.display()))?;
            }
            let feed = open_feed(client, no_wait).await?;
            let body = args::create_body(&title, description.as_deref(), review);
            let task = client.post("/api/tasks", &body).await?;
            let id = task_id(&task)?;
            for file in &attach {
                client
                    .post_file(&format!("/api/tasks/{id}/attachments"), file)
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "task {id} was created, but {} was not attached: {e} \
                             (retry: chorus task attach {id} {})",
                            file.display(),
                            file.display()
                        )
                    })?;
            }
            let Some(feed) = feed else {
                return show(&task, summary_line(&task, style));
            };
            announce(json, "created", &task, style)?;
            watch(client, feed, id, Phase::Planning, json, style).await
        }
        TaskCommand::List {
            status,
            agent,
            search,
        } => {
            let list = client
                .get(&args::list_path(
                    status.as_deref(),
                    agent.as_deref(),
                    search.as_deref(),
                ))
                .await?;
            show(&list, render::list(&list, style, now()))
        }
        TaskCommand::Show { id, history } => {
            let mut task = client.get(&format!("/api/tasks/{id}")).await?;
            let mut text = render::task(&task, style, now());
            if history {
                let events = client.get(&format!("/api/tasks/{id}/history")).await?;
                text.push_str("History:\n");
                text.push_str(&render::history(&events, style));
                task["history"] = events["events"].clone();
            }
            show(&task, text)
        }
        TaskCommand::History { id } => {
            let events = client.get(&format!("/api/tasks/{id}/history")).await?;
            show(&events, render::history(&events, style))
        }
        TaskCommand::Answer {
            id,
            answers,
            no_wait,
        } => {
            let body = if answers.is_empty() {
                ask_at_terminal(client, id, style).await?
            } else {
                args::answers_body(&answers)?
            };
            let feed = open_feed(client, no_wait).await?;
            let answer = client
                .post(&format!("/api/tasks/{id}/answers"), &body)
                .await?;
            let task = task_of(client, id, answer).await?;
            let Some(feed) = feed else {
                return show(&task, summary_line(&task, style));
            };
            announce(json, "answered", &task, style)?;
            watch(client, feed, id, Phase::Planning, json, style).await
        }
        TaskCommand::Start { id, no_wait } => {
            let feed = open_feed(client, no_wait).await?;
            let answer = client
                .post(&format!("/api/tasks/{id}/start"), &json!({}))
                .await?;
            let task = task_of(client, id, answer).await?;
            let Some(feed) = feed else {
                return show(&task, summary_line(&task, style));
            };
            announce(json, "started", &task, style)?;
            watch(client, feed, id, Phase::Work, json, style).await
        }
        TaskCommand::Follow { id } => {
            let feed = Feed::open(client, "/api/events").await?;
            let task = client.get(&format!("/api/tasks/{id}")).await?;
            let status = task["status"].as_str().unwrap_or("?");
            let Some(phase) = Phase::of(status) else {
                // Nothing going on: say where it stands.
                return show(&task, follow::ending(&task, style, now()));
            };
            watch(client, feed, id, phase, json, style).await
        }
        TaskCommand::Message { id, text } => {
            let answer = client
                .post(
                    &format!("/api/tasks/{id}/messages"),
                    &json!({ "message": text }),
                )
                .await?;
            show(&answer, format!("Message sent to task {id}'s agent.\n"))
        }
        TaskCommand::SendBack { id, text } => {
            let answer = client
                .post(
                    &format!("/api/tasks/{id}/send-back"),
                    &json!({ "message": text }),
                )
                .await?;
            let task = task_of(client, id, answer).await?;
            show(&task, summary_line(&task, style))
        }
        TaskCommand::Edit { id, edit } => {
            let body = edit.body()?;
            let task = client
                .call(Method::PATCH, &format!("/api/tasks/{id}"), Some(&body))
                .await?;
            show(
                &task,
                format!("{}{}", summary_line(&task, style), render::plan(&task)),
            )
        }
        TaskCommand::Delete { id, yes } => {
            if !yes && !confirm_delete(client, id).await? {
                eprintln!("Not deleted.");
                return Ok(false);
            }
            let answer = client
                .call(Method::DELETE, &format!("/api/tasks/{id}"), None)
                .await?;
            show(&answer, format!("Task {id} deleted.\n"))
        }
        TaskCommand::Attach { id, files } => {
            let mut answers = Vec::new();
            for file in &files {
                answers.push(
                    client
                        .post_file(&format!("/api/tasks/{id}/attachments"), file)
                        .await
                        .map_err(|e| anyhow::anyhow!("{} was not attached: {e}", file.display()))?,
                );
            }
            let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
            show(
                &Value::Array(answers),
                format!("Attached to task {id}: {}.\n", names.join(", ")),
            )
        }
        TaskCommand::Accept { .. }
        | TaskCommand::Pause { .. }
        | TaskCommand::Resume { .. }
        | TaskCommand::Complete { .. }
        | TaskCommand::Fail { .. }
        | TaskCommand::Reopen { .. }
        | TaskCommand::Retry { .. } => unreachable!("buttons are handled above"),
    }
}

/// The task a request answered with, or (when it answered with something else)
/// the task as it is now.
async fn task_of(client: &Client, id: u64, answer: Value) -> anyhow::Result<Value> {
    if answer["id"].as_u64() == Some(id) && answer["status"].is_string() {
        return Ok(answer);
    }
    client.get(&format!("/api/tasks/{id}")).await
}

fn task_id(task: &Value) -> anyhow::Result<u64> {
    task["id"]
        .as_u64()
        .ok_or_else(|| anyhow::anyhow!("chorus answered without a task id: {task}"))
}

/// "task 7 planned  Add a cache" (and what it waits on).
fn summary_line(task: &Value, style: Style) -> String {
    let mut line = format!(
        "{} {}  {}\n",
        style.bold(&format!("task {}", task["id"])),
        render::status(style, task["status"].as_str().unwrap_or("?")),
        task["title"].as_str().unwrap_or("")
    );
    if let Some(waiting) = render::waiting_on(task, chrono::Utc::now()) {
        line.push_str(&format!("  waiting on {waiting}\n"));
    }
    line
}

/// The feed, opened before the request whose effects are followed (none with `--no-wait`).
async fn open_feed(client: &Client, no_wait: bool) -> anyhow::Result<Option<Feed<'_>>> {
    if no_wait {
        return Ok(None);
    }
    Ok(Some(Feed::open(client, "/api/events").await?))
}

/// The first line of a followed command: what was done.
fn announce(json: bool, kind: &str, task: &Value, style: Style) -> anyhow::Result<()> {
    let mut out = std::io::stdout();
    if json {
        writeln!(out, "{}", json!({"kind": kind, "data": task}))?;
    } else {
        write!(out, "{}", summary_line(task, style))?;
    }
    Ok(())
}

/// Follows task `id` through `phase` until the wait is over (`follow::verdict`),
/// printing to stdout.
async fn watch(
    client: &Client,
    feed: Feed<'_>,
    id: u64,
    phase: Phase,
    json: bool,
    style: Style,
) -> anyhow::Result<bool> {
    let interrupted = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    let watched = watch_into(
        client,
        feed,
        (id, phase),
        json,
        style,
        &mut std::io::stdout(),
        interrupted,
    )
    .await?;
    if watched.is_none() {
        eprintln!(
            "\nstopped following task {id}; it goes on (chorus task show {id}, chorus task follow {id})"
        );
    }
    Ok(watched.unwrap_or(false))
}

/// `watch` writing to `out` until the wait is over (`Some(ok)`) or `interrupted`
/// (`None`).
async fn watch_into(
    client: &Client,
    mut feed: Feed<'_>,
    (id, phase): (u64, Phase),
    json: bool,
    style: Style,
    out: &mut impl Write,
    interrupted: impl std::future::Future<Output = ()>,
) -> anyhow::Result<Option<bool>> {
    let mut follow = TaskFollow::new(id, style);
    let mut reread = true;
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + REREAD, REREAD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(interrupted);
    loop {
        if std::mem::take(&mut reread) {
            let task = client.get(&format!("/api/tasks/{id}")).await?;
            let shown = follow.learn(&task);
            if !json {
                write!(out, "{}", shown.concat())?;
                out.flush()?;
            }
            if let Verdict::Done { ok } = follow::verdict(phase, &task) {
                if json {
                    writeln!(out, "{}", json!({"kind": "task", "data": task}))?;
                } else {
                    write!(out, "{}", follow::ending(&task, style, chrono::Utc::now()))?;
                }
                return Ok(Some(ok));
            }
        }
        let event = tokio::select! {
            event = feed.next() => event,
            _ = tick.tick() => {
                reread = true;
                continue;
            }
            () = &mut interrupted => return Ok(None),
        };
        let event = event.map_err(|e| {
            anyhow::anyhow!("stopped following task {id}: {e}; it goes on: chorus task show {id}")
        })?;
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        let step = follow.on_feed(&event.event, &data);
        if json {
            let ours = event.event == "task" && data["task_id"].as_u64() == Some(id)
                || data["agent"]
                    .as_str()
                    .zip(data["thread_id"].as_u64())
                    .is_some_and(|(a, t)| follow.follows(a, t));
            if ours {
                writeln!(
                    out,
                    "{}",
                    json!({"kind": event.event, "id": event.id, "data": data})
                )?;
            }
        } else {
            write!(out, "{}", step.print.concat())?;
            out.flush()?;
        }
        reread |= step.reread;
    }
}

/// Asks each open question at the terminal (options by number) and returns the
/// answers' body.
async fn ask_at_terminal(client: &Client, id: u64, style: Style) -> anyhow::Result<Value> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "give the answers as <question id>=<answer> (chorus task show {id} lists the questions), \
             or run this on a terminal to be asked each in turn"
        );
    }
    let task = client.get(&format!("/api/tasks/{id}")).await?;
    let open = render::open_questions(&task);
    if open.is_empty() {
        anyhow::bail!("task {id} has no open question");
    }
    let mut answers = serde_json::Map::new();
    let mut err = std::io::stderr();
    for question in open {
        let one = json!({"id": task["id"], "questions": [question]});
        write!(err, "{}", render::questions(&one, style))?;
        loop {
            write!(err, "  answer> ")?;
            err.flush()?;
            let mut line = String::new();
            if std::io::stdin().lock().read_line(&mut line)? == 0 {
                anyhow::bail!("no answer given (stdin closed); nothing was sent");
            }
            match args::typed_answer(&line, question) {
                Ok(answer) => {
                    answers.insert(
                        question["id"].as_str().unwrap_or("?").to_string(),
                        Value::from(answer),
                    );
                    break;
                }
                Err(why) => writeln!(err, "  {why}")?,
            }
        }
    }
    Ok(json!({ "answers": answers }))
}

/// Whether to delete: asked at the terminal, refused without one.
async fn confirm_delete(client: &Client, id: u64) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "chorus task delete {id} deletes the task and its history; no terminal to ask at, so pass --yes to do it"
        );
    }
    let task = client.get(&format!("/api/tasks/{id}")).await?;
    let mut err = std::io::stderr();
    write!(err, "{}", delete_question(&task))?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// What a delete loses, and the question (pure).
fn delete_question(task: &Value) -> String {
    let id = &task["id"];
    let status = task["status"].as_str().unwrap_or("?");
    let going = if matches!(status, "active" | "waiting" | "planning") {
        " It is still going."
    } else {
        ""
    };
    format!(
        "Deleting task {id} \"{}\" ({status}) deletes its plan, questions, runs and history.{going}\nDelete task {id}? [y/N] ",
        task["title"].as_str().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::routing::get;
    use futures::StreamExt;

    use super::*;
    use crate::cli::client::ClientArgs;
    use clap::Parser;

    const PLAIN: Style = Style { color: false };

    /// A stand-in for the task routes: the feed carries the planner thread's events
    /// (its first step before the task names the thread) and the task's events; each
    /// read of the task shows it one stage further.
    async fn board() -> (String, Arc<AtomicUsize>) {
        let reads = Arc::new(AtomicUsize::new(0));
        let counted = reads.clone();
        let events = [
            (
                "step_started",
                json!({"agent": "planner", "thread_id": 3, "number": 1,
                                    "kind": "llm_call", "description": "Calling model m"}),
            ),
            (
                "task",
                json!({"task_id": 9, "kind": "created", "by": "api", "data": {}}),
            ),
            (
                "task",
                json!({"task_id": 7, "kind": "planning_started", "by": "chorus", "data": {},
                            "status": "planning"}),
            ),
            (
                "text",
                json!({"agent": "planner", "thread_id": 3, "step": 1, "text": "Two questions."}),
            ),
            (
                "step_ended",
                json!({"agent": "planner", "thread_id": 3, "number": 1,
                                  "duration_ms": 1500, "failed": false}),
            ),
            (
                "step_started",
                json!({"agent": "other", "thread_id": 4, "number": 1,
                                    "kind": "tool", "description": "not this task's"}),
            ),
            (
                "status",
                json!({"agent": "planner", "thread_id": 3, "status": "completed"}),
            ),
            (
                "task",
                json!({"task_id": 7, "kind": "status_changed", "by": "chorus",
                            "data": {"from": "planning", "to": "awaiting_input", "reason": null},
                            "status": "awaiting_input"}),
            ),
        ];
        let stream: String = events
            .iter()
            .enumerate()
            .map(|(i, (kind, data))| format!("id: 1.{i}\nevent: {kind}\ndata: {data}\n\n"))
            .collect();
        let app = Router::new()
            .route(
                "/api/events",
                get(move || {
                    let stream = stream.clone();
                    async move {
                        // The feed stays open after these, as the real one does.
                        let body = futures::stream::iter([Ok::<_, std::io::Error>(stream)])
                            .chain(futures::stream::pending());
                        (
                            [("content-type", "text/event-stream")],
                            axum::body::Body::from_stream(body),
                        )
                    }
                }),
            )
            .route(
                "/api/tasks/7",
                get(move || {
                    let read = counted.fetch_add(1, Ordering::SeqCst);
                    let run = json!([{"id": 1, "role": "planner", "agent": "planner", "thread_id": 3}]);
                    let task = match read {
                        0 => json!({"id": 7, "status": "planning", "runs": [], "questions": []}),
                        1 => json!({"id": 7, "status": "planning", "runs": run, "questions": []}),
                        _ => json!({"id": 7, "status": "awaiting_input", "runs": run,
                                    "questions": [{"id": "q1", "question": "Which backend?",
                                                   "options": [{"label": "SQLite"}], "answer": null}]}),
                    };
                    async move { axum::Json(task) }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (format!("http://{addr}"), reads)
    }

    fn client(url: &str) -> Client {
        Client::new(&ClientArgs {
            url: url.to_string(),
            token: Some("t".into()),
            data_dir: PathBuf::from("/nonexistent"),
            json: false,
        })
        .unwrap()
    }

    #[tokio::test]
    async fn following_planning_shows_the_planner_thread_and_ends_at_its_questions() {
        let (url, reads) = board().await;
        let client = client(&url);
        let feed = Feed::open(&client, "/api/events").await.unwrap();
        let mut out = Vec::new();
        let ended = tokio::time::timeout(
            Duration::from_secs(60),
            watch_into(
                &client,
                feed,
                (7, Phase::Planning),
                false,
                PLAIN,
                &mut out,
                std::future::pending(),
            ),
        )
        .await
        .expect("the wait ends at the questions")
        .unwrap();
        assert_eq!(ended, Some(true));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "* planning_started by chorus\n\
             == planner (planner), thread 3\n\
             -> step 1: Calling model m\n\
             Two questions.\n   turn completed\n\
             * status_changed by chorus: planning -> awaiting_input\n\
             task 7 awaiting_input\n[q1] Which backend?\n    1. SQLite\n    open\n\
             Answer with: chorus task answer 7 q1=\"…\"\n  (or chorus task answer 7 on a terminal, which asks each in turn)\n"
        );
        // Read at the start and after each of the task's own events, not another task's.
        assert_eq!(reads.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn with_json_only_the_tasks_events_are_printed_and_the_task_last() {
        let (url, _) = board().await;
        let client = client(&url);
        let feed = Feed::open(&client, "/api/events").await.unwrap();
        let mut out = Vec::new();
        let ended = watch_into(
            &client,
            feed,
            (7, Phase::Planning),
            true,
            PLAIN,
            &mut out,
            std::future::pending(),
        )
        .await
        .unwrap();
        assert_eq!(ended, Some(true));
        let lines: Vec<Value> = String::from_utf8(out)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
        // The first step came before the thread was known: --json lines are only
        // what arrives after (the final task has it all).
        assert_eq!(
            kinds,
            ["task", "text", "step_ended", "status", "task", "task"],
            "{lines:#?}"
        );
        assert_eq!(lines.last().unwrap()["data"]["status"], "awaiting_input");
    }

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(subcommand)]
        command: TaskCommand,
    }

    fn parse(args: &[&str]) -> TaskCommand {
        Cli::try_parse_from(std::iter::once("task").chain(args.iter().copied()))
            .unwrap()
            .command
    }

    #[test]
    fn each_button_posts_to_its_own_route() {
        assert_eq!(button(&parse(&["accept", "7"])), Some(("accept", 7)));
        assert_eq!(button(&parse(&["retry", "3"])), Some(("retry", 3)));
        assert_eq!(button(&parse(&["reopen", "3"])), Some(("reopen", 3)));
        assert_eq!(button(&parse(&["show", "3"])), None);
    }

    #[test]
    fn create_takes_its_flags_and_several_attachments() {
        let TaskCommand::Create {
            title,
            description,
            review,
            attach,
            no_wait,
        } = parse(&[
            "create",
            "Fix it",
            "-d",
            "the build",
            "--review",
            "--attach",
            "a.log",
            "b.md",
        ])
        else {
            panic!("not create");
        };
        assert_eq!(title, "Fix it");
        assert_eq!(description.as_deref(), Some("the build"));
        assert!(review && !no_wait);
        assert_eq!(attach, vec![PathBuf::from("a.log"), PathBuf::from("b.md")]);
        let TaskCommand::SendBack { id, text } = parse(&["send-back", "7", "more tests"]) else {
            panic!("not send-back");
        };
        assert_eq!((id, text.as_str()), (7, "more tests"));
    }

    #[test]
    fn the_delete_question_says_what_goes() {
        let task = json!({"id": 7, "title": "Add a cache", "status": "active"});
        assert_eq!(
            delete_question(&task),
            "Deleting task 7 \"Add a cache\" (active) deletes its plan, questions, runs and history. \
             It is still going.\nDelete task 7? [y/N] "
        );
    }
}
