//! Who may grant which permissions (SPEC B3, G4): a self-edit of permissions can never
//! give an agent more than the user who triggered it may grant. Roles come from the
//! settings now; Discord roles will map onto them.
//!
//! A tool granted at run time (SPEC H7, `POST /api/agents/{name}/grants`) allows every
//! call of that tool unasked, so it amounts to the least preset that may allow the tool
//! and never asks about it ([`tool_grant_amounts_to`]), read from the presets' own
//! rules: the read tools amount to `locked`, reading and stopping jobs to `standard`,
//! bash, the file writers and the self-edit tools to `open` (`standard` asks about some
//! of their calls). A grant is bounded by [`may_grant`] of that preset like any other.

use chorus_proto::tools::ToolDef;
use serde::{Deserialize, Serialize};

use super::Profile;
use crate::switches::OnAsk;

/// A user's standing, from most to least trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// May set any profile, custom ones included.
    Admin,
    /// May set `standard` or `locked`.
    Operator,
    /// May only lock an agent down.
    Viewer,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Admin => "admin",
            Role::Operator => "operator",
            Role::Viewer => "viewer",
        }
    }
}

/// Whether `role` may give an agent the permissions named `target` (a preset name,
/// or `None` for a custom profile).
pub fn may_grant(role: Role, target: Option<&str>) -> bool {
    matches!(
        (role, target),
        (Role::Admin, _)
            | (Role::Operator, Some("standard" | "locked"))
            | (Role::Viewer, Some("locked"))
    )
}

/// The preset a grant of `tool` amounts to: the first of `locked`, `standard` and
/// `open` whose allow rules may match a call of the tool (under any of its names)
/// and whose ask rules never do. `open` allows everything, so there always is one.
pub fn tool_grant_amounts_to(tool: &ToolDef) -> &'static str {
    let names = || std::iter::once(tool.action_name).chain(tool.aliases.iter().copied());
    ["locked", "standard"]
        .into_iter()
        .find(|preset| {
            Profile::preset(preset).is_some_and(|profile| {
                names().any(|name| profile.list_reaches_tool(false, name))
                    && !names().any(|name| profile.list_reaches_tool(true, name))
            })
        })
        .unwrap_or("open")
}

/// The least trusted role that may grant `tool` (see [`tool_grant_amounts_to`]).
pub fn role_to_grant(tool: &ToolDef) -> Role {
    let preset = tool_grant_amounts_to(tool);
    [Role::Viewer, Role::Operator]
        .into_iter()
        .find(|role| may_grant(*role, Some(preset)))
        .unwrap_or(Role::Admin)
}

/// What an agent with the permissions named `permissions` (`None`: a custom
/// profile) and this `on_ask` amounts to, for [`may_grant`]: with `on_ask = "allow"`
/// everything its profile would ask a person about runs unasked (`standard` then
/// behaves like `open`), so a profile that `asks` anything counts as `open`.
pub fn granted(permissions: Option<&str>, on_ask: OnAsk, asks: bool) -> Option<&str> {
    if on_ask == OnAsk::Allow && asks {
        Some("open")
    } else {
        permissions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answering_every_ask_unasked_is_granting_open() {
        assert_eq!(granted(Some("standard"), OnAsk::Allow, true), Some("open"));
        assert_eq!(granted(None, OnAsk::Allow, true), Some("open"));
        assert_eq!(
            granted(Some("standard"), OnAsk::Prompt, true),
            Some("standard")
        );
        assert_eq!(granted(None, OnAsk::Deny, true), None);
        // A profile that never asks is what it is, whatever on_ask says.
        assert!(may_grant(
            Role::Operator,
            granted(Some("locked"), OnAsk::Allow, false)
        ));
        assert!(!may_grant(
            Role::Operator,
            granted(Some("standard"), OnAsk::Allow, true)
        ));
        assert!(may_grant(
            Role::Operator,
            granted(Some("standard"), OnAsk::Deny, true)
        ));
        assert!(may_grant(
            Role::Admin,
            granted(Some("standard"), OnAsk::Allow, true)
        ));
    }

    /// What granting each tool amounts to follows from the presets' rules; a tool
    /// `standard` asks about (bash, writing `.git/`) needs an admin, as `on_ask =
    /// "allow"` does.
    #[test]
    fn a_granted_tool_amounts_to_the_least_preset_that_allows_it_unasked() {
        use chorus_proto::tools::{TOOLS, find};
        let needs = |name: &str| role_to_grant(find(name).unwrap());
        for name in ["view", "file.read", "file.list", "file.search"] {
            assert_eq!(tool_grant_amounts_to(find(name).unwrap()), "locked");
            assert_eq!(needs(name), Role::Viewer, "{name}");
        }
        for name in ["job_output", "job_stop", "task_output"] {
            assert_eq!(needs(name), Role::Operator, "{name}");
        }
        for name in [
            "bash",
            "create_file",
            "str_replace",
            "file.write",
            "file.create",
            "file.patch",
            "file.delete",
            "self_edit_permissions",
            "self_edit_model",
            "self_edit_system_prompt",
        ] {
            assert_eq!(tool_grant_amounts_to(find(name).unwrap()), "open");
            assert_eq!(needs(name), Role::Admin, "{name}");
        }
        // Every tool has an answer, and an admin may grant every one.
        for tool in TOOLS {
            assert!(may_grant(Role::Admin, Some(tool_grant_amounts_to(tool))));
        }
    }

    #[test]
    fn nobody_grants_above_their_role() {
        let table = [
            (Role::Admin, Some("open"), true),
            (Role::Admin, None, true),
            (Role::Operator, Some("open"), false),
            (Role::Operator, Some("standard"), true),
            (Role::Operator, None, false),
            (Role::Viewer, Some("standard"), false),
            (Role::Viewer, Some("locked"), true),
            (Role::Viewer, Some("made-up"), false),
        ];
        for (role, target, expected) in table {
            assert_eq!(may_grant(role, target), expected, "{role:?} → {target:?}");
        }
    }
}
