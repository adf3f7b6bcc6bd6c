//! `chorus events [--agent X]`: the live feed (`GET /api/events`), a line per event
//! for people or one JSON object per line with `--json`, until Ctrl-C. A dropped
//! stream is opened again with `Last-Event-ID`, as `chorus send` does, so nothing is
//! missed or shown twice (the server says `reset` when the gap is no longer kept).

use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use serde_json::{Value, json};

use super::client::Client;
use super::render::{Style, feed_line};
use super::sse::SseParser;

/// Reconnections in a row without an event before giving up.
const RECONNECTS: u32 = 5;

pub async fn follow(
    client: &Client,
    agent: Option<&str>,
    json: bool,
    style: Style,
) -> anyhow::Result<bool> {
    let path = match agent {
        Some(agent) => format!("/api/events?agent={agent}"),
        None => "/api/events".to_string(),
    };
    let mut out = std::io::stdout();
    let mut last_id: Option<String> = None;
    let mut failures = 0;
    loop {
        let response = match client.stream(&path, last_id.as_deref()).await {
            Ok(response) => response,
            // The first connection's error is the answer (a wrong agent, a token).
            Err(e) if last_id.is_none() || failures >= RECONNECTS => return Err(e),
            Err(_) => {
                failures += 1;
                if interrupted_while_waiting(failures).await {
                    return Ok(true);
                }
                continue;
            }
        };
        let mut parser = SseParser::default();
        let mut chunks = response.bytes_stream();
        loop {
            let chunk = tokio::select! {
                chunk = chunks.next() => chunk,
                _ = tokio::signal::ctrl_c() => return Ok(true),
            };
            let Some(Ok(bytes)) = chunk else { break };
            for event in parser.push(&bytes) {
                failures = 0;
                if event.id.is_some() {
                    last_id = event.id.clone();
                }
                let data: Value = serde_json::from_str(&event.data).unwrap_or(Value::Null);
                if json {
                    writeln!(
                        out,
                        "{}",
                        json!({"kind": event.event, "id": event.id, "data": data})
                    )?;
                } else if let Some(line) = feed_line(&event.event, &data, style) {
                    write!(out, "{line}")?;
                }
                out.flush()?;
            }
        }
        failures += 1;
        if failures > RECONNECTS {
            anyhow::bail!("lost the live feed; chorus events starts it again");
        }
        if interrupted_while_waiting(failures).await {
            return Ok(true);
        }
    }
}

/// A pause before reconnecting, longer after each failure; true when Ctrl-C ended it.
async fn interrupted_while_waiting(failures: u32) -> bool {
    let pause = Duration::from_millis(250 * 2u64.pow(failures.min(4)));
    tokio::select! {
        _ = tokio::time::sleep(pause) => false,
        _ = tokio::signal::ctrl_c() => true,
    }
}
