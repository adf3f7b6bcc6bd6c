-- Heartbeats (issue 30, J5; control-plane/src/heartbeat/): per agent, every
-- `heartbeat_minutes` the agent reads its HEARTBEAT.md. The setting belongs to one
-- creation of the agent's name, like its schedules: a re-created agent starts with
-- its heartbeat off. Times are RFC 3339 UTC text, like every table's.
CREATE TABLE agent_heartbeats (
    agent_name   TEXT NOT NULL,
    incarnation  TEXT NOT NULL,
    minutes      INTEGER NOT NULL DEFAULT 0,  -- 0: off
    model        TEXT,                        -- the heartbeat's model; NULL: the agent's
    next_at      TEXT,                        -- the next periodic heartbeat; NULL: off
    quiet_hash   TEXT,                        -- HEARTBEAT.md's hash at the last quiet answer
    updated_at   TEXT NOT NULL,
    PRIMARY KEY (agent_name, incarnation)
);
CREATE INDEX idx_agent_heartbeats_next ON agent_heartbeats(next_at);

-- Each heartbeat: periodic or asked for, and what came of it.
CREATE TABLE heartbeats (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name   TEXT NOT NULL,
    incarnation  TEXT NOT NULL,
    cause        TEXT NOT NULL,               -- HeartbeatCause's word: periodic | manual
    outcome      TEXT NOT NULL,               -- HeartbeatOutcome's word
    reason       TEXT,                        -- why skipped or failed
    thread_id    INTEGER,
    file_hash    TEXT,                        -- HEARTBEAT.md's hash when it was read
    tokens       INTEGER NOT NULL DEFAULT 0,  -- input and output tokens of its thread
    started_at   TEXT NOT NULL,
    ended_at     TEXT
);
CREATE INDEX idx_heartbeats_agent ON heartbeats(agent_name, incarnation);
CREATE INDEX idx_heartbeats_outcome ON heartbeats(outcome);
