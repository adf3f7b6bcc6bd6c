//! Who may do what from Discord (pure): `[discord.roles]` maps Discord role ids to
//! Chorus roles. A member's role is the most trusted one any of their Discord roles
//! maps to; a member none of whose roles is mapped is a viewer. Viewers may talk to
//! agents but not answer approvals; operators and admins may.

use std::collections::HashMap;

use crate::gate::policy::{Act, allowed};
use crate::permissions::grants::Role;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiscordRoles {
    by_role_id: HashMap<String, Role>,
}

impl DiscordRoles {
    pub fn new(by_role_id: HashMap<String, Role>) -> Self {
        DiscordRoles { by_role_id }
    }

    /// The Chorus role of a member with these Discord role ids.
    pub fn role_of<S: AsRef<str>>(&self, member_roles: &[S]) -> Role {
        member_roles
            .iter()
            .filter_map(|id| self.by_role_id.get(id.as_ref()).copied())
            .min() // Admin < Operator < Viewer: the most trusted
            .unwrap_or(Role::Viewer)
    }

    /// Whether a member with these roles may approve or deny a tool call.
    pub fn may_approve<S: AsRef<str>>(&self, member_roles: &[S]) -> bool {
        allowed(self.role_of(member_roles), Act::AnswerApprovals)
    }
}

/// The Chorus user id of a Discord user, as the audit log and approvals record it.
pub fn user_id(discord_user: u64) -> String {
    format!("discord:{discord_user}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roles() -> DiscordRoles {
        DiscordRoles::new(HashMap::from([
            ("100".to_string(), Role::Admin),
            ("200".to_string(), Role::Operator),
            ("300".to_string(), Role::Viewer),
        ]))
    }

    #[test]
    fn the_most_trusted_mapped_role_counts_and_unmapped_members_are_viewers() {
        let r = roles();
        assert_eq!(r.role_of(&["300", "200"]), Role::Operator);
        assert_eq!(r.role_of(&["200", "100", "999"]), Role::Admin);
        assert_eq!(r.role_of(&["999"]), Role::Viewer);
        assert_eq!(r.role_of::<&str>(&[]), Role::Viewer);
        assert_eq!(DiscordRoles::default().role_of(&["100"]), Role::Viewer);
    }

    #[test]
    fn only_operators_and_admins_may_approve() {
        let r = roles();
        assert!(r.may_approve(&["100"]));
        assert!(r.may_approve(&["300", "200"]));
        assert!(!r.may_approve(&["300"]));
        assert!(!r.may_approve(&["999"]));
        assert!(!r.may_approve::<&str>(&[]));
        assert_eq!(user_id(42), "discord:42");
    }
}
