//! The tool box as the tool loop uses it: calls in, outcomes out, locks between.

use std::time::{Duration, Instant};

use serde_json::json;

use super::*;

fn call(name: &str, arguments: &str) -> ToolCall {
    ToolCall {
        id: "c".into(),
        name: name.into(),
        arguments: arguments.into(),
    }
}

fn json_call(name: &str, arguments: serde_json::Value) -> ToolCall {
    call(name, &arguments.to_string())
}

fn toolbox(lock_timeout: Duration) -> (tempfile::TempDir, ToolBox, Arc<FileLocks>) {
    let dir = tempfile::tempdir().unwrap();
    let locks = Arc::new(FileLocks::new(lock_timeout));
    let tools = ToolBox::new(Workspace::new(dir.path()), locks.clone());
    (dir, tools, locks)
}

#[tokio::test]
async fn bad_calls_become_errors_the_model_can_read() {
    let (_dir, tools, _) = toolbox(Duration::from_secs(1));
    let unknown = tools.execute(&call("rm_rf", "{}")).await;
    assert!(unknown.malformed);
    assert!(
        unknown.content.contains(
            "create_file, str_replace, view, file_read, file_write, file_create, file_delete, file_patch, file_list, file_search, bash"
        ),
        "{}",
        unknown.content
    );
    let invalid = tools.execute(&call("create_file", "{\"path\": ")).await;
    assert!(invalid.malformed && invalid.content.contains("not valid"));
    let extra = tools
        .execute(&json_call("file.read", json!({"path": "a", "mode": "x"})))
        .await;
    assert!(
        extra.malformed,
        "unknown fields are refused like the schema says"
    );
    let refused = tools.execute(&call("view", "{\"path\": \"../x\"}")).await;
    assert!(
        refused.is_error && !refused.malformed,
        "a refused path is a tool error, not bad output"
    );
    let missing = tools.execute(&call("view", "{}")).await;
    assert!(missing.is_error && missing.content.contains("path"));
}

#[tokio::test]
async fn the_fine_grained_set_separates_create_write_and_delete() {
    let (dir, tools, _) = toolbox(Duration::from_secs(1));
    let write_new = tools
        .execute(&json_call(
            "file.write",
            json!({"path": "notes/a.md", "content": "x"}),
        ))
        .await;
    assert!(write_new.is_error);
    assert_eq!(
        write_new.content,
        "'notes/a.md' does not exist; file_write replaces existing files only (use file_create to make a new file)"
    );
    let create = tools
        .execute(&json_call(
            "file.create",
            json!({"path": "notes/a.md", "content": "one\ntwo\n"}),
        ))
        .await;
    assert_eq!(create.content, "Created notes/a.md (8 bytes)");
    let again = tools
        .execute(&json_call(
            "file.create",
            json!({"path": "notes/a.md", "content": "x"}),
        ))
        .await;
    assert!(again.is_error && again.content.starts_with("'notes/a.md' already exists"));
    let write = tools
        .execute(&json_call(
            "file.write",
            json!({"path": "notes/a.md", "content": "one\nthree\n"}),
        ))
        .await;
    assert_eq!(write.content, "Wrote notes/a.md (10 bytes)");
    let patch = tools
        .execute(&json_call(
            "file.patch",
            json!({"path": "notes/a.md", "old_str": "three", "new_str": "3"}),
        ))
        .await;
    assert!(!patch.is_error, "{}", patch.content);
    let read = tools
        .execute(&json_call("file.read", json!({"path": "notes/a.md"})))
        .await;
    assert_eq!(read.content, "     1\tone\n     2\t3\n");
    let dir_delete = tools
        .execute(&json_call("file.delete", json!({"path": "notes"})))
        .await;
    assert_eq!(
        dir_delete.content,
        "'notes' is a directory; file_delete removes files only"
    );
    let delete = tools
        .execute(&json_call("file.delete", json!({"path": "notes/a.md"})))
        .await;
    assert_eq!(delete.content, "Deleted notes/a.md");
    assert!(!dir.path().join("notes/a.md").exists());
    assert!(dir.path().join("notes").is_dir());
}

#[test]
fn calls_are_described_by_their_path_or_command() {
    assert_eq!(
        ToolBox::describe(&call("create_file", r#"{"path":"src/a.rs","content":""}"#)),
        "create_file: src/a.rs"
    );
    assert_eq!(ToolBox::describe(&call("view", "garbage")), "view");
    assert_eq!(
        ToolBox::describe(&call("file.patch", r#"{"path":"b.rs"}"#)),
        "file.patch: b.rs"
    );
    assert_eq!(
        ToolBox::describe(&call("bash", r#"{"command":"cargo test\n  --all"}"#)),
        "bash: cargo test --all"
    );
    let long = format!(r#"{{"command":"echo {}"}}"#, "x".repeat(200));
    let described = ToolBox::describe(&call("bash", &long));
    assert_eq!(described.chars().count(), "bash: ".len() + 81);
    assert_eq!(ToolBox::describe(&call("file.list", "{}")), "file.list: .");
    assert_eq!(
        ToolBox::describe(&call("file.search", r#"{"pattern":"todo","path":"src"}"#)),
        "file.search: todo in src"
    );
}

#[tokio::test]
async fn two_concurrent_writers_to_one_file_take_turns() {
    let (dir, tools, locks) = toolbox(Duration::from_secs(10));
    // A write in progress elsewhere holds the file; two more writers queue behind it,
    // in a known order (the lock is first come, first served).
    let in_progress = locks.lock("a.txt").await.unwrap();
    let writer = |path: &'static str, content: &'static str| {
        let tools = tools.clone();
        tokio::spawn(async move {
            tools
                .execute(&json_call(
                    "create_file",
                    json!({"path": path, "content": content}),
                ))
                .await
        })
    };
    let queued = |n: usize| {
        let locks = locks.clone();
        async move {
            while locks.claims("a.txt") < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    };
    let first = writer("a.txt", "first");
    queued(2).await;
    let second = writer("./a.txt", "second");
    queued(3).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        !dir.path().join("a.txt").exists(),
        "nobody writes while the lock is held"
    );
    drop(in_progress);
    let first = first.await.unwrap();
    let second = second.await.unwrap();
    // The second saw the first's file (it overwrote it) and its content stands:
    // the writes ran one after the other, in the order they queued.
    assert_eq!(first.content, "Created a.txt (5 bytes)");
    assert_eq!(second.content, "Overwrote ./a.txt (6 bytes)");
    assert_eq!(
        std::fs::read_to_string(dir.path().join("a.txt")).unwrap(),
        "second"
    );
    assert_eq!(locks.active(), 0);
}

#[tokio::test]
async fn a_writer_that_waits_too_long_gets_the_lock_error() {
    let (dir, tools, locks) = toolbox(Duration::from_millis(100));
    let _held = locks.lock("src/a.rs").await.unwrap();
    for (name, args) in [
        (
            "create_file",
            json!({"path": "./src//a.rs", "content": "x"}),
        ),
        (
            "str_replace",
            json!({"path": "src/a.rs", "old_str": "a", "new_str": "b"}),
        ),
        ("file.write", json!({"path": "src/a.rs", "content": "x"})),
        ("file.create", json!({"path": "src/a.rs", "content": "x"})),
        ("file.delete", json!({"path": "src/a.rs"})),
        (
            "file.patch",
            json!({"path": "src/a.rs", "old_str": "a", "new_str": "b"}),
        ),
    ] {
        let started = Instant::now();
        let out = tools.execute(&json_call(name, args)).await;
        assert!(started.elapsed() >= Duration::from_millis(100), "{name}");
        assert!(out.is_error && !out.malformed, "{name}");
        assert_eq!(
            out.content,
            "'src/a.rs' is locked by another thread; try again later or work on something else",
            "{name}"
        );
    }
    assert!(!dir.path().join("src").exists());
}

#[tokio::test]
async fn other_files_and_all_reads_go_on_while_a_file_is_locked() {
    let (dir, tools, locks) = toolbox(Duration::from_secs(5));
    std::fs::write(dir.path().join("a.txt"), "alpha\n").unwrap();
    let _held = locks.lock("a.txt").await.unwrap();
    let started = Instant::now();
    let other = tools
        .execute(&json_call(
            "create_file",
            json!({"path": "b.txt", "content": "b"}),
        ))
        .await;
    assert_eq!(other.content, "Created b.txt (1 bytes)");
    for (name, args) in [
        ("view", json!({"path": "a.txt"})),
        ("file.read", json!({"path": "a.txt"})),
        ("file.list", json!({})),
        ("file.search", json!({"pattern": "alpha"})),
    ] {
        let out = tools.execute(&json_call(name, args)).await;
        assert!(!out.is_error, "{name}: {}", out.content);
        assert!(out.content.contains('a'), "{name}: {}", out.content);
    }
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "nothing waited for the lock"
    );
}

#[tokio::test]
async fn locks_are_released_after_errors_and_cancelled_waits() {
    let (_dir, tools, locks) = toolbox(Duration::from_secs(5));
    let failed = tools
        .execute(&json_call(
            "str_replace",
            json!({"path": "none.rs", "old_str": "a", "new_str": "b"}),
        ))
        .await;
    assert!(failed.is_error);
    assert_eq!(locks.active(), 0, "a failed write leaves no lock behind");

    let held = locks.lock("c.txt").await.unwrap();
    let call = json_call("create_file", json!({"path": "c.txt", "content": "c"}));
    let waiting = tools.execute(&call);
    assert!(
        tokio::time::timeout(Duration::from_millis(50), waiting)
            .await
            .is_err(),
        "the writer waits for the lock"
    );
    drop(held);
    assert_eq!(
        locks.active(),
        0,
        "a cancelled writer leaves no lock behind"
    );
    let after = tools
        .execute(&json_call(
            "create_file",
            json!({"path": "c.txt", "content": "c"}),
        ))
        .await;
    assert_eq!(after.content, "Created c.txt (1 bytes)");
}

/// The first tool named in `text` by a name the model never sees (`file.read`,
/// where the model knows `file_read`).
fn names_a_hidden_tool(text: &str) -> Option<&'static str> {
    registry::names()
        .filter(|name| to_wire(name) != *name)
        .find(|name| text.contains(name))
}

/// Everything the model reads about tools names them as it sees them: the schemas
/// (descriptions and parameters), and every message a call can get back that names
/// a tool (so the model can call the one it is pointed to).
#[tokio::test]
async fn no_text_the_model_reads_names_a_tool_it_does_not_see() {
    assert_eq!(
        names_a_hidden_tool("use file.write"),
        Some("file.write"),
        "the check finds what it looks for"
    );
    for spec in registry::TOOLS.iter().map(|t| t.spec(&Default::default())) {
        let text = format!("{} {}", spec.description, spec.schema_json);
        assert_eq!(names_a_hidden_tool(&text), None, "{}: {text}", spec.name);
    }

    let (dir, tools, _) = toolbox(Duration::from_secs(1));
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(dir.path().join("a.txt"), "x = 1\n").unwrap();
    std::fs::write(dir.path().join("blob"), b"\0\x01binary").unwrap();
    let big = "x".repeat(files::MAX_WRITE_BYTES + 1);
    let calls = [
        call("rm_rf", "{}"),
        call("file.read", "{\"path\": "),
        json_call("file.read", json!({"path": "blob"})),
        json_call("file.write", json!({"path": "new.txt", "content": "x"})),
        json_call("file.write", json!({"path": "a.txt", "content": big})),
        json_call("file.create", json!({"path": "a.txt", "content": "x"})),
        json_call("file.delete", json!({"path": "sub"})),
        json_call("file.list", json!({"path": "a.txt"})),
        json_call(
            "file.patch",
            json!({"path": "a.txt", "old_str": "", "new_str": "y"}),
        ),
        json_call(
            "file.patch",
            json!({"path": "blob", "old_str": "b", "new_str": "c"}),
        ),
        json_call("self_edit_model", json!({"new_model": "m"})),
    ];
    for call in &calls {
        let outcome = tools.execute(call).await;
        assert!(outcome.is_error, "{}: {}", call.name, outcome.content);
        assert_eq!(
            names_a_hidden_tool(&outcome.content),
            None,
            "{}: {}",
            call.name,
            outcome.content
        );
    }
    // A conversation written out as text (summaries, titles) names calls the same way.
    let said = crate::summary::as_text(&[
        chorus_proto::domain::ChatMessage::assistant(String::new(), vec![calls[3].clone()]),
        chorus_proto::domain::ChatMessage::tool_result(&calls[3], "done", false),
    ]);
    for message in &said {
        assert_eq!(
            names_a_hidden_tool(&message.content),
            None,
            "{}",
            message.content
        );
    }
}

/// A run with a working directory: the file tools see only it and bash starts in
/// it, while the command's home stays the agent's workspace.
#[tokio::test]
async fn a_run_in_a_working_directory_writes_and_runs_there() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("top.txt"), "top").unwrap();
    let workspace = Workspace::new(dir.path()).within("tasks/3").unwrap();
    let tools = ToolBox::new(workspace, Arc::new(FileLocks::new(Duration::from_secs(1))));
    let written = tools
        .execute(&json_call(
            "create_file",
            json!({"path": "a.txt", "content": "hi"}),
        ))
        .await;
    assert!(!written.is_error, "{}", written.content);
    assert!(dir.path().join("tasks/3/a.txt").exists());
    let above = tools
        .execute(&json_call("view", json!({"path": "../../top.txt"})))
        .await;
    assert!(above.is_error, "{}", above.content);
    let shell = tools
        .execute(&json_call(
            "bash",
            json!({"command": "pwd; ls; echo $HOME"}),
        ))
        .await;
    assert!(!shell.is_error, "{}", shell.content);
    let home = dir.path().canonicalize().unwrap();
    let stdout: Vec<&str> = shell
        .content
        .lines()
        .skip_while(|l| *l != "--- stdout ---")
        .skip(1)
        .take(3)
        .collect();
    assert_eq!(
        stdout,
        [
            home.join("tasks/3").to_str().unwrap(),
            "a.txt",
            home.to_str().unwrap()
        ],
        "{}",
        shell.content
    );
}
