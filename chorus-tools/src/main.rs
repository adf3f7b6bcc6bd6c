//! `chorus-tools`: Chorus's tools for an agent whose brain is a CLI (Claude Code,
//! OpenCode). Every call goes to the run endpoint the worker opened for this run
//! (`CHORUS_TOOLS_URL`, credential in `CHORUS_TOOLS_TOKEN`), into the same pipeline
//! the API tool loop uses: validation, the permission check, execution where the
//! resource lives, audit, task history.
//!
//! Two faces: `chorus-tools <tool> '<json>'` (and `list`) for CLIs that can only
//! run commands, and `chorus-tools mcp`, an MCP server over stdio.

mod command;
mod endpoint;
mod mcp;

use std::io::Write;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use command::Outcome;

const EXAMPLES: &str = "\
Examples:
  chorus-tools list
  chorus-tools file_read '{\"path\": \"notes.md\"}'
  chorus-tools file_write '{\"path\": \"notes.md\", \"content\": \"done\\n\"}'
  chorus-tools mcp                      (an MCP server on stdin/stdout)

Exit status: 0 the tool's result (on stdout); 1 the tool's error result (on stdout);
2 no call could be made (a sentence on stderr).

It works only inside a Chorus run: the worker sets CHORUS_TOOLS_URL and
CHORUS_TOOLS_TOKEN for the agent's CLI, and the credential ends with the run.";

/// Calls Chorus's tools from inside a Chorus run.
#[derive(Parser)]
#[command(
    name = "chorus-tools",
    version,
    override_usage = "chorus-tools <TOOL> '<JSON OBJECT>'\n       chorus-tools list\n       chorus-tools mcp",
    after_help = EXAMPLES
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// List the tools this run offers: name and first line of the description.
    List,
    /// Serve the run's tools as an MCP server (named "chorus") over stdin/stdout.
    Mcp,
    /// Call a tool: `chorus-tools <tool> '<json object>'`.
    #[command(external_subcommand)]
    Call(Vec<String>),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => return fail(&format!("could not start: {e}")),
    };
    let outcome = runtime.block_on(async {
        match args.command {
            Command::List => command::list().await,
            Command::Call(words) => match words.as_slice() {
                [tool] => command::call(tool, None).await,
                [tool, arguments] => command::call(tool, Some(arguments)).await,
                _ => fail_outcome(
                    "give the tool's arguments as one JSON object in single quotes, \
                     like: chorus-tools file_read '{\"path\": \"notes.md\"}'",
                ),
            },
            Command::Mcp => match endpoint::Endpoint::from_env() {
                Ok(endpoint) => match mcp::serve(endpoint).await {
                    Ok(()) => Outcome::Ok,
                    Err(e) => fail_outcome(&format!("the MCP server stopped: {e:#}")),
                },
                Err(e) => fail_outcome(&e.to_string()),
            },
        }
    });
    outcome.into()
}

fn fail_outcome(sentence: &str) -> Outcome {
    let _ = writeln!(std::io::stderr(), "chorus-tools: {sentence}");
    Outcome::CouldNotCall
}

fn fail(sentence: &str) -> ExitCode {
    fail_outcome(sentence).into()
}
