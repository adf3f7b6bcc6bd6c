-- The task board (issue 28, control-plane/src/tasks/): tasks, each attempt at one
-- (a run: the planner's or a worker's thread), its append-only history, the
-- planner's questions (every round kept) and its attachments (the files live under
-- <data>/tasks/<id>/attachments/; this is their record). Lists and objects a task
-- carries whole (plan lists, the report, the agent chain, what it waits on) are JSON
-- text. Times are RFC 3339 UTC text, like every table's.
CREATE TABLE tasks (
    id                  INTEGER PRIMARY KEY AUTOINCREMENT,
    title               TEXT NOT NULL,
    description         TEXT NOT NULL,
    status              TEXT NOT NULL,          -- TaskStatus's word
    review              INTEGER NOT NULL DEFAULT 0,
    status_since        TEXT NOT NULL,
    created_at          TEXT NOT NULL,
    updated_at          TEXT NOT NULL,
    created_by          TEXT NOT NULL,          -- a principal's text
    parent_id           INTEGER REFERENCES tasks(id) ON DELETE SET NULL,  -- a delegated child's parent
    summary             TEXT,
    requirements        TEXT NOT NULL DEFAULT '[]',
    acceptance_criteria TEXT NOT NULL DEFAULT '[]',
    steps               TEXT NOT NULL DEFAULT '[]',
    assignee            TEXT,
    blocked_reason      TEXT,
    report              TEXT,                   -- JSON: the completion report that ended it
    chain               TEXT NOT NULL DEFAULT '[]',
    planner_thread      INTEGER,                -- the planner's thread (of agent planner_agent)
    planner_agent       TEXT,
    time_limit_secs     INTEGER NOT NULL,
    model_call_limit    INTEGER NOT NULL
);
CREATE INDEX idx_tasks_status ON tasks(status);
CREATE INDEX idx_tasks_parent ON tasks(parent_id);

CREATE TABLE task_runs (
    id             INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id        INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    role           TEXT NOT NULL,               -- planner | worker | answerer
    agent_name     TEXT NOT NULL,
    backend        TEXT NOT NULL,
    thread_id      INTEGER,
    finishing      TEXT,                        -- JSON: the finishing call the run made
    outcome        TEXT,                        -- RunOutcome's word; NULL while it goes
    report         TEXT,
    input_tokens   INTEGER NOT NULL DEFAULT 0,
    output_tokens  INTEGER NOT NULL DEFAULT 0,
    model_calls    INTEGER NOT NULL DEFAULT 0,
    started_at     TEXT NOT NULL,
    ended_at       TEXT
);
CREATE INDEX idx_task_runs_task ON task_runs(task_id);
CREATE INDEX idx_task_runs_thread ON task_runs(agent_name, thread_id);

CREATE TABLE task_events (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id   INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    at        TEXT NOT NULL,
    kind      TEXT NOT NULL,                    -- TaskEventKind's word
    actor     TEXT NOT NULL,                    -- "by": a principal's text
    data      TEXT NOT NULL DEFAULT '{}'
);
CREATE INDEX idx_task_events_task ON task_events(task_id, id);

-- A planner may ask several rounds; question ids (q1, …) are the planner's, unique
-- within a round.
CREATE TABLE task_questions (
    task_id       INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    round         INTEGER NOT NULL,
    question_id   TEXT NOT NULL,
    position      INTEGER NOT NULL,
    question      TEXT NOT NULL,
    options       TEXT NOT NULL DEFAULT '[]',
    multi_select  INTEGER NOT NULL DEFAULT 0,
    asked_at      TEXT NOT NULL,
    answer        TEXT,
    answered_by   TEXT,
    answered_at   TEXT,
    PRIMARY KEY (task_id, round, question_id)
);

CREATE TABLE task_attachments (
    task_id      INTEGER NOT NULL REFERENCES tasks(id) ON DELETE CASCADE,
    name         TEXT NOT NULL,
    size         INTEGER NOT NULL,
    uploaded_by  TEXT NOT NULL,
    uploaded_at  TEXT NOT NULL,
    PRIMARY KEY (task_id, name)
);
