//! The idle timer (F3): when an agent has had no activity for its idle timeout and
//! no run is going, its context is saved (trigger `idle_timeout`), cleared, and a
//! `notification` goes to the live feed.
//!
//! One task owns the map of last activity; everything else sends it signals.
//! Activity is every event of the agent's threads on the live feed (a thread
//! created, a step, a message, text, an approval) and each [`super::Sessions::touch`].
//! The task ticks every [`TICK`] and reads the database only when an agent is first
//! seen or reconfigured (its timeout), never per agent per tick. The decision is the
//! pure [`idle_due`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::{BusyCheck, Sessions};
use crate::feed::ThreadEvent;

/// How often the timer looks: a quarter of the shortest timeout that makes sense (1 s).
pub const TICK: Duration = Duration::from_millis(250);

pub(super) enum Signal {
    /// Activity of the agent.
    Touch(String),
    /// The agent's idle timeout may have changed.
    Configured(String),
    /// An idle save of the agent ended.
    Fired(String),
}

/// The timeout of an agent: its own setting (0: never), else the server's.
pub fn effective_timeout(
    agent_setting: Option<u64>,
    default: Option<Duration>,
) -> Option<Duration> {
    match agent_setting {
        Some(0) => None,
        Some(secs) => Some(Duration::from_secs(secs)),
        None => default.filter(|d| !d.is_zero()),
    }
}

/// Whether the idle save is due: a timeout applies, the agent has been quiet at
/// least that long, and no run of it is going.
pub fn idle_due(last: Instant, now: Instant, timeout: Option<Duration>, busy: bool) -> bool {
    match timeout {
        Some(timeout) => !busy && now.saturating_duration_since(last) >= timeout,
        None => false,
    }
}

/// "30 minutes", "1 minute", "45 seconds": how long an agent was idle, for people.
pub fn describe_idle(idle: Duration) -> String {
    let secs = idle.as_secs();
    let (n, unit) = if secs >= 60 && secs.is_multiple_of(60) || secs >= 3600 {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// Feed events that are not the agent's own activity: the timer's own results.
fn is_activity(event: &ThreadEvent) -> bool {
    !matches!(event.kind, "notification" | "status")
}

struct Entry {
    last: Instant,
    /// `None` until read from the database.
    timeout: Option<Option<Duration>>,
}

pub(super) async fn run(
    sessions: Arc<Sessions>,
    mut inbox: mpsc::UnboundedReceiver<Signal>,
    mut events: broadcast::Receiver<Arc<ThreadEvent>>,
    busy: BusyCheck,
    shutdown: CancellationToken,
) {
    let mut agents: HashMap<String, Entry> = HashMap::new();
    // Agents whose idle save is going, and when it started.
    let mut firing: HashMap<String, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            signal = inbox.recv() => match signal {
                Some(Signal::Touch(agent)) => touched(&mut agents, agent),
                Some(Signal::Configured(agent)) => {
                    if let Some(entry) = agents.get_mut(&agent) {
                        entry.timeout = None;
                    }
                }
                Some(Signal::Fired(agent)) => {
                    if let Some(started) = firing.remove(&agent)
                        && agents.get(&agent).is_some_and(|e| e.last <= started)
                    {
                        // Quiet since: nothing more to do until it is active again.
                        agents.remove(&agent);
                    }
                }
                None => return,
            },
            event = events.recv() => match event {
                Ok(event) => {
                    if is_activity(&event) {
                        touched(&mut agents, event.agent.clone());
                    }
                }
                // Events were missed: count every agent as just active rather than
                // save one that may not be idle.
                Err(broadcast::error::RecvError::Lagged(_)) => {
                    let now = Instant::now();
                    for entry in agents.values_mut() {
                        entry.last = now;
                    }
                }
                Err(broadcast::error::RecvError::Closed) => return,
            },
            _ = tick.tick() => {
                let now = Instant::now();
                let mut due = Vec::new();
                let mut gone = Vec::new();
                for (agent, entry) in agents.iter_mut() {
                    if firing.contains_key(agent) {
                        continue;
                    }
                    let timeout = match entry.timeout {
                        Some(timeout) => timeout,
                        None => match sessions.store.active_agent(agent).await {
                            Ok(Some(record)) => {
                                let timeout = sessions.idle_timeout_of(record.idle_timeout_secs);
                                entry.timeout = Some(timeout);
                                timeout
                            }
                            Ok(None) => {
                                gone.push(agent.clone());
                                continue;
                            }
                            Err(e) => {
                                tracing::warn!(agent, error = %e, "idle timer: cannot read the agent's timeout");
                                continue;
                            }
                        },
                    };
                    // The busy check only for agents quiet long enough.
                    if idle_due(entry.last, now, timeout, false)
                        && idle_due(entry.last, now, timeout, busy(agent))
                    {
                        due.push((agent.clone(), now.saturating_duration_since(entry.last), timeout));
                    }
                }
                for agent in gone {
                    agents.remove(&agent);
                }
                for (agent, _, timeout) in due {
                    firing.insert(agent.clone(), now);
                    let sessions = sessions.clone();
                    // Said as the timeout, not the (slightly longer) measured time.
                    let idle_for = timeout.unwrap_or_default();
                    tokio::spawn(async move {
                        sessions.idle_save(&agent, idle_for).await;
                        let _ = sessions.timer.send(Signal::Fired(agent));
                    });
                }
            }
        }
    }
}

fn touched(agents: &mut HashMap<String, Entry>, agent: String) {
    let now = Instant::now();
    agents
        .entry(agent)
        .and_modify(|e| e.last = now)
        .or_insert(Entry {
            last: now,
            timeout: None,
        });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_setting_wins_and_zero_means_never() {
        let default = Some(Duration::from_secs(1800));
        assert_eq!(effective_timeout(None, default), default);
        assert_eq!(
            effective_timeout(Some(1), default),
            Some(Duration::from_secs(1))
        );
        assert_eq!(effective_timeout(Some(0), default), None);
        assert_eq!(effective_timeout(None, None), None);
        assert_eq!(
            effective_timeout(Some(5), None),
            Some(Duration::from_secs(5))
        );
    }

    #[test]
    fn due_after_the_timeout_when_not_busy() {
        let t0 = Instant::now();
        let second = Some(Duration::from_secs(1));
        assert!(!idle_due(
            t0,
            t0 + Duration::from_millis(999),
            second,
            false
        ));
        assert!(idle_due(t0, t0 + Duration::from_secs(1), second, false));
        assert!(
            !idle_due(t0, t0 + Duration::from_secs(5), second, true),
            "a run is going"
        );
        assert!(
            !idle_due(t0, t0 + Duration::from_secs(99_999), None, false),
            "off"
        );
        // Activity stamped after `now` (a touch between reads) is not idle.
        assert!(!idle_due(t0 + Duration::from_secs(2), t0, second, false));
    }

    #[test]
    fn idle_times_read_as_people_say_them() {
        assert_eq!(describe_idle(Duration::from_secs(1800)), "30 minutes");
        assert_eq!(describe_idle(Duration::from_secs(60)), "1 minute");
        assert_eq!(describe_idle(Duration::from_secs(1)), "1 second");
        assert_eq!(describe_idle(Duration::from_secs(90)), "90 seconds");
        assert_eq!(describe_idle(Duration::from_secs(3690)), "61 minutes");
    }

    #[test]
    fn the_timers_own_events_are_not_activity() {
        let event = |kind| ThreadEvent {
            id: "1.1".into(),
            agent: "a".into(),
            thread_id: None,
            kind,
            data: serde_json::Value::Null,
        };
        assert!(!is_activity(&event("notification")));
        assert!(!is_activity(&event("status")));
        for kind in [
            "thread_created",
            "step_started",
            "message",
            "text",
            "approval",
        ] {
            assert!(is_activity(&event(kind)), "{kind}");
        }
    }
}
