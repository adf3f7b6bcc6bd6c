//! What the model is told before the conversation, in one order for every backend
//! ([`Docs::compose`]; the tool loop's system prompt and a CLI's instructions both):
//!
//! 1. the agent's system prompt;
//! 2. its identity: SOUL.md (who it is), then USER.md (who it works for);
//! 3. everything in its `docs/` directory (SPEC B4);
//! 4. its memory: the tail of MEMORY.md, of today's and yesterday's logs, and the
//!    size/limit line;
//! 5. search hits relevant to the thread's latest user message (from the control
//!    plane's memory search, found when it assigned the run).
//!
//! Identity and memory come as text from the control plane, which keeps those files
//! and sends them again whenever they change (`UpdateAgent`). Docs are the worker's
//! files: an edit (by the agent itself or a person) counts at the next model call:
//! the files are listed and their sizes and times compared on every call, and read
//! again only when one changed.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// Most docs text put into one system prompt.
pub const MAX_DOCS_BYTES: usize = 64 * 1024;

/// A file changed this recently may change again within the file system's clock
/// tick without its time moving: docs that fresh are not trusted from memory (the
/// way git treats "racily clean" files).
const SETTLED: Duration = Duration::from_secs(2);

/// The docs section of a run's system prompt, read again only when the files change.
#[derive(Default)]
pub struct Docs {
    cached: Option<Cached>,
}

struct Cached {
    dir: PathBuf,
    files: Vec<Stamp>,
    section: String,
}

/// What says a docs file is unchanged: its path, size, change time and inode.
#[derive(Debug, PartialEq, Eq)]
struct Stamp {
    relative: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    changed: (i64, i64),
    inode: u64,
}

/// The parts of a system prompt; [`Docs::compose`] puts them in their order.
#[derive(Debug, Clone, Copy, Default)]
pub struct PromptParts<'a> {
    pub system_prompt: &'a str,
    /// SOUL.md and USER.md, rendered by the control plane ("" when none).
    pub identity: &'a str,
    pub docs_dir: Option<&'a Path>,
    /// The memory section, rendered by the control plane ("" when none).
    pub memory: &'a str,
    /// Search hits relevant to the current message, rendered by the control plane.
    pub relevant: Option<&'a str>,
}

impl Docs {
    /// The whole system prompt, in the order the module's documentation gives.
    pub fn compose(&mut self, parts: PromptParts) -> String {
        let mut out = parts.system_prompt.to_string();
        let mut section = |text: &str| {
            if !text.trim().is_empty() {
                out.push_str("\n\n");
                out.push_str(text.trim());
            }
        };
        section(parts.identity);
        let docs = self.system_prompt("", parts.docs_dir);
        section(&docs);
        section(parts.memory);
        section(parts.relevant.unwrap_or_default());
        out
    }

    /// The system prompt with the docs after it.
    pub fn system_prompt(&mut self, prompt: &str, docs_dir: Option<&Path>) -> String {
        let Some(dir) = docs_dir else {
            return prompt.to_string();
        };
        let files = stamps(dir);
        if let Some(cached) = &self.cached
            && cached.dir == dir
            && cached.files == files
        {
            return format!("{prompt}{}", cached.section);
        }
        let section = docs_section(dir, &files);
        let text = format!("{prompt}{section}");
        self.cached = settled(&files).then(|| Cached {
            dir: dir.to_path_buf(),
            files,
            section,
        });
        text
    }
}

/// Whether every file was last changed long enough ago that a change now would
/// show in its time.
fn settled(files: &[Stamp]) -> bool {
    let Some(past) = SystemTime::now().checked_sub(SETTLED) else {
        return false;
    };
    files
        .iter()
        .all(|file| file.modified.is_some_and(|modified| modified < past))
}

/// The system prompt with the docs after it, read now.
#[cfg(test)]
pub fn system_prompt(prompt: &str, docs_dir: Option<&Path>) -> String {
    Docs::default().system_prompt(prompt, docs_dir)
}

/// The files of the docs, in order, with what says they are unchanged.
fn stamps(dir: &Path) -> Vec<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let mut files = Vec::new();
    collect(dir, dir, &mut files, 0);
    files.sort();
    files
        .into_iter()
        .filter_map(|relative| {
            let meta = std::fs::metadata(dir.join(&relative)).ok()?;
            Some(Stamp {
                len: meta.len(),
                modified: meta.modified().ok(),
                changed: (meta.ctime(), meta.ctime_nsec()),
                inode: meta.ino(),
                relative,
            })
        })
        .collect()
}

/// The docs' text as it follows the prompt ("" when there are none).
fn docs_section(dir: &Path, files: &[Stamp]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "\n\n# Your docs\nThese are the files in your docs/ directory (you maintain them).\n",
    );
    let mut used = 0usize;
    let mut left_out = Vec::new();
    for file in files {
        let relative = &file.relative;
        let Ok(text) = std::fs::read_to_string(dir.join(relative)) else {
            continue; // not text, or gone since listing
        };
        if used + text.len() > MAX_DOCS_BYTES {
            left_out.push(relative.display().to_string());
            continue;
        }
        used += text.len();
        out.push_str(&format!(
            "\n## docs/{}\n{}\n",
            relative.display(),
            text.trim_end()
        ));
    }
    if !left_out.is_empty() {
        out.push_str(&format!(
            "\n(Left out to keep this prompt short: {}. Keep docs brief.)\n",
            left_out.join(", ")
        ));
    }
    out
}

/// Regular files below `dir`, as paths relative to `root`; hidden entries and
/// symlinks are skipped (a link could point anywhere).
fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>, depth: usize) {
    if depth > 8 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        let path = entry.path();
        if kind.is_dir() {
            collect(root, &path, out, depth + 1);
        } else if kind.is_file()
            && let Ok(relative) = path.strip_prefix(root)
        {
            out.push(relative.to_path_buf());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docs_follow_the_prompt_in_order_and_links_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("b.md"), "second\n").unwrap();
        std::fs::write(dir.path().join("a.md"), "first").unwrap();
        std::fs::create_dir(dir.path().join("notes")).unwrap();
        std::fs::write(dir.path().join("notes/c.md"), "third").unwrap();
        std::fs::write(dir.path().join(".hidden"), "no").unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("link.md")).unwrap();
        let prompt = system_prompt("Be brief.", Some(dir.path()));
        assert!(prompt.starts_with("Be brief.\n\n# Your docs"));
        let a = prompt.find("## docs/a.md\nfirst").unwrap();
        let b = prompt.find("## docs/b.md\nsecond").unwrap();
        let c = prompt.find("## docs/notes/c.md\nthird").unwrap();
        assert!(a < b && b < c);
        assert!(!prompt.contains("hidden") && !prompt.contains("link.md"));
    }

    #[test]
    fn without_docs_the_prompt_is_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(system_prompt("p", Some(dir.path())), "p");
        assert_eq!(system_prompt("p", None), "p");
        assert_eq!(
            system_prompt("p", Some(Path::new("/nonexistent/docs"))),
            "p"
        );
    }

    #[test]
    fn oversized_docs_are_named_not_silently_dropped() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("big.md"), "x".repeat(MAX_DOCS_BYTES + 1)).unwrap();
        std::fs::write(dir.path().join("small.md"), "fits").unwrap();
        let prompt = system_prompt("p", Some(dir.path()));
        assert!(prompt.contains("## docs/small.md\nfits"));
        assert!(prompt.contains("Left out to keep this prompt short: big.md"));
    }

    #[test]
    fn the_parts_come_in_one_order_and_empty_ones_leave_no_trace() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.md"), "the docs").unwrap();
        let mut docs = Docs::default();
        let prompt = docs.compose(PromptParts {
            system_prompt: "Be brief.",
            identity: "# Who you are (SOUL.md)\nCalm.",
            docs_dir: Some(dir.path()),
            memory: "# Your memory\n- metric units",
            relevant: Some("# Relevant\n- hit"),
        });
        let at = |s: &str| prompt.find(s).unwrap_or_else(|| panic!("{s} in {prompt}"));
        assert!(prompt.starts_with("Be brief.\n\n# Who you are"));
        assert!(at("Calm.") < at("# Your docs"));
        assert!(at("the docs") < at("# Your memory"));
        assert!(at("metric units") < at("# Relevant"));
        // Without identity and memory the prompt is what it was before them.
        let plain = docs.compose(PromptParts {
            system_prompt: "p",
            docs_dir: Some(dir.path()),
            ..PromptParts::default()
        });
        assert_eq!(plain, system_prompt("p", Some(dir.path())).trim_end());
    }

    fn age(path: &Path, by: Duration) {
        let file = std::fs::File::options().write(true).open(path).unwrap();
        file.set_modified(SystemTime::now() - by).unwrap();
    }

    /// Docs that have settled are kept in memory; an edit (even to the same size)
    /// shows at the next call, and a just-edited file is read again every call
    /// until it settles.
    #[test]
    fn an_edit_counts_at_the_next_call_and_settled_docs_are_kept() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a.md");
        std::fs::write(&file, "aaaa").unwrap();
        let mut docs = Docs::default();
        assert!(docs.system_prompt("p", Some(dir.path())).contains("aaaa"));
        assert!(docs.cached.is_none(), "a file edited just now is not kept");

        age(&file, Duration::from_secs(60));
        assert!(docs.system_prompt("p", Some(dir.path())).contains("aaaa"));
        assert!(docs.cached.is_some(), "settled docs are kept");

        std::fs::write(&file, "bbbb").unwrap();
        let prompt = docs.system_prompt("p", Some(dir.path()));
        assert!(
            prompt.contains("bbbb") && !prompt.contains("aaaa"),
            "{prompt}"
        );

        age(&file, Duration::from_secs(60));
        docs.system_prompt("p", Some(dir.path()));
        std::fs::write(dir.path().join("new.md"), "added").unwrap();
        assert!(
            docs.system_prompt("p", Some(dir.path()))
                .contains("## docs/new.md\nadded")
        );
        std::fs::remove_file(dir.path().join("new.md")).unwrap();
        assert!(!docs.system_prompt("p", Some(dir.path())).contains("new.md"));
    }
}
