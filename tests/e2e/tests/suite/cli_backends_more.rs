//! CLI backends beyond the acceptance scenario, through the real binaries: a
//! `claude-code` agent on a dial-in worker with its own data directory works there
//! (the file on the worker's volume, the call audited, the worker's probe shown);
//! a CLI that is not on PATH, or too old, makes the agent "not usable" with the
//! reason, and a message to it fails at once (`config`) saying how to install the
//! supported version, without the CLI running. A provider that keeps
//! rate-limiting an OpenCode agent fails the run as a model error that says so,
//! with no CLI left running.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{Reply, text, tool_call};

use super::dial_in::DialInWorker;
use chorus_test_support::{Chorus, FakeAnthropic, FakeModel, FakeOpenAi, bin_path};
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);
const JOIN_TOKEN: &str = "join-token-cli-backends-0123456789";
const ANTHROPIC_KEY: &str = "sk-ant-e2e-provider-key-do-not-leak";
const CLAUDE_INSTALL: &str = "npm install -g @anthropic-ai/claude-code@2.1.332";
const OPENCODE_INSTALL: &str = "npm install -g opencode-ai@1.18.33";

/// Polls `probe` until it gives a value, or fails with `what` and the last answer.
async fn poll<T>(
    what: &str,
    mut probe: impl AsyncFnMut() -> anyhow::Result<Result<T, String>>,
) -> anyhow::Result<T> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match probe().await? {
            Ok(value) => return Ok(value),
            Err(last) => anyhow::ensure!(
                tokio::time::Instant::now() < deadline,
                "timed out: {what}; last: {last}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get(chorus: &Chorus, path: &str) -> anyhow::Result<Value> {
    let response = chorus.api(Method::GET, path).send().await?;
    let status = response.status();
    let body = response.text().await?;
    anyhow::ensure!(status.is_success(), "GET {path}: {status} {body}");
    Ok(serde_json::from_str(&body)?)
}

/// Creates `name` with `backend` and `model` (the default model of the format
/// the backend speaks); the answer must be 201.
async fn create(chorus: &Chorus, name: &str, backend: &str, model: &str) -> anyhow::Result<Value> {
    let response = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": name, "backend": backend, "model": model,
                      "permissions": {"allow": ["tool:create_file:.*", "tool:view:.*"], "ask": []}}))
        .send()
        .await?;
    let status = response.status().as_u16();
    let body: Value = response.json().await?;
    anyhow::ensure!(status == 201, "create {name} ({backend}): {status} {body}");
    Ok(body)
}

/// The agent's `backend_status` once its CLI's state is known (not "unknown: …",
/// which it reads as while the probe has not answered yet).
async fn known_status(chorus: &Chorus, agent: &str) -> anyhow::Result<Value> {
    poll(&format!("{agent}'s backend_status is known"), async || {
        let view = chorus.agent(agent).await?;
        let status = view["backend_status"].clone();
        let unknown = status["reason"]
            .as_str()
            .is_some_and(|r| r.starts_with("unknown"));
        Ok(if status.is_object() && !unknown {
            Ok(status)
        } else {
            Err(view.to_string())
        })
    })
    .await
}

/// Waits until `agent`'s worker (local or dial-in) serves it.
async fn running(chorus: &Chorus, agent: &str) -> anyhow::Result<()> {
    poll(&format!("{agent}'s worker is running"), async || {
        let worker = chorus.agent(agent).await?["worker"].clone();
        Ok(if worker["state"] == "running" {
            Ok(())
        } else {
            Err(worker.to_string())
        })
    })
    .await
}

/// Sends a message and waits for the thread to end; returns it and how long that took.
async fn message(chorus: &Chorus, agent: &str) -> anyhow::Result<(Value, Duration)> {
    let started = Instant::now();
    let id = chorus.send_message(agent, "write a note").await?;
    let thread = chorus.wait_thread_finished(agent, id, WAIT).await?;
    Ok((thread, started.elapsed()))
}

/// The thread `agent` failed at once, kind `config`, with an error containing every
/// one of `says`.
fn failed_at_once(agent: &str, thread: &Value, took: Duration, says: &[&str]) {
    assert_eq!(thread["status"], "failed", "{agent}: {thread:#}");
    assert_eq!(thread["failure_kind"], "config", "{agent}: {thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    for said in says {
        assert!(error.contains(said), "{agent}: {said:?} not in {error:?}");
    }
    assert!(
        took < Duration::from_secs(5),
        "{agent}: the run took {took:?} to fail"
    );
}

#[tokio::test]
async fn a_cli_agent_on_a_dial_in_worker_works_in_the_workers_data_directory() -> anyhow::Result<()>
{
    for backend in ["claude-code", "opencode"] {
        on_a_dial_in_worker(backend).await?;
    }
    Ok(())
}

async fn on_a_dial_in_worker(backend: &str) -> anyhow::Result<()> {
    let (version, model_name) = if backend == "claude-code" {
        ("2.1.332", "anthropic/claude-fake")
    } else {
        ("1.18.33", "openai/fake-model")
    };
    // The worker finds chorus-tools beside its own executable.
    let worker_bin = bin_path("chorus-worker");
    let tools = worker_bin
        .parent()
        .expect("the worker's directory")
        .join("chorus-tools");
    assert!(
        tools.is_file(),
        "{} is missing: cargo build --bins",
        tools.display()
    );

    let (model, builder) = if backend == "claude-code" {
        let model = FakeAnthropic::start().await;
        let builder = Chorus::builder()
            .env("ANTHROPIC_BASE_URL", &model.host_url())
            .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
            .env("CHORUS_DEFAULT_MODEL", "claude-fake");
        (model, builder)
    } else {
        let model = FakeOpenAi::start().await;
        let builder = Chorus::builder()
            .env("OPENAI_BASE_URL", &model.base_url())
            .env("OPENAI_API_KEY", "sk-openai-e2e")
            .env("CHORUS_DEFAULT_MODEL", "fake-model");
        (model, builder)
    };
    let chorus = builder
        .env("CHORUS_LAUNCHER", "remote")
        .env("CHORUS_JOIN_TOKEN", JOIN_TOKEN)
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    let volume = tempfile::tempdir()?;
    let worker = DialInWorker::start(&chorus.grpc_url, volume.path(), 1, JOIN_TOKEN);

    // The status page shows the worker's probe once it joined.
    let claude = poll("the dial-in worker's probe in /api/status", async || {
        let status = get(&chorus, "/api/status").await?;
        let claude = status["backends"]
            .as_array()
            .and_then(|b| b.iter().find(|b| b["backend"] == backend))
            .cloned()
            .unwrap_or_default();
        Ok(if claude["usable"] == true {
            Ok(claude)
        } else {
            Err(format!("{status}\n{}", worker.log()))
        })
    })
    .await?;
    assert_eq!(claude["version"], version, "{claude}");
    assert!(claude["reason"].is_null(), "{claude}");

    create(&chorus, "coder", backend, model_name).await?;
    running(&chorus, "coder").await?;
    let status = known_status(&chorus, "coder").await?;
    assert_eq!(
        status,
        json!({"usable": true, "version": version, "reason": null}),
        "the serving worker's probe"
    );

    model.push(tool_call(
        "w1",
        "create_file",
        json!({"path": "note.txt", "content": format!("written by {backend}")}),
    ));
    model.push(text("The note is written."));
    let (thread, _) = message(&chorus, "coder").await?;
    assert_eq!(
        thread["status"],
        "completed",
        "{thread:#}\n{}",
        worker.log()
    );
    let last = thread["messages"]
        .as_array()
        .and_then(|m| m.iter().rfind(|m| m["role"] == "assistant"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["content"], "The note is written.", "{thread:#}");

    // The file is on the worker's volume, in the agent's workspace; the control
    // plane's data directory has none.
    let note = volume.path().join("agents/coder/workspace/note.txt");
    assert_eq!(
        std::fs::read_to_string(&note).unwrap_or_else(|e| format!("{}: {e}", note.display())),
        format!("written by {backend}")
    );
    assert!(!chorus.agent_dir("coder").join("workspace").exists());

    // The call is audited with its decision and result.
    let page = get(&chorus, "/api/agents/coder/audit?limit=100").await?;
    let calls: Vec<&Value> = page["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["action"].as_str().is_some_and(|a| a.starts_with("tool:")))
        .collect();
    assert_eq!(calls.len(), 1, "{page:#}");
    assert_eq!(calls[0]["action"], "tool:create_file:note.txt", "{page:#}");
    assert_eq!(calls[0]["decision"], "allow", "{page:#}");
    assert_eq!(calls[0]["result"], "ok", "{page:#}");
    assert!(model.take_violations().is_empty());
    Ok(())
}

/// A `PATH` without `claude` and `opencode`: a directory with a symlink to `git`, the
/// one program chorus and its workers look up on PATH for an agent's message (its
/// workspace is a repository; found by trying), plus `extra` (name, script) as
/// executable files.
fn bare_path(root: &Path, extra: &[(&str, &str)]) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let dir = root.join("bin");
    std::fs::create_dir_all(&dir)?;
    let git = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("git"))
        .find(|p| p.is_file())
        .ok_or_else(|| anyhow::anyhow!("git is not on PATH"))?;
    std::os::unix::fs::symlink(git, dir.join("git"))?;
    for (name, script) in extra {
        let path = dir.join(name);
        std::fs::write(&path, script)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(dir)
}

async fn chorus_on_path(
    model: &FakeModel,
    openai: &FakeModel,
    path: &Path,
) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("ANTHROPIC_BASE_URL", &model.host_url())
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("CHORUS_DEFAULT_MODEL", "claude-fake")
        .env("OPENAI_BASE_URL", &openai.base_url())
        .env("OPENAI_API_KEY", "sk-openai-e2e-provider-key")
        .env("PATH", &path.display().to_string())
        .config("[threads]\ntitles = false\n")
        .start()
        .await
}

#[tokio::test]
async fn an_agent_of_a_cli_that_is_not_installed_is_created_and_its_run_fails_at_once_saying_how_to_install_it()
-> anyhow::Result<()> {
    let model = FakeAnthropic::start().await;
    let tmp = tempfile::tempdir()?;
    let path = bare_path(tmp.path(), &[])?;
    let openai = FakeOpenAi::start().await;
    let chorus = chorus_on_path(&model, &openai, &path).await?;
    for (agent, backend, model, install) in [
        (
            "coder",
            "claude-code",
            "anthropic/claude-fake",
            CLAUDE_INSTALL,
        ),
        ("oc", "opencode", "openai/fake-model", OPENCODE_INSTALL),
    ] {
        create(&chorus, agent, backend, model).await?;
        let status = known_status(&chorus, agent).await?;
        assert_eq!(status["usable"], false, "{agent}: {status}");
        let reason = status["reason"].as_str().unwrap_or_default();
        assert!(
            reason.contains("is not on PATH") && reason.contains(install),
            "{agent}: {reason}"
        );
        running(&chorus, agent).await?;
        let (thread, took) = message(&chorus, agent).await?;
        eprintln!("{agent}: failed after {took:?}");
        failed_at_once(agent, &thread, took, &["is not on PATH", install]);
    }
    for fake in [&model, &openai] {
        assert!(
            fake.requests().is_empty(),
            "no model was asked: {:?}",
            fake.requests()
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_claude_code_older_than_supported_is_not_usable_and_its_run_fails_at_once_without_running_it()
-> anyhow::Result<()> {
    let model = FakeAnthropic::start().await;
    let openai = FakeOpenAi::start().await;
    let tmp = tempfile::tempdir()?;
    // Answers --version like Claude Code 2.1.9; run for a turn, it leaves a mark in
    // its working directory (the agent's workspace, writable in the sandbox).
    let script = "#!/bin/sh\nif [ \"$1\" = --version ]; then echo '2.1.9 (Claude Code)'; exit 0; fi\n\
                  echo \"$@\" >> claude-ran\nexit 1\n";
    let path = bare_path(tmp.path(), &[("claude", script)])?;
    let chorus = chorus_on_path(&model, &openai, &path).await?;
    let ran = chorus.agent_dir("coder").join("workspace/claude-ran");
    create(&chorus, "coder", "claude-code", "anthropic/claude-fake").await?;
    let status = known_status(&chorus, "coder").await?;
    assert_eq!(status["usable"], false, "{status}");
    assert_eq!(status["version"], "2.1.9", "{status}");
    let reason = status["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("2.1.9") && reason.contains("2.1.332") && reason.contains(CLAUDE_INSTALL),
        "{reason}"
    );
    running(&chorus, "coder").await?;
    let (thread, took) = message(&chorus, "coder").await?;
    eprintln!("too old: failed after {took:?}");
    assert!(
        !ran.exists(),
        "the old CLI was run for the turn: {}\n{thread:#}",
        std::fs::read_to_string(&ran).unwrap_or_default()
    );
    failed_at_once(
        "coder",
        &thread,
        took,
        &["2.1.9", "2.1.332", CLAUDE_INSTALL],
    );
    assert!(model.requests().is_empty());
    Ok(())
}

/// A provider that keeps answering 429 fails an OpenCode run as a model error that
/// says so, with no OpenCode process left: OpenCode gives up by itself when the
/// provider says how long to wait (as here); without that it retries silently, and
/// the worker stops it after `GIVE_UP_AFTER_429S` (8) answers 429 in a row (that
/// path: `worker/tests/backends.rs`).
#[tokio::test]
async fn a_provider_that_keeps_rate_limiting_fails_the_opencode_run_saying_so() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-openai-e2e")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await?;
    create(&chorus, "busy", "opencode", "openai/fake-model").await?;
    for _ in 0..40 {
        model.push(Reply::Error {
            status: 429,
            kind: "rate_limit_exceeded".into(),
            message: "slow down".into(),
            retry_after: Some("1".into()),
        });
    }
    let id = chorus.send_message("busy", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("busy", id, Duration::from_secs(120))
        .await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    assert_eq!(thread["failure_kind"], "model_error", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("kept rate-limiting") && error.contains("429"),
        "{error}"
    );
    let opencode = std::env::var_os("PATH")
        .and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join("opencode"))
                .find(|p| p.is_file())
        })
        .expect("opencode is on PATH: .ci/run installs it");
    let opencode = std::fs::canonicalize(opencode)?;
    let left: Vec<u32> = std::fs::read_dir("/proc")?
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/exe")).is_ok_and(|exe| exe == opencode)
                && std::fs::read_link(format!("/proc/{pid}/cwd"))
                    .is_ok_and(|cwd| cwd.starts_with(chorus.agent_dir("busy")))
        })
        .collect();
    assert!(left.is_empty(), "OpenCode still runs: {left:?}");
    Ok(())
}
