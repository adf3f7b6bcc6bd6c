-- Dial-in workers trusted one by one.
--
-- A per-worker join credential: an admin creates it (the token is shown once; only
-- its SHA-256 is kept) and may revoke it. Revoked rows stay, so the name keeps its
-- volumes; creating the name again gives it a new token (a rotation).
CREATE TABLE worker_credentials (
    name         TEXT PRIMARY KEY,
    token_sha256 TEXT NOT NULL UNIQUE,
    created_at   TEXT NOT NULL,
    created_by   TEXT,
    revoked_at   TEXT
);

-- Which per-worker credential a volume (the id a dial-in worker names in its
-- Hello) belongs to: the first one to present it. Another credential presenting
-- it is refused.
CREATE TABLE worker_volumes (
    volume     TEXT PRIMARY KEY,
    credential TEXT NOT NULL,
    bound_at   TEXT NOT NULL
);

-- Where each creation of an agent was placed: the volumes whose workers were
-- given it. A directory a joining worker names counts only where it was placed.
-- Agents from before this table: volume '*', taken by the first volume that names
-- their directory.
CREATE TABLE agent_placements (
    agent_name  TEXT NOT NULL,
    incarnation TEXT NOT NULL,
    volume      TEXT NOT NULL,
    placed_at   TEXT NOT NULL,
    PRIMARY KEY (agent_name, incarnation, volume)
);
CREATE INDEX idx_agent_placements_volume ON agent_placements(volume);
INSERT INTO agent_placements (agent_name, incarnation, volume, placed_at)
    SELECT name, incarnation, '*', created_at FROM agents;

-- The dial-in worker whose report caused the row (its credential's name, or
-- 'join-token' for the shared one); NULL for the control plane's own workers.
ALTER TABLE audit_log ADD COLUMN worker TEXT;
