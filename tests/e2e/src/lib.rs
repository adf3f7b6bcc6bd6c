//! End-to-end tests of Chorus live in `tests/` (one binary, `tests/all.rs`, with a
//! module per area under `tests/suite/`). This library is intentionally empty.
