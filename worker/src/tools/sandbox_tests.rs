use super::*;

fn policy() -> SandboxPolicy {
    SandboxPolicy {
        network: true,
        read_only: vec!["/srv/data".into()],
        read_write: vec!["/srv/scratch".into()],
        run_unsandboxed: false,
        limits: ResourceLimits::default(),
    }
}

#[test]
fn the_data_dir_is_reachable_only_through_the_agents_own_directories() {
    let sandbox = Sandbox::for_agent(policy(), Path::new("/d/agents/a"));
    let (ro, rw) = paths(&sandbox, Some(Path::new("/home/u")));
    let under_data: Vec<_> = ro
        .iter()
        .chain(&rw)
        .filter(|p| p.starts_with("/d"))
        .collect();
    assert_eq!(
        under_data,
        [
            Path::new("/d/agents/a/workspace"),
            Path::new("/d/agents/a/home"),
            Path::new("/d/agents/a/tmp")
        ]
    );
    assert!(
        rw.iter()
            .all(|p| !p.starts_with("/d") || p.starts_with("/d/agents/a"))
    );
    assert!(ro.contains(&PathBuf::from("/home/u/.cargo")));
    assert!(ro.contains(&PathBuf::from("/srv/data")));
    assert!(rw.contains(&PathBuf::from("/srv/scratch")));
    assert!(!ro.contains(&PathBuf::from("/home/u")));
    assert!(!ro.iter().chain(&rw).any(|p| p == Path::new("/tmp")));
}

#[test]
fn limit_notes_name_the_limit_and_the_setting() {
    let limits = ResourceLimits {
        cpu_secs: 3,
        file_size_bytes: 1024,
        open_files: 0,
        max_processes: 0,
    };
    let cpu = limit_note(Some(nix::libc::SIGXCPU), None, &limits).unwrap_or_default();
    assert!(cpu.contains("CPU time limit (3 s"), "{cpu}");
    // bash reports a child killed by SIGXFSZ as exit code 128 + 25.
    let fsize = limit_note(None, Some(128 + nix::libc::SIGXFSZ), &limits).unwrap_or_default();
    assert!(fsize.contains("file size limit (1024 bytes"), "{fsize}");
    assert_eq!(limit_note(None, Some(1), &limits), None);
    assert_eq!(
        limit_note(Some(nix::libc::SIGXCPU), None, &ResourceLimits::default()),
        None
    );
}

/// A toolbox whose bash runs in a sandbox rooted in a fresh "data dir".
fn sandboxed(limits: ResourceLimits, network: bool) -> (tempfile::TempDir, crate::tools::ToolBox) {
    let data = tempfile::tempdir().unwrap();
    let agent = data.path().join("agents/a");
    let workspace = agent.join("workspace");
    std::fs::create_dir_all(&workspace).unwrap();
    std::fs::write(data.path().join("api-token"), "secret-token").unwrap();
    let sandbox = Sandbox::for_agent(
        SandboxPolicy {
            network,
            read_only: vec![],
            read_write: vec![],
            run_unsandboxed: false,
            limits,
        },
        &agent,
    );
    let config = crate::tools::ToolConfig {
        bash: crate::tools::bash::BashConfig {
            sandbox: Some(sandbox),
            ..Default::default()
        },
    };
    let tools = crate::tools::ToolBox::new(
        crate::tools::jail::Workspace::new(&workspace),
        std::sync::Arc::default(),
    )
    .with_config(config);
    (data, tools)
}

async fn run(tools: &crate::tools::ToolBox, command: &str) -> crate::tools::ToolOutcome {
    let call = chorus_proto::domain::ToolCall {
        id: "b".into(),
        name: "bash".into(),
        arguments: serde_json::json!({ "command": command, "timeout": 30 }).to_string(),
    };
    tools.execute(&call).await
}

#[tokio::test]
async fn a_sandboxed_command_works_in_its_workspace_and_nowhere_else() {
    assert!(
        matches!(support(), Support::Landlock { .. }),
        "these tests need Landlock: {}",
        support().describe()
    );
    let (data, tools) = sandboxed(ResourceLimits::default(), true);
    let token = data.path().join("api-token");
    let inside = run(
        &tools,
        "echo hi > a.txt && cat a.txt && ls /usr/bin | head -1 && echo $HOME && touch $TMPDIR/t",
    )
    .await;
    assert!(!inside.is_error, "{}", inside.content);
    assert!(
        inside.content.contains("agents/a/home"),
        "{}",
        inside.content
    );
    let read = run(&tools, &format!("cat {}", token.display())).await;
    assert!(
        read.is_error && read.content.contains("Permission denied"),
        "{}",
        read.content
    );
    let outside = data.path().join("written");
    let write = run(&tools, &format!("echo x > {}", outside.display())).await;
    assert!(
        write.is_error && write.content.contains("Permission denied"),
        "{}",
        write.content
    );
    assert!(!outside.exists());
    // The parent (this test) is not sandboxed: its mem and cwd are closed.
    let mem = run(&tools, "head -c 1 /proc/$PPID/mem").await;
    assert!(
        mem.is_error && mem.content.contains("Permission denied"),
        "{}",
        mem.content
    );
}

#[tokio::test]
async fn a_cpu_limit_ends_the_command_with_the_reason() {
    let limits = ResourceLimits {
        cpu_secs: 1,
        ..ResourceLimits::default()
    };
    let (_data, tools) = sandboxed(limits, true);
    let out = run(&tools, "while :; do :; done").await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("killed: CPU time limit (1 s"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn a_file_size_limit_ends_the_write_with_the_reason() {
    let limits = ResourceLimits {
        file_size_bytes: 4096,
        ..ResourceLimits::default()
    };
    let (_data, tools) = sandboxed(limits, true);
    let out = run(&tools, "head -c 100000 /dev/zero > big").await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("killed: file size limit (4096 bytes"),
        "{}",
        out.content
    );
}

#[tokio::test]
async fn too_many_processes_end_the_command_with_the_reason() {
    let limits = ResourceLimits {
        max_processes: 20,
        ..ResourceLimits::default()
    };
    let (_data, tools) = sandboxed(limits, true);
    // Bounded (at most 200 processes), so a failing limit cannot hurt the machine.
    let out = run(&tools, "for i in $(seq 200); do sleep 30 & done; wait").await;
    assert!(out.is_error, "{}", out.content);
    assert!(
        out.content.contains("killed: process limit (20 processes"),
        "{}",
        out.content
    );
}

/// `cargo nextest run -p chorus-worker sandbox_cost --run-ignored only --no-capture`:
/// what the sandbox adds to one bash call (`true`), sandboxed against unconfined.
#[tokio::test]
#[ignore]
async fn sandbox_cost() {
    let (_data, confined) = sandboxed(ResourceLimits::default(), false);
    let dir = tempfile::tempdir().unwrap();
    let open = crate::tools::ToolBox::new(
        crate::tools::jail::Workspace::new(dir.path()),
        std::sync::Arc::default(),
    );
    for (name, tools) in [
        ("unconfined", &open),
        ("landlock", &confined),
        ("unconfined", &open),
        ("landlock", &confined),
    ] {
        let n = 200;
        let started = std::time::Instant::now();
        for _ in 0..n {
            assert!(!run(tools, "true").await.is_error);
        }
        println!("{name}: {:?} per call", started.elapsed() / n);
    }
    let sandbox = Sandbox {
        workspace: dir.path().to_path_buf(),
        ..Sandbox::for_agent(policy(), dir.path())
    };
    let started = std::time::Instant::now();
    for _ in 0..1000 {
        assert!(sandbox.prepare().is_ok());
    }
    println!("prepare (ruleset build): {:?}", started.elapsed() / 1000);
}

/// The `Cap*:`, `NoNewPrivs:` and `Seccomp:` lines of a tool process's status.
const STATUS: &str = "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status";

#[tokio::test]
async fn a_tool_process_has_no_capability_terminal_or_device_node_even_as_root() {
    let (data, tools) = sandboxed(ResourceLimits::default(), true);
    let status = run(&tools, STATUS).await;
    assert!(!status.is_error, "{}", status.content);
    // A worker that is not root cannot empty the bounding set (that takes
    // CAP_SETPCAP) and needs not: with no_new_privs no exec can gain a capability.
    let root = nix::unistd::geteuid().is_root();
    let sets: &[&str] = if root {
        &["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"]
    } else {
        &["CapInh", "CapPrm", "CapEff", "CapAmb"]
    };
    for cap in sets {
        assert!(
            status
                .content
                .contains(&format!("{cap}:\t0000000000000000")),
            "{cap}: {}",
            status.content
        );
    }
    assert!(
        status.content.contains("NoNewPrivs:\t1"),
        "{}",
        status.content
    );
    assert!(status.content.contains("Seccomp:\t2"), "{}", status.content);
    // The positive control: the same command unconfined, as root, has capabilities.
    if root {
        let dir = tempfile::tempdir().unwrap();
        let open = crate::tools::ToolBox::new(
            crate::tools::jail::Workspace::new(dir.path()),
            std::sync::Arc::default(),
        );
        let unconfined = run(&open, STATUS).await;
        assert!(
            !unconfined.content.contains("CapEff:\t0000000000000000"),
            "{}",
            unconfined.content
        );
        let environ = run(&open, "tr '\\0' '\\n' < /proc/$PPID/environ | grep -c =").await;
        assert!(!environ.is_error, "{}", environ.content);
    }

    // A session of its own (sid = its pid) with no controlling terminal (tty_nr 0).
    let session = run(&tools, "echo $$; cat /proc/$$/stat").await;
    let mut lines = session
        .content
        .lines()
        .skip_while(|l| !l.starts_with("--- stdout"));
    let pid = lines.nth(1).unwrap_or_default().trim().to_string();
    let stat = lines.next().unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    assert_eq!(
        fields.get(3),
        Some(&pid.as_str()),
        "session: {}",
        session.content
    );
    assert_eq!(fields.get(4), Some(&"0"), "tty: {}", session.content);

    for (command, what) in [
        ("exec 3</dev/tty && echo opened", "/dev/tty"),
        ("exec 3<>/dev/ptmx && echo opened", "/dev/ptmx"),
        ("ls /dev/pts", "/dev/pts"),
        (
            "echo x > /dev/shm/chorus-sandbox-test && echo wrote",
            "/dev/shm",
        ),
        ("mknod loop b 7 0 && echo made", "a block device"),
        ("mknod mem c 1 1 && echo made", "a char device"),
        ("unshare -U true && echo unshared", "a user namespace"),
    ] {
        let out = run(&tools, command).await;
        assert!(out.is_error, "{what}: {}", out.content);
        assert!(
            out.content.contains("Permission denied")
                || out.content.contains("Operation not permitted"),
            "{what}: {}",
            out.content
        );
        if what.starts_with("/dev/tty") || what.starts_with("/dev/ptmx") {
            assert!(
                out.content
                    .contains("note: tool processes have no terminal"),
                "{}",
                out.content
            );
        }
    }
    // The environment of a dumpable process outside the sandbox (this test, root).
    let environ = run(&tools, "tr '\\0' '\\n' < /proc/$PPID/environ").await;
    assert!(
        environ.is_error && environ.content.contains("Permission denied"),
        "{}",
        environ.content
    );
    let workspace = data.path().join("agents/a/workspace");
    assert!(!workspace.join("loop").exists() && !workspace.join("mem").exists());
    assert!(!Path::new("/dev/shm/chorus-sandbox-test").exists());
    // A pipe (a FIFO) is not a device: still allowed.
    let fifo = run(&tools, "mkfifo p && test -p p && echo fifo").await;
    assert!(!fifo.is_error, "{}", fifo.content);
}

#[test]
fn a_failed_terminal_open_gets_a_note_and_other_output_does_not() {
    for failed in [
        "bash: /dev/tty: Permission denied",
        "script: failed to create pseudo-terminal: Permission denied",
        "open /dev/ptmx: Permission denied",
    ] {
        assert!(terminal_note(failed).is_some(), "{failed}");
    }
    for fine in [
        "ls: /tmp/x: Permission denied",
        "/dev/tty is a terminal",
        "ok",
    ] {
        assert_eq!(terminal_note(fine), None, "{fine}");
    }
}

#[test]
fn no_right_creates_a_device_node_and_no_terminal_or_shm_is_reachable() {
    let rw = read_write_access();
    assert!(!rw.contains(AccessFs::MakeChar) && !rw.contains(AccessFs::MakeBlock));
    assert!(rw.contains(AccessFs::MakeFifo) && rw.contains(AccessFs::WriteFile));
    let sandbox = Sandbox::for_agent(policy(), Path::new("/d/agents/a"));
    let (ro, rw) = paths(&sandbox, None);
    for path in ro.iter().chain(&rw) {
        for closed in ["/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm", "/dev"] {
            assert_ne!(path, Path::new(closed));
        }
    }
}
