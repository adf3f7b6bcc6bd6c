-- Schedules (issue 30, control-plane/src/schedules/): an agent's prompts that start a
-- thread on a cron expression in a zone, or once at an instant; and each firing's run.
-- A schedule belongs to one incarnation of its agent's name: a destroyed and
-- re-created agent does not inherit the old one's schedules. Times are RFC 3339 UTC
-- text, like every table's; the zone only turns the cron's local times into instants.
CREATE TABLE schedules (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    agent_name   TEXT NOT NULL,
    incarnation  TEXT NOT NULL,
    prompt       TEXT NOT NULL,
    cron         TEXT,                           -- five fields; NULL for a one-shot
    timezone     TEXT,                           -- IANA zone of the cron; NULL for a one-shot
    run_at       TEXT,                           -- the one-shot's instant; NULL for a cron
    on_missed    TEXT NOT NULL DEFAULT 'run_once', -- OnMissed's word
    paused       INTEGER NOT NULL DEFAULT 0,
    failures     INTEGER NOT NULL DEFAULT 0,        -- failed runs in a row
    next_run_at  TEXT,                           -- NULL: paused, or a one-shot that is done
    created_by   TEXT NOT NULL,                  -- a principal's text
    created_at   TEXT NOT NULL,
    updated_at   TEXT NOT NULL
);
CREATE INDEX idx_schedules_agent ON schedules(agent_name);
CREATE INDEX idx_schedules_next ON schedules(next_run_at);

CREATE TABLE schedule_runs (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule_id  INTEGER NOT NULL REFERENCES schedules(id) ON DELETE CASCADE,
    cause        TEXT NOT NULL,                  -- RunCause's word: schedule | missed | manual
    status       TEXT NOT NULL,                  -- ScheduleRunStatus's word
    thread_id    INTEGER,
    error        TEXT,
    tokens       INTEGER NOT NULL DEFAULT 0,        -- input and output tokens of its thread
    started_at   TEXT NOT NULL,
    ended_at     TEXT
);
CREATE INDEX idx_schedule_runs_schedule ON schedule_runs(schedule_id);
CREATE INDEX idx_schedule_runs_status ON schedule_runs(status);
