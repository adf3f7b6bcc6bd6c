//! The terminal client's connection to a running Chorus: where it is, the token,
//! and requests that turn the API's errors into sentences.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use reqwest::{Method, StatusCode};
use serde_json::Value;

/// Where the client finds Chorus and its token: flags, then the environment,
/// then the data directory's `api-token`.
#[derive(Debug, Clone, clap::Args)]
pub struct ClientArgs {
    /// Base URL of the Chorus HTTP API.
    #[arg(
        long,
        global = true,
        env = "CHORUS_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// API token [default: the data directory's api-token].
    #[arg(long, global = true, env = "CHORUS_API_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Where `chorus serve` keeps its state, to read its api-token from.
    #[arg(long, global = true, env = "CHORUS_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Print JSON (one document, or one event per line while following a run).
    #[arg(long, global = true)]
    pub json: bool,
}

/// The token from `--token`/`CHORUS_API_TOKEN`, else `<data_dir>/api-token`.
pub fn resolve_token(given: Option<&str>, data_dir: &Path) -> anyhow::Result<String> {
    if let Some(token) = given.map(str::trim).filter(|t| !t.is_empty()) {
        return Ok(token.to_string());
    }
    let path = data_dir.join("api-token");
    match std::fs::read_to_string(&path) {
        Ok(token) if !token.trim().is_empty() => Ok(token.trim().to_string()),
        Ok(_) => bail!(
            "{} is empty; pass --token or set CHORUS_API_TOKEN",
            path.display()
        ),
        Err(e) => bail!(
            "no API token: pass --token, set CHORUS_API_TOKEN, or point --data-dir (CHORUS_DATA_DIR) \
             at the directory chorus serve uses (cannot read {}: {e})",
            path.display()
        ),
    }
}

pub struct Client {
    base: String,
    token: String,
    http: reqwest::Client,
}

impl Client {
    pub fn new(args: &ClientArgs) -> anyhow::Result<Client> {
        let token = resolve_token(args.token.as_deref(), &args.data_dir)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .context("cannot build the HTTP client")?;
        Ok(Client {
            base: args.url.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token)
    }

    /// Sends a request and returns the answer's JSON (`null` for an empty body);
    /// an error status becomes the API's own message.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let mut request = self
            .request(method.clone(), path)
            .timeout(Duration::from_secs(120));
        if let Some(body) = body {
            request = request.json(body);
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = if text.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(&text).unwrap_or(Value::String(text))
        };
        if status.is_success() {
            return Ok(value);
        }
        Err(api_error(status, &value))
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Uploads `file` as the multipart field `file` (named by its file name) and
    /// returns the answer's JSON.
    pub async fn post_file(&self, path: &str, file: &Path) -> anyhow::Result<Value> {
        let bytes = tokio::fs::read(file)
            .await
            .with_context(|| format!("cannot read {}", file.display()))?;
        let name = file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .ok_or_else(|| anyhow!("{} names no file", file.display()))?;
        let form = reqwest::multipart::Form::new().part(
            "file",
            reqwest::multipart::Part::bytes(bytes).file_name(name),
        );
        let response = self
            .request(Method::POST, path)
            .timeout(Duration::from_secs(300))
            .multipart(form)
            .send()
            .await
            .map_err(|e| self.unreachable(e))?;
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        if status.is_success() {
            return Ok(value);
        }
        Err(api_error(status, &value))
    }

    /// Opens a server-sent event stream (no overall timeout: it lasts).
    pub async fn stream(
        &self,
        path: &str,
        last_event_id: Option<&str>,
    ) -> anyhow::Result<reqwest::Response> {
        let mut request = self.request(Method::GET, path);
        if let Some(id) = last_event_id {
            request = request.header("Last-Event-ID", id);
        }
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let value = response.json::<Value>().await.unwrap_or(Value::Null);
        Err(api_error(status, &value))
    }

    fn unreachable(&self, e: reqwest::Error) -> anyhow::Error {
        if e.is_connect() {
            anyhow!(
                "cannot reach chorus at {}: is `chorus serve` running? (set --url or CHORUS_URL)",
                self.base
            )
        } else if e.is_timeout() {
            anyhow!("chorus at {} did not answer in time", self.base)
        } else {
            anyhow!("request to {} failed: {e}", self.base)
        }
    }
}

/// The API's `{"error": {"code", "message"}}` (or `{"error": "…"}`) as one sentence.
pub fn api_error(status: StatusCode, body: &Value) -> anyhow::Error {
    let message = body["error"]["message"]
        .as_str()
        .or_else(|| body["error"].as_str())
        .map(str::to_string)
        .or_else(|| body.as_str().map(str::to_string))
        .unwrap_or_else(|| status.canonical_reason().unwrap_or("error").to_string());
    match status {
        StatusCode::UNAUTHORIZED => anyhow!(
            "the token was refused ({message}); use the api-token chorus serve wrote in its data directory, \
             or a token an admin issued you (chorus user token create)"
        ),
        _ => anyhow!("{message} (HTTP {})", status.as_u16()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_token_comes_from_the_flag_else_the_data_dir() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(resolve_token(Some(" t1 "), dir.path()).unwrap(), "t1");
        let missing = resolve_token(None, dir.path()).unwrap_err().to_string();
        assert!(
            missing.contains("CHORUS_API_TOKEN") && missing.contains("api-token"),
            "{missing}"
        );
        std::fs::write(dir.path().join("api-token"), "t2\n").unwrap();
        assert_eq!(resolve_token(None, dir.path()).unwrap(), "t2");
        assert_eq!(resolve_token(Some(""), dir.path()).unwrap(), "t2");
    }

    #[test]
    fn api_errors_read_as_sentences() {
        let body = json!({"error": {"code": "not_found", "message": "no agent named 'x'"}});
        assert_eq!(
            api_error(StatusCode::NOT_FOUND, &body).to_string(),
            "no agent named 'x' (HTTP 404)"
        );
        // A task's invalid transition names the allowed ones in its message.
        let conflict = json!({"error": "task 7 is completed; it cannot go to active (allowed: review)",
                              "allowed": ["review"]});
        assert_eq!(
            api_error(StatusCode::CONFLICT, &conflict).to_string(),
            "task 7 is completed; it cannot go to active (allowed: review) (HTTP 409)"
        );
        assert!(
            api_error(StatusCode::UNAUTHORIZED, &Value::Null)
                .to_string()
                .contains("token was refused")
        );
    }
}
