//! Random tokens, their comparison, and keeping known secrets out of what is shown.

use std::sync::Arc;

/// What a secret is replaced with.
pub const REDACTED: &str = "[redacted]";

/// The secrets Chorus holds (provider keys, the API token), by value, so that text
/// from a worker or a model (a step description, a tool result, an answer) can be
/// scrubbed before it is stored, shown, sent to a frontend or logged. A model could
/// meet one in the workspace (a `.env` file) and repeat it.
#[derive(Debug, Clone, Default)]
pub struct KnownSecrets(Arc<Vec<String>>);

impl KnownSecrets {
    /// Values shorter than 8 characters are ignored: they would redact ordinary words.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Self {
        let mut secrets: Vec<String> = secrets.into_iter().filter(|s| s.len() >= 8).collect();
        // Longest first, so a secret that contains another is replaced whole.
        secrets.sort_by_key(|s| std::cmp::Reverse(s.len()));
        secrets.dedup();
        KnownSecrets(Arc::new(secrets))
    }

    /// Replaces every known secret in `text`; allocates only when there is one.
    pub fn scrub(&self, text: &mut String) {
        for secret in self.0.iter() {
            if text.contains(secret.as_str()) {
                *text = text.replace(secret.as_str(), REDACTED);
            }
        }
    }

    pub fn scrubbed(&self, text: &str) -> String {
        let mut text = text.to_string();
        self.scrub(&mut text);
        text
    }
}

/// A fresh random token: 32 bytes from the OS, hex-encoded.
pub fn random_token() -> std::io::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes)
        .map_err(|e| std::io::Error::other(format!("no randomness from the OS: {e}")))?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
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
