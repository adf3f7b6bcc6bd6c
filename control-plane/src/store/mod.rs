//! Storage: the only module that talks SQL. SQLite through sqlx, WAL mode,
//! migrations embedded in the binary.
//!
//! Invariant: every query uses `$N` placeholders and portable SQL, so the Postgres
//! backend is a second migration set, not a second store. Every transaction that
//! writes begins with [`Store::begin_write`], the one place that knows how SQLite
//! takes its write lock; a busy database makes a writer wait (up to
//! [`BUSY_TIMEOUT`]), never fail.

mod agents;
mod approvals;
mod audit;
mod error;
mod refs;
mod runs;
mod sessions;
mod tasks;
mod threads;

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};
use sqlx::{SqlSafeStr, Sqlite, Transaction};

pub use agents::{AgentRecord, AgentStatus, AgentUpdate, NewAgent};
pub use approvals::{ApprovalRecord, ApprovalStatus, NewApproval};
pub use audit::{AuditEntry, AuditRecord};
pub use error::{DISK_FULL, StoreError, is_no_space};
pub use refs::{MessageRef, OwedAnswer};
pub use runs::{NewRun, RunMark, RunRecord, RunStatus};
pub use sessions::{Cleared, SessionRecord, context_cutoff};
pub use tasks::{OrphanTask, TaskRecord};
pub use threads::{StepRecord, StoredMessage, ThreadRecord, ThreadStatus, summary_of};

/// How long a writer waits for another writer before giving up. Generous: a write
/// transaction here lasts milliseconds, so reaching it means something is wrong.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Clone)]
pub struct Store {
    pool: SqlitePool,
}

fn migrator() -> Migrator {
    let migrations = vec![
        Migration::new(
            1,
            Cow::Borrowed("initial"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0001_initial.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            2,
            Cow::Borrowed("permissions"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0002_permissions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            3,
            Cow::Borrowed("tasks"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0003_tasks.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            4,
            Cow::Borrowed("destroy"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0004_destroy.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            5,
            Cow::Borrowed("task verified"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0005_task_verified.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            6,
            Cow::Borrowed("agent network"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0006_agent_network.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            7,
            Cow::Borrowed("failure kind"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0007_failure_kind.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            8,
            Cow::Borrowed("runs"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0008_runs.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            9,
            Cow::Borrowed("sessions"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0009_sessions.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            10,
            Cow::Borrowed("discord channels"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0010_discord_channels.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            11,
            Cow::Borrowed("answers owed"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0011_answers_owed.sql").into_sql_str(),
            false,
        ),
        Migration::new(
            12,
            Cow::Borrowed("run trace"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0012_run_trace.sql").into_sql_str(),
            false,
        ),
    ];
    Migrator::with_migrations(migrations)
}

impl Store {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        // The database is created 0600 before SQLite opens it; SQLite gives the
        // -wal and -shm files the database file's mode. Existing ones are narrowed.
        crate::private::file(path, true).map_err(|e| StoreError::open_file(path, e))?;
        for suffix in ["-wal", "-shm"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            crate::private::file(Path::new(&side), false)
                .map_err(|e| StoreError::open_file(Path::new(&side), e))?;
        }
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(BUSY_TIMEOUT);
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            // sqlx counts transactions itself. When SQLite ends a transaction on its
            // own (it rolls back on SQLITE_FULL, e.g. a commit on a full disk), the
            // ROLLBACK sqlx sends fails and its count stays at 1: the connection would
            // go back to the pool believing it is in a transaction, turn the next
            // BEGIN into a SAVEPOINT that is never committed, hold the write lock and
            // make every other writer "database is locked" until a restart. Such a
            // connection is closed instead of reused; a fresh one takes its place.
            .before_acquire(|conn, _meta| {
                Box::pin(async move {
                    let clean = !sqlx::Connection::is_in_transaction(conn);
                    if !clean {
                        tracing::warn!("closing a database connection left inside a transaction");
                    }
                    Ok(clean)
                })
            })
            .connect_with(options)
            .await?;
        migrator().run(&pool).await?;
        Ok(Store { pool })
    }

    /// Begins a transaction that will write. On SQLite it is `BEGIN IMMEDIATE`: the
    /// write lock is taken up front, waiting for the busy timeout if another writer
    /// holds it. A plain (deferred) `BEGIN` would take it only at the first write,
    /// and SQLite cannot wait there once the transaction has read: a writer that
    /// committed in between makes the upgrade fail at once with "database is
    /// locked" (SQLITE_BUSY_SNAPSHOT), whatever the busy timeout. Postgres needs no
    /// such statement; this is the one SQLite-specific line of the store.
    async fn begin_write(&self) -> Result<WriteTx, StoreError> {
        let started = std::time::Instant::now();
        Ok(WriteTx {
            tx: self.pool.begin_with("BEGIN IMMEDIATE").await?,
            started,
        })
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A write transaction; its time from `BEGIN` (the wait for the write lock
/// included) to the end of `COMMIT` is measured (`chorus_db_write_duration_seconds`).
pub(crate) struct WriteTx {
    tx: Transaction<'static, Sqlite>,
    started: std::time::Instant,
}

impl WriteTx {
    pub async fn commit(self) -> Result<(), sqlx::Error> {
        let started = self.started;
        let done = self.tx.commit().await;
        crate::metrics::db_write(started.elapsed());
        done
    }
}

impl std::ops::Deref for WriteTx {
    type Target = sqlx::SqliteConnection;
    fn deref(&self) -> &Self::Target {
        &self.tx
    }
}

impl std::ops::DerefMut for WriteTx {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.tx
    }
}

/// Timestamps are stored as RFC 3339 UTC text with milliseconds: sortable as text and
/// identical on SQLite and Postgres.
pub fn format_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub fn now() -> String {
    format_time(Utc::now())
}

pub fn format_epoch_ms(ms: i64) -> String {
    match Utc.timestamp_millis_opt(ms).single() {
        Some(t) => format_time(t),
        None => now(),
    }
}

/// A store in a temporary directory with one active agent, `a`.
#[cfg(test)]
pub(crate) async fn test_store_with_agent() -> (Store, tempfile::TempDir) {
    let (store, dir) = test_store().await;
    store
        .register_agent(&NewAgent {
            discord_channel_id: None,
            name: "a".into(),
            model: None,
            system_prompt: "p".into(),
            permissions: "standard".into(),
            on_ask: "prompt".into(),
            network: "on".into(),
            idle_timeout_secs: None,
        })
        .await
        .expect("register agent a");
    (store, dir)
}

#[cfg(test)]
pub(crate) async fn test_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = Store::open(&dir.path().join("chorus.db"))
        .await
        .expect("open store");
    (store, dir)
}
