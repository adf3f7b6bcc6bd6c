//! Each way a repository or `HOME` can make git run a program, tried twice on a real
//! repository: with a plain environment (the attack works: its marker file appears, so
//! the setup is sound) and through the `bash` tool (it does not, and git still works).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use chorus_proto::domain::ToolCall;
use serde_json::json;

use super::*;
use crate::tools::jail::Workspace;
use crate::tools::{ToolBox, ToolOutcome};

/// A workspace `ws/` holding a committed repository, a script that appends to a marker
/// file beside the workspace, and the marker's path.
struct Setup {
    _dir: tempfile::TempDir,
    ws: PathBuf,
    marker: PathBuf,
    /// The script's absolute path (it is executable).
    run_script: String,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let marker = dir.path().join("marker");
        let script = ws.join("evil.sh");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho ran >> '{}'\n", marker.display()),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let setup = Setup {
            run_script: script.display().to_string(),
            _dir: dir,
            ws,
            marker,
        };
        setup.plain_ok(&["init", "--quiet", "--initial-branch=main"]);
        std::fs::write(setup.ws.join("a.txt"), "one\n").unwrap();
        setup.plain_ok(&["add", "a.txt"]);
        setup.plain_ok(&[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "--quiet",
            "-m",
            "first",
        ]);
        std::fs::write(setup.ws.join("a.txt"), "two\n").unwrap();
        setup
    }

    /// git with HOME = the workspace and nothing else from Chorus: today's attack.
    fn plain(&self, args: &[&str]) -> std::process::Output {
        Command::new("git")
            .args(args)
            .current_dir(&self.ws)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.ws)
            .env("GIT_TERMINAL_PROMPT", "0")
            .stdin(std::process::Stdio::null())
            .output()
            .unwrap()
    }

    fn plain_ok(&self, args: &[&str]) {
        let out = self.plain(args);
        assert!(out.status.success(), "git {args:?}: {out:?}");
    }

    fn config(&self, key: &str, value: &str) {
        self.plain_ok(&["config", key, value]);
    }

    async fn tool(&self, command: &str) -> ToolOutcome {
        let tools = ToolBox::new(Workspace::new(&self.ws), Arc::default());
        let call = ToolCall {
            id: "g".into(),
            name: "bash".into(),
            arguments: json!({ "command": command }).to_string(),
        };
        tools.execute(&call).await
    }

    fn ran(&self) -> bool {
        self.marker.exists()
    }

    fn reset(&self) {
        let _ = std::fs::remove_file(&self.marker);
    }

    /// The attack run plainly must leave the marker (else the test proves nothing);
    /// through the tool it must not. Returns the tool's outcome.
    async fn blocked(&self, plain: &[&str], through_tool: &str) -> ToolOutcome {
        self.reset();
        let _ = self.plain(plain);
        assert!(
            self.ran(),
            "the attack does not work even without protection: git {plain:?}"
        );
        self.reset();
        let out = self.tool(through_tool).await;
        assert!(
            !self.ran(),
            "{through_tool:?} ran the agent's program: {out:?}"
        );
        out
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn fsmonitor_from_home_or_the_repository_does_not_run_and_status_still_works() {
    let s = Setup::new();
    write(
        &s.ws.join(".gitconfig"),
        &format!("[core]\n\tfsmonitor = {}\n", s.run_script),
    );
    let out = s
        .blocked(&["status", "--short"], "git status --short")
        .await;
    assert!(!out.is_error && out.content.contains(" M a.txt"), "{out:?}");
    std::fs::remove_file(s.ws.join(".gitconfig")).unwrap();

    write(
        &s.ws.join(".config/git/config"),
        &format!("[core]\n\tfsmonitor = {}\n", s.run_script),
    );
    s.blocked(&["status", "--short"], "git status --short")
        .await;
    std::fs::remove_dir_all(s.ws.join(".config")).unwrap();

    s.config("core.fsmonitor", &s.run_script);
    let out = s
        .blocked(&["status", "--short"], "git status --short")
        .await;
    assert!(!out.is_error && out.content.contains(" M a.txt"), "{out:?}");
}

#[tokio::test]
async fn hooks_do_not_run_even_those_git_status_triggers() {
    let s = Setup::new();
    let hook = s.ws.join(".git/hooks/post-index-change");
    write(&hook, &format!("#!/bin/sh\n{}\n", s.run_script));
    std::fs::set_permissions(&hook, std::fs::Permissions::from_mode(0o755)).unwrap();
    // `git status` writes a refreshed index (and runs the hook) when a file's stat
    // data changed since the index was written.
    let touch = || {
        let f = std::fs::File::options()
            .write(true)
            .open(s.ws.join("a.txt"))
            .unwrap();
        f.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(5))
            .unwrap();
    };
    touch();
    s.reset();
    let _ = s.plain(&["status"]);
    assert!(s.ran(), "post-index-change runs on a plain `git status`");
    s.reset();
    touch();
    let out = s.tool("git status").await;
    assert!(!s.ran(), "{out:?}");
    assert!(!out.is_error, "{out:?}");
}

#[tokio::test]
async fn pager_editor_credential_and_askpass_programs_are_pinned() {
    let s = Setup::new();
    s.config("core.pager", &s.run_script);
    s.config("pager.log", &s.run_script);
    s.config("core.editor", &s.run_script);
    s.config("sequence.editor", &s.run_script);
    let out = s
        .tool("git var GIT_PAGER; git var GIT_EDITOR; git var GIT_SEQUENCE_EDITOR")
        .await;
    assert_eq!(
        out.content, "exit code 0\n--- stdout ---\ncat\n:\n:\n",
        "{out:?}"
    );

    s.config("credential.helper", &format!("!{}", s.run_script));
    s.config(
        "credential.https://example.invalid.helper",
        &format!("!{}", s.run_script),
    );
    s.config("core.askPass", &s.run_script);
    let fill = "printf 'protocol=https\\nhost=example.invalid\\n\\n' | git credential fill";
    s.reset();
    let plain = Command::new("sh")
        .args(["-c", fill])
        .current_dir(&s.ws)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .unwrap();
    assert!(
        s.ran(),
        "a plain credential fill runs the helper: {plain:?}"
    );
    s.reset();
    let out = s.tool(fill).await;
    assert!(!s.ran(), "{out:?}");
    assert!(out.content.contains("terminal prompts disabled"), "{out:?}");
}

#[tokio::test]
async fn gpg_and_proxy_programs_are_git_defaults() {
    let s = Setup::new();
    // A commit carrying a signature header: `--show-signature` hands it to gpg.program.
    let head = String::from_utf8(s.plain(&["cat-file", "commit", "HEAD"]).stdout).unwrap();
    let signed = head.replacen(
        "\n\n",
        "\ngpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\n",
        1,
    );
    write(&s.ws.join("signed.txt"), &signed);
    let id = s.plain(&["hash-object", "-t", "commit", "-w", "signed.txt"]);
    let id = String::from_utf8(id.stdout).unwrap();
    s.plain_ok(&["update-ref", "refs/heads/signed", id.trim()]);
    s.config("gpg.program", &s.run_script);
    let out = s
        .blocked(
            &["log", "--show-signature", "-1", "signed"],
            "git log --show-signature -1 signed",
        )
        .await;
    assert!(out.content.contains("first"), "{out:?}");

    s.config("core.gitProxy", &s.run_script);
    s.blocked(
        &["ls-remote", "git://127.0.0.1:1/x"],
        "git ls-remote git://127.0.0.1:1/x",
    )
    .await;
    s.config("protocol.ext.allow", "always");
    let ext = format!("ext::{}", s.run_script);
    let out = s
        .blocked(&["ls-remote", &ext], &format!("git ls-remote '{ext}'"))
        .await;
    assert!(out.content.contains("not allowed"), "{out:?}");
}

#[tokio::test]
async fn git_finds_no_repository_above_the_workspace_nor_a_bare_one_inside_it() {
    let s = Setup::new();
    // A workspace without `.git`: a repository above it would be used as is.
    let inner = s.ws.join("inner");
    std::fs::create_dir(&inner).unwrap();
    s.config("core.fsmonitor", &s.run_script);
    let plain = Command::new("git")
        .arg("status")
        .current_dir(&inner)
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(s.ran(), "a plain git finds the repository above: {plain:?}");
    s.reset();
    let tools = ToolBox::new(Workspace::new(&inner), Arc::default());
    let call = ToolCall {
        id: "g".into(),
        name: "bash".into(),
        arguments: json!({ "command": "git status" }).to_string(),
    };
    let out = tools.execute(&call).await;
    assert!(!s.ran(), "{out:?}");
    assert!(out.content.contains("not a git repository"), "{out:?}");

    // Plain files that make a bare repository, in a workspace that has no `.git`.
    std::fs::remove_dir_all(s.ws.join(".git")).unwrap();
    for dir in ["objects", "refs/heads"] {
        std::fs::create_dir_all(s.ws.join(dir)).unwrap();
    }
    write(&s.ws.join("HEAD"), "ref: refs/heads/main\n");
    write(
        &s.ws.join("config"),
        "[core]\n\trepositoryformatversion = 0\n\tbare = true\n",
    );
    let plain = s.plain(&["rev-parse", "--git-dir"]);
    assert_eq!(
        String::from_utf8_lossy(&plain.stdout).trim(),
        ".",
        "{plain:?}"
    );
    let out = s.tool("git rev-parse --git-dir").await;
    assert!(out.content.contains("safe.bareRepository"), "{out:?}");
}

#[test]
fn every_pinned_key_is_set_once_and_the_names_are_known() {
    let env = git_safety_env(Path::new("/data/agents/a/workspace"));
    let count = PINNED.len().to_string();
    assert!(
        env.iter()
            .any(|(n, v)| *n == "GIT_CONFIG_COUNT" && *v == *count)
    );
    assert!(
        env.iter()
            .any(|(n, v)| *n == "GIT_CEILING_DIRECTORIES" && v == "/data/agents/a")
    );
    for (name, _) in &env {
        assert!(is_git_safety_var(name), "{name}");
    }
    let mut keys: Vec<&str> = PINNED.iter().map(|(k, _)| *k).collect();
    keys.sort_unstable();
    keys.dedup();
    assert_eq!(keys.len(), PINNED.len(), "a key is pinned twice");
}
