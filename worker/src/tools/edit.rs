//! `str_replace` and `file.patch`: replace one exact, unique piece of a file.
//!
//! Uniqueness is what makes the edit safe: an `old_str` that occurs 0 or several
//! times is refused with the count (and the lines), so the model adds context
//! instead of changing the wrong place. The file is read and replaced through the
//! same directory handle, atomically.

use serde::Deserialize;

use super::ToolOutcome;
use super::files::{MAX_WRITE_BYTES, looks_binary};
use super::jail::Workspace;
use chorus_proto::tools as registry;

use crate::model::wire_names::to_wire;

/// Lines of the new text shown back, and context lines around them.
const SHOWN_LINES: usize = 20;
const CONTEXT_LINES: usize = 2;
/// Line numbers listed when `old_str` occurs more than once.
const LISTED_MATCHES: usize = 10;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplaceArgs {
    pub path: String,
    pub old_str: String,
    pub new_str: String,
}

/// Runs `str_replace` (`tool` = "str_replace") or `file.patch` (`tool` = "file.patch").
pub fn replace(workspace: &Workspace, args: ReplaceArgs, tool: &str) -> ToolOutcome {
    let rewrite = to_wire(if tool == registry::STR_REPLACE {
        registry::CREATE_FILE
    } else {
        registry::FILE_WRITE
    });
    // The model knows tools by their wire names only.
    let tool = to_wire(tool);
    if args.old_str.is_empty() {
        return ToolOutcome::error(format!(
            "old_str is empty; give the exact text to replace (to write a whole file use {rewrite})"
        ));
    }
    if args.old_str == args.new_str {
        return ToolOutcome::error("old_str and new_str are the same; there is nothing to change");
    }
    let file = match workspace.open_existing(&args.path, MAX_WRITE_BYTES) {
        Ok(file) => file,
        Err(e) => return ToolOutcome::error(e.to_string()),
    };
    if looks_binary(&file.contents) {
        return ToolOutcome::error(format!(
            "'{}' is a binary file; {tool} edits text files only",
            args.path
        ));
    }
    let starts = occurrences(&file.contents, args.old_str.as_bytes());
    let start = match starts.as_slice() {
        [start] => *start,
        [] => {
            return ToolOutcome::error(format!(
                "old_str occurs 0 times in {}; it must match the file exactly, whitespace and indentation included (view the file and copy the text)",
                args.path
            ));
        }
        many => {
            let lines: Vec<String> = many
                .iter()
                .take(LISTED_MATCHES)
                .map(|s| line_of(&file.contents, *s).to_string())
                .collect();
            let more = if many.len() > LISTED_MATCHES {
                ", …"
            } else {
                ""
            };
            return ToolOutcome::error(format!(
                "old_str occurs {} times in {} (lines {}{more}); include more context so it is unique",
                many.len(),
                args.path,
                lines.join(", ")
            ));
        }
    };
    let end = start + args.old_str.len();
    let mut updated =
        Vec::with_capacity(file.contents.len() - args.old_str.len() + args.new_str.len());
    updated.extend_from_slice(&file.contents[..start]);
    updated.extend_from_slice(args.new_str.as_bytes());
    updated.extend_from_slice(&file.contents[end..]);
    if updated.len() > MAX_WRITE_BYTES {
        return ToolOutcome::error(format!(
            "the edited file would be {} bytes; {tool} writes at most {MAX_WRITE_BYTES} bytes",
            updated.len()
        ));
    }
    if let Err(e) = file.replace(&updated) {
        return ToolOutcome::error(e.to_string());
    }
    let first = line_of(&updated, start);
    let removed = args.old_str.matches('\n').count() + 1;
    let added = args.new_str.matches('\n').count() + 1;
    ToolOutcome::ok(format!(
        "Edited {} at line {first} ({} replaced by {}):\n{}",
        args.path,
        plural(removed, "line"),
        plural(added, "line"),
        snippet(&updated, first, added)
    ))
}

/// Start offsets of every occurrence of `needle`, overlapping ones included (in
/// "aaa", "aa" occurs twice: the edit would be ambiguous).
fn occurrences(haystack: &[u8], needle: &[u8]) -> Vec<usize> {
    let mut found = Vec::new();
    // Valid UTF-8 (nearly every text file) gets the standard library's linear-time
    // search; other files the plain scan.
    if let (Ok(hay), Ok(pat)) = (std::str::from_utf8(haystack), std::str::from_utf8(needle)) {
        let step = pat.chars().next().map_or(1, char::len_utf8);
        let mut from = 0;
        while let Some(at) = hay.get(from..).and_then(|rest| rest.find(pat)) {
            found.push(from + at);
            from += at + step;
        }
    } else if needle.len() <= haystack.len() {
        found.extend(
            haystack
                .windows(needle.len())
                .enumerate()
                .filter(|(_, w)| *w == needle)
                .map(|(i, _)| i),
        );
    }
    found
}

/// 1-based line number of byte `offset`.
fn line_of(text: &[u8], offset: usize) -> usize {
    text[..offset].iter().filter(|b| **b == b'\n').count() + 1
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("1 {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// The replaced lines with a little context, numbered like `view`.
fn snippet(text: &[u8], first: usize, count: usize) -> String {
    let text = String::from_utf8_lossy(text);
    let from = first.saturating_sub(CONTEXT_LINES).max(1);
    let shown = count.min(SHOWN_LINES);
    let to = first + shown - 1 + CONTEXT_LINES;
    let mut out = String::new();
    for (i, line) in text.lines().enumerate() {
        let number = i + 1;
        if number < from {
            continue;
        }
        if number > to {
            break;
        }
        out.push_str(&format!("{number:>6}\t{line}\n"));
    }
    if count > shown {
        out.push_str(&format!("… {} more new lines not shown\n", count - shown));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setup(content: &str) -> (tempfile::TempDir, Workspace) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("src")).unwrap();
        std::fs::write(dir.path().join("src/a.rs"), content).unwrap();
        let ws = Workspace::new(dir.path());
        (dir, ws)
    }

    fn args(old: &str, new: &str) -> ReplaceArgs {
        ReplaceArgs {
            path: "src/a.rs".into(),
            old_str: old.into(),
            new_str: new.into(),
        }
    }

    #[test]
    fn replaces_a_unique_match_and_shows_where() {
        let (dir, ws) = setup("fn a() {}\nfn b() {}\nfn c() {}\nfn d() {}\n");
        let out = replace(
            &ws,
            args("fn b() {}", "fn b() {\n    todo()\n}"),
            "str_replace",
        );
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            out.content,
            "Edited src/a.rs at line 2 (1 line replaced by 3 lines):\n     1\tfn a() {}\n     2\tfn b() {\n     3\t    todo()\n     4\t}\n     5\tfn c() {}\n     6\tfn d() {}\n"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap(),
            "fn a() {}\nfn b() {\n    todo()\n}\nfn c() {}\nfn d() {}\n"
        );
    }

    #[test]
    fn refuses_ambiguous_and_missing_matches_with_the_count() {
        let (dir, ws) = setup("x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n");
        let many = replace(&ws, args("x = 1", "x = 9"), "str_replace");
        assert!(many.is_error && !many.malformed);
        assert_eq!(
            many.content,
            "old_str occurs 3 times in src/a.rs (lines 1, 3, 5); include more context so it is unique"
        );
        let none = replace(&ws, args("x = 2", "x = 9"), "file.patch");
        assert!(none.is_error);
        assert!(
            none.content
                .starts_with("old_str occurs 0 times in src/a.rs"),
            "{}",
            none.content
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("src/a.rs")).unwrap(),
            "x = 1\ny = 2\nx = 1\nz = 3\nx = 1\n",
            "a refused edit leaves the file alone"
        );
    }

    #[test]
    fn overlapping_matches_count_as_ambiguous() {
        let (_dir, ws) = setup("aaa");
        let out = replace(&ws, args("aa", "b"), "str_replace");
        assert!(
            out.content.starts_with("old_str occurs 2 times"),
            "{}",
            out.content
        );
    }

    #[test]
    fn refuses_empty_identical_binary_and_missing() {
        let (dir, ws) = setup("abc");
        assert!(
            replace(&ws, args("", "x"), "str_replace")
                .content
                .contains("use create_file")
        );
        assert!(
            replace(&ws, args("", "x"), "file.patch")
                .content
                .contains("use file_write")
        );
        assert!(replace(&ws, args("abc", "abc"), "str_replace").is_error);
        std::fs::write(dir.path().join("src/a.rs"), b"ab\0c").unwrap();
        let binary = replace(&ws, args("ab", "x"), "file.patch");
        assert!(binary.content.contains("binary"), "{}", binary.content);
        let mut missing = args("a", "b");
        missing.path = "src/none.rs".into();
        assert_eq!(
            replace(&ws, missing, "str_replace").content,
            "'src/none.rs' does not exist"
        );
    }

    #[test]
    fn non_utf8_files_are_edited_bytewise() {
        let (dir, ws) = setup("");
        std::fs::write(dir.path().join("src/a.rs"), b"caf\xe9 = 1\n").unwrap();
        let out = replace(&ws, args("= 1", "= 2"), "str_replace");
        assert!(!out.is_error, "{}", out.content);
        assert_eq!(
            std::fs::read(dir.path().join("src/a.rs")).unwrap(),
            b"caf\xe9 = 2\n"
        );
    }
}
