//! One control plane per data directory (and per Postgres database).
//!
//! `chorus serve` takes an exclusive `flock` on `<data-dir>/chorus.lock` before it
//! touches anything else there, and holds it for its life; the kernel lets go of it
//! on any death, SIGKILL included, so a crashed chorus never leaves a stale lock. A
//! second chorus on the same directory is refused at once. Once it holds the lock,
//! the owner writes who it is (pid, start, listeners) into the file, so the refusal
//! names it. The file is never deleted: a chorus waiting on a deleted lock file
//! would hold a lock nobody else sees. It is opened close-on-exec, so no worker or
//! tool process inherits the lock and outlives chorus holding it.
//!
//! With Postgres the same guard lives in the database (`store::DatabaseLock`): two
//! control planes on two hosts share no data directory but may share a database.
//!
//! The Postgres lock is a session-level advisory lock on a connection of its own (named
//! by its `application_name`), checked every 5 s and taken again if the server ended the
//! session; the server lets go when the owner dies.

use std::fmt;
use std::io::{Read, Seek, Write};
use std::net::SocketAddr;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// The lock file's name in the data directory.
pub const LOCK_FILE: &str = "chorus.lock";

/// Who runs a control plane, as its lock file (or its database session) says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Owner {
    pub pid: Option<u32>,
    /// RFC 3339, UTC.
    pub started: Option<String>,
    pub http: Option<String>,
    pub grpc: Option<String>,
    /// Where it runs, when it is not known to be this host (a database client's address).
    pub host: Option<String>,
}

impl Owner {
    /// This process, listening on `http` and `grpc`.
    pub fn this_process(http: SocketAddr, grpc: SocketAddr) -> Owner {
        Owner {
            pid: Some(std::process::id()),
            started: Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)),
            http: Some(http.to_string()),
            grpc: Some(grpc.to_string()),
            host: None,
        }
    }

    /// The lock file's text: `key=value` lines.
    pub fn render(&self) -> String {
        let mut text = String::new();
        let mut line = |key: &str, value: Option<String>| {
            if let Some(value) = value {
                text.push_str(&format!("{key}={value}\n"));
            }
        };
        line("pid", self.pid.map(|p| p.to_string()));
        line("started", self.started.clone());
        line("http", self.http.clone());
        line("grpc", self.grpc.clone());
        text
    }

    /// Reads what `render` wrote; unknown or malformed lines are skipped (an older
    /// or newer chorus, or a file caught half-written).
    pub fn parse(text: &str) -> Owner {
        let mut owner = Owner::default();
        for line in text.lines() {
            let Some((key, value)) = line.split_once('=') else {
                continue;
            };
            let value = value.trim().to_string();
            if value.is_empty() {
                continue;
            }
            match key.trim() {
                "pid" => owner.pid = value.parse().ok(),
                "started" => owner.started = Some(value),
                "http" => owner.http = Some(value),
                "grpc" => owner.grpc = Some(value),
                _ => {}
            }
        }
        owner
    }
}

/// "pid 123, started …, http …": what is known of the owner, for a refusal.
impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        match (self.pid, &self.host) {
            (Some(pid), Some(host)) => parts.push(format!("pid {pid} on {host}")),
            (Some(pid), None) => parts.push(format!("pid {pid}")),
            (None, Some(host)) => parts.push(format!("on {host}")),
            (None, None) => {}
        }
        if let Some(started) = &self.started {
            parts.push(format!("started {started}"));
        }
        if let Some(http) = &self.http {
            parts.push(format!("http {http}"));
        }
        if parts.is_empty() {
            // Locked but not yet written (it is starting right now), or a session
            // this database user may not see.
            f.write_str("pid unknown")
        } else {
            f.write_str(&parts.join(", "))
        }
    }
}

/// The refusal a second chorus on a data directory prints.
pub fn busy_message(owner: &Owner, data_dir: &Path) -> String {
    format!(
        "another chorus ({owner}) is using this data directory {}; stop it first, or start this one with another --data-dir",
        data_dir.display()
    )
}

/// The held lock on a data directory; dropping it (or dying) lets go.
pub struct DataDirLock {
    _file: Flock<std::fs::File>,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes `<data_dir>/chorus.lock` without waiting and writes `owner` into it; an
    /// error naming the chorus that holds it (from its file) when one does.
    pub fn take(data_dir: &Path, owner: &Owner) -> anyhow::Result<DataDirLock> {
        let path = data_dir.join(LOCK_FILE);
        // Not truncated on open: the file is the owner's until the lock is ours.
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(crate::private::FILE_MODE)
            .open(&path)
            .map_err(|e| anyhow::anyhow!("cannot open {}: {e}", path.display()))?;
        let mut file = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(locked) => locked,
            Err((mut file, Errno::EWOULDBLOCK)) => {
                let mut text = String::new();
                let _ = file.read_to_string(&mut text);
                anyhow::bail!(busy_message(&Owner::parse(&text), data_dir));
            }
            Err((_, e)) => anyhow::bail!("cannot lock {}: {e}", path.display()),
        };
        let written = (|| -> std::io::Result<()> {
            file.set_permissions(std::fs::Permissions::from_mode(crate::private::FILE_MODE))?;
            file.set_len(0)?;
            file.rewind()?;
            file.write_all(owner.render().as_bytes())?;
            file.sync_data()
        })();
        written.map_err(|e| anyhow::anyhow!("cannot write {}: {e}", path.display()))?;
        Ok(DataDirLock { _file: file, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// How often the database lock's session is checked (and the lock taken again if
/// the session was lost, say by a restart of the Postgres server).
pub const DATABASE_LOCK_CHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// Keeps the database's lock for as long as `stop` is not cancelled: a session the
/// server ended (a restart, an administrator) lets go of the lock with it, so the
/// lock is taken again on a new one; if another chorus took it meanwhile, that is
/// said, loudly, at every check. Releases it when stopped.
pub async fn keep_database_lock(
    mut lock: crate::store::DatabaseLock,
    url: crate::secrets::Secret,
    owner: Owner,
    stop: tokio_util::sync::CancellationToken,
) {
    use crate::store::{DatabaseLock, Taken};
    let mut held = true;
    loop {
        tokio::select! {
            () = stop.cancelled() => break,
            () = tokio::time::sleep(DATABASE_LOCK_CHECK) => {}
        }
        if held && lock.alive().await {
            continue;
        }
        if held {
            tracing::warn!(
                "the database session holding this chorus's lock ended; taking the lock again"
            );
        }
        match DatabaseLock::take(url.expose(), &owner).await {
            Ok(Taken::Held(again)) => {
                lock = again;
                held = true;
                tracing::info!("the database's lock is held again");
            }
            Ok(Taken::Busy(holder)) => {
                held = false;
                tracing::error!(
                    "another chorus ({holder}) took this database's lock while this one's session was down: two control planes now share the store; stop one of them"
                );
            }
            Err(e) => {
                held = false;
                tracing::warn!(error = %e, "cannot take the database's lock again yet");
            }
        }
    }
    if held {
        lock.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> Owner {
        Owner {
            pid: Some(4242),
            started: Some("2025-01-02T03:04:05Z".into()),
            http: Some("127.0.0.1:8080".into()),
            grpc: Some("127.0.0.1:50051".into()),
            host: None,
        }
    }

    #[test]
    fn an_owner_reads_back_what_it_wrote() {
        assert_eq!(Owner::parse(&owner().render()), owner());
    }

    #[test]
    fn a_half_written_or_foreign_file_gives_what_it_can() {
        let read = Owner::parse("pid=12\nstarted=\nnonsense\ncolour=blue\nhttp=[::1]:80\n");
        assert_eq!(read.pid, Some(12));
        assert_eq!(read.started, None);
        assert_eq!(read.http.as_deref(), Some("[::1]:80"));
        assert_eq!(Owner::parse("").to_string(), "pid unknown");
    }

    #[test]
    fn the_refusal_names_the_owner_and_the_directory() {
        let message = busy_message(&owner(), Path::new("/srv/chorus/data"));
        assert_eq!(
            message,
            "another chorus (pid 4242, started 2025-01-02T03:04:05Z, http 127.0.0.1:8080) is using \
             this data directory /srv/chorus/data; stop it first, or start this one with another --data-dir"
        );
        let remote = Owner {
            host: Some("10.0.0.7".into()),
            ..owner()
        };
        assert!(remote.to_string().starts_with("pid 4242 on 10.0.0.7, "));
    }

    #[test]
    fn a_second_lock_on_a_directory_is_refused_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let first = DataDirLock::take(dir.path(), &owner()).unwrap();
        let refused = DataDirLock::take(dir.path(), &Owner::default())
            .err()
            .expect("a second lock is refused");
        assert!(
            refused.to_string().contains("another chorus (pid 4242,"),
            "{refused}"
        );
        // The refused attempt left the owner's record alone.
        assert_eq!(
            Owner::parse(&std::fs::read_to_string(first.path()).unwrap()),
            owner()
        );
        drop(first);
        let again = Owner {
            pid: Some(7),
            ..Owner::default()
        };
        let second = DataDirLock::take(dir.path(), &again).unwrap();
        assert_eq!(std::fs::read_to_string(second.path()).unwrap(), "pid=7\n");
    }
}
