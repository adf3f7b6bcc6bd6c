//! The page's login sessions, in memory: a random session id (the cookie's value)
//! maps to who logged in, their CSRF token and when the session ends. Kept by the
//! id's SHA-256, so no lookup compares over the secret (as `user_tokens` does).
//! A restart ends every session (people log in again). The raw token someone logged
//! in with is never kept: for an issued token, its hash, so that revoking the token
//! ends its sessions at their next request.
//!
//! Also what the API's authentication needs of the page (`http::access`): the
//! cookie's name and how it is read, and the CSRF check. Nothing here knows the
//! HTTP API or the page's routes, so both may use it.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, Method, header};

use crate::secrets::{random_token, token_hash};
use crate::token_bucket::TokenBucket;

/// The cookie that holds a session's id.
pub const COOKIE: &str = "chorus_session";
/// The header a cookie-authenticated state-changing request carries.
pub const CSRF_HEADER: &str = "x-csrf-token";

/// The page's state: its sessions and the login form's limit.
#[derive(Default)]
pub struct Web {
    pub sessions: Sessions,
    pub login_limit: LoginLimit,
}

/// Wrong tokens at the login form, counted by the client's address: a bucket of 10
/// for each, refilled one a second. When a client's is empty the form refuses its
/// every token for a moment (429) without checking it; other clients are not held
/// back by it. At most [`LoginLimit::CLIENTS`] buckets are kept: a full one is
/// forgotten first, and past that the clients without one share a bucket.
pub struct LoginLimit(Mutex<HashMap<Option<IpAddr>, TokenBucket>>);

impl Default for LoginLimit {
    fn default() -> Self {
        LoginLimit(Mutex::new(HashMap::new()))
    }
}

impl LoginLimit {
    /// How many clients' buckets are kept.
    pub const CLIENTS: usize = 4096;
    const RATE: f64 = 1.0;
    const CAPACITY: f64 = 10.0;

    /// Whether `client` (None: unknown, such as a test's in-process request) has
    /// no wrong try left just now.
    pub fn exhausted(&self, client: Option<IpAddr>, now: Instant) -> bool {
        let buckets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        buckets
            .get(&client)
            .is_some_and(|bucket| bucket.clone().take_up_to(1, now) == 0)
    }

    /// Counts a wrong token from `client`.
    pub fn charge(&self, client: Option<IpAddr>, now: Instant) {
        let mut buckets = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !buckets.contains_key(&client) && buckets.len() >= Self::CLIENTS {
            // A bucket that refilled says nothing any more.
            buckets.retain(|_, bucket| {
                bucket.clone().take_up_to(Self::CAPACITY as u64, now) < Self::CAPACITY as u64
            });
        }
        let key = if buckets.contains_key(&client) || buckets.len() < Self::CLIENTS {
            client
        } else {
            None
        };
        buckets
            .entry(key)
            .or_insert_with(|| TokenBucket::full(Self::RATE, Self::CAPACITY, now))
            .take_up_to(1, now);
    }
}

/// The session id a request's cookie holds, if any.
pub fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
        .filter(|v| !v.is_empty())
}

/// Whether a request may change something under `session`: reading needs nothing,
/// anything else the session's CSRF token in `X-CSRF-Token`. A page of another
/// site cannot read the token, so it cannot send it.
pub fn csrf_ok(method: &Method, headers: &HeaderMap, session: &Session) -> bool {
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return true;
    }
    headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|sent| {
            crate::secrets::constant_time_eq(sent.as_bytes(), session.csrf.as_bytes())
        })
}

/// How long a session lasts from login, whatever it does.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// Who a session is, as the request that carries its cookie acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub user: String,
    /// What a state-changing request with the cookie must send as `X-CSRF-Token`.
    pub csrf: String,
    /// The issued token it was opened with (its hash); `None` for the API token.
    pub token_hash: Option<String>,
    expires: Instant,
}

/// A session just opened: its id (the cookie's value, only here) and itself.
pub struct Opened {
    pub id: String,
    pub session: Session,
}

#[derive(Default)]
pub struct Sessions {
    by_hash: Mutex<HashMap<String, Session>>,
}

impl Sessions {
    /// Opens a session for `user`; `token_hash` as in [`Session`].
    pub fn open(
        &self,
        user: &str,
        token_hash_of_issued: Option<String>,
        now: Instant,
    ) -> std::io::Result<Opened> {
        let id = random_token()?;
        let session = Session {
            user: user.to_string(),
            csrf: random_token()?,
            token_hash: token_hash_of_issued,
            expires: now + LIFETIME,
        };
        let mut map = self
            .by_hash
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Ended sessions go when a new one comes: the map holds at most the live
        // ones plus those ended since the last login.
        map.retain(|_, s| s.expires > now);
        map.insert(token_hash(&id), session.clone());
        Ok(Opened { id, session })
    }

    /// The live session of a cookie's value, if any.
    pub fn get(&self, id: &str, now: Instant) -> Option<Session> {
        let key = token_hash(id);
        let mut map = self
            .by_hash
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match map.get(&key) {
            Some(s) if s.expires > now => Some(s.clone()),
            Some(_) => {
                map.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends a session (logout, or its token was revoked).
    pub fn end(&self, id: &str) {
        let mut map = self
            .by_hash
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        map.remove(&token_hash(id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn wrong_tokens_hold_back_only_the_client_that_sent_them() {
        let limit = LoginLimit::default();
        let now = Instant::now();
        let (one, other): (IpAddr, IpAddr) =
            ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
        for _ in 0..10 {
            assert!(!limit.exhausted(Some(one), now));
            limit.charge(Some(one), now);
        }
        assert!(limit.exhausted(Some(one), now));
        assert!(!limit.exhausted(Some(other), now));
        assert!(!limit.exhausted(None, now));
        // A second later, one more try.
        assert!(!limit.exhausted(Some(one), now + Duration::from_secs(1)));
    }

    #[test]
    fn past_the_cap_refilled_buckets_go_and_then_newcomers_share_one() {
        let limit = LoginLimit::default();
        let now = Instant::now();
        let client = |i: usize| Some(IpAddr::from([10, (i >> 16) as u8, (i >> 8) as u8, i as u8]));
        for i in 0..LoginLimit::CLIENTS {
            limit.charge(client(i), now);
        }
        // All still counting: a newcomer shares the overflow bucket (None's).
        let newcomer = client(LoginLimit::CLIENTS);
        for _ in 0..10 {
            limit.charge(newcomer, now);
        }
        assert!(limit.exhausted(None, now));
        assert!(!limit.exhausted(client(0), now));
        // Once they refilled, they are forgotten and a newcomer gets its own.
        let later = now + Duration::from_secs(20);
        limit.charge(newcomer, later);
        assert!(!limit.exhausted(None, later));
        assert_eq!(limit.0.lock().unwrap().len(), 1);
    }

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            HeaderValue::from_static("a=1; chorus_session=abc; b=2"),
        );
        assert_eq!(session_cookie(&headers), Some("abc"));
        headers.insert(header::COOKIE, HeaderValue::from_static("chorus_session="));
        assert_eq!(session_cookie(&headers), None);
    }

    #[test]
    fn a_session_lives_until_it_ends_or_expires() {
        let sessions = Sessions::default();
        let now = Instant::now();
        let opened = sessions.open("ada", None, now).unwrap();
        assert_eq!(opened.id.len(), 64);
        assert_ne!(opened.id, opened.session.csrf);
        assert_eq!(sessions.get(&opened.id, now).unwrap().user, "ada");
        assert!(sessions.get("not-a-session", now).is_none());
        assert!(sessions.get(&opened.id, now + LIFETIME).is_none());
        let again = sessions.open("ada", None, now).unwrap();
        assert_ne!(again.id, opened.id);
        sessions.end(&again.id);
        assert!(sessions.get(&again.id, now).is_none());
    }
}
