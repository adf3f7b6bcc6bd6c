-- Full-text search over an agent's memory (`crate::search`). The files are the truth
-- and these are derived: `search_docs` holds the entries of the memory files and the
-- user and assistant messages of saved sessions, replaced whole per file or session
-- whenever the control plane indexes them; `messages_fts` indexes the `messages`
-- table itself (external content), kept by the triggers below in the transaction
-- that stores a message. Both can be rebuilt from their source with the same answers.
CREATE VIRTUAL TABLE search_docs USING fts5(
    text,
    agent_name UNINDEXED,
    source UNINDEXED,       -- memory | session
    path UNINDEXED,         -- memory/MEMORY.md, memory/YYYY-MM-DD.md, sessions/<file>
    line UNINDEXED,         -- the line in the memory file (0 for a session)
    session_id UNINDEXED,   -- '' for a memory entry
    thread_id UNINDEXED     -- the thread a session's message came from (0: none)
);

CREATE VIRTUAL TABLE messages_fts USING fts5(content, content='messages', content_rowid='id');
INSERT INTO messages_fts(messages_fts) VALUES ('rebuild');

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
END;
CREATE TRIGGER messages_fts_update AFTER UPDATE OF content ON messages BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, old.content);
    INSERT INTO messages_fts(rowid, content) VALUES (new.id, new.content);
END;
