//! Posting a message with Discord's REST API directly (not serenity's typed call,
//! which reports a 429 without its `retry_after` and rate-limit headers), for the
//! [`Outbox`](super::outbox::Outbox).

use std::time::Duration;

use serde_json::{Value, json};

use super::outbox::{Post, Request, Sent, Transport};
use super::queue::RateLimit;

/// Where Discord's REST API is when `[discord] api_base` does not say.
pub const DISCORD_BASE: &str = "https://discord.com";
/// How long to wait before trying again a request that never reached Discord.
const UNREACHED_RETRY: Duration = Duration::from_secs(2);

pub struct RestTransport {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl RestTransport {
    pub fn new(base: Option<&str>, token: &str) -> RestTransport {
        RestTransport {
            http: reqwest::Client::builder()
                .connect_timeout(Duration::from_secs(10))
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap_or_default(),
            base: base
                .unwrap_or(DISCORD_BASE)
                .trim_end_matches('/')
                .to_string(),
            token: token.to_string(),
        }
    }
}

/// The body of a message: its text, a reply reference, buttons, and no pings (an
/// agent's text never mentions @everyone or anyone else).
pub fn message_body(channel: u64, post: &Post) -> Value {
    let mut body = json!({ "content": post.content, "allowed_mentions": { "parse": [] } });
    if let Some(reply_to) = post.reply_to {
        body["message_reference"] = json!({
            "message_id": reply_to.to_string(),
            "channel_id": channel.to_string(),
            "fail_if_not_exists": false,
        });
    }
    if let Some(components) = &post.components {
        body["components"] = components.clone();
    }
    if let Some((name, _)) = &post.file {
        body["attachments"] = json!([{ "id": 0, "filename": name }]);
    }
    body
}

fn rate_limit(headers: &reqwest::header::HeaderMap) -> RateLimit {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    RateLimit {
        limit: text("x-ratelimit-limit").and_then(|v| v.parse().ok()),
        remaining: text("x-ratelimit-remaining").and_then(|v| v.parse().ok()),
        reset_after: text("x-ratelimit-reset-after")
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map(Duration::from_secs_f64),
    }
}

#[tonic::async_trait]
impl Transport for RestTransport {
    async fn send(&self, channel: u64, request: &Request) -> Sent {
        let messages = format!("{}/api/v10/channels/{channel}/messages", self.base);
        let (builder, post) = match request {
            Request::Post(post) => (self.http.post(&messages), post),
            Request::Edit { message, post } => {
                (self.http.patch(format!("{messages}/{message}")), post)
            }
        };
        let body = message_body(channel, post);
        let builder = builder.header("Authorization", format!("Bot {}", self.token));
        let builder = match &post.file {
            // A file goes as multipart: the message in `payload_json`, the file as
            // `files[0]`.
            Some((name, contents)) => builder.multipart(
                reqwest::multipart::Form::new()
                    .text("payload_json", body.to_string())
                    .part(
                        "files[0]",
                        reqwest::multipart::Part::text(contents.clone())
                            .file_name(name.clone())
                            .mime_str("text/plain; charset=utf-8")
                            .unwrap_or_else(|_| reqwest::multipart::Part::text(contents.clone())),
                    ),
            ),
            None => builder.json(&body),
        };
        let response = match builder.send().await {
            Ok(response) => response,
            // Never reached Discord: sending again cannot post twice.
            Err(e) if e.is_connect() => {
                return Sent::RateLimited {
                    retry_after: UNREACHED_RETRY,
                    rate: RateLimit {
                        limit: None,
                        remaining: None,
                        reset_after: None,
                    },
                };
            }
            Err(e) => return Sent::Failed(format!("sending to Discord failed: {e}")),
        };
        let status = response.status();
        let rate = rate_limit(response.headers());
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if status.as_u16() == 429 {
            let retry_after = body["retry_after"]
                .as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
                .or(rate.reset_after)
                .unwrap_or(Duration::from_secs(1));
            return Sent::RateLimited { retry_after, rate };
        }
        if !status.is_success() {
            return Sent::Failed(format!(
                "Discord answered {status}: {}",
                body["message"].as_str().unwrap_or("no reason given")
            ));
        }
        match body["id"].as_str().and_then(|id| id.parse().ok()) {
            Some(id) => Sent::Posted { id, rate },
            None => Sent::Failed(format!("Discord's answer has no message id: {body}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_references_its_message_and_pings_nobody() {
        let reply = Post {
            reply_to: Some(9),
            ..Post::text("hi @everyone")
        };
        let body = message_body(5, &reply);
        assert_eq!(body["message_reference"]["message_id"], "9");
        assert_eq!(body["allowed_mentions"]["parse"], json!([]));
        assert!(
            message_body(5, &Post::text("x"))
                .get("message_reference")
                .is_none()
        );
    }

    #[test]
    fn rate_limit_headers_are_read() {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("x-ratelimit-limit", "5".parse().unwrap());
        headers.insert("x-ratelimit-remaining", "0".parse().unwrap());
        headers.insert("x-ratelimit-reset-after", "1.5".parse().unwrap());
        assert_eq!(
            rate_limit(&headers),
            RateLimit {
                limit: Some(5),
                remaining: Some(0),
                reset_after: Some(Duration::from_millis(1500))
            }
        );
    }
}
