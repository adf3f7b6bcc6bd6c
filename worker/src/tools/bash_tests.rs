//! `bash` as the model and the machine see it: the result text, and the processes
//! that are (not) left on the machine afterwards.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use chorus_proto::domain::ToolCall;
use serde_json::json;

use super::*;
use crate::tools::ToolBox;
use crate::tools::jail::Workspace;

fn toolbox(config: BashConfig) -> (tempfile::TempDir, ToolBox) {
    let dir = tempfile::tempdir().unwrap();
    let tools = ToolBox::new(Workspace::new(dir.path()), Arc::default())
        .with_config(crate::tools::ToolConfig { bash: config });
    (dir, tools)
}

fn bash_call(command: &str, timeout: Option<f64>) -> ToolCall {
    let mut args = json!({ "command": command });
    if let Some(t) = timeout {
        args["timeout"] = json!(t);
    }
    ToolCall {
        id: "b".into(),
        name: "bash".into(),
        arguments: args.to_string(),
    }
}

async fn bash(command: &str) -> ToolOutcome {
    let (_dir, tools) = toolbox(BashConfig::default());
    tools.execute(&bash_call(command, None)).await
}

/// A sleep duration no other process on the machine uses, to find ours in /proc.
fn marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    format!(
        "300.{}{}{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        nanos
    )
}

/// Live (not zombie) processes whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = entry.file_name().to_string_lossy().into_owned();
        if !pid.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true);
        if cmdline.contains(marker) && !zombie {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

async fn wait_for_processes(marker: &str, at_least: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while processes_with(marker).len() < at_least {
        assert!(Instant::now() < deadline, "the command never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// SIGKILL is final but not instantaneous: allow the kernel a moment (seconds on
/// a machine loaded by a parallel test run).
async fn assert_none_left(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = processes_with(marker);
        if left.is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "processes left behind: {left:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A command whose sleeps are the shell's children and grandchildren.
fn family(marker: &str) -> String {
    format!("(sleep {marker} & sleep {marker}) & sleep {marker}; echo never")
}

#[tokio::test]
async fn a_timeout_kills_the_command_and_its_grandchildren() {
    let (_dir, tools) = toolbox(BashConfig::default());
    let marker = marker();
    let run = tokio::spawn({
        let call = bash_call(&family(&marker), Some(1.0));
        async move { tools.execute(&call).await }
    });
    wait_for_processes(&marker, 3).await;
    let started = Instant::now();
    let out = run.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(out.is_error && !out.malformed);
    assert_eq!(
        out.content,
        "timed out after 1 s; the command and everything it started were killed\n(no output)\n"
    );
    assert_none_left(&marker).await;
}

#[tokio::test]
async fn dropping_the_call_kills_the_whole_group() {
    let (_dir, tools) = toolbox(BashConfig::default());
    let marker = marker();
    let call = bash_call(&family(&marker), None);
    let run = tools.execute(&call);
    tokio::select! {
        _ = run => panic!("the command should still be running"),
        () = wait_for_processes(&marker, 3) => {}
    }
    // `run` is dropped here, as when the run is cancelled.
    assert_none_left(&marker).await;
}

#[tokio::test]
async fn background_processes_do_not_outlive_the_call() {
    let marker = marker();
    let started = Instant::now();
    let out = bash(&format!("sleep {marker} & echo started")).await;
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(!out.is_error, "{}", out.content);
    assert_eq!(
        out.content,
        "exit code 0\n--- stdout ---\nstarted\nnote: processes the command left running in the background were stopped; a bash call ends everything it started\n"
    );
    assert_none_left(&marker).await;
}

#[tokio::test]
async fn exit_codes_stdout_and_stderr_are_reported() {
    let ok = bash("echo hello").await;
    assert_eq!(ok.content, "exit code 0\n--- stdout ---\nhello\n");
    assert!(!ok.is_error);
    let failed = bash("echo out; echo err >&2; exit 3").await;
    assert!(failed.is_error && !failed.malformed);
    assert_eq!(
        failed.content,
        "exit code 3\n--- stdout ---\nout\n--- stderr ---\nerr\n"
    );
    let quiet = bash("true").await;
    assert_eq!(quiet.content, "exit code 0\n(no output)\n");
    let signalled = bash("kill -TERM $$").await;
    assert!(signalled.is_error);
    assert_eq!(signalled.content, "killed by signal SIGTERM\n(no output)\n");
}

#[tokio::test]
async fn stdin_is_empty_and_cwd_is_the_workspace() {
    let (dir, tools) = toolbox(BashConfig::default());
    let out = tools
        .execute(&bash_call("cat; pwd -P; echo \"home=$HOME\"", Some(10.0)))
        .await;
    let root = dir.path().canonicalize().unwrap();
    assert_eq!(
        out.content,
        format!(
            "exit code 0\n--- stdout ---\n{}\nhome={}\n",
            root.display(),
            dir.path().display()
        )
    );
}

#[tokio::test]
async fn long_output_keeps_head_and_tail_with_a_note() {
    let (_dir, tools) = toolbox(BashConfig {
        output_cap: 100,
        ..BashConfig::default()
    });
    let out = tools
        .execute(&bash_call(
            "printf 'A%.0s' $(seq 50); printf 'B%.0s' $(seq 1000); printf 'C%.0s' $(seq 50)",
            None,
        ))
        .await;
    assert_eq!(
        out.content,
        format!(
            "exit code 0\n--- stdout ---\n{}\n[… 1000 bytes cut from the middle …]\n{}\n",
            "A".repeat(50),
            "C".repeat(50)
        )
    );
}

#[tokio::test]
async fn a_full_stderr_pipe_does_not_stall_the_command() {
    // Reading stdout to its end before stderr would deadlock here: the command
    // blocks on a full stderr pipe before it ever closes stdout.
    let out = bash("head -c 2000000 /dev/zero | tr '\\0' e >&2; echo done").await;
    assert!(!out.is_error, "{}", out.content);
    assert!(
        out.content
            .starts_with("exit code 0\n--- stdout ---\ndone\n--- stderr ---\neee")
    );
    assert!(
        out.content
            .contains("[… 1970000 bytes cut from the middle …]")
    );
}

#[tokio::test]
async fn bad_timeouts_are_errors_and_long_ones_are_capped() {
    let (_dir, tools) = toolbox(BashConfig {
        max_timeout: Duration::from_secs(5),
        ..BashConfig::default()
    });
    let zero = tools.execute(&bash_call("true", Some(0.0))).await;
    assert!(zero.is_error && !zero.malformed);
    assert_eq!(
        zero.content,
        "timeout must be a positive number of seconds (at most 5)"
    );
    let capped = tools.execute(&bash_call("echo hi", Some(10_000.0))).await;
    assert_eq!(
        capped.content,
        "exit code 0 (the timeout was capped at 5 s)\n--- stdout ---\nhi\n"
    );
    let empty = tools.execute(&bash_call("  ", None)).await;
    assert!(empty.is_error && empty.content.contains("command is empty"));
}

#[tokio::test]
async fn the_environment_is_the_allow_list() {
    let out = bash("env").await;
    assert!(!out.is_error, "{}", out.content);
    let shell_own = ["PWD", "SHLVL", "_", "OLDPWD"];
    for line in out.content.lines().skip(2) {
        let name = line.split('=').next().unwrap();
        assert!(
            PASSED_VARS.contains(&name)
                || SET_VARS.contains(&name)
                || crate::tools::safe_env::is_git_safety_var(name)
                || shell_own.contains(&name),
            "unexpected variable {name} in the command's environment"
        );
    }
    for name in SET_VARS {
        assert!(out.content.contains(&format!("\n{name}=")), "{name} is set");
    }
}

/// Run by `secrets_in_the_worker_environment_are_not_passed_on` in a child test
/// process that has secrets in its environment; does nothing on its own.
#[tokio::test]
async fn secret_probe() {
    if std::env::var_os("CHORUS_BASH_SECRET_PROBE").is_none() {
        return;
    }
    let out = bash("env; echo \"cred=[$CHORUS_WORKER_CREDENTIAL] key=[$OPENAI_API_KEY]\"").await;
    assert!(!out.content.contains("sekrit"), "{}", out.content);
    assert!(out.content.contains("cred=[] key=[]"), "{}", out.content);
    println!("SECRET-PROBE-RAN");
}

#[test]
fn secrets_in_the_worker_environment_are_not_passed_on() {
    let exe = std::env::current_exe().unwrap();
    let output = std::process::Command::new(exe)
        .args(["--exact", "tools::bash::tests::secret_probe", "--nocapture"])
        .env("CHORUS_BASH_SECRET_PROBE", "1")
        .env("CHORUS_WORKER_CREDENTIAL", "sekrit-credential")
        .env("OPENAI_API_KEY", "sekrit-key")
        .env("CHORUS_API_TOKEN", "sekrit-token")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        stdout.contains("SECRET-PROBE-RAN"),
        "the probe did not run: {stdout}"
    );
}
