//! Storage: the only module that talks SQL. SQLite through sqlx, WAL mode,
//! migrations embedded in the binary.
//!
//! Invariant: every query uses `$N` placeholders and portable SQL, so the Postgres
//! backend is a second migration set, not a second store.

mod agents;
mod approvals;
mod audit;
mod tasks;
mod threads;

use std::borrow::Cow;
use std::path::Path;
use std::str::FromStr;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use sqlx::SqlSafeStr;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePool, SqlitePoolOptions};

pub use agents::{AgentRecord, AgentStatus, AgentUpdate, NewAgent};
pub use approvals::{ApprovalRecord, ApprovalStatus, NewApproval};
pub use audit::{AuditEntry, AuditRecord};
pub use tasks::{OrphanTask, TaskRecord};
pub use threads::{StepRecord, StoredMessage, ThreadRecord, ThreadStatus};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row the caller wants to create exists already.
    #[error("{0}")]
    Conflict(String),
    /// The row the caller names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The database itself failed (disk full, corruption, locked too long).
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value cannot be read back (a bug or a hand-edited database).
    #[error("corrupt value in {column}: {value}")]
    Corrupt { column: &'static str, value: String },
}

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
            Cow::Borrowed("task verified"),
            MigrationType::Simple,
            include_str!("../../migrations/sqlite/0004_task_verified.sql").into_sql_str(),
            false,
        ),
    ];
    Migrator::with_migrations(migrations)
}

impl Store {
    /// Opens (creating if needed) the database file and brings its schema up to date.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        let options = SqliteConnectOptions::from_str("sqlite://")?
            .filename(path)
            .create_if_missing(true)
            .journal_mode(SqliteJournalMode::Wal)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(10));
        let pool = SqlitePoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await?;
        migrator().run(&pool).await?;
        Ok(Store { pool })
    }

    pub async fn close(&self) {
        self.pool.close().await;
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
            name: "a".into(),
            model: None,
            system_prompt: "p".into(),
            permissions: "standard".into(),
            on_ask: "prompt".into(),
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
