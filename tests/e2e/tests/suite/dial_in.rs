//! Dial-in workers (`--launcher remote`): workers started by hand, as containers
//! would be, share one data directory (the shared-volume layout); the control plane
//! places agents on free ones and moves an agent when its worker dies.

use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chorus_test_support::chorus::tool_results;
use chorus_test_support::fake_model::{text, tool_call};
use chorus_test_support::{Chorus, FakeModel, FakeOpenAi, Reply, bin_path};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

const JOIN_TOKEN: &str = "join-token-0123456789abcdef";

/// A `chorus-worker` started on its own, and what it has logged so far.
struct DialInWorker {
    child: tokio::process::Child,
    log: Arc<Mutex<String>>,
    /// Copies its stderr into `log`; done at end of file, once the worker exited.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl DialInWorker {
    fn start(control_plane: &str, data_dir: &Path, agents: u16, token: &str) -> Self {
        Self::start_with(control_plane, data_dir, agents, token, &[])
    }

    fn start_with(
        control_plane: &str,
        data_dir: &Path,
        agents: u16,
        token: &str,
        extra: &[&str],
    ) -> Self {
        let mut child = tokio::process::Command::new(bin_path("chorus-worker"))
            .args(["--control-plane", control_plane, "--data-dir"])
            .arg(data_dir)
            .args(["--agents", &agents.to_string()])
            .args(extra)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env(
                "HOME",
                std::env::var("HOME").unwrap_or_else(|_| "/tmp".into()),
            )
            .env("RUST_LOG", "info")
            .env("CHORUS_JOIN_TOKEN", token)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start chorus-worker");
        let log = Arc::new(Mutex::new(String::new()));
        let stderr = child.stderr.take().expect("stderr");
        let reader = tokio::spawn({
            let log = log.clone();
            async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    eprintln!("[worker] {line}");
                    let mut log = log.lock().unwrap();
                    log.push_str(&line);
                    log.push('\n');
                }
            }
        });
        DialInWorker {
            child,
            log,
            reader: Some(reader),
        }
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// Waits for the worker to exit and for its last lines to be read: the exit is
    /// seen before the reader has drained the pipe.
    async fn exited(&mut self, limit: Duration) -> anyhow::Result<std::process::ExitStatus> {
        let status = tokio::time::timeout(limit, self.child.wait()).await??;
        if let Some(reader) = self.reader.take() {
            tokio::time::timeout(limit, reader).await??;
        }
        Ok(status)
    }

    /// Waits until the worker has logged `needle` (lines arrive through a pipe, so
    /// after whatever the worker did next).
    async fn wait_log(&self, needle: &str, limit: Duration) -> anyhow::Result<()> {
        eventually(
            limit,
            || self.log().contains(needle),
            || format!("the worker never logged {needle:?}: {}", self.log()),
        )
        .await
    }

    /// Whether it has taken `agent`'s directory (and whether it laid it out then).
    fn served(&self, agent: &str) -> Option<bool> {
        let log = self.log();
        let line = log
            .lines()
            .rfind(|l| l.contains(&format!("serving agent agent={agent} ")))?;
        Some(line.contains("laid_out=true"))
    }
}

/// Waits until `done` holds, checking every 20 ms; past `limit`, fails saying `what`.
async fn eventually(
    limit: Duration,
    mut done: impl FnMut() -> bool,
    what: impl Fn() -> String,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    while !done() {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "{}", what());
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// A loopback address for workers to dial that stays the same across restarts of
/// the control plane.
fn fixed_grpc_addr() -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// A control plane for dial-in workers on `grpc_addr`, keeping its data in
/// `data_dir`: started again with the same arguments, it is the same one.
async fn remote_chorus(
    model: &FakeModel,
    data_dir: &Path,
    grpc_addr: &str,
) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .openai_fake(model)
        .data_dir(data_dir)
        .grpc_addr(grpc_addr)
        .env("CHORUS_LAUNCHER", "remote")
        .env("CHORUS_JOIN_TOKEN", JOIN_TOKEN)
        .config("[threads]\ntitles = false\n")
        .start()
        .await
}

/// The workers (but `except`) that have taken `agent`'s directory, once at least one
/// has said so: a worker logs it before it serves the agent, but the line reaches us
/// through a pipe, possibly after the thread's answer came over HTTP.
async fn holders(
    workers: &[DialInWorker],
    agent: &str,
    except: Option<usize>,
) -> anyhow::Result<Vec<usize>> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let held: Vec<usize> = (0..workers.len())
            .filter(|&i| Some(i) != except && workers[i].served(agent).is_some())
            .collect();
        if !held.is_empty() {
            return Ok(held);
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no worker says it serves {agent}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The model writes a note, then says so.
fn write_a_note(body: &Value) -> Reply {
    let last = body["messages"]
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    if last["role"] == "tool" {
        text("The note is written.")
    } else {
        tool_call(
            "w1",
            "create_file",
            json!({"path": "note.txt", "content": "written by the agent"}),
        )
    }
}

async fn wait_running(chorus: &Chorus, agent: &str, limit: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let state = chorus.agent(agent).await?["worker"]["state"].clone();
        if state == "running" {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{agent}'s worker is {state} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn agents_run_on_dial_in_workers_and_move_with_their_files_when_theirs_is_killed()
-> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .env("CHORUS_LAUNCHER", "remote")
        .env("CHORUS_JOIN_TOKEN", JOIN_TOKEN)
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    let shared = tempfile::tempdir()?;
    let workers: Vec<DialInWorker> = (0..3)
        .map(|_| DialInWorker::start(&chorus.grpc_url, shared.path(), 3, JOIN_TOKEN))
        .collect();
    // A worker with the wrong token is refused and says so.
    let mut stranger =
        DialInWorker::start(&chorus.grpc_url, shared.path(), 1, "not-the-join-token");
    let status = stranger.exited(Duration::from_secs(20)).await?;
    assert_eq!(status.code(), Some(3), "{}", stranger.log());
    assert!(
        stranger.log().contains("the join token is not valid"),
        "{}",
        stranger.log()
    );

    let agents = ["a1", "a2", "a3", "a4", "a5"];
    for agent in agents {
        chorus
            .create_agent_with(json!({"name": agent, "permissions": "open"}))
            .await?;
    }
    for agent in agents {
        wait_running(&chorus, agent, Duration::from_secs(30)).await?;
    }
    // The join token is not in any worker's environment block, where root (even a
    // tool process run as root) could read it; it was handed over a pipe.
    for worker in &workers {
        let pid = worker.child.id().expect("worker pid");
        match std::fs::read(format!("/proc/{pid}/environ")) {
            Ok(environ) => {
                let environ = String::from_utf8_lossy(&environ);
                assert!(!environ.contains(JOIN_TOKEN), "{environ}");
                assert!(!environ.contains("CHORUS_JOIN_TOKEN="), "{environ}");
            }
            // Not root: the worker is non-dumpable, so this is closed to us anyway.
            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied),
        }
    }
    // Free capacity is a gauge operators can scale on: 3 workers × 3 links, 5 taken.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = chorus
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await?
            .text()
            .await?;
        if metrics.contains("\nchorus_dial_in_links_idle 4\n") {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "idle links never 4: {}",
            metrics
                .lines()
                .filter(|l| l.contains("dial_in"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut threads = Vec::new();
    for agent in agents {
        threads.push((agent, chorus.send_message(agent, "write a note").await?));
    }
    for (agent, id) in threads {
        let thread = chorus
            .wait_thread_finished(agent, id, Duration::from_secs(60))
            .await?;
        assert_eq!(thread["status"], "completed", "{agent}: {thread:#}");
        // The file is on the workers' volume, in the agent's own workspace.
        let note = shared
            .path()
            .join(format!("agents/{agent}/workspace/note.txt"));
        assert_eq!(std::fs::read_to_string(&note)?, "written by the agent");
        // The workspace is the worker's alone: the control plane keeps only its
        // records (settings, saved sessions), and the worker no settings file.
        let ours = chorus.data_dir.join("agents").join(agent);
        assert!(ours.join("agent.json").is_file());
        assert!(!ours.join("workspace").exists());
        assert!(
            !shared
                .path()
                .join(format!("agents/{agent}/agent.json"))
                .exists()
        );
        let shown = chorus.agent(agent).await?["workspace"].clone();
        assert_eq!(
            shown,
            format!("agents/{agent}/workspace (under the dial-in workers' --data-dir)")
        );
        let holders = holders(&workers, agent, None).await?;
        assert_eq!(holders.len(), 1, "{agent} is held by {holders:?}");
        assert_eq!(
            workers[holders[0]].served(agent),
            Some(true),
            "laid out once"
        );
    }

    // The move: a1's thread waits on its model call when its worker is SIGKILLed.
    let holder = holders(&workers, "a1", None).await?[0];
    model.push(Reply::Delayed(
        Duration::from_secs(60),
        Box::new(text("too late")),
    ));
    model.push(tool_call("v1", "view", json!({"path": "note.txt"})));
    model.push(text("Finished after the move."));
    let before = model.requests().len();
    let id = chorus.send_message("a1", "read your note").await?;
    model
        .wait_for_requests(before + 1, Duration::from_secs(30))
        .await;
    let pid = workers[holder].child.id().expect("worker pid");
    // The API says which worker serves it (as the worker names itself).
    let shown = chorus.agent("a1").await?["worker"]["dial_in_worker"].clone();
    assert!(
        shown
            .as_str()
            .is_some_and(|name| name.ends_with(&format!(" pid {pid}"))),
        "{shown}"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    let thread = chorus
        .wait_thread_finished("a1", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results
            .iter()
            .any(|(error, content)| !error && content.contains("written by the agent")),
        "the moved agent reads the note it wrote before the move: {results:?}"
    );
    let now = holders(&workers, "a1", Some(holder)).await?;
    assert_eq!(now.len(), 1, "a1 moved to exactly one other worker");
    assert_eq!(
        workers[now[0]].served("a1"),
        Some(false),
        "the moved agent's directory was kept, not laid out again"
    );
    // Every agent is served again, the killed worker's others included.
    for agent in agents {
        wait_running(&chorus, agent, Duration::from_secs(30)).await?;
    }

    // Destroyed with its files: a free worker deletes them from the workers' volume
    // (the control plane cannot reach it), which the audit log records.
    let destroyed = chorus
        .api(reqwest::Method::DELETE, "/api/agents/a5")
        .send()
        .await?;
    assert!(destroyed.status().is_success(), "{destroyed:?}");
    let a5 = shared.path().join("agents/a5");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<String> = std::fs::read_dir(&a5)?
            .map(|e| e.map(|e| e.file_name().to_string_lossy().into_owned()))
            .collect::<Result<_, _>>()?;
        if left == [".chorus-lock"] {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "a5's files are still on the workers' volume: {left:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let audited = chorus
            .query_store(
                "SELECT detail FROM audit_log WHERE agent_name = 'a5' AND action_string = 'agent:delete_files'",
            )
            .await?;
        // By the destroy's own deletion, or by the check of the directories the
        // destroyed agent's worker named when it joined again: whichever came first.
        if audited.contains("deleted from the dial-in workers' volume by the dial-in worker from")
            || audited.contains("deleted a copy no agent can use again")
        {
            break;
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no audit entry for the deletion: {audited:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Created again, the name starts from a fresh layout.
    chorus
        .create_agent_with(json!({"name": "a5", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "a5", Duration::from_secs(30)).await?;
    eventually(
        Duration::from_secs(30),
        || a5.join("workspace/.git").is_dir(),
        || "a5 was not laid out again".into(),
    )
    .await?;
    assert!(!a5.join("workspace/note.txt").exists());

    // Destroyed keeping its files, and created again: the files are the new agent's.
    let destroyed = chorus
        .api(reqwest::Method::DELETE, "/api/agents/a4?keep_files=true")
        .send()
        .await?;
    assert!(destroyed.status().is_success(), "{destroyed:?}");
    chorus
        .create_agent_with(json!({"name": "a4", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "a4", Duration::from_secs(30)).await?;
    model.push(tool_call("v2", "view", json!({"path": "note.txt"})));
    model.push(text("Still here."));
    let id = chorus.send_message("a4", "read your note").await?;
    let thread = chorus
        .wait_thread_finished("a4", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results
            .iter()
            .any(|(error, content)| !error && content.contains("written by the agent")),
        "the revived agent reads its kept note: {results:?}"
    );
    Ok(())
}

/// With no dial-in worker free, a message's thread fails after the wait with a
/// reason that says what to do, instead of hanging.
#[tokio::test]
async fn without_a_free_worker_a_thread_fails_saying_what_to_start() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .env("CHORUS_LAUNCHER", "remote")
        .env("CHORUS_JOIN_TOKEN", JOIN_TOKEN)
        .config("[threads]\ntitles = false\n[workers]\nattach_timeout_ms = 500\n")
        .start()
        .await?;
    chorus.create_agent("lonely").await?;
    let id = chorus.send_message("lonely", "anyone there?").await?;
    let thread = chorus
        .wait_thread_finished("lonely", id, Duration::from_secs(30))
        .await?;
    assert_eq!(thread["status"], "failed", "{thread:#}");
    let error = thread["error"].as_str().unwrap_or_default();
    assert!(error.contains("no dial-in worker was free"), "{error}");
    assert!(error.contains("CHORUS_JOIN_TOKEN"), "{error}");
    assert!(
        model.requests().is_empty(),
        "no model call without a worker"
    );
    Ok(())
}

/// A test CA, a certificate for the control plane (127.0.0.1) and one for a worker,
/// made with the openssl command line.
fn make_certificates(dir: &Path) -> anyhow::Result<()> {
    let script = r#"
set -e
key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out "$1" 2>/dev/null; }
key ca.key
openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=chorus-test-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
sign() { # name, extended key usage, subjectAltName line
  key "$1.key"
  openssl req -new -key "$1.key" -out "$1.csr" -subj "/CN=$1"
  printf 'basicConstraints=CA:FALSE\nextendedKeyUsage=%s\n%s\n' "$2" "$3" > "$1.ext"
  openssl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
    -out "$1.pem" -extfile "$1.ext" 2>/dev/null
}
sign server serverAuth 'subjectAltName=IP:127.0.0.1,DNS:localhost'
sign worker clientAuth ''
"#;
    let output = std::process::Command::new("bash")
        .args(["-c", script])
        .current_dir(dir)
        .output()?;
    anyhow::ensure!(output.status.success(), "openssl: {output:?}");
    Ok(())
}

/// The worker link over mutual TLS: a worker with a certificate the control plane's
/// client CA signed serves an agent (its model calls go through the relay over the
/// same TLS); one without is refused at the handshake and never gets an agent.
#[tokio::test]
async fn over_mutual_tls_only_workers_with_a_certificate_get_agents() -> anyhow::Result<()> {
    let certs = tempfile::tempdir()?;
    make_certificates(certs.path())?;
    let file = |name: &str| certs.path().join(name).to_string_lossy().into_owned();
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .env("CHORUS_LAUNCHER", "remote")
        .env("CHORUS_JOIN_TOKEN", JOIN_TOKEN)
        .env("CHORUS_TLS_CERT", &file("server.pem"))
        .env("CHORUS_TLS_KEY", &file("server.key"))
        .env("CHORUS_TLS_CLIENT_CA", &file("ca.pem"))
        .config("[threads]\ntitles = false\n")
        .start()
        .await?;
    assert!(
        chorus.grpc_url.starts_with("https://"),
        "{}",
        chorus.grpc_url
    );
    // The start-up block says how workers come and how their link is protected.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !chorus
        .output()
        .contains("workers:        dial in with CHORUS_JOIN_TOKEN")
    {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "{}",
            chorus.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        chorus
            .output()
            .contains("link TLS, client certificates required"),
        "{}",
        chorus.output()
    );
    let shared = tempfile::tempdir()?;
    let ca = file("ca.pem");
    let without_certificate = DialInWorker::start_with(
        &chorus.grpc_url,
        shared.path(),
        1,
        JOIN_TOKEN,
        &["--tls-ca", &ca],
    );
    let plaintext = DialInWorker::start(
        &chorus.grpc_url.replace("https://", "http://"),
        shared.path(),
        1,
        JOIN_TOKEN,
    );
    // Both are turned away before the one with a certificate comes.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while chorus.output().matches("TLS handshake refused").count() < 2 {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no refused handshakes: {}",
            chorus.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (cert, key) = (file("worker.pem"), file("worker.key"));
    let with_certificate = DialInWorker::start_with(
        &chorus.grpc_url,
        shared.path(),
        1,
        JOIN_TOKEN,
        &["--tls-ca", &ca, "--tls-cert", &cert, "--tls-key", &key],
    );
    chorus
        .create_agent_with(json!({"name": "secure", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "secure", Duration::from_secs(30)).await?;
    let id = chorus.send_message("secure", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("secure", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    with_certificate
        .wait_log("serving agent agent=secure ", Duration::from_secs(10))
        .await?;
    assert_eq!(with_certificate.served("secure"), Some(true));
    assert_eq!(without_certificate.served("secure"), None);
    assert_eq!(plaintext.served("secure"), None);
    // Each says what to check.
    without_certificate
        .wait_log("give --tls-cert and --tls-key", Duration::from_secs(10))
        .await?;
    plaintext
        .wait_log("dial https:// with --tls-ca", Duration::from_secs(10))
        .await?;
    assert_eq!(
        std::fs::read_to_string(shared.path().join("agents/secure/workspace/note.txt"))?,
        "written by the agent"
    );
    Ok(())
}

/// A volume per worker (a StatefulSet): after the control plane restarts, an agent
/// goes back to the worker whose volume has its files, even though another worker
/// has more room and may rejoin first; destroying it deletes the files there.
#[tokio::test]
async fn with_a_volume_per_worker_an_agent_goes_back_to_its_files() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let data = tempfile::tempdir()?;
    let grpc_addr = fixed_grpc_addr()?;
    let control_plane = data.path().join("control-plane");
    let start = || remote_chorus(&model, &control_plane, &grpc_addr);
    let chorus = start().await?;
    let (small_volume, roomy_volume) = (data.path().join("small"), data.path().join("roomy"));
    let small = DialInWorker::start(&chorus.grpc_url, &small_volume, 1, JOIN_TOKEN);
    chorus
        .create_agent_with(json!({"name": "home", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "home", Duration::from_secs(30)).await?;
    let id = chorus.send_message("home", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("home", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(
        small_volume
            .join("agents/home/workspace/note.txt")
            .is_file()
    );

    // A roomier worker on its own volume joins; then the control plane restarts.
    let roomy = DialInWorker::start(&chorus.grpc_url, &roomy_volume, 3, JOIN_TOKEN);
    roomy
        .wait_log("joined the control plane's pool", Duration::from_secs(30))
        .await?;
    let status = chorus.stop().await?;
    assert!(status.success(), "{status:?}");
    let chorus = start().await?;
    wait_running(&chorus, "home", Duration::from_secs(60)).await?;
    eventually(
        Duration::from_secs(10),
        || small.log().matches("serving agent agent=home ").count() >= 2,
        || {
            format!(
                "home is not back on its worker: {}\n{}",
                small.log(),
                roomy.log()
            )
        },
    )
    .await?;
    assert_eq!(small.served("home"), Some(false), "its files were there");
    assert_eq!(roomy.served("home"), None, "{}", roomy.log());
    model.push(tool_call("v1", "view", json!({"path": "note.txt"})));
    model.push(text("Found it."));
    let id = chorus.send_message("home", "read your note").await?;
    let thread = chorus
        .wait_thread_finished("home", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let results = tool_results(&thread);
    assert!(
        results
            .iter()
            .any(|(error, content)| !error && content.contains("written by the agent")),
        "back with its files: {results:?}"
    );

    // Its worker dies: the agent starts over on the other one (a copy stays behind on
    // the dead worker's volume).
    let pid = small.child.id().expect("worker pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    roomy
        .wait_log("serving agent agent=home ", Duration::from_secs(30))
        .await?;
    assert_eq!(roomy.served("home"), Some(true), "laid out anew there");
    // Destroyed: the files go from the volume of the worker that held it last...
    let destroyed = chorus
        .api(reqwest::Method::DELETE, "/api/agents/home")
        .send()
        .await?;
    assert!(destroyed.status().is_success(), "{destroyed:?}");
    let gone = |volume: &Path| !volume.join("agents/home/workspace").exists();
    eventually(
        Duration::from_secs(30),
        || gone(&roomy_volume),
        || "home's files are still on its last worker's volume".into(),
    )
    .await?;
    assert!(
        !gone(&small_volume),
        "the dead worker's copy is out of reach"
    );
    // ...and the copy on the dead worker's volume once it comes back and joins.
    let _small_again = DialInWorker::start(&chorus.grpc_url, &small_volume, 1, JOIN_TOKEN);
    eventually(
        Duration::from_secs(30),
        || gone(&small_volume),
        || "the copy left on the returning worker's volume was not deleted".into(),
    )
    .await?;
    Ok(())
}

/// The control plane stops (SIGTERM) and starts again on the same address: the
/// stop does not wait on dial-in links, busy or idle, and the workers, which keep
/// trying with backoff, join again and get their agents back.
#[tokio::test]
async fn dial_in_workers_rejoin_a_restarted_control_plane() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let data = tempfile::tempdir()?;
    let grpc_addr = fixed_grpc_addr()?;
    let control_plane = data.path().join("control-plane");
    let start = || remote_chorus(&model, &control_plane, &grpc_addr);
    let chorus = start().await?;
    let shared = data.path().join("shared");
    // Two links: one serves the agent, one stays idle.
    let worker = DialInWorker::start(&chorus.grpc_url, &shared, 2, JOIN_TOKEN);
    chorus
        .create_agent_with(json!({"name": "steady", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "steady", Duration::from_secs(30)).await?;
    let output = chorus.output_handle();
    let status = chorus.stop().await?;
    assert!(status.success(), "{status:?}");
    // Its last words are in once the stream ends.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !output.lock().unwrap().contains("chorus stopped") {
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no 'chorus stopped'"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let said = output.lock().unwrap().clone();
    assert!(
        !said.contains("did not close"),
        "the stop waited on a link: {said}"
    );

    let chorus = start().await?;
    wait_running(&chorus, "steady", Duration::from_secs(60)).await?;
    let id = chorus.send_message("steady", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("steady", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(shared.join("agents/steady/workspace/note.txt").is_file());
    let log = worker.log();
    assert!(log.contains("joining the pool again"), "{log}");
    assert_eq!(
        log.matches("serving agent agent=steady ").count(),
        2,
        "served before and after the restart: {log}"
    );
    Ok(())
}
