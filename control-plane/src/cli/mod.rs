//! The terminal client inside the `chorus` binary: commands over the HTTP API and
//! the live feed of a running Chorus (`--url`/`CHORUS_URL`, the token from
//! `--token`/`CHORUS_API_TOKEN` or the data directory's `api-token`).
//!
//! `client` talks to the API, `render` and `follow` are pure (JSON in, text out),
//! `send` follows a run live. Exit codes: 0 when the command (or the thread it
//! followed) succeeded, 1 otherwise with the reason on stderr.
//!
//! The modules: `sse` (a pure event-stream parser), `feed` (the live feed followed
//! across drops: reopened with `Last-Event-ID`, backing off, for both `send` and
//! `events`), `follow::Prompt` (keeps an approval's prompt on its own line), `send` (opens
//! the event stream before it posts the message, so nothing of the thread is missed, then
//! follows the thread on `/api/events`), `events` (the feed, until Ctrl-C), `status` (the
//! server's diagnosis, else this shell's), `destroy` (the question before deleting: none
//! without a terminal and without `--yes`, so nothing is deleted), `approval_id` (a
//! unique prefix to a whole id), `task` (the task board: `chorus task …`, its own
//! pure parts in `task::{args, render, follow}`). Escape codes only on a terminal without `NO_COLOR`;
//! every command but `serve` and `completions` takes `--json`.

pub mod approval_id;
pub mod client;
pub mod destroy;
pub mod events;
pub mod feed;
pub mod follow;
pub mod grants;
pub mod heartbeat;
pub mod memory;
pub mod render;
pub mod schedule;
pub mod send;
pub mod sse;
pub mod status;
pub mod task;
pub mod worker;

use std::io::{IsTerminal, Write};

use clap::{Args, Subcommand};
use reqwest::Method;
use serde_json::{Value, json};

use client::Client;
pub use client::ClientArgs;
use render::Style;

/// The client's commands (beside `serve` in the `chorus` binary).
#[derive(Debug, Subcommand)]
pub enum ClientCommand {
    /// Create, list, show, configure or destroy agents.
    #[command(
        after_help = "Examples:\n  chorus agent create reviewer --model gpt-4o --permissions standard\n  chorus agent list\n  chorus agent configure reviewer --model claude-sonnet-4-5"
    )]
    Agent {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: AgentCommand,
    },
    /// Send a message to an agent and follow its thread live until it ends.
    #[command(
        after_help = "Examples:\n  chorus send reviewer \"Review the last commit\"\n  chorus send reviewer \"and the tests?\" --reply-to 42\n  chorus send reviewer \"Start the nightly job\" --no-wait\n\n\
        Exits 0 when the thread completes; otherwise 1, with the reason on stderr.\n\
        An approval is answered at the prompt (y/n) when stdin is a terminal."
    )]
    Send {
        #[command(flatten)]
        client: ClientArgs,
        /// The agent's name.
        agent: String,
        /// What to say.
        text: String,
        /// Reply to this message id (as `chorus thread show` lists them): into its
        /// thread while it goes on, or a new thread continuing it once it ended.
        #[arg(long)]
        reply_to: Option<u64>,
        /// Print the thread id and return at once.
        #[arg(long)]
        no_wait: bool,
    },
    /// List an agent's threads (active, and ended in the last minutes).
    #[command(after_help = "Example:\n  chorus threads reviewer --all")]
    Threads {
        #[command(flatten)]
        client: ClientArgs,
        agent: String,
        /// Every thread, however long ago it ended.
        #[arg(long)]
        all: bool,
    },
    /// Show or kill one thread (or all of an agent's).
    #[command(
        after_help = "Examples:\n  chorus thread show reviewer 3\n  chorus thread kill reviewer 3\n  chorus thread kill reviewer all"
    )]
    Thread {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: ThreadCommand,
    },
    /// List the approvals waiting for an answer.
    #[command(after_help = "Example:\n  chorus approvals --agent reviewer")]
    Approvals {
        #[command(flatten)]
        client: ClientArgs,
        /// Only this agent's.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Approve a waiting tool call.
    #[command(after_help = "Example:\n  chorus approve 3f2a9c")]
    Approve {
        #[command(flatten)]
        client: ClientArgs,
        /// The approval's id, or the start of it that only one waiting approval has
        /// (chorus approvals lists them).
        id: String,
    },
    /// Deny a waiting tool call.
    #[command(after_help = "Example:\n  chorus deny 3f2a9c")]
    Deny {
        #[command(flatten)]
        client: ClientArgs,
        /// The approval's id, or the start of it that only one waiting approval has.
        id: String,
    },
    /// What each model provider offers (the names to give --model), and why a
    /// provider is not usable.
    #[command(after_help = "Examples:\n  chorus models\n  chorus models --refresh")]
    Models {
        #[command(flatten)]
        client: ClientArgs,
        /// Check every key and list the models again first (operators and admins).
        #[arg(long)]
        refresh: bool,
    },
    /// The tools: every tool Chorus has, or what an agent's model is offered and what
    /// its profile gives a typical call of each (allow, ask or deny).
    #[command(
        after_help = "Examples:\n  chorus tools\n  chorus tools reviewer\n  chorus tools reviewer --json"
    )]
    Tools {
        #[command(flatten)]
        client: ClientArgs,
        /// The agent whose offered tools to list; all tools when omitted.
        agent: Option<String>,
    },
    /// An agent's audit log: every tool call, what its profile decided and who, newest first.
    #[command(
        after_help = "Examples:\n  chorus audit reviewer\n  chorus audit reviewer --limit 200 --before 1234"
    )]
    Audit {
        #[command(flatten)]
        client: ClientArgs,
        agent: String,
        /// How many entries (1-500).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Only entries older than this id (the next page).
        #[arg(long)]
        before: Option<i64>,
    },
    /// An agent's background jobs (commands it started to run on): running ones first.
    #[command(after_help = "Example:\n  chorus jobs reviewer")]
    Jobs {
        #[command(flatten)]
        client: ClientArgs,
        agent: String,
    },
    /// Follow the live feed of every thread (or one agent's) until Ctrl-C.
    #[command(
        after_help = "Examples:\n  chorus events\n  chorus events --agent reviewer --json\n\n\
        A line per event (steps, messages, approvals, threads ending); with --json one\n\
        JSON object per line: {\"kind\", \"id\", \"data\"}."
    )]
    Events {
        #[command(flatten)]
        client: ClientArgs,
        /// Only this agent's threads.
        #[arg(long)]
        agent: Option<String>,
    },
    /// Save, clear or restore an agent's context, or list its saved sessions.
    #[command(
        after_help = "Examples:\n  chorus context save reviewer --description \"before the refactor\"\n  chorus context history reviewer\n  chorus context restore reviewer 0b7c1f7e-…\n  chorus context clear reviewer"
    )]
    Context {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: ContextCommand,
    },
    /// Issue, list and revoke API tokens of people and automation (admins only).
    #[command(
        after_help = "Examples:\n  chorus user token create alice --label laptop\n  chorus user token list\n  chorus user token revoke alice 3f2a9c1b7d0e\n\n\
        A token acts as its user, with the role chorus.toml's [roles] gives that user\n\
        (else [roles] default). It is shown once, at create."
    )]
    User {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: UserCommand,
    },
    /// Tools granted to an agent at run time: list them, grant (`add`) or take back (`rm`).
    #[command(
        after_help = "Examples:\n  chorus grants coder\n  chorus grants coder add bash\n  chorus grants coder rm bash\n\n\
        A granted tool's every call is allowed whatever the agent's profile says (the file\n\
        jail and the sandbox still hold), from its next tool call. You grant no more than\n\
        your role may: bash and the file writers amount to the 'open' preset (admins)."
    )]
    Grants {
        #[command(flatten)]
        client: ClientArgs,
        agent: String,
        #[command(subcommand)]
        command: Option<grants::GrantsCommand>,
    },
    /// An agent's schedules: add, list, their runs, remove, run one now.
    #[command(
        after_help = "Examples:\n  chorus schedule add helper \"Summarise my inbox\" --cron \"30 7 * * mon-fri\" --tz Europe/Berlin\n  chorus schedule list helper\n  chorus schedule runs helper 1\n  chorus schedule run helper 1\n  chorus schedule remove helper 1"
    )]
    Schedule {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: schedule::ScheduleCommand,
    },
    /// An agent's memory: its entries with where each came from, a file, or
    /// retracting an entry.
    #[command(
        after_help = "Examples:\n  chorus memory show coder\n  chorus memory show coder MEMORY.md\n  chorus memory forget coder 3f9a2c01"
    )]
    Memory {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: memory::MemoryCommand,
    },
    /// Who the token you use acts as, and its role.
    #[command(after_help = "Example:\n  CHORUS_API_TOKEN=chorus_… chorus whoami")]
    Whoami {
        #[command(flatten)]
        client: ClientArgs,
    },
    /// The task board: create tasks, answer their questions, start, follow and accept them.
    #[command(
        after_help = "Examples:\n  chorus task create \"Add a cache\" -d \"Cache the lookups\"\n  chorus task answer 7 q1=Postgres\n  chorus task start 7\n  chorus task list --status review\n  chorus task accept 7"
    )]
    Task {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: task::TaskCommand,
    },
    /// Join credentials of dial-in workers (admin).
    #[command(
        after_help = "Examples:\n  chorus worker token create worker-0\n  chorus worker token list\n  chorus worker token revoke worker-0"
    )]
    Worker {
        #[command(flatten)]
        client: ClientArgs,
        #[command(subcommand)]
        command: worker::WorkerCommand,
    },
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// A user's API tokens.
    #[command(
        subcommand,
        after_help = "Examples:\n  chorus user token create alice --label laptop\n  chorus user token list alice\n  chorus user token revoke alice 3f2a9c1b7d0e"
    )]
    Token(TokenCommand),
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Issue a token for a user and print it (this once: only its hash is kept).
    #[command(
        after_help = "Example:\n  chorus user token create ci-bot --label \"nightly builds\""
    )]
    Create {
        user: String,
        /// What the token is for, shown in lists.
        #[arg(long)]
        label: Option<String>,
    },
    /// The tokens of a user, or of everyone (revoked ones too).
    #[command(after_help = "Examples:\n  chorus user token list\n  chorus user token list alice")]
    List { user: Option<String> },
    /// Revoke a token: it is refused from the next request on.
    #[command(after_help = "Example:\n  chorus user token revoke alice 3f2a9c1b7d0e")]
    Revoke { user: String, id: String },
}

#[derive(Debug, Subcommand)]
pub enum AgentCommand {
    /// Create an agent (its workspace, worker and model).
    #[command(
        after_help = "Example:\n  chorus agent create reviewer --system-prompt \"You review code.\" --permissions standard"
    )]
    Create {
        name: String,
        #[command(flatten)]
        settings: AgentSettingsArgs,
    },
    /// List the agents.
    #[command(after_help = "Examples:\n  chorus agent list\n  chorus agent list --json")]
    List,
    /// Show one agent.
    #[command(after_help = "Example:\n  chorus agent show reviewer")]
    Show { name: String },
    /// Change an agent's settings (from its next model call on).
    #[command(
        after_help = "Example:\n  chorus agent configure reviewer --model gpt-4o --idle-timeout-secs 0"
    )]
    Configure {
        name: String,
        #[command(flatten)]
        settings: AgentSettingsArgs,
    },
    /// Show an agent's identity files (SOUL.md, USER.md, HEARTBEAT.md), or set one.
    #[command(
        after_help = "Examples:\n  chorus agent identity coder\n  chorus agent identity coder soul\n  chorus agent identity coder soul --set soul.md\n  echo \"Ada, a physicist\" | chorus agent identity coder user --set -\n\n\
        A change applies from the agent's next model call."
    )]
    Identity {
        name: String,
        /// soul, user or heartbeat (all three when absent).
        which: Option<String>,
        /// Replace it with this file's content (- for stdin).
        #[arg(long)]
        set: Option<String>,
    },
    /// Run one heartbeat now (the agent reads its HEARTBEAT.md) and say what came of it.
    #[command(after_help = "Example:\n  chorus agent heartbeat helper\n\n\
        It runs whether or not the periodic heartbeat (--heartbeat-minutes) is on. An answer\n\
        beginning or ending with HEARTBEAT_OK is quiet; any other is posted as a notification.\n\
        An empty HEARTBEAT.md, or the day's [heartbeat] daily_token_cap reached, costs no model call.")]
    Heartbeat { name: String },
    /// Stop an agent's worker and delete it (its files too, unless --keep-files).
    #[command(
        after_help = "Examples:\n  chorus agent destroy reviewer\n  chorus agent destroy reviewer --keep-files --yes\n\n\
        On a terminal it says what will be deleted and asks; without one (a script),\n\
        it refuses unless --yes is given."
    )]
    Destroy {
        name: String,
        /// Keep its files (workspace, sessions, docs): a new agent of the name picks them up.
        #[arg(long)]
        keep_files: bool,
        /// Do not ask.
        #[arg(long, short = 'y')]
        yes: bool,
    },
}

#[derive(Debug, Clone, Args)]
pub struct AgentSettingsArgs {
    /// The model (a name the providers list, or provider/model).
    #[arg(long)]
    model: Option<String>,
    #[arg(long)]
    system_prompt: Option<String>,
    /// A preset (open, standard, locked) or a JSON profile {"allow": [...], "ask": [...]}.
    #[arg(long)]
    permissions: Option<String>,
    /// What an "ask" does when nobody answers: deny or allow.
    #[arg(long)]
    on_ask: Option<String>,
    /// May the agent's commands use the network: on or off.
    #[arg(long)]
    network: Option<String>,
    /// What runs its turns: api (Chorus's tool loop), claude-code or opencode (a CLI
    /// on the worker's host, with Chorus's tools only).
    #[arg(long)]
    backend: Option<String>,
    /// Seconds of quiet before the context is saved and cleared (0: never).
    #[arg(long)]
    idle_timeout_secs: Option<u64>,
    /// Bind the agent to this Discord channel (its id).
    #[arg(long)]
    discord_channel_id: Option<String>,
    /// Minutes between heartbeats, when it reads its HEARTBEAT.md (0: off).
    #[arg(long)]
    heartbeat_minutes: Option<u32>,
    /// The model heartbeats use (e.g. a cheaper one); the agent's when not set.
    #[arg(long)]
    heartbeat_model: Option<String>,
}

impl AgentSettingsArgs {
    fn body(&self) -> Value {
        let mut body = serde_json::Map::new();
        let mut put = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(key.to_string(), value);
            }
        };
        put("model", self.model.clone().map(Value::from));
        put("system_prompt", self.system_prompt.clone().map(Value::from));
        put(
            "permissions",
            self.permissions.as_ref().map(|p| {
                // A JSON object is a custom profile; anything else a preset's name.
                serde_json::from_str::<Value>(p)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| Value::from(p.as_str()))
            }),
        );
        put("on_ask", self.on_ask.clone().map(Value::from));
        put("network", self.network.clone().map(Value::from));
        put("backend", self.backend.clone().map(Value::from));
        put("idle_timeout_secs", self.idle_timeout_secs.map(Value::from));
        put(
            "discord_channel_id",
            self.discord_channel_id.clone().map(Value::from),
        );
        put("heartbeat_minutes", self.heartbeat_minutes.map(Value::from));
        put(
            "heartbeat_model",
            self.heartbeat_model.clone().map(Value::from),
        );
        Value::Object(body)
    }
}

#[derive(Debug, Subcommand)]
pub enum ThreadCommand {
    /// A thread's messages (with the ids to reply to), status and error.
    #[command(after_help = "Example:\n  chorus thread show reviewer 3")]
    Show { agent: String, id: u64 },
    /// End a thread that is still going (or `all` of the agent's).
    #[command(
        after_help = "Examples:\n  chorus thread kill reviewer 3\n  chorus thread kill reviewer all"
    )]
    Kill { agent: String, id: String },
}

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Save the agent's context as a session (described by its model unless given).
    #[command(
        after_help = "Example:\n  chorus context save reviewer --description \"before the refactor\""
    )]
    Save {
        agent: String,
        #[arg(long)]
        description: Option<String>,
    },
    /// Save, then clear the agent's context.
    #[command(after_help = "Example:\n  chorus context clear reviewer")]
    Clear { agent: String },
    /// Replace the context with a saved session (the current one is saved first).
    #[command(
        after_help = "Example:\n  chorus context restore reviewer 0b7c1f7e-1111-2222-3333-444455556666\n\n\
        The session's messages become one idle thread; reply to it to go on:\n  chorus send reviewer \"…\" --reply-to <message id>"
    )]
    Restore { agent: String, session: String },
    /// The agent's saved sessions, newest first.
    #[command(after_help = "Example:\n  chorus context history reviewer")]
    History { agent: String },
}

/// Runs a client command; `Ok(false)` is a failure already explained on stderr.
pub async fn run(command: ClientCommand) -> anyhow::Result<bool> {
    let (args, command) = split(command);
    let client = Client::new(&args)?;
    let style = Style::for_terminal(
        std::io::stdout().is_terminal(),
        std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()),
    );
    let out = Printer { json: args.json };
    match command {
        Cmd::Send {
            agent,
            text,
            reply_to,
            no_wait,
        } => {
            send::send(
                &client,
                send::SendOptions {
                    agent: &agent,
                    text: &text,
                    reply_to,
                    no_wait,
                    json: args.json,
                    style,
                },
            )
            .await
        }
        Cmd::Agent(AgentCommand::Create { name, settings }) => {
            let mut body = settings.body();
            body["name"] = Value::from(name);
            let agent = client.post("/api/agents", &body).await?;
            out.show(&agent, |a| render::agent(a, style))
        }
        Cmd::Agent(AgentCommand::List) => {
            let list = client.get("/api/agents").await?;
            out.show(&list, |l| render::agents(l, style))
        }
        Cmd::Agent(AgentCommand::Identity { name, which, set }) => {
            memory::identity(&client, &name, which.as_deref(), set.as_deref(), out).await
        }
        Cmd::Memory(command) => memory::run(&client, command, out).await,
        Cmd::Agent(AgentCommand::Show { name }) => {
            let agent = client.get(&format!("/api/agents/{name}")).await?;
            out.show(&agent, |a| render::agent(a, style))
        }
        Cmd::Agent(AgentCommand::Configure { name, settings }) => {
            let body = settings.body();
            if body.as_object().is_some_and(serde_json::Map::is_empty) {
                anyhow::bail!(
                    "nothing to change: give at least one of --model, --system-prompt, --permissions, --on-ask, --network, --backend, --idle-timeout-secs, --heartbeat-minutes, --heartbeat-model"
                );
            }
            let agent = client
                .call(Method::PATCH, &format!("/api/agents/{name}"), Some(&body))
                .await?;
            out.show(&agent, |a| render::agent(a, style))
        }
        Cmd::Agent(AgentCommand::Heartbeat { name }) => heartbeat::run(&client, &name, out).await,
        Cmd::Agent(AgentCommand::Destroy {
            name,
            keep_files,
            yes,
        }) => {
            if !yes && !destroy::confirm(&client, &name, keep_files).await? {
                eprintln!("Not destroyed.");
                return Ok(false);
            }
            let answer = destroy::destroy(&client, &name, keep_files).await?;
            out.show(&answer, |_| {
                format!(
                    "Agent {name} destroyed{}.\n",
                    if keep_files { " (files kept)" } else { "" }
                )
            })
        }
        Cmd::Threads { agent, all } => {
            let list = client
                .get(&format!(
                    "/api/agents/{agent}/threads{}",
                    if all { "?all=true" } else { "" }
                ))
                .await?;
            out.show(&list, |l| render::threads(l, style))
        }
        Cmd::Thread(ThreadCommand::Show { agent, id }) => {
            let thread = client
                .get(&format!("/api/agents/{agent}/threads/{id}"))
                .await?;
            out.show(&thread, |t| render::thread(t, style))
        }
        Cmd::Thread(ThreadCommand::Kill { agent, id }) => {
            let path = if id == "all" {
                format!("/api/agents/{agent}/threads")
            } else {
                let id: u64 = id
                    .parse()
                    .map_err(|_| anyhow::anyhow!("'{id}' is neither a thread id nor 'all'"))?;
                format!("/api/agents/{agent}/threads/{id}")
            };
            let answer = client.call(Method::DELETE, &path, None).await?;
            out.show(&answer, |a| match a["killed"].as_array() {
                Some(ids) if ids.is_empty() => "No thread was going.\n".to_string(),
                Some(ids) => format!(
                    "Killed threads {}.\n",
                    ids.iter()
                        .map(Value::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => format!(
                    "Thread {id} {}.\n",
                    a["status"].as_str().unwrap_or("killed")
                ),
            })
        }
        Cmd::Approvals { agent } => {
            let path = match agent {
                Some(agent) => format!("/api/approvals?agent={agent}"),
                None => "/api/approvals".to_string(),
            };
            let list = client.get(&path).await?;
            out.show(&list, |l| render::approvals(l, style))
        }
        Cmd::Answer { id, approve } => {
            let id = approval_id::resolve(&client, &id).await?;
            let decision = if approve { "approve" } else { "deny" };
            let answer = client
                .post(
                    &format!("/api/approvals/{id}"),
                    &json!({ "decision": decision }),
                )
                .await?;
            out.show(&answer, |a| {
                format!(
                    "{} {} ({}).\n",
                    if approve { "Approved" } else { "Denied" },
                    id,
                    a["tool"].as_str().unwrap_or("tool call")
                )
            })
        }
        Cmd::Models { refresh } => {
            let snapshot = if refresh {
                client.post("/api/models/refresh", &json!({})).await?
            } else {
                client.get("/api/models").await?
            };
            out.show(&snapshot, |s| render::models(s, style))
        }
        Cmd::Tools { agent } => {
            let tools = match &agent {
                Some(agent) => client.get(&format!("/api/agents/{agent}/tools")).await?,
                None => client.get("/api/tools").await?,
            };
            out.show(&tools, |t| render::tools(t, style))
        }
        Cmd::Audit {
            agent,
            limit,
            before,
        } => {
            let mut path = format!("/api/agents/{agent}/audit?limit={limit}");
            if let Some(before) = before {
                path.push_str(&format!("&before={before}"));
            }
            let page = client.get(&path).await?;
            out.show(&page, |p| render::audit(p, style))
        }
        Cmd::Jobs { agent } => {
            let list = client.get(&format!("/api/agents/{agent}/jobs")).await?;
            out.show(&list, |l| render::jobs(l, style))
        }
        Cmd::Events { agent } => events::follow(&client, agent.as_deref(), args.json, style).await,
        Cmd::Context(command) => context(&client, command, out).await,
        Cmd::User(UserCommand::Token(command)) => token(&client, command, out, style).await,
        Cmd::Grants { agent, command } => grants::run(&client, &agent, command, out).await,
        Cmd::Schedule(command) => schedule::run(&client, command, out).await,
        Cmd::Whoami => {
            let me = client.get("/api/whoami").await?;
            out.show(&me, |m| {
                format!(
                    "{} ({})\n",
                    m["user"].as_str().unwrap_or("?"),
                    m["role"].as_str().unwrap_or("?")
                )
            })
        }
        Cmd::Task(command) => task::run(&client, command, args.json, style).await,
        Cmd::Worker(command) => {
            let answer = worker::run(&client, command, args.json).await?;
            out.show(&answer, worker::text)
        }
    }
}

async fn token(
    client: &Client,
    command: TokenCommand,
    out: Printer,
    style: Style,
) -> anyhow::Result<bool> {
    match command {
        TokenCommand::Create { user, label } => {
            let body = match label {
                Some(label) => json!({ "label": label }),
                None => json!({}),
            };
            let issued = client
                .post(&format!("/api/users/{user}/tokens"), &body)
                .await?;
            out.show(&issued, |t| {
                format!(
                    "Token {} for {user} (role {}):\n{}\nIt is shown this once; give it to its holder as CHORUS_API_TOKEN.\n",
                    t["id"].as_str().unwrap_or("?"),
                    t["role"].as_str().unwrap_or("?"),
                    t["token"].as_str().unwrap_or("?"),
                )
            })
        }
        TokenCommand::List { user } => {
            let path = match user {
                Some(user) => format!("/api/users/{user}/tokens"),
                None => "/api/tokens".to_string(),
            };
            let list = client.get(&path).await?;
            out.show(&list, |l| render::tokens(l, style))
        }
        TokenCommand::Revoke { user, id } => {
            let revoked = client
                .call(
                    Method::DELETE,
                    &format!("/api/users/{user}/tokens/{id}"),
                    None,
                )
                .await?;
            out.show(&revoked, |_| format!("Token {id} of {user} revoked.\n"))
        }
    }
}

async fn context(client: &Client, command: ContextCommand, out: Printer) -> anyhow::Result<bool> {
    match command {
        ContextCommand::Save { agent, description } => {
            let body = match description {
                Some(d) => json!({ "description": d }),
                None => json!({}),
            };
            let saved = client
                .post(&format!("/api/agents/{agent}/context/save"), &body)
                .await?;
            out.show(&saved, |s| {
                format!(
                    "Saved session {}: {} ({} messages).\n",
                    s["session"]["id"].as_str().unwrap_or("?"),
                    s["session"]["description"].as_str().unwrap_or(""),
                    s["session"]["message_count"]
                )
            })
        }
        ContextCommand::Clear { agent } => {
            let cleared = client
                .post(&format!("/api/agents/{agent}/context/clear"), &json!({}))
                .await?;
            out.show(&cleared, |c| {
                let saved = c["saved"]["id"]
                    .as_str()
                    .map(|id| format!(" (saved first as session {id})"))
                    .unwrap_or_default();
                format!("Context cleared{saved}.\n")
            })
        }
        ContextCommand::Restore { agent, session } => {
            let restored = client
                .post(
                    &format!("/api/agents/{agent}/context/restore"),
                    &json!({ "session_id": session }),
                )
                .await?;
            out.show(&restored, |r| {
                format!(
                    "Restored session {} into thread {}. Continue it with:\n  chorus send {agent} \"…\" --reply-to {}\n",
                    r["session"]["id"].as_str().unwrap_or("?"),
                    r["thread_id"],
                    r["message_id"]
                )
            })
        }
        ContextCommand::History { agent } => {
            let history = client
                .get(&format!("/api/agents/{agent}/context/history"))
                .await?;
            out.show(&history, render::sessions)
        }
    }
}

/// Prints an answer: as JSON for scripts, else as text for people.
#[derive(Clone, Copy)]
struct Printer {
    json: bool,
}

impl Printer {
    fn show(self, value: &Value, text: impl FnOnce(&Value) -> String) -> anyhow::Result<bool> {
        let mut out = std::io::stdout();
        if self.json {
            writeln!(out, "{}", serde_json::to_string_pretty(value)?)?;
        } else {
            write!(out, "{}", text(value))?;
        }
        Ok(true)
    }
}

/// A command without its connection arguments.
enum Cmd {
    Agent(AgentCommand),
    Send {
        agent: String,
        text: String,
        reply_to: Option<u64>,
        no_wait: bool,
    },
    Threads {
        agent: String,
        all: bool,
    },
    Thread(ThreadCommand),
    Approvals {
        agent: Option<String>,
    },
    Answer {
        id: String,
        approve: bool,
    },
    Models {
        refresh: bool,
    },
    Tools {
        agent: Option<String>,
    },
    Audit {
        agent: String,
        limit: u32,
        before: Option<i64>,
    },
    Jobs {
        agent: String,
    },
    Events {
        agent: Option<String>,
    },
    Context(ContextCommand),
    User(UserCommand),
    Whoami,
    Task(task::TaskCommand),
    Worker(worker::WorkerCommand),
    Grants {
        agent: String,
        command: Option<grants::GrantsCommand>,
    },
    Schedule(schedule::ScheduleCommand),
    Memory(memory::MemoryCommand),
}

fn split(command: ClientCommand) -> (ClientArgs, Cmd) {
    match command {
        ClientCommand::Agent { client, command } => (client, Cmd::Agent(command)),
        ClientCommand::Send {
            client,
            agent,
            text,
            reply_to,
            no_wait,
        } => (
            client,
            Cmd::Send {
                agent,
                text,
                reply_to,
                no_wait,
            },
        ),
        ClientCommand::Threads { client, agent, all } => (client, Cmd::Threads { agent, all }),
        ClientCommand::Thread { client, command } => (client, Cmd::Thread(command)),
        ClientCommand::Approvals { client, agent } => (client, Cmd::Approvals { agent }),
        ClientCommand::Approve { client, id } => (client, Cmd::Answer { id, approve: true }),
        ClientCommand::Deny { client, id } => (client, Cmd::Answer { id, approve: false }),
        ClientCommand::Models { client, refresh } => (client, Cmd::Models { refresh }),
        ClientCommand::Tools { client, agent } => (client, Cmd::Tools { agent }),
        ClientCommand::Audit {
            client,
            agent,
            limit,
            before,
        } => (
            client,
            Cmd::Audit {
                agent,
                limit,
                before,
            },
        ),
        ClientCommand::Jobs { client, agent } => (client, Cmd::Jobs { agent }),
        ClientCommand::Events { client, agent } => (client, Cmd::Events { agent }),
        ClientCommand::Context { client, command } => (client, Cmd::Context(command)),
        ClientCommand::User { client, command } => (client, Cmd::User(command)),
        ClientCommand::Whoami { client } => (client, Cmd::Whoami),
        ClientCommand::Grants {
            client,
            agent,
            command,
        } => (client, Cmd::Grants { agent, command }),
        ClientCommand::Task { client, command } => (client, Cmd::Task(command)),
        ClientCommand::Schedule { client, command } => (client, Cmd::Schedule(command)),
        ClientCommand::Memory { client, command } => (client, Cmd::Memory(command)),
        ClientCommand::Worker { client, command } => (client, Cmd::Worker(command)),
    }
}
