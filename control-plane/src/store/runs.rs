//! Runs: each attempt of a thread's tool loop, and the idempotent ingest of their
//! events. A worker event of a run is stored only in the transaction that moves the
//! run's `last_seq` past the event's `seq`; a replay (a reconnect, a duplicate) finds
//! it already there and changes nothing.

use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Store, StoreError, now};
use chorus_proto::domain::Backend;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    /// Waiting for a worker.
    Queued,
    /// Handed to a worker.
    Running,
    Completed,
    Failed,
    Killed,
    /// Its worker or the control plane died under it; another attempt follows (or
    /// the thread failed, when resuming was not possible).
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Queued => "queued",
            RunStatus::Running => "running",
            RunStatus::Completed => "completed",
            RunStatus::Failed => "failed",
            RunStatus::Killed => "killed",
            RunStatus::Interrupted => "interrupted",
        }
    }

    fn parse(s: &str) -> Option<RunStatus> {
        Some(match s {
            "queued" => RunStatus::Queued,
            "running" => RunStatus::Running,
            "completed" => RunStatus::Completed,
            "failed" => RunStatus::Failed,
            "killed" => RunStatus::Killed,
            "interrupted" => RunStatus::Interrupted,
            _ => return None,
        })
    }

    pub fn is_ended(self) -> bool {
        !matches!(self, RunStatus::Queued | RunStatus::Running)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecord {
    pub id: String,
    pub agent_name: String,
    pub thread_id: u64,
    pub attempt: u32,
    pub status: RunStatus,
    pub last_seq: u64,
    pub first_step: u32,
    /// Resumptions in a row, before this run, whose run stored nothing.
    pub stalled: u32,
    /// Messages this run stored (its progress).
    pub stored: u64,
    /// Its span's W3C trace context (empty when traces were not exported).
    pub trace_context: std::collections::HashMap<String, String>,
}

/// A run to record, queued.
pub struct NewRun<'a> {
    pub agent: &'a str,
    pub thread: u64,
    pub run_id: &'a str,
    pub attempt: u32,
    pub first_step: u32,
    pub stalled: u32,
    /// Its span's W3C trace context (empty when traces are not exported).
    pub trace_context: &'a std::collections::HashMap<String, String>,
    /// What runs it (the agent's backend when it was assigned).
    pub backend: Backend,
}

/// Which run an event belongs to and its place in it (`seq` from 1; 0 = not
/// sequenced, stored without the duplicate check).
#[derive(Debug, Clone, Copy)]
pub struct RunMark<'a> {
    pub run_id: &'a str,
    pub seq: u64,
}

fn run_from_row(row: &AnyRow) -> Result<RunRecord, StoreError> {
    let status: String = row.try_get("status")?;
    Ok(RunRecord {
        id: row.try_get("id")?,
        agent_name: row.try_get("agent_name")?,
        thread_id: row.try_get::<i64, _>("thread_id")? as u64,
        attempt: row.try_get::<i64, _>("attempt")? as u32,
        status: RunStatus::parse(&status).ok_or(StoreError::Corrupt {
            column: "runs.status",
            value: status,
        })?,
        last_seq: row.try_get::<i64, _>("last_seq")? as u64,
        first_step: row.try_get::<i64, _>("first_step")? as u32,
        stalled: row.try_get::<i64, _>("stalled")? as u32,
        trace_context: row
            .try_get::<Option<String>, _>("trace_context")?
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default(),
        stored: row.try_get::<i64, _>("stored")? as u64,
    })
}

/// The columns `run_from_row` reads (a macro, so queries stay literal strings).
macro_rules! run_columns {
    () => {
        "id, agent_name, thread_id, attempt, status, last_seq, first_step, stalled, stored, \
         trace_context"
    };
}

/// A [`RunMark`] the writer can own.
#[derive(Debug, Clone)]
pub(super) struct Mark {
    pub(super) run_id: String,
    pub(super) seq: u64,
}

impl Mark {
    pub(super) fn of(mark: Option<RunMark<'_>>) -> Option<Mark> {
        mark.map(|m| Mark {
            run_id: m.run_id.to_owned(),
            seq: m.seq,
        })
    }
}

impl Store {
    /// Records a new run of a thread (queued).
    pub async fn insert_run(&self, run: NewRun<'_>) -> Result<(), StoreError> {
        let NewRun {
            agent,
            thread,
            run_id,
            attempt,
            first_step,
            stalled,
            trace_context,
            backend,
        } = run;
        let at = now();
        let trace_context =
            (!trace_context.is_empty()).then(|| serde_json::json!(trace_context).to_string());
        let (run_id, agent) = (run_id.to_owned(), agent.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO runs (id, agent_name, thread_id, attempt, status, first_step, \
                     stalled, created_at, updated_at, trace_context, backend) \
                     VALUES ($1, $2, $3, $4, 'queued', $5, $6, $7, $7, $8, $9)",
                )
                .bind(&run_id)
                .bind(&agent)
                .bind(thread as i64)
                .bind(i64::from(attempt))
                .bind(i64::from(first_step))
                .bind(i64::from(stalled))
                .bind(&at)
                .bind(&trace_context)
                .bind(backend.as_str())
                .execute(&mut *tx)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// Moves a run to `status` (with why, when it ended otherwise than completed).
    /// An ended run is never moved again.
    pub async fn set_run_status(
        &self,
        run_id: &str,
        status: RunStatus,
        reason: Option<&str>,
    ) -> Result<bool, StoreError> {
        let at = now();
        let ended_at = status.is_ended().then(|| at.clone());
        let run_id = run_id.to_owned();
        let reason = reason.map(str::to_owned);
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(
                    "UPDATE runs SET status = $2, reason = COALESCE($3, reason), updated_at = $4, \
                     ended_at = $5 WHERE id = $1 AND status IN ('queued', 'running')",
                )
                .bind(&run_id)
                .bind(status.as_str())
                .bind(&reason)
                .bind(&at)
                .bind(&ended_at)
                .execute(&mut *tx)
                .await?;
                Ok(done.rows_affected() > 0)
            })
        })
        .await
    }

    /// Runs not ended (queued or running), oldest first: what a starting control
    /// plane resumes.
    pub async fn open_runs(&self) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE status IN ('queued', 'running') ORDER BY created_at, attempt"
        ))
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }

    pub async fn run(&self, run_id: &str) -> Result<Option<RunRecord>, StoreError> {
        let row = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE id = $1"
        ))
        .bind(run_id)
        .fetch_optional(&self.pool)
        .await?;
        row.as_ref().map(run_from_row).transpose()
    }

    /// The CLI session the latest run of a thread on `backend` started, if any
    /// of them did (a session of another CLI cannot be resumed by this one).
    pub async fn latest_cli_session(
        &self,
        agent: &str,
        thread: u64,
        backend: Backend,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT cli_session FROM runs WHERE agent_name = $1 AND thread_id = $2 \
             AND backend = $3 AND cli_session IS NOT NULL \
             ORDER BY created_at DESC, attempt DESC LIMIT 1",
        )
        .bind(agent)
        .bind(thread as i64)
        .bind(backend.as_str())
        .fetch_optional(&self.pool)
        .await?)
    }

    /// The runs of a thread, in order of attempt.
    pub async fn thread_runs(
        &self,
        agent: &str,
        thread: u64,
    ) -> Result<Vec<RunRecord>, StoreError> {
        let rows = sqlx::query(concat!(
            "SELECT ",
            run_columns!(),
            " FROM runs WHERE agent_name = $1 AND thread_id = $2 ORDER BY created_at, attempt"
        ))
        .bind(agent)
        .bind(thread as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(run_from_row).collect()
    }
}

#[cfg(test)]
mod tests {
    fn new_run<'a>(
        thread: u64,
        run_id: &'a str,
        attempt: u32,
        first_step: u32,
        stalled: u32,
        trace_context: &'a std::collections::HashMap<String, String>,
    ) -> super::NewRun<'a> {
        super::NewRun {
            agent: "a",
            thread,
            run_id,
            attempt,
            first_step,
            stalled,
            trace_context,
            backend: Backend::Api,
        }
    }

    use chorus_proto::domain::{ChatMessage, Role};

    use super::*;
    use crate::store::test_store_with_agent;

    #[tokio::test]
    async fn an_event_is_stored_once_however_often_it_arrives() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, _) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        store
            .insert_run(new_run(thread, "r1", 1, 1, 0, &Default::default()))
            .await
            .unwrap();
        let reply = ChatMessage::assistant("hello", vec![]);
        let mark = |seq| Some(RunMark { run_id: "r1", seq });
        assert!(
            store
                .append_message("a", thread, &reply, mark(1))
                .await
                .await
                .unwrap()
        );
        // The same event again (a replay), and an older one: nothing changes.
        assert!(
            !store
                .append_message("a", thread, &reply, mark(1))
                .await
                .await
                .unwrap()
        );
        let later = ChatMessage::assistant("more", vec![]);
        assert!(
            store
                .append_message("a", thread, &later, mark(3))
                .await
                .await
                .unwrap()
        );
        let roles: Vec<_> = store
            .thread_messages("a", thread)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.message.role, m.message.content))
            .collect();
        assert_eq!(
            roles,
            [
                (Role::User, "hi".to_string()),
                (Role::Assistant, "hello".into()),
                (Role::Assistant, "more".into())
            ]
        );
        let run = store.run("r1").await.unwrap().unwrap();
        assert_eq!((run.last_seq, run.stored), (3, 2));
    }

    /// A CLI run's session is stored with the run once (a replayed event changes
    /// nothing), and the thread's latest run on the same backend names it.
    #[tokio::test]
    async fn a_cli_session_is_stored_once_with_its_run_and_the_latest_is_found() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, _) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        let context = Default::default();
        let run = |run_id, attempt, backend| NewRun {
            backend,
            ..new_run(thread, run_id, attempt, 1, 0, &context)
        };
        store
            .insert_run(run("r1", 1, Backend::ClaudeCode))
            .await
            .unwrap();
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::ClaudeCode)
                .await
                .unwrap(),
            None,
            "no run started one yet"
        );
        let mark = |run_id, seq| RunMark { run_id, seq };
        let stored = store
            .record_cli_session("a", thread, "s-1", mark("r1", 1))
            .await
            .await
            .unwrap();
        assert!(stored);
        // A replay of the event (a reconnect) with another id changes nothing.
        let replayed = store
            .record_cli_session("a", thread, "s-other", mark("r1", 1))
            .await
            .await
            .unwrap();
        assert!(!replayed);
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::ClaudeCode)
                .await
                .unwrap()
                .as_deref(),
            Some("s-1")
        );
        assert_eq!(store.run("r1").await.unwrap().unwrap().last_seq, 1);
        // A later run that started none leaves the latest one as it was; a session of
        // another CLI is not offered to this one.
        store
            .insert_run(run("r2", 2, Backend::ClaudeCode))
            .await
            .unwrap();
        store
            .insert_run(run("r3", 3, Backend::OpenCode))
            .await
            .unwrap();
        store
            .record_cli_session("a", thread, "oc-1", mark("r3", 1))
            .await
            .await
            .unwrap();
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::ClaudeCode)
                .await
                .unwrap()
                .as_deref(),
            Some("s-1")
        );
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::OpenCode)
                .await
                .unwrap()
                .as_deref(),
            Some("oc-1")
        );
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::Api)
                .await
                .unwrap(),
            None
        );
        store
            .insert_run(run("r4", 4, Backend::ClaudeCode))
            .await
            .unwrap();
        store
            .record_cli_session("a", thread, "s-2", mark("r4", 3))
            .await
            .await
            .unwrap();
        assert_eq!(
            store
                .latest_cli_session("a", thread, Backend::ClaudeCode)
                .await
                .unwrap()
                .as_deref(),
            Some("s-2"),
            "the latest run's"
        );
        // The column the task views read.
        let backend: String = sqlx::query_scalar("SELECT backend FROM runs WHERE id = 'r3'")
            .fetch_one(&store.pool)
            .await
            .unwrap();
        assert_eq!(backend, "opencode");
    }

    #[tokio::test]
    async fn an_ended_run_is_never_moved_again_and_open_runs_are_listed() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, _) = store
            .start_thread("a", &ChatMessage::user("hi"), "api", None)
            .await
            .unwrap();
        store
            .insert_run(new_run(thread, "r1", 1, 1, 0, &Default::default()))
            .await
            .unwrap();
        store
            .insert_run(new_run(
                thread,
                "r2",
                2,
                3,
                1,
                &[("traceparent".to_string(), "00-x".to_string())].into(),
            ))
            .await
            .unwrap();
        assert!(
            store
                .set_run_status("r1", RunStatus::Running, None)
                .await
                .unwrap()
        );
        assert!(
            store
                .set_run_status("r1", RunStatus::Interrupted, Some("worker died"))
                .await
                .unwrap()
        );
        assert!(
            !store
                .set_run_status("r1", RunStatus::Running, None)
                .await
                .unwrap()
        );
        let open: Vec<_> = store
            .open_runs()
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.id, r.attempt, r.first_step, r.stalled))
            .collect();
        assert_eq!(open, [("r2".to_string(), 2, 3, 1)]);
        // Its trace context is kept for the attempt after it.
        let r2 = store.run("r2").await.unwrap().unwrap();
        assert_eq!(
            r2.trace_context.get("traceparent").map(String::as_str),
            Some("00-x")
        );
        assert!(
            store
                .run("r1")
                .await
                .unwrap()
                .unwrap()
                .trace_context
                .is_empty()
        );
    }
}
