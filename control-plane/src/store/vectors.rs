//! Embedding vectors of an agent's memory (`memory_vectors`, `memory_embedding`; see
//! `migrations/*/0030_memory_vectors.sql`): stored and read here, compared and
//! fused in `crate::memory::vectors`. Every read and write names the model, so
//! vectors of two models never meet.

use sqlx::Row;

use super::search::doc_hit;
use super::{SearchHit, Store, StoreError};

/// What a vector is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum VectorKind {
    /// A memory entry or a saved session's message, by the hash of its text.
    Doc,
    /// A thread's message, by its id.
    Message(u64),
}

impl VectorKind {
    fn parts(self) -> (&'static str, i64) {
        match self {
            VectorKind::Doc => ("doc", 0),
            VectorKind::Message(id) => ("message", id as i64),
        }
    }
}

/// One stored vector.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredVector {
    pub kind: VectorKind,
    /// sha256 of the text embedded, hex.
    pub text_hash: String,
    pub vector: Vec<f32>,
}

/// The f32s, little-endian, as hex.
pub fn encode_vector(vector: &[f32]) -> String {
    let mut out = String::with_capacity(vector.len() * 8);
    for x in vector {
        for b in x.to_le_bytes() {
            out.push_str(&format!("{b:02x}"));
        }
    }
    out
}

/// The inverse of [`encode_vector`]; `None` for text that is not one.
pub fn decode_vector(text: &str) -> Option<Vec<f32>> {
    if !text.len().is_multiple_of(8) || !text.is_ascii() {
        return None;
    }
    // A loop over bytes, not a parse per pair: a search decodes every vector.
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(text.len() / 8);
    for chunk in text.as_bytes().chunks_exact(8) {
        let mut bytes = [0u8; 4];
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (nibble(chunk[2 * i])? << 4) | nibble(chunk[2 * i + 1])?;
        }
        out.push(f32::from_le_bytes(bytes));
    }
    Some(out)
}

impl Store {
    /// The embedding model the agent's vectors were made with, and their size (0:
    /// none stored yet).
    pub async fn embedding_model(&self, agent: &str) -> Result<Option<(String, u64)>, StoreError> {
        let row = sqlx::query("SELECT model, dims FROM memory_embedding WHERE agent_name = $1")
            .bind(agent)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match row {
            Some(row) => Some((
                row.try_get("model")?,
                row.try_get::<i64, _>("dims")?.max(0) as u64,
            )),
            None => None,
        })
    }

    /// Records the model the agent's vectors are made with (and their size, once known).
    pub async fn set_embedding_model(
        &self,
        agent: &str,
        model: &str,
        dims: u64,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "INSERT INTO memory_embedding (agent_name, model, dims) VALUES ($1, $2, $3) \
                 ON CONFLICT (agent_name) DO UPDATE SET model = $2, dims = $3",
            )
            .bind(agent.to_owned())
            .bind(model.to_owned())
            .bind(dims as i64),
        )
        .await
        .map(drop)
    }

    /// Forgets the agent's vectors of every model and the model they were made with.
    pub async fn clear_vectors(&self, agent: &str) -> Result<(), StoreError> {
        let agent = agent.to_owned();
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query("DELETE FROM memory_vectors WHERE agent_name = $1")
                    .bind(&agent)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query("DELETE FROM memory_embedding WHERE agent_name = $1")
                    .bind(&agent)
                    .execute(&mut *tx)
                    .await?;
                Ok(())
            })
        })
        .await
    }

    /// The agent's vectors of `model`.
    pub async fn vectors(&self, agent: &str, model: &str) -> Result<Vec<StoredVector>, StoreError> {
        let rows = sqlx::query(
            "SELECT kind, message_id, text_hash, vector FROM memory_vectors \
             WHERE agent_name = $1 AND model = $2",
        )
        .bind(agent)
        .bind(model)
        .fetch_all(&self.pool)
        .await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let kind: String = row.try_get("kind")?;
            let id: i64 = row.try_get("message_id")?;
            let kind = match kind.as_str() {
                "doc" => VectorKind::Doc,
                "message" => VectorKind::Message(id.max(0) as u64),
                _ => continue,
            };
            let text: String = row.try_get("vector")?;
            let Some(vector) = decode_vector(&text) else {
                continue;
            };
            out.push(StoredVector {
                kind,
                text_hash: row.try_get("text_hash")?,
                vector,
            });
        }
        Ok(out)
    }

    /// Stores vectors of `model` (one already stored for the same thing is kept).
    pub async fn put_vectors(
        &self,
        agent: &str,
        model: &str,
        vectors: Vec<StoredVector>,
    ) -> Result<(), StoreError> {
        if vectors.is_empty() {
            return Ok(());
        }
        let (agent, model) = (agent.to_owned(), model.to_owned());
        self.write(move |tx| {
            Box::pin(async move {
                for v in &vectors {
                    let (kind, id) = v.kind.parts();
                    sqlx::query(
                        "INSERT INTO memory_vectors \
                         (agent_name, model, kind, message_id, text_hash, dims, vector) \
                         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                    )
                    .bind(&agent)
                    .bind(&model)
                    .bind(kind)
                    .bind(id)
                    .bind(&v.text_hash)
                    .bind(v.vector.len() as i64)
                    .bind(encode_vector(&v.vector))
                    .execute(&mut *tx)
                    .await?;
                }
                Ok(())
            })
        })
        .await
    }

    /// Forgets a message's vectors (its text changed: it is embedded again).
    pub async fn delete_message_vectors(
        &self,
        agent: &str,
        message_id: u64,
    ) -> Result<(), StoreError> {
        self.execute(
            sqlx::query(
                "DELETE FROM memory_vectors WHERE agent_name = $1 AND kind = 'message' \
                 AND message_id = $2",
            )
            .bind(agent.to_owned())
            .bind(message_id as i64),
        )
        .await
        .map(drop)
    }

    /// Every indexed memory entry and saved session message of the agent, as hits
    /// (score 0), in a fixed order.
    pub async fn search_doc_hits(&self, agent: &str) -> Result<Vec<SearchHit>, StoreError> {
        let sql = match self.backend {
            super::Backend::Sqlite => {
                "SELECT text, source, path, CAST(line AS INTEGER) AS line, session_id, \
                 CAST(thread_id AS INTEGER) AS thread_id FROM search_docs \
                 WHERE agent_name = $1 ORDER BY rowid"
            }
            super::Backend::Postgres => {
                "SELECT text, source, path, line, session_id, thread_id FROM search_docs \
                 WHERE agent_name = $1 ORDER BY id"
            }
        };
        let rows = sqlx::query(sql).bind(agent).fetch_all(&self.pool).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            if let Some(hit) = doc_hit(&row, 0.0)? {
                out.push(hit);
            }
        }
        Ok(out)
    }

    /// The agent's user and assistant messages (with text) that have no vector of
    /// `model` yet, newest first, at most `limit`: (id, text).
    pub async fn messages_without_vectors(
        &self,
        agent: &str,
        model: &str,
        limit: usize,
    ) -> Result<Vec<(u64, String)>, StoreError> {
        let rows = sqlx::query(
            "SELECT m.id AS id, m.content AS content FROM messages m \
             WHERE m.agent_name = $1 AND m.role IN ('user', 'assistant') \
             AND TRIM(m.content) <> '' AND NOT EXISTS (SELECT 1 FROM memory_vectors v \
             WHERE v.agent_name = $1 AND v.model = $2 AND v.kind = 'message' \
             AND v.message_id = m.id) ORDER BY m.id DESC LIMIT $3",
        )
        .bind(agent)
        .bind(model)
        .bind(limit as i64)
        .fetch_all(&self.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                Ok((
                    row.try_get::<i64, _>("id")?.max(0) as u64,
                    row.try_get("content")?,
                ))
            })
            .collect()
    }

    /// The agent's user and assistant messages `ids` as hits (score 0).
    pub async fn message_hits(
        &self,
        agent: &str,
        ids: &[u64],
    ) -> Result<Vec<SearchHit>, StoreError> {
        let mut out = Vec::new();
        for id in ids {
            let row = sqlx::query(
                "SELECT content, thread_id FROM messages WHERE agent_name = $1 AND id = $2 \
                 AND role IN ('user', 'assistant')",
            )
            .bind(agent)
            .bind(*id as i64)
            .fetch_optional(&self.pool)
            .await?;
            if let Some(row) = row {
                out.push(SearchHit {
                    text: row.try_get("content")?,
                    source: super::SearchSource::Message,
                    path: None,
                    line: None,
                    session_id: None,
                    thread_id: Some(row.try_get::<i64, _>("thread_id")?.max(0) as u64),
                    message_id: Some(*id),
                    score: 0.0,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{SearchDoc, ThreadStatus, test_store_with_agent};
    use chorus_proto::domain::ChatMessage;

    #[test]
    fn vectors_round_trip_as_text() {
        let v = vec![0.5f32, -1.25, 0.0, f32::MIN_POSITIVE];
        assert_eq!(decode_vector(&encode_vector(&v)), Some(v));
        assert_eq!(decode_vector("zz000000"), None);
        assert_eq!(decode_vector("abc"), None);
    }

    /// Vectors are kept per model (another model's are not read), a message without
    /// a vector of the model is listed until it has one, the model record is kept
    /// and cleared (on SQLite, or Postgres with `CHORUS_TEST_POSTGRES`).
    #[tokio::test]
    async fn vectors_are_kept_per_model_and_cleared() {
        let (store, _dir) = test_store_with_agent().await;
        let (thread, _) = store
            .create_thread(
                "a",
                &[
                    ChatMessage::user("my puppy is Rex"),
                    ChatMessage::assistant("", vec![]),
                ],
                "u",
                ThreadStatus::Idle,
                "",
                None,
            )
            .await
            .unwrap();
        store
            .index_memory(
                "a",
                vec![SearchDoc {
                    text: "crimson sedan".into(),
                    path: "memory/MEMORY.md".into(),
                    line: 3,
                    thread_id: None,
                }],
            )
            .await
            .unwrap();
        assert_eq!(store.embedding_model("a").await.unwrap(), None);
        store
            .set_embedding_model("a", "openai/e1", 0)
            .await
            .unwrap();
        store
            .set_embedding_model("a", "openai/e1", 3)
            .await
            .unwrap();
        assert_eq!(
            store.embedding_model("a").await.unwrap(),
            Some(("openai/e1".into(), 3))
        );

        let missing = store
            .messages_without_vectors("a", "openai/e1", 10)
            .await
            .unwrap();
        assert_eq!(missing.len(), 1, "the empty assistant text is not embedded");
        let (id, text) = missing[0].clone();
        assert_eq!(text, "my puppy is Rex");
        let doc = store.search_doc_hits("a").await.unwrap();
        assert_eq!(doc.len(), 1);
        assert_eq!(doc[0].line, Some(3));
        let v = |kind, x: f32| StoredVector {
            kind,
            text_hash: "h".into(),
            vector: vec![x, 0.0, 1.0],
        };
        store
            .put_vectors(
                "a",
                "openai/e1",
                vec![v(VectorKind::Message(id), 1.0), v(VectorKind::Doc, 2.0)],
            )
            .await
            .unwrap();
        // The same thing again is kept as it was.
        store
            .put_vectors("a", "openai/e1", vec![v(VectorKind::Doc, 9.0)])
            .await
            .unwrap();
        store
            .put_vectors("a", "ollama/e2", vec![v(VectorKind::Doc, 5.0)])
            .await
            .unwrap();
        let mut e1 = store.vectors("a", "openai/e1").await.unwrap();
        e1.sort_by_key(|v| v.kind == VectorKind::Doc);
        assert_eq!(
            e1,
            vec![v(VectorKind::Message(id), 1.0), v(VectorKind::Doc, 2.0)]
        );
        assert!(
            store
                .messages_without_vectors("a", "openai/e1", 10)
                .await
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            store
                .messages_without_vectors("a", "ollama/e2", 10)
                .await
                .unwrap()
                .len(),
            1
        );
        let hits = store.message_hits("a", &[id, 999]).await.unwrap();
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].thread_id, Some(thread));
        store.delete_message_vectors("a", id).await.unwrap();
        assert_eq!(store.vectors("a", "openai/e1").await.unwrap().len(), 1);

        // A new agent of the same name starts without the old one's vectors.
        store.mark_agent_destroyed("a", false).await.unwrap();
        let again = store.agent("a").await.unwrap().unwrap();
        store
            .register_agent(&crate::store::NewAgent {
                discord_channel_id: None,
                incarnation: "i2".into(),
                mcp_servers: None,
                heartbeat: None,
                name: "a".into(),
                model: None,
                system_prompt: again.system_prompt,
                permissions: "standard".into(),
                on_ask: crate::switches::OnAsk::Prompt,
                network: crate::switches::Network::On,
                backend: Default::default(),
                idle_timeout_secs: None,
            })
            .await
            .unwrap();
        assert_eq!(store.embedding_model("a").await.unwrap(), None);
        assert!(store.vectors("a", "ollama/e2").await.unwrap().is_empty());
        store
            .set_embedding_model("a", "openai/e1", 3)
            .await
            .unwrap();
        store
            .put_vectors("a", "openai/e1", vec![v(VectorKind::Doc, 2.0)])
            .await
            .unwrap();

        store.clear_vectors("a").await.unwrap();
        assert!(store.vectors("a", "openai/e1").await.unwrap().is_empty());
        assert!(store.vectors("a", "ollama/e2").await.unwrap().is_empty());
        assert_eq!(store.embedding_model("a").await.unwrap(), None);
    }
}
