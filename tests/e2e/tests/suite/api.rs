//! The HTTP API's contract: authentication and error shapes.

use chorus_test_support::Chorus;
use reqwest::Method;
use serde_json::{Value, json};

async fn error_of(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("errors are JSON");
    let code = body["error"]["code"]
        .as_str()
        .expect("error.code")
        .to_string();
    assert!(
        body["error"]["message"].is_string(),
        "error.message: {body}"
    );
    (status, code)
}

#[tokio::test]
async fn every_api_route_needs_the_token() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    let health = chorus.anonymous(Method::GET, "/healthz").send().await?;
    assert_eq!(health.status(), 200);

    for (method, path) in [
        (Method::GET, "/api/agents"),
        (Method::POST, "/api/agents"),
        (Method::GET, "/api/agents/x"),
        (Method::DELETE, "/api/agents/x"),
        (Method::POST, "/api/agents/x/messages"),
        (Method::GET, "/api/agents/x/threads/1"),
        (Method::GET, "/api/no-such-route"),
    ] {
        let response = chorus.anonymous(method.clone(), path).send().await?;
        assert_eq!(response.headers()["www-authenticate"], "Bearer");
        assert_eq!(
            error_of(response).await,
            (401, "unauthorized".into()),
            "{method} {path}"
        );
        let response = chorus
            .anonymous(method.clone(), path)
            .bearer_auth("wrong-token")
            .send()
            .await?;
        assert_eq!(
            error_of(response).await.0,
            401,
            "{method} {path} with a wrong token"
        );
    }
    Ok(())
}

#[tokio::test]
async fn bad_requests_get_json_errors_that_say_what_is_wrong() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    let post = |body: &'static str| {
        chorus
            .api(Method::POST, "/api/agents")
            .header("content-type", "application/json")
            .body(body)
    };
    assert_eq!(
        error_of(post("{not json").send().await?).await,
        (400, "invalid_request".into())
    );
    assert_eq!(
        error_of(post(r#"{"nom": "x"}"#).send().await?).await,
        (400, "invalid_request".into())
    );
    assert_eq!(
        error_of(post(r#"{"name": "../evil"}"#).send().await?).await,
        (400, "invalid_name".into())
    );
    assert_eq!(
        error_of(post(r#"{"name": "ok", "model": " "}"#).send().await?).await,
        (400, "invalid_request".into())
    );
    let no_type = chorus
        .api(Method::POST, "/api/agents")
        .body(r#"{"name":"x"}"#)
        .send()
        .await?;
    assert_eq!(error_of(no_type).await.0, 400);

    chorus.create_agent("dup").await?;
    let again = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "dup"}))
        .send()
        .await?;
    assert_eq!(error_of(again).await, (409, "conflict".into()));

    let missing = chorus.api(Method::GET, "/api/agents/nobody").send().await?;
    assert_eq!(error_of(missing).await, (404, "not_found".into()));
    let missing = chorus
        .api(Method::POST, "/api/agents/nobody/messages")
        .json(&json!({"content": "hi"}))
        .send()
        .await?;
    assert_eq!(error_of(missing).await, (404, "not_found".into()));
    let empty = chorus
        .api(Method::POST, "/api/agents/dup/messages")
        .json(&json!({"content": "  "}))
        .send()
        .await?;
    assert_eq!(error_of(empty).await, (400, "invalid_request".into()));
    let no_thread = chorus
        .api(Method::GET, "/api/agents/dup/threads/999")
        .send()
        .await?;
    assert_eq!(error_of(no_thread).await, (404, "not_found".into()));
    let bad_id = chorus
        .api(Method::GET, "/api/agents/dup/threads/abc")
        .send()
        .await?;
    assert_eq!(error_of(bad_id).await, (404, "not_found".into()));
    let wrong_method = chorus.api(Method::PUT, "/api/agents").send().await?;
    assert_eq!(
        error_of(wrong_method).await,
        (405, "method_not_allowed".into())
    );
    Ok(())
}

#[tokio::test]
async fn an_oversized_body_is_refused_as_json() -> anyhow::Result<()> {
    let chorus = Chorus::builder().start().await?;
    chorus.create_agent("big").await?;
    let huge = "x".repeat(3 * 1024 * 1024);
    let response = chorus
        .api(Method::POST, "/api/agents/big/messages")
        // The server answers before reading the body and then drops the connection;
        // keep it out of the client's pool so the next request gets a fresh one.
        .header("connection", "close")
        .json(&json!({ "content": huge }))
        .send()
        .await?;
    assert_eq!(error_of(response).await, (413, "too_large".into()));
    let threads: Value = chorus
        .api(Method::GET, "/api/agents/big/threads")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(threads, json!([]), "nothing was started");
    Ok(())
}

/// A client must send a whole request head within `[http] header_timeout_secs`
/// (60 s by default; 1 s here), however slowly its bytes trickle: a slow-loris
/// connection is closed, while ordinary requests and a live feed held open far
/// longer go on.
#[tokio::test]
async fn a_request_head_that_trickles_in_is_cut_off_at_the_deadline() -> anyhow::Result<()> {
    use chorus_test_support::FakeOpenAi;
    use chorus_test_support::fake_model::text;
    use std::time::{Duration, Instant};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let model = FakeOpenAi::start().await;
    model.push(text("still here"));
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[http]\nheader_timeout_secs = 1\n")
        .start()
        .await?;
    chorus.create_agent("steady").await?;
    let mut feed = chorus.open_events("?agent=steady", None).await?;

    // One byte of header every 100 ms, never the blank line that ends the head.
    let addr = chorus.http_url.trim_start_matches("http://").to_string();
    let mut slow = tokio::net::TcpStream::connect(&addr).await?;
    let started = Instant::now();
    slow.write_all(b"GET /api/agents HTTP/1.1\r\nHost: x\r\n")
        .await?;
    let mut cut_after = None;
    'trickle: for i in 0..100 {
        if slow.write_all(&[b'a' + (i % 26) as u8]).await.is_err() {
            cut_after = Some(started.elapsed());
            break;
        }
        // Closed: the read ends (with an error answer or none) at once.
        let mut buf = [0u8; 512];
        match tokio::time::timeout(Duration::from_millis(100), slow.read(&mut buf)).await {
            Err(_) => {} // still open
            Ok(_) => {
                cut_after = Some(started.elapsed());
                break 'trickle;
            }
        }
    }
    let cut_after = cut_after.expect("the trickling connection was still open after 10 s");
    println!("a trickling request head was cut after {cut_after:?}");
    assert!(
        cut_after >= Duration::from_millis(900) && cut_after < Duration::from_secs(5),
        "cut after {cut_after:?}"
    );

    // An ordinary request works, and the feed opened before the deadline passed
    // (three times over) still carries what happens now.
    assert_eq!(
        chorus
            .api(Method::GET, "/api/agents")
            .send()
            .await?
            .status(),
        200
    );
    // Time passing is the point here: the feed must outlive the deadline.
    tokio::time::sleep_until((started + Duration::from_secs(3)).into()).await;
    chorus.send_message("steady", "are you there?").await?;
    let kind = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let (kind, _) = feed.next().await?.expect("the feed is still open");
            // The agent's own events (its worker attaching) belong to no thread.
            if kind != "worker" && kind != "agent" {
                return anyhow::Ok(kind);
            }
        }
    })
    .await??;
    assert_eq!(kind, "thread_created");
    Ok(())
}
