//! The JSON Schemas of the tools, as sent to the model. Each is strict
//! (`additionalProperties: false`, required fields listed) so that a wrong call is
//! caught by the argument parser and comes back as "not valid", not half-run.

use serde_json::{Value, json};

use super::bash::BashConfig;
use crate::model::ToolSchema;
use crate::model::wire_names::to_wire;

/// A description names other tools through this: as the model sees them
/// (`file_create`, not `file.create`).
fn tool(name: &str) -> std::borrow::Cow<'_, str> {
    to_wire(name)
}

fn schema(name: &str, description: &str, properties: Value, required: &[&str]) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: description.into(),
        parameters: json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false
        }),
    }
}

const PATH: &str = "File path relative to the workspace root";

fn path() -> Value {
    json!({"type": "string", "description": PATH})
}

fn content() -> Value {
    json!({"type": "string", "description": "The complete content of the file"})
}

fn paging() -> Value {
    json!({
        "path": path(),
        "offset": {"type": "integer", "minimum": 1, "description": "First line to show (1 = first line)"},
        "limit": {"type": "integer", "minimum": 1, "description": "How many lines to show"}
    })
}

fn replacement() -> Value {
    json!({
        "path": path(),
        "old_str": {"type": "string", "description": "The exact text to replace; it must occur exactly once in the file, whitespace included"},
        "new_str": {"type": "string", "description": "The text to put in its place (may be empty to delete old_str)"}
    })
}

/// The schemas of every tool; the bash timeouts are the configured ones.
pub fn all(bash: &BashConfig) -> Vec<ToolSchema> {
    let default_timeout = bash.default_timeout.as_secs();
    let max_timeout = bash.max_timeout.as_secs();
    let bash_description = format!(
        "Run a shell command with bash in the workspace directory (stdin is empty; HOME is \
         the workspace). Returns the exit code, stdout and stderr; long output keeps its \
         start and end with a note of what was cut. The command and everything it started \
         are killed when it times out (default {default_timeout} s) or ends: background \
         processes do not outlive the call. For a long-running command (a dev server, a \
         long build, a watcher) set run_in_background: it then runs on as a background task, \
         and you read its output with task_output and stop it with task_stop. There is no \
         terminal (no /dev/tty or pty): run commands non-interactively."
    );
    vec![
        schema(
            "create_file",
            "Create a file in the workspace, or replace its whole content. \
             Parent directories are created. Paths are relative to the workspace root.",
            json!({"path": path(), "content": content()}),
            &["path", "content"],
        ),
        schema(
            "str_replace",
            "Replace one exact piece of text in a workspace file. old_str must occur exactly \
             once (whitespace and indentation included); if it occurs 0 or several times the \
             file is left unchanged and the count is reported, so add surrounding lines to make \
             it unique. Returns the edited lines with line numbers.",
            replacement(),
            &["path", "old_str", "new_str"],
        ),
        schema(
            "view",
            "Show a text file of the workspace with numbered lines. \
             Use offset and limit to page through long files.",
            paging(),
            &["path"],
        ),
        schema(
            "file.read",
            "Read a text file of the workspace, shown with numbered lines. \
             Use offset and limit to page through long files. Binary files are refused.",
            paging(),
            &["path"],
        ),
        schema(
            "file.write",
            &format!(
                "Replace the whole content of an existing workspace file. Fails if the file \
                 does not exist (use {} for new files).",
                tool("file.create")
            ),
            json!({"path": path(), "content": content()}),
            &["path", "content"],
        ),
        schema(
            "file.create",
            &format!(
                "Create a new file in the workspace (parent directories are created). Fails if \
                 something already exists at the path (use {} or {} to change it).",
                tool("file.write"),
                tool("file.patch")
            ),
            json!({"path": path(), "content": content()}),
            &["path", "content"],
        ),
        schema(
            "file.delete",
            "Delete a file of the workspace. Directories are not deleted; a symlink is deleted \
             itself, never what it points to.",
            json!({"path": path()}),
            &["path"],
        ),
        schema(
            "file.patch",
            "Replace one exact piece of text in an existing workspace file. old_str must occur \
             exactly once (whitespace and indentation included); if it occurs 0 or several \
             times the file is left unchanged and the count is reported, so add surrounding \
             lines to make it unique. Returns the edited lines with line numbers.",
            replacement(),
            &["path", "old_str", "new_str"],
        ),
        schema(
            "file.list",
            "List the entries of a workspace directory, sorted, directories ending in '/', \
             symlinks shown as 'name -> target'. .git/ is skipped; long listings stop at 1000 \
             entries with a note.",
            json!({
                "path": {"type": "string", "description": "Directory relative to the workspace root; the root when omitted"},
                "recursive": {"type": "boolean", "description": "Include everything below the directory, not just its direct entries (default false)"}
            }),
            &[],
        ),
        schema(
            "file.search",
            "Search the text files below a workspace directory (or one file) for a regular \
             expression (Rust regex syntax), line by line. Results are 'path:line: text'. \
             Binary files and .git/ are skipped; at most 200 matches are returned.",
            json!({
                "pattern": {"type": "string", "description": "Regular expression, e.g. 'fn \\w+_test' or '(?i)todo'"},
                "path": {"type": "string", "description": "Directory or file to search, relative to the workspace root; the root when omitted"}
            }),
            &["pattern"],
        ),
        schema(
            "bash",
            &bash_description,
            json!({
                "command": {"type": "string", "description": "The command line, run as bash -c <command>"},
                "timeout": {
                    "type": "number",
                    "exclusiveMinimum": 0,
                    "maximum": max_timeout,
                    "description": format!("Seconds before the command is killed (default {default_timeout}, at most {max_timeout}); not for background tasks")
                },
                "run_in_background": {
                    "type": "boolean",
                    "description": "Start the command as a background task that outlives this call and answer at once with its task id (default false)"
                }
            }),
            &["command"],
        ),
        schema(
            "task_output",
            "Show a background task's state (running, or how it ended) and the output it wrote \
             since you last read it. With wait, first wait up to that many seconds for the task \
             to end.",
            json!({
                "task_id": {"type": "integer", "minimum": 1, "description": "The id bash gave when it started the task"},
                "wait": {"type": "number", "minimum": 0, "maximum": 60, "description": "Seconds to wait for the task to end first (default 0)"}
            }),
            &["task_id"],
        ),
        schema(
            "task_stop",
            "Stop a background task and everything it started (SIGTERM, then SIGKILL after 3 s).",
            json!({"task_id": {"type": "integer", "minimum": 1, "description": "The id bash gave when it started the task"}}),
            &["task_id"],
        ),
        schema(
            "self_edit_system_prompt",
            "Replace your own system prompt (the instructions you are given before every \
             conversation). It applies from your next step. Use it to refine how you work.",
            json!({"new_prompt": {"type": "string", "description": "The complete new system prompt"}}),
            &["new_prompt"],
        ),
        schema(
            "self_edit_docs",
            "Create or replace a file in your docs/ directory. Everything in docs/ is given to \
             you after your system prompt on every step: keep notes, conventions and \
             progress there, short and current.",
            json!({
                "path": {"type": "string", "description": "File path relative to docs/, e.g. notes.md"},
                "content": content()
            }),
            &["path", "content"],
        ),
        schema(
            "self_edit_permissions",
            "Change your own permission profile, to a preset (open, standard, locked) or a \
             custom profile. It can never exceed what the user you work for may grant.",
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
        ),
        schema(
            "self_edit_model",
            "Switch the model you run on (e.g. a faster one for simple work, a stronger one \
             for hard reasoning). It answers from your next step.",
            json!({"new_model": {"type": "string", "description": "A model name from the control plane's list, e.g. gpt-4o-mini or ollama/llama3.2"}}),
            &["new_model"],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::TOOL_NAMES;

    #[test]
    fn every_tool_has_a_strict_schema() {
        let schemas = all(&BashConfig::default());
        let names: Vec<&str> = schemas.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, TOOL_NAMES);
        for s in &schemas {
            assert!(s.description.len() > 40, "{} needs a description", s.name);
            assert_eq!(s.parameters["type"], "object");
            assert_eq!(s.parameters["additionalProperties"], false, "{}", s.name);
            let properties = s.parameters["properties"].as_object().unwrap();
            for required in s.parameters["required"].as_array().unwrap() {
                assert!(
                    properties.contains_key(required.as_str().unwrap()),
                    "{} requires an unknown field",
                    s.name
                );
            }
        }
    }
}
