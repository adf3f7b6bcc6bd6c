//! Background jobs (called tasks before, and still on the old API path) through the
//! binaries: started by bash with run_in_background, outliving their call and their
//! thread, read and stopped by the agent, listed over the API, and never outliving
//! their worker.

use std::time::Duration;

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, process};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::{Value, json};

async fn tasks(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let listed: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/tasks"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    Ok(listed["tasks"].as_array().cloned().unwrap_or_default())
}

async fn wait_for_task(chorus: &Chorus, agent: &str, status: &str) -> anyhow::Result<Vec<Value>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let listed = tasks(chorus, agent).await?;
        if listed.first().is_some_and(|t| t["status"] == status) {
            return Ok(listed);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no task {status}: {listed:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn tool_results(thread: &Value) -> Vec<String> {
    thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

async fn open_agent(model: &FakeModel, name: &str) -> anyhow::Result<Chorus> {
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": name, "permissions": "open"}))
        .send()
        .await?;
    anyhow::ensure!(created.status() == 201, "create: {}", created.status());
    Ok(chorus)
}

#[tokio::test]
async fn a_background_task_outlives_its_thread_and_is_read_and_stopped_later() -> anyhow::Result<()>
{
    let marker = format!("300.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("echo serving; sleep {marker}"), "run_in_background": true}),
    ));
    model.push(text("the server is up"));
    let chorus = open_agent(&model, "devops").await?;
    let mut feed = chorus.open_events("?agent=devops", None).await?;

    let first = chorus.send_message("devops", "start the server").await?;
    let thread = chorus
        .wait_thread_finished("devops", first, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(
        tool_results(&thread)[0].starts_with("Started background task 1 (pid "),
        "{thread:#}"
    );
    let listed = wait_for_task(&chorus, "devops", "running").await?;
    assert_eq!(listed[0]["id"], 1);
    assert_eq!(
        listed[0]["command"],
        format!("echo serving; sleep {marker}")
    );
    let pid = listed[0]["pid"].as_u64().unwrap() as u32;
    assert!(process::is_alive(pid), "the task runs on after its thread");

    // A later thread reads it and stops it.
    model.push(tool_call(
        "c2",
        "task_output",
        json!({"task_id": 1, "wait": 0.5}),
    ));
    model.push(tool_call("c3", "task_stop", json!({"task_id": 1})));
    model.push(text("stopped it"));
    let second = chorus.send_message("devops", "check and stop it").await?;
    let thread = chorus
        .wait_thread_finished("devops", second, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(results[0].starts_with("task 1 is running"), "{results:?}");
    assert!(results[0].ends_with("serving\n"), "{results:?}");
    assert!(results[1].starts_with("task 1 stopped"), "{results:?}");
    let listed = wait_for_task(&chorus, "devops", "stopped").await?;
    assert!(
        listed[0]["ended_at"].is_string() && listed[0]["detail"].is_string(),
        "{listed:?}"
    );
    assert!(
        process::wait_gone(pid, Duration::from_secs(5)).await,
        "the task's shell is gone"
    );
    // The live feed told its end once, as a notification.
    let told = tokio::time::timeout(Duration::from_secs(10), async {
        while let Some((kind, data)) = feed.next().await? {
            if kind == "notification" {
                return anyhow::Ok(data);
            }
        }
        anyhow::bail!("the feed ended")
    })
    .await??;
    assert_eq!(told["kind"], "job_ended", "{told:#}");
    assert_eq!(
        (told["task_id"].as_u64(), told["status"].as_str()),
        (Some(1), Some("stopped"))
    );
    assert!(
        told["text"]
            .as_str()
            .unwrap()
            .starts_with("Background task 1 (echo serving;"),
        "{told:#}"
    );

    // Destroying the agent stops the tasks still running.
    let last = format!("301.{}{}", std::process::id(), line!());
    model.push(tool_call(
        "c4",
        "bash",
        json!({"command": format!("sleep {last}"), "run_in_background": true}),
    ));
    model.push(text("again"));
    let third = chorus.send_message("devops", "start another").await?;
    chorus
        .wait_thread_finished("devops", third, Duration::from_secs(20))
        .await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while process::with_marker(&last).is_empty() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    chorus
        .api(Method::DELETE, "/api/agents/devops?keep_files=false")
        .send()
        .await?
        .error_for_status()?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !process::with_marker(&last).is_empty() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "a task outlived its destroyed agent"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

#[tokio::test]
async fn background_tasks_die_with_their_worker() -> anyhow::Result<()> {
    let marker = format!("300.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    // A task whose shell starts a grandchild: the whole group must go.
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker} & sleep {marker}"), "run_in_background": true}),
    ));
    model.push(text("started"));
    let chorus = open_agent(&model, "builder").await?;
    let worker = chorus
        .wait_worker_running("builder", Duration::from_secs(15))
        .await?;
    let id = chorus
        .send_message("builder", "build in the background")
        .await?;
    chorus
        .wait_thread_finished("builder", id, Duration::from_secs(20))
        .await?;
    let running = wait_for_task(&chorus, "builder", "running").await?;
    // Its shell is the worker's child: the control plane verified the reported pid.
    assert_eq!(running[0]["verified"], true, "{running:?}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while process::with_marker(&marker).len() < 2 {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the task never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    process::signal(worker, Signal::SIGKILL);
    let listed = wait_for_task(&chorus, "builder", "lost").await?;
    assert!(
        listed[0]["detail"]
            .as_str()
            .unwrap()
            .contains("worker ended"),
        "{listed:?}"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !process::with_marker(&marker).is_empty() {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "task processes outlived their worker: {:?}",
            process::with_marker(&marker)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Tasks are keyed by worker generation; generations continue across restarts of the
/// control plane, so a task started after a restart is recorded beside the old one.
#[tokio::test]
async fn tasks_started_before_and_after_a_restart_are_both_recorded() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let start_task = |model: &FakeModel, marker: &str| {
        model.push(tool_call(
            "c1",
            "bash",
            json!({"command": format!("sleep {marker}"), "run_in_background": true}),
        ));
        model.push(text("started"));
    };
    let data = tempfile::tempdir()?;
    let builder = || {
        Chorus::builder()
            .data_dir(data.path())
            .env("OPENAI_BASE_URL", &model.base_url())
            .env("OPENAI_API_KEY", "sk-test")
            .env("CHORUS_DEFAULT_MODEL", "fake-model")
    };
    let chorus = builder().start().await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "ops", "permissions": "open"}))
        .send()
        .await?;
    anyhow::ensure!(created.status() == 201, "create: {}", created.status());
    start_task(&model, &format!("301.{}{}", std::process::id(), line!()));
    let id = chorus.send_message("ops", "start one").await?;
    chorus
        .wait_thread_finished("ops", id, Duration::from_secs(20))
        .await?;
    wait_for_task(&chorus, "ops", "running").await?;
    chorus.stop().await?;

    let chorus = builder().start().await?;
    start_task(&model, &format!("302.{}{}", std::process::id(), line!()));
    let id = chorus.send_message("ops", "start another").await?;
    let thread = chorus
        .wait_thread_finished("ops", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let listed = wait_for_task(&chorus, "ops", "running").await?;
    let statuses: Vec<&str> = listed.iter().filter_map(|t| t["status"].as_str()).collect();
    // The old one was stopped with its worker (or lost, if the worker went first).
    assert!(
        statuses.len() == 2
            && statuses[0] == "running"
            && (statuses[1] == "stopped" || statuses[1] == "lost"),
        "{listed:#?}"
    );
    assert!(
        !chorus.output().contains("cannot record a background task"),
        "{}",
        chorus.output()
    );
    Ok(())
}

/// `GET /api/agents/{name}/jobs` answers `{"jobs": [...]}`; the path from before jobs
/// had their name answers the same list as `{"tasks": [...]}`, and both refuse an
/// unknown agent alike.
#[tokio::test]
async fn the_jobs_path_and_the_old_tasks_path_answer_the_same() -> anyhow::Result<()> {
    let marker = format!("303.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}"), "run_in_background": true}),
    ));
    model.push(tool_call(
        "c2",
        "bash",
        json!({"command": "exit 3", "run_in_background": true}),
    ));
    model.push(text("both started"));
    let chorus = open_agent(&model, "ops").await?;
    let id = chorus.send_message("ops", "start two").await?;
    chorus
        .wait_thread_finished("ops", id, Duration::from_secs(20))
        .await?;
    // Wait until neither will change: one runs on, the other has failed.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        let listed = tasks(&chorus, "ops").await?;
        let statuses: Vec<&str> = listed.iter().filter_map(|t| t["status"].as_str()).collect();
        if statuses == ["running", "failed"] {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "not one running and one failed: {listed:#?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let get = |path: String| {
        let chorus = &chorus;
        async move {
            let response = chorus.api(Method::GET, &path).send().await?;
            let status = response.status();
            let body: Value = response.json().await?;
            anyhow::Ok((status, body))
        }
    };
    let (status, jobs) = get("/api/agents/ops/jobs".into()).await?;
    assert_eq!(status, 200, "{jobs:#}");
    let (status, tasks) = get("/api/agents/ops/tasks".into()).await?;
    assert_eq!(status, 200, "{tasks:#}");
    let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
    assert_eq!(keys(&jobs), ["jobs"]);
    assert_eq!(keys(&tasks), ["tasks"]);
    assert_eq!(jobs["jobs"], tasks["tasks"]);
    let listed = jobs["jobs"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{jobs:#}");
    assert_eq!(listed[0]["command"], format!("sleep {marker}"));
    assert_eq!(
        (
            listed[1]["command"].as_str(),
            listed[1]["exit_code"].as_i64()
        ),
        (Some("exit 3"), Some(3)),
        "{jobs:#}"
    );

    let (status, jobs) = get("/api/agents/ghost/jobs".into()).await?;
    let (old_status, tasks) = get("/api/agents/ghost/tasks".into()).await?;
    assert_eq!((status.as_u16(), old_status.as_u16()), (404, 404));
    assert_eq!(jobs, tasks);
    Ok(())
}
