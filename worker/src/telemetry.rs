//! The worker's logging and trace export. Log lines go to stderr (which the control
//! plane passes on into its own log). Spans are exported only when the control
//! plane's Welcome says so (`TraceExport`): the worker's environment never holds a
//! collector's address or key. Its spans then go to the control plane's OTLP
//! `TraceService`, on the link's own address and with the worker's credential, and
//! the control plane forwards them.
//!
//! The OpenTelemetry layer is installed from the start (a global subscriber cannot
//! be swapped later), behind a sampler that drops everything until export is
//! switched on, and an exporter whose destination is set at that moment.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use chorus_proto::AGENT_METADATA_KEY;
use chorus_proto::domain::TraceExport;
use opentelemetry::trace::{Link, SpanKind, TraceContextExt, TraceId, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SamplingDecision, SamplingResult, SdkTracerProvider,
    ShouldSample, SpanData, SpanExporter,
};
use tokio::sync::mpsc;
use tonic::metadata::MetadataValue;
use tonic::transport::Channel;
use tracing_subscriber::Layer;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Makes `span` a child of the trace the control plane passed (W3C trace
/// context); nothing happens for an empty or unreadable one.
pub fn continue_trace(span: &tracing::Span, carrier: &std::collections::HashMap<String, String>) {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if carrier.is_empty() {
        return;
    }
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// The W3C trace context of the current span (`traceparent`), for a request to
/// the control plane's model relay; empty when nothing is exported.
pub fn current_context() -> std::collections::HashMap<String, String> {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let mut carrier = std::collections::HashMap::new();
    let cx = tracing::Span::current().context();
    if cx.span().span_context().is_sampled() {
        opentelemetry_sdk::propagation::TraceContextPropagator::new()
            .inject_context(&cx, &mut carrier);
    }
    carrier
}

tokio::task_local! {
    /// The agent and thread of the run a task works for.
    static RUN: (String, u64);
}

/// Runs `work` as part of the run of `agent`'s `thread`: the spans it opens are
/// labelled with both (see [`label`]).
pub async fn in_run<F: std::future::Future>(agent: String, thread: u64, work: F) -> F::Output {
    RUN.scope((agent, thread), work).await
}

/// Labels `span` with the agent and thread of the run it belongs to
/// (`chorus.agent`, `chorus.thread_id`) and the attributes given.
pub fn label(span: &tracing::Span, more: Vec<KeyValue>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let _ = RUN.try_with(|(agent, thread)| {
        span.set_attribute("chorus.agent", agent.clone());
        span.set_attribute(
            "chorus.thread_id",
            i64::try_from(*thread).unwrap_or(i64::MAX),
        );
    });
    for kv in more {
        span.set_attribute(kv.key, kv.value);
    }
}

/// Adds an event (a retry, an error) to `span`.
pub fn event(span: &tracing::Span, name: &'static str, attributes: Vec<KeyValue>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.add_event(name, attributes);
}

/// Whether model calls' messages go on their spans (the control plane's
/// `[telemetry] record_content`, told at Welcome).
static RECORD_CONTENT: AtomicBool = AtomicBool::new(false);

pub fn record_content() -> bool {
    RECORD_CONTENT.load(Ordering::Relaxed)
}

/// Batches waiting for the control plane; past this, new ones are dropped.
const QUEUE_BATCHES: usize = 64;

/// Samples nothing until export is on; then follows the parent (the control
/// plane's run), and samples roots.
#[derive(Debug, Clone)]
struct Switch(Arc<AtomicBool>);

impl ShouldSample for Switch {
    fn should_sample(
        &self,
        parent_context: Option<&Context>,
        _trace_id: TraceId,
        _name: &str,
        _span_kind: &SpanKind,
        _attributes: &[KeyValue],
        _links: &[Link],
    ) -> SamplingResult {
        let parent = parent_context
            .map(|cx| cx.span().span_context().clone())
            .filter(opentelemetry::trace::SpanContext::is_valid);
        let decision = match (self.0.load(Ordering::Relaxed), &parent) {
            (false, _) => SamplingDecision::Drop,
            (true, Some(parent)) if !parent.is_sampled() => SamplingDecision::Drop,
            (true, _) => SamplingDecision::RecordAndSample,
        };
        SamplingResult {
            decision,
            attributes: Vec::new(),
            trace_state: parent.map(|p| p.trace_state().clone()).unwrap_or_default(),
        }
    }
}

/// Where batches go once export is on.
#[derive(Debug)]
struct Sink {
    queue: mpsc::Sender<ExportTraceServiceRequest>,
    resource: ResourceAttributesWithSchema,
}

#[derive(Debug, Clone)]
struct Exporter(Arc<OnceLock<Sink>>);

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        // Called on the SDK's own thread: only queue, never wait.
        if let Some(sink) = self.0.get() {
            let request = ExportTraceServiceRequest {
                resource_spans: group_spans_by_resource_and_scope(batch, &sink.resource),
            };
            if sink.queue.try_send(request).is_err() {
                dropped_once("the control plane does not keep up with this worker's spans");
            }
        }
        Ok(())
    }
}

fn dropped_once(why: &str) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if !SAID.swap(true, Ordering::Relaxed) {
        tracing::warn!("trace spans dropped: {why} (said once)");
    }
}

/// Turns export on when the control plane asks for it.
pub struct Telemetry {
    switch: Arc<AtomicBool>,
    sink: Arc<OnceLock<Sink>>,
    provider: SdkTracerProvider,
}

/// How often the worker hands finished spans over (the SDK's default is 5 s).
const EXPORT_EVERY: Duration = Duration::from_millis(500);

/// The layer that writes log lines on stderr: for people, or one JSON object per
/// line (tracing's JSON format, event fields at the top, with the span list).
fn log_layer<S>(json: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    if json {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(true)
            .with_writer(std::io::stderr)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed()
    }
}

/// Installs the global subscriber; export stays off until [`Telemetry::export`].
pub fn init(json_logs: bool) -> Telemetry {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let switch = Arc::new(AtomicBool::new(false));
    let sink = Arc::new(OnceLock::new());
    let provider = SdkTracerProvider::builder()
        .with_sampler(Switch(switch.clone()))
        .with_span_processor(
            BatchSpanProcessor::builder(Exporter(sink.clone()))
                .with_batch_config(
                    BatchConfigBuilder::default()
                        .with_scheduled_delay(EXPORT_EVERY)
                        .build(),
                )
                .build(),
        )
        .build();
    // The `worker` span lasts as long as the process: it labels log lines with the
    // agent, and is never a span of a trace (runs hang off the control plane's).
    let otel = tracing_opentelemetry::layer()
        .with_tracer(provider.tracer("chorus-worker"))
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.name() != "worker"
        }));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(otel)
        .with(log_layer(json_logs))
        .try_init();
    Telemetry {
        switch,
        sink,
        provider,
    }
}

impl Telemetry {
    /// Starts sending spans to the control plane on `channel`, labelled with
    /// `export`'s resource.
    pub fn export(&self, channel: Channel, agent: &str, credential: &str, export: &TraceExport) {
        let (queue, mut batches) = mpsc::channel::<ExportTraceServiceRequest>(QUEUE_BATCHES);
        let resource = Resource::builder_empty()
            .with_service_name(export.service_name.clone())
            .with_attributes(
                export
                    .resource_attributes
                    .iter()
                    .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
            )
            .build();
        if self
            .sink
            .set(Sink {
                queue,
                resource: (&resource).into(),
            })
            .is_err()
        {
            return; // on already (a reconnect)
        }
        let bearer: Option<MetadataValue<_>> = format!("Bearer {credential}").parse().ok();
        let agent_value: Option<MetadataValue<_>> = agent.parse().ok();
        let mut client = TraceServiceClient::new(channel);
        tokio::spawn(async move {
            while let Some(batch) = batches.recv().await {
                let mut request = tonic::Request::new(batch);
                request.set_timeout(Duration::from_secs(10));
                if let (Some(bearer), Some(agent)) = (&bearer, &agent_value) {
                    request
                        .metadata_mut()
                        .insert("authorization", bearer.clone());
                    request
                        .metadata_mut()
                        .insert(AGENT_METADATA_KEY, agent.clone());
                }
                if let Err(status) = client.export(request).await {
                    dropped_once(&format!(
                        "the control plane did not take them: {}",
                        status.message()
                    ));
                }
            }
        });
        RECORD_CONTENT.store(export.record_content, Ordering::Relaxed);
        self.switch.store(true, Ordering::Relaxed);
        tracing::debug!("exporting spans through the control plane");
    }

    /// Hands over what is buffered and waits (at most `limit`) until it is sent.
    pub async fn shutdown(&self, limit: Duration) {
        if !self.switch.load(Ordering::Relaxed) {
            return;
        }
        let provider = self.provider.clone();
        let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        let Some(sink) = self.sink.get() else { return };
        let deadline = tokio::time::Instant::now() + limit;
        // The queue's sender is ours: it is empty when all its permits are back.
        while sink.queue.capacity() < sink.queue.max_capacity()
            && tokio::time::Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
