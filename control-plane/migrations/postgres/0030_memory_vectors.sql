-- Embedding vectors of an agent's memory for hybrid search (`crate::memory::vectors`).
-- Derived, like `search_docs`: a cache of what the embedding model made of each
-- text, keyed by that model ('<provider>/<model>'), so vectors of two models are
-- never compared. A memory entry or a saved session's message ('doc') is keyed by
-- the hash of its text (its line may move; its text is what was embedded); a thread's
-- message by its id (and the hash, to notice an edit). The vector is its f32s,
-- little-endian, as hex text (portable across both backends' drivers).
CREATE TABLE memory_vectors (
    agent_name  TEXT NOT NULL,
    model       TEXT NOT NULL,
    kind        TEXT NOT NULL,      -- doc | message
    message_id  BIGINT NOT NULL,    -- the message (0 for a doc)
    text_hash   TEXT NOT NULL,      -- sha256 of the text, hex
    dims        BIGINT NOT NULL,
    vector      TEXT NOT NULL
);
CREATE UNIQUE INDEX idx_memory_vectors_key ON memory_vectors(agent_name, model, kind, message_id, text_hash);

-- The embedding model an agent's vectors were made with: a different one configured
-- now pauses vector search for the agent until POST …/memory/reindex embeds again.
CREATE TABLE memory_embedding (
    agent_name  TEXT PRIMARY KEY,
    model       TEXT NOT NULL,
    dims        BIGINT NOT NULL     -- 0 until the first vector is stored
);
