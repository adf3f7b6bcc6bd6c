//! `/api/tools` (every tool in the registry) and `/api/agents/{name}/tools` (what
//! this agent's model is offered, with what its profile gives a typical call).

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
    /// Chorus's name (`file.read`), as in action strings and profiles.
    pub name: &'static str,
    /// The name the model calls it by (`file_read`).
    pub wire_name: String,
    pub description: String,
    pub schema: Value,
    /// `worker` or `control_plane`.
    pub runs_in: &'static str,
    /// What the agent's profile gives a typical call (agent listing only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decision>,
}

#[derive(Debug, Serialize)]
pub struct ToolsView {
    pub tools: Vec<ToolView>,
}

/// A tool as its spec renders it: the very text the worker offers the model.
fn view(tool: &ToolDef, settings: &SchemaSettings, decision: Option<Decision>) -> ToolView {
    let spec = tool.spec(settings);
    ToolView {
        name: tool.name,
        wire_name: spec.wire_name,
        description: spec.description,
        schema: serde_json::from_str(&spec.schema_json).unwrap_or(Value::Null),
        runs_in: tool.runs_in.as_str(),
        decision,
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
    let tools = offered(&profile, &grants)
        .map(|tool| {
            // A granted tool's every call is allowed (see `gate`).
            let decision = if grants.iter().any(|g| g == tool.name) {
                Decision::Allow
            } else {
                decide_actions(&profile, &actions_for(tool.name, tool.typical_call)).0
            };
            view(tool, &settings, Some(decision))
        })
        .collect();
    Ok(Json(ToolsView { tools }))
}
