//! No tool process outlives its owner, through the binaries: a foreground bash call
//! with a grandchild and a background task are running when the worker is killed,
//! stopped (hung) or the control plane is killed; within a deadline none of their
//! processes exists. And a worker that never attaches is killed, and its thread
//! fails with the reason instead of waiting forever.

use std::path::Path;
use std::time::{Duration, Instant};

use chorus_test_support::chorus::ChorusBuilder;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, process};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::json;

/// How long the tool processes may take to be gone after their owner is.
const GONE_WITHIN: Duration = Duration::from_secs(10);

fn builder(model: &FakeModel) -> ChorusBuilder {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
}

/// A unique `sleep` argument for this test (the processes are found by it).
fn marker(line: u32) -> String {
    format!("300.{}{line}", std::process::id())
}

/// Scripts a background task and then a foreground bash call, each with a grandchild,
/// sends the message, and waits until all of their processes run. Returns the worker's
/// pid.
async fn start_tool_processes(
    chorus: &Chorus,
    model: &FakeModel,
    marker: &str,
) -> anyhow::Result<u32> {
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "digger", "permissions": "open"}))
        .send()
        .await?;
    anyhow::ensure!(created.status() == 201, "create: {}", created.status());
    let worker = chorus
        .wait_worker_running("digger", Duration::from_secs(15))
        .await?;
    let grandchild = format!("sh -c 'sleep {marker} & sleep {marker}'");
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": grandchild, "run_in_background": true}),
    ));
    model.push(tool_call("c2", "bash", json!({"command": grandchild})));
    chorus.send_message("digger", "dig").await?;
    // Each call: its shell (whose command line names the marker), sh, two sleeps.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let sleeps = sleeps(marker);
        if sleeps.len() >= 4 {
            return Ok(worker);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the tool processes never all ran: {sleeps:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The live `sleep <marker>` processes.
fn sleeps(marker: &str) -> Vec<u32> {
    process::with_marker(marker)
        .into_iter()
        .filter(|pid| {
            process::cmdline(*pid)
                .first()
                .is_some_and(|c| c.ends_with("sleep"))
        })
        .collect()
}

/// Waits until no process carries `marker`; returns how long that took.
async fn wait_all_gone(marker: &str, since: Instant) -> anyhow::Result<Duration> {
    loop {
        let left = process::with_marker(marker);
        if left.is_empty() {
            return Ok(since.elapsed());
        }
        anyhow::ensure!(
            since.elapsed() < GONE_WITHIN,
            "tool processes outlived their owner by {GONE_WITHIN:?}: {:?}",
            left.iter()
                .map(|p| (*p, process::cmdline(*p).join(" ")))
                .collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn tool_processes_die_with_a_killed_worker() -> anyhow::Result<()> {
    let marker = marker(line!());
    let model = FakeOpenAi::start().await;
    let chorus = builder(&model).start().await?;
    let worker = start_tool_processes(&chorus, &model, &marker).await?;

    process::signal(worker, Signal::SIGKILL);
    let took = wait_all_gone(&marker, Instant::now()).await?;
    eprintln!("last tool process gone {took:?} after the worker's SIGKILL");
    Ok(())
}

#[tokio::test]
async fn tool_processes_die_with_a_hung_worker() -> anyhow::Result<()> {
    let marker = marker(line!());
    let model = FakeOpenAi::start().await;
    let chorus = builder(&model)
        .config("[workers]\nheartbeat_interval_ms = 500\n")
        .start()
        .await?;
    let worker = start_tool_processes(&chorus, &model, &marker).await?;

    process::signal(worker, Signal::SIGSTOP);
    let took = wait_all_gone(&marker, Instant::now()).await?;
    eprintln!("last tool process gone {took:?} after the worker's SIGSTOP");
    assert!(process::wait_gone(worker, Duration::from_secs(5)).await);
    Ok(())
}

#[tokio::test]
async fn a_restarted_control_plane_ends_what_a_killed_one_left() -> anyhow::Result<()> {
    let marker = marker(line!());
    let model = FakeOpenAi::start().await;
    let temp = tempfile::tempdir()?;
    let data: &Path = &temp.path().join("data");
    let chorus = builder(&model).data_dir(data).start().await?;
    start_tool_processes(&chorus, &model, &marker).await?;
    // The resumed run: the model learns its command was interrupted, and stops.
    model.push(text("the command was interrupted; stopping here"));

    let killed = Instant::now();
    chorus.kill().await?;
    let next = builder(&model).data_dir(data).start().await?;
    let took = wait_all_gone(&marker, killed).await?;
    eprintln!(
        "last tool process gone {took:?} after the control plane's SIGKILL (restart included)"
    );
    // The thread the killed control plane left running goes on (durable runs): the
    // command that was running is not run again; the model hears it was interrupted.
    let thread = next
        .wait_thread_finished("digger", 1, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let requests = model.requests();
    assert_eq!(
        requests.len(),
        3,
        "one more model call, no command run again"
    );
    let last = requests[2].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(last["role"], "tool", "{last:#}");
    assert!(
        last["content"].as_str().unwrap().contains("interrupted"),
        "{last:#}"
    );
    // Step numbers go on without a gap or a repeat.
    let numbers: Vec<u64> = thread["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "{thread:#}"
    );
    Ok(())
}

/// Children of `pid` that are zombies (exited, never reaped).
fn zombie_children(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            std::fs::read_to_string(format!("/proc/{child}/stat")).is_ok_and(|stat| {
                let mut fields = stat.rsplit(')').next().unwrap_or("").split_whitespace();
                fields.next() == Some("Z") && fields.next() == Some(&pid.to_string())
            })
        })
        .collect()
}

#[tokio::test]
async fn a_process_that_leaves_its_group_is_ended_by_the_worker() -> anyhow::Result<()> {
    let marker = marker(line!());
    let model = FakeOpenAi::start().await;
    let chorus = builder(&model).start().await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "leaver", "permissions": "open"}))
        .send()
        .await?;
    anyhow::ensure!(created.status() == 201, "create: {}", created.status());
    let worker = chorus
        .wait_worker_running("leaver", Duration::from_secs(15))
        .await?;
    // setsid: a session and group of its own, beyond the call's group kill.
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("setsid sleep {marker} > /dev/null 2>&1 < /dev/null & echo started")}),
    ));
    model.push(chorus_test_support::fake_model::text("done"));
    let id = chorus.send_message("leaver", "escape").await?;
    let thread = chorus
        .wait_thread_finished("leaver", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let took = wait_all_gone(&marker, Instant::now()).await?;
    eprintln!("the escaped process was gone {took:?} after its call ended");
    let deadline = Instant::now() + Duration::from_secs(5);
    while !zombie_children(worker).is_empty() {
        anyhow::ensure!(
            Instant::now() < deadline,
            "the worker does not reap what it adopted: {:?}",
            zombie_children(worker)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(process::is_alive(worker), "the worker itself is fine");
    Ok(())
}

#[tokio::test]
async fn a_worker_that_never_attaches_is_killed_and_its_thread_fails_with_the_reason()
-> anyhow::Result<()> {
    let marker = marker(line!());
    let temp = tempfile::tempdir()?;
    // Takes the credential and then hangs, never dialling.
    let script = temp.path().join("silent-worker");
    std::fs::write(
        &script,
        format!("#!/bin/sh\nread credential\nsleep {marker}\n"),
    )?;
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
    let chorus = Chorus::builder()
        .env("CHORUS_WORKER_BIN", script.to_str().unwrap())
        .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
        .env("CHORUS_DEFAULT_MODEL", "openai/m")
        .config("[workers]\nattach_timeout_ms = 500\nrestart_backoff_ms = 100\n")
        .start()
        .await?;
    chorus.create_agent("mute").await?;
    let sent = Instant::now();
    let id = chorus.send_message("mute", "hello?").await?;
    let thread = chorus
        .wait_thread_finished("mute", id, Duration::from_secs(20))
        .await?;
    eprintln!("the thread failed {:?} after it was sent", sent.elapsed());
    assert_eq!(thread["status"], "failed");
    let error = thread["error"].as_str().unwrap();
    assert!(
        error.contains("did not attach within the attach deadline of 0.5 s")
            && error.contains("3 launch(es) in a row"),
        "{error}"
    );
    // Each hung launch was killed: alive at most the last (dying) and the next one.
    assert!(
        process::with_marker(&marker).len() <= 2,
        "hung workers were left behind: {:?}",
        process::with_marker(&marker)
    );
    let worker = chorus.agent("mute").await?["worker"].clone();
    assert!(
        worker["last_exit"]
            .as_str()
            .is_some_and(|e| e.contains("attach deadline")),
        "{worker}"
    );
    chorus.stop().await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !process::with_marker(&marker).is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "a hung worker outlived chorus");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
