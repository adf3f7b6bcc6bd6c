//! The Discord front end (issue 12). The pure parts: how text is split into
//! messages (`split`), the per-channel outgoing queue (`queue`), who may do what
//! (`access`), what a slash command means (`slash`) and what a status message says
//! (`status`). Frontend-neutral I/O: `messages` (a channel's messages to threads and
//! their answers back), `actions` (what a slash command does), `approvals` and
//! `notices` (what the feed posts unasked), all through `outbox` and `rest`. The task
//! board's texts and the gathering of `/task answer`'s answers are `tasks` (pure).
//! `/schedule` calls the scheduler as the HTTP API does (`schedules`).
//! Serenity stays in `adapter` (the connection, events, interaction answers) and
//! `commands` (the registered commands).
//!
//! Roles: `messages` vouches each author's mapped role to the gate, which uses it only
//! for a user `[roles]` does not name, and keeps it in memory only (after a restart a
//! member counts as a viewer until their next message). A reply to a part still being
//! posted waits until it is recorded (`message_refs`). `rest` sends again only a request
//! that never reached Discord, and allows no mentions. With `[discord] api_base` the
//! bot's REST goes there with serenity's own ratelimiter off (it would ignore the proxy),
//! and the gateway URL is asked of that base too, so a test never reaches Discord.
//! `adapter` answers an interaction at once, or defers it after 1.5 s and finishes
//! with an edit.

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
pub mod schedules;
pub mod slash;
pub mod split;
pub mod status;
pub mod tasks;
