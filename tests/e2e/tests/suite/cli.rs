//! The terminal client (`chorus agent|send|threads|thread|approvals|approve|deny|
//! context`) through the real binaries: what a person sees in a pipe and at a real
//! terminal (a pty), what scripts get with `--json`, and the exit codes.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chorus_test_support::fake_model::{error, text, tool_call};
use chorus_test_support::{Chorus, FakeOpenAi, bin_path};
use serde_json::{Value, json};

/// Runs `chorus <args>` against `chorus` with its URL and token, stdout piped (on
/// the runtime: the fake model answers from this test's runtime meanwhile).
pub(super) async fn client(chorus: &Chorus, args: &[&str]) -> Output {
    tokio::process::Command::new(bin_path("chorus"))
        .args(args)
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .env_remove("NO_COLOR")
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chorus")
}

pub(super) fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(super) fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test]
async fn agents_threads_and_context_from_the_terminal_client() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;

    let created = client(
        &chorus,
        &[
            "agent",
            "create",
            "helper",
            "--system-prompt",
            "Be brief.",
            "--json",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let agent: Value = serde_json::from_slice(&created.stdout)?;
    assert_eq!(agent["name"], "helper");
    let listed = client(&chorus, &["agent", "list"]).await;
    let text_out = stdout(&listed);
    assert!(
        text_out.starts_with("NAME") && text_out.contains("helper"),
        "{text_out}"
    );
    assert!(
        !text_out.contains('\x1b'),
        "no escape codes in a pipe: {text_out:?}"
    );

    // A run followed live: its steps, its answer, exit 0.
    model.push(tool_call("c1", "view", json!({"path": "."})));
    model.push(text("The workspace is empty."));
    let sent = client(&chorus, &["send", "helper", "What is in the workspace?"]).await;
    let out = stdout(&sent);
    assert!(sent.status.success(), "{out}\n{}", stderr(&sent));
    assert!(out.starts_with("thread 1 (new)\n"), "{out}");
    assert!(
        out.contains("-> step 1:") && out.contains("-> step 2:"),
        "{out}"
    );
    assert!(out.contains("The workspace is empty."), "{out}");
    assert!(!out.contains('\x1b'), "{out:?}");
    assert!(stderr(&sent).contains("completed in"), "{}", stderr(&sent));

    // Scripts: --json lines parse, the last says how it ended.
    model.push(text("Second answer."));
    let sent = client(&chorus, &["send", "helper", "Again", "--json"]).await;
    assert!(sent.status.success(), "{}", stderr(&sent));
    let lines: Vec<Value> = stdout(&sent)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(lines[0]["kind"], "received");
    // The text came as it streamed, in pieces, before the stored message.
    let pieces: Vec<&str> = lines
        .iter()
        .filter(|l| l["kind"] == "text")
        .filter_map(|l| l["data"]["text"].as_str())
        .collect();
    assert!(pieces.len() >= 2, "{lines:#?}");
    assert_eq!(pieces.concat(), "Second answer.");
    assert_eq!(lines.last().unwrap()["data"]["status"], "completed");
    let threads = client(&chorus, &["threads", "helper", "--json"]).await;
    let threads: Value = serde_json::from_slice(&threads.stdout)?;
    assert_eq!(threads.as_array().map(Vec::len), Some(2));
    let shown = stdout(&client(&chorus, &["thread", "show", "helper", "1"]).await);
    assert!(shown.contains("The workspace is empty."), "{shown}");

    // A failed thread: exit 1 and the reason on stderr.
    model.push(error(
        400,
        "invalid_request_error",
        "the model does not exist",
    ));
    let failed = client(&chorus, &["send", "helper", "Break"]).await;
    assert_eq!(failed.status.code(), Some(1), "{}", stdout(&failed));
    assert!(
        stderr(&failed).contains("thread failed") && stderr(&failed).contains("does not exist"),
        "{}",
        stderr(&failed)
    );

    // Context commands.
    let saved = client(
        &chorus,
        &["context", "save", "helper", "--description", "first day"],
    )
    .await;
    assert!(
        stdout(&saved).starts_with("Saved session "),
        "{}",
        stderr(&saved)
    );
    let history = client(&chorus, &["context", "history", "helper", "--json"]).await;
    let history: Value = serde_json::from_slice(&history.stdout)?;
    assert_eq!(history["sessions"][0]["description"], "first day");

    let cleared = client(&chorus, &["context", "clear", "helper"]).await;
    assert!(
        stdout(&cleared).starts_with("Context cleared"),
        "{}",
        stderr(&cleared)
    );
    let session = history["sessions"][0]["id"].as_str().unwrap().to_string();
    let restored = client(&chorus, &["context", "restore", "helper", &session]).await;
    let restored_text = stdout(&restored);
    assert!(
        restored_text.starts_with(&format!("Restored session {session} into thread ")),
        "{restored_text}{}",
        stderr(&restored)
    );
    assert!(restored_text.contains("--reply-to"), "{restored_text}");
    let configured = client(
        &chorus,
        &[
            "agent",
            "configure",
            "helper",
            "--idle-timeout-secs",
            "0",
            "--json",
        ],
    )
    .await;
    let configured: Value = serde_json::from_slice(&configured.stdout)?;
    assert_eq!(configured["idle_timeout_secs"], 0);
    let nothing = client(&chorus, &["agent", "configure", "helper"]).await;
    assert!(
        stderr(&nothing).contains("nothing to change"),
        "{}",
        stderr(&nothing)
    );
    let killed = client(&chorus, &["thread", "kill", "helper", "all"]).await;
    assert_eq!(
        stdout(&killed),
        "No thread was going.\n",
        "{}",
        stderr(&killed)
    );
    // A script that does not say --yes destroys nothing.
    let refused = client(&chorus, &["agent", "destroy", "helper"]).await;
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("no terminal to ask at, so pass --yes")
            && stderr(&refused).contains("--keep-files"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(chorus.agent("helper").await?["name"], "helper");
    assert!(chorus.agent_dir("helper").join("workspace").is_dir());
    let destroyed = client(&chorus, &["agent", "destroy", "helper", "--yes"]).await;
    assert!(!chorus.agent_dir("helper").join("workspace").exists());
    assert_eq!(
        stdout(&destroyed),
        "Agent helper destroyed.\n",
        "{}",
        stderr(&destroyed)
    );

    // Mistakes are explained.
    let missing = client(&chorus, &["agent", "show", "nobody"]).await;
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("nobody"), "{}", stderr(&missing));
    let refused = Command::new(bin_path("chorus"))
        .args([
            "agent",
            "list",
            "--url",
            &chorus.http_url,
            "--token",
            "wrong",
        ])
        .output()?;
    assert!(
        stderr(&refused).contains("token was refused"),
        "{}",
        stderr(&refused)
    );
    let nobody_home = Command::new(bin_path("chorus"))
        .args([
            "agent",
            "list",
            "--url",
            "http://127.0.0.1:9",
            "--token",
            "t",
        ])
        .output()?;
    assert!(
        stderr(&nobody_home).contains("is `chorus serve` running?"),
        "{}",
        stderr(&nobody_home)
    );
    Ok(())
}

/// A terminal: the client's stdin, stdout and stderr on a pty; what it prints is
/// collected from the other end.
pub(super) struct Terminal {
    child: std::process::Child,
    input: std::fs::File,
    screen: Arc<Mutex<String>>,
}

impl Terminal {
    pub(super) fn spawn(chorus: &Chorus, args: &[&str]) -> anyhow::Result<Terminal> {
        let pty = nix::pty::openpty(None, None)?;
        let slave: OwnedFd = pty.slave;
        let child = Command::new(bin_path("chorus"))
            .args(args)
            .env("CHORUS_URL", &chorus.http_url)
            .env("CHORUS_API_TOKEN", chorus.token())
            .env_remove("NO_COLOR")
            .stdin(Stdio::from(slave.try_clone()?))
            .stdout(Stdio::from(slave.try_clone()?))
            .stderr(Stdio::from(slave))
            .spawn()?;
        let master = std::fs::File::from(pty.master);
        let input = master.try_clone()?;
        let screen = Arc::new(Mutex::new(String::new()));
        let collected = screen.clone();
        std::thread::spawn(move || {
            let mut master = master;
            let mut buf = [0u8; 4096];
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                collected
                    .lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Ok(Terminal {
            child,
            input,
            screen,
        })
    }

    pub(super) fn screen(&self) -> String {
        self.screen.lock().unwrap().clone()
    }

    pub(super) async fn wait_for(&self, what: &str) -> anyhow::Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.screen().contains(what) {
            anyhow::ensure!(
                Instant::now() < deadline,
                "no {what:?} on the screen:\n{}",
                self.screen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    pub(super) fn type_line(&mut self, line: &str) -> anyhow::Result<()> {
        self.input.write_all(format!("{line}\n").as_bytes())?;
        Ok(())
    }

    pub(super) async fn exit_code(mut self) -> anyhow::Result<(Option<i32>, String)> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                // What it printed last has reached the master by now.
                tokio::time::sleep(Duration::from_millis(50)).await;
                return Ok((status.code(), self.screen()));
            }
            anyhow::ensure!(
                Instant::now() < deadline,
                "still running:\n{}",
                self.screen()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test]
async fn an_approval_is_answered_at_the_terminal_prompt() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({
            "name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
        }))
        .await?;

    // y: the file is written and the thread completes.
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "1"}),
    ));
    model.push(text("Written."));
    let mut terminal = Terminal::spawn(&chorus, &["send", "careful", "write the plan"])?;
    terminal.wait_for("approve? [y/n]").await?;
    assert!(terminal.screen().contains("tool:create_file:plan.md"));
    terminal.type_line("y")?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("approved by api") && screen.contains("Written."),
        "{screen}"
    );
    // The prompt keeps a line of its own: nothing printed while it waits joins it.
    assert!(
        !screen
            .lines()
            .any(|l| l.contains("[y/n]") && (l.contains("->") || l.contains("step"))),
        "{screen}"
    );
    assert!(
        screen.contains('\x1b'),
        "a terminal gets colour: {screen:?}"
    );
    assert!(
        chorus
            .agent_dir("careful")
            .join("workspace/plan.md")
            .exists()
    );

    // n: the model hears it was denied, and the file is not written.
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "other.md", "content": "2"}),
    ));
    model.push(text("Understood, not writing it."));
    let mut terminal = Terminal::spawn(&chorus, &["send", "careful", "write another"])?;
    terminal.wait_for("approve? [y/n]").await?;
    terminal.type_line("n")?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("denied by api"), "{screen}");
    assert!(
        !chorus
            .agent_dir("careful")
            .join("workspace/other.md")
            .exists()
    );

    // Ctrl-C stops following, not the thread, and says how to stop it.
    model.push(chorus_test_support::Reply::Silent);
    let terminal = Terminal::spawn(&chorus, &["send", "careful", "think a long time"])?;
    terminal.wait_for("-> step 1").await?;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(terminal.child.id() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(1), "{screen}");
    assert!(
        screen.contains("it goes on (chorus thread kill careful 3 ends it)"),
        "{screen}"
    );
    assert_eq!(chorus.thread("careful", 3).await?["status"], "running");
    let killed = client(&chorus, &["thread", "kill", "careful", "3"]).await;
    assert_eq!(stdout(&killed), "Thread 3 killed.\n", "{}", stderr(&killed));

    // The approvals list and `chorus approve` work from a pipe too.
    model.push(tool_call(
        "c3",
        "create_file",
        json!({"path": "third.md", "content": "3"}),
    ));
    model.push(text("Third written."));
    let waiting = client(
        &chorus,
        &["send", "careful", "a third", "--no-wait", "--json"],
    )
    .await;
    assert!(waiting.status.success(), "{}", stderr(&waiting));
    let deadline = Instant::now() + Duration::from_secs(20);
    let id = loop {
        let list: Value =
            serde_json::from_slice(&client(&chorus, &["approvals", "--json"]).await.stdout)?;
        if let Some(id) = list[0]["id"].as_str() {
            break id.to_string();
        }
        anyhow::ensure!(Instant::now() < deadline, "no approval listed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let listed = stdout(&client(&chorus, &["approvals"]).await);
    assert!(
        listed.contains(&id) && listed.contains("chorus approve <id>"),
        "{listed}"
    );
    let approved = client(&chorus, &["approve", &id]).await;
    assert!(approved.status.success(), "{}", stderr(&approved));
    let thread = chorus
        .wait_thread_finished("careful", 4, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    Ok(())
}

#[tokio::test]
async fn the_server_log_says_what_agents_do_in_one_line_each() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus
        .create_agent_with(json!({
            "name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
        }))
        .await?;
    model.push(tool_call(
        "c1",
        "create_file",
        json!({"path": "plan.md", "content": "1"}),
    ));
    model.push(text("Written."));
    let id = chorus.send_message("careful", "write the plan").await?;
    chorus
        .wait_thread("careful", id, Duration::from_secs(20), |t| {
            t["status"] == "waiting_for_permission"
        })
        .await?;
    let approvals: Value =
        serde_json::from_slice(&client(&chorus, &["approvals", "--json"]).await.stdout)?;
    let approval = approvals[0]["id"].as_str().unwrap().to_string();
    assert!(
        client(&chorus, &["approve", &approval])
            .await
            .status
            .success()
    );
    chorus
        .wait_thread_finished("careful", id, Duration::from_secs(20))
        .await?;

    let log = chorus.output();
    let line = |needle: &str| {
        log.lines()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{log}"))
            .to_string()
    };
    // The start block: providers and what to do next.
    assert!(line("openai      usable: 1 model at").contains("usable"));
    assert!(line("next:").contains("chorus agent create"));
    // One line each, with the agent and the thread.
    let started = line("run started");
    assert!(
        started.contains("agent=careful") && started.contains("thread_id=1"),
        "{started}"
    );
    let waiting = line(&format!("approval {approval} waiting"));
    assert!(
        waiting.contains(&format!("chorus approve {approval}")),
        "{waiting}"
    );
    assert!(line(&format!("approval {approval} answered")).contains("outcome=approved"));
    let ended = line("run ended");
    assert!(
        ended.contains("thread_id=1") && ended.contains("completed"),
        "{ended}"
    );
    Ok(())
}

/// `chorus status` with only the given variables (no keys of this machine's).
async fn status(vars: &[(&str, &str)]) -> anyhow::Result<(Option<i32>, String)> {
    status_with(&[], vars).await
}

async fn status_with(
    args: &[&str],
    vars: &[(&str, &str)],
) -> anyhow::Result<(Option<i32>, String)> {
    let mut command = tokio::process::Command::new(bin_path("chorus"));
    command
        .arg("status")
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        // Nothing runs here, and no local model server answers.
        .env("CHORUS_HTTP_ADDR", "127.0.0.1:9")
        .env("OLLAMA_BASE_URL", "http://127.0.0.1:9")
        .env("LMSTUDIO_BASE_URL", "http://127.0.0.1:9");
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().await?;
    Ok((output.status.code(), stdout(&output)))
}

#[tokio::test]
async fn status_says_which_providers_are_usable_and_what_to_set_next() -> anyhow::Result<()> {
    let (code, text) = status(&[]).await?;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("openai      not configured (set OPENAI_API_KEY)"),
        "{text}"
    );
    assert!(
        text.contains("next:           no usable model provider: set OPENAI_API_KEY"),
        "{text}"
    );
    assert!(text.contains("not running"), "{text}");

    let model = FakeOpenAi::start().await;
    let (code, text) = status(&[
        ("OPENAI_BASE_URL", &model.base_url()),
        ("OPENAI_API_KEY", "sk-bad-key"),
    ])
    .await?;
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("openai      refused: the key was refused (401")
            && text.contains("OPENAI_API_KEY"),
        "{text}"
    );

    let (code, text) = status(&[
        ("OPENAI_BASE_URL", &model.base_url()),
        ("OPENAI_API_KEY", "sk-good"),
    ])
    .await?;
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("openai      usable: 1 model at"), "{text}");
    assert!(
        text.contains("no default model: set CHORUS_DEFAULT_MODEL (e.g. fake-model)"),
        "{text}"
    );
    assert!(
        text.contains("chorus is not running at http://127.0.0.1:9: start it with chorus serve"),
        "{text}"
    );

    // Against a running chorus, with a default model: ready.
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    let addr = chorus.http_url.trim_start_matches("http://").to_string();
    let (code, text) = status(&[
        ("OPENAI_BASE_URL", &model.base_url()),
        ("OPENAI_API_KEY", "sk-good"),
        ("CHORUS_DEFAULT_MODEL", "fake-model"),
        ("CHORUS_HTTP_ADDR", &addr),
    ])
    .await?;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.contains("default model:  fake-model (via openai/fake-model)"),
        "{text}"
    );
    assert!(text.contains("; running"), "{text}");
    assert!(text.contains("next:           ready:"), "{text}");
    // Without the server's token, it says it shows this shell's settings, and why.
    assert!(
        text.starts_with(&format!(
            "A Chorus answers at http://{addr}, but its status cannot be read: no API token here"
        )),
        "{text}"
    );

    // A shell with no provider key, against a server that has one: the server's view.
    let (code, text) = status(&[
        ("CHORUS_HTTP_ADDR", &addr),
        ("CHORUS_API_TOKEN", chorus.token()),
    ])
    .await?;
    assert_eq!(code, Some(0), "{text}");
    assert!(
        text.starts_with(&format!(
            "The Chorus at http://{addr} (what the server sees):\n"
        )),
        "{text}"
    );
    assert!(text.contains("openai      usable: 1 model at"), "{text}");
    assert!(
        text.contains("default model:  fake-model (via openai/fake-model)"),
        "{text}"
    );
    assert!(text.contains("agents:         0; workers: none"), "{text}");
    assert!(
        !text.contains("not configured (set OPENAI_API_KEY)"),
        "{text}"
    );
    // The same for scripts, and through the API.
    let (code, json_text) = status_with(
        &["--json"],
        &[
            ("CHORUS_HTTP_ADDR", &addr),
            ("CHORUS_API_TOKEN", chorus.token()),
        ],
    )
    .await?;
    assert_eq!(code, Some(0), "{json_text}");
    let shown: Value = serde_json::from_str(&json_text)?;
    assert_eq!(shown["shown"], "server", "{shown:#}");
    assert_eq!(shown["status"]["usable"], true, "{shown:#}");
    let openai = shown["status"]["providers"]
        .as_array()
        .and_then(|p| p.iter().find(|p| p["provider"] == "openai"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(openai["state"], "usable", "{shown:#}");
    let api: Value = chorus
        .api(reqwest::Method::GET, "/api/status")
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(
        api["default_route"]["route"], "openai/fake-model",
        "{api:#}"
    );
    assert_eq!(api["data_dir"], shown["status"]["data_dir"]);
    // chorus serve says the same at start: here, with no provider at all.
    let bare = Chorus::builder()
        .env("OLLAMA_BASE_URL", "http://127.0.0.1:9")
        .env("LMSTUDIO_BASE_URL", "http://127.0.0.1:9")
        .start()
        .await?;
    let deadline = Instant::now() + Duration::from_secs(20);
    while !bare.output().contains("next:") {
        anyhow::ensure!(
            Instant::now() < deadline,
            "no start block:\n{}",
            bare.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        bare.output()
            .contains("next:           no usable model provider: set OPENAI_API_KEY"),
        "{}",
        bare.output()
    );
    // `doctor` is the same command.
    let doctor = tokio::process::Command::new(bin_path("chorus"))
        .args(["doctor", "--help"])
        .output()
        .await?;
    assert!(stdout(&doctor).contains("chorus status"));
    Ok(())
}

#[tokio::test]
async fn completions_help_and_suggestions() -> anyhow::Result<()> {
    let run = |args: &[&str]| {
        let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
        async move {
            tokio::process::Command::new(bin_path("chorus"))
                .args(&args)
                .output()
                .await
        }
    };
    let bash = run(&["completions", "bash"]).await?;
    assert!(bash.status.success());
    let script = stdout(&bash);
    assert!(
        script.contains("_chorus()") && script.contains("approvals"),
        "{script}"
    );
    let zsh = stdout(&run(&["completions", "zsh"]).await?);
    assert!(zsh.starts_with("#compdef chorus"), "{zsh}");
    // A typo names what was meant.
    let typo = run(&["thred", "show"]).await?;
    assert_eq!(typo.status.code(), Some(2));
    assert!(stderr(&typo).contains("'thread'"), "{}", stderr(&typo));
    // Help shows an example.
    let help = stdout(&run(&["send", "--help"]).await?);
    assert!(help.contains("Examples:\n  chorus send"), "{help}");
    Ok(())
}

/// `chorus <args>` with `token` instead of the API token.
async fn client_as(chorus: &Chorus, token: &str, args: &[&str]) -> Output {
    tokio::process::Command::new(bin_path("chorus"))
        .args(args)
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", token)
        .stdin(Stdio::null())
        .output()
        .await
        .expect("run chorus")
}

#[tokio::test]
async fn user_tokens_are_issued_listed_and_revoked_from_the_terminal_client() -> anyhow::Result<()>
{
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder()
        .openai_fake(&model)
        .config("[roles]\nbob = \"operator\"\n")
        .start()
        .await?;

    let created = client(
        &chorus,
        &[
            "user", "token", "create", "bob", "--label", "laptop", "--json",
        ],
    )
    .await;
    assert!(created.status.success(), "{}", stderr(&created));
    let issued: Value = serde_json::from_slice(&created.stdout)?;
    let token = issued["token"].as_str().unwrap().to_string();
    let id = issued["id"].as_str().unwrap().to_string();
    assert_eq!(issued["role"], "operator");
    // As text it says the token is shown once.
    let text_out = stdout(&client(&chorus, &["user", "token", "create", "bob"]).await);
    assert!(
        text_out.contains("for bob (role operator)") && text_out.contains("chorus_"),
        "{text_out}"
    );

    let me = client_as(&chorus, &token, &["whoami"]).await;
    assert_eq!(stdout(&me), "bob (operator)\n", "{}", stderr(&me));

    let listed = stdout(&client(&chorus, &["user", "token", "list", "bob"]).await);
    assert!(
        listed.starts_with("ID") && listed.contains(&id) && listed.contains("laptop"),
        "{listed}"
    );
    assert!(
        !listed.contains(&token),
        "a list never shows a token: {listed}"
    );
    // Only an admin manages tokens: bob (an operator) is told so.
    let refused = client_as(&chorus, &token, &["user", "token", "list"]).await;
    assert_eq!(refused.status.code(), Some(1));
    assert!(
        stderr(&refused).contains("needs the role admin"),
        "{}",
        stderr(&refused)
    );

    let revoked = client(&chorus, &["user", "token", "revoke", "bob", &id]).await;
    assert!(revoked.status.success(), "{}", stderr(&revoked));
    assert_eq!(stdout(&revoked), format!("Token {id} of bob revoked.\n"));
    let after = client_as(&chorus, &token, &["whoami"]).await;
    assert_eq!(after.status.code(), Some(1));
    assert!(
        stderr(&after).contains("token was refused"),
        "{}",
        stderr(&after)
    );
    let listed = stdout(&client(&chorus, &["user", "token", "list"]).await);
    assert!(listed.contains("revoked "), "{listed}");
    Ok(())
}

/// Reads `chorus events --json` lines until one satisfies `done`.
async fn read_events_until(
    lines: &mut tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>,
    done: impl Fn(&Value) -> bool,
) -> anyhow::Result<Vec<Value>> {
    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("no such event within 30 s: {seen:#?}"))??
            .ok_or_else(|| anyhow::anyhow!("chorus events ended: {seen:#?}"))?;
        let event: Value = serde_json::from_str(&line)?;
        let finished = done(&event);
        seen.push(event);
        if finished {
            return Ok(seen);
        }
    }
}

#[tokio::test]
async fn models_jobs_audit_events_and_approval_prefixes_from_the_terminal_client()
-> anyhow::Result<()> {
    use tokio::io::AsyncBufReadExt;
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;

    // What the providers offer, by the names to use.
    let models = client(&chorus, &["models"]).await;
    let text_out = stdout(&models);
    assert!(models.status.success(), "{}", stderr(&models));
    assert!(
        text_out.contains("openai usable at") && text_out.contains("\n  fake-model\n"),
        "{text_out}"
    );
    let listed: Value =
        serde_json::from_slice(&client(&chorus, &["models", "--json"]).await.stdout)?;
    assert_eq!(listed["providers"]["openai"]["models"][0], "fake-model");
    let refreshed = client(&chorus, &["models", "--refresh", "--json"]).await;
    assert!(refreshed.status.success(), "{}", stderr(&refreshed));

    // The live feed, followed from the start of a run that starts a background job.
    chorus
        .create_agent_with(json!({"name": "devops", "permissions": "open"}))
        .await?;
    let mut events = tokio::process::Command::new(bin_path("chorus"))
        .args(["events", "--agent", "devops", "--json"])
        .env("CHORUS_URL", &chorus.http_url)
        .env("CHORUS_API_TOKEN", chorus.token())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = tokio::io::BufReader::new(events.stdout.take().unwrap()).lines();
    let marker = format!("300.{}{}", std::process::id(), line!());
    model.push(tool_call(
        "c1",
        "bash",
        json!({"command": format!("sleep {marker}"), "run_in_background": true}),
    ));
    model.push(text("started"));
    // The message goes once the feed is open: the agent's unchanged prompt, set
    // again, is told on the feed (`agent` changed) until the client prints it. (The
    // server's subscriber count cannot tell: its own parts come and go, such as the
    // heartbeats' check at start.)
    let prompt = chorus.agent("devops").await?["system_prompt"].clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        chorus
            .ok(
                reqwest::Method::PATCH,
                "/api/agents/devops",
                Some(json!({ "system_prompt": prompt })),
            )
            .await?;
        if let Ok(line) = tokio::time::timeout(Duration::from_millis(500), lines.next_line()).await
        {
            let line = line?.ok_or_else(|| anyhow::anyhow!("chorus events exited"))?;
            let event: Value = serde_json::from_str(&line)?;
            if event["kind"] == "agent" {
                break;
            }
        }
        anyhow::ensure!(Instant::now() < deadline, "chorus events never connected");
    }
    let thread = chorus.send_message("devops", "start the job").await?;
    let seen = read_events_until(&mut lines, |e| {
        e["kind"] == "status" && e["data"]["status"] == "completed"
    })
    .await?;
    assert!(
        seen.iter().any(|e| e["kind"] == "step_started"
            && e["data"]["thread_id"] == thread
            && e["id"].is_string()),
        "{seen:#?}"
    );
    // Ctrl-C ends it quietly.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(events.id().unwrap() as i32),
        nix::sys::signal::Signal::SIGINT,
    )?;
    let ended = tokio::time::timeout(Duration::from_secs(10), events.wait()).await??;
    assert_eq!(ended.code(), Some(0));

    // The job it started, and the audit log of it.
    let deadline = Instant::now() + Duration::from_secs(15);
    let jobs = loop {
        let jobs = client(&chorus, &["jobs", "devops"]).await;
        if stdout(&jobs).contains("running") {
            break stdout(&jobs);
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no job running: {}",
            stdout(&jobs)
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(
        jobs.starts_with("ID") && jobs.contains(&format!("sleep {marker}")),
        "{jobs}"
    );
    let audit = client(&chorus, &["audit", "devops"]).await;
    let audit_text = stdout(&audit);
    assert!(
        audit_text.contains(&format!("tool:bash:sleep {marker}")) && audit_text.contains("allow"),
        "{audit_text}{}",
        stderr(&audit)
    );
    let audit: Value = serde_json::from_slice(
        &client(&chorus, &["audit", "devops", "--limit", "1", "--json"])
            .await
            .stdout,
    )?;
    assert_eq!(
        audit["entries"].as_array().map(Vec::len),
        Some(1),
        "{audit:#}"
    );
    let stopped = client(&chorus, &["thread", "kill", "devops", "all"]).await;
    assert!(stopped.status.success());

    // An approval answered by the start of its id.
    chorus
        .create_agent_with(json!({
            "name": "careful",
            "permissions": {"allow": ["tool:view:.*"], "ask": ["tool:create_file:.*"]},
        }))
        .await?;
    model.push(tool_call(
        "c2",
        "create_file",
        json!({"path": "plan.md", "content": "1"}),
    ));
    model.push(text("Written."));
    let id = chorus.send_message("careful", "write the plan").await?;
    chorus
        .wait_thread("careful", id, Duration::from_secs(20), |t| {
            t["status"] == "waiting_for_permission"
        })
        .await?;
    let approvals: Value =
        serde_json::from_slice(&client(&chorus, &["approvals", "--json"]).await.stdout)?;
    let approval = approvals[0]["id"].as_str().unwrap().to_string();
    let wrong = client(&chorus, &["approve", "zz"]).await;
    assert!(
        stderr(&wrong).contains("no waiting approval's id starts with 'zz'"),
        "{}",
        stderr(&wrong)
    );
    let approved = client(&chorus, &["approve", &approval[..6]]).await;
    assert!(approved.status.success(), "{}", stderr(&approved));
    assert!(
        stdout(&approved).contains(&approval),
        "{}",
        stdout(&approved)
    );
    let thread = chorus
        .wait_thread_finished("careful", id, Duration::from_secs(20))
        .await?;
    assert_eq!(thread["status"], "completed", "{thread:#}");
    assert!(
        chorus
            .agent_dir("careful")
            .join("workspace/plan.md")
            .exists()
    );

    // Errors in the terminal name the command to run.
    let unknown = client(
        &chorus,
        &["agent", "configure", "careful", "--model", "no-such-model"],
    )
    .await;
    assert!(
        stderr(&unknown).contains("`chorus models`"),
        "{}",
        stderr(&unknown)
    );
    Ok(())
}

#[tokio::test]
async fn permissions_explain_names_long_rules_in_words_and_gives_the_whole_rule_in_json()
-> anyhow::Result<()> {
    let run = |json: bool| {
        let mut command = Command::new(bin_path("chorus"));
        command.args(["permissions", "explain", "standard", "tool:bash:ls -la src"]);
        if json {
            command.arg("--json");
        }
        command.output()
    };
    let text_out = stdout(&run(false)?);
    assert!(
        text_out.starts_with("allow  (standard profile)"),
        "{text_out}"
    );
    assert!(
        text_out.contains("allowed by allow[2] (ls, cat, head, tail, wc or grep"),
        "{text_out}"
    );
    assert!(
        text_out.len() < 400,
        "{} characters: {text_out}",
        text_out.len()
    );
    let answer: Value = serde_json::from_slice(&run(true)?.stdout)?;
    assert_eq!(answer["decision"], "allow");
    assert!(
        answer["actions"][0]["pattern"].as_str().unwrap().len() > 500,
        "{answer:#}"
    );
    Ok(())
}

#[tokio::test]
async fn destroy_at_a_terminal_says_what_goes_and_asks() -> anyhow::Result<()> {
    let model = FakeOpenAi::start().await;
    let chorus = Chorus::builder().openai_fake(&model).start().await?;
    chorus.create_agent("doomed").await?;
    let workspace = chorus.agent_dir("doomed").join("workspace");

    let mut terminal = Terminal::spawn(&chorus, &["agent", "destroy", "doomed"])?;
    terminal.wait_for("Destroy doomed? [y/N]").await?;
    assert!(
        terminal
            .screen()
            .contains(&format!("workspace:  {}", workspace.display()))
            && terminal.screen().contains("--keep-files"),
        "{}",
        terminal.screen()
    );
    terminal.type_line("")?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(1), "{screen}");
    assert!(screen.contains("Not destroyed."), "{screen}");
    assert!(workspace.is_dir());

    let mut terminal = Terminal::spawn(&chorus, &["agent", "destroy", "doomed"])?;
    terminal.wait_for("Destroy doomed? [y/N]").await?;
    terminal.type_line("y")?;
    let (code, screen) = terminal.exit_code().await?;
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("Agent doomed destroyed."), "{screen}");
    assert!(!workspace.exists());
    Ok(())
}
