//! The runs of one worker: each assigned run is a task running the tool loop; the
//! runner starts them, cancels them, switches their model, and reports how each ended.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chorus_proto::domain::{AgentChange, ControlCommand, RunAssignment, WorkerEvent};
use opentelemetry::KeyValue;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::awareness::Board;
use crate::gate::{GateMessage, RelayGate};
use crate::model::relay::RelayClients;
use crate::tool_loop::{self, EventSink, Inbox, LiveAgent, LoopInput, ModelSelection};
use crate::tools::ToolBox;
use crate::tools::ToolConfig;
use crate::tools::bash::BashConfig;
use crate::tools::jail::Workspace;
use crate::tools::jobs::BackgroundJobs;
use crate::tools::locks::FileLocks;
use crate::tools::sandbox::Sandbox;

/// Used when an assignment leaves the iteration cap to the worker.
const DEFAULT_MAX_ITERATIONS: u32 = 50;

pub struct Runner {
    sink: EventSink,
    clients: RelayClients,
    runs: Arc<Mutex<HashMap<String, ActiveRun>>>,
    gate: Arc<RelayGate>,
    /// One set of file locks for all runs: two threads of the agent writing the
    /// same file take turns.
    locks: Arc<FileLocks>,
    /// Background tasks (bash with run_in_background), shared by all runs: they
    /// outlive the call and the run that started them.
    background: Arc<BackgroundJobs>,
    tools: ToolConfig,
    /// What each run is doing, so each can tell its model about the others.
    board: Arc<Board>,
    /// Runs and summaries in progress.
    tasks: TaskTracker,
    /// Cancels the summaries in progress when the worker stops (runs have their own).
    stopping: CancellationToken,
    /// The agent's directory on this worker's disk: `workspace/`, `docs/`, `home/`,
    /// `tmp/` (no path comes from the control plane).
    agent_dir: PathBuf,
    /// Where the CLIs of CLI backends are.
    backends: Arc<crate::backends::probe::BackendPaths>,
    /// The agent's MCP servers.
    mcp: Arc<crate::mcp::McpHub>,
}

/// What the runner holds of a run in progress.
struct ActiveRun {
    cancel: CancellationToken,
    /// What the run knows of its agent. A change (configure, self-edit) is applied
    /// here as its command is handled, so it is in place before any later command
    /// (such as the decision on the self-edit tool call that caused it) reaches the
    /// run: the next model call after a self-edit always sees it.
    agent: watch::Sender<LiveAgent>,
    /// User messages injected into the run, taken before its next model call.
    inbox: Inbox,
    /// What the run offers, in three parts kept apart so that a change of one
    /// (the agent's configuration, an MCP server's tool list) keeps the others.
    tools: RunTools,
}

/// The three sources of a run's offered tools.
struct RunTools {
    /// The agent's own (its configuration; changed by `UpdateAgent`).
    agent: Vec<chorus_proto::domain::ToolSpec>,
    /// Its thread's role tools (a task's): fixed for the run.
    role: Vec<chorus_proto::domain::ToolSpec>,
    /// Its agent's MCP servers' tools the profile can reach (read again when a
    /// server says its list changed).
    mcp: Vec<chorus_proto::domain::ToolSpec>,
}

impl RunTools {
    /// All of them, as the model and the CLI's listing see them: the agent's, then
    /// the role's, then the MCP servers' (a later one named like an earlier one is
    /// left out: the earlier stands).
    fn offered(&self) -> std::sync::Arc<Vec<chorus_proto::domain::ToolSpec>> {
        let mut all = self.agent.clone();
        for tool in self.role.iter().chain(&self.mcp) {
            if !all
                .iter()
                .any(|t| t.name == tool.name || t.wire_name == tool.wire_name)
            {
                all.push(tool.clone());
            }
        }
        std::sync::Arc::new(all)
    }
}

impl ActiveRun {
    /// Offers the run's MCP tools as `mcp` from its next model call (and its CLI's
    /// next listing) on.
    fn offer_mcp(&mut self, mcp: Vec<chorus_proto::domain::ToolSpec>) {
        self.tools.mcp = mcp;
        let offered = self.tools.offered();
        self.agent.send_modify(|live| live.tools = offered);
    }
}

/// Tool settings of this worker process (flags or environment of `chorus-worker`).
#[derive(Debug, Clone)]
pub struct WorkerToolSettings {
    /// Default timeout of a bash call that names none.
    pub bash_timeout: Duration,
    /// How long a writer waits for a file another thread is writing.
    pub file_lock_timeout: Duration,
    /// TLS of the link to the control plane: model calls to its relay use it too.
    pub link_tls: Option<crate::link_tls::LinkTls>,
    /// Where the CLIs of CLI backends and `chorus-tools` are (flags).
    pub backends: crate::backends::probe::BackendPaths,
}

impl Default for WorkerToolSettings {
    fn default() -> Self {
        WorkerToolSettings {
            bash_timeout: BashConfig::default().default_timeout,
            file_lock_timeout: Duration::from_secs(30),
            link_tls: None,
            backends: Default::default(),
        }
    }
}

impl Runner {
    /// `control_plane` is the base URL of the control plane (model requests go to its
    /// relay); `credential` is this worker's, which the relay accepts; `agent_dir` the
    /// agent's directory on this worker's disk.
    pub fn new(
        sink: EventSink,
        control_plane: &str,
        credential: &str,
        settings: &WorkerToolSettings,
        agent_dir: PathBuf,
    ) -> Self {
        // No read timeout here: each model call carries its own silence limit and
        // deadline (`AssignRun.retry`), so the error names the provider and the setting.
        let mut http = reqwest::Client::builder().connect_timeout(Duration::from_secs(10));
        if let Some(tls) = &settings.link_tls {
            http = tls.configure(http);
        }
        let http = http.build().unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot build the model relay client with the link's TLS");
            reqwest::Client::default()
        });
        // MCP servers over HTTP: a client of its own (not the relay's, whose TLS is the link's).
        let mcp_http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Runner {
            mcp: Arc::new(crate::mcp::McpHub::new(sink.clone(), mcp_http)),
            gate: Arc::new(RelayGate::new(sink.clone())),
            background: Arc::new(BackgroundJobs::new(Some(sink.clone()))),
            sink,
            clients: RelayClients::new(http, control_plane, credential),
            runs: Arc::new(Mutex::new(HashMap::new())),
            locks: Arc::new(FileLocks::new(settings.file_lock_timeout)),
            tools: ToolConfig {
                bash: BashConfig {
                    default_timeout: settings.bash_timeout,
                    ..BashConfig::default()
                },
            },
            board: Arc::new(Board::default()),
            tasks: TaskTracker::new(),
            stopping: CancellationToken::new(),
            agent_dir,
            backends: Arc::new(settings.backends.clone()),
        }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, ActiveRun>> {
        self.runs
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub fn active_runs(&self) -> usize {
        self.runs().len()
    }

    /// Acts on one command from the control plane (all but Welcome and Shutdown,
    /// which the connection handles).
    pub fn handle(&self, command: ControlCommand) {
        match command {
            ControlCommand::AssignRun(run) => self.start(*run),
            ControlCommand::CancelRun { run_id, reason } => {
                if let Some(run) = self.runs().get(&run_id) {
                    tracing::info!(%run_id, %reason, "cancelling run");
                    run.cancel.cancel();
                }
            }
            ControlCommand::UpdateAgent(change) => {
                tracing::info!(?change.model, tools = ?change.tools, "agent changed");
                for run in self.runs().values_mut() {
                    // `change.tools` (the names alone) is for older workers.
                    if let Some(offered) = change.offered.clone() {
                        run.tools.agent = offered;
                    }
                    let offered = run.tools.offered();
                    run.agent.send_modify(|agent| {
                        apply(agent, change.clone());
                        agent.tools = offered;
                    });
                }
            }
            ControlCommand::ToolDecision(decision) => {
                self.gate
                    .answer(decision.request_id, GateMessage::Decided(decision));
            }
            ControlCommand::ToolPending {
                request_id,
                description,
                approval_id,
            } => {
                self.gate.answer(
                    request_id,
                    GateMessage::Pending {
                        description,
                        approval_id,
                    },
                );
            }
            ControlCommand::ToolDeferred {
                request_id,
                message,
                approval_id,
            } => {
                self.gate.answer(
                    request_id,
                    GateMessage::Deferred {
                        message,
                        approval_id,
                    },
                );
            }
            ControlCommand::InjectMessage { run_id, input } => {
                // Pushed under the runs lock: a run that has ended (and left the
                // map) can no longer receive, so nothing is queued to no one.
                match self.runs().get(&run_id) {
                    Some(run) => run.inbox.push(input),
                    // The control plane sees no InputTaken and runs it later.
                    None => tracing::warn!(
                        %run_id,
                        message_id = input.message_id,
                        "message for a run this worker is not running; ignored"
                    ),
                }
            }
            ControlCommand::Summarize(request) => {
                let sink = self.sink.clone();
                let clients = self.clients.clone();
                let stopping = self.stopping.clone();
                let span = tracing::info_span!("summary", request_id = request.request_id);
                self.tasks.spawn(
                    async move {
                        crate::summary::answer(&clients, &request, &sink, &stopping).await;
                    }
                    .instrument(span),
                );
            }
            ControlCommand::Welcome { .. } | ControlCommand::Shutdown { .. } => {}
            // Only an idle dial-in worker's first message; never on an agent's link.
            ControlCommand::DeleteAgentFiles { agent, .. } => {
                tracing::warn!(%agent, "a file deletion came on an agent's link; ignored");
            }
        }
    }

    fn start(&self, run: RunAssignment) {
        // Every tool process of this run is confined as the control plane says; a
        // task's run works in its own directory under the workspace.
        let sandbox = Sandbox::for_agent(run.agent.sandbox.clone(), &self.agent_dir);
        let workspace = match working_directory(&sandbox.workspace, run.workdir.as_deref())
            .and_then(|workspace| place_files(&workspace, &run.files).map(|()| workspace))
        {
            Ok(workspace) => workspace,
            Err(error) => {
                tracing::warn!(run_id = %run.run_id, %error, "run refused: its working directory cannot be used");
                self.sink.send(WorkerEvent::RunFailed {
                    run_id: run.run_id,
                    kind: chorus_proto::domain::FailureKind::Config,
                    error,
                });
                return;
            }
        };
        let cancel = CancellationToken::new();
        let run_tools = RunTools {
            agent: run.agent.offered.clone(),
            role: run.role_tools.clone(),
            mcp: Vec::new(),
        };
        let (agent_tx, agent_rx) = watch::channel(LiveAgent {
            model: ModelSelection {
                display: run.agent.model.clone(),
                route: run.model.clone(),
            },
            system_prompt: run.agent.system_prompt.clone(),
            tools: run_tools.offered(),
            docs_dir: Some(self.agent_dir.join("docs")),
            identity: run.agent.identity.clone(),
            memory: run.agent.memory.clone(),
            relevant: run.relevant.clone(),
        });
        let inbox = Inbox::default();
        self.board.join(
            &run.run_id,
            run.thread_id,
            &run.thread_summary,
            run.thread_started_at_ms,
        );
        // Changes from now on (the assignment already has the earlier ones).
        self.runs().insert(
            run.run_id.clone(),
            ActiveRun {
                cancel: cancel.clone(),
                agent: agent_tx,
                inbox: inbox.clone(),
                tools: run_tools,
            },
        );
        let board = self.board.clone();
        let gate = self.gate.clone();
        let mut config = self.tools.clone();
        config.bash.sandbox = Some(sandbox.clone());
        let place = crate::mcp::Place {
            sandbox: Some(sandbox.clone()),
            root: sandbox.workspace.clone(),
        };
        let tools = ToolBox::new(workspace, self.locks.clone())
            .with_jobs(self.background.clone())
            .with_config(config)
            .with_docs(Workspace::new(self.agent_dir.join("docs")))
            .with_mcp(self.mcp.clone(), place.clone());
        let mcp = self.mcp.clone();
        let sink = self.sink.clone();
        let clients = self.clients.clone();
        let runs = self.runs.clone();
        let backends = self.backends.clone();
        let span = tracing::info_span!(
            "run",
            agent = %run.agent.name,
            thread_id = run.thread_id,
            run_id = %run.run_id,
            model = %run.agent.model
        );
        crate::telemetry::continue_trace(&span, &run.trace_context);
        let (label_agent, label_thread) = (run.agent.name.clone(), run.thread_id);
        self.tasks.spawn(crate::telemetry::in_run(
            label_agent,
            label_thread,
            async move {
                crate::telemetry::label(
                    &tracing::Span::current(),
                    vec![
                        KeyValue::new("openinference.span.kind", "AGENT"),
                        KeyValue::new("gen_ai.operation.name", "invoke_agent"),
                        KeyValue::new("gen_ai.agent.name", run.agent.name.clone()),
                    ],
                );
                tracing::info!("run started");
                // The agent's MCP servers, started or connected (each within its
                // deadline): their tools join the run's offered ones, for either
                // backend, and are read again whenever a server says its list
                // changed, for as long as the run goes.
                let servers = RunServers {
                    run_id: run.run_id.clone(),
                    agent: run.agent.name.clone(),
                    servers: run.agent.mcp_servers.clone(),
                    reach: run.agent.mcp_reach.clone(),
                };
                let changes = mcp.changes();
                offer_mcp_tools(&mcp, &servers, &place, &runs).await;
                let _follower = (!servers.servers.is_empty()).then(|| {
                    tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
                        follow_mcp_changes(
                            mcp.clone(),
                            servers,
                            place.clone(),
                            runs.clone(),
                            changes,
                        )
                        .instrument(tracing::Span::current()),
                    ))
                });
                if run.backend != chorus_proto::domain::Backend::Api {
                    let outcome = cli_turn(
                        &run,
                        &backends,
                        sandbox,
                        CliParts {
                            gate: gate.clone(),
                            tools: tools.clone(),
                            relay: clients.clone(),
                            agent: agent_rx,
                            inbox: inbox.clone(),
                            board: board.clone(),
                        },
                        &sink,
                        &cancel,
                    )
                    .await;
                    finish(&run.run_id, &runs, &board, &inbox, &sink, outcome);
                    return;
                }
                let input = LoopInput {
                    run_id: &run.run_id,
                    messages: run.messages.clone(),
                    inputs: run.inputs.clone(),
                    inbox: inbox.clone(),
                    board: Some(board.clone()),
                    first_step_number: run.first_step_number,
                    max_iterations: if run.max_iterations == 0 {
                        DEFAULT_MAX_ITERATIONS
                    } else {
                        run.max_iterations
                    },
                    retry: run.retry,
                    agent: agent_rx,
                    resumed: run.resumed_call.clone(),
                };
                let outcome =
                    tool_loop::run(&clients, gate.as_ref(), &tools, input, &sink, &cancel).await;
                finish(&run.run_id, &runs, &board, &inbox, &sink, outcome);
            }
            .instrument(span),
        ));
    }

    /// Cancels every run and stops every background task, waiting up to `grace` for
    /// the runs to wind down.
    pub async fn cancel_all(&self, grace: Duration) {
        for run in self.runs().values() {
            run.cancel.cancel();
        }
        self.stopping.cancel();
        self.background.stop_all().await;
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("runs did not finish within {grace:?} of cancellation");
        }
        // After the runs: none of them is left waiting on a server.
        self.mcp.shutdown().await;
    }
}

/// How a run ended, whatever ran it: out of the runner's map and the board, what it
/// did not take left to the control plane, and `RunCompleted` or `RunFailed` sent.
fn finish(
    run_id: &str,
    runs: &Mutex<HashMap<String, ActiveRun>>,
    board: &Board,
    inbox: &Inbox,
    sink: &EventSink,
    outcome: Result<String, tool_loop::LoopError>,
) {
    runs.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(run_id);
    board.leave(run_id);
    // Out of the map, so nothing more arrives. What the run did not take is not
    // reported taken: the control plane runs it later.
    for input in inbox.take_all() {
        tracing::info!(
            message_id = input.message_id,
            "message arrived as the run ended; left to the control plane"
        );
    }
    match outcome {
        Ok(final_text) => {
            tracing::info!("run completed");
            sink.send(WorkerEvent::RunCompleted {
                run_id: run_id.to_string(),
                final_text,
            });
        }
        Err(e) => {
            if matches!(e, tool_loop::LoopError::Cancelled(_)) {
                // The control plane asked for it (a kill, a shutdown).
                tracing::info!(error = %e, "run cancelled");
            } else {
                tracing::warn!(error = %e, "run failed");
            }
            sink.send(WorkerEvent::RunFailed {
                run_id: run_id.to_string(),
                kind: e.kind(),
                error: e.to_string(),
            });
        }
    }
}

/// What a CLI turn shares with the runner.
struct CliParts {
    gate: Arc<RelayGate>,
    tools: ToolBox,
    relay: RelayClients,
    agent: watch::Receiver<LiveAgent>,
    inbox: Inbox,
    board: Arc<Board>,
}

/// A run whose backend is a CLI: the driver, with this build's flavor of it.
async fn cli_turn(
    run: &RunAssignment,
    backends: &crate::backends::probe::BackendPaths,
    sandbox: Sandbox,
    parts: CliParts,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<String, tool_loop::LoopError> {
    let Some(flavor) = crate::backends::flavor(run.backend) else {
        return Err(tool_loop::LoopError::Backend {
            kind: chorus_proto::domain::FailureKind::Config,
            message: format!(
                "this chorus-worker cannot drive the {} backend; upgrade chorus-worker",
                run.backend
            ),
        });
    };
    // A CLI too old to drive would fail in some other way once started (flags it
    // does not know, tools as text): refuse it at once, saying what to install.
    if let Some(why) = crate::backends::probe::refusal(run.backend, backends, flavor).await {
        return Err(tool_loop::LoopError::Backend {
            kind: chorus_proto::domain::FailureKind::Config,
            message: format!("{} cannot run: {why}", run.backend),
        });
    }
    let cwd = parts.tools.workspace().root().to_path_buf();
    let driven = crate::backends::driver::CliRun {
        flavor,
        paths: backends,
        run_id: &run.run_id,
        messages: run.messages.clone(),
        inputs: run.inputs.clone(),
        inbox: parts.inbox,
        session: run.cli_session.clone(),
        resumed: run.resumed_call.clone(),
        agent: parts.agent,
        first_step_number: run.first_step_number,
        board: Some(parts.board),
        root: sandbox.workspace.clone(),
        cwd,
        home: sandbox.home.clone(),
        tmp: sandbox.tmp.clone(),
        sandbox: Some(sandbox),
        gate: parts.gate,
        tools: parts.tools,
        relay: parts.relay,
        first_event_within: crate::backends::driver::FIRST_EVENT_WATCHDOG,
        max_model_calls: match run.max_iterations {
            0 => DEFAULT_MAX_ITERATIONS,
            cap => cap,
        },
    };
    crate::backends::driver::run(driven, sink, cancel).await
}

/// The jail of a run's file tools: the agent's workspace, or the run's working
/// directory under it (made if missing; `..`, absolute paths and symlinks refused).
/// The sandbox of its commands still allows the whole workspace.
fn working_directory(
    workspace: &std::path::Path,
    workdir: Option<&str>,
) -> Result<Workspace, String> {
    let whole = Workspace::new(workspace);
    match workdir {
        None => Ok(whole),
        Some(dir) => whole.within(dir).map_err(|e| {
            format!("the run's working directory cannot be used: {e}; the run did not start")
        }),
    }
}

/// Writes the files a run's working directory is given (a task's attachments) where
/// no file is yet, through the jail: what the agent changed since stays.
fn place_files(
    workspace: &Workspace,
    files: &[chorus_proto::domain::TemplateFile],
) -> Result<(), String> {
    use crate::tools::jail::{JailError, WriteMode};
    for file in files {
        if file.path.contains('/') || file.path.contains('\\') {
            return Err(format!(
                "the file '{}' given to the run is not a plain name; the run did not start",
                file.path
            ));
        }
        match workspace.write_as(&file.path, &file.content, WriteMode::CreateNew) {
            Ok(_) | Err(JailError::Exists(_)) => {}
            Err(e) => {
                return Err(format!(
                    "the file '{}' cannot be put in the run's working directory: {e}; the run did not start",
                    file.path
                ));
            }
        }
    }
    Ok(())
}

/// What a run needs of its agent's MCP servers.
struct RunServers {
    run_id: String,
    agent: String,
    servers: Vec<chorus_proto::mcp::McpServer>,
    reach: chorus_proto::mcp::McpReach,
}

/// Reads the agent's MCP servers' tools (connecting the servers that are down) and
/// offers those the run's profile can reach: a tool it always denies is not offered,
/// since its call would be refused anyway; every call is still decided by the gate.
async fn offer_mcp_tools(
    mcp: &crate::mcp::McpHub,
    run: &RunServers,
    place: &crate::mcp::Place,
    runs: &Mutex<HashMap<String, ActiveRun>>,
) {
    if run.servers.is_empty() {
        return;
    }
    let mut tools = mcp.prepare(&run.agent, &run.servers, place).await;
    tools.retain(|tool| run.reach.reaches(&tool.name));
    if let Some(active) = runs
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get_mut(&run.run_id)
    {
        active.offer_mcp(tools);
    }
}

/// For the length of a run (the caller aborts it at the end): each change a server
/// announces to its tool list is read and offered from the run's next model call.
async fn follow_mcp_changes(
    mcp: Arc<crate::mcp::McpHub>,
    run: RunServers,
    place: crate::mcp::Place,
    runs: Arc<Mutex<HashMap<String, ActiveRun>>>,
    mut changes: watch::Receiver<u64>,
) {
    while changes.changed().await.is_ok() {
        tracing::info!("an MCP server's tool list changed; reading it again");
        offer_mcp_tools(&mcp, &run, &place, &runs).await;
    }
}

/// Applies a change to what a run knows of its agent, but its tools (the runner
/// composes those, `RunTools`).
fn apply(agent: &mut LiveAgent, change: AgentChange) {
    if let Some((display, route)) = change.model {
        agent.model = ModelSelection { display, route };
    }
    if let Some(prompt) = change.system_prompt {
        agent.system_prompt = prompt;
    }
    if let Some(identity) = change.identity {
        agent.identity = identity;
    }
    if let Some(memory) = change.memory {
        agent.memory = memory;
    }
}

#[cfg(test)]
mod tests {
    use chorus_proto::domain::FailureKind;

    use crate::model::ModelError;
    use crate::outbound::TooLarge;
    use crate::tool_loop::LoopError;

    #[test]
    fn every_way_a_run_fails_is_sent_with_its_kind() {
        let cases = [
            (
                LoopError::Model(ModelError::Fatal("401 bad key".into())),
                FailureKind::ModelError,
            ),
            (
                LoopError::Model(ModelError::ContextLength("too long".into())),
                FailureKind::ModelError,
            ),
            (
                LoopError::Model(ModelError::retryable("503")),
                FailureKind::ModelError,
            ),
            (
                LoopError::GaveUp {
                    attempts: 3,
                    elapsed: std::time::Duration::from_secs(1),
                    last: "503".into(),
                },
                FailureKind::ModelError,
            ),
            (
                LoopError::Model(ModelError::TooLarge("reply exceeded 16 MiB".into())),
                FailureKind::Limit,
            ),
            (LoopError::CutOff { continuations: 3 }, FailureKind::Limit),
            (
                LoopError::BadOutput {
                    count: 3,
                    last: "a call to no tool".into(),
                },
                FailureKind::BadOutput,
            ),
            (LoopError::IterationCap(50), FailureKind::Limit),
            (
                LoopError::TooLarge(TooLarge {
                    what: "the model's reply",
                    len: 40 << 20,
                }),
                FailureKind::Limit,
            ),
            (
                LoopError::Cancelled("the run was cancelled".into()),
                FailureKind::Cancelled,
            ),
        ];
        for (error, kind) in cases {
            assert_eq!(error.kind(), kind, "{error}");
        }
    }
}
