//! Secrets (provider keys, the API token, worker credentials) never reach logs, the
//! worker, the model's view of tools, the thread, or the audit log.

use std::time::Duration;

use chorus_test_support::fake_model::{text, tool_calls};
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const PROVIDER_KEY: &str = "sk-live-PROVIDERKEY-5f3a9c1e7b";
const API_TOKEN: &str = "chorus-APITOKEN-8d2e6b4a0c";

#[tokio::test]
async fn secrets_stay_out_of_logs_tools_threads_and_the_audit_log() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_calls(&[
        // An agent looking for secrets where they could leak: its own environment,
        // its worker's, and its parent's command line.
        (
            "c1",
            "bash",
            json!({"command": "env; tr '\\0' '\\n' < /proc/$PPID/environ; tr '\\0' ' ' < /proc/$PPID/cmdline"}),
        ),
        // A key the model echoes anyway (say, pasted by a user) is redacted in the audit log.
        (
            "c2",
            "bash",
            json!({"command": format!("echo {PROVIDER_KEY} > /dev/null")}),
        ),
    ]));
    model.push(text("nothing found"));
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        // As verbose as an operator would set it when debugging.
        .env("RUST_LOG", "debug")
        .api_token(API_TOKEN)
        .start()
        .await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "snoop", "permissions": "open"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let id = chorus.send_message("snoop", "find the keys").await?;
    let thread = chorus
        .wait_thread_finished("snoop", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    // The tool really ran and saw its environment, without any secret in it.
    let env_output = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .and_then(|m| m["content"].as_str())
        .unwrap()
        .to_string();
    assert!(env_output.contains("PATH="), "{env_output}");
    assert!(env_output.contains("chorus-worker"), "{env_output}");

    // The provider got its key, in the header only.
    let requests = model.requests();
    assert_eq!(
        requests[0].headers["authorization"],
        format!("Bearer {PROVIDER_KEY}")
    );

    let audit: Value = chorus
        .api(Method::GET, "/api/agents/snoop/audit?limit=100")
        .send()
        .await?
        .json()
        .await?;
    let echoed = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["call_id"] == "c2")
        .expect("the call is audited");
    assert!(
        echoed["detail"].as_str().unwrap().contains("[redacted]"),
        "{echoed:#}"
    );

    let logs = chorus.output();
    assert!(logs.contains("DEBUG"), "the log is at debug level");
    let tool_results: Vec<String> = thread["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].to_string())
        .collect();
    // Every request, including those that carry the model's own echo of the key
    // back: the relay scrubs what it forwards.
    let bodies: Vec<String> = requests.iter().map(|r| r.body.to_string()).collect();
    for (place, haystack) in [
        ("the logs of chorus and its worker", logs),
        ("the tool results", tool_results.join("\n")),
        // Steps and messages, including the model's own echo of the key.
        ("the thread", thread.to_string()),
        ("what the model was sent", bodies.join("\n")),
        ("the audit log", audit.to_string()),
    ] {
        for secret in [PROVIDER_KEY, API_TOKEN] {
            assert!(!haystack.contains(secret), "{place} contain {secret}");
        }
        assert!(
            !haystack.contains("Bearer "),
            "{place} contain a bearer credential"
        );
    }
    Ok(())
}

/// The API token under names of the operator's choosing and Postgres's own
/// password are blanked in chorus's environment block by their values, not only
/// by the usual names; read as root from `/proc/<chorus>/environ`, the strongest
/// reader there is.
#[tokio::test]
async fn no_secret_stays_readable_in_the_environment_block_under_any_name() -> anyhow::Result<()> {
    // Reading a non-dumpable process's environ takes root (CAP_SYS_PTRACE).
    if !chorus_test_support::process::as_root(
        "no_secret_stays_readable_in_the_environment_block_under_any_name",
    ) {
        return Ok(());
    }
    const PG_PASSWORD: &str = "pg-PASSWORD-e81c4f2a9d";
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        // PGPASSWORD would be used on Postgres; this test is about the block.
        .sqlite()
        .api_token(API_TOKEN)
        .env("MY_SECRET_VALUE", API_TOKEN)
        .env("TOKEN", API_TOKEN)
        .env("PGPASSWORD", PG_PASSWORD)
        .env(
            "LEGACY_DSN",
            &format!("postgres://app:{PG_PASSWORD}@db/app"),
        )
        .env("HARMLESS", "visible-value")
        .start()
        .await?;
    let block = std::fs::read(format!("/proc/{}/environ", chorus.pid()))?;
    let environ = String::from_utf8_lossy(&block).replace('\0', "\n");
    // The right block, read whole: an ordinary value is still there.
    assert!(environ.contains("HARMLESS=visible-value"), "{environ}");
    for secret in [API_TOKEN, PG_PASSWORD, PROVIDER_KEY, "sk-openai-test"] {
        assert!(
            !environ.contains(secret),
            "{secret} readable in:\n{environ}"
        );
    }
    // Blanked in place (same length), under every name.
    for (name, value) in [
        ("MY_SECRET_VALUE", API_TOKEN.to_string()),
        ("TOKEN", API_TOKEN.to_string()),
        ("CHORUS_API_TOKEN", API_TOKEN.to_string()),
        ("PGPASSWORD", PG_PASSWORD.to_string()),
        ("LEGACY_DSN", format!("postgres://app:{PG_PASSWORD}@db/app")),
    ] {
        let blanked = format!("{name}={}\n", "*".repeat(value.len()));
        assert!(environ.contains(&blanked), "{name} not blanked:\n{environ}");
    }
    Ok(())
}
