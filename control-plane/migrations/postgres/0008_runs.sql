-- Runs: each attempt of a thread's tool loop. The database, not memory, is what a
-- restarted control plane or a new worker starts from. A thread has at most one run
-- that is not ended (queued or running).
CREATE TABLE runs (
    id             TEXT PRIMARY KEY,                     -- uuid, the run_id on the wire
    agent_name     TEXT NOT NULL,
    thread_id      BIGINT NOT NULL,
    attempt        BIGINT NOT NULL,                     -- 1, then +1 per resumption
    status         TEXT NOT NULL,                        -- queued | running | completed | failed | killed | interrupted
    last_seq       BIGINT NOT NULL DEFAULT 0,           -- the last worker event stored (idempotent ingest)
    first_step     BIGINT NOT NULL,                     -- the step number the run started at
    stalled        BIGINT NOT NULL DEFAULT 0,           -- resumptions in a row, before this run, that stored nothing
    stored         BIGINT NOT NULL DEFAULT 0,           -- messages this run stored
    created_at     TEXT NOT NULL,
    updated_at     TEXT NOT NULL,
    ended_at       TEXT,
    reason         TEXT
);
CREATE INDEX idx_runs_thread ON runs(agent_name, thread_id);
CREATE INDEX idx_runs_open ON runs(status);

-- A message's place in its thread's conversation. A user message sent to a thread
-- whose run is going has none (NULL) until the run takes it into its history
-- (InputTaken): the order is the order the model saw, whatever the arrival order.
ALTER TABLE messages ADD COLUMN position BIGINT;
UPDATE messages SET position = id;
CREATE INDEX idx_messages_position ON messages(agent_name, thread_id, position);

-- One line saying what the thread is about (from its first message).
ALTER TABLE threads ADD COLUMN summary TEXT;
-- The thread this one continues (a reply to a message of an ended thread).
ALTER TABLE threads ADD COLUMN continued_from BIGINT;

-- Frontends' own message ids (a Discord message id …) mapped to a thread and, when it
-- is one of Chorus's messages, to that message: a reply routes by it, after a restart too.
CREATE TABLE message_refs (
    frontend     TEXT NOT NULL,                          -- 'discord', …
    external_id  TEXT NOT NULL,
    agent_name   TEXT NOT NULL,
    thread_id    BIGINT NOT NULL,
    message_id   BIGINT,
    created_at   TEXT NOT NULL,
    PRIMARY KEY (frontend, external_id)
);
