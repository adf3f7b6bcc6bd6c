//! One id per tool call of a CLI run. The CLI's stream reports each call with the
//! CLI's own id; `chorus-tools` calls the run endpoint with only a name and the
//! arguments (MCP carries no call id). The gate's check and audit row, the
//! assistant message and the tool result must name the same call, so the two
//! reports are paired here: same tool, same arguments, first unpaired one, whichever
//! arrives first. Claude Code reports a call before it runs it, OpenCode after.

use std::collections::HashMap;
use std::sync::Mutex;

use serde_json::Value;

#[derive(Default)]
pub struct CallIds(Mutex<State>);

#[derive(Default)]
struct State {
    next: u64,
    /// Reported by the stream, not yet run: (id, tool, arguments).
    streamed: Vec<(String, String, Value)>,
    /// Run at the endpoint, not yet reported by the stream.
    executed: Vec<(String, String, Value)>,
    /// The CLI's id → the id the call has everywhere, where they differ.
    renamed: HashMap<String, String>,
}

/// Arguments compared as JSON values (key order and spacing do not matter); text
/// that is not JSON compares as itself.
fn value(arguments: &str) -> Value {
    serde_json::from_str(arguments).unwrap_or_else(|_| Value::String(arguments.to_string()))
}

fn take(list: &mut Vec<(String, String, Value)>, tool: &str, arguments: &Value) -> Option<String> {
    let at = list
        .iter()
        .position(|(_, name, args)| name == tool && args == arguments)?;
    Some(list.remove(at).0)
}

impl CallIds {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The endpoint is about to run `tool`: the id of the call the stream reported,
    /// or a new one the stream's report will take.
    pub fn for_execution(&self, tool: &str, arguments: &str) -> String {
        let arguments = value(arguments);
        let mut state = self.state();
        if let Some(id) = take(&mut state.streamed, tool, &arguments) {
            return id;
        }
        state.next += 1;
        let id = format!("chorus_tools_{}", state.next);
        state
            .executed
            .push((id.clone(), tool.to_string(), arguments));
        id
    }

    /// The stream reported a call with the CLI's id: the id it has everywhere.
    pub fn for_stream(&self, cli_id: &str, tool: &str, arguments: &str) -> String {
        let arguments = value(arguments);
        let mut state = self.state();
        match take(&mut state.executed, tool, &arguments) {
            Some(id) => {
                state.renamed.insert(cli_id.to_string(), id.clone());
                id
            }
            None => {
                state
                    .streamed
                    .push((cli_id.to_string(), tool.to_string(), arguments));
                cli_id.to_string()
            }
        }
    }

    /// The id of the call the CLI's `cli_id` names (for its result).
    pub fn of(&self, cli_id: &str) -> String {
        self.state()
            .renamed
            .get(cli_id)
            .cloned()
            .unwrap_or_else(|| cli_id.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_streamed_first_keeps_the_clis_id_at_the_endpoint() {
        let ids = CallIds::default();
        assert_eq!(
            ids.for_stream("toolu_1", "view", r#"{"path":"a"}"#),
            "toolu_1"
        );
        // Same arguments, other spacing and order.
        assert_eq!(ids.for_execution("view", r#"{ "path" : "a" }"#), "toolu_1");
        assert_eq!(ids.of("toolu_1"), "toolu_1");
    }

    #[test]
    fn a_call_run_first_gives_its_id_to_the_streams_report_and_result() {
        let ids = CallIds::default();
        let first = ids.for_execution("create_file", r#"{"path":"x","content":"1"}"#);
        let second = ids.for_execution("create_file", r#"{"path":"x","content":"2"}"#);
        assert_ne!(first, second);
        // Reported later, in another order: each pairs with its own arguments.
        assert_eq!(
            ids.for_stream("call_b", "create_file", r#"{"content":"2","path":"x"}"#),
            second
        );
        assert_eq!(
            ids.for_stream("call_a", "create_file", r#"{"path":"x","content":"1"}"#),
            first
        );
        assert_eq!(ids.of("call_a"), first);
        assert_eq!(ids.of("call_b"), second);
    }

    #[test]
    fn two_identical_calls_pair_in_order_and_a_call_never_run_keeps_its_id() {
        let ids = CallIds::default();
        assert_eq!(ids.for_stream("t1", "view", "{}"), "t1");
        assert_eq!(ids.for_stream("t2", "view", "{}"), "t2");
        assert_eq!(ids.for_execution("view", "{}"), "t1");
        assert_eq!(ids.for_execution("view", "{}"), "t2");
        // A call the CLI refused itself never reaches the endpoint.
        assert_eq!(ids.for_stream("t3", "bash", "{}"), "t3");
        assert_eq!(ids.of("t3"), "t3");
    }
}
