//! API tokens per person or automation: issued by an admin, shown once, kept only
//! as a SHA-256 of the token. A token is 32 random bytes, so a plain hash cannot
//! be searched back to it, and a request's token is found by its hash: no
//! comparison ever runs over the secret itself, so response times say nothing
//! about it. The token's user, and that user's `[roles]` entry, decide what it may.

use std::time::Duration;

use crate::store::{NewUserToken, Store, StoreError, UserTokenRecord};

/// What every issued token starts with, so people (and secret scanners) know one.
pub const PREFIX: &str = "chorus_";

/// How stale `last_used_at` may get before a use is written: a busy token costs a
/// write a minute, not one per request.
const TOUCH_EVERY: Duration = Duration::from_secs(60);

/// A token just issued: the record and the only copy of its secret.
pub struct Issued {
    pub record: UserTokenRecord,
    pub token: String,
}

/// A user name a token may be issued to: 1–64 of `A-Z a-z 0-9 . _ - @`, starting
/// with a letter or digit (so never `discord:…`, whose roles come from Discord).
pub fn check_user(user: &str) -> Result<(), String> {
    let ok = (1..=64).contains(&user.len())
        && user.as_bytes()[0].is_ascii_alphanumeric()
        && user
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-@".contains(&b));
    if user == crate::principal::SCHEDULER {
        return Err(format!(
            "'{user}' is reserved: the audit log names the control plane itself so; choose another user name"
        ));
    }
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{user}' is not a user name for a token: use 1 to 64 of A-Z a-z 0-9 . _ - @, \
             starting with a letter or digit (the name [roles] gives a role to)"
        ))
    }
}

/// A label says what a token is for: at most 100 characters, no control characters.
pub fn check_label(label: &str) -> Result<(), String> {
    if label.chars().count() > 100 || label.chars().any(char::is_control) {
        return Err(
            "label must be at most 100 characters, without line breaks or control characters"
                .to_string(),
        );
    }
    Ok(())
}

/// Issues a token for `user`, recorded as issued by `by`.
pub async fn issue(store: &Store, user: &str, label: &str, by: &str) -> Result<Issued, StoreError> {
    // No randomness from the OS: an I/O error, as the database's own would be.
    let random = || crate::secrets::random_token().map_err(|e| StoreError::Database(e.into()));
    let token = format!("{PREFIX}{}", random()?);
    let mut id = random()?;
    id.truncate(12);
    let record = store
        .insert_user_token(NewUserToken {
            id,
            user: user.to_string(),
            label: label.to_string(),
            token_hash: crate::secrets::token_hash(&token),
            created_by: by.to_string(),
        })
        .await?;
    Ok(Issued { record, token })
}

/// The user of a good token, or `None` (unknown or revoked). A revocation counts
/// from the next request: nothing is cached.
pub async fn verify(store: &Store, presented: &str) -> Result<Option<String>, StoreError> {
    if !presented.starts_with(PREFIX) {
        return Ok(None);
    }
    let Some(record) = store
        .live_user_token(&crate::secrets::token_hash(presented))
        .await?
    else {
        return Ok(None);
    };
    let now = chrono::Utc::now();
    let stale = record
        .last_used_at
        .as_deref()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .is_none_or(|t| {
            now.signed_duration_since(t)
                .to_std()
                .is_ok_and(|d| d >= TOUCH_EVERY)
        });
    // When it was last used is for people reading the list: failing to note it (a
    // full disk) must not refuse a good token.
    if stale
        && let Err(e) = store
            .touch_user_token(&record.id, &crate::store::format_time(now))
            .await
    {
        tracing::warn!(token = %record.id, error = %e, "cannot note when a token was last used");
    }
    Ok(Some(record.user))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_sha256_hex() {
        // SHA-256("abc"), FIPS 180-2's first example.
        assert_eq!(
            crate::secrets::token_hash("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    /// `chorus` too: it is how the control plane itself is named in records (see `principal`).
    #[test]
    fn user_names_are_plain_and_never_discord_ids() {
        for good in ["alice", "ci-bot", "a.b_c@example.org", "7"] {
            assert!(check_user(good).is_ok(), "{good}");
        }
        for bad in ["", "discord:1", "chorus", "-x", "a b", &"x".repeat(65), "é"] {
            assert!(check_user(bad).is_err(), "{bad}");
        }
        assert!(check_label("nightly CI").is_ok());
        assert!(check_label("two\nlines").is_err());
    }
}

#[cfg(test)]
mod store_tests {
    use super::*;
    use crate::store::test_store;

    #[tokio::test]
    async fn an_issued_token_is_found_by_its_hash_until_revoked() {
        let (store, _dir) = test_store().await;
        let issued = issue(&store, "alice", "laptop", "api").await.unwrap();
        assert!(issued.token.starts_with(PREFIX) && issued.token.len() == PREFIX.len() + 64);
        assert_eq!(issued.record.user, "alice");
        assert_eq!(issued.record.created_by, "api");
        // Found, and its use recorded; anything else (another token, the hash
        // itself, no prefix) is not.
        assert_eq!(
            verify(&store, &issued.token).await.unwrap().as_deref(),
            Some("alice")
        );
        for wrong in [
            format!("{PREFIX}{}", "0".repeat(64)),
            crate::secrets::token_hash(&issued.token),
            issued.token[PREFIX.len()..].to_string(),
        ] {
            assert_eq!(verify(&store, &wrong).await.unwrap(), None, "{wrong}");
        }
        let listed = store.user_tokens(Some("alice")).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert!(listed[0].last_used_at.is_some());
        assert!(store.user_tokens(Some("bob")).await.unwrap().is_empty());

        // Revoking needs the right user; then the token is refused, the row stays.
        assert!(
            store
                .revoke_user_token("bob", &issued.record.id)
                .await
                .unwrap()
                .is_none()
        );
        let revoked = store
            .revoke_user_token("alice", &issued.record.id)
            .await
            .unwrap()
            .unwrap();
        assert!(revoked.revoked_at.is_some());
        assert_eq!(verify(&store, &issued.token).await.unwrap(), None);
        let again = store
            .revoke_user_token("alice", &issued.record.id)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            again.revoked_at, revoked.revoked_at,
            "the first revocation counts"
        );
        assert_eq!(store.user_tokens(None).await.unwrap().len(), 1);
    }
}
