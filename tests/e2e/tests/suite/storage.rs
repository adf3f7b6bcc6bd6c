//! The store under concurrency and faults, through the real binary: parallel writers
//! wait instead of failing, a full disk is a clear error that goes away when space
//! comes back, destroy and create survive a failure at each step, and what chorus
//! creates in its data directory is private.

use std::path::Path;
use std::time::Duration;

use chorus_test_support::fake_model::text;
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const AGENTS: usize = 16;
const MESSAGES_PER_AGENT: usize = 2;

/// Many creates and messages at once: every request succeeds (a busy database waits,
/// it never answers 500 "database is locked") and every agent ends up active.
#[tokio::test]
async fn parallel_creates_and_messages_never_fail_with_a_locked_database() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    for i in 0..AGENTS * MESSAGES_PER_AGENT {
        model.push(text(&format!("answer {i}")));
    }
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    let chorus = std::sync::Arc::new(chorus);

    // All creates at once.
    let creates: Vec<_> = (0..AGENTS)
        .map(|i| {
            let chorus = chorus.clone();
            tokio::spawn(async move {
                let response = chorus
                    .api(Method::POST, "/api/agents")
                    .json(&json!({ "name": format!("crowd-{i}") }))
                    .send()
                    .await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await?;
                anyhow::Ok((status, body))
            })
        })
        .collect();
    let mut failures = Vec::new();
    for create in creates {
        let (status, body) = create.await??;
        if status != 201 {
            failures.push(format!("create: {status} {body}"));
        }
    }

    // Then every agent's messages at once, while the workers also write steps.
    let sends: Vec<_> = (0..AGENTS * MESSAGES_PER_AGENT)
        .map(|i| {
            let chorus = chorus.clone();
            tokio::spawn(async move {
                let agent = format!("crowd-{}", i % AGENTS);
                let response = chorus
                    .api(Method::POST, &format!("/api/agents/{agent}/messages"))
                    .json(&json!({ "content": format!("message {i}") }))
                    .send()
                    .await?;
                let status = response.status().as_u16();
                let body: Value = response.json().await?;
                anyhow::Ok((agent, status, body))
            })
        })
        .collect();
    let mut threads = Vec::new();
    for send in sends {
        let (agent, status, body) = send.await??;
        match body["thread_id"].as_u64() {
            Some(id) if status == 202 => threads.push((agent, id)),
            _ => failures.push(format!("message to {agent}: {status} {body}")),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} requests failed:\n{}",
        failures.len(),
        AGENTS + AGENTS * MESSAGES_PER_AGENT,
        failures.join("\n")
    );

    let listed: Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let active = listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "active")
        .count();
    assert_eq!(active, AGENTS, "{listed:#}");
    for (agent, id) in &threads {
        let thread = chorus
            .wait_thread_finished(agent, *id, Duration::from_secs(60))
            .await?;
        assert_eq!(thread["status"], "completed", "{thread:#}");
    }
    assert!(
        !chorus.output().contains("database is locked"),
        "the log mentions a locked database"
    );
    Ok(())
}

/// A small tmpfs of our own, unmounted (lazily) when dropped. `Err` says why this
/// sandbox cannot mount one (not root, no CAP_SYS_ADMIN, no tmpfs).
struct Tmpfs {
    path: std::path::PathBuf,
}

impl Tmpfs {
    fn mount(path: &Path, size: &str) -> Result<Tmpfs, String> {
        std::fs::create_dir_all(path).map_err(|e| e.to_string())?;
        let out = std::process::Command::new("mount")
            .args([
                "-t",
                "tmpfs",
                "-o",
                &format!("size={size},mode=0755"),
                "tmpfs",
            ])
            .arg(path)
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: path.to_path_buf(),
        })
    }

    fn unmount(&self) {
        let _ = std::process::Command::new("umount")
            .arg("-l")
            .arg(&self.path)
            .status();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        self.unmount();
    }
}

/// Fills the filesystem holding `dir` to the last byte with one file; returns it.
fn fill_disk(dir: &Path) -> std::path::PathBuf {
    use std::io::Write;
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).unwrap();
    for chunk in [64 * 1024, 4096, 512, 1] {
        let block = vec![0u8; chunk];
        while file.write_all(&block).is_ok() {}
    }
    let _ = file.sync_all();
    path
}

fn is_disk_full(status: u16, body: &Value) -> bool {
    status == 507
        && body["error"]["code"] == "disk_full"
        && body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("disk") && m.contains("full"))
}

async fn call(chorus: &Chorus, method: Method, path: &str, body: Value) -> (u16, Value) {
    let response = chorus.api(method, path).json(&body).send().await.unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

async fn active_names(chorus: &Chorus) -> Vec<String> {
    let listed: Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    listed
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["status"] == "active")
        .map(|a| a["name"].as_str().unwrap().to_string())
        .collect()
}

/// chorus with its data directory on a 16 MiB tmpfs that the test fills: while it is
/// full every write is a 507 that says the disk is full (never "database is locked")
/// and leaves nothing half-made; once space is freed the same requests work, without
/// a restart.
#[tokio::test]
async fn a_full_disk_is_a_clear_error_and_writes_work_again_once_space_is_freed()
-> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let disk = match Tmpfs::mount(&tmp.path().join("disk"), "16m") {
        Ok(disk) => disk,
        Err(reason) => {
            println!("SKIPPED: cannot mount a small filesystem here ({reason})");
            return Ok(());
        }
    };
    let model = FakeOpenAi::start().await;
    model.push(text("after the disk was freed"));
    let chorus = Chorus::builder()
        // The database file itself is under test.
        .sqlite()
        .data_dir(&disk.path.join("data"))
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    chorus.create_agent("early").await?;
    chorus
        .wait_worker_running("early", Duration::from_secs(15))
        .await?;

    let filler = fill_disk(&disk.path);
    let mut seen = Vec::new();
    let (status, body) = call(
        &chorus,
        Method::POST,
        "/api/agents",
        json!({"name": "late"}),
    )
    .await;
    assert!(is_disk_full(status, &body), "create: {status} {body}");
    seen.push(body);
    assert!(
        !chorus.agent_dir("late").exists(),
        "a create that failed left its directory behind"
    );
    for _ in 0..3 {
        let (status, body) = call(
            &chorus,
            Method::POST,
            "/api/agents/early/messages",
            json!({"content": "hello"}),
        )
        .await;
        assert!(is_disk_full(status, &body), "message: {status} {body}");
        seen.push(body);
    }
    let (status, body) = call(
        &chorus,
        Method::PATCH,
        "/api/agents/early",
        json!({"system_prompt": "new"}),
    )
    .await;
    assert!(is_disk_full(status, &body), "configure: {status} {body}");
    seen.push(body);
    assert!(
        seen.iter().all(|b| !b.to_string().contains("locked")),
        "{seen:#?}"
    );
    assert_eq!(active_names(&chorus).await, ["early"]);

    std::fs::remove_file(&filler)?;
    // The same requests work again, at once.
    let id = chorus.send_message("early", "hello again").await?;
    let thread = chorus
        .wait_thread_finished("early", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    chorus.create_agent("late").await?;
    let (status, body) = call(
        &chorus,
        Method::PATCH,
        "/api/agents/early",
        json!({"system_prompt": "new"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(active_names(&chorus).await, ["early", "late"]);
    assert!(!chorus.output().contains("database is locked"));
    drop(chorus);
    disk.unmount();
    Ok(())
}

/// Runs SQL against chorus's database from outside (the sqlite3 program), to make
/// one step fail for real: a trigger that aborts the statement. `Err` when the
/// sqlite3 program is not installed.
fn sqlite(db: &Path, sql: &str) -> Result<(), String> {
    let out = std::process::Command::new("sqlite3")
        .arg(db)
        .arg(sql)
        .output()
        .map_err(|e| format!("cannot run sqlite3: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        panic!("sqlite3 {sql}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A create fails at each of its steps in turn (copying the template, laying out the
/// directory, reading agent.json, registering the row); each time there is no agent
/// and no directory afterwards, and the name can be created once the cause is gone.
#[tokio::test]
async fn a_create_that_fails_at_any_step_leaves_no_agent_and_no_directory() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let template = tmp.path().join("template");
    let good_config = r#"{"permissions": "standard"}"#;
    write(&template.join("agent.json"), good_config);
    write(&template.join("docs/README.md"), "docs\n");
    write(&template.join("workspace/.gitkeep"), "");
    let chorus = Chorus::builder()
        // The database file itself is under test.
        .sqlite()
        .data_dir(&tmp.path().join("data"))
        .env("CHORUS_TEMPLATE_DIR", template.to_str().unwrap())
        .start()
        .await?;
    let db = chorus.data_dir.join("chorus.db");
    if let Err(reason) = sqlite(&db, "SELECT 1") {
        println!("SKIPPED: {reason}");
        return Ok(());
    }

    let link = template.join("workspace/zz-link");
    let sessions = template.join("sessions");
    // Each step's cause, switched on (true) and off (false).
    type Cause<'a> = Box<dyn Fn(bool) + 'a>;
    let steps: [(&str, Cause); 4] = [
        (
            "copy",
            Box::new(|fail| {
                if fail {
                    std::os::unix::fs::symlink("/etc", &link).unwrap();
                } else {
                    std::fs::remove_file(&link).unwrap();
                }
            }),
        ),
        (
            "layout",
            Box::new(|fail| {
                if fail {
                    write(&sessions, "a file where a directory is expected");
                } else {
                    std::fs::remove_file(&sessions).unwrap();
                }
            }),
        ),
        (
            "config",
            Box::new(|fail| {
                let config = if fail { "not json" } else { good_config };
                write(&template.join("agent.json"), config);
            }),
        ),
        (
            "row",
            Box::new(|fail| {
                let sql = if fail {
                    "CREATE TRIGGER refuse BEFORE INSERT ON agents \
                     BEGIN SELECT RAISE(ABORT, 'injected failure'); END;"
                } else {
                    "DROP TRIGGER refuse;"
                };
                sqlite(&db, sql).unwrap();
            }),
        ),
    ];
    for (step, fail) in &steps {
        let name = format!("at-{step}");
        fail(true);
        let (status, body) =
            call(&chorus, Method::POST, "/api/agents", json!({"name": name})).await;
        assert!(status >= 400, "{step}: {status} {body}");
        assert!(
            !chorus.agent_dir(&name).exists(),
            "a create that failed at {step} left its directory behind ({body})"
        );
        assert!(!active_names(&chorus).await.contains(&name), "{step}");
        fail(false);
        chorus.create_agent(&name).await?;
    }
    assert_eq!(active_names(&chorus).await.len(), steps.len());
    Ok(())
}

/// Makes deleting `dir` fail for real: a filesystem mounted inside it (rmdir of a
/// mount point is EBUSY, even for root). `Err` says why it cannot be done here.
fn undeletable(dir: &Path) -> Result<Tmpfs, String> {
    let disk = Tmpfs::mount(&dir.join("stuck"), "1m")?;
    std::fs::write(disk.path.join("file"), "x").map_err(|e| e.to_string())?;
    Ok(disk)
}

/// Destroy fails at each step: marking the row (the agent stays whole, its worker
/// running) and deleting the files (the agent is gone; its files are deleted by the
/// next start, or by the next create of its name, never reused half-deleted).
#[tokio::test]
async fn a_destroy_that_fails_at_any_step_is_finished_or_undone() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let chorus = Chorus::builder().sqlite().data_dir(&data).start().await?;
    let db = chorus.data_dir.join("chorus.db");
    if let Err(reason) = sqlite(&db, "SELECT 1") {
        println!("SKIPPED: {reason}");
        return Ok(());
    }
    for name in ["marked", "restarted", "recreated"] {
        chorus.create_agent(name).await?;
    }
    let pid = chorus
        .wait_worker_running("marked", Duration::from_secs(15))
        .await?;

    // Step 1: the row cannot be marked destroyed.
    sqlite(
        &db,
        "CREATE TRIGGER refuse BEFORE UPDATE OF status ON agents \
         BEGIN SELECT RAISE(ABORT, 'injected failure'); END;",
    )
    .unwrap();
    let (status, body) = call(&chorus, Method::DELETE, "/api/agents/marked", json!({})).await;
    assert_eq!(status, 500, "{body}");
    sqlite(&db, "DROP TRIGGER refuse;").unwrap();
    assert!(chorus.agent_dir("marked").join("workspace").is_dir());
    assert_eq!(chorus.agent("marked").await?["status"], "active");
    let new_pid = chorus
        .wait_worker_running("marked", Duration::from_secs(15))
        .await?;
    assert_ne!(pid, new_pid, "the worker was stopped, then started again");

    // Step 2: the files cannot all be deleted.
    let mut stuck = Vec::new();
    for name in ["restarted", "recreated"] {
        match undeletable(&chorus.agent_dir(name).join("workspace")) {
            Ok(disk) => stuck.push(disk),
            Err(reason) => {
                println!("SKIPPED the file-deletion step: {reason}");
                return Ok(());
            }
        }
        let (status, body) = call(
            &chorus,
            Method::DELETE,
            &format!("/api/agents/{name}"),
            json!({}),
        )
        .await;
        assert_eq!(status, 500, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("is destroyed") && message.contains("next start"),
            "{message}"
        );
    }
    assert_eq!(active_names(&chorus).await, ["marked"]);
    for disk in &stuck {
        disk.unmount();
    }
    // The next create of a name deletes what is left before it starts afresh.
    chorus.create_agent("recreated").await?;
    assert!(
        !chorus
            .agent_dir("recreated")
            .join("workspace/stuck")
            .exists(),
        "the new agent got the old agent's leftover files"
    );
    // The next start deletes what is left of the other one.
    chorus.stop().await?;
    let chorus = Chorus::builder().sqlite().data_dir(&data).start().await?;
    assert!(
        !chorus.agent_dir("restarted").exists(),
        "the destroyed agent's files survived the restart"
    );
    assert_eq!(active_names(&chorus).await, ["marked", "recreated"]);
    Ok(())
}

/// An active agent whose directory has gone (deleted by hand, or by a destroy of an
/// older chorus that did not finish) is not started with no workspace: the next
/// start marks it destroyed and says why.
#[tokio::test]
async fn an_active_agent_whose_directory_is_gone_is_marked_destroyed_at_start() -> anyhow::Result<()>
{
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    let chorus = Chorus::builder().data_dir(&data).start().await?;
    chorus.create_agent("lost").await?;
    chorus.create_agent("kept").await?;
    let lost_dir = chorus.agent_dir("lost");
    chorus.stop().await?;
    std::fs::remove_dir_all(&lost_dir)?;

    let chorus = Chorus::builder().data_dir(&data).start().await?;
    assert_eq!(active_names(&chorus).await, ["kept"]);
    assert!(
        chorus.output().contains("was missing at start-up"),
        "the log does not say why"
    );
    chorus.create_agent("lost").await?;
    chorus
        .wait_worker_running("lost", Duration::from_secs(15))
        .await?;
    Ok(())
}

/// What chorus creates in its data directory is private, even when the directory
/// was made world-readable and the umask lets group and others read.
#[tokio::test]
async fn the_data_directory_is_private_whatever_the_umask() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // nextest runs each test in its own process, so this umask is this test's alone.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let tmp = tempfile::tempdir()?;
    let data = tmp.path().join("data");
    std::fs::create_dir(&data)?;
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755))?;
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        // The database file itself is under test.
        .sqlite()
        .data_dir(&data)
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .start()
        .await?;
    chorus.create_agent("private").await?;
    let models = data.join("available_models.json");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while !models.exists() {
        assert!(tokio::time::Instant::now() < deadline, "no {models:?}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let mode = |name: &str| {
        std::fs::metadata(data.join(name))
            .unwrap_or_else(|e| panic!("{name}: {e}"))
            .permissions()
            .mode()
            & 0o777
    };
    let modes: Vec<(&str, String)> = [
        "chorus.db",
        "chorus.db-wal",
        "chorus.db-shm",
        "available_models.json",
        "agents",
        "agents/private",
    ]
    .into_iter()
    .map(|name| (name, format!("{:o}", mode(name))))
    .collect();
    let expected = vec![
        ("chorus.db", "600"),
        ("chorus.db-wal", "600"),
        ("chorus.db-shm", "600"),
        ("available_models.json", "600"),
        ("agents", "700"),
        ("agents/private", "700"),
    ];
    let expected: Vec<(&str, String)> = expected
        .into_iter()
        .map(|(name, mode)| (name, mode.to_string()))
        .collect();
    assert_eq!(modes, expected);
    Ok(())
}

/// A run of 40 model calls: `view` until 39 results are in, then an answer. Each
/// call id is new, so each message can be found again by it.
fn forty_calls(body: &Value) -> chorus_test_support::Reply {
    let results = body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] == "tool").count())
        .unwrap_or(0);
    if results >= 39 {
        text("Done.")
    } else {
        chorus_test_support::fake_model::tool_call(
            &format!("v{results}"),
            "view",
            json!({"path": ".gitkeep"}),
        )
    }
}

/// What identifies a feed event's row in the thread view after a restart.
fn seen_key(kind: &str, data: &Value) -> Option<String> {
    let thread = format!(
        "{}/{}",
        data["agent"].as_str()?,
        data["thread_id"].as_u64()?
    );
    Some(match kind {
        "step_started" => format!("{thread} step {}", data["number"]),
        "step_ended" => format!(
            "{thread} step {} ended {}",
            data["number"], data["duration_ms"]
        ),
        "message" => format!("{thread} {}", message_key(data)),
        _ => return None,
    })
}

fn message_key(message: &Value) -> String {
    match message["role"].as_str() {
        Some("tool") => format!("result {}", message["tool_call_id"]),
        Some("assistant") if message["tool_calls"].is_array() => {
            format!("call {}", message["tool_calls"][0]["id"])
        }
        role => format!("{} {}", role.unwrap_or("?"), message["content"]),
    }
}

/// What a thread view shows, as the keys `seen_key` gives its events.
fn stored_keys(agent: &str, thread: &Value) -> Vec<String> {
    let prefix = format!("{agent}/{}", thread["id"]);
    let mut keys = Vec::new();
    for step in thread["steps"].as_array().into_iter().flatten() {
        keys.push(format!("{prefix} step {}", step["number"]));
        if !step["ended_at"].is_null() {
            keys.push(format!(
                "{prefix} step {} ended {}",
                step["number"], step["duration_ms"]
            ));
        }
    }
    for message in thread["messages"].as_array().into_iter().flatten() {
        keys.push(format!("{prefix} {}", message_key(message)));
    }
    keys
}

/// The durability contract (ARCHITECTURE.md, *Storage*): an event a client was
/// shown is in the database. Chorus is SIGKILLed in the middle of a burst of runs
/// on two agents; after a restart, every step and message the live feed showed
/// before the kill is in its thread.
#[tokio::test]
async fn every_event_the_feed_showed_survives_a_sigkill_during_a_burst() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(forty_calls);
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("data");
    let start = || {
        Chorus::builder()
            .openai_fake(&model)
            .data_dir(&data)
            .config("[threads]\ntitles = false\n")
            .start()
    };
    let chorus = start().await?;
    let agents = ["burst-a", "burst-b"];
    for agent in agents {
        chorus
            .create_agent_with(json!({"name": agent, "permissions": "open"}))
            .await?;
        chorus
            .wait_worker_running(agent, Duration::from_secs(30))
            .await?;
    }
    let mut feed = chorus.open_events("", None).await?;
    for i in 0..8 {
        chorus.send_message(agents[i % 2], "go").await?;
    }
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen.len() < 200 {
        let event = tokio::time::timeout_at(deadline, feed.next())
            .await
            .map_err(|_| anyhow::anyhow!("only {} events within 60 s", seen.len()))??;
        let Some((kind, data)) = event else {
            anyhow::bail!("the feed ended after {} events", seen.len());
        };
        seen.extend(seen_key(&kind, &data));
    }
    chorus.kill().await?;
    // What was already on its way to the client before the kill counts as shown.
    while let Ok(Some((kind, data))) = feed.next().await {
        seen.extend(seen_key(&kind, &data));
    }

    let chorus = start().await?;
    let mut stored = std::collections::HashSet::new();
    for agent in agents {
        let threads: Value = chorus
            .api(
                Method::GET,
                &format!("/api/agents/{agent}/threads?all=true"),
            )
            .send()
            .await?
            .json()
            .await?;
        for listed in threads.as_array().into_iter().flatten() {
            let id = listed["id"].as_u64().expect("thread id");
            stored.extend(stored_keys(agent, &chorus.thread(agent, id).await?));
        }
    }
    let missing: Vec<_> = seen.iter().filter(|key| !stored.contains(*key)).collect();
    assert!(
        missing.is_empty(),
        "{} of {} events shown before the kill are not stored: {:?}",
        missing.len(),
        seen.len(),
        &missing[..missing.len().min(10)]
    );
    Ok(())
}

/// Whatever write of an agent's create runs out of room (the template's files,
/// `git init`, `git add`, `git commit`, or the database), the answer is the same
/// 507 `disk_full` and nothing is left half-made; git does not always say why it
/// failed, so the create is tried with every amount of room from none to 96 KiB.
#[tokio::test]
async fn a_create_that_runs_out_of_room_anywhere_is_a_507_and_leaves_nothing() -> anyhow::Result<()>
{
    let tmp = tempfile::tempdir()?;
    let disk = match Tmpfs::mount(&tmp.path().join("disk"), "16m") {
        Ok(disk) => disk,
        Err(reason) => {
            println!("SKIPPED: cannot mount a small filesystem here ({reason})");
            return Ok(());
        }
    };
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&disk.path.join("data"))
        .start()
        .await?;
    let mut outcomes = Vec::new();
    for free_kib in (0..=96u64).step_by(4) {
        let filler = fill_disk(&disk.path);
        let full = std::fs::metadata(&filler)?.len();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&filler)?
            .set_len(full.saturating_sub(free_kib * 1024))?;
        let name = format!("a{free_kib}");
        let (status, body) =
            call(&chorus, Method::POST, "/api/agents", json!({"name": name})).await;
        std::fs::remove_file(&filler)?;
        match status {
            201 => outcomes.push(format!("{free_kib} KiB: created")),
            _ => {
                assert!(
                    is_disk_full(status, &body),
                    "{free_kib} KiB free: {status} {body}"
                );
                assert!(
                    !chorus.agent_dir(&name).exists(),
                    "{free_kib} KiB free: a create that failed left its directory behind"
                );
                let message = body["error"]["message"].as_str().unwrap_or_default();
                let place = if message.contains("git ") {
                    "git"
                } else {
                    "a file or the store"
                };
                outcomes.push(format!("{free_kib} KiB: 507 in {place}"));
            }
        }
    }
    println!("{outcomes:#?}");
    assert!(
        outcomes.iter().any(|o| o.ends_with("507 in git")),
        "no create ran out of room inside git: {outcomes:#?}"
    );
    // With room again, creating works at once.
    chorus.create_agent("after").await?;
    drop(chorus);
    disk.unmount();
    Ok(())
}
