//! What the model is told before the conversation: the agent's system prompt, then
//! everything in its `docs/` directory (SPEC B4), read fresh for every model call so
//! an edit (by the agent itself or a person) counts at once.

use std::path::{Path, PathBuf};

/// Most docs text put into one system prompt.
pub const MAX_DOCS_BYTES: usize = 64 * 1024;

/// The system prompt with the docs after it.
pub fn system_prompt(prompt: &str, docs_dir: Option<&Path>) -> String {
    let Some(dir) = docs_dir else {
        return prompt.to_string();
    };
    let mut files = Vec::new();
    collect(dir, dir, &mut files, 0);
    files.sort();
    if files.is_empty() {
        return prompt.to_string();
    }
    let mut out = String::from(prompt);
    out.push_str(
        "\n\n# Your docs\nThese are the files in your docs/ directory (you maintain them).\n",
    );
    let mut used = 0usize;
    let mut left_out = Vec::new();
    for relative in files {
        let Ok(text) = std::fs::read_to_string(dir.join(&relative)) else {
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
}
