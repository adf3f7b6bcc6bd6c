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

pub(super) const JOIN_TOKEN: &str = "join-token-0123456789abcdef";

/// A `chorus-worker` started on its own, and what it has logged so far.
pub(super) struct DialInWorker {
    child: tokio::process::Child,
    log: Arc<Mutex<String>>,
    /// Copies its stderr into `log`; done at end of file, once the worker exited.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl DialInWorker {
    pub(super) fn start(control_plane: &str, data_dir: &Path, agents: u16, token: &str) -> Self {
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

    pub(super) fn log(&self) -> String {
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
pub(super) fn fixed_grpc_addr() -> anyhow::Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    Ok(format!("127.0.0.1:{port}"))
}

/// A control plane for dial-in workers on `grpc_addr`, keeping its data in
/// `data_dir`: started again with the same arguments, it is the same one.
pub(super) async fn remote_chorus(
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

pub(super) async fn wait_running(
    chorus: &Chorus,
    agent: &str,
    limit: Duration,
) -> anyhow::Result<()> {
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
    wait_idle_links(&chorus, 4).await?;
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

    // Through the shared token every worker is one principal, and the audit log
    // says so.
    let rows = audit_rows(&chorus, "a1").await?;
    assert!(
        rows.iter()
            .any(|r| r["action"] == "thread:answer" && r["worker"] == "join-token"),
        "{rows:#?}"
    );

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

/// Runs `chorus <args>` (the terminal client) against `chorus`.
async fn cli(chorus: &Chorus, args: &[&str]) -> std::process::Output {
    tokio::process::Command::new(bin_path("chorus"))
        .args(args)
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chorus")
}

/// A control plane for dial-in workers that takes per-worker credentials only.
async fn chorus_without_a_shared_token(model: &FakeModel) -> anyhow::Result<Chorus> {
    Chorus::builder()
        .openai_fake(model)
        .env("CHORUS_LAUNCHER", "remote")
        .config("[threads]\ntitles = false\n")
        .start()
        .await
}

/// A per-worker credential made through the API; its token.
async fn worker_token(chorus: &Chorus, name: &str) -> anyhow::Result<String> {
    let made = chorus
        .api(reqwest::Method::POST, "/api/workers/tokens")
        .json(&json!({ "name": name }))
        .send()
        .await?;
    anyhow::ensure!(made.status() == 201, "{made:?}");
    let made: Value = made.json().await?;
    Ok(made["token"].as_str().unwrap_or_default().to_string())
}

/// Waits until `n` dial-in links wait for an agent.
async fn wait_idle_links(chorus: &Chorus, n: usize) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let metrics = chorus
            .api(reqwest::Method::GET, "/metrics")
            .send()
            .await?
            .text()
            .await?;
        if metrics.contains(&format!("\nchorus_dial_in_links_idle {n}\n")) {
            return Ok(());
        }
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "idle links never {n}: {}",
            metrics
                .lines()
                .filter(|l| l.contains("dial_in"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The audit rows of `agent` as the API lists them.
async fn audit_rows(chorus: &Chorus, agent: &str) -> anyhow::Result<Vec<Value>> {
    let page: Value = chorus
        .api(
            reqwest::Method::GET,
            &format!("/api/agents/{agent}/audit?limit=1000"),
        )
        .send()
        .await?
        .json()
        .await?;
    Ok(page["entries"].as_array().cloned().unwrap_or_default())
}

/// Per-worker credentials from the terminal client, with no shared join token: the
/// audit log names the worker that wrote an agent's answer; revoking its credential
/// ends its links within a second (the worker hears why and stops), its agent
/// moves to another worker, and the revoked token joins nothing.
#[tokio::test]
async fn a_revoked_worker_credential_ends_its_links_at_once_and_joins_nothing() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let chorus = chorus_without_a_shared_token(&model).await?;
    eventually(
        Duration::from_secs(30),
        || {
            chorus
                .output()
                .contains("dial in with a worker credential each")
        },
        || {
            format!(
                "the start-up text does not say how workers join: {}",
                chorus.output()
            )
        },
    )
    .await?;

    let made = cli(&chorus, &["worker", "token", "create", "w1"]).await;
    assert!(made.status.success(), "{made:?}");
    let w1 = String::from_utf8(made.stdout)?.trim().to_string();
    assert_eq!(w1.len(), 64, "the token alone on stdout: {w1:?}");
    assert!(String::from_utf8_lossy(&made.stderr).contains("printed below, once"));
    let made = cli(&chorus, &["worker", "token", "create", "w2", "--json"]).await;
    assert!(made.status.success(), "{made:?}");
    let w2 = serde_json::from_slice::<Value>(&made.stdout)?["token"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let taken = cli(&chorus, &["worker", "token", "create", "w1"]).await;
    assert_eq!(taken.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&taken.stderr).contains("revoke it first"),
        "{taken:?}"
    );
    // Kept hashed: neither token is in the database.
    let stored = chorus
        .query_store("SELECT name, token_sha256 FROM worker_credentials")
        .await?;
    assert!(stored.contains("w1") && !stored.contains(&w1) && !stored.contains(&w2));

    let volumes = tempfile::tempdir()?;
    // Two links for w1's worker, one for w2's: the agent goes to the roomier one.
    let mut first = DialInWorker::start(&chorus.grpc_url, &volumes.path().join("v1"), 2, &w1);
    let second = DialInWorker::start(&chorus.grpc_url, &volumes.path().join("v2"), 1, &w2);
    wait_idle_links(&chorus, 3).await?;
    let listed = cli(&chorus, &["worker", "token", "list"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    assert!(listed.starts_with("NAME"), "{listed}");
    let w1_line = listed
        .lines()
        .find(|l| l.starts_with("w1 "))
        .unwrap_or_default();
    assert!(w1_line.contains("active"), "{listed}");
    assert!(
        !w1_line.contains(" - "),
        "w1's volume is listed once its worker joined: {listed}"
    );

    chorus
        .create_agent_with(json!({"name": "busy", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "busy", Duration::from_secs(30)).await?;
    let shown = chorus.agent("busy").await?;
    assert_eq!(shown["worker"]["dial_in_credential"], "w1", "{shown:#}");
    let id = chorus.send_message("busy", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("busy", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    // The audit log names the worker behind the tool call and the answer.
    let rows = audit_rows(&chorus, "busy").await?;
    let by = |action: &str| -> Vec<Value> {
        rows.iter()
            .filter(|r| r["action"].as_str().is_some_and(|a| a.starts_with(action)))
            .map(|r| r["worker"].clone())
            .collect()
    };
    assert_eq!(by("tool:create_file"), [json!("w1")], "{rows:#?}");
    assert_eq!(by("thread:answer"), [json!("w1")], "{rows:#?}");

    // Revoked: the links end at once, the idle one and the one serving `busy`.
    let started = std::time::Instant::now();
    let revoked = cli(&chorus, &["worker", "token", "revoke", "w1"]).await;
    let answered = started.elapsed();
    assert!(revoked.status.success(), "{revoked:?}");
    assert!(String::from_utf8_lossy(&revoked.stdout).contains("revoked"));
    let control_plane_let_go = async {
        loop {
            let worker = chorus.agent("busy").await?["worker"].clone();
            if worker["dial_in_credential"] != "w1" {
                return anyhow::Ok(started.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let let_go = tokio::time::timeout(Duration::from_secs(10), control_plane_let_go).await??;
    let status = first.exited(Duration::from_secs(10)).await?;
    let worker_gone = started.elapsed();
    eprintln!(
        "revocation: API answered after {answered:?} (the CLI process included), the agent let go after {let_go:?}, the worker exited after {worker_gone:?}"
    );
    assert_eq!(status.code(), Some(3), "{}", first.log());
    assert!(
        first
            .log()
            .contains("the join token is not valid: worker credential 'w1' was revoked"),
        "{}",
        first.log()
    );
    assert!(
        let_go < Duration::from_secs(1),
        "the serving link ended {let_go:?} after the revocation"
    );
    assert!(
        worker_gone < Duration::from_secs(1),
        "the worker heard of it {worker_gone:?} after the revocation"
    );

    // Its agent moves to the other worker and answers there, labelled so.
    wait_running(&chorus, "busy", Duration::from_secs(30)).await?;
    assert_eq!(
        chorus.agent("busy").await?["worker"]["dial_in_credential"],
        "w2"
    );
    second
        .wait_log("serving agent agent=busy ", Duration::from_secs(10))
        .await?;
    let id = chorus.send_message("busy", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("busy", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    let rows = audit_rows(&chorus, "busy").await?;
    assert!(
        rows.iter()
            .any(|r| r["action"] == "thread:answer" && r["worker"] == "w2"),
        "{rows:#?}"
    );

    // The revoked token joins nothing, and the worker says why.
    let mut again = DialInWorker::start(&chorus.grpc_url, &volumes.path().join("v1"), 1, &w1);
    let status = again.exited(Duration::from_secs(20)).await?;
    assert_eq!(status.code(), Some(3), "{}", again.log());
    assert!(again.log().contains("was revoked"), "{}", again.log());
    let listed = cli(&chorus, &["worker", "token", "list", "--json"]).await;
    let listed: Value = serde_json::from_slice(&listed.stdout)?;
    let w1_row = listed["tokens"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["name"] == "w1").cloned())
        .unwrap_or_default();
    assert!(w1_row["revoked_at"].is_string(), "{listed:#}");
    Ok(())
}

/// A volume belongs to the credential that presented it first: a worker with
/// another credential is refused on it; and a directory counts only on the volume
/// its agent was placed on, so a copy another credential's worker names wins it
/// nothing (the agent goes to the roomiest worker, as if the copy were not
/// there) and is not deleted either.
#[tokio::test]
async fn a_worker_cannot_claim_another_credentials_volume_or_directories() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    model.set_fallback(write_a_note);
    let chorus = chorus_without_a_shared_token(&model).await?;
    let (a, b, c) = (
        worker_token(&chorus, "a").await?,
        worker_token(&chorus, "b").await?,
        worker_token(&chorus, "c").await?,
    );
    let volumes = tempfile::tempdir()?;
    let (va, vb, vc) = (
        volumes.path().join("va"),
        volumes.path().join("vb"),
        volumes.path().join("vc"),
    );
    let first = DialInWorker::start(&chorus.grpc_url, &va, 1, &a);
    chorus
        .create_agent_with(json!({"name": "alpha", "permissions": "open"}))
        .await?;
    wait_running(&chorus, "alpha", Duration::from_secs(30)).await?;
    let id = chorus.send_message("alpha", "write a note").await?;
    let thread = chorus
        .wait_thread_finished("alpha", id, Duration::from_secs(60))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(va.join("agents/alpha/workspace/note.txt").is_file());

    // b on a's volume: refused, saying whose it is.
    let mut intruder = DialInWorker::start(&chorus.grpc_url, &va, 1, &b);
    let status = intruder.exited(Duration::from_secs(20)).await?;
    assert_eq!(status.code(), Some(3), "{}", intruder.log());
    assert!(
        intruder
            .log()
            .contains("belongs to worker credential 'a', and this worker joined as 'b'"),
        "{}",
        intruder.log()
    );

    // b on a volume of its own, holding a copy of alpha's directory (incarnation
    // and all); c on an empty one, roomier.
    std::fs::create_dir_all(&vb)?;
    let copied = std::process::Command::new("cp")
        .arg("-a")
        .arg(va.join("agents"))
        .arg(&vb)
        .status()?;
    assert!(copied.success());
    assert!(vb.join("agents/alpha/workspace/note.txt").is_file());
    let second = DialInWorker::start(&chorus.grpc_url, &vb, 1, &b);
    let third = DialInWorker::start(&chorus.grpc_url, &vc, 3, &c);
    wait_idle_links(&chorus, 4).await?;
    // alpha's worker dies: alpha goes to the roomiest worker, c, not to b's copy.
    let pid = first.child.id().expect("worker pid");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid as i32),
        nix::sys::signal::Signal::SIGKILL,
    )?;
    third
        .wait_log("serving agent agent=alpha ", Duration::from_secs(30))
        .await?;
    assert_eq!(third.served("alpha"), Some(true), "laid out anew on c");
    assert_eq!(second.served("alpha"), None, "{}", second.log());
    assert_eq!(
        chorus.agent("alpha").await?["worker"]["dial_in_credential"],
        "c"
    );
    // The control plane said why.
    eventually(
        Duration::from_secs(10),
        || {
            chorus
                .output()
                .contains("named an agent's directory that was never placed on its volume")
        },
        || format!("b's claim was not noticed: {}", chorus.output()),
    )
    .await?;

    // b's copy was ignored, not deleted.
    assert!(vb.join("agents/alpha/workspace/note.txt").is_file());
    Ok(())
}

/// Worker credentials are an admin's: an operator's token is refused (403) and
/// nothing is made.
#[tokio::test]
async fn only_an_admin_manages_worker_credentials() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[roles]\napi = \"operator\"\n")
        .start()
        .await?;
    for (method, path) in [
        (reqwest::Method::POST, "/api/workers/tokens"),
        (reqwest::Method::GET, "/api/workers/tokens"),
        (reqwest::Method::DELETE, "/api/workers/tokens/w1"),
    ] {
        let answer = chorus
            .api(method.clone(), path)
            .json(&json!({"name": "w1"}))
            .send()
            .await?;
        assert_eq!(answer.status(), 403, "{method} {path}");
    }
    let made = chorus
        .query_store("SELECT COUNT(*) FROM worker_credentials")
        .await?;
    assert_eq!(made.trim(), "0");
    Ok(())
}
