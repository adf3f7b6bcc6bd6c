//! Which action strings a tool call is checked as (pure). The worker sends the call
//! exactly as the model made it; the control plane derives the actions itself, so a
//! worker cannot choose what is checked.

use serde_json::Value;

use crate::permissions::{bash_actions, tool_action};

fn text<'a>(args: &'a Value, key: &str) -> &'a str {
    args.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// The actions a call is checked as. Arguments that are not a JSON object give the
/// bare `tool:<name>:` (the tool will refuse them anyway).
pub fn actions_for(tool: &str, arguments: &str) -> Vec<String> {
    let args: Value = serde_json::from_str(arguments).unwrap_or(Value::Null);
    match tool {
        "bash" => bash_actions(text(&args, "command")),
        "self_edit_system_prompt" => vec![tool_action("self_edit", "system_prompt")],
        "self_edit_docs" => vec![tool_action(
            "self_edit",
            &format!("docs:{}", text(&args, "path")),
        )],
        "self_edit_model" => vec![tool_action(
            "self_edit",
            &format!("model:{}", text(&args, "new_model")),
        )],
        "self_edit_permissions" => {
            let target = match args.get("new_profile") {
                Some(Value::String(preset)) => preset.clone(),
                Some(Value::Object(_)) => "custom".to_string(),
                _ => String::new(),
            };
            vec![tool_action("self_edit", &format!("permissions:{target}"))]
        }
        // A background task of the agent's own worker, by id.
        "task_output" | "task_stop" => {
            let id = args
                .get("task_id")
                .map(Value::to_string)
                .unwrap_or_default();
            vec![tool_action(tool, &id)]
        }
        "file.search" | "file.list" => {
            let path = text(&args, "path");
            vec![tool_action(tool, if path.is_empty() { "." } else { path })]
        }
        _ => vec![tool_action(tool, text(&args, "path"))],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_become_the_documented_action_strings() {
        let cases = [
            (
                "create_file",
                r#"{"path":"src/a.rs","content":"x"}"#,
                vec!["tool:create_file:src/a.rs"],
            ),
            (
                "view",
                r#"{"path":"README.md"}"#,
                vec!["tool:view:README.md"],
            ),
            ("file.list", "{}", vec!["tool:file.list:."]),
            (
                "task_output",
                r#"{"task_id":3,"wait":5}"#,
                vec!["tool:task_output:3"],
            ),
            ("task_stop", r#"{"task_id":1}"#, vec!["tool:task_stop:1"]),
            (
                "self_edit_docs",
                r#"{"path":"notes.md","content":""}"#,
                vec!["tool:self_edit:docs:notes.md"],
            ),
            (
                "self_edit_permissions",
                r#"{"new_profile":"open"}"#,
                vec!["tool:self_edit:permissions:open"],
            ),
            (
                "self_edit_permissions",
                r#"{"new_profile":{"allow":[]}}"#,
                vec!["tool:self_edit:permissions:custom"],
            ),
            (
                "self_edit_model",
                r#"{"new_model":"gpt-4o"}"#,
                vec!["tool:self_edit:model:gpt-4o"],
            ),
            (
                "self_edit_system_prompt",
                r#"{"new_prompt":"x"}"#,
                vec!["tool:self_edit:system_prompt"],
            ),
            ("view", "not json", vec!["tool:view:"]),
        ];
        for (tool, args, expected) in cases {
            assert_eq!(actions_for(tool, args), expected, "{tool} {args}");
        }
        let chained = actions_for("bash", r#"{"command":"git status; rm -rf /"}"#);
        assert_eq!(chained, vec!["tool:bash:git status", "tool:bash:rm -rf /"]);
    }
}
