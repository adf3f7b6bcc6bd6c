//! The Chorus control plane (`chorus`): agent registry, storage, worker dispatch,
//! the model relay and the HTTP API. See ARCHITECTURE.md for how the parts fit.
#![cfg_attr(not(test), warn(clippy::print_stdout, clippy::print_stderr))]

pub mod agents;
// The terminal client: its output is the point.
#[allow(clippy::print_stdout, clippy::print_stderr)]
pub mod cli;
pub mod config;
pub mod discord;
pub mod doctor;
pub mod environ;
pub mod feed;
pub mod gate;
pub mod grpc;
pub mod heartbeat;
pub mod http;
pub mod jobs;
pub mod link_tls;
pub mod listener;
pub mod llm_relay;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod ownership;
pub mod permissions;
pub mod principal;
pub mod private;
pub mod providers;
pub mod questions;
pub mod reports;
pub mod runs;
pub mod sandbox_probe;
pub mod schedules;
pub mod secrets;
pub mod serve;
pub mod services;
pub mod sessions;
pub mod store;
pub mod summaries;
pub mod switches;
pub mod tasks;
pub mod telemetry;
pub mod token_bucket;
pub mod user_tokens;
pub mod views;
pub mod web;
pub mod workers;
