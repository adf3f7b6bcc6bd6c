//! An agent's directory: `<data-dir>/agents/<name>/{agent.json,docs/,sessions/,workspace/}`.
//!
//! New agents are copied from the template (built into the binary, or a directory the
//! operator names); the workspace becomes a git repository with an initial commit.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};
use tokio::process::Command;

const TEMPLATE_AGENT_JSON: &str = include_str!("../../../template/agent.json");
const TEMPLATE_DOCS_README: &str = include_str!("../../../template/docs/README.md");
/// The identity and memory files, kept by the control plane in every layout.
const TEMPLATE_IDENTITY: [(&str, &str); 4] = [
    ("SOUL.md", include_str!("../../../template/SOUL.md")),
    ("USER.md", include_str!("../../../template/USER.md")),
    (
        "HEARTBEAT.md",
        include_str!("../../../template/HEARTBEAT.md"),
    ),
    (
        "memory/MEMORY.md",
        include_str!("../../../template/memory/MEMORY.md"),
    ),
];

#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    #[error("{action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid JSON: {message}")]
    BadConfig { path: PathBuf, message: String },
    #[error("git {args} failed in {dir}: {message}")]
    Git {
        args: String,
        dir: PathBuf,
        message: String,
        /// It failed for want of room (see [`git_had_no_room`]).
        no_room: bool,
    },
}

impl FilesError {
    /// Whether this failed because the disk (or the quota) is full.
    pub fn is_disk_full(&self) -> bool {
        match self {
            FilesError::Io { source, .. } => crate::store::is_no_space(source),
            FilesError::Git { no_room, .. } => *no_room,
            FilesError::BadConfig { .. } => false,
        }
    }
}

fn io(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FilesError {
    let path = path.to_path_buf();
    move |source| FilesError::Io {
        action,
        path,
        source,
    }
}

/// The paths of one agent's directory.
#[derive(Debug, Clone)]
pub struct AgentDir {
    pub root: PathBuf,
    /// Whether the agent's files (workspace, docs) live here or on a dial-in
    /// worker's volume.
    pub layout: Layout,
}

/// What the control plane's copy of an agent's directory holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Layout {
    /// Everything: local workers work in it.
    #[default]
    Full,
    /// Only the control plane's records (`agent.json`, `sessions/`): dial-in workers
    /// keep the workspace and docs on their own volume.
    Records,
}

impl AgentDir {
    pub fn new(agents_root: &Path, name: &str) -> Self {
        AgentDir {
            root: agents_root.join(name),
            layout: Layout::Full,
        }
    }

    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    pub fn config_path(&self) -> PathBuf {
        self.root.join("agent.json")
    }

    pub fn workspace(&self) -> PathBuf {
        self.root.join("workspace")
    }

    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }

    /// Lays out a fresh agent directory from the template (the built-in one when
    /// `template_dir` is `None`).
    pub async fn create_from_template(
        &self,
        template_dir: Option<&Path>,
    ) -> Result<(), FilesError> {
        self.make_root()?;
        match template_dir {
            Some(dir) if self.layout == Layout::Records => {
                // The records, identity and memory stay here; the rest is the worker's.
                let kept = std::iter::once("agent.json")
                    .chain(TEMPLATE_IDENTITY.iter().map(|(name, _)| *name));
                for name in kept {
                    let from = dir.join(name);
                    if from.is_file() {
                        let to = self.root.join(name);
                        if let Some(parent) = to.parent() {
                            tokio::fs::create_dir_all(parent)
                                .await
                                .map_err(io("cannot create", parent))?;
                        }
                        tokio::fs::copy(&from, &to)
                            .await
                            .map_err(io("cannot copy", &from))?;
                    }
                }
            }
            Some(dir) => copy_dir(dir, &self.root).await?,
            None if self.layout == Layout::Records => {
                write_new(&self.config_path(), TEMPLATE_AGENT_JSON).await?;
                self.write_identity_template().await?;
            }
            None => {
                write_new(&self.config_path(), TEMPLATE_AGENT_JSON).await?;
                self.write_identity_template().await?;
                write_new(&self.root.join("docs/README.md"), TEMPLATE_DOCS_README).await?;
                write_new(&self.workspace().join(".gitkeep"), "").await?;
            }
        }
        Ok(())
    }

    async fn write_identity_template(&self) -> Result<(), FilesError> {
        for (name, text) in TEMPLATE_IDENTITY {
            write_new(&self.root.join(name), text).await?;
        }
        Ok(())
    }

    /// The agent's directory, private to its owner (0700) like the rest of the data
    /// directory; everything inside is out of others' reach through it.
    fn make_root(&self) -> Result<(), FilesError> {
        crate::private::create_dir(&self.root).map_err(io("cannot create", &self.root))
    }

    /// Makes sure the parts every agent needs exist; safe to run over kept files.
    pub async fn ensure_layout(&self) -> Result<(), FilesError> {
        self.make_root()?;
        if self.layout == Layout::Records {
            let sessions = self.root.join("sessions");
            return tokio::fs::create_dir_all(&sessions)
                .await
                .map_err(io("cannot create", &sessions));
        }
        for dir in [
            self.root.join("docs"),
            self.root.join("sessions"),
            self.workspace(),
        ] {
            tokio::fs::create_dir_all(&dir)
                .await
                .map_err(io("cannot create", &dir))?;
        }
        if !self.workspace().join(".git").exists() {
            init_git(&self.workspace()).await?;
        }
        Ok(())
    }

    /// Reads `agent.json` as an open map, so fields Chorus does not know survive edits.
    pub async fn read_config(&self) -> Result<Map<String, Value>, FilesError> {
        let path = self.config_path();
        let text = match tokio::fs::read_to_string(&path).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Map::new()),
            Err(e) => return Err(io("cannot read", &path)(e)),
        };
        match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(_) => Err(FilesError::BadConfig {
                path,
                message: "expected a JSON object".into(),
            }),
            Err(e) => Err(FilesError::BadConfig {
                path,
                message: e.to_string(),
            }),
        }
    }

    /// Writes `agent.json` atomically (write to a temporary file, then rename).
    pub async fn write_config(&self, config: &Map<String, Value>) -> Result<(), FilesError> {
        let path = self.config_path();
        let tmp = self.root.join(".agent.json.tmp");
        let text = serde_json::to_string_pretty(config).map_err(|e| FilesError::BadConfig {
            path: path.clone(),
            message: e.to_string(),
        })?;
        tokio::fs::write(&tmp, text + "\n")
            .await
            .map_err(io("cannot write", &tmp))?;
        tokio::fs::rename(&tmp, &path)
            .await
            .map_err(io("cannot replace", &path))
    }

    pub async fn remove(&self) -> Result<(), FilesError> {
        match tokio::fs::remove_dir_all(&self.root).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io("cannot delete", &self.root)(e)),
        }
    }
}

/// The most a template may hold in all when it is sent to dial-in workers (it goes
/// in one message, with every new agent's assignment).
pub const MAX_TEMPLATE_BYTES: u64 = 8 << 20;

/// The template as files, by relative path, for dial-in workers (they lay out a new
/// agent's directory on their own volume). Symlinks and other special files are
/// refused, as when copying.
pub fn template_files(
    template_dir: Option<&Path>,
) -> Result<Vec<chorus_proto::domain::TemplateFile>, FilesError> {
    use chorus_proto::domain::TemplateFile;
    use std::os::unix::fs::PermissionsExt;
    // agent.json is the control plane's record of the agent's settings; workers get
    // the settings over the link.
    let Some(root) = template_dir else {
        return Ok([
            ("docs/README.md", TEMPLATE_DOCS_README),
            ("workspace/.gitkeep", ""),
        ]
        .into_iter()
        .map(|(path, text)| TemplateFile {
            path: path.into(),
            content: text.as_bytes().to_vec(),
            executable: false,
        })
        .collect());
    };
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(io("cannot read template directory", &dir))?;
        for entry in entries {
            let entry = entry.map_err(io("cannot read template directory", &dir))?;
            let path = entry.path();
            let kind = entry.file_type().map_err(io("cannot inspect", &path))?;
            if kind.is_dir() {
                pending.push(path);
                continue;
            }
            let relative = path
                .strip_prefix(root)
                .ok()
                .and_then(|p| p.to_str())
                .map(str::to_string);
            let (true, Some(relative)) = (kind.is_file(), relative) else {
                return Err(FilesError::Io {
                    action: "refusing to send",
                    path,
                    source: std::io::Error::other(
                        "templates may hold only files and directories with UTF-8 names",
                    ),
                });
            };
            let meta = entry.metadata().map_err(io("cannot inspect", &path))?;
            total += meta.len();
            if total > MAX_TEMPLATE_BYTES {
                return Err(FilesError::Io {
                    action: "refusing to send",
                    path: root.to_path_buf(),
                    source: std::io::Error::other(format!(
                        "the template holds more than {} MiB; dial-in workers are sent it whole",
                        MAX_TEMPLATE_BYTES >> 20
                    )),
                });
            }
            files.push(TemplateFile {
                path: relative,
                content: std::fs::read(&path).map_err(io("cannot read", &path))?,
                executable: meta.permissions().mode() & 0o111 != 0,
            });
        }
    }
    files.retain(|f| f.path != "agent.json");
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(files)
}

async fn write_new(path: &Path, contents: &str) -> Result<(), FilesError> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent)
            .await
            .map_err(io("cannot create", parent))?;
    }
    tokio::fs::write(path, contents)
        .await
        .map_err(io("cannot write", path))
}

/// Copies a template directory. Symlinks are refused rather than followed, so a
/// template cannot smuggle a link to the outside into a workspace.
async fn copy_dir(from: &Path, to: &Path) -> Result<(), FilesError> {
    let mut pending = vec![(from.to_path_buf(), to.to_path_buf())];
    while let Some((src, dst)) = pending.pop() {
        tokio::fs::create_dir_all(&dst)
            .await
            .map_err(io("cannot create", &dst))?;
        let mut entries = tokio::fs::read_dir(&src)
            .await
            .map_err(io("cannot read template directory", &src))?;
        while let Some(entry) = entries
            .next_entry()
            .await
            .map_err(io("cannot read template directory", &src))?
        {
            let kind = entry
                .file_type()
                .await
                .map_err(io("cannot inspect", &entry.path()))?;
            let target = dst.join(entry.file_name());
            if kind.is_dir() {
                pending.push((entry.path(), target));
            } else if kind.is_file() {
                tokio::fs::copy(entry.path(), &target)
                    .await
                    .map_err(io("cannot copy", &entry.path()))?;
            } else {
                return Err(FilesError::Io {
                    action: "refusing to copy non-regular file",
                    path: entry.path(),
                    source: std::io::Error::other("templates may hold only files and directories"),
                });
            }
        }
    }
    Ok(())
}

/// Below this much free space, a git failure is taken for a full disk.
const LOW_SPACE_BYTES: u64 = 1 << 20;

/// Whether git's words say it ran out of room. Often they do (`No space left on
/// device`), sometimes in words of its own (`Out of diskspace`), and sometimes not
/// at all (`failed to write new configuration file`, `couldn't write
/// '….lock'`, `unable to write new index file`). Pure.
pub fn git_says_no_room(message: &str) -> bool {
    [
        "No space left on device",
        "Disk quota exceeded",
        "Out of diskspace",
    ]
    .iter()
    .any(|words| message.contains(words))
}

/// Whether a git command that failed in `dir` failed for want of room: by its
/// words, or else by the filesystem, nearly full (less than 1 MiB free for us) after
/// the failure.
fn git_had_no_room(message: &str, dir: &Path) -> bool {
    if git_says_no_room(message) {
        return true;
    }
    let Ok(stat) = nix::sys::statvfs::statvfs(dir) else {
        return false;
    };
    // Root may use the blocks reserved for it; others only the available ones.
    let blocks = if rustix::process::geteuid().is_root() {
        stat.blocks_free()
    } else {
        stat.blocks_available()
    };
    blocks.saturating_mul(stat.fragment_size()) < LOW_SPACE_BYTES
}

async fn git(dir: &Path, args: &[&str]) -> Result<(), FilesError> {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_TERMINAL_PROMPT", "0")
        .output()
        .await
        .map_err(|e| FilesError::Git {
            args: args.join(" "),
            dir: dir.to_path_buf(),
            message: if e.kind() == std::io::ErrorKind::NotFound {
                "git is not installed or not on PATH; install git".into()
            } else {
                e.to_string()
            },
            no_room: crate::store::is_no_space(&e),
        })?;
    if output.status.success() {
        return Ok(());
    }
    let message = String::from_utf8_lossy(&output.stderr).trim().to_string();
    Err(FilesError::Git {
        args: args.join(" "),
        dir: dir.to_path_buf(),
        no_room: git_had_no_room(&message, dir),
        message,
    })
}

/// `git init` plus an initial commit of whatever the template put there. Without
/// git's own template (sample hooks, a description): a third of the files, and
/// creating an agent is mostly creating files.
async fn init_git(workspace: &Path) -> Result<(), FilesError> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn git_is_understood_when_it_says_it_ran_out_of_room() {
        for said in [
            "fatal: unable to write loose object file: No space left on device",
            "fatal: sha1 file '/d/ws/.git/index.lock' write error. Out of diskspace",
            "error: unable to create temporary file: Disk quota exceeded",
        ] {
            assert!(git_says_no_room(said), "{said}");
        }
        assert!(!git_says_no_room("fatal: not a git repository"));
        // Where it does not say so, the filesystem is asked: this one has room.
        let dir = tempfile::tempdir().unwrap();
        assert!(!git_had_no_room(
            "fatal: cannot update ref 'refs/heads/main': couldn't write '…/main.lock'",
            dir.path()
        ));
    }

    #[tokio::test]
    async fn the_built_in_template_gives_a_committed_workspace() {
        let data = tempfile::tempdir().unwrap();
        let dir = AgentDir::new(data.path(), "a");
        dir.create_from_template(None).await.unwrap();
        dir.ensure_layout().await.unwrap();
        assert!(dir.root.join("docs/README.md").is_file());
        assert!(dir.root.join("sessions").is_dir());
        assert!(dir.workspace().join(".gitkeep").is_file());
        let log = std::process::Command::new("git")
            .args(["log", "--oneline"])
            .current_dir(dir.workspace())
            .output()
            .unwrap();
        assert!(String::from_utf8_lossy(&log.stdout).contains("Initial commit"));
        let config = dir.read_config().await.unwrap();
        assert_eq!(config["permissions"], "standard");
    }

    #[tokio::test]
    async fn a_template_with_a_symlink_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let template = tmp.path().join("template");
        std::fs::create_dir_all(template.join("workspace")).unwrap();
        std::os::unix::fs::symlink("/etc", template.join("workspace/etc")).unwrap();
        let dir = AgentDir::new(&tmp.path().join("agents"), "a");
        assert!(dir.create_from_template(Some(&template)).await.is_err());
    }

    #[tokio::test]
    async fn config_round_trips_and_keeps_unknown_fields() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = AgentDir::new(tmp.path(), "a");
        dir.create_from_template(None).await.unwrap();
        let mut config = dir.read_config().await.unwrap();
        config.insert("custom".into(), Value::from(7));
        dir.write_config(&config).await.unwrap();
        assert_eq!(dir.read_config().await.unwrap()["custom"], 7);
    }
}
