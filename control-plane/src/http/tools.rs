//! `/api/tools` (every tool in the registry) and `/api/agents/{name}/tools` (what
//! this agent's model is offered, with what its profile gives a typical call: the
//! registry's tools, then its running MCP servers' tools its profile can reach).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use chorus_proto::tools::{SchemaSettings, TOOLS, ToolDef};
use serde::Serialize;
use serde_json::Value;

use super::agents::active_agent;
use super::{ApiError, AppState};
use crate::gate::actions::{actions_for, decide_actions};
use crate::permissions::Decision;
use crate::permissions::profiles::offered;

/// One tool as the API shows it.
#[derive(Debug, Serialize)]
pub struct ToolView {
    /// Chorus's name (`file.read`, `mcp__<server>__<tool>`), as in action strings and
    /// profiles.
    pub name: String,
    /// The name the model calls it by (`file_read`).
    pub wire_name: String,
    pub description: String,
    pub schema: Value,
    /// `worker` or `control_plane`.
    pub runs_in: &'static str,
    /// What the agent's profile gives a typical call (agent listing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
    /// The MCP server the tool comes from (its MCP tools only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mcp_server: Option<String>,
}

#[derive(Debug, Serialize)]
pub struct ToolsView {
    pub tools: Vec<ToolView>,
}

/// A tool as its spec renders it: the very text the worker offers the model.
fn view(tool: &ToolDef, settings: &SchemaSettings, decision: Option<Decision>) -> ToolView {
    let spec = tool.spec(settings);
    ToolView {
        name: tool.name.to_string(),
        wire_name: spec.wire_name,
        description: spec.description,
        schema: serde_json::from_str(&spec.schema_json).unwrap_or(Value::Null),
        runs_in: tool.runs_in.as_str(),
        decision,
        mcp_server: None,
    }
}

/// The bash timeouts the descriptions quote: as in the workers' assignments.
fn settings(state: &AppState) -> SchemaSettings {
    crate::runs::schema_settings(&state.setup.settings)
}

pub(super) async fn list(State(state): State<AppState>) -> Json<ToolsView> {
    let settings = settings(&state);
    Json(ToolsView {
        tools: TOOLS.iter().map(|t| view(t, &settings, None)).collect(),
    })
}

pub(super) async fn of_agent(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<ToolsView>, ApiError> {
    let agent = active_agent(&state, &name).await?;
    let profile = state.gate.profiles().get(&agent.permissions).map_err(|e| {
        ApiError::new(
            StatusCode::CONFLICT,
            "profile_unusable",
            format!(
                "the agent's permission profile cannot be used ({e}); fix it with `chorus agent \
             configure {name} --permissions …`"
            ),
        )
    })?;
    let settings = settings(&state);
    // Exactly the tools the model is offered: one its profile always denies is left
    // out of the schemas, so it is left out here too.
    let grants: Vec<String> = state
        .store
        .agent_grants(&name)
        .await?
        .into_iter()
        .map(|g| g.tool)
        .collect();
    // A granted tool's every call is allowed (see `gate`).
    let decision = |name: &str, typical_call: &str| {
        if grants.iter().any(|g| g == name) {
            Decision::Allow
        } else {
            decide_actions(&profile, &actions_for(name, typical_call)).0
        }
    };
    let mut tools: Vec<ToolView> = offered(&profile, &grants)
        .map(|tool| {
            view(
                tool,
                &settings,
                Some(decision(tool.name, tool.typical_call)),
            )
        })
        .collect();
    // The MCP tools as the agent's worker last listed them, filtered as the worker
    // filters them (a tool no rule can let through is not offered).
    let reach = profile.mcp_reach();
    let setting = super::agents::mcp_setting(&state, &name).await?;
    for (server, spec) in state.workers.mcp().offered(&name, &setting) {
        if !reach.reaches(&spec.name) {
            continue;
        }
        tools.push(ToolView {
            decision: Some(decision(&spec.name, "{}")),
            schema: serde_json::from_str(&spec.schema_json).unwrap_or(Value::Null),
            runs_in: spec.runs_in.as_str(),
            wire_name: spec.wire_name,
            description: spec.description,
            name: spec.name,
            mcp_server: Some(server),
        });
    }
    Ok(Json(ToolsView { tools }))
}
