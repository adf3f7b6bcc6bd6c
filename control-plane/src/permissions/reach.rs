//! Which tools a rule can ever match, read from the pattern's text.
//!
//! The regex crate cannot intersect languages, so this reads the start of a pattern
//! itself: literal characters, escaped punctuation and groups of alternatives expand into
//! a small set of literal prefixes; anything else (a class, `.`, a quantifier, a flag) ends
//! the prefix there with "anything may follow". That over-approximates what the rule can
//! match, so a tool is only ever reported unreachable when no string starting with
//! `tool:<name>:` can match. Anything this reader does not follow makes the whole rule
//! reach every tool.

/// Prefixes beyond this many are not tracked; the rule then reaches every tool.
const MAX_PREFIXES: usize = 64;

/// What the matches of one pattern can start with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Reach {
    /// Unknown: any action may match.
    Any,
    /// Every match is one of these prefixes (exactly, or followed by anything if open).
    Prefixes(Vec<Prefix>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Prefix {
    text: String,
    /// Anything may follow `text`; otherwise a match is exactly `text`.
    open: bool,
}

impl Reach {
    /// The prefixes as `(text, open)`; `None` for [`Reach::Any`].
    pub(super) fn prefixes(&self) -> Option<Vec<(String, bool)>> {
        match self {
            Reach::Any => None,
            Reach::Prefixes(prefixes) => {
                Some(prefixes.iter().map(|p| (p.text.clone(), p.open)).collect())
            }
        }
    }

    /// Whether some action of `tool` (`tool:<tool>:…`) may match.
    pub(super) fn reaches_tool(&self, tool: &str) -> bool {
        let Reach::Prefixes(prefixes) = self else {
            return true;
        };
        let head = format!("tool:{tool}:");
        prefixes
            .iter()
            .any(|p| p.text.starts_with(&head) || (p.open && head.starts_with(p.text.as_str())))
    }
}

/// `have` plus `more`, without the prefixes another one already covers (an equal one,
/// or one that starts with an open prefix): the set matches the same, and a rule spelt
/// as many alternatives that all start alike (`(?:\.[^.]…|\.g[^i]…|…)`) stays small.
fn simplify(mut have: Vec<Prefix>, more: Vec<Prefix>) -> Vec<Prefix> {
    for p in more {
        let covered =
            |q: &Prefix, p: &Prefix| q == p || (q.open && p.text.starts_with(q.text.as_str()));
        if have.iter().any(|q| covered(q, &p)) {
            continue;
        }
        have.retain(|q| !covered(&p, q));
        have.push(p);
    }
    have
}

/// Reads what `pattern` (a regex that compiles) can match.
pub(super) fn reach(pattern: &str) -> Reach {
    let mut reader = Reader {
        chars: pattern.chars().collect(),
        i: 0,
    };
    match reader.alternation(vec![Prefix::empty()]) {
        Some(prefixes) if reader.i == reader.chars.len() => Reach::Prefixes(prefixes),
        _ => Reach::Any,
    }
}

impl Prefix {
    fn empty() -> Self {
        Prefix {
            text: String::new(),
            open: false,
        }
    }
}

enum Atom {
    Literal(char),
    Group(Vec<Prefix>),
    /// `^`: a no-op at the start of the text, where the engine anchors anyway.
    Start,
    Unknown,
}

struct Reader {
    chars: Vec<char>,
    i: usize,
}

impl Reader {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.i).copied()
    }

    fn peek_at(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    /// Alternatives separated by `|`, each starting from `start`; stops before `)` or at
    /// the end. `None` means give up (reach everything).
    fn alternation(&mut self, start: Vec<Prefix>) -> Option<Vec<Prefix>> {
        let mut all = Vec::new();
        loop {
            all = simplify(all, self.sequence(start.clone())?);
            if all.len() > MAX_PREFIXES {
                return None;
            }
            if self.peek() != Some('|') {
                return Some(all);
            }
            self.i += 1;
        }
    }

    fn sequence(&mut self, mut cur: Vec<Prefix>) -> Option<Vec<Prefix>> {
        loop {
            if matches!(self.peek(), None | Some('|' | ')')) {
                return Some(cur);
            }
            if cur.iter().all(|p| p.open) {
                self.skip_alternative()?;
                return Some(cur);
            }
            let atom = self.atom()?;
            let repeated = matches!(self.peek(), Some('?' | '*' | '+' | '{'));
            match atom {
                _ if repeated => return self.open_here(cur),
                Atom::Unknown => return self.open_here(cur),
                Atom::Start => {
                    if cur.iter().any(|p| !p.open && !p.text.is_empty()) {
                        return self.open_here(cur);
                    }
                }
                Atom::Literal(c) => {
                    for p in cur.iter_mut().filter(|p| !p.open) {
                        p.text.push(c);
                    }
                }
                Atom::Group(alts) => {
                    let mut next = Vec::new();
                    for p in cur {
                        if p.open {
                            next = simplify(next, vec![p]);
                            continue;
                        }
                        let joined = alts.iter().map(|a| Prefix {
                            text: format!("{}{}", p.text, a.text),
                            open: a.open,
                        });
                        next = simplify(next, joined.collect());
                    }
                    if next.len() > MAX_PREFIXES {
                        return None;
                    }
                    cur = next;
                }
            }
        }
    }

    /// Everything from here on is unknown: the current prefixes become open.
    fn open_here(&mut self, mut cur: Vec<Prefix>) -> Option<Vec<Prefix>> {
        for p in &mut cur {
            p.open = true;
        }
        self.skip_alternative()?;
        Some(cur)
    }

    /// Reads one atom. Unknown atoms are left unconsumed for `skip_alternative`.
    fn atom(&mut self) -> Option<Atom> {
        let c = self.peek()?;
        match c {
            '\\' => match self.peek_at(self.i + 1) {
                Some(n) if n.is_ascii_punctuation() => {
                    self.i += 2;
                    Some(Atom::Literal(n))
                }
                _ => Some(Atom::Unknown),
            },
            '(' => {
                if self.peek_at(self.i + 1) == Some('?') {
                    match (self.peek_at(self.i + 2), self.peek_at(self.i + 3)) {
                        (Some(':'), _) => self.i += 3,
                        (Some('<'), _) | (Some('P'), Some('<')) => {
                            // A named group: skip the name.
                            let close = self.chars[self.i..].iter().position(|&c| c == '>')?;
                            self.i += close + 1;
                        }
                        // Flags change how the rest matches (`(?i)`, `(?s:…)`).
                        _ => return Some(Atom::Unknown),
                    }
                } else {
                    self.i += 1;
                }
                let alts = self.alternation(vec![Prefix::empty()])?;
                if self.peek() != Some(')') {
                    return None;
                }
                self.i += 1;
                Some(Atom::Group(alts))
            }
            '^' => {
                self.i += 1;
                Some(Atom::Start)
            }
            '.' | '[' | '$' | '*' | '+' | '?' | '{' => Some(Atom::Unknown),
            other => {
                self.i += 1;
                Some(Atom::Literal(other))
            }
        }
    }

    /// Skips to the `|` or `)` that ends the current alternative (not consumed).
    fn skip_alternative(&mut self) -> Option<()> {
        let mut depth = 0usize;
        while let Some(c) = self.peek() {
            match c {
                '\\' => self.i += 2,
                '[' => self.skip_class()?,
                '(' => {
                    depth += 1;
                    self.i += 1;
                }
                ')' if depth == 0 => return Some(()),
                ')' => {
                    depth -= 1;
                    self.i += 1;
                }
                '|' if depth == 0 => return Some(()),
                _ => self.i += 1,
            }
        }
        self.i = self.i.min(self.chars.len());
        Some(())
    }

    /// Skips a character class starting at `[`, nested classes included.
    fn skip_class(&mut self) -> Option<()> {
        self.i += 1;
        if self.peek() == Some('^') {
            self.i += 1;
        }
        if self.peek() == Some(']') {
            self.i += 1;
        }
        loop {
            match self.peek()? {
                '\\' => self.i += 2,
                '[' => self.skip_class()?,
                ']' => {
                    self.i += 1;
                    return Some(());
                }
                _ => self.i += 1,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(pattern: &str) -> Vec<&'static str> {
        let r = reach(pattern);
        [
            "bash",
            "view",
            "file.read",
            "file.delete",
            "create_file",
            "self_edit",
        ]
        .into_iter()
        .filter(|t| r.reaches_tool(t))
        .collect()
    }

    #[test]
    fn reads_which_tools_a_pattern_can_reach() {
        let all = vec![
            "bash",
            "view",
            "file.read",
            "file.delete",
            "create_file",
            "self_edit",
        ];
        let cases: &[(&str, Vec<&str>)] = &[
            (".*", all.clone()),
            ("(?s:.*)", all.clone()),
            ("tool:bash:.*", vec!["bash"]),
            ("^tool:bash:ls$", vec!["bash"]),
            ("tool:bash:git (?:status|diff)", vec!["bash"]),
            (
                "tool:(?:view|file\\.read):src/.*",
                vec!["view", "file.read"],
            ),
            (
                "tool:file\\.(?:read|delete):.*",
                vec!["file.read", "file.delete"],
            ),
            ("tool:(view|create_file)", vec![]),
            (
                "tool:(?P<t>view):x|tool:self_edit:.*",
                vec!["view", "self_edit"],
            ),
            ("tool:file.read:.*", vec!["file.read", "file.delete"]),
            ("tool:[a-z]+:.*", all.clone()),
            // Many alternatives opening alike count once each, not once per tool.
            (
                &format!(
                    "tool:(?:view|create_file):(?:{})",
                    (0..100)
                        .map(|i| format!(r"\.[^a]{i}"))
                        .collect::<Vec<_>>()
                        .join("|")
                ),
                vec!["view", "create_file"],
            ),
            ("tool:bash?:x", vec!["bash"]),
            ("(?i)tool:bash:.*", all.clone()),
            ("tool:(?:bash|view)?:x", all.clone()),
            ("tool:b(?:a|[sx])sh:.*", vec!["bash"]),
            ("tool:c(?:a|[sx])sh:.*", vec!["create_file"]),
            ("tool:d(?:a|[sx])sh:.*", vec![]),
            ("tool:b(?:a|[s])+:.*", vec!["bash"]),
            ("tool:file\\.read\\:x", vec!["file.read"]),
            ("tool:view:[(|)]|tool:bash:x", vec!["bash", "view"]),
        ];
        for (pattern, expected) in cases {
            regex::Regex::new(pattern).unwrap();
            assert_eq!(&tools(pattern), expected, "{pattern}");
        }
    }
}
