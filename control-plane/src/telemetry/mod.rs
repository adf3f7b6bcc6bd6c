//! Logging and tracing set-up. `RUST_LOG` selects what is logged (default `info`).
//!
//! With an OTLP endpoint in the environment (`config`), the same spans are exported
//! to an OpenTelemetry collector as well: the SDK batches them on its own thread and
//! hands each batch to the [`Collector`](collector::Collector) task, which sends it
//! (gRPC or HTTP/protobuf) without ever making a run wait. Without an endpoint no
//! exporter starts and nothing else changes.
//!
//! Workers' spans (`relay`; `span_batch`: the pure passes over a batch; `run_traces`:
//! the traces each agent's workers were given): a batch is bounded (1,000 spans/s per
//! agent, 5,000 at once; the rest dropped and counted), scrubbed in every string (a full
//! destructuring of each OTLP message and one walk over `AnyValue`), and each span keeps
//! its trace id only if it is one of its agent's runs', else it is re-rooted by a keyed
//! hash; the contexts a worker hands the gate or the model relay pass the same check.
//! `gateway_watch` hands serenity's failed-gateway lines to the Discord front end
//! instead of the log.
//!
//! One thread run is one trace across both processes. With export on, `Welcome`'s
//! `trace_export` names the worker's service (`<service>-worker`) and the control
//! plane's resource attributes, and the relay labels each batch with the agent of the
//! credential that sent it (`chorus.agent`); without it the worker's sampler drops
//! everything. `AssignRun.trace_context` carries the `traceparent` of the control
//! plane's `run` span, which the worker's `run` span continues; a worker's model
//! request carries its `llm_call` span's, which the relay's `llm_relay` span
//! continues. A worker never learns where the collector is or its key.

pub mod collector;
pub mod config;
pub mod gateway_watch;
pub mod json_log;
pub mod relay;
pub mod run_traces;
pub mod span_batch;

use std::collections::HashMap;
use std::io::IsTerminal;
use std::time::Duration;

pub use opentelemetry::KeyValue;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanData, SpanExporter};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use collector::Collector;

/// The W3C trace context (`traceparent`, `tracestate`) of `span`, for a worker
/// to continue its trace; empty when nothing is exported.
pub fn context_of(span: &tracing::Span) -> HashMap<String, String> {
    use opentelemetry::propagation::TextMapPropagator;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let mut carrier = HashMap::new();
    opentelemetry_sdk::propagation::TraceContextPropagator::new()
        .inject_context(&span.context(), &mut carrier);
    carrier
}

/// A request's W3C trace context headers (`traceparent`, `tracestate`).
pub fn trace_headers(headers: &axum::http::HeaderMap) -> HashMap<String, String> {
    ["traceparent", "tracestate"]
        .iter()
        .filter_map(|name| {
            let value = headers.get(*name)?.to_str().ok()?;
            Some((name.to_string(), value.to_string()))
        })
        .collect()
}

/// Makes `span` a child of the trace a W3C trace context names (a worker's, with
/// its tool check); nothing happens for an empty or unreadable one.
pub fn continue_trace(span: &tracing::Span, carrier: &HashMap<String, String>) {
    use opentelemetry::propagation::TextMapPropagator;
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    if carrier.is_empty() {
        return;
    }
    let cx = opentelemetry_sdk::propagation::TraceContextPropagator::new().extract(carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// Labels `span` with the agent and thread it belongs to (`chorus.agent`,
/// `chorus.thread_id`), and any further attributes.
pub fn label(span: &tracing::Span, agent: &str, thread: Option<u64>, more: Vec<KeyValue>) {
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    span.set_attribute("chorus.agent", agent.to_string());
    if let Some(thread) = thread {
        span.set_attribute(
            "chorus.thread_id",
            i64::try_from(thread).unwrap_or(i64::MAX),
        );
    }
    for kv in more {
        span.set_attribute(kv.key, kv.value);
    }
}

/// The service name spans carry unless `OTEL_SERVICE_NAME` says otherwise.
pub const SERVICE_NAME: &str = "chorus";

/// What was set up; [`Telemetry::shutdown`] sends what is still buffered.
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
    collector: Option<Collector>,
}

impl Telemetry {
    /// Where exported spans go (workers' batches are forwarded to it too).
    pub fn collector(&self) -> Option<&Collector> {
        self.collector.as_ref()
    }

    /// Ends export: the SDK's buffer is handed over, and the queue sent (at most
    /// `limit` is spent waiting for the collector).
    pub async fn shutdown(self, limit: Duration) {
        if let Some(provider) = self.provider {
            let _ = tokio::task::spawn_blocking(move || provider.shutdown()).await;
        }
        if let Some(collector) = self.collector {
            collector.flush(limit).await;
        }
    }
}

/// Hands the SDK's batches to the collector task (the SDK calls this on its own
/// thread, outside the async runtime: it must not do I/O itself).
#[derive(Debug)]
struct Exporter {
    collector: Collector,
    resource: ResourceAttributesWithSchema,
}

impl SpanExporter for Exporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        self.collector.send(ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        });
        Ok(())
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

/// The layer that writes log lines on stderr in `format`.
fn log_layer<S>(format: json_log::LogFormat, exporting: bool) -> Box<dyn Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
{
    match format {
        json_log::LogFormat::Text => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_ansi(std::io::stderr().is_terminal())
            .boxed(),
        json_log::LogFormat::Json => tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(json_log::JsonLines {
                with_trace_ids: exporting,
            })
            .boxed(),
    }
}

/// Installs the global subscriber: log lines on stderr (for people, or JSON), and
/// OTLP export when the environment asks for it (an error names a wrong variable).
/// Must run inside the tokio runtime.
pub fn init(format: json_log::LogFormat) -> Result<Telemetry, String> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let settings = config::from_env(|name| std::env::var(name).ok())?;
    let Some(settings) = settings else {
        let _ = tracing_subscriber::registry()
            .with(filter)
            .with(log_layer(format, false).with_filter(gateway_watch::TakeGatewayFailures))
            .try_init();
        return Ok(Telemetry {
            provider: None,
            collector: None,
        });
    };
    let endpoint = settings.endpoint.clone();
    let protocol = settings.protocol;
    let collector = Collector::start(settings)?;
    let mut resource = Resource::builder();
    if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
        resource = resource.with_service_name(SERVICE_NAME);
    }
    let resource = resource.build();
    let exporter = Exporter {
        collector: collector.clone(),
        resource: (&resource).into(),
    };
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_batch_exporter(exporter)
        .build();
    let tracer = provider.tracer("chorus");
    let _ = tracing_subscriber::registry()
        .with(filter)
        // A `step` span mirrors a worker's step for the log; the worker's own span
        // of it (`llm_call`, `tool`) is the one in the trace.
        .with(
            tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
                    meta.name() != "step"
                })),
        )
        .with(log_layer(format, true).with_filter(gateway_watch::TakeGatewayFailures))
        .try_init();
    tracing::info!(%endpoint, ?protocol, "exporting traces over OTLP");
    Ok(Telemetry {
        provider: Some(provider),
        collector: Some(collector),
    })
}
