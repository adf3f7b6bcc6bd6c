//! Splitting one bash command line into the simple commands bash would run.
//!
//! This is the careful half of [`super::bash_actions`]: a small lexer that follows bash's
//! quoting (single, double, `$'…'`, backslash), its separators (`;` `&&` `||` `|` `|&` `&`
//! and newlines), groups (`( … )`, `{ …; }`) and substitutions (`$( … )`, backticks,
//! `<( … )`, `>( … )`, `${ … }`), and returns the text of every simple command, inner ones
//! included.
//!
//! It does not try to be a whole bash parser. Whenever the line uses something it does not
//! model exactly (here-documents, arithmetic, `case`, line continuations, unbalanced quotes
//! or brackets, comments with shell syntax in them, deep nesting, …) it sets
//! [`Split::unsure`], and the caller then adds every other reading of the line as well.
//! The invariant is: when `unsure` is false, every command bash would run appears in
//! [`Split::commands`] as its own entry.

/// Nesting deeper than this is not followed (the line is then marked unsure), so hostile
/// input cannot exhaust the stack.
const MAX_DEPTH: usize = 64;

/// The simple commands of one command line.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Split {
    /// Every simple command, trimmed, in the order in which they start; an outer command
    /// comes before the commands substituted into it.
    pub commands: Vec<String>,
    /// True when the line uses syntax this splitter does not model exactly.
    pub unsure: bool,
}

/// Splits `line` into its simple commands.
pub(super) fn split(line: &str) -> Split {
    split_at_depth(line, 0)
}

fn split_at_depth(line: &str, depth: usize) -> Split {
    let mut s = Splitter {
        src: line,
        b: line.as_bytes(),
        pos: 0,
        out: Vec::new(),
        unsure: false,
        depth,
    };
    s.parse_list(Close::Eof);
    Split {
        commands: s.out.into_iter().flatten().collect(),
        unsure: s.unsure,
    }
}

/// Reserved words that may precede a command without changing which command runs. They
/// are removed so that `then rm -rf x` is checked as `rm -rf x`.
const PREFIX_KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "time", "esac",
];

/// Reserved words that introduce syntax this splitter does not model (`case x in a) …`,
/// `coproc NAME { … }`).
const UNMODELLED_KEYWORDS: &[&str] = &["case", "coproc"];

/// Removes bash's blanks (space and tab only: bash treats every other character, `\r`
/// included, as part of a word).
pub(super) fn trim_blanks(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// Removes leading reserved words (`then`, `do`, `!`, …) from one command's text.
pub(super) fn strip_keywords(mut text: &str) -> &str {
    loop {
        let end = text.find([' ', '\t']).unwrap_or(text.len());
        if PREFIX_KEYWORDS.contains(&&text[..end]) {
            text = trim_blanks(&text[end..]);
        } else {
            return text;
        }
    }
}

/// What ends the command list being parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Close {
    Eof,
    /// `)` of a subshell or a `$(`, `<(`, `>(` substitution.
    Paren,
    /// `}` of a `{ …; }` group.
    Brace,
}

/// How one simple command ended.
enum End {
    Separator,
    Closed,
    Eof,
}

struct Splitter<'a> {
    src: &'a str,
    b: &'a [u8],
    pos: usize,
    /// One slot per simple command, reserved when it starts so that an outer command
    /// precedes the commands nested in it; `None` for commands that turned out empty.
    out: Vec<Option<String>>,
    unsure: bool,
    depth: usize,
}

impl Splitter<'_> {
    fn peek(&self) -> Option<u8> {
        self.b.get(self.pos).copied()
    }

    fn peek_at(&self, i: usize) -> Option<u8> {
        self.b.get(i).copied()
    }

    /// Gives up on the rest of the line: it is then only checked as a whole (and by the
    /// caller's other readings).
    fn give_up(&mut self) {
        self.unsure = true;
        self.pos = self.b.len();
    }

    /// Whether a word ending at `i` ends there (blank, operator or end of input).
    fn word_ends_at(&self, i: usize) -> bool {
        matches!(
            self.peek_at(i),
            None | Some(b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')' | b'<' | b'>')
        )
    }

    fn parse_list(&mut self, close: Close) {
        loop {
            match self.parse_command(close) {
                End::Separator => {}
                End::Closed => return,
                End::Eof => {
                    if close != Close::Eof {
                        // An unterminated group or substitution.
                        self.unsure = true;
                    }
                    return;
                }
            }
        }
    }

    /// Parses one simple command up to its separator and records its text.
    fn parse_command(&mut self, close: Close) -> End {
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        // `}` closes a brace group only where a command could start.
        if self.peek() == Some(b'}') && self.word_ends_at(self.pos + 1) {
            if close == Close::Brace {
                self.pos += 1;
                return End::Closed;
            }
            self.unsure = true;
        }
        let slot = self.out.len();
        self.out.push(None);
        let start = self.pos;
        // True where a new word begins: that is where `#` starts a comment and `{` a group.
        // When in doubt it is false, which only ever makes the split finer.
        let mut word_start = true;
        // The command so far is nothing but groups: `(a; b)` is not a command of its own,
        // while `(a; b) > out` is (the redirection writes a file).
        let mut only_groups = true;
        let mut saw_group = false;
        let (text_end, end) = loop {
            let Some(c) = self.peek() else {
                break (self.pos, End::Eof);
            };
            let next = self.peek_at(self.pos + 1);
            match c {
                b'\n' | b';' => {
                    self.pos += 1;
                    break (self.pos - 1, End::Separator);
                }
                b'&' if next == Some(b'>') => {
                    // `&>file`, `&>>file`: a redirection, not a background separator.
                    self.pos += 2;
                    if self.peek() == Some(b'>') {
                        self.pos += 1;
                    }
                    only_groups = false;
                    word_start = true;
                }
                b'&' | b'|' => {
                    let e = self.pos;
                    self.pos += 1;
                    if matches!((c, next), (b'&', Some(b'&')) | (b'|', Some(b'|' | b'&'))) {
                        self.pos += 1;
                    }
                    break (e, End::Separator);
                }
                b')' => {
                    self.pos += 1;
                    if close == Close::Paren {
                        break (self.pos - 1, End::Closed);
                    }
                    // A `)` with nothing open (or `case` patterns): split here and flag it.
                    self.unsure = true;
                    break (self.pos - 1, End::Separator);
                }
                b'(' => {
                    let at_start = only_groups && word_start;
                    // `((…))` is arithmetic; `(` after a word is a function definition, an
                    // array or an extended glob. The inside is still split as commands,
                    // which checks more, never less.
                    if !at_start || next == Some(b'(') {
                        self.unsure = true;
                        only_groups = false;
                    }
                    self.pos += 1;
                    self.nested(Close::Paren);
                    saw_group = true;
                    word_start = at_start;
                }
                b'{' if word_start && matches!(next, Some(b' ' | b'\t' | b'\n')) => {
                    if !only_groups {
                        // `f() { …; }` or `echo { a`: not a group where bash would see one.
                        self.unsure = true;
                        only_groups = false;
                    }
                    self.pos += 1;
                    self.nested(Close::Brace);
                    saw_group = true;
                    word_start = false;
                }
                b' ' | b'\t' => {
                    self.pos += 1;
                    word_start = true;
                }
                b'#' if word_start => {
                    self.comment();
                    only_groups = false;
                }
                b'<' | b'>' => {
                    only_groups = false;
                    word_start = self.redirection(c, next);
                }
                _ => {
                    only_groups = false;
                    word_start = false;
                    self.word_part(false);
                }
            }
        };
        let text = strip_keywords(trim_blanks(&self.src[start..text_end]));
        let first_word = &text[..text.find([' ', '\t']).unwrap_or(text.len())];
        if UNMODELLED_KEYWORDS.contains(&first_word) {
            self.unsure = true;
        }
        let just_groups = only_groups && saw_group;
        if !text.is_empty() && !just_groups {
            self.out[slot] = Some(text.to_string());
        }
        end
    }

    /// Parses a nested command list (subshell, group, substitution).
    fn nested(&mut self, close: Close) {
        if self.depth >= MAX_DEPTH {
            self.give_up();
            return;
        }
        self.depth += 1;
        self.parse_list(close);
        self.depth -= 1;
    }

    /// A comment runs to the end of the line. A comment that contains shell syntax is a
    /// place where a mistaken reading would hide commands, so it makes the line unsure.
    fn comment(&mut self) {
        let end = self.b[self.pos..]
            .iter()
            .position(|&c| c == b'\n')
            .map_or(self.b.len(), |n| self.pos + n);
        if self.b[self.pos..end]
            .iter()
            .any(|c| b"'\"`$;&|(){}<>\\".contains(c))
        {
            self.unsure = true;
        }
        self.pos = end;
    }

    /// Consumes a redirection operator; returns whether a new word starts after it.
    fn redirection(&mut self, c: u8, next: Option<u8>) -> bool {
        match (c, next) {
            (b'<' | b'>', Some(b'(')) => {
                // Process substitution: its commands run, and it is part of a word.
                self.pos += 2;
                self.nested(Close::Paren);
                false
            }
            (b'<', Some(b'<')) => {
                if self.peek_at(self.pos + 2) == Some(b'<') {
                    // `<<<word`: a here-string is an ordinary word.
                    self.pos += 3;
                } else {
                    // A here-document: its body lines are data, not commands, and this
                    // splitter does not model them.
                    self.pos += 2;
                    self.unsure = true;
                }
                true
            }
            (b'>', Some(b'>' | b'&' | b'|')) | (b'<', Some(b'&' | b'>')) => {
                // `>>`, `>&`, `>|` (the `|` is not a pipe), `<&`, `<>`.
                self.pos += 2;
                true
            }
            _ => {
                self.pos += 1;
                true
            }
        }
    }

    /// Consumes one piece of a word: an escape, a quoted string, a substitution or one
    /// plain byte. `in_dq` tells whether this is inside double quotes.
    fn word_part(&mut self, in_dq: bool) {
        match self.peek() {
            Some(b'\\') => {
                if self.peek_at(self.pos + 1) == Some(b'\n') {
                    // A line continuation joins lines before bash reads words, which can
                    // build `$(` or `<<` out of pieces this splitter sees apart.
                    self.unsure = true;
                }
                self.pos = (self.pos + 2).min(self.b.len());
            }
            Some(b'\'') if !in_dq => {
                match self.b[self.pos + 1..].iter().position(|&c| c == b'\'') {
                    Some(n) => self.pos += n + 2,
                    None => self.give_up(),
                }
            }
            Some(b'"') if !in_dq => {
                self.pos += 1;
                self.double_quoted();
            }
            Some(b'`') => {
                self.pos += 1;
                self.backticks();
            }
            Some(b'$') => {
                self.pos += 1;
                self.dollar(in_dq);
            }
            Some(_) => self.pos += 1,
            None => {}
        }
    }

    /// The inside of `"…"`, after the opening quote.
    fn double_quoted(&mut self) {
        loop {
            match self.peek() {
                None => {
                    self.unsure = true;
                    return;
                }
                Some(b'"') => {
                    self.pos += 1;
                    return;
                }
                Some(_) => self.word_part(true),
            }
        }
    }

    /// What follows a `$`.
    fn dollar(&mut self, in_dq: bool) {
        match self.peek() {
            Some(b'(') => {
                if self.peek_at(self.pos + 1) == Some(b'(') {
                    // `$((…))` is arithmetic, where `#` is not a comment.
                    self.unsure = true;
                }
                self.pos += 1;
                self.nested(Close::Paren);
            }
            Some(b'[') => {
                // `$[…]`: old-style arithmetic, not modelled.
                self.unsure = true;
            }
            Some(b'{') => {
                self.pos += 1;
                self.parameter_expansion();
            }
            Some(b'\'') if !in_dq => {
                // `$'…'`: ANSI-C quoting, where `\'` does not end the string.
                self.pos += 1;
                loop {
                    match self.peek() {
                        None => {
                            self.unsure = true;
                            return;
                        }
                        Some(b'\\') => self.pos = (self.pos + 2).min(self.b.len()),
                        Some(b'\'') => {
                            self.pos += 1;
                            return;
                        }
                        Some(_) => self.pos += 1,
                    }
                }
            }
            _ => {}
        }
    }

    /// The inside of `${…}`, after the brace. It ends at the first `}` (ending early only
    /// exposes more text to splitting); quotes, escapes or braces inside depend on context
    /// in bash, so they make the line unsure.
    fn parameter_expansion(&mut self) {
        if self.depth >= MAX_DEPTH {
            self.give_up();
            return;
        }
        self.depth += 1;
        loop {
            match self.peek() {
                None => {
                    self.unsure = true;
                    break;
                }
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\'' | b'"' | b'\\' | b'{') => {
                    self.unsure = true;
                    self.pos += 1;
                }
                Some(b'$' | b'`') => self.word_part(true),
                Some(_) => self.pos += 1,
            }
        }
        self.depth -= 1;
    }

    /// A backtick substitution, after the opening backtick. Its text is unescaped the way
    /// bash does (`\$`, `` \` ``, `\\`) and split on its own.
    fn backticks(&mut self) {
        let mut inner = Vec::new();
        loop {
            match self.peek() {
                None => {
                    self.unsure = true;
                    break;
                }
                Some(b'`') => {
                    self.pos += 1;
                    break;
                }
                Some(b'\\') => match self.peek_at(self.pos + 1) {
                    Some(c @ (b'$' | b'`' | b'\\')) => {
                        inner.push(c);
                        self.pos += 2;
                    }
                    _ => {
                        inner.push(b'\\');
                        self.pos += 1;
                    }
                },
                Some(c) => {
                    inner.push(c);
                    self.pos += 1;
                }
            }
        }
        if self.depth >= MAX_DEPTH {
            self.give_up();
            return;
        }
        // Only ASCII bytes were removed, so the text is still UTF-8; be safe anyway.
        let text = String::from_utf8(inner).unwrap_or_else(|e| {
            self.unsure = true;
            String::from_utf8_lossy(e.as_bytes()).into_owned()
        });
        let sub = split_at_depth(&text, self.depth + 1);
        self.unsure |= sub.unsure;
        self.out.extend(sub.commands.into_iter().map(Some));
    }
}
