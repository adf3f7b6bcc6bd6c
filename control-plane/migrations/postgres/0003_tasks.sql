-- Background tasks (SPEC D4): bash commands started with run_in_background, which
-- outlive their call. The worker runs them; this is the record. A task is keyed by
-- its agent, the worker generation that ran it and the worker's id for it (ids
-- restart with each worker process).
CREATE TABLE tasks (
    agent_name  TEXT NOT NULL,
    generation  BIGINT NOT NULL,
    task_id     BIGINT NOT NULL,
    command     TEXT NOT NULL,                 -- secrets scrubbed
    pid         BIGINT NOT NULL,              -- its shell, which leads its process group
    status      TEXT NOT NULL,                 -- running | completed | failed | stopped | lost
    exit_code   BIGINT,
    detail      TEXT,                          -- how it ended, in words
    started_at  TEXT NOT NULL,
    ended_at    TEXT,
    PRIMARY KEY (agent_name, generation, task_id)
);
CREATE INDEX idx_tasks_running ON tasks(status);
