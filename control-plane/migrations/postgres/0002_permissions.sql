-- Permissions, approvals and a richer audit log (SPEC D1–D5).

-- What an agent does with a tool call its profile says to ASK about:
-- 'prompt' (ask a person), or resolve it without asking: 'allow' or 'deny'
-- (task agents never prompt).
ALTER TABLE agents ADD COLUMN on_ask TEXT NOT NULL DEFAULT 'prompt';

-- Who started a thread: its user is the one whose rights count for self-edits.
ALTER TABLE threads ADD COLUMN created_by TEXT;

-- Tool decisions are tied to their thread and call, and get the call's result.
ALTER TABLE audit_log ADD COLUMN thread_id BIGINT;
ALTER TABLE audit_log ADD COLUMN call_id TEXT;
ALTER TABLE audit_log ADD COLUMN result TEXT;
CREATE INDEX idx_audit_call ON audit_log(agent_name, call_id);

-- Requests for a person's answer. A pending row whose control plane stopped is
-- cancelled at the next start (nobody waits for it any more).
CREATE TABLE approvals (
    id            TEXT PRIMARY KEY,
    agent_name    TEXT NOT NULL,
    thread_id     BIGINT NOT NULL,
    call_id       TEXT NOT NULL,
    tool          TEXT NOT NULL,
    action        TEXT NOT NULL,                 -- the action strings, newline separated
    detail        TEXT,                          -- the call's arguments, secrets redacted
    status        TEXT NOT NULL,                 -- pending | approved | denied | expired | cancelled
    requested_by  TEXT,                          -- the thread's user
    requested_at  TEXT NOT NULL,
    expires_at    TEXT NOT NULL,
    decided_at    TEXT,
    decided_by    TEXT
);
CREATE INDEX idx_approvals_status ON approvals(status, requested_at);
