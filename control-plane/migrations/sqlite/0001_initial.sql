-- Chorus schema, SQLite flavour. Keep it portable: the Postgres migrations mirror it
-- table for table (timestamps are RFC 3339 UTC text, booleans are 0/1 integers).

-- Agent registry. One row per name for the name's whole life: a destroyed agent keeps
-- its row (status = 'destroyed') so audit history stays attached; re-creating the name
-- revives the row.
CREATE TABLE agents (
    name            TEXT PRIMARY KEY,
    status          TEXT NOT NULL DEFAULT 'active',      -- active | destroyed
    model           TEXT,
    system_prompt   TEXT NOT NULL,
    permissions     TEXT NOT NULL DEFAULT 'standard',
    channel_id      TEXT,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL,
    destroyed_at    TEXT,
    next_thread_id  INTEGER NOT NULL DEFAULT 1           -- thread ids are per agent, never reused
);

-- Execution threads: one conversation and its tool loop runs.
CREATE TABLE threads (
    agent_name  TEXT NOT NULL REFERENCES agents(name),
    id          INTEGER NOT NULL,
    status      TEXT NOT NULL,                           -- running | waiting_for_permission | idle | completed | failed
    created_at  TEXT NOT NULL,
    updated_at  TEXT NOT NULL,
    ended_at    TEXT,
    error       TEXT,
    PRIMARY KEY (agent_name, id)
);

-- Every message of every thread (user, assistant, tool), in order of id.
CREATE TABLE messages (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name          TEXT NOT NULL,
    thread_id           INTEGER NOT NULL,
    role                TEXT NOT NULL,                   -- user | assistant | tool
    content             TEXT NOT NULL,
    tool_calls          TEXT,                            -- JSON array of {id, name, arguments}
    tool_call_id        TEXT,
    tool_name           TEXT,
    is_error            INTEGER NOT NULL DEFAULT 0,
    created_at          TEXT NOT NULL,
    discord_message_id  TEXT
);
CREATE INDEX idx_messages_agent_time ON messages(agent_name, created_at);
CREATE INDEX idx_messages_thread ON messages(agent_name, thread_id, id);

-- Step history of each thread, written as each step starts and ends.
CREATE TABLE thread_steps (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name     TEXT NOT NULL,
    thread_id      INTEGER NOT NULL,
    step_number    INTEGER NOT NULL,
    kind           TEXT NOT NULL,                        -- llm_call | tool
    description    TEXT NOT NULL,
    started_at     TEXT NOT NULL,
    ended_at       TEXT,
    duration_ms    INTEGER,
    failed         INTEGER NOT NULL DEFAULT 0,
    input_tokens   INTEGER,
    output_tokens  INTEGER,
    UNIQUE (agent_name, thread_id, step_number)
);

-- Every decision, execution and configuration change, with who triggered it.
CREATE TABLE audit_log (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name     TEXT NOT NULL,
    timestamp      TEXT NOT NULL,
    action_string  TEXT NOT NULL,
    decision       TEXT NOT NULL,
    user_id        TEXT,
    detail         TEXT
);
CREATE INDEX idx_audit_agent ON audit_log(agent_name, id);
