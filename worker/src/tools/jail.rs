//! The workspace jail: every file a tool touches is opened relative to a handle on
//! the workspace directory, so no path, symlink or race can reach outside it.
//!
//! - Paths are checked lexically first: not empty, no NUL, not absolute, no `..`.
//! - Reads resolve with `openat2(RESOLVE_BENEATH)`: symlinks that stay inside work,
//!   any that lead out fail in the kernel, at the moment of use (no check-then-use gap).
//!   Where `openat2` is unavailable (old kernels, strict seccomp) reads fall back to
//!   the write rule below.
//! - Writes walk the path one directory at a time with `O_NOFOLLOW`, so they never go
//!   through a symlink at all, and replace the file by an atomic rename: a full disk
//!   leaves the old file whole.

use std::fs::File;
use std::io::Write;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2, renameat};
use nix::sys::stat::{Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};

/// Longest path accepted, in bytes.
pub const MAX_PATH_BYTES: usize = 4096;
/// Longest single file or directory name, in bytes.
pub const MAX_NAME_BYTES: usize = 255;

/// Why a path was refused or could not be used, phrased for the model.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JailError {
    #[error("the path is empty; give a path relative to the workspace root")]
    Empty,
    #[error("{0:?} contains a NUL byte")]
    Nul(String),
    #[error("'{0}' is an absolute path; give a path relative to the workspace root")]
    Absolute(String),
    #[error("'{0}' leaves the workspace ('..' is not allowed)")]
    Parent(String),
    #[error(
        "'{0}' is too long; paths are limited to {MAX_PATH_BYTES} bytes and names to {MAX_NAME_BYTES}"
    )]
    TooLong(String),
    #[error("'{0}' names the workspace root, not a file")]
    Root(String),
    #[error("'{0}' resolves outside the workspace through a symlink")]
    Escapes(String),
    #[error("'{0}' goes through a symlink; files are written only through real directories")]
    Symlink(String),
    #[error("'{0}' does not exist")]
    NotFound(String),
    #[error("'{0}' is a directory")]
    IsDirectory(String),
    #[error("'{0}' is not a regular file")]
    NotRegular(String),
    #[error("'{0}': part of the path is not a directory")]
    NotADirectory(String),
    #[error("'{path}': {message}")]
    Io { path: String, message: String },
}

/// Checks `path` lexically and returns its parts (without `.` parts).
pub fn parts(path: &str) -> Result<Vec<&str>, JailError> {
    if path.trim().is_empty() {
        return Err(JailError::Empty);
    }
    if path.contains('\0') {
        return Err(JailError::Nul(path.to_string()));
    }
    if path.starts_with('/') {
        return Err(JailError::Absolute(path.to_string()));
    }
    if path.len() > MAX_PATH_BYTES {
        return Err(JailError::TooLong(shorten(path)));
    }
    let mut parts = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => continue,
            ".." => return Err(JailError::Parent(path.to_string())),
            name if name.len() > MAX_NAME_BYTES => return Err(JailError::TooLong(shorten(path))),
            name => parts.push(name),
        }
    }
    Ok(parts)
}

fn shorten(path: &str) -> String {
    let mut end = path.len().min(80);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// A handle on one workspace directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    root: PathBuf,
}

impl Workspace {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Workspace { root: root.into() }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn open_root(&self, path: &str) -> Result<OwnedFd, JailError> {
        // The workspace itself must not have been swapped for a symlink.
        nix::fcntl::open(
            &self.root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| JailError::Io {
            path: path.to_string(),
            message: format!(
                "the workspace {} cannot be opened: {}",
                self.root.display(),
                e.desc()
            ),
        })
    }

    /// Opens an existing regular file for reading.
    pub fn open_read(&self, path: &str) -> Result<File, JailError> {
        let parts = parts(path)?;
        if parts.is_empty() {
            return Err(JailError::IsDirectory(path.to_string()));
        }
        let root = self.open_root(path)?;
        let relative = parts.join("/");
        // O_NONBLOCK: opening a FIFO someone planted must not hang the tool.
        let flags = OFlag::O_RDONLY | OFlag::O_CLOEXEC | OFlag::O_NOCTTY | OFlag::O_NONBLOCK;
        let how = OpenHow::new()
            .flags(flags)
            .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
        let fd = match openat2(&root, relative.as_str(), how) {
            Err(Errno::ENOSYS) | Err(Errno::EPERM) => {
                let (dir, name) = walk_to_parent(&root, &parts, path, false)?;
                openat(&dir, name, flags | OFlag::O_NOFOLLOW, Mode::empty())
                    .map_err(|e| map_errno(e, path, true))?
            }
            other => other.map_err(|e| map_errno(e, path, false))?,
        };
        let stat = fstat(&fd).map_err(|e| map_errno(e, path, false))?;
        match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
            SFlag::S_IFREG => {}
            SFlag::S_IFDIR => return Err(JailError::IsDirectory(path.to_string())),
            _ => return Err(JailError::NotRegular(path.to_string())),
        }
        Ok(File::from(fd))
    }

    /// Writes `contents` to `path`, creating parent directories, replacing the file
    /// atomically. Returns whether the file existed before.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<bool, JailError> {
        let parts = parts(path)?;
        if parts.is_empty() {
            return Err(JailError::Root(path.to_string()));
        }
        let root = self.open_root(path)?;
        let (dir, name) = walk_to_parent(&root, &parts, path, true)?;
        let existing = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(map_errno(e, path, true)),
        };
        let mode = match existing {
            None => Mode::from_bits_truncate(0o644),
            Some(stat) => match SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits()) {
                SFlag::S_IFREG => Mode::from_bits_truncate(stat.st_mode & 0o7777),
                SFlag::S_IFLNK => return Err(JailError::Symlink(path.to_string())),
                SFlag::S_IFDIR => return Err(JailError::IsDirectory(path.to_string())),
                _ => return Err(JailError::NotRegular(path.to_string())),
            },
        };
        let tmp_name = format!(".{name}.chorus-{}.tmp", std::process::id());
        let tmp_name = if tmp_name.len() > MAX_NAME_BYTES {
            format!(".chorus-{}.tmp", std::process::id())
        } else {
            tmp_name
        };
        let tmp = openat(
            &dir,
            tmp_name.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            mode,
        )
        .or_else(|e| {
            if e == Errno::EEXIST {
                // A leftover from a crashed write; it is ours to replace.
                let _ = unlinkat(&dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
                openat(
                    &dir,
                    tmp_name.as_str(),
                    OFlag::O_WRONLY
                        | OFlag::O_CREAT
                        | OFlag::O_EXCL
                        | OFlag::O_NOFOLLOW
                        | OFlag::O_CLOEXEC,
                    mode,
                )
            } else {
                Err(e)
            }
        })
        .map_err(|e| map_errno(e, path, true))?;
        let _ = fchmod(&tmp, mode); // the umask may have narrowed it
        let mut file = File::from(tmp);
        let written = file.write_all(contents).and_then(|_| file.sync_data());
        drop(file);
        if let Err(e) = written {
            let _ = unlinkat(&dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(JailError::Io {
                path: path.to_string(),
                message: format!("{e}; the file was left as it was"),
            });
        }
        if let Err(e) = renameat(&dir, tmp_name.as_str(), &dir, name) {
            let _ = unlinkat(&dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
            return Err(map_errno(e, path, true));
        }
        Ok(existing.is_some())
    }
}

/// Opens each directory of `parts[..last]` below `root` without following symlinks,
/// creating missing ones when `create`. Returns the parent and the final name.
fn walk_to_parent<'p>(
    root: &OwnedFd,
    parts: &[&'p str],
    path: &str,
    create: bool,
) -> Result<(OwnedFd, &'p str), JailError> {
    let (name, dirs) = parts
        .split_last()
        .ok_or_else(|| JailError::Root(path.to_string()))?;
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let mut current = root
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| JailError::Io {
            path: path.to_string(),
            message: e.to_string(),
        })?;
    for dir in dirs {
        let next = match openat(&current, *dir, flags, Mode::empty()) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(&current, *dir, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(map_errno(e, path, true)),
                }
                openat(&current, *dir, flags, Mode::empty())
            }
            other => other,
        }
        .map_err(|e| {
            // O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR or ELOOP; say which it was.
            let is_link = fstatat(&current, *dir, AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| st.st_mode & SFlag::S_IFMT.bits() == SFlag::S_IFLNK.bits());
            if is_link {
                JailError::Symlink(path.to_string())
            } else {
                map_errno(e, path, true)
            }
        })?;
        current = next;
    }
    Ok((current, name))
}

/// Maps a system error to what the model should hear. With `no_follow`, ELOOP and
/// ENOTDIR on a symlinked part mean "went through a symlink".
fn map_errno(errno: Errno, path: &str, no_follow: bool) -> JailError {
    let path = path.to_string();
    match errno {
        Errno::EXDEV => JailError::Escapes(path),
        Errno::ELOOP if no_follow => JailError::Symlink(path),
        Errno::ELOOP => JailError::Escapes(path),
        Errno::ENOENT => JailError::NotFound(path),
        Errno::EISDIR => JailError::IsDirectory(path),
        Errno::ENOTDIR => JailError::NotADirectory(path),
        Errno::ENAMETOOLONG => JailError::TooLong(shorten(&path)),
        Errno::ENXIO => JailError::NotRegular(path),
        other => JailError::Io {
            path,
            message: other.desc().to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lexical_rules() {
        assert_eq!(parts("a/./b//c").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(parts("."), Ok(vec![]));
        assert_eq!(parts(""), Err(JailError::Empty));
        assert!(matches!(parts("/etc/passwd"), Err(JailError::Absolute(_))));
        assert!(matches!(parts("a/../../b"), Err(JailError::Parent(_))));
        assert!(matches!(parts("a/.."), Err(JailError::Parent(_))));
        assert!(matches!(parts("a\0b"), Err(JailError::Nul(_))));
        assert!(matches!(
            parts(&"a".repeat(256)),
            Err(JailError::TooLong(_))
        ));
        assert!(matches!(
            parts(&"a/".repeat(3000)),
            Err(JailError::TooLong(_))
        ));
    }

    #[test]
    fn writes_and_reads_stay_inside() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        assert!(!ws.write("src/deep/a.txt", b"hi").unwrap());
        assert!(ws.write("src/deep/a.txt", b"again").unwrap());
        assert_eq!(
            std::fs::read(dir.path().join("src/deep/a.txt")).unwrap(),
            b"again"
        );
        let mut text = String::new();
        std::io::Read::read_to_string(&mut ws.open_read("src/deep/a.txt").unwrap(), &mut text)
            .unwrap();
        assert_eq!(text, "again");
        assert!(matches!(
            ws.open_read("src"),
            Err(JailError::IsDirectory(_))
        ));
        assert!(matches!(ws.open_read("nope"), Err(JailError::NotFound(_))));
        assert!(matches!(ws.write(".", b"x"), Err(JailError::Root(_))));
    }

    #[test]
    fn symlinks_out_are_refused_and_never_written_through() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), dir.path().join("s")).unwrap();

        assert!(matches!(
            ws.open_read("out/secret"),
            Err(JailError::Escapes(_))
        ));
        assert!(matches!(ws.open_read("s"), Err(JailError::Escapes(_))));
        assert!(matches!(
            ws.write("out/new", b"x"),
            Err(JailError::Symlink(_))
        ));
        assert!(matches!(ws.write("s", b"x"), Err(JailError::Symlink(_))));
        assert_eq!(
            std::fs::read_to_string(outside.path().join("secret")).unwrap(),
            "s"
        );
        assert!(!outside.path().join("new").exists());
    }

    #[test]
    fn a_symlink_that_stays_inside_can_be_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        ws.write("real.txt", b"inside").unwrap();
        std::os::unix::fs::symlink("real.txt", dir.path().join("alias")).unwrap();
        assert!(ws.open_read("alias").is_ok());
    }

    #[test]
    fn a_fifo_does_not_hang_a_read() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        nix::unistd::mkfifo(&dir.path().join("pipe"), Mode::from_bits_truncate(0o644)).unwrap();
        assert!(matches!(
            ws.open_read("pipe"),
            Err(JailError::NotRegular(_))
        ));
        assert!(matches!(
            ws.write("pipe", b"x"),
            Err(JailError::NotRegular(_))
        ));
    }
}
