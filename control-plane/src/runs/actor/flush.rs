//! The one place a thread's context flush starts (`memory::flush`): every run that
//! ends its turn or its thread leaves the actor's table through [`AgentActor::remove_run`],
//! whatever its backend and whatever started the thread (a message, a schedule, a
//! task). A run whose worker died is not removed there: it is resumed, not ended.
//!
//! The flush runs off the actor (it waits for the agent's worker to write the
//! summary), at most one per thread at a time; its end is not reported back, as
//! nothing in the actor depends on it: the next assignment reads what it recorded.

use super::{ActiveRun, AgentActor};
use crate::memory::flush::Flusher;

/// Removes the thread from the set of flushing threads however its flush ends.
struct Flushing {
    threads: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<u64>>>,
    thread_id: u64,
}

impl Drop for Flushing {
    fn drop(&mut self) {
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.thread_id);
    }
}

impl AgentActor {
    /// A run ended: out of the table, and its thread's older context flushed if it
    /// is due.
    pub(super) fn remove_run(&mut self, run_id: &str) -> Option<ActiveRun> {
        let run = self.runs.remove(run_id)?;
        self.flush_context(run.thread_id);
        Some(run)
    }

    fn flush_context(&self, thread_id: u64) {
        let Some(memory) = self.shared.memory.get().cloned() else {
            return;
        };
        let fresh = self
            .flushing
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(thread_id);
        if !fresh {
            return; // one going already; the next run end looks again
        }
        let flushing = Flushing {
            threads: self.flushing.clone(),
            thread_id,
        };
        let shared = self.shared.clone();
        let agent = self.agent.clone();
        tokio::spawn(async move {
            let _flushing = flushing;
            let flusher = Flusher {
                store: &shared.store,
                catalog: &shared.catalog,
                summarizer: shared.summarizer.as_ref(),
                memory: &memory,
                feed: &shared.feed,
                flush_at: shared.settings.flush_at,
                default_model: shared.settings.default_model.clone(),
            };
            match flusher.flush(&agent, thread_id).await {
                Ok(Some(flush)) => {
                    tracing::info!(%agent, thread_id, messages = flush.messages, log = %flush.log_path, entry = %flush.entry_id, "a thread's older context was flushed into the daily log")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(%agent, thread_id, error = %e, "cannot flush a thread's older context; it stays in the window, and the next run end tries again")
                }
            }
        });
    }
}
