//! The sandbox through the binaries: an agent under `open` (the strongest profile)
//! runs an attack corpus in bash and every attempt fails with a clear error, nothing
//! outside its workspace changes, and ordinary work in the workspace still runs.
//! Runs as root in CI: root bypasses file modes but not Landlock, so these hold there.

use std::path::Path;
use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, TEST_DB_PASSWORD, test_postgres};
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
    ];
    for (i, command) in work.iter().enumerate() {
        model.push(bash(&format!("w{i}"), command));
    }
    model.push(text("done"));
    let results = run(&chorus, "dev").await?;
    for (i, (is_error, content)) in results.iter().enumerate() {
        eprintln!("--- work {i}: {}\n{content}", work[i]);
        assert!(!is_error, "work {i} failed: {content}");
    }
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
