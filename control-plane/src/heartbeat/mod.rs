//! Heartbeats (issue 30, J5): per agent, off by default, every `heartbeat_minutes`
//! the agent reads its `HEARTBEAT.md`; an answer that begins or ends with
//! `HEARTBEAT_OK` is recorded quietly, anything else is posted as a notification in
//! the feed (which Discord posts in the agent's channel).
//!
//! **Pure parts**: [`decide`] (is the file empty, may the model be called, the prompt,
//! what an answer means, the next time). **I/O**: [`Heartbeats`] here, over the store
//! (`store::heartbeats`) and the agent's `HEARTBEAT.md` in the control plane's copy of
//! its directory (where `memory` keeps it).
//!
//! **No model call** when HEARTBEAT.md is empty (whitespace, comments, headings), when
//! a periodic heartbeat finds it unchanged since the last quiet answer (its hash is
//! kept), or when the agent's heartbeats used `[heartbeat] daily_token_cap` tokens
//! this UTC day; each such heartbeat is recorded `skipped` with the reason. A person's
//! `POST …/heartbeat` runs one even when the heartbeat is off and the file unchanged.
//!
//! **The loop** reads the earliest next heartbeat of every active agent and sleeps
//! until it, or until a setting changes ([`Heartbeats::changed`]), with the schedules'
//! wait (`schedules::wait_for_next`, at most ten minutes); it never polls. A due heartbeat's next one is stored first (a crash loses at most
//! that one, never repeats it), a period after it was taken: one due while chorus was
//! down is taken once at start, never made up for in a burst.
//!
//! **A heartbeat** is a new thread of the agent whose principal is the scheduler
//! (unattended: an `ask` resolves as the agent's `on_ask`, `prompt` as a deny), whose
//! message is a fixed instruction followed by HEARTBEAT.md's text, on the agent's
//! `heartbeat_model` when set (that run's model; a resumed run after a restart uses the
//! agent's). At most one goes per agent: a periodic one while one goes is recorded
//! `skipped`; `POST` is refused (409). Its end is read from the thread's final status
//! in the feed (and from the store at start and when the feed lagged); its tokens are
//! its thread's model calls'.

pub mod decide;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::domain::Role;
use chorus_proto::tools::IdentityFile;
use chrono::Utc;
use serde_json::{Value, json};
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::config::HeartbeatSettings;
use crate::feed::Notification;
use crate::memory::files::MemoryDir;
use crate::principal::Principal;
use crate::providers::catalog::Catalog;
use crate::runs::Runs;
use crate::store::{
    AgentRecord, HeartbeatCause, HeartbeatOutcome, HeartbeatRecord, HeartbeatSetting, Store,
    StoreError, ThreadStatus, format_time,
};
use decide::Skip;

/// Heartbeats listed by `GET …/heartbeat`, newest first.
const LISTED: u32 = 50;

/// What went wrong, for the front ends (HTTP: 400, 404, 409, or the store's).
#[derive(Debug, thiserror::Error)]
pub enum HeartbeatError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Conflict(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A heartbeat setting a person sent: `heartbeat_minutes` and `heartbeat_model`
/// (`Some(None)`: back to the agent's model). Absent fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct HeartbeatChange {
    pub minutes: Option<u32>,
    pub model: Option<Option<String>>,
}

/// A new agent's heartbeat setting from its checked create request (none: off).
pub fn initial(change: &HeartbeatChange) -> Option<crate::store::InitialHeartbeat> {
    let minutes = change.minutes.unwrap_or(0);
    let model = change.model.clone().flatten();
    (minutes > 0 || model.is_some()).then(|| crate::store::InitialHeartbeat {
        minutes,
        model,
        next_at: (minutes > 0).then(|| format_time(decide::next_after(Utc::now(), minutes))),
    })
}

pub struct Heartbeats {
    store: Store,
    runs: Arc<Runs>,
    catalog: Arc<Catalog>,
    settings: HeartbeatSettings,
    agents_root: PathBuf,
    wake: Notify,
    /// "Is one going?" and recording the new one are one step.
    beating: tokio::sync::Mutex<()>,
}

impl Heartbeats {
    pub fn new(
        store: Store,
        runs: Arc<Runs>,
        catalog: Arc<Catalog>,
        settings: HeartbeatSettings,
        agents_root: PathBuf,
    ) -> Arc<Heartbeats> {
        Arc::new(Heartbeats {
            store,
            runs,
            catalog,
            settings,
            agents_root,
            wake: Notify::new(),
            beating: tokio::sync::Mutex::new(()),
        })
    }

    pub fn settings(&self) -> &HeartbeatSettings {
        &self.settings
    }

    /// Starts the loop and settles the heartbeats the last control plane left going;
    /// both stop with `shutdown`. Called once the threads left going were resumed or
    /// failed.
    pub fn start(self: &Arc<Self>, shutdown: CancellationToken) {
        let settle = self.clone();
        let stop = shutdown.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = stop.cancelled() => {}
                _ = settle.reconcile() => {}
            }
        });
        let looper = self.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = looper.run_loop() => {}
            }
        });
    }

    /// A setting changed: the loop reads the next heartbeat again.
    pub fn changed(&self) {
        self.wake.notify_one();
    }

    async fn run_loop(self: &Arc<Self>) {
        loop {
            let next = self.store.next_heartbeat().await;
            if !crate::schedules::wait_for_next(next, &self.wake, "heartbeat").await {
                continue;
            }
            if self.runs.draining() {
                // Shutting down: what is due stays due, and the next start takes it.
                std::future::pending::<()>().await;
            }
            if !self.beat_due().await {
                // The store failed: what is due stays due; not again at once.
                tokio::time::sleep(Duration::from_secs(5)).await;
            }
        }
    }

    /// Takes every heartbeat due now; false when the store failed to move one on.
    async fn beat_due(self: &Arc<Self>) -> bool {
        let now = Utc::now();
        let due = match self.store.due_heartbeats(&format_time(now)).await {
            Ok(due) => due,
            Err(e) => {
                tracing::error!(error = %e, "heartbeat: cannot read the due heartbeats");
                return false;
            }
        };
        let mut moved = true;
        for setting in due {
            let next = decide::next_after(now, setting.minutes);
            // The next one first: a crash now loses this heartbeat, never repeats it.
            if let Err(e) = self
                .store
                .move_heartbeat(&setting, Some(format_time(next)))
                .await
            {
                tracing::error!(agent = %setting.agent_name, error = %e, "heartbeat: cannot store the next heartbeat; not beating");
                moved = false;
                continue;
            }
            let agent = match self.store.active_agent(&setting.agent_name).await {
                Ok(Some(agent)) if agent.incarnation == setting.incarnation => agent,
                Ok(_) => continue,
                Err(e) => {
                    tracing::error!(agent = %setting.agent_name, error = %e, "heartbeat: cannot read the agent");
                    continue;
                }
            };
            if let Err(e) = self.beat(&agent, HeartbeatCause::Periodic).await {
                tracing::error!(agent = %agent.name, error = %e, "heartbeat: cannot record a heartbeat");
            }
        }
        moved
    }

    /// One heartbeat of `agent`: recorded `skipped` (no model call) or started.
    pub async fn beat(
        self: &Arc<Self>,
        agent: &AgentRecord,
        cause: HeartbeatCause,
    ) -> Result<HeartbeatRecord, HeartbeatError> {
        let _one = self.beating.lock().await;
        let going = self
            .store
            .going_heartbeats()
            .await?
            .into_iter()
            .any(|h| h.agent == agent.name && h.incarnation == agent.incarnation);
        let skipped = |reason: String| async move {
            let id = self
                .store
                .start_heartbeat(
                    &agent.name,
                    &agent.incarnation,
                    cause,
                    HeartbeatOutcome::Skipped,
                    Some(reason),
                    None,
                )
                .await?;
            self.record(id).await
        };
        if going {
            if cause == HeartbeatCause::Manual {
                return Err(HeartbeatError::Conflict(format!(
                    "'{}' has a heartbeat going; wait for it to end (GET /api/agents/{}/heartbeat) and ask again",
                    agent.name, agent.name
                )));
            }
            return skipped(
                "the last heartbeat was still going; at most one goes at a time".into(),
            )
            .await;
        }
        let setting = self.store.heartbeat_setting(&agent.name).await?;
        let path = MemoryDir::new(&self.agents_root, &agent.name).identity(IdentityFile::Heartbeat);
        let text = match crate::memory::files::read(&path).await {
            Ok(text) => text,
            Err(e) => {
                let id = self
                    .store
                    .start_heartbeat(
                        &agent.name,
                        &agent.incarnation,
                        cause,
                        HeartbeatOutcome::Failed,
                        Some(format!("cannot read HEARTBEAT.md: {e}")),
                        None,
                    )
                    .await?;
                return self.record(id).await;
            }
        };
        let now = Utc::now();
        let used = self
            .store
            .heartbeat_tokens_since(
                &agent.name,
                &agent.incarnation,
                &format_time(decide::day_start(now)),
            )
            .await?;
        let quiet_hash = setting.as_ref().and_then(|s| s.quiet_hash.as_deref());
        if let Err(skip) = decide::check(
            &text,
            quiet_hash,
            cause,
            used,
            self.settings.daily_token_cap,
        ) {
            if matches!(skip, Skip::Cap { .. }) {
                tracing::warn!(agent = %agent.name, used, cap = self.settings.daily_token_cap, "heartbeat: the daily token cap is reached; no model call");
            }
            return skipped(skip.reason()).await;
        }
        let hash = decide::file_hash(&text);
        let id = self
            .store
            .start_heartbeat(
                &agent.name,
                &agent.incarnation,
                cause,
                HeartbeatOutcome::Running,
                None,
                Some(hash),
            )
            .await?;
        // On the heartbeat's model when one is set: the run this starts uses it.
        let mut beating = agent.clone();
        if let Some(model) = setting.and_then(|s| s.model) {
            beating.model = Some(model);
        }
        // Subscribed before the thread starts: its end cannot come first.
        let ends = self.runs.feed().subscribe();
        match self
            .runs
            .start_thread(&beating, &decide::prompt(&text), &Principal::Scheduler)
            .await
        {
            Ok(thread) => {
                self.store.set_heartbeat_thread(id, thread).await?;
                let record = self.record(id).await?;
                let this = self.clone();
                let going = record.clone();
                tokio::spawn(async move { this.await_end(going, ends).await });
                Ok(record)
            }
            Err(e) => {
                self.store
                    .end_heartbeat(
                        id,
                        HeartbeatOutcome::Failed,
                        Some(format!("the heartbeat's thread could not start: {e}")),
                        0,
                    )
                    .await?;
                self.record(id).await
            }
        }
    }

    async fn record(&self, id: u64) -> Result<HeartbeatRecord, HeartbeatError> {
        self.store.heartbeat(id).await?.ok_or_else(|| {
            HeartbeatError::Store(StoreError::NotFound(format!("heartbeat {id} is gone")))
        })
    }

    /// At start: the heartbeats the last control plane left going are awaited (their
    /// threads were resumed) or failed (no thread started).
    async fn reconcile(self: &Arc<Self>) {
        let ends = self.runs.feed().subscribe();
        // A beat of this control plane (the loop's first, or one asked for) records
        // its heartbeat before its thread starts: not taken for one left without.
        let _one = self.beating.lock().await;
        let going = match self.store.going_heartbeats().await {
            Ok(going) => going,
            Err(e) => {
                tracing::error!(error = %e, "heartbeat: cannot read the going heartbeats");
                return;
            }
        };
        for heartbeat in going {
            if heartbeat.thread_id.is_some() {
                let this = self.clone();
                let ends = ends.resubscribe();
                tokio::spawn(async move { this.await_end(heartbeat, ends).await });
            } else if let Err(e) = self
                .store
                .end_heartbeat(
                    heartbeat.id,
                    HeartbeatOutcome::Failed,
                    Some("chorus stopped before the heartbeat's thread started".into()),
                    0,
                )
                .await
            {
                tracing::error!(error = %e, "heartbeat: cannot record a heartbeat's end");
            }
        }
    }

    /// Waits for the heartbeat's thread to end, then records what came of it.
    async fn await_end(
        self: Arc<Self>,
        heartbeat: HeartbeatRecord,
        mut ends: tokio::sync::broadcast::Receiver<Arc<crate::feed::ThreadEvent>>,
    ) {
        let Some(thread) = heartbeat.thread_id else {
            return;
        };
        loop {
            // It may have ended before this looked (or while the feed lagged).
            if self.finish_if_ended(&heartbeat, thread).await {
                return;
            }
            loop {
                match ends.recv().await {
                    Ok(event)
                        if event.is_final()
                            && event.agent == heartbeat.agent
                            && event.thread_id == Some(thread) =>
                    {
                        break;
                    }
                    Ok(_) => {}
                    Err(RecvError::Lagged(_)) => break,
                    Err(RecvError::Closed) => return,
                }
            }
        }
    }

    /// Records the heartbeat's end when its thread has ended; true when it has.
    async fn finish_if_ended(&self, heartbeat: &HeartbeatRecord, thread_id: u64) -> bool {
        let agent = &heartbeat.agent;
        let thread = match self.store.thread(agent, thread_id).await {
            Ok(Some(thread)) => thread,
            Ok(None) => {
                // Its agent was destroyed with its threads: it ends here.
                if let Err(e) = self
                    .store
                    .end_heartbeat(
                        heartbeat.id,
                        HeartbeatOutcome::Failed,
                        Some("the heartbeat's thread is gone".into()),
                        0,
                    )
                    .await
                {
                    tracing::error!(agent = %agent, error = %e, "heartbeat: cannot record a heartbeat's end");
                }
                return true;
            }
            Err(e) => {
                tracing::error!(agent = %agent, error = %e, "heartbeat: cannot read the heartbeat's thread");
                return false;
            }
        };
        if !thread.status.is_finished() {
            return false;
        }
        let tokens = self
            .store
            .thread_usage(agent, thread_id)
            .await
            .map(|u| u.input_tokens + u.output_tokens)
            .unwrap_or(0);
        let answer = match thread.status {
            ThreadStatus::Completed => self.answer(agent, thread_id).await,
            _ => None,
        };
        let (outcome, reason) = match (&answer, thread.status) {
            (Some(answer), _) if decide::is_quiet(answer) => (HeartbeatOutcome::Quiet, None),
            (Some(_), _) => (HeartbeatOutcome::Notified, None),
            (None, ThreadStatus::Completed) => (
                HeartbeatOutcome::Failed,
                Some("the heartbeat's thread ended without an answer".to_string()),
            ),
            (None, status) => (
                HeartbeatOutcome::Failed,
                Some(match &thread.error {
                    Some(error) => format!("the heartbeat's thread {}: {error}", status.as_str()),
                    None => format!("the heartbeat's thread {}", status.as_str()),
                }),
            ),
        };
        match self
            .store
            .end_heartbeat(heartbeat.id, outcome, reason, tokens)
            .await
        {
            Ok(true) => {}
            Ok(false) => return true,
            Err(e) => {
                tracing::error!(agent = %agent, error = %e, "heartbeat: cannot record a heartbeat's end");
                return true;
            }
        }
        tracing::info!(agent = %agent, heartbeat = heartbeat.id, thread_id, tokens, outcome = outcome.as_str(), "heartbeat ended");
        match (outcome, answer) {
            (HeartbeatOutcome::Quiet, _) => {
                if let Some(hash) = &heartbeat.file_hash
                    && let Err(e) = self
                        .store
                        .set_heartbeat_quiet_hash(agent, &heartbeat.incarnation, hash)
                        .await
                {
                    tracing::error!(agent = %agent, error = %e, "heartbeat: cannot record the quiet answer's file");
                }
            }
            (HeartbeatOutcome::Notified, Some(answer)) => {
                self.runs.feed().publish_agent(
                    agent,
                    Notification::Heartbeat {
                        heartbeat_id: heartbeat.id,
                        thread: thread_id,
                        text: format!("Heartbeat of {agent}: {}", answer.trim()),
                    },
                );
            }
            _ => {}
        }
        true
    }

    /// The thread's last answer: its last assistant message with text.
    async fn answer(&self, agent: &str, thread: u64) -> Option<String> {
        let messages = self.store.thread_messages(agent, thread).await.ok()?;
        messages
            .into_iter()
            .rev()
            .map(|m| m.message)
            .find(|m| m.role == Role::Assistant && !m.content.trim().is_empty())
            .map(|m| m.content)
    }

    // --- What the front ends call. ---

    /// Checks a setting before anything is changed: the minutes' bounds, the model
    /// in the catalog.
    pub async fn check(&self, change: &HeartbeatChange) -> Result<(), HeartbeatError> {
        if let Some(minutes) = change.minutes {
            decide::check_minutes(minutes, self.settings.min_minutes)
                .map_err(HeartbeatError::BadRequest)?;
        }
        if let Some(Some(model)) = &change.model {
            if model.trim().is_empty() {
                return Err(HeartbeatError::BadRequest(
                    "heartbeat_model is empty; name a model (`chorus models` lists them) or send null for the agent's"
                        .into(),
                ));
            }
            self.catalog
                .resolve(model)
                .await
                .map_err(|e| HeartbeatError::BadRequest(format!("heartbeat_model: {e}")))?;
        }
        Ok(())
    }

    /// Applies a checked setting to the active agent `name`. A changed period (or
    /// one switched on) starts counting now; a changed model alone moves nothing.
    pub async fn configure(
        &self,
        name: &str,
        change: HeartbeatChange,
    ) -> Result<(), HeartbeatError> {
        self.check(&change).await?;
        let before = self.store.heartbeat_setting(name).await?;
        let minutes = change
            .minutes
            .or(before.as_ref().map(|s| s.minutes))
            .unwrap_or(0);
        let model = match change.model {
            Some(model) => model,
            None => before.as_ref().and_then(|s| s.model.clone()),
        };
        let next_at = match &before {
            _ if minutes == 0 => None,
            Some(before) if before.minutes == minutes && before.next_at.is_some() => {
                before.next_at.clone()
            }
            _ => Some(format_time(decide::next_after(Utc::now(), minutes))),
        };
        self.store
            .set_heartbeat(name, minutes, model, next_at)
            .await?;
        self.changed();
        Ok(())
    }

    /// The agent's setting (off when never set).
    pub async fn setting(&self, name: &str) -> Result<Option<HeartbeatSetting>, StoreError> {
        self.store.heartbeat_setting(name).await
    }

    /// `GET …/heartbeat`: the setting, today's tokens against the cap, and the
    /// heartbeats, newest first.
    pub async fn view(&self, agent: &AgentRecord) -> Result<Value, HeartbeatError> {
        let setting = self.store.heartbeat_setting(&agent.name).await?;
        let used = self
            .store
            .heartbeat_tokens_since(
                &agent.name,
                &agent.incarnation,
                &format_time(decide::day_start(Utc::now())),
            )
            .await?;
        let heartbeats = self.store.heartbeats(&agent.name, LISTED).await?;
        Ok(json!({
            "agent": agent.name,
            "heartbeat_minutes": setting.as_ref().map_or(0, |s| s.minutes),
            "heartbeat_model": setting.as_ref().and_then(|s| s.model.clone()),
            "next_at": setting.as_ref().and_then(|s| s.next_at.clone()),
            "tokens_today": used,
            "daily_token_cap": self.settings.daily_token_cap,
            "heartbeats": heartbeats,
        }))
    }
}
