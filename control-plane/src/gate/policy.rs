//! What each role may do (pure): every front end (the HTTP API's route table,
//! Discord's slash commands and buttons) names the [`Act`] a request is, and
//! [`allowed`] is the one check. Looking and talking are for everyone; changing
//! agents, their threads' course and their contexts is for operators and admins;
//! who may use the API at all is for admins. What may be *granted* (a permission
//! profile, `on_ask`) is bounded further by [`crate::permissions::grants::may_grant`].

use crate::permissions::grants::Role;

/// What a request does, as far as who may do it goes. A closed set: a new route or
/// command picks one of these, and this file says who may.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Act {
    /// Read agents, threads, events, models, approvals, the audit log, jobs, saved
    /// sessions, what a profile would decide, and who one is.
    Look,
    /// Send an agent a message or reply into a thread.
    Talk,
    /// Kill a thread that is running.
    StopThreads,
    /// Save, clear or restore an agent's context.
    ManageContext,
    /// Approve or deny a tool call waiting for a person.
    AnswerApprovals,
    /// Change an agent's settings, and grant or take back tools (permissions,
    /// `on_ask` and tools only within what the role may grant).
    ConfigureAgents,
    /// Create an agent (its permissions within what the role may grant).
    CreateAgents,
    /// Destroy an agent, and its files unless kept.
    DestroyAgents,
    /// Ask every provider for its models again.
    RefreshModels,
    /// Issue, list and revoke API tokens of people and automation.
    ManageTokens,
    /// Issue, list and revoke dial-in workers' join credentials.
    ManageWorkers,
    /// Create, edit, delete and move tasks (the board's buttons) and upload their
    /// attachments: a task sets agents to work, so it is an operator's, like
    /// changing an agent's course. Reading tasks is `Look`.
    ManageTasks,
}

impl Act {
    /// Every act, in the order above.
    pub const ALL: [Act; 12] = [
        Act::Look,
        Act::Talk,
        Act::StopThreads,
        Act::ManageContext,
        Act::AnswerApprovals,
        Act::ConfigureAgents,
        Act::CreateAgents,
        Act::DestroyAgents,
        Act::RefreshModels,
        Act::ManageTokens,
        Act::ManageWorkers,
        Act::ManageTasks,
    ];

    /// Its name where a front end reads it (`GET /api/session`'s `may`).
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Look => "look",
            Act::Talk => "talk",
            Act::StopThreads => "stop_threads",
            Act::ManageContext => "manage_context",
            Act::AnswerApprovals => "answer_approvals",
            Act::ConfigureAgents => "configure_agents",
            Act::CreateAgents => "create_agents",
            Act::DestroyAgents => "destroy_agents",
            Act::RefreshModels => "refresh_models",
            Act::ManageTokens => "manage_tokens",
            Act::ManageWorkers => "manage_workers",
            Act::ManageTasks => "manage_tasks",
        }
    }

    /// The least trusted role that may do it.
    pub fn needs(self) -> Role {
        match self {
            Act::Look | Act::Talk => Role::Viewer,
            Act::StopThreads
            | Act::ManageContext
            | Act::AnswerApprovals
            | Act::ConfigureAgents
            | Act::CreateAgents
            | Act::DestroyAgents
            | Act::RefreshModels
            | Act::ManageTasks => Role::Operator,
            Act::ManageTokens | Act::ManageWorkers => Role::Admin,
        }
    }

    /// What it is, for a refusal: "<role> may not <this>".
    pub fn describe(self) -> &'static str {
        match self {
            Act::Look => "look at agents",
            Act::Talk => "talk to agents",
            Act::StopThreads => "kill threads",
            Act::ManageContext => "save, clear or restore an agent's context",
            Act::AnswerApprovals => "approve or deny tool calls",
            Act::ConfigureAgents => "change an agent's settings",
            Act::CreateAgents => "create agents",
            Act::DestroyAgents => "destroy agents",
            Act::RefreshModels => "refresh the model list",
            Act::ManageTokens => "manage API tokens",
            Act::ManageWorkers => "manage worker credentials",
            Act::ManageTasks => "create or change tasks",
        }
    }
}

/// Whether `role` may do `act`.
pub fn allowed(role: Role, act: Act) -> bool {
    role <= act.needs() // Admin < Operator < Viewer
}

/// Why `user` (with `role`) may not do `act`: names the role needed and theirs.
pub fn refusal(user: &str, role: Role, act: Act) -> String {
    format!(
        "'{user}' is a {}, and a {} may not {}; this needs the role {} (or above). \
         An admin sets roles in chorus.toml's [roles]",
        role.as_str(),
        role.as_str(),
        act.describe(),
        act.needs().as_str()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn viewers_look_and_talk_operators_change_admins_manage_access() {
        let viewer_may = [Act::Look, Act::Talk];
        let admin_only = [Act::ManageTokens, Act::ManageWorkers];
        let all = Act::ALL;
        for act in all {
            assert!(allowed(Role::Admin, act), "{act:?}");
            assert_eq!(
                allowed(Role::Operator, act),
                !admin_only.contains(&act),
                "{act:?}"
            );
            assert_eq!(
                allowed(Role::Viewer, act),
                viewer_may.contains(&act),
                "{act:?}"
            );
        }
        let text = refusal("bob", Role::Viewer, Act::AnswerApprovals);
        assert!(text.contains("'bob' is a viewer"), "{text}");
        assert!(text.contains("needs the role operator"), "{text}");
    }
}
