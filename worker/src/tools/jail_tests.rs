//! The jail's own guarantees, call by call; the adversarial corpus is in
//! `corpus_tests`.

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
    assert_eq!(normalise("./src//a.rs/").as_deref(), Some("src/a.rs"));
    assert_eq!(normalise("../a"), None);
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
    std::io::Read::read_to_string(&mut ws.open_read("src/deep/a.txt").unwrap(), &mut text).unwrap();
    assert_eq!(text, "again");
    assert!(matches!(
        ws.open_read("src"),
        Err(JailError::IsDirectory(_))
    ));
    assert!(matches!(ws.open_read("nope"), Err(JailError::NotFound(_))));
    assert!(matches!(ws.write(".", b"x"), Err(JailError::Root(_))));
}

#[test]
fn write_modes_create_only_or_replace_only() {
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path());
    assert_eq!(
        ws.write_as("new/a.txt", b"1", WriteMode::ReplaceExisting),
        Err(JailError::NotFound("new/a.txt".into()))
    );
    assert!(
        !dir.path().join("new").exists(),
        "replace-only creates no directories"
    );
    assert_eq!(
        ws.write_as("new/a.txt", b"1", WriteMode::CreateNew),
        Ok(false)
    );
    assert_eq!(
        ws.write_as("new/a.txt", b"2", WriteMode::CreateNew),
        Err(JailError::Exists("new/a.txt".into()))
    );
    assert_eq!(
        ws.write_as("new/a.txt", b"3", WriteMode::ReplaceExisting),
        Ok(true)
    );
    assert_eq!(std::fs::read(dir.path().join("new/a.txt")).unwrap(), b"3");
    let names: Vec<_> = std::fs::read_dir(dir.path().join("new"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, vec!["a.txt"], "no temporary file is left behind");
}

#[test]
fn edits_keep_the_mode_and_replace_the_same_entry() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path());
    ws.write("run.sh", b"echo 1\n").unwrap();
    std::fs::set_permissions(
        dir.path().join("run.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    let file = ws.open_existing("run.sh", 1024).unwrap();
    assert_eq!(file.contents, b"echo 1\n");
    file.replace(b"echo 2\n").unwrap();
    let meta = std::fs::metadata(dir.path().join("run.sh")).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o755);
    assert_eq!(
        ws.open_existing("run.sh", 3).unwrap_err(),
        JailError::TooLarge {
            path: "run.sh".into(),
            limit: 3
        }
    );
}

#[test]
fn deletes_never_follow_a_final_symlink() {
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("keep"), "k").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ws = Workspace::new(dir.path());
    std::os::unix::fs::symlink(outside.path().join("keep"), dir.path().join("l")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("d")).unwrap();
    assert_eq!(ws.delete("l"), Ok(Deleted::Symlink));
    assert_eq!(
        ws.delete("d/keep"),
        Err(JailError::Symlink("d/keep".into()))
    );
    assert_eq!(
        std::fs::read_to_string(outside.path().join("keep")).unwrap(),
        "k"
    );
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    assert_eq!(ws.delete("sub"), Err(JailError::IsDirectory("sub".into())));
    assert_eq!(ws.delete("gone"), Err(JailError::NotFound("gone".into())));
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
    assert!(matches!(ws.open_any("out"), Err(JailError::Escapes(_))));
    assert!(matches!(
        ws.write("out/new", b"x"),
        Err(JailError::Symlink(_))
    ));
    assert!(matches!(ws.write("s", b"x"), Err(JailError::Symlink(_))));
    assert!(matches!(
        ws.open_existing("s", 10),
        Err(JailError::Symlink(_))
    ));
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
    assert!(matches!(
        ws.open_existing("pipe", 10),
        Err(JailError::NotRegular(_))
    ));
    assert_eq!(ws.delete("pipe"), Ok(Deleted::Special));
}

/// A task's run works in a directory of its own under the workspace: it is made
/// if missing, files written land in it, and nothing above it can be named (a file
/// of the workspace itself is not found from it, `..` is refused). A working
/// directory that is absolute, climbs out, or is the workspace itself is refused.
#[test]
fn a_working_directory_is_a_jail_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), "the agent's own").unwrap();
    let whole = Workspace::new(dir.path());
    let task = whole.within("tasks/7").unwrap();
    assert!(dir.path().join("tasks/7").is_dir(), "made if missing");
    assert_eq!(task.root(), dir.path().join("tasks/7"));
    assert_eq!(task.base(), dir.path());
    task.write("out/a.txt", b"done").unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("tasks/7/out/a.txt")).unwrap(),
        b"done"
    );
    // Positive control: from the whole workspace the file is there.
    assert!(whole.open_read("notes.txt").is_ok());
    assert!(matches!(
        task.open_read("notes.txt"),
        Err(JailError::NotFound(_))
    ));
    assert!(matches!(
        task.open_read("../../notes.txt"),
        Err(JailError::Parent(_))
    ));
    assert!(matches!(
        task.delete("../../notes.txt"),
        Err(JailError::Parent(_))
    ));
    assert!(dir.path().join("notes.txt").exists());
    for bad in ["../elsewhere", "tasks/../../x", "/etc", "", "."] {
        assert!(whole.within(bad).is_err(), "{bad:?} is refused");
    }
    // Deleted under it (by a command), it is made again at the next use.
    std::fs::remove_dir_all(dir.path().join("tasks")).unwrap();
    task.write("b.txt", b"again").unwrap();
    assert!(dir.path().join("tasks/7/b.txt").exists());
}

/// A working directory is never reached through a symlink: one planted before
/// (`tasks` → a directory outside) is refused at once, and one swapped in after
/// (as the agent's own command could) is refused at the next use; nothing is
/// written outside either way. Positive control: through the link, a plain path
/// does reach the outside directory.
#[test]
fn a_working_directory_behind_a_symlink_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::create_dir(outside.path().join("7")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("tasks")).unwrap();
    assert!(dir.path().join("tasks/7").is_dir(), "the link leads out");
    let whole = Workspace::new(dir.path());
    assert!(whole.within("tasks/7").is_err());

    std::fs::remove_file(dir.path().join("tasks")).unwrap();
    let task = whole.within("tasks/7").unwrap();
    std::fs::remove_dir_all(dir.path().join("tasks")).unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("tasks")).unwrap();
    let refused = task.write("a.txt", b"x").unwrap_err();
    assert!(refused.to_string().contains("symlink"), "{refused}");
    assert!(task.open_read("a.txt").is_err());
    assert_eq!(
        std::fs::read_dir(outside.path().join("7")).unwrap().count(),
        0
    );
}
