//! The chorus.v1 protocol between the control plane and its workers.
//!
//! This crate holds these things and nothing else:
//! - [`wire`]: the code generated from `proto/chorus/v1/worker.proto`. Only the two
//!   connection modules may use it (the control plane's gRPC service and the worker's
//!   connection module); a test in `tests/e2e` enforces that.
//! - [`domain`]: the plain Rust types both sides work with, and the conversions to and
//!   from the wire. Everything else in Chorus speaks these types.
//! - [`limits`]: the link's size limits, and how a message is measured against them.
//! - [`tools`]: the tool registry, one definition per tool (names, schemas, actions).
//! - [`mcp`]: an agent's MCP servers as the worker gets them, their states, their tools' names.
//! - [`backend`]: what runs an agent's turns (the tool loop or a CLI), and each CLI's facts.
//!
//! No business logic lives here, and no I/O.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

pub mod backend;
mod convert;
pub mod domain;
pub mod limits;
pub mod mcp;
pub mod tools;

#[allow(clippy::all, clippy::unwrap_used, missing_docs, unreachable_pub)]
mod generated {
    tonic::include_proto!("chorus.v1");
}

/// Generated gRPC types. Reserved for the connection modules (see the crate docs).
pub mod wire {
    pub use crate::generated::worker_link_client::WorkerLinkClient;
    pub use crate::generated::worker_link_server::{WorkerLink, WorkerLinkServer};
    pub use crate::generated::{ControlMessage, WorkerMessage};
}

pub use convert::ProtocolError;

/// Request metadata key that names the agent a worker speaks for.
pub const AGENT_METADATA_KEY: &str = "x-chorus-agent";

/// Metadata naming a dial-in worker for the control plane's logs (its host and
/// pid); informational only, never trusted.
pub const WORKER_NAME_METADATA_KEY: &str = "x-chorus-worker";
