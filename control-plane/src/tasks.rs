//! The record of background tasks (SPEC D4). Workers run them and report each start
//! and end; this module stores the reports and makes sure no task outlives its
//! worker: when a worker's connection ends (it stopped, died or hung), its tasks that
//! are still running are marked lost and their process groups killed.

use chorus_proto::domain::WorkerEvent;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

use crate::store::{Store, StoreError};
use crate::workers::registry::Generation;

pub struct TaskLog {
    store: Store,
}

impl TaskLog {
    pub fn new(store: Store) -> Self {
        TaskLog { store }
    }

    /// Records a task event (`TaskStarted`, `TaskEnded`) from `agent`'s worker
    /// `generation`; other events are not this module's and are ignored.
    pub async fn apply(&self, agent: &str, generation: Generation, event: WorkerEvent) {
        let recorded = match event {
            WorkerEvent::TaskStarted(task) => {
                tracing::info!(agent, task_id = task.task_id, pid = task.pid, command = %task.command, "background task started");
                self.store.task_started(agent, generation, &task).await
            }
            WorkerEvent::TaskEnded { task_id, end } => {
                tracing::info!(agent, task_id, status = %end.status, detail = %end.detail, "background task ended");
                self.store
                    .task_ended(agent, generation, task_id, &end)
                    .await
            }
            _ => return,
        };
        if let Err(e) = recorded {
            tracing::error!(agent, error = %e, "cannot record a background task");
        }
    }

    /// `agent`'s worker `generation` is gone: its running tasks are lost, and their
    /// process groups are killed (they are the worker's children's groups, and the
    /// worker can no longer stop them).
    pub async fn worker_gone(&self, agent: &str, generation: Generation) {
        let lost = match self
            .store
            .lose_tasks(
                Some((agent, generation)),
                "its worker ended while it ran; it was stopped",
            )
            .await
        {
            Ok(lost) => lost,
            Err(e) => {
                tracing::error!(agent, error = %e, "cannot record lost background tasks");
                return;
            }
        };
        for task in lost {
            if let Ok(pid) = i32::try_from(task.pid)
                && pid > 1
            {
                // ESRCH (nothing left of the group) is the usual, fine answer.
                let _ = killpg(Pid::from_raw(pid), Signal::SIGKILL);
            }
            tracing::warn!(
                agent,
                task_id = task.task_id,
                pid = task.pid,
                "background task lost with its worker; its process group was killed"
            );
        }
    }

    /// At start-up: tasks a previous control plane saw running are lost. Their
    /// processes are not signalled: after a restart their ids may belong to others.
    pub async fn forget_previous(&self) -> Result<usize, StoreError> {
        Ok(self
            .store
            .lose_tasks(None, "the control plane restarted while it ran")
            .await?
            .len())
    }
}
