//! The runs of one worker: each assigned run is a task running the tool loop; the
//! runner starts them, cancels them, and reports how each ended.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chorus_proto::domain::{ControlCommand, ModelRoute, RunAssignment, WorkerEvent};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::model::openai::OpenAiClient;
use crate::tool_loop::{self, EventSink, LoopInput};
use crate::tools::ToolBox;
use crate::tools::jail::Workspace;

/// Used when an assignment leaves the iteration cap to the worker.
const DEFAULT_MAX_ITERATIONS: u32 = 50;

pub struct Runner {
    sink: EventSink,
    /// The control plane's base URL; model requests go to its relay.
    control_plane: String,
    /// This worker's credential, which the relay accepts in place of a provider key.
    credential: String,
    http: reqwest::Client,
    runs: Arc<Mutex<HashMap<String, CancellationToken>>>,
    tasks: TaskTracker,
}

impl Runner {
    pub fn new(sink: EventSink, control_plane: String, credential: String) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(Duration::from_secs(600))
            .build()
            .unwrap_or_default();
        Runner {
            sink,
            control_plane: control_plane.trim_end_matches('/').to_string(),
            credential,
            http,
            runs: Arc::new(Mutex::new(HashMap::new())),
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
            ControlCommand::InjectMessage { run_id, .. } => {
                tracing::warn!(%run_id, "message injection into a running run is not supported by this worker yet");
            }
            ControlCommand::Welcome { .. } | ControlCommand::Shutdown { .. } => {}
        }
    }

    fn start(&self, run: RunAssignment) {
        let run_id = run.run_id.clone();
        if run.model.api != ModelRoute::OPENAI_CHAT {
            self.sink.send(WorkerEvent::RunFailed {
                run_id,
                error: format!(
                    "this worker cannot speak the '{}' model API; upgrade chorus-worker",
                    run.model.api
                ),
            });
            return;
        }
        let cancel = CancellationToken::new();
        self.runs().insert(run_id.clone(), cancel.clone());
        let model = OpenAiClient::new(
            self.http.clone(),
            format!("{}{}", self.control_plane, run.model.relay_path),
            self.credential.clone(),
            run.model.provider.clone(),
        );
        let tools = ToolBox::new(Workspace::new(&run.agent.workspace));
        let sink = self.sink.clone();
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
                let input = LoopInput {
                    run_id: &run.run_id,
                    model: &run.agent.model,
                    system_prompt: &run.agent.system_prompt,
                    messages: run.messages.clone(),
                    first_step_number: run.first_step_number,
                    max_iterations: if run.max_iterations == 0 {
                        DEFAULT_MAX_ITERATIONS
                    } else {
                        run.max_iterations
                    },
                };
                let outcome = tool_loop::run(&model, &tools, input, &sink, &cancel).await;
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
