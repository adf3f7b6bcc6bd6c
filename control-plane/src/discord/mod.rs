//! The Discord front end (issue 12). The pure parts: how text is split into
//! messages (`split`), the per-channel outgoing queue (`queue`), who may do what
//! (`access`), what a slash command means (`slash`) and what a status message says
//! (`status`). Frontend-neutral I/O: `messages` (a channel's messages to threads and
//! their answers back), `actions` (what a slash command does), `approvals` and
//! `notices` (what the feed posts unasked), all through `outbox` and `rest`.
//! Serenity stays in `adapter` (the connection, events, interaction answers) and
//! `commands` (the registered commands).

pub mod access;
pub mod actions;
pub mod adapter;
pub mod approvals;
pub mod commands;
pub mod connection;
pub mod messages;
pub mod notices;
pub mod outbox;
pub mod queue;
pub mod rest;
pub mod slash;
pub mod split;
pub mod status;
