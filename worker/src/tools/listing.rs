//! `file.list` and `file.search`: looking around the workspace without a shell.
//! Both walk with `walk` (never through a symlink, `.git/` skipped) and stop at a
//! cap with a note, so a huge tree costs a bounded answer.

use std::io::Read;
use std::ops::ControlFlow;

use regex::RegexBuilder;
use serde::Deserialize;

use super::ToolOutcome;
use super::files::looks_binary;
use super::jail::{Opened, Workspace};
use super::walk::{self, Entry, Kind, Skipped};
use crate::model::wire_names::to_wire;

/// Most entries `file.list` returns.
pub const MAX_LIST_ENTRIES: usize = 1000;
/// Most matching lines `file.search` returns.
pub const MAX_SEARCH_MATCHES: usize = 200;
/// Files larger than this are not searched.
pub const MAX_SEARCH_FILE_BYTES: u64 = 4 * 1024 * 1024;
/// Most files `file.search` reads in one call.
pub const MAX_SEARCH_FILES: usize = 20_000;
/// A matching line is shown up to this many characters.
const MAX_LINE_CHARS: usize = 240;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    pub path: Option<String>,
    #[serde(default)]
    pub recursive: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    pub pattern: String,
    pub path: Option<String>,
}

/// How the model names the listed place in messages.
fn place(path: &str) -> String {
    if path.is_empty() || path == "." {
        "the workspace".to_string()
    } else {
        format!("'{path}'")
    }
}

pub fn list(workspace: &Workspace, args: ListArgs) -> ToolOutcome {
    let path = args.path.unwrap_or_default();
    let dir = match workspace.open_any(&path) {
        Ok(Opened::Dir(dir)) => dir,
        Ok(Opened::File(_)) => {
            return ToolOutcome::error(format!(
                "'{path}' is a file, not a directory; use {} to see it",
                to_wire(chorus_proto::tools::FILE_READ)
            ));
        }
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    let prefix = super::jail::normalise(&path).unwrap_or_default();
    let mut lines = Vec::new();
    let mut capped = false;
    let (_, skipped) = walk::walk(&dir, &prefix, args.recursive, &mut |entry| {
        if lines.len() == MAX_LIST_ENTRIES {
            capped = true;
            return ControlFlow::Break(());
        }
        lines.push(describe_entry(entry));
        ControlFlow::Continue(())
    });
    if lines.is_empty() && !capped {
        return ToolOutcome::ok(format!("{} is empty", place(&path)));
    }
    let mut out = lines.join("\n");
    out.push('\n');
    if capped {
        out.push_str(&format!(
            "… the listing stops at {MAX_LIST_ENTRIES} entries; list a subdirectory to see the rest\n"
        ));
    }
    out.push_str(&skipped_note(skipped));
    ToolOutcome::ok(out)
}

fn describe_entry(entry: &Entry) -> String {
    match entry.kind {
        Kind::Dir => format!("{}/", entry.path),
        Kind::Symlink => match entry.link_target() {
            Some(target) => format!("{} -> {target}", entry.path),
            None => entry.path.to_string(),
        },
        Kind::File | Kind::Other => entry.path.to_string(),
    }
}

fn skipped_note(skipped: Skipped) -> String {
    let mut note = String::new();
    if skipped.too_deep > 0 {
        note.push_str(&format!(
            "… {} deeper than {} levels not entered\n",
            directories(skipped.too_deep),
            walk::MAX_DEPTH
        ));
    }
    if skipped.unreadable > 0 {
        note.push_str(&format!(
            "… {} could not be read\n",
            directories(skipped.unreadable)
        ));
    }
    note
}

pub fn search(workspace: &Workspace, args: SearchArgs) -> ToolOutcome {
    let regex = match RegexBuilder::new(&args.pattern).size_limit(1 << 20).build() {
        Ok(regex) => regex,
        Err(e) => {
            return ToolOutcome::error(format!(
                "'{}' is not a valid regular expression: {e}",
                args.pattern
            ));
        }
    };
    let path = args.path.unwrap_or_default();
    let mut search = Search {
        regex,
        matches: Vec::new(),
        files: 0,
        skipped_binary: 0,
        skipped_large: 0,
        capped: false,
    };
    let skipped = match workspace.open_any(&path) {
        Ok(Opened::File(file)) => {
            let shown = super::jail::normalise(&path).unwrap_or_default();
            let _ = search.file(&shown, file);
            Skipped::default()
        }
        Ok(Opened::Dir(dir)) => {
            let prefix = super::jail::normalise(&path).unwrap_or_default();
            let (_, skipped) = walk::walk(&dir, &prefix, true, &mut |entry| {
                if entry.kind != Kind::File {
                    return ControlFlow::Continue(());
                }
                match entry.open_file() {
                    Some(file) => search.file(entry.path, file),
                    None => ControlFlow::Continue(()),
                }
            });
            skipped
        }
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    search.report(&args.pattern, &path, skipped)
}

struct Search {
    regex: regex::Regex,
    matches: Vec<String>,
    files: usize,
    skipped_binary: usize,
    skipped_large: usize,
    capped: bool,
}

impl Search {
    /// Searches one file; `Break` once a cap is reached.
    fn file(&mut self, path: &str, file: std::fs::File) -> ControlFlow<()> {
        if self.files == MAX_SEARCH_FILES {
            self.capped = true;
            return ControlFlow::Break(());
        }
        self.files += 1;
        if file
            .metadata()
            .map_or(true, |m| m.len() > MAX_SEARCH_FILE_BYTES)
        {
            self.skipped_large += 1;
            return ControlFlow::Continue(());
        }
        let mut bytes = Vec::new();
        if file
            .take(MAX_SEARCH_FILE_BYTES)
            .read_to_end(&mut bytes)
            .is_err()
        {
            return ControlFlow::Continue(());
        }
        if looks_binary(&bytes) {
            self.skipped_binary += 1;
            return ControlFlow::Continue(());
        }
        let text = String::from_utf8_lossy(&bytes);
        for (i, line) in text.lines().enumerate() {
            if !self.regex.is_match(line) {
                continue;
            }
            if self.matches.len() == MAX_SEARCH_MATCHES {
                self.capped = true;
                return ControlFlow::Break(());
            }
            self.matches
                .push(format!("{path}:{}: {}", i + 1, clip(line.trim_end())));
        }
        ControlFlow::Continue(())
    }

    fn report(self, pattern: &str, path: &str, skipped: Skipped) -> ToolOutcome {
        let mut out = String::new();
        if self.matches.is_empty() {
            out.push_str(&format!(
                "No matches for '{pattern}' in {} ({} searched)\n",
                place(path),
                count(self.files, "file")
            ));
        } else {
            for line in &self.matches {
                out.push_str(line);
                out.push('\n');
            }
        }
        if self.capped {
            out.push_str(&format!(
                "… the search stopped at {MAX_SEARCH_MATCHES} matches or {MAX_SEARCH_FILES} files; narrow the pattern or the path to see the rest\n"
            ));
        }
        if self.skipped_binary > 0 {
            out.push_str(&format!(
                "… skipped {}\n",
                count(self.skipped_binary, "binary file")
            ));
        }
        if self.skipped_large > 0 {
            out.push_str(&format!(
                "… skipped {} larger than {} MiB\n",
                count(self.skipped_large, "file"),
                MAX_SEARCH_FILE_BYTES >> 20
            ));
        }
        out.push_str(&skipped_note(skipped));
        ToolOutcome::ok(out)
    }
}

fn directories(n: usize) -> String {
    if n == 1 {
        "1 directory".to_string()
    } else {
        format!("{n} directories")
    }
}

/// "1 file", "3 files".
fn count(n: usize, noun: &str) -> String {
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

fn clip(line: &str) -> String {
    if line.chars().count() <= MAX_LINE_CHARS {
        line.to_string()
    } else {
        format!("{}…", line.chars().take(MAX_LINE_CHARS).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup() -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        std::fs::create_dir_all(root.join("src/util")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        std::fs::write(root.join(".git/config"), "fn main hidden\n").unwrap();
        std::fs::write(root.join("README.md"), "# demo\nrun main\n").unwrap();
        std::fs::write(
            root.join("src/main.rs"),
            "fn main() {\n    util::go();\n}\n",
        )
        .unwrap();
        std::fs::write(root.join("src/util/mod.rs"), "pub fn go() {}\n").unwrap();
        std::fs::write(root.join("src/logo.png"), b"\x89PNG\0\0fn main").unwrap();
        std::os::unix::fs::symlink("src/main.rs", root.join("entry")).unwrap();
        (dir, Workspace::new(&root))
    }

    fn list_of(ws: &Workspace, path: Option<&str>, recursive: bool) -> ToolOutcome {
        list(
            ws,
            ListArgs {
                path: path.map(str::to_string),
                recursive,
            },
        )
    }

    fn search_for(ws: &Workspace, pattern: &str, path: Option<&str>) -> ToolOutcome {
        search(
            ws,
            SearchArgs {
                pattern: pattern.into(),
                path: path.map(str::to_string),
            },
        )
    }

    #[test]
    fn lists_sorted_with_directories_marked() {
        let (_dir, ws) = setup();
        assert_eq!(
            list_of(&ws, None, false).content,
            "README.md\nentry -> src/main.rs\nsrc/\n"
        );
        assert_eq!(
            list_of(&ws, None, true).content,
            "README.md\nentry -> src/main.rs\nsrc/\nsrc/logo.png\nsrc/main.rs\nsrc/util/\nsrc/util/mod.rs\n"
        );
        assert_eq!(
            list_of(&ws, Some("./src/"), false).content,
            "src/logo.png\nsrc/main.rs\nsrc/util/\n"
        );
        let file = list_of(&ws, Some("README.md"), false);
        assert!(file.is_error && file.content.contains("use file_read"));
        assert!(list_of(&ws, Some("../"), false).is_error);
    }

    #[test]
    fn listing_is_capped_with_a_note() {
        let (dir, ws) = setup();
        std::fs::create_dir(dir.path().join("many")).unwrap();
        for i in 0..MAX_LIST_ENTRIES + 5 {
            std::fs::write(dir.path().join(format!("many/f{i:05}")), "").unwrap();
        }
        let out = list_of(&ws, Some("many"), false);
        assert_eq!(out.content.lines().count(), MAX_LIST_ENTRIES + 1);
        assert!(out.content.ends_with(
            "… the listing stops at 1000 entries; list a subdirectory to see the rest\n"
        ));
        std::fs::create_dir(dir.path().join("empty")).unwrap();
        assert_eq!(
            list_of(&ws, Some("empty"), true).content,
            "'empty' is empty"
        );
    }

    #[test]
    fn searches_text_files_and_skips_binary_and_git() {
        let (_dir, ws) = setup();
        let out = search_for(&ws, r"fn \w+\(", None);
        assert!(!out.is_error);
        assert_eq!(
            out.content,
            "src/main.rs:1: fn main() {\nsrc/util/mod.rs:1: pub fn go() {}\n… skipped 1 binary file\n"
        );
        let one = search_for(&ws, "main", Some("README.md"));
        assert_eq!(one.content, "README.md:2: run main\n");
        let none = search_for(&ws, "absent", Some("src"));
        assert_eq!(
            none.content,
            "No matches for 'absent' in 'src' (3 files searched)\n… skipped 1 binary file\n"
        );
    }

    #[test]
    fn an_invalid_pattern_is_an_error_naming_it() {
        let (_dir, ws) = setup();
        let out = search_for(&ws, "fn (", None);
        assert!(out.is_error && !out.malformed);
        assert!(
            out.content
                .starts_with("'fn (' is not a valid regular expression"),
            "{}",
            out.content
        );
    }
}
