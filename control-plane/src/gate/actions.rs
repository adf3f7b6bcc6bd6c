//! Which action strings a tool call is checked as (pure). The worker sends the call
//! exactly as the model made it; the control plane derives the actions itself, so a
//! worker cannot choose what is checked.

use chorus_proto::tools::{self as registry, Actions};

use crate::permissions::{Decision, Explanation, Profile, bash_actions, tool_action};

/// The actions a call is checked as, from the tool's definition in the registry.
/// Arguments that are not a JSON object give the bare `tool:<name>:` (the tool will
/// refuse them anyway).
pub fn actions_for(tool: &str, arguments: &str) -> Vec<String> {
    match registry::actions_of(tool, arguments) {
        (_, Actions::Bash(command)) => bash_actions(&command),
        (tool, Actions::Detail(detail)) => vec![tool_action(tool, &detail)],
    }
}

/// The decision for a call's actions, all of which must pass (the most restrictive
/// wins). An action of a renamed tool is decided under each of its names, the most
/// permissive counting: a stored rule for `tool:task_output:` still decides
/// `tool:job_output:` (both name the same operation).
pub fn decide_actions(profile: &Profile, actions: &[String]) -> (Decision, Vec<Explanation>) {
    let explanations: Vec<Explanation> = actions
        .iter()
        .map(|action| {
            let mut best = profile.explain(action);
            for other in registry::other_forms(action) {
                let explained = profile.explain(&other);
                if explained.decision < best.decision {
                    best = Explanation {
                        action: action.clone(),
                        ..explained
                    };
                }
            }
            best
        })
        .collect();
    let decision = explanations
        .iter()
        .map(|e| e.decision)
        .max()
        .unwrap_or(Decision::Deny);
    (decision, explanations)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::permissions::PermissionsSetting;

    /// A stored custom profile written for the old names still decides calls made
    /// by the new ones, and the reverse; without the other forms it would deny.
    #[test]
    fn a_rule_for_an_old_tool_name_decides_the_renamed_tool() {
        let profile = |rule: &str| {
            let setting: PermissionsSetting =
                serde_json::from_value(serde_json::json!({ "allow": [rule] })).unwrap();
            Profile::from_setting(&setting).unwrap()
        };
        let old = profile("tool:task_output:.*");
        let call = actions_for("job_output", r#"{"job_id":3}"#);
        assert_eq!(old.decide_all(&call).0, Decision::Deny, "the bare engine");
        let (decision, explanations) = decide_actions(&old, &call);
        assert_eq!(decision, Decision::Allow);
        assert_eq!(explanations[0].action, "tool:job_output:3");
        let new = profile("tool:job_output:.*");
        let old_call = actions_for("task_output", r#"{"task_id":3}"#);
        assert_eq!(decide_actions(&new, &old_call).0, Decision::Allow);
        assert_eq!(
            decide_actions(&new, &actions_for("task_stop", r#"{"task_id":3}"#)).0,
            Decision::Deny
        );
    }

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
            ("job_stop", r#"{"job_id":1}"#, vec!["tool:job_stop:1"]),
            ("job_output", r#"{"task_id":2}"#, vec!["tool:job_output:2"]),
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
        assert_eq!(
            actions_for("file_read", r#"{"path":"a"}"#),
            vec!["tool:file.read:a"],
            "a wire name is checked as the tool it names"
        );
        let chained = actions_for("bash", r#"{"command":"git status; rm -rf /"}"#);
        assert_eq!(chained, vec!["tool:bash:git status", "tool:bash:rm -rf /"]);
    }
}
