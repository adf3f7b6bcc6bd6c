//! The task board's flow through the real binaries and a fake model (issue 28's
//! acceptance): planned by the planner (after questions), started by a person,
//! worked by the agent the plan names (writing a file, asking another agent,
//! delegating a sub-task), closed by a completion report; the review step; the one
//! follow-up and the protocol violation; questions that survive a restart; loops and
//! depth refused.

use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi};
use reqwest::Method;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(60);

async fn start(model: &FakeModel, data_dir: Option<&std::path::Path>) -> anyhow::Result<Chorus> {
    let mut builder = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-board")
        .env("CHORUS_DEFAULT_MODEL", "fake-model");
    if let Some(dir) = data_dir {
        builder = builder.data_dir(dir);
    }
    builder.start().await
}

async fn agents(chorus: &Chorus, names: &[&str]) -> anyhow::Result<()> {
    for name in names {
        chorus
            .create_agent_with(json!({"name": name, "permissions": "standard",
                "system_prompt": format!("You are {name}.")}))
            .await?;
    }
    Ok(())
}

async fn history(chorus: &Chorus, id: u64) -> anyhow::Result<Vec<Value>> {
    let history = chorus
        .ok(Method::GET, &format!("/api/tasks/{id}/history"), None)
        .await?;
    Ok(history["events"].as_array().cloned().unwrap_or_default())
}

async fn thread(chorus: &Chorus, agent: &str, id: u64) -> anyhow::Result<Value> {
    chorus
        .ok(
            Method::GET,
            &format!("/api/agents/{agent}/threads/{id}"),
            None,
        )
        .await
}

fn user_messages(thread: &Value) -> Vec<String> {
    thread["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "user")
                .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn plan(assignee: &str) -> Value {
    json!({"summary": "Write a greeting file", "requirements": ["greeting.txt says hello"],
           "acceptance_criteria": ["the file exists"], "steps": ["write greeting.txt"],
           "assignee": assignee})
}

/// A task's runs of one role (`planner`, `worker`, `answerer`), oldest first.
fn runs_in_role<'a>(task: &'a Value, role: &str) -> Vec<&'a Value> {
    task["runs"]
        .as_array()
        .map(|runs| runs.iter().filter(|r| r["role"] == role).collect())
        .unwrap_or_default()
}

/// The kinds of a task's history, in order.
fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .map(|e| e["kind"].as_str().unwrap_or_default().to_string())
        .collect()
}

/// Asserts `wanted` occur in `events` in this order (others may come between).
/// A history event wanted: its kind, and what must hold of it.
type Wanted<'a> = (&'a str, fn(&Value) -> bool);

fn in_order(events: &[Value], wanted: &[Wanted]) {
    let mut at = 0;
    for (kind, holds) in wanted {
        match events[at..]
            .iter()
            .position(|e| e["kind"] == *kind && holds(e))
        {
            Some(i) => at += i + 1,
            None => panic!(
                "no {kind} (in order) in {:#}",
                Value::Array(events.to_vec())
            ),
        }
    }
}

fn any(_: &Value) -> bool {
    true
}

/// The whole flow: questions (one with options), answers to the same planner
/// thread, a plan naming coder, Start, a file written, a question to reviewer, a
/// sub-task delegated to reviewer which reports, coder's report, the task completed;
/// the history has every step, every tool call, the chain, and who changed each status.
#[tokio::test]
async fn a_task_is_planned_after_questions_worked_with_help_and_completed_by_its_report()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    agents(&chorus, &["coder", "reviewer"]).await?;

    model.push(tool_call("p1", "ask_questions", json!({"questions": [
        {"id": "q1", "question": "Which greeting?", "options": [{"label": "hello", "description": "plain"}, {"label": "hi"}]},
        {"id": "q2", "question": "Which file name?"}]})));
    let (id, created) = chorus
        .create_task(json!({"title": "Greet", "description": "Write a greeting file"}))
        .await?;
    assert_eq!(created["status"], "planning");
    // The answer is the task as GET shows it: waiting on its planner.
    assert_eq!(created["waiting_on"]["kind"], "planner", "{created:#}");

    let asked = chorus.wait_task(id, "awaiting_input", WAIT).await?;
    let questions = asked["questions"].as_array().unwrap();
    assert_eq!(questions.len(), 2, "{asked:#}");
    assert_eq!(questions[0]["options"][0]["label"], "hello");
    assert_eq!(asked["waiting_on"]["kind"], "question", "{asked:#}");
    let planner_thread = asked["runs"][0]["thread_id"].as_u64().unwrap();

    // An assignee that is not an agent is refused back to the planner, with the list.
    model.push(tool_call("p2", "submit_plan", plan("nobody")));
    model.push(tool_call("p3", "submit_plan", plan("coder")));
    chorus
        .ok(
            Method::POST,
            &format!("/api/tasks/{id}/answers"),
            Some(json!({"answers": {"q1": "hello", "q2": "greeting.txt"}})),
        )
        .await?;
    let planned = chorus.wait_task(id, "planned", WAIT).await?;
    assert_eq!(planned["assignee"], "coder");
    assert_eq!(planned["summary"], "Write a greeting file");
    let planner_runs = runs_in_role(&planned, "planner");
    assert_eq!(
        planner_runs.len(),
        1,
        "the answers went to the same planner thread: {planned:#}"
    );
    assert_eq!(planner_runs[0]["thread_id"], planner_thread);
    let planner = thread(&chorus, "planner", planner_thread).await?;
    let said = user_messages(&planner);
    assert!(
        said.len() >= 2 && said[1].contains("greeting.txt"),
        "the answers are the planner's next message: {said:#?}"
    );
    let refused = tool_results(&planner);
    assert!(
        refused.iter().any(|(error, r)| *error
            && r.contains("'nobody' is not an agent")
            && r.contains("coder, reviewer")),
        "{refused:#?}"
    );

    // An attachment, uploaded before Start, is in the task's directory for the agent.
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(b"say hello".to_vec()).file_name("notes.md"),
    );
    let uploaded = chorus
        .api(Method::POST, &format!("/api/tasks/{id}/attachments"))
        .multipart(form)
        .send()
        .await?;
    assert_eq!(uploaded.status(), 201);

    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "greeting.txt", "content": "hello"}),
    ));
    model.push(tool_call(
        "c2",
        "ask_agent",
        json!({"agent": "reviewer", "question": "Is 'hello' friendly?"}),
    ));
    model.push(text("Yes, it is friendly."));
    model.push(tool_call(
        "c3",
        "delegate_to_agent",
        json!({"agent": "reviewer", "instructions": "Check greeting.txt says hello"}),
    ));
    model.push(tool_call(
        "r0",
        "create_file",
        json!({"path": "review.md", "content": "looks good"}),
    ));
    model.push(tool_call(
        "r1",
        "completion_report",
        json!({"status": "complete", "summary": "checked", "output": "wrote review.md and notes.txt"}),
    ));
    model.push(tool_call("c4", "completion_report", json!({"status": "complete", "summary": "wrote greeting.txt", "output": "greeting.txt: hello"})));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;

    assert_eq!(done["report"]["status"], "complete", "{done:#}");
    assert_eq!(done["report"]["summary"], "wrote greeting.txt");
    let attached = chorus
        .agent_dir("coder")
        .join("workspace")
        .join(format!("tasks/{id}/notes.md"));
    assert_eq!(std::fs::read_to_string(&attached)?, "say hello");
    let written = chorus
        .agent_dir("coder")
        .join("workspace")
        .join(format!("tasks/{id}/greeting.txt"));
    assert_eq!(
        std::fs::read_to_string(&written)?,
        "hello",
        "the file is in the task's directory"
    );
    assert_eq!(done["chain"][0]["agent"], "coder");
    assert!(done["waiting_on"].is_null(), "{done:#}");

    // The sub-task: a child task of reviewer, reported complete, its chain coder → reviewer.
    let children = chorus
        .ok(Method::GET, "/api/tasks?agent=reviewer", None)
        .await?;
    let child = children["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["parent_id"] == id)
        .cloned()
        .unwrap_or_else(|| panic!("a child task: {children:#}"));
    let child = chorus.task(child["id"].as_u64().unwrap()).await?;
    assert_eq!(child["status"], "completed", "{child:#}");
    let chain: Vec<&str> = done["chain"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["agent"].as_str().unwrap())
        .collect();
    assert_eq!(chain, ["coder", "reviewer"], "the parent's chain: {done:#}");
    assert_eq!(done["chain"][1]["task_id"], child["id"], "{done:#}");
    assert!(
        done["chain"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| !c["ended_at"].is_null()),
        "{done:#}"
    );

    // Coder's thread got reviewer's answer and the child's report as next messages.
    let worker_run = done["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "worker")
        .unwrap();
    let coder = thread(&chorus, "coder", worker_run["thread_id"].as_u64().unwrap()).await?;
    let said = user_messages(&coder);
    assert!(
        said.iter().any(|m| m.contains("Yes, it is friendly.")),
        "{said:#?}"
    );
    assert!(
        said.iter()
            .any(|m| m.contains("reported complete") && m.contains("wrote review.md")),
        "{said:#?}"
    );
    // The delegate's claims, checked: the file it wrote is there, the other is not.
    assert!(
        said.iter()
            .any(|m| m.contains("found review.md; NOT found notes.txt")),
        "{said:#?}"
    );
    assert!(
        tool_results(&coder).iter().all(|(error, _)| !error),
        "{coder:#}"
    );

    let events = history(&chorus, id).await?;
    let ids: Vec<u64> = events.iter().map(|e| e["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "ids grow: {ids:?}");
    in_order(
        &events,
        &[
            ("created", |e| e["by"] == "api"),
            ("planning_started", any),
            ("question_asked", any),
            ("status_changed", |e| {
                e["data"]["to"] == "awaiting_input"
                    && e["by"].as_str().unwrap().starts_with("agent:planner:")
            }),
            ("question_answered", |e| e["by"] == "api"),
            ("status_changed", |e| {
                e["data"]["to"] == "planning" && e["by"] == "api"
            }),
            ("planning_finished", any),
            ("status_changed", |e| {
                e["data"]["to"] == "planned"
                    && e["by"].as_str().unwrap().starts_with("agent:planner:")
            }),
            ("status_changed", |e| {
                e["data"]["to"] == "active" && e["by"] == "api"
            }),
            ("started", |e| e["data"]["agent"] == "coder"),
            ("handoff_started", |e| e["data"]["agent"] == "coder"),
            ("tool_call", |e| {
                e["data"]["tool"] == "create_file" && e["data"]["status"] == "ok"
            }),
            ("question_asked", |e| e["data"]["to"] == "reviewer"),
            ("question_answered", |e| e["data"]["by_agent"] == "reviewer"),
            ("handoff_started", |e| e["data"]["agent"] == "reviewer"),
            ("handoff_completed", |e| e["data"]["agent"] == "reviewer"),
            ("report_received", |e| e["data"]["status"] == "complete"),
            ("status_changed", |e| {
                e["data"]["to"] == "completed"
                    && e["by"].as_str().unwrap().starts_with("agent:coder:")
            }),
        ],
    );
    assert!(model.take_violations().is_empty());
    Ok(())
}

/// Creates a task and lets the planner plan it for `assignee` at once.
async fn planned_task(
    chorus: &Chorus,
    model: &FakeModel,
    body: Value,
    assignee: &str,
) -> anyhow::Result<u64> {
    model.push(tool_call("plan", "submit_plan", plan(assignee)));
    let created = chorus.ok(Method::POST, "/api/tasks", Some(body)).await?;
    let id = created["id"].as_u64().unwrap();
    chorus.wait_task(id, "planned", WAIT).await?;
    Ok(id)
}

/// With review on, a complete report waits for a person: sent back with a message,
/// the same thread goes on; accepted, the task completes.
#[tokio::test]
async fn a_reviewed_task_is_sent_back_into_the_same_thread_then_accepted() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    agents(&chorus, &["coder"]).await?;
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "Greet", "description": "d", "review": true}),
        "coder",
    )
    .await?;

    model.push(tool_call(
        "c1",
        "completion_report",
        json!({"status": "complete", "summary": "first", "output": "o"}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let review = chorus.wait_task(id, "review", WAIT).await?;
    assert_eq!(review["report"]["summary"], "first");
    assert_eq!(review["waiting_on"]["kind"], "person");
    let (status, refused) = chorus
        .call(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    assert_eq!(status, 409, "{refused:#}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("review"),
        "{refused:#}"
    );

    model.push(tool_call(
        "c2",
        "completion_report",
        json!({"status": "complete", "summary": "second", "output": "o!"}),
    ));
    chorus
        .ok(
            Method::POST,
            &format!("/api/tasks/{id}/send-back"),
            Some(json!({"message": "add an exclamation mark"})),
        )
        .await?;
    let again = chorus.wait_task(id, "review", WAIT).await?;
    assert_eq!(again["report"]["summary"], "second", "{again:#}");
    let workers = runs_in_role(&again, "worker");
    assert_eq!(workers.len(), 1, "the same run goes on: {again:#}");
    let coder = thread(&chorus, "coder", workers[0]["thread_id"].as_u64().unwrap()).await?;
    assert!(
        user_messages(&coder)
            .iter()
            .any(|m| m.contains("add an exclamation mark")),
        "{coder:#}"
    );

    let accepted = chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/accept"), None)
        .await?;
    assert_eq!(accepted["status"], "completed");
    let events = history(&chorus, id).await?;
    in_order(
        &events,
        &[
            ("status_changed", |e| e["data"]["to"] == "review"),
            ("status_changed", |e| {
                e["data"]["to"] == "active" && e["by"] == "api"
            }),
            ("status_changed", |e| e["data"]["to"] == "review"),
            ("status_changed", |e| {
                e["data"]["to"] == "completed" && e["by"] == "api"
            }),
        ],
    );
    Ok(())
}

/// A turn without a report gets exactly one follow-up naming the role's tools;
/// ending again without one fails the task as a protocol violation, with the raw
/// output kept. A delegate's thread never gets its parent's follow-up.
#[tokio::test]
async fn a_silent_worker_gets_one_follow_up_then_fails_and_a_delegate_never_gets_its_parents()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    agents(&chorus, &["coder", "reviewer"]).await?;
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "T", "description": "d"}),
        "coder",
    )
    .await?;

    model.push(tool_call(
        "c1",
        "delegate_to_agent",
        json!({"agent": "reviewer", "instructions": "look"}),
    ));
    model.push(tool_call(
        "r1",
        "completion_report",
        json!({"status": "complete", "summary": "looked", "output": ""}),
    ));
    model.push(text("I think I am done."));
    model.push(text("Really, all done."));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let failed = chorus.wait_task(id, "failed", WAIT).await?;
    assert_eq!(
        failed["report"]["status"], "protocol_violation",
        "{failed:#}"
    );
    assert_eq!(failed["report"]["output"], "Really, all done.");
    let run = failed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "worker")
        .unwrap();
    assert_eq!(run["outcome"], "protocol_violation");

    let events = history(&chorus, id).await?;
    assert_eq!(
        kinds(&events).iter().filter(|k| *k == "nudge_sent").count(),
        1,
        "{events:#?}"
    );
    let coder = thread(&chorus, "coder", run["thread_id"].as_u64().unwrap()).await?;
    let nudges: Vec<String> = user_messages(&coder)
        .into_iter()
        .filter(|m| m.contains("without a call of"))
        .collect();
    assert_eq!(nudges.len(), 1);
    assert!(
        nudges[0].contains("`completion_report`") && !nudges[0].contains("submit_plan"),
        "{}",
        nudges[0]
    );

    let children = chorus
        .ok(Method::GET, "/api/tasks?agent=reviewer", None)
        .await?;
    let child = &children["tasks"][0];
    let child = chorus.task(child["id"].as_u64().unwrap()).await?;
    let reviewer = thread(
        &chorus,
        "reviewer",
        child["runs"][0]["thread_id"].as_u64().unwrap(),
    )
    .await?;
    assert!(
        user_messages(&reviewer)
            .iter()
            .all(|m| !m.contains("without a call of")),
        "{reviewer:#}"
    );
    Ok(())
}

/// A planner's question stays open across a SIGKILL of its worker and then of the
/// control plane; answered after the restart, the same planner thread goes on.
#[tokio::test]
async fn a_question_survives_a_crash_and_its_answer_continues_the_same_thread() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    let data = tempfile::tempdir()?;
    let chorus = start(&model, Some(data.path())).await?;
    agents(&chorus, &["coder"]).await?;
    model.push(tool_call(
        "p1",
        "ask_questions",
        json!({"questions": [{"id": "q1", "question": "Which port?"}]}),
    ));
    let (id, _) = chorus
        .create_task(json!({"title": "Serve", "description": "d"}))
        .await?;
    let asked = chorus.wait_task(id, "awaiting_input", WAIT).await?;
    let planner_thread = asked["runs"][0]["thread_id"].as_u64().unwrap();
    // The planner's worker is SIGKILLed, then the control plane: the question stays.
    let worker = chorus.wait_worker_running("planner", WAIT).await?;
    chorus_test_support::process::signal(worker, nix::sys::signal::Signal::SIGKILL);
    let still = chorus.task(id).await?;
    assert_eq!(still["status"], "awaiting_input", "{still:#}");
    chorus.kill().await?;

    let chorus = start(&model, Some(data.path())).await?;
    let still = chorus.task(id).await?;
    assert_eq!(still["status"], "awaiting_input");
    assert!(still["questions"][0]["answer"].is_null());
    model.push(tool_call("p2", "submit_plan", plan("coder")));
    chorus
        .ok(
            Method::POST,
            &format!("/api/tasks/{id}/answers"),
            Some(json!({"answers": {"q1": "8080"}})),
        )
        .await?;
    let planned = chorus.wait_task(id, "planned", WAIT).await?;
    assert_eq!(planned["runs"].as_array().unwrap().len(), 1, "{planned:#}");
    let planner = thread(&chorus, "planner", planner_thread).await?;
    let said = user_messages(&planner);
    assert!(
        said[0].contains("Task") && said.last().unwrap().contains("8080"),
        "{said:#?}"
    );
    Ok(())
}

/// A → B → A through `ask_agent` is refused as a loop, and a delegation past the
/// depth bound is refused; both say why, and the asker goes on.
#[tokio::test]
async fn loops_and_chains_past_the_bound_are_refused_with_a_clear_error() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    agents(&chorus, &["coder", "reviewer"]).await?;
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "T", "description": "d"}),
        "coder",
    )
    .await?;

    model.push(tool_call(
        "c1",
        "ask_agent",
        json!({"agent": "reviewer", "question": "q?"}),
    ));
    model.push(tool_call(
        "r1",
        "ask_agent",
        json!({"agent": "coder", "question": "back at you?"}),
    ));
    model.push(text("No idea, sorry."));
    model.push(tool_call(
        "c2",
        "completion_report",
        json!({"status": "complete", "summary": "s", "output": ""}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    let answerer = done["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "answerer")
        .cloned()
        .unwrap_or_else(|| panic!("an answerer run: {done:#}"));
    let reviewer = thread(&chorus, "reviewer", answerer["thread_id"].as_u64().unwrap()).await?;
    let results = tool_results(&reviewer);
    assert!(
        results
            .iter()
            .any(|(error, r)| *error && r.contains("loop") && r.contains("coder → reviewer")),
        "{results:#?}"
    );
    Ok(())
}

/// A delegation past `[tasks] max_delegation_depth` is refused saying so, and the
/// delegate goes on; a task past its model-call limit fails with the reason and
/// its partial output.
#[tokio::test]
async fn a_chain_past_the_bound_is_refused_and_a_task_past_its_limit_fails() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-board")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[tasks]\nmax_delegation_depth = 2\nmodel_call_limit = 6\n")
        .start()
        .await?;
    agents(&chorus, &["coder", "reviewer", "tester"]).await?;
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "T", "description": "d"}),
        "coder",
    )
    .await?;

    model.push(tool_call(
        "c1",
        "delegate_to_agent",
        json!({"agent": "reviewer", "instructions": "review"}),
    ));
    model.push(tool_call(
        "r1",
        "delegate_to_agent",
        json!({"agent": "tester", "instructions": "test"}),
    ));
    model.push(tool_call(
        "r2",
        "completion_report",
        json!({"status": "complete", "summary": "reviewed", "output": ""}),
    ));
    model.push(tool_call(
        "c2",
        "completion_report",
        json!({"status": "complete", "summary": "done", "output": ""}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    let child = chorus
        .ok(Method::GET, "/api/tasks?agent=reviewer", None)
        .await?["tasks"][0]
        .clone();
    let child = chorus.task(child["id"].as_u64().unwrap()).await?;
    let reviewer = thread(
        &chorus,
        "reviewer",
        child["runs"][0]["thread_id"].as_u64().unwrap(),
    )
    .await?;
    let results = tool_results(&reviewer);
    assert!(
        results.iter().any(|(error, r)| *error
            && r.contains("2 agents deep")
            && r.contains("max_delegation_depth")),
        "{results:#?}"
    );
    let everyone = chorus
        .ok(Method::GET, "/api/tasks?agent=tester", None)
        .await?;
    assert_eq!(everyone["tasks"], json!([]), "no sub-task for tester");
    assert_eq!(done["report"]["summary"], "done");

    // Six model calls at most: the seventh fails the task, with what it wrote.
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "Long", "description": "d"}),
        "coder",
    )
    .await?;
    for n in 0..6 {
        model.push(tool_call(&format!("v{n}"), "view", json!({"path": "."})));
    }
    // The seventh call waits: the task is over its limit while it does.
    let waiting = Hold::new();
    model.push(Reply::Held(waiting.clone(), Box::new(text("never seen"))));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let failed = chorus.wait_task(id, "failed", WAIT).await?;
    let why = failed["report"]["summary"].as_str().unwrap();
    assert!(
        why.contains("model calls") && why.contains("limit of 6"),
        "{failed:#}"
    );
    let run = failed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "worker")
        .unwrap();
    assert_eq!(run["outcome"], "limit", "{failed:#}");
    Ok(())
}

/// A task whose agents work past `[tasks] time_limit_secs` (here a model call that
/// does not answer: an open step counts until now) fails with the reason.
#[tokio::test]
async fn a_task_past_its_time_limit_fails_with_the_reason() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", "sk-test-board")
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .config("[tasks]\ntime_limit_secs = 1\n")
        .start()
        .await?;
    agents(&chorus, &["coder"]).await?;
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "T", "description": "d"}),
        "coder",
    )
    .await?;

    let waiting = Hold::new();
    model.push(Reply::Held(waiting.clone(), Box::new(text("never seen"))));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let failed = chorus.wait_task(id, "failed", WAIT).await?;
    let why = failed["report"]["summary"].as_str().unwrap();
    assert!(why.contains("over its limit of 1 s"), "{failed:#}");
    let run = failed["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "worker")
        .unwrap();
    assert_eq!(run["outcome"], "limit", "{failed:#}");
    Ok(())
}

/// The person's buttons reach the threads: a blocked report is resumed in the same
/// thread; a paused task's thread is stopped and resumed where it was; a failed
/// task is retried in a new thread told how the last attempt ended.
#[tokio::test]
async fn resume_pause_and_retry_go_on_with_the_work() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model, None).await?;
    agents(&chorus, &["coder"]).await?;

    // Blocked, then resumed: the same worker thread goes on and reports.
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "B", "description": "d"}),
        "coder",
    )
    .await?;
    model.push(tool_call(
        "b1",
        "completion_report",
        json!({"status": "blocked", "summary": "need a key", "output": "", "blocked_reason": "no API key"}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let blocked = chorus.wait_task(id, "blocked", WAIT).await?;
    assert_eq!(blocked["blocked_reason"], "no API key", "{blocked:#}");
    model.push(tool_call(
        "b2",
        "completion_report",
        json!({"status": "complete", "summary": "done with the key", "output": ""}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/resume"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    let workers = runs_in_role(&done, "worker");
    assert_eq!(workers.len(), 1, "the same run went on: {done:#}");
    let coder = thread(&chorus, "coder", workers[0]["thread_id"].as_u64().unwrap()).await?;
    assert!(
        user_messages(&coder)
            .iter()
            .any(|m| m.contains("resumed the task")),
        "{coder:#}"
    );

    // Paused while its model call is in flight: the thread stops; resumed, it goes on.
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "P", "description": "d"}),
        "coder",
    )
    .await?;
    let thinking = Hold::new();
    model.push(Reply::Held(thinking.clone(), Box::new(text("thinking"))));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    let started = chorus.wait_task(id, "active", WAIT).await?;
    let thread_id = started["runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["role"] == "worker")
        .unwrap()["thread_id"]
        .as_u64()
        .unwrap();
    // Its model call is open (held by the fake).
    chorus
        .wait_thread("coder", thread_id, WAIT, |t| {
            t["steps"].as_array().is_some_and(|steps| {
                steps
                    .iter()
                    .any(|s| s["kind"] == "llm_call" && s["ended_at"].is_null())
            })
        })
        .await?;
    let paused = chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/pause"), None)
        .await?;
    assert_eq!(paused["status"], "blocked");
    assert_eq!(paused["blocked_reason"], "paused by api");
    chorus
        .wait_thread("coder", thread_id, WAIT, |t| t["status"] == "killed")
        .await?;
    model.push(tool_call(
        "p1",
        "completion_report",
        json!({"status": "complete", "summary": "after the pause", "output": ""}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/resume"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    assert_eq!(done["report"]["summary"], "after the pause");
    let workers = runs_in_role(&done, "worker");
    assert_eq!(workers.len(), 1, "{done:#}");
    assert_eq!(
        workers[0]["thread_id"], thread_id,
        "the same thread went on"
    );

    // Failed, then retried: a new worker thread, told how the last attempt ended.
    let id = planned_task(
        &chorus,
        &model,
        json!({"title": "R", "description": "d"}),
        "coder",
    )
    .await?;
    model.push(tool_call(
        "r1",
        "completion_report",
        json!({"status": "failed", "summary": "the build broke", "output": "error: E0308"}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/start"), None)
        .await?;
    chorus.wait_task(id, "failed", WAIT).await?;
    model.push(tool_call(
        "r2",
        "completion_report",
        json!({"status": "complete", "summary": "fixed", "output": ""}),
    ));
    chorus
        .ok(Method::POST, &format!("/api/tasks/{id}/retry"), None)
        .await?;
    let done = chorus.wait_task(id, "completed", WAIT).await?;
    let workers = runs_in_role(&done, "worker");
    assert_eq!(workers.len(), 2, "a new attempt: {done:#}");
    assert_eq!(workers[0]["outcome"], "failed");
    let second = thread(&chorus, "coder", workers[1]["thread_id"].as_u64().unwrap()).await?;
    assert!(
        user_messages(&second)[0].contains("An earlier attempt")
            && user_messages(&second)[0].contains("the build broke"),
        "{second:#}"
    );
    Ok(())
}
