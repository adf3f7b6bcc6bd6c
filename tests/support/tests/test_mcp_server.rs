//! The end-to-end tests' MCP server (`chorus-test-mcp`) speaks MCP over stdio: it
//! answers `initialize` and lists its tools. Being an integration test of this
//! package also makes `cargo test`/`nextest` build the binary the e2e tests start.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};

use serde_json::{Value, json};

#[test]
fn the_test_mcp_server_answers_initialize_and_lists_its_tools_over_stdio() {
    let mut server = Command::new(env!("CARGO_BIN_EXE_chorus-test-mcp"))
        .arg("stdio")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("chorus-test-mcp starts");
    let mut input = server.stdin.take().expect("stdin");
    let mut output = BufReader::new(server.stdout.take().expect("stdout"));
    let mut send = |message: Value| {
        writeln!(input, "{message}").expect("write");
        input.flush().expect("flush");
    };
    let mut receive = || {
        let mut line = String::new();
        output.read_line(&mut line).expect("read");
        serde_json::from_str::<Value>(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    };
    send(
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-03-26", "capabilities": {},
        "clientInfo": {"name": "test", "version": "1"}}}),
    );
    let initialized = receive();
    assert_eq!(initialized["id"], 1, "{initialized}");
    assert!(
        initialized["result"]["serverInfo"].is_object(),
        "{initialized}"
    );
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    send(json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}));
    let listed = receive();
    let names: Vec<&str> = listed["result"]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{listed}"))
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for tool in ["echo", "secret_word", "env", "add_tool", "hang", "header"] {
        assert!(names.contains(&tool), "{tool} not in {names:?}");
    }
    let _ = server.kill();
    let _ = server.wait();
}
