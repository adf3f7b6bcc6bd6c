//! Tools granted to an agent at run time (SPEC H7): `POST|GET
//! /api/agents/{name}/grants`, `DELETE …/grants/{tool}`, `chorus grants`.
//!
//! A grant allows **every** call of the tool, whatever the agent's profile says
//! (allow, ask or deny), from the agent's next tool call, until it is taken back; the
//! tool is also offered to the model from the next model call of a run going (an
//! `UpdateAgent`, as a change of permissions sends) and in every run after. What a
//! grant does not lift: the file jail and the sandbox (a granted `bash` still runs
//! confined, and only an agent under the `open` preset may run unconfined where
//! Landlock is missing), and a self-edit tool still changes no more than the person
//! at the root of the thread may grant. A grant never exceeds the granting person's
//! role: it amounts to a preset (`permissions::grants::tool_grant_amounts_to`), which
//! the role must be allowed to grant. Every grant, revoke and refused grant is audited
//! (`agent:grant:<tool>`, `agent:revoke:<tool>`). Grants belong to one creation of the
//! agent; destroying it ends them.

use chorus_proto::domain::AgentChange;
use chorus_proto::tools::{self as registry, ToolDef};

use super::{AgentError, AgentService, stored_setting};
use crate::permissions::Profile;
use crate::permissions::grants::{Role, may_grant, role_to_grant, tool_grant_amounts_to};
use crate::permissions::profiles::{offered_specs, offered_tools};
use crate::principal::Principal;
use crate::store::{AuditDecision, AuditEntry, GrantRecord};

/// The tool called `name` (its Chorus name, wire name or an older name), or a 400
/// listing the tools there are.
fn resolve(name: &str) -> Result<&'static ToolDef, AgentError> {
    registry::find(name.trim()).ok_or_else(|| {
        AgentError::InvalidInput(format!(
            "there is no tool named '{name}'; the tools are: {}",
            registry::names().collect::<Vec<_>>().join(", ")
        ))
    })
}

/// The agent's compiled profile; `None` when it cannot be used (its runs fail to
/// start anyway, saying why).
fn profile_of(stored: &str) -> Option<Profile> {
    Profile::from_setting(&stored_setting(stored).ok()?).ok()
}

impl AgentService {
    /// Grants `tools` (any of each one's names) to agent `name` as `user` with
    /// `role`; all or nothing: one above the role refuses the whole request (a 403
    /// naming the role it needs, audited). Returns every grant the agent has now.
    pub async fn grant_tools(
        &self,
        name: &str,
        tools: &[String],
        role: Role,
        user: &Principal,
    ) -> Result<Vec<GrantRecord>, AgentError> {
        let agent = self
            .store
            .active_agent(name)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("no agent named '{name}'")))?;
        if tools.is_empty() {
            return Err(AgentError::InvalidInput(
                "tools is empty: name the tools to grant, e.g. {\"tools\": [\"bash\"]}".into(),
            ));
        }
        let defs = tools
            .iter()
            .map(|tool| resolve(tool))
            .collect::<Result<Vec<_>, _>>()?;
        // The role first: a refused grant changes nothing and is recorded.
        for tool in &defs {
            let preset = tool_grant_amounts_to(tool);
            if !may_grant(role, Some(preset)) {
                let needed = role_to_grant(tool);
                self.audit_grant(
                    name,
                    &format!("agent:grant:{}", tool.name),
                    AuditDecision::Deny,
                    user,
                    format!(
                        "refused: {user} is a {}; granting {} (every call allowed unasked, \
                         what the '{preset}' preset gives) needs the role {}",
                        role.as_str(),
                        tool.name,
                        needed.as_str()
                    ),
                )
                .await;
                return Err(AgentError::Forbidden(format!(
                    "{user} (role {}) may not grant {}: a grant allows every call of it \
                     unasked, which is what the '{preset}' preset gives; this needs the role \
                     {} (or above)",
                    role.as_str(),
                    tool.name,
                    needed.as_str()
                )));
            }
        }
        let before = self.store.agent_grants(name).await?;
        let mut names: Vec<String> = Vec::new();
        for def in &defs {
            if !names.iter().any(|n| n == def.name) {
                names.push(def.name.to_string());
            }
        }
        let after = self.store.grant_tools(name, &names, &user.text()).await?;
        for grant in after.iter().filter(|g| !before.contains(g)) {
            self.audit_grant(
                name,
                &format!("agent:grant:{}", grant.tool),
                AuditDecision::Done,
                user,
                format!("granted {}", grant.tool),
            )
            .await;
        }
        if let Some(profile) = profile_of(&agent.permissions) {
            self.offer_tools(name, &profile).await;
        }
        Ok(after)
    }

    /// Takes `tool` (any of its names) back from agent `name`; a 404 when it was
    /// not granted.
    pub async fn revoke_tool(
        &self,
        name: &str,
        tool: &str,
        user: &Principal,
    ) -> Result<(), AgentError> {
        let agent = self
            .store
            .active_agent(name)
            .await?
            .ok_or_else(|| AgentError::NotFound(format!("no agent named '{name}'")))?;
        let def = resolve(tool)?;
        if !self.store.revoke_tool(name, def.name).await? {
            return Err(AgentError::NotFound(format!(
                "{} is not granted to agent '{name}' (`chorus grants {name}` lists its grants)",
                def.name
            )));
        }
        self.audit_grant(
            name,
            &format!("agent:revoke:{}", def.name),
            AuditDecision::Done,
            user,
            format!("revoked {}", def.name),
        )
        .await;
        if let Some(profile) = profile_of(&agent.permissions) {
            self.offer_tools(name, &profile).await;
        }
        Ok(())
    }

    /// The grants of agent `name`, oldest first.
    pub async fn grants(&self, name: &str) -> Result<Vec<GrantRecord>, AgentError> {
        if self.store.active_agent(name).await?.is_none() {
            return Err(AgentError::NotFound(format!("no agent named '{name}'")));
        }
        Ok(self.store.agent_grants(name).await?)
    }

    /// Tells the runs going which tools to offer from their next model call: the
    /// profile's and the granted ones. A failed read of the grants is logged; the
    /// next run reads them again.
    pub(super) async fn offer_tools(&self, name: &str, profile: &Profile) {
        let grants: Vec<String> = match self.store.agent_grants(name).await {
            Ok(grants) => grants.into_iter().map(|g| g.tool).collect(),
            Err(e) => {
                tracing::error!(agent = name, error = %e, "cannot read the agent's grants; runs going keep their tools");
                return;
            }
        };
        self.runs
            .agent_changed(
                name,
                AgentChange {
                    tools: Some(offered_tools(profile, &grants)),
                    offered: Some(offered_specs(profile, &grants, &self.runs.tool_schemas())),
                    ..AgentChange::default()
                },
            )
            .await;
    }

    async fn audit_grant(
        &self,
        agent: &str,
        action: &str,
        decision: AuditDecision,
        user: &Principal,
        detail: String,
    ) {
        let entry = AuditEntry {
            agent_name: agent,
            action,
            decision,
            user_id: Some(user),
            detail: Some(detail),
            thread_id: None,
            call_id: None,
            worker: None,
        };
        if let Err(e) = self.store.audit(entry).await {
            tracing::error!(agent, action, error = %e, "cannot write audit entry");
        }
    }
}
