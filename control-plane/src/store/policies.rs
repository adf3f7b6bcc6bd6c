//! What the permission gate reads of an agent on every tool call (its permission
//! profile, what it does on an ASK, and the tools granted to it), kept in memory so a call costs no read.
//!
//! Invariant: every write that can change an agent's status, `permissions`,
//! `on_ask` or grants calls [`Policies::changed`] once it is committed. A read that raced
//! with such a write is not cached: the generation it started under is gone.

use std::collections::HashMap;
use std::sync::Mutex;

/// The part of an active agent's record the gate decides with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPolicy {
    /// Its permission profile's name.
    pub permissions: String,
    /// What an ASK does.
    pub on_ask: crate::switches::OnAsk,
    /// The tools granted to it at run time (Chorus names): every call of one is
    /// allowed whatever the profile says (`store::grants`).
    pub grants: Vec<String>,
}

#[derive(Default)]
pub(super) struct Policies {
    inner: Mutex<Cached>,
}

#[derive(Default)]
struct Cached {
    /// Bumped by every change: a read started before it is not cached.
    generation: u64,
    by_agent: HashMap<String, AgentPolicy>,
}

impl Policies {
    /// The cached policy, or the generation a read of the store starts under.
    pub(super) fn get(&self, agent: &str) -> Result<AgentPolicy, u64> {
        let cached = self.lock();
        cached.by_agent.get(agent).cloned().ok_or(cached.generation)
    }

    /// Keeps what a read found, unless something changed since it began.
    pub(super) fn put(&self, agent: &str, generation: u64, policy: AgentPolicy) {
        let mut cached = self.lock();
        if cached.generation == generation {
            cached.by_agent.insert(agent.to_owned(), policy);
        }
    }

    /// The agent's record changed (committed): the next read goes to the store.
    pub(super) fn changed(&self, agent: &str) {
        let mut cached = self.lock();
        cached.generation += 1;
        cached.by_agent.remove(agent);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cached> {
        // Nothing here can panic midway; a poisoned lock still holds a valid map.
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(permissions: &str) -> AgentPolicy {
        AgentPolicy {
            permissions: permissions.into(),
            on_ask: crate::switches::OnAsk::Prompt,
            grants: Vec::new(),
        }
    }

    /// A read that began before a change does not put the old policy back.
    #[test]
    fn a_read_that_raced_a_change_is_not_kept() {
        let policies = Policies::default();
        let generation = policies.get("a").unwrap_err();
        policies.changed("a");
        policies.put("a", generation, policy("open"));
        let generation = policies.get("a").expect_err("the raced read was dropped");
        policies.put("a", generation, policy("standard"));
        assert_eq!(policies.get("a"), Ok(policy("standard")));
        policies.changed("a");
        assert!(policies.get("a").is_err());
    }
}
