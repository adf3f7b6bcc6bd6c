//! An OpenTelemetry collector for tests: it speaks real OTLP (the official
//! protobuf definitions, as `opentelemetry-proto` generates them) over gRPC and
//! over HTTP/protobuf (`POST /v1/traces`), on 127.0.0.1, and keeps every span it
//! receives in a form tests can read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use prost::Message;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    pub name: String,
    /// The resource's `service.name`.
    pub service: String,
    pub attributes: HashMap<String, Value>,
    /// Event names, in order, with their attributes.
    pub events: Vec<(String, HashMap<String, Value>)>,
    pub start_ns: u64,
    pub end_ns: u64,
}

impl ReceivedSpan {
    pub fn attr(&self, key: &str) -> &Value {
        self.attributes.get(key).unwrap_or(&Value::Null)
    }
}

/// The OTLP messages, for tests that build their own batches.
pub use opentelemetry_proto as proto;

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    /// Every export as received, encoded: every field, for searches.
    raw: Vec<Vec<u8>>,
    /// Headers of each export (gRPC metadata or HTTP headers), lower-case names.
    headers: Vec<HashMap<String, String>>,
}

type Shared = Arc<Mutex<Received>>;

pub struct OtlpReceiver {
    /// `http://127.0.0.1:port` for gRPC (`OTEL_EXPORTER_OTLP_PROTOCOL=grpc`).
    pub grpc_url: String,
    /// `http://127.0.0.1:port` for HTTP/protobuf (the SDK appends `/v1/traces`).
    pub http_url: String,
    received: Shared,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

fn value(v: &AnyValue) -> Value {
    match &v.value {
        Some(any_value::Value::StringValue(s)) => json!(s),
        Some(any_value::Value::BoolValue(b)) => json!(b),
        Some(any_value::Value::IntValue(i)) => json!(i),
        Some(any_value::Value::DoubleValue(d)) => json!(d),
        Some(any_value::Value::ArrayValue(a)) => Value::Array(a.values.iter().map(value).collect()),
        _ => Value::Null,
    }
}

fn attributes(kvs: &[KeyValue]) -> HashMap<String, Value> {
    kvs.iter()
        .map(|kv| {
            (
                kv.key.clone(),
                kv.value.as_ref().map(value).unwrap_or(Value::Null),
            )
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn record(
    received: &Shared,
    request: &ExportTraceServiceRequest,
    headers: HashMap<String, String>,
) {
    let mut r = received.lock().unwrap();
    r.headers.push(headers);
    r.raw.push(request.encode_to_vec());
    for resource_spans in &request.resource_spans {
        let resource = resource_spans
            .resource
            .as_ref()
            .map(|r| attributes(&r.attributes))
            .unwrap_or_default();
        let service = resource
            .get("service.name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        for scope in &resource_spans.scope_spans {
            for span in &scope.spans {
                r.spans.push(ReceivedSpan {
                    trace_id: hex(&span.trace_id),
                    span_id: hex(&span.span_id),
                    parent_span_id: hex(&span.parent_span_id),
                    name: span.name.clone(),
                    service: service.clone(),
                    attributes: attributes(&span.attributes),
                    events: span
                        .events
                        .iter()
                        .map(|e| (e.name.clone(), attributes(&e.attributes)))
                        .collect(),
                    start_ns: span.start_time_unix_nano,
                    end_ns: span.end_time_unix_nano,
                });
            }
        }
    }
}

struct Grpc(Shared);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request
            .metadata()
            .iter()
            .filter_map(|kv| match kv {
                tonic::metadata::KeyAndValueRef::Ascii(k, v) => {
                    Some((k.to_string(), v.to_str().unwrap_or("").to_string()))
                }
                _ => None,
            })
            .collect();
        record(&self.0, request.get_ref(), headers);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

async fn http_traces(
    State(received): State<Shared>,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return (
            axum::http::StatusCode::BAD_REQUEST,
            "not an ExportTraceServiceRequest",
        )
            .into_response();
    };
    let headers = headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    record(&received, &request, headers);
    (
        [("content-type", "application/x-protobuf")],
        ExportTraceServiceResponse {
            partial_success: None,
        }
        .encode_to_vec(),
    )
        .into_response()
}

impl OtlpReceiver {
    pub async fn start() -> OtlpReceiver {
        let received: Shared = Arc::default();
        let grpc = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind otlp grpc");
        let grpc_url = format!("http://{}", grpc.local_addr().expect("addr"));
        let http = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind otlp http");
        let http_url = format!("http://{}", http.local_addr().expect("addr"));
        let grpc_router =
            tonic::service::Routes::new(TraceServiceServer::new(Grpc(received.clone())))
                .into_axum_router();
        let grpc_task = tokio::spawn(async move {
            crate::serve(grpc, grpc_router).await;
        });
        let http_router = axum::Router::new()
            .route("/v1/traces", post(http_traces))
            .with_state(received.clone());
        let http_task = tokio::spawn(async move {
            crate::serve(http, http_router).await;
        });
        OtlpReceiver {
            grpc_url,
            http_url,
            received,
            tasks: vec![grpc_task, http_task],
        }
    }

    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Every export received, as protobuf bytes.
    pub fn raw(&self) -> Vec<Vec<u8>> {
        self.received.lock().unwrap().raw.clone()
    }

    /// The headers each export came with.
    pub fn headers(&self) -> Vec<HashMap<String, String>> {
        self.received.lock().unwrap().headers.clone()
    }

    /// Waits until `ready` holds for the spans received.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&[ReceivedSpan]) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(found) = ready(&self.spans()) {
                return Ok(found);
            }
            if tokio::time::Instant::now() >= deadline {
                let names: Vec<String> = self.spans().iter().map(|s| s.name.clone()).collect();
                anyhow::bail!(
                    "OTLP receiver: no {what} within {timeout:?}; spans so far: {names:?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

/// Sends `batch` to an OTLP gRPC trace service (chorus's worker link) as a worker
/// holding `credential` would.
pub async fn export_as(
    url: &str,
    credential: &str,
    batch: ExportTraceServiceRequest,
) -> Result<(), tonic::Status> {
    use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
    let mut client = TraceServiceClient::connect(url.to_string())
        .await
        .map_err(|e| tonic::Status::unavailable(e.to_string()))?
        .max_encoding_message_size(64 << 20);
    let mut request = tonic::Request::new(batch);
    request.metadata_mut().insert(
        "authorization",
        format!("Bearer {credential}")
            .parse()
            .map_err(|_| tonic::Status::invalid_argument("credential"))?,
    );
    client.export(request).await.map(drop)
}
