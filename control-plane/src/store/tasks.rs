//! The record of agents' background tasks (the worker runs them).

use chorus_proto::domain::{TaskEnd, TaskReport};
use sqlx::Row;

use super::{Store, StoreError, now};

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TaskRecord {
    /// The worker's id for the task: what the agent uses with task_output/task_stop.
    pub id: u32,
    /// The worker process (generation) that ran it.
    pub worker_generation: u64,
    pub command: String,
    pub pid: u32,
    /// Whether `pid` was in the worker's process tree when the task was reported.
    /// The control plane never signals a task's pid either way; an unverified one is
    /// a worker report it could not confirm.
    pub verified: bool,
    /// running | completed | failed | stopped | lost
    pub status: String,
    pub exit_code: Option<i32>,
    pub detail: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
}

/// A running task whose worker is gone: its process group, to make sure of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanTask {
    pub agent: String,
    pub task_id: u32,
    pub pid: u32,
    pub command: String,
}

impl Store {
    pub async fn task_started(
        &self,
        agent: &str,
        generation: u64,
        task: &TaskReport,
        verified: bool,
    ) -> Result<(), StoreError> {
        self.execute(sqlx::query(
            "INSERT INTO tasks (agent_name, generation, task_id, command, pid, verified, status, started_at) \
             VALUES ($1, $2, $3, $4, $5, $7, 'running', $6)",
        )
        .bind(agent)
        .bind(generation as i64)
        .bind(i64::from(task.task_id))
        .bind(&task.command)
        .bind(i64::from(task.pid))
        .bind(now())
        .bind(i64::from(verified))
        )
        .await?;
        Ok(())
    }

    pub async fn task_ended(
        &self,
        agent: &str,
        generation: u64,
        task_id: u32,
        end: &TaskEnd,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "UPDATE tasks SET status = $4, exit_code = $5, detail = $6, ended_at = $7 \
             WHERE agent_name = $1 AND generation = $2 AND task_id = $3 AND status = 'running' \
             RETURNING command",
        )
        .bind(agent)
        .bind(generation as i64)
        .bind(i64::from(task_id))
        .bind(&end.status)
        .bind(end.exit_code)
        .bind(&end.detail)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// Marks the running tasks of `agent`'s worker `generation` (every agent's and
    /// generation's when `None`) lost with `reason`; returns them, so their process
    /// groups can be ended.
    pub async fn lose_tasks(
        &self,
        worker: Option<(&str, u64)>,
        reason: &str,
    ) -> Result<Vec<OrphanTask>, StoreError> {
        let reason = reason.to_owned();
        let worker = worker.map(|(agent, generation)| (agent.to_owned(), generation));
        self.write(move |tx| {
            Box::pin(async move {
                let agent = worker.as_ref().map(|(agent, _)| agent.as_str());
                let generation = worker.as_ref().map(|(_, generation)| *generation as i64);
                let rows = sqlx::query(
                    "SELECT agent_name, task_id, pid, command FROM tasks WHERE status = 'running' \
                     AND ($1 IS NULL OR (agent_name = $1 AND generation = $2))",
                )
                .bind(agent)
                .bind(generation)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE tasks SET status = 'lost', detail = $3, ended_at = $4 WHERE status = 'running' \
                     AND ($1 IS NULL OR (agent_name = $1 AND generation = $2))",
                )
                .bind(agent)
                .bind(generation)
                .bind(&reason)
                .bind(now())
                .execute(&mut *tx)
                .await?;
                rows.iter()
                    .map(|row| {
                        Ok(OrphanTask {
                            agent: row.try_get("agent_name")?,
                            task_id: row.try_get::<i64, _>("task_id")? as u32,
                            pid: row.try_get::<i64, _>("pid")? as u32,
                            command: row.try_get("command")?,
                        })
                    })
                    .collect()
            })
        })
        .await
    }

    /// An agent's tasks: the running ones first, then the newest ended, at most `limit`.
    /// The highest worker generation any task was recorded under (0 when none).
    pub async fn last_task_generation(&self) -> Result<u64, StoreError> {
        let last: Option<i64> = sqlx::query_scalar("SELECT MAX(generation) FROM tasks")
            .fetch_one(&self.pool)
            .await?;
        Ok(last.unwrap_or(0).max(0) as u64)
    }

    pub async fn tasks(&self, agent: &str, limit: u32) -> Result<Vec<TaskRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT task_id, generation, command, pid, verified, status, exit_code, detail, started_at, ended_at \
             FROM tasks WHERE agent_name = $1 \
             ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END, started_at DESC, task_id DESC \
             LIMIT $2",
        )
        .bind(agent)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(TaskRecord {
                    id: row.try_get::<i64, _>("task_id")? as u32,
                    worker_generation: row.try_get::<i64, _>("generation")? as u64,
                    command: row.try_get("command")?,
                    pid: row.try_get::<i64, _>("pid")? as u32,
                    verified: row.try_get::<i64, _>("verified")? != 0,
                    status: row.try_get("status")?,
                    exit_code: row
                        .try_get::<Option<i64>, _>("exit_code")?
                        .map(|c| c as i32),
                    detail: row.try_get("detail")?,
                    started_at: row.try_get("started_at")?,
                    ended_at: row.try_get("ended_at")?,
                })
            })
            .collect()
    }
}
