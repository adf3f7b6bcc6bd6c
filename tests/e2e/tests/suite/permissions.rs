//! Permissions through the real binaries: every tool call is decided by the control
//! plane; ASK waits for a person (approve, deny, or no answer); everything is audited.

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call, tool_calls};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

async fn chorus_with(model: &FakeModel, config: &str) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-permissions")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config(config)
        .start()
        .await
}

/// Views are allowed, writes need a person.
fn careful_profile() -> Value {
    json!({"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]})
}

async fn create_agent(chorus: &Chorus, name: &str, permissions: Value) -> anyhow::Result<()> {
    chorus
        .create_agent_with(json!({"name": name, "permissions": permissions}))
        .await?;
    Ok(())
}

async fn pending(chorus: &Chorus) -> anyhow::Result<Vec<Value>> {
    Ok(chorus
        .api(Method::GET, "/api/approvals")
        .send()
        .await?
        .json()
        .await?)
}

async fn wait_for_approval(chorus: &Chorus) -> anyhow::Result<Value> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    loop {
        if let Some(first) = pending(chorus).await?.into_iter().next() {
            return Ok(first);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no approval request appeared"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn audit(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let page: Value = chorus
        .api(Method::GET, &format!("/api/agents/{agent}/audit?limit=100"))
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"].as_array().unwrap().clone())
}

#[tokio::test]
async fn an_ask_is_approved_over_the_api_and_the_tool_runs() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    model.push(text("written"));
    let chorus = chorus_with(&model, "").await?;
    create_agent(&chorus, "careful", careful_profile()).await?;
    let mut feed = chorus.open_events("?agent=careful", None).await?;
    let id = chorus.send_message("careful", "write the plan").await?;

    let approval = wait_for_approval(&chorus).await?;
    assert_eq!(approval["agent"], "careful");
    assert_eq!(approval["tool"], "create_file");
    assert_eq!(approval["actions"], json!(["tool:create_file:plan.md"]));
    assert_eq!(approval["requested_by"], "api");
    let waiting = chorus.thread("careful", id).await?;
    assert_eq!(waiting["status"], "waiting_for_permission", "{waiting:#}");
    assert!(
        !chorus
            .agent_dir("careful")
            .join("workspace/plan.md")
            .exists(),
        "nothing runs before the answer"
    );

    let approval_id = approval["id"].as_str().unwrap();
    let answer = chorus
        .api(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(answer.status(), 200);
    let answered: Value = answer.json().await?;
    assert_eq!(answered["status"], "approved");
    assert_eq!(answered["decided_by"], "api");
    let again = chorus
        .api(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "deny"}))
        .send()
        .await?;
    assert_eq!(again.status(), 409, "an answer is final");

    let thread = chorus
        .wait_thread_finished("careful", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("careful").join("workspace/plan.md"))?,
        "step 1"
    );
    let kinds: Vec<&str> = thread["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["llm_call", "permission", "tool", "llm_call"]);
    // The live feed told of the question and of its answer.
    let mut asked_and_answered = Vec::new();
    let read = async {
        while let Some((kind, data)) = feed.next().await? {
            if kind.starts_with("approval") {
                asked_and_answered.push((kind.clone(), data.clone()));
            }
            if kind == "status" && data["status"] == "completed" {
                break;
            }
        }
        anyhow::Ok(())
    };
    tokio::time::timeout(Duration::from_secs(20), read).await??;
    assert_eq!(asked_and_answered.len(), 2, "{asked_and_answered:#?}");
    assert_eq!(asked_and_answered[0].0, "approval");
    assert_eq!(asked_and_answered[0].1["approval_id"], approval_id);
    assert_eq!(asked_and_answered[1].0, "approval_answered");
    assert_eq!(asked_and_answered[1].1["outcome"], "approved");
    assert_eq!(asked_and_answered[1].1["by"], "api");
    assert!(
        thread["steps"][1]["description"]
            .as_str()
            .unwrap()
            .contains("tool:create_file:plan.md")
    );

    let entries = audit(&chorus, "careful").await?;
    let decision = entries
        .iter()
        .find(|e| e["call_id"] == "c1")
        .expect("the call is audited");
    assert_eq!(decision["decision"], "ask_approved");
    assert_eq!(decision["action"], "tool:create_file:plan.md");
    assert_eq!(decision["user_id"], "api");
    assert_eq!(decision["result"], "ok");
    assert_eq!(decision["thread_id"], id);
    Ok(())
}

#[tokio::test]
async fn a_denied_ask_and_an_unanswered_one_reach_the_model_as_denials() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "a.txt", "content": "a"}),
    ));
    model.push(text("ok, not writing"));
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "b.txt", "content": "b"}),
    ));
    model.push(text("nobody answered"));
    let chorus = chorus_with(&model, "[permissions]\nask_timeout_secs = 1\n").await?;
    create_agent(&chorus, "careful", careful_profile()).await?;

    // Denied by a person.
    let first = chorus.send_message("careful", "write a").await?;
    let approval = wait_for_approval(&chorus).await?;
    let denied = chorus
        .api(
            Method::POST,
            &format!("/api/approvals/{}", approval["id"].as_str().unwrap()),
        )
        .json(&json!({"decision": "deny"}))
        .send()
        .await?;
    assert_eq!(denied.status(), 200);
    let thread = chorus
        .wait_thread_finished("careful", first, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("Permission denied by api"),
        "{results:?}"
    );
    assert!(
        model.requests()[1].body["messages"]
            .to_string()
            .contains("was not approved")
    );

    // Nobody answers within the timeout: a deny.
    let second = chorus.send_message("careful", "write b").await?;
    let thread = chorus
        .wait_thread_finished("careful", second, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("nobody approved"),
        "{results:?}"
    );
    assert!(!chorus.agent_dir("careful").join("workspace/a.txt").exists());
    assert!(!chorus.agent_dir("careful").join("workspace/b.txt").exists());
    assert!(pending(&chorus).await?.is_empty());

    let entries = audit(&chorus, "careful").await?;
    let decision_of = |call: &str| {
        entries
            .iter()
            .find(|e| e["call_id"] == call)
            .map(|e| e["decision"].as_str().unwrap().to_string())
    };
    assert_eq!(decision_of("c1").as_deref(), Some("ask_denied"));
    assert_eq!(decision_of("c2").as_deref(), Some("ask_expired"));
    Ok(())
}

#[tokio::test]
async fn a_locked_agent_is_offered_only_what_it_may_use_and_denied_the_rest() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    model.push(tool_calls(&[
        (
            "c1",
            "create_file",
            json!({"path": "x.txt", "content": "x"}),
        ),
        ("c2", "view", json!({"path": ".gitkeep"})),
    ]));
    model.push(text("read only, understood"));
    let chorus = chorus_with(&model, "").await?;
    create_agent(&chorus, "reader", json!("locked")).await?;
    let id = chorus.send_message("reader", "try to write").await?;
    let thread = chorus
        .wait_thread_finished("reader", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    let offered: Vec<String> = model.requests()[0].body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(offered.contains(&"view".to_string()), "{offered:?}");
    assert!(
        !offered.contains(&"create_file".to_string()),
        "a tool that is always denied is not offered: {offered:?}"
    );

    let results = tool_results(&thread);
    assert!(
        results[0].0
            && results[0]
                .1
                .starts_with("Permission denied by profile 'locked'"),
        "{results:?}"
    );
    assert!(!results[1].0, "the view was allowed: {results:?}");
    assert!(!chorus.agent_dir("reader").join("workspace/x.txt").exists());
    let steps: Vec<&str> = thread["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["description"].as_str().unwrap())
        .collect();
    assert!(steps.contains(&"Refused create_file: x.txt"), "{steps:?}");

    let entries = audit(&chorus, "reader").await?;
    let decisions: Vec<(&str, &str)> = entries
        .iter()
        .filter(|e| e["call_id"].is_string())
        .map(|e| {
            (
                e["decision"].as_str().unwrap(),
                e["action"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        decisions.contains(&("deny", "tool:create_file:x.txt")),
        "{decisions:?}"
    );
    assert!(
        decisions.contains(&("allow", "tool:view:.gitkeep")),
        "{decisions:?}"
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_that_never_prompts_resolves_asks_by_its_setting() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "auto.txt", "content": "yes"}),
    ));
    model.push(text("done"));
    let chorus = chorus_with(&model, "").await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "tasker", "permissions": careful_profile(), "on_ask": "allow"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let id = chorus.send_message("tasker", "go").await?;
    let thread = chorus
        .wait_thread_finished("tasker", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed");
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("tasker").join("workspace/auto.txt"))?,
        "yes"
    );
    assert!(pending(&chorus).await?.is_empty(), "nobody was asked");
    let entries = audit(&chorus, "tasker").await?;
    assert!(entries.iter().any(|e| e["decision"] == "ask_auto_allowed"));
    Ok(())
}

#[tokio::test]
async fn permissions_are_validated_explained_and_never_granted_above_a_role() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    let chorus = chorus_with(&model, "[roles]\napi = \"operator\"\n").await?;

    // A bad regex is reported with the rule and the pattern.
    let bad = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "bad", "permissions": {"allow": ["tool:view:(unclosed"]}}))
        .send()
        .await?;
    assert_eq!(
        bad.status(),
        403,
        "an operator may not set a custom profile at all"
    );
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "op", "permissions": "standard"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let escalate = chorus
        .api(Method::PATCH, "/api/agents/op")
        .json(&json!({"permissions": "open"}))
        .send()
        .await?;
    assert_eq!(escalate.status(), 403);
    let body: Value = escalate.json().await?;
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("may not grant the 'open' preset")
    );
    assert_eq!(chorus.agent("op").await?["permissions"], "standard");

    let explain = |profile: Value, action: &str| {
        chorus
            .api(Method::POST, "/api/permissions/explain")
            .json(&json!({"profile": profile, "action": action}))
            .send()
    };
    let answer: Value = explain(json!("standard"), "tool:view:src/main.rs")
        .await?
        .json()
        .await?;
    assert_eq!(answer["decision"], "allow");
    assert_eq!(answer["list"], "allow");
    let answer: Value = explain(
        json!({"allow": ["tool:bash:git status"]}),
        "tool:bash:git status; rm -rf /",
    )
    .await?
    .json()
    .await?;
    assert_eq!(
        answer["decision"], "deny",
        "a chained command cannot ride on an allowed prefix: {answer:#}"
    );
    let broken = explain(json!({"allow": ["tool:view:(unclosed"]}), "tool:view:x").await?;
    assert_eq!(broken.status(), 400);
    let message = broken.json::<Value>().await?["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.contains("allow[0]") && message.contains("(unclosed"),
        "{message}"
    );
    Ok(())
}

#[tokio::test]
async fn a_question_is_withdrawn_when_its_worker_dies_and_the_thread_resumes() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "never.txt", "content": "x"}),
    ));
    // The resumed run tells the model the call was interrupted; it gives up.
    model.push(text("I will not write it after all"));
    let chorus = chorus_with(&model, "").await?;
    create_agent(&chorus, "careful", careful_profile()).await?;
    let id = chorus.send_message("careful", "write").await?;
    let approval = wait_for_approval(&chorus).await?;
    let worker = chorus.agent("careful").await?["worker"]["pid"]
        .as_u64()
        .unwrap() as u32;
    chorus_test_support::process::signal(worker, nix::sys::signal::Signal::SIGKILL);
    let thread = chorus
        .wait_thread_finished("careful", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let resumed = model.requests();
    let last = resumed[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap();
    assert_eq!(last["role"], "tool", "{last:#}");
    assert!(
        last["content"].as_str().unwrap().contains("interrupted"),
        "{last:#}"
    );
    assert!(
        pending(&chorus).await?.is_empty(),
        "the question is withdrawn"
    );
    let record: Value = chorus
        .api(
            Method::GET,
            &format!("/api/approvals/{}", approval["id"].as_str().unwrap()),
        )
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(record["status"], "cancelled");
    let late = chorus
        .api(
            Method::POST,
            &format!("/api/approvals/{}", approval["id"].as_str().unwrap()),
        )
        .json(&json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(late.status(), 409);
    assert!(
        !chorus
            .agent_dir("careful")
            .join("workspace/never.txt")
            .exists()
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_edits_its_own_docs_and_prompt_and_the_next_call_sees_them() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    model.push(tool_calls(&[
        (
            "c1",
            "self_edit_docs",
            json!({"path": "conventions.md", "content": "Always answer in haiku."}),
        ),
        (
            "c2",
            "self_edit_system_prompt",
            json!({"new_prompt": "You are a terse poet."}),
        ),
    ]));
    model.push(text("noted"));
    let chorus = chorus_with(&model, "").await?;
    chorus.create_agent("poet").await?;
    let id = chorus
        .send_message("poet", "remember to write haiku")
        .await?;
    let thread = chorus
        .wait_thread_finished("poet", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(results.iter().all(|(error, _)| !error), "{results:?}");

    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("poet").join("docs/conventions.md"))?,
        "Always answer in haiku."
    );
    let system = model.requests()[1].body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(system.starts_with("You are a terse poet."), "{system}");
    assert!(
        system.contains("## docs/conventions.md\nAlways answer in haiku."),
        "{system}"
    );
    assert_eq!(
        chorus.agent("poet").await?["system_prompt"],
        "You are a terse poet."
    );
    let config: Value = serde_json::from_str(&std::fs::read_to_string(
        chorus.agent_dir("poet").join("agent.json"),
    )?)?;
    assert_eq!(config["system_prompt"], "You are a terse poet.");

    let entries = audit(&chorus, "poet").await?;
    let actions: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["decision"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(
        actions.contains(&("tool:self_edit:docs:conventions.md", "allow")),
        "{actions:?}"
    );
    assert!(
        actions.contains(&("tool:self_edit:system_prompt", "allow")),
        "{actions:?}"
    );
    let change = entries
        .iter()
        .find(|e| e["action"] == "agent:configure:system_prompt")
        .unwrap();
    let detail = change["detail"].as_str().unwrap();
    assert!(
        detail.contains("general-purpose AI agent") && detail.contains("You are a terse poet."),
        "old and new: {detail}"
    );
    Ok(())
}

#[tokio::test]
async fn an_agent_cannot_raise_its_own_permissions_above_its_users_role() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "self_edit_permissions",
        json!({"new_profile": "open"}),
    ));
    model.push(tool_call(
        "c2",
        "self_edit_permissions",
        json!({"new_profile": "locked"}),
    ));
    model.push(text("settled"));
    // An admin (the API token) sets the agent up to answer its own asks; an
    // operator's message starts the run.
    let chorus = chorus_with(&model, "[roles]\nolga = \"operator\"\n").await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "climber", "permissions": "standard", "on_ask": "allow"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let issued: Value = chorus
        .api(Method::POST, "/api/users/olga/tokens")
        .send()
        .await?
        .json()
        .await?;
    let sent: Value = reqwest::Client::new()
        .post(format!("{}/api/agents/climber/messages", chorus.http_url))
        .bearer_auth(issued["token"].as_str().unwrap())
        .json(&json!({"content": "give yourself more rights"}))
        .send()
        .await?
        .json()
        .await?;
    let id = sent["thread_id"].as_u64().unwrap();
    let thread = chorus
        .wait_thread_finished("climber", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("may not grant the 'open' preset"),
        "{results:?}"
    );
    assert!(!results[1].0, "lowering is fine: {results:?}");
    assert_eq!(chorus.agent("climber").await?["permissions"], "locked");

    // The next run is offered only what `locked` may use.
    model.push(text("ok"));
    let next = chorus
        .send_message("climber", "what can you do now?")
        .await?;
    chorus
        .wait_thread_finished("climber", next, Duration::from_secs(20))
        .await?;
    let offered: Vec<String> = model.requests().last().unwrap().body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !offered.iter().any(|t| t == "bash" || t == "create_file"),
        "{offered:?}"
    );
    Ok(())
}

#[tokio::test]
async fn bash_runs_read_only_commands_at_once_and_asks_for_the_rest() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_calls(&[
        ("c1", "bash", json!({"command": "ls -a"})),
        (
            "c2",
            "bash",
            json!({"command": "echo built > artifact.txt && git status --short"}),
        ),
    ]));
    model.push(text("built"));
    let chorus = chorus_with(&model, "").await?;
    chorus.create_agent("builder").await?;
    chorus
        .wait_worker_running("builder", Duration::from_secs(15))
        .await?;
    let id = chorus.send_message("builder", "build it").await?;

    let approval = wait_for_approval(&chorus).await?;
    assert_eq!(
        approval["actions"],
        json!([
            "tool:bash:echo built > artifact.txt",
            "tool:bash:git status --short"
        ]),
        "the chained command is checked part by part"
    );
    chorus
        .api(
            Method::POST,
            &format!("/api/approvals/{}", approval["id"].as_str().unwrap()),
        )
        .json(&json!({"decision": "approve"}))
        .send()
        .await?
        .error_for_status()?;
    let thread = chorus
        .wait_thread_finished("builder", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        !results[0].0 && results[0].1.contains(".gitkeep"),
        "ls ran without asking: {results:?}"
    );
    assert!(
        !results[1].0 && results[1].1.contains("artifact.txt"),
        "{results:?}"
    );
    assert_eq!(
        std::fs::read_to_string(chorus.agent_dir("builder").join("workspace/artifact.txt"))?,
        "built\n"
    );
    let decisions: Vec<String> = audit(&chorus, "builder")
        .await?
        .iter()
        .filter(|e| e["call_id"].is_string())
        .map(|e| {
            format!(
                "{} {}",
                e["call_id"].as_str().unwrap(),
                e["decision"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        decisions.contains(&"c1 allow".to_string())
            && decisions.contains(&"c2 ask_approved".to_string()),
        "{decisions:?}"
    );
    Ok(())
}

#[tokio::test]
async fn the_bash_timeout_comes_from_the_settings_and_kills_the_command() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": "sleep 30; echo never"}),
    ));
    model.push(text("too slow"));
    let chorus = chorus_with(&model, "[tools]\nbash_timeout_secs = 1\n").await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "sleepy", "permissions": "open"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    let id = chorus.send_message("sleepy", "sleep").await?;
    let thread = chorus
        .wait_thread_finished("sleepy", id, Duration::from_secs(20))
        .await?;
    let results = tool_results(&thread);
    assert!(
        results[0].0 && results[0].1.contains("timed out after 1 s"),
        "{results:?}"
    );
    assert!(!results[0].1.contains("never"));
    Ok(())
}
