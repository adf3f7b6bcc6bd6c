//! `chorus`: the Chorus control plane.

use clap::{Parser, Subcommand};

use chorus_control_plane::config::{self, ServeArgs, Settings};
use chorus_control_plane::{serve, telemetry};

#[derive(Parser)]
#[command(
    name = "chorus",
    version,
    about = "Chorus turns chat channels, a task board and an HTTP API into autonomous LLM agents.",
    long_about = "Chorus turns chat channels, a task board and an HTTP API into autonomous LLM agents.\n\n\
        Each agent has its own git workspace, tools and model, and runs in its own worker\n\
        process (chorus-worker) that the control plane starts and supervises.\n\n\
        Settings come from built-in defaults, then chorus.toml, then the environment\n\
        (CHORUS_* and OPENAI_API_KEY / OPENAI_BASE_URL), then command-line flags."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the control plane: HTTP API, worker endpoint and one worker per agent.
    Serve(ServeArgs),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    telemetry::init();
    match cli.command {
        Command::Serve(args) => {
            let (file, path) = config::load_file(args.config.as_deref())?;
            if let Some(path) = path {
                tracing::info!(path = %path.display(), "settings file loaded");
            }
            let settings = Settings::resolve(args, file, |name| std::env::var(name).ok())?;
            let running = serve::start(settings).await?;
            // The one line chorus prints on stdout: where to find it.
            println!(
                "chorus ready http=http://{} grpc=http://{} data_dir={}",
                running.http_addr,
                running.grpc_addr,
                running.data_dir.display()
            );
            running.until_signal().await
        }
    }
}
