//! Random tokens, their comparison, and keeping known secrets out of what is shown.

use std::sync::Arc;

use chorus_proto::domain::WorkerEvent;

/// A value that must never reach logs: `Debug` prints a placeholder.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The secrets Chorus holds (every one [`Settings::secrets`](crate::config::Settings::secrets)
/// lists, and the API token), by value, so that text
/// from a worker or a model (a step description, a tool result, an answer) can be
/// scrubbed before it is stored, shown, sent to a frontend or logged. A model could
/// meet one in the workspace (a `.env` file) and repeat it.
#[derive(Clone, Default)]
pub struct KnownSecrets(Arc<Vec<String>>);

/// Never the values: settings that hold these may be logged.
impl std::fmt::Debug for KnownSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "KnownSecrets({} values)", self.0.len())
    }
}

impl KnownSecrets {
    /// Values shorter than 8 characters are ignored: they would redact ordinary words.
    /// Each is also known as it reads inside a JSON string (a `"` or a backslash escaped),
    /// since tool arguments and model requests are JSON text.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets
            .into_iter()
            .filter(|s| s.len() >= 8)
            .flat_map(|s| {
                let quoted = serde_json::to_string(&s).unwrap_or_default();
                let in_json = quoted[1..quoted.len() - 1].to_string();
                [s, in_json]
            })
            .collect();
        // Longest first, so a secret that contains another is replaced whole (and
        // equal values side by side, for dedup).
        secrets.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        secrets.dedup();
        KnownSecrets(Arc::new(secrets))
    }

    /// Replaces every known secret in `text`; allocates only when there is one.
    pub fn scrub(&self, text: &mut String) {
        self.scrub_found(text);
    }

    /// `scrub`, saying whether it replaced anything.
    pub fn scrub_found(&self, text: &mut String) -> bool {
        let mut found = false;
        for secret in self.0.iter() {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), REDACTED);
                found = true;
            }
        }
        found
    }

    /// Whether `bytes` contain any known secret (an environment variable's value,
    /// which need not be UTF-8).
    pub fn found_in(&self, bytes: &[u8]) -> bool {
        self.0.iter().any(|secret| {
            let secret = secret.as_bytes();
            bytes.windows(secret.len()).any(|w| w == secret)
        })
    }

    pub fn scrubbed(&self, text: &str) -> String {
        let mut text = text.to_string();
        self.scrub(&mut text);
        text
    }

    /// A worker's event with every known secret scrubbed from the text it carries.
    /// Done once, where events arrive, so nothing behind (threads, the live feed,
    /// jobs, the log) ever sees one.
    pub fn scrub_event(&self, mut event: WorkerEvent) -> WorkerEvent {
        match &mut event {
            WorkerEvent::StepStarted(step) => self.scrub(&mut step.description),
            WorkerEvent::MessageAppended { message, .. } => {
                self.scrub(&mut message.content);
                for call in &mut message.tool_calls {
                    self.scrub(&mut call.arguments);
                }
            }
            WorkerEvent::RunCompleted { final_text, .. } => self.scrub(final_text),
            WorkerEvent::RunFailed { error, .. } => self.scrub(error),
            // A secret split across two deltas is not caught here; the stored message is.
            WorkerEvent::TextDelta { text, .. } => self.scrub(text),
            WorkerEvent::JobStarted(job) => self.scrub(&mut job.command),
            WorkerEvent::JobEnded { end, .. } => self.scrub(&mut end.detail),
            WorkerEvent::Summary {
                result: Ok(text) | Err(text),
                ..
            } => self.scrub(text),
            WorkerEvent::AgentFilesDeleted {
                result: Err(error), ..
            } => self.scrub(error),
            // A server's stderr may hold what it was given.
            WorkerEvent::McpServerState { error, .. } => self.scrub(error),
            // A tool check is left as the model gave it: the gate decides on the real
            // call and redacts what it records itself.
            WorkerEvent::ToolCheck { .. }
            | WorkerEvent::Hello { .. }
            | WorkerEvent::Heartbeat { .. }
            | WorkerEvent::InputTaken { .. }
            | WorkerEvent::CliSessionStarted { .. }
            | WorkerEvent::ResumedCallDone { .. }
            | WorkerEvent::AgentFilesDeleted { result: Ok(_), .. }
            | WorkerEvent::StepEnded(_) => {}
        }
        event
    }
}

/// A fresh random token: 32 bytes from the OS, hex-encoded.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness from the OS: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The stored form of an issued token (a person's API token, a worker's join
/// credential): its SHA-256, hex. The tokens are 32 random bytes, so the hash
/// cannot be searched back, and a presented token is found by its hash.
pub fn token_hash(token: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(token.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Compares two secrets in time that depends only on their lengths, so a caller
/// cannot learn a token byte by byte from response times.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Extracts the token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_long_and_distinct() {
        let a = random_token().unwrap();
        let b = random_token().unwrap();
        assert_eq!(a.len(), 64);
        assert_ne!(a, b);
    }

    #[test]
    fn comparison_is_exact() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abc", b"abd"));
        assert!(!constant_time_eq(b"abc", b"abcd"));
    }

    #[test]
    fn known_secrets_are_replaced_wherever_they_appear() {
        let secrets = KnownSecrets::new([
            "sk-abcdefgh".to_string(),
            "sk-abcdefgh-longer".to_string(),
            "short".to_string(),
        ]);
        let mut text = "a sk-abcdefgh-longer b sk-abcdefgh c short".to_string();
        secrets.scrub(&mut text);
        assert_eq!(text, "a [redacted] b [redacted] c short");
        assert_eq!(secrets.scrubbed("nothing here"), "nothing here");
        assert_eq!(format!("{secrets:?}"), "KnownSecrets(2 values)");
    }

    #[test]
    fn a_secret_is_found_as_json_writes_it_too() {
        let secret = r#"key"with\quote"#.to_string();
        let secrets = KnownSecrets::new([secret.clone()]);
        let body = serde_json::json!({"content": format!("found {secret} here")}).to_string();
        let scrubbed = secrets.scrubbed(&body);
        assert_eq!(scrubbed, r#"{"content":"found [redacted] here"}"#);
        assert_eq!(secrets.scrubbed(&secret), REDACTED);
    }

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer xyz"), Some("xyz"));
        assert_eq!(bearer_token("bearer  xyz "), Some("xyz"));
        assert_eq!(bearer_token("Basic xyz"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearerxyz"), None);
    }
}
