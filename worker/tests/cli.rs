//! `chorus-worker` as an operator meets it on the command line. (These tests also
//! make `cargo test` build the binary the end-to-end suite runs.)

use std::process::Command;

fn worker() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_chorus-worker"));
    command.env_remove("CHORUS_WORKER_CREDENTIAL");
    command
}

#[test]
fn without_a_credential_it_says_how_to_give_one() {
    let output = worker()
        .args([
            "--control-plane",
            "http://127.0.0.1:9",
            "--agent",
            "a",
            "--data-dir",
            "/nonexistent",
        ])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--credential-stdin"), "{stderr}");
    assert!(stderr.contains("CHORUS_WORKER_CREDENTIAL"), "{stderr}");
}

#[test]
fn an_unreachable_control_plane_is_reported_after_the_dial_timeout() {
    // Port 9 (discard) is closed on loopback.
    let output = worker()
        .args([
            "--control-plane",
            "http://127.0.0.1:9",
            "--agent",
            "a",
            "--data-dir",
            "/nonexistent",
            "--dial-timeout-secs",
            "1",
        ])
        .env("CHORUS_WORKER_CREDENTIAL", "x")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("cannot reach the control plane at http://127.0.0.1:9"),
        "{stderr}"
    );
}

#[test]
fn a_dial_in_worker_stops_at_once_on_sigterm_while_the_control_plane_is_unreachable() {
    use std::io::BufRead;
    use std::time::{Duration, Instant};
    // Port 9 (discard) is closed on loopback: the worker keeps dialling (30 s per
    // attempt by default, then backoff); SIGTERM must end that at once.
    let data = tempfile::tempdir().unwrap();
    let mut child = worker()
        .args(["--control-plane", "http://127.0.0.1:9", "--data-dir"])
        .arg(data.path())
        .env("CHORUS_JOIN_TOKEN", "a-join-token-0123456789")
        .env("RUST_LOG", "debug")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines, dialling) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = lines.send(line);
        }
    });
    // In its dial loop (after the re-exec that moves the token to a pipe).
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = dialling.recv_timeout(left) else {
            let _ = child.kill();
            panic!("never started dialling");
        };
        if line.contains("control plane not reachable yet") {
            break;
        }
    }
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "{status:?}");
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            panic!("still dialling 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn backends_prints_what_this_host_can_run_as_json() {
    let dir = std::env::temp_dir().join(format!("chorus-backends-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let output = worker()
        .args(["backends", "--claude-code"])
        .arg(dir.join("no-claude"))
        .env("PATH", &dir)
        .env_remove("CHORUS_OPENCODE")
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(output.status.code(), Some(0));
    let statuses: Vec<chorus_proto::domain::BackendStatus> =
        serde_json::from_slice(&output.stdout).unwrap();
    let backends: Vec<_> = statuses.iter().map(|s| s.backend).collect();
    assert_eq!(backends, chorus_proto::domain::Backend::CLIS);
    assert!(statuses.iter().all(|s| !s.usable));
    let claude = statuses[0].reason.clone().unwrap_or_default();
    assert!(claude.contains("--claude-code"), "{claude}");
    let opencode = statuses[1].reason.clone().unwrap_or_default();
    assert!(
        opencode.contains("not on PATH") && opencode.contains("npm install -g opencode-ai@1.18.33"),
        "{opencode}"
    );
}
