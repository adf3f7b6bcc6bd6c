//! The one module that owns serenity: it connects the bot (to Discord, or to
//! `[discord] api_base` for tests and self-hosted gateways), registers the slash
//! commands, and turns gateway events into frontend-neutral calls. Serenity types
//! stay in here.
//!
//! A Discord outage never stops the rest of Chorus: the client runs in a task of
//! its own, and a failure is logged, not returned.

use std::sync::Arc;

use serenity::all::{
    Client, ClientBuilder, Command, Context, EventHandler, GatewayIntents, GuildId, HttpBuilder,
    Message, Ready,
};
use tokio::task::JoinHandle;

use super::commands;
use super::messages::{Incoming, Messages};
use super::outbox::Outbox;
use super::rest::RestTransport;
use crate::config::DiscordSettings;
use crate::runs::Runs;
use crate::store::Store;

struct Handler {
    guild: Option<GuildId>,
    messages: Arc<Messages>,
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        tracing::info!(bot = %ready.user.name, "connected to Discord");
        let registered = match self.guild {
            Some(guild) => guild.set_commands(&ctx.http, commands::all()).await,
            None => Command::set_global_commands(&ctx.http, commands::all()).await,
        };
        match registered {
            Ok(list) => tracing::info!(
                commands = list.len(),
                scope = self
                    .guild
                    .map_or("global".to_string(), |g| format!("guild {g}")),
                "Discord slash commands registered"
            ),
            Err(e) => tracing::error!(error = %e, "cannot register Discord slash commands"),
        }
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let incoming = Incoming {
            channel_id: message.channel_id.get(),
            message_id: message.id.get(),
            author_id: message.author.id.get(),
            author_is_bot: message.author.bot,
            content: message.content.clone(),
            reply_to: message
                .message_reference
                .as_ref()
                .and_then(|r| r.message_id)
                .map(|id| id.get()),
        };
        self.messages.received(incoming).await;
    }
}

/// What the bot asks the gateway for: guild messages with their text.
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS | GatewayIntents::GUILD_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

/// Connects the bot in a task of its own.
pub async fn start(
    settings: DiscordSettings,
    store: Store,
    runs: Arc<Runs>,
) -> anyhow::Result<JoinHandle<()>> {
    let token = settings.token.expose().to_string();
    // Posts go through the outbox (pacing, 429s), straight to the REST API.
    let outbox = Outbox::new(Arc::new(RestTransport::new(
        settings.api_base.as_deref(),
        &token,
    )));
    let messages = Messages::new(store, runs, outbox);
    let notifications = messages.clone();
    let handler = Handler {
        guild: settings.guild_id.map(GuildId::new),
        messages,
    };
    let builder = match &settings.api_base {
        // Another base: serenity's own ratelimiter would ignore the proxy and reach
        // Discord itself, so it is off here (the outgoing queue paces requests).
        Some(base) => ClientBuilder::new_with_http(
            HttpBuilder::new(&token)
                .proxy(base.clone())
                .ratelimiter_disabled(true)
                .build(),
            intents(),
        ),
        None => Client::builder(&token, intents()),
    };
    let mut client = builder.event_handler(handler).await?;
    if let Some(base) = &settings.api_base {
        // Where the gateway is, asked of that base too: a failed lookup must never
        // fall back to Discord's own gateway.
        let url = gateway_url(base).await?;
        *client.ws_url.lock().await = url;
    }
    // One task: stopping it (at shutdown) stops the connection and the
    // notifications together.
    Ok(tokio::spawn(async move {
        tokio::select! {
            ended = client.start() => {
                if let Err(e) = ended {
                    tracing::error!(error = %e, "the Discord connection ended; the HTTP API goes on");
                }
            }
            () = notifications.post_notifications() => {}
        }
    }))
}

async fn gateway_url(base: &str) -> anyhow::Result<String> {
    let answer: serde_json::Value = reqwest::get(format!("{base}/api/v10/gateway"))
        .await?
        .error_for_status()?
        .json()
        .await?;
    answer["url"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("{base}/api/v10/gateway gave no url: {answer}"))
}
