//! `chorus events [--agent X]`: the live feed (`GET /api/events`, followed across
//! drops by `feed::Feed`), a line per event for people or one JSON object per line
//! with `--json`, until Ctrl-C.

use std::io::Write;

use serde_json::{Value, json};

use super::client::Client;
use super::feed::Feed;
use super::render::{Style, feed_line};

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
    let mut feed = Feed::open(client, &path).await?;
    // One listener for the whole command: a new one per pass would miss a Ctrl-C
    // that arrives while an event is being printed.
    let interrupted = tokio::signal::ctrl_c();
    tokio::pin!(interrupted);
    loop {
        let event = tokio::select! {
            event = feed.next() => event.map_err(|e| anyhow::anyhow!("{e}; chorus events starts it again"))?,
            _ = &mut interrupted => return Ok(true),
        };
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
