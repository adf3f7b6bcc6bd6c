//! `chorus grants <agent> [add|rm] <tool>…`: tools granted to an agent at run time.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use super::client::Client;
use super::{Printer, render};

#[derive(Debug, Subcommand)]
pub enum GrantsCommand {
    /// Grant tools: every call of each is allowed, whatever the agent's profile says.
    #[command(after_help = "Example:\n  chorus grants coder add bash file.write")]
    Add {
        #[arg(required = true)]
        tools: Vec<String>,
    },
    /// Take tools back.
    #[command(after_help = "Example:\n  chorus grants coder rm bash")]
    Rm {
        #[arg(required = true)]
        tools: Vec<String>,
    },
}

pub(super) async fn run(
    client: &Client,
    agent: &str,
    command: Option<GrantsCommand>,
    out: Printer,
) -> anyhow::Result<bool> {
    let path = format!("/api/agents/{agent}/grants");
    let list = match command {
        None => client.get(&path).await?,
        Some(GrantsCommand::Add { tools }) => {
            client.post(&path, &json!({ "tools": tools })).await?
        }
        Some(GrantsCommand::Rm { tools }) => {
            let mut left = serde_json::Value::Null;
            for tool in tools {
                left = client
                    .call(Method::DELETE, &format!("{path}/{tool}"), None)
                    .await?;
            }
            left
        }
    };
    out.show(&list, |l| render::grants(agent, l))
}
