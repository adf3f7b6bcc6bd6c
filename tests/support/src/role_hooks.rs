//! A task engine for tests of the seam between runs and tasks (`runs::roles`): it
//! offers each role one finishing tool, carries calls of it out by recording them,
//! and records every end of a turn it is told of. What the real engine decides from
//! them (a task's status) is not here.

use std::sync::Mutex;
use std::time::Duration;

use chorus_control_plane::runs::{RoleHooks, TurnEnd};
use chorus_control_plane::store::ThreadRole;
use chorus_proto::domain::ToolSpec;
use chorus_proto::tools::RunsIn;
use tokio::sync::watch;

/// How long a test waits for an end of a turn before it fails.
const WAIT: Duration = Duration::from_secs(5);

/// An argument text that makes [`TestHooks::execute`] refuse the call (as the engine
/// refuses a plan naming no agent).
pub const REFUSED: &str = "refuse me";

/// One call the hooks carried out: agent, thread, run, role, tool, arguments.
pub type Executed = (String, u64, String, ThreadRole, String, String);

/// One end of a turn: agent, thread, role, how it ended.
pub type Ended = (String, u64, ThreadRole, TurnEnd);

#[derive(Default)]
pub struct TestHooks {
    executed: Mutex<Vec<Executed>>,
    ended: watch::Sender<Vec<Ended>>,
}

impl TestHooks {
    /// The one tool of `role`: `submit_plan` (planner), `completion_report` (worker),
    /// `ask_agent` (answerer).
    pub fn tool_of(role: ThreadRole) -> &'static str {
        match role {
            ThreadRole::Planner => "submit_plan",
            ThreadRole::Worker => "completion_report",
            ThreadRole::Answerer => "ask_agent",
        }
    }

    /// The calls carried out so far.
    pub fn executed(&self) -> Vec<Executed> {
        self.executed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The ends of turns told so far.
    pub fn ended(&self) -> Vec<Ended> {
        self.ended.borrow().clone()
    }

    /// Waits (with a deadline) until `count` ends of turns were told; returns them.
    pub async fn until_ended(&self, count: usize) -> Vec<Ended> {
        let mut ended = self.ended.subscribe();
        tokio::time::timeout(WAIT, ended.wait_for(|e| e.len() >= count))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "fewer than {count} turns ended within {WAIT:?}: {:?}",
                    self.ended()
                )
            })
            .expect("the hooks live")
            .clone()
    }
}

#[tonic::async_trait]
impl RoleHooks for TestHooks {
    fn offered(&self, role: ThreadRole) -> Vec<ToolSpec> {
        let name = Self::tool_of(role);
        vec![ToolSpec {
            name: name.into(),
            wire_name: name.into(),
            description: format!("Finish the {role}'s turn"),
            schema_json: r#"{"type":"object"}"#.into(),
            runs_in: RunsIn::ControlPlane,
            ends_turn: true,
        }]
    }

    fn owns(&self, role: ThreadRole, tool: &str) -> bool {
        tool == Self::tool_of(role)
    }

    async fn execute(
        &self,
        agent: &str,
        thread_id: u64,
        run_id: &str,
        role: ThreadRole,
        tool: &str,
        arguments: &str,
    ) -> Result<String, String> {
        self.executed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push((
                agent.into(),
                thread_id,
                run_id.into(),
                role,
                tool.into(),
                arguments.into(),
            ));
        if arguments.contains(REFUSED) {
            return Err(format!("{tool} refused: fix it and call it again"));
        }
        Ok(format!("{tool} recorded; your turn is over"))
    }

    fn turn_ended(&self, agent: &str, thread_id: u64, role: ThreadRole, end: TurnEnd) {
        self.ended
            .send_modify(|ended| ended.push((agent.into(), thread_id, role, end)));
    }
}
