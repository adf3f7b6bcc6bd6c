//! Workers' spans come in here: an OTLP `TraceService` on the worker link's
//! address, open only to a connected worker's credential. Each batch is bounded
//! by the agent's span budget (a token bucket; the rest is dropped and counted),
//! has every known secret scrubbed from every string, every span put in a trace
//! the agent's worker was given (or one of its own: `run_traces`), and is labelled
//! with the agent whose credential sent it (a worker cannot pass its spans off as
//! another agent's); then it is queued for the collector like the control plane's
//! own.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::{Request, Response, Status};

use super::collector::Collector;
use super::run_traces::RunTraces;
use super::span_batch;
use crate::metrics::SpanDrop;
use crate::secrets::{KnownSecrets, bearer_token};
use crate::token_bucket::TokenBucket;
use crate::workers::registry::Registry;

/// Spans one agent's worker may send per second, and at once after a quiet
/// spell. A busy agent sends some hundreds a second (a run, its model calls and
/// tools); a worker's exporter hands over at most 2,048 at a time.
pub const SPANS_PER_SEC: f64 = 1_000.0;
pub const SPAN_BURST: f64 = 5_000.0;

pub struct TraceRelay {
    registry: Arc<Registry>,
    collector: Collector,
    secrets: KnownSecrets,
    traces: Arc<RunTraces>,
    /// Per agent: a worker's budget outlives its connection (a restarted worker
    /// does not get a fresh one).
    budgets: Mutex<HashMap<String, TokenBucket>>,
}

impl TraceRelay {
    pub fn server(
        registry: Arc<Registry>,
        collector: Collector,
        secrets: KnownSecrets,
        traces: Arc<RunTraces>,
    ) -> TraceServiceServer<TraceRelay> {
        TraceServiceServer::new(TraceRelay {
            registry,
            collector,
            secrets,
            traces,
            budgets: Mutex::new(HashMap::new()),
        })
    }

    /// How many of `spans` the agent may send now.
    fn admit(&self, agent: &str, spans: u64) -> u64 {
        let now = Instant::now();
        let mut budgets = self
            .budgets
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        budgets
            .entry(agent.to_string())
            .or_insert_with(|| TokenBucket::full(SPANS_PER_SEC, SPAN_BURST, now))
            .take_up_to(spans, now)
    }
}

#[tonic::async_trait]
impl TraceService for TraceRelay {
    async fn export(
        &self,
        request: Request<ExportTraceServiceRequest>,
    ) -> Result<Response<ExportTraceServiceResponse>, Status> {
        let agent = request
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(bearer_token)
            .and_then(|token| self.registry.agent_for_credential(token))
            .ok_or_else(|| {
                Status::unauthenticated("spans are taken from connected workers only")
            })?;
        let mut batch = request.into_inner();
        // Bounded first, so a flood costs no more than counting it.
        let sent = span_batch::span_count(&batch);
        let admitted = self.admit(&agent, sent);
        if admitted < sent {
            span_batch::keep_first(&mut batch, admitted);
            crate::metrics::spans_dropped(SpanDrop::OverBudget, sent - admitted);
        }
        span_batch::scrub(&mut batch, &self.secrets);
        span_batch::admit_traces(&mut batch, &agent, &self.traces);
        span_batch::label(&mut batch, &agent);
        self.collector.send(batch);
        // What was dropped is not the worker's to retry: OTLP's partial success
        // would only invite it to send again.
        Ok(Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}
