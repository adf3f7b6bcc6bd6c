//! Where an agent's identity and memory files are, and reading and writing them.
//!
//! They live in the control plane's copy of the agent's directory
//! (`<data_dir>/agents/<name>/`): `SOUL.md`, `USER.md`, `HEARTBEAT.md` and
//! `memory/` (`MEMORY.md`, `YYYY-MM-DD.md` in UTC). A missing file reads as empty
//! and is created at its first write. Writes go to a temporary file renamed over the
//! old one, so a reader never sees half a file.
//!
//! `memory_get` and `GET …/memory/{path}` read through [`MemoryDir::resolve`], the
//! jail: a plain file name ending in `.md` (the `memory/` prefix may be given), no
//! `..`, no absolute path, no hidden file, and no symlink (a link could lead out).

use std::path::{Path, PathBuf};

use chorus_proto::tools::IdentityFile;

pub const MEMORY_FILE: &str = "MEMORY.md";

/// One agent's identity and memory files.
#[derive(Debug, Clone)]
pub struct MemoryDir {
    root: PathBuf,
}

impl MemoryDir {
    pub fn new(agents_root: &Path, agent: &str) -> Self {
        MemoryDir {
            root: agents_root.join(agent),
        }
    }

    pub fn identity(&self, file: IdentityFile) -> PathBuf {
        self.root.join(file.file_name())
    }

    pub fn memory_dir(&self) -> PathBuf {
        self.root.join("memory")
    }

    pub fn long_term(&self) -> PathBuf {
        self.memory_dir().join(MEMORY_FILE)
    }

    /// A day's log, by its UTC date.
    pub fn daily(&self, day: chrono::NaiveDate) -> PathBuf {
        self.memory_dir().join(daily_name(day))
    }

    /// The agent's directory exists (an agent that is gone has none).
    pub fn exists(&self) -> bool {
        self.root.is_dir()
    }

    /// A memory file named by a person or the model, inside `memory/` or refused
    /// with what is wrong.
    pub fn resolve(&self, path: &str) -> Result<PathBuf, String> {
        let name = path.strip_prefix("memory/").unwrap_or(path);
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && !name.contains(['/', '\\', '\0'])
            && name.ends_with(".md");
        if !plain {
            return Err(format!(
                "'{path}' is not a memory file: name one file in memory/, such as MEMORY.md \
                 or 2026-11-26.md (no directories, no ..)"
            ));
        }
        let full = self.memory_dir().join(name);
        match std::fs::symlink_metadata(&full) {
            Ok(meta) if meta.file_type().is_symlink() => Err(format!(
                "'{path}' is a symbolic link; memory files are read only as plain files"
            )),
            Ok(meta) if !meta.is_file() => Err(format!("'{path}' is not a file")),
            _ => Ok(full),
        }
    }

    /// The memory files, by name, with their sizes (MEMORY.md first, then the
    /// daily logs newest first).
    pub fn list(&self) -> Vec<(String, u64)> {
        let Ok(read) = std::fs::read_dir(self.memory_dir()) else {
            return Vec::new();
        };
        let mut files: Vec<(String, u64)> = read
            .flatten()
            .filter_map(|entry| {
                let meta = entry.metadata().ok()?; // does not follow a link
                let name = entry.file_name().into_string().ok()?;
                (meta.is_file() && name.ends_with(".md") && !name.starts_with('.'))
                    .then_some((name, meta.len()))
            })
            .collect();
        files.sort_by(|a, b| match (a.0 == MEMORY_FILE, b.0 == MEMORY_FILE) {
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            _ => b.0.cmp(&a.0),
        });
        files
    }

    /// What says whether any identity or memory file changed: each file's size,
    /// modification time and inode (a rename over it changes the inode).
    pub fn stamp(&self) -> Vec<(PathBuf, u64, Option<std::time::SystemTime>, u64)> {
        use std::os::unix::fs::MetadataExt;
        let mut paths: Vec<PathBuf> = IdentityFile::ALL
            .iter()
            .map(|f| self.identity(*f))
            .collect();
        if let Ok(read) = std::fs::read_dir(self.memory_dir()) {
            paths.extend(read.flatten().map(|e| e.path()));
        }
        paths.sort();
        paths
            .into_iter()
            .filter_map(|path| {
                let meta = std::fs::metadata(&path).ok()?;
                Some((path, meta.len(), meta.modified().ok(), meta.ino()))
            })
            .collect()
    }
}

/// A daily log's file name.
pub fn daily_name(day: chrono::NaiveDate) -> String {
    format!("{}.md", day.format("%Y-%m-%d"))
}

/// A file's text; a missing file reads as empty.
pub async fn read(path: &Path) -> std::io::Result<String> {
    match tokio::fs::read_to_string(path).await {
        Ok(text) => Ok(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(e),
    }
}

/// Replaces a file's text whole (creating its directory), by a rename.
pub async fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        tokio::fs::create_dir_all(parent).await?;
    }
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    tokio::fs::write(&tmp, text).await?;
    tokio::fs::rename(&tmp, path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_get_is_jailed_to_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = MemoryDir::new(tmp.path(), "a");
        std::fs::create_dir_all(dir.memory_dir()).unwrap();
        std::fs::write(dir.long_term(), "- x\n").unwrap();
        std::fs::write(tmp.path().join("secret.md"), "secret").unwrap();
        assert_eq!(dir.resolve("MEMORY.md").unwrap(), dir.long_term());
        assert_eq!(dir.resolve("memory/MEMORY.md").unwrap(), dir.long_term());
        assert!(dir.resolve("2026-11-26.md").is_ok()); // missing: reads as empty
        for bad in [
            "../SOUL.md",
            "../../secret.md",
            "memory/../SOUL.md",
            "/etc/passwd",
            "/work/x.md",
            "sub/x.md",
            ".hidden.md",
            "MEMORY.txt",
            "",
        ] {
            assert!(dir.resolve(bad).is_err(), "{bad} must be refused");
        }
        // A link inside memory/ that leads out is refused, though its name is plain.
        std::os::unix::fs::symlink(
            tmp.path().join("secret.md"),
            dir.memory_dir().join("out.md"),
        )
        .unwrap();
        let err = dir.resolve("out.md").unwrap_err();
        assert!(err.contains("symbolic link"), "{err}");
        // The positive control: the same file reached without the link is readable
        // by path, so the refusal above is the jail's doing.
        assert_eq!(
            std::fs::read_to_string(tmp.path().join("secret.md")).unwrap(),
            "secret"
        );
        assert!(!dir.list().iter().any(|(name, _)| name == "out.md"));
    }
}
