//! The command face through the real binary against a stub run endpoint: what a
//! CLI that runs `chorus-tools <tool> '<json>'` reads on stdout, stderr and the
//! exit status.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::json;
use support::{DEADLINE, FAILING_TOOL, Stub, TOKEN};

/// Runs the binary with the run endpoint's env set as given (None: unset).
async fn run(url: Option<&str>, token: Option<&str>, args: &[&str]) -> Output {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_chorus-tools"));
    command
        .args(args)
        .env_remove("CHORUS_TOOLS_URL")
        .env_remove("CHORUS_TOOLS_TOKEN");
    if let Some(url) = url {
        command.env("CHORUS_TOOLS_URL", url);
    }
    if let Some(token) = token {
        command.env("CHORUS_TOOLS_TOKEN", token);
    }
    tokio::time::timeout(DEADLINE, command.output())
        .await
        .expect("chorus-tools hung")
        .unwrap()
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[tokio::test]
async fn a_call_prints_the_content_and_exits_0() {
    let stub = Stub::start(TOKEN).await;
    let out = run(
        Some(&stub.url),
        Some(TOKEN),
        &["file_read", r#"{"path": "notes.md"}"#],
    )
    .await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "ran file_read with {\"path\":\"notes.md\"}\n"
    );
    assert_eq!(
        stub.calls(),
        vec![json!({"name": "file_read", "arguments": {"path": "notes.md"}})]
    );
}

#[tokio::test]
async fn no_arguments_call_with_an_empty_object() {
    let stub = Stub::start(TOKEN).await;
    let out = run(Some(&stub.url), Some(TOKEN), &["completion_report"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        stub.calls(),
        vec![json!({"name": "completion_report", "arguments": {}})]
    );
}

#[tokio::test]
async fn an_error_result_prints_the_content_and_exits_1() {
    let stub = Stub::start(TOKEN).await;
    let out = run(
        Some(&stub.url),
        Some(TOKEN),
        &[FAILING_TOOL, r#"{"path":"a","content":"b"}"#],
    )
    .await;
    assert_eq!(out.status.code(), Some(1), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "permission denied: file_write is not allowed here\n"
    );
    assert_eq!(stub.calls().len(), 1);
}

#[tokio::test]
async fn a_wrong_credential_exits_2_saying_the_run_has_ended() {
    let stub = Stub::start(TOKEN).await;
    let out = run(
        Some(&stub.url),
        Some("another-runs-token"),
        &["file_read", "{}"],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    assert_eq!(
        text(&out.stderr),
        "chorus-tools: the run this credential belonged to has ended (or it is another run's)\n"
    );
    assert!(
        stub.calls().is_empty(),
        "the stub let a wrong credential through"
    );
}

#[tokio::test]
async fn outside_a_run_it_exits_2_saying_so() {
    for (url, token) in [
        (None, None),
        (Some("http://127.0.0.1:9"), None),
        (None, Some(TOKEN)),
    ] {
        let out = run(url, token, &["file_read", "{}"]).await;
        assert_eq!(out.status.code(), Some(2));
        assert!(out.stdout.is_empty());
        let err = text(&out.stderr);
        assert!(
            err.contains("CHORUS_TOOLS_URL and CHORUS_TOOLS_TOKEN are not set")
                && err.contains("runs only inside a Chorus run"),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_non_object_argument_exits_2_and_makes_no_call() {
    let stub = Stub::start(TOKEN).await;
    for (argument, says) in [
        ("[1, 2]", "got an array"),
        ("\"notes.md\"", "got a string"),
        ("{path: notes.md}", "not valid JSON"),
    ] {
        let out = run(Some(&stub.url), Some(TOKEN), &["file_read", argument]).await;
        assert_eq!(out.status.code(), Some(2), "{argument}");
        let err = text(&out.stderr);
        assert!(err.contains(says), "{argument}: {err}");
        assert!(out.stdout.is_empty());
    }
    let out = run(Some(&stub.url), Some(TOKEN), &["file_read", "{}", "{}"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("one JSON object"));
    assert!(
        stub.calls().is_empty(),
        "a bad argument reached the endpoint"
    );
}

#[tokio::test]
async fn an_endpoint_that_is_gone_exits_2_naming_the_address() {
    let url = support::dead_url().await;
    let out = run(Some(&url), Some(TOKEN), &["file_read", "{}"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out.stderr),
        format!(
            "chorus-tools: no Chorus run is listening at {url} (the run has ended, or the address is wrong)\n"
        )
    );
}

#[tokio::test]
async fn list_prints_each_tool_and_the_first_line_of_its_description() {
    let stub = Stub::start(TOKEN).await;
    let out = run(Some(&stub.url), Some(TOKEN), &["list"]).await;
    assert_eq!(out.status.code(), Some(0), "stderr: {}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "file_read          Read a file in the workspace.\n\
         file_write         Write a file in the workspace.\n\
         completion_report  Report the task done.\n"
    );
    let out = run(Some(&stub.url), Some("wrong"), &["list"]).await;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("has ended"));
}

#[tokio::test]
async fn help_shows_examples() {
    let out = run(None, None, &["--help"]).await;
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    for line in [
        "chorus-tools <TOOL> '<JSON OBJECT>'",
        "chorus-tools file_read '{\"path\": \"notes.md\"}'",
        "chorus-tools list",
        "chorus-tools mcp",
        "Exit status: 0",
    ] {
        assert!(help.contains(line), "help lacks {line:?}:\n{help}");
    }
}
