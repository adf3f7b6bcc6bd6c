//! The one writer: a task that owns the database's only writing connection. Every
//! write of the store is sent to it (queued); it runs whatever has queued since its
//! last commit as one transaction (group commit), in the order the writes were sent,
//! and tells each caller once that transaction is committed. A run's events are
//! writes of their own (data, not code): consecutive ones are written together
//! (`run_events`), with far fewer statements than one write each.
//!
//! Invariants:
//! - Writes run and commit in the order they were queued: a write queued after another
//!   sees its effects, and is never durable without it.
//! - A caller hears `Ok` only once its write's transaction is committed; a write that
//!   fails is rolled back alone (each write of a batch of several runs inside a
//!   savepoint; merged events that fail are rolled back and written again one by
//!   one), and the others of its batch commit; a commit that fails fails every
//!   write of its batch (nothing of it was written).
//! - Only this task writes; readers use the pool and never wait for the write lock.
//!
//! **Group commit.** One task owns the only writing connection, takes whatever writes
//! have queued (at most 256, `MAX_BATCH`) and runs them as one transaction. It takes SQLite's write lock up front (`BEGIN
//! IMMEDIATE`: a deferred `BEGIN` that reads first cannot wait for the lock later). With
//! several writes, each runs inside a savepoint, so one that fails (a constraint, a
//! `NotFound` after a write) is rolled back alone; a failed `COMMIT` fails every write of
//! the batch. On a full disk SQLite rolls the transaction back by itself; the writer
//! sends a `ROLLBACK` whatever happened (its error ignored), so writes work again once
//! space is freed. The readers' pool closes any connection sqlx still counts as inside a
//! transaction (`before_acquire`).

use std::time::Instant;

use futures::future::BoxFuture;
use sqlx::AnyConnection;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use super::run_events::{self, ThreadEvent};

/// Most writes one transaction takes: a long queue is committed in several, so no
/// caller waits behind an unbounded batch.
const MAX_BATCH: usize = 256;
/// Writes waiting for the writer before senders wait for room.
const QUEUE: usize = 4096;

/// What a write did, for its caller, once the batch's commit is known.
type Finish = Box<dyn FnOnce(Result<(), CommitFailed>) + Send>;

/// A write of the queue.
enum Write {
    /// Code to run in the transaction.
    Op(Box<dyn Queued>),
    /// A run's event, merged with the events queued next to it.
    Event(Box<EventWrite>),
}

struct EventWrite {
    event: ThreadEvent,
    answer: oneshot::Sender<Result<bool, StoreError>>,
}

/// What a caller hears once the batch's commit is known: its write's own result,
/// unless the commit failed.
fn finish_with<T: Send + 'static>(
    answer: oneshot::Sender<Result<T, StoreError>>,
    result: Result<T, StoreError>,
) -> Finish {
    Box::new(move |commit| {
        let result = match commit {
            Ok(()) => result,
            // The write's own error says more than the commit's.
            Err(failed) => result.and_then(|_| Err(failed.error())),
        };
        let _ = answer.send(result);
    })
}

trait Queued: Send {
    /// Runs on the writer's connection inside the batch's transaction; says
    /// whether it succeeded (a failed one is rolled back to its savepoint).
    fn run<'c>(self: Box<Self>, conn: &'c mut AnyConnection) -> BoxFuture<'c, (bool, Finish)>;
    /// Fails without running: its transaction could not begin.
    fn fail(self: Box<Self>, failed: CommitFailed);
}

struct OpWrite<T, F> {
    op: F,
    answer: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Queued for OpWrite<T, F>
where
    T: Send + 'static,
    F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, StoreError>>
        + Send
        + 'static,
{
    fn run<'c>(self: Box<Self>, conn: &'c mut AnyConnection) -> BoxFuture<'c, (bool, Finish)> {
        let OpWrite { op, answer } = *self;
        Box::pin(async move {
            let result = op(conn).await;
            (result.is_ok(), finish_with(answer, result))
        })
    }

    fn fail(self: Box<Self>, failed: CommitFailed) {
        let _ = self.answer.send(Err(failed.error()));
    }
}

/// The commit of a batch failed: nothing of it was written.
#[derive(Debug, Clone)]
pub(crate) struct CommitFailed {
    disk_full: bool,
    message: String,
}

impl CommitFailed {
    fn from(e: &sqlx::Error) -> Self {
        CommitFailed {
            disk_full: super::error::is_disk_full(e),
            message: e.to_string(),
        }
    }

    fn error(&self) -> StoreError {
        if self.disk_full {
            StoreError::DiskFull(self.message.clone())
        } else {
            StoreError::Database(sqlx::Error::Protocol(format!(
                "the transaction could not be committed: {}",
                self.message
            )))
        }
    }
}

/// The handle on the writer task; cheap to clone.
#[derive(Clone)]
pub(crate) struct Writer {
    writes: mpsc::Sender<Write>,
}

/// The statement that opens a batch's transaction (the backend's).
type Begin = &'static str;

/// A write queued to the writer: resolves once its transaction is committed.
pub struct Pending<T>(oneshot::Receiver<Result<T, StoreError>>);

impl<T> std::future::Future for Pending<T> {
    type Output = Result<T, StoreError>;

    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|answer| answer.unwrap_or_else(|_| Err(stopped())))
    }
}

impl<T> Pending<T> {
    /// An answer known already (nothing to write).
    pub fn ready(value: T) -> Pending<T> {
        let (answer, pending) = oneshot::channel();
        let _ = answer.send(Ok(value));
        Pending(pending)
    }
}

fn stopped() -> StoreError {
    StoreError::Database(sqlx::Error::PoolClosed)
}

impl Writer {
    /// Starts the writer task on `conn`; it ends when every handle is dropped.
    pub(crate) fn start(conn: AnyConnection, begin: Begin) -> Writer {
        let (writes, queue) = mpsc::channel(QUEUE);
        tokio::spawn(run(conn, begin, queue));
        Writer { writes }
    }

    /// Queues `op` (waiting only for room in the queue); the returned [`Pending`]
    /// resolves once the transaction that ran it is committed.
    pub(crate) async fn submit<T, F>(&self, op: F) -> Pending<T>
    where
        T: Send + 'static,
        F: for<'c> FnOnce(&'c mut AnyConnection) -> BoxFuture<'c, Result<T, StoreError>>
            + Send
            + 'static,
    {
        let (answer, pending) = oneshot::channel();
        // A send fails only when the writer is gone (shutdown): the pending
        // answer then says so.
        let _ = self
            .writes
            .send(Write::Op(Box::new(OpWrite { op, answer })))
            .await;
        Pending(pending)
    }

    /// Queues a run's event; the [`Pending`] says, once committed, whether it was
    /// stored (false: stored before, or its run is not known).
    pub(crate) async fn submit_event(&self, event: ThreadEvent) -> Pending<bool> {
        let (answer, pending) = oneshot::channel();
        let write = Write::Event(Box::new(EventWrite { event, answer }));
        let _ = self.writes.send(write).await;
        Pending(pending)
    }
}

async fn run(mut conn: AnyConnection, begin: Begin, mut queue: mpsc::Receiver<Write>) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let started = Instant::now();
        commit_batch(&mut conn, begin, std::mem::take(&mut batch)).await;
        crate::metrics::db_write(started.elapsed());
    }
    let _ = sqlx::Connection::close(conn).await;
}

/// Runs one batch as one transaction and tells every write how it ended.
async fn commit_batch(conn: &mut AnyConnection, begin: Begin, batch: Vec<Write>) {
    // `begin` is the backend's: on SQLite it takes the write lock up front (a
    // deferred BEGIN that reads first cannot wait for it later,
    // SQLITE_BUSY_SNAPSHOT). Only this connection writes, so any wait is for a
    // checkpoint or an outside process.
    if let Err(e) = execute(conn, begin).await {
        let failed = CommitFailed::from(&e);
        tracing::error!(error = %e, "cannot begin a write transaction");
        for write in batch {
            match write {
                Write::Op(write) => write.fail(failed.clone()),
                Write::Event(write) => {
                    let _ = write.answer.send(Err(failed.error()));
                }
            }
        }
        rollback(conn).await;
        return;
    }
    // A write alone needs no savepoint: when it fails, the batch is rolled back.
    let savepoints = batch.len() > 1;
    let mut finishes = Vec::with_capacity(batch.len());
    let mut writes = batch.into_iter().peekable();
    while let Some(write) = writes.next() {
        match write {
            Write::Op(write) => finishes.push(run_op(conn, write, savepoints).await),
            Write::Event(first) => {
                let mut events = vec![*first];
                while let Some(Write::Event(_)) = writes.peek() {
                    if let Some(Write::Event(next)) = writes.next() {
                        events.push(*next);
                    }
                }
                write_events(conn, events, savepoints, &mut finishes).await;
            }
        }
    }
    // A batch of one failed write is simply rolled back.
    let committed = if !savepoints && finishes.first().is_some_and(|(ok, _)| !ok) {
        rollback(conn).await;
        Ok(())
    } else {
        match execute(conn, "COMMIT").await {
            Ok(()) => Ok(()),
            Err(e) => {
                tracing::error!(error = %e, "a write transaction could not be committed");
                rollback(conn).await;
                Err(CommitFailed::from(&e))
            }
        }
    };
    for (_, finish) in finishes {
        finish(committed.clone());
    }
}

/// Runs one write, in a savepoint when the batch has others.
async fn run_op(
    conn: &mut AnyConnection,
    write: Box<dyn Queued>,
    savepoint: bool,
) -> (bool, Finish) {
    if savepoint && let Err(e) = execute(conn, "SAVEPOINT one_write").await {
        let failed = CommitFailed::from(&e);
        return (false, Box::new(move |_| write.fail(failed)));
    }
    let (ok, finish) = write.run(conn).await;
    if savepoint {
        end_savepoint(conn, ok).await;
    }
    (ok, finish)
}

/// Writes consecutive events of a run (of any runs) together; when that fails,
/// writes them again one by one, so only a failing event is lost.
async fn write_events(
    conn: &mut AnyConnection,
    events: Vec<EventWrite>,
    savepoint: bool,
    finishes: &mut Vec<(bool, Finish)>,
) {
    let merged = if savepoint {
        execute(conn, "SAVEPOINT one_write")
            .await
            .map_err(StoreError::from)
    } else {
        Ok(())
    };
    let merged = match merged {
        Ok(()) => {
            let all: Vec<&ThreadEvent> = events.iter().map(|write| &write.event).collect();
            run_events::write(conn, &all).await
        }
        Err(e) => Err(e),
    };
    if savepoint {
        end_savepoint(conn, merged.is_ok()).await;
    }
    match merged {
        Ok(stored) => {
            for (write, stored) in events.into_iter().zip(stored) {
                finishes.push((true, finish_with(write.answer, Ok(stored))));
            }
        }
        // Savepoints are off only for a batch of one write: this event alone. The
        // batch is rolled back and its caller told why.
        Err(e) if !savepoint => {
            if let Some(write) = events.into_iter().next() {
                finishes.push((false, finish_with(write.answer, Err(e))));
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, events = events.len(), "merged events failed; writing them one by one");
            for write in events {
                let (ok, finish) = run_op(conn, Box::new(AloneEvent(write)), true).await;
                finishes.push((ok, finish));
            }
        }
    }
}

/// An event written on its own (after its merged batch failed).
struct AloneEvent(EventWrite);

impl Queued for AloneEvent {
    fn run<'c>(self: Box<Self>, conn: &'c mut AnyConnection) -> BoxFuture<'c, (bool, Finish)> {
        Box::pin(async move {
            let EventWrite { event, answer } = self.0;
            let result = run_events::write(conn, &[&event])
                .await
                .map(|stored| stored.first().copied().unwrap_or(false));
            (result.is_ok(), finish_with(answer, result))
        })
    }

    fn fail(self: Box<Self>, failed: CommitFailed) {
        let _ = self.0.answer.send(Err(failed.error()));
    }
}

/// Ends a write's savepoint: kept when the write succeeded, undone when it failed.
async fn end_savepoint(conn: &mut AnyConnection, ok: bool) {
    let end = if ok {
        execute(conn, "RELEASE one_write").await
    } else {
        match execute(conn, "ROLLBACK TO one_write").await {
            Ok(()) => execute(conn, "RELEASE one_write").await,
            Err(e) => Err(e),
        }
    };
    if let Err(e) = end {
        tracing::warn!(error = %e, "cannot end a write's savepoint");
    }
}

async fn execute(conn: &mut AnyConnection, sql: &'static str) -> Result<(), sqlx::Error> {
    sqlx::raw_sql(sql).execute(conn).await.map(drop)
}

/// Ends whatever transaction is left. SQLite may have rolled it back itself (a
/// full disk); then ROLLBACK fails with "no transaction is active", which is fine.
async fn rollback(conn: &mut AnyConnection) {
    let _ = execute(conn, "ROLLBACK").await;
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn writer() -> (Writer, sqlx::AnyPool, tempfile::TempDir) {
        sqlx::any::install_default_drivers();
        let dir = tempfile::tempdir().expect("temp dir");
        let url = super::super::sqlite_url(&dir.path().join("w.db")).expect("url");
        let mut conn = <AnyConnection as sqlx::Connection>::connect(&url)
            .await
            .expect("connect");
        sqlx::raw_sql("PRAGMA journal_mode = WAL; CREATE TABLE t (v TEXT UNIQUE)")
            .execute(&mut conn)
            .await
            .expect("table");
        let pool = sqlx::AnyPool::connect(&url).await.expect("pool");
        (Writer::start(conn, "BEGIN IMMEDIATE"), pool, dir)
    }

    async fn insert(writer: &Writer, v: &'static str) -> Pending<()> {
        writer
            .submit(move |tx| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t (v) VALUES ($1)")
                        .bind(v)
                        .execute(&mut *tx)
                        .await?;
                    Ok(())
                })
            })
            .await
    }

    async fn rows(pool: &sqlx::AnyPool) -> Vec<String> {
        sqlx::query_scalar("SELECT v FROM t ORDER BY rowid")
            .fetch_all(pool)
            .await
            .expect("rows")
    }

    /// Writes queued while the writer is busy commit together; the one that fails is
    /// undone alone (even what it wrote before failing) and its caller hears why;
    /// the others are committed, in order, and a later write sees an earlier one.
    #[tokio::test]
    async fn a_failing_job_of_a_batch_is_undone_alone() {
        let (writer, pool, _dir) = writer().await;
        let (release, hold) = oneshot::channel::<()>();
        let first = writer
            .submit(move |_tx| {
                Box::pin(async move {
                    let _ = hold.await;
                    Ok(())
                })
            })
            .await;
        let a = insert(&writer, "a").await;
        let failing = writer
            .submit(|tx| {
                Box::pin(async move {
                    sqlx::query("INSERT INTO t (v) VALUES ('half')")
                        .execute(&mut *tx)
                        .await?;
                    // A duplicate: the write fails after writing one row.
                    sqlx::query("INSERT INTO t (v) VALUES ('a')")
                        .execute(&mut *tx)
                        .await?;
                    Ok(())
                })
            })
            .await;
        let sees_a = writer
            .submit(|tx| {
                Box::pin(async move {
                    let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM t WHERE v = 'a'")
                        .fetch_one(&mut *tx)
                        .await?;
                    Ok(n)
                })
            })
            .await;
        let b = insert(&writer, "b").await;
        release.send(()).expect("release");
        first.await.expect("first");
        a.await.expect("a");
        let error = failing.await.expect_err("the duplicate fails");
        assert!(error.to_string().contains("UNIQUE"), "{error}");
        assert_eq!(sees_a.await.expect("read"), 1);
        b.await.expect("b");
        assert_eq!(rows(&pool).await, ["a", "b"]);
    }

    /// A caller hears `Ok` only once its write is committed: a reader on another
    /// connection sees it at that moment.
    #[tokio::test]
    async fn an_answer_means_committed() {
        let (writer, pool, _dir) = writer().await;
        for v in ["x", "y", "z"] {
            insert(&writer, v).await.await.expect("insert");
            assert!(rows(&pool).await.contains(&v.to_string()));
        }
    }

    /// The writer gone (shutdown), a write answers with an error instead of
    /// hanging its caller.
    #[tokio::test]
    async fn a_write_without_a_writer_fails() {
        let (writes, queue) = mpsc::channel(1);
        drop(queue);
        let gone = Writer { writes };
        assert!(insert(&gone, "x").await.await.is_err());
    }
}
