//! One integration-test binary for the whole end-to-end suite (faster to link than
//! one binary per file).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod suite;
