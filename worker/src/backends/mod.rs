//! CLI backends: an agent whose turns Claude Code or OpenCode runs, headless, in its
//! workspace and sandbox, with Chorus's tools only (served by `chorus-tools mcp`,
//! whose calls come back to this worker's run endpoint and go through the same
//! pipeline as the tool loop's). What differs per CLI is a [`flavor::Flavor`]:
//! [`claude_code::ClaudeCode`] and [`opencode::OpenCode`] (their module docs list the
//! exact requests each makes, for the relay's allow-list), sharing
//! [`outcome`]'s classification.

pub mod calls;
pub mod claude_code;
pub mod driver;
pub mod endpoint;
pub mod flavor;
pub mod opencode;
pub mod outcome;
pub mod probe;
pub mod proxy;
pub mod spawn;

use chorus_proto::domain::Backend;

pub use chorus_proto::backend::MCP_CALL_LIMIT_MS;

/// The flavor of a CLI backend; `None` for the tool loop.
pub fn flavor(backend: Backend) -> Option<&'static dyn flavor::Flavor> {
    match backend {
        Backend::Api => None,
        Backend::ClaudeCode => Some(&claude_code::ClaudeCode),
        Backend::OpenCode => Some(&opencode::OpenCode),
    }
}
