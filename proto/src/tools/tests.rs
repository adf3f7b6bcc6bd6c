use std::collections::HashSet;

use super::wire_names::{from_wire, is_valid_wire_name};
use super::*;

/// Every tool: a valid wire name no other tool has, that maps back to it; an object
/// schema that is strict and requires only what it lists; a description; actions for
/// any arguments, even none; older names that are no other tool's.
#[test]
fn the_registry_is_consistent() {
    let settings = SchemaSettings::default();
    let mut wire_seen = HashSet::new();
    let mut names_seen = HashSet::new();
    for tool in TOOLS.iter().chain(ROLE_TOOLS) {
        let wire = tool.wire_name();
        assert!(is_valid_wire_name(&wire), "{} → {wire}", tool.name);
        assert!(wire_seen.insert(wire.to_string()), "two tools share {wire}");
        assert_eq!(from_wire(&wire), tool.name);
        assert!(
            tool.name == wire || find_any(&wire).map(|t| t.name) == Some(tool.name),
            "{wire} is a tool of its own"
        );
        for name in std::iter::once(tool.name).chain(tool.aliases.iter().copied()) {
            assert!(names_seen.insert(name), "{name} names two tools");
            assert_eq!(find_any(name).map(|t| t.name), Some(tool.name));
        }

        let description = (tool.description)(&settings);
        assert!(description.len() > 40, "{} needs a description", tool.name);
        let schema = (tool.parameters)(&settings);
        assert_eq!(schema["type"], "object", "{}", tool.name);
        assert_eq!(schema["additionalProperties"], false, "{}", tool.name);
        let properties = schema["properties"].as_object().unwrap();
        for required in schema["required"].as_array().unwrap() {
            assert!(
                properties.contains_key(required.as_str().unwrap()),
                "{} requires an unknown field",
                tool.name
            );
        }

        assert!(
            (tool.check_args)(tool.typical_call).is_ok(),
            "{}: its typical call is valid",
            tool.name
        );
        assert!(
            serde_json::from_str::<Value>(tool.typical_call).is_ok_and(|v| v.is_object()),
            "{}",
            tool.name
        );
        for arguments in [tool.typical_call, "{}", "not json", ""] {
            let (action_tool, actions) = actions_of(tool.name, arguments);
            assert!(!action_tool.is_empty(), "{}", tool.name);
            if let Actions::Detail(detail) = actions {
                assert!(!detail.contains('\n'), "{}", tool.name);
            }
        }
    }
    assert_eq!(names().count(), TOOLS.len());
}

#[test]
fn calls_are_described_and_checked_through_their_definition() {
    let describe_cases = [
        (
            CREATE_FILE,
            r#"{"path":"src/a.rs","content":""}"#,
            "create_file: src/a.rs",
        ),
        (VIEW, "garbage", "view"),
        (FILE_LIST, "{}", "file.list: ."),
        (
            FILE_SEARCH,
            r#"{"pattern":"fn main","path":"src"}"#,
            "file.search: fn main in src",
        ),
        (
            BASH,
            r#"{"command":"cargo test\n  --all","run_in_background":true}"#,
            "bash: cargo test --all (in the background)",
        ),
        (JOB_OUTPUT, r#"{"job_id":3}"#, "job_output: job 3"),
        ("task_output", r#"{"task_id":3}"#, "task_output: job 3"),
        (SELF_EDIT_MODEL, r#"{"new_model":"x"}"#, "self_edit_model"),
        ("no_such_tool", r#"{"path":"a"}"#, "no_such_tool: a"),
    ];
    for (name, arguments, expected) in describe_cases {
        assert_eq!(describe(name, arguments), expected);
    }
    assert_eq!(
        find(FILE_PATCH)
            .unwrap()
            .subject_of(r#"{"path":"b.rs"}"#)
            .writes
            .as_deref(),
        Some("b.rs")
    );
    assert_eq!(
        find(VIEW).unwrap().subject_of(r#"{"path":"b.rs"}"#).writes,
        None
    );
    assert_eq!(
        actions_of("task_stop", r#"{"task_id":1}"#),
        ("task_stop", Actions::Detail("1".into()))
    );
    assert_eq!(
        actions_of(JOB_STOP, r#"{"job_id":1}"#),
        (JOB_STOP, Actions::Detail("1".into()))
    );
}

#[test]
fn a_renamed_tool_is_checked_under_all_its_names() {
    assert_eq!(other_forms("tool:job_output:3"), vec!["tool:task_output:3"]);
    assert_eq!(other_forms("tool:task_stop:1"), vec!["tool:job_stop:1"]);
    assert!(other_forms("tool:view:a").is_empty());
    assert!(other_forms("tool:self_edit:model:x").is_empty());
    assert!(other_forms("nonsense").is_empty());
}

#[test]
fn control_plane_tools_check_their_arguments_here() {
    let model = find(SELF_EDIT_MODEL).unwrap();
    assert_eq!(model.runs_in, RunsIn::ControlPlane);
    assert!((model.check_args)(r#"{"new_model":"x"}"#).is_ok());
    assert!((model.check_args)(r#"{"model":"x"}"#).is_err());
    assert_eq!(RunsIn::ControlPlane.as_str(), "control_plane");
}

/// The control tools' arguments are typed: a report with an unknown status or a
/// stray field is refused before it runs, and the typed forms read what the schema
/// describes.
#[test]
fn control_tools_read_exactly_their_schema() {
    let report = parse_args::<CompletionReport>(
        r#"{"status":"blocked","summary":"s","output":"o","blocked_reason":"need a key"}"#,
    )
    .unwrap();
    assert_eq!(report.status, ReportStatus::Blocked);
    assert_eq!(report.blocked_reason.as_deref(), Some("need a key"));
    assert!(parse_args::<CompletionReport>(r#"{"status":"done","summary":"s"}"#).is_err());
    assert!(parse_args::<Plan>(r#"{"summary":"s","requirements":[],"acceptance_criteria":[],"steps":[],"assignee":"a","extra":1}"#).is_err());
    let questions = parse_args::<Questions>(
        r#"{"questions":[{"id":"q1","question":"Which?","options":[{"label":"A","description":"first"}],"multi_select":true},{"id":"q2","question":"Why?"}]}"#,
    )
    .unwrap();
    assert_eq!(questions.questions.len(), 2);
    assert!(questions.questions[0].multi_select);
    assert!(questions.questions[1].options.is_empty());
    assert_eq!(
        describe(
            DELEGATE_TO_AGENT,
            r#"{"agent":"reviewer","instructions":"Check  it\nall"}"#
        ),
        "delegate_to_agent: reviewer: Check it all"
    );
    // Profiles never offer them: `find` does not know them, `find_any` does.
    assert!(find(COMPLETION_REPORT).is_none());
    assert_eq!(
        find_any(COMPLETION_REPORT).map(|t| t.name),
        Some(COMPLETION_REPORT)
    );
}
