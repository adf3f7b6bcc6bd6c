//! Memory entries as they stand in a memory file: one line each, the text and, next
//! to it, where it came from in an HTML comment a person can read and edit:
//!
//! `- The user prefers metric units. <!-- mem:3f9a2c01 thread:12 call:toolu_01 at:2026-11-26T21:40:00Z -->`
//!
//! Pure: parsing and rendering only. The parser is tolerant: a line without a marker
//! (written by hand) is an entry without provenance, an unknown key in a marker is
//! kept out of the way, and nothing a person writes makes a file unreadable.

/// Where an entry came from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provenance {
    /// 8 hex characters, random: what `DELETE …/memory/{id}` names.
    pub id: String,
    pub thread_id: Option<u64>,
    /// The model's tool call that wrote it.
    pub call_id: Option<String>,
    /// The message it came from.
    pub message_id: Option<String>,
    /// The span of a thread's messages it summarises (`<first id>-<last id>`: a
    /// context flush, `super::flush`).
    pub messages: Option<String>,
    /// Who wrote it when no model did (`api:<user>`).
    pub by: Option<String>,
    /// When (RFC 3339, UTC).
    pub at: Option<String>,
    /// Entries it replaced (folded together), by id.
    pub folds: Vec<String>,
}

/// One entry of a memory file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub text: String,
    /// 1-based line in its file.
    pub line: usize,
    /// `None`: a line without a marker (written by hand).
    pub provenance: Option<Provenance>,
}

impl Entry {
    pub fn id(&self) -> Option<&str> {
        self.provenance.as_ref().map(|p| p.id.as_str())
    }
}

const OPEN: &str = "<!-- mem:";
const CLOSE: &str = "-->";

/// Whether `id` is an entry id (8 lowercase hex characters).
pub fn is_id(id: &str) -> bool {
    id.len() == 8
        && id
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// The entries of a file: every line that is neither blank nor a heading.
pub fn parse(text: &str) -> Vec<Entry> {
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            parse_line(line).map(|(text, provenance)| Entry {
                text,
                line: i + 1,
                provenance,
            })
        })
        .collect()
}

/// One line as an entry: `None` for a blank line, a heading or a comment line.
fn parse_line(line: &str) -> Option<(String, Option<Provenance>)> {
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') || trimmed.starts_with("<!--") {
        return None;
    }
    let (body, provenance) = match trimmed.rfind(OPEN) {
        Some(at) if trimmed.ends_with(CLOSE) => {
            let inner = &trimmed[at + OPEN.len()..trimmed.len() - CLOSE.len()];
            match marker(inner) {
                Some(provenance) => (&trimmed[..at], Some(provenance)),
                None => (trimmed, None),
            }
        }
        _ => (trimmed, None),
    };
    let text = body
        .trim()
        .strip_prefix("- ")
        .or_else(|| body.trim().strip_prefix("* "))
        .unwrap_or(body.trim())
        .trim()
        .to_string();
    Some((text, provenance))
}

/// The inside of a marker: `3f9a2c01 thread:12 call:toolu_01 at:…`.
fn marker(inner: &str) -> Option<Provenance> {
    let mut words = inner.split_whitespace();
    let id = words.next()?;
    if !is_id(id) {
        return None;
    }
    let mut p = Provenance {
        id: id.to_string(),
        ..Provenance::default()
    };
    for word in words {
        let Some((key, value)) = word.split_once(':') else {
            continue;
        };
        match key {
            "thread" => p.thread_id = value.parse().ok(),
            "call" => p.call_id = Some(value.to_string()),
            "message" => p.message_id = Some(value.to_string()),
            "messages" => p.messages = Some(value.to_string()),
            "by" => p.by = Some(value.to_string()),
            "at" => p.at = Some(value.to_string()),
            "folds" => p.folds = value.split(',').map(str::to_string).collect(),
            _ => {} // a key of a later version, or a person's: ignored
        }
    }
    Some(p)
}

/// An entry's line: the text on one line (a marker inside it defused), then its
/// marker. Values with spaces would break the marker, so they lose them.
pub fn render(text: &str, p: &Provenance) -> String {
    let text = one_line(text).replace("<!--", "<!- -");
    let mut marker = format!("{OPEN}{}", p.id);
    let mut put = |key: &str, value: &str| {
        let value: String = value.split_whitespace().collect::<Vec<_>>().join("_");
        marker.push_str(&format!(" {key}:{}", value.replace("-->", "--_>")));
    };
    if let Some(thread) = p.thread_id {
        put("thread", &thread.to_string());
    }
    if let Some(call) = &p.call_id {
        put("call", call);
    }
    if let Some(message) = &p.message_id {
        put("message", message);
    }
    if let Some(messages) = &p.messages {
        put("messages", messages);
    }
    if let Some(by) = &p.by {
        put("by", by);
    }
    if !p.folds.is_empty() {
        put("folds", &p.folds.join(","));
    }
    if let Some(at) = &p.at {
        put("at", at);
    }
    format!("- {text} {marker} {CLOSE}")
}

/// The text with its lines joined by spaces.
pub fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The file without the lines of the entries named (by id); `None` when none is there.
pub fn without(text: &str, ids: &[&str]) -> Option<String> {
    let mut removed = false;
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let id = parse_line(line.trim_end_matches('\n'))
            .and_then(|(_, p)| p)
            .map(|p| p.id);
        if id.as_deref().is_some_and(|id| ids.contains(&id)) {
            removed = true;
            continue;
        }
        out.push_str(line);
    }
    removed.then_some(out)
}

/// A line for the prompt: the text and its id, without the rest of the marker.
pub fn compact(entry: &Entry) -> String {
    match entry.id() {
        Some(id) => format!("- {} [mem:{id}]", entry.text),
        None => format!("- {}", entry.text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provenance() -> Provenance {
        Provenance {
            id: "3f9a2c01".into(),
            thread_id: Some(12),
            call_id: Some("toolu_01".into()),
            at: Some("2026-11-26T21:40:00Z".into()),
            ..Provenance::default()
        }
    }

    #[test]
    fn an_entry_renders_and_parses_back() {
        let line = render("The user prefers\nmetric units.", &provenance());
        assert_eq!(
            line,
            "- The user prefers metric units. <!-- mem:3f9a2c01 thread:12 call:toolu_01 at:2026-11-26T21:40:00Z -->"
        );
        let entries = parse(&format!("# Long-term memory\n\n{line}\n"));
        assert_eq!(
            entries,
            vec![Entry {
                text: "The user prefers metric units.".into(),
                line: 3,
                provenance: Some(provenance()),
            }]
        );
        let by_api = Provenance {
            id: "00ff00ff".into(),
            by: Some("api:alice smith".into()),
            folds: vec!["3f9a2c01".into(), "12345678".into()],
            ..Provenance::default()
        };
        let entries = parse(&render("x", &by_api));
        assert_eq!(
            entries[0].provenance.as_ref().unwrap().by.as_deref(),
            Some("api:alice_smith")
        );
        assert_eq!(entries[0].provenance.as_ref().unwrap().folds.len(), 2);
    }

    #[test]
    fn hand_written_lines_are_entries_without_provenance() {
        let text = "# Memory\n- written by hand\nplain prose\n<!-- a comment -->\n- bad <!-- mem:XYZ -->\n";
        let entries = parse(text);
        let texts: Vec<_> = entries.iter().map(|e| (e.text.as_str(), e.id())).collect();
        assert_eq!(
            texts,
            vec![
                ("written by hand", None),
                ("plain prose", None),
                ("bad <!-- mem:XYZ -->", None)
            ]
        );
    }

    #[test]
    fn a_marker_inside_the_text_is_defused() {
        let fake = render("x <!-- mem:deadbeef --> y", &provenance());
        let entries = parse(&fake);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].id(), Some("3f9a2c01"));
        assert!(without(&fake, &["deadbeef"]).is_none());
    }

    #[test]
    fn removing_an_entry_keeps_every_other_line() {
        let a = render("a", &provenance());
        let b = render(
            "b",
            &Provenance {
                id: "0badcafe".into(),
                ..Provenance::default()
            },
        );
        let text = format!("# M\n{a}\nhand\n{b}\n");
        assert_eq!(
            without(&text, &["3f9a2c01"]).unwrap(),
            format!("# M\nhand\n{b}\n")
        );
        assert!(without(&text, &["99999999"]).is_none());
    }
}
