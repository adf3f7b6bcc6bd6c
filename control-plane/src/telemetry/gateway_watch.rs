//! serenity says why it cannot connect to Discord's gateway only in its own log
//! ("[Shard Queuer] Err starting shard 0: Tungstenite(Io(…))", every 5 s). This
//! layer takes those lines out of the log and hands their reason to the Discord
//! front end, which says it once, in words (`discord::connection`). Nothing else of
//! serenity's log changes.

use std::sync::OnceLock;

use tokio::sync::broadcast;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Filter};

/// Where serenity logs a failed shard start.
const TARGET: &str = "serenity::gateway::bridge::shard_queuer";
/// How that line begins; the error's `Debug` text follows.
const FAILED_START: &str = "[Shard Queuer] Err starting shard ";

fn channel() -> &'static broadcast::Sender<String> {
    static FAILURES: OnceLock<broadcast::Sender<String>> = OnceLock::new();
    FAILURES.get_or_init(|| broadcast::channel(16).0)
}

/// The reasons of failed gateway connections from now on, as serenity wrote them.
pub fn failures() -> broadcast::Receiver<String> {
    channel().subscribe()
}

/// The reason in a failed-start line (`0: Tungstenite(…)` → `Tungstenite(…)`).
fn reason(message: &str) -> Option<&str> {
    let rest = message.strip_prefix(FAILED_START)?;
    Some(rest.split_once(": ").map_or(rest, |(_, why)| why))
}

/// A per-layer filter for the log: serenity's shard-queuer lines stay out of it
/// (their news arrives through [`failures`]); every other event passes. It also
/// picks the failures up, so the front end hears of them whatever the log shows.
pub struct TakeGatewayFailures;

impl<S> Filter<S> for TakeGatewayFailures {
    fn enabled(&self, _: &tracing::Metadata<'_>, _: &Context<'_, S>) -> bool {
        // Decided per event (below), where the failure is picked up.
        true
    }

    fn event_enabled(&self, event: &tracing::Event<'_>, _: &Context<'_, S>) -> bool {
        if event.metadata().target() != TARGET {
            return true;
        }
        let mut message = Message(String::new());
        event.record(&mut message);
        if let Some(why) = reason(&message.0) {
            // Nobody listening (no Discord): nothing to say.
            let _ = channel().send(why.to_string());
        }
        false
    }
}

struct Message(String);

impl Visit for Message {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.0 = format!("{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0 = value.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_is_what_follows_the_shard_number() {
        assert_eq!(
            reason("[Shard Queuer] Err starting shard 0: Tungstenite(Io(Kind(ConnectionRefused)))"),
            Some("Tungstenite(Io(Kind(ConnectionRefused)))")
        );
        assert_eq!(reason("[Shard Queuer] Re-queueing start of shard 0"), None);
    }
}
