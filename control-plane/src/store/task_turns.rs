//! The task engine's state of each thread working on a task (`tasks::engine`): one
//! row per task run, found by its thread. The control call a turn made is kept
//! here until the turn's end is applied, so a restart in between loses nothing.

use sqlx::Row;

use super::{Store, StoreError, ThreadRole};
use crate::tasks::contract::Call;

/// One thread's place in a task.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TaskTurn {
    pub run_id: u64,
    pub task_id: u64,
    pub agent: String,
    pub thread_id: u64,
    pub role: ThreadRole,
    /// The agents from the task's root down to this thread's.
    pub chain: Vec<String>,
    /// The run whose `ask_agent` this thread answers.
    pub asked_by: Option<u64>,
    /// The control call of the current turn, until its end is applied.
    pub call: Option<Call>,
    /// The thread was sent the one follow-up and has not made a call since.
    pub followed_up: bool,
}

/// What a thread's model calls cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ThreadUsage {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub model_calls: u64,
}

const COLUMNS: &str =
    "run_id, task_id, agent_name, thread_id, role, chain, asked_by, call, followed_up";

fn turn(row: &sqlx::any::AnyRow) -> Result<TaskTurn, StoreError> {
    let role: String = row.try_get("role")?;
    let chain: String = row.try_get("chain")?;
    let call: Option<String> = row.try_get("call")?;
    Ok(TaskTurn {
        run_id: row.try_get::<i64, _>("run_id")? as u64,
        task_id: row.try_get::<i64, _>("task_id")? as u64,
        agent: row.try_get("agent_name")?,
        thread_id: row.try_get::<i64, _>("thread_id")? as u64,
        role: ThreadRole::parse(&role)
            .ok_or_else(|| StoreError::Corrupt { column: "task_turns.role", value: role.clone() })?,
        chain: serde_json::from_str(&chain).unwrap_or_default(),
        asked_by: row.try_get::<Option<i64>, _>("asked_by")?.map(|r| r as u64),
        // A call this build cannot read is dropped: the turn then gets its follow-up.
        call: call.and_then(|c| serde_json::from_str(&c).ok()),
        followed_up: row.try_get::<i64, _>("followed_up")? != 0,
    })
}

impl Store {
    /// A thread starts working on a task, as task run `run_id`.
    pub async fn task_turn_started(
        &self,
        run_id: u64,
        task_id: u64,
        agent: &str,
        thread_id: u64,
        role: ThreadRole,
        chain: &[String],
        asked_by: Option<u64>,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "INSERT INTO task_turns (run_id, task_id, agent_name, thread_id, role, chain, asked_by) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(run_id as i64)
            .bind(task_id as i64)
            .bind(agent.to_owned())
            .bind(thread_id as i64)
            .bind(role.as_str())
            .bind(serde_json::to_string(chain).unwrap_or_else(|_| "[]".into()))
            .bind(asked_by.map(|r| r as i64)),
        )
        .await?;
        Ok(())
    }

    /// The task turn of `agent`'s thread, if it works on a task.
    pub async fn task_turn(
        &self,
        agent: &str,
        thread_id: u64,
    ) -> Result<Option<TaskTurn>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM task_turns WHERE agent_name = $1 AND thread_id = $2"
        )))
        .bind(agent)
        .bind(thread_id as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(turn).transpose()
    }

    pub async fn task_turn_of_run(&self, run_id: u64) -> Result<Option<TaskTurn>, StoreError> {
        let row = sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT {COLUMNS} FROM task_turns WHERE run_id = $1"
        )))
        .bind(run_id as i64)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(turn).transpose()
    }

    /// Records (or clears) the control call of the run's current turn.
    pub async fn task_turn_call(&self, run_id: u64, call: Option<&Call>) -> Result<(), StoreError> {
        let call = call.map(|c| serde_json::to_string(c).unwrap_or_default());
        self.execute(
            sqlx::query("UPDATE task_turns SET call = $2 WHERE run_id = $1")
                .bind(run_id as i64)
                .bind(call),
        )
        .await?;
        Ok(())
    }

    pub async fn task_turn_followed_up(&self, run_id: u64, followed_up: bool) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("UPDATE task_turns SET followed_up = $2 WHERE run_id = $1")
                .bind(run_id as i64)
                .bind(i64::from(followed_up)),
        )
        .await?;
        Ok(())
    }

    /// What the thread's model calls have cost so far.
    pub async fn thread_usage(&self, agent: &str, thread_id: u64) -> Result<ThreadUsage, StoreError> {
        let row = sqlx::query(
            "SELECT CAST(COALESCE(SUM(input_tokens), 0) AS BIGINT) AS i, \
             CAST(COALESCE(SUM(output_tokens), 0) AS BIGINT) AS o, COUNT(*) AS n FROM thread_steps WHERE agent_name = $1 AND thread_id = $2 AND kind = 'llm_call'",
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
}

impl Store {
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
