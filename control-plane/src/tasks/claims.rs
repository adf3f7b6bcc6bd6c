//! A delegate's claims, checked where they can be (issue 28, H6): the files its
//! report names are looked for in its task's directory, and the delegating agent is
//! told which exist. Finding the names is pure ([`named_files`]); looking is the
//! engine's.

/// At most this many names are checked per report.
const MAX_NAMES: usize = 20;

/// The relative file paths a report's text names: words with a file extension
/// (`src/cache.rs`, `greeting.txt`), quotes and punctuation around them left out.
/// Absolute paths, `..` and URLs are not the task directory's, and are left out.
pub fn named_files(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for word in text.split_whitespace() {
        let word = word.trim_matches(|c: char| {
            matches!(
                c,
                '`' | '"' | '\'' | '(' | ')' | '[' | ']' | ',' | ';' | ':' | '*'
            )
        });
        let word = word.strip_suffix('.').unwrap_or(word);
        if word.starts_with('/') || word.contains("..") || word.contains("://") {
            continue;
        }
        let Some((stem, extension)) = word.rsplit_once('.') else {
            continue;
        };
        let plain = |s: &str| {
            !s.is_empty()
                && s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '/' | '.'))
        };
        // Two letters at least: "e.g" and "i.e" are not files (a C file `a.c` is missed).
        let extension_ok = (2..=8).contains(&extension.len())
            && extension.chars().all(|c| c.is_ascii_alphanumeric())
            && extension.chars().any(|c| c.is_ascii_alphabetic());
        if plain(stem) && extension_ok && !names.iter().any(|n| n == word) {
            names.push(word.to_string());
            if names.len() == MAX_NAMES {
                break;
            }
        }
    }
    names
}

/// What the delegating agent is told about the files: which exist, which do not.
pub fn verdict(found: &[(String, bool)]) -> Option<String> {
    if found.is_empty() {
        return None;
    }
    let list = |exists: bool| {
        found
            .iter()
            .filter(|(_, e)| *e == exists)
            .map(|(n, _)| n.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let (there, missing) = (list(true), list(false));
    let mut parts = Vec::new();
    if !there.is_empty() {
        parts.push(format!("found {there}"));
    }
    if !missing.is_empty() {
        parts.push(format!("NOT found {missing}"));
    }
    Some(format!(
        "Chorus looked for the files the report names in its task's directory: {}.",
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_are_found_and_nothing_else() {
        assert_eq!(
            named_files(
                "Wrote `src/cache.rs` and greeting.txt. Checked (README.md), v1.2 and e.g. \
                 see https://x.io/a.html, /etc/passwd.txt, ../up.txt; greeting.txt again"
            ),
            ["src/cache.rs", "greeting.txt", "README.md"]
        );
        assert!(named_files("nothing here, 3.14 is a number").is_empty());
    }

    #[test]
    fn the_verdict_names_what_exists_and_what_does_not() {
        let found = vec![("a.txt".to_string(), true), ("b.rs".to_string(), false)];
        assert_eq!(
            verdict(&found).unwrap(),
            "Chorus looked for the files the report names in its task's directory: found a.txt; NOT found b.rs."
        );
        assert_eq!(verdict(&[]), None);
    }
}
