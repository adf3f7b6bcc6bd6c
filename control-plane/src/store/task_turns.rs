//! What the task engine (`tasks::engine`) keeps about a task run between its turns
//! (migration 0023): its chain of agents, the run it answers, whether it was sent
//! the one follow-up; and what its thread's work cost (read from its steps).

use sqlx::Row;

use super::{Store, StoreError};

/// What a thread's model calls cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
}

impl Store {
    /// Sets where a run stands among agents: its chain and the run it answers.
    pub async fn set_task_run_links(
        &self,
        run: u64,
        chain: &[String],
        asked_by: Option<u64>,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE task_runs SET chain = $2, asked_by = $3 WHERE id = $1")
                .bind(run as i64)
                .bind(serde_json::to_string(chain).unwrap_or_else(|_| "[]".into()))
                .bind(asked_by.map(|r| r as i64)),
        )
        .await?;
        Ok(())
    }

    pub async fn set_task_run_followed_up(
        &self,
        run: u64,
        followed_up: bool,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE task_runs SET followed_up = $2 WHERE id = $1")
                .bind(run as i64)
                .bind(i64::from(followed_up)),
        )
        .await?;
        Ok(())
    }

    /// Reopens an ended run (a report sent back for more work).
    pub async fn reopen_task_run(&self, run: u64) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "UPDATE task_runs SET outcome = NULL, ended_at = NULL, followed_up = 0 WHERE id = $1",
            )
            .bind(run as i64),
        )
        .await?;
        Ok(())
    }

    /// What the thread's model calls have cost so far.
    pub async fn thread_usage(
        &self,
        agent: &str,
        thread_id: u64,
    ) -> Result<ThreadUsage, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS i, \
             CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS o, COUNT(*) AS n \
             FROM thread_steps WHERE agent_name = $1 AND thread_id = $2 AND kind = 'llm_call'",
        )
        .bind(agent)
        .bind(thread_id as i64)
        .fetch_one(&self.pool)
        .await?;
        Ok(ThreadUsage {
            input_tokens: row.try_get::<i64, _>("i")?.max(0) as u64,
            output_tokens: row.try_get::<i64, _>("o")?.max(0) as u64,
            model_calls: row.try_get::<i64, _>("n")?.max(0) as u64,
        })
    }

    /// The work of these threads so far: model calls, and the milliseconds of their
    /// steps (an open step counts until now).
    pub async fn threads_work(
        &self,
        threads: &[(String, u64)],
    ) -> Result<crate::tasks::limits::Spent, StoreError> {
        let mut spent = crate::tasks::limits::Spent::default();
        let now = chrono::Utc::now();
        for (agent, thread) in threads {
            let rows = sqlx::query(
                "SELECT kind, started_at, duration_ms FROM thread_steps \
                 WHERE agent_name = $1 AND thread_id = $2",
            )
            .bind(agent.as_str())
            .bind(*thread as i64)
            .fetch_all(&self.pool)
            .await?;
            for row in rows {
                let kind: String = row.try_get("kind")?;
                if kind == "llm_call" {
                    spent.model_calls += 1;
                }
                match row.try_get::<Option<i64>, _>("duration_ms")? {
                    Some(ms) => spent.work_ms += ms.max(0) as u64,
                    None => {
                        let started: String = row.try_get("started_at")?;
                        if let Ok(at) = chrono::DateTime::parse_from_rfc3339(&started) {
                            spent.work_ms += (now - at.with_timezone(&chrono::Utc))
                                .num_milliseconds()
                                .max(0) as u64;
                        }
                    }
                }
            }
        }
        Ok(spent)
    }
}

impl Store {
    /// The thread's open step (its text and start), else when its last step ended.
    pub async fn thread_activity(
        &self,
        agent: &str,
        thread_id: u64,
    ) -> Result<(Option<(String, String)>, Option<String>), StoreError> {
        let row = sqlx::query(
            "SELECT description, started_at, ended_at FROM thread_steps \
             WHERE agent_name = $1 AND thread_id = $2 ORDER BY step_number DESC LIMIT 1",
        )
        .bind(agent)
        .bind(thread_id as i64)
        .fetch_optional(&self.pool)
        .await?;
        let Some(row) = row else {
            return Ok((None, None));
        };
        let ended: Option<String> = row.try_get("ended_at")?;
        Ok(match ended {
            None => (
                Some((row.try_get("description")?, row.try_get("started_at")?)),
                None,
            ),
            Some(ended) => (None, Some(ended)),
        })
    }
}
