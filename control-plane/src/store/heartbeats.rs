//! Heartbeats (migration 0029; the mechanics are `heartbeat`'s): each agent's setting
//! (`agent_heartbeats`, one row per creation of the name) and each heartbeat's record
//! (`heartbeats`). Only rows of the agent's current incarnation are read: a destroyed
//! agent's heartbeat never fires, and a re-created one starts with it off.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, now};

/// An agent's heartbeat setting and where its timing stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatSetting {
    pub agent_name: String,
    pub incarnation: String,
    /// 0: off.
    pub minutes: u32,
    /// The model heartbeats use; `None`: the agent's.
    pub model: Option<String>,
    /// The next periodic heartbeat; `None`: off.
    pub next_at: Option<String>,
    /// HEARTBEAT.md's hash at the last quiet answer.
    pub quiet_hash: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatCause {
    /// Every `heartbeat_minutes`.
    Periodic,
    /// `POST /api/agents/{name}/heartbeat`.
    Manual,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HeartbeatOutcome {
    Running,
    /// The answer began or ended with `HEARTBEAT_OK`: recorded, nothing posted.
    Quiet,
    /// Anything else: posted as a notification.
    Notified,
    /// No model call (the reason says why).
    Skipped,
    /// The thread failed or was killed, or could not start.
    Failed,
}

macro_rules! words {
    ($ty:ty, $column:literal, $($variant:ident => $word:literal),+) => {
        impl $ty {
            pub fn as_str(self) -> &'static str {
                match self { $(<$ty>::$variant => $word),+ }
            }
            fn parse(s: &str) -> Result<Self, StoreError> {
                match s {
                    $($word => Ok(<$ty>::$variant),)+
                    other => Err(StoreError::Corrupt { column: $column, value: other.to_string() }),
                }
            }
        }
    };
}
words!(HeartbeatCause, "heartbeats.cause", Periodic => "periodic", Manual => "manual");
words!(HeartbeatOutcome, "heartbeats.outcome", Running => "running", Quiet => "quiet",
    Notified => "notified", Skipped => "skipped", Failed => "failed");

/// One heartbeat as the API shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct HeartbeatRecord {
    pub id: u64,
    pub agent: String,
    pub cause: HeartbeatCause,
    pub outcome: HeartbeatOutcome,
    pub reason: Option<String>,
    pub thread_id: Option<u64>,
    pub tokens: u64,
    pub started_at: String,
    pub ended_at: Option<String>,
    /// Which creation of the agent's name it belongs to.
    #[serde(skip)]
    pub incarnation: String,
    /// HEARTBEAT.md's hash when it was read.
    #[serde(skip)]
    pub file_hash: Option<String>,
}

fn setting_from_row(row: &AnyRow) -> Result<HeartbeatSetting, StoreError> {
    Ok(HeartbeatSetting {
        agent_name: row.try_get("agent_name")?,
        incarnation: row.try_get("incarnation")?,
        minutes: row.try_get::<i64, _>("minutes")?.clamp(0, u32::MAX as i64) as u32,
        model: row.try_get("model")?,
        next_at: row.try_get("next_at")?,
        quiet_hash: row.try_get("quiet_hash")?,
    })
}

fn record_from_row(row: &AnyRow) -> Result<HeartbeatRecord, StoreError> {
    Ok(HeartbeatRecord {
        id: row.try_get::<i64, _>("id")? as u64,
        agent: row.try_get("agent_name")?,
        cause: HeartbeatCause::parse(&row.try_get::<String, _>("cause")?)?,
        outcome: HeartbeatOutcome::parse(&row.try_get::<String, _>("outcome")?)?,
        reason: row.try_get("reason")?,
        thread_id: row
            .try_get::<Option<i64>, _>("thread_id")?
            .map(|t| t as u64),
        tokens: row.try_get::<i64, _>("tokens")?.max(0) as u64,
        started_at: row.try_get("started_at")?,
        ended_at: row.try_get("ended_at")?,
        incarnation: row.try_get("incarnation")?,
        file_hash: row.try_get("file_hash")?,
    })
}

const SETTING: &str = "SELECT h.agent_name, h.incarnation, h.minutes, h.model, h.next_at, h.quiet_hash \
     FROM agent_heartbeats h JOIN agents a ON a.name = h.agent_name \
     AND a.incarnation = h.incarnation AND a.status = 'active'";

const RECORD: &str = "SELECT h.id, h.agent_name, h.cause, h.outcome, h.reason, h.thread_id, h.tokens, \
     h.started_at, h.ended_at, h.incarnation, h.file_hash FROM heartbeats h";

/// A new creation's heartbeat setting, written in the transaction that creates it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InitialHeartbeat {
    pub minutes: u32,
    pub model: Option<String>,
    pub next_at: Option<String>,
}

/// Replaces the heartbeat setting of one creation of `agent` (none: off), in the
/// caller's transaction: a revived agent (its kept incarnation) starts with only what
/// its new creation was given.
pub(super) async fn replace_heartbeat(
    tx: &mut sqlx::AnyConnection,
    agent: &str,
    incarnation: &str,
    initial: Option<&InitialHeartbeat>,
    at: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM agent_heartbeats WHERE agent_name = $1 AND incarnation = $2")
        .bind(agent)
        .bind(incarnation)
        .execute(&mut *tx)
        .await?;
    if let Some(h) = initial {
        sqlx::query(
            "INSERT INTO agent_heartbeats (agent_name, incarnation, minutes, model, next_at, updated_at) \
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(agent)
        .bind(incarnation)
        .bind(i64::from(h.minutes))
        .bind(h.model.clone())
        .bind(h.next_at.clone())
        .bind(at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// How many heartbeat records an agent keeps (the newest), and all of today's.
pub const KEEP_HEARTBEATS: usize = 1000;

impl Store {
    /// Sets the heartbeat of the active agent `name` (its minutes, model and next
    /// heartbeat); the hash of the last quiet answer stays.
    pub async fn set_heartbeat(
        &self,
        name: &str,
        minutes: u32,
        model: Option<String>,
        next_at: Option<String>,
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
                    let changed = sqlx::query(
                        "UPDATE agent_heartbeats SET minutes = $3, model = $4, next_at = $5, updated_at = $6 \
                         WHERE agent_name = $1 AND incarnation = $2",
                    )
                    .bind(&agent)
                    .bind(&incarnation)
                    .bind(minutes as i64)
                    .bind(model.clone())
                    .bind(next_at.clone())
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                    if changed.rows_affected() == 0 {
                        sqlx::query(
                            "INSERT INTO agent_heartbeats (agent_name, incarnation, minutes, model, next_at, updated_at) \
                             VALUES ($1, $2, $3, $4, $5, $6)",
                        )
                        .bind(&agent)
                        .bind(&incarnation)
                        .bind(minutes as i64)
                        .bind(model)
                        .bind(next_at)
                        .bind(&at)
                        .execute(&mut *tx)
                        .await?;
                    }
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

    /// The heartbeat setting of the active agent `name`; `None`: never set (off).
    pub async fn heartbeat_setting(
        &self,
        name: &str,
    ) -> Result<Option<HeartbeatSetting>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SETTING} WHERE h.agent_name = $1"
        )))
        .bind(name)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(setting_from_row).transpose()
    }

    /// The earliest next periodic heartbeat of any active agent.
    pub async fn next_heartbeat(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(h.next_at) FROM agent_heartbeats h JOIN agents a ON a.name = h.agent_name \
             AND a.incarnation = h.incarnation AND a.status = 'active' WHERE h.next_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// The active agents' settings whose next heartbeat is at or before `now`.
    pub async fn due_heartbeats(&self, now: &str) -> Result<Vec<HeartbeatSetting>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{SETTING} WHERE h.next_at IS NOT NULL AND h.next_at <= $1 ORDER BY h.next_at"
        )))
        .bind(now)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(setting_from_row).collect()
    }

    /// Moves an agent's next periodic heartbeat (only while the setting is unchanged:
    /// a person's change in between wins).
    pub async fn move_heartbeat(
        &self,
        s: &HeartbeatSetting,
        next_at: Option<String>,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "UPDATE agent_heartbeats SET next_at = $4 \
                 WHERE agent_name = $1 AND incarnation = $2 AND minutes = $3",
            )
            .bind(s.agent_name.clone())
            .bind(s.incarnation.clone())
            .bind(s.minutes as i64)
            .bind(next_at),
        )
        .await?;
        Ok(())
    }

    /// Records HEARTBEAT.md's hash at a quiet answer (an unchanged file is then skipped).
    pub async fn set_heartbeat_quiet_hash(
        &self,
        agent: &str,
        incarnation: &str,
        hash: &str,
    ) -> Result<(), StoreError> {
        let (agent, incarnation, hash, at) = (
            agent.to_owned(),
            incarnation.to_owned(),
            hash.to_owned(),
            now(),
        );
        self.write(move |tx| {
            Box::pin(async move {
                let changed = sqlx::query(
                    "UPDATE agent_heartbeats SET quiet_hash = $3 WHERE agent_name = $1 AND incarnation = $2",
                )
                .bind(&agent)
                .bind(&incarnation)
                .bind(&hash)
                .execute(&mut *tx)
                .await?;
                if changed.rows_affected() == 0 {
                    // Asked for while never set: remembered with the heartbeat off.
                    sqlx::query(
                        "INSERT INTO agent_heartbeats (agent_name, incarnation, minutes, quiet_hash, updated_at) \
                         VALUES ($1, $2, 0, $3, $4)",
                    )
                    .bind(&agent)
                    .bind(&incarnation)
                    .bind(&hash)
                    .bind(&at)
                    .execute(&mut *tx)
                    .await?;
                }
                Ok(())
            })
        })
        .await
    }

    /// Records a heartbeat: `Running`, or ended at once (`Skipped`, `Failed`). An
    /// agent keeps its newest [`KEEP_HEARTBEATS`] records and all of today's (UTC;
    /// the daily token cap counts them): a skipped heartbeat every five minutes would
    /// otherwise grow the database without end.
    pub async fn start_heartbeat(
        &self,
        agent: &str,
        incarnation: &str,
        cause: HeartbeatCause,
        outcome: HeartbeatOutcome,
        reason: Option<String>,
        file_hash: Option<String>,
    ) -> Result<u64, StoreError> {
        let ended = (outcome != HeartbeatOutcome::Running).then(now);
        let (agent, incarnation) = (agent.to_owned(), incarnation.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO heartbeats (agent_name, incarnation, cause, outcome, reason, file_hash, started_at, ended_at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
                )
                .bind(&agent)
                .bind(incarnation)
                .bind(cause.as_str())
                .bind(outcome.as_str())
                .bind(reason)
                .bind(file_hash)
                .bind(now())
                .bind(ended)
                .fetch_one(&mut *tx)
                .await?;
                let today = chrono::Utc::now()
                    .format("%Y-%m-%dT00:00:00.000Z")
                    .to_string();
                sqlx::query(
                    "DELETE FROM heartbeats WHERE agent_name = $1 AND outcome <> 'running' \
                     AND started_at < $3 AND id <= (SELECT id FROM heartbeats \
                     WHERE agent_name = $1 ORDER BY id DESC LIMIT 1 OFFSET $2)",
                )
                .bind(&agent)
                .bind(KEEP_HEARTBEATS as i64)
                .bind(today)
                .execute(&mut *tx)
                .await?;
                Ok(id as u64)
            })
        })
        .await
    }

    pub async fn set_heartbeat_thread(&self, id: u64, thread: u64) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE heartbeats SET thread_id = $2 WHERE id = $1")
                .bind(id as i64)
                .bind(thread as i64),
        )
        .await?;
        Ok(())
    }

    /// Ends a going heartbeat; false when it had ended already (recorded once).
    pub async fn end_heartbeat(
        &self,
        id: u64,
        outcome: HeartbeatOutcome,
        reason: Option<String>,
        tokens: u64,
    ) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE heartbeats SET outcome = $2, reason = $3, tokens = $4, ended_at = $5 \
                     WHERE id = $1 AND outcome = 'running'",
                )
                .bind(id as i64)
                .bind(outcome.as_str())
                .bind(reason)
                .bind(tokens as i64)
                .bind(now()),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// The active agent `name`'s heartbeats, newest first.
    pub async fn heartbeats(
        &self,
        name: &str,
        limit: u32,
    ) -> Result<Vec<HeartbeatRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{RECORD} JOIN agents a ON a.name = h.agent_name AND a.incarnation = h.incarnation \
             AND a.status = 'active' WHERE h.agent_name = $1 ORDER BY h.id DESC LIMIT $2"
        )))
        .bind(name)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    pub async fn heartbeat(&self, id: u64) -> Result<Option<HeartbeatRecord>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!("{RECORD} WHERE h.id = $1")))
            .bind(id as i64)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(record_from_row).transpose()
    }

    /// Every going heartbeat (of any agent, any incarnation).
    pub async fn going_heartbeats(&self) -> Result<Vec<HeartbeatRecord>, StoreError> {
        let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
            "{RECORD} WHERE h.outcome = 'running' ORDER BY h.id"
        )))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(record_from_row).collect()
    }

    /// Tokens the agent's heartbeats used since `since` (RFC 3339 UTC).
    pub async fn heartbeat_tokens_since(
        &self,
        agent: &str,
        incarnation: &str,
        since: &str,
    ) -> Result<u64, StoreError> {
        let sum: Option<i64> = sqlx::query_scalar(
            "SELECT CAST(SUM(tokens) AS BIGINT) FROM heartbeats \
             WHERE agent_name = $1 AND incarnation = $2 AND started_at >= $3",
        )
        .bind(agent)
        .bind(incarnation)
        .bind(since)
        .fetch_one(&self.pool)
        .await?;
        Ok(sum.unwrap_or(0).max(0) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store_with_agent;

    #[tokio::test]
    async fn an_agent_keeps_its_newest_heartbeats_and_all_of_today_s() {
        let (store, _dir) = test_store_with_agent().await;
        let skip = || {
            store.start_heartbeat(
                "a",
                "i1",
                HeartbeatCause::Periodic,
                HeartbeatOutcome::Skipped,
                Some("unchanged".into()),
                None,
            )
        };
        for _ in 0..KEEP_HEARTBEATS + 5 {
            skip().await.unwrap();
        }
        let count = |store: &Store| {
            let store = store.clone();
            async move { store.heartbeats("a", 100_000).await.unwrap().len() }
        };
        assert_eq!(count(&store).await, KEEP_HEARTBEATS + 5, "today's all stay");
        store
            .execute(sqlx::query(
                "UPDATE heartbeats SET started_at = '2000-01-01T00:00:00.000Z'",
            ))
            .await
            .unwrap();
        let newest = skip().await.unwrap();
        let kept = store.heartbeats("a", 100_000).await.unwrap();
        // The newest ones, the new one among them, up to the bound.
        assert_eq!(kept.len(), KEEP_HEARTBEATS, "older ones pruned");
        assert_eq!(kept[0].id, newest);
    }

    #[tokio::test]
    async fn the_setting_keeps_the_quiet_hash_a_heartbeat_ends_once_and_a_destroyed_agents_are_gone()
     {
        let (store, _dir) = test_store_with_agent().await;
        assert_eq!(store.heartbeat_setting("a").await.unwrap(), None);
        store
            .set_heartbeat("a", 30, None, Some("2026-01-01T10:00:00.000Z".into()))
            .await
            .unwrap();
        assert_eq!(
            store.next_heartbeat().await.unwrap().as_deref(),
            Some("2026-01-01T10:00:00.000Z")
        );
        assert!(
            store
                .due_heartbeats("2026-01-01T09:59:59.999Z")
                .await
                .unwrap()
                .is_empty()
        );
        let due = store
            .due_heartbeats("2026-01-01T10:00:00.000Z")
            .await
            .unwrap();
        assert_eq!(due.len(), 1);

        // The quiet answer's hash stays across a change of the setting.
        store
            .set_heartbeat_quiet_hash("a", "i1", "h1")
            .await
            .unwrap();
        store
            .set_heartbeat("a", 60, Some("cheap".into()), None)
            .await
            .unwrap();
        let s = store.heartbeat_setting("a").await.unwrap().unwrap();
        assert_eq!(
            (s.minutes, s.model.as_deref(), s.quiet_hash.as_deref()),
            (60, Some("cheap"), Some("h1"))
        );
        assert_eq!(store.next_heartbeat().await.unwrap(), None, "off: no next");
        // The loop's move loses to a person's change in between (minutes differ).
        store
            .move_heartbeat(&due[0], Some("2026-01-01T10:30:00.000Z".into()))
            .await
            .unwrap();
        assert_eq!(store.next_heartbeat().await.unwrap(), None);

        // An end is recorded once; tokens count from the day's start.
        let id = store
            .start_heartbeat(
                "a",
                "i1",
                HeartbeatCause::Manual,
                HeartbeatOutcome::Running,
                None,
                Some("h2".into()),
            )
            .await
            .unwrap();
        assert_eq!(store.going_heartbeats().await.unwrap().len(), 1);
        assert!(
            store
                .end_heartbeat(id, HeartbeatOutcome::Quiet, None, 30)
                .await
                .unwrap()
        );
        assert!(
            !store
                .end_heartbeat(id, HeartbeatOutcome::Notified, None, 99)
                .await
                .unwrap()
        );
        let h = store.heartbeat(id).await.unwrap().unwrap();
        assert_eq!((h.outcome, h.tokens), (HeartbeatOutcome::Quiet, 30));
        assert_eq!(h.file_hash.as_deref(), Some("h2"));
        assert!(h.ended_at.is_some());
        let skipped = store
            .start_heartbeat(
                "a",
                "i1",
                HeartbeatCause::Periodic,
                HeartbeatOutcome::Skipped,
                Some("empty".into()),
                None,
            )
            .await
            .unwrap();
        assert!(
            store
                .heartbeat(skipped)
                .await
                .unwrap()
                .unwrap()
                .ended_at
                .is_some()
        );
        assert!(store.going_heartbeats().await.unwrap().is_empty());
        assert_eq!(
            store
                .heartbeat_tokens_since("a", "i1", "2000-01-01T00:00:00.000Z")
                .await
                .unwrap(),
            30
        );
        assert_eq!(
            store
                .heartbeat_tokens_since("a", "i1", "2999-01-01T00:00:00.000Z")
                .await
                .unwrap(),
            0
        );
        assert_eq!(store.heartbeats("a", 10).await.unwrap().len(), 2);

        store
            .set_heartbeat("a", 30, None, Some("2026-01-01T10:00:00.000Z".into()))
            .await
            .unwrap();
        store.mark_agent_destroyed("a", true).await.unwrap();
        assert_eq!(store.next_heartbeat().await.unwrap(), None);
        assert_eq!(store.heartbeat_setting("a").await.unwrap(), None);
        assert!(store.heartbeats("a", 10).await.unwrap().is_empty());
    }
}
