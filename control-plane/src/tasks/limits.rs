//! A task's limits (SPEC H, issue 28 point 9): how long its agents may work and how
//! many model calls they may make, summed over all its runs. Time is work: model
//! calls and tool steps, summed (waiting for people does not count). Pure.

use super::view::Limits;

/// What a task's threads have spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Spent {
    pub work_ms: u64,
    pub model_calls: u64,
}

/// Why the task is over its limits, if it is.
pub fn exceeded(limits: &Limits, spent: &Spent) -> Option<String> {
    if spent.model_calls > limits.model_calls {
        return Some(format!(
            "the task made {} model calls, over its limit of {} (raise it with PATCH {{\"limits\": …}} and retry)",
            spent.model_calls, limits.model_calls
        ));
    }
    let secs = spent.work_ms / 1000;
    if secs > limits.time_secs {
        return Some(format!(
            "the task's agents worked {secs} s, over its limit of {} s (raise it and retry)",
            limits.time_secs
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_task_is_over_when_either_limit_is_passed() {
        let limits = Limits {
            time_secs: 60,
            model_calls: 3,
        };
        assert_eq!(
            exceeded(
                &limits,
                &Spent {
                    work_ms: 60_000,
                    model_calls: 3
                }
            ),
            None
        );
        assert!(
            exceeded(
                &limits,
                &Spent {
                    work_ms: 0,
                    model_calls: 4
                }
            )
            .unwrap()
            .contains("4 model calls")
        );
        assert!(
            exceeded(
                &limits,
                &Spent {
                    work_ms: 61_000,
                    model_calls: 0
                }
            )
            .unwrap()
            .contains("61 s")
        );
    }
}
