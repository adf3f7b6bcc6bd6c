//! The tool gate in-process for threads with a role in a task: the real gate over
//! the real `Runs`, store and worker registry, its decisions sent to a fake worker
//! (`chorus_test_support::fake_worker`), the task engine a test one
//! (`role_hooks::TestHooks`). Each test asserts what the worker is told, what the
//! engine carried out and the audit row.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use chorus_control_plane::agents::AgentService;
use chorus_control_plane::config::{LauncherKind, WorkerSettings};
use chorus_control_plane::gate::{Check, GateSettings, ToolGate};
use chorus_control_plane::permissions::grants::Role;
use chorus_control_plane::permissions::profiles::ProfileCache;
use chorus_control_plane::providers::catalog::{Catalog, CatalogSnapshot};
use chorus_control_plane::questions::Questions;
use chorus_control_plane::store::{AuditDecision, AuditRecord, ThreadRole};
use chorus_control_plane::workers::WorkerManager;
use chorus_control_plane::workers::launcher::{Launcher, LocalLauncher};
use chorus_control_plane::workers::procs::ToolMarks;
use chorus_proto::domain::{ControlCommand, ToolCall, ToolDecision};
use chorus_test_support::fake_worker::{FakeWorker, Plane};
use chorus_test_support::role_hooks::{REFUSED, TestHooks};
use tokio_util::task::TaskTracker;

const A: &str = "a";

struct Setup {
    plane: Plane,
    hooks: Arc<TestHooks>,
    gate: Arc<ToolGate>,
    tasks: TaskTracker,
    _dir: tempfile::TempDir,
}

/// Agent `a` (the `standard` profile, `on_ask = prompt`), the test engine, and a
/// gate as `serve` builds it (its agent service launches nothing here).
async fn setup() -> Setup {
    let plane = Plane::start().await;
    plane.add_agent(A).await;
    let hooks = Arc::new(TestHooks::default());
    plane.runs.set_role_hooks(hooks.clone());
    let dir = tempfile::tempdir().unwrap();
    let (lost, _) = tokio::sync::mpsc::unbounded_channel();
    let workers = Arc::new(WorkerManager::new(
        plane.registry.clone(),
        Launcher::Local(LocalLauncher {
            worker_bin: dir.path().join("never-started"),
            control_plane_url: "http://127.0.0.1:9".into(),
            data_dir: dir.path().to_path_buf(),
            bash_timeout: Duration::from_secs(10),
            file_lock_timeout: Duration::from_secs(1),
            tool_marks: ToolMarks::load(dir.path()).unwrap(),
            json_logs: false,
            backends: Default::default(),
        }),
        WorkerSettings {
            bash_timeout: Duration::from_secs(10),
            file_lock_timeout: Duration::from_secs(1),
            restart_backoff: Duration::from_secs(1),
            restart_backoff_max: Duration::from_secs(1),
            stop_grace: Duration::from_secs(1),
            heartbeat_interval: Duration::from_secs(1),
            attach_timeout: Duration::from_secs(1),
            launcher: LauncherKind::Local,
            join_token: None,
            tls: None,
        },
        lost,
        {
            let feed = plane.runs.feed().clone();
            Arc::new(move |agent: &str, status| feed.publish_worker(agent, status))
        },
    ));
    let catalog = Arc::new(Catalog::fixed(CatalogSnapshot::default()));
    let agents = Arc::new(AgentService::new(
        plane.store.clone(),
        workers,
        plane.runs.clone(),
        catalog,
        dir.path().join("agents"),
        None,
        None,
    ));
    let gate = Arc::new(ToolGate::new(
        plane.store.clone(),
        plane.registry.clone(),
        plane.runs.clone(),
        agents,
        Arc::new(Questions::new(plane.store.clone())),
        Arc::new(ProfileCache::default()),
        GateSettings {
            ask_timeout: Duration::from_secs(30),
            cli_approval_hold: Duration::from_secs(30),
            roles: HashMap::new(),
            default_role: Role::Operator,
            known_secrets: Default::default(),
            vouched: Default::default(),
        },
    ));
    Setup {
        plane,
        hooks,
        gate,
        tasks: TaskTracker::new(),
        _dir: dir,
    }
}

impl Setup {
    /// The worker asks about a call of `run`; returns the first thing it is told.
    async fn check(
        &self,
        worker: &mut FakeWorker,
        run: &str,
        tool: &str,
        arguments: &str,
    ) -> ControlCommand {
        self.gate.handle(
            Check {
                agent: A.into(),
                generation: worker.generation,
                request_id: 1,
                run_id: run.into(),
                call: ToolCall {
                    id: format!("call-{tool}"),
                    name: tool.into(),
                    arguments: arguments.into(),
                },
                trace_context: HashMap::new(),
            },
            &self.tasks,
        );
        worker.command().await
    }

    async fn decision(
        &self,
        worker: &mut FakeWorker,
        run: &str,
        tool: &str,
        arguments: &str,
    ) -> ToolDecision {
        match self.check(worker, run, tool, arguments).await {
            ControlCommand::ToolDecision(decision) => decision,
            other => panic!("expected a decision on {tool}, got {other:?}"),
        }
    }

    /// The newest audit row of the agent.
    async fn last_audit(&self) -> AuditRecord {
        self.plane.store.flush().await;
        self.plane
            .store
            .audit_page(A, None, 1)
            .await
            .unwrap()
            .remove(0)
    }
}

/// A role's finishing tool called by a thread with that role is allowed without
/// the profile (which knows no such tool), carried out by the engine with the
/// thread and run, and audited as an allow of the role's contract; an error from
/// the engine is an error result (the turn goes on). The same tool called by a
/// chat thread, or by a thread of another role, goes the normal way and is refused
/// by the profile; the engine never sees it.
#[tokio::test]
async fn a_role_tool_is_carried_out_by_the_engine_only_for_its_role() {
    let setup = setup().await;
    let mut worker = setup.plane.worker(A).await;
    let planner = setup
        .plane
        .start_role(A, "plan", ThreadRole::Planner, None)
        .await
        .unwrap();
    let run = worker.assignment().await;

    let decided = setup
        .decision(
            &mut worker,
            &run.run_id,
            "submit_plan",
            r#"{"summary": "x"}"#,
        )
        .await;
    assert!(decided.allowed, "{decided:?}");
    let result = decided.result.expect("carried out in the control plane");
    assert_eq!(
        (result.content.as_str(), result.is_error),
        ("submit_plan recorded; your turn is over", false)
    );
    assert_eq!(
        setup.hooks.executed(),
        [(
            A.to_string(),
            planner,
            run.run_id.clone(),
            ThreadRole::Planner,
            "submit_plan".to_string(),
            r#"{"summary": "x"}"#.to_string()
        )]
    );
    let audit = setup.last_audit().await;
    assert_eq!(audit.decision, AuditDecision::Allow);
    assert_eq!(audit.thread_id, Some(planner));
    assert_eq!(audit.call_id.as_deref(), Some("call-submit_plan"));
    let detail = audit.detail.unwrap();
    assert!(
        detail.contains("finishing contract of the planner role"),
        "{detail}"
    );

    let refused = setup
        .decision(
            &mut worker,
            &run.run_id,
            "submit_plan",
            &format!(r#"{{"summary": "{REFUSED}"}}"#),
        )
        .await;
    assert!(refused.allowed);
    let result = refused.result.unwrap();
    assert!(result.is_error, "{result:?}");
    assert!(result.content.contains("refused"), "{result:?}");

    // Not the thread's role: the normal way, where no profile knows the tool.
    let chat = setup.plane.send(A, "hi").await.thread_id;
    let chat_run = worker.assignment().await;
    assert_eq!(chat_run.thread_id, chat);
    let task = setup
        .plane
        .start_role(A, "work", ThreadRole::Worker, Some("tasks/1"))
        .await
        .unwrap();
    let worker_run = worker.assignment().await;
    assert_eq!(worker_run.thread_id, task);
    for run in [&chat_run.run_id, &worker_run.run_id] {
        let denied = setup
            .decision(&mut worker, run, "submit_plan", r#"{"summary": "x"}"#)
            .await;
        assert!(!denied.allowed, "{denied:?}");
        assert!(denied.result.is_none());
        assert_eq!(setup.last_audit().await.decision, AuditDecision::Deny);
    }
    assert_eq!(
        setup.hooks.executed().len(),
        2,
        "the engine saw only its role's calls"
    );
}

/// A thread with a role never waits for a person: where its agent would ask one
/// (`on_ask = prompt`), the call is denied and the audit row says why; what the
/// profile allows stays allowed. The control: a chat thread's same call does ask a
/// person (the worker is told the call waits for an approval).
#[tokio::test]
async fn a_role_thread_never_waits_for_a_person_on_an_ask() {
    let setup = setup().await;
    let mut worker = setup.plane.worker(A).await;
    let task = setup
        .plane
        .start_role(A, "work", ThreadRole::Worker, Some("tasks/1"))
        .await
        .unwrap();
    let run = worker.assignment().await;

    let asked = r#"{"command": "make deploy"}"#;
    let denied = setup
        .decision(&mut worker, &run.run_id, "bash", asked)
        .await;
    assert!(!denied.allowed, "{denied:?}");
    assert!(
        denied.message.contains("does not wait for one"),
        "{}",
        denied.message
    );
    let audit = setup.last_audit().await;
    assert_eq!(audit.decision, AuditDecision::AskAutoDenied);
    assert_eq!(audit.thread_id, Some(task));
    let detail = audit.detail.unwrap();
    assert!(
        detail.contains("a thread with the worker role never waits for a person"),
        "{detail}"
    );

    let allowed = setup
        .decision(&mut worker, &run.run_id, "bash", r#"{"command": "ls"}"#)
        .await;
    assert!(allowed.allowed && allowed.result.is_none(), "{allowed:?}");

    let chat = setup.plane.send(A, "hi").await.thread_id;
    let chat_run = worker.assignment().await;
    assert_eq!(chat_run.thread_id, chat);
    match setup
        .check(&mut worker, &chat_run.run_id, "bash", asked)
        .await
    {
        ControlCommand::ToolPending { description, .. } => {
            assert!(
                description.contains("Waiting for permission"),
                "{description}"
            );
        }
        other => panic!("expected the chat thread's call to wait for a person, got {other:?}"),
    }
    assert!(setup.hooks.executed().is_empty());
}
