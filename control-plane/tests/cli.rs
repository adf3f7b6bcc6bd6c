//! `chorus` as an operator meets it on the command line. (These tests also make
//! `cargo test` build the binary the end-to-end suite runs.)

use std::process::Command;

fn chorus(dir: &std::path::Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_chorus"));
    command
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default());
    command
}

#[test]
fn help_explains_the_commands_and_settings() {
    let dir = tempfile::tempdir().unwrap();
    let output = chorus(dir.path()).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success());
    assert!(help.contains("serve"), "{help}");
    assert!(help.contains("chorus.toml"), "{help}");

    let output = chorus(dir.path())
        .args(["serve", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    for expected in [
        "--data-dir",
        "CHORUS_DATA_DIR",
        "--http-addr",
        "--grpc-addr",
        "CHORUS_DEFAULT_MODEL",
    ] {
        assert!(help.contains(expected), "{expected} missing from:\n{help}");
    }
}

#[test]
fn a_mistyped_settings_file_is_reported_with_its_name() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("chorus.toml"),
        "http_adr = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let output = chorus(dir.path()).arg("serve").output().unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("chorus.toml"), "{stderr}");
    assert!(stderr.contains("http_adr"), "{stderr}");
    assert!(
        !dir.path().join("data").exists(),
        "nothing should be created on a bad config"
    );
}

#[test]
fn a_busy_port_is_reported_with_the_flag_to_change() {
    let dir = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port();
    let output = chorus(dir.path())
        .args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            &format!("127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("--http-addr"), "{stderr}");
}
