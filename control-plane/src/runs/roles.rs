//! The seam between runs and the task engine: threads with a role.
//!
//! A thread with a role (`store::ThreadRole`: a task's planner, its worker, an agent
//! answering another) is a normal thread of its agent, with three differences that
//! runs carry out and the engine defines, through [`RoleHooks`]:
//! - its runs are offered the role's tools beside the agent's ([`RoleHooks::offered`],
//!   put in the assignment by `assignment::Builder`); they run in the control plane and
//!   end the turn (`ToolSpec::ends_turn`: the worker ends the run right after the batch
//!   that called one successfully);
//! - the gate lets a run of that role call them without its profile (audited as an
//!   allow of the role's finishing contract) and has [`RoleHooks::execute`] carry them
//!   out; a thread without the role calling one is refused as an unknown tool;
//! - the end of each of its turns (the run completed, failed, was killed, failed by a
//!   limit or the watchdog, or its worker was lost beyond resumption) is told to
//!   [`RoleHooks::turn_ended`] by the agent's actor, which never waits for the engine.
//!   A run that ends with user messages it did not take starts the next run instead,
//!   as for any thread; the turn ends with that one.
//!
//! The next message of such a thread (an answer, a nudge) is sent with
//! `Runs::message_thread`: into the going run, or as the thread's next run whatever
//! its status (an ended thread with a role is woken, never continued into a new one).

use chorus_proto::domain::{Failure, ToolSpec};

use crate::store::ThreadRole;

/// How a turn of a thread with a role ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEnd {
    /// The model ended its turn (with or without a finishing call: the engine knows).
    Completed { run_id: String },
    /// The run failed (the model, a limit, the watchdog, its worker lost beyond
    /// resumption, its agent gone).
    Failed(Failure),
    /// A person killed the thread.
    Killed,
}

#[tonic::async_trait]
pub trait RoleHooks: Send + Sync {
    /// The specs of the tools a run of `role` is offered beside its agent's.
    fn offered(&self, role: ThreadRole) -> Vec<ToolSpec>;
    /// Whether `tool` (any of its names) is one of `role`'s tools.
    fn owns(&self, role: ThreadRole, tool: &str) -> bool;
    /// Carries out a role tool called by a run of a thread with `role`. Ok: the result
    /// text; Err: an error result the model sees (its turn goes on).
    async fn execute(
        &self,
        agent: &str,
        thread_id: u64,
        run_id: &str,
        role: ThreadRole,
        tool: &str,
        arguments: &str,
    ) -> Result<String, String>;
    /// The files a run of the thread is given in its working directory `workdir` (a
    /// task's attachments), read when its assignment is built.
    async fn files(
        &self,
        _agent: &str,
        _role: ThreadRole,
        _workdir: Option<&str>,
    ) -> Vec<chorus_proto::domain::TemplateFile> {
        Vec::new()
    }
    /// A turn of a thread with a role ended. Called by the agent's actor: must not wait.
    fn turn_ended(&self, agent: &str, thread_id: u64, role: ThreadRole, end: TurnEnd);
    /// A tool call of a thread with a role has its result (the name the model
    /// called, its arguments, whether the result is an error). Called by the agent's
    /// actor: must not wait.
    fn tool_call_ended(
        &self,
        _agent: &str,
        _thread_id: u64,
        _role: ThreadRole,
        _tool: &str,
        _arguments: &str,
        _failed: bool,
    ) {
    }
}

/// What the gate needs to know about a run: its thread, who started that thread,
/// and the thread's role (from the actor that owns the run, no read of the store).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunContext {
    pub thread_id: u64,
    pub started_by: Option<crate::principal::Principal>,
    pub role: Option<ThreadRole>,
    /// What runs the turn (a CLI's call that waits for a person is deferred past
    /// a hold: `gate`).
    pub backend: chorus_proto::domain::Backend,
}
