//! How the bot's connection to Discord stands, in Chorus's own words: "connecting"
//! until the gateway says READY ("discord: connected as <bot>"), and a failed
//! connection said once per reason ("cannot reach Discord: the connection was
//! refused; retrying every 5 s") rather than serenity's raw error every 5 s (its
//! lines reach us through `telemetry::gateway_watch`). `in_words` is pure.

use tokio::sync::{broadcast, watch};

/// How often serenity tries the gateway again (its shard queuer's pause).
pub const RETRY_SECS: u64 = 5;

/// The connection's state, for whoever shows it (the log, `GET /api/status`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum DiscordState {
    Connecting,
    Connected {
        bot: String,
    },
    /// The last attempt failed, for this reason (in words).
    Unreachable {
        reason: String,
    },
}

impl DiscordState {
    /// The state in a sentence (`chorus status`).
    pub fn describe(&self) -> String {
        match self {
            DiscordState::Connecting => "connecting".to_string(),
            DiscordState::Connected { bot } => format!("connected as {bot}"),
            DiscordState::Unreachable { reason } => {
                format!("cannot reach Discord: {reason}; retrying every {RETRY_SECS} s")
            }
        }
    }
}

/// serenity's `Debug` text of a failed gateway connection, in words.
pub fn in_words(raw: &str) -> String {
    let lower = raw.to_ascii_lowercase();
    let said = |needles: &[&str]| needles.iter().any(|n| lower.contains(n));
    if said(&[
        "failed to lookup address",
        "name or service not known",
        "temporary failure in name resolution",
        "no address associated",
        "nodename nor servname",
    ]) {
        "name resolution failed (no network, or no DNS)".into()
    } else if said(&["connectionrefused", "connection refused"]) {
        "the connection was refused".into()
    } else if said(&["timedout", "timed out"]) {
        "the connection timed out".into()
    } else if said(&[
        "networkunreachable",
        "network is unreachable",
        "hostunreachable",
    ]) {
        "the network is unreachable".into()
    } else if said(&[
        "connectionreset",
        "connection reset",
        "brokenpipe",
        "unexpectedeof",
    ]) {
        "the connection was closed".into()
    } else if said(&["certificate", "invalidcertificate", "tls", "rustls"]) {
        format!("the TLS handshake failed ({})", last_words(raw))
    } else {
        last_words(raw)
    }
}

/// The innermost quoted message of a `Debug` chain, else the chain itself.
fn last_words(raw: &str) -> String {
    raw.rsplit('"')
        .nth(1)
        .filter(|quoted| !quoted.trim().is_empty())
        .unwrap_or(raw)
        .to_string()
}

/// Says each new reason the gateway cannot be reached (once, until it connects or
/// the reason changes), and keeps `state` current. Runs until the failures end.
pub async fn watch_failures(
    mut failures: broadcast::Receiver<String>,
    state: std::sync::Arc<watch::Sender<DiscordState>>,
) {
    loop {
        let raw = match failures.recv().await {
            Ok(raw) => raw,
            Err(broadcast::error::RecvError::Lagged(_)) => continue,
            Err(broadcast::error::RecvError::Closed) => return,
        };
        let reason = in_words(&raw);
        let new = state.send_if_modified(|now| {
            let same = matches!(now, DiscordState::Unreachable { reason: r } if *r == reason);
            if !same {
                *now = DiscordState::Unreachable {
                    reason: reason.clone(),
                };
            }
            !same
        });
        if new {
            tracing::warn!("cannot reach Discord: {reason}; retrying every {RETRY_SECS} s");
        }
        // serenity's own words, for whoever debugs it (RUST_LOG=debug).
        tracing::debug!(%raw, "a connection to the Discord gateway failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_failures_are_said_in_words() {
        assert_eq!(
            in_words(
                r#"Tungstenite(Io(Custom { kind: Uncategorized, error: "failed to lookup address information: Name or service not known" }))"#
            ),
            "name resolution failed (no network, or no DNS)"
        );
        assert_eq!(
            in_words(
                r#"Tungstenite(Io(Os { code: 111, kind: ConnectionRefused, message: "Connection refused" }))"#
            ),
            "the connection was refused"
        );
        assert_eq!(
            in_words(r#"Tungstenite(Io(Kind(TimedOut)))"#),
            "the connection timed out"
        );
        assert_eq!(
            in_words(r#"Tungstenite(Http(Response { status: 502, body: "bad gateway" }))"#),
            "bad gateway"
        );
    }

    #[tokio::test]
    async fn a_reason_is_said_once_until_it_changes() {
        let (failures, rx) = broadcast::channel(8);
        let (state, mut seen) = watch::channel(DiscordState::Connecting);
        let task = tokio::spawn(watch_failures(rx, std::sync::Arc::new(state)));
        let refused = "Io(Kind(ConnectionRefused))";
        failures.send(refused.into()).unwrap();
        seen.changed().await.unwrap();
        assert_eq!(
            *seen.borrow_and_update(),
            DiscordState::Unreachable {
                reason: "the connection was refused".into()
            }
        );
        failures.send(refused.into()).unwrap();
        failures.send("Io(Kind(TimedOut))".into()).unwrap();
        seen.changed().await.unwrap();
        assert_eq!(
            *seen.borrow_and_update(),
            DiscordState::Unreachable {
                reason: "the connection timed out".into()
            }
        );
        drop(failures);
        task.await.unwrap();
    }
}
