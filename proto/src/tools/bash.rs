//! `bash`: a command line in the workspace, or a background job.

use serde_json::{Value, json};

use super::{
    Actions, JOB_OUTPUT, JOB_STOP, RunsIn, SchemaSettings, Subject, ToolDef, checked_by_executor,
    object, one_line, text, to_wire,
};

pub const BASH: &str = "bash";

fn description(settings: &SchemaSettings) -> String {
    let default_timeout = settings.bash_default_timeout_secs;
    format!(
        "Run a shell command with bash in the workspace directory (stdin is empty; HOME is \
         the workspace). Returns the exit code, stdout and stderr; long output keeps its \
         start and end with a note of what was cut. The command and everything it started \
         are killed when it times out (default {default_timeout} s) or ends: background \
         processes do not outlive the call. For a long-running command (a dev server, a \
         long build, a watcher) set run_in_background: it then runs on as a background task, \
         and you read its output with {} and stop it with {}. There is no \
         terminal (no /dev/tty or pty): run commands non-interactively.",
        to_wire(JOB_OUTPUT),
        to_wire(JOB_STOP)
    )
}

fn parameters(settings: &SchemaSettings) -> Value {
    let default_timeout = settings.bash_default_timeout_secs;
    let max_timeout = settings.bash_max_timeout_secs;
    object(
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
    )
}

fn subject(args: &Value) -> Subject {
    let command = text(args, "command");
    let background = args
        .get("run_in_background")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Subject {
        actions: Actions::Bash(command.unwrap_or_default().to_string()),
        shown: command.map(|c| {
            let line = one_line(c, 80);
            if background {
                format!("{line} (in the background)")
            } else {
                line
            }
        }),
        writes: None,
    }
}

pub(super) const BASH_TOOL: ToolDef = ToolDef {
    name: BASH,
    aliases: &[],
    action_name: BASH,
    runs_in: RunsIn::Worker,
    description,
    parameters,
    subject,
    typical_call: r#"{"command":"git status"}"#,
    check_args: checked_by_executor,
};
