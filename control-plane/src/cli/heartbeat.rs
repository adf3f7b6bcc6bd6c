//! `chorus agent heartbeat <agent>`: run one heartbeat now over `POST
//! /api/agents/{name}/heartbeat`, wait for its end and say what came of it (the
//! mechanics are the control plane's `heartbeat`).

use std::time::Duration;

use serde_json::{Value, json};

use super::Printer;
use super::client::Client;

/// How long the client waits for a heartbeat's end before it says where to look.
const WAIT: Duration = Duration::from_secs(600);

pub(super) async fn run(client: &Client, agent: &str, out: Printer) -> anyhow::Result<bool> {
    let path = format!("/api/agents/{agent}/heartbeat");
    let started = client.post(&path, &json!({})).await?;
    let id = started["id"].as_u64().unwrap_or(0);
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut record = started;
    while record["outcome"] == "running" && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let view = client.get(&path).await?;
        if let Some(found) = view["heartbeats"]
            .as_array()
            .and_then(|all| all.iter().find(|h| h["id"] == id))
        {
            record = found.clone();
        }
    }
    let agent = agent.to_string();
    out.show(&record, move |r| describe(&agent, r))
}

fn describe(agent: &str, r: &Value) -> String {
    let id = r["id"].as_u64().unwrap_or(0);
    let thread = r["thread_id"].as_u64();
    let tokens = r["tokens"].as_u64().unwrap_or(0);
    let reason = r["reason"].as_str().unwrap_or("");
    let see = |t: u64| format!("(chorus thread show {agent} {t})");
    match (r["outcome"].as_str().unwrap_or(""), thread) {
        ("quiet", Some(t)) => {
            format!(
                "Heartbeat {id} of {agent}: HEARTBEAT_OK, nothing to post; {tokens} tokens {}.\n",
                see(t)
            )
        }
        ("notified", Some(t)) => format!(
            "Heartbeat {id} of {agent}: posted a notification; {tokens} tokens {}.\n",
            see(t)
        ),
        ("skipped", _) => format!("Heartbeat {id} of {agent}: skipped, no model call: {reason}\n"),
        ("failed", _) => format!("Heartbeat {id} of {agent}: failed: {reason}\n"),
        ("running", Some(t)) => format!(
            "Heartbeat {id} of {agent} is still going {}; GET /api/agents/{agent}/heartbeat shows its end.\n",
            see(t)
        ),
        (other, _) => format!("Heartbeat {id} of {agent}: {other}\n"),
    }
}
