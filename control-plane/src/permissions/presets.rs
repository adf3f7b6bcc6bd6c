//! The built-in profiles `open`, `standard` and `locked`.
//!
//! **Read-only means read-only.** What `standard` runs without asking (`ls`, `cat`,
//! `head`, `tail`, `wc`, `grep`, `rg`, `find`, `pwd`, `git status|diff|log|show|branch`)
//! must neither write nor run a program the agent chose. The rules are the first wall
//! (git's configuration, `worker/src/tools/safe_env.rs`, is the second):
//! The rules refuse every option found that writes or runs something: `rg --pre`
//! and `--hostname-bin`; `find -exec|-execdir|-ok|-okdir|-delete|-fprint*|-fls`;
//! `git … --output`, `--no-index`, and anything between `git` and its subcommand
//! (`-c`, `--config-env`, `-C`, `--exec-path`, `--git-dir`); signature checks
//! (`--show-signature`, `%G…` in a format: gpg reads `~/.gnupg/gpg.conf`, where
//! `dirmngr-program` names a program gpg starts on an unknown key); `wc --files0-from` (file
//! names, absolute ones too, read from a file); a leading `VAR=value` (so no
//! `GREP_OPTIONS` or `GIT_*`). `engine_tests::read_only_commands_cannot_run_programs_or_write`
//! holds the list. The file tools ask before writing a path with a `.git`,
//! `.gitattributes`, `.gitmodules` or `.envrc` component (any case, any depth).
//! Redirections stay in the command's text, so the rules for read-only commands accept
//! only words free of shell syntax (no `;&|<>$` or backticks, no absolute or `..` paths,
//! no word starting with a glob, no quoted word starting with `-`).
//!
//! Each rule carries examples that are checked whenever the preset is compiled (and by a
//! unit test), so a preset cannot ship with a rule that does not do what it says.
//!
//! The regex crate has no look-ahead, so "anything but X" is spelt out with character
//! classes; the pieces are built by the functions below and named after what they accept.

use super::profile::{ProfileSpec, RuleSpec};

/// The specification of a preset, or `None` for an unknown name.
pub(super) fn spec(name: &str) -> Option<ProfileSpec> {
    match name {
        "open" => Some(open()),
        "standard" => Some(standard()),
        "locked" => Some(locked()),
        _ => None,
    }
}

/// `open`: everything is allowed, nothing asks.
fn open() -> ProfileSpec {
    ProfileSpec {
        allow: vec![RuleSpec::with_examples(
            "(?s:.*)",
            &[
                "tool:bash:rm -rf /",
                "tool:bash:cat <<EOF\nx\nEOF",
                "tool:self_edit:permissions:open",
                "",
            ],
            &[],
        )],
        ask: vec![],
    }
}

/// `locked`: reading files inside the workspace and nothing else.
fn locked() -> ProfileSpec {
    ProfileSpec {
        allow: vec![read_files()],
        ask: vec![],
    }
}

/// `standard`: files inside the workspace are read and written freely, a few read-only
/// commands run without asking, every other command and deleting files ask, and an agent
/// edits its own prompt, docs, identity (SOUL.md, USER.md) and memory but asks before
/// changing its permissions or model.
fn standard() -> ProfileSpec {
    let path = rel_path();
    let write_tools = r"tool:(?:create_file|str_replace|file\.write|file\.create|file\.patch)";
    ProfileSpec {
        allow: vec![
            read_files(),
            RuleSpec::with_examples(
                format!("{write_tools}:{}", writable_path()),
                &[
                    "tool:create_file:src/a.rs",
                    "tool:str_replace:README.md",
                    "tool:file.write:docs/notes v2.txt",
                    "tool:file.create:.gitignore",
                    "tool:file.patch:.github/workflows/ci.yml",
                    "tool:create_file:a..b/x",
                    "tool:create_file:.gitconfig",
                    "tool:create_file:.gitattributes.bak",
                    "tool:create_file:.env",
                ],
                &[
                    "tool:create_file:../x",
                    "tool:create_file:src/../../etc/passwd",
                    "tool:create_file:/etc/passwd",
                    "tool:create_file:.git/config",
                    "tool:file.write:sub/.GIT/hooks/pre-commit",
                    "tool:create_file:.gitattributes",
                    "tool:str_replace:sub/.gitattributes",
                    "tool:file.create:.gitmodules",
                    "tool:file.patch:.envrc",
                    "tool:create_file:",
                    "tool:file.delete:src/a.rs",
                ],
            )
    .about("create_file, str_replace, file.write, file.create or file.patch of a path inside the workspace with no component named .git, .gitattributes, .gitmodules or .envrc"),
            read_only_commands(),
            RuleSpec::with_examples(
                r"tool:bash:pwd(?:[ \t]+-[LP])*",
                &["tool:bash:pwd", "tool:bash:pwd -P"],
                &["tool:bash:pwd; rm x", "tool:bash:pwdx"],
            ),
            // Reading and stopping the agent's own background jobs (starting one is
            // a bash command, checked as such), by their names old and new.
            RuleSpec::with_examples(
                r"tool:(?:job|task)_(?:output|stop):[0-9]+",
                &[
                    "tool:job_output:1",
                    "tool:job_stop:12",
                    "tool:task_output:1",
                    "tool:task_stop:12",
                ],
                &[
                    "tool:task_output:",
                    "tool:job_output:",
                    "tool:task_stop:1; rm x",
                    "tool:task_kill:1",
                ],
            ),
            ripgrep(),
            find(),
            git_read(),
            git_branch(),
            RuleSpec::with_examples(
                r"tool:self_edit:system_prompt(?::(?s:.*))?",
                &[
                    "tool:self_edit:system_prompt",
                    "tool:self_edit:system_prompt:You are…\nBe brief.",
                ],
                &[
                    "tool:self_edit:system_prompts",
                    "tool:self_edit:permissions:open",
                ],
            ),
            RuleSpec::with_examples(
                format!("tool:self_edit:docs(?::{path})?"),
                &[
                    "tool:self_edit:docs",
                    "tool:self_edit:docs:README.md",
                    "tool:self_edit:docs:how/to.md",
                ],
                &[
                    "tool:self_edit:docs:../agent.json",
                    "tool:self_edit:docs:/etc/passwd",
                ],
            )
            .about("self_edit of the agent's own docs, or of a path inside them"),
            // Its own identity and memory, kept by the control plane beside docs/
            // (memory_get is jailed to memory/ by its executor).
            RuleSpec::with_examples(
                r"tool:self_edit:identity:(?:SOUL|USER)\.md",
                &[
                    "tool:self_edit:identity:SOUL.md",
                    "tool:self_edit:identity:USER.md",
                ],
                &[
                    "tool:self_edit:identity:HEARTBEAT.md",
                    "tool:self_edit:identity:../agent.json",
                ],
            )
            .about("self_edit of the agent's own SOUL.md or USER.md"),
            RuleSpec::with_examples(
                r"tool:(?:remember|log_note|memory_get|memory_search):(?s:.*)",
                &[
                    "tool:remember:The user prefers metric units.",
                    "tool:log_note:",
                    "tool:memory_get:MEMORY.md",
                    "tool:memory_search:metric units",
                ],
                &["tool:rememberx:a", "tool:bash:remember"],
            )
            .about("remember, log_note, memory_get or memory_search: the agent's own memory"),
        ],
        ask: vec![
            RuleSpec::with_examples(
                format!(r"tool:file\.delete:{path}"),
                &[
                    "tool:file.delete:build/out.o",
                    "tool:file.delete:.git/index.lock",
                ],
                &["tool:file.delete:../x", "tool:file.delete:/etc/passwd"],
            )
            .about("file.delete of a path inside the workspace"),
            RuleSpec::with_examples(
                format!("{write_tools}:{path}"),
                &[
                    "tool:create_file:.git/config",
                    "tool:file.write:sub/.git/hooks/pre-commit",
                    "tool:create_file:.gitattributes",
                    "tool:str_replace:.envrc",
                ],
                &["tool:create_file:.git/../../x", "tool:create_file:/tmp/x"],
            )
            .about("writing any path inside the workspace, .git and the like included"),
            RuleSpec::with_examples(
                r"tool:bash:(?s:.*)",
                &[
                    "tool:bash:rm -rf build",
                    "tool:bash:cat <<EOF\nx\nEOF",
                    "tool:bash:",
                ],
                &["tool:bashx:ls", "tool:view:bash"],
            ),
            RuleSpec::with_examples(
                r"tool:self_edit:(?:permissions|model)(?::(?s:.*))?",
                &[
                    "tool:self_edit:permissions:open",
                    "tool:self_edit:model:gpt-4o",
                ],
                &["tool:self_edit:modelx", "tool:self_edit:docs:a.md"],
            ),
        ],
    }
}

/// Reading files, listing and searching inside the workspace.
fn read_files() -> RuleSpec {
    RuleSpec::with_examples(
        format!(
            r"tool:(?:view|file\.read|file\.list|file\.search):(?:{})?",
            rel_path()
        ),
        &[
            "tool:view:README.md",
            "tool:view:src/main.rs",
            "tool:file.read:./src/a b.rs",
            "tool:file.list:",
            "tool:file.list:src/",
            "tool:file.search:.git/HEAD",
            "tool:view:...hidden",
        ],
        &[
            "tool:view:../secret",
            "tool:view:src/../../etc/passwd",
            "tool:view:src/..",
            "tool:file.read:/etc/passwd",
            "tool:file.read:src/a.rs\n../x",
            "tool:file.delete:src/a.rs",
            "tool:create_file:src/a.rs",
            "tool:viewer:a",
        ],
    )
    .about("view, file.read, file.list or file.search of a path inside the workspace")
}

/// `ls`, `cat`, `head`, `tail`, `wc`, `grep` on workspace-relative paths. `wc` takes no
/// long option starting `--f` (`--files0-from=list`, or any abbreviation of it, reads
/// file names from a file, where they may be absolute).
fn read_only_commands() -> RuleSpec {
    let (opt, arg) = (option(), argument(&word()));
    let wc_opt = format!(
        r"-(?:[A-Za-z0-9_][A-Za-z0-9_-]*|-(?:[a-eg-zA-Z0-9_][A-Za-z0-9_-]*)?)?(?:={})?",
        value()
    );
    RuleSpec::with_examples(
        format!(
            r"tool:bash:(?:(?:ls|cat|head|tail|grep)(?:{SEP}(?:{opt}|{arg}))*|wc(?:{SEP}(?:{wc_opt}|{arg}))*)"
        ),
        &[
            "tool:bash:ls",
            "tool:bash:ls -la src",
            "tool:bash:cat src/main.rs",
            "tool:bash:head -n 20 README.md",
            "tool:bash:tail -n +5 Cargo.toml",
            "tool:bash:wc -l src/lib.rs",
            "tool:bash:wc --lines --total=never -",
            "tool:bash:grep --fixed-strings x src",
            "tool:bash:grep -rn 'fn main' src",
            "tool:bash:grep -rn \"TODO\" .",
            "tool:bash:grep -c 'a|b;c' ./src",
            "tool:bash:ls 'a;b'",
            "tool:bash:ls --color=never src/*.rs",
            "tool:bash:cat .env.example",
        ],
        &[
            "tool:bash:cat x > /etc/passwd",
            "tool:bash:cat /etc/passwd",
            "tool:bash:cat '/etc/passwd'",
            "tool:bash:cat ../../chorus.db",
            "tool:bash:cat \"src/../../x\"",
            "tool:bash:cat ~/.ssh/id_rsa",
            "tool:bash:cat .*/agent.json",
            "tool:bash:cat .?/agent.json",
            "tool:bash:cat *",
            "tool:bash:cat $(rm -rf ~)",
            "tool:bash:cat \"$HOME/x\"",
            "tool:bash:cat `id`",
            "tool:bash:wc --files0-from=names",
            "tool:bash:wc --files0-from names",
            "tool:bash:wc --f=names",
            "tool:bash:wc '--files0-from=names'",
            "tool:bash:grep -f /etc/shadow x",
            "tool:bash:grep --file=/etc/shadow x",
            "tool:bash:grep '--file=/x' y",
            "tool:bash:ls; rm -rf /",
            "tool:bash:cat x | sh",
            "tool:bash:ls &",
            "tool:bash:cat 'unbalanced",
            "tool:bash:cat a\nrm b",
            "tool:bash:lsof",
            "tool:bash:ls -la\\",
        ],
    )
    .about("ls, cat, head, tail, wc or grep with options and workspace paths, nothing else on the line")
}

/// `rg`, without `--pre` (runs a program on every file it searches) or `--hostname-bin`
/// (runs a program to name the host in hyperlinks). Long options starting with `--p…`
/// or `--ho…` are left out as a whole, so abbreviations cannot get through either.
fn ripgrep() -> RuleSpec {
    let value = value();
    let rg_opt = format!(
        r"(?:-[A-Za-z0-9_]*|--(?:(?:[a-gi-oq-zA-Z0-9_]|p[a-qs-zA-Z0-9_]|pr[a-df-zA-Z0-9_]|h[a-np-zA-Z0-9_])[A-Za-z0-9_-]*(?:={value})?)?)"
    );
    let arg = argument(&word());
    RuleSpec::with_examples(
        format!(r"tool:bash:rg(?:{SEP}(?:{rg_opt}|{arg}))*"),
        &[
            "tool:bash:rg TODO",
            "tool:bash:rg -n --type=rust 'fn main' src",
            "tool:bash:rg --files",
            "tool:bash:rg -g '*.rs' -A3 foo -- src",
            "tool:bash:rg --hidden --heading -i x",
        ],
        &[
            "tool:bash:rg --pre=sh x",
            "tool:bash:rg --pre sh x",
            "tool:bash:rg --pr=sh x",
            "tool:bash:rg '--pre=sh' x",
            "tool:bash:rg --hostname-bin=./x --hyperlink-format=default x",
            "tool:bash:rg x *",
            "tool:bash:rg x /etc",
        ],
    )
    .about("rg with options and workspace paths, without --pre or --hostname-bin")
}

/// `find` with predicates that only read and print (no `-exec`, `-delete`, `-fprint`…).
fn find() -> RuleSpec {
    let predicates = "name|iname|path|ipath|wholename|iwholename|regex|iregex|type|xtype|\
                      maxdepth|mindepth|size|mtime|mmin|atime|amin|ctime|cmin|newer|empty|\
                      print|print0|printf|ls|not|and|or|a|o|prune|perm|user|group|readable|\
                      writable|executable|links|depth|follow|L|H|P";
    let arg = argument(&word());
    RuleSpec::with_examples(
        format!(r"tool:bash:find(?:{SEP}(?:-(?:{predicates})|-[0-9]+[a-zA-Z]?|{arg}))*"),
        &[
            "tool:bash:find",
            "tool:bash:find . -name '*.rs' -type f",
            "tool:bash:find src -maxdepth 2 -mtime -1 -print",
            "tool:bash:find -L docs -iname \"*.md\"",
        ],
        &[
            "tool:bash:find . -exec rm {} ;",
            "tool:bash:find . -delete",
            "tool:bash:find . -fprint out",
            "tool:bash:find . -execdir sh",
            "tool:bash:find . '-delete'",
            "tool:bash:find / -name x",
            "tool:bash:find .. -name x",
            "tool:bash:find * -name x",
        ],
    )
    .about("find in the workspace with predicates that only read and print (no -exec, -delete, -fprint…)")
}

/// `git status|diff|log|show`, without `--output` (it writes a file), `--no-index` (it
/// reads files outside the repository), options before the subcommand (`-c` sets
/// configuration that can run programs) or signature checks (`--show-signature`, any
/// long option starting `--show-s`, and `%G` in a format): they run gpg, which reads
/// its own configuration from `GNUPGHOME` or `~/.gnupg`, and a `gpg.conf` there can
/// name a program gpg starts (`dirmngr-program`) on meeting an unknown key.
fn git_read() -> RuleSpec {
    let value = value();
    let long = format!(
        r"--(?:(?:[a-mp-rt-zA-Z0-9_]|n[a-np-zA-Z0-9_-]|no[A-Za-z0-9_]|no-[a-hj-zA-Z0-9_-]|s[a-gi-zA-Z0-9_-]|sh[a-np-zA-Z0-9_-]|sho[a-vx-zA-Z0-9_-]|show[A-Za-z0-9_]|show-[a-rt-zA-Z0-9_-])[A-Za-z0-9_-]*|n|no|no-|s|sh|sho|show|show-|oneline)?(?:={value})?"
    );
    let arg = argument(&git_word());
    let args = forbid_percent_g(&format!(r"(?:{SEP}(?:-[A-Za-z0-9_]*|{long}|{arg}))*"));
    RuleSpec::with_examples(
        format!(r"tool:bash:git{SEP}(?:status|diff|log|show){args}"),
        &[
            "tool:bash:git status",
            "tool:bash:git status --porcelain -b",
            "tool:bash:git diff --stat HEAD~1..HEAD",
            "tool:bash:git diff --no-color --name-only main...feature -- src",
            "tool:bash:git log --oneline -n 20",
            "tool:bash:git log --format=%H --since=2.weeks",
            "tool:bash:git show HEAD:src/main.rs",
            "tool:bash:git log -p 'fix bug'",
            "tool:bash:git log --format=%h%x09%an%x09%s --stat --shortstat --show-notes",
            "tool:bash:git log --format '%h %an %ad' --date=short",
            "tool:bash:git log --pretty=%H%x00%gs --no-show-signature",
        ],
        &[
            "tool:bash:git status; rm -rf /",
            "tool:bash:git status && curl http://x",
            "tool:bash:git diff --output=/tmp/x",
            "tool:bash:git diff --out=x",
            "tool:bash:git log --show-signature",
            "tool:bash:git show --show-sig HEAD",
            "tool:bash:git log --format=%G?",
            "tool:bash:git log --pretty=format:%h%GS",
            "tool:bash:git log --format '%h %GK'",
            "tool:bash:git log --format \"%GG\"",
            "tool:bash:git log --format=x.%GF",
            "tool:bash:git diff --no-index /etc/passwd x",
            "tool:bash:git diff --no-index a b",
            "tool:bash:git -c core.pager=sh log",
            "tool:bash:git -C .. status",
            "tool:bash:git log > x",
            "tool:bash:git show ../x",
            "tool:bash:git diff HEAD -- ../../x",
            "tool:bash:git statusx",
            "tool:bash:git commit -m x",
        ],
    )
    .about("git status, diff, log or show, without --output, --no-index, options before the subcommand or signature checks")
}

/// `regex` with `%` never followed by `G` inside any character class: a class that
/// admits `%` becomes "a character other than `%`, or `%` and one that is neither `%`
/// nor `G`", so no match contains `%G` (git's signature placeholders) and none ends in
/// `%`. A positive class must spell capitals as `A-Z`.
fn forbid_percent_g(regex: &str) -> String {
    let chars: Vec<char> = regex.chars().collect();
    let mut out = String::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                out.extend(&chars[i..(i + 2).min(chars.len())]);
                i += 2;
            }
            '[' => {
                let start = i;
                i += 1;
                while chars[i] != ']' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                i += 1;
                let class: String = chars[start..i].iter().collect();
                out.push_str(&class_without_percent_g(&class));
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

fn class_without_percent_g(class: &str) -> String {
    let inner = &class[1..class.len() - 1];
    if let Some(negated) = inner.strip_prefix('^') {
        // `%` and `G` first: a class may end in `-`, which would then start a range.
        return format!("(?:[^%{negated}]|%[^%G{negated}])");
    }
    if !inner.contains('%') {
        return class.to_string();
    }
    let rest = inner.replace('%', "");
    assert!(rest.contains("A-Z"), "spell capitals as A-Z in {class}");
    format!("(?:[{rest}]|%[{}])", rest.replace("A-Z", "A-FH-Z"))
}

/// `git branch` listing forms only (any name argument would create or delete a branch).
fn git_branch() -> RuleSpec {
    RuleSpec::with_examples(
        format!(
            r"tool:bash:git{SEP}branch(?:{SEP}(?:-a|-r|-v|-vv|-l|--all|--remotes|--verbose|--list|--show-current|--no-color|--merged|--no-merged))*"
        ),
        &[
            "tool:bash:git branch",
            "tool:bash:git branch -a -vv",
            "tool:bash:git branch --show-current",
        ],
        &[
            "tool:bash:git branch -D main",
            "tool:bash:git branch new",
            "tool:bash:git branch -m x",
        ],
    )
    .about("git branch listing forms only")
}

/// Blanks between words.
const SEP: &str = r"[ \t]+";
/// Unquoted word characters with no meaning to bash, except `.` (see [`word`]).
const WORD_CHAR: &str = r"[A-Za-z0-9_,:+@%^=/~*-]";
/// What may follow a `.`: not another `.` (no `..`) and not `*` (`.*` can match `..`).
const AFTER_DOT: &str = r"[A-Za-z0-9_,:+@%^=/~-]";
/// What may start a word: not `-` (an option), `/` (an absolute path), `~` (the home
/// directory) or `*` (a glob can expand to file names that read as options, like
/// `--pre=sh`).
const WORD_START: &str = r"[A-Za-z0-9_,:+@%^=]";

/// An unquoted workspace-relative word: never absolute, never `..`, no shell syntax.
fn word() -> String {
    format!(r"(?:(?:{WORD_START}|\.{AFTER_DOT})(?:{WORD_CHAR}|\.{AFTER_DOT})*\.?|\.)")
}

/// Like [`word`], but `..` may join two revision names (`main..feature`, `HEAD~1...HEAD`).
fn git_word() -> String {
    format!(
        r"(?:(?:{WORD_START}|\.{AFTER_DOT})(?:{WORD_CHAR}|\.{AFTER_DOT}|\.\.\.?[A-Za-z0-9_])*\.?|\.)"
    )
}

/// The value after `--option=`: like a word, but it may start with `*` or `-`, which
/// cannot turn it into another option.
fn value() -> String {
    format!(r"(?:(?:{WORD_START}|[*-]|\.{AFTER_DOT})(?:{WORD_CHAR}|\.{AFTER_DOT})*\.?|\.)?")
}

/// An option such as `-la`, `--color=never`.
fn option() -> String {
    format!(r"-[A-Za-z0-9_-]*(?:={})?", value())
}

/// One argument: an unquoted word, or a whole single- or double-quoted string that does
/// not start with `/` or `-` and contains no `..` (nor, in double quotes, `$`, `` ` ``
/// or `\`, which still expand there).
fn argument(word: &str) -> String {
    let single = r"'(?:(?:[^'\n./-]|\.[^'\n.])(?:[^'\n.]|\.[^'\n.])*\.?|\.)?'";
    let double = r#""(?:(?:[^"\n./$`\\-]|\.[^"\n.$`\\])(?:[^"\n.$`\\]|\.[^"\n.$`\\])*\.?|\.)?""#;
    format!("(?:{word}|{single}|{double})")
}

/// A workspace-relative path: components separated by `/`, none of them `..`, not
/// starting with `/`. May end with `/`.
fn rel_path() -> String {
    let c = component_except(&[".."]);
    format!("{c}(?:/+{c})*/*")
}

/// A path that may be written without asking: relative, no `..`, and no component (in
/// any case) naming a file that tells a tool to run a program: `.git` (its `config`
/// names hooks, fsmonitor, diff and filter drivers; git runs some even for `git
/// status`), `.gitattributes` (which files those drivers apply to), `.gitmodules`
/// (submodule URLs and paths) and `.envrc` (direnv runs it in a shell that enters the
/// directory). `.gitconfig` is free: tool processes ignore global git configuration.
fn writable_path() -> String {
    let c = component_except(&["..", ".git", ".gitattributes", ".gitmodules", ".envrc"]);
    format!("{c}(?:/+{c})*")
}

/// One non-empty path component other than `names` (ASCII letters in any case). Spelt
/// out over the prefixes of the names: a component either leaves every name at some
/// character, or is a proper prefix of one, or runs past the end of one.
pub(super) fn component_except(names: &[&str]) -> String {
    let names: Vec<Vec<char>> = names
        .iter()
        .map(|n| n.chars().map(|c| c.to_ascii_lowercase()).collect())
        .collect();
    let mut alternatives = Vec::new();
    spell_out(&names, &mut Vec::new(), &mut alternatives);
    format!("(?:{})", alternatives.join("|"))
}

fn spell_out(names: &[Vec<char>], prefix: &mut Vec<char>, out: &mut Vec<String>) {
    let literal: String = prefix.iter().map(|&c| char_pattern(c)).collect();
    if !prefix.is_empty() && !names.iter().any(|n| n == prefix) {
        out.push(literal.clone());
    }
    let mut next: Vec<char> = names
        .iter()
        .filter(|n| n.len() > prefix.len() && n.starts_with(prefix))
        .map(|n| n[prefix.len()])
        .collect();
    next.sort_unstable();
    next.dedup();
    let excluded: String = next.iter().map(|&c| class_chars(c)).collect();
    out.push(format!(r"{literal}[^/\n{excluded}][^/\n]*"));
    for c in next {
        prefix.push(c);
        spell_out(names, prefix, out);
        prefix.pop();
    }
}

fn char_pattern(c: char) -> String {
    if c.is_ascii_alphabetic() {
        format!("[{}{}]", c.to_ascii_lowercase(), c.to_ascii_uppercase())
    } else {
        regex::escape(&c.to_string())
    }
}

fn class_chars(c: char) -> String {
    if c.is_ascii_alphabetic() {
        format!("{}{}", c.to_ascii_lowercase(), c.to_ascii_uppercase())
    } else {
        format!(r"\{c}")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{PRESETS, Profile};
    use super::*;

    #[test]
    fn every_preset_compiles_with_its_examples() {
        for name in PRESETS {
            let spec = spec(name).unwrap();
            if let Err(e) = Profile::compile(name, &spec) {
                panic!("preset {name}: {e}");
            }
            assert!(Profile::preset(name).is_some(), "{name}");
        }
        assert!(spec("strict").is_none());
    }

    /// An explanation names a rule by its words when its pattern is too long to read
    /// (the bash rules run to a thousand characters).
    #[test]
    fn every_long_preset_rule_says_in_words_what_it_accepts() {
        for name in PRESETS {
            let spec = spec(name).unwrap();
            for rule in spec.allow.iter().chain(&spec.ask) {
                assert!(
                    rule.pattern.chars().count() <= 80 || rule.about.is_some(),
                    "preset {name}: a {}-character rule without words: {}",
                    rule.pattern.chars().count(),
                    rule.pattern
                );
            }
        }
        let profile = Profile::preset("standard").unwrap();
        let e = profile.explain("tool:bash:ls -la src");
        assert_eq!(
            e.reason,
            "allowed by allow[2] (ls, cat, head, tail, wc or grep with options and workspace \
             paths, nothing else on the line)"
        );
        assert!(e.pattern.unwrap().chars().count() > 500);
    }

    #[test]
    fn component_except_accepts_everything_but_the_names() {
        let re = regex::Regex::new(&format!("^{}$", component_except(&["..", ".git"]))).unwrap();
        for ok in [
            ".", "a", ".g", ".gi", ".gitx", ".github", "...", "..a", ".x", "git", "a.git",
        ] {
            assert!(re.is_match(ok), "{ok}");
        }
        for bad in ["..", ".git", ".GIT", ".Git", "", "a/b", "a\nb"] {
            assert!(!re.is_match(bad), "{bad:?}");
        }
    }
}
