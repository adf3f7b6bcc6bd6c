//! The tools an agent's model can call, and how one call is executed.
//!
//! A tool call never fails the run: bad arguments, an unknown tool or a refused path
//! all come back to the model as an error result it can act on.

pub mod files;
pub mod jail;

use chorus_proto::domain::ToolCall;
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::model::ToolSchema;
use jail::Workspace;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutcome {
    pub content: String,
    pub is_error: bool,
    /// The call itself was unusable (unknown tool, arguments that do not parse), as
    /// opposed to a tool that ran and failed. The loop counts these as bad model output.
    pub malformed: bool,
}

impl ToolOutcome {
    pub fn ok(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: false,
            malformed: false,
        }
    }

    pub fn error(content: impl Into<String>) -> Self {
        ToolOutcome {
            content: content.into(),
            is_error: true,
            malformed: false,
        }
    }

    pub fn malformed(content: impl Into<String>) -> Self {
        ToolOutcome {
            malformed: true,
            ..ToolOutcome::error(content)
        }
    }
}

/// The tools of one agent, bound to its workspace.
#[derive(Debug, Clone)]
pub struct ToolBox {
    workspace: Workspace,
}

const TOOL_NAMES: &[&str] = &["create_file", "view"];

impl ToolBox {
    pub fn new(workspace: Workspace) -> Self {
        ToolBox { workspace }
    }

    pub fn schemas(&self) -> Vec<ToolSchema> {
        vec![
            ToolSchema {
                name: "create_file".into(),
                description: "Create a file in the workspace, or replace its whole content. \
                    Parent directories are created. Paths are relative to the workspace root."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path relative to the workspace root"},
                        "content": {"type": "string", "description": "The complete new content of the file"}
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                }),
            },
            ToolSchema {
                name: "view".into(),
                description: "Show a text file of the workspace with numbered lines. \
                    Use offset and limit to page through long files."
                    .into(),
                parameters: json!({
                    "type": "object",
                    "properties": {
                        "path": {"type": "string", "description": "File path relative to the workspace root"},
                        "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1 = first line)"},
                        "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show"}
                    },
                    "required": ["path"],
                    "additionalProperties": false
                }),
            },
        ]
    }

    /// A short human description of a call, for step history: "create_file: src/a.rs".
    pub fn describe(call: &ToolCall) -> String {
        let detail = serde_json::from_str::<serde_json::Value>(&call.arguments)
            .ok()
            .and_then(|v| v.get("path").and_then(|p| p.as_str()).map(str::to_string));
        match detail {
            Some(path) => format!("{}: {}", call.name, truncate(&path, 120)),
            None => call.name.clone(),
        }
    }

    pub async fn execute(&self, call: &ToolCall) -> ToolOutcome {
        let workspace = self.workspace.clone();
        let call = call.clone();
        // File tools do blocking system calls; keep them off the async threads.
        tokio::task::spawn_blocking(move || execute_blocking(&workspace, &call))
            .await
            .unwrap_or_else(|e| ToolOutcome::error(format!("the tool crashed: {e}")))
    }
}

fn execute_blocking(workspace: &Workspace, call: &ToolCall) -> ToolOutcome {
    match call.name.as_str() {
        "create_file" => match parse_args(call) {
            Ok(args) => files::create_file(workspace, args),
            Err(outcome) => outcome,
        },
        "view" => match parse_args(call) {
            Ok(args) => files::view(workspace, args),
            Err(outcome) => outcome,
        },
        other => ToolOutcome::malformed(format!(
            "there is no tool named '{other}'; the tools are: {}",
            TOOL_NAMES.join(", ")
        )),
    }
}

fn parse_args<T: DeserializeOwned>(call: &ToolCall) -> Result<T, ToolOutcome> {
    let text = if call.arguments.trim().is_empty() {
        "{}"
    } else {
        &call.arguments
    };
    serde_json::from_str(text).map_err(|e| {
        ToolOutcome::malformed(format!(
            "the arguments for {} are not valid: {e}; send a JSON object matching the tool's schema",
            call.name
        ))
    })
}

fn truncate(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(name: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    #[tokio::test]
    async fn bad_calls_become_errors_the_model_can_read() {
        let dir = tempfile::tempdir().unwrap();
        let tools = ToolBox::new(Workspace::new(dir.path()));
        let unknown = tools.execute(&call("rm_rf", "{}")).await;
        assert!(unknown.malformed && unknown.content.contains("create_file, view"));
        let invalid = tools.execute(&call("create_file", "{\"path\": ")).await;
        assert!(invalid.malformed && invalid.content.contains("not valid"));
        let refused = tools.execute(&call("view", "{\"path\": \"../x\"}")).await;
        assert!(
            refused.is_error && !refused.malformed,
            "a refused path is a tool error, not bad output"
        );
        let missing = tools.execute(&call("view", "{}")).await;
        assert!(missing.is_error && missing.content.contains("path"));
    }

    #[test]
    fn calls_are_described_by_their_path() {
        assert_eq!(
            ToolBox::describe(&call("create_file", r#"{"path":"src/a.rs","content":""}"#)),
            "create_file: src/a.rs"
        );
        assert_eq!(ToolBox::describe(&call("view", "garbage")), "view");
    }
}
