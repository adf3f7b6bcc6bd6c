//! A Chorus worker (`chorus-worker`): serves one agent. It attaches to the control
//! plane, runs the tool loop for each thread it is assigned, executes tools in the
//! agent's workspace and streams every step back. See ARCHITECTURE.md.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

pub mod agent_dir;
pub mod awareness;
pub mod backends;
pub mod connection;
pub mod context;
pub mod events;
pub mod gate;
pub mod link_tls;
pub mod mcp;
pub mod model;
pub mod outbound;
pub mod runner;
pub mod summary;
pub mod telemetry;
pub mod tool_loop;
pub mod tools;
