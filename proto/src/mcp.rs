//! MCP servers as tool sources: what both sides need to agree on. An agent's server
//! as the worker gets it ([`McpServer`], its secrets resolved), the states a server
//! is in ([`McpState`]), and the one naming of its tools, `mcp__<server>__<tool>`
//! ([`tool_name`], [`split_tool_name`]), from which the gate's action string
//! `tool:mcp__<server>__<tool>:<summary of arguments>` ([`summary`]) derives.
//! Pure: no I/O.

use std::collections::BTreeMap;

/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";

/// Longest server name (a tool name must stay within the model APIs' 64).
pub const MAX_SERVER_NAME: usize = 24;

/// One of an agent's MCP servers, as its worker starts or connects it. The values
/// of `env` and `headers` may be secrets: `Debug` never prints them.
#[derive(Clone, PartialEq, Eq)]
pub struct McpServer {
    pub name: String,
    pub transport: McpTransport,
    /// The deadline of one call (and of starting or connecting), in milliseconds.
    pub call_timeout_ms: u64,
}

#[derive(Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A process speaking MCP on its stdin and stdout, run in the agent's sandbox.
    Stdio {
        command: String,
        args: Vec<String>,
        env: BTreeMap<String, String>,
    },
    /// A streamable HTTP endpoint.
    Http {
        url: String,
        headers: BTreeMap<String, String>,
    },
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut out = f.debug_struct("McpServer");
        out.field("name", &self.name);
        match &self.transport {
            McpTransport::Stdio { command, args, env } => out
                .field("command", command)
                .field("args", args)
                .field("env", &env.keys().collect::<Vec<_>>()),
            McpTransport::Http { url, headers } => out
                .field("url", url)
                .field("headers", &headers.keys().collect::<Vec<_>>()),
        };
        out.field("call_timeout_ms", &self.call_timeout_ms).finish()
    }
}

/// Which MCP tools an agent's profile may ever allow or ask for, as the control
/// plane reads its rules (`permissions::reach`): the worker offers a server's tool
/// only when its name is reached, so a tool the profile always denies is not offered,
/// whenever a server lists it. Errs on the side of offering (a rule whose start
/// cannot be read reaches every tool); each call is decided by the gate anyway.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum McpReach {
    /// Any tool may be reached (and what a worker assumes when told nothing).
    #[default]
    Any,
    /// Only actions starting with one of these: `(text, open)`, where an open prefix
    /// may be followed by anything and a closed one is a whole action.
    Prefixes(Vec<(String, bool)>),
}

impl McpReach {
    /// Whether some action `tool:<tool>:…` may match (the control plane's
    /// `Reach::reaches_tool`, over the prefixes it sent).
    pub fn reaches(&self, tool: &str) -> bool {
        let McpReach::Prefixes(prefixes) = self else {
            return true;
        };
        let head = format!("tool:{tool}:");
        prefixes.iter().any(|(text, open)| {
            text.starts_with(&head) || (*open && head.starts_with(text.as_str()))
        })
    }
}

/// What became of a server: a closed set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum McpState {
    /// Configured; its worker has not started it yet (it starts at the agent's next run).
    NotStarted,
    /// Being started or connected.
    Starting,
    /// Connected; its tools are listed.
    Running,
    /// It could not be started or connected, or it died; the error says why. Its
    /// next call tries again.
    Failed,
}

impl McpState {
    pub const ALL: [McpState; 4] = [
        McpState::NotStarted,
        McpState::Starting,
        McpState::Running,
        McpState::Failed,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            McpState::NotStarted => "not_started",
            McpState::Starting => "starting",
            McpState::Running => "running",
            McpState::Failed => "failed",
        }
    }

    pub fn parse(text: &str) -> Option<McpState> {
        McpState::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

/// Why a server name is refused; `None`: it is fine. Lowercase letters, digits and
/// `_`, not empty, at most [`MAX_SERVER_NAME`], and no `__` (which separates the
/// server from the tool in a tool's name).
pub fn server_name_problem(name: &str) -> Option<String> {
    let allowed = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_';
    if name.is_empty() || name.len() > MAX_SERVER_NAME || !name.chars().all(allowed) {
        return Some(format!(
            "MCP server name '{name}' is not allowed: use 1 to {MAX_SERVER_NAME} lowercase \
             letters, digits and '_'"
        ));
    }
    if name.contains("__") || name.starts_with('_') || name.ends_with('_') {
        return Some(format!(
            "MCP server name '{name}' is not allowed: '_' may not start or end it or come twice \
             in a row ('__' separates server and tool in `mcp__<server>__<tool>`)"
        ));
    }
    None
}

/// The name a server's tool is offered, checked and audited by.
pub fn tool_name(server: &str, tool: &str) -> String {
    format!("{PREFIX}{server}__{tool}")
}

/// `(server, tool)` of an MCP tool's name; `None` for any other name.
pub fn split_tool_name(name: &str) -> Option<(&str, &str)> {
    let rest = name.strip_prefix(PREFIX)?;
    let (server, tool) = rest.split_once("__")?;
    (!server.is_empty() && !tool.is_empty()).then_some((server, tool))
}

/// Whether a tool name the server lists can be offered: the model APIs accept only
/// `^[a-zA-Z0-9_-]{1,64}$` for the whole `mcp__<server>__<tool>`.
pub fn offerable(server: &str, tool: &str) -> bool {
    let name = tool_name(server, tool);
    name.len() <= 64
        && tool
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// The summary of a call's arguments in its action string and step text: the
/// arguments' JSON on one line (object keys in order), at most 200 characters.
/// Not JSON: empty.
pub fn summary(arguments: &str) -> String {
    let Ok(value) = serde_json::from_str::<serde_json::Value>(arguments) else {
        return String::new();
    };
    let text = match &value {
        serde_json::Value::Object(map) if map.is_empty() => String::new(),
        other => other.to_string(),
    };
    if text.chars().count() <= 200 {
        text
    } else {
        format!("{}…", text.chars().take(200).collect::<String>())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_split_back_into_server_and_tool_and_only_mcp_names_do() {
        assert_eq!(tool_name("files", "read_note"), "mcp__files__read_note");
        assert_eq!(
            split_tool_name("mcp__files__read_note"),
            Some(("files", "read_note"))
        );
        // A tool whose own name holds `__` keeps it.
        assert_eq!(split_tool_name("mcp__s__a__b"), Some(("s", "a__b")));
        for other in [
            "bash",
            "file.read",
            "mcp__",
            "mcp__s__",
            "mcp____t",
            "mcp_s__t",
        ] {
            assert_eq!(split_tool_name(other), None, "{other}");
        }
    }

    #[test]
    fn server_names_are_a_closed_character_set() {
        for good in ["files", "a1", "my_server"] {
            assert_eq!(server_name_problem(good), None, "{good}");
        }
        for bad in [
            "",
            "Files",
            "a-b",
            "a.b",
            "a b",
            "a__b",
            "_a",
            "a_",
            "ü",
            "abcdefghijklmnopqrstuvwxyz",
        ] {
            assert!(server_name_problem(bad).is_some(), "{bad}");
        }
    }

    #[test]
    fn a_summary_is_the_arguments_on_one_line_bounded() {
        assert_eq!(summary(r#"{"path": "a.txt"}"#), r#"{"path":"a.txt"}"#);
        assert_eq!(summary("{}"), "");
        assert_eq!(summary("not json"), "");
        let long = format!(r#"{{"text": "{}"}}"#, "x".repeat(500));
        assert_eq!(summary(&long).chars().count(), 201);
    }

    #[test]
    fn a_reach_offers_the_tools_its_prefixes_can_match() {
        let reach = McpReach::Prefixes(vec![
            ("tool:mcp__demo__echo:".into(), true),
            ("tool:mcp__other__".into(), true),
            ("tool:bash:ls".into(), false),
        ]);
        assert!(reach.reaches("mcp__demo__echo"));
        assert!(!reach.reaches("mcp__demo__secret_word"));
        assert!(reach.reaches("mcp__other__anything"));
        assert!(!reach.reaches("mcp__demo__echo2"), "the name ends at ':'");
        assert!(McpReach::Any.reaches("mcp__demo__secret_word"));
        assert!(!McpReach::Prefixes(Vec::new()).reaches("mcp__demo__echo"));
    }

    #[test]
    fn states_have_one_text_form() {
        for state in McpState::ALL {
            assert_eq!(McpState::parse(state.as_str()), Some(state));
        }
        assert_eq!(McpState::parse("up"), None);
    }

    #[test]
    fn debug_never_prints_env_or_header_values() {
        let server = McpServer {
            name: "s".into(),
            transport: McpTransport::Http {
                url: "http://127.0.0.1:1/mcp".into(),
                headers: [(
                    "authorization".to_string(),
                    "Bearer hunter2-secret".to_string(),
                )]
                .into(),
            },
            call_timeout_ms: 1,
        };
        let shown = format!("{server:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("authorization"),
            "{shown}"
        );
    }
}
