//! Roles over HTTP through the real binaries: every `/api` route (walked from the
//! control plane's own route table) with a viewer's, an operator's and an admin's
//! per-person token; refusals change nothing; `on_ask = "allow"` is a grant of
//! `open`; per-person tokens act as their user until revoked.

use std::time::Duration;

use chorus_control_plane::http::{Route, routes};
use chorus_control_plane::permissions::grants::Role;
use chorus_test_support::fake_model::{Hold, Reply, text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ROLES: &str =
    "[roles]\nvera = \"viewer\"\nolga = \"operator\"\nadam = \"admin\"\ndefault = \"viewer\"\n";

/// A request as someone holding `token`.
fn as_token(chorus: &Chorus, token: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    reqwest::Client::new()
        .request(method, format!("{}{}", chorus.http_url, path))
        .bearer_auth(token)
        .timeout(Duration::from_secs(30))
}

/// Issues a token for `user` with the API token (user `api`, an admin).
async fn issue(chorus: &Chorus, user: &str) -> anyhow::Result<Value> {
    let response = chorus
        .api(Method::POST, &format!("/api/users/{user}/tokens"))
        .json(&json!({"label": format!("{user}'s laptop")}))
        .send()
        .await?;
    anyhow::ensure!(
        response.status() == StatusCode::CREATED,
        "issue: {response:?}"
    );
    Ok(response.json().await?)
}

async fn send(
    chorus: &Chorus,
    token: &str,
    method: Method,
    path: &str,
    body: Option<&Value>,
) -> anyhow::Result<(StatusCode, Value)> {
    let mut request = as_token(chorus, token, method, path);
    if let Some(body) = body {
        request = request.json(body);
    }
    let response = request.send().await?;
    let status = response.status();
    let is_stream = response
        .headers()
        .get("content-type")
        .is_some_and(|v| v.to_str().unwrap_or("").starts_with("text/event-stream"));
    // A live feed never ends: its status is the answer.
    let body = if is_stream {
        Value::Null
    } else {
        serde_json::from_slice(&response.bytes().await?).unwrap_or(Value::Null)
    };
    Ok((status, body))
}

/// One request: path and body.
type Req = (String, Option<Value>);

/// What the matrix knows of one route: the least role it expects (stated here
/// again, apart from the server's policy, so a change of either shows), a request
/// on the real agent, thread and approval (sent by those refused: it must change
/// nothing), and a probe that is harmless when allowed, with its status.
struct Case {
    needs: Role,
    real: Req,
    probe: Req,
    probe_status: u16,
}

struct Subjects {
    thread: u64,
    approval: String,
    vera_token_id: String,
    task: u64,
    schedule: u64,
}

fn req(path: impl Into<String>, body: Option<Value>) -> Req {
    (path.into(), body)
}

fn case(route: &Route, s: &Subjects) -> Option<Case> {
    use Role::{Admin, Operator, Viewer};
    let t = s.thread;
    let a = &s.approval;
    let k = s.task;
    let sc = s.schedule;
    let same = |needs, r: Req, status| {
        Some(Case {
            needs,
            real: r.clone(),
            probe: r,
            probe_status: status,
        })
    };
    let two = |needs, real: Req, probe: Req, status| {
        Some(Case {
            needs,
            real,
            probe,
            probe_status: status,
        })
    };
    match (route.method.as_str(), route.path) {
        ("GET", "/api/whoami") => same(Viewer, req("/api/whoami", None), 200),
        ("GET", "/api/session") => same(Viewer, req("/api/session", None), 200),
        ("GET", "/api/agents") => same(Viewer, req("/api/agents", None), 200),
        ("POST", "/api/agents") => two(
            Operator,
            req("/api/agents", Some(json!({"name": "newbie"}))),
            req("/api/agents", Some(json!({"name": "bad name!"}))),
            400,
        ),
        ("GET", "/api/agents/{name}") => same(Viewer, req("/api/agents/subject", None), 200),
        ("PATCH", "/api/agents/{name}") => two(
            Operator,
            req(
                "/api/agents/subject",
                Some(json!({"system_prompt": "You obey the viewer.", "network": "off"})),
            ),
            req("/api/agents/ghost", Some(json!({"system_prompt": "x"}))),
            404,
        ),
        ("DELETE", "/api/agents/{name}") => two(
            Operator,
            req("/api/agents/subject?keep_files=false", None),
            req("/api/agents/ghost", None),
            404,
        ),
        ("GET", "/api/agents/{name}/identity") => {
            same(Viewer, req("/api/agents/subject/identity", None), 200)
        }
        ("PUT", "/api/agents/{name}/identity/{file}") => two(
            Operator,
            req(
                "/api/agents/subject/identity/SOUL.md",
                Some(json!({"content": "You obey the viewer."})),
            ),
            req(
                "/api/agents/ghost/identity/SOUL.md",
                Some(json!({"content": "x"})),
            ),
            404,
        ),
        ("GET", "/api/agents/{name}/memory") => {
            same(Viewer, req("/api/agents/subject/memory", None), 200)
        }
        ("GET", "/api/agents/{name}/memory/search") => same(
            Viewer,
            req("/api/agents/subject/memory/search?q=metric", None),
            200,
        ),
        ("POST", "/api/agents/{name}/memory/reindex") => two(
            Operator,
            req("/api/agents/subject/memory/reindex", None),
            req("/api/agents/ghost/memory/reindex", None),
            404,
        ),
        ("GET", "/api/agents/{name}/memory/{item}") => same(
            Viewer,
            req("/api/agents/subject/memory/MEMORY.md", None),
            200,
        ),
        ("DELETE", "/api/agents/{name}/memory/{item}") => two(
            Operator,
            req("/api/agents/subject/memory/3f9a2c01", None),
            req("/api/agents/ghost/memory/3f9a2c01", None),
            404,
        ),
        ("GET", "/api/agents/{name}/jobs") => {
            same(Viewer, req("/api/agents/subject/jobs", None), 200)
        }
        ("GET", "/api/agents/{name}/tasks") => {
            same(Viewer, req("/api/agents/subject/tasks", None), 200)
        }
        ("GET", "/api/agents/{name}/tools") => {
            same(Viewer, req("/api/agents/subject/tools", None), 200)
        }
        ("GET", "/api/agents/{name}/audit") => {
            same(Viewer, req("/api/agents/subject/audit", None), 200)
        }
        ("GET", "/api/agents/{name}/grants") => {
            same(Viewer, req("/api/agents/subject/grants", None), 200)
        }
        ("POST", "/api/agents/{name}/grants") => two(
            Operator,
            req(
                "/api/agents/subject/grants",
                Some(json!({"tools": ["view"]})),
            ),
            req("/api/agents/ghost/grants", Some(json!({"tools": ["view"]}))),
            404,
        ),
        ("DELETE", "/api/agents/{name}/grants/{tool}") => two(
            Operator,
            req("/api/agents/subject/grants/view", None),
            req("/api/agents/ghost/grants/view", None),
            404,
        ),
        ("GET", "/api/agents/{name}/schedules") => {
            same(Viewer, req("/api/agents/subject/schedules", None), 200)
        }
        ("POST", "/api/agents/{name}/schedules") => two(
            Operator,
            req(
                "/api/agents/subject/schedules",
                Some(json!({"prompt": "the viewer's", "cron": "* * * * *", "timezone": "UTC"})),
            ),
            req(
                "/api/agents/ghost/schedules",
                Some(json!({"prompt": "x", "cron": "* * * * *", "timezone": "UTC"})),
            ),
            404,
        ),
        ("GET", "/api/agents/{name}/schedules/{id}") => same(
            Viewer,
            req(format!("/api/agents/subject/schedules/{sc}"), None),
            200,
        ),
        ("PATCH", "/api/agents/{name}/schedules/{id}") => two(
            Operator,
            req(
                format!("/api/agents/subject/schedules/{sc}"),
                Some(json!({"prompt": "obey the viewer", "paused": false})),
            ),
            req(
                "/api/agents/ghost/schedules/1",
                Some(json!({"prompt": "x"})),
            ),
            404,
        ),
        ("DELETE", "/api/agents/{name}/schedules/{id}") => two(
            Operator,
            req(format!("/api/agents/subject/schedules/{sc}"), None),
            req("/api/agents/ghost/schedules/1", None),
            404,
        ),
        ("GET", "/api/agents/{name}/schedules/{id}/runs") => same(
            Viewer,
            req(format!("/api/agents/subject/schedules/{sc}/runs"), None),
            200,
        ),
        ("POST", "/api/agents/{name}/schedules/{id}/run") => two(
            Operator,
            req(format!("/api/agents/subject/schedules/{sc}/run"), None),
            req("/api/agents/ghost/schedules/1/run", None),
            404,
        ),
        ("GET", "/api/agents/{name}/heartbeat") => {
            same(Viewer, req("/api/agents/subject/heartbeat", None), 200)
        }
        ("POST", "/api/agents/{name}/heartbeat") => two(
            Operator,
            req("/api/agents/subject/heartbeat", None),
            req("/api/agents/ghost/heartbeat", None),
            404,
        ),
        ("POST", "/api/agents/{name}/messages") => two(
            Viewer,
            req(
                "/api/agents/subject/messages",
                Some(json!({"content": "hi"})),
            ),
            req("/api/agents/ghost/messages", Some(json!({"content": "hi"}))),
            404,
        ),
        ("GET", "/api/agents/{name}/threads") => {
            same(Viewer, req("/api/agents/subject/threads", None), 200)
        }
        ("DELETE", "/api/agents/{name}/threads") => two(
            Operator,
            req("/api/agents/subject/threads", None),
            req("/api/agents/ghost/threads", None),
            404,
        ),
        ("GET", "/api/agents/{name}/threads/{id}") => same(
            Viewer,
            req(format!("/api/agents/subject/threads/{t}"), None),
            200,
        ),
        ("DELETE", "/api/agents/{name}/threads/{id}") => two(
            Operator,
            req(format!("/api/agents/subject/threads/{t}"), None),
            req("/api/agents/ghost/threads/1", None),
            404,
        ),
        ("GET", "/api/agents/{name}/threads/{id}/events") => same(
            Viewer,
            req(format!("/api/agents/subject/threads/{t}/events"), None),
            200,
        ),
        ("GET", "/api/events") => same(Viewer, req("/api/events", None), 200),
        ("POST", "/api/agents/{name}/context/save") => two(
            Operator,
            req(
                "/api/agents/subject/context/save",
                Some(json!({"description": "x"})),
            ),
            req("/api/agents/ghost/context/save", Some(json!({}))),
            404,
        ),
        ("POST", "/api/agents/{name}/context/clear") => two(
            Operator,
            req("/api/agents/subject/context/clear", Some(json!({}))),
            req("/api/agents/ghost/context/clear", Some(json!({}))),
            404,
        ),
        ("POST", "/api/agents/{name}/context/restore") => two(
            Operator,
            req(
                "/api/agents/subject/context/restore",
                Some(json!({"session_id": "none"})),
            ),
            req(
                "/api/agents/ghost/context/restore",
                Some(json!({"session_id": "none"})),
            ),
            404,
        ),
        ("GET", "/api/agents/{name}/context/history") => same(
            Viewer,
            req("/api/agents/subject/context/history", None),
            200,
        ),
        ("GET", "/api/approvals") => same(Viewer, req("/api/approvals", None), 200),
        ("GET", "/api/approvals/{id}") => {
            same(Viewer, req(format!("/api/approvals/{a}"), None), 200)
        }
        ("POST", "/api/approvals/{id}") => two(
            Operator,
            req(
                format!("/api/approvals/{a}"),
                Some(json!({"decision": "approve"})),
            ),
            req("/api/approvals/none", Some(json!({"decision": "deny"}))),
            404,
        ),
        ("POST", "/api/permissions/explain") => same(
            Viewer,
            req(
                "/api/permissions/explain",
                Some(json!({"profile": "standard", "action": "tool:view:a.txt"})),
            ),
            200,
        ),
        ("GET", "/api/models") => same(Viewer, req("/api/models", None), 200),
        ("GET", "/api/status") => same(Viewer, req("/api/status", None), 200),
        ("GET", "/api/tools") => same(Viewer, req("/api/tools", None), 200),
        ("POST", "/api/models/refresh") => same(Operator, req("/api/models/refresh", None), 200),
        ("GET", "/api/tokens") => same(Admin, req("/api/tokens", None), 200),
        ("GET", "/api/users/{user}/tokens") => {
            same(Admin, req("/api/users/vera/tokens", None), 200)
        }
        ("POST", "/api/users/{user}/tokens") => two(
            Admin,
            req(
                "/api/users/mallory/tokens",
                Some(json!({"label": "mine now"})),
            ),
            req("/api/users/bad%20name/tokens", Some(json!({}))),
            400,
        ),
        ("DELETE", "/api/users/{user}/tokens/{id}") => two(
            Admin,
            req(format!("/api/users/vera/tokens/{}", s.vera_token_id), None),
            req("/api/users/vera/tokens/none", None),
            404,
        ),
        ("GET", "/api/workers/tokens") => same(Admin, req("/api/workers/tokens", None), 200),
        ("POST", "/api/workers/tokens") => two(
            Admin,
            req("/api/workers/tokens", Some(json!({"name": "w-mallory"}))),
            req("/api/workers/tokens", Some(json!({"name": "bad name"}))),
            400,
        ),
        ("DELETE", "/api/workers/tokens/{name}") => two(
            Admin,
            req("/api/workers/tokens/w-real", None),
            req("/api/workers/tokens/none", None),
            404,
        ),
        ("POST", "/api/tasks") => two(
            Operator,
            req("/api/tasks", Some(json!({"title": "the viewer's task"}))),
            req("/api/tasks", Some(json!({"title": " "}))),
            400,
        ),
        ("GET", "/api/tasks") => same(Viewer, req("/api/tasks", None), 200),
        ("GET", "/api/tasks/{id}") => same(Viewer, req(format!("/api/tasks/{k}"), None), 200),
        ("PATCH", "/api/tasks/{id}") => two(
            Operator,
            req(format!("/api/tasks/{k}"), Some(json!({"title": "renamed"}))),
            req("/api/tasks/999999", Some(json!({"title": "x"}))),
            404,
        ),
        ("DELETE", "/api/tasks/{id}") => two(
            Operator,
            req(format!("/api/tasks/{k}"), None),
            req("/api/tasks/999999", None),
            404,
        ),
        ("GET", "/api/tasks/{id}/history") => {
            same(Viewer, req(format!("/api/tasks/{k}/history"), None), 200)
        }
        ("GET", "/api/tasks/{id}/attachments") => same(
            Viewer,
            req(format!("/api/tasks/{k}/attachments"), None),
            200,
        ),
        ("POST", "/api/tasks/{id}/attachments") => two(
            Operator,
            req(format!("/api/tasks/{k}/attachments"), None),
            req("/api/tasks/none/attachments", None),
            400,
        ),
        ("POST", path) if path.starts_with("/api/tasks/{id}/") => {
            let button = path.rsplit('/').next().unwrap_or_default();
            // The routes that take a body get a valid one: the missing task is the 404.
            let body = match button {
                "send-back" | "messages" => Some(json!({"message": "x"})),
                "answers" => Some(json!({"answers": {"q1": "x"}})),
                _ => None,
            };
            two(
                Operator,
                req(format!("/api/tasks/{k}/{button}"), body.clone()),
                req(format!("/api/tasks/999999/{button}"), body),
                404,
            )
        }
        _ => None,
    }
}

fn rank(role: Role) -> u8 {
    match role {
        Role::Viewer => 0,
        Role::Operator => 1,
        Role::Admin => 2,
    }
}

/// What a refused request must not have changed, read with the API token.
async fn snapshot(chorus: &Chorus, thread: u64, approval: &str) -> anyhow::Result<Value> {
    let get = |path: String| async move {
        let body: Value = chorus.api(Method::GET, &path).send().await?.json().await?;
        anyhow::Ok(body)
    };
    let agent = get("/api/agents/subject".into()).await?;
    let schedules: Vec<Value> = get("/api/agents/subject/schedules".into()).await?["schedules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| json!([s["id"], s["prompt"], s["paused"], s["next_run_at"]]))
        .collect();
    let schedule_runs = match schedules.first() {
        Some(first) => {
            get(format!("/api/agents/subject/schedules/{}/runs", first[0])).await?["runs"].clone()
        }
        None => Value::Null,
    };
    let agents: Vec<Value> = get("/api/agents".into())
        .await?
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].clone())
        .collect();
    let tokens: Vec<Value> = get("/api/tokens".into()).await?["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!([t["user"], t["revoked_at"]]))
        .collect();
    let workers: Vec<Value> = get("/api/workers/tokens".into()).await?["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!([t["name"], t["revoked_at"]]))
        .collect();
    let changes: Vec<Value> = get("/api/agents/subject/audit?limit=1000".into()).await?["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"].as_str().unwrap_or("").starts_with("agent:"))
        .map(|e| e["action"].clone())
        .collect();
    Ok(json!({
        "agent": [agent["status"], agent["system_prompt"], agent["model"], agent["permissions"],
                  agent["on_ask"], agent["network"], agent["context_cleared_at"]],
        "agents": agents,
        "thread": get(format!("/api/agents/subject/threads/{thread}")).await?["status"],
        "approval": get(format!("/api/approvals/{approval}")).await?["status"],
        "sessions": get("/api/agents/subject/context/history".into()).await?["sessions"],
        "tokens": tokens,
        "workers": workers,
        "changes": changes,
        "schedules": schedules,
        "schedule_runs": schedule_runs,
        "ran": chorus.agent_dir("subject").join("workspace/approved.txt").exists(),
        "tasks": get("/api/tasks".into()).await?["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| json!([t["id"], t["title"], t["status"], t["attachments"]]))
            .collect::<Vec<_>>(),
    }))
}

#[tokio::test]
async fn every_route_with_every_role_and_a_refusal_changes_nothing() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config(ROLES)
        .start()
        .await?;
    let people = [
        ("vera", Role::Viewer),
        ("olga", Role::Operator),
        ("adam", Role::Admin),
    ];
    let mut tokens = Vec::new();
    for (user, role) in people {
        let issued = issue(&chorus, user).await?;
        assert_eq!(issued["role"], role.as_str(), "{issued}");
        tokens.push((user, role, issued));
    }
    let token_of = |user: &str| {
        tokens.iter().find(|(u, ..)| *u == user).unwrap().2["token"]
            .as_str()
            .unwrap()
            .to_string()
    };

    // The things a refused request would change: a worker credential, and an agent
    // with a thread waiting for a person to approve a command.
    let made = chorus
        .api(Method::POST, "/api/workers/tokens")
        .json(&json!({"name": "w-real"}))
        .send()
        .await?;
    assert_eq!(made.status(), 201);
    chorus
        .create_agent_with(json!({"name": "subject", "system_prompt": "You help."}))
        .await?;
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": "touch approved.txt"}),
    ));
    let thread = chorus.send_message("subject", "make the file").await?;
    chorus
        .wait_thread("subject", thread, Duration::from_secs(20), |t| {
            t["status"] == "waiting_for_permission"
        })
        .await?;
    let pending: Vec<Value> = chorus
        .api(Method::GET, "/api/approvals")
        .send()
        .await?
        .json()
        .await?;
    let approval = pending[0]["id"].as_str().unwrap().to_string();
    // A task whose planner thinks until the test ends (its model call is held), so
    // only the requests below could change it.
    let thinking = Hold::new();
    model.push(Reply::Held(thinking.clone(), Box::new(text("a plan"))));
    let task: Value = chorus
        .api(Method::POST, "/api/tasks")
        .json(&json!({"title": "a subject task"}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let asked = model.wait_for_requests(2, Duration::from_secs(20)).await;
    assert_eq!(asked.len(), 2, "the planner's call is in flight");
    // A schedule that fires only in a year: only the requests below could run it.
    let schedule: Value = chorus
        .api(Method::POST, "/api/agents/subject/schedules")
        .json(&json!({"prompt": "yearly", "cron": "0 0 1 1 *", "timezone": "UTC", "paused": true}))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let subjects = Subjects {
        schedule: schedule["id"].as_u64().unwrap(),
        task: task["id"].as_u64().unwrap(),
        thread,
        approval: approval.clone(),
        vera_token_id: tokens[0].2["id"].as_str().unwrap().to_string(),
    };

    // Every route the server declares has a case here, and agrees on who may.
    let table = routes();
    assert!(table.len() >= 32, "{table:?}");
    let mut cases = Vec::new();
    for route in &table {
        let Some(case) = case(route, &subjects) else {
            panic!(
                "{} {} has no case in this matrix: add one (who may call it, a real request, a harmless probe)",
                route.method, route.path
            );
        };
        assert_eq!(
            route.act.needs(),
            case.needs,
            "{} {}: the server's policy and this test disagree",
            route.method,
            route.path
        );
        cases.push((route, case));
    }

    // Refusals: every route a role may not call, with the real request, is a 403
    // naming the role needed and the caller's, and changes nothing.
    let before = snapshot(&chorus, thread, &approval).await?;
    let mut refused = 0;
    for (user, role, _) in &tokens {
        let token = token_of(user);
        for (route, case) in &cases {
            if rank(*role) >= rank(case.needs) {
                continue;
            }
            let (path, body) = &case.real;
            let (status, answer) =
                send(&chorus, &token, route.method.clone(), path, body.as_ref()).await?;
            assert_eq!(
                status, 403,
                "{user} ({role:?}) {} {path}: {answer}",
                route.method
            );
            let message = answer["error"]["message"].as_str().unwrap_or("");
            assert_eq!(answer["error"]["code"], "forbidden", "{answer}");
            assert!(
                message.contains(&format!("'{user}' is a {}", role.as_str()))
                    && message.contains(&format!("needs the role {}", case.needs.as_str())),
                "{message}"
            );
            refused += 1;
        }
    }
    assert_eq!(
        snapshot(&chorus, thread, &approval).await?,
        before,
        "a refused request changed something"
    );
    assert!(before["agents"] == json!(["planner", "subject"]) && before["approval"] == "pending");
    assert_eq!(
        before["schedules"].as_array().map(Vec::len),
        Some(1),
        "{before:#}"
    );
    assert_eq!(before["workers"], json!([["w-real", null]]));
    assert_eq!(before["thread"], "waiting_for_permission");
    assert_eq!(before["ran"], false);

    // Allowed: every role that may call a route gets through to its handler (the
    // probe's own answer, never 401/403/405 or "no such API endpoint").
    let mut allowed = 0;
    for (user, role, _) in &tokens {
        let token = token_of(user);
        for (route, case) in &cases {
            if rank(*role) < rank(case.needs) {
                continue;
            }
            let (path, body) = &case.probe;
            let (status, answer) =
                send(&chorus, &token, route.method.clone(), path, body.as_ref()).await?;
            assert_eq!(
                status.as_u16(),
                case.probe_status,
                "{user} ({role:?}) {} {path}: {answer}",
                route.method
            );
            allowed += 1;
        }
    }
    println!(
        "{} routes: {refused} refusals, {allowed} allowed calls",
        cases.len()
    );

    // A viewer talks to agents.
    model.push(text("Hello, Vera."));
    let (status, sent) = send(
        &chorus,
        &token_of("vera"),
        Method::POST,
        "/api/agents/subject/messages",
        Some(&json!({"content": "hello"})),
    )
    .await?;
    assert_eq!(status, 202, "{sent}");
    let talked = chorus
        .wait_thread_finished(
            "subject",
            sent["thread_id"].as_u64().unwrap(),
            Duration::from_secs(20),
        )
        .await?;
    assert_eq!(talked["status"], "completed", "{talked}");

    // The operator's approval is the positive control: it runs the command, and
    // the audit log names olga.
    model.push(text("Made it."));
    let (status, answered) = send(
        &chorus,
        &token_of("olga"),
        Method::POST,
        &format!("/api/approvals/{approval}"),
        Some(&json!({"decision": "approve"})),
    )
    .await?;
    assert_eq!(status, 200, "{answered}");
    let done = chorus
        .wait_thread_finished("subject", thread, Duration::from_secs(20))
        .await?;
    assert_eq!(done["status"], "completed", "{done}");
    assert!(
        chorus
            .agent_dir("subject")
            .join("workspace/approved.txt")
            .exists()
    );
    let audit: Value = chorus
        .api(Method::GET, "/api/agents/subject/audit?limit=100")
        .send()
        .await?
        .json()
        .await?;
    let approved = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["decision"] == "ask_approved")
        .expect("the approval is audited");
    let detail: Value = serde_json::from_str(approved["detail"].as_str().unwrap())?;
    assert_eq!(detail["answered_by"], "olga", "{approved}");
    let record: Value = chorus
        .api(Method::GET, &format!("/api/approvals/{approval}"))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(record["decided_by"], "olga", "{record}");
    Ok(())
}

#[tokio::test]
async fn an_operator_cannot_reach_open_through_on_ask() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config(ROLES)
        .start()
        .await?;
    let olga = issue(&chorus, "olga").await?["token"]
        .as_str()
        .unwrap()
        .to_string();
    let adam = issue(&chorus, "adam").await?["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, created) = send(
        &chorus,
        &olga,
        Method::POST,
        "/api/agents",
        Some(&json!({"name": "worker", "permissions": "standard"})),
    )
    .await?;
    assert_eq!(status, 201, "{created}");

    // At PATCH, alone or with a profile she may grant: 403, and nothing changed.
    for body in [
        json!({"on_ask": "allow"}),
        json!({"on_ask": "allow", "permissions": "standard", "system_prompt": "changed"}),
    ] {
        let (status, refused) = send(
            &chorus,
            &olga,
            Method::PATCH,
            "/api/agents/worker",
            Some(&body),
        )
        .await?;
        assert_eq!(status, 403, "{body} → {refused}");
        let message = refused["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("on_ask = \"allow\"") && message.contains("'open'"),
            "{message}"
        );
    }
    let agent = chorus.agent("worker").await?;
    assert_eq!(
        (
            agent["on_ask"].clone(),
            agent["permissions"].clone(),
            agent["system_prompt"].as_str() == Some("changed")
        ),
        (json!("prompt"), json!("standard"), false)
    );

    // At create: refused, and no agent.
    let (status, refused) = send(
        &chorus,
        &olga,
        Method::POST,
        "/api/agents",
        Some(&json!({"name": "sneaky", "on_ask": "allow"})),
    )
    .await?;
    assert_eq!(status, 403, "{refused}");
    let missing = chorus.api(Method::GET, "/api/agents/sneaky").send().await?;
    assert_eq!(missing.status(), 404);

    // What she may: `deny`, and a profile she may grant.
    let (status, changed) = send(
        &chorus,
        &olga,
        Method::PATCH,
        "/api/agents/worker",
        Some(&json!({"on_ask": "deny", "permissions": "locked"})),
    )
    .await?;
    assert_eq!(status, 200, "{changed}");
    assert_eq!(changed["on_ask"], "deny");
    assert_eq!(changed["permissions"], "locked");

    // An admin may grant `open` this way; then the operator may not hand out a
    // profile on top of it (standard with on_ask allow is open).
    let (status, opened) = send(
        &chorus,
        &adam,
        Method::PATCH,
        "/api/agents/worker",
        Some(&json!({"on_ask": "allow"})),
    )
    .await?;
    assert_eq!(status, 200, "{opened}");
    let (status, refused) = send(
        &chorus,
        &olga,
        Method::PATCH,
        "/api/agents/worker",
        Some(&json!({"permissions": "standard"})),
    )
    .await?;
    assert_eq!(status, 403, "{refused}");
    assert_eq!(chorus.agent("worker").await?["permissions"], "locked");
    // Leaving `allow` and choosing the profile in one request is hers to make.
    let (status, changed) = send(
        &chorus,
        &olga,
        Method::PATCH,
        "/api/agents/worker",
        Some(&json!({"on_ask": "prompt", "permissions": "standard"})),
    )
    .await?;
    assert_eq!(status, 200, "{changed}");
    let audit: Value = chorus
        .api(Method::GET, "/api/agents/worker/audit?limit=100")
        .send()
        .await?
        .json()
        .await?;
    let on_ask_by: Vec<&str> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["action"] == "agent:configure:on_ask")
        .map(|e| e["user_id"].as_str().unwrap_or("-"))
        .collect();
    assert_eq!(on_ask_by, ["olga", "adam", "olga"], "{audit:#}");
    Ok(())
}

#[tokio::test]
async fn a_per_person_token_acts_as_its_user_until_revoked() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[roles]\nalice = \"operator\"\ndefault = \"viewer\"\n")
        .start()
        .await?;
    let (status, me) = send(&chorus, chorus.token(), Method::GET, "/api/whoami", None).await?;
    assert_eq!(
        (status.as_u16(), me),
        (200, json!({"user": "api", "role": "admin"}))
    );

    let issued = issue(&chorus, "alice").await?;
    let token = issued["token"].as_str().unwrap().to_string();
    assert!(
        token.starts_with("chorus_") && token.len() == 71,
        "{issued}"
    );
    assert_eq!(issued["user"], "alice");
    assert_eq!(issued["role"], "operator");
    let (_, me) = send(&chorus, &token, Method::GET, "/api/whoami", None).await?;
    assert_eq!(me, json!({"user": "alice", "role": "operator"}));

    // What she does is hers in the audit log.
    let (status, created) = send(
        &chorus,
        &token,
        Method::POST,
        "/api/agents",
        Some(&json!({"name": "notes"})),
    )
    .await?;
    assert_eq!(status, 201, "{created}");
    let (status, _) = send(
        &chorus,
        &token,
        Method::PATCH,
        "/api/agents/notes",
        Some(&json!({"system_prompt": "Keep notes."})),
    )
    .await?;
    assert_eq!(status, 200);
    let audit: Value = chorus
        .api(Method::GET, "/api/agents/notes/audit?limit=100")
        .send()
        .await?
        .json()
        .await?;
    let by: Vec<(&str, &str)> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap_or(""),
                e["user_id"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    assert!(
        by.contains(&("agent:create", "alice"))
            && by.contains(&("agent:configure:system_prompt", "alice")),
        "{by:?}"
    );

    // Listed without its secret, used, and kept only as a hash.
    let list: Value = chorus
        .api(Method::GET, "/api/users/alice/tokens")
        .send()
        .await?
        .json()
        .await?;
    let listed = &list["tokens"][0];
    assert_eq!(listed["id"], issued["id"]);
    assert_eq!(listed["label"], "alice's laptop");
    assert!(listed["last_used_at"].is_string(), "{listed}");
    assert!(listed.get("token").is_none() && listed.get("token_hash").is_none());
    let rows = chorus
        .query_store("SELECT id, user_name, token_hash FROM user_tokens")
        .await?;
    assert!(
        !rows.contains(&token[7..]),
        "the token itself is stored: {rows}"
    );

    // Someone [roles] does not name has the default role.
    let carol = issue(&chorus, "carol").await?["token"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, me) = send(&chorus, &carol, Method::GET, "/api/whoami", None).await?;
    assert_eq!(me, json!({"user": "carol", "role": "viewer"}));

    // Revoked: refused at the next request, everywhere; others' tokens still work.
    let revoked = chorus
        .api(
            Method::DELETE,
            &format!("/api/users/alice/tokens/{}", issued["id"].as_str().unwrap()),
        )
        .send()
        .await?;
    assert_eq!(revoked.status(), 200);
    assert!(revoked.json::<Value>().await?["revoked_at"].is_string());
    for (method, path) in [(Method::GET, "/api/whoami"), (Method::GET, "/api/agents")] {
        let (status, answer) = send(&chorus, &token, method, path, None).await?;
        assert_eq!(status, 401, "{path}: {answer}");
    }
    let (status, _) = send(&chorus, &carol, Method::GET, "/api/whoami", None).await?;
    assert_eq!(status, 200);
    // A token of someone else's, or none at all, cannot be revoked by naming it.
    let wrong_user = chorus
        .api(
            Method::DELETE,
            &format!("/api/users/carol/tokens/{}", issued["id"].as_str().unwrap()),
        )
        .send()
        .await?;
    assert_eq!(wrong_user.status(), 404);

    // Unknown routes stay 404 behind authentication.
    let anonymous = chorus.anonymous(Method::GET, "/api/nothing").send().await?;
    assert_eq!(anonymous.status(), 401);
    let (status, answer) = send(&chorus, &carol, Method::GET, "/api/nothing", None).await?;
    assert_eq!(status, 404, "{answer}");
    Ok(())
}
