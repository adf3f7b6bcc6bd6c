//! "Read-only" commands are read-only, through the real binaries: an agent under
//! `standard` writes git configuration naming its own script and runs `git status`,
//! which the preset allows without asking; the script never runs.

use std::path::Path;
use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_calls};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

async fn chorus_with(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-read-only")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

async fn standard_agent(chorus: &Chorus, name: &str, on_ask: &str) -> anyhow::Result<()> {
    chorus
        .create_agent_with(json!({"name": name, "permissions": "standard", "on_ask": on_ask}))
        .await?;
    chorus
        .wait_worker_running(name, Duration::from_secs(15))
        .await?;
    Ok(())
}

/// The decision audited for each call id.
async fn decisions(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<(String, String)>> {
    let page: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/audit?limit=100"))
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            Some((
                e["call_id"].as_str()?.to_string(),
                e["decision"].as_str()?.to_string(),
            ))
        })
        .collect())
}

/// A script that appends to `marker`, and the configuration that names it as the
/// fsmonitor hook (run through the shell, so the file needs no execute bit).
fn script_and_config(workspace: &Path, marker: &Path) -> (String, String) {
    let script = format!("echo pwned >> '{}'\n", marker.display());
    let config = format!(
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = sh {}\n",
        workspace.join("evil.sh").display()
    );
    (script, config)
}

#[tokio::test]
async fn git_status_never_runs_a_script_the_agent_configured() -> anyhow::Result<()> {
    let outside = tempfile::tempdir()?;
    let marker = outside.path().join("marker");
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    standard_agent(&chorus, "prober", "deny").await?;
    let workspace = chorus.agent_dir("prober").join("workspace");
    let (script, config) = script_and_config(&workspace, &marker);
    model.push(tool_calls(&[
        (
            "c1",
            "create_file",
            json!({"path": "evil.sh", "content": script}),
        ),
        (
            "c2",
            "create_file",
            json!({"path": ".gitconfig", "content": config}),
        ),
        (
            "c3",
            "create_file",
            json!({"path": ".config/git/config", "content": config}),
        ),
        (
            "c4",
            "create_file",
            json!({"path": ".git/config", "content": config}),
        ),
        (
            "c5",
            "create_file",
            json!({"path": ".gitattributes", "content": "* diff=evil filter=evil\n"}),
        ),
        ("c6", "bash", json!({"command": "git status --short"})),
        (
            "c7",
            "bash",
            json!({"command": "rg --pre ./evil.sh pattern"}),
        ),
        ("c8", "bash", json!({"command": "git diff --output=x"})),
    ]));
    model.push(text("done"));
    let id = chorus.send_message("prober", "look around").await?;
    let thread = chorus
        .wait_thread_finished("prober", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    assert!(
        !marker.exists(),
        "the agent's script ran: {}",
        std::fs::read_to_string(&marker).unwrap_or_default()
    );
    let results = tool_results(&thread);
    assert_eq!(results.len(), 8, "{results:?}");
    for (i, written) in results[..3].iter().enumerate() {
        assert!(!written.0, "call c{} was refused: {results:?}", i + 1);
    }
    let (status_failed, status) = &results[5];
    assert!(
        !status_failed && status.contains("?? evil.sh") && status.contains("?? .gitconfig"),
        "git status still works and its output comes back: {status}"
    );
    for i in [3, 4, 6, 7] {
        assert!(results[i].0, "call c{} was not refused: {results:?}", i + 1);
    }
    assert!(
        !std::fs::read_to_string(workspace.join(".git/config"))?.contains("fsmonitor"),
        ".git/config was written"
    );
    assert!(!workspace.join(".gitattributes").exists());
    assert!(
        !workspace.join("x").exists(),
        "git diff --output wrote a file"
    );

    let audited = decisions(&chorus, "prober").await?;
    for call in ["c4", "c5", "c7", "c8"] {
        assert!(
            audited.contains(&(call.to_string(), "ask_auto_denied".to_string())),
            "{call} asks and is denied: {audited:?}"
        );
    }
    for call in ["c1", "c2", "c3", "c6"] {
        assert!(
            audited.contains(&(call.to_string(), "allow".to_string())),
            "{call} is allowed: {audited:?}"
        );
    }
    Ok(())
}

#[tokio::test]
async fn an_approved_git_config_still_names_no_hook_git_status_runs() -> anyhow::Result<()> {
    let outside = tempfile::tempdir()?;
    let marker = outside.path().join("marker");
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model).await?;
    standard_agent(&chorus, "approved", "allow").await?;
    let workspace = chorus.agent_dir("approved").join("workspace");
    let (script, config) = script_and_config(&workspace, &marker);
    model.push(tool_calls(&[
        (
            "c1",
            "create_file",
            json!({"path": "evil.sh", "content": script}),
        ),
        (
            "c2",
            "create_file",
            json!({"path": ".git/config", "content": config}),
        ),
        ("c3", "bash", json!({"command": "git status --short"})),
    ]));
    model.push(text("done"));
    let id = chorus.send_message("approved", "configure git").await?;
    let thread = chorus
        .wait_thread_finished("approved", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        std::fs::read_to_string(workspace.join(".git/config"))?.contains("fsmonitor"),
        "the write was approved: {results:?}"
    );
    assert!(
        !results[2].0 && results[2].1.contains("?? evil.sh"),
        "{results:?}"
    );
    assert!(!marker.exists(), "the fsmonitor hook ran: {results:?}");
    Ok(())
}
