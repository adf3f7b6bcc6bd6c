//! `--log-format json`: one JSON object per line, for log pipelines. Each line has
//! `timestamp`, `level`, `target`, `message` and the event's other fields, the
//! spans it happened in (`spans`, outermost first, with their fields; `agent` and
//! `thread_id` are also copied to the top), and, when traces are exported, the
//! `trace_id` and `span_id` of its span, so a log line leads to its trace. Workers'
//! lines have the same shape (tracing's own JSON format, flattened) with `agent`
//! and `process: "chorus-worker"` added by the control plane (`relay_worker_log`).

use std::fmt;

use serde_json::{Map, Value, json};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{JsonFields, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormattedFields};
use tracing_subscriber::registry::LookupSpan;

/// How log lines look (`--log-format`, `CHORUS_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Lines for people.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

struct Fields<'a>(&'a mut Map<String, Value>);

impl Visit for Fields<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), json!(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().to_string(), json!(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().to_string(), json!(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().to_string(), json!(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().to_string(), json!(value));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().to_string(), json!(format!("{value:?}")));
    }
}

/// The trace and span ids of the current span, when it has a valid OpenTelemetry
/// context (traces exported).
fn trace_ids() -> Option<(String, String)> {
    use opentelemetry::trace::TraceContextExt;
    use tracing_opentelemetry::OpenTelemetrySpanExt;
    let cx = tracing::Span::current().context();
    let span = cx.span();
    let sc = span.span_context();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}

pub struct JsonLines {
    /// Whether spans have OpenTelemetry contexts to read ids from.
    pub with_trace_ids: bool,
}

impl<S> FormatEvent<S, JsonFields> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, JsonFields>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let meta = event.metadata();
        let mut fields = Map::new();
        event.record(&mut Fields(&mut fields));
        let message = fields.remove("message").unwrap_or(Value::Null);
        let mut line = Map::new();
        line.insert(
            "timestamp".into(),
            json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
        );
        line.insert("level".into(), json!(meta.level().as_str()));
        line.insert("target".into(), json!(meta.target()));
        line.insert("message".into(), message);
        for (key, value) in fields {
            line.entry(key).or_insert(value);
        }
        if let Some(scope) = ctx.event_scope() {
            let mut spans = Vec::new();
            for span in scope.from_root() {
                let mut entry = Map::new();
                entry.insert("name".into(), json!(span.name()));
                let extensions = span.extensions();
                if let Some(formatted) = extensions.get::<FormattedFields<JsonFields>>()
                    && let Ok(Value::Object(span_fields)) =
                        serde_json::from_str::<Value>(formatted.as_str())
                {
                    // The labels people filter on, at the top of the line.
                    for key in ["agent", "thread_id"] {
                        if let Some(value) = span_fields.get(key) {
                            line.insert(key.to_string(), value.clone());
                        }
                    }
                    entry.extend(span_fields);
                }
                spans.push(Value::Object(entry));
            }
            if !spans.is_empty() {
                line.insert("spans".into(), Value::Array(spans));
            }
        }
        if self.with_trace_ids
            && let Some((trace_id, span_id)) = trace_ids()
        {
            line.insert("trace_id".into(), json!(trace_id));
            line.insert("span_id".into(), json!(span_id));
        }
        writeln!(writer, "{}", Value::Object(line))
    }
}

/// One line a worker wrote on stderr, as a line of the control plane's JSON log:
/// its JSON object with `agent` and `process` added (a line that is not JSON, a
/// panic message say, becomes the `message` of an `ERROR` line).
pub fn worker_line(agent: &str, line: &str) -> String {
    let mut object = match serde_json::from_str::<Value>(line) {
        Ok(Value::Object(object)) => object,
        _ => {
            let mut object = Map::new();
            object.insert(
                "timestamp".into(),
                json!(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
            );
            object.insert("level".into(), json!("ERROR"));
            object.insert("message".into(), json!(line));
            object
        }
    };
    object.insert("agent".into(), json!(agent));
    object.insert("process".into(), json!("chorus-worker"));
    Value::Object(object).to_string()
}

/// Copies a worker's stderr into ours, line by line, labelled with its agent.
pub async fn relay_worker_log(agent: String, stderr: tokio::process::ChildStderr) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let mut lines = tokio::io::BufReader::new(stderr).lines();
    while let Ok(Some(line)) = lines.next_line().await {
        if line.trim().is_empty() {
            continue;
        }
        let out = worker_line(&agent, &line);
        // One write per line, so lines of different writers do not interleave.
        let _ = std::io::stderr()
            .lock()
            .write_all(format!("{out}\n").as_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_line_is_labelled_and_a_stray_line_is_kept() {
        let labelled: Value = serde_json::from_str(&worker_line(
            "helper",
            r#"{"level":"INFO","message":"run completed","agent":"spoofed"}"#,
        ))
        .unwrap();
        assert_eq!(labelled["agent"], "helper", "the control plane says whose");
        assert_eq!(labelled["message"], "run completed");
        assert_eq!(labelled["process"], "chorus-worker");
        let stray: Value =
            serde_json::from_str(&worker_line("helper", "thread 'main' panicked at x")).unwrap();
        assert_eq!(stray["level"], "ERROR");
        assert_eq!(stray["message"], "thread 'main' panicked at x");
    }
}
