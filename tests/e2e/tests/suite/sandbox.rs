//! The sandbox through the binaries: an agent under `open` (the strongest profile)
//! runs an attack corpus in bash and every attempt fails with a clear error, nothing
//! outside its workspace changes, and ordinary work in the workspace still runs.
//! Runs as root in CI: root bypasses file modes but not Landlock, so these hold there.

use std::path::Path;
use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{
    Chorus, FakeModel, FakeOpenAi, TEST_DB_PASSWORD, process, test_postgres,
};
use reqwest::Method;
use serde_json::{Value, json};

/// Low limits, so the fork bomb test cannot hurt the machine even if a bound fails.
const CONFIG: &str = "[sandbox]\nmax_processes = 40\ncpu_secs = 60\n";

fn bash(id: &str, command: &str) -> chorus_test_support::fake_model::Reply {
    tool_call(id, "bash", json!({"command": command, "timeout": 60}))
}

async fn start(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .openai_fake(model)
        .generated_token()
        .config(CONFIG)
        .start()
        .await
}

async fn create(chorus: &Chorus, body: Value) -> anyhow::Result<()> {
    chorus.create_agent_with(body).await?;
    Ok(())
}

/// Runs one thread of `agent` and returns its tool results in order.
async fn run(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<(bool, String)>> {
    let id = chorus.send_message(agent, "go").await?;
    let thread = chorus
        .wait_thread_finished(agent, id, Duration::from_secs(120))
        .await?;
    anyhow::ensure!(thread["status"] == "completed", "thread: {thread}");
    Ok(tool_results(&thread))
}

/// Every file under `dir`, for before/after comparisons.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path.clone());
            }
            out.push(path.to_string_lossy().into_owned());
        }
    }
    out.sort();
    out
}

#[tokio::test]
async fn an_open_agent_cannot_reach_secrets_other_agents_or_anything_outside_its_workspace()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    let data = chorus.data_dir.clone();
    create(&chorus, json!({"name": "victim"})).await?;
    let victim = chorus.agent_dir("victim").join("workspace");
    std::fs::write(victim.join("secret.txt"), "victim's secret")?;
    let victim_files = files(&victim);
    create(&chorus, json!({"name": "attacker", "permissions": "open"})).await?;
    let token = chorus.token().to_string();
    let outside = std::env::temp_dir().join(format!("chorus-sandbox-{}", std::process::id()));
    let d = data.display();

    let attacks = [
        format!("cat {d}/api-token"),
        // Every ancestor's environment, up to pid 1: only variable names that could
        // hold a secret are printed, and whether the read worked.
        "p=$$; while [ \"$p\" -gt 1 ]; do \
           if e=$(tr '\\0' '\\n' < /proc/$p/environ 2>&1); then echo \"$p readable\"; \
             echo \"$e\" | grep -E 'TOKEN|_KEY|SECRET|DATABASE_URL' || true; \
           else echo \"$p: $e\"; fi; \
           p=$(awk '/^PPid/{print $2}' /proc/$p/status); done"
            .to_string(),
        // The store: its file, or (on Postgres) whatever else lies in the data dir.
        if test_postgres().is_some() {
            format!("head -c 100 {d}/tool-mark-instance")
        } else {
            format!("head -c 100 {d}/chorus.db")
        },
        format!("ls {d}/agents/victim/workspace"),
        format!("cat {d}/agents/victim/workspace/secret.txt"),
        format!("cat {d}/available_models.json"),
        format!("ls {d}"),
        format!("echo planted > {}", outside.display()),
        format!("echo planted > {d}/planted"),
        "echo planted > ../docs/planted.md".to_string(),
        // The chain: whatever token it can find, used to raise its own permissions.
        format!(
            "for t in $(cat {d}/api-token 2>/dev/null) \
               $(for p in /proc/[0-9]*; do tr '\\0' '\\n' < $p/environ 2>/dev/null; done \
                 | sed -n 's/^CHORUS_API_TOKEN=//p'); do \
               curl -s -o /dev/null -w '%{{http_code}}\\n' -X PATCH -H \"Authorization: Bearer $t\" \
                 -H 'content-type: application/json' -d '{{\"permissions\":\"locked\"}}' \
                 {}/api/agents/attacker; done; echo tried",
            chorus.http_url
        ),
    ];
    for (i, attack) in attacks.iter().enumerate() {
        model.push(bash(&format!("c{i}"), attack));
    }
    model.push(text("done"));
    let results = run(&chorus, "attacker").await?;
    assert_eq!(results.len(), attacks.len());
    for (i, (is_error, content)) in results.iter().enumerate() {
        eprintln!("--- attack {i}: {}\n{content}", attacks[i]);
        assert!(!content.contains(&token), "attack {i} saw the API token");
        assert!(
            !content.contains("sk-openai-test"),
            "attack {i} saw the provider key"
        );
        assert!(
            !content.contains("victim's secret"),
            "attack {i} read another agent"
        );
        assert!(
            !content.contains(TEST_DB_PASSWORD),
            "attack {i} saw the database's password"
        );
        if i != 1 && i != attacks.len() - 1 {
            assert!(*is_error, "attack {i} succeeded: {content}");
            assert!(
                content.contains("Permission denied"),
                "attack {i}: {content}"
            );
        }
    }
    // The ancestors: the worker and chorus are closed or hold no secret.
    let walk = &results[1].1;
    assert!(
        !walk.contains("CHORUS_API_TOKEN=") || walk.contains("CHORUS_API_TOKEN=*"),
        "{walk}"
    );
    // The chain found no token to use: no PATCH was even authorised (curl prints
    // each status alone on a line; a long stderr is cut mid-line, so only a whole
    // three-digit line counts).
    let chain = &results[attacks.len() - 1].1;
    assert!(
        chain.lines().all(|line| {
            let line = line.trim();
            !(line.len() == 3 && line.starts_with('2') && line.bytes().all(|b| b.is_ascii_digit()))
        }),
        "a PATCH was authorised: {chain}"
    );
    assert!(
        !walk.contains("DATABASE_URL=") || walk.contains("DATABASE_URL=*"),
        "{walk}"
    );

    assert!(!outside.exists(), "wrote outside the workspace");
    assert!(!data.join("planted").exists());
    assert!(
        !chorus
            .agent_dir("attacker")
            .join("docs/planted.md")
            .exists()
    );
    assert_eq!(
        files(&victim),
        victim_files,
        "the victim's workspace changed"
    );
    let agent: Value = chorus.agent("attacker").await?;
    assert_eq!(agent["permissions"], "open");
    let audit: Value = chorus
        .api(Method::GET, "/api/agents/attacker/audit?limit=1000")
        .send()
        .await?
        .json()
        .await?;
    let changes: Vec<&Value> = audit["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["action"]
                .as_str()
                .unwrap_or_default()
                .starts_with("agent:configure")
        })
        .collect();
    assert!(changes.is_empty(), "configuration changed: {changes:?}");
    assert!(
        !chorus.output().contains(TEST_DB_PASSWORD),
        "the database's password is in chorus's output"
    );
    Ok(())
}

#[tokio::test]
async fn ordinary_work_runs_in_the_sandbox() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    create(&chorus, json!({"name": "dev", "permissions": "open"})).await?;
    let agent = chorus.agent("dev").await?;
    let sandbox = agent["sandbox"].as_str().unwrap_or_default();
    assert!(sandbox.starts_with("landlock (abi "), "{agent}");
    assert_eq!(agent["network"], "on");
    let work = [
        "git init -q proj && cd proj && echo hi > a && git add a \
         && git -c user.email=a@b -c user.name=a commit -qm first && git status --short && git log --oneline | wc -l",
        "if command -v cargo >/dev/null; then cargo --version; else echo no cargo; fi",
        "python3 -c 'print(40 + 2)'",
        "ls /usr/bin | head -3 && echo $HOME && touch $HOME/.dotfile $TMPDIR/scratch && echo wrote",
        "if command -v cc >/dev/null; then printf '#include <stdio.h>\\nint main(void){puts(\"compiled\");return 0;}\\n' > t.c \
         && cc t.c -o t && ./t; else echo no cc; fi",
        "python3 -c 'import subprocess, threading; t = threading.Thread(target=print, args=(\"thread\",)); t.start(); t.join(); subprocess.run([\"true\"], check=True); print(\"forked\")'",
    ];
    for (i, command) in work.iter().enumerate() {
        model.push(bash(&format!("w{i}"), command));
    }
    model.push(tool_call(
        "bg",
        "bash",
        json!({"command": "echo task-started; sleep 0.2; echo task-done", "run_in_background": true}),
    ));
    model.push(tool_call(
        "out",
        "task_output",
        json!({"task_id": 1, "wait": 30}),
    ));
    model.push(text("done"));
    let results = run(&chorus, "dev").await?;
    for (i, (is_error, content)) in results.iter().enumerate() {
        eprintln!(
            "--- work {i}: {}\n{content}",
            work.get(i).unwrap_or(&"(task)")
        );
        assert!(!is_error, "work {i} failed: {content}");
    }
    assert!(
        results[4].1.contains("compiled") || results[4].1.contains("no cc"),
        "{}",
        results[4].1
    );
    assert!(results[5].1.contains("thread") && results[5].1.contains("forked"));
    let task = &results[work.len() + 1].1;
    assert!(
        task.contains("task-started") && task.contains("task-done"),
        "{task}"
    );
    assert!(results[0].1.contains("\n1\n"), "{}", results[0].1);
    assert!(results[1].1.contains("cargo ") || results[1].1.contains("no cargo"));
    assert!(results[2].1.contains("42"));
    // HOME is the agent's own, outside the workspace (the file tools cannot write it).
    let home = chorus.agent_dir("dev").join("home");
    assert!(
        results[3].1.contains(&home.display().to_string()),
        "{}",
        results[3].1
    );
    assert!(home.join(".dotfile").exists());
    assert!(!chorus.agent_dir("dev").join("workspace/.dotfile").exists());
    Ok(())
}

#[tokio::test]
async fn a_fork_bomb_is_ended_by_the_process_limit() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    create(&chorus, json!({"name": "bomber", "permissions": "open"})).await?;
    // Exponential but bounded (at most 2^10 processes), so a failing bound cannot
    // take the machine down.
    model.push(bash(
        "b",
        "b(){ if [ $1 -gt 0 ]; then b $(($1-1)) & b $(($1-1)) & fi; sleep 20; }; b 9",
    ));
    model.push(text("done"));
    let started = std::time::Instant::now();
    let results = run(&chorus, "bomber").await?;
    let (is_error, content) = &results[0];
    eprintln!("{content}");
    assert!(*is_error);
    assert!(
        content.contains(
            "killed: process limit (40 processes per command, [sandbox] max_processes) reached"
        ),
        "{content}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the bomb ran to its end"
    );
    Ok(())
}

#[tokio::test]
async fn network_off_forbids_tcp_and_on_allows_it() -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    create(
        &chorus,
        json!({"name": "offline", "permissions": "open", "network": "off"}),
    )
    .await?;
    create(&chorus, json!({"name": "online", "permissions": "open"})).await?;
    assert_eq!(chorus.agent("offline").await?["network"], "off");
    let connect = format!("exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected");

    model.push(bash("n1", &connect));
    model.push(text("done"));
    let results = run(&chorus, "offline").await?;
    eprintln!("{}", results[0].1);
    assert!(results[0].0, "{}", results[0].1);
    assert!(
        results[0].1.contains("Permission denied"),
        "{}",
        results[0].1
    );
    let accepted = tokio::time::timeout(Duration::from_millis(300), listener.accept()).await;
    assert!(
        accepted.is_err(),
        "a connection arrived from the offline agent"
    );

    model.push(bash("n2", &connect));
    model.push(text("done"));
    let results = run(&chorus, "online").await?;
    assert!(!results[0].0, "{}", results[0].1);
    assert!(results[0].1.contains("connected"), "{}", results[0].1);
    let accepted = tokio::time::timeout(Duration::from_secs(5), listener.accept()).await;
    assert!(
        accepted.is_ok(),
        "no connection arrived from the online agent"
    );

    // A bad value is a clear error.
    let bad = chorus
        .api(Method::PATCH, "/api/agents/online")
        .json(&json!({"network": "maybe"}))
        .send()
        .await?;
    assert_eq!(bad.status(), 400);
    assert!(
        bad.text()
            .await?
            .contains("network must be \\\"on\\\" or \\\"off\\\"")
    );
    Ok(())
}

/// Types `touch <marker>` into each terminal named after the marker (when none is
/// named: every `/dev/pts/*` it can list or guess, and `/dev/tty`) with `TIOCSTI`,
/// saying what each attempt did.
const INJECT: &str = r#"
import fcntl, glob, os, sys, termios
marker = sys.argv[1]
guessed = set(glob.glob('/dev/pts/[0-9]*')) | {f'/dev/pts/{n}' for n in range(64)}
targets = sys.argv[2:] or sorted(guessed) + ['/dev/tty']
for path in targets:
    try:
        fd = os.open(path, os.O_RDWR | os.O_NOCTTY)
    except FileNotFoundError:
        continue
    except OSError as e:
        print(path, 'open:', e)
        continue
    try:
        for byte in f'touch {marker}\n'.encode():
            fcntl.ioctl(fd, termios.TIOCSTI, bytes([byte]))
        print(path, 'injected')
    except OSError as e:
        print(path, 'ioctl:', e)
"#;

/// An interactive shell whose controlling terminal is a fresh pty, as a person's
/// login would be; killed on drop.
struct TerminalShell {
    shell: std::process::Child,
    master: std::fs::File,
    slave: std::path::PathBuf,
}

impl TerminalShell {
    fn start(cwd: &Path) -> anyhow::Result<Self> {
        use std::os::fd::AsRawFd;
        let pty = nix::pty::openpty(None, None)?;
        let slave = std::fs::read_link(format!("/proc/self/fd/{}", pty.slave.as_raw_fd()))?;
        let io = || -> anyhow::Result<std::process::Stdio> { Ok(pty.slave.try_clone()?.into()) };
        // `setsid -c`: a new session that takes the pty as its controlling terminal.
        let shell = std::process::Command::new("setsid")
            .args(["-c", "sh", "-i"])
            .current_dir(cwd)
            .env("PS1", "$ ")
            .stdin(io()?)
            .stdout(io()?)
            .stderr(io()?)
            .spawn()?;
        let master = std::fs::File::from(pty.master);
        // What the shell echoes must be read, or a full pty would block it.
        let mut reader = master.try_clone()?;
        std::thread::spawn(move || {
            let mut sink = [0u8; 4096];
            while matches!(std::io::Read::read(&mut reader, &mut sink), Ok(n) if n > 0) {}
        });
        Ok(TerminalShell {
            shell,
            master,
            slave,
        })
    }

    /// Types `line` as a person would.
    fn type_line(&mut self, line: &str) -> anyhow::Result<()> {
        std::io::Write::write_all(&mut self.master, format!("{line}\n").as_bytes())?;
        Ok(())
    }
}

impl Drop for TerminalShell {
    fn drop(&mut self) {
        let _ = self.shell.kill();
        let _ = self.shell.wait();
    }
}

async fn wait_for_file(path: &Path, timeout: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + timeout;
    while tokio::time::Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    path.exists()
}

#[tokio::test]
async fn an_open_agent_cannot_type_into_a_terminal_on_the_host() -> anyhow::Result<()> {
    if !process::as_root("an_open_agent_cannot_type_into_a_terminal_on_the_host") {
        return Ok(());
    }
    let scratch = tempfile::tempdir()?;
    let mut terminal = TerminalShell::start(scratch.path())?;
    let injected_by_test = scratch.path().join("injected-by-the-test");
    let injected_by_agent = scratch.path().join("injected-by-the-agent");
    let typed = scratch.path().join("typed");

    // The attack works without the sandbox: the test (root) types into the shell.
    let control = std::process::Command::new("python3")
        .args(["-c", INJECT])
        .arg(&injected_by_test)
        .arg(&terminal.slave)
        .output()?;
    eprintln!("control: {}", String::from_utf8_lossy(&control.stdout));
    assert!(
        wait_for_file(&injected_by_test, Duration::from_secs(20)).await,
        "the test's own injection did not run: {control:?}"
    );

    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    create(&chorus, json!({"name": "typist", "permissions": "open"})).await?;
    model.push(bash(
        "t1",
        &format!(
            "python3 - {} <<'PY'\n{INJECT}\nPY",
            injected_by_agent.display()
        ),
    ));
    model.push(bash("t2", "script -qec true /dev/null"));
    model.push(text("done"));
    let results = run(&chorus, "typist").await?;
    for (is_error, content) in &results {
        eprintln!("--- error: {is_error}\n{content}");
    }
    let attack = &results[0].1;
    assert!(!attack.contains("injected"), "{attack}");
    assert!(
        attack.contains(&format!(
            "{} open: [Errno 13] Permission denied",
            terminal.slave.display()
        )),
        "{attack}"
    );
    assert!(
        attack.contains("/dev/tty open: [Errno 13] Permission denied"),
        "{attack}"
    );
    // A command that wants a pty fails with a note that says why.
    let (is_error, pty) = &results[1];
    assert!(*is_error, "{pty}");
    assert!(
        pty.contains("note: tool processes have no terminal"),
        "{pty}"
    );

    // The shell is still listening: a line typed now runs, and anything the agent had
    // typed would have run before it.
    terminal.type_line(&format!("touch {}", typed.display()))?;
    assert!(
        wait_for_file(&typed, Duration::from_secs(20)).await,
        "the shell stopped reading its terminal"
    );
    assert!(
        !injected_by_agent.exists(),
        "the agent typed a command into the host's terminal"
    );
    Ok(())
}

/// Creates a bpf map (an array of one u32) through the raw system call; prints `map`
/// or why not.
fn bpf_map_script() -> String {
    let nr = if cfg!(target_arch = "aarch64") {
        280
    } else {
        321
    };
    format!(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         attr = (ctypes.c_uint32 * 12)(2, 4, 4, 1)\n\
         fd = libc.syscall({nr}, 0, attr, ctypes.sizeof(attr))\n\
         print('map' if fd >= 0 else f'bpf: {{os.strerror(ctypes.get_errno())}}')\n\
         raise SystemExit(0 if fd >= 0 else 1)"
    )
}

/// The host's view: `lo`'s addresses, the routes, the host name.
fn host_state() -> anyhow::Result<(String, String, String)> {
    let run = |args: &[&str]| -> anyhow::Result<String> {
        let out = std::process::Command::new("ip").args(args).output()?;
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    };
    Ok((
        run(&["-o", "addr", "show", "dev", "lo"])?,
        run(&["route", "show", "table", "all"])?,
        std::fs::read_to_string("/proc/sys/kernel/hostname")?,
    ))
}

#[tokio::test]
async fn a_root_agent_changes_nothing_on_the_host() -> anyhow::Result<()> {
    if !process::as_root("a_root_agent_changes_nothing_on_the_host") {
        return Ok(());
    }
    let addr = "10.213.7.9";
    let route = "10.213.8.0/24";
    let shm = format!("/dev/shm/chorus-sandbox-{}", std::process::id());
    let attacks = [
        format!("ip addr add {addr}/32 dev lo"),
        format!("ip route add {route} dev lo"),
        "hostname chorus-sandbox-escape".to_string(),
        format!("python3 - <<'PY'\n{}\nPY", bpf_map_script()),
        "mknod loop0 b 7 0".to_string(),
        "mknod mem c 1 1".to_string(),
        "unshare -U true".to_string(),
        "unshare -r id".to_string(),
        format!("echo planted > {shm}"),
    ];
    // Each attack works for root without the sandbox (in namespaces of its own, so
    // this control changes nothing on the host either).
    let scratch = tempfile::tempdir()?;
    let control = format!(
        "set -e; ip link set lo up; {}; {}; {}; python3 -c \"$BPF\"; {}; {}; {}; {}",
        attacks[0], attacks[1], attacks[2], attacks[4], attacks[5], attacks[6], attacks[7]
    );
    let out = std::process::Command::new("unshare")
        .args(["--net", "--uts", "sh", "-c", &control])
        .env("BPF", bpf_map_script())
        .current_dir(scratch.path())
        .output()?;
    assert!(
        out.status.success(),
        "the attacks do not work as root here, so their failing below would prove nothing: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let before = host_state()?;
    assert!(
        !before.0.contains(addr) && !before.1.contains("10.213.8.0"),
        "the host already has {addr} or {route}: {before:?}"
    );

    let model = FakeOpenAi::start().await;
    let chorus = start(&model).await?;
    create(&chorus, json!({"name": "root", "permissions": "open"})).await?;
    create(&chorus, json!({"name": "neighbour", "permissions": "open"})).await?;
    for (i, attack) in attacks.iter().enumerate() {
        model.push(bash(&format!("h{i}"), attack));
    }
    model.push(bash(
        "status",
        "id -u; grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status",
    ));
    model.push(text("done"));
    let results = run(&chorus, "root").await?;
    model.push(bash("n", &format!("cat {shm}; ls /dev/shm")));
    model.push(text("done"));
    let neighbour = run(&chorus, "neighbour").await?;

    let after = host_state()?;
    // Only what the attacks aim at: other routes and addresses may come and go.
    let changed = after.0.contains(addr) || after.1.contains("10.213.8.0") || after.2 != before.2;
    // Undo whatever got through before asserting, so a failure leaves the host as it was.
    if changed {
        let _ = std::process::Command::new("ip")
            .args(["addr", "del", &format!("{addr}/32"), "dev", "lo"])
            .status();
        let _ = std::process::Command::new("ip")
            .args(["route", "del", route])
            .status();
        let _ = std::fs::write("/proc/sys/kernel/hostname", before.2.trim());
    }
    let _ = std::fs::remove_file(&shm);
    for (i, (is_error, content)) in results.iter().enumerate().take(attacks.len()) {
        eprintln!("--- attack {i}: {}\n{content}", attacks[i]);
        assert!(*is_error, "attack {i} succeeded: {content}");
        assert!(
            [
                "Operation not permitted",
                "Permission denied",
                "must be root"
            ]
            .iter()
            .any(|refusal| content.contains(refusal)),
            "attack {i}: {content}"
        );
    }
    assert!(
        results[3].1.contains("bpf: Operation not permitted"),
        "{}",
        results[3].1
    );
    let status = &results[attacks.len()].1;
    eprintln!("--- status\n{status}");
    assert!(status.contains("\n0\n"), "not root: {status}");
    for cap in ["CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"] {
        assert!(
            status.contains(&format!("{cap}:\t0000000000000000")),
            "{status}"
        );
    }
    assert!(
        status.contains("NoNewPrivs:\t1") && status.contains("Seccomp:\t2"),
        "{status}"
    );
    assert!(!changed, "the host changed: {before:?} → {after:?}");
    let workspace = chorus.agent_dir("root").join("workspace");
    assert!(!workspace.join("loop0").exists() && !workspace.join("mem").exists());
    assert!(!Path::new(&shm).exists());
    let (is_error, seen) = &neighbour[0];
    eprintln!("--- neighbour\n{seen}");
    assert!(*is_error && !seen.contains("planted"), "{seen}");
    Ok(())
}

#[tokio::test]
async fn an_open_agent_cannot_read_the_environment_or_memory_of_chorus_or_its_worker()
-> anyhow::Result<()> {
    if !process::as_root(
        "an_open_agent_cannot_read_the_environment_or_memory_of_chorus_or_its_worker",
    ) {
        return Ok(());
    }
    // A secret under a name no blanking knows: only the closed /proc files keep it.
    let secret = "unblanked-secret-value-4711";
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .generated_token()
        .config(CONFIG)
        .env("CHORUS_SANDBOX_TEST_VALUE", secret)
        .start()
        .await?;
    let pid = chorus.pid();
    // The positive control: a capable root reads it.
    let environ = std::fs::read(format!("/proc/{pid}/environ"))?;
    assert!(
        String::from_utf8_lossy(&environ).contains(secret),
        "the secret is not in chorus's environment, so not reading it would prove nothing"
    );
    create(&chorus, json!({"name": "reader", "permissions": "open"})).await?;
    let reads = [
        format!("tr '\\0' '\\n' < /proc/{pid}/environ"),
        format!("head -c 64 /proc/{pid}/mem"),
        "echo worker=$PPID; tr '\\0' '\\n' < /proc/$PPID/environ".to_string(),
        "head -c 64 /proc/$PPID/mem".to_string(),
    ];
    for (i, read) in reads.iter().enumerate() {
        model.push(bash(&format!("r{i}"), read));
    }
    model.push(text("done"));
    let results = run(&chorus, "reader").await?;
    let worker = chorus
        .wait_worker_running("reader", Duration::from_secs(30))
        .await?;
    for (i, (is_error, content)) in results.iter().enumerate() {
        eprintln!("--- read {i}: {}\n{content}", reads[i]);
        assert!(*is_error, "read {i} worked: {content}");
        assert!(content.contains("Permission denied"), "read {i}: {content}");
        for hidden in [secret, chorus.token(), "sk-openai-test", TEST_DB_PASSWORD] {
            assert!(
                !content.contains(hidden),
                "read {i} saw a secret: {content}"
            );
        }
    }
    assert!(
        results[2].1.contains(&format!("worker={worker}\n")),
        "$PPID is not the worker {worker}: {}",
        results[2].1
    );
    Ok(())
}
