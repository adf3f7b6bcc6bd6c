//! Storage: the only module that talks SQL. sqlx's `Any` driver (SQLite today, in
//! WAL mode), migrations embedded in the binary.
//!
//! Invariant: every query uses `$N` placeholders, portable SQL and only the types
//! every backend shares (`i64`, `String`, options of them), so the Postgres
//! backend is a second migration set and a connection set-up, not a second store. Every write is queued to
//! the one writer (`writer`: one connection, writes committed in order, what has
//! queued committed together); reads use a pool and never wait for the write
//! lock. A busy database (another process, a checkpoint) makes the writer wait
//! (up to [`BUSY_TIMEOUT`]), never fail.
//!
//! The writer's transactions are `BEGIN IMMEDIATE` on SQLite, each write in a
//! savepoint when there are several; a pooled connection sqlx still counts as inside a
//! transaction is closed, not reused; a full disk is [`StoreError::DiskFull`] (HTTP 507
//! `disk_full`).
//!
//! **Backends.** The store talks to the database only through sqlx's `Any` driver
//! (`AnyPool`, `AnyConnection`, `AnyRow`): one set of queries, the backend chosen at
//! start by the connection URL. What this costs and keeps:
//! - Only types every backend shares cross the boundary: `i64`, `String`, `Option` of
//!   them (a flag is an `i64` 0/1, a time RFC 3339 text, JSON text); no `bool`, no
//!   backend type. Every query uses `$N` placeholders and SQL both backends run.
//! - What differs per backend is confined to this module: how a connection is set
//!   up (SQLite: the URL from the file path, `journal_mode = WAL` once, `busy_timeout`,
//!   `synchronous` and `foreign_keys` on every connection), the migration set
//!   (`migrations/<backend>/`), and the writer's `BEGIN` (`IMMEDIATE` on SQLite).
//! - The one writer and its invariants hold on every backend (group commit, order,
//!   savepoints; `BEGIN` on Postgres, whose `synchronous_commit` is its durability).
//! - Selection: `DATABASE_URL` (or `[store] database_url`) naming `postgres://…`
//!   selects Postgres (`config::Database`); unset, SQLite in the data directory. The URL
//!   is a `Secret`: no flag (command lines are world-readable), blanked from the
//!   control plane's own environment block like the keys, never in a worker's
//!   environment (workers start with a cleared one), its password and the URL in
//!   `KnownSecrets`, and people see `Database::describe` (user, host, port, database;
//!   never the password, and the TLS the URL's `sslmode` gives), also in the error when
//!   it cannot be opened.
//! - TLS to Postgres: sqlx with rustls (ring; the public roots, or the URL's
//!   `sslrootcert`), libpq's `sslmode` meanings; no new crates (rustls and webpki-roots
//!   were in the tree). CI's Postgres runs with TLS on, so every Postgres test connects
//!   over it, and one verifies the server (`verify-full`) and checks in `pg_stat_ssl`
//!   that every connection chorus holds is encrypted.
//! - Errors keep their meaning per backend: a unique-constraint conflict is recognised
//!   by SQLite's column name or Postgres's constraint name; "disk full" by SQLite's
//!   codes or SQLSTATE 53100.
//! - Tested on both: CI starts a throwaway Postgres and runs the control plane's and
//!   the end-to-end tests on it as well (`CHORUS_TEST_POSTGRES`); the tests about the
//!   SQLite file itself (full disk, failure injection with triggers, file modes) stay on
//!   SQLite.
//!
//! **Durability** (`[store] durability`). WAL mode with `synchronous = NORMAL` by
//! default: a commit is in the WAL file when the caller hears `Ok`, not yet flushed to
//! the disk. So an application crash (chorus killed, even with SIGKILL) loses nothing
//! committed; a power loss or kernel crash can lose the commits since the last
//! checkpoint's flush (a few seconds at most), never corrupts the database.
//! `durability = "full"` flushes every commit (`fsync`) before it counts. What each
//! failure loses: a **chorus crash** loses events still queued to the writer, which no
//! client was shown (the feed publishes only what is committed: tested by SIGKILLing
//! chorus in a burst of runs, `storage::every_event_the_feed_showed_survives_a_sigkill_during_a_burst`),
//! and the runs going are resumed at the next start (ARCHITECTURE.md, *Durable
//! runs*); a **worker crash** loses only what it had not sent yet (its run is resumed from the stored
//! history); a **power loss** with `normal` can also lose the last commits.
//! `chorus.db` is created 0600 before SQLite opens it; SQLite gives `-wal` and `-shm` the
//! database file's mode.

mod agents;
mod approvals;
mod audit;
mod error;
mod flushes;
mod grants;
mod heartbeats;
mod jobs;
mod mcp_servers;
mod messages;
mod owner_lock;
mod policies;
mod refs;
mod run_events;
mod runs;
mod schedules;
mod search;
mod sessions;
mod task_turns;
mod tasks;
mod threads;
mod user_tokens;
mod vectors;
mod worker_trust;
mod writer;

use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use futures::future::BoxFuture;
use sqlx::any::AnyPoolOptions;
use sqlx::migrate::{Migration, MigrationType, Migrator};
use sqlx::{AnyConnection, AnyPool};
use sqlx::{Connection, SqlSafeStr};

pub use agents::{AgentIncarnation, AgentRecord, AgentStatus, AgentUpdate, NewAgent};
pub use approvals::{ApprovalRecord, ApprovalStatus, NewApproval, QuestionKind};
pub use audit::{AuditDecision, AuditEntry, AuditRecord};
pub use error::{DISK_FULL, StoreError, is_no_space};
pub use flushes::FlushRecord;
pub use grants::GrantRecord;
pub use heartbeats::{
    HeartbeatCause, HeartbeatOutcome, HeartbeatRecord, HeartbeatSetting, InitialHeartbeat,
};
pub use jobs::{JobRecord, JobStatus, OrphanJob};
pub use owner_lock::{DatabaseLock, Taken};
pub use policies::AgentPolicy;
pub use refs::{MessageRef, OwedAnswer};
pub use runs::{NewRun, RunMark, RunRecord, RunStatus};
pub use schedules::{
    GoingRun, NewSchedule, RunCause, ScheduleRecord, ScheduleRunRecord, ScheduleRunStatus,
};
pub use search::{MAX_TERMS, SearchDoc, SearchHit, SearchSource, search_terms};
pub use sessions::{Cleared, SessionRecord, context_cutoff};
pub use task_turns::ThreadUsage;
pub use tasks::{
    ChainChange, ChainEntry, NewQuestion, NewTask, PlanFields, QuestionOption, QuestionRecord,
    ReportStatus, RunOutcome, TaskAttachment, TaskFilter, TaskRecord, TaskReport, TaskRun,
    WaitingKind, WaitingOn,
};
pub use threads::{
    Progress, StepRecord, StoredMessage, ThreadRecord, ThreadRole, ThreadStatus, summary_of,
};
pub use user_tokens::{NewUserToken, UserTokenRecord};
pub use vectors::{StoredVector, VectorKind};
pub use worker_trust::{CredentialLookup, Placed, WorkerCredentialRecord};
pub use writer::Pending;
use writer::Writer;

/// How long a writer waits for another writer before giving up. Generous: a write
/// transaction here lasts milliseconds, so reaching it means something is wrong.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(30);

/// What a commit waits for (SQLite's `synchronous` in WAL mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// A commit is written to the WAL, not flushed to the disk: an application
    /// crash (chorus killed, even with SIGKILL) loses nothing committed; a power
    /// loss or kernel crash can lose the last commits before the next checkpoint
    /// (never corrupts the database).
    #[default]
    Normal,
    /// Every commit is flushed to the disk (`fsync`) before it counts: a power
    /// loss loses nothing committed, at the price of a flush per commit.
    Full,
}

impl Durability {
    /// SQLite's `synchronous` pragma for it.
    fn synchronous(self) -> &'static str {
        match self {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        }
    }
}

/// Which database the store is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// How the writer opens its transaction: SQLite takes its write lock up front
    /// (a deferred `BEGIN` that reads first cannot wait for it later).
    fn begin(self) -> &'static str {
        match self {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN",
        }
    }
}

#[derive(Clone)]
pub struct Store {
    /// Readers.
    pool: AnyPool,
    /// The one writer.
    writer: Writer,
    /// What the gate reads of each agent on every tool call.
    policies: std::sync::Arc<policies::Policies>,
    /// Which database: full-text search is the one query each backend words its own way.
    backend: Backend,
}

/// The migrations of one backend: the same versions and names, each backend's
/// own SQL (`migrations/<backend>/`; a file missing for one backend fails the build).
macro_rules! migration_set {
    ($backend:literal: $(($version:literal, $name:literal, $file:literal)),* $(,)?) => {
        [$(($version, $name, include_str!(concat!("../../migrations/", $backend, "/", $file)))),*]
    };
}

/// Every backend's list, one row per migration.
macro_rules! migrations {
    ($backend:literal) => {
        migration_set!($backend:
            (1, "initial", "0001_initial.sql"),
            (2, "permissions", "0002_permissions.sql"),
            (3, "tasks", "0003_tasks.sql"),
            (4, "destroy", "0004_destroy.sql"),
            (5, "task verified", "0005_task_verified.sql"),
            (6, "agent network", "0006_agent_network.sql"),
            (7, "failure kind", "0007_failure_kind.sql"),
            (8, "runs", "0008_runs.sql"),
            (9, "sessions", "0009_sessions.sql"),
            (10, "discord channels", "0010_discord_channels.sql"),
            (11, "answers owed", "0011_answers_owed.sql"),
            (12, "run trace", "0012_run_trace.sql"),
            (13, "agent incarnation", "0013_agent_incarnation.sql"),
            (14, "files kept", "0014_files_kept.sql"),
            (15, "user tokens", "0015_user_tokens.sql"),
            (16, "worker credentials", "0016_worker_credentials.sql"),
            (17, "jobs", "0017_jobs.sql"),
            (18, "questions", "0018_questions.sql"),
            (19, "step runs in", "0019_step_runs_in.sql"),
            (20, "tasks", "0020_tasks.sql"),
            (21, "thread roles", "0021_thread_roles.sql"),
            (22, "agent grants", "0022_agent_grants.sql"),
            (23, "task run links", "0023_task_run_links.sql"),
            (24, "backends", "0024_backends.sql"),
            (25, "schedules", "0025_schedules.sql"),
            (26, "mcp servers", "0026_mcp_servers.sql"),
            (27, "memory search", "0027_memory_search.sql"),
            (28, "memory flush", "0028_memory_flush.sql"),
            (29, "heartbeat", "0029_heartbeat.sql"),
            (30, "memory vectors", "0030_memory_vectors.sql"),
        )
    };
}

fn migrator(backend: Backend) -> Migrator {
    let set: [(i64, &'static str, &'static str); 30] = match backend {
        Backend::Sqlite => migrations!("sqlite"),
        Backend::Postgres => migrations!("postgres"),
    };
    let migrations = set
        .into_iter()
        .map(|(version, name, sql)| {
            Migration::new(
                version,
                Cow::Borrowed(name),
                MigrationType::Simple,
                sql.into_sql_str(),
                false,
            )
        })
        .collect();
    Migrator::with_migrations(migrations)
}

impl Store {
    /// Opens (creating if needed) the database file and brings its schema up to
    /// date, with the default durability.
    pub async fn open(path: &Path) -> Result<Store, StoreError> {
        Store::open_with(path, Durability::default()).await
    }

    /// Opens the database with the given durability of commits.
    pub async fn open_with(path: &Path, durability: Durability) -> Result<Store, StoreError> {
        // The database is created 0600 before SQLite opens it; SQLite gives the
        // -wal and -shm files the database file's mode. Existing ones are narrowed.
        crate::private::file(path, true).map_err(|e| StoreError::open_file(path, e))?;
        for suffix in ["-wal", "-shm"] {
            let mut side = path.as_os_str().to_owned();
            side.push(suffix);
            crate::private::file(Path::new(&side), false)
                .map_err(|e| StoreError::open_file(Path::new(&side), e))?;
        }
        sqlx::any::install_default_drivers();
        let url = sqlite_url(path)?;
        // The writer's connection first: it puts the file in WAL mode (a setting the
        // file keeps) before any reader opens it.
        let mut writing = AnyConnection::connect(&url).await?;
        sqlx::raw_sql("PRAGMA journal_mode = WAL")
            .execute(&mut writing)
            .await?;
        let pragmas = connection_pragmas(durability);
        sqlx::raw_sql(sqlx::AssertSqlSafe(pragmas.clone()))
            .execute(&mut writing)
            .await?;
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .after_connect(move |conn, _meta| {
                let pragmas = pragmas.clone();
                Box::pin(async move {
                    sqlx::raw_sql(sqlx::AssertSqlSafe(pragmas))
                        .execute(conn)
                        .await?;
                    Ok(())
                })
            })
            .before_acquire(|conn, _meta| Box::pin(async move { Ok(outside_transaction(conn)) }))
            .connect(&url)
            .await?;
        migrator(Backend::Sqlite).run(&pool).await?;
        let writer = Writer::start(writing, Backend::Sqlite.begin());
        Ok(Store {
            pool,
            writer,
            policies: Default::default(),
            backend: Backend::Sqlite,
        })
    }

    /// Opens a Postgres database (`postgres://…`) and brings its schema up to
    /// date. Its durability is the server's (`synchronous_commit`).
    pub async fn open_postgres(url: &str) -> Result<Store, StoreError> {
        sqlx::any::install_default_drivers();
        let writing = AnyConnection::connect(url).await?;
        let pool = AnyPoolOptions::new()
            .max_connections(8)
            .before_acquire(|conn, _meta| Box::pin(async move { Ok(outside_transaction(conn)) }))
            .connect(url)
            .await?;
        migrator(Backend::Postgres).run(&pool).await?;
        Ok(Store {
            pool,
            writer: Writer::start(writing, Backend::Postgres.begin()),
            policies: Default::default(),
            backend: Backend::Postgres,
        })
    }

    /// Runs `op` as (part of) a write transaction of the one writer and waits until
    /// it is committed. An error from `op` rolls back what it did, nothing else.
    async fn write<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, StoreError>>
            + Send
            + 'static,
    {
        self.writer.submit(op).await.await
    }

    /// Runs one statement as a write (see [`Store::write`]).
    async fn execute(
        &self,
        query: sqlx::query::Query<'static, sqlx::Any, sqlx::any::AnyArguments>,
    ) -> Result<sqlx::any::AnyQueryResult, StoreError> {
        self.write(move |tx| Box::pin(async move { Ok(query.execute(&mut *tx).await?) }))
            .await
    }

    /// Waits until every write queued before this call is committed (or failed),
    /// so that a read sees them.
    pub async fn flush(&self) {
        let _ = self.write(|_| Box::pin(async { Ok(()) })).await;
    }

    /// Whether the database answers a read (for `/readyz`).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.pool).await?;
        Ok(())
    }

    pub async fn close(&self) {
        self.flush().await;
        self.pool.close().await;
    }
}

/// Whether a pooled connection may be reused. sqlx counts transactions itself:
/// when the database ends one on its own (SQLite rolls back on SQLITE_FULL), the
/// ROLLBACK sqlx sends fails and its count stays at 1, so the connection would go
/// back to the pool believing it is in a transaction. Such a connection is closed
/// instead. (Only migrations and reads use the pool; the writer manages its own
/// transactions.)
fn outside_transaction(conn: &mut AnyConnection) -> bool {
    let clean = !sqlx::Connection::is_in_transaction(conn);
    if !clean {
        tracing::warn!("closing a database connection left inside a transaction");
    }
    clean
}

/// The connection URL of the SQLite file at `path` (created if missing). Every byte
/// but the plainest is percent-encoded, so any file name survives the URL.
fn sqlite_url(path: &Path) -> Result<String, StoreError> {
    let Some(text) = path.to_str() else {
        return Err(StoreError::open_file(
            path,
            std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "the database path is not UTF-8; choose a data directory whose path is",
            ),
        ));
    };
    let mut url = String::from("sqlite://");
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"/._-~".contains(&byte) {
            url.push(byte as char);
        } else {
            url.push_str(&format!("%{byte:02X}"));
        }
    }
    url.push_str("?mode=rwc");
    Ok(url)
}

/// What every connection to the SQLite file is set to: how long it waits for a
/// busy database, and what a commit waits for.
fn connection_pragmas(durability: Durability) -> String {
    format!(
        "PRAGMA busy_timeout = {}; PRAGMA synchronous = {}; PRAGMA foreign_keys = ON;",
        BUSY_TIMEOUT.as_millis(),
        durability.synchronous()
    )
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
            incarnation: "i1".into(),
            mcp_servers: None,
            heartbeat: None,
            name: "a".into(),
            model: None,
            system_prompt: "p".into(),
            permissions: "standard".into(),
            on_ask: crate::switches::OnAsk::Prompt,
            network: crate::switches::Network::On,
            backend: Default::default(),
            idle_timeout_secs: None,
        })
        .await
        .expect("register agent a");
    (store, dir)
}

/// A store for a test: a SQLite file in a temporary directory; or, when
/// `CHORUS_TEST_POSTGRES` names a Postgres server (`postgres://user@host:port`),
/// a fresh database of its own there.
#[cfg(test)]
pub(crate) async fn test_store() -> (Store, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = match test_postgres_database().await {
        Some(url) => Store::open_postgres(&url)
            .await
            .expect("open store on Postgres"),
        None => Store::open(&dir.path().join("chorus.db"))
            .await
            .expect("open store"),
    };
    (store, dir)
}

/// When `CHORUS_TEST_POSTGRES` names a Postgres server, the URL of a fresh, empty
/// database of this test's own there.
#[cfg(test)]
pub(crate) async fn test_postgres_database() -> Option<String> {
    let server = std::env::var("CHORUS_TEST_POSTGRES").ok()?;
    sqlx::any::install_default_drivers();
    let name = format!("chorus_test_{}", uuid::Uuid::new_v4().simple());
    let mut admin = AnyConnection::connect(&format!("{server}/postgres"))
        .await
        .expect("connect to the test Postgres server");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create a test database");
    Some(format!("{server}/{name}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A data directory whose path holds URL syntax (space, `?`, `#`, `%`) opens the
    /// file it names, created private, and keeps what was written across a reopen.
    #[tokio::test]
    async fn any_file_name_survives_the_connection_url() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let odd = dir.path().join("a b?c#d%41 é");
        std::fs::create_dir(&odd).expect("odd dir");
        let path = odd.join("chorus.db");
        let store = Store::open(&path).await.expect("open");
        store
            .register_agent(&NewAgent {
                discord_channel_id: None,
                incarnation: "i1".into(),
                mcp_servers: None,
                heartbeat: None,
                name: "a".into(),
                model: None,
                system_prompt: "p".into(),
                permissions: "standard".into(),
                on_ask: crate::switches::OnAsk::Prompt,
                network: crate::switches::Network::On,
                backend: Default::default(),
                idle_timeout_secs: None,
            })
            .await
            .expect("write");
        store.close().await;
        let mode = std::fs::metadata(&path)
            .expect("the file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        let entries: Vec<_> = std::fs::read_dir(&odd)
            .expect("list")
            .map(|e| e.expect("entry").file_name())
            .collect();
        assert!(
            entries
                .iter()
                .all(|name| name.to_string_lossy().starts_with("chorus.db")),
            "nothing is created beside it under another name: {entries:?}"
        );
        let again = Store::open(&path).await.expect("reopen");
        assert!(again.active_agent("a").await.expect("read").is_some());
    }
}
