//! Action strings: what a tool call is checked as.
//!
//! Every tool call becomes one or more strings `tool:<name>:<detail>`. For file tools the
//! detail is the workspace-relative path; for `self_edit` it is `<what>[:<value>]`; for
//! `bash` each simple command of the command line is one action (see [`bash_actions`]),
//! and all of them must pass.

use std::collections::HashSet;

use super::bash::{self, strip_keywords, trim_blanks};

/// The action string for one call of `tool` with `detail`: `tool:<tool>:<detail>`.
pub fn tool_action(tool: &str, detail: &str) -> String {
    format!("tool:{tool}:{detail}")
}

/// The tool name in action strings for a tool the model calls: the self-edit tools
/// share `self_edit`, whose detail says what is edited.
pub fn action_tool_name(tool: &str) -> &str {
    if tool.starts_with("self_edit_") {
        "self_edit"
    } else {
        tool
    }
}

/// The tool an action string names (`bash` for `tool:bash:ls`), if it is well formed.
pub fn action_tool(action: &str) -> Option<&str> {
    let rest = action.strip_prefix("tool:")?;
    let end = rest.find(':')?;
    Some(&rest[..end])
}

/// The action strings for one bash command line: one per simple command, so that a
/// command can never ride on an allowed prefix (`git status; rm -rf /` is two actions,
/// `echo $(rm -rf ~)` is `echo $(rm -rf ~)` and `rm -rf ~`).
///
/// When the line uses syntax the splitter does not model exactly (here-documents,
/// arithmetic, `case`, line continuations, unbalanced quotes or brackets, …), the result
/// is the union of several readings, so it never checks less than bash will run:
/// the whole line as one action, the careful split, and a naive split at every character
/// that could separate commands in any reading (`; & | ( ) { }`, backticks, newlines),
/// quotes ignored. A standard profile never allows the whole-line action of such a line,
/// because it contains the construct that made it uncertain.
///
/// Always returns at least one action; an empty command is `tool:bash:`.
pub fn bash_actions(command: &str) -> Vec<String> {
    let mut parts = Vec::new();
    collect(command, &mut parts);
    let mut seen = HashSet::new();
    let mut actions: Vec<String> = parts
        .into_iter()
        .filter(|p| seen.insert(p.clone()))
        .map(|p| tool_action("bash", &p))
        .collect();
    if actions.is_empty() {
        actions.push(tool_action("bash", trim_blanks(command)));
    }
    actions
}

fn collect(line: &str, parts: &mut Vec<String>) {
    let split = bash::split(line);
    if !split.unsure {
        parts.extend(split.commands);
        return;
    }
    let whole = trim_blanks(line);
    if !whole.is_empty() {
        parts.push(whole.to_string());
    }
    parts.extend(split.commands);
    parts.extend(naive_parts(line));
    // Bash removes `\<newline>` before it reads words, so the joined line is one more
    // reading (`r\<newline>m -rf /` runs `rm -rf /`).
    if line.contains("\\\n") {
        let joined = line.replace("\\\n", "");
        collect(&joined, parts);
    }
}

/// Splits at every character that can separate or nest commands in some reading of the
/// line, ignoring quotes and escapes entirely.
fn naive_parts(line: &str) -> impl Iterator<Item = String> + '_ {
    line.split([';', '&', '|', '\n', '(', ')', '{', '}', '`'])
        .map(|p| strip_keywords(trim_blanks(p)))
        .filter(|p| !p.is_empty())
        .map(str::to_string)
}
