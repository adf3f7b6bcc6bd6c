//! The gRPC service workers attach to. One of the two modules that see generated
//! protocol types (the other is the worker's connection module): it authenticates the
//! worker, converts wire messages to domain types and back, and ends a connection that
//! has gone silent (a hung worker). Everything else happens behind domain types.

use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use chorus_proto::AGENT_METADATA_KEY;
use chorus_proto::domain::{ControlCommand, Sequenced, TraceExport, WorkerEvent};
use chorus_proto::limits::MAX_LINK_MESSAGE_BYTES;
use chorus_proto::wire::{ControlMessage, WorkerLink, WorkerLinkServer, WorkerMessage};
use futures::{Stream, StreamExt};
use tokio_stream::wrappers::UnboundedReceiverStream;
use tokio_util::task::TaskTracker;
use tonic::{Request, Response, Status, Streaming};

use crate::agents::name;
use crate::config::WorkerSettings;
use crate::gate::{Check, ToolGate};
use crate::reports::{RateLimits, WorkerRate};
use crate::runs::Runs;
use crate::secrets::{KnownSecrets, bearer_token};
use crate::summaries::WorkerSummarizer;
use crate::tasks::TaskLog;
use crate::workers::registry::{AttachError, Registry};

/// What a worker's events are handed to.
pub struct LinkServices {
    pub registry: Arc<Registry>,
    pub runs: Arc<Runs>,
    pub gate: Arc<ToolGate>,
    pub tasks: Arc<TaskLog>,
    pub summaries: Arc<WorkerSummarizer>,
}

pub struct WorkerLinkService {
    registry: Arc<Registry>,
    runs: Arc<Runs>,
    gate: Arc<ToolGate>,
    tasks: Arc<TaskLog>,
    summaries: Arc<WorkerSummarizer>,
    /// Scrubbed from every event as it arrives.
    secrets: KnownSecrets,
    connections: TaskTracker,
    /// How often workers send a heartbeat.
    heartbeat_interval: Duration,
    /// A worker silent this long is hung: its connection is ended, and its
    /// supervisor then kills and restarts it.
    silence_limit: Duration,
    trace_export: Option<TraceExport>,
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
            tasks,
            summaries,
        } = services;
        WorkerLinkService {
            registry,
            runs,
            gate,
            tasks,
            summaries,
            secrets,
            connections,
            heartbeat_interval: workers.heartbeat_interval,
            silence_limit: workers.silence_limit(),
            trace_export: None,
        }
    }

    /// Workers are told to export their spans (through this control plane),
    /// labelled with `export`'s resource and their agent.
    pub fn with_trace_export(mut self, export: Option<TraceExport>) -> Self {
        self.trace_export = export;
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

/// Reads who the caller claims to be and the credential it presents.
fn identify<T>(request: &Request<T>) -> Result<(String, String), Status> {
    let metadata = request.metadata();
    let agent = metadata
        .get(AGENT_METADATA_KEY)
        .and_then(|v| v.to_str().ok())
        .ok_or_else(|| Status::unauthenticated(format!("missing {AGENT_METADATA_KEY} metadata")))?;
    name::validate(agent).map_err(|e| Status::invalid_argument(e.to_string()))?;
    let token = metadata
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .ok_or_else(|| Status::unauthenticated("missing bearer credential"))?;
    Ok((agent.to_string(), token.to_string()))
}

type ControlStream = Pin<Box<dyn Stream<Item = Result<ControlMessage, Status>> + Send>>;

#[tonic::async_trait]
impl WorkerLink for WorkerLinkService {
    type AttachStream = ControlStream;

    async fn attach(
        &self,
        request: Request<Streaming<WorkerMessage>>,
    ) -> Result<Response<Self::AttachStream>, Status> {
        let (agent, token) = identify(&request)?;
        let attachment = self.registry.attach(&agent, &token).map_err(|e| {
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

        let welcome = ControlCommand::Welcome {
            agent: agent.clone(),
            connection_id: format!("{agent}#{generation}"),
            heartbeat_interval_ms: u32::try_from(self.heartbeat_interval.as_millis())
                .unwrap_or(u32::MAX),
            trace_export: self.trace_export.clone().map(|mut export| {
                export.resource_attributes.insert(
                    crate::telemetry::relay::AGENT_ATTRIBUTE.into(),
                    agent.clone(),
                );
                export
            }),
        };
        let outbound = futures::stream::once(async move { welcome })
            .chain(UnboundedReceiverStream::new(attachment.commands))
            .filter_map(move |command| {
                let message = ControlMessage::from(command);
                // Commands are bounded where they are made (a run's assignment is
                // checked when it is built); one over the limit would end the
                // stream of every run of this agent, so it is never sent.
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
            });

        let mut inbound = request.into_inner();
        let registry = self.registry.clone();
        let runs = self.runs.clone();
        let gate = self.gate.clone();
        let tasks = self.tasks.clone();
        let summaries = self.summaries.clone();
        let secrets = self.secrets.clone();
        let checks = self.connections.clone();
        let silence_limit = self.silence_limit;
        self.connections.spawn(async move {
            runs.deliver_pending(&agent).await;
            let mut rate = WorkerRate::new(RateLimits::default(), Instant::now());
            let mut throttled = false;
            let hung = loop {
                let message = match tokio::time::timeout(silence_limit, inbound.message()).await {
                    Ok(Ok(Some(message))) => message,
                    Ok(Ok(None)) => break None,
                    Ok(Err(status)) => {
                        tracing::info!(%agent, generation, %status, "worker stream ended");
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
                if let WorkerEvent::Hello { worker_version, pid } = &event {
                    tracing::info!(%agent, generation, %worker_version, pid, "worker ready");
                }
                if let WorkerEvent::ToolCheck { request_id, run_id, call, trace_context } = event {
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
                    event @ (WorkerEvent::TaskStarted(_) | WorkerEvent::TaskEnded { .. }) => {
                        tasks.apply(&agent, generation, event).await
                    }
                    WorkerEvent::Summary { request_id, result } => {
                        summaries.answered(request_id, result)
                    }
                    event => {
                        if let Err(e) = runs.apply(&agent, generation, seq, event).await {
                            tracing::warn!(%agent, generation, error = %e, "worker event refused");
                        }
                    }
                }
            };
            registry.detach(&agent, generation, hung);
            tasks.worker_gone(&agent, generation).await;
            tracing::info!(%agent, generation, "worker detached");
        });
        Ok(Response::new(Box::pin(outbound)))
    }
}
