//! `chorus status` (alias `doctor`): what the running Chorus sees (`GET /api/status`:
//! its providers, default model, workers, Discord, worker link and store) when one
//! answers; this shell's own settings, checked here, only when none does or its
//! status cannot be read, saying which of the two it shows.

use std::io::Write;
use std::time::Duration;

use reqwest::StatusCode;
use serde::Serialize;
use serde_json::{Value, json};

use super::client::{api_error, resolve_token};
use crate::config::{self, ServeArgs, Settings};
use crate::doctor::{self, Diagnosis};

#[derive(Debug, Clone, clap::Args)]
pub struct StatusArgs {
    #[command(flatten)]
    pub serve: ServeArgs,
    /// The Chorus to ask [default: http://<the --http-addr chorus serve would use>].
    #[arg(long, env = "CHORUS_URL")]
    pub url: Option<String>,
    /// Print JSON: `{"shown": "server" | "this_shell", "url", "server", "status"}`.
    #[arg(long)]
    pub json: bool,
}

/// Whose status is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
enum Shown {
    /// The running Chorus's own.
    Server,
    /// This shell's settings: no Chorus answered, or its status could not be read.
    ThisShell,
}

/// What asking the server gave.
enum Answer {
    Status(Box<Diagnosis>, Value),
    /// A Chorus answers, but its status could not be read (why).
    Unreadable(String),
    Absent,
}

/// Exit 0 when the providers of what is shown include a usable one.
pub async fn run(args: StatusArgs) -> anyhow::Result<bool> {
    let (file, _) = config::load_file(args.serve.config.as_deref())?;
    let settings = Settings::resolve(args.serve, file, |name| std::env::var(name).ok())?;
    let url = args
        .url
        .unwrap_or_else(|| format!("http://{}", settings.http_addr))
        .trim_end_matches('/')
        .to_string();
    let token = resolve_token(
        settings
            .api_token
            .as_ref()
            .map(super::super::secrets::Secret::expose),
        &settings.data_dir,
    )
    .ok();
    let (shown, diagnosis, body, why) = match ask(&url, token.as_deref()).await {
        Answer::Status(diagnosis, body) => (Shown::Server, *diagnosis, body, None),
        answer => {
            let why = match answer {
                Answer::Unreadable(why) => Some(why),
                _ => None,
            };
            let diagnosis = doctor::local(&settings, why.is_some()).await;
            let body = with_verdict(&diagnosis)?;
            (Shown::ThisShell, diagnosis, body, why)
        }
    };
    let mut out = std::io::stdout();
    if args.json {
        let document = json!({
            "shown": shown,
            "url": url,
            "server": match (shown, &why) {
                (Shown::Server, _) => json!("answers"),
                (_, Some(why)) => json!({"answers": true, "unreadable": why}),
                (_, None) => json!("absent"),
            },
            "status": body,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&document)?)?;
    } else {
        write!(out, "{}", heading(shown, &url, why.as_deref()))?;
        write!(out, "{}", diagnosis.render())?;
    }
    Ok(diagnosis.usable())
}

/// The first line: whose status follows.
fn heading(shown: Shown, url: &str, why: Option<&str>) -> String {
    match (shown, why) {
        (Shown::Server, _) => format!("The Chorus at {url} (what the server sees):\n"),
        (Shown::ThisShell, None) => format!(
            "No Chorus answers at {url}. This shell's settings, as chorus serve started here \
             would use them:\n"
        ),
        (Shown::ThisShell, Some(why)) => format!(
            "A Chorus answers at {url}, but its status cannot be read: {why}\n\
             This shell's settings instead (the server's may differ):\n"
        ),
    }
}

/// The diagnosis as `GET /api/status` gives it.
fn with_verdict(diagnosis: &Diagnosis) -> anyhow::Result<Value> {
    let mut body = serde_json::to_value(diagnosis)?;
    body["usable"] = json!(diagnosis.usable());
    body["next"] = json!(diagnosis.next_steps());
    Ok(body)
}

/// How long `chorus status` waits for the server's status.
const STATUS_WAIT: Duration = Duration::from_secs(30);

/// Whether a Chorus answers its health check at `url`.
async fn healthy(http: &reqwest::Client, url: &str) -> bool {
    http.get(format!("{url}/healthz"))
        .send()
        .await
        .is_ok_and(|r| r.status().is_success())
}

async fn ask(url: &str, token: Option<&str>) -> Answer {
    let Ok(http) = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
    else {
        return Answer::Absent;
    };
    // The server's status probes its providers and the CLIs on this host, which a
    // loaded machine may take a while to do: it gets longer than a health check.
    let mut request = http.get(format!("{url}/api/status")).timeout(STATUS_WAIT);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = match request.send().await {
        Ok(response) => response,
        Err(e) if e.is_timeout() && healthy(&http, url).await => {
            return Answer::Unreadable(format!(
                "it did not give its status within {} s",
                STATUS_WAIT.as_secs()
            ));
        }
        Err(_) => return Answer::Absent,
    };
    let status = response.status();
    let body: Value = response.json().await.unwrap_or(Value::Null);
    if status.is_success() {
        return match serde_json::from_value::<Diagnosis>(body.clone()) {
            Ok(diagnosis) => Answer::Status(Box::new(diagnosis), body),
            Err(e) => Answer::Unreadable(format!(
                "its answer is not a status this client reads ({e})"
            )),
        };
    }
    // Something answered: a Chorus only if its health check says so.
    if !healthy(&http, url).await {
        return Answer::Absent;
    }
    Answer::Unreadable(match status {
        StatusCode::UNAUTHORIZED if token.is_none() => {
            "no API token here: set CHORUS_API_TOKEN, or --data-dir (CHORUS_DATA_DIR) to the \
             directory chorus serve uses"
                .to_string()
        }
        StatusCode::NOT_FOUND => {
            "it is an older chorus that does not serve its status; upgrade it".to_string()
        }
        _ => api_error(status, &body).to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_heading_says_whose_status_follows() {
        assert!(heading(Shown::Server, "http://h:1", None).contains("what the server sees"));
        assert!(heading(Shown::ThisShell, "http://h:1", None).starts_with("No Chorus answers"));
        let unreadable = heading(
            Shown::ThisShell,
            "http://h:1",
            Some("the token was refused"),
        );
        assert!(
            unreadable.contains("cannot be read: the token was refused")
                && unreadable.contains("This shell's settings instead"),
            "{unreadable}"
        );
    }
}
