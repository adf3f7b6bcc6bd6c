//! An agent's context and its saved sessions (SPEC F1–F4): save, clear, restore,
//! history; the idle save (its timer is in each agent's run actor, `runs::idle`);
//! the save of every context at shutdown.
//!
//! The context of an agent is every message of its threads since its cutoff,
//! `max(last clear, now - [context] window_hours)` (`store::context_cutoff`).
//! Nothing is deleted: clearing moves the cutoff.
//!
//! Invariants:
//! - A save writes the session file first (a temporary file renamed into place,
//!   0600) and the `sessions` row last, the commit point; a row always has its file,
//!   and a file whose row failed is removed.
//! - Nothing is lost by a clear or a restore: `clear` first saves the context
//!   (trigger `context_clear`) when there is one, and a restore clears that way.
//! - A restore reads only a file inside the agent's `sessions/` directory, checked
//!   before the context is touched: a missing or corrupt file changes nothing.
//! - The idle save clears only what it saved: the cutoff moves to the moment the
//!   context was read, so a message that arrives while the summary is written stays.

pub mod file;
mod idle;
pub mod summary;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use chorus_proto::domain::ChatMessage;

use crate::config::ContextSettings;
use crate::feed::{FeedEvent, Notification, StatusChange, ThreadCreated, ThreadFeed, ThreadOrigin};
use crate::runs::IdleSaver;
use crate::store::{AgentRecord, Cleared, SessionRecord, Store, StoreError, ThreadStatus};
use file::{FileMessage, SessionFile, Trigger};
pub use idle::{describe_idle, effective_timeout};
use summary::{Purpose, Summarizer, clean, first_line};

/// How long a save waits for a model-written summary before it uses the first line.
const SUMMARY_TIMEOUT: Duration = Duration::from_secs(60);
/// The longest description a caller may give, in characters.
const MAX_GIVEN_DESCRIPTION_CHARS: usize = 500;
/// The largest session file a restore reads.
const MAX_FILE_BYTES: u64 = 256 << 20;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The agent has no messages in its context.
    #[error("{0}")]
    NothingToSave(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    InvalidInput(String),
    /// The session's row exists but its file is gone.
    #[error("{0}")]
    FileMissing(String),
    /// The session's file cannot be read as a session.
    #[error("{0}")]
    FileCorrupt(String),
    #[error("{message}")]
    Files { message: String, disk_full: bool },
    #[error(transparent)]
    Store(#[from] StoreError),
}

fn files_error(action: &str, path: &Path, e: std::io::Error) -> SessionError {
    SessionError::Files {
        message: format!("cannot {action} {}: {e}", path.display()),
        disk_full: crate::store::is_no_space(&e),
    }
}

/// What a restore made.
#[derive(Debug, Clone)]
pub struct Restored {
    /// The new `idle` thread holding the session's messages.
    pub thread_id: u64,
    /// Its last message: reply to it to continue the session.
    pub message_id: i64,
    pub session: SessionRecord,
    /// The context the restore replaced, saved first (`None`: there was none).
    pub saved_before: Option<SessionRecord>,
}

/// What a clear did.
#[derive(Debug, Clone)]
pub struct ClearOutcome {
    pub cleared: Cleared,
    /// The context saved before it was cleared (`None`: there was none).
    pub saved: Option<SessionRecord>,
}

pub struct Sessions {
    store: Store,
    agents_root: PathBuf,
    feed: ThreadFeed,
    summarizer: Arc<dyn Summarizer>,
    settings: ContextSettings,
}

impl Sessions {
    pub fn new(
        store: Store,
        agents_root: PathBuf,
        feed: ThreadFeed,
        summarizer: Arc<dyn Summarizer>,
        settings: ContextSettings,
    ) -> Arc<Sessions> {
        Arc::new(Sessions {
            store,
            agents_root,
            feed,
            summarizer,
            settings,
        })
    }

    pub fn settings(&self) -> &ContextSettings {
        &self.settings
    }

    /// The idle timeout that applies to an agent with this setting of its own.
    pub fn idle_timeout_of(&self, agent_setting: Option<u64>) -> Option<Duration> {
        effective_timeout(agent_setting, self.settings.idle_timeout)
    }

    fn sessions_dir(&self, agent: &str) -> PathBuf {
        self.agents_root.join(agent).join("sessions")
    }

    /// Saves the agent's context as a session (the context is kept). Without a
    /// description, the summarizer writes one.
    pub async fn save(
        &self,
        agent: &AgentRecord,
        description: Option<String>,
        trigger: Trigger,
    ) -> Result<SessionRecord, SessionError> {
        let description = match description {
            Some(d) => Some(check_description(&d)?),
            None => None,
        };
        let (session, _) = self
            .save_context(agent, description, trigger, SUMMARY_TIMEOUT)
            .await?;
        Ok(session)
    }

    /// Saves the context; returns the session and the moment the context was read
    /// (what a clear after it may clear up to).
    async fn save_context(
        &self,
        agent: &AgentRecord,
        description: Option<String>,
        trigger: Trigger,
        summary_budget: Duration,
    ) -> Result<(SessionRecord, String), SessionError> {
        // Timestamps have millisecond resolution: read_at starts a millisecond of its
        // own, so no message stored before this save shares it (such a message would
        // be saved and yet stay in the context after the clear).
        let read_at = next_millisecond().await;
        let cutoff = self
            .store
            .agent_context_cutoff(&agent.name, self.settings.window)
            .await?;
        let context = self.store.context_messages(&agent.name, &cutoff).await?;
        if context.is_empty() {
            return Err(SessionError::NothingToSave(format!(
                "agent '{}' has no messages in its context (none since {cutoff}, its last \
                 clear or the start of its {} h window); nothing to save",
                agent.name,
                self.settings.window.as_secs() / 3600
            )));
        }
        let description = match description {
            Some(d) => d,
            None => {
                let messages: Vec<ChatMessage> = context.iter().map(|(_, m)| m.clone()).collect();
                self.describe(agent, &messages, summary_budget).await
            }
        };
        let id = uuid::Uuid::new_v4().to_string();
        let saved_at = crate::store::now();
        let file_name = file::file_name(&saved_at, &description, &id);
        let session = SessionFile {
            id: id.clone(),
            agent_name: agent.name.clone(),
            description: description.clone(),
            saved_at: saved_at.clone(),
            trigger,
            message_count: context.len() as u64,
            messages: context
                .iter()
                .map(|(thread, m)| FileMessage::from_message(*thread, m))
                .collect(),
        };
        let dir = self.sessions_dir(&agent.name);
        let path = dir.join(&file_name);
        let json = session.to_json();
        {
            let (dir, path) = (dir.clone(), path.clone());
            tokio::task::spawn_blocking(move || write_atomically(&dir, &path, json.as_bytes()))
                .await
                .map_err(|e| SessionError::Files {
                    message: format!("the session writer stopped: {e}"),
                    disk_full: false,
                })??;
        }
        let record = SessionRecord {
            id,
            agent_name: agent.name.clone(),
            description,
            trigger: trigger.as_str().to_string(),
            saved_at,
            message_count: session.message_count,
            file_name,
        };
        // The row is the commit point: without it, the file is removed again.
        if let Err(e) = self.store.insert_session(&record).await {
            if let Err(rm) = tokio::fs::remove_file(&path).await {
                tracing::error!(path = %path.display(), error = %rm, "cannot remove the file of a session whose row failed");
            }
            return Err(e.into());
        }
        crate::memory::search::index_session(&self.store, &session, &record.file_name).await;
        tracing::info!(agent = %agent.name, session = %record.id, trigger = trigger.as_str(), messages = record.message_count, "session saved");
        Ok((record, read_at))
    }

    /// A description from the summarizer within `budget`, else the first line of
    /// the first user message (and the log says why).
    async fn describe(
        &self,
        agent: &AgentRecord,
        messages: &[ChatMessage],
        budget: Duration,
    ) -> String {
        if budget.is_zero() {
            return first_line(messages); // no model call that could not be awaited
        }
        let answer = tokio::time::timeout(
            budget,
            self.summarizer
                .summarize(agent, messages, Purpose::Description),
        )
        .await;
        let why = match answer {
            Ok(Ok(text)) => match clean(&text) {
                Some(description) => return description,
                None => "the summary was empty".to_string(),
            },
            Ok(Err(e)) => e,
            Err(_) => format!("no summary within {} s", budget.as_secs_f32()),
        };
        tracing::warn!(agent = %agent.name, reason = %why, "session described by its first line instead of a summary");
        first_line(messages)
    }

    /// Clears the agent's context: saves it first when there is one (trigger
    /// `context_clear`, described by its first line so a clear needs no model),
    /// then moves the cutoff to now and ends its `idle` threads as `completed`.
    pub async fn clear(&self, agent: &AgentRecord) -> Result<ClearOutcome, SessionError> {
        let saved = match self
            .save_context(
                agent,
                None,
                Trigger::ContextClear,
                Duration::ZERO, // the first line: no model call
            )
            .await
        {
            Ok((session, _)) => Some(session),
            Err(SessionError::NothingToSave(_)) => None,
            Err(e) => return Err(e),
        };
        let cleared = self.clear_as_of(&agent.name, &crate::store::now()).await?;
        Ok(ClearOutcome { cleared, saved })
    }

    async fn clear_as_of(&self, agent: &str, at: &str) -> Result<Cleared, SessionError> {
        let cleared = self.store.clear_context(agent, at).await?;
        for thread in &cleared.threads_completed {
            self.feed.publish(
                agent,
                *thread,
                FeedEvent::Status(StatusChange::new(ThreadStatus::Completed, None)),
            );
        }
        tracing::info!(agent, cleared_at = %cleared.cleared_at, threads_completed = cleared.threads_completed.len(), "context cleared");
        Ok(cleared)
    }

    /// Replaces the agent's context with a saved session: the current one is saved
    /// and cleared, and one new `idle` thread holds the session's messages.
    pub async fn restore(
        &self,
        agent: &AgentRecord,
        session_id: &str,
        user: &str,
    ) -> Result<Restored, SessionError> {
        let session = self
            .store
            .session(&agent.name, session_id)
            .await?
            .ok_or_else(|| {
                SessionError::NotFound(format!(
                    "agent '{}' has no session '{session_id}'; `chorus context history {}` \
                     (GET /api/agents/{}/context/history) lists them",
                    agent.name, agent.name, agent.name
                ))
            })?;
        // Everything that can be wrong with the file is found before the context
        // is touched.
        let file = self.read_file(&session).await?;
        let messages = file.chat_messages();
        let cleared = self.clear(agent).await?;
        let (thread_id, message_id) = self
            .store
            .restore_thread(
                &agent.name,
                &messages,
                user,
                &session.id,
                &session.description,
            )
            .await?;
        self.feed.publish(
            &agent.name,
            thread_id,
            FeedEvent::ThreadCreated(ThreadCreated {
                status: ThreadStatus::Idle,
                user: user.to_string(),
                origin: ThreadOrigin::Restored {
                    restored_from: session.id.clone(),
                },
            }),
        );
        tracing::info!(agent = %agent.name, session = %session.id, thread_id, messages = messages.len(), "session restored");
        Ok(Restored {
            thread_id,
            message_id,
            session,
            saved_before: cleared.saved,
        })
    }

    async fn read_file(&self, session: &SessionRecord) -> Result<SessionFile, SessionError> {
        let dir = self.sessions_dir(&session.agent_name);
        let path = inside(&dir, &session.file_name).ok_or_else(|| {
            SessionError::FileCorrupt(format!(
                "session '{}' names the file '{}', which is not a file in {}; it cannot be restored",
                session.id,
                session.file_name,
                dir.display()
            ))
        })?;
        let missing = || {
            SessionError::FileMissing(format!(
                "the file of session '{}' ({}) is gone; the session cannot be restored",
                session.id,
                path.display()
            ))
        };
        // A symlink placed in the directory must not lead out of it.
        let (real, real_dir) = match (
            tokio::fs::canonicalize(&path).await,
            tokio::fs::canonicalize(&dir).await,
        ) {
            (Ok(real), Ok(real_dir)) => (real, real_dir),
            (Err(e), _) | (_, Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(missing());
            }
            (Err(e), _) | (_, Err(e)) => return Err(files_error("read", &path, e)),
        };
        if real.parent() != Some(real_dir.as_path()) {
            return Err(SessionError::FileCorrupt(format!(
                "the file of session '{}' ({}) leads outside {}; it is not read",
                session.id,
                path.display(),
                dir.display()
            )));
        }
        let size = tokio::fs::metadata(&real)
            .await
            .map_err(|e| files_error("read", &path, e))?
            .len();
        if size > MAX_FILE_BYTES {
            return Err(SessionError::FileCorrupt(format!(
                "the file of session '{}' ({}) is {size} bytes, more than the {MAX_FILE_BYTES} a restore reads",
                session.id,
                path.display()
            )));
        }
        let text = match tokio::fs::read_to_string(&real).await {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(missing()),
            Err(e) => {
                return Err(SessionError::FileCorrupt(format!(
                    "the file of session '{}' ({}) cannot be read: {e}",
                    session.id,
                    path.display()
                )));
            }
        };
        let corrupt = |why: String| {
            SessionError::FileCorrupt(format!(
                "the file of session '{}' ({}) is not a valid session file: {why}",
                session.id,
                path.display()
            ))
        };
        let file = SessionFile::from_json(&text).map_err(corrupt)?;
        if file.id != session.id {
            return Err(corrupt(format!(
                "it holds session '{}', not '{}'",
                file.id, session.id
            )));
        }
        if file.messages.is_empty() {
            return Err(corrupt("it holds no messages".into()));
        }
        Ok(file)
    }

    /// The agent's sessions, newest first, a page at a time.
    pub async fn history(
        &self,
        agent: &str,
        after: Option<(&str, &str)>,
        limit: u32,
    ) -> Result<Vec<SessionRecord>, SessionError> {
        Ok(self.store.sessions(agent, after, limit).await?)
    }

    /// The idle timer fired for `agent` after `idle_for`: save (trigger
    /// `idle_timeout`), clear what was saved, and tell the feed. Nothing to save:
    /// nothing happens.
    pub async fn idle_save(&self, agent: &str, idle_for: Duration) {
        let record = match self.store.active_agent(agent).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(e) => {
                tracing::error!(agent, error = %e, "idle save: cannot read the agent");
                return;
            }
        };
        let (session, read_at) = match self
            .save_context(&record, None, Trigger::IdleTimeout, SUMMARY_TIMEOUT)
            .await
        {
            Ok(saved) => saved,
            Err(SessionError::NothingToSave(_)) => return,
            Err(e) => {
                tracing::error!(agent, error = %e, "idle save failed; the context is kept");
                return;
            }
        };
        if let Err(e) = self.clear_as_of(agent, &read_at).await {
            tracing::error!(agent, error = %e, "idle save: the session was saved but the context could not be cleared");
            return;
        }
        let text = format!(
            "Session saved: {}. Context cleared after {} of inactivity. Use context restore {} to resume.",
            session.description,
            describe_idle(idle_for),
            session.id
        );
        self.feed.publish_agent(
            agent,
            Notification::IdleSave {
                session_id: session.id,
                description: session.description,
                text,
            },
        );
    }

    /// Saves the context of every active agent that has one (trigger `shutdown`),
    /// all at once and within `total`: summaries not written by then give way to
    /// first lines. Returns how many were saved.
    pub async fn save_all(&self, total: Duration) -> usize {
        let agents = match self.store.active_agents().await {
            Ok(agents) => agents,
            Err(e) => {
                tracing::error!(error = %e, "shutdown: cannot list agents; no context saved");
                return 0;
            }
        };
        // Described by their first lines: a stop must be quick and cost nothing,
        // not wait for (and pay for) a model call per agent.
        let saves = agents.iter().map(|agent| async move {
            match self
                .save_context(agent, None, Trigger::Shutdown, Duration::ZERO)
                .await
            {
                Ok(_) => true,
                Err(SessionError::NothingToSave(_)) => false,
                Err(e) => {
                    tracing::error!(agent = %agent.name, error = %e, "shutdown: cannot save the context");
                    false
                }
            }
        });
        match tokio::time::timeout(total, futures::future::join_all(saves)).await {
            Ok(saved) => saved.into_iter().filter(|s| *s).count(),
            Err(_) => {
                tracing::error!(
                    "shutdown: saving contexts took more than {} s; stopped waiting",
                    total.as_secs()
                );
                0
            }
        }
    }
}

/// A caller's description: trimmed, not empty, not too long.
fn check_description(text: &str) -> Result<String, SessionError> {
    let text = text.trim();
    if text.is_empty() {
        return Err(SessionError::InvalidInput(
            "description must not be empty; leave it out to have one written".into(),
        ));
    }
    let chars = text.chars().count();
    if chars > MAX_GIVEN_DESCRIPTION_CHARS {
        return Err(SessionError::InvalidInput(format!(
            "description is {chars} characters; at most {MAX_GIVEN_DESCRIPTION_CHARS}"
        )));
    }
    Ok(text.to_string())
}

/// `dir/name` when `name` is one plain file name (no separator, not `.` or `..`).
fn inside(dir: &Path, name: &str) -> Option<PathBuf> {
    let mut parts = Path::new(name).components();
    match (parts.next(), parts.next()) {
        (Some(std::path::Component::Normal(part)), None) if part == name => Some(dir.join(name)),
        _ => None,
    }
}

/// Writes `path` whole or not at all: a private temporary file beside it, synced,
/// then renamed over it.
fn write_atomically(dir: &Path, path: &Path, contents: &[u8]) -> Result<(), SessionError> {
    crate::private::create_dir(dir).map_err(|e| files_error("create", dir, e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = dir.join(format!(".{name}.tmp"));
    if let Err(e) = crate::private::write_file(&tmp, contents) {
        let _ = std::fs::remove_file(&tmp);
        return Err(files_error("write", &tmp, e));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        files_error("write", path, e)
    })
}

#[cfg(test)]
mod tests;

/// The idle timer lives in each agent's run actor (`runs::idle`); it calls here.
#[tonic::async_trait]
impl IdleSaver for Sessions {
    fn idle_timeout_of(&self, agent_setting: Option<u64>) -> Option<Duration> {
        Sessions::idle_timeout_of(self, agent_setting)
    }

    async fn idle_save(&self, agent: &str, idle_for: Duration) {
        Sessions::idle_save(self, agent, idle_for).await
    }
}

/// The current time, once the clock has entered a millisecond that began after
/// this call (at most about a millisecond of waiting).
async fn next_millisecond() -> String {
    let start = chrono::Utc::now().timestamp_millis();
    loop {
        let now = chrono::Utc::now();
        if now.timestamp_millis() > start {
            return crate::store::format_time(now);
        }
        tokio::time::sleep(std::time::Duration::from_micros(200)).await;
    }
}
