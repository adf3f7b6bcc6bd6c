//! The self-edit tools: an agent changes its own prompt, docs, permissions or model.
//! All but `self_edit_docs` (a file of the worker's) run in the control plane, which
//! owns the agent's settings; their arguments are typed here for both sides.

use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    Actions, RunsIn, SchemaSettings, Subject, ToolDef, checked_by_executor, object, parse_args,
    text, truncate,
};

pub const SELF_EDIT_SYSTEM_PROMPT: &str = "self_edit_system_prompt";
pub const SELF_EDIT_DOCS: &str = "self_edit_docs";
pub const SELF_EDIT_PERMISSIONS: &str = "self_edit_permissions";
pub const SELF_EDIT_MODEL: &str = "self_edit_model";
/// The tool name the self-edit tools share in action strings; the detail says what
/// is edited (`tool:self_edit:model:gpt-4o`).
pub const SELF_EDIT: &str = "self_edit";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPrompt {
    pub new_prompt: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewProfile {
    /// A preset name or a profile object; the control plane reads it.
    pub new_profile: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewModel {
    pub new_model: String,
}

fn detail(detail: String) -> Subject {
    Subject {
        actions: Actions::Detail(detail),
        shown: None,
        writes: None,
    }
}

pub(super) const SYSTEM_PROMPT_TOOL: ToolDef = ToolDef {
    name: SELF_EDIT_SYSTEM_PROMPT,
    aliases: &[],
    action_name: SELF_EDIT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Replace your own system prompt (the instructions you are given before every \
         conversation). It applies from your next step. Use it to refine how you work."
            .into()
    },
    parameters: |_| {
        object(
            json!({"new_prompt": {"type": "string", "description": "The complete new system prompt"}}),
            &["new_prompt"],
        )
    },
    subject: |_| detail("system_prompt".into()),
    typical_call: r#"{"new_prompt":"Be brief."}"#,
    check_args: |args| parse_args::<NewPrompt>(args).map(drop),
};

pub(super) const DOCS_TOOL: ToolDef = ToolDef {
    name: SELF_EDIT_DOCS,
    aliases: &[],
    action_name: SELF_EDIT,
    runs_in: RunsIn::Worker,
    description: |_: &SchemaSettings| {
        "Create or replace a file in your docs/ directory. Everything in docs/ is given to \
         you after your system prompt on every step: keep notes, conventions and \
         progress there, short and current."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "path": {"type": "string", "description": "File path relative to docs/, e.g. notes.md"},
                "content": {"type": "string", "description": "The complete content of the file"}
            }),
            &["path", "content"],
        )
    },
    // Docs are not in the workspace: the worker locks them under a key of their own.
    subject: |args| Subject {
        shown: text(args, "path").map(|p| truncate(p, 120)),
        ..detail(format!("docs:{}", text(args, "path").unwrap_or_default()))
    },
    typical_call: r#"{"path":"notes.md","content":""}"#,
    check_args: checked_by_executor,
};

pub(super) const PERMISSIONS_TOOL: ToolDef = ToolDef {
    name: SELF_EDIT_PERMISSIONS,
    aliases: &[],
    action_name: SELF_EDIT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Change your own permission profile, to a preset (open, standard, locked) or a \
         custom profile. It can never exceed what the user you work for may grant."
            .into()
    },
    parameters: |_| {
        object(
            json!({"new_profile": {
                "description": "A preset name, or {\"allow\": [regex…], \"ask\": [regex…]}",
                "anyOf": [
                    {"type": "string", "enum": ["open", "standard", "locked"]},
                    {"type": "object", "properties": {
                        "allow": {"type": "array", "items": {"type": "string"}},
                        "ask": {"type": "array", "items": {"type": "string"}}
                    }, "additionalProperties": false}
                ]
            }}),
            &["new_profile"],
        )
    },
    subject: |args| {
        let target = match args.get("new_profile") {
            Some(Value::String(preset)) => preset.clone(),
            Some(Value::Object(_)) => "custom".to_string(),
            _ => String::new(),
        };
        detail(format!("permissions:{target}"))
    },
    typical_call: r#"{"new_profile":"standard"}"#,
    check_args: |args| parse_args::<NewProfile>(args).map(drop),
};

pub(super) const MODEL_TOOL: ToolDef = ToolDef {
    name: SELF_EDIT_MODEL,
    aliases: &[],
    action_name: SELF_EDIT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Switch the model you run on (e.g. a faster one for simple work, a stronger one \
         for hard reasoning). It answers from your next step."
            .into()
    },
    parameters: |_| {
        object(
            json!({"new_model": {"type": "string", "description": "A model name from the control plane's list, e.g. gpt-4o-mini or ollama/llama3.2"}}),
            &["new_model"],
        )
    },
    subject: |args| {
        detail(format!(
            "model:{}",
            text(args, "new_model").unwrap_or_default()
        ))
    },
    typical_call: r#"{"new_model":"gpt-4o-mini"}"#,
    check_args: |args| parse_args::<NewModel>(args).map(drop),
};
