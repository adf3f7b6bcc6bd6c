//! The session file: seed 003's format (`id`, `agent_name`, `description`,
//! `saved_at`, `trigger`, `message_count`, `messages` with roles `user`,
//! `assistant` and `tool_result`, tool calls as `{id, name, params}`, results with
//! `tool_call_id`), plus what Chorus needs to restore a session losslessly: each
//! message's `thread_id`, a result's `tool_name` and `is_error`, and a call's raw
//! `arguments` when `params` alone would not give them back byte for byte.
//!
//! Pure: to and from JSON text, the file name; no I/O.

use chorus_proto::domain::{ChatMessage, Role, ToolCall};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// What caused a save.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Trigger {
    ManualSave,
    IdleTimeout,
    Shutdown,
    ContextClear,
}

impl Trigger {
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::ManualSave => "manual_save",
            Trigger::IdleTimeout => "idle_timeout",
            Trigger::Shutdown => "shutdown",
            Trigger::ContextClear => "context_clear",
        }
    }
}

/// A whole session file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionFile {
    pub id: String,
    pub agent_name: String,
    pub description: String,
    pub saved_at: String,
    pub trigger: Trigger,
    pub message_count: u64,
    pub messages: Vec<FileMessage>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileMessage {
    /// `user`, `assistant`, `tool_result` (or `system`).
    pub role: String,
    pub content: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<FileToolCall>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_name: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub is_error: bool,
    /// The thread the message belongs to (a session holds every thread of the
    /// context, each thread's messages together).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FileToolCall {
    pub id: String,
    pub name: String,
    /// The arguments as JSON; the model's text as a string when it was not valid
    /// JSON (or was a JSON string).
    pub params: Value,
    /// The model's exact text, when `params` written compactly differs from it
    /// (spacing, key order): a restore sends the model what it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<String>,
}

fn role_name(role: Role) -> &'static str {
    match role {
        Role::Tool => "tool_result",
        other => other.as_str(),
    }
}

fn parse_role(name: &str) -> Option<Role> {
    match name {
        "tool_result" | "tool" => Some(Role::Tool),
        other => Role::parse(other),
    }
}

impl FileToolCall {
    fn from_call(call: &ToolCall) -> Self {
        let (params, arguments) = match serde_json::from_str::<Value>(&call.arguments) {
            // A JSON string is kept as the raw text, so a string `params` always
            // means "these were the exact arguments".
            Ok(value) if !value.is_string() => {
                // Compared as text: `Value == String` would compare with a JSON string.
                let compact = value.to_string();
                let exact = compact == call.arguments;
                (value, (!exact).then(|| call.arguments.clone()))
            }
            _ => (Value::String(call.arguments.clone()), None),
        };
        FileToolCall {
            id: call.id.clone(),
            name: call.name.clone(),
            params,
            arguments,
        }
    }

    fn to_call(&self) -> ToolCall {
        let arguments = match (&self.arguments, &self.params) {
            (Some(raw), _) => raw.clone(),
            (None, Value::String(raw)) => raw.clone(),
            (None, value) => value.to_string(),
        };
        ToolCall {
            id: self.id.clone(),
            name: self.name.clone(),
            arguments,
        }
    }
}

impl FileMessage {
    pub fn from_message(thread_id: u64, m: &ChatMessage) -> Self {
        FileMessage {
            role: role_name(m.role).to_string(),
            content: m.content.clone(),
            tool_calls: m.tool_calls.iter().map(FileToolCall::from_call).collect(),
            tool_call_id: m.tool_call_id.clone(),
            tool_name: m.tool_name.clone(),
            is_error: m.is_error,
            thread_id: Some(thread_id),
        }
    }

    pub fn to_message(&self) -> Result<ChatMessage, String> {
        let role = parse_role(&self.role).ok_or_else(|| {
            format!(
                "unknown role '{}' (expected user, assistant or tool_result)",
                self.role
            )
        })?;
        Ok(ChatMessage {
            role,
            content: self.content.clone(),
            tool_calls: self.tool_calls.iter().map(FileToolCall::to_call).collect(),
            tool_call_id: self.tool_call_id.clone(),
            tool_name: self.tool_name.clone(),
            is_error: self.is_error,
        })
    }
}

impl SessionFile {
    pub fn to_json(&self) -> String {
        // Serialising plain data to a string cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default() + "\n"
    }

    /// Reads a session file; the error says what is wrong with it.
    pub fn from_json(text: &str) -> Result<SessionFile, String> {
        let file: SessionFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for (i, m) in file.messages.iter().enumerate() {
            m.to_message()
                .map_err(|e| format!("message {}: {e}", i + 1))?;
        }
        Ok(file)
    }

    /// The messages as Chorus stores them, in file order.
    pub fn chat_messages(&self) -> Vec<ChatMessage> {
        // `from_json` checked every role.
        self.messages
            .iter()
            .filter_map(|m| m.to_message().ok())
            .collect()
    }
}

/// A short, file-name-safe form of a description: lowercase ASCII letters and
/// digits, words joined by `-`, at most 40 characters; `session` when nothing is left.
pub fn slug(description: &str) -> String {
    let mut out = String::new();
    for word in description
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
    {
        let word = word.to_ascii_lowercase();
        let extra = usize::from(!out.is_empty()) + word.len();
        if out.len() + extra > 40 {
            if out.is_empty() {
                out.push_str(&word[..40]);
            }
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&word);
    }
    if out.is_empty() {
        "session".into()
    } else {
        out
    }
}

/// `<YYYY-MM-DD>_<slug>_<first 8 of the id>.json`, the date from `saved_at`.
pub fn file_name(saved_at: &str, description: &str, id: &str) -> String {
    let date: String = saved_at.chars().take(10).collect();
    let short: String = id
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect();
    format!("{date}_{}_{short}.json", slug(description))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str, arguments: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "view".into(),
            arguments: arguments.into(),
        }
    }

    fn session(messages: Vec<FileMessage>) -> SessionFile {
        SessionFile {
            id: "0b7c1f7e-1111-2222-3333-444455556666".into(),
            agent_name: "frontend-agent".into(),
            description: "Refactored auth".into(),
            saved_at: "2026-02-12T10:30:00.000Z".into(),
            trigger: Trigger::IdleTimeout,
            message_count: messages.len() as u64,
            messages,
        }
    }

    #[test]
    fn a_session_round_trips_through_json_with_every_field() {
        let calls = vec![
            call("tc_001", r#"{"path":"src/auth.py"}"#),
            call("tc_002", r#"{"path": "a",  "b": [1, 2]}"#),
            call("tc_003", "{not json at all"),
            call("tc_004", r#""just a string""#),
            call("tc_005", ""),
        ];
        let messages = vec![
            ChatMessage::user("Let's refactor the auth module"),
            ChatMessage::assistant("I'll look first.", calls.clone()),
            ChatMessage::tool_result(&calls[0], "... file contents ...", false),
            ChatMessage::tool_result(&calls[2], "arguments are not JSON", true),
            ChatMessage::assistant("Done.", vec![]),
        ];
        let file = session(
            messages
                .iter()
                .enumerate()
                .map(|(i, m)| FileMessage::from_message(if i < 3 { 1 } else { 2 }, m))
                .collect(),
        );
        let text = file.to_json();
        let back = SessionFile::from_json(&text).unwrap();
        assert_eq!(back, file);
        assert_eq!(back.chat_messages(), messages, "lossless");
        assert_eq!(back.messages[4].thread_id, Some(2));
    }

    #[test]
    fn the_file_is_in_the_seed_format() {
        let tc = call("tc_001", r#"{"path":"src/auth.py"}"#);
        let bad = call("tc_002", "{oops");
        let file = session(vec![
            FileMessage::from_message(1, &ChatMessage::user("hi")),
            FileMessage::from_message(1, &ChatMessage::assistant("", vec![tc.clone(), bad])),
            FileMessage::from_message(1, &ChatMessage::tool_result(&tc, "x", false)),
        ]);
        let json: Value = serde_json::from_str(&file.to_json()).unwrap();
        assert_eq!(json["trigger"], "idle_timeout");
        assert_eq!(json["message_count"], 3);
        let m = &json["messages"];
        assert_eq!(m[0]["role"], "user");
        assert_eq!(m[1]["tool_calls"][0]["params"]["path"], "src/auth.py");
        assert!(
            m[1]["tool_calls"][0].get("arguments").is_none(),
            "exact already"
        );
        assert_eq!(
            m[1]["tool_calls"][1]["params"], "{oops",
            "invalid JSON stays a string"
        );
        assert_eq!(m[2]["role"], "tool_result");
        assert_eq!(m[2]["tool_call_id"], "tc_001");
        assert_eq!(m[2]["tool_name"], "view");
        assert!(m[2].get("is_error").is_none());
    }

    #[test]
    fn a_seed_file_without_chorus_fields_reads() {
        let text = r#"{
            "id": "abc123-uuid-here", "agent_name": "frontend-agent",
            "description": "Refactored auth module", "saved_at": "2026-02-12T10:30:00Z",
            "trigger": "idle_timeout", "message_count": 3,
            "messages": [
                {"role": "user", "content": "Let's refactor"},
                {"role": "assistant", "content": "Looking.",
                 "tool_calls": [{"id": "tc_001", "name": "view", "params": {"path": "src/auth.py"}}]},
                {"role": "tool_result", "tool_call_id": "tc_001", "content": "..."}
            ]
        }"#;
        let file = SessionFile::from_json(text).unwrap();
        let messages = file.chat_messages();
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            r#"{"path":"src/auth.py"}"#
        );
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("tc_001"));
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        assert!(SessionFile::from_json("{").is_err());
        let err = SessionFile::from_json(
            r#"{"id":"x","agent_name":"a","description":"d","saved_at":"s","trigger":"later",
                "message_count":0,"messages":[]}"#,
        )
        .unwrap_err();
        assert!(err.contains("later"), "{err}");
        let err = SessionFile::from_json(
            r#"{"id":"x","agent_name":"a","description":"d","saved_at":"s","trigger":"shutdown",
                "message_count":1,"messages":[{"role":"robot","content":""}]}"#,
        )
        .unwrap_err();
        assert!(err.contains("message 1") && err.contains("robot"), "{err}");
    }

    #[test]
    fn slugs_and_file_names_are_safe_and_short() {
        assert_eq!(
            slug("Refactored auth module, added JWT validation"),
            "refactored-auth-module-added-jwt"
        );
        assert_eq!(slug("../../etc/passwd"), "etc-passwd");
        assert_eq!(slug("  ✨ ☃ "), "session");
        assert_eq!(slug(&"x".repeat(100)).len(), 40);
        assert!(slug(&"word ".repeat(50)).len() <= 40);
        assert_eq!(
            file_name(
                "2026-02-12T10:30:00.000Z",
                "Set up ESLint",
                "0b7c1f7e-1111-2222"
            ),
            "2026-02-12_set-up-eslint_0b7c1f7e.json"
        );
    }
}
