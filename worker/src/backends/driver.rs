//! Runs one turn of a thread with a CLI (design step 3): checks the model's wire
//! format against the flavor, finds the CLI, opens the run endpoint, launches the CLI
//! in the tool sandbox, and turns its stream into the worker's events:
//!
//! - `Session` → `CliSessionStarted` (once per run); `Init` → the `chorus` MCP server
//!   must be connected and the CLI's tools exactly the offered ones, else the CLI is
//!   killed and the run fails (`config`, naming the difference);
//! - `ModelCallStarted`/`TextDelta`/`ModelCallEnded` → an LLM step with its text and
//!   usage; `Assistant` and `ToolResult` → `MessageAppended` (results capped like the
//!   loop's); `Final` → the run's final text; `Error` → kept for `classify`.
//!
//! Tool steps come from the endpoint (same step counter). No line within the first
//! event watchdog → killed, `internal`. Cancel → the whole group killed. Messages
//! injected while the CLI runs wait until it exits; then another CLI turn resumes the
//! same session with them (each reported `InputTaken` as it is handed over), unless
//! the turn was ended by a finishing tool (what is left goes back to the control
//! plane, as in the loop). Returns what the tool loop returns, so `RunCompleted` and
//! `RunFailed` stay one path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::domain::{
    ChatMessage, CliSession, FailureKind, Input, ResumedCall, Role, StepKind, ToolCall, WorkerEvent,
};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::endpoint::{RunEndpoint, RunTools};
use super::flavor::{CliEvent, CliFailure, ExitReport, Flavor, LaunchSpec};
use super::probe::{self, BackendPaths};
use super::spawn::{CliProcess, SpawnSpec, extra_for};
use crate::awareness::Board;
use crate::events::EventSink;
use crate::gate::ToolGate;
use crate::model::relay::RelayClients;
use crate::tool_loop::pipeline::Pipeline;
use crate::tool_loop::{Inbox, LiveAgent, LoopError, ModelSelection, OpenStep, Steps};
use crate::tools::ToolBox;
use crate::tools::sandbox::Sandbox;

/// A CLI that prints nothing this long after it starts is stopped.
pub const FIRST_EVENT_WATCHDOG: Duration = Duration::from_secs(60);

/// One run of a CLI backend.
pub struct CliRun<'a, G> {
    pub flavor: &'a dyn Flavor,
    pub paths: &'a BackendPaths,
    pub run_id: &'a str,
    /// The thread so far (context for a CLI with no session to go on from).
    pub messages: Vec<ChatMessage>,
    /// User messages no model has seen yet (the assignment's).
    pub inputs: Vec<Input>,
    pub inbox: Inbox,
    pub session: Option<CliSession>,
    /// A call deferred for a person's approval, now answered: carried out (or
    /// refused) before the CLI starts, and the session told how it went.
    pub resumed: Option<ResumedCall>,
    pub agent: watch::Receiver<LiveAgent>,
    pub first_step_number: u32,
    pub board: Option<Arc<Board>>,
    /// `None`: unconfined (only where the caller decided so).
    pub sandbox: Option<Sandbox>,
    /// The workspace, the CLI's working directory (the workspace or the task's
    /// directory in it), and the agent's private home and temp dir.
    pub root: PathBuf,
    pub cwd: PathBuf,
    pub home: PathBuf,
    pub tmp: PathBuf,
    pub gate: Arc<G>,
    pub tools: ToolBox,
    pub relay: RelayClients,
    /// [`FIRST_EVENT_WATCHDOG`] but in tests.
    pub first_event_within: Duration,
    /// Model calls the run may make, over all its CLI turns (the iteration cap).
    pub max_model_calls: u32,
}

fn failed(kind: FailureKind, message: impl Into<String>) -> LoopError {
    LoopError::Backend {
        kind,
        message: message.into(),
    }
}

/// The model's wire format must be the one the CLI speaks. Pure.
pub fn check_model(model: &ModelSelection, flavor: &dyn Flavor) -> Result<(), String> {
    if model.route.api == flavor.model_api() {
        return Ok(());
    }
    let backend = flavor.backend();
    Err(format!(
        "{backend} speaks {} to its model, and the model {} (provider '{}') speaks {}; \
         give the agent a model of a provider that speaks {} (e.g. {}), or use the api backend",
        flavor.model_api(),
        model.display,
        model.route.provider,
        model.route.api,
        flavor.model_api(),
        match flavor.model_api() {
            chorus_proto::domain::ModelRoute::ANTHROPIC_MESSAGES => "anthropic/…",
            _ => "openai/…, ollama/… or openrouter/…",
        }
    ))
}

/// What a CLI with no session is told: the thread so far as context, then the new
/// messages. With a session, only the new messages (the CLI has the rest). Pure.
pub fn prompt(history: Option<&[ChatMessage]>, new: &[Input]) -> String {
    let mut text = String::new();
    if let Some(history) = history.filter(|h| !h.is_empty()) {
        text.push_str("The conversation so far (for context):\n<conversation>\n");
        for message in history {
            let who = match message.role {
                Role::System => "system".to_string(),
                Role::User => "user".to_string(),
                Role::Assistant => "assistant".to_string(),
                Role::Tool => format!(
                    "tool result ({})",
                    message.tool_name.as_deref().unwrap_or("tool")
                ),
            };
            text.push_str(&format!("[{who}]\n{}\n", message.content));
            for call in &message.tool_calls {
                text.push_str(&format!("(called {} with {})\n", call.name, call.arguments));
            }
        }
        text.push_str("</conversation>\n\n");
    }
    let new: Vec<&str> = new.iter().map(|i| i.content.as_str()).collect();
    text.push_str(&new.join("\n\n"));
    text
}

/// Writes a launch's files, mode 0600.
fn write_files(files: &[(PathBuf, String)]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    for (path, content) in files {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(path)?;
        file.write_all(content.as_bytes())?;
    }
    Ok(())
}

/// Runs the turn; returns the final text.
pub async fn run<G: ToolGate + 'static>(
    run: CliRun<'_, G>,
    sink: &EventSink,
    cancel: &CancellationToken,
) -> Result<String, LoopError> {
    let flavor = run.flavor;
    let backend = flavor.backend();
    let live = run.agent.borrow().clone();
    check_model(&live.model, flavor).map_err(|m| failed(FailureKind::Config, m))?;
    let path_var = std::env::var_os("PATH");
    let program = probe::locate(backend, run.paths.given(backend), path_var.as_deref())
        .map_err(|why| failed(FailureKind::Config, format!("{backend} cannot run: {why}")))?;
    let chorus_tools = run.paths.chorus_tools();
    if !chorus_tools.is_file() {
        return Err(failed(
            FailureKind::Config,
            format!(
                "{backend} needs chorus-tools for Chorus's tools, and there is none at {}; \
                 install it beside chorus-worker or name it with --chorus-tools",
                chorus_tools.display()
            ),
        ));
    }
    let steps = Steps::new(
        run.run_id,
        run.first_step_number,
        sink.clone(),
        run.board.clone(),
    );
    let calls = Arc::new(super::calls::CallIds::default());
    let endpoint = RunEndpoint::open(RunTools {
        gate: run.gate.clone(),
        tools: run.tools.clone(),
        agent: run.agent.clone(),
        steps: steps.clone(),
        cancel: cancel.clone(),
        relay: run.relay.clone(),
        calls: calls.clone(),
        max_model_calls: run.max_model_calls,
    })
    .await
    .map_err(|e| {
        failed(
            FailureKind::Internal,
            format!("cannot open the run's endpoint for {backend}: {e}"),
        )
    })?;
    let mut driver = Driver {
        run: &run,
        program: &program,
        chorus_tools: &chorus_tools,
        endpoint: &endpoint,
        steps,
        sink,
        cancel,
        transcript: run.messages.clone(),
        session: run.session.clone(),
        reported_session: None,
        calls,
    };
    let outcome = driver.turns().await;
    endpoint.close().await;
    outcome
}

struct Driver<'r, 'a, G> {
    run: &'r CliRun<'a, G>,
    program: &'r Path,
    chorus_tools: &'r Path,
    endpoint: &'r RunEndpoint,
    steps: Steps,
    sink: &'r EventSink,
    cancel: &'r CancellationToken,
    /// The thread as far as this run knows it (context for a CLI with no session).
    transcript: Vec<ChatMessage>,
    session: Option<CliSession>,
    reported_session: Option<String>,
    calls: Arc<super::calls::CallIds>,
}

/// What one CLI turn left behind.
#[derive(Default)]
struct Turn {
    open: Option<OpenStep>,
    last_text: String,
    final_text: Option<String>,
    saw_final: bool,
    final_is_error: bool,
    last_error: Option<String>,
    malformed: u32,
    /// Tool names of the calls seen, by call id (for their results' messages).
    calls: HashMap<String, String>,
    /// Whether the model called a tool in this turn.
    acted: bool,
}

impl<G: ToolGate + 'static> Driver<'_, '_, G> {
    async fn turns(&mut self) -> Result<String, LoopError> {
        // The user messages the thread ends with (the request, a reply that continues
        // an ended thread, a task's answer) are this turn's prompt, like the
        // assignment's inputs after them; what precedes them is context for a CLI
        // with no session, and already in a session being resumed or forked.
        let unseen = unseen_tail(&self.transcript);
        let mut pending: Vec<Input> = self
            .transcript
            .drain(self.transcript.len() - unseen..)
            .map(|message| Input {
                message_id: ALREADY_STORED,
                content: message.content,
            })
            .chain(self.run.inputs.iter().cloned())
            .collect();
        if let Some(resumed) = &self.run.resumed {
            let note = self.resume(resumed).await?;
            pending.insert(
                0,
                Input {
                    message_id: ALREADY_STORED,
                    content: note,
                },
            );
        }
        let mut docs = crate::context::Docs::default();
        // Inputs reported taken (a turn started again must not report them twice).
        let mut reported = std::collections::HashSet::new();
        loop {
            let mut this_turn: Vec<Input> = Vec::new();
            pending.extend(self.run.inbox.take_all());
            let live = self.run.agent.borrow().clone();
            check_model(&live.model, self.run.flavor)
                .map_err(|m| failed(FailureKind::Config, m))?;
            let history = (self.session.is_none()).then_some(self.transcript.as_slice());
            let prompt = prompt(history, &pending);
            let taken = pending.len();
            for input in pending.drain(..) {
                self.transcript
                    .push(ChatMessage::user(input.content.clone()));
                if input.message_id != ALREADY_STORED && reported.insert(input.message_id) {
                    self.sink.send(WorkerEvent::InputTaken {
                        run_id: self.run.run_id.to_string(),
                        message_id: input.message_id,
                    });
                }
                this_turn.push(input);
            }
            let mut instructions = docs.compose(live.prompt_parts());
            if let Some(block) = self
                .run
                .board
                .as_ref()
                .and_then(|b| b.prompt_block(self.run.run_id))
            {
                instructions.push_str("\n\n");
                instructions.push_str(&block);
            }
            let tools: Vec<String> = live.tools.iter().map(|t| t.wire_name.clone()).collect();
            let launch = self.run.flavor.launch(&LaunchSpec {
                program: self.program,
                cwd: &self.run.cwd,
                home: &self.run.home,
                tmp: &self.run.tmp,
                model: &live.model.route.model,
                endpoint: &self.endpoint.url,
                token: &self.endpoint.token,
                chorus_tools: self.chorus_tools,
                tools: &tools,
                instructions: &instructions,
                prompt: &prompt,
                session: self.session.as_ref(),
            });
            write_files(&launch.files).map_err(|e| {
                failed(
                    FailureKind::Internal,
                    format!("cannot write the CLI's configuration in the agent's tmp: {e}"),
                )
            })?;
            let mut extra = extra_for(self.program, self.endpoint.port);
            // `chorus-tools mcp` runs as the CLI's child, in the same sandbox, from
            // wherever this worker found it (often beside the worker, outside the
            // system's directories): that one file is readable and executable.
            if let Ok(tools) = std::fs::canonicalize(self.chorus_tools) {
                extra.read_only.push(tools);
            }
            let cli = CliProcess::spawn(SpawnSpec {
                program: self.program,
                args: &launch.args,
                env: &launch.env,
                root: &self.run.root,
                cwd: &self.run.cwd,
                sandbox: self.run.sandbox.as_ref(),
                extra,
                stdin: launch.stdin.as_deref(),
            })
            .await
            .map_err(|e| failed(FailureKind::Config, e))?;
            let text = match self.turn(cli, &live, &tools).await {
                Err(TurnError::SessionLost) => {
                    // The CLI no longer has the session (its store was cleared, or a
                    // restored home): the same turn again in a new session, with the
                    // thread's messages as context.
                    let lost = self.session.take().map(|s| s.id).unwrap_or_default();
                    let step = self.steps.begin(
                        StepKind::Wait,
                        format!(
                            "Starting a new {} session: session {lost} is no longer in its store, \
                             so the thread's messages go in as context",
                            self.run.flavor.backend()
                        ),
                    );
                    self.steps.end(step, false, None);
                    self.transcript
                        .truncate(self.transcript.len().saturating_sub(taken));
                    pending = this_turn;
                    continue;
                }
                Err(TurnError::Failed(e)) => return Err(e),
                Ok(text) => text,
            };
            // Like the tool loop at its iteration cap: the run fails as `limit`.
            if self.endpoint.over_limit() {
                return Err(LoopError::IterationCap(self.run.max_model_calls));
            }
            if self.endpoint.turn_ended() || self.run.inbox.is_empty() {
                return Ok(text);
            }
        }
    }

    /// Carries out the answered call through the pipeline (a step like any call)
    /// and says how it went, for the CLI's next prompt.
    async fn resume(&self, resumed: &ResumedCall) -> Result<String, LoopError> {
        let offered = self.run.agent.borrow().tools.clone();
        let pipeline = Pipeline {
            gate: self.run.gate.as_ref(),
            tools: &self.run.tools,
            offered: &offered,
            run_id: self.run.run_id,
            sink: self.sink,
            cancel: self.cancel,
        };
        let outcome = pipeline.resume(resumed, &self.steps).await?;
        Ok(crate::tool_loop::pipeline::resumed_note(resumed, &outcome))
    }

    /// One CLI process, from start to exit.
    async fn turn(
        &mut self,
        mut cli: CliProcess,
        live: &LiveAgent,
        offered: &[String],
    ) -> Result<String, TurnError> {
        let backend = self.run.flavor.backend();
        let mut parser = self.run.flavor.parser();
        let mut turn = Turn::default();
        let mut any_line = false;
        loop {
            let next = tokio::select! {
                line = cli.next_line() => Ok(line),
                () = tokio::time::sleep(self.run.first_event_within), if !any_line => Err(()),
                // Some CLIs retry a rate-limited call forever without a word.
                why = self.endpoint.rate_limited() => {
                    cli.kill();
                    let _ = cli.wait().await;
                    self.close_step(&mut turn, true, None);
                    return Err(TurnError::Failed(failed(
                        FailureKind::ModelError,
                        format!(
                            "the provider kept rate-limiting {backend}'s model calls ({why}), \
                             so the CLI was stopped: wait a while and send the message again"
                        ),
                    )));
                }
                () = self.cancel.cancelled() => {
                    cli.kill();
                    let _ = cli.wait().await;
                    self.close_step(&mut turn, true, None);
                    return Err(LoopError::Cancelled("the run was cancelled".into()).into());
                }
            };
            let line = match next {
                Ok(Some(line)) => line,
                Ok(None) => break,
                Err(()) => {
                    cli.kill();
                    let ended = cli.wait().await;
                    return Err(TurnError::Failed(failed(
                        FailureKind::Internal,
                        format!(
                            "the CLI ({backend}) printed nothing for {} s after it started and was stopped{}",
                            self.run.first_event_within.as_secs(),
                            stderr_note(&ended.stderr_tail)
                        ),
                    )));
                }
            };
            any_line = true;
            match parser.line(&line) {
                Ok(events) => {
                    for event in events {
                        if let Err(e) = self.event(event, &mut turn, live, offered) {
                            cli.kill();
                            let _ = cli.wait().await;
                            self.close_step(&mut turn, true, None);
                            return Err(e.into());
                        }
                    }
                }
                Err(why) => {
                    turn.malformed += 1;
                    turn.last_error = Some(why);
                }
            }
        }
        for event in parser.finish() {
            if let Err(e) = self.event(event, &mut turn, live, offered) {
                cli.kill();
                let _ = cli.wait().await;
                self.close_step(&mut turn, true, None);
                return Err(e.into());
            }
        }
        let ended = cli.wait().await;
        let report = ExitReport {
            code: ended.code,
            signal: ended.signal,
            stderr_tail: ended.stderr_tail,
            saw_final: turn.saw_final,
            final_is_error: turn.final_is_error,
            last_error: turn.last_error.clone(),
            malformed_lines: turn.malformed,
        };
        let classified = self.run.flavor.classify(&report);
        self.close_step(&mut turn, classified.is_some(), None);
        if let Some(classified) = classified {
            // Only a session this run was given can be lost, and only before the
            // CLI did anything in it (else the turn's effects would be repeated).
            if classified.cause == CliFailure::UnknownSession
                && self.session.is_some()
                && !turn.acted
            {
                return Err(TurnError::SessionLost);
            }
            return Err(TurnError::Failed(failed(
                classified.kind,
                classified.message,
            )));
        }
        let final_text = turn.final_text.unwrap_or_default();
        Ok(if final_text.trim().is_empty() {
            turn.last_text
        } else {
            final_text
        })
    }

    fn close_step(
        &self,
        turn: &mut Turn,
        failed: bool,
        usage: Option<chorus_proto::domain::Usage>,
    ) {
        if let Some(step) = turn.open.take() {
            self.steps.end(step, failed, usage);
        }
    }

    fn emit(&mut self, message: ChatMessage) -> Result<(), LoopError> {
        self.sink
            .try_send(WorkerEvent::MessageAppended {
                run_id: self.run.run_id.to_string(),
                message: message.clone(),
            })
            .map_err(LoopError::TooLarge)?;
        self.transcript.push(message);
        Ok(())
    }

    fn event(
        &mut self,
        event: CliEvent,
        turn: &mut Turn,
        live: &LiveAgent,
        offered: &[String],
    ) -> Result<(), LoopError> {
        match event {
            CliEvent::Session { id } => {
                if self.reported_session.as_deref() != Some(id.as_str()) {
                    if self.reported_session.is_none() {
                        self.sink.send(WorkerEvent::CliSessionStarted {
                            run_id: self.run.run_id.to_string(),
                            session_id: id.clone(),
                        });
                    }
                    self.reported_session = Some(id.clone());
                }
                // Later turns of this run go on from it.
                self.session = Some(CliSession { id, fork: false });
            }
            CliEvent::Init {
                tools,
                mcp_connected,
            } => {
                if let Some(problem) = init_problem(&tools, mcp_connected, offered) {
                    return Err(failed(FailureKind::Config, problem));
                }
            }
            CliEvent::ModelCallStarted => {
                self.close_step(turn, false, None);
                turn.open = Some(self.steps.begin(
                    StepKind::LlmCall,
                    format!("Calling LLM ({})", live.model.display),
                ));
            }
            CliEvent::TextDelta(text) => {
                if let Some(step) = &turn.open {
                    self.sink.send(WorkerEvent::TextDelta {
                        run_id: self.run.run_id.to_string(),
                        step: step.number(),
                        text,
                    });
                }
            }
            CliEvent::ModelCallEnded { usage } => self.close_step(turn, false, usage),
            CliEvent::Assistant { text, tool_calls } => {
                turn.acted |= !tool_calls.is_empty();
                let tool_calls: Vec<ToolCall> = tool_calls
                    .into_iter()
                    .map(|call| ToolCall {
                        id: self.calls.for_stream(&call.id, &call.name, &call.arguments),
                        ..call
                    })
                    .collect();
                for call in &tool_calls {
                    turn.calls.insert(call.id.clone(), call.name.clone());
                }
                if !text.trim().is_empty() {
                    turn.last_text = text.clone();
                }
                self.emit(ChatMessage::assistant(text, tool_calls))?;
            }
            CliEvent::ToolResult {
                call_id,
                content,
                is_error,
            } => {
                let call_id = self.calls.of(&call_id);
                let call = ToolCall {
                    name: turn.calls.get(&call_id).cloned().unwrap_or_default(),
                    id: call_id,
                    arguments: String::new(),
                };
                let content = crate::outbound::cap_tool_result(content);
                self.emit(ChatMessage::tool_result(&call, content, is_error))?;
            }
            CliEvent::Final {
                text,
                is_error,
                usage,
            } => {
                self.close_step(turn, is_error, usage);
                turn.saw_final = true;
                turn.final_is_error = is_error;
                if !is_error {
                    // The thread's answer, when no assistant message carried it.
                    if turn.last_text.trim().is_empty() && !text.trim().is_empty() {
                        self.emit(ChatMessage::assistant(text.clone(), Vec::new()))?;
                    }
                    turn.final_text = Some(text);
                } else {
                    turn.last_error = Some(text);
                }
            }
            CliEvent::Error { message } => turn.last_error = Some(message),
        }
        Ok(())
    }
}

/// Why the CLI's start-up report does not do: the MCP server missing, or tools other
/// than those offered (by wire name). Pure.
pub fn init_problem(tools: &[String], mcp_connected: bool, offered: &[String]) -> Option<String> {
    if !mcp_connected {
        return Some(
            "the CLI started without its chorus MCP server (chorus-tools mcp), so it has none of \
             Chorus's tools; check that chorus-tools runs on this worker (chorus-tools list)"
                .into(),
        );
    }
    let extra: Vec<&str> = tools
        .iter()
        .filter(|t| !offered.contains(t))
        .map(String::as_str)
        .collect();
    let missing: Vec<&str> = offered
        .iter()
        .filter(|t| !tools.contains(t))
        .map(String::as_str)
        .collect();
    if extra.is_empty() && missing.is_empty() {
        return None;
    }
    let mut parts = Vec::new();
    if !extra.is_empty() {
        parts.push(format!(
            "it offers tools Chorus did not: {}",
            extra.join(", ")
        ));
    }
    if !missing.is_empty() {
        parts.push(format!("it lacks offered tools: {}", missing.join(", ")));
    }
    Some(format!(
        "the CLI's tools are not the agent's ({}); the run was stopped",
        parts.join("; ")
    ))
}

fn stderr_note(tail: &str) -> String {
    let tail = tail.trim();
    if tail.is_empty() {
        String::new()
    } else {
        let start = tail
            .char_indices()
            .rev()
            .nth(500)
            .map(|(i, _)| i)
            .unwrap_or(0);
        format!("; its stderr ended with: {}", &tail[start..])
    }
}

/// The id given to a user message that is already in the thread (no `InputTaken`).
const ALREADY_STORED: u64 = 0;

/// How many user messages the thread ends with. Pure.
fn unseen_tail(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .rev()
        .take_while(|m| m.role == Role::User)
        .count()
}

/// Why one CLI process's turn did not give a text.
enum TurnError {
    /// The session to go on from is not in the CLI's store: start a new one.
    SessionLost,
    Failed(LoopError),
}

impl From<LoopError> for TurnError {
    fn from(e: LoopError) -> Self {
        TurnError::Failed(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_carries_the_thread_only_without_a_session() {
        let history = vec![
            ChatMessage::user("write a.txt"),
            ChatMessage::assistant("done", Vec::new()),
        ];
        let new = vec![Input {
            message_id: 3,
            content: "now b.txt".into(),
        }];
        let fresh = prompt(Some(&history), &new);
        assert!(fresh.contains("[user]\nwrite a.txt"), "{fresh}");
        assert!(fresh.contains("[assistant]\ndone"), "{fresh}");
        assert!(fresh.ends_with("now b.txt"), "{fresh}");
        assert_eq!(prompt(None, &new), "now b.txt");
    }

    #[test]
    fn the_init_report_must_show_the_mcp_server_and_exactly_the_offered_tools() {
        let offered = vec!["file_read".to_string(), "bash".to_string()];
        assert_eq!(init_problem(&offered, true, &offered), None);
        assert!(
            init_problem(&offered, false, &offered)
                .unwrap()
                .contains("without its chorus MCP server")
        );
        let problem = init_problem(
            &["file_read".to_string(), "WebFetch".to_string()],
            true,
            &offered,
        )
        .unwrap();
        assert!(
            problem.contains("offers tools Chorus did not: WebFetch"),
            "{problem}"
        );
        assert!(problem.contains("lacks offered tools: bash"), "{problem}");
    }
}
