//! `chorus send`: posts a message and follows its thread live on the feed until it
//! ends, answering approvals at the prompt.

use std::io::{IsTerminal, Write};
use std::time::Instant;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::client::Client;
use super::feed::Feed;
use super::follow::{Action, Follow, Prompt};
use super::render::{Style, duration_ms};
use crate::feed::FeedEvent;

pub struct SendOptions<'a> {
    pub agent: &'a str,
    pub text: &'a str,
    pub reply_to: Option<u64>,
    pub no_wait: bool,
    pub json: bool,
    pub style: Style,
}

/// Whether the thread completed (exit 0) or not (the reason is printed on stderr).
pub async fn send(client: &Client, options: SendOptions<'_>) -> anyhow::Result<bool> {
    let agent = options.agent;
    let events_path = format!("/api/events?agent={agent}");
    // The stream is open before the message is sent, so no event of its thread is
    // missed.
    let mut feed = if options.no_wait {
        None
    } else {
        Some(Feed::open(client, &events_path).await?)
    };
    let mut body = json!({ "content": options.text });
    if let Some(reply_to) = options.reply_to {
        body["reply_to"] = json!(reply_to);
    }
    let received = client
        .post(&format!("/api/agents/{agent}/messages"), &body)
        .await?;
    let thread_id = received["thread_id"]
        .as_u64()
        .ok_or_else(|| anyhow::anyhow!("chorus answered without a thread id: {received}"))?;
    let routed = received["routed"].as_str().unwrap_or("new");
    let mut out = std::io::stdout();
    if options.json {
        writeln!(out, "{}", json!({"kind": "received", "data": received}))?;
    } else {
        writeln!(
            out,
            "{}",
            options
                .style
                .bold(&format!("thread {thread_id} ({routed})"))
        )?;
    }
    let Some(mut feed) = feed.take() else {
        return Ok(true);
    };

    let started = Instant::now();
    let mut follow = Follow::new(thread_id, options.style);
    let interactive = !options.json && std::io::stdin().is_terminal();
    let mut answers = interactive.then(stdin_lines);
    let mut waiting: Option<String> = None;
    let mut prompt = Prompt::default();
    // One listener for the whole command: a new one per pass would miss a Ctrl-C
    // that arrives while an event is being printed.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let next = tokio::select! {
            event = feed.next() => Input::Event(event),
            line = recv(&mut answers), if waiting.is_some() => Input::Line(line),
            _ = &mut interrupted => {
                eprintln!(
                    "\nstopped following thread {thread_id}; it goes on \
                     (chorus thread kill {agent} {thread_id} ends it)"
                );
                return Ok(false);
            }
        };
        let event = match next {
            Input::Line(line) => {
                let Some(id) = waiting.clone() else { continue };
                let Some(line) = line else {
                    answers = None; // stdin closed: answer elsewhere
                    continue;
                };
                let decision = match line.trim().to_ascii_lowercase().as_str() {
                    "y" | "yes" => "approve",
                    "n" | "no" => "deny",
                    _ => {
                        write!(out, "{}", prompt.again("Please answer y or n: "))?;
                        out.flush()?;
                        continue;
                    }
                };
                prompt.answered_here();
                match client
                    .post(
                        &format!("/api/approvals/{id}"),
                        &json!({ "decision": decision }),
                    )
                    .await
                {
                    Ok(_) => waiting = None,
                    Err(e) => {
                        eprintln!("cannot answer: {e}");
                        waiting = None;
                    }
                }
                continue;
            }
            Input::Event(Ok(event)) => event,
            Input::Event(Err(e)) => anyhow::bail!(
                "stopped following thread {thread_id}: {e}; it goes on: chorus thread show {agent} {thread_id}"
            ),
        };
        let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
        if event.event == "reset" {
            // Events were lost: the thread's own state says where it is.
            let thread = client
                .get(&format!("/api/agents/{agent}/threads/{thread_id}"))
                .await?;
            if let Some(status @ ("completed" | "failed" | "killed")) = thread["status"].as_str() {
                return finish(options.json, status, thread["error"].as_str(), started);
            }
            continue;
        }
        if options.json && data["thread_id"].as_u64() == Some(thread_id) {
            writeln!(
                out,
                "{}",
                json!({"kind": event.event, "id": event.id, "data": data})
            )?;
        }
        // A kind this build does not know (a newer server's) is not this follower's.
        let Ok(typed) = FeedEvent::from_wire(&event.event, data.clone()) else {
            continue;
        };
        for action in follow.on_event(data["thread_id"].as_u64(), &typed) {
            match action {
                Action::Print(text) if !options.json => {
                    write!(out, "{}", prompt.print(&text))?;
                    out.flush()?;
                }
                Action::Print(_) => {}
                Action::Ask {
                    approval_id,
                    question,
                } => {
                    if options.json {
                        continue;
                    }
                    if answers.is_some() {
                        write!(out, "{}", prompt.ask(&question))?;
                        out.flush()?;
                        waiting = Some(approval_id);
                    } else {
                        let text = format!(
                            "{question}\n  answer with: chorus approve {approval_id}  (or chorus deny {approval_id})\n"
                        );
                        write!(out, "{}", prompt.print(&text))?;
                    }
                }
                Action::Answered { approval_id } => {
                    if waiting.as_deref() == Some(approval_id.as_str()) {
                        waiting = None;
                        write!(out, "{}", prompt.answered_elsewhere())?;
                    }
                }
                Action::Done { status, error } => {
                    return finish(options.json, &status, error.as_deref(), started);
                }
            }
        }
    }
}

enum Input {
    Event(anyhow::Result<super::sse::SseEvent>),
    Line(Option<String>),
}

async fn recv(lines: &mut Option<mpsc::UnboundedReceiver<String>>) -> Option<String> {
    match lines {
        Some(lines) => lines.recv().await,
        None => std::future::pending().await,
    }
}

/// Lines typed at the terminal. A plain thread, not the runtime's blocking pool: a
/// read that never returns must not hold up the exit.
fn stdin_lines() -> mpsc::UnboundedReceiver<String> {
    let (tx, rx) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        while let Ok(n) = std::io::stdin().read_line(&mut line) {
            if n == 0 || tx.send(std::mem::take(&mut line)).is_err() {
                break;
            }
        }
    });
    rx
}

fn finish(json: bool, status: &str, error: Option<&str>, started: Instant) -> anyhow::Result<bool> {
    let took = duration_ms(started.elapsed().as_millis() as u64);
    if status == "completed" {
        if !json {
            eprintln!("completed in {took}");
        }
        return Ok(true);
    }
    eprintln!(
        "thread {status} after {took}{}",
        error.map(|e| format!(": {e}")).unwrap_or_default()
    );
    Ok(false)
}
