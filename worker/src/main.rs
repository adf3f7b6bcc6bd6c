//! `chorus-worker`: the worker process for one agent.

use std::io::BufRead;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use chorus_worker::connection::{self, ConnectOptions, ConnectionError, Identity, LinkEnd};
use chorus_worker::link_tls::LinkTls;
use chorus_worker::runner::WorkerToolSettings;

/// Runs one Chorus agent's tool loops. Either started by `chorus serve` for one
/// agent (--agent; the credential on stdin with --credential-stdin, or in
/// CHORUS_WORKER_CREDENTIAL), or started on its own as a dial-in worker (no --agent;
/// CHORUS_JOIN_TOKEN: its own worker credential or the shared join token): it joins
/// the control plane's pool, is given an agent, and reconnects (capped backoff)
/// whenever the link drops. A refused or revoked credential ends it (exit 3).
#[derive(Parser)]
#[command(name = "chorus-worker", version)]
struct Args {
    /// URL of the control plane's worker endpoint, e.g. http://127.0.0.1:50051.
    #[arg(long, env = "CHORUS_CONTROL_PLANE")]
    control_plane: String,

    /// The agent this worker serves; without it the worker dials in with
    /// CHORUS_JOIN_TOKEN and is given one.
    #[arg(long, env = "CHORUS_AGENT")]
    agent: Option<String>,

    /// TLS: the CA (PEM) that signed the control plane's certificate; dial https://.
    #[arg(long, env = "CHORUS_TLS_CA")]
    tls_ca: Option<std::path::PathBuf>,

    /// Mutual TLS: this worker's certificate (PEM), signed by the CA the control
    /// plane requires ([workers] tls_client_ca).
    #[arg(long, env = "CHORUS_TLS_CERT")]
    tls_cert: Option<std::path::PathBuf>,

    /// Mutual TLS: the key of --tls-cert (PEM).
    #[arg(long, env = "CHORUS_TLS_KEY")]
    tls_key: Option<std::path::PathBuf>,

    /// Dial-in only: how many agents this worker serves at once (one link each).
    #[arg(long, env = "CHORUS_WORKER_AGENTS", default_value_t = 1)]
    agents: u16,

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
    #[command(flatten)]
    backends: BackendFlags,

    /// `json`: one JSON object per log line (the control plane relays them into
    /// its own JSON log, labelled with the agent); `text` otherwise.
    #[arg(long, default_value = "text")]
    log_format: String,
}

/// Where the CLIs of CLI backends are (default: found on `PATH`).
#[derive(clap::Args, Debug, Clone)]
struct BackendFlags {
    /// Claude Code's `claude` executable.
    #[arg(long, env = "CHORUS_CLAUDE_CODE")]
    claude_code: Option<std::path::PathBuf>,

    /// OpenCode's `opencode` executable.
    #[arg(long, env = "CHORUS_OPENCODE")]
    opencode: Option<std::path::PathBuf>,

    /// The `chorus-tools` executable CLIs run as their MCP server (default: beside
    /// this executable).
    #[arg(long, env = "CHORUS_TOOLS_BIN")]
    chorus_tools: Option<std::path::PathBuf>,
}

impl BackendFlags {
    fn paths(&self) -> chorus_worker::backends::probe::BackendPaths {
        chorus_worker::backends::probe::BackendPaths {
            claude_code: self.claude_code.clone(),
            opencode: self.opencode.clone(),
            chorus_tools: self.chorus_tools.clone(),
        }
    }
}

/// `chorus-worker backends`: prints which CLI backends this host can run (a JSON
/// list of `BackendStatus`) and exits 0.
#[derive(Parser)]
#[command(name = "chorus-worker backends")]
struct BackendsArgs {
    #[command(flatten)]
    backends: BackendFlags,
}

#[allow(clippy::print_stdout, reason = "the subcommand's answer is its stdout")]
async fn print_backends(args: BackendsArgs) -> ExitCode {
    let statuses = chorus_worker::backends::probe::probe_all(&args.backends.paths()).await;
    match serde_json::to_string(&statuses) {
        Ok(json) => {
            println!("{json}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("cannot write the backends as JSON: {e}");
            ExitCode::from(1)
        }
    }
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

/// The variable naming the descriptor the join token arrives on after the re-exec.
const JOIN_TOKEN_FD: &str = "CHORUS_JOIN_TOKEN_FD";

/// The join token, from CHORUS_JOIN_TOKEN (never a flag: command lines are visible
/// to every process). `/proc/<pid>/environ` shows the environment a process was
/// started with whatever it does to its variables later, and root can read it even
/// from a non-dumpable process (a tool process of a worker run as root could). So a
/// worker given the token in its environment starts itself again without it, handing
/// the token over a pipe (`CHORUS_JOIN_TOKEN_FD`); the new image reads it from there.
fn read_join_token() -> Result<String, String> {
    if let Ok(fd) = std::env::var(JOIN_TOKEN_FD) {
        let fd: i32 = fd
            .parse()
            .map_err(|_| format!("{JOIN_TOKEN_FD} is not a descriptor"))?;
        let token = std::fs::read_to_string(format!("/proc/self/fd/{fd}"))
            .map_err(|e| format!("cannot read the join token from descriptor {fd}: {e}"))?;
        // Not inherited by anything we start.
        let _ = nix::unistd::close(fd);
        return Ok(token.trim().to_string());
    }
    let token = std::env::var("CHORUS_JOIN_TOKEN").unwrap_or_default();
    if token.trim().is_empty() {
        return Err(
            "no --agent and no CHORUS_JOIN_TOKEN: a worker started on its own dials in \
             with a join credential (set CHORUS_JOIN_TOKEN to the token of `chorus worker \
             token create <name>`, or to the control plane's shared join token)"
                .into(),
        );
    }
    Err(reexec_without(&token))
}

/// Replaces this process with itself minus CHORUS_JOIN_TOKEN in its environment, the
/// token written to a pipe it inherits. Returns only on failure, saying why.
fn reexec_without(token: &str) -> String {
    use std::io::Write;
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let (read, write) = match nix::unistd::pipe() {
        Ok(pair) => pair,
        Err(e) => return format!("cannot make a pipe for the join token: {e}"),
    };
    let mut write = std::fs::File::from(write);
    if let Err(e) = write.write_all(token.trim().as_bytes()) {
        return format!("cannot hand the join token over: {e}");
    }
    drop(write);
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return format!("cannot find our own executable to start again: {e}"),
    };
    let error = std::process::Command::new(exe)
        .args(std::env::args_os().skip(1))
        .env_remove("CHORUS_JOIN_TOKEN")
        .env(JOIN_TOKEN_FD, read.as_raw_fd().to_string())
        .exec();
    format!("cannot start again without the join token in the environment: {error}")
}

/// A dial-in worker's life: join, serve the agent it is given, and join again when
/// the link ends; an unreachable control plane is retried with a capped backoff
/// (250 ms doubling to 30 s). Only a refused join token, or SIGTERM, ends it.
async fn serve_dialing_in(
    options: &ConnectOptions,
    shutdown: &CancellationToken,
) -> Result<(), ConnectionError> {
    const FIRST: Duration = Duration::from_millis(250);
    const MAX: Duration = Duration::from_secs(30);
    let mut delay = FIRST;
    while !shutdown.is_cancelled() {
        let served = connection::serve(options, shutdown.clone()).await;
        let wait = match served {
            Ok(_) if shutdown.is_cancelled() => break,
            // Served an agent or did an errand: join again at once.
            Ok(LinkEnd::Worked) => {
                tracing::info!("the link ended; joining the pool again");
                delay = FIRST;
                continue;
            }
            // Closed before it was given anything (the control plane stopping, or
            // closing its pool): back off as for an error.
            Ok(LinkEnd::Idle) => delay,
            Err(ConnectionError::Refused(message)) => {
                return Err(ConnectionError::Refused(message));
            }
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?delay, "cannot serve through the control plane; retrying");
                delay
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = shutdown.cancelled() => break,
        }
        delay = (delay * 2).min(MAX);
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // `chorus-worker backends` needs none of the worker's own arguments.
    if std::env::args().nth(1).as_deref() == Some("backends") {
        let args = BackendsArgs::parse_from(
            std::iter::once("chorus-worker backends".to_string()).chain(std::env::args().skip(2)),
        );
        return print_backends(args).await;
    }
    let args = Args::parse();
    let telemetry = std::sync::Arc::new(chorus_worker::telemetry::init(args.log_format == "json"));
    let identity = match &args.agent {
        Some(agent) => match read_credential(args.credential_stdin) {
            Ok(credential) => Identity::Agent {
                agent: agent.clone(),
                credential,
            },
            Err(message) => {
                tracing::error!("{message}");
                return ExitCode::from(2);
            }
        },
        None => match read_join_token() {
            Ok(join_token) => Identity::DialIn { join_token },
            Err(message) => {
                tracing::error!("{message}");
                return ExitCode::from(2);
            }
        },
    };
    // Processes of the same user (tools included) may not read our memory or
    // /proc/<pid>/environ.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!("cannot mark the worker non-dumpable: {e}");
    }
    tracing::info!(
        sandbox = %chorus_worker::tools::sandbox::support().describe(),
        seccomp = chorus_worker::tools::sandbox::filter().err().unwrap_or("on"),
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
    let span = match &args.agent {
        Some(agent) => tracing::info_span!("worker", agent = %agent),
        None => tracing::info_span!("worker", mode = "dial-in"),
    };
    let dial_in = matches!(identity, Identity::DialIn { .. });
    let link_tls = match (&args.tls_ca, &args.tls_cert, &args.tls_key) {
        (None, None, None) => None,
        (Some(ca), cert, key) if cert.is_some() == key.is_some() => {
            let identity = cert.as_deref().zip(key.as_deref());
            match LinkTls::load(ca, identity) {
                Ok(tls) => Some(tls),
                Err(message) => {
                    tracing::error!("TLS on the link: {message}");
                    return ExitCode::from(2);
                }
            }
        }
        _ => {
            tracing::error!(
                "TLS on the link: give --tls-ca, and --tls-cert with --tls-key together (for mutual TLS)"
            );
            return ExitCode::from(2);
        }
    };
    let options = ConnectOptions {
        control_plane: args.control_plane,
        identity,
        data_dir: args.data_dir,
        dial_timeout: Duration::from_secs(args.dial_timeout_secs),
        tools: WorkerToolSettings {
            bash_timeout: Duration::from_secs(args.bash_timeout_secs.max(1)),
            file_lock_timeout: Duration::from_secs(args.file_lock_timeout_secs),
            link_tls,
            backends: args.backends.paths(),
        },
        telemetry: Some(telemetry.clone()),
        // A dial-in worker's host is its own: it says what CLIs it can run. A launched
        // worker's host is the control plane's, which asks once for all of them
        // (`chorus-worker backends`), so each start costs no CLI probe.
        backends: if dial_in {
            chorus_worker::backends::probe::probe_all(&args.backends.paths()).await
        } else {
            Vec::new()
        },
    };
    let served = if dial_in {
        // One link per agent it may serve, each joining the pool on its own.
        let options = std::sync::Arc::new(options);
        let mut slots = tokio::task::JoinSet::new();
        for slot in 0..args.agents.max(1) {
            let options = options.clone();
            let shutdown = shutdown.clone();
            let span = tracing::info_span!(parent: &span, "slot", slot);
            slots
                .spawn(async move { serve_dialing_in(&options, &shutdown).instrument(span).await });
        }
        let mut served = Ok(());
        while let Some(ended) = slots.join_next().await {
            if let Ok(Err(e)) = ended {
                // A refused join token refuses every slot: stop them all.
                shutdown.cancel();
                served = Err(e);
            }
        }
        served
    } else {
        connection::serve(&options, shutdown)
            .instrument(span)
            .await
            .map(drop)
    };
    // What is still buffered goes out before the process ends.
    telemetry.shutdown(Duration::from_secs(2)).await;
    match served {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            match e {
                ConnectionError::Refused(_) => ExitCode::from(3),
                _ => ExitCode::from(4),
            }
        }
    }
}
