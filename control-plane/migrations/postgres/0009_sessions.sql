-- Context windows and saved sessions (SPEC F1–F4).

-- An agent's context is the messages of its threads since
-- max(context_cleared_at, now - [context] window_hours). Clearing moves this mark;
-- older messages stay. NULL: never cleared.
ALTER TABLE agents ADD COLUMN context_cleared_at TEXT;
-- Seconds without activity after which the agent's context is saved and cleared;
-- 0: never; NULL: the server's [context] idle_timeout_secs.
ALTER TABLE agents ADD COLUMN idle_timeout_secs BIGINT;

-- A thread made by restoring a session names it.
ALTER TABLE threads ADD COLUMN restored_from TEXT;

-- One row per saved session; its messages are in agents/<name>/sessions/<file_name>.
CREATE TABLE sessions (
    id             TEXT PRIMARY KEY,               -- a UUID
    agent_name     TEXT NOT NULL,
    description    TEXT NOT NULL,
    trigger        TEXT NOT NULL,                  -- manual_save | idle_timeout | shutdown | context_clear
    saved_at       TEXT NOT NULL,
    message_count  BIGINT NOT NULL,
    file_name      TEXT NOT NULL                   -- a bare name inside the agent's sessions/
);
CREATE INDEX idx_sessions_agent ON sessions(agent_name, saved_at);
