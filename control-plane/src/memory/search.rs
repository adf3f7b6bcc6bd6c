//! Keeping the search index (`crate::store`'s `search_docs`) derived from the files:
//! an agent's memory entries are indexed again after every write the control plane
//! makes and every hand edit the watcher sees ([`Memory::push`] is the one place both
//! go through), for every agent at start, and before a search when the files'
//! stamps (size, time, inode) differ from those last indexed (a hand edit while no
//! run was going, which the watcher does not look at); a saved session is indexed
//! when it is saved. Messages need nothing here: the database indexes them as they are stored.
//! [`Memory::rebuild_index`] builds an agent's part from scratch (the same answers).

use chorus_proto::domain::Role;

use super::vectors::{self, ReindexAnswer, SearchAnswer};
use super::{Memory, MemoryError};
use crate::sessions::file::SessionFile;
use crate::store::{SearchDoc, SearchHit, SearchSource, search_terms};

/// Most hits the system prompt's "relevant" section shows.
pub const RELEVANT_HITS: usize = 3;

/// A relevant hit scores at least this share of the best one: a message's common
/// words ("the", "was") match nearly everything, weakly, and those hits are noise in
/// a prompt (an explicit search still lists them, ranked last).
pub const RELEVANT_MIN_SHARE: f64 = 0.5;

/// Most hits a search returns.
pub const MAX_HITS: usize = 50;
/// Hits when none is asked.
pub const DEFAULT_HITS: usize = 8;

impl Memory {
    /// Indexes the entries of the agent's memory files as they are now.
    pub async fn index(&self, agent: &str) {
        // Taken before the files are read: a write after it makes the next search
        // index again rather than trust a stale index.
        let stamp = self.dir(agent).stamp();
        let docs = match self.list(agent).await {
            Ok(listing) => listing
                .entries
                .into_iter()
                .map(|(file, entry)| SearchDoc {
                    text: entry.text,
                    path: format!("memory/{file}"),
                    line: entry.line as u64,
                    thread_id: None,
                })
                .collect(),
            Err(MemoryError::NotFound(_)) => Vec::new(),
            Err(e) => {
                tracing::warn!(agent, error = %e, "cannot read the memory files to index them");
                return;
            }
        };
        match self.store.index_memory(agent, docs).await {
            Ok(()) => {
                self.indexed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(agent.to_string(), stamp);
            }
            Err(e) => tracing::warn!(agent, error = %e, "cannot index the memory files"),
        }
    }

    /// Indexes the agent's memory files again if they changed on disk since they
    /// were last indexed (a hand edit while no run of the agent was going, which the
    /// watcher does not look for).
    pub async fn index_if_changed(&self, agent: &str) {
        let stamp = self.dir(agent).stamp();
        let same = self
            .indexed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(agent)
            .is_some_and(|last| *last == stamp);
        if !same {
            self.index(agent).await;
        }
    }

    /// Builds the agent's index from scratch: its memory files and its saved sessions
    /// (its messages are indexed by the database in the transaction that stores
    /// them; `store::search`'s test rebuilds that index too, with the same answers),
    /// then its vectors with the embedding model configured now ([`vectors::reindex`]).
    pub async fn rebuild_index(&self, agent: &str) -> Result<ReindexAnswer, MemoryError> {
        let store_error = |e: crate::store::StoreError| MemoryError::Io(e.to_string());
        self.store
            .clear_search_docs(agent)
            .await
            .map_err(store_error)?;
        self.index(agent).await;
        let mut after: Option<(String, String)> = None;
        loop {
            let page = self
                .store
                .sessions(
                    agent,
                    after.as_ref().map(|(a, b)| (a.as_str(), b.as_str())),
                    200,
                )
                .await
                .map_err(store_error)?;
            let Some(last) = page.last() else { break };
            after = Some((last.saved_at.clone(), last.id.clone()));
            for session in &page {
                let path = self
                    .settings
                    .agents_root
                    .join(agent)
                    .join("sessions")
                    .join(&session.file_name);
                let Ok(text) = tokio::fs::read_to_string(&path).await else {
                    tracing::warn!(agent, session = %session.id, "a saved session's file cannot be read; not indexed");
                    continue;
                };
                match SessionFile::from_json(&text) {
                    Ok(file) => index_session(&self.store, &file, &session.file_name).await,
                    Err(e) => {
                        tracing::warn!(agent, session = %session.id, error = %e, "a saved session's file is not valid; not indexed")
                    }
                }
            }
        }
        let provider = self.provider(agent).await;
        vectors::reindex(&self.store, &self.catalog, agent, provider)
            .await
            .map_err(store_error)
    }

    /// Ranked search over the agent's memory files, saved sessions and messages (all
    /// three when `sources` is empty): full-text, fused with vector search when the
    /// agent's provider has an embedding model ([`vectors`]).
    pub async fn search(
        &self,
        agent: &str,
        query: &str,
        k: Option<usize>,
        sources: &[SearchSource],
    ) -> Result<SearchAnswer, MemoryError> {
        self.existing(agent)?;
        self.index_if_changed(agent).await;
        let terms = search_terms(query);
        if terms.is_empty() {
            return Err(MemoryError::Invalid(
                "the query has no words to search for (letters or digits)".into(),
            ));
        }
        let k = k.unwrap_or(DEFAULT_HITS).clamp(1, MAX_HITS);
        let sources = if sources.is_empty() {
            &SearchSource::ALL[..]
        } else {
            sources
        };
        let provider = self.provider(agent).await;
        vectors::search(
            &self.store,
            &self.catalog,
            agent,
            provider,
            query,
            &terms,
            k,
            sources,
        )
        .await
        .map_err(|e| MemoryError::Io(format!("cannot search: {e}")))
    }
}

/// Indexes a saved session's user and assistant messages.
pub async fn index_session(store: &crate::store::Store, file: &SessionFile, file_name: &str) {
    let docs = file
        .messages
        .iter()
        .filter(|m| {
            matches!(
                m.to_message().map(|m| m.role),
                Ok(Role::User | Role::Assistant)
            )
        })
        .filter(|m| !m.content.trim().is_empty())
        .map(|m| SearchDoc {
            text: m.content.clone(),
            path: format!("sessions/{file_name}"),
            line: 0,
            thread_id: m.thread_id,
        })
        .collect();
    if let Err(e) = store.index_session(&file.agent_name, &file.id, docs).await {
        tracing::warn!(agent = %file.agent_name, session = %file.id, error = %e, "cannot index a saved session");
    }
}

/// A hit on one line, saying where it is (for the tool and the system prompt).
pub fn hit_line(hit: &SearchHit) -> String {
    let place = match hit.source {
        SearchSource::Memory => format!(
            "{}:{}",
            hit.path.as_deref().unwrap_or_default(),
            hit.line.unwrap_or_default()
        ),
        SearchSource::Session => format!(
            "session {}{}",
            hit.session_id.as_deref().unwrap_or_default(),
            hit.thread_id
                .map(|t| format!(", thread {t}"))
                .unwrap_or_default()
        ),
        SearchSource::Message => format!(
            "thread {}, message {}",
            hit.thread_id.unwrap_or_default(),
            hit.message_id.unwrap_or_default()
        ),
    };
    let text = super::entries::one_line(&hit.text);
    let text: String = if text.chars().count() > 300 {
        text.chars().take(300).collect::<String>() + "…"
    } else {
        text
    };
    format!("[{} {place}] {text}", hit.source.as_str())
}

/// The tool's answer: one hit a line, or that there is none.
pub fn hits_text(hits: &[SearchHit]) -> String {
    if hits.is_empty() {
        return "No matches in your memory files, saved sessions or messages.".into();
    }
    hits.iter().map(hit_line).collect::<Vec<_>>().join("\n")
}

/// The system prompt's section of the hits most relevant to `message` (the thread's
/// latest user message): at most [`RELEVANT_HITS`], each on one bounded line saying
/// where it is, none far weaker than the best ([`RELEVANT_MIN_SHARE`]); the thread's
/// own messages are left out (they are in the context).
/// The same search as `memory_search` (hybrid when the agent's provider, `provider`,
/// has an embedding model; then the share is of the fused score).
/// "" when nothing matches or the search fails (a prompt without it still works).
pub async fn relevant_section(
    store: &crate::store::Store,
    catalog: &crate::providers::catalog::Catalog,
    provider: &str,
    agent: &str,
    thread_id: u64,
    message: &str,
) -> String {
    let terms = search_terms(message);
    if terms.is_empty() {
        // Nothing to match by word, and too little to mean anything.
        return String::new();
    }
    let hits = match vectors::search(
        store,
        catalog,
        agent,
        Ok(provider.to_string()),
        message,
        &terms,
        RELEVANT_HITS * 4,
        &SearchSource::ALL,
    )
    .await
    {
        Ok(answer) => answer.hits,
        Err(e) => {
            tracing::warn!(agent, error = %e, "no relevant section: the search failed");
            return String::new();
        }
    };
    let others: Vec<&SearchHit> = hits
        .iter()
        .filter(|h| !(h.source == SearchSource::Message && h.thread_id == Some(thread_id)))
        .collect();
    let best = others.first().map_or(0.0, |h| h.score);
    let lines: Vec<String> = others
        .into_iter()
        .filter(|h| h.score >= best * RELEVANT_MIN_SHARE)
        .take(RELEVANT_HITS)
        .map(|h| format!("- {}", hit_line(h)))
        .collect();
    if lines.is_empty() {
        return String::new();
    }
    format!(
        "# Relevant from your memory\nSearch hits for the latest message (memory_search finds more):\n{}",
        lines.join("\n")
    )
}
