//! Worker processes: crash and restart, credentials, and no orphans in any path.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Hold, bin_path, process};
use nix::sys::signal::Signal;
use serde_json::json;

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

#[tokio::test]
async fn a_worker_killed_mid_run_is_replaced_and_the_thread_resumes_on_the_new_one()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    // Turn 1 writes a file; turn 2 hangs, so the run is in flight when the worker dies.
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "before.txt", "content": "1"}),
    ));
    model.push(Reply::Delayed(
        Duration::from_secs(60),
        Box::new(text("too late")),
    ));
    // The resumed run makes the hung call again.
    model.push(text("finished after the crash"));
    let chorus = chorus_with(&model).await?;
    chorus.create_agent("fragile").await?;
    let first_pid = chorus
        .wait_worker_running("fragile", Duration::from_secs(15))
        .await?;

    let id = chorus.send_message("fragile", "take your time").await?;
    assert_eq!(
        model
            .wait_for_requests(2, Duration::from_secs(15))
            .await
            .len(),
        2
    );
    let mut feed = chorus.open_thread_events("fragile", id).await?;
    process::signal(first_pid, Signal::SIGKILL);
    let killed_at = Instant::now();
    let thread = chorus
        .wait_thread_finished("fragile", id, Duration::from_secs(30))
        .await?;
    eprintln!(
        "thread resumed and finished {:?} after the worker's SIGKILL",
        killed_at.elapsed()
    );
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let events = tokio::time::timeout(Duration::from_secs(5), feed.rest()).await??;
    let resumed = events
        .iter()
        .find(|(kind, data)| kind == "status" && data["resumed"] == 2)
        .unwrap_or_else(|| panic!("no resumption on the feed: {events:#?}"));
    let reason = resumed.1["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("pid {first_pid}")) && reason.contains("SIGKILL"),
        "{reason}"
    );
    // The resumed call carried everything stored: the first turn and its result.
    let requests = model.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(
        requests[2].body["messages"], requests[1].body["messages"],
        "the new worker sent the same conversation again"
    );
    // Steps: the interrupted call was closed as failed; numbers go on without a
    // gap or a repeat, and one thread holds the whole history.
    let steps = thread["steps"].as_array().unwrap();
    let numbers: Vec<u64> = steps
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(
        numbers,
        (1..=numbers.len() as u64).collect::<Vec<_>>(),
        "{thread:#}"
    );
    assert!(
        steps.iter().all(|s| s["ended_at"].is_string()),
        "{thread:#}"
    );
    assert_eq!(steps[2]["failed"], true, "the interrupted call: {thread:#}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("fragile").join("workspace/before.txt"))?,
        "1"
    );

    // A new worker takes over and the next message works.
    let second_pid = chorus
        .wait_worker_running("fragile", Duration::from_secs(10))
        .await?;
    assert_ne!(second_pid, first_pid);
    let agent = chorus.agent("fragile").await?;
    assert_eq!(agent["worker"]["restarts"], 1);
    assert!(
        agent["worker"]["last_exit"]
            .as_str()
            .unwrap()
            .contains("SIGKILL")
    );
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "after.txt", "content": "ok"}),
    ));
    model.push(text("done"));
    let next = chorus.send_message("fragile", "again, quickly").await?;
    let thread = chorus
        .wait_thread_finished("fragile", next, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("fragile").join("workspace/after.txt"))?,
        "ok"
    );
    Ok(())
}

#[tokio::test]
async fn a_hung_worker_is_noticed_by_its_silence_killed_and_replaced() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let hold = Hold::new();
    model.push(Reply::Held(hold.clone(), Box::new(text("too late"))));
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[workers]\nheartbeat_interval_ms = 1000\n")
        .start()
        .await?;
    chorus.create_agent("stuck").await?;
    let hung_pid = chorus
        .wait_worker_running("stuck", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("stuck", "think hard").await?;
    model.wait_for_requests(1, Duration::from_secs(10)).await;
    // The resumed run asks again and gets this.
    model.push(text("thought it over"));

    // A stopped process keeps its socket open but says nothing: hung, not dead.
    let mut feed = chorus.open_thread_events("stuck", id).await?;
    process::signal(hung_pid, Signal::SIGSTOP);
    let stopped_at = Instant::now();
    let thread = chorus
        .wait_thread_finished("stuck", id, Duration::from_secs(30))
        .await?;
    eprintln!(
        "hung worker noticed and the thread resumed after {:?}",
        stopped_at.elapsed()
    );
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let events = tokio::time::timeout(Duration::from_secs(5), feed.rest()).await??;
    let (_, resumed) = events
        .iter()
        .find(|(kind, data)| kind == "status" && data["resumed"] == 2)
        .unwrap_or_else(|| panic!("no resumption on the feed: {events:#?}"));
    let reason = resumed["reason"].as_str().unwrap();
    assert!(
        reason.contains(&format!("pid {hung_pid}")) && reason.contains("stopped responding"),
        "{reason}"
    );
    assert!(
        process::wait_gone(hung_pid, Duration::from_secs(5)).await,
        "the hung worker is killed, not left behind"
    );

    let next_pid = chorus
        .wait_worker_running("stuck", Duration::from_secs(10))
        .await?;
    assert_ne!(next_pid, hung_pid);
    hold.release();
    model.push(text("back to work"));
    let next = chorus.send_message("stuck", "again").await?;
    let thread = chorus
        .wait_thread_finished("stuck", next, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    // A busy but healthy worker is not mistaken for a hung one: its heartbeats go on
    // while a model call takes longer than the silence limit (3 s here).
    let slow = Hold::new();
    model.push(Reply::Held(slow.clone(), Box::new(text("slow but fine"))));
    let patient = chorus.send_message("stuck", "take your time").await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    slow.release();
    let thread = chorus
        .wait_thread_finished("stuck", patient, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(chorus.agent("stuck").await?["worker"]["pid"], next_pid);
    Ok(())
}

/// A worker binary that records the credential it is handed (as a leak would) and
/// then runs the real worker with it.
fn credential_capturing_worker(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    let script = dir.join("capturing-worker.sh");
    let capture = dir.join("credentials");
    std::fs::create_dir_all(&capture)?;
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\nread -r credential\nagent=''\nprev=''\nfor a in \"$@\"; do\n  \
             if [ \"$prev\" = --agent ]; then agent=\"$a\"; fi\n  prev=\"$a\"\ndone\n\
             printf '%s' \"$credential\" > '{capture}'/\"$agent\"\n\
             exec '{worker}' \"$@\" <<< \"$credential\"\n",
            capture = capture.display(),
            worker = bin_path("chorus-worker").display(),
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}

#[tokio::test]
async fn a_worker_cannot_speak_for_another_agent() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let script = credential_capturing_worker(tmp.path())?;
    let chorus = Chorus::builder()
        .env("CHORUS_WORKER_BIN", script.to_str().unwrap())
        .start()
        .await?;
    chorus.create_agent("alpha").await?;
    chorus.create_agent("beta").await?;
    let alpha_pid = chorus
        .wait_worker_running("alpha", Duration::from_secs(15))
        .await?;
    chorus
        .wait_worker_running("beta", Duration::from_secs(15))
        .await?;
    let beta_credential = std::fs::read_to_string(tmp.path().join("credentials/beta"))?;
    assert_eq!(beta_credential.len(), 64);

    // The credential was handed over on stdin, not where other processes can read it.
    let beta_pid = chorus.agent("beta").await?["worker"]["pid"]
        .as_u64()
        .unwrap() as u32;
    assert!(
        !process::environ(beta_pid)
            .join(" ")
            .contains(&beta_credential)
    );
    assert!(
        !process::cmdline(beta_pid)
            .join(" ")
            .contains(&beta_credential)
    );

    let rogue = |agent: &str, credential: &str| {
        std::process::Command::new(bin_path("chorus-worker"))
            .args([
                "--control-plane",
                &chorus.grpc_url,
                "--agent",
                agent,
                "--data-dir",
                &chorus.data_dir.to_string_lossy(),
                "--dial-timeout-secs",
                "5",
            ])
            .env("CHORUS_WORKER_CREDENTIAL", credential)
            .output()
    };
    // beta's credential does not open a stream for alpha.
    let output = rogue("alpha", &beta_credential)?;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("refused"), "{stderr}");
    assert!(stderr.contains("not valid for agent 'alpha'"), "{stderr}");
    // Nor a second stream for beta while beta's worker holds it.
    let output = rogue("beta", &beta_credential)?;
    assert_eq!(
        output.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // A made-up credential gets nowhere either.
    let output = rogue("alpha", &"0".repeat(64))?;
    assert_eq!(output.status.code(), Some(3));

    // The model relay wants a current worker credential too.
    let relay = reqwest::Client::new();
    let status = relay
        .post(format!("{}/llm/openai/chat/completions", chorus.grpc_url))
        .json(&json!({}))
        .send()
        .await?
        .status();
    assert_eq!(status, 401);

    // The real workers are untouched.
    assert_eq!(
        chorus
            .wait_worker_running("alpha", Duration::from_secs(5))
            .await?,
        alpha_pid
    );
    assert_eq!(chorus.agent("alpha").await?["worker"]["restarts"], 0);
    Ok(())
}

#[tokio::test]
async fn stopping_chorus_stops_every_worker() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("one").await?;
    chorus.create_agent("two").await?;
    let pids = [
        chorus
            .wait_worker_running("one", Duration::from_secs(15))
            .await?,
        chorus
            .wait_worker_running("two", Duration::from_secs(15))
            .await?,
    ];
    let status = chorus.stop().await?;
    assert!(status.success(), "chorus exited with {status}");
    for pid in pids {
        assert!(
            process::wait_gone(pid, Duration::from_secs(5)).await,
            "worker {pid} outlived chorus"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_crashed_chorus_leaves_no_worker_behind() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("orphan").await?;
    let pid = chorus
        .wait_worker_running("orphan", Duration::from_secs(15))
        .await?;
    chorus.kill().await?;
    assert!(
        process::wait_gone(pid, Duration::from_secs(5)).await,
        "worker {pid} was orphaned"
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_that_cannot_start_fails_the_thread_instead_of_hanging_it() -> anyhow::Result<()> {
    for (worker_bin, expected) in [
        ("/nonexistent/chorus-worker", "could not be started"),
        ("/bin/false", "exited with status 1"),
    ] {
        let chorus = Chorus::builder()
            .env("CHORUS_WORKER_BIN", worker_bin)
            .env("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
            // The endpoint is down, so the model cannot be listed: name it explicitly.
            .env("CHORUS_DEFAULT_MODEL", "openai/m")
            .start()
            .await?;
        chorus.create_agent("broken").await?;
        let id = chorus.send_message("broken", "anyone there?").await?;
        let thread = chorus
            .wait_thread_finished("broken", id, Duration::from_secs(10))
            .await?;
        assert_eq!(thread["status"], "failed");
        let error = thread["error"].as_str().unwrap();
        assert!(error.contains(expected), "{worker_bin}: {error}");
        assert!(error.contains("could not start"), "{worker_bin}: {error}");
        let worker = &chorus.agent("broken").await?["worker"];
        assert!(
            worker["last_exit"].as_str().unwrap().contains(expected),
            "{worker}"
        );
    }
    Ok(())
}

/// Seed 001's durability test: a worker SIGKILLed in the middle of a 10-turn run,
/// while a command runs. The same thread completes on the new worker; the command
/// is not run again and the model hears it was interrupted; every earlier tool
/// result reaches the model; step numbers have no gap and no repeat.
#[tokio::test]
async fn a_ten_turn_run_survives_its_worker_killed_while_a_command_runs() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    for n in 1..=5 {
        model.push(tool_call(
            &format!("c{n}"),
            "create_file",
            json!({"path": format!("f{n}.txt"), "content": format!("{n}")}),
        ));
    }
    model.push(tool_call(
        "c6",
        "bash",
        json!({"command": "echo ran >> ran.log; sleep 30"}),
    ));
    for n in 7..=10 {
        model.push(tool_call(
            &format!("c{n}"),
            "create_file",
            json!({"path": format!("f{n}.txt"), "content": format!("{n}")}),
        ));
    }
    model.push(text("all ten done"));
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({"name": "long", "permissions": "open"}))
        .await?;
    let first_pid = chorus
        .wait_worker_running("long", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("long", "ten steps, please").await?;
    let log = chorus.agent_dir("long").join("workspace/ran.log");
    let deadline = Instant::now() + Duration::from_secs(30);
    // Its line written, not just the file created (`>>` creates it first: a kill
    // between the two would leave it empty).
    while std::fs::read_to_string(&log).unwrap_or_default() != "ran\n" {
        anyhow::ensure!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    process::signal(first_pid, Signal::SIGKILL);

    let thread = chorus
        .wait_thread_finished("long", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(&log)?,
        "ran\n",
        "the command ran once"
    );
    for n in 1..=10 {
        if n == 6 {
            continue;
        }
        let file = chorus.agent_dir("long").join(format!("workspace/f{n}.txt"));
        assert_eq!(std::fs::read_to_string(&file)?, n.to_string());
    }
    // The first call of the resumed run carried the five earlier results and the
    // interrupted one.
    let requests = model.requests();
    assert_eq!(requests.len(), 11, "one call per turn, none repeated");
    let resumed: Vec<&serde_json::Value> = requests[6].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(resumed.len(), 6, "{resumed:#?}");
    assert_eq!(resumed[5]["tool_call_id"], "c6");
    let interrupted = resumed[5]["content"].as_str().unwrap();
    assert!(interrupted.contains("interrupted"), "{interrupted}");
    // Steps: no gap, no repeat, all ended; the command's step closed as failed.
    let steps = thread["steps"].as_array().unwrap();
    let numbers: Vec<u64> = steps
        .iter()
        .map(|s| s["number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (1..=numbers.len() as u64).collect::<Vec<_>>());
    assert!(
        steps.iter().all(|s| s["ended_at"].is_string()),
        "{thread:#}"
    );
    let bash: Vec<&serde_json::Value> = steps
        .iter()
        .filter(|s| {
            s["kind"] == "tool" && s["description"].as_str().unwrap_or("").contains("ran.log")
        })
        .collect();
    assert_eq!(bash.len(), 1, "{steps:#?}");
    assert_eq!(bash[0]["failed"], true);
    Ok(())
}

/// A worker killed while a tool runs leaves a call with no result; the resumed run
/// tells the model it was interrupted, and that result is stored in the thread right
/// after the call, so a history rebuilt from the store later (here, a reply that
/// continues the thread) answers every call, as the model APIs require.
#[tokio::test]
async fn the_interrupted_result_a_resumed_run_gives_is_stored_after_its_call() -> anyhow::Result<()>
{
    let marker = format!("300.{}{}", std::process::id(), line!());
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}")}),
    ));
    model.push(text(
        "the build was interrupted; I will check before rerunning",
    ));
    model.push(text("nothing was built"));
    let chorus = chorus_with(&model).await?;
    chorus
        .create_agent_with(json!({"name": "builder", "permissions": "open"}))
        .await?;
    let pid = chorus
        .wait_worker_running("builder", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("builder", "build it").await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while process::with_marker(&marker).is_empty() {
        anyhow::ensure!(Instant::now() < deadline, "the command never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    process::signal(pid, Signal::SIGKILL);
    let thread = chorus
        .wait_thread_finished("builder", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    // Stored: the call, its result, then the answer of the resumed run.
    let messages = thread["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["user", "assistant", "tool", "assistant"],
        "{thread:#}"
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "c1");
    assert_eq!(messages[2]["tool_call_id"], "c1");
    assert!(
        messages[2]["content"]
            .as_str()
            .unwrap()
            .starts_with("interrupted"),
        "{thread:#}"
    );

    // A reply continues the thread from what is stored; the request carries the
    // result once, right after its call (the fake refuses anything else).
    let answer_id = messages[3]["id"].clone();
    let reply: serde_json::Value = chorus
        .api(reqwest::Method::POST, "/api/agents/builder/messages")
        .json(&json!({"content": "did it build?", "reply_to": answer_id}))
        .send()
        .await?
        .json()
        .await?;
    let next = reply["thread_id"].as_u64().unwrap();
    let continued = chorus
        .wait_thread_finished("builder", next, Duration::from_secs(30))
        .await?;
    assert_eq!(continued["status"], "completed", "{continued:#}");
    let requests = model.requests();
    let sent = requests.last().unwrap().body["messages"]
        .as_array()
        .unwrap()
        .clone();
    let results: Vec<usize> = sent
        .iter()
        .enumerate()
        .filter(|(_, m)| m["role"] == "tool" && m["tool_call_id"] == "c1")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(results.len(), 1, "{sent:#?}");
    assert_eq!(
        sent[results[0] - 1]["tool_calls"][0]["id"],
        "c1",
        "{sent:#?}"
    );
    Ok(())
}
