//! `chorus agent destroy`: a slip of the tab key must not lose an agent's files. On a
//! terminal it says what goes and asks (y/N); `--yes` skips the question; without a
//! terminal and without `--yes` it refuses, so a script says what it means.

use std::io::{BufRead, IsTerminal, Write};

use reqwest::Method;
use serde_json::Value;

use super::client::Client;

/// Whether to go on: asked at the terminal, or refused without one.
pub async fn confirm(client: &Client, name: &str, keep_files: bool) -> anyhow::Result<bool> {
    if !std::io::stdin().is_terminal() {
        anyhow::bail!(
            "chorus agent destroy {name} deletes the agent{}; no terminal to ask at, so pass \
             --yes to do it{}",
            if keep_files {
                ""
            } else {
                " and its files (workspace, sessions, docs)"
            },
            if keep_files {
                ""
            } else {
                " (with --keep-files to keep its files)"
            }
        );
    }
    let agent = client.get(&format!("/api/agents/{name}")).await?;
    let threads = client
        .get(&format!("/api/agents/{name}/threads"))
        .await
        .unwrap_or(Value::Null);
    let sessions = client
        .get(&format!("/api/agents/{name}/context/history"))
        .await
        .unwrap_or(Value::Null);
    let mut err = std::io::stderr();
    write!(err, "{}", question(&agent, &threads, &sessions, keep_files))?;
    err.flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(matches!(
        line.trim().to_ascii_lowercase().as_str(),
        "y" | "yes"
    ))
}

/// What will go, and the question (pure: the API's answers in, text out).
pub fn question(agent: &Value, threads: &Value, sessions: &Value, keep_files: bool) -> String {
    let name = agent["name"].as_str().unwrap_or("?");
    let running = threads
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| {
            !matches!(
                t["status"].as_str(),
                Some("completed" | "failed" | "killed")
            )
        })
        .count();
    let saved = sessions["sessions"].as_array().map_or(0, Vec::len);
    let more = if sessions["next"].is_string() {
        "+"
    } else {
        ""
    };
    let mut out = format!("Destroying agent {name} stops its worker");
    if running > 0 {
        out.push_str(&format!(
            " and kills its {running} thread{} still going",
            if running == 1 { "" } else { "s" }
        ));
    }
    out.push_str(".\n");
    if keep_files {
        out.push_str(
            "Its files are kept (--keep-files): a new agent of this name picks them up.\n",
        );
    } else {
        out.push_str(&format!(
            "It deletes its files:\n  workspace:  {}\n  sessions:   {saved}{more} saved context{}\n  \
             and its docs and settings.\nTo keep them, answer n and run: chorus agent destroy {name} --keep-files\n",
            agent["workspace"].as_str().unwrap_or("?"),
            if saved == 1 && more.is_empty() { "" } else { "s" },
        ));
    }
    out.push_str(&format!("Destroy {name}? [y/N] "));
    out
}

/// Destroys the agent (asked or not before).
pub async fn destroy(client: &Client, name: &str, keep_files: bool) -> anyhow::Result<Value> {
    client
        .call(
            Method::DELETE,
            &format!("/api/agents/{name}?keep_files={keep_files}"),
            None,
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_question_says_what_is_deleted_and_how_to_keep_it() {
        let agent = json!({"name": "helper", "workspace": "/srv/data/agents/helper/workspace"});
        let threads = json!([{"status": "running"}, {"status": "completed"}]);
        let sessions = json!({"sessions": [{}, {}], "next": null});
        let q = question(&agent, &threads, &sessions, false);
        assert_eq!(
            q,
            "Destroying agent helper stops its worker and kills its 1 thread still going.\n\
             It deletes its files:\n  workspace:  /srv/data/agents/helper/workspace\n  \
             sessions:   2 saved contexts\n  and its docs and settings.\n\
             To keep them, answer n and run: chorus agent destroy helper --keep-files\n\
             Destroy helper? [y/N] "
        );
        let kept = question(&agent, &json!([]), &sessions, true);
        assert!(
            kept.contains("files are kept") && !kept.contains("workspace:"),
            "{kept}"
        );
    }
}
