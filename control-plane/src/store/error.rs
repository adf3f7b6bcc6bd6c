//! What can go wrong in the store, with a full disk told apart from everything else
//! so the API can say so (and say that it passes once there is room again).

/// The message for a write refused because the disk is full.
pub const DISK_FULL: &str = "the disk holding chorus's data directory is full; free some space \
     and try again (chorus keeps running and writes work again once there is room)";

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The row the caller wants to create exists already.
    #[error("{0}")]
    Conflict(String),
    /// The row the caller names does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The disk is full: nothing was written. Passes once space is freed.
    #[error("{DISK_FULL} ({0})")]
    DiskFull(String),
    /// The database itself failed (corruption, locked too long).
    #[error("database error: {0}")]
    Database(sqlx::Error),
    #[error("database migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A stored value cannot be read back (a bug or a hand-edited database).
    #[error("corrupt value in {column}: {value}")]
    Corrupt { column: &'static str, value: String },
}

impl StoreError {
    /// The database file cannot be created or made private.
    pub fn open_file(path: &std::path::Path, e: std::io::Error) -> Self {
        let detail = format!("{}: {e}", path.display());
        if is_no_space(&e) {
            StoreError::DiskFull(detail)
        } else {
            StoreError::Database(sqlx::Error::Io(std::io::Error::new(e.kind(), detail)))
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> Self {
        if is_disk_full(&e) {
            StoreError::DiskFull(e.to_string())
        } else if let sqlx::Error::Database(db) = &e
            && db.is_unique_violation()
            // SQLite names the column; Postgres the constraint.
            && (db.message().contains("discord_channel_id")
                || db.constraint() == Some("agents_discord_channel"))
        {
            StoreError::Conflict(
                "that Discord channel already belongs to another agent; unbind it there first \
                 (PATCH {\"discord_channel_id\": null})"
                    .into(),
            )
        } else {
            StoreError::Database(e)
        }
    }
}

/// The codes for "no room": Postgres's disk_full (SQLSTATE 53100); SQLite's SQLITE_FULL (13,
/// in the low byte of any extended code) and SQLITE_IOERR_SHMSIZE (4874, the WAL
/// index cannot grow); or an I/O error that is ENOSPC / EDQUOT itself.
pub(super) fn is_disk_full(e: &sqlx::Error) -> bool {
    match e {
        // A SQLSTATE is five characters; SQLite's codes have at most four digits.
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            if code.len() == 5 {
                code == "53100"
            } else {
                code.parse::<i32>()
                    .is_ok_and(|code| code & 0xff == 13 || code == 4874)
            }
        }),
        sqlx::Error::Io(io) => is_no_space(io),
        _ => false,
    }
}

/// Whether an I/O error means the disk (or the user's quota) is full.
pub fn is_no_space(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_space_is_told_apart_from_other_io_errors() {
        assert!(is_no_space(&std::io::Error::from_raw_os_error(28))); // ENOSPC
        assert!(is_no_space(&std::io::Error::from_raw_os_error(122))); // EDQUOT
        assert!(!is_no_space(&std::io::Error::from_raw_os_error(13))); // EACCES
        let full: StoreError = sqlx::Error::Io(std::io::Error::from_raw_os_error(28)).into();
        assert!(matches!(full, StoreError::DiskFull(_)));
        assert!(full.to_string().contains("disk"));
    }
}
