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
