//! Schedules and their runs (migration 0025; the mechanics are `schedules`'). Only
//! schedules of their agent's current incarnation are read: a destroyed agent's
//! schedules never fire, and a re-created one starts without them.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, now};
use crate::schedules::timing::OnMissed;

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleRecord {
    pub id: u64,
    pub agent_name: String,
    pub prompt: String,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    /// A one-shot's instant (RFC 3339 UTC).
    pub run_at: Option<String>,
    pub on_missed: OnMissed,
    pub paused: bool,
    /// Failed runs in a row.
    pub failures: u32,
    /// `None`: paused, or a one-shot that is done.
    pub next_run_at: Option<String>,
    pub created_by: String,
    pub created_at: String,
    pub updated_at: String,
}

/// What a new schedule is made of (its when already checked).
#[derive(Debug, Clone)]
pub struct NewSchedule {
    pub agent_name: String,
    pub incarnation: String,
    pub prompt: String,
    pub cron: Option<String>,
    pub timezone: Option<String>,
    pub run_at: Option<String>,
    pub on_missed: OnMissed,
    pub paused: bool,
    pub next_run_at: Option<String>,
    pub created_by: String,
}

/// Why a run started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunCause {
    /// Its firing came, on time.
    Schedule,
    /// A firing missed while Chorus was down, run once at start (`on_missed = run_once`).
    Missed,
    /// "Run now" (`POST …/schedules/{id}/run`).
    Manual,
}

/// Where a schedule's run stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ScheduleRunStatus {
    Running,
    Completed,
    Failed,
    /// Its thread was killed by a person.
    Killed,
    /// It fired while the schedule's last run was still going, and did not run.
    Skipped,
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
words!(RunCause, "schedule_runs.cause", Schedule => "schedule", Missed => "missed", Manual => "manual");
words!(ScheduleRunStatus, "schedule_runs.status", Running => "running", Completed => "completed",
    Failed => "failed", Killed => "killed", Skipped => "skipped");

/// One run of a schedule, as `GET …/schedules/{id}/runs` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ScheduleRunRecord {
    pub id: u64,
    pub schedule_id: u64,
    pub cause: RunCause,
    pub status: ScheduleRunStatus,
    pub thread: Option<u64>,
    pub error: Option<String>,
    /// Input and output tokens of its thread's model calls.
    pub tokens: u64,
    pub started: String,
    pub ended: Option<String>,
}

/// A run still going: what its end is matched by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GoingRun {
    pub run_id: u64,
    pub schedule_id: u64,
    pub agent_name: String,
    pub thread_id: Option<u64>,
}

const COLUMNS: &str = "SELECT s.id, s.agent_name, s.prompt, s.cron, s.timezone, s.run_at, s.on_missed, \
     s.paused, s.failures, s.next_run_at, s.created_by, s.created_at, s.updated_at \
     FROM schedules s JOIN agents a ON a.name = s.agent_name AND a.incarnation = s.incarnation \
     AND a.status = 'active'";

fn schedule_from_row(row: &AnyRow) -> Result<ScheduleRecord, StoreError> {
    let on_missed: String = row.try_get("on_missed")?;
    Ok(ScheduleRecord {
        id: row.try_get::<i64, _>("id")? as u64,
        agent_name: row.try_get("agent_name")?,
        prompt: row.try_get("prompt")?,
        cron: row.try_get("cron")?,
        timezone: row.try_get("timezone")?,
        run_at: row.try_get("run_at")?,
        on_missed: OnMissed::parse(&on_missed).map_err(|_| StoreError::Corrupt {
            column: "schedules.on_missed",
            value: on_missed,
        })?,
        paused: row.try_get::<i64, _>("paused")? != 0,
        failures: row.try_get::<i64, _>("failures")?.max(0) as u32,
        next_run_at: row.try_get("next_run_at")?,
        created_by: row.try_get("created_by")?,
        created_at: row.try_get("created_at")?,
        updated_at: row.try_get("updated_at")?,
    })
}

fn run_from_row(row: &AnyRow) -> Result<ScheduleRunRecord, StoreError> {
    Ok(ScheduleRunRecord {
        id: row.try_get::<i64, _>("id")? as u64,
        schedule_id: row.try_get::<i64, _>("schedule_id")? as u64,
        cause: RunCause::parse(&row.try_get::<String, _>("cause")?)?,
        status: ScheduleRunStatus::parse(&row.try_get::<String, _>("status")?)?,
        thread: row
            .try_get::<Option<i64>, _>("thread_id")?
            .map(|t| t as u64),
        error: row.try_get("error")?,
        tokens: row.try_get::<i64, _>("tokens")?.max(0) as u64,
        started: row.try_get("started_at")?,
        ended: row.try_get("ended_at")?,
    })
}

/// How many runs of each schedule are kept (the newest; a running one always).
pub const KEEP_SCHEDULE_RUNS: usize = 500;

impl Store {
    pub async fn create_schedule(&self, new: NewSchedule) -> Result<ScheduleRecord, StoreError> {
        let agent = new.agent_name.clone();
        let id = self
            .write(move |tx| {
                Box::pin(async move {
                    let at = now();
                    let id: i64 = sqlx::query_scalar(
                        "INSERT INTO schedules (agent_name, incarnation, prompt, cron, timezone, run_at, \
                         on_missed, paused, next_run_at, created_by, created_at, updated_at) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11) RETURNING id",
                    )
                    .bind(&new.agent_name)
                    .bind(&new.incarnation)
                    .bind(&new.prompt)
                    .bind(&new.cron)
                    .bind(&new.timezone)
                    .bind(&new.run_at)
                    .bind(new.on_missed.as_str())
                    .bind(i64::from(new.paused))
                    .bind(&new.next_run_at)
                    .bind(&new.created_by)
                    .bind(&at)
                    .fetch_one(&mut *tx)
                    .await?;
                    Ok(id as u64)
                })
            })
            .await?;
        self.schedule(&agent, id)
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("schedule {id} of '{agent}' is gone")))
    }

    /// `agent`'s schedule `id` (`None`: no such schedule of its current incarnation).
    pub async fn schedule(
        &self,
        agent: &str,
        id: u64,
    ) -> Result<Option<ScheduleRecord>, StoreError> {
        let sql = format!("{COLUMNS} WHERE s.agent_name = $1 AND s.id = $2");
        let row = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent)
            .bind(id as i64)
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref().map(schedule_from_row).transpose()
    }

    pub async fn schedules(&self, agent: &str) -> Result<Vec<ScheduleRecord>, StoreError> {
        let sql = format!("{COLUMNS} WHERE s.agent_name = $1 ORDER BY s.id");
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(agent)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// Every active agent's unpaused schedules with a next firing at or before `at`
    /// (RFC 3339 UTC), earliest first.
    pub async fn due_schedules(&self, at: &str) -> Result<Vec<ScheduleRecord>, StoreError> {
        let sql = format!(
            "{COLUMNS} WHERE s.paused = 0 AND s.next_run_at IS NOT NULL AND s.next_run_at <= $1 \
             ORDER BY s.next_run_at, s.id"
        );
        let rows = sqlx::query(sqlx::AssertSqlSafe(sql))
            .bind(at)
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(schedule_from_row).collect()
    }

    /// The earliest next firing of any active agent's unpaused schedule.
    pub async fn next_schedule_firing(&self) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT MIN(s.next_run_at) FROM schedules s JOIN agents a ON a.name = s.agent_name \
             AND a.incarnation = s.incarnation AND a.status = 'active' \
             WHERE s.paused = 0 AND s.next_run_at IS NOT NULL",
        )
        .fetch_one(&self.pool)
        .await?)
    }

    /// Saves what a person may change and what the scheduler moves: the prompt,
    /// the when, the policy, paused, the next firing and the failures in a row.
    pub async fn save_schedule(&self, s: &ScheduleRecord) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "UPDATE schedules SET prompt = $2, cron = $3, timezone = $4, run_at = $5, on_missed = $6, \
                 paused = $7, failures = $8, next_run_at = $9, updated_at = $10 WHERE id = $1",
            )
            .bind(s.id as i64)
            .bind(s.prompt.clone())
            .bind(s.cron.clone())
            .bind(s.timezone.clone())
            .bind(s.run_at.clone())
            .bind(s.on_missed.as_str())
            .bind(i64::from(s.paused))
            .bind(i64::from(s.failures))
            .bind(s.next_run_at.clone())
            .bind(now()),
        )
        .await?;
        Ok(())
    }

    /// Moves a schedule's next firing (the scheduler's step), nothing else.
    pub async fn set_next_firing(&self, id: u64, next: Option<String>) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE schedules SET next_run_at = $2 WHERE id = $1")
                .bind(id as i64)
                .bind(next),
        )
        .await?;
        Ok(())
    }

    /// Deletes `agent`'s schedule `id` and its runs; false when there was none.
    pub async fn delete_schedule(&self, agent: &str, id: u64) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query("DELETE FROM schedules WHERE agent_name = $1 AND id = $2")
                    .bind(agent.to_string())
                    .bind(id as i64),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Records a run of schedule `id` (and forgets its ended runs past the newest
    /// [`KEEP_SCHEDULE_RUNS`], so a schedule firing every minute does not grow the
    /// database without end); returns its id.
    pub async fn start_schedule_run(
        &self,
        schedule_id: u64,
        cause: RunCause,
        status: ScheduleRunStatus,
        error: Option<String>,
    ) -> Result<u64, StoreError> {
        let ended = (status != ScheduleRunStatus::Running).then(now);
        self.write(move |tx| {
            Box::pin(async move {
                let at = now();
                let id: i64 = sqlx::query_scalar(
                    "INSERT INTO schedule_runs (schedule_id, cause, status, error, started_at, ended_at) \
                     VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
                )
                .bind(schedule_id as i64)
                .bind(cause.as_str())
                .bind(status.as_str())
                .bind(error)
                .bind(at)
                .bind(ended)
                .fetch_one(&mut *tx)
                .await?;
                sqlx::query(
                    "DELETE FROM schedule_runs WHERE schedule_id = $1 AND status <> 'running' \
                     AND id <= (SELECT id FROM schedule_runs WHERE schedule_id = $1 \
                     ORDER BY id DESC LIMIT 1 OFFSET $2)",
                )
                .bind(schedule_id as i64)
                .bind(KEEP_SCHEDULE_RUNS as i64)
                .execute(&mut *tx)
                .await?;
                Ok(id as u64)
            })
        })
        .await
    }

    pub async fn set_schedule_run_thread(&self, run: u64, thread: u64) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE schedule_runs SET thread_id = $2 WHERE id = $1")
                .bind(run as i64)
                .bind(thread as i64),
        )
        .await?;
        Ok(())
    }

    /// Ends a going run; false when it had ended already (its end is recorded once).
    pub async fn end_schedule_run(
        &self,
        run: u64,
        status: ScheduleRunStatus,
        error: Option<String>,
        tokens: u64,
    ) -> Result<bool, StoreError> {
        let done = self
            .execute(
                sqlx::query(
                    "UPDATE schedule_runs SET status = $2, error = $3, tokens = $4, ended_at = $5 \
                     WHERE id = $1 AND status = 'running'",
                )
                .bind(run as i64)
                .bind(status.as_str())
                .bind(error)
                .bind(tokens as i64)
                .bind(now()),
            )
            .await?;
        Ok(done.rows_affected() > 0)
    }

    /// Whether schedule `id` has a run going.
    pub async fn schedule_run_going(&self, id: u64) -> Result<bool, StoreError> {
        let n: i64 = sqlx::query_scalar(
            "SELECT COUNT(*) FROM schedule_runs WHERE schedule_id = $1 AND status = 'running'",
        )
        .bind(id as i64)
        .fetch_one(&self.pool)
        .await?;
        Ok(n > 0)
    }

    /// Every schedule's going runs.
    pub async fn going_schedule_runs(&self) -> Result<Vec<GoingRun>, StoreError> {
        let rows = sqlx::query(
            "SELECT r.id, r.schedule_id, s.agent_name, r.thread_id FROM schedule_runs r \
             JOIN schedules s ON s.id = r.schedule_id WHERE r.status = 'running' ORDER BY r.id",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter()
            .map(|row| {
                Ok(GoingRun {
                    run_id: row.try_get::<i64, _>("id")? as u64,
                    schedule_id: row.try_get::<i64, _>("schedule_id")? as u64,
                    agent_name: row.try_get("agent_name")?,
                    thread_id: row
                        .try_get::<Option<i64>, _>("thread_id")?
                        .map(|t| t as u64),
                })
            })
            .collect()
    }

    /// Schedule `id`'s runs, newest first, at most `limit`.
    pub async fn schedule_runs(
        &self,
        id: u64,
        limit: u32,
    ) -> Result<Vec<ScheduleRunRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT id, schedule_id, cause, status, thread_id, error, tokens, started_at, ended_at \
             FROM schedule_runs WHERE schedule_id = $1 ORDER BY id DESC LIMIT $2",
        )
        .bind(id as i64)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    /// Counts a run's end against schedule `id`: a failure adds one to its failures
    /// in a row, and the `pause_after`-th pauses it (true: it was paused now);
    /// anything else resets the count.
    pub async fn count_schedule_run(
        &self,
        id: u64,
        failed: bool,
        pause_after: u32,
    ) -> Result<bool, StoreError> {
        self.write(move |tx| {
            Box::pin(async move {
                if !failed {
                    sqlx::query("UPDATE schedules SET failures = 0 WHERE id = $1")
                        .bind(id as i64)
                        .execute(&mut *tx)
                        .await?;
                    return Ok(false);
                }
                let paused = sqlx::query(
                    "UPDATE schedules SET failures = failures + 1, \
                     paused = CASE WHEN failures + 1 >= $2 THEN 1 ELSE paused END, \
                     next_run_at = CASE WHEN failures + 1 >= $2 THEN NULL ELSE next_run_at END, \
                     updated_at = $3 \
                     WHERE id = $1 AND paused = 0 AND failures + 1 >= $2",
                )
                .bind(id as i64)
                .bind(i64::from(pause_after))
                .bind(now())
                .execute(&mut *tx)
                .await?
                .rows_affected()
                    > 0;
                if !paused {
                    sqlx::query("UPDATE schedules SET failures = failures + 1 WHERE id = $1")
                        .bind(id as i64)
                        .execute(&mut *tx)
                        .await?;
                }
                Ok(paused)
            })
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_store_with_agent;

    fn new(next: &str) -> NewSchedule {
        NewSchedule {
            agent_name: "a".into(),
            incarnation: "i1".into(),
            prompt: "p".into(),
            cron: Some("0 * * * *".into()),
            timezone: Some("UTC".into()),
            run_at: None,
            on_missed: OnMissed::Skip,
            paused: false,
            next_run_at: Some(next.into()),
            created_by: "api".into(),
        }
    }

    #[tokio::test]
    async fn only_the_newest_runs_of_a_schedule_are_kept() {
        let (store, _dir) = test_store_with_agent().await;
        let s = store
            .create_schedule(new("2026-01-01T10:00:00.000Z"))
            .await
            .unwrap();
        let first = store
            .start_schedule_run(s.id, RunCause::Schedule, ScheduleRunStatus::Running, None)
            .await
            .unwrap();
        let mut last = 0;
        for _ in 0..KEEP_SCHEDULE_RUNS + 5 {
            last = store
                .start_schedule_run(s.id, RunCause::Schedule, ScheduleRunStatus::Skipped, None)
                .await
                .unwrap();
        }
        let runs = store.schedule_runs(s.id, 10_000).await.unwrap();
        // The newest ones, and the one still running however old.
        assert_eq!(runs.len(), KEEP_SCHEDULE_RUNS + 1, "kept");
        assert!(runs.iter().any(|r| r.id == first), "the running one stays");
        assert!(runs.iter().any(|r| r.id == last), "the newest stays");
    }

    #[tokio::test]
    async fn failures_in_a_row_pause_once_a_run_ends_once_and_a_destroyed_agents_schedules_are_gone()
     {
        let (store, _dir) = test_store_with_agent().await;
        let s = store
            .create_schedule(new("2026-01-01T10:00:00.000Z"))
            .await
            .unwrap();
        assert_eq!(s.on_missed, OnMissed::Skip);
        assert_eq!(
            store.next_schedule_firing().await.unwrap().as_deref(),
            Some("2026-01-01T10:00:00.000Z")
        );
        assert!(
            store
                .due_schedules("2026-01-01T09:59:59.999Z")
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store
                .due_schedules("2026-01-01T10:00:00.000Z")
                .await
                .unwrap()
                .len(),
            1
        );

        // One run at a time is what the store says; an end is recorded once.
        let run = store
            .start_schedule_run(s.id, RunCause::Schedule, ScheduleRunStatus::Running, None)
            .await
            .unwrap();
        assert!(store.schedule_run_going(s.id).await.unwrap());
        assert!(
            store
                .end_schedule_run(run, ScheduleRunStatus::Failed, Some("x".into()), 7)
                .await
                .unwrap()
        );
        assert!(
            !store
                .end_schedule_run(run, ScheduleRunStatus::Completed, None, 9)
                .await
                .unwrap()
        );
        assert!(!store.schedule_run_going(s.id).await.unwrap());
        let runs = store.schedule_runs(s.id, 10).await.unwrap();
        assert_eq!(
            (runs[0].status, runs[0].tokens),
            (ScheduleRunStatus::Failed, 7)
        );
        assert!(runs[0].ended.is_some());

        // Two failures in a row pause at 2; a success between resets the count.
        assert!(!store.count_schedule_run(s.id, true, 2).await.unwrap());
        assert!(!store.count_schedule_run(s.id, false, 2).await.unwrap());
        assert!(!store.count_schedule_run(s.id, true, 2).await.unwrap());
        assert!(store.count_schedule_run(s.id, true, 2).await.unwrap());
        let paused = store.schedule("a", s.id).await.unwrap().unwrap();
        assert!(paused.paused && paused.next_run_at.is_none());
        assert_eq!(paused.failures, 2);
        assert!(
            !store.count_schedule_run(s.id, true, 2).await.unwrap(),
            "paused once"
        );
        assert_eq!(store.next_schedule_firing().await.unwrap(), None);

        store
            .create_schedule(new("2026-01-01T11:00:00.000Z"))
            .await
            .unwrap();
        store.mark_agent_destroyed("a", true).await.unwrap();
        assert!(store.schedules("a").await.unwrap().is_empty());
        assert!(
            store
                .due_schedules("2027-01-01T00:00:00.000Z")
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(store.next_schedule_firing().await.unwrap(), None);
    }
}
