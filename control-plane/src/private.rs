//! Files and directories only their owner may read: what chorus keeps in its data
//! directory (the database, the model catalogue, the agents' directories) holds
//! conversations, prompts and workspaces, so it is created 0600 / 0700 whoever made
//! the data directory and whatever the umask. Modes are set explicitly after
//! creating (a umask can only take bits away), and existing paths are narrowed too,
//! so a data directory from an older chorus becomes private at its next start.

use std::io;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

pub const FILE_MODE: u32 = 0o600;
pub const DIR_MODE: u32 = 0o700;

/// Creates `dir` (and missing parents) and makes `dir` itself 0700.
pub fn create_dir(dir: &Path) -> io::Result<()> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(DIR_MODE)
        .create(dir)?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(DIR_MODE))
}

/// Writes a whole file, created 0600 (an existing one is narrowed to 0600).
pub fn write_file(path: &Path, contents: &[u8]) -> io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(FILE_MODE)
        .open(path)?;
    file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE))?;
    file.write_all(contents)?;
    file.sync_all()
}

/// Creates an empty 0600 file unless one exists; narrows an existing file to 0600.
/// A missing file stays missing when `create` is false.
pub fn file(path: &Path, create: bool) -> io::Result<()> {
    let opened = std::fs::OpenOptions::new()
        .append(true)
        .create(create)
        .mode(FILE_MODE)
        .open(path);
    match opened {
        Ok(file) => file.set_permissions(std::fs::Permissions::from_mode(FILE_MODE)),
        Err(e) if !create && e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn created_and_existing_paths_become_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_dir(&dir).unwrap();
        assert_eq!(mode(&dir), 0o700);

        let f = dir.join("f");
        write_file(&f, b"x").unwrap();
        assert_eq!(mode(&f), 0o600);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o644)).unwrap();
        file(&f, false).unwrap();
        assert_eq!(mode(&f), 0o600);
        assert_eq!(
            std::fs::read(&f).unwrap(),
            b"x",
            "narrowing keeps the contents"
        );
        file(&dir.join("absent"), false).unwrap();
        assert!(!dir.join("absent").exists());
    }
}
