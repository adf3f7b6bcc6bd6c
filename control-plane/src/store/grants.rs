//! Tools granted to an agent at run time (`agent_grants`, see
//! `migrations/*/0022_agent_grants.sql`): rows of the agent's current creation only.
//! Every write here is followed by [`super::policies::Policies::changed`], since the
//! gate decides with the grants it keeps in memory beside the profile.

use sqlx::Row;

use super::{Store, StoreError, now};

/// One granted tool.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct GrantRecord {
    /// The tool's Chorus name (`bash`, `file.write`).
    pub tool: String,
    /// Who granted it (a principal's text: `api`, `alice`, `discord:1`).
    pub granted_by: String,
    pub granted_at: String,
}

impl Store {
    /// Grants `tools` (Chorus names) to the active agent `name`; a tool granted
    /// already keeps its first grant. Returns every grant the agent has now.
    pub async fn grant_tools(
        &self,
        name: &str,
        tools: &[String],
        granted_by: &str,
    ) -> Result<Vec<GrantRecord>, StoreError> {
        let (agent, tools, by, at) = (
            name.to_owned(),
            tools.to_vec(),
            granted_by.to_owned(),
            now(),
        );
        let done = self
            .write(move |tx| {
                Box::pin(async move {
                    let incarnation: Option<String> = sqlx::query_scalar(
                        "SELECT incarnation FROM agents WHERE name = $1 AND status = 'active'",
                    )
                    .bind(&agent)
                    .fetch_optional(&mut *tx)
                    .await?;
                    let Some(incarnation) = incarnation else {
                        return Ok(false);
                    };
                    for tool in &tools {
                        sqlx::query(
                            "INSERT INTO agent_grants (agent_name, incarnation, tool, granted_by, granted_at) \
                             VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                        )
                        .bind(&agent)
                        .bind(&incarnation)
                        .bind(tool)
                        .bind(&by)
                        .bind(&at)
                        .execute(&mut *tx)
                        .await?;
                    }
                    Ok(true)
                })
            })
            .await?;
        self.policies.changed(name);
        if !done {
            return Err(StoreError::NotFound(format!(
                "no active agent named '{name}'"
            )));
        }
        self.agent_grants(name).await
    }

    /// Takes `tool` back from the active agent `name`; false when it was not granted.
    pub async fn revoke_tool(&self, name: &str, tool: &str) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "DELETE FROM agent_grants WHERE agent_name = $1 AND tool = $2 AND incarnation = \
                     (SELECT incarnation FROM agents WHERE name = $1 AND status = 'active')",
                )
                .bind(name.to_owned())
                .bind(tool.to_owned()),
            )
            .await?;
        self.policies.changed(name);
        Ok(done.rows_affected() > 0)
    }

    /// The grants of the active agent `name` (none for an unknown or destroyed
    /// one), in the order they were made.
    pub async fn agent_grants(&self, name: &str) -> Result<Vec<GrantRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT g.tool, g.granted_by, g.granted_at FROM agent_grants g \
             JOIN agents a ON a.name = g.agent_name AND a.incarnation = g.incarnation \
             WHERE g.agent_name = $1 AND a.status = 'active' ORDER BY g.granted_at, g.tool",
        )
        .bind(name)
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(GrantRecord {
                    tool: row.try_get("tool")?,
                    granted_by: row.try_get("granted_by")?,
                    granted_at: row.try_get("granted_at")?,
                })
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Grants are kept once per tool, taken back one by one, and belong to one
    /// creation of the name: a destroyed agent has none, and neither has the next
    /// agent of that name.
    #[tokio::test]
    async fn grants_belong_to_one_creation_of_the_agent() {
        let (store, _dir) = crate::store::test_store_with_agent().await;
        let tools = |g: Vec<GrantRecord>| g.into_iter().map(|g| g.tool).collect::<Vec<_>>();
        let granted = store
            .grant_tools("a", &["bash".into(), "file.write".into()], "olga")
            .await
            .unwrap();
        assert_eq!(tools(granted.clone()), ["bash", "file.write"]);
        assert_eq!(granted[0].granted_by, "olga");
        // Granting again keeps the first grant.
        let again = store
            .grant_tools("a", &["bash".into()], "adam")
            .await
            .unwrap();
        assert_eq!(again, granted);
        assert!(store.revoke_tool("a", "bash").await.unwrap());
        assert!(!store.revoke_tool("a", "bash").await.unwrap());
        assert_eq!(
            tools(store.agent_grants("a").await.unwrap()),
            ["file.write"]
        );
        let policy = store.agent_policy("a").await.unwrap().unwrap();
        assert_eq!(policy.grants, ["file.write"]);
        assert!(matches!(
            store.grant_tools("ghost", &["bash".into()], "olga").await,
            Err(StoreError::NotFound(_))
        ));

        store.mark_agent_destroyed("a", false).await.unwrap();
        assert!(store.agent_grants("a").await.unwrap().is_empty());
        store
            .register_agent(&crate::store::NewAgent {
                discord_channel_id: None,
                incarnation: "i2".into(),
                mcp_servers: None,
                heartbeat: None,
                name: "a".into(),
                model: None,
                system_prompt: "p".into(),
                permissions: "locked".into(),
                on_ask: crate::switches::OnAsk::Prompt,
                network: crate::switches::Network::On,
                backend: Default::default(),
                idle_timeout_secs: None,
            })
            .await
            .unwrap();
        assert!(store.agent_grants("a").await.unwrap().is_empty());
        assert!(
            store
                .agent_policy("a")
                .await
                .unwrap()
                .unwrap()
                .grants
                .is_empty()
        );
    }
}
