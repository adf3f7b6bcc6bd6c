//! The Discord front end (issue 12). Pure parts first: how text is split into
//! messages (`split`), the per-channel outgoing queue (`queue`), and who may answer
//! an approval (`access`). `adapter` owns serenity: it connects
//! the bot and registers the slash commands (`commands`); routing messages,
//! approvals and the rest come next.

pub mod access;
pub mod adapter;
pub mod commands;
pub mod messages;
pub mod outbox;
pub mod queue;
pub mod rest;
pub mod split;
