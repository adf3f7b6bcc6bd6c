//! What runs an agent's turns: the tool loop (`api`) or a coding CLI the worker
//! drives headless (`claude-code`, `opencode`), whose tool calls come back through
//! `chorus-tools`. One definition of the set, its text form, and what each CLI needs
//! (its program, the oldest version supported, how to install it).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An agent's backend. Closed set; the text form is what the API, `agent.json` and
/// the store use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Backend {
    /// Chorus's own tool loop against the model API.
    #[default]
    Api,
    /// Claude Code (`claude -p … --output-format stream-json`).
    ClaudeCode,
    /// OpenCode (`opencode run --format json`).
    #[serde(rename = "opencode")]
    OpenCode,
}

impl Backend {
    pub const ALL: [Backend; 3] = [Backend::Api, Backend::ClaudeCode, Backend::OpenCode];
    /// The CLI backends, in the order status pages list them.
    pub const CLIS: [Backend; 2] = [Backend::ClaudeCode, Backend::OpenCode];

    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Api => "api",
            Backend::ClaudeCode => "claude-code",
            Backend::OpenCode => "opencode",
        }
    }

    /// A CLI backend's facts; `None` for the tool loop.
    pub fn cli(self) -> Option<&'static CliFacts> {
        match self {
            Backend::Api => None,
            Backend::ClaudeCode => Some(&CLAUDE_CODE),
            Backend::OpenCode => Some(&OPENCODE),
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A backend name outside the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown backend '{0}': use one of api, claude-code, opencode")]
pub struct UnknownBackend(pub String);

impl FromStr for Backend {
    type Err = UnknownBackend;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        Backend::ALL
            .into_iter()
            .find(|backend| backend.as_str() == text)
            .ok_or_else(|| UnknownBackend(text.to_string()))
    }
}

/// What Chorus knows about one CLI.
#[derive(Debug)]
pub struct CliFacts {
    /// The program looked up on `PATH` (unless `[backends]` names a path).
    pub program: &'static str,
    /// The oldest version supported (older ones lack what Chorus relies on).
    pub min_version: (u32, u32, u32),
    /// The npm package and the line that installs the supported version.
    pub package: &'static str,
    pub install: &'static str,
}

impl CliFacts {
    pub fn min_version_text(&self) -> String {
        let (major, minor, patch) = self.min_version;
        format!("{major}.{minor}.{patch}")
    }
}

pub static CLAUDE_CODE: CliFacts = CliFacts {
    program: "claude",
    // MCP servers connect on the first turn of `-p` only from 2.1.221 on; 2.1.332 is
    // the version tested.
    min_version: (2, 1, 332),
    package: "@anthropic-ai/claude-code",
    install: "npm install -g @anthropic-ai/claude-code@2.1.332",
};

pub static OPENCODE: CliFacts = CliFacts {
    program: "opencode",
    // The 1.18 line (the "V2" package shares one daemon per user: not supported).
    min_version: (1, 18, 33),
    package: "opencode-ai",
    install: "npm install -g opencode-ai@1.18.33",
};

/// Whether a worker can run a CLI backend, found when it starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendStatus {
    pub backend: Backend,
    pub usable: bool,
    /// The installed version, when the CLI answered.
    pub version: Option<String>,
    /// Why it is not usable, with what to do; `None` when usable.
    pub reason: Option<String>,
    /// Where the CLI was found.
    pub path: Option<String>,
}

/// A CLI's own session to go on from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliSession {
    pub id: String,
    /// Fork it (a continuation of an ended thread) rather than resume it.
    pub fork: bool,
}

/// How long a CLI waits for one call of a Chorus tool (its MCP tool-call limit, set
/// by the worker; the CLIs' defaults are a minute or less). Chorus bounds every call
/// itself (a command's timeout), and a call that waits for a person longer than the
/// control plane's hold (`[backends] approval_hold_secs`, below this) is deferred:
/// the turn ends and the answer resumes the session.
pub const MCP_CALL_LIMIT_MS: u64 = 60 * 60 * 1000;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_forms_round_trip_and_unknown_names_say_the_set() {
        for backend in Backend::ALL {
            assert_eq!(backend.as_str().parse::<Backend>(), Ok(backend));
        }
        let err = "claude".parse::<Backend>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown backend 'claude': use one of api, claude-code, opencode"
        );
        for backend in Backend::ALL {
            let json = serde_json::to_string(&backend).unwrap();
            assert_eq!(json, format!("\"{backend}\""));
        }
        assert!(Backend::Api.cli().is_none());
        assert_eq!(
            Backend::ClaudeCode.cli().map(CliFacts::min_version_text),
            Some("2.1.332".to_string())
        );
    }
}
