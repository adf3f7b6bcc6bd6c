//! CLI backends: an agent whose turns Claude Code or OpenCode runs, headless, in its
//! workspace and sandbox, with Chorus's tools only (served by `chorus-tools mcp`,
//! whose calls come back to this worker's run endpoint and go through the same
//! pipeline as the tool loop's). What differs per CLI is a [`flavor::Flavor`].

pub mod driver;
pub mod endpoint;
pub mod flavor;
pub mod probe;
pub mod proxy;
pub mod spawn;

use chorus_proto::domain::Backend;

/// The flavor of a CLI backend this build can drive; `None`: none (the tool loop, or
/// a CLI whose flavor is not in this build).
pub fn flavor(backend: Backend) -> Option<&'static dyn flavor::Flavor> {
    let _ = backend;
    None
}
