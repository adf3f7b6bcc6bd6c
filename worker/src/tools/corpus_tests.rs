//! The jail under attack: an adversarial corpus of paths run through every file tool
//! (as the model calls them, through `ToolBox::execute`), and a symlink-swapping
//! race. Next to the workspace sits an "outside" directory with a canary; after
//! every case the outside must be byte-for-byte what it was, and no tool output may
//! contain the canary's secret or the name of its hidden file.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, symlink};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use chorus_proto::domain::ToolCall;
use serde_json::{Value, json};

use super::{ToolBox, ToolOutcome};
use crate::tools::jail::Workspace;
use crate::tools::locks::FileLocks;

struct Fixture {
    _base: tempfile::TempDir,
    base: PathBuf,
    workspace: PathBuf,
    outside: PathBuf,
    secret: String,
    hidden: String,
    tools: ToolBox,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let workspace = base.join("workspace");
        let outside = base.join("outside");
        let tag = format!("{}{}", std::process::id(), base.display().to_string().len());
        let secret = format!("CANARY-SECRET-{tag}-do-not-leak");
        let hidden = format!("hidden-name-{tag}");
        std::fs::create_dir_all(outside.join("dir")).unwrap();
        std::fs::write(outside.join("secret.txt"), &secret).unwrap();
        std::fs::write(outside.join("dir/inner.txt"), &secret).unwrap();
        std::fs::write(outside.join(format!("{hidden}.txt")), &secret).unwrap();
        std::fs::write(outside.join("file.txt"), &secret).unwrap();
        std::fs::create_dir_all(&workspace).unwrap();
        let tools = ToolBox::new(Workspace::new(&workspace), Arc::new(FileLocks::default()));
        Fixture {
            _base: dir,
            base,
            workspace,
            outside,
            secret,
            hidden,
            tools,
        }
    }

    /// A fresh workspace full of traps; some of them laid by a bash command.
    async fn reset(&self) {
        let ws = &self.workspace;
        std::fs::remove_dir_all(ws).unwrap();
        std::fs::create_dir_all(ws.join("src")).unwrap();
        std::fs::create_dir_all(ws.join("deep/er")).unwrap();
        std::fs::write(ws.join("ok.txt"), "hello CANARY\n").unwrap();
        std::fs::write(ws.join("src/a.rs"), "fn main() {} // CANARY\n").unwrap();
        let out = self.outside.display().to_string();
        for (target, link) in [
            ("../outside", "link_out"),
            (out.as_str(), "abs_out"),
            ("../outside/secret.txt", "secret_link"),
            ("secret_link", "link_to_link"),
            ("link_out", "chain"),
            ("../../outside", "src/mid_out"),
            ("../outside/created-through-dangling.txt", "dangling"),
            ("src", "inner_link"),
            ("loop", "loop"),
            ("/proc/self/root", "proc_root"),
            ("/proc/self/cwd", "proc_cwd"),
        ] {
            symlink(target, ws.join(link)).unwrap();
        }
        symlink(
            self.outside.join("created-through-dangling-abs.txt"),
            ws.join("dangling_abs"),
        )
        .unwrap();
        for fifo in ["pipe", "src/pipe2"] {
            nix::unistd::mkfifo(
                &ws.join(fifo),
                nix::sys::stat::Mode::from_bits_truncate(0o644),
            )
            .unwrap();
        }
        let laid = self
            .run(
                "bash",
                json!({"command": format!(
                    "ln -s ../outside bash_out && ln -s '{out}/secret.txt' bash_secret && mkdir bdir && ln -s ../../outside/dir bdir/up"
                )}),
            )
            .await;
        assert!(!laid.is_error, "{}", laid.content);
    }

    async fn run(&self, tool: &str, args: Value) -> ToolOutcome {
        let call = ToolCall {
            id: "c".into(),
            name: tool.into(),
            arguments: args.to_string(),
        };
        self.tools.execute(&call).await
    }

    /// Everything in the base directory except the workspace: names, kinds, modes,
    /// contents and link targets.
    fn outside_state(&self) -> BTreeMap<String, String> {
        let mut state = BTreeMap::new();
        snapshot(&self.base, &self.base, &self.workspace, &mut state);
        state
    }

    fn assert_no_leak(&self, case: &str, tool: &str, out: &ToolOutcome) {
        assert!(
            !out.content.contains(&self.secret) && !out.content.contains(&self.hidden),
            "{tool} on {case:?} leaked outside content: {}",
            out.content
        );
    }
}

fn snapshot(dir: &Path, base: &Path, skip: &Path, state: &mut BTreeMap<String, String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path == skip {
            continue;
        }
        let meta = std::fs::symlink_metadata(&path).unwrap();
        let key = path.strip_prefix(base).unwrap().display().to_string();
        let value = if meta.file_type().is_symlink() {
            format!("link {:?}", std::fs::read_link(&path).unwrap())
        } else if meta.is_dir() {
            snapshot(&path, base, skip, state);
            format!("dir {:o}", meta.mode())
        } else {
            format!(
                "file {:o} {:?}",
                meta.mode(),
                std::fs::read_to_string(&path).unwrap()
            )
        };
        state.insert(key, value);
    }
}

/// Whether a case must be refused by every tool (`Refuse`) or names a legal place
/// inside the workspace that tools may read or create (`Inside`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Refuse,
    Inside,
}

fn corpus(outside: &Path, workspace: &Path) -> Vec<(String, Expect)> {
    use Expect::*;
    let out = outside.display().to_string();
    let ws = workspace.display().to_string();
    let escapes: Vec<String> = [
        // traversal
        "..",
        "../",
        "../.",
        "./..",
        "..//",
        "../outside",
        "../outside/",
        "../outside/secret.txt",
        "../outside/new.txt",
        "../outside/dir/inner.txt",
        "../../etc/passwd",
        "../../../../../../../../../../etc/passwd",
        "src/../../outside/secret.txt",
        "src/../..",
        "src/..",
        "src/./../..",
        "a/b/../../../outside/secret.txt",
        "ok.txt/../../outside/secret.txt",
        "inner_link/../../outside/secret.txt",
        "../workspace/ok.txt",
        "deep/er/../../../outside/new.txt",
        // symlinks at the end, in the middle, chained, dangling, made by bash
        "link_out",
        "link_out/secret.txt",
        "link_out/new.txt",
        "link_out/dir/inner.txt",
        "link_out/dir/new.txt",
        "link_out/./secret.txt",
        "abs_out",
        "abs_out/secret.txt",
        "abs_out/new.txt",
        "secret_link",
        "link_to_link",
        "chain",
        "chain/secret.txt",
        "chain/new.txt",
        "src/mid_out",
        "src/mid_out/secret.txt",
        "src/mid_out/new.txt",
        "src/mid_out/dir/inner.txt",
        "dangling",
        "dangling_abs",
        "bash_out",
        "bash_out/secret.txt",
        "bash_out/new.txt",
        "bash_secret",
        "bdir/up",
        "bdir/up/inner.txt",
        "bdir/up/new.txt",
        "proc_root",
        "proc_root/etc/passwd",
        "proc_cwd/ok.txt",
        "loop",
        "loop/x",
        // FIFOs
        "pipe",
        "src/pipe2",
    ]
    .iter()
    .map(std::string::ToString::to_string)
    .collect();
    let mut cases = Vec::new();
    for path in &escapes {
        cases.push((path.clone(), Refuse));
        // The same escapes in other spellings.
        cases.push((format!("./{path}"), Refuse));
        cases.push((path.replace('/', "//"), Refuse));
        cases.push((format!("{path}/"), Refuse));
    }
    for path in [
        // absolute, inside and out
        "/".to_string(),
        "//".to_string(),
        "/.".to_string(),
        "/etc/passwd".to_string(),
        "//etc/passwd".to_string(),
        "/etc/".to_string(),
        "/tmp/chorus-escape.txt".to_string(),
        "/dev/null".to_string(),
        "/dev/zero".to_string(),
        "/dev/stdin".to_string(),
        "/proc/self/root/etc/passwd".to_string(),
        "/proc/self/environ".to_string(),
        format!("{out}/secret.txt"),
        format!("{out}/new.txt"),
        format!("{out}/"),
        format!("{ws}/ok.txt"),
        format!("{ws}/../outside/secret.txt"),
        // NUL bytes
        "\0".to_string(),
        "ok.txt\0".to_string(),
        "ok\0.txt".to_string(),
        "\0../outside/secret.txt".to_string(),
        "../outside/secret.txt\0".to_string(),
        "link_out\0/secret.txt".to_string(),
        "src/\0a.rs".to_string(),
        // too long
        "a".repeat(256),
        "é".repeat(200),
        format!("{}y", "x/".repeat(2049)),
        "a".repeat(5000),
        "../".repeat(1500),
        format!("src/{}/x", "b".repeat(300)),
    ] {
        cases.push((path, Refuse));
    }
    for path in [
        // look-alikes and encodings: legal names that stay inside
        "．．/outside/secret.txt".to_string(),
        "．．".to_string(),
        "．．/．．/etc/passwd".to_string(),
        "‥/outside/secret.txt".to_string(),
        "․․/outside/secret.txt".to_string(),
        "。。/outside".to_string(),
        "..\u{2044}outside\u{2044}secret.txt".to_string(),
        "..\u{2215}outside\u{2215}secret.txt".to_string(),
        "..／outside／secret.txt".to_string(),
        "..\\outside\\secret.txt".to_string(),
        "..\\..\\etc\\passwd".to_string(),
        "%2e%2e/outside/secret.txt".to_string(),
        "%2e%2e%2foutside%2fsecret.txt".to_string(),
        "..%2f..%2foutside".to_string(),
        "%252e%252e/x".to_string(),
        "...".to_string(),
        ".../outside/secret.txt".to_string(),
        "..../outside".to_string(),
        ". ./outside".to_string(),
        " ../outside/secret.txt".to_string(),
        "..;/outside".to_string(),
        "..\u{200b}/outside/secret.txt".to_string(),
        "\u{200b}../x".to_string(),
        ".\u{0338}./x".to_string(),
        "\u{202e}txt.exe".to_string(),
        // shell and URL syntax is just text to a file tool
        "~".to_string(),
        "~/.ssh/id_rsa".to_string(),
        "~root/x".to_string(),
        "$HOME/x".to_string(),
        "${HOME}/x".to_string(),
        "$(touch PWNED)".to_string(),
        "`touch PWNED`".to_string(),
        "file:///etc/passwd".to_string(),
        "C:\\Windows\\win.ini".to_string(),
        "\\\\server\\share\\x".to_string(),
        "-rf".to_string(),
        "--help".to_string(),
        "*".to_string(),
        "?".to_string(),
        "[abc]".to_string(),
        "new\nline".to_string(),
        "tab\there".to_string(),
        "a b/c d.txt".to_string(),
        "a.".to_string(),
        "a ".to_string(),
        "con".to_string(),
        "CON:".to_string(),
        "a|b>c<d".to_string(),
        "'quoted'".to_string(),
        "\"dq\"".to_string(),
        "é/ü.txt".to_string(),
        "日本語.txt".to_string(),
        "emoji-😀.txt".to_string(),
        // ordinary places, odd spellings, names that look like the traps
        String::new(),
        " ".to_string(),
        "\t".to_string(),
        ".".to_string(),
        "./".to_string(),
        ".//".to_string(),
        "ok.txt".to_string(),
        "ok.txt/".to_string(),
        "./ok.txt".to_string(),
        ".//ok.txt".to_string(),
        "src".to_string(),
        "src/".to_string(),
        "src//a.rs".to_string(),
        "./src/./a.rs".to_string(),
        "inner_link".to_string(),
        "inner_link/a.rs".to_string(),
        "deep".to_string(),
        "deep/er/".to_string(),
        ".git/config".to_string(),
        ".env".to_string(),
        "outside/secret.txt".to_string(),
        "workspace/ok.txt".to_string(),
        "OK.TXT".to_string(),
        "LINK_OUT/secret.txt".to_string(),
        "link_out.txt".to_string(),
        "link_outx/secret.txt".to_string(),
        "a".repeat(255),
        format!("{}x", "d/".repeat(500)),
    ] {
        cases.push((path, Inside));
    }
    cases
}

/// The calls of every file tool on one path: reads, then writes, then the delete.
fn calls_for(path: &str) -> Vec<(&'static str, Value)> {
    vec![
        ("view", json!({"path": path})),
        ("file.read", json!({"path": path, "offset": 1, "limit": 50})),
        ("file.list", json!({"path": path, "recursive": true})),
        ("file.search", json!({"pattern": ".", "path": path})),
        ("create_file", json!({"path": path, "content": "PWNED"})),
        ("file.write", json!({"path": path, "content": "PWNED"})),
        (
            "str_replace",
            json!({"path": path, "old_str": "CANARY", "new_str": "PWNED"}),
        ),
        (
            "file.patch",
            json!({"path": path, "old_str": "CANARY", "new_str": "PWNED"}),
        ),
        ("file.create", json!({"path": path, "content": "PWNED"})),
        ("file.delete", json!({"path": path})),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_path_in_the_corpus_reads_or_writes_outside_the_workspace() {
    let fixture = Fixture::new();
    let before = fixture.outside_state();
    let cases = corpus(&fixture.outside, &fixture.workspace);
    assert!(cases.len() >= 200, "the corpus has {} cases", cases.len());
    let mut calls = 0;
    for (path, expect) in &cases {
        fixture.reset().await;
        for (tool, args) in calls_for(path) {
            let out = fixture.run(tool, args).await;
            calls += 1;
            fixture.assert_no_leak(path, tool, &out);
            assert!(!out.malformed, "{tool} on {path:?}: {}", out.content);
            // Deleting a symlink removes the link itself, inside: allowed.
            if *expect == Expect::Refuse && tool != "file.delete" {
                assert!(
                    out.is_error,
                    "{tool} on {path:?} should be refused: {}",
                    out.content
                );
            }
        }
        assert_eq!(
            fixture.outside_state(),
            before,
            "something outside the workspace changed after {path:?}"
        );
    }
    println!("jail corpus: {} paths, {calls} tool calls", cases.len());
    assert!(calls >= 2000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn swapping_a_directory_for_a_symlink_mid_call_never_leads_outside() {
    let fixture = Fixture::new();
    fixture.reset().await;
    let before = fixture.outside_state();
    let ws = fixture.workspace.clone();
    std::fs::create_dir(ws.join("flip_dir")).unwrap();
    std::fs::write(ws.join("flip_dir/file.txt"), "inside CANARY\n").unwrap();
    symlink("../outside", ws.join("flip_link")).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Moves a real directory and a symlink out of the workspace in and out of
    // `flip` as fast as it can, to hit the gap between any check and any use.
    let flipper = std::thread::spawn({
        let stop = stop.clone();
        let ws = ws.clone();
        move || {
            let mut flips = 0u64;
            while !stop.load(Ordering::Relaxed) {
                for source in ["flip_dir", "flip_link"] {
                    if std::fs::rename(ws.join(source), ws.join("flip")).is_ok() {
                        std::thread::yield_now();
                        let _ = std::fs::rename(ws.join("flip"), ws.join(source));
                        flips += 1;
                    } else if std::fs::symlink_metadata(ws.join("flip")).is_ok()
                        && ws.join("flip_dir").is_dir()
                        && std::fs::symlink_metadata(ws.join("flip_link")).is_ok()
                    {
                        // A tool made its own `flip` (a directory or file) while
                        // neither of ours was there; clear it so the race goes on.
                        let stray = ws.join("flip");
                        let _ = std::fs::remove_dir_all(&stray)
                            .or_else(|_| std::fs::remove_file(&stray));
                    }
                }
            }
            flips
        }
    });
    for round in 0..300 {
        for (tool, args) in calls_for("flip/file.txt")
            .into_iter()
            .chain(calls_for("flip"))
        {
            let out = fixture.run(tool, args).await;
            fixture.assert_no_leak(&format!("flip (round {round})"), tool, &out);
        }
        // Deletes may have removed the inner file; put it back for the next round
        // (this fails harmlessly while the directory is swapped in as `flip`).
        let _ = std::fs::write(ws.join("flip_dir/file.txt"), "inside CANARY\n");
    }
    stop.store(true, Ordering::Relaxed);
    let flips = flipper.join().unwrap();
    assert!(flips > 100, "the race barely ran ({flips} flips)");
    assert_eq!(fixture.outside_state(), before);
}
