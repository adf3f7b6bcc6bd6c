//! Background tasks against real processes.
use std::time::Duration;

use super::*;

fn registry() -> (tempfile::TempDir, Arc<BackgroundJobs>) {
    (
        tempfile::tempdir().unwrap(),
        Arc::new(BackgroundJobs::default()),
    )
}

fn id_of(started: &ToolOutcome) -> u32 {
    assert!(!started.is_error, "{}", started.content);
    started
        .content
        .strip_prefix("Started background task ")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("no task id in {}", started.content))
}

fn output(id: u32, wait: f64) -> OutputArgs {
    OutputArgs {
        job_id: id,
        wait: Some(wait),
    }
}

/// Live processes whose command line contains `marker`.
fn running(marker: &str) -> usize {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter(|p| {
            let alive = std::fs::read_to_string(p.path().join("stat"))
                .ok()
                .and_then(|s| {
                    s.rsplit_once(')')
                        .map(|(_, rest)| !rest.trim_start().starts_with('Z'))
                })
                .unwrap_or(false);
            alive
                && std::fs::read(p.path().join("cmdline"))
                    .is_ok_and(|c| String::from_utf8_lossy(&c).contains(marker))
        })
        .count()
}

#[tokio::test]
async fn a_task_runs_on_after_its_call_and_its_output_is_read_piece_by_piece() {
    let (dir, tasks) = registry();
    let started = tasks.start(
        dir.path(),
        "echo first; echo oops >&2; touch go-flag; while [ ! -e release ]; do sleep 0.05; done; echo second; exit 3",
    ).await;
    let id = id_of(&started);
    assert!(
        started.content.contains("job_output(job_id=1)"),
        "{}",
        started.content
    );
    // The call has returned; the task is still running.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !dir.path().join("go-flag").exists() {
        assert!(std::time::Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first = tasks.output(output(id, 0.2)).await;
    assert!(!first.is_error);
    assert!(
        first.content.starts_with("task 1 is running"),
        "{}",
        first.content
    );
    assert!(
        first.content.contains("first\noops\n"),
        "stdout and stderr merged: {}",
        first.content
    );

    std::fs::write(dir.path().join("release"), "").unwrap();
    let second = tasks.output(output(id, 10.0)).await;
    assert!(
        second
            .content
            .starts_with("task 1 has ended (failed, exit code 3)"),
        "{}",
        second.content
    );
    assert!(
        second.content.ends_with("second\n"),
        "only what is new: {}",
        second.content
    );
    let (_, new) = second.content.split_once("---\n").unwrap();
    assert_eq!(new, "second\n", "only what is new");
    let third = tasks.output(output(id, 0.0)).await;
    assert!(
        third.content.ends_with("(no new output)"),
        "{}",
        third.content
    );
    assert_eq!(tasks.running(), 0);
}

#[tokio::test]
async fn stopping_a_task_ends_it_and_everything_it_started() {
    let (dir, tasks) = registry();
    let marker = format!("77.{}{}", std::process::id(), line!());
    let id = id_of(
        &tasks
            .start(
                dir.path(),
                &format!("(sleep {marker} & sleep {marker}) & sleep {marker}"),
            )
            .await,
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while running(&marker) < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "the task never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stopped = tasks.stop(JobArgs { job_id: id }).await;
    assert!(!stopped.is_error, "{}", stopped.content);
    assert!(
        stopped.content.starts_with("task 1 stopped"),
        "{}",
        stopped.content
    );
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while running(&marker) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "processes left behind"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let state = tasks.output(output(id, 0.0)).await;
    assert!(
        state.content.starts_with("task 1 has ended (stopped"),
        "{}",
        state.content
    );
    let again = tasks.stop(JobArgs { job_id: id }).await;
    assert_eq!(again.content, "task 1 had ended already");
}

#[tokio::test]
async fn a_finished_task_leaves_no_process_behind_and_stop_all_ends_the_rest() {
    let (dir, tasks) = registry();
    let marker = format!("78.{}{}", std::process::id(), line!());
    // The shell exits at once, leaving a grandchild: the task ends it.
    let quick = id_of(
        &tasks
            .start(dir.path(), &format!("sleep {marker} & echo left"))
            .await,
    );
    let ended = tasks.output(output(quick, 10.0)).await;
    assert!(
        ended.content.contains("has ended (completed, exit code 0)"),
        "{}",
        ended.content
    );
    let other = format!("79.{}{}", std::process::id(), line!());
    id_of(&tasks.start(dir.path(), &format!("sleep {other}")).await);
    id_of(&tasks.start(dir.path(), &format!("sleep {other}")).await);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while running(&other) < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the tasks never started"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tasks.stop_all().await;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while running(&marker) + running(&other) > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "processes left behind"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(tasks.running(), 0);
}

#[tokio::test]
async fn bad_requests_get_clear_errors() {
    let (dir, tasks) = registry();
    let none = tasks.output(output(4, 0.0)).await;
    assert!(none.is_error);
    assert!(
        none.content.contains("no background task was started"),
        "{}",
        none.content
    );
    let id = id_of(&tasks.start(dir.path(), "true").await);
    let unknown = tasks.stop(JobArgs { job_id: 9 }).await;
    assert_eq!(
        unknown.content,
        format!("there is no task 9; the tasks are {id}")
    );
    assert!(tasks.start(dir.path(), "  ").await.is_error);
    let bad_wait = tasks
        .output(OutputArgs {
            job_id: id,
            wait: Some(-1.0),
        })
        .await;
    assert!(bad_wait.is_error);
}

#[tokio::test]
async fn only_so_many_tasks_run_at_once() {
    let (dir, tasks) = registry();
    for _ in 0..MAX_RUNNING {
        id_of(&tasks.start(dir.path(), "sleep 30").await);
    }
    let refused = tasks.start(dir.path(), "sleep 30").await;
    assert!(refused.is_error);
    assert!(
        refused.content.contains("stop one with job_stop"),
        "{}",
        refused.content
    );
    tasks.stop_all().await;
}

#[test]
fn output_keeps_the_newest_bytes_and_says_what_was_lost() {
    let mut output = Output::default();
    output.push(&vec![b'a'; OUTPUT_KEPT]);
    output.push(b"tail");
    let text = output.take_new();
    assert!(
        text.starts_with("[… 4 bytes of older output were not kept …]\n"),
        "{}",
        &text[..80]
    );
    assert!(text.contains("[… "), "the shown part is capped too");
    assert!(text.ends_with("tail"));
    assert_eq!(output.take_new(), "");
}

/// A task's shell dies with the *thread* that forked it (`PR_SET_PDEATHSIG`), so it
/// must not be forked by a tokio thread that can exit: here the call runs on a
/// blocking-pool thread that exits 100 ms after it goes idle, and the task must run
/// on long after that.
#[test]
fn a_task_outlives_the_thread_that_started_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(100))
        .enable_all()
        .build()
        .unwrap();
    let marker = format!("30.{}{}", std::process::id(), line!());
    let (dir, tasks) = registry();
    let root = dir.path().to_path_buf();
    runtime.block_on(async {
        let started = {
            let tasks = tasks.clone();
            let command = format!("sleep {marker}");
            tokio::task::spawn_blocking(move || {
                tokio::runtime::Handle::current().block_on(tasks.start(&root, &command))
            })
            .await
            .unwrap()
        };
        let id = id_of(&started);
        // Well past the idle thread's exit.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let out = tasks.output(output(id, 0.0)).await;
        assert!(out.content.contains("is running"), "{}", out.content);
        assert_eq!(running(&marker), 1, "the task died with its thread");
        tasks.stop_all().await;
    });
}
