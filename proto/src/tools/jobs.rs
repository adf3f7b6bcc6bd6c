//! The background jobs a `bash` call started with `run_in_background`: read and
//! stopped by id. Their earlier names (`task_output`, `task_stop`, `task_id`) are
//! still accepted.

use serde_json::{Value, json};

use super::{Actions, RunsIn, SchemaSettings, Subject, ToolDef, checked_by_executor, object};

pub const JOB_OUTPUT: &str = "job_output";
pub const JOB_STOP: &str = "job_stop";

fn job_id() -> Value {
    json!({"type": "integer", "minimum": 1, "description": "The id bash gave when it started the job"})
}

/// The job's id as the model wrote it (`job_id`, or the older `task_id`).
fn id(args: &Value) -> Option<&Value> {
    args.get("job_id").or_else(|| args.get("task_id"))
}

/// Checked as `tool:<name>:<id>`, shown as "job <id>".
fn subject(args: &Value) -> Subject {
    Subject {
        actions: Actions::Detail(id(args).map(Value::to_string).unwrap_or_default()),
        shown: id(args).map(|id| format!("job {id}")),
        writes: None,
    }
}

pub(super) const JOB_OUTPUT_TOOL: ToolDef = ToolDef {
    name: JOB_OUTPUT,
    aliases: &["task_output"],
    action_name: JOB_OUTPUT,
    runs_in: RunsIn::Worker,
    description: |_: &SchemaSettings| {
        "Show a background job's state (running, or how it ended) and the output it wrote \
         since you last read it. With wait, first wait up to that many seconds for the job \
         to end."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "job_id": job_id(),
                "wait": {"type": "number", "minimum": 0, "maximum": 60, "description": "Seconds to wait for the job to end first (default 0)"}
            }),
            &["job_id"],
        )
    },
    subject,
    typical_call: r#"{"job_id":1}"#,
    check_args: checked_by_executor,
};

pub(super) const JOB_STOP_TOOL: ToolDef = ToolDef {
    name: JOB_STOP,
    aliases: &["task_stop"],
    action_name: JOB_STOP,
    runs_in: RunsIn::Worker,
    description: |_: &SchemaSettings| {
        "Stop a background job and everything it started (SIGTERM, then SIGKILL after 3 s).".into()
    },
    parameters: |_| object(json!({"job_id": job_id()}), &["job_id"]),
    subject,
    typical_call: r#"{"job_id":1}"#,
    check_args: checked_by_executor,
};
