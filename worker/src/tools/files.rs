//! The whole-file tools, on top of the workspace jail: `create_file` and `view`, and
//! the fine-grained `file.read`, `file.write` (existing files only), `file.create`
//! (new files only) and `file.delete`, so a profile can grant read-only, read-write
//! or read-write-create.

use std::io::{BufRead, BufReader, Read};

use serde::Deserialize;

use super::ToolOutcome;
use super::jail::{Deleted, JailError, Workspace, WriteMode};
use crate::model::wire_names::to_wire;

/// Most lines `view` returns when no limit is given.
pub const DEFAULT_VIEW_LINES: usize = 2000;
/// Most text `view` returns in one call.
pub const MAX_VIEW_BYTES: usize = 100 * 1024;
/// Largest file `create_file` writes.
pub const MAX_WRITE_BYTES: usize = 10 * 1024 * 1024;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateFileArgs {
    pub path: String,
    pub content: String,
}

/// Arguments of `file.delete`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PathArgs {
    pub path: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewArgs {
    pub path: String,
    /// First line to show, counting from 1.
    pub offset: Option<usize>,
    /// How many lines to show.
    pub limit: Option<usize>,
}

pub fn create_file(workspace: &Workspace, args: CreateFileArgs) -> ToolOutcome {
    if let Some(refused) = too_large(chorus_proto::tools::CREATE_FILE, &args.content) {
        return refused;
    }
    match workspace.write(&args.path, args.content.as_bytes()) {
        Ok(existed) => ToolOutcome::ok(format!(
            "{} {} ({} bytes)",
            if existed { "Overwrote" } else { "Created" },
            args.path,
            args.content.len()
        )),
        Err(e) => ToolOutcome::error(e.to_string()),
    }
}

/// `file.write`: replaces the content of a file that exists.
pub fn write_existing(workspace: &Workspace, args: CreateFileArgs) -> ToolOutcome {
    if let Some(refused) = too_large(chorus_proto::tools::FILE_WRITE, &args.content) {
        return refused;
    }
    match workspace.write_as(
        &args.path,
        args.content.as_bytes(),
        WriteMode::ReplaceExisting,
    ) {
        Ok(_) => ToolOutcome::ok(format!(
            "Wrote {} ({} bytes)",
            args.path,
            args.content.len()
        )),
        Err(JailError::NotFound(path)) => ToolOutcome::error(format!(
            "'{path}' does not exist; {} replaces existing files only (use {} to make a new file)",
            to_wire("file.write"),
            to_wire("file.create")
        )),
        Err(e) => ToolOutcome::error(e.to_string()),
    }
}

/// `file.create`: makes a new file (and its parent directories); never replaces one.
pub fn create_new(workspace: &Workspace, args: CreateFileArgs) -> ToolOutcome {
    if let Some(refused) = too_large(chorus_proto::tools::FILE_CREATE, &args.content) {
        return refused;
    }
    match workspace.write_as(&args.path, args.content.as_bytes(), WriteMode::CreateNew) {
        Ok(_) => ToolOutcome::ok(format!(
            "Created {} ({} bytes)",
            args.path,
            args.content.len()
        )),
        Err(JailError::Exists(path)) => ToolOutcome::error(format!(
            "'{path}' already exists; {} makes new files only (use {} to replace it or {} to edit it)",
            to_wire("file.create"),
            to_wire("file.write"),
            to_wire("file.patch")
        )),
        Err(e) => ToolOutcome::error(e.to_string()),
    }
}

/// `file.delete`: removes a file; a symlink is removed itself, never its target.
pub fn delete(workspace: &Workspace, args: PathArgs) -> ToolOutcome {
    match workspace.delete(&args.path) {
        Ok(Deleted::File) => ToolOutcome::ok(format!("Deleted {}", args.path)),
        Ok(Deleted::Symlink) => ToolOutcome::ok(format!(
            "Deleted the symlink {} (the link itself, not what it pointed to)",
            args.path
        )),
        Ok(Deleted::Special) => {
            ToolOutcome::ok(format!("Deleted {} (not a regular file)", args.path))
        }
        Err(JailError::IsDirectory(path)) => ToolOutcome::error(format!(
            "'{path}' is a directory; {} removes files only",
            to_wire("file.delete")
        )),
        Err(e) => ToolOutcome::error(e.to_string()),
    }
}

/// A file is treated as binary when its first 8 KiB hold a NUL byte (as git does).
pub fn looks_binary(head: &[u8]) -> bool {
    head.iter().take(8192).any(|b| *b == 0)
}

fn too_large(tool: &str, content: &str) -> Option<ToolOutcome> {
    (content.len() > MAX_WRITE_BYTES).then(|| {
        ToolOutcome::error(format!(
            "content is {} bytes; {} writes at most {MAX_WRITE_BYTES} bytes",
            content.len(),
            to_wire(tool)
        ))
    })
}

pub fn view(workspace: &Workspace, args: ViewArgs) -> ToolOutcome {
    read_text(workspace, args, "view")
}

/// `view` and `file.read`: numbered lines of a text file, paged by offset and limit.
pub fn read_text(workspace: &Workspace, args: ViewArgs, tool: &str) -> ToolOutcome {
    let file = match workspace.open_read(&args.path) {
        Ok(file) => file,
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    let mut reader = BufReader::new(file);
    match reader.fill_buf() {
        Ok(head) if looks_binary(head) => {
            return ToolOutcome::error(format!(
                "'{}' is a binary file; {} shows text files only",
                args.path,
                to_wire(tool)
            ));
        }
        Ok(_) => {}
        Err(e) => return ToolOutcome::error(format!("'{}': {e}", args.path)),
    }
    let offset = args.offset.unwrap_or(1).max(1);
    let limit = args.limit.unwrap_or(DEFAULT_VIEW_LINES).max(1);
    let mut out = String::new();
    let mut total = 0usize;
    let mut shown_last = 0usize;
    let mut truncated_by_size = false;
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.by_ref().take(1 << 20).read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => return ToolOutcome::error(format!("'{}': {e}", args.path)),
        }
        total += 1;
        if total < offset || total >= offset + limit || truncated_by_size {
            continue;
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\n', '\r']);
        let numbered = format!("{total:>6}\t{text}\n");
        if out.len() + numbered.len() > MAX_VIEW_BYTES {
            truncated_by_size = true;
            continue;
        }
        out.push_str(&numbered);
        shown_last = total;
    }
    if total == 0 {
        return ToolOutcome::ok(format!("'{}' is empty", args.path));
    }
    if offset > total {
        return ToolOutcome::error(format!(
            "offset {offset} is past the end of '{}' ({total} lines)",
            args.path
        ));
    }
    if shown_last < total {
        out.push_str(&format!(
            "… showing lines {offset}–{shown_last} of {total}{}; use offset and limit to see more\n",
            if truncated_by_size { " (output size limit reached)" } else { "" }
        ));
    }
    ToolOutcome::ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ws() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::new(dir.path());
        (dir, ws)
    }

    #[test]
    fn view_numbers_lines_and_pages() {
        let (_dir, ws) = ws();
        let text: String = (1..=10).map(|i| format!("line {i}\n")).collect();
        ws.write("a.txt", text.as_bytes()).unwrap();
        let all = view(
            &ws,
            ViewArgs {
                path: "a.txt".into(),
                offset: None,
                limit: None,
            },
        );
        assert!(!all.is_error);
        assert!(all.content.starts_with("     1\tline 1\n"));
        let page = view(
            &ws,
            ViewArgs {
                path: "a.txt".into(),
                offset: Some(3),
                limit: Some(2),
            },
        );
        assert_eq!(
            page.content,
            "     3\tline 3\n     4\tline 4\n… showing lines 3–4 of 10; use offset and limit to see more\n"
        );
        let past = view(
            &ws,
            ViewArgs {
                path: "a.txt".into(),
                offset: Some(11),
                limit: None,
            },
        );
        assert!(past.is_error);
    }

    #[test]
    fn view_refuses_binary_files() {
        let (_dir, ws) = ws();
        ws.write("b.bin", &[0x7f, b'E', b'L', b'F', 0, 1, 2])
            .unwrap();
        let out = view(
            &ws,
            ViewArgs {
                path: "b.bin".into(),
                offset: None,
                limit: None,
            },
        );
        assert!(out.is_error && out.content.contains("binary"));
    }

    #[test]
    fn create_file_reports_what_it_did() {
        let (dir, ws) = ws();
        let first = create_file(
            &ws,
            CreateFileArgs {
                path: "x/y.txt".into(),
                content: "hi".into(),
            },
        );
        assert_eq!(first.content, "Created x/y.txt (2 bytes)");
        let second = create_file(
            &ws,
            CreateFileArgs {
                path: "x/y.txt".into(),
                content: "yo".into(),
            },
        );
        assert_eq!(second.content, "Overwrote x/y.txt (2 bytes)");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("x/y.txt")).unwrap(),
            "yo"
        );
        let refused = create_file(
            &ws,
            CreateFileArgs {
                path: "../x".into(),
                content: "no".into(),
            },
        );
        assert!(refused.is_error);
    }
}
