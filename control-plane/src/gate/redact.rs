//! Keeping secrets out of the audit log and approval requests (pure).

use serde_json::Value;

use crate::secrets::{KnownSecrets, REDACTED};

/// Argument keys whose values are secrets whatever they hold.
fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    [
        "key",
        "token",
        "secret",
        "password",
        "passwd",
        "credential",
        "authorization",
    ]
    .iter()
    .any(|word| key.contains(word))
}

/// The call's arguments for the record: values under secret-looking keys, and any
/// occurrence of a known secret (e.g. a configured provider key) are replaced.
/// Text that is not JSON is kept as text, with known secrets replaced.
pub fn redact_arguments(arguments: &str, known_secrets: &KnownSecrets) -> String {
    let mut text = match serde_json::from_str::<Value>(arguments) {
        Ok(mut value) => {
            redact_value(&mut value);
            value.to_string()
        }
        Err(_) => arguments.to_string(),
    };
    known_secrets.scrub(&mut text);
    text
}

fn redact_value(value: &mut Value) {
    match value {
        Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if secret_key(key) && !inner.is_null() {
                    *inner = Value::from(REDACTED);
                } else {
                    redact_value(inner);
                }
            }
        }
        Value::Array(items) => items.iter_mut().for_each(redact_value),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_by_key_and_by_value_are_replaced() {
        let known = KnownSecrets::new(["sk-live-0123456789".to_string()]);
        let out = redact_arguments(
            r#"{"command":"curl -H 'Authorization: Bearer sk-live-0123456789' x","env":{"API_KEY":"abc"},"path":"a"}"#,
            &known,
        );
        assert!(
            !out.contains("sk-live-0123456789") && !out.contains("abc"),
            "{out}"
        );
        assert!(out.contains("\"path\":\"a\""), "{out}");
        assert_eq!(
            redact_arguments("not json sk-live-0123456789", &known),
            "not json [redacted]"
        );
    }
}
