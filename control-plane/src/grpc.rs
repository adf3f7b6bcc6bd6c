//! The gRPC service workers attach to. One of the two modules that see generated
//! protocol types (the other is the worker's connection module): it authenticates the
//! worker, converts wire messages to domain types and back, and ends a connection that
//! has gone silent (a hung worker). Everything else happens behind domain types.
//!
//! **Authentication**: metadata `authorization: Bearer <credential>` and
//! `x-chorus-agent: <name>`. The credential is 32 random bytes made for one launch of
//! one agent's worker (a generation, `workers::registry`), handed over on the worker's
//! stdin, compared in constant time, spent when its connection ends (the model relay
//! refuses it from that moment) and revoked when the process ends. A wrong or foreign
//! credential is `UNAUTHENTICATED`; a second connection with a good one, or a spent
//! one, is `FAILED_PRECONDITION`. A dial-in worker presents the join token instead
//! (`workers::credentials`).
//!
//! **Liveness**: the worker sends `Heartbeat` at the interval `Welcome` names, from
//! its connection loop, apart from its runs' tasks (so a long model call or tool does
//! not silence it). A connection that carries nothing for three intervals
//! (`WorkerSettings::silence_limit`) is ended; the supervisor then kills the process
//! at once and restarts it, and its runs are resumed like any worker's death.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::domain::{
    AgentDirectory, ControlCommand, Credential, DialIn, Sequenced, TemplateFile, TraceExport,
    WorkerEvent,
};
use chorus_proto::limits::MAX_LINK_MESSAGE_BYTES;
use chorus_proto::wire::{ControlMessage, WorkerLink, WorkerLinkServer, WorkerMessage};
use chorus_proto::{AGENT_METADATA_KEY, WORKER_NAME_METADATA_KEY};
use futures::{Stream, StreamExt};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};

use crate::agents::name;
use crate::config::WorkerSettings;
use crate::gate::{Check, ToolGate};
use crate::jobs::JobLog;
use crate::reports::{RateLimits, WorkerRate};
use crate::runs::Runs;
use crate::secrets::{KnownSecrets, bearer_token};
use crate::summaries::WorkerSummarizer;
use crate::workers::credentials::{Admitted, JoinCredentials, Refused};
use crate::workers::pool::{Deletion, Pool, Work};
use crate::workers::registry::{AttachError, Registry};

/// What a worker's events are handed to.
pub struct LinkServices {
    pub registry: Arc<Registry>,
    pub runs: Arc<Runs>,
    pub gate: Arc<ToolGate>,
    pub jobs: Arc<JobLog>,
    pub summaries: Arc<WorkerSummarizer>,
}

pub struct WorkerLinkService {
    /// What each connection's task is handed.
    link: Link,
    welcome: WelcomeParts,
    /// `Some` with the remote launcher: who may dial in, and where they wait.
    dial_in: Option<DialInService>,
}

/// Dial-in workers: the pool they wait in, the credentials they may join with, and
/// the template of a new agent's directory they are given with an agent.
pub struct DialInService {
    pub pool: Arc<Pool>,
    /// Who may join, which volumes each may serve, where agents were placed.
    pub credentials: Arc<JoinCredentials>,
    pub template: Arc<Vec<TemplateFile>>,
    /// What each joining worker's volume holds, for the clean-up of directories no
    /// agent can use again (`AgentService::tidy_volume`). Full: skipped (the next
    /// join names them again).
    pub volumes: tokio::sync::mpsc::Sender<(String, Vec<AgentDirectory>)>,
}

impl WorkerLinkService {
    pub fn new(
        services: LinkServices,
        secrets: KnownSecrets,
        connections: TaskTracker,
        workers: &WorkerSettings,
    ) -> Self {
        let LinkServices {
            registry,
            runs,
            gate,
            jobs,
            summaries,
        } = services;
        WorkerLinkService {
            link: Link {
                registry,
                runs,
                gate,
                jobs,
                summaries,
                secrets,
                connections,
                silence_limit: workers.silence_limit(),
            },
            welcome: WelcomeParts {
                heartbeat_interval: workers.heartbeat_interval,
                trace_export: None,
            },
            dial_in: None,
        }
    }

    /// Takes dial-in workers (the remote launcher).
    pub fn with_dial_in(mut self, dial_in: Option<DialInService>) -> Self {
        self.dial_in = dial_in;
        self
    }

    /// Workers are told to export their spans (through this control plane),
    /// labelled with `export`'s resource and their agent.
    pub fn with_trace_export(mut self, export: Option<TraceExport>) -> Self {
        self.welcome.trace_export = export;
        self
    }

    /// The server, with the link's message limits (`chorus_proto::limits`) in
    /// both directions.
    pub fn into_server(self) -> WorkerLinkServer<Self> {
        WorkerLinkServer::new(self)
            .max_decoding_message_size(MAX_LINK_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_LINK_MESSAGE_BYTES)
    }
}

/// Who is attaching: a worker launched for an agent with that generation's
/// credential, or a dial-in worker with a join credential and no agent.
enum Caller {
    Agent { agent: String, credential: String },
    DialIn { token: String },
}

/// Reads who the caller claims to be and the credential it presents.
fn identify<T>(request: &Request<T>) -> Result<Caller, Status> {
    let metadata = request.metadata();
    let token = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(|| Status::unauthenticated("missing bearer credential"))?
        .to_string();
    let Some(agent) = metadata.get(AGENT_METADATA_KEY) else {
        return Ok(Caller::DialIn { token });
    };
    let agent = agent
        .to_str()
        .map_err(|_| Status::invalid_argument(format!("{AGENT_METADATA_KEY} is not text")))?;
    name::validate(agent).map_err(|e| Status::invalid_argument(e.to_string()))?;
    Ok(Caller::Agent {
        agent: agent.to_string(),
        credential: token,
    })
}

type ControlStream = Pin<Box<dyn Stream<Item = Result<ControlMessage, Status>> + Send>>;

/// Commands as the worker receives them: each checked against the link's size
/// limit. Commands are bounded where they are made (a run's assignment is checked
/// when it is built); one over the limit would end the stream of every run of this
/// agent, so it is never sent.
fn outbound(commands: impl Stream<Item = ControlCommand> + Send + 'static) -> ControlStream {
    Box::pin(commands.filter_map(|command| {
        let message = ControlMessage::from(command);
        let len = chorus_proto::limits::encoded_len(&message);
        if len > MAX_LINK_MESSAGE_BYTES {
            tracing::error!(
                len,
                limit = MAX_LINK_MESSAGE_BYTES,
                "command too large for the worker link; not sent"
            );
            return std::future::ready(None);
        }
        std::future::ready(Some(Ok(message)))
    }))
}

/// What a dial-in link's task sends its stream first: the Welcome (or an errand)
/// and the commands after it, or why the worker is refused.
type Start = Result<
    (
        ControlCommand,
        tokio::sync::mpsc::UnboundedReceiver<ControlCommand>,
    ),
    Status,
>;

/// A refusal as the worker hears it: a wrong or revoked credential and a volume of
/// another credential end it (retrying cannot help); a store that cannot answer
/// is retried.
fn refusal(refused: &Refused) -> Status {
    match refused {
        Refused::Unknown | Refused::Revoked(_) => Status::unauthenticated(refused.to_string()),
        Refused::VolumeTaken { .. } => Status::permission_denied(refused.to_string()),
        Refused::Unavailable(_) => Status::unavailable(refused.to_string()),
    }
}

/// `stream`, ended the moment `revoked` fires with `why` as the last word (the
/// worker logs it and stops).
fn until_revoked(stream: ControlStream, revoked: CancellationToken, why: Status) -> ControlStream {
    let ended = revoked.clone();
    Box::pin(
        stream.take_until(revoked.cancelled_owned()).chain(
            futures::stream::once(async move { ended.is_cancelled().then_some(Err(why)) })
                .filter_map(std::future::ready),
        ),
    )
}

impl WorkerLinkService {
    /// A dial-in worker: it waits in the pool, reading only its own keep-alives,
    /// until a supervisor assigns it an agent; then it is that agent's link. Every
    /// step ends at once when its credential is revoked.
    async fn join(
        &self,
        token: &str,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<ControlStream, Status> {
        let Some(dial_in) = &self.dial_in else {
            return Err(Status::unauthenticated(
                "this control plane takes no dial-in workers (it launches its own: [workers] launcher = \"local\")",
            ));
        };
        let Admitted { principal, revoked } =
            dial_in.credentials.admit(token).await.map_err(|refused| {
                tracing::warn!(peer = ?request.remote_addr(), reason = %refused, "dial-in worker refused");
                refusal(&refused)
            })?;
        // The name it gives itself, for the logs only: printable, bounded.
        let peer = request
            .metadata()
            .get(WORKER_NAME_METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .map(|name| {
                name.chars()
                    .filter(|c| c.is_ascii_graphic() || *c == ' ')
                    .take(100)
                    .collect::<String>()
            })
            .filter(|name| !name.is_empty())
            .unwrap_or_else(|| "an unnamed worker".into());
        let (start, started) = tokio::sync::oneshot::channel::<Start>();
        let commands = futures::stream::once(started).flat_map(|started| match started {
            Ok(Ok((first, commands))) => outbound(
                futures::stream::once(std::future::ready(first))
                    .chain(UnboundedReceiverStream::new(commands)),
            ),
            Ok(Err(status)) => Box::pin(futures::stream::once(std::future::ready(Err(status)))),
            Err(_) => Box::pin(futures::stream::empty()) as ControlStream,
        });
        let commands = until_revoked(
            Box::pin(commands),
            revoked.clone(),
            refusal(&Refused::Revoked(principal.label().to_string())),
        );
        let mut inbound = request.into_inner();
        let pool = dial_in.pool.clone();
        let credentials = dial_in.credentials.clone();
        let template = dial_in.template.clone();
        let volumes = dial_in.volumes.clone();
        let registry = self.link.registry.clone();
        let link = self.link.clone();
        let this = self.welcome.clone();
        self.link.connections.spawn(async move {
            let worker = principal.label().to_string();
            // Its Hello names its volume and the agents' directories on it (placement).
            let hello = tokio::select! {
                () = revoked.cancelled() => return,
                hello = tokio::time::timeout(HELLO_WAIT, inbound.message()) => hello,
            };
            let (volume, directories, backends) = match hello {
                Ok(Ok(Some(message))) => match Sequenced::try_from(message) {
                    Ok(Sequenced {
                        event:
                            WorkerEvent::Hello {
                                volume,
                                directories,
                                backends,
                                ..
                            },
                        ..
                    }) => (volume, directories, backends),
                    _ => {
                        tracing::warn!(%peer, "a dial-in worker's first message was not its Hello; closing its link");
                        return;
                    }
                },
                Ok(_) => return, // it went away
                Err(_) => {
                    tracing::warn!(%peer, "a dial-in worker sent no Hello within {HELLO_WAIT:?}; closing its link");
                    return;
                }
            };
            if let Err(refused) = credentials.check_volume(&principal, &volume).await {
                tracing::warn!(%peer, %worker, reason = %refused, "dial-in worker refused");
                let _ = start.send(Err(refusal(&refused)));
                return;
            }
            // What its host can run (the agent it serves is known once assigned).
            registry.backends().joined(backends.clone());
            // Only what the store placed on this volume counts.
            let directories = credentials
                .placed_directories(&volume, directories, &peer)
                .await;
            let holds = directories.len();
            // An older worker names no volume: nothing to aim a deletion at.
            if holds > 0 && !volume.is_empty() {
                let _ = volumes.try_send((volume.clone(), directories.clone()));
            }
            let membership = pool.join(peer.clone(), worker.clone(), volume.clone(), directories);
            tracing::info!(%peer, %worker, idle = pool.idle_count(), directories = holds, "dial-in worker joined the pool");
            let mut assigned = membership.assigned;
            let work = loop {
                tokio::select! {
                    biased;
                    () = revoked.cancelled() => {
                        pool.leave(membership.id);
                        tracing::warn!(%peer, %worker, "idle dial-in link ended: its join credential was revoked");
                        return;
                    }
                    work = &mut assigned => match work {
                        Ok(work) => break work,
                        Err(_) => return,
                    },
                    message = inbound.message() => match message {
                        // Hello and keep-alives while idle.
                        Ok(Some(_)) => {}
                        Ok(None) | Err(_) => {
                            pool.leave(membership.id);
                            tracing::info!(%peer, "idle dial-in worker left the pool");
                            return;
                        }
                    },
                }
            };
            let assignment = match work {
                Work::Serve(assignment) => assignment,
                Work::Delete(deletion) => {
                    // Revoked meanwhile: `done` is dropped, the deletion tried again.
                    tokio::select! {
                        () = revoked.cancelled() => {}
                        () = delete_files(deletion, start, inbound, &peer) => {}
                    }
                    return;
                }
            };
            let agent = assignment.agent;
            // Before its Welcome: the directory it lays out counts on this volume
            // when a worker of it joins again.
            credentials
                .placed(&agent, &assignment.incarnation, &volume)
                .await;
            let attachment = match registry.attach(&agent, &assignment.credential) {
                Ok(attachment) => attachment,
                Err(e) => {
                    // Revoked meanwhile (the agent was stopped): the worker
                    // reconnects and joins again.
                    tracing::info!(%agent, %peer, error = %e, "assignment withdrawn");
                    return;
                }
            };
            let generation = attachment.generation;
            registry.set_credential(&agent, generation, &worker);
            registry.backends().hello(&agent, backends);
            tracing::info!(%agent, generation, %peer, %worker, "dial-in worker assigned");
            let welcome = this.welcome(
                &agent,
                generation,
                Some(DialIn {
                    credential: Credential(assignment.credential),
                    template: template.as_ref().clone(),
                    incarnation: assignment.incarnation,
                }),
            );
            if start.send(Ok((welcome, attachment.commands))).is_err() {
                registry.detach(
                    &agent,
                    generation,
                    Some("its connection closed as it was assigned".into()),
                );
                return;
            }
            link.serve(agent, generation, inbound, revoked).await;
        });
        Ok(commands)
    }
}

/// How long a dial-in worker has to send its Hello after connecting.
const HELLO_WAIT: Duration = Duration::from_secs(10);

/// How long an idle dial-in worker gets to delete a destroyed agent's files (a large
/// workspace takes a while) before its connection is ended and the deletion tried
/// again later.
const DELETE_ANSWER_WAIT: Duration = Duration::from_secs(300);

/// An idle dial-in connection lent for one deletion: the command goes out as the
/// first message, the answer is passed on, and then the stream ends (dropping the
/// command channel's sender) so the worker joins the pool again.
async fn delete_files(
    deletion: Deletion,
    start: tokio::sync::oneshot::Sender<Start>,
    mut inbound: Streaming<WorkerMessage>,
    peer: &str,
) {
    let Deletion {
        agent,
        incarnation,
        done,
        ..
    } = deletion;
    let (_open, commands) = tokio::sync::mpsc::unbounded_channel();
    let command = ControlCommand::DeleteAgentFiles {
        agent: agent.clone(),
        incarnation,
    };
    if start.send(Ok((command, commands))).is_err() {
        return; // `done` dropped: the caller hears the connection ended
    }
    tracing::info!(%agent, %peer, "dial-in worker asked to delete a destroyed agent's files");
    let answer = tokio::time::timeout(DELETE_ANSWER_WAIT, async {
        loop {
            let message = inbound.message().await.ok().flatten()?;
            match Sequenced::try_from(message).map(|s| s.event) {
                Ok(WorkerEvent::AgentFilesDeleted {
                    agent: answered,
                    result,
                }) if answered == agent => return Some(result),
                // Hello, keep-alives.
                _ => continue,
            }
        }
    })
    .await;
    if let Ok(Some(result)) = answer {
        let _ = done.send(result);
    }
}

/// What a Welcome is made of, for a task that outlives the handler's `&self`.
#[derive(Clone)]
struct WelcomeParts {
    /// How often workers send a heartbeat.
    heartbeat_interval: Duration,
    trace_export: Option<TraceExport>,
}

impl WelcomeParts {
    fn welcome(&self, agent: &str, generation: u64, dial_in: Option<DialIn>) -> ControlCommand {
        ControlCommand::Welcome {
            agent: agent.to_string(),
            connection_id: format!("{agent}#{generation}"),
            heartbeat_interval_ms: u32::try_from(self.heartbeat_interval.as_millis())
                .unwrap_or(u32::MAX),
            trace_export: self.trace_export.clone().map(|mut export| {
                export.resource_attributes.insert(
                    crate::telemetry::span_batch::AGENT_ATTRIBUTE.into(),
                    agent.to_string(),
                );
                export
            }),
            dial_in,
        }
    }
}

#[tonic::async_trait]
impl WorkerLink for WorkerLinkService {
    type AttachStream = ControlStream;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let (agent, token) = match identify(&request)? {
            Caller::Agent { agent, credential } => (agent, credential),
            Caller::DialIn { token } => return self.join(&token, request).await.map(Response::new),
        };
        let attachment = self.link.registry.attach(&agent, &token).map_err(|e| {
            tracing::warn!(%agent, error = %e, "worker refused");
            match e {
                AttachError::BadCredential(_) => Status::unauthenticated(e.to_string()),
                AttachError::AlreadyAttached(_) | AttachError::Spent(_) => {
                    Status::failed_precondition(e.to_string())
                }
            }
        })?;
        let generation = attachment.generation;
        tracing::info!(%agent, generation, "worker attached");
        let welcome = self.welcome.welcome(&agent, generation, None);
        let commands = futures::stream::once(async move { welcome })
            .chain(UnboundedReceiverStream::new(attachment.commands));
        let inbound = request.into_inner();
        let link = self.link.clone();
        // A worker launched here has no join credential to revoke.
        self.link.connections.spawn(async move {
            link.serve(agent, generation, inbound, CancellationToken::new())
                .await
        });
        Ok(Response::new(outbound(commands)))
    }
}

/// What the task that reads one worker's connection works with.
#[derive(Clone)]
struct Link {
    registry: Arc<Registry>,
    runs: Arc<Runs>,
    gate: Arc<ToolGate>,
    jobs: Arc<JobLog>,
    summaries: Arc<WorkerSummarizer>,
    /// Scrubbed from every event as it arrives.
    secrets: KnownSecrets,
    /// Connection tasks and the tool checks they start (shutdown waits for them).
    connections: TaskTracker,
    /// A worker silent this long is hung: its connection is ended, and its
    /// supervisor then kills and restarts it.
    silence_limit: Duration,
}

impl Link {
    /// Reads the worker's events until its stream ends, it goes silent or its join
    /// credential is `revoked`, then detaches it (its supervisor hears of it).
    async fn serve(
        self,
        agent: String,
        generation: u64,
        mut inbound: Streaming<WorkerMessage>,
        revoked: CancellationToken,
    ) {
        let Link {
            registry,
            runs,
            gate,
            jobs,
            summaries,
            secrets,
            connections: checks,
            silence_limit,
        } = self;
        runs.deliver_pending(&agent).await;
        let mut rate = WorkerRate::new(RateLimits::default(), Instant::now());
        let mut throttled = false;
        let hung = loop {
            let next = tokio::select! {
                biased;
                () = revoked.cancelled() => {
                    tracing::warn!(%agent, generation, "the worker's join credential was revoked; its link ends now");
                    break Some("was cut off: its join credential was revoked".to_string());
                }
                next = tokio::time::timeout(silence_limit, inbound.message()) => next,
            };
            let message = match next {
                Ok(Ok(Some(message))) => message,
                Ok(Ok(None)) => break None,
                Ok(Err(status)) => {
                    // A worker that stops with us (Ctrl-C reaches its process group
                    // too) or dies just closes its end: no error of anyone's.
                    if closed_by_peer(&status) {
                        tracing::debug!(%agent, generation, %status, "the worker closed its link");
                    } else {
                        tracing::info!(%agent, generation, %status, "worker stream ended");
                    }
                    break None;
                }
                Err(_) => {
                    tracing::warn!(%agent, generation, ?silence_limit, "worker sent nothing, not even a heartbeat; treating it as hung");
                    break Some(format!(
                        "stopped responding (no heartbeat for {:.1} s)",
                        silence_limit.as_secs_f64()
                    ));
                }
            };
            // A flood is read no faster than the rate: the worker's sends wait
            // (flow control), nothing piles up here.
            let len = chorus_proto::limits::encoded_len(&message);
            match rate.admit(Instant::now(), len) {
                Some(wait) => {
                    if !throttled {
                        tracing::warn!(%agent, generation, ?wait, "worker reports faster than the allowed rate; slowing it down");
                    }
                    throttled = true;
                    tokio::time::sleep(wait).await;
                }
                None => throttled = false,
            }
            let Sequenced { seq, event } = match Sequenced::try_from(message) {
                Ok(sequenced) => sequenced,
                Err(e) => {
                    tracing::warn!(%agent, generation, error = %e, "malformed message from worker");
                    continue;
                }
            };
            if let WorkerEvent::Hello {
                worker_version,
                pid,
                backends,
                ..
            } = &event
            {
                tracing::info!(%agent, generation, %worker_version, pid, "worker ready");
                registry.backends().hello(&agent, backends.clone());
            }
            if let WorkerEvent::ToolCheck {
                request_id,
                run_id,
                call,
                trace_context,
            } = event
            {
                let check = Check {
                    agent: agent.clone(),
                    generation,
                    request_id,
                    run_id,
                    call,
                    trace_context,
                };
                gate.handle(check, &checks);
                continue;
            }
            match secrets.scrub_event(event) {
                event @ (WorkerEvent::JobStarted(_) | WorkerEvent::JobEnded { .. }) => {
                    jobs.apply(&agent, generation, event).await
                }
                WorkerEvent::Summary { request_id, result } => {
                    summaries.answered(request_id, result)
                }
                WorkerEvent::McpServerState {
                    server,
                    state,
                    tools,
                    offered,
                    error,
                    ..
                } => registry
                    .mcp()
                    .report(&agent, &server, state, tools, offered, error),
                event => match runs.apply(&agent, generation, seq, event).await {
                    Err(e) if e.is_suspicious() => {
                        tracing::warn!(%agent, generation, error = %e, "worker event refused")
                    }
                    Err(e) => {
                        tracing::debug!(%agent, generation, error = %e, "worker event dropped")
                    }
                    Ok(()) => {}
                },
            }
        };
        registry.detach(&agent, generation, hung);
        registry.mcp().worker_gone(&agent);
        jobs.worker_gone(&agent, generation).await;
        tracing::info!(%agent, generation, "worker detached");
    }
}

/// Whether a link ended because the peer closed its connection (a broken pipe, a
/// reset, an unexpected end), found anywhere in the error's chain of causes.
fn closed_by_peer(status: &tonic::Status) -> bool {
    use std::io::ErrorKind;
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(status);
    while let Some(error) = cause {
        if let Some(io) = error.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                ErrorKind::BrokenPipe
                    | ErrorKind::ConnectionReset
                    | ErrorKind::ConnectionAborted
                    | ErrorKind::UnexpectedEof
            )
        {
            return true;
        }
        cause = error.source();
    }
    false
}

#[cfg(test)]
mod peer_tests {
    #[test]
    fn a_peer_closing_its_end_is_told_from_a_real_error() {
        use std::io::{Error, ErrorKind};
        let closed = tonic::Status::from_error(Box::new(Error::new(
            ErrorKind::BrokenPipe,
            "stream closed because of a broken pipe",
        )));
        assert!(super::closed_by_peer(&closed));
        let reset = tonic::Status::from_error(Box::new(Error::from(ErrorKind::ConnectionReset)));
        assert!(super::closed_by_peer(&reset));
        assert!(!super::closed_by_peer(&tonic::Status::internal(
            "decode failed"
        )));
        let other = tonic::Status::from_error(Box::new(Error::from(ErrorKind::PermissionDenied)));
        assert!(!super::closed_by_peer(&other));
    }
}
