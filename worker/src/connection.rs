//! The worker's end of the chorus.v1 link. One of the two modules that see generated
//! protocol types (the other is the control plane's gRPC service): it dials, attaches
//! with the worker's credential, and converts between the wire and domain types.
//!
//! A dial-in link that served an agent or did an errand is followed by a new one at once
//! (`LinkEnd::Worked`); one that ended before it was given anything, or failed, by the
//! reconnect backoff, 250 ms doubling to 30 s; a refused join token ends the worker
//! (exit 3) rather than retrying forever.

use std::time::{Duration, Instant};

use chorus_proto::domain::{ControlCommand, Sequenced, WorkerEvent};
use chorus_proto::limits::MAX_LINK_MESSAGE_BYTES;
use chorus_proto::wire::{ControlMessage, WorkerLinkClient, WorkerMessage};
use chorus_proto::{AGENT_METADATA_KEY, WORKER_NAME_METADATA_KEY};
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tonic::Code;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, Endpoint};

use crate::runner::{Runner, WorkerToolSettings};
use crate::tool_loop::EventSink;

pub struct ConnectOptions {
    /// e.g. `http://127.0.0.1:50051`
    pub control_plane: String,
    pub identity: Identity,
    /// The worker's data directory: agents' directories are `<data_dir>/agents/<name>/`.
    pub data_dir: std::path::PathBuf,
    /// How long to keep trying to reach the control plane at start.
    pub dial_timeout: Duration,
    pub tools: WorkerToolSettings,
    /// Switched on when the Welcome asks for trace export.
    pub telemetry: Option<std::sync::Arc<crate::telemetry::Telemetry>>,
    /// The CLI backends on this host (probed at start by a dial-in worker; empty for a
    /// launched one, whose host the control plane probes), said in every Hello.
    pub backends: Vec<chorus_proto::domain::BackendStatus>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error("'{0}' is not a valid control plane URL: {1}")]
    BadUrl(String, String),
    #[error("cannot reach the control plane at {url} after {waited:?}: {message}")]
    Unreachable {
        url: String,
        waited: Duration,
        message: String,
    },
    #[error("the control plane refused this worker: {0}")]
    Refused(String),
    #[error("the control plane broke protocol: {0}")]
    Protocol(String),
}

/// A refusal (the credential or join token is not accepted: retrying cannot help)
/// or a broken connection (retrying may).
fn refused_or_unreachable(status: tonic::Status, url: &str) -> ConnectionError {
    match status.code() {
        Code::Unauthenticated
        | Code::PermissionDenied
        | Code::FailedPrecondition
        | Code::InvalidArgument => ConnectionError::Refused(status.message().to_string()),
        // Connected, then cut off before any answer: most often the two ends do
        // not agree on TLS. Say what to check.
        Code::Unknown | Code::Cancelled | Code::Internal | Code::Unavailable => {
            ConnectionError::Unreachable {
                url: url.to_string(),
                waited: Duration::ZERO,
                message: format!("{} ({})", status.message(), tls_hint(url)),
            }
        }
        _ => ConnectionError::Unreachable {
            url: url.to_string(),
            waited: Duration::ZERO,
            message: status.to_string(),
        },
    }
}

/// What to check when a link is cut off right after connecting.
fn tls_hint(url: &str) -> &'static str {
    if url.starts_with("https://") {
        "if the control plane requires client certificates, give --tls-cert and --tls-key \
         signed by its client CA; --tls-ca must be the CA that signed its certificate"
    } else {
        "if the control plane's worker link speaks TLS, dial https:// with --tls-ca"
    }
}

/// The directory of `agent` under `data_dir`; the name must be one plain path
/// component (the control plane allows letters, digits, `-` and `_`).
pub fn agent_dir(
    data_dir: &std::path::Path,
    agent: &str,
) -> Result<std::path::PathBuf, ConnectionError> {
    let plain = !agent.is_empty()
        && agent != "."
        && agent != ".."
        && !agent.contains('/')
        && !agent.contains('\0');
    if !plain {
        return Err(ConnectionError::Protocol(format!(
            "the agent name {agent:?} is not a plain directory name"
        )));
    }
    Ok(data_dir.join("agents").join(agent))
}

/// Who this worker is to the control plane.
#[derive(Clone)]
pub enum Identity {
    /// Launched for one agent with that launch's credential.
    Agent { agent: String, credential: String },
    /// Started on its own: joins with the join token and is given an agent.
    DialIn { join_token: String },
}

/// How long a dial-in worker waits for the agent's directory to be let go by a
/// worker that has not yet noticed it lost the agent.
const DIRECTORY_WAIT: Duration = Duration::from_secs(20);

/// How long a dial-in worker waits for a destroyed agent's directory before it says
/// it is busy: whoever holds it may be serving a new agent of that name, and the
/// control plane asks again later if the deletion is still wanted.
const DELETE_WAIT: Duration = Duration::from_secs(2);

/// How long in-flight runs get to wind down when the worker stops.
const WIND_DOWN: Duration = Duration::from_secs(3);

async fn dial(options: &ConnectOptions) -> Result<Channel, ConnectionError> {
    let mut endpoint = Endpoint::from_shared(options.control_plane.clone())
        .map_err(|e| ConnectionError::BadUrl(options.control_plane.clone(), e.to_string()))?;
    let https = options.control_plane.starts_with("https://");
    match (&options.tools.link_tls, https) {
        (Some(tls), true) => {
            endpoint = endpoint.tls_config(tls.client_config()).map_err(|e| {
                ConnectionError::BadUrl(options.control_plane.clone(), e.to_string())
            })?;
        }
        (None, true) => {
            return Err(ConnectionError::BadUrl(
                options.control_plane.clone(),
                "an https:// control plane needs --tls-ca (the CA that signed its certificate)"
                    .into(),
            ));
        }
        (Some(_), false) => {
            return Err(ConnectionError::BadUrl(
                options.control_plane.clone(),
                "--tls-ca is given: dial the control plane with https://".into(),
            ));
        }
        (None, false) => {}
    }
    let endpoint = endpoint
        .connect_timeout(Duration::from_secs(2))
        .tcp_nodelay(true)
        // A control plane that vanished without closing the connection (a lost
        // host, a partition) is noticed within a minute, not at the next write.
        .http2_keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true);
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    loop {
        match endpoint.connect().await {
            Ok(channel) => return Ok(channel),
            Err(e) if started.elapsed() < options.dial_timeout => {
                tracing::debug!(error = %e, ?delay, "control plane not reachable yet");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
            }
            Err(e) => {
                return Err(ConnectionError::Unreachable {
                    url: options.control_plane.clone(),
                    waited: started.elapsed(),
                    message: e.to_string(),
                });
            }
        }
    }
}

/// How a link that ended without an error went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkEnd {
    /// It served an agent or did an errand (a dial-in worker joins again at once).
    Worked,
    /// It ended before it was given anything (the control plane stopping or closing
    /// its pool), or we were told to stop.
    Idle,
}

/// Attaches and serves until the control plane closes the link or `shutdown` fires.
pub async fn serve(
    options: &ConnectOptions,
    shutdown: CancellationToken,
) -> Result<LinkEnd, ConnectionError> {
    // A stop while the control plane cannot be reached ends the dialling too.
    let channel = tokio::select! {
        channel = dial(options) => channel?,
        _ = shutdown.cancelled() => return Ok(LinkEnd::Idle),
    };
    // The same limits as the control plane's end; events are measured before they
    // are queued (`outbound`), so the encoding limit is only a backstop.
    let mut client = WorkerLinkClient::new(channel.clone())
        .max_decoding_message_size(MAX_LINK_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_LINK_MESSAGE_BYTES);

    // Every event, the worker's own included, goes through one sink, which numbers
    // each run's events in the order they are queued.
    let (events_tx, events_rx) = mpsc::unbounded_channel::<Sequenced>();
    let events = EventSink::new(events_tx);
    // A dial-in worker names the agents' directories on its volume, so the control
    // plane can place agents where their files are.
    let (volume, directories) = match options.identity {
        Identity::DialIn { .. } => {
            let data_dir = options.data_dir.clone();
            tokio::task::spawn_blocking(move || {
                let volume = crate::agent_dir::volume_id(&data_dir).unwrap_or_else(|e| {
                    tracing::warn!(error = %e, "no volume id: agents are placed as if this link had a volume of its own");
                    String::new()
                });
                (volume, crate::agent_dir::directories(&data_dir))
            })
            .await
            .unwrap_or_default()
        }
        Identity::Agent { .. } => (String::new(), Vec::new()),
    };
    events.send(WorkerEvent::Hello {
        worker_version: env!("CARGO_PKG_VERSION").to_string(),
        pid: std::process::id(),
        directories,
        volume,
        backends: options.backends.clone(),
    });
    let outbound = UnboundedReceiverStream::new(events_rx).map(WorkerMessage::from);
    let mut request = tonic::Request::new(outbound);
    let metadata = request.metadata_mut();
    let bearer = match &options.identity {
        Identity::Agent { agent, credential } => {
            metadata.insert(
                AGENT_METADATA_KEY,
                MetadataValue::try_from(agent.as_str()).map_err(|_| {
                    ConnectionError::Refused(format!("agent name {agent:?} cannot be sent"))
                })?,
            );
            credential
        }
        Identity::DialIn { join_token } => {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
            let name = format!("{} pid {}", host.trim(), std::process::id());
            if let Ok(value) = MetadataValue::try_from(name.as_str()) {
                metadata.insert(WORKER_NAME_METADATA_KEY, value);
            }
            join_token
        }
    };
    metadata.insert(
        "authorization",
        MetadataValue::try_from(format!("Bearer {bearer}")).map_err(|_| {
            ConnectionError::Refused("the credential has characters that cannot be sent".into())
        })?,
    );

    let response = client
        .attach(request)
        .await
        .map_err(|status| refused_or_unreachable(status, &options.control_plane))?;
    let mut inbound = response.into_inner();
    if matches!(options.identity, Identity::DialIn { .. }) {
        tracing::info!("joined the control plane's pool; waiting for an agent");
    }

    // A dial-in worker waits here, idle, until it is given an agent.
    let first = tokio::select! {
        first = inbound.message() => first,
        _ = shutdown.cancelled() => return Ok(LinkEnd::Idle),
    };
    let (agent, credential, dial_in, heartbeat_every) = match first {
        Ok(Some(first)) => match ControlCommand::try_from(first) {
            Ok(ControlCommand::Welcome {
                agent,
                connection_id,
                heartbeat_interval_ms,
                trace_export,
                dial_in,
            }) => {
                tracing::info!(%connection_id, "attached to the control plane");
                let credential = match (&options.identity, &dial_in) {
                    (Identity::Agent { credential, .. }, _) => credential.clone(),
                    (Identity::DialIn { .. }, Some(dial_in)) => dial_in.credential.0.clone(),
                    (Identity::DialIn { .. }, None) => {
                        return Err(ConnectionError::Protocol(
                            "a dial-in worker's Welcome carries no credential".into(),
                        ));
                    }
                };
                if let Identity::Agent { agent: ours, .. } = &options.identity
                    && *ours != agent
                {
                    return Err(ConnectionError::Protocol(format!(
                        "launched for agent {ours:?}, welcomed as {agent:?}"
                    )));
                }
                if let (Some(export), Some(telemetry)) = (&trace_export, &options.telemetry) {
                    telemetry.export(channel.clone(), &agent, &credential, export);
                }
                (
                    agent,
                    credential,
                    dial_in,
                    Duration::from_millis(u64::from(heartbeat_interval_ms.max(500))),
                )
            }
            Ok(ControlCommand::DeleteAgentFiles { agent, incarnation })
                if matches!(options.identity, Identity::DialIn { .. }) =>
            {
                delete_agent_files(options, &events, &mut inbound, &agent, &incarnation).await;
                return Ok(LinkEnd::Worked);
            }
            Ok(other) => {
                return Err(ConnectionError::Protocol(format!(
                    "expected Welcome first, got {other:?}"
                )));
            }
            Err(e) => return Err(ConnectionError::Protocol(e.to_string())),
        },
        // A dial-in worker's link can end while it waits (the control plane shuts
        // down or restarts): it joins again. A launched worker's never should.
        Ok(None) if matches!(options.identity, Identity::DialIn { .. }) => {
            tracing::info!("the control plane closed the link before giving an agent");
            return Ok(LinkEnd::Idle);
        }
        Ok(None) => {
            return Err(ConnectionError::Refused(
                "the control plane closed the link at once".into(),
            ));
        }
        Err(status) => return Err(refused_or_unreachable(status, &options.control_plane)),
    };
    let agent_dir = agent_dir(&options.data_dir, &agent)?;
    // A dial-in worker holds the agent's directory (laid out from the template if
    // its volume has none) for as long as it serves the agent.
    let _held = match &dial_in {
        Some(dial_in) => {
            let taken = crate::agent_dir::take(
                &agent_dir,
                &dial_in.template,
                &dial_in.incarnation,
                DIRECTORY_WAIT,
            );
            match taken.await {
                Ok((held, laid_out)) => {
                    tracing::info!(%agent, dir = %agent_dir.display(), laid_out, "serving agent");
                    Some(held)
                }
                Err(message) => {
                    // Ending the link tells the control plane, which assigns the
                    // agent again.
                    return Err(ConnectionError::Protocol(format!(
                        "cannot take agent {agent}'s directory: {message}"
                    )));
                }
            }
        }
        None => None,
    };

    let runner = Runner::new(
        events.clone(),
        &options.control_plane,
        &credential,
        &options.tools,
        agent_dir,
    );
    let mut heartbeat = tokio::time::interval(heartbeat_every);
    heartbeat.tick().await; // the first tick is immediate
    // Set when the control plane ends the link refusing us (a revoked credential).
    let mut refused = None;
    loop {
        tokio::select! {
            message = inbound.message() => match message {
                Ok(Some(message)) => match ControlCommand::try_from(message) {
                    Ok(ControlCommand::Shutdown { reason }) => {
                        tracing::info!(%reason, "control plane asked this worker to stop");
                        break;
                    }
                    Ok(command) => runner.handle(command),
                    Err(e) => tracing::warn!(error = %e, "malformed command from the control plane; ignored"),
                },
                Ok(None) => {
                    tracing::info!("the control plane closed the link");
                    break;
                }
                Err(status) if matches!(status.code(), Code::Unauthenticated | Code::PermissionDenied) => {
                    tracing::error!(reason = %status.message(), "the control plane ended this worker's link");
                    refused = Some(status.message().to_string());
                    break;
                }
                Err(status) => {
                    tracing::warn!(%status, "the link to the control plane broke");
                    break;
                }
            },
            _ = heartbeat.tick() => {
                events.send(WorkerEvent::Heartbeat { active_runs: runner.active_runs() as u32 });
            }
            _ = shutdown.cancelled() => {
                tracing::info!("stopping");
                break;
            }
        }
    }
    runner.cancel_all(WIND_DOWN).await;
    match refused {
        Some(message) => Err(ConnectionError::Refused(message)),
        None => Ok(LinkEnd::Worked),
    }
}

/// An idle dial-in worker asked to delete a destroyed agent's files: does it, says
/// how it went, and waits for the control plane to end the stream (so the answer is
/// not cut off by our own end); the caller then joins the pool again.
async fn delete_agent_files(
    options: &ConnectOptions,
    events: &EventSink,
    inbound: &mut tonic::Streaming<ControlMessage>,
    agent: &str,
    incarnation: &str,
) {
    let result = match agent_dir(&options.data_dir, agent) {
        Ok(dir) => crate::agent_dir::delete(&dir, incarnation, DELETE_WAIT).await,
        Err(e) => Err(e.to_string()),
    };
    match &result {
        Ok(deleted) => tracing::info!(%agent, deleted, "deleted a destroyed agent's files"),
        Err(error) => tracing::warn!(%agent, %error, "cannot delete a destroyed agent's files"),
    }
    events.send(WorkerEvent::AgentFilesDeleted {
        agent: agent.to_string(),
        result,
    });
    let _ = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(Some(_)) = inbound.message().await {}
    })
    .await;
}
