//! Which traces each agent's workers were given: the trace of every run queued
//! for the agent (a resumed attempt continues its run's trace). A worker's span,
//! or a trace context a worker hands the control plane (a tool check, a model call
//! through the relay), keeps its trace id only if it is one of these; any other is
//! re-rooted into a trace of the worker's own, so a worker can never place a span in
//! another agent's trace. Re-rooting maps an id through a keyed hash (a key drawn
//! at start, per agent): spans the worker made in one trace of its own (a thread's
//! title, written outside any run) stay together, and no worker can aim the result
//! at a trace id it chooses.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Mutex;

pub type TraceId = [u8; 16];

/// Traces kept per agent, newest last; older ones are forgotten (their late spans
/// are re-rooted). Far more than an agent's concurrent runs.
const KEPT_PER_AGENT: usize = 1024;

#[derive(Default)]
struct Given {
    set: HashSet<TraceId>,
    order: VecDeque<TraceId>,
}

pub struct RunTraces {
    given: Mutex<HashMap<String, Given>>,
    /// Random keys, drawn once per process.
    key: std::collections::hash_map::RandomState,
}

impl Default for RunTraces {
    fn default() -> Self {
        RunTraces {
            given: Mutex::new(HashMap::new()),
            key: std::collections::hash_map::RandomState::new(),
        }
    }
}

impl std::fmt::Debug for RunTraces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RunTraces")
    }
}

/// The trace id a W3C `traceparent` names (`00-<32 hex>-<16 hex>-<2 hex>`). Pure.
pub fn trace_id_of(traceparent: &str) -> Option<TraceId> {
    let mut parts = traceparent.trim().split('-');
    let (_version, id) = (parts.next()?, parts.next()?);
    hex16(id).filter(|id| *id != [0; 16])
}

fn hex16(text: &str) -> Option<TraceId> {
    if text.len() != 32 {
        return None;
    }
    let mut id = [0u8; 16];
    for (i, byte) in id.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(id)
}

fn to_hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

impl RunTraces {
    /// Records that `agent`'s workers are given the trace of `context` (a run's
    /// W3C trace context; nothing when traces are not exported).
    pub fn give(&self, agent: &str, context: &HashMap<String, String>) {
        let Some(id) = context.get("traceparent").and_then(|t| trace_id_of(t)) else {
            return;
        };
        let mut given = self
            .given
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let given = given.entry(agent.to_string()).or_default();
        if given.set.insert(id) {
            given.order.push_back(id);
            if given.order.len() > KEPT_PER_AGENT
                && let Some(old) = given.order.pop_front()
            {
                given.set.remove(&old);
            }
        }
    }

    /// The trace id a span `agent`'s worker sent under `claimed` goes out under:
    /// `claimed` itself when the agent was given that trace, else its re-rooted id.
    pub fn admit(&self, agent: &str, claimed: &[u8]) -> TraceId {
        if let Ok(id) = TraceId::try_from(claimed)
            && self.is_given(agent, &id)
        {
            return id;
        }
        self.reroot(agent, claimed)
    }

    /// A trace context a worker of `agent` hands over (to continue a control-plane
    /// span from), with its trace id admitted as [`admit`](Self::admit) does.
    pub fn admit_context(
        &self,
        agent: &str,
        carrier: &HashMap<String, String>,
    ) -> HashMap<String, String> {
        let Some(traceparent) = carrier.get("traceparent") else {
            return HashMap::new();
        };
        let Some(claimed) = trace_id_of(traceparent) else {
            return HashMap::new();
        };
        let admitted = self.admit(agent, &claimed);
        if admitted == claimed {
            return carrier.clone();
        }
        // Same version, parent span and flags, in the worker's own trace; its
        // tracestate belonged to the claimed trace.
        let rewritten = traceparent.replacen(&to_hex(&claimed), &to_hex(&admitted), 1);
        HashMap::from([("traceparent".to_string(), rewritten)])
    }

    /// Forgets the traces `agent`'s workers were given (it was destroyed): an agent
    /// made later under the same name starts with none of them.
    pub fn forget(&self, agent: &str) {
        self.given
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(agent);
    }

    fn is_given(&self, agent: &str, id: &TraceId) -> bool {
        self.given
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .is_some_and(|g| g.set.contains(id))
    }

    fn reroot(&self, agent: &str, claimed: &[u8]) -> TraceId {
        let high = self.key.hash_one((0u8, agent, claimed));
        let low = self.key.hash_one((1u8, agent, claimed));
        let mut id = [0u8; 16];
        id[..8].copy_from_slice(&high.to_be_bytes());
        id[8..].copy_from_slice(&low.to_be_bytes());
        // All zeros is the invalid trace id.
        if id == [0; 16] {
            id[15] = 1;
        }
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RUN_A: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn context(traceparent: &str) -> HashMap<String, String> {
        HashMap::from([("traceparent".to_string(), traceparent.to_string())])
    }

    #[test]
    fn a_traceparent_names_its_trace() {
        let id = trace_id_of(RUN_A).unwrap();
        assert_eq!(to_hex(&id), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            trace_id_of("00-00000000000000000000000000000000-00f067aa0ba902b7-01"),
            None
        );
        assert_eq!(trace_id_of("00-4bf9-00f067aa0ba902b7-01"), None);
        assert_eq!(trace_id_of("garbage"), None);
    }

    #[test]
    fn an_agent_keeps_its_own_traces_and_cannot_enter_anothers() {
        let traces = RunTraces::default();
        traces.give("a", &context(RUN_A));
        let run_a = trace_id_of(RUN_A).unwrap();
        assert_eq!(traces.admit("a", &run_a), run_a);
        // b was never given a's trace: its span lands elsewhere, the same place
        // every time, and not where b aimed.
        let rerooted = traces.admit("b", &run_a);
        assert_ne!(rerooted, run_a);
        assert_eq!(traces.admit("b", &run_a), rerooted);
        // A trace of its own (no run) is re-rooted too, apart from b's.
        let own = [7u8; 16];
        assert_ne!(traces.admit("a", &own), own);
        assert_ne!(traces.admit("a", &own), traces.admit("b", &own));
        // Not 16 bytes: still a valid id.
        assert_ne!(traces.admit("a", b"short"), [0; 16]);
        // Destroyed: a new agent of the same name cannot enter the old one's runs.
        traces.forget("a");
        assert_ne!(traces.admit("a", &run_a), run_a);
    }

    #[test]
    fn a_handed_over_context_is_kept_or_moved_to_the_workers_own_trace() {
        let traces = RunTraces::default();
        traces.give("a", &context(RUN_A));
        let mut with_state = context(RUN_A);
        with_state.insert("tracestate".into(), "k=v".into());
        assert_eq!(traces.admit_context("a", &with_state), with_state);
        let moved = traces.admit_context("b", &with_state);
        let parent = &moved["traceparent"];
        assert!(parent.starts_with("00-") && parent.ends_with("-00f067aa0ba902b7-01"));
        assert_eq!(
            trace_id_of(parent),
            Some(traces.admit("b", &trace_id_of(RUN_A).unwrap()))
        );
        assert!(!moved.contains_key("tracestate"));
        assert!(traces.admit_context("b", &HashMap::new()).is_empty());
        assert!(traces.admit_context("b", &context("junk")).is_empty());
    }

    #[test]
    fn old_traces_are_forgotten_past_the_limit() {
        let traces = RunTraces::default();
        for i in 0..=KEPT_PER_AGENT as u32 {
            let tp = format!("00-{:032x}-00f067aa0ba902b7-01", i + 1);
            traces.give("a", &context(&tp));
        }
        let first = trace_id_of(&format!("00-{:032x}-0-01", 1)).unwrap();
        let last = trace_id_of(&format!("00-{:032x}-0-01", KEPT_PER_AGENT + 1)).unwrap();
        assert_ne!(traces.admit("a", &first), first);
        assert_eq!(traces.admit("a", &last), last);
    }
}
