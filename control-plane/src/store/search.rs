//! Ranked full-text search over an agent's memory (`search_docs`, `messages`; see
//! `migrations/*/0027_memory_search.sql`). The one query each backend words its own
//! way: SQLite's FTS5 ranked by `bm25`, Postgres's `to_tsvector('simple', …)` ranked
//! by `ts_rank`; both tokenise on letters and digits, without stemming.
//!
//! People's text never reaches the query language: [`search_terms`] keeps only its
//! words (letters and digits), each quoted as one term, joined by OR (a message's
//! words are rarely all in one fact; the ranking puts the entries with more of them,
//! and the rarer ones, first). So quotes, `*`, `-` or `NEAR` are words or nothing,
//! never syntax.

use serde::Serialize;
use sqlx::Row;

use super::{Backend, Store, StoreError};

/// Most words of a query that are searched for (the first ones).
pub const MAX_TERMS: usize = 32;

/// Where a hit is: the closed set the API and the tool name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SearchSource {
    /// An entry of a memory file (`memory/MEMORY.md`, a daily log).
    Memory,
    /// A message of a saved session.
    Session,
    /// A user or assistant message of one of the agent's threads.
    Message,
}

impl SearchSource {
    pub const ALL: [SearchSource; 3] = [
        SearchSource::Memory,
        SearchSource::Session,
        SearchSource::Message,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            SearchSource::Memory => "memory",
            SearchSource::Session => "session",
            SearchSource::Message => "message",
        }
    }

    pub fn parse(text: &str) -> Option<SearchSource> {
        Self::ALL.into_iter().find(|s| s.as_str() == text.trim())
    }
}

/// One indexed piece of a memory file or a saved session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchDoc {
    pub text: String,
    /// `memory/MEMORY.md`, `memory/2026-11-26.md`, `sessions/<file>`.
    pub path: String,
    /// The line in a memory file (0: not a memory entry).
    pub line: u64,
    /// The thread a session's message came from.
    pub thread_id: Option<u64>,
}

/// One hit, saying where it is.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchHit {
    pub text: String,
    pub source: SearchSource,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_id: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message_id: Option<u64>,
    /// Higher is better (`-bm25` on SQLite, `ts_rank` on Postgres).
    pub score: f64,
}

/// The words of a query, lowercased, each once, at most [`MAX_TERMS`].
pub fn search_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() {
            continue;
        }
        let word = word.to_lowercase();
        if !out.contains(&word) {
            out.push(word);
        }
        if out.len() == MAX_TERMS {
            break;
        }
    }
    out
}

/// The terms as one query of the backend's language (each a quoted phrase of one
/// word for FTS5; a lexeme for `to_tsquery`, which holds letters and digits only).
fn match_text(backend: Backend, terms: &[String]) -> String {
    match backend {
        Backend::Sqlite => terms
            .iter()
            .map(|t| format!("\"{t}\""))
            .collect::<Vec<_>>()
            .join(" OR "),
        Backend::Postgres => terms
            .iter()
            .map(|t| format!("'{t}'"))
            .collect::<Vec<_>>()
            .join(" | "),
    }
}

/// A row of `search_docs` (text, source, path, line, session_id, thread_id) as a
/// hit; `None` for a source this build does not know.
pub(super) fn doc_hit(
    row: &sqlx::any::AnyRow,
    score: f64,
) -> Result<Option<SearchHit>, StoreError> {
    let source: String = row.try_get("source")?;
    let Some(source) = SearchSource::parse(&source) else {
        return Ok(None);
    };
    let session_id: String = row.try_get("session_id")?;
    let thread_id: i64 = row.try_get("thread_id")?;
    let line: i64 = row.try_get("line")?;
    Ok(Some(SearchHit {
        text: row.try_get("text")?,
        source,
        path: Some(row.try_get("path")?),
        line: (source == SearchSource::Memory).then_some(line.max(0) as u64),
        session_id: (!session_id.is_empty()).then_some(session_id),
        thread_id: (thread_id > 0).then_some(thread_id as u64),
        message_id: None,
        score,
    }))
}

const INSERT_DOC: &str = "INSERT INTO search_docs (agent_name, source, path, line, session_id, thread_id, text) \
     VALUES ($1, $2, $3, $4, $5, $6, $7)";

impl Store {
    /// Replaces the indexed entries of an agent's memory files.
    pub async fn index_memory(&self, agent: &str, docs: Vec<SearchDoc>) -> Result<(), StoreError> {
        self.replace_docs(agent, SearchSource::Memory, None, docs)
            .await
    }

    /// Replaces the indexed messages of one saved session.
    pub async fn index_session(
        &self,
        agent: &str,
        session_id: &str,
        docs: Vec<SearchDoc>,
    ) -> Result<(), StoreError> {
        self.replace_docs(
            agent,
            SearchSource::Session,
            Some(session_id.to_string()),
            docs,
        )
        .await
    }

    /// Forgets everything indexed of an agent's files (before a rebuild).
    pub async fn clear_search_docs(&self, agent: &str) -> Result<(), StoreError> {
        self.execute(
            sqlx::query("DELETE FROM search_docs WHERE agent_name = $1").bind(agent.to_owned()),
        )
        .await
        .map(drop)
    }

    /// Rebuilds the index of the messages from the `messages` table (SQLite; on
    /// Postgres the index is an index of the table and needs nothing). Only a test
    /// needs it: the triggers keep the index in the transaction that stores a
    /// message, and a rebuild of every agent's messages would hold the one writer.
    #[cfg(test)]
    pub async fn rebuild_message_index(&self) -> Result<(), StoreError> {
        if self.backend == Backend::Sqlite {
            self.execute(sqlx::query(
                "INSERT INTO messages_fts(messages_fts) VALUES ('rebuild')",
            ))
            .await?;
        }
        Ok(())
    }

    async fn replace_docs(
        &self,
        agent: &str,
        source: SearchSource,
        session_id: Option<String>,
        docs: Vec<SearchDoc>,
    ) -> Result<(), StoreError> {
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                let session = session_id.unwrap_or_default();
                sqlx::query(
                    "DELETE FROM search_docs WHERE agent_name = $1 AND source = $2 \
                     AND session_id = $3",
                )
                .bind(&agent)
                .bind(source.as_str())
                .bind(&session)
                .execute(&mut *tx)
                .await?;
                for doc in docs {
                    sqlx::query(INSERT_DOC)
                        .bind(&agent)
                        .bind(source.as_str())
                        .bind(&doc.path)
                        .bind(doc.line as i64)
                        .bind(&session)
                        .bind(doc.thread_id.unwrap_or(0) as i64)
                        .bind(&doc.text)
                        .execute(&mut *tx)
                        .await?;
                }
                Ok(())
            })
        })
        .await
    }

    /// The `k` best hits for `terms` among `sources` of an agent, best first.
    pub async fn search(
        &self,
        agent: &str,
        terms: &[String],
        k: usize,
        sources: &[SearchSource],
    ) -> Result<Vec<SearchHit>, StoreError> {
        if terms.is_empty() || k == 0 {
            return Ok(Vec::new());
        }
        let query = match_text(self.backend, terms);
        let mut hits = Vec::new();
        let files: Vec<&str> = sources
            .iter()
            .filter(|s| **s != SearchSource::Message)
            .map(|s| s.as_str())
            .collect();
        if !files.is_empty() {
            let sql = match self.backend {
                Backend::Sqlite => {
                    "SELECT text, source, path, CAST(line AS INTEGER) AS line, session_id, \
                     CAST(thread_id AS INTEGER) AS thread_id, -bm25(search_docs) AS score \
                     FROM search_docs WHERE search_docs MATCH $2 AND agent_name = $1 \
                     ORDER BY bm25(search_docs), rowid LIMIT $3"
                }
                Backend::Postgres => {
                    "SELECT text, source, path, line, session_id, thread_id, \
                     CAST(ts_rank(to_tsvector('simple', text), q) AS DOUBLE PRECISION) AS score \
                     FROM search_docs, to_tsquery('simple', $2) q \
                     WHERE agent_name = $1 AND to_tsvector('simple', text) @@ q \
                     ORDER BY score DESC, id LIMIT $3"
                }
            };
            // Asked for more than k of each, so that leaving out a source still leaves k.
            let rows = sqlx::query(sql)
                .bind(agent)
                .bind(&query)
                .bind((k * 4) as i64)
                .fetch_all(&self.pool)
                .await?;
            for row in rows {
                let Some(hit) = doc_hit(&row, row.try_get("score")?)? else {
                    continue;
                };
                if files.contains(&hit.source.as_str()) {
                    hits.push(hit);
                }
            }
        }
        if sources.contains(&SearchSource::Message) {
            let sql = match self.backend {
                Backend::Sqlite => {
                    "SELECT m.content AS text, m.thread_id AS thread_id, m.id AS id, \
                     -bm25(messages_fts) AS score \
                     FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid \
                     WHERE messages_fts MATCH $2 AND m.agent_name = $1 \
                     AND m.role IN ('user', 'assistant') \
                     ORDER BY bm25(messages_fts), m.id LIMIT $3"
                }
                Backend::Postgres => {
                    "SELECT content AS text, thread_id, id, \
                     CAST(ts_rank(to_tsvector('simple', content), q) AS DOUBLE PRECISION) AS score \
                     FROM messages, to_tsquery('simple', $2) q \
                     WHERE agent_name = $1 AND role IN ('user', 'assistant') \
                     AND to_tsvector('simple', content) @@ q \
                     ORDER BY score DESC, id LIMIT $3"
                }
            };
            let rows = sqlx::query(sql)
                .bind(agent)
                .bind(&query)
                .bind(k as i64)
                .fetch_all(&self.pool)
                .await?;
            for row in rows {
                hits.push(SearchHit {
                    text: row.try_get("text")?,
                    source: SearchSource::Message,
                    path: None,
                    line: None,
                    session_id: None,
                    thread_id: Some(row.try_get::<i64, _>("thread_id")?.max(0) as u64),
                    message_id: Some(row.try_get::<i64, _>("id")?.max(0) as u64),
                    score: row.try_get("score")?,
                });
            }
        }
        // Best first; equal scores in a fixed order, so a rebuild answers the same.
        hits.sort_by(|a, b| {
            b.score
                .total_cmp(&a.score)
                .then_with(|| a.source.as_str().cmp(b.source.as_str()))
                .then_with(|| a.path.cmp(&b.path))
                .then_with(|| a.line.cmp(&b.line))
                .then_with(|| a.message_id.cmp(&b.message_id))
                .then_with(|| a.text.cmp(&b.text))
        });
        hits.truncate(k);
        Ok(hits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{ThreadStatus, test_store_with_agent};
    use chorus_proto::domain::{ChatMessage, ToolCall};

    fn doc(text: &str, path: &str, line: u64) -> SearchDoc {
        SearchDoc {
            text: text.into(),
            path: path.into(),
            line,
            thread_id: None,
        }
    }

    fn words(q: &str) -> Vec<String> {
        search_terms(q)
    }

    /// Memory entries, a saved session and a thread's messages are found by their
    /// words, each saying where it is; a tool's output is not a message hit; a
    /// rebuild from scratch answers the same (on SQLite, or Postgres with
    /// `CHORUS_TEST_POSTGRES`).
    #[tokio::test]
    async fn hits_say_where_they_are_and_a_rebuild_answers_the_same() {
        let (store, _dir) = test_store_with_agent().await;
        let call = ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: "{}".into(),
        };
        let (thread, _) = store
            .create_thread(
                "a",
                &[
                    ChatMessage::user("the parking spot is number forty two"),
                    ChatMessage::assistant("Noted: forty two, level B.", vec![call.clone()]),
                    ChatMessage::tool_result(&call, "pelican in a tool output", false),
                ],
                "u",
                ThreadStatus::Idle,
                "",
                None,
            )
            .await
            .unwrap();
        let memory = vec![
            doc("The user prefers metric units.", "memory/MEMORY.md", 3),
            doc("Deployed the pelican site.", "memory/2026-11-26.md", 3),
        ];
        store.index_memory("a", memory.clone()).await.unwrap();
        let session = vec![SearchDoc {
            text: "the wifi password hint is pelican".into(),
            path: "sessions/x.json".into(),
            line: 0,
            thread_id: Some(7),
        }];
        store
            .index_session("a", "s-1", session.clone())
            .await
            .unwrap();

        let all = &SearchSource::ALL[..];
        let hits = store.search("a", &words("pelican"), 10, all).await.unwrap();
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(hits.iter().all(|h| h.source != SearchSource::Message));
        let s = hits
            .iter()
            .find(|h| h.source == SearchSource::Session)
            .unwrap();
        assert_eq!(s.session_id.as_deref(), Some("s-1"));
        assert_eq!(s.thread_id, Some(7));
        let m = hits
            .iter()
            .find(|h| h.source == SearchSource::Memory)
            .unwrap();
        assert_eq!(
            (m.path.as_deref(), m.line),
            (Some("memory/2026-11-26.md"), Some(3))
        );

        let hits = store
            .search("a", &words("Forty-Two"), 10, all)
            .await
            .unwrap();
        assert_eq!(hits.len(), 2, "{hits:?}");
        assert!(
            hits.iter()
                .all(|h| h.source == SearchSource::Message && h.thread_id == Some(thread))
        );
        assert!(hits.iter().all(|h| h.message_id.is_some()));

        // Only the sources asked; the better match first.
        let hits = store
            .search(
                "a",
                &words("metric pelican units"),
                10,
                &[SearchSource::Memory],
            )
            .await
            .unwrap();
        assert_eq!(hits.len(), 2);
        assert_eq!(hits[0].text, "The user prefers metric units.");
        assert!(hits[0].score > hits[1].score);

        // Query syntax in people's text is words, not an error.
        for q in [
            r#""pelican"#,
            "pelican*",
            "-pelican",
            "NEAR(pelican units)",
            "a OR",
            "'; DROP",
        ] {
            store
                .search("a", &words(q), 10, all)
                .await
                .unwrap_or_else(|e| panic!("{q}: {e}"));
        }
        // Another agent's index is not searched.
        assert!(
            store
                .search("b", &words("pelican"), 10, all)
                .await
                .unwrap()
                .is_empty()
        );

        // A changed message is found by its new words only.
        store
            .set_first_message("a", thread, "the car is at spot seven")
            .await
            .unwrap();
        let spot = store.search("a", &words("spot"), 10, all).await.unwrap();
        assert_eq!(spot.len(), 1);
        assert!(
            store
                .search("a", &words("parking"), 10, all)
                .await
                .unwrap()
                .is_empty()
        );

        let before: Vec<Vec<SearchHit>> = {
            let mut out = Vec::new();
            for q in ["pelican", "forty two", "metric units spot", "seven level"] {
                out.push(store.search("a", &words(q), 10, all).await.unwrap());
            }
            out
        };
        store.clear_search_docs("a").await.unwrap();
        assert!(
            store
                .search("a", &words("pelican"), 10, all)
                .await
                .unwrap()
                .is_empty()
        );
        store.index_session("a", "s-1", session).await.unwrap();
        store.index_memory("a", memory).await.unwrap();
        store.rebuild_message_index().await.unwrap();
        for (i, q) in ["pelican", "forty two", "metric units spot", "seven level"]
            .iter()
            .enumerate()
        {
            let after = store.search("a", &words(q), 10, all).await.unwrap();
            assert_eq!(after, before[i], "{q}");
        }
    }

    #[test]
    fn query_syntax_in_peoples_text_is_only_words() {
        assert_eq!(
            search_terms(r#"say "NEAR(a b)" -x * OR foo* 'bar'"#),
            ["say", "near", "a", "b", "x", "or", "foo", "bar"]
        );
        assert!(search_terms(r#"" * - ( ) :"#).is_empty());
        assert_eq!(search_terms("Zürich zürich"), ["zürich"]);
        assert_eq!(
            match_text(Backend::Sqlite, &search_terms("a-b")),
            r#""a" OR "b""#
        );
        assert_eq!(
            match_text(Backend::Postgres, &search_terms("a-b")),
            "'a' | 'b'"
        );
        let many = (0..100)
            .map(|i| format!("w{i}"))
            .collect::<Vec<_>>()
            .join(" ");
        assert_eq!(search_terms(&many).len(), MAX_TERMS);
    }
}
