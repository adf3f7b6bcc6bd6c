//! The record of agents' background jobs (the worker runs them). Called tasks
//! before migration 0017, which renamed the table and its id column.

use chorus_proto::domain::{JobEnd, JobOutcome, JobReport};
use sqlx::Row;

use super::{Store, StoreError, now};

/// Where a job stands in the record: running, ended as its worker reported
/// ([`JobOutcome`]), or lost with its worker (or with a restart of the control plane).
/// Stored and shown as the lower-case word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum JobStatus {
    Running,
    Completed,
    Failed,
    Stopped,
    Lost,
}

impl JobStatus {
    pub const ALL: [JobStatus; 5] = [
        JobStatus::Running,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Stopped,
        JobStatus::Lost,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Stopped => "stopped",
            JobStatus::Lost => "lost",
        }
    }

    fn parse(s: &str) -> Option<JobStatus> {
        JobStatus::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
    }
}

impl From<JobOutcome> for JobStatus {
    fn from(outcome: JobOutcome) -> Self {
        match outcome {
            JobOutcome::Completed => JobStatus::Completed,
            JobOutcome::Failed => JobStatus::Failed,
            JobOutcome::Stopped => JobStatus::Stopped,
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct JobRecord {
    /// The worker's id for the job: what the agent reads and stops it by.
    pub id: u32,
    /// The worker process (generation) that ran it.
    pub worker_generation: u64,
    pub command: String,
    pub pid: u32,
    /// Whether `pid` was in the worker's process tree when the job was reported.
    /// The control plane never signals a job's pid either way; an unverified one is
    /// a worker report it could not confirm.
    pub verified: bool,
    pub status: JobStatus,
    pub exit_code: Option<i32>,
    pub detail: Option<String>,
    pub started_at: String,
    pub ended_at: Option<String>,
}

/// A running job whose worker is gone: its process group, to make sure of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrphanJob {
    pub agent: String,
    pub job_id: u32,
    pub pid: u32,
    pub command: String,
}

impl Store {
    pub async fn job_started(
        &self,
        agent: &str,
        generation: u64,
        job: &JobReport,
        verified: bool,
    ) -> Result<(), StoreError> {
        self.execute(sqlx::query(
            "INSERT INTO jobs (agent_name, generation, job_id, command, pid, verified, status, started_at) \
             VALUES ($1, $2, $3, $4, $5, $7, $8, $6)",
        )
        .bind(agent)
        .bind(generation as i64)
        .bind(i64::from(job.job_id))
        .bind(&job.command)
        .bind(i64::from(job.pid))
        .bind(now())
        .bind(i64::from(verified))
        .bind(JobStatus::Running.as_str())
        )
        .await?;
        Ok(())
    }

    /// Records how a running job ended; returns its command, or `None` when it was
    /// not running (any more): its end was recorded already.
    pub async fn job_ended(
        &self,
        agent: &str,
        generation: u64,
        job_id: u32,
        end: &JobEnd,
    ) -> Result<Option<String>, StoreError> {
        // Through the one writer, like every write (SQLite allows one at a time).
        let query = sqlx::query_scalar(
            "UPDATE jobs SET status = $4, exit_code = $5, detail = $6, ended_at = $7 \
             WHERE agent_name = $1 AND generation = $2 AND job_id = $3 AND status = 'running' \
             RETURNING command",
        )
        .bind(agent.to_owned())
        .bind(generation as i64)
        .bind(i64::from(job_id))
        .bind(JobStatus::from(end.status).as_str())
        .bind(end.exit_code)
        .bind(end.detail.clone())
        .bind(now());
        self.write(move |tx| Box::pin(async move { Ok(query.fetch_optional(&mut *tx).await?) }))
            .await
    }

    /// Marks the running jobs of `agent`'s worker `generation` (every agent's and
    /// generation's when `None`) lost with `reason`; returns them, so their process
    /// groups can be ended.
    pub async fn lose_jobs(
        &self,
        worker: Option<(&str, u64)>,
        reason: &str,
    ) -> Result<Vec<OrphanJob>, StoreError> {
        let reason = reason.to_owned();
        let worker = worker.map(|(agent, generation)| (agent.to_owned(), generation));
        self.write(move |tx| {
            Box::pin(async move {
                let agent = worker.as_ref().map(|(agent, _)| agent.as_str());
                let generation = worker.as_ref().map(|(_, generation)| *generation as i64);
                let rows = sqlx::query(
                    "SELECT agent_name, job_id, pid, command FROM jobs WHERE status = 'running' \
                     AND ($1 IS NULL OR (agent_name = $1 AND generation = $2))",
                )
                .bind(agent)
                .bind(generation)
                .fetch_all(&mut *tx)
                .await?;
                sqlx::query(
                    "UPDATE jobs SET status = 'lost', detail = $3, ended_at = $4 WHERE status = 'running' \
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
                        Ok(OrphanJob {
                            agent: row.try_get("agent_name")?,
                            job_id: row.try_get::<i64, _>("job_id")? as u32,
                            pid: row.try_get::<i64, _>("pid")? as u32,
                            command: row.try_get("command")?,
                        })
                    })
                    .collect()
            })
        })
        .await
    }

    /// The highest worker generation any job was recorded under (0 when none).
    pub async fn last_job_generation(&self) -> Result<u64, StoreError> {
        let last: Option<i64> = sqlx::query_scalar("SELECT MAX(generation) FROM jobs")
            .fetch_one(&self.pool)
            .await?;
        Ok(last.unwrap_or(0).max(0) as u64)
    }

    /// An agent's jobs: the running ones first, then the newest ended, at most `limit`.
    pub async fn jobs(&self, agent: &str, limit: u32) -> Result<Vec<JobRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT job_id, generation, command, pid, verified, status, exit_code, detail, started_at, ended_at \
             FROM jobs WHERE agent_name = $1 \
             ORDER BY CASE status WHEN 'running' THEN 0 ELSE 1 END, started_at DESC, job_id DESC \
             LIMIT $2",
        )
        .bind(agent)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                let status: String = row.try_get("status")?;
                Ok(JobRecord {
                    id: row.try_get::<i64, _>("job_id")? as u32,
                    worker_generation: row.try_get::<i64, _>("generation")? as u64,
                    command: row.try_get("command")?,
                    pid: row.try_get::<i64, _>("pid")? as u32,
                    verified: row.try_get::<i64, _>("verified")? != 0,
                    status: JobStatus::parse(&status).ok_or(StoreError::Corrupt {
                        column: "jobs.status",
                        value: status,
                    })?,
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

#[cfg(test)]
#[path = "jobs_tests.rs"]
mod tests;
