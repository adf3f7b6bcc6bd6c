//! `chorus memory show|search|forget` and `chorus agent identity`: an agent's memory
//! entries with where each came from, searching its memory, retracting an entry, and
//! its identity files.
//! Rendering is pure (JSON in, text out).

use std::io::Read;

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::Printer;
use super::client::Client;

#[derive(Debug, Subcommand)]
pub enum MemoryCommand {
    /// An agent's memory entries with their provenance, or one memory file's text.
    #[command(
        after_help = "Examples:\n  chorus memory show coder\n  chorus memory show coder MEMORY.md\n  chorus memory show coder 2026-11-26.md"
    )]
    Show {
        agent: String,
        /// A memory file (MEMORY.md, YYYY-MM-DD.md): its text instead of the entries.
        file: Option<String>,
    },
    /// Search the agent's memory files, saved sessions and messages, best first.
    #[command(
        after_help = "Examples:\n  chorus memory search coder metric units\n  chorus memory search coder deploy --sources memory,session -k 3"
    )]
    Search {
        agent: String,
        /// The words to look for.
        #[arg(required = true, num_args = 1..)]
        query: Vec<String>,
        /// How many hits (default 8, at most 50).
        #[arg(short)]
        k: Option<usize>,
        /// Where to look: memory, session, message, comma-separated (default: all).
        #[arg(long)]
        sources: Option<String>,
    },
    /// Retract one entry, by the id `memory show` lists (audited).
    #[command(after_help = "Example:\n  chorus memory forget coder 3f9a2c01")]
    Forget { agent: String, id: String },
}

pub(super) async fn run(
    client: &Client,
    command: MemoryCommand,
    out: Printer,
) -> anyhow::Result<bool> {
    match command {
        MemoryCommand::Show { agent, file: None } => {
            let memory = client.get(&format!("/api/agents/{agent}/memory")).await?;
            out.show(&memory, render_memory)
        }
        MemoryCommand::Show {
            agent,
            file: Some(file),
        } => {
            let text = client
                .get(&format!("/api/agents/{agent}/memory/{file}"))
                .await?;
            let text = text.as_str().unwrap_or_default().to_string();
            out.show(&json!({"path": file, "text": text}), |_| text.clone())
        }
        MemoryCommand::Search {
            agent,
            query,
            k,
            sources,
        } => {
            let mut params = vec![("q", query.join(" "))];
            if let Some(k) = k {
                params.push(("k", k.to_string()));
            }
            if let Some(sources) = sources {
                params.push(("sources", sources));
            }
            // The query string encoded by reqwest's URL type (no crate of its own).
            let url = reqwest::Url::parse_with_params("http://query.invalid/", &params)?;
            let hits = client
                .get(&format!(
                    "/api/agents/{agent}/memory/search?{}",
                    url.query().unwrap_or_default()
                ))
                .await?;
            out.show(&hits, render_hits)
        }
        MemoryCommand::Forget { agent, id } => {
            client
                .call(
                    Method::DELETE,
                    &format!("/api/agents/{agent}/memory/{id}"),
                    None,
                )
                .await?;
            out.show(&json!({"forgotten": id}), |_| {
                format!("Forgot mem:{id} of {agent}.\n")
            })
        }
    }
}

/// `chorus agent identity <agent> [soul|user|heartbeat] [--set <file>|-]`.
pub(super) async fn identity(
    client: &Client,
    agent: &str,
    which: Option<&str>,
    set: Option<&str>,
    out: Printer,
) -> anyhow::Result<bool> {
    let file = match which {
        Some(which) => Some(
            chorus_proto::tools::IdentityFile::parse(which).ok_or_else(|| {
                anyhow::anyhow!("'{which}' is not an identity file: say soul, user or heartbeat")
            })?,
        ),
        None => None,
    };
    match (file, set) {
        (None, Some(_)) => anyhow::bail!("--set needs the file to set: soul, user or heartbeat"),
        (Some(file), Some(source)) => {
            let content = if source == "-" {
                let mut text = String::new();
                std::io::stdin().read_to_string(&mut text)?;
                text
            } else {
                std::fs::read_to_string(source)
                    .map_err(|e| anyhow::anyhow!("cannot read {source}: {e}"))?
            };
            let answer = client
                .call(
                    Method::PUT,
                    &format!("/api/agents/{agent}/identity/{}", file.file_name()),
                    Some(&json!({"content": content})),
                )
                .await?;
            out.show(&answer, |a| {
                format!(
                    "{} of {agent} set ({} bytes); it applies from the agent's next model call.\n",
                    file.file_name(),
                    a["size"]
                )
            })
        }
        (file, None) => {
            let all = client.get(&format!("/api/agents/{agent}/identity")).await?;
            let shown = match file {
                Some(file) => json!({file.key(): all[file.key()]}),
                None => all,
            };
            out.show(&shown, render_identity)
        }
    }
}

/// Search hits, one a line, each saying where it is.
pub fn render_hits(value: &Value) -> String {
    let hits = value["hits"].as_array().cloned().unwrap_or_default();
    let hybrid = value["ranking"] == "hybrid";
    // Why the ranking is lexical (or what hybrid ranking has not covered), last.
    let note = match value["ranking_note"].as_str() {
        Some(note) if hybrid => format!("({note})\n"),
        Some(note) => format!("(lexical ranking: {note})\n"),
        None => String::new(),
    };
    if hits.is_empty() {
        return format!("No matches.\n{note}");
    }
    let mut out = String::new();
    for hit in hits {
        let place = match hit["source"].as_str().unwrap_or_default() {
            "memory" => format!(
                "{}:{}",
                hit["path"].as_str().unwrap_or_default(),
                hit["line"]
            ),
            "session" => format!(
                "session {} (thread {})",
                hit["session_id"].as_str().unwrap_or_default(),
                hit["thread_id"]
            ),
            _ => format!("thread {}, message {}", hit["thread_id"], hit["message_id"]),
        };
        let text = hit["text"].as_str().unwrap_or_default().replace('\n', " ");
        // Fused scores are small (1/61 is the best rank in one list).
        let score = hit["score"].as_f64().unwrap_or_default();
        let score = if hybrid {
            format!("{score:.4}")
        } else {
            format!("{score:.2}")
        };
        out.push_str(&format!("{score}  {place}\n      {text}\n"));
    }
    out.push_str(&note);
    out
}

/// The identity files, each under its name.
pub fn render_identity(value: &Value) -> String {
    let mut out = String::new();
    for file in chorus_proto::tools::IdentityFile::ALL {
        let Some(text) = value.get(file.key()).and_then(Value::as_str) else {
            continue;
        };
        out.push_str(&format!("== {} ==\n", file.file_name()));
        if text.trim().is_empty() {
            out.push_str("(empty)\n");
        } else {
            out.push_str(text.trim_end());
            out.push('\n');
        }
    }
    out
}

/// The memory's size and limit, its files, and each entry with its provenance.
pub fn render_memory(value: &Value) -> String {
    let size = value["size"].as_u64().unwrap_or(0);
    let limit = value["limit"].as_u64().unwrap_or(0);
    let mut out = format!("MEMORY.md: {size} of {limit} bytes\n");
    let entries = value["entries"].as_array().cloned().unwrap_or_default();
    if entries.is_empty() {
        out.push_str("No entries.\n");
        return out;
    }
    let mut file = "";
    for entry in &entries {
        let this = entry["file"].as_str().unwrap_or("?");
        if this != file {
            out.push_str(&format!("\n{this}\n"));
            file = this;
        }
        let id = entry["id"].as_str().unwrap_or("--------");
        let mut from = Vec::new();
        if let Some(thread) = entry["thread_id"].as_u64() {
            from.push(format!("thread {thread}"));
        }
        for key in ["call_id", "message_id", "by", "at"] {
            if let Some(v) = entry[key].as_str() {
                from.push(v.to_string());
            }
        }
        let from = if from.is_empty() {
            "written by hand".to_string()
        } else {
            from.join(", ")
        };
        out.push_str(&format!(
            "  {id}  {}\n            ({from})\n",
            entry["text"].as_str().unwrap_or("")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_show_their_id_and_where_they_came_from() {
        let text = render_memory(&json!({
            "size": 120, "limit": 16384, "files": [],
            "entries": [
                {"id": "3f9a2c01", "text": "metric units", "file": "memory/MEMORY.md",
                 "line": 3, "thread_id": 12, "call_id": "toolu_01", "at": "2026-11-26T21:40:00Z"},
                {"id": null, "text": "by hand", "file": "memory/MEMORY.md", "line": 4}
            ]
        }));
        assert!(
            text.starts_with("MEMORY.md: 120 of 16384 bytes\n"),
            "{text}"
        );
        assert!(text.contains("3f9a2c01  metric units"), "{text}");
        assert!(
            text.contains("(thread 12, toolu_01, 2026-11-26T21:40:00Z)"),
            "{text}"
        );
        assert!(
            text.contains("--------  by hand\n            (written by hand)"),
            "{text}"
        );
        let identity = render_identity(&json!({"soul": "Calm.", "user": ""}));
        assert_eq!(identity, "== SOUL.md ==\nCalm.\n== USER.md ==\n(empty)\n");
    }

    #[test]
    fn hits_say_which_ranking_and_why_it_is_lexical() {
        let hit = json!({"text": "a crimson sedan", "source": "memory",
                         "path": "memory/MEMORY.md", "line": 3, "score": 0.032786});
        let hybrid = render_hits(&json!({"hits": [hit], "ranking": "hybrid"}));
        assert_eq!(
            hybrid,
            "0.0328  memory/MEMORY.md:3\n      a crimson sedan\n"
        );
        let lexical = render_hits(&json!({"hits": [], "ranking": "lexical",
                                          "ranking_note": "vector search is paused"}));
        assert_eq!(
            lexical,
            "No matches.\n(lexical ranking: vector search is paused)\n"
        );
    }
}
