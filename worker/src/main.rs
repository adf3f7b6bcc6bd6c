//! `chorus-worker`: the worker process for one agent.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use chorus_worker::connection::{self, ConnectOptions, ConnectionError};
use chorus_worker::runner::WorkerToolSettings;

/// Runs one Chorus agent's tool loops. Normally started by `chorus serve`; the
/// credential comes on stdin (--credential-stdin) or in CHORUS_WORKER_CREDENTIAL.
#[derive(Parser)]
#[command(name = "chorus-worker", version)]
struct Args {
    /// URL of the control plane's worker endpoint, e.g. http://127.0.0.1:50051.
    #[arg(long, env = "CHORUS_CONTROL_PLANE")]
    control_plane: String,

    /// The agent this worker serves.
    #[arg(long, env = "CHORUS_AGENT")]
    agent: String,

    /// The worker's data directory; the agent's files are in `<dir>/agents/<name>/`.
    #[arg(long, env = "CHORUS_DATA_DIR")]
    data_dir: std::path::PathBuf,

    /// Read the credential from the first line of stdin.
    #[arg(long)]
    credential_stdin: bool,

    /// How long to keep trying to reach the control plane at start, in seconds.
    #[arg(long, default_value_t = 30)]
    dial_timeout_secs: u64,

    /// The mark every tool process carries in its environment (`CHORUS_TOOL_MARK`),
    /// by which the control plane finds what is left of them if this worker dies.
    #[arg(long)]
    tool_mark: Option<String>,

    /// Timeout of a bash call that names none, in seconds.
    #[arg(long, env = "CHORUS_BASH_TIMEOUT_SECS", default_value_t = 120)]
    bash_timeout_secs: u64,

    /// How long a write waits for a file another thread is writing, in seconds.
    #[arg(long, env = "CHORUS_FILE_LOCK_TIMEOUT_SECS", default_value_t = 30)]
    file_lock_timeout_secs: u64,
    /// `json`: one JSON object per log line (the control plane relays them into
    /// its own JSON log, labelled with the agent); `text` otherwise.
    #[arg(long, default_value = "text")]
    log_format: String,
}

fn read_credential(from_stdin: bool) -> Result<String, String> {
    let credential = if from_stdin {
        let mut line = String::new();
        std::io::stdin()
            .lock()
            .read_line(&mut line)
            .map_err(|e| format!("cannot read the credential from stdin: {e}"))?;
        line.trim().to_string()
    } else {
        std::env::var("CHORUS_WORKER_CREDENTIAL").unwrap_or_default()
    };
    if credential.is_empty() {
        return Err(
            "no credential: pass --credential-stdin or set CHORUS_WORKER_CREDENTIAL".into(),
        );
    }
    Ok(credential)
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let telemetry = std::sync::Arc::new(chorus_worker::telemetry::init(args.log_format == "json"));
    let credential = match read_credential(args.credential_stdin) {
        Ok(credential) => credential,
        Err(message) => {
            tracing::error!("{message}");
            return ExitCode::from(2);
        }
    };
    // Processes of the same user (tools included) may not read our memory or
    // /proc/<pid>/environ.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!("cannot mark the worker non-dumpable: {e}");
    }
    tracing::info!(
        sandbox = %chorus_worker::tools::sandbox::support().describe(),
        "tool processes' sandbox"
    );
    // Before any tool runs: orphans of tool processes come to us, not to pid 1.
    if let Err(e) = chorus_worker::tools::procs::init(args.tool_mark.clone()) {
        tracing::warn!("cannot become a subreaper; orphans of tool processes go to pid 1: {e}");
    }
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            use tokio::signal::unix::{SignalKind, signal};
            let (Ok(mut term), Ok(mut int)) = (
                signal(SignalKind::terminate()),
                signal(SignalKind::interrupt()),
            ) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
            shutdown.cancel();
        });
    }
    let span = tracing::info_span!("worker", agent = %args.agent);
    let options = ConnectOptions {
        control_plane: args.control_plane,
        agent: args.agent,
        credential,
        data_dir: args.data_dir,
        dial_timeout: Duration::from_secs(args.dial_timeout_secs),
        tools: WorkerToolSettings {
            bash_timeout: Duration::from_secs(args.bash_timeout_secs.max(1)),
            file_lock_timeout: Duration::from_secs(args.file_lock_timeout_secs),
        },
        telemetry: Some(telemetry.clone()),
    };
    let served = connection::serve(options, shutdown).instrument(span).await;
    // What is still buffered goes out before the process ends.
    telemetry.shutdown(Duration::from_secs(2)).await;
    match served {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            match e {
                ConnectionError::Refused(_) => ExitCode::from(3),
                _ => ExitCode::from(4),
            }
        }
    }
}
