//! The jobs record: its status words, and a database from before jobs had their
//! name upgraded.

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
