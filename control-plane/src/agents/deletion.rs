//! Deleting a destroyed agent's files from the dial-in workers' volume, which the
//! control plane cannot reach: a free dial-in worker does it
//! ([`WorkerManager::delete_files`]), in the background, trying again with backoff
//! until one has.
//!
//! Invariants: the row's `purge_files` mark is the record that the deletion is still
//! owed; it is cleared only once a worker has answered, so a control plane that
//! stops first finds it at its next start (start-up repair). Each attempt first
//! checks the deletion is still wanted: a name created again has a new incarnation
//! (its worker clears whatever is there itself), and a worker deletes only the
//! files of the incarnation it is asked about, so a newer agent's are never touched.
//! At most one deletion per name runs at a time.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::{AgentStatus, AuditEntry, Store, StoreError};
use crate::workers::WorkerManager;

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(300);

/// The deletions under way (one owner: the agent service).
#[derive(Clone, Default)]
pub struct Deletions {
    running: Arc<Mutex<HashSet<String>>>,
}

impl Deletions {
    /// Starts deleting `name`'s files on the workers' volume, unless that is under
    /// way already.
    pub fn start(&self, store: Store, workers: Arc<WorkerManager>, name: &str) {
        let fresh = self
            .running
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
        if !fresh {
            return;
        }
        let running = self.running.clone();
        let name = name.to_string();
        tokio::spawn(async move {
            delete_until_done(&store, &workers, &name).await;
            running
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&name);
        });
    }
}

async fn delete_until_done(store: &Store, workers: &WorkerManager, name: &str) {
    let mut delay = FIRST_RETRY;
    loop {
        match still_owed(store, name).await {
            Ok(None) => return,
            Ok(Some(incarnation)) => match workers.delete_files(name, &incarnation).await {
                Ok((deleted, by)) => {
                    if let Err(e) = store.files_purged(name).await {
                        // The deletion is done; a later attempt finds nothing left.
                        tracing::error!(agent = %name, error = %e, "cannot record that a destroyed agent's files are deleted");
                    }
                    let detail = if deleted {
                        format!("deleted from the dial-in workers' volume by {by}")
                    } else {
                        "nothing of it was left on the dial-in workers' volume".to_string()
                    };
                    tracing::info!(agent = %name, %detail, "destroyed agent's files deleted");
                    let entry = AuditEntry {
                        agent_name: name,
                        action: "agent:delete_files",
                        decision: "done",
                        user_id: Some("chorus"),
                        detail: Some(detail),
                        thread_id: None,
                        call_id: None,
                    };
                    if let Err(e) = store.audit(entry).await {
                        tracing::error!(agent = %name, error = %e, "cannot write audit entry");
                    }
                    return;
                }
                Err(why) => {
                    tracing::warn!(agent = %name, %why, retry_in = ?delay, "cannot delete a destroyed agent's files yet; trying again");
                }
            },
            Err(e) => {
                tracing::warn!(agent = %name, error = %e, retry_in = ?delay, "cannot read whether a destroyed agent's files are still to be deleted");
            }
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(LAST_RETRY);
    }
}

/// The incarnation whose files are still to be deleted; `None` once nothing is owed
/// (deleted, or the name was created again).
async fn still_owed(store: &Store, name: &str) -> Result<Option<String>, StoreError> {
    Ok(store
        .agent(name)
        .await?
        .filter(|agent| agent.status == AgentStatus::Destroyed && agent.purge_files)
        .map(|agent| agent.incarnation))
}
