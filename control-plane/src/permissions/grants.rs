//! Who may grant which permissions (SPEC B3, G4): a self-edit of permissions can never
//! give an agent more than the user who triggered it may grant. Roles come from the
//! settings now; Discord roles will map onto them.

use serde::{Deserialize, Serialize};

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
