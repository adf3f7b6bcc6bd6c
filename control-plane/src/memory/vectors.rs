//! Hybrid ranking: when the agent's provider has an embedding model
//! (`[providers.<name>] embedding_model`), a search ranks the agent's memory entries,
//! saved sessions and messages by the cosine of their vectors to the query's too,
//! and merges that list with the lexical one by reciprocal rank ([`fuse`], k = 60).
//! Without one, or when embedding fails, the answer is the lexical list and says why
//! (`ranking`, `ranking_note`): a search never fails because embeddings do.
//!
//! **Vectors are made lazily, at search** (and all at once by `POST …/memory/reindex`):
//! a search embeds the query together with up to [`EMBED_PER_SEARCH`] texts that have
//! no vector of the model yet (newest messages first), in one request. That is the one
//! place vectors are written, so memory entries, saved sessions and messages need no
//! hook where they are stored, and a hand edit, a session saved while the provider was
//! down, or a message stored by any path is covered by the next search (every run
//! starts with one, for the prompt's relevant section). Docs are keyed by the hash of
//! their text (an unchanged entry keeps its vector when lines move); messages by id,
//! and a message whose text changed since is embedded again.
//!
//! A server that cannot be reached (no answer within the deadline, connection refused)
//! is not asked again for [`RETRY_AFTER`]; searches meanwhile are lexical, saying so.
//!
//! **Never mixed**: vectors are stored per model (`<provider>/<model>`) and the agent's
//! record (`memory_embedding`) names the model its vectors were made with. Another
//! model configured since pauses vector search for the agent (lexical, with a note
//! saying so) until reindex clears its vectors and embeds with the new one.
//!
//! **Scale**: brute force in Rust over the agent's vectors of the model, read from the
//! database per search: fine for the few thousand texts an agent's memory holds (a
//! 1,536-dimension vector is 12 KB of hex; reading, decoding and comparing 2,000 of
//! them took 0.7-0.9 s in a debug build on a loaded two-core machine, the comparing
//! 40 ms of it). Past that, a cache of the decoded vectors or an index in the
//! database (sqlite-vec, pgvector) is the next step.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::providers::ProviderEndpoint;
use crate::providers::catalog::Catalog;
use crate::providers::embeddings::{self, MAX_BATCH};
use crate::store::{SearchHit, SearchSource, Store, StoreError, StoredVector, VectorKind};

/// Reciprocal-rank fusion's constant: a hit's score is the sum over the lists it is
/// in of 1 / (`RRF_K` + its rank there).
pub const RRF_K: f64 = 60.0;
/// Most texts without a vector one search embeds (with the query, one request).
pub const EMBED_PER_SEARCH: usize = MAX_BATCH - 1;
/// How deep each list goes before fusion (at least `k`).
pub const LIST_DEPTH: usize = 20;

/// Which ranking an answer used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Ranking {
    /// Lexical and vector lists fused by rank.
    Hybrid,
    /// Full-text only (no embedding model, vector search paused, or embedding failed).
    Lexical,
}

/// A search's answer: `{"hits": […], "ranking": "hybrid"|"lexical", "ranking_note"?}`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchAnswer {
    pub hits: Vec<SearchHit>,
    pub ranking: Ranking,
    /// Why the ranking is lexical, or what hybrid ranking has not covered yet.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranking_note: Option<String>,
}

/// `POST …/memory/reindex`'s answer about vectors.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReindexAnswer {
    pub reindexed: bool,
    pub ranking: Ranking,
    /// `<provider>/<model>` the agent's memory is now embedded with.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub embedding_model: Option<String>,
    /// Texts embedded.
    pub embedded: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranking_note: Option<String>,
}

/// The embedding model an agent's search uses now.
#[derive(Debug, Clone)]
pub struct Embedding {
    endpoint: ProviderEndpoint,
    /// As the provider names it.
    model: String,
    /// `<provider>/<model>`: what vectors are stored under.
    key: String,
    /// The size of the agent's vectors (0: none stored yet).
    dims: u64,
}

/// Whether an agent's search can use vectors now, and if not, why.
pub async fn plan(
    store: &Store,
    catalog: &Catalog,
    agent: &str,
    provider: Result<String, String>,
) -> Result<Result<Embedding, String>, StoreError> {
    let provider = match provider {
        Ok(p) => p,
        Err(why) => return Ok(Err(why)),
    };
    let Some(endpoint) = catalog.endpoint(&provider) else {
        return Ok(Err(format!(
            "the agent's provider '{provider}' is not configured"
        )));
    };
    let Some(model) = endpoint.embedding_model.clone() else {
        let why = if endpoint.kind.offers_embeddings() {
            format!(
                "no embedding model is configured for the agent's provider ({provider}); set \
                 [providers.{provider}] embedding_model for hybrid ranking"
            )
        } else {
            format!("the agent's provider ({provider}) offers no embeddings")
        };
        return Ok(Err(why));
    };
    let key = format!("{provider}/{model}");
    let dims = match store.embedding_model(agent).await? {
        None => {
            // The first use: nothing stored to mix with.
            store.set_embedding_model(agent, &key, 0).await?;
            0
        }
        Some((recorded, dims)) if recorded == key => dims,
        Some((recorded, _)) => {
            return Ok(Err(format!(
                "vector search is paused: this agent's vectors were made with '{recorded}' and \
                 its provider's embedding model is now '{key}'; POST \
                 /api/agents/{agent}/memory/reindex embeds its memory with '{key}'"
            )));
        }
    };
    Ok(Ok(Embedding {
        endpoint: endpoint.clone(),
        model,
        key,
        dims,
    }))
}

/// sha256 of a text, hex: what a doc's vector is keyed by.
pub fn text_hash(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// `v` scaled to length 1 (a zero vector stays zero: it is like nothing).
pub fn normalized(mut v: Vec<f32>) -> Vec<f32> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        v.iter_mut().for_each(|x| *x /= norm);
    }
    v
}

/// The cosine of two vectors of length 1 (0 for vectors of different sizes).
pub fn cosine(a: &[f32], b: &[f32]) -> f64 {
    if a.len() != b.len() {
        return 0.0;
    }
    a.iter().zip(b).map(|(x, y)| f64::from(x * y)).sum()
}

/// What makes two hits the same place.
fn same(a: &SearchHit, b: &SearchHit) -> bool {
    a.source == b.source
        && a.path == b.path
        && a.line == b.line
        && a.session_id == b.session_id
        && a.message_id == b.message_id
        && a.text == b.text
}

/// Reciprocal-rank fusion of ranked lists: each hit scores the sum of
/// 1 / ([`RRF_K`] + rank) over the lists it is in (rank from 1) and keeps where it
/// is; the best `k`, in a fixed order for equal scores.
pub fn fuse(lists: &[Vec<SearchHit>], k: usize) -> Vec<SearchHit> {
    let mut fused: Vec<SearchHit> = Vec::new();
    for list in lists {
        for (rank, hit) in list.iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f64 + 1.0);
            match fused.iter_mut().find(|h| same(h, hit)) {
                Some(h) => h.score += add,
                None => fused.push(SearchHit {
                    score: add,
                    ..hit.clone()
                }),
            }
        }
    }
    fused.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.source.as_str().cmp(b.source.as_str()))
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.line.cmp(&b.line))
            .then_with(|| a.message_id.cmp(&b.message_id))
            .then_with(|| a.text.cmp(&b.text))
    });
    fused.truncate(k);
    fused
}

/// How long a server that could not be reached (no answer in time, connection
/// refused) is not asked again: a provider that hangs costs one deadline per this,
/// not one per search (and every run starts with a search). A server that answered
/// with an error is asked again at once (that costs little).
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

/// Servers not reached lately: (base URL, not asked before, why).
type Unreachable = Vec<(String, Instant, String)>;

fn unreachable_list() -> std::sync::MutexGuard<'static, Unreachable> {
    static LIST: Mutex<Unreachable> = Mutex::new(Vec::new());
    LIST.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why `server` is not asked now, if it was not reached lately.
fn unreachable_now(server: &str) -> Option<String> {
    let now = Instant::now();
    let mut list = unreachable_list();
    list.retain(|(_, until, _)| *until > now);
    list.iter()
        .find(|(s, _, _)| s == server)
        .map(|(_, until, why)| {
            format!(
                "{why} (not asked again for {} s)",
                until.saturating_duration_since(now).as_secs().max(1)
            )
        })
}

/// A thing to embed: what its vector is of, its text's hash and its text.
struct Pending {
    kind: VectorKind,
    hash: String,
    text: String,
}

/// Why vectors could not be used for a search (said in the answer and the log).
#[derive(Debug)]
pub enum VectorError {
    Store(StoreError),
    Embed(String),
}

impl From<StoreError> for VectorError {
    fn from(e: StoreError) -> Self {
        VectorError::Store(e)
    }
}

/// Embeds `query` (if any) and `pending` in one request, stores the pending ones'
/// vectors and returns the query's. Checks the size against the agent's vectors.
async fn embed_and_store(
    store: &Store,
    catalog: &Catalog,
    agent: &str,
    embedding: &mut Embedding,
    query: Option<&str>,
    pending: Vec<Pending>,
) -> Result<Option<Vec<f32>>, VectorError> {
    let mut texts: Vec<String> = query.map(str::to_string).into_iter().collect();
    texts.extend(pending.iter().map(|p| p.text.clone()));
    if texts.is_empty() {
        return Ok(None);
    }
    let server = embedding.endpoint.base_url.clone();
    if let Some(why) = unreachable_now(&server) {
        return Err(VectorError::Embed(why));
    }
    let vectors = match embeddings::embed(
        catalog.http(),
        &embedding.endpoint,
        &embedding.model,
        &texts,
    )
    .await
    {
        Ok(vectors) => {
            unreachable_list().retain(|(s, _, _)| *s != server);
            vectors
        }
        Err(e @ embeddings::EmbedError::Failed { .. }) => {
            let why = e.to_string();
            let mut list = unreachable_list();
            list.retain(|(s, _, _)| *s != server);
            list.push((server, Instant::now() + RETRY_AFTER, why.clone()));
            return Err(VectorError::Embed(why));
        }
        Err(e) => return Err(VectorError::Embed(e.to_string())),
    };
    let dims = vectors.first().map_or(0, Vec::len) as u64;
    if embedding.dims != 0 && dims != embedding.dims {
        return Err(VectorError::Embed(format!(
            "'{}' answered vectors of {dims} dimensions where this agent's have {}; if the \
             model changed, POST /api/agents/{agent}/memory/reindex embeds again",
            embedding.key, embedding.dims
        )));
    }
    if embedding.dims == 0 {
        store
            .set_embedding_model(agent, &embedding.key, dims)
            .await?;
        embedding.dims = dims;
    }
    let mut vectors = vectors.into_iter().map(normalized);
    let query = if query.is_some() {
        vectors.next()
    } else {
        None
    };
    let stored: Vec<StoredVector> = pending
        .into_iter()
        .zip(vectors)
        .map(|(p, vector)| StoredVector {
            kind: p.kind,
            text_hash: p.hash,
            vector,
        })
        .collect();
    store.put_vectors(agent, &embedding.key, stored).await?;
    Ok(query)
}

/// The texts of the agent's docs (`docs`) and messages that have no vector of the
/// model, at most `limit` (+1 to tell whether more wait), docs first.
async fn pending(
    store: &Store,
    agent: &str,
    embedding: &Embedding,
    docs: &[SearchHit],
    stored: &[StoredVector],
    messages: bool,
    limit: usize,
) -> Result<Vec<Pending>, StoreError> {
    let have: HashSet<&str> = stored
        .iter()
        .filter(|v| v.kind == VectorKind::Doc)
        .map(|v| v.text_hash.as_str())
        .collect();
    let mut seen = HashSet::new();
    let mut out: Vec<Pending> = Vec::new();
    for doc in docs {
        if out.len() > limit {
            break;
        }
        let hash = text_hash(&doc.text);
        if !have.contains(hash.as_str()) && seen.insert(hash.clone()) {
            out.push(Pending {
                kind: VectorKind::Doc,
                hash,
                text: doc.text.clone(),
            });
        }
    }
    if messages && out.len() <= limit {
        let room = limit + 1 - out.len();
        for (id, text) in store
            .messages_without_vectors(agent, &embedding.key, room)
            .await?
        {
            out.push(Pending {
                kind: VectorKind::Message(id),
                hash: text_hash(&text),
                text,
            });
        }
    }
    Ok(out)
}

/// The agent's hits among `sources` ranked by their vectors' cosine to `query`'s
/// (those with a positive one, best first, at most `depth`), embedding what has no
/// vector yet (at most [`EMBED_PER_SEARCH`]); and how many texts still wait.
async fn vector_hits(
    store: &Store,
    catalog: &Catalog,
    agent: &str,
    embedding: &mut Embedding,
    query: &str,
    depth: usize,
    sources: &[SearchSource],
) -> Result<(Vec<SearchHit>, bool), VectorError> {
    let docs: Vec<SearchHit> = store
        .search_doc_hits(agent)
        .await?
        .into_iter()
        .filter(|h| sources.contains(&h.source))
        .collect();
    let messages = sources.contains(&SearchSource::Message);
    let mut stored = store.vectors(agent, &embedding.key).await?;
    let mut waiting = pending(
        store,
        agent,
        embedding,
        &docs,
        &stored,
        messages,
        EMBED_PER_SEARCH,
    )
    .await?;
    let more = waiting.len() > EMBED_PER_SEARCH;
    waiting.truncate(EMBED_PER_SEARCH);
    let embeds_any = !waiting.is_empty();
    let q = embed_and_store(store, catalog, agent, embedding, Some(query), waiting)
        .await?
        .unwrap_or_default();
    if embeds_any {
        // Read back what was stored (the same as embedded) rather than keep copies.
        stored = store.vectors(agent, &embedding.key).await?;
    }

    let by_hash: HashMap<&str, &[f32]> = stored
        .iter()
        .filter(|v| v.kind == VectorKind::Doc)
        .map(|v| (v.text_hash.as_str(), v.vector.as_slice()))
        .collect();
    let mut scored: Vec<SearchHit> = docs
        .into_iter()
        .filter_map(|doc| {
            let v = by_hash.get(text_hash(&doc.text).as_str())?;
            let score = cosine(&q, v);
            (score > 0.0).then_some(SearchHit { score, ..doc })
        })
        .collect();
    if messages {
        let mut best: Vec<(u64, &str, f64)> = stored
            .iter()
            .filter_map(|v| match v.kind {
                VectorKind::Message(id) => Some((id, v.text_hash.as_str(), cosine(&q, &v.vector))),
                VectorKind::Doc => None,
            })
            .filter(|(_, _, score)| *score > 0.0)
            .collect();
        best.sort_by(|a, b| b.2.total_cmp(&a.2).then(a.0.cmp(&b.0)));
        best.truncate(depth);
        let ids: Vec<u64> = best.iter().map(|(id, _, _)| *id).collect();
        for hit in store.message_hits(agent, &ids).await? {
            let id = hit.message_id.unwrap_or_default();
            let Some((_, hash, score)) = best.iter().find(|(i, _, _)| *i == id) else {
                continue;
            };
            if *hash != text_hash(&hit.text) {
                // Edited since: embedded again by a later search.
                store.delete_message_vectors(agent, id).await?;
                continue;
            }
            scored.push(SearchHit {
                score: *score,
                ..hit
            });
        }
    }
    scored.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.message_id.cmp(&b.message_id))
            .then_with(|| a.path.cmp(&b.path))
            .then_with(|| a.line.cmp(&b.line))
    });
    scored.truncate(depth);
    Ok((scored, more))
}

/// A search of the agent's memory: the lexical hits for `terms`, fused with the
/// vector hits for `query` when the agent's provider (`provider`, or why it is not
/// known) has an embedding model and the agent's vectors are of it.
#[allow(clippy::too_many_arguments)]
pub async fn search(
    store: &Store,
    catalog: &Catalog,
    agent: &str,
    provider: Result<String, String>,
    query: &str,
    terms: &[String],
    k: usize,
    sources: &[SearchSource],
) -> Result<SearchAnswer, StoreError> {
    let depth = k.max(LIST_DEPTH);
    let mut lexical = store.search(agent, terms, depth, sources).await?;
    let lexical_only = |mut hits: Vec<SearchHit>, note: String| {
        hits.truncate(k);
        SearchAnswer {
            hits,
            ranking: Ranking::Lexical,
            ranking_note: Some(note),
        }
    };
    let mut embedding = match plan(store, catalog, agent, provider).await? {
        Ok(embedding) => embedding,
        Err(why) => return Ok(lexical_only(lexical, why)),
    };
    match vector_hits(store, catalog, agent, &mut embedding, query, depth, sources).await {
        Ok((vector, more)) => {
            let hits = fuse(&[std::mem::take(&mut lexical), vector], k);
            Ok(SearchAnswer {
                hits,
                ranking: Ranking::Hybrid,
                ranking_note: more.then(|| {
                    format!(
                        "some texts have no vector yet (a search embeds at most \
                         {EMBED_PER_SEARCH}); POST /api/agents/{agent}/memory/reindex embeds all"
                    )
                }),
            })
        }
        Err(VectorError::Store(e)) => Err(e),
        Err(VectorError::Embed(why)) => {
            tracing::warn!(agent, model = %embedding.key, error = %why, "embedding failed; this search is lexical only");
            Ok(lexical_only(
                lexical,
                format!("embedding failed, so this search is lexical only: {why}"),
            ))
        }
    }
}

/// Forgets the agent's vectors and embeds its memory entries, saved sessions and
/// messages again with the embedding model configured now (all of them, in batches
/// of [`MAX_BATCH`]); with none, search stays lexical.
pub async fn reindex(
    store: &Store,
    catalog: &Catalog,
    agent: &str,
    provider: Result<String, String>,
) -> Result<ReindexAnswer, StoreError> {
    store.clear_vectors(agent).await?;
    let lexical = |note: String, embedded: usize, model: Option<String>| ReindexAnswer {
        reindexed: true,
        ranking: Ranking::Lexical,
        embedding_model: model,
        embedded,
        ranking_note: Some(note),
    };
    let mut embedding = match plan(store, catalog, agent, provider).await? {
        Ok(embedding) => embedding,
        Err(why) => return Ok(lexical(why, 0, None)),
    };
    let docs = store.search_doc_hits(agent).await?;
    let mut embedded = 0;
    loop {
        let stored = store.vectors(agent, &embedding.key).await?;
        let mut batch = pending(store, agent, &embedding, &docs, &stored, true, MAX_BATCH).await?;
        batch.truncate(MAX_BATCH);
        if batch.is_empty() {
            break;
        }
        let count = batch.len();
        match embed_and_store(store, catalog, agent, &mut embedding, None, batch).await {
            Ok(_) => embedded += count,
            Err(VectorError::Store(e)) => return Err(e),
            Err(VectorError::Embed(why)) => {
                tracing::warn!(agent, model = %embedding.key, error = %why, "embedding failed while reindexing");
                return Ok(lexical(
                    format!(
                        "embedding failed after {embedded} texts: {why}; later searches embed \
                         the rest"
                    ),
                    embedded,
                    Some(embedding.key),
                ));
            }
        }
    }
    Ok(ReindexAnswer {
        reindexed: true,
        ranking: Ranking::Hybrid,
        embedding_model: Some(embedding.key),
        embedded,
        ranking_note: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(text: &str, source: SearchSource, score: f64) -> SearchHit {
        SearchHit {
            text: text.into(),
            source,
            path: (source != SearchSource::Message).then(|| "memory/MEMORY.md".into()),
            line: (source == SearchSource::Memory).then_some(1),
            session_id: None,
            thread_id: None,
            message_id: (source == SearchSource::Message).then_some(text.len() as u64),
            score,
        }
    }

    #[test]
    fn fusion_ranks_by_reciprocal_rank_and_keeps_where_hits_are() {
        let a = hit("alpha", SearchSource::Memory, 9.0);
        let b = hit("beta", SearchSource::Memory, 5.0);
        let c = hit("gamma message", SearchSource::Message, 0.9);
        let lexical = vec![a.clone(), b.clone()];
        let vector = vec![c.clone(), b.clone()];
        let fused = fuse(&[lexical, vector], 10);
        // b is second in both lists: 2/62 beats a's and c's 1/61.
        assert_eq!(fused[0].text, "beta");
        assert!((fused[0].score - 2.0 / 62.0).abs() < 1e-12);
        assert_eq!(fused.len(), 3);
        assert_eq!(
            fused[1].text, "alpha",
            "ties in a fixed order: memory first"
        );
        assert_eq!(fused[2].message_id, c.message_id);
        assert_eq!(fuse(&[vec![a.clone()], vec![]], 10)[0].path, a.path);
        assert_eq!(fuse(&[vec![a, b], vec![c]], 1).len(), 1);
    }

    /// No embedding model, or a provider without embeddings: lexical, saying why. The
    /// first use records the model; another one pauses until reindex, which records
    /// it; embeddings that cannot be reached leave the lexical hits (on SQLite, or
    /// Postgres with `CHORUS_TEST_POSTGRES`).
    #[tokio::test]
    async fn vectors_follow_the_providers_model_and_pause_on_a_change() {
        use crate::providers::ProviderKind;
        use crate::store::SearchDoc;
        let (store, _dir) = crate::store::test_store_with_agent().await;
        let endpoint = |kind, model: Option<&str>| ProviderEndpoint {
            kind,
            // Nothing listens there: every embedding fails at once.
            base_url: "http://127.0.0.1:9".into(),
            api_key: None,
            configured: true,
            embedding_model: model.map(Into::into),
        };
        let catalog = |model| {
            Catalog::uncached(vec![
                endpoint(ProviderKind::OpenAi, model),
                endpoint(ProviderKind::Anthropic, None),
            ])
        };
        let openai = || Ok("openai".to_string());
        let none = catalog(None);
        let why = plan(&store, &none, "a", openai())
            .await
            .unwrap()
            .unwrap_err();
        assert!(why.contains("no embedding model is configured"), "{why}");
        let why = plan(&store, &none, "a", Ok("anthropic".into()))
            .await
            .unwrap()
            .unwrap_err();
        assert!(why.contains("offers no embeddings"), "{why}");
        let why = plan(&store, &none, "a", Err("no model".into()))
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(why, "no model");
        assert_eq!(store.embedding_model("a").await.unwrap(), None);

        let e1 = catalog(Some("e1"));
        let first = plan(&store, &e1, "a", openai()).await.unwrap().unwrap();
        assert_eq!(first.key, "openai/e1");
        assert_eq!(
            store.embedding_model("a").await.unwrap(),
            Some(("openai/e1".into(), 0))
        );
        let e2 = catalog(Some("e2"));
        let why = plan(&store, &e2, "a", openai()).await.unwrap().unwrap_err();
        assert!(
            why.contains("paused") && why.contains("'openai/e1'") && why.contains("'openai/e2'"),
            "{why}"
        );

        store
            .index_memory(
                "a",
                vec![SearchDoc {
                    text: "a crimson sedan".into(),
                    path: "memory/MEMORY.md".into(),
                    line: 3,
                    thread_id: None,
                }],
            )
            .await
            .unwrap();
        let answer = reindex(&store, &e2, "a", openai()).await.unwrap();
        assert_eq!(answer.ranking, Ranking::Lexical);
        assert_eq!(answer.embedding_model.as_deref(), Some("openai/e2"));
        let note = answer.ranking_note.unwrap();
        assert!(note.contains("embedding failed after 0 texts"), "{note}");
        assert_eq!(
            store.embedding_model("a").await.unwrap(),
            Some(("openai/e2".into(), 0))
        );
        let terms = crate::store::search_terms("crimson");
        let answer = search(
            &store,
            &e2,
            "a",
            openai(),
            "crimson",
            &terms,
            5,
            &SearchSource::ALL,
        )
        .await
        .unwrap();
        assert_eq!(answer.ranking, Ranking::Lexical);
        assert_eq!(answer.hits.len(), 1);
        let note = answer.ranking_note.unwrap();
        assert!(
            note.contains("embedding failed"),
            "a search never fails because embeddings do: {note}"
        );
        // The server was not reached: not asked again for a while (a hung one would
        // cost every search its deadline).
        assert!(note.contains("not asked again for "), "{note}");
    }

    #[test]
    fn cosine_of_normalized_vectors() {
        let a = normalized(vec![3.0, 4.0]);
        assert!((cosine(&a, &a) - 1.0).abs() < 1e-6);
        assert_eq!(cosine(&a, &normalized(vec![0.0, 0.0])), 0.0);
        assert!(cosine(&a, &normalized(vec![-3.0, -4.0])) < 0.0);
        assert_eq!(cosine(&a, &[1.0]), 0.0);
        assert_eq!(text_hash("a").len(), 64);
    }
}
