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
        Ok(sqlx::query_scalar(
            "UPDATE jobs SET status = $4, exit_code = $5, detail = $6, ended_at = $7 \
             WHERE agent_name = $1 AND generation = $2 AND job_id = $3 AND status = 'running' \
             RETURNING command",
        )
        .bind(agent)
        .bind(generation as i64)
        .bind(i64::from(job_id))
        .bind(JobStatus::from(end.status).as_str())
        .bind(end.exit_code)
        .bind(&end.detail)
        .bind(now())
        .fetch_optional(&self.pool)
        .await?)
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
mod tests {
    use super::*;
    use crate::store::{Backend, migrator, sqlite_url, test_postgres_database};
    use sqlx::AnyPool;

    /// The words stored and shown are the ones the API always answered with.
    #[test]
    fn a_status_is_one_word_stored_and_shown_alike() {
        for status in JobStatus::ALL {
            assert_eq!(JobStatus::parse(status.as_str()), Some(status));
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::json!(status.as_str())
            );
        }
        assert_eq!(JobStatus::parse("exited"), None);
        for outcome in JobOutcome::ALL {
            assert_eq!(JobStatus::from(outcome).as_str(), outcome.as_str());
        }
    }

    /// A database made before jobs had their name (migrated up to 0016) with a
    /// background task recorded in it: after the upgrade that task is listed as a
    /// job with everything it had, it can still end, and new jobs are recorded beside it.
    #[tokio::test]
    async fn a_task_recorded_before_0017_is_a_job_after_the_upgrade() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("chorus.db");
        sqlx::any::install_default_drivers();
        let postgres = test_postgres_database().await;
        let (backend, url) = match &postgres {
            Some(url) => (Backend::Postgres, url.clone()),
            None => (Backend::Sqlite, sqlite_url(&path).unwrap()),
        };
        let old = AnyPool::connect(&url).await.expect("connect");
        migrator(backend)
            .run_to(16, &old)
            .await
            .expect("migrate to 0016");
        sqlx::query(
            "INSERT INTO tasks (agent_name, generation, task_id, command, pid, status, \
             exit_code, detail, started_at, ended_at, verified) VALUES \
             ('a', 3, 1, 'npm run dev', 4242, 'running', NULL, NULL, '2026-11-01T10:00:00.000Z', NULL, 1), \
             ('a', 2, 7, 'make', 4100, 'failed', 2, 'exit code 2', '2026-10-31T09:00:00.000Z', \
              '2026-10-31T09:01:00.000Z', 0)",
        )
        .execute(&old)
        .await
        .expect("record tasks the 0016 way");
        old.close().await;

        let store = match &postgres {
            Some(url) => Store::open_postgres(url).await,
            None => Store::open(&path).await,
        }
        .expect("open and upgrade");
        let jobs = store.jobs("a", 10).await.unwrap();
        assert_eq!(
            jobs,
            vec![
                JobRecord {
                    id: 1,
                    worker_generation: 3,
                    command: "npm run dev".into(),
                    pid: 4242,
                    verified: true,
                    status: JobStatus::Running,
                    exit_code: None,
                    detail: None,
                    started_at: "2026-11-01T10:00:00.000Z".into(),
                    ended_at: None,
                },
                JobRecord {
                    id: 7,
                    worker_generation: 2,
                    command: "make".into(),
                    pid: 4100,
                    verified: false,
                    status: JobStatus::Failed,
                    exit_code: Some(2),
                    detail: Some("exit code 2".into()),
                    started_at: "2026-10-31T09:00:00.000Z".into(),
                    ended_at: Some("2026-10-31T09:01:00.000Z".into()),
                },
            ]
        );
        assert_eq!(store.last_job_generation().await.unwrap(), 3);

        // The old running task ends under its new name, and a new job (the same
        // worker id in a later generation) is recorded beside the old ones.
        let end = JobEnd {
            status: JobOutcome::Stopped,
            exit_code: None,
            detail: "killed by signal SIGTERM".into(),
        };
        assert_eq!(
            store.job_ended("a", 3, 1, &end).await.unwrap().as_deref(),
            Some("npm run dev")
        );
        let report = JobReport {
            job_id: 1,
            command: "cargo watch".into(),
            pid: 5000,
        };
        store.job_started("a", 4, &report, true).await.unwrap();
        let jobs = store.jobs("a", 10).await.unwrap();
        let summary: Vec<_> = jobs
            .iter()
            .map(|j| (j.worker_generation, j.id, j.status))
            .collect();
        assert_eq!(
            summary,
            [
                (4, 1, JobStatus::Running),
                (3, 1, JobStatus::Stopped),
                (2, 7, JobStatus::Failed)
            ]
        );
        // A status outside the set reads as corrupt, not as some default.
        store
            .execute(sqlx::query(
                "UPDATE jobs SET status = 'exited' WHERE generation = 2",
            ))
            .await
            .unwrap();
        assert!(matches!(
            store.jobs("a", 10).await,
            Err(StoreError::Corrupt {
                column: "jobs.status",
                ..
            })
        ));
        store.close().await;
    }
}
