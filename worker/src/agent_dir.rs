//! A dial-in worker's hold on an agent's directory, `<data-dir>/agents/<name>/`.
//!
//! The directory lives on the worker's volume. On the shared-volume layout every
//! worker mounts the same volume, so the agent's files are there whichever worker
//! holds the agent; a new agent's directory is laid out from the template the
//! control plane sends, once per **incarnation** (each creation of the name without
//! kept files gets a new one, recorded in `.chorus-incarnation` when the layout is
//! finished). Invariants: **one worker at a time works in an agent's directory** —
//! the control plane assigns an agent to one connection at a time, and the worker
//! also holds an exclusive lock (`flock`) on `<dir>/.chorus-lock` while it serves
//! the agent or deletes its files, so a worker that has not yet noticed it lost the
//! agent (a partition) keeps the next one out until it lets go; and **an agent
//! never works in another incarnation's files**: a directory laid out for another
//! one (a destroyed agent of the same name), or never finished, is deleted before
//! the layout, and a deletion asked for a destroyed incarnation leaves a newer one's
//! directory alone.
//!
//! The incarnation is written to `.chorus-incarnation` once a layout is finished (git
//! commit included). This replaced a one-shot `fresh` flag, which a first assignment that
//! failed after being handed over lost, leaving the new agent in the old one's files.
//!
//! A template names plain relative paths only (anything else refuses the layout), and
//! all file work (lock, layout, deletion) runs off the runtime's threads
//! (`spawn_blocking`).

use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, Instant};

use chorus_proto::domain::{AgentDirectory, TemplateFile};
use nix::fcntl::{Flock, FlockArg};
use tokio::process::Command;

/// The lock a worker holds on the agent's directory while it serves the agent.
pub struct Held {
    _lock: Flock<std::fs::File>,
    pub dir: PathBuf,
}

/// The file that says which incarnation of the agent the directory was laid out for;
/// written last, so a layout that never finished has none.
const INCARNATION_FILE: &str = ".chorus-incarnation";
/// The file a worker holds `flock` on while it works in the directory; never deleted
/// (a worker waiting on a deleted lock file would hold a lock no one else sees).
const LOCK_FILE: &str = ".chorus-lock";

/// Takes the agent's directory: waits up to `wait` for the lock, then keeps the
/// files if they were laid out for this `incarnation` (a moved agent keeps its
/// files), or deletes what is there (a destroyed agent of the same name's files, a
/// layout that never finished) and lays the directory out from `template`. Returns
/// whether it was laid out now.
pub async fn take(
    dir: &Path,
    template: &[TemplateFile],
    incarnation: &str,
    wait: Duration,
) -> Result<(Held, bool), String> {
    check_incarnation(incarnation)?;
    private_dirs(dir)?;
    let lock = lock(dir, wait).await?;
    let held = Held {
        _lock: lock,
        dir: dir.to_path_buf(),
    };
    // Deleting and writing files can take a while on a large directory: off the
    // runtime's threads.
    let laid_out = {
        let (dir, template, incarnation) = (
            dir.to_path_buf(),
            template.to_vec(),
            incarnation.to_string(),
        );
        tokio::task::spawn_blocking(move || -> Result<bool, String> {
            if laid_out_for(&dir)?.as_deref() == Some(incarnation.as_str()) {
                return Ok(false);
            }
            clear(&dir)?;
            write_template(&dir, &template)?;
            Ok(true)
        })
        .await
        .map_err(|e| format!("laying out the agent's directory failed: {e}"))??
    };
    if laid_out {
        commit_workspace(&dir.join("workspace")).await?;
        let marker = dir.join(INCARNATION_FILE);
        std::fs::write(&marker, incarnation)
            .map_err(|e| format!("cannot write {}: {e}", marker.display()))?;
    }
    Ok((held, laid_out))
}

/// Deletes a destroyed agent's files if they are `incarnation`'s (or a layout that
/// never finished); a newer agent of the same name keeps its own. Waits up to `wait`
/// for the lock: a worker serving an agent of that name holds it. Everything but the
/// lock file goes. Returns whether anything was deleted.
pub async fn delete(dir: &Path, incarnation: &str, wait: Duration) -> Result<bool, String> {
    check_incarnation(incarnation)?;
    if !dir.is_dir() {
        return Ok(false);
    }
    let lock = lock(dir, wait).await?;
    let dir = dir.to_path_buf();
    let incarnation = incarnation.to_string();
    let deleted = tokio::task::spawn_blocking(move || -> Result<bool, String> {
        match laid_out_for(&dir)? {
            Some(other) if other != incarnation => Ok(false),
            _ => clear(&dir),
        }
    })
    .await
    .map_err(|e| format!("deleting the agent's files failed: {e}"))??;
    drop(lock);
    Ok(deleted)
}

/// At most this many directories are named in a dial-in worker's Hello (the rest
/// are still used; the control plane only cannot prefer this worker for them).
const MAX_ADVERTISED: usize = 10_000;

/// The agents' directories on the volume under `data_dir` with a finished layout,
/// and the incarnation each was laid out for: what a dial-in worker tells the
/// control plane when it joins, so agents are placed where their files are.
pub fn directories(data_dir: &Path) -> Vec<AgentDirectory> {
    let Ok(entries) = std::fs::read_dir(data_dir.join("agents")) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let Some(agent) = entry.file_name().to_str().map(str::to_string) else {
            continue;
        };
        let Ok(Some(incarnation)) = laid_out_for(&entry.path()) else {
            continue;
        };
        if check_incarnation(&incarnation).is_err() {
            continue;
        }
        if found.len() == MAX_ADVERTISED {
            tracing::warn!(
                limit = MAX_ADVERTISED,
                "more agents' directories on this volume than a join names; placement by files covers the first"
            );
            break;
        }
        found.push(AgentDirectory { agent, incarnation });
    }
    found
}

/// At the top of a dial-in worker's `--data-dir`: the volume's id.
const VOLUME_FILE: &str = ".chorus-volume";

/// The id of the volume under `data_dir`, made by the first worker to look (workers
/// sharing the volume all read that one), so the control plane counts what one of
/// them names as held by all.
pub fn volume_id(data_dir: &Path) -> Result<String, String> {
    private_dirs(data_dir)?;
    let path = data_dir.join(VOLUME_FILE);
    for _ in 0..50 {
        match std::fs::read_to_string(&path) {
            Ok(id) if check_incarnation(id.trim()).is_ok() => return Ok(id.trim().to_string()),
            // Empty or damaged: it cannot be half written (see below), so damaged.
            Ok(_) => {
                return Err(format!(
                    "{} does not hold a volume id; delete it and restart the worker",
                    path.display()
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // Written whole under a name of our own, then linked into place:
                // nobody reads half an id, and of two workers racing, one wins.
                let id = random_hex()?;
                // Not named by pid: containers sharing a volume may all be pid 1.
                let ours = data_dir.join(format!("{VOLUME_FILE}.{id}"));
                std::fs::write(&ours, &id)
                    .map_err(|e| format!("cannot write {}: {e}", ours.display()))?;
                let linked = std::fs::hard_link(&ours, &path);
                let _ = std::fs::remove_file(&ours);
                match linked {
                    Ok(()) => return Ok(id),
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                    Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
                }
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
    Err(format!(
        "cannot settle on a volume id in {}",
        path.display()
    ))
}

/// 128 random bits from the OS, hex.
fn random_hex() -> Result<String, String> {
    use std::io::Read;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("no randomness from the OS: {e}"))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// An incarnation is a short token of letters and digits (it names nothing on disk,
/// but it is written into a file and compared).
fn check_incarnation(incarnation: &str) -> Result<(), String> {
    let plain = !incarnation.is_empty()
        && incarnation.len() <= 64
        && incarnation.chars().all(|c| c.is_ascii_alphanumeric());
    if plain {
        Ok(())
    } else {
        Err(format!(
            "the control plane sent {incarnation:?} as the agent's incarnation, which is not a token of letters and digits (is it an older chorus?)"
        ))
    }
}

/// Which incarnation the directory was laid out for; `None`: no finished layout.
fn laid_out_for(dir: &Path) -> Result<Option<String>, String> {
    let marker = dir.join(INCARNATION_FILE);
    match std::fs::read_to_string(&marker) {
        Ok(text) => Ok(Some(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!("cannot read {}: {e}", marker.display())),
    }
}

/// The exclusive lock on `<dir>/.chorus-lock`, waiting up to `wait` for it.
async fn lock(dir: &Path, wait: Duration) -> Result<Flock<std::fs::File>, String> {
    let lock_path = dir.join(LOCK_FILE);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&lock_path)
        .map_err(|e| format!("cannot open {}: {e}", lock_path.display()))?;
    let deadline = Instant::now() + wait;
    loop {
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((back, nix::errno::Errno::EWOULDBLOCK)) if Instant::now() < deadline => {
                file = back;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err((_, errno)) => {
                return Err(format!(
                    "the agent's directory {} is held by another worker (lock: {errno}); it is let go when that worker notices it lost the agent",
                    dir.display()
                ));
            }
        }
    }
}

/// Deletes everything in the agent's directory but the lock.
/// Returns whether there was anything to delete.
fn clear(dir: &Path) -> Result<bool, String> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    let mut any = false;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        if entry.file_name() == LOCK_FILE {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(|e| format!("cannot delete {}: {e}", path.display()))?;
        any = true;
    }
    Ok(any)
}

/// The agent's directory and its parents up to the data directory, private (0700).
fn private_dirs(dir: &Path) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| format!("cannot create {}: {e}", dir.display()))
}

/// A template path as a relative path of plain components, or `None`.
fn relative(path: &str) -> Option<PathBuf> {
    let path = Path::new(path);
    let plain = !path.as_os_str().is_empty()
        && path.components().all(|c| matches!(c, Component::Normal(_)));
    plain.then(|| path.to_path_buf())
}

/// Writes the template's files (those not there yet) and the parts every agent needs.
fn write_template(dir: &Path, template: &[TemplateFile]) -> Result<(), String> {
    for file in template {
        let Some(path) = relative(&file.path) else {
            return Err(format!(
                "the template names {:?}, which is not a plain relative path",
                file.path
            ));
        };
        let target = dir.join(path);
        if target.exists() {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        std::fs::write(&target, &file.content)
            .map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        if file.executable {
            std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o755))
                .map_err(|e| format!("cannot make {} executable: {e}", target.display()))?;
        }
    }
    for part in ["docs", "sessions", "workspace"] {
        let path = dir.join(part);
        std::fs::create_dir_all(&path)
            .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    }
    Ok(())
}

/// `git init` and a first commit of what the template put in the workspace.
async fn commit_workspace(workspace: &Path) -> Result<(), String> {
    git(
        workspace,
        &["init", "--quiet", "--initial-branch=main", "--template="],
    )
    .await?;
    git(workspace, &["add", "--all"]).await?;
    git(
        workspace,
        &[
            "-c",
            "user.name=Chorus",
            "-c",
            "user.email=chorus@localhost",
            "-c",
            "commit.gpgsign=false",
            "commit",
            "--quiet",
            "--allow-empty",
            "--no-verify",
            "-m",
            "Initial commit",
        ],
    )
    .await
}

async fn git(dir: &Path, args: &[&str]) -> Result<(), String> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .await
        .map_err(|e| format!("cannot run git in {}: {e}", dir.display()))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "git {} failed in {}: {}",
            args.join(" "),
            dir.display(),
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn template() -> Vec<TemplateFile> {
        vec![
            TemplateFile {
                path: "docs/README.md".into(),
                content: b"read me".to_vec(),
                executable: false,
            },
            TemplateFile {
                path: "workspace/run.sh".into(),
                content: b"#!/bin/sh\n".to_vec(),
                executable: true,
            },
        ]
    }

    #[tokio::test]
    async fn a_new_directory_is_laid_out_once_and_a_second_holder_is_kept_out() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("agents/a");
        let (held, laid_out) = take(&dir, &template(), "one", Duration::ZERO)
            .await
            .unwrap();
        assert!(laid_out);
        assert_eq!(
            std::fs::read_to_string(dir.join("docs/README.md")).unwrap(),
            "read me"
        );
        let mode = std::fs::metadata(dir.join("workspace/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o111, 0o111);
        assert!(dir.join("workspace/.git").is_dir());
        assert!(dir.join("sessions").is_dir());
        // Another worker cannot take it, nor delete it, while this one holds it.
        let refused = take(&dir, &template(), "one", Duration::from_millis(200))
            .await
            .err()
            .unwrap();
        assert!(refused.contains("held by another worker"), "{refused}");
        let refused = delete(&dir, "one", Duration::from_millis(200))
            .await
            .err()
            .unwrap();
        assert!(refused.contains("held by another worker"), "{refused}");
        // Once let go, the next holder of the same incarnation finds the files.
        std::fs::write(dir.join("workspace/kept.txt"), "kept").unwrap();
        drop(held);
        let (held, laid_out) = take(&dir, &template(), "one", Duration::ZERO)
            .await
            .unwrap();
        assert!(!laid_out);
        assert_eq!(
            std::fs::read_to_string(dir.join("workspace/kept.txt")).unwrap(),
            "kept"
        );
        drop(held);
        // A new agent of the same name starts clean, however many tries it took.
        let (held, laid_out) = take(&dir, &template(), "two", Duration::ZERO)
            .await
            .unwrap();
        assert!(laid_out);
        assert!(!dir.join("workspace/kept.txt").exists());
        assert!(dir.join("workspace/run.sh").is_file());
        std::fs::write(dir.join("workspace/new.txt"), "new").unwrap();
        drop(held);
        let (held, laid_out) = take(&dir, &template(), "two", Duration::ZERO)
            .await
            .unwrap();
        assert!(!laid_out);
        drop(held);
        // Deleting the destroyed first incarnation's files leaves the second's alone;
        // deleting the second's leaves only the lock file.
        assert!(!delete(&dir, "one", Duration::ZERO).await.unwrap());
        assert!(dir.join("workspace/new.txt").is_file());
        assert!(delete(&dir, "two", Duration::ZERO).await.unwrap());
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, [LOCK_FILE]);
        assert!(
            !delete(&data.path().join("agents/never"), "x", Duration::ZERO)
                .await
                .unwrap()
        );
    }

    #[tokio::test]
    async fn a_worker_names_the_finished_directories_on_its_volume() {
        let data = tempfile::tempdir().unwrap();
        assert!(directories(data.path()).is_empty(), "no agents/ yet");
        let (_a, _) = take(
            &data.path().join("agents/a"),
            &template(),
            "one",
            Duration::ZERO,
        )
        .await
        .unwrap();
        let (_b, _) = take(
            &data.path().join("agents/b"),
            &template(),
            "two",
            Duration::ZERO,
        )
        .await
        .unwrap();
        // Unfinished: no incarnation yet.
        std::fs::create_dir_all(data.path().join("agents/c/workspace")).unwrap();
        let mut found = directories(data.path());
        found.sort_by(|x, y| x.agent.cmp(&y.agent));
        assert_eq!(
            found,
            [
                AgentDirectory {
                    agent: "a".into(),
                    incarnation: "one".into()
                },
                AgentDirectory {
                    agent: "b".into(),
                    incarnation: "two".into()
                },
            ]
        );
    }

    #[test]
    fn workers_on_one_volume_share_its_id() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("fresh");
        let ids: Vec<String> = std::thread::scope(|scope| {
            // Every racer is spawned before any is joined.
            #[allow(clippy::needless_collect)]
            let racers: Vec<_> = (0..4)
                .map(|_| scope.spawn(|| volume_id(&dir).unwrap()))
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|id| *id == ids[0]), "{ids:?}");
        assert_eq!(ids[0].len(), 32);
        assert_ne!(volume_id(data.path()).unwrap(), ids[0], "another volume");
        std::fs::write(dir.join(VOLUME_FILE), "").unwrap();
        assert!(volume_id(&dir).unwrap_err().contains("delete it"));
    }

    #[tokio::test]
    async fn a_layout_that_never_finished_is_done_again() {
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("agents/c");
        // Files but no incarnation: a worker died while laying it out.
        std::fs::create_dir_all(dir.join("workspace/.git")).unwrap();
        std::fs::write(dir.join("workspace/half.txt"), "half").unwrap();
        let (_held, laid_out) = take(&dir, &template(), "one", Duration::ZERO)
            .await
            .unwrap();
        assert!(laid_out);
        assert!(!dir.join("workspace/half.txt").exists());
        assert_eq!(
            std::fs::read_to_string(dir.join(INCARNATION_FILE)).unwrap(),
            "one"
        );
        for bad in ["", "../x", "a b", &"x".repeat(65)] {
            let error = take(&dir, &template(), bad, Duration::ZERO)
                .await
                .err()
                .unwrap();
            assert!(error.contains("incarnation"), "{bad}: {error}");
        }
    }

    #[tokio::test]
    async fn a_template_path_that_leaves_the_directory_is_refused() {
        let data = tempfile::tempdir().unwrap();
        for bad in ["../escape", "/etc/passwd", "docs/../../x", ""] {
            let template = vec![TemplateFile {
                path: bad.into(),
                content: b"x".to_vec(),
                executable: false,
            }];
            let dir = data.path().join("agents/b");
            let error = take(&dir, &template, "one", Duration::ZERO)
                .await
                .err()
                .unwrap();
            assert!(
                error.contains("not a plain relative path"),
                "{bad}: {error}"
            );
        }
        assert!(!data.path().join("escape").exists());
    }
}
