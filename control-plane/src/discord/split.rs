//! Splitting text into Discord messages (pure). Discord takes at most 2,000
//! characters per message: text is cut on line boundaries, a code block cut in two
//! is closed at the end of one part and reopened (with its language) at the start
//! of the next, a line longer than a part is cut at a space where it can be, and no
//! part is empty. Past `attach_after` characters the text goes as a file instead,
//! with its start as a preview.

/// Discord's limit on a message's content, in characters.
pub const MESSAGE_CHARS: usize = 2000;
/// Text longer than this is attached as a file rather than split into many messages.
pub const ATTACH_AFTER_CHARS: usize = 12_000;

/// How a text goes out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outgoing {
    /// Messages, in order (none for blank text).
    Parts(Vec<String>),
    /// One message with `preview`, and the whole text as a file.
    File { preview: String, content: String },
}

/// Splits `text` for Discord: messages of at most `max` characters, or a file
/// past `attach_after`.
pub fn plan(text: &str, max: usize, attach_after: usize) -> Outgoing {
    if text.chars().count() > attach_after {
        let preview_budget = max.saturating_sub(120).max(1);
        let mut preview: String = split(text, preview_budget)
            .into_iter()
            .next()
            .unwrap_or_default();
        preview.push_str(&format!(
            "\n… ({} characters in all: the whole answer is attached)",
            text.chars().count()
        ));
        return Outgoing::File {
            preview,
            content: text.to_string(),
        };
    }
    Outgoing::Parts(split(text, max))
}

/// The fence line that opens a code block (```` ```rust ````), if `line` is one.
fn fence(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    trimmed.starts_with("```").then(|| trimmed.trim_end())
}

/// Splits `text` into parts of at most `max` characters (see the module docs).
pub fn split(text: &str, max: usize) -> Vec<String> {
    const CLOSE: &str = "```";
    let max = max.max(16);
    let mut parts = Vec::new();
    let mut current = String::new();
    let mut current_len = 0usize;
    // The fence of the code block open at the end of `current`, if any.
    let mut open: Option<String> = None;
    // Whether `current` holds anything beyond a reopened fence.
    let mut has_content = false;

    let flush = |parts: &mut Vec<String>,
                 current: &mut String,
                 current_len: &mut usize,
                 open: &Option<String>,
                 has_content: &mut bool| {
        if *has_content {
            let mut part = std::mem::take(current);
            if open.is_some() {
                if !part.ends_with('\n') {
                    part.push('\n');
                }
                part.push_str(CLOSE);
            }
            let part = part.trim_end_matches('\n').to_string();
            if !part.trim().is_empty() {
                parts.push(part);
            }
        }
        current.clear();
        *current_len = 0;
        *has_content = false;
        if let Some(fence) = open {
            current.push_str(fence);
            current.push('\n');
            *current_len = fence.chars().count() + 1;
        }
    };

    for line in text.split_inclusive('\n') {
        let is_fence = fence(line).map(str::to_string);
        // Room a part needs at its end to close a block open after this line.
        let opens_or_stays_open = match (&open, &is_fence) {
            (Some(_), Some(_)) => false, // this line closes the block
            (None, Some(_)) => true,     // this line opens one
            (open, None) => open.is_some(),
        };
        let reserve = if opens_or_stays_open {
            CLOSE.len() + 1
        } else {
            0
        };
        let line_len = line.chars().count();
        if current_len + line_len + reserve > max && has_content {
            flush(
                &mut parts,
                &mut current,
                &mut current_len,
                &open,
                &mut has_content,
            );
        }
        let budget = max.saturating_sub(current_len + reserve).max(1);
        if line_len > budget {
            // One line longer than a part: cut it, at a space where it can be.
            let mut rest: &str = line;
            while !rest.is_empty() {
                let budget = max.saturating_sub(current_len + reserve).max(1);
                let piece = cut(rest, budget);
                current.push_str(piece);
                current_len += piece.chars().count();
                has_content = true;
                rest = &rest[piece.len()..];
                if !rest.is_empty() {
                    flush(
                        &mut parts,
                        &mut current,
                        &mut current_len,
                        &open,
                        &mut has_content,
                    );
                }
            }
        } else {
            current.push_str(line);
            current_len += line_len;
            has_content = true;
        }
        if let Some(f) = is_fence {
            open = match open {
                Some(_) => None,
                None => Some(f),
            };
        }
    }
    // The text's own unclosed block stays as the text had it.
    flush(
        &mut parts,
        &mut current,
        &mut current_len,
        &None,
        &mut has_content,
    );
    parts
}

/// The longest start of `text` within `budget` characters, ending after a space
/// when there is one in its second half.
fn cut(text: &str, budget: usize) -> &str {
    let end = text
        .char_indices()
        .nth(budget)
        .map_or(text.len(), |(i, _)| i);
    let head = &text[..end];
    if end == text.len() {
        return head;
    }
    match head.rfind(' ') {
        Some(space) if space >= head.len() / 2 => &head[..=space],
        _ => head,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every part fits, none is blank, and every part's code fences are balanced.
    fn check(parts: &[String], max: usize) {
        for part in parts {
            assert!(
                part.chars().count() <= max,
                "{} > {max}: {part:?}",
                part.chars().count()
            );
            assert!(!part.trim().is_empty(), "an empty part in {parts:?}");
            let fences = part.lines().filter(|l| fence(l).is_some()).count();
            assert!(fences % 2 == 0, "unbalanced fences in {part:?}");
        }
    }

    /// The text again, without the fences the split added.
    fn rejoin(parts: &[String]) -> String {
        let mut out = String::new();
        for (i, part) in parts.iter().enumerate() {
            let mut lines: Vec<&str> = part.lines().collect();
            if i > 0 && parts[i - 1].ends_with("```") && fence(lines[0]).is_some() {
                // A reopened block: drop the reopening fence and the previous close.
                lines.remove(0);
                if out.ends_with("```\n") {
                    out.truncate(out.len() - 4);
                }
            }
            for line in lines {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    #[test]
    fn a_short_text_is_one_message_and_a_blank_one_none() {
        assert_eq!(split("hello\nworld", 2000), ["hello\nworld"]);
        assert!(split("\n \n", 2000).is_empty());
        assert_eq!(plan("", 2000, 12_000), Outgoing::Parts(Vec::new()));
    }

    #[test]
    fn a_3000_character_answer_is_two_messages_with_its_code_block_intact() {
        let prose = "Here is the change.\n".repeat(40); // 800 characters
        let code = (0..80)
            .map(|i| format!("let value_{i:02} = compute({i});\n"))
            .collect::<String>(); // ~2200
        let text = format!("{prose}```rust\n{code}```\nThat is all.\n");
        assert!(text.chars().count() > 2600);
        let parts = split(&text, 2000);
        assert_eq!(parts.len(), 2, "{parts:#?}");
        check(&parts, 2000);
        assert!(parts[0].ends_with("```"), "the first part closes the block");
        assert!(
            parts[1].starts_with("```rust\n"),
            "the second reopens it with its language"
        );
        assert_eq!(rejoin(&parts), text);
    }

    #[test]
    fn lines_longer_than_a_message_are_cut_at_spaces() {
        let text = "word ".repeat(1000); // 5000 characters, one line
        let parts = split(&text, 2000);
        assert_eq!(parts.len(), 3);
        check(&parts, 2000);
        assert!(
            parts
                .iter()
                .all(|p| p.ends_with("word") || p.ends_with("word "))
        );
        assert_eq!(parts.concat().replace(' ', ""), text.replace(' ', ""));
        // No space at all: cut anywhere, on character boundaries.
        let wide = "é".repeat(4500);
        let parts = split(&wide, 2000);
        check(&parts, 2000);
        assert_eq!(parts.concat(), wide);
    }

    #[test]
    fn many_sizes_never_break_the_rules() {
        let block = "```\nfn main() {}\n```\n";
        for n in [1usize, 7, 50, 130, 400] {
            let text = format!(
                "{}\n{}{}",
                "x ".repeat(n),
                block.repeat(n),
                "tail line\n".repeat(n)
            );
            for max in [40, 100, 2000] {
                let parts = split(&text, max);
                check(&parts, max);
            }
        }
    }

    #[test]
    fn a_very_long_answer_becomes_a_file_with_a_preview() {
        let text = "line of output\n".repeat(1000); // 15,000 characters
        let Outgoing::File { preview, content } = plan(&text, 2000, 12_000) else {
            panic!("a file");
        };
        assert_eq!(content, text);
        assert!(preview.chars().count() <= 2000);
        assert!(preview.contains("15000 characters in all"));
        // Up to the threshold it is split instead.
        let text = "line of output\n".repeat(300); // 4,500 characters
        assert!(matches!(plan(&text, 2000, 12_000), Outgoing::Parts(p) if p.len() == 3));
    }
}
