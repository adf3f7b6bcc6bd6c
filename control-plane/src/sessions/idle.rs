//! What the idle save (F3) says and which timeout applies: pure helpers. The timer
//! itself is kept by each agent's run actor (`runs::idle`), which sees the agent's
//! activity first-hand.

use std::time::Duration;

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
    fn idle_times_read_as_people_say_them() {
        assert_eq!(describe_idle(Duration::from_secs(1800)), "30 minutes");
        assert_eq!(describe_idle(Duration::from_secs(60)), "1 minute");
        assert_eq!(describe_idle(Duration::from_secs(1)), "1 second");
        assert_eq!(describe_idle(Duration::from_secs(90)), "90 seconds");
        assert_eq!(describe_idle(Duration::from_secs(3690)), "61 minutes");
    }
}
