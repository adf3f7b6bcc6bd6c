//! The runs of one worker: each assigned run is a task running the tool loop; the
//! runner starts them, cancels them, switches their model, and reports how each ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chorus_proto::domain::{ControlCommand, RunAssignment, WorkerEvent};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::model::relay::RelayClients;
use crate::tool_loop::{self, EventSink, LoopInput, ModelSelection};
use crate::tools::ToolBox;
use crate::tools::jail::Workspace;
use crate::tools::locks::FileLocks;

/// Used when an assignment leaves the iteration cap to the worker.
const DEFAULT_MAX_ITERATIONS: u32 = 50;

pub struct Runner {
    sink: EventSink,
    clients: RelayClients,
    runs: Arc<Mutex<HashMap<String, CancellationToken>>>,
    /// The agent's model when it changes mid-run (SetModel); runs watch it.
    model_change: watch::Sender<Option<ModelSelection>>,
    /// One set of file locks for all runs: two threads of the agent writing the
    /// same file take turns.
    locks: Arc<FileLocks>,
    tasks: TaskTracker,
}

impl Runner {
    /// `control_plane` is the base URL of the control plane (model requests go to its
    /// relay); `credential` is this worker's, which the relay accepts.
    pub fn new(sink: EventSink, control_plane: &str, credential: &str) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            // A stream may run long, but a silent one is dead.
            .read_timeout(Duration::from_secs(300))
            .build()
            .unwrap_or_default();
        Runner {
            sink,
            clients: RelayClients::new(http, control_plane, credential),
            runs: Arc::new(Mutex::new(HashMap::new())),
            model_change: watch::Sender::new(None),
            locks: Arc::new(FileLocks::default()),
            tasks: TaskTracker::new(),
        }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<String, CancellationToken>> {
        self.runs.lock().unwrap_or_else(|e| e.into_inner())
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
                if let Some(token) = self.runs().get(&run_id) {
                    tracing::info!(%run_id, %reason, "cancelling run");
                    token.cancel();
                }
            }
            ControlCommand::SetModel { model, route } => {
                tracing::info!(%model, provider = %route.provider, "model changed");
                self.model_change.send_replace(Some(ModelSelection {
                    display: model,
                    route,
                }));
            }
            ControlCommand::InjectMessage { run_id, .. } => {
                tracing::warn!(%run_id, "message injection into a running run is not supported by this worker yet");
            }
            ControlCommand::Welcome { .. } | ControlCommand::Shutdown { .. } => {}
        }
    }

    fn start(&self, run: RunAssignment) {
        let cancel = CancellationToken::new();
        self.runs().insert(run.run_id.clone(), cancel.clone());
        let (model_tx, model_rx) = watch::channel(ModelSelection {
            display: run.agent.model.clone(),
            route: run.model.clone(),
        });
        // Forward later model changes (not earlier ones: the assignment is newer).
        let mut changes = self.model_change.subscribe();
        changes.mark_unchanged();
        let tools = ToolBox::new(Workspace::new(&run.agent.workspace), self.locks.clone());
        let sink = self.sink.clone();
        let clients = self.clients.clone();
        let runs = self.runs.clone();
        let span = tracing::info_span!(
            "run",
            agent = %run.agent.name,
            thread_id = run.thread_id,
            run_id = %run.run_id,
            model = %run.agent.model
        );
        self.tasks.spawn(
            async move {
                tracing::info!("run started");
                let forward = async {
                    while changes.changed().await.is_ok() {
                        if let Some(selection) = changes.borrow_and_update().clone() {
                            model_tx.send_replace(selection);
                        }
                    }
                };
                let input = LoopInput {
                    run_id: &run.run_id,
                    system_prompt: &run.agent.system_prompt,
                    messages: run.messages.clone(),
                    first_step_number: run.first_step_number,
                    max_iterations: if run.max_iterations == 0 {
                        DEFAULT_MAX_ITERATIONS
                    } else {
                        run.max_iterations
                    },
                    retry: run.retry,
                    model: model_rx,
                };
                let outcome = tokio::select! {
                    outcome = tool_loop::run(&clients, &tools, input, &sink, &cancel) => outcome,
                    _ = forward => unreachable_forward(),
                };
                runs.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .remove(&run.run_id);
                match outcome {
                    Ok(final_text) => {
                        tracing::info!("run completed");
                        sink.send(WorkerEvent::RunCompleted {
                            run_id: run.run_id.clone(),
                            final_text,
                        });
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "run failed");
                        sink.send(WorkerEvent::RunFailed {
                            run_id: run.run_id.clone(),
                            error: e.to_string(),
                        });
                    }
                }
            }
            .instrument(span),
        );
    }

    /// Cancels every run and waits up to `grace` for them to wind down.
    pub async fn cancel_all(&self, grace: Duration) {
        for token in self.runs().values() {
            token.cancel();
        }
        self.tasks.close();
        if tokio::time::timeout(grace, self.tasks.wait())
            .await
            .is_err()
        {
            tracing::warn!("runs did not finish within {grace:?} of cancellation");
        }
    }
}

/// The model-change forwarder ends only when the runner is dropped, which cannot
/// happen while a run holds it; if it does, the run simply ends cancelled.
fn unreachable_forward() -> Result<String, tool_loop::LoopError> {
    Err(tool_loop::LoopError::Cancelled(
        "the worker is shutting down".into(),
    ))
}
