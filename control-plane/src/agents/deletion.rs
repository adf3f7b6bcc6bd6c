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
//! At most one deletion per name and target runs at a time.
//!
//! Leftovers: a dial-in worker names the agents' directories on its volume when it
//! joins ([`leftovers`]); a directory laid out for an older creation of the name, or
//! a copy of an agent destroyed without keeping its files, is one no agent can use
//! again, and is deleted on that worker (with a volume per worker, a copy a worker
//! kept while it was away).
//!
//! The errand (`pool::Work::Delete`): `DeleteAgentFiles {agent, incarnation}` is the
//! stream's first message; the worker takes the lock (2 s wait: a holder may be serving a
//! newer agent of the name), deletes everything but the lock file if the directory is
//! that incarnation's (or unfinished), answers `AgentFilesDeleted` (`deleted` only when it
//! removed something besides the lock file), and the control plane ends the stream (the
//! worker joins again). Attempts back off from 1 s doubling to 5 min; once a worker has
//! answered, the row's `purge_files` is cleared and `agent:delete_files` audited.
//! Leftovers: each joining link's `Hello.directories` goes to `AgentService::tidy_volume`,
//! which deletes (the same errand) every directory no agent can use again: an older
//! incarnation than the row's, or the row's own when it was destroyed without
//! `keep_files` (`agents.files_kept`, migration 0014), on that link's volume only
//! (`Deletion.volume`), tried once (the next join from the volume names it again). A name
//! the store never had is left alone.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::store::{AgentIncarnation, AgentStatus, AuditEntry, Store, StoreError};
use crate::workers::WorkerManager;
use chorus_proto::domain::AgentDirectory;

const FIRST_RETRY: Duration = Duration::from_secs(1);
const LAST_RETRY: Duration = Duration::from_secs(300);

/// What is to be deleted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Target {
    /// A destroyed agent's files, while its row owes them (`purge_files`).
    Destroyed,
    /// A directory a worker named that no agent can use again, on that worker's
    /// volume. Tried once: the next join from that volume names it again.
    Leftover { incarnation: String, volume: String },
}

/// The deletions under way (one owner: the agent service).
#[derive(Clone, Default)]
pub struct Deletions {
    running: Arc<Mutex<HashSet<(String, Target)>>>,
}

impl Deletions {
    /// Starts deleting `name`'s files on the workers' volume, unless that is under
    /// way already.
    pub fn start(&self, store: Store, workers: Arc<WorkerManager>, name: &str, target: Target) {
        let key = (name.to_string(), target);
        let fresh = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(key.clone());
        if !fresh {
            return;
        }
        let running = self.running.clone();
        tokio::spawn(async move {
            delete_until_done(&store, &workers, &key.0, &key.1).await;
            running
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .remove(&key);
        });
    }
}

impl Target {
    fn volume(&self) -> Option<&str> {
        match self {
            Target::Destroyed => None,
            Target::Leftover { volume, .. } => Some(volume),
        }
    }
}

/// Which of the directories a joining worker named no agent can use again.
pub fn leftovers(known: &[AgentIncarnation], named: &[AgentDirectory]) -> Vec<AgentDirectory> {
    let known: HashMap<&str, &AgentIncarnation> =
        known.iter().map(|k| (k.name.as_str(), k)).collect();
    named
        .iter()
        .filter(|dir| match known.get(dir.agent.as_str()) {
            // A name this store never had: not ours to judge.
            None => false,
            Some(row) => is_leftover(row, &dir.incarnation),
        })
        .cloned()
        .collect()
}

/// Whether `incarnation`'s directory of the agent `row` describes is of no use: an
/// older creation of the name, or the current one destroyed without its files kept.
fn is_leftover(row: &AgentIncarnation, incarnation: &str) -> bool {
    row.incarnation != incarnation || (row.status == AgentStatus::Destroyed && !row.files_kept)
}

async fn delete_until_done(store: &Store, workers: &WorkerManager, name: &str, target: &Target) {
    let mut delay = FIRST_RETRY;
    loop {
        match still_owed(store, name, target).await {
            Ok(None) => return,
            Ok(Some(incarnation)) => match workers
                .delete_files(name, &incarnation, target.volume())
                .await
            {
                Ok((false, _)) if matches!(target, Target::Leftover { .. }) => return,
                Ok((deleted, deleted_by)) => {
                    let by = &deleted_by.who;
                    if *target == Target::Destroyed
                        && let Err(e) = store.files_purged(name).await
                    {
                        // The deletion is done; a later attempt finds nothing left.
                        tracing::error!(agent = %name, error = %e, "cannot record that a destroyed agent's files are deleted");
                    }
                    let detail = match (target, deleted) {
                        (Target::Destroyed, true) => {
                            format!("deleted from the dial-in workers' volume by {by}")
                        }
                        (Target::Destroyed, false) => {
                            "nothing of it was left on the dial-in workers' volume".to_string()
                        }
                        (Target::Leftover { incarnation, .. }, _) => format!(
                            "deleted a copy no agent can use again (incarnation {incarnation}) from the volume of {by}"
                        ),
                    };
                    tracing::info!(agent = %name, %detail, "destroyed agent's files deleted");
                    let entry = AuditEntry {
                        agent_name: name,
                        action: "agent:delete_files",
                        decision: crate::store::AuditDecision::Done,
                        user_id: Some(&crate::principal::Principal::Scheduler),
                        detail: Some(detail),
                        thread_id: None,
                        call_id: None,
                        worker: deleted_by.credential.as_deref(),
                    };
                    if let Err(e) = store.audit(entry).await {
                        tracing::error!(agent = %name, error = %e, "cannot write audit entry");
                    }
                    return;
                }
                Err(why) if matches!(target, Target::Leftover { .. }) => {
                    tracing::info!(agent = %name, %why, "cannot delete a leftover copy now; asked again when its worker next joins");
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
/// (deleted, the name was created again, or a leftover became of use).
async fn still_owed(
    store: &Store,
    name: &str,
    target: &Target,
) -> Result<Option<String>, StoreError> {
    let Some(agent) = store.agent(name).await? else {
        return Ok(None);
    };
    Ok(match target {
        Target::Destroyed => (agent.status == AgentStatus::Destroyed && agent.purge_files)
            .then_some(agent.incarnation),
        Target::Leftover { incarnation, .. } => {
            let row = AgentIncarnation {
                name: agent.name,
                status: agent.status,
                incarnation: agent.incarnation,
                files_kept: agent.files_kept,
            };
            is_leftover(&row, incarnation).then(|| incarnation.clone())
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(
        name: &str,
        status: AgentStatus,
        incarnation: &str,
        files_kept: bool,
    ) -> AgentIncarnation {
        AgentIncarnation {
            name: name.into(),
            status,
            incarnation: incarnation.into(),
            files_kept,
        }
    }

    fn dir(agent: &str, incarnation: &str) -> AgentDirectory {
        AgentDirectory {
            agent: agent.into(),
            incarnation: incarnation.into(),
        }
    }

    #[test]
    fn only_directories_no_agent_can_use_again_are_leftovers() {
        let known = [
            row("live", AgentStatus::Active, "now", false),
            row("gone", AgentStatus::Destroyed, "last", false),
            row("kept", AgentStatus::Destroyed, "last", true),
        ];
        let named = [
            dir("live", "now"),    // its own files
            dir("live", "before"), // an older creation of the name
            dir("gone", "last"),   // destroyed, files not kept
            dir("kept", "last"),   // destroyed, files kept for a new agent
            dir("kept", "older"),  // an older creation of a kept one
            dir("stranger", "x"),  // a name this store never had
        ];
        assert_eq!(
            leftovers(&known, &named),
            [
                dir("live", "before"),
                dir("gone", "last"),
                dir("kept", "older")
            ]
        );
    }
}
