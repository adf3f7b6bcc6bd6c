-- Threads a front end owes an answer to: a Discord message started (or went into)
-- the thread, and its answer is posted as a reply to `reply_to` in `channel` when
-- the thread ends. The row goes once the answer is posted; rows left by a control
-- plane that stopped are followed again at the next start, so an answer is never
-- lost to a restart.
CREATE TABLE answers_owed (
    frontend   TEXT NOT NULL,
    agent_name TEXT NOT NULL,
    thread_id  BIGINT NOT NULL,
    channel    TEXT NOT NULL,
    reply_to   TEXT NOT NULL,
    created_at TEXT NOT NULL,
    PRIMARY KEY (frontend, agent_name, thread_id)
);
