//! Sends OTLP trace batches to the collector: the control plane's own spans and the
//! batches its workers hand it. One task owns the connection and sends in order;
//! callers only queue (`try_send` on a bounded queue), so a slow or unreachable
//! collector never blocks a run: what does not fit is dropped, counted, and said
//! once in the log.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use prost::Message;
use tokio::sync::mpsc;

use super::config::{ExportSettings, Protocol};
use super::span_batch::span_count;

/// Batches waiting to be sent; past this, new ones are dropped.
const QUEUE_BATCHES: usize = 256;

/// Counts dropped spans (`chorus_trace_spans_dropped_total`) and says so in the
/// log the first time.
#[derive(Debug, Default)]
struct Dropped {
    logged: AtomicBool,
}

impl Dropped {
    fn add(&self, spans: u64, why: &str) {
        crate::metrics::spans_dropped(crate::metrics::SpanDrop::Export, spans);
        if !self.logged.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                spans,
                "trace spans dropped: {why}; runs go on unaffected (this is logged once)"
            );
        }
    }
}

/// A handle to the sending task; cheap to clone.
#[derive(Debug, Clone)]
pub struct Collector {
    queue: mpsc::Sender<ExportTraceServiceRequest>,
    dropped: Arc<Dropped>,
    /// Closed by the task when the queue is empty and closed (at shutdown).
    idle: Arc<tokio::sync::Notify>,
}

impl Collector {
    /// Starts the sending task (on the current tokio runtime).
    pub fn start(settings: ExportSettings) -> Result<Collector, String> {
        let sender = Sender::new(&settings)?;
        let (queue, mut batches) = mpsc::channel::<ExportTraceServiceRequest>(QUEUE_BATCHES);
        let dropped = Arc::new(Dropped::default());
        let idle = Arc::new(tokio::sync::Notify::new());
        let (task_dropped, task_idle) = (dropped.clone(), idle.clone());
        tokio::spawn(async move {
            while let Some(batch) = batches.recv().await {
                let spans = span_count(&batch);
                if let Err(why) = sender.send(batch).await {
                    task_dropped.add(spans, &why);
                }
                if batches.is_empty() {
                    task_idle.notify_waiters();
                }
            }
            task_idle.notify_waiters();
        });
        Ok(Collector {
            queue,
            dropped,
            idle,
        })
    }

    /// Queues a batch; never waits.
    pub fn send(&self, batch: ExportTraceServiceRequest) {
        let spans = span_count(&batch);
        if spans == 0 {
            return;
        }
        if let Err(e) = self.queue.try_send(batch) {
            let why = match e {
                mpsc::error::TrySendError::Full(_) => {
                    "the collector does not keep up (the export queue is full)"
                }
                mpsc::error::TrySendError::Closed(_) => "the exporter has stopped",
            };
            self.dropped.add(spans, why);
        }
    }

    /// Waits (at most `limit`) until what is queued now is sent.
    pub async fn flush(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let idle = self.idle.notified();
            tokio::pin!(idle);
            idle.as_mut().enable();
            if self.queue.capacity() == self.queue.max_capacity() {
                // Nothing queued; one batch may still be in flight: give it its wait.
                let _ = tokio::time::timeout_at(deadline, idle).await;
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }
}

/// How a batch reaches the collector.
enum Sender {
    Grpc {
        client: TraceServiceClient<tonic::transport::Channel>,
        headers: tonic::metadata::MetadataMap,
        timeout: Duration,
    },
    Http {
        client: reqwest::Client,
        endpoint: String,
        headers: reqwest::header::HeaderMap,
    },
}

impl Sender {
    fn new(settings: &ExportSettings) -> Result<Sender, String> {
        match settings.protocol {
            Protocol::Grpc => {
                let channel = tonic::transport::Endpoint::from_shared(settings.endpoint.clone())
                    .map_err(|e| {
                        format!("the OTLP endpoint {} is not valid: {e}", settings.endpoint)
                    })?
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(settings.timeout)
                    .connect_lazy();
                let mut headers = tonic::metadata::MetadataMap::new();
                for (key, value) in &settings.headers {
                    let key = tonic::metadata::MetadataKey::from_bytes(key.as_bytes())
                        .map_err(|_| format!("'{key}' cannot be a gRPC header name"))?;
                    let value = value
                        .parse()
                        .map_err(|_| format!("the value of header '{key}' cannot be sent"))?;
                    headers.insert(key, value);
                }
                Ok(Sender::Grpc {
                    client: TraceServiceClient::new(channel),
                    headers,
                    timeout: settings.timeout,
                })
            }
            Protocol::HttpProtobuf => {
                let mut headers = reqwest::header::HeaderMap::new();
                for (key, value) in &settings.headers {
                    let name = reqwest::header::HeaderName::from_bytes(key.as_bytes())
                        .map_err(|_| format!("'{key}' cannot be an HTTP header name"))?;
                    let value = reqwest::header::HeaderValue::from_str(value)
                        .map_err(|_| format!("the value of header '{key}' cannot be sent"))?;
                    headers.insert(name, value);
                }
                let client = reqwest::Client::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .timeout(settings.timeout)
                    .build()
                    .map_err(|e| format!("cannot build the OTLP HTTP client: {e}"))?;
                Ok(Sender::Http {
                    client,
                    endpoint: settings.endpoint.clone(),
                    headers,
                })
            }
        }
    }

    async fn send(&self, batch: ExportTraceServiceRequest) -> Result<(), String> {
        match self {
            Sender::Grpc {
                client,
                headers,
                timeout,
            } => {
                let mut request = tonic::Request::new(batch);
                *request.metadata_mut() = headers.clone();
                request.set_timeout(*timeout);
                client
                    .clone()
                    .export(request)
                    .await
                    .map(drop)
                    .map_err(|status| {
                        format!(
                            "the collector refused or could not be reached: {}",
                            status.message()
                        )
                    })
            }
            Sender::Http {
                client,
                endpoint,
                headers,
            } => {
                let response = client
                    .post(endpoint)
                    .headers(headers.clone())
                    .header("content-type", "application/x-protobuf")
                    .body(batch.encode_to_vec())
                    .send()
                    .await
                    .map_err(|e| format!("the collector could not be reached: {e}"))?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(format!("the collector answered {}", response.status()))
                }
            }
        }
    }
}
