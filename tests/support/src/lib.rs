//! Test support for Chorus: fake model servers that speak the real wire formats, a
//! handle on a real `chorus` process, process inspection helpers, and a fake worker
//! for the control plane's runs in-process.
#![allow(clippy::unwrap_used, clippy::expect_used)]

pub mod browser;
pub mod chorus;
pub mod closing;
pub mod fake_discord;
pub mod fake_embed;
pub mod fake_model;
pub mod fake_worker;
pub mod otlp;
pub mod process;
pub mod role_hooks;
pub mod wire_rules;

pub use chorus::{Chorus, EventStream, TEST_DB_PASSWORD, TEST_TOKEN, bin_path, test_postgres};
pub use fake_discord::FakeDiscord;
pub use fake_model::{FakeAnthropic, FakeModel, FakeOpenAi, Hold, Quirks, Reply};
pub use otlp::OtlpReceiver;

/// Serves `router` as the real services do: with TCP_NODELAY, so a streamed answer
/// is not held back 40 ms by Nagle's algorithm waiting for a delayed ACK.
pub(crate) async fn serve(listener: tokio::net::TcpListener, router: axum::Router) {
    use axum::serve::ListenerExt;
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    let _ = axum::serve(listener, router).await;
}
