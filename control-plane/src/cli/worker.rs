//! `chorus worker token create|list|revoke`: per-worker join credentials for
//! dial-in workers, through `/api/workers/tokens` (admin only).

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use super::client::Client;
use super::render;

#[derive(Debug, Subcommand)]
pub enum WorkerCommand {
    /// Join credentials for dial-in workers: one per worker (or per group of
    /// workers sharing a volume).
    #[command(
        subcommand,
        after_help = "Examples:\n  chorus worker token create worker-0\n  chorus worker token list\n  chorus worker token revoke worker-0"
    )]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a credential and print its token (shown once; give it to the worker
    /// as CHORUS_JOIN_TOKEN). A revoked name gets a new token and keeps its volumes.
    #[command(
        after_help = "Example:\n  chorus worker token create worker-0\n  CHORUS_JOIN_TOKEN=<the token> chorus-worker --control-plane <url> --data-dir /data"
    )]
    Create { name: String },
    /// List the credentials: active or revoked, and the volumes each serves.
    #[command(after_help = "Example:\n  chorus worker token list")]
    List,
    /// Revoke a credential: it joins nothing from now on, and every link that
    /// joined with it ends at once (its agents move to other workers).
    #[command(after_help = "Example:\n  chorus worker token revoke worker-0")]
    Revoke { name: String },
}

/// Runs one `chorus worker` command; prints JSON with `json`.
pub async fn run(client: &Client, command: WorkerCommand, json: bool) -> anyhow::Result<Value> {
    let WorkerCommand::Token(command) = command;
    Ok(match command {
        TokenCommand::Create { name } => {
            let made = client
                .post("/api/workers/tokens", &json!({ "name": name }))
                .await?;
            if !json {
                // The token alone on stdout (for scripts); the advice on stderr.
                eprintln!(
                    "Worker credential {name} created. Its token is printed below, once; \
                     give it to the worker as CHORUS_JOIN_TOKEN (only its hash is kept)."
                );
            }
            made
        }
        TokenCommand::List => client.get("/api/workers/tokens").await?,
        TokenCommand::Revoke { name } => {
            client
                .call(Method::DELETE, &format!("/api/workers/tokens/{name}"), None)
                .await?
        }
    })
}

/// The text a person sees for an answer of `command`'s kind.
pub fn text(answer: &Value) -> String {
    if answer.get("tokens").is_some() {
        return render::worker_tokens(answer);
    }
    if let Some(token) = answer["token"].as_str() {
        return format!("{token}\n");
    }
    format!(
        "Worker credential {} revoked; its links were ended.\n",
        answer["name"].as_str().unwrap_or("?")
    )
}
