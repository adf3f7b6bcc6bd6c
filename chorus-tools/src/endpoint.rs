//! The client of the run endpoint: the worker's per-run HTTP server that owns the
//! tool pipeline (`GET /tools`, `POST /tools/call`). Both faces of `chorus-tools`
//! go through here, so they fail with the same sentences.
//!
//! The address and the run's credential come from `CHORUS_TOOLS_URL` and
//! `CHORUS_TOOLS_TOKEN`, which the worker puts in the CLI's environment; they are
//! worthless once the run ends (the listener is gone and its port refuses).

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Environment variable holding the run endpoint's base URL.
pub const URL_ENV: &str = "CHORUS_TOOLS_URL";
/// Environment variable holding the run's credential.
pub const TOKEN_ENV: &str = "CHORUS_TOOLS_TOKEN";

/// Connecting goes to loopback: if that takes longer than this, nothing is there.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A call may wait on a person approving it, so the whole exchange may take long;
/// the run's own time limit ends it sooner (its listener goes and the connection
/// with it). This bound only keeps a wedged endpoint from holding us forever.
const CALL_TIMEOUT: Duration = Duration::from_secs(6 * 60 * 60);

/// One tool as the endpoint offers it (`GET /tools`), with its wire name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    pub input_schema: Map<String, Value>,
}

#[derive(Deserialize)]
struct ToolList {
    tools: Vec<ToolSpec>,
}

/// What one call came back with (`POST /tools/call`): the text the model reads,
/// and whether it is the tool's error (a refusal, a failure, a bad argument).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct CallOutcome {
    pub content: String,
    pub is_error: bool,
}

#[derive(Serialize)]
struct CallBody<'a> {
    name: &'a str,
    arguments: &'a Map<String, Value>,
}

/// Why a call could not be made at all (as opposed to a tool's error result).
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    #[error(
        "{URL_ENV} and {TOKEN_ENV} are not set: chorus-tools runs only inside a Chorus run, \
         which sets them for the agent's CLI"
    )]
    NotInRun,
    #[error("{URL_ENV} is '{url}', which is not an http:// URL: {reason}")]
    BadUrl { url: String, reason: String },
    #[error("the run this credential belonged to has ended (or it is another run's)")]
    Refused,
    #[error("no Chorus run is listening at {url} (the run has ended, or the address is wrong)")]
    Unreachable { url: String },
    #[error("the run endpoint at {url} could not be reached: {reason}")]
    Transport { url: String, reason: String },
    #[error("the run endpoint answered {status}: {body}")]
    Status { status: u16, body: String },
    #[error("the run endpoint's answer is not what chorus-tools expects: {0}")]
    BadAnswer(String),
}

/// A connection to one run's endpoint.
#[derive(Clone)]
pub struct Endpoint {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Endpoint {
    /// Reads the endpoint's address and credential from the environment.
    pub fn from_env() -> Result<Self, EndpointError> {
        let url = std::env::var(URL_ENV).ok().filter(|v| !v.is_empty());
        let token = std::env::var(TOKEN_ENV).ok().filter(|v| !v.is_empty());
        let (Some(url), Some(token)) = (url, token) else {
            return Err(EndpointError::NotInRun);
        };
        Self::new(&url, token)
    }

    pub fn new(url: &str, token: String) -> Result<Self, EndpointError> {
        let base = check_base(url)?;
        let http = reqwest::Client::builder()
            // The endpoint is on loopback; a proxy from the environment must not
            // see the run's credential, nor stand between us and it.
            .no_proxy()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(CALL_TIMEOUT)
            .build()
            .map_err(|e| EndpointError::Transport {
                url: base.clone(),
                reason: e.to_string(),
            })?;
        Ok(Self { base, token, http })
    }

    /// The run's offered tools, exactly as the endpoint lists them.
    pub async fn list(&self) -> Result<Vec<ToolSpec>, EndpointError> {
        let request = self.http.get(format!("{}/tools", self.base));
        let list: ToolList = self.send(request).await?;
        Ok(list.tools)
    }

    /// Sends one call into the run's tool pipeline and waits for its result.
    pub async fn call(
        &self,
        name: &str,
        arguments: &Map<String, Value>,
    ) -> Result<CallOutcome, EndpointError> {
        let request = self
            .http
            .post(format!("{}/tools/call", self.base))
            .json(&CallBody { name, arguments });
        self.send(request).await
    }

    async fn send<T: serde::de::DeserializeOwned>(
        &self,
        request: reqwest::RequestBuilder,
    ) -> Result<T, EndpointError> {
        let response = request
            .bearer_auth(&self.token)
            .send()
            .await
            .map_err(|e| self.transport_error(&e))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(EndpointError::Refused);
        }
        let body = response
            .bytes()
            .await
            .map_err(|e| self.transport_error(&e))?;
        if !status.is_success() {
            return Err(EndpointError::Status {
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body).trim().to_owned(),
            });
        }
        serde_json::from_slice(&body).map_err(|e| EndpointError::BadAnswer(e.to_string()))
    }

    fn transport_error(&self, e: &reqwest::Error) -> EndpointError {
        if e.is_connect() {
            EndpointError::Unreachable {
                url: self.base.clone(),
            }
        } else {
            EndpointError::Transport {
                url: self.base.clone(),
                reason: error_chain(e),
            }
        }
    }
}

/// The base URL without a trailing slash, if it is a plain http URL (the
/// endpoint is a loopback listener; TLS there would only add a failure mode).
fn check_base(url: &str) -> Result<String, EndpointError> {
    let bad = |reason: &str| EndpointError::BadUrl {
        url: url.to_owned(),
        reason: reason.to_owned(),
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| bad(&e.to_string()))?;
    if parsed.scheme() != "http" {
        return Err(bad("the run endpoint speaks plain HTTP on loopback"));
    }
    if parsed.host_str().is_none() {
        return Err(bad("it names no host"));
    }
    Ok(url.trim_end_matches('/').to_owned())
}

/// An error and its sources in one line (reqwest's own Display stops at the top).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_may_wait_on_a_person_for_at_least_15_minutes() {
        assert!(CALL_TIMEOUT >= Duration::from_secs(15 * 60));
    }

    #[test]
    fn base_url_is_checked_and_trimmed() {
        assert_eq!(
            check_base("http://127.0.0.1:4000/").unwrap(),
            "http://127.0.0.1:4000"
        );
        let err = check_base("https://127.0.0.1:4000")
            .unwrap_err()
            .to_string();
        assert!(err.contains("plain HTTP"), "{err}");
        let err = check_base("127.0.0.1:4000").unwrap_err().to_string();
        assert!(err.contains("CHORUS_TOOLS_URL"), "{err}");
    }
}
