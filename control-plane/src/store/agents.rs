//! The agent registry table.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{AgentPolicy, Store, StoreError, now};
use crate::switches::{Network, OnAsk};
use chorus_proto::domain::Backend;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    Active,
    Destroyed,
}

impl AgentStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentStatus::Active => "active",
            AgentStatus::Destroyed => "destroyed",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentRecord {
    pub name: String,
    pub status: AgentStatus,
    pub model: Option<String>,
    pub system_prompt: String,
    /// A preset name, or a custom profile as JSON.
    pub permissions: String,
    /// What an ASK does: `prompt` a person, or resolve to `allow` / `deny`.
    pub on_ask: OnAsk,
    /// Whether its tool processes may use TCP: `on` or `off`.
    pub network: Network,
    /// What runs its turns: the tool loop or a CLI.
    pub backend: Backend,
    pub created_at: String,
    pub updated_at: String,
    /// Destroyed, and its files are still to be deleted (the deletion failed or was
    /// interrupted); whoever sees this finishes the deletion first.
    pub purge_files: bool,
    /// Destroyed with its files kept (`keep_files=true`), for a new agent of the name.
    pub files_kept: bool,
    /// Seconds without activity before its context is saved and cleared; `Some(0)`:
    /// never; `None`: the server's default.
    pub idle_timeout_secs: Option<u64>,
    /// When its context was last cleared (the context starts there at the earliest).
    pub context_cleared_at: Option<String>,
    /// The Discord channel it is bound to (messages there go to it).
    pub discord_channel_id: Option<String>,
    /// Which creation of the name this is (see `migrations/*/0013_agent_incarnation.sql`):
    /// dial-in workers keep a directory only for the incarnation it was laid out for.
    pub incarnation: String,
}

/// Which creation of a name the store knows, and what becomes of a destroyed one's
/// files: what a dial-in worker's leftover directories are checked against.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentIncarnation {
    pub name: String,
    pub status: AgentStatus,
    pub incarnation: String,
    /// Destroyed with its files kept (for a new agent of the name to pick up).
    pub files_kept: bool,
}

#[derive(Debug, Clone)]
pub struct NewAgent {
    pub name: String,
    pub model: Option<String>,
    pub system_prompt: String,
    pub permissions: String,
    pub on_ask: OnAsk,
    pub network: Network,
    pub backend: Backend,
    pub idle_timeout_secs: Option<u64>,
    pub discord_channel_id: Option<String>,
    /// New for a new agent; the destroyed row's for an agent revived with its kept files.
    pub incarnation: String,
    /// Its MCP servers (checked JSON), written in the same transaction: a revived
    /// agent's incarnation never shows the old creation's servers, even for a moment.
    pub mcp_servers: Option<String>,
    /// Its heartbeat setting (none: off), written in the same transaction too.
    pub heartbeat: Option<super::heartbeats::InitialHeartbeat>,
}

/// Fields a configure call may change; `None` leaves the field alone.
#[derive(Debug, Clone, Default)]
pub struct AgentUpdate {
    pub model: Option<String>,
    pub system_prompt: Option<String>,
    pub permissions: Option<String>,
    pub on_ask: Option<OnAsk>,
    pub network: Option<Network>,
    pub backend: Option<Backend>,
    /// `Some(None)` goes back to the server's default.
    pub idle_timeout_secs: Option<Option<u64>>,
    /// `Some(None)` unbinds its Discord channel.
    pub discord_channel_id: Option<Option<String>>,
}

/// A row's `status` column.
fn status_of(row: &AnyRow) -> Result<AgentStatus, StoreError> {
    let status: String = row.try_get("status")?;
    match status.as_str() {
        "active" => Ok(AgentStatus::Active),
        "destroyed" => Ok(AgentStatus::Destroyed),
        _ => Err(StoreError::Corrupt {
            column: "agents.status",
            value: status,
        }),
    }
}

/// A stored switch, read into its closed set (anything else is a corrupt row).
fn switch<T>(
    row: &AnyRow,
    column: &'static str,
    parse: fn(&str) -> Result<T, String>,
) -> Result<T, StoreError> {
    let text: String = row.try_get(column)?;
    parse(&text).map_err(|_| StoreError::Corrupt {
        column,
        value: text,
    })
}

fn agent_from_row(row: &AnyRow) -> Result<AgentRecord, StoreError> {
    let status = status_of(row)?;
    Ok(AgentRecord {
        name: row.try_get("name")?,
        status,
        model: row.try_get("model")?,
        system_prompt: row.try_get("system_prompt")?,
        permissions: row.try_get("permissions")?,
        on_ask: switch(row, "on_ask", OnAsk::parse)?,
        network: switch(row, "network", Network::parse)?,
        backend: switch(row, "backend", |text| {
            text.parse::<Backend>().map_err(|e| e.to_string())
        })?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
        purge_files: row.try_get::<i64, _>("purge_files")? != 0,
        files_kept: row.try_get::<i64, _>("files_kept")? != 0,
        idle_timeout_secs: row
            .try_get::<Option<i64>, _>("idle_timeout_secs")?
            .map(|v| v.max(0) as u64),
        context_cleared_at: row.try_get("context_cleared_at")?,
        discord_channel_id: row.try_get("discord_channel_id")?,
        incarnation: row.try_get("incarnation")?,
    })
}

const AGENT_COLUMNS: &str = "SELECT name, status, model, system_prompt, permissions, on_ask, network, backend, created_at, updated_at, purge_files, files_kept, idle_timeout_secs, context_cleared_at, discord_channel_id, incarnation FROM agents";

impl Store {
    /// Registers an agent, or revives the row of a destroyed agent with that name.
    /// Fails with [`StoreError::Conflict`] while an active agent holds the name.
    pub async fn register_agent(&self, agent: &NewAgent) -> Result<AgentRecord, StoreError> {
        self.register_agent_at(agent, &now()).await
    }

    /// [`Store::register_agent`] with the creation time the caller already wrote
    /// into the agent's files.
    pub async fn register_agent_at(
        &self,
        agent: &NewAgent,
        at: &str,
    ) -> Result<AgentRecord, StoreError> {
        let agent = agent.clone();
        let name = agent.name.clone();
        let at = at.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let existing: Option<String> =
                    sqlx::query_scalar("SELECT status FROM agents WHERE name = $1")
                        .bind(&agent.name)
                        .fetch_optional(&mut *tx)
                        .await?;
                match existing.as_deref() {
                    Some("active") => {
                        return Err(StoreError::Conflict(format!(
                            "an agent named '{}' already exists",
                            agent.name
                        )));
                    }
                    Some(_) => {
                        sqlx::query(
                            "UPDATE agents SET status = 'active', model = $2, system_prompt = $3, \
                             permissions = $4, created_at = $5, updated_at = $5, destroyed_at = NULL, on_ask = $6, \
                             network = $7, purge_files = 0, files_kept = 0, idle_timeout_secs = $8, \
                             context_cleared_at = $5, discord_channel_id = $9, incarnation = $10, backend = $11 \
                             WHERE name = $1",
                        )
                        .bind(&agent.name)
                        .bind(&agent.model)
                        .bind(&agent.system_prompt)
                        .bind(&agent.permissions)
                        .bind(&at)
                        .bind(agent.on_ask.as_str())
                        .bind(agent.network.as_str())
                        .bind(agent.idle_timeout_secs.map(|v| v as i64))
                        .bind(&agent.discord_channel_id)
                        .bind(&agent.incarnation)
                        .bind(agent.backend.as_str())
                        .execute(&mut *tx)
                        .await?;
                        // The name's earlier agent's vectors and embedding model are
                        // not this one's (a model recorded then would pause its search).
                        for sql in [
                            "DELETE FROM memory_vectors WHERE agent_name = $1",
                            "DELETE FROM memory_embedding WHERE agent_name = $1",
                        ] {
                            sqlx::query(sql)
                                .bind(&agent.name)
                                .execute(&mut *tx)
                                .await?;
                        }
                    }
                    None => {
                        sqlx::query(
                            "INSERT INTO agents (name, status, model, system_prompt, permissions, on_ask, network, \
                             created_at, updated_at, idle_timeout_secs, discord_channel_id, incarnation, backend) \
                             VALUES ($1, 'active', $2, $3, $4, $6, $7, $5, $5, $8, $9, $10, $11)",
                        )
                        .bind(&agent.name)
                        .bind(&agent.model)
                        .bind(&agent.system_prompt)
                        .bind(&agent.permissions)
                        .bind(&at)
                        .bind(agent.on_ask.as_str())
                        .bind(agent.network.as_str())
                        .bind(agent.idle_timeout_secs.map(|v| v as i64))
                        .bind(&agent.discord_channel_id)
                        .bind(&agent.incarnation)
                        .bind(agent.backend.as_str())
                        .execute(&mut *tx)
                        .await?;
                    }
                }
                super::mcp_servers::replace_mcp_servers(
                    tx,
                    &agent.name,
                    &agent.incarnation,
                    agent.mcp_servers.as_deref(),
                    &at,
                )
                .await?;
                super::heartbeats::replace_heartbeat(
                    tx,
                    &agent.name,
                    &agent.incarnation,
                    agent.heartbeat.as_ref(),
                    &at,
                )
                .await?;
                Ok(())
            })
        })
        .await?;
        self.policies.changed(&name);
        self.agent(&name)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("agent '{name}' vanished")))
    }

    /// Any agent by name, active or destroyed.
    pub async fn agent(&self, name: &str) -> Result<Option<AgentRecord>, StoreError> {
        let sql = format!("{AGENT_COLUMNS} WHERE name = $1");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(name)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(agent_from_row).transpose()
    }

    /// What the permission gate decides an active agent's tool calls with; from
    /// memory after the first read (see [`super::policies`]). None: no such
    /// active agent.
    pub async fn agent_policy(&self, name: &str) -> Result<Option<AgentPolicy>, StoreError> {
        let generation = match self.policies.get(name) {
            Ok(policy) => return Ok(Some(policy)),
            Err(generation) => generation,
        };
        let Some(record) = self.active_agent(name).await? else {
            return Ok(None);
        };
        let grants = self.agent_grants(name).await?;
        let policy = AgentPolicy {
            permissions: record.permissions,
            on_ask: record.on_ask,
            grants: grants.into_iter().map(|g| g.tool).collect(),
        };
        self.policies.put(name, generation, policy.clone());
        Ok(Some(policy))
    }

    /// An active agent by name.
    pub async fn active_agent(&self, name: &str) -> Result<Option<AgentRecord>, StoreError> {
        Ok(self
            .agent(name)
            .await?
            .filter(|a| a.status == AgentStatus::Active))
    }

    pub async fn active_agents(&self) -> Result<Vec<AgentRecord>, StoreError> {
        let sql = format!("{AGENT_COLUMNS} WHERE status = 'active' ORDER BY name");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(agent_from_row).collect()
    }

    /// The active agent bound to a Discord channel, if any.
    pub async fn agent_by_discord_channel(
        &self,
        channel: &str,
    ) -> Result<Option<AgentRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{AGENT_COLUMNS} WHERE discord_channel_id = $1 AND status = 'active'"
        )))
        .bind(channel)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(agent_from_row).transpose()
    }

    pub async fn update_agent(
        &self,
        name: &str,
        update: &AgentUpdate,
    ) -> Result<AgentRecord, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE agents SET model = COALESCE($2, model), \
             system_prompt = COALESCE($3, system_prompt), permissions = COALESCE($5, permissions), \
             on_ask = COALESCE($6, on_ask), network = COALESCE($7, network), updated_at = $4, \
             idle_timeout_secs = CASE WHEN $8 = 1 THEN $9 ELSE idle_timeout_secs END, \
             discord_channel_id = CASE WHEN $10 = 1 THEN $11 ELSE discord_channel_id END, \
             backend = COALESCE($12, backend) \
             WHERE name = $1 AND status = 'active'",
                )
                .bind(name)
                .bind(&update.model)
                .bind(&update.system_prompt)
                .bind(now())
                .bind(&update.permissions)
                .bind(update.on_ask.map(OnAsk::as_str))
                .bind(update.network.map(Network::as_str))
                .bind(i64::from(update.idle_timeout_secs.is_some()))
                .bind(update.idle_timeout_secs.flatten().map(|v| v as i64))
                .bind(i64::from(update.discord_channel_id.is_some()))
                .bind(update.discord_channel_id.clone().flatten())
                .bind(update.backend.map(Backend::as_str)),
            )
            .await?;
        self.policies.changed(name);
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!(
                "no active agent named '{name}'"
            )));
        }
        self.agent(name)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("no agent named '{name}'")))
    }

    /// Marks an active agent destroyed, in one statement: the point after which it
    /// is gone whatever fails next. `purge_files` says its files are to be deleted;
    /// [`Store::files_purged`] clears it once they are.
    pub async fn mark_agent_destroyed(
        &self,
        name: &str,
        purge_files: bool,
    ) -> Result<(), StoreError> {
        let at = now();
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE agents SET status = 'destroyed', destroyed_at = $2, updated_at = $2, \
             purge_files = $3, files_kept = 1 - $3 WHERE name = $1 AND status = 'active'",
                )
                .bind(name)
                .bind(&at)
                .bind(i64::from(purge_files)),
            )
            .await?;
        self.policies.changed(name);
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!(
                "no active agent named '{name}'"
            )));
        }
        Ok(())
    }

    /// The destroyed agent's files are gone.
    pub async fn files_purged(&self, name: &str) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "UPDATE agents SET purge_files = 0 WHERE name = $1 AND status = 'destroyed'",
            )
            .bind(name),
        )
        .await?;
        Ok(())
    }

    /// Every name's current incarnation, active or destroyed.
    pub async fn agent_incarnations(&self) -> Result<Vec<AgentIncarnation>, StoreError> {
        let rows = sqlx::query("SELECT name, status, incarnation, files_kept FROM agents")
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| {
                Ok(AgentIncarnation {
                    name: row.try_get("name")?,
                    status: status_of(row)?,
                    incarnation: row.try_get("incarnation")?,
                    files_kept: row.try_get::<i64, _>("files_kept")? != 0,
                })
            })
            .collect()
    }

    /// Destroyed agents whose files are still to be deleted.
    pub async fn agents_to_purge(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT name FROM agents WHERE status = 'destroyed' AND purge_files = 1 ORDER BY name",
        )
        .fetch_all(&self.pool)
        .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store;

    fn new_agent(name: &str) -> NewAgent {
        NewAgent {
            discord_channel_id: None,
            incarnation: "i1".into(),
            mcp_servers: None,
            heartbeat: None,
            name: name.into(),
            model: Some("m".into()),
            system_prompt: "p".into(),
            permissions: "standard".into(),
            on_ask: OnAsk::Prompt,
            network: Network::On,
            backend: Default::default(),
            idle_timeout_secs: None,
        }
    }

    /// A creation's MCP servers are written with its row: a revived agent (kept
    /// files, the same incarnation) has only what its new creation was given.
    #[tokio::test]
    async fn a_creation_s_mcp_servers_and_heartbeat_are_written_with_it_and_a_revived_agent_has_only_its_own()
     {
        let (store, _dir) = test_store().await;
        let servers = r#"{"demo":{"command":"x"}}"#;
        store
            .register_agent(&NewAgent {
                mcp_servers: Some(servers.into()),
                heartbeat: Some(crate::store::InitialHeartbeat {
                    minutes: 30,
                    model: None,
                    next_at: Some("2026-01-01T10:00:00.000Z".into()),
                }),
                ..new_agent("a")
            })
            .await
            .unwrap();
        assert_eq!(
            store.mcp_servers("a").await.unwrap().as_deref(),
            Some(servers)
        );
        assert_eq!(
            store
                .heartbeat_setting("a")
                .await
                .unwrap()
                .map(|h| h.minutes),
            Some(30)
        );
        store.mark_agent_destroyed("a", true).await.unwrap();
        assert_eq!(store.mcp_servers("a").await.unwrap(), None, "not active");
        store.register_agent(&new_agent("a")).await.unwrap();
        assert_eq!(
            store.mcp_servers("a").await.unwrap(),
            None,
            "revived without"
        );
        assert!(
            store
                .heartbeat_setting("a")
                .await
                .unwrap()
                .is_none_or(|h| h.minutes == 0),
            "revived with its heartbeat off"
        );
    }

    /// The gate's view of an agent follows every change at once: a new profile,
    /// a destroyed agent, the same name revived.
    #[tokio::test]
    async fn the_gate_policy_follows_every_change() {
        let (store, _dir) = test_store().await;
        store.register_agent(&new_agent("a")).await.unwrap();
        let policy = |p: &str, a: &str| AgentPolicy {
            permissions: p.into(),
            on_ask: OnAsk::parse(a).unwrap(),
            grants: Vec::new(),
        };
        assert_eq!(
            store.agent_policy("a").await.unwrap(),
            Some(policy("standard", "prompt"))
        );
        let update = AgentUpdate {
            permissions: Some("readonly".into()),
            on_ask: Some(OnAsk::Deny),
            ..AgentUpdate::default()
        };
        store.update_agent("a", &update).await.unwrap();
        assert_eq!(
            store.agent_policy("a").await.unwrap(),
            Some(policy("readonly", "deny"))
        );
        store.mark_agent_destroyed("a", false).await.unwrap();
        assert_eq!(store.agent_policy("a").await.unwrap(), None);
        store.register_agent(&new_agent("a")).await.unwrap();
        assert_eq!(
            store.agent_policy("a").await.unwrap(),
            Some(policy("standard", "prompt"))
        );
    }

    #[tokio::test]
    async fn an_active_name_cannot_be_registered_twice() {
        let (store, _dir) = test_store().await;
        store.register_agent(&new_agent("a")).await.unwrap();
        let err = store.register_agent(&new_agent("a")).await.unwrap_err();
        assert!(matches!(err, StoreError::Conflict(_)));
    }

    #[tokio::test]
    async fn a_destroyed_name_is_revived_in_place() {
        let (store, _dir) = test_store().await;
        store.register_agent(&new_agent("a")).await.unwrap();
        store.mark_agent_destroyed("a", true).await.unwrap();
        assert_eq!(store.agents_to_purge().await.unwrap(), ["a"]);
        store.files_purged("a").await.unwrap();
        assert!(store.agents_to_purge().await.unwrap().is_empty());
        assert!(store.active_agent("a").await.unwrap().is_none());
        assert_eq!(
            store.agent("a").await.unwrap().unwrap().status,
            AgentStatus::Destroyed
        );
        let revived = store
            .register_agent(&NewAgent {
                model: Some("other".into()),
                incarnation: "i2".into(),
                mcp_servers: None,
                heartbeat: None,
                ..new_agent("a")
            })
            .await
            .unwrap();
        assert_eq!(revived.status, AgentStatus::Active);
        assert_eq!(revived.incarnation, "i2", "a new creation of the name");
        store.register_agent(&new_agent("k")).await.unwrap();
        store.mark_agent_destroyed("k", false).await.unwrap();
        let mut known = store.agent_incarnations().await.unwrap();
        known.sort_by(|a, b| a.name.cmp(&b.name));
        let summary: Vec<(&str, AgentStatus, &str, bool)> = known
            .iter()
            .map(|k| {
                (
                    k.name.as_str(),
                    k.status,
                    k.incarnation.as_str(),
                    k.files_kept,
                )
            })
            .collect();
        assert_eq!(
            summary,
            [
                ("a", AgentStatus::Active, "i2", false),
                ("k", AgentStatus::Destroyed, "i1", true),
            ]
        );
        assert_eq!(
            revived.context_cleared_at.as_deref(),
            Some(revived.created_at.as_str()),
            "a revived name starts with an empty context, not the old agent's"
        );
        assert_eq!(revived.model.as_deref(), Some("other"));
        assert_eq!(store.active_agents().await.unwrap().len(), 1);
    }

    /// An agent's backend is stored as its text form, changed only when given, and a
    /// revived name starts with the backend it is registered with.
    #[tokio::test]
    async fn the_backend_is_stored_and_changed_only_when_given() {
        let (store, _dir) = test_store().await;
        let a = store.register_agent(&new_agent("a")).await.unwrap();
        assert_eq!(a.backend, Backend::Api, "the default");
        let set = |backend| AgentUpdate {
            backend,
            ..AgentUpdate::default()
        };
        let cc = store
            .update_agent("a", &set(Some(Backend::ClaudeCode)))
            .await
            .unwrap();
        assert_eq!(cc.backend, Backend::ClaudeCode);
        let stored: String = sqlx::query_scalar("SELECT backend FROM agents WHERE name = 'a'")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(stored, "claude-code");
        let same = store.update_agent("a", &set(None)).await.unwrap();
        assert_eq!(
            same.backend,
            Backend::ClaudeCode,
            "left alone when not given"
        );
        store.mark_agent_destroyed("a", false).await.unwrap();
        let revived = store
            .register_agent(&NewAgent {
                backend: Backend::OpenCode,
                incarnation: "i2".into(),
                mcp_servers: None,
                heartbeat: None,
                ..new_agent("a")
            })
            .await
            .unwrap();
        assert_eq!(revived.backend, Backend::OpenCode);
        // A value outside the set is a corrupt row, not a silent default.
        sqlx::query("UPDATE agents SET backend = 'claude' WHERE name = 'a'")
            .execute(&store.pool)
            .await
            .unwrap();
        assert!(matches!(
            store.agent("a").await,
            Err(StoreError::Corrupt {
                column: "backend",
                ..
            })
        ));
    }

    #[tokio::test]
    async fn update_changes_only_given_fields() {
        let (store, _dir) = test_store().await;
        store.register_agent(&new_agent("a")).await.unwrap();
        let updated = store
            .update_agent(
                "a",
                &AgentUpdate {
                    model: Some("new".into()),
                    ..AgentUpdate::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(updated.model.as_deref(), Some("new"));
        assert_eq!(updated.system_prompt, "p");
        assert_eq!(updated.idle_timeout_secs, None, "the server's default");
        let set = |v| AgentUpdate {
            idle_timeout_secs: Some(v),
            ..AgentUpdate::default()
        };
        let never = store.update_agent("a", &set(Some(0))).await.unwrap();
        assert_eq!(never.idle_timeout_secs, Some(0));
        assert_eq!(
            store
                .update_agent("a", &AgentUpdate::default())
                .await
                .unwrap()
                .idle_timeout_secs,
            Some(0),
            "left alone when not given"
        );
        let back = store.update_agent("a", &set(None)).await.unwrap();
        assert_eq!(back.idle_timeout_secs, None);
        assert!(matches!(
            store.update_agent("nobody", &AgentUpdate::default()).await,
            Err(StoreError::NotFound(_))
        ));
    }
}
