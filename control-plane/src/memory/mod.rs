//! An agent's identity (`SOUL.md`, `USER.md`, `HEARTBEAT.md`) and memory
//! (`memory/MEMORY.md`, `memory/YYYY-MM-DD.md`), kept by the control plane in its
//! copy of the agent's directory (ARCHITECTURE.md, "Identity and memory").
//!
//! Every write here (the tools `remember`, `log_note`, `self_edit_identity`; the API;
//! Discord) is followed by an `UpdateAgent` with the sections rendered again, so the
//! agent's live runs use it from their next model call; a hand edit on disk is
//! noticed by [`Memory::watch`], which compares the files' stamps (size, time,
//! inode) every 2 s for agents with a run going. Writes to one agent's files are
//! serialised by one lock (they are rare and small).
//!
//! Entries carry their provenance on their line ([`entries`]); [`Memory::list`] lists
//! them with it (what search indexes, [`search`]), [`Memory::forget`] removes one by id.
//! A long thread's older context is summarised into the daily log by [`flush`].

pub mod entries;
pub mod files;
pub mod flush;
pub mod prompt;
pub mod search;
pub mod sections;
pub mod vectors;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chorus_proto::domain::AgentChange;
use chorus_proto::tools::IdentityFile;
use tokio_util::sync::CancellationToken;

use crate::principal::Principal;
use crate::store::{AuditDecision, AuditEntry, Store};
use entries::{Entry, Provenance};
use files::{MEMORY_FILE, MemoryDir};
pub use sections::{DEFAULT_LIMIT_BYTES, MemorySettings, render_sections};

/// Most lines `memory_get` shows at once.
pub const MAX_GET_LINES: usize = 400;
/// Most bytes of an entry's text.
pub const MAX_ENTRY_BYTES: usize = 2048;
/// Most bytes of an identity file.
pub const MAX_IDENTITY_BYTES: usize = 64 * 1024;
/// How often hand edits are looked for.
const WATCH_PERIOD: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Io(String),
}

fn io(what: &str, e: std::io::Error) -> MemoryError {
    MemoryError::Io(format!("cannot {what}: {e}"))
}

/// Who wrote an entry.
#[derive(Debug, Clone)]
pub enum Source {
    /// The agent's model, by a tool call in a thread.
    Call { thread_id: u64, call_id: String },
    /// A person, through the API, the terminal client or Discord.
    Person(Principal),
    /// A context flush of a thread: the span of its messages summarised (ids).
    Flush {
        thread_id: u64,
        first_message_id: u64,
        last_message_id: u64,
    },
}

/// The memory files of an agent with their entries (what search will index).
#[derive(Debug, Clone)]
pub struct Listing {
    /// MEMORY.md's size.
    pub size: usize,
    pub limit: usize,
    pub files: Vec<(String, u64)>,
    /// Each entry with the file it is in.
    pub entries: Vec<(String, Entry)>,
}

type Stamp = Vec<(std::path::PathBuf, u64, Option<std::time::SystemTime>, u64)>;

/// What memory needs of the agents' runs (`runs::Runs` is it): told of a change, so
/// live runs use it from their next model call, and which agents have runs (whose
/// files the watcher looks at). A seam, so that the runs may use memory (a run's end
/// flushes a long thread into it) without the two modules using each other.
pub trait LiveRuns: Send + Sync {
    fn agent_changed<'a>(
        &'a self,
        agent: &'a str,
        change: AgentChange,
    ) -> futures::future::BoxFuture<'a, ()>;
    fn busy_agents(&self) -> Vec<String>;
}

pub struct Memory {
    settings: MemorySettings,
    store: Store,
    runs: Arc<dyn LiveRuns>,
    writing: tokio::sync::Mutex<()>,
    /// The stamps last seen of busy agents' files.
    seen: Mutex<HashMap<String, Stamp>>,
    /// The stamps of each agent's files when they were last indexed for search.
    indexed: Mutex<HashMap<String, Stamp>>,
    /// Resolves an agent's model to its provider, whose embedding model search uses.
    catalog: Arc<crate::providers::catalog::Catalog>,
    /// The model of agents that name none (`CHORUS_DEFAULT_MODEL`).
    default_model: Option<String>,
}

impl Memory {
    pub fn new(
        store: Store,
        runs: Arc<dyn LiveRuns>,
        settings: MemorySettings,
        catalog: Arc<crate::providers::catalog::Catalog>,
        default_model: Option<String>,
    ) -> Self {
        Memory {
            settings,
            store,
            runs,
            writing: tokio::sync::Mutex::new(()),
            seen: Mutex::new(HashMap::new()),
            indexed: Mutex::new(HashMap::new()),
            catalog,
            default_model,
        }
    }

    /// The provider of the agent's model (whose embedding model its search uses), or
    /// why it is not known.
    pub async fn provider(&self, agent: &str) -> Result<String, String> {
        let named = match self.store.agent(agent).await {
            Ok(record) => record.and_then(|r| r.model),
            Err(e) => return Err(format!("cannot read the agent: {e}")),
        };
        let Some(model) = named.or_else(|| self.default_model.clone()) else {
            return Err("the agent has no model, so no provider to embed with".into());
        };
        self.catalog
            .resolve(&model)
            .await
            .map(|route| route.provider)
            .map_err(|e| format!("the agent's model has no provider now: {e}"))
    }

    pub fn settings(&self) -> &MemorySettings {
        &self.settings
    }

    pub fn dir(&self, agent: &str) -> MemoryDir {
        MemoryDir::new(&self.settings.agents_root, agent)
    }

    fn existing(&self, agent: &str) -> Result<MemoryDir, MemoryError> {
        let dir = self.dir(agent);
        if dir.exists() {
            Ok(dir)
        } else {
            Err(MemoryError::NotFound(format!(
                "agent '{agent}' has no directory here"
            )))
        }
    }

    /// Indexes the agent's memory files for search and sends its live runs its
    /// sections as they are now (every write and every hand edit seen comes here).
    pub async fn push(&self, agent: &str) {
        self.index(agent).await;
        let (identity, memory) = render_sections(&self.settings, agent).await;
        let stamp = self.dir(agent).stamp();
        self.seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent.to_string(), stamp);
        let change = AgentChange {
            identity: Some(identity),
            memory: Some(memory),
            ..AgentChange::default()
        };
        self.runs.agent_changed(agent, change).await;
    }

    /// `remember`: appends a fact to MEMORY.md (removing the entries it folds
    /// together). Past the limit it still writes, and says how far over and what to fold.
    pub async fn remember(
        &self,
        agent: &str,
        text: &str,
        replaces: &[String],
        source: Source,
    ) -> Result<String, MemoryError> {
        let text = checked_text(text)?;
        let dir = self.existing(agent)?;
        let replaces: Vec<String> = replaces
            .iter()
            .map(|id| id.trim().trim_start_matches("mem:").to_string())
            .collect();
        let (id, size, over) = {
            let _writing = self.writing.lock().await;
            let path = dir.long_term();
            let mut current = files::read(&path)
                .await
                .map_err(|e| io("read MEMORY.md", e))?;
            let ids: Vec<&str> = replaces.iter().map(String::as_str).collect();
            let present: Vec<&str> = entries::parse(&current)
                .iter()
                .filter_map(|e| e.id().map(str::to_string))
                .filter(|id| ids.contains(&id.as_str()))
                .map(|id| ids.iter().copied().find(|i| *i == id).unwrap_or_default())
                .collect();
            if let Some(missing) = ids.iter().find(|id| !present.contains(id)) {
                return Err(MemoryError::Invalid(format!(
                    "replaces names mem:{missing}, which is not an entry of MEMORY.md; nothing was written"
                )));
            }
            if let Some(rest) = entries::without(&current, &ids) {
                current = rest;
            }
            let mut provenance = provenance(source)?;
            provenance.folds = replaces.clone();
            let id = provenance.id.clone();
            append(&mut current, &entries::render(&text, &provenance));
            files::write(&path, &current)
                .await
                .map_err(|e| io("write MEMORY.md", e))?;
            (
                id,
                current.len(),
                prompt::over_limit(&current, self.settings.limit_bytes),
            )
        };
        self.push(agent).await;
        let folded = if replaces.is_empty() {
            String::new()
        } else {
            format!(" (replacing {})", replaces.join(", "))
        };
        Ok(match over {
            Some(over) => format!("Remembered as mem:{id}{folded}. {over}"),
            None => format!(
                "Remembered as mem:{id}{folded}. {}",
                prompt::size_line(size, self.settings.limit_bytes)
            ),
        })
    }

    /// `log_note`: appends a note to today's log (UTC).
    pub async fn log_note(
        &self,
        agent: &str,
        text: &str,
        source: Source,
    ) -> Result<String, MemoryError> {
        let text = checked_text(text)?;
        let dir = self.existing(agent)?;
        let day = chrono::Utc::now().date_naive();
        let name = files::daily_name(day);
        let id = {
            let _writing = self.writing.lock().await;
            let path = dir.daily(day);
            let mut current = files::read(&path)
                .await
                .map_err(|e| io("read the log", e))?;
            if current.trim().is_empty() {
                current = format!("# {}\n\n", day.format("%Y-%m-%d"));
            }
            let provenance = provenance(source)?;
            append(&mut current, &entries::render(&text, &provenance));
            files::write(&path, &current)
                .await
                .map_err(|e| io("write the log", e))?;
            provenance.id
        };
        self.push(agent).await;
        Ok(format!("Noted in memory/{name} as mem:{id}."))
    }

    /// A context flush's summary, into today's log (UTC) with the span as its
    /// provenance; returns the log's path (`memory/YYYY-MM-DD.md`) and the entry's
    /// id. Idempotent: an entry of any log with the same thread and span (one
    /// written before a crash, say) is returned instead of a second one. The text is
    /// cut to fit one entry.
    pub async fn log_flush(
        &self,
        agent: &str,
        text: &str,
        thread_id: u64,
        first_message_id: u64,
        last_message_id: u64,
    ) -> Result<(String, String), MemoryError> {
        let span = format!("{first_message_id}-{last_message_id}");
        let already = self.list(agent).await?.entries.into_iter().find(|(_, e)| {
            e.provenance.as_ref().is_some_and(|p| {
                p.thread_id == Some(thread_id) && p.messages.as_deref() == Some(span.as_str())
            })
        });
        if let Some((file, entry)) = already {
            let id = entry.id().unwrap_or_default().to_string();
            return Ok((format!("memory/{file}"), id));
        }
        let mut text = entries::one_line(text);
        if text.len() > MAX_ENTRY_BYTES {
            let mut end = MAX_ENTRY_BYTES - 3;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("...");
        }
        let text = checked_text(&text)?;
        let dir = self.existing(agent)?;
        let day = chrono::Utc::now().date_naive();
        let id = {
            let _writing = self.writing.lock().await;
            let path = dir.daily(day);
            let mut current = files::read(&path)
                .await
                .map_err(|e| io("read the log", e))?;
            if current.trim().is_empty() {
                current = format!("# {}\n\n", day.format("%Y-%m-%d"));
            }
            let provenance = provenance(Source::Flush {
                thread_id,
                first_message_id,
                last_message_id,
            })?;
            append(&mut current, &entries::render(&text, &provenance));
            files::write(&path, &current)
                .await
                .map_err(|e| io("write the log", e))?;
            provenance.id
        };
        self.push(agent).await;
        Ok((format!("memory/{}", files::daily_name(day)), id))
    }

    /// `memory_get`: a memory file's lines, numbered, `lines` from `from` (1-based).
    pub async fn get(
        &self,
        agent: &str,
        path: &str,
        from: Option<usize>,
        lines: Option<usize>,
    ) -> Result<String, MemoryError> {
        let text = self.read_file(agent, path).await?;
        let from = from.unwrap_or(1).max(1);
        let count = lines.unwrap_or(200).clamp(1, MAX_GET_LINES);
        let all: Vec<&str> = text.lines().collect();
        if all.is_empty() {
            return Ok(format!("{path} is empty."));
        }
        let shown: Vec<String> = all
            .iter()
            .enumerate()
            .skip(from - 1)
            .take(count)
            .map(|(i, line)| format!("{:>5}\t{line}", i + 1))
            .collect();
        let last = from - 1 + shown.len();
        let mut out = shown.join("\n");
        if last < all.len() {
            out.push_str(&format!(
                "\n(lines {from}-{last} of {}; read on with from: {})",
                all.len(),
                last + 1
            ));
        }
        Ok(out)
    }

    /// A memory file's text (jailed to `memory/`; missing reads as empty).
    pub async fn read_file(&self, agent: &str, path: &str) -> Result<String, MemoryError> {
        let dir = self.existing(agent)?;
        let full = dir.resolve(path).map_err(MemoryError::Invalid)?;
        files::read(&full).await.map_err(|e| io("read the file", e))
    }

    /// The identity files' text (missing: empty).
    pub async fn identity(&self, agent: &str) -> Result<Vec<(IdentityFile, String)>, MemoryError> {
        let dir = self.existing(agent)?;
        let mut out = Vec::new();
        for file in IdentityFile::ALL {
            let text = files::read(&dir.identity(file))
                .await
                .map_err(|e| io("read an identity file", e))?;
            out.push((file, text));
        }
        Ok(out)
    }

    /// Replaces an identity file; audited with its old and new size.
    pub async fn set_identity(
        &self,
        agent: &str,
        file: IdentityFile,
        content: &str,
        by: &Principal,
        thread_id: Option<u64>,
    ) -> Result<String, MemoryError> {
        if content.len() > MAX_IDENTITY_BYTES {
            return Err(MemoryError::Invalid(format!(
                "{} may be at most {} bytes; this is {}",
                file.file_name(),
                MAX_IDENTITY_BYTES,
                content.len()
            )));
        }
        let dir = self.existing(agent)?;
        let old = {
            let _writing = self.writing.lock().await;
            let path = dir.identity(file);
            let old = files::read(&path).await.map_err(|e| io("read", e))?;
            files::write(&path, content)
                .await
                .map_err(|e| io("write", e))?;
            old
        };
        self.audit(
            agent,
            &format!("agent:identity:{}", file.file_name()),
            by,
            Some(format!("old_size={} new_size={}", old.len(), content.len())),
            thread_id,
        )
        .await;
        self.push(agent).await;
        Ok(format!(
            "{} updated ({} bytes); it applies from your next step.",
            file.file_name(),
            content.len()
        ))
    }

    /// Every memory file and every entry in it, with provenance.
    pub async fn list(&self, agent: &str) -> Result<Listing, MemoryError> {
        let dir = self.existing(agent)?;
        let files = dir.list();
        let mut all = Vec::new();
        let mut size = 0;
        for (name, _) in &files {
            let text = match dir.resolve(name) {
                Ok(path) => files::read(&path).await.unwrap_or_default(),
                Err(_) => continue,
            };
            if name == MEMORY_FILE {
                size = text.len();
            }
            all.extend(entries::parse(&text).into_iter().map(|e| (name.clone(), e)));
        }
        Ok(Listing {
            size,
            limit: self.settings.limit_bytes,
            files,
            entries: all,
        })
    }

    /// Removes the entry `id` from whichever memory file holds it; audited with
    /// its text. Returns the file.
    pub async fn forget(
        &self,
        agent: &str,
        id: &str,
        by: &Principal,
    ) -> Result<String, MemoryError> {
        let id = id.trim_start_matches("mem:");
        if !entries::is_id(id) {
            return Err(MemoryError::Invalid(format!(
                "'{id}' is not a memory entry id (8 hex characters, as in <!-- mem:3f9a2c01 … -->)"
            )));
        }
        let dir = self.existing(agent)?;
        let found = {
            let _writing = self.writing.lock().await;
            let mut found = None;
            for (name, _) in dir.list() {
                let Ok(path) = dir.resolve(&name) else {
                    continue;
                };
                let text = files::read(&path).await.map_err(|e| io("read", e))?;
                let Some(rest) = entries::without(&text, &[id]) else {
                    continue;
                };
                let gone = entries::parse(&text)
                    .into_iter()
                    .find(|e| e.id() == Some(id))
                    .map(|e| e.text)
                    .unwrap_or_default();
                files::write(&path, &rest)
                    .await
                    .map_err(|e| io("write", e))?;
                found = Some((name, gone));
                break;
            }
            found
        };
        let Some((file, text)) = found else {
            return Err(MemoryError::NotFound(format!(
                "agent '{agent}' has no memory entry mem:{id}"
            )));
        };
        self.audit(
            agent,
            "agent:memory:forget",
            by,
            Some(format!("id={id} file=memory/{file} text={text:?}")),
            None,
        )
        .await;
        self.push(agent).await;
        Ok(file)
    }

    /// Looks for hand edits every 2 s in the files of agents with a run going, and
    /// sends those runs the sections again when one changed.
    pub fn watch(self: Arc<Self>, cancel: CancellationToken) {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(WATCH_PERIOD);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = cancel.cancelled() => return,
                    _ = tick.tick() => {}
                }
                let busy = self.runs.busy_agents();
                let changed: Vec<String> = {
                    let mut seen = self
                        .seen
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    seen.retain(|agent, _| busy.contains(agent));
                    busy.iter()
                        .filter(|agent| {
                            let stamp = self.dir(agent).stamp();
                            match seen.get(*agent) {
                                Some(last) => *last != stamp,
                                // First seen busy (up to a period after its run
                                // began). Files as they were last indexed are
                                // what its assignment was rendered from; any
                                // other state may be an edit made since (while
                                // idle, or in the run's first moments): send the
                                // sections again, which also indexes them.
                                None => {
                                    let indexed = self
                                        .indexed
                                        .lock()
                                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                                        .get(*agent)
                                        .is_some_and(|last| *last == stamp);
                                    if indexed {
                                        seen.insert((*agent).clone(), stamp);
                                    }
                                    !indexed
                                }
                            }
                        })
                        .cloned()
                        .collect()
                };
                for agent in changed {
                    tracing::debug!(agent, "identity or memory changed on disk");
                    self.push(&agent).await;
                }
            }
        });
    }

    async fn audit(
        &self,
        agent: &str,
        action: &str,
        by: &Principal,
        detail: Option<String>,
        thread_id: Option<u64>,
    ) {
        let entry = AuditEntry {
            agent_name: agent,
            action,
            decision: AuditDecision::Done,
            user_id: Some(by),
            detail,
            thread_id,
            call_id: None,
            worker: None,
        };
        if let Err(e) = self.store.audit(entry).await {
            tracing::error!(agent, action, error = %e, "cannot write audit entry");
        }
    }
}

/// An entry's text: not blank, not too long.
fn checked_text(text: &str) -> Result<String, MemoryError> {
    let text = entries::one_line(text);
    if text.is_empty() {
        return Err(MemoryError::Invalid("text must not be empty".into()));
    }
    if text.len() > MAX_ENTRY_BYTES {
        return Err(MemoryError::Invalid(format!(
            "an entry may be at most {MAX_ENTRY_BYTES} bytes (this is {}): write the gist, \
             and keep longer notes in your docs",
            text.len()
        )));
    }
    Ok(text)
}

fn provenance(source: Source) -> Result<Provenance, MemoryError> {
    let mut bytes = [0u8; 4];
    getrandom::fill(&mut bytes)
        .map_err(|e| MemoryError::Io(format!("no randomness from the OS: {e}")))?;
    let mut p = Provenance {
        id: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        at: Some(chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()),
        ..Provenance::default()
    };
    match source {
        Source::Call { thread_id, call_id } => {
            p.thread_id = Some(thread_id);
            p.call_id = Some(call_id);
        }
        Source::Person(principal) => p.by = Some(format!("api:{}", principal.text())),
        Source::Flush {
            thread_id,
            first_message_id,
            last_message_id,
        } => {
            p.thread_id = Some(thread_id);
            p.messages = Some(format!("{first_message_id}-{last_message_id}"));
        }
    }
    Ok(p)
}

/// Appends a line, after a newline if the text lacks one.
fn append(text: &mut String, line: &str) {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(line);
    text.push('\n');
}
