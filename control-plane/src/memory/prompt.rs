//! The identity and memory sections of an agent's system prompt, rendered by the
//! control plane from the files and sent to the worker as text (`AgentSettings`
//! `identity` and `memory`); the worker puts them in their place
//! (`worker/src/context.rs`). Pure: texts in, text out.
//!
//! Bounded: the memory section carries the tail of MEMORY.md (at most
//! [`LONG_TERM_BUDGET`] bytes) and of today's and yesterday's logs (at most
//! [`DAILY_BUDGET`] each), never more; what is left out is said, and `memory_get`
//! reads it. It always says the long-term memory's size and limit.

use super::entries::{self, Entry};

/// Most bytes of MEMORY.md put into a prompt.
pub const LONG_TERM_BUDGET: usize = 12 * 1024;
/// Most bytes of one daily log put into a prompt.
pub const DAILY_BUDGET: usize = 3 * 1024;
/// Most bytes of SOUL.md or USER.md put into a prompt (a hand edit may be larger
/// than the API accepts).
pub const IDENTITY_BUDGET: usize = 16 * 1024;

/// The text of a file as far as the prompt cares: empty when it holds nothing but
/// whitespace and HTML comments (a template's guidance).
pub fn meaningful(text: &str) -> &str {
    let mut rest = text;
    let mut any = false;
    while let Some(start) = rest.find("<!--") {
        if !rest[..start].trim().is_empty() {
            any = true;
            break;
        }
        match rest[start..].find("-->") {
            Some(end) => rest = &rest[start + end + 3..],
            None => break,
        }
    }
    if any || !rest.trim().is_empty() {
        text.trim()
    } else {
        ""
    }
}

/// SOUL.md then USER.md; "" when both are empty.
pub fn identity_section(soul: &str, user: &str) -> String {
    let mut parts = Vec::new();
    for (heading, text) in [
        ("# Who you are (SOUL.md)", soul),
        ("# Who you work for (USER.md)", user),
    ] {
        let text = meaningful(text);
        if !text.is_empty() {
            parts.push(format!("{heading}\n{}", bounded(text, IDENTITY_BUDGET)));
        }
    }
    parts.join("\n\n")
}

/// At most `budget` bytes of `text` (cut at a character boundary), saying so when cut.
fn bounded(text: &str, budget: usize) -> String {
    if text.len() <= budget {
        return text.to_string();
    }
    let mut end = budget;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "{}\n(cut here: the file is {}, more than the {} a prompt carries; keep it short)",
        &text[..end],
        human(text.len()),
        human(budget)
    )
}

/// A day's log as the prompt shows it.
pub struct Day<'a> {
    /// "Today's", "Yesterday's".
    pub label: &'a str,
    pub file: &'a str,
    pub text: &'a str,
}

/// The memory section: its size and limit, the tail of MEMORY.md and of the logs
/// given. "" when there are no entries at all (an agent that has never written one).
pub fn memory_section(long_term: &str, limit: usize, days: &[Day]) -> String {
    let entries = entries::parse(long_term);
    let logs: Vec<(&Day, Vec<Entry>)> = days
        .iter()
        .map(|d| (d, entries::parse(d.text)))
        .filter(|(_, e)| !e.is_empty())
        .collect();
    if entries.is_empty() && logs.is_empty() {
        return String::new();
    }
    let mut out = format!(
        "# Your memory\n{} Add a lasting fact with remember, a note for today with \
         log_note; memory_get reads a memory file whole. [mem:…] is an entry's id.",
        size_line(long_term.len(), limit)
    );
    if !entries.is_empty() {
        out.push_str("\n\n## Long-term (memory/MEMORY.md)\n");
        out.push_str(&tail(&entries, LONG_TERM_BUDGET));
    }
    for (day, entries) in logs {
        out.push_str(&format!("\n\n## {} log (memory/{})\n", day.label, day.file));
        out.push_str(&tail(&entries, DAILY_BUDGET));
    }
    out
}

/// "Your long-term memory is 3.2 KB of 16 KB." (and how far over, when it is).
pub fn size_line(size: usize, limit: usize) -> String {
    let mut line = format!(
        "Your long-term memory is {} of {}.",
        human(size),
        human(limit)
    );
    if size > limit {
        line.push_str(&format!(
            " It is {} over: fold related entries together (remember with replaces).",
            human(size - limit)
        ));
    }
    line
}

/// The last entries that fit in `budget` bytes, oldest first, with a line saying how
/// many earlier ones are left out.
fn tail(entries: &[Entry], budget: usize) -> String {
    let mut used = 0;
    let mut kept = Vec::new();
    for entry in entries.iter().rev() {
        let line = entries::compact(entry);
        if used + line.len() + 1 > budget {
            break;
        }
        used += line.len() + 1;
        kept.push(line);
    }
    kept.reverse();
    let left_out = entries.len() - kept.len();
    let mut out = String::new();
    if left_out > 0 {
        out.push_str(&format!(
            "({left_out} earlier entries are not shown; memory_get reads them)\n"
        ));
    }
    out.push_str(&kept.join("\n"));
    out
}

/// What `remember` answers past the limit: by how much, and which entries to fold
/// (the longest few, then the oldest few, by id). `None` within the limit.
pub fn over_limit(long_term: &str, limit: usize) -> Option<String> {
    let size = long_term.len();
    if size <= limit {
        return None;
    }
    let entries: Vec<Entry> = entries::parse(long_term)
        .into_iter()
        .filter(|e| e.id().is_some())
        .collect();
    let mut longest: Vec<&Entry> = entries.iter().collect();
    longest.sort_by_key(|e| std::cmp::Reverse(e.text.len()));
    let ids = |list: &mut dyn Iterator<Item = &Entry>| {
        list.take(3)
            .filter_map(|e| e.id().map(|id| format!("mem:{id}")))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let longest = ids(&mut longest.into_iter());
    let oldest = ids(&mut entries.iter());
    let mut text = format!(
        "MEMORY.md is now {} of its {} limit, {} over. Keep it within the limit: fold \
         related entries into one (remember with the folded text and replaces: [their ids])",
        human(size),
        human(limit),
        human(size - limit)
    );
    if !longest.is_empty() {
        text.push_str(&format!("; the longest are {longest}, the oldest {oldest}"));
    }
    text.push('.');
    Some(text)
}

/// A size for people: "812 B", "3.2 KB", "16 KB".
pub fn human(bytes: usize) -> String {
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let kb = bytes as f64 / 1024.0;
    if (kb - kb.round()).abs() < 0.05 {
        format!("{kb:.0} KB")
    } else {
        format!("{kb:.1} KB")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::memory::entries::{Provenance, render};

    fn entry(id: &str, text: &str) -> String {
        render(
            text,
            &Provenance {
                id: id.into(),
                ..Provenance::default()
            },
        )
    }

    #[test]
    fn a_template_of_comments_is_empty_and_text_is_kept() {
        assert_eq!(meaningful("<!-- Who you are -->\n\n"), "");
        assert_eq!(meaningful("<!-- c -->\nCalm."), "<!-- c -->\nCalm.");
        assert_eq!(identity_section("<!-- x -->", ""), "");
        assert_eq!(
            identity_section("Calm.", "Ada."),
            "# Who you are (SOUL.md)\nCalm.\n\n# Who you work for (USER.md)\nAda."
        );
        let huge = "é".repeat(IDENTITY_BUDGET);
        let section = identity_section(&huge, "");
        assert!(section.len() < IDENTITY_BUDGET + 200, "{}", section.len());
        assert!(section.ends_with("keep it short)"));
    }

    #[test]
    fn the_memory_section_says_size_and_limit_and_is_bounded() {
        assert_eq!(memory_section("# Long-term memory\n", 16384, &[]), "");
        let text = format!("# M\n{}\n", entry("3f9a2c01", "metric units"));
        let section = memory_section(&text, 16384, &[]);
        assert!(section.contains("Your long-term memory is "), "{section}");
        assert!(section.contains("of 16 KB."), "{section}");
        assert!(
            section.contains("- metric units [mem:3f9a2c01]"),
            "{section}"
        );
        // Far more than the budget: only the tail goes, and says so.
        let big: String = (0..2000)
            .map(|i| entry(&format!("{i:08x}"), &format!("fact number {i}")) + "\n")
            .collect();
        let section = memory_section(&big, 16384, &[]);
        assert!(section.len() < LONG_TERM_BUDGET + 1024, "{}", section.len());
        assert!(section.contains("fact number 1999"));
        assert!(!section.contains("fact number 0 "));
        assert!(section.contains("earlier entries are not shown"));
        assert!(section.contains("over: fold"));
    }

    #[test]
    fn past_the_limit_remember_says_by_how_much_and_what_to_fold() {
        let text = format!(
            "{}\n{}\n{}\n",
            entry("00000001", "old"),
            entry("00000002", &"long ".repeat(40)),
            entry("00000003", "new")
        );
        assert_eq!(over_limit(&text, 16384), None);
        let message = over_limit(&text, 100).unwrap();
        assert!(message.contains("over"), "{message}");
        assert!(
            message.contains("the longest are mem:00000002"),
            "{message}"
        );
        assert!(message.contains("the oldest mem:00000001"), "{message}");
        assert_eq!(human(16384), "16 KB");
        assert_eq!(human(3277), "3.2 KB");
        assert_eq!(human(812), "812 B");
    }
}
