//! The identity and memory tools: an agent writes down what it should remember
//! (`remember` into `memory/MEMORY.md`, `log_note` into today's daily log), reads its
//! memory files back (`memory_get`), searches them, its saved sessions and its
//! messages (`memory_search`) and rewrites who it is (`self_edit_identity`).
//! All run in the control plane, which keeps these files (ARCHITECTURE.md, "Identity
//! and memory"); their arguments are typed here for both sides.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{
    Actions, RunsIn, SchemaSettings, Subject, ToolDef, object, one_line, parse_args, text, truncate,
};

pub const REMEMBER: &str = "remember";
pub const LOG_NOTE: &str = "log_note";
pub const MEMORY_GET: &str = "memory_get";
pub const MEMORY_SEARCH: &str = "memory_search";
pub const SELF_EDIT_IDENTITY: &str = "self_edit_identity";

/// How much of an entry's text its action string carries.
const ACTION_TEXT_CHARS: usize = 60;

/// An agent's identity files, beside `docs/` in its directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum IdentityFile {
    /// Who the agent is.
    #[serde(rename = "SOUL.md")]
    Soul,
    /// Who it works for.
    #[serde(rename = "USER.md")]
    User,
    /// What it checks on a heartbeat.
    #[serde(rename = "HEARTBEAT.md")]
    Heartbeat,
}

impl IdentityFile {
    pub const ALL: [IdentityFile; 3] = [
        IdentityFile::Soul,
        IdentityFile::User,
        IdentityFile::Heartbeat,
    ];

    pub fn file_name(self) -> &'static str {
        match self {
            IdentityFile::Soul => "SOUL.md",
            IdentityFile::User => "USER.md",
            IdentityFile::Heartbeat => "HEARTBEAT.md",
        }
    }

    /// The short name people type (`soul`) and the API's JSON key.
    pub fn key(self) -> &'static str {
        match self {
            IdentityFile::Soul => "soul",
            IdentityFile::User => "user",
            IdentityFile::Heartbeat => "heartbeat",
        }
    }

    /// By file name (`SOUL.md`) or short name (`soul`), any case.
    pub fn parse(text: &str) -> Option<IdentityFile> {
        Self::ALL.into_iter().find(|f| {
            text.eq_ignore_ascii_case(f.file_name()) || text.eq_ignore_ascii_case(f.key())
        })
    }

    /// Whether the agent may rewrite it with `self_edit_identity` (HEARTBEAT.md is
    /// the person's list of what to check, not the agent's).
    pub fn agent_editable(self) -> bool {
        matches!(self, IdentityFile::Soul | IdentityFile::User)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryText {
    pub text: String,
}

/// `remember`'s arguments: the fact, and the entries it folds together (replaces).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Remember {
    pub text: String,
    /// Ids of entries this one replaces (`3f9a2c01` or `mem:3f9a2c01`); they are
    /// removed as it is written.
    #[serde(default)]
    pub replaces: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemoryGet {
    pub path: String,
    /// The first line shown, from 1.
    #[serde(default)]
    pub from: Option<usize>,
    /// How many lines.
    #[serde(default)]
    pub lines: Option<usize>,
}

/// `memory_search`'s arguments; `sources` among `memory`, `session`, `message`
/// (checked by the control plane, which owns the set).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySearch {
    pub query: String,
    /// How many hits (default 8, at most 50).
    #[serde(default)]
    pub k: Option<usize>,
    #[serde(default)]
    pub sources: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdentityEdit {
    pub file: IdentityFile,
    pub content: String,
}

/// Parses `self_edit_identity`'s arguments, refusing a file the agent may not edit.
pub fn parse_identity_edit(arguments: &str) -> Result<IdentityEdit, String> {
    let edit = parse_args::<IdentityEdit>(arguments).map_err(|e| {
        format!(
            "{SELF_EDIT_IDENTITY} needs {{\"file\": \"SOUL.md\" or \"USER.md\", \"content\": \"…\"}} ({e})"
        )
    })?;
    if !edit.file.agent_editable() {
        return Err(format!(
            "{SELF_EDIT_IDENTITY} edits SOUL.md or USER.md, not {}",
            edit.file.file_name()
        ));
    }
    Ok(edit)
}

/// Checked as `tool:<name>:<the text's first 60 characters, on one line>`.
fn by_text(args: &Value) -> Subject {
    let gist = one_line(text(args, "text").unwrap_or_default(), usize::MAX);
    let head: String = gist.chars().take(ACTION_TEXT_CHARS).collect();
    Subject {
        actions: Actions::Detail(head),
        shown: Some(truncate(&gist, 80)),
        writes: None,
    }
}

pub(super) const REMEMBER_TOOL: ToolDef = ToolDef {
    name: REMEMBER,
    aliases: &[],
    action_name: REMEMBER,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Write a lasting fact into your long-term memory (memory/MEMORY.md): something \
         about the person you work for, a decision, a convention, that should still be \
         known in a later conversation. One short self-contained fact per call. Your \
         memory is shown to you at the start of every conversation; keep it within its \
         limit by folding related entries together."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "text": {"type": "string", "description": "The fact, in one or two sentences"},
                "replaces": {"type": "array", "items": {"type": "string"},
                    "description": "Ids of entries this one folds together (they are removed), e.g. [\"3f9a2c01\"]"}
            }),
            &["text"],
        )
    },
    subject: by_text,
    typical_call: r#"{"text":"The user prefers metric units."}"#,
    check_args: |args| parse_args::<Remember>(args).map(drop),
};

pub(super) const LOG_NOTE_TOOL: ToolDef = ToolDef {
    name: LOG_NOTE,
    aliases: &[],
    action_name: LOG_NOTE,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Add a note to today's log (memory/YYYY-MM-DD.md, UTC): what you did or learnt \
         today, worth knowing tomorrow but not forever. Today's and yesterday's logs are \
         shown to you at the start of every conversation."
            .into()
    },
    parameters: |_| {
        object(
            json!({"text": {"type": "string", "description": "The note"}}),
            &["text"],
        )
    },
    subject: by_text,
    typical_call: r#"{"text":"Deployed the site; the user will check it tomorrow."}"#,
    check_args: |args| parse_args::<MemoryText>(args).map(drop),
};

pub(super) const MEMORY_GET_TOOL: ToolDef = ToolDef {
    name: MEMORY_GET,
    aliases: &[],
    action_name: MEMORY_GET,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Read one of your memory files with line numbers: MEMORY.md (long-term) or a \
         daily log such as 2026-11-26.md. Use from and lines to read part of a long file."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "path": {"type": "string", "description": "MEMORY.md or YYYY-MM-DD.md (the memory/ prefix is optional)"},
                "from": {"type": "integer", "minimum": 1, "description": "First line to show (default 1)"},
                "lines": {"type": "integer", "minimum": 1, "description": "How many lines (default 200)"}
            }),
            &["path"],
        )
    },
    subject: |args| {
        let path = text(args, "path").unwrap_or_default();
        Subject {
            actions: Actions::Detail(path.to_string()),
            shown: Some(truncate(path, 120)),
            writes: None,
        }
    },
    typical_call: r#"{"path":"MEMORY.md"}"#,
    check_args: |args| parse_args::<MemoryGet>(args).map(drop),
};

pub(super) const MEMORY_SEARCH_TOOL: ToolDef = ToolDef {
    name: MEMORY_SEARCH,
    aliases: &[],
    action_name: MEMORY_SEARCH,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Search your memory files, saved sessions and past conversations for words, \
         best matches first, each saying where it is (file and line, or session, thread \
         and message). Use it before saying you do not know something you may have \
         been told."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "query": {"type": "string", "description": "Words to look for"},
                "k": {"type": "integer", "minimum": 1, "maximum": 50, "description": "How many hits (default 8)"},
                "sources": {"type": "array", "items": {"type": "string", "enum": ["memory", "session", "message"]},
                    "description": "Where to look (default: all)"}
            }),
            &["query"],
        )
    },
    subject: |args| {
        let gist = one_line(text(args, "query").unwrap_or_default(), usize::MAX);
        let head: String = gist.chars().take(ACTION_TEXT_CHARS).collect();
        Subject {
            actions: Actions::Detail(head),
            shown: Some(truncate(&gist, 80)),
            writes: None,
        }
    },
    typical_call: r#"{"query":"preferred units"}"#,
    check_args: |args| parse_args::<MemorySearch>(args).map(drop),
};

pub(super) const IDENTITY_TOOL: ToolDef = ToolDef {
    name: SELF_EDIT_IDENTITY,
    aliases: &[],
    action_name: super::SELF_EDIT,
    runs_in: RunsIn::ControlPlane,
    description: |_: &SchemaSettings| {
        "Replace SOUL.md (who you are: your character, how you work) or USER.md (who you \
         work for: their name, preferences, context). Both are given to you before your \
         docs on every step; the change applies from your next step."
            .into()
    },
    parameters: |_| {
        object(
            json!({
                "file": {"type": "string", "enum": ["SOUL.md", "USER.md"]},
                "content": {"type": "string", "description": "The complete new content of the file"}
            }),
            &["file", "content"],
        )
    },
    subject: |args| {
        let file = text(args, "file").unwrap_or_default();
        Subject {
            actions: Actions::Detail(format!("identity:{file}")),
            shown: Some(truncate(file, 40)),
            writes: None,
        }
    },
    typical_call: r#"{"file":"SOUL.md","content":"You are calm and precise."}"#,
    check_args: |args| {
        parse_args::<IdentityEdit>(args).and_then(|edit| {
            if edit.file.agent_editable() {
                Ok(())
            } else {
                Err(serde::de::Error::custom("file must be SOUL.md or USER.md"))
            }
        })
    },
};
