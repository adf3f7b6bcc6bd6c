//! The services every front end uses (the HTTP API, Discord, the coming web page):
//! the store, the agents, runs and workers, the gate, sessions and what the status
//! shows. Front ends depend on this module and not on each other: Discord calls
//! the same services the HTTP handlers do, not the handlers.

use std::sync::Arc;

use crate::agents::AgentService;
use crate::gate::ToolGate;
use crate::providers::catalog::Catalog;
use crate::runs::Runs;
use crate::secrets::Secret;
use crate::sessions::Sessions;
use crate::store::Store;
use crate::workers::WorkerManager;

#[derive(Clone)]
pub struct Services {
    pub store: Store,
    pub agents: Arc<AgentService>,
    pub runs: Arc<Runs>,
    pub workers: Arc<WorkerManager>,
    pub catalog: Arc<Catalog>,
    pub gate: Arc<ToolGate>,
    pub sessions: Arc<Sessions>,
    /// The task board.
    pub tasks: Arc<crate::tasks::Board>,
    /// What moves tasks between people and agents (planning, start, answers).
    pub engine: Arc<crate::tasks::engine::Engine>,
    /// Agents' schedules (`schedules`).
    pub schedules: Arc<crate::schedules::Scheduler>,
    /// Agents' heartbeats (`heartbeat`).
    pub heartbeats: Arc<crate::heartbeat::Heartbeats>,
    pub api_token: Secret,
    /// How tool processes are confined on this host (`sandbox_probe`).
    pub sandbox: String,
    /// How long ended threads stay in the thread list.
    pub thread_retention: std::time::Duration,
    /// `GET /metrics` is served without the token.
    pub metrics_open: bool,
    /// Dial-in workers' join credentials (`/api/workers/tokens`).
    pub worker_credentials: Arc<crate::workers::credentials::JoinCredentials>,
    /// What `GET /api/status` diagnoses: this server's settings and addresses.
    pub setup: Arc<crate::doctor::ServerSetup>,
    /// How the Discord bot's connection stands (its front end keeps it current).
    pub discord_state: Arc<tokio::sync::watch::Sender<crate::discord::connection::DiscordState>>,
    /// The web page's login sessions and login limit (`web`).
    pub web: Arc<crate::web::sessions::Web>,
}
