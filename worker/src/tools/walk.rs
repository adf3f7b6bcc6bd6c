//! Walking a workspace directory for `file.list` and `file.search`: entries in sorted
//! tree order, opened relative to their parent's handle and never through a symlink,
//! so a link planted mid-walk cannot lead the walk outside the workspace.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::ops::ControlFlow;
use std::os::fd::OwnedFd;

use nix::dir::{Dir, Type};
use nix::fcntl::{AtFlags, OFlag, readlinkat};
use nix::sys::stat::{Mode, SFlag, fstatat};

use super::jail::{kind, open_child_dir, open_child_file};

/// Directories not worth showing or searching: git's own store.
const SKIPPED: &[&str] = &[".git"];
/// Deepest directory level a walk descends to (each level holds a descriptor open).
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    /// FIFO, socket, device.
    Other,
}

/// One entry met by a walk.
pub struct Entry<'a> {
    /// Workspace-relative path of the entry.
    pub path: &'a str,
    pub kind: Kind,
    parent: &'a OwnedFd,
    name: &'a CStr,
}

impl Entry<'_> {
    /// Opens the entry for reading if it is (still) a regular file.
    pub fn open_file(&self) -> Option<File> {
        open_child_file(self.parent, self.name).ok()
    }

    /// The text of a symlink entry.
    pub fn link_target(&self) -> Option<String> {
        readlinkat(self.parent, self.name)
            .ok()
            .map(|t| t.to_string_lossy().into_owned())
    }
}

/// What a walk left out.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Skipped {
    /// Directories below `MAX_DEPTH` that were not entered.
    pub too_deep: usize,
    /// Directories that could not be opened or read.
    pub unreadable: usize,
}

/// Visits the entries below `dir` (whose workspace-relative path is `prefix`, empty
/// for the root) in sorted tree order, descending into subdirectories when
/// `recursive`. `visit` stops the walk by returning `Break`.
pub fn walk(
    dir: &OwnedFd,
    prefix: &str,
    recursive: bool,
    visit: &mut dyn FnMut(&Entry) -> ControlFlow<()>,
) -> (ControlFlow<()>, Skipped) {
    let mut skipped = Skipped::default();
    let flow = walk_level(dir, prefix, recursive, 0, visit, &mut skipped);
    (flow, skipped)
}

fn walk_level(
    dir: &OwnedFd,
    prefix: &str,
    recursive: bool,
    depth: usize,
    visit: &mut dyn FnMut(&Entry) -> ControlFlow<()>,
    skipped: &mut Skipped,
) -> ControlFlow<()> {
    let Some(entries) = read_entries(dir) else {
        skipped.unreadable += 1;
        return ControlFlow::Continue(());
    };
    for (name, kind) in entries {
        let display = name.to_string_lossy();
        if SKIPPED.contains(&display.as_ref()) {
            continue;
        }
        let path = if prefix.is_empty() {
            display.into_owned()
        } else {
            format!("{prefix}/{display}")
        };
        let entry = Entry {
            path: &path,
            kind,
            parent: dir,
            name: &name,
        };
        visit(&entry)?;
        if recursive && kind == Kind::Dir {
            if depth + 1 >= MAX_DEPTH {
                skipped.too_deep += 1;
                continue;
            }
            match open_child_dir(dir, name.as_c_str()) {
                Ok(child) => walk_level(&child, &path, true, depth + 1, visit, skipped)?,
                Err(_) => skipped.unreadable += 1,
            }
        }
    }
    ControlFlow::Continue(())
}

/// The entries of `dir`, sorted by name, without `.` and `..`.
fn read_entries(dir: &OwnedFd) -> Option<Vec<(CString, Kind)>> {
    // A fresh open of "." gives the listing its own file offset.
    let mut handle = Dir::openat(
        dir,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .ok()?;
    let mut entries = Vec::new();
    for entry in handle.iter() {
        let Ok(entry) = entry else {
            continue;
        };
        let name = entry.file_name();
        if name == c"." || name == c".." {
            continue;
        }
        let kind = match entry.file_type() {
            Some(Type::Directory) => Kind::Dir,
            Some(Type::File) => Kind::File,
            Some(Type::Symlink) => Kind::Symlink,
            Some(_) => Kind::Other,
            // Some filesystems do not fill in the type; ask without following.
            None => match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).map(|s| kind(&s)) {
                Ok(SFlag::S_IFDIR) => Kind::Dir,
                Ok(SFlag::S_IFREG) => Kind::File,
                Ok(SFlag::S_IFLNK) => Kind::Symlink,
                _ => Kind::Other,
            },
        };
        entries.push((name.to_owned(), kind));
    }
    entries.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    Some(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::jail::{Opened, Workspace};

    #[test]
    fn walks_in_sorted_tree_order_without_following_links() {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("far.txt"), "x").unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("b/c")).unwrap();
        std::fs::create_dir_all(dir.path().join(".git/objects")).unwrap();
        std::fs::write(dir.path().join("a.txt"), "").unwrap();
        std::fs::write(dir.path().join("b/c/d.txt"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("out")).unwrap();
        let ws = Workspace::new(dir.path());
        let Ok(Opened::Dir(root)) = ws.open_any("") else {
            panic!("root is a directory")
        };
        let mut seen = Vec::new();
        let (flow, skipped) = walk(&root, "", true, &mut |e| {
            seen.push((e.path.to_string(), e.kind));
            ControlFlow::Continue(())
        });
        assert_eq!(flow, ControlFlow::Continue(()));
        assert_eq!(skipped, Skipped::default());
        assert_eq!(
            seen,
            vec![
                ("a.txt".to_string(), Kind::File),
                ("b".to_string(), Kind::Dir),
                ("b/c".to_string(), Kind::Dir),
                ("b/c/d.txt".to_string(), Kind::File),
                ("out".to_string(), Kind::Symlink),
            ]
        );
    }
}
