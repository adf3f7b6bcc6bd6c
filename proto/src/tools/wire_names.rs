//! Tool names as the model APIs accept them, and back.
//!
//! OpenAI and Anthropic (and the servers that copy them) refuse a request whose tool
//! names do not match `^[a-zA-Z0-9_-]{1,64}$` with a 400. Chorus's own names
//! (`file.read`, used in action strings and profiles) are kept everywhere else; the
//! two wire formats rename at the boundary, both ways, through this module only, and
//! text written for the model (tool descriptions, tool errors, conversations written
//! as text) names tools through [`to_wire`] too, so it says what the model can call.
//!
//! Invariant: `from_wire(to_wire(name)) == name` for every tool in the registry, and
//! no two tools share a wire name (the registry's unit test checks both).

use std::borrow::Cow;

use super::TOOLS;

/// Longest tool name the APIs accept.
pub const MAX_WIRE_NAME: usize = 64;

fn allowed(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

/// Whether `name` is accepted as is by the APIs.
pub fn is_valid_wire_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_WIRE_NAME && name.chars().all(allowed)
}

/// The name sent to the model: every character the APIs refuse becomes `_`
/// (`file.read` → `file_read`), cut to 64 characters.
pub fn to_wire(name: &str) -> Cow<'_, str> {
    if is_valid_wire_name(name) {
        return Cow::Borrowed(name);
    }
    let mut wire: String = name
        .chars()
        .map(|c| if allowed(c) { c } else { '_' })
        .take(MAX_WIRE_NAME)
        .collect();
    if wire.is_empty() {
        wire.push('_');
    }
    Cow::Owned(wire)
}

/// The Chorus name of a tool the model called by its wire name. A name that is no
/// tool's wire name is kept as the model wrote it (an unknown tool, reported to the
/// model as such; an older name the registry resolves; or a model that used the
/// dotted name from the docs).
pub fn from_wire(wire: &str) -> Cow<'_, str> {
    match TOOLS
        .iter()
        .find(|t| t.name == wire)
        .or_else(|| TOOLS.iter().find(|t| to_wire(t.name) == wire))
    {
        Some(tool) => Cow::Borrowed(tool.name),
        None => Cow::Borrowed(wire),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_map_both_ways() {
        assert_eq!(to_wire("file.read"), "file_read");
        assert_eq!(from_wire("file_read"), "file.read");
        assert_eq!(from_wire("file.read"), "file.read");
    }

    #[test]
    fn unknown_and_odd_names_stay_or_become_valid() {
        assert_eq!(from_wire("no_such_tool"), "no_such_tool");
        assert_eq!(to_wire(""), "_");
        assert_eq!(to_wire("a b/c"), "a_b_c");
        assert_eq!(to_wire(&"x".repeat(100)).len(), MAX_WIRE_NAME);
    }
}
