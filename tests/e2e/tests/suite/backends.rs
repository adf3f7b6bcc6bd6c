//! An agent's backend (api, claude-code, opencode) through the real binaries: set at
//! create and with PATCH, refused when unknown, shown in the create answer, the agent
//! view and the list with its CLI's state, kept in agent.json, audited; the status
//! page lists each CLI; `[backends]` naming a missing file stops the start.
//! (Runs of a CLI backend need the worker's side: see the worker's tests.)

use std::time::Duration;

use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

use super::cli::{client, stderr, stdout};

async fn create(chorus: &Chorus, body: Value) -> anyhow::Result<reqwest::Response> {
    Ok(chorus
        .api(Method::POST, "/api/agents")
        .json(&body)
        .send()
        .await?)
}

/// A CLI backend's state is an object that says whether it can run, and why not
/// when it cannot (whatever this machine has installed).
fn assert_cli_status(agent: &Value) {
    let status = &agent["backend_status"];
    let usable = status["usable"]
        .as_bool()
        .unwrap_or_else(|| panic!("no backend_status: {agent}"));
    if usable {
        assert!(status["reason"].is_null(), "{agent}");
    } else {
        assert!(
            status["reason"].as_str().is_some_and(|r| !r.is_empty()),
            "not usable says why: {agent}"
        );
    }
}

#[tokio::test]
async fn the_backend_is_set_shown_changed_and_refused_when_unknown() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;

    // The default, and each backend named at create.
    let plain = create(&chorus, json!({"name": "plain"})).await?;
    assert_eq!(plain.status(), 201);
    let plain: Value = plain.json().await?;
    assert_eq!(plain["backend"], "api", "{plain}");
    assert!(plain["backend_status"].is_null(), "{plain}");
    for (name, backend) in [("coder", "claude-code"), ("oc", "opencode")] {
        let created = create(&chorus, json!({"name": name, "backend": backend})).await?;
        assert_eq!(created.status(), 201);
        let created: Value = created.json().await?;
        assert_eq!(created["backend"], backend, "{created}");
        assert_cli_status(&created);
        let shown = chorus.agent(name).await?;
        assert_eq!(shown["backend"], backend);
        assert_cli_status(&shown);
        let config: Value = serde_json::from_str(&std::fs::read_to_string(
            chorus.agent_dir(name).join("agent.json"),
        )?)?;
        assert_eq!(config["backend"], backend, "agent.json keeps it");
    }

    // An unknown backend: 400 naming the set, and no agent.
    let refused = create(&chorus, json!({"name": "nope", "backend": "claude"})).await?;
    assert_eq!(refused.status(), 400);
    let body: Value = refused.json().await?;
    assert_eq!(body["error"]["code"], "invalid_request", "{body}");
    assert_eq!(
        body["error"]["message"],
        "unknown backend 'claude': use one of api, claude-code, opencode"
    );
    let gone = chorus.api(Method::GET, "/api/agents/nope").send().await?;
    assert_eq!(gone.status(), 404, "a refused create makes nothing");

    // PATCH changes it (and only it), audited with the old and new value.
    let changed = chorus
        .api(Method::PATCH, "/api/agents/plain")
        .json(&json!({"backend": "opencode"}))
        .send()
        .await?;
    assert_eq!(changed.status(), 200);
    let changed: Value = changed.json().await?;
    assert_eq!(changed["backend"], "opencode");
    assert_cli_status(&changed);
    assert_eq!(changed["model"], plain["model"]);
    let bad = chorus
        .api(Method::PATCH, "/api/agents/plain")
        .json(&json!({"backend": "Claude-Code"}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    let body: Value = bad.json().await?;
    assert_eq!(
        body["error"]["message"],
        "unknown backend 'Claude-Code': use one of api, claude-code, opencode"
    );
    assert_eq!(chorus.agent("plain").await?["backend"], "opencode");
    let page: Value = chorus
        .api(Method::GET, "/api/agents/plain/audit?limit=100")
        .send()
        .await?
        .json()
        .await?;
    let change = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["action"] == "agent:configure:backend")
        .unwrap_or_else(|| panic!("no audit row: {page}"));
    assert_eq!(change["detail"], "old=api new=opencode");

    // The list shows each agent's.
    let list: Value = chorus
        .api(Method::GET, "/api/agents")
        .send()
        .await?
        .json()
        .await?;
    let backends: Vec<(&str, &str)> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["name"].as_str().unwrap(), a["backend"].as_str().unwrap()))
        .collect();
    assert_eq!(
        backends,
        [
            ("coder", "claude-code"),
            ("oc", "opencode"),
            ("plain", "opencode")
        ]
    );

    // The status page lists each CLI, usable or with the reason.
    let status: Value = chorus
        .api(Method::GET, "/api/status")
        .send()
        .await?
        .json()
        .await?;
    let listed: Vec<&str> = status["backends"]
        .as_array()
        .unwrap_or_else(|| panic!("no backends: {status}"))
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(listed, ["claude-code", "opencode"], "{status}");
    for entry in status["backends"].as_array().unwrap() {
        assert!(entry["usable"].is_boolean(), "{entry}");
        assert!(
            entry["usable"] == true || entry["reason"].as_str().is_some(),
            "{entry}"
        );
    }

    // The terminal client: --backend at create and configure, a line per CLI in status.
    let created = client(
        &chorus,
        &[
            "agent",
            "create",
            "viacli",
            "--backend",
            "claude-code",
            "--json",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let agent: Value = serde_json::from_slice(&created.stdout)?;
    assert_eq!(agent["backend"], "claude-code");
    let configured = client(
        &chorus,
        &["agent", "configure", "viacli", "--backend", "api"],
    )
    .await;
    assert!(configured.status.success(), "{}", stderr(&configured));
    assert!(
        stdout(&configured).contains("backend:          api\n"),
        "{}",
        stdout(&configured)
    );
    let refused = client(
        &chorus,
        &["agent", "configure", "viacli", "--backend", "cursor"],
    )
    .await;
    assert!(!refused.status.success());
    assert!(
        stderr(&refused)
            .contains("unknown backend 'cursor': use one of api, claude-code, opencode"),
        "{}",
        stderr(&refused)
    );
    let listed = stdout(&client(&chorus, &["agent", "list"]).await);
    let coder = listed
        .lines()
        .find(|l| l.starts_with("coder "))
        .unwrap_or_else(|| panic!("{listed}"));
    assert!(
        listed.lines().next().unwrap().contains(" BACKEND ") && coder.contains(" claude-code "),
        "{listed}"
    );
    let shown = client(&chorus, &["status"]).await;
    let text = stdout(&shown);
    assert!(text.contains("  backends:\n"), "{text}");
    for cli in ["claude-code", "opencode"] {
        assert!(
            text.contains(&format!("    {cli}: usable"))
                || text.contains(&format!("    {cli}: not usable — ")),
            "{text}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn a_backends_path_that_is_not_a_file_stops_the_start_saying_which() -> anyhow::Result<()> {
    let tmp = tempfile::tempdir()?;
    let missing = tmp.path().join("no-such-claude");
    let (status, said) = Chorus::builder()
        .config(&format!("[backends]\nclaude_code = {missing:?}\n"))
        .run_to_exit(&tmp.path().join("data"), Duration::from_secs(30))
        .await?;
    assert!(!status.success(), "{said}");
    assert!(said.contains("[backends] claude_code: "), "{said}");
    assert!(
        said.contains(&format!("{} is not a file", missing.display())),
        "{said}"
    );
    Ok(())
}
