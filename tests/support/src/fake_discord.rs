//! A fake Discord on 127.0.0.1 for end-to-end tests: the REST routes the bot uses
//! (under `/api/v10`) and a gateway (a plain `ws://` websocket) that says HELLO,
//! takes IDENTIFY, sends READY and acknowledges heartbeats. It sends every field
//! serenity requires (it drops payloads that miss one, silently), records what the
//! bot did, and answers anything it does not know with a 404 it also records.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::routing::{delete, get, patch, post, put};
use axum::{Json, Router};
use futures::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::Message;

pub const APPLICATION_ID: &str = "900000000000000001";
pub const BOT_USER_ID: &str = "900000000000000002";

#[derive(Default)]
struct Recorded {
    /// Messages the bot posted, in order, as Discord returned them.
    posted: Vec<Value>,
    /// The next snowflake this fake hands out.
    next_id: u64,
    /// Posts still to refuse with a 429, and the `retry_after` to give.
    refuse_posts: u32,
    retry_after: f64,
    /// 429s given so far.
    refused: u32,
    /// Slash command registrations: (guild id or "global", the commands).
    commands: Vec<(String, Value)>,
    /// IDENTIFY and RESUME payloads the gateway received.
    identifies: Vec<Value>,
    resumes: Vec<Value>,
    /// Requests to routes the fake does not serve, as `METHOD /path`.
    strays: Vec<String>,
    /// Edits of posted messages: (channel, message, body), in order.
    edits: Vec<(String, String, Value)>,
    /// Channels the bot created (as returned), and ids it deleted.
    channels: Vec<Value>,
    deleted_channels: Vec<String>,
    /// What the bot answered to interactions: (token, kind, body) with kind
    /// `callback`, `edit_original`, `delete_original` or `followup`.
    answers: Vec<(String, String, Value)>,
}

type Shared = Arc<Mutex<Recorded>>;

pub struct FakeDiscord {
    pub base_url: String,
    recorded: Shared,
    /// Dispatches (`t`, `d`) for every connected gateway session.
    dispatch: tokio::sync::broadcast::Sender<(String, Value)>,
    tasks: Vec<JoinHandle<()>>,
}

pub const GUILD_ID: &str = "800000000000000001";
/// A dispatch that is not one: it closes the connection.
const CLOSE: &str = "__close__";
pub const USER_ID: &str = "600000000000000001";

/// A new snowflake (increasing, like Discord's).
fn next_id(recorded: &Shared) -> String {
    let mut r = recorded.lock().unwrap();
    r.next_id += 1;
    format!("{}", 950_000_000_000_000_000u64 + r.next_id)
}

/// A message object with every field serenity requires.
fn message_object(
    id: &str,
    channel: &str,
    author: Value,
    content: &str,
    reference: Option<&str>,
) -> Value {
    let mut message = json!({
        "id": id,
        "channel_id": channel,
        "guild_id": GUILD_ID,
        "author": author,
        "content": content,
        "timestamp": "2026-11-23T12:00:00.000000+00:00",
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "type": if reference.is_some() { 19 } else { 0 },
    });
    if let Some(reference) = reference {
        message["message_reference"] =
            json!({"message_id": reference, "channel_id": channel, "guild_id": GUILD_ID});
    }
    message
}

fn member(user_id: &str, roles: &[&str]) -> Value {
    json!({
        "user": user(user_id), "roles": roles,
        "joined_at": "2026-01-01T00:00:00.000000+00:00",
        "deaf": false, "mute": false, "flags": 0, "pending": false,
    })
}

/// A request body: JSON, or multipart with `payload_json` and files (name,
/// contents).
fn parse_body(headers: &HeaderMap, bytes: &[u8]) -> (Value, Vec<(String, String)>) {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let Some(boundary) = content_type.split("boundary=").nth(1) else {
        return (
            serde_json::from_slice(bytes).unwrap_or(Value::Null),
            Vec::new(),
        );
    };
    let boundary = format!("--{}", boundary.trim_matches('"'));
    let text = String::from_utf8_lossy(bytes);
    let mut payload = Value::Null;
    let mut files = Vec::new();
    for part in text.split(boundary.as_str()) {
        let Some((head, body)) = part.split_once("\r\n\r\n") else {
            continue;
        };
        let body = body.strip_suffix("\r\n").unwrap_or(body);
        if head.contains("name=\"payload_json\"") {
            payload = serde_json::from_str(body).unwrap_or(Value::Null);
        } else if let Some(name) = head.split("filename=\"").nth(1) {
            let name = name.split('"').next().unwrap_or("").to_string();
            files.push((name, body.to_string()));
        }
    }
    if !files.is_empty() {
        payload["files"] = json!(
            files
                .iter()
                .map(|(name, content)| json!({"name": name, "content": content}))
                .collect::<Vec<_>>()
        );
    }
    (payload, files)
}

/// Discord's answer to content over 2,000 characters, if `content` is.
fn too_long(content: &Value) -> Option<axum::response::Response> {
    use axum::response::IntoResponse;
    let chars = content.as_str().map_or(0, |c| c.chars().count());
    (chars > 2000).then(|| {
        (
            StatusCode::BAD_REQUEST,
            Json(json!({
                "code": 50035, "message": "Invalid Form Body",
                "errors": {"content": {"_errors": [{
                    "code": "BASE_TYPE_MAX_LENGTH",
                    "message": "Must be 2000 or fewer in length."
                }]}}
            })),
        )
            .into_response()
    })
}

fn user(id: &str) -> Value {
    json!({
        "id": id, "username": "person", "discriminator": "0000",
        "global_name": null, "avatar": null, "bot": false,
    })
}

impl Drop for FakeDiscord {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl FakeDiscord {
    pub async fn start() -> FakeDiscord {
        Self::start_with(true).await
    }

    /// A fake whose REST API works but whose gateway is down: the URL it gives is
    /// a closed port, so every connection is refused.
    pub async fn start_with_gateway_down() -> FakeDiscord {
        Self::start_with(false).await
    }

    async fn start_with(gateway_up: bool) -> FakeDiscord {
        let recorded: Shared = Arc::default();
        let gateway = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind gateway");
        let gateway_url = format!("ws://{}", gateway.local_addr().expect("gateway addr"));
        let rest = TcpListener::bind("127.0.0.1:0").await.expect("bind rest");
        let base_url = format!("http://{}", rest.local_addr().expect("rest addr"));
        let app = Router::new()
            .route(
                "/api/v10/gateway",
                get({
                    let url = gateway_url.clone();
                    move || async move { Json(json!({ "url": url })) }
                }),
            )
            .route(
                "/api/v10/gateway/bot",
                get({
                    let url = gateway_url.clone();
                    move || async move {
                        Json(json!({
                            "url": url,
                            "shards": 1,
                            "session_start_limit": {
                                "total": 1000, "remaining": 1000,
                                "reset_after": 0, "max_concurrency": 1
                            }
                        }))
                    }
                }),
            )
            .route("/api/v10/users/@me", get(|| async { Json(bot_user()) }))
            .route(
                "/api/v10/oauth2/applications/@me",
                get(|| async { Json(application()) }),
            )
            .route(
                "/api/v10/applications/{app}/guilds/{guild}/commands",
                put(guild_commands),
            )
            .route("/api/v10/applications/{app}/commands", put(global_commands))
            .route("/api/v10/channels/{channel}/messages", post(post_message))
            .route(
                "/api/v10/channels/{channel}/messages/{message}",
                patch(edit_message),
            )
            .route("/api/v10/channels/{channel}", delete(delete_channel))
            .route("/api/v10/guilds/{guild}/channels", post(create_channel))
            .route(
                "/api/v10/interactions/{id}/{token}/callback",
                post(interaction_callback),
            )
            .route("/api/v10/webhooks/{app}/{token}", post(followup))
            .route(
                "/api/v10/webhooks/{app}/{token}/messages/@original",
                patch(edit_original).delete(delete_original),
            )
            .fallback(stray)
            .with_state(recorded.clone());
        let rest_task = tokio::spawn(async move {
            crate::serve(rest, app).await;
        });
        let (dispatch, _) = tokio::sync::broadcast::channel(256);
        let mut tasks = vec![rest_task];
        if gateway_up {
            tasks.push(tokio::spawn(serve_gateway(
                gateway,
                gateway_url,
                recorded.clone(),
                dispatch.clone(),
            )));
        } else {
            // Closed: its port now refuses connections.
            drop(gateway);
        }
        FakeDiscord {
            base_url,
            recorded,
            dispatch,
            tasks,
        }
    }

    /// A person writes `content` in `channel` (as a reply to `reply_to`, if given);
    /// returns the message's id.
    pub fn user_says(&self, channel: &str, content: &str, reply_to: Option<&str>) -> String {
        self.member_says(USER_ID, &[], channel, content, reply_to)
    }

    /// Like [`user_says`](Self::user_says), by the member `user` with `roles`.
    pub fn member_says(
        &self,
        user_id: &str,
        roles: &[&str],
        channel: &str,
        content: &str,
        reply_to: Option<&str>,
    ) -> String {
        let id = next_id(&self.recorded);
        let mut message = message_object(&id, channel, user(user_id), content, reply_to);
        message["member"] = json!({
            "roles": roles, "joined_at": "2026-01-01T00:00:00.000000+00:00",
            "deaf": false, "mute": false, "flags": 0,
        });
        let _ = self.dispatch.send(("MESSAGE_CREATE".into(), message));
        id
    }

    /// The member `user` with `roles` runs `/command` in `channel` with `options`
    /// (Discord's option objects); returns the interaction's token.
    pub fn slash(
        &self,
        user_id: &str,
        roles: &[&str],
        channel: &str,
        command: &str,
        options: Value,
    ) -> String {
        let id = next_id(&self.recorded);
        let token = format!("token-{id}");
        let interaction = json!({
            "id": id, "application_id": APPLICATION_ID, "type": 2,
            "data": {
                "id": "910000000000000000", "name": command, "type": 1,
                "options": options, "guild_id": GUILD_ID,
            },
            "guild_id": GUILD_ID, "channel_id": channel,
            "member": member(user_id, roles),
            "token": token, "version": 1, "locale": "en-US", "guild_locale": "en-US",
            "entitlements": [], "attachment_size_limit": 26_214_400,
        });
        let _ = self
            .dispatch
            .send(("INTERACTION_CREATE".into(), interaction));
        token
    }

    /// The member `user` with `roles` clicks the button `custom_id` of `message` (a
    /// message the bot posted); returns the interaction's token.
    pub fn click(&self, user_id: &str, roles: &[&str], message: &Value, custom_id: &str) -> String {
        let id = next_id(&self.recorded);
        let token = format!("token-{id}");
        let interaction = json!({
            "id": id, "application_id": APPLICATION_ID, "type": 3,
            "data": {"custom_id": custom_id, "component_type": 2},
            "guild_id": GUILD_ID, "channel_id": message["channel_id"],
            "member": member(user_id, roles), "message": message,
            "token": token, "version": 1, "locale": "en-US", "guild_locale": "en-US",
            "entitlements": [], "attachment_size_limit": 26_214_400,
        });
        let _ = self
            .dispatch
            .send(("INTERACTION_CREATE".into(), interaction));
        token
    }

    /// What the bot answered to the interaction `token`: (kind, body), in order.
    pub fn answers(&self, token: &str) -> Vec<(String, Value)> {
        self.recorded
            .lock()
            .unwrap()
            .answers
            .iter()
            .filter(|(t, _, _)| t == token)
            .map(|(_, kind, body)| (kind.clone(), body.clone()))
            .collect()
    }

    /// Edits of the bot's messages: (channel, message, body), in order.
    pub fn edits(&self) -> Vec<(String, String, Value)> {
        self.recorded.lock().unwrap().edits.clone()
    }

    /// Channels the bot created, as Discord returned them.
    pub fn channels(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().channels.clone()
    }

    /// Ids of channels the bot deleted.
    pub fn deleted_channels(&self) -> Vec<String> {
        self.recorded.lock().unwrap().deleted_channels.clone()
    }

    /// The next `posts` message posts get a 429 saying to wait `retry_after_secs`.
    pub fn rate_limit_next(&self, posts: u32, retry_after_secs: f64) {
        let mut r = self.recorded.lock().unwrap();
        r.refuse_posts = posts;
        r.retry_after = retry_after_secs;
    }

    /// How many posts were refused with a 429.
    pub fn refused(&self) -> u32 {
        self.recorded.lock().unwrap().refused
    }

    /// Messages the bot posted so far.
    pub fn posted(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().posted.clone()
    }

    /// The slash commands registered so far, as (guild id or "global", commands).
    pub fn commands(&self) -> Vec<(String, Value)> {
        self.recorded.lock().unwrap().commands.clone()
    }

    /// Closes every gateway connection (code 4000, "unknown error": a client may
    /// resume), as Discord does now and then.
    pub fn drop_gateway(&self) {
        let _ = self.dispatch.send((CLOSE.into(), Value::Null));
    }

    /// The RESUME payloads received.
    pub fn resumes(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().resumes.clone()
    }

    /// The IDENTIFY payloads received.
    pub fn identifies(&self) -> Vec<Value> {
        self.recorded.lock().unwrap().identifies.clone()
    }

    /// Requests to routes the fake does not serve.
    pub fn strays(&self) -> Vec<String> {
        self.recorded.lock().unwrap().strays.clone()
    }

    /// Waits until `ready` holds for what was recorded.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        ready: impl Fn(&FakeDiscord) -> Option<T>,
    ) -> anyhow::Result<T> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if let Some(found) = ready(self) {
                return Ok(found);
            }
            anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "fake Discord: no {what} within {timeout:?} (strays: {:?})",
                self.strays()
            );
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

fn bot_user() -> Value {
    json!({
        "id": BOT_USER_ID, "username": "chorus", "discriminator": "0000",
        "global_name": null, "avatar": null, "bot": true, "flags": 0,
    })
}

fn application() -> Value {
    json!({
        "id": APPLICATION_ID, "name": "chorus", "icon": null, "description": "",
        "bot_public": true, "bot_require_code_grant": false, "verify_key": "00",
        "flags": 0, "owner": bot_user(),
    })
}

/// Commands as Discord returns them: each with an id, version and application id.
fn registered(commands: &Value, guild: Option<&str>) -> Value {
    let list = commands.as_array().cloned().unwrap_or_default();
    Value::Array(
        list.into_iter()
            .enumerate()
            .map(|(i, mut c)| {
                c["id"] = json!(format!("91000000000000{i:04}"));
                c["application_id"] = json!(APPLICATION_ID);
                c["version"] = json!("1");
                c["default_member_permissions"] = Value::Null;
                c["type"] = c.get("type").cloned().unwrap_or(json!(1));
                if let Some(guild) = guild {
                    c["guild_id"] = json!(guild);
                }
                c
            })
            .collect(),
    )
}

async fn guild_commands(
    State(recorded): State<Shared>,
    Path((_app, guild)): Path<(String, String)>,
    Json(commands): Json<Value>,
) -> Json<Value> {
    recorded
        .lock()
        .unwrap()
        .commands
        .push((guild.clone(), commands.clone()));
    Json(registered(&commands, Some(&guild)))
}

async fn global_commands(
    State(recorded): State<Shared>,
    Path(_app): Path<String>,
    Json(commands): Json<Value>,
) -> Json<Value> {
    recorded
        .lock()
        .unwrap()
        .commands
        .push(("global".into(), commands.clone()));
    Json(registered(&commands, None))
}

async fn post_message(
    State(recorded): State<Shared>,
    Path(channel): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    let (body, files) = parse_body(&headers, &bytes);
    if let Some(refused) = too_long(&body["content"]) {
        recorded
            .lock()
            .unwrap()
            .strays
            .push(format!("too long: POST {channel}"));
        return refused;
    }
    use axum::response::IntoResponse;
    {
        let mut r = recorded.lock().unwrap();
        if r.refuse_posts > 0 {
            r.refuse_posts -= 1;
            r.refused += 1;
            let retry_after = r.retry_after;
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [
                    ("x-ratelimit-limit", "5".to_string()),
                    ("x-ratelimit-remaining", "0".to_string()),
                    ("x-ratelimit-reset-after", format!("{retry_after:.3}")),
                ],
                Json(json!({
                    "message": "You are being rate limited.",
                    "retry_after": retry_after,
                    "global": false,
                })),
            )
                .into_response();
        }
    }
    let id = next_id(&recorded);
    let reference = body["message_reference"]["message_id"]
        .as_str()
        .map(str::to_string);
    let mut message = message_object(
        &id,
        &channel,
        bot_user(),
        body["content"].as_str().unwrap_or(""),
        reference.as_deref(),
    );
    if let Some(components) = body.get("components") {
        message["components"] = components.clone();
    }
    message["attachments"] = json!(
        files
            .iter()
            .enumerate()
            .map(|(i, (name, content))| json!({
                "id": format!("97000000000000{i:04}"), "filename": name, "size": content.len(),
                "url": "http://127.0.0.1/file", "proxy_url": "http://127.0.0.1/file",
                "content": content,
            }))
            .collect::<Vec<_>>()
    );
    recorded.lock().unwrap().posted.push(message.clone());
    (
        [
            ("x-ratelimit-limit", "5"),
            ("x-ratelimit-remaining", "4"),
            ("x-ratelimit-reset-after", "5.000"),
        ],
        Json(message),
    )
        .into_response()
}

/// `PATCH /channels/{c}/messages/{m}`: the posted message changes in place.
async fn edit_message(
    State(recorded): State<Shared>,
    Path((channel, message)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (body, _) = parse_body(&headers, &bytes);
    if let Some(refused) = too_long(&body["content"]) {
        return refused;
    }
    let mut r = recorded.lock().unwrap();
    r.edits.push((channel, message.clone(), body.clone()));
    let Some(posted) = r.posted.iter_mut().find(|m| m["id"] == message.as_str()) else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"message": "Unknown Message", "code": 10008})),
        )
            .into_response();
    };
    if let Some(content) = body.get("content") {
        posted["content"] = content.clone();
    }
    if let Some(components) = body.get("components") {
        posted["components"] = components.clone();
    }
    posted["edited_timestamp"] = json!("2026-11-23T12:00:01.000000+00:00");
    Json(posted.clone()).into_response()
}

fn channel_object(id: &str, name: &str, topic: Option<&str>) -> Value {
    json!({
        "id": id, "type": 0, "guild_id": GUILD_ID, "name": name, "position": 1,
        "permission_overwrites": [], "nsfw": false, "topic": topic,
        "last_message_id": null, "parent_id": null, "rate_limit_per_user": 0,
    })
}

async fn create_channel(
    State(recorded): State<Shared>,
    Path(_guild): Path<String>,
    Json(body): Json<Value>,
) -> Json<Value> {
    let id = next_id(&recorded);
    let channel = channel_object(
        &id,
        body["name"].as_str().unwrap_or(""),
        body["topic"].as_str(),
    );
    recorded.lock().unwrap().channels.push(channel.clone());
    Json(channel)
}

async fn delete_channel(
    State(recorded): State<Shared>,
    Path(channel): Path<String>,
) -> Json<Value> {
    let mut r = recorded.lock().unwrap();
    r.deleted_channels.push(channel.clone());
    let name = r
        .channels
        .iter()
        .find(|c| c["id"] == channel.as_str())
        .and_then(|c| c["name"].as_str())
        .unwrap_or("deleted")
        .to_string();
    Json(channel_object(&channel, &name, None))
}

fn answered(recorded: &Shared, token: &str, kind: &str, body: Value) {
    recorded
        .lock()
        .unwrap()
        .answers
        .push((token.to_string(), kind.to_string(), body));
}

async fn interaction_callback(
    State(recorded): State<Shared>,
    Path((_id, token)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (body, _) = parse_body(&headers, &bytes);
    if let Some(refused) = too_long(&body["data"]["content"]) {
        recorded
            .lock()
            .unwrap()
            .strays
            .push(format!("too long: callback {token}"));
        return refused;
    }
    answered(&recorded, &token, "callback", body);
    StatusCode::NO_CONTENT.into_response()
}

/// A message object for what a webhook call made the message say.
fn webhook_message(recorded: &Shared, body: &Value) -> Value {
    let id = next_id(recorded);
    let mut message = message_object(
        &id,
        "0",
        bot_user(),
        body["content"].as_str().unwrap_or(""),
        None,
    );
    message["webhook_id"] = json!(APPLICATION_ID);
    message
}

/// A webhook call that writes a message (`followup`, `edit_original`): recorded
/// under `kind`, refused as Discord does when the content is too long.
fn webhook_write(
    recorded: &Shared,
    token: &str,
    kind: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let (body, _) = parse_body(headers, bytes);
    if let Some(refused) = too_long(&body["content"]) {
        recorded
            .lock()
            .unwrap()
            .strays
            .push(format!("too long: {kind} {token}"));
        return refused;
    }
    answered(recorded, token, kind, body.clone());
    Json(webhook_message(recorded, &body)).into_response()
}

async fn followup(
    State(recorded): State<Shared>,
    Path((_app, token)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    webhook_write(&recorded, &token, "followup", &headers, &bytes)
}

async fn edit_original(
    State(recorded): State<Shared>,
    Path((_app, token)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> axum::response::Response {
    webhook_write(&recorded, &token, "edit_original", &headers, &bytes)
}

async fn delete_original(
    State(recorded): State<Shared>,
    Path((_app, token)): Path<(String, String)>,
) -> StatusCode {
    answered(&recorded, &token, "delete_original", Value::Null);
    StatusCode::NO_CONTENT
}

async fn stray(State(recorded): State<Shared>, method: Method, uri: Uri) -> StatusCode {
    recorded
        .lock()
        .unwrap()
        .strays
        .push(format!("{method} {}", uri.path()));
    StatusCode::NOT_FOUND
}

async fn serve_gateway(
    listener: TcpListener,
    url: String,
    recorded: Shared,
    dispatch: tokio::sync::broadcast::Sender<(String, Value)>,
) {
    while let Ok((stream, _)) = listener.accept().await {
        let recorded = recorded.clone();
        let url = url.clone();
        let events = dispatch.subscribe();
        tokio::spawn(async move {
            let _ = session(stream, url, recorded, events).await;
        });
    }
}

/// One gateway connection: HELLO, then READY after IDENTIFY, heartbeats acked.
async fn session(
    stream: tokio::net::TcpStream,
    url: String,
    recorded: Shared,
    mut events: tokio::sync::broadcast::Receiver<(String, Value)>,
) -> anyhow::Result<()> {
    let _peer: Option<SocketAddr> = stream.peer_addr().ok();
    let mut ws = tokio_tungstenite::accept_async(stream).await?;
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}, "s": null, "t": null});
    ws.send(Message::Text(hello.to_string())).await?;
    let mut seq = 0u64;
    let mut ready_sent = false;
    loop {
        let message = tokio::select! {
            message = ws.next() => message,
            event = events.recv(), if ready_sent => {
                if let Ok((kind, data)) = event {
                    if kind == CLOSE {
                        use tokio_tungstenite::tungstenite::protocol::CloseFrame;
                        let frame = CloseFrame {
                            code: 4000.into(),
                            reason: "unknown error".into(),
                        };
                        let _ = ws.send(Message::Close(Some(frame))).await;
                        break;
                    }
                    seq += 1;
                    let dispatch = json!({"op": 0, "s": seq, "t": kind, "d": data});
                    ws.send(Message::Text(dispatch.to_string())).await?;
                }
                continue;
            }
        };
        let Some(message) = message else { break };
        let text = match message? {
            Message::Text(text) => text,
            Message::Binary(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            Message::Close(_) => break,
            _ => continue,
        };
        let payload: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        match payload["op"].as_u64() {
            Some(1) => {
                ws.send(Message::Text(
                    json!({"op": 11, "d": null, "s": null, "t": null}).to_string(),
                ))
                .await?;
            }
            Some(2) => {
                recorded
                    .lock()
                    .unwrap()
                    .identifies
                    .push(payload["d"].clone());
                seq += 1;
                let ready = json!({
                    "op": 0, "s": seq, "t": "READY",
                    "d": {
                        "v": 10,
                        "user": bot_user(),
                        "guilds": [],
                        "session_id": "fake-session",
                        "resume_gateway_url": url,
                        "application": {"id": APPLICATION_ID, "flags": 0},
                    }
                });
                ws.send(Message::Text(ready.to_string())).await?;
                ready_sent = true;
            }
            Some(6) => {
                recorded.lock().unwrap().resumes.push(payload["d"].clone());
                seq += 1;
                let resumed = json!({"op": 0, "s": seq, "t": "RESUMED", "d": {}});
                ws.send(Message::Text(resumed.to_string())).await?;
                ready_sent = true;
            }
            _ => {}
        }
    }
    Ok(())
}
