//! `/api/agents`: create, list, show, configure, destroy.

use crate::switches::{Network, OnAsk};
use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use serde::{Deserialize, Serialize};

use super::{ApiError, ApiJson, AppState, Caller};
use crate::agents::CreateAgent;
use crate::heartbeat::HeartbeatChange;
use crate::permissions::PermissionsSetting;
use crate::store::{AgentRecord, AgentUpdate};
use crate::workers::WorkerStatus;
use chorus_proto::domain::{Backend, BackendStatus, Usage};

/// Whether the agent's CLI can run where it is served (the serving worker's probe,
/// else the local one).
#[derive(Serialize)]
struct BackendStatusView {
    usable: bool,
    version: Option<String>,
    reason: Option<String>,
}

impl From<BackendStatus> for BackendStatusView {
    fn from(status: BackendStatus) -> Self {
        BackendStatusView {
            usable: status.usable,
            version: status.version,
            reason: status.reason,
        }
    }
}

#[derive(Serialize)]
pub struct AgentView {
    name: String,
    status: &'static str,
    model: Option<String>,
    system_prompt: String,
    /// A preset name, or the custom profile.
    permissions: serde_json::Value,
    on_ask: OnAsk,
    /// `on` or `off`: may the agent's tool processes use TCP.
    network: Network,
    /// What runs its turns: `api`, `claude-code` or `opencode`.
    backend: Backend,
    /// For a CLI backend, whether the CLI can run where the agent is served; null for `api`.
    backend_status: Option<BackendStatusView>,
    /// How tool processes are confined here: "landlock (abi N)" or "unavailable: …".
    sandbox: String,
    created_at: String,
    updated_at: String,
    workspace: String,
    worker: WorkerStatus,
    /// Tokens used by all of the agent's threads; null when no provider reported any.
    usage: Option<Usage>,
    /// The agent's own idle timeout in seconds (0: never); null: the server's.
    idle_timeout_secs: Option<u64>,
    /// The idle timeout that applies, in seconds; 0: the context is never idle-saved.
    effective_idle_timeout_secs: u64,
    /// When its context was last cleared; null: never.
    context_cleared_at: Option<String>,
    /// The Discord channel it is bound to; null: none.
    discord_channel_id: Option<String>,
    /// Its MCP servers by name: each one's setting (secrets as references) and
    /// `state` (`not_started`, `starting`, `running` with its `tools`, `failed` with
    /// the `error`), as its worker last reported.
    mcp_servers: serde_json::Value,
    /// Minutes between heartbeats (0: off, the default).
    heartbeat_minutes: u32,
    /// The model heartbeats use; null: the agent's.
    heartbeat_model: Option<String>,
    /// The next periodic heartbeat (UTC); null: off.
    heartbeat_next_at: Option<String>,
}

/// The agent's MCP servers as stored (none: empty).
pub(super) async fn mcp_setting(
    state: &AppState,
    name: &str,
) -> Result<crate::mcp::McpServersSetting, ApiError> {
    let Some(stored) = state.store.mcp_servers(name).await? else {
        return Ok(Default::default());
    };
    let value: serde_json::Value = serde_json::from_str(&stored).unwrap_or_default();
    // A stored setting that no longer reads shows as none; its runs fail saying why.
    Ok(crate::mcp::McpServersSetting::parse(&value).unwrap_or_default())
}

/// A request's `mcp_servers`, checked (names, form, secrets chorus has), as stored.
fn checked_mcp(state: &AppState, value: &serde_json::Value) -> Result<Option<String>, ApiError> {
    let setting = crate::mcp::McpServersSetting::parse(value).map_err(ApiError::bad_request)?;
    state
        .setup
        .settings
        .mcp
        .missing(&setting)
        .map_err(ApiError::bad_request)?;
    Ok((!setting.0.is_empty()).then(|| setting.to_json().to_string()))
}

async fn view(state: &AppState, agent: AgentRecord) -> Result<AgentView, ApiError> {
    let usage = state.store.token_usage(&agent.name, None).await?;
    if agent.backend.cli().is_some() {
        state.workers.backends().probe_local_once().await;
    }
    let backend_status = state
        .workers
        .backends()
        .of_agent(&agent.name, agent.backend)
        .map(BackendStatusView::from);
    let mcp_servers = state
        .workers
        .mcp()
        .view(&agent.name, &mcp_setting(state, &agent.name).await?);
    let heartbeat = state.heartbeats.setting(&agent.name).await?;
    Ok(AgentView {
        heartbeat_minutes: heartbeat.as_ref().map_or(0, |h| h.minutes),
        heartbeat_next_at: heartbeat.as_ref().and_then(|h| h.next_at.clone()),
        heartbeat_model: heartbeat.and_then(|h| h.model),
        mcp_servers,
        backend_status,
        usage,
        effective_idle_timeout_secs: state
            .sessions
            .idle_timeout_of(agent.idle_timeout_secs)
            .map_or(0, |d| d.as_secs()),
        idle_timeout_secs: agent.idle_timeout_secs,
        context_cleared_at: agent.context_cleared_at,
        discord_channel_id: agent.discord_channel_id,
        workspace: state.agents.workspace_shown(&agent.name),
        worker: state.workers.status(&agent.name),
        status: agent.status.as_str(),
        name: agent.name,
        model: agent.model,
        system_prompt: agent.system_prompt,
        permissions: match crate::permissions::profiles::from_stored(&agent.permissions) {
            Ok(setting) => serde_json::to_value(setting).unwrap_or_default(),
            Err(_) => serde_json::Value::from(agent.permissions),
        },
        on_ask: agent.on_ask,
        network: agent.network,
        backend: agent.backend,
        sandbox: state.sandbox.clone(),
        created_at: agent.created_at,
        updated_at: agent.updated_at,
    })
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct CreateBody {
    name: String,
    system_prompt: Option<String>,
    model: Option<String>,
    permissions: Option<PermissionsSetting>,
    on_ask: Option<String>,
    network: Option<String>,
    backend: Option<String>,
    idle_timeout_secs: Option<u64>,
    discord_channel_id: Option<String>,
    /// `{"<name>": {"command", "args", "env"}}` or `{"<name>": {"url", "headers"}}`.
    mcp_servers: Option<serde_json::Value>,
    /// Minutes between heartbeats; 0 or absent: off.
    heartbeat_minutes: Option<u32>,
    /// The model heartbeats use; absent: the agent's.
    heartbeat_model: Option<String>,
}

pub(super) async fn create(
    State(state): State<AppState>,
    caller: Caller,
    ApiJson(body): ApiJson<CreateBody>,
) -> Result<impl IntoResponse, ApiError> {
    // Checked before anything is created: a refused setting creates nothing.
    let mcp_servers = body
        .mcp_servers
        .as_ref()
        .map(|value| checked_mcp(&state, value))
        .transpose()?
        .flatten();
    let heartbeat = HeartbeatChange {
        minutes: Some(body.heartbeat_minutes.unwrap_or(0)),
        model: Some(body.heartbeat_model),
    };
    state.heartbeats.check(&heartbeat).await?;
    let heartbeat = crate::heartbeat::initial(&heartbeat);
    let record = state
        .agents
        .create(
            CreateAgent {
                name: body.name,
                system_prompt: body.system_prompt,
                model: body.model,
                permissions: body.permissions,
                on_ask: body.on_ask,
                network: body.network,
                backend: body.backend,
                idle_timeout_secs: body.idle_timeout_secs,
                discord_channel_id: body.discord_channel_id,
                mcp_servers,
                heartbeat,
            },
            &caller.principal(),
            caller.role,
        )
        .await?;
    state.heartbeats.changed();
    state.runs.idle_configured(&record.name).await;
    Ok((StatusCode::CREATED, Json(view(&state, record).await?)))
}

pub(super) async fn list(State(state): State<AppState>) -> Result<Json<Vec<AgentView>>, ApiError> {
    let mut views = Vec::new();
    for agent in state.store.active_agents().await? {
        views.push(view(&state, agent).await?);
    }
    Ok(Json(views))
}

pub(super) async fn active_agent(state: &AppState, name: &str) -> Result<AgentRecord, ApiError> {
    state
        .store
        .active_agent(name)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("no agent named '{name}'")))
}

pub(super) async fn show(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<AgentView>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    Ok(Json(view(&state, agent).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ConfigureBody {
    system_prompt: Option<String>,
    model: Option<String>,
    permissions: Option<PermissionsSetting>,
    on_ask: Option<String>,
    network: Option<String>,
    backend: Option<String>,
    /// A number of seconds (0: never), or null for the server's default.
    #[serde(default, deserialize_with = "present")]
    idle_timeout_secs: Option<Option<u64>>,
    /// A Discord channel id, or null to unbind.
    #[serde(default, deserialize_with = "present")]
    discord_channel_id: Option<Option<String>>,
    /// The whole set of MCP servers (`{}` or null: none); it replaces the old one.
    #[serde(default, deserialize_with = "present")]
    mcp_servers: Option<Option<serde_json::Value>>,
    /// Minutes between heartbeats (0: off).
    heartbeat_minutes: Option<u32>,
    /// The model heartbeats use, or null for the agent's.
    #[serde(default, deserialize_with = "present")]
    heartbeat_model: Option<Option<String>>,
}

/// A field that is present (even as null) is `Some`; an absent one (`default`) is `None`.
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

pub(super) async fn configure(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<ConfigureBody>,
) -> Result<Json<AgentView>, ApiError> {
    let (user, role) = (&caller.principal(), &caller.role);
    let on_ask = body
        .on_ask
        .as_deref()
        .map(OnAsk::parse)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let network = body
        .network
        .as_deref()
        .map(Network::parse)
        .transpose()
        .map_err(ApiError::bad_request)?;
    let backend = crate::agents::check_backend(body.backend.as_deref())?;
    let mcp_servers = match &body.mcp_servers {
        None => None,
        Some(None) => Some(None),
        Some(Some(value)) => Some(checked_mcp(&state, value)?),
    };
    let heartbeat = HeartbeatChange {
        minutes: body.heartbeat_minutes,
        model: body.heartbeat_model,
    };
    state.heartbeats.check(&heartbeat).await?;
    // What the change grants, as a whole, before any of it is made: a refused
    // change changes nothing.
    state
        .agents
        .check_change(&name, body.permissions.as_ref(), on_ask, *role, user)
        .await?;
    let mut record = state
        .agents
        .configure(
            &name,
            AgentUpdate {
                model: body.model,
                system_prompt: body.system_prompt,
                permissions: None,
                on_ask,
                network,
                backend,
                idle_timeout_secs: body.idle_timeout_secs,
                discord_channel_id: body.discord_channel_id,
            },
            user,
            *role,
        )
        .await?;
    // After `on_ask`, so that leaving `allow` and setting the profile in one
    // request is checked against the new `on_ask`.
    if let Some(setting) = body.permissions {
        state
            .agents
            .set_permissions(&name, setting, *role, user)
            .await?;
        record = active_agent(&state, &name).await?;
    }
    // The next run's assignment carries the new set; its worker starts, restarts or
    // stops servers to match.
    let mcp_changed = mcp_servers.is_some();
    if let Some(servers) = mcp_servers {
        state.store.set_mcp_servers(&name, servers).await?;
    }
    let heartbeat_changed = heartbeat.minutes.is_some() || heartbeat.model.is_some();
    if heartbeat_changed {
        state.heartbeats.configure(&name, heartbeat).await?;
    }
    if mcp_changed || heartbeat_changed {
        // What `agents.configure` told left these out: told again, now whole.
        state
            .agents
            .changed(&name, crate::feed::AgentChangeKind::Changed, user);
    }
    state.runs.idle_configured(&name).await;
    Ok(Json(view(&state, record).await?))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct DestroyQuery {
    #[serde(default)]
    keep_files: bool,
}

pub(super) async fn destroy(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    query: Result<Query<DestroyQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<StatusCode, ApiError> {
    let Query(query) = query.map_err(|e| ApiError::bad_request(e.body_text()))?;
    state
        .agents
        .destroy(&name, query.keep_files, &caller.principal())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
