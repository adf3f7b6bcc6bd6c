-- The task engine's state of each thread that works on a task (a planner's, a
-- worker's, an answerer's), by the task run it belongs to: the control call its
-- current turn made (JSON, cleared when the turn's end is applied), whether it was
-- sent the one follow-up, the agents from the task's root down to it (for the
-- loop and depth checks), and the run that asked it (an answerer's).
CREATE TABLE task_turns (
    run_id       BIGINT PRIMARY KEY,
    task_id      BIGINT NOT NULL,
    agent_name   TEXT NOT NULL,
    thread_id    BIGINT NOT NULL,
    role         TEXT NOT NULL,
    chain        TEXT NOT NULL,
    asked_by     BIGINT,
    call         TEXT,
    followed_up  INTEGER NOT NULL DEFAULT 0,
    UNIQUE (agent_name, thread_id)
);
