//! The task board over HTTP through a real `chorus serve`: tasks created, listed with
//! filters, edited, moved by the person's buttons only along the status table (a
//! refused move is a 409 naming where the task may go), their history saying who did
//! what, their events on the live feed, and their attachments stored, listed, jailed
//! and bounded. (Planning, Start and the finishing contract are the engine's, tested
//! with it.)

use std::time::Duration;

use chorus_test_support::fake_model::{Hold, Reply, text};
use chorus_test_support::{Chorus, FakeOpenAi};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

async fn call(
    chorus: &Chorus,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = chorus.api(method, path);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn ids(list: &Value) -> Vec<u64> {
    list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn tasks_are_created_listed_edited_moved_along_the_table_and_their_history_says_who()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("coder").await?;
    // Each task's planner thinks until the test ends: only people move these tasks.
    let thinking = Hold::new();
    for _ in 0..3 {
        model.push(Reply::Held(
            thinking.clone(),
            Box::new(text("still thinking")),
        ));
    }

    // Without a token: 401, nothing created.
    let anonymous = chorus
        .anonymous(Method::POST, "/api/tasks")
        .json(&json!({"title": "sneaky"}))
        .send()
        .await?;
    assert_eq!(anonymous.status(), 401);
    let anonymous = chorus.anonymous(Method::GET, "/api/tasks").send().await?;
    assert_eq!(anonymous.status(), 401);

    let mut feed = chorus.open_events("", None).await?;
    let (status, first) = call(
        &chorus,
        Method::POST,
        "/api/tasks",
        Some(json!({"title": "Add a health check", "description": "GET /healthz answers ok", "review": true})),
    )
    .await;
    assert_eq!(status, 201, "{first}");
    assert_eq!(first["status"], "planning");
    assert_eq!(first["review"], true);
    assert_eq!(first["created_by"], "api");
    assert_eq!(
        first["limits"],
        json!({"time_secs": 3600, "model_calls": 200})
    );
    assert_eq!(first["runs"], json!([]));
    for key in ["questions", "attachments", "chain", "requirements", "steps"] {
        assert_eq!(first[key], json!([]), "{key}");
    }
    let id = first["id"].as_u64().unwrap();
    // Its creation is on the live feed, typed, with no thread.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let created = loop {
        let next = tokio::time::timeout_at(deadline, feed.next()).await??;
        let (kind, data) = next.expect("the feed stays open");
        if kind == "task" {
            break data;
        }
    };
    assert_eq!(
        (
            &created["task_id"],
            &created["kind"],
            &created["by"],
            &created["status"]
        ),
        (
            &json!(id),
            &json!("created"),
            &json!("api"),
            &json!("planning")
        )
    );
    assert_eq!(created["thread_id"], Value::Null);

    let (status, second) = call(
        &chorus,
        Method::POST,
        "/api/tasks",
        Some(json!({"title": "Write the docs"})),
    )
    .await;
    assert_eq!(status, 201, "{second}");
    let other = second["id"].as_u64().unwrap();
    let (status, empty) = call(
        &chorus,
        Method::POST,
        "/api/tasks",
        Some(json!({"title": ""})),
    )
    .await;
    assert_eq!(status, 400, "{empty}");

    // The plan is editable before Start; an assignee must be an agent.
    let (status, ghost) = call(
        &chorus,
        Method::PATCH,
        &format!("/api/tasks/{id}"),
        Some(json!({"assignee": "ghost"})),
    )
    .await;
    assert_eq!(status, 400, "{ghost}");
    assert!(
        ghost["error"]["message"]
            .as_str()
            .unwrap()
            .contains("the agents are: coder"),
        "{ghost}"
    );
    let (status, edited) = call(
        &chorus,
        Method::PATCH,
        &format!("/api/tasks/{id}"),
        Some(json!({"summary": "a route", "steps": ["add it", "test it"], "assignee": "coder"})),
    )
    .await;
    assert_eq!(status, 200, "{edited}");
    assert_eq!(edited["assignee"], "coder");
    assert_eq!(edited["steps"], json!(["add it", "test it"]));

    // The list and its filters.
    let list = |query: &'static str| {
        let chorus = &chorus;
        async move { call(chorus, Method::GET, &format!("/api/tasks{query}"), None).await }
    };
    let (_, all) = list("").await;
    assert_eq!(ids(&all), [other, id]);
    assert!(
        all["tasks"][0].get("runs").is_none(),
        "lists leave runs out"
    );
    assert_eq!(ids(&list("?status=planning").await.1), [other, id]);
    assert!(ids(&list("?status=planned").await.1).is_empty());
    assert_eq!(ids(&list("?agent=coder").await.1), [id]);
    assert_eq!(ids(&list("?q=HEALTHZ").await.1), [id]);
    assert_eq!(ids(&list("?q=docs&status=planning").await.1), [other]);
    let (status, bad) = list("?status=pending").await;
    assert_eq!(status, 400);
    assert!(
        bad["error"]["message"]
            .as_str()
            .unwrap()
            .contains("awaiting_input"),
        "{bad}"
    );

    // A button where it does not apply: 409 naming where the task may go.
    let (status, refused) = call(
        &chorus,
        Method::POST,
        &format!("/api/tasks/{id}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{refused}");
    assert_eq!(
        refused["allowed"],
        json!(["awaiting_input", "planned", "failed"])
    );
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("(from planning it may go to: awaiting_input, planned, failed)"),
        "{refused}"
    );
    assert_eq!(
        call(&chorus, Method::GET, &format!("/api/tasks/{id}"), None)
            .await
            .1["status"],
        "planning"
    );

    // Another person, an operator by the default role, and the assignee's feed.
    let olga: Value = chorus
        .api(Method::POST, "/api/users/olga/tokens")
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    let olga = olga["token"].as_str().unwrap().to_string();
    let mut coder_feed = chorus.open_events("?agent=coder", None).await?;

    // Fail, then reopen (by olga): back to its plan (it has an assignee), editable again.
    let (status, failed) = call(
        &chorus,
        Method::POST,
        &format!("/api/tasks/{id}/fail"),
        None,
    )
    .await;
    assert_eq!(
        (status, &failed["status"]),
        (StatusCode::OK, &json!("failed"))
    );
    let (status, locked) = call(
        &chorus,
        Method::PATCH,
        &format!("/api/tasks/{id}"),
        Some(json!({"summary": "too late"})),
    )
    .await;
    assert_eq!(status, 409, "{locked}");
    let reopened = reqwest::Client::new()
        .post(format!("{}/api/tasks/{id}/reopen", chorus.http_url))
        .bearer_auth(&olga)
        .send()
        .await?;
    let status = reopened.status();
    let reopened: Value = reopened.json().await?;
    assert_eq!(
        (status, &reopened["status"]),
        (StatusCode::OK, &json!("planned"))
    );
    let (status, accept) = call(
        &chorus,
        Method::POST,
        &format!("/api/tasks/{id}/accept"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{accept}");
    assert_eq!(accept["allowed"], json!(["active", "failed"]));

    // The history: every change, in order, with who made it.
    let (status, history) = call(
        &chorus,
        Method::GET,
        &format!("/api/tasks/{id}/history"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let events = history["events"].as_array().unwrap();
    let seen: Vec<(String, String, Value)> = events
        .iter()
        // The engine's own (planning began) are the engine tests'.
        .filter(|e| e["kind"] != "planning_started")
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_string(),
                e["by"].as_str().unwrap().to_string(),
                json!([e["data"]["from"], e["data"]["to"]]),
            )
        })
        .collect();
    let null = json!([null, null]);
    assert_eq!(
        seen,
        [
            ("created".into(), "api".into(), null.clone()),
            ("plan_edited".into(), "api".into(), null),
            (
                "status_changed".into(),
                "api".into(),
                json!(["planning", "failed"])
            ),
            (
                "status_changed".into(),
                "olga".into(),
                json!(["failed", "planned"])
            ),
        ]
    );
    assert!(
        events
            .windows(2)
            .all(|w| w[0]["id"].as_u64() < w[1]["id"].as_u64())
    );

    // The assignee's feed had both changes, each with who made it and where the task went.
    let mut changes = Vec::new();
    while changes.len() < 2 {
        let next = tokio::time::timeout(Duration::from_secs(10), coder_feed.next()).await??;
        let (kind, data) = next.expect("the feed stays open");
        if kind == "task" {
            assert_eq!(
                (&data["agent"], &data["task_id"]),
                (&json!("coder"), &json!(id))
            );
            changes.push(json!([
                data["kind"],
                data["by"],
                data["status"],
                data["data"]["to"]
            ]));
        }
    }
    assert_eq!(
        changes,
        [
            json!(["status_changed", "api", "failed", "failed"]),
            json!(["status_changed", "olga", "planned", "planned"]),
        ]
    );

    // Deleted: gone, its history with it.
    let (status, _) = call(
        &chorus,
        Method::DELETE,
        &format!("/api/tasks/{other}"),
        None,
    )
    .await;
    assert_eq!(status, 204);
    let (status, gone) = call(&chorus, Method::GET, &format!("/api/tasks/{other}"), None).await;
    assert_eq!(status, 404, "{gone}");
    let (status, _) = call(&chorus, Method::GET, "/api/tasks/x", None).await;
    assert_eq!(status, 400);
    assert_eq!(
        chorus
            .query_store(&format!(
                "SELECT COUNT(*) FROM task_events WHERE task_id = {other}"
            ))
            .await?
            .trim(),
        "0"
    );
    Ok(())
}

async fn upload(
    chorus: &Chorus,
    id: u64,
    name: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<(StatusCode, Value)> {
    let form = reqwest::multipart::Form::new().part(
        "file",
        reqwest::multipart::Part::bytes(bytes).file_name(name.to_string()),
    );
    let response = chorus
        .api(Method::POST, &format!("/api/tasks/{id}/attachments"))
        .multipart(form)
        .send()
        .await?;
    let status = response.status();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

/// The multipart body written by hand, the file name as given (reqwest would
/// percent-encode a `/` in it; curl and others send it raw).
async fn upload_raw(
    chorus: &Chorus,
    id: u64,
    name: &str,
    bytes: &[u8],
) -> anyhow::Result<(StatusCode, Value)> {
    let boundary = "chorus-test-boundary";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(bytes);
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let response = chorus
        .api(Method::POST, &format!("/api/tasks/{id}/attachments"))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await?;
    let status = response.status();
    let text = response.text().await?;
    Ok((
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    ))
}

#[tokio::test]
async fn attachments_land_in_the_tasks_directory_are_listed_jailed_and_bounded()
-> anyhow::Result<()> {
    let chorus = Chorus::builder()
        .config("[tasks]\nattachment_max_bytes = 4096\n")
        .start()
        .await?;
    let (_, task) = call(
        &chorus,
        Method::POST,
        "/api/tasks",
        Some(json!({"title": "with files"})),
    )
    .await;
    let id = task["id"].as_u64().unwrap();
    let dir = chorus.data_dir.join(format!("tasks/{id}/attachments"));

    let spec = b"# Spec\nAnswer ok.\n".to_vec();
    let (status, added) = upload(&chorus, id, "spec.md", spec.clone()).await?;
    assert_eq!(status, 201, "{added}");
    assert_eq!(
        (&added["name"], &added["size"], &added["uploaded_by"]),
        (&json!("spec.md"), &json!(spec.len()), &json!("api"))
    );
    assert_eq!(std::fs::read(dir.join("spec.md"))?, spec);
    // Exactly at the bound is accepted.
    let (status, full) = upload(&chorus, id, "full.bin", vec![7; 4096]).await?;
    assert_eq!(status, 201, "{full}");

    // A name with a path in it is refused with why, and nothing lands anywhere.
    let (status, escaped) = upload(&chorus, id, "../x", b"escape".to_vec()).await?;
    assert_eq!(status, 400, "{escaped}");
    assert!(
        escaped["error"]["message"]
            .as_str()
            .unwrap()
            .contains("refused: it holds"),
        "{escaped}"
    );
    for name in ["../x", "../../x", "a/b", "a\\\\b", "..", ".env"] {
        let (status, refused) = upload_raw(&chorus, id, name, b"escape").await?;
        assert_eq!(status, 400, "{name}: {refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("is refused: it "),
            "{name}: {refused}"
        );
    }
    // The raw upload itself works (the positive control of the refusals above).
    let (status, raw) = upload_raw(&chorus, id, "raw.txt", b"raw").await?;
    assert_eq!(status, 201, "{raw}");
    // One byte past the bound: 413, not stored.
    let (status, big) = upload(&chorus, id, "big.bin", vec![0; 4097]).await?;
    assert_eq!(status, 413, "{big}");
    assert!(
        big["error"]["message"]
            .as_str()
            .unwrap()
            .contains("4096 bytes"),
        "{big}"
    );
    // Far past it (the client is still sending when it is refused): 413 all the same.
    let (status, _) = upload(&chorus, id, "huge.bin", vec![0; 1 << 20]).await?;
    assert_eq!(status, 413);

    let mut on_disk: Vec<String> = std::fs::read_dir(&dir)?
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    on_disk.sort();
    assert_eq!(on_disk, ["full.bin", "raw.txt", "spec.md"]);
    let on_top: Vec<String> = std::fs::read_dir(chorus.data_dir.join("tasks"))?
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        on_top,
        [id.to_string()],
        "nothing escaped the task's directory"
    );
    assert!(!chorus.data_dir.join("x").exists());
    assert!(!chorus.data_dir.join("tasks/x").exists());
    assert!(!chorus.data_dir.join(format!("tasks/{id}/x")).exists());

    let (status, listed) = call(
        &chorus,
        Method::GET,
        &format!("/api/tasks/{id}/attachments"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let names: Vec<&str> = listed["attachments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["full.bin", "raw.txt", "spec.md"]);
    let (_, shown) = call(&chorus, Method::GET, &format!("/api/tasks/{id}"), None).await;
    assert_eq!(shown["attachments"], listed["attachments"]);
    let (_, history) = call(
        &chorus,
        Method::GET,
        &format!("/api/tasks/{id}/history"),
        None,
    )
    .await;
    let added: Vec<&Value> = history["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "attachment_added")
        .map(|e| &e["data"]["name"])
        .collect();
    assert_eq!(
        added,
        [&json!("spec.md"), &json!("full.bin"), &json!("raw.txt")]
    );

    // No such task; no file field.
    let (status, _) = upload(&chorus, 999, "a.txt", b"a".to_vec()).await?;
    assert_eq!(status, 404);
    let response = chorus
        .api(Method::POST, &format!("/api/tasks/{id}/attachments"))
        .multipart(reqwest::multipart::Form::new().text("note", "hi"))
        .send()
        .await?;
    assert_eq!(response.status(), 400);
    Ok(())
}
