//! Where traces go, from the standard OpenTelemetry variables (pure). Only the
//! control plane reads them: workers send their spans to the control plane, which
//! forwards them, so a collector's address and credentials never reach a worker.
//!
//! - `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as given) or
//!   `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` appended for `http/protobuf`);
//!   neither set: no exporter at all.
//! - `OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL`: `grpc` or `http/protobuf` (the default,
//!   as the specification says).
//! - `OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`: `key=value,key2=value2`, values
//!   percent-decoded.
//! - `OTEL_EXPORTER_OTLP_[TRACES_]TIMEOUT`: milliseconds per export (10000).
//!
//! `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_TRACES_SAMPLER`(`_ARG`) and
//! `OTEL_BSP_*` are read by the OpenTelemetry SDK itself.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    HttpProtobuf,
}

#[derive(Clone, PartialEq, Eq)]
pub struct ExportSettings {
    /// The URL export requests go to.
    pub endpoint: String,
    pub protocol: Protocol,
    /// Sent with every export (often a collector's API key: never logged).
    pub headers: Vec<(String, String)>,
    pub timeout: Duration,
    /// `OTEL_SERVICE_NAME`, else `chorus`; workers are `<this>-worker`.
    pub service_name: String,
    /// `OTEL_RESOURCE_ATTRIBUTES`, which workers' spans carry too.
    pub resource_attributes: std::collections::BTreeMap<String, String>,
}

impl std::fmt::Debug for ExportSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExportSettings")
            .field("endpoint", &self.endpoint)
            .field("protocol", &self.protocol)
            .field(
                "headers",
                &self.headers.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("timeout", &self.timeout)
            .field("service_name", &self.service_name)
            .finish()
    }
}

/// The export settings the environment asks for; `Ok(None)` when tracing export
/// is off (no endpoint), an error naming the variable when a value is wrong.
pub fn from_env(get: impl Fn(&str) -> Option<String>) -> Result<Option<ExportSettings>, String> {
    let var = |name: &str| {
        get(name)
            .map(|v| v.trim().to_string())
            .filter(|v| !v.is_empty())
    };
    let either = |specific: &str, general: &str| {
        var(specific)
            .map(|v| (specific.to_string(), v))
            .or_else(|| var(general).map(|v| (general.to_string(), v)))
    };
    let protocol = match either(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ) {
        None => Protocol::HttpProtobuf,
        Some((_, v)) if v == "grpc" => Protocol::Grpc,
        Some((_, v)) if v == "http/protobuf" => Protocol::HttpProtobuf,
        Some((name, v)) => {
            return Err(format!(
                "{name} must be grpc or http/protobuf, not '{v}' (http/json is not supported)"
            ));
        }
    };
    let endpoint = match (
        var("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
        var("OTEL_EXPORTER_OTLP_ENDPOINT"),
    ) {
        (Some(traces), _) => traces,
        (None, Some(base)) => match protocol {
            Protocol::Grpc => base,
            Protocol::HttpProtobuf => format!("{}/v1/traces", base.trim_end_matches('/')),
        },
        (None, None) => return Ok(None),
    };
    if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
        return Err(format!(
            "the OTLP endpoint must be an http:// or https:// URL, not '{endpoint}'"
        ));
    }
    if protocol == Protocol::Grpc && endpoint.starts_with("https://") {
        return Err(
            "OTLP over gRPC is supported without TLS only (http://); use \
             OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf for an https:// collector"
                .to_string(),
        );
    }
    let headers = match either(
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_HEADERS",
    ) {
        None => Vec::new(),
        // HTTP/2 (gRPC) header names are lower case.
        Some((name, v)) => parse_headers(&v)
            .map_err(|e| format!("{name}: {e}"))?
            .into_iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), v))
            .collect(),
    };
    let timeout = match either(
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ) {
        None => Duration::from_secs(10),
        Some((name, v)) => Duration::from_millis(
            v.parse::<u64>()
                .map_err(|_| format!("{name} must be a number of milliseconds, not '{v}'"))?,
        ),
    };
    let resource_attributes = match var("OTEL_RESOURCE_ATTRIBUTES") {
        None => Default::default(),
        Some(v) => parse_headers(&v)
            .map_err(|e| format!("OTEL_RESOURCE_ATTRIBUTES: {e}"))?
            .into_iter()
            .collect(),
    };
    Ok(Some(ExportSettings {
        endpoint,
        protocol,
        headers,
        timeout,
        service_name: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "chorus".to_string()),
        resource_attributes,
    }))
}

/// `key=value,key2=value2` (W3C baggage style: values percent-encoded).
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let (key, value) = pair
                .split_once('=')
                .ok_or_else(|| "each header is key=value".to_string())?;
            let key = key.trim();
            if key.is_empty() {
                return Err("a header has no name".to_string());
            }
            Ok((key.to_string(), percent_decode(value.trim())))
        })
        .collect()
}

/// `%XX` sequences decoded (OTLP header values, a URL's userinfo).
pub(crate) fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let Some(byte) = std::str::from_utf8(&bytes[i + 1..i + 3])
                .ok()
                .and_then(|hex| u8::from_str_radix(hex, 16).ok())
        {
            out.push(byte);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn no_endpoint_means_no_export() {
        assert_eq!(from_env(env(&[])), Ok(None));
        assert_eq!(
            from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", " ")])),
            Ok(None)
        );
    }

    #[test]
    fn the_base_endpoint_gets_the_traces_path_for_http_only() {
        let http = from_env(env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318/")]))
            .unwrap()
            .unwrap();
        assert_eq!(http.endpoint, "http://c:4318/v1/traces");
        assert_eq!(http.protocol, Protocol::HttpProtobuf);
        let grpc = from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4317"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(grpc.endpoint, "http://c:4317");
        let specific = from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "https://t/x"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(specific.endpoint, "https://t/x", "used as given");
    }

    #[test]
    fn headers_timeout_and_wrong_values() {
        let s = from_env(env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-honeycomb-team=abc%3D%3D, Authorization=Bearer%20t",
            ),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(
            s.headers,
            [
                ("x-honeycomb-team".to_string(), "abc==".to_string()),
                ("authorization".to_string(), "Bearer t".to_string())
            ]
        );
        assert_eq!(s.timeout, Duration::from_millis(2500));
        assert_eq!(s.service_name, "chorus");
        assert!(
            !format!("{s:?}").contains("abc=="),
            "headers are not printed"
        );
        let wrong = |pairs: &[(&str, &str)]| from_env(env(pairs)).unwrap_err();
        assert!(
            wrong(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
            ])
            .contains("grpc or http/protobuf")
        );
        assert!(wrong(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "c:4317")]).contains("http://"));
        assert!(
            wrong(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
                ("OTEL_EXPORTER_OTLP_HEADERS", "novalue")
            ])
            .contains("key=value")
        );
        assert!(
            wrong(&[
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ])
            .contains("without TLS")
        );
    }
}
