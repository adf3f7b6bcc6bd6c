//! The workspace jail: every file a tool touches is opened relative to a handle on
//! the workspace directory, so no path, symlink or race can reach outside it.
//!
//! - Paths are checked lexically first: not empty, no NUL, not absolute, no `..`.
//! - Reads resolve with `openat2(RESOLVE_BENEATH)`: symlinks that stay inside work,
//!   any that lead out fail in the kernel, at the moment of use (no check-then-use gap).
//!   Where `openat2` is unavailable (old kernels, strict seccomp) reads fall back to
//!   the write rule below.
//! - Writes, edits and deletes walk the path one directory at a time with
//!   `O_NOFOLLOW`, so they never go through a symlink at all; a final symlink is never
//!   followed (a delete removes the link itself). Files are replaced by an atomic
//!   rename: a full disk leaves the old file whole.
//!
//! Directory walking for listings and searches lives in `walk`, on the same handles.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, OpenHow, ResolveFlag, openat, openat2, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fchmod, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, linkat, unlinkat};

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
    #[error("'{0}' already exists")]
    Exists(String),
    #[error("'{0}' is a directory")]
    IsDirectory(String),
    #[error("'{0}' is not a regular file")]
    NotRegular(String),
    #[error("'{0}': part of the path is not a directory")]
    NotADirectory(String),
    #[error("'{path}' is larger than {limit} bytes")]
    TooLarge { path: String, limit: usize },
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

/// The normalised workspace-relative form of `path` (`./a//b/` → `a/b`), or `None`
/// when the path is refused lexically. Used as the key of file locks.
pub fn normalise(path: &str) -> Option<String> {
    parts(path).ok().map(|parts| parts.join("/"))
}

fn shorten(path: &str) -> String {
    let mut end = path.len().min(80);
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// How a write treats a file that is, or is not, already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteMode {
    /// Create the file or replace it (`create_file`).
    CreateOrReplace,
    /// Only create: refuse if anything exists at the path (`file.create`).
    CreateNew,
    /// Only replace: refuse if there is no file yet, and create no directories
    /// (`file.write`).
    ReplaceExisting,
}

/// What `Workspace::delete` removed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deleted {
    File,
    /// A symlink: the link itself, never what it points to.
    Symlink,
    /// A FIFO, socket or device node.
    Special,
}

/// What a read-side open found.
#[derive(Debug)]
pub enum Opened {
    Dir(OwnedFd),
    File(File),
}

/// A regular file read for an edit, still tied to the directory it was read from,
/// so the edited content replaces exactly that entry.
#[derive(Debug)]
pub struct ExistingFile {
    dir: OwnedFd,
    name: String,
    path: String,
    perm: Mode,
    pub contents: Vec<u8>,
}

impl ExistingFile {
    /// Atomically replaces the file's content.
    pub fn replace(self, contents: &[u8]) -> Result<(), JailError> {
        put(
            &self.dir, &self.name, contents, self.perm, &self.path, false,
        )
    }
}

/// A handle on one workspace directory.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// The agent's workspace.
    base: PathBuf,
    /// A run's working directory below it (`tasks/7` as parts), or none.
    sub: Vec<String>,
    /// `base` joined with `sub`: where the tools work.
    root: PathBuf,
}

impl Workspace {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        let base = root.into();
        Workspace {
            root: base.clone(),
            base,
            sub: Vec::new(),
        }
    }

    /// The jail narrowed to the directory `dir` below this one (a task's run works
    /// in `tasks/7`): relative, no `..`, never through a symlink, created if missing
    /// (each use opens it again from the workspace the same way, so a directory
    /// swapped for a symlink later is refused then, not followed).
    pub fn within(&self, dir: &str) -> Result<Workspace, JailError> {
        let parts = parts(dir)?;
        if parts.is_empty() {
            return Err(JailError::Root(dir.to_string()));
        }
        let mut sub = self.sub.clone();
        sub.extend(parts.iter().map(ToString::to_string));
        let narrowed = Workspace {
            root: self.base.join(sub.join("/")),
            base: self.base.clone(),
            sub,
        };
        narrowed.open_root(dir)?;
        Ok(narrowed)
    }

    /// Where the tools work: the workspace, or the run's directory below it.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The agent's whole workspace (a command's home and git's ceiling), whatever
    /// directory below it the tools work in.
    pub fn base(&self) -> &Path {
        &self.base
    }

    pub(crate) fn open_root(&self, path: &str) -> Result<OwnedFd, JailError> {
        // The workspace itself must not have been swapped for a symlink.
        let base = nix::fcntl::open(
            &self.base,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| JailError::Io {
            path: path.to_string(),
            message: format!(
                "the workspace {} cannot be opened: {}",
                self.base.display(),
                e.desc()
            ),
        })?;
        if self.sub.is_empty() {
            return Ok(base);
        }
        // The run's directory, one real directory at a time (made again if deleted).
        let sub: Vec<&str> = self.sub.iter().map(String::as_str).collect();
        walk_dirs(base, &sub, &self.sub.join("/"), true).map_err(|e| match e {
            JailError::Symlink(dir) => JailError::Io {
                path: path.to_string(),
                message: format!(
                    "the working directory {dir} goes through a symlink; it must be a real directory"
                ),
            },
            other => other,
        })
    }

    /// Opens an existing regular file for reading.
    pub fn open_read(&self, path: &str) -> Result<File, JailError> {
        if parts(path)?.is_empty() {
            return Err(JailError::IsDirectory(path.to_string()));
        }
        match self.open_any(path)? {
            Opened::File(file) => Ok(file),
            Opened::Dir(_) => Err(JailError::IsDirectory(path.to_string())),
        }
    }

    /// Opens an existing regular file or directory for reading (listings and
    /// searches). An empty path or `.` is the workspace root. Symlinks that stay
    /// inside the workspace are followed; anything else is refused.
    pub fn open_any(&self, path: &str) -> Result<Opened, JailError> {
        let parts = if path.is_empty() {
            Vec::new()
        } else {
            parts(path)?
        };
        let root = self.open_root(path)?;
        if parts.is_empty() {
            return Ok(Opened::Dir(root));
        }
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
        match kind(&stat) {
            SFlag::S_IFREG => Ok(Opened::File(File::from(fd))),
            SFlag::S_IFDIR => Ok(Opened::Dir(fd)),
            _ => Err(JailError::NotRegular(path.to_string())),
        }
    }

    /// Writes `contents` to `path`, creating parent directories, replacing the file
    /// atomically. Returns whether the file existed before.
    pub fn write(&self, path: &str, contents: &[u8]) -> Result<bool, JailError> {
        self.write_as(path, contents, WriteMode::CreateOrReplace)
    }

    /// Writes `contents` to `path` as `mode` allows. Returns whether the file existed.
    pub fn write_as(
        &self,
        path: &str,
        contents: &[u8],
        mode: WriteMode,
    ) -> Result<bool, JailError> {
        let parts = parts(path)?;
        if parts.is_empty() {
            return Err(JailError::Root(path.to_string()));
        }
        let root = self.open_root(path)?;
        let create_dirs = mode != WriteMode::ReplaceExisting;
        let (dir, name) = walk_to_parent(&root, &parts, path, create_dirs)?;
        let existing = match fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => Some(stat),
            Err(Errno::ENOENT) => None,
            Err(e) => return Err(map_errno(e, path, true)),
        };
        let perm = match existing {
            None if mode == WriteMode::ReplaceExisting => {
                return Err(JailError::NotFound(path.to_string()));
            }
            None => Mode::from_bits_truncate(0o644),
            Some(stat) => match kind(&stat) {
                SFlag::S_IFLNK => return Err(JailError::Symlink(path.to_string())),
                SFlag::S_IFDIR => return Err(JailError::IsDirectory(path.to_string())),
                _ if mode == WriteMode::CreateNew => {
                    return Err(JailError::Exists(path.to_string()));
                }
                SFlag::S_IFREG => Mode::from_bits_truncate(stat.st_mode & 0o7777),
                _ => return Err(JailError::NotRegular(path.to_string())),
            },
        };
        put(
            &dir,
            name,
            contents,
            perm,
            path,
            mode == WriteMode::CreateNew,
        )?;
        Ok(existing.is_some())
    }

    /// Reads an existing regular file for an edit (at most `max_bytes`), never
    /// through a symlink, keeping hold of its directory for the replacement.
    pub fn open_existing(&self, path: &str, max_bytes: usize) -> Result<ExistingFile, JailError> {
        let parts = parts(path)?;
        if parts.is_empty() {
            return Err(JailError::Root(path.to_string()));
        }
        let root = self.open_root(path)?;
        let (dir, name) = walk_to_parent(&root, &parts, path, false)?;
        let flags = OFlag::O_RDONLY
            | OFlag::O_NOFOLLOW
            | OFlag::O_NONBLOCK
            | OFlag::O_NOCTTY
            | OFlag::O_CLOEXEC;
        let fd = openat(&dir, name, flags, Mode::empty()).map_err(|e| map_errno(e, path, true))?;
        let stat = fstat(&fd).map_err(|e| map_errno(e, path, true))?;
        match kind(&stat) {
            SFlag::S_IFREG => {}
            SFlag::S_IFDIR => return Err(JailError::IsDirectory(path.to_string())),
            _ => return Err(JailError::NotRegular(path.to_string())),
        }
        let mut contents = Vec::new();
        File::from(fd)
            .take(max_bytes as u64 + 1)
            .read_to_end(&mut contents)
            .map_err(|e| JailError::Io {
                path: path.to_string(),
                message: e.to_string(),
            })?;
        if contents.len() > max_bytes {
            return Err(JailError::TooLarge {
                path: path.to_string(),
                limit: max_bytes,
            });
        }
        Ok(ExistingFile {
            dir,
            name: name.to_string(),
            path: path.to_string(),
            perm: Mode::from_bits_truncate(stat.st_mode & 0o7777),
            contents,
        })
    }

    /// Deletes the file (or symlink, FIFO…) at `path`; never a directory, never
    /// what a symlink points to.
    pub fn delete(&self, path: &str) -> Result<Deleted, JailError> {
        let parts = parts(path)?;
        if parts.is_empty() {
            return Err(JailError::Root(path.to_string()));
        }
        let root = self.open_root(path)?;
        let (dir, name) = walk_to_parent(&root, &parts, path, false)?;
        let stat = fstatat(&dir, name, AtFlags::AT_SYMLINK_NOFOLLOW)
            .map_err(|e| map_errno(e, path, true))?;
        let deleted = match kind(&stat) {
            SFlag::S_IFDIR => return Err(JailError::IsDirectory(path.to_string())),
            SFlag::S_IFREG => Deleted::File,
            SFlag::S_IFLNK => Deleted::Symlink,
            _ => Deleted::Special,
        };
        // NoRemoveDir: if a directory was swapped in since the stat, this fails
        // (EISDIR) rather than removing it.
        unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir).map_err(|e| map_errno(e, path, true))?;
        Ok(deleted)
    }
}

pub(crate) fn kind(stat: &FileStat) -> SFlag {
    SFlag::from_bits_truncate(stat.st_mode & SFlag::S_IFMT.bits())
}

/// Distinguishes temporary files of concurrent writes in this process.
static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes `contents` to a temporary file in `dir` and renames it onto `name`
/// (or, with `no_replace`, links it there only if nothing exists at `name`).
fn put(
    dir: &OwnedFd,
    name: &str,
    contents: &[u8],
    perm: Mode,
    path: &str,
    no_replace: bool,
) -> Result<(), JailError> {
    let unique = format!(
        "{}-{}",
        std::process::id(),
        TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    );
    let tmp_name = format!(".{name}.chorus-{unique}.tmp");
    let tmp_name = if tmp_name.len() > MAX_NAME_BYTES {
        format!(".chorus-{unique}.tmp")
    } else {
        tmp_name
    };
    let tmp_flags =
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let tmp = openat(dir, tmp_name.as_str(), tmp_flags, perm)
        .or_else(|e| {
            if e == Errno::EEXIST {
                // A leftover from a crashed worker that had our pid; it is ours to replace.
                let _ = unlinkat(dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
                openat(dir, tmp_name.as_str(), tmp_flags, perm)
            } else {
                Err(e)
            }
        })
        .map_err(|e| map_errno(e, path, true))?;
    let _ = fchmod(&tmp, perm); // the umask may have narrowed it
    let mut file = File::from(tmp);
    let written = file.write_all(contents).and_then(|_| file.sync_data());
    drop(file);
    let discard = || {
        let _ = unlinkat(dir, tmp_name.as_str(), UnlinkatFlags::NoRemoveDir);
    };
    if let Err(e) = written {
        discard();
        return Err(JailError::Io {
            path: path.to_string(),
            message: format!("{e}; the file was left as it was"),
        });
    }
    if no_replace {
        // link(2) fails with EEXIST if anything appeared at `name` meanwhile: the
        // create-only guarantee holds even against a racing writer.
        let linked = linkat(dir, tmp_name.as_str(), dir, name, AtFlags::empty());
        discard();
        return linked.map_err(|e| match e {
            Errno::EEXIST => JailError::Exists(path.to_string()),
            other => map_errno(other, path, true),
        });
    }
    if let Err(e) = renameat(dir, tmp_name.as_str(), dir, name) {
        discard();
        return Err(map_errno(e, path, true));
    }
    Ok(())
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
    let root = root
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| JailError::Io {
            path: path.to_string(),
            message: e.to_string(),
        })?;
    Ok((walk_dirs(root, dirs, path, create)?, name))
}

/// Opens each directory of `dirs` below `root` without following symlinks,
/// creating missing ones when `create`; returns the last.
fn walk_dirs(root: OwnedFd, dirs: &[&str], path: &str, create: bool) -> Result<OwnedFd, JailError> {
    let mut current = root;
    for dir in dirs {
        let next = match open_child_dir(&current, *dir) {
            Err(Errno::ENOENT) if create => {
                match mkdirat(&current, *dir, Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(map_errno(e, path, true)),
                }
                open_child_dir(&current, *dir)
            }
            other => other,
        }
        .map_err(|e| {
            // O_DIRECTORY|O_NOFOLLOW on a symlink says ENOTDIR or ELOOP; say which it was.
            let is_link = fstatat(&current, *dir, AtFlags::AT_SYMLINK_NOFOLLOW)
                .is_ok_and(|st| kind(&st) == SFlag::S_IFLNK);
            if is_link {
                JailError::Symlink(path.to_string())
            } else {
                map_errno(e, path, true)
            }
        })?;
        current = next;
    }
    Ok(current)
}

/// Opens the directory `name` in `dir`, refusing symlinks.
pub(crate) fn open_child_dir<P: ?Sized + nix::NixPath>(
    dir: &OwnedFd,
    name: &P,
) -> nix::Result<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    openat(dir, name, flags, Mode::empty())
}

/// Opens the regular file `name` in `dir` for reading, refusing symlinks, FIFOs and
/// devices (checked on the opened file, so a swap after a stat changes nothing).
pub(crate) fn open_child_file<P: ?Sized + nix::NixPath>(
    dir: &OwnedFd,
    name: &P,
) -> nix::Result<File> {
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty())?;
    if kind(&fstat(&fd)?) != SFlag::S_IFREG {
        return Err(Errno::EINVAL);
    }
    Ok(File::from(fd))
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
        Errno::EEXIST => JailError::Exists(path),
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
#[path = "jail_tests.rs"]
mod tests;
