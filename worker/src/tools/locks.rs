//! Per-file write locks of one agent (one worker process): two threads of the agent
//! writing the same file take turns; a writer that waits too long gets an error it
//! can act on instead of a silent pile-up. Reads never lock.
//!
//! Keys are normalised workspace-relative paths (`./a//b` and `a/b` are one file).
//! A lock is released when its guard drops, so it is freed when the write ends, on
//! error, and when the task is cancelled. Entries live only while someone holds or
//! waits for them.
//!
//! Every run of a worker shares one [`FileLocks`]; a writer waits at most the lock
//! timeout ([`DEFAULT_LOCK_TIMEOUT`], 30 s, by default) and then tells the model the
//! file is locked. The wait is a `wait` step of its own inside its tool step
//! ("Awaiting file lock on a.txt", `tool_loop::pipeline`), ended when the lock is
//! taken or failed when the wait times out.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::OwnedMutexGuard;

/// How long a writer waits for a file by default (seed 000).
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(30);

/// The file locks shared by every run of one worker.
#[derive(Debug)]
pub struct FileLocks {
    timeout: Duration,
    files: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

/// The wait for a file lock ran out; said to the model as is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{path}' is locked by another thread; try again later or work on something else")]
pub struct Locked {
    pub path: String,
}

impl Default for FileLocks {
    fn default() -> Self {
        FileLocks::new(DEFAULT_LOCK_TIMEOUT)
    }
}

impl FileLocks {
    /// Locks whose writers wait at most `timeout`.
    pub fn new(timeout: Duration) -> Self {
        FileLocks {
            timeout,
            files: Mutex::new(HashMap::new()),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn files(&self) -> MutexGuard<'_, HashMap<String, Arc<tokio::sync::Mutex<()>>>> {
        // The map is consistent after every statement; a panic elsewhere cannot
        // leave it half-changed.
        self.files
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits up to the timeout for the write lock on `key` (a normalised path).
    pub async fn lock(self: &Arc<Self>, key: &str) -> Result<FileLockGuard, Locked> {
        self.lock_noting_wait(key, || {}).await
    }

    /// [`FileLocks::lock`], calling `on_wait` first if the lock is not free at once
    /// (so the wait can be shown).
    pub async fn lock_noting_wait(
        self: &Arc<Self>,
        key: &str,
        on_wait: impl FnOnce(),
    ) -> Result<FileLockGuard, Locked> {
        let entry = Entry {
            locks: self.clone(),
            key: key.to_string(),
            mutex: self.files().entry(key.to_string()).or_default().clone(),
        };
        if let Ok(held) = entry.mutex.clone().try_lock_owned() {
            return Ok(FileLockGuard {
                _held: held,
                _entry: entry,
            });
        }
        on_wait();
        let acquired = tokio::time::timeout(self.timeout, entry.mutex.clone().lock_owned()).await;
        match acquired {
            Ok(held) => Ok(FileLockGuard {
                _held: held,
                _entry: entry,
            }),
            Err(_) => Err(Locked {
                path: key.to_string(),
            }),
        }
    }

    /// Files locked or waited for right now.
    pub fn active(&self) -> usize {
        self.files().len()
    }

    /// How many hold or wait for `key` right now.
    pub fn claims(&self, key: &str) -> usize {
        self.files()
            .get(key)
            // One reference is the map's; each holder or waiter has one more.
            .map_or(0, |mutex| Arc::strong_count(mutex) - 1)
    }
}

/// Holds one file's write lock until dropped.
#[derive(Debug)]
pub struct FileLockGuard {
    // Field order matters: the lock is released before the entry is tidied away.
    _held: OwnedMutexGuard<()>,
    _entry: Entry,
}

/// A holder's or waiter's claim on a map entry; the last one out removes it.
#[derive(Debug)]
struct Entry {
    locks: Arc<FileLocks>,
    key: String,
    mutex: Arc<tokio::sync::Mutex<()>>,
}

impl Drop for Entry {
    fn drop(&mut self) {
        let mut files = self.locks.files();
        // Claims are only made under the map lock, so the count cannot rise
        // between this check and the removal: two references are the map's and ours.
        if files
            .get(&self.key)
            .is_some_and(|m| Arc::ptr_eq(m, &self.mutex) && Arc::strong_count(m) == 2)
        {
            files.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    fn locks(timeout_ms: u64) -> Arc<FileLocks> {
        Arc::new(FileLocks::new(Duration::from_millis(timeout_ms)))
    }

    #[tokio::test]
    async fn a_held_lock_times_out_a_second_writer_with_the_message() {
        let locks = locks(100);
        let first = locks.lock("src/a.rs").await.unwrap();
        let started = Instant::now();
        let second = locks.lock("src/a.rs").await.unwrap_err();
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert_eq!(
            second.to_string(),
            "'src/a.rs' is locked by another thread; try again later or work on something else"
        );
        drop(first);
        assert!(locks.lock("src/a.rs").await.is_ok(), "released on drop");
    }

    #[tokio::test]
    async fn different_files_do_not_block_each_other() {
        let locks = locks(100);
        let _a = locks.lock("a").await.unwrap();
        let _b = locks.lock("b").await.unwrap();
        assert_eq!(locks.active(), 2);
    }

    #[tokio::test]
    async fn entries_are_removed_when_nobody_holds_or_waits() {
        let locks = locks(50);
        let held = locks.lock("a").await.unwrap();
        let _ = locks.lock("a").await.unwrap_err(); // a waiter that gave up
        assert_eq!(locks.active(), 1);
        drop(held);
        assert_eq!(locks.active(), 0);
    }

    #[tokio::test]
    async fn a_cancelled_waiter_leaves_the_lock_usable() {
        let locks = locks(5_000);
        let held = locks.lock("a").await.unwrap();
        let waiter = tokio::spawn({
            let locks = locks.clone();
            async move { locks.lock("a").await.map(drop) }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        waiter.abort();
        assert!(waiter.await.unwrap_err().is_cancelled());
        drop(held);
        assert_eq!(locks.active(), 0);
        assert!(locks.lock("a").await.is_ok());
    }
}
