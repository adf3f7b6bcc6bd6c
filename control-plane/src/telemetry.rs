//! Logging and tracing set-up. `RUST_LOG` selects what is logged (default `info`).
//!
//! The OpenTelemetry exporter (SPEC A6) plugs in here as one more layer on the same
//! subscriber; every span in Chorus already carries the fields it will export.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

/// Installs the global subscriber: human-readable lines on stderr.
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal()),
        )
        .try_init();
}
