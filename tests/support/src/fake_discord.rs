//! A fake Discord on 127.0.0.1 for end-to-end tests: the REST routes the bot uses
//! (under `/api/v10`) and a gateway (a plain `ws://` websocket) that says HELLO,
//! takes IDENTIFY, sends READY and acknowledges heartbeats. It sends every field
//! serenity requires (it drops payloads that miss one, silently), records what the
//! bot did, and answers anything it does not know with a 404 it also records.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{Method, StatusCode, Uri};
use axum::routing::{get, put};
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
    /// Slash command registrations: (guild id or "global", the commands).
    commands: Vec<(String, Value)>,
    /// IDENTIFY payloads the gateway received.
    identifies: Vec<Value>,
    /// Requests to routes the fake does not serve, as `METHOD /path`.
    strays: Vec<String>,
}

type Shared = Arc<Mutex<Recorded>>;

pub struct FakeDiscord {
    pub base_url: String,
    recorded: Shared,
    tasks: Vec<JoinHandle<()>>,
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
            .fallback(stray)
            .with_state(recorded.clone());
        let rest_task = tokio::spawn(async move {
            let _ = axum::serve(rest, app).await;
        });
        let gateway_task = tokio::spawn(serve_gateway(gateway, gateway_url, recorded.clone()));
        FakeDiscord {
            base_url,
            recorded,
            tasks: vec![rest_task, gateway_task],
        }
    }

    /// The slash commands registered so far, as (guild id or "global", commands).
    pub fn commands(&self) -> Vec<(String, Value)> {
        self.recorded.lock().unwrap().commands.clone()
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

async fn stray(State(recorded): State<Shared>, method: Method, uri: Uri) -> StatusCode {
    recorded
        .lock()
        .unwrap()
        .strays
        .push(format!("{method} {}", uri.path()));
    StatusCode::NOT_FOUND
}

async fn serve_gateway(listener: TcpListener, url: String, recorded: Shared) {
    while let Ok((stream, _)) = listener.accept().await {
        let recorded = recorded.clone();
        let url = url.clone();
        tokio::spawn(async move {
            let _ = session(stream, url, recorded).await;
        });
    }
}

/// One gateway connection: HELLO, then READY after IDENTIFY, heartbeats acked.
async fn session(
    stream: tokio::net::TcpStream,
    url: String,
    recorded: Shared,
) -> anyhow::Result<()> {
    let _peer: Option<SocketAddr> = stream.peer_addr().ok();
    let mut ws = tokio_tungstenite::accept_async(stream).await?;
    let hello = json!({"op": 10, "d": {"heartbeat_interval": 41250}, "s": null, "t": null});
    ws.send(Message::Text(hello.to_string())).await?;
    let mut seq = 0u64;
    while let Some(message) = ws.next().await {
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
            }
            _ => {}
        }
    }
    Ok(())
}
