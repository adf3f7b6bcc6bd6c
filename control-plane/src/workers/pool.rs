//! Dial-in workers waiting for an agent (`--launcher remote`).
//!
//! A worker started on its own (a container, a pod) attaches with the join token and
//! no agent; its connection waits here, idle, until a supervisor takes it for an
//! agent. Placement is "any free worker", spread: the worker (as it names itself,
//! host and pid) with the most idle links gets the agent, its oldest link first, so
//! agents spread across workers and one worker's death moves as few as it can. The
//! machines, restarts and scaling are the platform's (Kubernetes, compose), not ours.
//!
//! An idle connection can also be lent for one errand: deleting a destroyed agent's
//! files from the workers' volume (the control plane cannot reach it); the
//! connection then ends and its worker joins again.
//!
//! Invariant: an idle connection is handed to at most one job, and a job goes to a
//! connection whose task is alive to receive it (a connection that went away
//! between being taken and being told is skipped).

use std::collections::VecDeque;
use std::sync::Mutex;

use tokio::sync::{Notify, oneshot};

/// What a supervisor hands the idle connection it takes: the agent it now serves,
/// and the credential of this generation (the connection attaches with it).
#[derive(Debug)]
pub struct Assignment {
    pub agent: String,
    pub credential: String,
    /// Which creation of the agent this is: the worker keeps the agent's directory
    /// only if it was laid out for this one.
    pub incarnation: String,
}

/// Deleting a destroyed agent's files, if they are `incarnation`'s.
#[derive(Debug)]
pub struct Deletion {
    pub agent: String,
    pub incarnation: String,
    /// Whether there was anything to delete, or why it could not be done.
    pub done: oneshot::Sender<Result<bool, String>>,
}

/// What an idle connection is given.
#[derive(Debug)]
pub enum Job {
    /// Serve an agent from now on.
    Serve(Assignment),
    /// Delete a destroyed agent's files, answer, and join again.
    Delete(Deletion),
}

struct Idle {
    id: u64,
    /// Where the worker dialled from, for the logs.
    peer: String,
    offer: oneshot::Sender<Job>,
}

#[derive(Default)]
pub struct Pool {
    idle: Mutex<VecDeque<Idle>>,
    next_id: Mutex<u64>,
    /// Signalled when a worker joins.
    joined: Notify,
    /// Shutting down: idle links are let go and no new one waits.
    closed: std::sync::atomic::AtomicBool,
}

/// An idle connection's place in the pool.
pub struct Membership {
    pub id: u64,
    /// Resolves when this connection is given a job.
    pub assigned: oneshot::Receiver<Job>,
}

impl Pool {
    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        self.idle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A dial-in worker's connection joins the pool.
    pub fn join(&self, peer: String) -> Membership {
        let id = {
            let mut next = self.next_id.lock().unwrap_or_else(|e| e.into_inner());
            *next += 1;
            *next
        };
        let (offer, assigned) = oneshot::channel();
        // Closed: the offer is dropped at once, so the link ends and the worker
        // joins again later (a control plane that restarts).
        if !self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            self.idle().push_back(Idle { id, peer, offer });
            self.joined.notify_waiters();
        }
        Membership { id, assigned }
    }

    /// Shutting down: every idle link ends (its worker joins again, with backoff,
    /// wherever the control plane comes back) and none waits from now on.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.idle().clear();
    }

    /// An idle connection ended (the worker went away before it got an agent).
    pub fn leave(&self, id: u64) {
        self.idle().retain(|idle| idle.id != id);
    }

    /// How many dial-in workers wait for an agent.
    pub fn idle_count(&self) -> usize {
        self.idle().len()
    }

    /// Gives `job` to the oldest idle worker whose connection is still there,
    /// waiting for one to join if none is; returns where that worker dialled from.
    /// Cancel-safe: dropping the future assigns nothing.
    pub async fn assign(&self, job: Job) -> String {
        let mut assignment = job;
        loop {
            // Registered before looking, so a join between the look and the wait
            // still wakes us.
            let joined = self.joined.notified();
            tokio::pin!(joined);
            joined.as_mut().enable();
            loop {
                let Some(idle) = take_most_free(&mut self.idle()) else {
                    break;
                };
                match idle.offer.send(assignment) {
                    Ok(()) => return idle.peer,
                    // Its connection's task is gone: the next one.
                    Err(back) => assignment = back,
                }
            }
            joined.await;
        }
    }
}

/// The oldest link of the worker with the most idle links (after dropping links
/// whose connection is gone).
fn take_most_free(idle: &mut VecDeque<Idle>) -> Option<Idle> {
    idle.retain(|link| !link.offer.is_closed());
    let mut free: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for link in idle.iter() {
        *free.entry(link.peer.as_str()).or_default() += 1;
    }
    // Most free first; among equals the earliest in the queue (the oldest).
    let chosen = idle
        .iter()
        .enumerate()
        .max_by_key(|(position, link)| (free[link.peer.as_str()], std::cmp::Reverse(*position)))
        .map(|(position, _)| position)?;
    idle.remove(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn assignment(agent: &str) -> Job {
        Job::Serve(Assignment {
            agent: agent.into(),
            credential: "c".into(),
            incarnation: "i".into(),
        })
    }

    fn agent(job: Job) -> String {
        match job {
            Job::Serve(assignment) => assignment.agent,
            Job::Delete(deletion) => deletion.agent,
        }
    }

    #[tokio::test]
    async fn agents_spread_across_workers() {
        let pool = Pool::default();
        // Two workers with three links each, joined one after the other.
        let links: Vec<(&str, Membership)> = ["w1", "w1", "w1", "w2", "w2", "w2"]
            .into_iter()
            .map(|peer| (peer, pool.join(peer.into())))
            .collect();
        let mut placed = Vec::new();
        for agent in ["a", "b", "c", "d"] {
            placed.push(pool.assign(assignment(agent)).await);
        }
        assert_eq!(placed, ["w1", "w2", "w1", "w2"], "spread, not filled up");
        // The oldest link of a worker goes first.
        let (_, first) = links.into_iter().next().unwrap();
        assert_eq!(agent(first.assigned.await.unwrap()), "a");
        // A worker whose links went away gets nothing.
        let pool = Pool::default();
        let gone: Vec<Membership> = (0..3).map(|_| pool.join("gone".into())).collect();
        let _kept = pool.join("here".into());
        drop(gone);
        assert_eq!(pool.assign(assignment("e")).await, "here");
    }

    #[tokio::test]
    async fn the_oldest_live_worker_gets_the_agent_and_a_late_one_is_waited_for() {
        let pool = Pool::default();
        let gone = pool.join("gone".into());
        let first = pool.join("first".into());
        let second = pool.join("second".into());
        drop(gone.assigned); // its connection ended without leaving: skipped
        assert_eq!(pool.assign(assignment("a")).await, "first");
        assert_eq!(agent(first.assigned.await.unwrap()), "a");
        pool.leave(second.id);
        assert_eq!(pool.idle_count(), 0);
        // Closing lets idle links go; a link that joins after waits for nothing.
        let closing = Pool::default();
        let idle = closing.join("idle".into());
        closing.close();
        assert!(idle.assigned.await.is_err(), "its link ends");
        let late = closing.join("late".into());
        assert!(late.assigned.await.is_err());
        assert_eq!(closing.idle_count(), 0);

        // No one idle: the assignment waits for the next worker to join.
        let pool = std::sync::Arc::new(pool);
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.assign(assignment("b")).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "nobody to take it yet");
        let late = pool.join("late".into());
        let peer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("assigned once a worker joined")
            .unwrap();
        assert_eq!(peer, "late");
        assert_eq!(agent(late.assigned.await.unwrap()), "b");
    }
}
