//! The tool registry as users see it: `GET /api/tools`, what an agent's model is
//! offered (`GET /api/agents/{name}/tools`, `chorus tools`), and the renamed job
//! tools answering to their old names too.

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, bin_path};
use reqwest::Method;
use serde_json::{Value, json};

async fn start(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-tools")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .start()
        .await
}

async fn get(chorus: &Chorus, path: &str) -> anyhow::Result<Value> {
    Ok(chorus
        .api(Method::GET, path)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?)
}

fn names<'a>(tools: &'a Value, key: &str) -> Vec<&'a str> {
    tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t[key].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn every_tool_is_listed_with_its_schema_and_where_it_runs() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    let all = get(&chorus, "/api/tools").await?;
    let tools = all["tools"].as_array().unwrap();
    assert!(tools.len() >= 17, "{all:#}");
    for tool in tools {
        assert!(
            tool["name"].is_string() && tool["wire_name"].is_string(),
            "{tool}"
        );
        assert!(tool["description"].as_str().unwrap().len() > 40, "{tool}");
        assert_eq!(tool["schema"]["type"], "object", "{tool}");
        assert!(
            ["worker", "control_plane"].contains(&tool["runs_in"].as_str().unwrap()),
            "{tool}"
        );
        assert!(
            tool.get("decision").is_none(),
            "no agent, no decision: {tool}"
        );
    }
    let find = |name: &str| tools.iter().find(|t| t["name"] == name).unwrap();
    assert_eq!(find("file.read")["wire_name"], "file_read");
    assert_eq!(find("file.read")["runs_in"], "worker");
    assert_eq!(find("self_edit_model")["runs_in"], "control_plane");
    assert_eq!(find("job_output")["schema"]["required"], json!(["job_id"]));
    assert!(
        find("bash")["description"]
            .as_str()
            .unwrap()
            .contains("job_output"),
        "the bash description points to the job tools by their names"
    );
    Ok(())
}

/// Under each preset, the agent's listing is exactly what its model is offered (in
/// order), a tool the profile always denies is absent from both, and each entry
/// says what a typical call gets.
#[tokio::test]
async fn an_agent_lists_what_its_model_is_offered_under_each_preset() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    let all = get(&chorus, "/api/tools").await?;
    let mut offered_counts = Vec::new();
    for preset in ["locked", "standard", "open"] {
        chorus
            .create_agent_with(json!({"name": preset, "permissions": preset}))
            .await?;
        let listed = get(&chorus, &format!("/api/agents/{preset}/tools")).await?;
        for tool in listed["tools"].as_array().unwrap() {
            assert!(
                ["allow", "ask", "deny"].contains(&tool["decision"].as_str().unwrap()),
                "{preset}: {tool}"
            );
        }

        model.push(text("hello"));
        let before = model.requests().len();
        let id = chorus.send_message(preset, "hi").await?;
        let thread = chorus
            .wait_thread_finished(preset, id, Duration::from_secs(20))
            .await?;
        assert_eq!(thread["status"], "completed", "{thread:#}");
        let request = model
            .requests()
            .into_iter()
            .skip(before)
            .find(|r| r.body["tools"].is_array())
            .expect("the model call");
        let sent: Vec<&str> = request.body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names(&listed, "wire_name"), sent, "{preset}");
        offered_counts.push(sent.len());

        let decision = |name: &str| {
            listed["tools"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name)
                .map(|t| t["decision"].as_str().unwrap().to_string())
        };
        match preset {
            "locked" => {
                assert_eq!(decision("create_file"), None, "always denied: not offered");
                assert_eq!(decision("bash"), None, "always denied: not offered");
                assert_eq!(decision("view").as_deref(), Some("allow"));
            }
            "standard" => {
                assert_eq!(decision("file.read").as_deref(), Some("allow"));
                assert_eq!(decision("job_output").as_deref(), Some("allow"));
            }
            _ => {
                assert_eq!(names(&listed, "name"), names(&all, "name"));
                assert!(decision("bash").is_some_and(|d| d == "allow"));
            }
        }
    }
    assert!(
        offered_counts[0] < offered_counts[2],
        "locked offers less than open: {offered_counts:?}"
    );

    // The terminal client prints the same as a table, and as JSON.
    let out = tokio::process::Command::new(bin_path("chorus"))
        .args(["tools", "locked"])
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .env("NO_COLOR", "1")
        .output()
        .await?;
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{table}");
    assert!(table.starts_with("NAME"), "{table}");
    assert!(table.contains("DECISION"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("view ") && l.contains(" allow ")),
        "{table}"
    );
    assert!(!table.contains("create_file"), "{table}");
    let out = tokio::process::Command::new(bin_path("chorus"))
        .args(["tools", "--json"])
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .output()
        .await?;
    let json: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(json, all);

    let missing = chorus
        .api(Method::GET, "/api/agents/nobody/tools")
        .send()
        .await?;
    assert_eq!(missing.status(), 404);
    Ok(())
}

/// `job_output`/`job_stop` and their old names `task_output`/`task_stop` (with
/// `job_id` or `task_id`) all reach the same job.
#[tokio::test]
async fn the_job_tools_answer_to_their_new_and_old_names() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    chorus
        .create_agent_with(json!({"name": "dev", "permissions": "open"}))
        .await?;
    let marker = format!("310.{}{}", std::process::id(), line!());
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("echo up; sleep {marker}"), "run_in_background": true}),
    ));
    model.push(tool_call(
        "c2",
        "job_output",
        json!({"job_id": 1, "wait": 0.5}),
    ));
    model.push(tool_call("c3", "task_output", json!({"task_id": 1})));
    model.push(tool_call("c4", "job_output", json!({"task_id": 1})));
    model.push(tool_call("c5", "job_stop", json!({"job_id": 1})));
    model.push(tool_call("c6", "task_stop", json!({"task_id": 1})));
    model.push(text("done"));
    let id = chorus
        .send_message("dev", "start, read and stop a job")
        .await?;
    let thread = chorus
        .wait_thread_finished("dev", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(results.iter().all(|(error, _)| !error), "{results:#?}");
    assert!(
        results[1].1.starts_with("task 1 is running"),
        "{results:#?}"
    );
    assert!(results[1].1.contains("up\n"), "{results:#?}");
    assert!(
        results[2].1.starts_with("task 1 is running"),
        "{results:#?}"
    );
    assert!(
        results[3].1.starts_with("task 1 is running"),
        "{results:#?}"
    );
    assert!(results[4].1.starts_with("task 1 stopped"), "{results:#?}");
    assert!(
        results[5].1.starts_with("task 1 had ended already"),
        "{results:#?}"
    );
    Ok(())
}

/// A stored custom profile written for the old name still decides the new one.
#[tokio::test]
async fn a_custom_rule_for_task_output_still_allows_job_output() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    chorus
        .create_agent_with(
            json!({"name": "old", "permissions": {"allow": ["tool:task_output:.*"]}}),
        )
        .await?;
    let listed = get(&chorus, "/api/agents/old/tools").await?;
    assert_eq!(names(&listed, "name"), vec!["job_output"], "{listed:#}");
    assert_eq!(listed["tools"][0]["decision"], "allow");
    model.push(tool_call("c1", "job_output", json!({"job_id": 7})));
    model.push(text("ok"));
    let id = chorus.send_message("old", "read job 7").await?;
    let thread = chorus
        .wait_thread_finished("old", id, Duration::from_secs(20))
        .await?;
    let results = tool_results(&thread);
    // Allowed by the old rule: the worker ran it (and knows no job 7).
    assert!(!results[0].1.contains("Permission denied"), "{results:?}");
    assert!(results[0].1.contains('7'), "{results:?}");
    Ok(())
}

/// A tool the control plane runs has its step open from before its check until its
/// result is back, marked as running there: while a person is asked, the thread
/// shows the tool (kind `tool`, still open) around the permission step.
#[tokio::test]
async fn a_control_plane_tool_shows_its_step_while_it_waits() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    chorus
        .create_agent_with(
            json!({"name": "self", "permissions": {"ask": ["tool:self_edit:system_prompt"]}}),
        )
        .await?;
    model.push(tool_call(
        "c1",
        "self_edit_system_prompt",
        json!({"new_prompt": "Be brief."}),
    ));
    model.push(text("done"));
    let id = chorus.send_message("self", "be brief from now on").await?;
    const SHOWN: &str = "Executing self_edit_system_prompt in the control plane";
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let approval_id = loop {
        let pending: Vec<Value> = get(&chorus, "/api/approvals")
            .await?
            .as_array()
            .cloned()
            .unwrap_or_default();
        if let Some(first) = pending.first() {
            break first["id"].as_str().unwrap().to_string();
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "no approval asked");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    // While the person is asked, the tool's step is open (the step is stored once
    // its event is: wait for it).
    let open = loop {
        let thread = chorus.thread("self", id).await?;
        let steps = thread["steps"].as_array().cloned().unwrap_or_default();
        if let Some(step) = steps.iter().find(|s| s["description"] == SHOWN) {
            break step.clone();
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{thread:#}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    };
    assert_eq!(open["kind"], "tool", "{open}");
    assert_eq!(open["runs_in"], "control_plane", "marked as data: {open}");
    assert!(open["ended_at"].is_null(), "open while it waits: {open}");
    chorus
        .api(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await?
        .error_for_status()?;
    let thread = chorus
        .wait_thread_finished("self", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let steps = thread["steps"].as_array().unwrap();
    let tool = steps.iter().find(|s| s["description"] == SHOWN).unwrap();
    let permission = steps.iter().find(|s| s["kind"] == "permission").unwrap();
    assert!(
        tool["number"].as_u64() < permission["number"].as_u64(),
        "the tool's step opens before its check: {steps:#?}"
    );
    assert!(
        tool["ended_at"].as_str() >= permission["ended_at"].as_str(),
        "and ends after it: {steps:#?}"
    );
    assert_eq!(tool["failed"], false, "{tool}");
    assert!(
        tool_results(&thread)[0]
            .1
            .starts_with("System prompt updated")
    );
    Ok(())
}

/// The tools of each model request, as `(wire name, description, schema)`.
fn offered_in(request: &Value) -> Vec<(String, String, Value)> {
    request["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    let f = &t["function"];
                    (
                        f["name"].as_str().unwrap().to_string(),
                        f["description"].as_str().unwrap().to_string(),
                        f["parameters"].clone(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The same, as the agent's listing shows them.
fn listed_as_offered(listed: &Value) -> Vec<(String, String, Value)> {
    listed["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["wire_name"].as_str().unwrap().to_string(),
                t["description"].as_str().unwrap().to_string(),
                t["schema"].clone(),
            )
        })
        .collect()
}

/// The model is offered exactly what the agent's listing shows, schema for schema
/// and word for word (the control plane renders both and the worker offers what it
/// is sent), and a permissions self-edit changes what is offered at the very next
/// model call of the same run.
#[tokio::test]
async fn the_model_is_offered_the_listed_schemas_and_a_self_edit_changes_them_mid_run()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-tools")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[tools]\nbash_timeout_secs = 77\n")
        .start()
        .await?;
    chorus
        .create_agent_with(json!({"name": "shifter", "permissions": "open"}))
        .await?;
    let open = get(&chorus, "/api/agents/shifter/tools").await?;
    model.push(tool_call(
        "c1",
        "self_edit_permissions",
        json!({"new_profile": "locked"}),
    ));
    model.push(text("done"));
    let before = model.requests().len();
    let id = chorus.send_message("shifter", "lock yourself down").await?;
    let thread = chorus
        .wait_thread_finished("shifter", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(!tool_results(&thread)[0].0, "{thread:#}");
    // Where each step's tool ran is data of the step.
    let steps = thread["steps"].as_array().unwrap();
    for step in steps {
        match step["kind"].as_str().unwrap() {
            "tool" => assert_eq!(step["runs_in"], "control_plane", "{step}"),
            _ => assert!(step.get("runs_in").is_none(), "{step}"),
        }
    }
    assert!(steps.iter().any(|s| s["kind"] == "tool"), "{steps:#?}");
    let locked = get(&chorus, "/api/agents/shifter/tools").await?;
    let calls: Vec<_> = model
        .requests()
        .into_iter()
        .skip(before)
        .filter(|r| r.body["tools"].is_array())
        .collect();
    assert_eq!(calls.len(), 2, "one call before the edit, one after");
    assert_eq!(offered_in(&calls[0].body), listed_as_offered(&open));
    assert_eq!(offered_in(&calls[1].body), listed_as_offered(&locked));
    assert!(
        offered_in(&calls[1].body).len() < offered_in(&calls[0].body).len(),
        "locked offers less than open"
    );
    assert!(
        offered_in(&calls[0].body)
            .iter()
            .any(|(name, description, _)| name == "bash" && description.contains("default 77 s")),
        "the bash description quotes the configured default timeout"
    );
    Ok(())
}
