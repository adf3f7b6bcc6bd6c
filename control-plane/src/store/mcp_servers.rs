//! An agent's MCP servers (`agent_mcp_servers`, see
//! `migrations/*/0026_mcp_servers.sql`): one row of JSON per creation of the name,
//! holding secrets by reference only (`crate::mcp` checks it before it is written).

use sqlx::AnyConnection;

use super::{Store, StoreError, now};

/// Replaces the servers of one creation of `agent`, in the caller's transaction.
pub(super) async fn replace_mcp_servers(
    tx: &mut AnyConnection,
    agent: &str,
    incarnation: &str,
    servers: Option<&str>,
    at: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM agent_mcp_servers WHERE agent_name = $1 AND incarnation = $2")
        .bind(agent)
        .bind(incarnation)
        .execute(&mut *tx)
        .await?;
    if let Some(servers) = servers {
        sqlx::query(
            "INSERT INTO agent_mcp_servers (agent_name, incarnation, servers, updated_at) \
             VALUES ($1, $2, $3, $4)",
        )
        .bind(agent)
        .bind(incarnation)
        .bind(servers)
        .bind(at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

impl Store {
    /// Sets the MCP servers of the active agent `name` (`None`: it has none).
    pub async fn set_mcp_servers(
        &self,
        name: &str,
        servers: Option<String>,
    ) -> Result<(), StoreError> {
        let (agent, at) = (name.to_owned(), now());
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
                    replace_mcp_servers(tx, &agent, &incarnation, servers.as_deref(), &at).await?;
                    Ok(true)
                })
            })
            .await?;
        if !done {
            return Err(StoreError::NotFound(format!(
                "no active agent named '{name}'"
            )));
        }
        Ok(())
    }

    /// The MCP servers (JSON) of the active agent `name`; `None`: none set.
    pub async fn mcp_servers(&self, name: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT m.servers FROM agent_mcp_servers m \
             JOIN agents a ON a.name = m.agent_name AND a.incarnation = m.incarnation \
             WHERE m.agent_name = $1 AND a.status = 'active'",
        )
        .bind(name)
        .fetch_optional(&self.pool)
        .await?)
    }
}
