//! The task board (SPEC H1–H7).

pub mod brief;
pub mod contract;
// pub mod engine; (after lanes A and B merge)
pub mod stand_in;
pub mod waiting;
