//! Dial-in workers waiting for an agent (`--launcher remote`).
//!
//! A worker started on its own (a container, a pod) attaches with the join token and
//! no agent; its connection waits here, idle, until a supervisor takes it for an
//! agent. Placement is "any free worker", in this order: a worker whose volume
//! holds the agent's directory for its incarnation (each link names its volume and
//! the directories on it when it joins; the latest list from a volume stands for
//! every link of that volume, so on a shared volume every link holds every agent,
//! and with a volume per worker an agent goes back to its files); then the
//! worker (as it names itself, host and pid) with the most idle links, its oldest
//! link first, so agents spread across workers and one worker's death moves as few
//! as it can. The machines, restarts and scaling are the platform's (Kubernetes,
//! compose), not ours.
//!
//! An idle connection can also be lent for one errand: deleting a destroyed agent's
//! files from the workers' volume (the control plane cannot reach it); the
//! connection then ends and its worker joins again. A deletion waits up to 10 s for
//! a link whose volume holds the directory (usually the worker that just let the
//! agent go, joining again).
//!
//! Invariant: an idle connection is handed work at most once, and work goes to a
//! connection whose task is alive to receive it (a connection that went away
//! between being taken and being told is skipped).
//!
//! Each link's `Hello` names its volume (`Hello.volume`, an id made once in
//! `<data-dir>/.chorus-volume`) and the directories on it (`Hello.directories`). For 10 s
//! after the control plane starts ([`REJOIN_GRACE`]), an agent whose files may exist (one
//! from before the start, or revived with kept files) waits for a link holding them,
//! since the workers rejoin on their own backoff; a new incarnation never waits.
//!
//! A dial-in link's stream waits here, reading only keep-alives, until a supervisor hands
//! it `(agent, credential, incarnation)`; the stream's handler then attaches it in the
//! `Registry` exactly like a launched worker and sends a `Welcome` with `dial_in`
//! (credential, template). Ending a remote generation is closing its stream (revoking
//! the slot); the worker then winds its runs down, ends its own tools (the control plane
//! cannot see its processes) and joins again. A remote generation ends when its link
//! does (no process exit to wait for), so its agent is placed again after the restart
//! delay alone (250 ms at first). A worker process serves `--agents N` agents with one
//! independent link each.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use chorus_proto::domain::AgentDirectory;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

/// What a supervisor hands the idle connection it takes: the agent it now serves,
/// and the credential of this generation (the connection attaches with it).
#[derive(Debug)]
pub struct Assignment {
    pub agent: String,
    pub credential: String,
    /// Which creation of the agent this is: the worker keeps the agent's directory
    /// only if it was laid out for this one.
    pub incarnation: String,
    /// Its directory may be on some worker's volume (an agent from before this
    /// start, or revived with its files): right after the control plane starts it
    /// waits a little for that worker to rejoin (see [`Pool::new`]).
    pub may_have_files: bool,
}

/// Deleting a destroyed agent's files, if they are `incarnation`'s.
#[derive(Debug)]
pub struct Deletion {
    pub agent: String,
    pub incarnation: String,
    /// Only on this volume (a leftover copy a worker of it named); `None`: wherever
    /// the directory is.
    pub volume: Option<String>,
    /// Whether there was anything to delete, or why it could not be done.
    pub done: oneshot::Sender<Result<bool, String>>,
}

/// What an idle connection is given.
#[derive(Debug)]
pub enum Work {
    /// Serve an agent from now on.
    Serve(Assignment),
    /// Delete a destroyed agent's files, answer, and join again.
    Delete(Deletion),
}

impl Work {
    /// The agent directory this work is best done where.
    fn directory(&self) -> AgentDirectory {
        let (agent, incarnation) = match self {
            Work::Serve(a) => (&a.agent, &a.incarnation),
            Work::Delete(d) => (&d.agent, &d.incarnation),
        };
        AgentDirectory {
            agent: agent.clone(),
            incarnation: incarnation.clone(),
        }
    }
}

struct Idle {
    id: u64,
    /// The worker as it names itself (host and pid), for the logs and for spreading.
    peer: String,
    /// The credential it joined with (`join-token` for the shared one).
    worker: String,
    /// The volume its worker keeps agents' directories on.
    volume: String,
    offer: oneshot::Sender<Work>,
}

/// Right after the control plane starts, dial-in workers are still rejoining, each
/// on its own backoff (up to 30 s): for this long an agent that may have files on a
/// worker's volume waits for a link of that worker rather than starting over on the
/// first free one (which, with a volume per worker, would not have its files).
pub const REJOIN_GRACE: Duration = Duration::from_secs(10);

/// How long a deletion waits for a link whose volume holds the directory before it
/// goes to any free worker (with a volume per worker, that one has nothing to
/// delete; with a shared volume every link holds it).
const HOLDER_WAIT: Duration = Duration::from_secs(10);

pub struct Pool {
    idle: Mutex<VecDeque<Idle>>,
    next_id: Mutex<u64>,
    /// Signalled when a worker joins.
    joined: Notify,
    /// Shutting down: idle links are let go and no new one waits.
    closed: std::sync::atomic::AtomicBool,
    /// Until then, an agent that may have files waits for a link that holds them.
    patient_until: Instant,
    /// Each volume's agent directories, as the last link of it to join named them.
    volumes: Mutex<HashMap<String, HashSet<AgentDirectory>>>,
}

/// The link work went to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    /// Its worker as it names itself (host and pid).
    pub peer: String,
    /// The credential it joined with.
    pub worker: String,
    /// Its volume held the work's agent directory.
    pub holds: bool,
}

/// An idle connection's place in the pool.
pub struct Membership {
    pub id: u64,
    /// Resolves when this connection is given work.
    pub assigned: oneshot::Receiver<Work>,
}

impl Pool {
    /// A pool whose agents wait up to `rejoin_grace` from now for the worker that
    /// holds their files ([`REJOIN_GRACE`] in the control plane).
    pub fn new(rejoin_grace: Duration) -> Pool {
        Pool {
            idle: Mutex::default(),
            next_id: Mutex::default(),
            joined: Notify::new(),
            closed: Default::default(),
            patient_until: Instant::now() + rejoin_grace,
            volumes: Mutex::default(),
        }
    }

    fn volumes(&self) -> std::sync::MutexGuard<'_, HashMap<String, HashSet<AgentDirectory>>> {
        self.volumes
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A dial-in worker's connection joins the pool, naming its volume and the
    /// agents' directories on it (empty `volume`: an older worker; its link counts
    /// as a volume of its own). `worker`: the credential it joined with.
    pub fn join(
        &self,
        peer: String,
        worker: String,
        volume: String,
        directories: Vec<AgentDirectory>,
    ) -> Membership {
        let id = {
            let mut next = self
                .next_id
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *next += 1;
            *next
        };
        let volume = match volume.is_empty() {
            true => format!("link {id}"),
            false => volume,
        };
        // Not held while the idle queue is locked (`assign` takes both, this first).
        self.volumes()
            .insert(volume.clone(), directories.into_iter().collect());
        let (offer, assigned) = oneshot::channel();
        // Closed: the offer is dropped at once, so the link ends and the worker
        // joins again later (a control plane that restarts).
        if !self.closed.load(std::sync::atomic::Ordering::Relaxed) {
            self.idle().push_back(Idle {
                id,
                peer,
                worker,
                volume,
                offer,
            });
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

    /// Gives `work` to an idle worker whose connection is still there (see the
    /// module's placement order), waiting for one to join if none is; returns the
    /// link it went to. Cancel-safe: dropping the future assigns nothing.
    pub async fn assign(&self, work: Work) -> Taken {
        let wanted = work.directory();
        let only_on = match &work {
            Work::Delete(d) => d.volume.clone(),
            Work::Serve(_) => None,
        };
        // How long to hold out for a link whose volume has the agent's directory.
        let patient_until = match &work {
            Work::Serve(a) if a.may_have_files => Some(self.patient_until),
            Work::Serve(_) => None,
            // The files' worker is usually the one that just let the agent go, and
            // is joining again: elsewhere there would be nothing to delete.
            Work::Delete(_) => Some(Instant::now() + HOLDER_WAIT),
        };
        let mut assignment = work;
        loop {
            // Registered before looking, so a join between the look and the wait
            // still wakes us.
            let joined = self.joined.notified();
            tokio::pin!(joined);
            joined.as_mut().enable();
            let waiting_for_holder = patient_until.is_some_and(|until| Instant::now() < until);
            loop {
                let (taken, holds) = {
                    let volumes = self.volumes();
                    let taken = take_best(
                        &mut self.idle(),
                        &volumes,
                        &wanted,
                        only_on.as_deref(),
                        waiting_for_holder,
                    );
                    let holds = taken
                        .as_ref()
                        .is_some_and(|idle| holds(&volumes, &idle.volume, &wanted));
                    (taken, holds)
                };
                let Some(idle) = taken else {
                    break;
                };
                match idle.offer.send(assignment) {
                    Ok(()) => {
                        return Taken {
                            peer: idle.peer,
                            worker: idle.worker,
                            holds,
                        };
                    }
                    // Its connection's task is gone: the next one.
                    Err(back) => assignment = back,
                }
            }
            if waiting_for_holder {
                tokio::select! {
                    () = &mut joined => {}
                    () = tokio::time::sleep_until(patient_until.unwrap_or_else(Instant::now)) => {}
                }
            } else {
                joined.await;
            }
        }
    }
}

/// The link for work about `wanted` (after dropping links whose connection is
/// gone): the oldest of `only_on`'s volume if given (nothing else will do);
/// otherwise one whose volume holds that directory if any (only such a one when
/// `holders_only`), then the worker with the most idle links, then the oldest link.
fn take_best(
    idle: &mut VecDeque<Idle>,
    volumes: &HashMap<String, HashSet<AgentDirectory>>,
    wanted: &AgentDirectory,
    only_on: Option<&str>,
    holders_only: bool,
) -> Option<Idle> {
    idle.retain(|link| !link.offer.is_closed());
    if let Some(volume) = only_on {
        let position = idle.iter().position(|link| link.volume == volume)?;
        return idle.remove(position);
    }
    if holders_only && !idle.iter().any(|link| holds(volumes, &link.volume, wanted)) {
        return None;
    }
    let mut free: HashMap<&str, usize> = HashMap::new();
    for link in idle.iter() {
        *free.entry(link.peer.as_str()).or_default() += 1;
    }
    let chosen = idle
        .iter()
        .enumerate()
        .max_by_key(|(position, link)| {
            (
                holds(volumes, &link.volume, wanted),
                free[link.peer.as_str()],
                std::cmp::Reverse(*position),
            )
        })
        .map(|(position, _)| position)?;
    idle.remove(chosen)
}

/// Whether `volume` holds `wanted`'s directory, as last named.
fn holds(
    volumes: &HashMap<String, HashSet<AgentDirectory>>,
    volume: &str,
    wanted: &AgentDirectory,
) -> bool {
    volumes
        .get(volume)
        .is_some_and(|held| held.contains(wanted))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn assignment(agent: &str) -> Work {
        Work::Serve(Assignment {
            agent: agent.into(),
            credential: "c".into(),
            incarnation: "i".into(),
            may_have_files: true,
        })
    }

    /// Where work went, and whether its files were there.
    fn placed(taken: Taken) -> (String, bool) {
        (taken.peer, taken.holds)
    }

    fn agent(work: Work) -> String {
        match work {
            Work::Serve(assignment) => assignment.agent,
            Work::Delete(deletion) => deletion.agent,
        }
    }

    #[tokio::test]
    async fn agents_spread_across_workers() {
        let pool = Pool::new(Duration::ZERO);
        // Two workers with three links each, joined one after the other.
        let links: Vec<(&str, Membership)> = ["w1", "w1", "w1", "w2", "w2", "w2"]
            .into_iter()
            .map(|peer| {
                (
                    peer,
                    pool.join(
                        peer.into(),
                        "w".into(),
                        format!("{peer} volume"),
                        Vec::new(),
                    ),
                )
            })
            .collect();
        let mut peers = Vec::new();
        for agent in ["a", "b", "c", "d"] {
            peers.push(pool.assign(assignment(agent)).await.peer);
        }
        assert_eq!(peers, ["w1", "w2", "w1", "w2"], "spread, not filled up");
        // The oldest link of a worker goes first.
        let (_, first) = links.into_iter().next().unwrap();
        assert_eq!(agent(first.assigned.await.unwrap()), "a");
        // A worker whose links went away gets nothing.
        let pool = Pool::new(Duration::ZERO);
        let gone: Vec<Membership> = (0..3)
            .map(|_| pool.join("gone".into(), "w".into(), "gone volume".into(), Vec::new()))
            .collect();
        let _kept = pool.join("here".into(), "w".into(), "here volume".into(), Vec::new());
        drop(gone);
        assert_eq!(pool.assign(assignment("e")).await.peer, "here");
    }

    #[tokio::test]
    async fn an_agent_goes_where_its_directory_is() {
        let pool = Pool::new(Duration::ZERO);
        let here = |agent: &str, incarnation: &str| AgentDirectory {
            agent: agent.into(),
            incarnation: incarnation.into(),
        };
        let _busy: Vec<Membership> = (0..3)
            .map(|_| {
                pool.join(
                    "roomy".into(),
                    "w".into(),
                    "roomy volume".into(),
                    Vec::new(),
                )
            })
            .collect();
        let _holder = pool.join(
            "holder".into(),
            "w".into(),
            "holder volume".into(),
            vec![here("a", "i")],
        );
        // Its files win over free room...
        assert_eq!(
            placed(pool.assign(assignment("a")).await),
            ("holder".into(), true)
        );
        // ...but only that incarnation's (a re-created name starts anywhere).
        let _holder = pool.join(
            "holder".into(),
            "w".into(),
            "holder volume".into(),
            vec![here("b", "old")],
        );
        assert_eq!(
            placed(pool.assign(assignment("b")).await),
            ("roomy".into(), false)
        );
        // A deletion goes where the files are too.
        let (done, _answer) = oneshot::channel();
        let deletion = Work::Delete(Deletion {
            agent: "b".into(),
            incarnation: "old".into(),
            volume: None,
            done,
        });
        assert_eq!(placed(pool.assign(deletion).await), ("holder".into(), true));
        // A leftover copy's deletion goes to a link of its volume only.
        let (done, _answer) = oneshot::channel();
        let leftover = Work::Delete(Deletion {
            agent: "z".into(),
            incarnation: "old".into(),
            volume: Some("holder volume".into()),
            done,
        });
        let pending = pool.assign(leftover);
        tokio::pin!(pending);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), &mut pending)
                .await
                .is_err(),
            "roomy links are of another volume"
        );
        let _holder = pool.join(
            "holder".into(),
            "w".into(),
            "holder volume".into(),
            Vec::new(),
        );
        assert_eq!(placed(pending.await), ("holder".into(), false));
    }

    #[tokio::test]
    async fn on_a_shared_volume_every_link_holds_what_the_last_one_named() {
        let pool = Pool::new(Duration::from_secs(60));
        let a = AgentDirectory {
            agent: "a".into(),
            incarnation: "i".into(),
        };
        // Joined before a was laid out, on the volume a later link names it on.
        let _early = pool.join("w1".into(), "w".into(), "shared".into(), Vec::new());
        let _late = pool.join("w2".into(), "w".into(), "shared".into(), vec![a.clone()]);
        let _elsewhere = pool.join("w3".into(), "w".into(), "own".into(), Vec::new());
        assert_eq!(
            placed(pool.assign(assignment("a")).await),
            ("w1".into(), true)
        );
        assert_eq!(
            placed(pool.assign(assignment("a")).await),
            ("w2".into(), true)
        );
    }

    #[tokio::test]
    async fn right_after_a_start_an_agent_waits_a_little_for_the_worker_with_its_files() {
        let pool = std::sync::Arc::new(Pool::new(Duration::from_secs(60)));
        let _roomy = pool.join(
            "roomy".into(),
            "w".into(),
            "roomy volume".into(),
            Vec::new(),
        );
        // A new agent has no files anywhere: it takes what is free at once.
        let new = Work::Serve(Assignment {
            may_have_files: false,
            ..match assignment("new") {
                Work::Serve(a) => a,
                Work::Delete(_) => unreachable!(),
            }
        });
        assert_eq!(pool.assign(new).await.peer, "roomy");
        let _roomy = pool.join(
            "roomy".into(),
            "w".into(),
            "roomy volume".into(),
            Vec::new(),
        );
        // One from before the start waits for its worker to rejoin...
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.assign(assignment("a")).await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiting.is_finished(), "roomy has no files of a");
        let _holder = pool.join(
            "holder".into(),
            "w".into(),
            "holder volume".into(),
            vec![AgentDirectory {
                agent: "a".into(),
                incarnation: "i".into(),
            }],
        );
        assert_eq!(placed(waiting.await.unwrap()), ("holder".into(), true));
        // ...but not past the grace: then any free worker.
        let pool = Pool::new(Duration::from_millis(200));
        let _roomy = pool.join(
            "roomy".into(),
            "w".into(),
            "roomy volume".into(),
            Vec::new(),
        );
        let taken = tokio::time::timeout(Duration::from_secs(10), pool.assign(assignment("b")))
            .await
            .expect("placed once the grace is over");
        assert_eq!(placed(taken), ("roomy".into(), false));
    }

    #[tokio::test]
    async fn the_oldest_live_worker_gets_the_agent_and_a_late_one_is_waited_for() {
        let pool = Pool::new(Duration::ZERO);
        let gone = pool.join("gone".into(), "w".into(), "gone volume".into(), Vec::new());
        let first = pool.join(
            "first".into(),
            "w".into(),
            "first volume".into(),
            Vec::new(),
        );
        let second = pool.join(
            "second".into(),
            "w".into(),
            "second volume".into(),
            Vec::new(),
        );
        drop(gone.assigned); // its connection ended without leaving: skipped
        assert_eq!(pool.assign(assignment("a")).await.peer, "first");
        assert_eq!(agent(first.assigned.await.unwrap()), "a");
        pool.leave(second.id);
        assert_eq!(pool.idle_count(), 0);
        // Closing lets idle links go; a link that joins after waits for nothing.
        let closing = Pool::new(Duration::ZERO);
        let idle = closing.join("idle".into(), "w".into(), "idle volume".into(), Vec::new());
        closing.close();
        assert!(idle.assigned.await.is_err(), "its link ends");
        let late = closing.join("late".into(), "w".into(), "late volume".into(), Vec::new());
        assert!(late.assigned.await.is_err());
        assert_eq!(closing.idle_count(), 0);

        // No one idle: the assignment waits for the next worker to join.
        let pool = std::sync::Arc::new(pool);
        let waiting = tokio::spawn({
            let pool = pool.clone();
            async move { pool.assign(assignment("b")).await.peer }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "nobody to take it yet");
        let late = pool.join("late".into(), "w".into(), "late volume".into(), Vec::new());
        let peer = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("assigned once a worker joined")
            .unwrap();
        assert_eq!(peer, "late");
        assert_eq!(agent(late.assigned.await.unwrap()), "b");
    }
}
