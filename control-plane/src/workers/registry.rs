//! Which worker may speak for which agent, and the live connection to each.
//!
//! Every launch of a worker is a *generation* with its own credential. A credential
//! admits exactly one connection, for exactly its agent, once: after that connection
//! ends, the generation is spent and the supervisor launches a new one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use chorus_proto::domain::ControlCommand;
use tokio::sync::{Notify, mpsc};

use crate::secrets::constant_time_eq;

pub type Generation = u64;

/// The worker-facing end of a connection: commands for the worker go in here.
pub type CommandSender = mpsc::UnboundedSender<ControlCommand>;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    /// Unknown agent and wrong credential look the same from outside on purpose.
    #[error("the credential is not valid for agent '{0}'")]
    BadCredential(String),
    #[error("a worker is already attached for agent '{0}'")]
    AlreadyAttached(String),
    #[error("the credential for agent '{0}' has been used already; the worker is being replaced")]
    Spent(String),
}

/// A successful attach: the commands to stream to the worker.
pub struct Attachment {
    pub generation: Generation,
    pub commands: mpsc::UnboundedReceiver<ControlCommand>,
}

/// The life of one generation's link, as seen from outside the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Expected, not connected yet.
    Waiting,
    Attached,
    /// Was attached; the connection has ended.
    Spent,
    /// Revoked or replaced by a newer generation.
    Gone,
}

enum Link {
    Waiting,
    Attached(CommandSender),
    Spent,
}

struct Slot {
    generation: Generation,
    credential: String,
    link: Link,
    /// Signalled when this generation's connection ends.
    detached: Arc<Notify>,
    /// Signalled when this generation's worker attaches.
    attached: Arc<Notify>,
    /// Why the control plane ended the connection, when it did (a hung worker).
    detach_reason: Option<String>,
    /// The worker process, as the launcher started it (never as the worker says).
    pid: Option<u32>,
    /// A dial-in worker's join credential (what the audit log names it by).
    join_credential: Option<String>,
}

#[derive(Default)]
pub struct Registry {
    slots: Mutex<HashMap<String, Slot>>,
    next_generation: Mutex<Generation>,
    /// What CLIs the workers' hosts can run (their Hellos, the local probe).
    backends: Arc<super::backends::BackendsSeen>,
    /// What the workers say of their agents' MCP servers.
    mcp: Arc<crate::mcp::McpStates>,
}

impl Registry {
    /// A registry whose generations follow `last` (the highest one a previous
    /// control plane recorded), so records keyed by generation, such as background
    /// jobs, never collide across restarts.
    pub fn after_generation(last: Generation) -> Self {
        Registry {
            slots: Mutex::default(),
            next_generation: Mutex::new(last),
            backends: Arc::default(),
            mcp: Arc::default(),
        }
    }

    pub fn backends(&self) -> &Arc<super::backends::BackendsSeen> {
        &self.backends
    }

    /// The agents' MCP servers' states, as their workers report them.
    pub fn mcp(&self) -> &Arc<crate::mcp::McpStates> {
        &self.mcp
    }

    fn slots(&self) -> MutexGuard<'_, HashMap<String, Slot>> {
        // A panic while holding this lock leaves plain data behind; keep serving.
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Starts a new generation for `agent` with `credential`, replacing (and thereby
    /// disconnecting) any previous one. Returns the generation and its detach signal.
    pub fn expect(&self, agent: &str, credential: String) -> (Generation, Arc<Notify>) {
        let generation = {
            let mut next = self
                .next_generation
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            *next += 1;
            *next
        };
        let detached = Arc::new(Notify::new());
        self.slots().insert(
            agent.to_string(),
            Slot {
                generation,
                credential,
                link: Link::Waiting,
                detached: detached.clone(),
                attached: Arc::new(Notify::new()),
                detach_reason: None,
                pid: None,
                join_credential: None,
            },
        );
        (generation, detached)
    }

    /// Forgets `agent`'s generation `generation` (if still current); its connection, if
    /// any, is closed because the command sender is dropped.
    pub fn revoke(&self, agent: &str, generation: Generation) {
        let mut slots = self.slots();
        if slots.get(agent).is_some_and(|s| s.generation == generation) {
            slots.remove(agent);
        }
    }

    pub fn attach(&self, agent: &str, presented: &str) -> Result<Attachment, AttachError> {
        let mut slots = self.slots();
        let slot = slots
            .get_mut(agent)
            .filter(|s| constant_time_eq(s.credential.as_bytes(), presented.as_bytes()))
            .ok_or_else(|| AttachError::BadCredential(agent.to_string()))?;
        match slot.link {
            Link::Waiting => {
                let (tx, rx) = mpsc::unbounded_channel();
                slot.link = Link::Attached(tx);
                slot.attached.notify_one();
                Ok(Attachment {
                    generation: slot.generation,
                    commands: rx,
                })
            }
            Link::Attached(_) => Err(AttachError::AlreadyAttached(agent.to_string())),
            Link::Spent => Err(AttachError::Spent(agent.to_string())),
        }
    }

    /// What is signalled when `generation` attaches (a signal that never comes when
    /// it is no longer the current one).
    pub fn attached_signal(&self, agent: &str, generation: Generation) -> Arc<Notify> {
        self.slots()
            .get(agent)
            .filter(|s| s.generation == generation)
            .map_or_else(|| Arc::new(Notify::new()), |s| s.attached.clone())
    }

    /// Ends `generation`'s connection and tells its supervisor; `reason` says why
    /// when the control plane ended it (rather than the worker closing it).
    pub fn detach(&self, agent: &str, generation: Generation, reason: Option<String>) {
        let mut slots = self.slots();
        if let Some(slot) = slots.get_mut(agent).filter(|s| s.generation == generation) {
            slot.link = Link::Spent;
            slot.detach_reason = reason;
            slot.detached.notify_one();
        }
    }

    /// Records the pid the launcher started `generation` as.
    pub fn set_pid(&self, agent: &str, generation: Generation, pid: u32) {
        if let Some(slot) = self
            .slots()
            .get_mut(agent)
            .filter(|s| s.generation == generation)
        {
            slot.pid = Some(pid);
        }
    }

    /// Records the join credential the dial-in worker of `generation` joined with.
    pub fn set_credential(&self, agent: &str, generation: Generation, credential: &str) {
        if let Some(slot) = self
            .slots()
            .get_mut(agent)
            .filter(|s| s.generation == generation)
        {
            slot.join_credential = Some(credential.to_string());
        }
    }

    /// The join credential of `agent`'s dial-in worker `generation`, while it is
    /// current; `None` for a worker launched here.
    pub fn credential_of(&self, agent: &str, generation: Generation) -> Option<String> {
        self.slots()
            .get(agent)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.join_credential.clone())
    }

    /// The pid of `agent`'s worker `generation`, while it is current.
    pub fn worker_pid(&self, agent: &str, generation: Generation) -> Option<u32> {
        self.slots()
            .get(agent)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.pid)
    }

    /// Why the control plane ended `generation`'s connection, if it did.
    pub fn detach_reason(&self, agent: &str, generation: Generation) -> Option<String> {
        self.slots()
            .get(agent)
            .filter(|s| s.generation == generation)
            .and_then(|s| s.detach_reason.clone())
    }

    /// Where `agent`'s generation `generation` stands.
    pub fn link_state(&self, agent: &str, generation: Generation) -> LinkState {
        match self.slots().get(agent) {
            Some(slot) if slot.generation == generation => match slot.link {
                Link::Waiting => LinkState::Waiting,
                Link::Attached(_) => LinkState::Attached,
                Link::Spent => LinkState::Spent,
            },
            _ => LinkState::Gone,
        }
    }

    pub fn is_attached(&self, agent: &str) -> bool {
        matches!(
            self.slots().get(agent).map(|s| &s.link),
            Some(Link::Attached(_))
        )
    }

    /// The live connection to `agent`'s worker, if there is one.
    pub fn sender(&self, agent: &str) -> Option<(Generation, CommandSender)> {
        let slots = self.slots();
        let slot = slots.get(agent)?;
        match &slot.link {
            Link::Attached(tx) => Some((slot.generation, tx.clone())),
            _ => None,
        }
    }

    /// The agent whose current worker holds `presented` and is connected now, for the
    /// model relay. A credential is good only while its connection lives: before the
    /// worker attaches and from the moment its connection ends (even while the
    /// process still runs) it opens nothing.
    pub fn agent_for_credential(&self, presented: &str) -> Option<String> {
        self.slots()
            .iter()
            .find(|(_, s)| constant_time_eq(s.credential.as_bytes(), presented.as_bytes()))
            .filter(|(_, s)| matches!(s.link, Link::Attached(_)))
            .map(|(agent, _)| agent.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credential_admits_one_connection_for_its_own_agent_once() {
        let registry = Registry::default();
        let (gen_a, _) = registry.expect("a", "token-a".into());
        registry.expect("b", "token-b".into());

        assert!(matches!(
            registry.attach("a", "token-b"),
            Err(AttachError::BadCredential(_))
        ));
        assert!(matches!(
            registry.attach("nobody", "token-a"),
            Err(AttachError::BadCredential(_))
        ));
        let attached = registry.attach("a", "token-a").unwrap();
        assert_eq!(attached.generation, gen_a);
        assert!(matches!(
            registry.attach("a", "token-a"),
            Err(AttachError::AlreadyAttached(_))
        ));
        assert_eq!(registry.link_state("a", gen_a), LinkState::Attached);
        registry.detach("a", gen_a, None);
        assert_eq!(registry.link_state("a", gen_a), LinkState::Spent);
        assert!(matches!(
            registry.attach("a", "token-a"),
            Err(AttachError::Spent(_))
        ));
    }

    #[test]
    fn a_new_generation_closes_the_old_connection() {
        let registry = Registry::default();
        registry.expect("a", "old".into());
        let mut old = registry.attach("a", "old").unwrap();
        registry.expect("a", "new".into());
        // The old sender was dropped with its slot: the old stream ends.
        assert!(old.commands.try_recv().is_err());
        assert!(matches!(
            registry.attach("a", "old"),
            Err(AttachError::BadCredential(_))
        ));
        assert!(registry.attach("a", "new").is_ok());
    }

    #[tokio::test]
    async fn detach_wakes_the_supervisor() {
        let registry = Registry::default();
        let (generation, detached) = registry.expect("a", "t".into());
        let _attached = registry.attach("a", "t").unwrap();
        registry.detach("a", generation, None);
        tokio::time::timeout(std::time::Duration::from_secs(1), detached.notified())
            .await
            .expect("supervisor woken");
    }

    #[test]
    fn the_relay_finds_the_agent_by_credential_only_while_it_is_connected() {
        let registry = Registry::default();
        let (generation, _) = registry.expect("a", "t".into());
        assert_eq!(registry.link_state("a", generation), LinkState::Waiting);
        assert_eq!(registry.agent_for_credential("t"), None, "not attached yet");
        let _attached = registry.attach("a", "t").unwrap();
        assert_eq!(registry.agent_for_credential("t").as_deref(), Some("a"));
        assert_eq!(registry.agent_for_credential("x"), None);
        // The connection ends; the process may still run for a moment, but its
        // credential dies with the connection, not with the process.
        registry.detach("a", generation, None);
        assert_eq!(registry.link_state("a", generation), LinkState::Spent);
        assert_eq!(registry.agent_for_credential("t"), None);
        registry.revoke("a", generation);
        assert_eq!(registry.link_state("a", generation), LinkState::Gone);
        assert_eq!(registry.agent_for_credential("t"), None);
    }
}
