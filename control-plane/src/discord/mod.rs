//! The Discord front end (issue 12). Pure parts first: how text is split into
//! messages (`split`), the per-channel outgoing queue (`queue`), and who may answer
//! an approval (`access`). The serenity adapter that uses them comes next.

pub mod access;
pub mod queue;
pub mod split;
