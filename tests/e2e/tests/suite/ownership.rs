//! One control plane per data directory, and per Postgres database: a second
//! `chorus serve` is refused at once, naming the owner, and touches nothing of the
//! first one's; a dead owner's lock dies with it; a start that fails on a busy port
//! leaves no file behind.

use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, process, test_postgres};
use reqwest::Method;
use serde_json::json;

/// How long a refused chorus may take to say so: it binds two ports and tries a
/// lock, nothing more (a debug build on a loaded machine; measured well under 1 s).
const REFUSAL_TIME: Duration = Duration::from_secs(5);

/// A chorus on `model` whose agent `busy` runs a thread held in a bash command
/// (`sleep <marker>`); returns it with the thread's id once the command runs.
async fn busy_chorus(
    model: &FakeModel,
    marker: &str,
    data_dir: &std::path::Path,
) -> anyhow::Result<(Chorus, u64)> {
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}")}),
    ));
    // Whatever is asked after the command (a resumed run) is answered.
    model.set_fallback(|_| text("done"));
    let chorus = Chorus::builder()
        .openai_fake(model)
        .data_dir(data_dir)
        .start()
        .await?;
    chorus
        .create_agent_with(json!({"name": "busy", "permissions": "open"}))
        .await?;
    let id = chorus.send_message("busy", "wait").await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while process::with_marker(marker).is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok((chorus, id))
}

/// What a refused start must not have touched: the command still runs, the thread
/// still runs, its worker is the same process and was never restarted.
async fn untouched(chorus: &Chorus, id: u64, marker: &str, worker: u32) -> anyhow::Result<()> {
    assert_eq!(
        process::with_marker(marker).len(),
        1,
        "the tool process was ended"
    );
    let thread = chorus.thread("busy", id).await?;
    assert_eq!(thread["status"], "running", "{thread:#}");
    let agent = chorus.agent("busy").await?;
    assert_eq!(agent["worker"]["pid"], worker, "{agent:#}");
    assert_eq!(agent["worker"]["restarts"], 0, "{agent:#}");
    assert_eq!(agent["worker"]["state"], "running", "{agent:#}");
    Ok(())
}

#[tokio::test]
async fn a_second_chorus_on_a_data_directory_in_use_is_refused_and_the_first_goes_on()
-> anyhow::Result<()> {
    let marker = format!("600.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    let temp = tempfile::tempdir()?;
    let data_dir = temp.path().join("data");
    let (first, id) = busy_chorus(&model, &marker, &data_dir).await?;
    let worker = first
        .wait_worker_running("busy", Duration::from_secs(15))
        .await?;
    let files_before = listing(&data_dir);

    // Other ports (any free ones), the same data directory.
    let started = Instant::now();
    let (status, said) = Chorus::builder()
        .openai_fake(&model)
        .run_to_exit(&data_dir, Duration::from_secs(30))
        .await?;
    let took = started.elapsed();
    eprintln!("second chorus refused after {took:?}: {said}");
    assert!(!status.success(), "{status}: {said}");
    assert!(took < REFUSAL_TIME, "refused only after {took:?}");
    assert!(
        said.contains(&format!("another chorus (pid {}, started ", first.pid())),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "is using this data directory {}",
            first.data_dir.display()
        )),
        "{said}"
    );
    assert!(
        said.contains(&format!(
            "http {}",
            first.http_url.trim_start_matches("http://")
        )),
        "{said}"
    );
    // It never got as far as a worker, a store or a leftover sweep.
    assert!(!said.contains("chorus ready"), "{said}");
    untouched(&first, id, &marker, worker).await?;
    assert_eq!(
        listing(&data_dir),
        files_before,
        "the refused chorus wrote files"
    );

    // The lock dies with its owner: a new chorus starts at once.
    first.kill().await?;
    let started = Instant::now();
    let second = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data_dir)
        .start()
        .await?;
    eprintln!(
        "after SIGKILL, a new chorus was ready in {:?}",
        started.elapsed()
    );
    let lock = std::fs::read_to_string(data_dir.join("chorus.lock"))?;
    assert!(lock.contains(&format!("pid={}\n", second.pid())), "{lock}");
    second.stop().await?;
    Ok(())
}

/// The paths under `dir`, sorted (without the tool process's and the database's
/// own churn: only names).
fn listing(dir: &std::path::Path) -> Vec<String> {
    fn walk(dir: &std::path::Path, root: &std::path::Path, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = path.strip_prefix(root).unwrap().display().to_string();
            // SQLite's own files come and go with checkpoints; the workspace's git
            // objects with the agent's work.
            if name.starts_with("chorus.db") || name.contains(".git") {
                continue;
            }
            out.push(name);
            if path.is_dir() {
                walk(&path, root, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

#[tokio::test]
async fn a_start_that_fails_on_a_busy_port_leaves_no_file_behind() -> anyhow::Result<()> {
    let taken = std::net::TcpListener::bind("127.0.0.1:0")?;
    let busy = taken.local_addr()?.to_string();
    let temp = tempfile::tempdir()?;

    // A data directory that does not exist yet is not created…
    let missing = temp.path().join("data");
    let (status, said) = Chorus::builder()
        .generated_token()
        .http_addr(&busy)
        .run_to_exit(&missing, Duration::from_secs(30))
        .await?;
    assert!(!status.success(), "{said}");
    assert!(
        said.contains(&format!("cannot listen for HTTP on {busy}")),
        "{said}"
    );
    assert!(!missing.exists(), "{:?}", listing(&missing));

    // …and one that exists gets nothing (no api-token, no database, no lock).
    let empty = temp.path().join("empty");
    std::fs::create_dir(&empty)?;
    let (status, said) = Chorus::builder()
        .generated_token()
        .http_addr(&busy)
        .run_to_exit(&empty, Duration::from_secs(30))
        .await?;
    assert!(!status.success(), "{said}");
    assert_eq!(listing(&empty), Vec::<String>::new());

    // The positive control: the same start on a free port makes them.
    drop(taken);
    let chorus = Chorus::builder()
        .generated_token()
        .data_dir(&empty)
        .start()
        .await?;
    let made = listing(&empty);
    for file in ["api-token", "chorus.lock", "agents"] {
        assert!(made.contains(&file.to_string()), "{made:?}");
    }
    chorus.stop().await?;
    Ok(())
}

/// Two control planes on two data directories (two hosts, say) but one Postgres
/// database: the second is refused by the database's lock, names the first, and
/// leaves the data directory it would have made unmade.
#[tokio::test]
async fn a_second_chorus_on_a_postgres_database_in_use_is_refused() -> anyhow::Result<()> {
    if test_postgres().is_none() {
        eprintln!("skipped: CHORUS_TEST_POSTGRES is not set");
        return Ok(());
    }
    let marker = format!("600.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    let temp = tempfile::tempdir()?;
    let (first, id) = busy_chorus(&model, &marker, &temp.path().join("a")).await?;
    let worker = first
        .wait_worker_running("busy", Duration::from_secs(15))
        .await?;
    let database = first.database_url.clone().expect("a Postgres store");

    let other = temp.path().join("b");
    let started = Instant::now();
    let (status, said) = Chorus::builder()
        .openai_fake(&model)
        .database_url(&database)
        .run_to_exit(&other, Duration::from_secs(30))
        .await?;
    let took = started.elapsed();
    eprintln!("second chorus on the same database refused after {took:?}: {said}");
    assert!(!status.success(), "{status}: {said}");
    assert!(took < REFUSAL_TIME, "refused only after {took:?}");
    // The holder as its session shows it: its pid, where it connects from, its start.
    assert!(
        said.contains(&format!(
            "another chorus (pid {} on 127.0.0.1, started ",
            first.pid()
        )),
        "{said}"
    );
    assert!(
        said.contains("is using this database (Postgres, "),
        "{said}"
    );
    assert!(
        !said.contains(chorus_test_support::TEST_DB_PASSWORD),
        "{said}"
    );
    assert!(
        !other.exists(),
        "the refused chorus left {:?}",
        listing(&other)
    );
    untouched(&first, id, &marker, worker).await?;

    // A session the server ends (a restart, an administrator) takes the lock with
    // it: the owner notices and takes it again, and a newcomer is still refused.
    let ended = first
        .query_store(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name LIKE 'chorus pid=%'",
        )
        .await?;
    assert_eq!(ended.trim(), "1", "one lock session: {ended}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !first.output().contains("the database's lock is held again") {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the lock was not taken again: {}",
            first.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (status, said) = Chorus::builder()
        .openai_fake(&model)
        .database_url(&database)
        .run_to_exit(&other, Duration::from_secs(30))
        .await?;
    assert!(!status.success(), "{status}: {said}");
    assert!(said.contains("is using this database"), "{said}");

    // Its session ends with it: a new chorus on the database starts at once.
    first
        .api(Method::DELETE, &format!("/api/agents/busy/threads/{id}"))
        .send()
        .await?
        .error_for_status()?;
    first.kill().await?;
    let started = Instant::now();
    let second = Chorus::builder()
        .openai_fake(&model)
        .database_url(&database)
        .data_dir(&other)
        .start()
        .await?;
    eprintln!(
        "after SIGKILL, a new chorus on the database was ready in {:?}",
        started.elapsed()
    );
    second.stop().await?;
    Ok(())
}
