//! The record of background jobs (SPEC D4; "tasks" before issue 27: that word is the
//! task board's now). Workers run them and report each start and end; this module
//! stores the reports. When a worker's connection ends (it
//! stopped, died or hung), its jobs still running are marked lost; their processes
//! are ended by the worker supervisor, which finds them by their mark
//! (`workers::procs`), never by a pid a worker reported.
//!
//! A reported pid is checked when it arrives: it must be in the reporting worker's
//! process tree (its parents, walked in /proc, lead to the worker the launcher
//! started). Otherwise the job is recorded as unverified, and the warning names it.
//!
//! Every end (or loss) is told on the live feed as a `notification` of kind
//! `task_ended` (its wire name, for now), once: only the report that moves the job
//! out of `running` does.
//!
//! At start-up, the jobs a previous control plane left `running` are marked lost too.

use std::sync::Arc;

use chorus_proto::domain::WorkerEvent;

use crate::feed::{Notification, ThreadFeed};
use crate::store::{JobStatus, Store, StoreError};
use crate::workers::procs::in_tree;
use crate::workers::registry::{Generation, Registry};

pub struct JobLog {
    store: Store,
    registry: Arc<Registry>,
    feed: ThreadFeed,
}

/// What the `task_ended` notification says, for people. Its words are still those
/// from before jobs had their name ("Background task", `task_output`, which stays
/// accepted): issue 27 changes one thing on the feed's wire, the kind.
pub fn describe_end(
    job_id: u32,
    command: &str,
    status: JobStatus,
    exit_code: Option<i32>,
) -> String {
    let command: String = command.chars().take(80).collect();
    let how = match (status, exit_code) {
        (_, Some(code)) => format!("{status} with exit code {code}"),
        (JobStatus::Lost, None) => "was lost with its worker".to_string(),
        (status, None) => status.to_string(),
    };
    format!("Background task {job_id} ({command}) {how}. Read its output with task_output.")
}

const WORKER_ENDED: &str = "its worker ended while it ran; it was stopped";

impl JobLog {
    pub fn new(store: Store, registry: Arc<Registry>, feed: ThreadFeed) -> Self {
        JobLog {
            store,
            registry,
            feed,
        }
    }

    fn notify(
        &self,
        agent: &str,
        job_id: u32,
        command: &str,
        status: JobStatus,
        exit_code: Option<i32>,
        detail: &str,
    ) {
        self.feed.publish_agent(
            agent,
            Notification::JobEnded {
                task_id: job_id,
                command: command.to_string(),
                status: status.as_str().to_string(),
                exit_code,
                detail: detail.to_string(),
                text: describe_end(job_id, command, status, exit_code),
            },
        );
    }

    /// Records a job event (`JobStarted`, `JobEnded`) from `agent`'s worker
    /// `generation`; other events are not this module's and are ignored.
    pub async fn apply(&self, agent: &str, generation: Generation, event: WorkerEvent) {
        let recorded = match event {
            WorkerEvent::JobStarted(job) => {
                let worker = self.registry.worker_pid(agent, generation);
                let verified = worker.is_some_and(|worker| in_tree(job.pid, worker));
                if verified {
                    tracing::info!(agent, job_id = job.job_id, pid = job.pid, command = %job.command, "background job started");
                } else {
                    tracing::warn!(agent, job_id = job.job_id, pid = job.pid, worker_pid = ?worker, command = %job.command,
                        "background job started with a pid outside its worker's process tree; recorded as unverified");
                }
                self.store
                    .job_started(agent, generation, &job, verified)
                    .await
            }
            WorkerEvent::JobEnded { job_id, end } => {
                tracing::info!(agent, job_id, status = %end.status, detail = %end.detail, "background job ended");
                match self.store.job_ended(agent, generation, job_id, &end).await {
                    Ok(Some(command)) => {
                        self.notify(
                            agent,
                            job_id,
                            &command,
                            end.status.into(),
                            end.exit_code,
                            &end.detail,
                        );
                        Ok(())
                    }
                    Ok(None) => Ok(()), // not running (any more): told already
                    Err(e) => Err(e),
                }
            }
            _ => return,
        };
        if let Err(e) = recorded {
            // (The words are what e2e tests look for in the log.)
            tracing::error!(agent, error = %e, "cannot record a background task");
        }
    }

    /// `agent`'s worker `generation` is gone: its running jobs are lost. Their
    /// processes are not signalled here: the supervisor ends what the worker left by
    /// its mark, which it can verify, unlike a pid the worker reported.
    pub async fn worker_gone(&self, agent: &str, generation: Generation) {
        match self
            .store
            .lose_jobs(Some((agent, generation)), WORKER_ENDED)
            .await
        {
            Ok(lost) => {
                for job in lost {
                    tracing::warn!(
                        agent,
                        job_id = job.job_id,
                        pid = job.pid,
                        "background job lost with its worker"
                    );
                    self.notify(
                        agent,
                        job.job_id,
                        &job.command,
                        JobStatus::Lost,
                        None,
                        WORKER_ENDED,
                    );
                }
            }
            Err(e) => tracing::error!(agent, error = %e, "cannot record lost background jobs"),
        }
    }

    /// At start-up: jobs a previous control plane saw running are lost. Their
    /// processes are not signalled by pid (after a restart their ids may belong to
    /// others); start-up ends them by their mark instead.
    pub async fn forget_previous(&self) -> Result<usize, StoreError> {
        Ok(self
            .store
            .lose_jobs(None, "the control plane restarted while it ran")
            .await?
            .len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chorus_proto::domain::JobReport;
    use std::os::unix::process::CommandExt;

    #[test]
    fn an_end_reads_as_a_sentence() {
        assert_eq!(
            describe_end(3, "npm run dev", JobStatus::Completed, Some(0)),
            "Background task 3 (npm run dev) completed with exit code 0. Read its output with task_output."
        );
        assert!(describe_end(4, "x", JobStatus::Lost, None).contains("was lost with its worker"));
        assert!(describe_end(5, "x", JobStatus::Stopped, None).contains("(x) stopped."));
    }

    /// A worker that reports a pid outside its tree (here: a process the test
    /// started, which is no child of the "worker") gets an unverified record, and
    /// losing the worker does not signal that process.
    #[tokio::test]
    async fn a_pid_outside_the_workers_tree_is_unverified_and_never_signalled() {
        let (store, _dir) = crate::store::test_store().await;
        let registry = Arc::new(Registry::default());
        let feed = ThreadFeed::default();
        let mut live = feed.subscribe();
        let log = JobLog::new(store.clone(), registry.clone(), feed);
        // The "worker": a real process with no children.
        let mut worker = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        // A process of someone else's, in a process group of its own.
        let mut stranger = std::process::Command::new("sleep")
            .arg("30")
            .process_group(0)
            .spawn()
            .unwrap();
        let (generation, _) = registry.expect("a", "t".into());
        registry.set_pid("a", generation, worker.id());
        let report = |job_id, pid| {
            WorkerEvent::JobStarted(JobReport {
                job_id,
                command: "sleep 30".into(),
                pid,
            })
        };
        log.apply("a", generation, report(1, stranger.id())).await;
        log.apply("a", generation, report(2, worker.id())).await;

        let jobs = store.jobs("a", 10).await.unwrap();
        let verified = |id: u32| jobs.iter().find(|j| j.id == id).unwrap().verified;
        assert!(!verified(1), "{jobs:?}");
        assert!(verified(2), "{jobs:?}");

        log.worker_gone("a", generation).await;
        let jobs = store.jobs("a", 10).await.unwrap();
        assert!(jobs.iter().all(|j| j.status == JobStatus::Lost), "{jobs:?}");
        // Each loss is told once on the feed.
        for _ in 0..2 {
            let told = live.try_recv().unwrap();
            assert_eq!((told.kind(), told.thread_id), ("notification", None));
            let data = told.event.data();
            assert_eq!(data["kind"], "job_ended");
            assert_eq!(data["status"], "lost");
            assert_eq!(data["command"], "sleep 30");
        }
        assert!(live.try_recv().is_err());
        std::thread::sleep(std::time::Duration::from_millis(200));
        assert_eq!(
            stranger.try_wait().unwrap(),
            None,
            "the stranger was signalled"
        );
        for child in [&mut worker, &mut stranger] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}
