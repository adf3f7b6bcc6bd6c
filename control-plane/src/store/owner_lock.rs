//! The one control plane of a Postgres database: a session-level advisory lock, on
//! a connection of its own held for the control plane's life (see `ownership`).
//! Postgres lets go of it when that session ends: chorus stops, dies (the kernel
//! closes its socket), or its host is cut off long enough for the server to notice.
//! SQLite needs none: its file is in the data directory, whose lock covers it.

use sqlx::{AnyConnection, Connection, Row};

use super::StoreError;
use crate::ownership::Owner;

/// `pg_try_advisory_lock(key1, key2)`: 0x43484F52 ("CHOR") and 1, "owns the store".
/// In `pg_locks` the two-key form shows as classid, objid and objsubid = 2.
const TRY_LOCK: &str = "SELECT pg_try_advisory_lock(1128812370, 1)";
const HOLDER: &str = "SELECT COALESCE(a.application_name, ''), COALESCE(host(a.client_addr), ''), \
     COALESCE(to_char(a.backend_start AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'), '') \
     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.classid = 1128812370 \
     AND l.objid = 1 AND l.objsubid = 2 \
     AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())";

/// The held lock; [`DatabaseLock::release`] lets go at once, dropping it when the
/// connection closes.
pub struct DatabaseLock {
    conn: AnyConnection,
}

/// What trying the lock found.
pub enum Taken {
    Held(DatabaseLock),
    /// Another control plane holds it: what its session says of it.
    Busy(Owner),
}

impl DatabaseLock {
    /// Tries the lock without waiting, on a new connection to `url` that names
    /// `owner` (as its `application_name`) for whoever is refused next.
    pub async fn take(url: &str, owner: &Owner) -> Result<Taken, StoreError> {
        sqlx::any::install_default_drivers();
        let mut conn = AnyConnection::connect(url).await?;
        sqlx::query("SELECT set_config('application_name', $1, false)")
            .bind(application_name(owner))
            .execute(&mut conn)
            .await?;
        let taken: bool = sqlx::query_scalar(TRY_LOCK).fetch_one(&mut conn).await?;
        if taken {
            return Ok(Taken::Held(DatabaseLock { conn }));
        }
        // It can be let go between the two queries: then nothing is known of it.
        let row = sqlx::query(HOLDER).fetch_optional(&mut conn).await?;
        let _ = conn.close().await;
        let holder = match row {
            Some(row) => holder(
                &row.try_get::<String, _>(0)?,
                &row.try_get::<String, _>(1)?,
                &row.try_get::<String, _>(2)?,
            ),
            None => Owner::default(),
        };
        Ok(Taken::Busy(holder))
    }

    /// Whether the session holding the lock is still there (a restarted server
    /// ended it, and the lock with it).
    pub async fn alive(&mut self) -> bool {
        self.conn.ping().await.is_ok()
    }

    pub async fn release(self) {
        let _ = self.conn.close().await;
    }
}

/// `chorus pid=… http=…`: what a refused chorus reads of the holder (Postgres keeps
/// 63 bytes of it; the start and address come from the session itself).
fn application_name(owner: &Owner) -> String {
    let mut name = String::from("chorus");
    if let Some(pid) = owner.pid {
        name.push_str(&format!(" pid={pid}"));
    }
    if let Some(http) = &owner.http {
        name.push_str(&format!(" http={http}"));
    }
    name
}

/// The holder from its session's `application_name`, client address and start.
fn holder(application_name: &str, client_addr: &str, started: &str) -> Owner {
    let field = |key: &str| {
        application_name
            .split_whitespace()
            .find_map(|part| part.strip_prefix(key))
            .map(str::to_string)
    };
    let text = |s: &str| (!s.is_empty()).then(|| s.to_string());
    Owner {
        pid: field("pid=").and_then(|p| p.parse().ok()),
        http: field("http="),
        grpc: None,
        started: text(started),
        host: text(client_addr),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_from_what_its_session_says() {
        let owner = Owner {
            pid: Some(311),
            http: Some("127.0.0.1:8080".into()),
            ..Owner::default()
        };
        let name = application_name(&owner);
        assert_eq!(name, "chorus pid=311 http=127.0.0.1:8080");
        let read = holder(&name, "10.1.2.3", "2025-01-02T03:04:05Z");
        assert_eq!(
            read.to_string(),
            "pid 311 on 10.1.2.3, started 2025-01-02T03:04:05Z, http 127.0.0.1:8080"
        );
        // Another program holding the key, or a session the reader may not see.
        assert_eq!(holder("psql", "", "").to_string(), "pid unknown");
    }
}
