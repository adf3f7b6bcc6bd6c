//! The one module that owns serenity: it connects the bot (to Discord, or to
//! `[discord] api_base` for tests and self-hosted gateways), registers the slash
//! commands, and turns gateway events into frontend-neutral calls. Serenity types
//! stay in here.
//!
//! A Discord outage never stops the rest of Chorus: the client runs in a task of
//! its own, and a failure is logged, not returned.

use std::sync::Arc;
use std::time::Duration;

use serenity::all::{
    ChannelId, ChannelType, Client, ClientBuilder, Command, CommandDataOption,
    CommandDataOptionValue, CommandInteraction, ComponentInteraction, Context,
    CreateAllowedMentions, CreateAttachment, CreateChannel, CreateInteractionResponse,
    CreateInteractionResponseFollowup, CreateInteractionResponseMessage, EditInteractionResponse,
    EventHandler, GatewayIntents, GuildId, Http, HttpBuilder, Interaction, Message, Ready,
    ResumedEvent,
};
use tokio::task::JoinHandle;

use super::access::DiscordRoles;
use super::actions::{Actions, Caller, Guild, Reply};
use super::approvals::{ApprovalPosts, Click};
use super::commands;
use super::connection::{self, DiscordState};
use super::messages::{Incoming, Messages};
use super::outbox::Outbox;
use super::rest::RestTransport;
use super::slash::{self, OptionValue};
use super::split::{ATTACH_AFTER_CHARS, MESSAGE_CHARS, Outgoing, plan};
use crate::config::{DiscordSettings, Settings};
use crate::services::Services;

/// A command not done by then is deferred (Discord drops an interaction that gets
/// no answer within 3 s) and finished with an edit of the deferred answer.
const DEFER_AFTER: Duration = Duration::from_millis(1500);

struct Handler {
    guild: Option<GuildId>,
    /// How the connection stands (`connection`).
    state: Arc<tokio::sync::watch::Sender<DiscordState>>,
    messages: Arc<Messages>,
    actions: Arc<Actions>,
    approvals: Arc<ApprovalPosts>,
}

#[serenity::async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        tracing::info!("discord: connected as {}", ready.user.name);
        self.state.send_replace(DiscordState::Connected {
            bot: ready.user.name.clone(),
        });
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

    async fn resume(&self, _ctx: Context, _event: ResumedEvent) {
        tracing::info!("the Discord gateway connection was resumed");
    }

    async fn message(&self, _ctx: Context, message: Message) {
        let incoming = Incoming {
            channel_id: message.channel_id.get(),
            message_id: message.id.get(),
            author_id: message.author.id.get(),
            author_is_bot: message.author.bot,
            role_ids: message
                .member
                .as_ref()
                .map(|m| m.roles.iter().map(|r| r.get().to_string()).collect())
                .unwrap_or_default(),
            content: message.content.clone(),
            reply_to: message
                .message_reference
                .as_ref()
                .and_then(|r| r.message_id)
                .map(serenity::all::MessageId::get),
        };
        self.messages.received(incoming).await;
    }

    async fn interaction_create(&self, ctx: Context, interaction: Interaction) {
        match interaction {
            Interaction::Command(command) => {
                run_command(&ctx, &command, &self.actions, self.guild).await
            }
            Interaction::Component(click) => clicked(&ctx, &click, &self.approvals).await,
            _ => {}
        }
    }
}

/// A command's options without serenity's types.
fn neutral(options: &[CommandDataOption]) -> Vec<(String, OptionValue)> {
    options
        .iter()
        .map(|o| {
            let value = match &o.value {
                CommandDataOptionValue::String(s) => OptionValue::Text(s.clone()),
                CommandDataOptionValue::Integer(i) => OptionValue::Integer(*i),
                CommandDataOptionValue::Boolean(b) => OptionValue::Boolean(*b),
                CommandDataOptionValue::SubCommand(inner)
                | CommandDataOptionValue::SubCommandGroup(inner) => {
                    OptionValue::Sub(neutral(inner))
                }
                _ => OptionValue::Other,
            };
            (o.name.clone(), value)
        })
        .collect()
}

fn role_ids(member: Option<&serenity::all::Member>) -> Vec<String> {
    member
        .map(|m| m.roles.iter().map(|r| r.get().to_string()).collect())
        .unwrap_or_default()
}

/// The guild a command runs in, for the channels it makes.
struct SerenityGuild {
    http: Arc<Http>,
    guild: Option<GuildId>,
}

#[tonic::async_trait]
impl Guild for SerenityGuild {
    async fn create_text_channel(&self, name: &str, topic: &str) -> Result<u64, String> {
        let guild = self
            .guild
            .ok_or("commands that make channels work only in a server")?;
        let mut builder = CreateChannel::new(name).kind(ChannelType::Text);
        if !topic.is_empty() {
            builder = builder.topic(topic);
        }
        guild
            .create_channel(&self.http, builder)
            .await
            .map(|c| c.id.get())
            .map_err(|e| e.to_string())
    }
}

fn no_pings() -> CreateAllowedMentions {
    CreateAllowedMentions::new()
}

async fn run_command(
    ctx: &Context,
    command: &CommandInteraction,
    actions: &Actions,
    registered_in: Option<GuildId>,
) {
    let invocation = match slash::parse(&command.data.name, &neutral(&command.data.options)) {
        Ok(invocation) => invocation,
        Err(why) => {
            let reply = Reply {
                text: why,
                private: true,
                delete_channel: None,
            };
            answer(ctx, command, reply, None).await;
            return;
        }
    };
    let private = invocation.private_answer();
    let caller = Caller {
        user_id: command.user.id.get(),
        role_ids: role_ids(command.member.as_deref()),
        channel_id: command.channel_id.get(),
    };
    let guild = SerenityGuild {
        http: ctx.http.clone(),
        guild: command.guild_id.or(registered_in),
    };
    let work = actions.run(invocation, &caller, &guild);
    tokio::pin!(work);
    let deferred = tokio::select! {
        reply = &mut work => {
            answer(ctx, command, reply, None).await;
            return;
        }
        () = tokio::time::sleep(DEFER_AFTER) => {
            let defer = CreateInteractionResponse::Defer(
                CreateInteractionResponseMessage::new().ephemeral(private),
            );
            if let Err(e) = command.create_response(&ctx.http, defer).await {
                tracing::warn!(command = %command.data.name, error = %e, "cannot defer a Discord command");
            }
            private
        }
    };
    let reply = work.await;
    answer(ctx, command, reply, Some(deferred)).await;
}

/// Gives a command's answer: as the response, or (`deferred`: whether the deferral
/// was private) as an edit of the deferred one; the rest of a long answer as
/// follow-ups, or as a file past a size.
async fn answer(ctx: &Context, command: &CommandInteraction, reply: Reply, deferred: Option<bool>) {
    let http = &ctx.http;
    let (first, rest, file) = match plan(&reply.text, MESSAGE_CHARS, ATTACH_AFTER_CHARS) {
        Outgoing::Parts(mut parts) => {
            let first = if parts.is_empty() {
                "(nothing)".to_string()
            } else {
                parts.remove(0)
            };
            (first, parts, None)
        }
        Outgoing::File { preview, content } => (
            preview,
            Vec::new(),
            Some(CreateAttachment::bytes(content.into_bytes(), "output.md")),
        ),
    };
    let result = match deferred {
        None => {
            let mut message = CreateInteractionResponseMessage::new()
                .content(first)
                .ephemeral(reply.private)
                .allowed_mentions(no_pings());
            if let Some(file) = file {
                message = message.add_file(file);
            }
            command
                .create_response(http, CreateInteractionResponse::Message(message))
                .await
        }
        // Deferred in public but meant for one person: the public placeholder goes
        // and the answer comes as a private follow-up.
        Some(false) if reply.private => {
            let _ = command.delete_response(http).await;
            let mut followup = CreateInteractionResponseFollowup::new()
                .content(first)
                .ephemeral(true)
                .allowed_mentions(no_pings());
            if let Some(file) = file {
                followup = followup.add_file(file);
            }
            command.create_followup(http, followup).await.map(drop)
        }
        Some(_) => {
            let mut edit = EditInteractionResponse::new()
                .content(first)
                .allowed_mentions(no_pings());
            if let Some(file) = file {
                edit = edit.new_attachment(file);
            }
            command.edit_response(http, edit).await.map(drop)
        }
    };
    if let Err(e) = result {
        tracing::warn!(command = %command.data.name, error = %e, "cannot answer a Discord command");
        return;
    }
    for part in rest {
        let followup = CreateInteractionResponseFollowup::new()
            .content(part)
            .ephemeral(reply.private)
            .allowed_mentions(no_pings());
        if let Err(e) = command.create_followup(http, followup).await {
            tracing::warn!(command = %command.data.name, error = %e, "cannot post the rest of a Discord answer");
            return;
        }
    }
    if let Some(channel) = reply.delete_channel
        && let Err(e) = ChannelId::new(channel).delete(http).await
    {
        tracing::warn!(channel, error = %e, "cannot delete a destroyed agent's Discord channel");
    }
}

async fn clicked(ctx: &Context, click: &ComponentInteraction, approvals: &ApprovalPosts) {
    let outcome = approvals
        .clicked(
            &click.data.custom_id,
            click.user.id.get(),
            &role_ids(click.member.as_ref()),
            &click.message.content,
        )
        .await;
    let response = match outcome {
        Click::Refused(why) => CreateInteractionResponse::Message(
            CreateInteractionResponseMessage::new()
                .content(why)
                .ephemeral(true),
        ),
        Click::Answered(text) => CreateInteractionResponse::UpdateMessage(
            CreateInteractionResponseMessage::new()
                .content(text)
                .components(Vec::new())
                .allowed_mentions(no_pings()),
        ),
    };
    if let Err(e) = click.create_response(&ctx.http, response).await {
        tracing::warn!(error = %e, "cannot answer a Discord button click");
    }
}

/// What the bot asks the gateway for: guild messages with their text.
pub fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS | GatewayIntents::GUILD_MESSAGES | GatewayIntents::MESSAGE_CONTENT
}

/// Connects the bot in a task of its own. `api` is the services the HTTP API
/// uses: a slash command does what the matching request does, as its Discord user.
pub async fn start(
    discord: DiscordSettings,
    api: Services,
    settings: Settings,
) -> anyhow::Result<JoinHandle<()>> {
    let token = discord.token.expose().to_string();
    // Posts go through the outbox (pacing, 429s), straight to the REST API.
    let outbox = Outbox::new(Arc::new(RestTransport::new(
        discord.api_base.as_deref(),
        &token,
    )));
    let roles = DiscordRoles::new(discord.roles.clone());
    let messages = Messages::new(
        api.store.clone(),
        api.runs.clone(),
        outbox.clone(),
        api.gate.clone(),
        roles.clone(),
    );
    // Answers a stopped control plane still owed are followed again (they post
    // through REST, which needs no gateway).
    messages.resume_owed().await;
    let approvals = Arc::new(ApprovalPosts::new(
        api.gate.clone(),
        outbox.clone(),
        roles.clone(),
    ));
    // Validated as a channel id when the settings were read.
    let task_posts = api
        .tasks
        .settings()
        .discord_channel
        .as_deref()
        .and_then(|c| c.parse::<u64>().ok())
        .map(|channel| {
            super::notices::TaskPosts::start(channel, api.engine.clone(), outbox.clone())
        });
    let notices = super::notices::watch_feed(
        api.store.clone(),
        api.runs.clone(),
        outbox.clone(),
        approvals.clone(),
        task_posts,
    );
    // Heard before the first attempt, so its failure is said too.
    let failures = crate::telemetry::gateway_watch::failures();
    let state = api.discord_state.clone();
    let handler = Handler {
        guild: discord.guild_id.map(GuildId::new),
        state: state.clone(),
        messages,
        actions: Arc::new(Actions {
            api,
            settings,
            roles,
            outbox,
            answers: std::sync::Mutex::default(),
        }),
        approvals,
    };
    let settings = discord;
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
            () = notices => {}
            () = connection::watch_failures(failures, state) => {}
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
