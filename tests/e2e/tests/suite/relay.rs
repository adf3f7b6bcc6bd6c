//! The model relay through the real binaries, with a real worker's credential (as a
//! tool that stole it would hold it): only model endpoints are forwarded, the
//! credential dies with its connection, no known secret reaches the provider, and the
//! credential opens nothing in the HTTP API.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeAnthropic, FakeOpenAi, bin_path, process};
use nix::sys::signal::Signal;
use reqwest::Method;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const RELAY_ERROR_HEADER: &str = "x-chorus-relay-error";
const PROVIDER_KEY: &str = "sk-live-RELAYKEY-71c4e09b2d";
const API_TOKEN: &str = "chorus-RELAYTOKEN-3b8f5a1e6c";

/// A worker binary that records the credential it is handed in `<dir>/credential`
/// and the real worker's pid in `<dir>/worker-pid`, runs the real worker as its
/// child, and outlives it by 30 s: a launched process whose connection has ended.
pub(super) fn capturing_worker(dir: &Path) -> anyhow::Result<PathBuf> {
    let script = dir.join("capturing-worker.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/bash\nread -r credential\n\
             printf '%s' \"$credential\" > '{dir}/credential.tmp'\n\
             mv '{dir}/credential.tmp' '{dir}/credential'\n\
             '{worker}' \"$@\" <<< \"$credential\" &\n\
             echo $! > '{dir}/worker-pid'\n\
             wait\nsleep 30\n",
            dir = dir.display(),
            worker = bin_path("chorus-worker").display(),
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    Ok(script)
}

/// A request sent byte for byte as written (reqwest, like browsers, would resolve
/// `..` and `%2e%2e` before sending), as `curl --path-as-is` does. Returns the
/// status, whether the relay marked the answer as its own, and the body.
async fn raw_request(
    grpc_url: &str,
    method: &str,
    target: &str,
    credential: &str,
) -> anyhow::Result<(u16, bool, String)> {
    let addr = grpc_url.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let request = format!(
        "{method} {target} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {credential}\r\n\
         Content-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
    );
    stream.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await??;
    let answer = String::from_utf8_lossy(&answer).to_string();
    let (head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no HTTP answer: {answer}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no status in {head}"))?;
    let marked = head
        .lines()
        .any(|l| l.to_ascii_lowercase().starts_with(RELAY_ERROR_HEADER));
    Ok((status, marked, body.to_string()))
}

pub(super) async fn wait_for_file(path: &Path, timeout: Duration) -> anyhow::Result<String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(text) = std::fs::read_to_string(path)
            && !text.trim().is_empty()
        {
            return Ok(text.trim().to_string());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{} did not appear",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_worker_credential_reaches_only_model_endpoints_and_dies_with_its_connection()
-> anyhow::Result<()> {
    let openai = FakeOpenAi::start().await;
    let anthropic = FakeAnthropic::start().await;
    let tmp = tempfile::tempdir()?;
    let script = capturing_worker(tmp.path())?;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &openai.base_url())
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("ANTHROPIC_BASE_URL", &anthropic.host_url())
        .env("ANTHROPIC_API_KEY", "sk-ant-RELAYKEY-0a9b8c7d")
        .env("CHORUS_DEFAULT_MODEL", "openai/fake-model")
        .env("CHORUS_WORKER_BIN", script.to_str().unwrap())
        .start()
        .await?;
    chorus.create_agent("relayed").await?;
    let launched = chorus
        .wait_worker_running("relayed", Duration::from_secs(15))
        .await?;
    let credential = wait_for_file(&tmp.path().join("credential"), Duration::from_secs(5)).await?;
    assert_eq!(credential.len(), 64);
    let relay = reqwest::Client::new();
    let url = |path: &str| format!("{}{path}", chorus.grpc_url);

    // What a stolen credential would be used for: refused before any provider is asked.
    let refused_by_reqwest = [
        (Method::DELETE, "/llm/openai/keys/x"),
        (Method::GET, "/llm/openai/organization/api_keys"),
        (Method::POST, "/llm/openai/files"),
        (Method::GET, "/llm/openai/chat/completions"),
        (
            Method::POST,
            "/llm/openai/chat/completions?api-version=../../keys",
        ),
        (Method::POST, "/llm/anthropic/v1/files"),
        (Method::POST, "/llm/anthropic/v1/messages/batches"),
        (Method::POST, "/llm/openai//chat/completions"),
    ];
    for (method, path) in refused_by_reqwest {
        let response = relay
            .request(method.clone(), url(path))
            .bearer_auth(&credential)
            .header("x-api-key", &credential)
            .json(&json!({}))
            .send()
            .await?;
        assert_eq!(response.status(), 403, "{method} {path}");
        assert!(
            response.headers().contains_key(RELAY_ERROR_HEADER),
            "{method} {path}"
        );
        let body: Value = response.json().await?;
        assert_eq!(body["error"]["code"], "not_a_model_endpoint", "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(
            message.contains("only model endpoints") || message.contains("query strings"),
            "{method} {path}: {message}"
        );
    }
    for target in [
        "/llm/openai/../../x",
        "/llm/openai/../../v1/keys/x",
        "/llm/openai/chat/completions/../../keys/x",
        "/llm/openai/%2e%2e/%2e%2e/v1/keys/x",
        "/llm/openai/%2E%2E/keys",
        "/llm/openai/chat%2Fcompletions",
        "/llm/openai/chat/completions%3F",
    ] {
        let (status, marked, body) =
            raw_request(&chorus.grpc_url, "POST", target, &credential).await?;
        assert_eq!(status, 403, "{target}: {body}");
        assert!(marked, "{target}");
        assert!(body.contains("not_a_model_endpoint"), "{target}: {body}");
    }
    assert_eq!(openai.stray_requests(), Vec::<String>::new());
    assert_eq!(anthropic.stray_requests(), Vec::<String>::new());
    assert!(openai.requests().is_empty() && anthropic.requests().is_empty());
    assert!(
        chorus.output().contains("model relay refused a request"),
        "refusals are logged"
    );

    // The model endpoints still work, with the provider's key added.
    let models: Value = relay
        .get(url("/llm/openai/models"))
        .bearer_auth(&credential)
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(models["data"][0]["id"], "fake-model", "{models}");
    let claude = relay
        .get(url("/llm/anthropic/v1/models"))
        .header("x-api-key", &credential)
        .send()
        .await?;
    assert_eq!(claude.status(), 200);
    // Embeddings are a model endpoint: passed through to the provider, with the
    // provider's key in place of the worker's credential.
    let embeddings = relay
        .post(url("/llm/openai/embeddings"))
        .bearer_auth(&credential)
        .json(&json!({"model": "fake-embed", "input": "x"}))
        .send()
        .await?;
    assert_eq!(embeddings.status(), 200);
    assert!(!embeddings.headers().contains_key(RELAY_ERROR_HEADER));
    let embedded = openai.embedding_requests();
    assert_eq!(embedded.len(), 1, "{embedded:?}");
    assert_eq!(embedded[0].path, "/v1/embeddings");
    assert!(
        !embedded[0]
            .headers
            .iter()
            .any(|(_, v)| v.contains(&credential)),
        "the worker's credential went upstream"
    );
    assert!(openai.stray_requests().is_empty());
    openai.push(text("hello"));
    let chat = relay
        .post(url("/llm/openai/chat/completions"))
        .bearer_auth(&credential)
        .json(&json!({"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await?;
    assert_eq!(chat.status(), 200);
    let chat: Value = chat.json().await?;
    assert_eq!(chat["choices"][0]["message"]["content"], "hello", "{chat}");
    assert_eq!(
        openai.requests()[0].headers["authorization"],
        format!("Bearer {PROVIDER_KEY}")
    );

    // What Claude Code sends: Anthropic's beta surface, with exactly `beta=true`
    // (and its `anthropic-beta` header) passed on; any other query still refused.
    anthropic.push(text("beta hello"));
    let beta = relay
        .post(url("/llm/anthropic/v1/messages?beta=true"))
        .header("x-api-key", &credential)
        .header("anthropic-beta", "claude-code-20250219")
        .json(&json!({"model": "fake-model", "max_tokens": 64,
                      "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await?;
    assert_eq!(beta.status(), 200, "{}", beta.text().await?);
    let seen = anthropic.requests();
    let last = seen.last().expect("the fake got the request");
    assert_eq!(last.path, "/v1/messages");
    assert_eq!(last.headers["anthropic-beta"], "claude-code-20250219");
    assert_ne!(
        last.headers["x-api-key"], credential,
        "the provider's key, not ours"
    );
    // The fake counts no tokens: its own 404, reached with the query as allowed.
    let count = relay
        .post(url("/llm/anthropic/v1/messages/count_tokens?beta=true"))
        .header("x-api-key", &credential)
        .json(&json!({"model": "fake-model", "messages": []}))
        .send()
        .await?;
    assert!(!count.headers().contains_key(RELAY_ERROR_HEADER));
    assert!(
        anthropic
            .stray_requests()
            .contains(&"POST /v1/messages/count_tokens?beta=true".to_string()),
        "{:?}",
        anthropic.stray_requests()
    );
    for target in [
        "/llm/anthropic/v1/messages?beta=true&x=1",
        "/llm/anthropic/v1/messages?beta=false",
        "/llm/anthropic/v1/models?beta=true",
    ] {
        let response = relay
            .post(url(target))
            .header("x-api-key", &credential)
            .json(&json!({}))
            .send()
            .await?;
        assert_eq!(response.status(), 403, "{target}");
        assert!(
            response.headers().contains_key(RELAY_ERROR_HEADER),
            "{target}"
        );
    }
    assert_eq!(
        anthropic.requests().len(),
        seen.len(),
        "refused ones reach nobody"
    );

    // The worker's connection ends (the worker dies) while the process Chorus
    // launched still runs for a moment: the credential is refused at once, not when
    // that process is gone.
    let worker = std::fs::read_to_string(tmp.path().join("worker-pid"))?
        .trim()
        .parse::<u32>()?;
    process::signal(worker, Signal::SIGKILL);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let launched_alive_at_refusal = loop {
        let response = relay
            .get(url("/llm/openai/models"))
            .bearer_auth(&credential)
            .send()
            .await?;
        if response.status() == 401 {
            assert!(response.headers().contains_key(RELAY_ERROR_HEADER));
            break process::is_alive(launched);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the credential still opens the relay 10 s after its worker died"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(
        launched_alive_at_refusal,
        "the credential lived as long as the process, not as long as its connection"
    );
    // A new worker comes, with a new credential; the old one stays dead.
    assert!(process::wait_gone(launched, Duration::from_secs(10)).await);
    let next = chorus
        .wait_worker_running("relayed", Duration::from_secs(15))
        .await?;
    assert_ne!(next, launched);
    let response = relay
        .post(url("/llm/openai/chat/completions"))
        .bearer_auth(&credential)
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(response.status(), 401);
    Ok(())
}

#[tokio::test]
async fn a_key_a_tool_prints_never_reaches_the_model() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call("c1", "bash", json!({"command": "cat .env"})));
    model.push(text("read it"));
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .api_token(API_TOKEN)
        .start()
        .await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(&json!({"name": "leaky", "permissions": "open"}))
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    // Keys where agents meet them: a .env file in the workspace.
    std::fs::write(
        chorus.agent_dir("leaky").join("workspace/.env"),
        format!("OPENAI_API_KEY={PROVIDER_KEY}\nCHORUS_API_TOKEN={API_TOKEN}\n"),
    )?;
    let id = chorus.send_message("leaky", "what is in .env?").await?;
    let thread = chorus
        .wait_thread_finished("leaky", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");

    let requests = model.requests();
    assert_eq!(requests.len(), 2);
    // The tool result went back to the model in the second request, scrubbed.
    let body = requests[1].body.to_string();
    assert!(
        body.contains("OPENAI_API_KEY=[redacted]") && body.contains("CHORUS_API_TOKEN=[redacted]"),
        "the tool ran and its output was sent, scrubbed: {body}"
    );
    for secret in [PROVIDER_KEY, API_TOKEN] {
        assert!(!body.contains(secret), "the model was sent {secret}");
    }
    assert!(
        chorus
            .output()
            .contains("replaced a known secret in a request to the model"),
        "the operator can see it happened"
    );
    Ok(())
}

#[tokio::test]
async fn a_worker_credential_opens_nothing_in_the_api() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "step 1"}),
    ));
    model.push(text("denied, fine"));
    let tmp = tempfile::tempdir()?;
    let script = capturing_worker(tmp.path())?;
    let chorus = Chorus::builder()
        .env("OPENAI_BASE_URL", &model.base_url())
        .env("OPENAI_API_KEY", PROVIDER_KEY)
        .env("CHORUS_DEFAULT_MODEL", "fake-model")
        .env("CHORUS_WORKER_BIN", script.to_str().unwrap())
        .start()
        .await?;
    let created = chorus
        .api(Method::POST, "/api/agents")
        .json(
            &json!({"name": "asker", "permissions": {"allow": [], "ask": ["tool:create_file:.*"]}}),
        )
        .send()
        .await?;
    assert_eq!(created.status(), 201);
    chorus
        .wait_worker_running("asker", Duration::from_secs(15))
        .await?;
    let credential = wait_for_file(&tmp.path().join("credential"), Duration::from_secs(5)).await?;
    let id = chorus.send_message("asker", "write the plan").await?;

    // The agent's own ask, pending.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let approval = loop {
        let pending: Vec<Value> = chorus
            .api(Method::GET, "/api/approvals")
            .send()
            .await?
            .json()
            .await?;
        if let Some(first) = pending.into_iter().next() {
            break first;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no approval appeared"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let approval_id = approval["id"].as_str().unwrap();

    // The worker's credential is not the API token, however it is presented.
    let with_credential = |method: Method, path: &str| {
        chorus
            .anonymous(method, path)
            .bearer_auth(&credential)
            .header("x-api-key", &credential)
    };
    let listed = with_credential(Method::GET, "/api/approvals")
        .send()
        .await?;
    assert_eq!(listed.status(), 401);
    let approved = with_credential(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "approve"}))
        .send()
        .await?;
    assert_eq!(approved.status(), 401);
    let raised = with_credential(Method::PATCH, "/api/agents/asker")
        .json(&json!({"permissions": "open"}))
        .send()
        .await?;
    assert_eq!(raised.status(), 401);
    assert_eq!(
        with_credential(Method::GET, "/api/agents")
            .send()
            .await?
            .status(),
        401
    );

    // Nothing changed: the ask still waits for a person, who denies it.
    let thread = chorus.thread("asker", id).await?;
    assert_eq!(thread["status"], "waiting_for_permission", "{thread:#}");
    let denied = chorus
        .api(Method::POST, &format!("/api/approvals/{approval_id}"))
        .json(&json!({"decision": "deny"}))
        .send()
        .await?;
    assert_eq!(denied.status(), 200);
    let thread = chorus
        .wait_thread_finished("asker", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(!chorus.agent_dir("asker").join("workspace/plan.md").exists());
    assert_ne!(chorus.agent("asker").await?["permissions"], "open");
    Ok(())
}
