//! The control plane's runs in-process, with a fake worker: domain level, no
//! process and no gRPC.
//!
//! [`Plane`] is the real `Runs` (each agent's run actor) over the real worker
//! `Registry` and a real store (SQLite in a temporary directory; a fresh Postgres
//! database when `CHORUS_TEST_POSTGRES` names a server). A [`FakeWorker`] attaches
//! through the registry as a launched worker does, receives the `ControlCommand`s
//! the actor sends (assignments, injected messages, cancels) and reports
//! `WorkerEvent`s back through `Runs::apply`, numbering each run's events from 1
//! as the real worker does. Its death is the registry's detach followed by
//! `Runs::worker_lost`, in the order the gRPC link and the supervisor do them.
//!
//! What it leaves out: the gate (a tool check is modelled by the one call the gate
//! makes into runs, [`FakeWorker::tool_check`]), the secret scrubber and the rate
//! limit of the link, background processes and summaries requested of the worker
//! (the summarizer here is [`FakeSummarizer`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chorus_control_plane::config::{SandboxSettings, ThreadSettings};
use chorus_control_plane::permissions::profiles::ProfileCache;
use chorus_control_plane::principal::Principal;
use chorus_control_plane::providers::catalog::{Catalog, CatalogSnapshot, ProviderModels};
use chorus_control_plane::questions::Questions;
use chorus_control_plane::runs::{EventRejected, Received, ReplyTo, RunSettings, Runs};
use chorus_control_plane::store::{
    AgentRecord, NewAgent, RunRecord, StepRecord, Store, StoreError, ThreadRecord, ThreadRole,
    ThreadStatus,
};
use chorus_control_plane::summaries::{Purpose, Summarizer};
use chorus_control_plane::workers::WorkerLost;
use chorus_control_plane::workers::registry::{Generation, Registry};
use chorus_proto::domain::{
    ChatMessage, ControlCommand, FailureKind, RetryPolicy, RunAssignment, StepEnded, StepKind,
    StepStarted, WorkerEvent,
};
use tokio::sync::{mpsc, watch};

/// The model every agent of a [`Plane`] uses (listed by its one provider).
pub const MODEL: &str = "fake-model";
/// Who sends the messages of a [`Plane`]'s tests.
pub const USER: &str = "tester";

/// How long a test waits for something the actor does on its own (a command to a
/// worker, a status after a task of its reported back) before it fails.
const WAIT: Duration = Duration::from_secs(5);

/// `Runs` over a real registry and store, with the agents a test adds.
pub struct Plane {
    pub store: Store,
    pub registry: Arc<Registry>,
    pub runs: Arc<Runs>,
    pub summarizer: Arc<FakeSummarizer>,
    _dir: tempfile::TempDir,
}

impl Plane {
    /// A plane with the default `[threads]` settings but titles off (a title is
    /// a summary request of its own; [`Plane::with`] turns them on).
    pub async fn start() -> Plane {
        Plane::with(|_| {}).await
    }

    /// A plane whose run settings `adjust` changes first.
    pub async fn with(adjust: impl FnOnce(&mut RunSettings)) -> Plane {
        let dir = tempfile::tempdir().expect("temp dir");
        let store = match crate::test_postgres() {
            Some(server) => Store::open_postgres(&fresh_database(&server).await)
                .await
                .expect("open the store on Postgres"),
            None => Store::open(&dir.path().join("chorus.db"))
                .await
                .expect("open the store"),
        };
        let registry = Arc::new(Registry::default());
        let summarizer = Arc::new(FakeSummarizer::default());
        let mut settings = RunSettings {
            default_model: None,
            max_iterations: 10,
            retry: RetryPolicy::default(),
            sandbox: SandboxSettings::default(),
            threads: ThreadSettings {
                titles: false,
                ..ThreadSettings::default()
            },
            context_window: Duration::from_secs(24 * 3600),
            tool_schemas: Default::default(),
            mcp: Default::default(),
            memory: Default::default(),
            flush_at: chorus_control_plane::config::DEFAULT_FLUSH_AT,
        };
        adjust(&mut settings);
        let runs = Arc::new(Runs::new(
            store.clone(),
            registry.clone(),
            Arc::new(Catalog::fixed(one_provider())),
            Arc::new(ProfileCache::default()),
            Arc::new(Questions::new(store.clone())),
            summarizer.clone(),
            settings,
        ));
        Plane {
            store,
            registry,
            runs,
            summarizer,
            _dir: dir,
        }
    }

    /// Registers agent `name` (model [`MODEL`], the `standard` profile).
    pub async fn add_agent(&self, name: &str) -> AgentRecord {
        self.store
            .register_agent(&NewAgent {
                name: name.into(),
                model: Some(MODEL.into()),
                system_prompt: "be brief".into(),
                permissions: "standard".into(),
                on_ask: chorus_control_plane::switches::OnAsk::Prompt,
                network: chorus_control_plane::switches::Network::On,
                backend: Default::default(),
                idle_timeout_secs: None,
                discord_channel_id: None,
                incarnation: format!("{name}-1"),
                mcp_servers: None,
                heartbeat: None,
            })
            .await
            .expect("register the agent")
    }

    /// Starts a thread of `agent` with `role` in a task (working in `workdir`).
    pub async fn start_role(
        &self,
        agent: &str,
        content: &str,
        role: ThreadRole,
        workdir: Option<&str>,
    ) -> Result<u64, StoreError> {
        let record = self.agent(agent).await;
        self.runs
            .start_role_thread(&record, content, &Principal::person(USER), role, workdir)
            .await
    }

    /// The next message of `agent`'s thread `thread` (`Runs::message_thread`).
    pub async fn message_thread(
        &self,
        agent: &str,
        thread: u64,
        content: &str,
    ) -> Result<Received, StoreError> {
        let record = self.agent(agent).await;
        self.runs
            .message_thread(&record, thread, content, &Principal::person(USER))
            .await
    }

    /// The agent's record as stored.
    pub async fn agent(&self, name: &str) -> AgentRecord {
        self.store
            .active_agent(name)
            .await
            .expect("read the agent")
            .unwrap_or_else(|| panic!("no agent '{name}'; add it first"))
    }

    /// A user message to `agent` that starts a new thread.
    pub async fn send(&self, agent: &str, content: &str) -> Received {
        self.receive(agent, content, None).await
    }

    /// A user message to `agent` replying to message `to` (into its thread).
    pub async fn reply(&self, agent: &str, content: &str, to: u64) -> Received {
        self.receive(agent, content, Some(ReplyTo::Message(to)))
            .await
    }

    async fn receive(&self, agent: &str, content: &str, reply_to: Option<ReplyTo>) -> Received {
        let record = self.agent(agent).await;
        self.runs
            .receive(&record, content, reply_to, &Principal::person(USER))
            .await
            .expect("the message is received")
    }

    /// A worker for `agent` is launched (a new generation) but has not attached.
    pub fn launch(&self, agent: &str) -> Launched {
        let credential = format!("credential-{}", uuid_like());
        let (generation, _) = self.registry.expect(agent, credential.clone());
        Launched {
            agent: agent.to_string(),
            generation,
            credential,
            registry: self.registry.clone(),
            runs: self.runs.clone(),
        }
    }

    /// A worker for `agent`, launched and attached: the queued runs go to it.
    pub async fn worker(&self, agent: &str) -> FakeWorker {
        self.launch(agent).attach().await
    }

    /// The thread as the store holds it once every queued write is committed.
    pub async fn thread(&self, agent: &str, thread: u64) -> ThreadRecord {
        self.store.flush().await;
        self.store
            .thread(agent, thread)
            .await
            .expect("read the thread")
            .unwrap_or_else(|| panic!("no thread {thread} of '{agent}'"))
    }

    /// Waits (with a deadline) until the thread has `status`; returns it then.
    pub async fn until_status(
        &self,
        agent: &str,
        thread: u64,
        status: ThreadStatus,
    ) -> ThreadRecord {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let record = self.thread(agent, thread).await;
            if record.status == status {
                return record;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "thread {thread} is {:?}, not {status:?}, after {WAIT:?}",
                record.status
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The thread's messages as stored: (role, content).
    pub async fn messages(&self, agent: &str, thread: u64) -> Vec<(String, String)> {
        self.store.flush().await;
        self.store
            .thread_messages(agent, thread)
            .await
            .expect("read the messages")
            .into_iter()
            .map(|m| (m.message.role.as_str().to_string(), m.message.content))
            .collect()
    }

    /// The thread's steps as stored.
    pub async fn steps(&self, agent: &str, thread: u64) -> Vec<StepRecord> {
        self.store.flush().await;
        self.store
            .thread_steps(agent, thread)
            .await
            .expect("read the steps")
    }

    /// The thread's runs (its attempts), oldest first.
    pub async fn runs_of(&self, agent: &str, thread: u64) -> Vec<RunRecord> {
        self.store.flush().await;
        self.store
            .thread_runs(agent, thread)
            .await
            .expect("read the runs")
    }

    /// The user messages still waiting for a run to take them: (id, content).
    pub async fn pending(&self, agent: &str, thread: u64) -> Vec<(u64, String)> {
        self.store.flush().await;
        self.store
            .pending_inputs(agent, thread)
            .await
            .expect("read the pending inputs")
    }
}

/// A worker process started for an agent that has not connected yet.
pub struct Launched {
    pub agent: String,
    pub generation: Generation,
    credential: String,
    registry: Arc<Registry>,
    runs: Arc<Runs>,
}

impl Launched {
    /// It connects: as the gRPC link does, the agent's queued runs are delivered.
    pub async fn attach(self) -> FakeWorker {
        let attachment = self
            .registry
            .attach(&self.agent, &self.credential)
            .expect("the fresh credential attaches");
        self.runs.deliver_pending(&self.agent).await;
        FakeWorker {
            agent: self.agent,
            generation: attachment.generation,
            registry: self.registry,
            runs: self.runs,
            commands: attachment.commands,
            seqs: HashMap::new(),
        }
    }

    /// It dies before connecting (a bad binary, a sandbox that cannot start).
    pub async fn die(self, reason: &str) {
        self.registry.revoke(&self.agent, self.generation);
        self.runs
            .worker_lost(WorkerLost {
                agent: self.agent,
                generation: self.generation,
                reason: reason.to_string(),
                attached: false,
            })
            .await;
    }
}

/// A connected worker of one agent (one generation).
pub struct FakeWorker {
    pub agent: String,
    pub generation: Generation,
    registry: Arc<Registry>,
    runs: Arc<Runs>,
    commands: mpsc::UnboundedReceiver<ControlCommand>,
    /// The last `seq` used for each run.
    seqs: HashMap<String, u64>,
}

impl FakeWorker {
    /// The next command sent to this worker (fails the test after a deadline).
    pub async fn command(&mut self) -> ControlCommand {
        match tokio::time::timeout(WAIT, self.commands.recv()).await {
            Ok(Some(command)) => command,
            Ok(None) => panic!("the connection to the worker of '{}' closed", self.agent),
            Err(_) => panic!(
                "nothing sent to the worker of '{}' within {WAIT:?}",
                self.agent
            ),
        }
    }

    /// Every command sent to this worker so far and not yet read (none waited for).
    pub fn sent(&mut self) -> Vec<ControlCommand> {
        let mut sent = Vec::new();
        while let Ok(command) = self.commands.try_recv() {
            sent.push(command);
        }
        sent
    }

    /// The next command, which must be a run's assignment.
    pub async fn assignment(&mut self) -> RunAssignment {
        match self.command().await {
            ControlCommand::AssignRun(run) => *run,
            other => panic!("expected an assignment, the worker was sent {other:?}"),
        }
    }

    /// Reports `event` of its run as the next of that run's events.
    pub async fn report(&mut self, event: WorkerEvent) -> Result<(), EventRejected> {
        let run_id = event.run_id().unwrap_or_default().to_string();
        let seq = self.seqs.entry(run_id).or_default();
        *seq += 1;
        let seq = *seq;
        self.report_as(seq, event).await
    }

    /// Reports `event` with `seq` as given (a replay, a reconnect's resend).
    pub async fn report_as(&mut self, seq: u64, event: WorkerEvent) -> Result<(), EventRejected> {
        self.runs
            .apply(&self.agent, self.generation, seq, event)
            .await
    }

    /// A step of `run` starts.
    pub async fn step(&mut self, run: &str, number: u32, kind: StepKind) {
        self.report(WorkerEvent::StepStarted(StepStarted {
            run_id: run.into(),
            number,
            kind,
            description: format!("{} {number}", kind.as_str()),
            started_at_ms: now_ms(),
            runs_in: None,
        }))
        .await
        .expect("the step is accepted");
    }

    /// A step of `run` ends.
    pub async fn step_ended(&mut self, run: &str, number: u32) {
        self.report(WorkerEvent::StepEnded(StepEnded {
            run_id: run.into(),
            number,
            ended_at_ms: now_ms(),
            duration_ms: 1,
            failed: false,
            usage: None,
        }))
        .await
        .expect("the step end is accepted");
    }

    /// The model's answer in `run` is stored.
    pub async fn answer(&mut self, run: &str, text: &str) {
        self.report(WorkerEvent::MessageAppended {
            run_id: run.into(),
            message: ChatMessage::assistant(text, Vec::new()),
        })
        .await
        .expect("the answer is accepted");
    }

    /// `run` took a user message into its history.
    pub async fn take_input(&mut self, run: &str, message_id: u64) {
        self.report(WorkerEvent::InputTaken {
            run_id: run.into(),
            message_id,
        })
        .await
        .expect("the input is accepted");
    }

    /// `run` ended its turn.
    pub async fn complete(&mut self, run: &str) -> Result<(), EventRejected> {
        self.report(WorkerEvent::RunCompleted {
            run_id: run.into(),
            final_text: String::new(),
        })
        .await
    }

    /// `run` failed in the worker.
    pub async fn fail(&mut self, run: &str, kind: FailureKind, error: &str) {
        self.report(WorkerEvent::RunFailed {
            run_id: run.into(),
            kind,
            error: error.into(),
        })
        .await
        .expect("the failure is accepted");
    }

    /// A tool check of `run` reaches the gate, which asks runs whose it is (the one
    /// call a check makes into runs): the thread and who started it, or `None`
    /// when the run is not this worker's.
    pub async fn tool_check(&self, run: &str) -> Option<(u64, Option<String>)> {
        self.runs
            .thread_of(&self.agent, self.generation, run)
            .await
            .map(|(thread, by)| (thread, by.map(|p| p.text())))
    }

    /// The connection ends and the supervisor reports the worker lost, in the order
    /// the link and the supervisor do it: detached, its generation revoked, lost.
    pub async fn die(self, reason: &str) {
        self.registry.detach(&self.agent, self.generation, None);
        self.registry.revoke(&self.agent, self.generation);
        self.runs
            .worker_lost(WorkerLost {
                agent: self.agent.clone(),
                generation: self.generation,
                reason: reason.to_string(),
                attached: true,
            })
            .await;
    }
}

/// Writes summaries instantly, except those of what a continuation leaves out
/// while [`FakeSummarizer::hold`] is on.
pub struct FakeSummarizer {
    held: watch::Sender<bool>,
    asked: Mutex<Vec<Purpose>>,
    /// How many it has written.
    answered: watch::Sender<usize>,
}

impl Default for FakeSummarizer {
    fn default() -> Self {
        FakeSummarizer {
            held: watch::Sender::new(false),
            asked: Mutex::default(),
            answered: watch::Sender::new(0),
        }
    }
}

impl FakeSummarizer {
    /// The summary a continuation waits for is not written until [`Self::release`].
    pub fn hold(&self) {
        self.held.send_replace(true);
    }

    pub fn release(&self) {
        self.held.send_replace(false);
    }

    /// Waits (with a deadline) until it has written `count` summaries.
    pub async fn until_answered(&self, count: usize) {
        let mut answered = self.answered.subscribe();
        tokio::time::timeout(WAIT, answered.wait_for(|n| *n >= count))
            .await
            .unwrap_or_else(|_| panic!("fewer than {count} summaries written within {WAIT:?}"))
            .expect("the summarizer lives");
    }

    /// What it was asked for, in order.
    pub fn asked(&self) -> Vec<Purpose> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

#[tonic::async_trait]
impl Summarizer for FakeSummarizer {
    async fn summarize(
        &self,
        _agent: &AgentRecord,
        messages: &[ChatMessage],
        purpose: Purpose,
    ) -> Result<String, String> {
        self.asked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(purpose);
        if purpose == Purpose::Context {
            let _ = self.held.subscribe().wait_for(|held| !*held).await;
        }
        let summary = format!("summary of {} messages", messages.len());
        self.answered.send_modify(|n| *n += 1);
        Ok(summary)
    }
}

/// A catalogue with one provider that lists [`MODEL`].
fn one_provider() -> CatalogSnapshot {
    let mut snapshot = CatalogSnapshot::default();
    snapshot.providers.insert(
        "openai".into(),
        ProviderModels {
            valid: true,
            base_url: "http://127.0.0.1:9/v1".into(),
            models: vec![MODEL.into()],
            error: None,
            reachable: true,
            key_refused: false,
            checked_at: "2026-01-01T00:00:00Z".into(),
            limits: Default::default(),
        },
    );
    snapshot
}

/// A fresh database of its own on the test Postgres `server`.
async fn fresh_database(server: &str) -> String {
    use sqlx::Connection;
    let name = format!("chorus_actor_{}", uuid_like());
    let mut admin = sqlx::PgConnection::connect(&format!("{server}/postgres"))
        .await
        .expect("connect to the test Postgres server");
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
        .execute(&mut admin)
        .await
        .expect("create a test database");
    format!("{server}/{name}")
}

/// A name unique in this machine's tests (no uuid crate here).
fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed),
        now_ms()
    )
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}
