//! Agents from creation to destruction, and across restarts of chorus.

use std::time::Duration;

use anyhow::Context;

use chorus_test_support::{Chorus, FakeOpenAi, process};
use reqwest::Method;
use serde_json::json;

#[tokio::test]
async fn a_new_agent_gets_a_committed_workspace_from_the_template() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_models(&["m-1"]);
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .start()
        .await?;
    let agent = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "scribe", "system_prompt": "You write things down.", "model": "m-1"}))
        .send()
        .await?;
    assert_eq!(agent.status(), 201);
    let agent: serde_json::Value = agent.json().await?;
    assert_eq!(agent["name"], "scribe");
    assert_eq!(agent["model"], "m-1");
    assert_eq!(agent["permissions"], "standard");

    let dir = chorus.agent_dir("scribe");
    assert!(dir.join("docs/README.md").is_file());
    assert!(dir.join("sessions").is_dir());
    assert!(dir.join("workspace/.gitkeep").is_file());
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("agent.json"))?)?;
    assert_eq!(config["name"], "scribe");
    assert_eq!(config["system_prompt"], "You write things down.");
    assert_eq!(config["model"], "m-1");
    assert!(config["created_at"].is_string());
    let log = std::process::Command::new("git")
        .args(["log", "--format=%s"])
        .current_dir(dir.join("workspace"))
        .output()?;
    assert_eq!(
        String::from_utf8_lossy(&log.stdout).trim(),
        "Initial commit"
    );

    let listed: serde_json::Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    Ok(())
}

#[tokio::test]
async fn destroy_stops_the_worker_and_deletes_or_keeps_files() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("goner").await?;
    chorus.create_agent("keeper").await?;
    let goner_pid = chorus
        .wait_worker_running("goner", Duration::from_secs(15))
        .await?;
    let keeper_pid = chorus
        .wait_worker_running("keeper", Duration::from_secs(15))
        .await?;
    std::fs::write(
        chorus.agent_dir("keeper").join("workspace/work.txt"),
        "precious",
    )?;

    let response = chorus
        .api(Method::DELETE, "/api/agents/goner")
        .send()
        .await?;
    assert_eq!(response.status(), 204);
    assert!(
        process::wait_gone(goner_pid, Duration::from_secs(5)).await,
        "worker survived destroy"
    );
    assert!(
        !chorus.agent_dir("goner").exists(),
        "files were not deleted"
    );
    let gone = chorus.api(Method::GET, "/api/agents/goner").send().await?;
    assert_eq!(gone.status(), 404);

    let response = chorus
        .api(Method::DELETE, "/api/agents/keeper?keep_files=true")
        .send()
        .await?;
    assert_eq!(response.status(), 204);
    assert!(
        process::wait_gone(keeper_pid, Duration::from_secs(5)).await,
        "worker survived destroy"
    );
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("keeper").join("workspace/work.txt"))?,
        "precious"
    );
    let listed: serde_json::Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(listed, json!([]));

    // Re-creating over kept files reuses them; the old name is free again.
    chorus.create_agent("keeper").await?;
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("keeper").join("workspace/work.txt"))?,
        "precious"
    );
    chorus
        .wait_worker_running("keeper", Duration::from_secs(15))
        .await?;
    chorus.create_agent("goner").await?;
    Ok(())
}

#[tokio::test]
async fn agents_come_back_after_a_restart() -> anyhow::Result<()> {
    let data = tempfile::tempdir()?;
    let chorus = Chorus::builder()
        .data_dir(&data.path().join("data"))
        .start()
        .await?;
    chorus.create_agent("durable").await?;
    let first_pid = chorus
        .wait_worker_running("durable", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("durable", "remember me").await?;
    chorus
        .wait_thread_finished("durable", id, Duration::from_secs(10))
        .await?;
    assert!(chorus.stop().await?.success());

    let chorus = Chorus::builder()
        .data_dir(&data.path().join("data"))
        .start()
        .await?;
    let second_pid = chorus
        .wait_worker_running("durable", Duration::from_secs(15))
        .await?;
    assert_ne!(first_pid, second_pid);
    let thread = chorus.thread("durable", id).await?;
    assert_eq!(thread["messages"][0]["content"], "remember me");
    // Thread ids keep counting.
    let next = chorus.send_message("durable", "again").await?;
    assert_eq!(next, id + 1);
    Ok(())
}

#[tokio::test]
async fn a_generated_api_token_is_private_to_its_owner() -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let chorus = Chorus::builder().generated_token().start().await?;
    let path = chorus.data_dir.join("api-token");
    let mode = std::fs::metadata(&path)?.permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(chorus.token().len(), 64);
    let response = chorus.api(Method::GET, "/api/agents").send().await?;
    assert_eq!(response.status(), 200);
    Ok(())
}

/// Probes need no token: `/healthz` says the process serves, `/readyz` that it is
/// ready. SIGTERM drains: `/readyz` turns 503 at once (a load balancer stops
/// sending), a message that still arrives is kept, and its thread completes after
/// the restart.
#[tokio::test]
async fn sigterm_drains_readiness_turns_503_and_a_late_message_is_kept() -> anyhow::Result<()> {
    use nix::sys::signal::Signal;
    let model = FakeOpenAi::start().await;
    let temp = tempfile::tempdir()?;
    let data = temp.path().join("data");
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    chorus.create_agent("a").await?;
    let worker = chorus
        .wait_worker_running("a", Duration::from_secs(30))
        .await?;
    let ready = chorus.anonymous(Method::GET, "/readyz").send().await?;
    assert_eq!(ready.status(), 200);
    assert_eq!(ready.json::<serde_json::Value>().await?["ready"], true);

    // A stopped worker holds the shutdown open (its grace period) while we look.
    process::signal(worker, Signal::SIGSTOP);
    process::signal(chorus.pid(), Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let draining = loop {
        let response = chorus.anonymous(Method::GET, "/readyz").send().await?;
        if response.status() == 503 {
            break response.json::<serde_json::Value>().await?;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "/readyz still {} 10 s after SIGTERM",
            response.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(draining["ready"], false);
    assert!(
        draining["problems"][0]
            .as_str()
            .is_some_and(|p| p.contains("shutting down")),
        "{draining}"
    );
    let thread = chorus.send_message("a", "Still there?").await?;
    process::signal(worker, Signal::SIGCONT);
    assert!(chorus.stop().await?.success());

    model.push(chorus_test_support::fake_model::text("Yes, still here."));
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .data_dir(&data)
        .start()
        .await?;
    let done = chorus
        .wait_thread_finished("a", thread, Duration::from_secs(30))
        .await?;
    assert_eq!(done["status"], "completed", "{done:#}");
    let messages = done["messages"].as_array().expect("messages");
    assert_eq!(messages[0]["content"], "Still there?");
    assert_eq!(
        messages.last().expect("an answer")["content"],
        "Yes, still here."
    );
    Ok(())
}

/// A Postgres that cannot be reached stops `chorus serve` with an error that says
/// which database, without its password; a URL of another kind is refused by name.
#[tokio::test]
async fn an_unreachable_postgres_is_a_clear_error_without_the_password() -> anyhow::Result<()> {
    // Port 1 on loopback: nothing listens there.
    let refused = Chorus::builder()
        .env(
            "DATABASE_URL",
            "postgres://chorus:hunter2-db-secret@127.0.0.1:1/chorus",
        )
        .start()
        .await
        .err()
        .context("chorus started without its database")?
        .to_string();
    assert!(
        refused.contains("cannot open the database (Postgres, chorus@127.0.0.1:1/chorus, TLS if"),
        "{refused}"
    );
    assert!(!refused.contains("hunter2-db-secret"), "{refused}");
    let refused = Chorus::builder()
        .env(
            "DATABASE_URL",
            "mysql://root:hunter2-db-secret@127.0.0.1/chorus",
        )
        .start()
        .await
        .err()
        .context("chorus started on a mysql:// URL")?
        .to_string();
    assert!(
        refused.contains("DATABASE_URL: 'mysql:' is not supported"),
        "{refused}"
    );
    assert!(!refused.contains("hunter2-db-secret"), "{refused}");
    Ok(())
}

/// With `sslmode=verify-full` and the server's CA in `sslrootcert`, every connection
/// chorus keeps to Postgres is TLS, and `chorus status` says so; a server chorus
/// cannot verify is refused at start, saying what to check and without the password.
/// Runs where the suite runs on Postgres (`.ci/run` starts its server with TLS and
/// names the CA in `CHORUS_TEST_POSTGRES_CA`).
#[tokio::test]
async fn postgres_is_reached_over_verified_tls() -> anyhow::Result<()> {
    if chorus_test_support::chorus::test_postgres().is_none() {
        return Ok(()); // on SQLite: no server to reach
    }
    let ca = std::env::var("CHORUS_TEST_POSTGRES_CA").context(
        "CHORUS_TEST_POSTGRES_CA: the CA of the test Postgres server's certificate (.ci/run starts one with TLS)",
    )?;
    let chorus = Chorus::builder()
        .database_options(&format!("sslmode=verify-full&sslrootcert={ca}"))
        .start()
        .await?;
    assert!(
        chorus.output().contains("/chorus_e2e_")
            && chorus.output().contains(", TLS, verifying the server"),
        "{}",
        chorus.output()
    );
    chorus
        .create_agent_with(json!({"name": "secure", "permissions": "open"}))
        .await?;
    let connections = chorus
        .query_store(
            "SELECT count(*), count(*) FILTER (WHERE s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s ON s.pid = a.pid \
             WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()",
        )
        .await?;
    let (all, encrypted) = connections.trim().split_once('|').context("two counts")?;
    assert!(
        all.parse::<u32>()? > 0,
        "chorus holds connections: {connections}"
    );
    assert_eq!(all, encrypted, "every connection is TLS: {connections}");
    drop(chorus);

    // Without the CA the server's certificate is not trusted.
    let refused = Chorus::builder()
        .database_options("sslmode=verify-full")
        .start()
        .await
        .err()
        .context("chorus trusted a certificate it cannot verify")?
        .to_string();
    assert!(refused.contains("cannot open the database"), "{refused}");
    assert!(refused.contains("sslrootcert"), "{refused}");
    assert!(
        !refused.contains(chorus_test_support::chorus::TEST_DB_PASSWORD),
        "{refused}"
    );
    Ok(())
}
